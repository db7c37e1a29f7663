//! Diversity sequences on demand: a [`Sequencer`] keeps one table resident (on a Vulkan device
//! or in the host engine) and answers the k-step prefix of the sequence from any start, the same
//! bits as the batch job's prefix for the same options — each query runs that job's own
//! recurrence on a batch of the asked starts with `steps = k`, and every engine's results do not
//! depend on the batch, its order or its size.
//!
//! A prefix of k steps reads k + 1 rows of G. On the host engine G's rows are built as the picks
//! need them and kept for later queries (the first picks of most sequences are shared); once a
//! quarter of G is built ([`GramPolicy::Auto`]) the rest is built whole, four rows a pass. On a
//! Vulkan device the gram engine builds G whole on the first gram query. The report says which.
//! It may touch the engine core ([`crate::engine`]) and the mode vocabulary; nothing of Vulkan.

use crate::engine::{Engine, JobOptions, ModeChoice};
use crate::error::{Error, Result};
use crate::mode::Mode;
use crate::names::named_enum;
use std::time::Instant;

/// When the host engine builds G whole instead of row by row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GramPolicy {
    /// Row by row as picks need them, whole once a quarter of the rows are built.
    #[default]
    Auto,
    /// Only the rows picks need (a query whose sequences read most of G builds it whole).
    Rows,
    /// Whole, before the first query.
    Whole,
}

named_enum!(GramPolicy, "g", {
    Auto => "auto",
    Rows => "rows",
    Whole => "whole",
});

/// How a [`Sequencer`] runs: the batch job's options (`mode`, the engines' options; `steps`
/// is each query's `k`) and the host engine's G policy.
#[derive(Clone, Debug, Default)]
pub struct SequencerOptions {
    /// The options of the batch job whose prefixes the sequencer answers.
    pub job: JobOptions,
    /// When the host engine builds G whole.
    pub g: GramPolicy,
}

/// What a [`Sequencer`] has done and holds.
#[derive(Clone, Debug, PartialEq)]
pub struct SequencerReport {
    /// `"host"` or `"device"`.
    pub engine: &'static str,
    /// The recurrence the queries run (`gram` or `scan`).
    pub mode: Mode,
    /// G as held: `"none"` (the scan, or no gram query yet), `"rows"` (some rows, on the host)
    /// or `"whole"`.
    pub g: &'static str,
    /// Rows of G built (N when whole).
    pub rows_built: usize,
    /// Rows of the table.
    pub n: usize,
    /// Calls answered.
    pub queries: u64,
    /// Sequences answered.
    pub sequences: u64,
    /// Wall time of the queries, nanoseconds (G's rows built for them included).
    pub query_ns: u64,
    /// Of which building G (on a device: G's build time on the device), nanoseconds.
    pub g_ns: u64,
}

/// A resident table answering k-step prefixes; see the module's documentation.
pub struct Sequencer {
    engine: Engine,
    opts: SequencerOptions,
    choice: ModeChoice,
    queries: u64,
    sequences: u64,
    ns: u64,
}

impl Sequencer {
    /// A sequencer over `engine`'s table (the engine is shared, not copied: its device table, G
    /// once built and the host engine's rows). Nothing is computed before the first query,
    /// except G whole with [`GramPolicy::Whole`].
    pub fn new(engine: &mut Engine, opts: SequencerOptions) -> Result<Sequencer> {
        let choice = engine.mode_for(opts.job.mode);
        if choice.mode == Mode::Gram {
            engine.share_host_gram()?;
        }
        let mut s = Sequencer {
            engine: engine.clone(),
            opts,
            choice,
            queries: 0,
            sequences: 0,
            ns: 0,
        };
        if s.opts.g == GramPolicy::Whole && s.choice.mode == Mode::Gram {
            let t0 = Instant::now();
            s.engine.fill_host_gram();
            s.ns += t0.elapsed().as_nanos() as u64;
        }
        Ok(s)
    }

    /// The engine the queries run and why (the batch job's `auto` rule).
    pub fn mode(&self) -> &ModeChoice {
        &self.choice
    }

    /// The first `k` steps of the sequence from `start`: `min(k, N − 1) + 1` ids, the start first.
    pub fn sequence(&mut self, start: u32, k: usize) -> Result<Vec<u32>> {
        self.sequences(&[start], k)
    }

    /// The first `k` steps of the sequences from `starts` (in one batch, or in as many as the
    /// engine needs): row-major, each row `min(k, N − 1) + 1` ids beginning with its start.
    pub fn sequences(&mut self, starts: &[u32], k: usize) -> Result<Vec<u32>> {
        if starts.is_empty() {
            return Err(Error::Invalid("no starts".into()));
        }
        let t0 = Instant::now();
        if k == 0 {
            crate::engine::check_starts(starts, self.engine.shape().0)?;
            self.queries += 1;
            self.sequences += starts.len() as u64;
            return Ok(starts.to_vec());
        }
        let mut opts = self.opts.job.clone();
        opts.gram.steps = Some(k);
        opts.scan.steps = Some(k);
        // One submission for the whole prefix (no progress to report between chunks).
        opts.gram.chunk = 0;
        opts.scan.chunk = 0;
        // In batches the engine takes (one for the usual few starts).
        crate::engine::check_starts(starts, self.engine.shape().0)?;
        let batch = self
            .engine
            .max_batch(opts.mode, k.min(self.engine.shape().0 - 1));
        let mut out = Vec::new();
        for part in starts.chunks(batch) {
            let mut job = self.engine.job(part, &opts)?;
            job.run()?;
            out.extend(job.sequences_flat()?);
        }
        if self.opts.g == GramPolicy::Auto && self.choice.mode == Mode::Gram {
            if let Some((built, _)) = self.engine.host_gram_rows() {
                // Once whole, nothing is left to build (no pass over the rows per query).
                let n = self.engine.shape().0;
                if built < n && built * 4 >= n {
                    self.engine.fill_host_gram();
                }
            }
        }
        self.ns += t0.elapsed().as_nanos() as u64;
        self.queries += 1;
        self.sequences += starts.len() as u64;
        Ok(out)
    }

    /// What the sequencer has done and holds.
    pub fn report(&self) -> SequencerReport {
        let n = self.engine.shape().0;
        let native = self.engine.native_host();
        let (g, rows_built, g_ns) = match (self.choice.mode, self.engine.host_gram_rows()) {
            (Mode::Gram, Some((r, ns))) if r == n => ("whole", r, ns),
            (Mode::Gram, Some((r, ns))) if r > 0 => ("rows", r, ns),
            (Mode::Gram, None) if !native => match self.engine.device_gram_ns() {
                Some(ns) => ("whole", n, ns),
                None => ("none", 0, 0),
            },
            _ => ("none", 0, 0),
        };
        SequencerReport {
            engine: if native { "host" } else { "device" },
            mode: self.choice.mode,
            g,
            rows_built,
            n,
            queries: self.queries,
            sequences: self.sequences,
            query_ns: self.ns,
            g_ns,
        }
    }
}
