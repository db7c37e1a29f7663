//! The float64 CPU reference and the exactness oracle: every pick of a sequence must be within
//! ε of the best exact distance along the sequence's own prefix.
//! Host arithmetic only: it may touch the host [`Table`] and [`crate::metric`], never a device,
//! so it can judge every engine.
//!
//! The oracle does not ask for "the same sequence as some other code": it walks the engine's own
//! sequence and, at every step, recomputes every candidate's distance in float64 from the
//! engine's prefix. The pick must be within `eps` of the best distance. Rounding-level near-ties
//! may go either way; nothing else may.

use crate::metric::Metric;
use crate::table::Table;

/// The exact distance of the definition for a centroid `c` with squared norm `cc`, a row with
/// dot product `dot` and squared norm `ee`: `1 − cos`, or 1 when either norm is zero.
fn distance(dot: f64, cc: f64, ee: f64) -> f64 {
    if cc == 0.0 || ee == 0.0 {
        1.0
    } else {
        1.0 - dot / (cc.sqrt() * ee.sqrt())
    }
}

fn sq_norms(t: &Table) -> Vec<f64> {
    (0..t.n())
        .map(|i| t.row(i).iter().map(|&v| (v as f64) * (v as f64)).sum())
        .collect()
}

/// A float64 diversity sequence: `steps` steps after `start` (ties to the lowest index).
/// Slow and simple, O(steps · N · D); use it on small tables.
pub fn reference_sequence(table: &Table, start: u32, steps: usize) -> Vec<u32> {
    let (n, d) = (table.n(), table.d());
    let ee = sq_norms(table);
    let mut chosen = vec![false; n];
    let mut c = vec![0f64; d];
    let mut seq = vec![start];
    chosen[start as usize] = true;
    add_row(&mut c, table.row(start as usize));
    for _ in 0..steps.min(n - 1) {
        let cc: f64 = c.iter().map(|v| v * v).sum();
        let best = farthest(table, &c, cc, &ee, &chosen);
        chosen[best.1] = true;
        seq.push(best.1 as u32);
        add_row(&mut c, table.row(best.1));
    }
    seq
}

/// The candidate farthest from the running sum `c` (squared norm `cc`; `ee` the rows' squared
/// norms) among those not yet `chosen`, with its exact distance: the largest [`distance`], ties
/// to the lowest index. Both the reference and the oracle pick with it.
fn farthest(table: &Table, c: &[f64], cc: f64, ee: &[f64], chosen: &[bool]) -> (f64, usize) {
    let mut best = (f64::NEG_INFINITY, 0usize);
    for (x, _) in chosen.iter().enumerate().filter(|(_, &taken)| !taken) {
        let dist = distance(dot(c, table.row(x)), cc, ee[x]);
        if dist > best.0 {
            best = (dist, x);
        }
    }
    best
}

fn add_row(c: &mut [f64], row: &[f32]) {
    for (a, &v) in c.iter_mut().zip(row) {
        *a += v as f64;
    }
}

fn dot(c: &[f64], row: &[f32]) -> f64 {
    c.iter().zip(row).map(|(a, &b)| a * b as f64).sum()
}

/// What the oracle found wrong with a sequence.
#[derive(Clone, Debug, PartialEq)]
pub enum Violation {
    /// The sequence does not begin with its start.
    WrongStart {
        /// Expected start.
        expected: u32,
        /// First entry.
        got: u32,
    },
    /// An index ≥ N, or one seen before.
    NotAPermutation {
        /// The step.
        step: usize,
        /// The bad index.
        index: u32,
    },
    /// The pick is more than `eps` below the best exact distance.
    NotArgmax {
        /// The step.
        step: usize,
        /// The engine's pick and its exact distance.
        picked: (u32, f64),
        /// The best candidate and its exact distance.
        best: (u32, f64),
    },
}

/// The oracle's account of one sequence.
#[derive(Clone, Debug, Default)]
pub struct Check {
    /// Steps checked.
    pub steps: usize,
    /// Largest `best − picked` exact distance over all steps (0 when every pick is the best).
    pub worst_excess: f64,
    /// The step of that worst excess.
    pub worst_step: usize,
    /// Steps where the pick was not the float64 argmax but within `eps` of it.
    pub near_ties: usize,
}

/// The exactness oracle on one sequence: `seq` must start with `start`, be a prefix of a
/// permutation, and every pick must be within `eps` of the best float64 distance along `seq`'s
/// own prefix. `table` must be the table as stored ([`Table::as_stored`]).
pub fn check_sequence(
    table: &Table,
    start: u32,
    seq: &[u32],
    eps: f64,
) -> Result<Check, Violation> {
    let (n, d) = (table.n(), table.d());
    if seq.first() != Some(&start) {
        return Err(Violation::WrongStart {
            expected: start,
            got: seq.first().copied().unwrap_or(u32::MAX),
        });
    }
    let ee = sq_norms(table);
    let mut chosen = vec![false; n];
    let mut c = vec![0f64; d];
    chosen[start as usize] = true;
    add_row(&mut c, table.row(start as usize));
    let mut check = Check::default();
    for (step, &p) in seq.iter().enumerate().skip(1) {
        if p as usize >= n || chosen[p as usize] {
            return Err(Violation::NotAPermutation { step, index: p });
        }
        let cc: f64 = c.iter().map(|v| v * v).sum();
        let best = farthest(table, &c, cc, &ee, &chosen);
        let picked = distance(dot(&c, table.row(p as usize)), cc, ee[p as usize]);
        let excess = best.0 - picked;
        if excess > eps {
            return Err(Violation::NotArgmax {
                step,
                picked: (p, picked),
                best: (best.1 as u32, best.0),
            });
        }
        if best.1 != p as usize {
            check.near_ties += 1;
        }
        if excess > check.worst_excess {
            check.worst_excess = excess;
            check.worst_step = step;
        }
        check.steps += 1;
        chosen[p as usize] = true;
        add_row(&mut c, table.row(p as usize));
    }
    Ok(check)
}

/// Length of the common prefix of two sequences (the agreement measure reported between
/// precisions or modes, whose sequences are not promised to be the same bits).
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The float64 k-NN reference (the oracle of `tests/knn.rs` and `tests/rankings.rs`): for one
/// query against every row of `table` (as stored), each row's exact key, the rows in reference
/// order (best first, ties to the lowest index; `exclude` leaves one row out, e.g. the query's
/// own item), and the rounding tolerance of this query's keys (1e-5 of their scale).
pub struct KnnReference {
    /// Per row: q·e, cosine (0 against a zero vector) or squared L2 distance, in float64.
    pub keys: Vec<f64>,
    /// Row indices, best first (largest similarity, smallest distance), ties to the lower index.
    pub order: Vec<usize>,
    /// 1e-5 × the largest magnitude a key of this query can round at.
    pub tolerance: f64,
}

/// [`KnnReference`] of `query` against `table`.
pub fn knn_reference(
    table: &Table,
    query: &[f32],
    metric: Metric,
    exclude: Option<usize>,
) -> KnnReference {
    let n = table.n();
    let norm = |v: &[f32]| v.iter().map(|&a| (a as f64).powi(2)).sum::<f64>().sqrt();
    let nq = norm(query);
    let keys: Vec<f64> = (0..n)
        .map(|j| {
            let e = table.row(j);
            match metric {
                Metric::InnerProduct => dot64(query, e),
                Metric::Cosine => {
                    let ne = norm(e);
                    if nq == 0.0 || ne == 0.0 {
                        0.0
                    } else {
                        dot64(query, e) / (nq * ne)
                    }
                }
                Metric::L2 => query
                    .iter()
                    .zip(e)
                    .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                    .sum(),
            }
        })
        .collect();
    let sim = metric != Metric::L2;
    let mut order: Vec<usize> = (0..n).filter(|&j| Some(j) != exclude).collect();
    order.sort_by(|&a, &b| {
        let c = keys[a].partial_cmp(&keys[b]).expect("finite keys");
        (if sim { c.reverse() } else { c }).then(a.cmp(&b))
    });
    let scale = (0..n)
        .map(|j| match metric {
            Metric::InnerProduct => nq * norm(table.row(j)),
            Metric::Cosine => 1.0,
            Metric::L2 => (nq + norm(table.row(j))).powi(2),
        })
        .fold(1e-30, f64::max);
    KnnReference {
        keys,
        order,
        tolerance: 1e-5 * scale,
    }
}

fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}
