//! The device memory of one k-NN call: the queries (unit rows for cosine), the two scratch
//! buffer pairs A and B sized by the [`Plan`] for one query tile, their descriptor set, and the
//! download of each query tile's k best into the [`KnnResult`] — packed first on the device by
//! `knn_gather.comp` (binding 7) when they are short (≤ 256 pairs a query), so one download
//! brings them; longer ones come back as a region a query.
//! It may touch the plan, the push blocks, device memory, the device table, the metric and
//! command submission.

use super::plan::Plan;
use super::push::{GatherPush, Side};
use super::{KnnResult, NO_ID};
use crate::device::{Buffer, Pipeline};
use crate::device_table::DeviceTable;
use crate::error::Result;
use crate::metric::Metric;
use crate::submit::{bind, Set, Submitter};
use std::cell::RefCell;

/// Results of at most this many pairs a query are packed on the device for one download
/// (`knn_gather.comp`); longer ones come back as a region a query.
const GATHER_KE: usize = 256;

/// A scratch id that marks padding (the shaders' `NO_ID`).
const NO_ID_U32: u32 = u32::MAX;

/// The queries as the device reads them: cosine queries scaled to unit length (float64 norms;
/// a zero query stays zero), the others as given.
pub(super) fn query_rows(queries: &[f32], d: usize, metric: Metric) -> Vec<f32> {
    if metric != Metric::Cosine {
        return queries.to_vec();
    }
    let mut out = vec![0f32; queries.len()];
    write_query_rows(
        queries,
        d,
        metric,
        &crate::table::sq_norms(queries, d),
        &mut out,
    );
    out
}

/// [`query_rows`] into `dst`, each row's float64 sum of squares `sq` given.
pub(super) fn write_query_rows(
    queries: &[f32],
    d: usize,
    metric: Metric,
    sq: &[f64],
    dst: &mut [f32],
) {
    if d == 0 {
        dst.copy_from_slice(queries);
        return;
    }
    // Cosine rows need their sums (a caller that checked the queries under another metric has
    // none): taken here rather than leaving rows unwritten.
    let own;
    let sq = if metric == Metric::Cosine && sq.len() < queries.len() / d {
        own = crate::table::sq_norms(queries, d);
        &own
    } else {
        sq
    };
    // Row runs on several cores for large query sets (a 5 MB copy into a mapped upload buffer
    // is memory-bound on one core).
    crate::par::for_row_runs(dst, d, queries.len(), |first, run| {
        let src = &queries[first * d..first * d + run.len()];
        if metric != Metric::Cosine {
            run.copy_from_slice(src);
            return;
        }
        for ((row, out), &s) in src
            .chunks_exact(d)
            .zip(run.chunks_exact_mut(d))
            .zip(&sq[first..])
        {
            let norm = s.sqrt();
            let inv = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            for (o, &v) in out.iter_mut().zip(row) {
                *o = (v as f64 * inv) as f32;
            }
        }
    });
}

/// Whether a call of this plan packs its results on the device (`knn_gather.comp`).
pub(super) fn packs(plan: &Plan) -> bool {
    plan.ke <= GATHER_KE && plan.ke < plan.stride
}

/// The scratch bytes a plan needs: A's keys, A's ids, B's keys and ids, the packed results (0
/// where they are not packed).
fn sizes(plan: &Plan) -> [u64; 4] {
    let (a_keys, a_ids, b) = plan.scratch_bytes();
    let packed = if packs(plan) {
        (2 * plan.query_tile * plan.ke * 4) as u64
    } else {
        0
    };
    [a_keys, a_ids, b, packed]
}

/// A scratch kept from call to call (an IVF index's coarse search): its buffers as large as the
/// largest call's so far (grown to a power of two when a call needs more), its descriptor set
/// written when they are allocated — not once a call. It names a queries buffer the owner keeps
/// alive and identifies by a generation (a new one: the scratch is made again).
#[derive(Default)]
pub(crate) struct KeptScratch {
    pub(super) scratch: Option<Scratch<'static>>,
    bytes: [u64; 4],
    queries_gen: u64,
    /// Bumped each time the buffers are made again (what a set naming them keys on).
    pub(crate) gen: u64,
}

impl KeptScratch {
    /// The scratch for `plan`'s call with its queries in `queries` (generation `queries_gen`).
    pub(super) fn get(
        &mut self,
        table: &DeviceTable,
        plan: &Plan,
        queries: &Buffer,
        queries_gen: u64,
    ) -> Result<()> {
        // Always packed (what reads the results reads them there).
        let mut need = sizes(plan);
        need[3] = (2 * plan.query_tile * plan.ke * 4) as u64;
        let fits = self.scratch.is_some()
            && self.queries_gen == queries_gen
            && need.iter().zip(&self.bytes).all(|(n, h)| n <= h);
        if !fits {
            // Drop the old buffers first (device memory is the scarce thing).
            self.scratch = None;
            let mut bytes = [0u64; 4];
            for ((b, &n), &h) in bytes.iter_mut().zip(&need).zip(&self.bytes) {
                *b = if n == 0 && h == 0 {
                    0
                } else {
                    n.max(h).max(16).next_power_of_two()
                };
            }
            // B (and A where it holds keys) may be at most as large as the device allows one
            // binding to see: round up only within that.
            let cap = table.context().caps().max_buffer_range;
            for (b, &n) in bytes.iter_mut().zip(&need) {
                if *b > cap {
                    *b = n.max(16);
                }
            }
            self.scratch = Some(Scratch::alloc_sized(table, &bytes, queries)?);
            self.bytes = bytes;
            self.queries_gen = queries_gen;
            self.gen += 1;
        }
        Ok(())
    }
}

/// The queries and the scratch of one query tile, bound in one descriptor set (bindings 0–6 of
/// the k-NN shaders: table, inverse norms, queries, keys A, ids A, keys B, ids B; 7 the packed
/// results where they are packed).
pub(super) struct Scratch<'q> {
    // The set first: dropped before the buffers it names.
    pub set: Set,
    /// The queries when the scratch uploaded them ([`Scratch::new`]).
    _queries: Option<Buffer>,
    _borrow: std::marker::PhantomData<&'q Buffer>,
    keys_a: Buffer,
    ids_a: Buffer,
    keys_b: Buffer,
    ids_b: Buffer,
    /// Where `knn_gather.comp` packs short results (`plan.ke` ≤ [`GATHER_KE`]).
    packed: Option<Buffer>,
}

impl<'q> Scratch<'q> {
    /// Uploads `rows` (from [`query_rows`]) and allocates the scratch the plan asks for.
    pub fn new(table: &DeviceTable, plan: &Plan, rows: &[f32]) -> Result<Scratch<'static>> {
        let queries = table
            .context()
            .upload("k-NN queries", bytemuck::cast_slice(rows))?;
        let mut s = Scratch::alloc(table, plan, &queries)?;
        s._queries = Some(queries);
        Ok(s)
    }

    /// The scratch of a call whose query rows are already on the device in `queries` (which
    /// outlives the scratch: the lifetime holds it).
    pub fn with_queries(
        table: &DeviceTable,
        plan: &Plan,
        queries: &'q Buffer,
    ) -> Result<Scratch<'q>> {
        let s = Scratch::alloc(table, plan, queries)?;
        Ok(Scratch {
            set: s.set,
            _queries: None,
            _borrow: std::marker::PhantomData,
            keys_a: s.keys_a,
            ids_a: s.ids_a,
            keys_b: s.keys_b,
            ids_b: s.ids_b,
            packed: s.packed,
        })
    }

    /// The scratch buffers and the set naming `queries`, which the caller keeps alive.
    fn alloc(table: &DeviceTable, plan: &Plan, queries: &Buffer) -> Result<Scratch<'static>> {
        Scratch::alloc_sized(table, &sizes(plan), queries)
    }

    /// [`Scratch::alloc`] with the buffers `bytes` long (A's keys, A's ids, B's keys and ids,
    /// the packed results; 0: none packed).
    fn alloc_sized(
        table: &DeviceTable,
        bytes: &[u64; 4],
        queries: &Buffer,
    ) -> Result<Scratch<'static>> {
        let ctx = table.context();
        let [a_keys, a_ids, b, packed_bytes] = *bytes;
        let keys_a = Buffer::storage(ctx, "k-NN keys A", a_keys)?;
        let ids_a = Buffer::storage(ctx, "k-NN ids A", a_ids)?;
        let keys_b = Buffer::storage(ctx, "k-NN keys B", b)?;
        let ids_b = Buffer::storage(ctx, "k-NN ids B", b)?;
        let packed = if packed_bytes > 0 {
            Some(Buffer::storage(ctx, "k-NN packed results", packed_bytes)?)
        } else {
            None
        };
        let mut singles = vec![
            (0, table.data_buffer()),
            (1, table.inv_norm_buffer()),
            (2, queries),
            (3, &keys_a),
            (4, &ids_a),
            (5, &keys_b),
            (6, &ids_b),
        ];
        if let Some(p) = &packed {
            singles.push((7, p));
        }
        let set = Set::new(ctx, &singles, std::slice::from_ref(queries))?;
        Ok(Scratch {
            set,
            _queries: None,
            _borrow: std::marker::PhantomData,
            keys_a,
            ids_a,
            keys_b,
            ids_b,
            packed,
        })
    }

    /// The packed results (`knn_gather.comp`'s output), when this scratch packs them.
    pub fn packed(&self) -> Option<&Buffer> {
        self.packed.as_ref()
    }

    /// Records `knn_gather.comp` packing the first `plan.ke` pairs of the `qn` rows on `side`
    /// into the packed buffer (which exists).
    ///
    /// # Safety
    /// `cb` is recording.
    pub unsafe fn record_gather(
        &self,
        dev: &ash::Device,
        cb: ash::vk::CommandBuffer,
        gather: &Pipeline,
        plan: &Plan,
        side: Side,
        qn: usize,
    ) {
        let push = GatherPush {
            stride: plan.stride as u32,
            ke: plan.ke as u32,
            qn: qn as u32,
            from_b: (side == Side::B) as u32,
        };
        bind(dev, cb, gather, self.set.set, bytemuck::bytes_of(&push));
        dev.cmd_dispatch(cb, (qn * plan.ke).div_ceil(256) as u32, 1, 1);
    }

    /// Appends the k best of the `qn` queries of the tile just run, which are the first
    /// `plan.ke` pairs of each row on `side`, to `out` (distances with the metric's sign;
    /// padding after the N-th).
    #[allow(clippy::too_many_arguments)]
    pub fn download_into(
        &self,
        table: &DeviceTable,
        plan: &Plan,
        gather: &Pipeline,
        sub: &RefCell<Submitter>,
        side: Side,
        qn: usize,
        metric: Metric,
        out: &mut KnnResult,
    ) -> Result<()> {
        let (ke, k) = (plan.ke, out.k);
        let (kb, ib) = match side {
            Side::A => (&self.keys_a, &self.ids_a),
            Side::B => (&self.keys_b, &self.ids_b),
        };
        let ctx = table.context();
        let (keys, ids): (Vec<f32>, Vec<u32>) = match &self.packed {
            // Short rows: packed on the device, one download (a copy region a query costs the
            // device microseconds each: a k-means assignment of 10⁶ rows spent seconds in them).
            Some(packed) => {
                let dev = ctx.device();
                sub.borrow_mut().run("k-NN gather", |cb| unsafe {
                    self.record_gather(dev, cb, gather, plan, side, qn);
                })?;
                let words: Vec<u32> = ctx
                    .download(packed, 0, (2 * qn * ke * 4) as u64)?
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let (k_bits, i_bits) = words.split_at(qn * ke);
                (
                    k_bits.iter().map(|&b| f32::from_bits(b)).collect(),
                    i_bits.to_vec(),
                )
            }
            // Long rows: a region a query.
            None => {
                let regions: Vec<(u64, u64)> = (0..qn)
                    .map(|q| (((q * plan.stride) * 4) as u64, (ke * 4) as u64))
                    .collect();
                let words = |buf| -> Result<Vec<[u8; 4]>> {
                    Ok(ctx
                        .download_regions(buf, &regions)?
                        .chunks_exact(4)
                        .map(|c| [c[0], c[1], c[2], c[3]])
                        .collect())
                };
                (
                    words(kb)?.into_iter().map(f32::from_le_bytes).collect(),
                    words(ib)?.into_iter().map(u32::from_le_bytes).collect(),
                )
            }
        };
        let neg = metric != Metric::L2;
        let pad_dist = if neg {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
        for q in 0..qn {
            for i in 0..k {
                if i < ke && ids[q * ke + i] != NO_ID_U32 {
                    let key = keys[q * ke + i];
                    out.ids.push(ids[q * ke + i] as i64);
                    out.distances.push(if neg { -key } else { key });
                } else {
                    out.ids.push(NO_ID);
                    out.distances.push(pad_dist);
                }
            }
        }
        Ok(())
    }
}
