// The candidate scan, shared by the untiled / in-shader-tile shader and the dispatch-per-tile
// shader. A workgroup serves SB sequences (centroids in shared memory `cen`); each invocation
// takes CB candidates at a time and accumulates all SB × CB dot products over d in ascending
// order with one fused multiply-add each, so a row value loaded once serves SB sequences.
//
// The key of (sequence, candidate) is (c · e_x) / |e_x|: minimising it maximises
// d(x) = 1 - cos(c, e_x) for |c| > 0; a zero row has key 0 (d = 1); a centroid of exactly zero
// gives every key ±0, equal, so the lowest index wins (d = 1 for all). Its bits depend only on
// the pair, never on which workgroup, tile, chunk or batch computed it (SPEC §Exactness 1).
//
// Needs, from the including shader: `cen[SB * DIM]` and `bool chosen(uint j, uint x)`.

void scan_range(uint begin, uint end, inout float bk[SB], inout uint bi[SB]) {
    const uint WG = gl_WorkGroupSize.x;
    for (uint xb = begin; xb < end; xb += WG * CB) {
        uint xs[CB];
        for (uint k = 0u; k < CB; ++k) {
            uint x = xb + gl_LocalInvocationID.x + k * WG;
            xs[k] = x < end ? x : begin; // out-of-range lanes recompute a valid row, unused
        }
        float acc[SB * CB];
        for (uint i = 0u; i < SB * CB; ++i) acc[i] = 0.0;
        for (uint d = 0u; d < DIM; ++d) {
            float e[CB];
            for (uint k = 0u; k < CB; ++k) e[k] = float(table[xs[k] * DIM + d]);
            for (uint j = 0u; j < SB; ++j) {
                float c = cen[j * DIM + d];
                for (uint k = 0u; k < CB; ++k) {
                    precise float a = fma(c, e[k], acc[j * CB + k]);
                    acc[j * CB + k] = a;
                }
            }
        }
        for (uint k = 0u; k < CB; ++k) {
            uint x = xb + gl_LocalInvocationID.x + k * WG;
            if (x >= end) continue;
            float inv = inv_norm[x];
            for (uint j = 0u; j < SB; ++j) {
                precise float key = acc[j * CB + k] * inv;
                if (!chosen(j, x) && better(key, x, bk[j], bi[j])) { bk[j] = key; bi[j] = x; }
            }
        }
    }
}
