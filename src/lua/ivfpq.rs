//! The IVF-PQ index: `ivfpq_index`, `load_ivfpq_index` and its handle (`train`, `add`,
//! `search`, `save`, …). May touch the crate's IVF-PQ index, the shared index methods of `ivf.rs`
//! and the binding's helpers.

use super::args::{opt, opt_int};
use super::context::vulkan_arg;
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::ivf::{add_index_methods, index_sizes, kmeans_options, register_load, search_index};
use super::knn::parse_metric;
use crate::ivf::{IvfPq, IvfPqOptions};
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// An IVF-PQ index.
pub(super) type LIvfPq = Handle<IvfPq>;

impl UserData for LIvfPq {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        add_index_methods(m, "ivfpq");
        m.add_method("m", |_, this, ()| Ok(this.get("ivfpq:m")?.m()));
        m.add_method("refine", |_, this, ()| {
            Ok(this.get("ivfpq:refine")?.keeps_vectors())
        });
        // `search(queries, {k = 10, nprobe = 1, k_factor = 1, metric = the index's})`: the knn
        // result and a report {nprobe, rows_scanned, coarse_ns, lists_ns}.
        m.add_method_mut(
            "search",
            |lua, this, (queries, o): (LuaAnyUserData, Option<LuaTable>)| {
                let (r, t, _) = search_index(lua, "ivfpq:search", this, &queries, &o)?;
                Ok((r, t))
            },
        );
    }
}

/// `ivfpq_index`, `load_ivfpq_index`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.ivfpq_index(ctx, dim, {nlist =, m =, metric = "cosine", refine = false, iters
    // =, seed =, max_points_per_centroid =})`: an empty, untrained IVF-PQ index.
    m.set(
        "ivfpq_index",
        lua.create_function(
            |_, (ctx, dim, o): (LuaAnyUserData, Value, Option<LuaTable>)| {
                let call = "ivfpq_index";
                let c = vulkan_arg(call, &ctx)?;
                let (dim, nlist) = index_sizes(call, &dim, &o)?;
                let pm = opt_int(call, &o, "m")?.ok_or_else(|| msg(call, "opts.m is required"))?;
                let refine = match opt::<Value>(&o, "refine")? {
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
                    nlist,
                    m: pm as usize,
                    metric: parse_metric(call, &o)?,
                    keep_vectors: refine,
                    kmeans: kmeans_options(call, &o)?,
                };
                let ix = IvfPq::new(&c, dim, &opts).lua_ctx(call)?;
                Ok(LIvfPq::new("ivfpq index", ix))
            },
        )?,
    )?;
    // `diversity.load_ivfpq_index(ctx, path)`: an index saved by `ivfpq:save`.
    register_load(lua, m, "load_ivfpq_index", "ivfpq index", IvfPq::load)
}
