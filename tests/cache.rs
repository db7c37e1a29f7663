//! Cache writers and readers and the fp16 `.bin` table format: round trips, the
//! streaming JSON writer's parallel formatting, and the bad-input cases that concern output
//! files — no partial or stale file is ever left behind. Error tests check the variant and the
//! words a user needs to see. No Vulkan device is needed.

use diversity::cache::{
    merge_caches, shard_len, BinaryCache, BinaryCacheWriter, JsonCacheWriter, KnnGraph,
    KnnGraphWriter, KnnMetric, MergeReport, PendingFile, RankingsWriter, ShardLayout, KNN_PAD,
};
use diversity::error::Error;
use diversity::files::{
    bytes_checksum, file_checksum, fp16_bin_sidecar, load_fp16_bin, load_table, save_fp16_bin,
};
use diversity::table::{Precision, Table};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod common;
use common::TempDir;

/// A deterministic permutation-like row for start `s`: `s` first, then a stride walk.
fn synthetic_row(s: u32, n: u32, len: usize) -> Vec<u32> {
    let stride = 7919 % n.max(1); // a prime, coprime with most n
    (0..len as u64)
        .map(|k| ((s as u64 + k * stride.max(1) as u64) % n as u64) as u32)
        .collect()
}

/// Check an error's variant by `is` and that its message contains every word.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(
    r: diversity::error::Result<T>,
    is: fn(&Error) -> bool,
    words: &[&str],
) -> Error {
    match r {
        Err(e) if is(&e) => {
            let msg = e.to_string();
            for w in words {
                assert!(msg.contains(w), "message lacks {w:?}: {msg}");
            }
            e
        }
        Err(e) => panic!("wrong error variant: {e:?}"),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

fn is_invalid(e: &Error) -> bool {
    matches!(e, Error::Invalid(_))
}
fn is_format(e: &Error) -> bool {
    matches!(e, Error::Format { .. })
}
fn is_io(e: &Error) -> bool {
    matches!(e, Error::Io { .. })
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).expect("read cache");
    serde_json::from_slice(&bytes).expect("cache is valid JSON")
}

fn metadata() -> Value {
    json!({
        "model": "test-model \"quoted\" ü",
        "num_poems": 5,
        "algorithm": "diversity-scan",
        "generated_at": "2026-01-01T00:00:00Z",
        "batch_size": 3,
        "top_k": null,
        "space": "mean-centered-v1",
        "precision": "fp16",
        "mode": "scan",
        "device": "test",
        "nested": {"a": [1, 2.5, -3]}
    })
}

/// Five full sequences over five rows (row s starts with s).
fn five() -> Vec<(u32, Vec<u32>)> {
    vec![
        (0, vec![0, 3, 1, 4, 2]),
        (1, vec![1, 0, 2, 4, 3]),
        (2, vec![2, 4, 0, 1, 3]),
        (3, vec![3, 1, 2, 0, 4]),
        (4, vec![4, 2, 3, 0, 1]),
    ]
}

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

#[test]
fn binary_round_trip_in_any_row_order() {
    let dir = TempDir::new("bin");
    for (n, len) in [(7u32, 7usize), (50, 3), (1, 1)] {
        let out = dir.path(&format!("seq-{n}-{len}.bin"));
        let mut order: Vec<u32> = (0..n).collect();
        // A fixed shuffle.
        for i in (1..order.len()).rev() {
            let j = (i * 7919 + 13) % (i + 1);
            order.swap(i, j);
        }
        let mut w = BinaryCacheWriter::create(&out, n as usize, len).unwrap();
        assert_eq!(
            std::fs::metadata(w_temp(&dir)).unwrap().len(),
            4 + n as u64 * len as u64 * 4,
            "pre-sized"
        );
        for (k, &s) in order.iter().enumerate() {
            if k.is_multiple_of(2) {
                w.write_row(s, &synthetic_row(s, n, len)).unwrap();
            } else {
                w.write_batch(&[s], &synthetic_row(s, n, len)).unwrap();
            }
        }
        assert_eq!(w.rows_written(), n as usize);
        w.finish().unwrap();
        assert_eq!(
            std::fs::metadata(&out).unwrap().len(),
            4 + n as u64 * len as u64 * 4
        );

        let (rn, flat) = BinaryCache::read_all(&out).unwrap();
        assert_eq!(rn, n as usize);
        let want: Vec<u32> = (0..n).flat_map(|s| synthetic_row(s, n, len)).collect();
        assert_eq!(flat, want);

        let mut c = BinaryCache::open(&out).unwrap();
        assert_eq!((c.n(), c.len()), (n as usize, len));
        for &s in order.iter().rev() {
            assert_eq!(c.sequence(s).unwrap(), synthetic_row(s, n, len));
        }
        expect_err(
            c.sequence(n),
            is_invalid,
            &[&format!("start {n}"), "out of range"],
        );
    }
    // The user's own layout: uint32 N, then N × N.
    let out = dir.path("user.bin");
    let mut bytes = 3u32.to_le_bytes().to_vec();
    for v in [0u32, 2, 1, 1, 0, 2, 2, 1, 0] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(&out, &bytes).unwrap();
    let mut c = BinaryCache::open(&out).unwrap();
    assert_eq!((c.n(), c.len()), (3, 3));
    assert_eq!(c.sequence(1).unwrap(), vec![1, 0, 2]);
}

/// The single temporary file in `dir`.
fn w_temp(dir: &TempDir) -> PathBuf {
    let e = dir.entries();
    let tmp: Vec<&String> = e.iter().filter(|n| n.starts_with('.')).collect();
    assert_eq!(tmp.len(), 1, "{e:?}");
    dir.path(tmp[0])
}

/// `sequence(s)` reads only its own row: garbage in every other row does not disturb it, while
/// reading the whole file refuses the garbage.
#[test]
fn binary_sequence_reads_only_its_row() {
    let dir = TempDir::new("bin-one");
    let out = dir.path("c.bin");
    let (n, len) = (6u32, 4usize);
    let mut bytes = n.to_le_bytes().to_vec();
    for s in 0..n {
        for v in synthetic_row(s, n, len) {
            let v = if s == 3 { v } else { 0xdead_beef };
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(&out, &bytes).unwrap();
    let mut c = BinaryCache::open(&out).unwrap();
    assert_eq!(c.sequence(3).unwrap(), synthetic_row(3, n, len));
    let p = out.display().to_string();
    expect_err(
        c.sequence(0),
        is_format,
        &[&p, "row 0", "3735928559", "corrupt"],
    );
    expect_err(
        BinaryCache::read_all(&out),
        is_format,
        &[&p, "row 0", "3735928559", "corrupt"],
    );
    // Rows that are no sequence of their start: another first entry, an entry twice, one past
    // N (what the writer refuses, the reader refuses).
    let good: Vec<u32> = (0..n).flat_map(|s| synthetic_row(s, n, len)).collect();
    for (name, at, v, words) in [
        (
            "first",
            2 * len,
            5u32,
            vec!["row 2", "starts with 5", "its start 2"],
        ),
        (
            "twice",
            2 * len + 2,
            good[2 * len + 1],
            vec!["row 2", "twice"],
        ),
        ("past-n", 2 * len + 3, 6, vec!["row 2", "out of range"]),
    ] {
        let mut flat = good.clone();
        flat[at] = v;
        let mut b = n.to_le_bytes().to_vec();
        b.extend(flat.iter().flat_map(|v| v.to_le_bytes()));
        let f = dir.file(name, &b);
        let mut c = BinaryCache::open(&f).unwrap();
        assert_eq!(c.sequence(1).unwrap(), synthetic_row(1, n, len), "{name}");
        expect_err(c.sequence(2), is_format, &words);
        expect_err(BinaryCache::read_all(&f), is_format, &words);
    }
}

#[test]
fn binary_writer_refuses_missing_rows_and_bad_rows() {
    let dir = TempDir::new("bin-missing");
    let out = dir.path("c.bin");
    let mut w = BinaryCacheWriter::create(&out, 5, 2).unwrap();
    w.write_row(0, &[0, 1]).unwrap();
    w.write_row(3, &[3, 4]).unwrap();
    expect_err(
        w.write_row(5, &[0, 1]),
        is_invalid,
        &["start 5", "out of range", "N = 5"],
    );
    expect_err(
        w.write_row(1, &[1, 2, 3]),
        is_invalid,
        &["start 1", "3 entries", "rows have 2"],
    );
    expect_err(
        w.write_row(1, &[1, 5]),
        is_invalid,
        &["start 1", "index 5", "position 1"],
    );
    expect_err(
        w.write_row(3, &[3, 0]),
        is_invalid,
        &["start 3", "repeated"],
    );
    expect_err(
        w.write_batch(&[1, 2], &[1, 0, 2]),
        is_invalid,
        &["3 values", "2 sequences"],
    );
    expect_err(
        w.finish(),
        is_invalid,
        &["3 of 5 rows are missing", "start 1", "not written"],
    );
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());

    expect_err(
        BinaryCacheWriter::create(&out, 0, 3),
        is_invalid,
        &["N = 0"],
    );
    expect_err(
        BinaryCacheWriter::create(&out, 3, 0),
        is_invalid,
        &["length 0"],
    );
    expect_err(
        BinaryCacheWriter::create(&out, 1 << 33, 1),
        is_invalid,
        &["N = 8589934592"],
    );
    assert!(dir.entries().is_empty());
}

#[test]
fn bad_binary_sizes_are_refused() {
    let dir = TempDir::new("bin-size");
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        ("tiny.bin", vec![1, 0], vec!["2 bytes", "too small"]),
        ("zero.bin", 0u32.to_le_bytes().to_vec(), vec!["N = 0"]),
        (
            "header-only.bin",
            3u32.to_le_bytes().to_vec(),
            vec!["size 4 bytes", "N = 3", "4 + 3 × 3 × 4 = 40", "L ≥ 1"],
        ),
        (
            "ragged.bin",
            [3u32.to_le_bytes().to_vec(), vec![0u8; 3 * 2 * 4 + 1]].concat(),
            vec![
                "size 29 bytes",
                "N = 3",
                "25 bytes after the header",
                "multiple of 12",
            ],
        ),
        (
            "short.bin",
            [4u32.to_le_bytes().to_vec(), vec![0u8; 12]].concat(),
            vec!["size 16 bytes", "N = 4", "multiple of 16"],
        ),
    ];
    for (name, bytes, words) in cases {
        let p = dir.path(name);
        std::fs::write(&p, &bytes).unwrap();
        let ps = p.display().to_string();
        let mut all = vec![ps.as_str()];
        all.extend(words.iter().copied());
        expect_err(BinaryCache::open(&p), is_format, &all);
        expect_err(BinaryCache::read_all(&p), is_format, &all);
    }
    let missing = dir.path("missing.bin");
    expect_err(
        BinaryCache::open(&missing),
        is_io,
        &[&missing.display().to_string()],
    );
}

/// A table with awkward values: signs, tiny values, values rounding at fp16.
fn sample(n: usize, d: usize) -> Table {
    let data = (0..n * d)
        .map(|i| ((i as f32) * 0.37 - 3.1).sin() * 10f32.powi((i % 5) as i32 - 2))
        .collect();
    Table::new(data, n, d).unwrap()
}

#[test]
fn fp16_bin_round_trip() {
    let dir = TempDir::new("fp16");
    let src = dir.path("embeddings.json");
    std::fs::write(&src, b"{\"pretend\": \"source\"}").unwrap();
    let sum = file_checksum(&src).unwrap();
    let t = sample(37, 19);
    let out = dir.path("embeddings_fp16.bin");
    save_fp16_bin(&out, &t, "mean-centered-v1", &sum).unwrap();
    assert_eq!(
        dir.entries(),
        vec![
            "embeddings.json",
            "embeddings_fp16.bin",
            "embeddings_fp16.bin.json"
        ]
    );
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 37 * 19 * 2);
    let side = fp16_bin_sidecar(&out);
    assert_eq!(side, dir.path("embeddings_fp16.bin.json"));
    assert_eq!(
        read_json(&side),
        json!({"format": "fp16-le-rowmajor", "n": 37, "dim": 19,
               "space": "mean-centered-v1", "source_checksum": sum,
               "checksum": bytes_checksum(&std::fs::read(&out).unwrap())})
    );
    let want = t.as_stored(Precision::Fp16);
    for loaded in [
        load_fp16_bin(&out, Some(("mean-centered-v1", &sum))).unwrap(),
        load_fp16_bin(&out, None).unwrap(),
        load_table(&out, None).unwrap(),
    ] {
        assert_eq!((loaded.n(), loaded.d()), (37, 19));
        assert_eq!(loaded.data(), want.data());
    }
    // Little-endian halves, row-major.
    let bytes = std::fs::read(&out).unwrap();
    let first = half::f16::from_f32(t.data()[0]).to_bits().to_le_bytes();
    assert_eq!(&bytes[..2], &first);

    // Rewriting replaces both files and leaves nothing else.
    save_fp16_bin(&out, &sample(2, 3), "raw", "fnv1a64:0").unwrap();
    assert_eq!(dir.entries().len(), 3);
    assert_eq!(
        load_fp16_bin(&out, Some(("raw", "fnv1a64:0"))).unwrap().n(),
        2
    );
}

#[test]
fn fp16_bin_out_of_range_is_refused() {
    let dir = TempDir::new("fp16-range");
    let out = dir.path("e.bin");
    let t = Table::new(vec![1.0, 2.0, 3.0, 70000.0], 2, 2).unwrap();
    expect_err(
        save_fp16_bin(&out, &t, "raw", "x"),
        is_invalid,
        &["row 1", "column 1", "70000", "float16 range"],
    );
    assert!(dir.entries().is_empty());
}

#[test]
fn fp16_bin_stale_or_foreign_is_refused() {
    let dir = TempDir::new("fp16-stale");
    let out = dir.path("e.bin");
    save_fp16_bin(
        &out,
        &sample(4, 3),
        "mean-centered-v1",
        "fnv1a64:00000000000000aa",
    )
    .unwrap();
    let p = out.display().to_string();
    expect_err(
        load_fp16_bin(&out, Some(("mean-centered-v1", "fnv1a64:00000000000000bb"))),
        is_format,
        &[
            &p,
            "stale or foreign",
            "expected",
            "fnv1a64:00000000000000bb",
            "found",
            "fnv1a64:00000000000000aa",
        ],
    );
    expect_err(
        load_fp16_bin(&out, Some(("raw", "fnv1a64:00000000000000aa"))),
        is_format,
        &[&p, "stale or foreign", "\"raw\"", "\"mean-centered-v1\""],
    );
}

#[test]
fn fp16_bin_size_mismatch_is_refused() {
    let dir = TempDir::new("fp16-size");
    let out = dir.path("e.bin");
    save_fp16_bin(&out, &sample(4, 3), "raw", "x").unwrap();
    let bytes = std::fs::read(&out).unwrap();
    std::fs::write(&out, &bytes[..bytes.len() - 2]).unwrap();
    let p = out.display().to_string();
    for r in [load_fp16_bin(&out, None), load_table(&out, None)] {
        expect_err(
            r,
            is_format,
            &[&p, "size 22 bytes", "sidecar", "4 × 3 × 2 = 24"],
        );
    }
}

/// The sidecar carries the `.bin`'s own checksum: a file of the right size whose bytes were
/// edited, or another table's `.bin` of the same shape copied over it, is refused naming both
/// files; a sidecar without a checksum is accepted for a `.bin` given as input (other tools
/// write none) but not for a cache this crate wrote (`expect`), which is then regenerated.
#[test]
fn fp16_bin_edited_or_replaced_is_refused() {
    let dir = TempDir::new("fp16-edited");
    let out = dir.path("e.bin");
    let other = dir.path("other.bin");
    save_fp16_bin(&out, &sample(4, 3), "raw", "fnv1a64:00000000000000aa").unwrap();
    let mut shifted = sample(4, 3).data().to_vec();
    shifted[5] += 1.0;
    let shifted = Table::new(shifted, 4, 3).unwrap();
    save_fp16_bin(&other, &shifted, "raw", "fnv1a64:00000000000000aa").unwrap();
    let good = std::fs::read(&out).unwrap();
    let p = out.display().to_string();
    let s = fp16_bin_sidecar(&out).display().to_string();
    let expect = Some(("raw", "fnv1a64:00000000000000aa"));
    // One byte edited in place: same size, same sidecar.
    let mut edited = good.clone();
    edited[7] ^= 0x40;
    std::fs::write(&out, &edited).unwrap();
    for r in [
        load_fp16_bin(&out, None),
        load_fp16_bin(&out, expect),
        load_table(&out, None),
    ] {
        expect_err(
            r,
            is_format,
            &[
                &p,
                "checksum",
                "disagrees with its sidecar",
                &s,
                "regenerate",
            ],
        );
    }
    // Another table's .bin of the same shape (and the same source) copied over it.
    std::fs::copy(&other, &out).unwrap();
    expect_err(
        load_fp16_bin(&out, expect),
        is_format,
        &[&p, "disagrees with its sidecar"],
    );
    std::fs::write(&out, &good).unwrap();
    assert_eq!(load_fp16_bin(&out, expect).unwrap().n(), 4);
    // A sidecar without "checksum": fine for an input, refused for a cache.
    let side = fp16_bin_sidecar(&out);
    let mut meta = read_json(&side);
    meta.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&side, serde_json::to_vec(&meta).unwrap()).unwrap();
    assert_eq!(load_fp16_bin(&out, None).unwrap().n(), 4);
    assert_eq!(load_table(&out, None).unwrap().n(), 4);
    expect_err(
        load_fp16_bin(&out, expect),
        is_format,
        &[&s, "no \"checksum\""],
    );
    // A checksum that is not a string.
    meta["checksum"] = json!(7);
    std::fs::write(&side, serde_json::to_vec(&meta).unwrap()).unwrap();
    expect_err(
        load_fp16_bin(&out, None),
        is_format,
        &[&s, "\"checksum\" is a number (7), not a string"],
    );
}

#[test]
fn fp16_bin_missing_or_bad_sidecar_is_refused() {
    let dir = TempDir::new("fp16-side");
    let out = dir.path("e.bin");
    save_fp16_bin(&out, &sample(4, 3), "raw", "x").unwrap();
    let side = fp16_bin_sidecar(&out);
    let good = std::fs::read(&side).unwrap();
    std::fs::remove_file(&side).unwrap();
    let p = out.display().to_string();
    let s = side.display().to_string();
    for r in [load_fp16_bin(&out, None), load_table(&out, None)] {
        expect_err(r, is_format, &[&p, "missing sidecar", &s]);
    }
    std::fs::write(&side, b"{not json").unwrap();
    expect_err(
        load_fp16_bin(&out, None),
        is_format,
        &[&s, "malformed sidecar JSON"],
    );
    std::fs::write(
        &side,
        br#"{"format":"fp16-le-rowmajor","n":4,"space":"raw","source_checksum":"x"}"#,
    )
    .unwrap();
    expect_err(load_fp16_bin(&out, None), is_format, &[&s, "no \"dim\""]);
    std::fs::write(
        &side,
        br#"{"format":"fp32","n":4,"dim":3,"space":"raw","source_checksum":"x"}"#,
    )
    .unwrap();
    expect_err(load_fp16_bin(&out, None), is_format, &[&s, "\"fp32\""]);
    std::fs::write(
        &side,
        br#"{"format":"fp16-le-rowmajor","n":0,"dim":3,"space":"raw","source_checksum":"x"}"#,
    )
    .unwrap();
    expect_err(
        load_fp16_bin(&out, None),
        is_format,
        &[&s, "\"n\"", "not a positive integer"],
    );
    std::fs::write(&side, &good).unwrap();
    assert_eq!(load_fp16_bin(&out, None).unwrap().n(), 4);
    let missing = dir.path("none.bin");
    expect_err(
        load_fp16_bin(&missing, None),
        is_io,
        &[&missing.display().to_string()],
    );
}

#[test]
fn checksum_is_fnv1a64_streamed() {
    let dir = TempDir::new("sum");
    let empty = dir.path("empty");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(file_checksum(&empty).unwrap(), "fnv1a64:cbf29ce484222325");
    let a = dir.path("a");
    std::fs::write(&a, b"a").unwrap();
    assert_eq!(file_checksum(&a).unwrap(), "fnv1a64:af63dc4c8601ec8c");
    let foobar = dir.path("foobar");
    std::fs::write(&foobar, b"foobar").unwrap();
    assert_eq!(file_checksum(&foobar).unwrap(), "fnv1a64:85944171f73967e8");
    // Across 1 MiB blocks: same as hashing in one go.
    let big: Vec<u8> = (0..(3 << 20) + 12345)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    let p = dir.path("big");
    std::fs::write(&p, &big).unwrap();
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in &big {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    assert_eq!(file_checksum(&p).unwrap(), format!("fnv1a64:{h:016x}"));
    let missing = dir.path("missing");
    expect_err(
        file_checksum(&missing),
        is_io,
        &[&missing.display().to_string()],
    );
}

/// The whole cache at N = 14,943: 14,943 × 14,943 entries (≈ 1.3 GB of JSON), written in
/// batches of 3,584 like the driver does, timed for BENCHMARKS.md. Ignored by default:
/// `cargo test --release --test cache -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_full_cache_14943() {
    const N: u32 = 14_943;
    const BATCH: usize = 3584;
    let dir = TempDir::new("bench");
    let starts: Vec<u32> = (0..N).collect();
    let mut flat = Vec::with_capacity(BATCH * N as usize);
    for (label, ids) in [
        ("no ids", None),
        (
            "string ids",
            Some(
                (0..N)
                    .map(|i| json!(format!("poem-{i:05}")))
                    .collect::<Vec<_>>(),
            ),
        ),
    ] {
        let json_out = dir.path("diversity_cache.json");
        let bin_out = dir.path("diversity_cache.bin");
        let mut w = JsonCacheWriter::create(&json_out, &metadata(), ids).unwrap();
        let mut b = BinaryCacheWriter::create(&bin_out, N as usize, N as usize).unwrap();
        let (mut t_json, mut t_bin, mut t_gen) = (0f64, 0f64, 0f64);
        let t_all = Instant::now();
        for batch in starts.chunks(BATCH) {
            let t = Instant::now();
            flat.clear();
            for &s in batch {
                flat.extend(synthetic_row(s, N, N as usize));
            }
            t_gen += t.elapsed().as_secs_f64();
            let t = Instant::now();
            w.write_batch(batch, &flat, N as usize).unwrap();
            t_json += t.elapsed().as_secs_f64();
            let t = Instant::now();
            b.write_batch(batch, &flat).unwrap();
            t_bin += t.elapsed().as_secs_f64();
        }
        let t = Instant::now();
        w.finish().unwrap();
        let t_json_finish = t.elapsed().as_secs_f64();
        let t = Instant::now();
        b.finish().unwrap();
        let t_bin_finish = t.elapsed().as_secs_f64();
        let json_bytes = std::fs::metadata(&json_out).unwrap().len();
        let bin_bytes = std::fs::metadata(&bin_out).unwrap().len();
        let mut c = BinaryCache::open(&bin_out).unwrap();
        let t = Instant::now();
        let row = c.sequence(N / 2).unwrap();
        let t_one = t.elapsed().as_secs_f64();
        assert_eq!(row, synthetic_row(N / 2, N, N as usize));
        println!(
            "cache {N} × {N} ({label}), {} threads: JSON {:.1} MB in {:.2} s format+write + {:.2} s \
             finish ({:.0} MB/s); binary {:.1} MB in {:.2} s + {:.2} s finish; one row read {:.2} \
             ms; synthetic data {:.2} s; total {:.2} s",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            json_bytes as f64 / 1e6,
            t_json,
            t_json_finish,
            json_bytes as f64 / 1e6 / (t_json + t_json_finish),
            bin_bytes as f64 / 1e6,
            t_bin,
            t_bin_finish,
            t_one * 1e3,
            t_gen,
            t_all.elapsed().as_secs_f64()
        );
        std::fs::remove_file(&json_out).unwrap();
        std::fs::remove_file(&bin_out).unwrap();
    }
}

/// The ranking of `item` among `n` items: every other item, in a stride order (deterministic,
/// distinct, never `item`), cut to `len`.
fn ranking(item: u32, n: u32, len: usize) -> Vec<u32> {
    let stride = (0..n.max(2))
        .map(|d| 7919 % n.max(2) + d)
        .find(|&st| st > 0 && gcd(st, n) == 1)
        .unwrap_or(1);
    (1..n as u64)
        .map(|j| ((item as u64 + j * stride as u64) % n as u64) as u32)
        .filter(|&v| v != item)
        .take(len)
        .collect()
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn rankings_extra() -> Value {
    json!({"model": "m \"q\" ü", "generated_at": "2026-01-01T00:00:00Z", "nested": {"a": [1, 2.5]}})
}

/// A rankings file's expected value: keys and values through `ids` when given.
fn rankings_value(
    n: u32,
    top_k: Option<usize>,
    rows: &[(u32, Vec<u32>)],
    ids: Option<&[Value]>,
) -> Value {
    let mut meta = serde_json::Map::new();
    meta.insert("total_poems".into(), json!(n));
    meta.insert("algorithm".into(), json!("cosine-test"));
    meta.insert("format".into(), json!("pre_sorted_rankings"));
    meta.insert("top_k".into(), json!(top_k));
    for (k, v) in rankings_extra().as_object().unwrap() {
        meta.insert(k.clone(), v.clone());
    }
    let key = |i: u32| match ids {
        Some(ids) => match &ids[i as usize] {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        },
        None => i.to_string(),
    };
    let val = |i: u32| ids.map_or_else(|| json!(i), |ids| ids[i as usize].clone());
    let rankings: serde_json::Map<String, Value> = rows
        .iter()
        .map(|(i, r)| (key(*i), Value::Array(r.iter().map(|&v| val(v)).collect())))
        .collect();
    json!({"metadata": meta, "rankings": rankings})
}

#[test]
fn rankings_round_trip_with_and_without_ids() {
    let dir = TempDir::new("rank");
    let n = 7u32;
    let string_ids: Vec<Value> = ["a", "b\"q", "γ", "d\\e\n", "42", "f", "g"]
        .iter()
        .map(|s| json!(s))
        .collect();
    let number_ids: Vec<Value> = [100, 7, 0, 123456789, -5, 3, 9]
        .iter()
        .map(|&v| json!(v))
        .collect();
    for (tag, ids) in [
        ("none", None),
        ("str", Some(string_ids)),
        ("num", Some(number_ids)),
    ] {
        for top_k in [None, Some(3), Some(1), Some(6), Some(50)] {
            let out = dir.path(&format!("r-{tag}-{top_k:?}.json"));
            let mut w = RankingsWriter::create(
                &out,
                n as usize,
                top_k,
                "cosine-test",
                &rankings_extra(),
                ids.clone(),
            )
            .unwrap();
            let len = top_k.map_or(6, |k| k.min(6));
            assert_eq!(w.row_len(), len);
            let rows: Vec<(u32, Vec<u32>)> = (0..n).map(|i| (i, ranking(i, n, len))).collect();
            // Out of order: a single, a batch, another batch.
            w.write_ranking(5, &rows[5].1).unwrap();
            let b1 = [3u32, 0, 6];
            let flat: Vec<u32> = b1
                .iter()
                .flat_map(|&i| rows[i as usize].1.clone())
                .collect();
            w.write_batch(&b1, &flat, len).unwrap();
            let b2 = [4u32, 2, 1];
            let flat: Vec<u32> = b2
                .iter()
                .flat_map(|&i| rows[i as usize].1.clone())
                .collect();
            w.write_batch(&b2, &flat, len).unwrap();
            w.write_batch(&[], &[], len).unwrap();
            assert_eq!(w.rankings_written(), 7);
            assert!(!out.exists(), "nothing before finish");
            w.finish().unwrap();
            // The cache carries its own checksum, last in the metadata.
            diversity::cache::verify_checksum(&out).unwrap();
            let mut v = read_json(&out);
            let sum = v["metadata"].as_object_mut().unwrap().remove("checksum");
            assert!(sum.unwrap().as_str().unwrap().starts_with("fnv1a64:"));
            assert_eq!(
                v,
                rankings_value(n, top_k, &rows, ids.as_deref()),
                "{tag} {top_k:?}"
            );
            let text = std::fs::read_to_string(&out).unwrap();
            assert!(
                text.starts_with(&format!(
                    "{{\"metadata\":{{\"total_poems\":7,\"algorithm\":\"cosine-test\",\"format\":\"pre_sorted_rankings\",\"top_k\":{}",
                    top_k.map_or("null".to_string(), |k| k.to_string())
                )),
                "{text}"
            );
            assert!(text.ends_with("}}\n"));
        }
    }
    // N = 1: one empty ranking; N = 2: each the other.
    let out = dir.path("one.json");
    let mut w = RankingsWriter::create(&out, 1, None, "a", &Value::Null, None).unwrap();
    w.write_ranking(0, &[]).unwrap();
    w.finish().unwrap();
    assert_eq!(read_json(&out)["rankings"], json!({"0": []}));
    let out = dir.path("two.json");
    let mut w = RankingsWriter::create(&out, 2, Some(10), "a", &Value::Null, None).unwrap();
    w.write_batch(&[1, 0], &[0, 1], 1).unwrap();
    w.finish().unwrap();
    assert_eq!(read_json(&out)["rankings"], json!({"1": [0], "0": [1]}));
    assert_eq!(read_json(&out)["metadata"]["top_k"], json!(10));
    let mut names = dir.entries();
    names.retain(|e| e.starts_with('.'));
    assert!(names.is_empty(), "temporary files left: {names:?}");
}

/// A bad rankings batch: items, flat, len, and the words its message must hold.
type RankCase = (Vec<u32>, Vec<u32>, usize, Vec<&'static str>);

#[test]
fn rankings_bad_input_is_refused_and_leaves_nothing() {
    let dir = TempDir::new("rank-bad");
    let out = dir.path("r.json");
    let p = out.display().to_string();
    let n = 5u32;
    let ids: Vec<Value> = (0..5).map(|i| json!(format!("id{i}"))).collect();
    {
        let mut w = RankingsWriter::create(
            &out,
            n as usize,
            Some(2),
            "x",
            &Value::Null,
            Some(ids.clone()),
        )
        .unwrap();
        w.write_ranking(0, &[1, 2]).unwrap();
        let cases: Vec<RankCase> = vec![
            (
                vec![5],
                vec![0, 1],
                2,
                vec!["item 5", "out of range", "N = 5"],
            ),
            (
                vec![0],
                vec![2, 3],
                2,
                vec!["item 0", "repeated", "already written"],
            ),
            (
                vec![1, 1],
                vec![0, 2, 0, 2],
                2,
                vec!["item 1", "twice in the batch"],
            ),
            (
                vec![1],
                vec![0, 5],
                2,
                vec!["ranking of item 1", "entry 5", "position 1", "out of range"],
            ),
            (
                vec![2],
                vec![2, 0],
                2,
                vec!["ranking of item 2", "position 0", "item 2 itself"],
            ),
            (
                vec![3],
                vec![4, 4],
                2,
                vec!["ranking of item 3", "entry 4", "twice"],
            ),
            (
                vec![1, 2],
                vec![0, 2, 0],
                2,
                vec!["3 values", "2 rankings", "expected 4"],
            ),
            (
                vec![1],
                vec![0, 2, 3],
                3,
                vec!["3 entries", "have 2", "top_k = 2"],
            ),
            // A good row before a bad one: the whole batch is refused.
            (
                vec![1, 4],
                vec![0, 2, 4, 0],
                2,
                vec!["ranking of item 4", "item 4 itself"],
            ),
        ];
        for (items, flat, len, words) in cases {
            let mut all = vec![p.as_str()];
            all.extend(words);
            expect_err(w.write_batch(&items, &flat, len), is_invalid, &all);
        }
        // Refused batches claimed nothing: items 1..4 can still be written.
        w.write_batch(&[1, 4], &[0, 2, 3, 0], 2).unwrap();
        w.write_ranking(2, &[0, 1]).unwrap();
        assert_eq!(w.rankings_written(), 4);
        assert_eq!(dir.entries().len(), 1, "one temporary file while writing");
        expect_err(
            w.finish(),
            is_invalid,
            &[&p, "1 of 5 rows are missing", "item 3", "not written"],
        );
    }
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
    // Dropped unfinished: nothing either.
    {
        let mut w = RankingsWriter::create(&out, 3, None, "x", &Value::Null, None).unwrap();
        w.write_ranking(0, &[1, 2]).unwrap();
    }
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
    // A partial set is written only on request.
    let mut w = RankingsWriter::create(&out, 3, None, "x", &Value::Null, None).unwrap();
    w.write_ranking(2, &[1, 0]).unwrap();
    w.finish_partial().unwrap();
    assert_eq!(read_json(&out)["rankings"], json!({"2": [1, 0]}));
    assert_eq!(dir.entries(), vec!["r.json"]);
    std::fs::remove_file(&out).unwrap();

    // Bad creation: nothing created.
    let create = |n: usize, top_k: Option<usize>, extra: Value, ids: Option<Vec<Value>>| {
        RankingsWriter::create(&out, n, top_k, "x", &extra, ids)
    };
    expect_err(
        create(0, None, Value::Null, None),
        is_invalid,
        &[&p, "N = 0"],
    );
    expect_err(
        create(3, Some(0), Value::Null, None),
        is_invalid,
        &[&p, "top_k = 0"],
    );
    expect_err(
        create(3, None, json!([1]), None),
        is_invalid,
        &["object or null", "an array"],
    );
    expect_err(
        create(3, None, json!({"format": "x"}), None),
        is_invalid,
        &["repeats the field \"format\""],
    );
    expect_err(
        create(5, None, Value::Null, Some(ids[..4].to_vec())),
        is_invalid,
        &["4 ids", "N = 5"],
    );
    expect_err(
        create(2, None, Value::Null, Some(vec![json!("a"), json!("a")])),
        is_invalid,
        &["same id"],
    );
    expect_err(
        create(2, None, Value::Null, Some(vec![json!("a"), json!(null)])),
        is_invalid,
        &["row 1", "not a string or a number"],
    );
    let missing = dir.path("no-dir").join("r.json");
    expect_err(
        RankingsWriter::create(&missing, 3, None, "x", &Value::Null, None),
        is_io,
        &["output directory", "does not exist"],
    );
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
}

/// N = 3,000, all rankings, in shuffled batches on several threads: the bytes equal a
/// straightforward serde_json serialization of the same data (keys in the order written).
#[test]
fn rankings_large_equals_serde_json() {
    let dir = TempDir::new("rank-big");
    let n = 3000u32;
    let len = n as usize - 1;
    let ids: Vec<Value> = (0..n).map(|i| json!(format!("poem-{i}"))).collect();
    let mut order: Vec<u32> = (0..n).collect();
    for i in (1..order.len()).rev() {
        let j = (i * 7919 + 13) % (i + 1);
        order.swap(i, j);
    }
    for (tag, ids) in [("ids", Some(ids)), ("plain", None)] {
        let out = dir.path(&format!("{tag}.json"));
        let extra = json!({"model": "all-MiniLM-L6-v2"});
        let mut w =
            RankingsWriter::create(&out, n as usize, None, "cosine", &extra, ids.clone()).unwrap();
        w.set_threads(4);
        let mut expected = String::from(
            "{\"metadata\":{\"total_poems\":3000,\"algorithm\":\"cosine\",\"format\":\
             \"pre_sorted_rankings\",\"top_k\":null,\"model\":\"all-MiniLM-L6-v2\"},\"rankings\":{",
        );
        for (b, batch) in order.chunks(700).enumerate() {
            let rows: Vec<Vec<u32>> = batch.iter().map(|&i| ranking(i, n, len)).collect();
            for (k, (&i, r)) in batch.iter().zip(&rows).enumerate() {
                if b > 0 || k > 0 {
                    expected.push(',');
                }
                let (key, vals): (String, Vec<Value>) = match &ids {
                    Some(ids) => (
                        ids[i as usize].as_str().unwrap().to_string(),
                        r.iter().map(|&v| ids[v as usize].clone()).collect(),
                    ),
                    None => (i.to_string(), r.iter().map(|&v| json!(v)).collect()),
                };
                expected.push_str(&serde_json::to_string(&key).unwrap());
                expected.push(':');
                expected.push_str(&serde_json::to_string(&vals).unwrap());
            }
            w.write_batch(batch, &rows.concat(), len).unwrap();
        }
        expected.push_str("}}\n");
        w.finish().unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        // But for its own checksum, the last member of the metadata.
        let at = text.find(",\"checksum\":\"fnv1a64:").expect("a checksum");
        let text = format!("{}{}", &text[..at], &text[at + 38..]);
        assert!(text == expected, "{tag}: output differs from serde_json's");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["rankings"].as_object().unwrap().len(), n as usize);
    }
}

/// A neighbour row of `item`: `real` distinct other items, then padding to k, with values
/// closest first for `metric`.
fn knn_row(item: u32, n: u32, k: usize, real: usize, metric: KnnMetric) -> (Vec<u32>, Vec<f32>) {
    let mut ids = ranking(item, n, real);
    let mut values: Vec<f32> = (0..ids.len())
        .map(|j| {
            let d = j as f32 * 0.25 - item as f32 * 1e-3;
            if metric.larger_is_closer() {
                -d
            } else {
                d
            }
        })
        .collect();
    while ids.len() < k {
        ids.push(KNN_PAD);
        values.push(0.0); // overwritten by the writer
    }
    (ids, values)
}

#[test]
fn knn_graph_round_trip_in_any_order() {
    let dir = TempDir::new("knn");
    for (n, k, metric) in [
        (9u32, 3usize, KnnMetric::Cosine),
        (5, 5, KnnMetric::L2),
        (1, 1, KnnMetric::InnerProduct),
        (40, 4, KnnMetric::L2),
    ] {
        let out = dir.path(&format!("g-{n}-{k}.dknn"));
        let real = k.min(n as usize - 1);
        let rows: Vec<(Vec<u32>, Vec<f32>)> =
            (0..n).map(|i| knn_row(i, n, k, real, metric)).collect();
        let mut w = KnnGraphWriter::create(&out, n as usize, k, metric).unwrap();
        // Descending single rows for the first half, then the rest as one consecutive run.
        let half = n / 2;
        for i in (0..half).rev() {
            w.write_row(i, &rows[i as usize].0, &rows[i as usize].1)
                .unwrap();
        }
        let rest: Vec<u32> = (half..n).collect();
        let ids: Vec<u32> = rest
            .iter()
            .flat_map(|&i| rows[i as usize].0.clone())
            .collect();
        let vals: Vec<f32> = rest
            .iter()
            .flat_map(|&i| rows[i as usize].1.clone())
            .collect();
        w.write_batch(&rest, &ids, &vals).unwrap();
        assert_eq!(w.rows_written(), n as usize);
        w.finish().unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(bytes.len() as u64, 24 + n as u64 * k as u64 * 8);
        assert_eq!(&bytes[..4], b"DKNN");
        let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        assert_eq!(
            [word(4), word(8), word(12), word(16), word(20)],
            [1, n, k as u32, metric.code(), 0]
        );
        let mut g = KnnGraph::open(&out).unwrap();
        assert_eq!((g.n(), g.k(), g.metric()), (n as usize, k, metric));
        for i in (0..n).rev() {
            let (ids, values) = g.row(i).unwrap();
            let (want_ids, want_values) = &rows[i as usize];
            assert_eq!(&ids, want_ids);
            for j in 0..k {
                let want = if j < real {
                    want_values[j]
                } else {
                    metric.pad_value()
                };
                assert_eq!(values[j].to_bits(), want.to_bits(), "item {i} position {j}");
            }
        }
        expect_err(
            g.row(n),
            is_invalid,
            &[&format!("item {n}"), "out of range"],
        );
    }
}

/// A bad k-NN batch: items, ids, values, and the words its message must hold.
type KnnCase = (Vec<u32>, Vec<u32>, Vec<f32>, Vec<&'static str>);

#[test]
fn knn_graph_bad_rows_are_refused_and_leave_nothing() {
    let dir = TempDir::new("knn-bad");
    let out = dir.path("g.dknn");
    let p = out.display().to_string();
    {
        let mut w = KnnGraphWriter::create(&out, 4, 3, KnnMetric::Cosine).unwrap();
        w.write_row(0, &[1, 2, 3], &[0.9, 0.5, 0.5]).unwrap();
        let pad = KNN_PAD;
        let cases: Vec<KnnCase> = vec![
            (
                vec![4],
                vec![0, 1, 2],
                vec![0.0; 3],
                vec!["item 4", "out of range", "N = 4"],
            ),
            (
                vec![0],
                vec![1, 2, 3],
                vec![0.0; 3],
                vec!["item 0", "repeated"],
            ),
            (
                vec![2, 2],
                vec![0, 1, 3, 0, 1, 3],
                vec![0.0; 6],
                vec!["item 2", "twice in the batch"],
            ),
            (
                vec![1],
                vec![0, 7, 2],
                vec![0.0; 3],
                vec!["neighbours of item 1", "entry 7", "out of range"],
            ),
            (
                vec![1],
                vec![0, 1, 2],
                vec![0.0; 3],
                vec!["neighbours of item 1", "item 1 itself"],
            ),
            (
                vec![1],
                vec![0, 2, 0],
                vec![0.0; 3],
                vec!["neighbours of item 1", "entry 0", "twice"],
            ),
            (
                vec![1],
                vec![0, pad, 2],
                vec![0.0; 3],
                vec!["entry 2", "follows padding"],
            ),
            (
                vec![1],
                vec![0, 2, 3],
                vec![0.1, f32::NAN, 0.0],
                vec!["item 1", "position 1", "NaN"],
            ),
            (
                vec![1],
                vec![0, 2, 3],
                vec![0.1, 0.2, 0.0],
                vec!["item 1", "not closest first", "cosine", "position 1"],
            ),
            (
                vec![1, 2],
                vec![0, 2, 3],
                vec![0.0; 6],
                vec!["3 values", "2 neighbour id lists"],
            ),
            (
                vec![1],
                vec![0, 2, 3],
                vec![0.0; 2],
                vec!["2 values", "1 neighbour value lists"],
            ),
        ];
        for (items, ids, values, words) in cases {
            let mut all = vec![p.as_str()];
            all.extend(words);
            expect_err(w.write_batch(&items, &ids, &values), is_invalid, &all);
        }
        // Refused batches claimed nothing; padding's values are the writer's.
        w.write_batch(
            &[1, 2],
            &[0, pad, pad, 3, 1, 0],
            &[0.5, 9.0, 9.0, 0.3, 0.2, 0.2],
        )
        .unwrap();
        assert_eq!(w.rows_written(), 3);
        expect_err(
            w.finish(),
            is_invalid,
            &[
                &p,
                "1 of 4 rows are missing",
                "item 3",
                "k-NN graph was not written",
            ],
        );
    }
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
    {
        let mut w = KnnGraphWriter::create(&out, 2, 1, KnnMetric::L2).unwrap();
        w.write_row(0, &[1], &[0.5]).unwrap();
        assert_eq!(dir.entries().len(), 1);
    }
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
    expect_err(
        KnnGraphWriter::create(&out, 0, 3, KnnMetric::L2),
        is_invalid,
        &["N = 0"],
    );
    expect_err(
        KnnGraphWriter::create(&out, 12, (1 << 31) - 1, KnnMetric::L2),
        is_invalid,
        &["k = 2147483647", "1..=N = 12"],
    );
    expect_err(
        BinaryCacheWriter::create(&out, 1, 1 << 38),
        is_invalid,
        &["length 274877906944", "at most N entries"],
    );
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
    expect_err(
        KnnGraphWriter::create(&out, 3, 0, KnnMetric::L2),
        is_invalid,
        &["k = 0"],
    );
    expect_err(
        KnnGraphWriter::create(&dir.path("x").join("g"), 3, 1, KnnMetric::L2),
        is_io,
        &["output directory", "does not exist"],
    );
    assert!(dir.entries().is_empty(), "left: {:?}", dir.entries());
}

#[test]
fn knn_graph_foreign_or_truncated_files_are_refused() {
    let dir = TempDir::new("knn-read");
    let good = dir.path("good.dknn");
    let mut w = KnnGraphWriter::create(&good, 3, 2, KnnMetric::L2).unwrap();
    w.write_batch(
        &[0, 1, 2],
        &[1, 2, 0, 2, 0, 1],
        &[1.0, 2.0, 1.0, 2.0, 1.0, 2.0],
    )
    .unwrap();
    w.finish().unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let with = |at: usize, v: u32| {
        let mut b = bytes.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        b
    };
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        ("tiny", bytes[..10].to_vec(), vec!["10 bytes", "too small"]),
        (
            "foreign",
            [b"PK\x03\x04".to_vec(), bytes[4..].to_vec()].concat(),
            vec!["not a k-NN graph", "DKNN"],
        ),
        ("cache", binary_cache_bytes(), vec!["not a k-NN graph"]),
        (
            "truncated",
            bytes[..bytes.len() - 4].to_vec(),
            vec!["size 68 bytes", "N = 3, k = 2", "= 72 bytes", "truncated"],
        ),
        (
            "long",
            [bytes.clone(), vec![0; 8]].concat(),
            vec!["size 80 bytes", "too long"],
        ),
        ("version", with(4, 2), vec!["version 2", "reads version 1"]),
        ("metric", with(16, 9), vec!["metric code 9"]),
        ("zero-n", with(8, 0), vec!["N = 0"]),
        ("reserved", with(20, 1), vec!["reserved = 1"]),
    ];
    for (name, b, words) in cases {
        let path = dir.file(name, &b);
        let ps = path.display().to_string();
        let mut all = vec![ps.as_str()];
        all.extend(words);
        expect_err(KnnGraph::open(&path), is_format, &all);
    }
    // A corrupt id is refused by the row that holds it only.
    let path = dir.file("corrupt", &with(24 + 2 * 4 + 4, 77));
    let mut g = KnnGraph::open(&path).unwrap();
    assert_eq!(g.row(0).unwrap(), (vec![1, 2], vec![1.0, 2.0]));
    expect_err(
        g.row(1),
        is_format,
        &["row 1", "entry 77", "position 1", "out of range", "corrupt"],
    );
    // What the writer refuses, the reader refuses too: a self-neighbour, an id twice, padding
    // before a real id, a NaN value, values not closest first (rows: 24-byte header, ids of
    // row r at 24 + 8r, values at 48 + 8r).
    let nan = f32::NAN.to_bits();
    for (name, at, v, words) in [
        ("self", 24 + 8, 1u32, vec!["row 1", "itself"]),
        ("twice", 24 + 8, 2, vec!["row 1", "twice"]),
        (
            "pad-first",
            24 + 8,
            u32::MAX,
            vec!["row 1", "follows padding"],
        ),
        ("nan", 48 + 8 + 4, nan, vec!["row 1", "NaN"]),
        (
            "order",
            48 + 8,
            3.0f32.to_bits(),
            vec!["row 1", "closest first"],
        ),
    ] {
        let path = dir.file(name, &with(at, v));
        let mut g = KnnGraph::open(&path).unwrap();
        assert_eq!(g.row(0).unwrap(), (vec![1, 2], vec![1.0, 2.0]), "{name}");
        expect_err(g.row(1), is_format, &words);
    }
    let missing = dir.path("missing.dknn");
    expect_err(
        KnnGraph::open(&missing),
        is_io,
        &[&missing.display().to_string()],
    );
}

/// A small binary sequence cache's bytes (a foreign file for the k-NN reader).
fn binary_cache_bytes() -> Vec<u8> {
    [3u32, 0, 1, 2, 1, 0, 2, 2, 1, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Shards and merge_caches
// ---------------------------------------------------------------------------------------------

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

/// `text` with its own checksum recomputed, as whoever edits a file can: the checksum catches
/// accidents, so what the merge checks of the rows must hold without it.
fn reseal(text: &str) -> String {
    let at = text.find("\"checksum\":\"fnv1a64:").expect("a checksum") + 20;
    let mut b = text.as_bytes().to_vec();
    b[at..at + 16].fill(b'0');
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &c in &b {
        h ^= c as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    b[at..at + 16].copy_from_slice(format!("{h:016x}").as_bytes());
    String::from_utf8(b).unwrap()
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
