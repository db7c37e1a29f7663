//! k-means and the IVF-Flat index on a real Vulkan device (lavapipe in CI), validation layers
//! on: a Lloyd step against a float64 brute-force step, the objective never rising, the same
//! bits for the same seed, empty clusters split, subsampling; IVF-Flat with nprobe = nlist
//! bit for bit the exact search (ties across lists included, all metrics, both precisions),
//! each query with nprobe < nlist getting the exact search of exactly its probed lists, recall
//! growing with nprobe; index files round-tripping byte for byte; every bad input and
//! corrupt file refused with its message and no file written or clobbered (mutated files are
//! `tests/fuzz.rs`'s).

mod common;
use common::{
    assert_clean, assert_same, bits, ctx, fnv, format_message, fortunes, precisions, random_table,
    TempDir,
};
use diversity::ivf::{assign, kmeans, IvfFlat, IvfOptions, IvfSearch, IvfShards, KMeansOptions};
use diversity::knn::knn_flat;
use diversity::{DeviceTable, KnnOptions, Metric, Precision, Table};

fn d2(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum()
}

fn rows(t: &Table, r: &[usize]) -> Vec<f32> {
    r.iter().flat_map(|&i| t.row(i).iter().copied()).collect()
}

/// Small-integer rows: many exact distance ties, within and across lists.
fn integer_table(n: usize, d: usize, seed: u64) -> Table {
    let r = random_table(n, d, seed);
    let data = r.data().iter().map(|v| (v * 2.5).round()).collect();
    Table::new(data, n, d).unwrap()
}

fn opts(nlist: usize, metric: Metric, precision: Precision) -> IvfOptions {
    IvfOptions {
        nlist,
        metric,
        precision,
        kmeans: KMeansOptions {
            iters: 6,
            ..KMeansOptions::default()
        },
    }
}

#[test]
fn one_lloyd_step_is_the_float64_step() {
    let ctx = ctx();
    // lavapipe has shaderFloat64: the cluster sums below are the device's.
    eprintln!("cluster sums on the device: {}", ctx.caps().float64);
    let (n, d, k) = (1500, 24, 20);
    let t = random_table(n, d, 11);
    let init = rows(&t, &(0..k).map(|i| i * 7).collect::<Vec<_>>());
    let o = KMeansOptions {
        iters: 1,
        init: Some(init.clone()),
        ..KMeansOptions::default()
    };
    let km = kmeans(&ctx, &t, k, &o).unwrap();
    assert_eq!((km.trained_on, km.splits, km.objective.len()), (n, 0, 1));
    // The device's assignment (the same one kmeans made: same centroids, same device).
    let c0 = Table::new(init.clone(), k, d).unwrap();
    let (ids, dist, _) = assign(&ctx, &c0, t.data(), d).unwrap();
    let mut best_sum = 0.0;
    let mut sums = vec![0f64; k * d];
    let mut counts = vec![0usize; k];
    for i in 0..n {
        let all: Vec<f64> = (0..k).map(|c| d2(t.row(i), c0.row(c))).collect();
        let best = all.iter().cloned().fold(f64::INFINITY, f64::min);
        let got = all[ids[i] as usize];
        let tol = 1e-5 * (best + 1.0);
        assert!(
            got <= best + tol,
            "row {i}: centroid {} at {got}, best {best}",
            ids[i]
        );
        assert!(
            (dist[i] as f64 - got).abs() <= tol,
            "row {i}: distance {}",
            dist[i]
        );
        best_sum += best;
        counts[ids[i] as usize] += 1;
        for j in 0..d {
            sums[ids[i] as usize * d + j] += t.row(i)[j] as f64;
        }
    }
    let rel = (km.objective[0] - best_sum).abs() / best_sum;
    assert!(
        rel < 1e-5,
        "objective {} vs float64 {best_sum}",
        km.objective[0]
    );
    // Every centroid is the float64 mean of its rows, rounded once.
    for c in 0..k {
        assert!(counts[c] > 0, "cluster {c} empty");
        for j in 0..d {
            let want = (sums[c * d + j] / counts[c] as f64) as f32;
            assert_eq!(km.centroids[c * d + j], want, "centroid {c} column {j}");
        }
    }
    assert_clean(&ctx);
}

/// A cluster larger than one invocation's loop budget (lavapipe) is summed over several
/// dispatches, each continuing the float64 sums of the one before: still the float64 mean.
#[test]
fn a_large_cluster_is_the_float64_mean() {
    let ctx = ctx();
    let (n, d) = (120_000, 3);
    let t = random_table(n, d, 3);
    let o = KMeansOptions {
        iters: 1,
        max_points_per_centroid: 0,
        ..KMeansOptions::default()
    };
    let km = kmeans(&ctx, &t, 1, &o).unwrap();
    for j in 0..d {
        let s: f64 = (0..n).map(|i| t.row(i)[j] as f64).sum();
        assert_eq!(km.centroids[j], (s / n as f64) as f32, "column {j}");
    }
    assert_clean(&ctx);
}

#[test]
fn objective_never_rises_and_the_seed_fixes_the_bits() {
    let ctx = ctx();
    let t = fortunes(600);
    let o = KMeansOptions {
        iters: 8,
        seed: 5,
        ..KMeansOptions::default()
    };
    let a = kmeans(&ctx, &t, 12, &o).unwrap();
    assert_eq!(a.objective.len(), 8);
    for w in a.objective.windows(2) {
        assert!(
            w[1] <= w[0] * (1.0 + 1e-6),
            "objective rose: {:?}",
            a.objective
        );
    }
    assert!(a.objective[7] < a.objective[0] * 0.99, "{:?}", a.objective);
    let b = kmeans(&ctx, &t, 12, &o).unwrap();
    assert_eq!(bits(&a.centroids), bits(&b.centroids));
    assert_eq!(a.objective, b.objective);
    let c = kmeans(
        &ctx,
        &t,
        12,
        &KMeansOptions {
            seed: 6,
            iters: 0,
            ..o.clone()
        },
    )
    .unwrap();
    let a0 = kmeans(
        &ctx,
        &t,
        12,
        &KMeansOptions {
            iters: 0,
            ..o.clone()
        },
    )
    .unwrap();
    assert!(a0.objective.is_empty());
    assert_ne!(
        bits(&a0.centroids),
        bits(&c.centroids),
        "another seed, another init"
    );
    // Subsampling: at most k × max_points_per_centroid rows.
    let s = kmeans(
        &ctx,
        &t,
        12,
        &KMeansOptions {
            max_points_per_centroid: 40,
            iters: 1,
            ..o
        },
    )
    .unwrap();
    assert_eq!(s.trained_on, 480);
    assert_clean(&ctx);
}

/// The coarse quantizer trains with its iterations recorded two submissions each (the k-means of
/// `kmeans_subspaces`' lockstep), and is `kmeans` of the rows bit for bit — centroids,
/// objective, splits, rows trained on — with the seeded init, with a given init, and with a
/// subsample.
#[test]
fn the_coarse_quantizer_is_kmeans_bit_for_bit() {
    let ctx = ctx();
    let (n, d, nlist) = (900, 12, 24);
    let t = random_table(n, d, 77);
    let given: Vec<f32> = t.data()[..nlist * d].iter().map(|v| v * 0.5).collect();
    for (cap, init) in [(256, None), (256, Some(given)), (20, None)] {
        let o = KMeansOptions {
            iters: 6,
            max_points_per_centroid: cap,
            init,
            ..KMeansOptions::default()
        };
        let mut ix = IvfFlat::new(
            &ctx,
            d,
            &IvfOptions {
                kmeans: o.clone(),
                ..opts(nlist, Metric::L2, Precision::Fp32)
            },
        )
        .unwrap();
        let before = ctx.host_ops().submissions;
        let got = ix.train(&t).unwrap();
        let used = ctx.host_ops().submissions - before;
        // One upload of the rows, the centroids' (a few), then two an iteration; `kmeans`
        // takes about eight an iteration.
        assert!(used <= (2 * o.iters + 8) as u64, "{used} submissions");
        let want = kmeans(&ctx, &t, nlist, &o).unwrap();
        assert_eq!(bits(&got.centroids), bits(&want.centroids), "cap {cap}");
        assert_eq!(bits(ix.centroids()), bits(&want.centroids));
        assert_eq!(got.objective, want.objective);
        assert_eq!((got.splits, got.trained_on), (want.splits, want.trained_on));
        assert_eq!(got.trained_on, if cap == 20 { 480 } else { n });
    }
    assert_clean(&ctx);
}

#[test]
fn an_empty_cluster_splits_the_largest() {
    let ctx = ctx();
    let t = random_table(400, 8, 3);
    // Centroid 1 duplicates centroid 0: ties go to the lowest index, so 1 starts empty.
    let mut init = rows(&t, &[0, 0, 1, 2, 3]);
    init.extend(rows(&t, &[4]));
    let o = KMeansOptions {
        iters: 1,
        init: Some(init),
        ..KMeansOptions::default()
    };
    let km = kmeans(&ctx, &t, 6, &o).unwrap();
    assert!(km.splits >= 1);
    let c: Vec<&[f32]> = km.centroids.chunks(8).collect();
    for a in 0..6 {
        for b in 0..a {
            assert_ne!(c[a], c[b], "centroids {a} and {b} equal");
        }
    }
    // After one more iteration every cluster has rows.
    let o2 = KMeansOptions {
        iters: 1,
        init: Some(km.centroids.clone()),
        ..KMeansOptions::default()
    };
    let c1 = Table::new(km.centroids, 6, 8).unwrap();
    let (ids, _, _) = assign(&ctx, &c1, t.data(), 8).unwrap();
    assert!(
        (0..6u32).all(|c| ids.contains(&c)),
        "a cluster is still empty"
    );
    kmeans(&ctx, &t, 6, &o2).unwrap();
    assert_clean(&ctx);
}

#[test]
fn ivf_flat_with_every_list_probed_is_the_exact_search() {
    let ctx = ctx();
    let ints = integer_table(1200, 8, 21);
    let real = fortunes(500);
    for (name, t) in [("integer", &ints), ("fortunes", &real)] {
        let q = Table::new(
            rows(t, &(0..40).map(|i| i * 12).collect::<Vec<_>>()),
            40,
            t.d(),
        )
        .unwrap();
        for p in precisions(&ctx) {
            for m in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
                let mut ix = IvfFlat::new(&ctx, t.d(), &opts(12, m, p)).unwrap();
                ix.train(t).unwrap();
                // Added in two parts: ids continue.
                let cut = t.n() * 7 / 12;
                assert_eq!(ix.add(&t.head(cut).unwrap()).unwrap(), 0);
                let rest =
                    Table::new(t.data()[cut * t.d()..].to_vec(), t.n() - cut, t.d()).unwrap();
                assert_eq!(ix.add(&rest).unwrap(), cut);
                assert_eq!(ix.ntotal(), t.n());
                assert_eq!(ix.list_sizes().iter().sum::<usize>(), t.n());
                let dt = DeviceTable::upload(&ctx, t, p).unwrap();
                for k in [1, 17, 100] {
                    let ko = KnnOptions {
                        k,
                        metric: m,
                        ..KnnOptions::default()
                    };
                    let want = knn_flat(&dt, q.data(), q.d(), &ko).unwrap();
                    let (got, rep) = ix
                        .search(q.data(), q.d(), &IvfSearch::new(12, ko.clone()))
                        .unwrap();
                    let what = format!("{name} {p:?} {m:?} k={k}");
                    assert_same(&got, &want, &what);
                    assert_eq!(rep.rows_scanned, (t.n() * 40) as u64, "{what}");
                    // k ≤ 64: the one-dispatch list scan (its probes read on the device);
                    // past it, per-list k-NN and a merge.
                    assert_eq!(rep.list_scan, k <= 64, "{what}");
                    assert_eq!(rep.probes_on_device, k <= 64, "{what}");
                    if k == 1 {
                        // nprobe past nlist is clamped.
                        let (again, _) = ix
                            .search(q.data(), q.d(), &IvfSearch::new(99, ko.clone()))
                            .unwrap();
                        assert_same(&again, &want, &what);
                    }
                }
            }
        }
        // The integer table has ties: some query's k best include equal distances.
        if name == "integer" {
            let dt = DeviceTable::upload(&ctx, t, Precision::Fp32).unwrap();
            let ko = KnnOptions {
                k: 10,
                metric: Metric::L2,
                ..KnnOptions::default()
            };
            let r = knn_flat(&dt, q.data(), q.d(), &ko).unwrap();
            assert!(
                r.distances.windows(2).any(|w| w[0] == w[1]),
                "no ties tested"
            );
        }
    }
    assert_clean(&ctx);
}

/// Where a device caps an invocation's loop iterations (lavapipe), the list scan is cut into
/// dispatches over probe ranks and over rows of long lists, each starting from the k best of the
/// one before: still the exact search of the probed rows, bit for bit.
#[test]
fn a_scan_cut_into_dispatches_is_still_exact() {
    let ctx = ctx();
    if ctx.caps().loop_limit.is_none() {
        eprintln!("no loop cap on this device: nothing to cut");
        return;
    }
    // D = 1,024: about 45 rows of 128 invocations a dispatch.
    let d = 1024;
    let t = random_table(6000, d, 5);
    let q = Table::new(rows(&t, &[0, 999, 2500, 5999]), 4, d).unwrap();
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let ko = KnnOptions {
        k: 20,
        metric: Metric::L2,
        ..KnnOptions::default()
    };
    let want = knn_flat(&dt, q.data(), d, &ko).unwrap();
    // 40 short lists (probe ranks split over dispatches), then one long list (its rows
    // split).
    for nlist in [40, 1] {
        let mut o = opts(nlist, Metric::L2, Precision::Fp32);
        o.kmeans.iters = 2;
        let mut ix = IvfFlat::new(&ctx, d, &o).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        let (got, rep) = ix
            .search(q.data(), d, &IvfSearch::new(nlist, ko.clone()))
            .unwrap();
        assert!(rep.list_scan);
        assert!(rep.scan_dispatches > 1, "nlist {nlist}: one dispatch");
        assert_same(&got, &want, &format!("nlist {nlist}"));
    }
    assert_clean(&ctx);
}

/// The block select keeps only a few pairs an invocation (8; src/ivf/scan.rs `QUEUE`) and
/// offers the candidates again when one invocation held more of the k best: here every one of
/// the k best falls to one invocation (one list, rows in id order; invocation i of the 128 takes
/// the rows i, i + 128, …, and the near rows are the ids 0, 128, 256, …), with many equal keys.
/// Both the subgroup merge and the shared-memory tree (`DIVERSITY_DISABLE=subgroups`, in a child
/// process of this test binary), against a float64 brute force on the host.
#[test]
fn the_k_best_all_in_one_invocation_are_still_exact() {
    const NAME: &str = "the_k_best_all_in_one_invocation_are_still_exact";
    // The shared-memory tree in a child process, then the default merge here.
    common::rerun_with_env(NAME, "DIVERSITY_DISABLE", "subgroups");
    let ctx = ctx();
    let (n, d) = (128 * 48, 8);
    // Near rows (ids ≡ 0 mod 128): x0 in 60..=64, five keys shared by 48 rows; the others far.
    let mut data = vec![0f32; n * d];
    for (i, row) in data.chunks_exact_mut(d).enumerate() {
        if i % 128 == 0 {
            row[0] = (60 + (i / 128 * 7) % 5) as f32;
        } else {
            row[0] = (i % 3) as f32;
            row[1] = (i % 5) as f32;
        }
    }
    let t = Table::new(data, n, d).unwrap();
    let mut q = vec![0f32; 2 * d];
    q[0] = 62.0; // L2: keys 0, 1, 4 near
    q[d] = 1.0; // inner product: keys −64 … −60 near
    let queries = Table::new(q, 2, d).unwrap();
    for metric in [Metric::L2, Metric::InnerProduct] {
        let mut ix = IvfFlat::new(&ctx, d, &opts(1, metric, Precision::Fp32)).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        for k in [40, 64] {
            let ko = KnnOptions {
                k,
                metric,
                ..KnnOptions::default()
            };
            let (got, rep) = ix
                .search(queries.data(), d, &IvfSearch::new(1, ko))
                .unwrap();
            assert!(rep.list_scan);
            for (qi, qr) in queries.data().chunks_exact(d).enumerate() {
                // Integer rows: every key exact in fp32 and float64 alike.
                let mut want: Vec<(f64, i64)> = (0..n)
                    .map(|i| {
                        let r = t.row(i);
                        let key = match metric {
                            Metric::L2 => d2(qr, r),
                            _ => -r
                                .iter()
                                .zip(qr)
                                .map(|(&a, &b)| a as f64 * b as f64)
                                .sum::<f64>(),
                        };
                        (key, i as i64)
                    })
                    .collect();
                want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let what = format!("{metric:?} k {k} query {qi}");
                let at = qi * k..(qi + 1) * k;
                let ids: Vec<i64> = want[..k].iter().map(|w| w.1).collect();
                assert_eq!(got.ids[at.clone()], ids[..], "{what}: ids");
                let keys: Vec<f32> = want[..k]
                    .iter()
                    .map(|w| match metric {
                        Metric::L2 => w.0 as f32,
                        _ => -w.0 as f32,
                    })
                    .collect();
                assert_eq!(bits(&got.distances[at]), bits(&keys), "{what}: keys");
            }
        }
    }
    assert_clean(&ctx);
}

/// More queries than one tile of the coarse k-NN (65,535): the probes come back through the
/// host, and the search is still the exact one with every list probed.
#[test]
fn more_queries_than_a_coarse_tile() {
    let ctx = ctx();
    let t = integer_table(600, 4, 8);
    let nq = 66_000;
    let q = random_table(nq, 4, 9);
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let ko = KnnOptions {
        k: 5,
        metric: Metric::L2,
        ..KnnOptions::default()
    };
    let want = knn_flat(&dt, q.data(), 4, &ko).unwrap();
    let mut ix = IvfFlat::new(&ctx, 4, &opts(4, Metric::L2, Precision::Fp32)).unwrap();
    ix.train(&t).unwrap();
    ix.add(&t).unwrap();
    let (got, rep) = ix
        .search(q.data(), 4, &IvfSearch::new(4, ko.clone()))
        .unwrap();
    assert!(rep.list_scan && !rep.probes_on_device);
    assert_eq!(rep.rows_scanned, (600 * nq) as u64);
    assert_same(&got, &want, "66,000 queries");
    assert_clean(&ctx);
}

#[test]
fn recall_grows_with_nprobe_to_the_exact_search() {
    let ctx = ctx();
    let t = fortunes(1200);
    let q = Table::new(
        rows(&t, &(0..50).map(|i| i * 23 + 3).collect::<Vec<_>>()),
        50,
        384,
    )
    .unwrap();
    let mut ix = IvfFlat::new(&ctx, 384, &opts(24, Metric::Cosine, Precision::Fp32)).unwrap();
    ix.train(&t).unwrap();
    ix.add(&t).unwrap();
    let ko = KnnOptions {
        k: 10,
        ..KnnOptions::default()
    };
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let exact = knn_flat(&dt, q.data(), 384, &ko).unwrap();
    let mut last = 0.0;
    // An nprobe that fills the coarse search's WarpSelect rows (8: a power of two ≥ lavapipe's
    // subgroup size) has its probes read straight from its scratch; the others packed first.
    for nprobe in [1, 4, 8, 24] {
        let (r, rep) = ix
            .search(q.data(), 384, &IvfSearch::new(nprobe, ko.clone()))
            .unwrap();
        assert!(rep.probes_on_device, "nprobe {nprobe}");
        assert!(rep.rows_scanned <= (t.n() * 50) as u64);
        let mut hits = 0;
        for i in 0..50 {
            let e: std::collections::HashSet<i64> = exact.ids_of(i).iter().copied().collect();
            hits += r.ids_of(i).iter().filter(|id| e.contains(id)).count();
            // A query's own row is in the list of its nearest centroid, probed first.
            assert!(
                r.ids_of(i).contains(&((i * 23 + 3) as i64)),
                "nprobe {nprobe} query {i}"
            );
        }
        let recall = hits as f64 / 500.0;
        assert!(recall >= last, "recall fell to {recall} at nprobe {nprobe}");
        last = recall;
    }
    assert_eq!(last, 1.0);
    assert_clean(&ctx);
}

#[test]
fn each_query_gets_the_exact_search_of_its_probed_lists() {
    let ctx = ctx();
    let t = integer_table(900, 8, 8);
    let q = random_table(12, 8, 77);
    for m in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        let mut ix = IvfFlat::new(&ctx, 8, &opts(10, m, Precision::Fp32)).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        let nprobe = 3;
        let ko = KnnOptions {
            k: 15,
            metric: m,
            ..KnnOptions::default()
        };
        let (got, _) = ix
            .search(q.data(), 8, &IvfSearch::new(nprobe, ko.clone()))
            .unwrap();
        // The probed lists: the exact k-NN of the query among the centroids.
        let cent = Table::new(ix.centroids().to_vec(), 10, 8).unwrap();
        let cdt = DeviceTable::upload(&ctx, &cent, Precision::Fp32).unwrap();
        let co = KnnOptions {
            k: nprobe,
            metric: m,
            ..KnnOptions::default()
        };
        let probes = knn_flat(&cdt, q.data(), 8, &co).unwrap();
        for i in 0..q.n() {
            // The rows of its probed lists, in id order, searched exactly.
            let mut ids: Vec<i64> = probes
                .ids_of(i)
                .iter()
                .flat_map(|&l| ix.list_ids(l as usize).to_vec())
                .collect();
            ids.sort_unstable();
            let sub = rows(&t, &ids.iter().map(|&x| x as usize).collect::<Vec<_>>());
            let st = Table::new(sub, ids.len(), 8).unwrap();
            let sdt = DeviceTable::upload(&ctx, &st, Precision::Fp32).unwrap();
            let want = knn_flat(&sdt, q.row(i), 8, &ko).unwrap();
            let want_ids: Vec<i64> = want
                .ids
                .iter()
                .map(|&j| if j < 0 { j } else { ids[j as usize] })
                .collect();
            assert_eq!(got.ids_of(i), &want_ids[..], "{m:?} query {i}");
            assert_eq!(
                bits(got.distances_of(i)),
                bits(&want.distances),
                "{m:?} query {i}"
            );
        }
    }
    assert_clean(&ctx);
}

#[test]
fn index_files_round_trip_byte_for_byte() {
    let ctx = ctx();
    let dir = TempDir::new("ivf");
    let t = integer_table(600, 16, 4);
    for p in precisions(&ctx) {
        let mut ix = IvfFlat::new(&ctx, 16, &opts(8, Metric::L2, p)).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        let path = dir.path("a.ivf");
        ix.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], b"DIVF");
        assert_eq!(
            bytes.len(),
            40 + 8 * 16 * 4 + 8 * 8 + 600 * (8 + 16 * 4) + 8
        );
        let mut back = IvfFlat::load(&ctx, &path).unwrap();
        assert_eq!((back.nlist(), back.ntotal(), back.d()), (8, 600, 16));
        assert_eq!(back.precision(), p);
        assert_eq!(back.list_sizes(), ix.list_sizes());
        let again = dir.path("b.ivf");
        back.save(&again).unwrap();
        assert_eq!(std::fs::read(&again).unwrap(), bytes, "{p:?}");
        let ko = KnnOptions {
            k: 7,
            metric: Metric::L2,
            ..KnnOptions::default()
        };
        let q = t.head(30).unwrap();
        let (a, _) = ix
            .search(q.data(), 16, &IvfSearch::new(3, ko.clone()))
            .unwrap();
        let (b, _) = back
            .search(q.data(), 16, &IvfSearch::new(3, ko.clone()))
            .unwrap();
        assert_same(&b, &a, "loaded index");
        // A loaded index takes more rows.
        back.add(&q).unwrap();
        assert_eq!(back.ntotal(), 630);
    }
    assert_eq!(dir.entries(), vec!["a.ivf", "b.ivf"]);
    assert_clean(&ctx);
}

fn invalid<T: std::fmt::Debug>(r: diversity::Result<T>) -> String {
    match r {
        Err(e @ diversity::Error::Invalid(_)) => e.to_string(),
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn bad_inputs_are_refused_with_their_message() {
    let ctx = ctx();
    let t = random_table(50, 8, 9);
    let e = invalid(kmeans(&ctx, &t, 51, &KMeansOptions::default()));
    assert_eq!(
        e,
        "k-means of 50 rows into k = 51 clusters: k must be between 1 and N = 50"
    );
    assert!(invalid(kmeans(&ctx, &t, 0, &KMeansOptions::default())).contains("k = 0"));
    let bad_init = KMeansOptions {
        init: Some(vec![0.0; 9]),
        ..KMeansOptions::default()
    };
    assert!(invalid(kmeans(&ctx, &t, 2, &bad_init)).contains("init has 9 values, expected k × D"));
    let nan_init = KMeansOptions {
        init: Some(vec![f32::NAN; 16]),
        ..KMeansOptions::default()
    };
    assert!(invalid(kmeans(&ctx, &t, 2, &nan_init)).contains("non-finite"));
    assert!(
        invalid(IvfFlat::new(&ctx, 8, &opts(0, Metric::L2, Precision::Fp32))).contains("nlist")
    );
    assert!(
        invalid(IvfFlat::new(&ctx, 0, &opts(4, Metric::L2, Precision::Fp32))).contains("D = 0")
    );
    let mut ix = IvfFlat::new(&ctx, 8, &opts(60, Metric::L2, Precision::Fp32)).unwrap();
    assert!(invalid(ix.train(&t)).contains("k must be between 1 and N"));
    let mut ix = IvfFlat::new(&ctx, 8, &opts(4, Metric::L2, Precision::Fp32)).unwrap();
    let ko = KnnOptions {
        k: 3,
        metric: Metric::L2,
        ..KnnOptions::default()
    };
    assert_eq!(
        invalid(ix.add(&t)),
        "the IVF index is not trained (train it first)"
    );
    assert!(
        invalid(ix.search(t.data(), 8, &IvfSearch::new(2, ko.clone()))).contains("not trained")
    );
    let dir = TempDir::new("ivf-bad");
    let untouched = dir.file("keep.ivf", b"old bytes");
    assert!(invalid(ix.save(&untouched)).contains("not trained: nothing to save"));
    assert_eq!(std::fs::read(&untouched).unwrap(), b"old bytes");
    let wide = random_table(10, 9, 1);
    assert_eq!(
        invalid(ix.train(&wide)),
        "training rows have dimension 9, the index 8"
    );
    ix.train(&t).unwrap();
    assert!(invalid(ix.train(&t)).contains("already trained"));
    assert_eq!(
        invalid(ix.add(&wide)),
        "added rows have dimension 9, the index 8"
    );
    ix.add(&t).unwrap();
    assert_eq!(
        invalid(ix.search(wide.data(), 9, &IvfSearch::new(2, ko.clone()))),
        "queries have dimension 9, the table 8"
    );
    let zero = IvfSearch::new(0, ko.clone());
    assert!(invalid(ix.search(t.data(), 8, &zero)).contains("nprobe ≥ 1"));
    let cos = KnnOptions {
        metric: Metric::Cosine,
        ..ko.clone()
    };
    assert!(
        invalid(ix.search(t.data(), 8, &IvfSearch::new(2, cos.clone())))
            .contains("not the index's (l2)")
    );
    let ver = KnnOptions {
        verify: 2,
        ..ko.clone()
    };
    assert!(invalid(ix.search(t.data(), 8, &IvfSearch::new(2, ver.clone()))).contains("verify"));
    // A missing directory: an error naming it, nothing written.
    let missing = dir.path("no/such/x.ivf");
    let e = ix.save(&missing).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(dir.entries(), vec!["keep.ivf"]);
    assert_clean(&ctx);
}

#[test]
fn corrupt_and_foreign_files_are_refused() {
    let ctx = ctx();
    let dir = TempDir::new("ivf-corrupt");
    let t = random_table(200, 4, 2);
    let mut ix = IvfFlat::new(&ctx, 4, &opts(4, Metric::InnerProduct, Precision::Fp32)).unwrap();
    ix.train(&t).unwrap();
    ix.add(&t).unwrap();
    let good = ix.to_bytes().unwrap();
    let check = |name: &str, bytes: &[u8], want: &str| {
        let p = dir.file(name, bytes);
        let m = format_message(IvfFlat::load(&ctx, &p), &p);
        assert!(m.contains(want), "{name}: {m}");
        assert_eq!(std::fs::read(&p).unwrap(), bytes, "{name} changed");
    };
    check(
        "foreign.ivf",
        b"\x93NUMPY not an index at all, long enough to pass the header",
        "no DIVF magic",
    );
    check("empty.ivf", b"", "no DIVF magic");
    check("short.ivf", &good[..30], "truncated IVF index");
    check(
        "cut.ivf",
        &good[..good.len() - 9],
        "truncated or not an IVF index",
    );
    let mut flip = good.clone();
    flip[100] ^= 0x10;
    check("flip.ivf", &flip, "checksum mismatch");
    let mut ver = good.clone();
    ver[4] = 2;
    check("version.ivf", &ver, "version 2, this build reads version 1");
    let mut huge = good.clone();
    huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    check("huge.ivf", &huge, "make");
    // A consistent file (checksum recomputed) whose first list's first id is out of range.
    let mut bad_id = good.clone();
    let o = 40 + 4 * 4 * 4 + 4 * 8;
    bad_id[o..o + 8].copy_from_slice(&999u64.to_le_bytes());
    let n = bad_id.len();
    let h = fnv(&bad_id[..n - 8]);
    bad_id[n - 8..].copy_from_slice(&h.to_le_bytes());
    check("id.ivf", &bad_id, "id 999 is out of range");
    let missing = dir.path("missing.ivf");
    assert!(IvfFlat::load(&ctx, &missing)
        .unwrap_err()
        .to_string()
        .contains("missing.ivf"));
    assert_clean(&ctx);
}

/// An IVF-Flat index sharded over two logical devices (lavapipe opened twice) gives what one
/// index holding every row gives, ids and distance bits — with an empty shard too.
#[test]
fn ivf_shards_are_one_index_bit_for_bit() {
    let ctxs = diversity::multi::open_devices("0,0", true).unwrap();
    let t = fortunes(700);
    let q = Table::new(
        rows(&t, &(0..25).map(|i| i * 27).collect::<Vec<_>>()),
        25,
        t.d(),
    )
    .unwrap();
    for m in [Metric::L2, Metric::Cosine] {
        let o = opts(10, m, Precision::Fp32);
        let mut one = IvfFlat::new(&ctxs[0], t.d(), &o).unwrap();
        one.train(&t).unwrap();
        one.add(&t).unwrap();
        for weights in [None, Some(&[1.0, 2.0][..]), Some(&[1.0, 0.0][..])] {
            let (mut sh, _) = IvfShards::build(&ctxs, &t, &o, weights).unwrap();
            for (nprobe, k) in [(3, 7), (10, 12)] {
                let ko = KnnOptions {
                    k,
                    metric: m,
                    ..KnnOptions::default()
                };
                let (want, wrep) = one
                    .search(q.data(), t.d(), &IvfSearch::new(nprobe, ko.clone()))
                    .unwrap();
                let (got, rep, multi) = sh
                    .search(q.data(), t.d(), &IvfSearch::new(nprobe, ko.clone()))
                    .unwrap();
                let what = format!("{m:?} {weights:?} nprobe {nprobe}");
                assert_same(&got, &want, &what);
                assert_eq!(rep.rows_scanned, wrep.rows_scanned, "{what}");
                assert_eq!(multi.ranges.len(), 2, "{what}");
            }
        }
    }
    for c in &ctxs {
        assert_clean(c);
    }
}

/// Adds after the first search grow the lists on the device in place (only the touched blocks,
/// norms, ids and sizes written) while they have room, and rebuild the lists once one outgrows
/// it: either way the search is a fresh index's, bit for bit.
#[test]
fn adds_grow_the_device_lists_in_place() {
    let ctx = ctx();
    let t = fortunes(900);
    let d = t.d();
    let part = |a: usize, b: usize| Table::new(t.data()[a * d..b * d].to_vec(), b - a, d).unwrap();
    let q = Table::new(
        rows(&t, &(0..20).map(|i| i * 44).collect::<Vec<_>>()),
        20,
        d,
    )
    .unwrap();
    for p in precisions(&ctx) {
        for m in [Metric::Cosine, Metric::L2] {
            let o = opts(6, m, p);
            let ko = KnnOptions {
                k: 9,
                metric: m,
                ..KnnOptions::default()
            };
            let mut ix = IvfFlat::new(&ctx, d, &o).unwrap();
            ix.train(&t).unwrap();
            ix.add(&part(0, 500)).unwrap();
            ix.search(q.data(), d, &IvfSearch::new(2, ko.clone()))
                .unwrap();
            assert_eq!(ix.slab_uploads(), (1, 0));
            // 30 more rows: every list has room (a quarter more, at least 32 rows).
            ix.add(&part(500, 530)).unwrap();
            assert_eq!(ix.slab_uploads(), (1, 1), "{p:?} {m:?}");
            let fresh = |n: usize| {
                let mut f = IvfFlat::new(&ctx, d, &o).unwrap();
                f.train(&t).unwrap();
                f.add(&part(0, n)).unwrap();
                f
            };
            for nprobe in [2, 6] {
                let (got, _) = ix
                    .search(q.data(), d, &IvfSearch::new(nprobe, ko.clone()))
                    .unwrap();
                let (want, _) = fresh(530)
                    .search(q.data(), d, &IvfSearch::new(nprobe, ko.clone()))
                    .unwrap();
                assert_same(
                    &got,
                    &want,
                    &format!("{p:?} {m:?} in place, nprobe {nprobe}"),
                );
            }
            // 370 more: some list outgrows its room; the next search builds the lists again.
            ix.add(&part(530, 900)).unwrap();
            let (got, _) = ix
                .search(q.data(), d, &IvfSearch::new(3, ko.clone()))
                .unwrap();
            assert_eq!(ix.slab_uploads(), (2, 1), "{p:?} {m:?}");
            let (want, _) = fresh(900)
                .search(q.data(), d, &IvfSearch::new(3, ko.clone()))
                .unwrap();
            assert_same(&got, &want, &format!("{p:?} {m:?} rebuilt"));
        }
    }
    assert_clean(&ctx);
}

/// One handle keeps its device buffers, the coarse search's scratch and the scan's set from
/// search to search, growing them when a call needs more: searches of 1, 16, 1,000 and again 1
/// query on one handle give what fresh handles give, bit for bit; a repeated call of one size
/// costs one submission and creates no buffer, set or pipeline; and after the growth, nprobe =
/// nlist is still the exact search.
#[test]
fn one_handle_searches_any_query_count_as_fresh_handles_do() {
    let ctx = ctx();
    let t = fortunes(1200);
    let d = t.d();
    // Queries near the rows (each row nudged), 1,000 of them.
    let q: Vec<f32> = (0..1000)
        .flat_map(|i| {
            let r = t.row((i * 7) % t.n());
            r.iter()
                .enumerate()
                .map(move |(j, &v)| v + ((i + j) % 5) as f32 * 1e-3)
        })
        .collect();
    let m = Metric::Cosine;
    let ko = KnnOptions {
        k: 10,
        metric: m,
        ..KnnOptions::default()
    };
    let build = || {
        let mut ix = IvfFlat::new(&ctx, d, &opts(12, m, Precision::Fp32)).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        ix
    };
    let s = IvfSearch::new(4, ko.clone());
    let mut one = build();
    let mut first = None;
    for nq in [1, 16, 1000, 1] {
        let qs = &q[..nq * d];
        let (got, rep) = one.search(qs, d, &s).unwrap();
        let (fresh, _) = build().search(qs, d, &s).unwrap();
        assert_same(&got, &fresh, &format!("{nq} queries on one handle"));
        // Again at this size: nothing made, one submission (where the scan is one).
        let (again, rep2) = one.search(qs, d, &s).unwrap();
        assert_same(&again, &fresh, &format!("{nq} queries again"));
        let o = rep2.host_ops;
        assert_eq!(
            (o.buffers, o.descriptor_sets, o.pipelines),
            (0, 0, 0),
            "{nq}: {o:?}"
        );
        // One query tile of the coarse search holds them all: its probes stay on the device.
        assert!(rep.probes_on_device, "{nq} queries");
        if rep2.scan_dispatches <= 64 {
            assert_eq!(o.submissions, 1, "{nq} queries: {o:?}");
        }
        if nq == 1 {
            match &first {
                None => first = Some(got),
                Some(f) => assert_same(&got, f, "1 query after 1,000"),
            }
        }
    }
    // The scratch grew to 1,000 queries: every list probed is still the exact search.
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let qs = &q[..40 * d];
    let want = knn_flat(&dt, qs, d, &ko).unwrap();
    let (got, _) = one.search(qs, d, &IvfSearch::new(12, ko.clone())).unwrap();
    assert_same(&got, &want, "nprobe = nlist after the growth");
    assert_clean(&ctx);
}
