//! The recording of a scan job's work: step 0, and a chunk of steps in any shape (untiled,
//! in-shader tiles, one dispatch per tile) with the barriers between dispatches, plus the
//! filter's probes. Records into the job's command buffers; allocates nothing. May touch the job's
//! plan, pipelines and buffers, push constants and the barriers of `submit.rs`.

use super::plan::Plan;
use super::push::{CommitPush, FTablePush, InitPush, ScanPush, TilePush};
use super::state::{Pipelines, State};
use super::{ScanKernel, ScanOptions, Shape};
use crate::device::{Context, Pipeline};
use crate::device_table::DeviceTable;
use crate::error::Result;
use crate::spirv;
use crate::submit::{barrier, bind, Set};
use ash::vk;

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
            self.dispatch(dev, cb, prep, &push, self.batch);
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
        let pipe = ctx.pipeline_for::<ScanPush>(sh, table.precision(), plan_spec)?;
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
            self.dispatch(dev, cb, &pipe, &push, 1);
        })
    }

    /// Records `pipe` bound with this recorder's descriptor set and `push`, dispatched over
    /// `groups` workgroups.
    ///
    /// # Safety
    /// `cb` is recording, on the device of `pipe`.
    unsafe fn dispatch<P: bytemuck::Pod>(
        &self,
        dev: &ash::Device,
        cb: vk::CommandBuffer,
        pipe: &Pipeline,
        push: &P,
        groups: u32,
    ) {
        bind(dev, cb, pipe, self.set.set, bytemuck::bytes_of(push));
        dev.cmd_dispatch(cb, groups, 1, 1);
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
                self.dispatch(dev, cb, &self.pipes.scan, &push, self.scan_groups);
            } else {
                let push = CommitPush {
                    num_items: self.n,
                    dim: self.d,
                    slot,
                };
                self.dispatch(dev, cb, &self.pipes.commit, &push, self.batch);
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
                    let tile = opts.shape.tile(opts.tile_size);
                    let push = ScanPush {
                        num_items: n,
                        dim: d,
                        start_slot: slot as u32,
                        slot_count: 1,
                        tile_size: tile,
                    };
                    self.dispatch(dev, cb, &self.pipes.scan, &push, self.scan_groups);
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
            let push = CommitPush {
                num_items: n,
                dim: d,
                slot: slot as u32,
            };
            self.dispatch(dev, cb, &self.pipes.commit, &push, batch);
            barrier(dev, cb);
        }
    }
}

/// Candidate ranges of the tiles over `n` candidates for `shape` and `tile_size` (one range for
/// untiled or `tile_size` 0); tiles are whole candidate blocks of `bn` (the last may be short).
pub(super) fn tile_ranges(n: usize, shape: Shape, tile_size: u32, bn: usize) -> Vec<(u32, u32)> {
    let n = n as u64;
    let t = shape.tile(tile_size) as u64;
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
