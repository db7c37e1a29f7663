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

/// The driver compiled against the header and the plain library, in `tmp`.
fn build_driver(tmp: &TempDir) -> PathBuf {
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
    exe
}

/// Run the driver over the first `n` fortunes in batches of `batch` with `DIVERSITY_MODE` =
/// `mode` (None: unset) and check everything it wrote with the float64 oracle. Returns its
/// standard output.
fn run_driver(tag: &str, mode: Option<&str>, n: usize, batch: usize) -> String {
    run_driver_on(tag, mode, None, n, batch)
}

/// Whether every Vulkan device here is a CPU device (then sequences default to the host engine).
fn cpu_only() -> bool {
    diversity::Context::list_devices()
        .unwrap()
        .iter()
        .all(|d| d.device_type.eq_ignore_ascii_case("cpu"))
}

/// The `device` of [`run_driver_on`] for a machine without any Vulkan device.
const NO_VULKAN: &str = "(no Vulkan device)";

/// [`run_driver`] with `DIVERSITY_DEVICE` = `device` (None: as the test runs; [`NO_VULKAN`]: as
/// on a machine with no Vulkan driver).
fn run_driver_on(
    tag: &str,
    mode: Option<&str>,
    device: Option<&str>,
    n: usize,
    batch: usize,
) -> String {
    let tmp = TempDir::new(tag);
    let d = 384usize;
    let table = fortunes(n);
    let bytes: Vec<u8> = table.data().iter().flat_map(|v| v.to_le_bytes()).collect();
    let tab = tmp.file("table.f32", &bytes);
    let exe = build_driver(&tmp);
    let (out_all, out_single) = (tmp.path("all.u32"), tmp.path("single.u32"));
    // L2 = 64 KiB: the user's formula gives tiles of 72 rows, so scan chunks run tiled.
    // cargo puts target/<profile> on LD_LIBRARY_PATH, ahead of the program's run path.
    let mut cmd = Command::new(&exe);
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("DIVERSITY_MODE");
    if let Some(m) = mode {
        cmd.env("DIVERSITY_MODE", m);
    }
    match device {
        // A machine with no Vulkan device: the loader finds only a driver that does not exist.
        Some(NO_VULKAN) => {
            let icd = tmp.file(
                "none.json",
                br#"{"file_format_version": "1.0.0", "ICD": {"library_path": "/nonexistent/libnone.so", "api_version": "1.2.0"}}"#,
            );
            cmd.env("VK_ICD_FILENAMES", &icd)
                .env("VK_DRIVER_FILES", &icd)
                .env_remove("DIVERSITY_DEVICE");
        }
        Some(d) => {
            cmd.env("DIVERSITY_DEVICE", d);
        }
        // The shaders: where the best device is a CPU, sequences would run on the host engine
        // unless a device is named, so lavapipe is named (scripts/test.sh names it too).
        None if std::env::var_os("DIVERSITY_DEVICE").is_none() && cpu_only() => {
            cmd.env("DIVERSITY_DEVICE", "llvmpipe");
        }
        None => {}
    }
    let run = cmd
        .arg(&tab)
        .args([
            n.to_string(),
            d.to_string(),
            batch.to_string(),
            "65536".into(),
        ])
        .arg(&out_all)
        .arg(&out_single)
        .arg("17")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "old_driver: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("tile 72, 0 failed expectations"),
        "{stdout}"
    );
    // Every row of the whole cache is its start's sequence on the fp16 table, within ε of the
    // float64 argmax along its own prefix.
    let seqs = read_u32s(&out_all);
    assert_eq!(seqs.len(), n * n);
    let stored = table.as_stored(Precision::Fp16);
    for (i, row) in seqs.chunks_exact(n).enumerate() {
        assert_eq!(row[0], i as u32, "row {i} starts with its start");
        check_sequence(&stored, i as u32, row, EPS).unwrap_or_else(|v| panic!("row {i}: {v:?}"));
    }
    let single = read_u32s(&out_single);
    assert_eq!(single[0], 17);
    check_sequence(&table, 17, &single, EPS).unwrap_or_else(|v| panic!("single: {v:?}"));
    stdout
}

/// The seconds of the first and the median later init + sequence + destroy cycle.
fn cycles(stdout: &str) -> (f64, f64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("single-sequence cycles:"))
        .unwrap_or_else(|| panic!("no cycle line in {stdout}"));
    let nums: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[nums.len() - 1])
}

#[test]
fn an_old_style_c_driver_gets_the_gram_engine_for_the_whole_cache() {
    let stdout = run_driver("capi-auto", None, 200, 64);
    assert!(stdout.contains("engine: gram\n"), "{stdout}");
    // Repeated inits of the same table reuse its device copy and G: a later cycle costs its
    // sequence, a small part of the first (upload, G, pipelines).
    let (first, later) = cycles(&stdout);
    eprintln!("cycles: first {first:.4} s, later {later:.4} s");
    assert!(later < 0.5 * first, "{stdout}");
}

#[test]
fn the_unchanged_wrapper_runs_on_the_host_engine_where_there_is_no_gpu() {
    // "host" names the host engine wherever the test runs; "" (no device named) gets it by
    // default where the best device is a CPU.
    let cpu_only = cpu_only();
    for (device, tag) in [
        ("host", "capi-host"),
        ("", "capi-default"),
        (NO_VULKAN, "capi-no-vulkan"),
    ] {
        if device.is_empty() && !cpu_only {
            continue;
        }
        let stdout = run_driver_on(tag, None, Some(device), 160, 48);
        assert!(stdout.contains("engine: host gram\n"), "{stdout}");
        // The CPU's name and the host engine's memory budget.
        let line = stdout.lines().find(|l| l.starts_with("device: ")).unwrap();
        assert!(line.contains("(host engine), "), "{line}");
        let bytes: u64 = line
            .rsplit(", ")
            .next()
            .and_then(|w| w.strip_suffix(" bytes"))
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert_eq!(bytes, diversity::host::host_memory_budget(), "{line}");
    }
    // DIVERSITY_MODE=scan on the host: the float64 scan.
    let stdout = run_driver_on("capi-host-scan", Some("scan"), Some("host"), 90, 40);
    assert!(stdout.contains("engine: host scan\n"), "{stdout}");
}

#[test]
fn diversity_mode_scan_keeps_the_old_scan_path() {
    let stdout = run_driver("capi-scan", Some("scan"), 120, 50);
    assert!(stdout.contains("engine: scan\n"), "{stdout}");
}
