#version 450
// Exact k-NN, step 1: keys of a query tile against a range of table rows, written as (key, id)
// pairs into a scratch row (src/knn/). The key orders best first, ascending:
//   metric 0 (inner product): key = -(q · e)
//   metric 1 (cosine):        key = -(q̂ · e) / |e|   (q̂ normalised on the host; 0 for zero rows)
//   metric 2 (L2):            key = Σ (q - e)²       (squared distance, no cancellation)
// Each key is one fused multiply-add chain over d in ascending order from the stored (for fp16
// tables: widened) row. Entries [cols, pad_to) of the row range get the padding (+inf, NO_ID).
//
// Blocked product (the layout of the scan's 128 × 128 kernel, scan_gemm_big.glsl): workgroup
// (bx, by) computes rows [bx·128, +128) of the range × queries [by·128, +128) of the tile with
// 256 = 16 × 16 invocations of 8 × 8 pairs each. Invocation (tx, ty) owns queries ty·4 + {0..3}
// and 64 + ty·4 + {0..3}, rows tx·4 + {0..3} and 64 + tx·4 + {0..3}; per dim it reads two vec4
// of query values and two vec4 of row values from shared memory for 64 fused multiply-adds. D
// is staged BK = 8 dims at a time through double-buffered shared memory, the next stage
// prefetched into registers while the current one is computed. Full stages run an unrolled loop;
// the last, partial stage stops at the real dim (no padding enters a chain), so every key is
// the same chain, bit for bit, as knn_warp.comp's.
#extension GL_EXT_control_flow_attributes : require
#define KNN_INPUTS
#include "knn_common.glsl"

const uint BM = 128u;  // queries per workgroup
const uint BN = 128u;  // table rows per workgroup
const uint BK = 8u;    // dims per stage

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint dim;     // D
    uint q0;      // first query of this tile
    uint t0;      // first table row of this range
    uint cols;    // table rows in this range
    uint off;     // where the range starts in the scratch row
    uint pad_to;  // entries [cols, pad_to) after off get the padding
    uint stride;  // scratch row stride (entries)
    uint dst;     // 0: write A, 1: write B, 2: write A's keys only (the ids are implied)
    uint metric;  // 0 inner product, 1 cosine, 2 L2
    uint qn;      // queries in this tile
} pc;

shared vec4 As4[2u * BK * BM / 4u];  // [buffer][k][query / 4]
shared vec4 Bs4[2u * BK * BN / 4u];  // [buffer][k][row / 4]

float acc[64];

// One dim's 64 updates from shared memory buffer entry `at` (= buffer · BK + k).
void update(uint at, uint tx, uint ty, bool l2) {
    const vec4 a0 = As4[at * (BM / 4u) + ty];
    const vec4 a1 = As4[at * (BM / 4u) + 16u + ty];
    const vec4 b0 = Bs4[at * (BN / 4u) + tx];
    const vec4 b1 = Bs4[at * (BN / 4u) + 16u + tx];
    float a[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
    float b[8] = float[8](b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w);
    if (l2) {
        [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                precise float diff = a[i] - b[j];
                precise float v = fma(diff, diff, acc[i * 8u + j]);
                acc[i * 8u + j] = v;
            }
        }
    } else {
        [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                precise float v = fma(a[i], b[j], acc[i * 8u + j]);
                acc[i * 8u + j] = v;
            }
        }
    }
}

void store(uint q, uint c, float s) {
    if (q >= pc.qn || c >= pc.pad_to) return;
    float key = INF;
    uint id = NO_ID;
    if (c < pc.cols) {
        const uint row = pc.t0 + c;
        if (pc.metric == 2u) {
            key = s;
        } else {
            if (pc.metric == 1u) {
                precise float v = s * inv_norm[row];
                s = v;
            }
            key = -s;
        }
        id = row;
    }
    const uint at = q * pc.stride + pc.off + c;
    if (pc.dst == 2u) {
        keys_a[at] = key;
    } else if (pc.dst == 0u) {
        keys_a[at] = key;
        ids_a[at] = id;
    } else {
        keys_b[at] = key;
        ids_b[at] = id;
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % 16u, ty = lid / 16u;
    const uint c0 = gl_WorkGroupID.x * BN;  // first row (within the range) of this block
    const uint m0 = gl_WorkGroupID.y * BM;  // first query (within the tile) of this block
    const uint dim = pc.dim;
    const bool l2 = pc.metric == 2u;
    [[unroll]] for (uint i = 0u; i < 64u; ++i) acc[i] = 0.0;
    // Loader: query / row lr of the block, dims lk .. lk+3 of the stage (two invocations a row).
    const uint lr = lid / 2u, lk = (lid % 2u) * 4u;
    const bool q_ok = m0 + lr < pc.qn;
    const bool e_ok = c0 + lr < pc.cols;
    const uint qb = (pc.q0 + m0 + lr) * dim;
    const uint eb = (pc.t0 + c0 + lr) * dim;
    // A block wholly past the range's rows only writes padding (uniform in the workgroup, so the
    // barriers below are skipped by every invocation or none).
    const uint stages = c0 < pc.cols ? (dim + BK - 1u) / BK : 0u;
    float ra[4], rb[4];
    [[unroll]] for (uint t = 0u; t < 4u; ++t) {
        const uint k = lk + t;
        ra[t] = (q_ok && k < dim) ? queries[qb + k] : 0.0;
        rb[t] = (e_ok && k < dim) ? float(table[eb + k]) : 0.0;
    }
    [[unroll]] for (uint t = 0u; t < 4u; ++t) {
        As4[(lk + t) * (BM / 4u) + lr / 4u][lr % 4u] = ra[t];
        Bs4[(lk + t) * (BN / 4u) + lr / 4u][lr % 4u] = rb[t];
    }
    barrier();
    for (uint s = 0u; s < stages; ++s) {
        const uint cur = s & 1u;
        const bool more = s + 1u < stages;
        if (more) {
            const uint k0 = (s + 1u) * BK;
            [[unroll]] for (uint t = 0u; t < 4u; ++t) {
                const uint k = k0 + lk + t;
                ra[t] = (q_ok && k < dim) ? queries[qb + k] : 0.0;
                rb[t] = (e_ok && k < dim) ? float(table[eb + k]) : 0.0;
            }
        }
        const uint kn = min(BK, dim - s * BK);
        if (kn == BK) {
            [[unroll]] for (uint kk = 0u; kk < BK; ++kk) update(cur * BK + kk, tx, ty, l2);
        } else {
            for (uint kk = 0u; kk < kn; ++kk) update(cur * BK + kk, tx, ty, l2);
        }
        if (more) {
            const uint nxt = 1u - cur;
            [[unroll]] for (uint t = 0u; t < 4u; ++t) {
                As4[(nxt * BK + lk + t) * (BM / 4u) + lr / 4u][lr % 4u] = ra[t];
                Bs4[(nxt * BK + lk + t) * (BN / 4u) + lr / 4u][lr % 4u] = rb[t];
            }
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        const uint q = m0 + (i / 4u) * 64u + ty * 4u + i % 4u;
        [[unroll]] for (uint j = 0u; j < 8u; ++j) {
            store(q, c0 + (j / 4u) * 64u + tx * 4u + j % 4u, acc[i * 8u + j]);
        }
    }
}
