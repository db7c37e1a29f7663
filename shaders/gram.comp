#version 450
// The gram engine (SPEC §Modes, gram): one workgroup advances one sequence of the batch through
// `count` steps. key[x] = c · e_x / |e_x| is kept per candidate as a compensated pair (hi, lo)
// and grows by row G[prev] of G = E Eᵀ diag(1/|e|) each step, so a step is O(N), not O(N · D):
//
//   for every candidate x of this lane:  key[x] += G[prev][x]  (Knuth TwoSum into hi, lo)
//   pick = argmin (hi + lo) over unchosen x, lowest index on ties
//
// Minimising the key maximises d(x) = 1 - cos(c, e_x) (|c| > 0 scales every key alike); a zero
// row has key 0 (d = 1); a zero centroid has every acc exactly 0, so the lowest index wins.
// The row of the last pick is added at the start of the next step (or chunk), so the state
// between chunks is just (hi, lo) and the last pick. A chosen candidate's hi is +inf.
//
// State lives in registers as a lane-stride array (item lid + r·WG in register r), loaded at the
// start of a dispatch and stored at its end (IN_REGS = 1), or in device memory, read and written
// every step (IN_REGS = 0). Both run the same float operations per candidate in the same order,
// and the (key, index) order is total, so every path, workgroup size, chunk and batch gives the
// same bits (SPEC §Exactness 1).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint RPER = 1u;      // registers of state per lane (1 when IN_REGS = 0)
layout(constant_id = 2) const uint IN_REGS = 1u;   // 1: state in registers, 0: in device memory
layout(constant_id = 3) const uint SUBGROUPS = 1u; // 1: subgroup min; 0: shared-memory tree only
layout(constant_id = 4) const uint SEQ_LEN = 1u;   // row stride of `seqs`: steps + 1
layout(constant_id = 5) const uint SLAB_ROWS = 1u; // rows of G per slab
layout(constant_id = 6) const uint COMPENSATED = 1u; // 1: acc as a TwoSum pair; 0: plain sums

layout(std430, set = 0, binding = 2) readonly buffer Starts { uint starts[]; };
// Per sequence: hi[0..N) then lo[0..N).
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

#include "key_order.glsl"

float grow(uint prev, uint j) {
    uint slab = prev / SLAB_ROWS;
    return G[slab].g[(prev - slab * SLAB_ROWS) * pc.n + j];
}

shared float red_key[2 * WG];
shared uint red_idx[2 * WG];

// Workgroup argmin of (key, index); every invocation returns the winner. `t` alternates the
// shared buffers so one barrier per step suffices on the subgroup path.
uint workgroup_pick(float key, uint idx, uint t) {
    const uint lid = gl_LocalInvocationID.x;
    if (SUBGROUPS != 0u) {
        float m = subgroupMin(key);
        uint mi = subgroupMin(key == m ? idx : NO_INDEX);
        uint b = (t & 1u) * WG;
        if (subgroupElect()) {
            red_key[b + gl_SubgroupID] = m;
            red_idx[b + gl_SubgroupID] = mi;
        }
        barrier();
        float bk = INF;
        uint bi = NO_INDEX;
        for (uint q = gl_SubgroupInvocationID; q < gl_NumSubgroups; q += gl_SubgroupSize) {
            if (less(red_key[b + q], red_idx[b + q], bk, bi)) {
                bk = red_key[b + q];
                bi = red_idx[b + q];
            }
        }
        float m2 = subgroupMin(bk);
        return subgroupMin(bk == m2 ? bi : NO_INDEX);
    }
    red_key[lid] = key;
    red_idx[lid] = idx;
    barrier();
    for (uint stride = WG >> 1u; stride > 0u; stride >>= 1u) {
        if (lid < stride && less(red_key[lid + stride], red_idx[lid + stride], red_key[lid], red_idx[lid])) {
            red_key[lid] = red_key[lid + stride];
            red_idx[lid] = red_idx[lid + stride];
        }
        barrier();
    }
    uint p = red_idx[0];
    barrier();
    return p;
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

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x;
    const uint n = pc.n;
    const uint base = s * 2u * n;
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

    for (uint t = pc.first; t < pc.first + pc.count; ++t) {
        float bk = INF;
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
                if (live && v < bk) { bk = v; bi = j; }
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
                    if (v < bk) { bk = v; bi = j; }
                }
            }
        }
        uint p;
        if (pc.replay != 0u) {
            p = seqs[out_row + t];
        } else {
            p = workgroup_pick(bk, bi, t);
            if (lid == 0u) seqs[out_row + t] = p;
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
}
