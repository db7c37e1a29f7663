//! The product quantizer of [`super::IvfPq`] (Faiss's `ProductQuantizer` with 8 bits): D split
//! into M sub-spaces of D / M consecutive dimensions, each with its own 256 centroids; a vector
//! is coded as M bytes, the nearest sub-centroid of each of its sub-vectors. May touch k-means
//! (training and assignment on the device), the host table and the crate's errors.
//!
//! * **Training**: [`kmeans()`](super::kmeans::kmeans) of each sub-space's sub-vectors into 256
//!   centroids (the caller's [`KMeansOptions`]: iterations, seed, subsampling; an `init` is not
//!   used — it is for D-dimensional centroids), the M sub-spaces in lockstep
//!   ([`kmeans_subspaces`]: two submissions an iteration for all of them, the same bits).
//!   Fewer than 256 training rows are refused: Faiss's k-means refuses fewer points than
//!   centroids too (and warns below 39 a centroid).
//! * **Encoding** runs on the device: one [`assign`] (the exact k-NN with k = 1, squared L2
//!   in fp32, ties to the lowest centroid) a sub-space. [`reference_codes`] is the float64
//!   encoder the tests hold it to: the two agree except where two sub-centroids are within the
//!   fp32 rounding of each other's distance.
//! * **Decoding** concatenates the chosen sub-centroids.
//!
//! [`reference_table`] and [`reference_adc`] are the float64 lookup tables and asymmetric
//! distances (ADC) that the device's list scan (`shaders/ivfpq_scan.comp`) is tested against;
//! for L2 the scan sums the same distance in another form, from [`precomputed_table`].

use super::kmeans::{assign, KMeansOptions};
use super::kmeans_batch::{check_shape, kmeans_subspaces, sub_vectors};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::table::Table;

/// Centroids a sub-space (8-bit codes).
pub const PQ_KSUB: usize = 256;

/// A trained product quantizer (see the [module](self) documentation).
#[derive(Clone, Debug)]
pub struct ProductQuantizer {
    d: usize,
    m: usize,
    /// M × 256 × (D / M): sub-space m's centroid c at `(m · 256 + c) · dsub`.
    centroids: Vec<f32>,
}

impl ProductQuantizer {
    /// Train a quantizer of `rows` (n × `d`, row-major) into `m` sub-spaces. Errors: M does not
    /// divide D, fewer than 256 rows, the device's.
    pub fn train(
        ctx: &Context,
        rows: &[f32],
        d: usize,
        m: usize,
        opts: &KMeansOptions,
    ) -> Result<ProductQuantizer> {
        check_shape(d, m)?;
        let n = rows.len() / d;
        if n < PQ_KSUB {
            return Err(Error::Invalid(format!(
                "product quantizer training needs at least {PQ_KSUB} rows (one a centroid of \
                 each sub-space), got {n}"
            )));
        }
        // The M sub-spaces' k-means in lockstep: each the k-means of its sub-vectors alone,
        // all recorded together.
        let centroids = kmeans_subspaces(ctx, rows, d, m, PQ_KSUB, opts)?
            .into_iter()
            .flat_map(|k| k.centroids)
            .collect();
        Ok(ProductQuantizer { d, m, centroids })
    }

    /// A quantizer from its centroids (M × 256 × D / M, finite). Errors: the shape, the length.
    pub fn from_centroids(d: usize, m: usize, centroids: Vec<f32>) -> Result<ProductQuantizer> {
        check_shape(d, m)?;
        if centroids.len() != PQ_KSUB * d {
            return Err(Error::Invalid(format!(
                "product quantizer centroids: {} values, expected 256 × D = {}",
                centroids.len(),
                PQ_KSUB * d
            )));
        }
        if let Some(p) = centroids.iter().position(|v| !v.is_finite()) {
            return Err(Error::Invalid(format!(
                "product quantizer centroid value {p} is not finite"
            )));
        }
        Ok(ProductQuantizer { d, m, centroids })
    }

    /// Dimension D.
    pub fn d(&self) -> usize {
        self.d
    }
    /// Sub-spaces M (bytes a code).
    pub fn m(&self) -> usize {
        self.m
    }
    /// Dimensions a sub-space, D / M.
    pub fn dsub(&self) -> usize {
        self.d / self.m
    }
    /// The M × 256 × (D / M) centroids.
    pub fn centroids(&self) -> &[f32] {
        &self.centroids
    }
    /// Centroid `c` of sub-space `s`.
    pub fn centroid(&self, s: usize, c: usize) -> &[f32] {
        let dsub = self.dsub();
        &self.centroids[(s * PQ_KSUB + c) * dsub..(s * PQ_KSUB + c + 1) * dsub]
    }

    /// The M-byte codes of `rows` (n × D), on the device (see the [module](self)
    /// documentation): row i's code at `i · M`.
    pub fn encode(&self, ctx: &Context, rows: &[f32]) -> Result<Vec<u8>> {
        let (d, m, dsub) = (self.d, self.m, self.dsub());
        let n = rows.len() / d;
        let mut codes = vec![0u8; n * m];
        if n == 0 {
            return Ok(codes);
        }
        for s in 0..m {
            let cent = self.centroids[s * PQ_KSUB * dsub..(s + 1) * PQ_KSUB * dsub].to_vec();
            let cent = Table::new(cent, PQ_KSUB, dsub)?;
            let (ids, _, _) = assign(ctx, &cent, &sub_vectors(rows, d, dsub, s), dsub)?;
            for (i, &c) in ids.iter().enumerate() {
                codes[i * m + s] = c as u8;
            }
        }
        Ok(codes)
    }

    /// The vectors the codes stand for (n × D).
    pub fn decode(&self, codes: &[u8]) -> Vec<f32> {
        codes
            .chunks_exact(self.m)
            .flat_map(|code| {
                code.iter()
                    .enumerate()
                    .flat_map(|(s, &c)| self.centroid(s, c as usize).iter().copied())
            })
            .collect()
    }
}

/// Squared L2 distance in float64.
fn d2_f64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum()
}

/// The float64 encoder: per sub-space the sub-centroid of least float64 squared distance, the
/// lowest on ties. Row i's code at `i · M`.
pub fn reference_codes(pq: &ProductQuantizer, rows: &[f32]) -> Vec<u8> {
    let (d, dsub) = (pq.d, pq.dsub());
    let mut out = Vec::with_capacity(rows.len() / d * pq.m);
    for r in rows.chunks_exact(d) {
        for s in 0..pq.m {
            let x = &r[s * dsub..(s + 1) * dsub];
            let mut best = (f64::INFINITY, 0usize);
            for c in 0..PQ_KSUB {
                let v = d2_f64(x, pq.centroid(s, c));
                if v < best.0 {
                    best = (v, c);
                }
            }
            out.push(best.1 as u8);
        }
    }
    out
}

/// The float64 lookup table (M × 256) of one query for one list of centroid `coarse`:
/// for L2 (`ip` false) entry `(s, c)` is `‖(q − coarse)_s − C_s[c]‖²`, for inner product
/// `q_s · C_s[c]` (`coarse` unused: the list's term q · coarse is added once a distance).
pub fn reference_table(pq: &ProductQuantizer, q: &[f32], coarse: &[f32], ip: bool) -> Vec<f64> {
    let dsub = pq.dsub();
    let mut t = Vec::with_capacity(pq.m * PQ_KSUB);
    for s in 0..pq.m {
        for c in 0..PQ_KSUB {
            let cen = pq.centroid(s, c);
            let v: f64 = (0..dsub)
                .map(|j| {
                    let i = s * dsub + j;
                    if ip {
                        q[i] as f64 * cen[j] as f64
                    } else {
                        (q[i] as f64 - coarse[i] as f64 - cen[j] as f64).powi(2)
                    }
                })
                .sum();
            t.push(v);
        }
    }
    t
}

/// The precomputed L2 table of the list of centroid `coarse` (Faiss's `use_precomputed_table`
/// for residual PQ): entry `(s, c)` the float64 value of `‖C_s[c]‖² + 2 coarse_s · C_s[c]`,
/// rounded to f32 once. With it the L2 ADC distance of a row of the list,
/// `‖q − coarse − y‖²` (y the decoded residual), is
/// `‖q − coarse‖² + Σ_s (entry(s, code_s) − 2 q_s · C_s[code_s])`: the first term the coarse
/// search's key, the last the query's table of `q_s · C_s[c]`, built once a query for every
/// list (the device's scan, `shaders/ivfpq_scan.comp`). M × 256 entries, sub-space after
/// sub-space.
pub fn precomputed_table(pq: &ProductQuantizer, coarse: &[f32]) -> Vec<f32> {
    let dsub = pq.dsub();
    let mut t = Vec::with_capacity(pq.m * PQ_KSUB);
    for s in 0..pq.m {
        let cs = &coarse[s * dsub..(s + 1) * dsub];
        for c in 0..PQ_KSUB {
            let v: f64 = pq
                .centroid(s, c)
                .iter()
                .zip(cs)
                .map(|(&y, &x)| {
                    let y = y as f64;
                    y * y + 2.0 * x as f64 * y
                })
                .sum();
            t.push(v as f32);
        }
    }
    t
}

/// The float64 ADC distance of a code from its table: the sum of its M entries (plus, for
/// inner product, the list's term q · coarse, given as `bias`).
pub fn reference_adc(table: &[f64], code: &[u8], bias: f64) -> f64 {
    bias + code
        .iter()
        .enumerate()
        .map(|(s, &c)| table[s * PQ_KSUB + c as usize])
        .sum::<f64>()
}
