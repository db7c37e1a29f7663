//! Exact k-nearest-neighbour search on the device: a batch of queries against a [`DeviceTable`]
//! (fp32 or fp16 storage: distances are against the stored, rounded rows), by inner product,
//! cosine similarity or squared L2 distance, with the k-selection done by bitonic networks on
//! the device.
//!
//! # Results
//! [`KnnResult`] holds, per query (row-major), the k best table rows sorted best first: largest
//! similarity first for [`Metric::InnerProduct`] and [`Metric::Cosine`], smallest squared
//! distance first for [`Metric::L2`]. Ties are broken by the lowest id: the device orders
//! `(key, id)` pairs totally, so the result is deterministic and the same on every path, tile
//! size and subgroup size. When k > N the entries after the N-th are padding: id [`NO_ID`]
//! (−1) and distance −∞ (inner product, cosine) or +∞ (L2). (A [`crate::Table`] has N ≥ 1, so
//! an empty table cannot be uploaded; an empty query batch gives an empty result.)
//!
//! # How
//! Keys are computed so that smaller is better (`-q·e`, `-q̂·e/|e|`, `Σ(q-e)²`; one fused
//! multiply-add chain over d from the stored row) by `knn_dist.comp` into a scratch row per
//! query (a blocked product, 128 queries × 128 rows a workgroup), then selected:
//! * **selection path** (k ≤ [`max_select_k`], 2,048 with 32 KiB of shared memory): the table
//!   is processed in tiles of `table_tile` rows; each tile's keys are appended to the query's
//!   running k best and `knn_sort.comp` passes shrink the row — one workgroup sorts a chunk of S
//!   pairs (S = the power of two ≥ 2k, at least 256: the k bucket, compiled through the
//!   workgroup-size and registers-per-lane specialization constants) and keeps its first k —
//!   until one chunk remains, which leaves the k best sorted.
//! * **full-ranking path** (larger k, up to N): every key of a query tile in one scratch row
//!   padded to P, a whole number of chunks of S; each chunk sorted by one workgroup
//!   (`knn_sort.comp`), then merge rounds (`knn_merge.comp`: each entry placed by its rank in
//!   its run plus a binary search of the partner run) double the sorted runs until one is left.
//!
//! Inside a workgroup each invocation holds R pairs in registers; compare-exchanges of strides
//! ≥ the workgroup size run between registers, strides below the subgroup size by
//! `subgroupShuffleXor` (the subgroup path, the device's subgroup size read at run time), the
//! rest through shared memory. [`KnnOptions::subgroups`] `= Some(false)` (or
//! `DIVERSITY_DISABLE=subgroups`) runs every stride below the workgroup size through shared
//! memory. Queries are tiled so the scratch (four `query_tile × row` buffers) fits
//! `maxStorageBufferRange` and a share of the memory budget.
//!
//! * **WarpSelect path** (auto where subgroups are used and k ≤ [`max_warp_k`]; forced or off by
//!   [`KnnOptions::warp_select`]): the table in tiles of `table_tile` rows (by default what
//!   leaves up to 16,384 queries a tile in the scratch budget, 2¹²–2¹⁸ rows);
//!   per tile the blocked product writes the query tile's keys into scratch and
//!   `knn_warp.comp` — one subgroup a query, reading its keys coalesced — keeps per-lane thread
//!   queues of T pairs and a sorted subgroup queue of K pairs (K = [`warp_bucket`]) merged by
//!   bitonic shuffle networks when any lane's queue fills; no shared memory, no barriers. The
//!   queues persist in scratch between tiles. [`KnnOptions::fused_distances`] computes the
//!   keys inside `knn_warp.comp` instead (one row a lane; no scratch; only on request). Same
//!   results, bit for bit, as the selection path.
//!
//! # The loop cap of CPU devices
//! lavapipe stops every shader invocation's loops, silently, once 65,535 iterations have run
//! in all ([`crate::device::Capabilities::loop_limit`]). The WarpSelect loop runs once per
//! subgroup-size rows of a table tile (and the fused key's loop over d once per row), so its
//! table tiles are bounded by [`crate::device::loop_budget`] through a count of its loop
//! iterations from above (`warp_loop_iterations`); the distance product's loop (d / 8 stages)
//! is checked the same way. The sort and merge passes loop log₂ of their sizes.
//!
//! Not here: odd-size merging networks (the merges use power-of-two bitonic networks) and
//! keeping the blocked product's tile on chip for the selection (the keys of a tile make one
//! round trip through device memory, 8 bytes a (query, row) pair).

use crate::device::{Context, PipelineKey};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::spirv::{self, checked_push, spirv_for};
use crate::submit::{barrier, bind, Set, Submitter};
use crate::table::Table;

/// The id of a padding entry (k > N).
pub const NO_ID: i64 = -1;
const NO_ID_U32: u32 = u32::MAX;
/// Smallest chunk the selection passes sort (pairs).
const MIN_CHUNK: usize = 256;
/// Largest chunk (pairs) a workgroup sorts (also bounded by shared memory: 8 bytes a pair).
const MAX_CHUNK: usize = 4096;
/// Largest k (bucket) of the WarpSelect path.
pub const MAX_WARP_K: usize = 1024;
/// Subgroup-queue registers a lane at most (K / subgroup size). On lavapipe (Mesa 22.3.6)
/// 64 is right at subgroup sizes 4 and 8; 128 gave wrong results at size 4 (right at 8), 256
/// at both — cause not found (a miscompile of large private arrays is suspected).
pub const MAX_WARP_REGS: usize = 64;
/// Table rows per WarpSelect tile at most by default (the blocked product's keys of a query
/// tile × this many rows are staged in the A scratch) …
const WARP_TABLE_TILE: usize = 1 << 18;
/// … and at least …
const WARP_MIN_TILE: usize = 1 << 12;
/// … chosen so that this many queries (one subgroup each) fit a query tile.
const WARP_QUERIES: usize = 16_384;
/// Queries and table rows of one workgroup of the blocked distance product (`knn_dist.comp`).
const DIST_BLOCK: usize = 128;
/// WarpSelect table tiles recorded in one submission.
const WARP_TILES_PER_SUBMIT: usize = 16;
/// Scratch bytes per query tile at most (on top of `maxStorageBufferRange` per buffer).
const MAX_SCRATCH: u64 = 1 << 30;

/// Similarity or distance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// `q · e`, largest first.
    InnerProduct,
    /// `q · e / (|q| |e|)`, largest first; 0 against a zero row or for a zero query.
    Cosine,
    /// Squared Euclidean distance `|q - e|²`, smallest first.
    L2,
}

impl Metric {
    /// `ip`, `cosine` or `l2`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::InnerProduct => "ip",
            Metric::Cosine => "cosine",
            Metric::L2 => "l2",
        }
    }
    fn code(self) -> u32 {
        match self {
            Metric::InnerProduct => 0,
            Metric::Cosine => 1,
            Metric::L2 => 2,
        }
    }
}

impl std::str::FromStr for Metric {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ip" | "inner_product" | "dot" => Ok(Metric::InnerProduct),
            "cosine" | "cos" => Ok(Metric::Cosine),
            "l2" | "L2" => Ok(Metric::L2),
            _ => Err(Error::Invalid(format!(
                "metric '{s}': expected ip, cosine or l2"
            ))),
        }
    }
}

/// How [`knn`] runs.
#[derive(Clone, Debug)]
pub struct KnnOptions {
    /// Neighbours per query (≥ 1; more than N pads with [`NO_ID`]).
    pub k: usize,
    /// Similarity or distance.
    pub metric: Metric,
    /// Queries per tile; `None` = as many as the scratch bounds allow.
    pub query_tile: Option<usize>,
    /// Table rows per tile on the selection path; `None` = 16 chunks.
    pub table_tile: Option<usize>,
    /// Compare-exchanges below the subgroup size by shuffles: `None` = when the device has
    /// subgroup operations; `Some(false)` = shared memory only.
    pub subgroups: Option<bool>,
    /// Force the full-ranking path even for small k (tests).
    pub full_ranking: bool,
    /// The WarpSelect path (one subgroup a query, thread queues + a subgroup queue):
    /// `None` = when subgroups are used and k ≤ [`MAX_WARP_K`]; `Some(true)` = required
    /// (an error where it cannot run); `Some(false)` = never.
    pub warp_select: Option<bool>,
    /// `Some(true)`: WarpSelect computes the keys itself, one table row a lane (no distance
    /// scratch), instead of reading the blocked product's tile. Same bits. `None` or
    /// `Some(false)`: the blocked product, on every device (fused was 2× slower on lavapipe at
    /// 1,500 rows and 30–50× slower on the H200: fused lanes stream their own rows,
    /// uncoalesced, and every query reads the whole table).
    pub fused_distances: Option<bool>,
    /// Cross-check this many queries (spread over the batch, first and last included) against
    /// a float64 brute force on the host over the table as stored
    /// ([`crate::knn_verify`]); a disagreement is an [`Error::Verification`]. 0 = off.
    pub verify: usize,
}

impl Default for KnnOptions {
    fn default() -> Self {
        KnnOptions {
            k: 10,
            metric: Metric::Cosine,
            query_tile: None,
            table_tile: None,
            subgroups: None,
            full_ranking: false,
            warp_select: None,
            fused_distances: None,
            verify: 0,
        }
    }
}

/// Which selection ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnnPath {
    /// Tiled selection passes with chunks of `chunk` pairs.
    Select {
        /// S: pairs one workgroup sorts.
        chunk: usize,
    },
    /// Full ranking: rows padded to `padded` pairs, chunks sorted, then merged.
    FullRanking {
        /// P: the padded row length (a multiple of the chunk a workgroup sorts).
        padded: usize,
    },
    /// WarpSelect: one subgroup a query, a sorted subgroup queue of `k_bucket` pairs and
    /// thread queues of `thread_queue` pairs a lane, over the keys of table tiles from the
    /// blocked distance product (or computed on the fly: [`KnnOptions::fused_distances`]).
    WarpSelect {
        /// K: the k bucket (a power of two ≥ k and ≥ the subgroup size).
        k_bucket: usize,
        /// T: thread-queue pairs a lane.
        thread_queue: usize,
        /// Whether the keys were computed inside the selection ([`KnnOptions::fused_distances`]).
        fused: bool,
    },
}

/// The k best rows per query, row-major (`ids[q * k + i]`).
#[derive(Clone, Debug)]
pub struct KnnResult {
    /// Neighbours per query.
    pub k: usize,
    /// Number of queries.
    pub queries: usize,
    /// Table row indices, [`NO_ID`] for padding.
    pub ids: Vec<i64>,
    /// Similarities (inner product, cosine; largest first) or squared distances (L2; smallest
    /// first); −∞ / +∞ for padding.
    pub distances: Vec<f32>,
    /// The selection that ran.
    pub path: KnnPath,
    /// Whether the subgroup shuffles ran.
    pub subgroups: bool,
    /// Query tile used.
    pub query_tile: usize,
    /// GPU nanoseconds (0 without timestamps).
    pub gpu_ns: u64,
    /// Queries cross-checked against the float64 brute force ([`KnnOptions::verify`]).
    pub verified: usize,
}

impl KnnResult {
    /// Ids of query `q`.
    pub fn ids_of(&self, q: usize) -> &[i64] {
        &self.ids[q * self.k..(q + 1) * self.k]
    }
    /// Distances of query `q`.
    pub fn distances_of(&self, q: usize) -> &[f32] {
        &self.distances[q * self.k..(q + 1) * self.k]
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct DistPush {
    dim: u32,
    q0: u32,
    t0: u32,
    cols: u32,
    off: u32,
    pad_to: u32,
    stride: u32,
    dst: u32,
    metric: u32,
    qn: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct WarpPush {
    dim: u32,
    q0: u32,
    qn: u32,
    t0: u32,
    cols: u32,
    first: u32,
    stride: u32,
    metric: u32,
    fused: u32,
    a_stride: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct SortPush {
    len: u32,
    src_stride: u32,
    dst_stride: u32,
    keep: u32,
    flip: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct MergePush {
    stride: u32,
    len: u32,
    width: u32,
    from_b: u32,
}

/// The largest chunk (pairs) one workgroup sorts on this device: a power of two with 8 bytes a
/// pair in shared memory, at most 4,096.
pub fn max_chunk(ctx: &Context) -> usize {
    let by_shared = (ctx.caps().shared_memory_bytes as usize / 8).max(2);
    let p = 1usize << (usize::BITS - 1 - by_shared.leading_zeros());
    p.min(MAX_CHUNK)
}

/// The largest k the selection path takes on this device (half the largest chunk); larger k
/// use the full ranking.
pub fn max_select_k(ctx: &Context) -> usize {
    max_chunk(ctx) / 2
}

/// The WarpSelect bucket for `k` pairs at subgroup size `sg`: (K, T) — K the power of two ≥ k
/// and ≥ sg, T the thread-queue length (Faiss's table with powers of two: 2 up to K = 32, 4 up
/// to 256, 8 above), at most K / sg.
pub fn warp_bucket(k: usize, sg: usize) -> (usize, usize) {
    let kb = k.next_power_of_two().max(sg).max(1);
    let t = match kb {
        0..=32 => 2,
        33..=256 => 4,
        _ => 8,
    };
    (kb, t.min(kb / sg.max(1)).max(1))
}

/// The largest k the WarpSelect path takes on this device: [`MAX_WARP_K`], at most
/// [`MAX_WARP_REGS`] × the subgroup size (0 without subgroup operations).
pub fn max_warp_k(ctx: &Context) -> usize {
    let caps = ctx.caps();
    let sg = caps.subgroup_size as usize;
    if !caps.subgroup_arithmetic || !sg.is_power_of_two() {
        return 0;
    }
    MAX_WARP_K.min(MAX_WARP_REGS * sg)
}

/// Dims `knn_dist.comp` stages at a time (its `BK`).
const DIST_BK: u64 = 8;

/// Loop iterations one invocation of `knn_dist.comp` runs for dimension `d`: a stage loop of
/// ⌈d / 8⌉ plus the partial stage's loop (the full stages' loops are unrolled).
fn dist_loop_iterations(d: usize) -> u64 {
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
    caps: &crate::device::Capabilities,
    sg: usize,
    kb: usize,
    tq: usize,
    d: usize,
    fused: bool,
) -> Option<usize> {
    let budget = crate::device::loop_budget(caps);
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

/// The checks of a k-NN call on a table of dimension `d`: k ≥ 1, the queries' dimension, whole
/// rows, finite values. Returns the number of queries.
pub(crate) fn check_queries(
    d: usize,
    queries: &[f32],
    dim: usize,
    opts: &KnnOptions,
) -> Result<usize> {
    if opts.k == 0 {
        return Err(Error::Invalid("k-NN needs k ≥ 1".into()));
    }
    if dim != d {
        return Err(Error::Invalid(format!(
            "queries have dimension {dim}, the table {d}"
        )));
    }
    if !queries.len().is_multiple_of(d) {
        return Err(Error::Invalid(format!(
            "{} query values are not a whole number of rows of dimension {d}",
            queries.len()
        )));
    }
    if let Some(pos) = queries.iter().position(|v| !v.is_finite()) {
        return Err(Error::Invalid(format!(
            "query {} has a non-finite value ({}) at column {}",
            pos / d,
            queries[pos],
            pos % d
        )));
    }
    Ok(queries.len() / d)
}

/// k-NN of `queries` (D columns, like the table) against `table`.
pub fn knn(table: &DeviceTable, queries: &Table, opts: &KnnOptions) -> Result<KnnResult> {
    knn_flat(table, queries.data(), queries.d(), opts)
}

/// [`knn`] of row-major queries `queries` of dimension `dim` (may be empty: no queries).
pub fn knn_flat(
    table: &DeviceTable,
    queries: &[f32],
    dim: usize,
    opts: &KnnOptions,
) -> Result<KnnResult> {
    let ctx = table.context().clone();
    let caps = ctx.caps().clone();
    let (n, d) = (table.n(), table.d());
    let nq = check_queries(d, queries, dim, opts)?;
    let k = opts.k;
    let use_sg = match opts.subgroups {
        Some(true) if !caps.subgroup_arithmetic => return Err(Error::Unsupported {
            device: caps.name.clone(),
            what: "subgroup operations for the k-selection (or DIVERSITY_DISABLE=subgroups is set)"
                .into(),
        }),
        Some(s) => s,
        None => caps.subgroup_arithmetic,
    };
    let s_max = max_chunk(&ctx);
    let ke = k.min(n); // pairs computed on the device; the rest is padding
    let sg = caps.subgroup_size.max(1) as usize;
    let (kb, tq) = warp_bucket(ke, sg);
    let warp_wg = sg.max(64);
    let warp_ok = use_sg
        && !opts.full_ranking
        && sg.is_power_of_two()
        && kb <= MAX_WARP_K
        && kb / sg <= MAX_WARP_REGS
        && warp_wg <= caps.max_workgroup_invocations as usize;
    let warp = match opts.warp_select {
        Some(true) if !warp_ok => {
            return Err(Error::Unsupported {
                device: caps.name.clone(),
                what: format!(
                    "the WarpSelect k-NN path for k = {k} (needs subgroup operations, a \
                     power-of-two subgroup size, k ≤ {MAX_WARP_K} and ≤ {MAX_WARP_REGS} × the subgroup size, no full ranking)"
                ),
            })
        }
        Some(w) => w,
        None => warp_ok,
    };
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
    crate::device::check_loop_budget(
        &caps,
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
        match warp_rows_in_budget(&caps, sg, kb, tq, d, fused) {
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
    let qt = opts
        .query_tile
        .unwrap_or(usize::MAX)
        .min(by_range)
        .min(by_budget)
        .min(65535)
        .min(nq.max(1))
        .max(1);
    let groups_x = widest.div_ceil(64);
    if groups_x > caps.max_workgroup_count as usize {
        return Err(Error::Limit(format!(
            "a k-NN row of {widest} entries needs {groups_x} workgroups; {} allows {}",
            caps.name, caps.max_workgroup_count
        )));
    }
    let mut out = KnnResult {
        k,
        queries: nq,
        ids: Vec::with_capacity(nq * k),
        distances: Vec::with_capacity(nq * k),
        path,
        subgroups: use_sg,
        query_tile: qt,
        gpu_ns: 0,
        verified: 0,
    };
    if nq == 0 {
        return Ok(out);
    }

    // Cosine: unit queries (float64 norms), a zero query stays zero.
    let qdata: Vec<f32> = if opts.metric == Metric::Cosine {
        queries
            .chunks_exact(d)
            .flat_map(|row| {
                let norm = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt();
                let inv = if norm > 0.0 { 1.0 / norm } else { 0.0 };
                row.iter().map(move |&v| (v as f64 * inv) as f32)
            })
            .collect()
    } else {
        queries.to_vec()
    };
    let qbuf = ctx.upload("k-NN queries", bytemuck::cast_slice(&qdata))?;
    let scratch = (qt * stride * 4) as u64;
    let bytes = |entries: usize| ((qt * entries * 4) as u64).max(16);
    let keys_a = Buffer::storage(&ctx, "k-NN keys A", bytes(a_keys))?;
    let ids_a = Buffer::storage(&ctx, "k-NN ids A", bytes(a_ids))?;
    let keys_b = Buffer::storage(&ctx, "k-NN keys B", scratch)?;
    let ids_b = Buffer::storage(&ctx, "k-NN ids B", scratch)?;
    let set = Set::new(
        &ctx,
        &[
            (0, table.data_buffer()),
            (1, table.inv_norm_buffer()),
            (2, &qbuf),
            (3, &keys_a),
            (4, &ids_a),
            (5, &keys_b),
            (6, &ids_b),
        ],
        std::slice::from_ref(&qbuf),
    )?;
    let prec = table.precision();
    let dist = ctx.pipeline(PipelineKey {
        spirv: spirv_for(&spirv::KNN_DIST, prec),
        spec: vec![],
        push_bytes: checked_push::<DistPush>(&spirv::KNN_DIST)?,
    })?;
    let sort = ctx.pipeline(PipelineKey {
        spirv: spirv_for(&spirv::KNN_SORT, prec),
        spec: vec![wg as u32, r as u32, use_sg as u32],
        push_bytes: checked_push::<SortPush>(&spirv::KNN_SORT)?,
    })?;
    let warp_pipe = if warp {
        Some(ctx.pipeline(PipelineKey {
            spirv: spirv_for(&spirv::KNN_WARP, prec),
            spec: vec![warp_wg as u32, sg as u32, kb as u32, tq as u32],
            push_bytes: checked_push::<WarpPush>(&spirv::KNN_WARP)?,
        })?)
    } else {
        None
    };
    let merge = ctx.pipeline(PipelineKey {
        spirv: spirv_for(&spirv::KNN_MERGE, prec),
        spec: vec![],
        push_bytes: checked_push::<MergePush>(&spirv::KNN_MERGE)?,
    })?;
    let mut sub = Submitter::new(&ctx)?;
    let dev = ctx.device().clone();
    let metric = opts.metric.code();

    let mut q0 = 0;
    while q0 < nq {
        let qn = qt.min(nq - q0);
        let qn32 = qn as u32;
        let mut cur = 0u32; // which scratch buffer holds the row: 0 = A, 1 = B
        if let Some(wp) = &warp_pipe {
            // Per table tile: the blocked product writes the tile's keys into A (unless fused),
            // WarpSelect folds them into the queues in B. Up to WARP_TILES_PER_SUBMIT tiles a
            // submission, ordered by barriers (A is reused).
            let per_group = warp_wg / sg;
            let tiles: Vec<usize> = (0..n).step_by(table_tile).collect();
            for group in tiles.chunks(WARP_TILES_PER_SUBMIT) {
                out.gpu_ns += sub.run("k-NN WarpSelect", |cb| unsafe {
                    for (i, &t0) in group.iter().enumerate() {
                        let cols = table_tile.min(n - t0);
                        if i > 0 {
                            barrier(&dev, cb);
                        }
                        if !fused {
                            let dp = DistPush {
                                dim: d as u32,
                                q0: q0 as u32,
                                t0: t0 as u32,
                                cols: cols as u32,
                                off: 0,
                                pad_to: cols as u32,
                                stride: table_tile as u32,
                                dst: 2,
                                metric,
                                qn: qn32,
                            };
                            bind(&dev, cb, &dist, set.set, bytemuck::bytes_of(&dp));
                            dev.cmd_dispatch(
                                cb,
                                cols.div_ceil(DIST_BLOCK) as u32,
                                qn.div_ceil(DIST_BLOCK) as u32,
                                1,
                            );
                            barrier(&dev, cb);
                        }
                        let push = WarpPush {
                            dim: d as u32,
                            q0: q0 as u32,
                            qn: qn32,
                            t0: t0 as u32,
                            cols: cols as u32,
                            first: (t0 == 0) as u32,
                            stride: stride as u32,
                            metric,
                            fused: fused as u32,
                            a_stride: table_tile as u32,
                        };
                        bind(&dev, cb, wp, set.set, bytemuck::bytes_of(&push));
                        dev.cmd_dispatch(cb, qn.div_ceil(per_group) as u32, 1, 1);
                    }
                })?;
            }
            cur = 1;
        } else if select {
            let mut have = 0usize;
            let mut t0 = 0;
            while t0 < n {
                let cols = table_tile.min(n - t0);
                let dp = DistPush {
                    dim: d as u32,
                    q0: q0 as u32,
                    t0: t0 as u32,
                    cols: cols as u32,
                    off: have as u32,
                    pad_to: cols as u32,
                    stride: stride as u32,
                    dst: cur,
                    metric,
                    qn: qn32,
                };
                let mut len = have + cols;
                let mut passes = Vec::new();
                loop {
                    let chunks = len.div_ceil(chunk);
                    passes.push((
                        SortPush {
                            len: len as u32,
                            src_stride: stride as u32,
                            dst_stride: stride as u32,
                            keep: ke as u32,
                            flip: cur,
                        },
                        chunks as u32,
                    ));
                    cur ^= 1;
                    len = chunks * ke;
                    if chunks == 1 {
                        break;
                    }
                }
                out.gpu_ns += sub.run("k-NN selection", |cb| unsafe {
                    bind(&dev, cb, &dist, set.set, bytemuck::bytes_of(&dp));
                    dev.cmd_dispatch(
                        cb,
                        cols.div_ceil(DIST_BLOCK) as u32,
                        qn.div_ceil(DIST_BLOCK) as u32,
                        1,
                    );
                    for (sp, chunks) in &passes {
                        barrier(&dev, cb);
                        bind(&dev, cb, &sort, set.set, bytemuck::bytes_of(sp));
                        dev.cmd_dispatch(cb, *chunks, qn32, 1);
                    }
                })?;
                have = ke;
                t0 += cols;
            }
        } else {
            // Every key of the row (padded with (+inf, NO_ID) to a whole number of chunks) into
            // A; each chunk sorted into B; then merge rounds of doubling run widths, B ↔ A.
            let p = stride;
            let dp = DistPush {
                dim: d as u32,
                q0: q0 as u32,
                t0: 0,
                cols: n as u32,
                off: 0,
                pad_to: p as u32,
                stride: p as u32,
                dst: 0,
                metric,
                qn: qn32,
            };
            let chunks = SortPush {
                len: p as u32,
                src_stride: p as u32,
                dst_stride: p as u32,
                keep: chunk as u32,
                flip: 0,
            };
            let mut rounds = Vec::new();
            let mut width = chunk;
            cur = 1;
            while width < p {
                rounds.push(MergePush {
                    stride: p as u32,
                    len: p as u32,
                    width: width as u32,
                    from_b: cur,
                });
                cur ^= 1;
                width *= 2;
            }
            out.gpu_ns += sub.run("k-NN full ranking", |cb| unsafe {
                bind(&dev, cb, &dist, set.set, bytemuck::bytes_of(&dp));
                dev.cmd_dispatch(
                    cb,
                    p.div_ceil(DIST_BLOCK) as u32,
                    qn.div_ceil(DIST_BLOCK) as u32,
                    1,
                );
                barrier(&dev, cb);
                bind(&dev, cb, &sort, set.set, bytemuck::bytes_of(&chunks));
                dev.cmd_dispatch(cb, (p / chunk) as u32, qn32, 1);
                for mp in &rounds {
                    barrier(&dev, cb);
                    bind(&dev, cb, &merge, set.set, bytemuck::bytes_of(mp));
                    dev.cmd_dispatch(cb, p.div_ceil(256) as u32, qn32, 1);
                }
            })?;
        }
        // The first ke pairs of each row of the current buffer.
        let regions: Vec<(u64, u64)> = (0..qn)
            .map(|q| (((q * stride) * 4) as u64, (ke * 4) as u64))
            .collect();
        let (kb, ib) = if cur == 0 {
            (&keys_a, &ids_a)
        } else {
            (&keys_b, &ids_b)
        };
        let keys: Vec<f32> = ctx
            .download_regions(kb, &regions)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let ids: Vec<u32> = ctx
            .download_regions(ib, &regions)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let neg = opts.metric != Metric::L2;
        let pad_dist = if neg {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
        for q in 0..qn {
            for i in 0..k {
                if i < ke && ids[q * ke + i] != NO_ID_U32 {
                    let key = keys[q * ke + i];
                    out.ids.push(ids[q * ke + i] as i64);
                    out.distances.push(if neg { -key } else { key });
                } else {
                    out.ids.push(NO_ID);
                    out.distances.push(pad_dist);
                }
            }
        }
        q0 += qn;
    }
    drop(set);
    if opts.verify > 0 {
        let stored = crate::knn_verify::stored_table(table)?;
        let sample = crate::knn_verify::verify_sample(nq, opts.verify);
        out.verified =
            crate::knn_verify::verify_result(&stored, queries, opts.metric, &out, &sample)?;
    }
    Ok(out)
}
