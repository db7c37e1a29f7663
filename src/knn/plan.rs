//! The plan of one k-NN call, computed before any Vulkan object exists: from the device's
//! [`Capabilities`], the table's N × D, the number of queries and the [`KnnOptions`], which
//! selection path runs (the rule is in the module docs of [`crate::knn`](mod@super)), its
//! chunk, workgroup and k bucket, the table and query tiles, the scratch strides, and every
//! refusal (an unsupported forced path, a loop budget, a buffer range, a workgroup count). A
//! pure function of its inputs, so the planner is tested without a device (Faiss plans its tiles
//! the same way, `chooseTileSize`, apart from the kernels).
//! It may touch the device's [`Capabilities`] (a value, with its loop budget) and
//! [`crate::error`]; no Vulkan object.

use super::{warp_bucket, KnnOptions, KnnPath, MAX_WARP_K, MAX_WARP_REGS};
use crate::device::{check_loop_budget, loop_budget, Capabilities};
use crate::error::{Error, Result};

/// Smallest chunk the selection passes sort (pairs).
const MIN_CHUNK: usize = 256;
/// Largest chunk (pairs) a workgroup sorts (also bounded by shared memory: 8 bytes a pair).
const MAX_CHUNK: usize = 4096;
/// Table rows per WarpSelect tile at most by default (the blocked product's keys of a query
/// tile × this many rows are staged in the A scratch) …
const WARP_TABLE_TILE: usize = 1 << 18;
/// … and at least …
const WARP_MIN_TILE: usize = 1 << 12;
/// … chosen so that this many queries (one subgroup each) fit a query tile.
const WARP_QUERIES: usize = 16_384;
/// Scratch bytes per query tile at most (on top of `maxStorageBufferRange` per buffer).
const MAX_SCRATCH: u64 = 1 << 30;
/// Queries a tile at most (the sort and merge passes put a query in workgroup y).
pub(crate) const MAX_QUERY_TILE: usize = 65_535;
/// Dims `knn_dist.comp` stages at a time (its `BK`).
const DIST_BK: u64 = 8;

/// Everything one k-NN call runs with (see [`plan`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Table rows (N).
    pub n: usize,
    /// Dimension (D).
    pub d: usize,
    /// Pairs a query the device computes: min(k, N); the rest of k is padding.
    pub ke: usize,
    /// The selection that runs.
    pub path: KnnPath,
    /// Whether compare-exchanges below the subgroup size run by shuffles.
    pub subgroups: bool,
    /// The device's subgroup size (1 when it reports none).
    pub sg: usize,
    /// Pairs one `knn_sort.comp` workgroup sorts (S = `sort_wg` × `sort_regs`).
    pub chunk: usize,
    /// Workgroup size of `knn_sort.comp`.
    pub sort_wg: usize,
    /// Pairs a lane of `knn_sort.comp` holds in registers.
    pub sort_regs: usize,
    /// Workgroup size of `knn_warp.comp` (several subgroups, one query each).
    pub warp_wg: usize,
    /// Table rows a tile (all N on the full-ranking path).
    pub table_tile: usize,
    /// Entries a query's row in B (and in A but on the WarpSelect path).
    pub stride: usize,
    /// Entries a query in A's keys (WarpSelect: the tile's keys; fused: none).
    pub a_keys: usize,
    /// Entries a query in A's ids (none on the WarpSelect path: a tile's ids are its rows).
    pub a_ids: usize,
    /// Queries a tile.
    pub query_tile: usize,
}

impl Plan {
    /// Bytes of the scratch buffers (A's keys, A's ids, B's keys = B's ids) for one query tile
    /// (at least 16, so that no buffer is empty).
    pub fn scratch_bytes(&self) -> (u64, u64, u64) {
        let bytes = |entries: usize| ((self.query_tile * entries * 4) as u64).max(16);
        (
            bytes(self.a_keys),
            bytes(self.a_ids),
            (self.query_tile * self.stride * 4) as u64,
        )
    }
}

/// The largest chunk (pairs) one workgroup sorts on a device with these capabilities: a power
/// of two with 8 bytes a pair in shared memory, at most 4,096.
pub(crate) fn chunk_limit(caps: &Capabilities) -> usize {
    let by_shared = (caps.shared_memory_bytes as usize / 8).max(2);
    let p = 1usize << (usize::BITS - 1 - by_shared.leading_zeros());
    p.min(MAX_CHUNK)
}

/// The largest k the WarpSelect path takes on a device with these capabilities (0 without
/// subgroup operations or with a subgroup size that is not a power of two).
pub(crate) fn warp_k_limit(caps: &Capabilities) -> usize {
    let sg = caps.subgroup_size as usize;
    if !caps.subgroup_arithmetic || !sg.is_power_of_two() {
        return 0;
    }
    MAX_WARP_K.min(MAX_WARP_REGS * sg)
}

/// Loop iterations one invocation of `knn_dist.comp` runs for dimension `d`: a stage loop of
/// ⌈d / 8⌉ plus the partial stage's loop (the full stages' loops are unrolled).
pub(crate) fn dist_loop_iterations(d: usize) -> u64 {
    (d as u64).div_ceil(DIST_BK) + DIST_BK
}

/// Loop iterations one subgroup of `knn_warp.comp` runs over a range of `cols` table rows
/// (bucket `kb`, thread queue `tq`, subgroup size `sg`, dimension `d`), counted from above:
/// one per SG rows (plus the key's loop over d when `fused`), and per merge of the thread
/// queues its bitonic sort (log₂(SG·T) stages of up to log₂(SG·T) steps) and the queue's
/// merge (log₂ K steps). A merge needs some lane's queue full: at most one per T rows a lane,
/// and one at the end.
pub(crate) fn warp_loop_iterations(
    cols: usize,
    sg: usize,
    kb: usize,
    tq: usize,
    d: usize,
    fused: bool,
) -> u64 {
    let lg = |x: usize| x.max(1).trailing_zeros() as u64;
    let outer = cols.div_ceil(sg.max(1)) as u64;
    let per_row = 1 + if fused { d as u64 + 1 } else { 0 };
    let l = lg(sg * tq);
    let merge = l + l * (l + 1) / 2 + lg(kb) + 2;
    let merges = outer / tq.max(1) as u64 + 2;
    outer * per_row + merges * merge + 8
}

/// The most table rows one WarpSelect dispatch may take within the device's loop budget
/// ([`crate::device::loop_budget`]; no bound on devices without a loop cap), at least one
/// subgroup's worth; `None` when even that is over the budget.
pub(crate) fn warp_rows_in_budget(
    caps: &Capabilities,
    sg: usize,
    kb: usize,
    tq: usize,
    d: usize,
    fused: bool,
) -> Option<usize> {
    let budget = loop_budget(caps);
    let fits = |cols: usize| warp_loop_iterations(cols, sg, kb, tq, d, fused) <= budget;
    if !fits(sg) {
        return None;
    }
    // The largest whole number of subgroups' rows that fits (iterations grow with cols).
    let (mut lo, mut hi) = (1usize, 1usize << 40);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid * sg) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo.saturating_mul(sg))
}

/// Whether the k-selection uses subgroup operations: as `opts.subgroups` asks (refused where
/// the device has none), else where the device has them.
fn subgroups(caps: &Capabilities, opts: &KnnOptions) -> Result<bool> {
    match opts.subgroups {
        Some(true) if !caps.subgroup_arithmetic => Err(Error::Unsupported {
            device: caps.name.clone(),
            what: "subgroup operations for the k-selection (or DIVERSITY_DISABLE=subgroups is set)"
                .into(),
        }),
        Some(s) => Ok(s),
        None => Ok(caps.subgroup_arithmetic),
    }
}

/// Whether the WarpSelect path runs for the bucket `kb` at subgroup size `sg` with `warp_wg`
/// invocations: as `opts.warp_select` asks (refused where it cannot), else wherever it can.
fn warp_select(
    caps: &Capabilities,
    opts: &KnnOptions,
    use_sg: bool,
    (kb, sg, warp_wg): (usize, usize, usize),
) -> Result<bool> {
    let k = opts.k;
    let warp_ok = use_sg
        && !opts.full_ranking
        && sg.is_power_of_two()
        && kb <= MAX_WARP_K
        && kb / sg <= MAX_WARP_REGS
        && warp_wg <= caps.max_workgroup_invocations as usize;
    match opts.warp_select {
        Some(true) if !warp_ok => Err(Error::Unsupported {
            device: caps.name.clone(),
            what: format!(
                "the WarpSelect k-NN path for k = {k} (needs subgroup operations, a \
                 power-of-two subgroup size, k ≤ {MAX_WARP_K} and ≤ {MAX_WARP_REGS} × the subgroup size, no full ranking)"
            ),
        }),
        Some(w) => Ok(w),
        None => Ok(warp_ok),
    }
}

/// The plan of a k-NN call of `nq` queries (checked: [`super::check_queries`]) against a table
/// of `n` rows of dimension `d` on a device with `caps`.
pub(crate) fn plan(
    caps: &Capabilities,
    n: usize,
    d: usize,
    nq: usize,
    opts: &KnnOptions,
) -> Result<Plan> {
    let k = opts.k;
    let use_sg = subgroups(caps, opts)?;
    let s_max = chunk_limit(caps);
    let ke = k.min(n); // pairs computed on the device; the rest is padding
    let sg = caps.subgroup_size.max(1) as usize;
    let (kb, tq) = warp_bucket(ke, sg);
    let warp_wg = sg.max(64);
    let warp = warp_select(caps, opts, use_sg, (kb, sg, warp_wg))?;
    let select = !warp && !opts.full_ranking && ke <= s_max / 2;
    let chunk = if select {
        (2 * ke)
            .next_power_of_two()
            .clamp(MIN_CHUNK.min(s_max), s_max)
    } else {
        s_max
    };
    let wg = (chunk / 2)
        .min(256)
        .min(caps.max_workgroup_invocations as usize)
        .max(1);
    let r = chunk / wg;
    let use_sg = use_sg && (warp || (wg.is_multiple_of(sg) && sg.is_power_of_two()));
    check_loop_budget(
        caps,
        &format!("the k-NN distance product at dimension {d}"),
        dist_loop_iterations(d),
    )?;
    // Fused keys only on request: at 1,500 rows lavapipe ran them 2× slower than the tiles
    // (BENCHMARKS.md), and on GPUs 30–50× slower.
    let fused = warp && opts.fused_distances == Some(true);
    // WarpSelect's rows per dispatch within the device's loop budget (lavapipe cuts every
    // invocation's loops short after 65,535 iterations: without this bound the selection
    // silently skipped rows).
    let warp_rows = if warp {
        match warp_rows_in_budget(caps, sg, kb, tq, d, fused) {
            Some(r) => r,
            None => {
                return Err(Error::Limit(format!(
                    "WarpSelect with keys computed in the selection at dimension {d} needs more \
                     loop iterations in one invocation than {} runs (a driver limit); use the \
                     default (keys from the distance product)",
                    caps.name
                )))
            }
        }
    } else {
        usize::MAX
    };
    // WarpSelect: the running queues (K pairs a query) live in B, the keys of a table tile
    // (`table_tile` a query; none when fused) in A.
    let scratch_cap = (caps.memory_budget_bytes / 4).min(MAX_SCRATCH);
    let (table_tile, stride, path) = if warp {
        // Many queries a tile keep the GPU busy (one subgroup a query): the table tile is what
        // leaves WARP_QUERIES queries (or all) in the scratch budget, within [WARP_MIN_TILE,
        // WARP_TABLE_TILE] rows.
        let fit = (scratch_cap / 4 / nq.clamp(1, WARP_QUERIES) as u64) as usize;
        let auto = fit
            .saturating_sub(2 * kb)
            .clamp(WARP_MIN_TILE, WARP_TABLE_TILE);
        let tt = opts.table_tile.unwrap_or(auto).max(1).min(warp_rows).min(n);
        (
            tt,
            kb,
            KnnPath::WarpSelect {
                k_bucket: kb,
                thread_queue: tq,
                fused,
            },
        )
    } else if select {
        let tt = opts.table_tile.unwrap_or(16 * chunk).max(chunk).min(n);
        (tt, ke + tt.max(chunk), KnnPath::Select { chunk })
    } else {
        let p = n.div_ceil(chunk).max(1) * chunk;
        (n, p, KnnPath::FullRanking { padded: p })
    };
    // Entries a query in A's keys, in A's ids, in B (keys and ids).
    let (a_keys, a_ids) = match (warp, fused) {
        (true, true) => (0, 0),
        (true, false) => (table_tile, 0),
        _ => (stride, stride),
    };
    let widest = stride.max(a_keys);
    let row_bytes = widest as u64 * 4;
    if row_bytes > caps.max_buffer_range {
        return Err(Error::Limit(format!(
            "a k-NN scratch row of {widest} entries needs {row_bytes} bytes; {} allows {} \
             (maxStorageBufferRange)",
            caps.name, caps.max_buffer_range
        )));
    }
    let by_range = (caps.max_buffer_range / row_bytes) as usize;
    let per_query = (a_keys + a_ids + 2 * stride) as u64 * 4;
    let by_budget = (scratch_cap / per_query).max(1) as usize;
    let query_tile = opts
        .query_tile
        .unwrap_or(usize::MAX)
        .min(by_range)
        .min(by_budget)
        .min(MAX_QUERY_TILE)
        .min(nq.max(1))
        .max(1);
    let groups_x = widest.div_ceil(64);
    if groups_x > caps.max_workgroup_count as usize {
        return Err(Error::Limit(format!(
            "a k-NN row of {widest} entries needs {groups_x} workgroups; {} allows {}",
            caps.name, caps.max_workgroup_count
        )));
    }
    Ok(Plan {
        n,
        d,
        ke,
        path,
        subgroups: use_sg,
        sg,
        chunk,
        sort_wg: wg,
        sort_regs: r,
        warp_wg,
        table_tile,
        stride,
        a_keys,
        a_ids,
        query_tile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::LLVMPIPE_LOOP_LIMIT;

    fn caps(sg: u32, loop_limit: Option<u64>) -> Capabilities {
        crate::device::test_caps(sg, loop_limit)
    }

    fn opts(k: usize) -> KnnOptions {
        KnnOptions {
            k,
            ..Default::default()
        }
    }

    #[test]
    fn knn_plan_path_follows_k() {
        let c = caps(8, Some(LLVMPIPE_LOOP_LIMIT));
        assert_eq!(chunk_limit(&c), 4096);
        assert_eq!(warp_k_limit(&c), 512);
        let p = plan(&c, 10_000, 384, 100, &opts(10)).unwrap();
        assert_eq!(
            p.path,
            KnnPath::WarpSelect {
                k_bucket: 16,
                thread_queue: 2,
                fused: false
            }
        );
        assert_eq!((p.stride, p.a_keys, p.a_ids), (16, p.table_tile, 0));
        // Past the WarpSelect bucket: the selection passes, chunk = 2k rounded up.
        let p = plan(&c, 10_000, 384, 100, &opts(600)).unwrap();
        assert_eq!(p.path, KnnPath::Select { chunk: 2048 });
        assert_eq!(p.stride, 600 + p.table_tile);
        // Past half the largest chunk: the full ranking, rows padded to whole chunks.
        let p = plan(&c, 10_000, 384, 100, &opts(3000)).unwrap();
        assert_eq!(p.path, KnnPath::FullRanking { padded: 12_288 });
        assert_eq!((p.table_tile, p.stride, p.ke), (10_000, 12_288, 3000));
        // k > N: N pairs computed, the rest padding.
        let p = plan(&c, 50, 8, 3, &opts(100)).unwrap();
        assert_eq!(p.ke, 50);
        // Without subgroups: no WarpSelect, and forcing it is refused.
        let no_sg = KnnOptions {
            subgroups: Some(false),
            ..opts(10)
        };
        let p = plan(&c, 10_000, 384, 100, &no_sg).unwrap();
        assert_eq!(p.path, KnnPath::Select { chunk: 256 });
        assert!(!p.subgroups);
        let forced = KnnOptions {
            warp_select: Some(true),
            ..no_sg
        };
        assert!(matches!(
            plan(&c, 10_000, 384, 100, &forced),
            Err(Error::Unsupported { .. })
        ));
        let full = KnnOptions {
            full_ranking: true,
            ..opts(10)
        };
        let p = plan(&c, 10_000, 384, 100, &full).unwrap();
        assert_eq!(p.path, KnnPath::FullRanking { padded: 12_288 });
    }

    #[test]
    fn knn_plan_warp_tile_within_the_loop_budget() {
        let (n, d) = (1_000_000, 384);
        for sg in [4u32, 8, 32] {
            let c = caps(sg, Some(LLVMPIPE_LOOP_LIMIT));
            for k in [1, 10, 100, 250] {
                let p = plan(&c, n, d, 1000, &opts(k)).unwrap();
                let KnnPath::WarpSelect {
                    k_bucket,
                    thread_queue,
                    fused,
                } = p.path
                else {
                    panic!("sg {sg} k {k}: {:?}", p.path);
                };
                let it = warp_loop_iterations(p.table_tile, p.sg, k_bucket, thread_queue, d, fused);
                assert!(
                    it <= loop_budget(&c),
                    "sg {sg} k {k}: a tile of {} rows runs {it} iterations",
                    p.table_tile
                );
                assert!(p.table_tile < WARP_TABLE_TILE, "sg {sg} k {k}: not bounded");
                assert!(p.table_tile.is_multiple_of(p.sg));
                // The largest such tile: one more subgroup's rows would be over.
                let over = warp_loop_iterations(
                    p.table_tile + p.sg,
                    p.sg,
                    k_bucket,
                    thread_queue,
                    d,
                    fused,
                );
                assert!(over > loop_budget(&c), "sg {sg} k {k}");
            }
            // Without a loop cap the tile is the scratch budget's, not the loop budget's.
            let free = plan(&caps(sg, None), n, d, 1000, &opts(10)).unwrap();
            assert_eq!(free.table_tile, WARP_TABLE_TILE, "sg {sg}");
            assert_eq!(
                warp_rows_in_budget(&caps(sg, None), sg as usize, 16, 2, d, true),
                Some((1usize << 40) * sg as usize)
            );
        }
    }

    #[test]
    fn knn_plan_refusals() {
        let c = caps(8, Some(LLVMPIPE_LOOP_LIMIT));
        // Fused keys at a dimension whose key loop alone is over the budget.
        let fused = KnnOptions {
            warp_select: Some(true),
            fused_distances: Some(true),
            ..opts(10)
        };
        assert!(matches!(
            plan(&c, 1000, 60_000, 1, &fused),
            Err(Error::Limit(_))
        ));
        // The distance product's stage loop over the budget.
        assert!(matches!(
            plan(&c, 1000, 1 << 20, 1, &opts(10)),
            Err(Error::Limit(_))
        ));
        // A full-ranking row over maxStorageBufferRange.
        assert!(matches!(
            plan(&c, 40 << 20, 8, 1, &opts(5000)),
            Err(Error::Limit(_))
        ));
        // No queries: a plan all the same (the result is empty).
        assert_eq!(plan(&c, 1000, 8, 0, &opts(10)).unwrap().query_tile, 1);
    }
}
