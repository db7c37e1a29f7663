//! The rankings JSON writer and the k-NN graph file: round trips, bad batches, large runs and
//! foreign or truncated files.

use super::*;

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
