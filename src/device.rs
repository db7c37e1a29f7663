//! The Vulkan device layer: instance, device choice, capabilities, the allocator, the pipeline
//! cache and GPU timing. Rust owns every Vulkan object; [`Context`] is a cheap clone (an `Arc`)
//! and every buffer or pipeline keeps its context alive, so destruction always runs in the right
//! order: allocations before the allocator, the allocator before the device, the device before
//! the instance. Buffers and transfers are in `memory.rs`, command submission in `submit.rs`.

use crate::error::{Error, Result, VkContext};
use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

/// A device buffer with its memory (defined with the transfers in `memory.rs`).
pub use crate::memory::Buffer;

/// Environment variable naming the device to use (a substring of its name, its index in
/// [`Context::list_devices`], or its UUID as `GPU-…`, see [`match_uuid`]). The
/// [`ContextOptions::device`] option wins over it.
pub const ENV_DEVICE: &str = "DIVERSITY_DEVICE";
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
    /// A substring of the device name (case-insensitive), an index into
    /// [`Context::list_devices`], or the device's UUID as NVIDIA's tools write it (`GPU-…`, a
    /// unique prefix will do; see [`match_uuid`]: never taken as a name); `None` takes
    /// [`ENV_DEVICE`], else the best device (discrete GPU first, then integrated, virtual, CPU).
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
    /// The device's UUID (`VkPhysicalDeviceIDProperties::deviceUUID`) as NVIDIA's tools write
    /// a GPU's (`GPU-` and 8-4-4-4-12 lowercase hex digits; [`uuid_string`]): on an NVIDIA GPU
    /// the same string as `nvidia-smi -L` and `CUDA_VISIBLE_DEVICES`, which selects it.
    pub uuid: String,
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
    /// The sizes of the device-local memory heaps added up, bytes (what the old C library's
    /// `vkc_get_device_memory` reported; not a budget).
    pub device_local_bytes: u64,
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
    /// Cooperative matrices the tensor-core scan can use (`ScanKernel::Coopmat`):
    /// `VK_NV_cooperative_matrix` with 16 × 16 × 16 fp16 × fp16 → fp32 at subgroup scope, 32-lane
    /// subgroups, `shaderFloat16`, `vulkanMemoryModel` and fp16 storage; off with
    /// `DIVERSITY_DISABLE=coopmat`.
    pub coopmat: bool,
    /// `DIVERSITY_PIPELINE_STATS` is set and the driver has `VK_KHR_pipeline_executable_properties`:
    /// every new pipeline's statistics (registers, spills, shared memory, as the driver names
    /// them) are printed to stderr — a diagnostic for kernel work, off by default.
    pub pipeline_stats: bool,
    /// `shaderFloat64`: k-means sums its clusters on the device in float64
    /// ([`crate::ivf::kmeans()`]); off with `DIVERSITY_DISABLE=float64`.
    pub float64: bool,
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

/// The host's memory (`MemTotal` of /proc/meminfo), `None` where it cannot be read. The budgets
/// of host-side results derive from it: a k-NN result (half of it) and the Lua driver's batches
/// (`diversity.host_memory()`: the smaller of 2 GiB and a quarter).
pub fn host_memory_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    })
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

/// Whether `pd` lists the one cooperative-matrix shape the tensor-core scan uses: 16 × 16 × 16,
/// fp16 × fp16 + fp32 → fp32, subgroup scope (`vkGetPhysicalDeviceCooperativeMatrixPropertiesNV`).
fn coopmat_shape_supported(
    entry: &ash::Entry,
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> bool {
    let cm = ash::nv::cooperative_matrix::Instance::new(entry, instance);
    let get = cm.fp().get_physical_device_cooperative_matrix_properties_nv;
    let mut count = 0u32;
    if unsafe { get(pd, &mut count, std::ptr::null_mut()) } != vk::Result::SUCCESS || count == 0 {
        return false;
    }
    let mut props = vec![vk::CooperativeMatrixPropertiesNV::default(); count as usize];
    if unsafe { get(pd, &mut count, props.as_mut_ptr()) } != vk::Result::SUCCESS {
        return false;
    }
    props.iter().take(count as usize).any(|p| {
        p.m_size == 16
            && p.n_size == 16
            && p.k_size == 16
            && p.a_type == vk::ComponentTypeNV::FLOAT16
            && p.b_type == vk::ComponentTypeNV::FLOAT16
            && p.c_type == vk::ComponentTypeNV::FLOAT32
            && p.d_type == vk::ComponentTypeNV::FLOAT32
            && p.scope == vk::ScopeNV::SUBGROUP
    })
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

/// One line per Vulkan device: `index: name (type)`.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Position in the enumeration, usable as a selector.
    pub index: usize,
    /// Driver-reported name.
    pub name: String,
    /// Discrete GPU, integrated GPU, CPU, ...
    pub device_type: String,
    /// The device's UUID as `GPU-…` (see [`Capabilities::uuid`]), usable as a selector.
    pub uuid: String,
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

/// A usable device: its handle, name, type and UUID.
type Ranked = (vk::PhysicalDevice, String, vk::PhysicalDeviceType, [u8; 16]);

/// Usable devices (Vulkan ≥ 1.2 with a compute queue), best first.
fn ranked_devices(instance: &ash::Instance) -> Result<Vec<Ranked>> {
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
        let mut id = vk::PhysicalDeviceIDProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        devs.push((pd, name, p.device_type, id.device_uuid));
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
            .map(|(index, (_, name, t, uuid))| DeviceInfo {
                index,
                name,
                device_type: type_name(t).into(),
                uuid: uuid_string(&uuid),
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
            Some(sel) if is_uuid_selector(sel) => {
                let listed: Vec<(usize, String, String)> = devs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (i, d.1.clone(), uuid_string(&d.3)))
                    .collect();
                &devs[match_uuid(sel, &listed)?]
            }
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
        let want_stats = std::env::var_os("DIVERSITY_PIPELINE_STATS").is_some()
            && has_ext(ash::khr::pipeline_executable_properties::NAME);
        if want_stats {
            feats2 = feats2.push_next(&mut fpe);
        }
        unsafe { instance.get_physical_device_features2(pd, &mut feats2) };
        let buffer_array_indexing =
            feats2.features.shader_storage_buffer_array_dynamic_indexing == vk::TRUE;
        let float64 = feats2.features.shader_float64 == vk::TRUE && !disabled("float64");
        let coopmat_feature = fcm.cooperative_matrix == vk::TRUE;
        let pipeline_stats = want_stats && fpe.pipeline_executable_info == vk::TRUE;
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
        let has_budget = has_ext(ash::ext::memory_budget::NAME);
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
        let subgroup_arithmetic = subgroup
            .supported_operations
            .contains(vk::SubgroupFeatureFlags::ARITHMETIC)
            && subgroup
                .supported_stages
                .contains(vk::ShaderStageFlags::COMPUTE)
            && !disabled("subgroups");
        // The tensor-core filter also reduces with subgroup arithmetic and ballots.
        let coopmat = has_coopmat_ext
            && subgroup_arithmetic
            && subgroup
                .supported_operations
                .contains(vk::SubgroupFeatureFlags::BALLOT)
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
            float64,
        };
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
        let _ = writeln!(s, "uuid:            {}", c.uuid);
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
        let _ = writeln!(
            s,
            "coop. matrix:    {}",
            if c.coopmat {
                "VK_NV_cooperative_matrix 16x16x16 fp16 -> fp32 (scan kernel: coopmat, tensor-core filter + fp32 judge)"
            } else {
                "no (scan kernel: block64 / block128, fp32 FMA)"
            }
        );
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
        // Constant i is the list's i-th value: the list must cover exactly the shader's ids.
        crate::spirv::check_spec_constants(
            crate::spirv::shader_name(key.spirv),
            key.spirv,
            &key.spec,
        )?;
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
        let flags = if self.inner.caps.pipeline_stats {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let info = [vk::ComputePipelineCreateInfo::default()
            .flags(flags)
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
        if self.inner.caps.pipeline_stats {
            eprintln!("{}", self.pipeline_statistics(pipeline, &key.spec));
        }
        let p = Arc::new(Pipeline { pipeline, layout });
        cache.insert(key, p.clone());
        Ok(p)
    }

    /// One line of the driver's statistics of `pipeline` (see [`Capabilities::pipeline_stats`]).
    fn pipeline_statistics(&self, pipeline: vk::Pipeline, spec: &[u32]) -> String {
        let ext = ash::khr::pipeline_executable_properties::Device::new(
            &self.inner.instance,
            &self.inner.device,
        );
        let mut line = format!("pipeline statistics (spec {spec:?}):");
        let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
        let executables = unsafe { ext.get_pipeline_executable_properties(&info) };
        for i in 0..executables.map(|e| e.len()).unwrap_or(0) as u32 {
            let exe = vk::PipelineExecutableInfoKHR::default()
                .pipeline(pipeline)
                .executable_index(i);
            for st in unsafe { ext.get_pipeline_executable_statistics(&exe) }.unwrap_or_default() {
                let name = st.name_as_c_str().map(|c| c.to_string_lossy().into_owned());
                let value = unsafe {
                    match st.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            (st.value.b32 == vk::TRUE).to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => st.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => {
                            st.value.u64.to_string()
                        }
                        _ => format!("{}", st.value.f64),
                    }
                };
                let _ = write!(line, " {} = {value};", name.unwrap_or_default());
            }
        }
        line
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

/// For unit tests of the planners: a device like lavapipe (subgroup size `sg`, 32 KiB of shared
/// memory, the loop cap `loop_limit`) or, with `sg` = 32 and no cap, like a GPU.
#[cfg(test)]
pub(crate) fn test_caps(sg: u32, loop_limit: Option<u64>) -> Capabilities {
    Capabilities {
        name: format!("test device (subgroup size {sg})"),
        device_type: "cpu".into(),
        uuid: uuid_string(&[0; 16]),
        driver: "test".into(),
        api_version: "1.3.0".into(),
        fp16_storage: true,
        subgroup_size: sg,
        subgroup_arithmetic: true,
        buffer_array_indexing: true,
        shared_memory_bytes: 32 << 10,
        max_buffer_range: 128 << 20,
        max_workgroup_invocations: 1024,
        max_workgroup_count: 65_535,
        timestamps: true,
        timestamp_period_ns: 1.0,
        memory_budget_bytes: 8 << 30,
        device_local_bytes: 8 << 30,
        l2_bytes: 4 << 20,
        l2_source: "default",
        loop_limit,
        coopmat: false,
        pipeline_stats: false,
        float64: true,
    }
}

/// A device UUID as NVIDIA's tools write a GPU's: `GPU-` and the 16 bytes as lowercase hex
/// digits in groups of 8-4-4-4-12 (`GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6`).
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether a device selector names a device by UUID (`GPU-…` or `MIG-…`, any case) rather than
/// by index or name: such a selector goes to [`match_uuid`] and is never taken as a name.
pub fn is_uuid_selector(sel: &str) -> bool {
    let s = sel.trim().as_bytes();
    s.len() >= 4 && (s[..4].eq_ignore_ascii_case(b"GPU-") || s[..4].eq_ignore_ascii_case(b"MIG-"))
}

/// The index of the one device of `devices` (index, name, UUID as [`uuid_string`] writes it)
/// whose UUID `sel` names: `GPU-` (any case) then the UUID's hex digits, whole or a leading
/// part as long as it is unique (as `CUDA_VISIBLE_DEVICES` takes them), hyphens and case
/// ignored. Refused, naming the selector and listing the devices with their UUIDs: a selector
/// with no hex digits or a character that is not one, a MIG instance (`MIG-…`: Vulkan lists
/// whole GPUs only), a UUID no device has, and one that two devices match (a prefix too short,
/// or one GPU listed twice) — so that two tasks given two different GPUs never share one.
pub fn match_uuid(sel: &str, devices: &[(usize, String, String)]) -> Result<usize> {
    let listing = || {
        if devices.is_empty() {
            "none".to_string()
        } else {
            devices
                .iter()
                .map(|(i, name, uuid)| format!("{i}: {name} ({uuid})"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let digits = |u: &str| -> String {
        u.chars()
            .filter(|c| *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let t = sel.trim();
    if t.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-")) {
        return Err(Error::NoDevice(format!(
            "'{sel}' is a MIG instance: Vulkan lists whole GPUs only, name the GPU by its \
             GPU-… UUID (nvidia-smi -L); devices: {}",
            listing()
        )));
    }
    let hex = match t.get(..4) {
        Some(p) if p.eq_ignore_ascii_case("GPU-") => digits(t.get(4..).unwrap_or_default()),
        _ => String::new(),
    };
    if hex.is_empty() || hex.len() > 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::NoDevice(format!(
            "'{sel}' is not a GPU UUID: expected GPU- and up to 32 hex digits (e.g. \
             GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6, as nvidia-smi -L prints it); devices: {}",
            listing()
        )));
    }
    let found: Vec<&(usize, String, String)> = devices
        .iter()
        .filter(|(_, _, uuid)| {
            uuid.get(..4)
                .is_some_and(|p| p.eq_ignore_ascii_case("GPU-"))
                && digits(uuid.get(4..).unwrap_or_default()).starts_with(&hex)
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one.0),
        [] => Err(Error::NoDevice(format!(
            "no device has the UUID '{sel}'; devices: {}",
            listing()
        ))),
        many => Err(Error::NoDevice(format!(
            "the UUID '{sel}' matches {} devices ({}): {}",
            many.len(),
            many.iter()
                .map(|(i, name, uuid)| format!("{i}: {name} ({uuid})"))
                .collect::<Vec<_>>()
                .join(", "),
            if hex.len() < 32 {
                "give more of the UUID"
            } else {
                "one GPU is listed more than once (by two Vulkan drivers?); keep one driver \
                 (VK_DRIVER_FILES)"
            }
        ))),
    }
}

/// Whether `name` is a CPU implementation such as lavapipe.
pub fn is_cpu_device(caps: &Capabilities) -> bool {
    caps.device_type == "CPU"
}

#[cfg(test)]
mod uuid_tests {
    use super::*;

    const A: &str = "GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6";
    const B: &str = "GPU-5f0c9999-0000-4000-8000-000000000001";
    const C: &str = "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d";

    /// Three fake devices as `Context::list_devices` would list them.
    fn fake() -> Vec<(usize, String, String)> {
        [
            (0, "NVIDIA H200", A),
            (1, "NVIDIA H200", B),
            (2, "llvmpipe", C),
        ]
        .iter()
        .map(|&(i, n, u)| (i, n.to_string(), u.to_string()))
        .collect()
    }

    #[test]
    fn uuid_string_is_nvidia_smi_form() {
        let mut u = [0u8; 16];
        for (i, b) in u.iter_mut().enumerate() {
            *b = (i as u8) * 17;
        }
        assert_eq!(uuid_string(&u), "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(uuid_string(&[0; 16]).len(), 40);
    }

    #[test]
    fn selectors_that_are_uuids() {
        for s in [A, "gpu-5f", " GPU-5f0c2f3a", "MIG-1234", "mig-GPU-5f0c/1/0"] {
            assert!(is_uuid_selector(s), "{s}");
        }
        for s in ["0", "llvmpipe", "NVIDIA", "GPU", "gpu0", "", "é"] {
            assert!(!is_uuid_selector(s), "{s}");
        }
    }

    #[test]
    fn matches_by_uuid() {
        let d = fake();
        // (selector, the device it names)
        let ok: &[(&str, usize)] = &[
            (A, 0),
            (B, 1),
            (C, 2),
            // upper and mixed case, surrounding blanks
            ("GPU-5F0C2F3A-1B2C-3D4E-8F90-A1B2C3D4E5F6", 0),
            ("gpu-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6", 0),
            ("  GPU-0A1B2C3D-4e5f-6a7b-8c9d-0e1f2a3b4c5d\n", 2),
            // unique leading parts, as CUDA_VISIBLE_DEVICES takes them
            ("GPU-5f0c2f3a", 0),
            ("GPU-5f0c2", 0),
            ("GPU-5f0c9", 1),
            ("GPU-0", 2),
            // hyphens ignored
            ("GPU-5f0c2f3a1b2c3d4e8f90a1b2c3d4e5f6", 0),
        ];
        for &(sel, want) in ok {
            assert_eq!(match_uuid(sel, &d).unwrap(), want, "{sel}");
        }
    }

    #[test]
    fn refuses_what_names_no_single_device() {
        let d = fake();
        // (selector, words the message must hold)
        let bad: &[(&str, &[&str])] = &[
            // no device
            (
                "GPU-ffffffff-1b2c-3d4e-8f90-a1b2c3d4e5f6",
                &[
                    "no device has the UUID 'GPU-ffffffff",
                    "0: NVIDIA H200 (GPU-5f0c2f3a",
                ],
            ),
            // two devices share the prefix
            (
                "GPU-5f0c",
                &[
                    "matches 2 devices",
                    "0: NVIDIA H200",
                    "1: NVIDIA H200",
                    "give more",
                ],
            ),
            // not hex, empty, too long
            ("GPU-", &["'GPU-' is not a GPU UUID"]),
            ("GPU-xyz", &["'GPU-xyz' is not a GPU UUID", "2: llvmpipe"]),
            (
                "GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f60",
                &["is not a GPU UUID", "up to 32 hex digits"],
            ),
            // a MIG instance (both of nvidia-smi's forms)
            (
                "MIG-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6",
                &["MIG instance", "whole GPUs"],
            ),
            (
                "MIG-GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6/1/0",
                &["MIG instance"],
            ),
        ];
        for &(sel, words) in bad {
            let e = match_uuid(sel, &d).unwrap_err().to_string();
            for w in words {
                assert!(e.contains(w), "{sel}: {e:?} lacks {w:?}");
            }
        }
        // One GPU listed twice (two drivers): the whole UUID matches both.
        let mut twice = fake();
        twice.push((3, "NVIDIA H200".into(), A.into()));
        let e = match_uuid(A, &twice).unwrap_err().to_string();
        assert!(
            e.contains("matches 2 devices") && e.contains("3: NVIDIA H200"),
            "{e}"
        );
        assert!(e.contains("listed more than once"), "{e}");
        // No devices at all.
        let e = match_uuid(A, &[]).unwrap_err().to_string();
        assert!(e.contains("devices: none"), "{e}");
    }
}
