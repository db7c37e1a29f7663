//! The fp16 `.bin` cache beside an input: halves, row-major, no header, and a JSON sidecar
//! (N, D, space, the source's checksum, the `.bin`'s own checksum) so a truncated, stale,
//! foreign or edited file is refused. It may touch the host table, the checksum, [`crate::error`]
//! and the atomic writer only.

use super::{format_err, kind, read, table};
use crate::checksum::{fnv1a64, FNV64_PRIME, FNV64_START};
use crate::error::{Error, Result};
use crate::pending_file::PendingFile;
use crate::table::Table;
use half::f16;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

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
    let mut h = FNV64_START;
    loop {
        let k = match f.read(&mut block) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        h = fnv1a64(h, &block[..k]);
    }
    Ok(format!("fnv1a64:{h:016x}"))
}

/// [`file_checksum`] of bytes in memory: `"fnv1a64:<16 hex digits>"`, the same value the
/// bytes have as a file (the driver checksums its checkpoint files with it as it writes them).
pub fn bytes_checksum(bytes: &[u8]) -> String {
    format!("fnv1a64:{:016x}", fnv1a64(FNV64_START, bytes))
}

/// A fast checksum of bytes in memory, `"w64:<16 hex digits>"`: four lanes of 64-bit FNV-1a
/// steps over little-endian 8-byte words (each step followed by a rotation, the last partial
/// block zero-padded), joined by FNV-1a over the length and the lanes. About 8 bytes a
/// multiply instead of one, for the checkpoint's hundreds of MB a batch; like every checksum
/// here, it catches damage and stale files, not an editor who recomputes it (the checkpoint's
/// rows are checked for what they mean as well).
pub fn words_checksum(bytes: &[u8]) -> String {
    const P: u64 = FNV64_PRIME;
    let mut h = [
        FNV64_START,
        FNV64_START ^ 1,
        FNV64_START ^ 2,
        FNV64_START ^ 3,
    ];
    let mut step = |block: &[u8]| {
        for (l, lane) in h.iter_mut().enumerate() {
            let w = u64::from_le_bytes(block[l * 8..l * 8 + 8].try_into().expect("8 bytes"));
            *lane = ((*lane ^ w).wrapping_mul(P)).rotate_left(29);
        }
    };
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        step(block);
    }
    let mut tail = [0u8; 32];
    tail[..blocks.remainder().len()].copy_from_slice(blocks.remainder());
    step(&tail);
    let mut out = fnv1a64(FNV64_START, &(bytes.len() as u64).to_le_bytes());
    for lane in h {
        out = fnv1a64(out, &lane.to_le_bytes());
    }
    format!("w64:{out:016x}")
}

/// Write `table` as an fp16 `.bin` (N × D little-endian halves, row-major, no header, each value
/// rounded to nearest-even as the device's fp16 storage does) and its sidecar `<path>.json`:
/// `{"format":"fp16-le-rowmajor","n":N,"dim":D,"space":space,"source_checksum":…,
/// "checksum":…}`.
///
/// `space` names the transform applied (e.g. `"raw"`, `"mean-centered-v1"`),
/// `source_checksum` the input it came from (see [`file_checksum`]) and `checksum` the `.bin`'s
/// own bytes ([`bytes_checksum`]), so [`load_fp16_bin`] can refuse a stale, foreign or edited
/// file. A value beyond float16's range (±65504) is [`Error::Invalid`]
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
    let mut h = FNV64_START;
    for r in bits.chunks_exact(table.d()) {
        row.clear();
        for b in r {
            row.extend_from_slice(&b.to_le_bytes());
        }
        h = fnv1a64(h, &row);
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
        "checksum": format!("fnv1a64:{h:016x}"),
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
/// `source_checksum`; the file must be exactly `n × dim × 2` bytes, and its bytes must have the
/// sidecar's `checksum` (checked once, as the file is read). With `expect = Some((space,
/// source_checksum))` (a cache this crate wrote) the sidecar must match both and must carry a
/// `checksum`, else the file is stale (made from an older input), foreign (another input or
/// transform) or from before checksums, and is refused: the caller regenerates it. Without
/// `expect` (a `.bin` given as input) a sidecar without `checksum` is accepted, as sidecars
/// written by other tools have none. Every refusal is [`Error::Format`] naming the file and
/// what disagrees.
pub fn load_fp16_bin(path: &Path, expect: Option<(&str, &str)>) -> Result<Table> {
    load_fp16_bin_space(path, expect).map(|(t, _)| t)
}

/// [`load_fp16_bin`], also returning the space its sidecar records (e.g. `"raw"`,
/// `"mean-centered-v1"`): the transform the rows already carry, which travels with the file.
pub fn load_fp16_bin_space(path: &Path, expect: Option<(&str, &str)>) -> Result<(Table, String)> {
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
                     \"n\", \"dim\", \"space\", \"source_checksum\", \"checksum\"}}"
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
    let own = match meta.get("checksum") {
        None if expect.is_none() => None,
        _ => Some(text_field("checksum")?),
    };
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
    if let Some(own) = own {
        let got = bytes_checksum(&bytes);
        if got != own {
            return Err(format_err(
                path,
                format!(
                    "checksum {got} disagrees with its sidecar {} ({own}): the .bin was edited, \
                     damaged or replaced after it was written; regenerate it from the source",
                    sidecar.display()
                ),
            ));
        }
    }
    let data = bytes
        .chunks_exact(2)
        .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect();
    Ok((table(path, data, n, d)?, space))
}
