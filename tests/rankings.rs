//! Similarity rankings on a real Vulkan device (lavapipe in CI), validation layers on: rows
//! against a float64 reference ranking (gathered scores equal the reference's sorted scores
//! within rounding, sorted, self excluded, no repeats, equal scores by lowest index), top_k and
//! all, fp32 and fp16 (against the fp16-rounded table), duplicate rows (ties and self-exclusion
//! when self is not first), batch sizes giving byte-identical caches, the cache's JSON shape,
//! ids from an embeddings.json, the k-NN graph round trip, and bad input.

mod common;
use common::{assert_clean, ctx, fortunes, random_table, TempDir};
use diversity::cache::{KnnGraph, KnnMetric, KNN_PAD};
use diversity::rankings::{
    rankings, rankings_with_values, write_knn_graph, write_rankings_cache, RankingsOptions,
};
use diversity::reference::knn_reference;
use diversity::{files, Context, DeviceTable, Error, Metric, Precision, Table};
use serde_json::{json, Value};

/// Everything the sink received, in order.
#[derive(Default)]
struct Got {
    items: Vec<u32>,
    ids: Vec<u32>,
    values: Vec<f32>,
    len: usize,
}

fn run(dt: &DeviceTable, table: &Table, opts: &RankingsOptions) -> Got {
    let mut got = Got::default();
    let report = rankings_with_values(dt, table, opts, |items, ids, values, len| {
        assert_eq!(ids.len(), items.len() * len);
        assert_eq!(values.len(), items.len() * len);
        assert!(items.len() <= opts.batch.unwrap_or(usize::MAX));
        got.items.extend_from_slice(items);
        got.ids.extend_from_slice(ids);
        got.values.extend_from_slice(values);
        got.len = len;
        Ok(())
    })
    .unwrap();
    assert_eq!(report.items, got.items.len());
    assert_eq!(report.top_k, got.len);
    got
}

/// Check every row against the float64 reference on `stored` (the table as the device holds
/// it).
fn check(stored: &Table, metric: Metric, top_k: Option<usize>, got: &Got) {
    let n = stored.n();
    let len = top_k.map_or(n - 1, |k| k.min(n - 1));
    assert_eq!(got.len, len);
    let sim = metric != Metric::L2;
    for (r, &item) in got.items.iter().enumerate() {
        let i = item as usize;
        let q = stored.row(i);
        let reference = knn_reference(stored, q, metric, Some(i));
        let (keys, order, tol) = (reference.keys, reference.order, reference.tolerance);
        let ids = &got.ids[r * len..(r + 1) * len];
        let values = &got.values[r * len..(r + 1) * len];
        let mut seen = std::collections::HashSet::new();
        for p in 0..len {
            let id = ids[p] as usize;
            assert!(id < n, "item {i} position {p}: id {id} out of range");
            assert_ne!(id, i, "item {i} position {p}: the item itself");
            assert!(seen.insert(id), "item {i} position {p}: id {id} repeated");
            // The gathered float64 score equals the reference's p-th score within rounding
            // (so the ids are the reference's up to near-ties).
            let (g, want) = (keys[id], keys[order[p]]);
            assert!(
                (g - want).abs() <= tol,
                "item {i} position {p}: id {id} scores {g}, the reference's {} scores {want}",
                order[p]
            );
            assert!(
                (values[p] as f64 - g).abs() <= tol,
                "item {i} position {p}: value {} vs float64 {g}",
                values[p]
            );
            if p > 0 {
                // Sorted best first by the device's scores, equal scores by lowest index.
                let (a, b) = (values[p - 1], values[p]);
                let ok = if sim { a > b } else { a < b } || (a == b && ids[p - 1] < ids[p]);
                assert!(
                    ok,
                    "item {i} positions {}..={p}: not sorted ({a}, {b})",
                    p - 1
                );
            }
        }
    }
}

fn upload(ctx: &Context, t: &Table, p: Precision) -> DeviceTable {
    DeviceTable::upload(ctx, t, p).unwrap()
}

#[test]
fn fortunes_top_k_and_all_fp32() {
    let ctx = ctx();
    let t = fortunes(300);
    let dt = upload(&ctx, &t, Precision::Fp32);
    for top_k in [Some(10), Some(1), None] {
        let opts = RankingsOptions {
            top_k,
            batch: Some(128),
            ..Default::default()
        };
        let got = run(&dt, &t, &opts);
        assert_eq!(got.items, (0..300).collect::<Vec<u32>>());
        check(&t, Metric::Cosine, top_k, &got);
    }
    assert_clean(&ctx);
}

#[test]
fn fortunes_fp16_against_rounded_table() {
    let ctx = ctx();
    if !ctx.caps().fp16_storage {
        eprintln!("skipped: no 16-bit storage");
        return;
    }
    let t = fortunes(200);
    let dt = upload(&ctx, &t, Precision::Fp16);
    let stored = t.as_stored(Precision::Fp16);
    for top_k in [Some(20), None] {
        let opts = RankingsOptions {
            top_k,
            ..Default::default()
        };
        check(&stored, Metric::Cosine, top_k, &run(&dt, &t, &opts));
    }
    assert_clean(&ctx);
}

#[test]
fn other_metrics_and_subset() {
    let ctx = ctx();
    let t = random_table(150, 24, 7);
    let dt = upload(&ctx, &t, Precision::Fp32);
    for metric in [Metric::InnerProduct, Metric::L2] {
        let opts = RankingsOptions {
            top_k: Some(33),
            metric,
            batch: Some(40),
            ..Default::default()
        };
        check(&t, metric, Some(33), &run(&dt, &t, &opts));
    }
    // A subset, handed to the sink in the order given.
    let items = vec![149, 3, 77, 0];
    let opts = RankingsOptions {
        top_k: Some(5),
        items: Some(items.clone()),
        batch: Some(3),
        ..Default::default()
    };
    let got = run(&dt, &t, &opts);
    assert_eq!(got.items, items);
    check(&t, Metric::Cosine, Some(5), &got);
    assert_clean(&ctx);
}

/// Rows 2, 5 and 7 equal; row 9 zero; the rest random. Self is excluded by id even where a
/// lower-indexed duplicate ties with it and comes first; equal scores go by lowest index.
#[test]
fn duplicates_ties_and_self() {
    let ctx = ctx();
    let (n, d) = (40, 16);
    let base = random_table(n, d, 11);
    let mut data = base.data().to_vec();
    let row2 = base.row(2).to_vec();
    for r in [5, 7] {
        data[r * d..(r + 1) * d].copy_from_slice(&row2);
    }
    data[9 * d..10 * d].fill(0.0);
    let t = Table::new(data, n, d).unwrap();
    for p in [Precision::Fp32, Precision::Fp16] {
        if p == Precision::Fp16 && !ctx.caps().fp16_storage {
            continue;
        }
        let dt = upload(&ctx, &t, p);
        for (top_k, full) in [
            (Some(1), false),
            (Some(2), false),
            (None, false),
            (None, true),
        ] {
            let opts = RankingsOptions {
                top_k,
                full_ranking: full,
                batch: Some(16),
                ..Default::default()
            };
            let got = run(&dt, &t, &opts);
            check(&t.as_stored(p), Metric::Cosine, top_k, &got);
            let len = got.len;
            let row = |i: usize| &got.ids[i * len..(i + 1) * len];
            let want = |v: &[u32]| v[..len.min(v.len())].to_vec();
            assert_eq!(row(2)[..len.min(2)], want(&[5, 7]), "{p:?} {top_k:?}");
            assert_eq!(row(5)[..len.min(2)], want(&[2, 7]), "{p:?} {top_k:?}");
            assert_eq!(row(7)[..len.min(2)], want(&[2, 5]), "{p:?} {top_k:?}");
            // The zero row scores 0 against everything: all others by index.
            let zero: Vec<u32> = (0..n as u32).filter(|&j| j != 9).take(len).collect();
            assert_eq!(row(9), &zero[..], "{p:?} {top_k:?}");
        }
    }
    assert_clean(&ctx);
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn cache_byte_identical_over_batches_and_json_shape() {
    let ctx = ctx();
    let t = fortunes(300);
    let dt = upload(&ctx, &t, Precision::Fp32);
    let dir = TempDir::new("rankings-batches");
    let extra = json!({"model": "test-model", "note": 1});
    for top_k in [Some(10), None] {
        let mut files = Vec::new();
        for batch in [Some(7), Some(64), Some(100), None] {
            let path = dir.path(&format!("r-{top_k:?}-{batch:?}.json"));
            let opts = RankingsOptions {
                top_k,
                batch,
                ..Default::default()
            };
            let rep = write_rankings_cache(&dt, &t, &path, &opts, &extra, None, None).unwrap();
            assert_eq!(rep.items, 300);
            if let Some(b) = batch {
                assert_eq!(rep.batches, 300usize.div_ceil(b));
            }
            files.push(read(&path));
        }
        for f in &files[1..] {
            assert!(
                f == &files[0],
                "caches differ between batch sizes ({top_k:?})"
            );
        }
        // The user's shape.
        let v: Value = serde_json::from_slice(&files[0]).unwrap();
        let meta = &v["metadata"];
        assert_eq!(meta["total_poems"], json!(300));
        assert_eq!(meta["algorithm"], json!("cosine-knn-v1"));
        assert_eq!(meta["format"], json!("pre_sorted_rankings"));
        assert_eq!(meta["top_k"], json!(top_k));
        assert_eq!(meta["model"], json!("test-model"));
        assert_eq!(meta["metric"], json!("cosine"));
        assert_eq!(meta["precision"], json!("fp32"));
        assert_eq!(meta["dim"], json!(384));
        assert!(meta["device"].is_string());
        let r = v["rankings"].as_object().unwrap();
        assert_eq!(r.len(), 300);
        // Same rows as the sink's.
        let got = run(
            &dt,
            &t,
            &RankingsOptions {
                top_k,
                ..Default::default()
            },
        );
        for i in 0..300 {
            let want: Vec<Value> = got.ids[i * got.len..(i + 1) * got.len]
                .iter()
                .map(|&j| json!(j))
                .collect();
            assert_eq!(r[&i.to_string()], Value::Array(want), "item {i}");
        }
    }
    assert_clean(&ctx);
}

#[test]
fn ids_from_embeddings_json() {
    let ctx = ctx();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/fortunes-300.embeddings.json");
    let t = files::load_table(&path, None).unwrap();
    let ids = t.ids().expect("an embeddings.json has ids").to_vec();
    let dt = upload(&ctx, &t, Precision::Fp32);
    let dir = TempDir::new("rankings-ids");
    let out = dir.path("rankings.json");
    let opts = RankingsOptions {
        top_k: Some(8),
        ..Default::default()
    };
    write_rankings_cache(&dt, &t, &out, &opts, &Value::Null, None, None).unwrap();
    let v: Value = serde_json::from_slice(&read(&out)).unwrap();
    let got = run(&dt, &t, &opts);
    let r = v["rankings"].as_object().unwrap();
    assert_eq!(r.len(), t.n());
    for i in 0..t.n() {
        let key = match &ids[i] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let want: Vec<Value> = got.ids[i * 8..(i + 1) * 8]
            .iter()
            .map(|&j| ids[j as usize].clone())
            .collect();
        assert_eq!(r[&key], Value::Array(want), "item {i} (id {key})");
    }
    // Explicit ids override the table's.
    let mine: Vec<Value> = (0..t.n()).map(|i| json!(format!("x{i}"))).collect();
    write_rankings_cache(&dt, &t, &out, &opts, &Value::Null, Some(mine), None).unwrap();
    let v: Value = serde_json::from_slice(&read(&out)).unwrap();
    assert_eq!(v["rankings"]["x0"][0], json!(format!("x{}", got.ids[0])));
    assert_clean(&ctx);
}

#[test]
fn knn_graph_round_trip() {
    let ctx = ctx();
    let t = fortunes(250);
    let dt = upload(&ctx, &t, Precision::Fp32);
    let dir = TempDir::new("rankings-graph");
    let path = dir.path("graph.dknn");
    let rep = write_knn_graph(&dt, &t, &path, None, Metric::Cosine, Some(60)).unwrap();
    assert_eq!(rep.top_k, 10);
    let got = run(
        &dt,
        &t,
        &RankingsOptions {
            top_k: Some(10),
            ..Default::default()
        },
    );
    check(&t, Metric::Cosine, Some(10), &got);
    let mut g = KnnGraph::open(&path).unwrap();
    assert_eq!((g.n(), g.k(), g.metric()), (250, 10, KnnMetric::Cosine));
    for i in 0..250 {
        let (ids, values) = g.row(i as u32).unwrap();
        assert_eq!(ids, got.ids[i * 10..(i + 1) * 10], "item {i}");
        assert_eq!(values, got.values[i * 10..(i + 1) * 10], "item {i}");
    }
    // k = N: rows padded by one (k > N is refused before any file); L2 distances.
    let small = random_table(6, 5, 3);
    let ds = upload(&ctx, &small, Precision::Fp32);
    let p2 = dir.path("small.dknn");
    write_knn_graph(&ds, &small, &p2, Some(6), Metric::L2, None).unwrap();
    assert!(write_knn_graph(
        &ds,
        &small,
        &dir.path("big.dknn"),
        Some(7),
        Metric::L2,
        None
    )
    .is_err());
    assert!(!dir.path("big.dknn").exists());
    let mut g = KnnGraph::open(&p2).unwrap();
    assert_eq!((g.n(), g.k(), g.metric()), (6, 6, KnnMetric::L2));
    for i in 0..6u32 {
        let (ids, values) = g.row(i).unwrap();
        assert!(!ids[..5].contains(&i) && ids[..5].iter().all(|&j| j < 6));
        assert_eq!(ids[5..], [KNN_PAD; 1]);
        assert!(values[5..].iter().all(|&v| v == f32::INFINITY));
        assert!(values[..5].windows(2).all(|w| w[0] <= w[1]));
    }
    assert_clean(&ctx);
}

/// Bad input. Choices: top_k = 0 is an error (nothing written); top_k ≥ N clamps to N − 1
/// (the metadata keeps the requested value); a missing output directory fails before any
/// device work and leaves no file; N = 1 gives empty rankings.
#[test]
fn bad_input() {
    let ctx = ctx();
    let t = random_table(30, 8, 5);
    let dt = upload(&ctx, &t, Precision::Fp32);
    let dir = TempDir::new("rankings-bad");
    let out = dir.path("r.json");

    let zero = RankingsOptions {
        top_k: Some(0),
        ..Default::default()
    };
    let e = rankings(&dt, &t, &zero, |_, _, _| Ok(())).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = write_rankings_cache(&dt, &t, &out, &zero, &Value::Null, None, None).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());

    // Clamped.
    let big = RankingsOptions {
        top_k: Some(1000),
        ..Default::default()
    };
    let got = run(&dt, &t, &big);
    assert_eq!(got.len, 29);
    check(&t, Metric::Cosine, None, &got);
    write_rankings_cache(&dt, &t, &out, &big, &Value::Null, None, None).unwrap();
    let v: Value = serde_json::from_slice(&read(&out)).unwrap();
    assert_eq!(v["metadata"]["top_k"], json!(1000));
    assert_eq!(v["rankings"]["0"].as_array().unwrap().len(), 29);
    std::fs::remove_file(&out).unwrap();

    // Missing directory: an error, no file anywhere.
    let missing = dir.path("no/such/dir/r.json");
    let ok = RankingsOptions::default();
    assert!(write_rankings_cache(&dt, &t, &missing, &ok, &Value::Null, None, None).is_err());
    assert!(write_knn_graph(&dt, &t, &missing, None, Metric::Cosine, None).is_err());
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());

    // Extra metadata repeating a field, a table that is not the uploaded one, bad items,
    // batch 0.
    let e =
        write_rankings_cache(&dt, &t, &out, &ok, &json!({"metric": "x"}), None, None).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = write_rankings_cache(&dt, &t, &out, &ok, &json!({"top_k": 3}), None, None).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());
    let other = random_table(31, 8, 5);
    assert!(rankings(&dt, &other, &ok, |_, _, _| Ok(())).is_err());
    for items in [vec![30u32], vec![1, 1]] {
        let o = RankingsOptions {
            items: Some(items),
            ..Default::default()
        };
        assert!(rankings(&dt, &t, &o, |_, _, _| Ok(())).is_err());
    }
    let o = RankingsOptions {
        batch: Some(0),
        ..Default::default()
    };
    assert!(rankings(&dt, &t, &o, |_, _, _| Ok(())).is_err());

    // A subset makes a partial cache.
    let o = RankingsOptions {
        top_k: Some(3),
        items: Some(vec![4, 2]),
        ..Default::default()
    };
    write_rankings_cache(&dt, &t, &out, &o, &Value::Null, None, None).unwrap();
    let v: Value = serde_json::from_slice(&read(&out)).unwrap();
    assert_eq!(v["metadata"]["total_poems"], json!(30));
    let r = v["rankings"].as_object().unwrap();
    let mut keys: Vec<_> = r.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["2", "4"]);

    // A sink error stops the run and is returned.
    let e = rankings(&dt, &t, &ok, |_, _, _| Err(Error::Invalid("stop".into()))).unwrap_err();
    assert!(e.to_string().contains("stop"), "{e}");

    // N = 1: empty rankings.
    let one = random_table(1, 8, 9);
    let d1 = upload(&ctx, &one, Precision::Fp32);
    let got = run(&d1, &one, &ok);
    assert_eq!((got.items.clone(), got.len), (vec![0], 0));
    let p1 = dir.path("one.json");
    write_rankings_cache(&d1, &one, &p1, &ok, &Value::Null, None, None).unwrap();
    let v: Value = serde_json::from_slice(&read(&p1)).unwrap();
    assert_eq!(v["rankings"]["0"], json!([]));
    assert_clean(&ctx);
}
