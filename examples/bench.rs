//! The scan-engine benchmark: every scan kernel × shape × pipelining ×
//! fp32/fp16 on one workload in one process, GPU time from timestamp queries and wall time, ratios
//! to untiled fp32, achieved multiply-adds per second, a same-bits check across configurations
//! (every kernel against the first configuration of its precision), and optionally a picture of
//! steps/s over the run.
//!
//! ```text
//! cargo run --release --example bench -- --table FILE [--dim D] [--center] [--starts S]
//!     [--steps K] [--chunk C] [--label NAME] [--precisions fp32,fp16] [--quick]
//!     [--shapes untiled,tiled,per-tile] [--kernels block64,block128] [--budget-s S]
//!     [--capacity C] [--gamma-scale G] [--probe] [--tile-bytes B] [--workgroup W]
//!     [--device NAME] [--json OUT.json] [--md OUT.md] [--plot OUT.png] [--best OUT.txt]
//! cargo run --release --example bench -- --replot RUN.json --plot OUT.png
//! ```
//!
//! `--starts S` takes the first S items as starts (the seed benchmark: 3,584), `--steps K` the
//! first K steps (500). Tile sizes: a tile holds `--tile-bytes B` of table rows, so each
//! precision's tile is `floor(B / (D × bytes per value))` candidates (default B: the device's L2
//! size), and that ÷ 4 and × 4. The tile-size policy is the Lua driver's alone
//! (`diversity.driver.tile_size`, 85% of L2): pass `--tile-bytes` 0.85 × L2 to time its tile.
//! `--quick` runs only untiled, tiled at that tile and per-tile, pipelined.
//! `--kernels` (default `auto`: the library's choice) runs each named scan kernel, kernel by
//! kernel. `--budget-s S` starts no new configuration once S seconds of wall time have passed
//! (what ran is still reported). `--best OUT.txt` writes the fastest configuration as one line
//! `kernel precision shape TFMA/s GPU-s`. TFMA/s counts S × N × D × steps multiply-adds (every
//! candidate is scored every step) per second of GPU time. Built with `FILTER_CLOCK` in
//! `DIVERSITY_SHADER_DEFINES` and run with `DIVERSITY_SHADER_CLOCK=1`, each filter kernel's line
//! is followed by its subgroup-clock profile (`ScanJob::filter_clock`). `--workgroup W` sets the
//! scan's workgroup size (`ScanOptions::workgroup_size`: the candidate scan's for Block64 and
//! Block128, the judge's for the filter kernels; default: the library's choice).

mod common;
use diversity::batch::StepReport;
use diversity::scan::FilterTuning;
use diversity::{
    files, Context, ContextOptions, DeviceTable, Precision, ScanJob, ScanKernel, ScanOptions, Shape,
};
use std::fmt::Write as _;
use std::time::Instant;

struct Args {
    table: String,
    dim: Option<usize>,
    starts: Option<usize>,
    steps: Option<usize>,
    chunk: usize,
    label: String,
    precisions: Vec<Precision>,
    quick: bool,
    shapes: Option<Vec<String>>,
    kernels: Vec<ScanKernel>,
    center: bool,
    budget_s: Option<f64>,
    best: Option<String>,
    device: Option<String>,
    json: Option<String>,
    md: Option<String>,
    plot: Option<String>,
    replot: Option<String>,
    filter: FilterTuning,
    probe: bool,
    tile_bytes: Option<u64>,
    workgroup: Option<u32>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        table: String::new(),
        dim: None,
        starts: None,
        steps: None,
        chunk: 50,
        label: "workload".into(),
        precisions: vec![Precision::Fp32, Precision::Fp16],
        quick: false,
        shapes: None,
        kernels: vec![ScanKernel::Auto],
        center: false,
        budget_s: None,
        best: None,
        device: None,
        json: None,
        md: None,
        plot: None,
        replot: None,
        filter: FilterTuning::default(),
        probe: false,
        tile_bytes: None,
        workgroup: None,
    };
    let mut it = common::Cli::new(include_str!("bench.rs"));
    while let Some(f) = it.flag()? {
        let mut val = || it.value().ok_or(format!("{f} needs a value"));
        // Each number at least the smallest that means anything (chunk 0: all at once).
        let min = |v: String, m: usize| common::int_min::<usize>(&f, &v, m);
        match f.as_str() {
            "--table" => a.table = val()?,
            "--dim" => a.dim = Some(min(val()?, 1)?),
            "--starts" => a.starts = Some(min(val()?, 1)?),
            "--steps" => a.steps = Some(min(val()?, 1)?),
            "--chunk" => a.chunk = min(val()?, 0)?,
            "--label" => a.label = val()?,
            "--precisions" => a.precisions = common::list(&f, &val()?)?,
            "--quick" => a.quick = true,
            "--probe" => a.probe = true,
            "--tile-bytes" => a.tile_bytes = Some(common::int_min::<u64>(&f, &val()?, 1)?),
            "--workgroup" => a.workgroup = Some(common::int_min::<u32>(&f, &val()?, 1)?),
            "--capacity" => {
                let c: usize = min(val()?, 1)?;
                a.filter.capacity =
                    u32::try_from(c).map_err(|_| format!("--capacity {c}: at most 2^32 - 1"))?
            }
            "--gamma-scale" => a.filter.gamma_scale = common::number(&f, &val()?, false)? as f32,
            "--shapes" => a.shapes = Some(val()?.split(',').map(str::to_string).collect()),
            "--kernels" => a.kernels = common::list(&f, &val()?)?,
            "--center" => a.center = true,
            "--budget-s" => a.budget_s = Some(common::number(&f, &val()?, true)?),
            "--best" => a.best = Some(val()?),
            "--device" => a.device = Some(val()?),
            "--json" => a.json = Some(val()?),
            "--md" => a.md = Some(val()?),
            "--plot" => a.plot = Some(val()?),
            "--replot" => a.replot = Some(val()?),
            _ => return Err(format!("unknown argument {f}")),
        }
    }
    if a.table.is_empty() && a.replot.is_none() {
        return Err("--table is required".into());
    }
    Ok(a)
}

struct Run {
    kernel: ScanKernel,
    precision: Precision,
    shape: Shape,
    tile: u32,
    pipelined: bool,
    gpu_s: f64,
    wall_s: f64,
    report: StepReport,
    identical: bool,
}

fn main() {
    let a = common::parsed("bench", parse());
    if let Err(e) = run(a) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

/// Draw the picture again from a `--json` file of an earlier run (e.g. one made on the GPU
/// machine): `bench --replot RUN.json --plot OUT.png`.
fn replot(json: &str, png: &str) -> Result<(), String> {
    let text = std::fs::read(json).map_err(|e| format!("{json}: {e}"))?;
    let j: serde_json::Value = serde_json::from_slice(&text).map_err(|e| format!("{json}: {e}"))?;
    let label = j["label"].as_str().unwrap_or("run").to_string();
    let runs: Vec<Run> = j["runs"]
        .as_array()
        .ok_or(format!("{json}: no runs"))?
        .iter()
        .map(|r| {
            let chunks: Vec<(usize, u64)> = r["chunks"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .map(|p| {
                            (
                                p[0].as_u64().unwrap_or(0) as usize,
                                p[1].as_u64().unwrap_or(0),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            Run {
                kernel: r["kernel"]
                    .as_str()
                    .unwrap_or("block64")
                    .parse()
                    .unwrap_or(ScanKernel::Block64),
                precision: r["precision"]
                    .as_str()
                    .unwrap_or("fp32")
                    .parse()
                    .unwrap_or(Precision::Fp32),
                shape: r["shape"]
                    .as_str()
                    .unwrap_or("untiled")
                    .parse()
                    .unwrap_or(Shape::Untiled),
                tile: r["tile"].as_u64().unwrap_or(0) as u32,
                pipelined: r["pipelined"].as_bool().unwrap_or(false),
                gpu_s: r["gpu_s"].as_f64().unwrap_or(0.0),
                wall_s: r["wall_s"].as_f64().unwrap_or(0.0),
                report: StepReport {
                    chunks,
                    ..StepReport::default()
                },
                identical: r["same_bits"].as_bool().unwrap_or(false),
            }
        })
        .collect();
    plot_file(png, &label, &runs)
}

/// [`plot`] into `path` whole or not at all: drawn into a temporary `.png` beside it (the
/// picture's format follows the file name's extension), then written through the atomic writer.
fn plot_file(path: &str, label: &str, runs: &[Run]) -> Result<(), String> {
    let tmp = format!("{path}.tmp-{}.png", std::process::id());
    let r = plot(&tmp, label, runs)
        .map_err(|e| format!("{path}: {e}"))
        .and_then(|()| std::fs::read(&tmp).map_err(|e| format!("{path}: {e}")))
        .and_then(|png| common::write_out(path, png));
    // Best effort: the error that matters is the drawing's or the write's.
    let _ = std::fs::remove_file(&tmp);
    r
}

fn run(a: Args) -> Result<(), String> {
    // The outputs are checked before anything is read or any device work.
    let inputs = match &a.replot {
        Some(json) => vec![("--replot".to_string(), json.into())],
        None => common::table_inputs("--table", std::path::Path::new(&a.table)),
    };
    common::check_outputs(
        &common::given(&[
            ("--json", a.json.as_ref()),
            ("--md", a.md.as_ref()),
            ("--plot", a.plot.as_ref()),
            ("--best", a.best.as_ref()),
        ]),
        &inputs,
    )?;
    if let Some(json) = &a.replot {
        return replot(
            json,
            a.plot.as_deref().ok_or("--replot needs --plot OUT.png")?,
        );
    }
    let s = |e: diversity::Error| e.to_string();
    let ctx = Context::new(&ContextOptions {
        device: a.device.clone(),
        validation: false,
    })
    .map_err(s)?;
    let caps = ctx.caps().clone();
    let table = files::load_table(a.table.as_ref(), a.dim).map_err(s)?;
    let table = if a.center { table.centered() } else { table };
    let (n, d) = (table.n(), table.d());
    let nstarts = a.starts.unwrap_or(n).min(n);
    let starts: Vec<u32> = (0..nstarts as u32).collect();
    let steps = a.steps.unwrap_or(n - 1).min(n - 1);
    let tile_bytes = a.tile_bytes.unwrap_or(caps.l2_bytes).max(1);
    eprintln!(
        "{}: {} ({}), L2 {} MiB; table {n} × {d}; {nstarts} sequences × {steps} steps; \
         tiles of {tile_bytes} bytes",
        a.label,
        caps.name,
        caps.driver,
        caps.l2_bytes >> 20
    );
    let fma = nstarts as f64 * steps as f64 * n as f64 * d as f64;
    let t_start = Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    let mut skipped = 0usize;
    // The first configuration of each precision is the reference of the same-bits column, for
    // every kernel.
    let mut reference: Vec<(Precision, Vec<u32>)> = Vec::new();
    let mut tables: Vec<(Precision, DeviceTable)> = Vec::new();
    for &p in &a.precisions {
        tables.push((p, DeviceTable::upload(&ctx, &table, p).map_err(s)?));
    }
    for &kernel in &a.kernels {
        let kernel = kernel.for_batch(&caps, starts.len());
        for (p, dt) in &tables {
            let p = *p;
            let tile =
                u32::try_from((tile_bytes / (d * p.bytes()) as u64).max(1)).unwrap_or(u32::MAX);
            let mut shapes = vec![(Shape::Untiled, 0u32), (Shape::Tiled, tile)];
            if !a.quick {
                shapes.push((Shape::Tiled, (tile / 4).max(1)));
                shapes.push((Shape::Tiled, tile.saturating_mul(4)));
            }
            shapes.push((Shape::PerTile, tile));
            if let Some(only) = &a.shapes {
                shapes.retain(|(sh, _)| only.iter().any(|o| o == sh.name()));
            }
            let pipelining: &[bool] = if a.quick { &[true] } else { &[false, true] };
            for &(shape, tile) in &shapes {
                for &pipelined in pipelining {
                    if a.budget_s
                        .is_some_and(|b| t_start.elapsed().as_secs_f64() > b)
                    {
                        skipped += 1;
                        continue;
                    }
                    let opts = ScanOptions {
                        shape,
                        tile_size: tile,
                        pipelined,
                        chunk: a.chunk,
                        steps: Some(steps),
                        filter: a.filter,
                        kernel,
                        workgroup_size: a.workgroup,
                    };
                    let mut job = ScanJob::new(dt, &starts, &opts).map_err(s)?;
                    if a.probe && kernel.is_filter() {
                        // The filter's products against plain fp32 on the same fp16 operands.
                        let pairs = job.filter_probe().map_err(s)?;
                        let scale = pairs.iter().fold(0f32, |m, p| m.max(p.1.abs()));
                        let worst = pairs.iter().fold(0f32, |m, p| m.max((p.0 - p.1).abs()));
                        let bad = pairs
                            .iter()
                            .filter(|p| (p.0 - p.1).abs() > 1e-3 * scale)
                            .count();
                        eprintln!(
                            "  probe {} {}: {} pairs, max |ref| {scale:e}, max |filter - ref| {worst:e}, {bad} beyond 1e-3; first {:?}",
                            kernel.name(),
                            p.name(),
                            pairs.len(),
                            &pairs[..4.min(pairs.len())]
                        );
                        // Block 0's band records against float64 keys of the first step.
                        let recs = job.filter_probe_bands().map_err(s)?;
                        let bw = 2 + 2 * a.filter.capacity as usize;
                        let stored = table.as_stored(p);
                        let bn = kernel.block_n().min(n);
                        let (mut missing, mut checked) = (0, 0);
                        for (i, rec) in recs.chunks(bw).enumerate() {
                            let c = stored.row(starts[i] as usize);
                            let key = |x: usize| {
                                let e = stored.row(x);
                                let dot: f64 =
                                    c.iter().zip(e).map(|(a, b)| *a as f64 * *b as f64).sum();
                                let norm: f64 =
                                    e.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
                                if norm == 0.0 {
                                    0.0
                                } else {
                                    dot / norm
                                }
                            };
                            // A block with no candidate but the start: nothing to check.
                            let Some(best) = (0..bn)
                                .filter(|&x| x != starts[i] as usize)
                                .min_by(|&x, &y| key(x).total_cmp(&key(y)))
                            else {
                                continue;
                            };
                            let cnt = rec[1];
                            let listed = cnt == u32::MAX
                                || (0..cnt.min(a.filter.capacity) as usize)
                                    .any(|j| rec[3 + 2 * j] as usize == best);
                            checked += 1;
                            if !listed {
                                missing += 1;
                                if missing <= 3 {
                                    eprintln!(
                                        "    seq {i}: best {best} key {:e} not in band; bmin {:e} count {cnt} entries {:?}",
                                        key(best),
                                        f32::from_bits(rec[0]),
                                        (0..cnt.min(a.filter.capacity) as usize)
                                            .map(|j| (f32::from_bits(rec[2 + 2 * j]), rec[3 + 2 * j], key(rec[3 + 2 * j] as usize)))
                                            .collect::<Vec<_>>()
                                    );
                                }
                            }
                        }
                        eprintln!(
                            "  probe bands: {missing} of {checked} sequences miss block 0's best"
                        );
                    }
                    let t0 = Instant::now();
                    let report = job.run().map_err(s)?;
                    let wall_s = t0.elapsed().as_secs_f64();
                    let seqs = job.sequences_flat().map_err(s)?;
                    let identical = match reference.iter().find(|r| r.0 == p) {
                        None => {
                            reference.push((p, seqs));
                            true
                        }
                        Some(r) => {
                            if r.1 != seqs {
                                let len = steps + 1;
                                let mut differ = 0;
                                let mut first = usize::MAX;
                                for (a, b) in r.1.chunks(len).zip(seqs.chunks(len)) {
                                    if let Some(k) = a.iter().zip(b).position(|(x, y)| x != y) {
                                        differ += 1;
                                        first = first.min(k);
                                    }
                                }
                                eprintln!(
                                    "  differs from the reference: {differ} sequences, first at step {first}"
                                );
                            }
                            r.1 == seqs
                        }
                    };
                    let gpu_s = report.gpu_ns as f64 / 1e9;
                    let band = job.filter_stats().map_err(s)?;
                    let band_text = band.map_or(String::new(), |b| {
                        format!(
                            "  band mean {:.2} max {} overflows {}",
                            b.mean_rescored(),
                            b.rescored_max,
                            b.overflows
                        )
                    });
                    eprintln!(
                        "  {:8} {:4} {:8} tile {:>6} {:9}  GPU {:8.3} s  wall {:8.3} s  {:6.2} TFMA/s  same bits: {}{band_text}",
                        kernel.name(),
                        p.name(),
                        shape.name(),
                        tile,
                        if pipelined { "pipelined" } else { "" },
                        gpu_s,
                        wall_s,
                        fma / gpu_s.max(1e-12) / 1e12,
                        if identical { "yes" } else { "NO" }
                    );
                    let _ = band;
                    // Shaders built with FILTER_CLOCK, run with DIVERSITY_SHADER_CLOCK: the
                    // filter's phases by the subgroup clock (before profile_phases adds to it).
                    if let Some(c) = job.filter_clock().map_err(s)? {
                        let t = c.per_block();
                        let e = c.epilogue_parts_per_block();
                        eprintln!(
                            "  clock (subgroup ticks a block, invocation 0): setup {:.0}, staging {:.0}, products {:.0}, epilogue {:.0} (keys {:.0}, reduction {:.0}, band {:.0}, headers {:.0}), fallback {:.0} over {} blocks",
                            t[0], t[1], t[2], t[3], e[0], e[1], e[2], e[3], t[4], c.blocks
                        );
                    }
                    // Shaders built with JUDGE_CLOCK, run with DIVERSITY_SHADER_CLOCK: the
                    // judge's phases likewise.
                    if let Some(c) = job.judge_clock().map_err(s)? {
                        let t = c.per_step();
                        eprintln!(
                            "  judge clock (subgroup ticks a sequence-step, invocation 0): headers {:.0}, gather {:.0}, rescore {:.0}, pick {:.0}, prepare {:.0} over {} sequence-steps",
                            t[0], t[1], t[2], t[3], t[4], c.judged
                        );
                    }
                    if a.probe {
                        // Last: it corrupts the job's state.
                        let (scan_ns, commit_ns) = job.profile_phases(20).map_err(s)?;
                        eprintln!(
                            "  phases: scan/filter {:.1} µs, commit/judge {:.1} µs a step ({:.3} s and {:.3} s over {steps} steps)",
                            scan_ns / 1e3,
                            commit_ns / 1e3,
                            scan_ns * steps as f64 / 1e9,
                            commit_ns * steps as f64 / 1e9
                        );
                    }
                    runs.push(Run {
                        kernel,
                        precision: p,
                        shape,
                        tile,
                        pipelined,
                        gpu_s,
                        wall_s,
                        report,
                        identical,
                    });
                }
            }
        }
    }
    if skipped > 0 {
        eprintln!(
            "  {skipped} configuration(s) skipped: --budget-s {} s passed",
            a.budget_s.unwrap_or(0.0)
        );
    }
    if runs.is_empty() {
        return Err("no configuration ran".into());
    }
    let base = runs
        .iter()
        .find(|r| r.precision == Precision::Fp32 && r.shape == Shape::Untiled)
        .map(|r| r.gpu_s)
        .unwrap_or(runs[0].gpu_s);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| kernel | precision | shape | tile | pipelined | GPU s | wall s | × untiled fp32 | TFMA/s | same bits |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &runs {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.2} | {:.3} | {} |",
            r.kernel.name(),
            r.precision.name(),
            r.shape.name(),
            if r.shape == Shape::Untiled {
                "—".to_string()
            } else {
                r.tile.to_string()
            },
            if r.pipelined { "yes" } else { "no" },
            r.gpu_s,
            r.wall_s,
            base / r.gpu_s.max(1e-12),
            fma / r.gpu_s.max(1e-12) / 1e12,
            if r.identical { "yes" } else { "**no**" }
        );
    }
    println!("{md}");
    if let Some(path) = &a.md {
        common::write_out(path, &md)?;
    }
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "label": a.label, "device": caps.name, "driver": caps.driver, "l2_bytes": caps.l2_bytes,
            "n": n, "dim": d, "sequences": nstarts, "steps": steps, "chunk": a.chunk,
            "skipped": skipped, "tile_bytes": tile_bytes,
            "runs": runs.iter().map(|r| serde_json::json!({
                "kernel": r.kernel.name(), "tfma_per_s": fma / r.gpu_s.max(1e-12) / 1e12,
                "precision": r.precision.name(), "shape": r.shape.name(), "tile": r.tile,
                "pipelined": r.pipelined, "gpu_s": r.gpu_s, "wall_s": r.wall_s,
                "ratio_to_untiled_fp32": base / r.gpu_s.max(1e-12), "same_bits": r.identical,
                "chunks": r.report.chunks,
            })).collect::<Vec<_>>(),
        });
        common::write_out(path, serde_json::to_vec_pretty(&j).unwrap_or_default())?;
    }
    let best = runs
        .iter()
        .min_by(|x, y| x.gpu_s.total_cmp(&y.gpu_s))
        .ok_or("no configuration ran (all skipped by --budget-s or --shapes)")?;
    let line = format!(
        "{} {} {} {:.3} {:.3}",
        best.kernel.name(),
        best.precision.name(),
        best.shape.name(),
        fma / best.gpu_s.max(1e-12) / 1e12,
        best.gpu_s
    );
    eprintln!("fastest: {line} (kernel precision shape TFMA/s GPU-s)");
    if let Some(path) = &a.best {
        common::write_out(path, format!("{line}\n"))?;
    }
    if let Some(path) = &a.plot {
        plot_file(path, &a.label, &runs)?;
    }
    Ok(())
}

/// Steps per second over the course of the run (per submission), one line per shape, for the
/// non-pipelined runs of the last precision benchmarked, of the kernel with the fastest run.
fn plot(path: &str, label: &str, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    let k = runs
        .iter()
        .min_by(|x, y| x.gpu_s.total_cmp(&y.gpu_s))
        .map(|r| r.kernel)
        .unwrap_or(ScanKernel::Block64);
    let runs: Vec<&Run> = runs.iter().filter(|r| r.kernel == k).collect();
    use plotters::prelude::*;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        include_bytes!("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    )
    .map_err(|_| "cannot load the font")?;
    let p = runs.last().map(|r| r.precision).unwrap_or(Precision::Fp16);
    let pipelined = !runs.iter().any(|r| r.precision == p && !r.pipelined);
    let series: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .filter(|r| r.precision == p && r.pipelined == pipelined)
        .map(|r| {
            let mut step = 0usize;
            let pts = r
                .report
                .chunks
                .iter()
                .map(|&(s, ns)| {
                    step += s;
                    (step as f64, s as f64 / (ns as f64 / 1e9).max(1e-12))
                })
                .collect();
            let name = match r.shape {
                Shape::Untiled => "untiled".to_string(),
                s => format!("{} {}", s.name(), r.tile),
            };
            (name, pts)
        })
        .collect();
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{label}: steps/s over the run ({}, {}{})",
                k.name(),
                p.name(),
                if pipelined { ", pipelined" } else { "" }
            ),
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("steps/s (whole batch)")
        .label_style(("sans-serif", 16))
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    root.present()?;
    Ok(())
}
