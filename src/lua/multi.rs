//! Several devices and threads: `open_devices`, `knn_index` and its handle, and `wait_any` over
//! jobs stepping on threads of their own (the threads themselves are `stepping.rs`'s). May touch
//! the crate's multi-device API, the context, table and job handles and the binding's helpers.

use super::args::{opt, parse_precision};
use super::context::{vulkan_arg, LContext};
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::job::LJob;
use super::knn::{knn_options, knn_result};
use super::table::LTable;
use crate::engine::Target;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods};

/// A table on several devices for k-NN: row slices (shards) or whole copies (replicas).
pub(super) enum MultiKnn {
    Shards(crate::multi::IndexShards),
    Replicas(crate::multi::IndexReplicas),
}

/// A multi-device k-NN index.
pub(super) type LMultiKnn = Handle<MultiKnn>;

impl UserData for LMultiKnn {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // The same search and result object as `dtable:knn`, plus a report table:
        // `per_device_ns` and `ranges` ({first, last + 1} 0-based: table rows of each shard,
        // queries of each replica; {0, 0} for a device left out).
        m.add_method(
            "knn",
            |lua, this, (queries, o): (LuaAnyUserData, Option<LuaTable>)| {
                let call = "multi_knn:knn";
                let q = queries.borrow::<LTable>()?;
                let q = q.get(call)?;
                let opts = knn_options(call, &o)?;
                let (r, report) = match this.get(call)? {
                    MultiKnn::Shards(s) => s.knn(q.data(), q.d(), &opts),
                    MultiKnn::Replicas(s) => s.knn(q.data(), q.d(), &opts),
                }
                .lua_ctx(call)?;
                let r = knn_result(call, r)?;
                let t = lua.create_table()?;
                t.set(
                    "per_device_ns",
                    lua.create_sequence_from(report.per_device_ns.iter().copied())?,
                )?;
                let ranges = lua.create_table()?;
                for (i, &(a, b)) in report.ranges.iter().enumerate() {
                    ranges.raw_set(i + 1, lua.create_sequence_from([a, b])?)?;
                }
                t.set("ranges", ranges)?;
                Ok((r, t))
            },
        );
        m.add_method("layout", |_, this, ()| {
            Ok(match this.get("multi_knn:layout")? {
                MultiKnn::Shards(_) => "shards",
                MultiKnn::Replicas(_) => "replicas",
            })
        });
        Handle::add_close(m);
    }
}

/// `open_devices`, `knn_index`, `wait_any`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.open_devices(spec [, {validation = bool}])`: contexts for "all" or a comma list
    // of indices or name substrings ("0,0" opens one device twice), as a Lua array.
    m.set(
        "open_devices",
        lua.create_function(|lua, (spec, o): (String, Option<LuaTable>)| {
            let validation = opt(&o, "validation")?.unwrap_or(false);
            let ctxs = crate::multi::open_devices(&spec, validation).lua_ctx("open_devices")?;
            lua.create_sequence_from(
                ctxs.into_iter()
                    .map(|c| LContext::new("context", Target::Vulkan(c))),
            )
        })?,
    )?;
    // `diversity.knn_index(contexts, table, precision [, {layout = "shards" | "replicas",
    // weights = {…}}])`: the table uploaded to every context, as row slices (shards, the
    // default) or whole copies (replicas); `:knn(queries, opts)` gives the same ids and distance
    // bits as one device's `dtable:knn`.
    m.set(
        "knn_index",
        lua.create_function(
            |_,
             (ctxs, table, precision, o): (
                LuaTable,
                LuaAnyUserData,
                Option<String>,
                Option<LuaTable>,
            )| {
                let call = "knn_index";
                super::args::dense(call, "the contexts", &ctxs)?;
                let mut list = Vec::new();
                for u in ctxs.sequence_values::<LuaAnyUserData>() {
                    list.push(vulkan_arg(call, &u?)?);
                }
                let t = table.borrow::<LTable>()?;
                let t = t.get(call)?;
                let p = parse_precision(call, precision)?;
                let weights: Option<Vec<f64>> = opt(&o, "weights")?;
                let layout: Option<String> = opt(&o, "layout")?;
                let w = weights.as_deref();
                let index = match layout.as_deref().unwrap_or("shards") {
                    "shards" => {
                        crate::multi::IndexShards::new(&list, t, p, w).map(MultiKnn::Shards)
                    }
                    "replicas" => {
                        crate::multi::IndexReplicas::new(&list, t, p, w).map(MultiKnn::Replicas)
                    }
                    other => {
                        return Err(msg(
                            call,
                            format!("layout '{other}': expected shards or replicas"),
                        ))
                    }
                }
                .lua_ctx(call)?;
                Ok(LMultiKnn::new("multi-device knn index", index))
            },
        )?,
    )?;
    // `diversity.wait_any{job1, job2, …}`: block until one of the started jobs has finished its
    // step and return its position (1-based); nil when none is started.
    m.set(
        "wait_any",
        lua.create_function(|_, jobs: LuaTable| {
            let list: Vec<(i64, mlua::AnyUserData)> = jobs
                .pairs::<i64, mlua::AnyUserData>()
                .collect::<LuaResult<_>>()?;
            loop {
                let mut any = false;
                for (i, u) in &list {
                    if let Some(finished) = u.borrow::<LJob>()?.finished() {
                        any = true;
                        if finished {
                            return Ok(Some(*i));
                        }
                    }
                }
                if !any {
                    return Ok(None);
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })?,
    )?;
    Ok(())
}
