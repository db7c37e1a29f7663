//! What both inverted-file indexes carry, as Faiss GPU's `IVFBase`: the search options
//! ([`IvfSearch`], checked in one place), the search report ([`IvfSearchReport`]) and what a
//! call measures on the host, the `nprobe` widening rule of the IVF rankings
//! ([`widened_nprobe`]), the one interface the front ends see ([`InvertedFile`]), and the one
//! search skeleton ([`search_resident`]: the queries' copy, the coarse search, the list scan and
//! the read-back in one submission) over the [`ListScan`] that IVF-Flat (`flat.rs`) and IVF-PQ
//! (`ivfpq.rs`) implement. May touch the device context, the exact k-NN's kept search, the
//! kept device state of `resident.rs` and the crate's errors.

use super::coarse::Coarse;
use super::kmeans::{KMeans, KMeansOptions};
use super::resident::{self, Resident};
use super::scan::{Pass, ScanRun};
use super::{IvfFlat, IvfPq};
#[cfg(doc)]
use super::{IvfShards, MAX_SCAN_DIM, MAX_SCAN_K};
use crate::device::{Buffer, Context, HostOps};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::knn::{
    check_queries_sq, write_query_rows, KnnOptions, KnnPath, KnnResult, Metric, Prepared,
};
use crate::submit::Set;
use crate::table::Table;
use ash::vk;

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
    pub(super) fn check(&self, what: &str, metric: Metric) -> Result<()> {
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

/// What the IVF-Flat and IVF-PQ indexes both answer beside their [`IvfCore`], so a front end
/// (the Lua handles) writes each of these once; each method is the index's own method of that
/// name.
#[cfg_attr(not(feature = "lua"), allow(dead_code))]
pub(crate) trait InvertedFile: std::ops::Deref<Target = IvfCore> {
    /// Whether the index is trained (or was loaded).
    fn is_trained(&self) -> bool;
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
            fn is_trained(&self) -> bool {
                <$t>::is_trained(self)
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

/// The rows a search's probes scanned: `len(l)` (list l's rows) summed over `probes`, read
/// where they lie (IVF-Flat's and IVF-PQ's read-back buffers, no copy).
pub(crate) fn rows_scanned(probes: &[u32], len: impl Fn(usize) -> usize) -> u64 {
    probes.iter().map(|&l| len(l as usize) as u64).sum()
}

/// The lists the IVF rankings probe on their `widen`-th search of a row (0 the first):
/// `nprobe` doubled `widen` times (at most 2⁴⁰ times, saturating), at most `nlist`. The
/// rankings search a row again wider while its ranking is short of rows (too few rows in the
/// probed lists); with every list probed the search is exact, so the widening ends.
pub fn widened_nprobe(nprobe: usize, widen: usize, nlist: usize) -> usize {
    nprobe.saturating_mul(1 << widen.min(40)).min(nlist)
}

/// What both inverted-file indexes hold beside their lists — Faiss's `IVFBase` fields: the
/// context, the shape, the metric, the k-means options, the coarse quantizer, the rows added
/// and what a search keeps on the device — and the accessors both answer: [`IvfFlat`] and
/// [`IvfPq`] dereference to it.
pub struct IvfCore {
    /// What a search keeps on the device for the next one (made by the first search); first,
    /// so dropped before the tables its sets name.
    pub(super) resident: Option<Resident>,
    pub(super) ctx: Context,
    pub(super) d: usize,
    pub(super) nlist: usize,
    pub(super) metric: Metric,
    /// The k-means of training.
    pub(super) kmeans: KMeansOptions,
    /// The centroids and their device copy.
    pub(super) coarse: Coarse,
    pub(super) ntotal: usize,
}

impl IvfCore {
    /// An empty, untrained `what` index ("IVF", "IVF-PQ") of dimension `d` on `ctx`. Errors:
    /// D = 0, nlist = 0.
    pub(super) fn new(
        ctx: &Context,
        what: &str,
        (d, nlist, metric): (usize, usize, Metric),
        kmeans: &KMeansOptions,
    ) -> Result<IvfCore> {
        if d == 0 {
            return Err(Error::Invalid(format!("{what} index of dimension D = 0")));
        }
        if nlist == 0 {
            return Err(Error::Invalid(format!("{what} index needs nlist ≥ 1")));
        }
        Ok(IvfCore {
            resident: None,
            ctx: ctx.clone(),
            d,
            nlist,
            metric,
            kmeans: kmeans.clone(),
            coarse: Coarse::new(nlist, d),
            ntotal: 0,
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
    /// The nlist × D (coarse) centroids (empty until trained).
    pub fn centroids(&self) -> &[f32] {
        self.coarse.centroids()
    }

    /// Refuses `what` (training or added rows) of another dimension than the index's.
    pub(super) fn check_dim(&self, what: &str, t: &Table) -> Result<()> {
        if t.d() != self.d {
            return Err(Error::Invalid(format!(
                "{what} have dimension {}, the index {}",
                t.d(),
                self.d
            )));
        }
        Ok(())
    }
}

/// What the search skeleton ([`search`]) asks of an index beside its list scan and its
/// [`IvfCore`]: its own checks, and its lists made ready for a search — the part of Faiss's `IVFBase`
/// subclasses that is not the scan.
pub(super) trait IvfIndex: std::ops::Deref<Target = IvfCore> {
    /// The index's name in the shared checks' messages ("IVF", "IVF-PQ").
    const WHAT: &'static str;
    /// The index's list scan, borrowing its lists.
    type Scan<'a>: ListScan
    where
        Self: 'a;
    /// The coarse quantizer's metric.
    fn coarse_metric(&self) -> Metric;
    /// The index's own checks, after the shared ones ([`IvfSearch::check`]).
    fn check_search(&self, s: &IvfSearch) -> Result<()>;
    /// The lists ready for the scan of `q` (the slab built where it is not), or `None` where
    /// the index answered into `found` itself (no queries, nothing added, IVF-Flat's per-list
    /// path).
    fn lists<'a>(
        &'a mut self,
        q: &Queries,
        s: &IvfSearch,
        found: &mut Found,
    ) -> Result<Option<Lists<'a, Self::Scan<'a>>>>;
}

/// What an index hands the skeleton for the list scan: the kept device state, the context,
/// the coarse centroids on the device and the scan.
pub(super) struct Lists<'a, S> {
    pub resident: &'a mut Option<Resident>,
    pub ctx: &'a Context,
    pub coarse: &'a DeviceTable,
    pub scan: S,
}

/// A search's queries as the skeleton checked them, and the coarse search's options.
pub(super) struct Queries<'q> {
    /// As the caller gave them (`nq` rows of `dim`).
    pub raw: &'q [f32],
    pub dim: usize,
    pub nq: usize,
    /// The index's dimension and metric (what [`Queries::write`] writes them for).
    pub d: usize,
    pub metric: Metric,
    /// Their float64 squared norms ([`check_queries_sq`]).
    sq: Vec<f64>,
    /// The coarse search: k = nprobe (clamped to nlist) by the coarse quantizer's metric.
    pub coarse: KnnOptions,
}

impl Queries<'_> {
    /// The queries as the index sees them (unit rows for cosine) into `dst` (nq × D).
    pub fn write(&self, dst: &mut [f32]) {
        write_query_rows(self.raw, self.d, self.metric, &self.sq, dst)
    }
}

/// The one search of both indexes: the call measured ([`CallMeter`]) around [`search_counted`].
pub(super) fn search<I: IvfIndex>(
    ix: &mut I,
    queries: &[f32],
    dim: usize,
    s: &IvfSearch,
) -> Result<(KnnResult, IvfSearchReport)> {
    let meter = {
        let (ctx, resident) = (&ix.ctx, &ix.resident);
        CallMeter::start(ctx, resident)
    };
    let (out, mut report) = search_counted(ix, queries, dim, s)?;
    let (ctx, resident) = (&ix.ctx, &ix.resident);
    meter.finish(ctx, resident, &mut report);
    Ok((out, report))
}

/// The search skeleton: check the queries and the options, clamp nprobe, let the index ready
/// its lists, then the coarse search and the list scan in one submission where the coarse
/// search's query tile holds every query ([`search_resident`]), else the coarse results on the
/// host first ([`ListScan::scan_host`]); the index's list scan finishes the results.
fn search_counted<I: IvfIndex>(
    ix: &mut I,
    queries: &[f32],
    dim: usize,
    s: &IvfSearch,
) -> Result<(KnnResult, IvfSearchReport)> {
    let (d, nlist, metric) = (ix.d, ix.nlist, ix.metric);
    let (nq, sq) = check_queries_sq(d, queries, dim, &s.knn)?;
    s.check(I::WHAT, metric)?;
    ix.check_search(s)?;
    let nprobe = s.nprobe.min(nlist);
    let q = Queries {
        raw: queries,
        dim,
        nq,
        d,
        metric,
        sq,
        coarse: KnnOptions {
            k: nprobe,
            metric: ix.coarse_metric(),
            ..KnnOptions::default()
        },
    };
    let report = IvfSearchReport {
        nprobe,
        ..IvfSearchReport::default()
    };
    let out = KnnResult::started(s.knn.k, nq, KnnPath::Select { chunk: 0 }, false, 0);
    let mut found = (out, report);
    let Some(Lists {
        resident,
        ctx,
        coarse,
        scan,
    }) = ix.lists(&q, s, &mut found)?
    else {
        return Ok(found);
    };
    let one = match nq {
        0 => None,
        _ => search_resident(
            resident,
            ctx,
            coarse,
            &q.coarse,
            (nq, d),
            |dst| q.write(dst),
            &scan,
            scan.words(nq),
            &mut found.1,
        )?,
    };
    match one {
        Some(back) => {
            let out = &mut found.0;
            (out.path, out.subgroups, out.query_tile) = back.plan;
            scan.read_back(back, &q, &mut found)?;
        }
        None => scan.scan_host(coarse, &q, &mut found)?,
    }
    let (out, report) = &mut found;
    out.gpu_ns = report.coarse_ns + report.lists_ns;
    Ok(found)
}

/// A search's result and report as the list scan fills them.
pub(super) type Found = (KnnResult, IvfSearchReport);

/// What the one-submission search asks of an index's list scan: IVF-Flat's (`flat.rs`, over
/// [`super::scan::Slab`]) and IVF-PQ's (`pq_index.rs`, over [`super::pq_scan::PqSlab`] and its
/// device re-rank) — the part each index overrides, as Faiss's `IVFBase` subclasses do.
pub(super) trait ListScan {
    /// A pass recorded after the scan, before the read-back (IVF-PQ's re-rank), made each call.
    type After;
    /// The slab's buffers as its scan binds them (0, 1, 3, 4) and the slab's serial.
    fn slab(&self) -> ([(u32, &Buffer); 4], u64);
    /// Whether the scan reads the probes' coarse keys at binding 7 (IVF-PQ's inner product).
    fn binds_keys(&self) -> bool;
    /// The pass after the scan, if any (none by default): its set kept in `slot`, naming the queries and the results
    /// buffers of `bufs` (after their generation).
    fn after_pass(
        &self,
        slot: &mut Option<(Set, [u64; 3])>,
        ctx: &Context,
        bufs: (u64, &Buffer, &Buffer),
    ) -> Result<Option<Self::After>> {
        let _ = (slot, ctx, bufs);
        Ok(None)
    }
    /// Records the pass `after_pass` made.
    ///
    /// # Safety
    /// `cb` is recording; what the pass's set names outlives its execution.
    unsafe fn record_after(&self, cb: vk::CommandBuffer, pass: &Self::After) {
        let _ = (cb, pass);
    }
    /// Records and runs the scan `run` (the slab's `record_scan`). Returns the GPU nanoseconds
    /// before the submitter's mark and after it, and the dispatches.
    fn record(&self, run: ScanRun<impl Pass, impl Pass>) -> Result<(u64, u64, usize)>;
    /// The results buffer's words for `nq` queries, and the span read back before the probes.
    fn words(&self, nq: usize) -> Words;
    /// The one submission's read-back into `found`: its result and report, the rows scanned included.
    fn read_back(&self, back: ReadBack, q: &Queries, found: &mut Found) -> Result<()>;
    /// The search where the coarse search takes more than one query tile, or there are no
    /// queries: the coarse k-NN's results on the host, then the scan of the lists they name,
    /// into `found` (the report's GPU times, dispatches, the rows scanned, the coarse path).
    fn scan_host(&self, coarse: &DeviceTable, q: &Queries, found: &mut Found) -> Result<()>;
}

/// The coarse search's path, subgroups and query tile, as a result's.
pub(super) fn coarse_plan(probes: &KnnResult) -> (KnnPath, bool, usize) {
    (probes.path, probes.subgroups, probes.query_tile)
}

/// The words of a one-submission search: the results buffer's size, and the span of it read
/// back before the probes (from word `read_at`, `read` words).
pub(super) struct Words {
    pub out: usize,
    pub read_at: usize,
    pub read: usize,
}

/// What the one-submission search read back, in place in the read-back buffer: the results'
/// words, the probes (nprobe a query), and the coarse search's path, subgroups and query tile.
pub(super) struct ReadBack<'a> {
    pub results: &'a [u32],
    pub probes: &'a [u32],
    pub plan: (KnnPath, bool, usize),
}

/// The search both indexes share where the coarse search's query tile holds every query: one
/// submission with the queries' copy (`write_rows` writes them into the upload buffer), the
/// coarse k-NN (`copts`, k = nprobe) and the packing of its probes, the list scan reading them
/// there, the index's pass after it, and the copy of the results and the probes into the
/// read-back buffer — every buffer, the scratch and the sets kept in `resident` from the last
/// call. `None` (nothing recorded) where the coarse search takes more than one query tile: the
/// index then brings the coarse results to the host first. Fills the report's GPU times,
/// dispatches and `probes_on_device`.
#[allow(clippy::too_many_arguments)]
fn search_resident<'r, S: ListScan>(
    resident: &'r mut Option<Resident>,
    ctx: &Context,
    coarse: &DeviceTable,
    copts: &KnnOptions,
    (nq, d): (usize, usize),
    write_rows: impl FnOnce(&mut [f32]),
    scan: &S,
    words: Words,
    report: &mut IvfSearchReport,
) -> Result<Option<ReadBack<'r>>> {
    let nprobe = copts.k;
    if resident.is_none() {
        *resident = Some(Resident::new(ctx)?);
    }
    let res = resident.as_mut().expect("made above");
    let probe_words = nq * nprobe;
    let io = res.stage(
        nq * d,
        write_rows,
        (words.out * 4) as u64,
        ((words.read + probe_words) * 4) as u64,
    )?;
    let resident::Io {
        sub,
        coarse: kept,
        set: slot,
        rerank_set,
        up,
        queries: qbuf,
        out: obuf,
        down,
        gen,
        ctx,
    } = io;
    let Some(prep) = Prepared::new(coarse, qbuf, gen, nq, copts, kept)? else {
        return Ok(None);
    };
    if prep.ke() != nprobe {
        return Ok(None);
    }
    let packed = prep.packed();
    let (slab, serial) = scan.slab();
    let mut singles = slab.to_vec();
    singles.extend([(2, qbuf), (5, packed), (6, obuf)]);
    if scan.binds_keys() {
        singles.push((7, packed));
    }
    let set = resident::set_for(slot, ctx, [gen, serial, prep.scratch_gen()], &singles)?;
    let pass = scan.after_pass(rerank_set, ctx, (gen, qbuf, obuf))?;
    let dev = ctx.device();
    let mut failed = None;
    let before = |cb| unsafe {
        resident::record_upload(dev, cb, up, qbuf, (nq * d * 4) as u64);
        if let Err(e) = prep.record(cb) {
            failed = Some(e);
        }
    };
    let after = |cb| unsafe {
        if let Some(pass) = &pass {
            scan.record_after(cb, pass);
        }
        let (at, n, p) = (words.read_at * 4, words.read * 4, probe_words * 4);
        resident::record_readback(
            dev,
            cb,
            down,
            &[
                (obuf, at as u64, 0, n as u64),
                (packed, p as u64, n as u64, p as u64),
            ],
        )
    };
    let (coarse_ns, lists_ns, dispatches) = scan.record(ScanRun {
        sub,
        set,
        nq,
        nprobe,
        before: Some(before),
        after: Some(after),
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    (report.coarse_ns, report.lists_ns) = (coarse_ns, lists_ns);
    report.scan_dispatches = dispatches;
    report.probes_on_device = true;
    // Read in place from the read-back buffer.
    let (results, probes) = resident::words(down, 0, words.read + probe_words).split_at(words.read);
    Ok(Some(ReadBack {
        results,
        probes,
        plan: prep.plan_info(),
    }))
}
