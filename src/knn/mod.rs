//! Exact k-nearest-neighbour search on the device: a batch of queries against a [`DeviceTable`]
//! (fp32 or fp16 storage: distances are against the stored, rounded rows), by inner product,
//! cosine similarity or squared L2 distance, with the k-selection done by bitonic networks on
//! the device. A peer of the sequence engines: it may touch the device context, device memory,
//! the device table, the compiled shaders, command submission, the metric and (for its
//! cross-check) the float64 reference; no sequence engine and no file format.
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
//!
//! # Layout
//! Like Faiss GPU's launchers, one file a piece: `plan.rs` (the pure plan: path, chunk, tiles,
//! strides, scratch sizes, the loop budget and every refusal), `push.rs` (the shaders' push
//! blocks and the scratch side they name), `launch.rs` (the pipelines and the distance
//! product's dispatch the recorders share), one recorder a selection
//! path (`warp.rs` WarpSelect, `select.rs` the tiled selection passes, `full.rs` the full
//! ranking), `scratch.rs` (queries, scratch buffers, the download of the k best) and
//! `verify.rs` (the float64 cross-check, [`crate::knn_verify`]). The shaders share
//! `knn_common.glsl` (bindings, the padding pair) and `key_order.glsl` (the `(key, id)` order).

mod full;
mod launch;
mod plan;
mod push;
mod scratch;
mod select;
pub mod verify;
mod warp;

use crate::device::Context;
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
pub use crate::metric::Metric;
use crate::submit::Submitter;
use crate::table::Table;
use launch::{Launch, Pipelines, Sink};
pub(crate) use plan::MAX_QUERY_TILE;
pub(crate) use scratch::KeptScratch;
use scratch::Scratch;

/// The id of a padding entry (k > N).
pub const NO_ID: i64 = -1;
/// Largest k (bucket) of the WarpSelect path.
pub const MAX_WARP_K: usize = 1024;
/// Subgroup-queue registers a lane at most (K / subgroup size). On lavapipe (Mesa 22.3.6)
/// 64 is right at subgroup sizes 4 and 8; 128 gave wrong results at size 4 (right at 8), 256
/// at both — cause not found (a miscompile of large private arrays is suspected).
pub const MAX_WARP_REGS: usize = 64;

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
    /// The result of `queries` queries, k a query, before any row is in: room reserved for all
    /// of them, the selection `path` (with its `subgroups` and `query_tile`) that will run, no
    /// GPU time and nothing verified yet. The exact search and both IVF indexes start from it.
    pub(crate) fn started(
        k: usize,
        queries: usize,
        path: KnnPath,
        subgroups: bool,
        query_tile: usize,
    ) -> KnnResult {
        KnnResult {
            k,
            queries,
            ids: Vec::with_capacity(queries * k),
            distances: Vec::with_capacity(queries * k),
            path,
            subgroups,
            query_tile,
            gpu_ns: 0,
            verified: 0,
        }
    }

    /// Ids of query `q`.
    pub fn ids_of(&self, q: usize) -> &[i64] {
        &self.ids[q * self.k..(q + 1) * self.k]
    }
    /// Distances of query `q`.
    pub fn distances_of(&self, q: usize) -> &[f32] {
        &self.distances[q * self.k..(q + 1) * self.k]
    }
}

/// The largest chunk (pairs) one workgroup sorts on this device: a power of two with 8 bytes a
/// pair in shared memory, at most 4,096.
pub fn max_chunk(ctx: &Context) -> usize {
    plan::chunk_limit(ctx.caps())
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
    plan::warp_k_limit(ctx.caps())
}

/// The checks of a k-NN call on a table of dimension `d`: [`check_query_shape`]'s, and every
/// nonzero query's norm within what fp32 arithmetic handles exactly
/// ([`crate::table::check_row_norms`], naming the query). Returns the number of queries.
pub(crate) fn check_queries(
    d: usize,
    queries: &[f32],
    dim: usize,
    opts: &KnnOptions,
) -> Result<usize> {
    check_queries_sq(d, queries, dim, opts).map(|(nq, _)| nq)
}

/// [`check_queries`], also returning each query's float64 sum of squares (what
/// [`write_query_rows`] scales cosine queries by).
pub(crate) fn check_queries_sq(
    d: usize,
    queries: &[f32],
    dim: usize,
    opts: &KnnOptions,
) -> Result<(usize, Vec<f64>)> {
    // Where the float64 sums are not needed (every metric but cosine scales nothing), a float32
    // screen proves every row finite and in range in a tenth of their time; else (or where the
    // screen proves nothing) one pass over the queries for the float64 sums: a non-finite value
    // makes its row's sum non-finite (finite f32 squares cannot overflow it), and only then
    // does the finite-value scan run, for its message.
    if opts.metric != Metric::Cosine && dim == d && crate::table::norms_surely_in_range(queries, d)
    {
        return Ok((shape_checks(d, queries, dim, opts, false)?, Vec::new()));
    }
    let sq = if dim == d && d > 0 && queries.len().is_multiple_of(d) {
        crate::table::sq_norms(queries, d)
    } else {
        Vec::new()
    };
    let finite = sq.iter().all(|s| s.is_finite());
    let nq = shape_checks(d, queries, dim, opts, !finite)?;
    crate::table::check_sq_norms(&sq, "query")?;
    Ok((nq, sq))
}

/// The checks of a k-NN call on a table of dimension `d` whose queries this crate derived
/// (k-means rows, residuals, sub-vectors; their norms are not the user's to fix): k ≥ 1, the
/// queries' dimension, whole rows, finite values. Returns the number of queries.
pub(crate) fn check_query_shape(
    d: usize,
    queries: &[f32],
    dim: usize,
    opts: &KnnOptions,
) -> Result<usize> {
    shape_checks(d, queries, dim, opts, true)
}

/// [`check_query_shape`], the scan for non-finite values only with `scan_finite`.
fn shape_checks(
    d: usize,
    queries: &[f32],
    dim: usize,
    opts: &KnnOptions,
    scan_finite: bool,
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
    // Only where asked: a pass over every value costs as much as the search of a large query
    // set at small nprobe.
    let bad = if scan_finite {
        queries.iter().position(|v| !v.is_finite())
    } else {
        None
    };
    if let Some(pos) = bad {
        return Err(Error::Invalid(format!(
            "query {} has a non-finite value ({}) at column {}",
            pos / d,
            queries[pos],
            pos % d
        )));
    }
    let nq = queries.len() / d;
    check_result_size(nq, opts.k)?;
    Ok(nq)
}

/// Host bytes one result entry takes (an i64 id and an f32 distance).
const RESULT_ENTRY_BYTES: usize = 12;

/// The most host memory a k-NN result may take: half the machine's memory (`MemTotal` of
/// /proc/meminfo), or 16 GiB where that cannot be read.
fn result_budget() -> u64 {
    // Read once: every search checks it, and /proc/meminfo costs a search of one query a good
    // part of its host time.
    static BUDGET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| crate::device::host_memory_bytes().map_or(16 << 30, |b| b / 2))
}

/// The result of `nq` queries × `k` (padding past N included: the device work is clamped to N,
/// the result is not) must fit the host budget; refused before anything is allocated.
pub(crate) fn check_result_size(nq: usize, k: usize) -> Result<()> {
    let budget = result_budget();
    let bytes = nq
        .checked_mul(k)
        .and_then(|e| e.checked_mul(RESULT_ENTRY_BYTES))
        .and_then(|b| u64::try_from(b).ok());
    match bytes {
        Some(b) if b <= budget => Ok(()),
        _ => Err(Error::Invalid(format!(
            "k-NN result of {nq} queries × k = {k} needs {} bytes, over the host budget of \
             {budget} bytes (half of MemTotal); lower k (ids past N are only -1 padding)",
            (nq as u128) * (k as u128) * RESULT_ENTRY_BYTES as u128
        ))),
    }
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
    check_queries(table.d(), queries, dim, opts)?;
    knn_derived(table, queries, dim, opts)
}

/// [`knn_flat`] of queries this crate derived (k-means rows, residual sub-vectors), without
/// the query-norm check.
pub(crate) fn knn_derived(
    table: &DeviceTable,
    queries: &[f32],
    dim: usize,
    opts: &KnnOptions,
) -> Result<KnnResult> {
    let ctx = table.context();
    let (n, d) = (table.n(), table.d());
    let nq = check_query_shape(d, queries, dim, opts)?;
    let plan = plan::plan(ctx.caps(), n, d, nq, opts)?;
    let k = opts.k;
    // check_query_shape checked nq × k against the host budget.
    let mut out = KnnResult::started(k, nq, plan.path, plan.subgroups, plan.query_tile);
    if nq == 0 {
        return Ok(out);
    }
    let scratch = Scratch::new(table, &plan, &scratch::query_rows(queries, d, opts.metric))?;
    let pipes = Pipelines::new(ctx, table.precision(), &plan)?;
    run(table, &plan, &pipes, &scratch, nq, opts.metric, &mut out)?;
    drop(scratch);
    if opts.verify > 0 {
        let stored = verify::stored_table(table)?;
        let sample = verify::verify_sample(nq, opts.verify);
        out.verified = verify::verify_result(&stored, queries, opts.metric, &out, &sample)?;
    }
    Ok(out)
}

/// Records and runs every query tile of a call whose queries are in `scratch`, appending each
/// tile's k best to `out`.
fn run(
    table: &DeviceTable,
    plan: &plan::Plan,
    pipes: &Pipelines,
    scratch: &Scratch,
    nq: usize,
    metric: Metric,
    out: &mut KnnResult,
) -> Result<()> {
    let ctx = table.context();
    let sub = std::cell::RefCell::new(Submitter::new(ctx)?);
    let mut q0 = 0;
    while q0 < nq {
        let qn = plan.query_tile.min(nq - q0);
        let l = Launch {
            plan,
            pipes,
            set: scratch.set.set,
            sub: Sink::Submit(&sub),
            dev: ctx.device(),
            metric: metric.code(),
            q0,
            qn,
        };
        let (gpu_ns, side) = match plan.path {
            KnnPath::WarpSelect { fused, .. } => warp::record(&l, fused)?,
            KnnPath::Select { chunk } => select::record(&l, chunk)?,
            KnnPath::FullRanking { padded } => full::record(&l, padded)?,
        };
        out.gpu_ns += gpu_ns;
        scratch.download_into(table, plan, &pipes.gather, &sub, side, qn, metric, out)?;
        q0 += qn;
    }
    Ok(())
}

/// Query rows kept on the device for several [`knn_resident`] calls (k-means assigns the same
/// training rows every iteration): the rows as the shaders read them (unit rows for cosine).
pub(crate) struct DeviceQueries {
    buf: crate::device::Buffer,
    nq: usize,
    d: usize,
    metric: Metric,
}

impl DeviceQueries {
    /// Checks (as [`knn_derived`] does: k-means rows, not the user's queries) and uploads
    /// `queries`, rows of dimension `d`, for searches by `metric`.
    pub(crate) fn upload(
        ctx: &Context,
        queries: &[f32],
        d: usize,
        metric: Metric,
    ) -> Result<DeviceQueries> {
        let probe = KnnOptions {
            k: 1,
            metric,
            ..KnnOptions::default()
        };
        let nq = check_query_shape(d, queries, d, &probe)?;
        let buf = match metric {
            Metric::Cosine => {
                let rows = scratch::query_rows(queries, d, metric);
                ctx.upload("k-NN queries", bytemuck::cast_slice(&rows))?
            }
            _ => ctx.upload("k-NN queries", bytemuck::cast_slice(queries))?,
        };
        Ok(DeviceQueries { buf, nq, d, metric })
    }

    /// The device buffer (row-major f32, `nq × d`).
    pub(crate) fn buffer(&self) -> &crate::device::Buffer {
        &self.buf
    }
}

/// [`knn_flat`] of queries already on the device (`opts.metric` must be theirs; no `verify`).
pub(crate) fn knn_resident(
    table: &DeviceTable,
    queries: &DeviceQueries,
    opts: &KnnOptions,
) -> Result<KnnResult> {
    Resident::new(table, queries, opts)?.run()
}

/// A [`knn_resident`] search set up once and run many times — its plan, pipelines and scratch
/// kept — against a table whose rows may change in place between runs
/// (`DeviceTable::overwrite_fp32`): k-means assigns its rows to the moving centroids so.
pub(crate) struct Resident<'q> {
    table: DeviceTable,
    nq: usize,
    k: usize,
    metric: Metric,
    plan: plan::Plan,
    scratch: Option<Scratch<'q>>,
    pipes: Pipelines,
}

impl<'q> Resident<'q> {
    pub(crate) fn new(
        table: &DeviceTable,
        queries: &'q DeviceQueries,
        opts: &KnnOptions,
    ) -> Result<Resident<'q>> {
        let ctx = table.context();
        if queries.d != table.d() || queries.metric != opts.metric || opts.verify > 0 {
            return Err(Error::Invalid(
                "internal: resident queries of another dimension or metric, or verify".into(),
            ));
        }
        if opts.k == 0 {
            return Err(Error::Invalid("k-NN needs k ≥ 1".into()));
        }
        let nq = queries.nq;
        check_result_size(nq, opts.k)?;
        let plan = plan::plan(ctx.caps(), table.n(), table.d(), nq, opts)?;
        let scratch = match nq {
            0 => None,
            _ => Some(Scratch::with_queries(table, &plan, &queries.buf)?),
        };
        let pipes = Pipelines::new(ctx, table.precision(), &plan)?;
        Ok(Resident {
            table: table.clone(),
            nq,
            k: opts.k,
            metric: opts.metric,
            plan,
            scratch,
            pipes,
        })
    }

    /// The search, on the table's rows as they are now.
    pub(crate) fn run(&self) -> Result<KnnResult> {
        let (nq, k) = (self.nq, self.k);
        let plan = &self.plan;
        let mut out = KnnResult::started(k, nq, plan.path, plan.subgroups, plan.query_tile);
        if let Some(scratch) = &self.scratch {
            run(
                &self.table,
                &self.plan,
                &self.pipes,
                scratch,
                nq,
                self.metric,
                &mut out,
            )?;
        }
        Ok(out)
    }
}

/// A k-NN of query rows already on the device, planned and its scratch ready (kept from call
/// to call, [`scratch::KeptScratch`]), to be recorded by [`Prepared::record`] into a command
/// buffer the caller submits with what reads the results: no submission, no wait, no download
/// of its own. The same shaders and plan as [`knn_resident`], so the same keys and ids bit for
/// bit. Each query's `ke` best are packed on the device (`knn_gather.comp`): the keys (the
/// shaders' keys: the distance, or minus the similarity) from word 0 of [`Prepared::packed`],
/// the ids from word `nq · ke`, `ke` a query, row after row.
pub(crate) struct Prepared<'a> {
    table: DeviceTable,
    plan: plan::Plan,
    pipes: Pipelines,
    scratch: &'a Scratch<'static>,
    metric: Metric,
    nq: usize,
    scratch_gen: u64,
}

impl<'a> Prepared<'a> {
    /// The k-NN of the `nq` query rows in `queries` (as the shaders read them: unit rows for
    /// cosine; `queries_gen` identifies the buffer, see [`scratch::KeptScratch`]) against
    /// `table`, with the scratch `kept`. `None` where one query tile does not hold every query.
    pub(crate) fn new(
        table: &DeviceTable,
        queries: &crate::device::Buffer,
        queries_gen: u64,
        nq: usize,
        opts: &KnnOptions,
        kept: &'a mut KeptScratch,
    ) -> Result<Option<Prepared<'a>>> {
        let ctx = table.context();
        if opts.k == 0 || nq == 0 || opts.verify > 0 {
            return Ok(None);
        }
        let mut plan = plan::plan(ctx.caps(), table.n(), table.d(), nq, opts)?;
        if plan.query_tile < nq {
            return Ok(None);
        }
        plan.query_tile = nq;
        let pipes = Pipelines::new(ctx, table.precision(), &plan)?;
        kept.get(table, &plan, queries, queries_gen)?;
        let scratch_gen = kept.gen;
        let scratch = kept.scratch.as_ref().expect("made by get");
        Ok(Some(Prepared {
            table: table.clone(),
            plan,
            pipes,
            scratch,
            metric: opts.metric,
            nq,
            scratch_gen,
        }))
    }

    /// The kept scratch's generation (see [`KeptScratch`]).
    pub(crate) fn scratch_gen(&self) -> u64 {
        self.scratch_gen
    }

    /// Pairs kept a query.
    pub(crate) fn ke(&self) -> usize {
        self.plan.ke
    }

    /// Where the packed results will be.
    pub(crate) fn packed(&self) -> &'a crate::device::Buffer {
        self.scratch.packed().expect("a kept scratch packs")
    }

    /// The search's path, whether subgroups ran, and its query tile (as in [`KnnResult`]).
    pub(crate) fn plan_info(&self) -> (KnnPath, bool, usize) {
        (self.plan.path, self.plan.subgroups, self.plan.query_tile)
    }

    /// Records the search and the packing of its results into `cb` (a barrier first).
    ///
    /// # Safety
    /// `cb` is recording; the queries, the table and the kept scratch outlive its execution.
    pub(crate) unsafe fn record(&self, cb: ash::vk::CommandBuffer) -> Result<()> {
        let dev = self.table.context().device();
        let l = Launch {
            plan: &self.plan,
            pipes: &self.pipes,
            set: self.scratch.set.set,
            sub: Sink::Record(cb),
            dev,
            metric: self.metric.code(),
            q0: 0,
            qn: self.nq,
        };
        let (_, side) = match self.plan.path {
            KnnPath::WarpSelect { fused, .. } => warp::record(&l, fused)?,
            KnnPath::Select { chunk } => select::record(&l, chunk)?,
            KnnPath::FullRanking { padded } => full::record(&l, padded)?,
        };
        crate::submit::barrier(dev, cb);
        self.scratch
            .record_gather(dev, cb, &self.pipes.gather, &self.plan, side, self.nq);
        Ok(())
    }
}

/// The query rows as the k-NN shaders read them for `metric` (unit rows for cosine, float64
/// norms, a zero query staying zero) written into `dst` (as long as `queries`), the queries' sums of
/// squares `sq` given ([`check_queries_sq`]): the same bits, without a vector of its own.
pub(crate) fn write_query_rows(
    queries: &[f32],
    d: usize,
    metric: Metric,
    sq: &[f64],
    dst: &mut [f32],
) {
    scratch::write_query_rows(queries, d, metric, sq, dst)
}
