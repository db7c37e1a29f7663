//! The IVF-PQ index file: its writer and its reader. May touch the IVF-PQ index it reads or writes,
//! the header reader of `file.rs`, the checksum, atomic writes and the crate's errors. The
//! format, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `DIVP` |
//! | 4 | u32 version (1) |
//! | 4 | u32 metric: 0 inner product, 1 cosine, 2 L2 |
//! | 4 | u32 flags: bit 0 = the rows are kept (re-rank); no other bit is set |
//! | 8 | u64 D |
//! | 8 | u64 nlist |
//! | 8 | u64 M (sub-quantizers, bytes a code) |
//! | 8 | u64 ntotal (rows added) |
//! | nlist × D × 4 | f32 coarse centroids, row-major |
//! | 256 × D × 4 | f32 PQ centroids: sub-space m's centroid c at (m · 256 + c) · D / M |
//! | nlist × 8 | u64 rows of each list |
//! | per list | its u64 ids (ascending), its codes (size × M bytes), then, if kept, its rows as f32 (size × D; unit rows for cosine) |
//! | 8 | u64 FNV-1a 64 of every byte before it |
//!
//! Every id 0 … ntotal − 1 is in exactly one list. Written through a temporary file and a rename
//! ([`crate::files::write_atomic`]): an error leaves no file. A file that is not exactly this —
//! another magic or version, unknown flags, M not dividing D, a length that does not add up, a
//! checksum that does not match, an id out of place, a non-finite value, a kept row that `add`
//! would refuse (a nonzero norm outside 2⁻⁴⁰ … 2⁴⁰) — is refused with
//! [`Error::Format`] naming the file and the fault, before anything is uploaded.

use super::file::{
    metric_code, metric_from_code, put_lists_and_checksum, read_index, write_index, IndexBytes,
};
use super::ivfpq::{IvfPq, IvfPqOptions, PqList};
use super::pq::{ProductQuantizer, PQ_KSUB};
use super::KMeansOptions;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::table::Precision;
use std::path::Path;

/// The IVF-PQ index file's first four bytes.
pub const IVFPQ_MAGIC: [u8; 4] = *b"DIVP";
/// The IVF-PQ format version this build writes and reads.
pub const IVFPQ_VERSION: u32 = 1;
/// Bytes of the fixed header.
const HEADER: usize = 48;

impl IvfPq {
    /// The index file's bytes (see the format above). Errors: an untrained index.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let Some(pq) = &self.pq else {
            return Err(Error::Invalid(
                "the IVF-PQ index is not trained: nothing to save".into(),
            ));
        };
        let mut b = Vec::new();
        b.extend_from_slice(&IVFPQ_MAGIC);
        b.extend_from_slice(&IVFPQ_VERSION.to_le_bytes());
        b.extend_from_slice(&metric_code(self.metric).to_le_bytes());
        b.extend_from_slice(&(self.keep_vectors as u32).to_le_bytes());
        for v in [self.d, self.nlist, self.m, self.ntotal] {
            b.extend_from_slice(&(v as u64).to_le_bytes());
        }
        for v in self.coarse.centroids().iter().chain(pq.centroids()) {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let lists = self
            .lists
            .iter()
            .map(|l| (&l.ids[..], &l.codes[..], &l.data[..]));
        put_lists_and_checksum(&mut b, lists);
        Ok(b)
    }

    /// Write the index to `path` (temporary file, fsync, rename). Errors: an untrained index
    /// (no file is created), the output location.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_index(path, &self.to_bytes()?)
    }

    /// Read an index file written by [`IvfPq::save`] onto `ctx` (every check before anything
    /// is uploaded). The k-means options of the loaded index are the defaults.
    pub fn load(ctx: &Context, path: &Path) -> Result<IvfPq> {
        let mut index = read_index(path, |b| Self::from_bytes(ctx, b))?;
        index.coarse.upload(ctx)?;
        Ok(index)
    }

    fn from_bytes(ctx: &Context, b: &[u8]) -> std::result::Result<IvfPq, String> {
        let b = IndexBytes::open(b, "IVF-PQ", IVFPQ_MAGIC, IVFPQ_VERSION, HEADER)?;
        let (u32_at, u64_at) = (|o| b.u32_at(o), |o| b.u64_at(o));
        let metric = metric_from_code(u32_at(8))?;
        let flags = u32_at(12);
        if flags > 1 {
            return Err(format!("unknown flags {flags:#x} (only bit 0, rows kept)"));
        }
        let keep = flags == 1;
        let (d, nlist, m, ntotal) = (u64_at(16), u64_at(24), u64_at(32), u64_at(40));
        if d == 0 || nlist == 0 || m == 0 || d % m != 0 {
            return Err(format!(
                "header has D = {d}, nlist = {nlist}, M = {m}: all must be ≥ 1 and M must \
                 divide D"
            ));
        }
        if ntotal >= u32::MAX as u64 {
            return Err(format!(
                "header has ntotal = {ntotal}: ids must be below 2³² − 1"
            ));
        }
        let (d128, nl, m128, nt) = (d as u128, nlist as u128, m as u128, ntotal as u128);
        let row = 8 + m128 + if keep { d128 * 4 } else { 0 };
        let want = HEADER as u128 + nl * d128 * 4 + 256 * d128 * 4 + nl * 8 + nt * row + 8;
        let shape = format!("D = {d}, nlist = {nlist}, M = {m}, ntotal = {ntotal}");
        b.check_length_and_checksum(want, &shape)?;
        let (d, nlist, m, ntotal) = (d as usize, nlist as usize, m as usize, ntotal as usize);
        let f32s = |o, n| b.f32s(o, n);
        let mut o = HEADER;
        let centroids = f32s(o, nlist * d)?;
        o += nlist * d * 4;
        let pq = ProductQuantizer::from_centroids(d, m, f32s(o, PQ_KSUB * d)?)
            .map_err(|e| e.to_string())?;
        o += PQ_KSUB * d * 4;
        let sizes = b.list_sizes(o, nlist, ntotal)?;
        o += nlist * 8;
        let opts = IvfPqOptions {
            nlist,
            m,
            metric,
            keep_vectors: keep,
            kmeans: KMeansOptions::default(),
        };
        let mut index = IvfPq::new(ctx, d, &opts).map_err(|e| e.to_string())?;
        let mut loc = vec![(u32::MAX, 0u32); ntotal];
        let mut seen = vec![false; ntotal];
        for (l, &size) in sizes.iter().enumerate() {
            let mut list = PqList {
                ids: b.list_ids(o, l, size, &mut seen)?,
                ..PqList::default()
            };
            for (i, &id) in list.ids.iter().enumerate() {
                loc[id as usize] = (l as u32, i as u32);
            }
            o += size * 8;
            list.codes = b.bytes(o, size * m).to_vec();
            o += size * m;
            if keep {
                // Kept rows are the rows `add` checked at fp32 (unit rows for cosine).
                list.data = b.list_rows(o, l, size, d, Precision::Fp32)?;
                o += size * d * 4;
            }
            index.lists[l] = list;
        }
        index.ntotal = ntotal;
        index.loc = loc;
        index.pq = Some(pq);
        index.coarse.centroids = centroids; // uploaded by `load`
        Ok(index)
    }
}
