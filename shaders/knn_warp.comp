#version 450
// Exact k-NN, WarpSelect-style k-selection (src/knn/; Johnson, Douze, Jégou, "Billion-scale
// similarity search with GPUs"). One subgroup per query, several subgroups (queries) per
// workgroup, no shared memory and no barriers: only subgroup ops.
//
// Lane `lane` takes the rows base + lane (base stepping by the subgroup size SG) of the range.
// Their keys come either from the A scratch, where knn_dist.comp's blocked product wrote the
// range's keys (row q at q · a_stride: one coalesced load a step), or (`fused` = 1) are
// computed here, one row per lane, exactly as knn_dist.comp does (same fused multiply-add
// chain, so the same bits; uncoalesced, for measurement). (key, id) pairs are ordered totally
// (ties: lowest id first).
//   * subgroup queue: the K best so far (K = the k bucket, a power of two ≥ SG), ascending,
//     element e = r · SG + lane in register r of lane `lane` (KR = K / SG registers a lane);
//   * thread queue: T registers a lane (T a power of two ≤ KR), kept sorted by insertion; a
//     pair enters only if it beats the subgroup queue's K-th pair (broadcast after each merge);
//   * when any lane's thread queue is full (subgroupAny), the SG · T thread-queue pairs are
//     sorted descending by a bitonic network (element b = r · SG + lane; strides < SG by
//     subgroupShuffleXor, larger ones between registers), then folded into the last SG · T
//     slots of the subgroup queue by min(queue[K - SG·T + b], threads[b]) — the min of an
//     ascending and a descending sequence is bitonic and holds the K best — and a bitonic merge
//     (strides K/2 … 1) sorts the queue again; then the thread queues are emptied.
// The table is processed in ranges (dispatches); between them the queue lives in row q of the
// B scratch (K pairs), read back when `first` is 0. The sorted queue is written there at the end.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
#define KNN_INPUTS
#define KNN_OWN_A
#include "knn_common.glsl"
#include "key_order.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SG = 32u;  // subgroup size (the device's)
layout(constant_id = 2) const uint K = 32u;   // k bucket (power of two, ≥ SG)
layout(constant_id = 3) const uint T = 2u;    // thread queue length (power of two, ≤ K / SG)

const uint KR = K / SG;

// A's keys only, read-only (the ids of a tile are its rows).
layout(std430, set = 0, binding = 3) readonly buffer KeysA { float keys_a[]; };

layout(push_constant) uniform Push {
    uint dim;    // D
    uint q0;     // first query of this tile
    uint qn;     // queries in this tile
    uint t0;     // first table row of this range
    uint cols;   // table rows in this range
    uint first;  // 1: start from an empty queue
    uint stride; // scratch row stride (entries, ≥ K)
    uint metric; // 0 inner product, 1 cosine, 2 L2
    uint fused;  // 1: compute the keys here; 0: read them from A
    uint a_stride; // A scratch row stride (entries) when fused = 0
} pc;

float qk[KR];
uint qi[KR];
float tk[T];
uint ti[T];

// Thread queues as one sequence of SG · T pairs: compare-exchange of stride j in stage `size`,
// final order descending.
void thread_cmpx(uint size, uint j, uint lane) {
    if (j >= SG) {
        // The register stride as a loop constant (see queue_cmpx).
        [[unroll]] for (uint rc = 1u; rc < T; rc <<= 1u) {
            if (rc != j / SG) continue;
            [[unroll]] for (uint r = 0u; r < T; ++r) {
                if ((r & rc) != 0u) continue;
                const uint pr = r | rc;
                const bool desc = ((r * SG + lane) & size) == 0u;
                if (less(tk[r], ti[r], tk[pr], ti[pr]) == desc) {
                    float xk = tk[r]; uint xi = ti[r];
                    tk[r] = tk[pr]; ti[r] = ti[pr];
                    tk[pr] = xk; ti[pr] = xi;
                }
            }
        }
        return;
    }
    const bool lower = (lane & j) == 0u;
    [[unroll]] for (uint r = 0u; r < T; ++r) {
        const float pk = subgroupShuffleXor(tk[r], j);
        const uint pi = subgroupShuffleXor(ti[r], j);
        const bool desc = ((r * SG + lane) & size) == 0u;
        // Descending: the lower element of the pair keeps the larger one.
        const bool p_less = less(pk, pi, tk[r], ti[r]);
        if (p_less != (lower == desc)) {
            tk[r] = pk;
            ti[r] = pi;
        }
    }
}

// Subgroup queue: ascending compare-exchange of stride j (bitonic merge).
void queue_cmpx(uint j, uint lane) {
    if (j >= SG) {
        // The register stride as a loop constant (rc == j / SG for exactly one rc), so that
        // once the loops unroll every register index is a constant: no dynamically indexed
        // private array (local memory on GPUs).
        [[unroll]] for (uint rc = 1u; rc < KR; rc <<= 1u) {
            if (rc != j / SG) continue;
            [[unroll]] for (uint r = 0u; r < KR; ++r) {
                if ((r & rc) != 0u) continue;
                const uint pr = r | rc;
                if (less(qk[pr], qi[pr], qk[r], qi[r])) {
                    float xk = qk[r]; uint xi = qi[r];
                    qk[r] = qk[pr]; qi[r] = qi[pr];
                    qk[pr] = xk; qi[pr] = xi;
                }
            }
        }
        return;
    }
    const bool lower = (lane & j) == 0u;
    [[unroll]] for (uint r = 0u; r < KR; ++r) {
        const float pk = subgroupShuffleXor(qk[r], j);
        const uint pi = subgroupShuffleXor(qi[r], j);
        const bool p_less = less(pk, pi, qk[r], qi[r]);
        if (p_less == lower) {
            qk[r] = pk;
            qi[r] = pi;
        }
    }
}

void merge(uint lane) {
    const uint M = SG * T;
    for (uint size = 2u; size <= M; size <<= 1u) {
        for (uint j = size >> 1u; j > 0u; j >>= 1u) thread_cmpx(size, j, lane);
    }
    [[unroll]] for (uint r = 0u; r < T; ++r) {
        const uint qr = KR - T + r;
        if (less(tk[r], ti[r], qk[qr], qi[qr])) {
            qk[qr] = tk[r];
            qi[qr] = ti[r];
        }
        tk[r] = INF;
        ti[r] = NO_ID;
    }
    for (uint j = K >> 1u; j > 0u; j >>= 1u) queue_cmpx(j, lane);
}

float key_of(uint q, uint row) {
    const uint qb = (pc.q0 + q) * pc.dim;
    const uint eb = row * pc.dim;
    float acc = 0.0;
    if (pc.metric == 2u) {
        for (uint d = 0u; d < pc.dim; ++d) {
            precise float diff = queries[qb + d] - float(table[eb + d]);
            precise float r = fma(diff, diff, acc);
            acc = r;
        }
        return acc;
    }
    for (uint d = 0u; d < pc.dim; ++d) {
        precise float r = fma(queries[qb + d], float(table[eb + d]), acc);
        acc = r;
    }
    if (pc.metric == 1u) {
        precise float s = acc * inv_norm[row];
        acc = s;
    }
    return -acc;
}

void main() {
    const uint lane = gl_SubgroupInvocationID;
    const uint q = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
    if (q >= pc.qn) return; // the whole subgroup
    const uint row0 = q * pc.stride;
    [[unroll]] for (uint r = 0u; r < KR; ++r) {
        if (pc.first != 0u) {
            qk[r] = INF;
            qi[r] = NO_ID;
        } else {
            qk[r] = keys_b[row0 + r * SG + lane];
            qi[r] = ids_b[row0 + r * SG + lane];
        }
    }
    [[unroll]] for (uint r = 0u; r < T; ++r) {
        tk[r] = INF;
        ti[r] = NO_ID;
    }
    float kth = subgroupBroadcast(qk[KR - 1u], SG - 1u);
    uint kth_id = subgroupBroadcast(qi[KR - 1u], SG - 1u);
    uint count = 0u;
    // Keys from A are loaded one step ahead (a load in flight while the previous key is
    // inserted).
    const uint ab = q * pc.a_stride;
    float ahead = (pc.fused == 0u && lane < pc.cols) ? keys_a[ab + lane] : INF;
    for (uint base = 0u; base < pc.cols; base += SG) {
        const uint c = base + lane;
        float key = ahead;
        if (pc.fused == 0u && c + SG < pc.cols) ahead = keys_a[ab + c + SG];
        if (c < pc.cols) {
            const uint row = pc.t0 + c;
            if (pc.fused != 0u) key = key_of(q, row);
            uint id = row;
            if (less(key, id, kth, kth_id)) {
                // Sorted insertion (ascending); the last slot is empty (count < T).
                [[unroll]] for (uint r = 0u; r < T; ++r) {
                    if (less(key, id, tk[r], ti[r])) {
                        float xk = tk[r]; uint xi = ti[r];
                        tk[r] = key; ti[r] = id;
                        key = xk; id = xi;
                    }
                }
                count += 1u;
            }
        }
        if (subgroupAny(count == T)) {
            merge(lane);
            count = 0u;
            kth = subgroupBroadcast(qk[KR - 1u], SG - 1u);
            kth_id = subgroupBroadcast(qi[KR - 1u], SG - 1u);
        }
    }
    if (subgroupAny(count != 0u)) merge(lane);
    [[unroll]] for (uint r = 0u; r < KR; ++r) {
        keys_b[row0 + r * SG + lane] = qk[r];
        ids_b[row0 + r * SG + lane] = qi[r];
    }
}
