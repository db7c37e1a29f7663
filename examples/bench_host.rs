//! The native CPU engine's whole-cache benchmark: every item a start, every step, on every core;
//! prints G's build time, the steps' time, G entry-updates per second and the bytes per second
//! they read from G, next to this machine's measured read bandwidth (one pass over a buffer
//! much larger than its caches, on every core). Compare with `../shared/peer/numpy_gram.py` on
//! the same table in the same run (bench/host.sh does both).
//!
//! ```text
//! cargo run --release --example bench_host -- TABLE.npy [--n N] [--center]
//!     [--precision fp32|fp16] [--chunk C] [--out F.u32]
//! ```
//!
//! `--n N` takes the table's first N rows; `--chunk C`: every sequence advances C steps before
//! any goes on (0, the default: each sequence runs to its end at once).

use diversity::host::{isa, threads, HostGram, HostJob, HostOptions, HostTable};
use diversity::Precision;
use rayon::prelude::*;
use std::time::Instant;

mod common;

/// The command line.
struct Args {
    table: String,
    n: Option<usize>,
    center: bool,
    precision: Precision,
    chunk: usize,
    out: Option<String>,
}

fn parse() -> Result<Args, String> {
    let mut args = common::Cli::new(include_str!("bench_host.rs"));
    let (mut table, mut n, mut center, mut precision, mut out) =
        (None, None, false, Precision::Fp32, None);
    let mut chunk = 0usize;
    while let Some(a) = args.flag()? {
        let mut val = || args.value().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--n" => n = Some(common::int_min(&a, &val()?, 1)?),
            "--center" => center = true,
            "--precision" => {
                precision = val()?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--out" => out = Some(val()?),
            "--chunk" => chunk = common::int_min(&a, &val()?, 0)?,
            _ if a.starts_with('-') => return Err(format!("unknown argument {a}")),
            _ if table.is_none() => table = Some(a),
            _ => return Err(format!("unexpected argument {a}")),
        }
    }
    Ok(Args {
        table: table.ok_or("TABLE.npy is required")?,
        n,
        center,
        precision,
        chunk,
        out,
    })
}

fn main() {
    let Args {
        table,
        n,
        center,
        precision,
        chunk,
        out,
    } = common::parsed("bench_host", parse());
    let mut t = diversity::files::load_npy(std::path::Path::new(&table)).expect("table");
    if let Some(n) = n {
        t = t.head(n).expect("head");
    }
    if center {
        t = t.centered();
    }
    let (n, d) = (t.n(), t.d());
    let bw = read_bandwidth();
    let ht = HostTable::new(&t, precision).expect("table");
    let t0 = Instant::now();
    let g = HostGram::build(&ht).expect("G");
    let g_s = t0.elapsed().as_secs_f64();
    let starts: Vec<u32> = (0..n as u32).collect();
    let opts = HostOptions { chunk, steps: None };
    let mut job = HostJob::gram(&g, &starts, &opts).expect("job");
    let t1 = Instant::now();
    job.run().expect("run");
    let steps_s = t1.elapsed().as_secs_f64();
    let total = g_s + steps_s;
    let updates = (n as f64) * (n as f64) * (n as f64 - 1.0);
    let rescored: u64 = job.rescored_steps().iter().map(|&r| r as u64).sum();
    println!(
        "host gram whole cache N={n} D={d} {} centred={center}: {total:.3} s (G {g_s:.3} s, steps \
         {steps_s:.3} s) on {} threads ({}); {:.3} G entry-updates/s = {:.2} GB/s of G rows; \
         machine read bandwidth {bw:.2} GB/s; certificate re-scored {rescored} of {} steps ({:.3}%)",
        precision.name(),
        threads(),
        isa(),
        updates / steps_s / 1e9,
        updates * 4.0 / steps_s / 1e9,
        n * (n - 1),
        100.0 * rescored as f64 / (n * (n - 1)).max(1) as f64
    );
    if let Some(path) = out {
        let flat = job.sequence_columns(0, n).expect("sequences");
        std::fs::write(path, bytemuck::cast_slice::<u32, u8>(&flat)).expect("write");
    }
}

/// GB/s of one read pass over 1 GiB of f64 on every core (the best of three).
fn read_bandwidth() -> f64 {
    let v = vec![1.0f64; 1 << 27];
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let s: f64 = v.par_chunks(1 << 16).map(|c| c.iter().sum::<f64>()).sum();
        let el = t.elapsed().as_secs_f64();
        assert!(s > 0.0);
        best = best.max((v.len() * 8) as f64 / el / 1e9);
    }
    best
}
