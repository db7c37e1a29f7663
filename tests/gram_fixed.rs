//! The gram engine on fixed-point keys (`shaders/gram_fixed.comp`) on a real Vulkan device
//! (lavapipe in CI), validation layers on: the float64 oracle along the engine's own prefix on
//! near-duplicate clusters, real data centred and not, fp32 and fp16, a table whose running sum
//! grows past the keys' range (rescales); the same bits across placements, workgroup sizes,
//! reductions, chunks, batches and a resume.

mod common;
use common::{assert_clean, clusters, ctx, fortunes, random_table};
use diversity::gram::GramBuild;
use diversity::reference::check_sequence;
use diversity::{Context, DeviceTable, Gram, GramJob, GramOptions, Placement, Precision, Table};

const EPS: f64 = 1e-5;

fn fixed_gram(dt: &DeviceTable) -> Gram {
    common::gram_of(dt, true)
}

fn run(gram: &Gram, starts: &[u32], batch: usize, o: &GramOptions) -> Vec<Vec<u32>> {
    common::gram_rows(gram, starts, batch, o)
}

fn worst(stored: &Table, starts: &[u32], seqs: &[Vec<u32>]) -> f64 {
    let mut w = 0f64;
    for (s, seq) in starts.iter().zip(seqs) {
        let c = check_sequence(stored, *s, seq, EPS).unwrap_or_else(|v| panic!("start {s}: {v:?}"));
        w = w.max(c.worst_excess);
    }
    w
}

/// A context whose shaders have float64 (fixed-point keys need it); `None`, said on stderr, on a
/// device without.
fn float64_ctx() -> Option<Context> {
    let ctx = ctx();
    if ctx.caps().float64 {
        return Some(ctx);
    }
    eprintln!("no float64 in shaders on this device: fixed-point keys untested");
    None
}

#[test]
fn fixed_keys_hold_the_oracle_on_near_duplicates_and_real_data() {
    let Some(ctx) = float64_ctx() else {
        return;
    };
    let table = clusters(100, 12, 1024);
    let starts: Vec<u32> = vec![0, 600, 1199];
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let gram = fixed_gram(&dt);
    let mut job = GramJob::new(&gram, &starts, &GramOptions::default()).unwrap();
    job.run().unwrap();
    let got = job.sequences().unwrap();
    let bands = job.band_rescores().unwrap();
    let wide = job.wide_bands().unwrap();
    let w = worst(&table, &starts, &got);
    eprintln!(
        "fixed keys, clusters 1,200 × 1,024: worst excess {w:.3e}, bands {bands:?}, wide {wide:?}"
    );
    assert!(w <= 1e-12, "worst excess {w:.3e}");
    let raw = fortunes(2048);
    for center in [false, true] {
        let t = if center { raw.centered() } else { raw.clone() };
        for p in [Precision::Fp32, Precision::Fp16] {
            let dt = DeviceTable::upload(&ctx, &t, p).unwrap();
            let gram = fixed_gram(&dt);
            let starts = [0u32, 1337, 2047];
            let mut job = GramJob::new(&gram, &starts, &GramOptions::default()).unwrap();
            job.run().unwrap();
            let seqs = job.sequences().unwrap();
            let w = worst(&t.as_stored(p), &starts, &seqs);
            eprintln!(
                "fixed keys, fortunes 2,048 center {center} {p:?}: worst excess {w:.3e}, bands {:?}, scale {:?}",
                job.band_rescores().unwrap(),
                gram.fixed_scale()
            );
            assert!(w <= 1e-12, "center {center} {p:?}: {w:.3e}");
        }
    }
    assert_clean(&ctx);
}

#[test]
fn fixed_keys_same_bits_across_shapes_and_resume() {
    let Some(ctx) = float64_ctx() else {
        return;
    };
    // A common component: the running sum grows with the sequence, so the keys rescale. N = 301:
    // G's rows are padded to 304 entries, and in registers the last run of four holds one item.
    let raw = random_table(301, 48, 5);
    let data: Vec<f32> = raw.data().iter().map(|v| v + 3.0).collect();
    let table = Table::new(data, 301, 48).unwrap();
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let gram = fixed_gram(&dt);
    let starts: Vec<u32> = vec![0, 5, 17, 42, 99, 150, 299, 1, 77];
    let base = run(&gram, &starts, starts.len(), &GramOptions::default());
    assert!(worst(&table, &starts, &base) <= 1e-12);
    // Each sequence's settles, the candidates they re-scored and its keys' shifts: events of
    // its own arithmetic, so the same in every shape below (a shape that skipped or repeated a
    // settle or a shift would show here even where its picks happen to agree).
    let settles = |o: &GramOptions, batch: usize| {
        let (mut b, mut c, mut sh) = (Vec::new(), Vec::new(), Vec::new());
        for part in starts.chunks(batch) {
            let mut job = GramJob::new(&gram, part, o).unwrap();
            job.run().unwrap();
            b.extend(job.band_rescores().unwrap());
            c.extend(job.band_candidates().unwrap());
            sh.extend(job.key_shifts().unwrap());
        }
        (b, c, sh)
    };
    let base_settles = settles(&GramOptions::default(), starts.len());
    assert!(base_settles.0.iter().any(|&b| b > 0), "{base_settles:?}");
    // The common component makes every sequence's keys shift (the diagnostic reads the bits).
    assert!(base_settles.2.iter().all(|&k| k > 0), "{base_settles:?}");
    // A build without GF_PROFILE leaves no profile (its mark absent): nothing is reported. A
    // build with it (run with DIVERSITY_SHADER_CLOCK=1) reports every sequence's ticks.
    let profiled = common::built_with("GF_PROFILE");
    let mut job = GramJob::new(&gram, &starts, &GramOptions::default()).unwrap();
    job.step(5).unwrap();
    match job.profile_ticks().unwrap() {
        None => assert!(!profiled, "a GF_PROFILE build reported no profile"),
        Some(p) => {
            assert!(profiled, "a profile without GF_PROFILE");
            assert_eq!(p.len(), starts.len());
            assert!(p.iter().all(|t| t[0] > 0.0 && t[1] > 0.0), "{p:?}");
        }
    }
    for placement in [Placement::Registers, Placement::Memory] {
        for wg in [16u32, 64, 256] {
            for subgroups in [false, ctx.caps().subgroup_arithmetic] {
                let o = GramOptions {
                    placement,
                    workgroup_size: Some(wg),
                    subgroups: Some(subgroups),
                    ..GramOptions::default()
                };
                assert_eq!(
                    run(&gram, &starts, 4, &o),
                    base,
                    "{placement:?} wg {wg} subgroups {subgroups}"
                );
                assert_eq!(
                    settles(&o, 4),
                    base_settles,
                    "settles: {placement:?} wg {wg} subgroups {subgroups}"
                );
            }
        }
    }
    for chunk in [1usize, 7, 0] {
        let o = GramOptions {
            chunk,
            steps_per_dispatch: if chunk == 0 { 1000 } else { 0 },
            ..GramOptions::default()
        };
        assert_eq!(run(&gram, &starts, 3, &o), base, "chunk {chunk}");
    }
    // Row loads in flight (19 keys a lane at 16 invocations: groups of 1, 3, 8 and 16, the last
    // ones partial).
    for loads in [1usize, 3, 8, 16] {
        let o = GramOptions {
            placement: Placement::Registers,
            workgroup_size: Some(16),
            loads,
            ..GramOptions::default()
        };
        assert_eq!(run(&gram, &starts, 9, &o), base, "loads {loads}");
    }
    // Every key recomputed from the float64 running sum each 16 steps (dispatches cut there):
    // its own bits, the same across shapes, chunks and a resume, and the oracle.
    let refresh = GramOptions {
        judge_refresh: Some(16),
        ..GramOptions::default()
    };
    let mut job = GramJob::new(&gram, &starts, &refresh).unwrap();
    job.run().unwrap();
    let rbase = job.sequences().unwrap();
    assert!(
        job.refreshes().unwrap().iter().all(|&r| r == 299 / 16),
        "{:?}",
        job.refreshes()
    );
    assert!(worst(&table, &starts, &rbase) <= 1e-12);
    for (placement, chunk, spd) in [
        (Placement::Registers, 7usize, 0usize),
        (Placement::Memory, 5, 0),
        (Placement::Registers, 0, 1000),
        (Placement::Memory, 1, 0),
    ] {
        let o = GramOptions {
            placement,
            chunk,
            steps_per_dispatch: spd,
            ..refresh.clone()
        };
        assert_eq!(
            run(&gram, &starts, 4, &o),
            rbase,
            "refresh {placement:?} chunk {chunk}"
        );
    }
    let o = GramOptions {
        chunk: 9,
        ..refresh.clone()
    };
    let mut rest = common::gram_resumed_after(&gram, &starts, &o, 100);
    rest.run().unwrap();
    assert_eq!(rest.sequences().unwrap(), rbase, "refresh, resume");
    let o = GramOptions {
        chunk: 9,
        ..GramOptions::default()
    };
    let mut rest = common::gram_resumed_after(&gram, &starts, &o, 130);
    rest.run().unwrap();
    assert_eq!(rest.sequences().unwrap(), base, "resume");
    assert_clean(&ctx);
}

/// Exact duplicates tie exactly in every arithmetic: 100 copies of one row make bands wider than
/// one window of 64 whenever they are the best, which the windows path settles (lowest index
/// first), the same bits in every shape, and the oracle holds.
#[test]
fn fixed_keys_settle_wide_bands_of_duplicates() {
    let Some(ctx) = float64_ctx() else {
        return;
    };
    let d = 24;
    let raw = random_table(120, d, 9);
    let mut data = Vec::new();
    for i in 0..220usize {
        // Rows 10, 12, …, 208 are copies of row 0; every other row is distinct (a random row
        // moved by 1e-3·i).
        if (10..210).contains(&i) && i % 2 == 0 {
            data.extend_from_slice(raw.row(0));
        } else {
            data.extend(raw.row((i * 7) % 120).iter().map(|v| v + 1e-3 * i as f32));
        }
    }
    let table = Table::new(data, 220, d).unwrap().centered();
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let gram = fixed_gram(&dt);
    let starts: Vec<u32> = vec![1, 3, 219, 50, 0];
    let mut job = GramJob::new(&gram, &starts, &GramOptions::default()).unwrap();
    job.run().unwrap();
    let base = job.sequences().unwrap();
    let wide = job.wide_bands().unwrap();
    eprintln!(
        "wide bands settled: {wide:?}, bands {:?}",
        job.band_rescores().unwrap()
    );
    assert!(
        wide.iter().any(|&w| w > 0),
        "no band wider than 64: {wide:?}"
    );
    assert!(worst(&table, &starts, &base) <= 1e-12);
    for placement in [Placement::Registers, Placement::Memory] {
        for wg in [64u32, 128] {
            let o = GramOptions {
                placement,
                workgroup_size: Some(wg),
                ..GramOptions::default()
            };
            assert_eq!(run(&gram, &starts, 2, &o), base, "{placement:?} wg {wg}");
        }
    }
    assert_clean(&ctx);
}

fn run_fixed(table: &Table, p: Precision, starts: &[u32], o: &GramOptions) -> Vec<Vec<u32>> {
    let ctx = ctx();
    let dt = DeviceTable::upload(&ctx, table, p).unwrap();
    run(&fixed_gram(&dt), starts, starts.len(), o)
}

/// The cases worked by hand (tests/common), on fixed-point keys: N = 1 and 2, duplicates,
/// |c| = 0 (every key 0: the lowest index wins), zero rows (d = 1), both placements.
#[test]
fn fixed_keys_edge_cases_n1_n2_zero_rows_duplicates() {
    let Some(ctx) = float64_ctx() else {
        return;
    };
    let placements = [Placement::Auto, Placement::Registers, Placement::Memory];
    common::edge_cases(&placements, |placement, t, p, starts| {
        run_fixed(
            t,
            p,
            starts,
            &GramOptions {
                placement,
                ..GramOptions::default()
            },
        )
    });
    assert_clean(&ctx);
}

/// Top-k prefixes are the whole sequences' prefixes; a fixed-point G refuses options that name
/// float sums, with the reason and the way out; the default falls back to float sums on a device
/// without float64 (checked in a child process with `DIVERSITY_DISABLE=float64`).
#[test]
fn fixed_keys_top_k_refusals_and_the_float64_fallback() {
    let ctx = ctx();
    let table = fortunes(120);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp16).unwrap();
    if !ctx.caps().float64 {
        // The child process (or a device without float64): the default G is float32, the
        // default job runs float sums with the judge, and a fixed-point G is refused.
        let g = Gram::build(&dt).unwrap();
        assert_eq!(g.fixed_scale(), None);
        let mut job = GramJob::new(&g, &[0, 7], &GramOptions::default()).unwrap();
        job.run().unwrap();
        assert!(job.judge());
        let e = Gram::build_with(
            &dt,
            &GramBuild {
                fixed: Some(true),
                ..GramBuild::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("float64"), "{e}");
        let s = diversity::gram::summation(ctx.caps(), 120, 384, &GramOptions::default()).unwrap();
        assert!(s.starts_with("compensated; G dot2; judge"), "{s}");
        assert_clean(&ctx);
        return;
    }
    let g = Gram::build(&dt).unwrap();
    assert!(
        g.fixed_scale().is_some(),
        "the default G is fixed-point where float64 exists"
    );
    let whole = run(&g, &[0, 7, 119], 3, &GramOptions::default());
    let top = run(
        &g,
        &[0, 7, 119],
        2,
        &GramOptions {
            steps: Some(17),
            chunk: 5,
            ..GramOptions::default()
        },
    );
    for (w, t) in whole.iter().zip(&top) {
        assert_eq!(&w[..18], &t[..]);
    }
    for (o, what) in [
        (
            GramOptions {
                compensated: Some(true),
                ..GramOptions::default()
            },
            "compensated sums",
        ),
        (
            GramOptions {
                compensated: Some(false),
                ..GramOptions::default()
            },
            "plain sums",
        ),
        (
            GramOptions {
                judge: Some(false),
                ..GramOptions::default()
            },
            "no judge",
        ),
    ] {
        let e = GramJob::new(&g, &[0], &o).err().unwrap().to_string();
        assert!(
            e.contains("fixed-point") && e.contains(what) && e.contains("dtable:gram(opts)"),
            "{e}"
        );
    }
    assert_eq!(
        diversity::gram::summation(ctx.caps(), 120, 384, &GramOptions::default()).unwrap(),
        "fixed; G dot64"
    );
    assert_clean(&ctx);
    drop(dt);
    common::rerun_with_env(
        "fixed_keys_top_k_refusals_and_the_float64_fallback",
        "DIVERSITY_DISABLE",
        "float64",
    );
}
