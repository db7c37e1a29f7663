//! Writing and reading the sequence caches of SPEC §Files, so that a failed run never leaves a
//! partial or stale file behind. Every public item is re-exported here from its submodule:
//!
//! - `pending`: [`PendingFile`] (temporary file, renamed into place), which every writer uses.
//! - `json_stream`: the streaming JSON writer shared by the two JSON caches and the merge.
//! - `sequences`: [`JsonCacheWriter`], the sequence cache `diversity_cache.json`.
//! - `rows`: row bookkeeping and the pre-sized row file shared by the writers and readers.
//! - `binary`: the user's binary cache, [`BinaryCacheWriter`] and the reader [`BinaryCache`].
//! - `rankings`: [`RankingsWriter`], the similarity rankings cache.
//! - `knn_graph`: the k-NN graph file, [`KnnGraphWriter`], [`KnnGraph`], [`KnnMetric`], `KNN_*`.
//! - `metadata`: [`read_metadata`], the `metadata` object of a JSON cache.
//! - `merge`: [`merge_caches`] of a sharded run's partial caches, [`SHARD_KEYS`], [`ShardLayout`].

mod binary;
mod json_stream;
mod knn_graph;
mod merge;
mod metadata;
mod pending;
mod rankings;
mod rows;
mod sequences;

pub use binary::{BinaryCache, BinaryCacheWriter};
pub use knn_graph::{
    KnnGraph, KnnGraphWriter, KnnMetric, KNN_HEADER, KNN_MAGIC, KNN_PAD, KNN_VERSION,
};
pub use merge::{merge_caches, shard_len, MergeReport, ShardLayout, SHARD_KEYS};
pub use metadata::read_metadata;
pub use pending::{stale_removed, PendingFile};
pub use rankings::RankingsWriter;
pub use sequences::JsonCacheWriter;
