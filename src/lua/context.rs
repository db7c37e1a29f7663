//! `diversity.open`, `diversity.devices` and the context handle: a device, its capabilities,
//! the engine a mode resolves to on it, and table uploads. May touch the crate's device context,
//! engine choice and device table, and the binding's helpers.

use super::args::{int, opt, parse_mode, parse_precision};
use super::device_table::{mode_values, LDeviceTable};
use super::error::LuaCtx;
use super::handle::Handle;
use super::table::LTable;
use crate::device::{Context, ContextOptions};
use crate::engine::{self, Engine, ModeChoice};
use crate::mode::Mode;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// A device.
pub(super) type LContext = Handle<Context>;

impl UserData for LContext {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("describe", |_, this, ()| {
            let ctx = this.get("context:describe")?;
            Ok(match ctx.native_host() {
                true => format!("{}{}", engine::host_line(), ctx.describe()),
                false => ctx.describe(),
            })
        });
        // The name sequences report: the device's, or the CPU's with "(host engine)".
        m.add_method("name", |_, this, ()| {
            Ok(engine::sequence_device_name(this.get("context:name")?))
        });
        // Where diversity sequences run: "host" (the native CPU engine) or "device".
        m.add_method("engine", |_, this, ()| {
            Ok(match this.get("context:engine")?.native_host() {
                true => "host",
                false => "device",
            })
        });
        m.add_method("l2_bytes", |_, this, ()| {
            Ok(this.get("context:l2_bytes")?.caps().l2_bytes)
        });
        m.add_method("caps", |lua, this, ()| {
            let ctx = this.get("context:caps")?;
            let c = ctx.caps();
            let t = lua.create_table()?;
            // `name` is where sequences run (see `name`); `device_name` the Vulkan device's.
            t.set("name", engine::sequence_device_name(ctx))?;
            t.set("device_name", c.name.clone())?;
            t.set("engine", if ctx.native_host() { "host" } else { "device" })?;
            t.set("device_type", c.device_type.clone())?;
            t.set("uuid", c.uuid.clone())?;
            t.set("driver", c.driver.clone())?;
            t.set("api_version", c.api_version.clone())?;
            t.set("fp16_storage", c.fp16_storage)?;
            t.set("subgroup_size", c.subgroup_size)?;
            t.set("shared_memory_bytes", c.shared_memory_bytes)?;
            t.set("max_buffer_range", c.max_buffer_range)?;
            t.set("max_workgroup_count", c.max_workgroup_count)?;
            t.set("timestamps", c.timestamps)?;
            t.set("memory_budget_bytes", c.memory_budget_bytes)?;
            t.set("l2_bytes", c.l2_bytes)?;
            t.set("l2_source", c.l2_source)?;
            Ok(t)
        });
        // The largest batch the device allows for an N × D table and `steps` steps, on the engine
        // `mode` ("scan", "gram" or "auto", the default) resolves to.
        m.add_method(
            "max_batch",
            |_,
             this,
             (n, d, precision, steps, mode): (
                Value,
                Value,
                Option<String>,
                Option<Value>,
                Option<String>,
            )| {
                let call = "context:max_batch";
                let ctx = this.get(call)?;
                let n = int(call, "n", &n)? as usize;
                let d = int(call, "dim", &d)? as usize;
                let p = parse_precision(call, precision)?;
                let steps = match steps.filter(|s| !s.is_nil()) {
                    Some(s) => int(call, "steps", &s)? as usize,
                    None => n.saturating_sub(1),
                };
                let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
                Ok(engine::context_max_batch(ctx, mode, n, d, p, steps))
            },
        );
        // The engine `mode` ("scan", "gram" or "auto", the default) resolves to for an N × D
        // table at `precision` on this device, and why: (mode name, reason in words, reason code,
        // why G does not fit or nil); see `mode_values`.
        m.add_method(
            "mode_for",
            |_, this, (n, d, precision, mode): (Value, Value, Option<String>, Option<String>)| {
                let call = "context:mode_for";
                let ctx = this.get(call)?;
                let n = int(call, "n", &n)? as usize;
                let d = int(call, "dim", &d)? as usize;
                let p = parse_precision(call, precision)?;
                let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
                Ok(mode_values(&ModeChoice::for_context(ctx, mode, n, d, p)))
            },
        );
        // The gram arithmetic a job with `opts` (placement, workgroup, compensated, judge) runs
        // for an N × D table on this device, as the cache metadata's `summation` names it.
        m.add_method(
            "gram_summation",
            |_, this, (n, d, o): (Value, Value, Option<LuaTable>)| {
                let call = "context:gram_summation";
                let ctx = this.get(call)?;
                let n = int(call, "n", &n)? as usize;
                let d = int(call, "dim", &d)? as usize;
                let g = super::job::gram_only_options(call, &o)?;
                crate::gram::summation(ctx.caps(), n, d, &g).lua_ctx(call)
            },
        );
        // The arithmetic a job of the engine `mode` resolves to runs, as the cache metadata's
        // `summation` names it (and the checkpoint binds): the host engine's for either mode on
        // a host context, the gram arithmetic with `opts` on a device, nil for a device scan.
        m.add_method(
            "summation",
            |_, this, (n, d, mode, o): (Value, Value, Option<String>, Option<LuaTable>)| {
                let call = "context:summation";
                let ctx = this.get(call)?;
                let n = int(call, "n", &n)? as usize;
                let d = int(call, "dim", &d)? as usize;
                let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
                let g = super::job::gram_only_options(call, &o)?;
                if ctx.native_host() {
                    return Ok(Some(
                        engine::host_summation(ModeChoice::host(mode, n, d).mode).to_string(),
                    ));
                }
                if ModeChoice::new(ctx.caps(), mode, n, d, crate::table::Precision::Fp32).mode
                    != Mode::Gram
                {
                    return Ok(None);
                }
                crate::gram::summation(ctx.caps(), n, d, &g)
                    .lua_ctx(call)
                    .map(Some)
            },
        );
        m.add_method("validation_messages", |lua, this, ()| {
            lua.create_sequence_from(
                this.get("context:validation_messages")?
                    .validation_messages(),
            )
        });
        m.add_method(
            "upload",
            |_, this, (table, precision): (LuaAnyUserData, Option<String>)| {
                let ctx = this.get("context:upload")?;
                let p = parse_precision("context:upload", precision)?;
                let t = table.borrow::<LTable>()?;
                let e =
                    Engine::upload(ctx, t.get("context:upload")?, p).lua_ctx("context:upload")?;
                Ok(LDeviceTable::new("device table", e))
            },
        );
        Handle::add_close(m);
    }
}

/// `open` and `devices`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    m.set(
        "open",
        lua.create_function(|_, o: Option<LuaTable>| {
            let opts = ContextOptions {
                device: opt(&o, "device")?,
                validation: opt(&o, "validation")?.unwrap_or(false),
            };
            let ctx = Context::new(&opts).lua_ctx("open")?;
            Ok(LContext::new("context", ctx))
        })?,
    )?;
    m.set(
        "devices",
        lua.create_function(|lua, ()| {
            let list = Context::list_devices().lua_ctx("devices")?;
            let t = lua.create_table()?;
            for d in list {
                let e = lua.create_table()?;
                e.set("index", d.index)?;
                e.set("name", d.name)?;
                e.set("type", d.device_type)?;
                e.set("uuid", d.uuid)?;
                t.raw_push(e)?;
            }
            Ok(t)
        })?,
    )?;
    Ok(())
}
