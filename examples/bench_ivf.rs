//! The IVF benchmark: k-means and IVF-Flat on the device against the exact search, with the
//! same queries and ground truth written out for the Faiss peer (`bench/ivf_peer.py`).
//!
//! ```text
//! cargo run --release --example bench_ivf -- --table FILE [--dim D] [--n N]
//!     [--queries sample:Q | tail:Q | FILE.f32] [--k 10] [--metric l2|ip|cosine] [--precision fp32|fp16]
//!     [--nlist L] [--nprobe 1,4,16] [--iters 20] [--seed 1234] [--train-max 256]
//!     [--dump-queries Q.f32] [--dump-table T.f32] [--dump-gt GT.i32] [--save INDEX.ivf] [--json OUT.json]
//!     [--label NAME] [--no-full] [--pq M [--refine F]] [--latency NPROBE [--calls C]]
//! ```
//!
//! The GPU is warmed up (a second of the exact search, then of the widest IVF search) before
//! the timed runs. Prints: the exact search (the ground truth: `diversity::knn`, WarpSelect where it applies)
//! and its time; k-means (`IvfFlat::train`: iterations, the objective entering the first and
//! the last iteration, and the final centroids' objective over all N rows as given — the
//! number Faiss's is compared with; for cosine the peer's rows are normalised, the same for
//! unit-norm embeddings); add; then per nprobe the search's wall and GPU time, queries/s, rows
//! scanned, 1-recall@1 (the true nearest is first), 1-recall@k (it is among the k) and
//! k-recall@k (|returned ∩ true k| / k). `--queries sample:Q` takes Q rows of the table spread
//! evenly (every ⌊N/Q⌋-th row), `tail:Q` holds the last Q rows out of the table as queries
//! (`--dump-table` writes the table that remains, for the peer); `--dump-queries`/`--dump-gt` write them (f32, row-major) and
//! the exact ids (i32, row-major) for the peer. An index built with nprobe = nlist must
//! reproduce the ground truth exactly: the run fails (exit 1) if it does not (`--no-full` skips
//! that search).
//!
//! `--pq M` builds IVF-PQ instead (`IvfPq`: M sub-quantizers × 8 bits on the residuals, the
//! same coarse k-means) and prints per nprobe its ADC search, and with `--refine F` (F > 1) also
//! the search re-ranked exactly from F × k candidates (`k_factor`; the rows are kept).
//!
//! `--latency NPROBE` also measures one search call's wall time, for 1 query and for 16 (the
//! first queries), at nprobe NPROBE (and with `--pq`, for the ADC search and the re-ranked one):
//! the median and the 90th percentile over C calls (`--calls`, 200 by default) after 20 calls of
//! warm-up, beside the call's GPU time and its host-side Vulkan work (submissions, buffers,
//! descriptor sets and pipelines created a call) and the host's own time (`host_ns`: the call's
//! wall time outside its submission and fence wait); printed as `latency` lines and written to
//! the JSON's `latency` list. The per-nprobe rows carry that host time too.

mod common;
use diversity::ivf::{
    assign, IvfFlat, IvfOptions, IvfPq, IvfPqOptions, IvfSearch, IvfSearchReport, KMeansOptions,
};
use diversity::knn::{knn_flat, KnnOptions, KnnResult, Metric};
use diversity::{files, Context, ContextOptions, DeviceTable, Precision, Table};
use std::time::Instant;

struct Args {
    table: String,
    dim: Option<usize>,
    n: Option<usize>,
    queries: String,
    k: usize,
    metric: Metric,
    precision: Precision,
    nlist: Option<usize>,
    nprobe: Vec<usize>,
    kmeans: KMeansOptions,
    dump_queries: Option<String>,
    dump_table: Option<String>,
    dump_gt: Option<String>,
    save: Option<String>,
    json: Option<String>,
    label: String,
    no_full: bool,
    pq: Option<usize>,
    refine: usize,
    latency: Option<usize>,
    calls: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        table: String::new(),
        dim: None,
        n: None,
        queries: "sample:1000".into(),
        k: 10,
        metric: Metric::L2,
        precision: Precision::Fp32,
        nlist: None,
        nprobe: vec![1, 4, 16],
        kmeans: KMeansOptions::default(),
        dump_queries: None,
        dump_table: None,
        dump_gt: None,
        save: None,
        json: None,
        label: "workload".into(),
        no_full: false,
        pq: None,
        refine: 1,
        latency: None,
        calls: 200,
    };
    let mut it = common::Cli::new(include_str!("bench_ivf.rs"));
    while let Some(f) = it.flag()? {
        let mut val = || it.value().ok_or(format!("{f} needs a value"));
        // Each number at least the smallest that means anything (iters 0: the initial
        // centroids; train-max 0: no cap).
        let min = |v: String, m: usize| common::int_min::<usize>(&f, &v, m);
        match f.as_str() {
            "--table" => a.table = val()?,
            "--dim" => a.dim = Some(min(val()?, 1)?),
            "--n" => a.n = Some(min(val()?, 1)?),
            "--queries" => a.queries = val()?,
            "--k" => a.k = min(val()?, 1)?,
            "--metric" => a.metric = val()?.parse().map_err(|e| format!("--metric: {e}"))?,
            "--precision" => {
                a.precision = val()?.parse().map_err(|e| format!("--precision: {e}"))?
            }
            "--nlist" => a.nlist = Some(min(val()?, 1)?),
            "--nprobe" => a.nprobe = common::int_list("--nprobe", &val()?, 1)?,
            "--iters" => a.kmeans.iters = min(val()?, 0)?,
            "--seed" => a.kmeans.seed = common::int_min(&f, &val()?, 0u64)?,
            "--train-max" => a.kmeans.max_points_per_centroid = min(val()?, 0)?,
            "--dump-queries" => a.dump_queries = Some(val()?),
            "--dump-gt" => a.dump_gt = Some(val()?),
            "--dump-table" => a.dump_table = Some(val()?),
            "--save" => a.save = Some(val()?),
            "--json" => a.json = Some(val()?),
            "--label" => a.label = val()?,
            "--no-full" => a.no_full = true,
            "--pq" => a.pq = Some(min(val()?, 1)?),
            "--refine" => a.refine = min(val()?, 1)?,
            "--latency" => a.latency = Some(min(val()?, 1)?),
            "--calls" => a.calls = min(val()?, 1)?,
            _ => return Err(format!("unknown argument {f}")),
        }
    }
    if a.table.is_empty() {
        return Err("--table FILE is required".into());
    }
    Ok(a)
}

/// The queries: `sample:Q` (Q rows spread evenly over the table), `tail:Q` (the last Q rows,
/// which are then left out of the table: held-out queries) or an f32 file.
fn queries(spec: &str, t: &mut Table) -> Result<Table, String> {
    if let Some(q) = spec.strip_prefix("tail:") {
        let q: usize = q
            .parse()
            .map_err(|_| format!("--queries {spec}: not a number"))?;
        if q == 0 || q >= t.n() {
            return Err(format!("--queries {spec}: needs 1 ≤ Q < N = {}", t.n()));
        }
        let keep = t.n() - q;
        let qs = Table::new(t.data()[keep * t.d()..].to_vec(), q, t.d());
        *t = t.head(keep).map_err(|e| e.to_string())?;
        return qs.map_err(|e| e.to_string());
    }
    if let Some(q) = spec.strip_prefix("sample:") {
        let q: usize = q
            .parse()
            .map_err(|_| format!("--queries {spec}: not a number"))?;
        if q == 0 || q > t.n() {
            return Err(format!("--queries {spec}: needs 1 ≤ Q ≤ N = {}", t.n()));
        }
        let step = t.n() / q;
        let data = (0..q).flat_map(|i| t.row(i * step).to_vec()).collect();
        return Table::new(data, q, t.d()).map_err(|e| e.to_string());
    }
    files::load_f32(std::path::Path::new(spec), t.d()).map_err(|e| e.to_string())
}

/// 1-recall@1, 1-recall@k and k-recall@k of `got` against the exact `gt`.
fn recall(got: &KnnResult, gt: &KnnResult) -> (f64, f64, f64) {
    let (mut r1, mut rk, mut inter) = (0usize, 0usize, 0usize);
    for q in 0..gt.queries {
        let (g, t) = (got.ids_of(q), gt.ids_of(q));
        r1 += (g[0] == t[0]) as usize;
        rk += g.contains(&t[0]) as usize;
        inter += g.iter().filter(|id| **id >= 0 && t.contains(id)).count();
    }
    let nq = gt.queries.max(1) as f64;
    (
        r1 as f64 / nq,
        rk as f64 / nq,
        inter as f64 / (nq * gt.k as f64),
    )
}

/// The `--latency` rows of one kind of search: for 1 and 16 queries (the first of `q`), 20
/// calls of warm-up, then `calls` timed ones; the median and 90th-percentile wall time a call,
/// the median GPU time, and one call's host-side work. Printed and returned as JSON objects.
fn latency(
    what: &str,
    q: &Table,
    calls: usize,
    mut search: impl FnMut(&[f32]) -> diversity::Result<(KnnResult, IvfSearchReport)>,
) -> Result<Vec<String>, String> {
    let d = q.d();
    let mut rows = Vec::new();
    for nq in [1usize, 16] {
        let nq = nq.min(q.n());
        let qs = &q.data()[..nq * d];
        let first = search(qs).map_err(|e| e.to_string())?;
        for _ in 0..20 {
            search(qs).map_err(|e| e.to_string())?;
        }
        let (mut wall, mut gpu) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
        let mut host = Vec::with_capacity(calls);
        let mut last = None;
        for _ in 0..calls {
            let t0 = Instant::now();
            let got = search(qs).map_err(|e| e.to_string())?;
            wall.push(t0.elapsed().as_secs_f64());
            gpu.push(got.1.coarse_ns + got.1.lists_ns);
            host.push(got.1.host_ns);
            last = Some(got);
        }
        let (r, rep) = last.expect("at least one call");
        if r.ids != first.0.ids || r.distances != first.0.distances {
            return Err(format!("{what}, {nq} queries: two calls differ"));
        }
        wall.sort_by(f64::total_cmp);
        gpu.sort_unstable();
        host.sort_unstable();
        let (med, p90) = (wall[calls / 2], wall[(calls * 9 / 10).min(calls - 1)]);
        let (g, h) = (gpu[calls / 2], host[calls / 2]);
        let o = rep.host_ops;
        println!(
            "latency {what} {nq:>2} queries  wall median {:.3} ms  p90 {:.3} ms  gpu {:.3} ms  \
             host {:.3} ms  \
             a call: {} submissions, {} buffers, {} descriptor sets, {} pipelines created",
            med * 1e3,
            p90 * 1e3,
            g as f64 * 1e-6,
            h as f64 * 1e-6,
            o.submissions,
            o.buffers,
            o.descriptor_sets,
            o.pipelines
        );
        rows.push(format!(
            "{{\"search\":{what:?},\"queries\":{nq},\"calls\":{calls},\"wall_median_s\":{med},\
             \"wall_p90_s\":{p90},\"gpu_median_ns\":{g},\"host_median_ns\":{h},\"submissions\":{},\"buffers\":{},\
             \"descriptor_sets\":{},\"pipelines\":{}}}",
            o.submissions, o.buffers, o.descriptor_sets, o.pipelines
        ));
    }
    Ok(rows)
}

fn write_le<T: Copy>(path: &str, v: &[T], bytes: impl Fn(T) -> [u8; 4]) -> Result<(), String> {
    let b: Vec<u8> = v.iter().flat_map(|&x| bytes(x)).collect();
    common::write_out(path, b)
}

fn run(a: Args) -> Result<(), String> {
    let err = |e: diversity::Error| e.to_string();
    // The outputs are checked before anything is loaded or any device work.
    let mut inputs = common::table_inputs("--table", std::path::Path::new(&a.table));
    if !a.queries.starts_with("sample:") && !a.queries.starts_with("tail:") {
        inputs.push(("--queries".into(), a.queries.clone().into()));
    }
    common::check_outputs(
        &common::given(&[
            ("--dump-queries", a.dump_queries.as_ref()),
            ("--dump-table", a.dump_table.as_ref()),
            ("--dump-gt", a.dump_gt.as_ref()),
            ("--save", a.save.as_ref()),
            ("--json", a.json.as_ref()),
        ]),
        &inputs,
    )?;
    let mut t = files::load_table(std::path::Path::new(&a.table), a.dim).map_err(err)?;
    if let Some(n) = a.n {
        t = t.head(n.min(t.n())).map_err(err)?;
    }
    let q = queries(&a.queries, &mut t)?;
    let (n, d) = (t.n(), t.d());
    let nlist = a.nlist.unwrap_or(((n as f64).sqrt() as usize).max(1));
    let ctx = Context::new(&ContextOptions::default()).map_err(err)?;
    println!(
        "{}: {n} × {d}, {} queries, k = {}, {}, {}, nlist {nlist}, device {}",
        a.label,
        q.n(),
        a.k,
        a.metric.name(),
        a.precision.name(),
        ctx.caps().name
    );
    let ko = KnnOptions {
        k: a.k,
        metric: a.metric,
        ..KnnOptions::default()
    };
    let dt = DeviceTable::upload(&ctx, &t, a.precision).map_err(err)?;
    // The GPU's clocks rise under load: the exact search runs for a second or more untimed
    // first (at least twice), then the timed one.
    let warm = Instant::now();
    for i in 0.. {
        knn_flat(&dt, q.data(), d, &ko).map_err(err)?;
        if i >= 1 && warm.elapsed().as_secs_f64() > 1.0 {
            break;
        }
    }
    let t0 = Instant::now();
    let gt = knn_flat(&dt, q.data(), d, &ko).map_err(err)?;
    let exact_s = t0.elapsed().as_secs_f64();
    drop(dt);
    println!(
        "exact      wall {exact_s:.3} s  gpu {:.3} s  {:.0} q/s",
        gt.gpu_ns as f64 * 1e-9,
        q.n() as f64 / exact_s
    );
    if let Some(p) = &a.dump_queries {
        write_le(p, q.data(), f32::to_le_bytes)?;
    }
    if let Some(p) = &a.dump_table {
        write_le(p, t.data(), f32::to_le_bytes)?;
    }
    if let Some(p) = &a.dump_gt {
        let ids: Vec<i32> = gt.ids.iter().map(|&i| i as i32).collect();
        write_le(p, &ids, i32::to_le_bytes)?;
    }
    if let Some(m) = a.pq {
        return run_pq(&a, &ctx, &t, &q, &gt, nlist, m);
    }
    let opts = IvfOptions {
        nlist,
        metric: a.metric,
        precision: a.precision,
        kmeans: a.kmeans.clone(),
    };
    let mut ix = IvfFlat::new(&ctx, d, &opts).map_err(err)?;
    let t0 = Instant::now();
    let km = ix.train(&t).map_err(err)?;
    let train_s = t0.elapsed().as_secs_f64();
    // The final centroids' objective over all N rows (Faiss's peer computes the same).
    let cent = Table::new(km.centroids.clone(), nlist, d).map_err(err)?;
    let (_, dist, _) = assign(&ctx, &cent, t.data(), d).map_err(err)?;
    let full_obj: f64 = dist.iter().map(|&v| v as f64).sum();
    println!(
        "k-means    wall {train_s:.3} s  gpu {:.3} s  {} iterations on {} rows  objective {:.6e} → {:.6e}  \
         final over all rows {full_obj:.6e}  splits {}",
        km.gpu_ns as f64 * 1e-9,
        km.objective.len(),
        km.trained_on,
        km.objective.first().copied().unwrap_or(0.0),
        km.objective.last().copied().unwrap_or(0.0),
        km.splits
    );
    let t0 = Instant::now();
    ix.add(&t).map_err(err)?;
    let add_s = t0.elapsed().as_secs_f64();
    let sizes = ix.list_sizes();
    println!(
        "add        wall {add_s:.3} s  lists {}..{} rows",
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0)
    );
    // The first search puts the lists on the device (one slab); timed apart from the searches.
    let t0 = Instant::now();
    ix.search(&q.data()[..d], d, &IvfSearch::new(1, ko.clone()))
        .map_err(err)?;
    println!(
        "lists to the device (first search) wall {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    // Warm again (k-means and add leave the GPU idle a while): a second of the widest search.
    let widest = a.nprobe.iter().copied().max().unwrap_or(1);
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < 1.0 {
        ix.search(q.data(), d, &IvfSearch::new(widest, ko.clone()))
            .map_err(err)?;
    }
    let mut lat = Vec::new();
    if let Some(np) = a.latency {
        let s = IvfSearch::new(np, ko.clone());
        lat = latency(&format!("ivf-flat nprobe {np}"), &q, a.calls, |qs| {
            ix.search(qs, d, &s)
        })?;
    }
    let mut rows = Vec::new();
    let mut probes = a.nprobe.clone();
    if !a.no_full {
        probes.push(nlist);
    }
    for &np in &probes {
        // The best wall time of three searches (the same results each time).
        let mut s = f64::INFINITY;
        let mut last = None;
        for _ in 0..3 {
            let t0 = Instant::now();
            let got = ix
                .search(q.data(), d, &IvfSearch::new(np, ko.clone()))
                .map_err(err)?;
            s = s.min(t0.elapsed().as_secs_f64());
            if let Some((prev, _)) = &last {
                let prev: &diversity::knn::KnnResult = prev;
                if prev.ids != got.0.ids {
                    return Err(format!("nprobe {np}: two searches differ"));
                }
            }
            last = Some(got);
        }
        let (r, rep) = last.expect("three searches");
        let (r1, rk, kk) = recall(&r, &gt);
        println!(
            "nprobe {np:>4} wall {s:.4} s  gpu {:.4} s (coarse {:.4})  host {:.4} s  {:>9.0} q/s  \
             scanned {:.3} of N  \
             1-R@1 {r1:.4}  1-R@{k} {rk:.4}  {k}-R@{k} {kk:.4}  {}",
            (rep.coarse_ns + rep.lists_ns) as f64 * 1e-9,
            rep.coarse_ns as f64 * 1e-9,
            rep.host_ns as f64 * 1e-9,
            q.n() as f64 / s,
            rep.rows_scanned as f64 / (n as f64 * q.n() as f64),
            if rep.list_scan {
                format!("list scan, {} dispatches", rep.scan_dispatches)
            } else {
                "per-list k-NN".to_string()
            },
            k = a.k
        );
        if np >= nlist && (r.ids != gt.ids || r.distances != gt.distances) {
            return Err(format!("nprobe {np} = nlist differs from the exact search"));
        }
        rows.push(format!(
            "{{\"nprobe\":{np},\"wall_s\":{s},\"gpu_ns\":{},\"host_ns\":{},\"qps\":{},\"recall1\":{r1},\
             \"recall_at_k\":{rk},\"k_recall\":{kk}}}",
            rep.coarse_ns + rep.lists_ns,
            rep.host_ns,
            q.n() as f64 / s
        ));
    }
    if let Some(p) = &a.save {
        ix.save(std::path::Path::new(p)).map_err(err)?;
    }
    if let Some(p) = &a.json {
        let j = format!(
            "{{\"label\":{:?},\"n\":{n},\"dim\":{d},\"queries\":{},\"k\":{},\"metric\":\"{}\",\
             \"nlist\":{nlist},\"exact_wall_s\":{exact_s},\"train_wall_s\":{train_s},\
             \"kmeans_objective_full\":{full_obj},\"add_wall_s\":{add_s},\"search\":[{}],\
             \"latency\":[{}]}}\n",
            a.label,
            q.n(),
            a.k,
            a.metric.name(),
            rows.join(","),
            lat.join(",")
        );
        common::write_out(p, j)?;
    }
    Ok(())
}

/// The `--pq M` run: IVF-PQ trained, added and searched per nprobe (and re-ranked with
/// `--refine F`).
fn run_pq(
    a: &Args,
    ctx: &Context,
    t: &Table,
    q: &Table,
    gt: &KnnResult,
    nlist: usize,
    m: usize,
) -> Result<(), String> {
    let err = |e: diversity::Error| e.to_string();
    let (n, d) = (t.n(), t.d());
    let opts = IvfPqOptions {
        nlist,
        m,
        metric: a.metric,
        keep_vectors: a.refine > 1,
        kmeans: a.kmeans.clone(),
    };
    let mut ix = IvfPq::new(ctx, d, &opts).map_err(err)?;
    let t0 = Instant::now();
    let km = ix.train(t).map_err(err)?;
    let train_s = t0.elapsed().as_secs_f64();
    println!(
        "train      wall {train_s:.3} s  (coarse k-means {} iterations on {} rows, then {m} \
         sub-quantizers × 256 on the residuals)",
        km.objective.len(),
        km.trained_on
    );
    // A k-means of the same shape alone (N rows into nlist, the same options): what of the
    // training is the coarse quantizer, the rest being the residuals and the sub-quantizers.
    let t0 = Instant::now();
    diversity::ivf::kmeans(ctx, t, nlist, &a.kmeans).map_err(err)?;
    let coarse_s = t0.elapsed().as_secs_f64();
    println!(
        "train      coarse k-means of the same shape alone wall {coarse_s:.3} s: the residuals \
         and sub-quantizers {:.3} s",
        train_s - coarse_s
    );
    let t0 = Instant::now();
    ix.add(t).map_err(err)?;
    let add_s = t0.elapsed().as_secs_f64();
    let sizes = ix.list_sizes();
    println!(
        "add        wall {add_s:.3} s  lists {}..{} rows  codes {m} bytes a row",
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0)
    );
    let mut factors = vec![1];
    if a.refine > 1 {
        factors.push(a.refine);
    }
    // The first search puts the lists on the device; timed apart, as for IVF-Flat.
    let t0 = Instant::now();
    let knn = KnnOptions {
        k: a.k,
        metric: ix.metric(),
        ..KnnOptions::default()
    };
    let first = IvfSearch::new(1, knn.clone());
    ix.search(&q.data()[..d], d, &first).map_err(err)?;
    println!(
        "lists to the device (first search) wall {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    let mut lat = Vec::new();
    if let Some(np) = a.latency {
        for &f in &factors {
            let s = IvfSearch {
                k_factor: f,
                ..IvfSearch::new(np, knn.clone())
            };
            lat.extend(latency(
                &format!("ivf-pq nprobe {np} k_factor {f}"),
                q,
                a.calls,
                |qs| ix.search(qs, d, &s),
            )?);
        }
    }
    let mut rows = Vec::new();
    let mut probes = a.nprobe.clone();
    if !a.no_full {
        probes.push(nlist);
    }
    for &np in &probes {
        for &f in &factors {
            let s = IvfSearch {
                k_factor: f,
                ..IvfSearch::new(np, knn.clone())
            };
            // The best wall time of three searches (the first also builds the pipelines of a
            // new k × k_factor).
            let mut secs = f64::INFINITY;
            let mut last = None;
            for _ in 0..3 {
                let t0 = Instant::now();
                let got = ix.search(q.data(), d, &s).map_err(err)?;
                secs = secs.min(t0.elapsed().as_secs_f64());
                last = Some(got);
            }
            let (r, rep) = last.expect("three searches");
            let (r1, rk, kk) = recall(&r, gt);
            println!(
                "nprobe {np:>4} k_factor {f:>2} wall {secs:.3} s  gpu {:.4} s (coarse {:.4})  \
                 host {:.4} s  {:>8.0} q/s  \
                 scanned {:.3} of N  1-R@1 {r1:.4}  1-R@{k} {rk:.4}  {k}-R@{k} {kk:.4}",
                (rep.coarse_ns + rep.lists_ns) as f64 * 1e-9,
                rep.coarse_ns as f64 * 1e-9,
                rep.host_ns as f64 * 1e-9,
                q.n() as f64 / secs,
                rep.rows_scanned as f64 / (n as f64 * q.n() as f64),
                k = a.k
            );
            rows.push(format!(
                "{{\"nprobe\":{np},\"k_factor\":{f},\"wall_s\":{secs},\"gpu_ns\":{},\"host_ns\":{},\"qps\":{},\
                 \"recall1\":{r1},\"recall_at_k\":{rk},\"k_recall\":{kk}}}",
                rep.coarse_ns + rep.lists_ns,
                rep.host_ns,
                q.n() as f64 / secs
            ));
        }
    }
    if let Some(p) = &a.save {
        ix.save(std::path::Path::new(p)).map_err(err)?;
    }
    if let Some(p) = &a.json {
        let j = format!(
            "{{\"label\":{:?},\"index\":\"ivf-pq\",\"m\":{m},\"n\":{n},\"dim\":{d},\
             \"queries\":{},\"k\":{},\"metric\":\"{}\",\"nlist\":{nlist},\"train_wall_s\":{train_s},\
             \"coarse_alone_s\":{coarse_s},\"add_wall_s\":{add_s},\"search\":[{}],\"latency\":[{}]}}\n",
            a.label,
            q.n(),
            a.k,
            a.metric.name(),
            rows.join(","),
            lat.join(",")
        );
        common::write_out(p, j)?;
    }
    Ok(())
}

fn main() {
    if let Err(e) = run(common::parsed("bench_ivf", parse())) {
        eprintln!("bench_ivf: {e}");
        std::process::exit(1);
    }
}
