#version 450
// Scan shape "dispatch per tile", part 2: after every tile of a step, commit the winner: record it,
// mark it chosen, add it to the running sum.
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;
} pc;

void main() {
    const uint s = sequence_slot();
    const uint p = partial[2u * s + 1u];
    if (gl_LocalInvocationID.x == 0u) {
        mask_g[s * MASK_WORDS + (p >> 5u)] |= 1u << (p & 31u);
        seqs[s * SEQ_LEN + pc.slot] = p;
    }
    for (uint d = gl_LocalInvocationID.x; d < DIM; d += gl_WorkGroupSize.x) {
        centroid_add(s, d, float(table[p * DIM + d]));
    }
}
