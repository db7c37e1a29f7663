//! The coarse quantizer both inverted-file indexes share: the nlist × D centroids, their fp32
//! copy on the device (the table the coarse k-NN searches) and their training, k-means of the
//! rows as the index sees them (unit rows for cosine, as spherical k-means does). It uses the
//! device table and `kmeans.rs`; the lists, their scans and the file formats stay with each
//! index. May touch the device context, the device table, the host table, `kmeans.rs` and
//! `kmeans_batch.rs`.

use super::kmeans::{KMeans, KMeansOptions};
use super::kmeans_batch::kmeans_recorded;
use crate::device::Context;
use crate::device_table::DeviceTable;
use crate::error::Result;
use crate::metric::Metric;
use crate::table::{Precision, Table};
use std::borrow::Cow;

/// The centroids of an inverted file and their device copy.
pub(super) struct Coarse {
    nlist: usize,
    d: usize,
    /// nlist × D, empty until trained (a loader sets them here before [`Coarse::upload`]).
    pub(super) centroids: Vec<f32>,
    table: Option<DeviceTable>,
}

impl Coarse {
    /// No centroids yet.
    pub(super) fn new(nlist: usize, d: usize) -> Coarse {
        Coarse {
            nlist,
            d,
            centroids: Vec::new(),
            table: None,
        }
    }

    /// The nlist × D centroids (empty until trained).
    pub(super) fn centroids(&self) -> &[f32] {
        &self.centroids
    }

    /// The centroids on the device (`None` until trained or loaded).
    pub(super) fn device(&self) -> Option<&DeviceTable> {
        self.table.as_ref()
    }

    /// k-means of `rows` (already as the index sees them, see [`index_rows`]) into nlist
    /// centroids — [`super::kmeans()`]'s bits, two submissions an iteration — kept and uploaded.
    pub(super) fn train(
        &mut self,
        ctx: &Context,
        rows: &Table,
        opts: &KMeansOptions,
    ) -> Result<KMeans> {
        let km = kmeans_recorded(ctx, rows, self.nlist, opts)?;
        self.set(ctx, km.centroids.clone())?;
        Ok(km)
    }

    /// Take `c` (nlist × D) as the centroids and upload them (fp32; no row-norm check, as for
    /// every derived table).
    pub(super) fn set(&mut self, ctx: &Context, c: Vec<f32>) -> Result<()> {
        let t = Table::new(c, self.nlist, self.d)?;
        self.table = Some(DeviceTable::upload_unchecked(ctx, &t, Precision::Fp32)?);
        self.centroids = t.data().to_vec();
        Ok(())
    }

    /// Upload the centroids a loader set in [`Coarse::centroids`].
    pub(super) fn upload(&mut self, ctx: &Context) -> Result<()> {
        let c = std::mem::take(&mut self.centroids);
        self.set(ctx, c)
    }
}

/// The rows as an index of `metric` sees them: unit rows for cosine, else as given.
pub(super) fn index_rows(metric: Metric, t: &Table) -> Result<Cow<'_, Table>> {
    if metric == Metric::Cosine {
        Ok(Cow::Owned(normalized(t)?))
    } else {
        Ok(Cow::Borrowed(t))
    }
}

/// The rows of `t` divided by their float64 norms (a zero row stays zero), rounded to f32.
pub(super) fn normalized(t: &Table) -> Result<Table> {
    let d = t.d();
    let mut data = Vec::with_capacity(t.data().len());
    for i in 0..t.n() {
        let r = t.row(i);
        let n2: f64 = r.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let inv = if n2 > 0.0 { 1.0 / n2.sqrt() } else { 0.0 };
        data.extend(r.iter().map(|&v| (v as f64 * inv) as f32));
    }
    Table::new(data, t.n(), d)
}
