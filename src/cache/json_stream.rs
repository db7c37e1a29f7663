//! The streaming JSON writer shared by the sequence cache, the rankings cache and the shard
//! merge: `{"metadata":{…},"<section>":{"<key>":[…], …}}`, rows formatted without per-number
//! allocation (on several threads for large batches) and mapped through the table's row ids. May
//! touch the checksums of `checksum.rs`, the crate's errors and atomic writes; no device.

use super::checksum::{fnv1a64, CHECKSUM_KEY, CHECKSUM_PLACEHOLDER, FNV64_START};
use super::rows::check_flat_len;
use crate::error::{Error, Result};
use crate::pending_file::{check_not_failed, io_err, PendingFile};
use serde_json::Value;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

/// Two decimal digits for every value 0..100, for writing numbers two digits at a time.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Write the decimal digits of `v` at the start of `out` (at least 10 bytes), two at a time;
/// returns how many.
#[inline]
fn put_u32(out: &mut [u8], v: u32) -> usize {
    let n = match v {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        1_000..=9_999 => 4,
        10_000..=99_999 => 5,
        100_000..=999_999 => 6,
        1_000_000..=9_999_999 => 7,
        10_000_000..=99_999_999 => 8,
        100_000_000..=999_999_999 => 9,
        _ => 10,
    };
    let digits = &mut out[..n];
    let (mut v, mut i) = (v, n);
    while v >= 100 {
        let p = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        digits[i] = PAIRS[p];
        digits[i + 1] = PAIRS[p + 1];
    }
    if v >= 10 {
        let p = v as usize * 2;
        digits[0] = PAIRS[p];
        digits[1] = PAIRS[p + 1];
    } else {
        digits[0] = b'0' + v as u8;
    }
    n
}

/// Append the decimal digits of `v` to `buf`, without allocating.
#[inline]
fn push_u32(buf: &mut Vec<u8>, v: u32) {
    let mut tmp = [0u8; 10];
    let n = put_u32(&mut tmp, v);
    buf.extend_from_slice(&tmp[..n]);
}

/// Append `v0,v1,…` (decimal, comma-separated) to `buf`: the text is written into room made
/// once for the whole list (at most 11 bytes a number), then the unused room is cut off, so
/// the inner loop does no capacity checks (one core formats well over 1 GB/s of text).
fn push_u32_list(buf: &mut Vec<u8>, seq: &[u32]) {
    let at = buf.len();
    buf.resize(at + seq.len() * 11, 0);
    let out = &mut buf[at..];
    let mut k = 0;
    for (j, &v) in seq.iter().enumerate() {
        if j > 0 {
            out[k] = b',';
            k += 1;
        }
        k += put_u32(&mut out[k..], v);
    }
    buf.truncate(at + k);
}

/// The JSON text of every row id, encoded once so rows are formatted by copying bytes.
#[derive(Debug)]
pub(super) struct IdText {
    /// Concatenated value texts: a string id JSON-quoted and escaped, a number id as its digits.
    text: Vec<u8>,
    /// Per id: the range of its value text in `text`, and whether it is a string (then the key is
    /// the value text itself; a number's key is its digits in quotes).
    spans: Vec<(usize, usize, bool)>,
}

impl IdText {
    /// [`IdText::new`] of `ids` when there are any.
    pub(super) fn of(path: &Path, ids: Option<&[Value]>) -> Result<Option<IdText>> {
        ids.map(|ids| IdText::new(path, ids)).transpose()
    }

    pub(super) fn new(path: &Path, ids: &[Value]) -> Result<IdText> {
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
    pub(super) fn len(&self) -> usize {
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
            push_u32_list(buf, seq);
        }
    }
    buf.push(b']');
}

/// Batches with at least this many numbers are formatted on several threads.
const PARALLEL_MIN_NUMBERS: usize = 1 << 15;
/// Text each formatting thread produces per round (bounds host memory to threads × this).
pub(super) const PIECE_BYTES: usize = 8 << 20;

/// What kind of JSON value `v` is, for messages.
pub(super) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The file under a [`JsonStream`]: every byte written to it goes into the running FNV-1a 64
/// when the stream carries its own checksum.
#[derive(Debug)]
pub(super) struct Hashing {
    file: File,
    hash: Option<u64>,
}

impl Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let k = self.file.write(bytes)?;
        if let Some(h) = &mut self.hash {
            *h = fnv1a64(*h, &bytes[..k]);
        }
        Ok(k)
    }
    fn write_vectored(&mut self, slices: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let k = self.file.write_vectored(slices)?;
        if let Some(h) = &mut self.hash {
            // The first k bytes of the slices, in order.
            let mut left = k;
            for s in slices {
                let n = left.min(s.len());
                *h = fnv1a64(*h, &s[..n]);
                left -= n;
                if left == 0 {
                    break;
                }
            }
        }
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Write every byte of `slices` (consumed from the front), retrying short and interrupted
/// writes.
fn write_all_vectored(w: &mut impl Write, slices: &mut [&[u8]]) -> std::io::Result<()> {
    let mut first = 0;
    while first < slices.len() {
        if slices[first].is_empty() {
            first += 1;
            continue;
        }
        let io: Vec<std::io::IoSlice> = slices[first..]
            .iter()
            .map(|s| std::io::IoSlice::new(s))
            .collect();
        let mut k = match w.write_vectored(&io) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while k > 0 {
            let n = k.min(slices[first].len());
            slices[first] = &slices[first][n..];
            k -= n;
            if slices[first].is_empty() {
                first += 1;
            }
        }
    }
    Ok(())
}

/// The streaming JSON machinery shared by [`JsonCacheWriter`] and [`RankingsWriter`]:
/// `{"metadata":<metadata>,"<section>":{` written at creation, rows `"<key>":[value, …]`
/// appended batch by batch (formatted on several threads when large), `}}` and a newline on
/// [`finish`](Self::finish). Rows are formatted with [`format_row`], so keys and values go
/// through the row ids when there are some; the callers check every index first.
///
/// With a checksum, the metadata ends with `"checksum":"fnv1a64:…"` (see
/// [`CHECKSUM_KEY`]): written as zeros, every byte hashed as it goes to the file, and the
/// digits written in place at [`finish`](Self::finish).
///
/// [`JsonCacheWriter`]: super::JsonCacheWriter
/// [`RankingsWriter`]: super::RankingsWriter
#[derive(Debug)]
pub(super) struct JsonStream {
    // Declared before `pending` so the file is closed before the temporary file is removed.
    out: Option<BufWriter<Hashing>>,
    /// Where the checksum's 16 digits are, when the stream carries one.
    checksum_at: Option<u64>,
    pending: PendingFile,
    pub(super) ids: Option<IdText>,
    /// Names the file in messages: "cache", "rankings cache".
    what: &'static str,
    started: bool,
    pub(super) failed: bool,
    bufs: Vec<Vec<u8>>,
    threads: usize,
}

impl JsonStream {
    /// Create the temporary file (the output location check) and write the opening, with
    /// `metadata` already serialized (a JSON object). With `checksum`, the metadata gains
    /// [`CHECKSUM_KEY`] as its last member; it must not have one already.
    pub(super) fn create(
        path: &Path,
        what: &'static str,
        metadata: &[u8],
        section: &str,
        ids: Option<IdText>,
        checksum: bool,
    ) -> Result<Self> {
        let mut head = b"{\"metadata\":".to_vec();
        let mut checksum_at = None;
        match metadata.strip_suffix(b"}") {
            Some(open) if checksum => {
                head.extend_from_slice(open);
                if open.iter().any(|c| !c.is_ascii_whitespace() && *c != b'{') {
                    head.push(b',');
                }
                head.extend_from_slice(format!("\"{CHECKSUM_KEY}\":\"").as_bytes());
                checksum_at = Some(head.len() as u64 + 8);
                head.extend_from_slice(CHECKSUM_PLACEHOLDER.as_bytes());
                head.extend_from_slice(b"\"}");
            }
            None if checksum => {
                return Err(Error::Invalid(format!(
                    "{}: {what} metadata is not a JSON object",
                    path.display()
                )))
            }
            _ => head.extend_from_slice(metadata),
        }
        head.extend_from_slice(format!(",\"{section}\":{{").as_bytes());
        let (pending, file) = PendingFile::create(path)?;
        let hash = checksum_at.map(|_| FNV64_START);
        let mut out = BufWriter::with_capacity(1 << 20, Hashing { file, hash });
        out.write_all(&head).map_err(io_err(path))?;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Ok(JsonStream {
            out: Some(out),
            checksum_at,
            pending,
            ids,
            what,
            started: false,
            failed: false,
            bufs: Vec::new(),
            threads,
        })
    }

    pub(super) fn path(&self) -> &Path {
        self.pending.path()
    }

    /// Set how many threads format large batches (at least 1).
    pub(super) fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// Refuse further rows after an I/O error left part of a batch in the file.
    pub(super) fn check_usable(&self) -> Result<()> {
        check_not_failed(self.failed, self.path(), self.what, false)
    }

    /// [`check_usable`](Self::check_usable), then `flat` values for `rows` rows (`what`) of
    /// `len` ([`check_flat_len`]).
    pub(super) fn check_batch(
        &self,
        rows: usize,
        flat: usize,
        len: usize,
        what: &str,
    ) -> Result<()> {
        self.check_usable()?;
        check_flat_len(self.path(), rows, flat, len, what)
    }

    /// Format and append rows (row `i` of `flat`, `len` entries, keyed by `starts[i]`), every
    /// index already checked against the ids. An I/O error marks the stream failed.
    pub(super) fn write_rows(&mut self, starts: &[u32], flat: &[u32], len: usize) -> Result<()> {
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
        out: &mut Option<BufWriter<Hashing>>,
        path: &Path,
        what: &str,
        started: &mut bool,
        pieces: &[Vec<u8>],
    ) -> Result<()> {
        let io = io_err(path);
        let out = out.as_mut().ok_or_else(|| {
            Error::Invalid(format!("{}: the {what} writer is closed", path.display()))
        })?;
        // The pieces go to the file in one vectored write (writev) where they can: one large
        // write call costs the kernel far less per byte than many 8 MiB ones.
        let mut slices: Vec<&[u8]> = Vec::with_capacity(pieces.len());
        for piece in pieces {
            if piece.is_empty() {
                continue;
            }
            slices.push(if *started { &piece[..] } else { &piece[1..] });
            *started = true;
        }
        out.flush().map_err(&io)?;
        write_all_vectored(out.get_mut(), &mut slices).map_err(&io)
    }

    /// Close the JSON, flush, fsync and rename the file onto its destination.
    pub(super) fn finish(mut self) -> Result<()> {
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
        let Hashing { mut file, hash } = out.into_inner().map_err(|e| Error::Io {
            path: path.clone(),
            source: e.into_error(),
        })?;
        if let (Some(at), Some(h)) = (self.checksum_at, hash) {
            file.seek(SeekFrom::Start(at))
                .and_then(|_| file.write_all(format!("{h:016x}").as_bytes()))
                .map_err(&io)?;
        }
        file.sync_all().map_err(&io)?;
        drop(file);
        let JsonStream { pending, .. } = self;
        pending.commit()
    }

    /// Append rows already formatted as `,"<key>":[…]` each (the very first row loses its
    /// comma), e.g. copied from another cache, and clear `rows`. An I/O error marks the stream
    /// failed.
    pub(super) fn write_formatted(&mut self, rows: &mut Vec<u8>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_lists_are_their_decimal_text() {
        let mut edges = vec![0u32, u32::MAX, u32::MAX - 1];
        for p in 0..10 {
            let t = 10u32.pow(p);
            edges.extend([t, t - 1, t + 1, t.saturating_mul(5)]);
        }
        let mut x = 12345u32;
        for _ in 0..1000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            edges.push(x >> (x % 29));
        }
        for len in [0, 1, 2, edges.len()] {
            let seq = &edges[..len];
            let mut buf = b"[".to_vec();
            push_u32_list(&mut buf, seq);
            let want: Vec<String> = seq.iter().map(|v| v.to_string()).collect();
            assert_eq!(
                String::from_utf8(buf).unwrap(),
                format!("[{}", want.join(","))
            );
            for &v in seq {
                let mut one = Vec::new();
                push_u32(&mut one, v);
                assert_eq!(one, v.to_string().into_bytes());
            }
        }
    }
}
