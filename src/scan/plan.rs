//! The plan of one scan job, computed before anything is allocated: `starts` and the options
//! checked against the table and its device's limits, the kernel, the dispatch geometry, the
//! sizes of every buffer (the job's own and the filter's), the loop counts a dispatch may run,
//! and the largest batch a device allows ([`max_batch`]). Reads the device's capabilities only;
//! allocates nothing. May touch the device's capabilities, the device table's shape, the batch
//! checks and the crate's errors; allocates nothing.

use super::{FilterTuning, ScanKernel, ScanOptions, BLOCK_N};
use crate::batch::{check_starts, sequence_length};
use crate::device::Capabilities;
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::table::Precision;

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
pub(super) fn band_words(capacity: u32) -> u64 {
    2 + 2 * capacity as u64
}

/// D rounded up to 16: the row stride of the filter's fp16 operands.
pub(super) fn padded_dim(d: usize) -> usize {
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
    pub(super) batch: usize,
    /// Entries per sequence when done.
    pub(super) seq_len: usize,
    /// Workgroup size of the per-sequence dispatches (init, commit).
    pub(super) wg: u32,
    /// Candidates and sequences per workgroup block of the scan.
    pub(super) bn: usize,
    pub(super) bm: usize,
    /// Workgroups of one scan dispatch over all candidate blocks.
    pub(super) scan_groups: u32,
    /// The per-batch buffers: [`buffer_bytes`].
    pub(super) sizes: [(&'static str, u64); 5],
    /// The filter's buffers ([`filter_buffer_bytes`]) for the filter-and-judge kernels.
    pub(super) filter_sizes: Option<[(&'static str, u64); 5]>,
    /// Band capacity and γ scale of the filter-and-judge kernels.
    pub(super) capacity: u32,
    /// Candidate rows the judge stages in shared memory at a time (0: read in place).
    pub(super) judge_staged_rows: u32,
    /// The candidate scan's specialization constants (set by [`Pipelines::new`]).
    pub(super) scan_spec: Vec<u32>,
    pub(super) gamma_scale: f32,
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
            && judge_rows(caps, table.d(), 128, opts.filter.capacity, None).is_err()
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
            let f = &opts.filter;
            // The loop cap is reported first: it is the limit a smaller D does not lift.
            let jr = judge_rows(caps, d, wg, f.capacity, f.judge_rows);
            let staged = *jr.as_ref().unwrap_or(&0);
            check_filter_loops(caps, n, d, bn, bm, scan_wg, wg, f.capacity, staged)?;
            judge_staged_rows = jr?;
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
/// a time for D dims: `asked` if given (refused past `wg`, whose invocations take one staged row
/// each, or past what fits), else up to 2 (`JUDGE_ROWS`; on an H200 the seed benchmark's whole
/// scan ran 4% faster with 2 than with 4, 2.5% with 1, 18% slower with 0: BENCHMARKS.md) where
/// they fit beside the centroid, its candidate list and the reductions, and 0 (read in place,
/// one chain an invocation) on a device that caps loop iterations, where staging puts every
/// chain of a round on a few invocations. An error when even the centroid does not fit.
pub(super) fn judge_rows(
    caps: &crate::device::Capabilities,
    d: usize,
    wg: u32,
    capacity: u32,
    asked: Option<u32>,
) -> Result<u32> {
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
    match asked {
        None if caps.loop_limit.is_some() => Ok(0),
        None => Ok(room.min(super::JUDGE_ROWS) as u32),
        Some(r) if r as u64 > w => Err(Error::Invalid(format!(
            "judge_rows {r}: at most the judge's workgroup size, {wg} (one staged row an invocation)"
        ))),
        Some(r) if r as u64 > room => Err(Error::Limit(format!(
            "judge_rows {r}: the judge's shared memory holds {room} rows of D = {d} on {} ({} bytes, maxComputeSharedMemorySize)",
            caps.name, caps.shared_memory_bytes
        ))),
        Some(r) => Ok(r),
    }
}

/// The filter-and-judge kernels' loops per invocation, from above, against a device that caps
/// them ([`crate::device::check_loop_budget`]): the filter (scores, band, fallback), the judge
/// (rounds of band entries, each re-scored over D, in place or `jr` rows staged at a time) and
/// the preparation of ĉ.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_filter_loops(
    caps: &crate::device::Capabilities,
    n: usize,
    d: usize,
    bn: usize,
    bm: usize,
    scan_wg: u32,
    wg: u32,
    capacity: u32,
    jr: u32,
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
    // invocation over D in place, or, staged, up to W·CAP entries in groups of JR: per group
    // the copy (eight values an invocation at a time) and, on invocation 0, one chain (eight
    // dims an iteration, then the remainder), each counted as if its eight-wide inner loops
    // were not unrolled (9 and 17 back-edges an iteration).
    let rounds = n.div_ceil(bn).div_ceil(w);
    let jr = jr as u64;
    let rescore = if jr == 0 {
        cap * (d + 1)
    } else {
        (w * cap).div_ceil(jr) * (9 * (jr * d).div_ceil(8 * w) + 17 * (d / 8) + d % 8 + 2)
    };
    let judge = rounds * (1 + 2 * cap + rescore) + rounds + d.div_ceil(w) + reduce + prepare;
    crate::device::check_loop_budget(caps, "the scan's judge", judge)?;
    let rows = n.div_ceil(bn) * bn;
    let groups = rows.min(caps.max_workgroup_count as u64);
    let ftable = rows.div_ceil(groups) * (d.div_ceil(w) + dp.div_ceil(w) + 3 * reduce + 2);
    crate::device::check_loop_budget(caps, "the scan's filter table", ftable)
}

/// The largest batch (sequences per [`ScanJob`](super::ScanJob)) that `caps` allows for an
/// N × D table (stored at `precision`) and `steps` steps: every per-batch buffer within
/// `maxStorageBufferRange`, the per-sequence and scan dispatches within
/// `maxComputeWorkGroupCount[0]`, and all buffers within the memory budget. At least 1 (a job that cannot run at all reports why when created). The
/// Rust CLI and the Lua driver size their batches with it. Computed for the 64-candidate blocks,
/// so it holds for both [`ScanKernel`]s (128 × 128 blocks need fewer workgroups and a smaller
/// block-winner buffer).
pub fn max_batch(
    caps: &Capabilities,
    n: usize,
    d: usize,
    precision: Precision,
    steps: usize,
) -> usize {
    let n = n.max(1);
    let per_buffer = buffer_bytes(n, d, sequence_length(n, Some(steps)), BLOCK_N, 1);
    let mut best = caps.max_workgroup_count as usize;
    for (_, bytes) in per_buffer {
        best = best.min((caps.max_buffer_range / bytes.max(1)) as usize);
    }
    // Scan dispatch: ceil(N / BN) × ceil(batch / 64) workgroups.
    let row_blocks = caps.max_workgroup_count as usize / n.div_ceil(BLOCK_N);
    best = best.min(row_blocks.saturating_mul(64));
    let mut table = (n * d * precision.bytes()) as u64;
    let mut per_seq: u64 = per_buffer.iter().map(|b| b.1).sum();
    // Where `auto` runs the tensor-core filter, its per-sequence buffers (the band lists above
    // all) and its fp16 copy of the table count too.
    if caps.coopmat {
        let k = ScanKernel::Coopmat;
        let [ftab, fconst, c16, fseq, bands] =
            filter_buffer_bytes(n, d, k.block_n(), 1, 1, FilterTuning::default().capacity);
        best = best.min((caps.max_buffer_range / bands.1.max(1)) as usize);
        per_seq += c16.1 + fseq.1 + bands.1;
        table += ftab.1 + fconst.1;
    }
    if let Some(room) = caps.memory_budget_bytes.checked_sub(table) {
        best = best.min((room / per_seq.max(1)) as usize);
    }
    best.max(1)
}
