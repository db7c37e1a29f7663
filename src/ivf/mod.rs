//! Approximate search the Faiss way: [`kmeans()`] on the device and the inverted-file indexes
//! [`IvfFlat`] (Faiss's `IndexIVFFlat`), saved and loaded by [`IvfFlat::save`] /
//! [`IvfFlat::load`] (the format is in `file.rs`), and [`IvfPq`] (Faiss's `IndexIVFPQ`, IVFADC,
//! with the [`ProductQuantizer`]; see `ivfpq.rs`, `pq.rs`, `pq_scan.rs`, `pq_file.rs`), and
//! [`IvfShards`], an IVF-Flat index over several devices (`shards.rs`). May touch the device
//! context, the device table, the exact k-NN, the host table and this folder's files.
//!
//! # IVF-Flat
//! *Train*: k-means of the training rows into `nlist` centroids (rows normalised first for
//! cosine, as spherical k-means does). *Add*: each row goes to the list of its nearest centroid
//! by the index's metric (the device's k-NN with k = 1 against the centroids) and gets the next
//! id (0, 1, … in the order added). *Search*: the `nprobe` nearest centroids of each query (the
//! device's exact k-NN with k = nprobe), then **one dispatch** that scans, for every query, the
//! rows of the lists it probes and keeps its k best (`scan.rs`, `shaders/ivf_scan.comp`: a
//! workgroup a query, the lists in one slab interleaved by blocks of 32 rows, a sorted queue of
//! at most 8 pairs per invocation and a workgroup merge, again over the same rows in the rare
//! case one invocation held more of the k best — Faiss GPU's IVF scan and block select).
//! A search is one submission (`resident.rs`, IVF-PQ's alike): the queries' copy, the coarse search and the
//! packing of its probes, the scan reading them there, and the copy of the keys, ids and probes
//! into a read-back buffer, read once after one wait — with every buffer, the coarse scratch
//! and the scan's descriptor set kept in the index from the last call. k ≤ [`MAX_SCAN_K`] and D ≤ [`MAX_SCAN_DIM`]; past them each probed list is searched
//! by the exact k-NN with the queries that probe it and the per-list k-lists merged on the host.
//!
//! The slab is built on the first search; every list gets room to grow (a quarter more, at least
//! a block of 32 rows), so a later add writes only the blocks that hold its new rows, their norms
//! and ids, and the lists' sizes; an add that outgrows a list's room makes the next search build
//! the slab again ([`IvfFlat::slab_uploads`] counts both).
//!
//! # Why nprobe = nlist is the exact search, bit for bit
//! A (query, row) key is one fused multiply-add chain from the stored row, the query and
//! (cosine) the row's own inverse norm — it does not depend on which other rows share the
//! device table (see [`crate::multi`]); the list scan computes it with the same chain. The scan
//! orders `(key, id)` pairs by the rows' ids, and its block select keeps the k best of a query's
//! candidates exactly under that order whatever invocation saw which; the per-list path's lists
//! hold their rows in ascending id order, so each list's k best under the device's order on
//! `(key, position)` are its k best on `(key, id)`, and the host merge sorts their union by
//! `(key, id)` (as [`crate::multi`] merges shards). With every list probed, either way, the
//! result is [`crate::knn::knn_flat`]'s on the whole table in the same precision: the same ids
//! and distance bits, ties and padding included.

mod coarse;
mod file;
mod ivfpq;
pub mod kmeans;
mod kmeans_batch;
pub mod pq;
mod pq_file;
mod pq_rerank;
mod pq_scan;
mod resident;
mod scan;
mod shards;
mod update;

pub use file::{IVF_MAGIC, IVF_VERSION};
pub use ivfpq::{IvfPq, IvfPqOptions};
pub use kmeans::{assign, kmeans, KMeans, KMeansOptions};
pub use kmeans_batch::kmeans_subspaces;
pub use pq::ProductQuantizer;
pub use pq_file::{IVFPQ_MAGIC, IVFPQ_VERSION};
pub use scan::{MAX_SCAN_DIM, MAX_SCAN_K};
pub use shards::IvfShards;

use crate::device::{Context, HostOps};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::knn::{
    check_queries_sq, knn_flat, knn_resident, write_query_rows, DeviceQueries, KnnOptions,
    KnnResult, Metric, Prepared, NO_ID,
};
use crate::table::{Precision, Table};
use coarse::{index_rows, Coarse};

/// Lists probed a query when the caller names no `nprobe` (both indexes, every front end).
pub const DEFAULT_NPROBE: usize = 1;

/// How an IVF index is searched: the one options struct of [`IvfFlat::search`],
/// [`IvfShards::search`] and [`IvfPq::search`] (and of both Lua handles' `search`).
#[derive(Clone, Debug)]
pub struct IvfSearch {
    /// Results a query (`k`) and the metric, which must be the index's; `verify` is refused.
    /// IVF-Flat's exact path for a large k or D also takes the k-NN tile options from here.
    pub knn: KnnOptions,
    /// Lists probed a query (≥ 1, clamped to nlist; [`DEFAULT_NPROBE`] by default).
    pub nprobe: usize,
    /// IVF-PQ: 1 keeps the ADC result; > 1 re-ranks k × k_factor ADC candidates exactly
    /// (needs `keep_vectors`). IVF-Flat is exact already and takes only 1.
    pub k_factor: usize,
}

impl IvfSearch {
    /// `nprobe` lists with the k-NN options `knn` (its k and metric), no re-rank.
    pub fn new(nprobe: usize, knn: KnnOptions) -> Self {
        IvfSearch {
            knn,
            nprobe,
            k_factor: 1,
        }
    }

    /// The checks both indexes make before any work: nprobe ≥ 1, k_factor ≥ 1, the index's
    /// metric, no verify. `what` names the index in messages ("IVF", "IVF-PQ").
    fn check(&self, what: &str, metric: Metric) -> Result<()> {
        if self.nprobe == 0 {
            return Err(Error::Invalid(format!("{what} search needs nprobe ≥ 1")));
        }
        if self.k_factor == 0 {
            return Err(Error::Invalid(format!("{what} search needs k_factor ≥ 1")));
        }
        if self.knn.metric != metric {
            return Err(Error::Invalid(format!(
                "search metric {} is not the index's ({})",
                self.knn.metric.name(),
                metric.name()
            )));
        }
        if self.knn.verify > 0 {
            return Err(Error::Invalid(format!(
                "verify is not supported by the {what} search (search a device table for it)"
            )));
        }
        Ok(())
    }
}

impl Default for IvfSearch {
    /// k = 10, cosine, [`DEFAULT_NPROBE`] lists, no re-rank.
    fn default() -> Self {
        IvfSearch::new(DEFAULT_NPROBE, KnnOptions::default())
    }
}

/// What the IVF-Flat and IVF-PQ indexes both answer, so a front end (the Lua handles) writes
/// each of these once; each method is the index's own method of that name.
#[cfg_attr(not(feature = "lua"), allow(dead_code))]
pub(crate) trait InvertedFile {
    /// Dimension D.
    fn d(&self) -> usize;
    /// Lists.
    fn nlist(&self) -> usize;
    /// Rows added.
    fn ntotal(&self) -> usize;
    /// The metric.
    fn metric(&self) -> Metric;
    /// Whether the index is trained (or was loaded).
    fn is_trained(&self) -> bool;
    /// The nlist × D coarse centroids (empty until trained).
    fn centroids(&self) -> &[f32];
    /// Rows in each list.
    fn list_sizes(&self) -> Vec<usize>;
    /// Train the index; returns the coarse k-means.
    fn train(&mut self, table: &Table) -> Result<KMeans>;
    /// Add rows; returns the first id.
    fn add(&mut self, table: &Table) -> Result<usize>;
    /// Write the index file.
    fn save(&self, path: &std::path::Path) -> Result<()>;
    /// The k nearest added rows of each query among the nearest lists.
    fn search(
        &mut self,
        queries: &[f32],
        dim: usize,
        s: &IvfSearch,
    ) -> Result<(KnnResult, IvfSearchReport)>;
}

macro_rules! inverted_file {
    ($t:ty) => {
        impl InvertedFile for $t {
            fn d(&self) -> usize {
                <$t>::d(self)
            }
            fn nlist(&self) -> usize {
                <$t>::nlist(self)
            }
            fn ntotal(&self) -> usize {
                <$t>::ntotal(self)
            }
            fn metric(&self) -> Metric {
                <$t>::metric(self)
            }
            fn is_trained(&self) -> bool {
                <$t>::is_trained(self)
            }
            fn centroids(&self) -> &[f32] {
                <$t>::centroids(self)
            }
            fn list_sizes(&self) -> Vec<usize> {
                <$t>::list_sizes(self)
            }
            fn train(&mut self, table: &Table) -> Result<KMeans> {
                <$t>::train(self, table)
            }
            fn add(&mut self, table: &Table) -> Result<usize> {
                <$t>::add(self, table)
            }
            fn save(&self, path: &std::path::Path) -> Result<()> {
                <$t>::save(self, path)
            }
            fn search(
                &mut self,
                queries: &[f32],
                dim: usize,
                s: &IvfSearch,
            ) -> Result<(KnnResult, IvfSearchReport)> {
                <$t>::search(self, queries, dim, s)
            }
        }
    };
}
inverted_file!(IvfFlat);
inverted_file!(IvfPq);

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
struct List {
    ids: Vec<i64>,
    data: Vec<f32>,
    dev: Option<DeviceTable>,
}

/// The inverted-file index with flat (uncompressed) lists (see the [module](self)
/// documentation).
pub struct IvfFlat {
    /// What a search keeps on the device for the next one (made by the first search); first,
    /// so dropped before the tables its sets name.
    resident: Option<resident::Resident>,
    ctx: Context,
    d: usize,
    nlist: usize,
    metric: Metric,
    precision: Precision,
    kmeans: KMeansOptions,
    /// The centroids and their device copy.
    coarse: Coarse,
    lists: Vec<List>,
    ntotal: usize,
    /// Every list on the device for the list scan; `None` until the first search (and while
    /// every list is empty), and again after an add that outgrew a list's room.
    slab: Option<scan::Slab>,
    /// Slab builds and in-place appends so far.
    slab_uploads: (usize, usize),
}

/// What [`IvfFlat::search`] did, beside its result.
#[derive(Clone, Debug, Default)]
pub struct IvfSearchReport {
    /// Lists probed per query (nprobe, at most nlist).
    pub nprobe: usize,
    /// Rows whose keys were computed, over all queries (the work nprobe = nlist would make
    /// N × queries).
    pub rows_scanned: u64,
    /// GPU nanoseconds of the coarse search.
    pub coarse_ns: u64,
    /// GPU nanoseconds of the list searches.
    pub lists_ns: u64,
    /// Whether the one-dispatch list scan ran (k ≤ [`MAX_SCAN_K`] and D ≤ [`MAX_SCAN_DIM`]);
    /// otherwise each probed list was searched by the exact k-NN and the results merged.
    pub list_scan: bool,
    /// Dispatches of the list scan (1 a query tile on a GPU; more where a device caps the loop
    /// iterations of an invocation, each carrying the k best to the next).
    pub scan_dispatches: usize,
    /// Whether the scan read the coarse search's results on the device (no round trip through
    /// the host; where one query tile of the coarse search holds every query).
    pub probes_on_device: bool,
    /// Whether IVF-PQ's exact re-rank (`k_factor` > 1) ran on the device, in the search's one
    /// submission (`false`: on the host, or no re-rank).
    pub rerank_on_device: bool,
    /// The host-side Vulkan work of the call (submissions, buffers, descriptor sets and
    /// pipelines created): what it cost beside the GPU's time.
    pub host_ops: HostOps,
    /// Wall nanoseconds of the call outside the one-submission path's queue submission and
    /// fence wait: the host's own work (the queries' preparation and copy, the recording, the
    /// results' unpacking). The whole call where that path did not run.
    pub host_ns: u64,
}

/// What a search call's report measures on the host ([`IvfSearchReport::host_ops`] and
/// [`IvfSearchReport::host_ns`]), for IVF-Flat and IVF-PQ alike: taken at the call's start,
/// written into its report at the end.
struct CallMeter {
    ops: HostOps,
    t0: std::time::Instant,
    /// The kept submitter's busy time at the start (0 before the first search makes it).
    busy0: u64,
}

impl CallMeter {
    fn start(ctx: &Context, resident: &Option<resident::Resident>) -> CallMeter {
        CallMeter {
            ops: ctx.host_ops(),
            t0: std::time::Instant::now(),
            busy0: resident.as_ref().map_or(0, |r| r.sub.busy_ns()),
        }
    }

    /// The context's Vulkan work since the start, and the wall nanoseconds since then less what
    /// the kept submitter spent submitting and waiting.
    fn finish(
        self,
        ctx: &Context,
        resident: &Option<resident::Resident>,
        report: &mut IvfSearchReport,
    ) {
        let busy = resident.as_ref().map_or(self.busy0, |r| r.sub.busy_ns()) - self.busy0;
        report.host_ops = ctx.host_ops() - self.ops;
        report.host_ns = (self.t0.elapsed().as_nanos() as u64).saturating_sub(busy);
    }
}

impl IvfFlat {
    /// An empty, untrained index of dimension `d` on `ctx`. Errors: D = 0, nlist = 0.
    pub fn new(ctx: &Context, d: usize, opts: &IvfOptions) -> Result<IvfFlat> {
        if d == 0 {
            return Err(Error::Invalid("IVF index of dimension D = 0".into()));
        }
        if opts.nlist == 0 {
            return Err(Error::Invalid("IVF index needs nlist ≥ 1".into()));
        }
        Ok(IvfFlat {
            ctx: ctx.clone(),
            d,
            nlist: opts.nlist,
            metric: opts.metric,
            precision: opts.precision,
            kmeans: opts.kmeans.clone(),
            coarse: Coarse::new(opts.nlist, d),
            lists: (0..opts.nlist).map(|_| List::default()).collect(),
            ntotal: 0,
            slab: None,
            slab_uploads: (0, 0),
            resident: None,
        })
    }

    /// Dimension D.
    pub fn d(&self) -> usize {
        self.d
    }
    /// Lists.
    pub fn nlist(&self) -> usize {
        self.nlist
    }
    /// Rows added.
    pub fn ntotal(&self) -> usize {
        self.ntotal
    }
    /// The metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }
    /// The lists' storage on the device.
    pub fn precision(&self) -> Precision {
        self.precision
    }
    /// Whether [`IvfFlat::train`] has run (or the index was loaded).
    pub fn is_trained(&self) -> bool {
        !self.coarse.centroids().is_empty()
    }
    /// The nlist × D centroids (empty until trained).
    pub fn centroids(&self) -> &[f32] {
        self.coarse.centroids()
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

    fn check_dim(&self, what: &str, t: &Table) -> Result<()> {
        if t.d() != self.d {
            return Err(Error::Invalid(format!(
                "{what} have dimension {}, the index {}",
                t.d(),
                self.d
            )));
        }
        Ok(())
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
        self.resident = None;
        self.coarse.train(&self.ctx, &rows, &self.kmeans)
    }

    pub(super) fn set_centroids(&mut self, c: Vec<f32>) -> Result<()> {
        // The kept coarse scratch names the old centroids' table.
        self.resident = None;
        self.coarse.set(&self.ctx, c)
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
        self.ntotal += table.n();
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
        let meter = CallMeter::start(&self.ctx, &self.resident);
        let (out, mut report) = self.search_counted(queries, dim, s)?;
        meter.finish(&self.ctx, &self.resident, &mut report);
        Ok((out, report))
    }

    fn search_counted(
        &mut self,
        queries: &[f32],
        dim: usize,
        s: &IvfSearch,
    ) -> Result<(KnnResult, IvfSearchReport)> {
        let opts = &s.knn;
        let (nq, sq) = check_queries_sq(self.d, queries, dim, opts)?;
        s.check("IVF", self.metric)?;
        if s.k_factor != 1 {
            return Err(Error::Invalid(
                "the IVF-Flat search is exact and has no re-rank: k_factor must be 1".into(),
            ));
        }
        let coarse = self.coarse.device().ok_or_else(untrained)?;
        let nprobe = s.nprobe.min(self.nlist);
        let copts = KnnOptions {
            k: nprobe,
            metric: self.metric,
            ..KnnOptions::default()
        };
        let k = opts.k;
        let neg = self.metric != Metric::L2;
        let pad = if neg {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
        let mut report = IvfSearchReport {
            nprobe,
            ..IvfSearchReport::default()
        };
        let mut out = KnnResult::started(k, nq, crate::knn::KnnPath::Select { chunk: 0 }, false, 0);
        if nq == 0 {
            return Ok((out, report));
        }
        if scan::applies(k, self.d) {
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
                out.ids = vec![NO_ID; nq * k];
                out.distances = vec![pad; nq * k];
                return Ok((out, report));
            };
            // One submission: the queries' copy, the coarse k-NN and the packing of its probes,
            // the list scan reading them there, and the results' copy into the read-back buffer
            // — every buffer, the scratch and the set kept in the index from the last call.
            if self.resident.is_none() {
                self.resident = Some(resident::Resident::new(&self.ctx)?);
            }
            let res = self.resident.as_mut().expect("made above");
            let results = nq * k;
            let (d, metric) = (self.d, self.metric);
            let io = res.stage(
                nq * d,
                |dst| write_query_rows(queries, d, metric, &sq, dst),
                (2 * results * 4) as u64,
                ((2 * results + nq * nprobe) * 4) as u64,
            )?;
            let resident::Io {
                sub,
                coarse: kept,
                set: slot,
                rerank_set: _,
                up,
                queries: qbuf,
                out: obuf,
                down,
                gen,
                ctx,
            } = io;
            match Prepared::new(coarse, qbuf, gen, nq, &copts, kept)? {
                Some(prep) if prep.ke() == nprobe => {
                    report.probes_on_device = true;
                    (out.path, out.subgroups, out.query_tile) = prep.plan_info();
                    let packed = prep.packed();
                    let mut singles = slab.bindings().to_vec();
                    singles.extend([(2, qbuf), (5, packed), (6, obuf)]);
                    let key = [gen, slab.serial, prep.scratch_gen()];
                    let set = resident::set_for(slot, ctx, key, &singles)?;
                    let dev = ctx.device();
                    let mut failed = None;
                    let before = |cb| unsafe {
                        resident::record_upload(dev, cb, up, qbuf, (nq * d * 4) as u64);
                        if let Err(e) = prep.record(cb) {
                            failed = Some(e);
                        }
                    };
                    let after = |cb| unsafe {
                        resident::record_readback(
                            dev,
                            cb,
                            down,
                            &[
                                (obuf, 0, 0, (2 * results * 4) as u64),
                                (
                                    packed,
                                    (nq * nprobe * 4) as u64,
                                    (2 * results * 4) as u64,
                                    (nq * nprobe * 4) as u64,
                                ),
                            ],
                        )
                    };
                    let (coarse_ns, lists_ns, dispatches) = slab.record_scan(
                        sub,
                        set,
                        nq,
                        nq * nprobe,
                        nprobe,
                        k,
                        self.metric,
                        Some(before),
                        Some(after),
                    )?;
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    (report.coarse_ns, report.lists_ns) = (coarse_ns, lists_ns);
                    report.scan_dispatches = dispatches;
                    // Read in place from the read-back buffer.
                    let w = resident::words(down, 0, 2 * results + nq * nprobe);
                    let (keys, rest) = w.split_at(results);
                    let (ids, probes) = rest.split_at(results);
                    Self::finish(
                        &self.lists,
                        self.metric,
                        &mut out,
                        &mut report,
                        bytemuck::cast_slice(keys),
                        ids,
                        probes,
                    );
                }
                _ => {
                    // The coarse search's results come back to the host, then the scan.
                    let rows = DeviceQueries::upload(&self.ctx, queries, self.d, self.metric)?;
                    let probes = knn_resident(coarse, &rows, &copts)?;
                    report.coarse_ns = probes.gpu_ns;
                    (out.path, out.subgroups, out.query_tile) =
                        (probes.path, probes.subgroups, probes.query_tile);
                    let pr: Vec<u32> = probes.ids.iter().map(|&l| l as u32).collect();
                    let so = slab.scan(rows.buffer(), nq, &pr, nprobe, k, self.metric)?;
                    (report.lists_ns, report.scan_dispatches) = (so.gpu_ns, so.dispatches);
                    Self::finish(
                        &self.lists,
                        self.metric,
                        &mut out,
                        &mut report,
                        &so.keys,
                        &so.ids,
                        &pr,
                    );
                }
            }
            out.gpu_ns = report.coarse_ns + report.lists_ns;
            return Ok((out, report));
        }
        let probes = knn_flat(coarse, queries, dim, &copts)?;
        report.coarse_ns = probes.gpu_ns;
        (out.path, out.subgroups, out.query_tile) =
            (probes.path, probes.subgroups, probes.query_tile);
        for q in 0..nq {
            for &l in probes.ids_of(q) {
                report.rows_scanned += self.lists[l as usize].ids.len() as u64;
            }
        }
        // Large k or D: the exact k-NN of each probed list with the queries that probe it,
        // merged on the host.
        let mut by_list: Vec<Vec<usize>> = vec![Vec::new(); self.nlist];
        for q in 0..nq {
            for &l in probes.ids_of(q) {
                by_list[l as usize].push(q);
            }
        }
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
                ..opts.clone()
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
        for pool in &mut pools {
            pool.sort_unstable_by(|a, b| crate::multi::key_order((a.0, a.1), (b.0, b.1)));
            for i in 0..k {
                let (id, dist) = pool.get(i).map_or((NO_ID, pad), |e| (e.1, e.2));
                out.ids.push(id);
                out.distances.push(dist);
            }
        }
        Ok((out, report))
    }

    /// The list scan's `keys` and `ids` (k a query, +∞ and `u32::MAX` padding) into `out`'s
    /// distances and ids, and the rows the `probes` name into `report.rows_scanned`.
    fn finish(
        lists: &[List],
        metric: Metric,
        out: &mut KnnResult,
        report: &mut IvfSearchReport,
        keys: &[f32],
        ids: &[u32],
        probes: &[u32],
    ) {
        let neg = metric != Metric::L2;
        let pad = if neg {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
        report.rows_scanned = rows_scanned(probes, |l| lists[l].ids.len());
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

    /// List `l` on the device, uploaded if it changed since the last search.
    fn device_list(&mut self, l: usize) -> Result<&DeviceTable> {
        let list = &mut self.lists[l];
        if list.dev.is_none() {
            let t = Table::new(list.data.clone(), list.ids.len(), self.d)?;
            list.dev = Some(DeviceTable::upload(&self.ctx, &t, self.precision)?);
        }
        Ok(list.dev.as_ref().expect("uploaded above"))
    }
}

/// The rows a search's probes scanned: `len(l)` (list l's rows) summed over `probes`, read
/// where they lie (IVF-Flat's and IVF-PQ's read-back buffers, no copy).
pub(crate) fn rows_scanned(probes: &[u32], len: impl Fn(usize) -> usize) -> u64 {
    probes.iter().map(|&l| len(l as usize) as u64).sum()
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
