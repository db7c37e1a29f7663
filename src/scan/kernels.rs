//! What a scan job runs on its device: the plan of a job checked against the device's limits
//! ([`Plan`]), its pipelines, its own buffers, and the recording of a chunk of steps
//! ([`Recorder`]) — the push constants each dispatch carries included. [`ScanJob`](super::ScanJob)
//! puts these together and schedules the chunks.

use super::{ScanKernel, ScanOptions, Shape};
use crate::batch::{check_starts, sequence_length, Batch};
use crate::device::{Context, Pipeline, PipelineKey, FILTER_BINDING};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::spirv::{self, checked_push, spirv_for, Shader};
use crate::submit::{barrier, bind, Set};
use crate::table::Table;
use ash::vk;
use std::sync::Arc;

/// Push constants of `scan.comp` (untiled and in-shader tiles): the user's five fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanPush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// First step of the dispatch (≥ 1; step 0 is the start).
    pub start_slot: u32,
    /// Steps in the dispatch.
    pub slot_count: u32,
    /// Candidates per tile; 0 = untiled.
    pub tile_size: u32,
}

/// Push constants of `scan_tile.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TilePush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// The step being computed.
    pub slot: u32,
    /// First candidate of the tile.
    pub tile_begin: u32,
    /// One past the last candidate of the tile.
    pub tile_end: u32,
}

/// Push constants of `scan_commit.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CommitPush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// The step being committed.
    pub slot: u32,
}

/// Push constants of `scan_init.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct InitPush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
}

/// Push constants of `scan_ftable.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FTablePush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// Rows to write: N rounded up to whole filter blocks.
    pub rows: u32,
}

/// Bytes of each per-batch buffer of a scan job for `batch` sequences of `seq_len` entries over N
/// candidates of D dims in blocks of `bn`, with its name for error messages. The job's descriptor
/// set binds them at 5, 3, 4, 7 and 6.
pub(super) fn buffer_bytes(
    n: usize,
    d: usize,
    seq_len: usize,
    bn: usize,
    batch: usize,
) -> [(&'static str, u64); 5] {
    [
        ("sequence output", (batch * seq_len * 4) as u64),
        ("running sums", (batch * 2 * d * 4) as u64),
        ("chosen masks", (batch * n.div_ceil(32) * 4) as u64),
        ("fp32 centroids", (batch * d * 4) as u64),
        ("block winners", (batch * n.div_ceil(bn) * 8) as u64),
    ]
}

/// Words of one band record (per sequence and candidate block) for a band `capacity`:
/// `filter_common.glsl`'s BAND_WORDS.
fn band_words(capacity: u32) -> u64 {
    2 + 2 * capacity as u64
}

/// D rounded up to 16: the row stride of the filter's fp16 operands.
fn padded_dim(d: usize) -> usize {
    d.div_ceil(16) * 16
}

/// Bytes of the filter-and-judge buffers (binding 9 to 13) for `batch` sequences over N
/// candidates of D dims in blocks of `bn` × `bm` sequences, with their names.
pub(crate) fn filter_buffer_bytes(
    n: usize,
    d: usize,
    bn: usize,
    bm: usize,
    batch: usize,
    capacity: u32,
) -> [(&'static str, u64); 5] {
    let (rows, dp) = ((n.div_ceil(bn) * bn) as u64, padded_dim(d) as u64);
    let spad = (batch.div_ceil(bm) * bm) as u64;
    [
        ("filter table", rows * dp * 2),
        ("filter constants", 16 + rows * 4),
        ("fp16 centroids", spad * dp * 2),
        ("filter state", batch as u64 * 32),
        (
            "band lists",
            batch as u64 * n.div_ceil(bn) as u64 * band_words(capacity) * 4,
        ),
    ]
}

/// What a scan job comes to on its device, checked against the device's limits before anything
/// is allocated: the kernel, the sizes, the dispatch geometry.
pub(super) struct Plan {
    /// The scan kernel (resolved, never [`ScanKernel::Auto`]).
    pub(super) kernel: ScanKernel,
    /// Sequences in the batch.
    batch: usize,
    /// Entries per sequence when done.
    pub(super) seq_len: usize,
    /// Workgroup size of the per-sequence dispatches (init, commit).
    pub(super) wg: u32,
    /// Candidates and sequences per workgroup block of the scan.
    bn: usize,
    bm: usize,
    /// Workgroups of one scan dispatch over all candidate blocks.
    scan_groups: u32,
    /// The per-batch buffers: [`buffer_bytes`].
    sizes: [(&'static str, u64); 5],
    /// The filter's buffers ([`filter_buffer_bytes`]) for the filter-and-judge kernels.
    filter_sizes: Option<[(&'static str, u64); 5]>,
    /// Band capacity and γ scale of the filter-and-judge kernels.
    capacity: u32,
    /// Candidate rows the judge stages in shared memory at a time (0: read in place).
    judge_staged_rows: u32,
    /// The candidate scan's specialization constants (set by [`Pipelines::new`]).
    scan_spec: Vec<u32>,
    gamma_scale: f32,
}

impl Plan {
    /// Check `starts` and `opts` against `table` and its device; the sizes of the job.
    pub(super) fn new(
        table: &DeviceTable,
        starts: &[u32],
        opts: &ScanOptions,
        kernel: ScanKernel,
    ) -> Result<Plan> {
        let caps = table.context().caps();
        let asked = kernel;
        let mut kernel = kernel.for_batch(caps, starts.len());
        // Auto falls back to the fp32 kernels where the filter kernels cannot run this table.
        if asked == ScanKernel::Auto
            && kernel.is_filter()
            && judge_rows(caps, table.d(), 128, opts.filter.capacity).is_err()
        {
            let mut plain = caps.clone();
            plain.coopmat = false;
            kernel = ScanKernel::Auto.for_batch(&plain, starts.len());
        }
        let (n, d) = (table.n(), table.d());
        check_starts(starts, n)?;
        let batch = starts.len();
        if batch > caps.max_workgroup_count as usize {
            return Err(Error::Limit(format!(
                "batch of {batch} sequences exceeds maxComputeWorkGroupCount[0] = {} on {}; use smaller batches",
                caps.max_workgroup_count, caps.name
            )));
        }
        let seq_len = sequence_length(n, opts.steps);
        let wg = match opts.workgroup_size {
            // A size asked for is used or refused, never changed.
            Some(w) => w,
            None if crate::device::is_cpu_device(caps) => 64.min(caps.max_workgroup_invocations),
            // The judge: one sequence a workgroup, mostly reductions and a few serial chains.
            None if kernel.is_filter() => 128.min(caps.max_workgroup_invocations),
            None => 256.min(caps.max_workgroup_invocations),
        };
        if !wg.is_power_of_two() || wg > caps.max_workgroup_invocations {
            return Err(Error::Invalid(format!(
                "workgroup size {wg} must be a power of two (at most {})",
                caps.max_workgroup_invocations
            )));
        }
        // The scan is a blocked product: (N / BN) × (S / BM) workgroups per step.
        let (bn, bm) = (kernel.block_n(), kernel.block_m(batch));
        let scan_groups = n.div_ceil(bn) * batch.div_ceil(bm);
        if scan_groups > caps.max_workgroup_count as usize {
            return Err(Error::Limit(format!(
                "N = {n} candidates × a batch of {batch} need {scan_groups} workgroups per dispatch; {} allows {} (maxComputeWorkGroupCount[0]); use smaller batches",
                caps.name, caps.max_workgroup_count
            )));
        }
        if kernel.is_filter() {
            if !caps.fp16_storage {
                return Err(Error::Limit(format!(
                    "the {} scan needs fp16 storage (storageBuffer16BitAccess); {} has none (or DIVERSITY_DISABLE=fp16)",
                    kernel.name(),
                    caps.name
                )));
            }
            if !caps.subgroup_arithmetic {
                return Err(Error::Limit(format!(
                    "the {} scan needs subgroup arithmetic and ballots; {} has none (or DIVERSITY_DISABLE=subgroups)",
                    kernel.name(),
                    caps.name
                )));
            }
            if kernel == ScanKernel::Coopmat && !caps.coopmat {
                return Err(Error::Limit(format!(
                    "the coopmat scan needs cooperative matrices (VK_NV_cooperative_matrix, 16x16x16 fp16 -> fp32, 32-lane subgroups); {} has none usable (or DIVERSITY_DISABLE=coopmat)",
                    caps.name
                )));
            }
            if opts.filter.capacity == 0 || opts.filter.capacity > 64 {
                return Err(Error::Invalid(format!(
                    "filter band capacity {} must be 1 to 64",
                    opts.filter.capacity
                )));
            }
            if !(opts.filter.gamma_scale >= 0.0 && opts.filter.gamma_scale.is_finite()) {
                return Err(Error::Invalid(format!(
                    "filter gamma scale {} must be finite and ≥ 0",
                    opts.filter.gamma_scale
                )));
            }
        }
        let shared = kernel.shared_bytes();
        if shared > caps.shared_memory_bytes as usize
            || (8 * wg as usize + 8) > caps.shared_memory_bytes as usize
        {
            return Err(Error::Limit(format!(
                "the scan ({}) needs {shared} bytes of shared memory per workgroup; {} has {} (maxComputeSharedMemorySize)",
                kernel.name(), caps.name, caps.shared_memory_bytes
            )));
        }
        let scan_wg = kernel.scan_workgroup();
        if caps.max_workgroup_invocations < scan_wg {
            return Err(Error::Limit(format!(
                "the scan needs workgroups of {scan_wg} invocations; {} allows {} (maxComputeWorkGroupInvocations)",
                caps.name, caps.max_workgroup_invocations
            )));
        }
        let sizes = buffer_bytes(n, d, seq_len, bn, batch);
        let filter_sizes = kernel
            .is_filter()
            .then(|| filter_buffer_bytes(n, d, bn, bm, batch, opts.filter.capacity));
        let mut judge_staged_rows = 0;
        if kernel.is_filter() {
            check_filter_loops(caps, n, d, bn, bm, scan_wg, wg, opts.filter.capacity)?;
            judge_staged_rows = judge_rows(caps, d, wg, opts.filter.capacity)?;
        }
        for (what, bytes) in sizes.iter().chain(filter_sizes.iter().flatten()).copied() {
            if bytes > caps.max_buffer_range {
                return Err(Error::Limit(format!(
                    "{what} for a batch of {batch} × {seq_len} steps needs {bytes} bytes; {} allows {} per buffer (maxStorageBufferRange); use a smaller batch or top_k",
                    caps.name, caps.max_buffer_range
                )));
            }
        }
        let need: u64 = sizes
            .iter()
            .chain(filter_sizes.iter().flatten())
            .map(|s| s.1)
            .sum::<u64>()
            + (n * d * table.precision().bytes()) as u64;
        if need > caps.memory_budget_bytes {
            return Err(Error::Limit(format!(
                "the job needs {need} bytes of device memory; {} has a budget of {}",
                caps.name, caps.memory_budget_bytes
            )));
        }
        Ok(Plan {
            kernel,
            batch,
            seq_len,
            wg,
            bn,
            bm,
            scan_groups: scan_groups as u32,
            sizes,
            filter_sizes,
            capacity: opts.filter.capacity,
            judge_staged_rows,
            scan_spec: Vec::new(),
            gamma_scale: opts.filter.gamma_scale,
        })
    }
}

/// The candidate rows the judge (`scan_judge.comp`, `wg` invocations) stages in shared memory at
/// a time for D dims: up to 4 where they fit beside the centroid, its candidate list and the
/// reductions; 0 (read in place, one chain an invocation) on a device that caps loop iterations,
/// where staging would put every chain of a round on a few invocations. An error when even the
/// centroid does not fit.
fn judge_rows(caps: &crate::device::Capabilities, d: usize, wg: u32, capacity: u32) -> Result<u32> {
    let (d, w) = (d as u64, wg as u64);
    let fixed = 4 * d + 4 * w * capacity as u64 + 8 * w + 64;
    let room = (caps.shared_memory_bytes as u64).saturating_sub(fixed) / (4 * d);
    if room == 0 {
        return Err(Error::Limit(format!(
            "the filter scan's judge needs {} bytes of shared memory for D = {d}; {} has {} (maxComputeSharedMemorySize)",
            fixed + 4 * d,
            caps.name,
            caps.shared_memory_bytes
        )));
    }
    Ok(if caps.loop_limit.is_some() {
        0
    } else {
        room.min(4) as u32
    })
}

/// The filter-and-judge kernels' loops per invocation, from above, against a device that caps
/// them ([`crate::device::check_loop_budget`]): the filter (scores, band, fallback), the judge
/// (rounds of band entries, each re-scored over D) and the preparation of ĉ.
#[allow(clippy::too_many_arguments)]
fn check_filter_loops(
    caps: &crate::device::Capabilities,
    n: usize,
    d: usize,
    bn: usize,
    bm: usize,
    scan_wg: u32,
    wg: u32,
    capacity: u32,
) -> Result<()> {
    let (n, d, bn, bm, sw, w, cap) = (
        n as u64,
        d as u64,
        bn as u64,
        bm as u64,
        scan_wg as u64,
        wg as u64,
        capacity as u64,
    );
    let dp = padded_dim(d as usize) as u64;
    let log = |x: u64| 64 - x.leading_zeros() as u64;
    let reduce = 2 * log(w) + 4;
    let prepare = 3 * dp.div_ceil(w) + 3 * reduce;
    // Scores (the stand-in's dims × sequences), the epilogue, the fallback of every row of the
    // block (its candidates over D, then an argmin).
    // The epilogue: up to every row by one subgroup, three passes over its candidates.
    let lanes = (caps.subgroup_size as u64 / 2).max(1);
    let _ = sw;
    let filter =
        dp * (bm + 1) + 3 * bm * bn.div_ceil(lanes) + bm * (bn.div_ceil(sw) * (d + 1) + reduce);
    crate::device::check_loop_budget(caps, "the scan's filter", filter)?;
    // Rounds of one block header an invocation; each round re-scores up to CAP entries an
    // invocation over D.
    let rounds = n.div_ceil(bn).div_ceil(w);
    let judge = rounds * (1 + 2 * cap + cap * (d + 1)) + rounds + d.div_ceil(w) + reduce + prepare;
    crate::device::check_loop_budget(caps, "the scan's judge", judge)?;
    let rows = n.div_ceil(bn) * bn;
    let groups = rows.min(caps.max_workgroup_count as u64);
    let ftable = rows.div_ceil(groups) * (d.div_ceil(w) + dp.div_ceil(w) + 3 * reduce + 2);
    crate::device::check_loop_budget(caps, "the scan's filter table", ftable)
}

/// The scan's pipelines for one plan: step 0, the candidate scan (one dispatch or per tile) and
/// the commit that reduces the block winners of a step. For the filter-and-judge kernels the
/// scan is the filter, the commit is the judge, and two more prepare the filter's operands.
pub(super) struct Pipelines {
    init: Arc<Pipeline>,
    scan: Arc<Pipeline>,
    tile: Arc<Pipeline>,
    commit: Arc<Pipeline>,
    /// The filter table (`scan_ftable`) and the per-sequence preparation (`scan_prep`).
    filter: Option<(Arc<Pipeline>, Arc<Pipeline>)>,
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
        let make = |shader: &Shader, push: u32, spec: &Vec<u32>| {
            ctx.pipeline(PipelineKey {
                spirv: spirv_for(shader, p),
                spec: spec.clone(),
                push_bytes: push,
            })
        };
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
                make(ft, checked_push::<FTablePush>(ft)?, &spec)?,
                make(prep, checked_push::<InitPush>(prep)?, &spec)?,
            )),
            None => None,
        };
        Ok(Pipelines {
            scan: make(scan_sh, checked_push::<ScanPush>(scan_sh)?, &gemm_spec)?,
            tile: make(tile_sh, checked_push::<TilePush>(tile_sh)?, &gemm_spec)?,
            commit: make(commit_sh, checked_push::<CommitPush>(commit_sh)?, &spec)?,
            init: make(
                &spirv::SCAN_INIT,
                checked_push::<InitPush>(&spirv::SCAN_INIT)?,
                &spec[..6].to_vec(),
            )?,
            filter,
        })
    }
}

/// The filter-and-judge kernels' buffers (bindings 9 to 13; `filter_common.glsl`).
pub(super) struct FilterState {
    ftab: Buffer,
    fconst: Buffer,
    c16: Buffer,
    fseq: Buffer,
    fseq_bytes: u64,
    _bands: Buffer,
    bands_bytes: u64,
}

/// The scan's own per-batch state on the device (the batch's starts and sequences are in its
/// [`Batch`]), kept alive for the descriptor set.
pub(super) struct State {
    /// Running sums, a compensated (hi, lo) pair of D floats per sequence.
    sums: Buffer,
    /// Chosen items, one bit per candidate per sequence.
    mask: Buffer,
    /// Each sequence's running sum rounded to fp32 (what the scan multiplies with).
    cen32: Buffer,
    /// The winner of each candidate block, per sequence.
    _partial: Buffer,
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

    /// The judge's counters summed over the batch (filter-and-judge kernels only).
    pub(super) fn filter_stats(&self, ctx: &Context) -> Result<Option<super::FilterStats>> {
        let Some(f) = &self.filter else {
            return Ok(None);
        };
        let bytes = ctx.download(&f.fseq, 0, f.fseq_bytes)?;
        let words: &[u32] = bytemuck::cast_slice(&bytes);
        let mut st = super::FilterStats::default();
        for e in words.chunks_exact(8) {
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

/// What recording a chunk of steps needs: the pipelines, the descriptor set, the geometry.
pub(super) struct Recorder {
    pipes: Pipelines,
    set: Set,
    n: u32,
    d: u32,
    batch: u32,
    bn: usize,
    bm: usize,
    scan_groups: u32,
    /// Candidate ranges of the tiles for the current shape and tile size.
    tiles: Vec<(u32, u32)>,
    /// maxComputeWorkGroupCount[0].
    max_groups: u32,
    /// The candidate scan's specialization constants (the filter probe's too).
    pub(super) scan_spec: Vec<u32>,
}

impl Recorder {
    /// The recorder of `plan` on `table` with its pipelines and descriptor set, walking the
    /// candidates as `opts` says until [`Recorder::set_tiling`].
    pub(super) fn new(
        table: &DeviceTable,
        plan: &Plan,
        pipes: Pipelines,
        set: Set,
        opts: &ScanOptions,
    ) -> Recorder {
        Recorder {
            pipes,
            set,
            n: table.n() as u32,
            d: table.d() as u32,
            batch: plan.batch as u32,
            bn: plan.bn,
            bm: plan.bm,
            scan_groups: plan.scan_groups,
            tiles: tile_ranges(table.n(), opts.shape, opts.tile_size, plan.bn),
            max_groups: table.context().caps().max_workgroup_count,
            scan_spec: plan.scan_spec.clone(),
        }
    }

    /// Step 0 on the device, in one submission: the starts into column 0, the running sums,
    /// the masks; for the filter-and-judge kernels first the filter's table and then each
    /// sequence's fp16 centroid, scale and bound.
    pub(super) fn init(&self, ctx: &Context, state: &State) -> Result<()> {
        let dev = ctx.device();
        let push = InitPush {
            num_items: self.n,
            dim: self.d,
        };
        let (init, set) = (&self.pipes.init, self.set.set);
        ctx.one_shot(|cb| unsafe {
            if let (Some((ftable, _)), Some(f)) = (&self.pipes.filter, &state.filter) {
                // ρ_max, σ_max start at 0 (raised with atomicMax); padded fp16 centroids at 0.
                dev.cmd_fill_buffer(cb, f.fconst.buffer, 0, 16, 0);
                dev.cmd_fill_buffer(cb, f.c16.buffer, 0, vk::WHOLE_SIZE, 0);
                barrier(dev, cb);
                let rows = (self.n as usize).div_ceil(self.bn) * self.bn;
                let fpush = FTablePush {
                    num_items: self.n,
                    dim: self.d,
                    rows: rows as u32,
                };
                bind(dev, cb, ftable, set, bytemuck::bytes_of(&fpush));
                dev.cmd_dispatch(cb, (rows as u32).min(self.max_groups), 1, 1);
            }
            barrier(dev, cb);
            bind(dev, cb, init, set, bytemuck::bytes_of(&push));
            dev.cmd_dispatch(cb, self.batch, 1, 1);
            if let Some((_, prep)) = &self.pipes.filter {
                barrier(dev, cb);
                bind(dev, cb, prep, set, bytemuck::bytes_of(&push));
                dev.cmd_dispatch(cb, self.batch, 1, 1);
            }
        })
    }

    /// For the filter-and-judge kernels, each sequence's fp16 centroid, scale and bound from
    /// the fp32 centroids as they are now (after a resume wrote them); nothing for the others.
    pub(super) fn prepare(&self, ctx: &Context) -> Result<()> {
        let Some((_, prep)) = &self.pipes.filter else {
            return Ok(());
        };
        let dev = ctx.device();
        let push = InitPush {
            num_items: self.n,
            dim: self.d,
        };
        ctx.one_shot(|cb| unsafe {
            barrier(dev, cb);
            bind(dev, cb, prep, self.set.set, bytemuck::bytes_of(&push));
            dev.cmd_dispatch(cb, self.batch, 1, 1);
        })
    }

    /// Run the filter probe (`scan_filter_probe.comp`) of `kernel` once; `table` is the job's.
    pub(super) fn probe(
        &self,
        ctx: &Context,
        table: &DeviceTable,
        plan_spec: &[u32],
        kernel: ScanKernel,
        mode: u32,
    ) -> Result<()> {
        let sh = match kernel {
            ScanKernel::Coopmat => &spirv::SCAN_FILTER_PROBE_TC,
            _ => &spirv::SCAN_FILTER_PROBE,
        };
        let pipe = ctx.pipeline(PipelineKey {
            spirv: spirv_for(sh, table.precision()),
            spec: plan_spec.to_vec(),
            push_bytes: checked_push::<ScanPush>(sh)?,
        })?;
        let dev = ctx.device();
        let push = ScanPush {
            num_items: self.n,
            dim: self.d,
            start_slot: 0,
            slot_count: mode,
            tile_size: 0,
        };
        ctx.one_shot(|cb| unsafe {
            barrier(dev, cb);
            bind(dev, cb, &pipe, self.set.set, bytemuck::bytes_of(&push));
            dev.cmd_dispatch(cb, 1, 1, 1);
        })
    }

    /// Record `reps` dispatches of one phase of a step at `slot` (0: the candidate scan or
    /// filter, untiled; 1: the commit or judge), barriers between: for timing the phases apart.
    ///
    /// # Safety
    /// `cb` is recording, on the device of this recorder's pipelines.
    pub(super) unsafe fn record_phase(
        &self,
        dev: &ash::Device,
        cb: vk::CommandBuffer,
        phase: u32,
        slot: u32,
        reps: u32,
    ) {
        for _ in 0..reps {
            if phase == 0 {
                let push = ScanPush {
                    num_items: self.n,
                    dim: self.d,
                    start_slot: slot,
                    slot_count: 1,
                    tile_size: 0,
                };
                bind(
                    dev,
                    cb,
                    &self.pipes.scan,
                    self.set.set,
                    bytemuck::bytes_of(&push),
                );
                dev.cmd_dispatch(cb, self.scan_groups, 1, 1);
            } else {
                let push = CommitPush {
                    num_items: self.n,
                    dim: self.d,
                    slot,
                };
                bind(
                    dev,
                    cb,
                    &self.pipes.commit,
                    self.set.set,
                    bytemuck::bytes_of(&push),
                );
                dev.cmd_dispatch(cb, self.batch, 1, 1);
            }
            barrier(dev, cb);
        }
    }

    /// The tiles of `shape` and `tile_size` for the following chunks.
    pub(super) fn set_tiling(&mut self, shape: Shape, tile_size: u32) {
        self.tiles = tile_ranges(self.n as usize, shape, tile_size, self.bn);
    }

    /// Record steps `first..first + steps` on `cb`, walking candidates as `opts` says.
    ///
    /// # Safety
    /// `cb` is recording, on the device of this recorder's pipelines.
    pub(super) unsafe fn record(
        &self,
        dev: &ash::Device,
        cb: vk::CommandBuffer,
        opts: &ScanOptions,
        first: usize,
        steps: usize,
    ) {
        let (n, d, batch, bn) = (self.n, self.d, self.batch, self.bn);
        let row_blocks = (batch as usize).div_ceil(self.bm) as u32;
        let bind = |p: &Pipeline| {
            dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, p.pipeline);
            dev.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                p.layout,
                0,
                &[self.set.set],
                &[],
            );
        };
        let push = |p: &Pipeline, bytes: &[u8]| {
            dev.cmd_push_constants(cb, p.layout, vk::ShaderStageFlags::COMPUTE, 0, bytes);
        };
        // One step per dispatch sequence, a barrier between: the shader's multi-step loop
        // (slot_count > 1) gave wrong picks on Mesa 22.3 lavapipe after a few steps.
        for slot in first..first + steps {
            match opts.shape {
                Shape::Untiled | Shape::Tiled => {
                    let tile = if opts.shape == Shape::Untiled {
                        0
                    } else {
                        opts.tile_size
                    };
                    bind(&self.pipes.scan);
                    push(
                        &self.pipes.scan,
                        bytemuck::bytes_of(&ScanPush {
                            num_items: n,
                            dim: d,
                            start_slot: slot as u32,
                            slot_count: 1,
                            tile_size: tile,
                        }),
                    );
                    dev.cmd_dispatch(cb, self.scan_groups, 1, 1);
                    barrier(dev, cb);
                }
                Shape::PerTile => {
                    bind(&self.pipes.tile);
                    for &(b, e) in &self.tiles {
                        push(
                            &self.pipes.tile,
                            bytemuck::bytes_of(&TilePush {
                                num_items: n,
                                dim: d,
                                slot: slot as u32,
                                tile_begin: b,
                                tile_end: e,
                            }),
                        );
                        let blocks = (e as usize).div_ceil(bn) - b as usize / bn;
                        dev.cmd_dispatch(cb, blocks as u32 * row_blocks, 1, 1);
                        barrier(dev, cb);
                    }
                }
            }
            // The winner of every sequence over all candidate blocks, then the next step.
            bind(&self.pipes.commit);
            push(
                &self.pipes.commit,
                bytemuck::bytes_of(&CommitPush {
                    num_items: n,
                    dim: d,
                    slot: slot as u32,
                }),
            );
            dev.cmd_dispatch(cb, batch, 1, 1);
            barrier(dev, cb);
        }
    }
}

/// Candidate ranges of the tiles over `n` candidates for `shape` and `tile_size` (one range for
/// untiled or `tile_size` 0); tiles are whole candidate blocks of `bn` (the last may be short).
fn tile_ranges(n: usize, shape: Shape, tile_size: u32, bn: usize) -> Vec<(u32, u32)> {
    let n = n as u64;
    let t = match shape {
        Shape::Untiled => 0,
        _ => tile_size as u64,
    };
    let t = if t == 0 {
        n
    } else {
        t.div_ceil(bn as u64) * bn as u64
    };
    let mut v = Vec::new();
    let mut b = 0;
    while b < n {
        let e = (b + t).min(n);
        v.push((b as u32, e as u32));
        b = e;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spirv::push_constant_size;

    /// Every push struct of the scan matches the block its shaders declare, in both precisions
    /// and both kernels.
    #[test]
    fn push_blocks_match_the_rust_structs() {
        let size = std::mem::size_of::<ScanPush>();
        let cases = [
            (spirv::SCAN, size),
            (spirv::SCAN_BIG, size),
            (spirv::SCAN_TILE, std::mem::size_of::<TilePush>()),
            (spirv::SCAN_BIG_TILE, std::mem::size_of::<TilePush>()),
            (spirv::SCAN_COMMIT, std::mem::size_of::<CommitPush>()),
            (spirv::SCAN_BIG_COMMIT, std::mem::size_of::<CommitPush>()),
            (spirv::SCAN_INIT, std::mem::size_of::<InitPush>()),
        ];
        for (shader, size) in cases {
            for spv in [shader.fp32, shader.fp16] {
                assert_eq!(
                    push_constant_size(spv),
                    Some(size as u32),
                    "{}",
                    shader.name
                );
            }
        }
        // The user's block: five u32 fields, tile_size the fifth.
        assert_eq!(size, 20);
    }
}
