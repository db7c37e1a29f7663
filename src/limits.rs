//! Driver limits that fail silently, measured on the device itself.
//! It may touch the device context, the compiled shaders and command submission; no engine.
//!
//! Mesa's llvmpipe (lavapipe, the CPU device CI runs on) gives every shader invocation one
//! counter of 65,535 loop iterations for all its loops together; once it is spent, each loop
//! exits after its current iteration — no error, no validation message, just a shorter loop.
//! A k-NN selection whose per-lane loop over table rows ran past it returned wrong neighbours
//! from about 1,400 rows on. [`crate::device::Capabilities::loop_limit`] records the cap,
//! [`crate::device::loop_budget`] is what a planner may spend, and [`measure_loop_iterations`]
//! lets a test check both against the driver in hand.

use crate::device::{Buffer, Context};
use crate::error::Result;
use crate::spirv;
use crate::submit::{bind, Set, Submitter};
use crate::table::Precision;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ProbePush {
    n: u32,
    seed: u32,
}

/// Runs one invocation of a loop of `n` iterations (`shaders/loop_probe.comp`) and returns how
/// many it really ran, with the loop's hash (each iteration feeds the next, so the compiler
/// cannot fold the loop away): `n` on a device without a cap, the cap on one with.
pub fn measure_loop_iterations(ctx: &Context, n: u32) -> Result<(u32, u32)> {
    let pipe = ctx.pipeline_for::<ProbePush>(&spirv::LOOP_PROBE, Precision::Fp32, &[])?;
    let out = Buffer::storage(ctx, "loop probe", 16)?;
    let set = Set::new(ctx, &[(0, &out)], &[])?;
    let dev = ctx.device().clone();
    let push = ProbePush { n, seed: 12345 };
    Submitter::new(ctx)?.run("loop probe", |cb| unsafe {
        bind(&dev, cb, &pipe, set.set, bytemuck::bytes_of(&push));
        dev.cmd_dispatch(cb, 1, 1, 1);
    })?;
    let b = ctx.download(&out, 0, 8)?;
    let word = |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    drop(set);
    Ok((word(0), word(1)))
}

/// The hash `measure_loop_iterations` computes after `n` iterations, on the host.
pub fn loop_probe_hash(n: u32) -> u32 {
    (0..n).fold(12345u32, |h, _| {
        h.wrapping_mul(1_664_525).wrapping_add(1_013_904_223)
    })
}
