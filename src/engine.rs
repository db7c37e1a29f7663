//! Engine choice: the one place that turns a table, a list of starts and options into a
//! running job of the engine that runs it — the scan or gram shaders on a Vulkan device, or the
//! native host engine where the context runs sequences on the CPU (no GPU, or none at all). The
//! Lua binding, the C ABI, the Rust command line and the driver all come through here; none of
//! them decides anything on its own.
//! It may touch the sequence engines ([`crate::scan`], [`crate::gram`], [`crate::host`]), the
//! batch scaffold, the device table and the vocabulary below them (mode, table, device
//! capabilities); nothing above it (no binding, no file format).
//!
//! * [`ModeChoice`] — what `scan`, `gram` or `auto` resolves to on a device or on the host, and
//!   why, as data ([`ModeReason`], with a short [`code`](ModeReason::code) for programs and a
//!   `Display` for people).
//! * [`check_starts`] — the one validation of a start list (range, repeats, emptiness), with the
//!   one set of messages every engine and every caller reports.
//! * [`Engine`] — a table ready to run jobs: it builds G on the first gram job (on the device, or
//!   on the host for the host engine) and shares it with every later one.
//! * [`Job`] — a job of any engine behind one set of methods.

use crate::batch::StepReport;
use crate::device::{Capabilities, Context, ContextOptions};
use crate::device_table::DeviceTable;
use crate::error::{Error, Result};
use crate::gram::{self, Gram, GramJob, GramOptions, Placement};
use crate::host::{self, HostGram, HostJob, HostOptions, HostTable};
use crate::mode::Mode;
use crate::scan::{ScanJob, ScanOptions, Shape};
use crate::table::{Precision, Table};
use std::fmt;
use std::sync::Arc;

/// Why a [`ModeChoice`] came out the way it did.
#[derive(Clone, Debug, PartialEq)]
pub enum ModeReason {
    /// The caller named the engine (`scan`, or `gram` where G fits) and it is used as asked.
    Requested,
    /// The caller asked for `gram` but G does not fit the device (the cause, in words): a job in
    /// this mode fails; `auto` would fall back to scan.
    RequestedUnfit(String),
    /// `auto` chose gram: G for N items fits the device's memory budget.
    AutoFits {
        /// Items in the table.
        n: usize,
        /// Bytes of G ([`crate::gram::gram_bytes`]: N rows of N rounded up to a multiple of 4).
        gram_bytes: u64,
        /// The device's name.
        device: String,
        /// The device's memory budget in bytes.
        budget_bytes: u64,
    },
    /// `auto` fell back to scan: G does not fit (the cause, in words).
    AutoUnfit(String),
}

impl ModeReason {
    /// A short stable code for programs (the driver branches on it, never on the prose):
    /// `"requested"`, `"requested_unfit"`, `"auto_fits"` or `"auto_unfit"`.
    pub fn code(&self) -> &'static str {
        match self {
            ModeReason::Requested => "requested",
            ModeReason::RequestedUnfit(_) => "requested_unfit",
            ModeReason::AutoFits { .. } => "auto_fits",
            ModeReason::AutoUnfit(_) => "auto_unfit",
        }
    }

    /// Why G does not fit the device, when that is the reason (`requested_unfit`, `auto_unfit`).
    pub fn unfit(&self) -> Option<&str> {
        match self {
            ModeReason::RequestedUnfit(why) | ModeReason::AutoUnfit(why) => Some(why),
            _ => None,
        }
    }
}

impl fmt::Display for ModeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        match self {
            ModeReason::Requested => write!(f, "requested"),
            ModeReason::RequestedUnfit(why) => write!(f, "requested, but {why}"),
            ModeReason::AutoFits {
                n,
                gram_bytes,
                device,
                budget_bytes,
            } => write!(
                f,
                "auto: G for N = {n} ({:.1} MiB) fits the memory budget of {device} ({:.0} MiB)",
                mib(*gram_bytes),
                mib(*budget_bytes)
            ),
            ModeReason::AutoUnfit(why) => write!(f, "auto: {why}"),
        }
    }
}

/// The engine a requested mode resolves to for an N × D table on one device (`auto` is gram
/// when G fits the device's memory budget, else scan), with the reason. `Display` gives
/// the reason in words, as the driver reports it and writes it into summaries.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeChoice {
    /// The engine that runs: [`Mode::Scan`] or [`Mode::Gram`] (never `Auto`).
    pub mode: Mode,
    /// The mode the caller asked for.
    pub requested: Mode,
    /// Why.
    pub reason: ModeReason,
}

impl ModeChoice {
    /// Resolve `requested` for an N × D table stored at `precision` on `caps`.
    pub fn new(
        caps: &Capabilities,
        requested: Mode,
        n: usize,
        d: usize,
        precision: Precision,
    ) -> ModeChoice {
        let unfit = gram::gram_unfit(caps, n, d, precision.bytes());
        ModeChoice::from_fit(requested, unfit, || ModeReason::AutoFits {
            n,
            gram_bytes: gram::gram_bytes(n),
            device: caps.name.clone(),
            budget_bytes: caps.memory_budget_bytes,
        })
    }

    /// The choice for `requested` given why G does not fit (`None`: it fits) — the `auto` rule
    /// of every engine: gram where G fits, else scan; a named mode is kept. `fits` describes
    /// the fit when `auto` takes gram.
    fn from_fit(
        requested: Mode,
        unfit: Option<String>,
        fits: impl FnOnce() -> ModeReason,
    ) -> ModeChoice {
        let mode = requested.resolve(unfit.is_none());
        let reason = match (requested, unfit) {
            (Mode::Auto, None) => fits(),
            (Mode::Auto, Some(why)) => ModeReason::AutoUnfit(why),
            (Mode::Gram, Some(why)) => ModeReason::RequestedUnfit(why),
            _ => ModeReason::Requested,
        };
        ModeChoice {
            mode,
            requested,
            reason,
        }
    }

    /// Resolve `requested` for a table already on its device.
    pub fn for_table(table: &DeviceTable, requested: Mode) -> ModeChoice {
        ModeChoice::new(
            table.context().caps(),
            requested,
            table.n(),
            table.d(),
            table.precision(),
        )
    }
}

impl ModeChoice {
    /// Resolve `requested` for an N × D table on the host engine: `auto` is gram when G fits the
    /// host memory budget ([`host::host_memory_budget`]), else scan.
    pub fn host(requested: Mode, n: usize, d: usize) -> ModeChoice {
        let budget = host::host_memory_budget();
        ModeChoice::from_fit(requested, host::gram_unfit(n, d, budget), || {
            ModeReason::AutoFits {
                n,
                gram_bytes: host::gram_bytes(n),
                device: host_engine_name(),
                budget_bytes: budget,
            }
        })
    }

    /// Resolve `requested` on a context: the host engine's rule where the context runs
    /// sequences on the host ([`Context::native_host`]), else the device's.
    pub fn for_context(
        ctx: &Context,
        requested: Mode,
        n: usize,
        d: usize,
        precision: Precision,
    ) -> ModeChoice {
        if ctx.native_host() {
            ModeChoice::host(requested, n, d)
        } else {
            ModeChoice::new(ctx.caps(), requested, n, d, precision)
        }
    }
}

impl ModeChoice {
    /// The engine several devices agree on, for jobs shared out over them (`choices`: each
    /// device's choice and its name, in the devices' order): the first device's choice, unless
    /// a later device chooses another engine or cannot run a requested gram — its choice then
    /// stands, with the reason in words naming it ("device d of k (name): …"; a requested gram
    /// that does not fit keeps its own reason). Returns the choice and that reason; `None` for
    /// no devices.
    pub fn agree(choices: &[(ModeChoice, String)]) -> Option<(ModeChoice, String)> {
        let (first, _) = choices.first()?;
        let k = choices.len();
        for (i, (c, name)) in choices.iter().enumerate().skip(1) {
            let unfit = matches!(c.reason, ModeReason::RequestedUnfit(_));
            if c.mode != first.mode || unfit {
                let reason = if unfit {
                    c.to_string()
                } else {
                    format!("device {} of {k} ({name}): {c}", i + 1)
                };
                return Some((c.clone(), reason));
            }
        }
        // The first device's own requested-unfit reason stands as it is too.
        Some((first.clone(), first.to_string()))
    }
}

/// Where a context's work runs — the one answer to "the host engine or a device?" that every
/// front end (the Lua module's contexts, the C ABI's) asks: an open Vulkan device, whose
/// diversity sequences run on the host engine where [`Context::native_host`] says so, or no
/// Vulkan at all (no loader, driver or device), where sequences run on the host engine and
/// what needs a device is refused ([`no_vulkan`]).
pub enum Target {
    /// An open Vulkan device.
    Vulkan(Context),
    /// No Vulkan device on this machine: the host engine only.
    HostOnly,
}

/// The L2 size a target without a device reports (the driver's tile formula reads it; the host
/// engine has no tiles).
pub const NO_DEVICE_L2: u64 = 1 << 20;

impl Target {
    /// Open the device `opts` names; where the machine has no Vulkan and none was named (or
    /// `host` was), the host engine alone ([`host_fallback`]). Other errors are returned.
    pub fn open(opts: &ContextOptions) -> Result<Target> {
        match Context::new(opts) {
            Ok(ctx) => Ok(Target::Vulkan(ctx)),
            Err(e) if host_fallback(opts, &e) => {
                // No context checked the settings: the host engine's must parse too.
                crate::settings::check()?;
                Ok(Target::HostOnly)
            }
            Err(e) => Err(e),
        }
    }

    /// The Vulkan device, if there is one.
    pub fn context(&self) -> Option<&Context> {
        match self {
            Target::Vulkan(c) => Some(c),
            Target::HostOnly => None,
        }
    }

    /// The Vulkan device, or [`no_vulkan`]'s error.
    pub fn vulkan(&self) -> Result<&Context> {
        self.context().ok_or_else(no_vulkan)
    }

    /// Whether diversity sequences run on the host engine.
    pub fn native_host(&self) -> bool {
        self.context().is_none_or(Context::native_host)
    }

    /// `"host"` where diversity sequences run on the host engine, else `"device"`.
    pub fn engine_name(&self) -> &'static str {
        if self.native_host() {
            "host"
        } else {
            "device"
        }
    }

    /// The name sequences report: the device's, or the CPU's with "(host engine)".
    pub fn name(&self) -> String {
        match self {
            Target::Vulkan(c) => sequence_device_name(c),
            Target::HostOnly => host_engine_name(),
        }
    }

    /// The engine `requested` resolves to for an N × D table at `precision`, and why.
    pub fn mode_for(
        &self,
        requested: Mode,
        n: usize,
        d: usize,
        precision: Precision,
    ) -> ModeChoice {
        match self {
            Target::Vulkan(c) => ModeChoice::for_context(c, requested, n, d, precision),
            Target::HostOnly => ModeChoice::host(requested, n, d),
        }
    }

    /// The largest batch for an N × D table at `precision` and `steps` steps on the engine
    /// `requested` resolves to (the device's limits, or the host engine's memory budget).
    pub fn max_batch(
        &self,
        requested: Mode,
        n: usize,
        d: usize,
        precision: Precision,
        steps: usize,
    ) -> usize {
        match self {
            Target::Vulkan(c) if !c.native_host() => {
                max_batch(c.caps(), requested, n, d, precision, steps)
            }
            _ => host::max_batch(requested, n, d, steps, host::host_memory_budget()),
        }
    }

    /// The arithmetic a job of the engine `mode` (resolved: gram or scan) runs for an N × D
    /// table, as the cache metadata's `summation` names it: the host engine's where sequences
    /// run there, the gram arithmetic with `g` for a gram on a device, `None` for a device scan.
    pub fn summation(
        &self,
        mode: Mode,
        n: usize,
        d: usize,
        g: &GramOptions,
    ) -> Result<Option<String>> {
        if self.native_host() {
            return Ok(Some(host_summation(mode).to_string()));
        }
        if mode != Mode::Gram {
            return Ok(None);
        }
        gram::summation(self.vulkan()?.caps(), n, d, g).map(Some)
    }

    /// The device's L2 size, or [`NO_DEVICE_L2`].
    pub fn l2_bytes(&self) -> u64 {
        self.context().map_or(NO_DEVICE_L2, |c| c.caps().l2_bytes)
    }

    /// A table ready for jobs: uploaded to the device (with the host engine's copy where
    /// sequences run there), or the host engine's copy alone.
    pub fn upload(&self, table: &Table, precision: Precision) -> Result<Engine> {
        match self {
            Target::Vulkan(ctx) => Engine::upload(ctx, table, precision),
            Target::HostOnly => Engine::host_only(table, precision),
        }
    }

    /// A multi-line account of where work runs and of the device.
    pub fn describe(&self) -> String {
        match self {
            Target::Vulkan(c) if c.native_host() => format!("{}{}", host_line(), c.describe()),
            Target::Vulkan(c) => c.describe(),
            Target::HostOnly => format!(
                "{}device:          none (no Vulkan loader, driver or device on this machine)\n",
                host_line()
            ),
        }
    }
}

/// The error for what needs a Vulkan device on a machine that has none (where diversity
/// sequences still run on the host engine).
pub fn no_vulkan() -> Error {
    Error::NoDevice(
        "none on this machine (no loader, driver or device); diversity sequences run on the \
         host engine, but rankings, k-NN, IVF and G on a device need one (on Debian: apt-get \
         install libvulkan1 mesa-vulkan-drivers)"
            .into(),
    )
}

/// Whether opening a device with `opts` that failed with `e` leaves the host engine to run
/// diversity sequences: no device was named (or the selector `host` was) and the machine has
/// no Vulkan loader, no driver or no device.
pub fn host_fallback(opts: &ContextOptions, e: &Error) -> bool {
    let unnamed = crate::device::device_selector(opts)
        .is_none_or(|s| s.eq_ignore_ascii_case(crate::device::HOST_SELECTOR));
    unnamed && matches!(e, Error::NoDevice(_))
}

/// The name the host engine reports (summary lines, metadata, `describe`): the CPU's model and
/// "(host engine)".
pub fn host_engine_name() -> String {
    format!("{} (host engine)", host::cpu_name())
}

/// The name a context's sequences report: [`host_engine_name`] where they run on the host, else
/// the device's name.
pub fn sequence_device_name(ctx: &Context) -> String {
    if ctx.native_host() {
        host_engine_name()
    } else {
        ctx.caps().name.clone()
    }
}

/// The first line of a host context's `describe()`: where sequences run, on how many threads
/// with which instruction set.
pub fn host_line() -> String {
    format!(
        "sequences:       {} — {} threads, {}; rankings and k-NN on the device below\n",
        host_engine_name(),
        host::threads(),
        host::isa()
    )
}

/// The arithmetic the host engine runs in `mode` (gram or scan), as written in a cache's
/// metadata (`summation`) and bound by the checkpoint's fingerprint, so that its caches are
/// never mixed with a device engine's (other bits at near-ties).
pub fn host_summation(mode: Mode) -> &'static str {
    match mode {
        Mode::Gram => {
            "host: G float64 rounded to float32; float64 keys; certificate with float64 re-scores"
        }
        _ => "host: float64 scan",
    }
}

impl fmt::Display for ModeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.reason.fmt(f)
    }
}

/// The largest batch (sequences per job) the engine `requested` resolves to allows on `caps`
/// for an N × D table at `precision` and `steps` steps ([`gram::max_batch`] next to G, or
/// [`crate::scan::max_batch`]). At least 1.
pub fn max_batch(
    caps: &Capabilities,
    requested: Mode,
    n: usize,
    d: usize,
    precision: Precision,
    steps: usize,
) -> usize {
    match gram::mode_for(caps, requested, n, d, precision.bytes()) {
        Mode::Gram => gram::max_batch(caps, n, d, precision.bytes(), steps),
        _ => crate::scan::max_batch(caps, n, d, precision, steps),
    }
}

pub use crate::batch::check_starts;

/// What a job of either engine is built with: the mode asked for and each engine's options
/// (those of the engine not chosen are ignored). The shared settings (`chunk`, `steps`,
/// `workgroup_size`) are set in both.
#[derive(Clone, Debug)]
pub struct JobOptions {
    /// `scan`, `gram` or `auto` (the default).
    pub mode: Mode,
    /// The scan engine's options.
    pub scan: ScanOptions,
    /// The gram engine's options.
    pub gram: GramOptions,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            mode: Mode::Auto,
            scan: ScanOptions::default(),
            gram: GramOptions::default(),
        }
    }
}

/// Sequences already computed, to continue from (a checkpoint): `rows` holds one row of `len`
/// entries per start. The scan engine rebuilds its running sums from `host`, the table the
/// device table was uploaded from; the gram engine replays the prefix on the device and needs no
/// host table.
#[derive(Clone, Copy, Debug)]
pub struct Prefix<'a> {
    /// The host table (required by the scan engine).
    pub host: Option<&'a Table>,
    /// Row-major prefixes, one row per start.
    pub rows: &'a [u32],
    /// Entries per row.
    pub len: usize,
}

/// A device table ready to run jobs of either engine. G = E Eᵀ is built by the first gram job
/// (or [`Engine::gram`]) and kept, so that every batch of a run shares one G. A clone shares
/// the device table, the G built so far and the host engine's rows.
#[derive(Clone)]
pub struct Engine {
    /// The device table; `None` on a machine with no Vulkan device ([`Engine::host_only`]).
    table: Option<DeviceTable>,
    n: usize,
    d: usize,
    precision: Precision,
    gram: Option<Gram>,
    /// The host engine's table and G, where sequences run on the host.
    host: Option<HostSide>,
}

/// The host engine's side of an [`Engine`].
#[derive(Clone)]
struct HostSide {
    table: Arc<HostTable>,
    gram: Option<HostGram>,
}

impl HostSide {
    /// The host engine's G, created (no row built yet) on first use and kept.
    fn gram(&mut self) -> Result<HostGram> {
        if self.gram.is_none() {
            self.gram = Some(HostGram::lazy(&self.table)?);
        }
        Ok(self.gram.clone().unwrap_or_else(|| unreachable!()))
    }
}

/// Whether a batch of `starts` sequences of `steps` steps reads enough rows of G (each step
/// reads one; the first picks of most sequences are shared, so the distinct rows are far fewer
/// than the reads) that building G whole first, four rows a pass, costs less than row by row:
/// at least 8 reads a row of G. A whole cache does; a few hundred short sequences do not.
pub(crate) fn reads_most_of_g(starts: usize, steps: Option<usize>, n: usize) -> bool {
    let len = crate::batch::sequence_length(n, steps) as u128;
    starts as u128 * len >= 8 * n as u128
}

impl Engine {
    /// Wrap a device table (nothing is built yet).
    pub fn new(table: DeviceTable) -> Engine {
        Engine {
            n: table.n(),
            d: table.d(),
            precision: table.precision(),
            table: Some(table),
            gram: None,
            host: None,
        }
    }

    /// An engine on a machine with no Vulkan device: the host engine's copy of `table` only;
    /// every job runs on the host, and what needs a device (G on a device, k-NN) is refused
    /// with [`no_vulkan`].
    pub fn host_only(table: &Table, precision: Precision) -> Result<Engine> {
        Ok(Engine {
            table: None,
            n: table.n(),
            d: table.d(),
            precision,
            gram: None,
            host: Some(HostSide {
                table: HostTable::new(table, precision)?,
                gram: None,
            }),
        })
    }

    /// Upload `table` to `ctx` at `precision`; where the context runs sequences on the host
    /// ([`Context::native_host`]), the host engine's copy is made too and every job of this
    /// engine runs there (rankings and k-NN use the device table).
    pub fn upload(ctx: &Context, table: &Table, precision: Precision) -> Result<Engine> {
        let host = match ctx.native_host() {
            true => Some(HostSide {
                table: HostTable::new(table, precision)?,
                gram: None,
            }),
            false => None,
        };
        Ok(Engine {
            table: Some(DeviceTable::upload(ctx, table, precision)?),
            n: table.n(),
            d: table.d(),
            precision,
            gram: None,
            host,
        })
    }

    /// Whether this engine's jobs run on the host.
    pub fn native_host(&self) -> bool {
        self.host.is_some()
    }

    /// The device table (an error naming what needs it on a machine with no Vulkan device).
    pub fn table(&self) -> Result<&DeviceTable> {
        self.table.as_ref().ok_or_else(no_vulkan)
    }
    /// The table's shape: rows N, dimension D and storage precision.
    pub fn shape(&self) -> (usize, usize, Precision) {
        (self.n, self.d, self.precision)
    }

    /// G of the table for jobs with the default options, built on first use and shared with
    /// every later gram job that can use it.
    pub fn gram(&mut self) -> Result<Gram> {
        self.gram_for(&GramOptions::default())
    }

    /// G of the table for gram jobs with `opts`: fixed-point entries where they run on
    /// fixed-point keys ([`crate::gram::fixed_point`]), float32 entries where their options name
    /// float sums. Built on first use and kept; a G of the other kind is replaced (jobs and
    /// handles that hold it keep it alive).
    pub fn gram_for(&mut self, opts: &GramOptions) -> Result<Gram> {
        let table = self.table()?;
        let (n, d) = (table.n(), table.d());
        let fixed = crate::gram::fixed_point(table.context().caps(), n, d, opts);
        if let Some(g) = &self.gram {
            if g.fixed_scale().is_some() == fixed {
                return Ok(g.clone());
            }
        }
        let g = Gram::build_with(
            table,
            &crate::gram::GramBuild {
                fixed: Some(fixed),
                ..Default::default()
            },
        )?;
        self.gram = Some(g.clone());
        Ok(g)
    }

    /// Whether G has been built and is held.
    pub fn has_gram(&self) -> bool {
        self.gram.is_some() || self.host.as_ref().is_some_and(|h| h.gram.is_some())
    }

    /// Create the host engine's G (no row built yet) if this engine runs on the host, so that
    /// clones made from now on share its rows.
    pub(crate) fn share_host_gram(&mut self) -> Result<()> {
        if let Some(h) = &mut self.host {
            h.gram()?;
        }
        Ok(())
    }

    /// Build the rest of the host engine's G, if it has one.
    pub(crate) fn fill_host_gram(&self) {
        if let Some(g) = self.host.as_ref().and_then(|h| h.gram.as_ref()) {
            g.fill();
        }
    }

    /// The host engine's G: rows built and the wall time spent building them (`None` where
    /// jobs run on a device or no host G exists yet).
    pub(crate) fn host_gram_rows(&self) -> Option<(usize, u64)> {
        let g = self.host.as_ref()?.gram.as_ref()?;
        Some((g.rows_built(), g.build_ns()))
    }

    /// The device's G build time, nanoseconds, once built.
    pub(crate) fn device_gram_ns(&self) -> Option<u64> {
        self.gram.as_ref().map(|g| g.build_ns())
    }

    /// Drop the cached G, the device's and the host engine's (jobs and handles that hold it
    /// keep it alive).
    pub fn release_gram(&mut self) {
        self.gram = None;
        if let Some(h) = &mut self.host {
            h.gram = None;
        }
    }

    /// The largest batch of sequences of `steps` steps one job of this engine takes in the
    /// engine `requested` resolves to (the device's limits next to G, or the host engine's
    /// memory budget). At least 1.
    pub fn max_batch(&self, requested: Mode, steps: usize) -> usize {
        let (n, d, p) = (self.n, self.d, self.precision);
        match (&self.host, &self.table) {
            (None, Some(t)) => max_batch(t.context().caps(), requested, n, d, p, steps),
            _ => host::max_batch(requested, n, d, steps, host::host_memory_budget()),
        }
        .max(1)
    }

    /// The engine `requested` resolves to for this table, and why.
    pub fn mode_for(&self, requested: Mode) -> ModeChoice {
        match &self.host {
            Some(h) => ModeChoice::host(requested, h.table.n, h.table.d),
            None => match &self.table {
                Some(t) => ModeChoice::for_table(t, requested),
                None => ModeChoice::host(requested, self.n, self.d),
            },
        }
    }

    /// A job for `starts` in the engine `opts.mode` resolves to (auto: gram when G fits the
    /// device's budget); nothing is computed until [`Job::step`].
    pub fn job(&mut self, starts: &[u32], opts: &JobOptions) -> Result<Job> {
        self.start(starts, opts, None)
    }

    /// A job continuing from `prefix` (see [`Prefix`]), bit-identical to an uninterrupted run.
    pub fn resume_job(&mut self, starts: &[u32], prefix: Prefix, opts: &JobOptions) -> Result<Job> {
        self.start(starts, opts, Some(prefix))
    }

    fn start(&mut self, starts: &[u32], opts: &JobOptions, prefix: Option<Prefix>) -> Result<Job> {
        // The engines check their starts too (the same function); checked here first so that a
        // bad list fails before G is built.
        check_starts(starts, self.n)?;
        let mode = self.mode_for(opts.mode).mode;
        if let Some(h) = &mut self.host {
            let hopts = HostOptions {
                chunk: opts.gram.chunk,
                steps: opts.gram.steps,
            };
            let job = match mode {
                Mode::Gram => {
                    let g = h.gram()?;
                    // A batch that reads most of G builds it whole first (four rows a pass);
                    // a few short sequences build only the rows their picks read. Same bits.
                    if reads_most_of_g(starts.len(), opts.gram.steps, self.n) {
                        g.fill();
                    }
                    HostJob::gram(&g, starts, &hopts)?
                }
                _ => HostJob::scan(&h.table, starts, &hopts)?,
            };
            let job = match prefix {
                Some(p) => job.resume(p.rows, p.len)?,
                None => job,
            };
            return Ok(Job::Host(Box::new(job)));
        }
        if mode == Mode::Gram {
            let g = self.gram_for(&opts.gram)?;
            return Job::gram(&g, starts, &opts.gram, prefix.map(|p| (p.rows, p.len)));
        }
        let job =
            match prefix {
                None => ScanJob::new(self.table()?, starts, &opts.scan)?,
                Some(Prefix { host: None, .. }) => return Err(Error::Invalid(
                    "the scan engine resumes from the host table: pass it as the first argument"
                        .into(),
                )),
                Some(Prefix {
                    host: Some(host),
                    rows,
                    len,
                }) => ScanJob::resume(self.table()?, host, starts, rows, len, &opts.scan)?,
            };
        Ok(Job::Scan(Box::new(job)))
    }
}

/// A job of either engine; every method behaves the same for both.
pub enum Job {
    /// A scan job.
    Scan(Box<ScanJob>),
    /// A gram job.
    Gram(Box<GramJob>),
    /// A job of the host engine (gram or scan on the CPU's cores).
    Host(Box<HostJob>),
}

/// The same method call on every kind of job (their methods share names and meanings).
macro_rules! both {
    ($self:expr, $j:ident => $e:expr) => {
        match $self {
            Job::Scan($j) => $e,
            Job::Gram($j) => $e,
            Job::Host($j) => $e,
        }
    };
}

impl Job {
    /// A gram job on an existing G, new or continuing from `(rows, len)`.
    pub fn gram(
        g: &Gram,
        starts: &[u32],
        opts: &GramOptions,
        resume: Option<(&[u32], usize)>,
    ) -> Result<Job> {
        let job = match resume {
            None => GramJob::new(g, starts, opts)?,
            Some((rows, len)) => GramJob::resume(g, starts, rows, len, opts)?,
        };
        Ok(Job::Gram(Box::new(job)))
    }

    /// The recurrence this job runs: scan or gram (on a device or on the host).
    pub fn mode(&self) -> Mode {
        match self {
            Job::Scan(_) => Mode::Scan,
            Job::Gram(_) => Mode::Gram,
            Job::Host(j) => j.mode(),
        }
    }
    /// Where the job runs: `"host"` (the native CPU engine) or `"device"` (a Vulkan device).
    pub fn engine(&self) -> &'static str {
        match self {
            Job::Host(_) => "host",
            _ => "device",
        }
    }
    /// Advance every sequence by up to `n` steps.
    pub fn step(&mut self, n: usize) -> Result<StepReport> {
        if std::env::var_os(crate::batch::ENV_INJECT_PANIC).is_some() {
            panic!("injected panic ({})", crate::batch::ENV_INJECT_PANIC);
        }
        both!(self, j => j.step(n))
    }
    /// Step to the end.
    pub fn run(&mut self) -> Result<StepReport> {
        both!(self, j => j.run())
    }
    /// Steps per submission from now on.
    pub fn set_chunk(&mut self, c: usize) {
        both!(self, j => j.set_chunk(c))
    }
    /// The scan engine's candidate walk from now on; a gram step reads whole Gram rows and
    /// ignores it.
    pub fn set_tiling(&mut self, shape: Shape, tile_size: u32) {
        if let Job::Scan(j) = self {
            j.set_tiling(shape, tile_size);
        }
    }
    /// Whether every step is computed.
    pub fn done(&self) -> bool {
        both!(self, j => j.done())
    }
    /// Steps computed so far.
    pub fn steps_done(&self) -> usize {
        both!(self, j => j.steps_done())
    }
    /// Steps the job computes in all.
    pub fn total_steps(&self) -> usize {
        both!(self, j => j.total_steps())
    }
    /// Compute time so far, nanoseconds: the device's timestamps, or the host engine's wall
    /// time of its steps.
    pub fn gpu_ns(&self) -> u64 {
        both!(self, j => j.gpu_ns())
    }
    /// The starts, in batch order.
    pub fn starts(&self) -> &[u32] {
        both!(self, j => j.starts())
    }
    /// Entries of each sequence so far (steps done + 1).
    pub fn sequence_len(&self) -> usize {
        both!(self, j => j.sequence_len())
    }
    /// Invocations per workgroup of the per-sequence dispatches (a host job: its threads).
    pub fn workgroup_size(&self) -> u32 {
        both!(self, j => j.workgroup_size())
    }
    /// Where a device gram job keeps its state; `None` for other jobs.
    pub fn placement(&self) -> Option<Placement> {
        match self {
            Job::Gram(j) => Some(j.placement()),
            _ => None,
        }
    }
    /// Whether a device gram job reduces with subgroup operations; `None` for other jobs.
    pub fn uses_subgroups(&self) -> Option<bool> {
        match self {
            Job::Gram(j) => Some(j.uses_subgroups()),
            _ => None,
        }
    }
    /// Every sequence so far, row-major, [`Job::sequence_len`] entries a row.
    pub fn sequences_flat(&self) -> Result<Vec<u32>> {
        self.sequence_columns(0, self.sequence_len())
    }
    /// Entries `from..to` of every sequence, row-major.
    pub fn sequence_columns(&self, from: usize, to: usize) -> Result<Vec<u32>> {
        both!(self, j => j.sequence_columns(from, to))
    }
    /// Entries `from..to` of every sequence, row-major, into `out` (resized; its capacity
    /// reused, so a caller downloading chunk after chunk into one buffer pays no fresh pages).
    pub fn sequence_columns_into(&self, from: usize, to: usize, out: &mut Vec<u32>) -> Result<()> {
        both!(self, j => j.sequence_columns_into(from, to, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(requested: Mode, unfit: Option<&str>) -> ModeChoice {
        ModeChoice::from_fit(requested, unfit.map(str::to_string), || {
            ModeReason::AutoFits {
                n: 10,
                gram_bytes: 400,
                device: "dev".into(),
                budget_bytes: 1 << 20,
            }
        })
    }

    /// The `auto` rule, once: gram where G fits, scan where not; a named mode stays.
    #[test]
    fn auto_is_gram_where_g_fits() {
        assert_eq!(Mode::Auto.resolve(true), Mode::Gram);
        assert_eq!(Mode::Auto.resolve(false), Mode::Scan);
        assert_eq!(Mode::Gram.resolve(false), Mode::Gram);
        assert_eq!(Mode::Scan.resolve(true), Mode::Scan);
        let c = choice(Mode::Gram, Some("G needs 9 GiB"));
        assert_eq!((c.mode, c.reason.code()), (Mode::Gram, "requested_unfit"));
        let c = choice(Mode::Auto, Some("G needs 9 GiB"));
        assert_eq!((c.mode, c.reason.code()), (Mode::Scan, "auto_unfit"));
    }

    /// Devices agree on the first one's engine unless another chooses otherwise or cannot run
    /// a requested gram; that device's choice then stands, named.
    #[test]
    fn devices_agree_on_one_engine() {
        assert!(ModeChoice::agree(&[]).is_none());
        let fits = (choice(Mode::Auto, None), "A".to_string());
        let unfit = (
            choice(Mode::Auto, Some("G does not fit B")),
            "B".to_string(),
        );
        let (c, why) = ModeChoice::agree(&[fits.clone(), fits.clone()]).unwrap();
        assert_eq!(
            (c.mode, why.as_str()),
            (Mode::Gram, fits.0.to_string().as_str())
        );
        let (c, why) = ModeChoice::agree(&[fits.clone(), fits.clone(), unfit.clone()]).unwrap();
        assert_eq!(c.mode, Mode::Scan);
        assert_eq!(why, "device 3 of 3 (B): auto: G does not fit B");
        let gram_unfit = (choice(Mode::Gram, Some("G needs 9 GiB")), "C".to_string());
        let gram_fits = (choice(Mode::Gram, None), "D".to_string());
        let (c, why) = ModeChoice::agree(&[gram_fits, gram_unfit]).unwrap();
        assert_eq!((c.mode, c.reason.code()), (Mode::Gram, "requested_unfit"));
        assert_eq!(why, "requested, but G needs 9 GiB");
    }
}
