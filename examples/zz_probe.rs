use diversity::knn::{knn_flat, KnnOptions, Metric};
use diversity::{files, Context, ContextOptions, DeviceTable, Precision};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args[1].parse().unwrap();
    let nq: usize = args[2].parse().unwrap();
    let qtile: Option<usize> = args.get(3).and_then(|s| s.parse().ok());
    let t = files::load_table(std::path::Path::new("data/fortunes-2k.npy"), None)
        .unwrap()
        .head(n)
        .unwrap();
    let ctx = Context::new(&ContextOptions::default()).unwrap();
    let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
    let q = &t.data()[..nq * t.d()];
    let mk = |fused| KnnOptions {
        k: 11,
        metric: Metric::Cosine,
        fused_distances: Some(fused),
        warp_select: Some(true),
        query_tile: qtile,
        ..Default::default()
    };
    let a = knn_flat(&dt, q, t.d(), &mk(false)).unwrap();
    let b = knn_flat(&dt, q, t.d(), &mk(true)).unwrap();
    let mut bad = vec![];
    for i in 0..nq {
        if a.ids_of(i) != b.ids_of(i) {
            bad.push(i);
        }
    }
    println!(
        "n {n} nq {nq} qt {} bad {} first {:?}",
        b.query_tile,
        bad.len(),
        &bad[..bad.len().min(20)]
    );
    let mut missing = std::collections::BTreeSet::new();
    for &i in &bad {
        for id in a.ids_of(i) {
            if !b.ids_of(i).contains(id) {
                missing.insert(*id);
            }
        }
    }
    println!("missing ids {:?}", missing);
    if let Some(&i) = bad.first() {
        println!("tiles {:?}\nfused {:?}", a.ids_of(i), b.ids_of(i));
        println!("{:?}\n{:?}", a.distances_of(i), b.distances_of(i));
    }
}
#[allow(dead_code)]
fn unused() {}
