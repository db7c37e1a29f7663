//! IVF-PQ's exact re-rank on the device (`shaders/ivfpq_rerank.comp`), recorded after the list
//! scan in the search's one submission: the kept rows on the device by id, and one dispatch (a
//! workgroup a query, an invocation a candidate) that scores the scan's k · k_factor candidates
//! by their exact distance and keeps the k best. May touch the device context, device memory and
//! the compiled shaders.
//!
//! # Exactness
//! The distance is the host re-rank's float64 evaluation bit for bit: each product (L2: each
//! difference and its square) and each running sum correctly rounded (the shader's `precise`
//! forbids fused or reordered operations; Vulkan rounds float64 add, subtract and multiply
//! correctly), terms in column order from −0.0; the order is `(distance, id)` with ±0 as
//! `f64::total_cmp` orders them. The results come back as float64 and are rounded to f32 on the
//! host, as the host re-rank rounds them. So the device and the host re-rank return the same ids
//! and distance bits (`tests/ivfpq.rs` holds them to it, every metric).
//!
//! # Where it does not run
//! A device without `shaderFloat64` (or with `DIVERSITY_DISABLE=float64`), kept rows beyond one
//! storage binding (`maxStorageBufferRange`), or a D whose loop would pass a loop cap
//! (lavapipe's): the host re-ranks, as before.

use crate::device::{loop_budget, Buffer, Context};
use crate::error::Result;
use crate::spirv;
use crate::submit::bind;
use crate::table::Precision;
use ash::vk;

/// Candidates a workgroup scores at most (the shader's workgroup; [`super::MAX_SCAN_K`]).
const RERANK_WG: usize = 64;
/// Queries a dispatch (workgroups along x).
const QUERY_TILE: usize = 65_535;

/// `ivfpq_rerank.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RerankPush {
    dim: u32,
    q0: u32,
    kk: u32,
    k: u32,
    ip: u32,
    cand_ids: u32,
    res_keys: u32,
    res_ids: u32,
}

/// The kept rows on the device, row `id` at float `id · D`.
pub(crate) struct KeptRows {
    ctx: Context,
    d: usize,
    buf: Buffer,
    /// Unique to these rows (what a descriptor set naming them keys on).
    pub serial: u64,
}

/// Where a search's words are in the results buffer when the device re-ranks: the scan's
/// `nq · kk` keys and ids first, then the re-rank's `nq · k` float64 distances (two words each)
/// and ids.
pub(crate) struct Layout {
    pub cand_ids: usize,
    pub res_keys: usize,
    pub res_ids: usize,
    /// Words in all.
    pub words: usize,
}

impl Layout {
    pub fn new(nq: usize, kk: usize, k: usize) -> Layout {
        let scan = 2 * nq * kk;
        Layout {
            cand_ids: nq * kk,
            res_keys: scan,
            res_ids: scan + 2 * nq * k,
            words: scan + 3 * nq * k,
        }
    }
}

impl KeptRows {
    /// The rows (`n × d`, by id) on the device; `None` where the device re-rank cannot run
    /// (see the [module](self) documentation).
    pub fn build(ctx: &Context, rows: &[f32], d: usize) -> Result<Option<KeptRows>> {
        let caps = ctx.caps();
        let bytes = std::mem::size_of_val(rows).max(4) as u64;
        if !caps.float64
            || bytes > caps.max_buffer_range
            || rows.len() >= u32::MAX as usize
            || (d + RERANK_WG + 8) as u64 > loop_budget(caps)
        {
            return Ok(None);
        }
        let buf = if rows.is_empty() {
            ctx.upload("IVF-PQ kept rows", &[0u8; 4])?
        } else {
            ctx.upload("IVF-PQ kept rows", bytemuck::cast_slice(rows))?
        };
        Ok(Some(KeptRows {
            ctx: ctx.clone(),
            d,
            buf,
            serial: super::scan::next_serial(),
        }))
    }

    /// The rows' buffer (the re-rank binds it at 0; the queries at 2, the results at 6).
    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }

    /// The re-rank's pipeline (made before recording; the context caches it).
    pub fn pipeline(&self) -> Result<std::sync::Arc<crate::device::Pipeline>> {
        self.ctx
            .pipeline_for::<RerankPush>(&spirv::IVFPQ_RERANK, Precision::Fp32, &[])
    }

    /// Records, after a barrier, the re-rank of `nq` queries' `kk` candidates into their `k`
    /// best at `layout`, with `set` (rows at 0, queries at 2, results at 6).
    ///
    /// # Safety
    /// `cb` is recording; what `set` names outlives its execution.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn record(
        &self,
        cb: vk::CommandBuffer,
        pipe: &crate::device::Pipeline,
        set: vk::DescriptorSet,
        nq: usize,
        kk: usize,
        k: usize,
        ip: bool,
        layout: &Layout,
    ) {
        let dev = self.ctx.device();
        crate::submit::barrier(dev, cb);
        for q0 in (0..nq).step_by(QUERY_TILE) {
            let p = RerankPush {
                dim: self.d as u32,
                q0: q0 as u32,
                kk: kk as u32,
                k: k as u32,
                ip: ip as u32,
                cand_ids: layout.cand_ids as u32,
                res_keys: layout.res_keys as u32,
                res_ids: layout.res_ids as u32,
            };
            bind(dev, cb, pipe, set, bytemuck::bytes_of(&p));
            dev.cmd_dispatch(cb, QUERY_TILE.min(nq - q0) as u32, 1, 1);
        }
    }
}
