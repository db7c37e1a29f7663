//! A probe of `VK_NV_cooperative_matrix2` on the tensor-core filter's GEMM shape; not part of the
//! library. It times `bench/cm2/cm2_gemm.comp` (built to SPIR-V by `bench/cm2/build.sh` with a
//! glslang that knows the extension) on a device that has it: C = A·Bᵀ with A = M × K and
//! B = N × K in fp16, fp32 accumulators, workgroup-scope matrices loaded by tensor layouts
//! (or subgroup-scope ones, EPI 6), then one of the shader's epilogues (EPI 0–16, described at
//! its top; EPI 0, 4 and 6 observe one element an invocation and time dead code, EPI 15 is the
//! GEMM with every product live, EPI 16 the library filter's epilogue). For every (workgroup
//! size, BM, BN, BK, epilogue) it reports GPU time a dispatch (timestamps, after about 0.3 s of
//! untimed dispatches that warm the clock) and TFLOP/s of products. EPI 1 checks 24 sampled
//! rows' tile minima against float64 over the same fp16 inputs; EPI 3, 5 and 8 report the hits a
//! row (the same count each, if each is right), EPI 16 its band's mean size. EPI 9, 10 and 13
//! write the keys to device memory; with `CM2_STREAM=<cm2_stream.spv>` each of their dispatches
//! is followed by the streaming half (bench/cm2/cm2_stream.comp: each row segment's minimum and
//! band from the stored keys), timed together, and 8 rows' minima are checked against float64.
//!
//! ```text
//! cargo run --release --example cm2_probe -- SPV M N K REPS CONFIG...
//!     CONFIG = WG:BM:BN:BK:EPI[:CLAMP], e.g. 256:128:128:32:1 (CLAMP 1 by default)
//! ```
//!
//! It uses ash directly: the library's device does not enable the extension, and ash 0.38
//! predates its structures, so they are declared here.

use ash::vk;
use half::f16;
use std::ffi::{c_void, CStr};

const ST_CM2_FEATURES: i32 = 1_000_593_000;
const ST_CM2_FLEX: i32 = 1_000_593_001;
const ST_CM2_PROPS: i32 = 1_000_593_002;

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct Cm2Features {
    s_type: i32,
    p_next: usize,
    workgroup_scope: u32,
    flexible_dimensions: u32,
    reductions: u32,
    conversions: u32,
    per_element_operations: u32,
    tensor_addressing: u32,
    block_loads: u32,
}

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct Cm2Props {
    s_type: i32,
    p_next: usize,
    workgroup_scope_max_workgroup_size: u32,
    flexible_dimensions_max_dimension: u32,
    workgroup_scope_reserved_shared_memory: u32,
}

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct FlexDims {
    s_type: i32,
    p_next: usize,
    m_granularity: u32,
    n_granularity: u32,
    k_granularity: u32,
    a_type: i32,
    b_type: i32,
    c_type: i32,
    result_type: i32,
    saturating: u32,
    scope: i32,
    workgroup_invocations: u32,
}

type GetFlex = unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut FlexDims) -> vk::Result;

struct Buf {
    buf: vk::Buffer,
    mem: vk::DeviceMemory,
    size: u64,
}

/// A compute shader, its descriptor set layout (storage buffers at bindings 0, 1, …) and its
/// pipeline layout.
struct Kernel {
    module: vk::ShaderModule,
    dsl: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
}

struct Gpu {
    /// Holds the loader library open: dropping it unloads the Vulkan functions.
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    mem_props: vk::PhysicalDeviceMemoryProperties,
    queue: vk::Queue,
    pool: vk::CommandPool,
    ts_period: f64,
}

impl Gpu {
    fn mem_type(&self, bits: u32, want: vk::MemoryPropertyFlags) -> u32 {
        (0..self.mem_props.memory_type_count)
            .find(|&i| {
                bits & (1 << i) != 0
                    && self.mem_props.memory_types[i as usize]
                        .property_flags
                        .contains(want)
            })
            .expect("no memory type")
    }

    fn buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
        props: vk::MemoryPropertyFlags,
    ) -> Buf {
        unsafe {
            let buf = self
                .device
                .create_buffer(
                    &vk::BufferCreateInfo::default()
                        .size(size)
                        .usage(usage)
                        .sharing_mode(vk::SharingMode::EXCLUSIVE),
                    None,
                )
                .unwrap();
            let req = self.device.get_buffer_memory_requirements(buf);
            let mem = self
                .device
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(req.size)
                        .memory_type_index(self.mem_type(req.memory_type_bits, props)),
                    None,
                )
                .unwrap();
            self.device.bind_buffer_memory(buf, mem, 0).unwrap();
            Buf { buf, mem, size }
        }
    }

    fn one_shot(&self, f: impl FnOnce(vk::CommandBuffer)) {
        unsafe {
            let cb = self
                .device
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(self.pool)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1),
                )
                .unwrap()[0];
            self.device
                .begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                .unwrap();
            f(cb);
            self.device.end_command_buffer(cb).unwrap();
            let cbs = [cb];
            self.device
                .queue_submit(
                    self.queue,
                    &[vk::SubmitInfo::default().command_buffers(&cbs)],
                    vk::Fence::null(),
                )
                .unwrap();
            self.device.queue_wait_idle(self.queue).unwrap();
            self.device.free_command_buffers(self.pool, &cbs);
        }
    }

    /// A device-local storage buffer holding `bytes`, through a host-visible staging buffer.
    fn upload(&self, bytes: &[u8]) -> Buf {
        let size = bytes.len().max(4) as u64;
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let st = self.buffer(size, vk::BufferUsageFlags::TRANSFER_SRC, host);
        unsafe {
            let p = self
                .device
                .map_memory(st.mem, 0, size, vk::MemoryMapFlags::empty())
                .unwrap() as *mut u8;
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            self.device.unmap_memory(st.mem);
        }
        let dst = self.buffer(
            size,
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_DST
                | vk::BufferUsageFlags::TRANSFER_SRC,
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
        );
        self.one_shot(|cb| unsafe {
            self.device.cmd_copy_buffer(
                cb,
                st.buf,
                dst.buf,
                &[vk::BufferCopy::default().size(size)],
            );
        });
        self.free(st);
        dst
    }

    fn download(&self, src: &Buf) -> Vec<u8> {
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let st = self.buffer(src.size, vk::BufferUsageFlags::TRANSFER_DST, host);
        self.one_shot(|cb| unsafe {
            self.device.cmd_copy_buffer(
                cb,
                src.buf,
                st.buf,
                &[vk::BufferCopy::default().size(src.size)],
            );
        });
        let mut out = vec![0u8; src.size as usize];
        unsafe {
            let p = self
                .device
                .map_memory(st.mem, 0, src.size, vk::MemoryMapFlags::empty())
                .unwrap() as *const u8;
            std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len());
            self.device.unmap_memory(st.mem);
        }
        self.free(st);
        out
    }

    /// `spv`'s shader with `bindings` storage buffers and `push_bytes` of push constants.
    fn kernel(&self, spv: &[u8], bindings: u32, push_bytes: u32) -> Kernel {
        let words: Vec<u32> = spv
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let b: Vec<_> = (0..bindings)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let pcr = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .size(push_bytes)];
        unsafe {
            let module = self
                .device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                .unwrap();
            let dsl = self
                .device
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&b),
                    None,
                )
                .unwrap();
            let layout = self
                .device
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default()
                        .set_layouts(&[dsl])
                        .push_constant_ranges(&pcr),
                    None,
                )
                .unwrap();
            Kernel {
                module,
                dsl,
                layout,
            }
        }
    }

    /// `kernel`'s pipeline with specialization constants 0, 1, … set to `spec`.
    fn pipeline(&self, kernel: &Kernel, spec: &[u32]) -> Result<vk::Pipeline, vk::Result> {
        let entries: Vec<_> = (0..spec.len() as u32)
            .map(|i| vk::SpecializationMapEntry {
                constant_id: i,
                offset: 4 * i,
                size: 4,
            })
            .collect();
        let si = vk::SpecializationInfo::default()
            .map_entries(&entries)
            .data(bytemuck::cast_slice(spec));
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(kernel.module)
            .name(c"main")
            .specialization_info(&si);
        unsafe {
            self.device.create_compute_pipelines(
                vk::PipelineCache::null(),
                &[vk::ComputePipelineCreateInfo::default()
                    .stage(stage)
                    .layout(kernel.layout)],
                None,
            )
        }
        .map(|p| p[0])
        .map_err(|(_, e)| e)
    }

    /// A descriptor set of `kernel` from `pool` with binding i = `bufs[i]`.
    fn set(&self, pool: vk::DescriptorPool, kernel: &Kernel, bufs: &[&Buf]) -> vk::DescriptorSet {
        let set = unsafe {
            self.device.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(pool)
                    .set_layouts(&[kernel.dsl]),
            )
        }
        .unwrap()[0];
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = bufs
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo::default()
                    .buffer(b.buf)
                    .range(vk::WHOLE_SIZE)]
            })
            .collect();
        let writes: Vec<_> = infos
            .iter()
            .enumerate()
            .map(|(i, inf)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(inf)
            })
            .collect();
        unsafe { self.device.update_descriptor_sets(&writes, &[]) };
        set
    }

    /// Records a dispatch of `pipe` (a pipeline of `kernel`) on `set` with push constants `pc`,
    /// then a barrier that orders its writes before what follows.
    fn dispatch(
        &self,
        cb: vk::CommandBuffer,
        kernel: &Kernel,
        (pipe, set, pc): (vk::Pipeline, vk::DescriptorSet, &[u8]),
        groups: (u32, u32),
    ) {
        let dev = &self.device;
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE);
        unsafe {
            dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipe);
            dev.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                kernel.layout,
                0,
                &[set],
                &[],
            );
            dev.cmd_push_constants(cb, kernel.layout, vk::ShaderStageFlags::COMPUTE, 0, pc);
            dev.cmd_dispatch(cb, groups.0, groups.1, 1);
            dev.cmd_pipeline_barrier(
                cb,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
        }
    }

    fn free(&self, b: Buf) {
        unsafe {
            self.device.destroy_buffer(b.buf, None);
            self.device.free_memory(b.mem, None);
        }
    }
}

fn open() -> Gpu {
    unsafe {
        let entry = ash::Entry::load().expect("Vulkan loader");
        let app = vk::ApplicationInfo::default().api_version(vk::make_api_version(0, 1, 3, 0));
        let instance = entry
            .create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )
            .unwrap();
        let want: &CStr = c"VK_NV_cooperative_matrix2";
        let pd = instance
            .enumerate_physical_devices()
            .unwrap()
            .into_iter()
            .find(|&pd| {
                instance
                    .enumerate_device_extension_properties(pd)
                    .unwrap()
                    .iter()
                    .any(|e| e.extension_name_as_c_str().ok() == Some(want))
            })
            .expect("no device with VK_NV_cooperative_matrix2");
        let props = instance.get_physical_device_properties(pd);
        println!(
            "device: {}, driver version {:#x}, maxComputeSharedMemorySize {}",
            props.device_name_as_c_str().unwrap().to_string_lossy(),
            props.driver_version,
            props.limits.max_compute_shared_memory_size
        );
        // Features and properties of the extension, by a raw pNext chain.
        let mut cm2 = Cm2Features {
            s_type: ST_CM2_FEATURES,
            ..Default::default()
        };
        let mut khr = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR {
            p_next: &mut cm2 as *mut Cm2Features as *mut c_void,
            ..Default::default()
        };
        let mut f12 = vk::PhysicalDeviceVulkan12Features {
            p_next: &mut khr as *mut _ as *mut c_void,
            ..Default::default()
        };
        let mut f11 = vk::PhysicalDeviceVulkan11Features {
            p_next: &mut f12 as *mut _ as *mut c_void,
            ..Default::default()
        };
        let mut f2 = vk::PhysicalDeviceFeatures2 {
            p_next: &mut f11 as *mut _ as *mut c_void,
            ..Default::default()
        };
        instance.get_physical_device_features2(pd, &mut f2);
        println!("cooperative_matrix2 features: {cm2:?}");
        let mut cp = Cm2Props {
            s_type: ST_CM2_PROPS,
            ..Default::default()
        };
        let mut p2 = vk::PhysicalDeviceProperties2 {
            p_next: &mut cp as *mut Cm2Props as *mut c_void,
            ..Default::default()
        };
        instance.get_physical_device_properties2(pd, &mut p2);
        println!("cooperative_matrix2 properties: {cp:?}");
        let name = c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
        if let Some(f) = entry.get_instance_proc_addr(instance.handle(), name.as_ptr()) {
            let f: GetFlex = std::mem::transmute(f);
            let mut n = 0u32;
            let _ = f(pd, &mut n, std::ptr::null_mut());
            let mut v = vec![
                FlexDims {
                    s_type: ST_CM2_FLEX,
                    ..Default::default()
                };
                n as usize
            ];
            let _ = f(pd, &mut n, v.as_mut_ptr());
            for d in &v[..n as usize] {
                // Component types: 0 fp16, 1 fp32 (VkComponentTypeKHR).
                if d.a_type == 0 && d.c_type == 1 {
                    println!(
                        "flexible fp16 x fp16 -> fp32: granularity M {} N {} K {}, scope {}, invocations {}",
                        d.m_granularity, d.n_granularity, d.k_granularity, d.scope, d.workgroup_invocations
                    );
                }
            }
        }
        let qf = instance
            .get_physical_device_queue_family_properties(pd)
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .unwrap() as u32;
        let prio = [1.0f32];
        let qi = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(qf)
            .queue_priorities(&prio)];
        let exts = [c"VK_KHR_cooperative_matrix".as_ptr(), want.as_ptr()];
        let mut en_cm2 = cm2;
        en_cm2.p_next = 0;
        let mut en_khr =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        en_khr.p_next = &mut en_cm2 as *mut Cm2Features as *mut c_void;
        let mut en12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(true)
            .shader_int8(f12.shader_int8 == vk::TRUE)
            .vulkan_memory_model(true)
            .vulkan_memory_model_device_scope(f12.vulkan_memory_model_device_scope == vk::TRUE)
            .storage_buffer8_bit_access(f12.storage_buffer8_bit_access == vk::TRUE);
        en12.p_next = &mut en_khr as *mut _ as *mut c_void;
        let mut en11 =
            vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
        en11.p_next = &mut en12 as *mut _ as *mut c_void;
        let base = vk::PhysicalDeviceFeatures::default()
            .shader_int16(f2.features.shader_int16 == vk::TRUE)
            .shader_int64(f2.features.shader_int64 == vk::TRUE);
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&qi)
            .enabled_extension_names(&exts)
            .enabled_features(&base);
        info.p_next = &mut en11 as *mut _ as *const c_void;
        eprintln!("creating the device");
        let device = instance.create_device(pd, &info, None).unwrap();
        eprintln!("device created");
        let queue = device.get_device_queue(qf, 0);
        let pool = device
            .create_command_pool(
                &vk::CommandPoolCreateInfo::default()
                    .queue_family_index(qf)
                    .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                None,
            )
            .unwrap();
        let mem_props = instance.get_physical_device_memory_properties(pd);
        Gpu {
            _entry: entry,
            instance,
            device,
            mem_props,
            queue,
            pool,
            ts_period: props.limits.timestamp_period as f64,
        }
    }
}

/// Push constants: `words` then `band`, little-endian.
fn push(words: &[u32], band: f32) -> Vec<u8> {
    let mut pc: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    pc.extend_from_slice(&band.to_le_bytes());
    pc
}

/// A small deterministic generator (xorshift) for the inputs.
fn fill(n: usize, seed: u64, scale: f32) -> Vec<f16> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            f16::from_f32((2.0 * u - 1.0) * scale)
        })
        .collect()
}

mod common;

/// The command line: the shader, the shape, the timed dispatches and the configurations.
struct Args {
    spv: String,
    m: u32,
    n: u32,
    k: u32,
    reps: u32,
    /// Each CONFIG as written and its numbers: WG, BM, BN, BK, EPI and CLAMP when given.
    configs: Vec<(String, Vec<u32>)>,
}

fn parse() -> Result<Args, String> {
    let mut args = common::Cli::new(include_str!("cm2_probe.rs"));
    let mut words = Vec::new();
    while let Some(a) = args.flag()? {
        if a.starts_with('-') {
            return Err(format!("unknown argument {a}"));
        }
        words.push(a);
    }
    if words.len() < 6 {
        return Err("expected SPV M N K REPS and at least one CONFIG".into());
    }
    let configs = words[5..]
        .iter()
        .map(|cfg| {
            let v = common::int_list::<u32>("CONFIG", &cfg.replace(':', ","), 0)
                .map_err(|e| format!("{e} (CONFIG = WG:BM:BN:BK:EPI[:CLAMP])"))?;
            if v.len() != 5 && v.len() != 6 {
                return Err(format!("CONFIG {cfg}: expected WG:BM:BN:BK:EPI[:CLAMP]"));
            }
            Ok((cfg.clone(), v))
        })
        .collect::<Result<_, String>>()?;
    Ok(Args {
        spv: words[0].clone(),
        m: common::int_min("M", &words[1], 1)?,
        n: common::int_min("N", &words[2], 1)?,
        k: common::int_min("K", &words[3], 1)?,
        reps: common::int_min("REPS", &words[4], 1)?,
        configs,
    })
}

/// What every configuration shares: the device, the kernels, the inputs and their buffers.
struct Probe {
    gpu: Gpu,
    gemm: Kernel,
    stream: Option<Kernel>,
    dpool: vk::DescriptorPool,
    qpool: vk::QueryPool,
    a: Vec<f16>,
    b: Vec<f16>,
    rs: Vec<f32>,
    cs: Vec<f32>,
    ba: Buf,
    bb: Buf,
    brs: Buf,
    bcs: Buf,
    bbits: Buf,
    m: u32,
    n: u32,
    k: u32,
    reps: u32,
    scale: f32,
    flops: f64,
}

/// A configuration's tiling, for its checks.
#[derive(Clone, Copy)]
struct Tiling {
    epi: u32,
    bm: u32,
    bn: u32,
    nt: u32,
    segs: u32,
}

fn main() {
    let Args {
        spv,
        m,
        n,
        k,
        reps,
        configs,
    } = common::parsed("cm2_probe", parse());
    let spv = std::fs::read(&spv).unwrap_or_else(|e| {
        eprintln!("cm2_probe: {spv}: {e}");
        std::process::exit(1);
    });
    let gpu = open();
    let dev = &gpu.device;
    let scale = 1.0 / (k as f32).sqrt();
    // Padded by 256 zero rows each, so that the unclamped layouts (CLAMP 0) read the padding.
    let mut a = fill((m * k) as usize, 1, 1.0);
    a.resize(((m + 256) * k) as usize, f16::ZERO);
    let mut b = fill(n as usize * k as usize, 2, 1.0);
    b.resize((n as usize + 256) * k as usize, f16::ZERO);
    let rs: Vec<f32> = (0..m + 512).map(|i| 1.0 + (i % 7) as f32 * 0.01).collect();
    let cs: Vec<f32> = (0..n + 512).map(|i| (i % 13) as f32 * 0.001).collect();
    eprintln!("uploading");
    // EPI 8's bit matrix: 256 × 32 fp16, entry (c, c / 8) = 2^(c % 8).
    let bits: Vec<f16> = (0..256 * 32)
        .map(|i| {
            let (c, g) = (i / 32, i % 32);
            f16::from_f32(if g == c / 8 {
                (1u32 << (c % 8)) as f32
            } else {
                0.0
            })
        })
        .collect();
    let bbits = gpu.upload(bytemuck::cast_slice(&bits));
    let ba = gpu.upload(bytemuck::cast_slice(&a));
    let bb = gpu.upload(bytemuck::cast_slice(&b));
    let brs = gpu.upload(bytemuck::cast_slice(&rs));
    let bcs = gpu.upload(bytemuck::cast_slice(&cs));
    eprintln!("uploaded");
    let gemm = gpu.kernel(&spv, 9, 20);
    let dpool = unsafe {
        dev.create_descriptor_pool(
            &vk::DescriptorPoolCreateInfo::default()
                .max_sets(64)
                .pool_sizes(&[vk::DescriptorPoolSize::default()
                    .ty(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(9 * 64)]),
            None,
        )
    }
    .unwrap();
    let qpool = unsafe {
        dev.create_query_pool(
            &vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(2),
            None,
        )
    }
    .unwrap();
    // The streaming half for EPI 9 / 10 / 13 (bench/cm2/cm2_stream.comp), when CM2_STREAM names
    // its SPIR-V: keys (binding 0) and (minimum, count) a row segment (binding 1); push M, N,
    // NS, SEG, band.
    let stream = std::env::var_os("CM2_STREAM").map(|path| {
        let spv = std::fs::read(path).expect("CM2_STREAM: the stream shader's SPIR-V");
        gpu.kernel(&spv, 2, 20)
    });
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    println!(
        "shape M {m} N {n} K {k}: {:.3e} FLOP a dispatch, {reps} dispatches timed",
        flops
    );
    let probe = Probe {
        gpu,
        gemm,
        stream,
        dpool,
        qpool,
        a,
        b,
        rs,
        cs,
        ba,
        bb,
        brs,
        bcs,
        bbits,
        m,
        n,
        k,
        reps,
        scale,
        flops,
    };
    for (cfg, v) in &configs {
        probe.config(cfg, v);
    }
    let _ = &probe.gpu.instance;
}

impl Probe {
    /// Row r of A against row c of B in float64 (the checks' reference).
    fn dot(&self, r: u32, c: u32) -> f64 {
        let k = self.k as usize;
        let (ra, rb) = (r as usize * k, c as usize * k);
        (0..k)
            .map(|q| self.a[ra + q].to_f64() * self.b[rb + q].to_f64())
            .sum()
    }

    /// Time one configuration (`v`: WG, BM, BN, BK, EPI[, CLAMP]) and print its line.
    fn config(&self, cfg: &str, v: &[u32]) {
        let (gpu, gemm, stream) = (&self.gpu, &self.gemm, &self.stream);
        let dev = &gpu.device;
        let (dpool, qpool) = (self.dpool, self.qpool);
        let (m, n, k, scale) = (self.m, self.n, self.k, self.scale);
        let (wg, bm, bn, bk, epi) = (v[0], v[1], v[2], v[3], v[4]);
        let clamp = v.get(5).copied().unwrap_or(1);
        // EPI 6: subgroup tiles of BM × BN, 2 × (WG / 64) of them a workgroup.
        let (gm, gn) = if epi == 6 {
            (2 * bm, (wg / 64) * bn)
        } else {
            (bm, bn)
        };
        let nt = n.div_ceil(gn);
        let mt = m.div_ceil(gm);
        let out_bytes = (m as u64 * nt as u64 * 4).max(4);
        let dev_local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC;
        // EPI 9 / 10 / 13: every key, 4 or 2 bytes each (a 4-byte placeholder otherwise).
        // Each row's stride is N rounded up to 8 keys (the streaming half's 16-byte loads).
        // EPI 13 stores whole tiles: rows NT·BN keys apart, M rounded up to whole tiles.
        let ns = if epi == 13 {
            nt * bn
        } else {
            n.next_multiple_of(8)
        };
        let key_bytes = match epi {
            9 => m as u64 * ns as u64 * 4,
            10 => m as u64 * ns as u64 * 2,
            13 => (mt * bm) as u64 * ns as u64 * 2,
            _ => 4,
        };
        // The streaming half's segments: about 8,192 keys each, a multiple of 8.
        let segs = ns.div_ceil(8192);
        let seg = ns.div_ceil(segs).next_multiple_of(8);
        if key_bytes >= 4 << 30 {
            println!("{cfg}: skipped: {key_bytes} bytes of keys reach a 4 GiB binding");
            return;
        }
        let bo = gpu.buffer(out_bytes, usage, dev_local);
        let be = gpu.buffer(out_bytes * 18, usage, dev_local); // EPI 16: 9 uvec2 a (row, tile)
        let bk_keys = gpu.buffer(key_bytes, usage, dev_local);
        let bc = gpu.buffer(out_bytes, usage, dev_local);
        eprintln!("{cfg}: creating the pipeline");
        let t0 = std::time::Instant::now();
        let pipe = match gpu.pipeline(gemm, &[wg, bm, bn, bk, epi, clamp]) {
            Ok(p) => p,
            Err(e) => {
                println!("{cfg}: pipeline creation failed: {e:?}");
                gpu.free(bo);
                gpu.free(bc);
                gpu.free(be);
                gpu.free(bk_keys);
                return;
            }
        };
        let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        let set = gpu.set(
            dpool,
            gemm,
            &[
                &self.ba,
                &self.bb,
                &bo,
                &bc,
                &self.brs,
                &self.bcs,
                &be,
                &self.bbits,
                &bk_keys,
            ],
        );
        let band = 0.05f32 * scale;
        // The streaming half (EPI 9 / 10 / 13 with CM2_STREAM): its pipeline, set and result
        // buffer.
        let sres = gpu.buffer((m as u64 * segs as u64 * 8).max(4), usage, dev_local);
        let stream_run = match (stream, epi) {
            (Some(sk), 9 | 10 | 13) => {
                let spipe = gpu
                    .pipeline(sk, &[(epi != 9) as u32])
                    .expect("the stream pipeline");
                Some((
                    sk,
                    spipe,
                    gpu.set(dpool, sk, &[&bk_keys, &sres]),
                    push(&[m, n, ns, seg], band),
                ))
            }
            _ => None,
        };
        let pc = push(&[m, n, k, nt], band);
        let run = |timed: bool, count: u32| {
            gpu.one_shot(|cb| unsafe {
                dev.cmd_reset_query_pool(cb, qpool, 0, 2);
                if timed {
                    dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, qpool, 0);
                }
                for _ in 0..count {
                    gpu.dispatch(cb, gemm, (pipe, set, &pc), (mt, nt));
                    if let Some((sk, spipe, sset, spc)) = &stream_run {
                        gpu.dispatch(cb, sk, (*spipe, *sset, spc), (m, segs));
                    }
                }
                if timed {
                    dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, qpool, 1);
                }
            });
        };
        let secs = self.time(run);
        let tiling = Tiling {
            epi,
            bm,
            bn,
            nt,
            segs,
        };
        self.report(
            cfg,
            &tiling,
            [&bo, &bc, &be, &sres],
            stream_run.is_some(),
            secs,
            compile_ms,
        );
        unsafe { dev.destroy_pipeline(pipe, None) };
        if let Some((_, spipe, ..)) = stream_run {
            unsafe { dev.destroy_pipeline(spipe, None) };
        }
        gpu.free(sres);
        gpu.free(bo);
        gpu.free(bc);
        gpu.free(be);
        gpu.free(bk_keys);
    }

    /// Seconds a dispatch of `run(timed, count)` takes, from its timestamps. Warms up for about
    /// 0.3 s first (the SM clock drops within seconds of idling, e.g. while the driver compiles
    /// the next pipeline): times 2 dispatches, then runs enough for 0.3 s.
    fn time(&self, run: impl Fn(bool, u32)) -> f64 {
        let w0 = std::time::Instant::now();
        run(false, 2);
        let per = w0.elapsed().as_secs_f64() / 2.0;
        run(false, ((0.3 / per.max(1e-6)) as u32).clamp(2, 4000));
        run(true, self.reps);
        let mut ts = [0u64; 2];
        unsafe {
            self.gpu.device.get_query_pool_results(
                self.qpool,
                0,
                &mut ts,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .unwrap();
        (ts[1] - ts[0]) as f64 * self.gpu.ts_period * 1e-9 / self.reps as f64
    }

    /// The checks of one configuration's outputs (`bufs`: out, counts, band entries, the
    /// streaming half's results) and its line.
    fn report(
        &self,
        cfg: &str,
        tiling: &Tiling,
        bufs: [&Buf; 4],
        streamed: bool,
        secs: f64,
        compile_ms: f64,
    ) {
        let Tiling {
            epi,
            bm,
            bn,
            nt,
            segs,
        } = *tiling;
        let [bo, bc, be, sres] = bufs;
        let (gpu, m, n) = (&self.gpu, self.m, self.n);
        // Check each sampled row's tile minimum (EPI 1) against float64 over the same fp16
        // inputs; out-of-range columns are zero (the layouts clamp).
        // EPI 3: the hits a row over the whole table (the threshold aims at about 1e-5 of keys).
        let mut hits = String::new();
        if epi == 16 {
            // (minimum, count) then 8 entries a (row, tile): the mean count and the overflows.
            let e: Vec<[u32; 2]> = bytemuck::cast_slice(&gpu.download(be)).to_vec();
            let pairs = m as usize * nt as usize;
            let counts: Vec<u32> = (0..pairs).map(|i| e[i * 9][1]).collect();
            let over = counts.iter().filter(|&&c| c > 8).count();
            hits = format!(
                ", band {:.2} keys a (row, tile), {:.4}% over 8",
                counts.iter().map(|&c| c as f64).sum::<f64>() / pairs as f64,
                100.0 * over as f64 / pairs as f64
            );
        }
        if epi == 3 || epi == 5 || epi == 8 {
            let c: Vec<u32> = bytemuck::cast_slice(&gpu.download(bc)).to_vec();
            let total: u64 = c.iter().map(|&x| x as u64).sum();
            hits = format!(", {:.3} hits a row", total as f64 / m as f64);
        }
        // The streaming half: each sampled row's minimum over every key (EPI 4's keys: the
        // product times the row's scalar plus the column's, INF where the shader's mask chose
        // the column: (column + row % BM) % 61 == 0), against float64 over the same inputs.
        let mut stream_note = String::new();
        if streamed {
            let r2: Vec<[f32; 2]> = bytemuck::cast_slice(&gpu.download(sres)).to_vec();
            let mut worst_rel = 0f64;
            for s in 0..8u32 {
                let r = (s * 7919 + 13) % m;
                let mut best = f64::INFINITY;
                for c in 0..n {
                    if (c + r % bm).is_multiple_of(61) {
                        continue;
                    }
                    best = best.min(
                        self.dot(r, c) * self.rs[r as usize] as f64 + self.cs[c as usize] as f64,
                    );
                }
                let row = &r2[(r * segs) as usize..((r + 1) * segs) as usize];
                let got = row.iter().map(|x| x[0]).fold(f32::INFINITY, f32::min) as f64;
                worst_rel = worst_rel.max((got - best).abs() / best.abs().max(1.0));
            }
            stream_note = format!(
                ", with the streaming half ({segs} segments a row); 8 row minima vs float64: worst relative diff {worst_rel:.2e}, segments' bands {:.1} keys (row 0)",
                r2[..segs as usize].iter().map(|x| x[1]).sum::<f32>()
            );
        }
        let mut worst = 0f64;
        let mut checked = 0;
        if epi == 1 {
            let o: Vec<f32> = bytemuck::cast_slice(&gpu.download(bo)).to_vec();
            for s in 0..24u32 {
                let r = (s * 7919 + 13) % m;
                let t = (s * 104_729 + 5) % nt;
                let mut best = f64::INFINITY;
                for c in t * bn..(t + 1) * bn {
                    best = best.min(if c < n { self.dot(r, c) } else { 0.0 });
                }
                let got = o[(r * nt + t) as usize] as f64;
                worst = worst.max((got - best).abs());
                checked += 1;
            }
        }
        println!(
            "{cfg}: {:.1} us a dispatch, {:.1} TFLOP/s (pipeline {:.0} ms){hits}{stream_note}{}",
            secs * 1e6,
            self.flops / secs * 1e-12,
            compile_ms,
            if checked > 0 {
                format!(", {checked} row minima vs float64: worst |diff| {worst:.2e}")
            } else {
                String::new()
            }
        );
    }
}
