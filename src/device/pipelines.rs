//! The context's pipeline cache and its one entry point, [`Context::pipeline_for`]: one compute
//! pipeline per shader (a [`Shader`] of `spirv.rs`, which carries its name), storage precision,
//! specialization and push-constant block, created on first use over the context's one
//! descriptor-set layout and kept until the context closes; with `DIVERSITY_PIPELINE_STATS`,
//! each new pipeline's driver statistics. Every error names the shader.
//! Touches the device's pipeline objects only.

use super::Context;
use crate::error::{Error, Result, VkContext};
use crate::spirv::{check_spec_constants, checked_push, Shader};
use crate::table::Precision;
use ash::vk;
use std::fmt::Write as _;
use std::sync::Arc;

/// Which shader (by its name, unique among the compiled shaders), which of its two compiled
/// variants, which specialization and push block size: the key of the context's pipeline cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    shader: &'static str,
    precision: Precision,
    spec: Vec<u32>,
    push_bytes: u32,
}

/// A compute pipeline over the context's one descriptor-set layout.
pub(crate) struct Pipeline {
    pub pipeline: vk::Pipeline,
    pub layout: vk::PipelineLayout,
}

impl Context {
    /// The compute pipeline of `shader` for tables stored at `precision` (the SPIR-V variant it
    /// runs), specialization constant i = `spec[i]`, with push block `P`: created once per
    /// context and cached. At creation `P`'s size is checked against the shader's push-constant
    /// block and `spec` against the constants it declares; an error names the shader.
    pub(crate) fn pipeline_for<P>(
        &self,
        shader: &Shader,
        precision: Precision,
        spec: &[u32],
    ) -> Result<Arc<Pipeline>> {
        let key = PipelineKey {
            shader: shader.name,
            precision,
            spec: spec.to_vec(),
            push_bytes: std::mem::size_of::<P>() as u32,
        };
        let mut cache = self
            .inner
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        checked_push::<P>(shader)?;
        // Constant i is the list's i-th value: the list must cover exactly the shader's ids.
        check_spec_constants(shader, precision, spec)?;
        let spirv = shader.spirv(precision);
        let dev = self.device();
        let words: Vec<u32> = spirv
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
            eprintln!(
                "{}",
                self.pipeline_statistics(pipeline, shader.name, &key.spec)
            );
        }
        super::OpCounters::bump(&self.inner.ops.pipelines);
        let p = Arc::new(Pipeline { pipeline, layout });
        cache.insert(key, p.clone());
        Ok(p)
    }

    /// One line of the driver's statistics of `pipeline` (see [`super::Capabilities::pipeline_stats`]).
    fn pipeline_statistics(&self, pipeline: vk::Pipeline, name: &str, spec: &[u32]) -> String {
        let ext = ash::khr::pipeline_executable_properties::Device::new(
            &self.inner.instance,
            &self.inner.device,
        );
        let mut line = format!("pipeline statistics ({name}, spec {spec:?}):");
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
}
