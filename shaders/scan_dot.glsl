// The candidate key: (c · e_x) / |e_x| with c in shared memory `cen`. Minimising it maximises
// d(x) = 1 - cos(c, e_x) for |c| > 0; a zero row has key 0 (d = 1). One invocation per
// candidate, four interleaved fused accumulators in a fixed order: the same bits in every shader
// that includes this. (A subgroup-per-candidate variant with subgroupAdd computed wrong picks on
// Mesa 22.3 lavapipe inside the multi-step loop; see the issue notes.)
float candidate_key(uint x) {
    uint base = x * DIM;
    precise float a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    uint d = 0u;
    for (; d + 4u <= DIM; d += 4u) {
        a0 = fma(cen[d], float(table[base + d]), a0);
        a1 = fma(cen[d + 1u], float(table[base + d + 1u]), a1);
        a2 = fma(cen[d + 2u], float(table[base + d + 2u]), a2);
        a3 = fma(cen[d + 3u], float(table[base + d + 3u]), a3);
    }
    for (; d < DIM; ++d) a0 = fma(cen[d], float(table[base + d]), a0);
    precise float dot = (a0 + a1) + (a2 + a3);
    precise float key = dot * inv_norm[x];
    return key;
}

// Best (key, index) over unchosen candidates in [begin, end), strided by the workgroup.
// A centroid of exactly zero gives every key ±0, equal, so the lowest index wins (d = 1 for all).
void scan_range(uint begin, uint end, inout float bk, inout uint bi) {
    for (uint x = begin + gl_LocalInvocationID.x; x < end; x += gl_WorkGroupSize.x) {
        if (!chosen(x)) {
            float k = candidate_key(x);
            if (better(k, x, bk, bi)) { bk = k; bi = x; }
        }
    }
}
