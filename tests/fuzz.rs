//! A bounded, deterministic mutation fuzzer of every file loader and reader (no input
//! crashes the process or corrupts a result), plus focused regression tests of what it found.
//!
//! Seeds are small valid files from the project's own writers and slices of the bundled data;
//! each input is a seed put through 1–4 mutations (bit flips, byte inserts and deletes,
//! truncation, header and length fields overwritten with huge or negative values, nested
//! brackets, duplicated keys, NaN/Inf text, splices of two seeds, a `.npy` header edited as text
//! with its length field kept right, a k-NN header's words replaced). Every input is written to
//! a temporary file and loaded under `catch_unwind` with a counting allocator armed:
//!
//! - an `Err` whose message names the file is a clean outcome;
//! - an accepted input must give a valid result (a table of N × D finite values, ids for every
//!   row; cache and graph entries below N);
//! - a panic, an abort (stack overflow, a refused allocation of more than 1 GiB), a hang, a
//!   peak of live allocations beyond `64 × input + 1 MiB` or an error that names no file is a
//!   crash: its iteration and seed and mutations are printed and the input is saved under
//!   `tests/fuzz-corpus/<target>-i<iteration>-<seed>/` (files plus `case.txt`), which every run
//!   replays first.
//!
//! The loop runs in a child process (this test binary again, running `fuzz_child`) so that an
//! abort is reported and the run goes on from the next input. `DIVERSITY_FUZZ_ITERS` sets the
//! number of generated inputs (default [`DEFAULT_ITERS`], sized for CI, and then cut off after
//! [`CI_SECS`] whatever it reached);
//! `DIVERSITY_FUZZ_ONLY=<iteration>` runs that one input alone, printing what it is.
//!
//! The IVF-Flat and IVF-PQ index files are fuzzed in this process instead (their loaders upload
//! to a device): 400 mutations of each, refused naming the file or loaded whole, never a panic.

mod common;
use common::{fnv, TempDir};
use diversity::cache::{
    merge_caches, merge_graphs, merge_rankings, BinaryCache, BinaryCacheWriter, JsonCacheWriter,
    KnnGraph, KnnGraphShard, KnnGraphWriter, KnnMetric, RankingsWriter, ShardLayout,
};
use diversity::cache::{KNN_HEADER, KNN_PAD};
use diversity::error::Error;
use diversity::files::{
    load_embeddings_json, load_f32, load_fp16_bin, load_ids, load_npy, load_table, save_fp16_bin,
    save_ids, save_npy_f16, save_npy_f32,
};
use diversity::ivf::{IvfFlat, IvfOptions, IvfPq, IvfPqOptions, KMeansOptions};
use diversity::table::{Precision, Table};
use diversity::Metric;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Generated inputs of a plain `cargo test --release` run (about 30 s on 2 idle cores, twice
/// that on busy ones).
const DEFAULT_ITERS: u64 = 500_000;
/// The fixed seed every input derives from.
const BASE_SEED: u64 = 0xD1CE_5EED_0016_F022;
/// An allocation larger than this while a loader runs is refused (the process aborts, which the
/// parent reports): no input of this fuzzer is near it.
const HARD_CAP: usize = 1 << 30;
/// Seconds one input may take before the parent calls it a hang.
const HANG_SECS: u64 = 20;
/// Seconds after which a default-sized run stops generating inputs, whatever it reached (a slow
/// disk or a busy machine must not push CI past its budget); a run sized by
/// `DIVERSITY_FUZZ_ITERS` has no limit.
const CI_SECS: u64 = 150;

/// Seconds since the Unix epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// ---------------------------------------------------------------------------------------------
// The counting allocator: per-thread live bytes and their peak while armed.

struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn armed() -> bool {
    ARMED.try_with(Cell::get).unwrap_or(false)
}

fn grow(bytes: usize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get().saturating_add(bytes);
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

fn shrink(bytes: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(bytes)));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if armed() {
            if layout.size() > HARD_CAP {
                return std::ptr::null_mut();
            }
            grow(layout.size());
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if armed() {
            if layout.size() > HARD_CAP {
                return std::ptr::null_mut();
            }
            grow(layout.size());
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if armed() {
            shrink(layout.size());
        }
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if armed() {
            if new_size > HARD_CAP {
                return std::ptr::null_mut();
            }
            shrink(layout.size());
            grow(new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Run `f` with the allocator armed on this thread; the peak of live bytes it reached.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    ARMED.with(|a| a.set(true));
    let out = f();
    ARMED.with(|a| a.set(false));
    (out, PEAK.with(Cell::get))
}

/// The most a loader may hold at once for an input of `input` bytes.
fn budget(input: usize) -> usize {
    input.saturating_mul(64) + (1 << 20)
}

/// [`budget`] for `target`: a merge also writes its output through a fixed 1 MiB buffer (a
/// constant, not a size read from the input).
fn budget_for(target: Target, input: usize) -> usize {
    budget(input) + if target == Target::Merge { 2 << 20 } else { 0 }
}

// ---------------------------------------------------------------------------------------------
// Randomness: splitmix64 for per-input seeds, xorshift64* for the stream.

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n ≥ 1).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The seed of generated input `iter`.
fn input_seed(iter: u64) -> u64 {
    splitmix(BASE_SEED ^ iter.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

// ---------------------------------------------------------------------------------------------
// Cases: which reader, which files.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Npy,
    Json,
    F32,
    Fp16Bin,
    Ids,
    Table,
    BinCache,
    Knn,
    Merge,
}

const TARGETS: [Target; 9] = [
    Target::Npy,
    Target::Json,
    Target::F32,
    Target::Fp16Bin,
    Target::Ids,
    Target::Table,
    Target::BinCache,
    Target::Knn,
    Target::Merge,
];

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Npy => "npy",
            Target::Json => "json",
            Target::F32 => "f32",
            Target::Fp16Bin => "fp16bin",
            Target::Ids => "ids",
            Target::Table => "table",
            Target::BinCache => "bincache",
            Target::Knn => "knn",
            Target::Merge => "merge",
        }
    }
    fn from_name(s: &str) -> Option<Target> {
        TARGETS.into_iter().find(|t| t.name() == s)
    }
}

/// One input: the reader, its files (name, bytes), the file it is handed and its parameters.
#[derive(Clone, Debug)]
struct Case {
    target: Target,
    files: Vec<(String, Vec<u8>)>,
    main: String,
    dim: Option<usize>,
    expect: bool,
}

/// The space and checksum of the fp16 seed's sidecar (what `expect` asks for).
const FP16_SPACE: &str = "raw";
const FP16_CHECKSUM: &str = "fnv1a64:0123456789abcdef";

/// What happened to one input.
enum Outcome {
    Clean,
    Accepted,
    Crash(String),
}

fn total_len(case: &Case) -> usize {
    case.files.iter().map(|(_, b)| b.len()).sum()
}

/// Write the case's files into `dir`, removing any other file there.
fn write_case(dir: &Path, case: &Case) {
    std::fs::create_dir_all(dir).expect("create case dir");
    for e in std::fs::read_dir(dir).expect("read case dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !case.files.iter().any(|(n, _)| *n == name) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    for (name, bytes) in &case.files {
        std::fs::write(dir.join(name), bytes).expect("write case file");
    }
}

/// Whether a table is valid: N, D ≥ 1, N × D finite values, ids (if any) one a row.
fn check_table(t: &Table) -> Result<(), String> {
    if t.n() == 0 || t.d() == 0 {
        return Err(format!("accepted a table of shape {} × {}", t.n(), t.d()));
    }
    if t.n().checked_mul(t.d()) != Some(t.data().len()) {
        return Err(format!(
            "accepted a table of {} values for N × D = {} × {}",
            t.data().len(),
            t.n(),
            t.d()
        ));
    }
    if let Some(p) = t.data().iter().position(|v| !v.is_finite()) {
        return Err(format!("accepted a non-finite value at {p}"));
    }
    if let Some(ids) = t.ids() {
        if ids.len() != t.n() {
            return Err(format!("accepted {} ids for {} rows", ids.len(), t.n()));
        }
    }
    Ok(())
}

/// The error counts as clean when it names a file of the case.
fn check_error(dir: &Path, e: &Error) -> Result<(), String> {
    let msg = e.to_string();
    if msg.contains(&dir.display().to_string()) {
        Ok(())
    } else {
        Err(format!("an error that names no file: {msg}"))
    }
}

type Checked = Result<bool, String>;

fn table_result(dir: &Path, r: diversity::error::Result<Table>) -> Checked {
    match r {
        Ok(t) => check_table(&t).map(|_| true),
        Err(e) => check_error(dir, &e).map(|_| false),
    }
}

/// Call the case's reader on the files in `dir`: Ok(true) accepted and valid, Ok(false) a clean
/// error, Err(why) a wrong result.
fn call_reader(dir: &Path, case: &Case) -> Checked {
    let path = dir.join(&case.main);
    match case.target {
        Target::Npy => table_result(dir, load_npy(&path)),
        Target::Json => table_result(dir, load_embeddings_json(&path)),
        Target::F32 => {
            let dim = case.dim.unwrap_or(1);
            let r = load_f32(&path, dim);
            if let Ok(t) = &r {
                let want = t.n().checked_mul(dim).and_then(|v| v.checked_mul(4));
                if t.d() != dim || want != Some(total_len(case)) {
                    return Err(format!(
                        "accepted {} × {} from {} bytes with dim {dim}",
                        t.n(),
                        t.d(),
                        total_len(case)
                    ));
                }
            }
            table_result(dir, r)
        }
        Target::Fp16Bin => {
            let expect = case.expect.then_some((FP16_SPACE, FP16_CHECKSUM));
            table_result(dir, load_fp16_bin(&path, expect))
        }
        Target::Ids => match load_ids(&path, 3, IDS_SOURCE) {
            Ok(_) => Ok(true),
            Err(e) => check_error(dir, &e).map(|_| false),
        },
        Target::Table => table_result(dir, load_table(&path, case.dim)),
        Target::BinCache => {
            let opened = match BinaryCache::open(&path) {
                Ok(c) => Some(c),
                Err(e) => {
                    check_error(dir, &e)?;
                    None
                }
            };
            if let Some(mut c) = opened {
                let (n, len) = (c.n(), c.len());
                for s in [0, n / 2, n.saturating_sub(1), n, u32::MAX as usize] {
                    let Ok(s32) = u32::try_from(s) else { continue };
                    match c.sequence(s32) {
                        Ok(row) => {
                            if s >= n || row.len() != len || row.iter().any(|&v| v as usize >= n) {
                                return Err(format!(
                                    "sequence({s}) of N = {n}, L = {len} gave {} entries {:?}",
                                    row.len(),
                                    &row[..row.len().min(8)]
                                ));
                            }
                        }
                        Err(Error::Invalid(m)) if s >= n => {
                            if !m.contains(&dir.display().to_string()) {
                                return Err(format!("an error that names no file: {m}"));
                            }
                        }
                        Err(e) => check_error(dir, &e)?,
                    }
                }
            }
            match BinaryCache::read_all(&path) {
                Ok((n, flat)) => {
                    if n == 0 || flat.is_empty() || flat.len() % n != 0 {
                        return Err(format!("read_all gave N = {n} and {} entries", flat.len()));
                    }
                    if let Some(v) = flat.iter().find(|&&v| v as usize >= n) {
                        return Err(format!("read_all gave entry {v} for N = {n}"));
                    }
                    Ok(true)
                }
                Err(e) => check_error(dir, &e).map(|_| false),
            }
        }
        Target::Merge => {
            // Both shard files of the case are the inputs; the merged cache must be JSON.
            let inputs: Vec<PathBuf> = case.files.iter().map(|(n, _)| dir.join(n)).collect();
            let out = dir.join("merged.json");
            match merge_caches(&inputs, &out) {
                Ok(r) => {
                    let text = std::fs::read(&out).map_err(|e| e.to_string())?;
                    let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
                        format!("merged {} sequences into invalid JSON: {e}", r.sequences)
                    })?;
                    if v["sequences"].as_object().map(|m| m.len()) != Some(r.sequences) {
                        return Err(format!(
                            "merged {} sequences, the file holds others",
                            r.sequences
                        ));
                    }
                    Ok(true)
                }
                Err(e) => check_error(dir, &e).map(|_| false),
            }
        }
        Target::Knn => {
            let mut g = match KnnGraph::open(&path) {
                Ok(g) => g,
                Err(e) => return check_error(dir, &e).map(|_| false),
            };
            let (n, k) = (g.n(), g.k());
            let size = total_len(case) as u64;
            if n == 0
                || k == 0
                || (n as u128) * (k as u128) * 8 + KNN_HEADER as u128 != size as u128
            {
                return Err(format!(
                    "opened a graph of N = {n}, k = {k} from {size} bytes"
                ));
            }
            for item in [0, n / 2, n - 1] {
                match g.row(item as u32) {
                    Ok((ids, values)) => {
                        if ids.len() != k
                            || values.len() != k
                            || ids.iter().any(|&v| v != KNN_PAD && v as usize >= n)
                        {
                            return Err(format!("row({item}) gave a bad row"));
                        }
                    }
                    Err(e) => check_error(dir, &e)?,
                }
            }
            Ok(true)
        }
    }
}

/// The last panic's message, kept by the quiet panic hook.
static PANIC_MSG: Mutex<String> = Mutex::new(String::new());

fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let mut m = PANIC_MSG.lock().unwrap_or_else(|e| e.into_inner());
        *m = info.to_string();
    }));
}

/// Write the case to `dir` and run its reader, measured and under `catch_unwind`.
fn run_case(dir: &Path, case: &Case) -> Outcome {
    write_case(dir, case);
    let input = total_len(case);
    let (r, peak) = measured(|| catch_unwind(AssertUnwindSafe(|| call_reader(dir, case))));
    match r {
        Err(_) => {
            let m = PANIC_MSG.lock().unwrap_or_else(|e| e.into_inner()).clone();
            Outcome::Crash(format!("panic: {m}"))
        }
        Ok(_) if peak > budget_for(case.target, input) => Outcome::Crash(format!(
            "allocated {peak} bytes at once for {input} bytes of input (budget {})",
            budget_for(case.target, input)
        )),
        Ok(Err(why)) => Outcome::Crash(why),
        Ok(Ok(true)) => Outcome::Accepted,
        Ok(Ok(false)) => Outcome::Clean,
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds.

fn sample(n: usize, d: usize) -> Table {
    let data = (0..n * d)
        .map(|i| ((i as f32) * 0.37 - 3.1).sin() * 10f32.powi((i % 5) as i32 - 2))
        .collect();
    Table::new(data, n, d).expect("sample table")
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus")
}

/// The seeds of every target, written by the project's writers into `dir`.
fn seeds(dir: &Path) -> Vec<Case> {
    std::fs::create_dir_all(dir).expect("seed dir");
    let read = |name: &str| std::fs::read(dir.join(name)).expect("read seed");
    let one = |target: Target, main: &str, bytes: Vec<u8>| Case {
        target,
        files: vec![(main.to_string(), bytes)],
        main: main.to_string(),
        dim: None,
        expect: false,
    };
    let mut out = Vec::new();

    // .npy: float32 and float16 from the writers, slices of the bundled arrays, versions 2 and 3,
    // a Python 2 header.
    let mut npys = Vec::new();
    save_npy_f32(&dir.join("a.npy"), &sample(3, 5)).unwrap();
    npys.push(read("a.npy"));
    save_npy_f16(&dir.join("b.npy"), &sample(4, 3)).unwrap();
    npys.push(read("b.npy"));
    save_npy_f32(&dir.join("c.npy"), &sample(1, 1)).unwrap();
    npys.push(read("c.npy"));
    for (name, rows) in [("fortunes-2k.npy", 2), ("fortunes-5k.npy", 1)] {
        let t = load_npy(&data_dir().join(name)).expect("bundled data");
        let t = t.head(rows).unwrap();
        let t = Table::new(t.data()[..rows * 24].to_vec(), rows, 24).unwrap();
        save_npy_f16(&dir.join("d.npy"), &t).unwrap();
        npys.push(read("d.npy"));
    }
    let v1 = npys[0].clone();
    let header_len = u16::from_le_bytes([v1[8], v1[9]]) as usize;
    for major in [2u8, 3] {
        let mut v = b"\x93NUMPY".to_vec();
        v.extend_from_slice(&[major, 0]);
        v.extend_from_slice(&(header_len as u32).to_le_bytes());
        v.extend_from_slice(&v1[10..]);
        npys.push(v);
    }
    let py2 = String::from_utf8_lossy(&v1[10..10 + header_len]).replace("(3, 5)", "(3L, 5L)");
    let mut v = v1[..8].to_vec();
    v.extend_from_slice(&(py2.len() as u16).to_le_bytes());
    v.extend_from_slice(py2.as_bytes());
    v.extend_from_slice(&v1[10 + header_len..]);
    npys.push(v);
    for b in &npys {
        out.push(one(Target::Npy, "x.npy", b.clone()));
    }

    // embeddings.json: with ids and poem_index (out of order), without ids, a bundled slice.
    let mut jsons = Vec::new();
    jsons.push(
        br#"{"metadata":{"model":"m","dim":4},"embeddings":[{"poem_index":2,"id":"c","embedding":[0.5,-1.25,3e-3,7]},{"poem_index":0,"id":"a","embedding":[1,2,3,4]},{"poem_index":1,"id":17,"embedding":[-0.0,1e10,-2.5e-7,0.1]}]}"#
            .to_vec(),
    );
    jsons.push(br#"{"embeddings":[{"embedding":[1.5,2]},{"embedding":[3,-4.75]}]}"#.to_vec());
    {
        let text = std::fs::read(data_dir().join("fortunes-300.embeddings.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        let e = v["embeddings"].as_array_mut().unwrap();
        e.truncate(3);
        for entry in e.iter_mut() {
            entry["embedding"].as_array_mut().unwrap().truncate(12);
        }
        jsons.push(serde_json::to_vec_pretty(&v).unwrap());
    }
    for b in &jsons {
        out.push(one(Target::Json, "x.json", b.clone()));
    }

    // .f32: raw rows, read with a dimension.
    let raw: Vec<u8> = sample(3, 4)
        .data()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut f32s = one(Target::F32, "x.f32", raw.clone());
    f32s.dim = Some(4);
    out.push(f32s);

    // fp16 .bin with its sidecar.
    save_fp16_bin(&dir.join("x.bin"), &sample(3, 4), FP16_SPACE, FP16_CHECKSUM).unwrap();
    let bin = Case {
        target: Target::Fp16Bin,
        files: vec![
            ("x.bin".into(), read("x.bin")),
            ("x.bin.json".into(), read("x.bin.json")),
        ],
        main: "x.bin".into(),
        dim: None,
        expect: true,
    };
    out.push(bin.clone());

    // ids.
    save_ids(
        &dir.join("x.ids.json"),
        Some(&[1.into(), "two".into(), serde_json::json!(3.5)]),
        3,
        IDS_SOURCE,
    )
    .unwrap();
    out.push(one(Target::Ids, "x.ids.json", read("x.ids.json")));

    // load_table: the same contents under its four extensions.
    for b in npys.iter().take(2) {
        out.push(one(Target::Table, "x.npy", b.clone()));
    }
    out.push(one(Target::Table, "x.json", jsons[0].clone()));
    let mut t = one(Target::Table, "x.f32", raw);
    t.dim = Some(3);
    out.push(t);
    out.push(Case {
        target: Target::Table,
        ..bin
    });

    // Binary caches: full sequences and top_k rows.
    for (n, len) in [(5usize, 5usize), (4, 2)] {
        let p = dir.join("x.cache");
        let mut w = BinaryCacheWriter::create(&p, n, len).unwrap();
        for s in 0..n as u32 {
            let seq: Vec<u32> = (0..len as u32).map(|j| (s + j) % n as u32).collect();
            w.write_row(s, &seq).unwrap();
        }
        w.finish().unwrap();
        out.push(one(Target::BinCache, "x.cache", read("x.cache")));
    }

    // Shards of a --shard run, as merge_caches reads them: 5 starts in 2 contiguous shards, with
    // row indices and with ids.
    for ids in [None, Some(vec!["a", "b", "c", "d", "e", "f"])] {
        let ids: Option<Vec<serde_json::Value>> =
            ids.map(|v| v.into_iter().map(serde_json::Value::from).collect());
        let starts = [4u32, 0, 2, 5, 1];
        let mut files = Vec::new();
        for (i, part) in [(1usize, &starts[..3]), (2, &starts[3..])] {
            let name = format!("s{i}.json");
            let meta = serde_json::json!({
                "generated_at": "2026-01-01T00:00:00Z",
                "top_k": 2,
                "shard": format!("{i}/2"),
                "shard_layout": "contiguous",
                "shard_starts_total": 5,
                "shard_starts_fingerprint": "fnv1a32:00000000",
                "shard_table_checksum": "fnv1a64:0123456789abcdef",
            });
            let mut w = JsonCacheWriter::create(&dir.join(&name), &meta, ids.clone()).unwrap();
            for &st in part {
                w.write_sequence(st, &[st, (st + 1) % 6, (st + 3) % 6])
                    .unwrap();
            }
            w.finish().unwrap();
            files.push((name.clone(), read(&name)));
        }
        out.push(Case {
            target: Target::Merge,
            files,
            main: "s1.json".into(),
            dim: None,
            expect: false,
        });
    }

    // k-NN graphs: cosine without padding, L2 with.
    {
        let p = dir.join("x.knn");
        let mut w = KnnGraphWriter::create(&p, 5, 2, KnnMetric::Cosine).unwrap();
        for i in 0..5u32 {
            w.write_row(i, &[(i + 1) % 5, (i + 2) % 5], &[0.9, 0.5])
                .unwrap();
        }
        w.finish().unwrap();
        out.push(one(Target::Knn, "x.knn", read("x.knn")));
        let mut w = KnnGraphWriter::create(&p, 3, 3, KnnMetric::L2).unwrap();
        for i in 0..3u32 {
            w.write_row(
                i,
                &[(i + 1) % 3, (i + 2) % 3, KNN_PAD],
                &[1.0, 2.0, f32::INFINITY],
            )
            .unwrap();
        }
        w.finish().unwrap();
        out.push(one(Target::Knn, "x.knn", read("x.knn")));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Mutations.

const INTERESTING: [u64; 18] = [
    0,
    1,
    2,
    0x7F,
    0xFF,
    0xFFFF,
    0x1_0000,
    0x4000_0000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    0x1_0000_0000,
    1 << 61,
    1 << 62,
    0x7FFF_FFFF_FFFF_FFFF,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
];

const TOKENS: [&str; 16] = [
    "99999999999999999999999999999",
    "-1",
    "-0",
    "0",
    "1e309",
    "-1e309",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e-400",
    "4294967296",
    "18446744073709551616",
    "2147483648",
    "-9223372036854775809",
    "3.4e39",
    "65536",
];

const BYTES: [u8; 16] = [
    0, 0xFF, 0x7F, 0x80, b'(', b'[', b'{', b'"', b'\'', b',', b':', b'-', b'9', b'}', b')', 0x93,
];

/// Positions of the digit runs of `b` (start, end).
fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_digit() || b".eE+-".contains(&b[i])) {
                i += 1;
            }
            runs.push((s, i));
        } else {
            i += 1;
        }
    }
    runs
}

/// Starts of quoted keys (`'k':` or `"k":`) and the end of their pair (the next `,` or `}`).
fn key_pairs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, &q) in b.iter().enumerate() {
        if q != b'"' && q != b'\'' {
            continue;
        }
        let Some(len) = b[i + 1..].iter().position(|&c| c == q) else {
            continue;
        };
        let mut j = i + 1 + len + 1;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        if b.get(j) != Some(&b':') {
            continue;
        }
        let end = b[j..]
            .iter()
            .position(|&c| c == b',' || c == b'}')
            .map_or(b.len(), |p| j + p);
        out.push((i, end));
    }
    out
}

/// One text-or-bytes mutation of `b` in place; its description.
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>, others: &[Vec<u8>]) -> String {
    let len = b.len();
    match rng.below(13) {
        0 if len > 0 => {
            let k = 1 + rng.below(8);
            for _ in 0..k {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            format!("flip {k} bits")
        }
        1 if len > 0 => {
            let i = rng.below(len);
            b[i] = *rng.pick(&BYTES);
            format!("byte {i} = {:#x}", b[i])
        }
        2 => {
            let i = rng.below(len + 1);
            let k = 1 + rng.below(16);
            let ins: Vec<u8> = (0..k).map(|_| rng.next() as u8).collect();
            b.splice(i..i, ins);
            format!("insert {k} bytes at {i}")
        }
        3 if len > 0 => {
            let i = rng.below(len);
            let k = 1 + rng.below((len - i).min(32));
            b.drain(i..i + k);
            format!("delete {k} bytes at {i}")
        }
        4 => {
            let at = rng.below(len + 1);
            b.truncate(at);
            format!("truncate to {at}")
        }
        5 if len > 0 => {
            let width = *rng.pick(&[1usize, 2, 4, 8]);
            let at = if rng.chance(60) {
                rng.below(len.min(32))
            } else {
                rng.below(len)
            };
            let v = if rng.chance(80) {
                *rng.pick(&INTERESTING)
            } else {
                rng.next()
            };
            let bytes = v.to_le_bytes();
            for (j, &x) in bytes[..width].iter().enumerate() {
                if let Some(slot) = b.get_mut(at + j) {
                    *slot = x;
                }
            }
            format!("field at {at} ({width} bytes) = {v:#x}")
        }
        6 if len > 0 => {
            let i = rng.below(len);
            let k = 1 + rng.below((len - i).min(64));
            let times = 2 + rng.below(200);
            let chunk = b[i..i + k].to_vec();
            let rep: Vec<u8> = chunk.iter().copied().cycle().take(k * times).collect();
            b.splice(i..i + k, rep);
            format!("repeat {k} bytes at {i} × {times}")
        }
        7 if !others.is_empty() => {
            let o = rng.pick(others);
            let cut = rng.below(len + 1);
            let from = rng.below(o.len() + 1);
            b.truncate(cut);
            b.extend_from_slice(&o[from..]);
            format!("splice at {cut} with another seed from {from}")
        }
        8 => {
            let runs = digit_runs(b);
            let tok = *rng.pick(&TOKENS);
            if runs.is_empty() {
                let i = rng.below(len + 1);
                b.splice(i..i, tok.bytes());
                return format!("insert {tok} at {i}");
            }
            let (s, e) = *rng.pick(&runs);
            b.splice(s..e, tok.bytes());
            format!("number at {s} = {tok}")
        }
        9 => {
            let open = *rng.pick(b"([{");
            let close = match open {
                b'(' => b')',
                b'[' => b']',
                _ => b'}',
            };
            let depth = *rng.pick(&[8usize, 40, 200, 1_000, 30_000]);
            let i = rng.below(len + 1);
            let closed = rng.chance(50);
            let mut ins = vec![open; depth];
            if closed {
                ins.extend(std::iter::repeat_n(close, depth));
            }
            b.splice(i..i, ins);
            format!(
                "{depth} nested '{}'{} at {i}",
                open as char,
                if closed { " (closed)" } else { "" }
            )
        }
        10 => {
            let pairs = key_pairs(b);
            if pairs.is_empty() {
                return "no key to duplicate".into();
            }
            let (s, e) = *rng.pick(&pairs);
            let mut pair = b[s..e].to_vec();
            pair.extend_from_slice(b", ");
            b.splice(s..s, pair);
            format!("duplicate key at {s}")
        }
        11 => {
            let tok = *rng.pick(&["NaN", "Infinity", "-Infinity", "nan", "inf"]);
            let i = rng.below(len + 1);
            b.splice(i..i, tok.bytes());
            format!("insert {tok} at {i}")
        }
        _ => {
            let at = rng.below(len + 1);
            b.truncate(at);
            format!("truncate to {at}")
        }
    }
}

/// A `.npy` mutation that edits the header dict as text and writes a length field that fits it
/// (version 1 or 2 as the length needs, sometimes 3), so the literal parser sees the edit.
fn mutate_npy_header(rng: &mut Rng, b: &mut Vec<u8>) -> Option<String> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return None;
    }
    let (start, hl): (usize, usize) = match b[6] {
        1 => (10, u16::from_le_bytes([b[8], b[9]]) as usize),
        2 | 3 if b.len() >= 12 => (12, u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize),
        _ => return None,
    };
    let end = start.checked_add(hl).filter(|&e| e <= b.len())?;
    let mut header = b[start..end].to_vec();
    let body = b[end..].to_vec();
    let what = mutate_bytes(rng, &mut header, &[]);
    let major: u8 = if rng.chance(15) {
        3
    } else if header.len() > 0xFFFF || rng.chance(10) {
        2
    } else {
        1
    };
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&header);
    out.extend_from_slice(&body);
    *b = out;
    Some(format!("header text: {what} (v{major})"))
}

/// A k-NN graph mutation: header words replaced, sometimes the body cut to a whole number of
/// 8-byte pairs.
fn mutate_knn_header(rng: &mut Rng, b: &mut Vec<u8>) -> Option<String> {
    if b.len() < KNN_HEADER as usize {
        return None;
    }
    let mut what = String::new();
    if rng.chance(50) {
        // N and k both huge: N·k·8 near or past u64.
        const HUGE: [u32; 5] = [1 << 28, 1 << 29, 1 << 30, 1 << 31, u32::MAX];
        let (n, k) = (*rng.pick(&HUGE), *rng.pick(&HUGE));
        b[8..12].copy_from_slice(&n.to_le_bytes());
        b[12..16].copy_from_slice(&k.to_le_bytes());
        let _ = write!(what, "N = {n:#x}, k = {k:#x}; ");
    }
    for _ in 0..rng.below(3) {
        let word = 1 + rng.below(5);
        let v = *rng.pick(&INTERESTING) as u32;
        b[word * 4..word * 4 + 4].copy_from_slice(&v.to_le_bytes());
        let _ = write!(what, "word {word} = {v:#x}; ");
    }
    if rng.chance(50) {
        let pairs = (b.len() - KNN_HEADER as usize) / 8;
        let keep = rng.below(pairs + 1);
        b.truncate(KNN_HEADER as usize + keep * 8);
        let _ = write!(what, "body cut to {keep} pairs");
    }
    Some(format!("knn header: {what}"))
}

/// An `embeddings.json` mutation that keeps it JSON: the first row made long, or many rows
/// added, or both (a long first row among many short ones is the case of a reservation of
/// N × D values from the first row's D).
fn mutate_json_rows(rng: &mut Rng, b: &mut Vec<u8>) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_slice(b).ok()?;
    let entries = v.get_mut("embeddings")?.as_array_mut()?;
    let mut what = String::new();
    let op = rng.below(3);
    if op != 1 {
        let len = *rng.pick(&[100usize, 1_000, 3_000]);
        let row = entries.first_mut()?.get_mut("embedding")?.as_array_mut()?;
        let src = row.clone();
        if src.is_empty() {
            return None;
        }
        *row = src.iter().cycle().take(len).cloned().collect();
        let _ = write!(what, "first row {len} values; ");
    }
    if op != 0 {
        let count = *rng.pick(&[100usize, 1_000, 3_000]);
        let last = entries.last()?.clone();
        let short = rng.chance(50);
        for i in 0..count {
            let mut e = if short {
                serde_json::json!({"embedding": [1]})
            } else {
                last.clone()
            };
            if let Some(o) = e.as_object_mut() {
                if o.contains_key("poem_index") {
                    o.insert("poem_index".into(), (1_000_000 + i).into());
                }
                if o.contains_key("id") {
                    o.insert("id".into(), format!("extra{i}").into());
                }
            }
            entries.push(e);
        }
        let _ = write!(
            what,
            "{count} more rows{}",
            if short { " (short)" } else { "" }
        );
    }
    *b = serde_json::to_vec(&v).ok()?;
    Some(format!("json rows: {what}"))
}

/// Generated input `iter`: a seed of a random target through 1–4 mutations.
fn generate(iter: u64, seeds: &[Case]) -> (Case, String) {
    let mut rng = Rng::new(input_seed(iter));
    let target = *rng.pick(&TARGETS);
    let pool: Vec<&Case> = seeds.iter().filter(|c| c.target == target).collect();
    let mut case = (*rng.pick(&pool)).clone();
    let others: Vec<Vec<u8>> = pool.iter().map(|c| c.files[0].1.clone()).collect();
    let mut log = Vec::new();
    if target == Target::Table {
        // The extension decides the format: sometimes the wrong one.
        if rng.chance(25) {
            let ext = *rng.pick(&["npy", "json", "f32", "bin", "NPY", "txt", ""]);
            let name = if ext.is_empty() {
                "x".to_string()
            } else {
                format!("x.{ext}")
            };
            case.files[0].0 = name.clone();
            case.main = name;
            log.push(format!("renamed to {}", case.main));
        }
    }
    if matches!(target, Target::F32 | Target::Table) && rng.chance(30) {
        case.dim = *rng.pick(&[
            None,
            Some(0),
            Some(1),
            Some(3),
            Some(5),
            Some(usize::MAX / 2),
            Some(usize::MAX),
        ]);
        log.push(format!("dim {:?}", case.dim));
    }
    if target == Target::Fp16Bin && rng.chance(30) {
        case.expect = !case.expect;
        log.push(format!("expect {}", case.expect));
    }
    for _ in 0..1 + rng.below(4) {
        let fi = rng.below(case.files.len());
        let is_npy = case.files[fi].0.ends_with(".npy");
        let b = &mut case.files[fi].1;
        let special = match target {
            _ if is_npy && rng.chance(50) => mutate_npy_header(&mut rng, b),
            Target::Knn if rng.chance(30) => mutate_knn_header(&mut rng, b),
            Target::Json if rng.chance(10) => mutate_json_rows(&mut rng, b),
            _ => None,
        };
        let what = match special {
            Some(w) => w,
            None => mutate_bytes(&mut rng, b, &others),
        };
        log.push(format!("{}: {what}", case.files[fi].0));
    }
    (case, log.join("; "))
}

// ---------------------------------------------------------------------------------------------
// The corpus of saved crashes.

fn case_text(case: &Case, iter: Option<u64>, how: &str) -> String {
    let mut t = format!("target={}\nmain={}\n", case.target.name(), case.main);
    if let Some(d) = case.dim {
        let _ = writeln!(t, "dim={d}");
    }
    let _ = writeln!(t, "expect={}", case.expect);
    if let Some(i) = iter {
        let _ = writeln!(t, "iter={i}\nseed={:#018x}", input_seed(i));
    }
    let _ = writeln!(t, "mutations={}", how.replace('\n', " "));
    t
}

/// Save a failing generated input under `failed` (the parent moves it to `tests/fuzz-corpus/`
/// at the end, so the corpus a run replays does not change under it); the directory's name.
fn save_failure(failed: &Path, case: &Case, iter: u64, how: &str) -> String {
    let name = format!("{}-i{iter}-{:016x}", case.target.name(), input_seed(iter));
    let dir = failed.join(&name);
    let _ = std::fs::create_dir_all(&dir);
    for (name, bytes) in &case.files {
        let _ = std::fs::write(dir.join(name), bytes);
    }
    let _ = std::fs::write(dir.join("case.txt"), case_text(case, Some(iter), how));
    name
}

/// The saved cases, sorted by directory name.
fn corpus() -> Vec<(String, Case)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(text) = std::fs::read_to_string(d.join("case.txt")) else {
            continue;
        };
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
        };
        let target = get("target")
            .and_then(|t| Target::from_name(&t))
            .unwrap_or_else(|| panic!("{}: case.txt names no target", d.display()));
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "case.txt")
            .map(|n| {
                let b = std::fs::read(d.join(&n)).unwrap();
                (n, b)
            })
            .collect();
        files.sort();
        let case = Case {
            target,
            main: get("main").unwrap_or_else(|| files[0].0.clone()),
            files,
            dim: get("dim").and_then(|v| v.parse().ok()),
            expect: get("expect").as_deref() == Some("true"),
        };
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, case));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The child: replay the corpus, then generated inputs, from work item `start` on.

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    tried: u64,
    clean: u64,
    accepted: u64,
    crashes: u64,
}

fn parse_counts(line: &str) -> Option<Counts> {
    let mut c = Counts::default();
    for part in line.split_whitespace() {
        let (k, v) = part.split_once('=')?;
        let v: u64 = v.parse().ok()?;
        match k {
            "tried" => c.tried = v,
            "clean" => c.clean = v,
            "accepted" => c.accepted = v,
            "crashes" => c.crashes = v,
            _ => {}
        }
    }
    Some(c)
}

fn counts_line(c: &Counts) -> String {
    format!(
        "tried={} clean={} accepted={} crashes={}",
        c.tried, c.clean, c.accepted, c.crashes
    )
}

/// The child's loop; `work` is its directory (`current/` for the input under test,
/// `current.txt` saying which it is, `report.txt` for crashes and the final counts).
fn child(work: &Path, start: u64, iters: u64, only: Option<u64>, deadline: Option<u64>) {
    quiet_panics();
    let seeds = seeds(&work.join("seeds"));
    let corpus = corpus();
    let _ = std::fs::write(work.join("corpus-len"), corpus.len().to_string());
    let cur = work.join("current");
    let mut report = String::new();
    let mut counts = Counts::default();
    let items: Box<dyn Iterator<Item = u64>> = match only {
        Some(i) => Box::new(std::iter::once(corpus.len() as u64 + i)),
        None => Box::new(start..corpus.len() as u64 + iters),
    };
    for item in items {
        if item >= corpus.len() as u64
            && item % 1024 == 0
            && deadline.is_some_and(|d| unix_now() >= d)
        {
            let _ = writeln!(report, "STOPPED");
            break;
        }
        let (case, how, label, iter) = match corpus.get(item as usize) {
            Some((name, case)) => (case.clone(), String::new(), format!("corpus {name}"), None),
            None => {
                let iter = item - corpus.len() as u64;
                let (case, how) = generate(iter, &seeds);
                let label = format!("iteration {iter} (seed {:#018x})", input_seed(iter));
                (case, how, label, Some(iter))
            }
        };
        if only.is_some() {
            println!("{label}: {}", case_text(&case, iter, &how));
        }
        let _ = std::fs::write(
            work.join("current.txt"),
            format!(
                "item={item}\nlabel={label}\n{}counts={}\n",
                case_text(&case, iter, &how),
                counts_line(&counts)
            ),
        );
        counts.tried += 1;
        match run_case(&cur, &case) {
            Outcome::Clean => counts.clean += 1,
            Outcome::Accepted => counts.accepted += 1,
            Outcome::Crash(why) => {
                counts.crashes += 1;
                let saved = match iter {
                    Some(i) => format!(
                        "; saved to tests/fuzz-corpus/{}",
                        save_failure(&work.join("failed"), &case, i, &how)
                    ),
                    None => String::new(),
                };
                let _ = writeln!(
                    report,
                    "CRASH {label} target {}: {why}\n  mutations: {how}{saved}",
                    case.target.name()
                );
            }
        }
    }
    let _ = writeln!(report, "COUNTS {}", counts_line(&counts));
    std::fs::write(work.join("report.txt"), report).expect("write report");
}

/// The source checksum the seed ids sidecar names (any string: load_ids compares it).
const IDS_SOURCE: &str = "fnv1a64:00000000000000aa";

/// The fuzzer's child process, not a test of its own: ignored in a plain run, started by the
/// parent with `--ignored --exact fuzz_child` and `DIVERSITY_FUZZ_CHILD` set.
#[test]
#[ignore = "started by fuzz_loaders as its child process"]
fn fuzz_child() {
    let Ok(work) = std::env::var("DIVERSITY_FUZZ_CHILD") else {
        return;
    };
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    child(
        Path::new(&work),
        num("DIVERSITY_FUZZ_START").unwrap_or(0),
        num("DIVERSITY_FUZZ_ITERS").unwrap_or(DEFAULT_ITERS),
        num("DIVERSITY_FUZZ_ONLY"),
        num("DIVERSITY_FUZZ_DEADLINE"),
    );
}

/// The fuzzer: children run the corpus and the generated inputs; an abort or hang is reported
/// with its input and the run goes on after it.
#[test]
fn fuzz_loaders() {
    if std::env::var("DIVERSITY_FUZZ_CHILD").is_ok() {
        return;
    }
    let asked = std::env::var("DIVERSITY_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let iters = asked.unwrap_or(DEFAULT_ITERS);
    let deadline = asked.is_none().then(|| unix_now() + CI_SECS);
    let mut stopped = false;
    let only = std::env::var("DIVERSITY_FUZZ_ONLY").ok();
    // Every input is written to a file: in memory (/dev/shm) where there is one.
    let name = format!("diversity-fuzz-{}", std::process::id());
    let work = [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .into_iter()
        .map(|d| d.join(&name))
        .find(|w| {
            let _ = std::fs::remove_dir_all(w);
            std::fs::create_dir_all(w).is_ok()
        })
        .expect("a temporary directory for the fuzzer");
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut total = Counts::default();
    let mut failures = Vec::new();
    let mut start = 0u64;
    loop {
        let _ = std::fs::remove_file(work.join("report.txt"));
        let _ = std::fs::remove_file(work.join("current.txt"));
        let mut cmd = Command::new(&exe);
        cmd.args([
            "fuzz_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DIVERSITY_FUZZ_CHILD", &work)
        .env("DIVERSITY_FUZZ_START", start.to_string())
        .env("DIVERSITY_FUZZ_ITERS", iters.to_string())
        .stdout(if only.is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped());
        if let Some(o) = &only {
            cmd.env("DIVERSITY_FUZZ_ONLY", o);
        }
        if let Some(d) = deadline {
            cmd.env("DIVERSITY_FUZZ_DEADLINE", d.to_string());
        }
        let mut child = cmd.spawn().expect("start the fuzz child");
        // Poll: the child is hung when one input has taken HANG_SECS.
        let mut hung = false;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            let stale = std::fs::metadata(work.join("current.txt"))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|e| e > Duration::from_secs(HANG_SECS));
            if stale {
                hung = true;
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut stderr);
        }
        if let Ok(report) = std::fs::read_to_string(work.join("report.txt")) {
            for line in report.lines() {
                if let Some(c) = line.strip_prefix("COUNTS ").and_then(parse_counts) {
                    total.tried += c.tried;
                    total.clean += c.clean;
                    total.accepted += c.accepted;
                    total.crashes += c.crashes;
                } else if line == "STOPPED" {
                    stopped = true;
                } else if line.starts_with("CRASH") {
                    failures.push(line.to_string());
                } else if let Some(last) = failures.last_mut() {
                    last.push('\n');
                    last.push_str(line);
                }
            }
            break;
        }
        // The child died (abort, stack overflow, a refused allocation) or hung on the input in
        // current.txt: report and save it, then go on after it.
        let cur = std::fs::read_to_string(work.join("current.txt")).unwrap_or_default();
        let get = |k: &str| {
            cur.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or("")
                .to_string()
        };
        let item: u64 = get("item").parse().unwrap_or_else(|_| {
            panic!("the fuzz child failed before its first input ({status}): {stderr}")
        });
        if let Some(c) = parse_counts(&get("counts")) {
            total.tried += c.tried + 1;
            total.clean += c.clean;
            total.accepted += c.accepted;
            total.crashes += c.crashes + 1;
        }
        let mut saved = String::new();
        if let Ok(iter) = get("iter").parse::<u64>() {
            let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(work.join("current"))
                .map(|r| {
                    r.filter_map(|e| e.ok())
                        .map(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            (n, std::fs::read(e.path()).unwrap_or_default())
                        })
                        .collect()
                })
                .unwrap_or_default();
            let case = Case {
                target: Target::from_name(&get("target")).unwrap(),
                files,
                main: get("main"),
                dim: get("dim").parse().ok(),
                expect: get("expect") == "true",
            };
            saved = format!(
                "; saved to tests/fuzz-corpus/{}",
                save_failure(&work.join("failed"), &case, iter, &get("mutations"))
            );
        }
        let cause = if hung {
            format!("hung for more than {HANG_SECS} s")
        } else {
            format!(
                "the process died ({status}): {}",
                stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            )
        };
        failures.push(format!(
            "CRASH {} target {}: {cause}\n  mutations: {}{saved}",
            get("label"),
            get("target"),
            get("mutations")
        ));
        if only.is_some() {
            break;
        }
        start = item + 1;
    }
    // The failing inputs join the corpus, replayed by every later run.
    if let Ok(dirs) = std::fs::read_dir(work.join("failed")) {
        let _ = std::fs::create_dir_all(corpus_dir());
        for d in dirs.filter_map(|e| e.ok()) {
            let to = corpus_dir().join(d.file_name());
            let _ = std::fs::remove_dir_all(&to);
            let _ = std::fs::create_dir_all(&to);
            for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                let _ = std::fs::copy(f.path(), to.join(f.file_name()));
            }
        }
    }
    let replayed = if only.is_some() {
        0
    } else {
        corpus_len_of(&work)
    };
    let _ = std::fs::remove_dir_all(&work);
    let secs = started.elapsed().as_secs_f64();
    // Straight to stdout, past the test harness's capture: CI shows the counts of a passing run.
    use std::io::Write as _;
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "fuzz: {} inputs tried ({} replayed from tests/fuzz-corpus, {} generated{}), {} \
         clean errors, {} accepted, {} crashes, {secs:.1} s",
        total.tried,
        replayed,
        total.tried.saturating_sub(replayed as u64),
        if stopped {
            format!(" of {iters}: stopped at the {CI_SECS} s limit")
        } else {
            String::new()
        },
        total.clean,
        total.accepted,
        total.crashes
    );
    for f in &failures {
        let _ = writeln!(out, "{f}");
    }
    assert!(
        failures.is_empty() && total.crashes == 0,
        "{} crashes (above); rerun one with DIVERSITY_FUZZ_ONLY=<iteration>",
        failures.len().max(total.crashes as usize)
    );
}

/// How many corpus entries the children replayed (written by the first child).
fn corpus_len_of(work: &Path) -> usize {
    std::fs::read_to_string(work.join("corpus-len"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Regression tests of the crash classes the fuzzer found.

/// A scratch directory for one regression test, removed at the end.
/// A version-1.0 `.npy` file with this header text and body.
fn npy_with_header(header: &str, body: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(body);
    v
}

/// The header parser recursed once a bracket: ~24,000 nested parentheses overflowed the stack
/// and aborted the process. Nesting is now bounded (32 levels) and the message stays short.
#[test]
fn npy_deeply_nested_header_is_refused() {
    let s = TempDir::new("fuzz-nest");
    let deep = 24_000;
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}{}, }}\n",
        "(".repeat(deep),
        ")".repeat(deep)
    );
    let p = s.file("deep.npy", &npy_with_header(&header, &[0; 4]));
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("nested more than 32 levels deep"), "{msg}");
    assert!(
        msg.len() < 1_000,
        "the message quotes the whole header: {msg}"
    );
    // Through load_table too, and with lists and dicts.
    for (open, close) in [("[", "]"), ("{", "}")] {
        let header = format!("{}{}\n", open.repeat(deep), close.repeat(deep));
        let p = s.file("deep2.npy", &npy_with_header(&header, &[]));
        let msg = common::format_message(load_table(&p, None), &p);
        assert!(msg.contains("nested more than 32 levels deep"), "{msg}");
    }
    // 31 levels inside the dict are still parsed (and refused for what they are).
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}1, 1{}, }}\n",
        "(".repeat(31),
        ")".repeat(31)
    );
    let p = s.file("ok-depth.npy", &npy_with_header(&header, &[0; 4]));
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("shape entries must be integers"), "{msg}");
}

/// A header dict with a key twice was read by its first occurrence; it is now refused (keys must
/// be strings, kept in a set: the first fix compared every pair, quadratic in the keys).
#[test]
fn npy_duplicate_header_key_is_refused() {
    let s = TempDir::new("fuzz-dupkey");
    let body = 1.5f32.to_le_bytes();
    for header in [
        "{'descr': '<f4', 'descr': '<f2', 'fortran_order': False, 'shape': (1, 1), }\n",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), 'shape': (2, 2), }\n",
        "{'descr': '<f4', 'fortran_order': False, \"fortran_order\": True, 'shape': (1, 1)}\n",
    ] {
        let p = s.file("dup.npy", &npy_with_header(header, &body));
        let msg = common::format_message(load_npy(&p), &p);
        assert!(msg.contains("duplicate key '"), "{msg}");
    }
    // Keys are strings, and a header of many keys is checked in linear time.
    let p = s.file(
        "intkey.npy",
        &npy_with_header("{1: 2, 'descr': '<f4'}\n", &body),
    );
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("a dict key that is not a string"), "{msg}");
    let mut many = String::from("{");
    for i in 0..200_000 {
        let _ = write!(many, "'k{i}': 0, ");
    }
    many.push_str("'k7': 1}\n");
    let mut v = b"\x93NUMPY\x02\x00".to_vec();
    v.extend_from_slice(&u32::try_from(many.len()).unwrap().to_le_bytes());
    v.extend_from_slice(many.as_bytes());
    let p = s.file("many.npy", &v);
    let t = Instant::now();
    let msg = common::format_message(load_npy(&p), &p);
    assert!(msg.contains("duplicate key 'k7'"), "{msg}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let p = s.file(
        "fine.npy",
        &npy_with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }\n",
            &body,
        ),
    );
    assert_eq!(load_npy(&p).unwrap().data(), &[1.5]);
}

/// N·k·8 wrapped in u64 for N = 2^31, k = 2^30 (and N = k = 2^31): the 24-byte header alone
/// "matched" its size, `open` succeeded and `row` asked for a 4 GiB buffer.
#[test]
fn knn_graph_header_whose_size_wraps_is_refused() {
    let s = TempDir::new("fuzz-knnwrap");
    for (n, k) in [
        (1u32 << 31, 1u32 << 30),
        (1 << 30, 1 << 31),
        (1 << 31, 1 << 31),
    ] {
        let mut h = b"DKNN".to_vec();
        for v in [1u32, n, k, 1, 0] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        let p = s.file("wrap.knn", &h);
        let msg = common::format_message(KnnGraph::open(&p), &p);
        assert!(
            msg.contains(&format!("N = {n}, k = {k}")) && msg.contains("more than any file holds"),
            "{msg}"
        );
    }
}

/// `embeddings.json` reserved N × D floats from the first row's D before finding the second
/// row ragged: a 300 KB file of one 2,000-value row and 15,000 one-value rows reserved 120 MB.
#[test]
fn json_long_first_row_reserves_no_more_than_the_text() {
    let s = TempDir::new("fuzz-jsonreserve");
    let mut text = String::from("{\"embeddings\":[{\"embedding\":[");
    text.push_str(&vec!["1"; 2_000].join(","));
    text.push_str("]}");
    for _ in 0..15_000 {
        text.push_str(",{\"embedding\":[1]}");
    }
    text.push_str("]}");
    let p = s.file("long.json", text.as_bytes());
    let (r, peak) = measured(|| load_embeddings_json(&p));
    let msg = common::format_message(r, &p);
    assert!(msg.contains("ragged rows"), "{msg}");
    assert!(
        peak <= budget(text.len()),
        "{peak} bytes held at once for a {}-byte file",
        text.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Merges of edited shards: an edit that would change the merged file is refused.

/// Edits per shard kind of a plain `cargo test --release` run (a few seconds in all);
/// `DIVERSITY_FUZZ_ITERS` scales it (a fiftieth of the loaders' inputs per kind).
const MERGE_EDITS: u64 = 1_000;

/// The valid shards of one run of each kind, in `dir`: (kind, merge, shard paths).
type MergeFn = fn(&[PathBuf], &Path) -> diversity::error::Result<()>;

fn merge_shard_sets(dir: &Path) -> Vec<(&'static str, MergeFn, Vec<PathBuf>)> {
    let mut sets: Vec<(&'static str, MergeFn, Vec<PathBuf>)> = Vec::new();
    let layout = ShardLayout::Strided;
    let n = 6usize;
    // Diversity shards, with row indices and with ids: every start of a 6-item table, top_k 3.
    for ids in [None, Some(["a", "b\"", "c", "d", "e", "f"])] {
        let ids: Option<Vec<serde_json::Value>> =
            ids.map(|v| v.into_iter().map(serde_json::Value::from).collect());
        let tag = if ids.is_some() { "ids" } else { "plain" };
        let mut paths = Vec::new();
        for i in 1..=2 {
            let path = dir.join(format!("d-{tag}-{i}.json"));
            let meta = serde_json::json!({
                "num_poems": n, "top_k": 3, "generated_at": format!("2026-01-0{i}T00:00:00Z"),
                "shard": format!("{i}/2"), "shard_layout": layout.name(),
                "shard_starts_total": n, "shard_starts_fingerprint": "fnv1a32:00000000",
                "shard_table_checksum": "fnv1a64:0123456789abcdef",
            });
            let mut w = JsonCacheWriter::create(&path, &meta, ids.clone()).unwrap();
            for p in layout.positions(i, 2, n) {
                let st = p as u32;
                let seq = [st, (st + 1) % 6, (st + 3) % 6, (st + 5) % 6];
                w.write_sequence(st, &seq).unwrap();
            }
            w.finish().unwrap();
            paths.push(path);
        }
        sets.push(("diversity", |i, o| merge_caches(i, o).map(|_| ()), paths));
    }
    // Rankings shards: each item's 3 nearest others.
    let mut paths = Vec::new();
    for i in 1..=2 {
        let path = dir.join(format!("r-{i}.json"));
        let extra = serde_json::json!({
            "metric": "cosine", "shard": format!("{i}/2"), "shard_layout": "contiguous",
            "shard_items_total": n, "shard_table_checksum": "fnv1a64:0123456789abcdef",
        });
        let mut w =
            RankingsWriter::create(&path, n, Some(3), "cosine-knn-v1", &extra, None).unwrap();
        for p in ShardLayout::Contiguous.positions(i, 2, n) {
            let it = p as u32;
            w.write_ranking(it, &[(it + 1) % 6, (it + 2) % 6, (it + 4) % 6])
                .unwrap();
        }
        w.finish_partial().unwrap();
        paths.push(path);
    }
    sets.push(("rankings", |i, o| merge_rankings(i, o).map(|_| ()), paths));
    // Graph shards: k = 2, cosine.
    let mut paths = Vec::new();
    for i in 1..=2 {
        let path = dir.join(format!("g-{i}.knn"));
        let shard = (i, 2, ShardLayout::Contiguous);
        let mut w = KnnGraphShard::create(&path, n, 2, KnnMetric::Cosine, shard, "run").unwrap();
        let items: Vec<u32> = ShardLayout::Contiguous
            .positions(i, 2, n)
            .into_iter()
            .map(|p| p as u32)
            .collect();
        let ids: Vec<u32> = items
            .iter()
            .flat_map(|&t| [(t + 1) % 6, (t + 2) % 6])
            .collect();
        let values: Vec<f32> = items.iter().flat_map(|_| [0.75, 0.5]).collect();
        w.write_batch(&items, &ids, &values).unwrap();
        w.finish().unwrap();
        paths.push(path);
    }
    sets.push(("graph", |i, o| merge_graphs(i, o).map(|_| ()), paths));
    sets
}

/// One to three edits of `b`: a byte replaced, inserted or removed, favouring the characters
/// that make other valid JSON (digits, quotes, commas, brackets).
fn edit_shard(rng: &mut Rng, b: &mut Vec<u8>) -> String {
    const CHARS: &[u8] = b"0123456789\",:[]{}-.e ab";
    let mut log = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(b.len().max(1));
        let c = if rng.chance(80) {
            *rng.pick(CHARS)
        } else {
            rng.next() as u8
        };
        match rng.below(3) {
            0 if at < b.len() => {
                log.push(format!("byte {at} {:?} -> {:?}", b[at] as char, c as char));
                b[at] = c;
            }
            1 => {
                log.push(format!("insert {:?} at {at}", c as char));
                b.insert(at, c);
            }
            _ if at < b.len() && b.len() > 1 => {
                log.push(format!("delete {:?} at {at}", b[at] as char));
                b.remove(at);
            }
            _ => {}
        }
    }
    log.join(", ")
}

#[test]
fn fuzz_merge_edits_are_refused_or_change_nothing() {
    let edits = std::env::var("DIVERSITY_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(MERGE_EDITS, |n| (n / 50).max(1));
    let dir = TempDir::new("fuzz-merge");
    let sets = merge_shard_sets(dir.path("").as_path());
    let (mut refused, mut same) = (0u64, 0u64);
    for (s, (kind, merge, shards)) in sets.iter().enumerate() {
        let reference = dir.path(&format!("reference-{s}"));
        merge(shards, &reference).unwrap_or_else(|e| panic!("{kind}: the originals: {e}"));
        let reference = std::fs::read(&reference).unwrap();
        let originals: Vec<Vec<u8>> = shards.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let mut rng = Rng::new(BASE_SEED ^ s as u64);
        for e in 0..edits {
            let which = rng.below(shards.len());
            let mut bytes = originals[which].clone();
            let how = edit_shard(&mut rng, &mut bytes);
            if bytes == originals[which] {
                continue;
            }
            let edited = dir.path(&format!("edited-{e}"));
            std::fs::write(&edited, &bytes).unwrap();
            let mut inputs = shards.clone();
            inputs[which] = edited.clone();
            let out = dir.path("out");
            std::fs::write(&out, b"old").unwrap();
            match merge(&inputs, &out) {
                Err(err) => {
                    assert_eq!(std::fs::read(&out).unwrap(), b"old", "{kind}: {how}: {err}");
                    refused += 1;
                }
                Ok(()) => {
                    let merged = std::fs::read(&out).unwrap();
                    assert!(
                        merged == reference,
                        "{kind} shard {which}, {how}: the edited shard was merged into other \
                         bytes:\n{}",
                        String::from_utf8_lossy(&merged)
                    );
                    same += 1;
                }
            }
            std::fs::remove_file(&edited).unwrap();
        }
    }
    eprintln!("merge edits: {refused} refused, {same} merged to the same bytes");
    assert!(refused > 0);
}

// ---------------------------------------------------------------------------------------------
// IVF index files: their loaders upload to a device, so they run here in this process (lavapipe
// in CI) rather than in the loaders' child.

/// Mutations of each IVF index file: bit flips, truncations, and a header, size or id word
/// (or any 4 bytes) overwritten with the checksum made right again. Each is refused naming the
/// file or loaded whole, every id once, saving to the very bytes read; never a panic. Returns
/// (refused, loaded).
fn fuzz_index_file<T>(
    name: &str,
    good: &[u8],
    iters: usize,
    load: impl Fn(&Path) -> diversity::Result<T>,
    whole: impl Fn(&T) -> (Vec<i64>, usize, Vec<u8>),
) -> (usize, usize) {
    let dir = TempDir::new(&format!("{name}-mutate"));
    let mut s = 0x5eed_u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (mut refused, mut loaded) = (0, 0);
    for i in 0..iters {
        let mut b = good.to_vec();
        let n = b.len();
        match i % 4 {
            0 => b[next() as usize % n] ^= 1 << (next() % 8),
            1 => b.truncate(next() as usize % n),
            _ => {
                let o = if i % 4 == 2 {
                    16 + 8 * (next() as usize % 40)
                } else {
                    next() as usize % (n - 12)
                };
                let v = match next() % 3 {
                    0 => u64::MAX - next() % 4,
                    1 => next() % 1000,
                    _ => next(),
                };
                let w = if i % 4 == 2 { 8 } else { 4 };
                let o = o.min(n - 8 - w);
                b[o..o + w].copy_from_slice(&v.to_le_bytes()[..w]);
                let h = fnv(&b[..n - 8]);
                b[n - 8..].copy_from_slice(&h.to_le_bytes());
            }
        }
        let p = dir.file(&format!("m.{name}"), &b);
        let r = catch_unwind(AssertUnwindSafe(|| load(&p)));
        match r.unwrap_or_else(|_| panic!("{name} mutation {i} panicked")) {
            Ok(x) => {
                let (mut ids, ntotal, bytes) = whole(&x);
                ids.sort_unstable();
                let want: Vec<i64> = (0..ntotal as i64).collect();
                assert_eq!(ids, want, "{name} mutation {i}");
                assert_eq!(bytes, b, "{name} mutation {i}: not the bytes read");
                loaded += 1;
            }
            Err(Error::Format { path, .. }) => {
                assert_eq!(path, p, "{name} mutation {i}");
                refused += 1;
            }
            Err(e) => panic!("{name} mutation {i}: {e}"),
        }
    }
    (refused, loaded)
}

#[test]
fn fuzz_ivf_flat_files() {
    let ctx = common::ctx();
    let t = common::random_table(120, 3, 5);
    let opts = IvfOptions {
        nlist: 5,
        metric: Metric::L2,
        precision: Precision::Fp32,
        kmeans: KMeansOptions {
            iters: 6,
            ..KMeansOptions::default()
        },
    };
    let mut ix = IvfFlat::new(&ctx, 3, &opts).unwrap();
    ix.train(&t).unwrap();
    ix.add(&t).unwrap();
    let good = ix.to_bytes().unwrap();
    let (refused, loaded) = fuzz_index_file(
        "ivf",
        &good,
        400,
        |p| IvfFlat::load(&ctx, p),
        |x| {
            let ids = (0..x.nlist()).flat_map(|l| x.list_ids(l).to_vec());
            (ids.collect(), x.ntotal(), x.to_bytes().unwrap())
        },
    );
    // Both outcomes happen.
    assert!(
        refused >= 250 && loaded >= 20,
        "{refused} refused, {loaded} loaded"
    );
    common::assert_clean(&ctx);
}

#[test]
fn fuzz_ivfpq_files() {
    let ctx = common::ctx();
    let data = common::random_table(300, 8, 51);
    let opts = IvfPqOptions {
        nlist: 3,
        m: 2,
        metric: Metric::L2,
        keep_vectors: true,
        kmeans: KMeansOptions {
            iters: 4,
            ..KMeansOptions::default()
        },
    };
    let mut ix = IvfPq::new(&ctx, 8, &opts).unwrap();
    ix.train(&data).unwrap();
    ix.add(&data.head(40).unwrap()).unwrap();
    let good = ix.to_bytes().unwrap();
    let (refused, loaded) = fuzz_index_file(
        "ivfpq",
        &good,
        400,
        |p| IvfPq::load(&ctx, p),
        |x| {
            let ids = (0..x.nlist()).flat_map(|l| x.list_ids(l).to_vec());
            (ids.collect(), x.ntotal(), x.to_bytes().unwrap())
        },
    );
    assert!(
        refused >= 150 && loaded >= 10,
        "{refused} refused, {loaded} loaded"
    );
    common::assert_clean(&ctx);
}
