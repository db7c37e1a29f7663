//! `diversity.open`, `diversity.devices` and the context handle: a device, its capabilities,
//! the engine a mode resolves to on it, and table uploads. May touch the crate's device context,
//! engine choice and device table, and the binding's helpers.

use super::args::{dims, opt, parse_mode, parse_precision, steps_or_all};
use super::device_table::{mode_values, LDeviceTable};
use super::error::LuaCtx;
use super::handle::Handle;
use super::table::LTable;
use crate::device::{Context, ContextOptions};
use crate::engine::{self, Engine, ModeChoice};
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

/// What a context handle holds: a Vulkan device, or none on a machine that has no Vulkan
/// device (loader, driver or device missing), where diversity sequences still run on the host
/// engine and what needs a device is refused naming the cause.
pub(super) enum Device {
    /// An open Vulkan device (its sequences on the host engine where
    /// [`Context::native_host`]).
    Vulkan(Context),
    /// No Vulkan device: the host engine only.
    HostOnly,
}

impl Device {
    /// The Vulkan device, or an error for `call` saying the machine has none.
    pub(super) fn vulkan(&self, call: &str) -> LuaResult<&Context> {
        match self {
            Device::Vulkan(c) => Ok(c),
            Device::HostOnly => Err::<&Context, _>(engine::no_vulkan()).lua_ctx(call),
        }
    }
    /// Whether diversity sequences run on the host engine.
    pub(super) fn native_host(&self) -> bool {
        match self {
            Device::Vulkan(c) => c.native_host(),
            Device::HostOnly => true,
        }
    }
    /// The engine `mode` resolves to for an N × D table at `p`, and why.
    pub(super) fn mode_for(&self, mode: Mode, n: usize, d: usize, p: Precision) -> ModeChoice {
        match self {
            Device::Vulkan(c) => ModeChoice::for_context(c, mode, n, d, p),
            Device::HostOnly => ModeChoice::host(mode, n, d),
        }
    }
    /// The largest batch for the N × D table, precision, steps and mode of `s`.
    pub(super) fn max_batch(&self, s: &BatchSizing) -> usize {
        let BatchSizing {
            mode,
            n,
            d,
            p,
            steps,
        } = *s;
        match self {
            Device::Vulkan(c) if !c.native_host() => {
                engine::max_batch(c.caps(), mode, n, d, p, steps)
            }
            _ => host::max_batch(mode, n, d, steps, host::host_memory_budget()),
        }
    }
    /// The arithmetic a job of the engine `mode` (resolved: gram or scan) runs for an N × D
    /// table, as the cache metadata's `summation` names it: the host engine's on a host context,
    /// the gram arithmetic with `g` for a gram on a device, nil for a scan on a device.
    fn summation(
        &self,
        call: &str,
        mode: Mode,
        n: usize,
        d: usize,
        g: &crate::gram::GramOptions,
    ) -> LuaResult<Option<String>> {
        if self.native_host() {
            return Ok(Some(engine::host_summation(mode).to_string()));
        }
        if mode != Mode::Gram {
            return Ok(None);
        }
        let caps = self.vulkan(call)?.caps();
        crate::gram::summation(caps, n, d, g)
            .lua_ctx(call)
            .map(Some)
    }
    /// The name sequences report.
    pub(super) fn name(&self) -> String {
        match self {
            Device::Vulkan(c) => engine::sequence_device_name(c),
            Device::HostOnly => engine::host_engine_name(),
        }
    }
}

/// The L2 size a context without a device reports (the driver's tile formula reads it; the host
/// engine has no tiles).
const NO_DEVICE_L2: u64 = 1 << 20;

/// A device.
pub(super) type LContext = Handle<Device>;

/// The device of `this` (`call`'s error after close()), then the checked `n` and `dim`: the
/// opening of the context methods that size an N × D table, its errors in that order.
fn device_and_dims<'a>(
    this: &'a LContext,
    call: &str,
    n: &Value,
    d: &Value,
) -> LuaResult<(&'a Device, usize, usize)> {
    let dev = this.get(call)?;
    let (n, d) = dims(call, n, d)?;
    Ok((dev, n, d))
}

/// The Vulkan device of a context handle passed to `call` (shared: a clone of the context), or
/// the error where the handle is closed or the machine has no Vulkan device.
pub(super) fn vulkan_arg(call: &str, ctx: &LuaAnyUserData) -> LuaResult<Context> {
    let c = ctx.borrow::<LContext>()?;
    Ok(c.get(call)?.vulkan(call)?.clone())
}

impl UserData for LContext {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("describe", |_, this, ()| {
            Ok(match this.get("context:describe")? {
                Device::Vulkan(c) if c.native_host() => {
                    format!("{}{}", engine::host_line(), c.describe())
                }
                Device::Vulkan(c) => c.describe(),
                Device::HostOnly => format!(
                    "{}device:          none (no Vulkan loader, driver or device on this machine)\n",
                    engine::host_line()
                ),
            })
        });
        // The name sequences report: the device's, or the CPU's with "(host engine)".
        m.add_method("name", |_, this, ()| Ok(this.get("context:name")?.name()));
        // Where diversity sequences run: "host" (the native CPU engine) or "device".
        m.add_method("engine", |_, this, ()| {
            Ok(match this.get("context:engine")?.native_host() {
                true => "host",
                false => "device",
            })
        });
        m.add_method("l2_bytes", |_, this, ()| {
            Ok(match this.get("context:l2_bytes")? {
                Device::Vulkan(c) => c.caps().l2_bytes,
                Device::HostOnly => NO_DEVICE_L2,
            })
        });
        m.add_method("caps", |lua, this, ()| {
            let dev = this.get("context:caps")?;
            let t = lua.create_table()?;
            let ctx = match dev {
                Device::Vulkan(c) => c,
                Device::HostOnly => {
                    t.set("name", dev.name())?;
                    t.set("device_name", "none")?;
                    t.set("engine", "host")?;
                    t.set("device_type", "none")?;
                    t.set("fp16_storage", true)?;
                    t.set("timestamps", false)?;
                    t.set("memory_budget_bytes", host::host_memory_budget())?;
                    t.set("l2_bytes", NO_DEVICE_L2)?;
                    t.set("l2_source", "none")?;
                    return Ok(t);
                }
            };
            let c = ctx.caps();
            // `name` is where sequences run (see `name`); `device_name` the Vulkan device's.
            t.set("name", dev.name())?;
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
        m.add_method("max_batch", |_, this, args: SizingArgs| {
            let call = "context:max_batch";
            let dev = this.get(call)?;
            Ok(dev.max_batch(&BatchSizing::parse(call, args)?))
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
                dev.summation(call, Mode::Gram, n, d, &g)
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
                dev.summation(call, resolved, n, d, &g)
            },
        );
        m.add_method("validation_messages", |lua, this, ()| {
            lua.create_sequence_from(match this.get("context:validation_messages")? {
                Device::Vulkan(c) => c.validation_messages(),
                Device::HostOnly => Vec::new(),
            })
        });
        m.add_method(
            "upload",
            |_, this, (table, precision): (LuaAnyUserData, Option<String>)| {
                let call = "context:upload";
                let dev = this.get(call)?;
                let p = parse_precision(call, precision)?;
                let t = table.borrow::<LTable>()?;
                let e = match dev {
                    Device::Vulkan(ctx) => Engine::upload(ctx, t.get(call)?, p),
                    Device::HostOnly => Engine::host_only(t.get(call)?, p),
                }
                .lua_ctx(call)?;
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
            let dev = match Context::new(&opts) {
                Ok(ctx) => Device::Vulkan(ctx),
                Err(e) if engine::host_fallback(&opts, &e) => Device::HostOnly,
                Err(e) => return Err(e).lua_ctx("open"),
            };
            Ok(LContext::new("context", dev))
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
