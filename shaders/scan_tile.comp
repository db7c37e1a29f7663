#version 450
// Scan shape "dispatch per tile", part 1: one dispatch per (step, tile). Each workgroup scans the
// tile's candidates for its SB sequences and folds each one's tile best into `partial`.
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;        // the step being computed
    uint tile_begin;  // candidates [tile_begin, tile_end)
    uint tile_end;
} pc;

shared float cen[SB * DIM];

bool chosen(uint j, uint x) {
    uint s = min(gl_WorkGroupID.x * SB + j, BATCH - 1u);
    return (mask_g[s * MASK_WORDS + (x >> 5u)] & (1u << (x & 31u))) != 0u;
}

#include "scan_dot.glsl"

void main() {
    const uint s0 = gl_WorkGroupID.x * SB;
    const uint lid = gl_LocalInvocationID.x;
    const uint nseq = min(SB, BATCH - s0);
    for (uint i = lid; i < SB * DIM; i += gl_WorkGroupSize.x) {
        uint j = i / DIM;
        cen[i] = j < nseq ? centroid_value(s0 + j, i % DIM) : 0.0;
    }
    barrier();
    float bk[SB];
    uint bi[SB];
    for (uint j = 0u; j < SB; ++j) { bk[j] = INF; bi[j] = NO_INDEX; }
    scan_range(pc.tile_begin, pc.tile_end, bk, bi);
    for (uint j = 0u; j < SB; ++j) {
        workgroup_argmin(bk[j], bi[j]);
        uint s = s0 + j;
        // The first tile of a step starts the fold afresh.
        if (lid == 0u && j < nseq && (pc.tile_begin == 0u
                || better(red_pick_key, red_pick, uintBitsToFloat(partial[2u * s]), partial[2u * s + 1u]))) {
            partial[2u * s] = floatBitsToUint(red_pick_key);
            partial[2u * s + 1u] = red_pick;
        }
    }
}
