//! The IVF-PQ list scan on the device (`shaders/ivfpq_scan.comp`): every list's codes in one
//! buffer (and, for L2, every list's [`precomputed_table`]), and one dispatch in which a
//! workgroup a query builds the query's M × 256 table of `q_s · C_s[c]` in shared memory once,
//! then sums, for each row of each list it probes, the M terms of its code (inner product: the
//! table's entries; L2: the list's precomputed entry minus twice the table's, after the coarse
//! distance — Faiss's precomputed table, no table a list), keeping its k best with
//! `shaders/block_select.glsl`. May touch the device context,
//! device memory, the compiled shaders, command submission and the scan helpers of `scan.rs`.
//!
//! # Exactness
//! The keys are fp32 sums of fp32 terms (see the shader for the order of the operations);
//! the block select is exact under the `(key, id)` order, so the result is the k best of the
//! probed rows under the device's own ADC keys, ties to the lower id. The tests hold the keys to
//! a float64 evaluation of the same tables within a derived bound.
//!
//! # Limits
//! The table and the query's residual live in shared memory: 4 · (256 · M + D) bytes beside the
//! block select's 2,560; a device with less shared memory refuses the search with the numbers.
//! k is at most [`super::MAX_SCAN_K`]. On lavapipe (loops capped at 65,535 iterations an
//! invocation) [`dispatches`] counts an invocation's iterations from above and cuts the scan
//! into dispatches over probe ranks and row ranges, each starting from the last one's k best.

use crate::device::{Buffer, Capabilities, Context};
use crate::error::{Error, Result};
use crate::spirv;
use crate::table::Precision;

use super::pq::{precomputed_table, ProductQuantizer, PQ_KSUB};
use super::scan::{
    merge_iterations, queue, record_list_scan, scan_from_host, select_passes, slab_bindings, split,
    LoopCost, Pass, ScanOut, ScanRun, StepPush,
};

/// `pre_at` of a slab without precomputed tables (`NO_TABLES` in the shader).
const NO_TABLES: usize = u32::MAX as usize;

/// The most bytes of precomputed L2 tables a slab holds (Faiss's `precomputed_table_max_bytes`,
/// 2 GiB), or `DIVERSITY_PQ_TABLE_MAX_BYTES`; past it the scan builds each probed list's table.
fn precomputed_max_bytes() -> u64 {
    // Parsed strictly (bytes or K/M/G) by `settings::check` when the context opened.
    crate::settings::bytes("DIVERSITY_PQ_TABLE_MAX_BYTES", true)
        .ok()
        .flatten()
        .unwrap_or(1 << 31)
}

/// Invocations a workgroup (one query).
const SCAN_WG: usize = 128;
/// Shared memory of block_select.glsl (256 reduction pairs, 64 best pairs).
const BS_SHARED: usize = 256 * 8 + 64 * 8;

/// `ivfpq_scan.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PqScanPush {
    step: StepPush,
    ip: u32,
    pq_at: u32,
    probe_off: u32,
    key_off: u32,
    ids_off: u32,
    pre_at: u32,
}

/// The lists' codes on the device, with the coarse and PQ centroids.
pub(crate) struct PqSlab {
    ctx: Context,
    d: usize,
    m: usize,
    nlist: usize,
    codes: Buffer,
    cent: Buffer,
    lists: Buffer,
    row_id: Buffer,
    /// Rows of the longest list.
    max_len: usize,
    /// The first float of the precomputed L2 tables in the centroids' buffer.
    pre_at: usize,
    /// Unique to this slab (what a descriptor set naming its buffers keys on).
    pub serial: u64,
}

/// Shared memory bytes of the scan for D and M.
pub(crate) fn shared_bytes(d: usize, m: usize) -> usize {
    4 * (PQ_KSUB * m + d) + BS_SHARED
}

impl PqSlab {
    /// The slab of `lists` (each: ids ascending, codes M bytes a row), the coarse centroids
    /// (nlist × D), the PQ centroids (M × 256 × D / M) and, for L2 (`l2`), every list's
    /// [`precomputed_table`] (nlist × M × 256).
    pub fn build(
        ctx: &Context,
        lists: &[(&[i64], &[u8])],
        coarse: &[f32],
        pq: &ProductQuantizer,
        l2: bool,
    ) -> Result<PqSlab> {
        let (d, m) = (pq.d(), pq.m());
        let rows: usize = lists.iter().map(|l| l.0.len()).sum();
        let bytes = rows as u64 * m as u64;
        let caps = ctx.caps();
        if bytes + 4 > caps.max_buffer_range || rows >= u32::MAX as usize {
            return Err(Error::Limit(format!(
                "the IVF-PQ lists' {rows} codes of {m} bytes need a {bytes}-byte buffer; {} \
                 allows {} bytes (maxStorageBufferRange)",
                caps.name, caps.max_buffer_range
            )));
        }
        let mut offsets = Vec::with_capacity(2 * lists.len());
        let mut codes = Vec::with_capacity(rows * m + 4);
        let mut row_id = Vec::with_capacity(rows.max(1));
        let mut max_len = 0;
        for (ids, c) in lists {
            offsets.push(row_id.len() as u32);
            offsets.push(ids.len() as u32);
            codes.extend_from_slice(c);
            row_id.extend(ids.iter().map(|&i| i as u32));
            max_len = max_len.max(ids.len());
        }
        // Whole words, never an empty buffer.
        codes.resize((codes.len() / 4 + 1) * 4, 0);
        if row_id.is_empty() {
            row_id.push(u32::MAX);
        }
        let nlist = coarse.len() / d;
        let mut cent = coarse.to_vec();
        cent.extend_from_slice(pq.centroids());
        // Precomputed tables where they fit the budget and the buffer range; else the scan
        // builds each probed list's table itself, as Faiss does past its own budget.
        let table_bytes = (nlist * m * PQ_KSUB) as u64 * 4;
        let tables = l2
            && table_bytes <= precomputed_max_bytes()
            && cent.len() as u64 * 4 + table_bytes <= caps.max_buffer_range
            && cent.len() + nlist * m * PQ_KSUB < u32::MAX as usize;
        let pre_at = if tables { cent.len() } else { NO_TABLES };
        if tables {
            use rayon::prelude::*;
            cent.resize(pre_at + nlist * m * PQ_KSUB, 0.0);
            cent[pre_at..]
                .par_chunks_mut(m * PQ_KSUB)
                .zip(coarse.par_chunks(d))
                .for_each(|(t, c)| t.copy_from_slice(&precomputed_table(pq, c)));
        }
        let cent_bytes = cent.len() as u64 * 4;
        if cent_bytes > caps.max_buffer_range || cent.len() >= u32::MAX as usize {
            return Err(Error::Limit(format!(
                "the IVF-PQ centroids and precomputed tables need a {cent_bytes}-byte buffer; \
                 {} allows {} bytes (maxStorageBufferRange)",
                caps.name, caps.max_buffer_range
            )));
        }
        Ok(PqSlab {
            ctx: ctx.clone(),
            d,
            m,
            nlist,
            pre_at,
            codes: ctx.upload("IVF-PQ codes", &codes)?,
            cent: ctx.upload("IVF-PQ centroids", bytemuck::cast_slice(&cent))?,
            lists: ctx.upload("IVF-PQ list offsets", bytemuck::cast_slice(&offsets))?,
            row_id: ctx.upload("IVF-PQ row ids", bytemuck::cast_slice(&row_id))?,
            max_len,
            serial: super::scan::next_serial(),
        })
    }

    /// Records and runs the scan of `nq` queries on `sub` with `set` (the slab's
    /// [`PqSlab::bindings`], the query rows at 2 — n × D, unit rows for cosine —, the probed
    /// lists at 5 from word `probe_off` and their coarse keys at 7 from word `key_off`, `nprobe`
    /// a query, and the results at 6): the k best `(key, id)` pairs of each query among the
    /// codes of its probed lists, best first, keys from word 0 and ids from word nq · k, padded
    /// with (+∞, `u32::MAX`). `before` and `after` as in [`super::scan::record_list_scan`];
    /// returns the GPU nanoseconds before the mark and after it, and the scan's dispatches.
    pub fn record_scan(
        &self,
        run: ScanRun<impl Pass, impl Pass>,
        k: usize,
        (probe_off, key_off): (usize, usize),
        ip: bool,
    ) -> Result<(u64, u64, usize)> {
        let (nq, nprobe) = (run.nq, run.nprobe);
        let ctx = &self.ctx;
        let (d, m) = (self.d, self.m);
        let caps = ctx.caps();
        let shared = shared_bytes(d, m);
        if shared > caps.shared_memory_bytes as usize {
            return Err(Error::Limit(format!(
                "the IVF-PQ scan keeps a 256 × M = {m} lookup table and the D = {d} query in \
                 shared memory: {shared} bytes; {} offers {} (use a smaller M)",
                caps.name, caps.shared_memory_bytes
            )));
        }
        let bs_k = queue(k);
        let per_list = !ip && self.pre_at == NO_TABLES;
        let steps = dispatches(caps, d, m, k, bs_k, nprobe, self.max_len, per_list)?;
        let pipe = ctx.pipeline_for::<PqScanPush>(
            &spirv::IVFPQ_SCAN,
            Precision::Fp32,
            &[
                SCAN_WG as u32,
                bs_k as u32,
                m as u32,
                d as u32,
                caps.subgroup_arithmetic as u32,
            ],
        )?;
        let label = "IVF-PQ list scan";
        let (before_ns, ns, count) =
            record_list_scan(run, label, &pipe, &steps, |q0, step, seed| PqScanPush {
                step: StepPush::new(q0, nprobe, step, k, seed),
                ip: ip as u32,
                pq_at: (self.nlist * d) as u32,
                probe_off: probe_off as u32,
                key_off: key_off as u32,
                ids_off: (nq * k) as u32,
                pre_at: self.pre_at as u32,
            })?;
        Ok((before_ns, ns, count))
    }

    /// Whether the slab holds the lists' precomputed L2 tables.
    pub fn has_tables(&self) -> bool {
        self.pre_at != NO_TABLES
    }

    /// The slab's buffers as the scan binds them (0: codes, 1: centroids, 3: lists, 4: row
    /// ids; the caller adds 2: queries, 5: probes, 6: results, 7: the probes' keys).
    pub fn bindings(&self) -> [(u32, &Buffer); 4] {
        slab_bindings([&self.codes, &self.cent, &self.lists, &self.row_id])
    }

    /// [`PqSlab::record_scan`] with the probes from the host — each (list, the coarse key as
    /// the shaders keep it: minus q · c(list) for inner product) — for the queries in
    /// `queries` (n × D): its own buffers, set and submitter, then a download
    /// ([`super::scan::scan_from_host`]).
    pub fn scan(
        &self,
        queries: &[f32],
        probes: &[(u32, f32)],
        nprobe: usize,
        k: usize,
        ip: bool,
    ) -> Result<ScanOut> {
        let nq = queries.len() / self.d;
        if nq == 0 {
            return Ok(ScanOut::default());
        }
        // The lists, then their keys.
        let pr: Vec<u32> = probes
            .iter()
            .map(|p| p.0)
            .chain(probes.iter().map(|p| p.1.to_bits()))
            .collect();
        let qbuf = self
            .ctx
            .upload("IVF-PQ queries", bytemuck::cast_slice(queries))?;
        let scan = |run: ScanRun<'_, _, _>| self.record_scan(run, k, (0, probes.len()), ip);
        let slab = (&self.ctx, self.bindings());
        let labels = ["IVF-PQ probes", "IVF-PQ results"];
        scan_from_host(slab, labels, &qbuf, (&pr, true), (nq, nprobe, k), scan)
    }
}

/// The dispatches of one scan, `(p0, p1, r0, r1)`: probe ranks [p0, p1) and rows [r0, r1) of
/// each probed list. One dispatch where loops are not capped; where they are, as many as keep
/// every invocation's loop iterations — counted from above: the query's copy and table (256 · M
/// / WG entries of D / M + 1 iterations) once a dispatch, then in each of the block select's
/// passes (as many as it may need) the seed and per probe its codes' sums and queue insertions
/// — `per_list` (L2 without precomputed tables): and a residual's table —, and the merges —
/// within the budget.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatches(
    caps: &Capabilities,
    d: usize,
    m: usize,
    k: usize,
    bs_k: usize,
    nprobe: usize,
    max_len: usize,
    per_list: bool,
) -> Result<Vec<(usize, usize, usize, usize)>> {
    let table = d.div_ceil(SCAN_WG) + (PQ_KSUB * m).div_ceil(SCAN_WG) * (d / m + 1);
    let passes = select_passes(k, bs_k);
    let cost = LoopCost {
        // The query's table, once a dispatch (or a list's, each probe of each pass), and the
        // merge; the rows once a pass of the block select.
        fixed: merge_iterations(SCAN_WG, k, bs_k) + if per_list { 0 } else { table },
        per_probe: passes * (1 + if per_list { table } else { 0 }),
        per_row: passes * (m + bs_k + 1),
    };
    split(
        caps,
        "the IVF-PQ list scan",
        SCAN_WG,
        nprobe,
        max_len,
        &cost,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ivf::scan::tests::{assert_one_rank_each, assert_ranks_covered};

    #[test]
    fn pq_dispatches_fit_the_loop_cap() {
        let free = crate::device::test_caps(32, None);
        assert_eq!(
            dispatches(&free, 128, 16, 10, 8, 7, 5000, false)
                .unwrap()
                .len(),
            1
        );
        let capped = crate::device::test_caps(8, Some(65_535));
        // Short lists, k = 10 (queues of 8: two passes of the block select counted): 427
        // iterations once (the merge, the query's table), 104 a probe, 468 probes a dispatch,
        // every rank covered once.
        let s = dispatches(&capped, 64, 8, 10, 8, 2000, 300, false).unwrap();
        assert_eq!(s.len(), 5);
        assert_ranks_covered(&s, 2000);
        // The table no longer costs a probe: 32 probes of short lists at D = 1024 in one.
        assert_eq!(
            dispatches(&capped, 1024, 8, 10, 8, 32, 100, false)
                .unwrap()
                .len(),
            1
        );
        // tests/ivfpq.rs's loop-cap search: D = 16, M = 8, k = 40 (queues of 8, five passes
        // counted), 8 probes of lists of at most 20,000 rows: 997 once, 13,350 a probe, 3
        // probes a dispatch.
        assert_eq!(
            dispatches(&capped, 16, 8, 40, 8, 8, 20_000, false)
                .unwrap()
                .len(),
            3
        );
        // k ≤ the queue: one pass, as with the queue of 64 for k = 40 (3,253 once, 11,462 a
        // probe, 4 probes a dispatch).
        assert_eq!(
            dispatches(&capped, 16, 8, 40, 64, 8, 20_000, false)
                .unwrap()
                .len(),
            2
        );
        // Long lists: one rank at a time, rows in ranges covering the longest list.
        let s = dispatches(&capped, 384, 32, 10, 8, 2, 300_000, false).unwrap();
        assert_one_rank_each(&s, 300_000);
        // Without precomputed tables each probe builds its list's table (in every pass): the
        // 32 probes of short lists at D = 1024 no longer fit one dispatch, and every rank is
        // still covered.
        let s = dispatches(&capped, 1024, 8, 10, 8, 32, 100, true).unwrap();
        assert!(s.len() > 1, "{s:?}");
        assert_ranks_covered(&s, 32);
    }
}
