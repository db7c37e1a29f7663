//! The scan engine: each step, every sequence of a batch scans every unchosen
//! candidate and takes the one farthest from its running centroid. Three shapes, selectable at
//! run time, all computing each candidate's key with the same shader code so that results are
//! bit-identical across shapes, tile sizes, chunking, batching and pipelining:
//!
//! * [`Shape::Untiled`] — one strided pass over all candidates per step;
//! * [`Shape::Tiled`] — the same dispatch walks candidates tile by tile (`tile_size` is the 5th
//!   push constant) so that concurrent workgroups share L2;
//! * [`Shape::PerTile`] — one dispatch per (step, tile) with a compute→compute barrier between
//!   them (a hard grid sync without a host round trip), then a commit dispatch.
//!
//! Any shape may keep two command buffers in flight ([`ScanOptions::pipelined`]): the host
//! records chunk k+1 while the device runs chunk k.
//!
//! Two kernels compute the candidate scan ([`ScanKernel`]): 64 candidates × 16/32/64 sequences
//! per workgroup (the default) and 128 × 128 with compile-time sizes. They give the same bits.

mod plan;
mod push;
mod record;
mod state;

pub use push::{CommitPush, InitPush, ScanPush, TilePush};

use crate::batch::{batch_accessors, sequence_length, Batch, StepReport};
use crate::device::{Capabilities, Context};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::submit::Submitter;
use crate::table::{Precision, Table};
use plan::{buffer_bytes, Plan};
use record::Recorder;
use state::{Pipelines, State};

/// Sequences per workgroup block of the scan (the shaders' BM): 16, 32 or 64, the smallest that
/// holds the batch, so a small batch does not pay for 64.
fn block_m(batch: usize) -> usize {
    batch.next_power_of_two().clamp(16, 64)
}
/// Candidates per workgroup block of the default scan kernel ([`ScanKernel::Block64`], the
/// shaders' BN); tiles are rounded up to it. [`ScanKernel::block_n`] gives each kernel's.
pub const BLOCK_N: usize = 64;
/// Invocations of a scan workgroup (16 × 16, each 4 × 4 or 8 × 8 pairs).
const GEMM_WORKGROUP: u32 = 256;
/// Shared memory of a Block64 workgroup: two BK × 64 stages and the 64 × 16 reduction.
const GEMM_SHARED_BYTES: usize = 2 * 16 * 64 * 4 + 2 * 64 * 16 * 4;
/// Shared memory of a Block128 workgroup: two buffers of two 8 × 128 stages, the 128 × 16
/// reduction.
const GEMM_BIG_SHARED_BYTES: usize = 2 * 2 * 8 * 128 * 4 + 2 * 128 * 16 * 4;

/// Environment variable read by [`ScanKernel::Auto`]: a kernel's name (`block64`, `block128`,
/// `coopmat`, `filter`) picks that kernel for every job that does not name one (the Lua binding
/// and the drivers included); unset or anything else keeps the default rule
/// ([`ScanKernel::for_batch`]).
pub const ENV_SCAN_KERNEL: &str = "DIVERSITY_SCAN_KERNEL";

/// Which shader computes the candidate scan. All compute the pick from the same fused
/// multiply-add chain per key, so the sequences are bit-identical whichever runs; only speed
/// differs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanKernel {
    /// [`ENV_SCAN_KERNEL`] if set to a kernel's name, else [`ScanKernel::Coopmat`] on a device
    /// with cooperative matrices ([`Capabilities::coopmat`]), else [`ScanKernel::Block128`] for
    /// batches of at least 128 sequences and [`ScanKernel::Block64`] below (measured: Block128
    /// was 1.34× faster on an H200 at 3,584 sequences and 1.72× on lavapipe at 256;
    /// BENCHMARKS.md).
    #[default]
    Auto,
    /// 16, 32 or 64 sequences (the smallest that holds the batch) × 64 candidates per workgroup,
    /// 4 × 4 pairs per invocation, dims staged 16 at a time (`scan.comp`, `scan_tile.comp`).
    Block64,
    /// 128 sequences × 128 candidates per workgroup, 8 × 8 pairs per invocation with
    /// compile-time sizes, `vec4` shared-memory reads, double-buffered stages of 8 dims
    /// (`scan.comp`, `scan_tile.comp`, `scan_commit.comp` compiled with `BIG`: `scan_big*`,
    /// `scan_gemm_big.glsl`). Meant for batches of hundreds of sequences on a GPU; a small batch
    /// still pays for 128 sequences.
    Block128,
    /// Filter and judge on tensor cores: every step, cooperative matrices score all pairs in
    /// fp16 (64 sequences × 128 candidates a workgroup), a rigorous bound γ on the distance to
    /// the fp32 key keeps the few candidates that could win, and the judge re-scores exactly
    /// those with the fp32 chain of the other kernels (`filter_common.glsl` has the derivation).
    /// Needs [`Capabilities::coopmat`].
    Coopmat,
    /// [`ScanKernel::Coopmat`]'s filter and judge with the cooperative-matrix products replaced
    /// by plain fp32 arithmetic on the same fp16 operands (16 sequences × 32 candidates a
    /// workgroup): the same bound, bands, fallback and judge on any device with fp16 storage, so
    /// that everything but the tensor-core instructions runs in CI. Slower than Block64.
    Filter,
}

impl ScanKernel {
    /// `auto`, `block64`, `block128`, `coopmat` or `filter`.
    pub fn name(self) -> &'static str {
        match self {
            ScanKernel::Auto => "auto",
            ScanKernel::Block64 => "block64",
            ScanKernel::Block128 => "block128",
            ScanKernel::Coopmat => "coopmat",
            ScanKernel::Filter => "filter",
        }
    }

    /// The kernel named by [`ENV_SCAN_KERNEL`], if any.
    fn from_env() -> Option<ScanKernel> {
        std::env::var(ENV_SCAN_KERNEL)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|k| *k != ScanKernel::Auto)
    }

    /// The kernel [`ScanKernel::Auto`] names through [`ENV_SCAN_KERNEL`] alone (Block64 when
    /// unset); a named kernel is returned as it is. Jobs resolve with [`ScanKernel::for_batch`].
    pub fn resolve(self) -> ScanKernel {
        match self {
            ScanKernel::Auto => ScanKernel::from_env().unwrap_or(ScanKernel::Block64),
            k => k,
        }
    }

    /// The kernel a job of `batch` sequences runs on a device with `caps`: a named kernel as it
    /// is; [`ScanKernel::Auto`] through [`ENV_SCAN_KERNEL`] when set, else Coopmat where the
    /// device has cooperative matrices, else Block128 for `batch` ≥ 128, Block64 below.
    pub fn for_batch(self, caps: &Capabilities, batch: usize) -> ScanKernel {
        match (self, ScanKernel::from_env()) {
            (ScanKernel::Auto, Some(k)) => k,
            (ScanKernel::Auto, None) if caps.coopmat => ScanKernel::Coopmat,
            (ScanKernel::Auto, None) if batch >= 128 => ScanKernel::Block128,
            (ScanKernel::Auto, None) => ScanKernel::Block64,
            (k, _) => k,
        }
    }

    /// Whether the kernel is a filter and judge ([`ScanKernel::Coopmat`], [`ScanKernel::Filter`]).
    pub fn is_filter(self) -> bool {
        matches!(self.resolve(), ScanKernel::Coopmat | ScanKernel::Filter)
    }

    /// Candidates per workgroup block (tiles are rounded up to whole blocks): 32 (the filter
    /// stand-in), 64 or 128.
    pub fn block_n(self) -> usize {
        match self.resolve() {
            ScanKernel::Block128 | ScanKernel::Coopmat => 128,
            ScanKernel::Filter => 32,
            _ => BLOCK_N,
        }
    }

    /// Sequences per workgroup block for a batch of `batch`.
    pub fn block_m(self, batch: usize) -> usize {
        match self.resolve() {
            ScanKernel::Block128 => 128,
            ScanKernel::Coopmat => 64,
            ScanKernel::Filter => 16,
            _ => block_m(batch),
        }
    }

    /// Invocations of one candidate-scan workgroup.
    fn scan_workgroup(self) -> u32 {
        match self.resolve() {
            ScanKernel::Coopmat => 128,
            ScanKernel::Filter => 64,
            _ => GEMM_WORKGROUP,
        }
    }

    fn shared_bytes(self) -> usize {
        let (bm, bn, w) = (
            self.block_m(64),
            self.block_n(),
            self.scan_workgroup() as usize,
        );
        match self.resolve() {
            ScanKernel::Block128 => GEMM_BIG_SHARED_BYTES,
            // scores, overflow rows and count, row scales, bounds and mask words, candidate
            // finv, the argmin arrays and picks (+ the staged operands of the tensor-core filter).
            ScanKernel::Coopmat | ScanKernel::Filter => {
                4 * (bm * bn + bm + 4 + 2 * bm + bm * bn / 32 + bn + 2 * w + 8)
                    + if self.resolve() == ScanKernel::Coopmat {
                        (bm + bn) * 48
                    } else {
                        0
                    }
            }
            _ => GEMM_SHARED_BYTES,
        }
    }
}

impl std::str::FromStr for ScanKernel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(ScanKernel::Auto),
            "block64" | "64" => Ok(ScanKernel::Block64),
            "block128" | "128" => Ok(ScanKernel::Block128),
            "coopmat" | "tensor" => Ok(ScanKernel::Coopmat),
            "filter" => Ok(ScanKernel::Filter),
            _ => Err(Error::Invalid(format!(
                "scan kernel '{s}': expected auto, block64, block128, coopmat or filter"
            ))),
        }
    }
}

/// How a scan step walks the candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One strided pass over all candidates (`tile_size` is ignored, sent as 0).
    Untiled,
    /// In-shader tile loop over `tile_size` candidates at a time.
    Tiled,
    /// One dispatch per tile, barriers between, then a commit dispatch.
    PerTile,
}

impl Shape {
    /// `untiled`, `tiled` or `per-tile`.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Untiled => "untiled",
            Shape::Tiled => "tiled",
            Shape::PerTile => "per-tile",
        }
    }
}

impl std::str::FromStr for Shape {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "untiled" => Ok(Shape::Untiled),
            "tiled" | "in-shader" => Ok(Shape::Tiled),
            "per-tile" | "dispatch-per-tile" => Ok(Shape::PerTile),
            _ => Err(Error::Invalid(format!(
                "shape '{s}': expected untiled, tiled or per-tile"
            ))),
        }
    }
}

/// How a [`ScanJob`] runs. The defaults are an untiled scan of every step, 64 steps a submission.
#[derive(Clone, Debug)]
pub struct ScanOptions {
    /// Candidate walk; see [`Shape`].
    pub shape: Shape,
    /// Candidates per tile for [`Shape::Tiled`] and [`Shape::PerTile`]; 0 means one tile of N.
    pub tile_size: u32,
    /// Keep two command buffers in flight.
    pub pipelined: bool,
    /// Steps per submission (the watchdog knob); 0 = everything a `step` call asks for at once.
    pub chunk: usize,
    /// Compute only the first K steps of each sequence (top_k); `None` = all N − 1. Values above
    /// N − 1 are clamped to N − 1.
    pub steps: Option<usize>,
    /// Workgroup size of the per-sequence dispatches (init, commit; a power of two); `None`
    /// picks one for the device (64 on CPU devices, 256 on GPUs). The candidate scan itself
    /// always runs 256-invocation blocks.
    pub workgroup_size: Option<u32>,
    /// Knobs of the filter-and-judge kernels ([`ScanKernel::Coopmat`], [`ScanKernel::Filter`]);
    /// the other kernels ignore them.
    pub filter: FilterTuning,
}

/// Knobs of the filter-and-judge scan. The results do not depend on `capacity`; they do on
/// `gamma_scale`, which exists so tests can show that the bound matters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterTuning {
    /// Band entries kept per (sequence, block of candidates) (≥ 1, default 8); a block with
    /// more candidates in its band re-scores all of them exactly (slower, same result).
    pub capacity: u32,
    /// Multiplies the bound γ (default 1). Values above 1 only widen the band (slower, same
    /// result); values below 1 void the guarantee: for tests that must see it fail.
    pub gamma_scale: f32,
}

impl Default for FilterTuning {
    fn default() -> Self {
        FilterTuning {
            capacity: 8,
            gamma_scale: 1.0,
        }
    }
}

/// What the judge of a filter-and-judge scan did, summed over a job's sequences and steps
/// ([`ScanJob::filter_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterStats {
    /// Sequence-steps judged.
    pub steps: u64,
    /// Candidates re-scored with the exact fp32 chain (the band), all steps; blocks that fell
    /// back count once each (their exact winner).
    pub rescored: u64,
    /// The most candidates re-scored in one step of one sequence.
    pub rescored_max: u32,
    /// Blocks whose band did not fit and which were re-scored whole in the filter.
    pub overflows: u64,
}

impl FilterStats {
    /// Mean candidates re-scored per sequence-step.
    pub fn mean_rescored(&self) -> f64 {
        self.rescored as f64 / self.steps.max(1) as f64
    }
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            shape: Shape::Untiled,
            tile_size: 0,
            pipelined: false,
            chunk: 64,
            steps: None,
            workgroup_size: None,
            filter: FilterTuning::default(),
        }
    }
}

/// The largest batch (sequences per [`ScanJob`]) that `caps` allows for an N × D table (stored
/// at `precision`) and `steps` steps: every per-batch buffer within `maxStorageBufferRange`, the
/// per-sequence and scan dispatches within `maxComputeWorkGroupCount[0]`, and all buffers within
/// the memory budget. At least 1 (a job that cannot run at all reports why when created). The
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
            plan::filter_buffer_bytes(n, d, k.block_n(), 1, 1, FilterTuning::default().capacity);
        best = best.min((caps.max_buffer_range / bands.1.max(1)) as usize);
        per_seq += c16.1 + fseq.1 + bands.1;
        table += ftab.1 + fconst.1;
    }
    if let Some(room) = caps.memory_budget_bytes.checked_sub(table) {
        best = best.min((room / per_seq.max(1)) as usize);
    }
    best.max(1)
}

/// One of the two submissions a job keeps in flight: a timed submitter and the steps it carries.
struct Frame {
    sub: Submitter,
    /// Steps of the submission in flight (meaningful while `sub` has one pending).
    steps: usize,
}

/// A batch of diversity sequences advanced chunk by chunk on the device.
pub struct ScanJob {
    // Declared first, so dropped first: dropping a submitter waits for its work in flight, which
    // reads and writes the buffers below.
    frames: [Frame; 2],
    next_frame: usize,
    table: DeviceTable,
    opts: ScanOptions,
    /// Starts, sequences, steps done, GPU time, lost state.
    batch: Batch,
    /// Steps submitted so far (slots 1..=submitted are recorded; ≥ steps done).
    submitted: usize,
    wg: u32,
    kernel: ScanKernel,
    rec: Recorder,
    state: State,
}

impl ScanJob {
    /// Prepare a batch: one sequence per entry of `starts` (0-based, distinct, < N), initialised
    /// to step 0 on the device. Nothing is computed until [`ScanJob::step`]. The scan kernel is
    /// [`ScanKernel::Auto`].
    pub fn new(table: &DeviceTable, starts: &[u32], opts: &ScanOptions) -> Result<ScanJob> {
        ScanJob::with_kernel(table, starts, opts, ScanKernel::Auto)
    }

    /// [`ScanJob::new`] with a chosen scan kernel (the results are the same bits for every
    /// kernel; see [`ScanKernel`]).
    pub fn with_kernel(
        table: &DeviceTable,
        starts: &[u32],
        opts: &ScanOptions,
        kernel: ScanKernel,
    ) -> Result<ScanJob> {
        let mut plan = Plan::new(table, starts, opts, kernel)?;
        let pipes = Pipelines::new(table, &mut plan)?;
        let ctx = table.context();
        let batch = Batch::new(ctx, starts, plan.seq_len)?;
        let (state, set) = State::new(table, &batch, &plan)?;
        let frame = || -> Result<Frame> {
            Ok(Frame {
                sub: Submitter::new(ctx)?,
                steps: 0,
            })
        };
        let job = ScanJob {
            frames: [frame()?, frame()?],
            next_frame: 0,
            table: table.clone(),
            opts: opts.clone(),
            batch,
            submitted: 0,
            wg: plan.wg,
            kernel: plan.kernel,
            rec: Recorder::new(table, &plan, pipes, set, opts),
            state,
        };
        job.rec.init(ctx, &job.state)?;
        Ok(job)
    }

    /// Change the candidate walk for the following steps. Results do not depend on it (every
    /// walk computes each key with the same operations in the same order); the `vk_compute`
    /// shim passes a tile size with every chunk.
    pub fn set_tiling(&mut self, shape: Shape, tile_size: u32) {
        self.opts.shape = shape;
        self.opts.tile_size = tile_size;
        self.rec.set_tiling(shape, tile_size);
    }

    /// Change the steps per submission for the following `step` calls (0 = all at once); the
    /// driver re-sizes chunks as steps get cheaper.
    pub fn set_chunk(&mut self, chunk: usize) {
        self.opts.chunk = chunk;
    }

    // total_steps, steps_done, done, starts, gpu_ns, sequence_len, sequences_flat,
    // sequence_columns, sequences: the batch's, delegated (batch.rs).
    batch_accessors!();

    /// The workgroup size in use.
    pub fn workgroup_size(&self) -> u32 {
        self.wg
    }
    /// The options the job runs with.
    pub fn options(&self) -> &ScanOptions {
        &self.opts
    }
    /// The scan kernel in use (never [`ScanKernel::Auto`]).
    pub fn kernel(&self) -> ScanKernel {
        self.kernel
    }

    /// What the judge of a filter-and-judge kernel ([`ScanKernel::Coopmat`],
    /// [`ScanKernel::Filter`]) did so far, summed over the batch (since the job began or
    /// resumed); `None` for the other kernels.
    pub fn filter_stats(&self) -> Result<Option<FilterStats>> {
        self.state.filter_stats(self.table.context())
    }

    /// A check of a filter-and-judge kernel's products: filter block (0, 0) of the current
    /// step scores its pairs as the filter does and, beside each, with plain fp32 arithmetic on
    /// the same fp16 operands; returns the (filter, reference) pairs, sequences × candidates of
    /// one block, row-major (empty for the other kernels). It overwrites band records the next
    /// step rewrites; call it between steps. Needs a batch of at least 16 sequences (the band
    /// buffer holds the pairs).
    #[doc(hidden)]
    pub fn filter_probe(&mut self) -> Result<Vec<(f32, f32)>> {
        if !self.kernel.is_filter() {
            return Ok(Vec::new());
        }
        let pairs = self.kernel.block_m(0) * self.kernel.block_n();
        if !self.state.probe_fits(pairs) {
            return Err(Error::Invalid(format!(
                "filter probe: the band buffer of this job is smaller than {pairs} pairs; use more sequences"
            )));
        }
        let ctx = self.run_probe(0)?;
        self.state.probe_pairs(&ctx, pairs)
    }

    /// Dispatch the filter probe in `mode` (0: products, 1: block (0, 0) as a step); its context.
    fn run_probe(&self, mode: u32) -> Result<Context> {
        let ctx = self.table.context().clone();
        self.rec
            .probe(&ctx, &self.table, &self.rec.scan_spec, self.kernel, mode)?;
        Ok(ctx)
    }

    /// Run filter block (0, 0) of the current step as the filter does and return the band
    /// records of candidate block 0 for the block's sequences (`filter_common.glsl`'s layout:
    /// best F bits, count, then (F bits, index) pairs). For checking a device; call between
    /// steps.
    #[doc(hidden)]
    pub fn filter_probe_bands(&mut self) -> Result<Vec<u32>> {
        if !self.kernel.is_filter() {
            return Ok(Vec::new());
        }
        let ctx = self.run_probe(1)?;
        let rows = self.kernel.block_m(0).min(self.batch.starts().len());
        self.state.block0_records(
            &ctx,
            rows,
            self.table.n(),
            self.kernel.block_n(),
            self.opts.filter.capacity,
        )
    }

    /// Where a step's time goes: GPU nanoseconds per dispatch of the candidate scan (or filter)
    /// and of the commit (or judge), each timed over `reps` back-to-back dispatches at the last
    /// step. It re-runs the last step's phases on the current state and so corrupts the job
    /// (later picks would be wrong): call it last, after reading the sequences. For benchmarks.
    #[doc(hidden)]
    pub fn profile_phases(&mut self, reps: u32) -> Result<(f64, f64)> {
        let slot = self.total_steps().max(1) as u32;
        let dev = self.table.context().device().clone();
        let rec = &self.rec;
        let mut out = [0f64; 2];
        for (phase, o) in out.iter_mut().enumerate() {
            let sub = &mut self.frames[0].sub;
            let ns = sub.run("profiling the scan's phases", |cb| unsafe {
                rec.record_phase(&dev, cb, phase as u32, slot, reps)
            })?;
            *o = ns as f64 / reps.max(1) as f64;
        }
        Ok((out[0], out[1]))
    }

    /// Advance every sequence by up to `n` steps (fewer at the end), in submissions of
    /// [`ScanOptions::chunk`] steps, two in flight when pipelined. Returns when they are done.
    pub fn step(&mut self, n: usize) -> Result<StepReport> {
        let n = n.min(self.total_steps() - self.submitted);
        let chunk = if self.opts.chunk == 0 {
            n.max(1)
        } else {
            self.opts.chunk
        };
        let mut report = StepReport::default();
        let mut left = n;
        let result = (|| {
            while left > 0 {
                let c = chunk.min(left);
                let f = self.next_frame;
                if self.frames[f].sub.pending() {
                    report.add(self.finish(f)?);
                }
                self.submit(f, c)?;
                report.submissions += 1;
                left -= c;
                if self.opts.pipelined {
                    self.next_frame = 1 - f;
                } else {
                    report.add(self.finish(f)?);
                }
            }
            Ok(())
        })();
        // Drain whatever is still in flight, oldest first, even after an error.
        let mut drain = Ok(());
        for k in 0..2 {
            let f = (self.next_frame + k) % 2;
            if self.frames[f].sub.pending() {
                match self.finish(f) {
                    Ok(chunk) => report.add(chunk),
                    Err(e) => drain = drain.and(Err(e)),
                }
            }
        }
        result?;
        drain?;
        report.steps = n;
        Ok(report)
    }

    /// Run every remaining step.
    pub fn run(&mut self) -> Result<StepReport> {
        self.step(self.total_steps() - self.submitted)
    }

    /// Record the next `steps` steps on frame `f` (idle) and submit them without waiting.
    fn submit(&mut self, f: usize, steps: usize) -> Result<()> {
        self.batch.check_live()?;
        let first = self.submitted + 1;
        let dev = self.table.context().device();
        let (rec, opts) = (&self.rec, &self.opts);
        self.frames[f]
            .sub
            .submit(|cb| unsafe { rec.record(dev, cb, opts, first, steps) })?;
        self.frames[f].steps = steps;
        self.submitted += steps;
        Ok(())
    }

    /// Wait for frame `f` if it has a submission in flight, account its steps and GPU time:
    /// (steps, ns), (0, 0) when idle.
    fn finish(&mut self, f: usize) -> Result<(usize, u64)> {
        if !self.frames[f].sub.pending() {
            return Ok((0, 0));
        }
        let steps = self.frames[f].steps;
        let done = self.batch.steps_done();
        let what = format!(
            "scan steps {}..{} of a batch of {}",
            done + 1,
            done + steps,
            self.batch.starts().len()
        );
        let waited = self.frames[f].sub.wait(&what);
        let ns = self.batch.settle(&what, waited)?;
        self.batch.complete(steps, ns);
        Ok((steps, ns))
    }

    /// A job that continues from sequences already computed (a checkpoint): `prefixes` holds
    /// `starts.len()` rows of `len` entries, row i beginning with `starts[i]`. The running sums
    /// are rebuilt on the host with the very float32 operations the shaders use (the compensated
    /// pair added row by row in sequence order), so the continued sequences are bit-identical to
    /// an uninterrupted run. `table` is the host table `dtable` was uploaded from.
    pub fn resume(
        dtable: &DeviceTable,
        table: &Table,
        starts: &[u32],
        prefixes: &[u32],
        len: usize,
        opts: &ScanOptions,
    ) -> Result<ScanJob> {
        ScanJob::resume_with_kernel(dtable, table, starts, prefixes, len, opts, ScanKernel::Auto)
    }

    /// [`ScanJob::resume`] with a chosen scan kernel (the continued sequences are the same bits
    /// whichever kernel computed the prefixes and whichever continues them).
    pub fn resume_with_kernel(
        dtable: &DeviceTable,
        table: &Table,
        starts: &[u32],
        prefixes: &[u32],
        len: usize,
        opts: &ScanOptions,
        kernel: ScanKernel,
    ) -> Result<ScanJob> {
        let (n, d) = (dtable.n(), dtable.d());
        if table.n() != n || table.d() != d {
            return Err(Error::Invalid(format!(
                "resume: the host table is {} × {}, the device table {n} × {d}",
                table.n(),
                table.d()
            )));
        }
        let mut job = ScanJob::with_kernel(dtable, starts, opts, kernel)?;
        // Checks the prefixes (each a prefix of its start's sequence, in range, no repeats).
        job.batch.resume(n, prefixes, len)?;
        job.state.resume(dtable, table, prefixes, len)?;
        job.rec.prepare(dtable.context())?;
        job.submitted = len - 1;
        Ok(job)
    }
}

/// Compute the sequences of `starts` in one go: upload, run every step, download.
pub fn run_scan(
    ctx: &Context,
    table: &Table,
    precision: Precision,
    starts: &[u32],
    opts: &ScanOptions,
) -> Result<(Vec<Vec<u32>>, u64)> {
    let dt = DeviceTable::upload(ctx, table, precision)?;
    let mut job = ScanJob::new(&dt, starts, opts)?;
    job.run()?;
    Ok((job.sequences()?, job.gpu_ns()))
}
