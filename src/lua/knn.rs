//! k-NN and rankings: the k-NN result and k-NN graph handles, the options of `dtable:knn`,
//! `dtable:rankings` and the rankings cache writers, and those device table methods. May touch the
//! crate's k-NN, rankings and k-NN graph APIs, cdata and the binding's helpers.

use super::args::{int, int_list, int_u32, opt, opt_int};
use super::cdata::copy_to_cdata;
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::json::{json_list, lua_to_json};
use super::set_function;
use super::table::LTable;
use crate::cache::{KnnGraph, KnnMetric, KNN_PAD};
use crate::device_table::DeviceTable;
use crate::engine::Engine;
use crate::error::Error;
use crate::knn::{knn, KnnOptions, KnnPath, KnnResult, NO_ID};
use crate::metric::Metric;
use crate::rankings::{self, RankingsOptions, RankingsReport};
use crate::table::Table;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};
use std::path::Path;

/// A k-NN result.
pub(super) type LKnn = Handle<KnnResult>;
/// An opened k-NN graph file.
pub(super) type LKnnGraph = Handle<KnnGraph>;

/// The k-NN and rankings methods of the device table: `knn`, `rankings`,
/// `write_rankings_cache`, `write_knn_graph`. The device table's handle (`Handle<Engine>`)
/// calls this from its own method list; this file does not import the device table's file.
pub(super) fn add_device_table_methods<M: UserDataMethods<Handle<Engine>>>(m: &mut M) {
    // Exact k-NN of the rows of `queries` (a table object of the same dimension; the table
    // that was uploaded for a self-search) against this table: a knn result object.
    m.add_method(
        "knn",
        |_, this, (queries, o): (LuaAnyUserData, Option<LuaTable>)| {
            let call = "device_table:knn";
            let (dt, q) = device_table_and(this, call, &queries)?;
            let opts = knn_options(call, &o)?;
            let r = knn(dt, q.get(call)?, &opts).lua_ctx(call)?;
            knn_result(call, r)
        },
    );
    // Rankings of every item (or `opts.items`) against all others, self excluded: returned
    // as Lua arrays in the order of the items ranked (rows[1] is item 0's, or `opts.items[1]`'s),
    // or handed batch by batch to `opts.each`.
    m.add_method(
        "rankings",
        |lua, this, (table, o): (LuaAnyUserData, Option<LuaTable>)| {
            let call = "device_table:rankings";
            let (dt, t) = device_table_and(this, call, &table)?;
            let t = t.get(call)?;
            let opts = rankings_options(call, &o)?;
            let each = opt::<LuaFunction>(&o, "each")?;
            let with_values = opt::<bool>(&o, "values")?.unwrap_or(true);
            let (rows, values) = (lua.create_table()?, lua.create_table()?);
            // rows[p] is the p-th item ranked (1-based): item p − 1, or opts.items[p].
            let position: Option<std::collections::HashMap<u32, i64>> =
                opts.items.as_ref().map(|items| {
                    items
                        .iter()
                        .enumerate()
                        .map(|(p, &item)| (item, p as i64 + 1))
                        .collect()
                });
            let mut failed: Option<LuaError> = None;
            let res = rankings::rankings_with_values(dt, t, &opts, |items, ids, vals, len| {
                let step = || -> LuaResult<()> {
                    let (br, bv) = match &each {
                        Some(_) => (lua.create_table()?, lua.create_table()?),
                        None => (rows.clone(), values.clone()),
                    };
                    for (i, &item) in items.iter().enumerate() {
                        let key = match (&each, &position) {
                            (Some(_), _) => i as i64 + 1,
                            (None, Some(p)) => p[&item],
                            (None, None) => item as i64 + 1,
                        };
                        br.raw_set(
                            key,
                            lua.create_sequence_from(ids[i * len..(i + 1) * len].iter().copied())?,
                        )?;
                        if with_values {
                            bv.raw_set(
                                key,
                                lua.create_sequence_from(
                                    vals[i * len..(i + 1) * len].iter().copied(),
                                )?,
                            )?;
                        }
                    }
                    if let Some(f) = &each {
                        let it = lua.create_sequence_from(items.iter().copied())?;
                        let bv = if with_values {
                            Value::Table(bv)
                        } else {
                            Value::Nil
                        };
                        f.call::<()>((it, br, bv))?;
                    }
                    Ok(())
                };
                step().map_err(|e| {
                    let m = e.to_string();
                    failed = Some(e);
                    Error::Invalid(m)
                })
            });
            if let Some(e) = failed {
                return Err(e);
            }
            let report = report_table(lua, &res.lua_ctx(call)?)?;
            if each.is_some() {
                return Ok((Value::Table(report), Value::Nil, Value::Nil));
            }
            let values = if with_values {
                Value::Table(values)
            } else {
                Value::Nil
            };
            Ok((Value::Table(rows), values, Value::Table(report)))
        },
    );
    // The user's rankings cache at `path`, streamed from Rust.
    add_file_writer(m, "write_rankings_cache", |call, dt, t, path, o| {
        let opts = rankings_options(call, o)?;
        let mut extra = match opt::<Value>(o, "metadata")? {
            None | Some(Value::Nil) => serde_json::Map::new(),
            Some(v) => match lua_to_json(call, v)? {
                serde_json::Value::Object(m) => m,
                other => {
                    return Err(msg(
                        call,
                        format!("metadata must be a table of fields, got {other}"),
                    ))
                }
            },
        };
        if let Some(model) = opt::<String>(o, "model")? {
            extra.insert("model".into(), model.into());
        }
        let ids = match opt::<LuaTable>(o, "ids")? {
            Some(ids) => Some(json_list(call, &ids)?),
            None => None,
        };
        let threads = match opt_int(call, o, "threads")? {
            Some(0) | None => None,
            Some(n) => Some(n as usize),
        };
        rankings::write_rankings_cache(
            dt,
            t,
            path,
            &opts,
            &serde_json::Value::Object(extra),
            ids,
            threads,
        )
        .lua_ctx(call)
    });
    // The k-NN graph file at `path` (k = 10 by default).
    add_file_writer(m, "write_knn_graph", |call, dt, t, path, o| {
        let k = opt_int(call, o, "k")?.map(|k| k as usize);
        if k == Some(0) {
            return Err(msg(call, "k = 0: a k-NN graph needs k ≥ 1"));
        }
        let metric = parse_metric(call, o)?;
        let batch = opt_int(call, o, "batch")?.map(|b| b as usize);
        rankings::write_knn_graph(dt, t, path, k, metric, batch).lua_ctx(call)
    });
}

/// How a file writer of [`add_file_writer`] writes its file: `(call, device table, host table,
/// path, opts)` to the report.
type FileWriter =
    fn(&str, &DeviceTable, &Table, &Path, &Option<LuaTable>) -> LuaResult<RankingsReport>;

/// A device table method `name(table, path [, opts])` that writes a file from the device table
/// and its host `table` with `write`, answering the writer's report as a Lua table; messages
/// name the call `device_table:<name>`.
fn add_file_writer<M: UserDataMethods<Handle<Engine>>>(
    m: &mut M,
    name: &'static str,
    write: FileWriter,
) {
    m.add_method(
        name,
        move |lua, this, (table, path, o): (LuaAnyUserData, String, Option<LuaTable>)| {
            let call = format!("device_table:{name}");
            let (dt, t) = device_table_and(this, &call, &table)?;
            let t = t.get(&call)?;
            let r = write(&call, dt, t, Path::new(&path), &o)?;
            report_table(lua, &r)
        },
    );
}

/// The device table of `this` (`call`'s error after close() or where it holds none), then the
/// table object `table` borrowed: the opening of the methods that take a table, its errors in
/// that order.
fn device_table_and<'a>(
    this: &'a Handle<Engine>,
    call: &str,
    table: &LuaAnyUserData,
) -> LuaResult<(&'a DeviceTable, mlua::UserDataRef<LTable>)> {
    let dt = this.get(call)?.table().lua_ctx(call)?;
    Ok((dt, table.borrow::<LTable>()?))
}

/// A k-NN result as its handle; Lua sees ids as int32 (`ids_bytes`, `download`), so each must fit.
pub(super) fn knn_result(call: &str, r: KnnResult) -> LuaResult<LKnn> {
    if r.ids.iter().any(|&i| i > i32::MAX as i64) {
        return Err(msg(call, "a neighbour id does not fit an int32"));
    }
    Ok(LKnn::new("knn result", r))
}

/// `opts.metric`: "cosine" (the default), "ip" or "l2".
pub(super) fn parse_metric(call: &str, o: &Option<LuaTable>) -> LuaResult<Metric> {
    match opt::<Value>(o, "metric")? {
        None | Some(Value::Nil) => Ok(Metric::Cosine),
        Some(Value::String(s)) => s.to_str()?.parse().lua_ctx(call),
        Some(other) => Err(msg(
            call,
            format!(
                "metric must be \"cosine\", \"ip\" or \"l2\", got a {}",
                other.type_name()
            ),
        )),
    }
}

/// Options of `dtable:knn`: `k` (default 10), `metric`, `query_tile`, `table_tile`,
/// `subgroups`, `full_ranking`, `warp_select`, `verify` (queries cross-checked against a
/// float64 brute force; 0 = off).
pub(super) fn knn_options(call: &str, o: &Option<LuaTable>) -> LuaResult<KnnOptions> {
    let mut k = KnnOptions {
        metric: parse_metric(call, o)?,
        ..KnnOptions::default()
    };
    if let Some(v) = opt_int(call, o, "k")? {
        k.k = v as usize;
    }
    k.query_tile = opt_int(call, o, "query_tile")?.map(|v| v as usize);
    k.table_tile = opt_int(call, o, "table_tile")?.map(|v| v as usize);
    k.subgroups = opt::<bool>(o, "subgroups")?;
    k.full_ranking = opt::<bool>(o, "full_ranking")?.unwrap_or(false);
    k.warp_select = opt::<bool>(o, "warp_select")?;
    k.verify = opt_int(call, o, "verify")?.unwrap_or(0) as usize;
    Ok(k)
}

/// Options of `dtable:rankings` / `write_rankings_cache`: `top_k` (nil or 0 = all N − 1),
/// `metric`, `batch`, `items` (0-based), `subgroups`, `full_ranking`, `verify` (items
/// cross-checked against a float64 brute force; 0 = off).
fn rankings_options(call: &str, o: &Option<LuaTable>) -> LuaResult<RankingsOptions> {
    Ok(RankingsOptions {
        top_k: match opt_int(call, o, "top_k")? {
            Some(0) | None => None,
            Some(k) => Some(k as usize),
        },
        metric: parse_metric(call, o)?,
        batch: opt_int(call, o, "batch")?.map(|b| b as usize),
        items: match opt::<LuaTable>(o, "items")? {
            Some(t) => Some(int_list(call, "item", &t)?),
            None => None,
        },
        subgroups: opt::<bool>(o, "subgroups")?,
        full_ranking: opt::<bool>(o, "full_ranking")?.unwrap_or(false),
        verify: opt_int(call, o, "verify")?.unwrap_or(0) as usize,
    })
}

fn path_name(p: Option<KnnPath>) -> Option<&'static str> {
    p.map(|p| match p {
        KnnPath::Select { .. } => "select",
        KnnPath::FullRanking { .. } => "full_ranking",
        KnnPath::WarpSelect { .. } => "warp_select",
    })
}

/// What a rankings run did, as a Lua table.
fn report_table(lua: &Lua, r: &RankingsReport) -> LuaResult<LuaTable> {
    let t = lua.create_table()?;
    t.set("items", r.items)?;
    t.set("top_k", r.top_k)?;
    t.set("knn_k", r.knn_k)?;
    t.set("batch", r.batch)?;
    t.set("batches", r.batches)?;
    t.set("path", path_name(r.path))?;
    t.set("subgroups", r.subgroups)?;
    t.set("gpu_ns", r.gpu_ns)?;
    t.set("verified", r.verified)?;
    Ok(t)
}

/// A 0-based query index of a knn result, checked.
fn query_index(call: &str, r: &KnnResult, q: &Value) -> LuaResult<usize> {
    let q = int(call, "query", q)? as usize;
    if q >= r.queries {
        return Err(msg(
            call,
            format!(
                "query {q} is out of range for {} queries (0-based, below {})",
                r.queries, r.queries
            ),
        ));
    }
    Ok(q)
}

/// Row `q` (0-based) of `flat`, one of a k-NN result's row-major arrays, as a Lua array; every
/// row (a Lua array of them) when `q` is nil.
fn rows_table<T: Copy + IntoLua>(
    lua: &Lua,
    call: &str,
    r: &KnnResult,
    flat: &[T],
    q: Option<Value>,
) -> LuaResult<LuaTable> {
    let k = r.k;
    if let Some(q) = q.filter(|v| !v.is_nil()) {
        let q = query_index(call, r, &q)?;
        return lua.create_sequence_from(flat[q * k..(q + 1) * k].iter().copied());
    }
    let out = lua.create_table_with_capacity(r.queries, 0)?;
    for q in 0..r.queries {
        out.raw_set(
            q + 1,
            lua.create_sequence_from(flat[q * k..(q + 1) * k].iter().copied())?,
        )?;
    }
    Ok(out)
}

impl UserData for LKnn {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("k", |_, this, ()| Ok(this.get("knn:k")?.k));
        m.add_method("queries", |_, this, ()| {
            Ok(this.get("knn:queries")?.queries)
        });
        m.add_method("gpu_ns", |_, this, ()| Ok(this.get("knn:gpu_ns")?.gpu_ns));
        // verified(): queries cross-checked against the float64 brute force (option `verify`).
        m.add_method("verified", |_, this, ()| {
            Ok(this.get("knn:verified")?.verified)
        });
        m.add_method("path", |_, this, ()| {
            Ok(path_name(Some(this.get("knn:path")?.path)))
        });
        m.add_method("subgroups", |_, this, ()| {
            Ok(this.get("knn:subgroups")?.subgroups)
        });
        // ids(q): query q's k ids (0-based, -1 padding) as a Lua array; ids(): all rows.
        m.add_method("ids", |lua, this, q: Option<Value>| {
            let call = "knn:ids";
            let r = this.get(call)?;
            rows_table(lua, call, r, &r.ids, q)
        });
        // distances(q) / distances(): the same for the similarities or squared distances
        // (padding -math.huge for similarities, math.huge for L2).
        m.add_method("distances", |lua, this, q: Option<Value>| {
            let call = "knn:distances";
            let r = this.get(call)?;
            rows_table(lua, call, r, &r.distances, q)
        });
        // FFI-friendly: the ids as little-endian int32 (row-major, -1 padding) in a string.
        m.add_method("ids_bytes", |lua, this, ()| {
            let r = this.get("knn:ids_bytes")?;
            let ids: Vec<i32> = r.ids.iter().map(|&i| i as i32).collect();
            lua.create_string(bytemuck::cast_slice::<i32, u8>(&ids))
        });
        // FFI-friendly: the distances as little-endian float32 (row-major) in a string.
        m.add_method("distances_bytes", |lua, this, ()| {
            let r = this.get("knn:distances_bytes")?;
            lua.create_string(bytemuck::cast_slice::<f32, u8>(&r.distances))
        });
        // FFI-friendly: fill `ids`, an int32_t[?] cdata, and/or `distances`, a float[?] cdata, of
        // at least queries × k entries each (sizes read with ffi.sizeof); nil skips either.
        m.add_method("download", |lua, this, (ids, dist): (Value, Value)| {
            let call = "knn:download";
            let r = this.get(call)?;
            if !ids.is_nil() {
                let v: Vec<i32> = r.ids.iter().map(|&i| i as i32).collect();
                copy_to_cdata(lua, call, "ids", &["int32_t", "int"], ids, &v)?;
            }
            if !dist.is_nil() {
                copy_to_cdata(lua, call, "distances", &["float"], dist, &r.distances)?;
            }
            Ok(r.ids.len())
        });
        Handle::add_close(m);
    }
}

fn kmetric_name(m: KnnMetric) -> &'static str {
    match m {
        KnnMetric::InnerProduct => "ip",
        KnnMetric::Cosine => "cosine",
        KnnMetric::L2 => "l2",
    }
}

impl UserData for LKnnGraph {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("n", |_, this, ()| Ok(this.get("knn_graph:n")?.n()));
        m.add_method("k", |_, this, ()| Ok(this.get("knn_graph:k")?.k()));
        m.add_method("metric", |_, this, ()| {
            Ok(kmetric_name(this.get("knn_graph:metric")?.metric()))
        });
        // row(i): item i's neighbours (0-based ids, -1 padding) and their values, two Lua arrays;
        // one read of each section, nothing else loaded.
        m.add_method_mut("row", |lua, this, i: Value| {
            let call = "knn_graph:row";
            let i = int_u32(call, "item", &i)?;
            let (ids, values) = this.get_mut(call)?.row(i).lua_ctx(call)?;
            let ids = lua.create_sequence_from(ids.into_iter().map(|v| {
                if v == KNN_PAD {
                    NO_ID
                } else {
                    v as i64
                }
            }))?;
            Ok((ids, lua.create_sequence_from(values)?))
        });
        Handle::add_close(m);
    }
}

/// `knn_graph`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    set_function(lua, m, "knn_graph", |_, path: String| {
        let g = KnnGraph::open(path.as_ref()).lua_ctx("knn_graph")?;
        Ok(LKnnGraph::new("knn graph", g))
    })?;
    Ok(())
}
