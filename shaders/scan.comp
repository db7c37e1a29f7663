#version 450
// Scan shapes "untiled" (tile_size = 0) and "in-shader tiles": each workgroup advances SB
// sequences of the batch by `slot_count` steps (the host sends 1: one step per dispatch); each
// step scans every candidate, tile by tile, then commits each sequence's pick.
#include "scan_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint start_slot;  // first step to compute (>= 1)
    uint slot_count;  // steps in this dispatch
    uint tile_size;   // candidates per tile; 0 = one pass over all
} pc;

shared float cen[SB * DIM];
shared uint mask_s[SB * MASK_WORDS];
shared uint picks[SB];

uint first_seq() { return gl_WorkGroupID.x * SB; }

bool chosen(uint j, uint x) { return (mask_s[j * MASK_WORDS + (x >> 5u)] & (1u << (x & 31u))) != 0u; }

#include "scan_dot.glsl"

void main() {
    const uint s0 = first_seq();
    const uint lid = gl_LocalInvocationID.x;
    const uint WG = gl_WorkGroupSize.x;
    const uint n = pc.num_items;
    const uint nseq = min(SB, BATCH - s0);
    for (uint i = lid; i < SB * DIM; i += WG) {
        uint j = i / DIM;
        cen[i] = j < nseq ? centroid_value(s0 + j, i % DIM) : 0.0;
    }
    for (uint i = lid; i < SB * MASK_WORDS; i += WG) {
        uint j = i / MASK_WORDS;
        mask_s[i] = j < nseq ? mask_g[(s0 + j) * MASK_WORDS + i % MASK_WORDS] : 0u;
    }
    barrier();
    const uint tile = pc.tile_size == 0u ? n : pc.tile_size;
    for (uint t = pc.start_slot; t < pc.start_slot + pc.slot_count; ++t) {
        float bk[SB];
        uint bi[SB];
        for (uint j = 0u; j < SB; ++j) { bk[j] = INF; bi[j] = NO_INDEX; }
        for (uint begin = 0u; begin < n; begin += min(tile, n - begin)) {
            scan_range(begin, begin + min(tile, n - begin), bk, bi);
        }
        for (uint j = 0u; j < SB; ++j) {
            workgroup_argmin(bk[j], bi[j]);
            if (lid == 0u) picks[j] = red_pick;
        }
        barrier();
        if (lid < nseq) {
            const uint j = lid;
            const uint p = picks[j];
            mask_s[j * MASK_WORDS + (p >> 5u)] |= 1u << (p & 31u);
            mask_g[(s0 + j) * MASK_WORDS + (p >> 5u)] = mask_s[j * MASK_WORDS + (p >> 5u)];
            seqs[(s0 + j) * SEQ_LEN + t] = p;
        }
        for (uint i = lid; i < nseq * DIM; i += WG) {
            uint j = i / DIM, d = i % DIM;
            cen[i] = centroid_add(s0 + j, d, float(table[picks[j] * DIM + d]));
        }
        barrier();
    }
}
