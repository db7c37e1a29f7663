//! Several devices and threads: `open_devices`, `knn_index` and its handle, jobs stepping on
//! threads of their own (`job:start`) and `wait_any`.

use super::args::{opt, parse_precision};
use super::context::LContext;
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::job::LJob;
use super::knn::{knn_options, knn_result};
use super::table::LTable;
use crate::batch::StepReport;
use crate::engine::Job;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once};

/// A job moved to the stepping thread and back. SAFETY: a job (its Vulkan command pool, buffers,
/// mapped memory) is used by exactly one thread at a time — it is moved into the thread by
/// `job:start` and out of it by `job:wait` — which is all Vulkan's external synchronization asks;
/// its context is `Send + Sync`.
struct SendJob(Job);
unsafe impl Send for SendJob {}

/// A job stepping on a thread of its own (`job:start`). The thread never outlives its handle:
/// dropping a `Stepping` (the job's `close()`, its garbage collection, the Lua state closing)
/// cancels the step at its next submission and joins the thread; a process that exits without
/// closing its Lua state (`os.exit`) does the same for every thread still stepping, in a hook
/// that runs at exit, before the Vulkan driver and loader tear themselves down (a thread still
/// submitting then would crash the process).
pub(super) struct Stepping {
    thread: Option<std::thread::JoinHandle<(SendJob, crate::Result<StepReport>)>>,
    cancel: Arc<AtomicBool>,
}

/// The cancellation flags of the stepping threads still running, by thread number, with a
/// condition variable signalled as each ends: what the exit hook cancels and waits for.
static LIVE: Mutex<Vec<(u64, Arc<AtomicBool>)>> = Mutex::new(Vec::new());
static LIVE_ENDED: Condvar = Condvar::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
static EXIT_HOOK: Once = Once::new();

extern "C" {
    /// C's `atexit`: in a shared library its handlers also run when the library is unloaded.
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

fn live() -> MutexGuard<'static, Vec<(u64, Arc<AtomicBool>)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// At exit (or unload): cancel every stepping thread and wait until each has left its step.
extern "C" fn cancel_all_at_exit() {
    let mut l = live();
    for (_, f) in l.iter() {
        f.store(true, Ordering::SeqCst);
    }
    while !l.is_empty() {
        l = LIVE_ENDED.wait(l).unwrap_or_else(|e| e.into_inner());
    }
}

/// Takes a stepping thread off [`LIVE`] when its step ends, however it ends (a panic included).
struct Ended(u64);
impl Drop for Ended {
    fn drop(&mut self) {
        live().retain(|(id, _)| *id != self.0);
        LIVE_ENDED.notify_all();
    }
}

impl Stepping {
    /// Move `job` to a new thread and step it by `n` there.
    pub(super) fn spawn(job: Job, n: usize) -> std::io::Result<Stepping> {
        EXIT_HOOK.call_once(|| {
            // SAFETY: registers a plain function that takes no Lua or Vulkan object; a failure
            // (no room for another handler) leaves only the exit path without its wait.
            unsafe { atexit(cancel_all_at_exit) };
        });
        let job = SendJob(job);
        let cancel = Arc::new(AtomicBool::new(false));
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        live().push((id, cancel.clone()));
        let ended = Ended(id);
        let flag = cancel.clone();
        let spawned = std::thread::Builder::new()
            .name("diversity-job".into())
            .spawn(move || {
                let _ended = ended;
                let mut job = job;
                let r = crate::batch::cancellable(flag, || job.0.step(n));
                (job, r)
            });
        // A thread that did not start dropped its `Ended` with the closure.
        Ok(Stepping {
            thread: Some(spawned?),
            cancel,
        })
    }
    /// Whether the step has finished ([`Stepping::join`] would not block).
    pub(super) fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
    /// Wait for the step; the job back (None if the thread panicked: the job is lost) and the
    /// step's result.
    pub(super) fn join(mut self) -> (Option<Job>, crate::Result<StepReport>) {
        let Some(thread) = self.thread.take() else {
            return (
                None,
                Err(crate::Error::Invalid("the job was joined already".into())),
            );
        };
        match thread.join() {
            Ok((job, r)) => (Some(job.0), r),
            Err(p) => {
                let why = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                (
                    None,
                    Err(crate::Error::Invalid(format!(
                        "the job's stepping thread panicked ({why}); the job is lost"
                    ))),
                )
            }
        }
    }
}

impl Drop for Stepping {
    /// Cancel the step and wait for the thread: its job (and the device it uses) is dropped
    /// here, after the thread's last submission finished.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.cancel.store(true, Ordering::SeqCst);
            let _ = t.join();
        }
    }
}

/// A table on several devices for k-NN: row slices (shards) or whole copies (replicas).
pub(super) enum MultiKnn {
    Shards(crate::multi::IndexShards),
    Replicas(crate::multi::IndexReplicas),
}

/// A multi-device k-NN index.
pub(super) type LMultiKnn = Handle<MultiKnn>;

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
                .lua_ctx(call)?;
                let r = knn_result(call, r)?;
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
                Ok((r, t))
            },
        );
        m.add_method("layout", |_, this, ()| {
            Ok(match this.get("multi_knn:layout")? {
                MultiKnn::Shards(_) => "shards",
                MultiKnn::Replicas(_) => "replicas",
            })
        });
        Handle::add_close(m);
    }
}

/// `open_devices`, `knn_index`, `wait_any`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.open_devices(spec [, {validation = bool}])`: contexts for "all" or a comma list
    // of indices or name substrings ("0,0" opens one device twice), as a Lua array.
    m.set(
        "open_devices",
        lua.create_function(|lua, (spec, o): (String, Option<LuaTable>)| {
            let validation = opt(&o, "validation")?.unwrap_or(false);
            let ctxs = crate::multi::open_devices(&spec, validation).lua_ctx("open_devices")?;
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
                super::args::dense(call, "the contexts", &ctxs)?;
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
                .lua_ctx(call)?;
                Ok(LMultiKnn::new("multi-device knn index", index))
            },
        )?,
    )?;
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
                    if let Some(finished) = u.borrow::<LJob>()?.finished() {
                        any = true;
                        if finished {
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
    Ok(())
}
