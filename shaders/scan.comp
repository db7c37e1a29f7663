#version 450
// Scan shapes "untiled" (tile_size = 0) and "in-shader tiles": one workgroup per sequence advances
// it by `slot_count` steps; each step scans every unchosen candidate, tile by tile.
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint start_slot;  // first step to compute (>= 1)
    uint slot_count;  // steps in this dispatch
    uint tile_size;   // candidates per tile; 0 = one pass over all
} pc;

shared float cen[DIM];
shared uint mask_s[MASK_WORDS];

bool chosen(uint x) { return (mask_s[x >> 5u] & (1u << (x & 31u))) != 0u; }

#include "scan_dot.glsl"

void main() {
    const uint s = sequence_slot();
    const uint lid = gl_LocalInvocationID.x;
    const uint n = pc.num_items;
    for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) cen[d] = centroid_value(s, d);
    for (uint w = lid; w < MASK_WORDS; w += gl_WorkGroupSize.x) mask_s[w] = mask_g[s * MASK_WORDS + w];
    barrier();
    const uint tile = pc.tile_size == 0u ? n : pc.tile_size;
    for (uint t = pc.start_slot; t < pc.start_slot + pc.slot_count; ++t) {
        float bk = INF;
        uint bi = NO_INDEX;
        for (uint begin = 0u; begin < n; begin += min(tile, n - begin)) {
            scan_range(begin, begin + min(tile, n - begin), bk, bi);
        }
        workgroup_argmin(bk, bi);
        const uint p = red_pick;
        if (lid == 0u) {
            mask_s[p >> 5u] |= 1u << (p & 31u);
            mask_g[s * MASK_WORDS + (p >> 5u)] = mask_s[p >> 5u];
            seqs[s * SEQ_LEN + t] = p;
        }
        for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) {
            cen[d] = centroid_add(s, d, float(table[p * DIM + d]));
        }
        barrier();
    }
}
