//! Reading embedding tables from files, and writing `.npy` arrays. Host files only: the loaders
//! may touch the host [`Table`], [`crate::error`], the checksum and the atomic writer
//! (`crate::pending_file`); no device, no engine.
//!
//! The input formats, all ending up as a validated [`Table`]:
//!
//! - `.npy`: a NumPy 2-D array of little-endian float32 (`'<f4'`) or float16 (`'<f2'`); the header
//!   is parsed here by hand, halves are widened to float32 on load.
//! - `embeddings.json` (any `.json`): `{metadata:{…}, embeddings:[{poem_index, id, embedding:[…]}, …]}`;
//!   rows are put in `poem_index` order and the ids are kept so results can be keyed by them.
//! - `.f32`: raw little-endian float32, row-major, no header; the dimension has to be given.
//! - `.bin` (`embeddings_fp16.bin`): little-endian IEEE halves, row-major, no header, with a JSON
//!   sidecar `<file>.json` giving N, D, the space (e.g. `mean-centered-v1`) and the source file's
//!   checksum, so a stale or foreign file is refused instead of silently used (the driver's
//!   one-time fp16 conversion cached beside the input).
//!
//! Every error names the file: [`Error::Io`] when it cannot be read, [`Error::Format`] when its
//! contents are wrong (with the row, column or byte count at fault), so the message can go to the
//! user unchanged.
//!
//! One file per format: `npy.rs`, `json.rs` (`embeddings.json`), `fp16_bin.rs` (the fp16 `.bin`
//! with its sidecar); this file holds the entry point, `.f32`, the ids sidecar and the helpers
//! they share (atomic writes, the output check, errors that name the file).

mod fp16_bin;
mod json;
mod npy;

/// The atomic writes' checks and whole-file write, from the crate's atomic-write module.
pub use crate::pending_file::{check_output, file_kind, write_atomic};
pub use fp16_bin::{
    bytes_checksum, file_checksum, fp16_bin_sidecar, load_fp16_bin, load_fp16_bin_space,
    save_fp16_bin, words_checksum,
};
pub use json::load_embeddings_json;
pub use npy::{load_npy, save_npy_f16, save_npy_f32};

use crate::error::{Error, Result};
use crate::pending_file::PendingFile;
use crate::table::Table;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The space of rows mean-centred before they were saved (an fp16 `.bin`'s sidecar says so).
pub const CENTERED_SPACE: &str = "mean-centered-v1";

/// [`load_table`] and whether the rows are already mean-centred: an fp16 `.bin` carries the
/// space it was saved in ([`CENTERED_SPACE`] or `"raw"`); the other formats hold rows as given
/// (not centred). A program asked to centre such a table must not centre it again, and labels
/// what it writes with the space the rows are in, asked for or not.
pub fn load_table_centred(path: &Path, dim: Option<usize>) -> Result<(Table, bool)> {
    let is_bin = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("bin"));
    if is_bin {
        let (t, space) = load_fp16_bin_space(path, None)?;
        return Ok((t, space == CENTERED_SPACE));
    }
    Ok((load_table(path, dim)?, false))
}

/// Load any supported table file, choosing the format by extension: `.npy`, `.json`
/// (`embeddings.json`), `.bin` (fp16 with its `<file>.json` sidecar, see [`load_fp16_bin`]; no
/// staleness check here) or `.f32` (which needs `dim`, the command line's `--dim`, because the
/// file has no header).
///
/// This is the one entry point the driver and the Lua binding use, so that every format gives the
/// same kind of errors: [`Error::Io`] for a missing or unreadable file, [`Error::Format`] for bad
/// contents or an unknown extension, [`Error::Invalid`] for a `.f32` file without a dimension.
pub fn load_table(path: &Path, dim: Option<usize>) -> Result<Table> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("npy") => load_npy(path),
        Some("json") => load_embeddings_json(path),
        Some("bin") => load_fp16_bin(path, None),
        Some("f32") => match dim {
            Some(dim) => load_f32(path, dim),
            None => Err(Error::Invalid(format!(
                "{}: a .f32 file has no header, so its dimension is required (--dim)",
                path.display()
            ))),
        },
        other => Err(format_err(
            path,
            format!(
                "unsupported file type {}: expected .npy (float32 or float16, 2-D), .json \
                 (embeddings.json), .bin (fp16 with its .json sidecar) or .f32 (raw float32, \
                 with --dim)",
                match other {
                    Some(e) => format!("'.{e}'"),
                    None => "(no extension)".to_string(),
                }
            ),
        )),
    }
}

/// Load a raw `.f32` file: little-endian float32 values, row-major, `dim` values per row, no
/// header. The row count is the file size divided by `4 × dim`.
///
/// The format carries no shape, so a size that is not a whole number of rows is refused rather
/// than silently truncated (it usually means the wrong `dim`).
pub fn load_f32(path: &Path, dim: usize) -> Result<Table> {
    if dim == 0 {
        return Err(Error::Invalid(format!(
            "{}: dimension 0 for a .f32 file (D must be at least 1)",
            path.display()
        )));
    }
    let row_bytes = dim.checked_mul(4).ok_or_else(|| {
        Error::Invalid(format!("{}: dimension {dim} is too large", path.display()))
    })?;
    let bytes = read(path)?;
    if bytes.is_empty() {
        return Err(format_err(path, "empty file (no rows, N = 0)".into()));
    }
    if !bytes.len().is_multiple_of(row_bytes) {
        return Err(format_err(
            path,
            format!(
                "size {} bytes is not a multiple of a row of dim {dim} (4 × {dim} = {row_bytes} \
                 bytes); is the dimension right?",
                bytes.len()
            ),
        ));
    }
    let n = bytes.len() / row_bytes;
    let data = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    table(path, data, n, dim)
}

/// Read a whole file, naming it in the error.
pub(super) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Build the table, reporting a bad value (NaN, Inf) as a format error of this file.
pub(super) fn table(path: &Path, data: Vec<f32>, n: usize, d: usize) -> Result<Table> {
    Table::new(data, n, d).map_err(|e| in_file(path, e))
}

/// Turn a table's `Invalid` error into a `Format` error of `path`.
pub(super) fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::Invalid(reason) => format_err(path, reason),
        other => other,
    }
}

/// A `Format` error of `path`.
pub(super) fn format_err(path: &Path, reason: String) -> Error {
    Error::Format {
        path: PathBuf::from(path),
        reason,
    }
}

/// A JSON value's kind with a short excerpt, for "X is …, not a number" messages.
pub(super) fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(s) if s.chars().count() > 20 => {
            format!("a string (\"{}…\")", s.chars().take(20).collect::<String>())
        }
        Value::String(s) => format!("a string (\"{s}\")"),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// The format tag of an ids sidecar ([`save_ids`]).
pub const IDS_FORMAT: &str = "diversity-ids-v1";

/// Write the row ids of a table of `n` rows (`None`: it has none) beside an fp16 `.bin`, which
/// has no room for them, through a temporary file and a rename, as a JSON object that lets
/// [`load_ids`] refuse a stale, foreign or edited copy:
/// `{"format":"diversity-ids-v1","source_checksum":…,"n":N,"ids":[…] | null,"ids_checksum":…}`
/// — `source_checksum` the input the table came from ([`file_checksum`]), `ids_checksum` the
/// checksum of the `ids` array's JSON text ([`bytes_checksum`]).
pub fn save_ids(path: &Path, ids: Option<&[Value]>, n: usize, source_checksum: &str) -> Result<()> {
    let (pending, mut file) = PendingFile::create(path)?;
    let json_err = |e: serde_json::Error| Error::Io {
        path: path.to_path_buf(),
        source: e.into(),
    };
    let ids_text = serde_json::to_string(&ids).map_err(json_err)?;
    let doc = serde_json::json!({
        "format": IDS_FORMAT,
        "source_checksum": source_checksum,
        "n": n,
        "ids": ids,
        "ids_checksum": bytes_checksum(ids_text.as_bytes()),
    });
    let text = serde_json::to_vec(&doc).map_err(json_err)?;
    file.write_all(&text)
        .and_then(|_| file.sync_all())
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
    drop(file);
    pending.commit()
}

/// Read the ids written by [`save_ids`] for a table of `n` rows from the input whose checksum is
/// `source_checksum`: `Some(ids)`, or `None` for a table without ids. A sidecar of another input
/// or size, an edited one (its ids no longer match their checksum), an old plain-array one or
/// malformed JSON is an [`Error::Format`] naming the file and the cause.
pub fn load_ids(path: &Path, n: usize, source_checksum: &str) -> Result<Option<Vec<Value>>> {
    let bad = |reason: String| Error::Format {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let doc: Value =
        serde_json::from_slice(&text).map_err(|e| bad(format!("malformed JSON: {e}")))?;
    if doc.get("format").and_then(Value::as_str) != Some(IDS_FORMAT) {
        return Err(bad(format!(
            "not an ids sidecar of this version (expected \"format\":\"{IDS_FORMAT}\")"
        )));
    }
    let saved = doc
        .get("source_checksum")
        .and_then(Value::as_str)
        .unwrap_or("");
    if saved != source_checksum {
        return Err(bad(format!(
            "written for another input (source checksum {saved}, the input's is {source_checksum})"
        )));
    }
    let ids = doc.get("ids").cloned().unwrap_or(Value::Null);
    let ids_text = serde_json::to_string(&ids).map_err(|e| bad(e.to_string()))?;
    if doc.get("ids_checksum").and_then(Value::as_str) != Some(&bytes_checksum(ids_text.as_bytes()))
    {
        return Err(bad(
            "its ids were changed after it was written (checksum)".into()
        ));
    }
    if doc.get("n").and_then(Value::as_u64) != Some(n as u64) {
        return Err(bad(format!(
            "written for a table of {} rows, not {n}",
            doc["n"]
        )));
    }
    match ids {
        Value::Null => Ok(None),
        Value::Array(ids) if ids.len() == n => Ok(Some(ids)),
        Value::Array(ids) => Err(bad(format!("{} ids for {n} rows", ids.len()))),
        other => Err(bad(format!("ids is {}, not an array", kind(&other)))),
    }
}

/// A path made absolute and free of symlinks, `.` and `..`: [`std::fs::canonicalize`] when it
/// exists, else its parent's canonical form joined with its file name (an output not yet
/// written still resolves to where it would be written).
fn resolve(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = std::fs::canonicalize(path) {
        return Some(p);
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(resolve(parent)?.join(name))
}

/// Whether `a` and `b` name the same file: the same device and inode when both exist (hard links
/// and symlinks included), else the same resolved location ([`std::fs::canonicalize`] of what
/// exists). The one identity check behind "an output may never be an input": the driver, the
/// command line, [`crate::cache::merge_caches`] and the compatibility shim all ask it (in Lua,
/// `diversity.same_file`).
pub fn same_file(a: &Path, b: &Path) -> bool {
    if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        use std::os::unix::fs::MetadataExt;
        return ma.dev() == mb.dev() && ma.ino() == mb.ino();
    }
    match (resolve(a), resolve(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}
