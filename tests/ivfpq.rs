//! IVF-PQ (IVFADC) on a real Vulkan device (lavapipe in CI), validation layers on: the device
//! encoder against a float64 encoder (equal but for sub-centroids within fp32 rounding of each
//! other, exact ties to the lowest); the list scan's ADC distances against float64 lookup
//! tables within a derived bound, for L2, inner product and cosine; every search the brute force
//! over the float64 ADC distances of exactly the probed lists (same ids but for near-ties
//! within the bound, order by (distance, id)); a search cut into dispatches by lavapipe's loop
//! cap the same; the exact re-rank equal to the float64 exact search once it sees every probed
//! row, and never worse in recall than plain ADC; index files round-tripping byte for byte;
//! every bad input and corrupt file refused with its message, no file written or clobbered
//! (mutated files are `tests/fuzz.rs`'s).
//!
//! The bound. With u = 2⁻²⁴, A_j = |q_j| + |c_j| + |C_j| (c the list's centroid, C the decoded
//! residual) and S = Σ_j A_j², to first order:
//! * inner product: the device's distance is the fp32 sum of Σ_s T[s][code_s], T[s][c] a fused
//!   multiply-add chain over the sub-space's D / M dims of q_j · C_j, plus the coarse search's
//!   fp32 q · c(list); the chains and the sums add at most (D + M + 2)·u of their magnitude, so
//!   |device − float64| ≤ (D + M + 8) · u · S (a slight over-estimate);
//! * L2 (Faiss's precomputed table): the coarse search's ‖q − c‖² (a chain of D squared fp32
//!   differences: ≤ (D + 2)·u·S), then in sub-space order fma(−2, T[s][code_s], P[s][code_s])
//!   with T the chain of q_j · C_j (≤ (D / M)·u·S in all) and P = ‖C‖² + 2 c · C rounded once
//!   from float64 (≤ u·S in all), each fma and each of the 2M roundings of the running sum adding
//!   at most u·S: |device − float64| ≤ (D + D / M + 2M + 8) · u · S.

mod common;
use common::{assert_clean, assert_same, ctx, fnv, format_message, random_table, TempDir};
use diversity::ivf::pq::{reference_adc, reference_codes, reference_table, PQ_KSUB};
use diversity::ivf::{
    kmeans_subspaces, IvfPq, IvfPqOptions, IvfSearch, KMeansOptions, ProductQuantizer,
};
use diversity::knn::knn_flat;
use diversity::{DeviceTable, KnnOptions, KnnResult, Metric, Precision, Table};

const U: f64 = 1.0 / 16_777_216.0;

fn kopts() -> KMeansOptions {
    KMeansOptions {
        iters: 4,
        ..KMeansOptions::default()
    }
}

/// The M sub-spaces train in lockstep (`kmeans_subspaces`): each is the k-means it would be
/// alone, the same bits — centroids, objective, rows trained on, splits — with and without a
/// subsample, with empty clusters split; the product quantizer's centroids are theirs; and the
/// whole training costs two submissions an iteration, not a few per sub-space; the validation
/// layers stay quiet.
#[test]
fn sub_spaces_trained_in_lockstep_are_each_the_kmeans_alone() {
    let ctx = ctx();
    let (n, d, m) = (600, 48, 6);
    // 150 distinct rows, each four times: fewer distinct sub-vectors than 256 centroids, so
    // clusters go empty and split.
    let base = random_table(150, d, 31);
    let rows: Vec<f32> = (0..n)
        .flat_map(|i| base.row(i * 7 % 150).to_vec())
        .collect();
    let table = Table::new(rows, n, d).unwrap();
    let dsub = d / m;
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    // 600 rows: all train (256 × 256 ≥ 600); 2 a centroid: a subsample of 512.
    for (cap, trained_on) in [(256, n), (2, 512)] {
        let opts = KMeansOptions {
            max_points_per_centroid: cap,
            ..kopts()
        };
        let before = ctx.host_ops().submissions;
        let all = kmeans_subspaces(&ctx, table.data(), d, m, PQ_KSUB, &opts).unwrap();
        let used = ctx.host_ops().submissions - before;
        // One upload of the rows, the centroid tables' uploads (a few each), then two an
        // iteration: alone, each sub-space took about eight an iteration.
        assert!(
            used <= (2 * opts.iters + 1 + 4 * m) as u64,
            "{used} submissions for {m} sub-spaces × {} iterations",
            opts.iters
        );
        assert_eq!(all.len(), m);
        let mut splits = 0;
        for (s, got) in all.iter().enumerate() {
            let sub: Vec<f32> = table
                .data()
                .chunks_exact(d)
                .flat_map(|row| row[s * dsub..(s + 1) * dsub].iter().copied())
                .collect();
            let sub = Table::new(sub, n, dsub).unwrap();
            let alone = diversity::ivf::kmeans(&ctx, &sub, PQ_KSUB, &opts).unwrap();
            assert_eq!(
                bits(&got.centroids),
                bits(&alone.centroids),
                "sub-space {s}"
            );
            assert_eq!(got.objective, alone.objective, "sub-space {s}");
            assert_eq!(got.objective.len(), opts.iters);
            assert_eq!((got.k, got.d), (PQ_KSUB, dsub));
            assert_eq!(got.trained_on, trained_on);
            assert_eq!(got.splits, alone.splits, "sub-space {s}");
            splits += got.splits;
        }
        // 150 distinct rows into 256 clusters leave some empty: the splits ran.
        assert!(splits > 0);
        if cap == 256 {
            let pq = ProductQuantizer::train(&ctx, table.data(), d, m, &opts).unwrap();
            let want: Vec<f32> = all.iter().flat_map(|k| k.centroids.clone()).collect();
            assert_eq!(bits(pq.centroids()), bits(&want));
        }
    }
    // No iterations: the seeded initial rows, as alone.
    let none = KMeansOptions {
        iters: 0,
        ..kopts()
    };
    let init = kmeans_subspaces(&ctx, table.data(), d, m, PQ_KSUB, &none).unwrap();
    let sub0: Vec<f32> = table
        .data()
        .chunks_exact(d)
        .flat_map(|r| r[..dsub].to_vec())
        .collect();
    let alone0 = diversity::ivf::kmeans(&ctx, &Table::new(sub0, n, dsub).unwrap(), PQ_KSUB, &none);
    assert_eq!(bits(&init[0].centroids), bits(&alone0.unwrap().centroids));
    // Bad shapes are refused with their message.
    let msg = |r: diversity::Result<Vec<diversity::ivf::KMeans>>| r.unwrap_err().to_string();
    assert!(msg(kmeans_subspaces(&ctx, table.data(), d, 5, 8, &none)).contains("do not divide"));
    assert!(msg(kmeans_subspaces(&ctx, table.data(), d, m, n + 1, &none)).contains("between 1"));
    assert!(msg(kmeans_subspaces(&ctx, &table.data()[1..], d, m, 8, &none)).contains("dimension"));
    let mut nan = table.data().to_vec();
    nan[3 * d + 5] = f32::NAN;
    assert!(
        msg(kmeans_subspaces(&ctx, &nan, d, m, 8, &none)).contains("row 3 has a non-finite value")
    );
    assert_clean(&ctx);
}

/// More training rows than one k-NN query tile holds (65,535): the default cap of 256 rows a
/// centroid trains 65,536, cut into two tiles, and each sub-space is still the k-means alone.
#[test]
fn sub_spaces_in_lockstep_over_two_query_tiles_are_each_the_kmeans_alone() {
    let ctx = ctx();
    let (n, d, m) = (66_000, 4, 2);
    let table = random_table(n, d, 5);
    let opts = KMeansOptions {
        iters: 2,
        ..KMeansOptions::default()
    };
    let before = ctx.host_ops().submissions;
    let all = kmeans_subspaces(&ctx, table.data(), d, m, PQ_KSUB, &opts).unwrap();
    // In lockstep (two submissions an iteration), not each sub-space alone.
    assert!(ctx.host_ops().submissions - before <= (2 * opts.iters + 1 + 4 * m) as u64);
    for (s, got) in all.iter().enumerate() {
        assert_eq!(got.trained_on, 65_536);
        let sub: Vec<f32> = table
            .data()
            .chunks_exact(d)
            .flat_map(|row| row[s * 2..(s + 1) * 2].to_vec())
            .collect();
        let alone =
            diversity::ivf::kmeans(&ctx, &Table::new(sub, n, 2).unwrap(), PQ_KSUB, &opts).unwrap();
        assert_eq!(got.objective, alone.objective, "sub-space {s}");
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        assert_eq!(
            bits(&got.centroids),
            bits(&alone.centroids),
            "sub-space {s}"
        );
    }
    assert_clean(&ctx);
}

fn opts(nlist: usize, m: usize, metric: Metric, keep: bool) -> IvfPqOptions {
    IvfPqOptions {
        nlist,
        m,
        metric,
        keep_vectors: keep,
        kmeans: kopts(),
    }
}

fn search(ix: &IvfPq, k: usize, nprobe: usize, k_factor: usize) -> IvfSearch {
    IvfSearch {
        knn: KnnOptions {
            k,
            metric: ix.metric(),
            ..KnnOptions::default()
        },
        nprobe,
        k_factor,
    }
}

fn d2(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum()
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// Rows as the index sees them: unit length (float64 norm, rounded to f32) for cosine.
fn as_seen(rows: &[f32], d: usize, metric: Metric) -> Vec<f32> {
    if metric != Metric::Cosine {
        return rows.to_vec();
    }
    rows.chunks_exact(d)
        .flat_map(|r| {
            let n = dot(r, r).sqrt();
            let inv = if n > 0.0 { 1.0 / n } else { 0.0 };
            r.iter().map(move |&v| (v as f64 * inv) as f32)
        })
        .collect()
}

/// One candidate of the oracle: float64 ADC distance (similarity for inner product and
/// cosine), its bound, its id.
type Cand = (f64, f64, i64);

/// Per query, every row of the lists it probes with its float64 ADC distance and bound. The
/// probes are the exact k-NN of the query among the centroids (the coarse search itself).
fn adc_oracle(ctx: &diversity::Context, ix: &IvfPq, q: &[f32], nprobe: usize) -> Vec<Vec<Cand>> {
    let (d, m) = (ix.d(), ix.m());
    let ip = ix.metric() != Metric::L2;
    let pq = ix.pq().unwrap();
    let cent = Table::new(ix.centroids().to_vec(), ix.nlist(), d).unwrap();
    let dt = DeviceTable::upload(ctx, &cent, Precision::Fp32).unwrap();
    let cm = if ip { Metric::InnerProduct } else { Metric::L2 };
    let kn = KnnOptions {
        k: nprobe,
        metric: cm,
        ..KnnOptions::default()
    };
    let probes = knn_flat(&dt, q, d, &kn).unwrap();
    (0..q.len() / d)
        .map(|qi| {
            let qv = &q[qi * d..(qi + 1) * d];
            let mut out = Vec::new();
            for &l in probes.ids_of(qi) {
                let l = l as usize;
                let c = cent.row(l);
                let table = reference_table(pq, qv, c, ip);
                let bias = if ip { dot(qv, c) } else { 0.0 };
                for (i, &id) in ix.list_ids(l).iter().enumerate() {
                    let code = &ix.list_codes(l)[i * m..(i + 1) * m];
                    let dec = pq.decode(code);
                    let a2: f64 = (0..d)
                        .map(|j| {
                            (qv[j].abs() as f64 + c[j].abs() as f64 + dec[j].abs() as f64).powi(2)
                        })
                        .sum();
                    let c = if ip { d + m + 8 } else { d + d / m + 2 * m + 8 };
                    let bound = c as f64 * U * a2;
                    out.push((reference_adc(&table, code, bias), bound, id));
                }
            }
            out
        })
        .collect()
}

/// Checks a search result against the oracle (see the module documentation); returns the
/// queries whose ids equal the float64 order's exactly.
#[track_caller]
fn check_adc(r: &KnnResult, oracle: &[Vec<Cand>], ip: bool, what: &str) -> usize {
    let k = r.k;
    let sign = if ip { -1.0 } else { 1.0 };
    let mut equal = 0;
    for (qi, cands) in oracle.iter().enumerate() {
        let ids = r.ids_of(qi);
        let dists = r.distances_of(qi);
        let real = ids.iter().take_while(|&&id| id >= 0).count();
        assert_eq!(real, k.min(cands.len()), "{what} q{qi}: results");
        for i in real..k {
            assert_eq!(ids[i], -1, "{what} q{qi}");
            assert_eq!(dists[i], if ip { f32::NEG_INFINITY } else { f32::INFINITY });
        }
        let find = |id: i64| cands.iter().find(|c| c.2 == id).copied();
        for i in 0..real {
            let (want, bound, _) = find(ids[i])
                .unwrap_or_else(|| panic!("{what} q{qi}: id {} is not in a probed list", ids[i]));
            let got = dists[i] as f64;
            assert!(
                (got - want).abs() <= bound,
                "{what} q{qi} rank {i}: device {got}, float64 {want}, bound {bound}"
            );
            if i > 0 {
                // The device's own order: by key, ties by id.
                let (a, b) = (sign * dists[i - 1] as f64, sign * dists[i] as f64);
                assert!(
                    a < b || (a == b && ids[i - 1] < ids[i]),
                    "{what} q{qi} order at {i}"
                );
            }
        }
        if real == 0 {
            continue;
        }
        // Nothing left out is clearly better than the last kept.
        let (wd, wb, _) = find(ids[real - 1]).unwrap();
        for c in cands {
            if !ids[..real].contains(&c.2) {
                assert!(
                    sign * c.0 >= sign * wd - c.1 - wb,
                    "{what} q{qi}: id {} (float64 {}) beats the kept {} ({wd})",
                    c.2,
                    c.0,
                    ids[real - 1]
                );
            }
        }
        let mut sorted = cands.clone();
        sorted.sort_by(|a, b| (sign * a.0).total_cmp(&(sign * b.0)).then(a.2.cmp(&b.2)));
        if sorted
            .iter()
            .take(real)
            .map(|c| c.2)
            .eq(ids[..real].iter().copied())
        {
            equal += 1;
        }
    }
    equal
}

#[test]
fn device_codes_are_the_float64_encoders() {
    let ctx = ctx();
    let (d, m) = (24, 6);
    let train = random_table(600, d, 3);
    let pq = ProductQuantizer::train(&ctx, train.data(), d, m, &kopts()).unwrap();
    let again = ProductQuantizer::train(&ctx, train.data(), d, m, &kopts()).unwrap();
    assert_eq!(pq.centroids(), again.centroids(), "same seed, same bits");
    assert_eq!(pq.centroids().len(), PQ_KSUB * d);
    let rows = random_table(500, d, 4);
    let codes = pq.encode(&ctx, rows.data()).unwrap();
    let want = reference_codes(&pq, rows.data());
    let dsub = d / m;
    let mut differ = 0;
    for (i, (&got, &exp)) in codes.iter().zip(&want).enumerate() {
        if got != exp {
            // Only a near-tie: the two sub-centroids within fp32 rounding of each other.
            let (r, s) = (i / m, i % m);
            let x = &rows.row(r)[s * dsub..(s + 1) * dsub];
            let (a, b) = (
                d2(x, pq.centroid(s, got as usize)),
                d2(x, pq.centroid(s, exp as usize)),
            );
            assert!(
                a - b <= 2.0 * (dsub + 3) as f64 * U * (a + b),
                "row {r} sub {s}"
            );
            differ += 1;
        }
    }
    assert!(differ <= 2, "{differ} codes differ");
    // Decoding concatenates the chosen sub-centroids.
    let dec = pq.decode(&codes);
    for r in 0..rows.n() {
        for s in 0..m {
            let c = codes[r * m + s] as usize;
            assert_eq!(
                &dec[r * d + s * dsub..r * d + (s + 1) * dsub],
                pq.centroid(s, c)
            );
        }
    }
    // Exact ties go to the lowest sub-centroid: centroid c of each sub-space is the value c,
    // and x = c + 0.5 is as far from c as from c + 1.
    let cent: Vec<f32> = (0..2).flat_map(|_| (0..256).map(|c| c as f32)).collect();
    let pq = ProductQuantizer::from_centroids(2, 2, cent).unwrap();
    let x: Vec<f32> = (0..100).map(|i| (i % 200) as f32 + 0.5).collect();
    let codes = pq.encode(&ctx, &x).unwrap();
    assert_eq!(codes, reference_codes(&pq, &x));
    assert!(codes
        .iter()
        .enumerate()
        .all(|(i, &c)| c as usize == i % 200));
    assert_clean(&ctx);
}

#[test]
fn searches_are_the_brute_force_over_float64_adc_distances() {
    let ctx = ctx();
    let (d, m) = (32, 8);
    let data = random_table(400, d, 7);
    let queries = random_table(24, d, 8);
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        let ip = metric != Metric::L2;
        let mut ix = IvfPq::new(&ctx, d, &opts(8, m, metric, false)).unwrap();
        ix.train(&data).unwrap();
        // 56 rows, every list probed, k = 64: every row comes back, with its distance.
        ix.add(&data.head(56).unwrap()).unwrap();
        let q = as_seen(queries.data(), d, metric);
        let (r, rep) = ix
            .search(queries.data(), d, &search(&ix, 64, 8, 1))
            .unwrap();
        assert!(rep.list_scan);
        assert_eq!(rep.rows_scanned, 24 * 56);
        assert_eq!(ix.precomputed_tables(), !ip, "{metric:?}");
        let o = adc_oracle(&ctx, &ix, &q, 8);
        let eq = check_adc(&r, &o, ip, &format!("{metric:?} all"));
        assert!(
            eq >= 22,
            "{metric:?}: {eq} of 24 queries in the float64 order"
        );
        // The rest added (the slab rebuilt), three lists of eight probed, k = 10.
        let tail = Table::new(data.data()[56 * d..].to_vec(), 344, d).unwrap();
        assert_eq!(ix.add(&tail).unwrap(), 56);
        let (r, _) = ix
            .search(queries.data(), d, &search(&ix, 10, 3, 1))
            .unwrap();
        let o = adc_oracle(&ctx, &ix, &q, 3);
        let eq = check_adc(&r, &o, ip, &format!("{metric:?} nprobe 3"));
        assert!(
            eq >= 22,
            "{metric:?}: {eq} of 24 queries in the float64 order"
        );
    }
    assert_clean(&ctx);
}

/// L2 without precomputed tables (past `DIVERSITY_PQ_TABLE_MAX_BYTES`, here 0): the scan builds
/// each probed list's table, and the searches are still the float64 ADC order, also cut by the
/// loop cap. It runs in a child process of this test binary, so that the variable reaches no
/// other test.
#[test]
fn l2_without_precomputed_tables_is_the_same_brute_force() {
    const NAME: &str = "l2_without_precomputed_tables_is_the_same_brute_force";
    if !common::rerun_with_env(NAME, "DIVERSITY_PQ_TABLE_MAX_BYTES", "0") {
        return;
    }
    let ctx = ctx();
    let (d, m) = (32, 8);
    let data = random_table(400, d, 7);
    let queries = random_table(24, d, 8);
    let mut ix = IvfPq::new(&ctx, d, &opts(8, m, Metric::L2, false)).unwrap();
    ix.train(&data).unwrap();
    ix.add(&data).unwrap();
    for nprobe in [8, 3] {
        let (r, _) = ix
            .search(queries.data(), d, &search(&ix, 10, nprobe, 1))
            .unwrap();
        assert!(!ix.precomputed_tables());
        let o = adc_oracle(&ctx, &ix, queries.data(), nprobe);
        let eq = check_adc(&r, &o, false, &format!("no tables, nprobe {nprobe}"));
        assert!(eq >= 22, "{eq} of 24 queries in the float64 order");
    }
    // Long lists, k = 40: on lavapipe the probes' own tables split the scan into dispatches.
    let (d, n) = (16, 80_000);
    let data = random_table(n, d, 21);
    let mut ix = IvfPq::new(&ctx, d, &opts(8, m, Metric::L2, false)).unwrap();
    ix.train(&data.head(2_000).unwrap()).unwrap();
    ix.add(&data).unwrap();
    let queries = random_table(4, d, 22);
    let (r, rep) = ix
        .search(queries.data(), d, &search(&ix, 40, 8, 1))
        .unwrap();
    assert!(!ix.precomputed_tables());
    if ctx.caps().loop_limit.is_some() {
        assert!(rep.scan_dispatches >= 2, "{}", rep.scan_dispatches);
    }
    let o = adc_oracle(&ctx, &ix, queries.data(), 8);
    assert!(check_adc(&r, &o, false, "no tables, cut") >= 2);
    assert_clean(&ctx);
}

#[test]
fn a_search_cut_by_the_loop_cap_is_the_same_brute_force() {
    // D = 16, M = 8, k = 40 (queues of 8 an invocation, counted as 5 passes), 8 lists of about
    // 10,000 rows: on lavapipe a probe of the longest list costs an invocation over 5,800 loop
    // iterations, so the 8 probes take two dispatches or more, each seeded by the one before.
    let ctx = ctx();
    let (d, m, n) = (16, 8, 80_000);
    let data = random_table(n, d, 21);
    let mut ix = IvfPq::new(&ctx, d, &opts(8, m, Metric::L2, false)).unwrap();
    ix.train(&data.head(2_000).unwrap()).unwrap();
    ix.add(&data).unwrap();
    assert!(ix.list_sizes().iter().max().unwrap() >= &10_000);
    let queries = random_table(4, d, 22);
    let (r, rep) = ix
        .search(queries.data(), d, &search(&ix, 40, 8, 1))
        .unwrap();
    if ctx.caps().loop_limit.is_some() {
        assert!(
            rep.scan_dispatches >= 2,
            "{} dispatches",
            rep.scan_dispatches
        );
    }
    let o = adc_oracle(&ctx, &ix, queries.data(), 8);
    assert!(check_adc(&r, &o, false, "cut") >= 2);
    assert_clean(&ctx);
}

/// The block select keeps only a few pairs an invocation (8) and offers the codes again when one
/// invocation held more of the k best: here every one of the k best falls to one invocation
/// (one list, rows in id order, invocation i of the 128 scanning the rows i, i + 128, …; the
/// near rows are the ids 0, 128, 256, …, five distinct rows among 48, so many equal keys),
/// with precomputed L2 tables and for inner product, against the float64 ADC order.
#[test]
fn the_k_best_all_in_one_invocation_are_the_same_brute_force() {
    let ctx = ctx();
    let (n, d, m) = (128 * 48, 8, 4);
    let far = random_table(n, d, 41);
    let mut data = vec![0f32; n * d];
    for (i, row) in data.chunks_exact_mut(d).enumerate() {
        if i % 128 == 0 {
            row[0] = (60 + (i / 128 * 7) % 5) as f32;
        } else {
            row.copy_from_slice(far.row(i));
        }
    }
    let t = Table::new(data, n, d).unwrap();
    let mut q = vec![0f32; 2 * d];
    (q[0], q[d], q[d + 1]) = (62.0, 61.0, 1.0);
    for metric in [Metric::L2, Metric::InnerProduct] {
        let mut ix = IvfPq::new(&ctx, d, &opts(1, m, metric, false)).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        let ip = metric != Metric::L2;
        for k in [40, 64] {
            let (r, _) = ix.search(&q, d, &search(&ix, k, 1, 1)).unwrap();
            // The 48 near rows first, whatever the codes' rounding.
            for qi in 0..2 {
                let near = r.ids_of(qi).iter().filter(|&&id| id % 128 == 0).count();
                assert_eq!(near, k.min(48), "{metric:?} k {k} query {qi}");
            }
            let o = adc_oracle(&ctx, &ix, &q, 1);
            let eq = check_adc(&r, &o, ip, &format!("{metric:?} k {k}"));
            assert_eq!(eq, 2, "{metric:?} k {k}: the float64 order");
        }
    }
    assert_clean(&ctx);
}

/// The float64 exact k best of `q` among `rows` (ties to the lower id), as (f32 distance, id).
fn exact(rows: &[f32], d: usize, q: &[f32], k: usize, ip: bool) -> Vec<(f32, i64)> {
    let mut v: Vec<(f64, i64)> = rows
        .chunks_exact(d)
        .enumerate()
        .map(|(i, r)| (if ip { -dot(q, r) } else { d2(q, r) }, i as i64))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    v.iter()
        .take(k)
        .map(|&(x, id)| ((if ip { -x } else { x }) as f32, id))
        .collect()
}

#[test]
fn the_rerank_is_exact_once_it_sees_every_probed_row() {
    let ctx = ctx();
    let (d, m, k) = (32, 4, 5);
    let data = random_table(400, d, 31);
    // 600 queries: the host re-rank splits them over threads (256 or more a thread).
    let queries = random_table(600, d, 32);
    for metric in [Metric::L2, Metric::Cosine] {
        let ip = metric != Metric::L2;
        let mut ix = IvfPq::new(&ctx, d, &opts(4, m, metric, true)).unwrap();
        ix.train(&data).unwrap();
        // 60 rows, every list probed, k × k_factor = 60: the float64 exact search.
        ix.add(&data.head(60).unwrap()).unwrap();
        let (r, _) = ix
            .search(queries.data(), d, &search(&ix, k, 4, 12))
            .unwrap();
        let seen = as_seen(&data.data()[..60 * d], d, metric);
        let q = as_seen(queries.data(), d, metric);
        for qi in 0..600 {
            let want = exact(&seen, d, &q[qi * d..(qi + 1) * d], k, ip);
            let got: Vec<(f32, i64)> = r
                .distances_of(qi)
                .iter()
                .copied()
                .zip(r.ids_of(qi).iter().copied())
                .collect();
            assert_eq!(got, want, "{metric:?} q{qi}");
        }
        // All 400: recall@10 against the exact search, the re-rank never below plain ADC.
        let tail = Table::new(data.data()[60 * d..].to_vec(), 340, d).unwrap();
        ix.add(&tail).unwrap();
        let all = as_seen(data.data(), d, metric);
        let recall = |r: &KnnResult| -> usize {
            (0..30)
                .map(|qi| {
                    let want = exact(&all, d, &q[qi * d..(qi + 1) * d], 10, ip);
                    want.iter().filter(|w| r.ids_of(qi).contains(&w.1)).count()
                })
                .sum()
        };
        let (plain, _) = ix
            .search(queries.data(), d, &search(&ix, 10, 4, 1))
            .unwrap();
        let (rr, _) = ix
            .search(queries.data(), d, &search(&ix, 10, 4, 6))
            .unwrap();
        let (p, q6) = (recall(&plain), recall(&rr));
        assert!(
            q6 >= p && q6 > 150,
            "{metric:?}: re-rank {q6}, plain {p} of 300"
        );
    }
    assert_clean(&ctx);
}

fn invalid<T: std::fmt::Debug>(r: diversity::Result<T>) -> String {
    match r {
        Err(diversity::Error::Invalid(m)) => m,
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn bad_inputs_are_refused_with_their_message() {
    let ctx = ctx();
    let d = 16;
    let o = |m| opts(2, m, Metric::L2, false);
    assert!(invalid(IvfPq::new(&ctx, 10, &o(3))).contains("M = 3 sub-spaces do not divide D = 10"));
    assert!(invalid(IvfPq::new(&ctx, d, &o(0))).contains("must be ≥ 1"));
    assert!(invalid(IvfPq::new(&ctx, 0, &o(1))).contains("D = 0"));
    assert!(invalid(IvfPq::new(&ctx, d, &opts(0, 4, Metric::L2, false))).contains("nlist ≥ 1"));
    let mut ix = IvfPq::new(&ctx, d, &o(4)).unwrap();
    let data = random_table(300, d, 41);
    let q = random_table(3, d, 42);
    assert!(invalid(ix.add(&data)).contains("not trained"));
    assert!(invalid(ix.search(q.data(), d, &search(&ix, 5, 1, 1))).contains("not trained"));
    assert!(invalid(ix.to_bytes()).contains("not trained: nothing to save"));
    assert!(invalid(ix.train(&data.head(255).unwrap())).contains("at least 256 rows"));
    assert!(invalid(ix.train(&random_table(300, 8, 1))).contains("training rows have dimension 8"));
    assert!(invalid(ProductQuantizer::train(
        &ctx,
        &data.data()[..100 * d],
        d,
        4,
        &kopts()
    ))
    .contains("at least 256 rows"));
    assert!(invalid(ProductQuantizer::from_centroids(d, 4, vec![0.0; 10])).contains("10 values"));
    ix.train(&data).unwrap();
    assert!(invalid(ix.train(&data)).contains("already trained"));
    assert!(invalid(ix.add(&random_table(3, 8, 1))).contains("added rows have dimension 8"));
    ix.add(&data).unwrap();
    let mut s = |k, nprobe, f| ix_search(&mut ix, q.data(), d, (k, nprobe, f));
    fn ix_search(ix: &mut IvfPq, q: &[f32], d: usize, s: (usize, usize, usize)) -> String {
        let s = search(ix, s.0, s.1, s.2);
        invalid(ix.search(q, d, &s))
    }
    assert!(s(0, 1, 1).contains("k ≥ 1"));
    assert!(s(5, 0, 1).contains("nprobe ≥ 1"));
    assert!(s(5, 1, 0).contains("k_factor ≥ 1"));
    assert!(s(65, 1, 1).contains("65 × 1 = 65 candidates"));
    assert!(s(10, 1, 7).contains("10 × 7 = 70 candidates"));
    assert!(s(5, 1, 2).contains("keep_vectors"));
    assert!(invalid(ix.search(&q.data()[..8], 8, &search(&ix, 5, 1, 1))).contains("dimension 8"));
    // A lookup table larger than the device's shared memory: a Limit naming M.
    let big_m = ctx.caps().shared_memory_bytes as usize / 1024 + 1;
    let mut big = IvfPq::new(&ctx, big_m, &opts(1, big_m, Metric::L2, false)).unwrap();
    big.train(&random_table(256, big_m, 43)).unwrap();
    big.add(&random_table(10, big_m, 44)).unwrap();
    let e = big
        .search(
            random_table(1, big_m, 45).data(),
            big_m,
            &search(&big, 5, 1, 1),
        )
        .unwrap_err();
    assert!(
        matches!(&e, diversity::Error::Limit(m) if m.contains(&format!("M = {big_m}")) && m.contains("shared memory")),
        "{e}"
    );
    assert_clean(&ctx);
}

fn small_index(ctx: &diversity::Context, metric: Metric, keep: bool) -> IvfPq {
    let data = random_table(300, 8, 51);
    let mut ix = IvfPq::new(ctx, 8, &opts(3, 2, metric, keep)).unwrap();
    ix.train(&data).unwrap();
    ix.add(&data.head(40).unwrap()).unwrap();
    ix
}

#[test]
fn index_files_round_trip_and_corrupt_ones_are_refused() {
    let ctx = ctx();
    let dir = TempDir::new("ivfpq-files");
    let q = random_table(5, 8, 52);
    for (metric, keep) in [(Metric::L2, false), (Metric::Cosine, true)] {
        let mut ix = small_index(&ctx, metric, keep);
        let p = dir.path("a.ivfpq");
        ix.save(&p).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..4], b"DIVP");
        assert_eq!(bytes, ix.to_bytes().unwrap());
        let mut back = IvfPq::load(&ctx, &p).unwrap();
        assert_eq!(back.to_bytes().unwrap(), bytes, "byte for byte");
        assert_eq!(back.keeps_vectors(), keep);
        let f = if keep { 4 } else { 1 };
        let (a, _) = ix.search(q.data(), 8, &search(&ix, 5, 2, f)).unwrap();
        let (b, _) = back.search(q.data(), 8, &search(&back, 5, 2, f)).unwrap();
        assert_same(&b, &a, "loaded");
    }
    let good = small_index(&ctx, Metric::L2, false).to_bytes().unwrap();
    let n = good.len();
    let fixed = |mut b: Vec<u8>| {
        let h = fnv(&b[..b.len() - 8]);
        let l = b.len();
        b[l - 8..].copy_from_slice(&h.to_le_bytes());
        b
    };
    let mut cases: Vec<(Vec<u8>, &str)> = vec![
        (b"DIVF....".to_vec(), "no DIVP magic"),
        (good[..30].to_vec(), "truncated IVF-PQ index"),
        (good[..n - 9].to_vec(), "truncated or not an IVF-PQ index"),
    ];
    let mut b = good.clone();
    b[n - 20] ^= 4;
    cases.push((b, "checksum mismatch"));
    let mut b = good.clone();
    b[4] = 2;
    cases.push((fixed(b), "version 2"));
    let mut b = good.clone();
    b[12] = 2;
    cases.push((fixed(b), "unknown flags"));
    let mut b = good.clone();
    b[32] = 3; // M = 3 does not divide D = 8
    cases.push((fixed(b), "M must divide D"));
    for (i, (bytes, want)) in cases.into_iter().enumerate() {
        let p = dir.file(&format!("bad{i}.ivfpq"), &bytes);
        let msg = format_message(IvfPq::load(&ctx, &p), &p);
        assert!(msg.contains(want), "case {i}: {msg}");
    }
    // An untrained index writes nothing and clobbers nothing; a missing directory fails.
    let keep = dir.file("keep.ivfpq", b"precious");
    let un = IvfPq::new(&ctx, 8, &opts(3, 2, Metric::L2, false)).unwrap();
    assert!(invalid(un.save(&keep)).contains("not trained"));
    assert_eq!(std::fs::read(&keep).unwrap(), b"precious");
    let ix = small_index(&ctx, Metric::L2, false);
    assert!(ix.save(&dir.path("no/such/dir/x.ivfpq")).is_err());
    let before = dir.entries();
    assert!(!before.iter().any(|e| e.starts_with('.')), "{before:?}");
    assert_clean(&ctx);
}

/// One handle keeps its device buffers, the coarse search's scratch and the scan's set from
/// search to search, growing them when a call needs more: ADC and re-ranked searches of 1, 16,
/// 1,000 and again 1 query on one handle give what a fresh handle gives, bit for bit, and a
/// repeated call of one size creates no buffer, set or pipeline.
#[test]
fn one_handle_searches_any_query_count_as_fresh_handles_do() {
    let ctx = ctx();
    let (n, d) = (600, 16);
    let t = random_table(n, d, 61);
    let q = random_table(1000, d, 62);
    for metric in [Metric::L2, Metric::Cosine] {
        let build = || {
            let mut ix = IvfPq::new(&ctx, d, &opts(8, 4, metric, true)).unwrap();
            ix.train(&t).unwrap();
            ix.add(&t).unwrap();
            ix
        };
        let mut one = build();
        for nq in [1, 16, 1000, 1] {
            let qs = &q.data()[..nq * d];
            let mut fresh = build();
            for kf in [1, 4] {
                let s = search(&one, 10, 3, kf);
                let what = format!("{metric:?} {nq} queries k_factor {kf}");
                let (got, _) = one.search(qs, d, &s).unwrap();
                let (want, _) = fresh.search(qs, d, &s).unwrap();
                assert_same(&got, &want, &what);
                let (again, rep) = one.search(qs, d, &s).unwrap();
                assert_same(&again, &want, &what);
                let o = rep.host_ops;
                assert_eq!(
                    (o.buffers, o.descriptor_sets, o.pipelines),
                    (0, 0, 0),
                    "{what}: {o:?}"
                );
            }
        }
    }
    assert_clean(&ctx);
}

/// The exact re-rank on the device (recorded after the list scan in the search's one
/// submission) returns what the host re-rank returns: the same ids and distance bits, for every
/// metric, 1, 16 and 600 queries (the host splitting 600 over threads), a few lists probed and
/// all of them, and padding where the probed lists hold fewer than k rows.
#[test]
fn the_device_rerank_is_the_host_rerank_bit_for_bit() {
    let ctx = ctx();
    let (n, d) = (500, 24);
    let t = random_table(n, d, 71);
    let q = random_table(600, d, 72);
    let both = |ix: &mut IvfPq, qs: &[f32], s: &IvfSearch, what: &str| {
        ix.set_host_rerank(false);
        let (dev, rd) = ix.search(qs, d, s).unwrap();
        ix.set_host_rerank(true);
        let (host, rh) = ix.search(qs, d, s).unwrap();
        ix.set_host_rerank(false);
        assert!(rd.rerank_on_device, "{what}: the device re-ranked");
        assert!(!rh.rerank_on_device, "{what}: the host re-ranked");
        assert_same(&dev, &host, what);
        dev
    };
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        let mut ix = IvfPq::new(&ctx, d, &opts(8, 4, metric, true)).unwrap();
        ix.train(&t).unwrap();
        ix.add(&t).unwrap();
        for nq in [1, 16, 600] {
            for (k, nprobe, kf) in [(10, 1, 4), (10, 8, 6), (5, 3, 12)] {
                let what = format!("{metric:?} {nq} queries k {k} nprobe {nprobe} × {kf}");
                let s = search(&ix, k, nprobe, kf);
                both(&mut ix, &q.data()[..nq * d], &s, &what);
            }
        }
        // Six rows in all: four of ten results are padding.
        let mut few = IvfPq::new(&ctx, d, &opts(2, 4, metric, true)).unwrap();
        few.train(&t).unwrap();
        few.add(&t.head(6).unwrap()).unwrap();
        let what = format!("{metric:?} six rows");
        let s = search(&few, 10, 2, 4);
        let r = both(&mut few, &q.data()[..16 * d], &s, &what);
        assert!(r
            .ids
            .chunks(10)
            .all(|ids| ids[6..] == [-1; 4] && ids[5] >= 0));
    }
    assert_clean(&ctx);
}
