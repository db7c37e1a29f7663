//! The k-NN cross-check a user can ask for on their own data ([`crate::KnnOptions::verify`],
//! the rankings' `--verify`): a sample of the queries is searched again on the host, in
//! float64, against the table exactly as the device stores it (downloaded, fp16 widened), and
//! every returned neighbour is checked — ids in range and distinct, each rank's distance equal
//! to the brute force's at that rank, and each id's own float64 distance equal to the one
//! returned, within 1e-5 of the metric's scale (ties may go either way, nothing else may).
//! Costs one table download and `sample × N × D` float64 multiply-adds on the host.
//! Host arithmetic over a download: it may touch the device table (to read it back), the metric
//! and the float64 reference; no shader.

use super::{KnnResult, NO_ID};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::reference::knn_reference;
use crate::table::{Precision, Table};

/// `count` query positions out of `nq`, spread evenly, the first and the last included.
pub fn verify_sample(nq: usize, count: usize) -> Vec<usize> {
    match (nq, count) {
        (0, _) | (_, 0) => vec![],
        (_, 1) => vec![0],
        _ if count >= nq => (0..nq).collect(),
        _ => {
            let mut v: Vec<usize> = (0..count).map(|i| i * (nq - 1) / (count - 1)).collect();
            v.dedup();
            v
        }
    }
}

/// Checks the queries `sample` of `res` (row-major `queries`, dimension of `stored`) against
/// the float64 brute force over `stored`; an [`Error::Verification`] names the first query,
/// rank and row that disagree. Returns the number of queries checked.
pub fn verify_result(
    stored: &Table,
    queries: &[f32],
    metric: Metric,
    res: &KnnResult,
    sample: &[usize],
) -> Result<usize> {
    let (n, d, k) = (stored.n(), stored.d(), res.k);
    let sim = metric != Metric::L2;
    for &q in sample {
        let query = &queries[q * d..(q + 1) * d];
        let r = knn_reference(stored, query, metric, None);
        let (ids, dists) = (res.ids_of(q), res.distances_of(q));
        let mut seen = std::collections::HashSet::new();
        let fail = |i: usize, why: String| {
            Err(Error::Verification(format!(
                "query {q}, rank {i} of {k} ({} on {n} rows): {why}",
                metric.name()
            )))
        };
        for i in 0..k {
            let id = ids[i];
            if i >= n {
                if id != NO_ID {
                    return fail(i, format!("row {id} past the table's {n} rows"));
                }
                continue;
            }
            if id < 0 || id as usize >= n || !seen.insert(id) {
                return fail(i, format!("row {id} is out of range or repeated"));
            }
            let got = dists[i] as f64;
            let want = r.keys[r.order[i]];
            if (got - want).abs() > r.tolerance {
                return fail(
                    i,
                    format!(
                        "returned row {id} at {got}, but the float64 brute force has row {} \
                         at {want} there ({} more {})",
                        r.order[i],
                        (got - want).abs(),
                        if sim { "similar" } else { "distant" }
                    ),
                );
            }
            let own = r.keys[id as usize];
            if (got - own).abs() > r.tolerance {
                return fail(
                    i,
                    format!("returned row {id} at {got}; its float64 value is {own}"),
                );
            }
        }
    }
    Ok(sample.len())
}

/// The table as the device stores it, downloaded, as a host table (fp16 rows widened exactly).
pub(crate) fn stored_table(dt: &DeviceTable) -> Result<Table> {
    let (n, d, p) = (dt.n(), dt.d(), dt.precision());
    let bytes = dt
        .context()
        .download(dt.data_buffer(), 0, (n * d * p.bytes()) as u64)?;
    let data: Vec<f32> = match p {
        Precision::Fp32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Precision::Fp16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
    };
    Table::new(data, n, d)
}
