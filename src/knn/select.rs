//! The tiled selection recorder (`knn_sort.comp` as selection passes): per table tile, the
//! blocked product appends the tile's keys to each query's running k best, and sort passes
//! shrink the row — every chunk of S pairs sorted and its first k kept — until one chunk is
//! left, which holds the k best sorted. The row moves A ↔ B pass by pass.
//! It may touch [`Launch`](super::launch::Launch), the push blocks and the barrier; nothing
//! outside the k-NN room.

use super::launch::Launch;
use super::push::{DistPush, Side, SortPush};
use crate::error::Result;
use crate::submit::barrier;

/// The sort passes that shrink a row of `len` candidates on `from` to the k best (`keep` = k,
/// chunks of `chunk` pairs, rows of `stride` entries): each pass's push block and chunk count,
/// and the side that holds the result.
pub(super) fn passes(
    mut len: usize,
    chunk: usize,
    keep: usize,
    stride: usize,
    from: Side,
) -> (Vec<(SortPush, u32)>, Side) {
    let mut cur = from;
    let mut out = Vec::new();
    loop {
        let chunks = len.div_ceil(chunk);
        out.push((
            SortPush {
                len: len as u32,
                src_stride: stride as u32,
                dst_stride: stride as u32,
                keep: keep as u32,
                flip: cur as u32,
            },
            chunks as u32,
        ));
        cur = cur.other();
        len = chunks * keep;
        if chunks == 1 {
            return (out, cur);
        }
    }
}

/// Records and runs the tiled selection (chunks of `chunk` pairs) for one query tile; GPU
/// nanoseconds and where the k best are.
pub(super) fn record(l: &Launch, chunk: usize) -> Result<(u64, Side)> {
    let plan = l.plan;
    let (n, ke, stride) = (plan.n, plan.ke, plan.stride);
    let mut cur = Side::A;
    let mut have = 0usize;
    let mut gpu_ns = 0;
    let mut t0 = 0;
    while t0 < n {
        let cols = plan.table_tile.min(n - t0);
        let dp = DistPush {
            t0: t0 as u32,
            cols: cols as u32,
            off: have as u32,
            pad_to: cols as u32,
            stride: stride as u32,
            dst: cur as u32,
            ..l.dist_push()
        };
        let (sorts, next) = passes(have + cols, chunk, ke, stride, cur);
        gpu_ns += l.run("k-NN selection", |cb| unsafe {
            l.record_dist(cb, &dp, cols);
            for (sp, chunks) in &sorts {
                barrier(l.dev, cb);
                l.dispatch(cb, &l.pipes.sort, sp, (*chunks, l.qn as u32));
            }
        })?;
        cur = next;
        have = ke;
        t0 += cols;
    }
    Ok((gpu_ns, cur))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knn_select_passes_shrink_to_one_chunk() {
        // 10 best of 5,000 candidates in chunks of 256: 20 chunks → 200 → 1.
        let (p, side) = passes(5000, 256, 10, 6000, Side::A);
        let counts: Vec<u32> = p.iter().map(|(_, c)| *c).collect();
        assert_eq!(counts, [20, 1]);
        assert_eq!((p[0].0.len, p[1].0.len), (5000, 200));
        assert_eq!((p[0].0.flip, p[1].0.flip), (0, 1));
        assert_eq!(side, Side::A);
        // One chunk: one pass, the result on the other side.
        let (p, side) = passes(100, 256, 10, 356, Side::B);
        assert_eq!(p.len(), 1);
        assert_eq!(side, Side::A);
    }
}
