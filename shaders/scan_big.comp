#version 450
// scan.comp for the 128 × 128 kernel (ScanKernel::Block128): shapes "untiled" and "in-shader
// tiles", one dispatch over every block of the step; workgroups numbered tile by tile as there.
#define SCAN_BN 128u
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint start_slot;  // the step (the host sends one step per dispatch)
    uint slot_count;  // 1
    uint tile_size;   // candidates per tile (rounded up to whole blocks of BN); 0 = untiled
} pc;

#include "scan_gemm_big.glsl"

void main() {
    const uint n = pc.num_items;
    const uint nbx = (n + BN - 1u) / BN;
    const uint nby = (BATCH + BIG_M - 1u) / BIG_M;
    const uint id = gl_WorkGroupID.x;
    uint bx, by;
    if (pc.tile_size == 0u) {
        bx = id % nbx;
        by = id / nbx;
    } else {
        const uint tb = max(1u, (pc.tile_size + BN - 1u) / BN); // blocks per tile
        const uint t = id / (tb * nby);
        const uint base = t * tb;
        const uint width = min(tb, nbx - base);
        const uint r = id - t * tb * nby;
        by = r / width;
        bx = base + r % width;
    }
    gemm_block(bx, by, n);
}
