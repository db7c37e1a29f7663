#version 450
// IVF-Flat search, the list scan (src/ivf/scan.rs): one workgroup a query scans the rows of the
// lists it probes and keeps its k best with block_select.glsl. One dispatch covers a range of
// probe ranks [p0, p1) and a range of rows [r0, r1) inside each probed list, for every query of
// a tile; when it is not the first (seed = 1) it starts from the k best the previous dispatch
// wrote, so a search may be cut into dispatches (lavapipe's loop cap) and still be exact.
//
// The lists live in one slab: list l's rows start at row lists[2l] (a multiple of 32) and are
// stored interleaved by blocks of 32 rows — row r's dim j at (r / 32) · 32 · D + j · 32 + r % 32 —
// so the 32 invocations of a subgroup reading dim j of 32 consecutive rows read consecutive
// words. The key of (query, row) is knn_dist.comp's, bit for bit: one fused multiply-add chain
// over d in ascending order from the stored (for fp16: widened) row, times the row's inverse norm
// for cosine, negated for similarities; ids are the rows' ids (row_id), so ties go to the lower
// id exactly as in the exact search.
#extension GL_EXT_control_flow_attributes : require
#include "table.glsl"
#include "key_order.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BS_K = 16u;
layout(constant_id = 2) const uint ROWS = 1u;  // rows an invocation scans at a time
layout(constant_id = 3) const uint BS_SUBGROUPS = 0u;  // block_select.glsl
#include "block_select.glsl"

const uint NO_ID = 0xffffffffu;
const uint MAX_DIM = 4096u;  // the query in shared memory (src/ivf/scan.rs refuses more)

layout(std430, set = 0, binding = 2) readonly buffer Queries { float queries[]; };
// lists[2l] = list l's first row in the slab, lists[2l + 1] = its rows.
layout(std430, set = 0, binding = 3) readonly buffer Lists { uint lists[]; };
layout(std430, set = 0, binding = 4) readonly buffer RowId { uint row_id[]; };
// Query q's probe ranks at probes[probe_off + q · nprobe + p] (the coarse k-NN's packed ids).
layout(std430, set = 0, binding = 5) readonly buffer Probes { uint probes[]; };
// The k best of query q: keys' bits at results[q · k + i], ids at results[ids_off + q · k + i].
layout(std430, set = 0, binding = 6) buffer Results { uint results[]; };

layout(push_constant) uniform Push {
    uint dim;     // D
    uint q0;      // first query of this tile
    uint nprobe;  // probe ranks a query has (the row stride of probes)
    uint p0;      // probe ranks [p0, p1) in this dispatch
    uint p1;
    uint r0;      // rows [r0, r1) of each probed list in this dispatch
    uint r1;
    uint k;       // results a query
    uint seed;    // 1: start from the k best in results
    uint metric;  // 0 inner product, 1 cosine, 2 L2
    uint probe_off;  // where the probes start in binding 5 (words)
    uint ids_off;    // where the ids start in binding 6 (words)
} pc;

shared float qs[MAX_DIM];

// Offers the seed and the rows of this dispatch to the block select (one pass of it).
void offer_candidates(uint q) {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    const uint dim = pc.dim;
    if (pc.seed == 1u && lid < pc.k) {
        bs_push(uintBitsToFloat(results[q * pc.k + lid]), results[pc.ids_off + q * pc.k + lid]);
    }
    const bool l2 = pc.metric == 2u;
    for (uint p = pc.p0; p < pc.p1; ++p) {
        const uint l = probes[pc.probe_off + q * pc.nprobe + p];
        const uint len = min(lists[2u * l + 1u], pc.r1);
        const uint base = lists[2u * l];
        // ROWS rows an invocation at a time (independent chains in flight); a row past the
        // list reads the group's first row and is not pushed.
        for (uint r = pc.r0 + lid; r < len; r += ROWS * wg) {
            uint at[ROWS];
            float s[ROWS];
            [[unroll]] for (uint i = 0u; i < ROWS; ++i) {
                const uint ri = r + i * wg < len ? base + r + i * wg : base + r;
                at[i] = ri / 32u * 32u * dim + ri % 32u;
                s[i] = 0.0;
            }
            if (l2) {
                for (uint j = 0u; j < dim; ++j) {
                    const float qj = qs[j];
                    [[unroll]] for (uint i = 0u; i < ROWS; ++i) {
                        precise float diff = qj - float(table[at[i] + j * 32u]);
                        precise float v = fma(diff, diff, s[i]);
                        s[i] = v;
                    }
                }
            } else {
                for (uint j = 0u; j < dim; ++j) {
                    const float qj = qs[j];
                    [[unroll]] for (uint i = 0u; i < ROWS; ++i) {
                        precise float v = fma(qj, float(table[at[i] + j * 32u]), s[i]);
                        s[i] = v;
                    }
                }
            }
            [[unroll]] for (uint i = 0u; i < ROWS; ++i) {
                const uint ri = r + i * wg;
                if (ri < len) {
                    float key = s[i];
                    if (!l2) {
                        if (pc.metric == 1u) {
                            precise float v = s[i] * inv_norm[base + ri];
                            key = v;
                        }
                        key = -key;
                    }
                    bs_push(key, row_id[base + ri]);
                }
            }
        }
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    const uint q = pc.q0 + gl_WorkGroupID.x;
    const uint dim = pc.dim;
    for (uint j = lid; j < dim; j += wg) qs[j] = queries[q * dim + j];
    barrier();
    // Passes of the block select: one unless an invocation's queue overflowed into the k best
    // (block_select.glsl); each pass recomputes the same keys, bit for bit.
    bs_start(pc.k);
    do {
        bs_init();
        offer_candidates(q);
    } while (!bs_merge(pc.k));
    if (lid < pc.k) {
        results[q * pc.k + lid] = floatBitsToUint(bs_best_key[lid]);
        results[pc.ids_off + q * pc.k + lid] = bs_best_id[lid];
    }
}
