//! The gram engine's plan, computed before any Vulkan object exists: from the device's
//! [`Capabilities`], the table's N × D and the [`GramOptions`], the arithmetic (compensated or
//! plain key sums, the judge or not), the workgroup size, where the state lives and the
//! registers a lane holds, the loop iterations a dispatch runs, the largest batch, the bytes of
//! G and of a batch, and the `auto` rule ([`mode_for`]). Pure functions of their inputs, tested
//! without a device. May touch the gram options, the judge's arithmetic, the device's capabilities,
//! the mode and the crate's errors; no Vulkan object.

use super::judge::{fixed_loops, fixed_shared_bytes, judge_loops, judge_refresh, judge_round};
use super::{Arithmetic, GramOptions, Placement, BUDGET_FRACTION, MAX_SLABS};
use crate::device::Capabilities;
use crate::error::{Error, Result};
use crate::mode::Mode;

/// Register state per lane, items per lane when compensated (hi, lo and the loaded row value:
/// three registers each; plain sums take two, so 1.5× the items).
const GPU_REGISTER_ITEMS: usize = 36;
/// On CPU devices (lavapipe) "registers" are stack arrays: allow more per lane.
const CPU_REGISTER_ITEMS: usize = 512;
/// Items a lane the register placement may hold on a GPU beyond what its register file keeps
/// (the rest spills; still faster than device memory where measured).
const MAX_SPILL_ITEMS: usize = 32;

/// The arithmetic a job with `opts` runs on `caps` for an N × D table: what `opts` names, and for
/// what it leaves `None`, the judge at every N (a bound on every pick that does not grow with N)
/// with compensated sums where their register state fits the register file and the table is
/// not [`GramOptions::centered`] (or on CPU devices), else plain sums (on an H200 at N =
/// 31,102, 31 compensated items a lane spill; plain sums with the judge ran faster than
/// compensated sums without it; on centred tables they were faster with the judge at every
/// size measured: BENCHMARKS.md). Where the judge does
/// not fit the device (its running sum takes 12·D bytes of shared memory) or is turned off,
/// compensated sums without it.
pub fn arithmetic(caps: &Capabilities, n: usize, d: usize, opts: &GramOptions) -> Arithmetic {
    let cpu = crate::device::is_cpu_device(caps);
    let max_wg = caps.max_workgroup_invocations.min(1024) as usize;
    // The test `plan` uses for a register state held without spilling, compensated.
    let fits = [256usize, 512, 1024]
        .into_iter()
        .filter(|&w| w <= max_wg)
        .any(|w| {
            let per = n.div_ceil(w);
            per <= GPU_REGISTER_ITEMS && w * (3 * per + 24) <= 65536
        });
    let big = !cpu && !fits;
    let wanted = opts.judge.unwrap_or(true);
    // Plain sums only to go with the judge (without it, compensated keys stay closer): past
    // the register file, or on a centred table (there plain sums' bound, which grows with the
    // running sum's norm, stays small: faster with the judge on every centred table measured).
    let plain = big || (!cpu && opts.centered);
    let compensated = opts.compensated.unwrap_or(!plain || !wanted);
    let judge = wanted
        && plan_for(caps, n, compensated, true, opts)
            .map(|lanes| judge_fits(caps, n, d, lanes))
            .unwrap_or(false);
    // Unnamed sums are plain only with a judge that runs.
    let compensated = compensated || (!judge && opts.compensated.is_none());
    Arithmetic { compensated, judge }
}

/// Whether a gram job with `opts` runs on fixed-point keys (`shaders/gram_fixed.comp`: integer
/// key sums over an int32 G from float64 dot products, every step certified, uncertain steps
/// settled with float64 fresh keys) on `caps` for an N × D table: the default wherever the
/// device has float64 in shaders and `opts` names no float arithmetic (`compensated`, or
/// `judge: Some(false)`), where it fits the device (its shared memory, the loop cap). Measured
/// on an H200 against the float sums with the judge it replaces: 1.3–1.5× faster on centred
/// tables, 2.8× on an uncentred one, with a bound 10⁴–10⁵× tighter (BENCHMARKS.md). Else the
/// float arithmetic of [`arithmetic`].
pub fn fixed_point(caps: &Capabilities, n: usize, d: usize, opts: &GramOptions) -> bool {
    caps.float64
        && opts.compensated.is_none()
        && opts.judge != Some(false)
        && plan_fixed(caps, n, opts).is_ok_and(|lanes| fixed_fits(caps, n, d, lanes))
}

/// Workgroup size, placement and keys a lane for fixed-point keys: the smallest of 256, 512 and
/// 1,024 invocations that holds N in registers at up to 64 keys a lane on GPUs (measured fastest
/// on an H200: 256 for 8,359 and 14,943 rows, 512 for 31,102), 64 on CPU devices; `opts` may
/// name them. In registers the keys a lane are rounded up to a multiple of 4 (runs of four
/// adjacent items, see `shaders/gram_fixed.comp`).
pub(super) fn plan_fixed(caps: &Capabilities, n: usize, opts: &GramOptions) -> Result<Lanes> {
    let max_wg = caps.max_workgroup_invocations.min(1024);
    let wg = opts.workgroup_size.unwrap_or_else(|| {
        if crate::device::is_cpu_device(caps) {
            64.min(max_wg)
        } else {
            [256, 512, 1024]
                .into_iter()
                .filter(|&w| w <= max_wg)
                .find(|&w| n.div_ceil(w as usize) <= 64)
                .unwrap_or(1024.min(max_wg))
        }
    });
    let named = GramOptions {
        workgroup_size: Some(wg),
        ..opts.clone()
    };
    // In registers a lane holds runs of 4 adjacent items (one 16-byte load of a Gram row
    // each): its keys are a multiple of 4.
    let (wg, placement, rper) = plan_for(caps, n, false, true, &named)?;
    Ok(match placement {
        Placement::Registers => (wg, placement, rper.next_multiple_of(4)),
        _ => (wg, placement, rper),
    })
}

/// A gram dispatch's lanes: the workgroup size, where the keys live and the keys a lane.
pub(super) type Lanes = (u32, Placement, usize);

/// Whether fixed-point keys fit: D ≤ 65,536, their shared memory, and a step with the widest
/// settling within the device's loop budget.
pub(super) fn fixed_fits(caps: &Capabilities, n: usize, d: usize, lanes: Lanes) -> bool {
    let (wg, placement, rper) = lanes;
    let (fixed, per_step) = gram_loop_iterations(n, wg, rper, placement, caps.subgroup_size);
    // D ≤ 65,536 keeps G's entries within 0.51 units (gram_matrix.comp's FIXED bound).
    d <= 65_536 && fixed_shared_bytes(d, wg) <= caps.shared_memory_bytes as u64 && {
        let (once, step) = fixed_loops(n, d, wg, placement, rper);
        fixed + once + per_step + step <= crate::device::loop_budget(caps)
    }
}

/// Entries a row of G takes on the device: N rounded up to a multiple of 4, so that every row
/// starts 16-byte aligned and the fixed-point engine loads its values four at a time (the
/// padding entries are 0 and belong to no item).
pub fn row_stride(n: usize) -> usize {
    // Saturates (no device holds such an N; gram_bytes then saturates too).
    n.checked_next_multiple_of(4).unwrap_or(usize::MAX)
}

/// Bytes of G for N items: N rows of [`row_stride`] 4-byte entries.
pub fn gram_bytes(n: usize) -> u64 {
    // Saturates: past 2^64 bytes no device holds it anyway (2^31 items wrapped to 0 before).
    (n as u64)
        .saturating_mul(row_stride(n) as u64)
        .saturating_mul(4)
}

/// Bytes of one batch's device state and output: (hi, lo) per candidate, the sequences, starts.
pub fn batch_bytes(n: usize, batch: usize, steps: usize) -> u64 {
    (batch as u64) * ((n as u64) * 8 + (steps as u64 + 1) * 4 + 4)
}

/// The arithmetic a gram job with `opts` runs on `caps` for an N × D table, as written in a
/// cache's metadata (`summation`): `"compensated"` or `"plain"` key sums, `"; G dot2"` (G's
/// entries from a compensated dot product, since the judge was added) and `"; judge2"` when the
/// judge runs (`"; judge"` was the first judge, whose fresh keys were plain dot products),
/// followed by `" refresh R"` when it recomputes every key each R steps. Caches written before
/// G's entries were compensated say only `"compensated"` or `"plain"`, so old and new caches
/// (other bits at near-ties) are never mixed silently.
pub fn summation(caps: &Capabilities, n: usize, d: usize, opts: &GramOptions) -> Result<String> {
    if fixed_point(caps, n, d, opts) {
        return Ok("fixed; G dot64".into());
    }
    let arith = arithmetic(caps, n, d, opts);
    // The same refusals as a job (a placement that cannot hold N).
    plan_for(caps, n, arith.compensated, arith.judge, opts)?;
    let judge = arith.judge;
    let refresh = judge_refresh(opts);
    // "judge3": plain sums whose bound takes max |key| through |c| (other steps uncertain than
    // judge2's maximum over the keys, so other bits at near-ties).
    let version = if !arith.compensated && opts.judge_kmax_c.unwrap_or(true) {
        3
    } else {
        2
    };
    Ok(format!(
        "{}; G dot2{}",
        if arith.compensated {
            "compensated"
        } else {
            "plain"
        },
        match (judge, refresh) {
            (false, _) => String::new(),
            (true, 0) => format!("; judge{version}"),
            (true, r) => format!("; judge{version} refresh {r}"),
        }
    ))
}

/// Floats of one sequence's state in `gram.comp`: (hi, lo) per candidate, the judge's running
/// sum (c_hi, c_lo) and its rounding record r per dimension, and sixteen scalars.
pub(super) fn state_floats(n: usize, d: usize) -> usize {
    2 * n + 3 * d + 16
}

/// Whether the judge fits: the running sum fits shared memory next to the reduction's buffers,
/// and a step with a recompute fits the device's loop budget.
pub(super) fn judge_fits(caps: &Capabilities, n: usize, d: usize, lanes: Lanes) -> bool {
    let (wg, placement, rper) = lanes;
    let (fixed, per_step) = gram_loop_iterations(n, wg, rper, placement, caps.subgroup_size);
    let round = judge_round(caps, d, wg);
    round > 0
        && fixed + per_step + judge_loops(n, d, wg, placement, rper, round)
            <= crate::device::loop_budget(caps)
}

/// Rows of G per slab on `caps`: whole rows of at most `maxStorageBufferRange` bytes.
pub(super) fn slab_rows(caps: &Capabilities, n: usize) -> usize {
    ((caps.max_buffer_range / (4 * row_stride(n.max(1)) as u64)) as usize).min(n.max(1))
}

/// Why gram mode cannot run an N × D table on `caps` (None: it can, with a batch of 1 at least):
/// G's size against the memory budget and the slab limit.
pub fn gram_unfit(
    caps: &Capabilities,
    n: usize,
    d: usize,
    bytes_per_value: usize,
) -> Option<String> {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let rows = slab_rows(caps, n);
    let max_slabs = if caps.buffer_array_indexing {
        MAX_SLABS
    } else {
        1
    };
    if rows == 0 || n.div_ceil(rows) > max_slabs {
        return Some(format!(
            "G for N = {n} needs {:.0} MiB in slabs of whole rows of at most {:.0} MiB \
             (maxStorageBufferRange), at most {max_slabs} slabs on {}",
            mib(gram_bytes(n)),
            mib(caps.max_buffer_range),
            caps.name
        ));
    }
    let need = gram_bytes(n) + (n * d * bytes_per_value) as u64 + batch_bytes(n, 1, n);
    let budget = (caps.memory_budget_bytes as f64 * BUDGET_FRACTION) as u64;
    if need > budget {
        return Some(format!(
            "gram mode for N = {n} needs {:.0} MiB of device memory (G, N rows of N rounded up to 4 \
             entries of 4 bytes, is {:.0} MiB); \
             {} has {:.0} MiB available",
            mib(need),
            mib(gram_bytes(n)),
            caps.name,
            mib(budget)
        ));
    }
    None
}

/// The `auto` rule ([`Mode::resolve`]) on a device: gram when [`gram_unfit`] finds nothing.
pub fn mode_for(
    caps: &Capabilities,
    mode: Mode,
    n: usize,
    d: usize,
    bytes_per_value: usize,
) -> Mode {
    mode.resolve(mode != Mode::Auto || gram_unfit(caps, n, d, bytes_per_value).is_none())
}

/// The largest batch a gram job may run on `caps` for N items and `steps` steps, next to a G
/// already allocated: state and output within `maxStorageBufferRange` and the memory left, the
/// workgroups within `maxComputeWorkGroupCount[0]`. At least 1.
pub fn max_batch(
    caps: &Capabilities,
    n: usize,
    d: usize,
    bytes_per_value: usize,
    steps: usize,
) -> usize {
    let per_seq = (batch_bytes(n, 1, steps) + (3 * d as u64 + 16) * 4).max(1);
    let by_range = caps.max_buffer_range
        / ((state_floats(n, d) as u64 * 4)
            .max((steps as u64 + 1) * 4)
            .max(1));
    let used = gram_bytes(n) + (n * d * bytes_per_value) as u64;
    let budget = (caps.memory_budget_bytes as f64 * BUDGET_FRACTION) as u64;
    let by_memory = budget.saturating_sub(used) / per_seq;
    (by_range.min(by_memory) as usize)
        .min(caps.max_workgroup_count as usize)
        .min(n.max(1))
        .max(1)
}

/// Loop iterations one invocation of `gram.comp` runs, counted from above: (once a dispatch,
/// once a step). A step loops over the lane's items (`rper` registers, or N / 4·WG blocks of
/// four in memory) and reduces over the subgroups (WG / SG) or the workgroup (log₂ WG);
/// a dispatch loads and stores the register state, or clears the memory state once.
pub(super) fn gram_loop_iterations(
    n: usize,
    wg: u32,
    rper: usize,
    placement: Placement,
    sg: u32,
) -> (u64, u64) {
    let wg = wg.max(1) as u64;
    let pick = wg / sg.max(1) as u64 + 2 + wg.trailing_zeros() as u64 + 1;
    match placement {
        Placement::Registers => (2 * rper as u64 + 2, 2 * rper as u64 + 2 + pick),
        _ => (
            (n as u64).div_ceil(wg) + 2,
            (n as u64).div_ceil(4 * wg) * 9 + 2 + pick,
        ),
    }
}

/// Workgroup size, placement and registers per lane for N on `caps` with compensated or plain
/// key sums.
pub(super) fn plan_for(
    caps: &Capabilities,
    n: usize,
    compensated: bool,
    judge: bool,
    opts: &GramOptions,
) -> Result<Lanes> {
    let cpu = crate::device::is_cpu_device(caps);
    // Registers per item: hi, the loaded row value and, compensated, lo.
    let regs = if compensated { 3 } else { 2 };
    let max_items = if cpu {
        CPU_REGISTER_ITEMS
    } else {
        GPU_REGISTER_ITEMS * 3 / regs
    };
    let max_wg = caps.max_workgroup_invocations.min(1024);
    // Registers while the register file holds the state, and on GPUs up to 32 items a lane even
    // past it: measured on an H200 at N = 31,102 (31 items a lane at 1,024 invocations), the
    // spilling register placement still ran 2.0× faster than device memory with compensated
    // sums and 1.4× with plain ones (BENCHMARKS.md, 2026-11-30). Larger N is unmeasured.
    let fits = |wg: u32| {
        let per = n.div_ceil(wg as usize);
        per <= max_items
            && (cpu || wg as usize * (regs * per + 24) <= 65536 || per <= MAX_SPILL_ITEMS)
    };
    // Plain sums with the judge hold up to 64 items a lane in registers (measured faster there
    // than the register-file test above allows).
    let judged_plain_fits = |wg: u32| judge && !compensated && n.div_ceil(wg as usize) <= 64;
    let wg = match opts.workgroup_size {
        Some(w) => {
            if !w.is_power_of_two() || w > max_wg || w < 1 {
                return Err(Error::Invalid(format!(
                    "workgroup size {w}: a power of two up to {max_wg}"
                )));
            }
            w
        }
        None if cpu => 64.min(max_wg),
        // Plain sums with the judge: 512 invocations up to 64 items a lane (at N = 31,102 on an
        // H200, 61 a lane ran 13% faster than 31 at 1,024, where 64 registers spill; without
        // the judge 1,024 was faster: BENCHMARKS.md).
        None if 512 <= max_wg && !fits(512) && judged_plain_fits(512) => 512,
        // Measured on an H200 (BENCHMARKS.md): both summations ran fastest at 256 invocations
        // for N = 8,359 and at 512 or 1,024 for 14,943 (256 does not fit there).
        None => [256, 512, 1024]
            .into_iter()
            .filter(|&w| w <= max_wg)
            .find(|&w| fits(w))
            .unwrap_or(512.min(max_wg)),
    };
    let placement = match opts.placement {
        Placement::Auto if fits(wg) || judged_plain_fits(wg) => Placement::Registers,
        Placement::Auto => Placement::Memory,
        Placement::Registers if n.div_ceil(wg as usize) > 4 * max_items => {
            return Err(Error::Invalid(format!(
                "register state for N = {n} with {wg} invocations needs {} items per invocation; \
                 at most {} (use placement memory)",
                n.div_ceil(wg as usize),
                4 * max_items
            )))
        }
        p => p,
    };
    let rper = match placement {
        Placement::Registers => n.div_ceil(wg as usize).max(1),
        _ => 1,
    };
    Ok((wg, placement, rper))
}

/// Row loads a lane of the register placement issues before using them: every item's at once by
/// default without the judge, groups of 8 with it; `opts.loads` sets them, for benchmarks. On an
/// H200 at N = 31,102 a build that grouped them without the judge (with two other changes) gave
/// other bits from one run to the next, cause not isolated; with the judge, groups of 8 ran 1.2×
/// faster and gave the same bits run to run (BENCHMARKS.md, 2026-11-30).
pub(super) fn loads_in_flight(rper: usize, judge: bool, opts: &GramOptions) -> usize {
    let rper = rper.max(1);
    match opts.loads {
        0 if judge => 8.min(rper),
        0 => rper,
        k => k.min(rper),
    }
}

/// Row values a lane loads before using them, for fixed-point keys in registers (LOADS / 4
/// ivec4 loads): 32 at 512 invocations, 8 otherwise; `opts.loads` sets them, for benchmarks.
/// Measured with ivec4 loads on an H100 (BENCHMARKS.md, 2026-12-06): at N = 31,102 (512
/// invocations, 64 keys a lane) 32 ran 5.3% faster than 16; at 256 invocations on the fortunes
/// (60 keys a lane) 8 ran 3–9% faster than 4, 12, 16 or 20, and on the peer table (36) 4, 8 and
/// 16 tied. (With single loads on an H200, 2026-12-02: 16 at 512 ran 6% faster than 8.)
pub(super) fn fixed_loads(wg: u32, rper: usize, opts: &GramOptions) -> usize {
    match opts.loads {
        0 if wg == 512 => 32.min(rper.max(1)),
        _ => loads_in_flight(rper, true, opts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_keys_row_loads_in_flight() {
        let d = GramOptions::default();
        // 32 at 512 invocations (never more than the keys a lane), 8 otherwise; named loads win.
        assert_eq!(fixed_loads(512, 64, &d), 32);
        assert_eq!(fixed_loads(512, 5, &d), 5);
        assert_eq!(fixed_loads(256, 59, &d), 8);
        assert_eq!(fixed_loads(1024, 31, &d), 8);
        assert_eq!(fixed_loads(64, 3, &d), 3);
        let named = GramOptions {
            loads: 4,
            ..GramOptions::default()
        };
        assert_eq!(fixed_loads(512, 61, &named), 4);
        assert_eq!(fixed_loads(256, 59, &named), 4);
    }

    fn arith(gpu: bool, n: usize, opts: &GramOptions) -> (bool, bool) {
        arith_d(gpu, n, 384, opts)
    }

    fn arith_d(gpu: bool, n: usize, d: usize, opts: &GramOptions) -> (bool, bool) {
        let mut caps = crate::device::test_caps(32, None);
        caps.device_type = if gpu { "discrete GPU" } else { "CPU" }.into();
        caps.shared_memory_bytes = 48 << 10;
        let a = arithmetic(&caps, n, d, opts);
        (a.compensated, a.judge)
    }

    /// The default arithmetic: the judge at every N where it fits, with compensated sums while
    /// their register state fits the register file (N ≤ 17,408 at 512 invocations) or on CPU
    /// devices, plain sums past it on GPUs; what the options name wins.
    #[test]
    fn default_arithmetic_by_size_and_device() {
        let d = GramOptions::default();
        for n in [1, 8_359, 14_943, 17_408] {
            assert_eq!(arith(true, n, &d), (true, true), "N = {n}");
            assert_eq!(arith(false, n, &d), (true, true), "CPU, N = {n}");
        }
        for n in [17_409, 31_102, 100_000] {
            assert_eq!(arith(true, n, &d), (false, true), "N = {n}");
            assert_eq!(arith(false, n, &d), (true, true), "CPU, N = {n}");
        }
        // The default options with `compensated` and `judge` named.
        let named = |compensated, judge| GramOptions {
            compensated,
            judge,
            ..GramOptions::default()
        };
        let comp = named(Some(true), None);
        assert_eq!(arith(true, 31_102, &comp), (true, true));
        let plain = named(Some(false), None);
        assert_eq!(arith(true, 8_359, &plain), (false, true));
        assert_eq!(arith(true, 31_102, &plain), (false, true));
        let no_judge = named(None, Some(false));
        assert_eq!(arith(true, 31_102, &no_judge), (true, false));
        let judge = named(None, Some(true));
        assert_eq!(arith(true, 8_359, &judge), (true, true));
        // A centred table: plain sums with the judge on a GPU at every N, compensated on a CPU
        // device, and what the options name still wins.
        let centered = |compensated, judge| GramOptions {
            centered: true,
            ..named(compensated, judge)
        };
        for n in [1, 8_359, 14_943, 31_102] {
            assert_eq!(
                arith(true, n, &centered(None, None)),
                (false, true),
                "N = {n}"
            );
            assert_eq!(
                arith(false, n, &centered(None, None)),
                (true, true),
                "CPU, N = {n}"
            );
        }
        assert_eq!(
            arith(true, 8_359, &centered(Some(true), None)),
            (true, true)
        );
        assert_eq!(
            arith(true, 8_359, &centered(None, Some(false))),
            (true, false)
        );
        // Where the judge's running sum does not fit shared memory (D = 8,192), the default
        // past the register file stays compensated without it.
        assert_eq!(arith_d(true, 31_102, 8_192, &d), (true, false));
        assert_eq!(arith_d(true, 31_102, 8_192, &judge), (true, false));
        // The summation names the refresh period the judge runs with (a device without float64
        // in shaders: the float arithmetic is the default there).
        let mut caps = crate::device::test_caps(32, None);
        caps.device_type = "discrete GPU".into();
        caps.shared_memory_bytes = 48 << 10;
        caps.memory_budget_bytes = 64 << 30;
        caps.float64 = false;
        let keys = GramOptions {
            judge_kmax_c: Some(false),
            ..GramOptions::default()
        };
        for (n, dim, o, want) in [
            (31_102, 384, &d, "plain; G dot2; judge3 refresh 4096"),
            (8_359, 768, &d, "compensated; G dot2; judge2 refresh 4096"),
            (31_102, 384, &keys, "plain; G dot2; judge2 refresh 4096"),
            (8_359, 768, &no_judge, "compensated; G dot2"),
            (
                14_943,
                384,
                &centered(None, None),
                "plain; G dot2; judge3 refresh 4096",
            ),
        ] {
            assert_eq!(summation(&caps, n, dim, o).unwrap(), want, "N = {n}");
        }
        // Plain sums with the judge take 512 invocations up to 64 items a lane (the
        // compensated register file test picks 1,024 there).
        let (wg, placement, rper) = plan_for(&caps, 31_102, false, true, &d).unwrap();
        assert_eq!((wg, placement, rper), (512, Placement::Registers, 61));
        assert_eq!(plan_for(&caps, 31_102, false, false, &d).unwrap().0, 1024);
        assert_eq!(plan_for(&caps, 8_359, false, true, &d).unwrap().0, 256);
    }

    /// Rows of G take N rounded up to a multiple of 4 entries: G's bytes and a slab's rows
    /// count them (a slab of whole padded rows stays within maxStorageBufferRange).
    #[test]
    fn rows_of_g_are_padded_to_four_entries() {
        for (n, stride) in [(1, 4), (4, 4), (5, 8), (8_359, 8_360), (31_102, 31_104)] {
            assert_eq!(row_stride(n), stride, "N = {n}");
            assert_eq!(gram_bytes(n), (n * stride * 4) as u64, "N = {n}");
        }
        let mut caps = crate::device::test_caps(32, None);
        caps.max_buffer_range = 1 << 30;
        let rows = slab_rows(&caps, 31_102);
        assert!(rows < 31_102);
        assert!(rows as u64 * 31_104 * 4 <= caps.max_buffer_range);
        assert!((rows + 1) as u64 * 31_104 * 4 > caps.max_buffer_range);
        // Past 2^64 bytes the size saturates instead of wrapping.
        assert_eq!(gram_bytes(usize::MAX), u64::MAX);
    }

    /// Fixed-point keys: the default wherever the device has float64 and they fit, unless the
    /// options name float sums; the workgroup holds up to 64 keys a lane.
    #[test]
    fn fixed_point_keys_by_device_options_and_size() {
        let mut caps = crate::device::test_caps(32, None);
        caps.device_type = "discrete GPU".into();
        caps.shared_memory_bytes = 48 << 10;
        caps.memory_budget_bytes = 64 << 30;
        caps.float64 = true;
        let d = GramOptions::default();
        // In registers the keys a lane come in runs of 4 (33 → 36, 59 → 60, 61 → 64).
        for (n, wg, placement, keys) in [
            (8_359, 256, Placement::Registers, 36),
            (14_943, 256, Placement::Registers, 60),
            (31_102, 512, Placement::Registers, 64),
            (100_000, 1024, Placement::Memory, 1),
        ] {
            assert!(fixed_point(&caps, n, 384, &d), "N = {n}");
            assert_eq!(summation(&caps, n, 384, &d).unwrap(), "fixed; G dot64");
            let (w, p, k) = plan_fixed(&caps, n, &d).unwrap();
            assert_eq!((w, p, k), (wg, placement, keys), "N = {n}");
        }
        // Options that name float sums, a device without float64 or too little shared memory
        // (D = 8,192: 64 KiB of running sum): the float arithmetic. Any workgroup size runs them.
        for o in [
            GramOptions {
                compensated: Some(true),
                ..d.clone()
            },
            GramOptions {
                compensated: Some(false),
                ..d.clone()
            },
            GramOptions {
                judge: Some(false),
                ..d.clone()
            },
        ] {
            assert!(!fixed_point(&caps, 8_359, 384, &o), "{o:?}");
            assert!(summation(&caps, 8_359, 384, &o).unwrap().contains("G dot2"));
        }
        assert!(fixed_point(
            &caps,
            8_359,
            384,
            &GramOptions {
                judge: Some(true),
                centered: true,
                ..d.clone()
            }
        ));
        assert!(!fixed_point(&caps, 31_102, 8_192, &d));
        for wg in [1u32, 16, 32, 64] {
            let o = GramOptions {
                workgroup_size: Some(wg),
                ..d.clone()
            };
            assert!(fixed_point(&caps, 8_359, 384, &o), "wg {wg}");
        }
        let mut no64 = caps.clone();
        no64.float64 = false;
        assert!(!fixed_point(&no64, 8_359, 384, &d));
        // A CPU device: 64 invocations, within the loop cap at test sizes, not at 31,102 rows.
        let mut cpu = caps.clone();
        cpu.device_type = "CPU".into();
        assert!(fixed_point(&cpu, 2_048, 384, &d));
        assert_eq!(plan_fixed(&cpu, 2_048, &d).unwrap().0, 64);
        assert_eq!(
            fixed_point(&cpu, 31_102, 384, &d),
            crate::device::loop_budget(&cpu) == u64::MAX
        );
    }
}
