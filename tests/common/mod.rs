//! Helpers shared by the Rust integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory whose name carries `tag`, the process id and a counter.
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("diversity-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
    /// A path inside the directory (nothing is created).
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// Write `contents` to `name` inside the directory and return its path.
    pub fn file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).expect("write temp file");
        p
    }
    /// Names of everything in the directory, sorted (temporary files included: they start with
    /// a dot).
    pub fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .expect("read temp dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A context on the default device with validation layers on.
pub fn ctx() -> diversity::Context {
    diversity::Context::new(&diversity::ContextOptions {
        device: None,
        validation: true,
    })
    .expect("a Vulkan device with validation layers")
}

/// Fails the test if the validation layers said anything.
pub fn assert_clean(ctx: &diversity::Context) {
    assert!(ctx.validation_enabled());
    let msgs = ctx.validation_messages();
    assert!(msgs.is_empty(), "validation layers reported: {msgs:#?}");
}

/// The first `n` rows of the bundled real data (2,048 fortunes × 384, fp16 values; up to
/// 5,120 from `fortunes-5k.npy`).
pub fn fortunes(n: usize) -> diversity::Table {
    let file = if n <= 2048 {
        "data/fortunes-2k.npy"
    } else {
        "data/fortunes-5k.npy"
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    diversity::files::load_npy(&path)
        .expect("bundled data")
        .head(n)
        .unwrap()
}

/// Deterministic pseudo-random table (xorshift), values in [-1, 1).
pub fn random_table(n: usize, d: usize, seed: u64) -> diversity::Table {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data = (0..n * d)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect();
    diversity::Table::new(data, n, d).unwrap()
}

/// The message of a `Format` error, checked to name `path` (any other outcome panics).
#[track_caller]
pub fn format_message<T: std::fmt::Debug>(
    r: diversity::error::Result<T>,
    path: &std::path::Path,
) -> String {
    match r {
        Err(e @ diversity::error::Error::Format { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()),
                "message does not name the file: {msg}"
            );
            msg
        }
        other => panic!("expected Error::Format, got {other:?}"),
    }
}

/// The storage precisions `ctx` supports: fp32, and fp16 where the device stores it.
pub fn precisions(ctx: &diversity::Context) -> Vec<diversity::Precision> {
    if ctx.caps().fp16_storage {
        vec![diversity::Precision::Fp32, diversity::Precision::Fp16]
    } else {
        vec![diversity::Precision::Fp32]
    }
}

/// The bit patterns of `v` (for comparisons that must be exact, NaN and -0 included).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Two k-NN results are the same: k, the queries, the ids and the distance bits.
pub fn assert_same(got: &diversity::KnnResult, want: &diversity::KnnResult, what: &str) {
    assert_eq!(got.k, want.k, "{what}: k");
    assert_eq!(got.queries, want.queries, "{what}: queries");
    assert_eq!(got.ids, want.ids, "{what}: ids");
    assert_eq!(
        bits(&got.distances),
        bits(&want.distances),
        "{what}: distance bits"
    );
}

/// FNV-1a 64 of `b` (the IVF index files' trailing checksum), to build files whose checksum is
/// right around bad content.
pub fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `text` (a JSON cache or shard) with its own checksum recomputed, as whoever edits a file can:
/// the checksum catches accidents, so what a merge checks of the rows must hold without it.
pub fn reseal(text: &str) -> String {
    let at = text.find("\"checksum\":\"fnv1a64:").expect("a checksum") + 20;
    let mut b = text.as_bytes().to_vec();
    b[at..at + 16].fill(b'0');
    let h = fnv(&b);
    b[at..at + 16].copy_from_slice(format!("{h:016x}").as_bytes());
    String::from_utf8(b).unwrap()
}

/// The edge cases every sequence engine must get right, worked by hand from the definition:
/// N = 1 (both precisions), N = 2, duplicate rows with a zero centroid, and zero rows (d = 1;
/// a zero start has c = 0, so every d = 1 and the lowest index wins), the last also against
/// `reference_sequence`. `run(v, table, precision, starts)` gives the full sequences of
/// `starts` in the engine's variant `v` (a shape, a placement); the first of `variants` runs
/// every case, each runs the duplicates and the zero rows.
pub fn edge_cases<V: Copy + std::fmt::Debug>(
    variants: &[V],
    run: impl Fn(V, &diversity::Table, diversity::Precision, &[u32]) -> Vec<Vec<u32>>,
) {
    use diversity::{Precision, Table};
    let first = |t: &Table, p: Precision, starts: &[u32]| run(variants[0], t, p, starts);
    // N = 1: the sequence is the start alone.
    let one = Table::new(vec![0.5, -1.0, 2.0], 1, 3).unwrap();
    for p in [Precision::Fp32, Precision::Fp16] {
        assert_eq!(first(&one, p, &[0]), vec![vec![0]], "N = 1 {p:?}");
    }
    let two = Table::new(vec![1.0, 0.0, 0.0, 1.0], 2, 2).unwrap();
    assert_eq!(
        first(&two, Precision::Fp32, &[1, 0]),
        vec![vec![1, 0], vec![0, 1]],
        "N = 2"
    );
    // Duplicates and |c| = 0: from 0, c = (1,0): d(1) = d(2) = 1, d(3) = 2 → 3; then c = (0,0):
    // every d = 1 → lowest index 1; then 2.
    let dup = Table::new(vec![1.0, 0.0, 0.0, 1.0, 0.0, 1.0, -1.0, 0.0], 4, 2).unwrap();
    for &v in variants {
        assert_eq!(
            run(v, &dup, Precision::Fp32, &[0])[0],
            vec![0, 3, 1, 2],
            "{v:?}"
        );
    }
    // Rows 0 (1,0), 1 (0,0), 2 (0,1), 3 (-0.8,0.6). From 0: d(3) = 1.8 → 3; c = (0.2, 0.6):
    // d(1) = 1, d(2) = 1 - 0.6/0.632 = 0.051 → 1; then 2. From the zero row: c = 0, all d = 1 →
    // 0; then c = (1,0) → 3 (d 1.8); then only 2 is left.
    let zero = Table::new(vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, -0.8, 0.6], 4, 2).unwrap();
    for &v in variants {
        let s = run(v, &zero, Precision::Fp32, &[0, 1]);
        assert_eq!(s, vec![vec![0, 3, 1, 2], vec![1, 0, 3, 2]], "{v:?}");
        for (st, seq) in [0u32, 1].iter().zip(&s) {
            let want = diversity::reference::reference_sequence(&zero, *st, 3);
            assert_eq!(seq, &want, "{v:?}");
        }
    }
}

/// The random tables of odd dimension every engine's oracle test runs on (N, D, seed: D = 1, a
/// D of 383, N not a multiple of any block), each with every ninth row as a start, at both
/// precisions.
pub fn for_random_oracle_tables(
    mut f: impl FnMut(&diversity::Table, &[u32], diversity::Precision),
) {
    for (n, d, seed) in [
        (150usize, 64usize, 1u64),
        (97, 7, 2),
        (40, 1, 3),
        (33, 383, 4),
    ] {
        let table = random_table(n, d, seed);
        let starts: Vec<u32> = (0..n as u32).step_by(9).collect();
        for precision in [diversity::Precision::Fp32, diversity::Precision::Fp16] {
            f(&table, &starts, precision);
        }
    }
}

/// The common prefixes of two runs' sequences (two engines, two precisions), reported as `what`
/// and not asserted: floating-point ties may break either way. Both start with their start; that
/// much is the definition.
pub fn report_agreement(what: &str, a: &[Vec<u32>], b: &[Vec<u32>]) {
    let prefixes: Vec<usize> = a
        .iter()
        .zip(b)
        .map(|(x, y)| diversity::reference::common_prefix(x, y))
        .collect();
    eprintln!("{what} common prefixes: {prefixes:?}");
    assert!(prefixes.iter().all(|&p| p >= 1), "{what}: {prefixes:?}");
}

/// Runs the test `name` of this test binary again in a child process with the environment
/// variable `var` set to `value` (so that it reaches no other test), and asserts that it passed
/// there. Returns true in that child (where `var` is set), false in the parent after the child
/// passed.
pub fn rerun_with_env(name: &str, var: &str, value: &str) -> bool {
    if std::env::var_os(var).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1"])
        .env(var, value)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} with {var}={value}: {text}");
    assert!(
        text.contains("1 passed"),
        "{name} with {var}={value}: {text}"
    );
    false
}

/// `centers` random directions in `d` dims, each repeated `copies` times with a perturbation of
/// 1e-3 of its length, centred: near-duplicates whose distances differ by ~1e-5.
pub fn clusters(centers: usize, copies: usize, d: usize) -> diversity::Table {
    let base = random_table(centers, d, 17);
    let noise = random_table(centers * copies, d, 18);
    let mut data = Vec::with_capacity(centers * copies * d);
    for c in 0..centers {
        let row = base.row(c);
        let norm = row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
        let scale = 1e-3 * norm / (d as f64).sqrt();
        for k in 0..copies {
            let z = noise.row(c * copies + k);
            data.extend(
                row.iter()
                    .zip(z)
                    .map(|(a, b)| (*a as f64 + scale * *b as f64) as f32),
            );
        }
    }
    diversity::Table::new(data, centers * copies, d)
        .unwrap()
        .centered()
}

/// G of `dt` with fixed-point (`true`) or float32 (`false`) entries.
pub fn gram_of(dt: &diversity::DeviceTable, fixed: bool) -> diversity::Gram {
    diversity::Gram::build_with(
        dt,
        &diversity::gram::GramBuild {
            fixed: Some(fixed),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Every full sequence of `starts` on `gram` with options `o`, in batches of `batch`.
pub fn gram_rows(
    gram: &diversity::Gram,
    starts: &[u32],
    batch: usize,
    o: &diversity::GramOptions,
) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for b in starts.chunks(batch) {
        let mut job = diversity::GramJob::new(gram, b, o).unwrap();
        job.run().unwrap();
        assert!(job.done());
        out.extend(job.sequences().unwrap());
    }
    out
}

/// A gram job of `starts` on `gram` with `o`, stopped after `steps` steps, and a new job resumed
/// from the sequences it had (not run yet).
pub fn gram_resumed_after(
    gram: &diversity::Gram,
    starts: &[u32],
    o: &diversity::GramOptions,
    steps: usize,
) -> diversity::GramJob {
    let mut first = diversity::GramJob::new(gram, starts, o).unwrap();
    first.step(steps).unwrap();
    let have = first.sequence_len();
    let prefixes = first.sequence_columns(0, have).unwrap();
    drop(first);
    diversity::GramJob::resume(gram, starts, &prefixes, have, o).unwrap()
}

/// Whether the shaders were built with the preprocessor knob `knob` (`DIVERSITY_SHADER_DEFINES`
/// at build time, as build.rs reads it: `NAME` or `NAME=VALUE`, separated by spaces or commas).
pub fn built_with(knob: &str) -> bool {
    option_env!("DIVERSITY_SHADER_DEFINES").is_some_and(|d| {
        d.split([' ', ','])
            .any(|x| x.split_once('=').map_or(x, |(name, _)| name) == knob)
    })
}

/// The example program `name`, built beside this test binary's profile directory
/// (target/<profile>/deps/<test>-<hash> → target/<profile>/examples/<name>).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("profile dir");
    let p = dir.join("examples").join(name);
    assert!(
        p.exists(),
        "{} is missing: build the examples first (cargo build --release --all-targets)",
        p.display()
    );
    p
}
