//! `diversity`: diversity sequences, similarity rankings and exact k-NN computed by Vulkan
//! compute shaders on any device — a discrete GPU or Mesa's lavapipe on a CPU — for a LuaJIT
//! pipeline that loads this crate with `require "diversity"`.
//!
//! The data path reads top-down: [`device`] (instance, capabilities, memory) → [`table`] (the
//! host table, centering, fp16 rounding) → [`scan`] (the table on the device and the scan engine
//! in every shape) or [`gram`] (the Gram-matrix engine; [`gram::mode_for`] is the `auto` rule) →
//! results, written by [`cache`]; [`knn`](mod@knn) (exact k-NN with GPU k-selection) →
//! [`rankings`] (every item's ranking of the others, the k-NN graph);
//! [`reference`](mod@reference) is the float64 CPU reference and the exactness oracle; [`files`]
//! loads tables from disk.
#![warn(missing_docs)]

pub mod cache;
pub mod device;
pub mod error;
pub mod files;
pub mod gram;
pub mod knn;
/// The k-NN cross-check ([`knn::verify`]), at its old path.
pub mod knn_verify {
    pub use crate::knn::verify::*;
}
pub mod limits;
#[cfg(feature = "lua")]
mod lua;
pub mod multi;
pub mod rankings;
pub mod reference;
pub mod scan;
mod spirv;
pub mod table;

pub use device::{Capabilities, Context, ContextOptions};
pub use error::{Error, Result};
pub use gram::{Gram, GramJob, GramOptions, Mode, Placement};
pub use knn::{knn, KnnOptions, KnnResult, Metric};
pub use multi::{open_devices, IndexReplicas, IndexShards};
pub use scan::{DeviceTable, ScanJob, ScanKernel, ScanOptions, Shape};
pub use table::{Precision, Table};
