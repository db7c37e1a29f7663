//! Sequences on demand and caches that grow: on every engine (the host engine, and the scan and
//! gram engines on the Vulkan device), a sequencer's k-step prefix is the batch job's prefix for
//! the same options, bit for bit, whatever rows of G were built before; a cache grown by
//! appended rows is a fresh run's, for several append sizes, top_k and full length, fp32 and
//! fp16; bad queries and old rows that are not a cache of the table are refused by name.

mod common;

use common::{assert_clean, ctx, fortunes, random_table};
use diversity::{
    Engine, GramPolicy, JobOptions, Mode, Precision, Sequencer, SequencerOptions, Table,
};

/// The batch job's sequences from `starts`, `steps` steps each (all N − 1: `None`).
fn batch(engine: &mut Engine, mode: Mode, starts: &[u32], steps: Option<usize>) -> Vec<u32> {
    let mut opts = JobOptions {
        mode,
        ..Default::default()
    };
    opts.gram.steps = steps;
    opts.scan.steps = steps;
    opts.gram.chunk = 5;
    opts.scan.chunk = 5;
    let mut job = engine.job(starts, &opts).unwrap();
    job.run().unwrap();
    job.sequences_flat().unwrap()
}

fn sequencer(engine: &mut Engine, mode: Mode, g: GramPolicy) -> Sequencer {
    let job = JobOptions {
        mode,
        ..Default::default()
    };
    Sequencer::new(engine, SequencerOptions { job, g }).unwrap()
}

/// Every query's rows equal the batch rows' first k + 1 entries, for several k and start sets
/// asked in an order of their own.
fn check_prefixes(engine: &mut Engine, mode: Mode, g: GramPolicy, steps: usize, what: &str) {
    let n = engine.shape().0;
    let starts: Vec<u32> = (0..n as u32).step_by(n / 9).collect();
    let want = batch(engine, mode, &starts, Some(steps));
    let len = steps.min(n - 1) + 1;
    let mut s = sequencer(engine, mode, g);
    for k in [0usize, 1, 7, steps] {
        let kl = k.min(n - 1) + 1;
        for (i, &st) in starts.iter().enumerate().rev() {
            let got = s.sequence(st, k).unwrap();
            assert_eq!(
                got[..],
                want[i * len..i * len + kl],
                "{what}: start {st}, k {k}"
            );
        }
        let two = [starts[3], starts[1]];
        let got = s.sequences(&two, k).unwrap();
        assert_eq!(
            got[..kl],
            want[3 * len..3 * len + kl],
            "{what}: k {k}, batch"
        );
        assert_eq!(got[kl..], want[len..len + kl], "{what}: k {k}, batch");
    }
    let r = s.report();
    assert_eq!(r.queries, 4 * (starts.len() as u64 + 1), "{what}");
    assert_eq!(r.mode, engine.mode_for(mode).mode, "{what}");
}

fn host_engine(t: &Table, p: Precision) -> Engine {
    Engine::host_only(t, p).unwrap()
}

#[test]
fn host_prefixes_are_the_batch_jobs_for_every_g_policy() {
    for (t, p, what) in [
        (fortunes(300), Precision::Fp32, "fortunes fp32"),
        (
            fortunes(300).centered(),
            Precision::Fp16,
            "fortunes centred fp16",
        ),
        (random_table(203, 19, 5), Precision::Fp32, "random 203 × 19"),
    ] {
        for g in [GramPolicy::Rows, GramPolicy::Auto, GramPolicy::Whole] {
            // A fresh engine each time: the sequencer builds its own rows.
            check_prefixes(&mut host_engine(&t, p), Mode::Gram, g, 40, what);
        }
        check_prefixes(
            &mut host_engine(&t, p),
            Mode::Scan,
            GramPolicy::Auto,
            12,
            what,
        );
    }
}

#[test]
fn host_rows_are_built_as_picks_need_them_then_whole() {
    let t = fortunes(400);
    let mut e = host_engine(&t, Precision::Fp32);
    let want = batch(
        &mut host_engine(&t, Precision::Fp32),
        Mode::Gram,
        &[17],
        None,
    );
    let mut s = sequencer(&mut e, Mode::Gram, GramPolicy::Auto);
    assert_eq!((s.report().g, s.report().rows_built), ("none", 0));
    assert_eq!(s.sequence(17, 10).unwrap(), want[..11]);
    // Ten steps read the rows of the start and of the first ten picks but the last: 10 rows.
    let r = s.report();
    assert_eq!(
        (r.engine, r.g, r.rows_built, r.n),
        ("host", "rows", 10, 400)
    );
    // A whole sequence reads every row: a quarter built, the rest follows whole.
    assert_eq!(s.sequence(17, 1000).unwrap(), want);
    let r = s.report();
    assert_eq!(
        (r.g, r.rows_built, r.queries, r.sequences),
        ("whole", 400, 2, 2)
    );
    assert!(r.g_ns > 0 && r.query_ns >= r.g_ns, "{r:?}");
    // The engine shares the rows: its batch jobs read the same G.
    assert_eq!(batch(&mut e, Mode::Gram, &[17], None), want);
}

#[test]
fn device_prefixes_are_the_batch_jobs_for_scan_and_gram() {
    let ctx = ctx();
    for (t, p, what) in [
        (fortunes(250), Precision::Fp16, "fortunes fp16"),
        (
            fortunes(250).centered(),
            Precision::Fp32,
            "fortunes centred fp32",
        ),
    ] {
        for mode in [Mode::Scan, Mode::Gram] {
            let mut e = Engine::upload(&ctx, &t, p).unwrap();
            check_prefixes(&mut e, mode, GramPolicy::Auto, 20, what);
            let r = sequencer(&mut e, mode, GramPolicy::Auto).report();
            assert_eq!(r.engine, "device", "{what}");
        }
    }
    assert_clean(&ctx);
}

#[test]
fn bad_queries_are_refused_by_name() {
    let mut e = host_engine(&fortunes(50), Precision::Fp32);
    let mut s = sequencer(&mut e, Mode::Auto, GramPolicy::Auto);
    let msg = |r: diversity::Result<Vec<u32>>| r.unwrap_err().to_string();
    assert!(
        msg(s.sequence(50, 3)).contains("50"),
        "{}",
        msg(s.sequence(50, 3))
    );
    assert!(msg(s.sequence(50, 0)).contains("50"));
    assert!(msg(s.sequences(&[], 3)).contains("no starts"));
    assert!(msg(s.sequences(&[1, 1], 3)).contains('1'));
    let r = s.report();
    assert_eq!((r.queries, r.sequences, r.rows_built), (0, 0, 0));
}

/// Growing caches: the old table's sequences (every start, `steps`), then `grow` on the table
/// with rows appended, against a fresh run on it.
fn check_grow(
    make: &dyn Fn(&Table) -> Engine,
    t: &Table,
    n_old: usize,
    mode: Mode,
    steps: Option<usize>,
    what: &str,
) -> diversity::grow::GrowReport {
    let old = t.head(n_old).unwrap();
    let all_old: Vec<u32> = (0..n_old as u32).collect();
    let rows = batch(&mut make(&old), mode, &all_old, steps);
    let len = rows.len() / n_old;
    let mut e = make(t);
    let all: Vec<u32> = (0..t.n() as u32).collect();
    let want = batch(&mut e, mode, &all, steps);
    let mut opts = JobOptions {
        mode,
        ..Default::default()
    };
    opts.gram.steps = steps;
    opts.scan.steps = steps;
    let mut e = make(t);
    let (got, r) = diversity::grow::grow(&mut e, t, n_old, &rows, len, &opts, None).unwrap();
    assert!(
        got == want,
        "{what}: grown rows differ from a fresh run ({r:?})"
    );
    assert_eq!(r.kept + r.recomputed, n_old, "{what}");
    assert_eq!(r.new_starts, t.n() - n_old, "{what}");
    assert!(r.steps_computed <= r.steps_total, "{what}: {r:?}");
    r
}

#[test]
fn grown_caches_are_a_fresh_runs_on_the_host() {
    for (t, p) in [
        (fortunes(160), Precision::Fp32),
        (fortunes(160), Precision::Fp16),
        (random_table(90, 12, 3), Precision::Fp32),
    ] {
        let make = |t: &Table| host_engine(t, p);
        let n = t.n();
        for appended in [1usize, 4, 23] {
            for steps in [Some(0), Some(6), Some(30), None] {
                let what = format!("host {p:?} n {n} +{appended} steps {steps:?}");
                let r = check_grow(&make, &t, n - appended, Mode::Auto, steps, &what);
                if steps == Some(6) && appended == 1 && n == 160 {
                    // One appended row rarely reaches the first six picks: most rows are kept.
                    assert!(r.kept > n / 2, "{what}: {r:?}");
                }
            }
        }
        // The scan on the host, top_k.
        check_grow(&make, &t, n - 3, Mode::Scan, Some(8), "host scan");
    }
}

#[test]
fn grown_caches_are_a_fresh_runs_on_the_device() {
    let ctx = ctx();
    let t = fortunes(110);
    for p in [Precision::Fp32, Precision::Fp16] {
        let make = |t: &Table| Engine::upload(&ctx, t, p).unwrap();
        for mode in [Mode::Gram, Mode::Scan] {
            for (appended, steps) in [(2, Some(9)), (15, Some(9)), (5, None)] {
                let what = format!("device {p:?} {mode:?} +{appended} steps {steps:?}");
                check_grow(&make, &t, t.n() - appended, mode, steps, &what);
            }
        }
    }
    assert_clean(&ctx);
}

#[test]
fn grow_refuses_what_is_not_an_old_cache_of_the_table() {
    let t = fortunes(40);
    let opts = JobOptions {
        mode: Mode::Gram,
        ..Default::default()
    };
    let rows: Vec<u32> = (0..30u32).flat_map(|s| [s, (s + 1) % 30]).collect();
    let err = |n_old: usize, rows: &[u32], len: usize| {
        diversity::grow::grow(
            &mut host_engine(&t, Precision::Fp32),
            &t,
            n_old,
            rows,
            len,
            &opts,
            None,
        )
        .unwrap_err()
        .to_string()
    };
    assert!(err(40, &rows, 2).contains("nothing appended"));
    assert!(err(30, &rows[..58], 2).contains("58 old entries"));
    let mut shifted = rows.clone();
    shifted.swap(0, 2);
    assert!(err(30, &shifted, 2).contains("begins with 1"));
    let mut past = rows.clone();
    past[1] = 35;
    assert!(err(30, &past, 2).contains("holds 35"));
    // Two-entry rows are top_k 1; full-length options do not match them.
    assert!(err(30, &rows, 2).contains("the options give 30"));
}

#[test]
fn a_grown_cache_resumes_from_its_checkpoint_with_the_same_rows() {
    let t = fortunes(150);
    let n_old = 146;
    let mut opts = JobOptions::default();
    opts.gram.steps = Some(12);
    opts.scan.steps = Some(12);
    let old = t.head(n_old).unwrap();
    let all: Vec<u32> = (0..n_old as u32).collect();
    let rows = batch(
        &mut host_engine(&old, Precision::Fp32),
        Mode::Auto,
        &all,
        Some(12),
    );
    let dir = common::TempDir::new("grow-checkpoint");
    let partial = dir.path("partial");
    let ck = |resume| diversity::grow::Checkpoint {
        dir: &partial,
        resume,
    };
    let grow = |resume| {
        let mut e = host_engine(&t, Precision::Fp32);
        diversity::grow::grow(&mut e, &t, n_old, &rows, 13, &opts, Some(ck(resume))).unwrap()
    };
    let (want, first) = grow(false);
    assert_eq!(first.resumed_jobs, 0);
    let files = std::fs::read_dir(dir.path("partial")).unwrap().count();
    assert_eq!(files, first.jobs, "one file a job");
    // Every job from the checkpoint: the same rows, nothing computed.
    let (got, r) = grow(true);
    assert_eq!((got == want, r.resumed_jobs), (true, first.jobs));
    // A damaged file and a missing one are computed again; the rest are taken.
    let f0 = dir.path("partial").join("grow-000.u32");
    let mut b = std::fs::read(&f0).unwrap();
    let last = b.len() - 9;
    b[last] ^= 1;
    std::fs::write(&f0, b).unwrap();
    std::fs::remove_file(
        dir.path("partial")
            .join(format!("grow-{:03}.u32", first.jobs - 1)),
    )
    .unwrap();
    let (got, r) = grow(true);
    assert_eq!((got == want, r.resumed_jobs), (true, first.jobs - 2));
    // Without resume the files are cleared and every job runs.
    let (got, r) = grow(false);
    assert_eq!((got == want, r.resumed_jobs), (true, 0));
}
