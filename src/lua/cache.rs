//! The cache writers (JSON, binary) and the binary cache reader; `merge_caches`. May touch the
//! crate's cache writers and reader, the job and rows handles and the binding's helpers.

use super::args::{int, int_list, int_u32, rows_of_starts};
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::job::LJob;
use super::json::{json_list, lua_to_json};
use super::rows::{rows_arg, LRows};
use super::set_function;
use crate::cache::{BinaryCache, BinaryCacheWriter, JsonCacheWriter};
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// A JSON cache writer.
pub(super) type LJsonWriter = Handle<JsonCacheWriter>;
/// A binary cache writer.
pub(super) type LBinWriter = Handle<BinaryCacheWriter>;
/// An opened binary cache.
pub(super) type LBinCache = Handle<BinaryCache>;

/// What the JSON and the binary cache writers' Lua methods share: a batch of rows of `len`
/// entries, row i the sequence of `starts[i]` (the binary writer knows its row length and takes
/// `len` from its own creation), and the end of the file.
trait RowsWriter: Sized + 'static {
    /// Writes one sequence, `seq` beginning with `start`.
    fn write_one(&mut self, start: u32, seq: &[u32]) -> crate::Result<()>;
    /// Writes the rows.
    fn write_rows(&mut self, starts: &[u32], flat: &[u32], len: usize) -> crate::Result<()>;
    /// Finishes the file (checksum, rename into place).
    fn finish_file(self) -> crate::Result<()>;
}

impl RowsWriter for JsonCacheWriter {
    fn write_one(&mut self, start: u32, seq: &[u32]) -> crate::Result<()> {
        self.write_sequence(start, seq)
    }
    fn write_rows(&mut self, starts: &[u32], flat: &[u32], len: usize) -> crate::Result<()> {
        self.write_batch(starts, flat, len)
    }
    fn finish_file(self) -> crate::Result<()> {
        self.finish()
    }
}

impl RowsWriter for BinaryCacheWriter {
    fn write_one(&mut self, start: u32, seq: &[u32]) -> crate::Result<()> {
        self.write_row(start, seq)
    }
    fn write_rows(&mut self, starts: &[u32], flat: &[u32], _len: usize) -> crate::Result<()> {
        self.write_batch(starts, flat)
    }
    fn finish_file(self) -> crate::Result<()> {
        self.finish()
    }
}

/// The methods both cache writers have, their messages naming `kind` (`json_cache`,
/// `binary_cache`): `write` (one sequence beginning with its start), `write_job` (a job's
/// sequences), `write_bytes` (a binary string of little-endian uint32 rows), `write_rows` (rows
/// `first .. first + #starts - 1`, 0-based, of a `diversity.rows()` buffer, as `write_bytes`
/// without a string in between), `finish` and `close` (an unfinished writer removes its
/// temporary file).
fn add_writer_methods<W: RowsWriter, M: UserDataMethods<Handle<W>>>(m: &mut M, kind: &'static str) {
    m.add_method_mut("write", move |_, this, (start, seq): (Value, LuaTable)| {
        let call = &format!("{kind}:write");
        let (start, seq) = (
            int_u32(call, "start", &start)?,
            int_list(call, "seq", &seq)?,
        );
        this.get_mut(call)?.write_one(start, &seq).lua_ctx(call)
    });
    m.add_method_mut("write_job", move |_, this, job: LuaAnyUserData| {
        let call = &format!("{kind}:write_job");
        let job = job.borrow::<LJob>()?;
        let j = job.get(call)?;
        let flat = j.sequences_flat().lua_ctx(call)?;
        this.get_mut(call)?
            .write_rows(j.starts(), &flat, j.sequence_len())
            .lua_ctx(call)
    });
    m.add_method_mut(
        "write_bytes",
        move |_, this, (starts, bytes, len): (LuaTable, LuaString, Value)| {
            let call = &format!("{kind}:write_bytes");
            let (starts, flat, len) = rows_of_starts(call, "starts", &starts, &bytes, &len)?;
            this.get_mut(call)?
                .write_rows(&starts, &flat, len)
                .lua_ctx(call)
        },
    );
    m.add_method_mut(
        "write_rows",
        move |_, this, (starts, rows, first): (LuaTable, LuaAnyUserData, Value)| {
            let call = &format!("{kind}:write_rows");
            let starts = int_list(call, "starts", &starts)?;
            let rows = rows.borrow::<LRows>()?;
            let (flat, len) = rows_arg(call, &rows, &first, starts.len())?;
            this.get_mut(call)?
                .write_rows(&starts, flat, len)
                .lua_ctx(call)
        },
    );
    m.add_method_mut("finish", move |_, this, ()| {
        let call = &format!("{kind}:finish");
        this.take(call)?.finish_file().lua_ctx(call)
    });
    Handle::add_close(m);
}

impl UserData for LJsonWriter {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        add_writer_methods(m, "json_cache");
    }
}

impl UserData for LBinWriter {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        add_writer_methods(m, "binary_cache");
    }
}

impl UserData for LBinCache {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("binary_cache:n")?.n()));
        m.add_method("len", |_, this, ()| Ok(this.get("binary_cache:len")?.len()));
        m.add_method_mut("sequence", |lua, this, start: i64| {
            let call = "binary_cache:sequence";
            let c = this.get_mut(call)?;
            let s = u32::try_from(start)
                .map_err(|_| msg(call, format!("start {start} out of range")))?;
            let seq = c.sequence(s).lua_ctx(call)?;
            lua.create_sequence_from(seq)
        });
        Handle::add_close(m);
    }
}

/// `json_cache_writer`, `merge_caches`, `table_checksum`, `verify_cache_checksum`,
/// `binary_cache_writer`, `open_binary_cache`,
/// `cache_metadata` (the scalar fields of a JSON cache's `metadata`, as a Lua table; null and
/// nested values are left out).
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    set_function(
        lua,
        m,
        "json_cache_writer",
        |_, (path, meta, ids): (String, Option<Value>, Option<LuaTable>)| {
            let call = "json_cache_writer";
            let meta = match meta {
                Some(v) => lua_to_json(call, v)?,
                None => serde_json::json!({}),
            };
            let ids = match ids {
                Some(t) => Some(json_list(call, &t)?),
                None => None,
            };
            let w = JsonCacheWriter::create(path.as_ref(), &meta, ids).lua_ctx(call)?;
            Ok(LJsonWriter::new("json cache writer", w))
        },
    )?;
    set_function(
        lua,
        m,
        "binary_cache_writer",
        |_, (path, n, len): (String, Value, Option<Value>)| {
            let call = "binary_cache_writer";
            let n = int(call, "n", &n)? as usize;
            let len = match len.filter(|l| !l.is_nil()) {
                Some(l) => int(call, "len", &l)? as usize,
                None => n,
            };
            let w = BinaryCacheWriter::create(path.as_ref(), n, len).lua_ctx(call)?;
            Ok(LBinWriter::new("binary cache writer", w))
        },
    )?;
    set_function(lua, m, "open_binary_cache", |_, path: String| {
        let c = BinaryCache::open(path.as_ref()).lua_ctx("open_binary_cache")?;
        Ok(LBinCache::new("binary cache", c))
    })?;
    set_function(lua, m, "cache_metadata", |lua, path: String| {
        let call = "cache_metadata";
        let meta = crate::cache::read_metadata(path.as_ref()).lua_ctx(call)?;
        let t = lua.create_table()?;
        for (k, v) in &meta {
            t.raw_set(k.as_str(), super::json::json_to_lua(lua, v)?)?;
        }
        Ok(t)
    })?;
    register_merge_caches(lua, m)?;
    register_checksums(lua, m)
}

/// `diversity.table_checksum(t [, precision])`: the content checksum of a table as stored at
/// `precision` ("fp32", the default, or "fp16"; `cache::table_checksum`), which shards record; `diversity.verify_cache_checksum(path)`: true when the JSON cache at
/// `path` matches the checksum it carries of itself (`cache::verify_checksum`), else an error
/// naming the file and the cause.
fn register_checksums(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    set_function(
        lua,
        m,
        "table_checksum",
        |_, (table, precision): (LuaAnyUserData, Option<String>)| {
            let call = "table_checksum";
            let precision = match precision.as_deref() {
                None => crate::table::Precision::Fp32,
                Some(p) => p.parse().lua_ctx(call)?,
            };
            let t = table.borrow::<super::table::LTable>()?;
            Ok(crate::cache::table_checksum(t.get(call)?, precision))
        },
    )?;
    m.set(
        "verify_cache_checksum",
        lua.create_function(|_, path: String| {
            crate::cache::verify_checksum(path.as_ref()).lua_ctx("verify_cache_checksum")?;
            Ok(true)
        })?,
    )?;
    // `diversity.read_cache_rows(path, t, n, len)`: the sequences of the JSON cache at `path`
    // for the first `n` rows of table `t` (matched by its ids, or indices), `len` entries each,
    // as a binary string of little-endian uint32 row indices, every start in order.
    set_function(
        lua,
        m,
        "read_cache_rows",
        |lua, (path, t, n, len): (String, LuaAnyUserData, Value, Value)| {
            let call = "read_cache_rows";
            let n = int(call, "n", &n)? as usize;
            let len = int(call, "len", &len)? as usize;
            let t = t.borrow::<super::table::LTable>()?;
            let t = t.get(call)?;
            if n > t.n() || len == 0 {
                return Err(msg(
                    call,
                    format!("n = {n}, len = {len} for a table of {}", t.n()),
                ));
            }
            let ids = t.ids().map(|ids| &ids[..n]);
            let rows =
                crate::cache::read_sequence_rows(path.as_ref(), ids, n, len).lua_ctx(call)?;
            lua.create_string(bytemuck::cast_slice::<u32, u8>(&rows))
        },
    )
}

/// `diversity.merge_caches(out, {inputs…})`: merge the partial caches of a `--shard i/n` run
/// into `out`, byte-identical to the one-shot run's cache (`cache::merge_caches`). Returns
/// `{shards = n, layout = "contiguous" | "strided", sequences = count}`.
fn register_merge_caches(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    m.set(
        "merge_caches",
        lua.create_function(|lua, (out, inputs): (String, LuaTable)| {
            let call = "merge_caches";
            super::args::dense(call, "the inputs", &inputs)?;
            let inputs = inputs
                .sequence_values::<String>()
                .map(|p| Ok(std::path::PathBuf::from(p?)))
                .collect::<LuaResult<Vec<_>>>()?;
            let r = crate::cache::merge_caches(&inputs, out.as_ref()).lua_ctx(call)?;
            let t = lua.create_table()?;
            t.set("shards", r.shards)?;
            t.set("layout", r.layout.name())?;
            t.set("sequences", r.sequences)?;
            Ok(t)
        })?,
    )
}
