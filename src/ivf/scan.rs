//! The IVF-Flat list scan on the device (`shaders/ivf_scan.comp`): every list in one slab, and
//! one dispatch that scans, for every query, the rows of every list it probes and keeps its k
//! best (`shaders/block_select.glsl`: a sorted queue per invocation, then a workgroup merge).
//!
//! # The slab
//! The lists' rows, list after list, each list starting on a multiple of 32 rows (zero rows pad
//! the gaps; no list reaches them), interleaved by blocks of 32 rows (row r's dim j at
//! `(r / 32) · 32 · D + j · 32 + r % 32`) so a subgroup's 32 invocations read dim j of 32 rows
//! in one coalesced load; beside it each slab row's inverse norm (from the stored values in
//! float64, as [`crate::DeviceTable`] computes them), its id, and each list's first row and
//! size. An [`super::IvfFlat::add`] marks the slab stale; the next search rebuilds it.
//!
//! # Exactness
//! A key is [`crate::knn`]'s for the same (query, stored row), bit for bit (the same fused
//! multiply-add chain; see the shader), and the block select is exact under the `(key, id)`
//! order, so the k best of the probed rows are the exact search's k best restricted to them —
//! with every list probed, the exact search itself.
//!
//! # Devices that cap loops
//! lavapipe stops an invocation's loops after 65,535 iterations in all
//! ([`crate::device::loop_budget`]); [`dispatches`] counts an invocation's iterations from above
//! and cuts the scan into dispatches over ranges of probe ranks and of rows within the lists,
//! each starting from the k best the one before wrote.

use crate::device::{loop_budget, Buffer, Capabilities, Context, PipelineKey};
use crate::error::{Error, Result};
use crate::knn::Metric;
use crate::spirv::{self, checked_push, spirv_for};
use crate::submit::{barrier, bind, Set, Submitter};
use crate::table::{Precision, Table};

/// Invocations a workgroup (one query).
const SCAN_WG: usize = 128;
/// Rows an invocation scans at a time (independent fused multiply-add chains in flight).
const SCAN_ROWS: usize = 1;
/// Rows a block of the interleaved layout.
const BLOCK: usize = 32;
/// The largest k of the list scan (block_select.glsl's queue bound); larger k search list by
/// list with the exact k-NN.
pub const MAX_SCAN_K: usize = 64;
/// The largest D of the list scan (the query is held in shared memory).
pub const MAX_SCAN_DIM: usize = 4096;
/// Queries a dispatch (workgroups along x).
const QUERY_TILE: usize = 65_535;
/// The id of a padding pair in the shader.
const NO_ID_U32: u32 = u32::MAX;

/// `ivf_scan.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ScanPush {
    dim: u32,
    q0: u32,
    nprobe: u32,
    p0: u32,
    p1: u32,
    r0: u32,
    r1: u32,
    k: u32,
    seed: u32,
    metric: u32,
}

/// The lists on the device (see the [module](self) documentation).
pub(crate) struct Slab {
    ctx: Context,
    d: usize,
    precision: Precision,
    data: Buffer,
    inv_norm: Buffer,
    lists: Buffer,
    row_id: Buffer,
    /// Rows of the longest list.
    max_len: usize,
}

/// Whether the list scan takes a search of `k` results in dimension `d`.
pub(crate) fn applies(k: usize, d: usize) -> bool {
    k <= MAX_SCAN_K && d <= MAX_SCAN_DIM
}

impl Slab {
    /// The slab of `lists` (each: ids ascending, rows row-major) at `precision`; `None` when
    /// every list is empty.
    pub fn build(
        ctx: &Context,
        lists: &[(&[i64], &[f32])],
        d: usize,
        precision: Precision,
    ) -> Result<Option<Slab>> {
        let mut offsets = Vec::with_capacity(2 * lists.len());
        let mut rows = 0usize;
        for (ids, _) in lists {
            offsets.push(rows);
            offsets.push(ids.len());
            rows += ids.len().div_ceil(BLOCK) * BLOCK;
        }
        if rows == 0 {
            return Ok(None);
        }
        let caps = ctx.caps();
        let bytes = (rows as u64) * (d as u64) * precision.bytes() as u64;
        if bytes > caps.max_buffer_range || rows >= u32::MAX as usize / 2 {
            return Err(Error::Limit(format!(
                "the IVF lists' {rows} rows × {d} {} need a {bytes}-byte buffer; {} allows {} \
                 bytes (maxStorageBufferRange)",
                precision.name(),
                caps.name,
                caps.max_buffer_range
            )));
        }
        let mut flat = vec![0f32; rows * d];
        let mut row_id = vec![NO_ID_U32; rows];
        let mut max_len = 0;
        for (l, (ids, data)) in lists.iter().enumerate() {
            let at = offsets[2 * l];
            flat[at * d..at * d + data.len()].copy_from_slice(data);
            for (i, &id) in ids.iter().enumerate() {
                row_id[at + i] = id as u32;
            }
            max_len = max_len.max(ids.len());
        }
        let table = Table::new(flat, rows, d)?;
        let inv = table.as_stored(precision).inverse_norms();
        let data = match precision {
            Precision::Fp32 => ctx.upload(
                "IVF lists",
                bytemuck::cast_slice(&interleave(table.data(), rows, d)),
            )?,
            Precision::Fp16 => ctx.upload(
                "IVF lists",
                bytemuck::cast_slice(&interleave(&table.to_f16_bits_checked()?, rows, d)),
            )?,
        };
        let lists: Vec<u32> = offsets.iter().map(|&v| v as u32).collect();
        Ok(Some(Slab {
            ctx: ctx.clone(),
            d,
            precision,
            data,
            inv_norm: ctx.upload("IVF inverse norms", bytemuck::cast_slice(&inv))?,
            lists: ctx.upload("IVF list offsets", bytemuck::cast_slice(&lists))?,
            row_id: ctx.upload("IVF row ids", bytemuck::cast_slice(&row_id))?,
            max_len,
        }))
    }

    /// The k best `(key, id)` pairs of each query (`queries`: the device's query rows, unit
    /// rows for cosine) among the rows of the lists `probes` names (`nprobe` a query,
    /// row-major), best first, padded with (+∞, `u32::MAX`); the GPU nanoseconds; and the
    /// dispatches recorded.
    pub fn scan(
        &self,
        queries: &[f32],
        probes: &[u32],
        nprobe: usize,
        k: usize,
        metric: Metric,
    ) -> Result<(Vec<f32>, Vec<u32>, u64, usize)> {
        let tt = std::time::Instant::now();
        let ctx = &self.ctx;
        let d = self.d;
        let nq = queries.len() / d;
        if nq == 0 {
            return Ok((Vec::new(), Vec::new(), 0, 0));
        }
        let bs_k = k.next_power_of_two();
        let (wg, ilp) = shape();
        let steps = dispatches(ctx.caps(), wg, d, k, bs_k, nprobe, self.max_len)?;
        let pipe = ctx.pipeline(PipelineKey {
            spirv: spirv_for(&spirv::IVF_SCAN, self.precision),
            spec: vec![wg as u32, bs_k as u32, ilp as u32],
            push_bytes: checked_push::<ScanPush>(&spirv::IVF_SCAN)?,
        })?;
        super::tprof("s.pipe", tt);
        let qbuf = ctx.upload("IVF queries", bytemuck::cast_slice(queries))?;
        let pbuf = ctx.upload("IVF probes", bytemuck::cast_slice(probes))?;
        let out_bytes = (nq * k * 4) as u64;
        let out_key = Buffer::storage(ctx, "IVF keys", out_bytes)?;
        let out_id = Buffer::storage(ctx, "IVF ids", out_bytes)?;
        let set = Set::new(
            ctx,
            &[
                (0, &self.data),
                (1, &self.inv_norm),
                (2, &qbuf),
                (3, &self.lists),
                (4, &self.row_id),
                (5, &pbuf),
                (6, &out_key),
                (7, &out_id),
            ],
            &[],
        )?;
        super::tprof("s.bufs", tt);
        let mut sub = Submitter::new(ctx)?;
        let dev = ctx.device();
        let mut gpu_ns = 0;
        // Dispatches a submission: all of them on a GPU (one), bounded on a capped device.
        for q0 in (0..nq).step_by(QUERY_TILE) {
            let qn = QUERY_TILE.min(nq - q0);
            for group in steps.chunks(64) {
                let first = std::ptr::eq(group.as_ptr(), steps.as_ptr());
                gpu_ns += sub.run("IVF list scan", |cb| unsafe {
                    for (i, &(p0, p1, r0, r1)) in group.iter().enumerate() {
                        if i > 0 {
                            barrier(dev, cb);
                        }
                        let push = ScanPush {
                            dim: d as u32,
                            q0: q0 as u32,
                            nprobe: nprobe as u32,
                            p0: p0 as u32,
                            p1: p1 as u32,
                            r0: r0 as u32,
                            r1: r1.min(u32::MAX as usize) as u32,
                            k: k as u32,
                            seed: !(first && i == 0) as u32,
                            metric: metric_code(metric),
                        };
                        bind(dev, cb, &pipe, set.set, bytemuck::bytes_of(&push));
                        dev.cmd_dispatch(cb, qn as u32, 1, 1);
                    }
                })?;
            }
        }
        super::tprof("s.run", tt);
        drop(set);
        let keys = ctx
            .download(&out_key, 0, out_bytes)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let ids = ctx
            .download(&out_id, 0, out_bytes)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        super::tprof("s.down", tt);
        Ok((keys, ids, gpu_ns, steps.len() * nq.div_ceil(QUERY_TILE)))
    }
}

/// The scan's workgroup size and rows an invocation scans at a time: [`SCAN_WG`] and
/// [`SCAN_ROWS`], or `DIVERSITY_IVF_SCAN=wg,rows` (a tuning experiment; wg a power of two from 32
/// to 256, rows 1 to 4).
fn shape() -> (usize, usize) {
    let parsed = std::env::var("DIVERSITY_IVF_SCAN").ok().and_then(|v| {
        let (a, b) = v.split_once(',')?;
        Some((
            a.trim().parse::<usize>().ok()?,
            b.trim().parse::<usize>().ok()?,
        ))
    });
    match parsed {
        Some((wg, rows))
            if wg.is_power_of_two() && (32..=256).contains(&wg) && (1..=4).contains(&rows) =>
        {
            (wg, rows)
        }
        _ => (SCAN_WG, SCAN_ROWS),
    }
}

fn metric_code(m: Metric) -> u32 {
    match m {
        Metric::InnerProduct => 0,
        Metric::Cosine => 1,
        Metric::L2 => 2,
    }
}

/// Rows `rows × d` (row-major) in the slab's interleaved layout (`rows` a multiple of 32).
fn interleave<T: Copy + Default>(src: &[T], rows: usize, d: usize) -> Vec<T> {
    let mut out = vec![T::default(); rows * d];
    for b in 0..rows / BLOCK {
        let blk = &mut out[b * BLOCK * d..(b + 1) * BLOCK * d];
        for r in 0..BLOCK {
            let row = &src[(b * BLOCK + r) * d..(b * BLOCK + r + 1) * d];
            for (j, &v) in row.iter().enumerate() {
                blk[j * BLOCK + r] = v;
            }
        }
    }
    out
}

/// The dispatches of one scan, `(p0, p1, r0, r1)`: probe ranks [p0, p1) and rows [r0, r1) of
/// each probed list. One dispatch where loops are not capped; where they are, as many as keep
/// every invocation's loop iterations — counted from above: the query load, the seed, per probe
/// its rows' chains over d and queue insertions, and the merge — within the budget.
pub(crate) fn dispatches(
    caps: &Capabilities,
    wg: usize,
    d: usize,
    k: usize,
    bs_k: usize,
    nprobe: usize,
    max_len: usize,
) -> Result<Vec<(usize, usize, usize, usize)>> {
    if caps.loop_limit.is_none() {
        return Ok(vec![(0, nprobe, 0, usize::MAX)]);
    }
    let budget = loop_budget(caps) as usize;
    let log_wg = wg.trailing_zeros() as usize;
    let fixed = d.div_ceil(wg) + bs_k + k * (log_wg + 2 + bs_k) + 8;
    let per_row = d + bs_k + 1;
    let per_probe = 1 + max_len.div_ceil(wg) * per_row;
    if fixed + per_probe <= budget {
        let step = (budget - fixed) / per_probe;
        return Ok((0..nprobe)
            .step_by(step)
            .map(|p0| (p0, (p0 + step).min(nprobe), 0, usize::MAX))
            .collect());
    }
    // One probe rank at a time, its lists' rows in ranges.
    let rows = budget.saturating_sub(fixed + 1) / per_row * wg;
    if rows == 0 {
        crate::device::check_loop_budget(caps, "the IVF list scan", (fixed + 1 + per_row) as u64)?;
    }
    let mut out = Vec::new();
    for p in 0..nprobe {
        for r0 in (0..max_len).step_by(rows.max(1)) {
            out.push((p, p + 1, r0, r0 + rows));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_by_blocks_of_32() {
        let (rows, d) = (64, 3);
        let src: Vec<u32> = (0..(rows * d) as u32).collect();
        let out = interleave(&src, rows, d);
        for r in 0..rows {
            for j in 0..d {
                assert_eq!(out[r / 32 * 32 * d + j * 32 + r % 32], src[r * d + j]);
            }
        }
    }

    #[test]
    fn dispatches_fit_the_loop_cap() {
        let free = crate::device::test_caps(32, None);
        assert_eq!(
            dispatches(&free, 128, 384, 10, 16, 7, 5000).unwrap().len(),
            1
        );
        let capped = crate::device::test_caps(8, Some(65_535));
        // Short lists: several probes a dispatch, every rank covered once, rows whole.
        let s = dispatches(&capped, 128, 384, 10, 16, 50, 2000).unwrap();
        assert!(s.len() > 1);
        assert_eq!(s.first().unwrap().0, 0);
        assert_eq!(s.last().unwrap().1, 50);
        assert!(s.windows(2).all(|w| w[0].1 == w[1].0));
        // Long lists: one rank at a time, rows in ranges covering the longest list.
        let s = dispatches(&capped, 128, 384, 10, 16, 2, 200_000).unwrap();
        assert!(s.iter().all(|&(p0, p1, _, _)| p1 == p0 + 1));
        assert_eq!(
            s.iter().filter(|e| e.0 == 1).map(|e| e.3).max(),
            Some(s[s.len() - 1].3)
        );
        assert!(s.last().unwrap().3 >= 200_000);
    }
}
