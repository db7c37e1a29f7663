//! A gram job: one batch of sequences with its state on the device (registers or memory, per
//! the plan), advanced chunk by chunk (each submission recorded by `record.rs`), resumed from a
//! checkpoint by replaying its prefix, and the judge's counters read back from its state.
//! Touches G (shared with the other jobs over it), its own state buffer and the batch scaffold.

use super::judge::{fixed_loops, judge_loops, judge_refresh, judge_round, BAND};
use super::matrix::{Gram, GramInner};
use super::plan::{
    arithmetic, batch_bytes, fixed_loads, fixed_point, gram_loop_iterations, loads_in_flight,
    max_batch, plan_fixed, plan_for, state_floats,
};
use super::record::{record_steps, GramPush};
use super::{GramOptions, Placement};
use crate::batch::{
    batch_accessors, check_starts, sequence_length, step_in_slices, Batch, StepReport,
};
use crate::device::{Capabilities, Pipeline};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::spirv;
use crate::submit::{Set, Submitter};
use std::sync::Arc;

/// A batch of diversity sequences advanced chunk by chunk by the gram engine.
pub struct GramJob {
    gram: Arc<GramInner>,
    opts: GramOptions,
    /// Starts, sequences, progress, GPU time, lost state.
    batch: Batch,
    wg: u32,
    placement: Placement,
    subgroups: bool,
    /// Steps one dispatch may run within the device's loop budget.
    max_per_dispatch: usize,
    /// Whether the judge runs ([`GramOptions::judge`] and the device allows it).
    judge: bool,
    /// Fixed-point keys' refresh period: dispatches are cut at steps 1 + k·period (0: none).
    align: usize,
    pipeline: Arc<Pipeline>,
    sub: Submitter,
    set: Set,
    /// (hi, lo) per candidate per sequence; kept alive for the descriptor set.
    _state: Buffer,
}

/// `shaders/gram_fixed.comp`'s mark after its profile (GF_PROFILE builds): "PROF".
const PROFILE_MARK: u32 = 0x5052_4f46;

impl GramJob {
    /// Prepare a batch: one sequence per entry of `starts` (0-based, distinct, < N). Nothing is
    /// computed until [`GramJob::step`].
    pub fn new(gram: &Gram, starts: &[u32], opts: &GramOptions) -> Result<GramJob> {
        let shared = gram.inner.clone();
        let gram = &*shared;
        let table = &gram.table;
        let ctx = table.context().clone();
        let caps = ctx.caps().clone();
        let n = table.n();
        check_starts(starts, n)?;
        let seq_len = sequence_length(n, opts.steps);
        let steps = seq_len - 1;
        let batch = starts.len();
        check_batch_fits(&caps, table, batch, steps)?;
        let subgroups = use_subgroups(&caps, opts)?;
        let d = table.d();
        let scale = gram.scale;
        if scale.is_some() && !fixed_point(&caps, n, d, opts) {
            return Err(Error::Invalid(format!(
                "this Gram matrix holds fixed-point entries (the default on {}), and these gram \
                 options ({}) need float32 entries: build G for them (Lua: dtable:gram(opts) with \
                 the same options; Rust: GramBuild {{ fixed: Some(false), .. }}), or run the job \
                 through the table, which builds the G its options need",
                caps.name,
                float_reason(opts)
            )));
        }
        let arith = match scale {
            // Fixed-point keys: integer sums and their certificate, always on.
            Some(_) => super::Arithmetic {
                compensated: false,
                judge: true,
            },
            None => arithmetic(&caps, n, d, opts),
        };
        // (With a fixed-point G, `fixed_point` above already checked that this plan fits:
        // its shared memory and its loop budget.)
        let (wg, placement, rper) = match scale {
            Some(_) => plan_fixed(&caps, n, opts)?,
            None => plan_for(&caps, n, arith.compensated, arith.judge, opts)?,
        };
        // lavapipe cuts an invocation's loops short after 65,535 iterations in all: a dispatch
        // runs only as many steps as fit the budget (same bits: steps per dispatch never
        // change them), and a step that alone does not fit is refused.
        let (mut fixed, mut per_step) =
            gram_loop_iterations(n, wg, rper, placement, caps.subgroup_size);
        let judge = arith.judge;
        if scale.is_some() {
            let (once, step) = fixed_loops(n, d, wg, placement, rper);
            fixed += once;
            per_step += step;
        } else if judge {
            per_step += judge_loops(n, d, wg, placement, rper, judge_round(&caps, d, wg));
        }
        crate::device::check_loop_budget(
            &caps,
            &format!(
                "a gram step over N = {n} ({} state, {wg} invocations)",
                placement.name()
            ),
            fixed + per_step,
        )?;
        let max_per_dispatch = match crate::device::loop_budget(&caps) {
            u64::MAX => usize::MAX,
            b => ((b - fixed) / per_step).max(1) as usize,
        };
        // Both shaders begin with the same six constants: the shape of the state and the batch.
        let shape = [
            wg,
            rper as u32,
            (placement == Placement::Registers) as u32,
            subgroups as u32,
            seq_len as u32,
            gram.slab_rows as u32,
        ];
        let (shader, rest) = match scale {
            Some(scale) => (
                &spirv::GRAM_FIXED,
                vec![
                    d as u32,
                    fixed_loads(wg, rper, opts) as u32,
                    BAND as u32,
                    scale as u32,
                    opts.judge_diag,
                    gram.max_norm.to_bits(),
                    fixed_refresh(opts).0 as u32,
                    fixed_refresh(opts).1.to_bits(),
                ],
            ),
            None => (
                &spirv::GRAM,
                vec![
                    arith.compensated as u32,
                    d as u32,
                    judge as u32,
                    loads_in_flight(rper, judge, opts) as u32,
                    judge_round(&caps, d, wg).max(1) as u32,
                    opts.judge_band.unwrap_or(BAND).min(BAND) as u32,
                    judge_refresh(opts) as u32,
                    opts.judge_kmax_c.unwrap_or(true) as u32,
                    opts.judge_scale.unwrap_or(1.0).to_bits(),
                    opts.judge_diag,
                ],
            ),
        };
        let spec: Vec<u32> = shape.into_iter().chain(rest).collect();
        let pipeline = ctx.pipeline_for::<GramPush>(shader, table.precision(), &spec)?;
        let rows = Batch::new(&ctx, starts, seq_len)?;
        let state = Buffer::storage(&ctx, "gram state", (batch * state_floats(n, d) * 4) as u64)?;
        let set = Set::new(
            &ctx,
            &[
                (0, table.data_buffer()),
                (1, table.inv_norm_buffer()),
                (2, rows.starts_buffer()),
                (3, &state),
                (5, rows.seqs_buffer()),
            ],
            &gram.slabs,
        )?;
        // Column 0 holds the starts from the beginning, before any step has run.
        rows.write_starts_column()?;
        let sub = Submitter::new(&ctx)?;
        // The descriptor set points at G's slabs: the job shares them, so they outlive it.
        Ok(GramJob {
            gram: shared.clone(),
            opts: opts.clone(),
            batch: rows,
            wg,
            placement,
            subgroups,
            max_per_dispatch,
            judge,
            align: if scale.is_some() {
                fixed_refresh(opts).0
            } else {
                0
            },
            pipeline,
            sub,
            set,
            _state: state,
        })
    }

    // total_steps, steps_done, done, starts, gpu_ns, sequence_len, sequences_flat,
    // sequence_columns, sequences: the batch's, delegated (batch.rs).
    batch_accessors!();

    /// Invocations per workgroup (one workgroup per sequence).
    pub fn workgroup_size(&self) -> u32 {
        self.wg
    }
    /// Where the state lives ([`Placement::Registers`] or [`Placement::Memory`]).
    pub fn placement(&self) -> Placement {
        self.placement
    }
    /// Whether the reduction uses subgroup operations.
    pub fn uses_subgroups(&self) -> bool {
        self.subgroups
    }
    /// Whether the judge runs (see [`GramOptions::judge`]).
    pub fn judge(&self) -> bool {
        self.judge
    }
    /// The options the job runs with.
    pub fn options(&self) -> &GramOptions {
        &self.opts
    }
    /// Steps per submission from now on (0 = a whole `step` call at once).
    pub fn set_chunk(&mut self, chunk: usize) {
        self.opts.chunk = chunk;
    }

    /// Advance every sequence by up to `n` steps (fewer at the end), in submissions of
    /// [`GramOptions::chunk`] steps. Returns when they are done.
    pub fn step(&mut self, n: usize) -> Result<StepReport> {
        let n = n.min(self.total_steps() - self.steps_done());
        step_in_slices(n, self.opts.chunk, |c| {
            let ns = self.dispatch(self.steps_done() + 1, c, false)?;
            self.batch.complete(c, ns);
            Ok(ns)
        })
    }

    /// Run every remaining step.
    pub fn run(&mut self) -> Result<StepReport> {
        self.step(self.total_steps() - self.steps_done())
    }

    /// A job that continues from sequences already computed (a checkpoint): `prefixes` holds
    /// `starts.len()` rows of `len` entries, row i beginning with `starts[i]`. The state is
    /// rebuilt on the device by replaying the prefix through the very shader (same operations,
    /// same order, picks taken from the prefix), so the continued sequences are bit-identical to
    /// an uninterrupted run.
    pub fn resume(
        gram: &Gram,
        starts: &[u32],
        prefixes: &[u32],
        len: usize,
        opts: &GramOptions,
    ) -> Result<GramJob> {
        let n = gram.table().n();
        let mut job = GramJob::new(gram, starts, opts)?;
        job.batch.resume(n, prefixes, len)?;
        let chunk = if opts.chunk == 0 { len } else { opts.chunk };
        let mut done = 0;
        while done < len - 1 {
            let c = chunk.min(len - 1 - done);
            job.dispatch(done + 1, c, true)?;
            done += c;
        }
        Ok(job)
    }

    /// Per sequence, how many times the judge recomputed every key so far (0s without it; with
    /// fixed-point keys: the periodic refreshes, see [`super::FIXED_REFRESH`]).
    pub fn refreshes(&self) -> Result<Vec<u32>> {
        self.judge_slot(3)
    }
    /// Per sequence, how many uncertain steps the judge settled by re-scoring only the band of
    /// keys within twice their bound of the best (0s without it).
    pub fn band_rescores(&self) -> Result<Vec<u32>> {
        self.judge_slot(5)
    }
    /// Per sequence, how many of the settled steps had a band wider than 64 candidates (fixed-point
    /// keys settle any number, in windows of 64; 0s with the float judge).
    pub fn wide_bands(&self) -> Result<Vec<u32>> {
        self.fixed_slot(7)
    }
    /// Per sequence, how many candidates the settled steps re-scored in all (fixed-point keys;
    /// 0s with the float judge). Counted in float32: exact up to 2^24 a sequence.
    pub fn band_candidates(&self) -> Result<Vec<u32>> {
        self.fixed_slot(4)
    }
    /// Per sequence, the subgroup-clock ticks invocation 0 spent in each phase of the steps so
    /// far — the update, the pick, the settling, the step's end — where the shaders were built
    /// with `GF_PROFILE` (`DIVERSITY_SHADER_DEFINES`) and run with `DIVERSITY_SHADER_CLOCK`
    /// (fixed-point keys, N ≥ 16); `None` otherwise (the shader's mark is absent). A diagnostic
    /// for kernel work.
    #[doc(hidden)]
    pub fn profile_ticks(&self) -> Result<Option<Vec<[f64; 4]>>> {
        let n = self.gram.table.n();
        if self.gram.scale.is_none() || n < 16 {
            return Ok(None);
        }
        let bytes = self.per_sequence(n, 9)?;
        let word = |c: &[u8], i: usize| {
            u32::from_le_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]])
        };
        let mut out = Vec::with_capacity(self.batch.starts().len());
        for c in bytes.chunks_exact(36) {
            if word(c, 8) != PROFILE_MARK {
                return Ok(None);
            }
            let mut p = [0.0; 4];
            for (k, v) in p.iter_mut().enumerate() {
                *v = f64::from_bits(word(c, 2 * k) as u64 | (word(c, 2 * k + 1) as u64) << 32);
            }
            out.push(p);
        }
        Ok(Some(out))
    }
    /// Per sequence, the bits the fixed-point keys were shifted right so far (`sh` in
    /// `shaders/gram_fixed.comp`: after a shift of sh bits each step adds up to half a unit of
    /// 2^sh to the keys' bound); 0s with the float arithmetic. A diagnostic.
    #[doc(hidden)]
    pub fn key_shifts(&self) -> Result<Vec<u32>> {
        if self.gram.scale.is_none() {
            return Ok(vec![0; self.batch.starts().len()]);
        }
        self.judge_words(0)
    }
    /// Per sequence, the largest error bound of the fresh keys (E_F in `shaders/gram.comp`, key
    /// units: c · e_x / |e_x|) at a full recompute so far (0 without one).
    pub fn fresh_error_max(&self) -> Result<Vec<f32>> {
        self.judge_floats(6)
    }
    /// A counter slot that only fixed-point keys keep (0s with the float judge, which keeps
    /// another counter there).
    fn fixed_slot(&self, slot: usize) -> Result<Vec<u32>> {
        if self.gram.scale.is_none() {
            return Ok(vec![0; self.batch.starts().len()]);
        }
        self.judge_slot(slot)
    }
    fn judge_slot(&self, slot: usize) -> Result<Vec<u32>> {
        Ok(self
            .judge_floats(slot)?
            .into_iter()
            .map(|v| v as u32)
            .collect())
    }
    fn judge_floats(&self, slot: usize) -> Result<Vec<f32>> {
        if !self.judge {
            // Without the judge these slots are never written.
            return Ok(vec![0.0; self.batch.starts().len()]);
        }
        Ok(self
            .judge_words(slot)?
            .into_iter()
            .map(f32::from_bits)
            .collect())
    }
    /// Word `slot` of every sequence's scalars (after its keys and running sum), as stored.
    fn judge_words(&self, slot: usize) -> Result<Vec<u32>> {
        let (n, d) = (self.gram.table.n(), self.gram.table.d());
        Ok(self
            .per_sequence(2 * n + 3 * d + slot, 1)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    /// `words` words of every sequence's state from word `at` of it, sequence after sequence.
    fn per_sequence(&self, at: usize, words: usize) -> Result<Vec<u8>> {
        let stride = state_floats(self.gram.table.n(), self.gram.table.d());
        let regions: Vec<(u64, u64)> = (0..self.batch.starts().len())
            .map(|i| (((i * stride + at) * 4) as u64, (words * 4) as u64))
            .collect();
        self.gram
            .table
            .context()
            .download_regions(&self._state, &regions)
    }

    /// One submission of `count` steps from step `first` (`replay`: picks read from the
    /// sequences buffer, for [`GramJob::resume`]); its GPU ns.
    fn dispatch(&mut self, first: usize, count: usize, replay: bool) -> Result<u64> {
        self.batch.check_live()?;
        let push = GramPush {
            n: self.gram.table.n() as u32,
            first: first as u32,
            count: count as u32,
            replay: replay as u32,
        };
        let what = format!(
            "gram steps {first}..{} of a batch of {}",
            first + count - 1,
            self.batch.starts().len()
        );
        let ctx = self.gram.table.context().clone();
        let dev = ctx.device().clone();
        let (p, set, groups) = (
            &self.pipeline,
            self.set.set,
            self.batch.starts().len() as u32,
        );
        let per = match self.opts.steps_per_dispatch {
            0 if crate::device::is_cpu_device(ctx.caps()) => 1,
            0 => count,
            k => k,
        }
        .min(self.max_per_dispatch);
        let align = self.align;
        let waited = self.sub.run(&what, |cb| unsafe {
            record_steps(&dev, cb, p, set, groups, push, per, align)
        });
        self.batch.settle(&what, waited)
    }
}

/// What in `opts` asks for float key sums (for the refusal of a fixed-point G).
fn float_reason(opts: &GramOptions) -> String {
    match (opts.compensated, opts.judge) {
        (Some(true), _) => "compensated sums".into(),
        (Some(false), _) => "plain sums".into(),
        (None, Some(false)) => "no judge".into(),
        _ => "fixed-point keys do not fit them on this device: their shared memory or a step \
              within the loop cap"
            .into(),
    }
}

/// Fixed-point keys' refresh period and threshold (units of A) for `opts`.
fn fixed_refresh(opts: &GramOptions) -> (usize, f32) {
    match opts.judge_refresh {
        Some(r) => (r.min(1 << 24), 0.0),
        None => (super::FIXED_REFRESH, super::FIXED_REFRESH_AT),
    }
}

/// A batch of `batch` sequences of `steps` steps over `table` fits next to G on the device.
fn check_batch_fits(
    caps: &Capabilities,
    table: &DeviceTable,
    batch: usize,
    steps: usize,
) -> Result<()> {
    let n = table.n();
    let limit = max_batch(caps, n, table.d(), table.precision().bytes(), steps);
    if batch > limit {
        return Err(Error::Limit(format!(
            "a gram batch of {batch} sequences over N = {n} needs {} MiB of state; at most {limit} fit next to G on {}",
            batch_bytes(n, batch, steps) / (1024 * 1024),
            caps.name
        )));
    }
    Ok(())
}

/// Whether the gram steps reduce with subgroup arithmetic: as `opts.subgroups` asks (refused
/// where the device cannot), else where the device can.
fn use_subgroups(caps: &Capabilities, opts: &GramOptions) -> Result<bool> {
    match opts.subgroups {
        Some(true) if !caps.subgroup_arithmetic || caps.subgroup_size < 2 => {
            Err(Error::Unsupported {
                device: caps.name.clone(),
                what: "subgroup arithmetic in compute shaders".into(),
            })
        }
        Some(s) => Ok(s),
        // The shader keeps two halves of WG slots for the subgroups' results: 2 lanes or more.
        None => Ok(caps.subgroup_arithmetic && caps.subgroup_size >= 2),
    }
}
