//! k-means and the IVF-Flat index: `kmeans`, `ivf_index`, `load_ivf_index` and the index
//! handle (`train`, `add`, `search`, `save`, …). May touch the crate's IVF API (`crate::ivf`), the
//! table and k-NN handles and the binding's helpers.

use super::args::{opt, opt_int, parse_precision};
use super::context::vulkan_arg;
use super::error::{msg, LuaCtx};
use super::handle::Handle;
use super::knn::{knn_options, knn_result, parse_metric, LKnn};
use super::table::LTable;
use crate::device::Context;
use crate::ivf::{
    kmeans, InvertedFile, IvfFlat, IvfOptions, IvfSearch, IvfSearchReport, KMeans, KMeansOptions,
};
use crate::metric::Metric;
use crate::table::Table;
use mlua::prelude::*;
use mlua::{UserData, UserDataMethods, Value};

/// An IVF-Flat index.
pub(super) type LIvf = Handle<IvfFlat>;

/// k-means options: `iters` (20), `seed` (1234), `max_points_per_centroid` (256; 0 = all
/// rows), `init` (a table of k initial centroids).
pub(super) fn kmeans_options(call: &str, o: &Option<LuaTable>) -> LuaResult<KMeansOptions> {
    let mut k = KMeansOptions::default();
    if let Some(v) = opt_int(call, o, "iters")? {
        k.iters = v as usize;
    }
    if let Some(v) = opt_int(call, o, "seed")? {
        k.seed = v;
    }
    if let Some(v) = opt_int(call, o, "max_points_per_centroid")? {
        k.max_points_per_centroid = v as usize;
    }
    if let Some(u) = opt::<Option<LuaAnyUserData>>(o, "init")?.flatten() {
        let t = u.borrow::<LTable>()?;
        k.init = Some(t.get(call)?.data().to_vec());
    }
    Ok(k)
}

/// The search options of both index handles: `k` (10), `nprobe` (1), `k_factor` (1),
/// `metric` (the index's, `index_metric`) and the `dtable:knn` options.
pub(super) fn search_options(
    call: &str,
    o: &Option<LuaTable>,
    index_metric: Metric,
) -> LuaResult<IvfSearch> {
    let d = IvfSearch::default();
    let mut knn = knn_options(call, o)?;
    knn.metric = match opt::<Value>(o, "metric")? {
        None | Some(Value::Nil) => index_metric,
        Some(_) => parse_metric(call, o)?,
    };
    Ok(IvfSearch {
        knn,
        nprobe: opt_int(call, o, "nprobe")?.map_or(d.nprobe, |v| v as usize),
        k_factor: opt_int(call, o, "k_factor")?.map_or(d.k_factor, |v| v as usize),
    })
}

/// The `dim` argument and the required `opts.nlist` of an index constructor, as counts.
pub(super) fn index_sizes(
    call: &str,
    dim: &Value,
    o: &Option<LuaTable>,
) -> LuaResult<(usize, usize)> {
    let dim = super::args::int(call, "dim", dim)? as usize;
    let nlist = opt_int(call, o, "nlist")?.ok_or_else(|| msg(call, "opts.nlist is required"))?;
    Ok((dim, nlist as usize))
}

/// The k-means report: `objective` (per iteration, a Lua array), `trained_on`, `splits`,
/// `gpu_ns`.
pub(super) fn kmeans_report(lua: &Lua, km: &KMeans) -> LuaResult<LuaTable> {
    let t = lua.create_table()?;
    t.set(
        "objective",
        lua.create_sequence_from(km.objective.iter().copied())?,
    )?;
    t.set("trained_on", km.trained_on)?;
    t.set("splits", km.splits)?;
    t.set("gpu_ns", km.gpu_ns)?;
    Ok(t)
}

/// The methods both index handles have (`what` names the handle in messages, e.g. `ivf:add`):
/// `dim`, `nlist`, `ntotal`, `metric`, `is_trained`, `list_sizes` (a Lua array, list 0 at
/// [1]), `centroids` (a table handle, nil until trained), `train` (the k-means report), `add`
/// (the first id given, 0-based; ids follow in row order), `save(path)`, `close`.
pub(super) fn add_index_methods<T, M>(m: &mut M, what: &'static str)
where
    T: InvertedFile + 'static,
    M: UserDataMethods<Handle<T>>,
{
    m.add_method("dim", move |_, this, ()| {
        Ok(this.get(&format!("{what}:dim"))?.d())
    });
    m.add_method("nlist", move |_, this, ()| {
        Ok(this.get(&format!("{what}:nlist"))?.nlist())
    });
    m.add_method("ntotal", move |_, this, ()| {
        Ok(this.get(&format!("{what}:ntotal"))?.ntotal())
    });
    m.add_method("metric", move |_, this, ()| {
        Ok(this.get(&format!("{what}:metric"))?.metric().name())
    });
    m.add_method("is_trained", move |_, this, ()| {
        Ok(this.get(&format!("{what}:is_trained"))?.is_trained())
    });
    m.add_method("list_sizes", move |lua, this, ()| {
        lua.create_sequence_from(this.get(&format!("{what}:list_sizes"))?.list_sizes())
    });
    m.add_method("centroids", move |_, this, ()| {
        let call = format!("{what}:centroids");
        let ix = this.get(&call)?;
        if !ix.is_trained() {
            return Ok(None);
        }
        let t = Table::new(ix.centroids().to_vec(), ix.nlist(), ix.d()).lua_ctx(&call)?;
        Ok(Some(LTable::new("table", t)))
    });
    m.add_method_mut("train", move |lua, this, table: LuaAnyUserData| {
        let call = format!("{what}:train");
        let t = table.borrow::<LTable>()?;
        let km = this.get_mut(&call)?.train(t.get(&call)?).lua_ctx(&call)?;
        kmeans_report(lua, &km)
    });
    m.add_method_mut("add", move |_, this, table: LuaAnyUserData| {
        let call = format!("{what}:add");
        let t = table.borrow::<LTable>()?;
        this.get_mut(&call)?.add(t.get(&call)?).lua_ctx(&call)
    });
    m.add_method("save", move |_, this, path: String| {
        let call = format!("{what}:save");
        this.get(&call)?
            .save(std::path::Path::new(&path))
            .lua_ctx(&call)
    });
    Handle::add_close(m);
}

/// `search(queries, opts)` on either index handle (`call` names it in messages): the options
/// of [`search_options`] with the index's metric as the default, the knn result, a report table
/// with the fields both indexes fill (`nprobe`, `rows_scanned`, `coarse_ns`, `lists_ns`), and the
/// whole report for the fields of one index alone.
pub(super) fn search_index<T: InvertedFile>(
    lua: &Lua,
    call: &str,
    this: &mut Handle<T>,
    queries: &LuaAnyUserData,
    o: &Option<LuaTable>,
) -> LuaResult<(LKnn, LuaTable, IvfSearchReport)> {
    let q = queries.borrow::<LTable>()?;
    let q = q.get(call)?;
    let ix = this.get_mut(call)?;
    let s = search_options(call, o, ix.metric())?;
    let (r, rep) = ix.search(q.data(), q.d(), &s).lua_ctx(call)?;
    let t = lua.create_table()?;
    t.set("nprobe", rep.nprobe)?;
    t.set("rows_scanned", rep.rows_scanned)?;
    t.set("coarse_ns", rep.coarse_ns)?;
    t.set("lists_ns", rep.lists_ns)?;
    Ok((knn_result(call, r)?, t, rep))
}

impl UserData for LIvf {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        add_index_methods(m, "ivf");
        m.add_method("precision", |_, this, ()| {
            Ok(this.get("ivf:precision")?.precision().name())
        });
        // `search(queries, {k = 10, nprobe = 1, metric = the index's, …dtable:knn options})`:
        // the knn result and a report {nprobe, rows_scanned, coarse_ns, lists_ns, list_scan,
        // probes_on_device}.
        m.add_method_mut(
            "search",
            |lua, this, (queries, o): (LuaAnyUserData, Option<LuaTable>)| {
                let (r, t, rep) = search_index(lua, "ivf:search", this, &queries, &o)?;
                t.set("list_scan", rep.list_scan)?;
                t.set("probes_on_device", rep.probes_on_device)?;
                Ok((r, t))
            },
        );
    }
}

/// `kmeans`, `ivf_index`, `load_ivf_index`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // `diversity.kmeans(ctx, table, k [, opts])` → centroids (a table), assignments (a 1-based
    // Lua array: the 0-based cluster of every row of `table`), report.
    m.set(
        "kmeans",
        lua.create_function(
            |lua, (ctx, table, k, o): (LuaAnyUserData, LuaAnyUserData, Value, Option<LuaTable>)| {
                let call = "kmeans";
                let c = &vulkan_arg(call, &ctx)?;
                let t = table.borrow::<LTable>()?;
                let t = t.get(call)?;
                let k = super::args::int(call, "k", &k)? as usize;
                let opts = kmeans_options(call, &o)?;
                let km = kmeans(c, t, k, &opts).lua_ctx(call)?;
                let cent = Table::new(km.centroids.clone(), k, t.d()).lua_ctx(call)?;
                let (ids, _, _) = crate::ivf::assign(c, &cent, t.data(), t.d()).lua_ctx(call)?;
                Ok((
                    LTable::new("table", cent),
                    lua.create_sequence_from(ids)?,
                    kmeans_report(lua, &km)?,
                ))
            },
        )?,
    )?;
    // `diversity.ivf_index(ctx, dim, {nlist =, metric = "cosine", precision = "fp32", iters =,
    // seed =, max_points_per_centroid =})`: an empty, untrained IVF-Flat index.
    m.set(
        "ivf_index",
        lua.create_function(
            |_, (ctx, dim, o): (LuaAnyUserData, Value, Option<LuaTable>)| {
                let call = "ivf_index";
                let c = vulkan_arg(call, &ctx)?;
                let (dim, nlist) = index_sizes(call, &dim, &o)?;
                let opts = IvfOptions {
                    nlist,
                    metric: parse_metric(call, &o)?,
                    precision: parse_precision(call, opt(&o, "precision")?)?,
                    kmeans: kmeans_options(call, &o)?,
                };
                let ix = IvfFlat::new(&c, dim, &opts).lua_ctx(call)?;
                Ok(LIvf::new("ivf index", ix))
            },
        )?,
    )?;
    // `diversity.load_ivf_index(ctx, path)`: an index saved by `ivf:save`.
    register_load(lua, m, "load_ivf_index", "ivf index", IvfFlat::load)
}

/// `diversity.<name>(ctx, path)`: the index file at `path` read by `load` onto the context's
/// device, as a handle called `what`.
pub(super) fn register_load<T>(
    lua: &Lua,
    m: &LuaTable,
    name: &'static str,
    what: &'static str,
    load: fn(&Context, &std::path::Path) -> crate::error::Result<T>,
) -> LuaResult<()>
where
    Handle<T>: UserData + 'static,
{
    m.set(
        name,
        lua.create_function(move |_, (ctx, path): (LuaAnyUserData, String)| {
            let c = vulkan_arg(name, &ctx)?;
            let ix = load(&c, std::path::Path::new(&path)).lua_ctx(name)?;
            Ok(Handle::new(what, ix))
        })?,
    )
}
