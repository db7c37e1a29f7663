//! The IVF-PQ index: `ivfpq_index`, `load_ivfpq_index` and its handle (`train`, `add`,
//! `search`, `save`, …). May touch the crate's IVF-PQ index, the shared index methods of `ivf.rs`
//! and the binding's helpers.

use super::args::{opt, opt_int};
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::ivf::{kmeans_options, register_index, Creating, LuaIndex};
use super::knn::parse_metric;
use crate::ivf::{IvfPq, IvfPqOptions, IvfSearchReport};
use mlua::prelude::*;
use mlua::{UserDataMethods, Value};

/// An IVF-PQ index.
pub(super) type LIvfPq = Handle<IvfPq>;

impl LuaIndex for IvfPq {
    const WHAT: &'static str = "ivfpq";
    const HANDLE: &'static str = "ivfpq index";

    /// `{nlist =, m =, metric = "cosine", refine = false, iters =, seed =,
    /// max_points_per_centroid =}`.
    fn create(a: Creating) -> LuaResult<Self> {
        let (call, o) = (a.call, a.o);
        let pm = opt_int(call, o, "m")?.ok_or_else(|| msg(call, "opts.m is required"))?;
        let refine = match opt::<Value>(o, "refine")? {
            None | Some(Value::Nil) => false,
            Some(Value::Boolean(b)) => b,
            Some(v) => {
                return Err(msg(
                    call,
                    format!("opts.refine must be a boolean, got a {}", v.type_name()),
                ))
            }
        };
        let opts = IvfPqOptions {
            nlist: a.nlist,
            m: pm as usize,
            metric: parse_metric(call, o)?,
            keep_vectors: refine,
            kmeans: kmeans_options(call, o)?,
        };
        IvfPq::new(a.ctx, a.dim, &opts).lua_ctx(call)
    }

    fn add_own_methods<M: UserDataMethods<Handle<Self>>>(m: &mut M) {
        m.add_method("m", |_, this, ()| Ok(this.get("ivfpq:m")?.m()));
        m.add_method("refine", |_, this, ()| {
            Ok(this.get("ivfpq:refine")?.keeps_vectors())
        });
    }

    /// None: the fields both indexes fill.
    fn report(_: &LuaTable, _: &IvfSearchReport) -> LuaResult<()> {
        Ok(())
    }
}

/// `ivfpq_index`, `load_ivfpq_index`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.ivfpq_index(ctx, dim, opts)`: an empty, untrained IVF-PQ index;
    // `diversity.load_ivfpq_index(ctx, path)`: an index saved by `ivfpq:save`.
    register_index::<IvfPq>(lua, m, "ivfpq_index", "load_ivfpq_index", IvfPq::load)
}
