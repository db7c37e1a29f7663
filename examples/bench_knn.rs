//! The k-NN benchmark: exact k-NN on the device for each requested k × precision, GPU
//! time from timestamp queries, wall time, queries/s, and the ids of the first configuration for
//! comparison with the PyTorch peer (`bench/peer/torch_knn.py`, torch.topk over a matmul).
//!
//! ```text
//! cargo run --release --example bench_knn -- --table FILE [--dim D] [--n N]
//!     [--queries self|FILE] [--k 10,100,all] [--metric cosine|ip|l2] [--precisions fp32,fp16]
//!     [--variants auto,tiles,fused,nowarp] [--label NAME] [--json OUT.json] [--md OUT.md]
//!     [--ids OUT.u32] [--devices LIST] [--repeat R] [--verify Q]
//! ```
//!
//! `--devices LIST` (e.g. `0,0`: one device opened twice) also runs the device's choice on those
//! devices as shards (row slices, `diversity::multi::IndexShards`) and as replicas (query blocks,
//! `IndexReplicas`), each uploaded once before timing, checked bit for bit against the first
//! variant; their GPU time is the slowest device's. `--repeat R` runs each variant R times back
//! to back and reports the fastest GPU and wall times (every repetition must give the same bits).
//!
//! Each k runs once per variant (default `auto,nowarp`): `auto` the device's choice of
//! selection path (WarpSelect over the blocked product's key tiles where it applies),
//! `tiles` WarpSelect over the key tiles, `fused` WarpSelect computing its keys itself, `nowarp`
//! without WarpSelect; all are timed and their results compared bit for bit with the first
//! ("same bits"). `--verify Q` also cross-checks Q queries of every run against a float64
//! brute force (`KnnOptions::verify`).
//! `--queries self` (default) searches the table against itself (the rankings workload: k + 1
//! neighbours, the item itself among them); `all` is k = N. `--ids` writes the first
//! configuration's ids (little-endian i32, row-major, -1 for padding).

mod common;
use diversity::knn::{knn_flat, KnnOptions, Metric};
use diversity::{files, Context, ContextOptions, DeviceTable, Precision};
use std::fmt::Write as _;
use std::time::Instant;

struct Args {
    table: String,
    dim: Option<usize>,
    n: Option<usize>,
    queries: String,
    ks: Vec<Option<usize>>,
    metric: Metric,
    precisions: Vec<Precision>,
    label: String,
    json: Option<String>,
    md: Option<String>,
    ids: Option<String>,
    variants: Vec<String>,
    devices: Option<String>,
    repeat: usize,
    verify: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        table: String::new(),
        dim: None,
        n: None,
        queries: "self".into(),
        ks: vec![Some(10)],
        metric: Metric::Cosine,
        precisions: vec![Precision::Fp32],
        label: "workload".into(),
        json: None,
        md: None,
        ids: None,
        variants: vec!["auto".into(), "nowarp".into()],
        devices: None,
        repeat: 1,
        verify: 0,
    };
    let mut it = common::Cli::new(include_str!("bench_knn.rs"));
    while let Some(f) = it.flag()? {
        let mut val = || it.value().ok_or(format!("{f} needs a value"));
        // Each number at least the smallest that means anything (no zero k, n or repeat).
        let min = |v: String, m: usize| common::int_min::<usize>(&f, &v, m);
        match f.as_str() {
            "--table" => a.table = val()?,
            "--dim" => a.dim = Some(min(val()?, 1)?),
            "--n" => a.n = Some(min(val()?, 1)?),
            "--queries" => a.queries = val()?,
            "--k" => {
                a.ks = val()?
                    .split(',')
                    .map(|k| match k {
                        "all" => Ok(None),
                        k => common::int_min(&f, k, 1).map(Some),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--metric" => {
                a.metric = val()?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--precisions" => a.precisions = common::list(&f, &val()?)?,
            "--label" => a.label = val()?,
            "--json" => a.json = Some(val()?),
            "--md" => a.md = Some(val()?),
            "--ids" => a.ids = Some(val()?),
            "--devices" => a.devices = Some(val()?),
            "--repeat" => a.repeat = min(val()?, 1)?,
            "--verify" => a.verify = min(val()?, 0)?,
            "--variants" => {
                a.variants = val()?.split(',').map(String::from).collect();
                if let Some(v) = a
                    .variants
                    .iter()
                    .find(|v| !["auto", "tiles", "fused", "nowarp"].contains(&v.as_str()))
                {
                    return Err(format!(
                        "--variants {v}: expected auto, tiles, fused or nowarp"
                    ));
                }
            }
            _ => return Err(format!("unknown argument {f}")),
        }
    }
    if a.table.is_empty() {
        return Err("--table is required".into());
    }
    Ok(a)
}

fn main() {
    let a = common::parsed("bench_knn", parse());
    if let Err(e) = run(a) {
        eprintln!("bench_knn: {e}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<(), String> {
    // The outputs are checked before anything is loaded or any device work.
    let mut inputs = common::table_inputs("--table", std::path::Path::new(&a.table));
    if a.queries != "self" {
        inputs.extend(common::table_inputs(
            "--queries",
            std::path::Path::new(&a.queries),
        ));
    }
    common::check_outputs(
        &common::given(&[
            ("--json", a.json.as_ref()),
            ("--md", a.md.as_ref()),
            ("--ids", a.ids.as_ref()),
        ]),
        &inputs,
    )?;
    let s = |e: diversity::Error| e.to_string();
    let mut table = files::load_table(a.table.as_ref(), a.dim).map_err(s)?;
    if let Some(n) = a.n {
        table = table.head(n.min(table.n())).map_err(s)?;
    }
    let queries: Vec<f32> = if a.queries == "self" {
        table.data().to_vec()
    } else {
        files::load_table(a.queries.as_ref(), Some(table.d()))
            .map_err(s)?
            .data()
            .to_vec()
    };
    let (n, d) = (table.n(), table.d());
    let nq = queries.len() / d;
    let ctx = Context::new(&ContextOptions::default()).map_err(s)?;
    let caps = ctx.caps().clone();
    println!(
        "{}: table {n} × {d}, {nq} queries, {} on {} ({})",
        a.label,
        a.metric.name(),
        caps.name,
        caps.driver
    );
    let multi = match &a.devices {
        Some(spec) => diversity::multi::open_devices(spec, false).map_err(s)?,
        None => Vec::new(),
    };
    let mut rows = Vec::new();
    let mut first_ids = None;
    for &p in &a.precisions {
        let dt = DeviceTable::upload(&ctx, &table, p).map_err(s)?;
        let (shards, replicas) = if multi.is_empty() {
            (None, None)
        } else {
            (
                Some(diversity::multi::IndexShards::new(&multi, &table, p, None).map_err(s)?),
                Some(diversity::multi::IndexReplicas::new(&multi, &table, p, None).map_err(s)?),
            )
        };
        for &k in &a.ks {
            let self_q = a.queries == "self";
            let k = k.unwrap_or(n).min(n);
            // The device's choice (WarpSelect where it applies), then without WarpSelect: both
            // timed, and their ids and distances compared bit for bit.
            let mut first: Option<(Vec<i64>, Vec<u32>)> = None;
            for v in &a.variants {
                let o = KnnOptions {
                    k: if self_q { (k + 1).min(n) } else { k },
                    metric: a.metric,
                    warp_select: (v == "nowarp").then_some(false),
                    fused_distances: match v.as_str() {
                        "fused" => Some(true),
                        "tiles" => Some(false),
                        _ => None,
                    },
                    verify: a.verify,
                    ..KnnOptions::default()
                };
                // --repeat R: R runs back to back, the fastest GPU and wall times reported (a GPU
                // left idle by the host work between runs may start the next at lower clocks);
                // every repetition must return the same bits.
                let (mut gpu_ns, mut wall) = (u64::MAX, f64::INFINITY);
                let mut kept: Option<diversity::KnnResult> = None;
                for _ in 0..a.repeat {
                    let t = Instant::now();
                    let r = knn_flat(&dt, &queries, d, &o).map_err(s)?;
                    wall = wall.min(t.elapsed().as_secs_f64());
                    gpu_ns = gpu_ns.min(r.gpu_ns);
                    if let Some(k) = &kept {
                        let same = k.ids == r.ids
                            && k.distances
                                .iter()
                                .zip(&r.distances)
                                .all(|(x, y)| x.to_bits() == y.to_bits());
                        if !same {
                            return Err(format!("{v}: a repetition returned other results"));
                        }
                    }
                    kept = Some(r);
                }
                let r = kept.expect("repeat ≥ 1");
                let gpu = gpu_ns as f64 * 1e-9;
                let bits: Vec<u32> = r.distances.iter().map(|x| x.to_bits()).collect();
                let same = match &first {
                    None => {
                        first = Some((r.ids.clone(), bits));
                        true
                    }
                    Some((ids, b)) => *ids == r.ids && *b == bits,
                };
                println!(
                    "  {} k {:>6} {v:>6} path {:?} subgroups {} GPU {:>8.4} s wall {:>8.4} s  {:>10.0} queries/s  same bits {same}",
                    p.name(),
                    o.k,
                    r.path,
                    r.subgroups,
                    gpu,
                    wall,
                    nq as f64 / gpu.max(1e-12)
                );
                if first_ids.is_none() {
                    first_ids = Some(r.ids.iter().map(|&i| i as i32).collect::<Vec<i32>>());
                }
                rows.push(serde_json::json!({
                    "precision": p.name(), "k": o.k, "variant": v, "path": format!("{:?}", r.path),
                    "subgroups": r.subgroups, "gpu_s": gpu, "wall_s": wall, "same_bits": same,
                }));
            }
            let o = KnnOptions {
                k: if self_q { (k + 1).min(n) } else { k },
                metric: a.metric,
                ..KnnOptions::default()
            };
            for (name, index) in [("shards", 0), ("replicas", 1)] {
                let t = Instant::now();
                let r = match (index, &shards, &replicas) {
                    (0, Some(sh), _) => sh.knn(&queries, d, &o).map_err(s)?,
                    (1, _, Some(re)) => re.knn(&queries, d, &o).map_err(s)?,
                    _ => continue,
                };
                let wall = t.elapsed().as_secs_f64();
                let (r, report) = r;
                let gpu = r.gpu_ns as f64 * 1e-9;
                let bits: Vec<u32> = r.distances.iter().map(|x| x.to_bits()).collect();
                let same = first
                    .as_ref()
                    .is_some_and(|(ids, b)| *ids == r.ids && *b == bits);
                let v = format!("{name}x{}", multi.len());
                println!(
                    "  {} k {:>6} {v:>6} path {:?} GPU {:>8.4} s (per device {:?}) wall {:>8.4} s  same bits {same}",
                    p.name(),
                    o.k,
                    r.path,
                    gpu,
                    report
                        .per_device_ns
                        .iter()
                        .map(|n| format!("{:.4}", *n as f64 * 1e-9))
                        .collect::<Vec<_>>(),
                    wall,
                );
                rows.push(serde_json::json!({
                    "precision": p.name(), "k": o.k, "variant": v, "path": format!("{:?}", r.path),
                    "subgroups": r.subgroups, "gpu_s": gpu, "wall_s": wall, "same_bits": same,
                }));
            }
        }
    }
    if let (Some(p), Some(ids)) = (&a.ids, &first_ids) {
        common::write_out(p, bytemuck::cast_slice::<_, u8>(ids))?;
    }
    if let Some(p) = &a.json {
        let j = serde_json::json!({
            "label": a.label, "device": caps.name, "driver": caps.driver, "n": n, "d": d,
            "queries": nq, "metric": a.metric.name(), "runs": rows,
        });
        common::write_out(p, serde_json::to_vec_pretty(&j).unwrap())?;
    }
    if let Some(p) = &a.md {
        let mut m = String::new();
        let _ = writeln!(
            m,
            "**{}** — table {n} × {d}, {nq} queries, {}, {} ({})\n",
            a.label,
            a.metric.name(),
            caps.name,
            caps.driver
        );
        let _ = writeln!(
            m,
            "| precision | k | variant | path | subgroups | GPU s | wall s | same bits |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|---|---|---|");
        for r in &rows {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {:.4} | {:.4} | {} |",
                r["precision"].as_str().unwrap_or(""),
                r["k"],
                r["variant"].as_str().unwrap_or(""),
                r["path"].as_str().unwrap_or(""),
                r["subgroups"],
                r["gpu_s"].as_f64().unwrap_or(0.0),
                r["wall_s"].as_f64().unwrap_or(0.0),
                if r["same_bits"].as_bool().unwrap_or(false) {
                    "yes"
                } else {
                    "NO"
                }
            );
        }
        common::write_out(p, m)?;
    }
    if rows.iter().any(|r| r["same_bits"] == false) {
        return Err("the variants' results differ (same bits: NO above)".into());
    }
    Ok(())
}
