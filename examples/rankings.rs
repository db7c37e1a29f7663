//! Similarity rankings (the user's rankings cache) and optionally the k-NN graph of a table
//! file, on any Vulkan device.
//!
//! ```text
//! cargo run --release --example rankings -- --table FILE [--dim D] [--center]
//!     [--precision fp32|fp16] [--top-k K|all] [--metric cosine|ip|l2] [--batch B]
//!     [--model NAME] [--device NAME] [--validation] --out rankings.json
//!     [--graph FILE [--graph-k K]] [--verify Q]
//! ```
//!
//! FILE is a raw little-endian float32 `.f32` (needs `--dim`), a `.npy` (float32 or float16) or
//! an `embeddings.json` (its ids become the cache's keys and values). The output is the user's
//! `{"metadata":{"total_poems","algorithm","format":"pre_sorted_rankings","top_k",…},
//! "rankings":{"<id>":[id,…]}}`, written to a temporary file beside `--out` and renamed at the
//! end; `--graph` writes the compact k-NN graph file (k = `--graph-k`, default 10). Both output
//! locations are checked before any GPU work. `--verify Q` cross-checks Q items (spread over the
//! table, first and last included) against a float64 brute force over the table as stored on
//! the device and fails, leaving no output file, if any returned neighbour is not a true one
//! (rounding-level ties aside). One summary line goes to stdout.

mod common;

use diversity::cache::{KnnGraphWriter, KnnMetric, RankingsWriter, KNN_PAD};
use diversity::knn::KnnPath;
use diversity::rankings::{algorithm_name, rankings_with_values, RankingsOptions, DEFAULT_GRAPH_K};
use diversity::{files, Context, ContextOptions, DeviceTable, Metric, Precision};
use std::path::PathBuf;
use std::time::Instant;

struct Args {
    table: PathBuf,
    dim: Option<usize>,
    center: bool,
    precision: Precision,
    top_k: Option<usize>,
    metric: Metric,
    batch: Option<usize>,
    model: Option<String>,
    device: Option<String>,
    validation: bool,
    out: Option<PathBuf>,
    graph: Option<PathBuf>,
    graph_k: usize,
    verify: usize,
}

fn parse() -> Result<Args, String> {
    let mut it = common::Cli::new(include_str!("rankings.rs"));
    let mut a = Args {
        table: PathBuf::new(),
        dim: None,
        center: false,
        precision: Precision::Fp32,
        top_k: None,
        metric: Metric::Cosine,
        batch: None,
        model: None,
        device: None,
        validation: false,
        out: None,
        graph: None,
        graph_k: DEFAULT_GRAPH_K,
        verify: 0,
    };
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse()
            .map_err(|_| format!("{flag} {v}: not a non-negative integer"))
    }
    while let Some(flag) = it.flag()? {
        match flag.as_str() {
            "--table" => a.table = it.value().ok_or("--table needs a file")?.into(),
            "--dim" => a.dim = Some(num("--dim", it.value())?),
            "--center" => a.center = true,
            "--precision" => {
                a.precision = it
                    .value()
                    .ok_or("--precision needs fp32 or fp16")?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--top-k" => {
                let v = it.value().ok_or("--top-k needs K or all")?;
                a.top_k = if v == "all" {
                    None
                } else {
                    Some(num("--top-k", Some(v))?)
                };
            }
            "--metric" => {
                a.metric = it
                    .value()
                    .ok_or("--metric needs cosine, ip or l2")?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--batch" => a.batch = Some(num("--batch", it.value())?),
            "--model" => a.model = Some(it.value().ok_or("--model needs a name")?),
            "--device" => a.device = Some(it.value().ok_or("--device needs a name")?),
            "--validation" => a.validation = true,
            "--out" => a.out = Some(it.value().ok_or("--out needs a file")?.into()),
            "--graph" => a.graph = Some(it.value().ok_or("--graph needs a file")?.into()),
            "--graph-k" => a.graph_k = num("--graph-k", it.value())?,
            "--verify" => a.verify = num("--verify", it.value())?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if a.table.as_os_str().is_empty() {
        return Err("--table is required".into());
    }
    if a.out.is_none() {
        return Err("--out is required".into());
    }
    Ok(a)
}

fn run(a: Args) -> Result<(), String> {
    let err = |e: diversity::Error| e.to_string();
    let ctx = Context::new(&ContextOptions {
        device: a.device.clone(),
        validation: a.validation,
    })
    .map_err(err)?;
    let mut table = files::load_table(&a.table, a.dim).map_err(err)?;
    if a.center {
        table = table.centered();
    }
    let (n, d) = (table.n(), table.d());
    let caps = ctx.caps().clone();
    let out = a.out.clone().expect("checked in parse");
    // The writers create their temporary files now: the output locations are checked before
    // any GPU work.
    let mut meta = serde_json::Map::new();
    meta.insert("metric".into(), a.metric.name().into());
    meta.insert("precision".into(), a.precision.name().into());
    meta.insert("dim".into(), d.into());
    meta.insert("device".into(), caps.name.clone().into());
    meta.insert("center".into(), a.center.into());
    meta.insert("table".into(), a.table.display().to_string().into());
    if let Some(m) = &a.model {
        meta.insert("model".into(), m.clone().into());
    }
    let mut writer = RankingsWriter::create(
        &out,
        n,
        a.top_k,
        &algorithm_name(a.metric),
        &serde_json::Value::Object(meta),
        table.ids().map(|v| v.to_vec()),
    )
    .map_err(err)?;
    let kmetric = match a.metric {
        Metric::InnerProduct => KnnMetric::InnerProduct,
        Metric::Cosine => KnnMetric::Cosine,
        Metric::L2 => KnnMetric::L2,
    };
    let gk = a.graph_k;
    let mut graph = match &a.graph {
        Some(p) => Some(KnnGraphWriter::create(p, n, gk, kmetric).map_err(err)?),
        None => None,
    };
    let len = writer.row_len();
    // One pass serves both when the graph's rows are a prefix of the rankings.
    let top_k = match &graph {
        Some(_) if a.top_k.is_some_and(|k| k < gk) => Some(gk),
        _ => a.top_k,
    };
    let opts = RankingsOptions {
        top_k,
        metric: a.metric,
        batch: a.batch,
        verify: a.verify,
        ..RankingsOptions::default()
    };
    let t0 = Instant::now();
    let dt = DeviceTable::upload(&ctx, &table, a.precision).map_err(err)?;
    let (mut rids, mut gids, mut gvals) = (Vec::new(), Vec::new(), Vec::new());
    let report = rankings_with_values(&dt, &table, &opts, |items, ids, values, got| {
        rids.clear();
        for r in 0..items.len() {
            rids.extend_from_slice(&ids[r * got..r * got + len]);
        }
        writer.write_batch(items, &rids, len)?;
        if let Some(g) = graph.as_mut() {
            let real = got.min(gk);
            gids.clear();
            gvals.clear();
            for r in 0..items.len() {
                gids.extend_from_slice(&ids[r * got..r * got + real]);
                gids.resize((r + 1) * gk, KNN_PAD);
                gvals.extend_from_slice(&values[r * got..r * got + real]);
                gvals.resize((r + 1) * gk, kmetric.pad_value());
            }
            g.write_batch(items, &gids, &gvals)?;
        }
        Ok(())
    })
    .map_err(err)?;
    writer.finish().map_err(err)?;
    if let Some(g) = graph {
        g.finish().map_err(err)?;
    }
    let wall = t0.elapsed().as_secs_f64();
    let gpu_s = report.gpu_ns as f64 / 1e9;
    let path = match report.path {
        Some(KnnPath::Select { chunk }) => format!("select, chunk {chunk}"),
        Some(KnnPath::FullRanking { padded }) => format!("full ranking, padded {padded}"),
        Some(KnnPath::WarpSelect {
            k_bucket,
            thread_queue,
            fused,
        }) => format!(
            "WarpSelect, k bucket {k_bucket}, thread queue {thread_queue}{}",
            if fused {
                ", keys computed in the selection"
            } else {
                ""
            }
        ),
        None => "no items".into(),
    };
    println!(
        "{} | rankings {} {} | {} × {} | {} items × top {} ({}) in {} batch(es) of {} | {:.0} items/s | GPU {:.3} s, wall {:.3} s | {}{}",
        caps.name,
        a.metric.name(),
        a.precision.name(),
        n,
        d,
        report.items,
        len,
        path,
        report.batches,
        report.batch,
        report.items as f64 / gpu_s.max(1e-12),
        gpu_s,
        wall,
        out.display(),
        a.graph
            .as_ref()
            .map(|p| format!(" + k-NN graph k = {gk} {}", p.display()))
            .unwrap_or_default()
    );
    if a.verify > 0 {
        println!(
            "verified: {} items against a float64 brute force, every neighbour a true one",
            report.verified
        );
    }
    if a.validation {
        let msgs = ctx.validation_messages();
        if !msgs.is_empty() {
            return Err(format!("validation layers reported:\n{}", msgs.join("\n")));
        }
    }
    Ok(())
}

fn main() {
    let a = common::parsed("rankings", parse());
    if let Err(e) = run(a) {
        eprintln!("rankings: {e}");
        std::process::exit(1);
    }
}
