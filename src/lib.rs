//! `diversity`: diversity sequences, similarity rankings and exact k-NN computed by Vulkan
//! compute shaders on any device — a discrete GPU or Mesa's lavapipe on a CPU — for a LuaJIT
//! pipeline that loads this crate with `require "diversity"`. It declares the modules and
//! re-exports their public types; it holds no logic and touches nothing itself.
//!
//! The data path reads top-down: [`device`] (instance, capabilities, pipelines; with the private
//! `memory` (buffers, transfers), `spirv` (the shaders, push-constant checks) and `submit`
//! (command submission)) → [`table`] (the host table, centering, fp16 rounding) →
//! [`device_table`] (the table on the device, which every engine reads) → the engines, peers over
//! the per-batch scaffold of [`batch`]: [`scan`] (every candidate every step, in every shape) or
//! [`gram`] (the Gram-matrix engine; [`gram::mode_for`] is the `auto` rule) → results, written by
//! [`cache`]; [`knn`](mod@knn) (exact k-NN with GPU k-selection) → [`rankings`] (every item's
//! ranking of the others, the k-NN graph); [`ivf`] (k-means on the device, the IVF-Flat and IVF-PQ
//! approximate indexes); [`reference`](mod@reference) is the float64 CPU
//! reference and the exactness oracle; [`files`] loads tables from disk.
#![warn(missing_docs)]

pub mod batch;
pub mod cache;
pub mod capi;
pub mod checkpoint;
mod checksum;
pub mod device;
pub mod device_table;
pub mod engine;
pub mod error;
pub mod files;
pub mod gram;
pub mod grow;
pub mod host;
pub mod ivf;
pub mod knn;
/// The k-NN cross-check ([`knn::verify`]), at its old path.
pub mod knn_verify {
    pub use crate::knn::verify::*;
}
pub mod limits;
#[cfg(feature = "lua")]
mod lua;
mod memory;
pub mod metric;
pub mod mode;
pub mod multi;
mod names;
mod par;
mod pending_file;
pub mod rankings;
pub mod reference;
pub mod scan;
pub mod sequencer;
pub mod settings;
mod spirv;
mod submit;
pub mod table;
pub mod table_cache;

pub use batch::StepReport;
pub use device::{Capabilities, Context, ContextOptions, HostOps};
pub use device_table::DeviceTable;
pub use engine::{Engine, Job, JobOptions, ModeChoice, ModeReason};
pub use error::{Error, Result};
pub use gram::{Gram, GramJob, GramOptions, Placement};
pub use ivf::{kmeans, IvfFlat, IvfOptions, IvfPq, IvfPqOptions, IvfSearch, KMeans, KMeansOptions};
pub use knn::{knn, KnnOptions, KnnResult};
pub use metric::Metric;
pub use mode::Mode;
pub use multi::{open_devices, IndexReplicas, IndexShards};
pub use scan::{ScanJob, ScanKernel, ScanOptions, Shape};
pub use sequencer::{GramPolicy, Sequencer, SequencerOptions, SequencerReport};
pub use table::{Precision, Table};
