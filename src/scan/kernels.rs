//! What a scan job runs on its device: the plan of a job checked against the device's limits
//! ([`Plan`]), its pipelines, its own buffers, and the recording of a chunk of steps
//! ([`Recorder`]) — the push constants each dispatch carries included. [`ScanJob`](super::ScanJob)
//! puts these together and schedules the chunks.

use super::{ScanKernel, ScanOptions, Shape, GEMM_WORKGROUP};
use crate::batch::{check_starts, sequence_length, Batch};
use crate::device::{Context, Pipeline, PipelineKey};
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
}

impl Plan {
    /// Check `starts` and `opts` against `table` and its device; the sizes of the job.
    pub(super) fn new(
        table: &DeviceTable,
        starts: &[u32],
        opts: &ScanOptions,
        kernel: ScanKernel,
    ) -> Result<Plan> {
        let kernel = kernel.for_batch(starts.len());
        let caps = table.context().caps();
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
            Some(w) => w,
            None if crate::device::is_cpu_device(caps) => 64,
            None => 256,
        }
        .min(caps.max_workgroup_invocations);
        if !wg.is_power_of_two() {
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
        let sizes = buffer_bytes(n, d, seq_len, bn, batch);
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
        Ok(Plan {
            kernel,
            batch,
            seq_len,
            wg,
            bn,
            bm,
            scan_groups: scan_groups as u32,
            sizes,
        })
    }
}

/// The scan's pipelines for one plan: step 0, the candidate scan (one dispatch or per tile) and
/// the commit that reduces the block winners of a step.
pub(super) struct Pipelines {
    init: Arc<Pipeline>,
    scan: Arc<Pipeline>,
    tile: Arc<Pipeline>,
    commit: Arc<Pipeline>,
}

impl Pipelines {
    /// Create (or take from the context's cache) the pipelines `plan` runs on `table`.
    pub(super) fn new(table: &DeviceTable, plan: &Plan) -> Result<Pipelines> {
        let ctx = table.context();
        let spec = vec![
            plan.wg,
            table.d() as u32,
            table.n().div_ceil(32) as u32,
            plan.seq_len as u32,
            plan.batch as u32,
            plan.bm as u32,
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
        let (scan_sh, tile_sh, commit_sh) = match plan.kernel {
            ScanKernel::Block128 => (
                &spirv::SCAN_BIG,
                &spirv::SCAN_BIG_TILE,
                &spirv::SCAN_BIG_COMMIT,
            ),
            _ => (&spirv::SCAN, &spirv::SCAN_TILE, &spirv::SCAN_COMMIT),
        };
        Ok(Pipelines {
            scan: make(scan_sh, checked_push::<ScanPush>(scan_sh)?, &gemm_spec)?,
            tile: make(tile_sh, checked_push::<TilePush>(tile_sh)?, &gemm_spec)?,
            commit: make(commit_sh, checked_push::<CommitPush>(commit_sh)?, &spec)?,
            init: make(
                &spirv::SCAN_INIT,
                checked_push::<InitPush>(&spirv::SCAN_INIT)?,
                &spec,
            )?,
        })
    }
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
        };
        let set = Set::new(
            ctx,
            &[
                (0, table.data_buffer()),
                (1, table.inv_norm_buffer()),
                (2, batch.starts_buffer()),
                (3, &state.sums),
                (4, &state.mask),
                (5, batch.seqs_buffer()),
                (6, &state._partial),
                (7, &state.cen32),
            ],
            &[],
        )?;
        Ok((state, set))
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
        }
    }

    /// Step 0 on the device, in one submission: the starts into column 0, the running sums,
    /// the masks.
    pub(super) fn init(&self, ctx: &Context) -> Result<()> {
        let dev = ctx.device();
        let push = InitPush {
            num_items: self.n,
            dim: self.d,
        };
        let (init, set) = (&self.pipes.init, self.set.set);
        ctx.one_shot(|cb| unsafe {
            barrier(dev, cb);
            bind(dev, cb, init, set, bytemuck::bytes_of(&push));
            dev.cmd_dispatch(cb, self.batch, 1, 1);
        })
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
