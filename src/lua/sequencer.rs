//! The sequencer handle (`dtable:sequencer(opts)`): k-step prefixes answered on demand over the
//! device table's engine ([`crate::sequencer`]). May touch the crate's sequencer and engine and
//! the binding's helpers.

use super::args::{int, int_list, opt};
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::job::job_options;
use crate::engine::Engine;
use crate::sequencer::{GramPolicy, Sequencer, SequencerOptions};
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// A sequencer.
pub(super) type LSequencer = Handle<Sequencer>;

/// `dtable:sequencer(opts)`: the job options (`mode`, the engines' options; `steps` is each
/// query's k) and `g` (`"auto"`, `"rows"` or `"whole"`: when the host engine builds G whole).
pub(super) fn new(call: &str, e: &mut Engine, o: &Option<LuaTable>) -> LuaResult<LSequencer> {
    let job = job_options(call, o)?;
    let g = match opt::<String>(o, "g")? {
        Some(s) => s.parse::<GramPolicy>().lua_ctx(call)?,
        None => GramPolicy::Auto,
    };
    let s = Sequencer::new(e, SequencerOptions { job, g }).lua_ctx(call)?;
    Ok(LSequencer::new("sequencer", s))
}

/// The k of a query: a whole number ≥ 0 (past N − 1: the whole sequence).
fn k_of(call: &str, k: &Value) -> LuaResult<usize> {
    match k {
        Value::Nil => Err(msg(call, "k (the number of steps) is required")),
        k => Ok(int(call, "k", k)? as usize),
    }
}

/// `dtable:grow(t, n_old, rows, len, opts)`: every start's sequence over this table (`t`, the
/// table it was uploaded from) from the old cache's `rows` (a binary string of little-endian
/// uint32: every start 0..n_old in order, `len` entries each, computed with `opts` on `t`'s first
/// `n_old` rows). Returns the new rows (a binary string, every start in order) and a report
/// {old_n, new_n, kept, recomputed, new_starts, steps_computed, steps_total, jobs, resumed_jobs}.
/// `opts.checkpoint` (a directory) keeps each finished job there; `opts.resume` takes those a
/// killed run left.
pub(super) fn grow(
    lua: &Lua,
    call: &str,
    e: &mut Engine,
    t: &crate::table::Table,
    (n_old, rows, len, o): (&Value, &LuaString, &Value, &Option<LuaTable>),
) -> LuaResult<(LuaString, LuaTable)> {
    let n_old = int(call, "n_old", n_old)? as usize;
    let len = int(call, "len", len)? as usize;
    let rows = super::args::u32_rows(call, &rows.as_bytes(), n_old, len)?;
    let opts = job_options(call, o)?;
    let dir = super::args::opt::<String>(o, "checkpoint")?;
    let resume = super::args::opt::<bool>(o, "resume")?.unwrap_or(false);
    let ck = dir.as_deref().map(|d| crate::grow::Checkpoint {
        dir: std::path::Path::new(d),
        resume,
    });
    let (out, r) = crate::grow::grow(e, t, n_old, &rows, len, &opts, ck).lua_ctx(call)?;
    let report = report_table(
        lua,
        &[],
        &[
            ("old_n", r.old_n as u64),
            ("new_n", r.new_n as u64),
            ("kept", r.kept as u64),
            ("recomputed", r.recomputed as u64),
            ("new_starts", r.new_starts as u64),
            ("steps_computed", r.steps_computed),
            ("steps_total", r.steps_total),
            ("jobs", r.jobs as u64),
            ("resumed_jobs", r.resumed_jobs as u64),
        ],
    )?;
    Ok((
        lua.create_string(bytemuck::cast_slice::<u32, u8>(&out))?,
        report,
    ))
}

/// A report as a Lua table: its words and its counts.
fn report_table(lua: &Lua, words: &[(&str, &str)], counts: &[(&str, u64)]) -> LuaResult<LuaTable> {
    let t = lua.create_table()?;
    for &(k, v) in words {
        t.set(k, v)?;
    }
    for &(k, v) in counts {
        t.set(k, v)?;
    }
    Ok(t)
}

impl UserData for LSequencer {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // The sequence from `start` (0-based), its first k steps: a Lua array of k + 1 ids
        // (0-based), the start first.
        m.add_method_mut("sequence", |lua, this, (start, k): (Value, Value)| {
            let call = "sequencer:sequence";
            let start = int(call, "start", &start)?;
            let start = u32::try_from(start).map_err(|_| msg(call, "start too large"))?;
            let k = k_of(call, &k)?;
            let ids = this.get_mut(call)?.sequence(start, k).lua_ctx(call)?;
            lua.create_sequence_from(ids)
        });
        // The sequences from `starts` (a Lua array of 0-based ids), in one batch: a Lua array
        // of arrays as `sequence` returns them.
        m.add_method_mut("sequences", |lua, this, (starts, k): (LuaTable, Value)| {
            let call = "sequencer:sequences";
            let starts = int_list(call, "start", &starts)?;
            let k = k_of(call, &k)?;
            let flat = this.get_mut(call)?.sequences(&starts, k).lua_ctx(call)?;
            let len = flat.len() / starts.len().max(1);
            let out = lua.create_table_with_capacity(starts.len(), 0)?;
            for row in flat.chunks_exact(len.max(1)) {
                out.raw_push(lua.create_sequence_from(row.iter().copied())?)?;
            }
            Ok(out)
        });
        // What it has done and holds: {engine, mode, g ("none", "rows" or "whole"), rows_built,
        // n, queries, sequences, query_ns, g_ns}.
        m.add_method("report", |lua, this, ()| {
            let r = this.get("sequencer:report")?.report();
            report_table(
                lua,
                &[("engine", r.engine), ("mode", r.mode.name()), ("g", r.g)],
                &[
                    ("rows_built", r.rows_built as u64),
                    ("n", r.n as u64),
                    ("queries", r.queries),
                    ("sequences", r.sequences),
                    ("query_ns", r.query_ns),
                    ("g_ns", r.g_ns),
                ],
            )
        });
        Handle::add_close(m);
    }
}
