//! `diversity.rows()`: a host buffer of sequence rows (row-major uint32) that the Rust side
//! fills and reads without a Lua string in between. The driver downloads each chunk and each
//! finished batch into one (`job:columns_into`), checksums and appends it to its checkpoint
//! (`rows:checksum`, `rows:append_to`, `rows:write_to`) and hands row ranges of it to the
//! writers (`writer:write_rows`): no copy into Lua memory, and its memory is reused from one
//! download to the next (fresh pages cost more than the copy itself on a large host). May touch the
//! files it is told to write, the checksums of `crate::files` and the binding's helpers.

use super::args::int;
use super::error::{msg, LuaCtx};
use crate::error::Error;
use crate::files::{bytes_checksum, words_checksum};
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};
use std::io::Write;

/// Rows of `len` uint32 entries.
#[derive(Default)]
pub(super) struct LRows {
    data: Vec<u32>,
    rows: usize,
    len: usize,
}

impl LRows {
    /// Refill with `rows` rows of `len` entries written by `f` into the (resized) data.
    pub(super) fn fill(
        &mut self,
        call: &str,
        rows: usize,
        len: usize,
        f: impl FnOnce(&mut Vec<u32>) -> crate::error::Result<()>,
    ) -> LuaResult<()> {
        self.rows = 0;
        self.len = 0;
        f(&mut self.data).lua_ctx(call)?;
        if self.data.len() != rows * len {
            return Err(msg(
                call,
                format!("{} entries for {rows} rows of {len}", self.data.len()),
            ));
        }
        self.rows = rows;
        self.len = len;
        Ok(())
    }

    /// Rows `first .. first + count` (0-based) and their entries per row.
    pub(super) fn slice(
        &self,
        call: &str,
        first: usize,
        count: usize,
    ) -> LuaResult<(&[u32], usize)> {
        match first.checked_add(count) {
            Some(end) if end <= self.rows => {
                Ok((&self.data[first * self.len..end * self.len], self.len))
            }
            _ => Err(msg(
                call,
                format!(
                    "rows {first}..{} of a buffer of {} rows",
                    first.saturating_add(count),
                    self.rows
                ),
            )),
        }
    }

    pub(super) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.data[..self.rows * self.len])
    }
}

fn io_error(call: &str, path: &str, e: std::io::Error) -> LuaError {
    msg(
        call,
        Error::Io {
            path: path.into(),
            source: e,
        },
    )
}

impl UserData for LRows {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("count", |_, this, ()| Ok(this.rows));
        m.add_method("len", |_, this, ()| Ok(this.len));
        // The rows as a binary string of little-endian uint32 (a copy).
        m.add_method("bytes", |lua, this, ()| lua.create_string(this.bytes()));
        // The checksums `diversity.checksum` and `diversity.words_checksum` give for the same
        // bytes.
        m.add_method("checksum", |_, this, ()| Ok(bytes_checksum(this.bytes())));
        m.add_method("words_checksum", |_, this, ()| {
            Ok(words_checksum(this.bytes()))
        });
        // Append `head` (a string) and the rows to the file at `path`, created if missing.
        m.add_method(
            "append_to",
            |_, this, (path, head): (String, Option<LuaString>)| {
                let call = "rows:append_to";
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)
                    .map_err(|e| io_error(call, &path, e))?;
                if let Some(h) = head {
                    f.write_all(&h.as_bytes())
                        .map_err(|e| io_error(call, &path, e))?;
                }
                f.write_all(this.bytes())
                    .map_err(|e| io_error(call, &path, e))
            },
        );
        // Write the rows as the whole file at `path` (created or truncated).
        m.add_method("write_to", |_, this, path: String| {
            let call = "rows:write_to";
            std::fs::write(&path, this.bytes()).map_err(|e| io_error(call, &path, e))
        });
    }
}

/// Rows `first .. first + #starts` of `rows` (0-based `first`) with `starts` (a Lua array, one
/// start per row): what the writers' `write_rows` take.
pub(super) fn rows_arg<'a>(
    call: &str,
    rows: &'a LRows,
    first: &Value,
    count: usize,
) -> LuaResult<(&'a [u32], usize)> {
    let first = int(call, "first", first)? as usize;
    rows.slice(call, first, count)
}

pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    m.set("rows", lua.create_function(|_, ()| Ok(LRows::default()))?)?;
    // Monotonic wall-clock seconds (from an arbitrary start): the driver's per-phase times.
    // Here rather than through the FFI, so the module declares no C function that a user's own
    // `ffi.cdef` could clash with.
    m.set(
        "clock",
        lua.create_function(|_, ()| {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            Ok(START
                .get_or_init(std::time::Instant::now)
                .elapsed()
                .as_secs_f64())
        })?,
    )?;
    Ok(())
}
