#version 450
// scan_tile.comp for the 128 × 128 kernel (ScanKernel::Block128): one dispatch per (step, tile).
#define SCAN_BN 128u
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;        // the step being computed
    uint tile_begin;  // candidates [tile_begin, tile_end), multiples of BN (but the last end)
    uint tile_end;
} pc;

#include "scan_gemm_big.glsl"

void main() {
    const uint b0 = pc.tile_begin / BN;
    const uint b1 = (pc.tile_end + BN - 1u) / BN;
    const uint id = gl_WorkGroupID.x;
    gemm_block(b0 + id % (b1 - b0), id / (b1 - b0), pc.num_items);
}
