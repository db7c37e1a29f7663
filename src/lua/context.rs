//! `diversity.open`, `diversity.devices` and the context handle: a device, its capabilities,
//! the engine a mode resolves to on it, and table uploads. May touch the crate's device context,
//! engine choice and device table, and the binding's helpers.

use super::args::{dims, opt, parse_mode, parse_precision, steps_or_all};
use super::device_table::{mode_values, LDeviceTable};
use super::error::LuaCtx;
use super::handle::Handle;
use super::table::LTable;
use crate::device::{Context, ContextOptions};
use crate::engine::{self, Target};
use crate::host;
use crate::mode::Mode;
use crate::table::Precision;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// The sizing arguments of `ctx:max_batch` and `diversity.max_batch`, checked: `n`, `dim`, the
/// precision, the steps (N − 1 when nil) and the engine mode ("auto" when nil).
#[derive(Clone, Copy)]
pub(super) struct BatchSizing {
    mode: Mode,
    n: usize,
    d: usize,
    p: Precision,
    steps: usize,
}

/// The sizing arguments as Lua passes them: n, dim, precision, steps, mode.
pub(super) type SizingArgs = (Value, Value, Option<String>, Option<Value>, Option<String>);

impl BatchSizing {
    /// The arguments of `call`, checked in that order.
    pub(super) fn parse(call: &str, args: SizingArgs) -> LuaResult<BatchSizing> {
        let (n, d, precision, steps, mode) = args;
        let (n, d) = dims(call, &n, &d)?;
        let p = parse_precision(call, precision)?;
        let steps = steps_or_all(call, steps, n)?;
        let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
        Ok(BatchSizing {
            mode,
            n,
            d,
            p,
            steps,
        })
    }
}

impl BatchSizing {
    /// The largest batch `target` allows for these sizes.
    pub(super) fn max_batch(&self, target: &Target) -> usize {
        target.max_batch(self.mode, self.n, self.d, self.p, self.steps)
    }
}

/// The Vulkan device of `target`, or `call`'s error saying the machine has none.
pub(super) fn vulkan<'a>(target: &'a Target, call: &str) -> LuaResult<&'a Context> {
    target.vulkan().lua_ctx(call)
}

/// A context: where its work runs ([`Target`]: a Vulkan device, or the host engine alone).
pub(super) type LContext = Handle<Target>;

/// The device of `this` (`call`'s error after close()), then the checked `n` and `dim`: the
/// opening of the context methods that size an N × D table, its errors in that order.
fn device_and_dims<'a>(
    this: &'a LContext,
    call: &str,
    n: &Value,
    d: &Value,
) -> LuaResult<(&'a Target, usize, usize)> {
    let dev = this.get(call)?;
    let (n, d) = dims(call, n, d)?;
    Ok((dev, n, d))
}

/// The Vulkan device of a context handle passed to `call` (shared: a clone of the context), or
/// the error where the handle is closed or the machine has no Vulkan device.
pub(super) fn vulkan_arg(call: &str, ctx: &LuaAnyUserData) -> LuaResult<Context> {
    let c = ctx.borrow::<LContext>()?;
    Ok(vulkan(c.get(call)?, call)?.clone())
}

impl UserData for LContext {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("describe", |_, this, ()| {
            Ok(this.get("context:describe")?.describe())
        });
        // The name sequences report: the device's, or the CPU's with "(host engine)".
        m.add_method("name", |_, this, ()| Ok(this.get("context:name")?.name()));
        // Where diversity sequences run: "host" (the native CPU engine) or "device".
        m.add_method("engine", |_, this, ()| {
            Ok(this.get("context:engine")?.engine_name())
        });
        m.add_method("l2_bytes", |_, this, ()| {
            Ok(this.get("context:l2_bytes")?.l2_bytes())
        });
        m.add_method("caps", |lua, this, ()| {
            let dev = this.get("context:caps")?;
            let t = lua.create_table()?;
            let ctx = match dev {
                Target::Vulkan(c) => c,
                Target::HostOnly => {
                    t.set("name", dev.name())?;
                    t.set("device_name", "none")?;
                    t.set("engine", "host")?;
                    t.set("device_type", "none")?;
                    t.set("fp16_storage", true)?;
                    t.set("timestamps", false)?;
                    t.set("memory_budget_bytes", host::host_memory_budget())?;
                    t.set("l2_bytes", engine::NO_DEVICE_L2)?;
                    t.set("l2_source", "none")?;
                    return Ok(t);
                }
            };
            let c = ctx.caps();
            // `name` is where sequences run (see `name`); `device_name` the Vulkan device's.
            t.set("name", dev.name())?;
            t.set("device_name", c.name.clone())?;
            t.set("engine", dev.engine_name())?;
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
        m.add_method("max_batch", |_, this, args: SizingArgs| {
            let call = "context:max_batch";
            let dev = this.get(call)?;
            Ok(BatchSizing::parse(call, args)?.max_batch(dev))
        });
        // The engine `mode` ("scan", "gram" or "auto", the default) resolves to for an N × D
        // table at `precision` on this device, and why: (mode name, reason in words, reason code,
        // why G does not fit or nil); see `mode_values`.
        m.add_method(
            "mode_for",
            |_, this, (n, d, precision, mode): (Value, Value, Option<String>, Option<String>)| {
                let call = "context:mode_for";
                let (dev, n, d) = device_and_dims(this, call, &n, &d)?;
                let p = parse_precision(call, precision)?;
                let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
                Ok(mode_values(&dev.mode_for(mode, n, d, p)))
            },
        );
        // The gram arithmetic a job with `opts` (placement, workgroup, compensated, judge) runs
        // for an N × D table on this device, as the cache metadata's `summation` names it.
        m.add_method(
            "gram_summation",
            |_, this, (n, d, o): (Value, Value, Option<LuaTable>)| {
                let call = "context:gram_summation";
                let (dev, n, d) = device_and_dims(this, call, &n, &d)?;
                let g = super::job::gram_only_options(call, &o)?;
                dev.summation(Mode::Gram, n, d, &g).lua_ctx(call)
            },
        );
        // The arithmetic a job of the engine `mode` resolves to runs, as the cache metadata's
        // `summation` names it (and the checkpoint binds): the host engine's for either mode on
        // a host context, the gram arithmetic with `opts` on a device, nil for a device scan.
        m.add_method(
            "summation",
            |_, this, (n, d, mode, o): (Value, Value, Option<String>, Option<LuaTable>)| {
                let call = "context:summation";
                let (dev, n, d) = device_and_dims(this, call, &n, &d)?;
                let mode = parse_mode(call, mode.as_deref(), Mode::Auto)?;
                let g = super::job::gram_only_options(call, &o)?;
                let resolved = dev.mode_for(mode, n, d, Precision::Fp32).mode;
                dev.summation(resolved, n, d, &g).lua_ctx(call)
            },
        );
        m.add_method("validation_messages", |lua, this, ()| {
            lua.create_sequence_from(match this.get("context:validation_messages")?.context() {
                Some(c) => c.validation_messages(),
                None => Vec::new(),
            })
        });
        m.add_method(
            "upload",
            |_, this, (table, precision): (LuaAnyUserData, Option<String>)| {
                let call = "context:upload";
                let dev = this.get(call)?;
                let p = parse_precision(call, precision)?;
                let t = table.borrow::<LTable>()?;
                let e = dev.upload(t.get(call)?, p).lua_ctx(call)?;
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
            // No Vulkan device on this machine (and none named): the host engine alone.
            Ok(LContext::new(
                "context",
                Target::open(&opts).lua_ctx("open")?,
            ))
        })?,
    )?;
    m.set(
        "devices",
        lua.create_function(|lua, ()| {
            // A machine with no Vulkan loader, driver or device has none to list (sequences
            // still run there, on the host engine).
            let list = match Context::list_devices() {
                Err(crate::error::Error::NoDevice(_)) => Vec::new(),
                r => r.lua_ctx("devices")?,
            };
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
