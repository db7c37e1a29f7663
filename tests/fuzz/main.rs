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
//! The loop runs in a child process (this test binary again, running `child::fuzz_child`) so that an
//! abort is reported and the run goes on from the next input. `DIVERSITY_FUZZ_ITERS` sets the
//! number of generated inputs (default [`DEFAULT_ITERS`], sized for CI, and then cut off after
//! [`CI_SECS`] whatever it reached);
//! `DIVERSITY_FUZZ_ONLY=<iteration>` runs that one input alone, printing what it is.
//!
//! The IVF-Flat and IVF-PQ index files are fuzzed in this process instead (their loaders upload
//! to a device): 400 mutations of each, refused naming the file or loaded whole, never a panic.

#[path = "../common/mod.rs"]
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

/// An allocation of `layout` by `make`, counted while armed (one beyond [`HARD_CAP`] is refused).
fn counted(layout: Layout, make: impl FnOnce() -> *mut u8) -> *mut u8 {
    if armed() {
        if layout.size() > HARD_CAP {
            return std::ptr::null_mut();
        }
        grow(layout.size());
    }
    make()
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout, || System.alloc(layout))
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted(layout, || System.alloc_zeroed(layout))
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

/// The source checksum the seed ids sidecar names (any string: load_ids compares it).
const IDS_SOURCE: &str = "fnv1a64:00000000000000aa";

mod child;
mod mutate;
mod regressions;

use mutate::{corpus_dir, generate, seeds};
