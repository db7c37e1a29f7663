//! Host tables: `diversity.table` (Lua tables, binary strings, FFI cdata), the file loaders
//! and savers, and the table handle. May touch the crate's host table and file loaders, cdata and
//! the binding's helpers.

use super::args::{int, int_list, int_u32, opt, opt_int, parse_precision};
use super::cdata::{rows_from_cdata, values_from_memory, Dtype};
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::json::{json_list, lua_list};
use crate::files;
use crate::table::Table;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// A host table.
pub(super) type LTable = Handle<Table>;

impl UserData for LTable {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("table:n")?.n()));
        m.add_method("dim", |_, this, ()| Ok(this.get("table:dim")?.d()));
        m.add_method("ids", |lua, this, ()| match this.get("table:ids")?.ids() {
            None => Ok(Value::Nil),
            Some(ids) => Ok(Value::Table(lua_list(lua, ids)?)),
        });
        m.add_method("with_ids", |_, this, ids: LuaTable| {
            let call = "table:with_ids";
            let ids = json_list(call, &ids)?;
            let t = this.get(call)?.clone().with_ids(ids).lua_ctx(call)?;
            Ok(LTable::new("table", t))
        });
        // The ε-argmax check on one sequence (0-based indices): every pick within `eps` of the
        // best float64 distance along the sequence's own prefix, against the table as stored at
        // `precision`. Returns the worst excess, or raises naming the step.
        m.add_method(
            "check_sequence",
            |_, this, (start, seq, eps, precision): (Value, LuaTable, Option<f64>, Option<String>)| {
                let call = "table:check_sequence";
                let start = int_u32(call, "start", &start)?;
                let seq = int_list(call, "seq", &seq)?;
                let p = parse_precision(call, precision)?;
                let stored = this.get(call)?.as_stored(p);
                crate::reference::check_sequence(&stored, start, &seq, eps.unwrap_or(1e-5))
                    .map(|c| c.worst_excess)
                    .map_err(|v| msg(call, format!("start {start}: {v:?}")))
            },
        );
        m.add_method("centered", |_, this, ()| {
            Ok(LTable::new("table", this.get("table:centered")?.centered()))
        });
        m.add_method("head", |_, this, n: Value| {
            let n = int("table:head", "n", &n)? as usize;
            let t = this.get("table:head")?.head(n).lua_ctx("table:head")?;
            Ok(LTable::new("table", t))
        });
        m.add_method("row", |lua, this, i: Value| {
            let i = int("table:row", "row", &i)? as usize;
            let t = this.get("table:row")?;
            if i >= t.n() {
                return Err(msg(
                    "table:row",
                    format!("row {i} out of range (N = {})", t.n()),
                ));
            }
            lua.create_sequence_from(t.row(i).iter().copied())
        });
        m.add_method(
            "save_fp16_bin",
            |_, this, (path, space, checksum): (String, String, String)| {
                files::save_fp16_bin(
                    path.as_ref(),
                    this.get("table:save_fp16_bin")?,
                    &space,
                    &checksum,
                )
                .lua_ctx("table:save_fp16_bin")
            },
        );
        Handle::add_close(m);
    }
}

/// `diversity.table(src, {n=, dim=, dtype=, count=, ids=})`: a table from a Lua table (flat with
/// `dim`, or an array of rows), a binary string (`dtype` "f32" or "f16"), or an FFI cdata array
/// or pointer (pointers need `count` elements).
fn make_table(lua: &Lua, (src, o): (Value, Option<LuaTable>)) -> LuaResult<LTable> {
    let call = "table";
    let dim: Option<usize> = opt_int(call, &o, "dim")?.map(|d| d as usize);
    let n_opt: Option<usize> = opt_int(call, &o, "n")?.map(|d| d as usize);
    let (data, n, d) = match src {
        Value::Table(t) => {
            let first: Value = t.raw_get(1)?;
            if let Value::Table(_) = first {
                super::args::dense(call, "the rows", &t)?;
                let mut data = Vec::new();
                let mut d0 = None;
                for (i, row) in t.sequence_values::<LuaTable>().enumerate() {
                    let row = row.map_err(|_| msg(call, format!("row {i} is not a table")))?;
                    super::args::dense(call, &format!("row {i}"), &row)?;
                    let vals: Vec<f32> = row
                        .sequence_values::<f64>()
                        .map(|v| {
                            v.map(|x| x as f32)
                                .map_err(|_| msg(call, format!("row {i} has a non-number value")))
                        })
                        .collect::<LuaResult<_>>()?;
                    match d0 {
                        None => d0 = Some(vals.len()),
                        Some(d) if d != vals.len() => {
                            return Err(msg(
                                call,
                                format!(
                                    "ragged rows: row {i} has {} values, row 0 has {d}",
                                    vals.len()
                                ),
                            ))
                        }
                        _ => {}
                    }
                    data.extend(vals);
                }
                let d = d0.unwrap_or(0);
                let n = data.len().checked_div(d).unwrap_or(0);
                (data, n, d)
            } else {
                let d = dim.ok_or_else(|| msg(call, "a flat Lua table needs {dim = D}"))?;
                super::args::dense(call, "the values", &t)?;
                let data: Vec<f32> = t
                    .sequence_values::<f64>()
                    .enumerate()
                    .map(|(i, v)| {
                        v.map(|x| x as f32)
                            .map_err(|_| msg(call, format!("value {} is not a number", i + 1)))
                    })
                    .collect::<LuaResult<_>>()?;
                if d == 0 || !data.len().is_multiple_of(d) {
                    return Err(msg(
                        call,
                        format!("{} values do not make rows of D = {d}", data.len()),
                    ));
                }
                let n = data.len() / d;
                (data, n, d)
            }
        }
        Value::String(s) => {
            let d = dim.ok_or_else(|| msg(call, "a binary string needs {dim = D}"))?;
            let dtype = match opt::<String>(&o, "dtype")?.as_deref() {
                None | Some("f32") | Some("fp32") => Dtype::F32,
                Some("f16") | Some("fp16") => Dtype::F16,
                Some(x) => return Err(msg(call, format!("dtype '{x}': expected f32 or f16"))),
            };
            let b = s.as_bytes();
            let size = dtype.bytes();
            if d == 0 || !b.len().is_multiple_of(size * d) {
                return Err(msg(
                    call,
                    format!(
                        "a string of {} bytes does not hold rows of {d} values",
                        b.len()
                    ),
                ));
            }
            let count = b.len() / size;
            let data = values_from_memory(call, b.as_ptr() as usize, b.len(), &dtype, count)?;
            (data, count / d, d)
        }
        v @ Value::Other(_) | v @ Value::UserData(_) | v @ Value::LightUserData(_) => {
            rows_from_cdata(lua, call, v, n_opt, dim, &o)?
        }
        other => {
            return Err(msg(
                call,
                format!("cannot make a table from a {}", other.type_name()),
            ))
        }
    };
    if let Some(n_given) = n_opt {
        if n_given != n {
            return Err(msg(
                call,
                format!("n = {n_given} given but the data holds {n} rows of {d}"),
            ));
        }
    }
    let mut t = Table::new(data, n, d).lua_ctx(call)?;
    if let Some(ids) = opt::<LuaTable>(&o, "ids")? {
        t = t.with_ids(json_list(call, &ids)?).lua_ctx(call)?;
    }
    Ok(LTable::new("table", t))
}

/// `table`, `load`, `load_fp16_bin`, `save_ids`, `load_ids`, `file_checksum`, `checksum`,
/// `same_file`, `file_kind`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    m.set("table", lua.create_function(make_table)?)?;
    m.set(
        "load",
        lua.create_function(|_, (path, o): (String, Option<LuaTable>)| {
            let dim = opt_int("load", &o, "dim")?.map(|d| d as usize);
            let t = files::load_table(path.as_ref(), dim).lua_ctx("load")?;
            Ok(LTable::new("table", t))
        })?,
    )?;
    m.set(
        "load_fp16_bin",
        lua.create_function(
            |_, (path, space, checksum): (String, Option<String>, Option<String>)| {
                let expect = match (&space, &checksum) {
                    (Some(s), Some(c)) => Some((s.as_str(), c.as_str())),
                    _ => None,
                };
                let (t, space) =
                    files::load_fp16_bin_space(path.as_ref(), expect).lua_ctx("load_fp16_bin")?;
                Ok((LTable::new("table", t), space))
            },
        )?,
    )?;
    m.set(
        "save_ids",
        lua.create_function(
            |_, (path, table, source_checksum): (String, LuaAnyUserData, String)| {
                let call = "save_ids";
                let t = table.borrow::<LTable>()?;
                let t = t.get(call)?;
                files::save_ids(path.as_ref(), t.ids(), t.n(), &source_checksum).lua_ctx(call)
            },
        )?,
    )?;
    m.set(
        "load_ids",
        lua.create_function(|lua, (path, n, source_checksum): (String, Value, String)| {
            let call = "load_ids";
            let n = int(call, "n", &n)? as usize;
            match files::load_ids(path.as_ref(), n, &source_checksum).lua_ctx(call)? {
                Some(ids) => Ok(Value::Table(lua_list(lua, &ids)?)),
                None => Ok(Value::Boolean(false)),
            }
        })?,
    )?;
    m.set(
        "same_file",
        lua.create_function(|_, (a, b): (String, String)| {
            Ok(files::same_file(a.as_ref(), b.as_ref()))
        })?,
    )?;
    m.set(
        "file_kind",
        lua.create_function(|_, path: String| Ok(files::file_kind(path.as_ref())))?,
    )?;
    m.set(
        "file_checksum",
        lua.create_function(|_, path: String| {
            files::file_checksum(path.as_ref()).lua_ctx("file_checksum")
        })?,
    )?;
    // `checksum` (`files::bytes_checksum`) and the fast checksum of the checkpoint's batch data
    // ("w64:…", `files::words_checksum`), each of a string's bytes.
    let checksums = [
        ("checksum", files::bytes_checksum as fn(&[u8]) -> String),
        ("words_checksum", files::words_checksum),
    ];
    for (name, sum) in checksums {
        m.set(
            name,
            lua.create_function(move |_, bytes: mlua::LuaString| Ok(sum(&bytes.as_bytes())))?,
        )?;
    }
    Ok(())
}
