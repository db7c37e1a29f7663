//! The WarpSelect recorder (`knn_warp.comp`): per table tile, the blocked product writes the
//! tile's keys into A (unless the keys are fused into the selection) and WarpSelect folds them
//! into the running queues in B; the queues end sorted in B.
//! It may touch [`Launch`](super::launch::Launch), the push blocks and the barrier; nothing
//! outside the k-NN room.

use super::launch::Launch;
use super::push::{DistPush, Side, WarpPush};
use crate::error::{Error, Result};
use crate::submit::barrier;

/// WarpSelect table tiles recorded in one submission.
const WARP_TILES_PER_SUBMIT: usize = 16;

/// Records and runs WarpSelect for one query tile (`fused`: keys computed in the selection);
/// GPU nanoseconds and where the k best are.
pub(super) fn record(l: &Launch, fused: bool) -> Result<(u64, Side)> {
    let plan = l.plan;
    let Some(wp) = &l.pipes.warp else {
        return Err(Error::Invalid(
            "internal: no WarpSelect pipeline for the WarpSelect path".into(),
        ));
    };
    let (n, table_tile) = (plan.n, plan.table_tile);
    // Up to WARP_TILES_PER_SUBMIT tiles a submission, ordered by barriers (A is reused).
    let per_group = plan.warp_wg / plan.sg;
    let tiles: Vec<usize> = (0..n).step_by(table_tile).collect();
    let mut gpu_ns = 0;
    for group in tiles.chunks(WARP_TILES_PER_SUBMIT) {
        gpu_ns += l.run("k-NN WarpSelect", |cb| unsafe {
            for (i, &t0) in group.iter().enumerate() {
                let cols = table_tile.min(n - t0);
                if i > 0 {
                    barrier(l.dev, cb);
                }
                if !fused {
                    let dp = DistPush {
                        t0: t0 as u32,
                        cols: cols as u32,
                        pad_to: cols as u32,
                        stride: table_tile as u32,
                        dst: 2,
                        ..l.dist_push()
                    };
                    l.record_dist(cb, &dp, cols);
                    barrier(l.dev, cb);
                }
                let push = WarpPush {
                    dim: plan.d as u32,
                    q0: l.q0 as u32,
                    qn: l.qn as u32,
                    t0: t0 as u32,
                    cols: cols as u32,
                    first: (t0 == 0) as u32,
                    stride: plan.stride as u32,
                    metric: l.metric,
                    fused: fused as u32,
                    a_stride: table_tile as u32,
                };
                l.dispatch(cb, wp, &push, (l.qn.div_ceil(per_group) as u32, 1));
            }
        })?;
    }
    Ok((gpu_ns, Side::B))
}
