//! `embeddings.json`: rows in `poem_index` order, ids kept, bare NaN/Infinity tokens named. It
//! may touch the host table and [`crate::error`] only.

use super::{format_err, in_file, kind, read, table};
use crate::error::Result;
use crate::table::Table;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// Load an `embeddings.json` file: `{metadata:{…}, embeddings:[{poem_index, id, embedding:[D
/// floats]}, …]}`.
///
/// Rows come out sorted by `poem_index` (file order when no entry has one), because that is the
/// row numbering the user's tools use. Each row's id is its `id`, or its `poem_index` when it has
/// no `id`; with neither anywhere the table has no ids. `metadata` is not needed and not read.
/// Numbers are stored as float32, so a value beyond float32's range is refused, naming its row.
pub fn load_embeddings_json(path: &Path) -> Result<Table> {
    let bytes = read(path)?;
    let root = parse_json(path, &bytes)?;
    let text_len = bytes.len();
    drop(bytes);
    let entries = embeddings(path, &root)?;
    let mut rows = Rows {
        d: 0,
        data: Vec::new(),
        indices: Vec::with_capacity(entries.len()),
        ids: Vec::with_capacity(entries.len()),
    };
    for (i, entry) in entries.iter().enumerate() {
        rows.push(path, i, entry, entries.len(), text_len)?;
    }
    let Rows {
        d,
        mut data,
        indices,
        ids,
    } = rows;
    let n = entries.len();
    let order = row_order(path, &indices)?;
    if order.iter().enumerate().any(|(k, &i)| k != i) {
        let mut sorted = Vec::with_capacity(data.len());
        for &i in &order {
            sorted.extend_from_slice(&data[i * d..(i + 1) * d]);
        }
        data = sorted;
    }
    let ids = unique_ids(path, ids, &order)?;
    let t = table(path, data, n, d)?;
    match ids {
        Some(ids) => t.with_ids(ids).map_err(|e| in_file(path, e)),
        None => Ok(t),
    }
}

/// The file's JSON. Python's json.dump writes NaN / Infinity, which JSON does not allow: where
/// plain parsing fails, parse again with those tokens as strings, so the row check can name the
/// row that holds one.
fn parse_json(path: &Path, bytes: &[u8]) -> Result<Value> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(e) => match quote_non_finite(bytes) {
            Some(fixed) => serde_json::from_slice(&fixed)
                .map_err(|_| format_err(path, format!("malformed JSON: {e}"))),
            None => Err(format_err(path, format!("malformed JSON: {e}"))),
        },
    }
}

/// What an `embeddings.json` holds, for the messages about its shape.
const SHAPE_HINT: &str = "expected {\"metadata\": {…}, \"embeddings\": [{\"poem_index\": …, \
                          \"id\": …, \"embedding\": [numbers]}, …]}";

/// The `embeddings` array of the top-level object, not empty.
fn embeddings<'v>(path: &Path, root: &'v Value) -> Result<&'v Vec<Value>> {
    let obj = root.as_object().ok_or_else(|| {
        format_err(
            path,
            format!(
                "the top level is {}, not an object; {SHAPE_HINT}",
                kind(root)
            ),
        )
    })?;
    let entries = match obj.get("embeddings") {
        None => {
            return Err(format_err(
                path,
                format!("missing \"embeddings\"; {SHAPE_HINT}"),
            ))
        }
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format_err(
                path,
                format!(
                    "\"embeddings\" is {}, not an array; {SHAPE_HINT}",
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
    Ok(entries)
}

/// The rows read so far, in file order: their dimension, values, `poem_index` and id.
struct Rows {
    d: usize,
    data: Vec<f32>,
    indices: Vec<Option<u64>>,
    ids: Vec<Option<Value>>,
}

impl Rows {
    /// Entry `i` of `n` (the file `text_len` bytes long): its `poem_index`, its id (else its
    /// `poem_index`) and its `embedding`, whose length fixes D at the first row.
    fn push(
        &mut self,
        path: &Path,
        i: usize,
        entry: &Value,
        n: usize,
        text_len: usize,
    ) -> Result<()> {
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
        self.check_width(path, i, &row_name, values.len(), n, text_len)?;
        for (j, v) in values.iter().enumerate() {
            self.data.push(value(path, &row_name, j, v)?);
        }
        self.indices.push(poem_index);
        self.ids.push(id);
        Ok(())
    }

    /// Row `i`'s `len` values: the first row fixes D (and reserves room for the rows), every
    /// other must have D.
    fn check_width(
        &mut self,
        path: &Path,
        i: usize,
        row_name: &str,
        len: usize,
        n: usize,
        text_len: usize,
    ) -> Result<()> {
        if i == 0 {
            if len == 0 {
                return Err(format_err(
                    path,
                    format!("{row_name}.embedding is empty (dimension D = 0)"),
                ));
            }
            self.d = len;
            // Reserve for every row only as far as the text could hold it (a value takes at
            // least two bytes, "0,"): a long first row among many short ones is refused below as
            // ragged, and must not reserve N × D first.
            self.data
                .reserve_exact(n.saturating_mul(self.d).min(text_len / 2));
        } else if len != self.d {
            return Err(format_err(
                path,
                format!(
                    "ragged rows: {row_name}.embedding has {len} values but embeddings[0] has {}",
                    self.d
                ),
            ));
        }
        Ok(())
    }
}

/// Value `j` of a row's embedding as float32: a finite number within float32's range.
fn value(path: &Path, row_name: &str, j: usize, v: &Value) -> Result<f32> {
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
    Ok(x32)
}

/// Row order: by poem_index when every entry has one (each once); file order when none has.
fn row_order(path: &Path, indices: &[Option<u64>]) -> Result<Vec<usize>> {
    let n = indices.len();
    match indices.iter().copied().collect::<Option<Vec<u64>>>() {
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
            Ok(order)
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
            Ok((0..n).collect())
        }
    }
}

/// Ids: all or none, and unique (results are keyed by them); in `order`.
fn unique_ids(path: &Path, ids: Vec<Option<Value>>, order: &[usize]) -> Result<Option<Vec<Value>>> {
    let has_id = ids.iter().position(Option::is_some);
    let no_id = ids.iter().position(Option::is_none);
    match ids.into_iter().collect::<Option<Vec<Value>>>() {
        Some(ids) => {
            let mut seen: HashMap<String, usize> = HashMap::with_capacity(ids.len());
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
            Ok(Some(order.iter().map(|&i| ids[i].clone()).collect()))
        }
        None if has_id.is_some() => Err(format_err(
            path,
            format!(
                "embeddings[{}] has neither id nor poem_index but embeddings[{}] has one; \
                 give every entry an id or none",
                no_id.unwrap_or(0),
                has_id.unwrap_or(0)
            ),
        )),
        None => Ok(None),
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
