//! The gram-engine benchmark: in one process, G's build time, then
//! every requested (precision × workgroup size × state placement) run of one workload, with GPU
//! time from timestamp queries, wall time, steps/s, the achieved Gram-row bandwidth
//! (S × steps × N × 4 bytes / GPU time) and a same-bits check across configurations; optionally
//! an end-to-end run that loads the file, uploads, builds G, runs, and writes the JSON cache.
//!
//! ```text
//! cargo run --release --example bench_gram -- --table FILE [--dim D] [--starts S] [--batch B] [--steps K]
//!     [--precisions fp32,fp16] [--wg 256,512,1024] [--placements auto,registers,memory]
//!     [--spd 0,1] [--compensated d,1,0] [--judge 1,0] [--loads 0,8] [--refresh d,0,4096] [--chunk C] [--label NAME] [--json OUT.json] [--md OUT.md] [--seqs OUT.u32]
//!     [--e2e CACHE.json] [--center] [--oracle K] [--judge-variants c,keys,noevents]
//! ```
//!
//! `--center` subtracts the column mean first (the user's `mean-centered-v1` space). `--oracle K`
//! checks the first K sequences of the first configuration of each summation (`--compensated`) against float64
//! distances along their own prefix (ε = 1e-5) on every CPU core, and prints the worst excess.
//! `--compensated` lists the arithmetics: `d` (the default: the engine's choice, fixed-point keys
//! where the device has float64, on a fixed-point G), `1` / `0` (compensated / plain float32
//! sums, on a float32 G); `--judge` applies to the float ones. `--refresh` lists the refresh
//! periods: `d` (the default: the engine's), or R steps (fixed-point keys: every R steps, 0
//! never; the float judge: each R steps without one). `nosettle` (below) also applies to
//! fixed-point keys.
//! `--judge 1,0` runs each configuration with and without the judge (`GramOptions::judge`: keys
//! recomputed from the running sum when the best two are within their error bound); the line
//! shows how many recomputes the batch made. `--judge-variants` runs each with the judge's
//! variants: `c` (the default: plain sums bound max |key| through |c|), `keys` (the maximum over
//! the keys each step), `noevents` (the bound scaled to 0, no step uncertain: the judge's
//! per-step work alone, not exact), and, timing only and never exact, `nosettle` (uncertain
//! steps not settled: no band code at all), `notop2` (also no second best), `nocsum` (no
//! running-sum update either), `lean` (all three).
//!
//! `--spd` lists steps per dispatch (0 = the device default: the whole chunk in one in-shader
//! loop on GPUs). `--starts S` takes the first S items as starts (default all N), `--steps K` the first K steps
//! (default N − 1). Each configuration runs its starts in batches of at most the engine's largest
//! batch (`gram::max_batch`: a whole cache of a large table needs several; the line then says how
//! many), or of `--batch B` if smaller, GPU times summed. `--seqs` writes the first configuration's sequences as little-endian u32,
//! row-major, to compare with the PyTorch peer's `--out`. `--e2e` times the user's whole job in
//! the first configuration: load → upload → G → the workload's steps → download → JSON cache on
//! disk (every sequence at full length unless `--starts`/`--steps` cut it), in one batch (a
//! workload past one batch is refused there; the `sequences` example batches).

mod common;

use diversity::cache::JsonCacheWriter;
use diversity::gram::{Gram, GramBuild, GramJob, GramOptions, Placement};
use diversity::{files, Context, ContextOptions, DeviceTable, Precision};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// `GramOptions::judge_diag` of a `--judge-variants` name (0 for the exact ones).
fn diag_bits(variant: &str) -> u32 {
    let mut bits = 0;
    for (name, b) in [("nosettle", 1), ("notop2", 3), ("nocsum", 5), ("lean", 7)] {
        if variant.contains(name) {
            bits |= b;
        }
    }
    bits
}

struct Args {
    table: String,
    dim: Option<usize>,
    starts: Option<usize>,
    batch: Option<usize>,
    steps: Option<usize>,
    precisions: Vec<Precision>,
    wgs: Vec<Option<u32>>,
    placements: Vec<Placement>,
    spds: Vec<usize>,
    /// `None`: the engine's default arithmetic (fixed-point keys where the device has float64).
    comps: Vec<Option<bool>>,
    judges: Vec<bool>,
    loads: Vec<usize>,
    refreshes: Vec<Option<usize>>,
    /// The judge's variants: `c` (the default: plain sums bound max |key| through |c|), `keys`
    /// (the maximum over the keys each step), `noevents` (the bound scaled to 0: the judge's
    /// per-step work alone, not exact); joined by `+`.
    variants: Vec<String>,
    chunk: usize,
    label: String,
    json: Option<String>,
    md: Option<String>,
    seqs: Option<String>,
    e2e: Option<String>,
    center: bool,
    oracle: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        table: String::new(),
        dim: None,
        starts: None,
        batch: None,
        steps: None,
        precisions: vec![Precision::Fp32, Precision::Fp16],
        wgs: vec![None],
        placements: vec![Placement::Auto],
        spds: vec![0],
        comps: vec![None],
        judges: vec![true],
        loads: vec![0],
        refreshes: vec![None],
        variants: vec!["c".into()],
        chunk: 0,
        label: "workload".into(),
        json: None,
        md: None,
        seqs: None,
        e2e: None,
        center: false,
        oracle: 0,
    };
    let mut it = common::Cli::new(include_str!("bench_gram.rs"));
    while let Some(f) = it.flag()? {
        let mut val = || it.value().ok_or(format!("{f} needs a value"));
        // Each number at least the smallest that means anything (chunk, spd, loads, refresh,
        // oracle 0: the default or off).
        let min = |v: String, m: usize| common::int_min::<usize>(&f, &v, m);
        match f.as_str() {
            "--table" => a.table = val()?,
            "--dim" => a.dim = Some(min(val()?, 1)?),
            "--starts" => a.starts = Some(min(val()?, 1)?),
            "--batch" => a.batch = Some(min(val()?, 1)?),
            "--steps" => a.steps = Some(min(val()?, 1)?),
            "--chunk" => a.chunk = min(val()?, 0)?,
            "--label" => a.label = val()?,
            "--precisions" => a.precisions = common::list(&f, &val()?)?,
            "--wg" => {
                a.wgs = val()?
                    .split(',')
                    .map(|w| match w {
                        "auto" => Ok(None),
                        w => common::int_min::<u32>(&f, w, 1).map(Some),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--placements" => a.placements = common::list(&f, &val()?)?,
            "--spd" => a.spds = common::list(&f, &val()?)?,
            "--compensated" => {
                a.comps = val()?
                    .split(',')
                    .map(|c| match c {
                        "d" => Ok(None),
                        c => common::switches(&f, c).map(|v| Some(v[0])),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--judge" => a.judges = common::switches(&f, &val()?)?,
            "--refresh" => {
                a.refreshes = val()?
                    .split(',')
                    .map(|r| match r {
                        "d" => Ok(None),
                        r => common::int_min::<usize>(&f, r, 0).map(Some),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--judge-variants" => a.variants = common::list(&f, &val()?)?,
            "--loads" => a.loads = common::list(&f, &val()?)?,
            "--json" => a.json = Some(val()?),
            "--md" => a.md = Some(val()?),
            "--seqs" => a.seqs = Some(val()?),
            "--e2e" => a.e2e = Some(val()?),
            "--center" => a.center = true,
            "--oracle" => a.oracle = min(val()?, 0)?,
            _ => return Err(format!("unknown argument {f}")),
        }
    }
    if a.table.is_empty() {
        return Err("--table is required".into());
    }
    Ok(a)
}

struct Run {
    precision: Precision,
    spd: usize,
    comp: bool,
    wg: u32,
    placement: Placement,
    subgroups: bool,
    gpu_s: f64,
    wall_s: f64,
    build_s: f64,
    identical: bool,
}

fn main() {
    let a = common::parsed("bench_gram", parse());
    if let Err(e) = run(a) {
        eprintln!("bench_gram: {e}");
        std::process::exit(1);
    }
}

/// One configuration's run over every start: in batches of at most the engine's largest batch
/// ([`diversity::gram::max_batch`]; a whole cache of a large table needs several, each batch's
/// state being one buffer), the GPU time summed and the per-sequence counters concatenated in
/// start order.
struct Ran {
    gpu_ns: u64,
    /// Wall time of creating and running the jobs (not the downloads after each).
    run_s: f64,
    batches: usize,
    flat: Vec<u32>,
    refreshes: Vec<u32>,
    bands: Vec<u32>,
    wide: Vec<u32>,
    cands: Vec<u32>,
    profile: Option<Vec<[f64; 4]>>,
    shifts: Vec<u32>,
    ef: Vec<f32>,
    wg: u32,
    placement: Placement,
    judge: bool,
    subgroups: bool,
}

/// `Ok(Err(reason))`: the engine refuses the configuration (its first batch's job), which the
/// caller skips; `Err`: a failure after that.
fn run_batches(
    gram: &Gram,
    starts: &[u32],
    o: &GramOptions,
    batch: usize,
) -> Result<Result<Ran, String>, String> {
    let e = |e: diversity::Error| e.to_string();
    let mut ran: Option<Ran> = None;
    for part in starts.chunks(batch.max(1)) {
        let t = Instant::now();
        let mut job = match GramJob::new(gram, part, o) {
            Ok(j) => j,
            Err(err) if ran.is_none() => return Ok(Err(err.to_string())),
            Err(err) => return Err(err.to_string()),
        };
        let r = job.run().map_err(e)?;
        let run_s = t.elapsed().as_secs_f64();
        let profile = job.profile_ticks().map_err(e)?;
        let agg = ran.get_or_insert_with(|| Ran {
            gpu_ns: 0,
            run_s: 0.0,
            batches: 0,
            flat: Vec::new(),
            refreshes: Vec::new(),
            bands: Vec::new(),
            wide: Vec::new(),
            cands: Vec::new(),
            profile: profile.as_ref().map(|_| Vec::new()),
            shifts: Vec::new(),
            ef: Vec::new(),
            wg: job.workgroup_size(),
            placement: job.placement(),
            judge: job.judge(),
            subgroups: job.uses_subgroups(),
        });
        agg.gpu_ns += r.gpu_ns;
        agg.run_s += run_s;
        agg.batches += 1;
        agg.flat.extend(job.sequences_flat().map_err(e)?);
        agg.refreshes.extend(job.refreshes().map_err(e)?);
        agg.bands.extend(job.band_rescores().map_err(e)?);
        agg.wide.extend(job.wide_bands().map_err(e)?);
        agg.cands.extend(job.band_candidates().map_err(e)?);
        if let (Some(all), Some(p)) = (agg.profile.as_mut(), profile) {
            all.extend(p);
        }
        agg.shifts.extend(job.key_shifts().map_err(e)?);
        agg.ef.extend(job.fresh_error_max().map_err(e)?);
    }
    Ok(ran.ok_or_else(|| "no starts".to_string()))
}

fn fnv(words: &[u32]) -> u64 {
    words.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, w| {
        (h ^ *w as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn run(a: Args) -> Result<(), String> {
    let path = Path::new(&a.table);
    // The outputs are checked before anything is loaded or any device work.
    common::check_outputs(
        &common::given(&[
            ("--json", a.json.as_ref()),
            ("--md", a.md.as_ref()),
            ("--seqs", a.seqs.as_ref()),
            ("--e2e", a.e2e.as_ref()),
        ]),
        &common::table_inputs("--table", path),
    )?;
    let mut table = files::load_table(path, a.dim).map_err(|e| e.to_string())?;
    if a.center {
        table = table.centered();
    }
    let ctx = Context::new(&ContextOptions::default()).map_err(|e| e.to_string())?;
    let caps = ctx.caps().clone();
    let (n, d) = (table.n(), table.d());
    let s = a.starts.unwrap_or(n).min(n);
    let steps = a.steps.unwrap_or(n - 1).min(n - 1);
    let starts: Vec<u32> = (0..s as u32).collect();
    println!(
        "{}: N = {n}, D = {d}, {s} sequences × {steps} steps on {} ({})",
        a.label, caps.name, caps.driver
    );
    let mut runs: Vec<Run> = Vec::new();
    let mut first_seqs = None;
    let mut checked = Vec::new();
    for &precision in &a.precisions {
        let dt = DeviceTable::upload(&ctx, &table, precision).map_err(|e| e.to_string())?;
        // G as the configurations need it: the default (fixed-point where the device has
        // float64), float32 entries for named float sums; each built once, when first needed.
        let mut grams: Vec<(bool, Gram)> = Vec::new();
        let mut gram_for = |float: bool| -> Result<Gram, String> {
            if let Some((_, g)) = grams.iter().find(|(f, _)| *f == float) {
                return Ok(g.clone());
            }
            let t0 = Instant::now();
            let how = GramBuild {
                fixed: if float { Some(false) } else { None },
                ..GramBuild::default()
            };
            let gram = Gram::build_with(&dt, &how).map_err(|e| e.to_string())?;
            println!(
                "  {} G ({}): {:.0} MiB in {} slab(s), {:.3} s GPU, {:.3} s wall",
                precision.name(),
                if gram.fixed_scale().is_some() {
                    "fixed-point"
                } else {
                    "float32"
                },
                gram.bytes() as f64 / (1024.0 * 1024.0),
                gram.slabs(),
                gram.build_ns() as f64 * 1e-9,
                t0.elapsed().as_secs_f64()
            );
            grams.push((float, gram.clone()));
            Ok(gram)
        };
        let mut configs = Vec::new();
        for &wg in &a.wgs {
            for &pl in &a.placements {
                for &spd in &a.spds {
                    for &comp in &a.comps {
                        for &judge in &a.judges {
                            for &loads in &a.loads {
                                for &refresh in &a.refreshes {
                                    for v in &a.variants {
                                        configs.push((wg, pl, spd, comp, judge, loads, refresh, v));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // Same bits within a precision and summation (different tables or arithmetic may differ).
        let mut hashes: Vec<(Precision, (bool, bool, bool), u64)> = Vec::new();
        for (wg, placement, spd, comp, judge, loads, refresh, variant) in configs {
            {
                let o = GramOptions {
                    chunk: a.chunk,
                    steps: Some(steps),
                    workgroup_size: wg,
                    placement,
                    subgroups: None,
                    steps_per_dispatch: spd,
                    compensated: comp,
                    judge: if comp.is_some() { Some(judge) } else { None },
                    loads,
                    judge_refresh: refresh.or(if comp.is_some() {
                        Some(diversity::gram::JUDGE_REFRESH)
                    } else {
                        None
                    }),
                    judge_kmax_c: Some(!variant.contains("keys")),
                    judge_scale: Some(if variant.contains("noevents") {
                        0.0
                    } else {
                        1.0
                    }),
                    judge_diag: diag_bits(variant),
                    ..GramOptions::default()
                };
                // Wall time: G's build where this configuration builds it, and its jobs' runs.
                let t = Instant::now();
                let gram = gram_for(comp.is_some())?;
                let build_s = t.elapsed().as_secs_f64();
                let fixed = gram.fixed_scale().is_some();
                let batch = diversity::gram::max_batch(&caps, n, d, precision.bytes(), steps)
                    .min(a.batch.unwrap_or(usize::MAX));
                let ran = match run_batches(&gram, &starts, &o, batch)? {
                    Ok(r) => r,
                    Err(e) => {
                        println!("  skip wg {wg:?} {} spd {spd}: {e}", placement.name());
                        continue;
                    }
                };
                let wall_s = build_s + ran.run_s;
                let flat = ran.flat;
                let h = fnv(&flat);
                // The max over the keys (`keys`) may decide other steps uncertain: other bits at near-ties.
                let arith = (
                    comp.unwrap_or(!fixed),
                    ran.judge && !fixed,
                    ran.judge
                        && ((comp == Some(false) && variant.contains("keys"))
                            || variant.contains("noevents")
                            || diag_bits(variant) != 0),
                );
                let identical = match hashes.iter().find(|x| x.0 == precision && x.1 == arith) {
                    Some(x) => x.2 == h,
                    None => {
                        hashes.push((precision, arith, h));
                        true
                    }
                };
                let refreshes: u64 = ran.refreshes.iter().map(|&r| r as u64).sum();
                let bands: u64 = ran.bands.iter().map(|&r| r as u64).sum();
                let (wide, cands): (u64, u64) = ran
                    .wide
                    .iter()
                    .zip(&ran.cands)
                    .fold((0, 0), |(w, c), (&x, &y)| (w + x as u64, c + y as u64));
                // Shaders built with GF_PROFILE, run with DIVERSITY_SHADER_CLOCK: the phases.
                let profile = ran.profile.map(|p| {
                    let sum = p.iter().fold([0.0; 4], |a, x| {
                        [a[0] + x[0], a[1] + x[1], a[2] + x[2], a[3] + x[3]]
                    });
                    let per = (s * steps) as f64;
                    // The settling phase's ticks over the settles (each step's test and the
                    // clock read included); none without settles.
                    let a_settle = match bands {
                        0 => "no settles".to_string(),
                        b => format!("{:.0} a settle, tests included", sum[2] / b as f64),
                    };
                    format!(
                        "\n    profile (subgroup clock, invocation 0), ticks a step: update {:.0}, pick {:.0}, settling {:.0} ({a_settle}), end {:.0}",
                        sum[0] / per,
                        sum[1] / per,
                        sum[2] / per,
                        sum[3] / per
                    )
                });
                // Fixed-point keys: the bits each sequence's keys were shifted right (its bound
                // grows faster after a shift).
                let shifts = ran.shifts;
                let sh_max = shifts.iter().copied().max().unwrap_or(0);
                let sh_mean =
                    shifts.iter().map(|&v| v as f64).sum::<f64>() / shifts.len().max(1) as f64;
                let ef = ran.ef.into_iter().fold(0.0f32, f32::max);
                if a.oracle > 0 && !checked.contains(&arith) {
                    checked.push(arith);
                    oracle(&table, precision, &starts, &flat, steps + 1, a.oracle)?;
                }
                if first_seqs.is_none() {
                    first_seqs = Some(flat);
                }
                let gpu_s = ran.gpu_ns as f64 * 1e-9;
                let bytes = s as f64 * steps as f64 * n as f64 * 4.0;
                println!(
                    "  {} wg {:>4} {:<9} spd {spd:<3} loads {loads:<2} refresh {:<5} {:<11} judge {:<5} {variant} ({bands} band re-scores of {cands} candidates, {wide} wide, {refreshes} recomputes, E_F max {ef:.2e}, key shifts max {sh_max} mean {sh_mean:.2}{}) subgroups {:<5} GPU {:>8.4} s  wall {:>8.4} s  {:>10.0} steps/s  G rows {:>6.2} TB/s  same bits {}{}",
                    precision.name(),
                    ran.wg,
                    ran.placement.name(),
                    refresh.map_or("d".to_string(), |r| r.to_string()),
                    match (fixed, comp) {
                        (true, _) => "fixed",
                        (false, Some(false)) => "plain",
                        _ => "compensated",
                    },
                    ran.judge,
                    match ran.batches {
                        1 => String::new(),
                        b => format!(", {b} batches"),
                    },
                    ran.subgroups,
                    gpu_s,
                    wall_s,
                    steps as f64 / gpu_s.max(1e-12),
                    bytes / gpu_s.max(1e-12) * 1e-12,
                    identical,
                    profile.unwrap_or_default()
                );
                runs.push(Run {
                    precision,
                    spd,
                    comp: comp.unwrap_or(!fixed),
                    wg: ran.wg,
                    placement: ran.placement,
                    subgroups: ran.subgroups,
                    gpu_s,
                    wall_s,
                    build_s: gram.build_ns() as f64 * 1e-9,
                    identical,
                });
            }
        }
    }
    if let (Some(p), Some(seqs)) = (&a.seqs, &first_seqs) {
        common::write_out(p, bytemuck::cast_slice::<_, u8>(seqs))?;
    }
    let e2e = match &a.e2e {
        Some(out) => Some(end_to_end(&a, &ctx, path, out)?),
        None => None,
    };
    let bytes = s as f64 * steps as f64 * n as f64 * 4.0;
    if let Some(p) = &a.json {
        let j = serde_json::json!({
            "label": a.label, "device": caps.name, "driver": caps.driver, "n": n, "d": d,
            "sequences": s, "steps": steps,
            "runs": runs.iter().map(|r| serde_json::json!({
                "precision": r.precision.name(), "workgroup": r.wg, "placement": r.placement.name(), "steps_per_dispatch": r.spd, "compensated": r.comp,
                "subgroups": r.subgroups, "gpu_s": r.gpu_s, "wall_s": r.wall_s, "g_build_gpu_s": r.build_s,
                "g_row_tb_s": bytes / r.gpu_s.max(1e-12) * 1e-12, "same_bits": r.identical,
            })).collect::<Vec<_>>(),
            "end_to_end": e2e.as_ref().map(|e| serde_json::json!(e)),
        });
        common::write_out(p, serde_json::to_vec_pretty(&j).unwrap())?;
    }
    if let Some(p) = &a.md {
        let mut m = String::new();
        let _ = writeln!(
            m,
            "**{}** — N = {n}, D = {d}, {s} sequences × {steps} steps, {} ({})\n",
            a.label, caps.name, caps.driver
        );
        let _ = writeln!(m, "| precision | workgroup | state | steps/dispatch | compensated | subgroups | G build GPU s | GPU s | wall s | G rows TB/s | same bits |");
        let _ = writeln!(m, "|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &runs {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {:.4} | {:.4} | {:.4} | {:.2} | {} |",
                r.precision.name(),
                r.wg,
                r.placement.name(),
                if r.spd == 0 {
                    "all".to_string()
                } else {
                    r.spd.to_string()
                },
                r.comp,
                r.subgroups,
                r.build_s,
                r.gpu_s,
                r.wall_s,
                bytes / r.gpu_s.max(1e-12) * 1e-12,
                if r.identical { "yes" } else { "NO" }
            );
        }
        if let Some(e) = &e2e {
            let _ = writeln!(
                m,
                "\nEnd to end (first configuration): {}",
                serde_json::json!(e)
            );
        }
        common::write_out(p, m)?;
    }
    Ok(())
}

/// The ε-argmax oracle on the first `k` sequences, in parallel over the CPU cores: a violation, a
/// failed worker thread or nothing checked is an error.
fn oracle(
    table: &diversity::Table,
    p: Precision,
    starts: &[u32],
    flat: &[u32],
    len: usize,
    k: usize,
) -> Result<(), String> {
    let stored = table.as_stored(p);
    let rows: Vec<(String, u32, Vec<u32>)> = starts
        .iter()
        .copied()
        .zip(flat.chunks_exact(len))
        .take(k)
        .map(|(s, seq)| (format!("start {s}"), s, seq.to_vec()))
        .collect();
    let t = Instant::now();
    let r = common::check_all(&stored, &rows, 1e-5).map_err(|e| format!("--oracle: {e}"))?;
    println!(
        "  oracle {}: {} sequences of {len}, worst excess {:.3e} (eps 1e-5), {} near-tie picks, {} violations {:?} ({:.1} s)",
        p.name(),
        rows.len(),
        r.worst,
        r.ties,
        r.violations.len(),
        r.violations.iter().take(3).collect::<Vec<_>>(),
        t.elapsed().as_secs_f64()
    );
    if !r.violations.is_empty() {
        return Err(format!(
            "--oracle {}: {} of {} sequences violate the oracle; the first: {}",
            p.name(),
            r.violations.len(),
            rows.len(),
            r.violations[0]
        ));
    }
    Ok(())
}

/// The user's whole job in the first configuration, wall-clock per phase.
fn end_to_end(
    a: &Args,
    ctx: &Context,
    path: &Path,
    out: &str,
) -> Result<std::collections::BTreeMap<&'static str, f64>, String> {
    let mut t = std::collections::BTreeMap::new();
    let all = Instant::now();
    let mut lap = Instant::now();
    let mut mark = |t: &mut std::collections::BTreeMap<&'static str, f64>, k| {
        t.insert(k, lap.elapsed().as_secs_f64());
        lap = Instant::now();
    };
    let mut table = files::load_table(path, a.dim).map_err(|e| e.to_string())?;
    if a.center {
        table = table.centered();
    }
    mark(&mut t, "load_s");
    let precision = a.precisions[0];
    let dt = DeviceTable::upload(ctx, &table, precision).map_err(|e| e.to_string())?;
    mark(&mut t, "upload_s");
    let n = table.n();
    // The workload's starts and steps (every item and every step unless --starts/--steps).
    let starts: Vec<u32> = (0..a.starts.unwrap_or(n).min(n) as u32).collect();
    let steps = a.steps.unwrap_or(n - 1).min(n - 1);
    let o = GramOptions {
        steps: Some(steps),
        chunk: a.chunk,
        workgroup_size: a.wgs[0],
        placement: a.placements[0],
        steps_per_dispatch: a.spds[0],
        compensated: a.comps[0],
        judge: a.comps[0].map(|_| a.judges[0]),
        ..GramOptions::default()
    };
    // The G these options run on (as the engine builds it).
    let fixed = diversity::gram::fixed_point(ctx.caps(), n, table.d(), &o);
    let how = GramBuild {
        fixed: Some(fixed),
        ..GramBuild::default()
    };
    let gram = Gram::build_with(&dt, &how).map_err(|e| e.to_string())?;
    mark(&mut t, "gram_matrix_s");
    let mut job = GramJob::new(&gram, &starts, &o).map_err(|e| e.to_string())?;
    let r = job.run().map_err(|e| e.to_string())?;
    mark(&mut t, "steps_s");
    let flat = job.sequences_flat().map_err(|e| e.to_string())?;
    mark(&mut t, "download_s");
    let meta = serde_json::json!({
        "num_poems": n, "algorithm": "diversity", "mode": "gram", "precision": precision.name(),
        "batch_size": starts.len(), "top_k": steps, "device": ctx.caps().name,
    });
    let mut w = JsonCacheWriter::create(Path::new(out), &meta, None).map_err(|e| e.to_string())?;
    w.write_batch(&starts, &flat, steps + 1)
        .map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    mark(&mut t, "json_cache_s");
    t.insert("total_s", all.elapsed().as_secs_f64());
    t.insert("steps_gpu_s", r.gpu_ns as f64 * 1e-9);
    t.insert(
        "json_bytes",
        std::fs::metadata(out)
            .map(|m| m.len() as f64)
            .unwrap_or(0.0),
    );
    println!("  end to end: {t:?}");
    Ok(t)
}
