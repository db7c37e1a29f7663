//! The LuaJIT module (`require "diversity"`): a thin skin over the Rust API. Every handle is a
//! userdata with `close()`; use after close is a Lua error; garbage collection in any order frees
//! everything (each handle keeps what it needs alive through `Arc`s). Errors carry the call's
//! name and the cause (`"diversity.<call>: <cause>"`, converted once in `error.rs`). No logic
//! lives here that the Rust tests cannot reach, except the conversion of Lua values and FFI
//! cdata; engine choice is [`crate::engine`]'s.
//!
//! This file builds the module table; each family of handles lives in its own file and adds its
//! functions to the table:
//!
//! | file | what it owns |
//! |---|---|
//! | `error.rs` | the error conversion |
//! | `handle.rs` | the close-able handle every userdata wraps |
//! | `args.rs` | Lua arguments to Rust values (integers, index lists, options, enums) |
//! | `json.rs` | JSON values to and from Lua values |
//! | `cdata.rs` | FFI cdata: reading tables from it, writing results into it, fp16 conversion |
//! | `context.rs` | `open`, `devices`, the context handle |
//! | `table.rs` | `table`, the file loaders, the host table handle |
//! | `device_table.rs` | the device table and Gram handles, `gram_bytes` |
//! | `job.rs` | the job handle, job options, `check_starts` |
//! | `knn.rs` | k-NN results, rankings, k-NN graphs, the device table's k-NN methods |
//! | `cache.rs` | the cache writers and reader, `merge_caches` |
//! | `multi.rs` | several devices (`open_devices`, `knn_index`) and jobs on threads (`wait_any`) |

mod args;
mod cache;
mod cdata;
mod context;
mod device_table;
mod error;
mod handle;
mod job;
mod json;
mod knn;
mod multi;
mod table;

use mlua::prelude::*;

/// The module table.
#[mlua::lua_module]
fn diversity(lua: &Lua) -> LuaResult<LuaTable> {
    let m = lua.create_table()?;
    m.set("version", env!("CARGO_PKG_VERSION"))?;
    context::register(lua, &m)?;
    table::register(lua, &m)?;
    cdata::register(lua, &m)?;
    device_table::register(lua, &m)?;
    job::register(lua, &m)?;
    cache::register(lua, &m)?;
    knn::register(lua, &m)?;
    multi::register(lua, &m)?;
    m.set("ENV_FAIL_AFTER_CHUNKS", crate::batch::ENV_FAIL_AFTER_CHUNKS)?;
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
    m.set("message", message)?;
    Ok(m)
}
