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
// The judge (JUDGE = 1): a key that sums t rows of G carries t roundings of G entries, so its
// error grows with the sequence while |c| need not (centred data). Each G entry is within
// (2.01·u + (D·u)²)·|e_p| of exact (u = 2⁻²⁴; gram_matrix.comp's compensated dot), and
// a compensated sum of r terms adds at most (r·u)²·Σ|terms| (Ogita, Rump and Oishi), plain
// sums u·max|key| a step. So since the last refresh every key is within
//   A = (2.01·u + (D·u)² + (r·u)²)·S  (+ u·Σ_steps max|key| for plain sums),  S = Σ |e_p| of the r rows
// added, of the key a fresh dot with the compensated c gives. Each step finds the best key and
// the second best; when they are within 2A the order of the two is not certain: the band of keys
// within 2A of the best is re-scored from c (two fp32 fused multiply-add chains over d, c's high
// and low parts, then · 1/|e_x|: the scan engine's arithmetic) and the pick made from it — no
// key outside the band can win — or, when the band holds more than BAND_MAX candidates, every
// key is recomputed that way and A = 0. A pick is thus always the pick of fresh keys, and the
// error no longer grows with N.
//
// State lives in registers as a lane-stride array (item lid + r·WG in register r), loaded at the
// start of a dispatch and stored at its end (IN_REGS = 1), or in device memory, read and written
// every step (IN_REGS = 0). Both run the same float operations per candidate in the same order,
// and the (key, index) order is total, so every path, workgroup size, chunk and batch gives the
// same bits (SPEC §Exactness 1), refreshes included (they depend only on keys and A).
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
layout(constant_id = 8) const uint JUDGE = 1u;     // 1: refresh the keys when the pick is uncertain

#include "table.glsl"
layout(std430, set = 0, binding = 2) readonly buffer Starts { uint starts[]; };
// Per sequence (stride 2N + 2D + 8): hi[0..N), lo[0..N), c_hi[0..D), c_lo[0..D), then the judge's
// S, r, Σ max|key|, the full-recompute count, the last max|key| and the band re-score count.
layout(std430, set = 0, binding = 3) buffer State { float state[]; };
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

#include "key_order.glsl"

float grow(uint prev, uint j) {
    uint slab = prev / SLAB_ROWS;
    return G[slab].g[(prev - slab * SLAB_ROWS) * pc.n + j];
}

shared float red_key[2 * WG];
shared uint red_idx[2 * WG];
shared float red_k2[2 * WG];
shared float red_max[2 * WG];
shared float c_hi[JUDGE != 0u ? DIM : 1u];
shared float c_lo[JUDGE != 0u ? DIM : 1u];
shared uint band_count;
// The widest band of candidates re-scored from c; wider ones recompute every key.
const uint BAND_MAX = 64u;

// The workgroup's result of a step: the best (key, index), the second best key, the largest
// |key|; every invocation gets it.
struct Pick {
    float key;
    uint idx;
    float second;
    float kmax;
};

// Workgroup top-2 of (key, index) and max |key|. `t` alternates the shared buffers so one barrier
// per step suffices on the subgroup path. Each lane offers its best (bk, bi), its second best
// key b2 and its max |key| km.
Pick workgroup_pick(float bk, uint bi, float b2, float km, uint t) {
    const uint lid = gl_LocalInvocationID.x;
    Pick r;
    if (SUBGROUPS != 0u && JUDGE == 0u) {
        // The best only (the engine before the judge, operation for operation).
        float m = subgroupMin(bk);
        uint mi = subgroupMin(bk == m ? bi : NO_INDEX);
        uint b = (t & 1u) * WG;
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
        return r;
    }
    if (SUBGROUPS != 0u) {
        float m = subgroupMin(bk);
        uint mi = subgroupMin(bk == m ? bi : NO_INDEX);
        // The second best of the subgroup: the winner lane's own second, or any other lane's best.
        float s2 = subgroupMin((bk == m && bi == mi) ? b2 : bk);
        float mx = subgroupMax(km);
        uint b = (t & 1u) * WG;
        if (subgroupElect()) {
            red_key[b + gl_SubgroupID] = m;
            red_idx[b + gl_SubgroupID] = mi;
            red_k2[b + gl_SubgroupID] = s2;
            red_max[b + gl_SubgroupID] = mx;
        }
        barrier();
        float wk = INF, w2 = INF, wm = 0.0;
        uint wi = NO_INDEX;
        for (uint q = gl_SubgroupInvocationID; q < gl_NumSubgroups; q += gl_SubgroupSize) {
            float k = red_key[b + q], k2 = red_k2[b + q];
            uint i = red_idx[b + q];
            wm = max(wm, red_max[b + q]);
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
        r.kmax = subgroupMax(wm);
        return r;
    }
    red_key[lid] = bk;
    red_idx[lid] = bi;
    red_k2[lid] = b2;
    red_max[lid] = km;
    barrier();
    for (uint stride = WG >> 1u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            float ak = red_key[lid], bk2 = red_key[lid + stride];
            uint ai = red_idx[lid], bi2 = red_idx[lid + stride];
            float a2 = red_k2[lid], b22 = red_k2[lid + stride];
            if (less(bk2, bi2, ak, ai)) {
                red_key[lid] = bk2;
                red_idx[lid] = bi2;
                if (JUDGE != 0u) red_k2[lid] = min(b22, ak);
            } else if (JUDGE != 0u) {
                red_k2[lid] = min(a2, bk2);
            }
            if (JUDGE != 0u) red_max[lid] = max(red_max[lid], red_max[lid + stride]);
        }
        barrier();
    }
    r.key = red_key[0];
    r.idx = red_idx[0];
    r.second = red_k2[0];
    r.kmax = red_max[0];
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

// A fresh key of candidate x from the running sum: (c_hi · e_x + c_lo · e_x) / |e_x|, each dot
// one fused multiply-add chain over d in ascending order.
float fresh_key(uint x) {
    float a = 0.0, b = 0.0;
    const uint eb = x * DIM;
    for (uint d = 0u; d < DIM; ++d) {
        const float e = float(table[eb + d]);
        precise float na = fma(c_hi[d], e, a);
        precise float nb = fma(c_lo[d], e, b);
        a = na;
        b = nb;
    }
    precise float s = a + b;
    precise float k = s * inv_norm[x];
    return k;
}

// Track a lane's best, second best and largest |key|.
// Without the judge only the best is tracked (no second key, no max: the step stays as cheap
// as before the judge existed).
void offer(float v, uint j, inout float bk, inout uint bi, inout float b2, inout float km) {
    if (JUDGE == 0u) {
        if (v < bk) {
            bk = v;
            bi = j;
        }
        return;
    }
    km = max(km, abs(v));
    if (v < bk || (v == bk && j < bi)) {
        b2 = bk;
        bk = v;
        bi = j;
    } else {
        b2 = min(b2, v);
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x;
    const uint n = pc.n;
    const uint stride = 2u * n + 2u * DIM + 8u;
    const uint base = s * stride;
    const uint cbase = base + 2u * n;
    const uint jbase = cbase + 2u * DIM;
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
    // The judge's running sum (c = e_start at the start) and bound terms: S = Σ|e_p| and r rows
    // added since the last refresh, Σ over those steps of max|key| (plain sums).
    float jS = 0.0, jr = 0.0, jK = 0.0, refreshes = 0.0, bands = 0.0;
    if (JUDGE != 0u) {
        for (uint d = lid; d < DIM; d += WG) {
            c_hi[d] = fresh ? float(table[prev * DIM + d]) : state[cbase + d];
            c_lo[d] = fresh ? 0.0 : state[cbase + DIM + d];
        }
        if (!fresh) {
            jS = state[jbase];
            jr = state[jbase + 1u];
            jK = state[jbase + 2u];
            refreshes = state[jbase + 3u];
            bands = state[jbase + 5u];
        }
        barrier();
    }
    // The largest |key| after the last step (plain sums' bound).
    float kmax = (JUDGE != 0u && !fresh) ? state[jbase + 4u] : 0.0;

    for (uint t = pc.first; t < pc.first + pc.count; ++t) {
        float bk = INF, b2 = INF, km = 0.0;
        uint bi = NO_INDEX;
        // Every row load of the step is issued before any is used (no branch between them), so
        // their latencies overlap; then a branch-free update: a chosen item (hi = +inf) and the
        // item just picked keep (or take) hi = +inf and are no candidates.
        if (IN_REGS != 0u) {
            float g[RPER];
            for (uint r = 0u; r < RPER; ++r) g[r] = grow(prev, min(lid + r * WG, n - 1u));
            for (uint r = 0u; r < RPER; ++r) {
                uint j = lid + r * WG;
                bool live = hi[r] != INF && j != prev;
                float h = hi[r], l = lo[r];
                float v = add_pair(h, l, g[r]);
                hi[r] = live ? h : INF;
                lo[r] = live ? l : lo[r];
                if (live) offer(v, j, bk, bi, b2, km);
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
                    offer(v, j, bk, bi, b2, km);
                }
            }
        }
        Pick w = workgroup_pick(bk, bi, b2, km, t);
        if (JUDGE != 0u) {
            // The bound of every key against a fresh one (see the top): G entries, the sums.
            const float ep = inv_norm[prev] > 0.0 ? 1.0 / inv_norm[prev] : 0.0;
            jS += ep;
            jr += 1.0;
            if (COMPENSATED == 0u) jK += kmax + ep;
            const float du = float(DIM) * U;
            const float a = (2.01 * U + du * du + (jr * U) * (jr * U)) * jS + U * jK;
            kmax = w.kmax;
            bool full = false;
            if (w.second - w.key <= 2.0 * a) {
                // Uncertain. Only keys within 2A of the best can win under fresh keys (any other
                // is > best + 2A, so its fresh key > best + A ≥ the best's fresh key): re-score
                // that band from c and pick from it; a band wider than BAND_MAX recomputes every
                // key instead and resets A.
                const float tau = w.key + 2.0 * a;
                uint cnt = 0u;
                if (IN_REGS != 0u) {
                    for (uint r = 0u; r < RPER; ++r) {
                        uint j = lid + r * WG;
                        precise float v = hi[r] + lo[r];
                        if (j < n && hi[r] != INF && v <= tau) cnt += 1u;
                    }
                } else {
                    for (uint j = lid; j < n; j += WG) {
                        const float h = state[base + j];
                        precise float v = h + (COMPENSATED != 0u ? state[base + n + j] : 0.0);
                        if (h != INF && v <= tau) cnt += 1u;
                    }
                }
                if (lid == 0u) band_count = 0u;
                barrier();
                atomicAdd(band_count, cnt);
                barrier();
                const uint band = band_count;
                barrier();
                if (band <= BAND_MAX) {
                    float fk = INF, f2 = INF, fm = 0.0;
                    uint fi = NO_INDEX;
                    if (IN_REGS != 0u) {
                        for (uint r = 0u; r < RPER; ++r) {
                            uint j = lid + r * WG;
                            precise float v = hi[r] + lo[r];
                            if (j < n && hi[r] != INF && v <= tau) {
                                offer(fresh_key(j), j, fk, fi, f2, fm);
                            }
                        }
                    } else {
                        for (uint j = lid; j < n; j += WG) {
                            const float h = state[base + j];
                            precise float v = h + (COMPENSATED != 0u ? state[base + n + j] : 0.0);
                            if (h != INF && v <= tau) offer(fresh_key(j), j, fk, fi, f2, fm);
                        }
                    }
                    Pick f = workgroup_pick(fk, fi, f2, fm, t + 1u);
                    w.key = f.key;
                    w.idx = f.idx;
                    bands += 1.0;
                } else {
                    full = true;
                }
            }
            if (full) {
                // Recompute every live key from c, then pick again.
                bk = INF; b2 = INF; km = 0.0; bi = NO_INDEX;
                if (IN_REGS != 0u) {
                    for (uint r = 0u; r < RPER; ++r) {
                        uint j = lid + r * WG;
                        if (j < n && hi[r] != INF) {
                            float v = fresh_key(j);
                            hi[r] = v;
                            lo[r] = 0.0;
                            offer(v, j, bk, bi, b2, km);
                        }
                    }
                } else {
                    for (uint j = lid; j < n; j += WG) {
                        if (state[base + j] != INF) {
                            float v = fresh_key(j);
                            state[base + j] = v;
                            state[base + n + j] = 0.0;
                            offer(v, j, bk, bi, b2, km);
                        }
                    }
                }
                w = workgroup_pick(bk, bi, b2, km, t + 1u);
                kmax = w.kmax;
                jS = 0.0;
                jr = 0.0;
                jK = 0.0;
                refreshes += 1.0;
            }
        }
        uint p;
        if (pc.replay != 0u) {
            p = seqs[out_row + t];
        } else {
            p = w.idx;
            if (lid == 0u) seqs[out_row + t] = p;
        }
        if (JUDGE != 0u) {
            // c += e_p, compensated (TwoSum per dim); read by a refresh after its barrier.
            for (uint d = lid; d < DIM; d += WG) {
                const float e = float(table[p * DIM + d]);
                precise float sum = c_hi[d] + e;
                precise float bp = sum - c_hi[d];
                precise float err = (c_hi[d] - (sum - bp)) + (e - bp);
                precise float l = c_lo[d] + err;
                c_hi[d] = sum;
                c_lo[d] = l;
            }
            barrier();
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
        }
        if (lid == 0u) {
            state[jbase] = jS;
            state[jbase + 1u] = jr;
            state[jbase + 2u] = jK;
            state[jbase + 3u] = refreshes;
            state[jbase + 4u] = kmax;
            state[jbase + 5u] = bands;
        }
    }
}
