#version 450
// IVF-PQ search, the list scan (src/ivf/pq_scan.rs): one workgroup a query. The workgroup builds
// the query's M × 256 lookup table in shared memory once, then for each list it probes each
// invocation sums the M terms of its codes (asymmetric distance, ADC) and offers (key, id) to
// block_select.glsl; the k best end the dispatch. One dispatch covers
// probe ranks [p0, p1) and rows [r0, r1) inside each probed list; when it is not the first
// (seed = 1) it starts from the k best the previous one wrote, so a search may be cut into
// dispatches (lavapipe's loop cap) and still be exact.
//
// The query's M × 256 table is built once a query (fp32): entry (s, c) the fused multiply-add
// chain of q_j · C_s[c]_j over the sub-space's dims in ascending order. Inner product (ip = 1):
// the key −(q · c(list) + the sum of the code's entries in sub-space order), q · c(list) coming
// with the probe. L2 (ip = 0), Faiss's precomputed table for residual PQ: with P the list's
// precomputed table (src/ivf/pq.rs precomputed_table: ‖C_s[c]‖² + 2 c(list)_s · C_s[c], float64
// rounded once) the key is ‖q − c(list)‖² (the coarse search's key, with the probe) plus, in
// sub-space order, fma(−2, entry, P[s][code_s]) — ‖q − c(list) − y‖² in another form.
#extension GL_EXT_control_flow_attributes : require
#include "key_order.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BS_K = 16u;
layout(constant_id = 2) const uint PQ_M = 8u;   // sub-spaces (bytes a code)
layout(constant_id = 3) const uint PQ_D = 64u;  // D
layout(constant_id = 4) const uint BS_SUBGROUPS = 0u;  // block_select.glsl
#include "block_select.glsl"

const uint KSUB = 256u;

// Codes as bytes, four a word: byte (row · M + s) of the slab is row's sub-space s.
layout(std430, set = 0, binding = 0) readonly buffer Codes { uint codes[]; };
// The coarse centroids (nlist × D), then at pc.pq_at the PQ's M × 256 × (D / M) centroids, then
// for L2 at pc.pre_at every list's precomputed table (nlist × M × 256).
layout(std430, set = 0, binding = 1) readonly buffer Cent { float cent[]; };
layout(std430, set = 0, binding = 2) readonly buffer Queries { float queries[]; };
// lists[2l] = list l's first row in the slab, lists[2l + 1] = its rows.
layout(std430, set = 0, binding = 3) readonly buffer Lists { uint lists[]; };
layout(std430, set = 0, binding = 4) readonly buffer RowId { uint row_id[]; };
// Per (query, probe rank), nprobe a query from word pc.probe_off: the list — the coarse k-NN's
// packed ids, left on the device (or uploaded).
layout(std430, set = 0, binding = 5) readonly buffer Probes { uint probes[]; };
// The k best: keys from word 0, ids from word pc.ids_off, k a query.
layout(std430, set = 0, binding = 6) buffer Out { uint out_w[]; };
// Per (query, probe rank) from word pc.key_off: the coarse k-NN's key as float bits: ‖q − c‖²
// for L2, minus q · c(list) for inner product.
layout(std430, set = 0, binding = 7) readonly buffer ProbeKeys { uint probe_keys[]; };

layout(push_constant) uniform Push {
    uint q0;      // first query of this tile
    uint nprobe;  // probe ranks a query has
    uint p0;      // probe ranks [p0, p1) in this dispatch
    uint p1;
    uint r0;      // rows [r0, r1) of each probed list in this dispatch
    uint r1;
    uint k;       // results a query (the row stride of out_key / out_id)
    uint seed;    // 1: start from the k best in out_key / out_id
    uint ip;      // 1: inner product, 0: L2
    uint pq_at;   // the PQ centroids' first float in cent
    uint probe_off; // the probes' first word in probes
    uint key_off;   // the probes' keys' first word in probe_keys
    uint ids_off;   // the ids' first word in out_w
    uint pre_at;    // L2: the precomputed tables' first float in cent (NO_TABLES: none)
} pc;

// pre_at when the lists have no precomputed tables (too large for the device): L2 builds the
// residual's table for each probed list instead (entry (s, c) the fused multiply-add chain of
// (r_j − C_s[c]_j)² with r = q − c(list), the key the sum of the code's entries).
const uint NO_TABLES = 0xffffffffu;

shared float lut[PQ_M * KSUB];
shared float res[PQ_D];

// The query's M × 256 table into shared memory (all invocations; barriers after): entry (s, c)
// the fused multiply-add chain over the sub-space's dims in ascending order of q_j · C_s[c]_j.
void build_table(uint q) {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    const uint dsub = PQ_D / PQ_M;
    for (uint j = lid; j < PQ_D; j += wg) {
        res[j] = queries[q * PQ_D + j];
    }
    barrier();
    for (uint e = lid; e < PQ_M * KSUB; e += wg) {
        const uint s0 = (e / KSUB) * dsub;
        const uint c0 = pc.pq_at + e * dsub;
        float s = 0.0;
        for (uint j = 0u; j < dsub; ++j) {
            precise float v = fma(res[s0 + j], cent[c0 + j], s);
            s = v;
        }
        lut[e] = s;
    }
    barrier();
}

// The residual's table of list l (L2 without precomputed tables; all invocations; barriers
// before and after).
void build_residual_table(uint q, uint l) {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    const uint dsub = PQ_D / PQ_M;
    barrier();  // the previous list's table is no longer read
    for (uint j = lid; j < PQ_D; j += wg) {
        precise float v = queries[q * PQ_D + j] - cent[l * PQ_D + j];
        res[j] = v;
    }
    barrier();
    for (uint e = lid; e < PQ_M * KSUB; e += wg) {
        const uint s0 = (e / KSUB) * dsub;
        const uint c0 = pc.pq_at + e * dsub;
        float s = 0.0;
        for (uint j = 0u; j < dsub; ++j) {
            precise float diff = res[s0 + j] - cent[c0 + j];
            precise float v = fma(diff, diff, s);
            s = v;
        }
        lut[e] = s;
    }
    barrier();
}

// The byte of sub-space m of slab row `row`.
uint code_at(uint row, uint m) {
    const uint b = row * PQ_M + m;
    return (codes[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// Offers the seed and the codes of this dispatch to the block select (one pass of it; the
// query's table already built unless per_list).
void offer_candidates(uint q, bool per_list) {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    const bool ip = pc.ip == 1u;
    if (pc.seed == 1u && lid < pc.k) {
        bs_push(uintBitsToFloat(out_w[q * pc.k + lid]), out_w[pc.ids_off + q * pc.k + lid]);
    }
    for (uint p = pc.p0; p < pc.p1; ++p) {
        const uint at = q * pc.nprobe + p;
        const uint l = probes[pc.probe_off + at];
        // L2: ‖q − c(list)‖²; inner product: minus q · c(list) (exact).
        const float coarse = uintBitsToFloat(probe_keys[pc.key_off + at]);
        const uint len = min(lists[2u * l + 1u], pc.r1);
        const uint base = lists[2u * l];
        const uint pre = pc.pre_at + l * (PQ_M * KSUB);
        if (per_list) build_residual_table(q, l);
        for (uint r = pc.r0 + lid; r < len; r += wg) {
            float key;
            if (per_list) {
                float s = 0.0;
                for (uint m = 0u; m < PQ_M; ++m) {
                    precise float v = s + lut[m * KSUB + code_at(base + r, m)];
                    s = v;
                }
                key = s;
            } else if (ip) {
                float s = 0.0;
                for (uint m = 0u; m < PQ_M; ++m) {
                    precise float v = s + lut[m * KSUB + code_at(base + r, m)];
                    s = v;
                }
                precise float v = -coarse + s;
                key = -v;
            } else {
                float s = coarse;
                for (uint m = 0u; m < PQ_M; ++m) {
                    const uint e = m * KSUB + code_at(base + r, m);
                    precise float t = fma(-2.0, lut[e], cent[pre + e]);
                    precise float v = s + t;
                    s = v;
                }
                key = s;
            }
            bs_push(key, row_id[base + r]);
        }
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint q = pc.q0 + gl_WorkGroupID.x;
    // The table does not depend on the list: built once a query (but for L2 without
    // precomputed tables).
    const bool per_list = pc.ip != 1u && pc.pre_at == NO_TABLES;
    if (!per_list) build_table(q);
    // Passes of the block select: one unless an invocation's queue overflowed into the k best
    // (block_select.glsl); each pass recomputes the same keys from the same table, bit for bit.
    bs_start(pc.k);
    do {
        bs_init();
        offer_candidates(q, per_list);
    } while (!bs_merge(pc.k));
    if (lid < pc.k) {
        out_w[q * pc.k + lid] = floatBitsToUint(bs_best_key[lid]);
        out_w[pc.ids_off + q * pc.k + lid] = bs_best_id[lid];
    }
}
