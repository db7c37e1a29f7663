//! [`JsonCacheWriter`]: the streaming writer of `diversity_cache.json`. May touch the JSON writer
//! of `json_stream.rs`, the row checks of `rows.rs`, the checksum key and the crate's errors; no
//! device.

use super::checksum::CHECKSUM_KEY;
use super::json_stream::{json_kind, IdText, JsonStream};
use super::rows::{sequence_row_problem, ListChecker};
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;

/// Streaming writer of `diversity_cache.json`:
/// `{"metadata":{…},"sequences":{"<key>":[value, …], …}}`.
///
/// Sequences are appended batch by batch as the device produces them and formatted straight to a
/// [`PendingFile`], so host memory stays O(batch) however large N is; [`finish`](Self::finish)
/// closes the JSON, fsyncs and renames it into place. Dropping an unfinished writer (an error, a
/// panic) removes the temporary file, so no partial cache is ever left behind.
///
/// With row ids (from `embeddings.json`), a key is the id of the start row as a JSON string (a
/// string id as is, a number id as its decimal text) and values are the rows' ids (strings quoted,
/// numbers as numbers); an index with no id is [`Error::Invalid`]. Without ids, keys are 0-based
/// starts as strings and values 0-based indices.
///
/// [`PendingFile`]: super::PendingFile
#[derive(Debug)]
pub struct JsonCacheWriter {
    stream: JsonStream,
    seen: HashSet<u32>,
    written: usize,
    /// The length of the rows written so far: every row has it (the merge refuses ragged rows).
    row_len: Option<usize>,
    /// The readers' row check ([`sequence_row_problem`]); N is the ids' count, or grows with
    /// the entries seen when there are no ids.
    check: ListChecker,
}

impl JsonCacheWriter {
    /// Start a cache at `path`: create the temporary file beside it (the output location check)
    /// and write `{"metadata":<metadata>,"sequences":{`.
    ///
    /// `metadata` must be a JSON object (the driver writes model, num_poems, algorithm,
    /// generated_at, batch_size, top_k, space, precision, mode, device); `ids` are the table's
    /// row ids, strings or numbers, unique.
    ///
    /// The metadata of a shard (it has `"shard"`, see [`SHARD_KEYS`]) gains the file's own
    /// checksum as its last member ([`CHECKSUM_KEY`], filled in by [`finish`](Self::finish)),
    /// which the merge verifies; it may not hold that key itself.
    ///
    /// [`SHARD_KEYS`]: super::SHARD_KEYS
    /// [`CHECKSUM_KEY`]: super::CHECKSUM_KEY
    pub fn create(path: &Path, metadata: &Value, ids: Option<Vec<Value>>) -> Result<Self> {
        if !metadata.is_object() {
            return Err(Error::Invalid(format!(
                "{}: cache metadata must be a JSON object, got {}",
                path.display(),
                json_kind(metadata)
            )));
        }
        // A shard carries its own checksum, which the merge verifies.
        let shard = metadata.get("shard").is_some();
        if shard && metadata.get(CHECKSUM_KEY).is_some() {
            return Err(Error::Invalid(format!(
                "{}: shard metadata has \"{CHECKSUM_KEY}\", which the writer sets itself",
                path.display()
            )));
        }
        let ids = IdText::of(path, ids.as_deref())?;
        let ids_n = ids.as_ref().map_or(0, |ids| ids.len());
        let metadata = metadata.to_string();
        Ok(JsonCacheWriter {
            stream: JsonStream::create(
                path,
                "cache",
                metadata.as_bytes(),
                "sequences",
                ids,
                shard,
            )?,
            seen: HashSet::new(),
            written: 0,
            row_len: None,
            check: ListChecker::new(ids_n),
        })
    }

    /// Set how many threads format large batches (default: the machine's available
    /// parallelism; 1 formats on the calling thread, e.g. to leave cores to other work). The
    /// bytes written do not depend on it.
    pub fn set_threads(&mut self, threads: usize) {
        self.stream.set_threads(threads);
    }

    /// Append the sequence of `start`.
    pub fn write_sequence(&mut self, start: u32, seq: &[u32]) -> Result<()> {
        self.write_batch(&[start], seq, seq.len())
    }

    /// Append a batch: row `i` of `flat` (length `len`) is the sequence of `starts[i]` — the
    /// layout a scan job downloads.
    ///
    /// The batch is checked and formatted before anything is written, so a bad batch (a start
    /// out of range or already written, an index with no id, a wrong `flat` length, a row that
    /// does not start with its start or holds an entry twice, a row length other than the
    /// earlier rows': what the readers refuse) is refused with [`Error::Invalid`] and the writer
    /// can go on. Large batches are formatted on all cores, a bounded piece at a time, and
    /// written in order; the bytes are the same as one row at a time.
    pub fn write_batch(&mut self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
        self.stream
            .check_batch(starts.len(), flat.len(), len, "sequences")?;
        self.claim_starts(starts)?;
        let result = self
            .check_ids(starts, flat, len)
            .and_then(|()| self.check_rows(starts, flat, len))
            .and_then(|()| self.stream.write_rows(starts, flat, len));
        match &result {
            Ok(()) => {
                self.written += starts.len();
                if !starts.is_empty() {
                    self.row_len = Some(len);
                }
            }
            Err(Error::Io { .. }) => {}
            Err(_) => {
                // Refused before anything was written: release the starts so the caller may
                // retry.
                for s in starts {
                    self.seen.remove(s);
                }
            }
        }
        result
    }

    /// Check every start (in range of the ids, not written before, not repeated in the batch)
    /// and mark them written; on error nothing is marked.
    fn claim_starts(&mut self, starts: &[u32]) -> Result<()> {
        for (k, &s) in starts.iter().enumerate() {
            let problem = match &self.stream.ids {
                Some(ids) if s as usize >= ids.len() => Some(format!(
                    "start {s} is out of range: there are only {} ids (valid starts 0..{})",
                    ids.len(),
                    ids.len()
                )),
                _ if !self.seen.insert(s) => Some(format!(
                    "start {s} is repeated: its sequence was already written"
                )),
                _ => None,
            };
            if let Some(p) = problem {
                for s in &starts[..k] {
                    self.seen.remove(s);
                }
                return Err(Error::Invalid(format!(
                    "{}: {p}",
                    self.stream.path().display()
                )));
            }
        }
        Ok(())
    }

    /// Every row as long as those before it and a sequence of its start (what the readers
    /// check: [`sequence_row_problem`]).
    fn check_rows(&mut self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
        let path = self.stream.path();
        let refuse = |s: u32, why: String| {
            Err(Error::Invalid(format!(
                "{}: the sequence of start {s} {why}",
                path.display()
            )))
        };
        if let (Some(&s), Some(l)) = (starts.first(), self.row_len) {
            if len != l {
                return refuse(
                    s,
                    format!("has {len} entries, the rows written before it have {l}"),
                );
            }
        }
        if len == 0 {
            return match starts.first() {
                Some(&s) => refuse(s, "is empty (a sequence starts with its start)".into()),
                None => Ok(()),
            };
        }
        for (&s, row) in starts.iter().zip(flat.chunks_exact(len)) {
            if self.stream.ids.is_none() {
                // No ids, so no N: room for the row's entries, or a sorted copy for a few
                // large ones.
                let top = row.iter().copied().max().unwrap_or(0) as usize;
                if top >= self.check.n() && top < 16 * len + (1 << 20) {
                    self.check.grow(top + 1);
                } else if top >= self.check.n() {
                    if let Some(why) = sparse_row_problem(s, row) {
                        return refuse(s, why);
                    }
                    continue;
                }
            }
            if let Some(why) = sequence_row_problem(s, row, &mut self.check) {
                return refuse(s, why);
            }
        }
        Ok(())
    }

    /// With ids, every index must have one.
    fn check_ids(&self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
        if let Some(ids) = &self.stream.ids {
            if let Some(pos) = flat.iter().position(|&v| v as usize >= ids.len()) {
                return Err(Error::Invalid(format!(
                    "{}: the sequence of start {} has index {} at position {}, but \
                     there are only {} ids (valid indices 0..{})",
                    self.stream.path().display(),
                    starts[pos / len],
                    flat[pos],
                    pos % len,
                    ids.len(),
                    ids.len()
                )));
            }
        }
        Ok(())
    }

    /// How many sequences have been written so far.
    pub fn sequences_written(&self) -> usize {
        self.written
    }

    /// Close the JSON, flush, fsync and rename the file onto its destination. Until this
    /// succeeds the destination is untouched.
    pub fn finish(self) -> Result<()> {
        self.stream.finish()
    }
}

/// [`sequence_row_problem`] of a row of a few large entries (no ids, so no N), by sorting a copy.
fn sparse_row_problem(start: u32, row: &[u32]) -> Option<String> {
    if row[0] != start {
        return Some(format!(
            "starts with {}, not with its start {start}",
            row[0]
        ));
    }
    let mut sorted = row.to_vec();
    sorted.sort_unstable();
    let v = sorted.windows(2).find(|w| w[0] == w[1])?[0];
    let j = row.iter().enumerate().filter(|(_, &x)| x == v).nth(1)?.0;
    Some(format!("has entry {v} twice (again at position {j})"))
}
