#version 450
// Measures how many iterations one invocation's loop really runs (src/limits.rs): a loop of
// `n` iterations whose every iteration feeds the next (an LCG the compiler cannot fold), then
// the count and the hash. On a driver that caps loop iterations (Mesa's llvmpipe: 65,535 an
// invocation, all loops together) the count stops at the cap although the condition still holds.
layout(local_size_x = 1) in;
layout(std430, set = 0, binding = 0) buffer Out { uint result[]; };
layout(push_constant) uniform Push {
    uint n;    // iterations asked for
    uint seed;
} pc;

void main() {
    uint count = 0u;
    uint h = pc.seed;
    for (uint i = 0u; i < pc.n; ++i) {
        h = h * 1664525u + 1013904223u;
        count += 1u;
    }
    result[0] = count;
    result[1] = h;
}
