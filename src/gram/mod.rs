//! The gram engine: `c · e_x` is linear in the running sum c, so each
//! sequence keeps `key[x] = c · e_x / |e_x|` for every candidate and adds row `G[pick]` of the
//! Gram matrix with scaled columns, `G = E Eᵀ diag(1/|e|)` (computed once on the device,
//! [`Gram::build`]) after each pick; the pick is the unchosen x of least key (largest distance,
//! lowest index on ties). A step costs O(N) instead of the scan's O(N · D); the whole job reads
//! N³ × 4 bytes of Gram rows.
//!
//! * Where the device has float64 in shaders the keys are fixed-point by default
//!   ([`fixed_point`], `shaders/gram_fixed.comp`): G's entries are int32 (float64 dot products
//!   rounded once), the keys int32 sums that do not round, and every step is certified by the
//!   second-best key against a bound that only counts the entries' rounding; near ties are
//!   settled from float64 fresh keys. Elsewhere, or when the options name float sums, the key is
//!   a float32 compensated pair (hi + lo, Knuth TwoSum) or a plain float32 sum, with the float
//!   judge (`shaders/gram.comp`).
//! * The state lives in registers across one workgroup per sequence when it fits
//!   ([`Placement::Registers`]: a lane-stride array for the float sums; for fixed-point keys runs
//!   of four adjacent items a lane, whose Gram-row values come in one 16-byte load), else in
//!   device memory ([`Placement::Memory`]); both run the same operations in the same order, so
//!   results have the same bits, as they do for every workgroup size, chunk size, batch size and
//!   start order.
//! * G (int32 fixed-point or float32 entries, [`GramBuild::fixed`]; each row padded with zeros to
//!   a multiple of 4 entries, [`row_stride`]) is computed from the stored
//!   (for fp16 tables: rounded) rows, split into row slabs of at most `maxStorageBufferRange`
//!   bytes each (at most [`MAX_SLABS`]).
//!
//! [`mode_for`] is the `auto` rule: gram when G and one batch's state fit the device's memory
//! budget, else scan.
//!
//! The engine has the same rooms as the k-NN engine: `plan.rs` (the pure sizing and choices —
//! the arithmetic, workgroup size, placement, batch limits and the `auto` rule — unit-tested
//! without a device), `judge.rs` (the judge's band, shared memory, loop counts and refresh
//! period), `matrix.rs` (G itself, built on the device), `job.rs` (a batch's state on the
//! device, its stepping and the judge's counters read back) and `record.rs` (the dispatches one
//! submission records). This file holds the options and the vocabulary they share. The engine
//! touches the device table it reads, its own buffers and the batch scaffold; nothing of the
//! other engines.

mod job;
mod judge;
mod matrix;
mod plan;
mod record;

pub use crate::mode::Mode;
pub use job::GramJob;
pub use matrix::{Gram, GramBuild};
pub use plan::{
    arithmetic, batch_bytes, fixed_point, gram_bytes, gram_unfit, max_batch, mode_for, row_stride,
    summation,
};

use crate::device::G_SLABS;
use crate::names::named_enum;

/// The most slabs G may be split into (one descriptor array of storage buffers).
pub const MAX_SLABS: usize = G_SLABS as usize;

/// Fraction of the device memory budget the gram engine plans to use (G, state, output).
pub const BUDGET_FRACTION: f64 = 0.9;
/// Where a gram job keeps each sequence's `acc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Registers when they hold N items across the workgroup, else device memory.
    Auto,
    /// In registers across the workgroup (a lane-stride array; fixed-point keys in runs of four
    /// adjacent items a lane), loaded and stored once per submission.
    Registers,
    /// Device memory, read and written every step (any N whose G fits).
    Memory,
}

named_enum!(Placement, "state", {
    Auto => "auto",
    Registers => "registers",
    Memory => "memory",
});

/// How a [`GramJob`] runs.
#[derive(Clone, Debug)]
pub struct GramOptions {
    /// Steps per submission (the watchdog knob); 0 = everything a `step` call asks for at once.
    pub chunk: usize,
    /// Compute only the first K steps of each sequence (top_k); `None` = all N − 1.
    pub steps: Option<usize>,
    /// Invocations per workgroup (one workgroup per sequence; a power of two); `None` picks one.
    pub workgroup_size: Option<u32>,
    /// Where the state lives.
    pub placement: Placement,
    /// Reduce with subgroup operations: `None` = when the device has them; `Some(false)` forces
    /// the shared-memory tree.
    pub subgroups: Option<bool>,
    /// Steps one dispatch loops over inside the shader (a submission records as many
    /// dispatches as its chunk needs, with barriers between); 0 = the device's default: every
    /// step of the chunk on GPUs, 1 on CPU devices. On lavapipe a dispatch never runs more
    /// steps than its loop cap allows ([`crate::device::Capabilities::loop_limit`]: past 65,535
    /// loop iterations an invocation's loops stop silently, which once made long in-shader
    /// step loops pick wrongly there).
    pub steps_per_dispatch: usize,
    /// Float key sums: each key a compensated pair (Knuth TwoSum) or a plain float32 sum (fewer
    /// registers and operations, more rounding over long runs on centered data). `None` (the
    /// default): fixed-point keys where [`fixed_point`] says they run (the device has float64
    /// in shaders), else compensated sums, except on GPUs where their state would not fit the
    /// register file (N > 17,408 at 512 invocations) or the table is
    /// [`GramOptions::centered`], and the judge runs: plain sums there (see [`arithmetic`]).
    /// `Some(_)` selects the float arithmetic, which needs a G with float32 entries
    /// ([`GramBuild::fixed`] `Some(false)`). The settings give different bits; each is the same
    /// across every other option.
    pub compensated: Option<bool>,
    /// The table's column mean was subtracted (the driver's `center`, [`crate::Table::centered`]).
    /// With the float arithmetic, `compensated` unset and the judge running, a GPU then sums
    /// plain float32 (fixed-point keys do not depend on it): on
    /// centred data the running sum stays short, so plain sums' error bound stays small, and
    /// with the judge they were 16–56% faster than compensated sums on every centred table
    /// measured on an H200 (1.3–1.5× slower on uncentred ones, BENCHMARKS.md). Other bits at
    /// near-ties, the same bound. CPU devices keep compensated sums. Default false.
    pub centered: bool,
    /// The float judge (fixed-point keys always carry their own certificate, see
    /// [`fixed_point`]; `Some(false)` selects the float arithmetic without a judge, `Some(true)`
    /// keeps the default): each step also finds the second best key, and when it is within
    /// twice the keys' rigorous error bound of the best (see `shaders/gram.comp`), the keys that could be
    /// the exact best are re-scored from the compensated running sum (a compensated dot product
    /// in 32 chains) and the pick made from them; past 64 of them, and every
    /// [`JUDGE_REFRESH`] steps, every key is recomputed. Every pick is then within about 6u
    /// (u = 2⁻²⁴) of the exact best, whatever N. `None` (the default; with the float
    /// arithmetic): on at every N; it costs
    /// about 1.6–3× the GPU time of the same sums without it (BENCHMARKS.md). `Some(false)`:
    /// off (other bits at near-ties; the compensated keys' error then grows with the sequence).
    /// Off where a step with a recompute would pass the device's loop cap or its buffers do not
    /// fit shared memory ([`GramJob::judge`] says which ran).
    pub judge: Option<bool>,
    /// Register placement: Gram row loads a lane issues before using them (0 = the default:
    /// every item's at once for float sums without the judge, else 8, or 32 for fixed-point keys
    /// at 512 invocations). The same bits for every value; a benchmark knob (see
    /// `loads_in_flight` and `fixed_loads`).
    #[doc(hidden)]
    pub loads: usize,
    /// The judge's widest band re-scored alone (`None` = 64; `Some(0)`: every uncertain step
    /// recomputes every key). For tests and benchmarks: the results differ only at near-ties.
    #[doc(hidden)]
    pub judge_band: Option<usize>,
    /// The judge recomputes every key after this many steps without one (`None` = the
    /// default, [`JUDGE_REFRESH`]; `Some(0)`: only when a band overflows). Bounds the keys'
    /// error growth, so uncertain steps stay rare. Other bits at near-ties. With fixed-point
    /// keys: see [`FIXED_REFRESH`].
    #[doc(hidden)]
    pub judge_refresh: Option<usize>,
    /// With plain sums, bound the keys' largest magnitude through the running sum's norm,
    /// tracked from each pick's key (`None` = yes, see `shaders/gram.comp`), instead of taking
    /// it over the keys each step (`Some(false)`). Other bits at near-ties; a benchmark knob.
    #[doc(hidden)]
    pub judge_kmax_c: Option<bool>,
    /// Scales the judge's bound (`None` = 1). Only 0 means anything: every step counts as
    /// certain, which times the judge's per-step work alone. Not exact; a benchmark knob.
    #[doc(hidden)]
    pub judge_scale: Option<f32>,
    /// Timing only, never exact (`DIAG` in `shaders/gram.comp`; 0 in every real run): bit 1
    /// leaves uncertain steps unsettled, bit 2 drops the second best, bit 4 the running sum's
    /// update. A benchmark knob.
    #[doc(hidden)]
    pub judge_diag: u32,
}

/// Steps between the judge's full recomputes by default ([`GramOptions::judge_refresh`]):
/// measured on an H200 at N = 31,102, a recompute every 4,096 steps cut band re-scores 5× and
/// saved 8–10%; with row loads in groups of 8 as well, 19–22% (BENCHMARKS.md).
pub const JUDGE_REFRESH: usize = 4096;

/// Fixed-point keys can recompute every key from the float64 running sum at steps
/// 1 + k·R when their bound A has reached [`FIXED_REFRESH_AT`] units (A restarts; fewer uncertain
/// steps later): `GramOptions::judge_refresh = Some(R)` turns it on, every R steps without the
/// threshold (for tests and benchmarks). Off by default: on an H200 every 256 steps above 1,024
/// units cost more than the settles it saved on every table measured (real31k 4.89 s against
/// 3.97 s, the fortunes 8.20 against 4.67 s, the 8,359 × 768 table 0.91 against 0.79 s;
/// BENCHMARKS.md).
pub const FIXED_REFRESH: usize = 0;
/// See [`FIXED_REFRESH`].
pub const FIXED_REFRESH_AT: f32 = 1024.0;

/// The arithmetic a gram job runs: key sums and whether the judge runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arithmetic {
    /// Compensated key sums (else plain float32).
    pub compensated: bool,
    /// The judge runs: asked for (or chosen), and it fits the device (shared memory, loop cap).
    pub judge: bool,
}

impl Default for GramOptions {
    fn default() -> Self {
        GramOptions {
            chunk: 256,
            steps: None,
            workgroup_size: None,
            placement: Placement::Auto,
            subgroups: None,
            steps_per_dispatch: 0,
            compensated: None,
            centered: false,
            judge: None,
            loads: 0,
            judge_band: None,
            judge_refresh: None,
            judge_kmax_c: None,
            judge_scale: None,
            judge_diag: 0,
        }
    }
}
