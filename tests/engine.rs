//! The engine choice (src/engine.rs): the mode as data with its reason and code, the one start
//! check, the device table that builds G on first use, and jobs of either engine.

mod common;
use common::{assert_clean, ctx, fortunes};
use diversity::engine::{self, check_starts, Engine, JobOptions, ModeChoice, ModeReason, Prefix};
use diversity::gram::{self, Mode};
use diversity::{DeviceTable, IvfFlat, IvfOptions, KMeansOptions, KnnOptions, Precision, Table};

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

/// A nonzero row whose norm fp32 arithmetic cannot handle exactly (below 2^-40 or above 2^40,
/// as the device sees it: after centring, after fp16 rounding) is refused wherever a table or
/// queries reach a device — the upload every engine reads, k-NN queries, an IVF index's rows,
/// k-means, the C ABI — naming the row; zero rows pass. Before, a row scaled to 1e-41 got an
/// infinite inverse norm and was picked first (rankings) or broke the sequences' ε check.
#[test]
fn rows_outside_the_fp32_norm_range_are_refused_naming_the_row() {
    use diversity::knn::knn_flat;
    let ctx = ctx();
    let (n, d) = (6, 4);
    let mut data: Vec<f32> = (0..n * d).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    data[3 * d..4 * d].fill(0.0); // a zero row is valid
    let good = Table::new(data.clone(), n, d).unwrap();
    let dt = DeviceTable::upload(&ctx, &good, Precision::Fp32).unwrap();
    let scaled = |row: usize, s: f32| {
        let mut v = data.clone();
        v[row * d..(row + 1) * d].iter_mut().for_each(|x| *x *= s);
        v
    };
    let refused = |e: diversity::Error, what: &str| {
        let e = e.to_string();
        assert!(
            e.contains(&format!("{what} has norm"))
                && e.contains("outside the range fp32 arithmetic handles exactly (2^-40 … 2^40)")
                && e.contains("scale the table or zero the row"),
            "{e}"
        );
    };
    let kopts = KnnOptions {
        k: 2,
        ..KnnOptions::default()
    };
    // Normal values whose products underflow, subnormal values, a norm past 2^40.
    for (row, s) in [(2, 1e-23f32), (2, 1e-41), (5, 1e12)] {
        let bad = scaled(row, s);
        let t = Table::new(bad.clone(), n, d).unwrap();
        refused(
            DeviceTable::upload(&ctx, &t, Precision::Fp32)
                .err()
                .unwrap(),
            &format!("row {row}"),
        );
        refused(
            knn_flat(&dt, &bad, d, &kopts).err().unwrap(),
            &format!("query {row}"),
        );
        let mut ix = IvfFlat::new(
            &ctx,
            d,
            &IvfOptions {
                nlist: 1,
                metric: diversity::Metric::L2,
                precision: Precision::Fp32,
                kmeans: KMeansOptions::default(),
            },
        )
        .unwrap();
        ix.train(&good).unwrap();
        refused(ix.add(&t).err().unwrap(), &format!("row {row}"));
        refused(
            diversity::kmeans(&ctx, &t, 2, &KMeansOptions::default())
                .err()
                .unwrap(),
            &format!("row {row}"),
        );
        // The C ABI: NULL, and the last error names the row.
        let c = diversity::capi::vkc_init(false);
        assert!(!c.is_null());
        // SAFETY: a live context and n × d floats.
        let v = unsafe { diversity::capi::vkd_init(c, bad.as_ptr(), n as u32, d as u32) };
        assert!(v.is_null());
        // SAFETY: the library's own NUL-terminated message.
        let e = unsafe { std::ffi::CStr::from_ptr(diversity::capi::vkc_last_error()) };
        let e = e.to_string_lossy();
        assert!(e.contains(&format!("row {row} has norm")), "{e}");
        // SAFETY: from vkc_init, destroyed once.
        unsafe { diversity::capi::vkc_destroy(c) };
    }
    // fp16 rounds a row of 1e-23s to a zero row: valid, as stored.
    let tiny = Table::new(scaled(2, 1e-23), n, d).unwrap();
    if ctx.caps().fp16_storage {
        DeviceTable::upload(&ctx, &tiny, Precision::Fp16).unwrap();
    }
    // Checked after centring: a row that centring brings near zero is refused, a tiny row that
    // centring moves away from zero passes.
    let near_mean = Table::new(vec![1.0, 0.0, 3.0, 0.0, 2.0, 1e-14], 3, 2).unwrap();
    DeviceTable::upload(&ctx, &near_mean, Precision::Fp32).unwrap();
    refused(
        DeviceTable::upload(&ctx, &near_mean.centered(), Precision::Fp32)
            .err()
            .unwrap(),
        "row 2",
    );
    let small = Table::new(vec![1.0, 0.0, 3.0, 0.0, 1e-30, 0.0], 3, 2).unwrap();
    refused(
        DeviceTable::upload(&ctx, &small, Precision::Fp32)
            .err()
            .unwrap(),
        "row 2",
    );
    DeviceTable::upload(&ctx, &small.centered(), Precision::Fp32).unwrap();
    drop(dt);
    assert_clean(&ctx);
}
