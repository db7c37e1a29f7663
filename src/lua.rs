//! The LuaJIT module (`require "diversity"`): a thin skin over the Rust API. Every handle is a
//! userdata with `close()`; use after close is a Lua error; garbage collection in any order frees
//! everything (each handle keeps what it needs alive through `Arc`s). Errors carry the call's
//! name and the cause. No logic lives here that the Rust tests cannot reach, except the
//! conversion of Lua values and FFI cdata.

use crate::batch::StepReport;
use crate::cache::{BinaryCache, BinaryCacheWriter, JsonCacheWriter, KnnGraph, KnnMetric, KNN_PAD};
use crate::device::{Context, ContextOptions};
use crate::device_table::DeviceTable;
use crate::error::Error;
use crate::files;
use crate::gram::{self, Gram, GramJob, GramOptions, Mode, Placement};
use crate::knn::{knn, KnnOptions, KnnPath, KnnResult, Metric, NO_ID};
use crate::rankings::{self, RankingsOptions, RankingsReport};
use crate::scan::{ScanJob, ScanOptions, Shape};
use crate::table::{Precision, Table};
use half::f16;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// Wrap a crate error as a Lua runtime error naming the call.
fn err(call: &str, e: Error) -> LuaError {
    LuaError::RuntimeError(format!("diversity.{call}: {e}"))
}

fn msg(call: &str, m: impl std::fmt::Display) -> LuaError {
    LuaError::RuntimeError(format!("diversity.{call}: {m}"))
}

/// A handle that `close()` empties; every method goes through [`Handle::get`].
struct Handle<T> {
    what: &'static str,
    inner: Option<T>,
}

impl<T> Handle<T> {
    fn new(what: &'static str, v: T) -> Self {
        Handle {
            what,
            inner: Some(v),
        }
    }
    fn get(&self, call: &str) -> LuaResult<&T> {
        self.inner
            .as_ref()
            .ok_or_else(|| msg(call, format!("{} used after close()", self.what)))
    }
    fn get_mut(&mut self, call: &str) -> LuaResult<&mut T> {
        let what = self.what;
        self.inner
            .as_mut()
            .ok_or_else(|| msg(call, format!("{what} used after close()")))
    }
}

type LContext = Handle<Context>;
type LTable = Handle<Table>;
type LDeviceTable = Handle<DevTable>;
type LGram = Handle<Gram>;
/// A job handle that can also be stepping on a thread of its own (`job:start`), so that one Lua
/// thread keeps several devices busy: while it runs, every other method refuses.
struct LJob {
    what: &'static str,
    inner: Option<Job>,
    running: Option<std::thread::JoinHandle<(SendJob, crate::Result<StepReport>)>>,
}

/// A job moved to the stepping thread and back. SAFETY: a job (its Vulkan command pool, buffers,
/// mapped memory) is used by exactly one thread at a time — it is moved into the thread by
/// `job:start` and out of it by `job:wait` — which is all Vulkan's external synchronization asks;
/// its context is `Send + Sync`.
struct SendJob(Job);
unsafe impl Send for SendJob {}

impl LJob {
    fn new(what: &'static str, v: Job) -> Self {
        LJob {
            what,
            inner: Some(v),
            running: None,
        }
    }
    fn get(&self, call: &str) -> LuaResult<&Job> {
        if self.running.is_some() {
            return Err(msg(
                call,
                "the job is stepping (job:start): job:wait() first",
            ));
        }
        self.inner
            .as_ref()
            .ok_or_else(|| msg(call, format!("{} used after close()", self.what)))
    }
    fn get_mut(&mut self, call: &str) -> LuaResult<&mut Job> {
        if self.running.is_some() {
            return Err(msg(
                call,
                "the job is stepping (job:start): job:wait() first",
            ));
        }
        let what = self.what;
        self.inner
            .as_mut()
            .ok_or_else(|| msg(call, format!("{what} used after close()")))
    }
    /// Join the stepping thread (if any) and take the job back; the step's result.
    fn join(&mut self) -> Option<crate::Result<StepReport>> {
        let h = self.running.take()?;
        match h.join() {
            Ok((job, r)) => {
                self.inner = Some(job.0);
                Some(r)
            }
            Err(_) => {
                self.inner = None;
                Some(Err(crate::Error::Invalid(
                    "the job's stepping thread panicked; the job is lost".into(),
                )))
            }
        }
    }
}
type LJsonWriter = Handle<JsonCacheWriter>;
type LBinWriter = Handle<BinaryCacheWriter>;
type LBinCache = Handle<BinaryCache>;
type LKnn = Handle<KnnResult>;
type LKnnGraph = Handle<KnnGraph>;
type LMultiKnn = Handle<MultiKnn>;

/// A table on several devices for k-NN: row slices (shards) or whole copies (replicas).
enum MultiKnn {
    Shards(crate::multi::IndexShards),
    Replicas(crate::multi::IndexReplicas),
}

/// A device table and its Gram matrix, built by the first gram job (or `dtable:gram()`) and kept
/// so that every batch of a run shares one G.
struct DevTable {
    dt: DeviceTable,
    gram: Option<Gram>,
}

impl DevTable {
    /// G of this table, built on first use.
    fn gram(&mut self, call: &str) -> LuaResult<Gram> {
        if let Some(g) = &self.gram {
            return Ok(g.clone());
        }
        let g = Gram::build(&self.dt).map_err(|e| err(call, e))?;
        self.gram = Some(g.clone());
        Ok(g)
    }
}

/// A job of either engine; every Lua method behaves the same for both.
enum Job {
    Scan(Box<ScanJob>),
    Gram(Box<GramJob>),
}

macro_rules! both {
    ($self:expr, $j:ident => $e:expr) => {
        match $self {
            Job::Scan($j) => $e,
            Job::Gram($j) => $e,
        }
    };
}

impl Job {
    fn mode(&self) -> Mode {
        match self {
            Job::Scan(_) => Mode::Scan,
            Job::Gram(_) => Mode::Gram,
        }
    }
    fn step(&mut self, n: usize) -> crate::Result<StepReport> {
        both!(self, j => j.step(n))
    }
    fn set_chunk(&mut self, c: usize) {
        both!(self, j => j.set_chunk(c))
    }
    fn done(&self) -> bool {
        both!(self, j => j.done())
    }
    fn steps_done(&self) -> usize {
        both!(self, j => j.steps_done())
    }
    fn total_steps(&self) -> usize {
        both!(self, j => j.total_steps())
    }
    fn gpu_ns(&self) -> u64 {
        both!(self, j => j.gpu_ns())
    }
    fn starts(&self) -> &[u32] {
        both!(self, j => j.starts())
    }
    fn sequence_len(&self) -> usize {
        both!(self, j => j.sequence_len())
    }
    fn workgroup_size(&self) -> u32 {
        both!(self, j => j.workgroup_size())
    }
    fn sequences_flat(&self) -> crate::Result<Vec<u32>> {
        self.sequence_columns(0, self.sequence_len())
    }
    fn sequence_columns(&self, from: usize, to: usize) -> crate::Result<Vec<u32>> {
        both!(self, j => j.sequence_columns(from, to))
    }
}

fn opt<T: FromLua>(t: &Option<LuaTable>, key: &str) -> LuaResult<Option<T>> {
    match t {
        Some(t) => t.get::<Option<T>>(key),
        None => Ok(None),
    }
}

impl UserData for LContext {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("describe", |_, this, ()| {
            Ok(this.get("context:describe")?.describe())
        });
        m.add_method("name", |_, this, ()| {
            Ok(this.get("context:name")?.caps().name.clone())
        });
        m.add_method("l2_bytes", |_, this, ()| {
            Ok(this.get("context:l2_bytes")?.caps().l2_bytes)
        });
        m.add_method("caps", |lua, this, ()| {
            let c = this.get("context:caps")?.caps();
            let t = lua.create_table()?;
            t.set("name", c.name.clone())?;
            t.set("device_type", c.device_type.clone())?;
            t.set("driver", c.driver.clone())?;
            t.set("api_version", c.api_version.clone())?;
            t.set("fp16_storage", c.fp16_storage)?;
            t.set("subgroup_size", c.subgroup_size)?;
            t.set("shared_memory_bytes", c.shared_memory_bytes)?;
            t.set("max_buffer_range", c.max_buffer_range)?;
            t.set("max_workgroup_count", c.max_workgroup_count)?;
            t.set("timestamps", c.timestamps)?;
            t.set("memory_budget_bytes", c.memory_budget_bytes)?;
            t.set("l2_bytes", c.l2_bytes)?;
            t.set("l2_source", c.l2_source)?;
            Ok(t)
        });
        // The largest batch the device allows for an N × D table and `steps` steps.
        m.add_method(
            "max_batch",
            |_,
             this,
             (n, d, precision, steps, mode): (
                Value,
                Value,
                Option<String>,
                Option<Value>,
                Option<String>,
            )| {
                let call = "context:max_batch";
                let ctx = this.get(call)?;
                let n = int(call, "n", &n)? as usize;
                let d = int(call, "dim", &d)? as usize;
                let p = parse_precision(call, precision)?;
                let steps = match steps.filter(|s| !s.is_nil()) {
                    Some(s) => int(call, "steps", &s)? as usize,
                    None => n.saturating_sub(1),
                };
                let mode = parse_mode(call, mode.as_deref(), Mode::Scan)?;
                Ok(match gram::mode_for(ctx.caps(), mode, n, d, p.bytes()) {
                    Mode::Gram => gram::max_batch(ctx.caps(), n, d, p.bytes(), steps),
                    _ => crate::scan::max_batch(ctx.caps(), n, d, p, steps),
                })
            },
        );
        // The engine `mode` ("scan", "gram" or "auto", the default) resolves to for an N × D
        // table at `precision` on this device, and why: (mode name, reason).
        m.add_method(
            "mode_for",
            |_, this, (n, d, precision, mode): (Value, Value, Option<String>, Option<String>)| {
                let call = "context:mode_for";
                let ctx = this.get(call)?;
                let n = int(call, "n", &n)? as usize;
                let d = int(call, "dim", &d)? as usize;
                let p = parse_precision(call, precision)?;
                let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
                let (m, why) = resolve_mode(ctx.caps(), mode, n, d, p);
                Ok((m.name(), why))
            },
        );
        m.add_method("validation_messages", |lua, this, ()| {
            lua.create_sequence_from(
                this.get("context:validation_messages")?
                    .validation_messages(),
            )
        });
        m.add_method(
            "upload",
            |_, this, (table, precision): (LuaAnyUserData, Option<String>)| {
                let ctx = this.get("context:upload")?;
                let p = parse_precision("context:upload", precision)?;
                let t = table.borrow::<LTable>()?;
                let dt = DeviceTable::upload(ctx, t.get("context:upload")?, p)
                    .map_err(|e| err("context:upload", e))?;
                Ok(LDeviceTable::new(
                    "device table",
                    DevTable { dt, gram: None },
                ))
            },
        );
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

/// "scan", "gram" or "auto" (`default` when absent).
fn parse_mode(call: &str, m: Option<&str>, default: Mode) -> LuaResult<Mode> {
    match m {
        None => Ok(default),
        Some(s) => s.parse().map_err(|e| err(call, e)),
    }
}

/// The engine `mode` resolves to on `caps` (SPEC §Modes, auto) and why, in words.
fn resolve_mode(
    caps: &crate::Capabilities,
    mode: Mode,
    n: usize,
    d: usize,
    p: Precision,
) -> (Mode, String) {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let unfit = gram::gram_unfit(caps, n, d, p.bytes());
    let chosen = gram::mode_for(caps, mode, n, d, p.bytes());
    let why = match (mode, unfit) {
        (Mode::Auto, None) => format!(
            "auto: G for N = {n} ({:.1} MiB) fits the memory budget of {} ({:.0} MiB)",
            mib(gram::gram_bytes(n)),
            caps.name,
            mib(caps.memory_budget_bytes)
        ),
        (Mode::Auto, Some(why)) => format!("auto: {why}"),
        (Mode::Gram, Some(why)) => format!("requested, but {why}"),
        _ => "requested".to_string(),
    };
    (chosen, why)
}

fn parse_precision(call: &str, p: Option<String>) -> LuaResult<Precision> {
    match p {
        None => Ok(Precision::Fp32),
        Some(s) => s.parse().map_err(|e| err(call, e)),
    }
}

impl UserData for LTable {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("table:n")?.n()));
        m.add_method("dim", |_, this, ()| Ok(this.get("table:dim")?.d()));
        m.add_method("ids", |lua, this, ()| match this.get("table:ids")?.ids() {
            None => Ok(Value::Nil),
            Some(ids) => {
                let t = lua.create_table()?;
                for (i, id) in ids.iter().enumerate() {
                    t.raw_set(i + 1, json_to_lua(lua, id)?)?;
                }
                Ok(Value::Table(t))
            }
        });
        m.add_method("with_ids", |_, this, ids: LuaTable| {
            let call = "table:with_ids";
            let ids: Vec<serde_json::Value> = ids
                .sequence_values::<Value>()
                .map(|v| lua_to_json(call, v?))
                .collect::<LuaResult<_>>()?;
            let t = this
                .get(call)?
                .clone()
                .with_ids(ids)
                .map_err(|e| err(call, e))?;
            Ok(LTable::new("table", t))
        });
        // SPEC §Exactness 2 on one sequence (0-based indices), against the table as stored at
        // `precision`: returns the worst excess, or raises naming the step.
        m.add_method(
            "check_sequence",
            |_, this, (start, seq, eps, precision): (Value, LuaTable, Option<f64>, Option<String>)| {
                let call = "table:check_sequence";
                let start = int_u32(call, "start", &start)?;
                let seq = int_list(call, "seq", &seq)?;
                let p = parse_precision(call, precision)?;
                let stored = this.get(call)?.as_stored(p);
                crate::reference::check_sequence(&stored, start, &seq, eps.unwrap_or(1e-5))
                    .map(|c| c.worst_excess)
                    .map_err(|v| msg(call, format!("start {start}: {v:?}")))
            },
        );
        m.add_method("centered", |_, this, ()| {
            Ok(LTable::new("table", this.get("table:centered")?.centered()))
        });
        m.add_method("head", |_, this, n: Value| {
            let n = int("table:head", "n", &n)? as usize;
            let t = this
                .get("table:head")?
                .head(n)
                .map_err(|e| err("table:head", e))?;
            Ok(LTable::new("table", t))
        });
        m.add_method("row", |lua, this, i: Value| {
            let i = int("table:row", "row", &i)? as usize;
            let t = this.get("table:row")?;
            if i >= t.n() {
                return Err(msg(
                    "table:row",
                    format!("row {i} out of range (N = {})", t.n()),
                ));
            }
            lua.create_sequence_from(t.row(i).iter().copied())
        });
        m.add_method(
            "save_fp16_bin",
            |_, this, (path, space, checksum): (String, String, String)| {
                files::save_fp16_bin(
                    path.as_ref(),
                    this.get("table:save_fp16_bin")?,
                    &space,
                    &checksum,
                )
                .map_err(|e| err("table:save_fp16_bin", e))
            },
        );
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

impl UserData for LDeviceTable {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("device_table:n")?.dt.n()));
        m.add_method("dim", |_, this, ()| {
            Ok(this.get("device_table:dim")?.dt.d())
        });
        m.add_method("precision", |_, this, ()| {
            Ok(this.get("device_table:precision")?.dt.precision().name())
        });
        // G = E Eᵀ of this table, built on the first call (or the first gram job) and shared by
        // every later gram job of the table.
        m.add_method_mut("gram", |_, this, ()| {
            let call = "device_table:gram";
            let g = this.get_mut(call)?.gram(call)?;
            Ok(LGram::new("gram", g))
        });
        // Drop the table's cached G (jobs and gram objects that hold it keep it alive).
        m.add_method_mut("release_gram", |_, this, ()| {
            this.get_mut("device_table:release_gram")?.gram = None;
            Ok(())
        });
        // The engine `opts.mode` resolves to for this table: (mode name, reason).
        m.add_method("mode_for", |_, this, mode: Option<String>| {
            let call = "device_table:mode_for";
            let dt = &this.get(call)?.dt;
            let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
            let (m, why) = resolve_mode(dt.context().caps(), mode, dt.n(), dt.d(), dt.precision());
            Ok((m.name(), why))
        });
        m.add_method_mut(
            "job",
            |_, this, (starts, o): (Option<LuaTable>, Option<LuaTable>)| {
                let call = "device_table:job";
                let t = this.get_mut(call)?;
                let starts: Vec<u32> = match starts {
                    Some(s) => int_list(call, "start", &s)?,
                    None => (0..t.dt.n() as u32).collect(),
                };
                let opts = job_options(call, &o)?;
                let job = new_job(call, t, &starts, &opts, None)?;
                Ok(LJob::new("job", job))
            },
        );
        // A job continuing from a checkpoint: `prefixes` is a binary string of little-endian
        // uint32, #starts rows of `len` entries (as `job:columns(0, len)` returns them). The host
        // table is needed by the scan engine (it rebuilds the running sums on the host); a gram
        // job replays the prefix on the device and accepts nil.
        m.add_method_mut(
            "resume_job",
            |_,
             this,
             (table, starts, prefixes, len, o): (
                Option<LuaAnyUserData>,
                LuaTable,
                LuaString,
                Value,
                Option<LuaTable>,
            )| {
                let call = "device_table:resume_job";
                let t = this.get_mut(call)?;
                let starts = int_list(call, "start", &starts)?;
                let len = int(call, "len", &len)? as usize;
                let rows = u32_rows(call, &prefixes.as_bytes(), starts.len(), len)?;
                let opts = job_options(call, &o)?;
                let host = match &table {
                    Some(u) => Some(u.borrow::<LTable>()?),
                    None => None,
                };
                let host = match &host {
                    Some(h) => Some(h.get(call)?),
                    None => None,
                };
                let job = new_job(call, t, &starts, &opts, Some((host, &rows, len)))?;
                Ok(LJob::new("job", job))
            },
        );
        // Exact k-NN of the rows of `queries` (a table object of the same dimension; the table
        // that was uploaded for a self-search) against this table: a knn result object.
        m.add_method(
            "knn",
            |_, this, (queries, o): (LuaAnyUserData, Option<LuaTable>)| {
                let call = "device_table:knn";
                let dt = &this.get(call)?.dt;
                let q = queries.borrow::<LTable>()?;
                let opts = knn_options(call, &o)?;
                let r = knn(dt, q.get(call)?, &opts).map_err(|e| err(call, e))?;
                if r.ids.iter().any(|&i| i > i32::MAX as i64) {
                    return Err(msg(call, "a neighbour id does not fit an int32"));
                }
                Ok(LKnn::new("knn result", r))
            },
        );
        // Rankings of every item (or `opts.items`) against all others, self excluded: returned
        // as Lua tables keyed by 0-based item, or handed batch by batch to `opts.each`.
        m.add_method(
            "rankings",
            |lua, this, (table, o): (LuaAnyUserData, Option<LuaTable>)| {
                let call = "device_table:rankings";
                let dt = &this.get(call)?.dt;
                let t = table.borrow::<LTable>()?;
                let t = t.get(call)?;
                let opts = rankings_options(call, &o)?;
                let each = opt::<LuaFunction>(&o, "each")?;
                let with_values = opt::<bool>(&o, "values")?.unwrap_or(true);
                let (rows, values) = (lua.create_table()?, lua.create_table()?);
                let mut failed: Option<LuaError> = None;
                let res = rankings::rankings_with_values(dt, t, &opts, |items, ids, vals, len| {
                    let step = || -> LuaResult<()> {
                        let (br, bv) = match &each {
                            Some(_) => (lua.create_table()?, lua.create_table()?),
                            None => (rows.clone(), values.clone()),
                        };
                        for (i, &item) in items.iter().enumerate() {
                            let key = if each.is_some() {
                                i as i64 + 1
                            } else {
                                item as i64
                            };
                            br.raw_set(
                                key,
                                lua.create_sequence_from(
                                    ids[i * len..(i + 1) * len].iter().copied(),
                                )?,
                            )?;
                            if with_values {
                                bv.raw_set(
                                    key,
                                    lua.create_sequence_from(
                                        vals[i * len..(i + 1) * len].iter().copied(),
                                    )?,
                                )?;
                            }
                        }
                        if let Some(f) = &each {
                            let it = lua.create_sequence_from(items.iter().copied())?;
                            let bv = if with_values {
                                Value::Table(bv)
                            } else {
                                Value::Nil
                            };
                            f.call::<()>((it, br, bv))?;
                        }
                        Ok(())
                    };
                    step().map_err(|e| {
                        let m = e.to_string();
                        failed = Some(e);
                        Error::Invalid(m)
                    })
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                let report = report_table(lua, &res.map_err(|e| err(call, e))?)?;
                if each.is_some() {
                    return Ok((Value::Table(report), Value::Nil, Value::Nil));
                }
                let values = if with_values {
                    Value::Table(values)
                } else {
                    Value::Nil
                };
                Ok((Value::Table(rows), values, Value::Table(report)))
            },
        );
        // The user's rankings cache at `path`, streamed from Rust.
        m.add_method(
            "write_rankings_cache",
            |lua, this, (table, path, o): (LuaAnyUserData, String, Option<LuaTable>)| {
                let call = "device_table:write_rankings_cache";
                let dt = &this.get(call)?.dt;
                let t = table.borrow::<LTable>()?;
                let t = t.get(call)?;
                let opts = rankings_options(call, &o)?;
                let mut extra = match opt::<Value>(&o, "metadata")? {
                    None | Some(Value::Nil) => serde_json::Map::new(),
                    Some(v) => match lua_to_json(call, v)? {
                        serde_json::Value::Object(m) => m,
                        other => {
                            return Err(msg(
                                call,
                                format!("metadata must be a table of fields, got {other}"),
                            ))
                        }
                    },
                };
                if let Some(model) = opt::<String>(&o, "model")? {
                    extra.insert("model".into(), model.into());
                }
                let ids = match opt::<LuaTable>(&o, "ids")? {
                    Some(ids) => Some(
                        ids.sequence_values::<Value>()
                            .map(|v| lua_to_json(call, v?))
                            .collect::<LuaResult<Vec<_>>>()?,
                    ),
                    None => None,
                };
                let threads = match opt_int(call, &o, "threads")? {
                    Some(0) | None => None,
                    Some(n) => Some(n as usize),
                };
                let r = rankings::write_rankings_cache_threads(
                    dt,
                    t,
                    path.as_ref(),
                    &opts,
                    &serde_json::Value::Object(extra),
                    ids,
                    threads,
                )
                .map_err(|e| err(call, e))?;
                report_table(lua, &r)
            },
        );
        // The k-NN graph file at `path` (k = 10 by default).
        m.add_method(
            "write_knn_graph",
            |lua, this, (table, path, o): (LuaAnyUserData, String, Option<LuaTable>)| {
                let call = "device_table:write_knn_graph";
                let dt = &this.get(call)?.dt;
                let t = table.borrow::<LTable>()?;
                let t = t.get(call)?;
                let k = opt_int(call, &o, "k")?.map(|k| k as usize);
                if k == Some(0) {
                    return Err(msg(call, "k = 0: a k-NN graph needs k ≥ 1"));
                }
                let metric = parse_metric(call, &o)?;
                let batch = opt_int(call, &o, "batch")?.map(|b| b as usize);
                let r = rankings::write_knn_graph(dt, t, path.as_ref(), k, metric, batch)
                    .map_err(|e| err(call, e))?;
                report_table(lua, &r)
            },
        );
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

/// A prefix to resume from: the host table (the scan engine needs it), the rows, their length.
type ResumeFrom<'a> = Option<(Option<&'a Table>, &'a [u32], usize)>;

/// A job on `t` in the mode `opts` resolve to (auto: gram when G fits the device's budget).
fn new_job(
    call: &str,
    t: &mut DevTable,
    starts: &[u32],
    opts: &JobOptions,
    resume: ResumeFrom,
) -> LuaResult<Job> {
    let dt = &t.dt;
    let mode = gram::mode_for(
        dt.context().caps(),
        opts.mode,
        dt.n(),
        dt.d(),
        dt.precision().bytes(),
    );
    if mode == Mode::Gram {
        let g = t.gram(call)?;
        return gram_job(call, &g, starts, &opts.gram, resume.map(|(_, r, l)| (r, l)));
    }
    let job = match resume {
        None => ScanJob::new(dt, starts, &opts.scan),
        Some((None, _, _)) => {
            return Err(msg(
                call,
                "the scan engine resumes from the host table: pass it as the first argument",
            ))
        }
        Some((Some(host), rows, len)) => ScanJob::resume(dt, host, starts, rows, len, &opts.scan),
    };
    job.map(|j| Job::Scan(Box::new(j)))
        .map_err(|e| err(call, e))
}

fn gram_job(
    call: &str,
    g: &Gram,
    starts: &[u32],
    opts: &GramOptions,
    resume: Option<(&[u32], usize)>,
) -> LuaResult<Job> {
    match resume {
        None => GramJob::new(g, starts, opts),
        Some((rows, len)) => GramJob::resume(g, starts, rows, len, opts),
    }
    .map(|j| Job::Gram(Box::new(j)))
    .map_err(|e| err(call, e))
}

impl UserData for LGram {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("gram:n")?.table().n()));
        m.add_method("bytes", |_, this, ()| Ok(this.get("gram:bytes")?.bytes()));
        m.add_method("slabs", |_, this, ()| Ok(this.get("gram:slabs")?.slabs()));
        m.add_method("build_gpu_ns", |_, this, ()| {
            Ok(this.get("gram:build_gpu_ns")?.build_ns())
        });
        // Row i of G (0-based) as a Lua array, for diagnostics.
        m.add_method("row", |lua, this, i: Value| {
            let call = "gram:row";
            let i = int(call, "row", &i)? as usize;
            let r = this.get(call)?.row(i).map_err(|e| err(call, e))?;
            lua.create_sequence_from(r)
        });
        m.add_method(
            "job",
            |_, this, (starts, o): (Option<LuaTable>, Option<LuaTable>)| {
                let call = "gram:job";
                let g = this.get(call)?;
                let starts: Vec<u32> = match starts {
                    Some(s) => int_list(call, "start", &s)?,
                    None => (0..g.table().n() as u32).collect(),
                };
                let opts = gram_only_options(call, &o)?;
                Ok(LJob::new("job", gram_job(call, g, &starts, &opts, None)?))
            },
        );
        m.add_method(
            "resume_job",
            |_, this, (starts, prefixes, len, o): (LuaTable, LuaString, Value, Option<LuaTable>)| {
                let call = "gram:resume_job";
                let g = this.get(call)?;
                let starts = int_list(call, "start", &starts)?;
                let len = int(call, "len", &len)? as usize;
                let rows = u32_rows(call, &prefixes.as_bytes(), starts.len(), len)?;
                let opts = gram_only_options(call, &o)?;
                Ok(LJob::new(
                    "job",
                    gram_job(call, g, &starts, &opts, Some((&rows, len)))?,
                ))
            },
        );
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

/// A non-negative integer argument, refused with a named error when it is negative, fractional
/// or not a number (mlua would truncate 1.5 to 1, or report a conversion in its own words).
fn int(call: &str, what: &str, v: &Value) -> LuaResult<u64> {
    let x = match v {
        Value::Integer(i) => *i as f64,
        Value::Number(n) => *n,
        other => {
            return Err(msg(
                call,
                format!(
                    "{what} must be a non-negative integer, got a {}",
                    other.type_name()
                ),
            ))
        }
    };
    if x < 0.0 {
        return Err(msg(call, format!("{what} {x} is negative")));
    }
    if x.fract() != 0.0 || !x.is_finite() || x > 9.007_199_254_740_992e15 {
        return Err(msg(call, format!("{what} must be an integer, got {x}")));
    }
    Ok(x as u64)
}

/// An optional integer field of an options table.
fn opt_int(call: &str, o: &Option<LuaTable>, key: &str) -> LuaResult<Option<u64>> {
    match opt::<Value>(o, key)? {
        None | Some(Value::Nil) => Ok(None),
        Some(v) => int(call, key, &v).map(Some),
    }
}

/// A u32 from an integer argument.
fn int_u32(call: &str, what: &str, v: &Value) -> LuaResult<u32> {
    let x = int(call, what, v)?;
    u32::try_from(x).map_err(|_| msg(call, format!("{what} {x} is too large")))
}

/// A Lua array of integers (0-based indices).
fn int_list(call: &str, what: &str, t: &LuaTable) -> LuaResult<Vec<u32>> {
    t.sequence_values::<Value>()
        .enumerate()
        .map(|(i, v)| {
            let v = v?;
            int_u32(call, what, &v).map_err(|_| {
                let (shown, why) = match &v {
                    Value::Integer(x) if *x < 0 => (x.to_string(), "is out of range"),
                    Value::Number(x) if *x < 0.0 => (x.to_string(), "is out of range"),
                    Value::Integer(x) => (x.to_string(), "is too large"),
                    Value::Number(x) => (x.to_string(), "is not an integer"),
                    other => (format!("a {}", other.type_name()), "is not an integer"),
                };
                msg(
                    call,
                    format!(
                        "{what} {shown} (position {}) {why}: indices are integers from 0",
                        i + 1
                    ),
                )
            })
        })
        .collect()
}

/// A job's options for both engines and the mode they ask for.
struct JobOptions {
    mode: Mode,
    scan: ScanOptions,
    gram: GramOptions,
}

/// Options of `dtable:job` / `dtable:resume_job`: `mode` ("scan", the default, "gram" or
/// "auto"); shared `chunk`, `steps`, `workgroup`; scan's `shape`, `tile`, `pipelined`; gram's
/// `placement` ("auto", "registers", "memory") and `subgroups` (boolean). Options of the engine
/// not chosen are ignored.
fn job_options(call: &str, o: &Option<LuaTable>) -> LuaResult<JobOptions> {
    let mut scan = ScanOptions::default();
    if let Some(s) = opt::<String>(o, "shape")? {
        scan.shape = s.parse().map_err(|e| err(call, e))?;
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
    let mode = parse_mode(call, opt::<String>(o, "mode")?.as_deref(), Mode::Scan)?;
    Ok(JobOptions { mode, scan, gram })
}

/// The gram engine's options: `chunk`, `steps`, `workgroup`, `placement`, `subgroups`,
/// `compensated`.
fn gram_only_options(call: &str, o: &Option<LuaTable>) -> LuaResult<GramOptions> {
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
        g.placement = p.parse::<Placement>().map_err(|e| err(call, e))?;
    }
    g.subgroups = opt::<bool>(o, "subgroups")?;
    if let Some(c) = opt::<bool>(o, "compensated")? {
        g.compensated = c;
    }
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
                let shape = if t == 0 { Shape::Untiled } else { Shape::Tiled };
                // Tiles are the scan engine's; a gram step reads whole Gram rows.
                if let Job::Scan(j) = job {
                    j.set_tiling(shape, t);
                }
            }
            let r = job.step(n as usize).map_err(|e| err(call, e))?;
            Ok((r.steps, r.gpu_ns))
        });
        // Step on a thread of its own and return at once: `job:start(n)`, then `job:wait()` (or
        // `diversity.wait_any{jobs…}`) gives what `job:step(n)` would have.
        m.add_method_mut("start", |_, this, n: Value| {
            let call = "job:start";
            let n = int(call, "step count", &n)? as usize;
            this.get(call)?;
            let job = SendJob(this.inner.take().expect("checked by get"));
            let spawned = std::thread::Builder::new()
                .name("diversity-job".into())
                .spawn(move || {
                    let mut job = job;
                    let r = job.0.step(n);
                    (job, r)
                });
            match spawned {
                Ok(h) => {
                    this.running = Some(h);
                    Ok(())
                }
                Err(e) => Err(msg(call, format!("cannot start a thread: {e}"))),
            }
        });
        // Whether `job:wait()` would return without blocking (true when not started).
        m.add_method("ready", |_, this, ()| {
            Ok(this.running.as_ref().is_none_or(|h| h.is_finished()))
        });
        m.add_method_mut("wait", |_, this, ()| {
            let call = "job:wait";
            match this.join() {
                None => Err(msg(call, "the job was not started (job:start)")),
                Some(r) => {
                    let r = r.map_err(|e| err(call, e))?;
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
        // Where a gram job keeps its state ("registers" or "memory"); nil for a scan job.
        m.add_method("placement", |_, this, ()| {
            Ok(match this.get("job:placement")? {
                Job::Gram(j) => Some(j.placement().name()),
                Job::Scan(_) => None,
            })
        });
        m.add_method("workgroup_size", |_, this, ()| {
            Ok(this.get("job:workgroup_size")?.workgroup_size())
        });
        // Whether a gram job reduces with subgroup operations; nil for a scan job.
        m.add_method("uses_subgroups", |_, this, ()| {
            Ok(match this.get("job:uses_subgroups")? {
                Job::Gram(j) => Some(j.uses_subgroups()),
                Job::Scan(_) => None,
            })
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
            let flat = j.sequences_flat().map_err(|e| err("job:sequences", e))?;
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
            let cols = this
                .get(call)?
                .sequence_columns(from, to)
                .map_err(|e| err(call, e))?;
            lua.create_string(bytemuck::cast_slice::<u32, u8>(&cols))
        });
        // FFI-friendly: the rows as one binary string of little-endian uint32.
        m.add_method("sequences_bytes", |lua, this, ()| {
            let flat = this
                .get("job:sequences_bytes")?
                .sequences_flat()
                .map_err(|e| err("job:sequences_bytes", e))?;
            lua.create_string(bytemuck::cast_slice::<u32, u8>(&flat))
        });
        // FFI-friendly: fill `bytes` bytes at `address` (a uint32_t array) with the rows.
        m.add_method("download", |_, this, (address, bytes): (f64, f64)| {
            let call = "job:download";
            let flat = this.get(call)?.sequences_flat().map_err(|e| err(call, e))?;
            let need = flat.len() * 4;
            if bytes < need as f64 {
                return Err(msg(
                    call,
                    format!("output buffer of {bytes} bytes is smaller than the {need} bytes of {} uint32", flat.len()),
                ));
            }
            let ptr = checked_address(call, address)? as *mut u32;
            // SAFETY: the caller (the Lua wrapper) took address and size from the same cdata.
            unsafe { std::ptr::copy_nonoverlapping(flat.as_ptr(), ptr, flat.len()) };
            Ok(flat.len())
        });
        m.add_method_mut("close", |_, this, ()| {
            let _ = this.join();
            this.inner = None;
            Ok(())
        });
    }
}

/// Little-endian uint32 rows from a binary string, checking the size.
fn u32_rows(call: &str, b: &[u8], rows: usize, len: usize) -> LuaResult<Vec<u32>> {
    if b.len() != rows * len * 4 {
        return Err(msg(
            call,
            format!("{} bytes for {rows} rows of {len} uint32", b.len()),
        ));
    }
    Ok(b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn checked_address(call: &str, a: f64) -> LuaResult<usize> {
    if !(a >= 1.0 && a.fract() == 0.0 && a < 9.007_199_254_740_992e15) {
        return Err(msg(call, format!("invalid address {a}")));
    }
    Ok(a as usize)
}

fn json_to_lua(lua: &Lua, v: &serde_json::Value) -> LuaResult<Value> {
    Ok(match v {
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        _ => Value::Nil,
    })
}

fn lua_to_json(call: &str, v: Value) -> LuaResult<serde_json::Value> {
    Ok(match v {
        Value::Nil => serde_json::Value::Null,
        Value::Boolean(b) => serde_json::Value::Bool(b),
        Value::Integer(i) => serde_json::Value::from(i),
        Value::Number(n) => {
            if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
                serde_json::Value::from(n as i64)
            } else {
                serde_json::Number::from_f64(n)
                    .map(serde_json::Value::Number)
                    .ok_or_else(|| msg(call, format!("{n} cannot be written as JSON")))?
            }
        }
        Value::String(s) => serde_json::Value::String(s.to_str()?.to_string()),
        Value::Table(t) => {
            let len = t.raw_len();
            if len > 0 {
                serde_json::Value::Array(
                    t.sequence_values::<Value>()
                        .map(|v| lua_to_json(call, v?))
                        .collect::<LuaResult<_>>()?,
                )
            } else {
                let mut m = serde_json::Map::new();
                for pair in t.pairs::<String, Value>() {
                    let (k, v) = pair?;
                    m.insert(k, lua_to_json(call, v)?);
                }
                serde_json::Value::Object(m)
            }
        }
        other => {
            return Err(msg(
                call,
                format!("cannot write a {} as JSON", other.type_name()),
            ))
        }
    })
}

impl UserData for LJsonWriter {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method_mut("write_job", |_, this, job: LuaAnyUserData| {
            let call = "json_cache:write_job";
            let job = job.borrow::<LJob>()?;
            let j = job.get(call)?;
            let flat = j.sequences_flat().map_err(|e| err(call, e))?;
            this.get_mut(call)?
                .write_batch(j.starts(), &flat, j.sequence_len())
                .map_err(|e| err(call, e))
        });
        m.add_method_mut("write", |_, this, (start, seq): (Value, LuaTable)| {
            let call = "json_cache:write";
            let (start, seq) = (
                int_u32(call, "start", &start)?,
                int_list(call, "seq", &seq)?,
            );
            this.get_mut(call)?
                .write_sequence(start, &seq)
                .map_err(|e| err(call, e))
        });
        m.add_method_mut(
            "write_bytes",
            |_, this, (starts, bytes, len): (LuaTable, LuaString, Value)| {
                let call = "json_cache:write_bytes";
                let (starts, len) = (
                    int_list(call, "starts", &starts)?,
                    int(call, "len", &len)? as usize,
                );
                let flat = u32_rows(call, &bytes.as_bytes(), starts.len(), len)?;
                this.get_mut(call)?
                    .write_batch(&starts, &flat, len)
                    .map_err(|e| err(call, e))
            },
        );
        m.add_method_mut("finish", |_, this, ()| {
            let call = "json_cache:finish";
            let w = this
                .inner
                .take()
                .ok_or_else(|| msg(call, "json cache writer used after close()"))?;
            w.finish().map_err(|e| err(call, e))
        });
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None; // an unfinished writer removes its temporary file
            Ok(())
        });
    }
}

impl UserData for LBinWriter {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method_mut("write_job", |_, this, job: LuaAnyUserData| {
            let call = "binary_cache:write_job";
            let job = job.borrow::<LJob>()?;
            let j = job.get(call)?;
            let flat = j.sequences_flat().map_err(|e| err(call, e))?;
            this.get_mut(call)?
                .write_batch(j.starts(), &flat)
                .map_err(|e| err(call, e))
        });
        m.add_method_mut(
            "write_bytes",
            |_, this, (starts, bytes, len): (LuaTable, LuaString, Value)| {
                let call = "binary_cache:write_bytes";
                let (starts, len) = (
                    int_list(call, "starts", &starts)?,
                    int(call, "len", &len)? as usize,
                );
                let flat = u32_rows(call, &bytes.as_bytes(), starts.len(), len)?;
                this.get_mut(call)?
                    .write_batch(&starts, &flat)
                    .map_err(|e| err(call, e))
            },
        );
        m.add_method_mut("write", |_, this, (start, seq): (Value, LuaTable)| {
            let call = "binary_cache:write";
            let (start, seq) = (
                int_u32(call, "start", &start)?,
                int_list(call, "seq", &seq)?,
            );
            this.get_mut(call)?
                .write_row(start, &seq)
                .map_err(|e| err(call, e))
        });
        m.add_method_mut("finish", |_, this, ()| {
            let call = "binary_cache:finish";
            let w = this
                .inner
                .take()
                .ok_or_else(|| msg(call, "binary cache writer used after close()"))?;
            w.finish().map_err(|e| err(call, e))
        });
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

impl UserData for LBinCache {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("binary_cache:n")?.n()));
        m.add_method("len", |_, this, ()| Ok(this.get("binary_cache:len")?.len()));
        m.add_method_mut("sequence", |lua, this, start: i64| {
            let call = "binary_cache:sequence";
            let c = this.get_mut(call)?;
            let s = u32::try_from(start)
                .map_err(|_| msg(call, format!("start {start} out of range")))?;
            let seq = c.sequence(s).map_err(|e| err(call, e))?;
            lua.create_sequence_from(seq)
        });
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

/// `opts.metric`: "cosine" (the default), "ip" or "l2".
fn parse_metric(call: &str, o: &Option<LuaTable>) -> LuaResult<Metric> {
    match opt::<Value>(o, "metric")? {
        None | Some(Value::Nil) => Ok(Metric::Cosine),
        Some(Value::String(s)) => s.to_str()?.parse().map_err(|e| err(call, e)),
        Some(other) => Err(msg(
            call,
            format!(
                "metric must be \"cosine\", \"ip\" or \"l2\", got a {}",
                other.type_name()
            ),
        )),
    }
}

/// Options of `dtable:knn`: `k` (default 10), `metric`, `query_tile`, `table_tile`,
/// `subgroups`, `full_ranking`.
fn knn_options(call: &str, o: &Option<LuaTable>) -> LuaResult<KnnOptions> {
    let mut k = KnnOptions {
        metric: parse_metric(call, o)?,
        ..KnnOptions::default()
    };
    if let Some(v) = opt_int(call, o, "k")? {
        k.k = v as usize;
    }
    k.query_tile = opt_int(call, o, "query_tile")?.map(|v| v as usize);
    k.table_tile = opt_int(call, o, "table_tile")?.map(|v| v as usize);
    k.subgroups = opt::<bool>(o, "subgroups")?;
    k.full_ranking = opt::<bool>(o, "full_ranking")?.unwrap_or(false);
    k.warp_select = opt::<bool>(o, "warp_select")?;
    Ok(k)
}

/// Options of `dtable:rankings` / `write_rankings_cache`: `top_k` (nil or 0 = all N − 1),
/// `metric`, `batch`, `items` (0-based), `subgroups`, `full_ranking`.
fn rankings_options(call: &str, o: &Option<LuaTable>) -> LuaResult<RankingsOptions> {
    Ok(RankingsOptions {
        top_k: match opt_int(call, o, "top_k")? {
            Some(0) | None => None,
            Some(k) => Some(k as usize),
        },
        metric: parse_metric(call, o)?,
        batch: opt_int(call, o, "batch")?.map(|b| b as usize),
        items: match opt::<LuaTable>(o, "items")? {
            Some(t) => Some(int_list(call, "item", &t)?),
            None => None,
        },
        subgroups: opt::<bool>(o, "subgroups")?,
        full_ranking: opt::<bool>(o, "full_ranking")?.unwrap_or(false),
    })
}

fn path_name(p: Option<KnnPath>) -> Option<&'static str> {
    p.map(|p| match p {
        KnnPath::Select { .. } => "select",
        KnnPath::FullRanking { .. } => "full_ranking",
        KnnPath::WarpSelect { .. } => "warp_select",
    })
}

/// What a rankings run did, as a Lua table.
fn report_table(lua: &Lua, r: &RankingsReport) -> LuaResult<LuaTable> {
    let t = lua.create_table()?;
    t.set("items", r.items)?;
    t.set("top_k", r.top_k)?;
    t.set("knn_k", r.knn_k)?;
    t.set("batch", r.batch)?;
    t.set("batches", r.batches)?;
    t.set("path", path_name(r.path))?;
    t.set("subgroups", r.subgroups)?;
    t.set("gpu_ns", r.gpu_ns)?;
    Ok(t)
}

/// A 0-based query index of a knn result, checked.
fn query_index(call: &str, r: &KnnResult, q: &Value) -> LuaResult<usize> {
    let q = int(call, "query", q)? as usize;
    if q >= r.queries {
        return Err(msg(
            call,
            format!(
                "query {q} is out of range for {} queries (valid 0..{})",
                r.queries, r.queries
            ),
        ));
    }
    Ok(q)
}

/// Rows `from..to` of a row-major array as Lua arrays (1-based rows).
fn rows_table<T: Copy + IntoLua>(
    lua: &Lua,
    flat: &[T],
    k: usize,
    queries: usize,
) -> LuaResult<LuaTable> {
    let out = lua.create_table_with_capacity(queries, 0)?;
    for q in 0..queries {
        out.raw_set(
            q + 1,
            lua.create_sequence_from(flat[q * k..(q + 1) * k].iter().copied())?,
        )?;
    }
    Ok(out)
}

impl UserData for LMultiKnn {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // The same search and result object as `dtable:knn`, plus a report table:
        // `per_device_ns` and `ranges` ({first, last + 1} 0-based: table rows of each shard,
        // queries of each replica; {0, 0} for a device left out).
        m.add_method(
            "knn",
            |lua, this, (queries, o): (LuaAnyUserData, Option<LuaTable>)| {
                let call = "multi_knn:knn";
                let q = queries.borrow::<LTable>()?;
                let q = q.get(call)?;
                let opts = knn_options(call, &o)?;
                let (r, report) = match this.get(call)? {
                    MultiKnn::Shards(s) => s.knn(q.data(), q.d(), &opts),
                    MultiKnn::Replicas(s) => s.knn(q.data(), q.d(), &opts),
                }
                .map_err(|e| err(call, e))?;
                if r.ids.iter().any(|&i| i > i32::MAX as i64) {
                    return Err(msg(call, "a neighbour id does not fit an int32"));
                }
                let t = lua.create_table()?;
                t.set(
                    "per_device_ns",
                    lua.create_sequence_from(report.per_device_ns.iter().copied())?,
                )?;
                let ranges = lua.create_table()?;
                for (i, &(a, b)) in report.ranges.iter().enumerate() {
                    ranges.raw_set(i + 1, lua.create_sequence_from([a, b])?)?;
                }
                t.set("ranges", ranges)?;
                Ok((LKnn::new("knn result", r), t))
            },
        );
        m.add_method("layout", |_, this, ()| {
            Ok(match this.get("multi_knn:layout")? {
                MultiKnn::Shards(_) => "shards",
                MultiKnn::Replicas(_) => "replicas",
            })
        });
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

impl UserData for LKnn {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("k", |_, this, ()| Ok(this.get("knn:k")?.k));
        m.add_method("queries", |_, this, ()| {
            Ok(this.get("knn:queries")?.queries)
        });
        m.add_method("gpu_ns", |_, this, ()| Ok(this.get("knn:gpu_ns")?.gpu_ns));
        m.add_method("path", |_, this, ()| {
            Ok(path_name(Some(this.get("knn:path")?.path)))
        });
        m.add_method("subgroups", |_, this, ()| {
            Ok(this.get("knn:subgroups")?.subgroups)
        });
        // ids(q): query q's k ids (0-based, -1 padding) as a Lua array; ids(): all rows.
        m.add_method("ids", |lua, this, q: Option<Value>| {
            let call = "knn:ids";
            let r = this.get(call)?;
            match q.filter(|v| !v.is_nil()) {
                Some(q) => {
                    let q = query_index(call, r, &q)?;
                    lua.create_sequence_from(r.ids_of(q).iter().copied())
                }
                None => rows_table(lua, &r.ids, r.k, r.queries),
            }
        });
        // distances(q) / distances(): the same for the similarities or squared distances
        // (padding -math.huge for similarities, math.huge for L2).
        m.add_method("distances", |lua, this, q: Option<Value>| {
            let call = "knn:distances";
            let r = this.get(call)?;
            match q.filter(|v| !v.is_nil()) {
                Some(q) => {
                    let q = query_index(call, r, &q)?;
                    lua.create_sequence_from(r.distances_of(q).iter().copied())
                }
                None => rows_table(lua, &r.distances, r.k, r.queries),
            }
        });
        // FFI-friendly: the ids as little-endian int32 (row-major, -1 padding) in a string.
        m.add_method("ids_bytes", |lua, this, ()| {
            let r = this.get("knn:ids_bytes")?;
            let ids: Vec<i32> = r.ids.iter().map(|&i| i as i32).collect();
            lua.create_string(bytemuck::cast_slice::<i32, u8>(&ids))
        });
        // FFI-friendly: the distances as little-endian float32 (row-major) in a string.
        m.add_method("distances_bytes", |lua, this, ()| {
            let r = this.get("knn:distances_bytes")?;
            lua.create_string(bytemuck::cast_slice::<f32, u8>(&r.distances))
        });
        // FFI-friendly: fill an int32_t[?] (ids) and/or a float[?] (distances) of at least
        // queries × k entries each; pass nil for either address to skip it.
        m.add_method(
            "download",
            |_, this, (ia, ib, da, db): (Option<f64>, Option<f64>, Option<f64>, Option<f64>)| {
                let call = "knn:download";
                let r = this.get(call)?;
                let need = r.ids.len() * 4;
                let check = |bytes: Option<f64>, what: &str| -> LuaResult<()> {
                    if bytes.unwrap_or(0.0) < need as f64 {
                        return Err(msg(
                            call,
                            format!(
                                "the {what} buffer of {} bytes is smaller than the {need} bytes \
                                 of {} × {} entries",
                                bytes.unwrap_or(0.0),
                                r.queries,
                                r.k
                            ),
                        ));
                    }
                    Ok(())
                };
                if let Some(a) = ia {
                    check(ib, "ids")?;
                    let ptr = checked_address(call, a)? as *mut i32;
                    let ids: Vec<i32> = r.ids.iter().map(|&i| i as i32).collect();
                    // SAFETY: the caller took address and size from the same cdata (checked).
                    unsafe { std::ptr::copy_nonoverlapping(ids.as_ptr(), ptr, ids.len()) };
                }
                if let Some(a) = da {
                    check(db, "distances")?;
                    let ptr = checked_address(call, a)? as *mut f32;
                    // SAFETY: as above.
                    unsafe {
                        std::ptr::copy_nonoverlapping(r.distances.as_ptr(), ptr, r.distances.len())
                    };
                }
                Ok(r.ids.len())
            },
        );
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

fn kmetric_name(m: KnnMetric) -> &'static str {
    match m {
        KnnMetric::InnerProduct => "ip",
        KnnMetric::Cosine => "cosine",
        KnnMetric::L2 => "l2",
    }
}

impl UserData for LKnnGraph {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("knn_graph:n")?.n()));
        m.add_method("k", |_, this, ()| Ok(this.get("knn_graph:k")?.k()));
        m.add_method("metric", |_, this, ()| {
            Ok(kmetric_name(this.get("knn_graph:metric")?.metric()))
        });
        // row(i): item i's neighbours (0-based ids, -1 padding) and their values, two Lua arrays;
        // one read of each section, nothing else loaded.
        m.add_method_mut("row", |lua, this, i: Value| {
            let call = "knn_graph:row";
            let i = int_u32(call, "item", &i)?;
            let (ids, values) = this.get_mut(call)?.row(i).map_err(|e| err(call, e))?;
            let ids = lua.create_sequence_from(ids.into_iter().map(|v| {
                if v == KNN_PAD {
                    NO_ID
                } else {
                    v as i64
                }
            }))?;
            Ok((ids, lua.create_sequence_from(values)?))
        });
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}

/// What a cdata is, from the FFI helper: its address, its byte size when it is an array, and its
/// element type as LuaJIT prints it.
struct CData {
    address: usize,
    bytes: Option<usize>,
    elem: String,
}

const CDATA_HELPER: &str = r#"
local ffi = require "ffi"
return function(x)
  local t = tostring(ffi.typeof(x))
  local elem, kind = t:match("^ctype<(.-)%s*([%[%*&].*)>$")
  if not elem then return nil, nil, t end
  local addr = tonumber(ffi.cast("uintptr_t", x))
  local bytes = nil
  if kind:sub(1, 1) == "[" then bytes = ffi.sizeof(x) end
  return addr, bytes, elem
end
"#;

fn cdata_info(lua: &Lua, call: &str, v: Value) -> LuaResult<CData> {
    let helper: LuaFunction =
        match lua.named_registry_value::<Option<LuaFunction>>("diversity.cdata")? {
            Some(f) => f,
            None => {
                let f: LuaFunction = lua
                    .load(CDATA_HELPER)
                    .set_name("=diversity.cdata")
                    .call(())?;
                lua.set_named_registry_value("diversity.cdata", f.clone())?;
                f
            }
        };
    let (addr, bytes, elem): (Option<f64>, Option<f64>, String) = helper.call(v)?;
    let address = match addr {
        Some(a) => checked_address(call, a)?,
        None => {
            return Err(msg(
                call,
                format!("unsupported cdata type {elem}: pass an array or a pointer"),
            ))
        }
    };
    Ok(CData {
        address,
        bytes: bytes.map(|b| b as usize),
        elem: elem.replace("const ", "").trim().to_string(),
    })
}

enum Dtype {
    F32,
    F16,
    F64,
}

fn dtype_of(call: &str, elem: &str) -> LuaResult<Dtype> {
    match elem {
        "float" => Ok(Dtype::F32),
        "double" => Ok(Dtype::F64),
        "unsigned short" | "uint16_t" | "short" | "int16_t" => Ok(Dtype::F16),
        _ => Err(msg(
            call,
            format!("cdata of {elem}: expected float, double or uint16_t (fp16 bits)"),
        )),
    }
}

/// Values from raw memory: `count` elements of `dtype` at `address` (checked against `bytes`).
fn values_from_memory(
    call: &str,
    address: usize,
    bytes: usize,
    dtype: &Dtype,
    count: usize,
) -> LuaResult<Vec<f32>> {
    let size = match dtype {
        Dtype::F32 => 4,
        Dtype::F16 => 2,
        Dtype::F64 => 8,
    };
    let need = count
        .checked_mul(size)
        .ok_or_else(|| msg(call, "size overflows"))?;
    if bytes < need {
        return Err(msg(
            call,
            format!("the buffer holds {bytes} bytes but N × D = {count} values need {need}: it is smaller than N × D"),
        ));
    }
    // SAFETY: address and bytes describe one live cdata object (taken from it by the FFI helper or
    // given by the caller as pointer + length); we read `need` <= `bytes` of it, unaligned.
    let raw = unsafe { std::slice::from_raw_parts(address as *const u8, need) };
    Ok(match dtype {
        Dtype::F32 => raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F64 => raw
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
            .collect(),
        Dtype::F16 => raw
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
    })
}

/// `diversity.table(src, {n=, dim=, dtype=, count=, ids=})`: a table from a Lua table (flat with
/// `dim`, or an array of rows), a binary string (`dtype` "f32" or "f16"), or an FFI cdata array
/// or pointer (pointers need `count` elements).
fn make_table(lua: &Lua, (src, o): (Value, Option<LuaTable>)) -> LuaResult<LTable> {
    let call = "table";
    let dim: Option<usize> = opt_int(call, &o, "dim")?.map(|d| d as usize);
    let n_opt: Option<usize> = opt_int(call, &o, "n")?.map(|d| d as usize);
    let (data, n, d) = match src {
        Value::Table(t) => {
            let first: Value = t.raw_get(1)?;
            if let Value::Table(_) = first {
                let mut data = Vec::new();
                let mut d0 = None;
                for (i, row) in t.sequence_values::<LuaTable>().enumerate() {
                    let row = row.map_err(|_| msg(call, format!("row {i} is not a table")))?;
                    let vals: Vec<f32> = row
                        .sequence_values::<f64>()
                        .map(|v| {
                            v.map(|x| x as f32)
                                .map_err(|_| msg(call, format!("row {i} has a non-number value")))
                        })
                        .collect::<LuaResult<_>>()?;
                    match d0 {
                        None => d0 = Some(vals.len()),
                        Some(d) if d != vals.len() => {
                            return Err(msg(
                                call,
                                format!(
                                    "ragged rows: row {i} has {} values, row 0 has {d}",
                                    vals.len()
                                ),
                            ))
                        }
                        _ => {}
                    }
                    data.extend(vals);
                }
                let d = d0.unwrap_or(0);
                let n = data.len().checked_div(d).unwrap_or(0);
                (data, n, d)
            } else {
                let d = dim.ok_or_else(|| msg(call, "a flat Lua table needs {dim = D}"))?;
                let data: Vec<f32> = t
                    .sequence_values::<f64>()
                    .enumerate()
                    .map(|(i, v)| {
                        v.map(|x| x as f32)
                            .map_err(|_| msg(call, format!("value {} is not a number", i + 1)))
                    })
                    .collect::<LuaResult<_>>()?;
                if d == 0 || !data.len().is_multiple_of(d) {
                    return Err(msg(
                        call,
                        format!("{} values do not make rows of D = {d}", data.len()),
                    ));
                }
                let n = data.len() / d;
                (data, n, d)
            }
        }
        Value::String(s) => {
            let d = dim.ok_or_else(|| msg(call, "a binary string needs {dim = D}"))?;
            let dtype = match opt::<String>(&o, "dtype")?.as_deref() {
                None | Some("f32") | Some("fp32") => Dtype::F32,
                Some("f16") | Some("fp16") => Dtype::F16,
                Some(x) => return Err(msg(call, format!("dtype '{x}': expected f32 or f16"))),
            };
            let b = s.as_bytes();
            let size = if matches!(dtype, Dtype::F16) { 2 } else { 4 };
            if d == 0 || !b.len().is_multiple_of(size * d) {
                return Err(msg(
                    call,
                    format!(
                        "a string of {} bytes does not hold rows of {d} values",
                        b.len()
                    ),
                ));
            }
            let count = b.len() / size;
            let data = values_from_memory(call, b.as_ptr() as usize, b.len(), &dtype, count)?;
            (data, count / d, d)
        }
        v @ Value::Other(_) | v @ Value::UserData(_) | v @ Value::LightUserData(_) => {
            let cd = cdata_info(lua, call, v)?;
            let dtype = dtype_of(call, &cd.elem)?;
            let size = match dtype {
                Dtype::F32 => 4,
                Dtype::F16 => 2,
                Dtype::F64 => 8,
            };
            let d = dim.ok_or_else(|| msg(call, "a cdata needs {n = N, dim = D}"))?;
            let n = n_opt.ok_or_else(|| msg(call, "a cdata needs {n = N, dim = D}"))?;
            let bytes = match (cd.bytes, opt_int(call, &o, "count")?) {
                (Some(b), Some(c)) => b.min(c as usize * size),
                (Some(b), None) => b,
                (None, Some(c)) => c as usize * size,
                (None, None) => {
                    return Err(msg(
                        call,
                        "a pointer cdata needs {count = elements} (its length)",
                    ))
                }
            };
            let count = n
                .checked_mul(d)
                .ok_or_else(|| msg(call, "N × D overflows"))?;
            (
                values_from_memory(call, cd.address, bytes, &dtype, count)?,
                n,
                d,
            )
        }
        other => {
            return Err(msg(
                call,
                format!("cannot make a table from a {}", other.type_name()),
            ))
        }
    };
    if let Some(n_given) = n_opt {
        if n_given != n {
            return Err(msg(
                call,
                format!("n = {n_given} given but the data holds {n} rows of {d}"),
            ));
        }
    }
    let mut t = Table::new(data, n, d).map_err(|e| err(call, e))?;
    if let Some(ids) = opt::<LuaTable>(&o, "ids")? {
        let ids: Vec<serde_json::Value> = ids
            .sequence_values::<Value>()
            .map(|v| lua_to_json(call, v?))
            .collect::<LuaResult<_>>()?;
        t = t.with_ids(ids).map_err(|e| err(call, e))?;
    }
    Ok(LTable::new("table", t))
}

/// `diversity.merge_caches(out, {inputs…})`: merge the partial caches of a `--shard i/n` run
/// into `out`, byte-identical to the one-shot run's cache (`cache::merge_caches`). Returns
/// `{shards = n, layout = "contiguous" | "strided", sequences = count}`.
fn register_merge_caches(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    m.set(
        "merge_caches",
        lua.create_function(|lua, (out, inputs): (String, LuaTable)| {
            let call = "merge_caches";
            let inputs = inputs
                .sequence_values::<String>()
                .map(|p| Ok(std::path::PathBuf::from(p?)))
                .collect::<LuaResult<Vec<_>>>()?;
            let r = crate::cache::merge_caches(&inputs, out.as_ref()).map_err(|e| err(call, e))?;
            let t = lua.create_table()?;
            t.set("shards", r.shards)?;
            t.set("layout", r.layout.name())?;
            t.set("sequences", r.sequences)?;
            Ok(t)
        })?,
    )
}

/// The module table.
#[mlua::lua_module]
fn diversity(lua: &Lua) -> LuaResult<LuaTable> {
    let m = lua.create_table()?;
    m.set("version", env!("CARGO_PKG_VERSION"))?;
    m.set(
        "open",
        lua.create_function(|_, o: Option<LuaTable>| {
            let opts = ContextOptions {
                device: opt(&o, "device")?,
                validation: opt(&o, "validation")?.unwrap_or(false),
            };
            let ctx = Context::new(&opts).map_err(|e| err("open", e))?;
            Ok(LContext::new("context", ctx))
        })?,
    )?;
    // `diversity.open_devices(spec [, {validation = bool}])`: contexts for "all" or a comma list
    // of indices or name substrings ("0,0" opens one device twice), as a Lua array.
    m.set(
        "open_devices",
        lua.create_function(|lua, (spec, o): (String, Option<LuaTable>)| {
            let validation = opt(&o, "validation")?.unwrap_or(false);
            let ctxs = crate::multi::open_devices(&spec, validation)
                .map_err(|e| err("open_devices", e))?;
            lua.create_sequence_from(ctxs.into_iter().map(|c| LContext::new("context", c)))
        })?,
    )?;
    // `diversity.knn_index(contexts, table, precision [, {layout = "shards" | "replicas",
    // weights = {…}}])`: the table uploaded to every context, as row slices (shards, the
    // default) or whole copies (replicas); `:knn(queries, opts)` gives the same ids and distance
    // bits as one device's `dtable:knn`.
    m.set(
        "knn_index",
        lua.create_function(
            |_,
             (ctxs, table, precision, o): (
                LuaTable,
                LuaAnyUserData,
                Option<String>,
                Option<LuaTable>,
            )| {
                let call = "knn_index";
                let mut list = Vec::new();
                for u in ctxs.sequence_values::<LuaAnyUserData>() {
                    let u = u?;
                    let c = u.borrow::<LContext>()?;
                    list.push(c.get(call)?.clone());
                }
                let t = table.borrow::<LTable>()?;
                let t = t.get(call)?;
                let p = parse_precision(call, precision)?;
                let weights: Option<Vec<f64>> = opt(&o, "weights")?;
                let layout: Option<String> = opt(&o, "layout")?;
                let w = weights.as_deref();
                let index = match layout.as_deref().unwrap_or("shards") {
                    "shards" => {
                        crate::multi::IndexShards::new(&list, t, p, w).map(MultiKnn::Shards)
                    }
                    "replicas" => {
                        crate::multi::IndexReplicas::new(&list, t, p, w).map(MultiKnn::Replicas)
                    }
                    other => {
                        return Err(msg(
                            call,
                            format!("layout '{other}': expected shards or replicas"),
                        ))
                    }
                }
                .map_err(|e| err(call, e))?;
                Ok(LMultiKnn::new("multi-device knn index", index))
            },
        )?,
    )?;
    m.set(
        "devices",
        lua.create_function(|lua, ()| {
            let list = Context::list_devices().map_err(|e| err("devices", e))?;
            let t = lua.create_table()?;
            for d in list {
                let e = lua.create_table()?;
                e.set("index", d.index)?;
                e.set("name", d.name)?;
                e.set("type", d.device_type)?;
                t.raw_push(e)?;
            }
            Ok(t)
        })?,
    )?;
    m.set("table", lua.create_function(make_table)?)?;
    m.set(
        "load",
        lua.create_function(|_, (path, o): (String, Option<LuaTable>)| {
            let dim = opt_int("load", &o, "dim")?.map(|d| d as usize);
            let t = files::load_table(path.as_ref(), dim).map_err(|e| err("load", e))?;
            Ok(LTable::new("table", t))
        })?,
    )?;
    m.set(
        "load_fp16_bin",
        lua.create_function(
            |_, (path, space, checksum): (String, Option<String>, Option<String>)| {
                let expect = match (&space, &checksum) {
                    (Some(s), Some(c)) => Some((s.as_str(), c.as_str())),
                    _ => None,
                };
                let t = files::load_fp16_bin(path.as_ref(), expect)
                    .map_err(|e| err("load_fp16_bin", e))?;
                Ok(LTable::new("table", t))
            },
        )?,
    )?;
    m.set(
        "save_ids",
        lua.create_function(|_, (path, table): (String, LuaAnyUserData)| {
            let call = "save_ids";
            let t = table.borrow::<LTable>()?;
            let ids = t
                .get(call)?
                .ids()
                .ok_or_else(|| msg(call, "the table has no ids"))?;
            files::save_ids(path.as_ref(), ids).map_err(|e| err(call, e))
        })?,
    )?;
    m.set(
        "load_ids",
        lua.create_function(|lua, path: String| {
            let ids = files::load_ids(path.as_ref()).map_err(|e| err("load_ids", e))?;
            let t = lua.create_table_with_capacity(ids.len(), 0)?;
            for (i, id) in ids.iter().enumerate() {
                t.raw_set(i + 1, json_to_lua(lua, id)?)?;
            }
            Ok(t)
        })?,
    )?;
    m.set(
        "file_checksum",
        lua.create_function(|_, path: String| {
            files::file_checksum(path.as_ref()).map_err(|e| err("file_checksum", e))
        })?,
    )?;
    m.set(
        "json_cache_writer",
        lua.create_function(
            |_, (path, meta, ids): (String, Option<Value>, Option<LuaTable>)| {
                let call = "json_cache_writer";
                let meta = match meta {
                    Some(v) => lua_to_json(call, v)?,
                    None => serde_json::json!({}),
                };
                let ids = match ids {
                    Some(t) => Some(
                        t.sequence_values::<Value>()
                            .map(|v| lua_to_json(call, v?))
                            .collect::<LuaResult<Vec<_>>>()?,
                    ),
                    None => None,
                };
                let w =
                    JsonCacheWriter::create(path.as_ref(), &meta, ids).map_err(|e| err(call, e))?;
                Ok(LJsonWriter::new("json cache writer", w))
            },
        )?,
    )?;
    register_merge_caches(lua, &m)?;
    m.set(
        "binary_cache_writer",
        lua.create_function(|_, (path, n, len): (String, Value, Option<Value>)| {
            let call = "binary_cache_writer";
            let n = int(call, "n", &n)? as usize;
            let len = match len.filter(|l| !l.is_nil()) {
                Some(l) => int(call, "len", &l)? as usize,
                None => n,
            };
            let w = BinaryCacheWriter::create(path.as_ref(), n, len).map_err(|e| err(call, e))?;
            Ok(LBinWriter::new("binary cache writer", w))
        })?,
    )?;
    m.set(
        "open_binary_cache",
        lua.create_function(|_, path: String| {
            let c = BinaryCache::open(path.as_ref()).map_err(|e| err("open_binary_cache", e))?;
            Ok(LBinCache::new("binary cache", c))
        })?,
    )?;
    // Scalar and bulk fp16 conversion (round-to-nearest-even), for the compat shim.
    m.set(
        "f32_to_f16",
        lua.create_function(|_, x: f32| Ok(f16::from_f32(x).to_bits()))?,
    )?;
    m.set(
        "f16_to_f32",
        lua.create_function(|_, b: u16| Ok(f16::from_bits(b).to_f32()))?,
    )?;
    m.set(
        "convert_f32_to_f16",
        lua.create_function(|lua, (src, dst, count): (Value, Value, Value)| {
            let call = "convert_f32_to_f16";
            let count = int(call, "count", &count)? as usize;
            let s = cdata_info(lua, call, src)?;
            let d = cdata_info(lua, call, dst)?;
            if s.elem != "float" || !matches!(d.elem.as_str(), "unsigned short" | "uint16_t") {
                return Err(msg(
                    call,
                    format!(
                        "expected float source and uint16_t destination, got {} and {}",
                        s.elem, d.elem
                    ),
                ));
            }
            if s.bytes.is_some_and(|b| b < count * 4) || d.bytes.is_some_and(|b| b < count * 2) {
                return Err(msg(call, format!("{count} values do not fit the buffers")));
            }
            let vals = values_from_memory(call, s.address, count * 4, &Dtype::F32, count)?;
            // SAFETY: the destination cdata holds at least count halves (checked for arrays; a
            // pointer's length is the caller's promise, as in C).
            let out = unsafe { std::slice::from_raw_parts_mut(d.address as *mut u16, count) };
            for (o, v) in out.iter_mut().zip(vals) {
                *o = f16::from_f32(v).to_bits();
            }
            Ok(())
        })?,
    )?;
    m.set(
        "knn_graph",
        lua.create_function(|_, path: String| {
            let g = KnnGraph::open(path.as_ref()).map_err(|e| err("knn_graph", e))?;
            Ok(LKnnGraph::new("knn graph", g))
        })?,
    )?;
    m.set("ENV_FAIL_AFTER_CHUNKS", crate::batch::ENV_FAIL_AFTER_CHUNKS)?;
    // `diversity.wait_any{job1, job2, …}`: block until one of the started jobs has finished its
    // step and return its position (1-based); nil when none is started.
    m.set(
        "wait_any",
        lua.create_function(|_, jobs: LuaTable| {
            let list: Vec<(i64, mlua::AnyUserData)> = jobs
                .pairs::<i64, mlua::AnyUserData>()
                .collect::<LuaResult<_>>()?;
            loop {
                let mut any = false;
                for (i, u) in &list {
                    let j = u.borrow::<LJob>()?;
                    if let Some(h) = &j.running {
                        any = true;
                        if h.is_finished() {
                            return Ok(Some(*i));
                        }
                    }
                }
                if !any {
                    return Ok(None);
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })?,
    )?;
    // Bytes of G = E Eᵀ for N items (N² × 4).
    m.set(
        "gram_bytes",
        lua.create_function(|_, n: Value| {
            Ok(gram::gram_bytes(int("gram_bytes", "n", &n)? as usize))
        })?,
    )?;
    // The clean message of an error raised by this module (no "runtime error: " prefix, no
    // traceback): `diversity.message(err)`.
    let message: LuaFunction = lua
        .load(
            r#"return function(e)
                 local s = tostring(e)
                 s = s:gsub("^runtime error: ", ""):gsub("\nstack traceback:.*$", "")
                 return s
               end"#,
        )
        .set_name("=diversity.message")
        .call(())?;
    m.set("message", message)?;
    Ok(m)
}
