#version 450
// Exact k-NN, k-selection (src/knn/): one workgroup sorts one chunk of S = WG × R (key, id)
// pairs of one query's scratch row by a bitonic network, ascending by (key, id) — a total
// order, so the result is unique: ties go to the lowest id.
//
// Each invocation keeps R pairs in registers (pair e = r·WG + lane). A compare-exchange of
// stride j runs
//   * j ≥ WG: between two registers of the same invocation;
//   * j < subgroup size (SUBGROUPS = 1): by subgroupShuffleXor, no shared memory, no barrier
//     (lane = gl_SubgroupID · gl_SubgroupSize + gl_SubgroupInvocationID, so lane ^ j is in the
//     same subgroup);
//   * otherwise through shared memory (two barriers).
// Chunk ch of the source row (entries ≥ len are padding) is sorted and its first `keep` pairs
// written to the destination row at ch · keep — a selection pass shrinks a row of L candidates
// to ceil(L / S) · keep, and the last pass (one chunk) leaves the k best, sorted; the full
// ranking keeps every pair (keep = S) and merges the sorted chunks (knn_merge.comp).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#include "knn_common.glsl"
#include "key_order.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint R = 8u;         // pairs per invocation (a power of two)
layout(constant_id = 2) const uint SUBGROUPS = 1u; // 1: small strides by shuffles

layout(push_constant) uniform Push {
    uint len;        // valid entries of the source row
    uint src_stride; // source row stride (entries)
    uint dst_stride; // destination row stride
    uint keep;       // pairs kept per chunk
    uint flip;       // 0 = A → B, 1 = B → A
} pc;

const uint WG = gl_WorkGroupSize.x;
const uint S = WG * R;

shared float sk[S];
shared uint si[S];

float k[R];
uint id[R];

// One compare-exchange of stride j within stage `size` (ascending where the index & size = 0).
void cmpx(uint size, uint j, uint lane) {
    if (j >= WG) {
        // The register stride as a loop constant (rc == j / WG for exactly one rc), so that
        // once the loops unroll every register index is a constant: no dynamically indexed
        // private array (local memory on GPUs).
        [[unroll]] for (uint rc = 1u; rc < R; rc <<= 1u) {
            if (rc != j / WG) continue;
            [[unroll]] for (uint r = 0u; r < R; ++r) {
                if ((r & rc) != 0u) continue;
                const uint pr = r | rc;
                const bool asc = ((r * WG + lane) & size) == 0u;
                if (less(k[pr], id[pr], k[r], id[r]) == asc) {
                    float tk = k[r]; uint ti = id[r];
                    k[r] = k[pr]; id[r] = id[pr];
                    k[pr] = tk; id[pr] = ti;
                }
            }
        }
        return;
    }
    float pk[R];
    uint pi[R];
    if (SUBGROUPS != 0u && j < gl_SubgroupSize) {
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            pk[r] = subgroupShuffleXor(k[r], j);
            pi[r] = subgroupShuffleXor(id[r], j);
        }
    } else {
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            sk[r * WG + lane] = k[r];
            si[r * WG + lane] = id[r];
        }
        barrier();
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            pk[r] = sk[r * WG + (lane ^ j)];
            pi[r] = si[r * WG + (lane ^ j)];
        }
        barrier();
    }
    const bool lower = (lane & j) == 0u;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const bool asc = ((r * WG + lane) & size) == 0u;
        const bool p_less = less(pk[r], pi[r], k[r], id[r]);
        // The lower element of an ascending pair keeps the smaller one.
        if (p_less == (lower == asc)) {
            k[r] = pk[r];
            id[r] = pi[r];
        }
    }
}

void main() {
    const uint lane = SUBGROUPS != 0u
        ? gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID
        : gl_LocalInvocationID.x;
    const uint ch = gl_WorkGroupID.x;
    const uint q = gl_WorkGroupID.y;
    const uint src_row = q * pc.src_stride;
    const uint g0 = ch * S;
    const bool from_b = pc.flip != 0u;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint g = g0 + r * WG + lane;
        if (g < pc.len) {
            k[r] = from_b ? keys_b[src_row + g] : keys_a[src_row + g];
            id[r] = from_b ? ids_b[src_row + g] : ids_a[src_row + g];
        } else {
            k[r] = INF;
            id[r] = NO_ID;
        }
    }
    for (uint size = 2u; size <= S; size <<= 1u) {
        for (uint j = size >> 1u; j > 0u; j >>= 1u) cmpx(size, j, lane);
    }
    const uint dst_row = q * pc.dst_stride + ch * pc.keep;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint e = r * WG + lane;
        if (e >= pc.keep) continue;
        if (from_b) {
            keys_a[dst_row + e] = k[r];
            ids_a[dst_row + e] = id[r];
        } else {
            keys_b[dst_row + e] = k[r];
            ids_b[dst_row + e] = id[r];
        }
    }
}
