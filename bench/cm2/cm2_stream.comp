#version 450
// A probe, not a kernel of the library: the second half of a filter whose GEMM wrote every key
// to device memory (cm2_gemm.comp's EPI 9 / 10): one workgroup a row reads the row's N keys
// (fp32, or fp16 with F16 = 1), finds their minimum, then counts the keys within `band` of it
// (a second pass, from L2) and writes (minimum, count) for the row. Run by examples/cm2_probe.rs
// after each EPI 9 / 10 dispatch when CM2_STREAM names this shader's SPIR-V.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint F16 = 0;

layout(push_constant) uniform P { uint M; uint N; float band; } p;
layout(binding = 0) readonly buffer K32 { float k32[]; };
layout(binding = 0) readonly buffer K16 { float16_t k16[]; };
layout(binding = 1) buffer R { vec2 res[]; };  // (minimum, count as a float) a row

shared float s_part[64];  // one a subgroup, subgroups of 4 or more

float key_at(uint i) { return F16 != 0u ? float(k16[i]) : k32[i]; }

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

void main() {
    const uint row = gl_WorkGroupID.x;
    if (row >= p.M) return;
    const uint base = row * p.N;
    float m = uintBitsToFloat(0x7f800000u);
    for (uint c = gl_LocalInvocationIndex; c < p.N; c += 256u) m = min(m, key_at(base + c));
    m = wg_min(m);
    float cnt = 0.0;
    for (uint c = gl_LocalInvocationIndex; c < p.N; c += 256u) cnt += key_at(base + c) <= m + p.band ? 1.0 : 0.0;
    cnt = wg_sum(cnt);
    if (gl_LocalInvocationIndex == 0u) res[row] = vec2(m, cnt);
}
