//! The example commands that check things must be able to fail: `examples/check` (the float64
//! oracle as a command) run as a user runs it, on a cache keyed by ids (as the driver writes one
//! when the input has ids), on an empty cache, and on keys the table does not have.
//!
//! The examples are built by `cargo build --release --all-targets` (or `cargo test` without
//! `--test` filters); the binary is looked up beside this test's own profile directory.

use diversity::files::load_table;
use diversity::reference::reference_sequence;
use diversity::table::Precision;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{example, TempDir};

const DATA: &str = "data/fortunes-300.embeddings.json";

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(DATA)
}

/// Runs `cmd` (an example, `what`), which must fail as a usage error: exit status 2, `words` on
/// stderr, no panic. Returns its stderr.
#[track_caller]
fn usage_error(cmd: &mut Command, what: &str, words: &str) -> String {
    let out = cmd.output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_run(
        what,
        (out.status.code().unwrap_or(-1), 2),
        &err,
        words,
        &err,
    );
    err
}

/// A run of an example, `what`: its exit status `rc` is the one wanted, `text` (its stdout or
/// stderr) holds `want`, and its stderr `err` shows no panic.
#[track_caller]
fn assert_run(what: &str, (rc, want_rc): (i32, i32), text: &str, want: &str, err: &str) {
    assert_eq!(rc, want_rc, "{what}: exit status\nstderr {err}");
    assert!(
        text.contains(want),
        "{what}: no {want:?} in {text}\nstderr {err}"
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
}

/// Run `check --table DATA --seqs cache`: exit status, stdout, stderr.
fn check(cache: &Path) -> (i32, String, String) {
    let out = Command::new(example("check"))
        .arg("--table")
        .arg(data())
        .arg("--seqs")
        .arg(cache)
        .output()
        .expect("run examples/check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A cache keyed by the fortunes' ids, with the float64 reference's sequences as ids.
fn id_cache(dir: &TempDir, starts: &[u32], steps: usize) -> PathBuf {
    let t = load_table(&data(), None).expect("load");
    let ids = t.ids().expect("the fortunes have ids").to_vec();
    let stored = t.as_stored(Precision::Fp32);
    let mut seqs = serde_json::Map::new();
    for &s in starts {
        let seq = reference_sequence(&stored, s, steps);
        let key = ids[s as usize].as_str().expect("string ids").to_string();
        seqs.insert(key, seq.iter().map(|&i| ids[i as usize].clone()).collect());
    }
    let j = serde_json::json!({ "metadata": {}, "sequences": seqs });
    dir.file("ids.json", &serde_json::to_vec(&j).unwrap())
}

#[test]
fn check_maps_id_keys_through_the_tables_ids() {
    let dir = TempDir::new("check-ids");
    let cache = id_cache(&dir, &[0, 17, 299], 5);
    let (rc, out, err) = check(&cache);
    let want = "ok: 3 sequences, 15 steps checked";
    assert_run("check", (rc, 0), &out, want, &err);
}

#[test]
fn check_fails_on_a_wrong_pick_named_by_its_key() {
    let dir = TempDir::new("check-wrong");
    let j = r#"{"metadata":{},"sequences":{"fortune-3":["fortune-3","fortune-7"]}}"#;
    let (rc, out, err) = check(&dir.file("wrong.json", j.as_bytes()));
    assert_eq!(rc, 1, "stdout {out}\nstderr {err}");
    assert!(
        err.contains("fortune-3") && err.contains("NotArgmax"),
        "{err}"
    );
    assert!(!out.contains("ok:"), "{out}");
}

#[test]
fn check_fails_when_it_checks_nothing() {
    let dir = TempDir::new("check-empty");
    for (name, text) in [
        ("empty.json", r#"{"metadata":{},"sequences":{}}"#),
        (
            "no-steps.json",
            r#"{"metadata":{},"sequences":{"fortune-3":["fortune-3"]}}"#,
        ),
    ] {
        let (rc, out, err) = check(&dir.file(name, text.as_bytes()));
        assert_eq!(rc, 1, "{name}: stdout {out}\nstderr {err}");
        assert!(err.contains("nothing"), "{name}: {err}");
        assert!(!out.contains("ok:"), "{name}: {out}");
    }
}

#[test]
fn check_fails_on_a_key_the_table_does_not_have() {
    let dir = TempDir::new("check-unknown");
    for (name, text, word) in [
        (
            "unknown.json",
            r#"{"metadata":{},"sequences":{"nope":["nope","fortune-7"]}}"#,
            "\"nope\"",
        ),
        (
            "index.json",
            r#"{"metadata":{},"sequences":{"3":[3,7]}}"#,
            "\"3\"",
        ),
    ] {
        let (rc, out, err) = check(&dir.file(name, text.as_bytes()));
        assert_run(name, (rc, 1), &err, word, &format!("{err}\nstdout {out}"));
    }
}

/// A size given to an example is used or refused, never cut to 32 bits: `bench --capacity 2^32
/// + 64` once ran with a capacity of 64.
#[test]
fn bench_refuses_a_capacity_past_32_bits() {
    let mut cmd = Command::new(example("bench"));
    cmd.arg("--table").arg(data());
    cmd.args(["--capacity", "4294967360", "--quick"]);
    // A value the parser refuses: a usage error, exit status 2.
    let want = "--capacity 4294967360: at most 2^32 - 1";
    usage_error(&mut cmd, "bench --capacity", want);
}

/// Every example answers `--help` with its usage on stdout and exit status 0, and an unknown
/// flag, a missing value or a value given to a switch with a message and exit status 2, before
/// touching a device or a file.
#[test]
fn every_example_has_help_and_usage_errors() {
    let names = [
        "sequences",
        "check",
        "bench",
        "bench_gram",
        "bench_knn",
        "rankings",
        "bench_ivf",
    ];
    for name in names {
        let out = Command::new(example(name))
            .arg("--help")
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name} --help: {text}");
        assert!(
            text.starts_with(&format!("usage: {name} --table FILE")),
            "{name} --help: {text}"
        );
        assert!(text.lines().count() >= 2, "{name} --help: {text}");
        for (args, words) in [
            (&["--frobnicate"][..], "unknown argument --frobnicate"),
            (&["--table"][..], "--table needs a"),
            (&["--table=x", "--center=1"][..], "--center"),
        ] {
            if name == "bench_knn" && args[1..].contains(&"--center=1") {
                continue; // bench_knn has no --center
            }
            let what = format!("{name} {args:?}");
            let err = usage_error(Command::new(example(name)).args(args), &what, words);
            assert!(
                err.contains("--help lists the options"),
                "{name} {args:?}: {err}"
            );
        }
    }
}

/// `rankings --index ivf-flat`: with every list probed its rankings are the exact ones (the
/// cache differs only in the metadata naming the index); its usage errors exit 2 naming the
/// cause and write nothing.
#[test]
fn rankings_with_an_ivf_index() {
    let dir = TempDir::new("rankings-ivf");
    let run = |args: &[&str]| {
        let out = Command::new(example("rankings"))
            .arg("--table")
            .arg(data())
            .args(args)
            .output()
            .expect("run rankings");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let exact = dir.path("exact.json");
    let ivf = dir.path("ivf.json");
    let (e, i) = (exact.to_str().unwrap(), ivf.to_str().unwrap());
    assert_eq!(run(&["--top-k", "7", "--out", e]).0, 0);
    let (code, err) = run(&[
        "--top-k", "7", "--out", i, "--index", "ivf-flat", "--nlist", "6", "--nprobe", "6",
    ]);
    assert_eq!(code, 0, "{err}");
    let read = |p: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json")
    };
    let (a, b) = (read(&exact), read(&ivf));
    assert_eq!(a["rankings"], b["rankings"]);
    assert_eq!(b["metadata"]["index"], "ivf-flat");
    assert_eq!(b["metadata"]["nlist"], 6);
    assert_eq!(b["metadata"]["nprobe"], 6);
    let bad = dir.path("bad.json");
    let b = bad.to_str().unwrap();
    for (args, words) in [
        (
            &["--index", "hnsw", "--top-k", "5"][..],
            "expected flat or ivf-flat",
        ),
        (&["--index", "ivf-flat"][..], "needs --top-k"),
        (
            &["--index", "ivf-flat", "--top-k", "5", "--verify", "3"][..],
            "does not apply",
        ),
        (
            &["--index", "ivf-flat", "--top-k", "5", "--nprobe", "0"][..],
            "at least 1",
        ),
    ] {
        let mut a = args.to_vec();
        a.extend(["--out", b]);
        let (code, err) = run(&a);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
        assert!(!bad.exists(), "{args:?} wrote {}", bad.display());
    }
}

/// A number that means nothing for its option — a zero batch, step, k or repeat count, a NaN,
/// infinite, negative or zero ε or budget — is a usage error naming the flag (exit 2), never
/// clamped into range or passed on; nothing is written. Before, `sequences --batch 0` ran
/// batches of 1, `bench_knn --k 0` ran k = 1 and `check --eps nan` passed a violating cache.
#[test]
fn examples_refuse_meaningless_numbers() {
    let dir = TempDir::new("ex-numbers");
    for (name, args, words) in [
        (
            "sequences",
            &["--batch", "0"][..],
            "--batch 0: must be at least 1",
        ),
        (
            "sequences",
            &["--steps", "0"],
            "--steps 0: must be at least 1",
        ),
        (
            "sequences",
            &["--dim", "-3"],
            "--dim -3: not an integer of at least 1",
        ),
        (
            "sequences",
            &["--workgroup", "0"],
            "--workgroup 0: must be at least 1",
        ),
        ("bench_knn", &["--k", "10,0"], "--k 0: must be at least 1"),
        (
            "bench_knn",
            &["--repeat", "0"],
            "--repeat 0: must be at least 1",
        ),
        (
            "bench",
            &["--budget-s", "nan"],
            "--budget-s nan: must be a finite number above 0",
        ),
        (
            "bench",
            &["--budget-s", "0"],
            "--budget-s 0: must be a finite number above 0",
        ),
        (
            "bench",
            &["--gamma-scale", "inf"],
            "--gamma-scale inf: must be a finite number",
        ),
        ("bench", &["--steps", "0"], "--steps 0: must be at least 1"),
        (
            "bench_gram",
            &["--wg", "256,0"],
            "--wg 0: must be at least 1",
        ),
        (
            "bench_gram",
            &["--batch", "0"],
            "--batch 0: must be at least 1",
        ),
        (
            "check",
            &["--eps", "nan"],
            "--eps nan: must be a finite number 0 or more",
        ),
        (
            "check",
            &["--eps", "-1e-5"],
            "--eps -1e-5: must be a finite number 0 or more",
        ),
        ("check", &["--limit", "0"], "--limit 0: must be at least 1"),
        (
            "rankings",
            &["--top-k", "0"],
            "--top-k 0: must be at least 1",
        ),
        (
            "rankings",
            &["--graph-k", "0"],
            "--graph-k 0: must be at least 1",
        ),
        (
            "rankings",
            &["--batch", "0"],
            "--batch 0: must be at least 1",
        ),
        (
            "bench_ivf",
            &["--nprobe", "4,0"],
            "--nprobe 0: must be at least 1",
        ),
        ("bench_ivf", &["--k", "0"], "--k 0: must be at least 1"),
        (
            "bench_ivf",
            &["--refine", "0"],
            "--refine 0: must be at least 1",
        ),
    ] {
        let mut cmd = Command::new(example(name));
        cmd.current_dir(dir.path("")).arg("--table").arg(data());
        usage_error(cmd.args(args), &format!("{name} {args:?}"), words);
    }
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());
}

/// A row whose norm fp32 cannot handle exactly (here values of 1e-25, whose products underflow)
/// stops `sequences` and `rankings` before any output, naming the row; in fp16 the row rounds
/// to a zero row, which is valid. Before, such a row was ranked first and broke the sequences.
#[test]
fn examples_refuse_rows_outside_the_fp32_norm_range() {
    let dir = TempDir::new("ex-norms");
    let (n, d) = (6, 4);
    let mut v: Vec<f32> = (0..n * d).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    v[2 * d..3 * d].iter_mut().for_each(|x| *x *= 1e-25);
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let table = dir.file("t.f32", &bytes);
    let run = |name: &str, args: &[&str]| {
        let out = Command::new(example(name))
            .arg("--table")
            .arg(&table)
            .args(["--dim", "4"])
            .args(args)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    let s = dir.path("s.json");
    let r = dir.path("r.json");
    for (name, out) in [("sequences", &s), ("rankings", &r)] {
        let (code, err) = run(
            name,
            &["--precision", "fp32", "--out", out.to_str().unwrap()],
        );
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(
            err.contains("row 2 has norm") && err.contains("scale the table or zero the row"),
            "{name}: {err}"
        );
        assert!(!out.exists(), "{name} wrote {}", out.display());
    }
    assert_eq!(dir.entries(), ["t.f32"]);
    let (code, err) = run(
        "sequences",
        &["--precision", "fp16", "--out", s.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{err}");
}

/// A mean-centred fp16 `.bin` (its sidecar says so) is centred: the programs neither centre it
/// again under `--center` nor label it raw without it; their rows are those of the centred
/// table given as `.npy --center`.
#[test]
fn a_centred_bin_keeps_its_space_in_the_example_programs() {
    use diversity::files::{save_fp16_bin, CENTERED_SPACE};
    let dir = TempDir::new("ex-bin-space");
    let t = load_table(&data(), None).unwrap().head(60).unwrap();
    let npy = dir.path("t.npy");
    diversity::files::save_npy_f32(&npy, &t).unwrap();
    let bin = dir.path("c.bin");
    save_fp16_bin(&bin, &t.centered(), CENTERED_SPACE, "none").unwrap();
    let run = |name: &str, table: &Path, center: bool, out: &str| {
        let out = dir.path(out);
        let mut cmd = Command::new(example(name));
        cmd.arg("--table")
            .arg(table)
            .args(["--precision", "fp16", "--out"]);
        cmd.arg(&out);
        if name == "sequences" {
            cmd.args(["--mode", "scan", "--steps", "12"]);
        } else {
            cmd.args(["--top-k", "5"]);
        }
        if center {
            cmd.arg("--center");
        }
        let o = cmd.output().expect("run");
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        v
    };
    for (name, section) in [("sequences", "sequences"), ("rankings", "rankings")] {
        let want = run(name, &npy, true, &format!("{name}-npy.json"));
        for center in [false, true] {
            let got = run(name, &bin, center, &format!("{name}-bin-{center}.json"));
            assert_eq!(got[section], want[section], "{name}, --center {center}");
            let label = got
                .get("metadata")
                .and_then(|m| m.get("center"))
                .or_else(|| got.get("center"));
            assert_eq!(
                label,
                Some(&serde_json::json!(true)),
                "{name}, --center {center}: {got:.200}"
            );
        }
    }
}
