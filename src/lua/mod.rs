//! The LuaJIT module (`require "diversity"`): a thin skin over the Rust API. Every handle is a
//! userdata with `close()`; use after close is a Lua error; garbage collection in any order frees
//! everything (each handle keeps what it needs alive through `Arc`s). Errors carry the call's
//! name and the cause (`"diversity.<call>: <cause>"`, converted once in `error.rs`). No logic
//! lives here that the Rust tests cannot reach, except the conversion of Lua values and FFI
//! cdata; engine choice is [`crate::engine`]'s. Each binding file may touch the crate's public
//! API and the binding's own helpers (`args`, `error`, `handle`, `cdata`); nothing in the crate
//! depends on the binding.
//!
//! This file builds the module table; each family of handles lives in its own file and adds its
//! functions to the table:
//!
//! | file | what it owns |
//! |---|---|
//! | `error.rs` | the error conversion |
//! | `handle.rs` | the close-able handle every userdata wraps |
//! | `args.rs` | Lua arguments to Rust values (integers, index lists, options, enums) |
//! | `json.rs` | JSON values to and from Lua values, `json_decode`, `json_encode` |
//! | `cdata.rs` | FFI cdata: reading tables from it, writing results into it, fp16 conversion |
//! | `context.rs` | `open`, `devices`, the context handle |
//! | `table.rs` | `table`, the file loaders, the host table handle |
//! | `device_table.rs` | the device table and Gram handles, `gram_bytes` |
//! | `job.rs` | the job handle, job options, `check_starts` |
//! | `sequencer.rs` | the sequencer handle (`dtable:sequencer`): prefixes on demand |
//! | `knn.rs` | k-NN results, rankings, k-NN graphs, the device table's k-NN methods |
//! | `cache.rs` | the cache writers and reader, `merge_caches` |
//! | `multi.rs` | several devices (`open_devices`, `knn_index`) and `wait_any` over stepping jobs |
//! | `stepping.rs` | a job stepping on a thread of its own (`job:start`), cancelled at exit |
//! | `ivf.rs` | `kmeans`, the IVF-Flat index (`ivf_index`, `load_ivf_index`) and its handle |
//! | `ivfpq.rs` | the IVF-PQ index (`ivfpq_index`, `load_ivfpq_index`) and its handle |
//! | `driver.rs` | the driver's mechanics: the checkpoint format, batch sizing over devices |

mod args;
mod cache;
mod cdata;
mod context;
mod device_table;
mod driver;
mod error;
mod handle;
mod ivf;
mod ivfpq;
mod job;
mod json;
mod knn;
mod multi;
mod rows;
mod sequencer;
mod stepping;
mod table;

use mlua::prelude::*;
use mlua::Value;

/// `m[name] = f` as a Lua function: how every binding file adds its functions to the module
/// table.
pub(super) fn set_function<A, R>(
    lua: &Lua,
    m: &LuaTable,
    name: &str,
    f: impl Fn(&Lua, A) -> LuaResult<R> + mlua::MaybeSend + 'static,
) -> LuaResult<()>
where
    A: FromLuaMulti,
    R: IntoLuaMulti,
{
    m.set(name, lua.create_function(f)?)
}

/// The module table.
#[mlua::lua_module]
fn diversity(lua: &Lua) -> LuaResult<LuaTable> {
    let m = lua.create_table()?;
    m.set("version", env!("CARGO_PKG_VERSION"))?;
    // Each handle family's file adds its functions, in this order.
    let families: [fn(&Lua, &LuaTable) -> LuaResult<()>; 13] = [
        context::register,
        table::register,
        cdata::register,
        device_table::register,
        job::register,
        cache::register,
        knn::register,
        multi::register,
        rows::register,
        ivf::register,
        ivfpq::register,
        driver::register,
        json::register,
    ];
    for register in families {
        register(lua, &m)?;
    }
    // "diversity X.Y.Z", as Lua modules say what they are.
    m.set("_VERSION", concat!("diversity ", env!("CARGO_PKG_VERSION")))?;
    m.set("ENV_FAIL_AFTER_CHUNKS", crate::batch::ENV_FAIL_AFTER_CHUNKS)?;
    m.set("ENV_INJECT_PANIC", crate::batch::ENV_INJECT_PANIC)?;
    // The host's memory in bytes (MemTotal), nil where it cannot be read.
    m.set(
        "host_memory",
        lua.create_function(|_, ()| Ok(crate::device::host_memory_bytes()))?,
    )?;
    // The clean message of an error raised by this module (no "runtime error: " prefix, no
    // traceback): `diversity.message(err)`.
    let message: LuaFunction = lua
        .load(
            r#"return function(e)
                 local s = tostring(e)
                 s = s:gsub("^runtime error: ", ""):gsub("\nstack traceback:.*$", "")
                 return s
               end"#,
        )
        .set_name("=diversity.message")
        .call(())?;
    m.set("message", message.clone())?;
    string_errors(lua, &m, message)?;
    Ok(m)
}

/// Makes every error a plain Lua string `"diversity.<call>: <cause>"`. mlua raises a Rust
/// callback's error (and a caught panic) as a userdata whose `tostring` adds "runtime error: "
/// and a traceback; each module function and each handle method is wrapped once, at load, in a
/// Lua function that catches that value and raises its clean message instead (argument
/// conversion errors get the call's name, and methods count arguments after `self`, as Lua
/// does). A panic that escapes a call becomes a Lua error like any other, never an abort.
fn string_errors(lua: &Lua, m: &LuaTable, message: LuaFunction) -> LuaResult<()> {
    let wrap: LuaFunction = lua
        .load(
            r#"local message = ...
               local error, pcall, tonumber = error, pcall, tonumber
               return function(call, f, method)
                 local function fail(e)
                   local s = message(e)
                   s = s:gsub("^(bad argument [^ ]+) to `[^`]*`", "%1")
                   s = s:gsub("^bad argument `self`", "bad self")
                   s = s:gsub(" %(expected userdata of type '[^']*'%)", "")
                   if method then
                     s = s:gsub("^bad argument #(%d+)", function(n)
                       n = tonumber(n)
                       return n == 1 and "bad self" or "bad argument #" .. (n - 1)
                     end)
                   end
                   if not s:find("^diversity[.:]") then s = "diversity." .. call .. ": " .. s end
                   error(s, 0)
                 end
                 local function finish(ok, ...)
                   if ok then return ... end
                   return fail((...))
                 end
                 return function(...) return finish(pcall(f, ...)) end
               end"#,
        )
        .set_name("=diversity")
        .call(message)?;
    let functions = m
        .pairs::<String, Value>()
        .filter_map(|p| match p {
            Ok((k, Value::Function(f))) if k != "message" => Some(Ok((k, f))),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<LuaResult<Vec<_>>>()?;
    for (name, f) in functions {
        m.raw_set(
            name.as_str(),
            wrap.call::<LuaFunction>((name.as_str(), f, false))?,
        )?;
    }
    // The methods tables are one per handle type and per Lua state: wrap them once.
    const DONE: &str = "diversity.string_errors";
    if lua.named_registry_value::<Option<bool>>(DONE)? == Some(true) {
        return Ok(());
    }
    wrap_methods(lua, &wrap, "context", context::LContext::new_closed())?;
    wrap_methods(lua, &wrap, "table", table::LTable::new_closed())?;
    wrap_methods(
        lua,
        &wrap,
        "device_table",
        device_table::LDeviceTable::new_closed(),
    )?;
    wrap_methods(lua, &wrap, "gram", device_table::LGram::new_closed())?;
    wrap_methods(lua, &wrap, "job", job::LJob::closed())?;
    wrap_methods(lua, &wrap, "knn", knn::LKnn::new_closed())?;
    wrap_methods(lua, &wrap, "knn_graph", knn::LKnnGraph::new_closed())?;
    wrap_methods(lua, &wrap, "json_cache", cache::LJsonWriter::new_closed())?;
    wrap_methods(lua, &wrap, "binary_cache", cache::LBinWriter::new_closed())?;
    wrap_methods(lua, &wrap, "binary_cache", cache::LBinCache::new_closed())?;
    wrap_methods(lua, &wrap, "multi_knn", multi::LMultiKnn::new_closed())?;
    wrap_methods(lua, &wrap, "ivf", ivf::LIvf::new_closed())?;
    wrap_methods(lua, &wrap, "ivfpq", ivfpq::LIvfPq::new_closed())?;
    lua.set_named_registry_value(DONE, true)
}

/// Wrap every method of the handle type of `empty` (see [`string_errors`]), naming calls
/// `"<prefix>:<method>"`.
fn wrap_methods<T: mlua::UserData + 'static>(
    lua: &Lua,
    wrap: &LuaFunction,
    prefix: &str,
    empty: T,
) -> LuaResult<()> {
    let ud = lua.create_userdata(empty)?;
    // With methods only (no fields, no __index of its own), mlua makes the methods table the
    // metatable's __index; a handle that gains fields must keep its errors strings some other
    // way, so refuse to load rather than let them become userdata again.
    let Value::Table(methods) = ud.metatable()?.get::<Value>("__index")? else {
        return Err(LuaError::RuntimeError(format!(
            "diversity: the {prefix} handle's methods are not a table"
        )));
    };
    let all = methods
        .pairs::<String, LuaFunction>()
        .collect::<LuaResult<Vec<_>>>()?;
    for (name, f) in all {
        let call = format!("{prefix}:{name}");
        methods.raw_set(name, wrap.call::<LuaFunction>((call, f, true))?)?;
    }
    Ok(())
}
