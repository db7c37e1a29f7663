//! Approximate search the Faiss way: [`kmeans()`] on the device and the inverted-file indexes
//! [`IvfFlat`] (Faiss's `IndexIVFFlat`), saved and loaded by [`IvfFlat::save`] /
//! [`IvfFlat::load`] (the format is in `file.rs`), and [`IvfPq`] (Faiss's `IndexIVFPQ`, IVFADC,
//! with the [`ProductQuantizer`]; see `ivfpq.rs`, `pq.rs`, `pq_scan.rs`, `pq_file.rs`), and
//! [`IvfShards`], an IVF-Flat index over several devices (`shards.rs`). This file is the
//! folder's face (its modules and exports); what both indexes carry — their shared fields and
//! accessors (`IvfCore`, which both dereference to), the search options and report, the one
//! search skeleton over each index's list scan — is in `index.rs` (Faiss's
//! `IVFBase`), IVF-Flat in `flat.rs`. May touch the device context, the device table, the exact
//! k-NN, the host table and this folder's files.
//!
//! # IVF-Flat
//! *Train*: k-means of the training rows into `nlist` centroids (rows normalised first for
//! cosine, as spherical k-means does). *Add*: each row goes to the list of its nearest centroid
//! by the index's metric (the device's k-NN with k = 1 against the centroids) and gets the next
//! id (0, 1, … in the order added). *Search*: the `nprobe` nearest centroids of each query (the
//! device's exact k-NN with k = nprobe), then **one dispatch** that scans, for every query, the
//! rows of the lists it probes and keeps its k best (`scan.rs`, `shaders/ivf_scan.comp`: a
//! workgroup a query, the lists in one slab interleaved by blocks of 32 rows, a sorted queue of
//! at most 8 pairs per invocation and a workgroup merge, again over the same rows in the rare
//! case one invocation held more of the k best — Faiss GPU's IVF scan and block select).
//! A search is one submission (`resident.rs`, IVF-PQ's alike): the queries' copy, the coarse search and the
//! packing of its probes, the scan reading them there, and the copy of the keys, ids and probes
//! into a read-back buffer, read once after one wait — with every buffer, the coarse scratch
//! and the scan's descriptor set kept in the index from the last call. k ≤ [`MAX_SCAN_K`] and D ≤ [`MAX_SCAN_DIM`]; past them each probed list is searched
//! by the exact k-NN with the queries that probe it and the per-list k-lists merged on the host.
//!
//! The slab is built on the first search; every list gets room to grow (a quarter more, at least
//! a block of 32 rows), so a later add writes only the blocks that hold its new rows, their norms
//! and ids, and the lists' sizes; an add that outgrows a list's room makes the next search build
//! the slab again ([`IvfFlat::slab_uploads`] counts both).
//!
//! # Why nprobe = nlist is the exact search, bit for bit
//! A (query, row) key is one fused multiply-add chain from the stored row, the query and
//! (cosine) the row's own inverse norm — it does not depend on which other rows share the
//! device table (see [`crate::multi`]); the list scan computes it with the same chain. The scan
//! orders `(key, id)` pairs by the rows' ids, and its block select keeps the k best of a query's
//! candidates exactly under that order whatever invocation saw which; the per-list path's lists
//! hold their rows in ascending id order, so each list's k best under the device's order on
//! `(key, position)` are its k best on `(key, id)`, and the host merge sorts their union by
//! `(key, id)` (as [`crate::multi`] merges shards). With every list probed, either way, the
//! result is [`crate::knn::knn_flat`]'s on the whole table in the same precision: the same ids
//! and distance bits, ties and padding included.

mod coarse;
mod file;
mod flat;
mod index;
mod ivfpq;
pub mod kmeans;
mod kmeans_batch;
pub mod pq;
mod pq_file;
mod pq_rerank;
mod pq_scan;
mod resident;
mod scan;
mod shards;
mod update;

pub use file::{IVF_MAGIC, IVF_VERSION};
pub use flat::{IvfFlat, IvfOptions};
#[cfg(feature = "lua")]
pub(crate) use index::InvertedFile;
pub use index::{widened_nprobe, IvfSearch, IvfSearchReport, DEFAULT_NPROBE};
pub use ivfpq::{IvfPq, IvfPqOptions};
pub use kmeans::{assign, kmeans, KMeans, KMeansOptions};
pub use kmeans_batch::kmeans_subspaces;
pub use pq::ProductQuantizer;
pub use pq_file::{IVFPQ_MAGIC, IVFPQ_VERSION};
pub use scan::{MAX_SCAN_DIM, MAX_SCAN_K};
pub use shards::IvfShards;
