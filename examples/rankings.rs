//! Similarity rankings (the user's rankings cache) and optionally the k-NN graph of a table
//! file, on any Vulkan device.
//!
//! ```text
//! cargo run --release --example rankings -- --table FILE [--dim D] [--center]
//!     [--precision fp32|fp16] [--top-k K|all] [--metric cosine|ip|l2] [--batch B]
//!     [--model NAME] [--device NAME] [--validation] --out rankings.json
//!     [--graph FILE [--graph-k K]] [--verify Q] [--shard i/n[:strided]]
//!     [--index flat|ivf-flat] [--nlist L] [--nprobe P] [--seed S]
//! cargo run --release --example rankings -- merge --out rankings.json SHARD.json…
//! cargo run --release --example rankings -- merge-graph --out graph.knn SHARD.knn…
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
//!
//! `--shard i/n` ranks only shard i (1-based) of n of the items — the i-th of n near-equal runs
//! of consecutive items, or with `:strided` every n-th item from the i-th — against the whole
//! table: `--out` is then a partial rankings cache (its metadata carries `shard`,
//! `shard_layout`, `shard_items_total` and `shard_table_checksum`, the table's content
//! checksum) and `--graph` a graph shard file (`DKNS`, with a checksum of the table and options
//! it was computed from). Every rankings cache and shard carries a checksum of its own bytes.
//! `merge` and `merge-graph` check that their inputs are the n shards of one run (naming any
//! missing shard) and unedited, and write the rankings cache and graph file the one-shot run
//! writes, byte for byte.
//!
//! `--index ivf-flat` ranks with an approximate index instead of the exact search (`flat`, the
//! default), for tables too large for brute force: k-means of the table into L lists (default
//! 4·√N, 20 iterations, `--seed`, default 1234), every item in its nearest list, and each
//! item's top k from the P lists nearest to it (default 16); an item whose probed lists hold
//! fewer than k other items is searched again with twice the lists until its row is whole. It
//! needs `--top-k K` (not `all`) and does not take `--verify`; the rankings cache's metadata
//! records `index`, `nlist`, `nprobe` and `seed`.

mod common;

use diversity::cache::{
    merge_graphs, merge_rankings, KnnGraphShard, KnnGraphWriter, KnnMetric, RankingsWriter,
    ShardLayout, KNN_PAD, SHARD_TABLE_KEY,
};
use diversity::ivf::{widened_nprobe, IvfFlat, IvfOptions, IvfSearch, KMeansOptions};
use diversity::knn::KnnOptions;
use diversity::knn::KnnPath;
use diversity::rankings::{
    algorithm_name, rankings_approx, rankings_with_values, row_len, RankingsOptions,
    DEFAULT_GRAPH_K,
};
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
    shard: Option<(usize, usize, ShardLayout)>,
    index: Index,
    nlist: Option<usize>,
    nprobe: usize,
    seed: u64,
}

/// The search behind the rankings.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Index {
    /// The exact search.
    Flat,
    /// An IVF-Flat index.
    IvfFlat,
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
        shard: None,
        index: Index::Flat,
        nlist: None,
        nprobe: 16,
        seed: 1234,
    };
    // Each number at least the smallest that means anything (no zero k, batch, list count).
    use common::int_arg as num;
    while let Some(flag) = it.flag()? {
        match flag.as_str() {
            "--table" => a.table = it.value().ok_or("--table needs a file")?.into(),
            "--dim" => a.dim = Some(num("--dim", it.value(), 1usize)?),
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
                    Some(num("--top-k", Some(v), 1usize)?)
                };
            }
            "--metric" => {
                a.metric = it
                    .value()
                    .ok_or("--metric needs cosine, ip or l2")?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--batch" => a.batch = Some(num("--batch", it.value(), 1usize)?),
            "--model" => a.model = Some(it.value().ok_or("--model needs a name")?),
            "--device" => a.device = Some(it.value().ok_or("--device needs a name")?),
            "--validation" => a.validation = true,
            "--out" => a.out = Some(it.value().ok_or("--out needs a file")?.into()),
            "--graph" => a.graph = Some(it.value().ok_or("--graph needs a file")?.into()),
            "--graph-k" => a.graph_k = num("--graph-k", it.value(), 1usize)?,
            "--verify" => a.verify = num("--verify", it.value(), 0usize)?,
            "--shard" => a.shard = Some(parse_shard(&it.value().ok_or("--shard needs i/n")?)?),
            "--index" => {
                a.index = match it.value().as_deref() {
                    Some("flat") => Index::Flat,
                    Some("ivf-flat") => Index::IvfFlat,
                    Some(v) => return Err(format!("--index {v}: expected flat or ivf-flat")),
                    None => return Err("--index needs flat or ivf-flat".into()),
                }
            }
            "--nlist" => a.nlist = Some(num("--nlist", it.value(), 1usize)?),
            "--nprobe" => a.nprobe = num("--nprobe", it.value(), 1usize)?,
            "--seed" => a.seed = num("--seed", it.value(), 0u64)?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if a.table.as_os_str().is_empty() {
        return Err("--table is required".into());
    }
    if a.out.is_none() {
        return Err("--out is required".into());
    }
    if a.index != Index::Flat {
        if a.top_k.is_none() {
            return Err(
                "--index ivf-flat needs --top-k K (all N − 1 needs the exact search)".into(),
            );
        }
        if a.verify > 0 {
            return Err("--verify checks the exact search; it does not apply to --index".into());
        }
    }
    Ok(a)
}

/// `i/n` or `i/n:strided` (1-based), as the Lua CLI's `--shard`.
fn parse_shard(spec: &str) -> Result<(usize, usize, ShardLayout), String> {
    let bad = || {
        format!("--shard {spec}: expected i/n or i/n:strided (shard i of n, 1 <= i <= n), e.g. 2/4")
    };
    let (frac, layout) = match spec.split_once(':') {
        Some((f, l)) => (f, ShardLayout::from_name(l).ok_or_else(bad)?),
        None => (spec, ShardLayout::Contiguous),
    };
    let (i, n) = frac.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n < 1 || !(1..=n).contains(&i) || n > u32::MAX as usize {
        return Err(bad());
    }
    Ok((i, n, layout))
}

/// `merge` / `merge-graph --out FILE INPUT…`.
/// `merge` / `merge-graph`'s arguments: the output and the shard files.
fn parse_merge(what: &str, argv: &[String]) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let mut out = None;
    let mut inputs = Vec::new();
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = Some(PathBuf::from(it.next().ok_or("--out needs a file")?)),
            f if f.starts_with("--") => return Err(format!("{what}: unknown argument {f}")),
            f => inputs.push(PathBuf::from(f)),
        }
    }
    let out = out.ok_or_else(|| format!("{what}: --out is required"))?;
    Ok((out, inputs))
}

fn merge(what: &str, argv: &[String]) -> Result<(), String> {
    // Usage errors exit 2, like every other example's.
    let (out, inputs) = common::parsed("rankings", parse_merge(what, argv));
    let shards: Vec<_> = inputs
        .iter()
        .map(|p| ("shard file".to_string(), p.clone()))
        .collect();
    common::check_outputs(&common::given(&[("--out", Some(&out))]), &shards)
        .map_err(|e| format!("{what}: {e}"))?;
    if what == "merge" {
        let r = merge_rankings(&inputs, &out).map_err(|e| e.to_string())?;
        println!(
            "merged {} {} shard(s), {} rankings -> {}",
            r.shards,
            r.layout.name(),
            r.sequences,
            out.display()
        );
    } else {
        let shards = merge_graphs(&inputs, &out).map_err(|e| e.to_string())?;
        println!("merged {shards} graph shard(s) -> {}", out.display());
    }
    Ok(())
}

fn run(a: Args) -> Result<(), String> {
    let err = |e: diversity::Error| e.to_string();
    // The outputs are checked before any device work (and again by their writers).
    common::check_outputs(
        &common::given(&[("--out", a.out.as_ref()), ("--graph", a.graph.as_ref())]),
        &common::table_inputs("--table", &a.table),
    )?;
    let ctx = Context::new(&ContextOptions {
        device: a.device.clone(),
        validation: a.validation,
    })
    .map_err(err)?;
    // An fp16 .bin saved centred is centred: not again, and labelled so.
    let (mut table, centred) = files::load_table_centred(&a.table, a.dim).map_err(err)?;
    if a.center && !centred {
        table = table.centered();
    }
    let center = a.center || centred;
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
    meta.insert("center".into(), center.into());
    meta.insert("table".into(), a.table.display().to_string().into());
    if let Some(m) = &a.model {
        meta.insert("model".into(), m.clone().into());
    }
    // 4·√N lists by default (at least 1, at most N).
    let nlist = a
        .nlist
        .unwrap_or(((n as f64).sqrt() * 4.0).round() as usize)
        .clamp(1, n);
    if a.index == Index::IvfFlat {
        meta.insert("index".into(), "ivf-flat".into());
        meta.insert("nlist".into(), nlist.into());
        meta.insert("nprobe".into(), a.nprobe.into());
        meta.insert("seed".into(), a.seed.into());
    }
    // What a shard's rows come from: the table's content and every option that changes them
    // (all in the metadata, but for the row length and the graph's k). Graph shards keep its
    // checksum; rankings shards keep the table's and the metadata.
    let table_sum = diversity::cache::table_checksum(&table, a.precision);
    let run_text = format!(
        "{table_sum} top_k={:?} graph_k={} {}",
        a.top_k,
        a.graph_k,
        serde_json::Value::Object(meta.clone())
    );
    // A shard: its slice of the items, marked in the metadata (dropped by the merge).
    let items = a.shard.map(|(i, count, layout)| {
        meta.insert("shard".into(), format!("{i}/{count}").into());
        meta.insert("shard_layout".into(), layout.name().into());
        meta.insert("shard_items_total".into(), n.into());
        meta.insert(SHARD_TABLE_KEY.into(), table_sum.clone().into());
        layout
            .positions(i, count, n)
            .into_iter()
            .map(|p| p as u32)
            .collect::<Vec<u32>>()
    });
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
    let mut graph = match (&a.graph, a.shard) {
        (Some(p), None) => Some(Graph::Whole(
            KnnGraphWriter::create(p, n, gk, kmetric).map_err(err)?,
        )),
        (Some(p), Some(shard)) => Some(Graph::Shard(
            KnnGraphShard::create(p, n, gk, kmetric, shard, &run_text).map_err(err)?,
        )),
        (None, _) => None,
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
        items,
        ..RankingsOptions::default()
    };
    let t0 = Instant::now();
    let (mut rids, mut gids, mut gvals) = (Vec::new(), Vec::new(), Vec::new());
    let mut sink = |items: &[u32], ids: &[u32], values: &[f32], got: usize| {
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
            match g {
                Graph::Whole(w) => w.write_batch(items, &gids, &gvals)?,
                Graph::Shard(w) => w.write_batch(items, &gids, &gvals)?,
            }
        }
        Ok(())
    };
    let report = match a.index {
        Index::Flat => {
            let dt = DeviceTable::upload(&ctx, &table, a.precision).map_err(err)?;
            rankings_with_values(&dt, &table, &opts, &mut sink).map_err(err)?
        }
        Index::IvfFlat => {
            let mut ix = IvfFlat::new(
                &ctx,
                d,
                &IvfOptions {
                    nlist,
                    metric: a.metric,
                    precision: a.precision,
                    kmeans: KMeansOptions {
                        seed: a.seed,
                        ..KMeansOptions::default()
                    },
                },
            )
            .map_err(err)?;
            ix.train(&table).map_err(err)?;
            ix.add(&table).map_err(err)?;
            let stored = table.as_stored(a.precision);
            // The k the rankings ask of each search: a row and the item itself.
            let rl = row_len(n, top_k).map_err(err)?;
            let ko = KnnOptions {
                k: (rl + 1).min(n),
                metric: a.metric,
                ..KnnOptions::default()
            };
            let search = |q: &[f32], widen: usize| {
                let np = widened_nprobe(a.nprobe, widen, nlist);
                ix.search(q, d, &IvfSearch::new(np, ko.clone()))
                    .map(|r| r.0)
            };
            rankings_approx(&stored, &opts, search, &mut sink).map_err(err)?
        }
    };
    match a.shard {
        Some(_) => writer.finish_partial().map_err(err)?,
        None => writer.finish().map_err(err)?,
    }
    match graph {
        Some(Graph::Whole(w)) => w.finish().map_err(err)?,
        Some(Graph::Shard(w)) => w.finish().map_err(err)?,
        None => {}
    }
    let wall = t0.elapsed().as_secs_f64();
    let gpu_s = report.gpu_ns as f64 / 1e9;
    let path = match report.path {
        _ if a.index == Index::IvfFlat => {
            format!("IVF-Flat, {nlist} lists, nprobe {}", a.nprobe)
        }
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

/// The graph output: the whole graph, or a shard's slice of it.
enum Graph {
    Whole(KnnGraphWriter),
    Shard(KnnGraphShard),
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let result = match argv.first().map(String::as_str) {
        Some(what @ ("merge" | "merge-graph")) => merge(what, &argv[1..]),
        _ => run(common::parsed("rankings", parse())),
    };
    if let Err(e) = result {
        eprintln!("rankings: {e}");
        std::process::exit(1);
    }
}
