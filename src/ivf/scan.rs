//! The IVF-Flat list scan on the device (`shaders/ivf_scan.comp`): every list in one slab, and
//! one dispatch that scans, for every query, the rows of every list it probes and keeps its k
//! best (`shaders/block_select.glsl`: a short sorted queue per invocation, then a workgroup
//! merge, and again over the same rows in the rare case one invocation held more of the k best
//! than its queue). May
//! touch the device context, device memory, the compiled shaders and command submission; no index
//! logic.
//!
//! # The slab
//! The lists' rows, list after list, each list given room for a quarter more rows (at least 32)
//! in whole blocks of 32 rows (zero rows fill the room; no list reads past its size),
//! interleaved by blocks of 32 rows (row r's dim j at `(r / 32) · 32 · D + j · 32 + r % 32`) so
//! a subgroup's 32 invocations read dim j of 32 rows in one coalesced load; beside it each slab
//! row's inverse norm (from the stored values in float64, as [`crate::DeviceTable`] computes
//! them), its id, and each list's first row and size. [`Slab::append`] writes the rows an
//! [`super::IvfFlat::add`] appended in place (the blocks holding them, their norms, ids and the
//! sizes) while every list has room; past it the next search builds the slab again.
//!
//! # Exactness
//! A key is [`crate::knn`]'s for the same (query, stored row), bit for bit (the same fused
//! multiply-add chain; see the shader), and the block select is exact under the `(key, id)`
//! order, so the k best of the probed rows are the exact search's k best restricted to them —
//! with every list probed, the exact search itself.
//!
//! # Devices that cap loops
//! lavapipe stops an invocation's loops after 65,535 iterations in all
//! ([`crate::device::loop_budget`]); [`dispatches`] counts an invocation's iterations from above
//! and cuts the scan into dispatches over ranges of probe ranks and of rows within the lists,
//! each starting from the k best the one before wrote.

use crate::device::{loop_budget, Buffer, Capabilities, Context, Pipeline};
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::spirv;
use crate::submit::{barrier, bind, Set, Submitter};
use crate::table::{Precision, Table};

/// Invocations a workgroup (one query).
const SCAN_WG: usize = 128;
/// Rows an invocation scans at a time (independent fused multiply-add chains in flight).
const SCAN_ROWS: usize = 2;
/// Rows a block of the interleaved layout.
const BLOCK: usize = 32;
/// The largest k of the list scan (block_select.glsl's bound on the k best in shared memory);
/// larger k search list by list with the exact k-NN.
pub const MAX_SCAN_K: usize = 64;
/// The longest queue an invocation of the block select keeps in registers: k ≤ 8 select in one
/// pass, larger k in one pass unless an invocation holds more than 8 of the k best, and in at
/// most ceil(k / 8) passes over the candidates (block_select.glsl).
const QUEUE: usize = 8;
/// The largest D of the list scan (the query is held in shared memory).
pub const MAX_SCAN_DIM: usize = 4096;
/// Queries a dispatch (workgroups along x).
const QUERY_TILE: usize = 65_535;
/// The id of a padding pair in the shader.
const NO_ID_U32: u32 = u32::MAX;

/// The words both scans' push blocks share (`ivf_scan.comp`'s after D, `ivfpq_scan.comp`'s
/// first): the first query, probes a query, one dispatch's step (probe ranks [p0, p1), rows
/// [r0, r1)), k, and whether the dispatch carries on from the k best of the one before.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct StepPush {
    q0: u32,
    nprobe: u32,
    p0: u32,
    p1: u32,
    r0: u32,
    r1: u32,
    k: u32,
    seed: u32,
}

impl StepPush {
    /// The words of query `q0`'s tile, `nprobe` probes a query, dispatch `step`, `k` results.
    pub(crate) fn new(q0: usize, nprobe: usize, step: Step, k: usize, seed: bool) -> Self {
        let (p0, p1, r0, r1) = step;
        StepPush {
            q0: q0 as u32,
            nprobe: nprobe as u32,
            p0: p0 as u32,
            p1: p1 as u32,
            r0: r0 as u32,
            r1: r1.min(u32::MAX as usize) as u32,
            k: k as u32,
            seed: seed as u32,
        }
    }
}

/// `ivf_scan.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ScanPush {
    dim: u32,
    step: StepPush,
    metric: u32,
    probe_off: u32,
    ids_off: u32,
}

/// The lists on the device (see the [module](self) documentation).
pub(crate) struct Slab {
    ctx: Context,
    d: usize,
    precision: Precision,
    data: Buffer,
    inv_norm: Buffer,
    lists: Buffer,
    row_id: Buffer,
    /// Rows of the longest list.
    max_len: usize,
    /// Unique to this slab (what a descriptor set naming its buffers keys on).
    pub serial: u64,
    /// Per list: its first slab row, its rows on the device, the rows reserved for it.
    at: Vec<usize>,
    len: Vec<usize>,
    cap: Vec<usize>,
}

/// A number no slab had before (for the sets that name a slab's buffers).
pub(crate) fn next_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Whether the list scan takes a search of `k` results in dimension `d`.
pub(crate) fn applies(k: usize, d: usize) -> bool {
    k <= MAX_SCAN_K && d <= MAX_SCAN_DIM
}

impl Slab {
    /// The slab of `lists` (each: ids ascending, rows row-major) at `precision`; `None` when
    /// every list is empty.
    pub fn build(
        ctx: &Context,
        lists: &[(&[i64], &[f32])],
        d: usize,
        precision: Precision,
    ) -> Result<Option<Slab>> {
        // Each list's room: its rows and a quarter more, at least a block more, in whole blocks
        // — so adds that append to lists write only the blocks they touch (`Slab::append`).
        let (mut at, mut len, mut cap) = (Vec::new(), Vec::new(), Vec::new());
        let mut rows = 0usize;
        for (ids, _) in lists {
            let room = (ids.len() + (ids.len() / 4).max(BLOCK)).div_ceil(BLOCK) * BLOCK;
            at.push(rows);
            len.push(ids.len());
            cap.push(room);
            rows += room;
        }
        if len.iter().all(|&l| l == 0) {
            return Ok(None);
        }
        let caps = ctx.caps();
        let bytes = (rows as u64) * (d as u64) * precision.bytes() as u64;
        if bytes > caps.max_buffer_range || rows >= u32::MAX as usize / 2 {
            return Err(Error::Limit(format!(
                "the IVF lists' {rows} rows × {d} {} (with room to grow) need a {bytes}-byte \
                 buffer; {} allows {} bytes (maxStorageBufferRange)",
                precision.name(),
                caps.name,
                caps.max_buffer_range
            )));
        }
        let mut flat = vec![0f32; rows * d];
        let mut row_id = vec![NO_ID_U32; rows];
        for (l, (ids, data)) in lists.iter().enumerate() {
            flat[at[l] * d..at[l] * d + data.len()].copy_from_slice(data);
            for (i, &id) in ids.iter().enumerate() {
                row_id[at[l] + i] = id as u32;
            }
        }
        let table = Table::new(flat, rows, d)?;
        let inv = table.as_stored(precision).inverse_norms();
        let data = match precision {
            Precision::Fp32 => ctx.upload(
                "IVF lists",
                bytemuck::cast_slice(&interleave(table.data(), rows, d)),
            )?,
            Precision::Fp16 => ctx.upload(
                "IVF lists",
                bytemuck::cast_slice(&interleave(&table.to_f16_bits_checked()?, rows, d)),
            )?,
        };
        let words: Vec<u32> = at
            .iter()
            .zip(&len)
            .flat_map(|(&a, &n)| [a as u32, n as u32])
            .collect();
        Ok(Some(Slab {
            ctx: ctx.clone(),
            d,
            precision,
            data,
            inv_norm: ctx.upload("IVF inverse norms", bytemuck::cast_slice(&inv))?,
            lists: ctx.upload("IVF list offsets", bytemuck::cast_slice(&words))?,
            row_id: ctx.upload("IVF row ids", bytemuck::cast_slice(&row_id))?,
            max_len: len.iter().copied().max().unwrap_or(0),
            serial: next_serial(),
            at,
            len,
            cap,
        }))
    }

    /// Puts rows appended to lists on the device in place: `lists` are every list as the host
    /// holds it now (ids ascending, rows row-major), the device holding a prefix of each.
    /// Writes, in one upload a buffer, the 32-row blocks that hold new rows, their inverse
    /// norms and ids, and the lists' sizes. `false` (nothing written) when a list has outgrown
    /// its room: the caller builds the slab again.
    pub fn append(&mut self, lists: &[(&[i64], &[f32])]) -> Result<bool> {
        if lists.len() != self.len.len()
            || lists
                .iter()
                .zip(&self.cap)
                .any(|((ids, _), &c)| ids.len() > c)
        {
            return Ok(false);
        }
        let d = self.d;
        let eb = self.precision.bytes();
        let (mut blocks, mut norms, mut ids_w, mut sizes) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (l, (ids, data)) in lists.iter().enumerate() {
            let (old, new) = (self.len[l], ids.len());
            if new == old {
                continue;
            }
            if new < old {
                return Ok(false);
            }
            let base = self.at[l];
            // Whole blocks from the one holding the first new row.
            let b0 = old / BLOCK * BLOCK;
            let b1 = new.div_ceil(BLOCK) * BLOCK;
            let mut part = vec![0f32; (b1 - b0) * d];
            part[..(new - b0) * d].copy_from_slice(&data[b0 * d..new * d]);
            let t = Table::new(part, b1 - b0, d)?;
            let bytes: Vec<u8> = match self.precision {
                Precision::Fp32 => bytemuck::cast_slice(&interleave(t.data(), b1 - b0, d)).to_vec(),
                Precision::Fp16 => {
                    bytemuck::cast_slice(&interleave(&t.to_f16_bits_checked()?, b1 - b0, d))
                        .to_vec()
                }
            };
            blocks.push((((base + b0) * d * eb) as u64, bytes));
            let inv = t.as_stored(self.precision).inverse_norms();
            norms.push((
                ((base + old) * 4) as u64,
                bytemuck::cast_slice(&inv[old - b0..new - b0]).to_vec(),
            ));
            let w: Vec<u32> = ids[old..new].iter().map(|&i| i as u32).collect();
            ids_w.push((((base + old) * 4) as u64, bytemuck::cast_slice(&w).to_vec()));
            sizes.push((
                ((2 * l + 1) * 4) as u64,
                (new as u32).to_le_bytes().to_vec(),
            ));
            self.len[l] = new;
            self.max_len = self.max_len.max(new);
        }
        for (buf, regions) in [
            (&self.data, &blocks),
            (&self.inv_norm, &norms),
            (&self.row_id, &ids_w),
            (&self.lists, &sizes),
        ] {
            let r: Vec<(u64, &[u8])> = regions.iter().map(|(o, b)| (*o, b.as_slice())).collect();
            self.ctx.write_regions(buf, &r)?;
        }
        Ok(true)
    }

    /// The slab's buffers as the list scan binds them (0: rows, 1: inverse norms, 3: lists,
    /// 4: row ids; the caller adds 2: queries, 5: probes, 6: results).
    pub fn bindings(&self) -> [(u32, &Buffer); 4] {
        slab_bindings([&self.data, &self.inv_norm, &self.lists, &self.row_id])
    }

    /// Records and runs the list scan of `nq` queries on `sub` with `set` (the slab's
    /// [`Slab::bindings`], the query rows at 2 — unit rows for cosine —, the probes at 5 from
    /// word `probe_off`, `nprobe` a query, and the results at 6): the k best `(key, id)` pairs
    /// of each query among the rows of its probed lists, best first, keys from word 0 and ids
    /// from word nq · k, padded with (+∞, `u32::MAX`). `before` is recorded at the head of the
    /// first submission (then the submitter's mark and a barrier), `after` at the end of the
    /// last: one submission on a GPU. Returns the GPU nanoseconds before the mark and after it,
    /// and the dispatches.
    pub fn record_scan(
        &self,
        run: ScanRun<impl Pass, impl Pass>,
        k: usize,
        probe_off: usize,
        metric: Metric,
    ) -> Result<(u64, u64, usize)> {
        let (nq, nprobe) = (run.nq, run.nprobe);
        let ctx = &self.ctx;
        let d = self.d;
        let bs_k = queue(k);
        let (wg, ilp) = shape();
        let steps = dispatches(ctx.caps(), wg, d, k, bs_k, nprobe, self.max_len)?;
        let pipe = ctx.pipeline_for::<ScanPush>(
            &spirv::IVF_SCAN,
            self.precision,
            &[
                wg as u32,
                bs_k as u32,
                ilp as u32,
                ctx.caps().subgroup_arithmetic as u32,
            ],
        )?;
        let results = nq * k;
        record_list_scan(run, "IVF list scan", &pipe, &steps, |q0, step, seed| {
            ScanPush {
                dim: d as u32,
                step: StepPush::new(q0, nprobe, step, k, seed),
                metric: metric_code(metric),
                probe_off: probe_off as u32,
                ids_off: results as u32,
            }
        })
    }

    /// [`Slab::record_scan`] with probes from the host (`nprobe` a query): its own buffers,
    /// set and submitter, then a download — the path where the coarse search's results come
    /// back to the host first.
    #[allow(clippy::too_many_arguments)]
    pub fn scan(
        &self,
        queries: &Buffer,
        nq: usize,
        probes: &[u32],
        nprobe: usize,
        k: usize,
        metric: Metric,
    ) -> Result<ScanOut> {
        let scan = |run: ScanRun<'_, _, _>| self.record_scan(run, k, 0, metric);
        let slab = (&self.ctx, self.bindings());
        let labels = ["IVF probes", "IVF results"];
        scan_from_host(
            slab,
            labels,
            queries,
            (probes, false),
            (nq, nprobe, k),
            scan,
        )
    }
}

/// A list scan with its probes from the host, IVF-Flat's and IVF-PQ's alike: on the slab's
/// context with its `bindings`, the `queries` at 2, the probes' words uploaded (`labels`: the
/// probes' and the results' buffers) at 5 — and at 7 where `keys` (IVF-PQ: the probes' coarse keys follow the lists) —,
/// a results buffer for `nq` × `k` pairs at 6, and its own set and submitter for `record(sub,
/// set)`; then the download of the keys and ids.
pub(crate) fn scan_from_host(
    (ctx, bindings): (&Context, [(u32, &Buffer); 4]),
    labels: [&'static str; 2],
    queries: &Buffer,
    (probes, keys): (&[u32], bool),
    (nq, nprobe, k): (usize, usize, usize),
    record: impl FnOnce(ScanRun<NoPass, NoPass>) -> Result<(u64, u64, usize)>,
) -> Result<ScanOut> {
    let mut res = ScanOut::default();
    if nq == 0 {
        return Ok(res);
    }
    let pbuf = ctx.upload(labels[0], bytemuck::cast_slice(probes))?;
    let results = nq * k;
    let out = Buffer::storage(ctx, labels[1], (2 * results * 4) as u64)?;
    let mut singles = bindings.to_vec();
    singles.extend([(2, queries), (5, &pbuf), (6, &out)]);
    if keys {
        singles.push((7, &pbuf));
    }
    let set = Set::new(ctx, &singles, &[])?;
    let mut sub = Submitter::new(ctx)?;
    let (_, ns, dispatches) = record(ScanRun {
        sub: &mut sub,
        set: set.set,
        nq,
        nprobe,
        before: None,
        after: None,
    })?;
    (res.gpu_ns, res.dispatches) = (ns, dispatches);
    drop(set);
    let w: Vec<u32> = ctx
        .download(&out, 0, (2 * results * 4) as u64)?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    res.keys = w[..results].iter().map(|&b| f32::from_bits(b)).collect();
    res.ids = w[results..2 * results].to_vec();
    Ok(res)
}

/// A list scan's dispatches `(p0, p1, r0, r1)`: probe ranks [p0, p1) and rows [r0, r1).
pub(crate) type Step = (usize, usize, usize, usize);

/// Records and runs a list scan's dispatches on `sub`, the IVF-Flat and IVF-PQ scans alike:
/// one workgroup a query, tiles of [`QUERY_TILE`] queries, the `steps` in submissions of at
/// most 64 with a barrier between dispatches, each with the push constants `push(q0, step,
/// seed)` makes (`seed`: the dispatch carries on from the k best of the one before, every one
/// but the first of a tile). `before` is recorded at the head of the first submission, then
/// the submitter's mark (see [`Submitter::with_mark`]) and a barrier; every later submission
/// writes the mark first; `after` is recorded at the end of the last. Returns the GPU
/// nanoseconds before the marks and after them (all after them for a submitter without marks)
/// and the dispatches.
pub(crate) fn record_list_scan<P: bytemuck::Pod>(
    run: ScanRun<impl Pass, impl Pass>,
    label: &str,
    pipe: &Pipeline,
    steps: &[Step],
    push: impl Fn(usize, Step, bool) -> P,
) -> Result<(u64, u64, usize)> {
    let ScanRun {
        sub,
        set,
        nq,
        before,
        after,
        ..
    } = run;
    let ctx = sub.context().clone();
    let dev = ctx.device();
    let mark = sub.mark();
    let (mut before, mut after) = (before, after);
    let (mut before_ns, mut gpu_ns, mut count) = (0, 0, 0);
    // All the dispatches in one submission on a GPU (one); groups of them on a capped device.
    for q0 in (0..nq).step_by(QUERY_TILE) {
        let qn = QUERY_TILE.min(nq - q0);
        for (g, group) in steps.chunks(64).enumerate() {
            let ns = sub.run(label, |cb| unsafe {
                match before.take() {
                    Some(f) => {
                        f(cb);
                        mark.write(dev, cb);
                        barrier(dev, cb);
                    }
                    None => mark.write(dev, cb),
                }
                for (i, &step) in group.iter().enumerate() {
                    if i > 0 {
                        barrier(dev, cb);
                    }
                    let p = push(q0, step, g > 0 || i > 0);
                    bind(dev, cb, pipe, set, bytemuck::bytes_of(&p));
                    dev.cmd_dispatch(cb, qn as u32, 1, 1);
                }
                let last = q0 + qn == nq && (g + 1) * 64 >= steps.len();
                if last {
                    if let Some(f) = after.take() {
                        f(cb);
                    }
                }
            })?;
            let m = sub.mark_ns().min(ns);
            before_ns += m;
            gpu_ns += ns - m;
            count += group.len();
        }
    }
    Ok((before_ns, gpu_ns, count))
}

/// A slab's four buffers as both list scans bind them: the rows or codes at 0, their inverse
/// norms or the centroids at 1, the lists at 3 and the row ids at 4.
pub(crate) fn slab_bindings([a, b, lists, ids]: [&Buffer; 4]) -> [(u32, &Buffer); 4] {
    [(0, a), (1, b), (3, lists), (4, ids)]
}

/// A list scan's recording: on `sub` with `set`, `nq` queries of `nprobe` probes each,
/// `before` recorded at the head of the first submission and `after` at the end of the last
/// (see [`record_list_scan`]).
pub(crate) struct ScanRun<'s, B, A> {
    pub sub: &'s mut Submitter,
    pub set: ash::vk::DescriptorSet,
    pub nq: usize,
    pub nprobe: usize,
    pub before: Option<B>,
    pub after: Option<A>,
}

/// A pass recorded into a list scan's command buffer, before or after it.
pub(crate) trait Pass: FnOnce(ash::vk::CommandBuffer) {}
impl<F: FnOnce(ash::vk::CommandBuffer)> Pass for F {}

/// No pass before or after a scan (its probes from the host).
type NoPass = fn(ash::vk::CommandBuffer);

/// What [`Slab::scan`] returns.
#[derive(Default)]
pub(crate) struct ScanOut {
    /// `nq × k` keys, best first (+∞ padding).
    pub keys: Vec<f32>,
    /// `nq × k` ids (`u32::MAX` padding).
    pub ids: Vec<u32>,
    /// GPU nanoseconds.
    pub gpu_ns: u64,
    /// Dispatches recorded.
    pub dispatches: usize,
}

/// The scan's workgroup size and rows an invocation scans at a time: [`SCAN_WG`] and
/// [`SCAN_ROWS`], or `DIVERSITY_IVF_SCAN=wg,rows` (a tuning experiment; wg a power of two from 32
/// to 256, rows 1 to 4).
fn shape() -> (usize, usize) {
    // Parsed strictly by `settings::check` when the context opened.
    crate::settings::read("DIVERSITY_IVF_SCAN", |v| {
        crate::settings::parse_scan_shape("DIVERSITY_IVF_SCAN", v)
    })
    .ok()
    .flatten()
    .unwrap_or((SCAN_WG, SCAN_ROWS))
}

fn metric_code(m: Metric) -> u32 {
    match m {
        Metric::InnerProduct => 0,
        Metric::Cosine => 1,
        Metric::L2 => 2,
    }
}

/// Rows `rows × d` (row-major) in the slab's interleaved layout (`rows` a multiple of 32).
fn interleave<T: Copy + Default>(src: &[T], rows: usize, d: usize) -> Vec<T> {
    let mut out = vec![T::default(); rows * d];
    for b in 0..rows / BLOCK {
        let blk = &mut out[b * BLOCK * d..(b + 1) * BLOCK * d];
        for r in 0..BLOCK {
            let row = &src[(b * BLOCK + r) * d..(b * BLOCK + r + 1) * d];
            for (j, &v) in row.iter().enumerate() {
                blk[j * BLOCK + r] = v;
            }
        }
    }
    out
}

/// The dispatches of one scan, `(p0, p1, r0, r1)`: probe ranks [p0, p1) and rows [r0, r1) of
/// each probed list. One dispatch where loops are not capped; where they are, as many as keep
/// every invocation's loop iterations — counted from above: the query load, then in each of the
/// block select's passes (as many as it may need, [`select_passes`]) the seed and per probe its
/// rows' chains over d and queue insertions, and the merges — within the budget.
pub(crate) fn dispatches(
    caps: &Capabilities,
    wg: usize,
    d: usize,
    k: usize,
    bs_k: usize,
    nprobe: usize,
    max_len: usize,
) -> Result<Vec<(usize, usize, usize, usize)>> {
    let passes = select_passes(k, bs_k);
    let cost = LoopCost {
        fixed: d.div_ceil(wg) + merge_iterations(wg, k, bs_k),
        per_probe: passes,
        per_row: passes * (d + bs_k + 1),
    };
    split(caps, "the IVF list scan", wg, nprobe, max_len, &cost)
}

/// The block select's queue for `k` results ([`QUEUE`] at most, a power of two), or
/// `DIVERSITY_IVF_QUEUE` (a power of two from 1 to 64; a tuning and testing experiment: a short
/// queue forces the select's extra passes).
pub(crate) fn queue(k: usize) -> usize {
    // Parsed strictly (a power of two, 1 to 64) by `settings::check` when the context opened.
    let max = crate::settings::read("DIVERSITY_IVF_QUEUE", |v| {
        crate::settings::parse_power_of_two("DIVERSITY_IVF_QUEUE", v, MAX_SCAN_K as u64)
    })
    .ok()
    .flatten()
    .map_or(QUEUE, |q| q as usize);
    k.next_power_of_two().min(max)
}

/// The most passes the block select makes over a dispatch's candidates with queues of `bs_k`:
/// each confirms at least `bs_k` more of the k best (block_select.glsl).
pub(crate) fn select_passes(k: usize, bs_k: usize) -> usize {
    k.div_ceil(bs_k).max(1)
}

/// Loop iterations an invocation of a list scan runs beside its rows', from above, with a
/// margin: per pass the queue's reset, the seed's insertion and the pass loop; over all passes
/// at most k + 2 · passes merge rounds (the least lost pair's, the confirmed ones', the first
/// unconfirmed one's), each a tree of log2(wg) steps and a head drop of `bs_k`.
pub(crate) fn merge_iterations(wg: usize, k: usize, bs_k: usize) -> usize {
    let passes = select_passes(k, bs_k);
    passes * (2 * bs_k + 2) + (k + 2 * passes) * (wg.trailing_zeros() as usize + 2 + bs_k) + 8
}

/// An invocation's loop iterations in a list scan, from above: `fixed` once, `per_probe` for
/// each probed list, `per_row` for each of its rows.
pub(crate) struct LoopCost {
    pub fixed: usize,
    pub per_probe: usize,
    pub per_row: usize,
}

/// A list scan's dispatches under `caps`' loop cap (see [`dispatches`]); `what` names the scan
/// in the error where even one row of one list does not fit.
pub(crate) fn split(
    caps: &Capabilities,
    what: &str,
    wg: usize,
    nprobe: usize,
    max_len: usize,
    cost: &LoopCost,
) -> Result<Vec<(usize, usize, usize, usize)>> {
    if caps.loop_limit.is_none() {
        return Ok(vec![(0, nprobe, 0, usize::MAX)]);
    }
    let budget = loop_budget(caps) as usize;
    let per_probe = cost.per_probe + max_len.div_ceil(wg) * cost.per_row;
    if cost.fixed + per_probe <= budget {
        let step = (budget - cost.fixed) / per_probe;
        return Ok((0..nprobe)
            .step_by(step)
            .map(|p0| (p0, (p0 + step).min(nprobe), 0, usize::MAX))
            .collect());
    }
    // One probe rank at a time, its lists' rows in ranges.
    let rows = budget.saturating_sub(cost.fixed + cost.per_probe) / cost.per_row * wg;
    if rows == 0 {
        crate::device::check_loop_budget(
            caps,
            what,
            (cost.fixed + cost.per_probe + cost.per_row) as u64,
        )?;
    }
    let mut out = Vec::new();
    for p in 0..nprobe {
        for r0 in (0..max_len.max(1)).step_by(rows.max(1)) {
            out.push((p, p + 1, r0, r0 + rows));
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// What every [`split`] of `nprobe` probe ranks holds: the dispatches run from rank 0 to
    /// `nprobe`, each starting where the one before ended.
    pub(in crate::ivf) fn assert_ranks_covered(s: &[(usize, usize, usize, usize)], nprobe: usize) {
        assert_eq!(s.first().unwrap().0, 0);
        assert_eq!(s.last().unwrap().1, nprobe);
        assert!(s.windows(2).all(|w| w[0].1 == w[1].0));
    }

    /// A [`split`] of lists too long for one rank a dispatch: every dispatch one rank, the last
    /// one's rows reaching `max_len`.
    pub(in crate::ivf) fn assert_one_rank_each(s: &[(usize, usize, usize, usize)], max_len: usize) {
        assert!(s.iter().all(|&(p0, p1, _, _)| p1 == p0 + 1));
        assert!(s.last().unwrap().3 >= max_len);
    }

    #[test]
    fn interleaved_by_blocks_of_32() {
        let (rows, d) = (64, 3);
        let src: Vec<u32> = (0..(rows * d) as u32).collect();
        let out = interleave(&src, rows, d);
        for r in 0..rows {
            for j in 0..d {
                assert_eq!(out[r / 32 * 32 * d + j * 32 + r % 32], src[r * d + j]);
            }
        }
    }

    #[test]
    fn select_passes_cover_the_queue() {
        // k ≤ the queue: one pass; past it, each pass confirms a queue's worth at least.
        assert_eq!(select_passes(8, 8), 1);
        assert_eq!(select_passes(1, 1), 1);
        assert_eq!(select_passes(40, 8), 5);
        assert_eq!(select_passes(64, 8), 8);
        assert_eq!(select_passes(41, 8), 6);
        // The merge: 5 passes of reset, seed and loop (18 each), 40 + 10 rounds of 7 + 2 + 8.
        assert_eq!(merge_iterations(128, 40, 8), 5 * 18 + 50 * 17 + 8);
    }

    #[test]
    fn dispatches_fit_the_loop_cap() {
        let free = crate::device::test_caps(32, None);
        assert_eq!(
            dispatches(&free, 128, 384, 10, 8, 7, 5000).unwrap().len(),
            1
        );
        let capped = crate::device::test_caps(8, Some(65_535));
        // Short lists: several probes a dispatch, every rank covered once, rows whole.
        let s = dispatches(&capped, 128, 384, 10, 8, 50, 2000).unwrap();
        assert!(s.len() > 1);
        assert_ranks_covered(&s, 50);
        // Long lists: one rank at a time, rows in ranges covering the longest list.
        let s = dispatches(&capped, 128, 384, 10, 8, 2, 200_000).unwrap();
        assert_one_rank_each(&s, 200_000);
        assert_eq!(
            s.iter().filter(|e| e.0 == 1).map(|e| e.3).max(),
            Some(s[s.len() - 1].3)
        );
    }
}
