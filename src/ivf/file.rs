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
//! What both index files share lives here too, for `pq_file.rs`: the metric codes, the atomic
//! write, the writer of the lists and the trailing checksum, and the reader of the head (magic,
//! version, truncation), the length, the checksum, the list sizes and ids ([`IndexBytes`]).

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

pub(super) fn metric_code(m: Metric) -> u32 {
    match m {
        Metric::InnerProduct => 0,
        Metric::Cosine => 1,
        Metric::L2 => 2,
    }
}

/// Writes an index file's bytes to `path` through a temporary file (fsync, rename): an error
/// leaves no file, never a half-written one.
pub(super) fn write_index(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::pending_file::write_atomic(path, bytes)
}

/// An index file read and parsed by `parse`, whose refusal becomes [`Error::Format`] naming
/// the file.
pub(super) fn read_index<T>(
    path: &Path,
    parse: impl FnOnce(&[u8]) -> std::result::Result<T, String>,
) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).map_err(|reason| Error::Format {
        path: path.to_path_buf(),
        reason,
    })
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

/// An index file's bytes as a reader walks them, its magic, length and version checked (the
/// IVF-Flat and IVF-PQ files share this head and the trailing checksum).
pub(super) struct IndexBytes<'a> {
    b: &'a [u8],
    /// "IVF" or "IVF-PQ", for the messages.
    kind: &'static str,
}

impl<'a> IndexBytes<'a> {
    /// `b` if it starts with `magic`, holds at least a `header`-byte header and the checksum, and
    /// has format `version`; the messages name the `kind` of index.
    pub(super) fn open(
        b: &'a [u8],
        kind: &'static str,
        magic: [u8; 4],
        version: u32,
        header: usize,
    ) -> std::result::Result<IndexBytes<'a>, String> {
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
        let bytes = IndexBytes { b, kind };
        let v = bytes.u32_at(4);
        if v != version {
            return Err(format!(
                "{kind} index version {v}, this build reads version {version}"
            ));
        }
        Ok(bytes)
    }

    /// The u32 at byte `o`.
    pub(super) fn u32_at(&self, o: usize) -> u32 {
        u32::from_le_bytes(self.b[o..o + 4].try_into().expect("4 bytes"))
    }

    /// The u64 at byte `o`.
    pub(super) fn u64_at(&self, o: usize) -> u64 {
        u64::from_le_bytes(self.b[o..o + 8].try_into().expect("8 bytes"))
    }

    /// The `n` bytes at byte `o`.
    pub(super) fn bytes(&self, o: usize, n: usize) -> &'a [u8] {
        &self.b[o..o + n]
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

    /// The `nlist` u64 list sizes at byte `o`, refused unless they add up to `ntotal`.
    pub(super) fn list_sizes(
        &self,
        o: usize,
        nlist: usize,
        ntotal: usize,
    ) -> std::result::Result<Vec<usize>, String> {
        let sizes: Vec<usize> = (0..nlist)
            .map(|l| self.u64_at(o + l * 8) as usize)
            .collect();
        let total: u128 = sizes.iter().map(|&s| s as u128).sum();
        if total != ntotal as u128 {
            return Err(format!(
                "the lists hold {total} rows, the header says ntotal = {ntotal}"
            ));
        }
        Ok(sizes)
    }

    /// List `l`'s `size` u64 ids at byte `o`: each below ntotal (`seen.len()`), ascending, and
    /// in no list before (`seen`, which marks them). Both index files read their ids with it.
    pub(super) fn list_ids(
        &self,
        o: usize,
        l: usize,
        size: usize,
        seen: &mut [bool],
    ) -> std::result::Result<Vec<i64>, String> {
        let mut ids: Vec<i64> = Vec::with_capacity(size);
        for i in 0..size {
            let id = self.u64_at(o + i * 8);
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
        Ok(ids)
    }

    /// List `l`'s `size` rows of `d` f32 values at byte `o`, held to what `add` checks before a
    /// row enters an index: finite, and each nonzero row's norm, as the device stores it at
    /// `precision`, inside the range fp32 arithmetic handles exactly
    /// ([`crate::table::check_stored_norms`]). A row that `add` refuses can only come from
    /// another writer or an edit, and would rank first for the wrong queries.
    pub(super) fn list_rows(
        &self,
        o: usize,
        l: usize,
        size: usize,
        d: usize,
        precision: Precision,
    ) -> std::result::Result<Vec<f32>, String> {
        let rows = self.f32s(o, size * d)?;
        crate::table::check_stored_norms(&rows, d, precision, "row").map_err(|e| {
            let why = match e {
                Error::Invalid(m) => m,
                e => e.to_string(),
            };
            format!("list {l}: {why} (the index's add refuses such a row: the file was edited or written by another program)")
        })?;
        Ok(rows)
    }

    /// The `n` f32 values at byte `o`; a non-finite one is refused naming its byte.
    pub(super) fn f32s(&self, o: usize, n: usize) -> std::result::Result<Vec<f32>, String> {
        let v: Vec<f32> = self.b[o..o + n * 4]
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
pub(super) fn metric_from_code(c: u32) -> std::result::Result<Metric, String> {
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
        let d = self.d;
        let mut b = Vec::with_capacity(HEADER + (self.nlist + self.ntotal) * (d * 4 + 8) + 8);
        b.extend_from_slice(&IVF_MAGIC);
        b.extend_from_slice(&IVF_VERSION.to_le_bytes());
        b.extend_from_slice(&metric_code(self.metric).to_le_bytes());
        let p: u32 = match self.precision {
            Precision::Fp32 => 0,
            Precision::Fp16 => 1,
        };
        b.extend_from_slice(&p.to_le_bytes());
        for v in [d, self.nlist, self.ntotal] {
            b.extend_from_slice(&(v as u64).to_le_bytes());
        }
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
        write_index(path, &self.to_bytes()?)
    }

    /// Read an index file written by [`IvfFlat::save`] onto `ctx` (every check is made before
    /// anything is uploaded; see the format above). The k-means options of the loaded index
    /// are the defaults (it is trained already).
    pub fn load(ctx: &Context, path: &Path) -> Result<IvfFlat> {
        let mut index = read_index(path, |b| Self::from_bytes(ctx, b))?;
        index.coarse.upload(ctx)?;
        Ok(index)
    }

    fn from_bytes(ctx: &Context, b: &[u8]) -> std::result::Result<IvfFlat, String> {
        let b = IndexBytes::open(b, "IVF", IVF_MAGIC, IVF_VERSION, HEADER)?;
        let (u32_at, u64_at) = (|o| b.u32_at(o), |o| b.u64_at(o));
        let metric = metric_from_code(u32_at(8))?;
        let precision = match u32_at(12) {
            0 => Precision::Fp32,
            1 => Precision::Fp16,
            c => return Err(format!("unknown list storage code {c} (0 fp32, 1 fp16)")),
        };
        let (d, nlist, ntotal) = (u64_at(16), u64_at(24), u64_at(32));
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
        let f32s = |o, n| b.f32s(o, n);
        let mut o = HEADER;
        let centroids = f32s(o, nlist * d)?;
        o += nlist * d * 4;
        let sizes = b.list_sizes(o, nlist, ntotal)?;
        o += nlist * 8;
        let opts = IvfOptions {
            nlist,
            metric,
            precision,
            kmeans: KMeansOptions::default(),
        };
        let mut index = IvfFlat::new(ctx, d, &opts).map_err(|e| e.to_string())?;
        let mut seen = vec![false; ntotal];
        for (l, &size) in sizes.iter().enumerate() {
            let list = &mut index.lists[l];
            list.ids = b.list_ids(o, l, size, &mut seen)?;
            o += size * 8;
            list.data = b.list_rows(o, l, size, d, precision)?;
            o += size * d * 4;
        }
        index.ntotal = ntotal;
        index.coarse.centroids = centroids; // uploaded by `load`
        Ok(index)
    }
}
