//! The scan engine on a real Vulkan device (lavapipe in CI), validation layers on. Every test
//! checks real properties: the same bits across shapes, the float64
//! ε-argmax oracle along the engine's own prefix, edge cases, bad input.

mod common;
use common::{assert_clean, ctx, fortunes, random_table};
use diversity::batch::StepReport;
use diversity::reference::check_sequence;
use diversity::scan::run_scan;
use diversity::{
    Context, ContextOptions, DeviceTable, Error, Precision, ScanJob, ScanKernel, ScanOptions,
    Shape, Table,
};

const EPS: f64 = 1e-5;

fn opts(shape: Shape, tile: u32) -> ScanOptions {
    ScanOptions {
        shape,
        tile_size: tile,
        ..ScanOptions::default()
    }
}

/// Run `starts` in batches of `batch` and return the sequences keyed by start order.
fn run_batched(dt: &DeviceTable, starts: &[u32], batch: usize, o: &ScanOptions) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for b in starts.chunks(batch) {
        let mut job = ScanJob::new(dt, b, o).unwrap();
        job.run().unwrap();
        assert!(job.done());
        out.extend(job.sequences().unwrap());
    }
    out
}

/// [`run_batched`] with a chosen scan kernel.
fn run_batched_with(
    dt: &DeviceTable,
    starts: &[u32],
    batch: usize,
    o: &ScanOptions,
    kernel: ScanKernel,
) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for b in starts.chunks(batch) {
        let o = ScanOptions {
            kernel,
            ..o.clone()
        };
        let mut job = ScanJob::new(dt, b, &o).unwrap();
        assert_eq!(job.kernel(), kernel.for_batch(dt.context().caps(), b.len()));
        job.run().unwrap();
        assert!(job.done());
        out.extend(job.sequences().unwrap());
    }
    out
}

fn check_all(stored: &Table, starts: &[u32], seqs: &[Vec<u32>], full: bool) -> f64 {
    let mut worst = 0f64;
    for (s, seq) in starts.iter().zip(seqs) {
        if full {
            assert_eq!(seq.len(), stored.n(), "full-length sequence");
        }
        let c = check_sequence(stored, *s, seq, EPS).unwrap_or_else(|v| panic!("start {s}: {v:?}"));
        worst = worst.max(c.worst_excess);
    }
    worst
}

/// A sweep of the host's shapes, tiles, chunks, batches and start orders over one table;
/// `scripts/test.sh` runs it at lavapipe's subgroup size 8 only (the oracle and edge tests run
/// at 4 as well).
#[test]
fn same_bits_across_shapes_tiles_chunks_batches_and_order() {
    let ctx = ctx();
    let table = fortunes(203);
    let n = table.n() as u32;
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let starts: Vec<u32> = vec![0, 5, 17, 42, 99, 150, 202, 1, 77, 128, 64];
    let base = run_batched(&dt, &starts, starts.len(), &opts(Shape::Untiled, 0));
    check_all(&table, &starts, &base, true);
    let mut configs: Vec<(String, ScanOptions, usize)> = Vec::new();
    for shape in [Shape::Tiled, Shape::PerTile] {
        for tile in [0u32, 37, n, n + 1000] {
            configs.push((
                format!("{shape:?} tile {tile}"),
                opts(shape, tile),
                starts.len(),
            ));
        }
    }
    for chunk in [1usize, 7, 0] {
        for pipelined in [false, true] {
            let o = ScanOptions {
                chunk,
                pipelined,
                ..opts(Shape::Tiled, 50)
            };
            configs.push((
                format!("chunk {chunk} pipelined {pipelined}"),
                o,
                starts.len(),
            ));
        }
    }
    for batch in [1usize, 3] {
        configs.push((format!("batch {batch}"), opts(Shape::PerTile, 64), batch));
    }
    // Batches of 17..64 run in scan blocks of 64 sequences, of 9..16 in blocks of 16: the
    // batch-size configurations above already cross block sizes.
    configs.push((
        "workgroup 16".into(),
        ScanOptions {
            workgroup_size: Some(16),
            ..opts(Shape::Untiled, 0)
        },
        starts.len(),
    ));
    for (name, o, batch) in &configs {
        let got = run_batched(&dt, &starts, *batch, o);
        assert_eq!(got, base, "{name}: sequences differ from untiled");
    }
    // Scan blocks of 64, 32 and 16 sequences (batches of 40, 20 and 5): the same bits.
    let many: Vec<u32> = (0..40).map(|i| (i * 5) % n).collect();
    let o = ScanOptions {
        steps: Some(40),
        ..opts(Shape::Tiled, 64)
    };
    let by40 = run_batched(&dt, &many, 40, &o);
    assert_eq!(run_batched(&dt, &many, 20, &o), by40, "batches of 20");
    assert_eq!(run_batched(&dt, &many, 5, &o), by40, "batches of 5");
    // Shuffled start order: each start's sequence is the same.
    let mut shuffled = starts.clone();
    shuffled.reverse();
    shuffled.swap(0, 4);
    let got = run_batched(&dt, &shuffled, 4, &opts(Shape::Tiled, 37));
    for (s, seq) in shuffled.iter().zip(&got) {
        let i = starts.iter().position(|x| x == s).unwrap();
        assert_eq!(seq, &base[i], "start {s} after shuffling");
    }
    assert_clean(&ctx);
}

#[test]
fn tile_size_one_matches_untiled() {
    // One candidate per tile: N dispatches per step in the per-tile shape.
    let ctx = ctx();
    let table = fortunes(64);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp16).unwrap();
    let starts = [3u32, 0, 63];
    let base = run_batched(&dt, &starts, 3, &opts(Shape::Untiled, 0));
    for shape in [Shape::Tiled, Shape::PerTile] {
        let o = ScanOptions {
            pipelined: true,
            chunk: 5,
            ..opts(shape, 1)
        };
        assert_eq!(run_batched(&dt, &starts, 3, &o), base, "{shape:?} tile 1");
    }
    assert_clean(&ctx);
}

#[test]
fn exactness_oracle_on_real_data_fp32_fp16_centered_and_not() {
    let ctx = ctx();
    let raw = fortunes(320);
    let starts: Vec<u32> = (0..320).step_by(29).collect();
    let mut report = Vec::new();
    for center in [false, true] {
        let table = if center { raw.centered() } else { raw.clone() };
        for precision in [Precision::Fp32, Precision::Fp16] {
            let o = ScanOptions {
                shape: Shape::Tiled,
                tile_size: 100,
                ..ScanOptions::default()
            };
            let (seqs, _) = run_scan(&ctx, &table, precision, &starts, &o).unwrap();
            let worst = check_all(&table.as_stored(precision), &starts, &seqs, true);
            report.push((center, precision, worst));
        }
    }
    eprintln!("worst excess (center, precision, excess): {report:?}");
    assert_clean(&ctx);
}

#[test]
fn exactness_oracle_on_random_data_and_odd_dimension() {
    let ctx = ctx();
    common::for_random_oracle_tables(|table, starts, precision| {
        let (seqs, _) = run_scan(&ctx, table, precision, starts, &ScanOptions::default()).unwrap();
        check_all(&table.as_stored(precision), starts, &seqs, true);
    });
    assert_clean(&ctx);
}

#[test]
fn agreement_between_precisions_is_reported_not_asserted() {
    let ctx = ctx();
    let table = fortunes(300);
    let starts: Vec<u32> = (0..300).step_by(37).collect();
    let (a, _) = run_scan(
        &ctx,
        &table,
        Precision::Fp32,
        &starts,
        &ScanOptions::default(),
    )
    .unwrap();
    let (b, _) = run_scan(
        &ctx,
        &table,
        Precision::Fp16,
        &starts,
        &ScanOptions::default(),
    )
    .unwrap();
    common::report_agreement("fp32 vs fp16 on fortunes[..300]", &a, &b);
    assert_clean(&ctx);
}

#[test]
fn top_k_and_step_by_step_progress() {
    let ctx = ctx();
    let table = fortunes(120);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let full = run_batched(&dt, &[7, 8], 2, &ScanOptions::default());
    let o = ScanOptions {
        steps: Some(10),
        chunk: 3,
        ..ScanOptions::default()
    };
    let mut job = ScanJob::new(&dt, &[7, 8], &o).unwrap();
    assert_eq!(job.total_steps(), 10);
    let r: StepReport = job.step(4).unwrap();
    assert_eq!((r.steps, r.submissions), (4, 2));
    assert_eq!(job.steps_done(), 4);
    assert!(!job.done());
    let partial = job.sequences().unwrap();
    assert_eq!(partial[0], full[0][..5].to_vec());
    job.step(100).unwrap();
    assert!(job.done());
    let seqs = job.sequences().unwrap();
    assert_eq!(seqs[0], full[0][..11].to_vec());
    assert_eq!(seqs[1], full[1][..11].to_vec());
    // top_k beyond N - 1 is clamped.
    let o = ScanOptions {
        steps: Some(10_000),
        ..ScanOptions::default()
    };
    let job = ScanJob::new(&dt, &[0], &o).unwrap();
    assert_eq!(job.total_steps(), 119);
    assert_clean(&ctx);
}

#[test]
fn gpu_time_is_measured_when_timestamps_exist() {
    let ctx = ctx();
    let table = fortunes(100);
    let (_, ns) = run_scan(
        &ctx,
        &table,
        Precision::Fp32,
        &[0, 1],
        &ScanOptions::default(),
    )
    .unwrap();
    if ctx.caps().timestamps {
        assert!(ns > 0, "timestamps on but no GPU time");
    }
    assert_clean(&ctx);
}

#[test]
fn edge_cases_n1_n2_zero_rows_duplicates() {
    let ctx = ctx();
    // The default options for every case; each shape at tile 1 for the duplicates and zero rows.
    let shapes = [
        None,
        Some(Shape::Untiled),
        Some(Shape::Tiled),
        Some(Shape::PerTile),
    ];
    common::edge_cases(&shapes, |shape, t, p, starts| {
        let o = shape.map_or_else(ScanOptions::default, |s| opts(s, 1));
        run_scan(&ctx, t, p, starts, &o).unwrap().0
    });
    assert_clean(&ctx);
}

#[test]
fn bad_starts_are_refused_with_clear_errors() {
    let ctx = ctx();
    let table = fortunes(10);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let o = ScanOptions::default();
    let msg = |r: Result<ScanJob, Error>| match r {
        Err(e @ Error::Invalid(_)) => e.to_string(),
        Err(e) => panic!("wrong error kind: {e}"),
        Ok(_) => panic!("accepted a bad input"),
    };
    let m = msg(ScanJob::new(&dt, &[3, 10], &o));
    assert!(
        m.contains("start 10") && m.contains("out of range") && m.contains("10 rows"),
        "{m}"
    );
    let m = msg(ScanJob::new(&dt, &[4, 2, 4], &o));
    assert!(m.contains("start 4 is repeated"), "{m}");
    let m = msg(ScanJob::new(&dt, &[], &o));
    assert!(m.contains("no starts"), "{m}");
    let m = msg(ScanJob::new(
        &dt,
        &[0],
        &ScanOptions {
            workgroup_size: Some(48),
            ..o.clone()
        },
    ));
    assert!(m.contains("power of two"), "{m}");
    // A size past the device's limit is refused, not silently lowered (2^31 ran as 1,024).
    let m = msg(ScanJob::new(
        &dt,
        &[0],
        &ScanOptions {
            workgroup_size: Some(1 << 31),
            ..o.clone()
        },
    ));
    assert!(m.contains("2147483648") && m.contains("at most"), "{m}");
    assert_clean(&ctx);
}

#[test]
fn bad_tables_are_refused_with_clear_errors() {
    let e = Table::new(vec![], 0, 4).unwrap_err();
    assert!(
        matches!(e, Error::Invalid(_)) && e.to_string().contains("N = 0"),
        "{e}"
    );
    let e = Table::new(vec![], 3, 0).unwrap_err();
    assert!(e.to_string().contains("D = 0"), "{e}");
    let e = Table::new(vec![1.0, 2.0, f32::NAN, 4.0], 2, 2).unwrap_err();
    assert!(e.to_string().contains("row 1"), "{e}");
    let e = Table::new(vec![1.0, f32::INFINITY], 1, 2).unwrap_err();
    assert!(
        e.to_string().contains("row 0") && e.to_string().contains("inf"),
        "{e}"
    );
    let e = Table::new(vec![1.0; 5], 2, 3).unwrap_err();
    assert!(e.to_string().contains("expected N × D"), "{e}");
    // A value beyond the fp16 range cannot be stored as fp16.
    let ctx = ctx();
    let big = Table::new(vec![1.0, 7.0e4, 0.0, 1.0], 2, 2).unwrap();
    let e = DeviceTable::upload(&ctx, &big, Precision::Fp16)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("row 0") && e.to_string().contains("fp16 range"),
        "{e}"
    );
    assert_clean(&ctx);
}

#[test]
fn device_limits_are_named_in_errors() {
    let ctx = ctx();
    let caps = ctx.caps().clone();
    // A table larger than one storage buffer may hold.
    let d = 1024usize;
    let n = (caps.max_buffer_range as usize / (d * 4)) + 1;
    if (n * d * 4) < (1usize << 31) {
        let t = Table::new(vec![0.0; n * d], n, d).unwrap();
        let e = DeviceTable::upload(&ctx, &t, Precision::Fp32)
            .err()
            .unwrap();
        assert!(matches!(e, Error::Limit(_)), "{e}");
        assert!(e.to_string().contains("maxStorageBufferRange"), "{e}");
    }
    // A sequence output larger than one storage buffer: name the buffer and the remedy.
    let n = ((caps.max_buffer_range as f64 / 4.0).sqrt() as usize) + 2;
    if n * n * 4 < (1usize << 31) {
        let t = Table::new(vec![1.0; n], n, 1).unwrap();
        let dt = DeviceTable::upload(&ctx, &t, Precision::Fp32).unwrap();
        let starts: Vec<u32> = (0..n as u32).collect();
        let e = ScanJob::new(&dt, &starts, &ScanOptions::default())
            .err()
            .unwrap();
        assert!(matches!(e, Error::Limit(_)), "{e}");
        let m = e.to_string();
        assert!(
            m.contains("sequence output") && m.contains("smaller batch"),
            "{m}"
        );
        // max_batch names a batch that fits, and one more sequence does not.
        let most = diversity::scan::max_batch(&caps, n, 1, Precision::Fp32, n - 1);
        assert!(most < n, "max_batch {most} should be below N = {n} here");
        let job = ScanJob::new(&dt, &starts[..most], &ScanOptions::default());
        assert!(job.is_ok(), "max_batch {most}: {:?}", job.err());
        drop(job);
        assert!(ScanJob::new(&dt, &starts[..most + 1], &ScanOptions::default()).is_err());
    }
    // A table wider than shared memory works: the scan stages D in chunks.
    let d = caps.shared_memory_bytes as usize / 4 + 3;
    let t = random_table(6, d, 9);
    let (seqs, _) = run_scan(&ctx, &t, Precision::Fp32, &[0, 5], &ScanOptions::default()).unwrap();
    check_all(&t, &[0, 5], &seqs, true);
    assert_clean(&ctx);
}

#[test]
fn device_choice_and_describe() {
    let devices = Context::list_devices().unwrap();
    assert!(!devices.is_empty());
    let e = Context::new(&ContextOptions {
        device: Some("no-such-device-xyz".into()),
        validation: false,
    })
    .err()
    .unwrap();
    let m = e.to_string();
    assert!(
        m.contains("no-such-device-xyz") && m.contains(&devices[0].name),
        "{m}"
    );
    let by_index = Context::new(&ContextOptions {
        device: Some("0".into()),
        validation: false,
    })
    .unwrap();
    assert_eq!(by_index.caps().name, devices[0].name);
    let d = by_index.describe();
    for word in [
        "device:",
        "fp16 storage:",
        "subgroup:",
        "shared memory:",
        "L2:",
        "timestamps:",
    ] {
        assert!(d.contains(word), "describe lacks {word}: {d}");
    }
    assert!(by_index.caps().l2_bytes > 0);
    assert!(!by_index.validation_enabled());
}

#[test]
fn resume_from_a_prefix_is_bit_identical() {
    let ctx = ctx();
    for (center, precision) in [(false, Precision::Fp32), (true, Precision::Fp16)] {
        let raw = fortunes(150);
        let table = if center { raw.centered() } else { raw };
        let dt = DeviceTable::upload(&ctx, &table, precision).unwrap();
        let starts = [3u32, 77, 0, 149, 12];
        let o = ScanOptions {
            steps: Some(60),
            chunk: 9,
            ..ScanOptions::default()
        };
        let mut whole = ScanJob::new(&dt, &starts, &o).unwrap();
        whole.run().unwrap();
        let want = whole.sequences_flat().unwrap();
        // Stop after 25 steps, keep the columns chunk by chunk as the driver does, resume.
        let mut first = ScanJob::new(&dt, &starts, &o).unwrap();
        let mut cols: Vec<Vec<u32>> = vec![Vec::new(); starts.len()];
        let mut have = 0;
        for n in [9usize, 9, 7] {
            first.step(n).unwrap();
            let c = first.sequence_columns(have, first.sequence_len()).unwrap();
            let w = first.sequence_len() - have;
            for (i, row) in c.chunks_exact(w).enumerate() {
                cols[i].extend_from_slice(row);
            }
            have = first.sequence_len();
        }
        assert_eq!(have, 26);
        let prefixes: Vec<u32> = cols.concat();
        let mut rest = ScanJob::resume(&dt, &table, &starts, &prefixes, have, &o).unwrap();
        assert_eq!(rest.steps_done(), 25);
        rest.run().unwrap();
        assert!(rest.done());
        assert_eq!(
            rest.sequences_flat().unwrap(),
            want,
            "center {center} {precision:?}"
        );
        // Prefixes that do not fit their starts are refused.
        let e = ScanJob::resume(&dt, &table, &[3], &[4, 5], 2, &o)
            .err()
            .unwrap();
        assert!(e.to_string().contains("begins with 4"), "{e}");
        let e = ScanJob::resume(&dt, &table, &[3], &[3, 3], 2, &o)
            .err()
            .unwrap();
        assert!(e.to_string().contains("repeated"), "{e}");
    }
    assert_clean(&ctx);
}

/// The 128 × 128 kernel gives the 64-candidate kernel's bits for every shape, tile, chunk, batch
/// and precision on real data: N not a multiple of 128, batches not a multiple of 128 (and above
/// 128: two row blocks). A sweep of the host's shapes over one table; `scripts/test.sh` runs it
/// at lavapipe's subgroup size 8 only (the edge shapes below run at 4 as well).
#[test]
fn block128_kernel_gives_the_same_bits_as_block64() {
    let ctx = ctx();
    let k64 = ScanKernel::Block64;
    let k128 = ScanKernel::Block128;
    // Real data, N = 203 (one full and one partial 128-block), 11 starts.
    let table = fortunes(203);
    let n = table.n() as u32;
    let starts: Vec<u32> = vec![0, 5, 17, 42, 99, 150, 202, 1, 77, 128, 64];
    for precision in [Precision::Fp32, Precision::Fp16] {
        let dt = DeviceTable::upload(&ctx, &table, precision).unwrap();
        let base = run_batched_with(&dt, &starts, starts.len(), &opts(Shape::Untiled, 0), k64);
        let mut configs: Vec<(String, ScanOptions, usize)> =
            vec![("untiled".into(), opts(Shape::Untiled, 0), starts.len())];
        for shape in [Shape::Tiled, Shape::PerTile] {
            for tile in [1u32, 37, 128, 129, n, n + 1000] {
                configs.push((
                    format!("{shape:?} tile {tile}"),
                    opts(shape, tile),
                    starts.len(),
                ));
            }
        }
        for (chunk, pipelined) in [(1usize, true), (7, false), (0, true)] {
            configs.push((
                format!("chunk {chunk} pipelined {pipelined}"),
                ScanOptions {
                    chunk,
                    pipelined,
                    ..opts(Shape::Tiled, 50)
                },
                starts.len(),
            ));
        }
        configs.push(("batch 1".into(), opts(Shape::PerTile, 64), 1));
        configs.push(("batch 3".into(), opts(Shape::Tiled, 100), 3));
        for (name, o, batch) in &configs {
            let got = run_batched_with(&dt, &starts, *batch, o, k128);
            assert_eq!(
                got, base,
                "{precision:?} {name}: block128 differs from block64"
            );
        }
        // A batch of 150 (two row blocks of 128, the second partial), 24 steps.
        let many: Vec<u32> = (0..150).map(|i| (i * 11) % n).collect();
        let o = ScanOptions {
            steps: Some(24),
            chunk: 8,
            ..opts(Shape::Tiled, 64)
        };
        let a = run_batched_with(&dt, &many, 150, &o, k64);
        assert_eq!(
            run_batched_with(&dt, &many, 150, &o, k128),
            a,
            "{precision:?} batch of 150"
        );
        let o = ScanOptions {
            steps: Some(24),
            ..opts(Shape::PerTile, 100)
        };
        assert_eq!(
            run_batched_with(&dt, &many, 131, &o, k128),
            a,
            "{precision:?} batches of 131 + 19, per tile"
        );
    }
    assert_clean(&ctx);
}

/// The 128 × 128 kernel gives the 64-candidate kernel's bits on shapes that stress its edges:
/// N = 1, 2, < 128, = 128, = 129, > 256 and odd D or D not a multiple of its 8-dim stages, both
/// precisions, untiled and per tile.
#[test]
fn block128_kernel_gives_block64s_bits_on_edge_shapes() {
    let ctx = ctx();
    let k64 = ScanKernel::Block64;
    let k128 = ScanKernel::Block128;
    for (nn, d, seed) in [
        (1usize, 5usize, 11u64),
        (2, 3, 12),
        (40, 1, 13),
        (97, 7, 14),
        (128, 8, 15),
        (129, 13, 16),
        (300, 383, 17),
    ] {
        let t = random_table(nn, d, seed);
        let starts: Vec<u32> = (0..nn as u32).step_by(7).collect();
        for precision in [Precision::Fp32, Precision::Fp16] {
            let dt = DeviceTable::upload(&ctx, &t, precision).unwrap();
            let o = ScanOptions {
                steps: Some(60),
                ..opts(Shape::Untiled, 0)
            };
            let base = run_batched_with(&dt, &starts, starts.len(), &o, k64);
            for o2 in [
                o.clone(),
                ScanOptions {
                    chunk: 9,
                    pipelined: true,
                    ..opts(Shape::PerTile, 130)
                },
            ] {
                let o2 = ScanOptions {
                    steps: Some(60),
                    ..o2
                };
                let got = run_batched_with(&dt, &starts, starts.len(), &o2, k128);
                assert_eq!(got, base, "N {nn} D {d} {precision:?} {o2:?}");
            }
        }
    }
    assert_clean(&ctx);
}

/// The float64 ε-argmax oracle on the 128 × 128 kernel's own output.
#[test]
fn block128_kernel_passes_the_exactness_oracle() {
    let ctx = ctx();
    let raw = fortunes(320);
    let starts: Vec<u32> = (0..320).step_by(29).collect();
    let o = ScanOptions {
        shape: Shape::Tiled,
        tile_size: 100,
        ..ScanOptions::default()
    };
    for center in [false, true] {
        let table = if center { raw.centered() } else { raw.clone() };
        for precision in [Precision::Fp32, Precision::Fp16] {
            let dt = DeviceTable::upload(&ctx, &table, precision).unwrap();
            let seqs = run_batched_with(&dt, &starts, starts.len(), &o, ScanKernel::Block128);
            check_all(&table.as_stored(precision), &starts, &seqs, true);
        }
    }
    for (n, d, seed) in [(150usize, 64usize, 1u64), (97, 7, 2), (33, 383, 4)] {
        let table = random_table(n, d, seed);
        let starts: Vec<u32> = (0..n as u32).step_by(9).collect();
        for precision in [Precision::Fp32, Precision::Fp16] {
            let dt = DeviceTable::upload(&ctx, &table, precision).unwrap();
            let seqs = run_batched_with(
                &dt,
                &starts,
                starts.len(),
                &ScanOptions::default(),
                ScanKernel::Block128,
            );
            check_all(&table.as_stored(precision), &starts, &seqs, true);
        }
    }
    assert_clean(&ctx);
}

/// Where `auto` runs the tensor-core filter, the batch sizes the drivers use leave room for its
/// band lists (otherwise a large N failed at job creation instead of taking smaller batches).
#[test]
fn max_batch_counts_the_filter_buffers_where_auto_runs_it() {
    let ctx = ctx();
    let mut caps = ctx.caps().clone();
    caps.max_buffer_range = 64 << 20;
    caps.memory_budget_bytes = 64 << 30;
    caps.coopmat = false;
    let plain = diversity::scan::max_batch(&caps, 65_536, 768, Precision::Fp16, 500);
    caps.coopmat = true;
    let filter = diversity::scan::max_batch(&caps, 65_536, 768, Precision::Fp16, 500);
    // 512 blocks of 128 candidates × 18 words: 36,864 bytes of band lists a sequence.
    assert!(filter <= (64 << 20) / 36_864, "{filter}");
    assert!(filter < plain, "{filter} vs {plain}");
}

#[test]
fn scan_kernel_names_parse() {
    for k in [
        ScanKernel::Auto,
        ScanKernel::Block64,
        ScanKernel::Block128,
        ScanKernel::Coopmat,
        ScanKernel::Filter,
    ] {
        assert_eq!(k.name().parse::<ScanKernel>().unwrap(), k);
    }
    assert!("block32".parse::<ScanKernel>().is_err());
    assert_eq!(ScanKernel::Block128.block_n(), 128);
    assert_eq!(ScanKernel::Block64.block_n(), 64);
    assert_eq!(ScanKernel::Coopmat.block_n(), 128);
    assert_eq!(ScanKernel::Filter.block_n(), 32);
    let ctx = ctx();
    let mut caps = ctx.caps().clone();
    // The auto rule (unless DIVERSITY_SCAN_KERNEL names a kernel): the tensor-core filter where
    // the device has cooperative matrices, else 128-blocks from 128 sequences.
    if std::env::var(diversity::scan::ENV_SCAN_KERNEL).is_err() {
        caps.coopmat = false;
        assert_eq!(ScanKernel::Auto.for_batch(&caps, 127), ScanKernel::Block64);
        assert_eq!(ScanKernel::Auto.for_batch(&caps, 128), ScanKernel::Block128);
        caps.coopmat = true;
        assert_eq!(ScanKernel::Auto.for_batch(&caps, 5), ScanKernel::Coopmat);
    }
    assert_eq!(
        ScanKernel::Block64.for_batch(&caps, 5000),
        ScanKernel::Block64
    );
}
