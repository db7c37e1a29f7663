//! Reading embedding tables from files, and writing `.npy` arrays.
//!
//! Three input formats (SPEC §Files), all ending up as a validated [`Table`]:
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

use crate::cache::PendingFile;
use crate::error::{Error, Result};
use crate::table::Table;
use half::f16;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The `.npy` magic string: `\x93NUMPY`.
const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";

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

/// Load a NumPy `.npy` file (format versions 1, 2 and 3) holding a C-order 2-D array of
/// little-endian float32 (`'<f4'`) or float16 (`'<f2'`); halves are widened to float32.
///
/// The header is parsed by hand (it is a small Python dict literal) so that every way a file can
/// be wrong — bad magic, other dtypes, other ranks, Fortran order, truncation — gets its own
/// message instead of a generic parse failure.
pub fn load_npy(path: &Path) -> Result<Table> {
    let bytes = read(path)?;
    let header = parse_npy_header(&bytes).map_err(|reason| format_err(path, reason))?;
    let (n, d) = (header.rows, header.cols);
    let body = &bytes[header.data_offset..];
    let want = n
        .checked_mul(d)
        .and_then(|v| v.checked_mul(header.dtype.bytes()))
        .ok_or_else(|| format_err(path, format!("shape ({n}, {d}) is too large")))?;
    if body.len() < want {
        return Err(format_err(
            path,
            format!(
                "truncated: shape ({n}, {d}) of {} needs {want} bytes of data after the header, \
                 the file has {}",
                header.dtype.descr(),
                body.len()
            ),
        ));
    }
    if body.len() > want {
        return Err(format_err(
            path,
            format!(
                "{} bytes of data after the header, but shape ({n}, {d}) of {} needs {want}; \
                 the file has trailing bytes",
                body.len(),
                header.dtype.descr()
            ),
        ));
    }
    let data = match header.dtype {
        NpyDtype::F32 => body
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        NpyDtype::F16 => body
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
    };
    table(path, data, n, d)
}

/// Load an `embeddings.json` file: `{metadata:{…}, embeddings:[{poem_index, id, embedding:[D
/// floats]}, …]}` (SPEC §Files).
///
/// Rows come out sorted by `poem_index` (file order when no entry has one), because that is the
/// row numbering the user's tools use. Each row's id is its `id`, or its `poem_index` when it has
/// no `id`; with neither anywhere the table has no ids. `metadata` is not needed and not read.
/// Numbers are stored as float32, so a value beyond float32's range is refused, naming its row.
pub fn load_embeddings_json(path: &Path) -> Result<Table> {
    let bytes = read(path)?;
    let root: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        // Python's json.dump writes NaN / Infinity, which JSON does not allow. Parse again with
        // those tokens as strings, so the row check below can name the row that holds one.
        Err(e) => match quote_non_finite(&bytes) {
            Some(fixed) => serde_json::from_slice(&fixed)
                .map_err(|_| format_err(path, format!("malformed JSON: {e}")))?,
            None => return Err(format_err(path, format!("malformed JSON: {e}"))),
        },
    };
    drop(bytes);
    let shape_hint =
        "expected {\"metadata\": {…}, \"embeddings\": [{\"poem_index\": …, \"id\": …, \
                      \"embedding\": [numbers]}, …]}";
    let obj = root.as_object().ok_or_else(|| {
        format_err(
            path,
            format!(
                "the top level is {}, not an object; {shape_hint}",
                kind(&root)
            ),
        )
    })?;
    let entries = match obj.get("embeddings") {
        None => {
            return Err(format_err(
                path,
                format!("missing \"embeddings\"; {shape_hint}"),
            ))
        }
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format_err(
                path,
                format!(
                    "\"embeddings\" is {}, not an array; {shape_hint}",
                    kind(other)
                ),
            ))
        }
    };
    if entries.is_empty() {
        return Err(format_err(
            path,
            "\"embeddings\" is empty (no rows, N = 0)".into(),
        ));
    }

    let mut d = 0usize;
    let mut data: Vec<f32> = Vec::new();
    let mut indices: Vec<Option<u64>> = Vec::with_capacity(entries.len());
    let mut ids: Vec<Option<Value>> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let entry = entry.as_object().ok_or_else(|| {
            format_err(
                path,
                format!(
                    "embeddings[{i}] is {}, not an object with \"embedding\"",
                    kind(entry)
                ),
            )
        })?;
        let poem_index = match entry.get("poem_index") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                format_err(
                    path,
                    format!("embeddings[{i}].poem_index is {v}, not a non-negative integer"),
                )
            })?),
        };
        let row_name = match poem_index {
            Some(p) => format!("embeddings[{i}] (poem_index {p})"),
            None => format!("embeddings[{i}]"),
        };
        let id = match entry.get("id") {
            None | Some(Value::Null) => poem_index.map(Value::from),
            Some(v @ (Value::String(_) | Value::Number(_))) => Some(v.clone()),
            Some(v) => {
                return Err(format_err(
                    path,
                    format!("{row_name}.id is {}, not a string or a number", kind(v)),
                ))
            }
        };
        let values = match entry.get("embedding") {
            None => return Err(format_err(path, format!("{row_name} has no \"embedding\""))),
            Some(Value::Array(a)) => a,
            Some(v) => {
                return Err(format_err(
                    path,
                    format!("{row_name}.embedding is {}, not an array", kind(v)),
                ))
            }
        };
        if i == 0 {
            if values.is_empty() {
                return Err(format_err(
                    path,
                    format!("{row_name}.embedding is empty (dimension D = 0)"),
                ));
            }
            d = values.len();
            data.reserve_exact(entries.len().saturating_mul(d));
        } else if values.len() != d {
            return Err(format_err(
                path,
                format!(
                    "ragged rows: {row_name}.embedding has {} values but embeddings[0] has {d}",
                    values.len()
                ),
            ));
        }
        for (j, v) in values.iter().enumerate() {
            if let Some(tok @ ("NaN" | "Infinity" | "-Infinity")) = v.as_str() {
                return Err(format_err(
                    path,
                    format!("{row_name}.embedding[{j}] is {tok}, not a number: embeddings must be finite"),
                ));
            }
            let x = v.as_f64().ok_or_else(|| {
                format_err(
                    path,
                    format!("{row_name}.embedding[{j}] is {}, not a number", kind(v)),
                )
            })?;
            let x32 = x as f32;
            if !x32.is_finite() {
                return Err(format_err(
                    path,
                    format!(
                        "{row_name}.embedding[{j}] = {v} is outside the float32 range (non-finite \
                         as float32)"
                    ),
                ));
            }
            data.push(x32);
        }
        indices.push(poem_index);
        ids.push(id);
    }

    // Row order: by poem_index when every entry has one; file order when none has.
    let n = entries.len();
    let order: Vec<usize> = match indices.iter().copied().collect::<Option<Vec<u64>>>() {
        Some(indices) => {
            let mut seen: HashMap<u64, usize> = HashMap::with_capacity(n);
            for (i, &p) in indices.iter().enumerate() {
                if let Some(first) = seen.insert(p, i) {
                    return Err(format_err(
                        path,
                        format!(
                            "duplicate poem_index {p} in embeddings[{first}] and embeddings[{i}]"
                        ),
                    ));
                }
            }
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&i| indices[i]);
            order
        }
        None => {
            let missing = indices.iter().position(Option::is_none).unwrap_or(0);
            if let Some(has) = indices.iter().position(Option::is_some) {
                return Err(format_err(
                    path,
                    format!(
                        "embeddings[{missing}] has no poem_index but embeddings[{has}] has one; \
                         give every entry a poem_index or none"
                    ),
                ));
            }
            (0..n).collect()
        }
    };
    if order.iter().enumerate().any(|(k, &i)| k != i) {
        let mut sorted = Vec::with_capacity(data.len());
        for &i in &order {
            sorted.extend_from_slice(&data[i * d..(i + 1) * d]);
        }
        data = sorted;
    }

    // Ids: all or none, and unique (results are keyed by them).
    let has_id = ids.iter().position(Option::is_some);
    let no_id = ids.iter().position(Option::is_none);
    let ids = match ids.into_iter().collect::<Option<Vec<Value>>>() {
        Some(ids) => {
            let mut seen: HashMap<String, usize> = HashMap::with_capacity(n);
            for (i, id) in ids.iter().enumerate() {
                let key = match id {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                if let Some(first) = seen.insert(key, i) {
                    return Err(format_err(
                        path,
                        format!("duplicate id {id} in embeddings[{first}] and embeddings[{i}]"),
                    ));
                }
            }
            Some(order.iter().map(|&i| ids[i].clone()).collect::<Vec<_>>())
        }
        None if has_id.is_some() => {
            return Err(format_err(
                path,
                format!(
                    "embeddings[{}] has neither id nor poem_index but embeddings[{}] has one; \
                     give every entry an id or none",
                    no_id.unwrap_or(0),
                    has_id.unwrap_or(0)
                ),
            ))
        }
        None => None,
    };

    let t = table(path, data, n, d)?;
    match ids {
        Some(ids) => t.with_ids(ids).map_err(|e| in_file(path, e)),
        None => Ok(t),
    }
}

/// Write `table` as a NumPy `.npy` (version 1.0) array of float32, shape `(N, D)`, C order.
///
/// The file is written beside its destination and renamed into place, so a failed write never
/// leaves a partial file. `np.load` reads the result; so does [`load_npy`].
pub fn save_npy_f32(path: &Path, table: &Table) -> Result<()> {
    let mut body = Vec::with_capacity(table.data().len() * 4);
    for v in table.data() {
        body.extend_from_slice(&v.to_le_bytes());
    }
    write_npy(path, "<f4", table.n(), table.d(), &body)
}

/// Write `table` as a NumPy `.npy` (version 1.0) array of float16, shape `(N, D)`, C order; each
/// value rounded to the nearest half (ties to even), as the device's fp16 storage does.
///
/// Half the size of float32, for bundled data and caches. A value beyond float16's range (±65504)
/// is refused with [`Error::Invalid`] naming its row, rather than written as infinity. Written
/// atomically like [`save_npy_f32`].
pub fn save_npy_f16(path: &Path, table: &Table) -> Result<()> {
    let bits = table.to_f16_bits_checked().map_err(|e| match e {
        Error::Invalid(m) => Error::Invalid(format!("{}: {m}", path.display())),
        other => other,
    })?;
    let mut body = Vec::with_capacity(bits.len() * 2);
    for b in bits {
        body.extend_from_slice(&b.to_le_bytes());
    }
    write_npy(path, "<f2", table.n(), table.d(), &body)
}

/// The `format` value of an fp16 `.bin` sidecar.
const FP16_BIN_FORMAT: &str = "fp16-le-rowmajor";

/// The sidecar of an fp16 `.bin` file: `<path>.json` (e.g. `embeddings_fp16.bin.json`).
pub fn fp16_bin_sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".json");
    PathBuf::from(s)
}

/// A checksum of a file's bytes, `"fnv1a64:<16 hex digits>"` (64-bit FNV-1a, read in 1 MiB
/// blocks so any size streams).
///
/// It identifies the source an fp16 `.bin` was converted from, so a cache made from another or
/// an older input is refused. It guards against staleness and mix-ups, not tampering.
pub fn file_checksum(path: &Path) -> Result<String> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut block = vec![0u8; 1 << 20];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    loop {
        let k = match f.read(&mut block) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        for &b in &block[..k] {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    Ok(format!("fnv1a64:{h:016x}"))
}

/// Write `table` as an fp16 `.bin` (N × D little-endian halves, row-major, no header, each value
/// rounded to nearest-even as the device's fp16 storage does) and its sidecar `<path>.json`:
/// `{"format":"fp16-le-rowmajor","n":N,"dim":D,"space":space,"source_checksum":…}`.
///
/// `space` names the transform applied (e.g. `"raw"`, `"mean-centered-v1"`) and
/// `source_checksum` the input it came from (see [`file_checksum`]), so [`load_fp16_bin`] can
/// refuse a stale or foreign file. A value beyond float16's range (±65504) is [`Error::Invalid`]
/// naming its row. Both files go through a temporary file and a rename; the old sidecar is
/// removed before the new `.bin` lands, so no crash leaves a sidecar vouching for the wrong data.
pub fn save_fp16_bin(path: &Path, table: &Table, space: &str, source_checksum: &str) -> Result<()> {
    let bits = table.to_f16_bits_checked().map_err(|e| match e {
        Error::Invalid(m) => Error::Invalid(format!("{}: {m}", path.display())),
        other => other,
    })?;
    let sidecar = fp16_bin_sidecar(path);
    let (bin_pending, bin_file) = PendingFile::create(path)?;
    let (side_pending, mut side_file) = PendingFile::create(&sidecar)?;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };

    let mut w = std::io::BufWriter::with_capacity(1 << 20, bin_file);
    let mut row = Vec::with_capacity(table.d() * 2);
    for r in bits.chunks_exact(table.d()) {
        row.clear();
        for b in r {
            row.extend_from_slice(&b.to_le_bytes());
        }
        w.write_all(&row).map_err(io(path))?;
    }
    let bin_file = w.into_inner().map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e.into_error(),
    })?;
    bin_file.sync_all().map_err(io(path))?;
    drop(bin_file);

    let meta = serde_json::json!({
        "format": FP16_BIN_FORMAT,
        "n": table.n(),
        "dim": table.d(),
        "space": space,
        "source_checksum": source_checksum,
    });
    let mut text = serde_json::to_vec_pretty(&meta).map_err(|e| Error::Io {
        path: sidecar.clone(),
        source: e.into(),
    })?;
    text.push(b'\n');
    side_file.write_all(&text).map_err(io(&sidecar))?;
    side_file.sync_all().map_err(io(&sidecar))?;
    drop(side_file);

    match std::fs::remove_file(&sidecar) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(Error::Io {
                path: sidecar,
                source,
            })
        }
    }
    bin_pending.commit()?;
    side_pending.commit()
}

/// Load an fp16 `.bin` written by [`save_fp16_bin`] (or any N × D little-endian halves with a
/// matching sidecar), widening halves to float32.
///
/// The sidecar `<path>.json` must exist and give `format`, `n`, `dim`, `space` and
/// `source_checksum`; the file must be exactly `n × dim × 2` bytes. With `expect = Some((space,
/// source_checksum))` the sidecar must match both, else the file is stale (made from an older
/// input) or foreign (another input or transform) and is refused: the caller regenerates it.
/// Every refusal is [`Error::Format`] naming the file and what disagrees.
pub fn load_fp16_bin(path: &Path, expect: Option<(&str, &str)>) -> Result<Table> {
    let size = std::fs::metadata(path)
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    let sidecar = fp16_bin_sidecar(path);
    let text = match std::fs::read(&sidecar) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format_err(
                path,
                format!(
                    "missing sidecar {}: an fp16 .bin has no header, so its N, D, space and \
                     source checksum come from the sidecar; regenerate the .bin",
                    sidecar.display()
                ),
            ))
        }
        Err(source) => {
            return Err(Error::Io {
                path: sidecar,
                source,
            })
        }
    };
    let meta: Value = serde_json::from_slice(&text)
        .map_err(|e| format_err(&sidecar, format!("malformed sidecar JSON: {e}")))?;
    let field = |key: &str| {
        meta.get(key).ok_or_else(|| {
            format_err(
                &sidecar,
                format!(
                    "sidecar has no \"{key}\"; expected {{\"format\":\"{FP16_BIN_FORMAT}\", \
                     \"n\", \"dim\", \"space\", \"source_checksum\"}}"
                ),
            )
        })
    };
    let text_field = |key: &str| -> Result<String> {
        let v = field(key)?;
        v.as_str().map(str::to_string).ok_or_else(|| {
            format_err(
                &sidecar,
                format!("sidecar \"{key}\" is {}, not a string", kind(v)),
            )
        })
    };
    let count_field = |key: &str| -> Result<usize> {
        let v = field(key)?;
        v.as_u64()
            .filter(|&x| x >= 1)
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| {
                format_err(
                    &sidecar,
                    format!("sidecar \"{key}\" is {}, not a positive integer", kind(v)),
                )
            })
    };
    let format = text_field("format")?;
    if format != FP16_BIN_FORMAT {
        return Err(format_err(
            &sidecar,
            format!("sidecar format is \"{format}\", expected \"{FP16_BIN_FORMAT}\""),
        ));
    }
    let n = count_field("n")?;
    let d = count_field("dim")?;
    let space = text_field("space")?;
    let checksum = text_field("source_checksum")?;
    if let Some((want_space, want_checksum)) = expect {
        if want_space != space || want_checksum != checksum {
            return Err(format_err(
                path,
                format!(
                    "stale or foreign fp16 file: expected space \"{want_space}\" and source \
                     checksum {want_checksum}, found space \"{space}\" and source checksum \
                     {checksum} in {}; regenerate it from the source",
                    sidecar.display()
                ),
            ));
        }
    }
    let want = (n as u64)
        .checked_mul(d as u64)
        .and_then(|v| v.checked_mul(2))
        .ok_or_else(|| format_err(&sidecar, format!("shape {n} × {d} is too large")))?;
    if size != want {
        return Err(format_err(
            path,
            format!(
                "size {size} bytes disagrees with its sidecar {}: n × dim × 2 = {n} × {d} × 2 = \
                 {want} bytes",
                sidecar.display()
            ),
        ));
    }
    let bytes = read(path)?;
    if bytes.len() as u64 != want {
        return Err(format_err(
            path,
            format!(
                "read {} bytes, expected {want} (did the file change while loading?)",
                bytes.len()
            ),
        ));
    }
    let data = bytes
        .chunks_exact(2)
        .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect();
    table(path, data, n, d)
}

/// Element types `load_npy` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NpyDtype {
    F32,
    F16,
}

impl NpyDtype {
    fn bytes(self) -> usize {
        match self {
            NpyDtype::F32 => 4,
            NpyDtype::F16 => 2,
        }
    }
    fn descr(self) -> &'static str {
        match self {
            NpyDtype::F32 => "'<f4'",
            NpyDtype::F16 => "'<f2'",
        }
    }
}

/// What a `.npy` header says about the array.
#[derive(Debug)]
struct NpyHeader {
    dtype: NpyDtype,
    rows: usize,
    cols: usize,
    data_offset: usize,
}

/// Check the magic and version, then read the header dict: `descr`, `fortran_order`, `shape`.
fn parse_npy_header(bytes: &[u8]) -> std::result::Result<NpyHeader, String> {
    if bytes.len() < 8 || &bytes[..6] != NPY_MAGIC {
        return Err("not a .npy file (bad magic: it does not start with \\x93NUMPY)".into());
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len_bytes, utf8) = match major {
        1 => (2, false),
        2 => (4, false),
        3 => (4, true),
        _ => {
            return Err(format!(
                "unsupported .npy format version {major}.{minor} (expected 1.0, 2.0 or 3.0)"
            ))
        }
    };
    let start = 8 + len_bytes;
    if bytes.len() < start {
        return Err("truncated .npy header".into());
    }
    let header_len = if len_bytes == 2 {
        u16::from_le_bytes([bytes[8], bytes[9]]) as usize
    } else {
        u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| {
            format!(
                "truncated .npy header: it claims {header_len} bytes, the file has {} after the \
                 length field",
                bytes.len() - start
            )
        })?;
    let raw = &bytes[start..end];
    let text: String = if utf8 {
        std::str::from_utf8(raw)
            .map_err(|e| format!(".npy header is not valid UTF-8: {e}"))?
            .to_string()
    } else {
        raw.iter().map(|&b| b as char).collect()
    };

    let dict = match PyLit::parse(&text) {
        Ok(PyLit::Dict(d)) => d,
        Ok(_) => return Err(format!(".npy header is not a dict: {}", text.trim())),
        Err(e) => return Err(format!("cannot parse .npy header {:?}: {e}", text.trim())),
    };
    let get = |key: &str| {
        dict.iter()
            .find(|(k, _)| matches!(k, PyLit::Str(s) if s == key))
            .map(|(_, v)| v)
            .ok_or_else(|| format!(".npy header has no '{key}': {}", text.trim()))
    };

    let dtype = match get("descr")? {
        PyLit::Str(s) if s == "<f4" => NpyDtype::F32,
        PyLit::Str(s) if s == "<f2" => NpyDtype::F16,
        PyLit::Str(s) if s.starts_with('>') => {
            return Err(format!(
                "unsupported dtype '{s}' (big-endian): expected '<f4' (float32) or '<f2' \
                 (float16); convert with arr.astype('<f4')"
            ))
        }
        PyLit::Str(s) => {
            return Err(format!(
                "unsupported dtype '{s}': expected '<f4' (float32) or '<f2' (float16); convert \
                 with arr.astype(np.float32)"
            ))
        }
        _ => {
            return Err(
                "unsupported dtype (a structured array): expected '<f4' (float32) or '<f2' \
                 (float16)"
                    .into(),
            )
        }
    };
    match get("fortran_order")? {
        PyLit::Bool(false) => {}
        PyLit::Bool(true) => {
            return Err(
                "fortran_order is True (column-major); save a C-order array \
                 (np.ascontiguousarray)"
                    .into(),
            )
        }
        _ => return Err("fortran_order in the .npy header is not True or False".into()),
    }
    let shape = match get("shape")? {
        PyLit::Tuple(items) => items
            .iter()
            .map(|v| match v {
                PyLit::Int(i) => usize::try_from(*i).map_err(|_| format!("bad shape entry {i}")),
                _ => Err("shape entries must be integers".to_string()),
            })
            .collect::<std::result::Result<Vec<usize>, String>>()?,
        _ => return Err("shape in the .npy header is not a tuple".into()),
    };
    let shape_text = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let (rows, cols) = match shape[..] {
        [r, c] => (r, c),
        _ => {
            return Err(format!(
                "array has shape {shape_text} ({}-D); expected a 2-D array (N rows × D dims)",
                shape.len()
            ))
        }
    };
    if rows == 0 {
        return Err(format!("array has shape {shape_text}: no rows (N = 0)"));
    }
    if cols == 0 {
        return Err(format!("array has shape {shape_text}: dimension D = 0"));
    }
    Ok(NpyHeader {
        dtype,
        rows,
        cols,
        data_offset: end,
    })
}

/// The subset of Python literals a `.npy` header uses.
#[derive(Debug, PartialEq)]
enum PyLit {
    Str(String),
    Int(i128),
    Bool(bool),
    None,
    Tuple(Vec<PyLit>),
    Dict(Vec<(PyLit, PyLit)>),
}

impl PyLit {
    /// Parse one literal spanning all of `text` (surrounding whitespace allowed).
    fn parse(text: &str) -> std::result::Result<PyLit, String> {
        let chars: Vec<char> = text.chars().collect();
        let mut p = LitParser { s: &chars, i: 0 };
        let v = p.value()?;
        p.ws();
        if p.i != chars.len() {
            return Err(format!("unexpected text at character {}", p.i));
        }
        Ok(v)
    }
}

/// Recursive-descent parser behind [`PyLit::parse`].
struct LitParser<'a> {
    s: &'a [char],
    i: usize,
}

impl LitParser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<char> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn value(&mut self) -> std::result::Result<PyLit, String> {
        match self.peek() {
            None => Err("unexpected end".into()),
            Some('{') => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    if self.peek() == Some('}') {
                        self.i += 1;
                        return Ok(PyLit::Dict(items));
                    }
                    let k = self.value()?;
                    if self.peek() != Some(':') {
                        return Err(format!("expected ':' at character {}", self.i));
                    }
                    self.i += 1;
                    let v = self.value()?;
                    items.push((k, v));
                    match self.peek() {
                        Some(',') => self.i += 1,
                        Some('}') => {}
                        _ => return Err(format!("expected ',' or '}}' at character {}", self.i)),
                    }
                }
            }
            Some(open @ ('(' | '[')) => {
                let close = if open == '(' { ')' } else { ']' };
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    if self.peek() == Some(close) {
                        self.i += 1;
                        return Ok(PyLit::Tuple(items));
                    }
                    items.push(self.value()?);
                    match self.peek() {
                        Some(',') => self.i += 1,
                        Some(c) if c == close => {}
                        _ => {
                            return Err(format!(
                                "expected ',' or '{close}' at character {}",
                                self.i
                            ))
                        }
                    }
                }
            }
            Some(q @ ('\'' | '"')) => {
                self.i += 1;
                let mut out = String::new();
                while let Some(&c) = self.s.get(self.i) {
                    self.i += 1;
                    if c == q {
                        return Ok(PyLit::Str(out));
                    }
                    if c == '\\' {
                        if let Some(&e) = self.s.get(self.i) {
                            self.i += 1;
                            out.push(e);
                        }
                    } else {
                        out.push(c);
                    }
                }
                Err("unterminated string".into())
            }
            Some(c) if c.is_ascii_digit() || c == '-' || c == '+' => {
                let start = self.i;
                self.i += 1;
                while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                    self.i += 1;
                }
                let digits: String = self.s[start..self.i].iter().collect();
                // Python 2 wrote longs as `2048L`.
                if matches!(self.s.get(self.i), Some('L' | 'l')) {
                    self.i += 1;
                }
                digits
                    .parse::<i128>()
                    .map(PyLit::Int)
                    .map_err(|_| format!("bad integer '{digits}'"))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == '_')
                {
                    self.i += 1;
                }
                let word: String = self.s[start..self.i].iter().collect();
                match word.as_str() {
                    "True" => Ok(PyLit::Bool(true)),
                    "False" => Ok(PyLit::Bool(false)),
                    "None" => Ok(PyLit::None),
                    _ => Err(format!("unexpected name '{word}'")),
                }
            }
            Some(c) => Err(format!("unexpected '{c}' at character {}", self.i)),
        }
    }
}

/// Write a version-1.0 `.npy` file atomically: header padded (like NumPy) so the data starts on a
/// 64-byte boundary, then `body`.
fn write_npy(path: &Path, descr: &str, n: usize, d: usize, body: &[u8]) -> Result<()> {
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({n}, {d}), }}");
    let unpadded = NPY_MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let header_len = u16::try_from(header.len()).map_err(|_| {
        Error::Invalid(format!(
            "{}: .npy header for shape ({n}, {d}) is too long",
            path.display()
        ))
    })?;
    let mut bytes = Vec::with_capacity(10 + header.len() + body.len());
    bytes.extend_from_slice(NPY_MAGIC);
    bytes.extend_from_slice(&[1, 0]);
    bytes.extend_from_slice(&header_len.to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(body);
    write_atomic(path, &bytes)
}

/// Write `bytes` to a temporary file beside `path`, then rename it over `path`; on failure the
/// temporary file is removed and the destination is untouched.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{}: not a file path", path.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        // Best effort: the error that matters is the write's, not the clean-up's.
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

/// Read a whole file, naming it in the error.
fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Build the table, reporting a bad value (NaN, Inf) as a format error of this file.
fn table(path: &Path, data: Vec<f32>, n: usize, d: usize) -> Result<Table> {
    Table::new(data, n, d).map_err(|e| in_file(path, e))
}

/// Turn a table's `Invalid` error into a `Format` error of `path`.
fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::Invalid(reason) => format_err(path, reason),
        other => other,
    }
}

/// A `Format` error of `path`.
fn format_err(path: &Path, reason: String) -> Error {
    Error::Format {
        path: PathBuf::from(path),
        reason,
    }
}

/// A JSON value's kind with a short excerpt, for "X is …, not a number" messages.
fn kind(v: &Value) -> String {
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

/// Write row ids as a JSON array (beside an fp16 `.bin`, which has no room for them), through a
/// temporary file and a rename.
pub fn save_ids(path: &Path, ids: &[Value]) -> Result<()> {
    let (pending, mut file) = PendingFile::create(path)?;
    let text = serde_json::to_vec(ids).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    file.write_all(&text)
        .and_then(|_| file.sync_all())
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
    drop(file);
    pending.commit()
}

/// Read row ids written by [`save_ids`].
pub fn load_ids(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match serde_json::from_slice(&text) {
        Ok(Value::Array(ids)) => Ok(ids),
        Ok(_) => Err(Error::Format {
            path: path.to_path_buf(),
            reason: "expected a JSON array of ids".into(),
        }),
        Err(e) => Err(Error::Format {
            path: path.to_path_buf(),
            reason: format!("malformed JSON: {e}"),
        }),
    }
}

/// The JSON text with bare `NaN`, `Infinity` and `-Infinity` tokens (outside strings) quoted,
/// or `None` when there are none.
fn quote_non_finite(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() + 64);
    let (mut i, mut in_str, mut changed) = (0, false, false);
    while i < bytes.len() {
        let c = bytes[i];
        if in_str {
            out.push(c);
            if c == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1]);
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else if c == b'"' {
            in_str = true;
            out.push(c);
        } else if let Some(tok) = [&b"-Infinity"[..], b"Infinity", b"NaN"]
            .into_iter()
            .find(|t| bytes[i..].starts_with(t))
        {
            out.push(b'"');
            out.extend_from_slice(tok);
            out.push(b'"');
            i += tok.len();
            changed = true;
            continue;
        } else {
            out.push(c);
        }
        i += 1;
    }
    changed.then_some(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_literals() {
        let h = "{'descr': '<f2', 'fortran_order': False, 'shape': (2048L, 384), }   \n";
        let PyLit::Dict(d) = PyLit::parse(h).unwrap() else {
            panic!("not a dict")
        };
        assert_eq!(d.len(), 3);
        assert_eq!(
            d[2].1,
            PyLit::Tuple(vec![PyLit::Int(2048), PyLit::Int(384)])
        );
        assert_eq!(
            PyLit::parse("(3,)").unwrap(),
            PyLit::Tuple(vec![PyLit::Int(3)])
        );
        assert_eq!(PyLit::parse("()").unwrap(), PyLit::Tuple(vec![]));
        assert!(PyLit::parse("{'a': 1").is_err());
        assert!(PyLit::parse("{'a' 1}").is_err());
        assert!(PyLit::parse("'abc").is_err());
    }
}
