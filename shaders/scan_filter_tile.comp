#version 450
// The filter of the filter-and-judge scan, shape "dispatch per tile": one dispatch per (step,
// tile); scan_judge follows the last. Compiled twice (build.rs): `scan_filter_tile` and, with
// COOPMAT, `scan_filter_tc_tile`.
#define FILTER_BLOCK 1
#include "filter_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;
    uint tile_begin;  // multiples of FBN (but the last end)
    uint tile_end;
} pc;

#include "filter_block.glsl"

void main() {
    const uint b0 = pc.tile_begin / FBN;
    const uint b1 = (pc.tile_end + FBN - 1u) / FBN;
    const uint id = gl_WorkGroupID.x;
    const uint nby = (BATCH + FBM - 1u) / FBM;
    // The sequence blocks of one candidate block run side by side (scan_filter.comp says why).
    filter_block(b0 + id / nby, id % nby, pc.num_items);
}
