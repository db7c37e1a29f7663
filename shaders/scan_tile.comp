#version 450
// Scan shape "dispatch per tile", part 1: one dispatch per (step, tile). Each workgroup scans the
// tile's candidates for its sequence and folds the tile's best into `partial`.
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;        // the step being computed
    uint tile_begin;  // candidates [tile_begin, tile_end)
    uint tile_end;
} pc;

shared float cen[DIM];

bool chosen(uint x) {
    return (mask_g[sequence_slot() * MASK_WORDS + (x >> 5u)] & (1u << (x & 31u))) != 0u;
}

#include "scan_dot.glsl"

void main() {
    const uint s = sequence_slot();
    const uint lid = gl_LocalInvocationID.x;
    for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) cen[d] = centroid_value(s, d);
    barrier();
    float bk = INF;
    uint bi = NO_INDEX;
    scan_range(pc.tile_begin, pc.tile_end, bk, bi);
    workgroup_argmin(bk, bi);
    if (lid == 0u) {
        // The first tile of a step starts the fold afresh.
        if (pc.tile_begin == 0u || better(red_pick_key, red_pick, uintBitsToFloat(partial[2u * s]), partial[2u * s + 1u])) {
            partial[2u * s] = floatBitsToUint(red_pick_key);
            partial[2u * s + 1u] = red_pick;
        }
    }
}
