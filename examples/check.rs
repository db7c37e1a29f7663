//! The ε-argmax oracle as a command: checks every sequence of a `sequences` output JSON
//! against float64 distances along its own prefix, and prints the worst excess.
//!
//! Keys and entries are row indices, or the table's ids when it has them (an `embeddings.json`
//! with ids, as the driver writes its cache). A key or entry that maps to no row, a violation, a
//! check that fails in a worker thread, and a cache with nothing to check are errors (exit 1).
//!
//! ```text
//! cargo run --release --example check -- --table FILE [--dim D] [--center]
//!     [--precision fp32|fp16] --seqs OUT.json [--eps 1e-5] [--limit K]
//! ```

mod common;

use diversity::{files, Precision};
use serde_json::Value;
use std::collections::HashMap;

/// The parsed command line.
struct Args {
    table: Option<String>,
    dim: Option<usize>,
    center: bool,
    precision: Precision,
    seqs: Option<String>,
    eps: f64,
    limit: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = common::Cli::new(include_str!("check.rs"));
    let mut o = Args {
        table: None,
        dim: None,
        center: false,
        precision: Precision::Fp32,
        seqs: None,
        eps: 1e-5,
        limit: usize::MAX,
    };
    while let Some(a) = args.flag()? {
        let mut val = || args.value().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--table" => o.table = Some(val()?),
            "--dim" => o.dim = Some(common::int_min(&a, &val()?, 1)?),
            "--center" => o.center = true,
            "--precision" => {
                o.precision = val()?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--seqs" => o.seqs = Some(val()?),
            // A NaN, infinite or negative ε would make the check pass or fail every step.
            "--eps" => o.eps = common::number(&a, &val()?, false)?,
            "--limit" => o.limit = common::int_min(&a, &val()?, 1)?,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.table.is_none() {
        return Err("--table is required".into());
    }
    if o.seqs.is_none() {
        return Err("--seqs is required".into());
    }
    Ok(o)
}

fn main() {
    let a = common::parsed("check", parse());
    if let Err(e) = run(a) {
        eprintln!("check: {e}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<(), String> {
    let Args {
        table,
        dim,
        center,
        precision,
        seqs,
        eps,
        limit,
    } = a;
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
    // With ids (embeddings.json), keys and values are the rows' ids: map them back to indices.
    let index = Index::new(&t, &table_path);
    let n = stored.n();
    let items = map
        .iter()
        .take(limit)
        .map(|(k, v)| {
            let s = index.key(k).map_err(|e| format!("{path}: {e}"))?;
            if s as usize >= n {
                return Err(format!(
                    "{path}: sequence {k:?}: start {s} is out of range (the table has {n} rows)"
                ));
            }
            let seq = v
                .as_array()
                .ok_or(format!("{path}: sequence {k:?} is not an array"))?
                .iter()
                .map(|x| {
                    index
                        .value(x)
                        .map_err(|e| format!("{path}: sequence {k:?}: {e}"))
                })
                .collect::<Result<Vec<u32>, String>>()?;
            Ok((k.clone(), s, seq))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let r = common::check_all(&stored, &items, eps).map_err(|e| format!("{path}: {e}"))?;
    if let Some(v) = r.violations.first() {
        return Err(format!(
            "{path}: {} of {} sequences violate the oracle; the first: {v}",
            r.violations.len(),
            items.len()
        ));
    }
    println!(
        "ok: {} sequences, {} steps checked, worst excess {:.3e} (eps {eps:.0e}), {} near-tie picks",
        r.sequences, r.steps, r.worst, r.ties
    );
    Ok(())
}

/// Cache keys and values to row indices: through the table's ids when it has them (a string id
/// as is, a number id as its decimal text), else 0-based indices.
struct Index {
    ids: Option<HashMap<String, u32>>,
    table: String,
}

impl Index {
    fn new(t: &diversity::Table, table: &str) -> Self {
        let ids = t.ids().map(|ids| {
            ids.iter()
                .enumerate()
                .map(|(i, id)| (id_text(id), i as u32))
                .collect()
        });
        Index {
            ids,
            table: table.to_string(),
        }
    }

    fn key(&self, k: &str) -> Result<u32, String> {
        match &self.ids {
            Some(m) => m
                .get(k)
                .copied()
                .ok_or_else(|| format!("key {k:?} is not an id of {}", self.table)),
            None => k.parse().map_err(|_| {
                format!(
                    "key {k:?} is not a row index, and {} has no ids to map it through",
                    self.table
                )
            }),
        }
    }

    fn value(&self, v: &Value) -> Result<u32, String> {
        match (&self.ids, v) {
            (Some(m), Value::String(_) | Value::Number(_)) => m
                .get(&id_text(v))
                .copied()
                .ok_or_else(|| format!("entry {v} is not an id of {}", self.table)),
            (None, Value::Number(x)) => x
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| format!("entry {v} is not a row index")),
            _ => Err(format!("entry {v} is not a row index or id")),
        }
    }
}

fn id_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
