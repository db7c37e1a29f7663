//! Diversity sequences from a table file, on any Vulkan device.
//!
//! ```text
//! cargo run --release --example sequences -- --table FILE [--dim D] [--center]
//!     [--precision fp32|fp16] [--mode scan|gram|auto] [--placement auto|registers|memory]
//!     [--plain-sums|--compensated-sums] [--judge|--no-judge]
//!     [--shape untiled|tiled|per-tile] [--tile T] [--pipelined] [--starts all|a,b,c]
//!     [--steps K] [--chunk C] [--batch B] [--workgroup W] [--device NAME] [--validation]
//!     [--describe] [--out FILE.json]
//! ```
//!
//! `--mode auto` (the default) runs the gram engine when G = E Eᵀ fits the device's memory
//! budget, else the scan engine; the summary line and the metadata say which.
//!
//! FILE is a raw little-endian float32 `.f32` (needs `--dim`), a `.npy` (float32 or float16) or
//! an `embeddings.json`. The output JSON is
//! `{"metadata":{…}, "sequences":{"<start>":[0-based indices…]}}`, written to a temporary file
//! beside `--out` and renamed at the end; the output location is checked before any GPU work.
//! One summary line goes to stdout.

mod common;

use diversity::cache::PendingFile;
use diversity::engine::{self, Engine, JobOptions, ModeChoice};
use diversity::gram::{GramOptions, Mode, Placement};
use diversity::{files, Context, ContextOptions, DeviceTable, Precision, ScanOptions, Shape};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

struct Args {
    table: PathBuf,
    dim: Option<usize>,
    center: bool,
    precision: Precision,
    mode: Mode,
    placement: Placement,
    /// The gram arithmetic named on the command line (`None`: the engine's choice).
    compensated: Option<bool>,
    judge: Option<bool>,
    shape: Shape,
    tile: u32,
    pipelined: bool,
    starts: Option<Vec<u32>>,
    steps: Option<usize>,
    chunk: usize,
    batch: Option<usize>,
    workgroup: Option<u32>,
    device: Option<String>,
    validation: bool,
    describe: bool,
    out: PathBuf,
}

fn parse() -> Result<Args, String> {
    let mut it = common::Cli::new(include_str!("sequences.rs"));
    let mut a = Args {
        table: PathBuf::new(),
        dim: None,
        center: false,
        precision: Precision::Fp32,
        mode: Mode::Auto,
        placement: Placement::Auto,
        compensated: None,
        judge: None,
        shape: Shape::Untiled,
        tile: 0,
        pipelined: false,
        starts: None,
        steps: None,
        chunk: 64,
        batch: None,
        workgroup: None,
        device: None,
        validation: false,
        describe: false,
        out: PathBuf::from("sequences.json"),
    };
    // Each number at least the smallest that means anything (tile and chunk 0: untiled, all at
    // once); a zero batch or step count is refused, not raised to 1.
    use common::int_arg as num;
    while let Some(flag) = it.flag()? {
        match flag.as_str() {
            "--table" => a.table = it.value().ok_or("--table needs a file")?.into(),
            "--dim" => a.dim = Some(num("--dim", it.value(), 1usize)?),
            "--center" => a.center = true,
            "--precision" => {
                a.precision = it
                    .value()
                    .ok_or("--precision needs fp32 or fp16")?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--mode" => {
                a.mode = it
                    .value()
                    .ok_or("--mode needs scan, gram or auto")?
                    .parse()
                    .map_err(|e: diversity::Error| format!("--mode: {e}"))?
            }
            "--placement" => {
                a.placement = it
                    .value()
                    .ok_or("--placement needs auto, registers or memory")?
                    .parse()
                    .map_err(|e: diversity::Error| format!("--placement: {e}"))?
            }
            "--plain-sums" => a.compensated = Some(false),
            "--compensated-sums" => a.compensated = Some(true),
            "--judge" => a.judge = Some(true),
            "--no-judge" => a.judge = Some(false),
            "--shape" => {
                a.shape = it
                    .value()
                    .ok_or("--shape needs a value")?
                    .parse()
                    .map_err(|e: diversity::Error| e.to_string())?
            }
            "--tile" => a.tile = num("--tile", it.value(), 0u32)?,
            "--pipelined" => a.pipelined = true,
            "--starts" => {
                let v = it.value().ok_or("--starts needs all or a,b,c")?;
                if v != "all" {
                    a.starts = Some(
                        v.split(',')
                            .map(|s| {
                                s.trim()
                                    .parse()
                                    .map_err(|_| format!("--starts: '{s}' is not an index"))
                            })
                            .collect::<Result<_, _>>()?,
                    );
                }
            }
            "--steps" => a.steps = Some(num("--steps", it.value(), 1usize)?),
            "--chunk" => a.chunk = num("--chunk", it.value(), 0usize)?,
            "--batch" => a.batch = Some(num("--batch", it.value(), 1usize)?),
            "--workgroup" => a.workgroup = Some(num("--workgroup", it.value(), 1u32)?),
            "--device" => a.device = Some(it.value().ok_or("--device needs a name")?),
            "--validation" => a.validation = true,
            "--describe" => a.describe = true,
            "--out" => a.out = it.value().ok_or("--out needs a file")?.into(),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if a.table.as_os_str().is_empty() && !a.describe {
        return Err("--table is required".into());
    }
    Ok(a)
}

fn run(a: Args) -> Result<(), String> {
    // The output is checked before any device work (and again by its writer).
    if !a.table.as_os_str().is_empty() {
        common::check_outputs(
            &common::given(&[("--out", Some(&a.out))]),
            &common::table_inputs("--table", &a.table),
        )?;
    }
    let ctx = Context::new(&ContextOptions {
        device: a.device.clone(),
        validation: a.validation,
    })
    .map_err(|e| e.to_string())?;
    if a.describe {
        println!("{}", ctx.describe());
        if a.table.as_os_str().is_empty() {
            return Ok(());
        }
    }
    // An fp16 .bin saved centred is centred: not again, and labelled so.
    let (mut table, centred) =
        files::load_table_centred(&a.table, a.dim).map_err(|e| e.to_string())?;
    if a.center && !centred {
        table = table.centered();
    }
    let center = a.center || centred;
    let n = table.n();
    let starts: Vec<u32> = a.starts.clone().unwrap_or_else(|| (0..n as u32).collect());
    let (pending, file) = PendingFile::create(&a.out).map_err(|e| e.to_string())?;
    let caps = ctx.caps().clone();
    let steps = a.steps.unwrap_or(n - 1).min(n - 1);
    let choice = ModeChoice::new(&caps, a.mode, n, table.d(), a.precision);
    let mode = choice.mode;
    eprintln!("mode {} ({choice})", mode.name());
    let fit = engine::max_batch(&caps, mode, n, table.d(), a.precision, steps);
    let batch = a
        .batch
        .unwrap_or(usize::MAX)
        .min(fit)
        .min(caps.max_workgroup_count as usize)
        .min(starts.len())
        .max(1);
    let opts = JobOptions {
        mode,
        scan: ScanOptions {
            shape: a.shape,
            tile_size: a.tile,
            pipelined: a.pipelined,
            chunk: a.chunk,
            steps: Some(steps),
            workgroup_size: a.workgroup,
            ..ScanOptions::default()
        },
        gram: GramOptions {
            chunk: a.chunk,
            steps: Some(steps),
            workgroup_size: a.workgroup,
            placement: a.placement,
            subgroups: None,
            compensated: a.compensated,
            centered: center,
            judge: a.judge,
            ..GramOptions::default()
        },
    };
    let t0 = Instant::now();
    let dt = DeviceTable::upload(&ctx, &table, a.precision).map_err(|e| e.to_string())?;
    // G (gram mode) is built by the first job and shared by every batch.
    let mut engine = Engine::new(dt);
    let mut placement = None;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let io = |e: std::io::Error| format!("{}: {e}", a.out.display());
    write!(w, "{{\"sequences\":{{").map_err(io)?;
    let mut gpu_ns = 0u64;
    let mut first = true;
    for chunk in starts.chunks(batch) {
        let mut job = engine.job(chunk, &opts).map_err(|e| e.to_string())?;
        job.run().map_err(|e| e.to_string())?;
        gpu_ns += job.gpu_ns();
        placement = job.placement();
        let flat = job.sequences_flat().map_err(|e| e.to_string())?;
        let len = job.sequence_len();
        for (row, &s) in flat.chunks_exact(len).zip(chunk) {
            if !first {
                w.write_all(b",").map_err(io)?;
            }
            first = false;
            write!(w, "\"{s}\":[").map_err(io)?;
            for (i, v) in row.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",").map_err(io)?;
                }
                write!(w, "{v}").map_err(io)?;
            }
            w.write_all(b"]").map_err(io)?;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    // The G the jobs shared (held by the engine since the first gram job).
    let g = match mode {
        Mode::Gram => Some(engine.gram_for(&opts.gram).map_err(|e| e.to_string())?),
        _ => None,
    };
    let meta = serde_json::json!({
        "table": a.table.display().to_string(),
        "num_items": n,
        "dim": table.d(),
        "center": center,
        "precision": a.precision.name(),
        "mode": mode.name(),
        "mode_reason": choice.to_string(),
        "placement": placement.map(|p| p.name()),
        "summation": match mode {
            Mode::Gram => Some(
                diversity::gram::summation(&caps, n, table.d(), &opts.gram)
                    .map_err(|e| e.to_string())?,
            ),
            _ => None,
        },
        "gram_build_ns": g.as_ref().map(|g| g.build_ns()),
        "shape": a.shape.name(),
        "tile_size": a.tile,
        "pipelined": a.pipelined,
        "steps": steps,
        "chunk": a.chunk,
        "batch_size": batch,
        "num_sequences": starts.len(),
        "device": caps.name,
        "driver": caps.driver,
        "gpu_ns": gpu_ns,
        "wall_s": wall,
    });
    write!(w, "}},\"metadata\":{meta}}}").map_err(io)?;
    w.flush().map_err(io)?;
    drop(w);
    pending.commit().map_err(|e| e.to_string())?;
    let gpu_s = gpu_ns as f64 / 1e9;
    let batches = starts.len().div_ceil(batch);
    let engine = match placement {
        Some(p) => format!("gram {}", p.name()),
        None => format!(
            "scan {} tile {}{}",
            a.shape.name(),
            a.tile,
            if a.pipelined { " pipelined" } else { "" }
        ),
    };
    println!(
        "{} | {} {} | {} × {} | {} sequences × {} steps in {} batch(es) | {:.1} steps/s ({:.0} sequence-steps/s) | GPU {:.3} s, wall {:.3} s | {}",
        caps.name,
        engine,
        a.precision.name(),
        n,
        table.d(),
        starts.len(),
        steps,
        batches,
        (steps * batches) as f64 / gpu_s.max(1e-12),
        (steps * starts.len()) as f64 / gpu_s.max(1e-12),
        gpu_s,
        wall,
        a.out.display()
    );
    if a.validation {
        let msgs = ctx.validation_messages();
        if !msgs.is_empty() {
            return Err(format!("validation layers reported:\n{}", msgs.join("\n")));
        }
    }
    Ok(())
}

fn main() {
    let a = common::parsed("sequences", parse());
    if let Err(e) = run(a) {
        eprintln!("sequences: {e}");
        std::process::exit(1);
    }
}
