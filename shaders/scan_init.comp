#version 450
// Step 0 of every sequence in the batch: seq[0] = start, c = e_start, only the start chosen.
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
} pc;

void main() {
    const uint s = sequence_slot();
    const uint lid = gl_LocalInvocationID.x;
    const uint start = starts[s];
    if (start >= pc.num_items || pc.dim != DIM) return; // the host validated both; never taken
    for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) {
        state[s * 2u * DIM + d] = float(table[start * DIM + d]);
        state[s * 2u * DIM + DIM + d] = 0.0;
        cen32[s * DIM + d] = float(table[start * DIM + d]);
    }
    for (uint w = lid; w < MASK_WORDS; w += gl_WorkGroupSize.x) {
        mask_g[s * MASK_WORDS + w] = (w == (start >> 5u)) ? (1u << (start & 31u)) : 0u;
    }
    if (lid == 0u) seqs[s * SEQ_LEN] = start;
}
