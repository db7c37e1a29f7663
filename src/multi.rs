//! Several devices for one exact k-NN search, the Faiss way: [`IndexShards`] splits
//! the table, [`IndexReplicas`] splits the queries. Both give, bit for bit, what one device's
//! [`knn_flat`] gives on the whole table.
//! It may touch the device context, device tables and the exact k-NN search of [`mod@crate::knn`];
//! no sequence engine, no file format.
//!
//! # Shards (Faiss's `IndexShards`)
//! The table's rows are cut into contiguous slices, one per device (sizes in proportion to
//! optional weights, equal by default; a device whose slice is empty — N smaller than the
//! number of devices, or a weight of 0 — is skipped). Each device holds its slice and searches
//! it for every query, in its own thread; the partial k-lists (ids offset by the slice's first
//! row) are merged on the host by one more k-selection. Memory per device: 1 / devices of the
//! table. Use it when the table does not fit one device, or to split the distance work.
//!
//! # Replicas (Faiss's `IndexReplicas`)
//! Every device holds the whole table; the queries are cut into contiguous blocks, one per
//! device (by the same weights), searched in parallel and concatenated in order. Use it when the
//! table fits every device and there are many queries.
//!
//! # Why the bits are the same as on one device
//! The device computes every (query, row) key by one fused multiply-add chain over the
//! dimensions in ascending order from the stored row, the query and (cosine) the row's inverse
//! norm and the query's float64 normalisation — nothing that depends on which other rows are
//! on the device, on the row's position or on the tile. The inverse norm is computed per row
//! from that row's stored values alone (`Table::inverse_norms` on the fp32 or fp16-rounded
//! row, float64 sum, one rounding), so a slice's norms are the whole table's norms of the same
//! rows; fp16 rounding is per value. The device orders `(key, id)` pairs totally: ascending
//! key (`key = −distance` for inner product and cosine, `key = distance` for L2; the negation
//! is exact) and, at equal keys, the lowest id. The merge here sorts the shards' entries by the
//! same order with global ids, so the k best of the union of per-shard k-best lists are the k
//! best of the table, in the same order, with the same distance bits; padding (id
//! [`NO_ID`], −∞ for similarities, +∞ for L2) fills rows when k > N exactly as [`knn_flat`]
//! does. Replicas run the unchanged single-device search on each query block, and a query's
//! result does not depend on the other queries of its batch.
//!
//! Devices are opened with [`open_devices`]; `"0,0"` opens the same physical device twice as
//! two logical devices, which is how the multi-device code runs on one GPU or on lavapipe.
//!
//! [`knn_flat`]: crate::knn::knn_flat

use crate::device::{Context, ContextOptions};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
// check_queries: the checks of `knn_flat`, run once for all devices so that a bad query is
// named by its index in the whole batch, not in a device's block.
use crate::knn::{check_queries, knn_flat, KnnOptions, KnnResult, NO_ID};
use crate::metric::Metric;
use crate::table::{Precision, Table};
use std::cmp::Ordering;
use std::marker::PhantomData;
use std::sync::Mutex;

/// Open the devices that `spec` names, in its order, each as its own [`Context`]:
/// `all` (every device of [`Context::list_devices`]) or a comma-separated list whose items are
/// device selectors, each by [`crate::device::select_device`]'s rule (an index into
/// [`Context::list_devices`], a `GPU-…` UUID, or a part of one device's name: a name that
/// several devices share is refused). An item may repeat:
/// `"0,0"` opens device 0 twice, as two logical devices with their own queues and memory.
/// `validation` turns the validation layers on for every context (also on with
/// `DIVERSITY_VALIDATION=1`). Errors ([`Error::Invalid`]) name the offending item and list the
/// devices: an empty list or item, an index out of range, a name no device has or several have.
pub fn open_devices(spec: &str, validation: bool) -> Result<Vec<Context>> {
    let devices = Context::list_devices()?;
    let listing = || {
        crate::device::device_listing(
            devices
                .iter()
                .map(|d| format!("{}: {} ({})", d.index, d.name, d.uuid)),
        )
    };
    let trimmed = spec.trim();
    let indices: Vec<usize> = if trimmed.eq_ignore_ascii_case("all") {
        if devices.is_empty() {
            return Err(Error::NoDevice(
                "device list 'all': no Vulkan 1.2 device with a compute queue".into(),
            ));
        }
        (0..devices.len()).collect()
    } else {
        let items: Vec<&str> = trimmed.split(',').map(str::trim).collect();
        if items.iter().all(|s| s.is_empty()) {
            return Err(Error::Invalid(format!(
                "device list '{spec}' is empty: expected 'all' or a comma-separated list of \
                 device indices, UUIDs or names; devices: {}",
                listing()
            )));
        }
        let mut out = Vec::with_capacity(items.len());
        for (pos, item) in items.iter().enumerate() {
            if item.is_empty() {
                return Err(Error::Invalid(format!(
                    "device list '{spec}': item {pos} is empty; devices: {}",
                    listing()
                )));
            }
            let listed: Vec<(usize, String, String)> = devices
                .iter()
                .map(|d| (d.index, d.name.clone(), d.uuid.clone()))
                .collect();
            let i = crate::device::select_device(item, &listed)
                .map_err(|e| Error::Invalid(format!("device list '{spec}': {e}")))?;
            out.push(i);
        }
        out
    };
    indices
        .into_iter()
        .enumerate()
        .map(|(slot, i)| {
            Context::new(&ContextOptions {
                device: Some(i.to_string()),
                validation,
            })
            .map_err(|e| on_device(slot, &devices[i].name, e))
        })
        .collect()
}

/// Contiguous ranges `(start, end)` cutting `n` items into `parts` pieces in proportion to
/// `weights` (one finite weight ≥ 0 per part, not all 0; `None` = equal): piece i ends at
/// `round(n · (w₀ + … + wᵢ) / Σw)`, the last at n. A piece may be empty (n < parts, or a weight
/// of 0).
pub fn split_ranges(
    n: usize,
    parts: usize,
    weights: Option<&[f64]>,
) -> Result<Vec<(usize, usize)>> {
    if parts == 0 {
        return Err(Error::Invalid("no devices given".into()));
    }
    let w: Vec<f64> = match weights {
        None => vec![1.0; parts],
        Some(w) => {
            if w.len() != parts {
                return Err(Error::Invalid(format!(
                    "{} weights for {parts} devices",
                    w.len()
                )));
            }
            if let Some(i) = w.iter().position(|v| !v.is_finite() || *v < 0.0) {
                return Err(Error::Invalid(format!(
                    "weight {i} is {}: weights must be finite and ≥ 0",
                    w[i]
                )));
            }
            w.to_vec()
        }
    };
    let total: f64 = w.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return Err(Error::Invalid(format!(
            "the weights {w:?} sum to {total}: at least one must be > 0 (and the sum finite)"
        )));
    }
    let mut out = Vec::with_capacity(parts);
    let (mut cum, mut start) = (0.0f64, 0usize);
    for (i, &x) in w.iter().enumerate() {
        cum += x;
        let end = if i + 1 == parts {
            n
        } else {
            ((n as f64 * cum / total).round() as usize).clamp(start, n)
        };
        out.push((start, end));
        start = end;
    }
    Ok(out)
}

/// What each device did in a multi-device search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiReport {
    /// GPU nanoseconds of each device (0 for a skipped device or without timestamps); the
    /// result's `gpu_ns` is their maximum, the devices running side by side.
    pub per_device_ns: Vec<u64>,
    /// Each device's range `(start, end)`: table rows for [`IndexShards`], queries for
    /// [`IndexReplicas`]; empty for a skipped device.
    pub ranges: Vec<(usize, usize)>,
}

impl MultiReport {
    /// The report of the devices' `parts` (`None`: a skipped device, 0 ns), each one's time
    /// given by `ns`, over `ranges`.
    pub(crate) fn of<T>(
        parts: &[Option<T>],
        ns: impl Fn(&T) -> u64,
        ranges: Vec<(usize, usize)>,
    ) -> MultiReport {
        MultiReport {
            per_device_ns: parts.iter().map(|p| p.as_ref().map_or(0, &ns)).collect(),
            ranges,
        }
    }

    /// The largest device time: the search's GPU time, the devices running side by side.
    pub(crate) fn max_ns(&self) -> u64 {
        self.per_device_ns.iter().copied().max().unwrap_or(0)
    }
}

/// The k-NN results of the devices that ran (`parts`, `None` for a skipped device), each with
/// the first row of its slice (`ranges`), as [`merge`] takes them; `knn` picks the k-NN result
/// out of a device's part.
pub(crate) fn shard_results<'a, T>(
    parts: &'a [Option<T>],
    ranges: &[(usize, usize)],
    knn: impl Fn(&'a T) -> &'a KnnResult,
) -> Vec<(usize, &'a KnnResult)> {
    parts
        .iter()
        .zip(ranges)
        .filter_map(|(p, r)| p.as_ref().map(|p| (r.0, knn(p))))
        .collect()
}

/// The sharded search's result: the shards' k-lists `ran` (at least one) merged by [`merge`]
/// for `nq` queries, with the first shard's path, subgroups and query tile, the report's
/// largest device time and `verified` queries.
pub(crate) fn merged(
    ran: &[(usize, &KnnResult)],
    nq: usize,
    opts: &KnnOptions,
    report: &MultiReport,
    verified: usize,
) -> KnnResult {
    let first = ran[0].1;
    let (ids, distances) = merge(ran, nq, opts.k, opts.metric);
    KnnResult {
        k: opts.k,
        queries: nq,
        ids,
        distances,
        path: first.path,
        subgroups: first.subgroups,
        query_tile: first.query_tile,
        gpu_ns: report.max_ns(),
        verified,
    }
}

/// Refuses, before any upload and naming the table's row, a `table` that cannot be stored at
/// `precision`: values out of the fp16 range, rows of a norm fp32 cannot handle exactly.
fn check_storable(table: &Table, precision: Precision) -> Result<()> {
    if precision == Precision::Fp16 {
        table.to_f16_bits_checked()?;
    }
    table.check_norms(precision)
}

/// How a [`MultiIndex`] spreads one search over its devices: [`Rows`] ([`IndexShards`]) or
/// [`Queries`] ([`IndexReplicas`]).
pub trait Layout {
    /// Each device holds a slice of the table's rows (else the whole table, and the queries
    /// are split).
    const SPLITS_ROWS: bool;
}

/// [`IndexShards`]' layout: contiguous row slices of the table, one per device.
pub struct Rows;
/// [`IndexReplicas`]' layout: the whole table on every device, contiguous query blocks.
pub struct Queries;

impl Layout for Rows {
    const SPLITS_ROWS: bool = true;
}
impl Layout for Queries {
    const SPLITS_ROWS: bool = false;
}

/// A table over several devices (see the [module](self) documentation), as [`IndexShards`]
/// (row slices, Faiss's `IndexShards`) or [`IndexReplicas`] (the whole table everywhere, the
/// queries split, Faiss's `IndexReplicas`). Search with [`MultiIndex::knn`].
pub struct MultiIndex<L: Layout> {
    /// Each device's table: its row slice (`None`: an empty slice) or the whole table.
    tables: Vec<Option<DeviceTable>>,
    names: Vec<String>,
    /// Each device's table rows (row slices; with whole tables, every entry is empty).
    ranges: Vec<(usize, usize)>,
    /// The weights the queries are split by (whole tables).
    weights: Option<Vec<f64>>,
    n: usize,
    d: usize,
    precision: Precision,
    layout: PhantomData<L>,
}

/// A table split into contiguous row slices over several devices (Faiss's `IndexShards`; see
/// the [module](self) documentation).
pub type IndexShards = MultiIndex<Rows>;

/// The whole table on every device, the queries split between them (Faiss's
/// `IndexReplicas`; see the [module](self) documentation).
pub type IndexReplicas = MultiIndex<Queries>;

impl<L: Layout> MultiIndex<L> {
    /// Upload `table` at `precision`, one copy per context (all in parallel): its row slices
    /// sized by `weights` ([`IndexShards`]), or the whole table, `weights` then sizing each
    /// device's share of the queries ([`IndexReplicas`]); see [`split_ranges`], `None` =
    /// equal. Bad weights, values out of the fp16 range and rows of a norm fp32 cannot handle
    /// exactly ([`crate::table::check_row_norms`]) are refused before any upload, naming the
    /// table's row; a device's failure names the device (its position in `ctxs` and its
    /// name).
    pub fn new(
        ctxs: &[Context],
        table: &Table,
        precision: Precision,
        weights: Option<&[f64]>,
    ) -> Result<Self> {
        let (n, d) = (table.n(), table.d());
        // Whole tables: only the weights are checked here.
        let rows = if L::SPLITS_ROWS { n } else { 0 };
        let ranges = split_ranges(rows, ctxs.len(), weights)?;
        check_storable(table, precision)?;
        let names = names(ctxs);
        let tables = parallel(ctxs, |i, ctx| -> Result<Option<DeviceTable>> {
            if !L::SPLITS_ROWS {
                return DeviceTable::upload(ctx, table, precision).map(Some);
            }
            let (s, e) = ranges[i];
            if s == e {
                return Ok(None);
            }
            let slice = Table::new(table.data()[s * d..e * d].to_vec(), e - s, d)?;
            DeviceTable::upload(ctx, &slice, precision).map(Some)
        });
        let tables = first_error(tables, &names)?;
        Ok(MultiIndex {
            tables,
            names,
            ranges,
            weights: weights.map(<[f64]>::to_vec),
            n,
            d,
            precision,
            layout: PhantomData,
        })
    }

    /// [`MultiIndex::new`] and one [`MultiIndex::knn`]: upload, search, merge or concatenate.
    /// Identical (ids and distance bits) to [`knn_flat`] on one device holding `table`. The
    /// queries are checked before any upload.
    pub fn knn_once(
        ctxs: &[Context],
        table: &Table,
        precision: Precision,
        queries: &[f32],
        dim: usize,
        opts: &KnnOptions,
        weights: Option<&[f64]>,
    ) -> Result<(KnnResult, MultiReport)> {
        check_queries(table.d(), queries, dim, opts)?;
        Self::new(ctxs, table, precision, weights)?.knn(queries, dim, opts)
    }

    /// Rows N of the whole table.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Dimension D.
    pub fn d(&self) -> usize {
        self.d
    }
    /// Storage precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// k-NN of row-major `queries` (dimension `dim`) against the whole table, every device in
    /// its own thread. Row slices: every device searches its slice, then the k-lists are
    /// merged on the host (ties to the lowest global id, padding past N). Whole tables:
    /// contiguous query blocks, one per device, concatenated in order. Identical, ids and
    /// distance bits, to [`knn_flat`] on one device holding the whole table. The result's
    /// `gpu_ns` is the maximum over the devices; `path`, `subgroups` and `query_tile` are
    /// those of the first device that ran.
    ///
    /// [`knn_flat`]: crate::knn::knn_flat
    pub fn knn(
        &self,
        queries: &[f32],
        dim: usize,
        opts: &KnnOptions,
    ) -> Result<(KnnResult, MultiReport)> {
        let nq = check_queries(self.d, queries, dim, opts)?;
        if L::SPLITS_ROWS {
            let parts = parallel(&self.tables, |_, shard| match shard {
                None => Ok(None),
                Some(dt) => knn_flat(dt, queries, dim, opts).map(Some),
            });
            let parts = first_error(parts, &self.names)?;
            let report = MultiReport::of(&parts, |r| r.gpu_ns, self.ranges.clone());
            let ran = shard_results(&parts, &self.ranges, |r| r);
            // N ≥ 1: some slice is not empty. Every shard checked the same queries against its
            // own rows.
            let verified = ran.iter().map(|(_, p)| p.verified).min().unwrap_or(0);
            return Ok((merged(&ran, nq, opts, &report, verified), report));
        }
        let ranges = split_ranges(nq, self.tables.len(), self.weights.as_deref())?;
        let parts = parallel(&self.tables, |i, dt| {
            let (s, e) = ranges[i];
            // With no queries at all, device 0 still answers (an empty result with its path).
            if s == e && !(nq == 0 && i == 0) {
                return Ok(None);
            }
            let dt = dt.as_ref().unwrap_or_else(|| unreachable!());
            knn_flat(dt, &queries[s * dim..e * dim], dim, opts).map(Some)
        });
        let parts = first_error(parts, &self.names)?;
        let report = MultiReport::of(&parts, |r| r.gpu_ns, ranges);
        let mut ran = parts.into_iter().flatten();
        let mut result = ran.next().unwrap_or_else(|| unreachable!());
        for r in ran {
            result.ids.extend_from_slice(&r.ids);
            result.distances.extend_from_slice(&r.distances);
        }
        result.queries = nq;
        result.gpu_ns = report.max_ns();
        Ok((result, report))
    }
}

impl IndexShards {
    /// Each device's table rows `(start, end)` (empty: the device holds nothing).
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges
    }
}

pub(crate) fn names(ctxs: &[Context]) -> Vec<String> {
    ctxs.iter().map(|c| c.caps().name.clone()).collect()
}

/// `f(i, item)` for every item, each in its own scoped thread; results in order.
fn parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .iter()
            .enumerate()
            .map(|(i, item)| s.spawn(move || f(i, item)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// The results, or the first device's error (in device order), naming that device.
pub(crate) fn first_error<R>(results: Vec<Result<R>>, names: &[String]) -> Result<Vec<R>> {
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| on_device(i, &names[i], e)))
        .collect()
}

/// `e` with "device `index` (`name`)" in its message, keeping its variant.
fn on_device(index: usize, name: &str, e: Error) -> Error {
    let who = format!("device {index} ({name})");
    match e {
        Error::Invalid(s) => Error::Invalid(format!("{who}: {s}")),
        Error::Limit(s) => Error::Limit(format!("{who}: {s}")),
        Error::Verification(s) => Error::Verification(format!("{who}: {s}")),
        Error::NoDevice(s) => Error::NoDevice(format!("{who}: {s}")),
        Error::DeviceLost(s) => Error::DeviceLost(format!("{s} on {who}")),
        Error::Unsupported { device, what } => Error::Unsupported {
            device: format!("device {index} ({device})"),
            what,
        },
        Error::Vulkan { call, result } => Error::Vulkan {
            call: intern(format!("{call} on {who}")),
            result,
        },
        Error::Alloc {
            what,
            bytes,
            reason,
        } => Error::Alloc {
            what,
            bytes,
            reason: format!("{reason}, on {who}"),
        },
        Error::Format { path, reason } => Error::Format {
            path,
            reason: format!("{who}: {reason}"),
        },
        Error::Io { path, source } => Error::Io {
            path,
            source: std::io::Error::new(source.kind(), format!("{who}: {source}")),
        },
    }
}

/// A `'static` copy of `s` (`Error::Vulkan` names its call by a `&'static str`), each distinct
/// string leaked once.
fn intern(s: String) -> &'static str {
    static SEEN: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&old) = seen.iter().find(|&&old| old == s) {
        return old;
    }
    let new: &'static str = Box::leak(s.into_boxed_str());
    seen.push(new);
    new
}

/// The device's total order on `(key, id)`: ascending key, then ascending id. A NaN key (only
/// from float overflow) goes after every number, so the order stays total.
pub(crate) fn key_order(a: (f32, i64), b: (f32, i64)) -> Ordering {
    let by_key = match (a.0.is_nan(), b.0.is_nan()) {
        (false, false) => a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal),
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
    };
    by_key.then(a.1.cmp(&b.1))
}

/// Merge the shards' k-lists (`(first row of the shard, its result)`) of `nq` queries into the
/// global k best per query: ids offset to global rows, entries ordered by the device's order
/// (key = −distance for similarities, distance for L2; ties to the lowest id), padded with
/// [`NO_ID`] and ∓∞ past the available rows. Distances are passed through untouched.
pub(crate) fn merge(
    parts: &[(usize, &KnnResult)],
    nq: usize,
    k: usize,
    metric: Metric,
) -> (Vec<i64>, Vec<f32>) {
    let neg = metric != Metric::L2;
    let pad = if neg {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    };
    let mut ids = Vec::with_capacity(nq * k);
    let mut distances = Vec::with_capacity(nq * k);
    let mut pool: Vec<(f32, i64, f32)> = Vec::with_capacity(parts.len() * k);
    for q in 0..nq {
        pool.clear();
        for (start, r) in parts {
            for (&id, &dist) in r.ids_of(q).iter().zip(r.distances_of(q)) {
                if id != NO_ID {
                    let key = if neg { -dist } else { dist };
                    pool.push((key, id + *start as i64, dist));
                }
            }
        }
        pool.sort_unstable_by(|a, b| key_order((a.0, a.1), (b.0, b.1)));
        for i in 0..k {
            match pool.get(i) {
                Some(&(_, id, dist)) => {
                    ids.push(id);
                    distances.push(dist);
                }
                None => {
                    ids.push(NO_ID);
                    distances.push(pad);
                }
            }
        }
    }
    (ids, distances)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knn::KnnPath;

    fn result(k: usize, ids: Vec<i64>, distances: Vec<f32>) -> KnnResult {
        KnnResult {
            k,
            queries: ids.len() / k,
            ids,
            distances,
            path: KnnPath::Select { chunk: 256 },
            subgroups: false,
            query_tile: 1,
            gpu_ns: 0,
            verified: 0,
        }
    }

    #[test]
    fn split_is_contiguous_and_proportional() {
        assert_eq!(split_ranges(5, 2, None).unwrap(), vec![(0, 3), (3, 5)]);
        assert_eq!(split_ranges(1, 2, None).unwrap(), vec![(0, 1), (1, 1)]);
        assert_eq!(split_ranges(0, 3, None).unwrap(), vec![(0, 0); 3]);
        assert_eq!(
            split_ranges(10, 3, Some(&[1.0, 0.0, 3.0])).unwrap(),
            vec![(0, 3), (3, 3), (3, 10)]
        );
        assert_eq!(
            split_ranges(10, 2, Some(&[0.0, 1.0])).unwrap(),
            vec![(0, 0), (0, 10)]
        );
        let e = split_ranges(4, 2, Some(&[1.0])).unwrap_err().to_string();
        assert_eq!(e, "1 weights for 2 devices");
        let e = split_ranges(4, 2, Some(&[1.0, -1.0]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("weight 1 is -1"), "{e}");
        let e = split_ranges(4, 2, Some(&[0.0, 0.0]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least one must be > 0"), "{e}");
        assert!(split_ranges(4, 0, None).is_err());
    }

    #[test]
    fn merge_orders_ties_by_global_id_and_pads() {
        // Cosine: key = -distance. Shard 0 (rows 0..2) and shard 1 (rows 2..4), k = 3.
        let a = result(3, vec![1, 0, NO_ID], vec![0.5, 0.0, f32::NEG_INFINITY]);
        let b = result(3, vec![0, 1, NO_ID], vec![0.5, -0.0, f32::NEG_INFINITY]);
        let (ids, d) = merge(&[(0, &a), (2, &b)], 1, 3, Metric::Cosine);
        assert_eq!(ids, vec![1, 2, 0]);
        assert_eq!(d, vec![0.5, 0.5, 0.0]);
        // -0.0 and 0.0 tie (as on the device): the lower id first, the bits kept.
        let (ids, d) = merge(&[(0, &a), (2, &b)], 1, 4, Metric::Cosine);
        assert_eq!(ids, vec![1, 2, 0, 3]);
        assert_eq!(d[3].to_bits(), (-0.0f32).to_bits());
        // L2, k past N.
        let a = result(2, vec![0, NO_ID], vec![2.0, f32::INFINITY]);
        let b = result(2, vec![0, NO_ID], vec![1.0, f32::INFINITY]);
        let (ids, d) = merge(&[(0, &a), (1, &b)], 1, 2, Metric::L2);
        assert_eq!((ids, d), (vec![1, 0], vec![1.0, 2.0]));
        let (ids, d) = merge(&[(0, &a), (1, &b)], 1, 3, Metric::L2);
        assert_eq!((ids, d), (vec![1, 0, NO_ID], vec![1.0, 2.0, f32::INFINITY]));
    }

    #[test]
    fn device_errors_name_the_device() {
        let e = on_device(1, "llvmpipe", Error::Invalid("bad".into()));
        assert_eq!(e.to_string(), "device 1 (llvmpipe): bad");
        let e = on_device(
            0,
            "GPU",
            Error::Unsupported {
                device: "GPU".into(),
                what: "fp16".into(),
            },
        );
        assert_eq!(e.to_string(), "unsupported on device 0 (GPU): fp16");
        let e = on_device(
            2,
            "GPU",
            Error::Vulkan {
                call: "vkQueueSubmit",
                result: ash::vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            },
        );
        assert!(e
            .to_string()
            .starts_with("Vulkan vkQueueSubmit on device 2 (GPU) failed"));
        let e = on_device(3, "GPU", Error::DeviceLost("k-NN".into()));
        assert_eq!(
            e.to_string(),
            "Vulkan device lost during k-NN on device 3 (GPU)"
        );
    }
}
