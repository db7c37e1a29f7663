//! The judge of the gram engine (see `shaders/gram.comp` and [`super::GramOptions::judge`]):
//! how much shared memory and how many loop iterations it adds to a step, whether it fits a
//! device, its full-recompute period, and its counters read back from a job's state. The
//! sizing is pure; the readouts download from the job's own state buffer only.

use super::plan::{gram_loop_iterations, state_floats};
use super::{GramJob, GramOptions, Placement, JUDGE_REFRESH};
use crate::device::Capabilities;
use crate::error::Result;

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

/// Whether the judge fits: the running sum fits shared memory next to the reduction's buffers,
/// and a step with a recompute fits the device's loop budget.
pub(super) fn judge_fits(
    caps: &Capabilities,
    n: usize,
    d: usize,
    wg: u32,
    placement: Placement,
    rper: usize,
) -> bool {
    let (fixed, per_step) = gram_loop_iterations(n, wg, rper, placement, caps.subgroup_size);
    let round = judge_round(caps, d, wg);
    round > 0
        && fixed + per_step + judge_loops(n, d, wg, placement, rper, round)
            <= crate::device::loop_budget(caps)
}

impl GramJob {
    /// Per sequence, how many times the judge recomputed every key so far (0s without it).
    pub fn refreshes(&self) -> Result<Vec<u32>> {
        self.judge_slot(3)
    }
    /// Per sequence, how many uncertain steps the judge settled by re-scoring only the band of
    /// keys within twice their bound of the best (0s without it).
    pub fn band_rescores(&self) -> Result<Vec<u32>> {
        self.judge_slot(5)
    }
    /// Per sequence, the largest error bound of the fresh keys (E_F in `shaders/gram.comp`, key
    /// units: c · e_x / |e_x|) at a full recompute so far (0 without one).
    pub fn fresh_error_max(&self) -> Result<Vec<f32>> {
        self.judge_floats(6)
    }
    fn judge_slot(&self, slot: usize) -> Result<Vec<u32>> {
        Ok(self
            .judge_floats(slot)?
            .into_iter()
            .map(|v| v as u32)
            .collect())
    }
    fn judge_floats(&self, slot: usize) -> Result<Vec<f32>> {
        if !self.judge {
            // Without the judge these slots are never written.
            return Ok(vec![0.0; self.batch.starts().len()]);
        }
        let (n, d) = (self.gram.table.n(), self.gram.table.d());
        let stride = state_floats(n, d);
        let regions: Vec<(u64, u64)> = (0..self.batch.starts().len())
            .map(|i| (((i * stride + 2 * n + 3 * d + slot) * 4) as u64, 4))
            .collect();
        let bytes = self
            .gram
            .table
            .context()
            .download_regions(&self._state, &regions)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}
