//! Debian's `libshaderc_combined.a` (libshaderc-dev) leaves glslang's and SPIRV-Tools' symbols
//! undefined. A build script cannot add link flags for itself, so diversity's build script
//! depends on this crate, whose link instructions reach every binary that links it. `-bundle`
//! keeps the archives out of this crate's rlib: rustc passes them after every Rust crate, so they
//! resolve what shaderc's archive (inside shaderc-sys's rlib) leaves open.

const STATIC: &[&str] = &[
    "glslang",
    "MachineIndependent",
    "GenericCodeGen",
    "OSDependent",
    "OGLCompiler",
    "HLSL",
    "SPIRV",
    "SPIRV-Tools-opt",
    "SPIRV-Tools",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GLSLANG_LIB_DIR");
    let dir = std::env::var("GLSLANG_LIB_DIR")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu".to_string());
    println!("cargo:rustc-link-search=native={dir}");
    for lib in STATIC {
        println!("cargo:rustc-link-lib=static:-bundle={lib}");
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
