//! The native CPU engine: diversity sequences computed on the host's cores, for machines whose
//! best Vulkan device is a CPU (lavapipe) — the shaders there run through llvmpipe, several
//! times slower than this — or that have no GPU at all. A peer of the Vulkan engines under the
//! engine core ([`crate::engine`]), with the same options (precision, centring through the
//! table, top_k, starts, chunks, resume) and the same outputs; it computes sequences only
//! (rankings and k-NN run on a Vulkan device).
//!
//! * `plan.rs` — the host memory budget, the `auto` rule on the host (gram where G fits, else
//!   the scan), batch limits and the machine's name; pure, unit-tested.
//! * `matrix.rs` — the table as the devices see it and G, built by a float64 GEMM on every core.
//! * `kernel.rs` — the vectorised passes (one per instruction set, chosen at run time).
//! * `job.rs` — a batch of sequences: the gram recurrence with a certificate at every step (the
//!   error bound is derived there), or the float64 scan.
//!
//! It may touch the host table, [`crate::batch`]'s start and prefix checks, the mode vocabulary
//! and the thread pool; nothing of Vulkan.

mod job;
mod kernel;
mod matrix;
mod plan;

pub use job::{key_bound, HostJob, HostOptions};
pub use kernel::isa;
pub use matrix::{HostGram, HostTable};
pub use plan::{
    cpu_name, gram_bytes, gram_sequence_bytes, gram_unfit, host_memory_budget, max_batch, mode_for,
    scan_sequence_bytes, threads, ENV_HOST_MEMORY, HOST_BUDGET_FRACTION,
};
