//! Rankings from an IVF-Flat index (`rankings::rankings_approx`, `rankings --index ivf-flat`):
//! with every list probed they are the exact rankings, ids and values bit for bit (an item's
//! own id dropped alike); with one list probed in lists too small for a row, the short rows are
//! searched again wider until whole, and every row is still sorted, without the item, without
//! repeats; and the refusals.

mod common;
use common::{assert_clean, ctx, fortunes, random_table};
use diversity::ivf::{widened_nprobe, IvfFlat, IvfOptions, IvfSearch, KMeansOptions};
use diversity::knn::KnnOptions;
use diversity::rankings::{rankings_approx, rankings_with_values, RankingsOptions};
use diversity::{DeviceTable, Metric, Precision, Table};

type Rows = (Vec<u32>, Vec<u32>, Vec<f32>);

fn index(ctx: &diversity::Context, t: &Table, nlist: usize, m: Metric, p: Precision) -> IvfFlat {
    let o = IvfOptions {
        nlist,
        metric: m,
        precision: p,
        kmeans: KMeansOptions {
            iters: 4,
            ..KMeansOptions::default()
        },
    };
    let mut ix = IvfFlat::new(ctx, t.d(), &o).unwrap();
    ix.train(t).unwrap();
    ix.add(t).unwrap();
    ix
}

fn approx(ix: &mut IvfFlat, stored: &Table, opts: &RankingsOptions, nprobe: usize) -> Rows {
    let (mut items, mut ids, mut values) = (Vec::new(), Vec::new(), Vec::new());
    let n = stored.n();
    let ko = KnnOptions {
        k: (opts.top_k.unwrap().min(n - 1) + 1).min(n),
        metric: opts.metric,
        ..KnnOptions::default()
    };
    let d = stored.d();
    let nlist = ix.nlist();
    rankings_approx(
        stored,
        opts,
        |q, widen| {
            let np = widened_nprobe(nprobe, widen, nlist);
            ix.search(q, d, &IvfSearch::new(np, ko.clone()))
                .map(|r| r.0)
        },
        |it, i, v, _| {
            items.extend_from_slice(it);
            ids.extend_from_slice(i);
            values.extend_from_slice(v);
            Ok(())
        },
    )
    .unwrap();
    (items, ids, values)
}

#[test]
fn every_list_probed_is_the_exact_ranking() {
    let ctx = ctx();
    let t = fortunes(600);
    for p in [Precision::Fp32, Precision::Fp16] {
        for m in [Metric::Cosine, Metric::L2] {
            let opts = RankingsOptions {
                top_k: Some(12),
                metric: m,
                batch: Some(250),
                ..RankingsOptions::default()
            };
            let dt = DeviceTable::upload(&ctx, &t, p).unwrap();
            let (mut items, mut ids, mut values) = (Vec::new(), Vec::new(), Vec::new());
            rankings_with_values(&dt, &t, &opts, |it, i, v, _| {
                items.extend_from_slice(it);
                ids.extend_from_slice(i);
                values.extend_from_slice(v);
                Ok(())
            })
            .unwrap();
            let mut ix = index(&ctx, &t, 10, m, p);
            let got = approx(&mut ix, &t.as_stored(p), &opts, 10);
            assert_eq!(got.0, items, "{p:?} {m:?}");
            assert_eq!(got.1, ids, "{p:?} {m:?}");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.2), bits(&values), "{p:?} {m:?}");
        }
    }
    assert_clean(&ctx);
}

#[test]
fn short_rows_are_searched_wider_until_whole() {
    let ctx = ctx();
    let t = random_table(300, 8, 4);
    // 60 lists of about 5 rows: one probed list cannot fill a row of 20.
    let mut ix = index(&ctx, &t, 60, Metric::L2, Precision::Fp32);
    let opts = RankingsOptions {
        top_k: Some(20),
        metric: Metric::L2,
        items: Some((0..300).rev().step_by(3).collect()),
        ..RankingsOptions::default()
    };
    let (items, ids, values) = approx(&mut ix, &t, &opts, 1);
    assert_eq!(items, opts.items.clone().unwrap());
    assert_eq!(ids.len(), items.len() * 20);
    for (r, &item) in items.iter().enumerate() {
        let row = &ids[r * 20..(r + 1) * 20];
        let vals = &values[r * 20..(r + 1) * 20];
        assert!(!row.contains(&item), "item {item} ranks itself");
        let mut s = row.to_vec();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), 20, "item {item}: repeated ids");
        for p in 1..20 {
            assert!(
                vals[p - 1] < vals[p] || (vals[p - 1] == vals[p] && row[p - 1] < row[p]),
                "item {item}: not sorted at {p}"
            );
        }
    }
    assert_clean(&ctx);
}

#[test]
fn refusals() {
    let ctx = ctx();
    let t = random_table(50, 4, 1);
    let mut ix = index(&ctx, &t, 4, Metric::L2, Precision::Fp32);
    let ko = KnnOptions {
        k: 5,
        metric: Metric::L2,
        ..KnnOptions::default()
    };
    let mut search =
        |q: &[f32], _w: usize| ix.search(q, 4, &IvfSearch::new(4, ko.clone())).map(|r| r.0);
    let sink = |_: &[u32], _: &[u32], _: &[f32], _: usize| Ok(());
    let msg = |o: RankingsOptions, search: &mut dyn FnMut(&[f32], usize) -> _| {
        rankings_approx(&t, &o, search, sink)
            .unwrap_err()
            .to_string()
    };
    let base = RankingsOptions {
        top_k: Some(4),
        metric: Metric::L2,
        ..RankingsOptions::default()
    };
    let all = RankingsOptions {
        top_k: None,
        ..base.clone()
    };
    assert!(msg(all, &mut search).contains("give top_k"));
    let verify = RankingsOptions {
        verify: 3,
        ..base.clone()
    };
    assert!(msg(verify, &mut search).contains("verify"));
    let out = RankingsOptions {
        items: Some(vec![50]),
        ..base.clone()
    };
    assert!(msg(out, &mut search).contains("out of range"));
    let twice = RankingsOptions {
        items: Some(vec![3, 3]),
        ..base
    };
    assert!(msg(twice, &mut search).contains("listed twice"));
    assert_clean(&ctx);
}
