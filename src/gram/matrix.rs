//! G, the gram engine's matrix: `G = E Eᵀ diag(1/|e|)` of a device table, computed once on the
//! device in row slabs of at most `maxStorageBufferRange` bytes, shared by every job over the
//! table (each keeps it alive). Touches the table it reads and its own slabs.

use super::plan::{gram_bytes, gram_unfit, row_stride, slab_rows};
use super::record::in_parts;
use super::MAX_SLABS;
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::spirv;
use crate::submit::{bind, Set, Submitter};
use std::sync::Arc;

/// How [`Gram::build_with`] splits the work; `None` = the device's choice.
#[derive(Clone, Debug, Default)]
pub struct GramBuild {
    /// Rows of G per slab (one buffer each; at most [`MAX_SLABS`] slabs). Default: as many as
    /// `maxStorageBufferRange` allows.
    pub slab_rows: Option<usize>,
    /// Rows of G computed per submission (the watchdog knob). Default: ~2³³ multiply-adds.
    pub rows_per_submission: Option<usize>,
    /// Fixed-point G: int32 entries round(2^s · G) from float64 dot products, for jobs on
    /// fixed-point keys ([`super::fixed_point`]); `Some(false)`: float32 entries (compensated
    /// dot products), for jobs whose options name float sums (`compensated`, or no judge).
    /// `None`: what jobs with the default options run on this device (fixed-point where it has
    /// float64 in shaders). A job refuses a fixed-point G its options cannot use.
    pub fixed: Option<bool>,
}

/// G = E Eᵀ of a device table, on the device, in row slabs. Jobs share it (and keep it alive).
#[derive(Clone)]
pub struct Gram {
    pub(super) inner: Arc<GramInner>,
}

pub(super) struct GramInner {
    pub(super) table: DeviceTable,
    pub(super) slabs: Vec<Buffer>,
    pub(super) slab_rows: usize,
    pub(super) build_ns: u64,
    /// Fixed-point G: its entries are round(2^scale · G) (None: float32 G).
    pub(super) scale: Option<i32>,
    /// An upper bound on every row's norm (fixed-point G only; 0 otherwise).
    pub(super) max_norm: f32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct MatrixPush {
    n: u32,
    dim: u32,
    slab_row0: u32,
    row0: u32,
    rows: u32,
    slab: u32,
}

impl Gram {
    /// Compute G = E Eᵀ diag(1/|e|) of `table` on the device (each entry one fused multiply-add
    /// chain over d in ascending order, from the stored rows, then one multiply by 1/|e_j|). Refused with [`Error::Limit`] when G does not
    /// fit ([`gram_unfit`] says why).
    pub fn build(table: &DeviceTable) -> Result<Gram> {
        Gram::build_with(table, &GramBuild::default())
    }

    /// [`Gram::build`] with explicit slab and submission sizes (tests use small ones so that
    /// several slabs and submissions run on a small table).
    pub fn build_with(table: &DeviceTable, how: &GramBuild) -> Result<Gram> {
        let ctx = table.context().clone();
        let caps = ctx.caps();
        let (n, d) = (table.n(), table.d());
        if let Some(why) = gram_unfit(caps, n, d, table.precision().bytes()) {
            return Err(Error::Limit(why));
        }
        let rows = match how.slab_rows {
            Some(r) => r.clamp(1, slab_rows(caps, n)),
            None => slab_rows(caps, n),
        };
        if n.div_ceil(rows) > MAX_SLABS {
            return Err(Error::Invalid(format!(
                "slabs of {rows} rows: N = {n} needs {} slabs, at most {MAX_SLABS}",
                n.div_ceil(rows)
            )));
        }
        let mut slabs = Vec::new();
        let mut r0 = 0;
        while r0 < n {
            let r = rows.min(n - r0);
            slabs.push(Buffer::storage(
                &ctx,
                "Gram matrix slab",
                (r * row_stride(n) * 4) as u64,
            )?);
            r0 += r;
        }
        let fixed = how.fixed.unwrap_or_else(|| {
            super::plan::fixed_point(caps, n, d, &super::GramOptions::default())
        });
        if fixed && !caps.float64 {
            return Err(Error::Unsupported {
                device: caps.name.clone(),
                what: "float64 in shaders (a fixed-point Gram matrix)".into(),
            });
        }
        let (scale, max_norm) = if fixed {
            let inv = ctx.download(table.inv_norm_buffer(), 0, (n * 4) as u64)?;
            let (s, m) = fixed_scale(bytemuck::cast_slice(&inv));
            (Some(s), m)
        } else {
            (None, 0.0)
        };
        let pipeline = match scale {
            Some(s) => ctx.pipeline_for::<MatrixPush>(
                &spirv::GRAM_MATRIX_FIXED,
                table.precision(),
                &[s as u32],
            )?,
            None => ctx.pipeline_for::<MatrixPush>(&spirv::GRAM_MATRIX, table.precision(), &[])?,
        };
        let set = Set::new(
            &ctx,
            &[(0, table.data_buffer()), (1, table.inv_norm_buffer())],
            &slabs,
        )?;
        let mut sub = Submitter::new(&ctx)?;
        let dev = ctx.device().clone();
        let mut build_ns = 0;
        for k in 0..slabs.len() {
            let row0 = k * rows;
            let count = rows.min(n - row0);
            let push = MatrixPush {
                n: n as u32,
                dim: d as u32,
                slab_row0: row0 as u32,
                row0: row0 as u32,
                rows: count as u32,
                slab: k as u32,
            };
            // Stay under a watchdog: at most ~2^33 multiply-adds per submission.
            let per_sub = how
                .rows_per_submission
                .unwrap_or((1usize << 33) / (n * d).max(1))
                .max(1);
            for (first, part) in in_parts(row0, count, per_sub) {
                let push = MatrixPush {
                    row0: first as u32,
                    rows: part as u32,
                    ..push
                };
                build_ns += sub.run("computing the Gram matrix", |cb| unsafe {
                    bind(&dev, cb, &pipeline, set.set, bytemuck::bytes_of(&push));
                    dev.cmd_dispatch(cb, n.div_ceil(64) as u32, part.div_ceil(64) as u32, 1);
                })?;
            }
        }
        drop(set);
        Ok(Gram {
            inner: Arc::new(GramInner {
                table: table.clone(),
                slabs,
                slab_rows: rows,
                build_ns,
                scale,
                max_norm,
            }),
        })
    }

    /// The table G was computed from.
    pub fn table(&self) -> &DeviceTable {
        &self.inner.table
    }
    /// GPU time of computing G, nanoseconds (0 without timestamps).
    pub fn build_ns(&self) -> u64 {
        self.inner.build_ns
    }
    /// Bytes of G on the device.
    pub fn bytes(&self) -> u64 {
        gram_bytes(self.inner.table.n())
    }
    /// Number of row slabs G is split into.
    pub fn slabs(&self) -> usize {
        self.inner.slabs.len()
    }

    /// The fixed-point scale s: entries are round(2^s · G) as int32 (None: float32 G, see
    /// [`GramBuild::fixed`]).
    pub fn fixed_scale(&self) -> Option<i32> {
        self.inner.scale
    }

    /// Row `i` of G as stored, `G[i][j] = (e_i · e_j) / |e_j|` (0 for a zero row j), downloaded
    /// (for tests and diagnostics; a fixed-point G's entries are converted to float32).
    pub fn row(&self, i: usize) -> Result<Vec<f32>> {
        let g = &self.inner;
        let n = g.table.n();
        if i >= n {
            return Err(Error::Invalid(format!("row {i} of G for N = {n}")));
        }
        let slab = i / g.slab_rows;
        let off = ((i - slab * g.slab_rows) * row_stride(n) * 4) as u64;
        let bytes = g
            .table
            .context()
            .download(&g.slabs[slab], off, (n * 4) as u64)?;
        Ok(match g.scale {
            None => bytemuck::cast_slice(&bytes).to_vec(),
            Some(s) => bytemuck::cast_slice::<u8, i32>(&bytes)
                .iter()
                .map(|&v| (v as f64 * (-s as f64).exp2()) as f32)
                .collect(),
        })
    }
}

/// The fixed-point scale for rows with these inverse norms (float32 roundings of float64 values;
/// 0 for zero rows), and an upper bound M on their norms (|e| ≤ 1/inv_norm · (1 + 2⁻²⁰)): the
/// largest s with 2^s · M < 2^30.
pub(super) fn fixed_scale(inv_norm: &[f32]) -> (i32, f32) {
    let m = inv_norm
        .iter()
        .filter(|&&v| v > 0.0)
        .map(|&v| 1.0 / v as f64)
        .fold(0.0f64, f64::max)
        * (1.0 + 2f64.powi(-20));
    // M as a float32 no smaller than m.
    let mf = m as f32;
    let mf = if (mf as f64) < m { mf.next_up() } else { mf };
    if m > 0.0 {
        (29 - (mf as f64).log2().floor() as i32, mf)
    } else {
        (0, 0.0)
    }
}
