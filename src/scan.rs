//! The scan engine (SPEC §Modes, scan): each step, every sequence of a batch scans every unchosen
//! candidate and takes the one farthest from its running centroid. Three shapes, selectable at
//! run time, all computing each candidate's key with the same shader code so that results are
//! bit-identical across shapes, tile sizes, chunking, batching and pipelining (SPEC §Exactness 1):
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

use crate::device::{barrier, Buffer, Capabilities, Context, Pipeline, PipelineKey, Set};
use crate::error::{Error, Result, VkContext};
use crate::spirv::{self, Shader};
use crate::table::{Precision, Table};
use ash::vk;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Environment variable for fault-injection tests: after this many completed submissions in the
/// process, the next one reports `VK_ERROR_DEVICE_LOST` (its work is discarded), as a driver reset
/// would. Lets the checkpoint/resume path be tested on any device.
pub const ENV_FAIL_AFTER_CHUNKS: &str = "DIVERSITY_FAIL_AFTER_CHUNKS";

static CHUNKS_DONE: AtomicUsize = AtomicUsize::new(0);

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

/// Environment variable read by [`ScanKernel::Auto`]: `block64` or `block128` picks that kernel
/// for every job that does not name one (the Lua binding and the drivers included); unset or
/// anything else keeps the default rule ([`ScanKernel::for_batch`]).
pub const ENV_SCAN_KERNEL: &str = "DIVERSITY_SCAN_KERNEL";

/// Which shader computes the candidate scan. Both compute every key with the same fused
/// multiply-add chain, so the sequences are bit-identical whichever runs (SPEC §Exactness 1);
/// only speed differs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanKernel {
    /// [`ENV_SCAN_KERNEL`] if set to a kernel's name, else [`ScanKernel::Block128`] for batches
    /// of at least 128 sequences and [`ScanKernel::Block64`] below (measured: Block128 was 1.34×
    /// faster on an H200 at 3,584 sequences and 1.72× on lavapipe at 256; BENCHMARKS.md).
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
}

impl ScanKernel {
    /// `auto`, `block64` or `block128`.
    pub fn name(self) -> &'static str {
        match self {
            ScanKernel::Auto => "auto",
            ScanKernel::Block64 => "block64",
            ScanKernel::Block128 => "block128",
        }
    }

    /// The kernel [`ScanKernel::Auto`] names through [`ENV_SCAN_KERNEL`] alone (Block64 when
    /// unset); a named kernel is returned as it is. Jobs resolve with [`ScanKernel::for_batch`].
    pub fn resolve(self) -> ScanKernel {
        match self {
            ScanKernel::Auto => std::env::var(ENV_SCAN_KERNEL)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|k| *k != ScanKernel::Auto)
                .unwrap_or(ScanKernel::Block64),
            k => k,
        }
    }

    /// The kernel a job of `batch` sequences runs: a named kernel as it is; [`ScanKernel::Auto`]
    /// through [`ENV_SCAN_KERNEL`] when set, else Block128 for `batch` ≥ 128, Block64 below.
    pub fn for_batch(self, batch: usize) -> ScanKernel {
        let from_env = std::env::var(ENV_SCAN_KERNEL)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|k| *k != ScanKernel::Auto);
        match (self, from_env) {
            (ScanKernel::Auto, Some(k)) => k,
            (ScanKernel::Auto, None) if batch >= 128 => ScanKernel::Block128,
            (ScanKernel::Auto, None) => ScanKernel::Block64,
            (k, _) => k,
        }
    }

    /// Candidates per workgroup block (tiles are rounded up to whole blocks): 64 or 128.
    pub fn block_n(self) -> usize {
        match self.resolve() {
            ScanKernel::Block128 => 128,
            _ => BLOCK_N,
        }
    }

    /// Sequences per workgroup block for a batch of `batch`.
    pub fn block_m(self, batch: usize) -> usize {
        match self.resolve() {
            ScanKernel::Block128 => 128,
            _ => block_m(batch),
        }
    }

    fn shared_bytes(self) -> usize {
        match self.resolve() {
            ScanKernel::Block128 => GEMM_BIG_SHARED_BYTES,
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
            _ => Err(Error::Invalid(format!(
                "scan kernel '{s}': expected auto, block64 or block128"
            ))),
        }
    }
}

pub(crate) fn injected_loss() -> Option<usize> {
    let n: usize = std::env::var(ENV_FAIL_AFTER_CHUNKS)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (CHUNKS_DONE.fetch_add(1, Ordering::SeqCst) >= n).then_some(n)
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
    let seq_len = steps.min(n - 1) + 1;
    let per_buffer = [
        seq_len * 4,             // sequence output
        2 * d * 4,               // running sums
        n.div_ceil(32) * 4,      // chosen masks
        d * 4,                   // fp32 centroids
        n.div_ceil(BLOCK_N) * 8, // block winners
    ];
    let mut best = caps.max_workgroup_count as usize;
    for bytes in per_buffer {
        best = best.min((caps.max_buffer_range / bytes.max(1) as u64) as usize);
    }
    // Scan dispatch: ceil(N / BN) × ceil(batch / 64) workgroups.
    let row_blocks = caps.max_workgroup_count as usize / n.div_ceil(BLOCK_N);
    best = best.min(row_blocks.saturating_mul(64));
    let table = (n * d * precision.bytes()) as u64;
    let per_seq: u64 = per_buffer.iter().map(|&b| b as u64).sum();
    if let Some(room) = caps.memory_budget_bytes.checked_sub(table) {
        best = best.min((room / per_seq.max(1)) as usize);
    }
    best.max(1)
}

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

struct TableInner {
    ctx: Context,
    data: Buffer,
    inv_norm: Buffer,
    n: usize,
    d: usize,
    precision: Precision,
}

/// A table uploaded to a device at a storage precision, with its row norms. Cheap to clone;
/// jobs keep it alive.
#[derive(Clone)]
pub struct DeviceTable {
    inner: Arc<TableInner>,
}

impl DeviceTable {
    /// Upload `table` at `precision`. Norms come from the stored (rounded) values in float64.
    pub fn upload(ctx: &Context, table: &Table, precision: Precision) -> Result<DeviceTable> {
        let caps = ctx.caps();
        let mut f16_bits = None;
        if precision == Precision::Fp16 {
            if !caps.fp16_storage {
                return Err(Error::Unsupported {
                    device: caps.name.clone(),
                    what: "16-bit storage buffers (storageBuffer16BitAccess) for an fp16 table; use fp32".into(),
                });
            }
            // Refused before any device work: a value that would round to infinity.
            f16_bits = Some(table.to_f16_bits_checked()?);
        }
        let (n, d) = (table.n(), table.d());
        let bytes = (n as u64) * (d as u64) * precision.bytes() as u64;
        if bytes > caps.max_buffer_range {
            return Err(Error::Limit(format!(
                "table of {n} × {d} {} needs a {bytes}-byte buffer; {} allows {} bytes (maxStorageBufferRange)",
                precision.name(),
                caps.name,
                caps.max_buffer_range
            )));
        }
        if n > u32::MAX as usize / 2 || d > u32::MAX as usize / 4 {
            return Err(Error::Limit(format!(
                "table of {n} × {d} exceeds 32-bit indexing"
            )));
        }
        let stored = table.as_stored(precision);
        let data = match &f16_bits {
            None => ctx.upload("table", bytemuck::cast_slice(table.data()))?,
            Some(bits) => ctx.upload("table", bytemuck::cast_slice(bits))?,
        };
        let inv_norm = ctx.upload(
            "inverse norms",
            bytemuck::cast_slice(&stored.inverse_norms()),
        )?;
        Ok(DeviceTable {
            inner: Arc::new(TableInner {
                ctx: ctx.clone(),
                data,
                inv_norm,
                n,
                d,
                precision,
            }),
        })
    }

    /// Rows N.
    pub fn n(&self) -> usize {
        self.inner.n
    }
    /// Dimension D.
    pub fn d(&self) -> usize {
        self.inner.d
    }
    /// Storage precision.
    pub fn precision(&self) -> Precision {
        self.inner.precision
    }
    /// The context the table lives on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }
    /// The stored rows (fp32 or fp16) on the device.
    pub(crate) fn data_buffer(&self) -> &Buffer {
        &self.inner.data
    }
    /// 1 / |e_x| per row on the device.
    pub(crate) fn inv_norm_buffer(&self) -> &Buffer {
        &self.inner.inv_norm
    }
}

/// What one [`ScanJob::step`] call did.
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
    pub(crate) fn add(&mut self, (steps, ns): (usize, u64)) {
        self.gpu_ns += ns;
        self.chunks.push((steps, ns));
    }
}

/// One command buffer with its fence and timestamp pair.
struct Frame {
    cb: vk::CommandBuffer,
    fence: vk::Fence,
    pending: Option<usize>, // steps it carries, while submitted and not yet waited for
}

/// A batch of diversity sequences advanced chunk by chunk on the device.
pub struct ScanJob {
    table: DeviceTable,
    opts: ScanOptions,
    starts: Vec<u32>,
    seq_len: usize,
    /// Steps submitted so far (slots 1..=submitted are recorded).
    submitted: usize,
    /// Steps known complete.
    completed: usize,
    gpu_ns: u64,
    wg: u32,
    /// The scan kernel (resolved) and its block sizes.
    kernel: ScanKernel,
    bn: usize,
    bm: usize,
    /// Workgroups of one scan dispatch over all candidate blocks.
    scan_groups: u32,
    tiles: Vec<(u32, u32)>,
    scan: Arc<Pipeline>,
    tile: Arc<Pipeline>,
    commit: Arc<Pipeline>,
    frames: Vec<Frame>,
    next_frame: usize,
    /// A submission failed with device loss: nothing more may run.
    lost: bool,
    query_pool: vk::QueryPool,
    set: Set,
    seqs: Buffer,
    // Kept alive for the descriptor set.
    _starts: Buffer,
    _state: Buffer,
    _mask: Buffer,
    _partial: Buffer,
    _cen32: Buffer,
}

pub(crate) fn spirv_for(shader: &Shader, p: Precision) -> &'static [u8] {
    match p {
        Precision::Fp32 => shader.fp32,
        Precision::Fp16 => shader.fp16,
    }
}

/// Check a push struct against the shader block it feeds.
pub(crate) fn checked_push<T>(shader: &Shader) -> Result<u32> {
    let want = std::mem::size_of::<T>() as u32;
    for spv in [shader.fp32, shader.fp16] {
        let got = spirv::push_constant_size(spv);
        if got != Some(want) {
            return Err(Error::Invalid(format!(
                "internal: push-constant block of {} is {got:?} bytes, the Rust struct {want}",
                shader.name
            )));
        }
    }
    Ok(want)
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
        let kernel = kernel.for_batch(starts.len());
        let ctx = table.context().clone();
        let caps = ctx.caps().clone();
        let (n, d) = (table.n(), table.d());
        if starts.is_empty() {
            return Err(Error::Invalid("the batch has no starts".into()));
        }
        let mut seen = vec![false; n];
        for (i, &s) in starts.iter().enumerate() {
            let s = s as usize;
            if s >= n {
                return Err(Error::Invalid(format!(
                    "start {s} (position {i}) is out of range: the table has {n} rows (0-based)"
                )));
            }
            if seen[s] {
                return Err(Error::Invalid(format!(
                    "start {s} is repeated (position {i})"
                )));
            }
            seen[s] = true;
        }
        let batch = starts.len();
        if batch > caps.max_workgroup_count as usize {
            return Err(Error::Limit(format!(
                "batch of {batch} sequences exceeds maxComputeWorkGroupCount[0] = {} on {}; use smaller batches",
                caps.max_workgroup_count, caps.name
            )));
        }
        let steps = opts.steps.unwrap_or(n - 1).min(n - 1);
        let seq_len = steps + 1;
        let wg = match opts.workgroup_size {
            Some(w) => w,
            None if crate::device::is_cpu_device(&caps) => 64,
            None => 256,
        }
        .min(caps.max_workgroup_invocations);
        if !wg.is_power_of_two() {
            return Err(Error::Invalid(format!(
                "workgroup size {wg} must be a power of two (at most {})",
                caps.max_workgroup_invocations
            )));
        }
        let mask_words = n.div_ceil(32);
        // The scan is a blocked product: (N / BN) × (S / BM) workgroups per step.
        let (bn, bm) = (kernel.block_n(), kernel.block_m(batch));
        let scan_groups = n.div_ceil(bn) * batch.div_ceil(bm);
        if scan_groups > caps.max_workgroup_count as usize {
            return Err(Error::Limit(format!(
                "N = {n} candidates × a batch of {batch} need {scan_groups} workgroups per dispatch; {} allows {} (maxComputeWorkGroupCount[0]); use smaller batches",
                caps.name, caps.max_workgroup_count
            )));
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
        if caps.max_workgroup_invocations < GEMM_WORKGROUP {
            return Err(Error::Limit(format!(
                "the scan needs workgroups of {GEMM_WORKGROUP} invocations; {} allows {} (maxComputeWorkGroupInvocations)",
                caps.name, caps.max_workgroup_invocations
            )));
        }
        let sizes = [
            ("sequence output", (batch * seq_len * 4) as u64),
            ("running sums", (batch * 2 * d * 4) as u64),
            ("chosen masks", (batch * mask_words * 4) as u64),
            ("fp32 centroids", (batch * d * 4) as u64),
            ("block winners", (batch * n.div_ceil(bn) * 8) as u64),
        ];
        for (what, bytes) in sizes {
            if bytes > caps.max_buffer_range {
                return Err(Error::Limit(format!(
                    "{what} for a batch of {batch} × {seq_len} steps needs {bytes} bytes; {} allows {} per buffer (maxStorageBufferRange); use a smaller batch or top_k",
                    caps.name, caps.max_buffer_range
                )));
            }
        }
        let need: u64 =
            sizes.iter().map(|s| s.1).sum::<u64>() + (n * d * table.precision().bytes()) as u64;
        if need > caps.memory_budget_bytes {
            return Err(Error::Limit(format!(
                "the job needs {need} bytes of device memory; {} has a budget of {}",
                caps.name, caps.memory_budget_bytes
            )));
        }

        let spec = vec![
            wg,
            d as u32,
            mask_words as u32,
            seq_len as u32,
            batch as u32,
            bm as u32,
        ];
        let mut gemm_spec = spec.clone();
        gemm_spec[0] = GEMM_WORKGROUP;
        let p = table.precision();
        let make = |shader: &Shader, push: u32, spec: &Vec<u32>| {
            ctx.pipeline(PipelineKey {
                spirv: spirv_for(shader, p),
                spec: spec.clone(),
                push_bytes: push,
            })
        };
        // The commit reduces ceil(N / BN) block winners, so it comes with the kernel.
        let (scan_sh, tile_sh, commit_sh) = match kernel {
            ScanKernel::Block128 => (
                &spirv::SCAN_BIG,
                &spirv::SCAN_BIG_TILE,
                &spirv::SCAN_BIG_COMMIT,
            ),
            _ => (&spirv::SCAN, &spirv::SCAN_TILE, &spirv::SCAN_COMMIT),
        };
        let scan = make(scan_sh, checked_push::<ScanPush>(scan_sh)?, &gemm_spec)?;
        let tile = make(tile_sh, checked_push::<TilePush>(tile_sh)?, &gemm_spec)?;
        let commit = make(commit_sh, checked_push::<CommitPush>(commit_sh)?, &spec)?;
        let init = make(
            &spirv::SCAN_INIT,
            checked_push::<InitPush>(&spirv::SCAN_INIT)?,
            &spec,
        )?;

        let starts_buf = ctx.upload("starts", bytemuck::cast_slice(starts))?;
        let state = Buffer::storage(&ctx, "running sums", sizes[1].1)?;
        let mask = Buffer::storage(&ctx, "chosen masks", sizes[2].1)?;
        let seqs = Buffer::storage(&ctx, "sequence output", sizes[0].1)?;
        let partial = Buffer::storage(&ctx, "block winners", sizes[4].1)?;
        let cen32 = Buffer::storage(&ctx, "fp32 centroids", sizes[3].1)?;

        let dev = ctx.device().clone();
        let set = Set::new(
            &ctx,
            &[
                (0, &table.inner.data),
                (1, &table.inner.inv_norm),
                (2, &starts_buf),
                (3, &state),
                (4, &mask),
                (5, &seqs),
                (6, &partial),
                (7, &cen32),
            ],
            &[],
        )?;
        // From here on the job owns what it creates: build it, and let Drop clean up on error.
        let mut job = ScanJob {
            table: table.clone(),
            opts: opts.clone(),
            starts: starts.to_vec(),
            seq_len,
            submitted: 0,
            completed: 0,
            gpu_ns: 0,
            wg,
            kernel,
            bn,
            bm,
            scan_groups: scan_groups as u32,
            tiles: Vec::new(),
            scan,
            tile,
            commit,
            frames: Vec::new(),
            next_frame: 0,
            lost: false,
            query_pool: vk::QueryPool::null(),
            set,
            seqs,
            _starts: starts_buf,
            _state: state,
            _mask: mask,
            _partial: partial,
            _cen32: cen32,
        };
        job.tiles = job.tile_ranges();
        if caps.timestamps {
            job.query_pool = unsafe {
                dev.create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(4),
                    None,
                )
            }
            .vk("vkCreateQueryPool")?;
        }
        for _ in 0..2 {
            let cb = ctx.alloc_command_buffer()?;
            let fence = match unsafe { dev.create_fence(&vk::FenceCreateInfo::default(), None) } {
                Ok(f) => f,
                Err(e) => {
                    ctx.free_command_buffer(cb);
                    return Err(Error::Vulkan {
                        call: "vkCreateFence",
                        result: e,
                    });
                }
            };
            job.frames.push(Frame {
                cb,
                fence,
                pending: None,
            });
        }
        // Step 0: starts, running sums, masks.
        let push = InitPush {
            num_items: n as u32,
            dim: d as u32,
        };
        let set = job.set.set;
        ctx.one_shot(|cb| unsafe {
            barrier(&dev, cb);
            dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, init.pipeline);
            dev.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                init.layout,
                0,
                &[set],
                &[],
            );
            dev.cmd_push_constants(
                cb,
                init.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                bytemuck::bytes_of(&push),
            );
            dev.cmd_dispatch(cb, batch as u32, 1, 1);
        })?;
        Ok(job)
    }

    /// Candidate ranges of the tiles (one range for untiled or `tile_size` 0).
    fn tile_ranges(&self) -> Vec<(u32, u32)> {
        let n = self.table.n() as u64;
        let t = match self.opts.shape {
            Shape::Untiled => 0,
            _ => self.opts.tile_size as u64,
        };
        // Tiles are whole candidate blocks of the scan (the last one may be short).
        let t = if t == 0 {
            n
        } else {
            t.div_ceil(self.bn as u64) * self.bn as u64
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

    /// Change the candidate walk for the following steps. Results do not depend on it (SPEC
    /// §Exactness 1); the `vk_compute` shim passes a tile size with every chunk.
    pub fn set_tiling(&mut self, shape: Shape, tile_size: u32) {
        self.opts.shape = shape;
        self.opts.tile_size = tile_size;
        self.tiles = self.tile_ranges();
    }

    /// Change the steps per submission for the following `step` calls (0 = all at once); the
    /// driver re-sizes chunks as steps get cheaper.
    pub fn set_chunk(&mut self, chunk: usize) {
        self.opts.chunk = chunk;
    }

    /// Steps each sequence will have when done (top_k, or N − 1).
    pub fn total_steps(&self) -> usize {
        self.seq_len - 1
    }
    /// Steps completed so far.
    pub fn steps_done(&self) -> usize {
        self.completed
    }
    /// Whether every step is computed.
    pub fn done(&self) -> bool {
        self.completed == self.total_steps()
    }
    /// The batch's starts, in order: row i of the results is the sequence of `starts()[i]`.
    pub fn starts(&self) -> &[u32] {
        &self.starts
    }
    /// Total GPU time so far, nanoseconds.
    pub fn gpu_ns(&self) -> u64 {
        self.gpu_ns
    }
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
                if self.frames[f].pending.is_some() {
                    report.add(self.finish(f)?);
                }
                self.record_and_submit(f, c)?;
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
            if self.frames[f].pending.is_some() {
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

    fn record_and_submit(&mut self, f: usize, steps: usize) -> Result<()> {
        if self.lost {
            return Err(Error::DeviceLost(format!(
                "an earlier submission of this batch of {}; the batch must be restarted",
                self.starts.len()
            )));
        }
        let ctx = self.table.context().clone();
        let dev = ctx.device();
        let cb = self.frames[f].cb;
        let first = self.submitted + 1;
        let (n, d) = (self.table.n() as u32, self.table.d() as u32);
        let batch = self.starts.len() as u32;
        let scan_groups = self.scan_groups;
        let row_blocks = (batch as usize).div_ceil(self.bm) as u32;
        let bn = self.bn;
        unsafe {
            dev.reset_command_buffer(cb, vk::CommandBufferResetFlags::empty())
                .vk("vkResetCommandBuffer")?;
            dev.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .vk("vkBeginCommandBuffer")?;
            let q = 2 * f as u32;
            if self.query_pool != vk::QueryPool::null() {
                dev.cmd_reset_query_pool(cb, self.query_pool, q, 2);
                dev.cmd_write_timestamp(
                    cb,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    self.query_pool,
                    q,
                );
            }
            // Earlier submissions (init, previous chunks) wrote what this one reads.
            barrier(dev, cb);
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
            // The winner of every sequence over all candidate blocks, then the next step.
            let commit = |slot: usize| {
                bind(&self.commit);
                push(
                    &self.commit,
                    bytemuck::bytes_of(&CommitPush {
                        num_items: n,
                        dim: d,
                        slot: slot as u32,
                    }),
                );
                dev.cmd_dispatch(cb, batch, 1, 1);
                barrier(dev, cb);
            };
            // One step per dispatch sequence, a barrier between: the shader's multi-step loop
            // (slot_count > 1) gave wrong picks on Mesa 22.3 lavapipe after a few steps.
            for slot in first..first + steps {
                match self.opts.shape {
                    Shape::Untiled | Shape::Tiled => {
                        let tile = if self.opts.shape == Shape::Untiled {
                            0
                        } else {
                            self.opts.tile_size
                        };
                        bind(&self.scan);
                        push(
                            &self.scan,
                            bytemuck::bytes_of(&ScanPush {
                                num_items: n,
                                dim: d,
                                start_slot: slot as u32,
                                slot_count: 1,
                                tile_size: tile,
                            }),
                        );
                        dev.cmd_dispatch(cb, scan_groups, 1, 1);
                        barrier(dev, cb);
                    }
                    Shape::PerTile => {
                        bind(&self.tile);
                        for &(b, e) in &self.tiles {
                            push(
                                &self.tile,
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
                commit(slot);
            }
            if self.query_pool != vk::QueryPool::null() {
                dev.cmd_write_timestamp(
                    cb,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    self.query_pool,
                    q + 1,
                );
            }
            dev.end_command_buffer(cb).vk("vkEndCommandBuffer")?;
        }
        ctx.submit(cb, self.frames[f].fence)?;
        self.frames[f].pending = Some(steps);
        self.submitted += steps;
        Ok(())
    }

    /// Wait for frame `f`, account its steps and GPU time: (steps, ns).
    fn finish(&mut self, f: usize) -> Result<(usize, u64)> {
        let Some(steps) = self.frames[f].pending.take() else {
            return Ok((0, 0));
        };
        let ctx = self.table.context().clone();
        let dev = ctx.device();
        let what = format!(
            "scan steps {}..{} of a batch of {}",
            self.completed + 1,
            self.completed + steps,
            self.starts.len()
        );
        ctx.wait(self.frames[f].fence, &what)?;
        unsafe { dev.reset_fences(&[self.frames[f].fence]) }.vk("vkResetFences")?;
        if let Some(n) = injected_loss() {
            self.lost = true;
            return Err(Error::DeviceLost(format!(
                "{what} (injected by {ENV_FAIL_AFTER_CHUNKS}={n})"
            )));
        }
        self.completed += steps;
        let mut ns = 0;
        if self.query_pool != vk::QueryPool::null() {
            let mut t = [0u64; 2];
            unsafe {
                dev.get_query_pool_results(
                    self.query_pool,
                    2 * f as u32,
                    &mut t,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            }
            .vk("vkGetQueryPoolResults")?;
            ns = ctx.ticks_to_ns(t[0], t[1]);
        }
        self.gpu_ns += ns;
        Ok((steps, ns))
    }

    /// Length of each sequence computed so far (steps done + the start).
    pub fn sequence_len(&self) -> usize {
        self.completed + 1
    }

    /// Every sequence so far, row-major: `starts().len()` rows of [`ScanJob::sequence_len`]
    /// 0-based item indices; row i is the sequence of `starts()[i]`.
    pub fn sequences_flat(&self) -> Result<Vec<u32>> {
        let ctx = self.table.context();
        let bytes = ctx.download(&self.seqs, 0, (self.starts.len() * self.seq_len * 4) as u64)?;
        let all: &[u32] = bytemuck::cast_slice(&bytes);
        let len = self.sequence_len();
        if len == self.seq_len {
            return Ok(all.to_vec());
        }
        Ok(all
            .chunks_exact(self.seq_len)
            .flat_map(|r| r[..len].iter().copied())
            .collect())
    }

    /// Steps `from..to` (entries of each sequence; `to` at most [`ScanJob::sequence_len`]) of
    /// every sequence, row-major (`starts().len()` rows of `to - from`), downloaded in one
    /// submission. The driver appends these to its checkpoint after each chunk.
    pub fn sequence_columns(&self, from: usize, to: usize) -> Result<Vec<u32>> {
        download_columns(
            self.table.context(),
            &self.seqs,
            (self.starts.len(), self.seq_len, self.sequence_len()),
            from,
            to,
        )
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
        let (n, d) = (dtable.n(), dtable.d());
        if table.n() != n || table.d() != d {
            return Err(Error::Invalid(format!(
                "resume: the host table is {} × {}, the device table {n} × {d}",
                table.n(),
                table.d()
            )));
        }
        let mut job = ScanJob::new(dtable, starts, opts)?;
        if len == 0 || len > job.seq_len || prefixes.len() != starts.len() * len {
            return Err(Error::Invalid(format!(
                "resume: {} entries for {} sequences of {len} (1..={} each)",
                prefixes.len(),
                starts.len(),
                job.seq_len
            )));
        }
        let stored = table.as_stored(dtable.precision());
        let words = n.div_ceil(32);
        let mut state = vec![0f32; starts.len() * 2 * d];
        let mut cen = vec![0f32; starts.len() * d];
        let mut mask = vec![0u32; starts.len() * words];
        for (i, row) in prefixes.chunks_exact(len).enumerate() {
            if row[0] != starts[i] {
                return Err(Error::Invalid(format!(
                    "resume: sequence {i} begins with {}, its start is {}",
                    row[0], starts[i]
                )));
            }
            let (hi, lo) = state[i * 2 * d..(i + 1) * 2 * d].split_at_mut(d);
            let m = &mut mask[i * words..(i + 1) * words];
            for (k, &p) in row.iter().enumerate() {
                let p = p as usize;
                if p >= n || m[p >> 5] & (1 << (p & 31)) != 0 {
                    return Err(Error::Invalid(format!(
                        "resume: sequence {i} has entry {p} at step {k}: out of range or repeated"
                    )));
                }
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
        let ctx = dtable.context().clone();
        ctx.write_regions(&job._state, &[(0, bytemuck::cast_slice(&state))])?;
        ctx.write_regions(&job._cen32, &[(0, bytemuck::cast_slice(&cen))])?;
        ctx.write_regions(&job._mask, &[(0, bytemuck::cast_slice(&mask))])?;
        let rows: Vec<(u64, &[u8])> = prefixes
            .chunks_exact(len)
            .enumerate()
            .map(|(i, r)| (((i * job.seq_len) * 4) as u64, bytemuck::cast_slice(r)))
            .collect();
        ctx.write_regions(&job.seqs, &rows)?;
        job.submitted = len - 1;
        job.completed = len - 1;
        Ok(job)
    }

    /// Every sequence so far, one `Vec` per start.
    pub fn sequences(&self) -> Result<Vec<Vec<u32>>> {
        let len = self.sequence_len();
        Ok(self
            .sequences_flat()?
            .chunks_exact(len)
            .map(|r| r.to_vec())
            .collect())
    }
}

/// Entries `from..to` of every row of a sequence buffer of `rows` rows of `stride` entries, of
/// which `len` are computed so far: row-major, `rows` × (`to` − `from`), one submission.
pub(crate) fn download_columns(
    ctx: &Context,
    seqs: &Buffer,
    (rows, stride, len): (usize, usize, usize),
    from: usize,
    to: usize,
) -> Result<Vec<u32>> {
    if from > to || to > len {
        return Err(Error::Invalid(format!(
            "columns {from}..{to} of sequences that have {len} entries so far"
        )));
    }
    if from == 0 && to == stride {
        let bytes = ctx.download(seqs, 0, (rows * stride * 4) as u64)?;
        return Ok(bytemuck::cast_slice(&bytes).to_vec());
    }
    let regions: Vec<(u64, u64)> = (0..rows)
        .map(|s| (((s * stride + from) * 4) as u64, ((to - from) * 4) as u64))
        .collect();
    let bytes = ctx.download_regions(seqs, &regions)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

impl Drop for ScanJob {
    fn drop(&mut self) {
        let ctx = self.table.context().clone();
        let dev = ctx.device();
        for f in 0..self.frames.len() {
            if self.frames[f].pending.is_some() {
                let _ = ctx.wait(self.frames[f].fence, "drop");
            }
        }
        unsafe {
            for fr in self.frames.drain(..) {
                dev.destroy_fence(fr.fence, None);
                ctx.free_command_buffer(fr.cb);
            }
            if self.query_pool != vk::QueryPool::null() {
                dev.destroy_query_pool(self.query_pool, None);
            }
        }
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
