//! Shards and `merge_caches`: positions, byte-identical merges, what a merge refuses, file
//! identity, and the sequence writers refusing what their readers refuse.

use super::*;

/// A run's starts for the shard tests: not in index order, so the merge must follow the list.
const SHARD_STARTS: [u32; 7] = [4, 0, 6, 2, 5, 1, 3];

/// Ids with characters the JSON writer escapes, and commas and brackets inside strings.
fn shard_ids() -> Vec<Value> {
    ["a", "b\"q", "γ", "d\\e", "e\n", "42", "g,[h]\\\"{"]
        .iter()
        .map(|s| json!(s))
        .collect()
}

/// Write the cache of `starts` (synthetic rows of `len`) with `meta` to `path`.
fn write_cache(path: &Path, meta: &Value, ids: Option<Vec<Value>>, starts: &[u32], len: usize) {
    let mut w = JsonCacheWriter::create(path, meta, ids).unwrap();
    for &s in starts {
        w.write_sequence(s, &synthetic_row(s, 7, len)).unwrap();
    }
    w.finish().unwrap();
}

/// The metadata of the SHARD_STARTS run (seven items): `metadata()` with N = 7.
fn run_meta() -> Value {
    let mut m = metadata();
    m["num_poems"] = json!(7);
    m
}

/// The metadata of shard `i`/`n` of the SHARD_STARTS run: `run_meta()` plus the shard keys.
fn shard_meta(i: usize, n: usize, layout: ShardLayout, total: usize) -> Value {
    let mut m = run_meta();
    let o = m.as_object_mut().unwrap();
    o.insert("shard".into(), json!(format!("{i}/{n}")));
    o.insert("shard_layout".into(), json!(layout.name()));
    o.insert("shard_starts_total".into(), json!(total));
    o.insert("shard_starts_fingerprint".into(), json!("fnv1a32:0badf00d"));
    o.insert(
        "shard_table_checksum".into(),
        json!("fnv1a64:0123456789abcdef"),
    );
    m
}

/// Write the n shards of `starts` into `dir` (shard-<i>.json) and return their paths.
fn write_shards(
    dir: &TempDir,
    starts: &[u32],
    n: usize,
    layout: ShardLayout,
    ids: Option<Vec<Value>>,
    len: usize,
) -> Vec<PathBuf> {
    (1..=n)
        .map(|i| {
            let part: Vec<u32> = layout
                .positions(i, n, starts.len())
                .into_iter()
                .map(|p| starts[p])
                .collect();
            let path = dir.path(&format!("shard-{i}.json"));
            let meta = shard_meta(i, n, layout, starts.len());
            write_cache(&path, &meta, ids.clone(), &part, len);
            path
        })
        .collect()
}

#[test]
fn shard_positions() {
    assert_eq!(shard_len(1, 3, 7), 3);
    assert_eq!(shard_len(2, 3, 7), 2);
    assert_eq!(shard_len(3, 3, 7), 2);
    assert_eq!(shard_len(3, 3, 2), 0);
    let c = ShardLayout::Contiguous;
    assert_eq!(c.positions(1, 3, 7), vec![0, 1, 2]);
    assert_eq!(c.positions(2, 3, 7), vec![3, 4]);
    assert_eq!(c.positions(3, 3, 7), vec![5, 6]);
    assert_eq!(c.positions(3, 3, 2), Vec::<usize>::new());
    let s = ShardLayout::Strided;
    assert_eq!(s.positions(1, 3, 7), vec![0, 3, 6]);
    assert_eq!(s.positions(2, 3, 7), vec![1, 4]);
    assert_eq!(s.positions(3, 3, 7), vec![2, 5]);
    assert_eq!(s.positions(1, 1, 4), vec![0, 1, 2, 3]);
    assert_eq!(ShardLayout::from_name("strided"), Some(s));
    assert_eq!(ShardLayout::from_name("Strided"), None);
}

#[test]
fn merge_is_byte_identical_to_the_one_shot_cache() {
    for layout in [ShardLayout::Contiguous, ShardLayout::Strided] {
        for ids in [Some(shard_ids()), None] {
            for n in [1, 2, 3, 7, 9] {
                let dir = TempDir::new("merge");
                let one = dir.path("one.json");
                write_cache(&one, &run_meta(), ids.clone(), &SHARD_STARTS, 5);
                let mut parts = write_shards(&dir, &SHARD_STARTS, n, layout, ids.clone(), 5);
                parts.reverse(); // any order
                let out = dir.path("merged.json");
                let r = merge_caches(&parts, &out).unwrap();
                assert_eq!(
                    r,
                    MergeReport {
                        shards: n,
                        layout,
                        sequences: 7
                    }
                );
                assert_eq!(
                    std::fs::read(&one).unwrap(),
                    std::fs::read(&out).unwrap(),
                    "{layout:?}, {n} shards, ids {}",
                    ids.is_some()
                );
                assert!(
                    dir.entries().iter().all(|e| !e.starts_with('.')),
                    "temp file left"
                );
            }
        }
    }
}

#[test]
fn merge_keeps_the_latest_generated_at() {
    let dir = TempDir::new("merge-time");
    let layout = ShardLayout::Strided;
    let parts = write_shards(&dir, &SHARD_STARTS, 2, layout, None, 3);
    // Shard 1 ran later.
    let mut m = shard_meta(1, 2, layout, 7);
    m["generated_at"] = json!("2026-02-01T00:00:00Z");
    let part: Vec<u32> = layout
        .positions(1, 2, 7)
        .into_iter()
        .map(|p| SHARD_STARTS[p])
        .collect();
    write_cache(&parts[0], &m, None, &part, 3);
    let out = dir.path("m.json");
    merge_caches(&parts, &out).unwrap();
    let v = read_json(&out);
    assert_eq!(v["metadata"]["generated_at"], json!("2026-02-01T00:00:00Z"));
    assert!(v["metadata"].get("shard").is_none());
    assert!(v["metadata"].get("shard_starts_fingerprint").is_none());
    assert_eq!(v["metadata"]["nested"], metadata()["nested"]);
}

/// Merge `parts` into `dir/out.json`, which must fail with `is` and `words`, leaving an existing
/// `out.json` (content "old") untouched and no temporary file.
#[track_caller]
fn merge_refused(dir: &TempDir, parts: &[PathBuf], is: fn(&Error) -> bool, words: &[&str]) {
    let out = dir.file("out.json", b"old");
    expect_err(merge_caches(parts, &out), is, words);
    assert_eq!(std::fs::read(&out).unwrap(), b"old", "out.json was touched");
    assert!(
        dir.entries().iter().all(|e| !e.starts_with('.')),
        "a temporary file was left: {:?}",
        dir.entries()
    );
}

#[test]
fn merge_refuses_incomplete_or_foreign_parts() {
    let layout = ShardLayout::Contiguous;
    let dir = TempDir::new("merge-bad");
    let p = write_shards(&dir, &SHARD_STARTS, 3, layout, Some(shard_ids()), 4);
    let name = |i: usize| p[i].file_name().unwrap().to_string_lossy().into_owned();

    // Nothing, a missing shard, a duplicated one (another copy of the same shard).
    merge_refused(&dir, &[], is_invalid, &["no shards"]);
    merge_refused(
        &dir,
        &[p[0].clone(), p[2].clone()],
        is_invalid,
        &["2/3", "missing"],
    );
    let copy = dir.file("copy.json", &std::fs::read(&p[1]).unwrap());
    merge_refused(
        &dir,
        &[p[0].clone(), p[1].clone(), copy.clone(), p[2].clone()],
        is_format,
        &["copy.json", "2/3", "twice", &name(1)],
    );
    std::fs::remove_file(&copy).unwrap();

    // A shard of another run: another top_k; another split; not a shard at all.
    let other = dir.path("other.json");
    let mut m = shard_meta(2, 3, layout, 7);
    m["top_k"] = json!(9);
    write_cache(&other, &m, Some(shard_ids()), &[2, 5], 4);
    merge_refused(
        &dir,
        &[p[0].clone(), other.clone(), p[2].clone()],
        is_format,
        &["other.json", "not a shard of the same run", "top_k", "9"],
    );
    write_cache(
        &other,
        &shard_meta(2, 2, layout, 7),
        Some(shard_ids()),
        &[2, 5],
        4,
    );
    merge_refused(
        &dir,
        &[p[0].clone(), other.clone(), p[2].clone()],
        is_format,
        &["other.json", "2/2"],
    );
    let mut m = shard_meta(2, 3, ShardLayout::Strided, 7);
    m["shard_layout"] = json!("strided");
    write_cache(&other, &m, Some(shard_ids()), &[2, 5], 4);
    merge_refused(
        &dir,
        &[p[0].clone(), other.clone(), p[2].clone()],
        is_format,
        &["other.json", "shard_layout"],
    );
    write_cache(&other, &metadata(), Some(shard_ids()), &[2, 5], 4);
    merge_refused(
        &dir,
        &[p[0].clone(), other.clone(), p[2].clone()],
        is_format,
        &["other.json", "not a shard", "\"shard\""],
    );

    // The right metadata, the wrong rows: too few, a start of another shard, another length.
    let meta2 = shard_meta(2, 3, layout, 7);
    write_cache(&other, &meta2, Some(shard_ids()), &[2], 4);
    merge_refused(
        &dir,
        &[p[0].clone(), other.clone(), p[2].clone()],
        is_format,
        &["other.json", "holds 1 sequences", "holds 2"],
    );
    write_cache(&other, &meta2, Some(shard_ids()), &[2, 1], 4);
    merge_refused(
        &dir,
        &[p[0].clone(), other.clone(), p[2].clone()],
        is_format,
        &["\"b\\\"q\"", "also in"],
    );
    write_cache(&other, &meta2, Some(shard_ids()), &[2, 5], 3);
    merge_refused(
        &dir,
        &[p[0].clone(), other.clone(), p[2].clone()],
        is_format,
        &["other.json", "3 entries", "has 4"],
    );

    // Not JSON; a missing input; a missing output directory.
    let junk = dir.file("junk.json", b"{\"metadata\":{},\"sequences\":{\"0\":[1,");
    merge_refused(
        &dir,
        &[p[0].clone(), junk.clone(), p[2].clone()],
        is_format,
        &["junk.json", "not a diversity cache"],
    );
    std::fs::remove_file(&junk).unwrap();
    merge_refused(
        &dir,
        &[p[0].clone(), dir.path("nope.json"), p[2].clone()],
        is_io,
        &["nope.json"],
    );
    expect_err(
        merge_caches(&p, &dir.path("missing/out.json")),
        is_io,
        &["does not exist"],
    );
    // Rows are copied through as text, so each is checked: an entry that is no index or id, a
    // row that does not start with its start, an entry twice, a row of another kind.
    let good = std::fs::read_to_string(&p[1]).unwrap();
    let seq = |k: usize| {
        let v: Value = serde_json::from_str(&good).unwrap();
        let (key, row) = v["sequences"]
            .as_object()
            .unwrap()
            .iter()
            .nth(k)
            .map(|(a, b)| (a.clone(), b.clone()))
            .unwrap();
        (key, row)
    };
    let (key, row) = seq(0);
    let row_text = serde_json::to_string(&row).unwrap();
    let arr = row.as_array().unwrap();
    let edits: Vec<(String, Vec<&str>)> = vec![
        (
            row_text.replacen(&arr[1].to_string(), "{\"x\":1}", 1),
            vec!["neither a row index nor an id"],
        ),
        (
            serde_json::to_string(&json!([arr[1], arr[0], arr[2], arr[3]])).unwrap(),
            vec!["does not start with its start"],
        ),
        (
            serde_json::to_string(&json!([arr[0], arr[1], arr[1], arr[3]])).unwrap(),
            vec!["twice"],
        ),
        ("[0,1,2,3]".to_string(), vec!["row indices", "ids"]),
    ];
    for (edited, words) in edits {
        let text = reseal(&good.replacen(&row_text, &edited, 1));
        assert_ne!(text, good, "the edit did not apply");
        let f = dir.file("edited.json", text.as_bytes());
        let mut w = words.clone();
        let shown = format!("{key:?}");
        if !edited.starts_with("[0") {
            w.push(&shown);
        }
        merge_refused(
            &dir,
            &[p[0].clone(), f.clone(), p[2].clone()],
            is_format,
            &w,
        );
        std::fs::remove_file(&f).unwrap();
    }

    // Sizes in the metadata that the files do not hold: refused, nothing allocated from them
    // (these aborted the merge allocating petabytes, or panicked with "capacity overflow").
    for (shard, total, words) in [
        (
            "1/100000000000000",
            json!(7),
            vec!["missing", "of 100000000000000"],
        ),
        (
            "1/18446744073709551615",
            json!(7),
            vec!["missing", "of 18446744073709551615"],
        ),
        (
            "1/3",
            json!(100000000000000u64),
            vec!["holds 3 sequences", "100000000000000"],
        ),
        (
            "1/3",
            json!(u64::MAX),
            vec!["holds 3 sequences", "18446744073709551615"],
        ),
    ] {
        // Every part says the same (so that no same-run check catches it first).
        let parts: Vec<PathBuf> = (1..=3)
            .map(|i| {
                let path = dir.path(&format!("huge-{i}.json"));
                let mut m = shard_meta(i, 3, layout, 7);
                m["shard_starts_total"] = total.clone();
                if i == 1 {
                    m["shard"] = json!(shard);
                }
                let rows: Vec<u32> = layout
                    .positions(i, 3, 7)
                    .into_iter()
                    .map(|q| SHARD_STARTS[q])
                    .collect();
                write_cache(&path, &m, Some(shard_ids()), &rows, 4);
                path
            })
            .collect();
        let given = if shard == "1/3" {
            parts.clone()
        } else {
            vec![parts[0].clone()]
        };
        merge_refused(&dir, &given, |_| true, &words);
        for f in parts {
            std::fs::remove_file(f).unwrap();
        }
    }
    // And the real parts still merge.
    merge_caches(&p, &dir.path("ok.json")).unwrap();
}

/// A shard must show that it is what its run wrote: its own checksum (an edited, truncated or
/// older shard without one is refused, naming it and saying to recompute it), the checksum of
/// the run's table (a shard of another table is refused), and — even with a recomputed
/// checksum — rows whose entries are items of the run, an N that holds the run's starts and
/// rows as long as the run's top_k says. Nothing is written.
#[test]
fn merge_refuses_shards_it_cannot_verify_or_of_another_table() {
    let layout = ShardLayout::Strided;
    let dir = TempDir::new("merge-verify");
    let p = write_shards(&dir, &SHARD_STARTS, 2, layout, Some(shard_ids()), 4);
    let good = std::fs::read_to_string(&p[1]).unwrap();
    let with = |name: &str, text: &str| vec![p[0].clone(), dir.file(name, text.as_bytes())];
    let part: Vec<u32> = layout
        .positions(2, 2, 7)
        .into_iter()
        .map(|q| SHARD_STARTS[q])
        .collect();

    // Edited after it was written: a row's entry, the metadata; truncated.
    // A row still valid for every other check: two of its entries swapped.
    let v: Value = serde_json::from_str(&good).unwrap();
    let row = v["sequences"].as_object().unwrap().values().next().unwrap();
    let mut swapped = row.as_array().unwrap().clone();
    swapped.swap(1, 2);
    let edited = good.replacen(
        &serde_json::to_string(row).unwrap(),
        &serde_json::to_string(&swapped).unwrap(),
        1,
    );
    assert_ne!(edited, good);
    for (name, text) in [
        ("edited.json", edited.as_str()),
        ("model.json", &good.replacen("test-model", "test-modem", 1)),
        ("short.json", &good.replacen("]}}", "]}} ", 1)),
    ] {
        merge_refused(
            &dir,
            &with(name, text),
            is_format,
            &[name, "shard 2/2", "do not match its checksum", "recompute"],
        );
    }
    // Without a checksum (a shard from before shards carried one) or a table checksum.
    let at = good.find(",\"checksum\":").unwrap();
    let old = format!("{}{}", &good[..at], &good[at + 38..]);
    assert!(serde_json::from_str::<Value>(&old).is_ok(), "{old}");
    merge_refused(
        &dir,
        &with("old.json", &old),
        is_format,
        &["old.json", "has no \"checksum\"", "recompute shard 2/2"],
    );
    let mut m = shard_meta(2, 2, layout, 7);
    m.as_object_mut().unwrap().remove("shard_table_checksum");
    let f = dir.path("untabled.json");
    write_cache(&f, &m, Some(shard_ids()), &part, 4);
    merge_refused(
        &dir,
        &[p[0].clone(), f],
        is_format,
        &["untabled.json", "no \"shard_table_checksum\"", "recompute"],
    );
    // Computed from another table.
    let mut m = shard_meta(2, 2, layout, 7);
    m["shard_table_checksum"] = json!("fnv1a64:fedcba9876543210");
    let f = dir.path("foreign.json");
    write_cache(&f, &m, Some(shard_ids()), &part, 4);
    merge_refused(
        &dir,
        &[p[0].clone(), f],
        is_format,
        &[
            "foreign.json",
            "computed from another table",
            "fedcba9876543210",
        ],
    );

    // Resealed edits: an id that is no item of the run, a start that is not one (its row and
    // every other row still name the start it replaced).
    let first_id = serde_json::to_string(&shard_ids()[part[0] as usize]).unwrap();
    for (name, from, to, words) in [
        (
            "stray-id.json",
            format!(",{first_id}"),
            ",\"zz\"",
            vec!["\"zz\"", "no item of the run"],
        ),
        (
            "stray-key.json",
            format!("{first_id}:[{first_id}"),
            "\"zz\":[\"zz\"",
            vec![&*first_id, "no item of the run"],
        ),
    ] {
        let text = good.replacen(&from, to, 1);
        assert_ne!(text, good, "{name}: the edit did not apply");
        // A changed key is found where another row names the key it replaced: in either file.
        let mut w = if name == "stray-id.json" {
            vec![name]
        } else {
            vec![]
        };
        w.extend(words.iter().copied());
        merge_refused(&dir, &with(name, &reseal(&text)), is_format, &w);
    }
    // Row indices: an entry equal to N, an unknown start.
    let q = write_shards(&dir, &SHARD_STARTS, 2, layout, None, 4);
    let plain = std::fs::read_to_string(&q[1]).unwrap();
    let start = part[0];
    for (name, from, to, words) in [
        (
            "n.json",
            format!("\"{start}\":[{start},"),
            format!("\"{start}\":[{start},7,"),
            "entry 7",
        ),
        (
            "key.json",
            format!("\"{start}\":[{start}"),
            "\"9\":[9".to_string(),
            "entry",
        ),
    ] {
        // The changed key is found where another row names the start it replaced.
        let words = match name {
            "key.json" => format!("entry {start}"),
            _ => words.to_string(),
        };
        let text = plain.replacen(&from, &to, 1);
        let text = if name == "n.json" {
            // Keep the row's length: drop its last entry.
            let at = text.find(&to).unwrap() + to.len();
            let end = at + text[at..].find(']').unwrap();
            let last = text[..end].rfind(',').unwrap();
            format!("{}{}", &text[..last], &text[end..])
        } else {
            text
        };
        assert_ne!(text, plain, "{name}: the edit did not apply");
        merge_refused(
            &dir,
            &[q[0].clone(), dir.file(name, reseal(&text).as_bytes())],
            is_format,
            &[&words, "no item of the run"],
        );
    }
    // Every shard agreeing on a wrong N, or on a top_k its rows do not have.
    for (key, value, words) in [
        ("num_poems", json!(5), vec!["num_poems is 5", "7 starts"]),
        ("num_poems", json!(1_000_000_000_000u64), vec![]),
        ("top_k", json!(9), vec!["top_k", "4 entries"]),
    ] {
        let parts: Vec<PathBuf> = (1..=2)
            .map(|i| {
                let f = dir.path(&format!("agree-{i}.json"));
                let mut m = shard_meta(i, 2, layout, 7);
                m[key] = value.clone();
                let rows: Vec<u32> = layout
                    .positions(i, 2, 7)
                    .into_iter()
                    .map(|q| SHARD_STARTS[q])
                    .collect();
                write_cache(&f, &m, None, &rows, 4);
                f
            })
            .collect();
        if words.is_empty() {
            // N larger than the run's starts is a run over some of the items: it merges.
            merge_caches(&parts, &dir.path("agree.json")).unwrap();
            std::fs::remove_file(dir.path("agree.json")).unwrap();
        } else {
            merge_refused(&dir, &parts, is_format, &words);
        }
    }
    // The untouched shards still merge.
    merge_caches(&p, &dir.path("ok.json")).unwrap();
}

/// `same_file`: one file under any name (relative, `..`, symlink, hard link) is itself; a file
/// not yet written is the same as another name for where it would be written.
#[test]
fn same_file_resolves_identity() {
    use diversity::files::same_file;
    let dir = TempDir::new("same-file");
    let a = dir.file("a.json", b"{}");
    let b = dir.file("b.json", b"{}");
    std::fs::create_dir(dir.path("sub")).unwrap();
    let dotted = dir.path("sub/../a.json");
    let link = dir.path("link.json");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let hard = dir.path("hard.json");
    std::fs::hard_link(&a, &hard).unwrap();
    assert!(same_file(&a, &a));
    assert!(same_file(&a, &dotted));
    assert!(same_file(&a, &link));
    assert!(same_file(&a, &hard));
    assert!(!same_file(&a, &b));
    assert!(same_file(
        &dir.path("new.json"),
        &dir.path("sub/../new.json")
    ));
    assert!(!same_file(&dir.path("new.json"), &a));
}

/// `merge_caches` refuses an output that is one of its inputs, before creating anything: the
/// input is byte-identical afterwards and no temporary file is left.
#[test]
fn merge_refuses_an_output_that_is_an_input() {
    let dir = TempDir::new("merge-self");
    let a = dir.file("s1.json", b"{\"metadata\":{},\"sequences\":{}}");
    let b = dir.file("s2.json", b"{\"metadata\":{},\"sequences\":{}}");
    std::fs::create_dir(dir.path("sub")).unwrap();
    let before = dir.entries();
    let e = merge_caches(&[a.clone(), b.clone()], &dir.path("sub/../s2.json"))
        .expect_err("merging into an input");
    assert!(is_invalid(&e), "{e}");
    let m = e.to_string();
    assert!(m.contains("also an input") && m.contains("s2.json"), "{m}");
    assert_eq!(
        std::fs::read(&b).unwrap(),
        b"{\"metadata\":{},\"sequences\":{}}"
    );
    assert_eq!(dir.entries(), before);
}

/// The sequence writers refuse what their readers refuse (the binary cache's reader, the merge
/// of JSON caches): a row that does not start with its start, holds an entry twice, or (JSON)
/// differs in length from the rows before it. A refused row writes nothing — its start can be
/// written afterwards — and a writer dropped after a refusal leaves no file.
#[test]
fn sequence_writers_refuse_rows_their_readers_refuse() {
    let dir = TempDir::new("writer-rows");
    let out = dir.path("c.bin");
    let mut w = BinaryCacheWriter::create(&out, 3, 3).unwrap();
    expect_err(
        w.write_row(0, &[0, 1, 1]),
        is_invalid,
        &["start 0", "entry 1 twice", "position 2"],
    );
    expect_err(
        w.write_row(0, &[1, 0, 2]),
        is_invalid,
        &["start 0", "starts with 1", "not with its start 0"],
    );
    expect_err(
        w.write_row(1, &[1, 0, 1]),
        is_invalid,
        &["start 1", "entry 1 twice"],
    );
    w.write_row(0, &[0, 1, 2]).unwrap();
    w.write_row(1, &[1, 2, 0]).unwrap();
    w.write_row(2, &[2, 0, 1]).unwrap();
    w.finish().unwrap();
    assert_eq!(
        BinaryCache::read_all(&out).unwrap(),
        (3, vec![0, 1, 2, 1, 2, 0, 2, 0, 1])
    );
    let mut w = BinaryCacheWriter::create(&dir.path("d.bin"), 2, 2).unwrap();
    assert!(w.write_row(0, &[0, 0]).is_err());
    drop(w);

    // JSON, without ids (no N: entries of any size) and with them.
    let j = dir.path("c.json");
    let mut w = JsonCacheWriter::create(&j, &json!({}), None).unwrap();
    expect_err(
        w.write_sequence(0, &[0, 1, 1]),
        is_invalid,
        &["start 0", "entry 1 twice", "position 2"],
    );
    expect_err(
        w.write_sequence(0, &[1, 0, 2]),
        is_invalid,
        &["start 0", "starts with 1"],
    );
    expect_err(
        w.write_sequence(0, &[0, 4_000_000_000, 4_000_000_000]),
        is_invalid,
        &["start 0", "entry 4000000000 twice"],
    );
    expect_err(
        w.write_batch(&[0], &[], 0),
        is_invalid,
        &["start 0", "empty"],
    );
    w.write_sequence(0, &[0, 1, 2]).unwrap();
    expect_err(
        w.write_sequence(1, &[1, 0]),
        is_invalid,
        &["start 1", "2 entries", "before it have 3"],
    );
    expect_err(
        w.write_batch(&[1, 2], &[1, 0, 2, 2, 2, 0], 3),
        is_invalid,
        &["start 2", "entry 2 twice"],
    );
    w.write_batch(&[1, 2], &[1, 0, 2, 2, 0, 1], 3).unwrap();
    w.finish().unwrap();
    let v: Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    assert_eq!(
        v["sequences"],
        json!({"0": [0, 1, 2], "1": [1, 0, 2], "2": [2, 0, 1]})
    );
    let ids = vec![json!("a"), json!("b"), json!("c")];
    let mut w = JsonCacheWriter::create(&dir.path("d.json"), &json!({}), Some(ids)).unwrap();
    expect_err(
        w.write_sequence(2, &[2, 0, 0]),
        is_invalid,
        &["start 2", "entry 0 twice"],
    );
    drop(w);
    let mut left = dir.entries();
    left.sort();
    assert_eq!(left, ["c.bin", "c.json"]);
}
