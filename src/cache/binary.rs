//! [`BinaryCacheWriter`] and [`BinaryCache`]: the user's binary cache, a little-endian uint32
//! `N` followed by N rows of L uint32. May touch the row files of `rows.rs`, the crate's errors and
//! atomic writes; no device.

use super::rows::{
    check_flat_len, file_size, format_err, le_u32s, open_at_least, read_at,
    row_file_writer_methods, rows_u32, sequence_row_problem, ListChecker, RowFile,
};
use crate::error::{Error, Result};
use crate::pending_file::io_err;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes of the binary cache's header (uint32 N).
const BIN_HEADER: u64 = 4;

/// Writer of the user's binary cache: a little-endian uint32 `N`, then `N` rows of `len`
/// little-endian uint32, row `s` being the sequence of start `s` (`len` = N for full sequences,
/// fewer with top_k).
///
/// The temporary file is pre-sized, so rows can be written in any order as batches finish (each
/// seeks to its place); a bitset records which rows were written and
/// [`finish`](Self::finish) refuses a cache with missing rows instead of leaving zeros that look
/// like sequences. Like every writer here it goes through a [`PendingFile`]: the destination is
/// replaced whole or not at all.
///
/// [`PendingFile`]: super::PendingFile
#[derive(Debug)]
pub struct BinaryCacheWriter {
    rows: RowFile,
    n: usize,
    len: usize,
    buf: Vec<u8>,
    /// The reader's row check ([`sequence_row_problem`]), made on every row before it is written.
    check: ListChecker,
}

impl BinaryCacheWriter {
    /// Create the temporary file beside `path`, sized to `4 + n·len·4` bytes, and write the
    /// header `n`. `n` must be 1..=u32::MAX and `len` 1..=n (a sequence has at most N entries);
    /// nothing is created when either is refused.
    pub fn create(path: &Path, n: usize, len: usize) -> Result<Self> {
        let n32 = rows_u32(path, "binary cache", n)?;
        if len == 0 {
            return Err(Error::Invalid(format!(
                "{}: binary cache rows of length 0 (each row needs at least the start)",
                path.display()
            )));
        }
        if len > n {
            return Err(Error::Invalid(format!(
                "{}: binary cache rows of length {len} for N = {n} items (a sequence has at most N entries)",
                path.display()
            )));
        }
        let size = file_size(path, BIN_HEADER, (n, len, 4), "binary cache", "entries")?;
        Ok(BinaryCacheWriter {
            rows: RowFile::create(path, "cache", n, size, &n32.to_le_bytes())?,
            n,
            len,
            buf: Vec::with_capacity(len * 4),
            check: ListChecker::new(n),
        })
    }

    /// Write the sequence of `start` (`start < n`, `seq.len() == len`, every entry `< n`, the
    /// first `start`, none twice: what the reader checks) at its place, `4 + start·len·4`. A
    /// start written twice is refused.
    pub fn write_row(&mut self, start: u32, seq: &[u32]) -> Result<()> {
        self.rows.check_usable()?;
        self.check_row(start, seq)?;
        self.write_run(start, seq)
    }

    /// What [`write_row`](Self::write_row) refuses: out of range, the wrong length, an entry
    /// not below N, what the reader calls corrupt, a start already written.
    fn check_row(&mut self, start: u32, seq: &[u32]) -> Result<()> {
        let path = self.rows.path();
        let s = start as usize;
        if s >= self.n {
            return Err(Error::Invalid(format!(
                "{}: start {start} is out of range for a cache of N = {} rows (0-based, below {})",
                path.display(),
                self.n,
                self.n
            )));
        }
        if seq.len() != self.len {
            return Err(Error::Invalid(format!(
                "{}: the sequence of start {start} has {} entries, the cache's rows have {}",
                path.display(),
                seq.len(),
                self.len
            )));
        }
        if let Some(j) = seq.iter().position(|&v| v as usize >= self.n) {
            return Err(Error::Invalid(format!(
                "{}: the sequence of start {start} has index {} at position {j}, not below N = {}",
                path.display(),
                seq[j],
                self.n
            )));
        }
        // What the reader would refuse as corrupt is refused here, before it is written.
        if let Some(why) = sequence_row_problem(start, seq, &mut self.check) {
            return Err(Error::Invalid(format!(
                "{}: the sequence of start {start} {why}",
                path.display()
            )));
        }
        if self.rows.rows.contains(s) {
            return Err(Error::Invalid(format!(
                "{}: start {start} is repeated: its row was already written",
                path.display()
            )));
        }
        Ok(())
    }

    /// Write checked rows of the consecutive starts `first`, `first + 1`, … (`flat`, whole rows)
    /// in one write at their place.
    fn write_run(&mut self, first: u32, flat: &[u32]) -> Result<()> {
        self.buf.clear();
        for &v in flat {
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        let offset = BIN_HEADER + first as u64 * self.len as u64 * 4;
        self.rows.write_at(offset, &self.buf)?;
        for k in 0..flat.len() / self.len {
            self.rows.rows.insert(first as usize + k);
        }
        Ok(())
    }

    /// Write a batch: row `i` of `flat` (of the cache's row length) is the sequence of
    /// `starts[i]`. Rows are checked one by one; on error the rows before it are written.
    pub fn write_batch(&mut self, starts: &[u32], flat: &[u32]) -> Result<()> {
        check_flat_len(
            self.rows.path(),
            starts.len(),
            flat.len(),
            self.len,
            "sequences",
        )?;
        self.rows.check_usable()?;
        // Runs of consecutive starts (a whole cache in order is one run a batch) go to the file
        // in one write each; every row is checked first, and a refused row leaves the rows
        // before it written.
        let len = self.len;
        let mut i = 0;
        while i < starts.len() {
            let mut j = i;
            let mut failed = None;
            while j < starts.len() && (j == i || starts[j] == starts[j - 1].wrapping_add(1)) {
                if let Err(e) = self.check_row(starts[j], &flat[j * len..(j + 1) * len]) {
                    failed = Some(e);
                    break;
                }
                j += 1;
            }
            if j > i {
                self.write_run(starts[i], &flat[i * len..j * len])?;
            }
            if let Some(e) = failed {
                return Err(e);
            }
            i = j;
        }
        Ok(())
    }

    row_file_writer_methods!("start");
}

/// Reader of the binary cache: opens the file, reads only the header and the size (which give
/// `N` and the row length `L`), and serves one sequence at a time by seeking to its row — the
/// whole N × L cache is never loaded unless asked for with [`read_all`](Self::read_all).
#[derive(Debug)]
pub struct BinaryCache {
    file: File,
    path: PathBuf,
    n: usize,
    len: usize,
    buf: Vec<u8>,
    /// Row checks, made on the first row read (N marks; N is bounded by the file's size).
    check: Option<ListChecker>,
}

impl BinaryCache {
    /// Open a cache: header `N` ≥ 1, and a size of `4 + N·L·4` bytes for a whole `L` ≥ 1 (else
    /// [`Error::Format`] naming the file and the sizes).
    pub fn open(path: &Path) -> Result<Self> {
        let (mut file, size) = open_at_least(path, BIN_HEADER, |size| {
            format!(
                "{size} bytes: too small for a binary cache (a 4-byte uint32 N, then N rows of \
                 uint32)"
            )
        })?;
        let io = io_err(path);
        let format = format_err(path);
        let mut header = [0u8; 4];
        file.read_exact(&mut header).map_err(&io)?;
        let n = u32::from_le_bytes(header) as usize;
        if n == 0 {
            return Err(format(format!(
                "header says N = 0 rows ({size} bytes); not a binary cache"
            )));
        }
        let body = size - BIN_HEADER;
        let row_group = n as u64 * 4;
        if !body.is_multiple_of(row_group) || body / row_group == 0 {
            return Err(format(format!(
                "size {size} bytes does not fit the header's N = {n}: a binary cache is 4 + N × L \
                 × 4 bytes for a row length L ≥ 1 (4 + {n} × {n} × 4 = {} for full sequences), \
                 but {body} bytes after the header is not a positive multiple of {row_group}",
                BIN_HEADER + row_group * n as u64
            )));
        }
        let len = usize::try_from(body / row_group).map_err(|_| {
            format(format!(
                "rows of {} entries are too long for this platform",
                body / row_group
            ))
        })?;
        Ok(BinaryCache {
            file,
            path: path.to_path_buf(),
            n,
            len,
            buf: Vec::new(),
            check: None,
        })
    }

    /// Number of rows (starts) N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Entries per row L (N for full sequences).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether rows are empty; never true for an opened cache (L ≥ 1). Provided for API
    /// symmetry with [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The path this cache was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sequence of `start`, read from its row alone (one seek and one read). An entry not
    /// below N is [`Error::Format`] (a corrupt file), a start out of range [`Error::Invalid`].
    pub fn sequence(&mut self, start: u32) -> Result<Vec<u32>> {
        let s = start as usize;
        if s >= self.n {
            return Err(Error::Invalid(format!(
                "{}: start {start} is out of range for a cache of N = {} rows (0-based, below {})",
                self.path.display(),
                self.n,
                self.n
            )));
        }
        let offset = BIN_HEADER + s as u64 * self.len as u64 * 4;
        read_at(
            &mut self.file,
            &self.path,
            offset,
            self.len * 4,
            &mut self.buf,
        )?;
        let row = le_u32s(&self.buf);
        let check = self.check.get_or_insert_with(|| ListChecker::new(self.n));
        check_entries(&self.path, self.n, self.len, s, &row, check)?;
        Ok(row)
    }

    /// Read a whole cache: `(N, flat)` with `flat` row-major, `N × L` entries (L =
    /// `flat.len() / N`). Validated like [`open`](Self::open) and
    /// [`sequence`](Self::sequence).
    pub fn read_all(path: &Path) -> Result<(usize, Vec<u32>)> {
        let mut cache = BinaryCache::open(path)?;
        let (n, len) = (cache.n, cache.len);
        let total = n.checked_mul(len).ok_or_else(|| Error::Format {
            path: path.to_path_buf(),
            reason: format!("{n} rows × {len} entries is too large to load"),
        })?;
        let mut bytes = Vec::new();
        cache.file.read_to_end(&mut bytes).map_err(io_err(path))?;
        if bytes.len() != total * 4 {
            return Err(Error::Format {
                path: path.to_path_buf(),
                reason: format!(
                    "read {} bytes after the header, expected {} (did the file change?)",
                    bytes.len(),
                    total * 4
                ),
            });
        }
        let flat = le_u32s(&bytes);
        drop(bytes);
        let mut check = ListChecker::new(n);
        for (s, row) in flat.chunks_exact(len).enumerate() {
            check_entries(path, n, len, s, row, &mut check)?;
        }
        Ok((n, flat))
    }
}

/// Refuse a row that is not the sequence of its start ([`sequence_row_problem`], what the writer
/// refuses): the file is corrupt or not a cache.
fn check_entries(
    path: &Path,
    n: usize,
    len: usize,
    start: usize,
    row: &[u32],
    check: &mut ListChecker,
) -> Result<()> {
    match sequence_row_problem(start as u32, row, check) {
        None => Ok(()),
        Some(why) => Err(Error::Format {
            path: path.to_path_buf(),
            reason: format!(
                "row {start} (of {n} rows × {len}): {why}; the file is corrupt or not a binary \
                 cache"
            ),
        }),
    }
}
