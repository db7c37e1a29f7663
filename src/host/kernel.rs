//! The host engine's inner loops: one pass over a sequence's keys that adds a row of G and finds
//! the two smallest keys (the gram step), and the float64 dot products of the re-score and the
//! host scan. Pure functions over slices, compiled once per instruction set (AVX-512, AVX2 + FMA,
//! and the baseline) and chosen at run time: every variant performs the same float operations
//! on each element (an f32 widened to f64 and one f64 addition; exact comparisons), so every
//! variant returns the same bits (a unit test holds this machine's to the baseline's). It may touch nothing but its arguments.

use std::sync::OnceLock;

/// The two smallest keys after a pass: the best (smallest; on equal keys the lowest index), its
/// index, and the second smallest key of any other index (+∞ when there is none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Top2 {
    pub best: f64,
    pub idx: usize,
    pub second: f64,
}

/// Lanes the passes keep apart (a multiple of every vector width used).
const L: usize = 8;

/// One sequence's lane accumulators in a pass: per lane the smallest key, the second smallest,
/// and the block of the smallest.
struct Lanes {
    m1: [f64; L],
    m2: [f64; L],
    i1: [u64; L],
}

impl Lanes {
    #[inline(always)]
    fn new() -> Lanes {
        Lanes {
            m1: [f64::INFINITY; L],
            m2: [f64::INFINITY; L],
            i1: [0; L],
        }
    }
    /// Add block `b` of a row into its keys and fold them in.
    #[inline(always)]
    fn block(&mut self, b: usize, k: &mut [f64], gg: &[f32]) {
        for l in 0..L {
            let v = k[l] + gg[l] as f64;
            k[l] = v;
            let lt = v < self.m1[l];
            let hi = if v > self.m1[l] { v } else { self.m1[l] };
            self.m2[l] = if hi < self.m2[l] { hi } else { self.m2[l] };
            self.i1[l] = if lt { b as u64 } else { self.i1[l] };
            self.m1[l] = if lt { v } else { self.m1[l] };
        }
    }
    /// The result, with the keys past the last whole block (`kr`, `gr`, from index `from`).
    #[inline(always)]
    fn finish(self, kr: &mut [f64], gr: &[f32], from: usize) -> Top2 {
        let mut top = reduce(&self.m1, &self.m2, &self.i1);
        for (j, (k, &gg)) in kr.iter_mut().zip(gr).enumerate() {
            let v = *k + gg as f64;
            *k = v;
            push(&mut top, v, from + j);
        }
        top
    }
}

/// Two sequences' passes in one loop (two independent memory streams keep more loads in
/// flight); each sequence's keys get exactly the operations of [`add_row_top2_impl`].
#[inline(always)]
fn add_rows_top2_pair_impl(ka: &mut [f64], ga: &[f32], kb: &mut [f64], gb: &[f32]) -> (Top2, Top2) {
    let n = ka.len();
    let blocks = n / L;
    let (kab, kar) = ka.split_at_mut(blocks * L);
    let (gab, gar) = ga.split_at(blocks * L);
    let (kbb, kbr) = kb.split_at_mut(blocks * L);
    let (gbb, gbr) = gb.split_at(blocks * L);
    let (mut a, mut b) = (Lanes::new(), Lanes::new());
    for (blk, (((k1, g1), k2), g2)) in kab
        .chunks_exact_mut(L)
        .zip(gab.chunks_exact(L))
        .zip(kbb.chunks_exact_mut(L))
        .zip(gbb.chunks_exact(L))
        .enumerate()
    {
        a.block(blk, k1, g1);
        b.block(blk, k2, g2);
    }
    (
        a.finish(kar, gar, blocks * L),
        b.finish(kbr, gbr, blocks * L),
    )
}

#[inline(always)]
fn add_row_top2_impl(keys: &mut [f64], g: &[f32]) -> Top2 {
    debug_assert_eq!(keys.len(), g.len());
    let blocks = keys.len() / L;
    let (kb, kr) = keys.split_at_mut(blocks * L);
    let (gb, gr) = g.split_at(blocks * L);
    let mut lanes = Lanes::new();
    for (b, (k, gg)) in kb.chunks_exact_mut(L).zip(gb.chunks_exact(L)).enumerate() {
        lanes.block(b, k, gg);
    }
    lanes.finish(kr, gr, blocks * L)
}

/// Fold one more key (at an index larger than every one seen) into `top`.
#[inline(always)]
fn push(top: &mut Top2, v: f64, idx: usize) {
    if v < top.best {
        top.second = top.best;
        top.best = v;
        top.idx = idx;
    } else if v < top.second {
        top.second = v;
    }
}

/// The lanes' results as one [`Top2`]: the smallest key, lowest index among equals; the second
/// smallest of everything else.
fn reduce(m1: &[f64; L], m2: &[f64; L], i1: &[u64; L]) -> Top2 {
    let mut best = f64::INFINITY;
    let mut idx = usize::MAX;
    let mut lane = 0;
    for l in 0..L {
        let i = i1[l] as usize * L + l;
        if m1[l] < best || (m1[l] == best && m1[l].is_finite() && i < idx) {
            best = m1[l];
            idx = i;
            lane = l;
        }
    }
    let mut second = f64::INFINITY;
    for l in 0..L {
        if l != lane && m1[l] < second {
            second = m1[l];
        }
        if m2[l] < second {
            second = m2[l];
        }
    }
    if idx == usize::MAX {
        idx = 0;
    }
    Top2 { best, idx, second }
}

#[inline(always)]
fn dot_impl(c: &[f64], e: &[f32]) -> f64 {
    let mut acc = [0f64; L];
    let blocks = c.len() / L;
    for (cc, ee) in c[..blocks * L]
        .chunks_exact(L)
        .zip(e[..blocks * L].chunks_exact(L))
    {
        for l in 0..L {
            acc[l] += cc[l] * ee[l] as f64;
        }
    }
    let mut s = 0.0;
    for a in acc {
        s += a;
    }
    for (cc, &ee) in c[blocks * L..].iter().zip(&e[blocks * L..]) {
        s += cc * ee as f64;
    }
    s
}

/// G's entries of `P` rows against a run of candidates, one per row and candidate:
/// `out[r][x] = ((e_p · e_x) · inv[x]) as f32` with `e_p` (`ps[r]`, widened to f64) and `e_x`
/// (row x of `xs`, `d` values) dotted exactly as [`dot_impl`] does (8 lanes over the dimension,
/// summed in lane order, then the tail), so an entry has the same bits whichever rows share its
/// pass: a row built alone on demand equals the same row built in a block.
#[inline(always)]
fn gram_rows_impl<const P: usize>(
    ps: [&[f64]; P],
    xs: &[f32],
    d: usize,
    inv: &[f64],
    out: [&mut [f32]; P],
) {
    let blocks = d / L;
    for (x, ex) in xs.chunks_exact(d).enumerate() {
        let mut acc = [[0f64; L]; P];
        for b in 0..blocks {
            let mut w = [0f64; L];
            for l in 0..L {
                w[l] = ex[b * L + l] as f64;
            }
            for r in 0..P {
                for l in 0..L {
                    acc[r][l] += ps[r][b * L + l] * w[l];
                }
            }
        }
        for r in 0..P {
            let mut s = 0.0;
            for a in acc[r] {
                s += a;
            }
            for k in blocks * L..d {
                s += ps[r][k] * ex[k] as f64;
            }
            out[r][x] = (s * inv[x]) as f32;
        }
    }
}

/// [`gram_rows_impl`] for one row and for four.
type GramRow1 = unsafe fn([&[f64]; 1], &[f32], usize, &[f64], [&mut [f32]; 1]);
type GramRow4 = unsafe fn([&[f64]; 4], &[f32], usize, &[f64], [&mut [f32]; 4]);

/// Two sequences' passes in one loop (keys and row of each).
type AddPair = unsafe fn(&mut [f64], &[f32], &mut [f64], &[f32]) -> (Top2, Top2);

/// The passes compiled for one instruction set, chosen once per process.
struct Passes {
    add_row: unsafe fn(&mut [f64], &[f32]) -> Top2,
    add_pair: AddPair,
    dot: unsafe fn(&[f64], &[f32]) -> f64,
    gram1: GramRow1,
    gram4: GramRow4,
    /// `"avx512"`, `"avx2"` or `"baseline"`.
    name: &'static str,
}

/// The baseline passes (no instruction set beyond the target's own).
const BASELINE: Passes = Passes {
    add_row: add_row_base,
    add_pair: add_pair_base,
    dot: dot_base,
    gram1: gram_rows_impl::<1>,
    gram4: gram_rows_impl::<4>,
    name: "baseline",
};

unsafe fn add_row_base(keys: &mut [f64], g: &[f32]) -> Top2 {
    add_row_top2_impl(keys, g)
}
unsafe fn dot_base(c: &[f64], e: &[f32]) -> f64 {
    dot_impl(c, e)
}
unsafe fn add_pair_base(ka: &mut [f64], ga: &[f32], kb: &mut [f64], gb: &[f32]) -> (Top2, Top2) {
    add_rows_top2_pair_impl(ka, ga, kb, gb)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    /// The three passes compiled for one instruction set (Rust never fuses a multiply and an
    /// add on its own, so FMA support changes no result).
    macro_rules! variant {
        ($add:ident, $pair:ident, $dot:ident, $gram:ident, $features:literal) => {
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $add(keys: &mut [f64], g: &[f32]) -> Top2 {
                add_row_top2_impl(keys, g)
            }
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $pair(
                ka: &mut [f64],
                ga: &[f32],
                kb: &mut [f64],
                gb: &[f32],
            ) -> (Top2, Top2) {
                add_rows_top2_pair_impl(ka, ga, kb, gb)
            }
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $dot(c: &[f64], e: &[f32]) -> f64 {
                dot_impl(c, e)
            }
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $gram<const P: usize>(
                ps: [&[f64]; P],
                xs: &[f32],
                d: usize,
                inv: &[f64],
                out: [&mut [f32]; P],
            ) {
                gram_rows_impl(ps, xs, d, inv, out)
            }
        };
    }
    variant!(add_row_avx2, add_pair_avx2, dot_avx2, gram_avx2, "avx2,fma");
    variant!(
        add_row_avx512,
        add_pair_avx512,
        dot_avx512,
        gram_avx512,
        "avx512f,avx512vl,avx512dq"
    );
}

/// The instruction set the passes use on this machine (for reports): `"avx512"`, `"avx2"` or
/// `"baseline"`.
pub fn isa() -> &'static str {
    passes().name
}

fn passes() -> &'static Passes {
    static P: OnceLock<Passes> = OnceLock::new();
    P.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq")
            {
                return Passes {
                    add_row: x86::add_row_avx512,
                    add_pair: x86::add_pair_avx512,
                    dot: x86::dot_avx512,
                    gram1: x86::gram_avx512::<1>,
                    gram4: x86::gram_avx512::<4>,
                    name: "avx512",
                };
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Passes {
                    add_row: x86::add_row_avx2,
                    add_pair: x86::add_pair_avx2,
                    dot: x86::dot_avx2,
                    gram1: x86::gram_avx2::<1>,
                    gram4: x86::gram_avx2::<4>,
                    name: "avx2",
                };
            }
        }
        BASELINE
    })
}

/// `keys[x] += g[x]` (g widened to f64) for every x, and the two smallest keys afterwards.
/// Keys at +∞ (items already chosen) stay there.
pub(crate) fn add_row_top2(keys: &mut [f64], g: &[f32]) -> Top2 {
    assert_eq!(keys.len(), g.len());
    // SAFETY: the function was chosen for the features this CPU reports.
    unsafe { (passes().add_row)(keys, g) }
}

/// [`add_row_top2`] for two sequences at once (`ka`, `kb` of one length), in one loop.
pub(crate) fn add_rows_top2_pair(
    ka: &mut [f64],
    ga: &[f32],
    kb: &mut [f64],
    gb: &[f32],
) -> (Top2, Top2) {
    assert!(ka.len() == ga.len() && kb.len() == gb.len() && ka.len() == kb.len());
    // SAFETY: the function was chosen for the features this CPU reports.
    unsafe { (passes().add_pair)(ka, ga, kb, gb) }
}

/// c · e in float64 (e widened), summed in 8 lanes then across them: the same order everywhere.
pub(crate) fn dot(c: &[f64], e: &[f32]) -> f64 {
    assert_eq!(c.len(), e.len());
    // SAFETY: as above.
    unsafe { (passes().dot)(c, e) }
}

/// One row of G: `out[x] = ((e_p · e_x) · inv[x]) as f32` for every row x of `xs` (`d` values
/// each), `e_p` widened to f64; the same bits as [`gram_rows4`] gives the row.
pub(crate) fn gram_row(p: &[f64], xs: &[f32], d: usize, inv: &[f64], out: &mut [f32]) {
    assert!(p.len() == d && xs.len() == d * out.len() && inv.len() == out.len());
    // SAFETY: as above.
    unsafe { (passes().gram1)([p], xs, d, inv, [out]) }
}

/// Four rows of G in one pass over the candidates (each candidate's row loaded once for four):
/// every entry with the bits [`gram_row`] gives it.
pub(crate) fn gram_rows4(ps: [&[f64]; 4], xs: &[f32], d: usize, inv: &[f64], out: [&mut [f32]; 4]) {
    let m = inv.len();
    assert!(xs.len() == d * m && ps.iter().all(|p| p.len() == d));
    assert!(out.iter().all(|o| o.len() == m));
    // SAFETY: as above.
    unsafe { (passes().gram4)(ps, xs, d, inv, out) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(keys: &mut [f64], g: &[f32]) -> Top2 {
        let mut top = Top2 {
            best: f64::INFINITY,
            idx: 0,
            second: f64::INFINITY,
        };
        for (i, (k, &gg)) in keys.iter_mut().zip(g).enumerate() {
            *k += gg as f64;
            push(&mut top, *k, i);
        }
        top
    }

    #[test]
    fn the_pass_agrees_with_a_plain_loop_on_ties_infinities_and_every_length() {
        let mut seed = 12345u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) % 7) as f32 - 3.0
        };
        for n in 1..70 {
            for trial in 0..20 {
                let g: Vec<f32> = (0..n).map(|_| rnd()).collect();
                let mut a: Vec<f64> = (0..n)
                    .map(|i| {
                        if (i + trial) % 5 == 0 {
                            f64::INFINITY
                        } else {
                            rnd() as f64
                        }
                    })
                    .collect();
                let mut b = a.clone();
                let got = add_row_top2(&mut a, &g);
                let want = naive(&mut b, &g);
                assert_eq!(a, b);
                assert_eq!(got.best, want.best, "n {n}");
                if want.best.is_finite() {
                    assert_eq!(got.idx, want.idx, "n {n} trial {trial}");
                }
                assert_eq!(got.second, want.second, "n {n} trial {trial}");
            }
        }
    }

    #[test]
    fn the_pair_pass_is_two_single_passes() {
        for n in [1usize, 7, 8, 9, 100] {
            let g1: Vec<f32> = (0..n).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
            let g2: Vec<f32> = (0..n).map(|i| ((i * 3) % 4) as f32 - 1.5).collect();
            let mut a: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
            let mut b: Vec<f64> = (0..n)
                .map(|i| if i == 2 { f64::INFINITY } else { 0.5 })
                .collect();
            let (mut a2, mut b2) = (a.clone(), b.clone());
            let (ta, tb) = add_rows_top2_pair(&mut a, &g1, &mut b, &g2);
            assert_eq!(ta, add_row_top2(&mut a2, &g1));
            assert_eq!(tb, add_row_top2(&mut b2, &g2));
            assert_eq!((a, b), (a2, b2));
        }
    }

    #[test]
    fn this_machines_passes_give_the_baselines_bits() {
        let n = 1003;
        let g: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 101) as f32 * 0.01 - 0.5)
            .collect();
        let e: Vec<f32> = (0..n).map(|i| ((i * 13) % 7) as f32 * 0.3 - 1.0).collect();
        let c: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
        let mut a: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).cos()).collect();
        a[5] = f64::INFINITY;
        let mut b = a.clone();
        // SAFETY: the baseline needs no instruction set beyond the target's.
        let base = unsafe { (BASELINE.add_row)(&mut b, &g) };
        assert_eq!(add_row_top2(&mut a, &g), base, "{}", isa());
        assert_eq!(a, b);
        let base_dot = unsafe { (BASELINE.dot)(&c, &e) };
        assert_eq!(dot(&c, &e).to_bits(), base_dot.to_bits(), "{}", isa());
    }

    /// An entry of G has the same bits alone, in a block of four and in the baseline's pass, and
    /// is the lane-ordered float64 dot product of `dot` scaled once.
    #[test]
    fn gram_entries_do_not_depend_on_their_block() {
        for d in [1usize, 7, 8, 9, 33, 384] {
            let m = 13;
            let xs: Vec<f32> = (0..m * d)
                .map(|i| ((i * 29) % 97) as f32 * 0.013 - 0.6)
                .collect();
            let ps64: Vec<Vec<f64>> = (0..4)
                .map(|r| {
                    (0..d)
                        .map(|k| ((k * 7 + r * 3) % 11) as f64 * 0.1 - 0.5)
                        .collect()
                })
                .collect();
            let inv: Vec<f64> = (0..m).map(|x| 1.0 / (1.0 + x as f64)).collect();
            let mut four = vec![vec![0f32; m]; 4];
            {
                let [a, b, c, e] = &mut four[..] else {
                    unreachable!()
                };
                gram_rows4(
                    [&ps64[0], &ps64[1], &ps64[2], &ps64[3]],
                    &xs,
                    d,
                    &inv,
                    [a, b, c, e],
                );
            }
            for r in 0..4 {
                let mut one = vec![0f32; m];
                gram_row(&ps64[r], &xs, d, &inv, &mut one);
                let mut base = vec![0f32; m];
                // SAFETY: the baseline needs no instruction set beyond the target's.
                unsafe { (BASELINE.gram1)([&ps64[r]], &xs, d, &inv, [&mut base]) };
                for x in 0..m {
                    let want = (dot(&ps64[r], &xs[x * d..(x + 1) * d]) * inv[x]) as f32;
                    assert_eq!(one[x].to_bits(), want.to_bits(), "d {d} row {r} x {x}");
                    assert_eq!(four[r][x].to_bits(), want.to_bits(), "d {d} row {r} x {x}");
                    assert_eq!(base[x].to_bits(), want.to_bits(), "{}", isa());
                }
            }
        }
    }

    #[test]
    fn dot_matches_float64() {
        let c: Vec<f64> = (0..37).map(|i| i as f64 * 0.5 - 3.0).collect();
        let e: Vec<f32> = (0..37).map(|i| (i % 5) as f32).collect();
        let want: f64 = c.iter().zip(&e).map(|(a, &b)| a * b as f64).sum();
        assert_eq!(dot(&c, &e), want);
    }
}
