//! The IVF-Flat index file: its writer and its reader. May touch the index it reads or writes, the
//! file, the checksum, atomic writes and the crate's errors. The format, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `DIVF` |
//! | 4 | u32 version (1) |
//! | 4 | u32 metric: 0 inner product, 1 cosine, 2 L2 |
//! | 4 | u32 list storage: 0 fp32, 1 fp16 |
//! | 8 | u64 D |
//! | 8 | u64 nlist |
//! | 8 | u64 ntotal (rows added) |
//! | nlist × D × 4 | f32 centroids, row-major |
//! | nlist × 8 | u64 rows of each list |
//! | per list | its u64 ids (ascending), then its rows as f32 (size × D) |
//! | 8 | u64 FNV-1a 64 of every byte before it |
//!
//! Every id 0 … ntotal − 1 is in exactly one list. The values are the rows as added (f32); the
//! device copy is made on load. A file is written through a temporary file and a rename
//! ([`crate::files::write_atomic`]): an error leaves no file and never a half-written one. A file
//! that is not exactly this — another magic or version, a length that does not add up, a checksum
//! that does not match, an id out of place, a non-finite value, a row that `add` would refuse
//! (a nonzero norm outside 2⁻⁴⁰ … 2⁴⁰ at the index's precision) — is refused with [`Error::Format`]
//! naming the file and the fault, before anything is uploaded.
//!
//! What both index files share lives here too, for `pq_file.rs`: the one writer and reader
//! ([`IndexFile`], [`save`], [`load`]: the atomic write, the read and its refusal), the header
//! and the metric codes, the writer of the lists and the trailing checksum, and the reader of the
//! head (magic, version, truncation), the length, the checksum, the list sizes, ids and rows
//! ([`IndexBytes`]).

use super::coarse::Coarse;
use super::{IvfFlat, IvfOptions, KMeansOptions};
use crate::checksum;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::table::Precision;
use std::path::Path;

/// The index file's first four bytes.
pub const IVF_MAGIC: [u8; 4] = *b"DIVF";
/// The index format version this build writes and reads.
pub const IVF_VERSION: u32 = 1;
/// Bytes of the fixed header.
const HEADER: usize = 40;

/// FNV-1a 64 of `bytes`, the index files' trailing checksum.
pub(super) fn fnv1a64(bytes: &[u8]) -> u64 {
    checksum::fnv1a64(checksum::FNV64_START, bytes)
}

fn metric_code(m: Metric) -> u32 {
    match m {
        Metric::InnerProduct => 0,
        Metric::Cosine => 1,
        Metric::L2 => 2,
    }
}

/// What the one writer and reader of the index files ([`save`], [`load`]) ask of an index:
/// IVF-Flat's (here) and IVF-PQ's (`pq_file.rs`).
pub(super) trait IndexFile: Sized {
    /// The file's kind, magic, version and header.
    const FORMAT: Format;
    /// The index in `b` (its magic, length and version checked, read from its header's
    /// metric on), on `ctx`; the coarse centroids are uploaded by [`load`].
    fn parse(ctx: &Context, b: IndexBytes) -> std::result::Result<Self, String>;
    /// The coarse quantizer.
    fn coarse_mut(&mut self) -> &mut Coarse;
}

/// An index file's kind ("IVF" or "IVF-PQ", for the messages), its first four bytes, the
/// format version this build writes and reads, and the fixed header's u64 counts after the
/// metric and the index's word (D, nlist, …).
pub(super) struct Format {
    kind: &'static str,
    magic: [u8; 4],
    version: u32,
    counts: usize,
}

impl Format {
    pub(super) const fn new(
        kind: &'static str,
        magic: [u8; 4],
        version: u32,
        counts: usize,
    ) -> Self {
        Format {
            kind,
            magic,
            version,
            counts,
        }
    }
}

/// Bytes of an index file's fixed header: magic, version, metric, the index's word, then
/// `counts` u64.
fn header_bytes(counts: usize) -> usize {
    16 + 8 * counts
}

/// Writes an index file's `bytes` to `path` through a temporary file (fsync, rename): an error
/// leaves no file, never a half-written one.
pub(super) fn save(path: &Path, bytes: Result<Vec<u8>>) -> Result<()> {
    crate::pending_file::write_atomic(path, &bytes?)
}

/// Reads the index file at `path` onto `ctx`: every check before anything is uploaded, a
/// refusal as [`Error::Format`] naming the file.
pub(super) fn load<T: IndexFile>(ctx: &Context, path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut index = IndexBytes::open(&bytes, &T::FORMAT)
        .and_then(|b| T::parse(ctx, b))
        .map_err(|reason| Error::Format {
            path: path.to_path_buf(),
            reason,
        })?;
    index.coarse_mut().upload(ctx)?;
    Ok(index)
}

/// An index file's head: magic, version, the metric's code, the index's `word` and the
/// `counts`, each a u64.
pub(super) fn put_header<T: IndexFile>(metric: Metric, word: u32, counts: &[usize]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&T::FORMAT.magic);
    b.extend_from_slice(&T::FORMAT.version.to_le_bytes());
    b.extend_from_slice(&metric_code(metric).to_le_bytes());
    b.extend_from_slice(&word.to_le_bytes());
    for &v in counts {
        b.extend_from_slice(&(v as u64).to_le_bytes());
    }
    b
}

/// Appends the inverted lists `(ids, codes, values)` as both index files end: each list's size
/// (u64), then each list's u64 ids, its codes (none in an IVF-Flat file) and its f32 values,
/// then the FNV-1a 64 of every byte before it.
pub(super) fn put_lists_and_checksum<'a>(
    b: &mut Vec<u8>,
    lists: impl Iterator<Item = (&'a [i64], &'a [u8], &'a [f32])> + Clone,
) {
    for (ids, _, _) in lists.clone() {
        b.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    }
    for (ids, codes, data) in lists {
        for &id in ids {
            b.extend_from_slice(&(id as u64).to_le_bytes());
        }
        b.extend_from_slice(codes);
        for v in data {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    let h = fnv1a64(b);
    b.extend_from_slice(&h.to_le_bytes());
}

/// An index file's bytes as a reader walks them from its header on (`at`), its magic, length
/// and version checked (the IVF-Flat and IVF-PQ files share this head, the lists and the
/// trailing checksum).
pub(super) struct IndexBytes<'a> {
    b: &'a [u8],
    /// "IVF" or "IVF-PQ", for the messages.
    kind: &'static str,
    /// The next byte to read.
    at: usize,
    /// The header's u64 counts.
    counts: usize,
}

impl<'a> IndexBytes<'a> {
    /// `b` if it starts with the format's magic, holds at least its header and the checksum,
    /// and has its version; the messages name its kind of index.
    fn open(b: &'a [u8], f: &Format) -> std::result::Result<IndexBytes<'a>, String> {
        let (kind, magic, version) = (f.kind, f.magic, f.version);
        let header = header_bytes(f.counts);
        let len = b.len();
        if len < 4 || b[..4] != magic {
            let m = String::from_utf8_lossy(&magic);
            return Err(format!("not a diversity {kind} index file (no {m} magic)"));
        }
        if len < header + 8 {
            return Err(format!(
                "truncated {kind} index: {len} bytes, the header and checksum alone take {}",
                header + 8
            ));
        }
        let counts = f.counts;
        let bytes = IndexBytes {
            b,
            kind,
            at: 8,
            counts,
        };
        let v = bytes.u32_at(4);
        if v != version {
            return Err(format!(
                "{kind} index version {v}, this build reads version {version}"
            ));
        }
        Ok(bytes)
    }

    /// The u32 at byte `o`.
    fn u32_at(&self, o: usize) -> u32 {
        u32::from_le_bytes(self.b[o..o + 4].try_into().expect("4 bytes"))
    }

    /// The u64 at byte `o`.
    fn u64_at(&self, o: usize) -> u64 {
        u64::from_le_bytes(self.b[o..o + 8].try_into().expect("8 bytes"))
    }

    /// The header after the version: the metric (refused if unknown), the index's word and
    /// the format's u64 counts; reading goes on after them.
    pub(super) fn header(&mut self) -> std::result::Result<(Metric, u32, Vec<u64>), String> {
        let n = self.counts;
        let metric = metric_from_code(self.u32_at(8))?;
        let counts = (0..n).map(|i| self.u64_at(16 + 8 * i)).collect();
        self.at = header_bytes(n);
        Ok((metric, self.u32_at(12), counts))
    }

    /// The next `n` bytes.
    pub(super) fn bytes(&mut self, n: usize) -> &'a [u8] {
        self.at += n;
        &self.b[self.at - n..self.at]
    }

    /// Refuses a file whose length is not `want`, the length its header's `shape` (e.g.
    /// "D = 4, nlist = 2, ntotal = 9") makes, or whose trailing checksum does not match.
    pub(super) fn check_length_and_checksum(
        &self,
        want: u128,
        shape: &str,
    ) -> std::result::Result<(), String> {
        let (len, kind) = (self.b.len(), self.kind);
        if want != len as u128 {
            return Err(format!(
                "length {len} bytes, but {shape} make {want}: truncated or not an {kind} index"
            ));
        }
        let stored = self.u64_at(len - 8);
        let h = fnv1a64(&self.b[..len - 8]);
        if h != stored {
            return Err(format!(
                "checksum mismatch (stored {stored:016x}, bytes give {h:016x}): the file is \
                 corrupt or was edited"
            ));
        }
        Ok(())
    }

    /// The next `nlist` u64 list sizes, refused unless they add up to `ntotal`.
    pub(super) fn list_sizes(
        &mut self,
        nlist: usize,
        ntotal: usize,
    ) -> std::result::Result<Vec<usize>, String> {
        let o = self.at;
        let sizes: Vec<usize> = (0..nlist)
            .map(|l| self.u64_at(o + l * 8) as usize)
            .collect();
        self.at += nlist * 8;
        let total: u128 = sizes.iter().map(|&s| s as u128).sum();
        if total != ntotal as u128 {
            return Err(format!(
                "the lists hold {total} rows, the header says ntotal = {ntotal}"
            ));
        }
        Ok(sizes)
    }

    /// The lists of `sizes` rows (adding up to ntotal): each list's u64 ids — each below
    /// ntotal, ascending, and in no list before —, then what `rest(bytes, l, ids)` reads of
    /// list `l` after them. Both index files read their lists with it.
    pub(super) fn lists<L>(
        &mut self,
        sizes: &[usize],
        ntotal: usize,
        mut rest: impl FnMut(&mut Self, usize, Vec<i64>) -> std::result::Result<L, String>,
    ) -> std::result::Result<Vec<L>, String> {
        let mut seen = vec![false; ntotal];
        let mut lists = Vec::with_capacity(sizes.len());
        for (l, &size) in sizes.iter().enumerate() {
            let ids = self.list_ids(l, size, &mut seen)?;
            lists.push(rest(self, l, ids)?);
        }
        Ok(lists)
    }

    /// List `l`'s next `size` u64 ids: each below ntotal (`seen.len()`), ascending, and in no
    /// list before (`seen`, which marks them).
    fn list_ids(
        &mut self,
        l: usize,
        size: usize,
        seen: &mut [bool],
    ) -> std::result::Result<Vec<i64>, String> {
        let mut ids: Vec<i64> = Vec::with_capacity(size);
        for i in 0..size {
            let id = self.u64_at(self.at + i * 8);
            let ok = (id as u128) < seen.len() as u128
                && !seen[id as usize]
                && ids.last().is_none_or(|&p| (p as u64) < id);
            if !ok {
                return Err(format!(
                    "list {l} entry {i}: id {id} is out of range, repeated or out of order"
                ));
            }
            seen[id as usize] = true;
            ids.push(id as i64);
        }
        self.at += size * 8;
        Ok(ids)
    }

    /// List `l`'s next `size` rows of `d` f32 values, held to what `add` checks before a
    /// row enters an index: finite, and each nonzero row's norm, as the device stores it at
    /// `precision`, inside the range fp32 arithmetic handles exactly
    /// ([`crate::table::check_stored_norms`]). A row that `add` refuses can only come from
    /// another writer or an edit, and would rank first for the wrong queries.
    pub(super) fn list_rows(
        &mut self,
        l: usize,
        size: usize,
        d: usize,
        precision: Precision,
    ) -> std::result::Result<Vec<f32>, String> {
        let rows = self.f32s(size * d)?;
        crate::table::check_stored_norms(&rows, d, precision, "row").map_err(|e| {
            let why = match e {
                Error::Invalid(m) => m,
                e => e.to_string(),
            };
            format!("list {l}: {why} (the index's add refuses such a row: the file was edited or written by another program)")
        })?;
        Ok(rows)
    }

    /// The next `n` f32 values; a non-finite one is refused naming its byte.
    pub(super) fn f32s(&mut self, n: usize) -> std::result::Result<Vec<f32>, String> {
        let o = self.at;
        let v: Vec<f32> = self
            .bytes(n * 4)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        match v.iter().position(|x| !x.is_finite()) {
            Some(p) => Err(format!("non-finite value at byte {}", o + p * 4)),
            None => Ok(v),
        }
    }
}

/// The metric of a file's code (the inverse of `metric_code`).
fn metric_from_code(c: u32) -> std::result::Result<Metric, String> {
    match c {
        0 => Ok(Metric::InnerProduct),
        1 => Ok(Metric::Cosine),
        2 => Ok(Metric::L2),
        c => Err(format!("unknown metric code {c} (0, 1 or 2)")),
    }
}

impl IvfFlat {
    /// The index file's bytes (see the format above). Errors: an untrained index.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if !self.is_trained() {
            return Err(Error::Invalid(
                "the IVF index is not trained: nothing to save".into(),
            ));
        }
        let p: u32 = match self.precision {
            Precision::Fp32 => 0,
            Precision::Fp16 => 1,
        };
        let counts = [self.d, self.nlist, self.ntotal];
        let mut b = put_header::<IvfFlat>(self.metric, p, &counts);
        for v in self.coarse.centroids() {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let lists = self
            .lists
            .iter()
            .map(|l| (&l.ids[..], &[][..], &l.data[..]));
        put_lists_and_checksum(&mut b, lists);
        Ok(b)
    }

    /// Write the index to `path` (temporary file, fsync, rename). Errors: an untrained index
    /// (no file is created), the output location.
    pub fn save(&self, path: &Path) -> Result<()> {
        save(path, self.to_bytes())
    }

    /// Read an index file written by [`IvfFlat::save`] onto `ctx` (every check is made before
    /// anything is uploaded; see the format above). The k-means options of the loaded index
    /// are the defaults (it is trained already).
    pub fn load(ctx: &Context, path: &Path) -> Result<IvfFlat> {
        load(ctx, path)
    }
}

impl IndexFile for IvfFlat {
    const FORMAT: Format = Format::new("IVF", IVF_MAGIC, IVF_VERSION, 3);

    fn parse(ctx: &Context, mut b: IndexBytes) -> std::result::Result<IvfFlat, String> {
        let (metric, p, counts) = b.header()?;
        let precision = match p {
            0 => Precision::Fp32,
            1 => Precision::Fp16,
            c => return Err(format!("unknown list storage code {c} (0 fp32, 1 fp16)")),
        };
        let (d, nlist, ntotal) = (counts[0], counts[1], counts[2]);
        if d == 0 || nlist == 0 {
            return Err(format!(
                "header has D = {d}, nlist = {nlist}: both must be ≥ 1"
            ));
        }
        // The length the header implies, in u128 so no header overflows it.
        let (d128, nl, nt) = (d as u128, nlist as u128, ntotal as u128);
        let want = HEADER as u128 + nl * d128 * 4 + nl * 8 + nt * (8 + d128 * 4) + 8;
        b.check_length_and_checksum(
            want,
            &format!("D = {d}, nlist = {nlist}, ntotal = {ntotal}"),
        )?;
        // The file's length is in memory, so every count below fits usize.
        let (d, nlist, ntotal) = (d as usize, nlist as usize, ntotal as usize);
        let centroids = b.f32s(nlist * d)?;
        let sizes = b.list_sizes(nlist, ntotal)?;
        let opts = IvfOptions {
            nlist,
            metric,
            precision,
            kmeans: KMeansOptions::default(),
        };
        let mut index = IvfFlat::new(ctx, d, &opts).map_err(|e| e.to_string())?;
        let rows = b.lists(&sizes, ntotal, |b, l, ids| {
            let size = ids.len();
            Ok((ids, b.list_rows(l, size, d, precision)?))
        })?;
        for (list, (ids, data)) in index.lists.iter_mut().zip(rows) {
            (list.ids, list.data) = (ids, data);
        }
        index.core.ntotal = ntotal;
        index.core.coarse.centroids = centroids; // uploaded by `load`
        Ok(index)
    }

    fn coarse_mut(&mut self) -> &mut Coarse {
        &mut self.core.coarse
    }
}
