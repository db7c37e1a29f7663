//! An IVF-Flat index over several devices, the Faiss way (`IndexShards` of IVF indexes): the
//! coarse quantizer is trained once (on the first device), every device holds the same
//! centroids and an [`IvfFlat`] of its contiguous slice of the rows ([`crate::multi::split_ranges`],
//! equal or weighted), and a search runs on every device in its own thread, the per-device
//! k-lists merged on the host by the device's `(key, id)` order with global ids. May touch the
//! IVF-Flat index, the multi-device merge of `multi.rs`, the host table and the device contexts it
//! is given.
//!
//! # Why the result is one device's, bit for bit
//! Every device assigns a row to the same list (the same centroids, the same deterministic
//! coarse k-NN) and a query to the same probed lists; each device's list scan returns the exact
//! k best of its probed rows under `(key, id)` (keys do not depend on which rows share a device,
//! see [`crate::multi`]); the k best of the union of those k-lists are the k best of all the
//! probed rows — what one [`IvfFlat`] holding every row returns, ids, distance bits, ties and
//! padding included (`tests/ivf.rs` checks it, two logical devices on one).

use super::{IvfFlat, IvfOptions, IvfSearch, IvfSearchReport, KMeans};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::knn::{check_queries, KnnResult};
use crate::multi::{first_error, merged, names, shard_results, split_ranges, MultiReport};
use crate::table::Table;

/// An IVF-Flat index sharded over devices (see the module documentation).
pub struct IvfShards {
    shards: Vec<Option<IvfFlat>>,
    ranges: Vec<(usize, usize)>,
    names: Vec<String>,
    d: usize,
}

impl IvfShards {
    /// Trains the coarse quantizer on `ctxs[0]` from `table`'s rows, then gives every device
    /// those centroids and adds its slice of `table` (sizes by `weights`, equal by default; an
    /// empty slice leaves its device out). Returns the index and the k-means report. Errors:
    /// no devices, bad weights, a row [`IvfFlat::add`] refuses (naming the table's row), and
    /// [`IvfFlat::new`] / [`IvfFlat::train`]'s, naming the device.
    pub fn build(
        ctxs: &[Context],
        table: &Table,
        opts: &IvfOptions,
        weights: Option<&[f64]>,
    ) -> Result<(IvfShards, KMeans)> {
        let ranges = split_ranges(table.n(), ctxs.len(), weights)?;
        // Named by the table's row, not a slice's.
        table.check_norms(opts.precision)?;
        let names = names(ctxs);
        let d = table.d();
        let mut first = IvfFlat::new(&ctxs[0], d, opts)?;
        let km = first.train(table)?;
        let centroids = first.centroids().to_vec();
        let built: Vec<Result<Option<IvfFlat>>> = ctxs
            .iter()
            .zip(&ranges)
            .map(|(ctx, &(a, b))| {
                if a == b {
                    return Ok(None);
                }
                let mut ix = IvfFlat::new(ctx, d, opts)?;
                ix.set_centroids(centroids.clone())?;
                let slice = Table::new(table.data()[a * d..b * d].to_vec(), b - a, d)?;
                ix.add(&slice)?;
                Ok(Some(ix))
            })
            .collect();
        let shards = first_error(built, &names)?;
        Ok((
            IvfShards {
                shards,
                ranges,
                names,
                d,
            },
            km,
        ))
    }

    /// Each device's rows `[first, last + 1)`.
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges
    }

    /// [`IvfFlat::search`] on every device in parallel, merged: the same ids and distance bits
    /// as one [`IvfFlat`] holding every row. The report's `per_device_ns` are each device's GPU
    /// time; the returned [`IvfSearchReport`] sums rows scanned and takes the largest GPU times.
    pub fn search(
        &mut self,
        queries: &[f32],
        dim: usize,
        search: &IvfSearch,
    ) -> Result<(KnnResult, IvfSearchReport, MultiReport)> {
        let opts = &search.knn;
        let nq = check_queries(self.d, queries, dim, opts)?;
        let parts: Vec<Result<Option<(KnnResult, IvfSearchReport)>>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .shards
                .iter_mut()
                .map(|shard| {
                    s.spawn(move || match shard {
                        None => Ok(None),
                        Some(ix) => ix.search(queries, dim, search).map(Some),
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let parts = first_error(parts, &self.names)?;
        let ran = shard_results(&parts, &self.ranges, |p| &p.0);
        if ran.is_empty() {
            return Err(Error::Invalid("no device holds any row".into()));
        }
        let multi = MultiReport::of(&parts, |r| r.0.gpu_ns, self.ranges.clone());
        let mut report = IvfSearchReport::default();
        for (_, r) in parts.iter().flatten() {
            report.nprobe = r.nprobe;
            report.rows_scanned += r.rows_scanned;
            report.coarse_ns = report.coarse_ns.max(r.coarse_ns);
            report.lists_ns = report.lists_ns.max(r.lists_ns);
            report.list_scan = r.list_scan;
            report.scan_dispatches = report.scan_dispatches.max(r.scan_dispatches);
            report.probes_on_device = r.probes_on_device;
        }
        Ok((merged(&ran, nq, opts, &multi, 0), report, multi))
    }
}
