//! One contract for every sequence engine, run against each through `diversity::engine` (the
//! same calls the Lua binding and the command lines make): the same bits across chunk sizes,
//! batch sizes, start order and a resume from a checkpointed prefix, and the
//! float64 ε-argmax oracle along each sequence's own prefix, fp32 and fp16, on
//! real data centred (where the running sum cancels) and on random data with an odd dimension.
//! A new engine joins by adding its mode to `ENGINES`.

mod common;
use common::{assert_clean, ctx, fortunes, random_table};
use diversity::engine::{Engine, JobOptions, Prefix};
use diversity::gram::Mode;
use diversity::reference::check_sequence;
use diversity::{DeviceTable, Precision, Table};

const EPS: f64 = 1e-5;
const ENGINES: [Mode; 2] = [Mode::Scan, Mode::Gram];

fn options(mode: Mode, chunk: usize) -> JobOptions {
    let mut o = JobOptions {
        mode,
        ..JobOptions::default()
    };
    o.scan.chunk = chunk;
    o.gram.chunk = chunk;
    o
}

/// Every start's sequence, in `starts` order, computed in batches of `batch`.
fn run(engine: &mut Engine, starts: &[u32], batch: usize, o: &JobOptions) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for b in starts.chunks(batch) {
        let mut job = engine.job(b, o).unwrap();
        assert_eq!(job.mode(), o.mode);
        job.run().unwrap();
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

fn contract(mode: Mode, table: &Table, p: Precision, starts: &[u32]) {
    let ctx = ctx();
    let dt = DeviceTable::upload(&ctx, table, p).unwrap();
    let mut engine = Engine::new(dt);
    let what = format!("{mode:?} {p:?} {} × {}", table.n(), table.d());
    let base = run(&mut engine, starts, starts.len(), &options(mode, 0));
    // The oracle on the table as stored.
    let stored = table.as_stored(p);
    for (s, seq) in starts.iter().zip(&base) {
        assert_eq!(seq.len(), table.n(), "{what}: full length");
        let c = check_sequence(&stored, *s, seq, EPS)
            .unwrap_or_else(|v| panic!("{what}, start {s}: {v:?}"));
        assert!(c.worst_excess <= EPS, "{what}, start {s}");
    }
    // Same bits: chunks, batches, start order.
    for (chunk, batch) in [(1, starts.len()), (7, 3), (50, 1)] {
        let got = run(&mut engine, starts, batch, &options(mode, chunk));
        assert_eq!(got, base, "{what}: chunk {chunk}, batch {batch}");
    }
    let rev: Vec<u32> = starts.iter().rev().copied().collect();
    let mut got = run(&mut engine, &rev, 4, &options(mode, 0));
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
    assert_clean(&ctx);
}

#[test]
fn every_engine_on_real_centred_data() {
    let table = fortunes(131).centered();
    let starts = [0u32, 130, 64, 7, 99, 33];
    for mode in ENGINES {
        for p in [Precision::Fp32, Precision::Fp16] {
            contract(mode, &table, p, &starts);
        }
    }
}

#[test]
fn every_engine_on_random_data_odd_dimension() {
    let table = random_table(97, 13, 5);
    let starts = [96u32, 0, 50, 1, 2];
    for mode in ENGINES {
        contract(mode, &table, Precision::Fp32, &starts);
    }
}
