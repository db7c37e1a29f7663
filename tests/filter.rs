//! The filter-and-judge scan on a real Vulkan device, validation layers on. CI runs
//! ScanKernel::Filter, the scalar stand-in of the tensor-core ScanKernel::Coopmat: the same
//! bound, bands, fallback, judge and shaders, with plain fp32 arithmetic where a GPU with
//! cooperative matrices multiplies on tensor cores (the GPU benchmark compares Coopmat with
//! Block128 bit for bit). The property is the design's promise: the same bits as the fp32
//! kernels for every table, precision, shape, chunking, batch, band capacity and γ ≥ the bound;
//! and a γ below the bound is seen to break it, so the comparison can fail.

mod common;
use common::{assert_clean, ctx, fortunes, random_table};
use diversity::scan::{FilterStats, FilterTuning};
use diversity::{DeviceTable, Error, Precision, ScanJob, ScanKernel, ScanOptions, Shape, Table};

fn run(
    dt: &DeviceTable,
    starts: &[u32],
    o: &ScanOptions,
    k: ScanKernel,
) -> (Vec<Vec<u32>>, Option<FilterStats>) {
    let o = ScanOptions {
        kernel: k,
        ..o.clone()
    };
    let mut job = ScanJob::new(dt, starts, &o).unwrap();
    assert_eq!(job.kernel(), k);
    job.run().unwrap();
    (job.sequences().unwrap(), job.filter_stats().unwrap())
}

fn steps(k: usize) -> ScanOptions {
    ScanOptions {
        steps: Some(k),
        ..ScanOptions::default()
    }
}

fn tuned(k: usize, capacity: u32, gamma_scale: f32) -> ScanOptions {
    ScanOptions {
        filter: FilterTuning {
            capacity,
            gamma_scale,
            ..FilterTuning::default()
        },
        ..steps(k)
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
        ("random d=600", random_table(260, 600, 5)),
    ];
    for (name, table) in &tables {
        for p in [Precision::Fp32, Precision::Fp16] {
            let dt = DeviceTable::upload(&ctx, table, p).unwrap();
            let n = table.n() as u32;
            let starts: Vec<u32> = vec![0, 3, n / 2, n - 1, 17, 200];
            let (want, none) = run(&dt, &starts, &steps(250), ScanKernel::Block64);
            assert!(none.is_none());
            let (got, st) = run(&dt, &starts, &steps(250), ScanKernel::Filter);
            assert_eq!(got, want, "{name} {p:?}: filter differs from block64");
            let st = st.unwrap();
            assert_eq!(st.steps, starts.len() as u64 * 250);
            eprintln!("{name} {p:?}: {st:?} mean {:.2}", st.mean_rescored());
            assert!(st.rescored >= st.steps, "every step re-scores its pick");
            assert!(st.mean_rescored() < 10.0, "{name}: the band is small");
        }
    }
    assert_clean(&ctx);
}

#[test]
fn filter_bits_across_shapes_chunks_batches_and_resume() {
    let ctx = ctx();
    let table = fortunes(300).centered();
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp16).unwrap();
    let starts: Vec<u32> = (0..21).map(|i| (i * 13) % 300).collect();
    let (want, _) = run(&dt, &starts, &steps(120), ScanKernel::Block64);
    let mut configs: Vec<(String, ScanOptions)> = Vec::new();
    for (shape, tile) in [
        (Shape::Tiled, 37u32),
        (Shape::Tiled, 1000),
        (Shape::PerTile, 100),
    ] {
        configs.push((
            format!("{shape:?} {tile}"),
            ScanOptions {
                shape,
                tile_size: tile,
                ..steps(120)
            },
        ));
    }
    for (chunk, pipelined) in [(1usize, false), (7, true), (0, false)] {
        configs.push((
            format!("chunk {chunk} pipelined {pipelined}"),
            ScanOptions {
                chunk,
                pipelined,
                ..steps(120)
            },
        ));
    }
    for (name, o) in &configs {
        assert_eq!(run(&dt, &starts, o, ScanKernel::Filter).0, want, "{name}");
    }
    // Batches of 21 (two blocks of 16 sequences), 5 and 1.
    for b in [5usize, 1] {
        let mut got = Vec::new();
        for part in starts.chunks(b) {
            got.extend(run(&dt, part, &steps(120), ScanKernel::Filter).0);
        }
        assert_eq!(got, want, "batches of {b}");
    }
    // Resume after 50 steps (prefixes from the fp32 kernel), continue with the filter.
    let prefixes: Vec<u32> = want.iter().flat_map(|s| s[..51].to_vec()).collect();
    let filter = ScanOptions {
        kernel: ScanKernel::Filter,
        ..steps(120)
    };
    let mut job = ScanJob::resume(&dt, &table, &starts, &prefixes, 51, &filter).unwrap();
    job.run().unwrap();
    assert_eq!(job.sequences().unwrap(), want, "resumed");
    assert_clean(&ctx);
}

/// Bands that do not fit (capacity 1 and γ × 50; rows repeated 40 times, whose keys tie) fall
/// back to exact scoring of their blocks: more work, the same bits.
#[test]
fn overflowing_bands_fall_back_to_exact_scoring() {
    let ctx = ctx();
    let base = fortunes(200);
    let mut data: Vec<f32> = Vec::new();
    for i in 0..base.n() {
        let reps = if i % 50 == 7 { 40 } else { 1 };
        for _ in 0..reps {
            data.extend_from_slice(base.row(i));
        }
    }
    let dups = Table::new(data, base.n() + 4 * 39, base.d()).unwrap();
    for (name, table, o) in [
        ("capacity 1, γ × 50", &base, tuned(150, 1, 50.0)),
        ("duplicate rows", &dups, steps(150)),
    ] {
        let dt = DeviceTable::upload(&ctx, table, Precision::Fp32).unwrap();
        let starts: Vec<u32> = vec![0, 7, 57, 100, 199];
        let (want, _) = run(&dt, &starts, &o, ScanKernel::Block64);
        let (got, st) = run(&dt, &starts, &o, ScanKernel::Filter);
        let st = st.unwrap();
        eprintln!("{name}: {st:?}");
        assert!(st.overflows > 0, "{name}: no block fell back");
        assert_eq!(got, want, "{name}");
    }
    assert_clean(&ctx);
}

/// A zero start row gives a zero centroid: every filter key is 0, γ is (almost) 0, every band
/// overflows and the exact fallback decides (the lowest index, as the fp32 kernels).
#[test]
fn zero_centroid_falls_back_to_the_lowest_index() {
    let ctx = ctx();
    let t = fortunes(150);
    let mut data = Vec::new();
    for i in 0..150 {
        if i == 3 {
            data.extend(std::iter::repeat_n(0.0, t.d()));
        } else {
            data.extend_from_slice(t.row(i));
        }
    }
    let table = Table::new(data, 150, t.d()).unwrap();
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let (want, _) = run(&dt, &[3, 5], &steps(40), ScanKernel::Block64);
    let (got, st) = run(&dt, &[3, 5], &steps(40), ScanKernel::Filter);
    assert_eq!(want[0][1], 0, "a zero centroid picks the lowest index");
    assert_eq!(got, want);
    assert!(st.unwrap().overflows > 0);
    assert_clean(&ctx);
}

/// The guarantee rests on γ: below the bound the judge no longer sees the winner. This is the
/// check that the comparisons above can fail.
#[test]
fn a_bound_below_gamma_breaks_the_bits() {
    let ctx = ctx();
    let table = random_table(400, 96, 11);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let starts: Vec<u32> = (0..16).map(|i| i * 25).collect();
    let (want, _) = run(&dt, &starts, &steps(300), ScanKernel::Block64);
    let (same, _) = run(&dt, &starts, &tuned(300, 8, 1.0), ScanKernel::Filter);
    assert_eq!(same, want);
    let (got, _) = run(&dt, &starts, &tuned(300, 8, 0.0), ScanKernel::Filter);
    assert_ne!(
        got, want,
        "with γ = 0 some pick must come from the fp16 filter alone"
    );
    assert_clean(&ctx);
}

/// The judge's staged rows (`FilterTuning::judge_rows`): in place and one, two or three rows at
/// a time give the fp32 kernels' bits, with narrow bands and with wide ones (γ × 50: many
/// candidates a round, several groups); lavapipe's default is in place (its loop cap), a GPU's
/// two. Past the workgroup or the shared memory they are refused with the reason. (48 dims and
/// 4 entries a block keep the staged judge's worst case within lavapipe's loop cap.)
#[test]
fn judge_staged_rows_give_the_same_bits() {
    let ctx = ctx();
    let table = fortunes(400);
    let first48: Vec<f32> = (0..400).flat_map(|i| table.row(i)[..48].to_vec()).collect();
    let narrow = Table::new(first48, 400, 48).unwrap();
    let dt = DeviceTable::upload(&ctx, &narrow, Precision::Fp32).unwrap();
    let starts: Vec<u32> = (0..24).map(|i| (i * 13) % 400).collect();
    let with_rows = |o: ScanOptions, jr: Option<u32>| ScanOptions {
        filter: FilterTuning {
            judge_rows: jr,
            ..o.filter
        },
        ..o
    };
    for base in [tuned(60, 4, 1.0), tuned(60, 4, 50.0)] {
        let (want, _) = run(&dt, &starts, &base, ScanKernel::Block64);
        let mut rescored = Vec::new();
        for jr in [None, Some(0), Some(1), Some(2), Some(3)] {
            let (got, stats) = run(
                &dt,
                &starts,
                &with_rows(base.clone(), jr),
                ScanKernel::Filter,
            );
            assert_eq!(
                got, want,
                "judge_rows {jr:?}, γ × {}",
                base.filter.gamma_scale
            );
            rescored.push(stats.unwrap().rescored);
        }
        // The same candidates re-scored whichever way they are read.
        assert!(
            rescored[0] > 0 && rescored.iter().all(|&r| r == rescored[0]),
            "{rescored:?}"
        );
    }
    let wg = ScanJob::new(&dt, &starts, &with_rows(steps(3), None))
        .unwrap()
        .workgroup_size();
    let filter = |o: ScanOptions| ScanOptions {
        kernel: ScanKernel::Filter,
        ..o
    };
    let e = ScanJob::new(&dt, &starts, &filter(with_rows(steps(3), Some(wg + 1))))
        .err()
        .expect("more rows than invocations");
    assert!(
        matches!(&e, Error::Invalid(m) if m.contains(&format!("judge_rows {}", wg + 1)) && m.contains("workgroup size")),
        "{e}"
    );
    // As many rows of 256 dims as the judge has invocations (64 KiB or more): past the shared
    // memory of lavapipe and of the GPUs we know.
    let wide = random_table(40, 256, 3);
    let dw = DeviceTable::upload(&ctx, &wide, Precision::Fp32).unwrap();
    let e = ScanJob::new(&dw, &[0, 1], &filter(with_rows(steps(3), Some(wg))))
        .err()
        .expect("more rows than shared memory holds");
    assert!(
        matches!(&e, Error::Limit(m) if m.contains("shared memory") && m.contains("D = 256")),
        "{e}"
    );
    assert_clean(&ctx);
}

#[test]
fn filter_refusals_name_the_cause() {
    let ctx = ctx();
    let caps = ctx.caps().clone();
    let table = random_table(64, 32, 1);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    if !caps.coopmat {
        let coopmat = ScanOptions {
            kernel: ScanKernel::Coopmat,
            ..steps(3)
        };
        let e = ScanJob::new(&dt, &[0], &coopmat)
            .err()
            .expect("coopmat without cooperative matrices");
        assert!(
            matches!(&e, Error::Limit(m) if m.contains("cooperative matrices")),
            "{e}"
        );
        assert!(ctx.describe().contains("coop. matrix:    no"));
        // Auto never picks the filter kernels where the device cannot run them.
        let job = ScanJob::new(&dt, &[0], &steps(3)).unwrap();
        assert!(!job.kernel().is_filter());
    }
    for (cap, scale) in [(0u32, 1.0f32), (65, 1.0), (8, -1.0), (8, f32::NAN)] {
        let o = ScanOptions {
            kernel: ScanKernel::Filter,
            ..tuned(3, cap, scale)
        };
        let e = ScanJob::new(&dt, &[0], &o).err().expect("bad tuning");
        assert!(matches!(e, Error::Invalid(_)), "{e}");
    }
    if caps.loop_limit.is_some() {
        // 16 sequences × 4,096 dims a filter invocation: past the driver's loop cap.
        let wide = random_table(70, 4096, 2);
        let dw = DeviceTable::upload(&ctx, &wide, Precision::Fp32).unwrap();
        let o = ScanOptions {
            kernel: ScanKernel::Filter,
            ..steps(3)
        };
        let e = ScanJob::new(&dw, &[0], &o).err().expect("loop cap");
        assert!(
            matches!(&e, Error::Limit(m) if m.contains("loop iterations")),
            "{e}"
        );
    }
    assert_clean(&ctx);
}

/// Steps of the clock profiles' jobs.
const CLOCK_STEPS: usize = 40;

/// The clock profiles' workload: 300 fortunes in fp16 and 21 sequences (block rows, or groups, of
/// 16 and 5: the second too short for the ten counters, which go to the first's); the Block64
/// sequences of `CLOCK_STEPS` steps to compare with, and a Block64 job three steps in (neither
/// filter nor judge, so no profile).
fn clock_workload(ctx: &diversity::Context) -> (DeviceTable, Vec<u32>, Vec<Vec<u32>>, ScanJob) {
    let table = fortunes(300);
    let dt = DeviceTable::upload(ctx, &table, Precision::Fp16).unwrap();
    let starts: Vec<u32> = (0..21).map(|i| (i * 13) % 300).collect();
    let (want, _) = run(&dt, &starts, &steps(CLOCK_STEPS), ScanKernel::Block64);
    let mut block64 = ScanJob::new(
        &dt,
        &starts,
        &ScanOptions {
            kernel: ScanKernel::Block64,
            ..steps(CLOCK_STEPS)
        },
    )
    .unwrap();
    block64.step(3).unwrap();
    (dt, starts, want, block64)
}

/// The judge's clock profile (`JUDGE_CLOCK` builds, run with `DIVERSITY_SHADER_CLOCK=1`): every
/// sequence-step judged counted once, ticks in every phase that always runs, the same bits; no
/// profile otherwise, nor for a kernel without a judge or a batch under 10.
#[test]
fn judge_clock_profile() {
    let built = common::built_with("JUDGE_CLOCK");
    let ctx = ctx();
    let (dt, starts, want, block64) = clock_workload(&ctx);
    let k = CLOCK_STEPS;
    assert!(block64.judge_clock().unwrap().is_none(), "no judge");
    let o = ScanOptions {
        kernel: ScanKernel::Filter,
        ..steps(k)
    };
    let mut job = ScanJob::new(&dt, &starts, &o).unwrap();
    job.run().unwrap();
    assert_eq!(job.sequences().unwrap(), want);
    let clock = job.judge_clock().unwrap();
    if !built {
        assert!(clock.is_none(), "a profile without JUDGE_CLOCK");
        return;
    }
    assert!(
        ctx.caps().shader_clock,
        "a JUDGE_CLOCK build runs with DIVERSITY_SHADER_CLOCK=1 on a device with \
         VK_KHR_shader_clock"
    );
    assert!(
        job.filter_clock().unwrap().is_none(),
        "the judge's counters are not the filter's profile"
    );
    let c = clock.expect("a JUDGE_CLOCK build's profile");
    eprintln!("judge: {c:?} a sequence-step {:?}", c.per_step());
    let judged = job.filter_stats().unwrap().unwrap().steps;
    assert_eq!(c.judged, judged, "sequence-steps profiled");
    assert_eq!(judged, (starts.len() * k) as u64);
    for (i, t) in c.phases.iter().enumerate() {
        assert!(*t > 0, "phase {i}: {c:?}");
    }
    let mut small = ScanJob::new(&dt, &starts[..5], &o).unwrap();
    small.step(2).unwrap();
    assert!(small.judge_clock().unwrap().is_none(), "batch of 5");
    assert_clean(&ctx);
}

/// The filter's subgroup-clock profile (`FILTER_CLOCK` in `DIVERSITY_SHADER_DEFINES`, a
/// build-time knob; `shaders/filter_block.glsl`): none in a build without it (the default); in a
/// build with it (run with `DIVERSITY_SHADER_CLOCK=1`, which lavapipe's `VK_KHR_shader_clock`
/// honours) ticks over exactly the blocks the steps filtered, the probe's not counted, and the
/// same bits.
#[test]
fn filter_clock_profile() {
    let built = common::built_with("FILTER_CLOCK");
    let ctx = ctx();
    let (dt, starts, want, block64) = clock_workload(&ctx);
    let k = CLOCK_STEPS;
    assert!(block64.filter_clock().unwrap().is_none(), "no filter");
    let (nbx, nby) = (300usize.div_ceil(32), starts.len().div_ceil(16));
    for (name, o) in [
        ("untiled", steps(k)),
        (
            "per tile",
            ScanOptions {
                shape: Shape::PerTile,
                tile_size: 100,
                ..steps(k)
            },
        ),
    ] {
        let o = ScanOptions {
            kernel: ScanKernel::Filter,
            ..o
        };
        let mut job = ScanJob::new(&dt, &starts, &o).unwrap();
        assert!(!job.filter_probe().unwrap().is_empty());
        job.run().unwrap();
        assert_eq!(job.sequences().unwrap(), want, "{name}");
        let clock = job.filter_clock().unwrap();
        if !built {
            assert!(clock.is_none(), "{name}: a profile without FILTER_CLOCK");
            continue;
        }
        assert!(
            ctx.caps().shader_clock,
            "a FILTER_CLOCK build runs with DIVERSITY_SHADER_CLOCK=1 on a device with \
             VK_KHR_shader_clock"
        );
        let c = clock.expect("a FILTER_CLOCK build's profile");
        eprintln!("{name}: {c:?} a block {:?}", c.per_block());
        assert_eq!(c.blocks, (k * nbx * nby) as u64, "{name}: blocks profiled");
        assert_eq!(c.staging, 0, "{name}: the stand-in stages nothing");
        assert!(c.products > 0 && c.epilogue > 0, "{name}: {c:?}");
        assert_eq!(
            c.epilogue_parts, [0; 4],
            "{name}: the stand-in stages its products"
        );
        // A batch under 10 sequences has no room for the counters.
        let mut small = ScanJob::new(&dt, &starts[..5], &o).unwrap();
        small.step(2).unwrap();
        assert!(
            small.filter_clock().unwrap().is_none(),
            "{name}: batch of 5"
        );
    }
    // Bands that overflow (capacity 1, γ × 50): the fallback's ticks.
    let o = tuned(30, 1, 50.0);
    let (want, _) = run(&dt, &starts, &o, ScanKernel::Block64);
    let o = ScanOptions {
        kernel: ScanKernel::Filter,
        ..o
    };
    let mut job = ScanJob::new(&dt, &starts, &o).unwrap();
    job.run().unwrap();
    assert_eq!(job.sequences().unwrap(), want, "overflows");
    assert!(job.filter_stats().unwrap().unwrap().overflows > 0);
    if let Some(c) = job.filter_clock().unwrap() {
        eprintln!("overflows: {c:?} a block {:?}", c.per_block());
        assert_eq!(c.blocks, (30 * nbx * nby) as u64);
        assert!(c.fallback > 0, "{c:?}");
    } else {
        assert!(!built);
    }
    assert_clean(&ctx);
}
