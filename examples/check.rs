//! The SPEC §Exactness 2 oracle as a command: checks every sequence of a `sequences` output JSON
//! against float64 distances along its own prefix, and prints the worst excess.
//!
//! ```text
//! cargo run --release --example check -- --table FILE [--dim D] [--center]
//!     [--precision fp32|fp16] --seqs OUT.json [--eps 1e-5] [--limit K]
//! ```

use diversity::reference::check_sequence;
use diversity::{files, Precision};

fn main() {
    if let Err(e) = run() {
        eprintln!("check: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut table, mut dim, mut center, mut precision, mut seqs, mut eps, mut limit) = (
        None,
        None,
        false,
        Precision::Fp32,
        None,
        1e-5f64,
        usize::MAX,
    );
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--table" => table = Some(val()?),
            "--dim" => dim = Some(val()?.parse().map_err(|_| "--dim: not a number")?),
            "--center" => center = true,
            "--precision" => {
                precision = val()?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--seqs" => seqs = Some(val()?),
            "--eps" => eps = val()?.parse().map_err(|_| "--eps: not a number")?,
            "--limit" => limit = val()?.parse().map_err(|_| "--limit: not a number")?,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let table_path = table.ok_or("--table is required")?;
    let mut t = files::load_table(table_path.as_ref(), dim).map_err(|e| e.to_string())?;
    if center {
        t = t.centered();
    }
    let stored = t.as_stored(precision);
    let path = seqs.ok_or("--seqs is required")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let map = json["sequences"].as_object().ok_or("no sequences object")?;
    let items: Vec<(u32, Vec<u32>)> = map
        .iter()
        .take(limit)
        .map(|(k, v)| {
            let s = k.parse().unwrap_or(u32::MAX);
            let seq = v
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| x.as_u64().unwrap_or(u64::MAX) as u32)
                        .collect()
                })
                .unwrap_or_default();
            (s, seq)
        })
        .collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results: Vec<_> = std::thread::scope(|sc| {
        let handles: Vec<_> = items
            .chunks(items.len().div_ceil(threads).max(1))
            .map(|part| {
                let stored = &stored;
                sc.spawn(move || {
                    part.iter()
                        .map(|(s, seq)| (*s, check_sequence(stored, *s, seq, eps)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let (mut worst, mut ties, mut steps) = (0f64, 0usize, 0usize);
    for (s, r) in &results {
        match r {
            Ok(c) => {
                worst = worst.max(c.worst_excess);
                ties += c.near_ties;
                steps += c.steps;
            }
            Err(v) => return Err(format!("start {s}: {v:?}")),
        }
    }
    println!(
        "ok: {} sequences, {steps} steps checked, worst excess {worst:.3e} (eps {eps:.0e}), {ties} near-tie picks",
        results.len()
    );
    Ok(())
}
