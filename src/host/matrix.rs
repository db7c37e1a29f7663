//! The host engine's data: the table as the devices see it ([`HostTable`]: stored values,
//! float64 norms) and G with scaled columns ([`HostGram`]), built by a float64 GEMM
//! (`matrixmultiply`) over row blocks on every core and rounded once to float32. It may touch the
//! host table, the thread pool and [`crate::error`].

use super::plan::{gram_bytes, host_memory_budget};
use crate::error::{Error, Result};
use crate::table::{check_row_norms, Precision, Table};
use rayon::prelude::*;
use std::sync::Arc;
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
/// in float64 and rounded once to float32 (so it is within 2⁻²⁴ |e_p| + (2D + 8) 2⁻⁵³ |e_p| of
/// the exact value; the job's bound builds on this). Cheap to clone.
#[derive(Clone)]
pub struct HostGram {
    pub(crate) table: Arc<HostTable>,
    pub(crate) g: Arc<Vec<f32>>,
    build_ns: u64,
}

/// Rows of G one GEMM call computes (its float64 scratch is this × N × 8 bytes).
const BLOCK: usize = 128;

impl HostGram {
    /// Build G on every core. Refused before any work when N² × 4 bytes exceed the host memory
    /// budget; an allocation the system refuses is an error, not an abort.
    pub fn build(table: &Arc<HostTable>) -> Result<HostGram> {
        let t0 = Instant::now();
        let (n, d) = (table.n, table.d);
        let bytes = gram_bytes(n);
        let budget = host_memory_budget();
        if bytes > budget {
            return Err(Error::Limit(format!(
                "G for N = {n} needs {} MiB; the host memory budget is {} MiB",
                bytes >> 20,
                budget >> 20
            )));
        }
        let mut g: Vec<f32> = Vec::new();
        g.try_reserve_exact(n * n).map_err(|_| {
            Error::Limit(format!(
                "G for N = {n} needs {} MiB; the system refused the allocation",
                bytes >> 20
            ))
        })?;
        g.resize(n * n, 0.0);
        let e64: Vec<f64> = table.rows.iter().map(|&v| v as f64).collect();
        g.par_chunks_mut(BLOCK * n)
            .enumerate()
            .for_each(|(b, out)| {
                let r0 = b * BLOCK;
                let m = out.len() / n;
                let mut tmp = vec![0f64; m * n];
                // SAFETY: the pointers and strides describe e64[r0..r0+m] (m × d, row-major),
                // e64ᵀ (d × n) and tmp (m × n, row-major), all in bounds.
                unsafe {
                    matrixmultiply::dgemm(
                        m,
                        d,
                        n,
                        1.0,
                        e64.as_ptr().add(r0 * d),
                        d as isize,
                        1,
                        e64.as_ptr(),
                        1,
                        d as isize,
                        0.0,
                        tmp.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                }
                for (o, t) in out.chunks_exact_mut(n).zip(tmp.chunks_exact(n)) {
                    for ((o, &t), &inv) in o.iter_mut().zip(t).zip(&table.inv) {
                        *o = (t * inv) as f32;
                    }
                }
            });
        Ok(HostGram {
            table: table.clone(),
            g: Arc::new(g),
            build_ns: t0.elapsed().as_nanos() as u64,
        })
    }
    /// The table G was built from.
    pub fn table(&self) -> &Arc<HostTable> {
        &self.table
    }
    /// Row `p` of G.
    pub(crate) fn row(&self, p: usize) -> &[f32] {
        let n = self.table.n;
        &self.g[p * n..(p + 1) * n]
    }
    /// Bytes of G.
    pub fn bytes(&self) -> u64 {
        gram_bytes(self.table.n)
    }
    /// Wall time of the build, nanoseconds.
    pub fn build_ns(&self) -> u64 {
        self.build_ns
    }
}
