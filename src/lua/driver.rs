//! The mechanics the Lua driver (the `diversity.driver` module) asks of Rust, so that the driver
//! keeps only the policy: the checkpoint format (`diversity.checkpoint_*`,
//! `diversity.starts_fingerprint`: thin bindings of [`crate::checkpoint`], which writes run.txt's
//! text, the batch files' names and checksums and checks what a `--resume` reads) and batch
//! sizing and engine choice over several devices (`diversity.max_batch`, `diversity.mode_for`,
//! `diversity.host_batch`, `diversity.default_host_memory`, `diversity.batch_sizes`). May touch
//! [`crate::checkpoint`], [`crate::engine`]'s and [`crate::batch`]'s sizing and mode choice, the
//! rows buffer (`rows.rs`) and the binding's helpers; the driver keeps the file writes.

use super::args::{dims, int, int_list, parse_mode, parse_precision};
use super::context::{BatchSizing, LContext, SizingArgs};
use super::device_table::mode_values;
use super::error::{msg, LuaCtx};
use super::rows::LRows;
use super::set_function;
use crate::checkpoint::{self as ck, RunFingerprint};
use crate::engine::ModeChoice;
use crate::mode::Mode;
use mlua::prelude::*;
use mlua::Value;
use std::path::Path;

/// A `--resume` refusal as the driver has always raised it.
fn resume_error(e: crate::error::Error) -> LuaError {
    LuaError::RuntimeError(format!("diversity: --resume: {e}"))
}

/// A Lua array of starts as u64.
fn starts(call: &str, t: &LuaTable) -> LuaResult<Vec<u64>> {
    Ok(int_list(call, "start", t)?
        .into_iter()
        .map(u64::from)
        .collect())
}

/// The arguments that say what a batch's rows must be: the starts (a Lua array), the row
/// length and N, checked.
fn rows_args(
    call: &str,
    list: &LuaTable,
    len: &Value,
    n: &Value,
) -> LuaResult<(Vec<u64>, usize, usize)> {
    let list = starts(call, list)?;
    let len = int(call, "len", len)? as usize;
    let n = int(call, "n", n)? as usize;
    Ok((list, len, n))
}

/// The bytes of a binary string or of a `diversity.rows()` buffer, handed to `f`.
fn with_bytes<R>(call: &str, v: &Value, f: impl FnOnce(&[u8]) -> R) -> LuaResult<R> {
    match v {
        Value::String(s) => Ok(f(&s.as_bytes())),
        Value::UserData(u) => Ok(f(u.borrow::<LRows>()?.bytes())),
        other => Err(msg(
            call,
            format!(
                "expected a string or a rows buffer, got a {}",
                other.type_name()
            ),
        )),
    }
}

/// The `checkpoint_*` functions, `starts_fingerprint`, `max_batch`, `mode_for`, `host_batch`,
/// `default_host_memory` and `batch_sizes`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    register_sizing(lua, m)?;
    register_run(lua, m)?;
    register_batches(lua, m)
}

/// `max_batch`, `mode_for`, `host_batch`, `batch_sizes` and `default_host_memory`: a run's
/// engine and batch sizes over its devices and the host's memory.
fn register_sizing(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.max_batch(contexts, n, dim, precision [, steps = n − 1 [, mode = "auto"]])`:
    // the largest batch that every context of the Lua array allows (the smallest of their
    // `ctx:max_batch`), so that batches shared out over several devices fit each of them.
    set_function(
        lua,
        m,
        "max_batch",
        |_, (ctxs, args): (LuaTable, SizingArgs)| {
            let call = "max_batch";
            let sizing = BatchSizing::parse(call, args)?;
            let mut fit = None::<usize>;
            for c in ctxs.sequence_values::<LuaAnyUserData>() {
                let c = c?;
                let c = c.borrow::<LContext>()?;
                let f = sizing.max_batch(c.get(call)?);
                fit = Some(fit.map_or(f, |m| m.min(f)));
            }
            fit.ok_or_else(|| msg(call, "no contexts"))
        },
    )?;
    // `diversity.mode_for(contexts, n, dim, precision [, mode = "auto"])`: the engine every
    // context of the Lua array agrees on, as `ctx:mode_for` returns it (mode, reason, code, why
    // G does not fit or nil): the first context's choice, unless another context chooses
    // otherwise or cannot run a requested gram, whose choice then stands, its reason naming it
    // ("device d of k (name): …"; a requested gram that does not fit keeps its own reason).
    set_function(
        lua,
        m,
        "mode_for",
        |_,
         (ctxs, n, d, precision, mode): (
            LuaTable,
            Value,
            Value,
            Option<String>,
            Option<String>,
        )| {
            let call = "mode_for";
            let (n, d) = dims(call, &n, &d)?;
            let p = parse_precision(call, precision)?;
            let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
            let ctxs: Vec<LuaAnyUserData> = ctxs.sequence_values().collect::<LuaResult<_>>()?;
            let mut choices = Vec::with_capacity(ctxs.len());
            for u in &ctxs {
                let c = u.borrow::<LContext>()?;
                let target = c.get(call)?;
                choices.push((target.mode_for(mode, n, d, p), target.name()));
            }
            let agreed = ModeChoice::agree(&choices).map(|(c, reason)| {
                let (m, _, code, unfit) = mode_values(&c);
                (m, reason, code, unfit)
            });
            agreed.ok_or_else(|| msg(call, "no contexts"))
        },
    )?;
    // `diversity.host_batch(bytes, steps)`: the most sequences of `steps` steps a batch may
    // hold within `bytes` of host memory (≥ 1).
    set_function(lua, m, "host_batch", |_, (bytes, steps): (f64, Value)| {
        let steps = int("host_batch", "steps", &steps)?;
        Ok(crate::batch::host_batch(
            bytes.max(0.0).floor() as u64,
            steps,
        ))
    })?;
    // `diversity.batch_sizes{gram =, requested =, default =, fit =, host_fit =, devices =,
    // starts =, all_starts =}`: a run's batch, the batches' size over its devices and the whole
    // run's batch (`crate::batch::batch_sizes`; `requested` nil when `--batch` is not given).
    set_function(lua, m, "batch_sizes", |_, o: LuaTable| {
        let call = "batch_sizes";
        let num = |k: &str| -> LuaResult<u64> { int(call, k, &o.get::<Value>(k)?) };
        let requested = match o.get::<Value>("requested")? {
            Value::Nil => None,
            v => Some(int(call, "requested", &v)?),
        };
        let r = crate::batch::BatchRequest {
            gram: o.get::<Option<bool>>("gram")?.unwrap_or(false),
            requested,
            default: num("default")?,
            fit: num("fit")?,
            host_fit: num("host_fit")?,
            devices: num("devices")?,
            starts: num("starts")?,
            all_starts: num("all_starts")?,
        };
        Ok(crate::batch::batch_sizes(&r))
    })?;
    // `diversity.default_host_memory()`: min(2 GiB, a quarter of the host's memory).
    set_function(lua, m, "default_host_memory", |_, ()| {
        Ok(crate::batch::default_host_memory())
    })?;
    Ok(())
}

/// `starts_fingerprint` and the checkpoint's run: run.txt's fingerprint, text and check, its
/// time, the driver's files and their names.
fn register_run(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.starts_fingerprint(starts)`: "fnv1a32:xxxxxxxx" over "s1,s2,…".
    set_function(lua, m, "starts_fingerprint", |_, list: LuaTable| {
        Ok(ck::starts_fingerprint(&starts(
            "starts_fingerprint",
            &list,
        )?))
    })?;
    // `diversity.checkpoint_fingerprint{input =, center =, precision =, mode =, summation =,
    // steps =, batch =, starts =, n =, dim =}`: run.txt's fingerprint lines (the input's
    // content checksum read from `input`).
    set_function(lua, m, "checkpoint_fingerprint", |_, o: LuaTable| {
        let call = "checkpoint_fingerprint";
        let input: String = o
            .get::<Option<String>>("input")?
            .ok_or_else(|| msg(call, "input is required"))?;
        let num = |k: &str| -> LuaResult<u64> { int(call, k, &o.get::<Value>(k)?) };
        let list = starts(call, &o.get::<LuaTable>("starts")?)?;
        let precision: String = o.get("precision")?;
        let mode: String = o.get("mode")?;
        let summation: Option<String> = o.get("summation")?;
        let fp = RunFingerprint {
            input: &input,
            input_checksum: Some(RunFingerprint::checksum_input(&input).lua_ctx(call)?),
            center: o.get::<Option<bool>>("center")?.unwrap_or(false),
            precision: &precision,
            mode: &mode,
            summation: summation.as_deref(),
            steps: num("steps")?,
            batch: num("batch")?,
            starts: &list,
            n: num("n")?,
            dim: num("dim")?,
        };
        Ok(fp.text())
    })?;
    // `diversity.checkpoint_run_text(fp, generated_at)`: the whole text of run.txt.
    set_function(
        lua,
        m,
        "checkpoint_run_text",
        |_, (fp, at): (String, String)| Ok(ck::run_text(&fp, &at)),
    )?;
    // `diversity.checkpoint_check_run(ckdir, fp, run_text)`: raises the `--resume` refusal when
    // the checkpoint belongs to another run, its run.txt was edited, or it has batch files but
    // no run.txt.
    set_function(
        lua,
        m,
        "checkpoint_check_run",
        |_, (dir, fp, text): (String, String, String)| {
            ck::check_run_file(&dir, &fp, &text).map_err(resume_error)
        },
    )?;
    // `diversity.checkpoint_time(ckdir)`: run.txt's generated_at, or nil.
    set_function(lua, m, "checkpoint_time", |_, dir: String| {
        Ok(ck::checkpoint_time(Path::new(&dir)))
    })?;
    // `diversity.checkpoint_files(ckdir)`: the driver's files there (names, a Lua array).
    set_function(lua, m, "checkpoint_files", |lua, dir: String| {
        lua.create_sequence_from(ck::checkpoint_files(Path::new(&dir)))
    })?;
    // `diversity.checkpoint_batch_file(ckdir, b)` / `checkpoint_part_file(ckdir, b)`: the
    // paths of batch b's (1-based) finished and in-progress files.
    for (name, file) in [
        (
            "checkpoint_batch_file",
            ck::batch_file as fn(usize) -> String,
        ),
        ("checkpoint_part_file", ck::part_file),
    ] {
        m.set(
            name,
            lua.create_function(move |_, (dir, b): (String, Value)| {
                let b = int(name, "b", &b)? as usize;
                Ok(format!("{dir}/{}", file(b)))
            })?,
        )?;
    }
    Ok(())
}

/// The checkpoint's batches: the binding of a batch's checksums, a finished batch's checksum,
/// a .part block's header, and the checked reads of both files.
fn register_batches(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.checkpoint_binding(run_text, b, starts)`: what every checksum of batch b's
    // files covers.
    set_function(
        lua,
        m,
        "checkpoint_binding",
        |_, (text, b, list): (String, Value, LuaTable)| {
            let call = "checkpoint_binding";
            let b = int(call, "b", &b)?;
            Ok(ck::batch_binding(&text, b, &starts(call, &list)?))
        },
    )?;
    // `diversity.checkpoint_batch_checksum(binding, bytes)`: a finished batch's .sum text
    // (`bytes` a binary string or a rows buffer).
    set_function(
        lua,
        m,
        "checkpoint_batch_checksum",
        |_, (binding, bytes): (String, Value)| {
            with_bytes("checkpoint_batch_checksum", &bytes, |b| {
                ck::batch_checksum(&binding, b)
            })
        },
    )?;
    // `diversity.checkpoint_part_head(binding, from, count, bytes)`: the 16-byte header of a
    // .part block.
    let call = "checkpoint_part_head";
    set_function(
        lua,
        m,
        call,
        move |lua, (binding, from, count, bytes): (String, Value, Value, Value)| {
            let from = super::args::int_u32(call, "from", &from)?;
            let count = super::args::int_u32(call, "count", &count)?;
            let head = with_bytes(call, &bytes, |b| {
                ck::part_block_head(&binding, from, count, b)
            })?;
            lua.create_string(head)
        },
    )?;
    // `diversity.checkpoint_check_rows(bytes, starts, len, n)`: nil, or the first bad row.
    set_function(
        lua,
        m,
        "checkpoint_check_rows",
        |_, (bytes, list, len, n): (LuaString, LuaTable, Value, Value)| {
            let (list, len, n) = rows_args("checkpoint_check_rows", &list, &len, &n)?;
            Ok(ck::check_rows(&bytes.as_bytes(), &list, len, n))
        },
    )?;
    // `diversity.checkpoint_read_batch(path, binding, starts, len, n)`: a finished batch's
    // bytes, or nil; raises the `--resume` refusal for a file it cannot take.
    set_function(
        lua,
        m,
        "checkpoint_read_batch",
        |lua, (path, binding, list, len, n): (String, String, LuaTable, Value, Value)| {
            let (list, len, n) = rows_args("checkpoint_read_batch", &list, &len, &n)?;
            match ck::read_batch(&path, &binding, &list, len, n).map_err(resume_error)? {
                Some(b) => Ok(Some(lua.create_string(b)?)),
                None => Ok(None),
            }
        },
    )?;
    // `diversity.checkpoint_read_part(path, binding, starts, n)`: the steps so far of an
    // unfinished batch (the rows' first `have` entries as a binary string, and `have`), or nil;
    // raises the `--resume` refusal for a block it cannot take.
    set_function(
        lua,
        m,
        "checkpoint_read_part",
        |lua, (path, binding, list, n): (String, String, LuaTable, Value)| {
            let call = "checkpoint_read_part";
            let list = starts(call, &list)?;
            let n = int(call, "n", &n)? as usize;
            match ck::read_part_rows(&path, &binding, &list, n).map_err(resume_error)? {
                Some((b, have)) => Ok((Some(lua.create_string(b)?), Some(have))),
                None => Ok((None, None)),
            }
        },
    )?;
    Ok(())
}
