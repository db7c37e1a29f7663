#version 450
// The filter of the filter-and-judge scan, shapes "untiled" (tile_size = 0) and "in-shader
// tiles" (workgroups numbered tile by tile, as in scan.comp): one dispatch filters every block of
// the step; scan_judge follows. Compiled twice (build.rs): `scan_filter` (the scalar stand-in,
// ScanKernel::Filter) and, with COOPMAT, `scan_filter_tc` (tensor cores, ScanKernel::Coopmat).
#define FILTER_BLOCK 1
#include "filter_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint start_slot;  // the step
    uint slot_count;  // 1
    uint tile_size;   // candidates per tile (rounded up to whole blocks of FBN); 0 = untiled
} pc;

#include "filter_block.glsl"

void main() {
    const uint n = pc.num_items;
    const uint nbx = (n + FBN - 1u) / FBN;
    const uint nby = (BATCH + FBM - 1u) / FBM;
    const uint id = gl_WorkGroupID.x;
    uint bx, by;
    // Consecutive workgroups take the sequence blocks of one candidate block, so that its rows
    // are read from device memory once a step and from L2 by the others (the centroids, a few
    // hundred KiB, stay in L2).
    if (pc.tile_size == 0u) {
        by = id % nby;
        bx = id / nby;
    } else {
        const uint tb = max(1u, (pc.tile_size + FBN - 1u) / FBN);
        const uint t = id / (tb * nby);
        const uint base = t * tb;
        const uint width = min(tb, nbx - base);
        const uint r = id - t * tb * nby;
        by = r % nby;
        bx = base + r / nby;
    }
    filter_block(bx, by, n);
}
