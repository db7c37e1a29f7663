//! Sequences on demand: upload a table, then time the first query (no G yet), warm single
//! queries, and batches of starts, through a `Sequencer`, beside the batch job that answers the
//! same starts (each query's ids are compared with it: exits 1 on any difference).
//!
//! ```text
//! cargo run --release --example bench_query -- --table T [--dim D] [--n N] [--center]
//!     [--precision fp32|fp16] [--device NAME|host] [--mode auto|gram|scan] [--g auto|rows|whole]
//!     [--k K] [--queries Q] [--batch B] [--label TEXT]
//! ```
//!
//! `--device host` runs the host engine (no Vulkan); otherwise the device named (default: the
//! machine's choice). `--queries Q` warm single queries from spread starts (default 50),
//! `--batch B` starts in one call (default 16).

use diversity::{
    Context, ContextOptions, Engine, GramPolicy, JobOptions, Mode, Precision, Sequencer,
    SequencerOptions,
};
use std::time::Instant;

mod common;

struct Args {
    table: String,
    dim: Option<usize>,
    n: Option<usize>,
    center: bool,
    precision: Precision,
    device: Option<String>,
    mode: Mode,
    g: GramPolicy,
    k: usize,
    queries: usize,
    batch: usize,
    label: String,
}

fn parse() -> Result<Args, String> {
    let mut args = common::Cli::new(include_str!("bench_query.rs"));
    let mut a = Args {
        table: String::new(),
        dim: None,
        n: None,
        center: false,
        precision: Precision::Fp16,
        device: None,
        mode: Mode::Auto,
        g: GramPolicy::Auto,
        k: 100,
        queries: 50,
        batch: 16,
        label: String::new(),
    };
    let err = |e: diversity::Error| e.to_string();
    while let Some(f) = args.flag()? {
        let mut val = || args.value().ok_or(format!("{f} needs a value"));
        match f.as_str() {
            "--table" => a.table = val()?,
            "--dim" => a.dim = Some(common::int_min(&f, &val()?, 1)?),
            "--n" => a.n = Some(common::int_min(&f, &val()?, 2)?),
            "--center" => a.center = true,
            "--precision" => a.precision = val()?.parse().map_err(err)?,
            "--device" => a.device = Some(val()?),
            "--mode" => a.mode = val()?.parse().map_err(err)?,
            "--g" => a.g = val()?.parse().map_err(err)?,
            "--k" => a.k = common::int_min(&f, &val()?, 1)?,
            "--queries" => a.queries = common::int_min(&f, &val()?, 1)?,
            "--batch" => a.batch = common::int_min(&f, &val()?, 1)?,
            "--label" => a.label = val()?,
            _ => return Err(format!("unknown argument {f}")),
        }
    }
    if a.table.is_empty() {
        return Err("--table is required".into());
    }
    Ok(a)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let a = common::parsed("bench_query", parse());
    let mut t = diversity::files::load_table(std::path::Path::new(&a.table), a.dim)
        .unwrap_or_else(|e| fail(&e.to_string()));
    if let Some(n) = a.n {
        t = t.head(n).unwrap_or_else(|e| fail(&e.to_string()));
    }
    if a.center {
        t = t.centered();
    }
    let n = t.n();
    let t0 = Instant::now();
    let (mut engine, name) = match a.device.as_deref() {
        Some("host") => (
            Engine::host_only(&t, a.precision).unwrap_or_else(|e| fail(&e.to_string())),
            format!("host engine, {} threads", diversity::host::threads()),
        ),
        dev => {
            let ctx = Context::new(&ContextOptions {
                device: dev.map(str::to_string),
                validation: false,
            })
            .unwrap_or_else(|e| fail(&e.to_string()));
            let name = ctx.caps().name.clone();
            let e = Engine::upload(&ctx, &t, a.precision).unwrap_or_else(|e| fail(&e.to_string()));
            (e, name)
        }
    };
    let upload_ms = ms(t0);
    let opts = SequencerOptions {
        job: JobOptions {
            mode: a.mode,
            ..Default::default()
        },
        g: a.g,
    };
    let mut s = Sequencer::new(&mut engine, opts).unwrap_or_else(|e| fail(&e.to_string()));
    let k = a.k.min(n - 1);
    let spread = |i: usize| ((i as u64 * 2_654_435_761) % n as u64) as u32;
    let mut answers: Vec<(u32, Vec<u32>)> = Vec::new();
    let q0 = Instant::now();
    let first = s.sequence(spread(0), k).expect("query");
    let first_ms = ms(q0);
    answers.push((spread(0), first));
    let mut single = Vec::new();
    for i in 1..=a.queries {
        let q = Instant::now();
        let r = s.sequence(spread(i), k).expect("query");
        single.push(ms(q));
        answers.push((spread(i), r));
    }
    // Warm: the same starts again (every row they read is built).
    let mut warm = Vec::new();
    for i in 1..=a.queries {
        let q = Instant::now();
        s.sequence(spread(i), k).expect("query");
        warm.push(ms(q));
    }
    let starts: Vec<u32> = (0..a.batch).map(|i| spread(i + 1)).collect();
    let mut batch = Vec::new();
    for _ in 0..5 {
        let q = Instant::now();
        s.sequences(&starts, k).expect("query");
        batch.push(ms(q));
    }
    let r = s.report();
    // The batch job on the same starts, through the engine: the same ids.
    let mut jopts = JobOptions {
        mode: a.mode,
        ..Default::default()
    };
    jopts.gram.steps = Some(k);
    jopts.scan.steps = Some(k);
    let all: Vec<u32> = answers.iter().map(|(s, _)| *s).collect();
    let mut uniq = all.clone();
    uniq.sort_unstable();
    uniq.dedup();
    let j0 = Instant::now();
    let mut job = engine.job(&uniq, &jopts).expect("job");
    job.run().expect("job");
    let job_ms = ms(j0);
    let flat = job.sequences_flat().expect("job");
    let mut same = true;
    for (st, got) in &answers {
        let i = uniq.binary_search(st).unwrap_or_else(|_| unreachable!());
        same &= flat[i * (k + 1)..(i + 1) * (k + 1)] == got[..];
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!(
        "{}: {name}, N={n} D={} {} centred={} mode={} g={} k={k}: upload {upload_ms:.1} ms; \
         first query {first_ms:.2} ms; single queries median {:.3} ms (new starts), {:.3} ms \
         (warm); {} starts in one call median {:.3} ms; G held: {} ({} of {n} rows, built in \
         {:.1} ms); batch job on the {} starts {job_ms:.1} ms; same ids as the batch job: {}",
        a.label,
        t.d(),
        a.precision.name(),
        a.center,
        r.mode.name(),
        a.g.name(),
        med(&mut single),
        med(&mut warm),
        a.batch,
        med(&mut batch),
        r.g,
        r.rows_built,
        r.g_ns as f64 / 1e6,
        uniq.len(),
        if same { "yes" } else { "NO" },
    );
    if !same {
        std::process::exit(1);
    }
}

fn fail(e: &str) -> ! {
    eprintln!("bench_query: {e}");
    std::process::exit(1);
}
