//! The inverted file with flat (uncompressed) lists, Faiss's `IndexIVFFlat` (see the
//! [`crate::ivf`] documentation): train, add, search (the list scan of `scan.rs` in the
//! search skeleton of `index.rs`, or per list with the exact k-NN past its limits). May touch
//! the coarse quantizer, k-means, the list scan and its slab, the search skeleton, the exact
//! k-NN and the host table.

use super::coarse::index_rows;
use super::index::{self, Found, IvfCore, IvfIndex, ListScan, Lists, Queries, ReadBack, Words};
use super::kmeans::{self, KMeans, KMeansOptions};
use super::scan;
use super::scan::{Pass, ScanRun};
use super::{IvfSearch, IvfSearchReport};
use crate::device::{Buffer, Context};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::knn::{knn_flat, knn_resident, DeviceQueries, KnnOptions, KnnResult, Metric, NO_ID};

use crate::table::{Precision, Table};

/// How an [`IvfFlat`] is built.
#[derive(Clone, Debug)]
pub struct IvfOptions {
    /// Lists (k-means centroids).
    pub nlist: usize,
    /// Similarity or distance of the search (and of the coarse assignment).
    pub metric: Metric,
    /// Storage of the lists on the device.
    pub precision: Precision,
    /// The k-means of [`IvfFlat::train`].
    pub kmeans: KMeansOptions,
}

/// One inverted list: its rows' ids (ascending) and values, and their device copy.
#[derive(Default)]
pub(super) struct List {
    pub ids: Vec<i64>,
    pub data: Vec<f32>,
    dev: Option<DeviceTable>,
}

/// The inverted-file index with flat (uncompressed) lists (see the [`crate::ivf`]
/// documentation).
pub struct IvfFlat {
    /// The context, shape, metric, coarse quantizer, rows added and kept search state; first,
    /// so the kept search state is dropped before the tables its sets name.
    pub(super) core: IvfCore,
    pub(super) precision: Precision,
    pub(super) lists: Vec<List>,
    /// Every list on the device for the list scan; `None` until the first search (and while
    /// every list is empty), and again after an add that outgrew a list's room.
    slab: Option<scan::Slab>,
    /// Slab builds and in-place appends so far.
    slab_uploads: (usize, usize),
}

impl IvfFlat {
    /// An empty, untrained index of dimension `d` on `ctx`. Errors: D = 0, nlist = 0.
    pub fn new(ctx: &Context, d: usize, opts: &IvfOptions) -> Result<IvfFlat> {
        let shape = (d, opts.nlist, opts.metric);
        Ok(IvfFlat {
            core: IvfCore::new(ctx, "IVF", shape, &opts.kmeans)?,
            precision: opts.precision,
            lists: (0..opts.nlist).map(|_| List::default()).collect(),
            slab: None,
            slab_uploads: (0, 0),
        })
    }

    /// The lists' storage on the device.
    pub fn precision(&self) -> Precision {
        self.precision
    }
    /// Whether [`IvfFlat::train`] has run (or the index was loaded).
    pub fn is_trained(&self) -> bool {
        !self.coarse.centroids().is_empty()
    }
    /// Rows in each list.
    pub fn list_sizes(&self) -> Vec<usize> {
        self.lists.iter().map(|l| l.ids.len()).collect()
    }
    /// How the lists reached the device so far: whole builds of the slab (the first search, and
    /// the first search after an add that outgrew a list's room) and adds written in place.
    pub fn slab_uploads(&self) -> (usize, usize) {
        self.slab_uploads
    }
    /// The ids of list `l` (ascending).
    pub fn list_ids(&self, l: usize) -> &[i64] {
        &self.lists[l].ids
    }

    /// Train the coarse quantizer: k-means of `table`'s rows (normalised for cosine) into
    /// nlist centroids. Errors: the dimension, nlist > N, an index already trained.
    pub fn train(&mut self, table: &Table) -> Result<KMeans> {
        self.check_dim("training rows", table)?;
        if self.is_trained() {
            return Err(Error::Invalid(
                "the IVF index is already trained (make a new one to retrain)".into(),
            ));
        }
        let rows = index_rows(self.metric, table)?;
        self.core.resident = None;
        self.core
            .coarse
            .train(&self.core.ctx, &rows, &self.core.kmeans)
    }

    pub(super) fn set_centroids(&mut self, c: Vec<f32>) -> Result<()> {
        // The kept coarse scratch names the old centroids' table.
        self.core.resident = None;
        self.core.coarse.set(&self.core.ctx, c)
    }

    /// Add `table`'s rows: ids `ntotal`, `ntotal + 1`, … in row order, each in the list of
    /// its nearest centroid. Returns the first id. Errors: untrained, the dimension, a nonzero
    /// row whose norm at the index's precision is outside what fp32 arithmetic handles exactly
    /// ([`crate::table::check_row_norms`]).
    pub fn add(&mut self, table: &Table) -> Result<usize> {
        self.check_dim("added rows", table)?;
        table.check_norms(self.precision)?;
        let coarse = self.coarse.device().ok_or_else(untrained)?;
        let (lists, _, _) = kmeans::nearest(coarse, table.data(), self.d, self.metric)?;
        let first = self.ntotal;
        for (i, &l) in lists.iter().enumerate() {
            let list = &mut self.lists[l as usize];
            list.ids.push((first + i) as i64);
            list.data.extend_from_slice(table.row(i));
            list.dev = None;
        }
        self.core.ntotal += table.n();
        // Rows appended to lists that still have room on the device go there in place; else
        // the slab is built again on the next search.
        if let Some(slab) = self.slab.as_mut() {
            let views: Vec<(&[i64], &[f32])> = self
                .lists
                .iter()
                .map(|l| (l.ids.as_slice(), l.data.as_slice()))
                .collect();
            match slab.append(&views) {
                Ok(true) => self.slab_uploads.1 += 1,
                Ok(false) => self.slab = None,
                Err(e) => {
                    self.slab = None;
                    return Err(e);
                }
            }
        }
        Ok(first)
    }

    /// The `s.knn.k` nearest added rows of each query among the `s.nprobe` lists nearest to it
    /// (nprobe is clamped to nlist; see [`IvfSearch`] for what is checked; `k_factor` must be
    /// 1). With nprobe = nlist the result is bit for bit [`knn_flat`] on all the
    /// rows added, in this index's precision. The result's `path` and `query_tile` are the
    /// coarse search's.
    pub fn search(
        &mut self,
        queries: &[f32],
        dim: usize,
        s: &IvfSearch,
    ) -> Result<(KnnResult, IvfSearchReport)> {
        index::search(self, queries, dim, s)
    }

    /// Large k or D: the exact k-NN of each probed list with the queries that probe it, merged
    /// on the host by `(key, id)`.
    fn search_per_list(
        &mut self,
        q: &Queries,
        s: &IvfSearch,
        out: &mut KnnResult,
        report: &mut IvfSearchReport,
    ) -> Result<()> {
        let coarse = self.coarse.device().ok_or_else(untrained)?;
        let (queries, dim, nq, k) = (q.raw, q.dim, q.nq, s.knn.k);
        let probes = knn_flat(coarse, queries, dim, &q.coarse)?;
        report.coarse_ns = probes.gpu_ns;
        (out.path, out.subgroups, out.query_tile) = index::coarse_plan(&probes);
        let mut by_list: Vec<Vec<usize>> = vec![Vec::new(); self.nlist];
        for q in 0..nq {
            for &l in probes.ids_of(q) {
                report.rows_scanned += self.lists[l as usize].ids.len() as u64;
                by_list[l as usize].push(q);
            }
        }
        let neg = self.metric != Metric::L2;
        let mut pools: Vec<Vec<(f32, i64, f32)>> = vec![Vec::new(); nq];
        for (l, qs) in by_list.iter().enumerate() {
            if qs.is_empty() || self.lists[l].ids.is_empty() {
                continue;
            }
            let dt = self.device_list(l)?;
            let sub: Vec<f32> = qs
                .iter()
                .flat_map(|&q| queries[q * dim..(q + 1) * dim].iter().copied())
                .collect();
            let lopts = KnnOptions {
                verify: 0,
                ..s.knn.clone()
            };
            let r = knn_flat(dt, &sub, dim, &lopts)?;
            report.lists_ns += r.gpu_ns;
            let ids = &self.lists[l].ids;
            for (i, &q) in qs.iter().enumerate() {
                for (&id, &dist) in r.ids_of(i).iter().zip(r.distances_of(i)) {
                    if id != NO_ID {
                        let key = if neg { -dist } else { dist };
                        pools[q].push((key, ids[id as usize], dist));
                    }
                }
            }
        }
        out.gpu_ns = report.coarse_ns + report.lists_ns;
        let pad = pad(self.metric);
        for pool in &mut pools {
            pool.sort_unstable_by(|a, b| crate::multi::key_order((a.0, a.1), (b.0, b.1)));
            for i in 0..k {
                let (id, dist) = pool.get(i).map_or((NO_ID, pad), |e| (e.1, e.2));
                out.ids.push(id);
                out.distances.push(dist);
            }
        }
        Ok(())
    }

    /// List `l` on the device, uploaded if it changed since the last search.
    fn device_list(&mut self, l: usize) -> Result<&DeviceTable> {
        let list = &mut self.lists[l];
        if list.dev.is_none() {
            let t = Table::new(list.data.clone(), list.ids.len(), self.core.d)?;
            list.dev = Some(DeviceTable::upload(&self.core.ctx, &t, self.precision)?);
        }
        Ok(list.dev.as_ref().expect("uploaded above"))
    }
}

impl std::fmt::Debug for IvfFlat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IvfFlat")
            .field("d", &self.d)
            .field("nlist", &self.nlist)
            .field("ntotal", &self.ntotal)
            .field("metric", &self.metric)
            .field("precision", &self.precision)
            .field("trained", &self.is_trained())
            .finish()
    }
}

fn untrained() -> Error {
    Error::Invalid("the IVF index is not trained (train it first)".into())
}

/// A missing result's distance: −∞ for similarities, +∞ for L2.
fn pad(metric: Metric) -> f32 {
    if metric != Metric::L2 {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    }
}

impl IvfIndex for IvfFlat {
    const WHAT: &'static str = "IVF";
    type Scan<'a> = FlatScan<'a>;

    fn coarse_metric(&self) -> Metric {
        self.metric
    }

    fn check_search(&self, s: &IvfSearch) -> Result<()> {
        if s.k_factor != 1 {
            return Err(Error::Invalid(
                "the IVF-Flat search is exact and has no re-rank: k_factor must be 1".into(),
            ));
        }
        self.coarse.device().ok_or_else(untrained)?;
        Ok(())
    }

    fn lists<'a>(
        &'a mut self,
        q: &Queries,
        s: &IvfSearch,
        found: &mut Found,
    ) -> Result<Option<Lists<'a, FlatScan<'a>>>> {
        let (out, report) = found;
        let k = s.knn.k;
        if q.nq == 0 {
            return Ok(None);
        }
        if !scan::applies(k, self.d) {
            self.search_per_list(q, s, out, report)?;
            return Ok(None);
        }
        report.list_scan = true;
        if self.slab.is_none() {
            let lists: Vec<(&[i64], &[f32])> = self
                .lists
                .iter()
                .map(|l| (l.ids.as_slice(), l.data.as_slice()))
                .collect();
            self.slab = scan::Slab::build(&self.ctx, &lists, self.d, self.precision)?;
            self.slab_uploads.0 += 1;
        }
        let Some(slab) = &self.slab else {
            // Nothing added: every result is padding.
            out.ids = vec![NO_ID; q.nq * k];
            out.distances = vec![pad(self.metric); q.nq * k];
            return Ok(None);
        };
        Ok(Some(Lists {
            resident: &mut self.core.resident,
            ctx: &self.core.ctx,
            coarse: self.core.coarse.device().ok_or_else(untrained)?,
            scan: FlatScan {
                slab,
                lists: &self.lists,
                k,
                metric: self.core.metric,
            },
        }))
    }
}

/// IVF-Flat's list scan in the search skeleton: the slab's scan, nothing after it.
pub(super) struct FlatScan<'a> {
    slab: &'a scan::Slab,
    lists: &'a [List],
    k: usize,
    metric: Metric,
}

impl FlatScan<'_> {
    /// The list scan's `keys` and `ids` (k a query, +∞ and `u32::MAX` padding) into `out`'s
    /// distances and ids, and the rows the `probes` name into `report.rows_scanned`.
    fn finish(
        &self,
        out: &mut KnnResult,
        report: &mut IvfSearchReport,
        keys: &[f32],
        ids: &[u32],
        probes: &[u32],
    ) {
        let neg = self.metric != Metric::L2;
        let pad = pad(self.metric);
        report.rows_scanned = index::rows_scanned(probes, |l| self.lists[l].ids.len());
        out.ids.extend(
            ids.iter()
                .map(|&id| if id == u32::MAX { NO_ID } else { id as i64 }),
        );
        out.distances
            .extend(keys.iter().zip(ids).map(|(&key, &id)| match id {
                u32::MAX => pad,
                _ if neg => -key,
                _ => key,
            }));
    }
}

impl ListScan for FlatScan<'_> {
    type After = ();

    fn slab(&self) -> ([(u32, &Buffer); 4], u64) {
        (self.slab.bindings(), self.slab.serial)
    }

    fn binds_keys(&self) -> bool {
        false
    }

    fn record(&self, run: ScanRun<impl Pass, impl Pass>) -> Result<(u64, u64, usize)> {
        let probe_off = run.nq * run.nprobe;
        self.slab.record_scan(run, self.k, probe_off, self.metric)
    }

    fn words(&self, nq: usize) -> Words {
        let n = 2 * nq * self.k;
        Words {
            out: n,
            read_at: 0,
            read: n,
        }
    }

    fn read_back(&self, back: ReadBack, q: &Queries, found: &mut Found) -> Result<()> {
        let (out, report) = found;
        let (keys, ids) = back.results.split_at(q.nq * self.k);
        self.finish(out, report, bytemuck::cast_slice(keys), ids, back.probes);
        Ok(())
    }

    fn scan_host(&self, coarse: &DeviceTable, q: &Queries, found: &mut Found) -> Result<()> {
        let (out, report) = found;
        let ctx = coarse.context();
        let rows = DeviceQueries::upload(ctx, q.raw, q.d, q.metric)?;
        let probes = knn_resident(coarse, &rows, &q.coarse)?;
        report.coarse_ns = probes.gpu_ns;
        (out.path, out.subgroups, out.query_tile) = index::coarse_plan(&probes);
        let pr: Vec<u32> = probes.ids.iter().map(|&l| l as u32).collect();
        let nprobe = q.coarse.k;
        let so = self
            .slab
            .scan(rows.buffer(), q.nq, &pr, nprobe, self.k, self.metric)?;
        (report.lists_ns, report.scan_dispatches) = (so.gpu_ns, so.dispatches);
        self.finish(out, report, &so.keys, &so.ids, &pr);
        Ok(())
    }
}

impl std::ops::Deref for IvfFlat {
    type Target = IvfCore;
    fn deref(&self) -> &IvfCore {
        &self.core
    }
}
