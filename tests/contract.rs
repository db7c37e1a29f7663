//! One contract for every sequence engine, run against each through `diversity::engine` (the
//! same calls the Lua binding and the command lines make): the same bits across chunk sizes,
//! batch sizes, start order and a resume from a checkpointed prefix, and the
//! float64 ε-argmax oracle along each sequence's own prefix, fp32 and fp16, on
//! real data centred (where the running sum cancels) and on random data with an odd dimension.
//! The host engine (the native CPU one, [`Engine::host_only`]) runs the same contract, plus the
//! hand-worked edge cases, and all of its gram sequences on 300 centred fortunes in fp16.
//! A new engine joins by adding it to `ENGINES`.

mod common;
use common::{assert_clean, ctx, fortunes, random_table};
use diversity::engine::{Engine, JobOptions, Prefix};
use diversity::gram::Mode;
use diversity::reference::check_sequence;
use diversity::{DeviceTable, Precision, Table};

const EPS: f64 = 1e-5;

/// Where an engine runs: on the Vulkan device, or on the host's cores.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Device,
    Host,
}

const ENGINES: [(Side, Mode); 4] = [
    (Side::Device, Mode::Scan),
    (Side::Device, Mode::Gram),
    (Side::Host, Mode::Scan),
    (Side::Host, Mode::Gram),
];

/// `table` at `p` in an engine of `side` (with the device's context, to check it afterwards).
fn engine(side: Side, table: &Table, p: Precision) -> (Engine, Option<diversity::Context>) {
    match side {
        Side::Device => {
            let ctx = ctx();
            let dt = DeviceTable::upload(&ctx, table, p).unwrap();
            (Engine::new(dt), Some(ctx))
        }
        Side::Host => (Engine::host_only(table, p).unwrap(), None),
    }
}

fn options(mode: Mode, chunk: usize) -> JobOptions {
    let mut o = JobOptions {
        mode,
        ..JobOptions::default()
    };
    o.scan.chunk = chunk;
    o.gram.chunk = chunk;
    o
}

/// Every start's sequence, in `starts` order, computed in batches of `batch`, in calls of `step`
/// steps (0: one call).
fn run(
    engine: &mut Engine,
    starts: &[u32],
    (batch, step): (usize, usize),
    o: &JobOptions,
) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for b in starts.chunks(batch) {
        let mut job = engine.job(b, o).unwrap();
        assert_eq!(job.mode(), o.mode);
        if step == 0 {
            job.run().unwrap();
        }
        while !job.done() {
            job.step(step).unwrap();
        }
        assert!(job.done());
        let len = job.sequence_len();
        out.extend(
            job.sequences_flat()
                .unwrap()
                .chunks_exact(len)
                .map(<[u32]>::to_vec),
        );
    }
    out
}

fn contract((side, mode): (Side, Mode), table: &Table, p: Precision, starts: &[u32]) {
    let (mut engine, ctx) = engine(side, table, p);
    assert_eq!(engine.native_host(), side == Side::Host);
    let what = format!("{side:?} {mode:?} {p:?} {} × {}", table.n(), table.d());
    let base = run(&mut engine, starts, (starts.len(), 0), &options(mode, 0));
    // The oracle on the table as stored (at most 12 sequences, spread over the starts; every
    // sequence where there are no more).
    let stored = table.as_stored(p);
    let every = starts.len().div_ceil(12);
    for (s, seq) in starts.iter().zip(&base).step_by(every) {
        assert_eq!(seq.len(), table.n(), "{what}: full length");
        let c = check_sequence(&stored, *s, seq, EPS)
            .unwrap_or_else(|v| panic!("{what}, start {s}: {v:?}"));
        assert!(c.worst_excess <= EPS, "{what}, start {s}");
    }
    for seq in &base {
        assert_eq!(seq.len(), table.n(), "{what}: full length");
    }
    // Same bits: chunks, batches, uneven step calls, start order.
    for (chunk, batch, step) in [(1, starts.len(), 0), (7, 3, 0), (50, 1, 0), (13, 170, 41)] {
        let got = run(&mut engine, starts, (batch, step), &options(mode, chunk));
        assert_eq!(
            got, base,
            "{what}: chunk {chunk}, batch {batch}, steps of {step}"
        );
    }
    let rev: Vec<u32> = starts.iter().rev().copied().collect();
    let mut got = run(&mut engine, &rev, (4, 0), &options(mode, 0));
    got.reverse();
    assert_eq!(got, base, "{what}: reversed start order");
    // Resume from a prefix of 23 entries a row (the checkpoint a driver keeps).
    let len = 23;
    let rows: Vec<u32> = base.iter().flat_map(|s| s[..len].to_vec()).collect();
    let prefix = Prefix {
        host: Some(table),
        rows: &rows,
        len,
    };
    let mut job = engine
        .resume_job(starts, prefix, &options(mode, 9))
        .unwrap();
    assert_eq!(job.steps_done(), len - 1);
    job.run().unwrap();
    let n = table.n();
    let resumed: Vec<Vec<u32>> = job
        .sequences_flat()
        .unwrap()
        .chunks_exact(n)
        .map(<[u32]>::to_vec)
        .collect();
    assert_eq!(resumed, base, "{what}: resumed from {len} entries");
    drop(job);
    drop(engine);
    if let Some(ctx) = ctx {
        assert_clean(&ctx);
    }
}

#[test]
fn every_engine_on_real_centred_data() {
    let table = fortunes(131).centered();
    let starts = [0u32, 130, 64, 7, 99, 33];
    for engine in ENGINES {
        for p in [Precision::Fp32, Precision::Fp16] {
            contract(engine, &table, p, &starts);
        }
    }
}

#[test]
fn every_engine_on_random_data_odd_dimension() {
    let table = random_table(97, 13, 5);
    let starts = [96u32, 0, 50, 1, 2];
    for engine in ENGINES {
        contract(engine, &table, Precision::Fp32, &starts);
    }
}

/// The host gram engine on every start of 300 centred fortunes in fp16 (a device sweep of this
/// size would take minutes on lavapipe).
#[test]
fn host_gram_engine_on_every_start_of_300_centred_fortunes() {
    let table = fortunes(300).centered();
    let starts: Vec<u32> = (0..300).collect();
    contract((Side::Host, Mode::Gram), &table, Precision::Fp16, &starts);
}

/// The hand-worked edge cases (tests/common) on the host engine, both recurrences.
#[test]
fn host_engine_edge_cases() {
    common::edge_cases(&[Mode::Gram, Mode::Scan], |mode, t, p, starts| {
        let mut engine = Engine::host_only(t, p).unwrap();
        run(&mut engine, starts, (starts.len(), 0), &options(mode, 0))
    });
}
