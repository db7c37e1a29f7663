//! What one submission of a gram job records: its dispatches of `gram.comp`, each a run of steps
//! within the device's loop budget, with barriers between them, and the push constants they
//! take; and [`in_parts`], the cut of a count into bounded parts that `matrix.rs` uses too.
//! Records into the command buffer it is given; knows nothing of the job. May touch the pipelines
//! and command buffers it is handed and the barriers of `submit.rs`; nothing else.

use crate::device::Pipeline;
use crate::submit::{barrier, bind};
use ash::vk;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct GramPush {
    pub(super) n: u32,
    pub(super) first: u32,
    pub(super) count: u32,
    pub(super) replay: u32,
}

/// Records `push.count` steps from step `push.first` into `cb`: dispatches of `groups`
/// workgroups (one a sequence) of at most `per` steps each, a barrier between two, and (with
/// `align` > 0) every step 1 + k·align starting a dispatch (fixed-point keys refresh there).
///
/// # Safety
/// `cb` is recording, and `pipeline` and `set` live until it has run.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn record_steps(
    dev: &ash::Device,
    cb: vk::CommandBuffer,
    pipeline: &Pipeline,
    set: vk::DescriptorSet,
    groups: u32,
    push: GramPush,
    per: usize,
    align: usize,
) {
    let parts = in_parts(push.first as usize, push.count as usize, per)
        .flat_map(|(first, count)| aligned_parts(first, count, align));
    for (i, (first, count)) in parts.enumerate() {
        let push = GramPush {
            first: first as u32,
            count: count as u32,
            ..push
        };
        if i > 0 {
            barrier(dev, cb);
        }
        bind(dev, cb, pipeline, set, bytemuck::bytes_of(&push));
        dev.cmd_dispatch(cb, groups, 1, 1);
    }
}

/// `count` items from `first` cut into consecutive parts of at most `per` (taken as 1 if 0),
/// each as `(its first item, its items)`: how the gram engine splits both its steps into
/// dispatches and the matrix's rows into submissions.
pub(super) fn in_parts(
    first: usize,
    count: usize,
    per: usize,
) -> impl Iterator<Item = (usize, usize)> {
    let per = per.max(1);
    (0..count)
        .step_by(per)
        .map(move |done| (first + done, per.min(count - done)))
}

/// `count` steps from `first` cut so that every step 1 + k·align (k ≥ 1) starts a part (`align`
/// 0: one part).
fn aligned_parts(first: usize, count: usize, align: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let (mut f, end) = (first, first + count);
    while f < end {
        // The next step ≡ 1 (mod align) after f (align 0: none).
        let next = (f - 1)
            .checked_div(align)
            .map_or(end, |q| q * align + align + 1);
        let e = next.min(end);
        out.push((f, e - f));
        f = e;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::aligned_parts;

    #[test]
    fn parts_start_at_every_aligned_step() {
        assert_eq!(aligned_parts(1, 10, 0), vec![(1, 10)]);
        assert_eq!(
            aligned_parts(1, 600, 256),
            vec![(1, 256), (257, 256), (513, 88)]
        );
        assert_eq!(aligned_parts(250, 10, 256), vec![(250, 7), (257, 3)]);
        assert_eq!(aligned_parts(257, 5, 256), vec![(257, 5)]);
        assert_eq!(aligned_parts(3, 9, 4), vec![(3, 2), (5, 4), (9, 3)]);
    }
}
