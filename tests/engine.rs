//! The engine choice (src/engine.rs): the mode as data with its reason and code, the one start
//! check, the device table that builds G on first use, and jobs of either engine.

mod common;
use common::{assert_clean, ctx, fortunes};
use diversity::engine::{self, check_starts, Engine, JobOptions, ModeChoice, ModeReason, Prefix};
use diversity::gram::{self, Mode};
use diversity::{DeviceTable, Precision};

#[test]
fn start_check_messages() {
    assert!(check_starts(&[0, 2, 1], 3).is_ok());
    let e = check_starts(&[0, 10], 10).unwrap_err().to_string();
    assert!(
        e.contains("start 10 is out of range for N = 10")
            && e.contains("10 rows")
            && e.contains("position 2 of the 2 starts"),
        "{e}"
    );
    let e = check_starts(&[2, 5, 2], 10).unwrap_err().to_string();
    assert!(
        e.contains("start 2 is repeated (positions 1 and 3 of the 3 starts)"),
        "{e}"
    );
    let e = check_starts(&[], 10).unwrap_err().to_string();
    assert!(
        e.contains("no starts") && e.contains("at least one start"),
        "{e}"
    );
}

/// The check costs what the starts cost, whatever N the caller names: an N of 2^32 allocated
/// 32 GiB, and 2^53 (the largest integer Lua passes) panicked with "capacity overflow".
#[test]
fn start_check_allocates_by_the_starts_not_by_n() {
    for n in [1usize << 32, 1 << 53, usize::MAX] {
        assert!(check_starts(&[0, 7, u32::MAX], n).is_ok());
        let e = check_starts(&[7, 0, 7], n).unwrap_err().to_string();
        assert!(e.contains("start 7 is repeated (positions 1 and 3"), "{e}");
    }
}

#[test]
fn mode_choice_is_data_with_todays_prose() {
    let ctx = ctx();
    let caps = ctx.caps().clone();
    let c = ModeChoice::new(&caps, Mode::Auto, 50, 384, Precision::Fp32);
    assert_eq!((c.mode, c.requested), (Mode::Gram, Mode::Auto));
    assert_eq!(c.reason.code(), "auto_fits");
    assert_eq!(c.reason.unfit(), None);
    let text = c.to_string();
    assert!(
        text.starts_with("auto: G for N = 50 (")
            && text.contains(&format!("fits the memory budget of {}", caps.name)),
        "{text}"
    );
    let c = ModeChoice::new(&caps, Mode::Scan, 50, 384, Precision::Fp32);
    assert_eq!(
        (c.mode, c.reason.clone()),
        (Mode::Scan, ModeReason::Requested)
    );
    assert_eq!(
        (c.to_string().as_str(), c.reason.code()),
        ("requested", "requested")
    );
    // A budget that cannot hold G: auto falls back to scan; gram asked for stays gram, flagged.
    let mut small = caps.clone();
    small.memory_budget_bytes = 64 << 20;
    let why = gram::gram_unfit(&small, 8359, 768, 2).expect("G of 8,359 does not fit 64 MiB");
    let c = ModeChoice::new(&small, Mode::Auto, 8359, 768, Precision::Fp16);
    assert_eq!(c.mode, Mode::Scan);
    assert_eq!(c.reason, ModeReason::AutoUnfit(why.clone()));
    assert_eq!(
        (c.reason.code(), c.to_string()),
        ("auto_unfit", format!("auto: {why}"))
    );
    let c = ModeChoice::new(&small, Mode::Gram, 8359, 768, Precision::Fp16);
    assert_eq!(c.mode, Mode::Gram);
    assert_eq!(c.reason.code(), "requested_unfit");
    assert_eq!(c.reason.unfit(), Some(why.as_str()));
    assert_eq!(c.to_string(), format!("requested, but {why}"));
    // The batch rule follows the chosen engine.
    for (m, p) in [(Mode::Auto, Precision::Fp16), (Mode::Scan, Precision::Fp32)] {
        let want = match gram::mode_for(&small, m, 8359, 768, p.bytes()) {
            Mode::Gram => gram::max_batch(&small, 8359, 768, p.bytes(), 100),
            _ => diversity::scan::max_batch(&small, 8359, 768, p, 100),
        };
        assert_eq!(engine::max_batch(&small, m, 8359, 768, p, 100), want);
    }
    assert_clean(&ctx);
}

#[test]
fn engine_builds_g_once_and_runs_either_engine() {
    let ctx = ctx();
    let table = fortunes(40);
    let dt = DeviceTable::upload(&ctx, &table, Precision::Fp32).unwrap();
    let mut eng = Engine::new(dt);
    assert_eq!(eng.mode_for(Mode::Auto).mode, Mode::Gram); // lavapipe: G of 40 rows fits
                                                           // A bad start list fails before G is built.
    let gram_opts = JobOptions {
        mode: Mode::Gram,
        ..JobOptions::default()
    };
    let e = eng.job(&[3, 3], &gram_opts).err().unwrap().to_string();
    assert!(e.contains("start 3 is repeated"), "{e}");
    assert!(!eng.has_gram());
    let starts = [0u32, 7, 39];
    let mut g1 = eng.job(&starts, &gram_opts).unwrap();
    assert!(eng.has_gram());
    let built = eng.gram().unwrap().build_ns();
    let mut g2 = eng.job(&starts, &JobOptions::default()).unwrap(); // auto: gram, the same G
    assert_eq!(eng.gram().unwrap().build_ns(), built);
    assert_eq!((g1.mode(), g2.mode()), (Mode::Gram, Mode::Gram));
    g1.run().unwrap();
    g2.run().unwrap();
    assert_eq!(g1.sequences_flat().unwrap(), g2.sequences_flat().unwrap());
    assert!(g1.placement().is_some());
    // Scan: the same Job methods; resuming needs the host table.
    let scan_opts = JobOptions {
        mode: Mode::Scan,
        ..JobOptions::default()
    };
    let mut s = eng.job(&starts, &scan_opts).unwrap();
    assert_eq!(
        (s.mode(), s.placement(), s.uses_subgroups()),
        (Mode::Scan, None, None)
    );
    s.step(5).unwrap();
    let len = s.sequence_len();
    let prefix = s.sequence_columns(0, len).unwrap();
    s.run().unwrap();
    let no_host = Prefix {
        host: None,
        rows: &prefix,
        len,
    };
    let e = eng.resume_job(&starts, no_host, &scan_opts).err().unwrap();
    assert!(e.to_string().contains("host table"), "{e}");
    let with_host = Prefix {
        host: Some(&table),
        ..no_host
    };
    let mut r = eng.resume_job(&starts, with_host, &scan_opts).unwrap();
    r.run().unwrap();
    assert_eq!(r.sequences_flat().unwrap(), s.sequences_flat().unwrap());
    // The gram engine resumes without the host table.
    let gp = g1.sequence_columns(0, 6).unwrap();
    let from_gram = Prefix {
        host: None,
        rows: &gp,
        len: 6,
    };
    let mut gr = eng.resume_job(&starts, from_gram, &gram_opts).unwrap();
    gr.run().unwrap();
    assert_eq!(gr.sequences_flat().unwrap(), g1.sequences_flat().unwrap());
    eng.release_gram();
    assert!(!eng.has_gram());
    drop((g1, g2, s, r, gr));
    assert_clean(&ctx);
}
