//! The handle every userdata wraps: `close()` empties it, and every method reaches its value
//! through [`Handle::get`], so that use after close is a Lua error naming the call. May touch the
//! value it wraps and the binding's errors; nothing else.

use super::error::msg;
use mlua::prelude::*;
use mlua::UserDataMethods;

/// A handle that `close()` empties; every method goes through [`Handle::get`].
pub(super) struct Handle<T> {
    /// What the handle is, for messages ("device table").
    pub(super) what: &'static str,
    /// The value; `None` once closed.
    pub(super) inner: Option<T>,
}

impl<T> Handle<T> {
    /// A handle holding `v`.
    pub(super) fn new(what: &'static str, v: T) -> Self {
        Handle {
            what,
            inner: Some(v),
        }
    }
    /// A closed handle (what `close()` leaves), for reaching the type's methods table.
    pub(super) fn new_closed() -> Self {
        Handle {
            what: "handle",
            inner: None,
        }
    }
    /// The value, or an error naming `call` after `close()`.
    pub(super) fn get(&self, call: &str) -> LuaResult<&T> {
        self.inner
            .as_ref()
            .ok_or_else(|| msg(call, format!("{} used after close()", self.what)))
    }
    /// [`Handle::get`], mutable.
    pub(super) fn get_mut(&mut self, call: &str) -> LuaResult<&mut T> {
        let what = self.what;
        self.inner
            .as_mut()
            .ok_or_else(|| msg(call, format!("{what} used after close()")))
    }
    /// Take the value out (a writer's `finish()`), leaving the handle closed.
    pub(super) fn take(&mut self, call: &str) -> LuaResult<T> {
        let what = self.what;
        self.inner
            .take()
            .ok_or_else(|| msg(call, format!("{what} used after close()")))
    }
    /// Add `close()`: empty the handle (what it held is dropped when nothing else holds it).
    pub(super) fn add_close<M: UserDataMethods<Self>>(m: &mut M)
    where
        T: 'static,
    {
        m.add_method_mut("close", |_, this, ()| {
            this.inner = None;
            Ok(())
        });
    }
}
