//! What every sequence engine keeps per batch, written once: the starts, the sequences buffer on
//! the device and its downloads, the steps done, the GPU time, and the lost-device state with its
//! fault injection ([`ENV_FAIL_AFTER_CHUNKS`]). [`ScanJob`](crate::ScanJob) and
//! [`GramJob`](crate::GramJob) each embed a `Batch` and delegate their progress and result
//! accessors to it; they differ only in how a chunk of steps is computed. Also how many
//! sequences a run's batches hold ([`batch_sizes`], from the devices' fit and the host budget
//! [`host_batch`]), which the driver asks for.
//! It may touch the device context, device memory and [`crate::error`]; no engine's arithmetic.
//!
//! The sequences buffer holds `starts.len()` rows of `seq_len` entries (the start, then one
//! entry per step); row i is the sequence of `starts[i]`. Entries past
//! `Batch::sequence_len` are not computed yet and are never returned.

use crate::device::Context;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Environment variable for fault-injection tests: after this many completed submissions in the
/// process, the next one reports `VK_ERROR_DEVICE_LOST` (its work is discarded), as a driver reset
/// would. Lets the checkpoint/resume path be tested on any device.
pub const ENV_FAIL_AFTER_CHUNKS: &str = "DIVERSITY_FAIL_AFTER_CHUNKS";

/// Environment variable for tests of the panic path: while it is set, every job step panics (as
/// a bug would) before any work, so that the bindings can show a panic becomes an error.
pub const ENV_INJECT_PANIC: &str = "DIVERSITY_INJECT_PANIC";

/// Submissions completed in this process, counted only while [`ENV_FAIL_AFTER_CHUNKS`] is set.
static CHUNKS_DONE: AtomicUsize = AtomicUsize::new(0);

/// `Some(n)` when [`ENV_FAIL_AFTER_CHUNKS`]` = n` and this process has already completed `n`
/// submissions: the caller must treat the submission it just waited for as lost.
pub(crate) fn injected_loss() -> Option<usize> {
    let n = crate::settings::read(ENV_FAIL_AFTER_CHUNKS, |v| {
        crate::settings::parse_count(ENV_FAIL_AFTER_CHUNKS, v, 0, u32::MAX as u64)
    })
    .ok()
    .flatten()? as usize;
    (CHUNKS_DONE.fetch_add(1, Ordering::SeqCst) >= n).then_some(n)
}

thread_local! {
    /// The cancellation flag of the step running on this thread, if any (see [`cancellable`]).
    static CANCEL: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Runs `f` (a job's step) on this thread with `flag` as its cancellation flag: once another
/// thread sets the flag, every engine refuses its next submission (the one in flight finishes),
/// so the step ends with an error after at most one more submission instead of running to its
/// end. The job stays consistent (every submission made is waited for and counted). The Lua
/// binding's stepping threads run under it, so that closing or collecting a started job, or the
/// process exiting, does not wait for a long step.
#[cfg(feature = "lua")]
pub(crate) fn cancellable<R>(flag: Arc<AtomicBool>, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = CANCEL.try_with(|c| c.borrow_mut().take());
        }
    }
    CANCEL.with(|c| *c.borrow_mut() = Some(flag));
    let _reset = Reset;
    f()
}

/// Whether the step running on this thread was cancelled ([`cancellable`]).
fn cancelled() -> bool {
    CANCEL
        .try_with(|c| {
            c.borrow()
                .as_ref()
                .is_some_and(|f| f.load(Ordering::SeqCst))
        })
        .unwrap_or(false)
}

/// What one `step` call of a job ([`ScanJob::step`](crate::ScanJob::step),
/// [`GramJob::step`](crate::GramJob::step)) did.
#[derive(Clone, Debug, Default)]
pub struct StepReport {
    /// Steps advanced (for every sequence of the batch).
    pub steps: usize,
    /// Submissions made.
    pub submissions: usize,
    /// GPU time of those submissions from timestamp queries, nanoseconds (0 without timestamps).
    pub gpu_ns: u64,
    /// Per submission, in order: (steps, GPU ns) — the rate over the course of a run.
    pub chunks: Vec<(usize, u64)>,
}

impl StepReport {
    /// Account one submission of `steps` steps that took `ns` GPU nanoseconds.
    pub(crate) fn add(&mut self, (steps, ns): (usize, u64)) {
        self.gpu_ns += ns;
        self.chunks.push((steps, ns));
    }
}

/// Check a batch's starts against a table of `n` rows: at least one, each below `n` (0-based),
/// none repeated. Positions in the messages count from 1 ("position 2 of the 2 starts").
pub fn check_starts(starts: &[u32], n: usize) -> Result<()> {
    if starts.is_empty() {
        return Err(Error::Invalid(
            "the batch has no starts (a batch needs at least one start)".into(),
        ));
    }
    let total = starts.len();
    // Per start seen, the 1-based position that took it: sized by the starts, not by `n` (a
    // caller's N of 2^32 or 2^53 must not allocate N words before anything is checked).
    let mut first = std::collections::HashMap::with_capacity(total);
    for (i, &s) in starts.iter().enumerate() {
        let s = s as usize;
        if s >= n {
            return Err(Error::Invalid(format!(
                "start {s} is out of range for N = {n}: the table has {n} rows, numbered from 0 \
                 (position {} of the {total} starts)",
                i + 1
            )));
        }
        if let Some(p) = first.insert(s, i + 1) {
            return Err(Error::Invalid(format!(
                "start {s} is repeated (positions {p} and {} of the {total} starts)",
                i + 1
            )));
        }
    }
    Ok(())
}

/// Entries per sequence for a table of `n` rows (≥ 1) and at most `steps` steps (top_k; `None` =
/// all N − 1): the start plus the steps.
pub(crate) fn sequence_length(n: usize, steps: Option<usize>) -> usize {
    steps.unwrap_or(n - 1).min(n - 1) + 1
}

/// Steps a submission of a `step(n)` call holds: the options' `chunk`, or, when it is 0, all
/// `n` at once (at least 1). Every engine's `step` cuts its work with this one function.
pub(crate) fn steps_per_submission(chunk: usize, n: usize) -> usize {
    if chunk == 0 {
        n.max(1)
    } else {
        chunk
    }
}

/// Advance by `n` steps in slices of at most `chunk` (0: one slice), each run by `slice(c)`,
/// which returns its time in nanoseconds; the report counts every slice as a submission.
pub(crate) fn step_in_slices(
    n: usize,
    chunk: usize,
    mut slice: impl FnMut(usize) -> Result<u64>,
) -> Result<StepReport> {
    let per = steps_per_submission(chunk, n);
    let mut report = StepReport::default();
    let mut left = n;
    while left > 0 {
        let c = per.min(left);
        let ns = slice(c)?;
        report.submissions += 1;
        report.add((c, ns));
        left -= c;
    }
    report.steps = n;
    Ok(report)
}

/// Check sequences to continue from: `starts.len()` rows of `len` entries (1 ≤ `len` ≤
/// `seq_len`), row i beginning with `starts[i]`, every entry below `n` and none repeated within
/// its row. Every engine's resume checks its prefixes with this one function.
pub(crate) fn check_prefixes(
    starts: &[u32],
    seq_len: usize,
    n: usize,
    prefixes: &[u32],
    len: usize,
) -> Result<()> {
    let count = starts.len();
    if len == 0 || len > seq_len || prefixes.len() != count * len {
        return Err(Error::Invalid(format!(
            "resume: {} entries for {count} sequences of {len} (1..={seq_len} each)",
            prefixes.len(),
        )));
    }
    let mut seen = vec![u32::MAX; n];
    for (i, row) in prefixes.chunks_exact(len).enumerate() {
        if row[0] != starts[i] {
            return Err(Error::Invalid(format!(
                "resume: sequence {i} begins with {}, its start is {}",
                row[0], starts[i]
            )));
        }
        for (k, &p) in row.iter().enumerate() {
            if p as usize >= n || seen[p as usize] == i as u32 {
                return Err(Error::Invalid(format!(
                    "resume: sequence {i} has entry {p} at step {k}: out of range or repeated"
                )));
            }
            seen[p as usize] = i as u32;
        }
    }
    Ok(())
}

/// An error when the step running on this thread was cancelled ([`cancellable`]): the one
/// message every engine gives.
pub(crate) fn check_cancelled() -> Result<()> {
    if cancelled() {
        return Err(Error::Invalid(
            "the step was cancelled (its job was closed or collected, or the process is exiting)"
                .into(),
        ));
    }
    Ok(())
}

/// Entries `from..to` of every row of a sequence buffer of `rows` rows of `stride` entries, of
/// which `len` are computed so far: row-major, `rows` × (`to` − `from`), one submission.
pub(crate) fn download_columns(
    ctx: &Context,
    seqs: &Buffer,
    shape: (usize, usize, usize),
    from: usize,
    to: usize,
) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    download_columns_into(ctx, seqs, shape, from, to, &mut out)?;
    Ok(out)
}

/// [`download_columns`] into `out`, resized to the columns (its capacity reused: no fresh pages
/// when it already held as many).
pub(crate) fn download_columns_into(
    ctx: &Context,
    seqs: &Buffer,
    (rows, stride, len): (usize, usize, usize),
    from: usize,
    to: usize,
    out: &mut Vec<u32>,
) -> Result<()> {
    if from > to || to > len {
        return Err(Error::Invalid(format!(
            "columns {from}..{to} of sequences that have {len} entries so far"
        )));
    }
    out.resize(rows * (to - from), 0);
    let regions: Vec<(u64, u64)> = if from == 0 && to == stride {
        vec![(0, (rows * stride * 4) as u64)]
    } else {
        (0..rows)
            .map(|s| (((s * stride + from) * 4) as u64, ((to - from) * 4) as u64))
            .collect()
    };
    ctx.download_regions_into(seqs, &regions, bytemuck::cast_slice_mut(out.as_mut_slice()))
}

/// The progress and result accessors of a job that embeds a [`Batch`] in a field named `batch`,
/// written once: expanded inside `impl ScanJob` and `impl GramJob`, so both keep them as inherent
/// public methods (callers need no trait in scope).
macro_rules! batch_accessors {
    () => {
        /// Steps each sequence will have when done (top_k, or N − 1).
        pub fn total_steps(&self) -> usize {
            self.batch.total_steps()
        }
        /// Steps completed so far.
        pub fn steps_done(&self) -> usize {
            self.batch.steps_done()
        }
        /// Whether every step is computed.
        pub fn done(&self) -> bool {
            self.batch.done()
        }
        /// The batch's starts, in order: row i of the results is the sequence of `starts()[i]`.
        pub fn starts(&self) -> &[u32] {
            self.batch.starts()
        }
        /// Total GPU time so far, nanoseconds.
        pub fn gpu_ns(&self) -> u64 {
            self.batch.gpu_ns()
        }
        /// Length of each sequence computed so far (steps done + the start).
        pub fn sequence_len(&self) -> usize {
            self.batch.sequence_len()
        }
        /// Every sequence so far, row-major: `starts().len()` rows of
        /// [`sequence_len`](Self::sequence_len) 0-based item indices; row i is the sequence of
        /// `starts()[i]`.
        pub fn sequences_flat(&self) -> $crate::error::Result<Vec<u32>> {
            self.batch.sequences_flat()
        }
        /// Entries `from..to` of every sequence (`to` at most
        /// [`sequence_len`](Self::sequence_len)), row-major (`starts().len()` rows of
        /// `to - from`), downloaded in one submission. The drivers append these to their
        /// checkpoint after each chunk.
        pub fn sequence_columns(&self, from: usize, to: usize) -> $crate::error::Result<Vec<u32>> {
            self.batch.sequence_columns(from, to)
        }
        /// [`sequence_columns`](Self::sequence_columns) into `out` (resized; its capacity
        /// reused).
        pub fn sequence_columns_into(
            &self,
            from: usize,
            to: usize,
            out: &mut Vec<u32>,
        ) -> $crate::error::Result<()> {
            self.batch.sequence_columns_into(from, to, out)
        }
        /// Every sequence so far, one `Vec` per start.
        pub fn sequences(&self) -> $crate::error::Result<Vec<Vec<u32>>> {
            self.batch.sequences()
        }
    };
}
pub(crate) use batch_accessors;

/// The scaffold of one batch of sequences on a device: starts, sequences buffer, progress, GPU
/// time and lost-device state. An engine's job embeds one and adds its own state and shaders.
pub(crate) struct Batch {
    ctx: Context,
    starts: Vec<u32>,
    /// Entries per sequence when done (the start + top_k or N − 1 steps): the buffer's stride.
    seq_len: usize,
    /// Steps known complete for every sequence.
    completed: usize,
    gpu_ns: u64,
    /// A submission failed with device loss: nothing more may run.
    lost: bool,
    /// `starts.len()` rows of `seq_len` entries (binding 5 of the engines' shaders).
    seqs: Buffer,
    /// The starts on the device (binding 2).
    starts_buf: Buffer,
}

impl Batch {
    /// A batch of `starts` (checked with [`check_starts`] by the caller) whose sequences will
    /// have `seq_len` entries: uploads the starts, allocates the sequences buffer.
    pub(crate) fn new(ctx: &Context, starts: &[u32], seq_len: usize) -> Result<Batch> {
        let starts_buf = ctx.upload("starts", bytemuck::cast_slice(starts))?;
        let seqs = Buffer::storage(ctx, "sequence output", (starts.len() * seq_len * 4) as u64)?;
        Ok(Batch {
            ctx: ctx.clone(),
            starts: starts.to_vec(),
            seq_len,
            completed: 0,
            gpu_ns: 0,
            lost: false,
            seqs,
            starts_buf,
        })
    }

    /// Write the starts into column 0 of the sequences buffer (for engines whose shaders do not).
    pub(crate) fn write_starts_column(&self) -> Result<()> {
        let col0: Vec<(u64, &[u8])> = self
            .starts
            .iter()
            .enumerate()
            .map(|(i, s)| (((i * self.seq_len) * 4) as u64, bytemuck::bytes_of(s)))
            .collect();
        self.ctx.write_regions(&self.seqs, &col0)
    }

    /// Continue from `prefixes` (`starts.len()` rows of `len` entries, row i beginning with
    /// `starts[i]`, entries < `n` and distinct within a row): checked, written into the sequences
    /// buffer, and counted as `len − 1` steps done. The engine rebuilds its own state from them.
    pub(crate) fn resume(&mut self, n: usize, prefixes: &[u32], len: usize) -> Result<()> {
        check_prefixes(&self.starts, self.seq_len, n, prefixes, len)?;
        let rows: Vec<(u64, &[u8])> = prefixes
            .chunks_exact(len)
            .enumerate()
            .map(|(i, r)| (((i * self.seq_len) * 4) as u64, bytemuck::cast_slice(r)))
            .collect();
        self.ctx.write_regions(&self.seqs, &rows)?;
        self.completed = len - 1;
        Ok(())
    }

    /// The sequences buffer (for the engine's descriptor set).
    pub(crate) fn seqs_buffer(&self) -> &Buffer {
        &self.seqs
    }
    /// The starts on the device (for the engine's descriptor set).
    pub(crate) fn starts_buffer(&self) -> &Buffer {
        &self.starts_buf
    }

    /// An error when an earlier submission of this batch was lost: its state on the device is
    /// unknown, so it may not go on (the caller resumes from its checkpoint in a new batch).
    /// Also an error when the step was cancelled ([`cancellable`]).
    pub(crate) fn check_live(&self) -> Result<()> {
        check_cancelled()?;
        if self.lost {
            return Err(Error::DeviceLost(format!(
                "an earlier submission of this batch of {}; the batch must be restarted",
                self.starts.len()
            )));
        }
        Ok(())
    }

    /// The outcome of waiting for the submission `what`: its GPU ns, or the error. A failure, or
    /// a loss injected by [`ENV_FAIL_AFTER_CHUNKS`], marks the batch lost.
    pub(crate) fn settle(&mut self, what: &str, waited: Result<u64>) -> Result<u64> {
        let ns = waited.inspect_err(|_| self.lost = true)?;
        if let Some(k) = injected_loss() {
            self.lost = true;
            return Err(Error::DeviceLost(format!(
                "{what} (injected by {ENV_FAIL_AFTER_CHUNKS}={k})"
            )));
        }
        Ok(ns)
    }

    /// Count `steps` more steps done for every sequence, computed in `ns` GPU nanoseconds.
    pub(crate) fn complete(&mut self, steps: usize, ns: u64) {
        self.completed += steps;
        self.gpu_ns += ns;
    }

    /// The batch's starts, in order: row i of the results is the sequence of `starts()[i]`.
    pub(crate) fn starts(&self) -> &[u32] {
        &self.starts
    }
    /// Steps each sequence will have when done (top_k, or N − 1).
    pub(crate) fn total_steps(&self) -> usize {
        self.seq_len - 1
    }
    /// Steps completed so far.
    pub(crate) fn steps_done(&self) -> usize {
        self.completed
    }
    /// Whether every step is computed.
    pub(crate) fn done(&self) -> bool {
        self.completed == self.total_steps()
    }
    /// Total GPU time so far, nanoseconds.
    pub(crate) fn gpu_ns(&self) -> u64 {
        self.gpu_ns
    }
    /// Length of each sequence computed so far (steps done + the start).
    pub(crate) fn sequence_len(&self) -> usize {
        self.completed + 1
    }

    /// Entries `from..to` of every sequence (`to` at most [`Batch::sequence_len`]), row-major:
    /// `starts().len()` rows of `to − from`, downloaded in one submission.
    pub(crate) fn sequence_columns(&self, from: usize, to: usize) -> Result<Vec<u32>> {
        download_columns(
            &self.ctx,
            &self.seqs,
            (self.starts.len(), self.seq_len, self.sequence_len()),
            from,
            to,
        )
    }

    /// [`Batch::sequence_columns`] into `out` (resized; its capacity reused).
    pub(crate) fn sequence_columns_into(
        &self,
        from: usize,
        to: usize,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        download_columns_into(
            &self.ctx,
            &self.seqs,
            (self.starts.len(), self.seq_len, self.sequence_len()),
            from,
            to,
            out,
        )
    }

    /// Every sequence so far, row-major: `starts().len()` rows of [`Batch::sequence_len`].
    pub(crate) fn sequences_flat(&self) -> Result<Vec<u32>> {
        self.sequence_columns(0, self.sequence_len())
    }

    /// Every sequence so far, one `Vec` per start.
    pub(crate) fn sequences(&self) -> Result<Vec<Vec<u32>>> {
        let len = self.sequence_len();
        Ok(self
            .sequences_flat()?
            .chunks_exact(len)
            .map(|r| r.to_vec())
            .collect())
    }
}

/// Host bytes a batch holds per entry (sequence step) at its peak: the downloaded uint32 rows,
/// the checkpoint columns and the rows' JSON text while they stream to the cache. Measured on
/// the whole cache of a 31,102-row table: batches of 6,220 sized at 10 bytes an entry peaked at
/// 3.8 GB resident (about 20 bytes an entry), so 24 keeps the default budget.
pub const HOST_BYTES_PER_ENTRY: u64 = 24;

/// The default host budget for a batch's results: the smaller of 2 GiB and a quarter of the
/// host's memory (2 GiB where it cannot be read).
pub fn default_host_memory() -> u64 {
    let budget = 2u64 << 30;
    crate::device::host_memory_bytes().map_or(budget, |total| budget.min(total / 4))
}

/// The most sequences of `steps` steps a batch may hold within `bytes` of host memory (≥ 1).
pub fn host_batch(bytes: u64, steps: u64) -> u64 {
    (bytes / ((steps + 1) * HOST_BYTES_PER_ENTRY)).max(1)
}

/// gram's default batching: at least this many batches of a whole cache …
pub const GRAM_BATCHES: u64 = 4;
/// … each of at least this many sequences (enough to fill a GPU).
pub const GRAM_MIN_BATCH: u64 = 1024;

/// What a run's batch size is chosen from (see [`batch_sizes`]).
#[derive(Clone, Copy, Debug)]
pub struct BatchRequest {
    /// The engine is gram (else the scan).
    pub gram: bool,
    /// The batch the caller asked for (`--batch`), if any.
    pub requested: Option<u64>,
    /// The scan's default batch, used when none is requested.
    pub default: u64,
    /// The largest batch every device allows (the smallest of their `max_batch`).
    pub fit: u64,
    /// The largest batch the host budget allows ([`host_batch`]).
    pub host_fit: u64,
    /// Devices sharing the batches.
    pub devices: u64,
    /// Starts this run computes (a shard's own).
    pub starts: u64,
    /// Starts of the whole run (every shard's).
    pub all_starts: u64,
}

/// The batch sizes of a run, as `(batch, device_batch, run_batch)`: `batch` fits every device
/// and the host budget (gram, unrequested: every sequence that fits, but a large whole cache in
/// at least [`GRAM_BATCHES`] batches of at least [`GRAM_MIN_BATCH`], so that the host writes one
/// batch while the device computes the next); `device_batch` is what the batches hold (several
/// devices, unrequested: about four batches a device, so a faster device takes more of them);
/// `run_batch` is the whole run's, which a shard records in its metadata.
pub fn batch_sizes(r: &BatchRequest) -> (u64, u64, u64) {
    let given = r.requested.is_some();
    let mut batch = if r.gram && !given {
        r.fit
    } else {
        r.requested.unwrap_or(r.default).min(r.fit).max(1)
    };
    if r.gram && !given {
        batch = batch.min(GRAM_MIN_BATCH.max(r.all_starts.div_ceil(GRAM_BATCHES)));
    }
    batch = batch.min(r.host_fit);
    let (mut device_batch, mut run_batch) = (batch, batch);
    if r.devices > 1 && !given {
        device_batch = device_batch.min(r.starts.div_ceil(4 * r.devices).max(1));
        run_batch = run_batch.min(r.all_starts.div_ceil(4 * r.devices).max(1));
    }
    (batch, device_batch, run_batch)
}

#[cfg(test)]
mod sizing_tests {
    use super::*;

    #[test]
    fn batch_sizes_follow_the_driver_rules() {
        let r = BatchRequest {
            gram: false,
            requested: None,
            default: 3584,
            fit: 10_000,
            host_fit: 1_000_000,
            devices: 1,
            starts: 8359,
            all_starts: 8359,
        };
        // The scan's default, within the device's fit and the host's budget.
        assert_eq!(batch_sizes(&r), (3584, 3584, 3584));
        assert_eq!(
            batch_sizes(&BatchRequest { host_fit: 100, ..r }),
            (100, 100, 100)
        );
        // gram, unrequested: what fits, but a whole cache in at least four batches of ≥ 1,024.
        let g = BatchRequest { gram: true, ..r };
        assert_eq!(batch_sizes(&g), (2090, 2090, 2090));
        assert_eq!(
            batch_sizes(&BatchRequest {
                all_starts: 300,
                starts: 300,
                ..g
            })
            .0,
            1024
        );
        // Two devices share about four batches each; a shard records the whole run's.
        let two = BatchRequest {
            devices: 2,
            starts: 1000,
            ..r
        };
        assert_eq!(batch_sizes(&two), (3584, 125, 1045));
        // A requested batch is kept (within the fits), on any number of devices.
        let asked = BatchRequest {
            requested: Some(50),
            ..two
        };
        assert_eq!(batch_sizes(&asked), (50, 50, 50));
        assert_eq!(
            batch_sizes(&BatchRequest {
                requested: Some(0),
                ..r
            })
            .0,
            1
        );
    }
}
