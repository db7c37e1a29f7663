#version 450
// Scan shape "dispatch per tile": one dispatch per (step, tile) computes the tile's blocks; a
// compute→compute barrier separates tiles; a commit dispatch follows the last. Compiled twice
// (build.rs): `scan_tile` and, with BIG (the 128 × 128 kernel), `scan_big_tile`.
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;        // the step being computed
    uint tile_begin;  // candidates [tile_begin, tile_end), multiples of BN (but the last end)
    uint tile_end;
} pc;

#ifdef BIG
#include "scan_gemm_big.glsl"
#else
#include "scan_gemm.glsl"
#endif

void main() {
    const uint b0 = pc.tile_begin / BN;
    const uint b1 = (pc.tile_end + BN - 1u) / BN;
    const uint id = gl_WorkGroupID.x;
    gemm_block(b0 + id % (b1 - b0), id / (b1 - b0), pc.num_items);
}
