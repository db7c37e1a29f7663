#version 450
// A probe, not a kernel of the library: the second half of a filter whose GEMM wrote every key
// to device memory (cm2_gemm.comp's EPI 9 / 10; rows of N keys at a stride NS, a multiple of 8).
// Each row is cut into segments of SEG keys (a multiple of 8); one workgroup a (row, segment)
// reads its segment 16 bytes an invocation at a time (8 fp16 or 4 fp32 keys), finds the
// segment's minimum, then counts the segment's keys within `band` of it (a second pass over the
// same few KiB, from L1/L2) and writes (minimum, count) for the pair. The row's minimum is the
// least of its segments' minima, and its band lies inside the union of the segments' bands (each
// segment's minimum is at least the row's), as in the library's tile minima. Run by
// examples/cm2_probe.rs after each EPI 9 / 10 dispatch when CM2_STREAM names this SPIR-V.
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint F16 = 0;

layout(push_constant) uniform P { uint M; uint N; uint NS; uint SEG; float band; } p;
layout(binding = 0) readonly buffer K { uvec4 kv[]; };
layout(binding = 1) buffer R { vec2 res[]; };  // (minimum, count as a float) a (row, segment)

shared float s_part[64];  // one a subgroup

float wg_min(float v) {
    v = subgroupMin(v);
    if (gl_SubgroupInvocationID == 0u) s_part[gl_SubgroupID] = v;
    barrier();
    float m = s_part[0];
    for (uint q = 1u; q < gl_NumSubgroups; ++q) m = min(m, s_part[q]);
    barrier();
    return m;
}

float wg_sum(float v) {
    v = subgroupAdd(v);
    if (gl_SubgroupInvocationID == 0u) s_part[gl_SubgroupID] = v;
    barrier();
    float t = 0.0;
    for (uint q = 0u; q < gl_NumSubgroups; ++q) t += s_part[q];
    barrier();
    return t;
}

// The 8 (fp16) or 4 (fp32) keys of the 16 bytes at vector v; keys past N read +INF.
const float INF = uintBitsToFloat(0x7f800000u);
void keys_at(uint v, uint col0, out float k[8]) {
    const uvec4 w = kv[v];
    if (F16 != 0u) {
        for (uint q = 0u; q < 4u; ++q) {
            const vec2 h = unpackHalf2x16(w[q]);
            k[2u * q] = h.x;
            k[2u * q + 1u] = h.y;
        }
        for (uint q = 0u; q < 8u; ++q) if (col0 + q >= p.N) k[q] = INF;
    } else {
        for (uint q = 0u; q < 4u; ++q) k[q] = col0 + q < p.N ? uintBitsToFloat(w[q]) : INF;
        for (uint q = 4u; q < 8u; ++q) k[q] = INF;
    }
}

void main() {
    const uint row = gl_WorkGroupID.x;
    const uint seg = gl_WorkGroupID.y;
    const uint per = F16 != 0u ? 8u : 4u;  // keys a vector
    const uint c0 = seg * p.SEG;
    const uint c1 = min(c0 + p.SEG, p.N);
    if (row >= p.M || c0 >= p.N) return;
    const uint vbase = (row * p.NS) / per;
    float k[8];
    float m = INF;
    for (uint c = c0 + gl_LocalInvocationIndex * per; c < c1; c += 256u * per) {
        keys_at(vbase + c / per, c, k);
        for (uint q = 0u; q < 8u; ++q) m = min(m, k[q]);
    }
    m = wg_min(m);
    float cnt = 0.0;
    for (uint c = c0 + gl_LocalInvocationIndex * per; c < c1; c += 256u * per) {
        keys_at(vbase + c / per, c, k);
        for (uint q = 0u; q < 8u; ++q) cnt += k[q] <= m + p.band ? 1.0 : 0.0;
    }
    cnt = wg_sum(cnt);
    if (gl_LocalInvocationIndex == 0u) res[row * gl_NumWorkGroups.y + seg] = vec2(m, cnt);
}
