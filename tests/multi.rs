//! k-NN over several devices: shards (the table split by rows) and replicas (the
//! queries split) against one device's `knn_flat`, ids and distance bits equal, on two or three
//! logical devices opened on the one physical device ("0,0"), validation layers on every
//! context; all three metrics, fp32 and fp16, k = 1, 10, 33 and k > N, duplicate rows across
//! the shard boundary, N smaller than the device count, uneven weights, the device spec and
//! the errors.

mod common;
use common::{assert_clean, assert_same, precisions, random_table};
use diversity::knn::{knn_flat, max_warp_k, KnnResult, NO_ID};
use diversity::multi::{open_devices, split_ranges, IndexReplicas, IndexShards};
use diversity::{Context, DeviceTable, KnnOptions, Metric, Precision, Table};

const METRICS: [Metric; 3] = [Metric::InnerProduct, Metric::Cosine, Metric::L2];

fn devices(spec: &str) -> Vec<Context> {
    let ctxs = open_devices(spec, true).expect("devices with validation layers");
    assert_eq!(ctxs.len(), spec.split(',').count());
    ctxs
}

/// One device's result on the whole table.
fn single(ctx: &Context, table: &Table, p: Precision, q: &Table, opts: &KnnOptions) -> KnnResult {
    let dt = DeviceTable::upload(ctx, table, p).unwrap();
    knn_flat(&dt, q.data(), q.d(), opts).unwrap()
}

fn clean(ctxs: &[Context]) {
    for c in ctxs {
        assert_clean(c);
    }
}

#[test]
fn shards_and_replicas_equal_one_device() {
    let ctxs = devices("0,0");
    let table = random_table(301, 19, 11);
    let queries = random_table(13, 19, 12);
    for p in precisions(&ctxs[0]) {
        let shards = IndexShards::new(&ctxs, &table, p, None).unwrap();
        assert_eq!(shards.ranges(), &[(0, 151), (151, 301)]);
        let replicas = IndexReplicas::new(&ctxs, &table, p, None).unwrap();
        let dt = DeviceTable::upload(&ctxs[0], &table, p).unwrap();
        for metric in METRICS {
            for k in [1, 10, 33, 400] {
                let mut variants = vec![KnnOptions {
                    k,
                    metric,
                    ..Default::default()
                }];
                if k == 33 {
                    // The selection and full-ranking paths, odd tiles.
                    variants.push(KnnOptions {
                        k,
                        metric,
                        warp_select: Some(false),
                        table_tile: Some(100),
                        query_tile: Some(4),
                        ..Default::default()
                    });
                    variants.push(KnnOptions {
                        k,
                        metric,
                        full_ranking: true,
                        ..Default::default()
                    });
                }
                for opts in variants {
                    let what = format!("{} {opts:?}", p.name());
                    let want = knn_flat(&dt, queries.data(), 19, &opts).unwrap();
                    let (got, report) = shards.knn(queries.data(), 19, &opts).unwrap();
                    assert_same(&got, &want, &format!("shards {what}"));
                    assert_eq!(report.ranges, vec![(0, 151), (151, 301)]);
                    assert_eq!(got.gpu_ns, *report.per_device_ns.iter().max().unwrap());
                    let (got, report) = replicas.knn(queries.data(), 19, &opts).unwrap();
                    assert_same(&got, &want, &format!("replicas {what}"));
                    assert_eq!(report.ranges, vec![(0, 7), (7, 13)]);
                    if k == 400 {
                        // Padding past N, as on one device.
                        let pad = if metric == Metric::L2 {
                            f32::INFINITY
                        } else {
                            f32::NEG_INFINITY
                        };
                        assert!(got.ids_of(3)[301..].iter().all(|&i| i == NO_ID));
                        assert!(got.distances_of(3)[301..].iter().all(|&d| d == pad));
                    }
                }
            }
        }
    }
    // The one-call forms.
    let opts = KnnOptions {
        k: 10,
        metric: Metric::L2,
        ..Default::default()
    };
    let want = single(&ctxs[0], &table, Precision::Fp32, &queries, &opts);
    let (q, p) = (queries.data(), Precision::Fp32);
    let (got, _) = IndexShards::knn_once(&ctxs, &table, p, q, 19, &opts, None).unwrap();
    assert_same(&got, &want, "IndexShards::knn_once");
    let (got, _) = IndexReplicas::knn_once(&ctxs, &table, p, q, 19, &opts, None).unwrap();
    assert_same(&got, &want, "IndexReplicas::knn_once");
    clean(&ctxs);
}

#[test]
fn duplicate_rows_across_the_shard_boundary_go_to_the_lowest_id() {
    let ctxs = devices("0,0");
    // Rows 20..40 are copies of rows 0..20: each pair straddles the split at 20.
    let half = random_table(20, 8, 21).data().to_vec();
    let mut data = half.clone();
    data.extend_from_slice(&half);
    let table = Table::new(data, 40, 8).unwrap();
    // Queries: copies of rows 0..5, then random ones.
    let mut qdata = half[..5 * 8].to_vec();
    qdata.extend_from_slice(random_table(4, 8, 22).data());
    let queries = Table::new(qdata, 9, 8).unwrap();
    for p in precisions(&ctxs[0]) {
        for weights in [None, Some(&[1.0, 3.0][..])] {
            let shards = IndexShards::new(&ctxs, &table, p, weights).unwrap();
            for metric in METRICS {
                for k in [1, 2, 5, 41] {
                    let opts = KnnOptions {
                        k,
                        metric,
                        ..Default::default()
                    };
                    let want = single(&ctxs[0], &table, p, &queries, &opts);
                    let (got, _) = shards.knn(queries.data(), 8, &opts).unwrap();
                    let what = format!("{} {weights:?} {opts:?}", p.name());
                    assert_same(&got, &want, &what);
                    if metric != Metric::InnerProduct {
                        for j in 0..5 {
                            let ids = got.ids_of(j);
                            assert_eq!(ids[0], j as i64, "{what}: query {j}");
                            if k >= 2 {
                                assert_eq!(ids[1], j as i64 + 20, "{what}: query {j}");
                                let d = got.distances_of(j);
                                assert_eq!(d[0].to_bits(), d[1].to_bits());
                            }
                        }
                    }
                }
            }
        }
    }
    clean(&ctxs);
}

#[test]
fn fewer_rows_or_queries_than_devices() {
    let ctxs = devices("0,0");
    let one = random_table(1, 5, 31);
    let queries = random_table(3, 5, 32);
    for metric in METRICS {
        for k in [1, 3] {
            let opts = KnnOptions {
                k,
                metric,
                ..Default::default()
            };
            let want = single(&ctxs[0], &one, Precision::Fp32, &queries, &opts);
            let (got, report) =
                IndexShards::knn_once(&ctxs, &one, Precision::Fp32, queries.data(), 5, &opts, None)
                    .unwrap();
            assert_same(&got, &want, &format!("N = 1 {opts:?}"));
            assert_eq!(report.ranges, vec![(0, 1), (1, 1)]);
            assert_eq!(report.per_device_ns[1], 0, "the empty shard is skipped");
            assert_eq!(got.ids_of(0)[0], 0);
            assert!(got.ids_of(0)[1..].iter().all(|&i| i == NO_ID));
        }
    }
    // One query for two replicas; no queries at all.
    let table = random_table(50, 5, 33);
    let opts = KnnOptions {
        k: 4,
        ..Default::default()
    };
    let q1 = queries.head(1).unwrap();
    let want = single(&ctxs[0], &table, Precision::Fp32, &q1, &opts);
    let (got, report) =
        IndexReplicas::knn_once(&ctxs, &table, Precision::Fp32, q1.data(), 5, &opts, None).unwrap();
    assert_same(&got, &want, "one query");
    assert_eq!(report.ranges, vec![(0, 1), (1, 1)]);
    let (got, _) =
        IndexReplicas::knn_once(&ctxs, &table, Precision::Fp32, &[], 5, &opts, None).unwrap();
    assert_eq!((got.queries, got.ids.len()), (0, 0));
    let (got, _) =
        IndexShards::knn_once(&ctxs, &table, Precision::Fp32, &[], 5, &opts, None).unwrap();
    assert_eq!((got.queries, got.ids.len()), (0, 0));
    clean(&ctxs);
}

#[test]
fn uneven_weights_and_three_devices() {
    let ctxs = devices("0,0,0");
    let table = random_table(97, 12, 41);
    let queries = random_table(11, 12, 42);
    for p in precisions(&ctxs[0]) {
        for weights in [[1.0, 2.0, 0.5], [0.0, 1.0, 1.0], [5.0, 0.0, 0.0]] {
            for metric in METRICS {
                let opts = KnnOptions {
                    k: 10,
                    metric,
                    ..Default::default()
                };
                let want = single(&ctxs[0], &table, p, &queries, &opts);
                let what = format!("{} {weights:?} {opts:?}", p.name());
                let (q, w) = (queries.data(), Some(&weights[..]));
                let (got, report) =
                    IndexShards::knn_once(&ctxs, &table, p, q, 12, &opts, w).unwrap();
                assert_same(&got, &want, &format!("shards {what}"));
                assert_eq!(report.ranges, split_ranges(97, 3, w).unwrap());
                assert_eq!(got.gpu_ns, *report.per_device_ns.iter().max().unwrap());
                let (got, report) =
                    IndexReplicas::knn_once(&ctxs, &table, p, q, 12, &opts, w).unwrap();
                assert_same(&got, &want, &format!("replicas {what}"));
                assert_eq!(report.ranges, split_ranges(11, 3, w).unwrap());
            }
        }
    }
    assert_eq!(
        split_ranges(97, 3, Some(&[1.0, 2.0, 0.5])).unwrap(),
        vec![(0, 28), (28, 83), (83, 97)]
    );
    clean(&ctxs);
}

#[test]
fn device_spec_and_its_errors() {
    let list = Context::list_devices().unwrap();
    let listed = format!("0: {} ({})", list[0].name, list[0].uuid);
    let err = |spec: &str| open_devices(spec, true).err().expect(spec).to_string();
    for spec in ["", "  ", " , "] {
        let e = err(spec);
        assert!(e.contains(&format!("device list '{spec}' is empty")), "{e}");
        assert!(e.contains(&listed), "{e}");
    }
    let e = err("0,,0");
    assert!(e.contains("device list '0,,0': item 1 is empty"), "{e}");
    let e = err("0,99");
    assert!(
        e.contains("device list '0,99': index 99 is out of range"),
        "{e}"
    );
    assert!(e.contains(&listed), "{e}");
    let e = err("no-such-gpu");
    assert!(
        e.contains("device list 'no-such-gpu': no device name contains 'no-such-gpu'"),
        "{e}"
    );
    assert!(e.contains(&listed), "{e}");
    // By name (any case), by index, every device.
    let word = list[0]
        .name
        .split_whitespace()
        .next()
        .unwrap()
        .to_uppercase();
    let by_name = open_devices(&format!(" {word} , 0"), true).unwrap();
    assert_eq!(by_name.len(), 2);
    assert_eq!(by_name[0].caps().name, list[0].name);
    assert_eq!(by_name[1].caps().name, list[0].name);
    let all = open_devices("all", true).unwrap();
    assert_eq!(all.len(), list.len());
    clean(&by_name);
    clean(&all);
}

#[test]
fn errors_name_the_device_or_the_input() {
    let ctxs = devices("0,0");
    let table = random_table(30, 6, 51);
    let q = random_table(4, 6, 52);
    let opts = KnnOptions::default();
    let sharded = |q: &[f32], dim: usize, o: &KnnOptions| {
        IndexShards::knn_once(&ctxs, &table, Precision::Fp32, q, dim, o, None)
            .unwrap_err()
            .to_string()
    };
    let e = sharded(
        q.data(),
        6,
        &KnnOptions {
            k: 0,
            ..Default::default()
        },
    );
    assert!(e.contains("k ≥ 1"), "{e}");
    let e = sharded(&q.data()[..10], 5, &opts);
    assert!(e.contains("dimension 5"), "{e}");
    // A bad query is named by its index in the whole batch, not in a device's block.
    let mut bad = q.data().to_vec();
    bad[3 * 6 + 2] = f32::NAN;
    let e = IndexReplicas::knn_once(&ctxs, &table, Precision::Fp32, &bad, 6, &opts, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("query 3 has a non-finite value"), "{e}");
    // A value out of the fp16 range is named by its row in the whole table.
    if ctxs[0].caps().fp16_storage {
        let mut data = table.data().to_vec();
        data[25 * 6 + 1] = 1e6;
        let big = Table::new(data, 30, 6).unwrap();
        let e = IndexShards::new(&ctxs, &big, Precision::Fp16, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("row 25 has a value"), "{e}");
    }
    // A device's own failure names the device: WarpSelect forced for a k it cannot take, on
    // device 1 only (weights 0, 1).
    let k = max_warp_k(&ctxs[0]) + 1;
    let t = random_table(k + 5, 4, 53);
    let forced = KnnOptions {
        k,
        warp_select: Some(true),
        ..Default::default()
    };
    let e = IndexShards::knn_once(
        &ctxs,
        &t,
        Precision::Fp32,
        random_table(2, 4, 54).data(),
        4,
        &forced,
        Some(&[0.0, 1.0]),
    )
    .unwrap_err()
    .to_string();
    let name = &ctxs[1].caps().name;
    assert!(
        e.contains(&format!("unsupported on device 1 ({name})")) && e.contains("WarpSelect"),
        "{e}"
    );
    // Weights must match the devices.
    let e = IndexReplicas::new(&ctxs, &table, Precision::Fp32, Some(&[1.0]))
        .err()
        .unwrap()
        .to_string();
    assert_eq!(e, "1 weights for 2 devices");
    clean(&ctxs);
}
