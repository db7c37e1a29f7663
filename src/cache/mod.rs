//! Writing and reading the sequence caches (`diversity_cache.json`, the uint32 binary cache, the
//! k-NN graph), so that a failed run never leaves a partial or stale file behind. The cache
//! modules may touch each other, [`crate::error`], the checksum, the atomic writer, the host
//! table (a table's content checksum) and [`crate::files::same_file`] (a merge's output is never
//! one of its inputs); no device and no engine: results reach them as plain rows.
//!
//! Every public item is re-exported here from its submodule:
//!
//! - [`PendingFile`] (temporary file, renamed into place), which every writer uses, comes from
//!   the crate's atomic-write module below this one.
//! - `checksum`: [`table_checksum`], and the checksum a JSON cache carries of itself
//!   ([`CHECKSUM_KEY`], [`verify_checksum`]).
//! - `json_stream`: the streaming JSON writer shared by the two JSON caches and the merge.
//! - `sequences`: [`JsonCacheWriter`], the sequence cache `diversity_cache.json`.
//! - `rows`: row bookkeeping and the pre-sized row file shared by the writers and readers.
//! - `binary`: the user's binary cache, [`BinaryCacheWriter`] and the reader [`BinaryCache`].
//! - `rankings`: [`RankingsWriter`], the similarity rankings cache.
//! - `knn_graph`: the k-NN graph file, [`KnnGraphWriter`], [`KnnGraph`], [`KnnMetric`], `KNN_*`.
//! - `metadata`: [`read_metadata`], the `metadata` object of a JSON cache.
//! - `merge`: [`merge_caches`] / [`merge_rankings`] of a sharded run's partial caches,
//!   [`SHARD_KEYS`], [`ShardLayout`].
//! - `graph_shard`: [`KnnGraphShard`], a shard's slice of a k-NN graph, and [`merge_graphs`].

mod binary;
mod checksum;
mod graph_shard;
mod json_stream;
mod knn_graph;
mod merge;
mod metadata;
mod rankings;
mod read_rows;
mod rows;
mod sequences;

pub use crate::pending_file::{stale_removed, PendingFile};
pub use binary::{BinaryCache, BinaryCacheWriter};
pub use checksum::{table_checksum, verify_checksum, CHECKSUM_KEY};
pub use graph_shard::{merge_graphs, KnnGraphShard, KNN_SHARD_MAGIC};
pub use knn_graph::{KnnGraph, KnnGraphWriter, KnnMetric, KNN_HEADER, KNN_MAGIC, KNN_VERSION};
pub use merge::{
    merge_caches, merge_rankings, shard_len, MergeReport, ShardLayout, RANKINGS_SHARD_KEYS,
    SHARD_KEYS, SHARD_TABLE_KEY,
};
pub use metadata::read_metadata;
pub use rankings::RankingsWriter;
pub use read_rows::read_sequence_rows;
pub use rows::KNN_PAD;
pub use sequences::JsonCacheWriter;
