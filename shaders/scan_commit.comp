#version 450
// After every block of a step: per sequence, the winner over all candidate blocks; record it,
// mark it chosen, add it to the running sum (compensated) and refresh the fp32 centroid.
// Compiled twice (build.rs): `scan_commit` and, with BIG, `scan_big_commit` (ceil(N / 128)
// block winners a sequence: scan_common.glsl's BN).
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;
} pc;

void main() {
    const uint s = sequence_slot();
    const uint lid = gl_LocalInvocationID.x;
    const uint nbx = (pc.num_items + BN - 1u) / BN;
    float bk = INF;
    uint bi = NO_INDEX;
    for (uint b = lid; b < nbx; b += gl_WorkGroupSize.x) {
        float k = uintBitsToFloat(partial[2u * (s * nbx + b)]);
        uint i = partial[2u * (s * nbx + b) + 1u];
        if (less(k, i, bk, bi)) { bk = k; bi = i; }
    }
    workgroup_argmin(bk, bi);
    const uint p = red_pick;
    if (lid == 0u) {
        mask_g[s * MASK_WORDS + (p >> 5u)] |= 1u << (p & 31u);
        seqs[s * SEQ_LEN + pc.slot] = p;
    }
    for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) {
        cen32[s * DIM + d] = centroid_add(s, d, float(table[p * DIM + d]));
    }
}
