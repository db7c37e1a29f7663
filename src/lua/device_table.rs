//! The device table handle (a table on its device, ready to run jobs of either engine through
//! [`Engine`], which keeps G once built) and the Gram handle. The k-NN and rankings methods of
//! the device table live with their family in `knn.rs`. May touch the crate's engine and Gram, the
//! job handle and the binding's helpers.

use super::args::{int, parse_mode, rows_of_starts, starts_or_all};
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::job::{gram_only_options, job_options, LJob};
use super::table::LTable;
use crate::engine::{Engine, Job, ModeChoice, Prefix};
use crate::gram::Gram;
use crate::mode::Mode;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// A device table (with its G once built).
pub(super) type LDeviceTable = Handle<Engine>;
/// A Gram matrix.
pub(super) type LGram = Handle<Gram>;

/// What `ctx:mode_for` and `dtable:mode_for` return: the mode name, the reason in words, the
/// reason's code (`"requested"`, `"requested_unfit"`, `"auto_fits"`, `"auto_unfit"`) and why G
/// does not fit (nil when it does).
pub(super) fn mode_values(c: &ModeChoice) -> (&'static str, String, &'static str, Option<String>) {
    (
        c.mode.name(),
        c.reason.to_string(),
        c.reason.code(),
        c.reason.unfit().map(str::to_string),
    )
}

impl UserData for LDeviceTable {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("device_table:n")?.shape().0));
        m.add_method("dim", |_, this, ()| {
            Ok(this.get("device_table:dim")?.shape().1)
        });
        m.add_method("precision", |_, this, ()| {
            Ok(this.get("device_table:precision")?.shape().2.name())
        });
        // G = E Eᵀ of this table for gram jobs with `opts` (default: the default options; float
        // options such as `compensated` need a G with float32 entries, fixed-point keys one with
        // int32 entries), built on the first call (or the first gram job) and shared by every
        // later gram job of the table that can use it.
        m.add_method_mut("gram", |_, this, o: Option<LuaTable>| {
            let call = "device_table:gram";
            let opts = super::job::gram_only_options(call, &o)?;
            let g = this.get_mut(call)?.gram_for(&opts).lua_ctx(call)?;
            Ok(LGram::new("gram", g))
        });
        // Drop the table's cached G (jobs and gram objects that hold it keep it alive).
        m.add_method_mut("release_gram", |_, this, ()| {
            this.get_mut("device_table:release_gram")?.release_gram();
            Ok(())
        });
        // The engine `mode` (default "auto") resolves to for this table, as `ctx:mode_for`.
        m.add_method("mode_for", |_, this, mode: Option<String>| {
            let call = "device_table:mode_for";
            let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
            Ok(mode_values(&this.get(call)?.mode_for(mode)))
        });
        m.add_method_mut(
            "job",
            |_, this, (starts, o): (Option<LuaTable>, Option<LuaTable>)| {
                let call = "device_table:job";
                let t = this.get_mut(call)?;
                let starts = starts_or_all(call, starts, t.shape().0)?;
                let opts = job_options(call, &o)?;
                let job = t.job(&starts, &opts).lua_ctx(call)?;
                Ok(LJob::new("job", job))
            },
        );
        // A job continuing from a checkpoint: `prefixes` is a binary string of little-endian
        // uint32, #starts rows of `len` entries (as `job:columns(0, len)` returns them). The host
        // table is needed by the scan engine (it rebuilds the running sums on the host); a gram
        // job replays the prefix on the device and accepts nil.
        m.add_method_mut(
            "resume_job",
            |_,
             this,
             (table, starts, prefixes, len, o): (
                Option<LuaAnyUserData>,
                LuaTable,
                LuaString,
                Value,
                Option<LuaTable>,
            )| {
                let call = "device_table:resume_job";
                let t = this.get_mut(call)?;
                let (starts, rows, len) = rows_of_starts(call, "start", &starts, &prefixes, &len)?;
                let opts = job_options(call, &o)?;
                let host = match &table {
                    Some(u) => Some(u.borrow::<LTable>()?),
                    None => None,
                };
                let host = match &host {
                    Some(h) => Some(h.get(call)?),
                    None => None,
                };
                let prefix = Prefix {
                    host,
                    rows: &rows,
                    len,
                };
                let job = t.resume_job(&starts, prefix, &opts).lua_ctx(call)?;
                Ok(LJob::new("job", job))
            },
        );
        // A sequencer over this table: k-step prefixes from any start on demand, the same ids
        // as a job with these options and `steps = k` (see `sequencer.rs`).
        m.add_method_mut("sequencer", |_, this, o: Option<LuaTable>| {
            let call = "device_table:sequencer";
            super::sequencer::new(call, this.get_mut(call)?, &o)
        });
        // Every start's sequences after rows were appended, from the old table's (see
        // `sequencer.rs`, `crate::grow`).
        m.add_method_mut(
            "grow",
            |lua,
             this,
             (table, n_old, rows, len, o): (
                LuaAnyUserData,
                Value,
                LuaString,
                Value,
                Option<LuaTable>,
            )| {
                let call = "device_table:grow";
                let host = table.borrow::<LTable>()?;
                let t = host.get(call)?;
                let e = this.get_mut(call)?;
                super::sequencer::grow(lua, call, e, t, (&n_old, &rows, &len, &o))
            },
        );
        super::knn::add_device_table_methods(m);
        Handle::add_close(m);
    }
}

impl UserData for LGram {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("gram:n")?.table().n()));
        m.add_method("bytes", |_, this, ()| Ok(this.get("gram:bytes")?.bytes()));
        m.add_method("slabs", |_, this, ()| Ok(this.get("gram:slabs")?.slabs()));
        m.add_method("build_gpu_ns", |_, this, ()| {
            Ok(this.get("gram:build_gpu_ns")?.build_ns())
        });
        // Row i of G (0-based) as a Lua array, for diagnostics.
        m.add_method("row", |lua, this, i: Value| {
            let call = "gram:row";
            let i = int(call, "row", &i)? as usize;
            let r = this.get(call)?.row(i).lua_ctx(call)?;
            lua.create_sequence_from(r)
        });
        m.add_method(
            "job",
            |_, this, (starts, o): (Option<LuaTable>, Option<LuaTable>)| {
                let call = "gram:job";
                let g = this.get(call)?;
                let starts = starts_or_all(call, starts, g.table().n())?;
                let opts = gram_only_options(call, &o)?;
                Ok(LJob::new(
                    "job",
                    Job::gram(g, &starts, &opts, None).lua_ctx(call)?,
                ))
            },
        );
        m.add_method(
            "resume_job",
            |_, this, (starts, prefixes, len, o): (LuaTable, LuaString, Value, Option<LuaTable>)| {
                let call = "gram:resume_job";
                let g = this.get(call)?;
                let (starts, rows, len) = rows_of_starts(call, "start", &starts, &prefixes, &len)?;
                let opts = gram_only_options(call, &o)?;
                let job = Job::gram(g, &starts, &opts, Some((&rows, len))).lua_ctx(call)?;
                Ok(LJob::new("job", job))
            },
        );
        Handle::add_close(m);
    }
}

/// `gram_bytes`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // Bytes of G = E Eᵀ for N items on a device (crate::gram::gram_bytes: N rows of N rounded up
    // to a multiple of 4 entries, 4 bytes each; it saturates past 2^64).
    m.set(
        "gram_bytes",
        lua.create_function(|_, n: Value| {
            let items = int("gram_bytes", "n", &n)?;
            match usize::try_from(items).ok().map(crate::gram::gram_bytes) {
                // Past 2^53 bytes a Lua number would not hold the size exactly either.
                Some(b) if b < 1u64 << 53 => Ok(b),
                _ => Err(msg(
                    "gram_bytes",
                    format!("n = {items}: the Gram matrix would need about 4·n² bytes, past 2^53"),
                )),
            }
        })?,
    )?;
    Ok(())
}
