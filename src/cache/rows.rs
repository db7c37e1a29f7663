//! Row bookkeeping shared by the writers and readers: which rows were written, the checks of
//! one item's list of other items, the pre-sized row file the binary cache and the k-NN graph
//! are written through, and positioned reads of a row. May touch the files it is given, the crate's
//! errors and atomic writes; no device.

use crate::error::{Error, Result};
use crate::pending_file::{check_not_failed, io_err, PendingFile};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// A missing neighbour's id (a row of fewer than k real neighbours, e.g. k ≥ N).
pub const KNN_PAD: u32 = u32::MAX;

/// Refuse a flat batch whose length is not `rows × len`.
pub(super) fn check_flat_len(
    path: &Path,
    rows: usize,
    flat: usize,
    len: usize,
    what: &str,
) -> Result<()> {
    let want = rows.checked_mul(len);
    if want != Some(flat) {
        return Err(Error::Invalid(format!(
            "{}: {flat} values for {rows} {what} of length {len} (expected {})",
            path.display(),
            want.map_or_else(|| "an overflowing count".to_string(), |w| w.to_string())
        )));
    }
    Ok(())
}

/// Which of N rows were written: a bitset and its count.
#[derive(Debug)]
pub(super) struct RowSet {
    bits: Vec<u64>,
    n: usize,
    pub(super) count: usize,
}

impl RowSet {
    pub(super) fn new(n: usize) -> RowSet {
        RowSet {
            bits: vec![0; n.div_ceil(64)],
            n,
            count: 0,
        }
    }
    pub(super) fn contains(&self, i: usize) -> bool {
        self.bits[i / 64] & (1u64 << (i % 64)) != 0
    }
    /// Mark row `i`; false when it was already marked.
    pub(super) fn insert(&mut self, i: usize) -> bool {
        if self.contains(i) {
            return false;
        }
        self.bits[i / 64] |= 1u64 << (i % 64);
        self.count += 1;
        true
    }
    fn remove(&mut self, i: usize) {
        if self.contains(i) {
            self.bits[i / 64] &= !(1u64 << (i % 64));
            self.count -= 1;
        }
    }
    /// Mark every item of a batch of lists (a ranking, a neighbour list per item) written, or
    /// none: an item not below N, one written before ("item X is repeated: `earlier` already
    /// written", e.g. "its ranking was") or one twice in `items` is the error.
    pub(super) fn claim_items(
        &mut self,
        items: &[u32],
        earlier: &str,
    ) -> std::result::Result<(), String> {
        if let Some(&item) = items.iter().find(|&&i| i as usize >= self.n) {
            return Err(item_out_of_range(item, self.n));
        }
        self.claim_all(items, |item, in_batch| {
            if in_batch {
                format!("item {item} appears twice in the batch")
            } else {
                format!("item {item} is repeated: {earlier} already written")
            }
        })
    }
    /// Mark every row of `rows` (each `< n`), or none: a row marked before or repeated in
    /// `rows` is the error `repeated(row, earlier_in_rows)`.
    fn claim_all(
        &mut self,
        rows: &[u32],
        repeated: impl Fn(u32, bool) -> String,
    ) -> std::result::Result<(), String> {
        for (k, &r) in rows.iter().enumerate() {
            if !self.insert(r as usize) {
                let in_batch = rows[..k].contains(&r);
                self.release(&rows[..k]);
                return Err(repeated(r, in_batch));
            }
        }
        Ok(())
    }
    /// Unmark rows claimed together (all distinct).
    pub(super) fn release(&mut self, rows: &[u32]) {
        for &r in rows {
            self.remove(r as usize);
        }
    }
    /// [`Error::Invalid`] "K of N rows are missing (the first is `unit` F); the `what` was not
    /// written" unless every row is marked.
    pub(super) fn check_complete(&self, path: &Path, unit: &str, what: &str) -> Result<()> {
        if self.count == self.n {
            return Ok(());
        }
        let first = (0..self.n).find(|&i| !self.contains(i)).unwrap_or(0);
        Err(Error::Invalid(format!(
            "{}: {} of {} rows are missing (the first is {unit} {first}); the {what} was not \
             written",
            path.display(),
            self.n - self.count,
            self.n
        )))
    }
}

/// `what`'s row count `n` as a u32 ≥ 1, else [`Error::Invalid`].
pub(super) fn rows_u32(path: &Path, what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).ok().filter(|&v| v >= 1).ok_or_else(|| {
        Error::Invalid(format!(
            "{}: {what} of N = {n} rows: N must be 1..={}",
            path.display(),
            u32::MAX
        ))
    })
}

/// A pre-sized file of N fixed-size rows written in any order, through a [`PendingFile`]: the
/// part the binary cache and the k-NN graph writers share. Rows are written at their offsets as
/// batches finish; [`finish`](Self::finish) refuses a file with rows missing (instead of leaving
/// zeros that look like data) and after an I/O error (part of a row may be in the file).
#[derive(Debug)]
pub(super) struct RowFile {
    // Declared before `pending` so the file is closed before the temporary file is removed.
    file: File,
    pub(super) pending: PendingFile,
    pub(super) rows: RowSet,
    failed: bool,
    /// Names the file in messages: "cache", "k-NN graph".
    what: &'static str,
}

impl RowFile {
    /// Create the temporary file beside `path`, sized to `size` bytes, starting with `header`.
    pub(super) fn create(
        path: &Path,
        what: &'static str,
        n: usize,
        size: u64,
        header: &[u8],
    ) -> Result<RowFile> {
        let (pending, mut file) = PendingFile::create(path)?;
        let io = io_err(path);
        file.set_len(size).map_err(&io)?;
        file.write_all(header).map_err(&io)?;
        Ok(RowFile {
            file,
            pending,
            rows: RowSet::new(n),
            failed: false,
            what,
        })
    }

    pub(super) fn path(&self) -> &Path {
        self.pending.path()
    }

    pub(super) fn check_usable(&self) -> Result<()> {
        check_not_failed(self.failed, self.path(), self.what, false)
    }

    /// Write `bytes` at `offset`; an I/O error marks the file failed.
    pub(super) fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let result = self
            .file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.write_all(bytes));
        result.map_err(|source| {
            self.failed = true;
            Error::Io {
                path: self.pending.path().to_path_buf(),
                source,
            }
        })
    }

    /// Check that every row was written (rows are named `unit` in the message), then fsync and
    /// rename the file onto its destination.
    pub(super) fn finish(self, unit: &str) -> Result<()> {
        let path = self.pending.path().to_path_buf();
        check_not_failed(self.failed, &path, self.what, true)?;
        self.rows.check_complete(&path, unit, self.what)?;
        self.file.sync_all().map_err(io_err(&path))?;
        let RowFile { file, pending, .. } = self;
        drop(file);
        pending.commit()
    }
}

/// The `rows_written` and `finish` methods of a writer whose rows go through its
/// `rows: RowFile`; `$unit` names a row in the message about missing rows ("start", "item").
macro_rules! row_file_writer_methods {
    ($unit:literal) => {
        /// How many rows have been written so far.
        pub fn rows_written(&self) -> usize {
            self.rows.rows.count
        }

        /// Check that every row was written (else [`Error::Invalid`] saying how many are missing
        /// and the first), then fsync and rename the file onto its destination.
        pub fn finish(self) -> Result<()> {
            self.rows.finish($unit)
        }
    };
}
pub(super) use row_file_writer_methods;

/// The size of a file of `header` bytes, then `n` rows of `len` values of `width` bytes each;
/// [`Error::Invalid`] "`path`: `what` of `n` rows × `len` `values` is too large" where it
/// overflows a u64.
pub(super) fn file_size(
    path: &Path,
    header: u64,
    (n, len, width): (usize, usize, u64),
    what: &str,
    values: &str,
) -> Result<u64> {
    (n as u64)
        .checked_mul(len as u64)
        .and_then(|v| v.checked_mul(width))
        .and_then(|v| v.checked_add(header))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "{}: {what} of {n} rows × {len} {values} is too large",
                path.display()
            ))
        })
}

/// Open `path` for reading; with its size.
pub(super) fn open_with_size(path: &Path) -> Result<(File, u64)> {
    let io = io_err(path);
    let file = File::open(path).map_err(&io)?;
    let size = file.metadata().map_err(&io)?.len();
    Ok((file, size))
}

/// [`open_with_size`], then a size of at least `header` bytes, else [`Error::Format`] with
/// `too_small(size)` as the reason.
pub(super) fn open_at_least(
    path: &Path,
    header: u64,
    too_small: impl FnOnce(u64) -> String,
) -> Result<(File, u64)> {
    let (file, size) = open_with_size(path)?;
    if size < header {
        return Err(format_err(path)(too_small(size)));
    }
    Ok((file, size))
}

/// A format error of `path`.
pub(super) fn format_err(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |reason| Error::Format {
        path: path.to_path_buf(),
        reason,
    }
}

/// Read `bytes` bytes at `offset` of `file` into `buf`.
pub(super) fn read_at(
    file: &mut File,
    path: &Path,
    offset: u64,
    bytes: usize,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let io = io_err(path);
    buf.resize(bytes, 0);
    file.seek(SeekFrom::Start(offset)).map_err(&io)?;
    file.read_exact(buf).map_err(&io)
}

/// Little-endian uint32 values of `bytes`.
pub(super) fn le_u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Checks one item's list of other items (a ranking, a neighbour list) in O(list): every entry
/// below N, not the item itself, none twice, and — where padding is allowed — [`KNN_PAD`] only
/// after the real entries. Repeats are found with a stamp per item (O(N) memory, never cleared
/// between lists).
#[derive(Debug)]
pub(super) struct ListChecker {
    marks: Vec<u32>,
    stamp: u32,
}

impl ListChecker {
    pub(super) fn new(n: usize) -> ListChecker {
        ListChecker {
            marks: vec![0; n],
            stamp: 0,
        }
    }

    /// Room for entries below `n` (it only grows): for lists whose N is not known in advance.
    pub(super) fn grow(&mut self, n: usize) {
        if n > self.marks.len() {
            self.marks.resize(n, 0);
        }
    }

    /// A stamp no mark holds yet: a new list.
    fn next_stamp(&mut self) -> u32 {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.fill(0);
            self.stamp = 1;
        }
        self.stamp
    }

    /// The N entries are checked against.
    pub(super) fn n(&self) -> usize {
        self.marks.len()
    }

    /// The number of real (unpadded) entries of `item`'s `list`, or what is wrong with it.
    pub(super) fn check(
        &mut self,
        item: u32,
        list: &[u32],
        pad: bool,
    ) -> std::result::Result<usize, String> {
        self.next_stamp();
        let n = self.marks.len();
        let mut real = list.len();
        for (j, &v) in list.iter().enumerate() {
            if pad && v == KNN_PAD {
                real = real.min(j);
                continue;
            }
            if real < list.len() {
                return Err(format!(
                    "entry {v} at position {j} follows padding (u32::MAX) at position {real}; \
                     padding may only end a list"
                ));
            }
            if v as usize >= n {
                return Err(format!(
                    "entry {v} at position {j} is out of range (0-based, below {n})"
                ));
            }
            if v == item {
                return Err(format!("entry at position {j} is the item {item} itself"));
            }
            if self.marks[v as usize] == self.stamp {
                return Err(format!("entry {v} appears twice (again at position {j})"));
            }
            self.marks[v as usize] = self.stamp;
        }
        Ok(real)
    }
}

/// What is wrong with `row` as the sequence of `start`, or `None`: empty, a first entry other
/// than the start, an entry not below the checker's N, one twice. The check the sequence
/// caches' readers make (the binary cache's reader, the merge of JSON caches), so their writers
/// make it too before a row is written.
pub(super) fn sequence_row_problem(
    start: u32,
    row: &[u32],
    check: &mut ListChecker,
) -> Option<String> {
    match row.first() {
        None => return Some("is empty (a sequence starts with its start)".into()),
        Some(&first) if first != start => {
            return Some(format!("starts with {first}, not with its start {start}"))
        }
        Some(_) => {}
    }
    let stamp = check.next_stamp();
    let n = check.marks.len();
    for (j, &v) in row.iter().enumerate() {
        if v as usize >= n {
            return Some(format!(
                "has entry {v} at position {j}, out of range (0-based, below {n})"
            ));
        }
        if check.marks[v as usize] == stamp {
            return Some(format!("has entry {v} twice (again at position {j})"));
        }
        check.marks[v as usize] = stamp;
    }
    None
}

/// An item out of range of N, as a message.
pub(super) fn item_out_of_range(item: u32, n: usize) -> String {
    format!("item {item} is out of range for N = {n} items (0-based, below {n})")
}
