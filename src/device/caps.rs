//! What one device can do: [`Capabilities`], computed once when the context opens, with the
//! facts Vulkan does not report (the L2 size from a table of known devices or the host CPU, the
//! host's memory, lavapipe's loop cap and the loop budget every planner keeps within), the
//! feature switches of `DIVERSITY_DISABLE`, and [`Context::describe`]. Reads the environment,
//! sysfs and /proc; creates no Vulkan object. May touch the context it describes and the crate's
//! errors.

use super::{Context, ENV_DISABLE, ENV_L2_BYTES};
use crate::error::{Error, Result};
use ash::vk;
use std::fmt::Write as _;

/// What one device can do, computed once when the context opens.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// The device's name as the driver reports it.
    pub name: String,
    /// Discrete GPU, integrated GPU, CPU, ...
    pub device_type: String,
    /// The device's UUID (`VkPhysicalDeviceIDProperties::deviceUUID`) as NVIDIA's tools write
    /// a GPU's (`GPU-` and 8-4-4-4-12 lowercase hex digits; [`uuid_string`](super::uuid_string)):
    /// on an NVIDIA GPU the same string as `nvidia-smi -L` and `CUDA_VISIBLE_DEVICES`, which
    /// selects it.
    pub uuid: String,
    /// Driver name and version.
    pub driver: String,
    /// Vulkan API version, `major.minor.patch`.
    pub api_version: String,
    /// `storageBuffer16BitAccess`: fp16 tables can be stored and widened on load.
    pub fp16_storage: bool,
    /// Subgroup size (lanes).
    pub subgroup_size: u32,
    /// Subgroup arithmetic (min) and relative shuffles in compute shaders: the gram engine's
    /// reductions use them when present (off with `DIVERSITY_DISABLE=subgroups`); the scan
    /// engine does not.
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
    /// `DIVERSITY_SHADER_CLOCK` is set and the device has `VK_KHR_shader_clock` with
    /// `shaderSubgroupClock`: enabled, so that shaders built with a profiling knob (the gram
    /// engine's `GF_PROFILE`, the scan filter's `FILTER_CLOCK`, through
    /// `DIVERSITY_SHADER_DEFINES`) can read the subgroup clock — a diagnostic for kernel work,
    /// off by default.
    pub shader_clock: bool,
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

pub(super) fn l2_for(name: &str, device_type: vk::PhysicalDeviceType) -> (u64, &'static str) {
    // Parsed strictly (bytes or K/M/G) by `settings::check` when the context opened.
    if let Ok(Some(v)) = crate::settings::bytes(ENV_L2_BYTES, false) {
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
pub(super) fn coopmat_shape_supported(
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

pub(super) fn disabled(feature: &str) -> bool {
    // Parsed strictly (known features only) by `settings::check` when the context opened.
    crate::settings::read(ENV_DISABLE, |v| {
        crate::settings::parse_words(ENV_DISABLE, v, crate::settings::FEATURES)
    })
    .ok()
    .flatten()
    .is_some_and(|list| list.iter().any(|f| f == feature))
}

impl Context {
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
}

/// For unit tests of the planners: a device like lavapipe (subgroup size `sg`, 32 KiB of shared
/// memory, the loop cap `loop_limit`) or, with `sg` = 32 and no cap, like a GPU.
#[cfg(test)]
pub(crate) fn test_caps(sg: u32, loop_limit: Option<u64>) -> Capabilities {
    Capabilities {
        name: format!("test device (subgroup size {sg})"),
        device_type: "cpu".into(),
        uuid: super::uuid_string(&[0; 16]),
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
        shader_clock: false,
        float64: true,
    }
}

/// Whether `name` is a CPU implementation such as lavapipe.
pub fn is_cpu_device(caps: &Capabilities) -> bool {
    caps.device_type == "CPU"
}
