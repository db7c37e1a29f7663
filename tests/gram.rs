//! The gram engine on a real Vulkan device (lavapipe in CI), validation layers on: G against a
//! float64 product, the same bits across placements, workgroup sizes, reductions, chunks,
//! batches and start order (SPEC §Exactness 1), the float64 ε-argmax oracle along the engine's
//! own prefix (SPEC §Exactness 2) on real and random data, fp32 and fp16, centered and not,
//! edge cases, bad input, resume, and the memory-budget rule of `auto`.

use diversity::gram::{gram_unfit, mode_for};
use diversity::reference::{check_sequence, common_prefix};
use diversity::{
    files, Context, ContextOptions, DeviceTable, Error, Gram, GramJob, GramOptions, Mode,
    Placement, Precision, ScanJob, ScanOptions, Table,
};
use std::path::Path;

const EPS: f64 = 1e-5;

fn ctx() -> Context {
    Context::new(&ContextOptions {
        device: None,
        validation: true,
    })
    .expect("a Vulkan device with validation layers")
}

fn assert_clean(ctx: &Context) {
    assert!(ctx.validation_enabled());
    let msgs = ctx.validation_messages();
    assert!(msgs.is_empty(), "validation layers reported: {msgs:#?}");
}

fn fortunes(n: usize) -> Table {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/fortunes-2k.npy");
    files::load_npy(&path)
        .expect("bundled data")
        .head(n)
        .unwrap()
}

fn random_table(n: usize, d: usize, seed: u64) -> Table {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data = (0..n * d)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect();
    Table::new(data, n, d).unwrap()
}

fn run(gram: &Gram, starts: &[u32], batch: usize, o: &GramOptions) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for b in starts.chunks(batch) {
        let mut job = GramJob::new(gram, b, o).unwrap();
        job.run().unwrap();
        assert!(job.done());
        out.extend(job.sequences().unwrap());
    }
    out
}

fn check_all(stored: &Table, starts: &[u32], seqs: &[Vec<u32>]) -> (f64, usize) {
    let mut worst = 0f64;
    let mut ties = 0;
    for (s, seq) in starts.iter().zip(seqs) {
        let c = check_sequence(stored, *s, seq, EPS).unwrap_or_else(|v| panic!("start {s}: {v:?}"));
        worst = worst.max(c.worst_excess);
        ties += c.near_ties;
    }
    (worst, ties)
}

#[test]
fn gram_matrix_matches_float64_and_is_symmetric() {
    let ctx = ctx();
    for (table, p) in [
        (random_table(133, 37, 5), Precision::Fp32),
        (fortunes(100), Precision::Fp16),
    ] {
        let stored = table.as_stored(p);
        let dt = DeviceTable::upload(&ctx, &table, p).unwrap();
        let g = Gram::build(&dt).unwrap();
        let n = table.n();
        let rows: Vec<Vec<f32>> = (0..n).map(|i| g.row(i).unwrap()).collect();
        for i in 0..n {
            for j in 0..n {
                let exact: f64 = stored
                    .row(i)
                    .iter()
                    .zip(stored.row(j))
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                let scale: f64 = stored
                    .row(i)
                    .iter()
                    .zip(stored.row(j))
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                assert!(
                    (rows[i][j] as f64 - exact).abs() <= 1e-5 * scale.max(1e-30),
                    "G[{i}][{j}] = {} vs {exact}",
                    rows[i][j]
                );
                assert_eq!(
                    rows[i][j].to_bits(),
                    rows[j][i].to_bits(),
                    "G[{i}][{j}] vs G[{j}][{i}]"
                );
            }
        }
    }
    assert_clean(&ctx);
}

#[test]
fn same_bits_across_placements_workgroups_reductions_chunks_batches_and_order() {
    let ctx = ctx();
    let table = fortunes(203);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let gram = Gram::build(&dt).unwrap();
    let starts: Vec<u32> = vec![0, 5, 17, 42, 99, 150, 202, 1, 77, 128, 64];
    let base = run(&gram, &starts, starts.len(), &GramOptions::default());
    let (worst, _) = check_all(&table, &starts, &base);
    assert!(worst <= EPS);
    let mut configs: Vec<(String, GramOptions, usize)> = Vec::new();
    for placement in [Placement::Registers, Placement::Memory] {
        for wg in [16u32, 64, 256] {
            for subgroups in [false, ctx.caps().subgroup_arithmetic] {
                configs.push((
                    format!("{placement:?} wg {wg} subgroups {subgroups}"),
                    GramOptions {
                        placement,
                        workgroup_size: Some(wg),
                        subgroups: Some(subgroups),
                        ..GramOptions::default()
                    },
                    starts.len(),
                ));
            }
        }
    }
    for chunk in [1usize, 7, 0] {
        configs.push((
            format!("chunk {chunk}"),
            GramOptions {
                chunk,
                ..GramOptions::default()
            },
            4,
        ));
    }
    for (name, o, batch) in &configs {
        let got = run(&gram, &starts, *batch, o);
        assert_eq!(got, base, "{name}");
    }
    // Start order: reversed starts give the same sequence per start.
    let rev: Vec<u32> = starts.iter().rev().copied().collect();
    let got = run(&gram, &rev, 3, &GramOptions::default());
    let got: Vec<Vec<u32>> = got.into_iter().rev().collect();
    assert_eq!(got, base, "reversed start order");
    assert_clean(&ctx);
}
