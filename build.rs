//! Compiles every `shaders/*.comp` to SPIR-V at build time with shaderc, once per storage
//! precision (`NAME.fp32.spv`, `NAME.fp16.spv` with `FP16` defined), into `OUT_DIR`.

use std::path::{Path, PathBuf};

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let dir = Path::new("shaders");
    println!("cargo:rerun-if-changed=shaders");
    let compiler = shaderc::Compiler::new().expect("shaderc compiler");
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("shaders/")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        println!("cargo:rerun-if-changed={}", path.display());
        if path.extension().and_then(|e| e.to_str()) != Some("comp") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("read shader");
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        for (suffix, fp16) in [("fp32", false), ("fp16", true)] {
            let mut opts = shaderc::CompileOptions::new().expect("shaderc options");
            opts.set_target_env(
                shaderc::TargetEnv::Vulkan,
                shaderc::EnvVersion::Vulkan1_2 as u32,
            );
            opts.set_optimization_level(shaderc::OptimizationLevel::Performance);
            if fp16 {
                opts.add_macro_definition("FP16", Some("1"));
            }
            opts.set_include_callback(|name, _ty, _from, _depth| {
                let p = dir.join(name);
                std::fs::read_to_string(&p)
                    .map(|content| shaderc::ResolvedInclude {
                        resolved_name: p.display().to_string(),
                        content,
                    })
                    .map_err(|e| format!("{}: {e}", p.display()))
            });
            let spv = compiler
                .compile_into_spirv(
                    &source,
                    shaderc::ShaderKind::Compute,
                    &path.display().to_string(),
                    "main",
                    Some(&opts),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            std::fs::write(out.join(format!("{stem}.{suffix}.spv")), spv.as_binary_u8())
                .expect("write spv");
        }
    }
}
