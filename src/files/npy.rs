//! NumPy `.npy` arrays: the header parsed by hand (a Python-literal parser), float32 and
//! float16 bodies, and the writers. It may touch the host table, [`crate::error`] and the atomic
//! writer only.

use super::{format_err, read, table, write_atomic};
use crate::error::{Error, Result};
use crate::table::Table;
use half::f16;
use std::path::Path;

/// The `.npy` magic string: `\x93NUMPY`.
const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";

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
        Ok(_) => return Err(format!(".npy header is not a dict: {}", excerpt(&text))),
        Err(e) => {
            return Err(format!(
                "cannot parse .npy header {:?}: {e}",
                excerpt(&text)
            ))
        }
    };
    let get = |key: &str| {
        dict.iter()
            .find(|(k, _)| matches!(k, PyLit::Str(s) if s == key))
            .map(|(_, v)| v)
            .ok_or_else(|| format!(".npy header has no '{key}': {}", excerpt(&text)))
    };

    let dtype = match get("descr")? {
        PyLit::Str(s) if s == "<f4" => NpyDtype::F32,
        PyLit::Str(s) if s == "<f2" => NpyDtype::F16,
        PyLit::Str(s) if s.starts_with('>') => {
            return Err(format!(
                "unsupported dtype '{}' (big-endian): expected '<f4' (float32) or '<f2' \
                 (float16); convert with arr.astype('<f4')",
                excerpt(s)
            ))
        }
        PyLit::Str(s) => {
            return Err(format!(
                "unsupported dtype '{}': expected '<f4' (float32) or '<f2' (float16); convert \
                 with arr.astype(np.float32)",
                excerpt(s)
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

/// `text` trimmed, and cut to its first 120 characters (with `…`) so a huge header cannot flood
/// a message.
fn excerpt(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &t[..at]),
        None => t.to_string(),
    }
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
        let mut p = LitParser {
            s: &chars,
            i: 0,
            depth: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != chars.len() {
            return Err(format!("unexpected text at character {}", p.i));
        }
        Ok(v)
    }
}

/// How deep dicts, tuples and lists may nest in a `.npy` header (NumPy writes 2 levels); the
/// parser recurses once a level, so a deeper header is refused rather than overflowing the stack.
const MAX_DEPTH: usize = 32;

/// Recursive-descent parser behind [`PyLit::parse`].
struct LitParser<'a> {
    s: &'a [char],
    i: usize,
    /// Dicts, tuples and lists open around the current position.
    depth: usize,
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
    /// Enter a dict, tuple or list at the current character, refusing one level too deep.
    fn open(&mut self) -> std::result::Result<(), String> {
        if self.depth == MAX_DEPTH {
            return Err(format!(
                "nested more than {MAX_DEPTH} levels deep at character {}",
                self.i
            ));
        }
        self.depth += 1;
        self.i += 1;
        Ok(())
    }
    fn value(&mut self) -> std::result::Result<PyLit, String> {
        match self.peek() {
            None => Err("unexpected end".into()),
            Some('{') => {
                self.open()?;
                let mut items = Vec::new();
                let mut keys = std::collections::HashSet::new();
                loop {
                    if self.peek() == Some('}') {
                        self.i += 1;
                        self.depth -= 1;
                        return Ok(PyLit::Dict(items));
                    }
                    self.ws();
                    let key_at = self.i;
                    let k = self.value()?;
                    let PyLit::Str(name) = &k else {
                        return Err(format!(
                            "a dict key that is not a string at character {key_at}"
                        ));
                    };
                    if !keys.insert(name.clone()) {
                        return Err(format!(
                            "duplicate key '{}' at character {key_at}",
                            excerpt(name)
                        ));
                    }
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
                self.open()?;
                let mut items = Vec::new();
                loop {
                    if self.peek() == Some(close) {
                        self.i += 1;
                        self.depth -= 1;
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
                    .map_err(|_| format!("bad integer '{}'", excerpt(&digits)))
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
                    _ => Err(format!("unexpected name '{}'", excerpt(&word))),
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
