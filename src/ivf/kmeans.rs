//! k-means (Lloyd's algorithm) with the assignment on the device. May touch the device context, the
//! device table, the exact k-NN's resident search, the sums of `update.rs` and the host table.
//!
//! Each iteration assigns every training row to its nearest centroid by squared L2 distance on
//! the device — the exact k-NN search of [`crate::knn()`] with k = 1, the centroids uploaded as
//! the table (fp32) and the training rows as the queries: the blocked distance product and the
//! k-selection, ties to the lowest centroid — then updates the centroids **on the host**: the
//! sums of each cluster's rows in float64, divided by the count and rounded to f32 once. (The
//! update is O(N·D) additions against the assignment's O(N·k·D) multiply-adds; a device
//! reduction is the next step for large N.)
//!
//! * **Init**: `k` distinct training rows drawn by a seeded partial Fisher–Yates shuffle
//!   (Faiss's random init), or centroids given by the caller ([`KMeansOptions::init`]).
//! * **Subsampling**: more than `k × max_points_per_centroid` rows are cut to that many, drawn
//!   by the same seeded shuffle (Faiss's rule, 256 a centroid by default).
//! * **Empty clusters**: an empty cluster takes a copy of the largest cluster's centroid (the
//!   lowest index among equal sizes), and the two are pushed apart by a relative 1/1024 in
//!   alternating directions per dimension, the largest cluster's count split between them
//!   (Faiss's split).
//! * **Determinism**: the same table, k, options and device kind give the same bits: the
//!   random draws come from `seed` alone (SplitMix64), the device's keys and selection are
//!   deterministic, and the host sums run in row order.

use super::update;
use crate::device::Context;
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::knn::{knn_derived, DeviceQueries, KnnOptions, Metric, Resident};
use crate::table::{Precision, Table};

/// How [`kmeans`] runs.
#[derive(Clone, Debug)]
pub struct KMeansOptions {
    /// Lloyd iterations (assignment + update); 0 returns the initial centroids.
    pub iters: usize,
    /// Seed of the init and the subsample.
    pub seed: u64,
    /// At most `k ×` this many training rows (a seeded sample of them beyond); 0 = no limit.
    pub max_points_per_centroid: usize,
    /// Initial centroids (k × D, row-major) instead of the random sample.
    pub init: Option<Vec<f32>>,
}

impl Default for KMeansOptions {
    fn default() -> Self {
        KMeansOptions {
            iters: 20,
            seed: 1234,
            max_points_per_centroid: 256,
            init: None,
        }
    }
}

/// What [`kmeans`] found.
#[derive(Clone, Debug)]
pub struct KMeans {
    /// Clusters.
    pub k: usize,
    /// Dimension.
    pub d: usize,
    /// k × D centroids, row-major.
    pub centroids: Vec<f32>,
    /// Per iteration, the sum over the training rows of the squared distance (f32, as the
    /// device computes it, summed in float64) to the centroid each was assigned to — the
    /// objective of the centroids *entering* that iteration (Faiss records the same).
    pub objective: Vec<f64>,
    /// Rows trained on (N, or the subsample's size).
    pub trained_on: usize,
    /// Empty clusters split over all iterations.
    pub splits: usize,
    /// GPU nanoseconds of the assignments (0 without timestamps).
    pub gpu_ns: u64,
}

/// SplitMix64: a small, seeded, portable generator (the same draws on every machine).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n ≥ 1), by rejection (no modulo bias).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }
}

/// The first `m` entries of a seeded shuffle of 0..n (partial Fisher–Yates): `m` distinct
/// indices.
pub(crate) fn sample(n: usize, m: usize, rng: &mut Rng) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..n).collect();
    for i in 0..m.min(n) {
        let j = i + rng.below((n - i) as u64) as usize;
        perm.swap(i, j);
    }
    perm.truncate(m.min(n));
    perm
}

/// Assign each row of `points` (row-major, dimension `d`) to its nearest of the rows of
/// `centroids` by squared L2 distance on the device (ties to the lowest centroid): the
/// centroid index and the squared distance (f32) per row, and the GPU nanoseconds.
pub fn assign(
    ctx: &Context,
    centroids: &Table,
    points: &[f32],
    d: usize,
) -> Result<(Vec<u32>, Vec<f32>, u64)> {
    let dt = DeviceTable::upload_unchecked(ctx, centroids, Precision::Fp32)?;
    nearest(&dt, points, d, Metric::L2)
}

/// The nearest row of `dt` to each row of `points` by `metric` (k-NN with k = 1).
pub(crate) fn nearest(
    dt: &DeviceTable,
    points: &[f32],
    d: usize,
    metric: Metric,
) -> Result<(Vec<u32>, Vec<f32>, u64)> {
    let opts = KnnOptions {
        k: 1,
        metric,
        ..KnnOptions::default()
    };
    let r = knn_derived(dt, points, d, &opts)?;
    // k = 1 ≤ N: no padding, every id is a row of dt.
    let ids = r.ids.iter().map(|&i| i as u32).collect();
    Ok((ids, r.distances, r.gpu_ns))
}

/// The seeded draws of a k-means of `n` rows into `k` clusters: which rows train, and which of
/// them seed the centroids. Both come from `opts.seed` alone, so k-means of tables with the same
/// N (the sub-spaces of one set of rows) draw the same rows.
pub(crate) struct Draws {
    /// The subsample's rows, ascending (the sums then run in row order whatever the draw's
    /// order); `None` when all N rows train.
    pub(crate) rows: Option<Vec<usize>>,
    /// The `k` training rows (indices into the training set) that are the initial centroids;
    /// empty when `opts.init` gives them.
    pub(crate) init: Vec<usize>,
}

/// The draws of a k-means of `n` rows into `k` (checked: 1 ≤ k ≤ n): the subsample (more than
/// `k × max_points_per_centroid` rows are cut to that many), then the initial centroids, from
/// one SplitMix64 stream.
pub(crate) fn draws(n: usize, k: usize, opts: &KMeansOptions) -> Draws {
    let mut rng = Rng::new(opts.seed);
    let cap = if opts.max_points_per_centroid == 0 {
        n
    } else {
        k.saturating_mul(opts.max_points_per_centroid).min(n)
    };
    let rows = (cap < n).then(|| {
        let mut rows = sample(n, cap, &mut rng);
        rows.sort_unstable();
        rows
    });
    let m = rows.as_ref().map_or(n, Vec::len);
    let init = match opts.init {
        Some(_) => Vec::new(),
        None => sample(m, k, &mut rng),
    };
    Draws { rows, init }
}

/// The rows a k-means of `table` trains on: the subsample's rows of `draws`, or all of them.
pub(crate) fn training_set<'a>(table: &'a Table, draws: &Draws) -> std::borrow::Cow<'a, [f32]> {
    match &draws.rows {
        Some(rows) => rows
            .iter()
            .flat_map(|&r| table.row(r).iter().copied())
            .collect::<Vec<f32>>()
            .into(),
        None => table.data().into(),
    }
}

/// The initial centroids (k × `d`): `opts.init`, or the drawn rows of the training set.
pub(crate) fn initial(train: &[f32], d: usize, opts: &KMeansOptions, draws: &Draws) -> Vec<f32> {
    match &opts.init {
        Some(c) => c.clone(),
        None => draws
            .init
            .iter()
            .flat_map(|&r| train[r * d..(r + 1) * d].iter().copied())
            .collect(),
    }
}

/// 1 ≤ k ≤ N for a k-means of `n` rows.
pub(crate) fn check_k(n: usize, k: usize) -> Result<()> {
    if k == 0 || k > n {
        return Err(Error::Invalid(format!(
            "k-means of {n} rows into k = {k} clusters: k must be between 1 and N = {n}"
        )));
    }
    Ok(())
}

/// The checks of a k-means call: 1 ≤ k ≤ N, and initial centroids of k × D finite values.
pub(crate) fn check(table: &Table, k: usize, opts: &KMeansOptions) -> Result<()> {
    check_k(table.n(), k)?;
    if let Some(init) = &opts.init {
        if init.len() != k * table.d() {
            return Err(Error::Invalid(format!(
                "k-means init has {} values, expected k × D = {k} × {} = {}",
                init.len(),
                table.d(),
                k * table.d()
            )));
        }
        if let Some(p) = init.iter().position(|v| !v.is_finite()) {
            return Err(Error::Invalid(format!(
                "k-means init centroid {} has a non-finite value at column {}",
                p / table.d(),
                p % table.d()
            )));
        }
    }
    Ok(())
}

/// k-means of the rows of `table` into `k` clusters (see the [module](self) documentation).
/// Errors: k = 0 or k > N, a bad `init`, a nonzero row whose norm is outside what fp32
/// arithmetic handles exactly ([`crate::table::check_row_norms`]), and the device's.
pub fn kmeans(ctx: &Context, table: &Table, k: usize, opts: &KMeansOptions) -> Result<KMeans> {
    table.check_norms(Precision::Fp32)?;
    kmeans_derived(ctx, table, k, opts)
}

/// [`kmeans`] of rows this crate derived (residual sub-vectors), without the row-norm check.
pub(crate) fn kmeans_derived(
    ctx: &Context,
    table: &Table,
    k: usize,
    opts: &KMeansOptions,
) -> Result<KMeans> {
    check(table, k, opts)?;
    let (n, d) = (table.n(), table.d());
    let draws = draws(n, k, opts);
    let train = training_set(table, &draws);
    let train: &[f32] = &train;
    let m = train.len() / d;
    let mut centroids = initial(train, d, opts, &draws);
    let mut out = KMeans {
        k,
        d,
        centroids: Vec::new(),
        objective: Vec::with_capacity(opts.iters),
        trained_on: m,
        splits: 0,
        gpu_ns: 0,
    };
    if opts.iters == 0 {
        out.centroids = centroids;
        return Ok(out);
    }
    // The training rows stay on the device: the assignment's queries every iteration, and the
    // rows the device sums (with float64; else the host sums them).
    let rows = DeviceQueries::upload(ctx, train, d, Metric::L2)?;
    let device_sums = update::on_device(ctx, m, d);
    let ko = KnnOptions {
        k: 1,
        metric: Metric::L2,
        ..KnnOptions::default()
    };
    // One device table of centroids, overwritten in place each iteration, and one search set
    // up once (plan, pipelines, scratch).
    let dt =
        DeviceTable::upload_unchecked(ctx, &Table::new(centroids.clone(), k, d)?, Precision::Fp32)?;
    let search = Resident::new(&dt, &rows, &ko)?;
    for it in 0..opts.iters {
        let c = Table::new(centroids, k, d)?;
        if it > 0 {
            dt.overwrite_fp32(&c)?;
        }
        let r = search.run()?;
        // k = 1 ≤ N: no padding, every id is a centroid.
        let ids: Vec<u32> = r.ids.iter().map(|&i| i as u32).collect();
        out.gpu_ns += r.gpu_ns;
        out.objective
            .push(r.distances.iter().map(|&v| v as f64).sum());
        centroids = c.data().to_vec();
        out.splits += if device_sums {
            let sums = update::cluster_sums(ctx, rows.buffer(), d, &ids, k)?;
            finish(&mut centroids, &sums, d, &ids)
        } else {
            update(&mut centroids, train, d, &ids)
        };
    }
    out.centroids = centroids;
    Ok(out)
}

/// Relative push that separates a split centroid from the one it copies.
const SPLIT_EPS: f32 = 1.0 / 1024.0;

/// The update step: each cluster's centroid becomes the float64 mean of its rows (rounded to
/// f32 once); each empty cluster then splits the largest one. Returns the splits made.
pub(crate) fn update(centroids: &mut [f32], train: &[f32], d: usize, ids: &[u32]) -> usize {
    let k = centroids.len() / d;
    let mut sums = vec![0f64; k * d];
    for (row, &c) in train.chunks_exact(d).zip(ids) {
        let c = c as usize;
        for (s, &v) in sums[c * d..(c + 1) * d].iter_mut().zip(row) {
            *s += v as f64;
        }
    }
    finish(centroids, &sums, d, ids)
}

/// The rest of the update from the clusters' float64 sums (k × D, each cluster's rows added in
/// ascending row order): the means, rounded to f32 once, then the splits of empty clusters.
pub(crate) fn finish(centroids: &mut [f32], sums: &[f64], d: usize, ids: &[u32]) -> usize {
    let k = centroids.len() / d;
    let mut counts = vec![0usize; k];
    for &c in ids {
        counts[c as usize] += 1;
    }
    for c in 0..k {
        if counts[c] > 0 {
            let inv = counts[c] as f64;
            for j in 0..d {
                centroids[c * d + j] = (sums[c * d + j] / inv) as f32;
            }
        }
    }
    let mut splits = 0;
    for c in 0..k {
        if counts[c] > 0 {
            continue;
        }
        // The largest cluster, lowest index on ties (it has ≥ 2 rows: k ≤ N rows in k clusters
        // with one empty leave one with two or more).
        let big = (0..k).max_by(|&a, &b| counts[a].cmp(&counts[b]).then(b.cmp(&a)));
        let Some(big) = big.filter(|&b| counts[b] >= 2) else {
            break;
        };
        for j in 0..d {
            let v = centroids[big * d + j];
            let (up, down) = (v * (1.0 + SPLIT_EPS), v * (1.0 - SPLIT_EPS));
            let (a, b) = if j % 2 == 0 { (up, down) } else { (down, up) };
            centroids[c * d + j] = a;
            centroids[big * d + j] = b;
        }
        counts[c] = counts[big] / 2;
        counts[big] -= counts[c];
        splits += 1;
    }
    splits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_is_distinct_and_seeded() {
        let a = sample(100, 10, &mut Rng::new(7));
        let b = sample(100, 10, &mut Rng::new(7));
        assert_eq!(a, b);
        let mut s = a.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), 10);
        assert!(a.iter().all(|&i| i < 100));
        assert_ne!(a, sample(100, 10, &mut Rng::new(8)));
        assert_eq!(sample(3, 5, &mut Rng::new(1)).len(), 3);
    }

    #[test]
    fn update_means_and_splits_the_largest() {
        // Rows 0,1,2 in cluster 0, row 3 in cluster 2, cluster 1 empty.
        let train = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 10.0, 10.0];
        let mut c = vec![0.0; 6];
        let splits = update(&mut c, &train, 2, &[0, 0, 0, 2]);
        assert_eq!(splits, 1);
        // Cluster 0's mean (3, 4) split into (3·(1−ε), 4·(1+ε)) and (3·(1+ε), 4·(1−ε)).
        let e = SPLIT_EPS;
        assert_eq!(&c[0..2], &[3.0 * (1.0 - e), 4.0 * (1.0 + e)]);
        assert_eq!(&c[2..4], &[3.0 * (1.0 + e), 4.0 * (1.0 - e)]);
        assert_eq!(&c[4..6], &[10.0, 10.0]);
    }
}
