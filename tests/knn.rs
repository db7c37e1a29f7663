//! Exact k-NN on a real Vulkan device (lavapipe in CI), validation layers on, against a
//! float64 oracle (Faiss's): the returned distances equal the float64-sorted reference within
//! rounding, no duplicate ids, every returned id's float64 distance equals the returned one,
//! best first with ties by lowest id; fp16 storage against the fp16-rounded table; all three
//! metrics; the selection and the full-ranking paths, with and without subgroup shuffles;
//! k = 1, 32·m ± 1, 2,048, N, > N; N = 1; sizes that are multiples of no tile; bad input.

mod common;
use common::{assert_clean, bits, ctx, fortunes, random_table};
use diversity::knn::{knn_flat, max_select_k, max_warp_k, warp_bucket, KnnPath, NO_ID};
use diversity::reference::knn_reference;
use diversity::{knn, Context, DeviceTable, KnnOptions, KnnResult, Metric, Precision, Table};

/// Check `res` against the float64 oracle on the stored table.
fn check(stored: &Table, queries: &Table, opts: &KnnOptions, res: &diversity::KnnResult) {
    let (n, k, m) = (stored.n(), opts.k, opts.metric);
    assert_eq!(res.k, k);
    assert_eq!(res.queries, queries.n());
    assert_eq!(res.ids.len(), queries.n() * k);
    let sim = m != Metric::L2;
    for qi in 0..queries.n() {
        let q = queries.row(qi);
        let reference = knn_reference(stored, q, m, None);
        let (ref_keys, order, tol) = (reference.keys, reference.order, reference.tolerance);
        let ids = res.ids_of(qi);
        let dists = res.distances_of(qi);
        let mut seen = std::collections::HashSet::new();
        for i in 0..k {
            if i >= n {
                assert_eq!(ids[i], NO_ID, "query {qi} entry {i}: padding");
                assert_eq!(
                    dists[i],
                    if sim {
                        f32::NEG_INFINITY
                    } else {
                        f32::INFINITY
                    }
                );
                continue;
            }
            let id = ids[i];
            assert!(
                id >= 0 && (id as usize) < n,
                "query {qi} entry {i}: id {id}"
            );
            assert!(seen.insert(id), "query {qi}: duplicate id {id}");
            let want = ref_keys[order[i]];
            let got = dists[i] as f64;
            assert!(
                (got - want).abs() <= tol,
                "query {qi} entry {i}: distance {got}, float64 sorted reference {want} (tol {tol})"
            );
            let gathered = ref_keys[id as usize];
            assert!(
                (got - gathered).abs() <= tol,
                "query {qi} entry {i}: id {id} has float64 distance {gathered}, returned {got}"
            );
            if i > 0 {
                let (p, c) = (dists[i - 1], dists[i]);
                assert!(
                    if sim { p >= c } else { p <= c },
                    "query {qi}: not sorted at {i}: {p} then {c}"
                );
                if p == c {
                    assert!(
                        ids[i - 1] < ids[i],
                        "query {qi}: tie at {i} not by lowest id"
                    );
                }
            }
        }
    }
}

fn run_check(
    ctx: &Context,
    table: &Table,
    p: Precision,
    queries: &Table,
    opts: &KnnOptions,
) -> KnnResult {
    let dt = DeviceTable::upload(ctx, table, p).unwrap();
    let res = knn(&dt, queries, opts).unwrap_or_else(|e| panic!("{opts:?}: {e}"));
    check(&table.as_stored(p), queries, opts, &res);
    assert_clean(ctx);
    res
}

fn subgroup_settings(ctx: &Context) -> Vec<Option<bool>> {
    if ctx.caps().subgroup_arithmetic {
        vec![Some(true), Some(false)]
    } else {
        vec![Some(false)]
    }
}

#[test]
fn selection_path_small_and_bucket_edge_k() {
    let ctx = ctx();
    eprintln!(
        "k-NN on {}: subgroup size {}, subgroup ops {}, max select k {}",
        ctx.caps().name,
        ctx.caps().subgroup_size,
        ctx.caps().subgroup_arithmetic,
        max_select_k(&ctx)
    );
    let table = random_table(613, 19, 3);
    let queries = random_table(11, 19, 4);
    for sg in subgroup_settings(&ctx) {
        for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
            for k in [1, 31, 33, 63, 65, 127, 129] {
                let opts = KnnOptions {
                    k,
                    metric,
                    subgroups: sg,
                    table_tile: Some(257),
                    query_tile: Some(4),
                    warp_select: Some(false),
                    ..Default::default()
                };
                let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
                let res = knn(&dt, &queries, &opts).unwrap();
                assert!(matches!(res.path, KnnPath::Select { .. }));
                assert_eq!(res.subgroups, sg == Some(true));
                check(&table, &queries, &opts, &res);
            }
        }
    }
    assert_clean(&ctx);
}

#[test]
fn full_ranking_path_and_k_equal_n() {
    let ctx = ctx();
    let table = random_table(1500, 13, 7);
    let queries = random_table(5, 13, 8);
    for sg in subgroup_settings(&ctx) {
        for metric in [Metric::Cosine, Metric::L2] {
            for (k, full) in [(1, true), (33, true), (1500, false), (1507, false)] {
                let opts = KnnOptions {
                    k,
                    metric,
                    subgroups: sg,
                    full_ranking: full,
                    query_tile: Some(3),
                    ..Default::default()
                };
                run_check(&ctx, &table, Precision::Fp32, &queries, &opts);
            }
        }
    }
}

/// Rows longer than one sorted chunk: the full ranking merges sorted chunks (three chunks of
/// 4,096 here on lavapipe: an odd run count, a partial last run), with exact duplicate rows in
/// different chunks, so ties must come out lowest id first.
#[test]
fn full_ranking_merges_chunks() {
    let ctx = ctx();
    let base = random_table(3000, 11, 31);
    let mut data = base.data().to_vec();
    data.extend_from_slice(&base.data()[..11 * 2900]); // rows 3000.. repeat rows 0..
    data.extend_from_slice(random_table(3100, 11, 32).data());
    let table = Table::new(data, 9000, 11).unwrap();
    let queries = random_table(4, 11, 33);
    for metric in [Metric::InnerProduct, Metric::L2] {
        for k in [max_select_k(&ctx) + 1, 8999, 9000, 9003] {
            let opts = KnnOptions {
                k,
                metric,
                query_tile: Some(3),
                ..Default::default()
            };
            let res = run_check(&ctx, &table, Precision::Fp32, &queries, &opts);
            // More than two chunks: at least two merge rounds.
            let chunk = diversity::knn::max_chunk(&ctx);
            assert!(
                matches!(res.path, KnnPath::FullRanking { padded } if padded > 2 * chunk),
                "{:?}",
                res.path
            );
        }
    }
    assert_clean(&ctx);
}

#[test]
fn k_2048_and_largest_select_k() {
    let ctx = ctx();
    let table = random_table(2100, 9, 21);
    let queries = random_table(3, 9, 22);
    let ks = [2047, 2048, 2049, max_select_k(&ctx), max_select_k(&ctx) + 1];
    for sg in subgroup_settings(&ctx) {
        for k in ks {
            let opts = KnnOptions {
                k,
                metric: Metric::InnerProduct,
                subgroups: sg,
                table_tile: Some(1000),
                ..Default::default()
            };
            run_check(&ctx, &table, Precision::Fp32, &queries, &opts);
        }
    }
}

#[test]
fn fp16_storage_against_rounded_table() {
    let ctx = ctx();
    if !ctx.caps().fp16_storage {
        return;
    }
    let table = fortunes(300);
    let queries = fortunes(300).head(17).unwrap();
    for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
        for k in [1, 10, 65, 300] {
            let opts = KnnOptions {
                k,
                metric,
                table_tile: Some(100),
                ..Default::default()
            };
            run_check(&ctx, &table, Precision::Fp16, &queries, &opts);
        }
    }
    // A random table rounded: fp16 results differ from fp32 ones only by the rounding.
    let t = random_table(333, 21, 9);
    let q = random_table(4, 21, 10);
    let opts = KnnOptions {
        k: 40,
        metric: Metric::L2,
        ..Default::default()
    };
    run_check(&ctx, &t, Precision::Fp16, &q, &opts);
}

#[test]
fn single_row_table_and_self_neighbours() {
    let ctx = ctx();
    let one = random_table(1, 5, 1);
    for k in [1, 3] {
        let opts = KnnOptions {
            k,
            metric: Metric::L2,
            ..Default::default()
        };
        run_check(&ctx, &one, Precision::Fp32, &random_table(2, 5, 2), &opts);
    }
    // Each fortune's nearest neighbour by cosine is itself (distinct rows).
    let t = fortunes(64);
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let res = knn(
        &dt,
        &t,
        &KnnOptions {
            k: 1,
            ..Default::default()
        },
    )
    .unwrap();
    for q in 0..64 {
        assert_eq!(res.ids_of(q)[0], q as i64);
    }
    // Duplicate rows tie exactly: the lower id comes first.
    let mut data = random_table(10, 4, 5).data().to_vec();
    let row3: Vec<f32> = data[12..16].to_vec();
    data[28..32].copy_from_slice(&row3); // row 7 = row 3
    let t = Table::new(data, 10, 4).unwrap();
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let q = Table::new(row3, 1, 4).unwrap();
    let res = knn(
        &dt,
        &q,
        &KnnOptions {
            k: 3,
            metric: Metric::L2,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(&res.ids_of(0)[..2], &[3, 7]);
    assert_eq!(res.distances_of(0)[..2], [0.0, 0.0]);
    assert_clean(&ctx);
}

#[test]
fn bad_input_is_refused() {
    let ctx = ctx();
    let t = random_table(20, 6, 1);
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let q = random_table(2, 6, 2);
    let e = knn(
        &dt,
        &q,
        &KnnOptions {
            k: 0,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("k ≥ 1"), "{e}");
    let e = knn(&dt, &random_table(2, 5, 2), &KnnOptions::default()).unwrap_err();
    assert!(e.to_string().contains("dimension 5"), "{e}");
    let mut bad = q.data().to_vec();
    bad[7] = f32::NAN;
    let e = knn_flat(&dt, &bad, 6, &KnnOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("query 1 has a non-finite value"),
        "{e}"
    );
    let e = knn_flat(&dt, &bad[..5], 6, &KnnOptions::default()).unwrap_err();
    assert!(e.to_string().contains("whole number"), "{e}");
    let empty = knn_flat(&dt, &[], 6, &KnnOptions::default()).unwrap();
    assert_eq!(empty.queries, 0);
    assert!(empty.ids.is_empty());
    assert!("hamming".parse::<Metric>().is_err());
    assert_clean(&ctx);
}

#[test]
fn same_bits_on_every_path_tile_and_reduction() {
    // Keys are computed identically everywhere and (key, id) is a total order: the selection
    // and the full ranking, any tiles, shuffles or shared memory return the same bits.
    let ctx = ctx();
    let table = random_table(777, 24, 31);
    let queries = random_table(9, 24, 32);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
        let base = KnnOptions {
            k: 100,
            metric,
            ..Default::default()
        };
        let want = knn(&dt, &queries, &base).unwrap();
        let mut variants = vec![
            KnnOptions {
                full_ranking: true,
                ..base.clone()
            },
            KnnOptions {
                table_tile: Some(333),
                query_tile: Some(2),
                ..base.clone()
            },
        ];
        for sg in subgroup_settings(&ctx) {
            variants.push(KnnOptions {
                subgroups: sg,
                table_tile: Some(256),
                ..base.clone()
            });
        }
        for o in variants {
            let got = knn(&dt, &queries, &o).unwrap();
            assert_eq!(got.ids, want.ids, "{o:?}");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.distances), bits(&want.distances), "{o:?}");
        }
    }
    assert_clean(&ctx);
}

#[test]
#[ignore = "timing on the current device; run with --ignored --nocapture"]
fn timing_report() {
    let ctx = ctx();
    let table = random_table(20_000, 128, 1);
    let queries = random_table(100, 128, 2);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    for (k, full, fused) in [
        (10, false, false),
        (10, false, true),
        (100, false, false),
        (100, false, true),
        (1000, false, false),
        (100, true, false),
        (20_000, false, false),
    ] {
        let opts = KnnOptions {
            k,
            metric: Metric::InnerProduct,
            full_ranking: full,
            fused_distances: Some(fused),
            ..Default::default()
        };
        let t = std::time::Instant::now();
        let r = knn(&dt, &queries, &opts).unwrap();
        eprintln!(
            "N 20000 × 128, 100 queries, k {k}{}: {:?}, {:.1} ms wall, {:.1} ms GPU",
            if fused { " (fused distances)" } else { "" },
            r.path,
            t.elapsed().as_secs_f64() * 1e3,
            r.gpu_ns as f64 / 1e6
        );
    }
}

fn warp_available(ctx: &Context) -> bool {
    let sg = ctx.caps().subgroup_size as usize;
    ctx.caps().subgroup_arithmetic && sg.is_power_of_two()
}

/// Same ids and distance bits as the shared-memory selection path.
fn same_as_select(dt: &DeviceTable, queries: &Table, base: &KnnOptions, tiles: &[Option<usize>]) {
    let want = knn(
        dt,
        queries,
        &KnnOptions {
            warp_select: Some(false),
            ..base.clone()
        },
    )
    .unwrap();
    assert!(matches!(want.path, KnnPath::Select { .. }));
    let ctx = dt.context();
    if base.k.min(dt.n()) > max_warp_k(ctx) {
        // Above the buckets: refused when required, the selection path on auto.
        let o = KnnOptions {
            warp_select: Some(true),
            ..base.clone()
        };
        assert!(knn(dt, queries, &o).is_err(), "{o:?}");
        let auto = knn(dt, queries, base).unwrap();
        assert!(matches!(auto.path, KnnPath::Select { .. }));
        assert_eq!(auto.ids, want.ids);
        assert_eq!(bits(&auto.distances), bits(&want.distances));
        return;
    }
    // Keys from the blocked product's tiles (the default) and computed inside the selection.
    for (&tt, fused) in tiles.iter().flat_map(|t| [(t, false), (t, true)]) {
        let o = KnnOptions {
            warp_select: Some(true),
            table_tile: tt,
            fused_distances: Some(fused),
            ..base.clone()
        };
        let got = knn(dt, queries, &o).unwrap_or_else(|e| panic!("{o:?}: {e}"));
        assert!(
            matches!(got.path, KnnPath::WarpSelect { .. }),
            "{:?}",
            got.path
        );
        assert!(got.subgroups);
        let gb = bits(&got.distances);
        let wb = bits(&want.distances);
        if let Some(i) = (0..want.ids.len()).find(|&i| got.ids[i] != want.ids[i] || gb[i] != wb[i])
        {
            panic!(
                "{o:?} {:?}: entry {i} (query {}, rank {}): id {} distance {} vs selection id {} distance {}",
                got.path,
                i / o.k,
                i % o.k,
                got.ids[i],
                got.distances[i],
                want.ids[i],
                want.distances[i]
            );
        }
    }
}

#[test]
fn warp_select_same_bits_as_selection() {
    let ctx = ctx();
    if !warp_available(&ctx) {
        eprintln!("no subgroup operations: WarpSelect not run");
        return;
    }
    let sg = ctx.caps().subgroup_size as usize;
    eprintln!(
        "WarpSelect at subgroup size {sg}: buckets {:?}",
        [1, 32, 100, 1000, 2048].map(|k| warp_bucket(k, sg))
    );
    let table = random_table(1237, 17, 41);
    let queries = random_table(13, 17, 42);
    let precisions = if ctx.caps().fp16_storage {
        vec![Precision::Fp32, Precision::Fp16]
    } else {
        vec![Precision::Fp32]
    };
    for p in precisions {
        let dt = DeviceTable::upload(&ctx, &table, p).unwrap();
        for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
            for k in [1, 31, 32, 33, 64, 100, 255, 256, 1000, 1024] {
                let base = KnnOptions {
                    k,
                    metric,
                    query_tile: Some(5),
                    ..Default::default()
                };
                same_as_select(&dt, &queries, &base, &[None, Some(301)]);
            }
        }
    }
    assert_clean(&ctx);
}

#[test]
fn warp_select_against_oracle_ties_and_padding() {
    let ctx = ctx();
    if !warp_available(&ctx) {
        return;
    }
    // Every row duplicated three times (ids i, i + 200, i + 400) plus a tail: exact ties
    // everywhere, which must come out lowest id first.
    let base_rows = random_table(200, 11, 51);
    let mut data = Vec::new();
    for _ in 0..3 {
        data.extend_from_slice(base_rows.data());
    }
    data.extend_from_slice(random_table(23, 11, 52).data());
    let table = Table::new(data, 623, 11).unwrap();
    let mut qd = random_table(6, 11, 53).data().to_vec();
    qd.extend_from_slice(&base_rows.data()[..22]); // two queries equal to rows 0 and 1
    let queries = Table::new(qd, 8, 11).unwrap();
    for p in [Precision::Fp32, Precision::Fp16] {
        if p == Precision::Fp16 && !ctx.caps().fp16_storage {
            continue;
        }
        let dt = DeviceTable::upload(&ctx, &table, p).unwrap();
        for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
            let mk = max_warp_k(&ctx);
            for k in [1, 3, 33, mk - 1, mk] {
                let opts = KnnOptions {
                    k,
                    metric,
                    warp_select: Some(true),
                    table_tile: Some(100),
                    ..Default::default()
                };
                let res = knn(&dt, &queries, &opts).unwrap();
                check(&table.as_stored(p), &queries, &opts, &res);
                if metric == Metric::L2 && k >= 3 {
                    assert_eq!(&res.ids_of(6)[..3], &[0, 200, 400]);
                    assert_eq!(&res.ids_of(7)[..3], &[1, 201, 401]);
                }
                same_as_select(&dt, &queries, &opts, &[Some(100), None]);
            }
            // k > N: padding after the N rows.
            let mk = max_warp_k(&ctx);
            let small = random_table(mk - 7, 11, 54);
            let sdt = DeviceTable::upload(&ctx, &small, p).unwrap();
            for k in [mk - 6, mk] {
                let opts = KnnOptions {
                    k,
                    metric,
                    warp_select: Some(true),
                    table_tile: Some(50),
                    ..Default::default()
                };
                let res = knn(&sdt, &queries, &opts).unwrap();
                assert!(matches!(res.path, KnnPath::WarpSelect { .. }));
                check(&small.as_stored(p), &queries, &opts, &res);
            }
        }
    }
    // Auto picks WarpSelect within the buckets, the selection path above them.
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let auto = |k| {
        knn(
            &dt,
            &queries,
            &KnnOptions {
                k,
                ..Default::default()
            },
        )
        .unwrap()
        .path
    };
    // Keys from the blocked product's tiles on every device (fused keys only on request).
    assert!(
        matches!(auto(10), KnnPath::WarpSelect { fused: false, .. }),
        "{:?}",
        auto(10)
    );
    let off = knn(
        &dt,
        &queries,
        &KnnOptions {
            k: 10,
            subgroups: Some(false),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(matches!(off.path, KnnPath::Select { .. }));
    assert_clean(&ctx);
}

#[test]
fn warp_select_largest_bucket() {
    let ctx = ctx();
    if !warp_available(&ctx) {
        return;
    }
    let table = random_table(2500, 7, 61);
    let queries = random_table(3, 7, 62);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let mk = max_warp_k(&ctx);
    eprintln!("largest WarpSelect k: {mk}");
    for k in [mk / 2 + 1, mk - 1, mk] {
        let base = KnnOptions {
            k,
            metric: Metric::L2,
            ..Default::default()
        };
        same_as_select(&dt, &queries, &base, &[None, Some(999)]);
    }
    let too_big = knn(
        &dt,
        &queries,
        &KnnOptions {
            k: mk + 1,
            warp_select: Some(true),
            ..Default::default()
        },
    );
    assert!(too_big.is_err());
    assert_clean(&ctx);
}

/// The rows `rows` of `table` as a query table.
fn rows_of(table: &Table, rows: &[usize]) -> Table {
    let d = table.d();
    let data = rows.iter().flat_map(|&r| table.row(r).to_vec()).collect();
    Table::new(data, rows.len(), d).unwrap()
}

/// Every selection path — WarpSelect over the product's tiles and with fused keys, the
/// selection passes with and without subgroup shuffles, the full ranking — against the float64
/// oracle, fp32 and fp16, random and real data, at sizes across every boundary the code has
/// (the 1,024-row chunk and bucket multiples, the ~1,360 rows where lavapipe's loop cap cut the
/// fused WarpSelect short, table tiles of 2¹², a random size). The subgroup size is the device's
/// (CI runs this file at lavapipe's 8 and again at 4). Queries are table rows (the rankings
/// workload: the row itself is among its neighbours) spread over the table, first and last
/// included.
#[test]
fn every_path_against_the_oracle_across_size_boundaries() {
    let ctx = ctx();
    let seed: u64 = std::env::var("DIVERSITY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let random_n = 1100 + (seed % 3900) as usize;
    eprintln!("random size {random_n} (rerun with DIVERSITY_TEST_SEED={seed})");
    let mut paths: Vec<(&str, KnnOptions)> = vec![
        (
            "selection, shared memory",
            KnnOptions {
                warp_select: Some(false),
                subgroups: Some(false),
                ..Default::default()
            },
        ),
        (
            "full ranking",
            KnnOptions {
                full_ranking: true,
                ..Default::default()
            },
        ),
    ];
    if ctx.caps().subgroup_arithmetic {
        paths.push((
            "selection, subgroups",
            KnnOptions {
                warp_select: Some(false),
                subgroups: Some(true),
                ..Default::default()
            },
        ));
    }
    if warp_available(&ctx) {
        for (name, fused) in [("WarpSelect, tiles", false), ("WarpSelect, fused", true)] {
            paths.push((
                name,
                KnnOptions {
                    warp_select: Some(true),
                    fused_distances: Some(fused),
                    ..Default::default()
                },
            ));
        }
    }
    for n in [1023, 1024, 1025, 1400, 2049, 4097, random_n] {
        let rows: Vec<usize> = (0..24).map(|i| i * (n - 1) / 23).collect();
        for (data, table) in [
            ("random", random_table(n, 384, n as u64)),
            ("fortunes", fortunes(n)),
        ] {
            let queries = rows_of(&table, &rows);
            for p in [Precision::Fp32, Precision::Fp16] {
                let dt = DeviceTable::upload(&ctx, &table, p).unwrap();
                let stored = table.as_stored(p);
                for (name, base) in &paths {
                    for k in [11, 33] {
                        let opts = KnnOptions { k, ..base.clone() };
                        let res = knn(&dt, &queries, &opts)
                            .unwrap_or_else(|e| panic!("{data} N = {n} {p:?} {name} k {k}: {e}"));
                        eprintln!("{data} N = {n} {p:?} {name} k {k}: {:?}", res.path);
                        check(&stored, &queries, &opts, &res);
                    }
                }
            }
        }
    }
    assert_clean(&ctx);
}

/// A long thin table (300,000 rows: past WarpSelect's 2¹⁸-row tile, and at subgroup size 4
/// past lavapipe's loop cap within one tile unless the planner bounds it) with the true
/// neighbours planted where a cut-short loop would stop: each query is a copy of a row near
/// the end of the first tile or of the table.
#[test]
fn long_table_neighbours_at_the_loop_cap() {
    let ctx = ctx();
    let n = 300_000;
    let table = random_table(n, 3, 99);
    let queries = rows_of(&table, &[262_143, 262_139, 131_071, n - 1, 0]);
    for p in [Precision::Fp32, Precision::Fp16] {
        let dt = DeviceTable::upload(&ctx, &table, p).unwrap();
        for metric in [Metric::L2, Metric::Cosine] {
            let opts = KnnOptions {
                k: 11,
                metric,
                ..Default::default()
            };
            let res = knn(&dt, &queries, &opts).unwrap();
            check(&table.as_stored(p), &queries, &opts, &res);
        }
    }
    assert_clean(&ctx);
}

/// `KnnOptions::verify` checks real results and refuses wrong ones: a neighbour swapped for a
/// far row, a true neighbour left out (the 12th best in place of the 11th), a repeated id —
/// each named by query and rank.
#[test]
fn verify_accepts_right_and_refuses_wrong_neighbours() {
    use diversity::knn_verify::{verify_result, verify_sample};
    use diversity::Error;
    let ctx = ctx();
    let table = fortunes(300);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp16).unwrap();
    let queries = rows_of(&table, &[0, 150, 299]);
    let opts = KnnOptions {
        k: 11,
        verify: 3,
        ..Default::default()
    };
    let res = knn(&dt, &queries, &opts).unwrap();
    assert_eq!(res.verified, 3);
    assert_eq!(verify_sample(3, 3), vec![0, 1, 2]);
    assert_eq!(verify_sample(1000, 3), vec![0, 499, 999]);
    assert_eq!(verify_sample(0, 3), Vec::<usize>::new());
    let stored = table.as_stored(Precision::Fp16);
    let m = Metric::Cosine;
    verify_result(&stored, queries.data(), m, &res, &[0, 1, 2]).unwrap();
    let far = knn(
        &dt,
        &queries,
        &KnnOptions {
            k: 300,
            ..Default::default()
        },
    )
    .unwrap();
    let (k, q) = (11, 1);
    let mut swapped = res.clone();
    swapped.ids[q * k + 3] = far.ids_of(q)[299];
    let mut short = res.clone();
    short.ids[q * k + 10] = far.ids_of(q)[11];
    short.distances[q * k + 10] = far.distances_of(q)[11];
    let mut repeated = res.clone();
    repeated.ids[q * k + 4] = repeated.ids[q * k + 3];
    repeated.distances[q * k + 4] = repeated.distances[q * k + 3];
    for (name, bad, rank) in [
        ("swapped", swapped, 3),
        ("short", short, 10),
        ("repeated", repeated, 4),
    ] {
        match verify_result(&stored, queries.data(), m, &bad, &[0, 1, 2]) {
            Err(Error::Verification(msg)) => {
                assert!(
                    msg.contains(&format!("query {q}, rank {rank}")),
                    "{name}: {msg}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert_clean(&ctx);
}

/// One context used from several threads at once: each thread's searches record and submit
/// their own command buffers (Vulkan asks a command pool to be used by one thread at a time, so
/// each command buffer has a pool of its own), and the validation layers' thread checks stay
/// quiet; every thread's results equal a search run alone.
#[test]
fn one_context_searched_from_several_threads_at_once() {
    let ctx = ctx();
    let table = random_table(3_000, 48, 5);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let queries: Vec<f32> = table.data()[..48 * 40].to_vec();
    let opts = KnnOptions {
        k: 7,
        ..KnnOptions::default()
    };
    let alone = knn_flat(&dt, &queries, 48, &opts).unwrap();
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..6)
                        .map(|_| knn_flat(&dt, &queries, 48, &opts).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for r in runs {
            for got in r.join().unwrap() {
                assert_eq!(got.ids, alone.ids);
                assert_eq!(bits(&got.distances), bits(&alone.distances));
            }
        }
    });
    assert_clean(&ctx);
}
