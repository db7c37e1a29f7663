//! Every setting the library reads from the environment, parsed as strictly as its
//! command-line twin: a value that does not parse is an error naming the variable, never a
//! silent default. [`ENVIRONMENT`] lists them all with what each accepts; [`check`] parses every
//! one that is set (each context and each host table calls it before any work) and sizes the
//! host engine's thread pool once; the readers elsewhere in the crate parse through the
//! functions here, so a value is read by one rule wherever it is read.
//! Imports nothing of the crate but its errors.

use crate::error::{Error, Result};
use std::sync::Once;

/// What a variable's value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A device selector (checked against the devices when a context opens).
    Selector,
    /// `1` (on) or `0` (off); unset or empty is off.
    Switch,
    /// A byte count, plain or with a binary unit `K`, `M` or `G` (`512M`, `1.5G`), as
    /// `--host-memory` takes it; the flag says whether 0 is allowed.
    Bytes {
        /// Whether 0 is a value (else refused as the command line refuses it).
        zero: bool,
    },
    /// A whole number from `min` to `max`.
    Count {
        /// The least value.
        min: u64,
        /// The largest value.
        max: u64,
    },
    /// A power of two from 1 to `max`.
    PowerOfTwo {
        /// The largest value (itself a power of two).
        max: u64,
    },
    /// A thread count: a whole number from 0 (one thread per CPU) to [`max_threads`].
    Threads,
    /// One of the listed words, spelled as listed.
    Word(&'static [&'static str]),
    /// A comma-separated list of the listed words (case ignored; empty items skipped).
    Words(&'static [&'static str]),
    /// Two whole numbers `wg,rows`: a power of two from 32 to 256, and 1 to 4.
    ScanShape,
    /// Whole seconds since 1970 (read by the Lua driver; listed here for the one table).
    Epoch,
    /// Any value: set or not is all that counts (a test hook).
    Presence,
}

/// One variable: its name, what it accepts and what it does.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    /// The variable's name.
    pub name: &'static str,
    /// What its value must be.
    pub kind: Kind,
    /// What it does, one line.
    pub what: &'static str,
}

/// The scan kernels `DIVERSITY_SCAN_KERNEL` may name.
pub const SCAN_KERNELS: &[&str] = &[
    "auto", "block64", "64", "block128", "128", "coopmat", "tensor", "filter",
];
/// The optional features `DIVERSITY_DISABLE` may turn off.
pub const FEATURES: &[&str] = &["fp16", "timestamps", "subgroups", "coopmat", "float64"];

/// Every environment variable the library, the Lua driver and the command line read at run
/// time (build-time `DIVERSITY_SHADER_DEFINES` is read by `build.rs` alone).
pub const ENVIRONMENT: &[Variable] = &[
    Variable {
        name: "DIVERSITY_DEVICE",
        kind: Kind::Selector,
        what: "the device: an index, a GPU-… UUID, a part of one device's name, or host",
    },
    Variable {
        name: "DIVERSITY_VALIDATION",
        kind: Kind::Switch,
        what: "1: Vulkan validation layers on for every context",
    },
    Variable {
        name: "DIVERSITY_L2_BYTES",
        kind: Kind::Bytes { zero: false },
        what: "the device's L2 size (Vulkan cannot report it)",
    },
    Variable {
        name: "DIVERSITY_DISABLE",
        kind: Kind::Words(FEATURES),
        what: "optional device features to turn off, to test the fallbacks",
    },
    Variable {
        name: "DIVERSITY_SCAN_KERNEL",
        kind: Kind::Word(SCAN_KERNELS),
        what: "the scan kernel of every job that does not name one",
    },
    Variable {
        name: "DIVERSITY_MODE",
        kind: Kind::Word(&["scan", "gram", "auto"]),
        what: "the engine of the old C ABI's and the vk_compute shim's jobs",
    },
    Variable {
        name: "DIVERSITY_HOST_MEMORY",
        kind: Kind::Bytes { zero: false },
        what: "the host engine's memory budget (default 60% of the memory)",
    },
    Variable {
        name: "RAYON_NUM_THREADS",
        kind: Kind::Threads,
        what: "the host engine's threads (0 or unset: one per CPU)",
    },
    Variable {
        name: "DIVERSITY_PQ_TABLE_MAX_BYTES",
        kind: Kind::Bytes { zero: true },
        what: "the most bytes of IVF-PQ precomputed tables (default 2G; 0: none)",
    },
    Variable {
        name: "DIVERSITY_IVF_QUEUE",
        kind: Kind::PowerOfTwo { max: 64 },
        what: "the IVF list scans' queue, a power of two (tuning; same results)",
    },
    Variable {
        name: "DIVERSITY_IVF_SCAN",
        kind: Kind::ScanShape,
        what: "the IVF list scan's workgroup and rows an invocation, wg,rows (tuning)",
    },
    Variable {
        name: "DIVERSITY_PIPELINE_STATS",
        kind: Kind::Switch,
        what: "1: print each new pipeline's driver statistics to stderr",
    },
    Variable {
        name: "DIVERSITY_SHADER_CLOCK",
        kind: Kind::Switch,
        what: "1: enable VK_KHR_shader_clock for the profiling builds",
    },
    Variable {
        name: "DIVERSITY_FAIL_AFTER_CHUNKS",
        kind: Kind::Count {
            min: 0,
            max: u32::MAX as u64,
        },
        what: "tests: after this many submissions the next reports a lost device",
    },
    Variable {
        name: "DIVERSITY_INJECT_PANIC",
        kind: Kind::Presence,
        what: "tests: every job step panics while it is set",
    },
    Variable {
        name: "SOURCE_DATE_EPOCH",
        kind: Kind::Epoch,
        what: "the driver's generated_at, for byte-identical caches",
    },
];

/// The value of `name`: `None` when unset or empty; a value that is not UTF-8 is refused.
pub fn raw(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(bad(name, "?", "not valid UTF-8")),
    }
}

fn bad(name: &str, value: &str, why: &str) -> Error {
    Error::Invalid(format!("{name}={value:?}: {why}"))
}

/// The threads the machine can run: what the operating system gives this process.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The most threads `RAYON_NUM_THREADS` may ask for: four per CPU the process may use (more
/// only queue up behind each other; 100,000 once spawned threads for minutes).
pub fn max_threads() -> usize {
    cpus() * 4
}

/// Parses `value` as [`Kind::Bytes`]: digits, an optional fraction, an optional unit K, M or G
/// (binary, any case), as `--host-memory` does; the result must fit in 64 bits.
pub fn parse_bytes(name: &str, value: &str, zero: bool) -> Result<u64> {
    let why =
        "expected a byte count or a size such as 512M, 2G or 1.5G (units K, M, G: powers of 1024)";
    let t = value.trim();
    let (num, scale) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1u64 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad(name, value, why));
    }
    let whole: u128 = int
        .parse()
        .map_err(|_| bad(name, value, "too large: at most 2^64 - 1 bytes"))?;
    let mut bytes = whole.checked_mul(scale as u128);
    if !frac.is_empty() {
        // The fraction of a unit, rounded down: at most 30 binary digits matter.
        let digits = &frac[..frac.len().min(18)];
        let f: u128 = digits.parse().unwrap_or(0);
        let part = f * scale as u128 / 10u128.pow(digits.len() as u32);
        bytes = bytes.and_then(|b| b.checked_add(part));
    }
    let bytes = bytes
        .filter(|&b| b <= u64::MAX as u128)
        .ok_or_else(|| bad(name, value, "too large: at most 2^64 - 1 bytes"))?
        as u64;
    if bytes == 0 && !zero {
        return Err(bad(name, value, "must be at least 1 byte"));
    }
    Ok(bytes)
}

/// Parses `value` as a whole number from `min` to `max` (digits only).
pub fn parse_count(name: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    let t = value.trim();
    let range = || format!("expected a whole number from {min} to {max}");
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(name, value, &range()));
    }
    match t.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(bad(name, value, &range())),
    }
}

/// Parses `value` against `kind`; `Ok(())` when it is one. [`Kind::Selector`] and
/// [`Kind::Presence`] take any value here (a selector is matched when a context opens).
pub fn parse(name: &str, value: &str, kind: Kind) -> Result<()> {
    match kind {
        Kind::Selector | Kind::Presence => Ok(()),
        Kind::Switch => parse_switch(name, value).map(|_| ()),
        Kind::Bytes { zero } => parse_bytes(name, value, zero).map(|_| ()),
        Kind::Count { min, max } => parse_count(name, value, min, max).map(|_| ()),
        Kind::PowerOfTwo { max } => parse_power_of_two(name, value, max).map(|_| ()),
        Kind::Threads => parse_threads(name, value).map(|_| ()),
        Kind::Word(words) => parse_word(name, value, words).map(|_| ()),
        Kind::Words(words) => parse_words(name, value, words).map(|_| ()),
        Kind::ScanShape => parse_scan_shape(name, value).map(|_| ()),
        Kind::Epoch => parse_count(name, value, 0, 253_402_300_799).map(|_| ()),
    }
}

/// A power of two from 1 to `max`.
pub fn parse_power_of_two(name: &str, value: &str, max: u64) -> Result<u64> {
    match parse_count(name, value, 1, max) {
        Ok(v) if v.is_power_of_two() => Ok(v),
        _ => Err(bad(
            name,
            value,
            &format!("expected a power of two from 1 to {max}"),
        )),
    }
}

/// `1` on, `0` off.
pub fn parse_switch(name: &str, value: &str) -> Result<bool> {
    match value.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(bad(name, value, "expected 1 (on) or 0 (off)")),
    }
}

/// A thread count from 0 (one per CPU) to [`max_threads`].
pub fn parse_threads(name: &str, value: &str) -> Result<usize> {
    let max = max_threads() as u64;
    parse_count(name, value, 0, max)
        .map(|v| v as usize)
        .map_err(|_| {
            bad(
                name,
                value,
                &format!(
                    "expected a whole number of threads from 1 to {max} ({} CPUs × 4; 0: one \
                     per CPU)",
                    cpus()
                ),
            )
        })
}

/// One of `words`, spelled as listed (as the command line's choices are); surrounding spaces
/// ignored.
pub fn parse_word(name: &str, value: &str, words: &[&str]) -> Result<String> {
    let v = value.trim();
    if words.contains(&v) {
        Ok(v.to_string())
    } else {
        Err(bad(
            name,
            value,
            &format!("expected one of {}", words.join(", ")),
        ))
    }
}

/// A comma-separated list of `words`, case ignored, empty items skipped; returned lowercase.
pub fn parse_words(name: &str, value: &str, words: &[&str]) -> Result<Vec<String>> {
    value
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(|w| {
            parse_word(name, &w.to_ascii_lowercase(), words).map_err(|_| {
                bad(
                    name,
                    value,
                    &format!("'{w}' is not one of {} (comma-separated)", words.join(", ")),
                )
            })
        })
        .collect()
}

/// `wg,rows`: a power of two from 32 to 256, and 1 to 4.
pub fn parse_scan_shape(name: &str, value: &str) -> Result<(usize, usize)> {
    let why = "expected wg,rows: wg a power of two from 32 to 256, rows 1 to 4";
    let (a, b) = value.split_once(',').ok_or_else(|| bad(name, value, why))?;
    let wg = parse_count(name, a, 32, 256).map_err(|_| bad(name, value, why))?;
    let rows = parse_count(name, b, 1, 4).map_err(|_| bad(name, value, why))?;
    if !wg.is_power_of_two() {
        return Err(bad(name, value, why));
    }
    Ok((wg as usize, rows as usize))
}

/// The variable `name` of [`ENVIRONMENT`] parsed by `f` when set (and not empty).
pub fn read<T>(name: &str, f: impl FnOnce(&str) -> Result<T>) -> Result<Option<T>> {
    raw(name)?.map(|v| f(&v)).transpose()
}

/// [`Kind::Switch`] `name`: on when `1`; unset, empty or `0` off.
pub fn switch(name: &str) -> Result<bool> {
    Ok(read(name, |v| parse_switch(name, v))?.unwrap_or(false))
}

/// [`Kind::Bytes`] `name`, when set.
pub fn bytes(name: &str, zero: bool) -> Result<Option<u64>> {
    read(name, |v| parse_bytes(name, v, zero))
}

static POOL: Once = Once::new();

/// Parses every variable of [`ENVIRONMENT`] that is set, refusing the first that does not
/// parse (naming it and its value); then, once per process, sizes the host engine's thread
/// pool by `RAYON_NUM_THREADS` (0 or unset: one thread per CPU).
pub fn check() -> Result<()> {
    for v in ENVIRONMENT {
        if let Some(value) = raw(v.name)? {
            parse(v.name, &value, v.kind)?;
        }
    }
    let threads = read("RAYON_NUM_THREADS", |v| {
        parse_threads("RAYON_NUM_THREADS", v)
    })?
    .filter(|&t| t > 0)
    .unwrap_or_else(cpus);
    POOL.call_once(|| {
        // Built before any parallel work of ours; if another library built the global pool
        // first, it keeps its size.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_the_command_line_parses_them() {
        let ok = |v: &str| parse_bytes("X", v, false).unwrap();
        assert_eq!(ok("1"), 1);
        assert_eq!(ok("1G"), 1 << 30);
        assert_eq!(ok("512m"), 512 << 20);
        assert_eq!(ok("1.5G"), 3 << 29);
        assert_eq!(ok("4k"), 4096);
        assert_eq!(ok(" 1000000 "), 1_000_000);
        assert_eq!(ok("18446744073709551615"), u64::MAX);
        assert_eq!(parse_bytes("X", "0", true).unwrap(), 0);
        for v in [
            "abc",
            "-1",
            "1e9",
            "0x100000",
            "18446744073709551616",
            "17179869184G",
            "1GB",
            "1 G",
            "G",
            ".5G",
            "0",
            "1T",
            "+1",
        ] {
            let e = parse_bytes("DIVERSITY_HOST_MEMORY", v, false)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("DIVERSITY_HOST_MEMORY={v:?}: ")),
                "{v}: {e}"
            );
        }
    }

    #[test]
    fn counts_words_switches_and_shapes_are_strict() {
        assert_eq!(parse_count("X", "7", 0, 10).unwrap(), 7);
        for v in ["-1", "1.0", "11", "", "0x1", "1e1"] {
            assert!(parse_count("X", v, 0, 10).is_err(), "{v}");
        }
        assert!(parse_switch("X", "1").unwrap());
        assert!(!parse_switch("X", "0").unwrap());
        for v in ["yes", "true", "2", "on"] {
            assert!(parse_switch("X", v).is_err(), "{v}");
        }
        assert_eq!(parse_word("X", " gram", &["scan", "gram"]).unwrap(), "gram");
        assert!(parse_word("X", "grams", &["scan", "gram"]).is_err());
        assert!(parse_word("X", "Gram", &["scan", "gram"]).is_err());
        assert_eq!(
            parse_words("X", "fp16, SUBGROUPS,", FEATURES).unwrap(),
            vec!["fp16", "subgroups"]
        );
        let e = parse_words("DIVERSITY_DISABLE", "fp16,subgroup", FEATURES)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'subgroup' is not one of"), "{e}");
        assert_eq!(parse_scan_shape("X", "64,2").unwrap(), (64, 2));
        for v in ["48,2", "64", "64,5", "512,1", "64,2,1"] {
            assert!(parse_scan_shape("X", v).is_err(), "{v}");
        }
        let max = max_threads();
        assert_eq!(parse_threads("T", "0").unwrap(), 0);
        assert_eq!(parse_threads("T", &max.to_string()).unwrap(), max);
        for v in [&(max + 1).to_string()[..], "100000", "-1", "two", "1.5"] {
            let e = parse_threads("RAYON_NUM_THREADS", v)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("RAYON_NUM_THREADS") && e.contains("CPUs × 4"),
                "{v}: {e}"
            );
        }
        assert!(parse("DIVERSITY_IVF_QUEUE", "8", Kind::PowerOfTwo { max: 64 }).is_ok());
        assert!(parse("DIVERSITY_IVF_QUEUE", "6", Kind::PowerOfTwo { max: 64 }).is_err());
        assert!(parse("DIVERSITY_IVF_QUEUE", "128", Kind::PowerOfTwo { max: 64 }).is_err());
    }

    /// Every variable name the crate's sources and the Lua files quote is in [`ENVIRONMENT`]
    /// (once): a new setting cannot be read without being listed, parsed and documented.
    #[test]
    fn every_variable_read_is_listed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in [
            "src",
            "src/cache",
            "src/device",
            "src/files",
            "src/gram",
            "src/host",
            "src/ivf",
            "src/knn",
            "src/lua",
            "src/scan",
            "lua",
            "lua/diversity",
        ] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "rs" || x == "lua") {
                    files.push(p);
                }
            }
        }
        assert!(files.len() > 50, "only {} source files found", files.len());
        let mut seen = 0;
        for p in files {
            let text = std::fs::read_to_string(&p).unwrap();
            for piece in text.split('"').skip(1).step_by(2) {
                let is_var = (piece.starts_with("DIVERSITY_")
                    || piece == "RAYON_NUM_THREADS"
                    || piece == "SOURCE_DATE_EPOCH")
                    && piece
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                // Build-time values (build.rs sets them for `env!`) are no run-time setting.
                let build_time = piece == "DIVERSITY_SHADER_DEFINES"
                    || text.contains(&format!("env!(\"{piece}\")"));
                if is_var && !build_time {
                    seen += 1;
                    assert!(
                        ENVIRONMENT.iter().any(|v| v.name == piece),
                        "{} reads {piece}, which settings::ENVIRONMENT does not list",
                        p.display()
                    );
                }
            }
        }
        assert!(seen >= 10, "only {seen} quoted variable names found");
    }

    /// docs/environment.md's run-time table names exactly the variables listed here.
    #[test]
    fn the_environment_page_lists_every_variable() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let page = std::fs::read_to_string(root.join("docs/environment.md")).unwrap();
        let table = page
            .split("## Read at run time")
            .nth(1)
            .and_then(|t| t.split("\n## ").next())
            .expect("docs/environment.md has a \"Read at run time\" section");
        let rows: Vec<&str> = table
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .collect();
        let mut listed: Vec<&str> = ENVIRONMENT.iter().map(|v| v.name).collect();
        let mut documented = rows.clone();
        listed.sort_unstable();
        documented.sort_unstable();
        assert_eq!(
            listed, documented,
            "docs/environment.md's run-time table vs ENVIRONMENT"
        );
    }

    #[test]
    fn every_variable_is_listed_once() {
        let mut names: Vec<&str> = ENVIRONMENT.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len());
    }
}
