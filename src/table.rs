//! The host-side embedding table: N rows × D dims of float32, validated once, optionally centered,
//! and rounded to the storage precision before it goes to a device.
//! Host data only: it may touch [`crate::error`] and `crate::names`, never a device.

use crate::error::{Error, Result};
use crate::names::named_enum;
use half::f16;

/// How the table is stored on the device. Arithmetic is always fp32 ("load fp16, widen at once").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// 4 bytes per value.
    Fp32,
    /// IEEE half, round-to-nearest-even; widened to fp32 on every load.
    Fp16,
}

impl Precision {
    /// Bytes per stored value.
    pub fn bytes(self) -> usize {
        match self {
            Precision::Fp32 => 4,
            Precision::Fp16 => 2,
        }
    }
}

named_enum!(Precision, "precision", {
    Fp32 => "fp32" | "f32",
    Fp16 => "fp16" | "f16",
});

/// An N × D table of finite float32 values, row-major, with optional row ids (from
/// `embeddings.json`) so results can be keyed by them.
#[derive(Clone, Debug)]
pub struct Table {
    n: usize,
    d: usize,
    data: Vec<f32>,
    ids: Option<Vec<serde_json::Value>>,
}

impl Table {
    /// Build a table from row-major data, checking N ≥ 1, D ≥ 1, the length and that every
    /// value is finite (the error names the first bad row).
    pub fn new(data: Vec<f32>, n: usize, d: usize) -> Result<Self> {
        if d == 0 {
            return Err(Error::Invalid("table has dimension D = 0".into()));
        }
        if n == 0 {
            return Err(Error::Invalid("table has no rows (N = 0)".into()));
        }
        let want = n
            .checked_mul(d)
            .ok_or_else(|| Error::Invalid(format!("table of {n} × {d} values overflows usize")))?;
        if data.len() != want {
            return Err(Error::Invalid(format!(
                "table data has {} values, expected N × D = {n} × {d} = {want}",
                data.len()
            )));
        }
        check_finite(&data, d)?;
        Ok(Table {
            n,
            d,
            data,
            ids: None,
        })
    }

    /// Attach one id per row (kept from `embeddings.json`).
    pub fn with_ids(mut self, ids: Vec<serde_json::Value>) -> Result<Self> {
        if ids.len() != self.n {
            return Err(Error::Invalid(format!(
                "{} ids for {} rows",
                ids.len(),
                self.n
            )));
        }
        self.ids = Some(ids);
        Ok(self)
    }

    /// Number of rows N.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Dimension D.
    pub fn d(&self) -> usize {
        self.d
    }
    /// Row-major values.
    pub fn data(&self) -> &[f32] {
        &self.data
    }
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.d..(i + 1) * self.d]
    }
    /// Row ids, when the input had them.
    pub fn ids(&self) -> Option<&[serde_json::Value]> {
        self.ids.as_deref()
    }

    /// The first `n` rows (and their ids).
    pub fn head(&self, n: usize) -> Result<Table> {
        let n = n.min(self.n);
        let mut t = Table::new(self.data[..n * self.d].to_vec(), n, self.d)?;
        t.ids = self.ids.as_ref().map(|ids| ids[..n].to_vec());
        Ok(t)
    }

    /// Subtract the column mean (computed in float64) from every row; the user's
    /// `mean-centered-v1` space. Done before any fp16 rounding.
    pub fn centered(&self) -> Table {
        let mut mean = vec![0f64; self.d];
        for row in self.data.chunks_exact(self.d) {
            for (m, &v) in mean.iter_mut().zip(row) {
                *m += v as f64;
            }
        }
        for m in &mut mean {
            *m /= self.n as f64;
        }
        let mut data = self.data.clone();
        for row in data.chunks_exact_mut(self.d) {
            for (v, m) in row.iter_mut().zip(&mean) {
                *v = (*v as f64 - m) as f32;
            }
        }
        Table {
            n: self.n,
            d: self.d,
            data,
            ids: self.ids.clone(),
        }
    }

    /// The table exactly as the device sees it at `precision`: for fp16, every value rounded to
    /// half (nearest-even) and widened back. Oracles check against this.
    pub fn as_stored(&self, precision: Precision) -> Table {
        match precision {
            Precision::Fp32 => self.clone(),
            Precision::Fp16 => Table {
                n: self.n,
                d: self.d,
                data: self
                    .data
                    .iter()
                    .map(|&v| f16::from_f32(v).to_f32())
                    .collect(),
                ids: self.ids.clone(),
            },
        }
    }

    /// The values as IEEE half bits (round-to-nearest-even), for fp16 storage and `.bin` files.
    pub fn to_f16_bits(&self) -> Vec<u16> {
        self.data
            .iter()
            .map(|&v| f16::from_f32(v).to_bits())
            .collect()
    }

    /// [`Table::to_f16_bits`], refusing a value that would round to infinity (beyond ±65504),
    /// with an [`Error::Invalid`] naming its row and column.
    pub fn to_f16_bits_checked(&self) -> Result<Vec<u16>> {
        let bits = self.to_f16_bits();
        if let Some(pos) = bits.iter().position(|&b| !f16::from_bits(b).is_finite()) {
            return Err(Error::Invalid(format!(
                "row {} has a value ({}) at column {} outside the float16 range (the fp16 range is ±65504)",
                pos / self.d,
                self.data[pos],
                pos % self.d
            )));
        }
        Ok(bits)
    }

    /// Refuses the table if a nonzero row of it as the device sees it at `precision` (fp16:
    /// rounded to half and widened) has a norm outside what fp32 arithmetic handles exactly;
    /// see [`check_row_norms`]. Zero rows pass.
    pub fn check_norms(&self, precision: Precision) -> Result<()> {
        check_stored_norms(&self.data, self.d, precision, "row")
    }

    /// Row norms of the stored table, computed in float64 and rounded once to float32; the
    /// inverse is what shaders use (0 for a zero row, so its score is exactly 0 = "d = 1").
    pub fn inverse_norms(&self) -> Vec<f32> {
        self.data
            .chunks_exact(self.d)
            .map(|row| {
                let s: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
                if s == 0.0 {
                    0.0
                } else {
                    (1.0 / s.sqrt()) as f32
                }
            })
            .collect()
    }
}

/// The smallest norm a nonzero row may have on a device: 2⁻⁴⁰ (≈ 9.1e-13).
pub const MIN_ROW_NORM: f64 = 1.0 / (1u64 << 40) as f64;
/// The largest norm a row may have on a device: 2⁴⁰ (≈ 1.1e12).
pub const MAX_ROW_NORM: f64 = (1u64 << 40) as f64;

/// Refuses row-major `data` (rows of `d` values, finite) if a nonzero row's Euclidean norm,
/// computed in float64, lies outside [`MIN_ROW_NORM`] … [`MAX_ROW_NORM`], naming the first
/// such row (`what` is the noun: "row", "query"). Zero rows pass (their distance is 1 by
/// definition).
///
/// Why these bounds. The engines compute in fp32: inverse norms 1/|e|, dot products c·e and
/// e·e, products of a row's values. Below the fp32 normal range (2⁻¹²⁶) products lose their
/// bits or are flushed to zero, each by at most 2⁻¹²⁶, so a dot product of D terms is off by
/// at most D·2⁻¹²⁶ in absolute terms; and 1/|e| is infinite once |e| < 2⁻¹²⁸ (a row of
/// values near 1e-41). With every nonzero norm in [2⁻⁴⁰, 2⁴⁰]: 1/|e| and |e|² ∈ [2⁻⁸⁰, 2⁸⁰]
/// are normal; a running sum of N ≤ 2³² rows has |c| ≤ 2⁷², so |c|·|e| ≤ 2¹¹² stays finite;
/// and where |c| ≥ 2⁻⁴⁰ (a start row, or a sum that has not cancelled below it),
/// |c|·|e| ≥ 2⁻⁸⁰, so the underflow error D·2⁻¹²⁶ ≤ 2⁻¹¹⁰ (D ≤ 2¹⁶) is below 2⁻³⁰ of
/// |c|·|e| — far under the distance tolerance. fp16 values never trip the check: a nonzero
/// half is at least 2⁻²⁴ in magnitude (its subnormals included) and at most 65504, so a
/// nonzero fp16 row's norm lies in [2⁻²⁴, 2²⁴].
pub fn check_row_norms(data: &[f32], d: usize, what: &str) -> Result<()> {
    checked_sq_norms(data, d, what).map(|_| ())
}

/// [`Table::check_norms`] of row-major `data` (rows of `d` finite values) as a device stores it
/// at `precision`, naming the first refused row as `what` and its index: fp32, the rows'
/// norms ([`check_row_norms`]); fp16, a value past the fp16 range (±65504) by row and column,
/// then the norms of the rows rounded to half. The one check every writer of rows (a table's
/// upload, an index's `add`) and every reader of stored rows (the index files) applies.
pub fn check_stored_norms(data: &[f32], d: usize, precision: Precision, what: &str) -> Result<()> {
    match precision {
        Precision::Fp32 => check_row_norms(data, d, what),
        Precision::Fp16 => {
            // A value past the fp16 range is named as such, not as an infinite norm.
            if let Some(pos) = data.iter().position(|&v| !f16::from_f32(v).is_finite()) {
                return Err(Error::Invalid(format!(
                    "{what} {} has a value ({}) at column {} outside the float16 range (the fp16 \
                     range is ±65504)",
                    pos / d.max(1),
                    data[pos],
                    pos % d.max(1)
                )));
            }
            check_norms_by(data, d, what, |v| f16::from_f32(v).to_f32())
        }
    }
}

/// Every value of `data` (rows of `d`, d ≥ 1) finite; else the first that is not, by row and
/// column.
pub(crate) fn check_finite(data: &[f32], d: usize) -> Result<()> {
    match data.iter().position(|v| !v.is_finite()) {
        Some(pos) => Err(Error::Invalid(format!(
            "row {} has a non-finite value ({}) at column {}",
            pos / d,
            data[pos],
            pos % d
        ))),
        None => Ok(()),
    }
}

/// Whether every row of `data` (rows of `d` ≥ 1 values) is certainly finite with a norm in
/// [`MIN_ROW_NORM`] … [`MAX_ROW_NORM`] — [`check_row_norms`]' condition —, by a float32 sum of
/// squares a row in eight lanes (vector instructions; about a tenth of the float64 sums' time).
/// A finite value's square is at most 2¹²⁸ and a sum of D of them loses at most D·u of its
/// value (u = 2⁻²⁴), plus D·2⁻¹²⁶ where squares fall below the normal range; so a float32 sum
/// in [2⁻⁷⁸, 2⁷⁸] (four times inside [2⁻⁸⁰, 2⁸⁰] on each side) proves the float64 one inside
/// the range for any D ≤ 2²². `false` (any other sum: zero, tiny, huge, infinite or NaN) proves
/// nothing: the caller then runs the float64 check, which also gives the message. Many rows run
/// on several cores ([`crate::par`]).
pub(crate) fn norms_surely_in_range(data: &[f32], d: usize) -> bool {
    const HI: f32 = (1u128 << 78) as f32;
    const LO: f32 = 1.0 / HI;
    if d == 0 || d > 1 << 22 || !data.len().is_multiple_of(d) {
        return false;
    }
    let rows = data.len() / d;
    let mut ok = vec![false; rows];
    crate::par::for_row_runs(&mut ok, 1, data.len(), |first, run| {
        for (i, o) in run.iter_mut().enumerate() {
            let row = &data[(first + i) * d..(first + i + 1) * d];
            let mut lanes = [0f32; 8];
            let mut it = row.chunks_exact(8);
            for c in &mut it {
                for (l, &v) in lanes.iter_mut().zip(c) {
                    *l += v * v;
                }
            }
            for (l, &v) in lanes.iter_mut().zip(it.remainder()) {
                *l += v * v;
            }
            let sum: f32 = lanes.iter().sum();
            *o = (LO..=HI).contains(&sum);
        }
    });
    ok.iter().all(|&o| o)
}

/// [`check_row_norms`], returning each row's float64 sum of squares ([`sq_norms`]).
pub(crate) fn checked_sq_norms(data: &[f32], d: usize, what: &str) -> Result<Vec<f64>> {
    if d == 0 {
        return Ok(Vec::new());
    }
    let sq = sq_norms(data, d);
    check_sq_norms(&sq, what)?;
    Ok(sq)
}

/// [`check_row_norms`] of rows whose float64 sums of squares are `sq`.
pub(crate) fn check_sq_norms(sq: &[f64], what: &str) -> Result<()> {
    sq.iter()
        .enumerate()
        .try_for_each(|(i, &s)| check_sq_norm(i, s, what))
}

/// Row `i` (of `what`), whose float64 sum of squares is `s`: zero, or a norm in the range fp32
/// arithmetic handles exactly.
fn check_sq_norm(i: usize, s: f64, what: &str) -> Result<()> {
    let norm = s.sqrt();
    if s != 0.0 && !(MIN_ROW_NORM..=MAX_ROW_NORM).contains(&norm) {
        return Err(Error::Invalid(format!(
            "{what} {i} has norm {norm:.2e}, outside the range fp32 arithmetic handles \
             exactly (2^-40 … 2^40): scale the table or zero the row"
        )));
    }
    Ok(())
}

/// Each row's sum of squares in float64, `Σ_j (x_j as f64)²` added in column order — the bits
/// of `row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>()` — computed for eight rows at
/// a time, so eight dependent chains of additions overlap instead of one running at a time, and
/// on several cores for large tables ([`crate::par`]; each row's bits the same).
pub(crate) fn sq_norms(data: &[f32], d: usize) -> Vec<f64> {
    let n = data.len().checked_div(d).unwrap_or(0);
    let mut out = vec![0f64; n];
    crate::par::for_row_runs(&mut out, 1, n * d, |first, run| {
        sq_norms_into(&data[first * d..(first + run.len()) * d], d, run)
    });
    out
}

/// [`sq_norms`] of `data`'s rows into `out` (one a row), on this thread.
fn sq_norms_into(data: &[f32], d: usize, out: &mut [f64]) {
    const R: usize = 8;
    let n = out.len();
    let full = n / R * R;
    for (blk, o) in data[..full * d]
        .chunks_exact(R * d)
        .zip(out.chunks_exact_mut(R))
    {
        let rows: [&[f32]; R] = std::array::from_fn(|i| &blk[i * d..(i + 1) * d]);
        let mut s = [0f64; R];
        for j in 0..d {
            for (s, row) in s.iter_mut().zip(&rows) {
                let x = row[j] as f64;
                *s += x * x;
            }
        }
        o.copy_from_slice(&s);
    }
    for (i, o) in out.iter_mut().enumerate().skip(full) {
        *o = data[i * d..(i + 1) * d]
            .iter()
            .map(|&v| (v as f64) * (v as f64))
            .sum();
    }
}

/// [`check_row_norms`] of the values `stored(v)`, the device's copy of each value `v`.
fn check_norms_by(data: &[f32], d: usize, what: &str, stored: impl Fn(f32) -> f32) -> Result<()> {
    if d == 0 {
        return Ok(());
    }
    for (i, row) in data.chunks_exact(d).enumerate() {
        let s: f64 = row
            .iter()
            .map(|&v| {
                let x = stored(v) as f64;
                x * x
            })
            .sum();
        check_sq_norm(i, s, what)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The float32 screen never passes a table the float64 check refuses: rows at every scale
    /// around both ends of the range (a few ulps off the powers of two too), with zeros,
    /// subnormals and non-finite values; and it passes ordinary rows.
    #[test]
    fn norm_screen_passes_only_what_the_check_passes() {
        let d = 19;
        let mut passed = 0;
        for e in -140..=140 {
            for shape in 0..6 {
                let scale = 2f64.powi(e) as f32;
                let mut row: Vec<f32> = (0..d).map(|j| scale * (1.0 + j as f32 / 7.0)).collect();
                match shape {
                    1 => row[0] = f32::from_bits(scale.to_bits() + 3),
                    2 => row.iter_mut().skip(1).for_each(|v| *v = 0.0),
                    3 => row[d - 1] = f32::MIN_POSITIVE / 8.0,
                    4 => row[3] = f32::NAN,
                    5 => row[5] = f32::INFINITY,
                    _ => {}
                }
                let screen = norms_surely_in_range(&row, d);
                let exact =
                    check_finite(&row, d).is_ok() && check_row_norms(&row, d, "row").is_ok();
                assert!(
                    !screen || exact,
                    "scale 2^{e}, shape {shape}: screen passed a refused row"
                );
                passed += screen as usize;
            }
        }
        assert!(passed > 300, "the screen passed only {passed} rows");
        assert!(norms_surely_in_range(&[0.5; 384 * 3], 384));
        assert!(
            !norms_surely_in_range(&[0.0; 384], 384),
            "a zero row proves nothing here"
        );
        assert!(!norms_surely_in_range(&[1.0; 10], 3), "not whole rows");
    }
}
