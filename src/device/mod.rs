//! The Vulkan device layer: [`Context`], an open device with its queue, allocator, descriptor-set
//! layout and pipelines. Rust owns every Vulkan object; a context is a cheap clone (an `Arc`)
//! and every buffer or pipeline keeps its context alive, so destruction always runs in the right
//! order: allocations before the allocator, the allocator before the device, the device before
//! the instance. This file opens and closes the device; which device (instance, listing,
//! ranking, selection by name, index or UUID) is in `choice.rs`, what it can do in `caps.rs`,
//! the pipeline cache in `pipelines.rs`. Buffers and transfers are in `memory.rs`, command
//! submission in `submit.rs`. It touches Vulkan and the environment variables below, nothing
//! of the engines.

mod caps;
mod choice;
mod pipelines;

#[cfg(test)]
pub(crate) use caps::test_caps;
pub use caps::{
    check_loop_budget, host_memory_bytes, is_cpu_device, loop_budget, Capabilities,
    LLVMPIPE_LOOP_LIMIT,
};
pub(crate) use choice::device_listing;
pub use choice::{
    device_selector, is_uuid_selector, match_uuid, select_device, uuid_string, DeviceInfo,
};
pub(crate) use pipelines::{Pipeline, PipelineKey};

use crate::error::{Error, Result, VkContext};
use ash::vk;
use caps::{coopmat_shape_supported, disabled, l2_for};
use choice::{create_instance, load_entry, type_name, version_string};
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

/// A device buffer with its memory (defined with the transfers in `memory.rs`).
pub use crate::memory::Buffer;

/// Environment variable naming the device to use: its index in [`Context::list_devices`], its
/// UUID as `GPU-…`, or a part of its name that no other device's name has ([`select_device`]'s
/// rule). The [`ContextOptions::device`] option wins over it.
pub const ENV_DEVICE: &str = "DIVERSITY_DEVICE";
/// The device selector that runs diversity sequences on the host engine (on the best Vulkan
/// device for everything else), even where a GPU is present: `open{device = "host"}`,
/// `--device host`, `DIVERSITY_DEVICE=host`.
pub const HOST_SELECTOR: &str = "host";
/// Environment variable overriding the L2 size in bytes (Vulkan cannot query it).
pub const ENV_L2_BYTES: &str = "DIVERSITY_L2_BYTES";
/// Environment variable turning optional features off, comma separated: `fp16`, `timestamps`,
/// `subgroups` (the gram engine then reduces through shared memory), `coopmat` (the scan then
/// runs its fp32 kernels, not the tensor-core filter), `float64` (k-means then sums its
/// clusters on the host).
/// Every fallback path can so be tested on any machine.
pub const ENV_DISABLE: &str = "DIVERSITY_DISABLE";
/// Environment variable that turns validation layers on (`1`) for every context.
pub const ENV_VALIDATION: &str = "DIVERSITY_VALIDATION";

/// How to open a device.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// An index into [`Context::list_devices`], the device's UUID as NVIDIA's tools write it
    /// (`GPU-…`, a unique prefix will do; see [`match_uuid`]), or a part of the device's name
    /// (case-insensitive) that names one device only — [`select_device`]'s rule, anything else
    /// refused listing the devices; `None` takes
    /// [`ENV_DEVICE`], else the best device (discrete GPU first, then integrated, virtual, CPU).
    pub device: Option<String>,
    /// Enable `VK_LAYER_KHRONOS_validation` and collect its messages
    /// ([`Context::validation_messages`]). Also on when [`ENV_VALIDATION`] is `1`.
    pub validation: bool,
}

struct Debug {
    utils: ash::ext::debug_utils::Instance,
    messenger: vk::DebugUtilsMessengerEXT,
    messages: *mut Mutex<Vec<String>>,
}

pub(crate) struct Inner {
    _entry: ash::Entry,
    instance: ash::Instance,
    debug: Option<Debug>,
    pub(crate) device: ash::Device,
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) allocator: Mutex<Option<Allocator>>,
    /// The queue's family: every command buffer gets a command pool of its own in it
    /// ([`Context::alloc_command_buffer`]), since Vulkan asks a pool to be used by one thread at
    /// a time and a context is used from several.
    pub(crate) queue_family: u32,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
    pub(crate) caps: Capabilities,
    timestamp_mask: u64,
    /// Whether diversity sequences run on the host engine ([`Context::native_host`]).
    native_host: bool,
    /// Host-side work counted since the context opened ([`Context::host_ops`]).
    pub(crate) ops: OpCounters,
}

/// Counters of the host-side Vulkan work a call costs: queue submissions, buffers created,
/// descriptor pools (sets) created and pipelines created.
#[derive(Default)]
pub(crate) struct OpCounters {
    pub submissions: std::sync::atomic::AtomicU64,
    pub buffers: std::sync::atomic::AtomicU64,
    pub descriptor_sets: std::sync::atomic::AtomicU64,
    pub pipelines: std::sync::atomic::AtomicU64,
}

impl OpCounters {
    pub(crate) fn bump(c: &std::sync::atomic::AtomicU64) {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The host-side Vulkan work done on a context (all threads) between two readings of
/// [`Context::host_ops`]: what a call cost beside the GPU's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostOps {
    /// Queue submissions (each waited for by a fence).
    pub submissions: u64,
    /// Buffers created (each with its memory allocation).
    pub buffers: u64,
    /// Descriptor sets allocated (each in a pool of its own).
    pub descriptor_sets: u64,
    /// Compute pipelines created (the rest come from the context's cache).
    pub pipelines: u64,
}

impl std::ops::Sub for HostOps {
    type Output = HostOps;
    fn sub(self, o: HostOps) -> HostOps {
        HostOps {
            submissions: self.submissions - o.submissions,
            buffers: self.buffers - o.buffers,
            descriptor_sets: self.descriptor_sets - o.descriptor_sets,
            pipelines: self.pipelines - o.pipelines,
        }
    }
}

// The raw pointers are only the debug callback's message sink, guarded by its mutex.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

/// Single storage-buffer bindings (0..8) of the one descriptor-set layout every pipeline uses.
pub(crate) const SINGLE_BINDINGS: u32 = 8;
/// Binding 8 is an array of this many storage buffers: the slabs of the Gram matrix (one buffer
/// binding may see only `maxStorageBufferRange` bytes, 4 GiB on most GPUs, 128 MiB on lavapipe).
pub(crate) const G_SLABS: u32 = 8;
/// Bindings 9 to 13, after the slab array: the tensor-core scan's filter buffers
/// (`filter_common.glsl`).
pub(crate) const FILTER_BINDING: u32 = SINGLE_BINDINGS + 1;
/// Single bindings after the slab array.
pub(crate) const FILTER_BINDINGS: u32 = 5;
/// Storage-buffer descriptors in one set of that layout.
pub(crate) const BINDINGS: u32 = SINGLE_BINDINGS + G_SLABS + FILTER_BINDINGS;

/// An open Vulkan device with its queue, allocator and pipelines. Cloning shares it.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<Inner>,
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if !data.is_null() && !user.is_null() {
        let msg = (*data)
            .message_as_c_str()
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        let sink = &*(user as *const Mutex<Vec<String>>);
        if let Ok(mut v) = sink.lock() {
            // Keep the first messages; a broken loop would otherwise grow this without bound.
            if v.len() < 64 {
                v.push(format!("{severity:?}: {msg}"));
            }
        }
    }
    vk::FALSE
}

impl Context {
    /// Open a device (see [`ContextOptions`]).
    pub fn new(opts: &ContextOptions) -> Result<Context> {
        // Every setting from the environment parses, or nothing is opened.
        crate::settings::check()?;
        let validation = opts.validation || crate::settings::switch(ENV_VALIDATION)?;
        let entry = load_entry()?;
        let instance = create_instance(&entry, validation)?;
        // From here on, `guard` destroys the instance if anything fails.
        let mut guard = InstanceGuard {
            instance: Some(instance),
        };
        let instance = guard.instance.as_ref().unwrap_or_else(|| unreachable!());
        let debug = if validation {
            let utils = ash::ext::debug_utils::Instance::new(&entry, instance);
            let sink: *mut Mutex<Vec<String>> = Box::into_raw(Box::new(Mutex::new(Vec::new())));
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                        | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL,
                )
                .pfn_user_callback(Some(debug_callback))
                .user_data(sink as *mut c_void);
            match unsafe { utils.create_debug_utils_messenger(&info, None) } {
                Ok(messenger) => Some(Debug {
                    utils,
                    messenger,
                    messages: sink,
                }),
                Err(e) => {
                    drop(unsafe { Box::from_raw(sink) });
                    return Err(Error::Vulkan {
                        call: "vkCreateDebugUtilsMessengerEXT",
                        result: e,
                    });
                }
            }
        } else {
            None
        };
        let result = Self::open_device(&entry, instance, opts);
        let (physical, device, queue_family, caps, timestamp_mask) = match result {
            Ok(v) => v,
            Err(e) => {
                if let Some(d) = debug {
                    unsafe {
                        d.utils.destroy_debug_utils_messenger(d.messenger, None);
                        drop(Box::from_raw(d.messages));
                    }
                }
                return Err(e);
            }
        };
        let instance = guard.instance.take().unwrap_or_else(|| unreachable!());
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.clone(),
            device: device.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        });
        // Build the inner object first so that its Drop cleans up whatever follows.
        let mut inner = Inner {
            _entry: entry,
            instance,
            debug,
            device,
            queue: Mutex::new(queue),
            allocator: Mutex::new(None),
            queue_family,
            set_layout: vk::DescriptorSetLayout::null(),
            pipelines: Mutex::new(HashMap::new()),
            caps,
            timestamp_mask,
            native_host: false,
            ops: OpCounters::default(),
        };
        inner.native_host = choice::native_host(opts, &inner.caps);
        inner.allocator = Mutex::new(Some(allocator.map_err(|e| Error::Alloc {
            what: "allocator",
            bytes: 0,
            reason: e.to_string(),
        })?));
        let bindings: Vec<_> = (0..FILTER_BINDING + FILTER_BINDINGS)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(if b == SINGLE_BINDINGS { G_SLABS } else { 1 })
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        inner.set_layout = unsafe {
            inner.device.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            )
        }
        .vk("vkCreateDescriptorSetLayout")?;
        Ok(Context {
            inner: Arc::new(inner),
        })
    }

    #[allow(clippy::type_complexity)]
    fn open_device(
        entry: &ash::Entry,
        instance: &ash::Instance,
        opts: &ContextOptions,
    ) -> Result<(vk::PhysicalDevice, ash::Device, u32, Capabilities, u64)> {
        let _ = entry;
        let chosen = &choice::choose(instance, opts)?;
        let pd = chosen.0;
        let props = unsafe { instance.get_physical_device_properties(pd) };
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut subgroup)
            .push_next(&mut driver);
        unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut fcm = vk::PhysicalDeviceCooperativeMatrixFeaturesNV::default();
        let mut feats2 = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f11)
            .push_next(&mut f12);
        let exts = unsafe { instance.enumerate_device_extension_properties(pd) }
            .vk("vkEnumerateDeviceExtensionProperties")?;
        let has_ext = |name: &std::ffi::CStr| {
            exts.iter()
                .any(|e| e.extension_name_as_c_str().ok() == Some(name))
        };
        let has_coopmat_ext = has_ext(ash::nv::cooperative_matrix::NAME);
        if has_coopmat_ext {
            feats2 = feats2.push_next(&mut fcm);
        }
        let mut fpe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let want_stats = crate::settings::switch("DIVERSITY_PIPELINE_STATS")?
            && has_ext(ash::khr::pipeline_executable_properties::NAME);
        if want_stats {
            feats2 = feats2.push_next(&mut fpe);
        }
        let mut fclock = vk::PhysicalDeviceShaderClockFeaturesKHR::default();
        let want_clock = crate::settings::switch("DIVERSITY_SHADER_CLOCK")?
            && has_ext(ash::khr::shader_clock::NAME);
        if want_clock {
            feats2 = feats2.push_next(&mut fclock);
        }
        unsafe { instance.get_physical_device_features2(pd, &mut feats2) };
        let buffer_array_indexing =
            feats2.features.shader_storage_buffer_array_dynamic_indexing == vk::TRUE;
        let float64 = feats2.features.shader_float64 == vk::TRUE && !disabled("float64");
        let coopmat_feature = fcm.cooperative_matrix == vk::TRUE;
        let pipeline_stats = want_stats && fpe.pipeline_executable_info == vk::TRUE;
        let shader_clock = want_clock && fclock.shader_subgroup_clock == vk::TRUE;
        let (qf, valid_bits) = compute_queue_family(instance, pd);
        let has_budget = has_ext(ash::ext::memory_budget::NAME);
        let (budget, device_local_bytes) = memory_sizes(instance, pd, has_budget);
        let name = chosen.1.clone();
        let fp16_storage = f11.storage_buffer16_bit_access == vk::TRUE && !disabled("fp16");
        let timestamps = valid_bits > 0
            && props.limits.timestamp_compute_and_graphics == vk::TRUE
            && f12.host_query_reset == vk::TRUE
            && !disabled("timestamps");
        let (l2_bytes, l2_source) = l2_for(&name, props.device_type);
        let driver_name = driver
            .driver_name_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let driver_info = driver
            .driver_info_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Subgroup reductions, and relative shuffles (gram_fixed.comp's settling tree).
        let subgroup_arithmetic = subgroup.supported_operations.contains(
            vk::SubgroupFeatureFlags::ARITHMETIC | vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE,
        ) && subgroup
            .supported_stages
            .contains(vk::ShaderStageFlags::COMPUTE)
            && !disabled("subgroups");
        // The tensor-core filter also reduces with subgroup arithmetic, ballots, votes and
        // shuffles (its epilogue on the accumulators).
        let coopmat = has_coopmat_ext
            && subgroup_arithmetic
            && subgroup.supported_operations.contains(
                vk::SubgroupFeatureFlags::BALLOT
                    | vk::SubgroupFeatureFlags::VOTE
                    | vk::SubgroupFeatureFlags::SHUFFLE,
            )
            && coopmat_feature
            && fp16_storage
            && f12.shader_float16 == vk::TRUE
            && f12.vulkan_memory_model == vk::TRUE
            && subgroup.subgroup_size == 32
            && !disabled("coopmat")
            && coopmat_shape_supported(entry, instance, pd);
        let loop_limit = (driver.driver_id == vk::DriverId::MESA_LLVMPIPE
            || name.contains("llvmpipe"))
        .then_some(LLVMPIPE_LOOP_LIMIT);
        let caps = Capabilities {
            name,
            device_type: type_name(props.device_type).into(),
            uuid: uuid_string(&chosen.3),
            driver: format!("{driver_name} {driver_info}").trim().to_string(),
            api_version: version_string(props.api_version),
            fp16_storage,
            subgroup_size: subgroup.subgroup_size,
            subgroup_arithmetic,
            buffer_array_indexing,
            shared_memory_bytes: props.limits.max_compute_shared_memory_size,
            max_buffer_range: props.limits.max_storage_buffer_range as u64,
            max_workgroup_invocations: props.limits.max_compute_work_group_invocations,
            max_workgroup_count: props.limits.max_compute_work_group_count[0],
            timestamps,
            timestamp_period_ns: props.limits.timestamp_period as f64,
            memory_budget_bytes: budget,
            device_local_bytes,
            l2_bytes,
            l2_source,
            loop_limit,
            coopmat,
            pipeline_stats,
            shader_clock,
            float64,
        };
        let device = create_device(instance, pd, qf, &caps, has_budget)?;
        let mask = if valid_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << valid_bits) - 1
        };
        Ok((pd, device, qf, caps, mask))
    }

    /// Whether diversity sequences run natively on the host ([`crate::host`]) rather than in this
    /// device's shaders: when no device was named and the best one is a CPU device (lavapipe),
    /// or when the device was named `host` ([`HOST_SELECTOR`]). Rankings and k-NN always run
    /// on the device.
    pub fn native_host(&self) -> bool {
        self.inner.native_host
    }

    /// The host-side Vulkan work done on this context so far (every thread's); the difference
    /// of two readings is what the calls between them cost.
    pub fn host_ops(&self) -> HostOps {
        use std::sync::atomic::Ordering::Relaxed;
        let o = &self.inner.ops;
        HostOps {
            submissions: o.submissions.load(Relaxed),
            buffers: o.buffers.load(Relaxed),
            descriptor_sets: o.descriptor_sets.load(Relaxed),
            pipelines: o.pipelines.load(Relaxed),
        }
    }

    /// The device's capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.inner.caps
    }

    /// Messages the validation layers reported so far (empty without validation).
    pub fn validation_messages(&self) -> Vec<String> {
        match &self.inner.debug {
            Some(d) => unsafe { &*d.messages }
                .lock()
                .map(|v| v.clone())
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Whether validation layers are on.
    pub fn validation_enabled(&self) -> bool {
        self.inner.debug.is_some()
    }

    pub(crate) fn device(&self) -> &ash::Device {
        &self.inner.device
    }

    pub(crate) fn allocator(&self) -> MutexGuard<'_, Option<Allocator>> {
        self.inner
            .allocator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Ticks → nanoseconds for a pair of raw timestamps.
    pub(crate) fn ticks_to_ns(&self, t0: u64, t1: u64) -> u64 {
        let d = t1.wrapping_sub(t0) & self.inner.timestamp_mask;
        (d as f64 * self.inner.caps.timestamp_period_ns) as u64
    }
}

struct InstanceGuard {
    instance: Option<ash::Instance>,
}

impl Drop for InstanceGuard {
    fn drop(&mut self) {
        if let Some(i) = self.instance.take() {
            unsafe { i.destroy_instance(None) };
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        unsafe {
            let _ = self.device.device_wait_idle();
            for (_, p) in self
                .pipelines
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .drain()
            {
                self.device.destroy_pipeline(p.pipeline, None);
                self.device.destroy_pipeline_layout(p.layout, None);
            }
            if self.set_layout != vk::DescriptorSetLayout::null() {
                self.device
                    .destroy_descriptor_set_layout(self.set_layout, None);
            }
            // Allocations are all freed (their owners hold this Arc); the allocator goes before the device.
            drop(
                self.allocator
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            );
            self.device.destroy_device(None);
            if let Some(d) = self.debug.take() {
                d.utils.destroy_debug_utils_messenger(d.messenger, None);
                drop(Box::from_raw(d.messages));
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// The queue family a context submits to: a compute-only one (async compute on GPUs), else any
/// with compute; and its timestamps' valid bits.
fn compute_queue_family(instance: &ash::Instance, pd: vk::PhysicalDevice) -> (u32, u32) {
    let qfs = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    let qf = qfs
        .iter()
        .position(|q| {
            q.queue_flags.contains(vk::QueueFlags::COMPUTE)
                && !q.queue_flags.contains(vk::QueueFlags::GRAPHICS)
        })
        .or_else(|| {
            qfs.iter()
                .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
        })
        .unwrap_or(0) as u32;
    (qf, qfs[qf as usize].timestamp_valid_bits)
}

/// The device's memory budget (its largest device-local heap, by `VK_EXT_memory_budget`'s
/// budget where the device has it, else the heap's size; the largest heap where none is
/// device-local) and its device-local bytes in all.
fn memory_sizes(instance: &ash::Instance, pd: vk::PhysicalDevice, has_budget: bool) -> (u64, u64) {
    let mem = unsafe { instance.get_physical_device_memory_properties(pd) };
    let mut budget_props = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut mem2 = vk::PhysicalDeviceMemoryProperties2::default();
    if has_budget {
        mem2 = mem2.push_next(&mut budget_props);
    }
    unsafe { instance.get_physical_device_memory_properties2(pd, &mut mem2) };
    let heaps = &mem.memory_heaps[..mem.memory_heap_count as usize];
    let budget = heaps
        .iter()
        .enumerate()
        .filter(|(_, h)| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|(i, h)| {
            if has_budget && budget_props.heap_budget[i] > 0 {
                budget_props.heap_budget[i]
            } else {
                h.size
            }
        })
        .max()
        .unwrap_or_else(|| heaps.iter().map(|h| h.size).max().unwrap_or(0));
    let device_local_bytes = heaps
        .iter()
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .sum();
    (budget, device_local_bytes)
}

/// The logical device on `pd` with one queue of family `qf` and what `caps` found and kept
/// (fp16 storage, timestamps, the tensor cores, pipeline statistics, the shader clock,
/// float64, dynamic buffer indexing), with `VK_EXT_memory_budget` where the device has it.
fn create_device(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    qf: u32,
    caps: &Capabilities,
    has_budget: bool,
) -> Result<ash::Device> {
    let (fp16_storage, timestamps, coopmat) = (caps.fp16_storage, caps.timestamps, caps.coopmat);
    let (pipeline_stats, shader_clock) = (caps.pipeline_stats, caps.shader_clock);
    let priorities = [1.0f32];
    let queue_info = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(qf)
        .queue_priorities(&priorities)];
    let mut en11 =
        vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(fp16_storage);
    let mut en12 = vk::PhysicalDeviceVulkan12Features::default()
        .host_query_reset(timestamps)
        .shader_float16(coopmat)
        .vulkan_memory_model(coopmat);
    let mut en_cm =
        vk::PhysicalDeviceCooperativeMatrixFeaturesNV::default().cooperative_matrix(true);
    let mut dev_exts = Vec::new();
    if has_budget {
        dev_exts.push(ash::ext::memory_budget::NAME.as_ptr());
    }
    if coopmat {
        dev_exts.push(ash::nv::cooperative_matrix::NAME.as_ptr());
    }
    if pipeline_stats {
        dev_exts.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
    }
    let mut en_pe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    if shader_clock {
        dev_exts.push(ash::khr::shader_clock::NAME.as_ptr());
    }
    let mut en_clock =
        vk::PhysicalDeviceShaderClockFeaturesKHR::default().shader_subgroup_clock(true);
    let base_features = vk::PhysicalDeviceFeatures::default()
        .shader_storage_buffer_array_dynamic_indexing(caps.buffer_array_indexing)
        .shader_float64(caps.float64);
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue_info)
        .enabled_features(&base_features)
        .enabled_extension_names(&dev_exts)
        .push_next(&mut en11)
        .push_next(&mut en12);
    let info = if coopmat {
        info.push_next(&mut en_cm)
    } else {
        info
    };
    let info = if pipeline_stats {
        info.push_next(&mut en_pe)
    } else {
        info
    };
    let info = if shader_clock {
        info.push_next(&mut en_clock)
    } else {
        info
    };
    let device = unsafe { instance.create_device(pd, &info, None) }.vk("vkCreateDevice")?;
    Ok(device)
}
