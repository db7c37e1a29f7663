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
//!
//! The engine has the same rooms as the gram and k-NN engines: `plan.rs` (the job's sizes and
//! limits, and [`max_batch`], before anything is allocated), `state.rs` (its pipelines and
//! buffers on the device), `push.rs` (the shaders' push constants), `record.rs` (the recording
//! of step 0 and of a chunk of steps) and `job.rs` ([`ScanJob`]: the schedule of the chunks).
//! This file holds the options, kernels and shapes they share. The engine touches the device
//! table it reads, its own buffers and the batch scaffold; nothing of the other engines.

mod job;
mod plan;
mod push;
mod record;
mod state;

pub use job::{run_scan, ScanJob};
pub use plan::max_batch;
pub use push::{CommitPush, InitPush, ScanPush, TilePush};

use crate::device::Capabilities;
use crate::names::named_enum;

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

named_enum!(ScanKernel, "scan kernel", {
    Auto => "auto",
    Block64 => "block64" | "64",
    Block128 => "block128" | "128",
    Coopmat => "coopmat" | "tensor",
    Filter => "filter",
});

impl ScanKernel {
    /// The kernel named by [`ENV_SCAN_KERNEL`], if any.
    fn from_env() -> Option<ScanKernel> {
        // Parsed strictly by `settings::check` when the context opened.
        crate::settings::raw(ENV_SCAN_KERNEL)
            .ok()
            .flatten()
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
            ScanKernel::Coopmat => COOPMAT_BLOCK_M,
            ScanKernel::Filter => 16,
            _ => block_m(batch),
        }
    }

    /// Invocations of one candidate-scan workgroup.
    fn scan_workgroup(self) -> u32 {
        match self.resolve() {
            ScanKernel::Coopmat => COOPMAT_WORKGROUP as u32,
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
            // The staged scores (the tensor-core filter: half the block's rows at a time, or its
            // operands, SK dims of each row and 16 bytes of padding, in one or two stage
            // buffers, whichever is larger), overflow rows and count, row scales, bounds and
            // mask words, candidate finv, the argmin arrays and picks.
            ScanKernel::Coopmat | ScanKernel::Filter => {
                let staged = if self.resolve() == ScanKernel::Coopmat {
                    // 64 rows of products, or the stage buffers.
                    let stage_row = 2 * COOPMAT_SK + 16;
                    (4 * 64 * bn).max(COOPMAT_STAGES * (bm + bn) * stage_row)
                } else {
                    4 * bm * bn
                };
                // The accumulator epilogue's coordinate fragment and per-row best and count.
                let acc = if self.resolve() == ScanKernel::Coopmat {
                    1024 + 8 * bm
                } else {
                    0
                };
                staged + acc + 4 * (bm + 4 + 2 * bm + bm * bn / 32 + bn + 2 * w + 8)
            }
            _ => GEMM_SHARED_BYTES,
        }
    }
}

/// A decimal build-time knob (build.rs sets `DIVERSITY_FILTER_*` from the shader defines).
const fn knob(s: &str) -> usize {
    let b = s.as_bytes();
    let mut v = 0;
    let mut i = 0;
    while i < b.len() {
        assert!(
            b[i].is_ascii_digit(),
            "a filter knob must be a decimal number"
        );
        v = v * 10 + (b[i] - b'0') as usize;
        i += 1;
    }
    v
}

/// Invocations of a tensor-core filter workgroup: `FILTER_WG` in `filter_common.glsl`.
const COOPMAT_WORKGROUP: usize = knob(env!("DIVERSITY_FILTER_WG"));
/// Row tiles of 16 sequences a subgroup holds: `FILTER_TI`.
const COOPMAT_TI: usize = knob(env!("DIVERSITY_FILTER_TI"));
/// Dims a shared-memory stage of the filter's operands: `FILTER_SK` (0: the shader's default).
const COOPMAT_SK: usize = match knob(env!("DIVERSITY_FILTER_SK")) {
    0 if COOPMAT_TI == 2 => 96,
    0 => 32,
    sk => sk,
};
/// The most candidate rows the judge stages in shared memory at a time: `JUDGE_ROWS` (a build
/// knob read only by the host, 2 by default; 0 reads them in place).
const JUDGE_ROWS: u64 = knob(env!("DIVERSITY_JUDGE_ROWS")) as u64;
/// Stage buffers of the tensor-core filter's operands: 1, or 2 with `FILTER_DBUF=1`.
const COOPMAT_STAGES: usize = 1 + knob(env!("DIVERSITY_FILTER_DBUF"));
/// Sequences per block of the tensor-core filter: `16 · FILTER_TI · (FILTER_WG / 64)`.
const COOPMAT_BLOCK_M: usize = 16 * COOPMAT_TI * (COOPMAT_WORKGROUP / 64);

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

named_enum!(Shape, "shape", {
    Untiled => "untiled",
    Tiled => "tiled" | "in-shader",
    PerTile => "per-tile" | "dispatch-per-tile",
});

impl Shape {
    /// The shape a tile size names, the one reading of "0 = untiled" for every front end (the
    /// Lua `job:step(n, tile)`, the C ABI's `tile_size`): 0 is [`Shape::Untiled`] (one strided
    /// pass), any other size [`Shape::Tiled`] with tiles of that many candidates.
    pub fn from_tile(tile: u32) -> (Shape, u32) {
        if tile == 0 {
            (Shape::Untiled, 0)
        } else {
            (Shape::Tiled, tile)
        }
    }

    /// The tile size a step of this shape scans with, as the shaders take it: 0 (the whole
    /// table) when untiled, else `tile`.
    pub fn tile(self, tile: u32) -> u32 {
        match self {
            Shape::Untiled => 0,
            _ => tile,
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
    /// The candidate-scan kernel; [`ScanKernel::Auto`] (the default) picks one for the device.
    /// Every kernel gives the same bits.
    pub kernel: ScanKernel,
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
    /// Candidate rows the judge copies into shared memory at a time before re-scoring them
    /// (`None`, the default: up to 2 where they fit, none on a device that caps loop
    /// iterations; `Some(0)`: each row read in place; at most the judge's workgroup size and
    /// what its shared memory holds, else the job is refused). The same result either way.
    pub judge_rows: Option<u32>,
}

impl Default for FilterTuning {
    fn default() -> Self {
        FilterTuning {
            capacity: 8,
            gamma_scale: 1.0,
            judge_rows: None,
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

/// Subgroup-clock ticks of the filter's phases, summed over the blocks filtered so far
/// (invocation 0 of each workgroup; `shaders/filter_block.glsl`, "THE CLOCK PROFILE"):
/// [`ScanJob::filter_clock`]. A diagnostic for kernel work.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterClock {
    /// Block setup: the rows' and candidates' constants and mask words into shared memory.
    pub setup: u64,
    /// Tensor cores: the k-stages' operand copies into shared memory with their barriers and
    /// prefetches (0 in the stand-in, which stages nothing).
    pub staging: u64,
    /// The products: fragment loads and multiply-adds (the stand-in's fp32 loop).
    pub products: u64,
    /// The epilogue: filter keys, minima, bands.
    pub epilogue: u64,
    /// The tensor-core epilogue on the accumulators, split (part of `epilogue`; zeros where the
    /// products were staged, as in the stand-in): the keys and per-element minima, their
    /// reduction to each row's best, the band entries, the headers (each with its barrier).
    pub epilogue_parts: [u64; 4],
    /// The exact re-scoring of rows whose band overflowed.
    pub fallback: u64,
    /// Blocks profiled (workgroup blocks of the filter, all steps).
    pub blocks: u64,
}

impl FilterClock {
    /// Ticks a block of each phase: setup, staging, products, epilogue, fallback.
    pub fn per_block(&self) -> [f64; 5] {
        let b = self.blocks.max(1) as f64;
        [
            self.setup as f64 / b,
            self.staging as f64 / b,
            self.products as f64 / b,
            self.epilogue as f64 / b,
            self.fallback as f64 / b,
        ]
    }

    /// Ticks a block of each part of the epilogue on the accumulators: keys, reduction, band,
    /// headers.
    pub fn epilogue_parts_per_block(&self) -> [f64; 4] {
        let b = self.blocks.max(1) as f64;
        self.epilogue_parts.map(|t| t as f64 / b)
    }
}

/// Subgroup-clock ticks of the judge's phases, summed over the sequence-steps judged so far
/// (invocation 0 of each workgroup; `shaders/scan_judge.comp`, `JUDGE_CLOCK`):
/// [`ScanJob::judge_clock`]. A diagnostic for kernel work.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JudgeClock {
    /// Headers (the centroid staged, the best filter key), gathering the band, re-scoring it,
    /// the pick and its commit, the next step's ĉ, 2^-k and γ.
    pub phases: [u64; 5],
    /// Sequence-steps judged.
    pub judged: u64,
}

impl JudgeClock {
    /// Ticks a sequence-step of each phase.
    pub fn per_step(&self) -> [f64; 5] {
        let j = self.judged.max(1) as f64;
        self.phases.map(|t| t as f64 / j)
    }
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
            kernel: ScanKernel::Auto,
        }
    }
}
