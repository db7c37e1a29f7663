#version 450
// Exact k-NN, full-ranking path: one global compare-exchange step of a bitonic sort of every
// scratch row (A, in place) for strides too large for one workgroup (src/knn.rs). Pairs
// (i, i + j) with i & j = 0; ascending by (key, id) where i & size = 0, else descending.

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 3) buffer KeysA { float keys_a[]; };
layout(std430, set = 0, binding = 4) buffer IdsA { uint ids_a[]; };

layout(push_constant) uniform Push {
    uint stride; // scratch row stride (entries)
    uint len;    // padded row length P (a power of two)
    uint size;   // bitonic stage size
    uint j;      // compare distance
} pc;

bool less(float k, uint i, float bk, uint bi) {
    return k < bk || (k == bk && i < bi);
}

void main() {
    const uint p = gl_GlobalInvocationID.x;
    const uint q = gl_WorkGroupID.y;
    if (p >= pc.len / 2u) return;
    const uint i = (p / pc.j) * 2u * pc.j + (p % pc.j);
    const uint a = q * pc.stride + i, b = a + pc.j;
    const bool asc = (i & pc.size) == 0u;
    float ka = keys_a[a], kb = keys_a[b];
    uint ia = ids_a[a], ib = ids_a[b];
    if (less(kb, ib, ka, ia) == asc) {
        keys_a[a] = kb;
        ids_a[a] = ib;
        keys_a[b] = ka;
        ids_a[b] = ia;
    }
}
