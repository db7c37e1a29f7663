//! Outputs that would destroy something are refused, by every writer and every program, before
//! any work: an output that exists and is not a regular file (a FIFO, a directory, a device such
//! as `/dev/null`, through a symlink too) is never renamed over nor written into, and an output of
//! an example program that is one of its inputs (or another of its outputs) is refused.
//!
//! Special files are made in a temporary directory (`mkfifo`, `mkdir`); `/dev/null` itself is
//! only ever handed to checks that refuse before anything is created.

use diversity::cache::{
    BinaryCacheWriter, JsonCacheWriter, KnnGraphShard, KnnGraphWriter, KnnMetric, PendingFile,
    RankingsWriter, ShardLayout,
};
use diversity::files;
use diversity::Table;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{example, TempDir};

const DATA: &str = "data/fortunes-300.embeddings.json";

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().expect("run mkfifo");
    assert!(ok.success(), "mkfifo {}", p.display());
}

fn is_fifo(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_fifo())
}

/// A special output: its path, the words of its refusal, and the check that it is still there.
type Special = (PathBuf, &'static str, fn(&Path) -> bool);

/// A FIFO, a directory and a symlink to a FIFO in `dir`, each with what it must still be.
fn specials(dir: &TempDir) -> Vec<Special> {
    let fifo = dir.path("fifo.out");
    mkfifo(&fifo);
    let sub = dir.path("dir.out");
    std::fs::create_dir(&sub).unwrap();
    let link = dir.path("link.out");
    let target = dir.path("target.fifo");
    mkfifo(&target);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    fn dir_still(p: &Path) -> bool {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
    }
    fn link_still(p: &Path) -> bool {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
            && is_fifo(&p.with_file_name("target.fifo"))
    }
    vec![
        (fifo, "is a FIFO", is_fifo),
        (sub, "is a directory", dir_still),
        (link, "is a FIFO", link_still),
    ]
}

fn small_table() -> Table {
    Table::new(vec![1.0, 0.0, 0.0, 1.0, 0.5, 0.5], 3, 2).unwrap()
}

/// Every writer of the library, each given `p` as its output.
fn writers(p: &Path) -> Vec<(&'static str, diversity::Result<()>)> {
    let t = small_table();
    let meta = serde_json::json!({});
    let sum = "fnv1a64:0123456789abcdef";
    vec![
        ("PendingFile", PendingFile::create(p).map(drop)),
        ("write_atomic", files::write_atomic(p, b"x")),
        (
            "JsonCacheWriter",
            JsonCacheWriter::create(p, &meta, None).map(drop),
        ),
        (
            "BinaryCacheWriter",
            BinaryCacheWriter::create(p, 3, 3).map(drop),
        ),
        (
            "RankingsWriter",
            RankingsWriter::create(p, 3, Some(1), "cosine-knn-v1", &meta, None).map(drop),
        ),
        (
            "KnnGraphWriter",
            KnnGraphWriter::create(p, 3, 1, KnnMetric::L2).map(drop),
        ),
        (
            "KnnGraphShard",
            KnnGraphShard::create(
                p,
                3,
                1,
                KnnMetric::L2,
                (1, 2, ShardLayout::Contiguous),
                "run",
            )
            .map(drop),
        ),
        ("save_fp16_bin", files::save_fp16_bin(p, &t, "raw", sum)),
        ("save_npy_f32", files::save_npy_f32(p, &t)),
        ("save_npy_f16", files::save_npy_f16(p, &t)),
        ("save_ids", files::save_ids(p, None, 3, sum)),
    ]
}

#[test]
fn every_writer_refuses_an_output_that_is_not_a_regular_file() {
    let dir = TempDir::new("special-out");
    let specials = specials(&dir);
    let before = dir.entries();
    for (p, words, still) in &specials {
        for (name, r) in writers(p) {
            let e = match r {
                Ok(()) => panic!("{name} wrote {} ({words})", p.display()),
                Err(e) => e.to_string(),
            };
            assert!(
                e.contains(&p.display().to_string())
                    && e.contains(words)
                    && e.contains("not a regular file"),
                "{name}: {e}"
            );
            assert!(still(p), "{name} replaced {}", p.display());
        }
    }
    // Nothing created: no temporary files, no sidecar.
    assert_eq!(dir.entries(), before);
}

#[test]
fn an_fp16_bin_whose_sidecar_is_a_fifo_is_not_written() {
    let dir = TempDir::new("special-sidecar");
    let bin = dir.path("t.bin");
    let side = files::fp16_bin_sidecar(&bin);
    mkfifo(&side);
    let e = files::save_fp16_bin(&bin, &small_table(), "raw", "fnv1a64:0123456789abcdef")
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.bin.json") && e.contains("is a FIFO"), "{e}");
    assert!(is_fifo(&side));
    assert_eq!(dir.entries(), vec!["t.bin.json"]);
}

#[test]
fn a_pending_file_checks_its_destination_again_before_the_rename() {
    let dir = TempDir::new("special-commit");
    let out = dir.path("out.json");
    let (pending, f) = PendingFile::create(&out).unwrap();
    drop(f);
    // Something that is not a regular file appears there before the rename.
    mkfifo(&out);
    let e = pending.commit().unwrap_err().to_string();
    assert!(e.contains("out.json") && e.contains("is a FIFO"), "{e}");
    assert!(is_fifo(&out), "the FIFO was renamed over");
    assert_eq!(
        dir.entries(),
        vec!["out.json"],
        "the temporary file is removed"
    );
}

#[test]
fn dev_null_is_refused_before_anything_is_created() {
    // Only checks that refuse before any file exists: nothing here could replace /dev/null.
    let null = Path::new("/dev/null");
    assert_eq!(files::file_kind(null), Some("character device"));
    let e = files::check_output(null).unwrap_err().to_string();
    assert!(
        e.contains("/dev/null: is a character device, not a regular file"),
        "{e}"
    );
    let e = PendingFile::create(null).unwrap_err().to_string();
    assert!(e.contains("is a character device"), "{e}");
    assert_eq!(files::file_kind(Path::new("/no/such/file")), None);
    assert_eq!(files::file_kind(Path::new(DATA)), Some("file"));
}

// ---------------------------------------------------------------------------------------------
// The example programs
// ---------------------------------------------------------------------------------------------

/// Run example `name` with `args` in `dir`: exit status and stderr.
fn run(dir: &TempDir, name: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(example(name))
        .args(args)
        .current_dir(&dir.0)
        .output()
        .expect("run example");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory holding a copy of the bundled table as `t.json`, a few other inputs, a FIFO
/// `fifo` and a directory `sub`.
fn workdir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(DATA);
    std::fs::copy(&src, dir.path("t.json")).unwrap();
    std::os::unix::fs::symlink(dir.path("t.json"), dir.path("link.json")).unwrap();
    dir.file("q.f32", &[0u8; 16]);
    dir.file("run.json", b"{\"label\":\"r\",\"runs\":[]}");
    dir.file("shard-1.json", b"{}");
    mkfifo(&dir.path("fifo"));
    std::fs::create_dir(dir.path("sub")).unwrap();
    dir
}

/// Every file's bytes (None for a FIFO or directory, with its kind).
fn snapshot(dir: &TempDir) -> Vec<(String, String, Option<Vec<u8>>)> {
    dir.entries()
        .into_iter()
        .map(|n| {
            let p = dir.path(&n);
            let kind = files::file_kind(&p).unwrap_or("none").to_string();
            let bytes = (kind == "file").then(|| std::fs::read(&p).unwrap());
            (n, kind, bytes)
        })
        .collect()
}

/// Each `(program, args, words)` is refused with exit status 1 and a message holding every one
/// of `words`, and leaves the directory as it was: inputs byte-identical, the FIFO a FIFO,
/// nothing created.
fn refused(tag: &str, cases: &[(&str, &[&str], &[&str])]) {
    let dir = workdir(tag);
    let before = snapshot(&dir);
    for (prog, args, words) in cases {
        let (rc, err) = run(&dir, prog, args);
        assert_eq!(rc, 1, "{prog} {args:?}: {err}");
        for w in *words {
            assert!(err.contains(w), "{prog} {args:?}: '{w}' not in: {err}");
        }
        assert!(err.contains("refusing"), "{prog} {args:?}: {err}");
        assert_eq!(
            snapshot(&dir),
            before,
            "{prog} {args:?} changed the directory"
        );
    }
}

#[test]
fn rankings_refuses_outputs_over_inputs_and_special_files() {
    refused(
        "ex-rankings",
        &[
            (
                "rankings",
                &["--table", "t.json", "--out", "t.json"],
                &["--out t.json is also an input (--table)"],
            ),
            (
                "rankings",
                &["--table", "t.json", "--out", "o.json", "--graph", "t.json"],
                &["--graph t.json is also an input (--table)"],
            ),
            (
                "rankings",
                &["--table", "t.json", "--out", "link.json"],
                &["--out link.json is also an input (--table)"],
            ),
            (
                "rankings",
                &["--table", "t.json", "--out", "o.json", "--graph", "o.json"],
                &["--graph o.json is also --out"],
            ),
            (
                "rankings",
                &["--table", "t.json", "--out", "fifo"],
                &["--out fifo: is a FIFO, not a regular file"],
            ),
            (
                "rankings",
                &["--table", "t.json", "--out", "o.json", "--graph", "sub"],
                &["--graph sub: is a directory, not a regular file"],
            ),
            (
                "rankings",
                &["merge", "--out", "shard-1.json", "shard-1.json"],
                &["merge: --out shard-1.json is also an input (shard file)"],
            ),
            (
                "rankings",
                &["merge-graph", "--out", "fifo", "shard-1.json"],
                &["merge-graph: --out fifo: is a FIFO"],
            ),
        ],
    );
}

#[test]
fn sequences_and_the_benchmarks_refuse_outputs_over_inputs_and_special_files() {
    refused(
        "ex-others",
        &[
            (
                "sequences",
                &["--table", "t.json", "--out", "t.json"],
                &["--out t.json is also an input (--table)"],
            ),
            (
                "sequences",
                &["--table", "t.json", "--out", "fifo"],
                &["--out fifo: is a FIFO"],
            ),
            (
                "bench",
                &["--table", "t.json", "--json", "t.json"],
                &["--json t.json is also an input (--table)"],
            ),
            (
                "bench",
                &["--table", "t.json", "--md", "m.md", "--best", "m.md"],
                &["--best m.md is also --md"],
            ),
            (
                "bench",
                &["--replot", "run.json", "--plot", "run.json"],
                &["--plot run.json is also an input (--replot)"],
            ),
            (
                "bench",
                &["--table", "t.json", "--plot", "fifo"],
                &["--plot fifo: is a FIFO"],
            ),
            (
                "bench_knn",
                &["--table", "t.json", "--ids", "t.json"],
                &["--ids t.json is also an input (--table)"],
            ),
            (
                "bench_knn",
                &["--table", "t.json", "--queries", "q.f32", "--json", "q.f32"],
                &["--json q.f32 is also an input (--queries)"],
            ),
            (
                "bench_knn",
                &["--table", "t.json", "--md", "sub"],
                &["--md sub: is a directory"],
            ),
            (
                "bench_ivf",
                &["--table", "t.json", "--save", "t.json"],
                &["--save t.json is also an input (--table)"],
            ),
            (
                "bench_ivf",
                &[
                    "--table",
                    "t.json",
                    "--queries",
                    "q.f32",
                    "--dump-gt",
                    "q.f32",
                ],
                &["--dump-gt q.f32 is also an input (--queries)"],
            ),
            (
                "bench_ivf",
                &["--table", "t.json", "--json", "fifo"],
                &["--json fifo: is a FIFO"],
            ),
            (
                "bench_gram",
                &["--table", "t.json", "--seqs", "t.json"],
                &["--seqs t.json is also an input (--table)"],
            ),
            (
                "bench_gram",
                &["--table", "t.json", "--e2e", "c.json", "--json", "c.json"],
                &["--e2e c.json is also --json"],
            ),
        ],
    );
}
