//! The k-NN graph file: its format constants, [`KnnMetric`], the writer [`KnnGraphWriter`] and
//! the reader [`KnnGraph`]. May touch the row files of `rows.rs`, the crate's errors and atomic
//! writes; no device.

use super::rows::{
    check_flat_len, file_size, format_err, item_out_of_range, le_u32s, open_at_least, read_at,
    row_file_writer_methods, rows_u32, ListChecker, RowFile, KNN_PAD,
};
use crate::error::{Error, Result};
use crate::pending_file::io_err;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The k-NN graph file's first four bytes.
pub const KNN_MAGIC: [u8; 4] = *b"DKNN";
/// The k-NN graph format version this build writes and reads.
pub const KNN_VERSION: u32 = 1;
/// Bytes of the k-NN graph file's header.
pub const KNN_HEADER: u64 = 24;

/// What a k-NN graph's values are, and so which way is closer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnnMetric {
    /// Inner products `a·b`: larger is closer. Header code 0.
    InnerProduct,
    /// Cosine similarities: larger is closer. Header code 1.
    Cosine,
    /// L2 distances (squared, as Faiss reports them, or not: the file does not say): smaller is
    /// closer. Header code 2.
    L2,
}

impl KnnMetric {
    /// The header code: 0, 1, 2.
    pub fn code(self) -> u32 {
        match self {
            KnnMetric::InnerProduct => 0,
            KnnMetric::Cosine => 1,
            KnnMetric::L2 => 2,
        }
    }

    /// The metric of a header code, if it is one.
    pub fn from_code(code: u32) -> Option<KnnMetric> {
        match code {
            0 => Some(KnnMetric::InnerProduct),
            1 => Some(KnnMetric::Cosine),
            2 => Some(KnnMetric::L2),
            _ => None,
        }
    }

    /// Whether larger values are closer (similarities) rather than smaller (distances).
    pub fn larger_is_closer(self) -> bool {
        self != KnnMetric::L2
    }

    /// The value stored beside a [`KNN_PAD`] id: the farthest possible, −∞ for similarities,
    /// +∞ for distances.
    pub fn pad_value(self) -> f32 {
        if self.larger_is_closer() {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        }
    }

    /// "inner product", "cosine", "L2".
    pub fn name(self) -> &'static str {
        match self {
            KnnMetric::InnerProduct => "inner product",
            KnnMetric::Cosine => "cosine",
            KnnMetric::L2 => "L2",
        }
    }
}

/// Streaming writer of the k-NN graph file: for each of N items its k nearest other items and
/// their similarities or distances, in this little-endian layout (version 1):
///
/// | offset | size | field |
/// | --- | --- | --- |
/// | 0 | 4 | magic `DKNN` |
/// | 4 | 4 | u32 version = 1 |
/// | 8 | 4 | u32 N (items, ≥ 1) |
/// | 12 | 4 | u32 k (neighbours per item, ≥ 1) |
/// | 16 | 4 | u32 metric: 0 inner product, 1 cosine (larger is closer), 2 L2 (smaller is closer) |
/// | 20 | 4 | u32 reserved = 0 |
/// | 24 | N·k·4 | ids: row `i` is item i's neighbours, closest first; [`KNN_PAD`] (u32::MAX) pads a row of fewer than k |
/// | 24 + N·k·4 | N·k·4 | f32 values, the same layout; a padded entry holds [`KnnMetric::pad_value`] (−∞ / +∞) |
///
/// The file is `24 + N·k·8` bytes. A row lists other items only (never the item itself), each
/// once, ordered closest first (ties in any order), padding only at its end.
///
/// The temporary file is pre-sized and rows are written at their places as batches arrive, in
/// any order (a run of consecutive items is one write per section); [`finish`](Self::finish)
/// refuses a graph with rows missing. A bad batch is refused whole with [`Error::Invalid`] naming
/// the item (out of range, written before or twice, an id out of range, the item itself, repeated
/// or after padding, a NaN value, values not closest first, wrong lengths) and nothing of it is
/// written. Dropping the writer unfinished leaves no file behind. Host memory is O(batch + N).
#[derive(Debug)]
pub struct KnnGraphWriter {
    rows: RowFile,
    check: ListChecker,
    n: usize,
    k: usize,
    metric: KnnMetric,
    ids_buf: Vec<u8>,
    values_buf: Vec<u8>,
}

impl KnnGraphWriter {
    /// Create the temporary file beside `path`, sized to `24 + n·k·8` bytes, with its header.
    /// `n` must be 1..=u32::MAX and `k` 1..=n (a row holds at most N − 1 neighbours; k = N pads
    /// each row by one); nothing is created when either is refused.
    pub fn create(path: &Path, n: usize, k: usize, metric: KnnMetric) -> Result<Self> {
        let n32 = rows_u32(path, "k-NN graph", n)?;
        let k32 = u32::try_from(k)
            .ok()
            .filter(|&v| v >= 1 && k <= n)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: k-NN graph with k = {k}: k must be 1..=N = {n} (a row holds at most \
                     N − 1 neighbours)",
                    path.display()
                ))
            })?;
        let size = file_size(path, KNN_HEADER, (n, k, 8), "k-NN graph", "neighbours")?;
        let mut header = Vec::with_capacity(KNN_HEADER as usize);
        header.extend_from_slice(&KNN_MAGIC);
        for v in [KNN_VERSION, n32, k32, metric.code(), 0] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        Ok(KnnGraphWriter {
            rows: RowFile::create(path, "k-NN graph", n, size, &header)?,
            check: ListChecker::new(n),
            n,
            k,
            metric,
            ids_buf: Vec::new(),
            values_buf: Vec::new(),
        })
    }

    /// Write the neighbours of one item (`ids` and `values` of k entries each).
    pub fn write_row(&mut self, item: u32, ids: &[u32], values: &[f32]) -> Result<()> {
        self.write_batch(&[item], ids, values)
    }

    /// Write a batch: row `i` of `ids` and of `values` (k entries each, row-major, the layout a
    /// k-NN search downloads) are the neighbours of `items[i]`. Checked whole before anything is
    /// written; the values beside padding are written as [`KnnMetric::pad_value`] whatever they
    /// were.
    pub fn write_batch(&mut self, items: &[u32], ids: &[u32], values: &[f32]) -> Result<()> {
        self.rows.check_usable()?;
        let (n, k, metric) = (self.n, self.k, self.metric);
        let path = self.rows.pending.path();
        let invalid = |msg: String| Error::Invalid(format!("{}: {msg}", path.display()));
        check_flat_len(path, items.len(), ids.len(), k, "neighbour id lists")?;
        check_flat_len(path, items.len(), values.len(), k, "neighbour value lists")?;
        self.rows
            .rows
            .claim_items(items, "its neighbours were")
            .map_err(invalid)?;
        for (i, &item) in items.iter().enumerate() {
            let (row_ids, row_values) = (&ids[i * k..(i + 1) * k], &values[i * k..(i + 1) * k]);
            let problem = self
                .check
                .check(item, row_ids, true)
                .and_then(|real| check_knn_values(metric, &row_values[..real]));
            if let Err(p) = problem {
                self.rows.rows.release(items);
                return Err(invalid(format!("the neighbours of item {item}: {p}")));
            }
        }
        // Runs of consecutive items are contiguous in both sections: one write each.
        let section = KNN_HEADER + n as u64 * k as u64 * 4;
        let mut a = 0;
        while a < items.len() {
            let mut b = a + 1;
            while b < items.len() && items[b] == items[b - 1].wrapping_add(1) {
                b += 1;
            }
            self.ids_buf.clear();
            self.values_buf.clear();
            for (&id, &v) in ids[a * k..b * k].iter().zip(&values[a * k..b * k]) {
                let v = if id == KNN_PAD { metric.pad_value() } else { v };
                self.ids_buf.extend_from_slice(&id.to_le_bytes());
                self.values_buf.extend_from_slice(&v.to_le_bytes());
            }
            let offset = items[a] as u64 * k as u64 * 4;
            self.rows.write_at(KNN_HEADER + offset, &self.ids_buf)?;
            self.rows.write_at(section + offset, &self.values_buf)?;
            a = b;
        }
        Ok(())
    }

    row_file_writer_methods!("item");
}

/// A neighbour list's real values: no NaN, closest first for `metric`.
fn check_knn_values(metric: KnnMetric, values: &[f32]) -> std::result::Result<usize, String> {
    if let Some(j) = values.iter().position(|v| v.is_nan()) {
        return Err(format!("the value at position {j} is NaN"));
    }
    for j in 1..values.len() {
        let (prev, v) = (values[j - 1], values[j]);
        let closer = if metric.larger_is_closer() {
            v > prev
        } else {
            v < prev
        };
        if closer {
            return Err(format!(
                "the values are not closest first for {}: position {j} ({v}) is closer than \
                 position {} ({prev})",
                metric.name(),
                j - 1
            ));
        }
    }
    Ok(values.len())
}

/// Reader of the k-NN graph file (see [`KnnGraphWriter`] for the format): opens the file, checks
/// the header against the size, and serves one item's neighbours at a time by reading its row
/// of each section — the N × k graph is never loaded whole.
#[derive(Debug)]
pub struct KnnGraph {
    file: File,
    path: PathBuf,
    n: usize,
    k: usize,
    metric: KnnMetric,
    buf: Vec<u8>,
    /// The writer's list checks, made on the first row read (N marks; N is bounded by the
    /// file's size, checked when it was opened).
    check: Option<ListChecker>,
}

impl KnnGraph {
    /// Open a graph; a file that is too small, foreign (another magic), of another version,
    /// with a bad header field or a size that does not match its header (truncated) is
    /// [`Error::Format`] naming the file and the cause.
    pub fn open(path: &Path) -> Result<Self> {
        let (mut file, size) = open_at_least(path, KNN_HEADER, |size| {
            format!(
                "{size} bytes: too small for a k-NN graph file (a {KNN_HEADER}-byte header \
                 starting with \"DKNN\", then ids and values)"
            )
        })?;
        let io = io_err(path);
        let format = format_err(path);
        let mut header = [0u8; KNN_HEADER as usize];
        file.read_exact(&mut header).map_err(&io)?;
        if header[..4] != KNN_MAGIC {
            return Err(format(format!(
                "not a k-NN graph file: it starts with {:?}, not the magic \"DKNN\"",
                String::from_utf8_lossy(&header[..4])
            )));
        }
        let word =
            |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (version, n, k, code, reserved) = (word(4), word(8), word(12), word(16), word(20));
        if version != KNN_VERSION {
            return Err(format(format!(
                "k-NN graph format version {version}; this build reads version {KNN_VERSION}"
            )));
        }
        let metric = KnnMetric::from_code(code).ok_or_else(|| {
            format(format!(
                "unknown metric code {code} in the header (0 inner product, 1 cosine, 2 L2)"
            ))
        })?;
        if n == 0 || k == 0 || reserved != 0 {
            return Err(format(format!(
                "bad header: N = {n}, k = {k}, reserved = {reserved} (N and k must be at least \
                 1, reserved 0)"
            )));
        }
        // N·k·8 can pass u64 (N = 2^31, k = 2^30 wraps to 0): such a header fits no file.
        let expected = (n as u64)
            .checked_mul(k as u64)
            .and_then(|v| v.checked_mul(8))
            .and_then(|v| v.checked_add(KNN_HEADER))
            .ok_or_else(|| {
                format(format!(
                    "the header's N = {n}, k = {k} need {KNN_HEADER} + N × k × 8 bytes, more than \
                     any file holds ({size} bytes here); the file is corrupt or not a k-NN graph"
                ))
            })?;
        if size != expected {
            return Err(format(format!(
                "size {size} bytes does not match the header's N = {n}, k = {k}: a k-NN graph \
                 file is {KNN_HEADER} + N × k × 8 = {expected} bytes; the file is {} or not a \
                 k-NN graph",
                if size < expected {
                    "truncated"
                } else {
                    "too long"
                }
            )));
        }
        Ok(KnnGraph {
            file,
            path: path.to_path_buf(),
            n: n as usize,
            k: k as usize,
            metric,
            buf: Vec::new(),
            check: None,
        })
    }

    /// Number of items N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Neighbours per item k.
    pub fn k(&self) -> usize {
        self.k
    }

    /// What the values are.
    pub fn metric(&self) -> KnnMetric {
        self.metric
    }

    /// The path this graph was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The neighbours of `item`: k ids, closest first, [`KNN_PAD`] for missing ones, and their k
    /// values — two reads, nothing else loaded. An item out of range is [`Error::Invalid`], an
    /// id neither below N nor padding [`Error::Format`] (a corrupt file).
    pub fn row(&mut self, item: u32) -> Result<(Vec<u32>, Vec<f32>)> {
        let (n, k) = (self.n, self.k);
        if item as usize >= n {
            return Err(Error::Invalid(format!(
                "{}: {}",
                self.path.display(),
                item_out_of_range(item, n)
            )));
        }
        let offset = item as u64 * k as u64 * 4;
        read_at(
            &mut self.file,
            &self.path,
            KNN_HEADER + offset,
            k * 4,
            &mut self.buf,
        )?;
        let ids = le_u32s(&self.buf);
        // What the writer refuses, the reader refuses: an id neither below N nor padding, the
        // item itself, an id twice, padding before a real id; then a value beside padding that
        // the writer would not have stored, NaN or values not closest first.
        let corrupt = |why: String| Error::Format {
            path: self.path.clone(),
            reason: format!("row {item} (of {n} × k = {k}): {why}; the file is corrupt"),
        };
        let real = self
            .check
            .get_or_insert_with(|| ListChecker::new(n))
            .check(item, &ids, true)
            .map_err(corrupt)?;
        let section = KNN_HEADER + n as u64 * k as u64 * 4;
        read_at(
            &mut self.file,
            &self.path,
            section + offset,
            k * 4,
            &mut self.buf,
        )?;
        let values: Vec<f32> = le_u32s(&self.buf).into_iter().map(f32::from_bits).collect();
        // The writer stores the farthest value beside every padding id, whatever it was given.
        let pad = self.metric.pad_value();
        let pad_problem = values[real..]
            .iter()
            .position(|v| v.to_bits() != pad.to_bits())
            .map(|j| {
                format!(
                    "the value beside the padding id at position {} is {}, not {pad} (the writer \
                     stores {pad} there)",
                    real + j,
                    values[real + j]
                )
            });
        match pad_problem {
            Some(why) => Err(why),
            None => check_knn_values(self.metric, &values[..real]),
        }
        .map_err(|why| Error::Format {
            path: self.path.clone(),
            reason: format!("row {item} (of {n} × k = {k}): {why}; the file is corrupt"),
        })?;
        Ok((ids, values))
    }
}
