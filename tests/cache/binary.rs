//! The binary sequence cache and the fp16 `.bin` table format: round trips, reads of one row,
//! bad rows and sizes, sidecars and checksums (and the ignored full-size benchmark).

use super::*;

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

/// A new directory (named after `tag`) holding e.bin: `sample(4, 3)` saved in `space` with the
/// source checksum `source`. Returns the directory and the file's path.
fn sample_bin(tag: &str, space: &str, source: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    let out = dir.path("e.bin");
    save_fp16_bin(&out, &sample(4, 3), space, source).unwrap();
    (dir, out)
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
    let (_dir, out) = sample_bin("fp16-stale", "mean-centered-v1", "fnv1a64:00000000000000aa");
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
    let (_dir, out) = sample_bin("fp16-size", "raw", "x");
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
    let (dir, out) = sample_bin("fp16-edited", "raw", "fnv1a64:00000000000000aa");
    let other = dir.path("other.bin");
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
    let (dir, out) = sample_bin("fp16-side", "raw", "x");
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
