//! Nothing to call: linking this crate links Debian's static glslang and SPIRV-Tools (see
//! `build.rs`). diversity's build script names it (`use glslang_link as _;`) so that rustc keeps it.
#![no_std]
