//! The k-means update's sums on the device (`shaders/kmeans_update.comp`), where the device has
//! `shaderFloat64`: the training rows stay on the device for the whole run (they are also the
//! assignment's queries), the host sorts the rows by cluster (a counting sort of the assignment,
//! stable: ascending rows within a cluster), and one workgroup a centroid adds its rows in
//! float64 in that order — the host update's additions in the host update's order, so the
//! centroids are the same bits either way (`tests/ivf.rs` checks it). The means and the splits
//! of empty clusters stay on the host ([`super::kmeans::finish`]): O(k·D). May touch the device
//! context, device memory, the compiled shaders and command submission.

use crate::device::{loop_budget, Buffer, Context};
use crate::error::Result;
use crate::spirv;
use crate::submit::{barrier, bind, Set, Submitter};
use crate::table::Precision;

/// Centroids a dispatch (workgroups along x).
const TILE: usize = 65_535;

/// `kmeans_update.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct UpdatePush {
    dim: u32,
    c0: u32,
    m0: u32,
    m1: u32,
    acc: u32,
}

/// Per cluster, its rows in ascending order, cluster after cluster, and where each cluster's
/// rows start (k + 1 entries): a stable counting sort of `ids` (cluster of each row, < k).
pub(crate) fn members_by_cluster(ids: &[u32], k: usize) -> (Vec<u32>, Vec<u32>) {
    let mut ranges = vec![0u32; k + 1];
    for &c in ids {
        ranges[c as usize + 1] += 1;
    }
    for c in 0..k {
        ranges[c + 1] += ranges[c];
    }
    let mut at: Vec<u32> = ranges[..k].to_vec();
    let mut members = vec![0u32; ids.len()];
    for (row, &c) in ids.iter().enumerate() {
        members[at[c as usize] as usize] = row as u32;
        at[c as usize] += 1;
    }
    (members, ranges)
}

/// The float64 sums of each cluster's rows (k × D, row-major) of the `rows` buffer (the
/// training rows, `n × d` f32), the clusters given by `ids`.
pub(crate) fn cluster_sums(
    ctx: &Context,
    rows: &Buffer,
    d: usize,
    ids: &[u32],
    k: usize,
) -> Result<Vec<f64>> {
    let (members, ranges) = members_by_cluster(ids, k);
    let (step, starts) = member_steps(ctx, d, &ranges);
    let pipe = pipeline(ctx)?;
    let mbuf = ctx.upload("k-means members", bytemuck::cast_slice(&members))?;
    let rbuf = ctx.upload("k-means ranges", bytemuck::cast_slice(&ranges))?;
    let bytes = (k * d * 8) as u64;
    let sums = Buffer::storage(ctx, "k-means sums", bytes)?;
    let set = Set::new(
        ctx,
        &[(0, rows), (1, &mbuf), (2, &rbuf), (3, &sums)],
        std::slice::from_ref(rows),
    )?;
    let dev = ctx.device();
    let mut sub = Submitter::new(ctx)?;
    for group in starts.chunks(64) {
        sub.run("k-means update", |cb| unsafe {
            record_sums(dev, cb, &pipe, set.set, (d, k), group, step);
        })?;
    }
    drop(set);
    Ok(f64_words(&ctx.download(&sums, 0, bytes)?))
}

/// Little-endian float64 words.
pub(crate) fn f64_words(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect()
}

/// The update's pipeline (`kmeans_update.comp`).
pub(crate) fn pipeline(ctx: &Context) -> Result<std::sync::Arc<crate::device::Pipeline>> {
    ctx.pipeline_for::<UpdatePush>(&spirv::KMEANS_UPDATE, Precision::Fp32, &[])
}

/// Members a dispatch takes of each cluster, and the first member of each dispatch, for the
/// clusters of `ranges` (as [`members_by_cluster`] gives them) at dimension `d`: all members at
/// once where loops are not capped; else as many as keep an invocation's loop iterations (its
/// dims × the members) within the device's budget.
pub(crate) fn member_steps(ctx: &Context, d: usize, ranges: &[u32]) -> (usize, Vec<usize>) {
    let largest = ranges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as usize;
    let per_member = d.div_ceil(128).max(1);
    let step = match ctx.caps().loop_limit {
        None => largest.max(1),
        Some(_) => ((loop_budget(ctx.caps()) as usize / per_member).saturating_sub(4)).max(1),
    };
    (step, (0..largest.max(1)).step_by(step).collect())
}

/// Records the sums' dispatches of the member starts `group` (each after the one before: a
/// start adds to the sums the previous left) for k clusters at dimension d, `set` binding the
/// rows, members, ranges and sums.
///
/// # Safety
/// `cb` is recording; what `set` names outlives its execution.
pub(crate) unsafe fn record_sums(
    dev: &ash::Device,
    cb: ash::vk::CommandBuffer,
    pipe: &crate::device::Pipeline,
    set: ash::vk::DescriptorSet,
    (d, k): (usize, usize),
    group: &[usize],
    step: usize,
) {
    for (i, &m0) in group.iter().enumerate() {
        if i > 0 {
            barrier(dev, cb);
        }
        for c0 in (0..k).step_by(TILE) {
            let push = UpdatePush {
                dim: d as u32,
                c0: c0 as u32,
                m0: m0 as u32,
                m1: (m0 + step).min(u32::MAX as usize) as u32,
                acc: (m0 > 0) as u32,
            };
            bind(dev, cb, pipe, set, bytemuck::bytes_of(&push));
            dev.cmd_dispatch(cb, TILE.min(k - c0) as u32, 1, 1);
        }
    }
}

/// Whether the update's sums run on the device: `shaderFloat64`, and the training rows fit
/// 32-bit indexing.
pub(crate) fn on_device(ctx: &Context, n: usize, d: usize) -> bool {
    ctx.caps().float64
        && (n as u64) * (d as u64) < u32::MAX as u64
        && (n as u64 * d as u64 * Precision::Fp32.bytes() as u64) <= ctx.caps().max_buffer_range
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_sort_is_stable() {
        let (m, r) = members_by_cluster(&[2, 0, 2, 1, 0, 2], 4);
        assert_eq!(r, vec![0, 2, 3, 6, 6]);
        assert_eq!(m, vec![1, 4, 3, 0, 2, 5]);
    }
}
