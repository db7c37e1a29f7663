//! Writing and reading the sequence caches of SPEC §Files, so that a failed run never leaves a
//! partial or stale file behind.
//!
//! - [`PendingFile`]: a temporary file beside the destination, created before any work (so a
//!   missing or read-only output directory fails at once), renamed onto the destination on
//!   [`PendingFile::commit`] and removed if dropped uncommitted. Every writer here uses it.
//! - [`JsonCacheWriter`]: `diversity_cache.json`, `{"metadata":{…},"sequences":{"<id>":[id, …]}}`,
//!   written streaming, batch by batch (host memory stays O(batch), never O(N²)), with keys and
//!   values mapped through the table's row ids when it has them. Integers are formatted without
//!   per-number allocation, and large batches are formatted on every core.
//! - [`BinaryCacheWriter`] / [`BinaryCache`]: the user's binary cache, a little-endian uint32 `N`
//!   followed by N rows of L uint32 (row `s` is the sequence of start `s`; L = N for full
//!   sequences, fewer with top_k). The reader infers L from the file size and serves one row
//!   without loading the rest.
//! - [`RankingsWriter`]: the similarity rankings cache,
//!   `{"metadata":{"total_poems":N,…,"format":"pre_sorted_rankings","top_k":K,…},
//!   "rankings":{"<id>":[id, …]}}`, streamed like the sequence cache (the two share one JSON
//!   stream), every item's ranking checked.
//! - [`KnnGraphWriter`] / [`KnnGraph`]: the k-NN graph file (magic `DKNN`, N × k ids then N × k
//!   f32 values; the layout is in [`KnnGraphWriter`]'s documentation) and a reader that serves
//!   one item's neighbours without loading the rest.
//! - [`merge_caches`]: the partial caches of a sharded run (`--shard i/n`, metadata
//!   [`SHARD_KEYS`]) checked to be the shards of one run and merged into the one-shot cache, byte
//!   for byte, each row's text copied through.

use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file being written: a temporary file `.<name>.tmp-<pid>-<counter>` beside its destination,
/// renamed onto the destination by [`commit`](PendingFile::commit) and removed when dropped
/// without a commit.
///
/// Creating it is the check that the output location works — the directory exists and is
/// writable — so callers create it *before* any expensive work, and a failure at any later point
/// (an error, a panic, a killed job's unwinding) leaves neither a partial file nor a stale one
/// overwritten half-way: the destination is either untouched or replaced whole.
#[derive(Debug)]
pub struct PendingFile {
    tmp: PathBuf,
    out: PathBuf,
    done: bool,
}

impl PendingFile {
    /// Create the temporary file for `out` and return it with the open file to write into.
    ///
    /// Errors name `out` and the cause: [`Error::Io`] "output directory X does not exist" or
    /// "cannot write here: …" (e.g. permission denied), [`Error::Invalid`] when `out` has no file
    /// name or is an existing directory.
    pub fn create(out: &Path) -> Result<(PendingFile, File)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = out.file_name().ok_or_else(|| {
            Error::Invalid(format!(
                "{}: not a file path (it has no file name)",
                out.display()
            ))
        })?;
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(Error::Io {
                path: out.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("output directory {} does not exist", dir.display()),
                ),
            });
        }
        if out.is_dir() {
            return Err(Error::Invalid(format!(
                "{}: is a directory, not a file to write",
                out.display()
            )));
        }
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".tmp-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::Io {
                path: out.to_path_buf(),
                source: std::io::Error::new(
                    e.kind(),
                    format!("cannot write here: {e} (creating {})", tmp.display()),
                ),
            })?;
        Ok((
            PendingFile {
                tmp,
                out: out.to_path_buf(),
                done: false,
            },
            file,
        ))
    }

    /// The destination path.
    pub fn path(&self) -> &Path {
        &self.out
    }

    /// The temporary file's path (beside the destination).
    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// Rename the temporary file onto the destination, replacing any file there in one step.
    ///
    /// The caller flushes (and, for durability, `sync_all`s) its file first. On error the
    /// temporary file is removed and the destination is untouched.
    pub fn commit(mut self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.out).map_err(|source| Error::Io {
            path: self.out.clone(),
            source,
        })?;
        self.done = true;
        // Make the rename itself durable where the platform allows it; best effort.
        #[cfg(unix)]
        if let Some(dir) = self.out.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.done {
            // Best effort: the error that matters is whatever stopped the write.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// An I/O error of `path`.
fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Append the decimal digits of `v` to `buf`, two digits at a time, without allocating.
#[inline]
fn push_u32(buf: &mut Vec<u8>, mut v: u32) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";
    let mut tmp = [0u8; 10];
    let mut i = tmp.len();
    while v >= 100 {
        let p = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        tmp[i] = PAIRS[p];
        tmp[i + 1] = PAIRS[p + 1];
    }
    if v >= 10 {
        let p = v as usize * 2;
        i -= 2;
        tmp[i] = PAIRS[p];
        tmp[i + 1] = PAIRS[p + 1];
    } else {
        i -= 1;
        tmp[i] = b'0' + v as u8;
    }
    buf.extend_from_slice(&tmp[i..]);
}

/// The JSON text of every row id, encoded once so rows are formatted by copying bytes.
#[derive(Debug)]
struct IdText {
    /// Concatenated value texts: a string id JSON-quoted and escaped, a number id as its digits.
    text: Vec<u8>,
    /// Per id: the range of its value text in `text`, and whether it is a string (then the key is
    /// the value text itself; a number's key is its digits in quotes).
    spans: Vec<(usize, usize, bool)>,
}

impl IdText {
    fn new(path: &Path, ids: &[Value]) -> Result<IdText> {
        let mut text = Vec::new();
        let mut spans = Vec::with_capacity(ids.len());
        let mut seen: HashMap<String, usize> = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let (key, is_string) = match id {
                Value::String(s) => (s.clone(), true),
                Value::Number(n) => (n.to_string(), false),
                other => {
                    return Err(Error::Invalid(format!(
                        "{}: id of row {i} is {other}, not a string or a number",
                        path.display()
                    )))
                }
            };
            let start = text.len();
            if is_string {
                serde_json::to_writer(&mut text, id).map_err(|e| {
                    Error::Invalid(format!(
                        "{}: id of row {i} cannot be encoded: {e}",
                        path.display()
                    ))
                })?;
            } else {
                text.extend_from_slice(key.as_bytes());
            }
            spans.push((start, text.len(), is_string));
            if let Some(first) = seen.insert(key, i) {
                return Err(Error::Invalid(format!(
                    "{}: rows {first} and {i} have the same id {id}; the cache is keyed \
                     by id, so ids must be unique",
                    path.display()
                )));
            }
        }
        Ok(IdText { text, spans })
    }
    fn len(&self) -> usize {
        self.spans.len()
    }
    fn push_value(&self, buf: &mut Vec<u8>, i: usize) {
        let (a, b, _) = self.spans[i];
        buf.extend_from_slice(&self.text[a..b]);
    }
    fn push_key(&self, buf: &mut Vec<u8>, i: usize) {
        let (a, b, is_string) = self.spans[i];
        if is_string {
            buf.extend_from_slice(&self.text[a..b]);
        } else {
            buf.push(b'"');
            buf.extend_from_slice(&self.text[a..b]);
            buf.push(b'"');
        }
    }
}

/// Append `,"<key>":[v,…]` for one sequence to `buf`, mapping through `ids` when given; the
/// caller has checked `start` and every entry against the id count.
fn format_row(buf: &mut Vec<u8>, ids: Option<&IdText>, start: u32, seq: &[u32]) {
    buf.push(b',');
    match ids {
        Some(ids) => {
            ids.push_key(buf, start as usize);
            buf.extend_from_slice(b":[");
            for (j, &v) in seq.iter().enumerate() {
                if j > 0 {
                    buf.push(b',');
                }
                ids.push_value(buf, v as usize);
            }
        }
        None => {
            buf.push(b'"');
            push_u32(buf, start);
            buf.extend_from_slice(b"\":[");
            for (j, &v) in seq.iter().enumerate() {
                if j > 0 {
                    buf.push(b',');
                }
                push_u32(buf, v);
            }
        }
    }
    buf.push(b']');
}

/// Refuse a writer (of the file named `what`) whose earlier I/O error may have left part of a
/// batch in its file: on `finish` the file "was not written", otherwise "start a new one".
fn check_not_failed(failed: bool, path: &Path, what: &str, finish: bool) -> Result<()> {
    if !failed {
        return Ok(());
    }
    let then = if finish {
        format!("the {what} was not written")
    } else {
        "start a new one".to_string()
    };
    Err(Error::Invalid(format!(
        "{}: the {what} writer failed earlier; {then}",
        path.display()
    )))
}

/// Batches with at least this many numbers are formatted on several threads.
const PARALLEL_MIN_NUMBERS: usize = 1 << 15;
/// Text each formatting thread produces per round (bounds host memory to threads × this).
const PIECE_BYTES: usize = 8 << 20;

/// What kind of JSON value `v` is, for messages.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The streaming JSON machinery shared by [`JsonCacheWriter`] and [`RankingsWriter`]:
/// `{"metadata":<metadata>,"<section>":{` written at creation, rows `"<key>":[value, …]`
/// appended batch by batch (formatted on several threads when large), `}}` and a newline on
/// [`finish`](Self::finish). Rows are formatted with [`format_row`], so keys and values go
/// through the row ids when there are some; the callers check every index first.
#[derive(Debug)]
struct JsonStream {
    // Declared before `pending` so the file is closed before the temporary file is removed.
    out: Option<BufWriter<File>>,
    pending: PendingFile,
    ids: Option<IdText>,
    /// Names the file in messages: "cache", "rankings cache".
    what: &'static str,
    started: bool,
    failed: bool,
    bufs: Vec<Vec<u8>>,
    threads: usize,
}

impl JsonStream {
    /// Create the temporary file (the output location check) and write the opening, with
    /// `metadata` already serialized.
    fn create(
        path: &Path,
        what: &'static str,
        metadata: &[u8],
        section: &str,
        ids: Option<IdText>,
    ) -> Result<Self> {
        let (pending, file) = PendingFile::create(path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(b"{\"metadata\":")
            .and_then(|_| out.write_all(metadata))
            .and_then(|_| write!(out, ",\"{section}\":{{"))
            .map_err(io_err(path))?;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Ok(JsonStream {
            out: Some(out),
            pending,
            ids,
            what,
            started: false,
            failed: false,
            bufs: Vec::new(),
            threads,
        })
    }

    fn path(&self) -> &Path {
        self.pending.path()
    }

    /// Refuse further rows after an I/O error left part of a batch in the file.
    fn check_usable(&self) -> Result<()> {
        check_not_failed(self.failed, self.path(), self.what, false)
    }

    /// Format and append rows (row `i` of `flat`, `len` entries, keyed by `starts[i]`), every
    /// index already checked against the ids. An I/O error marks the stream failed.
    fn write_rows(&mut self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
        let result = self.format_and_write(starts, flat, len);
        if let Err(Error::Io { .. }) = &result {
            // Part of the batch may be in the file: it can no longer be finished.
            self.failed = true;
        }
        result
    }

    fn format_and_write(&mut self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
        let rows = starts.len();
        if rows == 0 {
            return Ok(());
        }
        let ids = self.ids.as_ref();
        let threads = self.threads.min(rows);
        if self.bufs.is_empty() {
            self.bufs.push(Vec::new());
        }
        if threads <= 1 || rows * len < PARALLEL_MIN_NUMBERS {
            // Small: format whole, then one write.
            let buf = &mut self.bufs[0];
            buf.clear();
            for (i, &s) in starts.iter().enumerate() {
                format_row(buf, ids, s, &flat[i * len..(i + 1) * len]);
            }
            return Self::emit(
                &mut self.out,
                self.pending.path(),
                self.what,
                &mut self.started,
                &self.bufs[..1],
            );
        }
        // Two sets of per-thread buffers: the threads format round k + 1 into one while this
        // thread writes round k from the other, so formatting and file I/O overlap.
        self.bufs.resize_with(2 * threads, Vec::new);
        let (mut next, mut ready) = self.bufs.split_at_mut(threads);
        // Rows per thread per round: about PIECE_BYTES of text at ≤ 7 bytes a number.
        let per_piece = (PIECE_BYTES / 7 / len.max(1)).max(1);
        let (out, path, what, started) = (
            &mut self.out,
            self.pending.path(),
            self.what,
            &mut self.started,
        );
        let mut have_ready = false;
        let mut first_row = 0;
        while first_row < rows {
            let round_rows = (rows - first_row).min(per_piece * threads);
            let per_thread = round_rows.div_ceil(threads);
            let written = std::thread::scope(|scope| {
                for (t, buf) in next.iter_mut().enumerate() {
                    buf.clear();
                    let a = (first_row + t * per_thread).min(first_row + round_rows);
                    let b = (a + per_thread).min(first_row + round_rows);
                    if a < b {
                        scope.spawn(move || {
                            for i in a..b {
                                format_row(buf, ids, starts[i], &flat[i * len..(i + 1) * len]);
                            }
                        });
                    }
                }
                if have_ready {
                    Self::emit(out, path, what, started, ready)
                } else {
                    Ok(())
                }
            });
            written?;
            std::mem::swap(&mut next, &mut ready);
            have_ready = true;
            first_row += round_rows;
        }
        Self::emit(out, path, what, started, ready)
    }

    /// Write formatted pieces in order; the very first row loses its leading comma.
    fn emit(
        out: &mut Option<BufWriter<File>>,
        path: &Path,
        what: &str,
        started: &mut bool,
        pieces: &[Vec<u8>],
    ) -> Result<()> {
        let io = io_err(path);
        let out = out.as_mut().ok_or_else(|| {
            Error::Invalid(format!("{}: the {what} writer is closed", path.display()))
        })?;
        for piece in pieces {
            if piece.is_empty() {
                continue;
            }
            let bytes = if *started { &piece[..] } else { &piece[1..] };
            out.write_all(bytes).map_err(&io)?;
            *started = true;
        }
        Ok(())
    }

    /// Close the JSON, flush, fsync and rename the file onto its destination.
    fn finish(mut self) -> Result<()> {
        let path = self.pending.path().to_path_buf();
        check_not_failed(self.failed, &path, self.what, true)?;
        let io = io_err(&path);
        let mut out = self.out.take().ok_or_else(|| {
            Error::Invalid(format!(
                "{}: the {} writer is closed",
                path.display(),
                self.what
            ))
        })?;
        out.write_all(b"}}\n").map_err(&io)?;
        let file = out.into_inner().map_err(|e| Error::Io {
            path: path.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(&io)?;
        drop(file);
        let JsonStream { pending, .. } = self;
        pending.commit()
    }
}

/// Streaming writer of `diversity_cache.json` (SPEC §Files):
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
#[derive(Debug)]
pub struct JsonCacheWriter {
    stream: JsonStream,
    seen: HashSet<u32>,
    written: usize,
}

impl JsonCacheWriter {
    /// Start a cache at `path`: create the temporary file beside it (the output location check)
    /// and write `{"metadata":<metadata>,"sequences":{`.
    ///
    /// `metadata` must be a JSON object (SPEC lists model, num_poems, algorithm, generated_at,
    /// batch_size, top_k, space, precision, mode, device); `ids` are the table's row ids, strings
    /// or numbers, unique.
    pub fn create(path: &Path, metadata: &Value, ids: Option<Vec<Value>>) -> Result<Self> {
        if !metadata.is_object() {
            return Err(Error::Invalid(format!(
                "{}: cache metadata must be a JSON object, got {}",
                path.display(),
                json_kind(metadata)
            )));
        }
        let ids = ids
            .as_deref()
            .map(|ids| IdText::new(path, ids))
            .transpose()?;
        let metadata = metadata.to_string();
        Ok(JsonCacheWriter {
            stream: JsonStream::create(path, "cache", metadata.as_bytes(), "sequences", ids)?,
            seen: HashSet::new(),
            written: 0,
        })
    }

    /// Set how many threads format large batches (default: the machine's available
    /// parallelism; 1 formats on the calling thread, e.g. to leave cores to other work). The
    /// bytes written do not depend on it.
    pub fn set_threads(&mut self, threads: usize) {
        self.stream.threads = threads.max(1);
    }

    /// Append the sequence of `start`.
    pub fn write_sequence(&mut self, start: u32, seq: &[u32]) -> Result<()> {
        self.write_batch(&[start], seq, seq.len())
    }

    /// Append a batch: row `i` of `flat` (length `len`) is the sequence of `starts[i]` — the
    /// layout a scan job downloads.
    ///
    /// The batch is checked and formatted before anything is written, so a bad batch (a start
    /// out of range or already written, an index with no id, a wrong `flat` length) is refused
    /// with [`Error::Invalid`] and the writer can go on. Large batches are formatted on all cores,
    /// a bounded piece at a time, and written in order; the bytes are the same as one row at a
    /// time.
    pub fn write_batch(&mut self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
        self.stream.check_usable()?;
        check_flat_len(
            self.stream.path(),
            starts.len(),
            flat.len(),
            len,
            "sequences",
        )?;
        self.claim_starts(starts)?;
        let result = self
            .check_ids(starts, flat, len)
            .and_then(|()| self.stream.write_rows(starts, flat, len));
        match &result {
            Ok(()) => self.written += starts.len(),
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

/// Refuse a flat batch whose length is not `rows × len`.
fn check_flat_len(path: &Path, rows: usize, flat: usize, len: usize, what: &str) -> Result<()> {
    let want = rows.checked_mul(len);
    if want != Some(flat) {
        return Err(Error::Invalid(format!(
            "{}: {flat} values for {rows} {what} of length {len} (expected {})",
            path.display(),
            want.map_or_else(|| "an overflowing count".to_string(), |w| w.to_string())
        )));
    }
    Ok(())
}

/// Which of N rows were written: a bitset and its count.
#[derive(Debug)]
struct RowSet {
    bits: Vec<u64>,
    n: usize,
    count: usize,
}

impl RowSet {
    fn new(n: usize) -> RowSet {
        RowSet {
            bits: vec![0; n.div_ceil(64)],
            n,
            count: 0,
        }
    }
    fn contains(&self, i: usize) -> bool {
        self.bits[i / 64] & (1u64 << (i % 64)) != 0
    }
    /// Mark row `i`; false when it was already marked.
    fn insert(&mut self, i: usize) -> bool {
        if self.contains(i) {
            return false;
        }
        self.bits[i / 64] |= 1u64 << (i % 64);
        self.count += 1;
        true
    }
    fn remove(&mut self, i: usize) {
        if self.contains(i) {
            self.bits[i / 64] &= !(1u64 << (i % 64));
            self.count -= 1;
        }
    }
    /// Mark every row of `rows` (each `< n`), or none: a row marked before or repeated in
    /// `rows` is the error `repeated(row, earlier_in_rows)`.
    fn claim_all(
        &mut self,
        rows: &[u32],
        repeated: impl Fn(u32, bool) -> String,
    ) -> std::result::Result<(), String> {
        for (k, &r) in rows.iter().enumerate() {
            if !self.insert(r as usize) {
                let in_batch = rows[..k].contains(&r);
                self.release(&rows[..k]);
                return Err(repeated(r, in_batch));
            }
        }
        Ok(())
    }
    /// Unmark rows claimed together (all distinct).
    fn release(&mut self, rows: &[u32]) {
        for &r in rows {
            self.remove(r as usize);
        }
    }
    /// [`Error::Invalid`] "K of N rows are missing (the first is `unit` F); the `what` was not
    /// written" unless every row is marked.
    fn check_complete(&self, path: &Path, unit: &str, what: &str) -> Result<()> {
        if self.count == self.n {
            return Ok(());
        }
        let first = (0..self.n).find(|&i| !self.contains(i)).unwrap_or(0);
        Err(Error::Invalid(format!(
            "{}: {} of {} rows are missing (the first is {unit} {first}); the {what} was not \
             written",
            path.display(),
            self.n - self.count,
            self.n
        )))
    }
}

/// `what`'s row count `n` as a u32 ≥ 1, else [`Error::Invalid`].
fn rows_u32(path: &Path, what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).ok().filter(|&v| v >= 1).ok_or_else(|| {
        Error::Invalid(format!(
            "{}: {what} of N = {n} rows: N must be 1..={}",
            path.display(),
            u32::MAX
        ))
    })
}

/// A pre-sized file of N fixed-size rows written in any order, through a [`PendingFile`]: the
/// part the binary cache and the k-NN graph writers share. Rows are written at their offsets as
/// batches finish; [`finish`](Self::finish) refuses a file with rows missing (instead of leaving
/// zeros that look like data) and after an I/O error (part of a row may be in the file).
#[derive(Debug)]
struct RowFile {
    // Declared before `pending` so the file is closed before the temporary file is removed.
    file: File,
    pending: PendingFile,
    rows: RowSet,
    failed: bool,
    /// Names the file in messages: "cache", "k-NN graph".
    what: &'static str,
}

impl RowFile {
    /// Create the temporary file beside `path`, sized to `size` bytes, starting with `header`.
    fn create(
        path: &Path,
        what: &'static str,
        n: usize,
        size: u64,
        header: &[u8],
    ) -> Result<RowFile> {
        let (pending, mut file) = PendingFile::create(path)?;
        let io = io_err(path);
        file.set_len(size).map_err(&io)?;
        file.write_all(header).map_err(&io)?;
        Ok(RowFile {
            file,
            pending,
            rows: RowSet::new(n),
            failed: false,
            what,
        })
    }

    fn path(&self) -> &Path {
        self.pending.path()
    }

    fn check_usable(&self) -> Result<()> {
        check_not_failed(self.failed, self.path(), self.what, false)
    }

    /// Write `bytes` at `offset`; an I/O error marks the file failed.
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let result = self
            .file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.write_all(bytes));
        result.map_err(|source| {
            self.failed = true;
            Error::Io {
                path: self.pending.path().to_path_buf(),
                source,
            }
        })
    }

    /// Check that every row was written (rows are named `unit` in the message), then fsync and
    /// rename the file onto its destination.
    fn finish(self, unit: &str) -> Result<()> {
        let path = self.pending.path().to_path_buf();
        check_not_failed(self.failed, &path, self.what, true)?;
        self.rows.check_complete(&path, unit, self.what)?;
        self.file.sync_all().map_err(io_err(&path))?;
        let RowFile { file, pending, .. } = self;
        drop(file);
        pending.commit()
    }
}

/// Open `path` for reading; with its size.
fn open_with_size(path: &Path) -> Result<(File, u64)> {
    let io = io_err(path);
    let file = File::open(path).map_err(&io)?;
    let size = file.metadata().map_err(&io)?.len();
    Ok((file, size))
}

/// A format error of `path`.
fn format_err(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |reason| Error::Format {
        path: path.to_path_buf(),
        reason,
    }
}

/// Read `bytes` bytes at `offset` of `file` into `buf`.
fn read_at(
    file: &mut File,
    path: &Path,
    offset: u64,
    bytes: usize,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let io = io_err(path);
    buf.resize(bytes, 0);
    file.seek(SeekFrom::Start(offset)).map_err(&io)?;
    file.read_exact(buf).map_err(&io)
}

/// Little-endian uint32 values of `bytes`.
fn le_u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bytes of the binary cache's header (uint32 N).
const BIN_HEADER: u64 = 4;

/// Writer of the user's binary cache: a little-endian uint32 `N`, then `N` rows of `len`
/// little-endian uint32, row `s` being the sequence of start `s` (`len` = N for full sequences,
/// fewer with top_k).
///
/// The temporary file is pre-sized, so rows can be written in any order as batches finish (each
/// seeks to its place); a bitset records which rows were written and
/// [`finish`](Self::finish) refuses a cache with missing rows instead of leaving zeros that look
/// like sequences. Like every writer here it goes through a [`PendingFile`]: the destination is
/// replaced whole or not at all.
#[derive(Debug)]
pub struct BinaryCacheWriter {
    rows: RowFile,
    n: usize,
    len: usize,
    buf: Vec<u8>,
}

impl BinaryCacheWriter {
    /// Create the temporary file beside `path`, sized to `4 + n·len·4` bytes, and write the
    /// header `n`. `n` must be 1..=u32::MAX and `len` at least 1.
    pub fn create(path: &Path, n: usize, len: usize) -> Result<Self> {
        let n32 = rows_u32(path, "binary cache", n)?;
        if len == 0 {
            return Err(Error::Invalid(format!(
                "{}: binary cache rows of length 0 (each row needs at least the start)",
                path.display()
            )));
        }
        let size = (n as u64)
            .checked_mul(len as u64)
            .and_then(|v| v.checked_mul(4))
            .and_then(|v| v.checked_add(BIN_HEADER))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: binary cache of {n} rows × {len} entries is too large",
                    path.display()
                ))
            })?;
        Ok(BinaryCacheWriter {
            rows: RowFile::create(path, "cache", n, size, &n32.to_le_bytes())?,
            n,
            len,
            buf: Vec::with_capacity(len * 4),
        })
    }

    /// Write the sequence of `start` (`start < n`, `seq.len() == len`, every entry `< n`) at its
    /// place, `4 + start·len·4`. A start written twice is refused.
    pub fn write_row(&mut self, start: u32, seq: &[u32]) -> Result<()> {
        self.rows.check_usable()?;
        let path = self.rows.path();
        let s = start as usize;
        if s >= self.n {
            return Err(Error::Invalid(format!(
                "{}: start {start} is out of range for a cache of N = {} rows (valid 0..{})",
                path.display(),
                self.n,
                self.n
            )));
        }
        if seq.len() != self.len {
            return Err(Error::Invalid(format!(
                "{}: the sequence of start {start} has {} entries, the cache's rows have {}",
                path.display(),
                seq.len(),
                self.len
            )));
        }
        if let Some(j) = seq.iter().position(|&v| v as usize >= self.n) {
            return Err(Error::Invalid(format!(
                "{}: the sequence of start {start} has index {} at position {j}, not below N = {}",
                path.display(),
                seq[j],
                self.n
            )));
        }
        if self.rows.rows.contains(s) {
            return Err(Error::Invalid(format!(
                "{}: start {start} is repeated: its row was already written",
                path.display()
            )));
        }
        self.buf.clear();
        for &v in seq {
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        let offset = BIN_HEADER + s as u64 * self.len as u64 * 4;
        self.rows.write_at(offset, &self.buf)?;
        self.rows.rows.insert(s);
        Ok(())
    }

    /// Write a batch: row `i` of `flat` (of the cache's row length) is the sequence of
    /// `starts[i]`. Rows are checked one by one; on error the rows before it are written.
    pub fn write_batch(&mut self, starts: &[u32], flat: &[u32]) -> Result<()> {
        check_flat_len(
            self.rows.path(),
            starts.len(),
            flat.len(),
            self.len,
            "sequences",
        )?;
        for (&s, row) in starts.iter().zip(flat.chunks_exact(self.len)) {
            self.write_row(s, row)?;
        }
        Ok(())
    }

    /// How many rows have been written so far.
    pub fn rows_written(&self) -> usize {
        self.rows.rows.count
    }

    /// Check that every row was written (else [`Error::Invalid`] saying how many are missing and
    /// the first), then fsync and rename the file onto its destination.
    pub fn finish(self) -> Result<()> {
        self.rows.finish("start")
    }
}

/// Reader of the binary cache: opens the file, reads only the header and the size (which give
/// `N` and the row length `L`), and serves one sequence at a time by seeking to its row — the
/// whole N × L cache is never loaded unless asked for with [`read_all`](Self::read_all).
#[derive(Debug)]
pub struct BinaryCache {
    file: File,
    path: PathBuf,
    n: usize,
    len: usize,
    buf: Vec<u8>,
}

impl BinaryCache {
    /// Open a cache: header `N` ≥ 1, and a size of `4 + N·L·4` bytes for a whole `L` ≥ 1 (else
    /// [`Error::Format`] naming the file and the sizes).
    pub fn open(path: &Path) -> Result<Self> {
        let io = io_err(path);
        let (mut file, size) = open_with_size(path)?;
        let format = format_err(path);
        if size < BIN_HEADER {
            return Err(format(format!(
                "{size} bytes: too small for a binary cache (a 4-byte uint32 N, then N rows of \
                 uint32)"
            )));
        }
        let mut header = [0u8; 4];
        file.read_exact(&mut header).map_err(&io)?;
        let n = u32::from_le_bytes(header) as usize;
        if n == 0 {
            return Err(format(format!(
                "header says N = 0 rows ({size} bytes); not a binary cache"
            )));
        }
        let body = size - BIN_HEADER;
        let row_group = n as u64 * 4;
        if !body.is_multiple_of(row_group) || body / row_group == 0 {
            return Err(format(format!(
                "size {size} bytes does not fit the header's N = {n}: a binary cache is 4 + N × L \
                 × 4 bytes for a row length L ≥ 1 (4 + {n} × {n} × 4 = {} for full sequences), \
                 but {body} bytes after the header is not a positive multiple of {row_group}",
                BIN_HEADER + row_group * n as u64
            )));
        }
        let len = usize::try_from(body / row_group).map_err(|_| {
            format(format!(
                "rows of {} entries are too long for this platform",
                body / row_group
            ))
        })?;
        Ok(BinaryCache {
            file,
            path: path.to_path_buf(),
            n,
            len,
            buf: Vec::new(),
        })
    }

    /// Number of rows (starts) N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Entries per row L (N for full sequences).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether rows are empty; never true for an opened cache (L ≥ 1). Provided for API
    /// symmetry with [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The path this cache was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sequence of `start`, read from its row alone (one seek and one read). An entry not
    /// below N is [`Error::Format`] (a corrupt file), a start out of range [`Error::Invalid`].
    pub fn sequence(&mut self, start: u32) -> Result<Vec<u32>> {
        let s = start as usize;
        if s >= self.n {
            return Err(Error::Invalid(format!(
                "{}: start {start} is out of range for a cache of N = {} rows (valid 0..{})",
                self.path.display(),
                self.n,
                self.n
            )));
        }
        let offset = BIN_HEADER + s as u64 * self.len as u64 * 4;
        read_at(
            &mut self.file,
            &self.path,
            offset,
            self.len * 4,
            &mut self.buf,
        )?;
        let row = le_u32s(&self.buf);
        check_entries(&self.path, self.n, self.len, s, &row)?;
        Ok(row)
    }

    /// Read a whole cache: `(N, flat)` with `flat` row-major, `N × L` entries (L =
    /// `flat.len() / N`). Validated like [`open`](Self::open) and
    /// [`sequence`](Self::sequence).
    pub fn read_all(path: &Path) -> Result<(usize, Vec<u32>)> {
        let mut cache = BinaryCache::open(path)?;
        let (n, len) = (cache.n, cache.len);
        let total = n.checked_mul(len).ok_or_else(|| Error::Format {
            path: path.to_path_buf(),
            reason: format!("{n} rows × {len} entries is too large to load"),
        })?;
        let mut bytes = Vec::new();
        cache.file.read_to_end(&mut bytes).map_err(io_err(path))?;
        if bytes.len() != total * 4 {
            return Err(Error::Format {
                path: path.to_path_buf(),
                reason: format!(
                    "read {} bytes after the header, expected {} (did the file change?)",
                    bytes.len(),
                    total * 4
                ),
            });
        }
        let flat = le_u32s(&bytes);
        drop(bytes);
        if let Some(pos) = flat.iter().position(|&v| v as usize >= n) {
            check_entries(path, n, len, pos / len, &flat[pos / len * len..][..len])?;
        }
        Ok((n, flat))
    }
}

/// Refuse a row holding an index not below N: the file is corrupt or not a cache.
fn check_entries(path: &Path, n: usize, len: usize, start: usize, row: &[u32]) -> Result<()> {
    match row.iter().position(|&v| v as usize >= n) {
        None => Ok(()),
        Some(j) => Err(Error::Format {
            path: path.to_path_buf(),
            reason: format!(
                "row {start} (of {n} rows × {len}) has entry {} at position {j}, not an index \
                 below N = {n}; the file is corrupt or not a binary cache",
                row[j]
            ),
        }),
    }
}

/// Checks one item's list of other items (a ranking, a neighbour list) in O(list): every entry
/// below N, not the item itself, none twice, and — where padding is allowed — [`KNN_PAD`] only
/// after the real entries. Repeats are found with a stamp per item (O(N) memory, never cleared
/// between lists).
#[derive(Debug)]
struct ListChecker {
    marks: Vec<u32>,
    stamp: u32,
}

impl ListChecker {
    fn new(n: usize) -> ListChecker {
        ListChecker {
            marks: vec![0; n],
            stamp: 0,
        }
    }

    /// The number of real (unpadded) entries of `item`'s `list`, or what is wrong with it.
    fn check(&mut self, item: u32, list: &[u32], pad: bool) -> std::result::Result<usize, String> {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.fill(0);
            self.stamp = 1;
        }
        let n = self.marks.len();
        let mut real = list.len();
        for (j, &v) in list.iter().enumerate() {
            if pad && v == KNN_PAD {
                real = real.min(j);
                continue;
            }
            if real < list.len() {
                return Err(format!(
                    "entry {v} at position {j} follows padding (u32::MAX) at position {real}; \
                     padding may only end a list"
                ));
            }
            if v as usize >= n {
                return Err(format!(
                    "entry {v} at position {j} is out of range (valid 0..{n})"
                ));
            }
            if v == item {
                return Err(format!("entry at position {j} is the item {item} itself"));
            }
            if self.marks[v as usize] == self.stamp {
                return Err(format!("entry {v} appears twice (again at position {j})"));
            }
            self.marks[v as usize] = self.stamp;
        }
        Ok(real)
    }
}

/// An item out of range of N, as a message.
fn item_out_of_range(item: u32, n: usize) -> String {
    format!("item {item} is out of range for N = {n} items (valid 0..{n})")
}

/// The metadata fields a [`RankingsWriter`] writes itself; the caller's extra fields may not
/// repeat them.
const RANKINGS_FIELDS: [&str; 4] = ["total_poems", "algorithm", "format", "top_k"];

/// Streaming writer of the user's similarity rankings cache:
/// `{"metadata":{"total_poems":N,"algorithm":"…","format":"pre_sorted_rankings","top_k":K,
/// …extra},"rankings":{"<key>":[value, …], …}}`.
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
    /// `algorithm`, `format` or `top_k`. `ids`, when given, are the table's row ids (strings or
    /// numbers, unique), exactly `n` of them. `n` ≥ 1; `top_k`, when given, ≥ 1 (a `top_k` of N
    /// or more means all N − 1).
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
                 itself (total_poems, algorithm, format, top_k)"
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
        let ids = ids
            .as_deref()
            .map(|ids| IdText::new(path, ids))
            .transpose()?;
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
            stream: JsonStream::create(path, "rankings cache", meta.as_bytes(), "rankings", ids)?,
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
    pub fn set_threads(&mut self, threads: usize) {
        self.stream.threads = threads.max(1);
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
        if let Some(&item) = items.iter().find(|&&i| i as usize >= self.n) {
            return Err(invalid(item_out_of_range(item, self.n)));
        }
        self.rows
            .claim_all(items, |item, in_batch| {
                if in_batch {
                    format!("item {item} appears twice in the batch")
                } else {
                    format!("item {item} is repeated: its ranking was already written")
                }
            })
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

/// The k-NN graph file's first four bytes.
pub const KNN_MAGIC: [u8; 4] = *b"DKNN";
/// The k-NN graph format version this build writes and reads.
pub const KNN_VERSION: u32 = 1;
/// Bytes of the k-NN graph file's header.
pub const KNN_HEADER: u64 = 24;
/// A missing neighbour's id (a row of fewer than k real neighbours, e.g. k ≥ N).
pub const KNN_PAD: u32 = u32::MAX;

/// What a k-NN graph's values are, and so which way is closer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnnMetric {
    /// Inner products `a·b`: larger is closer. Header code 0.
    InnerProduct,
    /// Cosine similarities: larger is closer. Header code 1.
    Cosine,
    /// L2 distances (squared, as Faiss reports them, or not: the file does not say): smaller is
    /// closer. Header code 2.
    L2,
}

impl KnnMetric {
    /// The header code: 0, 1, 2.
    pub fn code(self) -> u32 {
        match self {
            KnnMetric::InnerProduct => 0,
            KnnMetric::Cosine => 1,
            KnnMetric::L2 => 2,
        }
    }

    /// The metric of a header code, if it is one.
    pub fn from_code(code: u32) -> Option<KnnMetric> {
        match code {
            0 => Some(KnnMetric::InnerProduct),
            1 => Some(KnnMetric::Cosine),
            2 => Some(KnnMetric::L2),
            _ => None,
        }
    }

    /// Whether larger values are closer (similarities) rather than smaller (distances).
    pub fn larger_is_closer(self) -> bool {
        self != KnnMetric::L2
    }

    /// The value stored beside a [`KNN_PAD`] id: the farthest possible, −∞ for similarities,
    /// +∞ for distances.
    pub fn pad_value(self) -> f32 {
        if self.larger_is_closer() {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        }
    }

    /// "inner product", "cosine", "L2".
    pub fn name(self) -> &'static str {
        match self {
            KnnMetric::InnerProduct => "inner product",
            KnnMetric::Cosine => "cosine",
            KnnMetric::L2 => "L2",
        }
    }
}

/// Streaming writer of the k-NN graph file: for each of N items its k nearest other items and
/// their similarities or distances, in this little-endian layout (version 1):
///
/// | offset | size | field |
/// | --- | --- | --- |
/// | 0 | 4 | magic `DKNN` |
/// | 4 | 4 | u32 version = 1 |
/// | 8 | 4 | u32 N (items, ≥ 1) |
/// | 12 | 4 | u32 k (neighbours per item, ≥ 1) |
/// | 16 | 4 | u32 metric: 0 inner product, 1 cosine (larger is closer), 2 L2 (smaller is closer) |
/// | 20 | 4 | u32 reserved = 0 |
/// | 24 | N·k·4 | ids: row `i` is item i's neighbours, closest first; [`KNN_PAD`] (u32::MAX) pads a row of fewer than k |
/// | 24 + N·k·4 | N·k·4 | f32 values, the same layout; a padded entry holds [`KnnMetric::pad_value`] (−∞ / +∞) |
///
/// The file is `24 + N·k·8` bytes. A row lists other items only (never the item itself), each
/// once, ordered closest first (ties in any order), padding only at its end.
///
/// The temporary file is pre-sized and rows are written at their places as batches arrive, in
/// any order (a run of consecutive items is one write per section); [`finish`](Self::finish)
/// refuses a graph with rows missing. A bad batch is refused whole with [`Error::Invalid`] naming
/// the item (out of range, written before or twice, an id out of range, the item itself, repeated
/// or after padding, a NaN value, values not closest first, wrong lengths) and nothing of it is
/// written. Dropping the writer unfinished leaves no file behind. Host memory is O(batch + N).
#[derive(Debug)]
pub struct KnnGraphWriter {
    rows: RowFile,
    check: ListChecker,
    n: usize,
    k: usize,
    metric: KnnMetric,
    ids_buf: Vec<u8>,
    values_buf: Vec<u8>,
}

impl KnnGraphWriter {
    /// Create the temporary file beside `path`, sized to `24 + n·k·8` bytes, with its header.
    /// `n` and `k` must be 1..=u32::MAX (k may exceed N − 1: rows are then padded).
    pub fn create(path: &Path, n: usize, k: usize, metric: KnnMetric) -> Result<Self> {
        let n32 = rows_u32(path, "k-NN graph", n)?;
        let k32 = u32::try_from(k).ok().filter(|&v| v >= 1).ok_or_else(|| {
            Error::Invalid(format!(
                "{}: k-NN graph with k = {k}: k must be 1..={}",
                path.display(),
                u32::MAX
            ))
        })?;
        let size = (n as u64)
            .checked_mul(k as u64)
            .and_then(|v| v.checked_mul(8))
            .and_then(|v| v.checked_add(KNN_HEADER))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: k-NN graph of {n} rows × {k} neighbours is too large",
                    path.display()
                ))
            })?;
        let mut header = Vec::with_capacity(KNN_HEADER as usize);
        header.extend_from_slice(&KNN_MAGIC);
        for v in [KNN_VERSION, n32, k32, metric.code(), 0] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        Ok(KnnGraphWriter {
            rows: RowFile::create(path, "k-NN graph", n, size, &header)?,
            check: ListChecker::new(n),
            n,
            k,
            metric,
            ids_buf: Vec::new(),
            values_buf: Vec::new(),
        })
    }

    /// Write the neighbours of one item (`ids` and `values` of k entries each).
    pub fn write_row(&mut self, item: u32, ids: &[u32], values: &[f32]) -> Result<()> {
        self.write_batch(&[item], ids, values)
    }

    /// Write a batch: row `i` of `ids` and of `values` (k entries each, row-major, the layout a
    /// k-NN search downloads) are the neighbours of `items[i]`. Checked whole before anything is
    /// written; the values beside padding are written as [`KnnMetric::pad_value`] whatever they
    /// were.
    pub fn write_batch(&mut self, items: &[u32], ids: &[u32], values: &[f32]) -> Result<()> {
        self.rows.check_usable()?;
        let (n, k, metric) = (self.n, self.k, self.metric);
        let path = self.rows.pending.path();
        let invalid = |msg: String| Error::Invalid(format!("{}: {msg}", path.display()));
        check_flat_len(path, items.len(), ids.len(), k, "neighbour id lists")?;
        check_flat_len(path, items.len(), values.len(), k, "neighbour value lists")?;
        if let Some(&item) = items.iter().find(|&&i| i as usize >= n) {
            return Err(invalid(item_out_of_range(item, n)));
        }
        self.rows
            .rows
            .claim_all(items, |item, in_batch| {
                if in_batch {
                    format!("item {item} appears twice in the batch")
                } else {
                    format!("item {item} is repeated: its neighbours were already written")
                }
            })
            .map_err(invalid)?;
        for (i, &item) in items.iter().enumerate() {
            let (row_ids, row_values) = (&ids[i * k..(i + 1) * k], &values[i * k..(i + 1) * k]);
            let problem = self
                .check
                .check(item, row_ids, true)
                .and_then(|real| check_knn_values(metric, &row_values[..real]));
            if let Err(p) = problem {
                self.rows.rows.release(items);
                return Err(invalid(format!("the neighbours of item {item}: {p}")));
            }
        }
        // Runs of consecutive items are contiguous in both sections: one write each.
        let section = KNN_HEADER + n as u64 * k as u64 * 4;
        let mut a = 0;
        while a < items.len() {
            let mut b = a + 1;
            while b < items.len() && items[b] == items[b - 1].wrapping_add(1) {
                b += 1;
            }
            self.ids_buf.clear();
            self.values_buf.clear();
            for (&id, &v) in ids[a * k..b * k].iter().zip(&values[a * k..b * k]) {
                let v = if id == KNN_PAD { metric.pad_value() } else { v };
                self.ids_buf.extend_from_slice(&id.to_le_bytes());
                self.values_buf.extend_from_slice(&v.to_le_bytes());
            }
            let offset = items[a] as u64 * k as u64 * 4;
            self.rows.write_at(KNN_HEADER + offset, &self.ids_buf)?;
            self.rows.write_at(section + offset, &self.values_buf)?;
            a = b;
        }
        Ok(())
    }

    /// How many rows have been written so far.
    pub fn rows_written(&self) -> usize {
        self.rows.rows.count
    }

    /// Check that every row was written (else [`Error::Invalid`] saying how many are missing and
    /// the first), then fsync and rename the file onto its destination.
    pub fn finish(self) -> Result<()> {
        self.rows.finish("item")
    }
}

/// A neighbour list's real values: no NaN, closest first for `metric`.
fn check_knn_values(metric: KnnMetric, values: &[f32]) -> std::result::Result<usize, String> {
    if let Some(j) = values.iter().position(|v| v.is_nan()) {
        return Err(format!("the value at position {j} is NaN"));
    }
    for j in 1..values.len() {
        let (prev, v) = (values[j - 1], values[j]);
        let closer = if metric.larger_is_closer() {
            v > prev
        } else {
            v < prev
        };
        if closer {
            return Err(format!(
                "the values are not closest first for {}: position {j} ({v}) is closer than \
                 position {} ({prev})",
                metric.name(),
                j - 1
            ));
        }
    }
    Ok(values.len())
}

/// Reader of the k-NN graph file (see [`KnnGraphWriter`] for the format): opens the file, checks
/// the header against the size, and serves one item's neighbours at a time by reading its row
/// of each section — the N × k graph is never loaded whole.
#[derive(Debug)]
pub struct KnnGraph {
    file: File,
    path: PathBuf,
    n: usize,
    k: usize,
    metric: KnnMetric,
    buf: Vec<u8>,
}

impl KnnGraph {
    /// Open a graph; a file that is too small, foreign (another magic), of another version,
    /// with a bad header field or a size that does not match its header (truncated) is
    /// [`Error::Format`] naming the file and the cause.
    pub fn open(path: &Path) -> Result<Self> {
        let io = io_err(path);
        let (mut file, size) = open_with_size(path)?;
        let format = format_err(path);
        if size < KNN_HEADER {
            return Err(format(format!(
                "{size} bytes: too small for a k-NN graph file (a {KNN_HEADER}-byte header \
                 starting with \"DKNN\", then ids and values)"
            )));
        }
        let mut header = [0u8; KNN_HEADER as usize];
        file.read_exact(&mut header).map_err(&io)?;
        if header[..4] != KNN_MAGIC {
            return Err(format(format!(
                "not a k-NN graph file: it starts with {:?}, not the magic \"DKNN\"",
                String::from_utf8_lossy(&header[..4])
            )));
        }
        let word =
            |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (version, n, k, code, reserved) = (word(4), word(8), word(12), word(16), word(20));
        if version != KNN_VERSION {
            return Err(format(format!(
                "k-NN graph format version {version}; this build reads version {KNN_VERSION}"
            )));
        }
        let metric = KnnMetric::from_code(code).ok_or_else(|| {
            format(format!(
                "unknown metric code {code} in the header (0 inner product, 1 cosine, 2 L2)"
            ))
        })?;
        if n == 0 || k == 0 || reserved != 0 {
            return Err(format(format!(
                "bad header: N = {n}, k = {k}, reserved = {reserved} (N and k must be at least \
                 1, reserved 0)"
            )));
        }
        let expected = KNN_HEADER + n as u64 * k as u64 * 8;
        if size != expected {
            return Err(format(format!(
                "size {size} bytes does not match the header's N = {n}, k = {k}: a k-NN graph \
                 file is {KNN_HEADER} + N × k × 8 = {expected} bytes; the file is {} or not a \
                 k-NN graph",
                if size < expected {
                    "truncated"
                } else {
                    "too long"
                }
            )));
        }
        Ok(KnnGraph {
            file,
            path: path.to_path_buf(),
            n: n as usize,
            k: k as usize,
            metric,
            buf: Vec::new(),
        })
    }

    /// Number of items N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Neighbours per item k.
    pub fn k(&self) -> usize {
        self.k
    }

    /// What the values are.
    pub fn metric(&self) -> KnnMetric {
        self.metric
    }

    /// The path this graph was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The neighbours of `item`: k ids, closest first, [`KNN_PAD`] for missing ones, and their k
    /// values — two reads, nothing else loaded. An item out of range is [`Error::Invalid`], an
    /// id neither below N nor padding [`Error::Format`] (a corrupt file).
    pub fn row(&mut self, item: u32) -> Result<(Vec<u32>, Vec<f32>)> {
        let (n, k) = (self.n, self.k);
        if item as usize >= n {
            return Err(Error::Invalid(format!(
                "{}: {}",
                self.path.display(),
                item_out_of_range(item, n)
            )));
        }
        let offset = item as u64 * k as u64 * 4;
        read_at(
            &mut self.file,
            &self.path,
            KNN_HEADER + offset,
            k * 4,
            &mut self.buf,
        )?;
        let ids = le_u32s(&self.buf);
        if let Some(j) = ids.iter().position(|&v| v != KNN_PAD && v as usize >= n) {
            return Err(Error::Format {
                path: self.path.clone(),
                reason: format!(
                    "row {item} (of {n} × k = {k}) has id {} at position {j}, neither an item \
                     below N = {n} nor padding; the file is corrupt",
                    ids[j]
                ),
            });
        }
        let section = KNN_HEADER + n as u64 * k as u64 * 4;
        read_at(
            &mut self.file,
            &self.path,
            section + offset,
            k * 4,
            &mut self.buf,
        )?;
        let values = le_u32s(&self.buf).into_iter().map(f32::from_bits).collect();
        Ok((ids, values))
    }
}

// ---------------------------------------------------------------------------------------------
// Shards: partial caches of one run, and merging them back into the one-shot cache.
// ---------------------------------------------------------------------------------------------

/// The metadata keys a shard — the partial cache of a `--shard i/n` run — carries on top of the
/// run's own, all removed by [`merge_caches`]: `"shard":"i/n"` (1-based), `"shard_layout"`
/// (`"contiguous"` or `"strided"`), `"shard_starts_total"` (starts in the whole run) and
/// `"shard_starts_fingerprint"` (a checksum of the whole run's starts list).
pub const SHARD_KEYS: [&str; 4] = [
    "shard",
    "shard_layout",
    "shard_starts_total",
    "shard_starts_fingerprint",
];

/// How a run's starts list is split into shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardLayout {
    /// Shard i holds the i-th of n near-equal runs of consecutive positions (the first
    /// `total mod n` shards one longer).
    Contiguous,
    /// Shard i holds the positions p (0-based) with p mod n = i − 1.
    Strided,
}

impl ShardLayout {
    /// `"contiguous"` or `"strided"`, as in the metadata.
    pub fn name(self) -> &'static str {
        match self {
            ShardLayout::Contiguous => "contiguous",
            ShardLayout::Strided => "strided",
        }
    }

    /// The layout a metadata name means.
    pub fn from_name(name: &str) -> Option<ShardLayout> {
        match name {
            "contiguous" => Some(ShardLayout::Contiguous),
            "strided" => Some(ShardLayout::Strided),
            _ => None,
        }
    }

    /// The positions (0-based, in the whole run's starts list) of shard `index` (1-based) of
    /// `count` over `total` starts, in the order the shard computes and writes them.
    pub fn positions(self, index: usize, count: usize, total: usize) -> Vec<usize> {
        assert!(
            count >= 1 && (1..=count).contains(&index),
            "shard {index}/{count}"
        );
        match self {
            ShardLayout::Contiguous => {
                let (base, rem) = (total / count, total % count);
                let first = (index - 1) * base + (index - 1).min(rem);
                (first..first + shard_len(index, count, total)).collect()
            }
            ShardLayout::Strided => (index - 1..total).step_by(count).collect(),
        }
    }
}

/// How many of `total` starts shard `index` (1-based) of `count` holds — the same in both
/// layouts: `total / count`, plus one for the first `total mod count` shards.
pub fn shard_len(index: usize, count: usize, total: usize) -> usize {
    total / count + usize::from(index <= total % count)
}

/// What [`merge_caches`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeReport {
    /// n, the number of shards merged.
    pub shards: usize,
    /// Their layout.
    pub layout: ShardLayout,
    /// Sequences in the merged cache (the whole run's starts).
    pub sequences: usize,
}

/// A JSON object's members in file order, each value's text as it is in the file.
struct RawEntries<'a>(Vec<(String, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for RawEntries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawEntries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    out.push((key, map.next_value()?));
                }
                Ok(RawEntries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A diversity cache's members `metadata` and `sequences` (others skipped), read in one pass.
struct CacheEntries<'a> {
    metadata: Option<RawEntries<'a>>,
    sequences: Option<RawEntries<'a>>,
}

impl<'de> serde::Deserialize<'de> for CacheEntries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CacheEntries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object {\"metadata\":{…},\"sequences\":{…}}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = CacheEntries {
                    metadata: None,
                    sequences: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "metadata" => out.metadata = Some(map.next_value()?),
                        "sequences" => out.sequences = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// The number of elements of `text`, JSON the parser has already checked; None when it is not an
/// array. Counts the commas at depth 1, outside strings, without parsing the elements again.
fn array_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'[') {
        return None;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut commas, mut any) = (0usize, false);
    for &c in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'[' | b'{' => {
                any |= depth == 1;
                depth += 1;
            }
            b']' | b'}' => depth -= 1,
            b',' if depth == 1 => commas += 1,
            _ => {
                any |= depth == 1;
                in_string = c == b'"';
            }
        }
    }
    Some(if any { commas + 1 } else { 0 })
}

/// One input of [`merge_caches`], parsed: its metadata and rows as text borrowed from the file.
struct ShardPart<'a> {
    path: &'a Path,
    index: usize,
    count: usize,
    layout: ShardLayout,
    total: usize,
    metadata: Vec<(String, &'a serde_json::value::RawValue)>,
    rows: Vec<(String, &'a serde_json::value::RawValue)>,
}

impl<'a> ShardPart<'a> {
    fn parse(path: &'a Path, text: &'a str) -> Result<ShardPart<'a>> {
        let bad = |reason: String| Error::Format {
            path: path.to_path_buf(),
            reason,
        };
        let top: CacheEntries =
            serde_json::from_str(text).map_err(|e| bad(format!("not a diversity cache: {e}")))?;
        let missing = |name: &str| bad(format!("not a diversity cache: it has no \"{name}\""));
        let metadata = top.metadata.ok_or_else(|| missing("metadata"))?;
        let rows = top.sequences.ok_or_else(|| missing("sequences"))?;
        let field = |name: &str| -> Result<Value> {
            let raw = metadata
                .0
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    bad(format!(
                        "not a shard: its metadata has no \"{name}\" (only the partial caches \
                         of --shard runs can be merged)"
                    ))
                })?;
            serde_json::from_str(raw.get()).map_err(|e| bad(format!("metadata {name}: {e}")))
        };
        let shard = field("shard")?;
        let (index, count) = shard
            .as_str()
            .and_then(|s| s.split_once('/'))
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
            .filter(|&(i, n)| n >= 1 && (1..=n).contains(&i))
            .ok_or_else(|| {
                bad(format!(
                    "metadata shard is {shard}, not \"i/n\" with 1 <= i <= n"
                ))
            })?;
        let layout = field("shard_layout")?;
        let layout = layout
            .as_str()
            .and_then(ShardLayout::from_name)
            .ok_or_else(|| {
                bad(format!(
                    "metadata shard_layout is {layout}, not \"contiguous\" or \"strided\""
                ))
            })?;
        let total = field("shard_starts_total")?;
        let total = total
            .as_u64()
            .and_then(|t| usize::try_from(t).ok())
            .ok_or_else(|| {
                bad(format!(
                    "metadata shard_starts_total is {total}, not a non-negative integer"
                ))
            })?;
        Ok(ShardPart {
            path,
            index,
            count,
            layout,
            total,
            metadata: metadata.0,
            rows: rows.0,
        })
    }

    /// The metadata value of `key` as text, if present.
    fn meta(&self, key: &str) -> Option<&'a str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.get())
    }
}

/// Check that `part`'s metadata is `first`'s, but for `shard` and `generated_at` (shards run at
/// different times; [`merge_caches`] keeps the latest): the same keys in the same order, the
/// same values.
fn check_same_run(first: &ShardPart, part: &ShardPart) -> Result<()> {
    let skip = |k: &str| k == "shard" || k == "generated_at";
    let a: Vec<_> = first.metadata.iter().filter(|(k, _)| !skip(k)).collect();
    let b: Vec<_> = part.metadata.iter().filter(|(k, _)| !skip(k)).collect();
    // Every difference, so one message says all that sets the runs apart.
    let mut diffs = Vec::new();
    for (ka, va) in &a {
        match part.meta(ka) {
            None => diffs.push(format!("{ka} = {} there, absent here", va.get())),
            Some(vb) if vb != va.get() => {
                diffs.push(format!("{ka} = {vb} here, {} there", va.get()))
            }
            _ => {}
        }
    }
    for (kb, vb) in &b {
        if first.meta(kb).is_none() {
            diffs.push(format!("{kb} = {} here, absent there", vb.get()));
        }
    }
    if diffs.is_empty() && a.iter().map(|(k, _)| k).ne(b.iter().map(|(k, _)| k)) {
        diffs.push("the keys are in another order".to_string());
    }
    if part.meta("generated_at").is_some() != first.meta("generated_at").is_some() {
        diffs.push("only one of them has generated_at".to_string());
    }
    if diffs.is_empty() {
        return Ok(());
    }
    Err(Error::Format {
        path: part.path.to_path_buf(),
        reason: format!(
            "not a shard of the same run as {} (\"there\"): metadata {}",
            first.path.display(),
            diffs.join("; ")
        ),
    })
}

/// Merge the partial caches of a `--shard i/n` run (every shard 1..n, in any order) into the
/// cache `out`, byte-identical to the cache a one-shot run with the same options writes.
///
/// Each input must be a diversity cache whose metadata carries [`SHARD_KEYS`]; they must be the
/// shards of one run: the same metadata but for `shard` (and `generated_at`: the merged cache
/// keeps the latest), the same n, every shard 1..n exactly once, each holding as many sequences
/// as its slice of `shard_starts_total` starts, no start twice, every row as long. Otherwise the
/// merge is refused ([`Error::Format`] naming the offending file, [`Error::Invalid`] for a
/// missing shard) and `out` is untouched.
///
/// The output goes through a [`PendingFile`] (its location is checked before the inputs are
/// read; nothing is left on error) and the same JSON stream as [`JsonCacheWriter`]: the
/// metadata without the shard keys, then the rows in the one-shot run's order — the shards one
/// after another (contiguous) or interleaved by position (strided) — each row's text copied
/// through unchanged, so row ids come out as the shards wrote them. The inputs are read whole
/// (the rows are not decoded), so memory is about the inputs' total size.
pub fn merge_caches(inputs: &[PathBuf], out: &Path) -> Result<MergeReport> {
    if inputs.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no shards to merge",
            out.display()
        )));
    }
    // The output location first (a temporary file created and removed).
    drop(PendingFile::create(out)?);
    let texts = inputs
        .iter()
        .map(|p| std::fs::read_to_string(p).map_err(io_err(p)))
        .collect::<Result<Vec<_>>>()?;
    let mut parts = inputs
        .iter()
        .zip(&texts)
        .map(|(p, t)| ShardPart::parse(p, t))
        .collect::<Result<Vec<_>>>()?;
    let count = parts[0].count;
    if let Some(p) = parts.iter().find(|p| p.count != count) {
        return Err(Error::Format {
            path: p.path.to_path_buf(),
            reason: format!(
                "shard {}/{} of a split into {}, but {} is shard {}/{count}",
                p.index,
                p.count,
                p.count,
                parts[0].path.display(),
                parts[0].index
            ),
        });
    }
    let mut seen: Vec<Option<&Path>> = vec![None; count];
    for p in &parts {
        if let Some(other) = seen[p.index - 1] {
            return Err(Error::Format {
                path: p.path.to_path_buf(),
                reason: format!(
                    "shard {}/{count} is given twice (also {})",
                    p.index,
                    other.display()
                ),
            });
        }
        seen[p.index - 1] = Some(p.path);
    }
    for p in &parts[1..] {
        check_same_run(&parts[0], p)?;
    }
    let missing: Vec<String> = (1..=count)
        .filter(|&i| seen[i - 1].is_none())
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: cannot merge: shard(s) {} missing (given: {})",
            out.display(),
            missing.join(", "),
            parts
                .iter()
                .map(|p| format!("{} = {}/{count}", p.path.display(), p.index))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    parts.sort_by_key(|p| p.index);
    let (layout, total) = (parts[0].layout, parts[0].total);
    let mut keys: HashMap<&str, &Path> = HashMap::with_capacity(total);
    let mut row_len = None;
    for p in &parts {
        let want = shard_len(p.index, count, total);
        let bad = |reason: String| Error::Format {
            path: p.path.to_path_buf(),
            reason,
        };
        if p.rows.len() != want {
            return Err(bad(format!(
                "shard {}/{count} holds {} sequences, but the {} shard {} of {count} of a run \
                 of {total} starts holds {want}",
                p.index,
                p.rows.len(),
                layout.name(),
                p.index
            )));
        }
        for (key, raw) in &p.rows {
            // Keys as JSON strings in messages, as they are in the files.
            let shown = Value::String(key.clone());
            if let Some(other) = keys.insert(key, p.path) {
                return Err(bad(format!(
                    "start {shown} is also in {}{}",
                    other.display(),
                    if other == p.path {
                        " (twice in this file)"
                    } else {
                        ""
                    }
                )));
            }
            let len = array_len(raw.get())
                .ok_or_else(|| bad(format!("the sequence of {shown} is not an array")))?;
            match row_len {
                None => row_len = Some((len, p.path, shown)),
                Some((l, path, ref k)) if l != len => {
                    return Err(bad(format!(
                        "the sequence of {shown} has {len} entries, but that of {k} in {} has \
                         {l}",
                        path.display()
                    )))
                }
                _ => {}
            }
        }
    }
    // The run's metadata: the shard keys dropped, the latest generated_at.
    let generated_at = parts.iter().filter_map(|p| p.meta("generated_at")).max();
    let mut meta = Vec::from(&b"{"[..]);
    for (k, v) in parts[0]
        .metadata
        .iter()
        .filter(|(k, _)| !SHARD_KEYS.contains(&k.as_str()))
    {
        if meta.len() > 1 {
            meta.push(b',');
        }
        serde_json::to_writer(&mut meta, k).map_err(|e| Error::Invalid(e.to_string()))?;
        meta.push(b':');
        let v = if k == "generated_at" {
            generated_at.unwrap_or(v.get())
        } else {
            v.get()
        };
        meta.extend_from_slice(v.as_bytes());
    }
    meta.push(b'}');
    let mut stream = JsonStream::create(out, "cache", &meta, "sequences", None)?;
    // The one-shot run's order: the shards one after another, or position p from shard
    // p mod n (its row p div n).
    let order: Box<dyn Iterator<Item = (usize, usize)>> = match layout {
        ShardLayout::Contiguous => Box::new(
            parts
                .iter()
                .enumerate()
                .flat_map(|(s, p)| (0..p.rows.len()).map(move |i| (s, i))),
        ),
        ShardLayout::Strided => Box::new((0..total).map(|pos| (pos % count, pos / count))),
    };
    let mut buf = Vec::with_capacity(PIECE_BYTES + (1 << 16));
    for (s, i) in order {
        let (key, raw) = &parts[s].rows[i];
        buf.push(b',');
        serde_json::to_writer(&mut buf, key).map_err(|e| Error::Invalid(e.to_string()))?;
        buf.push(b':');
        buf.extend_from_slice(raw.get().as_bytes());
        if buf.len() >= PIECE_BYTES {
            stream.write_formatted(&mut buf)?;
        }
    }
    stream.write_formatted(&mut buf)?;
    stream.finish()?;
    Ok(MergeReport {
        shards: count,
        layout,
        sequences: total,
    })
}

impl JsonStream {
    /// Append rows already formatted as `,"<key>":[…]` each (the very first row loses its
    /// comma), e.g. copied from another cache, and clear `rows`. An I/O error marks the stream
    /// failed.
    fn write_formatted(&mut self, rows: &mut Vec<u8>) -> Result<()> {
        self.check_usable()?;
        let result = Self::emit(
            &mut self.out,
            self.pending.path(),
            self.what,
            &mut self.started,
            std::slice::from_ref(rows),
        );
        if result.is_err() {
            self.failed = true;
        }
        rows.clear();
        result
    }
}
