//! Cache writers and readers and the fp16 `.bin` table format: round trips, the
//! streaming JSON writer's parallel formatting, and the bad-input cases that concern output
//! files — no partial or stale file is ever left behind. Error tests check the variant and the
//! words a user needs to see. No Vulkan device is needed.

use diversity::cache::{
    merge_caches, shard_len, BinaryCache, BinaryCacheWriter, JsonCacheWriter, KnnGraph,
    KnnGraphWriter, KnnMetric, MergeReport, PendingFile, RankingsWriter, ShardLayout, KNN_PAD,
};
use diversity::error::Error;
use diversity::files::{
    bytes_checksum, file_checksum, fp16_bin_sidecar, load_fp16_bin, load_table, save_fp16_bin,
};
use diversity::table::{Precision, Table};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[path = "../common/mod.rs"]
mod common;
use common::{reseal, TempDir};

/// A deterministic permutation-like row for start `s`: `s` first, then a stride walk.
fn synthetic_row(s: u32, n: u32, len: usize) -> Vec<u32> {
    let stride = 7919 % n.max(1); // a prime, coprime with most n
    (0..len as u64)
        .map(|k| ((s as u64 + k * stride.max(1) as u64) % n as u64) as u32)
        .collect()
}

/// Check an error's variant by `is` and that its message contains every word.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(
    r: diversity::error::Result<T>,
    is: fn(&Error) -> bool,
    words: &[&str],
) -> Error {
    match r {
        Err(e) if is(&e) => {
            let msg = e.to_string();
            for w in words {
                assert!(msg.contains(w), "message lacks {w:?}: {msg}");
            }
            e
        }
        Err(e) => panic!("wrong error variant: {e:?}"),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

fn is_invalid(e: &Error) -> bool {
    matches!(e, Error::Invalid(_))
}
fn is_format(e: &Error) -> bool {
    matches!(e, Error::Format { .. })
}
fn is_io(e: &Error) -> bool {
    matches!(e, Error::Io { .. })
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).expect("read cache");
    serde_json::from_slice(&bytes).expect("cache is valid JSON")
}

fn metadata() -> Value {
    json!({
        "model": "test-model \"quoted\" ü",
        "num_poems": 5,
        "algorithm": "diversity-scan",
        "generated_at": "2026-01-01T00:00:00Z",
        "batch_size": 3,
        "top_k": null,
        "space": "mean-centered-v1",
        "precision": "fp16",
        "mode": "scan",
        "device": "test",
        "nested": {"a": [1, 2.5, -3]}
    })
}

/// Five full sequences over five rows (row s starts with s).
fn five() -> Vec<(u32, Vec<u32>)> {
    vec![
        (0, vec![0, 3, 1, 4, 2]),
        (1, vec![1, 0, 2, 4, 3]),
        (2, vec![2, 4, 0, 1, 3]),
        (3, vec![3, 1, 2, 0, 4]),
        (4, vec![4, 2, 3, 0, 1]),
    ]
}

mod binary;
mod json;
mod rankings;
mod shards;
