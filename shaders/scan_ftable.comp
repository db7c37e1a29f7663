#version 450
// The filter's copy of the table (filter_common.glsl), once per job: per row x (rows padded with
// zeros to whole blocks), ê = fp16(e · 2^j) DP wide, finv = inv_norm · 2^-j, and ρ_max, σ_max
// raised with atomicMax (FConst's first two words must be zero before). j puts the row's largest
// magnitude in [2^13, 2^14) for fp32 tables; fp16 tables are copied as they are (j = 0, ê = e).
// Workgroups walk rows in strides of the dispatch. Compiled twice (build.rs): `scan_ftable`
// and, with COOPMAT, `scan_ftable_tc` (the same code; the pair keeps the variants uniform).
#include "filter_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint rows;  // padded rows to write
} pc;

void main() {
    const uint lid = gl_LocalInvocationID.x;
    for (uint x = gl_WorkGroupID.x; x < pc.rows; x += gl_NumWorkGroups.x) {
        const bool real = x < pc.num_items;
        int j = 0;
#ifndef FP16
        float m = 0.0;
        if (real) {
            for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) m = max(m, abs(float(table[x * DIM + d])));
        }
        j = scale_exponent(wg_max(m));
#endif
        float e2 = 0.0, dl2 = 0.0, h2 = 0.0;
        for (uint d = lid; d < DP; d += gl_WorkGroupSize.x) {
            const float v = (real && d < DIM) ? ldexp(float(table[x * DIM + d]), j) : 0.0;
            ftab[x * DP + d] = float16_t(v);
            const float h = float(ftab[x * DP + d]);  // the stored value, read back
            precise float dd = h - v;
            e2 += v * v;
            dl2 += dd * dd;
            h2 += h * h;
        }
        e2 = wg_sum(e2);
        dl2 = wg_sum(dl2);
        h2 = wg_sum(h2);
        if (lid == 0u) {
            finv[x] = real ? ldexp(inv_norm[x], -j) : 0.0;
            if (real && e2 > 0.0) {
                // Numerators up, denominators down, by the norm inflation.
                const float f = norm_inflation();
                const float rho = sqrt(dl2) * f / (sqrt(e2) / f);
                const float sigma = sqrt(h2) * f / (sqrt(e2) / f);
                atomicMax(rho_bits, floatBitsToUint(rho * 1.0001));
                atomicMax(sigma_bits, floatBitsToUint(sigma * 1.0001));
            }
        }
    }
}
