#version 450
// The gram engine: one workgroup advances one sequence of the batch through `count` steps.
// key[x] = c · e_x / |e_x| is kept per candidate as a compensated pair (hi, lo) and grows by row
// G[prev][x] of G = E Eᵀ diag(1/|e|) each step, so a step is O(N), not O(N · D):
//
//   for every candidate x of this lane:  key[x] += G[prev][x]  (Knuth TwoSum into hi, lo)
//   pick = argmin (hi + lo) over unchosen x, lowest index on ties
//
// Minimising the key maximises d(x) = 1 - cos(c, e_x) (|c| > 0 scales every key alike); a zero
// row has key 0 (d = 1); a zero centroid has every acc exactly 0, so the lowest index wins.
// The row of the last pick is added at the start of the next step (or chunk), so the state
// between chunks is (hi, lo), the running sum c (compensated) and the judge's bound. A chosen
// candidate's hi is +inf.
//
// The judge (JUDGE = 1) makes every pick the pick of exact keys up to a fixed error: a key that
// sums t rows of a rounded G carries t roundings, so without it the error grows with the
// sequence while |c| need not (centred data). In key units (u = 2⁻²⁴; K_x the exact key of the
// exact running sum), every key v_x is within
//
//   A = E0 + (2.01·u + (D·u)²)·S + u·(L + kmax)     (compensated sums)
//   A = E0 + (2.01·u + (D·u)²)·S + u·Σ_steps (kmax' + |e_p|)   (plain sums)
//
// of K_x, where, since the last full refresh (or the start): S = Σ |e_p| over the rows added —
// each G entry is within (2.01·u + (D·u)²)·|e_p| of exact (gram_matrix.comp's compensated dot,
// the 1/|e_x| scaling and its rounding); L = Σ over the steps of max |lo| over the live keys —
// each compensated update is exact but for lo's own rounding, ≤ u·|lo|; kmax = max |v| now — the
// final rounding of hi + lo; plain sums round each update by ≤ u·(kmax' + |e_p|), kmax' the
// previous step's largest |key|; E0 = the refreshed keys' own error, below.
//
// Max |key| through |c| (plain sums, KMAX_C = 1, the default): every exact key is at most |c| in
// magnitude, so kmax ≤ |c| + A, and |c|² is tracked instead of taking a maximum over the keys
// each step: |c + e_p|² = |c|² + 2·|e_p|·K_p + |e_p|² with K_p the pick's exact key, at most its
// key + A (+ 3A for a pick from a band, whose running key was within 2A of the best; + E_F after
// a full refresh), |e_p| within (1 ± 8u) of 1/inv_norm (inv_norm is a float64 value rounded
// once, the division a few ulps), each update's five roundings covered by 16u of the magnitudes,
// the square root's few ulps by a factor 1 + 2⁻¹⁰; a full refresh restarts it from |c̃| + u·|r|.
// A step then finds only the best two keys (a three-value reduction instead of five).
//
// Each step finds the best key and the second best; when they are within 2A the order is not
// certain. Then only keys within 2A of the best can be the exact best (any other v_y > best + 2A
// gives K_y > best + A ≥ K_best): that band is re-scored with fresh keys F and the pick made from
// it; when it holds more than BAND candidates, every live key is replaced by F, A's terms restart
// (E0 = E_F) and the pick is made from those (as after REFRESH steps without a full recompute,
// when REFRESH > 0). Either way the pick is within 2·E_F of the exact
// best (K_pick ≤ F_pick + E_F ≤ F_best + E_F ≤ K_best + 2·E_F), E_F not depending on N:
//
//   F(x) = (c_hi · e_x + c_lo · e_x) · (1/|e_x|), 32 chains (d ≡ q mod 32, ascending), each a
//   compensated dot (TwoProduct, TwoSum; c_lo · e_x folded into the low part), joined by a fixed
//   pairwise tree of TwoSums, so the same bits for every workgroup and subgroup size;
//   E_F = (3.01·u + 2·(D·u)²)·|c̃| + 1.01·u·|r| + D·u·|c_lo|, with c̃ = c_hi + c_lo and r the
//   per-dimension sums of |c_lo| over the steps (c's TwoSum updates are exact but for c_lo's
//   rounding, ≤ u·|c_lo| each, so |c̃ − c|₂ ≤ u·|r|₂, and Cauchy-Schwarz moves it into the key).
//
// The norms are taken serially by invocation 0 (same bits everywhere) at a full refresh only.
//
// State lives in registers as a lane-stride array (item lid + r·WG in register r), loaded at the
// start of a dispatch and stored at its end (IN_REGS = 1), or in device memory, read and written
// every step (IN_REGS = 0). Both run the same float operations per candidate in the same order,
// and the (key, index) order is total, so every path, workgroup size, chunk and batch gives the
// same bits, refreshes included (they depend only on keys, c and A).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint RPER = 1u;      // registers of state per lane (1 when IN_REGS = 0)
layout(constant_id = 2) const uint IN_REGS = 1u;   // 1: state in registers, 0: in device memory
layout(constant_id = 3) const uint SUBGROUPS = 1u; // 1: subgroup min; 0: shared-memory tree only
layout(constant_id = 4) const uint SEQ_LEN = 1u;   // row stride of `seqs`: steps + 1
layout(constant_id = 5) const uint SLAB_ROWS = 1u; // rows of G per slab
layout(constant_id = 6) const uint COMPENSATED = 1u; // 1: acc as a TwoSum pair; 0: plain sums
layout(constant_id = 7) const uint DIM = 1u;       // D (the running sum's length)
layout(constant_id = 8) const uint JUDGE = 1u;     // 1: settle uncertain picks with fresh keys
layout(constant_id = 9) const uint LOADS = 1u;     // register path: row loads issued per group
layout(constant_id = 10) const uint ROUND = 64u;   // candidates scored per round of fresh keys
layout(constant_id = 11) const uint BAND = 64u;    // the widest band re-scored (0: always refresh)
layout(constant_id = 12) const uint REFRESH = 0u;  // recompute every key after this many steps (0: never)
layout(constant_id = 13) const uint KMAX_C = 1u;   // plain sums: max |key| bounded through |c| (below)
layout(constant_id = 14) const float A_SCALE = 1.0; // 1; 0 only to time the judge without events
// Timing only (never exact, a benchmark knob): bit 1 leaves uncertain steps unsettled (the band
// and refresh code compiled out), bit 2 drops the second best (as without the judge), bit 4 the
// running sum's update. 0 in every real run.
layout(constant_id = 15) const uint DIAG = 0u;

#include "table.glsl"
layout(std430, set = 0, binding = 2) readonly buffer Starts { uint starts[]; };
// Per sequence (stride 2N + 3D + 16): hi[0..N), lo[0..N), c_hi[0..D), c_lo[0..D), r[0..D), then
// the judge's scalars (JS_*). StateC is the same buffer, coherent: a full refresh passes keys
// between invocations through it (the per-step path keeps plain accesses).
layout(std430, set = 0, binding = 3) buffer State { float state[]; };
layout(std430, set = 0, binding = 3) coherent buffer StateC { float state_c[]; };
layout(std430, set = 0, binding = 5) buffer Seqs { uint seqs[]; };
layout(std430, set = 0, binding = 8) readonly buffer GSlab { float g[]; } G[8];

layout(push_constant) uniform Push {
    uint n;      // N
    uint first;  // first step of this dispatch (1 = the batch's first chunk: state starts at 0)
    uint count;  // steps in this dispatch
    uint replay; // 1: take each step's pick from `seqs` (rebuilding state for a resume)
} pc;

const uint NO_INDEX = 0xffffffffu;
const float INF = 1.0 / 0.0;
const uint WG = gl_WorkGroupSize.x;
const float U = 5.9604645e-8; // 2⁻²⁴

// The judge's scalars after the vectors: S, L (or plain sums' Σ), E0, full refreshes, the last
// step's max |key|, band re-scores, the largest E_F seen (a report).
const uint JS_S = 0u, JS_L = 1u, JS_E0 = 2u, JS_FULL = 3u, JS_KMAX = 4u, JS_BANDS = 5u,
           JS_EF = 6u, JS_AGE = 7u, JS_C2 = 8u, JS_KB = 9u;
// Plain sums with KMAX_C: the largest |key| is bounded by |c| + A instead of taken over the keys
// each step, so a step finds only the best two keys (see "max |key| through |c|" below).
#define TRACK_MAX (JUDGE != 0u && (KMAX_C == 0u || COMPENSATED != 0u))
#define BOUND_BY_C (JUDGE != 0u && KMAX_C != 0u && COMPENSATED == 0u)
#define DIAG_NO_SETTLE ((DIAG & 1u) != 0u)
#define DIAG_NO_TOP2 ((DIAG & 2u) != 0u)
#define DIAG_NO_CSUM ((DIAG & 4u) != 0u)

#include "key_order.glsl"
#include "gram_rows.glsl"

// Entry j of row prev of G.
float grow(uint prev, uint j) {
    uint slab = prev / SLAB_ROWS;
    return G[slab].g[(prev - slab * SLAB_ROWS) * gram_row_stride(pc.n) + j];
}

// Two halves of slots for the subgroups' results (alternate steps): WG each without the judge
// (as before it existed), WG / 2 each with it (shared memory is needed for its rounds).
const uint HALF = JUDGE != 0u ? WG / 2u : WG;
shared float red_key[2u * HALF];
shared uint red_idx[2u * HALF];
// Without the judge these two are unused but keep the size they had: the driver sizes the SM's
// shared-memory carve-out (and so L1, where spilled registers live) from the declared total, and
// on an H200 at N = 31,102 with compensated sums the smaller total ran 2.4× slower
// (BENCHMARKS.md, 2026-11-30).
shared float red_k2[JUDGE != 0u ? WG : 2u * WG];
shared float red_max[JUDGE != 0u ? WG : 2u * WG];
shared float red_lmax[JUDGE != 0u ? WG : 1u];
shared float c_hi[JUDGE != 0u ? DIM : 1u];
shared float c_lo[JUDGE != 0u ? DIM : 1u];
shared float c_r[JUDGE != 0u ? DIM : 1u];
const uint CHAINS = 32u;
shared uint band_count;
shared uint cand[JUDGE != 0u ? (BAND > ROUND ? BAND : ROUND) : 1u];
shared float part_hi[JUDGE != 0u ? ROUND * CHAINS : 1u];
shared float part_lo[JUDGE != 0u ? ROUND * CHAINS : 1u];
shared float norm_ef;
shared float norm_c2;

// The workgroup's result of a step: the best (key, index), the second best key, the largest
// |key| and |lo|; every invocation gets it.
struct Pick {
    float key;
    uint idx;
    float second;
    float kmax;
    float lmax;
};

// Workgroup top-2 of (key, index), max |key| and max |lo|. `t` alternates halves of the shared
// buffers so one barrier per step suffices on the subgroup path. Each lane offers its best
// (bk, bi), its second best key b2, its max |key| km and max |lo| lm.
Pick workgroup_pick(float bk, uint bi, float b2, float km, float lm, uint t) {
    const uint lid = gl_LocalInvocationID.x;
    Pick r;
    if (SUBGROUPS != 0u && JUDGE == 0u) {
        // The best only (the engine before the judge, operation for operation).
        float m = subgroupMin(bk);
        uint mi = subgroupMin(bk == m ? bi : NO_INDEX);
        uint b = (t & 1u) * HALF;
        if (subgroupElect()) {
            red_key[b + gl_SubgroupID] = m;
            red_idx[b + gl_SubgroupID] = mi;
        }
        barrier();
        float wk = INF;
        uint wi = NO_INDEX;
        for (uint q = gl_SubgroupInvocationID; q < gl_NumSubgroups; q += gl_SubgroupSize) {
            if (less(red_key[b + q], red_idx[b + q], wk, wi)) {
                wk = red_key[b + q];
                wi = red_idx[b + q];
            }
        }
        r.key = subgroupMin(wk);
        r.idx = subgroupMin(wk == r.key ? wi : NO_INDEX);
        r.second = INF;
        r.kmax = 0.0;
        r.lmax = 0.0;
        return r;
    }
    if (SUBGROUPS != 0u) {
        float m = subgroupMin(bk);
        uint mi = subgroupMin(bk == m ? bi : NO_INDEX);
        // The second best of the subgroup: the winner lane's own second, or any other lane's best.
        float s2 = subgroupMin((bk == m && bi == mi) ? b2 : bk);
        float mx = TRACK_MAX ? subgroupMax(km) : 0.0;
        float ml = TRACK_MAX ? subgroupMax(lm) : 0.0;
        uint b = (t & 1u) * HALF;
        if (subgroupElect()) {
            red_key[b + gl_SubgroupID] = m;
            red_idx[b + gl_SubgroupID] = mi;
            red_k2[b + gl_SubgroupID] = s2;
            if (TRACK_MAX) {
                red_max[b + gl_SubgroupID] = mx;
                red_lmax[b + gl_SubgroupID] = ml;
            }
        }
        barrier();
        float wk = INF, w2 = INF, wm = 0.0, wl = 0.0;
        uint wi = NO_INDEX;
        for (uint q = gl_SubgroupInvocationID; q < gl_NumSubgroups; q += gl_SubgroupSize) {
            float k = red_key[b + q], k2 = red_k2[b + q];
            uint i = red_idx[b + q];
            if (TRACK_MAX) {
                wm = max(wm, red_max[b + q]);
                wl = max(wl, red_lmax[b + q]);
            }
            if (less(k, i, wk, wi)) {
                w2 = min(wk, k2);
                wk = k;
                wi = i;
            } else {
                w2 = min(w2, k);
            }
        }
        // Across the lanes that read the subgroup results: the same top-2 rule.
        r.key = subgroupMin(wk);
        r.idx = subgroupMin(wk == r.key ? wi : NO_INDEX);
        r.second = subgroupMin((wk == r.key && wi == r.idx) ? w2 : wk);
        r.kmax = TRACK_MAX ? subgroupMax(wm) : 0.0;
        r.lmax = TRACK_MAX ? subgroupMax(wl) : 0.0;
        return r;
    }
    red_key[lid] = bk;
    red_idx[lid] = bi;
    if (JUDGE != 0u) {
        red_k2[lid] = b2;
        red_max[lid] = km;
        red_lmax[lid] = lm;
    }
    barrier();
    for (uint stride = WG >> 1u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            float ak = red_key[lid], bk2 = red_key[lid + stride];
            uint ai = red_idx[lid], bi2 = red_idx[lid + stride];
            if (JUDGE != 0u) {
                float a2 = red_k2[lid], b22 = red_k2[lid + stride];
                red_k2[lid] = less(bk2, bi2, ak, ai) ? min(b22, ak) : min(a2, bk2);
                red_max[lid] = max(red_max[lid], red_max[lid + stride]);
                red_lmax[lid] = max(red_lmax[lid], red_lmax[lid + stride]);
            }
            if (less(bk2, bi2, ak, ai)) {
                red_key[lid] = bk2;
                red_idx[lid] = bi2;
            }
        }
        barrier();
    }
    r.key = red_key[0];
    r.idx = red_idx[0];
    r.second = JUDGE != 0u ? red_k2[0] : INF;
    r.kmax = JUDGE != 0u ? red_max[0] : 0.0;
    r.lmax = JUDGE != 0u ? red_lmax[0] : 0.0;
    barrier();
    return r;
}

// acc += g as a compensated pair (or a plain sum, lo staying 0); returns the key hi + lo.
float add_pair(inout float hi, inout float lo, float g) {
    if (COMPENSATED == 0u) {
        precise float plain = hi + g;
        hi = plain;
        return plain;
    }
    precise float s = hi + g;
    precise float bp = s - hi;
    precise float err = (hi - (s - bp)) + (g - bp);
    precise float l = lo + err;
    hi = s;
    lo = l;
    precise float v = s + l;
    return v;
}

// Track a lane's best, second best, largest |key| and largest |lo|.
// Without the judge only the best is tracked (no second key, no max: the step stays as cheap
// as before the judge existed).
void offer(float v, float l, uint j, inout float bk, inout uint bi, inout float b2,
           inout float km, inout float lm) {
    if (JUDGE == 0u) {
        if (v < bk) {
            bk = v;
            bi = j;
        }
        return;
    }
    if (TRACK_MAX) {
        km = max(km, abs(v));
        lm = max(lm, abs(l));
    }
    if (v < bk || (v == bk && j < bi)) {
        b2 = bk;
        bk = v;
        bi = j;
    } else {
        b2 = min(b2, v);
    }
}

// offer() for a lane's candidates in increasing index order (every caller but the band's), with
// the judge without branches: an equal key never displaces the best there (its index is larger),
// so the tie test drops out, and a candidate that is not live offers +inf. The same results as
// `if (live) offer(…)`, in fewer instructions a candidate.
void offer_in_order(bool live, float v, float l, uint j, inout float bk, inout uint bi,
                    inout float b2, inout float km, inout float lm) {
    if (JUDGE == 0u) {
        if (live) offer(v, l, j, bk, bi, b2, km, lm);
        return;
    }
    if (DIAG_NO_TOP2) {
        if (live && v < bk) {
            bk = v;
            bi = j;
        }
        return;
    }
    if (TRACK_MAX) {
        km = max(km, live ? abs(v) : 0.0);
        lm = max(lm, live ? abs(l) : 0.0);
    }
    const float x = live ? v : INF;
    const bool better = x < bk;
    b2 = better ? bk : min(b2, x);
    bi = better ? j : bi;
    bk = better ? x : bk;
}

// Chain q of candidate x's fresh key: over d ≡ q (mod 32) ascending, TwoProduct c_hi·e = p + pe,
// TwoSum h + p = sh + se, and c_lo·e joins the low part. (h, l).
vec2 chain(uint x, uint q) {
    precise float h = 0.0;
    precise float l = 0.0;
    const uint eb = x * DIM;
    for (uint k = 0u; k < (DIM + CHAINS - 1u) / CHAINS; ++k) {
        const uint d = q + k * CHAINS;
        if (d >= DIM) break;
        const float e = float(table[eb + d]);
        precise float p = c_hi[d] * e;
        precise float pe = fma(c_hi[d], e, -p);
        precise float sh = h + p;
        precise float bp = sh - h;
        precise float se = (h - (sh - bp)) + (p - bp);
        precise float nl = fma(c_lo[d], e, l + (pe + se));
        h = sh;
        l = nl;
    }
    return vec2(h, l);
}

// Fresh keys F of the `count` (≤ ROUND) candidates cand[first..first + count) (NO_INDEX:
// skipped), left in part_hi[k·32] (hi + lo, scaled) for candidate first + k; every invocation
// calls it (barriers inside). Slot s = k·32 + q: candidate k, chain q over d ≡ q (mod 32), so 32
// lanes read 32 consecutive values of a row.
void fresh_keys(uint first, uint count) {
    const uint lid = gl_LocalInvocationID.x;
    for (uint s = lid; s < count * CHAINS; s += WG) {
        const uint x = cand[first + s / CHAINS];
        if (x == NO_INDEX) continue;
        const vec2 hl = chain(x, s % CHAINS);
        part_hi[s] = hl.x;
        part_lo[s] = hl.y;
    }
    barrier();
    // The fixed tree: chain q += chain q + w for w = 16, 8, 4, 2, 1 (TwoSum of the highs).
    for (uint w = CHAINS / 2u; w > 0u; w >>= 1u) {
        for (uint s = lid; s < count * CHAINS; s += WG) {
            const uint q = s % CHAINS;
            if (q < w && cand[first + s / CHAINS] != NO_INDEX) {
                precise float a = part_hi[s];
                precise float b = part_hi[s + w];
                precise float sh = a + b;
                precise float bp = sh - a;
                precise float se = (a - (sh - bp)) + (b - bp);
                precise float nl = (part_lo[s] + part_lo[s + w]) + se;
                part_hi[s] = sh;
                part_lo[s] = nl;
            }
        }
        barrier();
    }
    for (uint k = lid; k < count; k += WG) {
        const uint x = cand[first + k];
        if (x == NO_INDEX) continue;
        precise float v = part_hi[k * CHAINS] + part_lo[k * CHAINS];
        precise float key = v * inv_norm[x];
        part_hi[k * CHAINS] = key;
    }
    barrier();
}

// E_F (see the top) from c, taken serially by invocation 0 (same bits for every workgroup size);
// every invocation gets it.
float fresh_error() {
    if (gl_LocalInvocationID.x == 0u) {
        float n2 = 0.0, r2 = 0.0, l2 = 0.0;
        for (uint d = 0u; d < DIM; ++d) {
            precise float c = c_hi[d] + c_lo[d];
            n2 = fma(c, c, n2);
            r2 = fma(c_r[d], c_r[d], r2);
            l2 = fma(c_lo[d], c_lo[d], l2);
        }
        // Sums of D squares in float32 are within (D + 1)·u of exact: 1.01 covers D ≤ 10⁵.
        const float du = float(DIM) * U;
        norm_ef = 1.01 * ((3.01 * U + 2.0 * du * du) * sqrt(1.01 * n2)
                          + 1.01 * U * sqrt(1.01 * r2) + du * sqrt(1.01 * l2));
        // |c| ≤ |c̃| + u·|r| (KMAX_C's bound restarts from it).
        const float cn = 1.01 * (sqrt(1.01 * n2) + 1.01 * U * sqrt(1.01 * r2));
        norm_c2 = cn * cn;
    }
    barrier();
    const float ef = norm_ef;
    barrier();
    return ef;
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x;
    const uint n = pc.n;
    const uint stride = 2u * n + 3u * DIM + 16u;
    const uint base = s * stride;
    const uint cbase = base + 2u * n;
    const uint jbase = cbase + 3u * DIM;
    const uint out_row = s * SEQ_LEN;
    const bool fresh = pc.first == 1u;
    uint prev = fresh ? starts[s] : seqs[out_row + pc.first - 1u];
    if (fresh && lid == 0u && pc.replay == 0u) seqs[out_row] = prev;

    float hi[RPER], lo[RPER];
    if (IN_REGS != 0u) {
        for (uint r = 0u; r < RPER; ++r) {
            uint j = lid + r * WG;
            bool ok = j < n;
            hi[r] = !ok ? INF : (fresh ? 0.0 : state[base + j]);
            // Plain sums never touch lo: a constant 0 the compiler drops (no registers).
            lo[r] = (COMPENSATED != 0u && ok && !fresh) ? state[base + n + j] : 0.0;
        }
    } else if (fresh) {
        for (uint j = lid; j < n; j += WG) {
            state[base + j] = 0.0;
            state[base + n + j] = 0.0;
        }
    }
    // The judge's running sum (c = e_start at the start; each invocation owns the dimensions
    // lid + k·WG) and bound terms (see the top).
    float jS = 0.0, jL = 0.0, jE0 = 0.0, fulls = 0.0, bands = 0.0, efmax = 0.0, age = 0.0;
    if (JUDGE != 0u) {
        for (uint d = lid; d < DIM; d += WG) {
            c_hi[d] = fresh ? float(table[prev * DIM + d]) : state[cbase + d];
            c_lo[d] = fresh ? 0.0 : state[cbase + DIM + d];
            c_r[d] = fresh ? 0.0 : state[cbase + 2u * DIM + d];
        }
        if (!fresh) {
            jS = state[jbase + JS_S];
            jL = state[jbase + JS_L];
            jE0 = state[jbase + JS_E0];
            fulls = state[jbase + JS_FULL];
            bands = state[jbase + JS_BANDS];
            efmax = state[jbase + JS_EF];
            age = state[jbase + JS_AGE];
        }
        barrier();
    }
    // The largest |key| after the last step (plain sums' bound).
    float kmax = (JUDGE != 0u && !fresh) ? state[jbase + JS_KMAX] : 0.0;
    // KMAX_C: an upper bound on |c|² for the sum the keys stand for, and one on the exact key
    // of the last pick (|c + e_p|² = |c|² + 2·|e_p|·K_p + |e_p|²).
    float c2 = (BOUND_BY_C && !fresh) ? state[jbase + JS_C2] : 0.0;
    float kb = (BOUND_BY_C && !fresh) ? state[jbase + JS_KB] : 0.0;

    for (uint t = pc.first; t < pc.first + pc.count; ++t) {
        float bk = INF, b2 = INF, km = 0.0, lm = 0.0;
        uint bi = NO_INDEX;
        // |e_prev| for the judge's bound, loaded before the Gram row so its latency hides
        // behind the row's instead of following the pick.
        const float ep_inv = JUDGE != 0u ? inv_norm[prev] : 0.0;
        // Row loads are issued LOADS at a time before any is used (no branch between them), so
        // their latencies overlap without holding a register per item; then a branch-free
        // update: a chosen item (hi = +inf) and the item just picked keep (or take) hi = +inf
        // and are no candidates. The order of operations per item is the same for every LOADS.
        if (IN_REGS != 0u) {
            for (uint r0 = 0u; r0 < RPER; r0 += LOADS) {
                float g[LOADS];
                for (uint q = 0u; q < LOADS; ++q) {
                    if (r0 + q < RPER) g[q] = grow(prev, min(lid + (r0 + q) * WG, n - 1u));
                }
                for (uint q = 0u; q < LOADS; ++q) {
                    const uint r = r0 + q;
                    if (r >= RPER) break;
                    uint j = lid + r * WG;
                    bool live = hi[r] != INF && j != prev;
                    float h = hi[r], l = lo[r];
                    float v = add_pair(h, l, g[q]);
                    hi[r] = live ? h : INF;
                    lo[r] = live ? l : lo[r];
                    offer_in_order(live, v, l, j, bk, bi, b2, km, lm);
                }
            }
        } else {
            for (uint j0 = lid; j0 < n; j0 += 4u * WG) {
                float g[4], h[4], l[4];
                for (uint q = 0u; q < 4u; ++q) {
                    uint j = min(j0 + q * WG, n - 1u);
                    g[q] = grow(prev, j);
                    h[q] = state[base + j];
                    l[q] = COMPENSATED != 0u ? state[base + n + j] : 0.0;
                }
                for (uint q = 0u; q < 4u; ++q) {
                    uint j = j0 + q * WG;
                    if (j >= n || h[q] == INF) continue;
                    if (j == prev) {
                        state[base + j] = INF;
                        continue;
                    }
                    float v = add_pair(h[q], l[q], g[q]);
                    state[base + j] = h[q];
                    if (COMPENSATED != 0u) state[base + n + j] = l[q];
                    offer_in_order(true, v, l[q], j, bk, bi, b2, km, lm);
                }
            }
        }
        Pick w = workgroup_pick(bk, bi, b2, km, lm, t);
        if (JUDGE != 0u) {
            // The bound of every key against the exact one (see the top).
            const float ep = ep_inv > 0.0 ? 1.0 / ep_inv : 0.0;
            if (BOUND_BY_C) {
                // The keys now stand for c + e_prev: |c + e_prev|² ≤ c2 + 2·|e|·kb + |e|², with
                // |e| within (1 ± 8u)·ep and the sums' roundings (16u of the magnitudes) added.
                const float eh = ep * (1.0 + 8.0 * U), el = ep * (1.0 - 8.0 * U);
                const float tt = eh * eh + 2.0 * kb * (kb >= 0.0 ? eh : el);
                c2 = max(0.0, c2 + tt + 16.0 * U * (c2 + abs(tt)));
            }
            jS += ep;
            jL += COMPENSATED != 0u ? w.lmax : kmax + ep;
            const float du = float(DIM) * U;
            const float a = A_SCALE * (jE0 + (2.01 * U + du * du) * jS
                                       + U * (COMPENSATED != 0u ? jL + w.kmax : jL));
            // max |key| ≤ |c| + A (every exact key is at most |c| in magnitude).
            kmax = TRACK_MAX ? w.kmax : sqrt(c2) * (1.0 + 1.0 / 1024.0) + a;
            // The exact key of this step's pick is at most its key + A (replaced below where
            // the pick comes from fresh keys).
            kb = w.key + a;
            age += 1.0;
            const bool due = REFRESH != 0u && age >= float(REFRESH);
            if (!DIAG_NO_SETTLE && (due || w.second - w.key <= 2.0 * a)) {
                // Uncertain: gather the band of live keys within 2A of the best (a refresh that
                // is due skips the band).
                const float tau = due ? -INF : w.key + 2.0 * a;
                if (lid == 0u) band_count = due ? BAND + 1u : 0u;
                barrier();
                if (IN_REGS != 0u) {
                    // One atomic a lane for its whole share of the band.
                    uint mine = 0u;
                    for (uint r = 0u; r < RPER; ++r) {
                        uint j = lid + r * WG;
                        precise float v = hi[r] + lo[r];
                        if (j < n && hi[r] != INF && v <= tau) mine += 1u;
                    }
                    uint slot = mine > 0u ? atomicAdd(band_count, mine) : 0u;
                    for (uint r = 0u; r < RPER && mine > 0u; ++r) {
                        uint j = lid + r * WG;
                        precise float v = hi[r] + lo[r];
                        if (j < n && hi[r] != INF && v <= tau) {
                            if (slot < BAND) cand[slot] = j;
                            slot += 1u;
                        }
                    }
                } else {
                    for (uint j = lid; j < n; j += WG) {
                        const float h = state[base + j];
                        precise float v = h + (COMPENSATED != 0u ? state[base + n + j] : 0.0);
                        if (h != INF && v <= tau) {
                            uint slot = atomicAdd(band_count, 1u);
                            if (slot < BAND) cand[slot] = j;
                        }
                    }
                }
                barrier();
                const uint band = band_count;
                if (band <= BAND) {
                    // The band's order in cand[] varies; the (key, index) pick does not.
                    float fk = INF, f2 = INF, fm = 0.0, fl = 0.0;
                    uint fi = NO_INDEX;
                    for (uint k0 = 0u; k0 < band; k0 += ROUND) {
                        const uint cnt = min(ROUND, band - k0);
                        fresh_keys(k0, cnt);
                        for (uint k = lid; k < cnt; k += WG) {
                            offer(part_hi[k * CHAINS], 0.0, cand[k0 + k], fk, fi, f2, fm, fl);
                        }
                        barrier();
                    }
                    Pick f = workgroup_pick(fk, fi, f2, fm, fl, t + 1u);
                    // The next step's pick writes these buffers' other half: wait for every
                    // reader of this one.
                    barrier();
                    // The pick's running key is within 2A of the best: its exact key ≤ best + 3A.
                    kb = w.key + 3.0 * a;
                    w.key = f.key;
                    w.idx = f.idx;
                    bands += 1.0;
                } else {
                    // Every live key becomes F: the keys pass through the state buffer, rounds
                    // of ROUND candidates in index order, then back into registers.
                    if (IN_REGS != 0u) {
                        for (uint r = 0u; r < RPER; ++r) {
                            uint j = lid + r * WG;
                            if (j < n) state_c[base + j] = hi[r];
                        }
                    }
                    memoryBarrierBuffer();
                    barrier();
                    for (uint x0 = 0u; x0 < n; x0 += ROUND) {
                        const uint cnt = min(ROUND, n - x0);
                        for (uint k = lid; k < cnt; k += WG) {
                            cand[k] = state_c[base + x0 + k] != INF ? x0 + k : NO_INDEX;
                        }
                        barrier();
                        fresh_keys(0u, cnt);
                        for (uint k = lid; k < cnt; k += WG) {
                            if (cand[k] != NO_INDEX) {
                                state_c[base + x0 + k] = part_hi[k * CHAINS];
                                state_c[base + n + x0 + k] = 0.0;
                            }
                        }
                        barrier();
                    }
                    memoryBarrierBuffer();
                    barrier();
                    bk = INF; b2 = INF; km = 0.0; lm = 0.0; bi = NO_INDEX;
                    if (IN_REGS != 0u) {
                        for (uint r = 0u; r < RPER; ++r) {
                            uint j = lid + r * WG;
                            if (j < n) {
                                hi[r] = state_c[base + j];
                                lo[r] = 0.0;
                                offer_in_order(hi[r] != INF, hi[r], 0.0, j, bk, bi, b2, km, lm);
                            }
                        }
                    } else {
                        for (uint j = lid; j < n; j += WG) {
                            const float h = state_c[base + j];
                            offer_in_order(h != INF, h, 0.0, j, bk, bi, b2, km, lm);
                        }
                    }
                    w = workgroup_pick(bk, bi, b2, km, lm, t + 1u);
                    jE0 = fresh_error();
                    efmax = max(efmax, jE0);
                    if (TRACK_MAX) {
                        kmax = w.kmax;
                    } else {
                        c2 = norm_c2;
                        kmax = sqrt(c2) * (1.0 + 1.0 / 1024.0) + jE0;
                        kb = w.key + jE0;
                    }
                    jS = 0.0;
                    jL = 0.0;
                    age = 0.0;
                    fulls += 1.0;
                }
            }
        }
        uint p;
        if (pc.replay != 0u) {
            p = seqs[out_row + t];
        } else {
            p = w.idx;
            if (lid == 0u) seqs[out_row + t] = p;
        }
        if (JUDGE != 0u && !DIAG_NO_CSUM) {
            // c += e_p, compensated (TwoSum per dimension, by the invocation that owns it; the
            // next reader of c comes after the next step's barrier), and r += |c_lo|.
            for (uint d = lid; d < DIM; d += WG) {
                const float e = float(table[p * DIM + d]);
                precise float sum = c_hi[d] + e;
                precise float bp = sum - c_hi[d];
                precise float err = (c_hi[d] - (sum - bp)) + (e - bp);
                precise float l = c_lo[d] + err;
                c_hi[d] = sum;
                c_lo[d] = l;
                c_r[d] += abs(l);
            }
        }
        prev = p;
    }

    if (IN_REGS != 0u) {
        for (uint r = 0u; r < RPER; ++r) {
            uint j = lid + r * WG;
            if (j < n) {
                state[base + j] = hi[r];
                if (COMPENSATED != 0u) state[base + n + j] = lo[r];
            }
        }
    }
    if (JUDGE != 0u) {
        for (uint d = lid; d < DIM; d += WG) {
            state[cbase + d] = c_hi[d];
            state[cbase + DIM + d] = c_lo[d];
            state[cbase + 2u * DIM + d] = c_r[d];
        }
        if (lid == 0u) {
            state[jbase + JS_S] = jS;
            state[jbase + JS_L] = jL;
            state[jbase + JS_E0] = jE0;
            state[jbase + JS_FULL] = fulls;
            state[jbase + JS_KMAX] = kmax;
            state[jbase + JS_BANDS] = bands;
            state[jbase + JS_EF] = efmax;
            state[jbase + JS_AGE] = age;
            state[jbase + JS_C2] = c2;
            state[jbase + JS_KB] = kb;
        }
    }
}
