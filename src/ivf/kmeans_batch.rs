//! k-means of the M sub-spaces of one set of rows in lockstep (the product quantizer's
//! training): every sub-space's k-means as [`kmeans`](super::kmeans::kmeans) of its sub-vectors
//! alone would run it — the same draws, assignments, sums, means and splits, so the same bits —
//! but all M recorded together: an iteration is one submission of the M assignments (the exact
//! k-NN with k = 1, recorded by [`Prepared`]) and one of the M updates' float64 sums
//! (`update.rs`), where training each sub-space alone costs about eight submissions and waits a
//! sub-space an iteration (uploads, the search, its download, the sums' buffers). The host keeps
//! what it did: the counting sort of each assignment, the means and the splits of empty
//! clusters. The coarse quantizers' k-means runs the same way, one "sub-space" of all D
//! ([`kmeans_recorded`]). May touch the device context, device memory, the device table, the
//! exact k-NN's recorded search, command submission, `kmeans.rs`, `update.rs` and the IVF
//! read-back helpers.

use super::kmeans::{
    check, check_k, draws, initial, kmeans_derived, training_set, update, KMeans, KMeansOptions,
};
use super::resident::{record_readback, words};
use super::update::{
    f64_words, member_steps, members_by_cluster, on_device, pipeline, record_sums,
};
use crate::device::{Context, Pipeline};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::knn::{KeptScratch, KnnOptions, Metric, Prepared, MAX_QUERY_TILE};
use crate::memory::{memory_barrier, Buffer};
use crate::submit::{barrier, Set, Submitter};
use crate::table::{check_finite, Precision, Table};
use ash::vk::{AccessFlags as A, PipelineStageFlags as S};

/// The checks of a quantizer's shape: M ≥ 1 divides D ≥ 1.
pub(crate) fn check_shape(d: usize, m: usize) -> Result<()> {
    if m == 0 || d == 0 {
        return Err(Error::Invalid(format!(
            "product quantizer of D = {d} into M = {m} sub-spaces: both must be ≥ 1"
        )));
    }
    if !d.is_multiple_of(m) {
        return Err(Error::Invalid(format!(
            "product quantizer: M = {m} sub-spaces do not divide D = {d} (D % M must be 0)"
        )));
    }
    Ok(())
}

/// k-means of each of the `m` sub-spaces of `rows` (n × `d`, row-major; sub-space s is dims
/// `s · d / m ..  (s + 1) · d / m`) into `k` clusters: entry s is, bit for bit, what
/// [`kmeans`](super::kmeans::kmeans) of sub-space s's sub-vectors alone returns with `opts`
/// (`opts.init` is not used: it is for D-dimensional centroids) — centroids, objective, rows
/// trained on, splits — except `gpu_ns`, which is the GPU time of the assignments of all
/// sub-spaces together (they share submissions), the same in every entry. The sub-spaces run in
/// lockstep, two submissions an iteration for all of them; where one query tile of the k-NN
/// cannot hold a sub-space's training rows (a device's scratch budget), each sub-space trains
/// alone instead (the same results). The rows are not checked for norms (they are usually
/// residuals this crate derived). Errors: M does not divide D, a length that is not n × D,
/// k = 0 or k > n, a non-finite value, the device's.
pub fn kmeans_subspaces(
    ctx: &Context,
    rows: &[f32],
    d: usize,
    m: usize,
    k: usize,
    opts: &KMeansOptions,
) -> Result<Vec<KMeans>> {
    check_shape(d, m)?;
    if !rows.len().is_multiple_of(d) {
        return Err(Error::Invalid(format!(
            "k-means of sub-spaces: {} values are not rows of dimension {d}",
            rows.len()
        )));
    }
    let n = rows.len() / d;
    check_k(n, k)?;
    check_finite(rows, d)?;
    let dsub = d / m;
    let opts = KMeansOptions {
        init: None,
        ..opts.clone()
    };
    // The draws depend on N, k and the seed only: one draw serves every sub-space.
    let draws = draws(n, k, &opts);
    let chosen: Vec<usize> = draws.rows.clone().unwrap_or_else(|| (0..n).collect());
    let train: Vec<Vec<f32>> = (0..m)
        .map(|s| {
            chosen
                .iter()
                .flat_map(|&r| {
                    rows[r * d + s * dsub..r * d + (s + 1) * dsub]
                        .iter()
                        .copied()
                })
                .collect()
        })
        .collect();
    let init: Vec<Vec<f32>> = train
        .iter()
        .map(|t| {
            draws
                .init
                .iter()
                .flat_map(|&r| t[r * dsub..(r + 1) * dsub].iter().copied())
                .collect()
        })
        .collect();
    let started = |centroids: Vec<f32>| KMeans {
        k,
        d: dsub,
        centroids,
        objective: Vec::with_capacity(opts.iters),
        trained_on: chosen.len(),
        splits: 0,
        gpu_ns: 0,
    };
    let mut out: Vec<KMeans> = init.into_iter().map(started).collect();
    if opts.iters == 0 {
        return Ok(out);
    }
    let parts: Vec<&[f32]> = train.iter().map(Vec::as_slice).collect();
    if !lockstep(ctx, &parts, dsub, &opts, &mut out)? {
        return alone(ctx, rows, (d, m, k), &opts);
    }
    Ok(out)
}

/// [`kmeans`](super::kmeans::kmeans) of `table` (the same checks, the same bits), its
/// iterations recorded as [`kmeans_subspaces`] records a sub-space's: two submissions an
/// iteration (where the recorded search cannot hold the training rows, `kmeans` itself). The
/// coarse quantizers train so.
pub(crate) fn kmeans_recorded(
    ctx: &Context,
    table: &Table,
    k: usize,
    opts: &KMeansOptions,
) -> Result<KMeans> {
    table.check_norms(Precision::Fp32)?;
    check(table, k, opts)?;
    let d = table.d();
    let draws = draws(table.n(), k, opts);
    let train = training_set(table, &draws);
    let mut out = [KMeans {
        k,
        d,
        centroids: initial(&train, d, opts, &draws),
        objective: Vec::with_capacity(opts.iters),
        trained_on: train.len() / d,
        splits: 0,
        gpu_ns: 0,
    }];
    if opts.iters > 0 && !lockstep(ctx, &[&train], d, opts, &mut out)? {
        return kmeans_derived(ctx, table, k, opts);
    }
    let [out] = out;
    Ok(out)
}

/// Sub-space `s` (dims `s · dsub ..`) of every row of `rows` (rows of `d`).
pub(crate) fn sub_vectors(rows: &[f32], d: usize, dsub: usize, s: usize) -> Vec<f32> {
    rows.chunks_exact(d)
        .flat_map(|r| r[s * dsub..(s + 1) * dsub].iter().copied())
        .collect()
}

/// Threads that train sub-spaces at once where they train alone.
const ALONE_THREADS: usize = 8;

/// Each sub-space's k-means alone ([`kmeans_derived`] of its sub-vectors; `dmk`: D, M and k),
/// on up to [`ALONE_THREADS`] threads of the one context (each the same computation as alone).
fn alone(
    ctx: &Context,
    rows: &[f32],
    dmk: (usize, usize, usize),
    opts: &KMeansOptions,
) -> Result<Vec<KMeans>> {
    let (d, m, k) = dmk;
    let (n, dsub) = (rows.len() / d, d / m);
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1)
        .clamp(1, ALONE_THREADS)
        .min(m);
    let mut parts: Vec<Option<Result<KMeans>>> = (0..m).map(|_| None).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let next = &next;
                scope.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let s = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if s >= m {
                            return done;
                        }
                        let trained = Table::new(sub_vectors(rows, d, dsub, s), n, dsub)
                            .and_then(|sub| kmeans_derived(ctx, &sub, k, opts));
                        done.push((s, trained));
                    }
                })
            })
            .collect();
        for h in handles {
            let done = h.join().expect("a k-means training thread panicked");
            for (s, r) in done {
                parts[s] = Some(r);
            }
        }
    });
    parts
        .into_iter()
        .map(|p| p.expect("every sub-space trained"))
        .collect()
}

/// Device buffers holding `parts` (f32 each), uploaded through one staging buffer in one
/// submission.
fn upload_all(ctx: &Context, what: &'static str, parts: &[&[f32]]) -> Result<Vec<Buffer>> {
    let total: usize = parts.iter().map(|p| p.len() * 4).sum();
    let mut staging = Buffer::host_upload(ctx, "staging upload", total as u64)?;
    let mut at = 0;
    let mut regions = Vec::with_capacity(parts.len());
    for p in parts {
        let bytes: &[u8] = bytemuck::cast_slice(p);
        staging.mapped()[at..at + bytes.len()].copy_from_slice(bytes);
        regions.push((at as u64, bytes.len() as u64));
        at += bytes.len();
    }
    let bufs = regions
        .iter()
        .map(|&(_, len)| Buffer::storage(ctx, what, len))
        .collect::<Result<Vec<_>>>()?;
    let dev = ctx.device();
    ctx.one_shot(|cb| unsafe {
        for (b, &(from, len)) in bufs.iter().zip(&regions) {
            if len > 0 {
                let region = ash::vk::BufferCopy::default().src_offset(from).size(len);
                dev.cmd_copy_buffer(cb, staging.buffer, b.buffer, &[region]);
            }
        }
    })?;
    Ok(bufs)
}

/// Earlier submissions' shaders read or wrote what the transfers after this overwrite.
unsafe fn before_transfers(dev: &ash::Device, cb: ash::vk::CommandBuffer) {
    memory_barrier(
        dev,
        cb,
        (S::COMPUTE_SHADER, A::SHADER_READ | A::SHADER_WRITE),
        (S::TRANSFER, A::TRANSFER_WRITE),
    );
}

/// The iterations of every sub-space's k-means in lockstep, from the centroids in `out` (one
/// [`KMeans`] a sub-space, `train[s]` its training rows at dimension `dsub`). `false` (nothing
/// run) where a sub-space's rows do not fit the k-NN's recorded search.
fn lockstep(
    ctx: &Context,
    train: &[&[f32]],
    dsub: usize,
    opts: &KMeansOptions,
    out: &mut [KMeans],
) -> Result<bool> {
    let m = train.len();
    let k = out[0].k;
    let nt = train[0].len() / dsub;
    // Query tiles as the k-NN cuts a call (from the front, the largest tile it makes).
    let tiles: Vec<(usize, usize)> = (0..nt)
        .step_by(MAX_QUERY_TILE)
        .map(|q0| (q0, MAX_QUERY_TILE.min(nt - q0)))
        .collect();
    let mut parts: Vec<&[f32]> = train.to_vec();
    if tiles.len() > 1 {
        for t in train {
            parts.extend(
                tiles
                    .iter()
                    .map(|&(q0, qn)| &t[q0 * dsub..(q0 + qn) * dsub]),
            );
        }
    }
    let bufs = upload_all(ctx, "k-means rows", &parts)?;
    let (rows, tile_bufs) = bufs.split_at(m);
    let queries = |s: usize, t: usize| match tiles.len() {
        1 => &rows[s],
        nt => &tile_bufs[s * nt + t],
    };
    let tables = out
        .iter()
        .map(|o| {
            let c = Table::new(o.centroids.clone(), k, dsub)?;
            DeviceTable::upload_unchecked(ctx, &c, Precision::Fp32)
        })
        .collect::<Result<Vec<_>>>()?;
    let ko = KnnOptions {
        k: 1,
        metric: Metric::L2,
        ..KnnOptions::default()
    };
    let mut kept: Vec<KeptScratch> = (0..m * tiles.len())
        .map(|_| KeptScratch::default())
        .collect();
    let mut preps = Vec::with_capacity(kept.len());
    for (i, kept) in kept.iter_mut().enumerate() {
        let (s, t) = (i / tiles.len(), i % tiles.len());
        let gen = super::scan::next_serial();
        match Prepared::new(&tables[s], queries(s, t), gen, tiles[t].1, &ko, kept)? {
            Some(p) if p.ke() == 1 => preps.push(p),
            _ => return Ok(false),
        }
    }
    // The read-back: per (sub-space, tile) its keys then its ids, tile after tile.
    let down = Buffer::host_download(ctx, "k-means read-back", (2 * m * nt * 4) as u64)?;
    let copies: Vec<(&Buffer, u64, u64, u64)> = preps
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (s, t) = (i / tiles.len(), i % tiles.len());
            let at = 2 * (s * nt + tiles[t].0);
            (p.packed(), 0, (at * 4) as u64, (2 * tiles[t].1 * 4) as u64)
        })
        .collect();
    // The centroids and their inverse norms, written by the host, copied in each iteration.
    let per_table = (k * dsub + k) * 4;
    let mut cent_up = Buffer::host_upload(ctx, "k-means centroids", (m * per_table) as u64)?;
    // The update's buffers (float64 sums on the device).
    let mut upd = DeviceSums::new(ctx, rows, (nt, k, dsub))?;
    let pipe = pipeline(ctx)?;
    let dev = ctx.device();
    let mut sub = Submitter::new(ctx)?;
    for it in 0..opts.iters {
        if it > 0 {
            write_centroids(&mut cent_up, out, per_table, dsub)?;
        }
        // The M assignments: one submission.
        let mut failed = None;
        let gpu_ns = sub.run("k-means assignments", |cb| unsafe {
            if it > 0 {
                before_transfers(dev, cb);
                for (s, t) in tables.iter().enumerate() {
                    t.record_overwrite_fp32(cb, &cent_up, (s * per_table) as u64);
                }
                barrier(dev, cb);
            }
            for p in &preps {
                if let Err(e) = p.record(cb) {
                    failed.get_or_insert(e);
                }
            }
            record_readback(dev, cb, &down, &copies);
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let ids = read_assignments(&down, &tiles, gpu_ns, out)?;
        // The M updates: the sums in one submission, the means and splits on the host.
        match &mut upd {
            Some(sums) => sums.update(ctx, &mut sub, &pipe, &ids, out)?,
            None => {
                for (s, o) in out.iter_mut().enumerate() {
                    o.splits += update(&mut o.centroids, train[s], dsub, &ids[s]);
                }
            }
        }
    }
    Ok(true)
}

/// The centroids of every sub-space and their inverse norms into the upload buffer, `per_table`
/// bytes a sub-space, for the next iteration's assignments.
fn write_centroids(
    cent_up: &mut Buffer,
    out: &[KMeans],
    per_table: usize,
    dsub: usize,
) -> Result<()> {
    let map = cent_up.mapped();
    for (s, o) in out.iter().enumerate() {
        let inv = Table::new(o.centroids.clone(), o.k, dsub)?.inverse_norms();
        let at = s * per_table;
        let c: &[u8] = bytemuck::cast_slice(&o.centroids);
        map[at..at + c.len()].copy_from_slice(c);
        let iv: &[u8] = bytemuck::cast_slice(&inv);
        map[at + c.len()..at + c.len() + iv.len()].copy_from_slice(iv);
    }
    Ok(())
}

/// The assignments read back from `down` (per sub-space and query tile, its keys then its ids):
/// each sub-space's objective (its L2 keys, summed in row order as `kmeans` sums them) and GPU
/// time into `out`; returns each sub-space's cluster of every row.
fn read_assignments(
    down: &Buffer,
    tiles: &[(usize, usize)],
    gpu_ns: u64,
    out: &mut [KMeans],
) -> Result<Vec<Vec<u32>>> {
    let nt: usize = tiles.iter().map(|t| t.1).sum();
    let mut ids: Vec<Vec<u32>> = Vec::with_capacity(out.len());
    for (s, o) in out.iter_mut().enumerate() {
        let k = o.k;
        let (mut keys, mut sid) = (Vec::with_capacity(nt), Vec::with_capacity(nt));
        for &(q0, qn) in tiles {
            let w = words(down, 2 * (s * nt + q0), 2 * qn);
            keys.extend(w[..qn].iter().map(|&b| f32::from_bits(b)));
            sid.extend_from_slice(&w[qn..]);
        }
        let objective: f64 = keys.iter().map(|&v| v as f64).sum();
        if let Some(&bad) = sid.iter().find(|&&c| c as usize >= k) {
            return Err(Error::Invalid(format!(
                "internal: a k-means assignment to centroid {bad} of {k}"
            )));
        }
        o.objective.push(objective);
        o.gpu_ns += gpu_ns;
        ids.push(sid);
    }
    Ok(ids)
}

/// The update's float64 sums on the device, for every sub-space: its members by cluster, the
/// clusters' ranges, the sums, their descriptor sets, and the host's buffers each way.
struct DeviceSums {
    /// First, so dropped before the buffers they name.
    sets: Vec<Set>,
    members: Vec<Buffer>,
    ranges: Vec<Buffer>,
    sums: Vec<Buffer>,
    up: Buffer,
    down: Buffer,
    /// Training rows, centroids and dimension of a sub-space.
    shape: (usize, usize, usize),
}

impl DeviceSums {
    /// The buffers for the sub-spaces whose training rows are `rows` (`nt` × `dsub`, `k`
    /// centroids each), or `None` where the sums run on the host ([`on_device`]).
    fn new(
        ctx: &Context,
        rows: &[Buffer],
        (nt, k, dsub): (usize, usize, usize),
    ) -> Result<Option<DeviceSums>> {
        if !on_device(ctx, nt, dsub) {
            return Ok(None);
        }
        let m = rows.len();
        let each = |what: &'static str, bytes: usize| {
            (0..m)
                .map(|_| Buffer::storage(ctx, what, bytes as u64))
                .collect::<Result<Vec<_>>>()
        };
        let members = each("k-means members", nt * 4)?;
        let ranges = each("k-means ranges", (k + 1) * 4)?;
        let sums = each("k-means sums", k * dsub * 8)?;
        let up = Buffer::host_upload(ctx, "k-means members", (m * (nt + k + 1) * 4) as u64)?;
        let down = Buffer::host_download(ctx, "k-means sums", (m * k * dsub * 8) as u64)?;
        let sets = (0..m)
            .map(|s| {
                Set::new(
                    ctx,
                    &[
                        (0, &rows[s]),
                        (1, &members[s]),
                        (2, &ranges[s]),
                        (3, &sums[s]),
                    ],
                    std::slice::from_ref(&rows[s]),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(DeviceSums {
            sets,
            members,
            ranges,
            sums,
            up,
            down,
            shape: (nt, k, dsub),
        }))
    }

    /// The M updates: the sums in one submission, the means and splits on the host.
    fn update(
        &mut self,
        ctx: &Context,
        sub: &mut Submitter,
        pipe: &Pipeline,
        ids: &[Vec<u32>],
        out: &mut [KMeans],
    ) -> Result<()> {
        let (nt, k, dsub) = self.shape;
        let m = ids.len();
        let dev = ctx.device();
        let mut steps = Vec::with_capacity(m);
        let map = self.up.mapped();
        for (s, sid) in ids.iter().enumerate() {
            let (mem, ran) = members_by_cluster(sid, k);
            steps.push(member_steps(ctx, dsub, &ran));
            let at = s * (nt + k + 1) * 4;
            map[at..at + nt * 4].copy_from_slice(bytemuck::cast_slice(&mem));
            map[at + nt * 4..at + (nt + k + 1) * 4].copy_from_slice(bytemuck::cast_slice(&ran));
        }
        let (up, sums_down) = (&self.up, &self.down);
        sub.run("k-means updates", |cb| unsafe {
            before_transfers(dev, cb);
            for s in 0..m {
                let at = (s * (nt + k + 1) * 4) as u64;
                let copy = |dst: &Buffer, from: u64, size: u64| {
                    let region = ash::vk::BufferCopy::default().src_offset(from).size(size);
                    dev.cmd_copy_buffer(cb, up.buffer, dst.buffer, &[region]);
                };
                copy(&self.members[s], at, (nt * 4) as u64);
                copy(&self.ranges[s], at + (nt * 4) as u64, ((k + 1) * 4) as u64);
            }
            barrier(dev, cb);
            for (s, (step, starts)) in steps.iter().enumerate() {
                record_sums(dev, cb, pipe, self.sets[s].set, (dsub, k), starts, *step);
            }
            let bytes = (k * dsub * 8) as u64;
            let back: Vec<(&Buffer, u64, u64, u64)> = self
                .sums
                .iter()
                .enumerate()
                .map(|(s, b)| (b, 0, s as u64 * bytes, bytes))
                .collect();
            record_readback(dev, cb, sums_down, &back);
        })?;
        let bytes = k * dsub * 8;
        for (s, o) in out.iter_mut().enumerate() {
            let got = f64_words(&sums_down.mapped_bytes()[s * bytes..(s + 1) * bytes]);
            o.splits += super::kmeans::finish(&mut o.centroids, &got, dsub, &ids[s]);
        }
        Ok(())
    }
}
