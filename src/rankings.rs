//! Similarity rankings, the pipeline's second stage: for every item (or a chosen subset), all
//! other items ranked by cosine similarity (or inner product / squared L2 distance), most similar
//! first, computed on the device by the exact k-NN search of [`crate::knn`](mod@crate::knn) and
//! streamed batch by batch into a sink — the user's rankings cache ([`write_rankings_cache`], through
//! [`RankingsWriter`]) or the compact k-NN graph file ([`write_knn_graph`], through
//! [`KnnGraphWriter`]).
//! It may touch the exact k-NN search ([`mod@crate::knn`]), the device table, the metric and the
//! rankings and k-NN graph writers of [`crate::cache`]; no sequence engine.
//!
//! # Semantics
//! * Each item is a query against the whole table **as stored** on the device (fp16 tables:
//!   the fp16-rounded rows are the queries too, so an item and its duplicates score equally).
//! * Row `i` lists the other items, most similar first (largest cosine / inner product,
//!   smallest squared L2 distance); equal scores are ordered by the lowest index — deterministic,
//!   unlike the user's `qsort` — because the device orders `(key, id)` pairs totally.
//! * The item itself is excluded **by id**, not by position: with duplicate rows the item need
//!   not come first (a lower-indexed duplicate ties with it and wins the tie), so the search asks
//!   for `top_k + 1` neighbours (or all N on the full-ranking path) and drops the item's own id.
//! * Row length: `min(top_k, N − 1)`, or N − 1 for all (`top_k: None`). `top_k = 0` is
//!   [`Error::Invalid`]; a `top_k` ≥ N is **clamped** to N − 1 (rows of every other item), as
//!   [`RankingsWriter`] does; the cache's metadata keeps the requested value. N = 1 gives empty
//!   rows.
//! * Queries are processed in batches of [`RankingsOptions::batch`] items (default: sized so the
//!   host buffers of one batch stay within a share of the device's memory budget, at most
//!   256 MiB); each batch goes to the sink as soon as it is done, in the order of the items, so
//!   the output does not depend on the batch size (the caches are byte-identical).

use crate::cache::{KnnGraphWriter, KnnMetric, RankingsWriter, KNN_PAD};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::knn::{knn_flat, verify, KnnOptions, KnnPath, NO_ID};
use crate::metric::Metric;
use crate::table::Table;
use serde_json::Value;
use std::path::Path;

/// Neighbours per item of [`write_knn_graph`] when not given.
pub const DEFAULT_GRAPH_K: usize = 10;
/// Host bytes one batch may use at most (also bounded by an eighth of the memory budget).
const MAX_BATCH_BYTES: u64 = 256 << 20;

/// How [`rankings`] runs.
#[derive(Clone, Debug)]
pub struct RankingsOptions {
    /// Entries per ranking: `Some(k)` (≥ 1; ≥ N means all N − 1) or `None` for all N − 1.
    pub top_k: Option<usize>,
    /// Similarity or distance (the pipeline uses [`Metric::Cosine`]).
    pub metric: Metric,
    /// Items per batch; `None` = from the memory budget (see the module documentation).
    pub batch: Option<usize>,
    /// The items to rank (each < N, no repeats), in the order they are handed to the sink;
    /// `None` = all items 0..N.
    pub items: Option<Vec<u32>>,
    /// Passed to [`KnnOptions::subgroups`].
    pub subgroups: Option<bool>,
    /// Passed to [`KnnOptions::full_ranking`] (tests).
    pub full_ranking: bool,
    /// Cross-check this many items (spread over all, first and last included) against a
    /// float64 brute force over the table as stored on the device ([`crate::knn::verify`]);
    /// a disagreement is an [`Error::Verification`] and nothing more reaches the sink.
    /// 0 = off.
    pub verify: usize,
}

impl Default for RankingsOptions {
    fn default() -> Self {
        RankingsOptions {
            top_k: None,
            metric: Metric::Cosine,
            batch: None,
            items: None,
            subgroups: None,
            full_ranking: false,
            verify: 0,
        }
    }
}

/// What [`rankings`] did.
#[derive(Clone, Debug)]
pub struct RankingsReport {
    /// Items ranked (rows handed to the sink).
    pub items: usize,
    /// Entries per row: `min(top_k, N − 1)`.
    pub top_k: usize,
    /// Neighbours asked of the k-NN search per query (`top_k + 1`, at most N).
    pub knn_k: usize,
    /// Items per batch.
    pub batch: usize,
    /// Number of batches.
    pub batches: usize,
    /// The k-NN path that ran (the same for every batch).
    pub path: Option<KnnPath>,
    /// Whether subgroup shuffles ran.
    pub subgroups: bool,
    /// Items cross-checked against the float64 brute force ([`RankingsOptions::verify`]).
    pub verified: usize,
    /// GPU nanoseconds, all batches (0 without timestamps).
    pub gpu_ns: u64,
}

impl RankingsReport {
    /// The report of a run over `items` items, rows of `top_k`, `knn_k` neighbours asked a
    /// query and batches of `batch`, before any batch has run.
    fn before_batches(items: usize, top_k: usize, knn_k: usize, batch: usize) -> Self {
        RankingsReport {
            items,
            top_k,
            knn_k,
            batch,
            batches: 0,
            path: None,
            subgroups: false,
            verified: 0,
            gpu_ns: 0,
        }
    }

    /// Counts one batch's search `res`: its GPU time, its path and subgroups.
    fn add_batch(&mut self, res: &crate::knn::KnnResult) {
        self.batches += 1;
        self.gpu_ns += res.gpu_ns;
        self.path = Some(res.path);
        self.subgroups = res.subgroups;
    }
}

/// The items a run over a table of `n` items ranks: `opts.items` (checked by [`check_items`])
/// or all of 0..n; a batch of 0 is refused here too. The exact and the approximate rankings
/// both start from it.
fn ranked_items(n: usize, opts: &RankingsOptions) -> Result<std::borrow::Cow<'_, [u32]>> {
    let items = match &opts.items {
        Some(items) => {
            check_items(n, items)?;
            std::borrow::Cow::Borrowed(items.as_slice())
        }
        None => std::borrow::Cow::Owned((0..n as u32).collect()),
    };
    if opts.batch == Some(0) {
        return Err(Error::Invalid("a batch of 0 items".into()));
    }
    Ok(items)
}

/// The row length for `top_k` over `n` items: `min(top_k, n − 1)`, or n − 1 for all.
pub fn row_len(n: usize, top_k: Option<usize>) -> Result<usize> {
    match top_k {
        Some(0) => Err(Error::Invalid(
            "top_k = 0: a ranking needs at least one entry (None means all)".into(),
        )),
        Some(k) => Ok(k.min(n.saturating_sub(1))),
        None => Ok(n.saturating_sub(1)),
    }
}

/// Rankings of every item (or `opts.items`) against all others; `sink(items, ids, len)` gets
/// each batch as soon as it is done: `ids` is row-major, row `i` (`len` entries, the
/// [`RankingsReport::top_k`]) the ranking of `items[i]` as 0-based indices. See the module
/// documentation for the order, ties, self-exclusion and `top_k`.
pub fn rankings(
    dt: &DeviceTable,
    table: &Table,
    opts: &RankingsOptions,
    mut sink: impl FnMut(&[u32], &[u32], usize) -> Result<()>,
) -> Result<RankingsReport> {
    rankings_with_values(dt, table, opts, |items, ids, _values, len| {
        sink(items, ids, len)
    })
}

/// [`rankings`] whose sink also gets the similarities (or squared distances) beside the ids,
/// row-major like them: `sink(items, ids, values, len)`.
pub fn rankings_with_values(
    dt: &DeviceTable,
    table: &Table,
    opts: &RankingsOptions,
    mut sink: impl FnMut(&[u32], &[u32], &[f32], usize) -> Result<()>,
) -> Result<RankingsReport> {
    let (n, d) = (dt.n(), dt.d());
    if table.n() != n || table.d() != d {
        return Err(Error::Invalid(format!(
            "the host table is {} × {}, the device table {n} × {d}: pass the table that was \
             uploaded",
            table.n(),
            table.d()
        )));
    }
    let len = row_len(n, opts.top_k)?;
    let items = ranked_items(n, opts)?;
    // The queries are the rows as stored, so an item and its duplicates score the same.
    let stored = match dt.precision() {
        crate::table::Precision::Fp32 => std::borrow::Cow::Borrowed(table),
        p => std::borrow::Cow::Owned(table.as_stored(p)),
    };
    let kk = (len + 1).min(n);
    let caps = dt.context().caps();
    let per_item = (kk as u64) * 24 + (d as u64) * 8;
    let budget = (caps.memory_budget_bytes / 8).clamp(1 << 20, MAX_BATCH_BYTES);
    let batch = opts
        .batch
        .unwrap_or((budget / per_item.max(1)).max(1) as usize)
        .min(items.len())
        .max(1);
    let kopts = KnnOptions {
        k: kk,
        metric: opts.metric,
        query_tile: None,
        table_tile: None,
        subgroups: opts.subgroups,
        full_ranking: opts.full_ranking,
        ..KnnOptions::default()
    };
    let mut report = RankingsReport::before_batches(items.len(), len, kk, batch);
    let check = match opts.verify {
        0 => None,
        v => Some((
            verify::stored_table(dt)?,
            verify::verify_sample(items.len(), v),
        )),
    };
    let mut queries = Vec::with_capacity(batch * d);
    let mut ids = Vec::with_capacity(batch * len);
    let mut values = Vec::with_capacity(batch * len);
    for (b, chunk) in items.chunks(batch).enumerate() {
        queries.clear();
        for &i in chunk {
            queries.extend_from_slice(stored.row(i as usize));
        }
        let res = knn_flat(dt, &queries, d, &kopts)?;
        report.add_batch(&res);
        if let Some((rows, sample)) = &check {
            let at = b * batch;
            let local: Vec<usize> = sample
                .iter()
                .filter(|&&i| i >= at && i < at + chunk.len())
                .map(|&i| i - at)
                .collect();
            report.verified += verify::verify_result(rows, &queries, opts.metric, &res, &local)
                .map_err(|e| match e {
                    Error::Verification(m) => Error::Verification(format!(
                        "item {} (batch {b}): {m}",
                        chunk[local.first().copied().unwrap_or(0)]
                    )),
                    e => e,
                })?;
        }
        ids.clear();
        values.clear();
        for (q, &item) in chunk.iter().enumerate() {
            let before = ids.len();
            for (&id, &v) in res.ids_of(q).iter().zip(res.distances_of(q)) {
                if ids.len() - before == len {
                    break;
                }
                if id == NO_ID || id == item as i64 {
                    continue;
                }
                ids.push(id as u32);
                values.push(v);
            }
            if ids.len() - before != len {
                return Err(Error::Invalid(format!(
                    "internal: the k-NN search gave item {item} {} other items, expected {len}",
                    ids.len() - before
                )));
            }
        }
        sink(chunk, &ids, &values, len)?;
    }
    Ok(report)
}

/// `RankingsOptions::items` of a table of `n` items: each below n, none twice.
fn check_items(n: usize, items: &[u32]) -> Result<()> {
    let mut seen = vec![false; n];
    for &i in items {
        let slot = seen.get_mut(i as usize).ok_or_else(|| {
            Error::Invalid(format!(
                "item {i} is out of range for N = {n} items (0-based, below {n})"
            ))
        })?;
        if std::mem::replace(slot, true) {
            return Err(Error::Invalid(format!("item {i} is listed twice")));
        }
    }
    Ok(())
}

/// The algorithm name written in a rankings cache: `"<metric>-knn-v1"` (`"cosine-knn-v1"`).
pub fn algorithm_name(metric: Metric) -> String {
    format!("{}-knn-v1", metric.name())
}

/// Compute [`rankings`] and stream them into the user's rankings cache at `path` through
/// [`RankingsWriter`]: `{"metadata":{"total_poems":N,"algorithm":"cosine-knn-v1",
/// "format":"pre_sorted_rankings","top_k":K|null, "metric", "precision", "dim", "device",
/// …extra, "checksum"},"rankings":{"<id>":[id,…]}}` (`checksum`: the file's own, see
/// [`crate::cache::verify_checksum`]).
///
/// The writer is created first, so a bad output location fails before any device work and
/// leaves no file. `extra` is a JSON object (model name, …) or `null`; its fields come after
/// the ones written here and may not repeat any of them. `ids` are the keys/values written
/// (one per row, unique); `None` = the table's ids ([`Table::ids`]) when it has them, else
/// 0-based indices. Metadata holds nothing that depends on the batch size or timing, so the
/// file is byte-identical for every batch size. With `opts.items` the cache holds only those
/// items (`total_poems` still says N). `top_k` in the metadata is the requested value.
/// `threads` is the JSON writer's formatting thread count ([`RankingsWriter::set_threads`]);
/// `None` = the writer's default (the machine's available parallelism). The thread count
/// changes only the speed, never the bytes written.
pub fn write_rankings_cache(
    dt: &DeviceTable,
    table: &Table,
    path: &Path,
    opts: &RankingsOptions,
    extra: &Value,
    ids: Option<Vec<Value>>,
    threads: Option<usize>,
) -> Result<RankingsReport> {
    let n = dt.n();
    row_len(n, opts.top_k)?;
    let caps = dt.context().caps();
    let mut meta = serde_json::Map::new();
    meta.insert("metric".into(), opts.metric.name().into());
    meta.insert("precision".into(), dt.precision().name().into());
    meta.insert("dim".into(), dt.d().into());
    meta.insert("device".into(), caps.name.clone().into());
    match extra {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                if meta.contains_key(k) {
                    return Err(Error::Invalid(format!(
                        "{}: extra rankings metadata repeats the field {k:?}, which is written \
                         by write_rankings_cache (metric, precision, dim, device)",
                        path.display()
                    )));
                }
                meta.insert(k.clone(), v.clone());
            }
        }
        other => {
            return Err(Error::Invalid(format!(
                "{}: extra rankings metadata must be a JSON object or null, got {other}",
                path.display()
            )))
        }
    }
    let ids = ids.or_else(|| table.ids().map(|v| v.to_vec()));
    let mut w = RankingsWriter::create(
        path,
        n,
        opts.top_k,
        &algorithm_name(opts.metric),
        &Value::Object(meta),
        ids,
    )?;
    if let Some(t) = threads {
        w.set_threads(t);
    }
    let report = rankings(dt, table, opts, |items, flat, len| {
        w.write_batch(items, flat, len)
    })?;
    if opts.items.is_some() {
        w.finish_partial()?;
    } else {
        w.finish()?;
    }
    Ok(report)
}

/// The k-NN graph of the table — each item's `k` (default [`DEFAULT_GRAPH_K`]) nearest other
/// items and their similarities (cosine, inner product) or squared L2 distances — written to
/// `path` through [`KnnGraphWriter`] (created first: a bad location fails before device work).
/// Self is excluded by id, ties go to the lowest index; k must be ≤ N (the default is
/// min([`DEFAULT_GRAPH_K`], N)); when k = N rows end with one [`KNN_PAD`]. `batch`: items per batch, `None` = from the memory budget.
pub fn write_knn_graph(
    dt: &DeviceTable,
    table: &Table,
    path: &Path,
    k: Option<usize>,
    metric: Metric,
    batch: Option<usize>,
) -> Result<RankingsReport> {
    let n = dt.n();
    // The default is clamped to N; a k given is checked (1..=N) by the writer, before any file.
    let k = k.unwrap_or(DEFAULT_GRAPH_K.min(n));
    let kmetric = match metric {
        Metric::InnerProduct => KnnMetric::InnerProduct,
        Metric::Cosine => KnnMetric::Cosine,
        Metric::L2 => KnnMetric::L2,
    };
    let mut w = KnnGraphWriter::create(path, n, k, kmetric)?;
    let opts = RankingsOptions {
        top_k: Some(k),
        metric,
        batch,
        ..RankingsOptions::default()
    };
    let (mut pids, mut pvals) = (Vec::new(), Vec::new());
    let report = rankings_with_values(dt, table, &opts, |items, ids, values, len| {
        if len == k {
            return w.write_batch(items, ids, values);
        }
        pids.clear();
        pvals.clear();
        for i in 0..items.len() {
            pids.extend_from_slice(&ids[i * len..(i + 1) * len]);
            pids.resize((i + 1) * k, KNN_PAD);
            pvals.extend_from_slice(&values[i * len..(i + 1) * len]);
            pvals.resize((i + 1) * k, kmetric.pad_value());
        }
        w.write_batch(items, &pids, &pvals)
    })?;
    w.finish()?;
    Ok(report)
}

/// Rankings from an approximate search — an IVF index built over the same table — with the
/// semantics of [`rankings_with_values`] (rows of `min(top_k, N − 1)` other items, best first,
/// the item excluded by id, batches in the order of the items), but each row the best the
/// index finds rather than the exact best. `search(queries, widen)` searches row-major queries
/// of the table's dimension for `k` neighbours (the report's `knn_k`), `widen` = 0 normally;
/// an item whose probed lists hold fewer than `len` other items is searched again with `widen`
/// = 1, 2, … (the caller widens its nprobe by [`crate::ivf::widened_nprobe`], doubling it each
/// time up to every list), so every row is whole.
/// `stored` is the table as the index stores it (for fp16, [`Table::as_stored`]): an item is
/// its stored row, so it and its duplicates score the same. Errors: `top_k: None` (all N − 1:
/// use the exact search), `verify`, bad items, and the search's.
pub fn rankings_approx(
    stored: &Table,
    opts: &RankingsOptions,
    mut search: impl FnMut(&[f32], usize) -> Result<crate::knn::KnnResult>,
    mut sink: impl FnMut(&[u32], &[u32], &[f32], usize) -> Result<()>,
) -> Result<RankingsReport> {
    let n = stored.n();
    if opts.top_k.is_none() {
        return Err(Error::Invalid(
            "an approximate index ranks the top k of each item: give top_k (every item's whole \
             ranking needs the exact search)"
                .into(),
        ));
    }
    if opts.verify > 0 {
        return Err(Error::Invalid(
            "verify cross-checks the exact search; it does not apply to an approximate index"
                .into(),
        ));
    }
    let len = row_len(n, opts.top_k)?;
    let items = ranked_items(n, opts)?;
    let kk = (len + 1).min(n);
    let batch = opts.batch.unwrap_or(65_536).min(items.len()).max(1);
    let mut report = RankingsReport::before_batches(items.len(), len, kk, batch);
    // The other items of row `q` of `res`, best first, at most `len`.
    let others = |res: &crate::knn::KnnResult, q: usize, item: u32| -> Vec<(u32, f32)> {
        res.ids_of(q)
            .iter()
            .zip(res.distances_of(q))
            .filter(|(&id, _)| id != NO_ID && id != item as i64)
            .take(len)
            .map(|(&id, &v)| (id as u32, v))
            .collect()
    };
    let rows_of = |chunk: &[u32]| -> Vec<f32> {
        chunk
            .iter()
            .flat_map(|&i| stored.row(i as usize).iter().copied())
            .collect()
    };
    let (mut ids, mut values) = (Vec::new(), Vec::new());
    for chunk in items.chunks(batch) {
        let res = search(&rows_of(chunk), 0)?;
        report.add_batch(&res);
        let mut rows: Vec<Vec<(u32, f32)>> = chunk
            .iter()
            .enumerate()
            .map(|(q, &item)| others(&res, q, item))
            .collect();
        // Rows the probed lists could not fill: searched again, wider, until whole.
        let mut widen = 0;
        loop {
            let short: Vec<usize> = (0..chunk.len()).filter(|&q| rows[q].len() < len).collect();
            if short.is_empty() {
                break;
            }
            widen += 1;
            if widen > 64 {
                return Err(Error::Invalid(format!(
                    "internal: item {} still has fewer than {len} neighbours with every list \
                     probed",
                    chunk[short[0]]
                )));
            }
            let sub: Vec<u32> = short.iter().map(|&q| chunk[q]).collect();
            let res = search(&rows_of(&sub), widen)?;
            report.gpu_ns += res.gpu_ns;
            for (j, &q) in short.iter().enumerate() {
                rows[q] = others(&res, j, chunk[q]);
            }
        }
        ids.clear();
        values.clear();
        for row in &rows {
            ids.extend(row.iter().map(|e| e.0));
            values.extend(row.iter().map(|e| e.1));
        }
        sink(chunk, &ids, &values, len)?;
    }
    Ok(report)
}
