//! The host engine's data: the table as the devices see it ([`HostTable`]: stored values,
//! float64 norms) and G with scaled columns ([`HostGram`]), each entry a float64 dot product
//! rounded once to float32, built row by row as jobs read it or whole on every core. It may touch the
//! host table, the thread pool and [`crate::error`].

use super::kernel::{gram_row, gram_rows4};
use super::plan::{gram_bytes, host_memory_budget};
use crate::error::{Error, Result};
use crate::table::{check_row_norms, Precision, Table};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A table for the host engine: the values a device would see at the storage precision (fp16:
/// rounded to half and widened back), with each row's norm and inverse norm in float64 (0 for a
/// zero row, whose distance is 1 by definition).
pub struct HostTable {
    /// Rows N.
    pub(crate) n: usize,
    /// Dimension D.
    pub(crate) d: usize,
    rows: Vec<f32>,
    norm: Vec<f64>,
    inv: Vec<f64>,
}

impl HostTable {
    /// The table at `precision`, checked as a device upload checks it (fp16 overflow; nonzero
    /// row norms within 2⁻⁴⁰ … 2⁴⁰, naming the row).
    pub fn new(table: &Table, precision: Precision) -> Result<Arc<HostTable>> {
        // The host engine's settings (memory budget, threads) parse, or nothing is built.
        crate::settings::check()?;
        if precision == Precision::Fp16 {
            table.to_f16_bits_checked()?;
        }
        if table.n() > u32::MAX as usize / 2 {
            return Err(Error::Limit(format!(
                "table of {} rows exceeds 32-bit indexing",
                table.n()
            )));
        }
        let stored = table.as_stored(precision);
        check_row_norms(stored.data(), stored.d(), "row")?;
        let (n, d) = (stored.n(), stored.d());
        let rows = stored.data().to_vec();
        let norm: Vec<f64> = rows
            .chunks_exact(d)
            .map(|r| r.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt())
            .collect();
        let inv = norm
            .iter()
            .map(|&s| if s == 0.0 { 0.0 } else { 1.0 / s })
            .collect();
        Ok(Arc::new(HostTable {
            n,
            d,
            rows,
            norm,
            inv,
        }))
    }
    /// Row `i` as stored.
    pub(crate) fn row(&self, i: usize) -> &[f32] {
        &self.rows[i * self.d..(i + 1) * self.d]
    }
    /// |e_i| in float64.
    pub(crate) fn norm(&self, i: usize) -> f64 {
        self.norm[i]
    }
    /// 1/|e_i| in float64 (0 for a zero row).
    pub(crate) fn inv_norm(&self, i: usize) -> f64 {
        self.inv[i]
    }
}

/// G = E Eᵀ diag(1/|e|) for the host engine: `G[p][x] = e_p · e_x / |e_x|`, each entry computed
/// in float64 (the lane-ordered dot product of the engine's kernels) and rounded once to float32
/// (so it is within 2⁻²⁴ |e_p| + (2D + 8) 2⁻⁵³ |e_p| of the exact value; the job's bound builds
/// on this). Rows are built when first read (`row`: a sequence that needs k steps
/// reads k + 1 rows) or all at once ([`HostGram::fill`], four rows a pass over the table); an
/// entry has the same bits either way, so every job's results are the same whichever rows were
/// built first. Cheap to clone: clones share the rows built.
#[derive(Clone)]
pub struct HostGram {
    pub(crate) table: Arc<HostTable>,
    rows: Arc<Rows>,
}

/// G's rows, each built once.
struct Rows {
    /// Row p once built.
    built: Vec<OnceLock<Box<[f32]>>>,
    /// The table's rows widened to f64 (the left operand of every entry).
    wide: Vec<f64>,
    /// Rows built so far.
    count: AtomicUsize,
    /// Wall time spent building rows, nanoseconds (summed over threads).
    ns: AtomicU64,
}

/// Rows one task of [`HostGram::fill`] builds, and the candidates it takes at a time.
const FILL_ROWS: usize = 64;
const FILL_CANDIDATES: usize = 512;

/// Candidates a task of a lone row's build covers (its share of the table stays in cache).
const ROW_TASK: usize = 2048;

impl HostGram {
    /// G with no row built yet. Refused when N² × 4 bytes (the whole G) exceed the host memory
    /// budget.
    pub fn lazy(table: &Arc<HostTable>) -> Result<HostGram> {
        let n = table.n;
        let bytes = gram_bytes(n);
        let budget = host_memory_budget();
        if bytes > budget {
            return Err(Error::Limit(format!(
                "G for N = {n} needs {} MiB; the host memory budget is {} MiB",
                bytes >> 20,
                budget >> 20
            )));
        }
        let mut built = Vec::new();
        built
            .try_reserve_exact(n)
            .map_err(|_| Error::Limit(format!("G's row index for N = {n}: allocation refused")))?;
        built.resize_with(n, OnceLock::new);
        Ok(HostGram {
            table: table.clone(),
            rows: Arc::new(Rows {
                built,
                wide: table.rows.iter().map(|&v| v as f64).collect(),
                count: AtomicUsize::new(0),
                ns: AtomicU64::new(0),
            }),
        })
    }

    /// The whole G, built on every core. Refused before any work when N² × 4 bytes exceed the
    /// host memory budget.
    pub fn build(table: &Arc<HostTable>) -> Result<HostGram> {
        let g = HostGram::lazy(table)?;
        g.fill();
        Ok(g)
    }

    /// Build every row not built yet, four rows a pass over the table, on every core.
    pub fn fill(&self) {
        let t0 = Instant::now();
        let (n, d) = (self.table.n, self.table.d);
        let todo: Vec<usize> = (0..n)
            .filter(|&p| self.rows.built[p].get().is_none())
            .collect();
        todo.par_chunks(FILL_ROWS).for_each(|group| {
            let mut out: Vec<Box<[f32]>> = group.iter().map(|_| vec![0f32; n].into()).collect();
            // Candidates in blocks that stay in cache while every row of the group reads them.
            for x0 in (0..n).step_by(FILL_CANDIDATES) {
                let x1 = (x0 + FILL_CANDIDATES).min(n);
                let (xs, inv) = (&self.table.rows[x0 * d..x1 * d], &self.table.inv[x0..x1]);
                let w = |p: usize| &self.rows.wide[p * d..(p + 1) * d];
                for (ps, o) in group.chunks(4).zip(out.chunks_mut(4)) {
                    if let ([p0, p1, p2, p3], [a, b, c, e]) = (ps, &mut *o) {
                        gram_rows4(
                            [w(*p0), w(*p1), w(*p2), w(*p3)],
                            xs,
                            d,
                            inv,
                            [
                                &mut a[x0..x1],
                                &mut b[x0..x1],
                                &mut c[x0..x1],
                                &mut e[x0..x1],
                            ],
                        );
                    } else {
                        for (&p, o) in ps.iter().zip(o.iter_mut()) {
                            gram_row(w(p), xs, d, inv, &mut o[x0..x1]);
                        }
                    }
                }
            }
            for (&p, o) in group.iter().zip(out) {
                if self.rows.built[p].set(o).is_ok() {
                    self.rows.count.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        self.rows
            .ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// The table G was built from.
    pub fn table(&self) -> &Arc<HostTable> {
        &self.table
    }
    /// Row `p` of G, built now (on every core) if it was not.
    pub(crate) fn row(&self, p: usize) -> &[f32] {
        self.rows.built[p].get_or_init(|| {
            let t0 = Instant::now();
            let (n, d) = (self.table.n, self.table.d);
            let w = &self.rows.wide[p * d..(p + 1) * d];
            let mut out = vec![0f32; n];
            out.par_chunks_mut(ROW_TASK).enumerate().for_each(|(i, o)| {
                let x0 = i * ROW_TASK;
                let xs = &self.table.rows[x0 * d..(x0 + o.len()) * d];
                gram_row(w, xs, d, &self.table.inv[x0..x0 + o.len()], o);
            });
            self.rows.count.fetch_add(1, Ordering::Relaxed);
            self.rows
                .ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            out.into()
        })
    }
    /// Rows of G built so far (N once whole).
    pub fn rows_built(&self) -> usize {
        self.rows.count.load(Ordering::Relaxed)
    }
    /// Bytes of G once whole.
    pub fn bytes(&self) -> u64 {
        gram_bytes(self.table.n)
    }
    /// Wall time spent building rows so far, nanoseconds.
    pub fn build_ns(&self) -> u64 {
        self.rows.ns.load(Ordering::Relaxed)
    }
}
