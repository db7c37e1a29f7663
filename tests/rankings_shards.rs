//! Sharded rankings runs: `examples/rankings --shard i/n[:strided]` on the machine's Vulkan
//! device, then `merge` / `merge-graph`, must give the one-shot run's rankings cache and k-NN
//! graph byte for byte; an incomplete, mixed, repeated or damaged set of shards is refused with
//! a message naming the cause (the missing shards by i/n) and no output file.
//!
//! The examples are built by `cargo build --release --all-targets` (or `cargo test` without
//! `--test` filters); the binary is looked up beside this test's own profile directory.

use diversity::cache::{merge_graphs, merge_rankings, KnnGraphShard, KnnMetric, ShardLayout};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{reseal, TempDir};

const DATA: &str = "data/fortunes-300.embeddings.json";

fn rankings_exe() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(Path::parent).expect("profile dir");
    let p = dir.join("examples").join("rankings");
    assert!(
        p.exists(),
        "{} is missing: build the examples first (cargo build --release --all-targets)",
        p.display()
    );
    p
}

/// Run the rankings example with `args`: (success, stdout + stderr).
fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(rankings_exe())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("DIVERSITY_VALIDATION", "1")
        .output()
        .expect("run examples/rankings");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn ok(args: &[&str]) -> String {
    let (success, text) = run(args);
    assert!(success, "rankings {args:?} failed: {text}");
    text
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Shards 1..=n of a run with `extra` options into `dir`: the rankings and graph shard paths.
fn shards(dir: &TempDir, tag: &str, n: usize, layout: &str, extra: &[&str]) -> Vec<[PathBuf; 2]> {
    (1..=n)
        .map(|i| {
            let (r, g) = (
                dir.path(&format!("{tag}-{i}.json")),
                dir.path(&format!("{tag}-{i}.knn")),
            );
            let spec = format!("{i}/{n}{layout}");
            let mut args = vec!["--table", DATA, "--out", s(&r), "--graph", s(&g)];
            args.extend_from_slice(&["--shard", &spec]);
            args.extend_from_slice(extra);
            ok(&args);
            [r, g]
        })
        .collect()
}

fn merge(kind: &str, out: &Path, inputs: &[&Path]) -> (bool, String) {
    let mut args = vec![kind, "--out", s(out)];
    args.extend(inputs.iter().map(|p| s(p)));
    run(&args)
}

#[test]
fn shards_merge_to_the_one_shot_rankings_and_graph_byte_for_byte() {
    let dir = TempDir::new("rankings-shards");
    for (extra, n, layout) in [
        (&["--top-k", "7", "--graph-k", "5"][..], 3, ""),
        (
            &["--top-k", "4", "--graph-k", "9", "--metric", "l2"][..],
            4,
            ":strided",
        ),
        (&["--top-k", "all", "--precision", "fp16"][..], 2, ""),
    ] {
        let (one_r, one_g) = (dir.path("one.json"), dir.path("one.knn"));
        let mut args = vec!["--table", DATA, "--out", s(&one_r), "--graph", s(&one_g)];
        args.extend_from_slice(extra);
        ok(&args);
        let parts = shards(&dir, "s", n, layout, extra);
        // Any order.
        let rs: Vec<&Path> = parts.iter().rev().map(|p| p[0].as_path()).collect();
        let gs: Vec<&Path> = parts.iter().rev().map(|p| p[1].as_path()).collect();
        let (mr, mg) = (dir.path("merged.json"), dir.path("merged.knn"));
        let (yes, text) = merge("merge", &mr, &rs);
        assert!(yes, "{text}");
        assert!(text.contains(&format!("merged {n} ")), "{text}");
        let (yes, text) = merge("merge-graph", &mg, &gs);
        assert!(yes, "{text}");
        assert_eq!(std::fs::read(&one_r).unwrap(), std::fs::read(&mr).unwrap());
        assert_eq!(std::fs::read(&one_g).unwrap(), std::fs::read(&mg).unwrap());
        // A shard's partial cache is not the whole: it holds its own items only.
        let part: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&parts[0][0]).unwrap()).unwrap();
        assert_eq!(part["metadata"]["shard"], format!("1/{n}"));
        assert_eq!(part["metadata"]["shard_items_total"], 300);
        assert!(part["rankings"].as_object().unwrap().len() < 300);
    }
}

#[test]
fn incomplete_mixed_repeated_or_damaged_sets_are_refused_without_output() {
    let dir = TempDir::new("rankings-shards-bad");
    let extra = ["--top-k", "6", "--graph-k", "4"];
    let a = shards(&dir, "a", 3, "", &extra);
    let other = shards(&dir, "b", 3, "", &["--top-k", "5", "--graph-k", "3"]);
    let (r, g) = (dir.path("out.json"), dir.path("out.knn"));
    let refused = |kind: &str, out: &Path, inputs: &[&Path], want: &[&str]| {
        let (yes, text) = merge(kind, out, inputs);
        assert!(!yes, "{kind} {inputs:?} was accepted: {text}");
        for w in want {
            assert!(text.contains(w), "{kind} {inputs:?}: {text:?} lacks {w:?}");
        }
        assert!(!out.exists(), "{kind} {inputs:?} wrote {}", out.display());
        let stray: Vec<String> = dir
            .entries()
            .into_iter()
            .filter(|e| e.contains(".tmp-"))
            .collect();
        assert!(stray.is_empty(), "temporary files left: {stray:?}");
    };
    // Missing shards, named.
    refused("merge", &r, &[&a[2][0]], &["shard(s) 1/3, 2/3 missing"]);
    refused(
        "merge-graph",
        &g,
        &[&a[0][1], &a[2][1]],
        &["graph shard(s) 2/3 missing"],
    );
    // A mixed set: another run's shard.
    refused(
        "merge",
        &r,
        &[&a[0][0], &other[1][0], &a[2][0]],
        &["not a shard of the same run", "top_k"],
    );
    refused(
        "merge-graph",
        &g,
        &[&a[0][1], &other[1][1], &a[2][1]],
        &["not a shard of the same run", "k = 3"],
    );
    // A shard given twice.
    refused(
        "merge",
        &r,
        &[&a[0][0], &a[0][0], &a[1][0]],
        &["given twice"],
    );
    refused("merge-graph", &g, &[&a[0][1], &a[0][1]], &["given twice"]);
    // A rankings shard is not a graph shard and the other way round; a one-shot file is no
    // shard at all.
    refused("merge-graph", &g, &[&a[0][0]], &["not a k-NN graph shard"]);
    refused("merge", &r, &[&a[0][1]], &["not a rankings cache"]);
    let (one, one_g) = (dir.path("one.json"), dir.path("one.knn"));
    ok(&[
        "--table",
        DATA,
        "--out",
        s(&one),
        "--graph",
        s(&one_g),
        "--top-k",
        "6",
    ]);
    refused("merge", &r, &[&one], &["not a shard", "shard"]);
    refused("merge-graph", &g, &[&one_g], &["not a k-NN graph shard"]);
    // A truncated graph shard, a rankings shard with an item's own id in its list.
    let bytes = std::fs::read(&a[1][1]).unwrap();
    let cut = dir.file("cut.knn", &bytes[..bytes.len() - 8]);
    refused(
        "merge-graph",
        &g,
        &[&a[0][1], &cut, &a[2][1]],
        &["truncated"],
    );
    let text = std::fs::read_to_string(&a[1][0]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (key, list) = v["rankings"].as_object().unwrap().iter().next().unwrap();
    let first = list[0].to_string();
    let bad = text.replacen(
        &format!("\"{key}\":[{first}"),
        &format!("\"{key}\":[\"{key}\""),
        1,
    );
    assert_ne!(bad, text, "the edit must change the shard");
    // Its checksum recomputed: the rows are checked for themselves too.
    let bad = dir.file("own.json", reseal(&bad).as_bytes());
    refused(
        "merge",
        &r,
        &[&a[0][0], &bad, &a[2][0]],
        &["lists its own item"],
    );
    // The output is never an input.
    let (yes, text) = merge("merge", &a[0][0], &[&a[0][0], &a[1][0], &a[2][0]]);
    assert!(!yes && text.contains("also an input"), "{text}");
    let (yes, text) = merge("merge-graph", &a[0][1], &[&a[0][1], &a[1][1], &a[2][1]]);
    assert!(!yes && text.contains("also an input"), "{text}");
    // Bad --shard specs are refused before anything is written.
    for spec in ["0/3", "4/3", "1/0", "x", "1/3:diagonal"] {
        let out = dir.path("spec.json");
        let (yes, text) = run(&["--table", DATA, "--out", s(&out), "--shard", spec]);
        assert!(!yes && text.contains("expected i/n"), "{spec}: {text}");
        assert!(!out.exists());
    }
}

#[test]
fn more_shards_than_items_leave_empty_shards_that_still_merge() {
    let dir = TempDir::new("rankings-shards-tiny");
    // 3 items of 4 dimensions, 5 shards: shards 4 and 5 hold no items.
    let rows: [f32; 12] = [1., 0., 0., 0., 0., 1., 0., 0., 1., 1., 0., 1.];
    let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let table = dir.file("tiny.f32", &bytes);
    let common = [
        "--table",
        s(&table),
        "--dim",
        "4",
        "--top-k",
        "2",
        "--graph-k",
        "2",
    ];
    let (one_r, one_g) = (dir.path("one.json"), dir.path("one.knn"));
    let mut args = common.to_vec();
    args.extend_from_slice(&["--out", s(&one_r), "--graph", s(&one_g)]);
    ok(&args);
    let (mut rs, mut gs) = (Vec::new(), Vec::new());
    for i in 1..=5 {
        let (r, g) = (
            dir.path(&format!("{i}.json")),
            dir.path(&format!("{i}.knn")),
        );
        let spec = format!("{i}/5");
        let mut args = common.to_vec();
        args.extend_from_slice(&["--out", s(&r), "--graph", s(&g), "--shard", &spec]);
        ok(&args);
        rs.push(r);
        gs.push(g);
    }
    let (mr, mg) = (dir.path("m.json"), dir.path("m.knn"));
    let refs = |v: &[PathBuf]| v.iter().map(|p| p.to_path_buf()).collect::<Vec<_>>();
    assert_eq!(merge_rankings(&refs(&rs), &mr).expect("merge").sequences, 3);
    assert_eq!(merge_graphs(&refs(&gs), &mg).expect("merge graphs"), 5);
    assert_eq!(std::fs::read(&one_r).unwrap(), std::fs::read(&mr).unwrap());
    assert_eq!(std::fs::read(&one_g).unwrap(), std::fs::read(&mg).unwrap());
}

#[test]
fn a_graph_shard_writer_refuses_bad_shards_rows_out_of_order_and_an_unfinished_shard() {
    let dir = TempDir::new("graph-shard-writer");
    let p = dir.path("g.knn");
    let shard = |i, n| (i, n, ShardLayout::Contiguous);
    for (i, n) in [(0, 3), (4, 3), (1, 0)] {
        let e =
            KnnGraphShard::create(&p, 10, 2, KnnMetric::Cosine, shard(i, n), "run").unwrap_err();
        assert!(e.to_string().contains("1 <= i <= n"), "{e}");
    }
    let e = KnnGraphShard::create(&p, 10, 11, KnnMetric::Cosine, shard(1, 2), "run").unwrap_err();
    assert!(e.to_string().contains("1 <= k <= N"), "{e}");
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());
    // Shard 2 of 2 of 10 items holds items 5..10, in that order.
    let mut w =
        KnnGraphShard::create(&p, 10, 2, KnnMetric::L2, shard(2, 2), "run").expect("create");
    let e = w.write_batch(&[6], &[0, 1], &[1.0, 2.0]).unwrap_err();
    assert!(e.to_string().contains("not this shard's next items"), "{e}");
    let e = w.write_batch(&[5], &[0], &[1.0, 2.0]).unwrap_err();
    assert!(e.to_string().contains("k = 2"), "{e}");
    w.write_batch(&[5, 6], &[0, 1, 0, 1], &[1.0, 2.0, 1.0, 2.0])
        .expect("the shard's first rows");
    let e = w.finish().unwrap_err();
    assert!(e.to_string().contains("2 of its 5 rows"), "{e}");
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
}

/// Shards bind to their run: a shard computed from other content at the same table path, a
/// graph shard of a `--center` run, an edited shard (even with its checksum recomputed: an entry
/// equal to N, `total_poems` = 10^12 in every shard) and a graph shard from before shards
/// carried checksums are refused, naming the shard; an existing output stays byte-identical.
#[test]
fn shards_of_other_tables_runs_or_edited_are_refused() {
    let dir = TempDir::new("rankings-shards-bound");
    let table = |seed: f32| -> Vec<u8> {
        (0..40)
            .map(|i| (i as f32 * 0.37 + seed).sin())
            .flat_map(|v| v.to_le_bytes())
            .collect()
    };
    let path = dir.file("t.f32", &table(0.0));
    let shard = |i: usize, tag: &str, extra: &[&str]| -> [PathBuf; 2] {
        let (r, g) = (
            dir.path(&format!("{tag}-{i}.json")),
            dir.path(&format!("{tag}-{i}.knn")),
        );
        let spec = format!("{i}/2");
        let mut args = vec!["--table", s(&path), "--dim", "4", "--top-k", "3"];
        args.extend_from_slice(&["--graph-k", "2", "--out", s(&r), "--graph", s(&g)]);
        args.extend_from_slice(&["--shard", &spec]);
        args.extend_from_slice(extra);
        ok(&args);
        [r, g]
    };
    let a1 = shard(1, "a", &[]);
    let a2 = shard(2, "a", &[]);
    let centered = shard(2, "c", &["--center"]);
    std::fs::write(&path, table(1.0)).unwrap();
    let other = shard(2, "b", &[]);
    let (out_r, out_g) = (dir.file("out.json", b"old"), dir.file("out.knn", b"old"));
    let refused = |kind: &str, inputs: &[&Path], want: &[&str]| {
        let out = if kind == "merge" { &out_r } else { &out_g };
        let (yes, text) = merge(kind, out, inputs);
        assert!(!yes, "{kind} {inputs:?} was accepted: {text}");
        for w in want {
            assert!(text.contains(w), "{kind} {inputs:?}: {text:?} lacks {w:?}");
        }
        assert_eq!(
            std::fs::read(out).unwrap(),
            b"old",
            "{kind} {inputs:?} wrote"
        );
    };
    // Other content at the same path; a --center run.
    for (b, tag) in [(&other, "b-2"), (&centered, "c-2")] {
        let (json, knn) = (format!("{tag}.json"), format!("{tag}.knn"));
        refused("merge", &[&a1[0], &b[0]], &[json.as_str(), "another table"]);
        refused(
            "merge-graph",
            &[&a1[1], &b[1]],
            &[knn.as_str(), "another table"],
        );
    }
    // Edited: a byte of the rankings or of the graph; a version 1 graph shard.
    let text = std::fs::read_to_string(&a2[0]).unwrap();
    let f = dir.file("edited.json", text.replacen("],\"", "] ,\"", 1).as_bytes());
    refused(
        "merge",
        &[&a1[0], &f],
        &["edited.json", "checksum", "recompute"],
    );
    let mut g = std::fs::read(&a2[1]).unwrap();
    let last = g.len() - 1;
    g[last] ^= 1;
    let f = dir.file("edited.knn", &g);
    refused(
        "merge-graph",
        &[&a1[1], &f],
        &["edited.knn", "checksum", "recompute"],
    );
    let mut g = std::fs::read(&a2[1]).unwrap();
    g[4..8].copy_from_slice(&1u32.to_le_bytes());
    let f = dir.file("v1.knn", &g);
    refused(
        "merge-graph",
        &[&a1[1], &f],
        &["v1.knn", "version 1", "recompute"],
    );
    // Resealed: an entry equal to N = 10; total_poems = 10^12 in both shards.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (key, row) = v["rankings"].as_object().unwrap().iter().next().unwrap();
    let row = serde_json::to_string(row).unwrap();
    let edited = row.replacen('[', "[10,", 1);
    let edited = format!("{}]", &edited[..edited.rfind(',').unwrap()]);
    let f = dir.file(
        "n.json",
        reseal(&text.replacen(
            &format!("\"{key}\":{row}"),
            &format!("\"{key}\":{edited}"),
            1,
        ))
        .as_bytes(),
    );
    refused(
        "merge",
        &[&a1[0], &f],
        &["n.json", "entry 10", "no item of the run"],
    );
    let huge: Vec<PathBuf> = [&a1[0], &a2[0]]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let t = std::fs::read_to_string(p).unwrap();
            let t = reseal(&t.replacen("\"total_poems\":10,", "\"total_poems\":1000000000000,", 1));
            dir.file(&format!("huge-{i}.json"), t.as_bytes())
        })
        .collect();
    refused(
        "merge",
        &[&huge[0], &huge[1]],
        &["total_poems is 1000000000000", "10"],
    );
    // The run's own shards merge.
    let (yes, text) = merge("merge", &dir.path("ok.json"), &[&a1[0], &a2[0]]);
    assert!(yes, "{text}");
    let (yes, text) = merge("merge-graph", &dir.path("ok.knn"), &[&a1[1], &a2[1]]);
    assert!(yes, "{text}");
}
