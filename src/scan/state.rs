//! What a scan job holds on its device: the pipelines its plan runs (from the context's cache)
//! and its own per-batch buffers (running sums, masks, the rounded centroids, the block winners,
//! the filter's buffers), with the few reads and writes of them a job needs (resume, probes,
//! the filter's counters). Touches the job's own buffers and the table it reads.

use super::plan::{band_words, padded_dim, Plan};
use super::push::{CommitPush, FTablePush, InitPush, ScanPush, TilePush};
use super::ScanKernel;
use crate::batch::Batch;
use crate::device::{Context, Pipeline, FILTER_BINDING};
use crate::device_table::DeviceTable;
use crate::error::Result;
use crate::memory::Buffer;
use crate::spirv;
use crate::submit::Set;
use crate::table::Table;
use std::sync::Arc;

/// The scan's pipelines for one plan: step 0, the candidate scan (one dispatch or per tile) and
/// the commit that reduces the block winners of a step. For the filter-and-judge kernels the
/// scan is the filter, the commit is the judge, and two more prepare the filter's operands.
pub(super) struct Pipelines {
    pub(super) init: Arc<Pipeline>,
    pub(super) scan: Arc<Pipeline>,
    pub(super) tile: Arc<Pipeline>,
    pub(super) commit: Arc<Pipeline>,
    /// The filter table (`scan_ftable`) and the per-sequence preparation (`scan_prep`).
    pub(super) filter: Option<(Arc<Pipeline>, Arc<Pipeline>)>,
}

impl Pipelines {
    /// Create (or take from the context's cache) the pipelines `plan` runs on `table`.
    pub(super) fn new(table: &DeviceTable, plan: &mut Plan) -> Result<Pipelines> {
        let ctx = table.context();
        let mut spec = vec![
            plan.wg,
            table.d() as u32,
            table.n().div_ceil(32) as u32,
            plan.seq_len as u32,
            plan.batch as u32,
            plan.bm as u32,
        ];
        if plan.kernel.is_filter() {
            spec.extend([
                padded_dim(table.d()) as u32,
                plan.capacity,
                plan.gamma_scale.to_bits(),
                plan.judge_staged_rows,
            ]);
        }
        let mut gemm_spec = spec.clone();
        gemm_spec[0] = plan.kernel.scan_workgroup();
        plan.scan_spec = gemm_spec.clone();
        let p = table.precision();
        // The commit reduces ceil(N / BN) block winners, so it comes with the kernel.
        let (scan_sh, tile_sh, commit_sh) = match plan.kernel {
            ScanKernel::Block128 => (
                &spirv::SCAN_BIG,
                &spirv::SCAN_BIG_TILE,
                &spirv::SCAN_BIG_COMMIT,
            ),
            ScanKernel::Coopmat => (
                &spirv::SCAN_FILTER_TC,
                &spirv::SCAN_FILTER_TC_TILE,
                &spirv::SCAN_JUDGE_TC,
            ),
            ScanKernel::Filter => (
                &spirv::SCAN_FILTER,
                &spirv::SCAN_FILTER_TILE,
                &spirv::SCAN_JUDGE,
            ),
            _ => (&spirv::SCAN, &spirv::SCAN_TILE, &spirv::SCAN_COMMIT),
        };
        let filter = match plan.kernel {
            ScanKernel::Coopmat => Some((&spirv::SCAN_FTABLE_TC, &spirv::SCAN_PREP_TC)),
            ScanKernel::Filter => Some((&spirv::SCAN_FTABLE, &spirv::SCAN_PREP)),
            _ => None,
        };
        let filter = match filter {
            Some((ft, prep)) => Some((
                ctx.pipeline_for::<FTablePush>(ft, p, &spec)?,
                ctx.pipeline_for::<InitPush>(prep, p, &spec)?,
            )),
            None => None,
        };
        Ok(Pipelines {
            scan: ctx.pipeline_for::<ScanPush>(scan_sh, p, &gemm_spec)?,
            tile: ctx.pipeline_for::<TilePush>(tile_sh, p, &gemm_spec)?,
            commit: ctx.pipeline_for::<CommitPush>(commit_sh, p, &spec)?,
            init: ctx.pipeline_for::<InitPush>(&spirv::SCAN_INIT, p, &spec[..6])?,
            filter,
        })
    }
}

/// The filter-and-judge kernels' buffers (bindings 9 to 13; `filter_common.glsl`).
pub(super) struct FilterState {
    ftab: Buffer,
    pub(super) fconst: Buffer,
    pub(super) c16: Buffer,
    fseq: Buffer,
    fseq_bytes: u64,
    _bands: Buffer,
    bands_bytes: u64,
}

/// The scan's own per-batch state on the device (the batch's starts and sequences are in its
/// [`Batch`]), kept alive for the descriptor set.
pub(super) struct State {
    /// Running sums, a compensated (hi, lo) pair of D floats per sequence.
    pub(super) sums: Buffer,
    /// Chosen items, one bit per candidate per sequence.
    pub(super) mask: Buffer,
    /// Each sequence's running sum rounded to fp32 (what the scan multiplies with).
    pub(super) cen32: Buffer,
    /// The winner of each candidate block, per sequence.
    pub(super) _partial: Buffer,
    /// The filter's buffers, for the filter-and-judge kernels.
    pub(super) filter: Option<FilterState>,
}

impl State {
    /// Allocate the state of `plan` and the descriptor set binding it with the table and the
    /// batch's buffers.
    pub(super) fn new(table: &DeviceTable, batch: &Batch, plan: &Plan) -> Result<(State, Set)> {
        let ctx = table.context();
        let [_, sums, mask, cen32, partial] = plan.sizes;
        let state = State {
            sums: Buffer::storage(ctx, sums.0, sums.1)?,
            mask: Buffer::storage(ctx, mask.0, mask.1)?,
            cen32: Buffer::storage(ctx, cen32.0, cen32.1)?,
            _partial: Buffer::storage(ctx, partial.0, partial.1)?,
            filter: match plan.filter_sizes {
                Some([ftab, fconst, c16, fseq, bands]) => Some(FilterState {
                    ftab: Buffer::storage(ctx, ftab.0, ftab.1)?,
                    fconst: Buffer::storage(ctx, fconst.0, fconst.1)?,
                    c16: Buffer::storage(ctx, c16.0, c16.1)?,
                    fseq: Buffer::storage(ctx, fseq.0, fseq.1)?,
                    fseq_bytes: fseq.1,
                    _bands: Buffer::storage(ctx, bands.0, bands.1)?,
                    bands_bytes: bands.1,
                }),
                None => None,
            },
        };
        let mut singles = vec![
            (0, table.data_buffer()),
            (1, table.inv_norm_buffer()),
            (2, batch.starts_buffer()),
            (3, &state.sums),
            (4, &state.mask),
            (5, batch.seqs_buffer()),
            (6, &state._partial),
            (7, &state.cen32),
        ];
        if let Some(f) = &state.filter {
            singles.extend([
                (FILTER_BINDING, &f.ftab),
                (FILTER_BINDING + 1, &f.fconst),
                (FILTER_BINDING + 2, &f.c16),
                (FILTER_BINDING + 3, &f.fseq),
                (FILTER_BINDING + 4, &f._bands),
            ]);
        }
        let set = Set::new(ctx, &singles, &[])?;
        Ok((state, set))
    }

    /// The probe's (score, fp32 reference) pairs: `pairs` of them from the band buffer.
    pub(super) fn probe_pairs(&self, ctx: &Context, pairs: usize) -> Result<Vec<(f32, f32)>> {
        let Some(f) = &self.filter else {
            return Ok(Vec::new());
        };
        let bytes = ctx.download(&f._bands, 0, (pairs as u64 * 8).min(f.bands_bytes))?;
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        Ok(v.chunks_exact(2).map(|p| (p[0], p[1])).collect())
    }

    /// The band records of block 0 for the first `rows` sequences (N candidates in blocks of
    /// `bn`, `capacity` entries a record): `rows` × (2 + 2·capacity) words.
    pub(super) fn block0_records(
        &self,
        ctx: &Context,
        rows: usize,
        n: usize,
        bn: usize,
        capacity: u32,
    ) -> Result<Vec<u32>> {
        let Some(f) = &self.filter else {
            return Ok(Vec::new());
        };
        let bw = band_words(capacity);
        let nb = n.div_ceil(bn) as u64;
        let regions: Vec<(u64, u64)> = (0..rows as u64)
            .map(|s| (s * nb * bw * 4, bw * 4))
            .collect();
        let bytes = ctx.download_regions(&f._bands, &regions)?;
        Ok(bytemuck::cast_slice(&bytes).to_vec())
    }

    /// Whether the band buffer holds `pairs` probe pairs.
    pub(super) fn probe_fits(&self, pairs: usize) -> bool {
        self.filter
            .as_ref()
            .is_some_and(|f| f.bands_bytes >= pairs as u64 * 8)
    }

    /// Every sequence's filter-state entry (`FSeqEntry` in `filter_common.glsl`: 8 words),
    /// downloaded; `None` for a kernel without a filter.
    fn fseq_entries(&self, ctx: &Context) -> Result<Option<Vec<[u32; 8]>>> {
        let Some(f) = &self.filter else {
            return Ok(None);
        };
        let bytes = ctx.download(&f.fseq, 0, f.fseq_bytes)?;
        Ok(Some(
            bytes
                .chunks_exact(32)
                .map(|e| {
                    std::array::from_fn(|i| {
                        u32::from_le_bytes([e[4 * i], e[4 * i + 1], e[4 * i + 2], e[4 * i + 3]])
                    })
                })
                .collect(),
        ))
    }

    /// The clock profiles' counters (`filter_common.glsl`, `clock_flush`: the filter's with
    /// FILTER_CLOCK, the judge's with JUDGE_CLOCK): counter k < 10 of each block row (filter)
    /// or group of 16 sequences (judge) in the unused words 6 and 7 (low, high) of the state
    /// entry of sequence `row0 + k` (or `k`), summed over the batch; `row0` is a multiple of 16
    /// and every other entry's words are 0 (scan_prep zeroes them in those builds), so entry s
    /// holds counter s % 16 where that is below 10.
    pub(super) fn clock_counters(&self, ctx: &Context) -> Result<Option<[u64; 10]>> {
        let Some(entries) = self.fseq_entries(ctx)? else {
            return Ok(None);
        };
        let mut out = [0u64; 10];
        for (s, e) in entries.iter().enumerate() {
            if let Some(c) = out.get_mut(s % 16) {
                *c += e[6] as u64 | (e[7] as u64) << 32;
            }
        }
        Ok(Some(out))
    }

    /// The judge's counters summed over the batch (filter-and-judge kernels only).
    pub(super) fn filter_stats(&self, ctx: &Context) -> Result<Option<super::FilterStats>> {
        let Some(entries) = self.fseq_entries(ctx)? else {
            return Ok(None);
        };
        let mut st = super::FilterStats::default();
        for e in &entries {
            st.rescored += e[2] as u64;
            st.rescored_max = st.rescored_max.max(e[3]);
            st.overflows += e[4] as u64;
            st.steps += e[5] as u64;
        }
        Ok(Some(st))
    }

    /// Load the state that `prefixes` (`len` entries per sequence, checked by
    /// [`Batch::resume`]) leave: the running sums are rebuilt on the host with the very float32
    /// operations the shaders use (the compensated pair added row by row in sequence order), so
    /// the continued sequences are bit-identical to an uninterrupted run. `table` is the host
    /// table `dtable` was uploaded from.
    pub(super) fn resume(
        &self,
        dtable: &DeviceTable,
        table: &Table,
        prefixes: &[u32],
        len: usize,
    ) -> Result<()> {
        let (n, d) = (dtable.n(), dtable.d());
        let rows = prefixes.len() / len;
        let stored = table.as_stored(dtable.precision());
        let words = n.div_ceil(32);
        let mut sums = vec![0f32; rows * 2 * d];
        let mut cen = vec![0f32; rows * d];
        let mut mask = vec![0u32; rows * words];
        for (i, row) in prefixes.chunks_exact(len).enumerate() {
            let (hi, lo) = sums[i * 2 * d..(i + 1) * 2 * d].split_at_mut(d);
            let m = &mut mask[i * words..(i + 1) * words];
            for (k, &p) in row.iter().enumerate() {
                let p = p as usize;
                m[p >> 5] |= 1 << (p & 31);
                let e = stored.row(p);
                if k == 0 {
                    hi.copy_from_slice(e);
                    continue;
                }
                // The shaders' centroid_add, operation for operation.
                for ((h, l), &x) in hi.iter_mut().zip(lo.iter_mut()).zip(e) {
                    let sum = *h + x;
                    let bp = sum - *h;
                    let err = (*h - (sum - bp)) + (x - bp);
                    *l += err;
                    *h = sum;
                }
            }
            for ((c, h), l) in cen[i * d..(i + 1) * d].iter_mut().zip(&*hi).zip(&*lo) {
                *c = *h + *l;
            }
        }
        let ctx = dtable.context();
        ctx.write_regions(&self.sums, &[(0, bytemuck::cast_slice(&sums))])?;
        ctx.write_regions(&self.cen32, &[(0, bytemuck::cast_slice(&cen))])?;
        ctx.write_regions(&self.mask, &[(0, bytemuck::cast_slice(&mask))])
    }
}
