//! The C ABI of the old `libvkcompute.so` (src/capi.rs): a C program written the old way
//! (tests/c/old_driver.c, compiled here against include/vk_compute.h and linked with the built
//! library) runs a batch in chunks with tiles, one fp32 sequence, and misuses the API; every
//! sequence it writes is checked with the float64 oracle.

mod common;
use common::{fortunes, TempDir};
use diversity::reference::check_sequence;
use diversity::Precision;
use std::path::PathBuf;
use std::process::Command;

const EPS: f64 = 1e-5;

/// Whether a shared library has undefined references to the Lua C API (the LuaJIT module).
fn references_lua(lib: &std::path::Path) -> bool {
    let nm = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(lib)
        .output()
        .unwrap();
    assert!(nm.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&nm.stdout).contains(" lua_")
}

/// The plain cdylib (no `lua` feature), copied into `dir`: the one `cargo test` built with this
/// test in `target/<profile>/deps` — or, where scripts/build-lua.sh wrote the LuaJIT module over
/// it since (same file name), the one `cargo build --release --lib` makes.
fn plain_library(dir: &std::path::Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let mut lib = deps.join("libdiversity.so");
    assert!(
        lib.exists(),
        "{}: cargo builds the cdylib with the tests",
        lib.display()
    );
    if references_lua(&lib) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "--release", "--lib"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(st.success(), "cargo build --release --lib");
        lib = deps.parent().unwrap().join("libdiversity.so");
        assert!(
            !references_lua(&lib),
            "{} is still the LuaJIT module",
            lib.display()
        );
    }
    std::fs::copy(&lib, dir.join("libdiversity.so")).unwrap();
    dir.to_path_buf()
}

fn read_u32s(p: &std::path::Path) -> Vec<u32> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn an_old_style_c_driver_runs_against_the_library() {
    let tmp = TempDir::new("capi");
    let (n, d, batch) = (300usize, 384usize, 6usize);
    let table = fortunes(n);
    let bytes: Vec<u8> = table.data().iter().flat_map(|v| v.to_le_bytes()).collect();
    let tab = tmp.file("table.f32", &bytes);
    let exe = tmp.path("old_driver");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib = plain_library(&tmp.path(""));
    let cc = Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("include"))
        .arg(root.join("tests/c/old_driver.c"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-ldiversity", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let (out_batch, out_single) = (tmp.path("batch.u32"), tmp.path("single.u32"));
    // L2 = 64 KiB: the user's formula gives tiles of 72 rows, so the chunks run tiled.
    // cargo puts target/<profile> on LD_LIBRARY_PATH, ahead of the program's run path.
    let run = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .arg(&tab)
        .args([
            n.to_string(),
            d.to_string(),
            batch.to_string(),
            "65536".into(),
        ])
        .arg(&out_batch)
        .arg(&out_single)
        .arg("17")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "old_driver: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("tile 72, 0 failed expectations"),
        "{stdout}"
    );
    // Every batch row is its start's sequence on the fp16 table, within ε of the float64 argmax.
    let seqs = read_u32s(&out_batch);
    assert_eq!(seqs.len(), batch * n);
    let stored = table.as_stored(Precision::Fp16);
    for (i, row) in seqs.chunks_exact(n).enumerate() {
        let start = (i * n / batch) as u32;
        assert_eq!(row[0], start, "row {i} starts with its start");
        check_sequence(&stored, start, row, EPS).unwrap_or_else(|v| panic!("row {i}: {v:?}"));
    }
    let single = read_u32s(&out_single);
    assert_eq!(single[0], 17);
    check_sequence(&table, 17, &single, EPS).unwrap_or_else(|v| panic!("single: {v:?}"));
}
