// One block of the candidate scan: sequences [by·BM, +BM) × candidates [bx·BN, +BN). Each key
// (c · e_x) · (1/|e_x|) comes from one fused multiply-add chain over d in ascending order, the
// same for every pair whatever the block, tile, dispatch or batch, so the sequences are too.
// Minimising the key maximises d(x) = 1 - cos(c, e_x) for |c| > 0; a zero row has key 0 (d = 1);
// a zero centroid gives every key ±0, so the lowest index wins. The block's winner per sequence,
// over its unchosen candidates, goes to partial[s][bx].

// Sequences a block (the entry points' workgroup numbering reads it).
#define GEMM_M BM

shared float As[BK * BM];      // [k][sequence]
shared float Bs[BK * BN];      // [k][candidate]
shared float red_k[BM * 16u];  // [sequence][tx]
shared uint red_i[BM * 16u];

bool is_chosen(uint s, uint x) {
    return (mask_g[s * MASK_WORDS + (x >> 5u)] & (1u << (x & 31u))) != 0u;
}

void gemm_block(uint bx, uint by, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % 16u, ty = lid / 16u;
    const uint s0 = by * BM, x0 = bx * BN;
    float acc[TM * TN];
    for (uint i = 0u; i < TM * TN; ++i) acc[i] = 0.0;
    // Loader: row lr of the stage, dims lk .. lk+3.
    const uint lr = lid / 4u, lk = (lid % 4u) * 4u;
    for (uint k0 = 0u; k0 < DIM; k0 += BK) {
        for (uint q = 0u; q < 4u; ++q) {
            uint k = k0 + lk + q;
            uint s = s0 + lr, x = x0 + lr;
            if (lr < BM) As[(lk + q) * BM + lr] = (s < BATCH && k < DIM) ? cen32[s * DIM + k] : 0.0;
            Bs[(lk + q) * BN + lr] = (x < n && k < DIM) ? float(table[x * DIM + k]) : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < BK; ++kk) {
            float a[TM], b[TN];
            for (uint i = 0u; i < TM; ++i) a[i] = As[kk * BM + ty * TM + i];
            for (uint j = 0u; j < TN; ++j) b[j] = Bs[kk * BN + tx * TN + j];
            for (uint i = 0u; i < TM; ++i) {
                for (uint j = 0u; j < TN; ++j) {
                    precise float v = fma(a[i], b[j], acc[i * TN + j]);
                    acc[i * TN + j] = v;
                }
            }
        }
        barrier();
    }
    // Per sequence row: the best of this invocation's TN candidates, then of the block's BN.
    for (uint i = 0u; i < TM; ++i) {
        uint s = s0 + ty * TM + i;
        float bk = INF;
        uint bi = NO_INDEX;
        if (s < BATCH) {
            for (uint j = 0u; j < TN; ++j) {
                uint x = x0 + tx * TN + j;
                if (x < n && !is_chosen(s, x)) {
                    precise float key = acc[i * TN + j] * inv_norm[x];
                    if (less(key, x, bk, bi)) { bk = key; bi = x; }
                }
            }
        }
        red_k[(ty * TM + i) * 16u + tx] = bk;
        red_i[(ty * TM + i) * 16u + tx] = bi;
    }
    barrier();
    if (lid < BM) {
        uint s = s0 + lid;
        float bk = INF;
        uint bi = NO_INDEX;
        for (uint t = 0u; t < 16u; ++t) {
            float k = red_k[lid * 16u + t];
            uint i = red_i[lid * 16u + t];
            if (less(k, i, bk, bi)) { bk = k; bi = i; }
        }
        if (s < BATCH) {
            uint nbx = (n + BN - 1u) / BN;
            partial[2u * (s * nbx + bx)] = floatBitsToUint(bk);
            partial[2u * (s * nbx + bx) + 1u] = bi;
        }
    }
}
