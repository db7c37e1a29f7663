//! Command submission: one-off submissions ([`Context::one_shot`]), the memory barrier between
//! dispatches, descriptor sets ([`Set`]), timed submissions one or several in flight
//! ([`Submitter`]), and the binding of a pipeline with its push constants ([`bind`]).
//! It may touch the device context and its pipelines, device memory and [`crate::error`]; no
//! engine.

use crate::device::{Context, Pipeline, BINDINGS, G_SLABS, SINGLE_BINDINGS};
use crate::error::{Error, Result, VkContext};
use crate::memory::{memory_barrier, Buffer};
use ash::vk;

/// A command buffer and the command pool it alone was allocated from (not `Copy`: its one
/// owner frees it with [`Context::free_command_buffer`]).
pub(crate) struct CommandBuffer {
    pool: vk::CommandPool,
    pub(crate) cb: vk::CommandBuffer,
}

/// A recorded-and-submitted command buffer with its fence: the unit of one-off transfers.
impl Context {
    /// Record `f` into a fresh command buffer, submit it and wait for it.
    pub(crate) fn one_shot(&self, f: impl FnOnce(vk::CommandBuffer)) -> Result<()> {
        let dev = self.device();
        let owned = self.alloc_command_buffer()?;
        let cb = owned.cb;
        let fence = match unsafe { dev.create_fence(&vk::FenceCreateInfo::default(), None) } {
            Ok(f) => f,
            Err(e) => {
                self.free_command_buffer(&owned);
                return Err(Error::Vulkan {
                    call: "vkCreateFence",
                    result: e,
                });
            }
        };
        let run = (|| {
            unsafe {
                dev.begin_command_buffer(
                    cb,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                )
            }
            .vk("vkBeginCommandBuffer")?;
            f(cb);
            unsafe { dev.end_command_buffer(cb) }.vk("vkEndCommandBuffer")?;
            self.submit(cb, fence)?;
            self.wait(fence, "a transfer")
        })();
        unsafe { dev.destroy_fence(fence, None) };
        self.free_command_buffer(&owned);
        run
    }

    /// A command buffer in a command pool of its own: Vulkan asks a pool (and so every command
    /// buffer allocated from it) to be used by one thread at a time, and a context is used from
    /// several (one context shared by threads, a job stepping on a thread of its own), while a
    /// command buffer belongs to one owner. Free it with [`Context::free_command_buffer`].
    pub(crate) fn alloc_command_buffer(&self) -> Result<CommandBuffer> {
        let dev = self.device();
        let pool = unsafe {
            dev.create_command_pool(
                &vk::CommandPoolCreateInfo::default()
                    .queue_family_index(self.inner.queue_family)
                    .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                None,
            )
        }
        .vk("vkCreateCommandPool")?;
        let v = unsafe {
            dev.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )
        };
        match v {
            Ok(v) => Ok(CommandBuffer { pool, cb: v[0] }),
            Err(e) => {
                unsafe { dev.destroy_command_pool(pool, None) };
                Err(Error::Vulkan {
                    call: "vkAllocateCommandBuffers",
                    result: e,
                })
            }
        }
    }

    /// Frees `c` with its pool (its owner calls it once, when done with it).
    pub(crate) fn free_command_buffer(&self, c: &CommandBuffer) {
        unsafe { self.device().destroy_command_pool(c.pool, None) };
    }

    pub(crate) fn submit(&self, cb: vk::CommandBuffer, fence: vk::Fence) -> Result<()> {
        let cbs = [cb];
        let info = [vk::SubmitInfo::default().command_buffers(&cbs)];
        let q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        crate::device::OpCounters::bump(&self.inner.ops.submissions);
        unsafe { self.device().queue_submit(*q, &info, fence) }.vk("vkQueueSubmit")
    }

    /// Wait for `fence`; `what` names the work in a device-lost error.
    pub(crate) fn wait(&self, fence: vk::Fence, what: &str) -> Result<()> {
        unsafe { self.device().wait_for_fences(&[fence], true, u64::MAX) }.map_err(|e| {
            if e == vk::Result::ERROR_DEVICE_LOST {
                Error::DeviceLost(what.to_string())
            } else {
                Error::Vulkan {
                    call: "vkWaitForFences",
                    result: e,
                }
            }
        })
    }
}

/// A transfer/compute → compute memory barrier: everything written before is visible after.
pub(crate) unsafe fn barrier(dev: &ash::Device, cb: vk::CommandBuffer) {
    memory_barrier(
        dev,
        cb,
        (
            vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
        ),
        (
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
        ),
    );
}

/// A descriptor pool with one set of the context's layout, freed on drop.
pub(crate) struct Set {
    ctx: Context,
    pool: vk::DescriptorPool,
    pub(crate) set: vk::DescriptorSet,
}

impl Set {
    /// Allocate a set and write `singles` (binding, buffer) and the G slabs (binding 8; unused
    /// array entries repeat slab 0 so every descriptor is valid; no slabs: binding 8 is left
    /// unwritten, for pipelines that do not use it).
    pub(crate) fn new(ctx: &Context, singles: &[(u32, &Buffer)], slabs: &[Buffer]) -> Result<Set> {
        let dev = ctx.device();
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: BINDINGS,
        }];
        let pool = unsafe {
            dev.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(1)
                    .pool_sizes(&sizes),
                None,
            )
        }
        .vk("vkCreateDescriptorPool")?;
        crate::device::OpCounters::bump(&ctx.inner.ops.descriptor_sets);
        let mut me = Set {
            ctx: ctx.clone(),
            pool,
            set: vk::DescriptorSet::null(),
        };
        let layouts = [ctx.inner.set_layout];
        me.set = unsafe {
            dev.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(pool)
                    .set_layouts(&layouts),
            )
        }
        .vk("vkAllocateDescriptorSets")?[0];
        let info = |b: &Buffer| {
            vk::DescriptorBufferInfo::default()
                .buffer(b.buffer)
                .offset(0)
                .range(vk::WHOLE_SIZE)
        };
        let single_infos: Vec<[vk::DescriptorBufferInfo; 1]> =
            singles.iter().map(|(_, b)| [info(b)]).collect();
        let slab_infos: Vec<vk::DescriptorBufferInfo> = match slabs.first() {
            Some(first) => (0..G_SLABS as usize)
                .map(|i| info(slabs.get(i).unwrap_or(first)))
                .collect(),
            None => Vec::new(),
        };
        let mut writes: Vec<_> = singles
            .iter()
            .zip(&single_infos)
            .map(|((binding, _), i)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(me.set)
                    .dst_binding(*binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(i)
            })
            .collect();
        if !slabs.is_empty() {
            writes.push(
                vk::WriteDescriptorSet::default()
                    .dst_set(me.set)
                    .dst_binding(SINGLE_BINDINGS)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(&slab_infos),
            );
        }
        unsafe { dev.update_descriptor_sets(&writes, &[]) };
        Ok(me)
    }
}

impl Drop for Set {
    fn drop(&mut self) {
        unsafe { self.ctx.device().destroy_descriptor_pool(self.pool, None) };
    }
}

/// How long a [`Submitter::with_mark`] submitter polls its fence before a sleeping wait.
const POLL_FENCE: std::time::Duration = std::time::Duration::from_millis(3);

/// A command buffer with its fence and timestamp pair: timed submissions, one in flight at a
/// time. [`Submitter::run`] submits and waits; [`Submitter::submit`] and [`Submitter::wait`]
/// split the two, so a job can keep several submitters in flight (the scan keeps two, recording
/// the next chunk while the device runs this one). Dropping a submitter waits for its work.
pub(crate) struct Submitter {
    ctx: Context,
    cb: CommandBuffer,
    fence: vk::Fence,
    query_pool: vk::QueryPool,
    /// Submitted and not yet waited for.
    pending: bool,
    /// Whether each submission writes a timestamp between its start and its end
    /// ([`Submitter::with_mark`]).
    marked: bool,
    /// GPU nanoseconds from the start of the last submission waited for to its mark.
    mark_ns: u64,
    /// Wall nanoseconds the host has spent in this submitter's queue submissions and fence
    /// waits, all calls together ([`Submitter::busy_ns`]).
    busy_ns: u64,
}

/// The middle timestamp of a [`Submitter::with_mark`] submission, written where the recording
/// calls [`Mark::write`] (exactly once a submission).
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    query_pool: vk::QueryPool,
}

impl Mark {
    /// Writes the mark after the commands recorded so far.
    ///
    /// # Safety
    /// `cb` is the submitter's command buffer, recording.
    pub(crate) unsafe fn write(self, dev: &ash::Device, cb: vk::CommandBuffer) {
        if self.query_pool != vk::QueryPool::null() {
            dev.cmd_write_timestamp(
                cb,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.query_pool,
                2,
            );
        }
    }
}

impl Submitter {
    /// A submitter on `ctx`, with a timestamp pair when the device has timestamps.
    pub(crate) fn new(ctx: &Context) -> Result<Submitter> {
        Self::make(ctx, false)
    }

    /// A submitter whose every submission also writes a middle timestamp where its recording
    /// calls [`Mark::write`] (which it must, once a submission): [`Submitter::mark_ns`] splits
    /// the GPU time there. Made for short, latency-bound work (a search call): its waits poll
    /// the fence for up to 3 ms before sleeping (but on a CPU device).
    pub(crate) fn with_mark(ctx: &Context) -> Result<Submitter> {
        Self::make(ctx, true)
    }

    fn make(ctx: &Context, marked: bool) -> Result<Submitter> {
        let dev = ctx.device();
        let cb = ctx.alloc_command_buffer()?;
        let mut me = Submitter {
            ctx: ctx.clone(),
            cb,
            fence: vk::Fence::null(),
            query_pool: vk::QueryPool::null(),
            pending: false,
            marked,
            mark_ns: 0,
            busy_ns: 0,
        };
        me.fence = unsafe { dev.create_fence(&vk::FenceCreateInfo::default(), None) }
            .vk("vkCreateFence")?;
        if ctx.caps().timestamps {
            me.query_pool = unsafe {
                dev.create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(if marked { 3 } else { 2 }),
                    None,
                )
            }
            .vk("vkCreateQueryPool")?;
        }
        Ok(me)
    }

    /// Record `f` between timestamps, submit, wait; GPU nanoseconds (0 without timestamps).
    pub(crate) fn run(&mut self, what: &str, f: impl FnOnce(vk::CommandBuffer)) -> Result<u64> {
        self.submit(f)?;
        self.wait(what)
    }

    /// The mark of this submitter's submissions (see [`Submitter::with_mark`]).
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            query_pool: if self.marked {
                self.query_pool
            } else {
                vk::QueryPool::null()
            },
        }
    }

    /// GPU nanoseconds from the start of the last submission waited for to its mark (0 without
    /// a mark or timestamps).
    pub(crate) fn mark_ns(&self) -> u64 {
        self.mark_ns
    }

    /// Wall nanoseconds spent so far in this submitter's queue submissions and fence waits (the
    /// rest of a call's wall time is the host's own work: recording, preparing inputs, reading
    /// results).
    pub(crate) fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    /// The submitter's context.
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    /// Whether a submission is in flight (submitted, not yet waited for).
    pub(crate) fn pending(&self) -> bool {
        self.pending
    }

    /// Record `f` between timestamps (after a barrier: earlier submissions wrote what it reads)
    /// and submit it without waiting. Refused while a submission is in flight.
    pub(crate) fn submit(&mut self, f: impl FnOnce(vk::CommandBuffer)) -> Result<()> {
        if self.pending {
            return Err(Error::Invalid(
                "internal: a submitter was reused before its submission was waited for".into(),
            ));
        }
        let dev = self.ctx.device();
        let cb = self.cb.cb;
        let qp = self.query_pool;
        unsafe {
            dev.reset_command_buffer(cb, vk::CommandBufferResetFlags::empty())
                .vk("vkResetCommandBuffer")?;
            dev.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .vk("vkBeginCommandBuffer")?;
            if qp != vk::QueryPool::null() {
                dev.cmd_reset_query_pool(cb, qp, 0, if self.marked { 3 } else { 2 });
                dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, qp, 0);
            }
            barrier(dev, cb);
            f(cb);
            if qp != vk::QueryPool::null() {
                dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, qp, 1);
            }
            dev.end_command_buffer(cb).vk("vkEndCommandBuffer")?;
        }
        let t0 = std::time::Instant::now();
        self.ctx.submit(cb, self.fence)?;
        self.busy_ns += t0.elapsed().as_nanos() as u64;
        self.pending = true;
        Ok(())
    }

    /// Wait for the submission in flight (`what` names it in a device-lost error); its GPU
    /// nanoseconds (0 without timestamps, or when nothing is in flight).
    pub(crate) fn wait(&mut self, what: &str) -> Result<u64> {
        if !std::mem::take(&mut self.pending) {
            return Ok(0);
        }
        let t_wait = std::time::Instant::now();
        let dev = self.ctx.device();
        let qp = self.query_pool;
        if self.marked && !crate::device::is_cpu_device(self.ctx.caps()) {
            // A short search: poll the fence a while before sleeping on it (a sleeping wait
            // wakes late by a good part of a millisecond on some drivers; not on a CPU device,
            // whose work needs the cores).
            let t0 = std::time::Instant::now();
            while t0.elapsed() < POLL_FENCE {
                match unsafe { dev.get_fence_status(self.fence) } {
                    Ok(false) => std::hint::spin_loop(),
                    _ => break,
                }
            }
        }
        // A failed wait (a lost device) is the error to report, not a reset failing after it.
        self.ctx.wait(self.fence, what)?;
        self.busy_ns += t_wait.elapsed().as_nanos() as u64;
        unsafe { dev.reset_fences(&[self.fence]) }.vk("vkResetFences")?;
        if qp == vk::QueryPool::null() {
            return Ok(0);
        }
        let mut t = [0u64; 3];
        let n = if self.marked { 3 } else { 2 };
        unsafe {
            dev.get_query_pool_results(
                qp,
                0,
                &mut t[..n],
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .vk("vkGetQueryPoolResults")?;
        if self.marked {
            self.mark_ns = self.ctx.ticks_to_ns(t[0], t[2]);
        }
        Ok(self.ctx.ticks_to_ns(t[0], t[1]))
    }
}

impl Drop for Submitter {
    fn drop(&mut self) {
        if self.pending {
            let _ = self.ctx.wait(self.fence, "dropping a submission in flight");
        }
        let dev = self.ctx.device();
        unsafe {
            if self.query_pool != vk::QueryPool::null() {
                dev.destroy_query_pool(self.query_pool, None);
            }
            if self.fence != vk::Fence::null() {
                dev.destroy_fence(self.fence, None);
            }
        }
        self.ctx.free_command_buffer(&self.cb);
    }
}

/// Bind a compute pipeline, its descriptor set and its push constants on `cb`.
pub(crate) unsafe fn bind(
    dev: &ash::Device,
    cb: vk::CommandBuffer,
    p: &Pipeline,
    set: vk::DescriptorSet,
    push: &[u8],
) {
    dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, p.pipeline);
    dev.cmd_bind_descriptor_sets(cb, vk::PipelineBindPoint::COMPUTE, p.layout, 0, &[set], &[]);
    dev.cmd_push_constants(cb, p.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
}
