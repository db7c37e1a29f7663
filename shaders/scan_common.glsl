// Shared by every scan shader: bindings, specialization constants, the candidate key and the
// (key, index) order (key_order.glsl). Every shape computes a candidate's key with this one
// function, so the bits of the result do not depend on tiling, chunking or batching.
#include "key_order.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DIM = 1u;        // D (also in the push block; the host checks they agree)
layout(constant_id = 2) const uint MASK_WORDS = 1u; // ceil(N / 32)
layout(constant_id = 3) const uint SEQ_LEN = 1u;    // steps + 1: the row stride of `seqs`
layout(constant_id = 4) const uint BATCH = 1u;      // sequences in the batch
layout(constant_id = 5) const uint BM = 64u;        // sequences per scan block: 16, 32 or 64

// The table and 1 / |e_x| (0 for a zero row, so its key is 0, i.e. d = 1): bindings 0 and 1.
#include "table.glsl"
// The batch's starts, one per workgroup row.
layout(std430, set = 0, binding = 2) readonly buffer Starts { uint starts[]; };
// Running sum per sequence as a compensated pair: [s][0..D) = hi, [s][D..2D) = lo.
layout(std430, set = 0, binding = 3) buffer State { float state[]; };
// Chosen-item bitmask per sequence, MASK_WORDS words each.
layout(std430, set = 0, binding = 4) buffer Mask { uint mask_g[]; };
// Output: SEQ_LEN indices per sequence.
layout(std430, set = 0, binding = 5) buffer Seqs { uint seqs[]; };
// Per sequence and candidate block of BN: the block's winner (key bits, index).
layout(std430, set = 0, binding = 6) buffer Partial { uint partial[]; };
// The centroids as fp32 (one rounding of hi + lo), row-major S × D: the scan's left operand.
layout(std430, set = 0, binding = 7) buffer Cen32 { float cen32[]; };

// The candidate scan is a blocked matrix product (centroids × rowsᵀ): BM sequences × BN
// candidates per workgroup of 256, BK dims per shared-memory stage, TM × TN per invocation.
// BIG (build.rs's Block128 variants: scan_big, scan_big_tile, scan_big_commit) selects the
// 128 × 128 kernel, 128 candidates a block (scan_gemm_big.glsl); else 64 (scan_gemm.glsl).
// The tensor-core filter shaders (filter_common.glsl) define SCAN_BN themselves.
#ifndef SCAN_BN
#ifdef BIG
#define SCAN_BN 128u
#else
#define SCAN_BN 64u
#endif
#endif
const uint BN = SCAN_BN, BK = 16u, TN = 4u;
const uint TM = BM / 16u;

const uint NO_INDEX = 0xffffffffu;
const float INF = 1.0 / 0.0;

// Workgroup row = sequence slot in the batch (init and commit: one workgroup per sequence).
uint sequence_slot() { return gl_WorkGroupID.x; }

// The centroid as fp32: one rounding of the compensated pair.
float centroid_value(uint s, uint d) {
    precise float v = state[s * 2u * DIM + d] + state[s * 2u * DIM + DIM + d];
    return v;
}

// c += e, compensated (Knuth TwoSum): hi + lo carries the exact sum to ~2^-48 relative, so
// late steps on centered data, where c cancels toward zero, keep their direction.
float centroid_add(uint s, uint d, float e) {
    uint h = s * 2u * DIM + d;
    precise float hi = state[h];
    precise float sum = hi + e;
    precise float bp = sum - hi;
    precise float err = (hi - (sum - bp)) + (e - bp);
    precise float lo = state[h + DIM] + err;
    state[h] = sum;
    state[h + DIM] = lo;
    precise float v = sum + lo;
    return v;
}

// Workgroup-wide argmin of (key, index) by a shared-memory tree (the workgroup size is a power of
// two); every invocation then reads the winner from `red_pick` / `red_pick_key`. No subgroup
// operations: Mesa 22.3's lavapipe gave wrong subgroup results inside the multi-step loop.
#ifndef WG_BARRIER
#define WG_BARRIER() barrier()
#endif
shared float red_key[gl_WorkGroupSize.x];
shared uint red_idx[gl_WorkGroupSize.x];
// Arrays of 4 so that every shared variable is a multiple of 16 bytes: the tensor-core filter's
// cooperative-matrix stores need a 16-byte aligned array, and the driver packs shared variables
// in an order of its own (filter_common.glsl).
shared uint red_pick4[4];
shared float red_pick_key4[4];
#define red_pick red_pick4[0]
#define red_pick_key red_pick_key4[0]

void workgroup_argmin(float key, uint idx) {
    const uint lid = gl_LocalInvocationID.x;
    red_key[lid] = key;
    red_idx[lid] = idx;
    WG_BARRIER();
    for (uint stride = gl_WorkGroupSize.x >> 1u; stride > 0u; stride >>= 1u) {
        if (lid < stride && less(red_key[lid + stride], red_idx[lid + stride], red_key[lid], red_idx[lid])) {
            red_key[lid] = red_key[lid + stride];
            red_idx[lid] = red_idx[lid + stride];
        }
        WG_BARRIER();
    }
    if (lid == 0u) {
        red_pick = red_idx[0];
        red_pick_key = red_key[0];
    }
    WG_BARRIER();
}
