//! [`RankingsWriter`]: the streaming writer of the similarity rankings cache. May touch the JSON
//! writer of `json_stream.rs`, the row checks of `rows.rs` and the crate's errors; no device.

use super::json_stream::{json_kind, IdText, JsonStream};
use super::rows::{check_flat_len, rows_u32, ListChecker, RowSet};
use crate::error::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// The metadata fields a [`RankingsWriter`] writes itself; the caller's extra fields may not
/// repeat them.
const RANKINGS_FIELDS: [&str; 5] = ["total_poems", "algorithm", "format", "top_k", "checksum"];

/// Streaming writer of the user's similarity rankings cache:
/// `{"metadata":{"total_poems":N,"algorithm":"…","format":"pre_sorted_rankings","top_k":K,
/// …extra,"checksum":"fnv1a64:…"},"rankings":{"<key>":[value, …], …}}`.
///
/// `checksum` ([`CHECKSUM_KEY`]) is the file's own, filled in when it is finished, so a
/// reader can tell the cache it wrote from one edited or damaged since
/// ([`verify_checksum`]).
///
/// [`CHECKSUM_KEY`]: super::CHECKSUM_KEY
/// [`verify_checksum`]: super::verify_checksum
///
/// Each item's list holds the other items, most similar first: `top_k` of them, or all N − 1
/// when `top_k` is `None` (then the metadata says `"top_k":null`); the row length is
/// `min(top_k, N − 1)`. Keys and values go through the row ids like [`JsonCacheWriter`]'s (a key
/// is the id as a JSON string, values are the ids as they are, strings or numbers); without ids
/// they are 0-based indices.
///
/// Rows arrive in batches in any order ([`write_batch`](Self::write_batch)), each item at most
/// once, and are formatted straight into a [`PendingFile`]: host memory is O(batch) plus O(N)
/// bits and stamps for the checks, never O(N²). [`finish`](Self::finish) requires every item's
/// ranking; [`finish_partial`](Self::finish_partial) is the explicit choice of a cache holding
/// only the items written (a run over selected items). Either fsyncs and renames; dropping the
/// writer unfinished leaves no file behind.
///
/// A bad batch is refused whole with [`Error::Invalid`] naming the item — an item out of range,
/// written before or twice in the batch, a list entry out of range, equal to the item itself or
/// repeated, a wrong row length or `flat` length — and nothing of it is written: the writer can go
/// on. The writer cannot check the order (it has no similarities); the caller sorts.
///
/// [`JsonCacheWriter`]: super::JsonCacheWriter
/// [`PendingFile`]: super::PendingFile
#[derive(Debug)]
pub struct RankingsWriter {
    stream: JsonStream,
    rows: RowSet,
    check: ListChecker,
    n: usize,
    top_k: Option<usize>,
    len: usize,
}

impl RankingsWriter {
    /// Start a rankings cache of `n` items at `path`: create the temporary file beside it (the
    /// output location check) and write the metadata and `"rankings":{`.
    ///
    /// `extra` is a JSON object of further metadata fields (model, generated_at, …) written after
    /// the four fixed ones, in its order, or `null`; it may not contain `total_poems`,
    /// `algorithm`, `format`, `top_k` or `checksum`. `ids`, when given, are the table's row ids
    /// (strings or numbers, unique), exactly `n` of them. `n` ≥ 1; `top_k`, when given, ≥ 1 (a
    /// `top_k` of N or more means all N − 1).
    pub fn create(
        path: &Path,
        n: usize,
        top_k: Option<usize>,
        algorithm: &str,
        extra: &Value,
        ids: Option<Vec<Value>>,
    ) -> Result<Self> {
        let invalid = |msg: String| Error::Invalid(format!("{}: {msg}", path.display()));
        rows_u32(path, "rankings cache", n)?;
        if top_k == Some(0) {
            return Err(invalid(
                "top_k = 0: a ranking needs at least one entry (None means all)".into(),
            ));
        }
        let extra = match extra {
            Value::Null => None,
            Value::Object(map) => Some(map),
            other => {
                return Err(invalid(format!(
                    "extra rankings metadata must be a JSON object or null, got {}",
                    json_kind(other)
                )))
            }
        };
        if let Some(key) = extra
            .iter()
            .flat_map(|m| m.keys())
            .find(|k| RANKINGS_FIELDS.contains(&k.as_str()))
        {
            return Err(invalid(format!(
                "extra rankings metadata repeats the field {key:?}, which the writer sets \
                 itself (total_poems, algorithm, format, top_k, checksum)"
            )));
        }
        if let Some(ids) = &ids {
            if ids.len() != n {
                return Err(invalid(format!(
                    "{} ids for a rankings cache of N = {n} items; give one id per item",
                    ids.len()
                )));
            }
        }
        let ids = IdText::of(path, ids.as_deref())?;
        let mut meta = format!(
            "{{\"total_poems\":{n},\"algorithm\":{},\"format\":\"pre_sorted_rankings\",\"top_k\":{}",
            Value::from(algorithm),
            top_k.map_or_else(|| "null".to_string(), |k| k.to_string())
        );
        for (key, value) in extra.into_iter().flatten() {
            meta.push_str(&format!(",{}:{value}", Value::from(key.as_str())));
        }
        meta.push('}');
        Ok(RankingsWriter {
            stream: JsonStream::create(
                path,
                "rankings cache",
                meta.as_bytes(),
                "rankings",
                ids,
                true,
            )?,
            rows: RowSet::new(n),
            check: ListChecker::new(n),
            n,
            top_k,
            len: top_k.map_or(n - 1, |k| k.min(n - 1)),
        })
    }

    /// Entries per ranking: `min(top_k, N − 1)`, or N − 1 for all.
    pub fn row_len(&self) -> usize {
        self.len
    }

    /// Number of items N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Set how many threads format large batches (as [`JsonCacheWriter::set_threads`]).
    ///
    /// [`JsonCacheWriter::set_threads`]: super::JsonCacheWriter::set_threads
    pub fn set_threads(&mut self, threads: usize) {
        self.stream.set_threads(threads);
    }

    /// Append the ranking of one item.
    pub fn write_ranking(&mut self, item: u32, list: &[u32]) -> Result<()> {
        self.write_batch(&[item], list, list.len())
    }

    /// Append a batch: row `i` of `flat` (`len` entries, which must be
    /// [`row_len`](Self::row_len)) is the ranking of `items[i]`. Checked whole before anything
    /// is written (see the type's documentation).
    pub fn write_batch(&mut self, items: &[u32], flat: &[u32], len: usize) -> Result<()> {
        self.stream.check_usable()?;
        let path = self.stream.path();
        let invalid = |msg: String| Error::Invalid(format!("{}: {msg}", path.display()));
        if len != self.len {
            return Err(invalid(format!(
                "rankings of {len} entries, but this cache's rankings have {} (N = {}, top_k = \
                 {})",
                self.len,
                self.n,
                self.top_k
                    .map_or_else(|| "all".to_string(), |k| k.to_string())
            )));
        }
        check_flat_len(path, items.len(), flat.len(), len, "rankings")?;
        self.rows
            .claim_items(items, "its ranking was")
            .map_err(invalid)?;
        for (i, &item) in items.iter().enumerate() {
            if let Err(p) = self.check.check(item, &flat[i * len..(i + 1) * len], false) {
                self.rows.release(items);
                return Err(invalid(format!("the ranking of item {item}: {p}")));
            }
        }
        let result = self.stream.write_rows(items, flat, len);
        if result.is_err() && !self.stream.failed {
            self.rows.release(items);
        }
        result
    }

    /// How many rankings have been written so far.
    pub fn rankings_written(&self) -> usize {
        self.rows.count
    }

    /// Check that every item's ranking was written (else [`Error::Invalid`] saying how many are
    /// missing and the first, and nothing is left on disk), then close the JSON, fsync and rename
    /// the file onto its destination.
    pub fn finish(self) -> Result<()> {
        self.rows
            .check_complete(self.stream.path(), "item", "rankings cache")?;
        self.stream.finish()
    }

    /// Like [`finish`](Self::finish) but accepting a cache that holds only the rankings written
    /// (`total_poems` still says N): for runs over selected items.
    pub fn finish_partial(self) -> Result<()> {
        self.stream.finish()
    }
}
