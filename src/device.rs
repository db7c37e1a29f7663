//! The Vulkan device layer: instance, device choice, capabilities, memory, command submission and
//! GPU timing. Rust owns every Vulkan object; [`Context`] is a cheap clone (an `Arc`) and every
//! buffer or pipeline keeps its context alive, so destruction always runs in the right order:
//! allocations before the allocator, the allocator before the device, the device before the
//! instance.

use crate::error::{Error, Result, VkContext};
use ash::vk;
use gpu_allocator::vulkan::{
    Allocation, AllocationCreateDesc, AllocationScheme, Allocator, AllocatorCreateDesc,
};
use gpu_allocator::MemoryLocation;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

/// Environment variable naming the device to use (a substring of its name, or its index in
/// [`Context::list_devices`]). The [`ContextOptions::device`] option wins over it.
pub const ENV_DEVICE: &str = "DIVERSITY_DEVICE";
/// Environment variable overriding the L2 size in bytes (Vulkan cannot query it).
pub const ENV_L2_BYTES: &str = "DIVERSITY_L2_BYTES";
/// Environment variable turning optional features off, comma separated: `fp16`, `timestamps`,
/// `subgroups` (the gram engine then reduces through shared memory).
/// Every fallback path can so be tested on any machine.
pub const ENV_DISABLE: &str = "DIVERSITY_DISABLE";
/// Environment variable that turns validation layers on (`1`) for every context.
pub const ENV_VALIDATION: &str = "DIVERSITY_VALIDATION";

/// How to open a device.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// A substring of the device name (case-insensitive) or an index into
    /// [`Context::list_devices`]; `None` takes [`ENV_DEVICE`], else the best device (discrete GPU
    /// first, then integrated, virtual, CPU).
    pub device: Option<String>,
    /// Enable `VK_LAYER_KHRONOS_validation` and collect its messages
    /// ([`Context::validation_messages`]). Also on when [`ENV_VALIDATION`] is `1`.
    pub validation: bool,
}

/// What one device can do, computed once when the context opens.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// The device's name as the driver reports it.
    pub name: String,
    /// Discrete GPU, integrated GPU, CPU, ...
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Vulkan API version, `major.minor.patch`.
    pub api_version: String,
    /// `storageBuffer16BitAccess`: fp16 tables can be stored and widened on load.
    pub fp16_storage: bool,
    /// Subgroup size (lanes).
    pub subgroup_size: u32,
    /// Subgroup arithmetic (min) in compute shaders: the gram engine's reduction uses it when
    /// present (off with `DIVERSITY_DISABLE=subgroups`); the scan engine does not.
    pub subgroup_arithmetic: bool,
    /// `shaderStorageBufferArrayDynamicIndexing`: the gram engine may split G over several
    /// buffers (slabs); without it G must fit one buffer.
    pub buffer_array_indexing: bool,
    /// `maxComputeSharedMemorySize` in bytes.
    pub shared_memory_bytes: u32,
    /// `maxStorageBufferRange` in bytes: the largest buffer one binding can see.
    pub max_buffer_range: u64,
    /// `maxComputeWorkGroupInvocations`.
    pub max_workgroup_invocations: u32,
    /// `maxComputeWorkGroupCount[0]`: the most workgroups (sequences) one dispatch can hold.
    pub max_workgroup_count: u32,
    /// Timestamps are available on the compute queue.
    pub timestamps: bool,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f64,
    /// Device-local memory the job may use, bytes (the heap budget when `VK_EXT_memory_budget`
    /// is there, else the heap size).
    pub memory_budget_bytes: u64,
    /// Last-level (L2) cache bytes, from [`ENV_L2_BYTES`], a table of known devices, or the host
    /// CPU's cache for CPU devices.
    pub l2_bytes: u64,
    /// Where `l2_bytes` came from: `env`, `table`, `cpu` or `default`.
    pub l2_source: &'static str,
    /// The most loop iterations one shader invocation may run, all loops together, when the
    /// driver caps them: Mesa's llvmpipe (lavapipe) counts every loop back-edge of an
    /// invocation against one counter of 65,535 and, once it is spent, silently leaves every
    /// loop after its current iteration (gallivm's `LP_MAX_TGSI_LOOP_ITERATIONS`; no error, no
    /// validation message). Every planner keeps each dispatch's loops within
    /// [`loop_budget`] of it; `tests/limits.rs` measures the cap with a one-loop shader.
    /// `None`: no known cap.
    pub loop_limit: Option<u64>,
}

/// lavapipe's per-invocation loop-iteration cap (see [`Capabilities::loop_limit`]).
pub const LLVMPIPE_LOOP_LIMIT: u64 = 65_535;

/// The loop iterations a planner may give one invocation of one dispatch: three quarters of
/// [`Capabilities::loop_limit`] (the rest covers short loops a plan does not count), or
/// `u64::MAX` without a cap.
pub fn loop_budget(caps: &Capabilities) -> u64 {
    caps.loop_limit.map_or(u64::MAX, |l| l / 4 * 3)
}

/// Refuses a dispatch whose invocations would run `iterations` loop iterations on a device
/// that caps them (they would be cut short silently): an [`Error::Limit`] naming `what`.
pub fn check_loop_budget(caps: &Capabilities, what: &str, iterations: u64) -> Result<()> {
    match caps.loop_limit {
        Some(limit) if iterations > loop_budget(caps) => Err(Error::Limit(format!(
            "{what} needs about {iterations} loop iterations in one shader invocation; {} \
             stops every invocation's loops after {limit} in all (a driver limit), so the \
             result would be wrong",
            caps.name
        ))),
        _ => Ok(()),
    }
}

/// Known L2 sizes (Vulkan does not report them): name substring → bytes.
const KNOWN_L2: &[(&str, u64)] = &[
    ("H200", 60 * 1024 * 1024),
    ("H100", 50 * 1024 * 1024),
    ("A100", 40 * 1024 * 1024),
    ("L40", 96 * 1024 * 1024),
    ("RTX 4090", 72 * 1024 * 1024),
    ("RTX 4080", 64 * 1024 * 1024),
    ("RTX 3090", 6 * 1024 * 1024),
    ("RTX 3080", 5 * 1024 * 1024),
    ("RTX 2080 Ti", 5632 * 1024),
    ("GTX 1080 Ti", 2816 * 1024),
    ("GTX 1080", 2048 * 1024),
];

/// The L2 size when nothing better is known.
const DEFAULT_L2: u64 = 4 * 1024 * 1024;

fn l2_for(name: &str, device_type: vk::PhysicalDeviceType) -> (u64, &'static str) {
    if let Some(v) = std::env::var(ENV_L2_BYTES)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return (v, "env");
    }
    if let Some((_, b)) = KNOWN_L2.iter().find(|(k, _)| name.contains(k)) {
        return (*b, "table");
    }
    if device_type == vk::PhysicalDeviceType::CPU {
        if let Some(b) = cpu_l2_bytes() {
            return (b, "cpu");
        }
    }
    (DEFAULT_L2, "default")
}

/// The host CPU's L2 from sysfs (`index2/size`, e.g. `1024K`).
fn cpu_l2_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size").ok()?;
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1024),
        b'M' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|v| v * mul)
}

fn disabled(feature: &str) -> bool {
    std::env::var(ENV_DISABLE)
        .map(|v| v.split(',').any(|f| f.trim().eq_ignore_ascii_case(feature)))
        .unwrap_or(false)
}

/// Which compiled shader and specialization: the key of the context's pipeline cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    pub spirv: &'static [u8],
    pub spec: Vec<u32>,
    pub push_bytes: u32,
}

/// A compute pipeline over the context's one descriptor-set layout.
pub(crate) struct Pipeline {
    pub pipeline: vk::Pipeline,
    pub layout: vk::PipelineLayout,
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
    pub(crate) command_pool: Mutex<vk::CommandPool>,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
    pub(crate) caps: Capabilities,
    timestamp_mask: u64,
}

// The raw pointers are only the debug callback's message sink, guarded by its mutex.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

/// Largest staging buffer of a download (larger downloads reuse it, round by round).
pub(crate) const STAGING_BYTES: u64 = 64 << 20;
/// Single storage-buffer bindings (0..8) of the one descriptor-set layout every pipeline uses.
pub(crate) const SINGLE_BINDINGS: u32 = 8;
/// Binding 8 is an array of this many storage buffers: the slabs of the Gram matrix (one buffer
/// binding may see only `maxStorageBufferRange` bytes, 4 GiB on most GPUs, 128 MiB on lavapipe).
pub(crate) const G_SLABS: u32 = 8;
/// Storage-buffer descriptors in one set of that layout.
pub(crate) const BINDINGS: u32 = SINGLE_BINDINGS + G_SLABS;

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

/// One line per Vulkan device: `index: name (type)`.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Position in the enumeration, usable as a selector.
    pub index: usize,
    /// Driver-reported name.
    pub name: String,
    /// Discrete GPU, integrated GPU, CPU, ...
    pub device_type: String,
}

fn type_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

fn type_name(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete GPU",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated GPU",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual GPU",
        vk::PhysicalDeviceType::CPU => "CPU",
        _ => "other",
    }
}

fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

fn load_entry() -> Result<ash::Entry> {
    unsafe { ash::Entry::load() }.map_err(|e| {
        Error::NoDevice(format!(
            "cannot load the Vulkan loader (libvulkan.so.1): {e}; on Debian: apt-get install libvulkan1 mesa-vulkan-drivers"
        ))
    })
}

fn create_instance(entry: &ash::Entry, validation: bool) -> Result<ash::Instance> {
    let app = CString::new("diversity").unwrap_or_default();
    let app_info = vk::ApplicationInfo::default()
        .application_name(&app)
        .engine_name(&app)
        .api_version(vk::API_VERSION_1_2);
    let layer = c"VK_LAYER_KHRONOS_validation";
    let mut layers = Vec::new();
    let mut exts = Vec::new();
    if validation {
        let available = unsafe { entry.enumerate_instance_layer_properties() }
            .vk("vkEnumerateInstanceLayerProperties")?;
        if !available
            .iter()
            .any(|l| l.layer_name_as_c_str().ok() == Some(layer))
        {
            return Err(Error::NoDevice(
                "validation requested but VK_LAYER_KHRONOS_validation is not installed (Debian: apt-get install vulkan-validationlayers)".into(),
            ));
        }
        layers.push(layer.as_ptr());
        exts.push(ash::ext::debug_utils::NAME.as_ptr());
    }
    let info = vk::InstanceCreateInfo::default()
        .application_info(&app_info)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&exts);
    unsafe { entry.create_instance(&info, None) }.vk("vkCreateInstance")
}

/// Usable devices (Vulkan ≥ 1.2 with a compute queue), best first.
fn ranked_devices(
    instance: &ash::Instance,
) -> Result<Vec<(vk::PhysicalDevice, String, vk::PhysicalDeviceType)>> {
    let mut devs = Vec::new();
    for pd in unsafe { instance.enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")? {
        let p = unsafe { instance.get_physical_device_properties(pd) };
        let name = p
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if p.api_version < vk::API_VERSION_1_2 {
            continue;
        }
        let qf = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        if !qf
            .iter()
            .any(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
        {
            continue;
        }
        devs.push((pd, name, p.device_type));
    }
    devs.sort_by_key(|d| type_rank(d.2));
    Ok(devs)
}

impl Context {
    /// Every usable Vulkan device, in the order the default choice ranks them.
    pub fn list_devices() -> Result<Vec<DeviceInfo>> {
        let entry = load_entry()?;
        let instance = create_instance(&entry, false)?;
        let devs = ranked_devices(&instance);
        unsafe { instance.destroy_instance(None) };
        Ok(devs?
            .into_iter()
            .enumerate()
            .map(|(index, (_, name, t))| DeviceInfo {
                index,
                name,
                device_type: type_name(t).into(),
            })
            .collect())
    }

    /// Open a device (see [`ContextOptions`]).
    pub fn new(opts: &ContextOptions) -> Result<Context> {
        let validation = opts.validation
            || std::env::var(ENV_VALIDATION)
                .map(|v| v == "1")
                .unwrap_or(false);
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
            command_pool: Mutex::new(vk::CommandPool::null()),
            set_layout: vk::DescriptorSetLayout::null(),
            pipelines: Mutex::new(HashMap::new()),
            caps,
            timestamp_mask,
        };
        inner.allocator = Mutex::new(Some(allocator.map_err(|e| Error::Alloc {
            what: "allocator",
            bytes: 0,
            reason: e.to_string(),
        })?));
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        inner.command_pool = Mutex::new(
            unsafe { inner.device.create_command_pool(&pool_info, None) }
                .vk("vkCreateCommandPool")?,
        );
        let bindings: Vec<_> = (0..=SINGLE_BINDINGS)
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
        let devs = ranked_devices(instance)?;
        if devs.is_empty() {
            return Err(Error::NoDevice(
                "no Vulkan 1.2 device with a compute queue (for a CPU device: apt-get install mesa-vulkan-drivers)".into(),
            ));
        }
        let wanted = opts
            .device
            .clone()
            .or_else(|| std::env::var(ENV_DEVICE).ok().filter(|s| !s.is_empty()));
        let chosen = match &wanted {
            None => &devs[0],
            Some(sel) => {
                let by_index = sel.parse::<usize>().ok().and_then(|i| devs.get(i));
                let lower = sel.to_lowercase();
                by_index
                    .or_else(|| devs.iter().find(|d| d.1.to_lowercase().contains(&lower)))
                    .ok_or_else(|| {
                        let names: Vec<_> = devs
                            .iter()
                            .enumerate()
                            .map(|(i, d)| format!("{i}: {}", d.1))
                            .collect();
                        Error::NoDevice(format!(
                            "no device matches '{sel}'; available: {}",
                            names.join(", ")
                        ))
                    })?
            }
        };
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
        let mut feats2 = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f11)
            .push_next(&mut f12);
        unsafe { instance.get_physical_device_features2(pd, &mut feats2) };
        let buffer_array_indexing =
            feats2.features.shader_storage_buffer_array_dynamic_indexing == vk::TRUE;
        let qfs = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        // Prefer a compute-only queue family (async compute on GPUs), else any with compute.
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
        let valid_bits = qfs[qf as usize].timestamp_valid_bits;
        let exts = unsafe { instance.enumerate_device_extension_properties(pd) }
            .vk("vkEnumerateDeviceExtensionProperties")?;
        let has_budget = exts
            .iter()
            .any(|e| e.extension_name_as_c_str().ok() == Some(ash::ext::memory_budget::NAME));
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
        let loop_limit = (driver.driver_id == vk::DriverId::MESA_LLVMPIPE
            || name.contains("llvmpipe"))
        .then_some(LLVMPIPE_LOOP_LIMIT);
        let caps = Capabilities {
            name,
            device_type: type_name(props.device_type).into(),
            driver: format!("{driver_name} {driver_info}").trim().to_string(),
            api_version: version_string(props.api_version),
            fp16_storage,
            subgroup_size: subgroup.subgroup_size,
            subgroup_arithmetic: subgroup
                .supported_operations
                .contains(vk::SubgroupFeatureFlags::ARITHMETIC)
                && subgroup
                    .supported_stages
                    .contains(vk::ShaderStageFlags::COMPUTE)
                && !disabled("subgroups"),
            buffer_array_indexing,
            shared_memory_bytes: props.limits.max_compute_shared_memory_size,
            max_buffer_range: props.limits.max_storage_buffer_range as u64,
            max_workgroup_invocations: props.limits.max_compute_work_group_invocations,
            max_workgroup_count: props.limits.max_compute_work_group_count[0],
            timestamps,
            timestamp_period_ns: props.limits.timestamp_period as f64,
            memory_budget_bytes: budget,
            l2_bytes,
            l2_source,
            loop_limit,
        };
        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(qf)
            .queue_priorities(&priorities)];
        let mut en11 =
            vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(fp16_storage);
        let mut en12 = vk::PhysicalDeviceVulkan12Features::default().host_query_reset(timestamps);
        let mut dev_exts = Vec::new();
        if has_budget {
            dev_exts.push(ash::ext::memory_budget::NAME.as_ptr());
        }
        let base_features = vk::PhysicalDeviceFeatures::default()
            .shader_storage_buffer_array_dynamic_indexing(caps.buffer_array_indexing);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_features(&base_features)
            .enabled_extension_names(&dev_exts)
            .push_next(&mut en11)
            .push_next(&mut en12);
        let device = unsafe { instance.create_device(pd, &info, None) }.vk("vkCreateDevice")?;
        let mask = if valid_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << valid_bits) - 1
        };
        Ok((pd, device, qf, caps, mask))
    }

    /// The device's capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.inner.caps
    }

    /// A multi-line, human-readable account of the device and its capabilities.
    pub fn describe(&self) -> String {
        let c = &self.inner.caps;
        let mut s = String::new();
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let _ = writeln!(s, "device:          {} ({})", c.name, c.device_type);
        let _ = writeln!(
            s,
            "driver:          {} (Vulkan {})",
            c.driver, c.api_version
        );
        let _ = writeln!(s, "fp16 storage:    {}", c.fp16_storage);
        let _ = writeln!(
            s,
            "subgroup:        {} lanes, arithmetic {}",
            c.subgroup_size, c.subgroup_arithmetic
        );
        let _ = writeln!(s, "shared memory:   {} KiB", c.shared_memory_bytes / 1024);
        let _ = writeln!(s, "buffer arrays:   {}", c.buffer_array_indexing);
        let _ = writeln!(s, "buffer range:    {:.0} MiB", mib(c.max_buffer_range));
        let _ = writeln!(
            s,
            "workgroups:      {} invocations, {} per dispatch",
            c.max_workgroup_invocations, c.max_workgroup_count
        );
        let _ = writeln!(
            s,
            "timestamps:      {} ({} ns/tick)",
            c.timestamps, c.timestamp_period_ns
        );
        let _ = writeln!(s, "memory budget:   {:.0} MiB", mib(c.memory_budget_bytes));
        if let Some(l) = c.loop_limit {
            let _ = writeln!(s, "loop limit:      {l} iterations an invocation (driver)");
        }
        let _ = write!(
            s,
            "L2:              {:.2} MiB ({})",
            mib(c.l2_bytes),
            c.l2_source
        );
        s
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

    /// A compute pipeline for `key`, created once per context and cached.
    pub(crate) fn pipeline(&self, key: PipelineKey) -> Result<Arc<Pipeline>> {
        let mut cache = self
            .inner
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let dev = self.device();
        let words: Vec<u32> = key
            .spirv
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let module = unsafe {
            dev.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
        }
        .vk("vkCreateShaderModule")?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(key.push_bytes)];
        let layouts = [self.inner.set_layout];
        let layout = match unsafe {
            dev.create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default()
                    .set_layouts(&layouts)
                    .push_constant_ranges(&ranges),
                None,
            )
        } {
            Ok(l) => l,
            Err(e) => {
                unsafe { dev.destroy_shader_module(module, None) };
                return Err(Error::Vulkan {
                    call: "vkCreatePipelineLayout",
                    result: e,
                });
            }
        };
        let entries: Vec<_> = (0..key.spec.len() as u32)
            .map(|i| vk::SpecializationMapEntry {
                constant_id: i,
                offset: i * 4,
                size: 4,
            })
            .collect();
        let data: &[u8] = bytemuck::cast_slice(&key.spec);
        let spec = vk::SpecializationInfo::default()
            .map_entries(&entries)
            .data(data);
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main")
            .specialization_info(&spec);
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)];
        let made = unsafe { dev.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        unsafe { dev.destroy_shader_module(module, None) };
        let pipeline = match made {
            Ok(p) => p[0],
            Err((_, e)) => {
                unsafe { dev.destroy_pipeline_layout(layout, None) };
                return Err(Error::Vulkan {
                    call: "vkCreateComputePipelines",
                    result: e,
                });
            }
        };
        let p = Arc::new(Pipeline { pipeline, layout });
        cache.insert(key, p.clone());
        Ok(p)
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
            let pool = *self
                .command_pool
                .get_mut()
                .unwrap_or_else(|e| e.into_inner());
            if pool != vk::CommandPool::null() {
                self.device.destroy_command_pool(pool, None);
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

/// A device buffer with its memory. Frees both on drop.
pub struct Buffer {
    ctx: Context,
    pub(crate) buffer: vk::Buffer,
    allocation: Option<Allocation>,
}

impl Buffer {
    /// A storage buffer of `size` bytes at `location`; `what` names it in errors.
    pub(crate) fn new(
        ctx: &Context,
        what: &'static str,
        size: u64,
        location: MemoryLocation,
        usage: vk::BufferUsageFlags,
    ) -> Result<Buffer> {
        let size = size.max(4);
        let dev = ctx.device();
        let buffer = unsafe {
            dev.create_buffer(
                &vk::BufferCreateInfo::default()
                    .size(size)
                    .usage(usage)
                    .sharing_mode(vk::SharingMode::EXCLUSIVE),
                None,
            )
        }
        .vk("vkCreateBuffer")?;
        let requirements = unsafe { dev.get_buffer_memory_requirements(buffer) };
        let alloc = ctx.allocator().as_mut().map(|a| {
            a.allocate(&AllocationCreateDesc {
                name: what,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
        });
        let allocation = match alloc {
            Some(Ok(a)) => a,
            Some(Err(e)) => {
                unsafe { dev.destroy_buffer(buffer, None) };
                return Err(Error::Alloc {
                    what,
                    bytes: size,
                    reason: e.to_string(),
                });
            }
            None => unreachable!("allocator exists while the context lives"),
        };
        if let Err(e) =
            unsafe { dev.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) }
        {
            unsafe { dev.destroy_buffer(buffer, None) };
            if let Some(a) = ctx.allocator().as_mut() {
                let _ = a.free(allocation);
            }
            return Err(Error::Vulkan {
                call: "vkBindBufferMemory",
                result: e,
            });
        }
        Ok(Buffer {
            ctx: ctx.clone(),
            buffer,
            allocation: Some(allocation),
        })
    }

    /// A device-local storage buffer that can be copied to and from.
    pub(crate) fn storage(ctx: &Context, what: &'static str, size: u64) -> Result<Buffer> {
        Self::new(
            ctx,
            what,
            size,
            MemoryLocation::GpuOnly,
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_DST
                | vk::BufferUsageFlags::TRANSFER_SRC,
        )
    }

    /// The mapped bytes of a host-visible buffer.
    fn mapped(&mut self) -> &mut [u8] {
        self.allocation
            .as_mut()
            .and_then(|a| a.mapped_slice_mut())
            .unwrap_or(&mut [])
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { self.ctx.device().destroy_buffer(self.buffer, None) };
        if let Some(a) = self.allocation.take() {
            if let Some(al) = self.ctx.allocator().as_mut() {
                let _ = al.free(a);
            }
        }
    }
}

/// A recorded-and-submitted command buffer with its fence: the unit of one-off transfers.
impl Context {
    /// Record `f` into a fresh command buffer, submit it and wait for it.
    pub(crate) fn one_shot(&self, f: impl FnOnce(vk::CommandBuffer)) -> Result<()> {
        let dev = self.device();
        let cb = self.alloc_command_buffer()?;
        let fence = match unsafe { dev.create_fence(&vk::FenceCreateInfo::default(), None) } {
            Ok(f) => f,
            Err(e) => {
                self.free_command_buffer(cb);
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
        self.free_command_buffer(cb);
        run
    }

    pub(crate) fn alloc_command_buffer(&self) -> Result<vk::CommandBuffer> {
        let pool = self
            .inner
            .command_pool
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let v = unsafe {
            self.device().allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(*pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )
        }
        .vk("vkAllocateCommandBuffers")?;
        Ok(v[0])
    }

    pub(crate) fn free_command_buffer(&self, cb: vk::CommandBuffer) {
        let pool = self
            .inner
            .command_pool
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        unsafe { self.device().free_command_buffers(*pool, &[cb]) };
    }

    pub(crate) fn submit(&self, cb: vk::CommandBuffer, fence: vk::Fence) -> Result<()> {
        let cbs = [cb];
        let info = [vk::SubmitInfo::default().command_buffers(&cbs)];
        let q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
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

    /// A device-local storage buffer holding `bytes`, uploaded through a staging buffer.
    pub(crate) fn upload(&self, what: &'static str, bytes: &[u8]) -> Result<Buffer> {
        let dst = Buffer::storage(self, what, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(dst);
        }
        let mut staging = Buffer::new(
            self,
            "staging upload",
            bytes.len() as u64,
            MemoryLocation::CpuToGpu,
            vk::BufferUsageFlags::TRANSFER_SRC,
        )?;
        staging.mapped()[..bytes.len()].copy_from_slice(bytes);
        let dev = self.device();
        self.one_shot(|cb| unsafe {
            dev.cmd_copy_buffer(
                cb,
                staging.buffer,
                dst.buffer,
                &[vk::BufferCopy::default().size(bytes.len() as u64)],
            );
        })?;
        Ok(dst)
    }

    /// Read `len` bytes at `offset` of `src` back to the host.
    pub(crate) fn download(&self, src: &Buffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.download_regions(src, &[(offset, len)])
    }

    /// Read several `(offset, len)` regions of `src` back to the host, their bytes concatenated
    /// in order: one submission per [`STAGING_BYTES`] through one staging buffer.
    pub(crate) fn download_regions(&self, src: &Buffer, regions: &[(u64, u64)]) -> Result<Vec<u8>> {
        self.download_regions_through(src, regions, STAGING_BYTES)
    }

    /// [`download_regions`](Self::download_regions) through a staging buffer of at most
    /// `staging` bytes (≥ 1).
    fn download_regions_through(
        &self,
        src: &Buffer,
        regions: &[(u64, u64)],
        staging: u64,
    ) -> Result<Vec<u8>> {
        let total: u64 = regions.iter().map(|r| r.1).sum();
        if total == 0 {
            return Ok(Vec::new());
        }
        // One staging buffer, filled and read back as many times as needed: a large download
        // (a k = N ranking is hundreds of MB) neither pins that much host memory at once nor
        // allocates and frees it whole on every call.
        let cap = total.min(staging.max(1));
        let mut staging = Buffer::new(
            self,
            "staging download",
            cap,
            MemoryLocation::GpuToCpu,
            vk::BufferUsageFlags::TRANSFER_DST,
        )?;
        let mut out = Vec::with_capacity(total as usize);
        let mut pending = regions.iter().filter(|r| r.1 > 0).copied();
        let mut carry: Option<(u64, u64)> = None;
        let dev = self.device();
        loop {
            // Copies filling the staging buffer, splitting a region across rounds if needed.
            let mut copies = Vec::new();
            let mut at = 0;
            while at < cap {
                let Some((offset, len)) = carry.take().or_else(|| pending.next()) else {
                    break;
                };
                let n = len.min(cap - at);
                copies.push(
                    vk::BufferCopy::default()
                        .src_offset(offset)
                        .dst_offset(at)
                        .size(n),
                );
                at += n;
                if n < len {
                    carry = Some((offset + n, len - n));
                }
            }
            if copies.is_empty() {
                break;
            }
            self.one_shot(|cb| unsafe {
                transfer_barrier(dev, cb, true);
                dev.cmd_copy_buffer(cb, src.buffer, staging.buffer, &copies);
                let barrier = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(vk::AccessFlags::HOST_READ)];
                dev.cmd_pipeline_barrier(
                    cb,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &barrier,
                    &[],
                    &[],
                );
            })?;
            out.extend_from_slice(&staging.mapped()[..at as usize]);
        }
        Ok(out)
    }

    /// Write `(offset, bytes)` regions into `dst` through one staging buffer and one submission,
    /// after everything submitted before.
    pub(crate) fn write_regions(&self, dst: &Buffer, regions: &[(u64, &[u8])]) -> Result<()> {
        let total: usize = regions.iter().map(|r| r.1.len()).sum();
        if total == 0 {
            return Ok(());
        }
        let mut staging = Buffer::new(
            self,
            "staging upload",
            total as u64,
            MemoryLocation::CpuToGpu,
            vk::BufferUsageFlags::TRANSFER_SRC,
        )?;
        let mut copies = Vec::with_capacity(regions.len());
        let mut at = 0usize;
        {
            let map = staging.mapped();
            for &(offset, bytes) in regions.iter().filter(|r| !r.1.is_empty()) {
                map[at..at + bytes.len()].copy_from_slice(bytes);
                copies.push(
                    vk::BufferCopy::default()
                        .src_offset(at as u64)
                        .dst_offset(offset)
                        .size(bytes.len() as u64),
                );
                at += bytes.len();
            }
        }
        let dev = self.device();
        self.one_shot(|cb| unsafe {
            transfer_barrier(dev, cb, false);
            dev.cmd_copy_buffer(cb, staging.buffer, dst.buffer, &copies);
        })
    }
}

/// Shader work before → a transfer after: the transfer reads (download) or overwrites (upload)
/// what shaders wrote or read.
unsafe fn transfer_barrier(dev: &ash::Device, cb: vk::CommandBuffer, read: bool) {
    let dst = if read {
        vk::AccessFlags::TRANSFER_READ
    } else {
        vk::AccessFlags::TRANSFER_WRITE
    };
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::SHADER_READ)
        .dst_access_mask(dst)];
    dev.cmd_pipeline_barrier(
        cb,
        vk::PipelineStageFlags::COMPUTE_SHADER,
        vk::PipelineStageFlags::TRANSFER,
        vk::DependencyFlags::empty(),
        &barrier,
        &[],
        &[],
    );
}

/// Whether `name` is a CPU implementation such as lavapipe.
pub fn is_cpu_device(caps: &Capabilities) -> bool {
    caps.device_type == "CPU"
}

/// A transfer/compute → compute memory barrier: everything written before is visible after.
pub(crate) unsafe fn barrier(dev: &ash::Device, cb: vk::CommandBuffer) {
    let src = vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::COMPUTE_SHADER;
    let mb = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
    dev.cmd_pipeline_barrier(
        cb,
        src,
        vk::PipelineStageFlags::COMPUTE_SHADER,
        vk::DependencyFlags::empty(),
        &mb,
        &[],
        &[],
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

/// Timestamp pair + command buffer + fence for synchronous, timed submissions.
pub(crate) struct Submitter {
    ctx: Context,
    cb: vk::CommandBuffer,
    fence: vk::Fence,
    query_pool: vk::QueryPool,
}

impl Submitter {
    pub(crate) fn new(ctx: &Context) -> Result<Submitter> {
        let dev = ctx.device();
        let cb = ctx.alloc_command_buffer()?;
        let mut me = Submitter {
            ctx: ctx.clone(),
            cb,
            fence: vk::Fence::null(),
            query_pool: vk::QueryPool::null(),
        };
        me.fence = unsafe { dev.create_fence(&vk::FenceCreateInfo::default(), None) }
            .vk("vkCreateFence")?;
        if ctx.caps().timestamps {
            me.query_pool = unsafe {
                dev.create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(2),
                    None,
                )
            }
            .vk("vkCreateQueryPool")?;
        }
        Ok(me)
    }

    /// Record `f` between timestamps, submit, wait; GPU nanoseconds (0 without timestamps).
    pub(crate) fn run(&self, what: &str, f: impl FnOnce(vk::CommandBuffer)) -> Result<u64> {
        let dev = self.ctx.device();
        let cb = self.cb;
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
                dev.cmd_reset_query_pool(cb, qp, 0, 2);
                dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, qp, 0);
            }
            barrier(dev, cb);
            f(cb);
            if qp != vk::QueryPool::null() {
                dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, qp, 1);
            }
            dev.end_command_buffer(cb).vk("vkEndCommandBuffer")?;
        }
        self.ctx.submit(cb, self.fence)?;
        // A failed wait (a lost device) is the error to report, not a reset failing after it.
        self.ctx.wait(self.fence, what)?;
        unsafe { dev.reset_fences(&[self.fence]) }.vk("vkResetFences")?;
        if qp == vk::QueryPool::null() {
            return Ok(0);
        }
        let mut t = [0u64; 2];
        unsafe {
            dev.get_query_pool_results(
                qp,
                0,
                &mut t,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .vk("vkGetQueryPoolResults")?;
        Ok(self.ctx.ticks_to_ns(t[0], t[1]))
    }
}

impl Drop for Submitter {
    fn drop(&mut self) {
        let dev = self.ctx.device();
        unsafe {
            if self.query_pool != vk::QueryPool::null() {
                dev.destroy_query_pool(self.query_pool, None);
            }
            if self.fence != vk::Fence::null() {
                dev.destroy_fence(self.fence, None);
            }
        }
        self.ctx.free_command_buffer(self.cb);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Downloads through a staging buffer smaller than the data (regions split across rounds)
    /// return the same bytes as one round.
    #[test]
    fn download_in_rounds() {
        let ctx = Context::new(&ContextOptions::default()).expect("a Vulkan device");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let buf = ctx.upload("test data", &bytes).unwrap();
        let regions = [
            (0, 13),
            (100, 0),
            (17, 999),
            (5000, 4321),
            (9999, 1),
            (3, 2),
        ];
        let want: Vec<u8> = regions
            .iter()
            .flat_map(|&(o, l)| bytes[o as usize..(o + l) as usize].iter().copied())
            .collect();
        for staging in [1, 7, 64, 1000, 4321, 1 << 20] {
            let got = ctx
                .download_regions_through(&buf, &regions, staging)
                .unwrap();
            assert_eq!(got, want, "staging {staging}");
        }
        assert!(ctx.download_regions(&buf, &[(0, 0)]).unwrap().is_empty());
    }
}
