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

use super::coarse::Coarse;
use super::file::{load, put_header, put_lists_and_checksum, save, Format, IndexBytes, IndexFile};
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
    /// Write the index to `path` (temporary file, fsync, rename). Errors: an untrained index
    /// (no file is created), the output location.
    pub fn save(&self, path: &Path) -> Result<()> {
        save(path, self.to_bytes())
    }

    /// Read an index file written by [`IvfPq::save`] onto `ctx` (every check before anything
    /// is uploaded). The k-means options of the loaded index are the defaults.
    pub fn load(ctx: &Context, path: &Path) -> Result<IvfPq> {
        load(ctx, path)
    }

    /// The index file's bytes (see the format above). Errors: an untrained index.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let Some(pq) = &self.pq else {
            return Err(Error::Invalid(
                "the IVF-PQ index is not trained: nothing to save".into(),
            ));
        };
        let counts = [self.d, self.nlist, self.m, self.ntotal];
        let mut b = put_header::<IvfPq>(self.metric, self.keep_vectors as u32, &counts);
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
}

impl IndexFile for IvfPq {
    const FORMAT: Format = Format::new("IVF-PQ", IVFPQ_MAGIC, IVFPQ_VERSION, 4);

    fn parse(ctx: &Context, mut b: IndexBytes) -> std::result::Result<IvfPq, String> {
        let (metric, flags, counts) = b.header()?;
        if flags > 1 {
            return Err(format!("unknown flags {flags:#x} (only bit 0, rows kept)"));
        }
        let keep = flags == 1;
        let (d, nlist, m, ntotal) = (counts[0], counts[1], counts[2], counts[3]);
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
        let centroids = b.f32s(nlist * d)?;
        let pq = ProductQuantizer::from_centroids(d, m, b.f32s(PQ_KSUB * d)?)
            .map_err(|e| e.to_string())?;
        let sizes = b.list_sizes(nlist, ntotal)?;
        let opts = IvfPqOptions {
            nlist,
            m,
            metric,
            keep_vectors: keep,
            kmeans: KMeansOptions::default(),
        };
        let mut index = IvfPq::new(ctx, d, &opts).map_err(|e| e.to_string())?;
        let mut loc = vec![(u32::MAX, 0u32); ntotal];
        index.lists = b.lists(&sizes, ntotal, |b, l, ids| {
            for (i, &id) in ids.iter().enumerate() {
                loc[id as usize] = (l as u32, i as u32);
            }
            let size = ids.len();
            let codes = b.bytes(size * m).to_vec();
            // Kept rows are the rows `add` checked at fp32 (unit rows for cosine).
            let data = match keep {
                true => b.list_rows(l, size, d, Precision::Fp32)?,
                false => Vec::new(),
            };
            Ok(PqList { ids, codes, data })
        })?;
        index.core.ntotal = ntotal;
        index.loc = loc;
        index.pq = Some(pq);
        index.core.coarse.centroids = centroids; // uploaded by `load`
        Ok(index)
    }

    fn coarse_mut(&mut self) -> &mut Coarse {
        &mut self.core.coarse
    }
}
