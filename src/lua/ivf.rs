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

/// What one index handle adds to the methods both have ([`add_index_methods`], `search`):
/// its names, its constructor's options, its own methods and its search report's own fields.
/// The handles are `Handle<IvfFlat>` (here) and `Handle<IvfPq>` (`ivfpq.rs`).
pub(super) trait LuaIndex: InvertedFile + Sized + 'static {
    /// The handle's name in messages (`ivf:add`).
    const WHAT: &'static str;
    /// The handle's type name.
    const HANDLE: &'static str;
    /// An empty index as the constructor's arguments `a` ask.
    fn create(a: Creating) -> LuaResult<Self>;
    /// The index's own methods.
    fn add_own_methods<M: UserDataMethods<Handle<Self>>>(m: &mut M);
    /// The search report's fields of this index alone, into `t`.
    fn report(t: &LuaTable, rep: &IvfSearchReport) -> LuaResult<()>;
}

/// An index constructor's arguments: its name (for messages), the context, the dimension,
/// `opts.nlist`, and the other options.
pub(super) struct Creating<'a> {
    pub call: &'a str,
    pub ctx: &'a Context,
    pub dim: usize,
    pub nlist: usize,
    pub o: &'a Option<LuaTable>,
}

impl<T: LuaIndex> UserData for Handle<T> {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        add_index_methods(m, T::WHAT);
        T::add_own_methods(m);
        // `search(queries, {k = 10, nprobe = 1, k_factor = 1, metric = the index's, …dtable:knn
        // options})`: the knn result and a report {nprobe, rows_scanned, coarse_ns, lists_ns,
        // and the index's own fields}.
        m.add_method_mut(
            "search",
            |lua, this, (queries, o): (LuaAnyUserData, Option<LuaTable>)| {
                let call = format!("{}:search", T::WHAT);
                let (r, t, rep) = search_index(lua, &call, this, &queries, &o)?;
                T::report(&t, &rep)?;
                Ok((r, t))
            },
        );
    }
}

impl LuaIndex for IvfFlat {
    const WHAT: &'static str = "ivf";
    const HANDLE: &'static str = "ivf index";

    /// `{nlist =, metric = "cosine", precision = "fp32", iters =, seed =,
    /// max_points_per_centroid =}`.
    fn create(a: Creating) -> LuaResult<Self> {
        let (call, o) = (a.call, a.o);
        let opts = IvfOptions {
            nlist: a.nlist,
            metric: parse_metric(call, o)?,
            precision: parse_precision(call, opt(o, "precision")?)?,
            kmeans: kmeans_options(call, o)?,
        };
        IvfFlat::new(a.ctx, a.dim, &opts).lua_ctx(call)
    }

    fn add_own_methods<M: UserDataMethods<Handle<Self>>>(m: &mut M) {
        m.add_method("precision", |_, this, ()| {
            Ok(this.get("ivf:precision")?.precision().name())
        });
    }

    /// `list_scan`, `probes_on_device`.
    fn report(t: &LuaTable, rep: &IvfSearchReport) -> LuaResult<()> {
        t.set("list_scan", rep.list_scan)?;
        t.set("probes_on_device", rep.probes_on_device)
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
    // `diversity.ivf_index(ctx, dim, opts)`: an empty, untrained IVF-Flat index;
    // `diversity.load_ivf_index(ctx, path)`: an index saved by `ivf:save`.
    register_index::<IvfFlat>(lua, m, "ivf_index", "load_ivf_index", IvfFlat::load)
}

/// `diversity.<name>(ctx, dim, opts)`: an empty, untrained index of `dim` and `opts.nlist`
/// lists ([`LuaIndex::create`] reads its other options), and `diversity.<load_name>(ctx, path)`.
pub(super) fn register_index<T: LuaIndex>(
    lua: &Lua,
    m: &LuaTable,
    name: &'static str,
    load_name: &'static str,
    load: fn(&Context, &std::path::Path) -> crate::error::Result<T>,
) -> LuaResult<()> {
    m.set(
        name,
        lua.create_function(
            move |_, (ctx, dim, o): (LuaAnyUserData, Value, Option<LuaTable>)| {
                let c = vulkan_arg(name, &ctx)?;
                let (dim, nlist) = index_sizes(name, &dim, &o)?;
                let a = Creating {
                    call: name,
                    ctx: &c,
                    dim,
                    nlist,
                    o: &o,
                };
                Ok(Handle::new(T::HANDLE, T::create(a)?))
            },
        )?,
    )?;
    register_load(lua, m, load_name, T::HANDLE, load)
}

/// `diversity.<name>(ctx, path)`: the index file at `path` read by `load` onto the context's
/// device, as a handle called `what`.
fn register_load<T>(
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
