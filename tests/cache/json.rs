//! The streaming JSON sequence cache: round trips, the parallel formatter, bad calls, and the
//! output-file rules every writer shares (no unfinished, stale or misplaced file is left).

use super::*;

#[test]
fn json_round_trip_string_ids() {
    let dir = TempDir::new("json-str");
    let out = dir.path("diversity_cache.json");
    let ids: Vec<Value> = ["alpha", "b\"e,t:a", "γάμμα", "de\\lta\n", "42"]
        .iter()
        .map(|s| json!(s))
        .collect();
    let mut w = JsonCacheWriter::create(&out, &metadata(), Some(ids.clone())).unwrap();
    let rows = five();
    // One single, then a batch out of order, then another single.
    w.write_sequence(rows[2].0, &rows[2].1).unwrap();
    let flat: Vec<u32> = [rows[4].1.as_slice(), &rows[0].1, &rows[1].1].concat();
    w.write_batch(&[4, 0, 1], &flat, 5).unwrap();
    w.write_sequence(rows[3].0, &rows[3].1).unwrap();
    assert_eq!(w.sequences_written(), 5);
    assert!(!out.exists(), "the cache must not appear before finish");
    w.finish().unwrap();
    assert_eq!(dir.entries(), vec!["diversity_cache.json"]);

    let v = read_json(&out);
    assert_eq!(v["metadata"], metadata());
    let seqs = v["sequences"].as_object().unwrap();
    assert_eq!(seqs.len(), 5);
    for (s, seq) in &rows {
        let key = ids[*s as usize].as_str().unwrap();
        let want: Vec<Value> = seq.iter().map(|&i| ids[i as usize].clone()).collect();
        assert_eq!(seqs[key], Value::Array(want), "sequence of {key:?}");
    }
}

#[test]
fn json_round_trip_numeric_ids() {
    let dir = TempDir::new("json-num");
    let out = dir.path("c.json");
    let ids: Vec<Value> = vec![json!(100), json!(7), json!(0), json!(123456789), json!(-5)];
    let mut w = JsonCacheWriter::create(&out, &metadata(), Some(ids.clone())).unwrap();
    let rows = five();
    let starts: Vec<u32> = rows.iter().map(|r| r.0).collect();
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.1.clone()).collect();
    w.write_batch(&starts, &flat, 5).unwrap();
    w.finish().unwrap();
    let v = read_json(&out);
    let seqs = v["sequences"].as_object().unwrap();
    for (s, seq) in &rows {
        // Keys are the ids' decimal text; values stay numbers.
        let key = ids[*s as usize].to_string();
        let want: Vec<Value> = seq.iter().map(|&i| ids[i as usize].clone()).collect();
        assert_eq!(seqs[&key], Value::Array(want));
        assert!(seqs[&key][0].is_number());
    }
    assert!(seqs.contains_key("-5") && seqs.contains_key("123456789"));
}

#[test]
fn json_round_trip_without_ids() {
    let dir = TempDir::new("json-plain");
    let out = dir.path("c.json");
    let mut w = JsonCacheWriter::create(&out, &json!({}), None).unwrap();
    // Values exercise every digit count of the formatter (rows are sequences of their start,
    // of one length, as the writer requires).
    let big = vec![0, 9, 10, 99, 100, 12345, 999_999, 1_000_000, 4_294_967_295];
    let mut top = big.clone();
    top.rotate_right(1);
    w.write_sequence(4_294_967_295, &top).unwrap();
    w.write_sequence(0, &big).unwrap();
    w.write_sequence(17, &[17, 3, 1, 2, 4, 5, 6, 7, 8]).unwrap();
    w.finish().unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.starts_with("{\"metadata\":{},\"sequences\":{\"4294967295\":[4294967295,0,9,10,99,"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["metadata"], json!({}));
    let seqs = v["sequences"].as_object().unwrap();
    assert_eq!(seqs.len(), 3);
    assert_eq!(seqs["4294967295"], json!(top));
    assert_eq!(seqs["0"], json!(big));
    assert_eq!(seqs["17"], json!([17, 3, 1, 2, 4, 5, 6, 7, 8]));
}

#[test]
fn json_empty_cache_is_valid() {
    let dir = TempDir::new("json-empty");
    let out = dir.path("c.json");
    let w = JsonCacheWriter::create(&out, &metadata(), None).unwrap();
    assert_eq!(w.sequences_written(), 0);
    w.finish().unwrap();
    let v = read_json(&out);
    assert_eq!(v["sequences"], json!({}));
}

/// N = 14,943 starts (the size a full test cannot afford as N²), short rows, string ids, written
/// in batches the size the user's driver uses: every sequence comes back.
#[test]
fn json_many_starts_short_rows() {
    const N: u32 = 14_943;
    const LEN: usize = 20;
    let dir = TempDir::new("json-many");
    let out = dir.path("diversity_cache.json");
    let ids: Vec<Value> = (0..N).map(|i| json!(format!("poem-{i}"))).collect();
    let meta = json!({"num_poems": N, "top_k": LEN});
    let mut w = JsonCacheWriter::create(&out, &meta, Some(ids)).unwrap();
    let starts: Vec<u32> = (0..N).collect();
    for batch in starts.chunks(3584) {
        let flat: Vec<u32> = batch
            .iter()
            .flat_map(|&s| synthetic_row(s, N, LEN))
            .collect();
        w.write_batch(batch, &flat, LEN).unwrap();
    }
    assert_eq!(w.sequences_written(), N as usize);
    w.finish().unwrap();
    let v = read_json(&out);
    assert_eq!(v["metadata"], meta);
    let seqs = v["sequences"].as_object().unwrap();
    assert_eq!(seqs.len(), N as usize);
    for s in (0..N).step_by(97).chain([N - 1]) {
        let want: Vec<Value> = synthetic_row(s, N, LEN)
            .iter()
            .map(|i| json!(format!("poem-{i}")))
            .collect();
        assert_eq!(seqs[&format!("poem-{s}")], Value::Array(want));
    }
}

/// The parallel formatter (big batches, several rounds of bounded pieces) writes the same bytes
/// as one row at a time.
#[test]
fn json_parallel_formatting_is_byte_identical() {
    let dir = TempDir::new("json-par");
    for (with_ids, n, rows, len) in [
        (false, 5000u32, 2000usize, 5000usize),
        (true, 3000, 2500, 2000),
    ] {
        let ids: Option<Vec<Value>> = with_ids.then(|| {
            (0..n)
                .map(|i| {
                    if i.is_multiple_of(3) {
                        json!(i * 10)
                    } else {
                        json!(format!("id \"{i}\""))
                    }
                })
                .collect()
        });
        let starts: Vec<u32> = (0..rows as u32).rev().collect();
        let flat: Vec<u32> = starts
            .iter()
            .flat_map(|&s| synthetic_row(s, n, len))
            .collect();

        let one = dir.path(&format!("one-{with_ids}.json"));
        let mut w = JsonCacheWriter::create(&one, &metadata(), ids.clone()).unwrap();
        for (i, &s) in starts.iter().enumerate() {
            w.write_batch(&[s], &flat[i * len..(i + 1) * len], len)
                .unwrap();
        }
        w.finish().unwrap();

        let a = std::fs::read(&one).unwrap();
        // One big batch: on the calling thread, on 2 and 3 threads (several rounds of bounded
        // pieces at this size) and on every core.
        for threads in [Some(1), Some(2), Some(3), None] {
            let big = dir.path(&format!("big-{with_ids}-{threads:?}.json"));
            let mut w = JsonCacheWriter::create(&big, &metadata(), ids.clone()).unwrap();
            if let Some(t) = threads {
                w.set_threads(t);
            }
            w.write_batch(&starts, &flat, len).unwrap();
            w.finish().unwrap();
            let b = std::fs::read(&big).unwrap();
            assert_eq!(
                a.len(),
                b.len(),
                "with_ids {with_ids}, {threads:?}: sizes differ"
            );
            assert!(a == b, "with_ids {with_ids}, {threads:?}: bytes differ");
        }
        let v: Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(v["sequences"].as_object().unwrap().len(), rows);
    }
}

#[test]
fn json_bad_calls_are_refused_and_the_writer_goes_on() {
    let dir = TempDir::new("json-bad");
    let out = dir.path("c.json");
    let ids: Vec<Value> = (0..4).map(|i| json!(format!("r{i}"))).collect();

    expect_err(
        JsonCacheWriter::create(&out, &json!([1, 2]), None),
        is_invalid,
        &["metadata", "object", "an array"],
    );
    expect_err(
        JsonCacheWriter::create(&out, &json!({}), Some(vec![json!("a"), json!("a")])),
        is_invalid,
        &["rows 0 and 1", "same id", "unique"],
    );
    expect_err(
        JsonCacheWriter::create(&out, &json!({}), Some(vec![json!("a"), json!(true)])),
        is_invalid,
        &["row 1", "not a string or a number"],
    );
    // A string id "7" and a number id 7 would be the same key.
    expect_err(
        JsonCacheWriter::create(&out, &json!({}), Some(vec![json!("7"), json!(7)])),
        is_invalid,
        &["same id"],
    );
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());

    let mut w = JsonCacheWriter::create(&out, &json!({"k": 1}), Some(ids)).unwrap();
    expect_err(
        w.write_sequence(1, &[1, 4, 0]),
        is_invalid,
        &[
            out.display().to_string().as_str(),
            "start 1",
            "index 4",
            "position 1",
            "only 4 ids",
        ],
    );
    expect_err(
        w.write_sequence(4, &[0]),
        is_invalid,
        &["start 4", "out of range", "4 ids"],
    );
    expect_err(
        w.write_batch(&[0, 1], &[0, 1, 2], 2),
        is_invalid,
        &["3 values", "2 sequences", "length 2"],
    );
    w.write_sequence(1, &[1, 2]).unwrap();
    expect_err(
        w.write_sequence(1, &[1, 3]),
        is_invalid,
        &["start 1", "repeated"],
    );
    expect_err(
        w.write_batch(&[2, 2], &[2, 0, 2, 1], 2),
        is_invalid,
        &["start 2", "repeated"],
    );
    // The refused batch did not claim start 2.
    w.write_sequence(2, &[2, 3]).unwrap();
    assert_eq!(w.sequences_written(), 2);
    w.finish().unwrap();
    let v = read_json(&out);
    assert_eq!(
        v["sequences"],
        json!({"r1": ["r1", "r2"], "r2": ["r2", "r3"]})
    );
}

#[test]
fn unfinished_writers_leave_nothing_behind() {
    let dir = TempDir::new("unfinished");
    let json_out = dir.path("c.json");
    let bin_out = dir.path("c.bin");
    {
        let mut w = JsonCacheWriter::create(&json_out, &metadata(), None).unwrap();
        w.write_sequence(0, &[0, 1, 2]).unwrap();
        let mut b = BinaryCacheWriter::create(&bin_out, 3, 3).unwrap();
        b.write_row(0, &[0, 1, 2]).unwrap();
        assert_eq!(dir.entries().len(), 2, "two temporary files while writing");
        assert!(dir.entries().iter().all(|e| e.starts_with('.')));
        // Dropped without finish: an error or a panic in the caller.
    }
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());

    // An existing cache is not touched by an unfinished rewrite.
    std::fs::write(&json_out, b"old").unwrap();
    {
        let mut w = JsonCacheWriter::create(&json_out, &metadata(), None).unwrap();
        w.write_sequence(0, &[0]).unwrap();
    }
    assert_eq!(std::fs::read(&json_out).unwrap(), b"old");
    assert_eq!(dir.entries(), vec!["c.json"]);
    // ... and is replaced whole by a finished one.
    let w = JsonCacheWriter::create(&json_out, &metadata(), None).unwrap();
    w.finish().unwrap();
    assert_eq!(read_json(&json_out)["sequences"], json!({}));
    assert_eq!(dir.entries(), vec!["c.json"]);
}

/// A writer killed outright leaves its temporary file; the next writer of the same destination
/// removes those of dead processes of this host, and only those.
#[test]
fn stale_temp_files_of_dead_processes_are_removed() {
    let dir = TempDir::new("stale");
    let out = dir.path("c.json");
    let (p, _f) = PendingFile::create(&out).unwrap();
    let mine = p
        .temp_path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    drop(p);
    // The same name with another pid: one that cannot exist (past pid_max), one alive (1).
    let me = format!("-{}-", std::process::id());
    let dead = mine.replace(&me, "-4294967295-");
    let alive = mine.replace(&me, "-1-");
    let other_host = ".c.json.tmp-otherhost-4294967295-0".to_string();
    let unrelated = ".d.json.tmp-x-4294967295-0".to_string();
    for f in [&dead, &alive, &other_host, &unrelated] {
        std::fs::write(dir.path(f), b"partial").unwrap();
    }
    let before = diversity::cache::stale_removed();
    let w = JsonCacheWriter::create(&out, &metadata(), None).unwrap();
    w.finish().unwrap();
    assert_eq!(diversity::cache::stale_removed(), before + 1);
    let mut want = vec!["c.json".to_string(), alive, other_host, unrelated];
    want.sort();
    assert_eq!(dir.entries(), want);
}

#[test]
fn pending_file_commits_or_cleans_up() {
    let dir = TempDir::new("pending");
    let out = dir.path("out.txt");
    let (p, mut f) = PendingFile::create(&out).unwrap();
    assert_eq!(p.path(), out);
    let tmp = p.temp_path().to_path_buf();
    let tmp_name = tmp.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        tmp_name.starts_with(".out.txt.tmp-")
            && tmp_name.contains(&format!("-{}-", std::process::id())),
        "{tmp_name}"
    );
    assert_eq!(tmp.parent(), out.parent());
    f.write_all(b"hello").unwrap();
    drop(f);
    // Two pending files for one destination do not collide.
    let (p2, _f2) = PendingFile::create(&out).unwrap();
    assert_ne!(p2.temp_path(), tmp);
    drop(p2);
    p.commit().unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"hello");
    assert_eq!(dir.entries(), vec!["out.txt"]);

    expect_err(PendingFile::create(&dir.0), is_invalid, &["is a directory"]);
}

#[test]
fn missing_output_directory_is_refused_before_any_work() {
    let dir = TempDir::new("nodir");
    let missing = dir.path("no-such-dir");
    let out = missing.join("diversity_cache.json");
    let missing_s = missing.display().to_string();
    let out_s = out.display().to_string();
    let words = [
        out_s.as_str(),
        "output directory",
        missing_s.as_str(),
        "does not exist",
    ];
    expect_err(
        JsonCacheWriter::create(&out, &metadata(), None),
        is_io,
        &words,
    );
    expect_err(BinaryCacheWriter::create(&out, 3, 3), is_io, &words);
    expect_err(PendingFile::create(&out), is_io, &words);
    let t = Table::new(vec![1.0, 2.0], 1, 2).unwrap();
    expect_err(
        save_fp16_bin(&missing.join("e.bin"), &t, "raw", "x"),
        is_io,
        &["output directory", "does not exist"],
    );
    assert!(!missing.exists());
    assert!(dir.entries().is_empty());
}

#[cfg(unix)]
#[test]
fn read_only_output_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("readonly");
    let ro = dir.path("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = ro.join("diversity_cache.json");
    let listing = || std::fs::read_dir(&ro).unwrap().count();

    match JsonCacheWriter::create(&out, &metadata(), None) {
        Err(e) => {
            assert!(is_io(&e), "{e:?}");
            let msg = e.to_string();
            for w in [
                out.display().to_string().as_str(),
                "cannot write here",
                "Permission denied",
            ] {
                assert!(msg.contains(w), "message lacks {w:?}: {msg}");
            }
        }
        Ok(mut w) => {
            // Root ignores permissions: the write works; at least check the cleanup.
            eprintln!("read-only directory was writable (running as root?): checking cleanup only");
            w.write_sequence(0, &[0]).unwrap();
            assert_eq!(listing(), 1, "the temporary file exists while writing");
            drop(w);
        }
    }
    match BinaryCacheWriter::create(&out, 2, 2) {
        Err(e) => {
            assert!(is_io(&e), "{e:?}");
            assert!(e.to_string().contains("cannot write here"), "{e}");
        }
        Ok(w) => drop(w),
    }
    assert_eq!(
        listing(),
        0,
        "nothing may be left in the read-only directory"
    );
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}
