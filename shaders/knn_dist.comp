#version 450
// Exact k-NN, step 1: keys of a query tile against a range of table rows, written as (key, id)
// pairs into a scratch row (src/knn.rs). The key orders best first, ascending:
//   metric 0 (inner product): key = -(q · e)
//   metric 1 (cosine):        key = -(q̂ · e) / |e|   (q̂ normalised on the host; 0 for zero rows)
//   metric 2 (L2):            key = Σ (q - e)²       (squared distance, no cancellation)
// Each key is one fused multiply-add chain over d in ascending order from the stored (for fp16
// tables: widened) row. Entries [cols, pad_to) of the row range get the padding (+inf, NO_ID).
//
// Blocked product: workgroup (bx, by) computes rows [bx·BN, +BN) of the range × queries
// [by·BM, +BM) of the tile, 16 × 16 invocations of TM × TN pairs each, staging BK dims of the
// queries and rows at a time through shared memory. The inner loop stops at the real dim (no
// zero padding enters a chain), so every key is the same chain, bit for bit, as knn_warp.comp.
#ifdef FP16
#extension GL_EXT_shader_16bit_storage : require
#define STORED float16_t
#else
#define STORED float
#endif

#define BM 64u  // queries per workgroup
#define BN 64u  // table rows per workgroup
#define BK 16u  // dims per stage
#define TM 4u   // queries per invocation
#define TN 4u   // rows per invocation

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Table { STORED table[]; };
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; };
layout(std430, set = 0, binding = 2) readonly buffer Queries { float queries[]; };
layout(std430, set = 0, binding = 3) buffer KeysA { float keys_a[]; };
layout(std430, set = 0, binding = 4) buffer IdsA { uint ids_a[]; };
layout(std430, set = 0, binding = 5) buffer KeysB { float keys_b[]; };
layout(std430, set = 0, binding = 6) buffer IdsB { uint ids_b[]; };

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

const uint NO_ID = 0xffffffffu;
const float INF = 1.0 / 0.0;

shared float Qs[BK * BM];  // [k][query]
shared float Es[BK * BN];  // [k][row]

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % 16u, ty = lid / 16u;
    const uint c0 = gl_WorkGroupID.x * BN;  // first row (within the range) of this block
    const uint m0 = gl_WorkGroupID.y * BM;  // first query (within the tile) of this block
    const uint dim = pc.dim;
    float acc[TM * TN];
    for (uint i = 0u; i < TM * TN; ++i) acc[i] = 0.0;
    // Loader: query / row lr of the block, dims lk .. lk+3 of the stage.
    const uint lr = lid / 4u, lk = (lid % 4u) * 4u;
    const bool q_ok = m0 + lr < pc.qn;
    const bool e_ok = c0 + lr < pc.cols;
    const uint qb = (pc.q0 + m0 + lr) * dim;
    const uint eb = (pc.t0 + c0 + lr) * dim;
    const bool l2 = pc.metric == 2u;
    for (uint k0 = 0u; k0 < dim; k0 += BK) {
        for (uint t = 0u; t < 4u; ++t) {
            const uint k = k0 + lk + t;
            Qs[(lk + t) * BM + lr] = (q_ok && k < dim) ? queries[qb + k] : 0.0;
            Es[(lk + t) * BN + lr] = (e_ok && k < dim) ? float(table[eb + k]) : 0.0;
        }
        barrier();
        const uint kn = min(BK, dim - k0);
        if (l2) {
            for (uint kk = 0u; kk < kn; ++kk) {
                float a[TM], b[TN];
                for (uint i = 0u; i < TM; ++i) a[i] = Qs[kk * BM + ty * TM + i];
                for (uint j = 0u; j < TN; ++j) b[j] = Es[kk * BN + tx * TN + j];
                for (uint i = 0u; i < TM; ++i) {
                    for (uint j = 0u; j < TN; ++j) {
                        precise float diff = a[i] - b[j];
                        precise float r = fma(diff, diff, acc[i * TN + j]);
                        acc[i * TN + j] = r;
                    }
                }
            }
        } else {
            for (uint kk = 0u; kk < kn; ++kk) {
                float a[TM], b[TN];
                for (uint i = 0u; i < TM; ++i) a[i] = Qs[kk * BM + ty * TM + i];
                for (uint j = 0u; j < TN; ++j) b[j] = Es[kk * BN + tx * TN + j];
                for (uint i = 0u; i < TM; ++i) {
                    for (uint j = 0u; j < TN; ++j) {
                        precise float r = fma(a[i], b[j], acc[i * TN + j]);
                        acc[i * TN + j] = r;
                    }
                }
            }
        }
        barrier();
    }
    for (uint i = 0u; i < TM; ++i) {
        const uint q = m0 + ty * TM + i;
        if (q >= pc.qn) continue;
        for (uint j = 0u; j < TN; ++j) {
            const uint c = c0 + tx * TN + j;
            if (c >= pc.pad_to) continue;
            float key = INF;
            uint id = NO_ID;
            if (c < pc.cols) {
                const uint row = pc.t0 + c;
                float s = acc[i * TN + j];
                if (l2) {
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
    }
}
