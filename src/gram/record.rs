//! What one submission of a gram job records: its dispatches of `gram.comp`, each a run of steps
//! within the device's loop budget, with barriers between them, and the push constants they
//! take. Touches the job's command buffer and batch progress only.

use super::GramJob;
use crate::error::Result;
use crate::submit::{barrier, bind};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct GramPush {
    pub(super) n: u32,
    pub(super) first: u32,
    pub(super) count: u32,
    pub(super) replay: u32,
}

impl GramJob {
    /// One submission of `count` steps from step `first` (`replay`: picks read from the
    /// sequences buffer, for [`GramJob::resume`]); its GPU ns.
    pub(super) fn dispatch(&mut self, first: usize, count: usize, replay: bool) -> Result<u64> {
        self.batch.check_live()?;
        let push = GramPush {
            n: self.gram.table.n() as u32,
            first: first as u32,
            count: count as u32,
            replay: replay as u32,
        };
        let what = format!(
            "gram steps {first}..{} of a batch of {}",
            first + count - 1,
            self.batch.starts().len()
        );
        let ctx = self.gram.table.context().clone();
        let dev = ctx.device().clone();
        let (p, set, groups) = (
            &self.pipeline,
            self.set.set,
            self.batch.starts().len() as u32,
        );
        let per = match self.opts.steps_per_dispatch {
            0 if crate::device::is_cpu_device(ctx.caps()) => 1,
            0 => count,
            k => k,
        }
        .min(self.max_per_dispatch);
        let waited = self.sub.run(&what, |cb| unsafe {
            let mut done = 0;
            while done < count {
                let c = per.min(count - done);
                let push = GramPush {
                    first: (first + done) as u32,
                    count: c as u32,
                    ..push
                };
                if done > 0 {
                    barrier(&dev, cb);
                }
                bind(&dev, cb, p, set, bytemuck::bytes_of(&push));
                dev.cmd_dispatch(cb, groups, 1, 1);
                done += c;
            }
        });
        self.batch.settle(&what, waited)
    }
}
