//! The host engine's sizing, pure and unit-tested: the host memory budget, what G and a batch's
//! state cost, the `auto` rule on the host (gram when G fits, else the scan) and the largest
//! batch. It also names the machine (the CPU's model) for reports. It may touch /proc for the
//! memory size and the CPU's name, nothing else.

use crate::mode::Mode;

/// Fraction of the host's memory (`MemTotal`) the host engine plans to use: G, the table and
/// the state of the sequences in flight.
pub const HOST_BUDGET_FRACTION: f64 = 0.6;

/// Environment variable overriding the host engine's memory budget: bytes, or a size with a
/// unit K, M or G as `--host-memory` takes it (for tests of the limits, and for machines shared
/// with other work); anything else is refused ([`crate::settings`]).
pub const ENV_HOST_MEMORY: &str = "DIVERSITY_HOST_MEMORY";

/// The host engine's memory budget in bytes: [`ENV_HOST_MEMORY`] when set, else
/// [`HOST_BUDGET_FRACTION`] of the host's memory (4 GiB where it cannot be read).
pub fn host_memory_budget() -> u64 {
    // A value that does not parse was refused by `settings::check` when the context or the
    // host table was made.
    if let Ok(Some(b)) = crate::settings::bytes(ENV_HOST_MEMORY, false) {
        return b;
    }
    match crate::device::host_memory_bytes() {
        Some(total) => (total as f64 * HOST_BUDGET_FRACTION) as u64,
        None => 4 << 30,
    }
}

/// Bytes of G for N items (N² float32).
pub fn gram_bytes(n: usize) -> u64 {
    (n as u64) * (n as u64) * 4
}

/// Bytes one sequence of a gram job holds: its keys (N float64), its running sum (D float64)
/// and its entries.
pub fn gram_sequence_bytes(n: usize, d: usize, steps: usize) -> u64 {
    (n as u64) * 8 + (d as u64) * 8 + (steps as u64 + 1) * 4 + 64
}

/// Bytes one sequence of a scan job holds: its running sum, its chosen flags and its entries.
pub fn scan_sequence_bytes(n: usize, d: usize, steps: usize) -> u64 {
    (n as u64) + (d as u64) * 8 + (steps as u64 + 1) * 4 + 64
}

/// Why G for an N × D table does not fit the host budget `budget` (with the table and one
/// sequence's state beside it), or `None` when it fits.
pub fn gram_unfit(n: usize, d: usize, budget: u64) -> Option<String> {
    let need = gram_bytes(n) + (n as u64) * (d as u64) * 12 + gram_sequence_bytes(n, d, n);
    (need > budget).then(|| {
        format!(
            "G for N = {n} needs {} MiB with the table and one sequence; the host engine's memory \
             budget is {} MiB",
            need >> 20,
            budget >> 20
        )
    })
}

/// The engine `mode` resolves to on the host for an N × D table within `budget` bytes: the
/// `auto` rule ([`Mode::resolve`]) with the host's fit.
pub fn mode_for(mode: Mode, n: usize, d: usize, budget: u64) -> Mode {
    mode.resolve(mode != Mode::Auto || gram_unfit(n, d, budget).is_none())
}

/// The largest batch (sequences per job) of the engine `mode` resolves to, within `budget`
/// bytes beside G and the table: at least 1, at most N.
pub fn max_batch(mode: Mode, n: usize, d: usize, steps: usize, budget: u64) -> usize {
    let table = (n as u64) * (d as u64) * 12;
    let (used, per) = match mode_for(mode, n, d, budget) {
        Mode::Gram => (
            gram_bytes(n) + table,
            gram_sequence_bytes(n, d, steps.min(n.saturating_sub(1))),
        ),
        _ => (
            table,
            scan_sequence_bytes(n, d, steps.min(n.saturating_sub(1))),
        ),
    };
    ((budget.saturating_sub(used) / per.max(1)) as usize)
        .min(n.max(1))
        .max(1)
}

/// The CPU's model name (`model name` in /proc/cpuinfo), or `"host CPU"`.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|v| v.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "host CPU".into())
}

/// Threads the host engine runs on (one per core unless `RAYON_NUM_THREADS` says otherwise,
/// parsed and bounded by [`crate::settings::check`]).
pub fn threads() -> usize {
    rayon::current_num_threads()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_gram_while_g_fits_and_the_scan_beyond() {
        let budget = 1 << 30;
        assert_eq!(mode_for(Mode::Auto, 10_000, 384, budget), Mode::Gram);
        assert_eq!(mode_for(Mode::Auto, 20_000, 384, budget), Mode::Scan);
        assert_eq!(mode_for(Mode::Gram, 20_000, 384, budget), Mode::Gram);
        assert!(gram_unfit(20_000, 384, budget)
            .unwrap()
            .contains("1024 MiB"));
    }

    #[test]
    fn batches_fill_the_budget_and_stay_within_one_and_n() {
        let budget = 1 << 30;
        let n = 10_000;
        let b = max_batch(Mode::Gram, n, 384, n - 1, budget);
        let used = gram_bytes(n) + (n as u64) * 384 * 12;
        assert!(b as u64 * gram_sequence_bytes(n, 384, n - 1) <= budget - used);
        assert!(((b + 1) as u64) * gram_sequence_bytes(n, 384, n - 1) > budget - used);
        assert_eq!(max_batch(Mode::Auto, 10, 4, 9, budget), 10);
        assert_eq!(max_batch(Mode::Gram, 100_000, 4, 9, budget), 1);
    }
}
