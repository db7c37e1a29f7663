//! A cache that grows: the sequences of a table's first N − A rows (the old cache), then the
//! table's, once fresh and once grown from the old ones (`diversity::grow`), timed side by side in
//! one run; exits 1 unless the grown rows are the fresh run's.
//!
//! ```text
//! cargo run --release --example bench_grow -- --table T [--dim D] [--n N] [--append A]
//!     [--top-k K] [--precision fp32|fp16] [--device NAME|host] [--mode auto|gram|scan]
//!     [--label TEXT]
//! ```
//!
//! `--append A` rows are appended (default 1% of N); `--top-k K` steps per sequence (default
//! 100; 0 = full length).

use diversity::{Context, ContextOptions, Engine, JobOptions, Mode, Precision, Table};
use std::time::Instant;

mod common;

struct Args {
    table: String,
    dim: Option<usize>,
    n: Option<usize>,
    append: Option<usize>,
    top_k: usize,
    precision: Precision,
    device: Option<String>,
    mode: Mode,
    label: String,
}

fn parse() -> Result<Args, String> {
    let mut args = common::Cli::new(include_str!("bench_grow.rs"));
    let mut a = Args {
        table: String::new(),
        dim: None,
        n: None,
        append: None,
        top_k: 100,
        precision: Precision::Fp16,
        device: None,
        mode: Mode::Auto,
        label: String::new(),
    };
    let err = |e: diversity::Error| e.to_string();
    while let Some(f) = args.flag()? {
        let mut val = || args.value().ok_or(format!("{f} needs a value"));
        match f.as_str() {
            "--table" => a.table = val()?,
            "--dim" => a.dim = Some(common::int_min(&f, &val()?, 1)?),
            "--n" => a.n = Some(common::int_min(&f, &val()?, 3)?),
            "--append" => a.append = Some(common::int_min(&f, &val()?, 1)?),
            "--top-k" => a.top_k = common::int_min(&f, &val()?, 0)?,
            "--precision" => a.precision = val()?.parse().map_err(err)?,
            "--device" => a.device = Some(val()?),
            "--mode" => a.mode = val()?.parse().map_err(err)?,
            "--label" => a.label = val()?,
            _ => return Err(format!("unknown argument {f}")),
        }
    }
    if a.table.is_empty() {
        return Err("--table is required".into());
    }
    Ok(a)
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("bench_grow: {e}");
    std::process::exit(1);
}

fn main() {
    let a = common::parsed("bench_grow", parse());
    let mut t = diversity::files::load_table(std::path::Path::new(&a.table), a.dim)
        .unwrap_or_else(|e| fail(e));
    if let Some(n) = a.n {
        t = t.head(n).unwrap_or_else(|e| fail(e));
    }
    let n = t.n();
    let append = a.append.unwrap_or((n / 100).max(1)).min(n - 2);
    let n_old = n - append;
    let old = t.head(n_old).unwrap_or_else(|e| fail(e));
    let ctx = match a.device.as_deref() {
        Some("host") => None,
        dev => Some(
            Context::new(&ContextOptions {
                device: dev.map(str::to_string),
                validation: false,
            })
            .unwrap_or_else(|e| fail(e)),
        ),
    };
    let engine = |t: &Table| match &ctx {
        None => Engine::host_only(t, a.precision).unwrap_or_else(|e| fail(e)),
        Some(c) => Engine::upload(c, t, a.precision).unwrap_or_else(|e| fail(e)),
    };
    let steps = (a.top_k > 0).then_some(a.top_k);
    let mut opts = JobOptions {
        mode: a.mode,
        ..Default::default()
    };
    opts.gram.steps = steps;
    opts.scan.steps = steps;
    // Every start, in batches the engine takes.
    let run = |e: &mut Engine, n: usize| {
        let starts: Vec<u32> = (0..n as u32).collect();
        let t0 = Instant::now();
        let batch = e.max_batch(a.mode, steps.unwrap_or(n - 1).min(n - 1));
        let (mut rows, mut mode) = (Vec::new(), a.mode);
        for part in starts.chunks(batch) {
            let mut job = e.job(part, &opts).unwrap_or_else(|e| fail(e));
            job.run().unwrap_or_else(|e| fail(e));
            rows.extend(job.sequences_flat().unwrap_or_else(|e| fail(e)));
            mode = job.mode();
        }
        (rows, t0.elapsed().as_secs_f64(), mode)
    };
    let (old_rows, old_s, _) = run(&mut engine(&old), n_old);
    let mut fresh_engine = engine(&t);
    let (fresh, fresh_s, mode) = run(&mut fresh_engine, n);
    drop(fresh_engine);
    let mut e = engine(&t);
    let t0 = Instant::now();
    let len = old_rows.len() / n_old;
    let (grown, r) = diversity::grow::grow(&mut e, &t, n_old, &old_rows, len, &opts, None)
        .unwrap_or_else(|e| fail(e));
    let grow_s = t0.elapsed().as_secs_f64();
    let same = grown == fresh;
    // The old sequences whose fresh rows differ within the old length (the least any update
    // must recompute), and the steps from each one's first difference.
    let new_len = fresh.len() / n;
    let (mut changed, mut changed_steps) = (0usize, 0usize);
    for s in 0..n_old {
        let (o, f) = (
            &old_rows[s * len..(s + 1) * len],
            &fresh[s * new_len..s * new_len + len],
        );
        if let Some(t) = o.iter().zip(f).position(|(x, y)| x != y) {
            changed += 1;
            changed_steps += new_len - t;
        }
    }
    println!(
        "{}: {} N={n_old}+{append} D={} {} mode={} top_k={}: old cache {old_s:.2} s; fresh run \
         {fresh_s:.2} s; grow {grow_s:.2} s ({:.1}% of fresh): {} old sequences kept, {} \
         recomputed, {} new, {} of {} steps computed ({:.1}%) in {} jobs (the fresh run changed \
         {changed} old sequences, {changed_steps} steps from their first difference on); same \
         rows as the fresh run: {}",
        a.label,
        match &ctx {
            None => format!("host engine, {} threads", diversity::host::threads()),
            Some(c) => c.caps().name.clone(),
        },
        t.d(),
        a.precision.name(),
        mode.name(),
        if a.top_k == 0 {
            "full".to_string()
        } else {
            a.top_k.to_string()
        },
        100.0 * grow_s / fresh_s,
        r.kept,
        r.recomputed,
        r.new_starts,
        r.steps_computed,
        r.steps_total,
        100.0 * r.steps_computed as f64 / r.steps_total.max(1) as f64,
        r.jobs,
        if same { "yes" } else { "NO" },
    );
    if !same {
        std::process::exit(1);
    }
}
