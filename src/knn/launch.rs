//! What the three selection recorders share: the k-NN pipelines specialised by the [`Plan`]
//! (each push block, from `push`, checked against its shader), and [`Launch`], which records
//! the blocked distance product and submits.
//! It may touch the plan, the push blocks, the device's pipelines, the compiled shaders and
//! command submission; no buffer of its own.

use super::plan::Plan;
use super::push::{DistPush, GatherPush, MergePush, SortPush, WarpPush};
use crate::device::{Context, Pipeline};
use crate::error::Result;
use crate::spirv;
use crate::submit::{bind, Submitter};
use crate::table::Precision;
use ash::vk;
use std::sync::Arc;

/// Queries and table rows of one workgroup of the blocked distance product (`knn_dist.comp`).
pub(super) const DIST_BLOCK: usize = 128;

/// The k-NN pipelines of one call: the distance product, the chunk sort (the plan's chunk,
/// workgroup and subgroup choice), the merge, and WarpSelect (its bucket) when it runs.
pub(super) struct Pipelines {
    pub dist: Arc<Pipeline>,
    pub sort: Arc<Pipeline>,
    pub merge: Arc<Pipeline>,
    pub warp: Option<Arc<Pipeline>>,
    pub gather: Arc<Pipeline>,
}

impl Pipelines {
    pub fn new(ctx: &Context, prec: Precision, plan: &Plan) -> Result<Pipelines> {
        let dist = ctx.pipeline_for::<DistPush>(&spirv::KNN_DIST, prec, &[])?;
        let sort = ctx.pipeline_for::<SortPush>(
            &spirv::KNN_SORT,
            prec,
            &[
                plan.sort_wg as u32,
                plan.sort_regs as u32,
                plan.subgroups as u32,
            ],
        )?;
        let warp = match plan.path {
            super::KnnPath::WarpSelect {
                k_bucket,
                thread_queue,
                ..
            } => Some(ctx.pipeline_for::<WarpPush>(
                &spirv::KNN_WARP,
                prec,
                &[
                    plan.warp_wg as u32,
                    plan.sg as u32,
                    k_bucket as u32,
                    thread_queue as u32,
                ],
            )?),
            _ => None,
        };
        let merge = ctx.pipeline_for::<MergePush>(&spirv::KNN_MERGE, prec, &[])?;
        let gather = ctx.pipeline_for::<GatherPush>(&spirv::KNN_GATHER, prec, &[])?;
        Ok(Pipelines {
            dist,
            sort,
            merge,
            warp,
            gather,
        })
    }
}

/// Where a [`Launch`] puts its commands: submitted (and waited for) group by group, or recorded
/// into a command buffer another caller submits (a barrier before each group, as a submission
/// starts with one).
pub(super) enum Sink<'a> {
    Submit(&'a std::cell::RefCell<Submitter>),
    Record(vk::CommandBuffer),
}

/// One query tile's recording context: the plan, the pipelines, the scratch's descriptor set,
/// the sink, and the tile's first query and size.
pub(super) struct Launch<'a> {
    pub plan: &'a Plan,
    pub pipes: &'a Pipelines,
    pub set: vk::DescriptorSet,
    pub sub: Sink<'a>,
    pub dev: &'a ash::Device,
    /// The metric's shader code.
    pub metric: u32,
    pub q0: usize,
    pub qn: usize,
}

impl Launch<'_> {
    /// A distance-product push block for this query tile, its range fields zero.
    pub fn dist_push(&self) -> DistPush {
        DistPush {
            dim: self.plan.d as u32,
            q0: self.q0 as u32,
            t0: 0,
            cols: 0,
            off: 0,
            pad_to: 0,
            stride: 0,
            dst: 0,
            metric: self.metric,
            qn: self.qn as u32,
        }
    }

    /// Records the blocked distance product over `entries` entries of the rows (`dp.pad_to`
    /// rounded up to whole blocks) of this query tile.
    ///
    /// # Safety
    /// `cb` is recording.
    pub unsafe fn record_dist(&self, cb: vk::CommandBuffer, dp: &DistPush, entries: usize) {
        bind(
            self.dev,
            cb,
            &self.pipes.dist,
            self.set,
            bytemuck::bytes_of(dp),
        );
        self.dev.cmd_dispatch(
            cb,
            entries.div_ceil(DIST_BLOCK) as u32,
            self.qn.div_ceil(DIST_BLOCK) as u32,
            1,
        );
    }

    /// Binds `pipe` with `push` and dispatches `groups` (x, y) workgroups.
    ///
    /// # Safety
    /// `cb` is recording.
    pub unsafe fn dispatch<P: bytemuck::Pod>(
        &self,
        cb: vk::CommandBuffer,
        pipe: &Pipeline,
        push: &P,
        groups: (u32, u32),
    ) {
        bind(self.dev, cb, pipe, self.set, bytemuck::bytes_of(push));
        self.dev.cmd_dispatch(cb, groups.0, groups.1, 1);
    }

    /// Records `f`, submits and waits; GPU nanoseconds. Recording into another caller's
    /// command buffer: a barrier, then `f`; 0 ns (the caller times its submission).
    pub fn run(&self, what: &str, f: impl FnOnce(vk::CommandBuffer)) -> Result<u64> {
        match &self.sub {
            Sink::Submit(sub) => sub.borrow_mut().run(what, f),
            Sink::Record(cb) => {
                unsafe { crate::submit::barrier(self.dev, *cb) };
                f(*cb);
                Ok(0)
            }
        }
    }
}
