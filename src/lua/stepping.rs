//! A job stepping on a thread of its own (`job:start`, `job:wait`): the thread, its
//! cancellation, and the exit hook that stops every such thread before the Vulkan driver is torn
//! down. It may touch an engine job and the batch's cancellation, nothing of the Lua handles.

use crate::batch::StepReport;
use crate::engine::Job;
use crate::error::{Error, Result};
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
    thread: Option<std::thread::JoinHandle<(SendJob, Result<StepReport>)>>,
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
    pub(super) fn join(mut self) -> (Option<Job>, Result<StepReport>) {
        let Some(thread) = self.thread.take() else {
            return (
                None,
                Err(Error::Invalid("the job was joined already".into())),
            );
        };
        match thread.join() {
            Ok((job, r)) => (Some(job.0), r),
            Err(p) => {
                let why = crate::error::panic_message(&*p, "no message");
                (
                    None,
                    Err(Error::Invalid(format!(
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
