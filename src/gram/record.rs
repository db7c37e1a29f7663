//! What one submission of a gram job records: its dispatches of `gram.comp`, each a run of steps
//! within the device's loop budget, with barriers between them, and the push constants they
//! take. Records into the command buffer it is given; knows nothing of the job.

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
    let (first, count) = (push.first as usize, push.count as usize);
    let mut done = 0;
    while done < count {
        let c = per.min(count - done);
        let push = GramPush {
            first: (first + done) as u32,
            count: c as u32,
            ..push
        };
        if done > 0 {
            barrier(dev, cb);
        }
        bind(dev, cb, pipeline, set, bytemuck::bytes_of(&push));
        dev.cmd_dispatch(cb, groups, 1, 1);
        done += c;
    }
}
