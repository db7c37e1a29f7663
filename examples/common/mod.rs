//! Argument helpers shared by the example programs (not an example itself).

use std::fmt::Display;
use std::str::FromStr;

/// A comma-separated list of values of a flag, each parsed with `FromStr` (`fp32,fp16`,
/// `block64,block128`, `256,512`): the first bad one is an error naming the flag and the value.
#[allow(dead_code)]
pub fn list<T: FromStr>(flag: &str, v: &str) -> Result<Vec<T>, String>
where
    T::Err: Display,
{
    v.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|e| format!("{flag} {x}: {e}"))
        })
        .collect()
}

/// A comma-separated list of switches of a flag (`1,0`; also `yes`/`no`, `true`/`false`): the
/// first bad one is an error naming the flag and the value.
#[allow(dead_code)]
pub fn switches(flag: &str, v: &str) -> Result<Vec<bool>, String> {
    v.split(',')
        .map(|x| match x {
            "1" | "yes" | "true" => Ok(true),
            "0" | "no" | "false" => Ok(false),
            _ => Err(format!("{flag} {x}: expected 1 or 0")),
        })
        .collect()
}

/// The oracle's account of many sequences (see [`check_all`]).
#[allow(dead_code)]
pub struct OracleReport {
    /// Sequences checked.
    pub sequences: usize,
    /// Steps checked, over all sequences.
    pub steps: usize,
    /// The largest excess over all steps.
    pub worst: f64,
    /// Near-tie picks, over all sequences.
    pub ties: usize,
    /// The violations, as `"<name>: <violation>"`.
    pub violations: Vec<String>,
}

/// SPEC §Exactness 2 on every `(name, start, sequence)` of `items`, in parallel over the CPU
/// cores. A worker that panics is an error naming the first item of its part (never a silently
/// shorter result), and so is checking nothing at all: a checker must be able to fail.
#[allow(dead_code)]
pub fn check_all(
    stored: &diversity::Table,
    items: &[(String, u32, Vec<u32>)],
    eps: f64,
) -> Result<OracleReport, String> {
    use diversity::reference::check_sequence;
    if items.is_empty() {
        return Err("nothing to check: no sequences".into());
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let parts: Vec<_> = items.chunks(items.len().div_ceil(threads).max(1)).collect();
    let results = std::thread::scope(|sc| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                sc.spawn(move || {
                    part.iter()
                        .map(|(_, s, seq)| check_sequence(stored, *s, seq, eps))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(items.len());
        for (h, part) in handles.into_iter().zip(&parts) {
            match h.join() {
                Ok(r) => all.extend(r),
                Err(p) => {
                    let why = p
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                        .unwrap_or("a panic");
                    return Err(format!(
                        "the check of sequence {} (one of {} in a worker thread) failed: {why}",
                        part[0].0,
                        part.len()
                    ));
                }
            }
        }
        Ok(all)
    })?;
    let mut r = OracleReport {
        sequences: 0,
        steps: 0,
        worst: 0.0,
        ties: 0,
        violations: Vec::new(),
    };
    for ((name, _, _), c) in items.iter().zip(results) {
        match c {
            Ok(c) => {
                r.sequences += 1;
                r.steps += c.steps;
                r.worst = r.worst.max(c.worst_excess);
                r.ties += c.near_ties;
            }
            Err(v) => r.violations.push(format!("{name}: {v:?}")),
        }
    }
    if r.violations.is_empty() && r.steps == 0 {
        return Err(format!(
            "nothing checked: {} sequence(s) with no steps",
            r.sequences
        ));
    }
    Ok(r)
}
