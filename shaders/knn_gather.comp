#version 450
// Exact k-NN, last step (src/knn/scratch.rs): the first ke pairs of each of qn scratch rows of
// `stride` entries, packed for one download into binding 7: the keys' bits in [0, qn·ke), the
// ids in [qn·ke, 2·qn·ke). (Rows are K-bucket or tile wide; downloading ke entries a row as a
// copy region each cost the device microseconds a query.)
#include "knn_common.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 7) writeonly buffer Packed { uint packed_out[]; };

layout(push_constant) uniform Push {
    uint stride;  // scratch row stride (entries)
    uint ke;      // pairs kept a row
    uint qn;      // rows
    uint from_b;  // 1: rows in B, 0: in A
} pc;

void main() {
    const uint i = gl_GlobalInvocationID.x;
    const uint total = pc.qn * pc.ke;
    if (i >= total) return;
    const uint at = (i / pc.ke) * pc.stride + i % pc.ke;
    const float key = pc.from_b == 1u ? keys_b[at] : keys_a[at];
    const uint id = pc.from_b == 1u ? ids_b[at] : ids_a[at];
    packed_out[i] = floatBitsToUint(key);
    packed_out[total + i] = id;
}
