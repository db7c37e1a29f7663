//! Errors as Lua sees them: every error, argument errors included, is a Lua string
//! `"diversity.<call>: <cause>"`. Crate errors convert in one place, [`LuaCtx::lua_ctx`], with the
//! crate's message as the cause. May touch Lua errors and the crate's error type; nothing else.

use mlua::prelude::*;

/// A Lua runtime error `"diversity.<call>: <m>"`, for causes the binding finds itself.
pub(super) fn msg(call: &str, m: impl std::fmt::Display) -> LuaError {
    LuaError::RuntimeError(format!("diversity.{call}: {m}"))
}

/// A crate result as a Lua result: the error becomes `"diversity.<call>: <the crate's message>"`.
pub(super) trait LuaCtx<T> {
    /// Convert, naming the Lua call (`"device_table:job"`, `"open"`, …).
    fn lua_ctx(self, call: &str) -> LuaResult<T>;
}

impl<T> LuaCtx<T> for crate::error::Result<T> {
    fn lua_ctx(self, call: &str) -> LuaResult<T> {
        self.map_err(|e| msg(call, e))
    }
}
