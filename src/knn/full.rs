//! The full-ranking recorder (`knn_sort.comp` then `knn_merge.comp`): every key of a query's
//! row (padded with (+inf, NO_ID) to P, a whole number of chunks) into A; each chunk sorted into
//! B by one workgroup; then merge rounds of doubling run widths, B ↔ A, until one run is left.
//! It may touch [`Launch`](super::launch::Launch), the push blocks and the barrier; nothing
//! outside the k-NN room.

use super::launch::Launch;
use super::push::{DistPush, MergePush, Side, SortPush};
use crate::error::Result;
use crate::submit::barrier;

/// Entries one `knn_merge.comp` workgroup places.
const MERGE_GROUP: usize = 256;

/// The merge rounds that turn sorted runs of `chunk` entries on B into one sorted row of
/// `padded` entries: each round's push block, and the side that holds the result.
pub(super) fn rounds(chunk: usize, padded: usize) -> (Vec<MergePush>, Side) {
    let mut cur = Side::B;
    let mut out = Vec::new();
    let mut width = chunk;
    while width < padded {
        out.push(MergePush {
            stride: padded as u32,
            len: padded as u32,
            width: width as u32,
            from_b: cur as u32,
        });
        cur = cur.other();
        width *= 2;
    }
    (out, cur)
}

/// Records and runs the full ranking (rows padded to `padded`) for one query tile; GPU
/// nanoseconds and where the ranking is.
pub(super) fn record(l: &Launch, padded: usize) -> Result<(u64, Side)> {
    let (p, chunk) = (padded, l.plan.chunk);
    let dp = DistPush {
        t0: 0,
        cols: l.plan.n as u32,
        off: 0,
        pad_to: p as u32,
        stride: p as u32,
        dst: Side::A as u32,
        ..l.dist_push()
    };
    let sort = SortPush {
        len: p as u32,
        src_stride: p as u32,
        dst_stride: p as u32,
        keep: chunk as u32,
        flip: Side::A as u32,
    };
    let (merges, side) = rounds(chunk, p);
    let qn = l.qn as u32;
    let gpu_ns = l.run("k-NN full ranking", |cb| unsafe {
        l.record_dist(cb, &dp, p);
        barrier(l.dev, cb);
        l.dispatch(cb, &l.pipes.sort, &sort, ((p / chunk) as u32, qn));
        for mp in &merges {
            barrier(l.dev, cb);
            let groups = p.div_ceil(MERGE_GROUP) as u32;
            l.dispatch(cb, &l.pipes.merge, mp, (groups, qn));
        }
    })?;
    Ok((gpu_ns, side))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knn_full_rounds_double_to_the_padded_row() {
        let (r, side) = rounds(4096, 4 * 4096);
        let widths: Vec<u32> = r.iter().map(|m| m.width).collect();
        assert_eq!(widths, [4096, 8192]);
        assert_eq!((r[0].from_b, r[1].from_b), (1, 0));
        assert_eq!(side, Side::B);
        // Three chunks: the last run is short, still two rounds.
        assert_eq!(rounds(4096, 3 * 4096).0.len(), 2);
        // One chunk: sorted already, on B.
        let (r, side) = rounds(4096, 4096);
        assert!(r.is_empty());
        assert_eq!(side, Side::B);
    }
}
