//! A scan job: one batch of sequences on the device, its plan, pipelines and buffers put
//! together, and the chunks of steps scheduled — one or two submissions in flight, resumed from
//! a checkpoint, the filter's probes and counters read back. Touches the table it reads, its own
//! buffers and the batch scaffold; the sizes come from `plan.rs`, the recording from
//! `record.rs`.

use super::plan::Plan;
use super::record::Recorder;
use super::state::{Pipelines, State};
use super::{FilterStats, ScanKernel, ScanOptions, Shape};
use crate::batch::{batch_accessors, steps_per_submission, Batch, StepReport};
use crate::device::Context;
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::spirv;
use crate::submit::Submitter;
use crate::table::{Precision, Table};

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
    /// to step 0 on the device, scanned by the kernel `opts.kernel` names (the results are the
    /// same bits for every kernel; see [`ScanKernel`]). Nothing is computed until
    /// [`ScanJob::step`].
    pub fn new(table: &DeviceTable, starts: &[u32], opts: &ScanOptions) -> Result<ScanJob> {
        let mut plan = Plan::new(table, starts, opts, opts.kernel)?;
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

    /// The filter's subgroup-clock profile so far: ticks per phase summed over every block it
    /// filtered (`shaders/filter_block.glsl`, "THE CLOCK PROFILE"), where the shaders were
    /// built with `FILTER_CLOCK` (`DIVERSITY_SHADER_DEFINES`) and the context was created with
    /// `DIVERSITY_SHADER_CLOCK` set (the device's `VK_KHR_shader_clock`); `None` for a build
    /// without it, a kernel without a filter, or a batch under 10 sequences (no room for the
    /// counters). Read it before [`ScanJob::profile_phases`], whose re-runs add to it (the
    /// probes do not). A diagnostic for kernel work.
    #[doc(hidden)]
    pub fn filter_clock(&self) -> Result<Option<super::FilterClock>> {
        let shaders = match self.kernel {
            ScanKernel::Coopmat => [&spirv::SCAN_FILTER_TC, &spirv::SCAN_FILTER_TC_TILE],
            ScanKernel::Filter => [&spirv::SCAN_FILTER, &spirv::SCAN_FILTER_TILE],
            _ => return Ok(None),
        };
        let Some(c) = self.clock_counters(&shaders)? else {
            return Ok(None);
        };
        Ok(Some(super::FilterClock {
            setup: c[0],
            staging: c[1],
            products: c[2],
            epilogue: c[3] + c[6..].iter().sum::<u64>(),
            epilogue_parts: [c[6], c[7], c[8], c[9]],
            fallback: c[4],
            blocks: c[5],
        }))
    }

    /// The judge's subgroup-clock profile so far: ticks per phase summed over every sequence-step
    /// it judged (`shaders/scan_judge.comp`, `JUDGE_CLOCK`), where the shaders were built with
    /// `JUDGE_CLOCK` and the context was created with `DIVERSITY_SHADER_CLOCK` set; `None`
    /// otherwise, as for [`ScanJob::filter_clock`]. A diagnostic for kernel work.
    #[doc(hidden)]
    pub fn judge_clock(&self) -> Result<Option<super::JudgeClock>> {
        let shader = match self.kernel {
            ScanKernel::Coopmat => &spirv::SCAN_JUDGE_TC,
            ScanKernel::Filter => &spirv::SCAN_JUDGE,
            _ => return Ok(None),
        };
        let Some(c) = self.clock_counters(&[shader])? else {
            return Ok(None);
        };
        Ok(Some(super::JudgeClock {
            phases: [c[0], c[1], c[2], c[3], c[4]],
            judged: c[5],
        }))
    }

    /// The clock profiles' ten counters (`State::clock_counters`) where every one of `shaders`
    /// was built with the subgroup clock and the batch has room for them (10 sequences).
    fn clock_counters(&self, shaders: &[&spirv::Shader]) -> Result<Option<[u64; 10]>> {
        let p = self.table.precision();
        let built = shaders
            .iter()
            .all(|s| spirv::has_capability(s.spirv(p), spirv::CAPABILITY_SHADER_CLOCK));
        if !built || self.batch.starts().len() < 10 {
            return Ok(None);
        }
        self.state.clock_counters(self.table.context())
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
        let chunk = steps_per_submission(self.opts.chunk, n);
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
    /// an uninterrupted run (whichever kernel computed the prefixes and whichever, `opts.kernel`,
    /// continues them). `table` is the host table `dtable` was uploaded from.
    pub fn resume(
        dtable: &DeviceTable,
        table: &Table,
        starts: &[u32],
        prefixes: &[u32],
        len: usize,
        opts: &ScanOptions,
    ) -> Result<ScanJob> {
        let (n, d) = (dtable.n(), dtable.d());
        if table.n() != n || table.d() != d {
            return Err(Error::Invalid(format!(
                "resume: the host table is {} × {}, the device table {n} × {d}",
                table.n(),
                table.d()
            )));
        }
        let mut job = ScanJob::new(dtable, starts, opts)?;
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
