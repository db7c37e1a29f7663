//! The judge of the gram engine (see `shaders/gram.comp` and [`super::GramOptions::judge`]):
//! its widest band, the shared memory and loop iterations it adds to a step, and its
//! full-recompute period. Pure functions of the device's capabilities and the options; the plan
//! decides from them whether the judge fits, a job reads its counters back. May touch the gram
//! options and the device's capabilities; nothing else.

use super::{GramOptions, Placement, JUDGE_REFRESH};
use crate::device::Capabilities;

/// The judge's full-recompute period `opts` asks for (0 = only when a band overflows).
pub(super) fn judge_refresh(opts: &GramOptions) -> usize {
    opts.judge_refresh.unwrap_or(JUDGE_REFRESH).min(1 << 24)
}

/// The widest band of uncertain keys re-scored from the running sum (`BAND` in `gram.comp`; a
/// wider one recomputes every key), and the chains each fresh key's dot product is split into
/// (`CHAINS`).
pub(super) const BAND: usize = 64;
const CHAINS: usize = 32;

/// Shared memory `gram.comp` needs with the judge and `round` candidates a round of fresh keys:
/// five reduction arrays of WG entries, the running sum's three vectors, the band's candidates,
/// one round's partial sums.
fn judge_shared_bytes(d: usize, wg: u32, round: usize) -> u64 {
    (20 * wg as usize + 12 * d + 4 * BAND.max(round) + 8 * round * CHAINS + 16) as u64
}

/// Candidates per round of fresh keys: [`BAND`], or fewer where shared memory is small (at
/// least 4; 0 = the judge does not fit).
pub(super) fn judge_round(caps: &Capabilities, d: usize, wg: u32) -> usize {
    [64, 32, 16, 8, 4]
        .into_iter()
        .find(|&r| judge_shared_bytes(d, wg, r) <= caps.shared_memory_bytes as u64)
        .unwrap_or(0)
}

/// Loop iterations the judge adds to a step at most (an uncertain step that gathers a band and
/// recomputes every key in rounds), and the running sum's update.
pub(super) fn judge_loops(
    n: usize,
    d: usize,
    wg: u32,
    placement: Placement,
    rper: usize,
    round: usize,
) -> u64 {
    let wg = wg.max(1) as u64;
    let (n, d, round) = (n as u64, d as u64, round.max(1) as u64);
    let items = match placement {
        Placement::Registers => rper as u64,
        _ => n.div_ceil(wg),
    };
    // One round: each lane's slots (candidate, chain) over D / 32 dimensions, the five levels
    // of the tree, the candidate list and the results.
    let slots = (round * CHAINS as u64).div_ceil(wg);
    let one =
        slots * (d.div_ceil(CHAINS as u64) + 1) + 5 * (slots + 1) + 3 * round.div_ceil(wg) + 3;
    let pick = wg + 2 + wg.trailing_zeros() as u64 + 1;
    // Gather the band, then the band's rounds or a full refresh (flush, rounds, reload, the
    // norms by invocation 0), whichever is longer.
    let rounds = n.div_ceil(round).max((BAND as u64).div_ceil(round));
    let worst = items + 3 * items + rounds * (one + 1) + d + 2 * pick + 4;
    worst + d.div_ceil(wg) + 2
}

/// Shared memory `gram_fixed.comp` needs: three reduction arrays and the lane bases (WG entries
/// each), the float64 running sum (D), the fresh keys' float64 partial sums (2 · max(WG, 32)),
/// the band's window, and a few scalars.
pub(super) fn fixed_shared_bytes(d: usize, wg: u32) -> u64 {
    let wg = wg as usize;
    let slots = wg.max(CHAINS);
    (16 * wg + 8 * d + 16 * slots + 4 * BAND.max(slots / CHAINS) + 32) as u64
}

/// Loop iterations `gram_fixed.comp` adds (once a dispatch, once a step) at most over the step
/// loop itself: the dispatch's refresh of every key; per step a
/// rescale of the keys, the running sum's share of a pick, and an uncertain step that counts its
/// band, takes the lanes' bases serially and scores up to N candidates in windows of
/// [`BAND`] and rounds of WG / 32.
pub(super) fn fixed_loops(
    n: usize,
    d: usize,
    wg: u32,
    placement: Placement,
    rper: usize,
) -> (u64, u64) {
    let wg64 = wg.max(1) as u64;
    let (n, d) = (n as u64, d as u64);
    let items = match placement {
        Placement::Registers => rper as u64,
        _ => n.div_ceil(wg64),
    };
    let rc = (wg64 / CHAINS as u64).max(1);
    let windows = n.div_ceil(BAND as u64);
    // A round: each lane's slots (several below 32 invocations) over D / 32 dimensions, the
    // tree's five levels over them, invocation 0's pass over the round's candidates.
    let slots = (rc * CHAINS as u64).div_ceil(wg64);
    let round = slots * (d.div_ceil(CHAINS as u64) + 1) + 5 * slots + rc + 2;
    let rescale = items + 32;
    // The running sum: each lane loads and adds its dimensions of the pick's row.
    let rebuild = 2 * (d.div_ceil(wg64) + 1);
    let step = rescale
        + rebuild
        + 2 * items
        + wg64
        + windows * (items + (BAND as u64).div_ceil(rc) * round + 2);
    // Once a dispatch: the refresh (every key's float64 dot product) and its shift's search.
    (items * (d + 2) + 32, step)
}
