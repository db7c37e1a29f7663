//! The device memory of one k-NN call: the queries (unit rows for cosine), the two scratch
//! buffer pairs A and B sized by the [`Plan`] for one query tile, their descriptor set, and the
//! download of each query tile's k best into the [`KnnResult`].

use super::launch::Side;
use super::plan::Plan;
use super::{KnnResult, Metric, NO_ID};
use crate::device::Buffer;
use crate::device_table::DeviceTable;
use crate::error::Result;
use crate::submit::Set;

/// A scratch id that marks padding (the shaders' `NO_ID`).
const NO_ID_U32: u32 = u32::MAX;

/// The queries as the device reads them: cosine queries scaled to unit length (float64 norms;
/// a zero query stays zero), the others as given.
pub(crate) fn query_rows(queries: &[f32], d: usize, metric: Metric) -> Vec<f32> {
    if metric != Metric::Cosine {
        return queries.to_vec();
    }
    queries
        .chunks_exact(d)
        .flat_map(|row| {
            let norm = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt();
            let inv = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            row.iter().map(move |&v| (v as f64 * inv) as f32)
        })
        .collect()
}

/// The queries and the scratch of one query tile, bound in one descriptor set (bindings 0–6 of
/// the k-NN shaders: table, inverse norms, queries, keys A, ids A, keys B, ids B).
pub(super) struct Scratch {
    // The set first: dropped before the buffers it names.
    pub set: Set,
    _queries: Buffer,
    keys_a: Buffer,
    ids_a: Buffer,
    keys_b: Buffer,
    ids_b: Buffer,
}

impl Scratch {
    /// Uploads `rows` (from [`query_rows`]) and allocates the scratch the plan asks for.
    pub fn new(table: &DeviceTable, plan: &Plan, rows: &[f32]) -> Result<Scratch> {
        let ctx = table.context();
        let queries = ctx.upload("k-NN queries", bytemuck::cast_slice(rows))?;
        let (a_keys, a_ids, b) = plan.scratch_bytes();
        let keys_a = Buffer::storage(ctx, "k-NN keys A", a_keys)?;
        let ids_a = Buffer::storage(ctx, "k-NN ids A", a_ids)?;
        let keys_b = Buffer::storage(ctx, "k-NN keys B", b)?;
        let ids_b = Buffer::storage(ctx, "k-NN ids B", b)?;
        let set = Set::new(
            ctx,
            &[
                (0, table.data_buffer()),
                (1, table.inv_norm_buffer()),
                (2, &queries),
                (3, &keys_a),
                (4, &ids_a),
                (5, &keys_b),
                (6, &ids_b),
            ],
            std::slice::from_ref(&queries),
        )?;
        Ok(Scratch {
            set,
            _queries: queries,
            keys_a,
            ids_a,
            keys_b,
            ids_b,
        })
    }

    /// Appends the k best of the `qn` queries of the tile just run, which are the first
    /// `plan.ke` pairs of each row on `side`, to `out` (distances with the metric's sign;
    /// padding after the N-th).
    pub fn download_into(
        &self,
        table: &DeviceTable,
        plan: &Plan,
        side: Side,
        qn: usize,
        metric: Metric,
        out: &mut KnnResult,
    ) -> Result<()> {
        let (ke, k) = (plan.ke, out.k);
        let regions: Vec<(u64, u64)> = (0..qn)
            .map(|q| (((q * plan.stride) * 4) as u64, (ke * 4) as u64))
            .collect();
        let (kb, ib) = match side {
            Side::A => (&self.keys_a, &self.ids_a),
            Side::B => (&self.keys_b, &self.ids_b),
        };
        let ctx = table.context();
        let keys: Vec<f32> = ctx
            .download_regions(kb, &regions)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let ids: Vec<u32> = ctx
            .download_regions(ib, &regions)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
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
