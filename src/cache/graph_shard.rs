//! [`KnnGraphShard`]: the slice of a k-NN graph one shard of a sharded rankings run computes, and
//! [`merge_graphs`], which rebuilds the one-shot graph file from every shard's slice. May touch the
//! k-NN graph writer, the shard layout of `merge.rs`, the row files of `rows.rs`, the checksums and
//! atomic writes; no device.

use super::checksum::{fnv1a64, FNV64_START};
use super::knn_graph::{KnnGraphWriter, KnnMetric};
use super::merge::{shard_len, shards_missing, ShardLayout};
use super::rows::KNN_PAD;
use super::rows::{format_err, le_u32s, open_with_size};
use crate::error::{Error, Result};
use crate::pending_file::{io_err, PendingFile};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A graph shard file's first four bytes.
pub const KNN_SHARD_MAGIC: [u8; 4] = *b"DKNS";
/// Bytes of a graph shard file's header.
const SHARD_HEADER: u64 = 52;
/// The header's version.
const SHARD_VERSION: u32 = 2;
/// Where the file's own checksum is in the header.
const CHECKSUM_AT: usize = 44;
/// Rows a merge reads at a time.
const MERGE_ROWS: usize = 4096;

/// Writer of a graph shard file: the k-NN graph rows of shard `index` (1-based) of `count` of
/// the items 0..N split in `layout`, in this little-endian layout (version 2):
///
/// | offset | size | field |
/// | --- | --- | --- |
/// | 0 | 4 | magic `DKNS` |
/// | 4 | 4 | u32 version = 2 |
/// | 8 | 4 | u32 N (items of the whole graph) |
/// | 12 | 4 | u32 k |
/// | 16 | 4 | u32 metric (as the graph file's) |
/// | 20 | 4 | u32 shard index i (1-based) |
/// | 24 | 4 | u32 shard count n |
/// | 28 | 4 | u32 layout: 0 contiguous, 1 strided |
/// | 32 | 4 | u32 reserved = 0 |
/// | 36 | 8 | u64 the run's checksum: FNV-1a 64 of the `run` text given to [`create`](Self::create) |
/// | 44 | 8 | u64 the file's own checksum: FNV-1a 64 of its bytes, these 8 read as zeros |
/// | 52 | m·k·8 | the shard's m items' rows in the shard's order, each k u32 ids then k f32 values |
///
/// Rows must come in the shard's order ([`ShardLayout::positions`]); their contents are checked
/// when [`merge_graphs`] writes them through a [`KnnGraphWriter`]. The file goes through a
/// [`PendingFile`]: nothing is left behind unless [`finish`](Self::finish) succeeds.
/// (Version 1 had neither checksum, and a 36-byte header; the merge refuses it.)
#[derive(Debug)]
pub struct KnnGraphShard {
    out: BufWriter<File>,
    pending: PendingFile,
    positions: Vec<usize>,
    written: usize,
    k: usize,
    /// The FNV-1a 64 of the bytes written so far (the file's own checksum read as zeros).
    hash: u64,
}

impl KnnGraphShard {
    /// Create the temporary file beside `path` and write the header. `n` ≥ 1, `k` in 1..=n,
    /// `1 <= index <= count`; otherwise [`Error::Invalid`] and nothing is created.
    ///
    /// `run` names what the rows were computed from, the same text for every shard of a run:
    /// the table's content ([`table_checksum`](super::table_checksum)) and every option that
    /// changes the rows (centring, precision, the search). The header keeps its checksum;
    /// [`merge_graphs`] merges only shards whose checksums agree.
    pub fn create(
        path: &Path,
        n: usize,
        k: usize,
        metric: KnnMetric,
        (index, count, layout): (usize, usize, ShardLayout),
        run: &str,
    ) -> Result<Self> {
        let ok = n >= 1 && n <= u32::MAX as usize && (1..=n).contains(&k);
        if !ok || count < 1 || !(1..=count).contains(&index) || count > u32::MAX as usize {
            return Err(Error::Invalid(format!(
                "{}: graph shard {index}/{count} of N = {n}, k = {k}: needs 1 <= k <= N and \
                 1 <= i <= n",
                path.display()
            )));
        }
        let (pending, file) = PendingFile::create(path)?;
        let mut out = BufWriter::new(file);
        let code = u32::from(layout == ShardLayout::Strided);
        let mut header = KNN_SHARD_MAGIC.to_vec();
        for v in [
            SHARD_VERSION,
            n as u32,
            k as u32,
            metric.code(),
            index as u32,
            count as u32,
            code,
            0,
        ] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        header.extend_from_slice(&fnv1a64(FNV64_START, run.as_bytes()).to_le_bytes());
        header.extend_from_slice(&[0; 8]);
        out.write_all(&header).map_err(io_err(path))?;
        Ok(KnnGraphShard {
            out,
            pending,
            positions: layout.positions(index, count, n),
            written: 0,
            k,
            hash: fnv1a64(FNV64_START, &header),
        })
    }

    /// Append the rows of `items` (the shard's next items, in order): row `r` of `ids` and
    /// `values` (k entries each) is `items[r]`'s. Items out of the shard's order are
    /// [`Error::Invalid`] and nothing of the batch is written.
    pub fn write_batch(&mut self, items: &[u32], ids: &[u32], values: &[f32]) -> Result<()> {
        let (k, path) = (self.k, self.pending.path().to_path_buf());
        let next = &self.positions[self.written.min(self.positions.len())..];
        if ids.len() != items.len() * k || values.len() != items.len() * k {
            return Err(Error::Invalid(format!(
                "{}: {} items but {} ids and {} values (k = {k} each)",
                path.display(),
                items.len(),
                ids.len(),
                values.len()
            )));
        }
        if items.len() > next.len() || items.iter().zip(next).any(|(&a, &b)| a as usize != b) {
            return Err(Error::Invalid(format!(
                "{}: items {:?}… are not this shard's next items (expected {:?}…)",
                path.display(),
                &items[..items.len().min(4)],
                &next[..next.len().min(4)]
            )));
        }
        let mut bytes = Vec::with_capacity(items.len() * k * 8);
        for r in 0..items.len() {
            for &id in &ids[r * k..(r + 1) * k] {
                bytes.extend_from_slice(&id.to_le_bytes());
            }
            for &v in &values[r * k..(r + 1) * k] {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        self.out.write_all(&bytes).map_err(io_err(&path))?;
        self.hash = fnv1a64(self.hash, &bytes);
        self.written += items.len();
        Ok(())
    }

    /// Check that every row of the shard was written, then flush, fsync and rename.
    pub fn finish(self) -> Result<()> {
        let path = self.pending.path().to_path_buf();
        if self.written != self.positions.len() {
            return Err(Error::Invalid(format!(
                "{}: graph shard incomplete: {} of its {} rows written",
                path.display(),
                self.written,
                self.positions.len()
            )));
        }
        let mut file = self
            .out
            .into_inner()
            .map_err(|e| io_err(&path)(e.into_error()))?;
        file.seek(SeekFrom::Start(CHECKSUM_AT as u64))
            .and_then(|_| file.write_all(&self.hash.to_le_bytes()))
            .and_then(|_| file.sync_all())
            .map_err(io_err(&path))?;
        drop(file);
        self.pending.commit()
    }
}

/// A graph shard file's header, read and checked against its size.
struct ShardHead {
    path: PathBuf,
    reader: BufReader<File>,
    n: usize,
    k: usize,
    metric: u32,
    index: usize,
    count: usize,
    layout: ShardLayout,
    /// The run's checksum and the file's own, from the header.
    run: u64,
    checksum: u64,
    /// The FNV-1a 64 of the header with the file's checksum read as zeros.
    hash: u64,
}

impl ShardHead {
    fn open(path: &Path) -> Result<ShardHead> {
        let (mut file, size) = open_with_size(path)?;
        let format = format_err(path);
        let mut h = [0u8; SHARD_HEADER as usize];
        let not_a_shard = || {
            format(
                "not a k-NN graph shard (a file that starts with \"DKNS\", written by a \
                 sharded rankings run with --graph)"
                    .into(),
            )
        };
        if size < 8 || file.read_exact(&mut h[..8]).is_err() || h[..4] != KNN_SHARD_MAGIC {
            return Err(not_a_shard());
        }
        let version = le_u32s(&h[4..8])[0];
        if version != SHARD_VERSION {
            return Err(format(format!(
                "graph shard version {version}: {}; recompute the shard with this version",
                if version == 1 {
                    "written before graph shards carried checksums of their run and of \
                     themselves, so it cannot be verified"
                } else {
                    "not a version this merge reads (2)"
                }
            )));
        }
        if size < SHARD_HEADER || file.read_exact(&mut h[8..]).is_err() {
            return Err(not_a_shard());
        }
        let w = le_u32s(&h[4..36]);
        let (version, n, k, metric, index, count, code) = (
            w[0],
            w[1] as usize,
            w[2] as usize,
            w[3],
            w[4] as usize,
            w[5] as usize,
            w[6],
        );
        let layout = match code {
            0 => ShardLayout::Contiguous,
            1 => ShardLayout::Strided,
            _ => return Err(format(format!("unknown shard layout code {code}"))),
        };
        if n == 0
            || !(1..=n).contains(&k)
            || count == 0
            || !(1..=count).contains(&index)
            || KnnMetric::from_code(metric).is_none()
            || w[7] != 0
        {
            return Err(format(format!(
                "bad graph shard header: version {version}, N = {n}, k = {k}, metric {metric}, \
                 shard {index}/{count}"
            )));
        }
        let want = SHARD_HEADER + shard_len(index, count, n) as u64 * k as u64 * 8;
        if size != want {
            return Err(format(format!(
                "{size} bytes, but graph shard {index}/{count} of N = {n}, k = {k} is {want} \
                 bytes: the file is truncated or not a graph shard"
            )));
        }
        let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        let (run, checksum) = (word(36), word(CHECKSUM_AT));
        h[CHECKSUM_AT..].fill(0);
        Ok(ShardHead {
            path: path.to_path_buf(),
            reader: BufReader::new(file),
            n,
            k,
            metric,
            index,
            count,
            layout,
            run,
            checksum,
            hash: fnv1a64(FNV64_START, &h),
        })
    }
}

/// Merge the graph shard files of a sharded rankings run (every shard 1..n, in any order) into
/// the k-NN graph file `out`, byte-identical to the one-shot run's graph. The shards must agree
/// on the run (its checksum: the same table and options), N, k, the metric, n and the layout,
/// each shard present once, each file's bytes matching its own checksum (version 1 shards,
/// which have none, are refused), every row holding min(k, N − 1) neighbours; a missing shard is
/// [`Error::Invalid`] naming every missing `i/n`, a file that does not fit [`Error::Format`]
/// naming it. Every row is checked as [`KnnGraphWriter::write_batch`] checks rows. `out` is
/// untouched on any error. Returns the number of shards.
pub fn merge_graphs(inputs: &[PathBuf], out: &Path) -> Result<usize> {
    super::merge::check_merge_output(inputs, out, "graph shards")?;
    let mut heads = inputs
        .iter()
        .map(|p| ShardHead::open(p))
        .collect::<Result<Vec<_>>>()?;
    let first = (heads[0].n, heads[0].k, heads[0].metric, heads[0].count);
    let first_layout = heads[0].layout;
    let mut seen: HashMap<usize, PathBuf> = HashMap::new();
    for h in &heads {
        if (h.n, h.k, h.metric, h.count) != first || h.layout != first_layout {
            return Err(Error::Format {
                path: h.path.clone(),
                reason: format!(
                    "not a shard of the same run as {}: N = {}, k = {}, metric {}, {} shards \
                     {} here; N = {}, k = {}, metric {}, {} shards {} there",
                    heads[0].path.display(),
                    h.n,
                    h.k,
                    h.metric,
                    h.count,
                    h.layout.name(),
                    first.0,
                    first.1,
                    first.2,
                    first.3,
                    first_layout.name()
                ),
            });
        }
        if h.run != heads[0].run {
            return Err(Error::Format {
                path: h.path.clone(),
                reason: format!(
                    "not a shard of the same run as {}: computed from another table or with \
                     other options (run checksum {:016x} here, {:016x} there)",
                    heads[0].path.display(),
                    h.run,
                    heads[0].run
                ),
            });
        }
        if let Some(other) = seen.insert(h.index, h.path.clone()) {
            return Err(Error::Format {
                path: h.path.clone(),
                reason: format!(
                    "graph shard {}/{} is given twice (also {})",
                    h.index,
                    h.count,
                    other.display()
                ),
            });
        }
    }
    let (n, k, code, count) = first;
    if seen.len() < count {
        let missing: Vec<usize> = (1..=count).filter(|i| !seen.contains_key(i)).collect();
        return Err(shards_missing(
            out,
            "graph shard(s)",
            count,
            missing.len(),
            missing.into_iter(),
            heads.iter().map(|h| (h.path.as_path(), h.index)),
        ));
    }
    let metric = KnnMetric::from_code(code).expect("checked in open");
    // Each shard is read whole and its checksum checked before the output is renamed into
    // place (a shard that fails leaves no output).
    let mut writer = KnnGraphWriter::create(out, n, k, metric)?;
    let (mut bytes, mut ids, mut values) = (Vec::new(), Vec::new(), Vec::new());
    // A row's real neighbours: every other item up to k (one pad ends the rows when k = N).
    let real = k.min(n - 1);
    for h in &mut heads {
        let positions = h.layout.positions(h.index, h.count, n);
        for chunk in positions.chunks(MERGE_ROWS) {
            bytes.resize(chunk.len() * k * 8, 0);
            h.reader.read_exact(&mut bytes).map_err(io_err(&h.path))?;
            h.hash = fnv1a64(h.hash, &bytes);
            ids.clear();
            values.clear();
            for (row, &item) in bytes.chunks_exact(k * 8).zip(chunk) {
                let first = ids.len();
                ids.extend(le_u32s(&row[..k * 4]));
                values.extend(le_u32s(&row[k * 4..]).into_iter().map(f32::from_bits));
                let pads = ids[first..].iter().filter(|&&id| id == KNN_PAD).count();
                if pads != k - real {
                    return Err(Error::Format {
                        path: h.path.clone(),
                        reason: format!(
                            "the row of item {item} has {} neighbours, but a graph of N = {n}, \
                             k = {k} has {real} in every row",
                            k - pads
                        ),
                    });
                }
            }
            let items: Vec<u32> = chunk.iter().map(|&p| p as u32).collect();
            writer
                .write_batch(&items, &ids, &values)
                .map_err(|e| Error::Format {
                    path: h.path.clone(),
                    reason: format!("a bad row: {e}"),
                })?;
        }
        if h.hash != h.checksum {
            return Err(Error::Format {
                path: h.path.clone(),
                reason: format!(
                    "graph shard {}/{}: its contents do not match its checksum ({:016x} \
                     written, {:016x} now): the file was edited, truncated or damaged after it \
                     was written; recompute the shard",
                    h.index, h.count, h.checksum, h.hash
                ),
            });
        }
    }
    writer.finish()?;
    Ok(count)
}
