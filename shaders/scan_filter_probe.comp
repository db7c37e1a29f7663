#version 450
// A check of the filter's products, not part of a scan: filter block (0, 0) of the current step
// computes its scores as the filter does (tensor cores with COOPMAT) and, beside each, the same
// product ĉ·ê in plain fp32 arithmetic (filter_block.glsl's probe_rows); (score, reference)
// pairs go to the band buffer, which
// the next filter dispatch overwrites. ScanJob::filter_probe reads them back. With slot_count 1
// it runs filter block (0, 0) instead and leaves its band records (ScanJob::filter_probe_bands).
// Not profiled (FILTER_CLOCK): its block would count in the run's profile.
#undef FILTER_CLOCK
#define FILTER_BLOCK 1
#include "filter_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint start_slot;
    uint slot_count;
    uint tile_size;
} pc;

#include "filter_block.glsl"

void main() {
    if (pc.dim != DIM) return;  // the host validated it; never taken
    if (pc.slot_count == 1u) {
        // Mode 1: filter block (0, 0) as a step would, leaving its band records in place.
        filter_block(0u, 0u, pc.num_items);
        return;
    }
    probe_products = true;
    block_scores(0u, 0u, 0u, pc.num_items);
}
