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
/// workgroups (one a sequence) of at most `per` steps each, a barrier between two.
///
/// # Safety
/// `cb` is recording, and `pipeline` and `set` live until it has run.
pub(super) unsafe fn record_steps(
    dev: &ash::Device,
    cb: vk::CommandBuffer,
    pipeline: &Pipeline,
    set: vk::DescriptorSet,
    groups: u32,
    push: GramPush,
    per: usize,
) {
    for (i, (first, count)) in in_parts(push.first as usize, push.count as usize, per).enumerate() {
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
