//! The job handle (either engine, stepped by chunks, on the calling thread or a thread of its
//! own) and the job options of `dtable:job` and `gram:job`. May touch the crate's jobs and their
//! options, the stepping thread of `stepping.rs`, cdata and the binding's helpers.

use super::args::{int, int_list, int_u32, opt, opt_int, parse_mode};
use super::cdata::copy_to_cdata;
use super::error::{msg, LuaCtx};
use super::stepping::Stepping;
use crate::batch::StepReport;
use crate::engine::{Job, JobOptions};
use crate::gram::{GramOptions, Placement};
use crate::scan::{ScanOptions, Shape};
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// A job handle that can also be stepping on a thread of its own (`job:start`), so that one Lua
/// thread keeps several devices busy: while it runs, every other method refuses.
pub(super) struct LJob {
    what: &'static str,
    inner: Option<Job>,
    running: Option<Stepping>,
}

impl LJob {
    /// A handle holding `v`, not stepping.
    pub(super) fn new(what: &'static str, v: Job) -> Self {
        LJob {
            what,
            inner: Some(v),
            running: None,
        }
    }
    /// A closed handle (what `close()` leaves), for reaching the type's methods table.
    pub(super) fn closed() -> Self {
        LJob {
            what: "job",
            inner: None,
            running: None,
        }
    }
    /// Refuse while stepping on its thread.
    fn idle(&self, call: &str) -> LuaResult<()> {
        match self.running {
            Some(_) => Err(msg(
                call,
                "the job is stepping (job:start): job:wait() first",
            )),
            None => Ok(()),
        }
    }
    /// The job, or an error naming `call` while it steps on its thread or after `close()`.
    pub(super) fn get(&self, call: &str) -> LuaResult<&Job> {
        self.idle(call)?;
        self.inner
            .as_ref()
            .ok_or_else(|| msg(call, format!("{} used after close()", self.what)))
    }
    /// [`LJob::get`], mutable.
    pub(super) fn get_mut(&mut self, call: &str) -> LuaResult<&mut Job> {
        self.idle(call)?;
        let what = self.what;
        self.inner
            .as_mut()
            .ok_or_else(|| msg(call, format!("{what} used after close()")))
    }
    /// None when not started (`job:start`), else whether its step has finished.
    pub(super) fn finished(&self) -> Option<bool> {
        self.running.as_ref().map(Stepping::is_finished)
    }
    /// Join the stepping thread (if any) and take the job back; the step's result.
    fn join(&mut self) -> Option<crate::error::Result<StepReport>> {
        let (job, r) = self.running.take()?.join();
        self.inner = job;
        Some(r)
    }
}

/// Options of `dtable:job` / `dtable:resume_job`: `mode` ("scan", "gram" or "auto", the default
/// of [`JobOptions`] as on every front end); shared `chunk`, `steps`, `workgroup`; scan's
/// `shape`, `tile`, `pipelined`; gram's `placement` ("auto", "registers", "memory") and
/// `subgroups` (boolean). Options of the engine not chosen are ignored.
pub(super) fn job_options(call: &str, o: &Option<LuaTable>) -> LuaResult<JobOptions> {
    let mut scan = ScanOptions::default();
    if let Some(s) = opt::<String>(o, "shape")? {
        scan.shape = s.parse().lua_ctx(call)?;
    }
    if let Some(t) = opt_int(call, o, "tile")? {
        scan.tile_size = u32::try_from(t).map_err(|_| msg(call, "tile too large"))?;
        if opt::<String>(o, "shape")?.is_none() && t > 0 {
            scan.shape = Shape::Tiled;
        }
    }
    scan.pipelined = opt(o, "pipelined")?.unwrap_or(false);
    let gram = gram_only_options(call, o)?;
    if let Some(c) = opt_int(call, o, "chunk")? {
        scan.chunk = c as usize;
    }
    scan.steps = gram.steps;
    scan.workgroup_size = gram.workgroup_size;
    let mode = parse_mode(
        call,
        opt::<String>(o, "mode")?.as_deref(),
        JobOptions::default().mode,
    )?;
    Ok(JobOptions { mode, scan, gram })
}

/// The gram engine's options: `chunk`, `steps`, `workgroup`, `placement`, `subgroups`,
/// `compensated`, `judge`.
pub(super) fn gram_only_options(call: &str, o: &Option<LuaTable>) -> LuaResult<GramOptions> {
    let mut g = GramOptions::default();
    if let Some(c) = opt_int(call, o, "chunk")? {
        g.chunk = c as usize;
    }
    if let Some(k) = opt_int(call, o, "steps")? {
        g.steps = Some(k as usize);
    }
    if let Some(w) = opt_int(call, o, "workgroup")? {
        g.workgroup_size =
            Some(u32::try_from(w).map_err(|_| msg(call, format!("workgroup {w} too large")))?);
    }
    if let Some(p) = opt::<String>(o, "placement")? {
        g.placement = p.parse::<Placement>().lua_ctx(call)?;
    }
    g.subgroups = opt::<bool>(o, "subgroups")?;
    // Unset (nil): the engine's choice (`diversity::gram::arithmetic`).
    g.compensated = opt::<bool>(o, "compensated")?;
    // The table's mean was subtracted (the driver's `center`): plain sums by default on GPUs.
    g.centered = opt::<bool>(o, "centered")?.unwrap_or(false);
    g.judge = opt::<bool>(o, "judge")?;
    Ok(g)
}

impl UserData for LJob {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method_mut("step", |_, this, (n, tile): (Value, Option<Value>)| {
            let call = "job:step";
            let n = int(call, "step count", &n)?;
            let job = this.get_mut(call)?;
            if let Some(t) = tile.filter(|t| !t.is_nil()) {
                let t = int_u32(call, "tile", &t)?;
                let (shape, t) = Shape::from_tile(t);
                // Tiles are the scan engine's; a gram step reads whole Gram rows.
                job.set_tiling(shape, t);
            }
            let r = job.step(n as usize).lua_ctx(call)?;
            Ok((r.steps, r.gpu_ns))
        });
        // Step on a thread of its own and return at once: `job:start(n)`, then `job:wait()` (or
        // `diversity.wait_any{jobs…}`) gives what `job:step(n)` would have.
        m.add_method_mut("start", |_, this, n: Value| {
            let call = "job:start";
            let n = int(call, "step count", &n)? as usize;
            this.get(call)?;
            let job = this.inner.take().expect("checked by get");
            match Stepping::spawn(job, n) {
                Ok(h) => {
                    this.running = Some(h);
                    Ok(())
                }
                Err(e) => Err(msg(call, format!("cannot start a thread: {e}"))),
            }
        });
        // Whether `job:wait()` would return without blocking (true when not started).
        m.add_method("ready", |_, this, ()| Ok(this.finished().unwrap_or(true)));
        m.add_method_mut("wait", |_, this, ()| {
            let call = "job:wait";
            match this.join() {
                None => Err(msg(call, "the job was not started (job:start)")),
                Some(r) => {
                    let r = r.lua_ctx(call)?;
                    Ok((r.steps, r.gpu_ns))
                }
            }
        });
        m.add_method_mut("set_chunk", |_, this, c: Value| {
            let c = int("job:set_chunk", "chunk", &c)?;
            this.get_mut("job:set_chunk")?.set_chunk(c as usize);
            Ok(())
        });
        m.add_method("done", |_, this, ()| Ok(this.get("job:done")?.done()));
        // "scan" or "gram": the engine the job runs on (what "auto" chose).
        m.add_method("mode", |_, this, ()| {
            Ok(this.get("job:mode")?.mode().name())
        });
        // Where the job runs: "host" (the native CPU engine) or "device".
        m.add_method("engine", |_, this, ()| Ok(this.get("job:engine")?.engine()));
        // Where a gram job keeps its state ("registers" or "memory"); nil for a scan job.
        m.add_method("placement", |_, this, ()| {
            Ok(this.get("job:placement")?.placement().map(Placement::name))
        });
        m.add_method("workgroup_size", |_, this, ()| {
            Ok(this.get("job:workgroup_size")?.workgroup_size())
        });
        // Whether a gram job reduces with subgroup operations; nil for a scan job.
        m.add_method("uses_subgroups", |_, this, ()| {
            Ok(this.get("job:uses_subgroups")?.uses_subgroups())
        });
        m.add_method("progress", |_, this, ()| {
            let j = this.get("job:progress")?;
            Ok((j.steps_done(), j.total_steps()))
        });
        m.add_method("gpu_ns", |_, this, ()| Ok(this.get("job:gpu_ns")?.gpu_ns()));
        m.add_method("batch_size", |_, this, ()| {
            Ok(this.get("job:batch_size")?.starts().len())
        });
        m.add_method("sequence_len", |_, this, ()| {
            Ok(this.get("job:sequence_len")?.sequence_len())
        });
        m.add_method("starts", |lua, this, ()| {
            lua.create_sequence_from(this.get("job:starts")?.starts().iter().copied())
        });
        // Lua tables: rows 1..S, each a 1-based array of 0-based indices.
        m.add_method("sequences", |lua, this, ()| {
            let j = this.get("job:sequences")?;
            let flat = j.sequences_flat().lua_ctx("job:sequences")?;
            let len = j.sequence_len();
            let out = lua.create_table_with_capacity(j.starts().len(), 0)?;
            for (i, row) in flat.chunks_exact(len).enumerate() {
                out.raw_set(i + 1, lua.create_sequence_from(row.iter().copied())?)?;
            }
            Ok(out)
        });
        // Entries from..to of every sequence as a binary string of little-endian uint32 (row-major):
        // what the driver appends to its checkpoint after each chunk.
        m.add_method("columns", |lua, this, (from, to): (Value, Value)| {
            let call = "job:columns";
            let (from, to) = (
                int(call, "from", &from)? as usize,
                int(call, "to", &to)? as usize,
            );
            let cols = this.get(call)?.sequence_columns(from, to).lua_ctx(call)?;
            lua.create_string(bytemuck::cast_slice::<u32, u8>(&cols))
        });
        // Entries from..to of every sequence into a `diversity.rows()` buffer (its memory reused
        // from one download to the next): what the driver's checkpoint and writers take.
        m.add_method(
            "columns_into",
            |_, this, (rows, from, to): (LuaAnyUserData, Value, Value)| {
                let call = "job:columns_into";
                let (from, to) = (
                    int(call, "from", &from)? as usize,
                    int(call, "to", &to)? as usize,
                );
                let job = this.get(call)?;
                let mut r = rows.borrow_mut::<super::rows::LRows>()?;
                r.fill(call, job.starts().len(), to.saturating_sub(from), |out| {
                    job.sequence_columns_into(from, to, out)
                })
            },
        );
        // FFI-friendly: the rows as one binary string of little-endian uint32.
        m.add_method("sequences_bytes", |lua, this, ()| {
            let flat = this
                .get("job:sequences_bytes")?
                .sequences_flat()
                .lua_ctx("job:sequences_bytes")?;
            lua.create_string(bytemuck::cast_slice::<u32, u8>(&flat))
        });
        // FFI-friendly: fill `out`, a uint32_t[?] cdata of at least rows × len entries (its size
        // read with ffi.sizeof), with the rows; returns the number of entries written.
        m.add_method("download", |lua, this, out: Value| {
            let call = "job:download";
            let flat = this.get(call)?.sequences_flat().lua_ctx(call)?;
            copy_to_cdata(lua, call, "out", &["uint32_t", "unsigned int"], out, &flat)
        });
        // Closing a started job cancels its step at the next submission and waits for the
        // thread (dropping the `Stepping`), as garbage collection does.
        m.add_method_mut("close", |_, this, ()| {
            this.running = None;
            this.inner = None;
            Ok(())
        });
    }
}

/// `check_starts`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.check_starts(starts, n)`: the check every job runs on its starts (at least one,
    // each an index below n, none repeated), for drivers that check before any file or GPU work.
    m.set(
        "check_starts",
        lua.create_function(|_, (starts, n): (LuaTable, Value)| {
            let call = "check_starts";
            let starts = int_list(call, "start", &starts)?;
            let n = int(call, "n", &n)? as usize;
            crate::engine::check_starts(&starts, n).lua_ctx(call)
        })?,
    )
}
