//! Compiles the compute shaders to SPIR-V at build time with shaderc, once per storage precision
//! (`NAME.fp32.spv`, `NAME.fp16.spv` with `FP16` defined), into `OUT_DIR`: every
//! `shaders/*.comp` under its own name, and the variants of [`VARIANTS`] (one source, several
//! compiled shaders, as ggml's `vulkan-shaders-gen` does). `*.glsl` files are includes, resolved
//! from `shaders/`, never compiled alone. `shaders.txt` in `OUT_DIR` lists the names compiled,
//! one a line: `src/spirv.rs`'s unit test holds its shader list to it.
//!
//! `DIVERSITY_SHADER_DEFINES` (unset by default) adds preprocessor definitions to every shader,
//! `NAME=VALUE` or `NAME`, separated by spaces or commas: the build-time knobs of the shaders
//! (`FILTER_RG=8u`, `FILTER_SK=32u`, `FILTER_STAGED_EPI`, the profiles `FILTER_CLOCK` and
//! `GF_PROFILE`, …) for benchmark variants built from one tree.

use std::path::{Path, PathBuf};

// Links glslang and SPIRV-Tools into this build script (see glslang-link/build.rs).
use glslang_link as _;

/// Preprocessor definitions of a variant: (name, value).
type Defines = &'static [(&'static str, &'static str)];

/// Extra compiled shaders: (output name, source in `shaders/`, defines). The 128 × 128 scan
/// kernel (`ScanKernel::Block128`) is the Block64 entry points with `BIG`; the tensor-core
/// filter-and-judge scan (`ScanKernel::Coopmat`) is its scalar stand-in's with `COOPMAT`.
const VARIANTS: &[(&str, &str, Defines)] = &[
    ("scan_big", "scan.comp", &[("BIG", "1")]),
    ("gram_matrix_fixed", "gram_matrix.comp", &[("FIXED", "1")]),
    ("scan_big_tile", "scan_tile.comp", &[("BIG", "1")]),
    ("scan_big_commit", "scan_commit.comp", &[("BIG", "1")]),
    ("scan_filter_tc", "scan_filter.comp", &[("COOPMAT", "1")]),
    (
        "scan_filter_tc_tile",
        "scan_filter_tile.comp",
        &[("COOPMAT", "1")],
    ),
    ("scan_judge_tc", "scan_judge.comp", &[("COOPMAT", "1")]),
    ("scan_prep_tc", "scan_prep.comp", &[("COOPMAT", "1")]),
    ("scan_ftable_tc", "scan_ftable.comp", &[("COOPMAT", "1")]),
    (
        "scan_filter_probe_tc",
        "scan_filter_probe.comp",
        &[("COOPMAT", "1")],
    ),
];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let dir = Path::new("shaders");
    println!("cargo:rerun-if-changed=shaders");
    println!("cargo:rerun-if-env-changed=DIVERSITY_SHADER_DEFINES");
    let extra = std::env::var("DIVERSITY_SHADER_DEFINES").unwrap_or_default();
    let extra: Vec<(&str, Option<&str>)> = extra
        .split([' ', ','])
        .filter(|d| !d.is_empty())
        .map(|d| match d.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (d, None),
        })
        .collect();
    // The tensor-core filter's geometry knobs, for the host's block and workgroup sizes
    // (src/scan/mod.rs): the value given (without GLSL's `u`) or the shaders' default; and
    // JUDGE_ROWS, the most candidate rows the judge stages at a time (src/scan/plan.rs).
    for (knob, default) in [
        ("FILTER_WG", "128"),
        ("FILTER_TI", "2"),
        ("FILTER_SK", "0"),
        ("FILTER_DBUF", "0"),
        ("JUDGE_ROWS", "2"),
    ] {
        let value = extra
            .iter()
            .rev()
            .find(|(name, _)| *name == knob)
            .and_then(|(_, v)| *v)
            .map_or(default, |v| v.trim_end_matches('u'));
        println!("cargo:rustc-env=DIVERSITY_{knob}={value}");
    }
    let compiler = shaderc::Compiler::new().expect("shaderc compiler");
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("shaders/")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    let mut jobs: Vec<(String, PathBuf, Defines)> = Vec::new();
    for path in entries {
        println!("cargo:rerun-if-changed={}", path.display());
        if path.extension().and_then(|e| e.to_str()) != Some("comp") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        jobs.push((stem, path, &[]));
    }
    for &(name, source, defines) in VARIANTS {
        jobs.push((name.to_string(), dir.join(source), defines));
    }
    let names: Vec<&str> = jobs.iter().map(|(name, _, _)| name.as_str()).collect();
    std::fs::write(out.join("shaders.txt"), names.join("\n") + "\n").expect("write shaders.txt");
    for (name, path, defines) in jobs {
        let source =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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
            for &(macro_name, value) in defines {
                opts.add_macro_definition(macro_name, Some(value));
            }
            for &(macro_name, value) in &extra {
                opts.add_macro_definition(macro_name, value);
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
                .unwrap_or_else(|e| panic!("{name} ({}): {e}", path.display()));
            std::fs::write(out.join(format!("{name}.{suffix}.spv")), spv.as_binary_u8())
                .expect("write spv");
        }
    }
}
