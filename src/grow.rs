//! Caches that grow: the sequences of a table with rows appended, from the sequences of the
//! table before (every start, in order), recomputing only what the new rows change.
//!
//! An old sequence stays what a fresh run on the new table computes up to the first step at
//! which an appended row could be picked: before it, the candidates it chose among gained only
//! rows that lose, and every engine's arithmetic for a candidate depends on that candidate and
//! the running sum alone. [`divergences`] finds that step by replaying the old sequence in
//! float64: `c · e_a` for every appended row a is kept as a sum of `H[p][a] = e_p · e_a` over the
//! picks p (H computed once for the distinct picks), so a step costs O(A) for A appended rows,
//! and the step is *suspect* as soon as an appended row's exact distance comes within ε = 1e-5
//! of the old pick's. That margin is what makes the rule sound rather than likely: every engine's
//! pick is within ε of the exact best (the exactness contract, tested for each), so a row whose
//! distance is below the old pick's by more than ε cannot have been the engine's pick. From the
//! suspect step on, the sequence is recomputed by the engine itself, resuming from the old
//! prefix before it ([`Engine::resume_job`], bit-identical to an uninterrupted run), so the
//! result is the fresh run's, byte for byte. New starts are computed whole; full-length
//! sequences that never reach a suspect step are extended by resuming from their whole old row.
//!
//! Centring is the caller's refusal: appended rows move the column mean, so every centred row
//! changes. It may touch the engine core, the host table and the batch checks.

use crate::checksum::{fnv1a64, FNV64_START};
use crate::engine::{Engine, JobOptions, Prefix};
use crate::error::{Error, Result};
use crate::table::{Precision, Table};
use rayon::prelude::*;
use std::path::Path;

/// The replay's margin: the exactness contract's ε (absolute, distances in [0, 2]).
pub const MARGIN: f64 = 1e-5;

/// The most resume jobs [`grow`] runs (one per prefix length).
const MAX_JOBS: usize = 64;

/// What [`grow`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrowReport {
    /// Rows of the old and of the new table.
    pub old_n: usize,
    /// Rows of the new table.
    pub new_n: usize,
    /// Old sequences kept as they were.
    pub kept: usize,
    /// Old sequences recomputed from a suspect step, or extended past their old end.
    pub recomputed: usize,
    /// Sequences of the new starts (computed whole).
    pub new_starts: usize,
    /// Steps computed (resumed and new), of `steps_total` in the new sequences.
    pub steps_computed: u64,
    /// Steps in all the new sequences.
    pub steps_total: u64,
    /// Jobs run (one per prefix-length bucket, and one for the new starts).
    pub jobs: usize,
    /// Of which taken from the checkpoint (a resumed update).
    pub resumed_jobs: usize,
}

/// Where [`grow`] keeps each finished job's rows (`grow-NNN.u32` in `dir`, written
/// atomically, each with the run's fingerprint and a checksum), and whether to take those a
/// killed run left (`resume`; otherwise they are removed first).
#[derive(Clone, Copy, Debug)]
pub struct Checkpoint<'a> {
    /// The directory (created if missing).
    pub dir: &'a Path,
    /// Take the jobs a previous run of the same update finished.
    pub resume: bool,
}

const MAGIC: &[u8; 8] = b"DVGROW01";

/// One finished job's rows as a checkpoint file's bytes.
fn job_bytes(fp: u64, j: usize, starts: &[u32], rows: &[u32], new_len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(28 + 4 * (starts.len() + rows.len()) + 8);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&fp.to_le_bytes());
    for v in [j, starts.len(), new_len] {
        b.extend_from_slice(&(v as u32).to_le_bytes());
    }
    b.extend_from_slice(bytemuck::cast_slice(starts));
    b.extend_from_slice(bytemuck::cast_slice(rows));
    let sum = fnv1a64(FNV64_START, &b);
    b.extend_from_slice(&sum.to_le_bytes());
    b
}

/// The rows of job `j` from its checkpoint file, if the file is whole and of this run and job.
fn job_from(bytes: &[u8], fp: u64, j: usize, starts: &[u32], new_len: usize) -> Option<Vec<u32>> {
    let body_len = 28 + 4 * starts.len() * (1 + new_len);
    if bytes.len() != body_len + 8 || &bytes[..8] != MAGIC {
        return None;
    }
    let (body, sum) = bytes.split_at(body_len);
    if fnv1a64(FNV64_START, body).to_le_bytes() != sum {
        return None;
    }
    let word = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().unwrap_or([0; 4]));
    let fp_ok = body[8..16] == fp.to_le_bytes();
    let head_ok = [word(16), word(20), word(24)] == [j as u32, starts.len() as u32, new_len as u32];
    let words: Vec<u32> = body[28..]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let (got_starts, rows) = words.split_at(starts.len());
    (fp_ok && head_ok && got_starts == starts).then(|| rows.to_vec())
}

/// For each old sequence (`rows`: one row of `len` entries per start 0..n_old, over the first
/// `n_old` rows of `table` as stored at `precision`), the first step at which one of the rows
/// past `n_old` comes within [`MARGIN`] of the old pick (`None`: no step of the row).
pub fn divergences(
    table: &Table,
    precision: Precision,
    n_old: usize,
    rows: &[u32],
    len: usize,
) -> Result<Vec<Option<usize>>> {
    check_rows(table.n(), n_old, rows, len)?;
    Ok(replay(table, precision, n_old, rows, len))
}

/// [`divergences`] on rows [`check_rows`] has passed.
fn replay(
    table: &Table,
    precision: Precision,
    n_old: usize,
    rows: &[u32],
    len: usize,
) -> Vec<Option<usize>> {
    let (n, d) = (table.n(), table.d());
    let stored = table.as_stored(precision);
    let e = stored.data();
    let row = |i: usize| &e[i * d..(i + 1) * d];
    let norm: Vec<f64> = (0..n)
        .map(|i| {
            row(i)
                .iter()
                .map(|&v| v as f64 * v as f64)
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let appended = n - n_old;
    // H[p] = e_p · e_a for every appended a, for each row p some old sequence holds before its
    // last entry (the rows the replay adds to the running sum; the start always).
    let mut used = vec![false; n_old];
    for r in rows.chunks_exact(len) {
        for &p in &r[..(len - 1).max(1)] {
            used[p as usize] = true;
        }
    }
    let mut slot = vec![usize::MAX; n_old];
    let mut picks = Vec::new();
    for (p, _) in used.iter().enumerate().filter(|(_, &u)| u) {
        slot[p] = picks.len();
        picks.push(p);
    }
    let dot =
        |a: &[f32], b: &[f32]| -> f64 { a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum() };
    let h: Vec<f64> = picks
        .par_iter()
        .flat_map_iter(|&p| (n_old..n).map(move |a| dot(row(p), row(a))))
        .collect();
    let dist = |dot_c: f64, c_norm: f64, x_norm: f64| {
        if c_norm == 0.0 || x_norm == 0.0 {
            1.0
        } else {
            1.0 - dot_c / (c_norm * x_norm)
        }
    };
    rows.par_chunks_exact(len)
        .map(|r| {
            let mut c = vec![0f64; d];
            let mut acc = vec![0f64; appended];
            let add = |c: &mut Vec<f64>, acc: &mut Vec<f64>, p: usize| {
                for (c, &v) in c.iter_mut().zip(row(p)) {
                    *c += v as f64;
                }
                let hp = &h[slot[p] * appended..(slot[p] + 1) * appended];
                for (a, &v) in acc.iter_mut().zip(hp) {
                    *a += v;
                }
            };
            add(&mut c, &mut acc, r[0] as usize);
            for (t, &p) in r.iter().enumerate().skip(1) {
                let p = p as usize;
                let cn = c.iter().map(|v| v * v).sum::<f64>().sqrt();
                let dp = dist(dot64(&c, row(p)), cn, norm[p]);
                let best_new = (0..appended)
                    .map(|a| dist(acc[a], cn, norm[n_old + a]))
                    .fold(f64::NEG_INFINITY, f64::max);
                if best_new >= dp - MARGIN {
                    return Some(t);
                }
                if t + 1 < len {
                    add(&mut c, &mut acc, p);
                }
            }
            None
        })
        .collect()
}

fn dot64(c: &[f64], e: &[f32]) -> f64 {
    c.iter().zip(e).map(|(&a, &b)| a * b as f64).sum()
}

fn check_rows(n: usize, n_old: usize, rows: &[u32], len: usize) -> Result<()> {
    if n_old == 0 || n_old >= n {
        return Err(Error::Invalid(format!(
            "the old table has {n_old} rows and the new one {n}: nothing appended"
        )));
    }
    if len == 0 || len > n_old || rows.len() != n_old * len {
        return Err(Error::Invalid(format!(
            "{} old entries for {n_old} sequences of {len}",
            rows.len()
        )));
    }
    for (s, r) in rows.chunks_exact(len).enumerate() {
        if r[0] as usize != s {
            return Err(Error::Invalid(format!(
                "old sequence {s} begins with {}: a cache for every start in order is needed",
                r[0]
            )));
        }
        if let Some(&p) = r.iter().find(|&&p| p as usize >= n_old) {
            return Err(Error::Invalid(format!(
                "old sequence {s} holds {p}, past the old table's {n_old} rows"
            )));
        }
    }
    Ok(())
}

/// The sequences of every start of `engine`'s table (the new one, `table` as uploaded) with
/// `opts` (its `steps` the old cache's top_k, or `None` for full length), from the old cache's
/// `rows` (every start 0..n_old, `len` entries each, computed with the same options on the
/// table's first `n_old` rows). Returns the new rows (every start in order, each
/// `min(steps, N − 1) + 1` entries), byte-identical to a fresh run's, and what was recomputed.
/// With a [`Checkpoint`], each finished job is kept: a killed update run again with `resume`
/// computes only the jobs it had not finished, and writes the same rows.
pub fn grow(
    engine: &mut Engine,
    table: &Table,
    n_old: usize,
    rows: &[u32],
    len: usize,
    opts: &JobOptions,
    checkpoint: Option<Checkpoint>,
) -> Result<(Vec<u32>, GrowReport)> {
    let (n, _, precision) = engine.shape();
    if table.n() != n {
        return Err(Error::Invalid(format!(
            "the table has {} rows, the engine's {n}",
            table.n()
        )));
    }
    check_rows(n, n_old, rows, len)?;
    let steps = opts.gram.steps;
    let new_len = crate::batch::sequence_length(n, steps);
    let old_full = len == n_old;
    if !old_full && crate::batch::sequence_length(n_old, steps) != len {
        return Err(Error::Invalid(format!(
            "the old sequences have {len} entries; the options give {} on {n_old} rows",
            crate::batch::sequence_length(n_old, steps)
        )));
    }
    let div = replay(table, precision, n_old, rows, len);
    let mut out = vec![0u32; n * new_len];
    let mut report = GrowReport {
        old_n: n_old,
        new_n: n,
        steps_total: (n * (new_len - 1)) as u64,
        ..Default::default()
    };
    // Buckets of resumed sequences by prefix length: the suspect step itself, or the whole old
    // row where a full-length sequence only needs extending; past MAX_JOBS distinct lengths,
    // each rounded down to the nearest of MAX_JOBS quantiles (a shorter prefix than the suspect
    // step is as valid, and costs its extra steps).
    let keep_of = |dv: &Option<usize>| match dv {
        Some(t) => Some(*t),
        None if old_full => Some(len),
        None => None,
    };
    let mut lengths: Vec<usize> = div.iter().filter_map(keep_of).collect();
    lengths.sort_unstable();
    lengths.dedup();
    if lengths.len() > MAX_JOBS {
        lengths = (0..MAX_JOBS)
            .map(|i| lengths[i * lengths.len() / MAX_JOBS])
            .collect();
    }
    let mut buckets: std::collections::BTreeMap<usize, Vec<u32>> = Default::default();
    for (s, dv) in div.iter().enumerate() {
        let keep = keep_of(dv).map(|k| {
            let i = lengths.partition_point(|&l| l <= k);
            lengths[i - 1]
        });
        match keep {
            Some(k) => buckets.entry(k).or_default().push(s as u32),
            None => {
                out[s * new_len..s * new_len + len].copy_from_slice(&rows[s * len..(s + 1) * len]);
                report.kept += 1;
            }
        }
    }
    // The run's fingerprint: what a checkpoint file must have been computed from.
    let mut fp = fnv1a64(FNV64_START, bytemuck::cast_slice(rows));
    fp = fnv1a64(
        fp,
        crate::cache::table_checksum(table, precision).as_bytes(),
    );
    fp = fnv1a64(fp, format!("{n_old} {len} {new_len} {opts:?}").as_bytes());
    if let Some(c) = checkpoint {
        std::fs::create_dir_all(c.dir).map_err(crate::pending_file::io_err(c.dir))?;
        if !c.resume {
            for name in crate::checkpoint::checkpoint_files(c.dir) {
                if name.starts_with("grow-") {
                    let p = c.dir.join(&name);
                    std::fs::remove_file(&p).map_err(crate::pending_file::io_err(&p))?;
                }
            }
        }
    }
    // Each job: its starts and the prefix length they resume from (None: the new starts).
    let fresh: Vec<u32> = (n_old as u32..n as u32).collect();
    let mut jobs: Vec<(Option<usize>, &[u32])> =
        buckets.iter().map(|(&k, s)| (Some(k), &s[..])).collect();
    jobs.push((None, &fresh));
    for (j, &(k, starts)) in jobs.iter().enumerate() {
        let file = checkpoint.map(|c| c.dir.join(format!("grow-{j:03}.u32")));
        let saved = match (&file, checkpoint.is_some_and(|c| c.resume)) {
            (Some(f), true) => std::fs::read(f)
                .ok()
                .and_then(|b| job_from(&b, fp, j, starts, new_len)),
            _ => None,
        };
        let got = match saved {
            Some(r) => {
                report.resumed_jobs += 1;
                r
            }
            None => {
                let got = run_job(engine, table, rows, len, opts, k, starts)?;
                if let Some(f) = &file {
                    crate::pending_file::write_atomic(f, &job_bytes(fp, j, starts, &got, new_len))?;
                }
                got
            }
        };
        for (&s, r) in starts.iter().zip(got.chunks_exact(new_len)) {
            out[s as usize * new_len..(s as usize + 1) * new_len].copy_from_slice(r);
        }
        match k {
            Some(k) => {
                report.recomputed += starts.len();
                report.steps_computed += (starts.len() * (new_len - k)) as u64;
            }
            None => {
                report.new_starts = starts.len();
                report.steps_computed += (starts.len() * (new_len - 1)) as u64;
            }
        }
        report.jobs += 1;
    }
    Ok((out, report))
}

/// One job of [`grow`]: `starts` resumed from their old prefixes of `k` entries, or
/// (k = None) computed whole; their rows. Run in batches the engine takes.
fn run_job(
    engine: &mut Engine,
    table: &Table,
    rows: &[u32],
    len: usize,
    opts: &JobOptions,
    k: Option<usize>,
    starts: &[u32],
) -> Result<Vec<u32>> {
    let n = engine.shape().0;
    let steps = crate::batch::sequence_length(n, opts.gram.steps) - 1;
    let batch = engine.max_batch(opts.mode, steps);
    let mut out = Vec::new();
    for part in starts.chunks(batch) {
        let mut job = match k {
            Some(k) => {
                let prefix: Vec<u32> = part
                    .iter()
                    .flat_map(|&s| rows[s as usize * len..s as usize * len + k].iter().copied())
                    .collect();
                let p = Prefix {
                    host: Some(table),
                    rows: &prefix,
                    len: k,
                };
                engine.resume_job(part, p, opts)?
            }
            None => engine.job(part, opts)?,
        };
        job.run()?;
        out.extend(job.sequences_flat()?);
    }
    Ok(out)
}
