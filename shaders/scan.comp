#version 450
// Scan shapes "untiled" (tile_size = 0) and "in-shader tiles": one dispatch computes every block
// of the step's candidate scan. With tiles, workgroups are numbered tile by tile (every sequence
// block of a tile's candidate blocks before the next tile), so the blocks running together share
// one tile of rows in L2. A commit dispatch follows. Compiled twice (build.rs): `scan` (the 64-
// candidate kernel, ScanKernel::Block64) and, with BIG, `scan_big` (the 128 × 128 kernel,
// ScanKernel::Block128).
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint start_slot;  // the step (the host sends one step per dispatch)
    uint slot_count;  // 1
    uint tile_size;   // candidates per tile (rounded up to whole blocks of BN); 0 = untiled
} pc;

#ifdef BIG
#include "scan_gemm_big.glsl"
#else
#include "scan_gemm.glsl"
#endif

void main() {
    const uint n = pc.num_items;
    const uint nbx = (n + BN - 1u) / BN;
    const uint nby = (BATCH + GEMM_M - 1u) / GEMM_M;
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
