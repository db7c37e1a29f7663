//! The C ABI of the user's `libvkcompute.so`, exported by this library (the cdylib) so that a
//! `vk_compute.lua` written against the old library runs unchanged with
//! `VK_COMPUTE_LIB=…/diversity.so` (declarations in `include/vk_compute.h`).
//! A skin like the Lua binding: it may touch the engine choice ([`crate::engine`]), the table
//! cache, the device context, host tables and the vocabulary (mode, shape, precision); it decides
//! nothing itself.
//!
//! Beyond the original: every failure leaves its full message for [`vkc_last_error`] (per
//! thread), a NULL, zero or oversized argument is answered with an error code (or NULL) instead
//! of a crash, nothing is printed, and a panic or a lost device never brings the process down.
//! Result codes: 0 success, −1 … −7 as the old library (init failed, no suitable device, buffer
//! creation, shader load, pipeline creation, command execution — a lost device lands here —, out
//! of memory), and −8 for an invalid argument, which the old library did not check.
//!
//! Layouts are the old library's: embeddings row-major (`num_poems` rows of `embedding_dim`
//! values; fp16 as IEEE half bits), sequences as 0-based item indices, a batch's output row i the
//! sequence of `start_indices[i]` (`batch_size` × `num_poems` values). Batch slots are steps
//! 1 … N − 1, computed in order by `vkd_batch_compute_chunk` (`tile_size` 0 or ≥ N: untiled).
//!
//! Engines: `vkd_init`/`vkd_compute_sequence` and `vkd_batch_init` run the engine the mode `auto`
//! resolves to (gram where G fits the device, else scan), like every other path of the library;
//! [`ENV_MODE`] (`DIVERSITY_MODE=scan|gram|auto`, read by `vkd_init` and `vkd_batch_init`) pins
//! one, e.g. the scan for tile experiments. `tile_size` applies to the scan and is ignored by the
//! gram engine; every tile size gives the same bits, so a caller that leaves garbage in that
//! argument (a wrapper declaring the function with three arguments) gets correct results.
//! [`vkd_batch_engine`] says which engine a batch runs.
//!
//! Repeated inits of the same table cost nothing: a context keeps its most recent tables on the
//! device, with G once a gram job has built it, and an init whose table has the same shape,
//! precision and bytes as a kept one reuses it (see [`crate::table_cache`]).

use crate::device::ContextOptions;
use crate::engine::{Job, JobOptions, Target};
use crate::error::Error;
use crate::mode::Mode;
use crate::scan::Shape;
use crate::table::{Precision, Table};
use crate::table_cache::{out_of_memory, SharedEngine, TableCache};
use half::f16;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

/// The environment variable that pins the engine of `vkd_init` and `vkd_batch_init`: `scan`,
/// `gram` or `auto` (unset or empty: `auto`).
pub const ENV_MODE: &str = "DIVERSITY_MODE";

/// Tables a context keeps on its device for repeated inits (the wrapper alternates at most
/// between a batch's fp16 table and the single sequences' fp32 table).
const KEPT_TABLES: usize = 2;

/// Success.
pub const VKC_SUCCESS: i32 = 0;
/// The Vulkan instance or device could not be created.
pub const VKC_ERROR_INIT_FAILED: i32 = -1;
/// No Vulkan device with what the job needs.
pub const VKC_ERROR_NO_SUITABLE_DEVICE: i32 = -2;
/// A buffer could not be created.
pub const VKC_ERROR_BUFFER_CREATION: i32 = -3;
/// A shader could not be loaded.
pub const VKC_ERROR_SHADER_LOAD: i32 = -4;
/// A pipeline could not be created.
pub const VKC_ERROR_PIPELINE_CREATION: i32 = -5;
/// A submission failed (a lost device lands here).
pub const VKC_ERROR_COMMAND_EXECUTION: i32 = -6;
/// Device memory ran out.
pub const VKC_ERROR_OUT_OF_MEMORY: i32 = -7;
/// An argument was NULL, zero, out of range or in the wrong order (not in the old library).
pub const VKC_ERROR_INVALID_ARGUMENT: i32 = -8;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// The code an error maps to.
fn code_of(e: &Error) -> i32 {
    match e {
        Error::Invalid(_) | Error::Io { .. } | Error::Format { .. } => VKC_ERROR_INVALID_ARGUMENT,
        Error::NoDevice(_) | Error::Unsupported { .. } => VKC_ERROR_NO_SUITABLE_DEVICE,
        Error::Limit(_) | Error::Alloc { .. } => VKC_ERROR_OUT_OF_MEMORY,
        Error::DeviceLost(_) | Error::Verification(_) => VKC_ERROR_COMMAND_EXECUTION,
        Error::Vulkan { call, result } => {
            use ash::vk::Result as R;
            match *result {
                R::ERROR_OUT_OF_DEVICE_MEMORY | R::ERROR_OUT_OF_HOST_MEMORY => {
                    VKC_ERROR_OUT_OF_MEMORY
                }
                _ if call.contains("Pipeline") => VKC_ERROR_PIPELINE_CREATION,
                _ if call.contains("ShaderModule") => VKC_ERROR_SHADER_LOAD,
                _ if call.contains("Buffer") => VKC_ERROR_BUFFER_CREATION,
                _ if call.contains("Instance") || call.contains("Device") => VKC_ERROR_INIT_FAILED,
                _ => VKC_ERROR_COMMAND_EXECUTION,
            }
        }
    }
}

/// A failure: its code and message.
struct Fail(i32, String);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail(code_of(&e), e.to_string())
    }
}

fn invalid(call: &str, what: impl std::fmt::Display) -> Fail {
    Fail(VKC_ERROR_INVALID_ARGUMENT, format!("{call}: {what}"))
}

/// Runs `f`, turning an error or a panic into a code and the thread's last error.
fn guard<T>(call: &str, on_fail: T, f: impl FnOnce() -> Result<T, Fail>) -> (T, i32) {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => (v, VKC_SUCCESS),
        Ok(Err(Fail(code, m))) => {
            let m = if m.starts_with(call) {
                m
            } else {
                format!("{call}: {m}")
            };
            set_error(&m);
            (on_fail, code)
        }
        Err(p) => {
            let what = crate::error::panic_message(&*p, "unknown");
            set_error(&format!("{call}: internal error (panic: {what})"));
            (on_fail, VKC_ERROR_COMMAND_EXECUTION)
        }
    }
}

/// The error "`what` is NULL" of `call` where `p` is NULL.
fn not_null<T>(call: &str, what: &str, p: *const T) -> Result<(), Fail> {
    if p.is_null() {
        return Err(invalid(call, format!("{what} is NULL")));
    }
    Ok(())
}

/// The handle behind `p`, shared, or the error "`what` is NULL" of `call`.
///
/// # Safety
/// `p` is NULL or a live pointer from this library that nothing frees while `'a` lasts.
unsafe fn handle<'a, T>(call: &str, what: &str, p: *const T) -> Result<&'a T, Fail> {
    // SAFETY: per the contract above.
    unsafe { p.as_ref() }.ok_or_else(|| invalid(call, format!("{what} is NULL")))
}

/// The handle behind `p`, for this call alone, or the error "`what` is NULL" of `call`.
///
/// # Safety
/// `p` is NULL or a live pointer from this library that nothing else uses while `'a` lasts.
unsafe fn handle_mut<'a, T>(call: &str, what: &str, p: *mut T) -> Result<&'a mut T, Fail> {
    // SAFETY: per the contract above.
    unsafe { p.as_mut() }.ok_or_else(|| invalid(call, format!("{what} is NULL")))
}

/// [`handle_mut`], then the output pointer `out` (named `out_name`) checked not NULL: the
/// opening of the calls that copy into a caller's buffer, its errors in that order.
///
/// # Safety
/// As [`handle_mut`].
unsafe fn handle_out<'a, T, O>(
    call: &str,
    what: &str,
    p: *mut T,
    out_name: &str,
    out: *const O,
) -> Result<&'a mut T, Fail> {
    // SAFETY: per the contract above.
    let h = unsafe { handle_mut(call, what, p)? };
    not_null(call, out_name, out)?;
    Ok(h)
}

/// `n × d` values at `p`, checked: not NULL, not empty, the count within memory.
unsafe fn slice_of<'a, T>(
    call: &str,
    what: &str,
    p: *const T,
    n: u32,
    d: u32,
) -> Result<&'a [T], Fail> {
    not_null(call, what, p)?;
    if n == 0 || d == 0 {
        return Err(invalid(
            call,
            format!("{what}: num_poems and embedding_dim must be positive"),
        ));
    }
    let count = (n as usize)
        .checked_mul(d as usize)
        .filter(|&c| {
            c.checked_mul(std::mem::size_of::<T>())
                .is_some_and(|b| b <= isize::MAX as usize)
        })
        .ok_or_else(|| {
            invalid(
                call,
                format!("{what}: {n} × {d} values do not fit in memory"),
            )
        })?;
    // SAFETY: the caller promises `count` readable values at `p` (the old library's contract).
    Ok(unsafe { std::slice::from_raw_parts(p, count) })
}

/// A Vulkan device opened for the old API, with the tables it keeps for repeated inits.
pub struct VkComputeContext {
    /// Where its work runs: the device, or the host engine alone on a machine without Vulkan.
    target: Target,
    name: CString,
    tables: Mutex<TableCache>,
}

impl VkComputeContext {
    fn tables(&self) -> MutexGuard<'_, TableCache> {
        // A panic inside the cache leaves nothing half-done that matters: the cache is a set of
        // complete entries.
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One table for single sequences (`vkd_init`, fp32).
pub struct VkDiversityContext {
    engine: SharedEngine,
    n: usize,
    mode: Mode,
}

/// A batch of sequences over an fp16 table (`vkd_batch_init`).
pub struct VkDiversityBatchContext {
    job: Job,
    n: usize,
    batch: usize,
    next_slot: u32,
}

/// The mode [`ENV_MODE`] asks for (`auto` when unset or empty).
fn mode_from_env(call: &str) -> Result<Mode, Fail> {
    match std::env::var(ENV_MODE) {
        Err(std::env::VarError::NotPresent) => Ok(Mode::Auto),
        Ok(v) if v.is_empty() => Ok(Mode::Auto),
        Ok(v) => v
            .parse()
            .map_err(|_| invalid(call, format!("{ENV_MODE}={v:?}: scan, gram or auto"))),
        Err(_) => Err(invalid(call, format!("{ENV_MODE} is not valid UTF-8"))),
    }
}

/// A job on a kept engine; when G (or the job's buffers) runs out of device memory, the tables
/// no handle holds are dropped and the job tried once more.
fn start_job(
    c: Option<&VkComputeContext>,
    engine: &SharedEngine,
    starts: &[u32],
    opts: &JobOptions,
) -> Result<Job, Fail> {
    let attempt = || -> Result<Job, Error> {
        let mut e = engine.lock().unwrap_or_else(|p| p.into_inner());
        e.job(starts, opts)
    };
    match attempt() {
        Err(e) if out_of_memory(&e) && c.is_some_and(|c| c.tables().drop_unused() > 0) => {
            Ok(attempt()?)
        }
        r => Ok(r?),
    }
}

/// Open the first suitable Vulkan device (`enable_validation`: with the validation layers);
/// on a machine with no Vulkan device at all, a context whose sequences run on the host engine.
/// NULL on failure ([`vkc_last_error`] says why).
#[no_mangle]
pub extern "C" fn vkc_init(enable_validation: bool) -> *mut VkComputeContext {
    guard("vkc_init", std::ptr::null_mut(), || {
        let opts = ContextOptions {
            validation: enable_validation,
            ..ContextOptions::default()
        };
        // No Vulkan device on this machine (and none named): the host engine alone.
        let target = match Target::open(&opts) {
            Ok(target) => target,
            Err(e @ Error::NoDevice(_)) => return Err(Fail::from(e)),
            Err(e) => return Err(Fail(VKC_ERROR_INIT_FAILED, e.to_string())),
        };
        let name = CString::new(target.name().replace('\0', " ")).unwrap_or_default();
        Ok(Box::into_raw(Box::new(VkComputeContext {
            target,
            name,
            tables: Mutex::new(TableCache::new(KEPT_TABLES)),
        })))
    })
    .0
}

/// Close a context from [`vkc_init`] (NULL: nothing), with the tables it keeps. Tables and
/// batches made from it keep the device alive until they are destroyed too.
///
/// # Safety
/// `ctx` is NULL or a pointer [`vkc_init`] returned, not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn vkc_destroy(ctx: *mut VkComputeContext) {
    if !ctx.is_null() {
        // SAFETY: per the contract above.
        drop(unsafe { Box::from_raw(ctx) });
    }
}

/// The name of a result code (a static string).
#[no_mangle]
pub extern "C" fn vkc_get_error_string(code: i32) -> *const c_char {
    let s: &'static [u8] = match code {
        VKC_SUCCESS => b"VKC_SUCCESS\0",
        VKC_ERROR_INIT_FAILED => b"VKC_ERROR_INIT_FAILED\0",
        VKC_ERROR_NO_SUITABLE_DEVICE => b"VKC_ERROR_NO_SUITABLE_DEVICE\0",
        VKC_ERROR_BUFFER_CREATION => b"VKC_ERROR_BUFFER_CREATION\0",
        VKC_ERROR_SHADER_LOAD => b"VKC_ERROR_SHADER_LOAD\0",
        VKC_ERROR_PIPELINE_CREATION => b"VKC_ERROR_PIPELINE_CREATION\0",
        VKC_ERROR_COMMAND_EXECUTION => b"VKC_ERROR_COMMAND_EXECUTION\0",
        VKC_ERROR_OUT_OF_MEMORY => b"VKC_ERROR_OUT_OF_MEMORY\0",
        VKC_ERROR_INVALID_ARGUMENT => b"VKC_ERROR_INVALID_ARGUMENT\0",
        _ => b"VKC_ERROR_UNKNOWN\0",
    };
    s.as_ptr() as *const c_char
}

/// The full message of this thread's last failure ("" before any); valid until the next failing
/// call on the thread.
#[no_mangle]
pub extern "C" fn vkc_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The device's name (valid while `ctx` lives): where sequences run on the host engine (no
/// GPU), the CPU's model followed by "(host engine)"; NULL for a NULL context.
///
/// # Safety
/// `ctx` is NULL or a live pointer from [`vkc_init`].
#[no_mangle]
pub unsafe extern "C" fn vkc_get_device_name(ctx: *mut VkComputeContext) -> *const c_char {
    // SAFETY: per the contract above.
    match unsafe { ctx.as_ref() } {
        Some(c) => c.name.as_ptr(),
        None => {
            set_error("vkc_get_device_name: ctx is NULL");
            std::ptr::null()
        }
    }
}

/// The device's memory in bytes as the old library reported it: the sizes of the device-local
/// heaps added up (not the budget this library plans with); where sequences run on the host
/// engine (no GPU), the host engine's memory budget; 0 for a NULL context.
///
/// # Safety
/// `ctx` is NULL or a live pointer from [`vkc_init`].
#[no_mangle]
pub unsafe extern "C" fn vkc_get_device_memory(ctx: *mut VkComputeContext) -> u64 {
    // SAFETY: per the contract above.
    match unsafe { ctx.as_ref() } {
        Some(c) => match c.target.context() {
            Some(ctx) if !ctx.native_host() => ctx.caps().device_local_bytes,
            _ => crate::host::host_memory_budget(),
        },
        None => {
            set_error("vkc_get_device_memory: ctx is NULL");
            0
        }
    }
}

/// `count` floats at `src` to IEEE half bits at `dst` (round to nearest even). NULL pointers with
/// a nonzero count do nothing but set [`vkc_last_error`].
///
/// # Safety
/// `src` holds `count` readable floats and `dst` room for `count` halves.
#[no_mangle]
pub unsafe extern "C" fn vkc_fp32_to_fp16(src: *const f32, dst: *mut u16, count: u32) {
    if count == 0 {
        return;
    }
    if src.is_null() || dst.is_null() {
        set_error("vkc_fp32_to_fp16: src or dst is NULL");
        return;
    }
    // SAFETY: per the contract above.
    let (s, d) = unsafe {
        (
            std::slice::from_raw_parts(src, count as usize),
            std::slice::from_raw_parts_mut(dst, count as usize),
        )
    };
    for (o, &v) in d.iter_mut().zip(s) {
        *o = f16::from_f32(v).to_bits();
    }
}

/// The float value of IEEE half bits.
#[no_mangle]
pub extern "C" fn vkc_fp16_to_fp32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Upload `num_poems` × `embedding_dim` floats for single sequences (or reuse the context's
/// kept copy of the same table). NULL on failure.
///
/// # Safety
/// `ctx` is NULL or a live pointer from [`vkc_init`]; `embeddings` is NULL or holds
/// `num_poems × embedding_dim` readable floats.
#[no_mangle]
pub unsafe extern "C" fn vkd_init(
    ctx: *mut VkComputeContext,
    embeddings: *const f32,
    num_poems: u32,
    embedding_dim: u32,
) -> *mut VkDiversityContext {
    let call = "vkd_init";
    guard(call, std::ptr::null_mut(), || {
        // SAFETY: per the contract above.
        let c = unsafe { handle(call, "ctx", ctx)? };
        // SAFETY: per the contract above.
        let data = unsafe { slice_of(call, "embeddings", embeddings, num_poems, embedding_dim)? };
        let mode = mode_from_env(call)?;
        let table = Table::new(data.to_vec(), num_poems as usize, embedding_dim as usize)?;
        let engine = c.tables().engine(&c.target, table, Precision::Fp32)?;
        Ok(Box::into_raw(Box::new(VkDiversityContext {
            engine,
            n: num_poems as usize,
            mode,
        })))
    })
    .0
}

/// The whole sequence from `start_poem` (0-based) into `output_sequence` (`num_poems` values:
/// the start, then every other item in order).
///
/// # Safety
/// `dctx` is NULL or a live pointer from [`vkd_init`]; `output_sequence` is NULL or has room for
/// `num_poems` values.
#[no_mangle]
pub unsafe extern "C" fn vkd_compute_sequence(
    dctx: *mut VkDiversityContext,
    start_poem: u32,
    output_sequence: *mut u32,
) -> i32 {
    let call = "vkd_compute_sequence";
    guard(call, (), || {
        // SAFETY: per the contract above.
        let d = unsafe { handle_out(call, "context", dctx, "output_sequence", output_sequence)? };
        let seq = prefix(call, d, start_poem, None)?;
        // SAFETY: per the contract above.
        unsafe { std::ptr::copy_nonoverlapping(seq.as_ptr(), output_sequence, d.n) };
        Ok(())
    })
    .1
}

/// The first `k` steps of the sequence from `start_poem` (0-based) into `output_sequence`:
/// `min(k, num_poems − 1) + 1` values, the start first — the same ids as the first values of
/// [`vkd_compute_sequence`]'s, computed in k steps (on the host engine, reading only the k rows
/// of G the picks need). `output_len` is the room at `output_sequence`; too little is refused
/// with −8 before any work. Not in the old library.
///
/// # Safety
/// `dctx` is NULL or a live pointer from [`vkd_init`]; `output_sequence` is NULL or has room for
/// `output_len` values.
#[no_mangle]
pub unsafe extern "C" fn vkd_compute_prefix(
    dctx: *mut VkDiversityContext,
    start_poem: u32,
    k: u32,
    output_sequence: *mut u32,
    output_len: u32,
) -> i32 {
    let call = "vkd_compute_prefix";
    guard(call, (), || {
        // SAFETY: per the contract above.
        let d = unsafe { handle_out(call, "context", dctx, "output_sequence", output_sequence)? };
        let len = (k as usize).min(d.n - 1) + 1;
        if (output_len as usize) < len {
            return Err(invalid(
                call,
                format!("output_len {output_len} is less than the {len} values of {k} steps"),
            ));
        }
        let seq = prefix(call, d, start_poem, Some(k as usize))?;
        // SAFETY: per the contract above (len ≤ output_len).
        unsafe { std::ptr::copy_nonoverlapping(seq.as_ptr(), output_sequence, len) };
        Ok(())
    })
    .1
}

/// The sequence from `start` on `d`'s table, `steps` steps (all: `None`), the start checked.
fn prefix(
    call: &str,
    d: &VkDiversityContext,
    start: u32,
    steps: Option<usize>,
) -> Result<Vec<u32>, Fail> {
    if start as usize >= d.n {
        return Err(invalid(
            call,
            format!("start_poem {start} is out of range: N = {}", d.n),
        ));
    }
    if steps == Some(0) {
        return Ok(vec![start]);
    }
    let mut opts = JobOptions {
        mode: d.mode,
        ..Default::default()
    };
    opts.gram.steps = steps;
    opts.scan.steps = steps;
    let mut job = start_job(None, &d.engine, &[start], &opts)?;
    job.run()?;
    Ok(job.sequences_flat()?)
}

/// Free a context from [`vkd_init`] (NULL: nothing); its table stays kept by the context.
///
/// # Safety
/// `dctx` is NULL or a live pointer from [`vkd_init`].
#[no_mangle]
pub unsafe extern "C" fn vkd_destroy(dctx: *mut VkDiversityContext) {
    if !dctx.is_null() {
        // SAFETY: per the contract above.
        drop(unsafe { Box::from_raw(dctx) });
    }
}

/// A batch of `batch_size` sequences, one from each of the first `batch_size` entries of
/// `start_indices` (0-based, distinct), over `num_poems` × `embedding_dim` IEEE halves. Nothing
/// is computed until [`vkd_batch_compute_chunk`]. The engine is the one `auto` resolves to, or
/// [`ENV_MODE`]'s; the table is the context's kept copy when it holds the same. NULL on failure.
///
/// # Safety
/// `ctx` is NULL or live; `embeddings_fp16` is NULL or holds `num_poems × embedding_dim` halves;
/// `start_indices` is NULL or holds `batch_size` values.
#[no_mangle]
pub unsafe extern "C" fn vkd_batch_init(
    ctx: *mut VkComputeContext,
    embeddings_fp16: *const u16,
    num_poems: u32,
    embedding_dim: u32,
    batch_size: u32,
    start_indices: *const u32,
) -> *mut VkDiversityBatchContext {
    let call = "vkd_batch_init";
    guard(call, std::ptr::null_mut(), || {
        // SAFETY: per the contract above.
        let c = unsafe { handle(call, "ctx", ctx)? };
        // SAFETY: per the contract above.
        let halves = unsafe {
            slice_of(
                call,
                "embeddings_fp16",
                embeddings_fp16,
                num_poems,
                embedding_dim,
            )?
        };
        if batch_size == 0 || batch_size > num_poems {
            return Err(invalid(
                call,
                format!("batch_size {batch_size}: 1 to num_poems ({num_poems})"),
            ));
        }
        // SAFETY: per the contract above.
        let starts = unsafe { slice_of(call, "start_indices", start_indices, batch_size, 1)? };
        let mode = mode_from_env(call)?;
        let data: Vec<f32> = halves.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
        let table = Table::new(data, num_poems as usize, embedding_dim as usize)?;
        let engine = c.tables().engine(&c.target, table, Precision::Fp16)?;
        let job = start_job(Some(c), &engine, starts, &batch_options(mode))?;
        Ok(Box::into_raw(Box::new(VkDiversityBatchContext {
            job,
            n: num_poems as usize,
            batch: batch_size as usize,
            next_slot: 1,
        })))
    })
    .0
}

/// Compute slots (steps) `start_slot` … `start_slot + slot_count − 1` of every sequence of the
/// batch, in one submission: slots run 1 … N − 1 and come in order. `tile_size` (0 or ≥ N:
/// untiled) sizes the scan's candidate tiles and is ignored by the gram engine; any value gives
/// the same bits.
///
/// # Safety
/// `b` is NULL or a live pointer from [`vkd_batch_init`].
#[no_mangle]
pub unsafe extern "C" fn vkd_batch_compute_chunk(
    b: *mut VkDiversityBatchContext,
    start_slot: u32,
    slot_count: u32,
    tile_size: u32,
) -> i32 {
    let call = "vkd_batch_compute_chunk";
    guard(call, (), || {
        // SAFETY: per the contract above.
        let b = unsafe { handle_mut(call, "batch", b)? };
        if start_slot != b.next_slot {
            return Err(invalid(
                call,
                format!(
                    "chunks come in order: expected start_slot {}, got {start_slot}",
                    b.next_slot
                ),
            ));
        }
        let last = start_slot as u64 + slot_count as u64 - 1;
        if slot_count == 0 || last > b.n as u64 - 1 {
            return Err(invalid(
                call,
                format!(
                    "slots {start_slot}..{last} must be at least one and end by N - 1 = {}",
                    b.n - 1
                ),
            ));
        }
        // The old library scanned untiled from a tile of N on.
        let (shape, tile) = Shape::from_tile(if tile_size as usize >= b.n {
            0
        } else {
            tile_size
        });
        b.job.set_tiling(shape, tile);
        b.job.step(slot_count as usize)?;
        b.next_slot = start_slot + slot_count;
        Ok(())
    })
    .1
}

/// Copy the batch's sequences into `output_sequences` (`batch_size` × `num_poems` values, row i
/// the sequence of `start_indices[i]`); every slot must have been computed.
///
/// # Safety
/// `b` is NULL or live; `output_sequences` is NULL or has room for `batch_size × num_poems`
/// values.
#[no_mangle]
pub unsafe extern "C" fn vkd_batch_download_sequences(
    b: *mut VkDiversityBatchContext,
    output_sequences: *mut u32,
) -> i32 {
    let call = "vkd_batch_download_sequences";
    guard(call, (), || {
        // SAFETY: per the contract above.
        let b = unsafe { handle_out(call, "batch", b, "output_sequences", output_sequences)? };
        if !b.job.done() {
            return Err(invalid(
                call,
                format!(
                    "the batch has computed {} of {} slots",
                    b.job.steps_done(),
                    b.job.total_steps()
                ),
            ));
        }
        let flat = b.job.sequences_flat()?;
        debug_assert_eq!(flat.len(), b.batch * b.n);
        // SAFETY: per the contract above.
        unsafe { std::ptr::copy_nonoverlapping(flat.as_ptr(), output_sequences, flat.len()) };
        Ok(())
    })
    .1
}

/// The engine a batch runs: `"gram"` or `"scan"` on the device, `"host gram"` or `"host scan"`
/// on the host engine (no GPU; a static string); NULL for a NULL batch.
///
/// # Safety
/// `b` is NULL or a live pointer from [`vkd_batch_init`].
#[no_mangle]
pub unsafe extern "C" fn vkd_batch_engine(b: *const VkDiversityBatchContext) -> *const c_char {
    // SAFETY: per the contract above.
    match unsafe { b.as_ref() } {
        Some(b) if b.job.engine() == "host" => match b.job.mode() {
            Mode::Gram => c"host gram".as_ptr(),
            _ => c"host scan".as_ptr(),
        },
        Some(b) => mode_cstr(b.job.mode()).as_ptr(),
        None => {
            set_error("vkd_batch_engine: batch is NULL");
            std::ptr::null()
        }
    }
}

fn mode_cstr(m: Mode) -> &'static CStr {
    match m {
        Mode::Gram => c"gram",
        Mode::Scan => c"scan",
        Mode::Auto => c"auto",
    }
}

/// The options of the old API's jobs: `mode`, one submission per chunk call (the caller sizes
/// the chunks).
fn batch_options(mode: Mode) -> JobOptions {
    let mut opts = JobOptions {
        mode,
        ..Default::default()
    };
    opts.scan.chunk = 0;
    opts.gram.chunk = 0;
    opts
}

/// Free a batch from [`vkd_batch_init`] (NULL: nothing).
///
/// # Safety
/// `b` is NULL or a live pointer from [`vkd_batch_init`].
#[no_mangle]
pub unsafe extern "C" fn vkd_batch_destroy(b: *mut VkDiversityBatchContext) {
    if !b.is_null() {
        // SAFETY: per the contract above.
        drop(unsafe { Box::from_raw(b) });
    }
}
