//! The native CPU engine against the float64 oracle along its own prefix, top_k, ties and its
//! refusals. Its invariances (the same bits for every batch, chunk, start order and resume) are
//! the engine contract's, which runs it (tests/contract.rs).

mod common;

use common::{fortunes, random_table};
use diversity::host::{HostGram, HostJob, HostOptions, HostTable};
use diversity::reference::check_sequence;
use diversity::{Precision, Table};

const EPS: f64 = 1e-5;

fn gram_run(t: &Table, p: Precision, starts: &[u32], steps: Option<usize>) -> Vec<u32> {
    let ht = HostTable::new(t, p).unwrap();
    let g = HostGram::build(&ht).unwrap();
    let mut job = HostJob::gram(&g, starts, &HostOptions { chunk: 0, steps }).unwrap();
    job.run().unwrap();
    job.sequence_columns(0, job.sequence_len()).unwrap()
}

fn scan_run(t: &Table, p: Precision, starts: &[u32], steps: Option<usize>) -> Vec<u32> {
    let ht = HostTable::new(t, p).unwrap();
    let mut job = HostJob::scan(&ht, starts, &HostOptions { chunk: 7, steps }).unwrap();
    job.run().unwrap();
    job.sequence_columns(0, job.sequence_len()).unwrap()
}

/// Every row passes the oracle with ε; returns the worst excess.
fn check_all(t: &Table, p: Precision, starts: &[u32], flat: &[u32], what: &str) -> f64 {
    let stored = t.as_stored(p);
    let len = flat.len() / starts.len();
    let mut worst = 0f64;
    for (row, &s) in flat.chunks_exact(len).zip(starts) {
        let c = check_sequence(&stored, s, row, EPS)
            .unwrap_or_else(|v| panic!("{what}: start {s}: {v:?}"));
        worst = worst.max(c.worst_excess);
    }
    worst
}

fn every(n: usize) -> Vec<u32> {
    (0..n as u32).collect()
}

#[test]
fn real_rows_fp32_and_fp16_centred_and_not_meet_the_oracle_on_every_step() {
    let base = fortunes(400);
    for centred in [false, true] {
        let t = if centred {
            base.centered()
        } else {
            base.clone()
        };
        for p in [Precision::Fp32, Precision::Fp16] {
            let starts: Vec<u32> = (0..400).step_by(7).collect();
            let flat = gram_run(&t, p, &starts, None);
            let worst = check_all(&t, p, &starts, &flat, "gram");
            // The certificate settles every pick to the float64 best up to its dot products'
            // rounding: far below ε.
            assert!(
                worst < 1e-9,
                "centred {centred} {p:?}: worst excess {worst:e}"
            );
            let scan = scan_run(&t, p, &starts[..8], None);
            check_all(&t, p, &starts[..8], &scan, "scan");
        }
    }
}

#[test]
fn random_tables_of_odd_dimension_top_k_and_tiny_n() {
    for (n, d) in [(1, 3), (2, 5), (3, 1), (37, 7), (300, 33), (1500, 17)] {
        let t = random_table(n, d, 5 + n as u64).centered();
        let starts = every(n);
        let flat = gram_run(&t, Precision::Fp32, &starts, None);
        assert_eq!(flat.len(), n * n);
        check_all(&t, Precision::Fp32, &starts, &flat, "gram");
        let k = (n / 3).max(1).min(n - 1);
        let top = gram_run(&t, Precision::Fp32, &starts, Some(k));
        assert_eq!(top.len(), n * (k + 1));
        for (a, b) in top.chunks_exact(k + 1).zip(flat.chunks_exact(n)) {
            assert_eq!(a, &b[..k + 1], "top_k is a prefix of the whole sequence");
        }
    }
}

#[test]
fn ties_duplicate_rows_and_zero_rows_resolve_to_the_lowest_index() {
    // Rows 0..4 are one vector repeated, 4..6 are zero, the rest distinct.
    let mut data = Vec::new();
    let r = random_table(10, 6, 3);
    for i in 0..14 {
        match i {
            0..=3 => data.extend_from_slice(r.row(0)),
            4 | 5 => data.extend_from_slice(&[0.0; 6]),
            _ => data.extend_from_slice(r.row(i - 4)),
        }
    }
    let t = Table::new(data, 14, 6).unwrap();
    let starts = every(14);
    let flat = gram_run(&t, Precision::Fp32, &starts, None);
    check_all(&t, Precision::Fp32, &starts, &flat, "gram");
    // The float64 scan is the definition: the gram engine's picks are the same here.
    assert_eq!(flat, scan_run(&t, Precision::Fp32, &starts, None));
    // A sequence from a zero row: |c| = 0, every distance is 1, the lowest index is picked.
    assert_eq!(flat[4 * 14 + 1], 0);
}

#[test]
fn near_duplicate_clusters_centred_stay_exact() {
    // Built to break an engine whose error grows: near-duplicates whose distances differ by
    // ~1e-5, centred, so the running sum cancels late in every sequence.
    let base = random_table(40, 256, 17);
    let noise = random_table(320, 256, 18);
    let mut data = Vec::new();
    for c in 0..40 {
        for k in 0..8 {
            data.extend(
                base.row(c)
                    .iter()
                    .zip(noise.row(c * 8 + k))
                    .map(|(a, b)| a + 1e-4 * b),
            );
        }
    }
    let t = Table::new(data, 320, 256).unwrap().centered();
    let starts: Vec<u32> = (0..320).step_by(3).collect();
    let flat = gram_run(&t, Precision::Fp32, &starts, None);
    let worst = check_all(&t, Precision::Fp32, &starts, &flat, "clusters");
    assert!(worst < 1e-9, "worst excess {worst:e}");
}

#[test]
fn a_bad_prefix_or_start_is_refused_with_the_engines_messages() {
    let t = random_table(20, 4, 1);
    let ht = HostTable::new(&t, Precision::Fp32).unwrap();
    let g = HostGram::build(&ht).unwrap();
    let opts = HostOptions::default();
    let e = HostJob::gram(&g, &[3, 3], &opts).err().unwrap().to_string();
    assert!(e.contains("start 3 is repeated"), "{e}");
    let e = HostJob::gram(&g, &[20], &opts).err().unwrap().to_string();
    assert!(e.contains("out of range for N = 20"), "{e}");
    let e = HostJob::gram(&g, &[1], &opts)
        .unwrap()
        .resume(&[1, 5, 5], 3)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("has entry 5 at step 2"), "{e}");
    let e = HostJob::gram(&g, &[1], &opts)
        .unwrap()
        .resume(&[2, 5], 2)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("begins with 2, its start is 1"), "{e}");
}

#[test]
fn rows_the_devices_refuse_are_refused_here_too() {
    let mut data = vec![1.0f32; 12];
    data[4..8].copy_from_slice(&[1e-14, 0.0, 0.0, 0.0]);
    let t = Table::new(data, 3, 4).unwrap();
    let e = HostTable::new(&t, Precision::Fp32)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("row 1 has norm"), "{e}");
    let t = Table::new(vec![1e6; 4], 1, 4).unwrap();
    let e = HostTable::new(&t, Precision::Fp16)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("fp16") || e.contains("half"), "{e}");
}
