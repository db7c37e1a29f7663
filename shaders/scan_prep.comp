#version 450
// Step 0 of the filter-and-judge scan, after scan_init (or a resume): each sequence's ĉ, 2^-k and
// γ from its fp32 centroid, counters zeroed (filter_common.glsl). One workgroup per sequence.
// Compiled twice (build.rs): `scan_prep` and, with COOPMAT, `scan_prep_tc`.
#include "filter_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
} pc;

void main() {
    const uint s = sequence_slot();
    if (pc.num_items == 0u || pc.dim != DIM) return;  // the host validated both; never taken
    if (gl_LocalInvocationID.x == 0u) {
        fseq[s].rescored = 0u;
        fseq[s].rescored_max = 0u;
        fseq[s].overflows = 0u;
        fseq[s].steps = 0u;
#if defined(FILTER_CLOCK) || defined(JUDGE_CLOCK)
        fseq[s].pad0 = 0u;  // the clock profiles (filter_block.glsl, scan_judge.comp)
        fseq[s].pad1 = 0u;
#endif
    }
    filter_prepare(s);
}
