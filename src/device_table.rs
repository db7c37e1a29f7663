//! The table on the device: a host [`Table`] uploaded once at a storage precision (fp32, or fp16
//! rounded on the host) with its inverse row norms. Every engine reads it — the scan, the gram
//! matrix, k-NN and rankings — so it lives here, below them all, not in any one engine.
//! It may touch the device context, device memory, the host table and [`crate::error`]; no
//! engine.

use crate::device::Context;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::table::{Precision, Table};
use std::sync::Arc;

/// What a [`DeviceTable`] shares between its clones: the buffers and the shape they hold.
struct TableInner {
    ctx: Context,
    data: Buffer,
    inv_norm: Buffer,
    n: usize,
    d: usize,
    precision: Precision,
}

/// A table uploaded to a device at a storage precision, with its row norms. Cheap to clone;
/// jobs keep it alive.
#[derive(Clone)]
pub struct DeviceTable {
    inner: Arc<TableInner>,
}

impl DeviceTable {
    /// Upload `table` at `precision`. Norms come from the stored (rounded) values in float64.
    /// A nonzero row whose stored values' norm is outside what fp32 arithmetic handles exactly
    /// (2⁻⁴⁰ … 2⁴⁰, [`crate::table::check_row_norms`]) is refused before any device work,
    /// naming the row: every engine reads its table from here.
    pub fn upload(ctx: &Context, table: &Table, precision: Precision) -> Result<DeviceTable> {
        Self::upload_with(ctx, table, precision, true)
    }

    /// [`DeviceTable::upload`] without the row-norm check, for tables this crate derives
    /// (k-means and coarse-quantizer centroids, whose norms are not the user's to fix).
    pub(crate) fn upload_unchecked(
        ctx: &Context,
        table: &Table,
        precision: Precision,
    ) -> Result<DeviceTable> {
        Self::upload_with(ctx, table, precision, false)
    }

    fn upload_with(
        ctx: &Context,
        table: &Table,
        precision: Precision,
        check_norms: bool,
    ) -> Result<DeviceTable> {
        let caps = ctx.caps();
        let mut f16_bits = None;
        if precision == Precision::Fp16 {
            if !caps.fp16_storage {
                return Err(Error::Unsupported {
                    device: caps.name.clone(),
                    what: "16-bit storage buffers (storageBuffer16BitAccess) for an fp16 table; use fp32".into(),
                });
            }
            // Refused before any device work: a value that would round to infinity.
            f16_bits = Some(table.to_f16_bits_checked()?);
        }
        let (n, d) = (table.n(), table.d());
        let bytes = (n as u64) * (d as u64) * precision.bytes() as u64;
        if bytes > caps.max_buffer_range {
            return Err(Error::Limit(format!(
                "table of {n} × {d} {} needs a {bytes}-byte buffer; {} allows {} bytes (maxStorageBufferRange)",
                precision.name(),
                caps.name,
                caps.max_buffer_range
            )));
        }
        if n > u32::MAX as usize / 2 || d > u32::MAX as usize / 4 {
            return Err(Error::Limit(format!(
                "table of {n} × {d} exceeds 32-bit indexing"
            )));
        }
        // The values the device sees (fp16: rounded), whose norms the shaders use.
        let stored = table.as_stored(precision);
        if check_norms {
            crate::table::check_row_norms(stored.data(), stored.d(), "row")?;
        }
        let data = match &f16_bits {
            None => ctx.upload("table", bytemuck::cast_slice(table.data()))?,
            Some(bits) => ctx.upload("table", bytemuck::cast_slice(bits))?,
        };
        let inv_norm = ctx.upload(
            "inverse norms",
            bytemuck::cast_slice(&stored.inverse_norms()),
        )?;
        Ok(DeviceTable {
            inner: Arc::new(TableInner {
                ctx: ctx.clone(),
                data,
                inv_norm,
                n,
                d,
                precision,
            }),
        })
    }

    /// Rows N.
    pub fn n(&self) -> usize {
        self.inner.n
    }
    /// Dimension D.
    pub fn d(&self) -> usize {
        self.inner.d
    }
    /// Storage precision.
    pub fn precision(&self) -> Precision {
        self.inner.precision
    }
    /// The context the table lives on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }
    /// The stored rows (fp32 or fp16) on the device.
    pub(crate) fn data_buffer(&self) -> &Buffer {
        &self.inner.data
    }
    /// 1 / |e_x| per row on the device.
    pub(crate) fn inv_norm_buffer(&self) -> &Buffer {
        &self.inner.inv_norm
    }

    /// Overwrites the rows (and their norms) with `table`'s, of the same shape, in place — the
    /// buffers, and every descriptor naming them, stay (k-means moves its centroids so each
    /// iteration). Only for fp32 tables this crate owns; never while a dispatch reads them.
    pub(crate) fn overwrite_fp32(&self, table: &Table) -> Result<()> {
        if table.n() != self.n() || table.d() != self.d() || self.precision() != Precision::Fp32 {
            return Err(Error::Invalid(
                "internal: overwrite of a device table with another shape or precision".into(),
            ));
        }
        let ctx = self.context();
        ctx.write_regions(&self.inner.data, &[(0, bytemuck::cast_slice(table.data()))])?;
        let inv = table.inverse_norms();
        ctx.write_regions(&self.inner.inv_norm, &[(0, bytemuck::cast_slice(&inv))])
    }

    /// [`DeviceTable::overwrite_fp32`] recorded into a caller's command buffer: copies of the
    /// rows (n × d fp32) from byte `at` of `src` and of their inverse norms
    /// ([`Table::inverse_norms`]) right after them. The caller puts the barriers around it
    /// (what read the table before, what reads it after).
    ///
    /// # Safety
    /// `cb` is recording; `src` holds those bytes and outlives its execution; the table is
    /// fp32.
    pub(crate) unsafe fn record_overwrite_fp32(
        &self,
        cb: ash::vk::CommandBuffer,
        src: &Buffer,
        at: u64,
    ) {
        debug_assert_eq!(self.precision(), Precision::Fp32);
        let dev = self.context().device();
        let rows = (self.n() * self.d() * 4) as u64;
        let copy = |dst: &Buffer, from: u64, size: u64| {
            let region = ash::vk::BufferCopy::default()
                .src_offset(from)
                .dst_offset(0)
                .size(size);
            dev.cmd_copy_buffer(cb, src.buffer, dst.buffer, &[region]);
        };
        copy(&self.inner.data, at, rows);
        copy(&self.inner.inv_norm, at + rows, (self.n() * 4) as u64);
    }
}
