//! A host job: one batch of diversity sequences computed on the CPU's cores, by the gram
//! recurrence with a certificate at every step, or by the float64 scan where G does not fit.
//!
//! **Gram with a certificate.** Each sequence keeps `key[x] = Σ_j G[p_j][x]` in float64 over
//! its picks so far (`p_0` = the start), chosen items at +∞. One pass per step adds the last
//! pick's row of G and finds the smallest and second smallest keys ([`super::kernel`]). The
//! computed keys differ from the exact `c · e_x / |e_x|` (c = the running sum of the stored rows)
//! by at most
//!
//! ```text
//! B = S · (2⁻²⁴ + (2D + 8 + k) · 2⁻⁵³) · (1 + 2⁻²⁰),   S = Σ_j |e_{p_j}|, k = picks so far
//! ```
//!
//! for every x: each entry of G is within `2⁻²⁴ |e_p|` (its one rounding to float32, as
//! `|G[p][x]| ≤ |e_p|`) plus `(2D + 8) 2⁻⁵³ |e_p|` (the float64 dot product, norm and division)
//! of the exact value, and k float64 additions of terms bounded by `|e_{p_j}|` add at most
//! `k 2⁻⁵³ S`. So when the second smallest key exceeds the smallest by more than 2B, the
//! smallest is the exact best (largest distance; the pick is certain). Otherwise every
//! candidate whose key is within 2B of the smallest — a set that holds the exact best — is
//! re-scored as `(c · e_x) / |e_x|` in float64 from the running sum kept in float64 (the sum of
//! float32 rows, exact unless their exponents span more than 29 binades), and the smallest
//! re-scored key wins, lowest index on ties. A pick is therefore the float64 best along its own
//! prefix up to the float64 dot product's rounding (≈ D · 2⁻⁵³ relative): far inside ε = 1e-5,
//! and the bound does not grow with N beyond the `k · 2⁻⁵³` term.
//!
//! **The scan** (where G does not fit the host budget) computes every candidate's key in float64
//! from the running sum at every step: the float64 definition itself, O(N · D) a step.
//!
//! Every sequence is computed on its own (no arithmetic depends on the batch, its order, the
//! chunk or the thread count), so results are the same bits for every batch, chunk, start order,
//! resume and thread count; and every instruction-set variant of the passes performs the same
//! operations. The job may touch its table and G (shared), its own state and the thread pool.

use super::kernel::{add_row_top2, add_rows_top2_pair, dot, Top2};
use super::matrix::{HostGram, HostTable};
use super::plan::{gram_sequence_bytes, host_memory_budget, max_batch, scan_sequence_bytes};
use crate::batch::{
    check_cancelled, check_prefixes, check_starts, injected_loss, sequence_length, step_in_slices,
    StepReport, ENV_FAIL_AFTER_CHUNKS,
};
use crate::error::{Error, Result};
use crate::mode::Mode;
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;

/// How a [`HostJob`] runs.
#[derive(Clone, Debug, Default)]
pub struct HostOptions {
    /// Steps per `step` slice (progress and cancellation between slices); 0 = a whole `step`
    /// call at once.
    pub chunk: usize,
    /// Compute only the first K steps of each sequence (top_k); `None` = all N − 1.
    pub steps: Option<usize>,
}

/// What the job computes with.
#[derive(Clone)]
enum Kind {
    Gram(HostGram),
    Scan(Arc<HostTable>),
}

impl Kind {
    /// The table the job reads (G's, for gram).
    fn table(&self) -> &Arc<HostTable> {
        match self {
            Kind::Gram(g) => &g.table,
            Kind::Scan(t) => t,
        }
    }
}

/// One sequence's state.
struct State {
    /// Gram: the keys (float64, +∞ for chosen items). Empty for the scan.
    keys: Vec<f64>,
    /// Scan: chosen flags. Empty for gram.
    chosen: Vec<bool>,
    /// The running sum of the stored rows, float64.
    c: Vec<f64>,
    /// Σ |e_p| over the picks so far (float64).
    s: f64,
    /// Picks so far, the start included.
    terms: u64,
    /// Gram: the two smallest keys after the last pass.
    top: Top2,
    /// Gram: steps the certificate could not settle from the keys alone.
    rescored: u32,
}

/// A batch of diversity sequences computed on the host.
pub struct HostJob {
    kind: Kind,
    opts: HostOptions,
    starts: Vec<u32>,
    seq_len: usize,
    completed: usize,
    seqs: Vec<u32>,
    states: Vec<State>,
    ns: u64,
    /// A slice failed (an injected loss): the state is not trusted, nothing more may run.
    lost: bool,
}

/// The certificate's bound on every key's error after `terms` picks whose norms sum to `s`, for
/// rows of `d` dimensions (see the module's documentation).
pub fn key_bound(s: f64, terms: u64, d: usize) -> f64 {
    let u32_ = f64::powi(2.0, -24);
    let u64_ = f64::powi(2.0, -53);
    s * (u32_ + (2.0 * d as f64 + 8.0 + terms as f64) * u64_) * (1.0 + f64::powi(2.0, -20))
}

impl HostJob {
    /// A gram job over `gram`.
    pub fn gram(gram: &HostGram, starts: &[u32], opts: &HostOptions) -> Result<HostJob> {
        Self::new(Kind::Gram(gram.clone()), starts, opts)
    }

    /// A scan job over `table` (no G: O(N · D) a step).
    pub fn scan(table: &Arc<HostTable>, starts: &[u32], opts: &HostOptions) -> Result<HostJob> {
        Self::new(Kind::Scan(table.clone()), starts, opts)
    }

    fn new(kind: Kind, starts: &[u32], opts: &HostOptions) -> Result<HostJob> {
        let (n, d) = (kind.table().n, kind.table().d);
        check_starts(starts, n)?;
        let seq_len = sequence_length(n, opts.steps);
        let steps = seq_len - 1;
        let (mode, per) = match kind {
            Kind::Gram(_) => (Mode::Gram, gram_sequence_bytes(n, d, steps)),
            Kind::Scan(_) => (Mode::Scan, scan_sequence_bytes(n, d, steps)),
        };
        let budget = host_memory_budget();
        let limit = max_batch(mode, n, d, steps, budget);
        if starts.len() > limit {
            return Err(Error::Limit(format!(
                "a host {} batch of {} sequences over N = {n} needs {} MiB of state; at most {limit} \
                 fit the host engine's memory budget of {} MiB",
                mode.name(),
                starts.len(),
                (per * starts.len() as u64) >> 20,
                budget >> 20
            )));
        }
        let mut seqs = vec![0u32; starts.len() * seq_len];
        for (row, &s) in seqs.chunks_exact_mut(seq_len).zip(starts) {
            row[0] = s;
        }
        let mut job = HostJob {
            kind,
            opts: opts.clone(),
            starts: starts.to_vec(),
            seq_len,
            completed: 0,
            seqs,
            states: Vec::new(),
            ns: 0,
            lost: false,
        };
        let t0 = Instant::now();
        let kind = job.kind.clone();
        job.states = starts
            .par_iter()
            .map(|&s| State::new(&kind, s as usize, seq_len))
            .collect();
        job.ns += t0.elapsed().as_nanos() as u64;
        Ok(job)
    }

    /// A job that continues from sequences already computed: `prefixes` holds `starts.len()`
    /// rows of `len` entries, row i beginning with `starts[i]`. The state is rebuilt by the same
    /// operations in the same order as the steps that computed the prefix, so the continued
    /// sequences are bit-identical to an uninterrupted run.
    pub fn resume(mut self, prefixes: &[u32], len: usize) -> Result<HostJob> {
        let n = self.kind.table().n;
        check_prefixes(&self.starts, self.seq_len, n, prefixes, len)?;
        let t0 = Instant::now();
        let kind = self.kind.clone();
        let seq_len = self.seq_len;
        self.states
            .par_iter_mut()
            .zip(self.seqs.par_chunks_mut(seq_len))
            .zip(prefixes.par_chunks(len))
            .for_each(|((st, row), pre)| {
                for (t, &p) in pre.iter().enumerate().skip(1) {
                    row[t] = p;
                    st.take(&kind, p as usize, t + 1 < seq_len);
                }
            });
        self.completed = len - 1;
        self.ns += t0.elapsed().as_nanos() as u64;
        Ok(self)
    }

    /// Steps per slice from now on (0 = a whole `step` call at once).
    pub fn set_chunk(&mut self, chunk: usize) {
        self.opts.chunk = chunk;
    }

    /// Advance every sequence by up to `n` steps (fewer at the end), on every core, in slices
    /// of the chunk (cancellation is checked between them).
    pub fn step(&mut self, n: usize) -> Result<StepReport> {
        let n = n.min(self.total_steps() - self.completed);
        step_in_slices(n, self.opts.chunk, |c| self.slice(c))
    }

    /// Advance every sequence by `c` steps; the slice's wall time in nanoseconds.
    fn slice(&mut self, c: usize) -> Result<u64> {
        check_cancelled()?;
        if self.lost {
            return Err(Error::DeviceLost(format!(
                "an earlier slice of this host batch of {} failed; the batch must be restarted",
                self.starts.len()
            )));
        }
        let t0 = Instant::now();
        let first = self.completed + 1;
        let (kind, seq_len) = (self.kind.clone(), self.seq_len);
        // Sequences two at a time: a gram pair's passes run in one loop (two memory
        // streams); every sequence still gets its own operations in its own order.
        self.states
            .par_chunks_mut(2)
            .zip(self.seqs.par_chunks_mut(2 * seq_len))
            .for_each(|(sts, rows)| match (&kind, sts) {
                (Kind::Gram(g), [a, b]) => {
                    let (ra, rb) = rows.split_at_mut(seq_len);
                    for t in first..first + c {
                        let (pa, pb) = (a.pick(&kind), b.pick(&kind));
                        ra[t] = pa as u32;
                        rb[t] = pb as u32;
                        a.mark(&kind, pa);
                        b.mark(&kind, pb);
                        if t + 1 < seq_len {
                            (a.top, b.top) =
                                add_rows_top2_pair(&mut a.keys, g.row(pa), &mut b.keys, g.row(pb));
                        }
                    }
                }
                (_, sts) => {
                    for (st, row) in sts.iter_mut().zip(rows.chunks_mut(seq_len)) {
                        for (t, slot) in row.iter_mut().enumerate().skip(first).take(c) {
                            let p = st.pick(&kind);
                            *slot = p as u32;
                            st.take(&kind, p, t + 1 < seq_len);
                        }
                    }
                }
            });
        let ns = t0.elapsed().as_nanos() as u64;
        // Fault injection for the checkpoint tests: the slice is lost as a device's submission
        // would be.
        if let Some(k) = injected_loss() {
            self.lost = true;
            return Err(Error::DeviceLost(format!(
                "host steps {first}..{} of a batch of {} (injected by {ENV_FAIL_AFTER_CHUNKS}={k})",
                first + c - 1,
                self.starts.len()
            )));
        }
        self.ns += ns;
        self.completed += c;
        Ok(ns)
    }

    /// Run every remaining step.
    pub fn run(&mut self) -> Result<StepReport> {
        self.step(self.total_steps() - self.completed)
    }

    /// `gram` or `scan`: the recurrence this job runs.
    pub fn mode(&self) -> Mode {
        match self.kind {
            Kind::Gram(_) => Mode::Gram,
            Kind::Scan(_) => Mode::Scan,
        }
    }
    /// Steps each sequence will have when done.
    pub fn total_steps(&self) -> usize {
        self.seq_len - 1
    }
    /// Steps completed so far.
    pub fn steps_done(&self) -> usize {
        self.completed
    }
    /// Whether every step is computed.
    pub fn done(&self) -> bool {
        self.completed == self.total_steps()
    }
    /// The batch's starts, in order.
    pub fn starts(&self) -> &[u32] {
        &self.starts
    }
    /// Compute time so far, nanoseconds: the wall time of the steps on the host (named as a
    /// device job's GPU time, so that every job answers the same call).
    pub fn gpu_ns(&self) -> u64 {
        self.ns
    }
    /// Entries of each sequence so far.
    pub fn sequence_len(&self) -> usize {
        self.completed + 1
    }
    /// The threads the steps run on (what a device job's workgroup size reports).
    pub fn workgroup_size(&self) -> u32 {
        rayon::current_num_threads() as u32
    }
    /// Per sequence, the steps the certificate settled by re-scoring in float64 (0s for the
    /// scan, which computes every key in float64).
    pub fn rescored_steps(&self) -> Vec<u32> {
        self.states.iter().map(|s| s.rescored).collect()
    }
    /// Entries `from..to` of every sequence, row-major, into `out` (resized).
    pub fn sequence_columns_into(&self, from: usize, to: usize, out: &mut Vec<u32>) -> Result<()> {
        let len = self.sequence_len();
        if from > to || to > len {
            return Err(Error::Invalid(format!(
                "columns {from}..{to} of sequences that have {len} entries so far"
            )));
        }
        out.clear();
        out.reserve(self.starts.len() * (to - from));
        for row in self.seqs.chunks_exact(self.seq_len) {
            out.extend_from_slice(&row[from..to]);
        }
        Ok(())
    }
    /// Entries `from..to` of every sequence, row-major.
    pub fn sequence_columns(&self, from: usize, to: usize) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.sequence_columns_into(from, to, &mut out)?;
        Ok(out)
    }
}

impl State {
    /// A sequence at its start `s` (the pass over G's row of `s` done when a step follows).
    fn new(kind: &Kind, s: usize, seq_len: usize) -> State {
        let t = kind.table();
        let n = t.n;
        let mut st = State {
            keys: Vec::new(),
            chosen: Vec::new(),
            c: vec![0.0; t.d],
            s: 0.0,
            terms: 0,
            top: Top2 {
                best: f64::INFINITY,
                idx: 0,
                second: f64::INFINITY,
            },
            rescored: 0,
        };
        match kind {
            Kind::Gram(_) => st.keys = vec![0.0; n],
            Kind::Scan(_) => st.chosen = vec![false; n],
        }
        st.take(kind, s, seq_len > 1);
        st
    }

    /// Take `p` into the sequence: mark it chosen, add its row to the running sum, and (gram,
    /// when another step follows) add its row of G to the keys in the step's one pass.
    fn take(&mut self, kind: &Kind, p: usize, more: bool) {
        self.mark(kind, p);
        if let (Kind::Gram(g), true) = (kind, more) {
            self.top = add_row_top2(&mut self.keys, g.row(p));
        }
    }

    /// [`State::take`] but the pass: `p` chosen, its row added to the running sum.
    fn mark(&mut self, kind: &Kind, p: usize) {
        let t = kind.table();
        for (c, &e) in self.c.iter_mut().zip(t.row(p)) {
            *c += e as f64;
        }
        self.s += t.norm(p);
        self.terms += 1;
        match kind {
            Kind::Gram(_) => self.keys[p] = f64::INFINITY,
            Kind::Scan(_) => self.chosen[p] = true,
        }
    }

    /// The next pick: the exact best by the certificate (gram), or the float64 scan.
    fn pick(&mut self, kind: &Kind) -> usize {
        let t = kind.table();
        match kind {
            Kind::Gram(_) => {
                let b = 2.0 * key_bound(self.s, self.terms, t.d) * (1.0 + f64::powi(2.0, -30));
                let top = self.top;
                if top.second - top.best > b {
                    return top.idx;
                }
                self.rescored += 1;
                let lim = top.best + b;
                let keys = &self.keys;
                self.best_exact(t, (0..t.n).filter(|&x| keys[x] <= lim))
            }
            Kind::Scan(_) => {
                let chosen = &self.chosen;
                self.best_exact(t, (0..t.n).filter(|&x| !chosen[x]))
            }
        }
    }

    /// Among `candidates` (ascending), the one of least `(c · e_x) / |e_x|` in float64 — the
    /// largest distance; the lowest index on ties.
    fn best_exact(&self, t: &HostTable, candidates: impl Iterator<Item = usize>) -> usize {
        let mut best = (f64::INFINITY, usize::MAX);
        for x in candidates {
            let v = dot(&self.c, t.row(x)) * t.inv_norm(x);
            if v < best.0 || best.1 == usize::MAX {
                best = (v, x);
            }
        }
        best.1
    }
}
