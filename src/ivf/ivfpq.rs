//! The inverted file with product-quantized residuals, IVFADC (Faiss's `IndexIVFPQ`, M × 8
//! bits), and its optional exact re-rank (Faiss's `IndexRefineFlat` idea). May touch the coarse
//! quantizer, k-means, the product quantizer, its list scan (`pq_scan.rs`) and re-rank
//! (`pq_rerank.rs`), the exact k-NN and the host table.
//!
//! * **Train**: the coarse quantizer as [`super::IvfFlat`]'s (k-means of the rows into nlist
//!   centroids), then each training row's residual x − c(x) from its nearest centroid, and the
//!   [`ProductQuantizer`] trained on the residuals. At least 256 training rows.
//! * **Add**: each row to its nearest centroid's list, its residual encoded by the quantizer on
//!   the device (M bytes), ids 0, 1, … in the order added; with `keep_vectors` the rows are kept
//!   too (f32, on the host) for the re-rank.
//! * **Search**: the `nprobe` nearest centroids of each query (the device's k-NN), then one
//!   dispatch of `shaders/ivfpq_scan.comp` (see `pq_scan.rs`): a workgroup a query builds the
//!   lookup table of each probed list in shared memory and keeps the k best ADC keys. With
//!   `k_factor` > 1 the scan keeps k_factor × k candidates and they are re-ranked by their
//!   exact float64 distance to the kept rows (ties to the lower id), the k best returned with
//!   those distances rounded to f32: on the device, one more dispatch in the search's submission
//!   (`pq_rerank.rs`, the kept rows uploaded by id with the lists), else on the host — the same
//!   ids and distance bits either way.
//! * **Metrics**: L2 (residual tables); inner product the Faiss way by residual:
//!   q · x ≈ q · c + q · r̂, the q · c term from the coarse search; cosine is inner product on
//!   rows and queries scaled to unit length (float64 norms), the coarse quantizer then an inner
//!   product one on the unit rows.

use super::coarse::index_rows;
use super::index::{self, Found, IvfCore, IvfIndex, ListScan, Lists, Queries, ReadBack, Words};
use super::kmeans::{nearest, KMeans, KMeansOptions};
use super::pq::ProductQuantizer;
use super::pq_rerank::{self, KeptRows};
use super::pq_scan::PqSlab;
use super::scan::{Pass, ScanRun};
use super::{IvfSearch, IvfSearchReport, MAX_SCAN_K};
use crate::device::{Buffer, Context, Pipeline};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::knn::{knn_flat, KnnResult, Metric, NO_ID};
use crate::submit::Set;
use crate::table::{Precision, Table};
use ash::vk;
use std::sync::{Arc, OnceLock};

/// How an [`IvfPq`] is built.
#[derive(Clone, Debug)]
pub struct IvfPqOptions {
    /// Lists (k-means centroids).
    pub nlist: usize,
    /// Sub-quantizers (bytes a code); must divide D.
    pub m: usize,
    /// Similarity or distance of the search and the coarse assignment.
    pub metric: Metric,
    /// Keep the added rows (f32, host memory) for the exact re-rank (`k_factor` > 1).
    pub keep_vectors: bool,
    /// The k-means of the coarse quantizer and of each sub-space.
    pub kmeans: KMeansOptions,
}

/// One inverted list: ids (ascending), codes (M bytes a row), and the rows if kept.
#[derive(Default)]
pub(super) struct PqList {
    pub ids: Vec<i64>,
    pub codes: Vec<u8>,
    pub data: Vec<f32>,
}

/// The IVF-PQ index: train, add, search (ADC, optionally re-ranked), save, load (see the
/// [`crate::ivf`] documentation and `src/ivf/ivfpq.rs`).
pub struct IvfPq {
    /// The context, shape, metric, coarse quantizer, rows added and kept search state; first,
    /// so the kept search state is dropped before the tables its sets name.
    pub(super) core: IvfCore,
    pub(super) m: usize,
    pub(super) keep_vectors: bool,
    pub(super) pq: Option<ProductQuantizer>,
    pub(super) lists: Vec<PqList>,
    /// Per id, its list and position there.
    pub(super) loc: Vec<(u32, u32)>,
    slab: Option<PqSlab>,
    /// The kept rows on the device for the re-rank (made with the slab; `None` where the device
    /// re-rank cannot run).
    kept: Option<KeptRows>,
    /// Re-rank on the host even where the device can (the tests' comparison).
    host_rerank: bool,
}

impl IvfPq {
    /// An empty, untrained index of dimension `d` on `ctx`. Errors: D = 0, nlist = 0, M = 0 or
    /// M not dividing D.
    pub fn new(ctx: &Context, d: usize, opts: &IvfPqOptions) -> Result<IvfPq> {
        let core = IvfCore::new(ctx, "IVF-PQ", (d, opts.nlist, opts.metric), &opts.kmeans)?;
        super::kmeans_batch::check_shape(d, opts.m)?;
        Ok(IvfPq {
            core,
            m: opts.m,
            keep_vectors: opts.keep_vectors,
            pq: None,
            lists: (0..opts.nlist).map(|_| PqList::default()).collect(),
            loc: Vec::new(),
            slab: None,
            kept: None,
            host_rerank: false,
        })
    }

    /// Sub-quantizers (bytes a code).
    pub fn m(&self) -> usize {
        self.m
    }
    /// Whether the added rows are kept for the re-rank.
    pub fn keeps_vectors(&self) -> bool {
        self.keep_vectors
    }
    /// Re-rank (`k_factor` > 1) on the host even where the device can: the two return the
    /// same ids and distance bits (`pq_rerank.rs`); for tests and comparisons.
    #[doc(hidden)]
    pub fn set_host_rerank(&mut self, host: bool) {
        self.host_rerank = host;
    }
    /// Whether [`IvfPq::train`] has run (or the index was loaded).
    pub fn is_trained(&self) -> bool {
        self.pq.is_some()
    }
    /// The product quantizer (`None` until trained).
    pub fn pq(&self) -> Option<&ProductQuantizer> {
        self.pq.as_ref()
    }
    /// Whether the lists on the device carry Faiss's precomputed L2 tables (L2 indexes, from
    /// the first search on; none where nlist × M × 256 floats exceed 2 GiB,
    /// `DIVERSITY_PQ_TABLE_MAX_BYTES` or the device's buffer range: the scan then builds each
    /// probed list's table).
    pub fn precomputed_tables(&self) -> bool {
        self.slab.as_ref().is_some_and(|s| s.has_tables())
    }
    /// Rows in each list.
    pub fn list_sizes(&self) -> Vec<usize> {
        self.lists.iter().map(|l| l.ids.len()).collect()
    }
    /// The ids of list `l` (ascending).
    pub fn list_ids(&self, l: usize) -> &[i64] {
        &self.lists[l].ids
    }
    /// The codes of list `l` (M bytes a row, in the order of [`IvfPq::list_ids`]).
    pub fn list_codes(&self, l: usize) -> &[u8] {
        &self.lists[l].codes
    }

    /// The coarse quantizer's metric: inner product on unit rows for cosine.
    fn coarse_metric(&self) -> Metric {
        match self.metric {
            Metric::L2 => Metric::L2,
            _ => Metric::InnerProduct,
        }
    }

    /// Residuals x − c(list) of `rows`, and their lists.
    fn residuals(&self, rows: &[f32]) -> Result<(Vec<f32>, Vec<u32>)> {
        let coarse = self.coarse.device().ok_or_else(untrained)?;
        let (lists, _, _) = nearest(coarse, rows, self.d, self.coarse_metric())?;
        let d = self.d;
        let mut res = Vec::with_capacity(rows.len());
        for (r, &l) in rows.chunks_exact(d).zip(&lists) {
            let c = &self.coarse.centroids()[l as usize * d..(l as usize + 1) * d];
            res.extend(r.iter().zip(c).map(|(&x, &y)| x - y));
        }
        Ok((res, lists))
    }

    /// Train the coarse quantizer (k-means into nlist centroids) and the product quantizer (on
    /// the training rows' residuals). Returns the coarse k-means. Errors: the dimension, fewer
    /// than 256 rows, nlist > N, an index already trained.
    pub fn train(&mut self, table: &Table) -> Result<KMeans> {
        self.check_dim("training rows", table)?;
        if self.is_trained() {
            return Err(Error::Invalid(
                "the IVF-PQ index is already trained (make a new one to retrain)".into(),
            ));
        }
        if table.n() < super::pq::PQ_KSUB {
            return Err(Error::Invalid(format!(
                "IVF-PQ training needs at least 256 rows (the 256 centroids of each \
                 sub-quantizer), got {}",
                table.n()
            )));
        }
        let rows = index_rows(self.metric, table)?;
        self.core.resident = None;
        let km = self
            .core
            .coarse
            .train(&self.core.ctx, &rows, &self.core.kmeans)?;
        let (res, _) = self.residuals(rows.data())?;
        self.pq = Some(ProductQuantizer::train(
            &self.ctx,
            &res,
            self.d,
            self.m,
            &self.kmeans,
        )?);
        Ok(km)
    }

    /// Add `table`'s rows: ids `ntotal`, `ntotal + 1`, … in row order, each coded in the list
    /// of its nearest centroid. Returns the first id. Errors: untrained, the dimension, more
    /// than 2³² − 1 rows in all, a nonzero row whose norm is outside what fp32 arithmetic
    /// handles exactly ([`crate::table::check_row_norms`]).
    pub fn add(&mut self, table: &Table) -> Result<usize> {
        self.check_dim("added rows", table)?;
        let pq = self.pq.as_ref().ok_or_else(untrained)?;
        if (self.ntotal + table.n()) as u64 >= u32::MAX as u64 {
            return Err(Error::Invalid(format!(
                "IVF-PQ ids are below 2³² − 1: {} + {} rows is too many",
                self.ntotal,
                table.n()
            )));
        }
        let rows = index_rows(self.metric, table)?;
        rows.check_norms(Precision::Fp32)?;
        let (res, lists) = self.residuals(rows.data())?;
        let codes = pq.encode(&self.ctx, &res)?;
        let (first, m) = (self.ntotal, self.m);
        for (i, &l) in lists.iter().enumerate() {
            let list = &mut self.lists[l as usize];
            self.loc.push((l, list.ids.len() as u32));
            list.ids.push((first + i) as i64);
            list.codes.extend_from_slice(&codes[i * m..(i + 1) * m]);
            if self.keep_vectors {
                list.data.extend_from_slice(rows.row(i));
            }
        }
        if table.n() > 0 {
            self.slab = None;
        }
        self.core.ntotal += table.n();
        Ok(first)
    }

    /// The k nearest added rows of each query by their ADC distances among the `nprobe` lists
    /// nearest to it (re-ranked exactly with `k_factor` > 1 from the scan's k × k_factor best,
    /// in float64, on the device where it has float64, else on the host: the same bits). Distances are squared L2, or similarities (inner product, cosine);
    /// missing results are padded with [`NO_ID`] and ±∞. The result's `path` and `query_tile`
    /// are the coarse search's (which runs with the default k-NN options). Errors: the
    /// dimension, k = 0, those of [`IvfSearch`] (nprobe = 0, k_factor = 0, another metric,
    /// verify), k × k_factor > [`MAX_SCAN_K`], a re-rank without kept rows, untrained, the
    /// device's limits.
    pub fn search(
        &mut self,
        queries: &[f32],
        dim: usize,
        s: &IvfSearch,
    ) -> Result<(KnnResult, IvfSearchReport)> {
        index::search(self, queries, dim, s)
    }

    /// The lists (and, with `keep_vectors`, the kept rows by id for the re-rank on the device)
    /// on the device, if an add changed them since the last search.
    fn build_slab(&mut self) -> Result<()> {
        if self.slab.is_some() {
            return Ok(());
        }
        let lists: Vec<(&[i64], &[u8])> = self
            .lists
            .iter()
            .map(|l| (l.ids.as_slice(), l.codes.as_slice()))
            .collect();
        let pq = self.pq.as_ref().ok_or_else(untrained)?;
        let l2 = self.metric == Metric::L2;
        self.slab = Some(PqSlab::build(
            &self.ctx,
            &lists,
            self.coarse.centroids(),
            pq,
            l2,
        )?);
        // The kept rows by id, for the re-rank on the device (none where it cannot run).
        self.kept = None;
        if self.keep_vectors {
            let d = self.d;
            let mut by_id = vec![0f32; self.ntotal * d];
            for (row, &(l, i)) in by_id.chunks_exact_mut(d).zip(&self.loc) {
                let i = i as usize;
                row.copy_from_slice(&self.lists[l as usize].data[i * d..(i + 1) * d]);
            }
            self.kept = KeptRows::build(&self.ctx, &by_id, d)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for IvfPq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IvfPq")
            .field("d", &self.d)
            .field("nlist", &self.nlist)
            .field("m", &self.m)
            .field("ntotal", &self.ntotal)
            .field("metric", &self.metric)
            .field("trained", &self.is_trained())
            .finish()
    }
}

fn untrained() -> Error {
    Error::Invalid("the IVF-PQ index is not trained (train it first)".into())
}

impl IvfIndex for IvfPq {
    const WHAT: &'static str = "IVF-PQ";
    type Scan<'a> = PqScan<'a>;

    fn coarse_metric(&self) -> Metric {
        IvfPq::coarse_metric(self)
    }

    fn check_search(&self, s: &IvfSearch) -> Result<()> {
        let kk = s.knn.k.saturating_mul(s.k_factor);
        if kk > MAX_SCAN_K {
            return Err(Error::Invalid(format!(
                "IVF-PQ search keeps k × k_factor = {} × {} = {kk} candidates a query; the \
                 list scan keeps at most {MAX_SCAN_K}",
                s.knn.k, s.k_factor
            )));
        }
        if s.k_factor > 1 && !self.keep_vectors {
            return Err(Error::Invalid(
                "IVF-PQ re-rank (k_factor > 1) needs the rows: build the index with \
                 keep_vectors"
                    .into(),
            ));
        }
        if !self.is_trained() {
            return Err(untrained());
        }
        self.coarse.device().ok_or_else(untrained)?;
        Ok(())
    }

    fn lists<'a>(
        &'a mut self,
        q: &Queries,
        s: &IvfSearch,
        found: &mut Found,
    ) -> Result<Option<Lists<'a, PqScan<'a>>>> {
        let report = &mut found.1;
        self.build_slab()?;
        report.list_scan = true;
        let k = s.knn.k;
        let kk = k * s.k_factor;
        Ok(Some(Lists {
            resident: &mut self.core.resident,
            ctx: &self.core.ctx,
            coarse: self.core.coarse.device().ok_or_else(untrained)?,
            scan: PqScan {
                slab: self.slab.as_ref().expect("built above"),
                // The re-rank on the device where it runs (the kept rows there), else on the
                // host.
                kept: self
                    .kept
                    .as_ref()
                    .filter(|_| s.k_factor > 1 && !self.host_rerank),
                layout: pq_rerank::Layout::new(q.nq, kk, k),
                shape: (q.nq, kk, k),
                ip: self.core.metric != Metric::L2,
                lists: &self.lists,
                loc: &self.loc,
                rows: OnceLock::new(),
            },
        }))
    }
}

/// IVF-PQ's list scan in the search skeleton: the slab's scan of the codes, then, where the
/// rows are kept on the device and `k_factor` > 1, the exact re-rank of its candidates; else
/// the host's part (the scan's k best as they are, or re-ranked from its k × k_factor).
pub(super) struct PqScan<'a> {
    slab: &'a PqSlab,
    kept: Option<&'a KeptRows>,
    layout: pq_rerank::Layout,
    /// Queries, candidates kept a query (k × k_factor), results a query.
    shape: (usize, usize, usize),
    ip: bool,
    lists: &'a [PqList],
    /// Per id, its list and position there.
    loc: &'a [(u32, u32)],
    /// The queries as the index sees them, made only where the host needs them (the scan
    /// after the coarse results came back, the host re-rank).
    rows: OnceLock<Vec<f32>>,
}

impl PqScan<'_> {
    fn rows(&self, q: &Queries) -> &[f32] {
        self.rows.get_or_init(|| {
            let mut v = vec![0f32; q.nq * q.d];
            q.write(&mut v);
            v
        })
    }

    /// The device re-rank's k best: float64 distances rounded to f32 here, as the host
    /// re-rank rounds them.
    fn read_reranked(&self, results: &[u32], out: &mut KnnResult) {
        let (nq, _, k) = self.shape;
        let pad = pad(self.ip);
        let (dists, ids) = results.split_at(2 * nq * k);
        for (i, &id) in ids.iter().enumerate() {
            let (dist, id) = if id == u32::MAX {
                (pad, NO_ID)
            } else {
                let bits = dists[2 * i] as u64 | (dists[2 * i + 1] as u64) << 32;
                (f64::from_bits(bits) as f32, id as i64)
            };
            out.ids.push(id);
            out.distances.push(dist);
        }
    }

    /// The host's part: the scan's `keys` and `ids` (k × k_factor a query) as they are
    /// (k_factor 1), or re-ranked exactly on the host; and the rows the probes name.
    fn finish_host(
        &self,
        (keys, ids, probes): (&[f32], &[u32], &[u32]),
        q: &Queries,
        out: &mut KnnResult,
        report: &mut IvfSearchReport,
    ) {
        report.rows_scanned = index::rows_scanned(probes, |l| self.lists[l].ids.len());
        let (nq, kk, k) = self.shape;
        let (ip, pad) = (self.ip, pad(self.ip));
        if kk == k {
            // k_factor 1.
            for (qk, qi) in keys.chunks_exact(kk).zip(ids.chunks_exact(kk)) {
                let mut n = 0;
                for (&key, &id) in qk.iter().zip(qi).filter(|p| *p.1 != u32::MAX).take(k) {
                    out.ids.push(id as i64);
                    out.distances.push(if ip { -key } else { key });
                    n += 1;
                }
                out.ids.extend(std::iter::repeat_n(NO_ID, k - n));
                out.distances.extend(std::iter::repeat_n(pad, k - n));
            }
            return;
        }
        let (rows, d) = (self.rows(q), q.d);
        let best_of = |q: usize| -> Vec<(f32, u32)> {
            let cand = (0..kk)
                .map(|i| (keys[q * kk + i], ids[q * kk + i]))
                .filter(|&(_, id)| id != u32::MAX);
            self.rerank(&rows[q * d..(q + 1) * d], d, cand, k)
        };
        for best in &rerank_threads(nq, best_of) {
            for i in 0..k {
                let (dist, id) = best.get(i).map_or((pad, NO_ID), |&(v, id)| (v, id as i64));
                out.ids.push(id);
                out.distances.push(dist);
            }
        }
    }

    /// The k best of `cand` by the exact float64 distance (similarity) of `q` to the kept rows,
    /// ties to the lower id, as (distance rounded to f32, id).
    fn rerank(
        &self,
        q: &[f32],
        d: usize,
        cand: impl Iterator<Item = (f32, u32)>,
        k: usize,
    ) -> Vec<(f32, u32)> {
        let ip = self.ip;
        let mut scored: Vec<(f64, u32)> = cand
            .map(|(_, id)| {
                let x = self.row(id, d);
                let v: f64 = if ip {
                    q.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum()
                } else {
                    q.iter()
                        .zip(x)
                        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                        .sum()
                };
                (v, id)
            })
            .collect();
        scored.sort_by(|a, b| {
            let o = if ip {
                b.0.total_cmp(&a.0)
            } else {
                a.0.total_cmp(&b.0)
            };
            o.then(a.1.cmp(&b.1))
        });
        scored.truncate(k);
        scored.into_iter().map(|(v, id)| (v as f32, id)).collect()
    }

    /// The kept row of `id` (as the index holds it: unit length for cosine).
    fn row(&self, id: u32, d: usize) -> &[f32] {
        let (l, i) = self.loc[id as usize];
        let i = i as usize;
        &self.lists[l as usize].data[i * d..(i + 1) * d]
    }
}

/// `best_of` of every query of `nq`, in order. The re-rank reads kept rows scattered over the
/// index (memory-bound): the queries are split over the host's threads; each query's result
/// does not depend on the split. One thread: this one (a thread started a call costs a small
/// search more than its work).
fn rerank_threads(
    nq: usize,
    best_of: impl Fn(usize) -> Vec<(f32, u32)> + Sync,
) -> Vec<Vec<(f32, u32)>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(nq.div_ceil(256))
        .max(1);
    let per = nq.div_ceil(threads).max(1);
    if threads == 1 {
        return (0..nq).map(best_of).collect();
    }
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..nq)
            .step_by(per)
            .map(|q0| {
                let best_of = &best_of;
                sc.spawn(move || (q0..(q0 + per).min(nq)).map(best_of).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a re-rank thread panicked"))
            .collect()
    })
}

/// A missing result's distance: −∞ for similarities, +∞ for L2.
fn pad(ip: bool) -> f32 {
    if ip {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    }
}

impl ListScan for PqScan<'_> {
    type After = (Arc<Pipeline>, vk::DescriptorSet);

    fn slab(&self) -> ([(u32, &Buffer); 4], u64) {
        (self.slab.bindings(), self.slab.serial)
    }

    fn binds_keys(&self) -> bool {
        true
    }

    fn after_pass(
        &self,
        slot: &mut Option<(Set, [u64; 3])>,
        ctx: &Context,
        (gen, queries, out): (u64, &Buffer, &Buffer),
    ) -> Result<Option<Self::After>> {
        let Some(kr) = self.kept else {
            return Ok(None);
        };
        let bindings = [(0, kr.buffer()), (2, queries), (6, out)];
        let set = super::resident::set_for(slot, ctx, [gen, kr.serial, 0], &bindings)?;
        Ok(Some((kr.pipeline()?, set)))
    }

    unsafe fn record_after(&self, cb: vk::CommandBuffer, (pipe, set): &Self::After) {
        let (nq, kk, k) = self.shape;
        if let Some(kr) = self.kept {
            kr.record(cb, pipe, *set, nq, kk, k, self.ip, &self.layout);
        }
    }

    fn record(&self, run: ScanRun<impl Pass, impl Pass>) -> Result<(u64, u64, usize)> {
        let probe_off = run.nq * run.nprobe;
        self.slab
            .record_scan(run, self.shape.1, (probe_off, 0), self.ip)
    }

    /// The words read back first: the re-rank's k best (3 words a result), or the scan's
    /// candidates (2 a candidate); then the probes.
    fn words(&self, nq: usize) -> Words {
        let (_, kk, k) = self.shape;
        match self.kept {
            Some(_) => Words {
                out: self.layout.words,
                read_at: self.layout.res_keys,
                read: 3 * nq * k,
            },
            None => Words {
                out: 2 * nq * kk,
                read_at: 0,
                read: 2 * nq * kk,
            },
        }
    }

    fn read_back(&self, back: ReadBack, q: &Queries, found: &mut Found) -> Result<()> {
        let (out, report) = found;
        if self.kept.is_some() {
            self.read_reranked(back.results, out);
            report.rows_scanned = index::rows_scanned(back.probes, |l| self.lists[l].ids.len());
            report.rerank_on_device = true;
            return Ok(());
        }
        let (keys, ids) = back.results.split_at(q.nq * self.shape.1);
        let scanned = (bytemuck::cast_slice(keys), ids, back.probes);
        self.finish_host(scanned, q, out, report);
        Ok(())
    }

    fn scan_host(&self, coarse: &DeviceTable, q: &Queries, found: &mut Found) -> Result<()> {
        let (out, report) = found;
        let (ip, nprobe, kk) = (self.ip, q.coarse.k, self.shape.1);
        let probes = knn_flat(coarse, self.rows(q), q.d, &q.coarse)?;
        report.coarse_ns = probes.gpu_ns;
        (out.path, out.subgroups, out.query_tile) = index::coarse_plan(&probes);
        // The coarse key as the shaders keep it: minus the similarity for inner product.
        let pr: Vec<(u32, f32)> = probes
            .ids
            .iter()
            .zip(&probes.distances)
            .map(|(&l, &dist)| (l as u32, if ip { -dist } else { dist }))
            .collect();
        let so = self.slab.scan(self.rows(q), &pr, nprobe, kk, ip)?;
        (report.lists_ns, report.scan_dispatches) = (so.gpu_ns, so.dispatches);
        let probe_ids: Vec<u32> = pr.iter().map(|p| p.0).collect();
        self.finish_host((&so.keys, &so.ids, &probe_ids), q, out, report);
        Ok(())
    }
}

impl std::ops::Deref for IvfPq {
    type Target = IvfCore;
    fn deref(&self) -> &IvfCore {
        &self.core
    }
}
