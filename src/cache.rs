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

/// Batches with at least this many numbers are formatted on several threads.
const PARALLEL_MIN_NUMBERS: usize = 1 << 15;
/// Text each formatting thread produces per round (bounds host memory to threads × this).
const PIECE_BYTES: usize = 8 << 20;

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
    // Declared before `pending` so the file is closed before the temporary file is removed.
    out: Option<BufWriter<File>>,
    pending: PendingFile,
    ids: Option<IdText>,
    seen: HashSet<u32>,
    written: usize,
    started: bool,
    failed: bool,
    bufs: Vec<Vec<u8>>,
    threads: usize,
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
                match metadata {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::String(_) => "a string",
                    Value::Array(_) => "an array",
                    Value::Object(_) => "an object",
                }
            )));
        }
        let ids = ids
            .as_deref()
            .map(|ids| IdText::new(path, ids))
            .transpose()?;
        let (pending, file) = PendingFile::create(path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let io = io_err(path);
        out.write_all(b"{\"metadata\":").map_err(&io)?;
        serde_json::to_writer(&mut out, metadata).map_err(|e| Error::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        out.write_all(b",\"sequences\":{").map_err(&io)?;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Ok(JsonCacheWriter {
            out: Some(out),
            pending,
            ids,
            seen: HashSet::new(),
            written: 0,
            started: false,
            failed: false,
            bufs: Vec::new(),
            threads,
        })
    }

    /// Set how many threads format large batches (default: the machine's available
    /// parallelism; 1 formats on the calling thread, e.g. to leave cores to other work). The
    /// bytes written do not depend on it.
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
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
        if self.failed {
            return Err(Error::Invalid(format!(
                "{}: the cache writer failed earlier; start a new one",
                self.pending.path().display()
            )));
        }
        let want = starts.len().checked_mul(len);
        if want != Some(flat.len()) {
            return Err(Error::Invalid(format!(
                "{}: {} values for {} sequences of length {len} (expected {})",
                self.pending.path().display(),
                flat.len(),
                starts.len(),
                want.map_or_else(|| "an overflowing count".to_string(), |w| w.to_string())
            )));
        }
        self.claim_starts(starts)?;
        let started = self.started;
        let result = self.format_and_write(starts, flat, len);
        match &result {
            Ok(()) => self.written += starts.len(),
            // Part of the batch may be in the file: the cache can no longer be finished.
            Err(Error::Io { .. }) => self.failed = true,
            Err(_) => {
                // Refused before anything was written: release the starts so the caller may
                // retry.
                debug_assert_eq!(started, self.started);
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
            let problem = match &self.ids {
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
                    self.pending.path().display()
                )));
            }
        }
        Ok(())
    }

    fn format_and_write(&mut self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
        let rows = starts.len();
        if rows == 0 {
            return Ok(());
        }
        if let Some(ids) = &self.ids {
            if let Some(pos) = flat.iter().position(|&v| v as usize >= ids.len()) {
                return Err(Error::Invalid(format!(
                    "{}: the sequence of start {} has index {} at position {}, but \
                     there are only {} ids (valid indices 0..{})",
                    self.pending.path().display(),
                    starts[pos / len],
                    flat[pos],
                    pos % len,
                    ids.len(),
                    ids.len()
                )));
            }
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
        let (out, path, started) = (&mut self.out, self.pending.path(), &mut self.started);
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
                    Self::emit(out, path, started, ready)
                } else {
                    Ok(())
                }
            });
            written?;
            std::mem::swap(&mut next, &mut ready);
            have_ready = true;
            first_row += round_rows;
        }
        Self::emit(out, path, started, ready)
    }

    /// Write formatted pieces in order; the very first row of the cache loses its leading comma.
    fn emit(
        out: &mut Option<BufWriter<File>>,
        path: &Path,
        started: &mut bool,
        pieces: &[Vec<u8>],
    ) -> Result<()> {
        let io = io_err(path);
        let out = out.as_mut().ok_or_else(|| {
            Error::Invalid(format!("{}: the cache writer is closed", path.display()))
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

    /// How many sequences have been written so far.
    pub fn sequences_written(&self) -> usize {
        self.written
    }

    /// Close the JSON, flush, fsync and rename the file onto its destination. Until this
    /// succeeds the destination is untouched.
    pub fn finish(mut self) -> Result<()> {
        if self.failed {
            return Err(Error::Invalid(format!(
                "{}: the cache writer failed earlier; the cache was not written",
                self.pending.path().display()
            )));
        }
        let path = self.pending.path().to_path_buf();
        let io = io_err(&path);
        let mut out = self.out.take().ok_or_else(|| {
            Error::Invalid(format!("{}: the cache writer is closed", path.display()))
        })?;
        out.write_all(b"}}\n").map_err(&io)?;
        let file = out.into_inner().map_err(|e| Error::Io {
            path: path.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(&io)?;
        drop(file);
        let JsonCacheWriter { pending, .. } = self;
        pending.commit()
    }
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
    // Declared before `pending` so the file is closed before the temporary file is removed.
    file: File,
    pending: PendingFile,
    n: usize,
    len: usize,
    written: Vec<u64>,
    rows_written: usize,
    buf: Vec<u8>,
    failed: bool,
}

impl BinaryCacheWriter {
    /// Create the temporary file beside `path`, sized to `4 + n·len·4` bytes, and write the
    /// header `n`. `n` must be 1..=u32::MAX and `len` at least 1.
    pub fn create(path: &Path, n: usize, len: usize) -> Result<Self> {
        let n32 = u32::try_from(n).ok().filter(|&v| v >= 1).ok_or_else(|| {
            Error::Invalid(format!(
                "{}: binary cache of N = {n} rows: N must be 1..={}",
                path.display(),
                u32::MAX
            ))
        })?;
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
        let (pending, mut file) = PendingFile::create(path)?;
        let io = io_err(path);
        file.set_len(size).map_err(&io)?;
        file.write_all(&n32.to_le_bytes()).map_err(&io)?;
        Ok(BinaryCacheWriter {
            file,
            pending,
            n,
            len,
            written: vec![0; n.div_ceil(64)],
            rows_written: 0,
            buf: Vec::with_capacity(len * 4),
            failed: false,
        })
    }

    /// Write the sequence of `start` (`start < n`, `seq.len() == len`, every entry `< n`) at its
    /// place, `4 + start·len·4`. A start written twice is refused.
    pub fn write_row(&mut self, start: u32, seq: &[u32]) -> Result<()> {
        let path = self.pending.path();
        if self.failed {
            return Err(Error::Invalid(format!(
                "{}: the cache writer failed earlier; start a new one",
                path.display()
            )));
        }
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
        let (word, bit) = (s / 64, 1u64 << (s % 64));
        if self.written[word] & bit != 0 {
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
        let result = self
            .file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.write_all(&self.buf));
        if let Err(source) = result {
            self.failed = true;
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            });
        }
        self.written[word] |= bit;
        self.rows_written += 1;
        Ok(())
    }

    /// Write a batch: row `i` of `flat` (of the cache's row length) is the sequence of
    /// `starts[i]`. Rows are checked one by one; on error the rows before it are written.
    pub fn write_batch(&mut self, starts: &[u32], flat: &[u32]) -> Result<()> {
        if starts.len().checked_mul(self.len) != Some(flat.len()) {
            return Err(Error::Invalid(format!(
                "{}: {} values for {} sequences of length {}",
                self.pending.path().display(),
                flat.len(),
                starts.len(),
                self.len
            )));
        }
        for (&s, row) in starts.iter().zip(flat.chunks_exact(self.len)) {
            self.write_row(s, row)?;
        }
        Ok(())
    }

    /// How many rows have been written so far.
    pub fn rows_written(&self) -> usize {
        self.rows_written
    }

    /// Check that every row was written (else [`Error::Invalid`] saying how many are missing and
    /// the first), then fsync and rename the file onto its destination.
    pub fn finish(self) -> Result<()> {
        let path = self.pending.path().to_path_buf();
        if self.failed {
            return Err(Error::Invalid(format!(
                "{}: the cache writer failed earlier; the cache was not written",
                path.display()
            )));
        }
        if self.rows_written != self.n {
            let first = (0..self.n)
                .find(|&s| self.written[s / 64] & (1u64 << (s % 64)) == 0)
                .unwrap_or(0);
            return Err(Error::Invalid(format!(
                "{}: {} of {} rows are missing (the first is start {first}); the cache was not \
                 written",
                path.display(),
                self.n - self.rows_written,
                self.n
            )));
        }
        self.file.sync_all().map_err(io_err(&path))?;
        let BinaryCacheWriter { file, pending, .. } = self;
        drop(file);
        pending.commit()
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
        let mut file = File::open(path).map_err(&io)?;
        let size = file.metadata().map_err(&io)?.len();
        let format = |reason: String| Error::Format {
            path: path.to_path_buf(),
            reason,
        };
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
        let io = io_err(&self.path);
        self.buf.resize(self.len * 4, 0);
        self.file
            .seek(SeekFrom::Start(BIN_HEADER + s as u64 * self.len as u64 * 4))
            .map_err(&io)?;
        self.file.read_exact(&mut self.buf).map_err(&io)?;
        let row: Vec<u32> = self
            .buf
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
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
        let flat: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
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
