// One block of the filter (after filter_common.glsl): sequences [by·FBM, +FBM) × candidates
// [bx·FBN, +FBN). block_scores() puts the products ĉ·ê of the block into `scores` (tensor cores
// with COOPMAT, plain fp32 arithmetic in the stand-in); filter_block() turns them into filter keys
// F = (score · 2^-k) · finv, keeps each sequence's band (every unchosen candidate within 2γ of
// the block's best F, up to CAP) in `bands`, and re-scores exactly the blocks whose band does not
// fit (filter_common.glsl has the bound and the argument).

float score_at(uint i) { return scores[i]; }
shared float part_min[FW];
shared uint row_cnt[FBM];
shared uint ovf_rows[FBM];
shared uint ovf_n4[4];  // ovf_n; 16 bytes like every shared variable here
#define ovf_n ovf_n4[0]

#ifdef COOPMAT
#ifndef A_COLMAJOR
#define A_COLMAJOR false
#endif
#ifndef B_COLMAJOR
#define B_COLMAJOR true
#endif
// Four subgroups, each 32 sequences × 64 candidates: 2 × 4 tiles of 16 × 16, fp16 × fp16 → fp32.
// ĉ (row-major, stride DP) is the left operand, ê (rows of the table = columns of the right
// operand, stride DP) the right; both padded with zero rows to whole blocks, DP a multiple of 16.
void block_scores(uint s0, uint x0) {
    const uint sg = gl_SubgroupID;
    const uint r0 = (sg >> 1u) * 32u, cb = (sg & 1u) * 64u;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc00 = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc01 = acc00, acc02 = acc00, acc03 = acc00;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc10 = acc00, acc11 = acc00, acc12 = acc00, acc13 = acc00;
    const uint abase = (s0 + r0) * DP, bbase = (x0 + cb) * DP;
    for (uint k = 0u; k < DP; k += 16u) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a0, a1, b0, b1, b2, b3;
        coopMatLoadNV(a0, c16, abase + k, DP, A_COLMAJOR);
        coopMatLoadNV(a1, c16, abase + 16u * DP + k, DP, A_COLMAJOR);
        coopMatLoadNV(b0, ftab, bbase + k, DP, B_COLMAJOR);
        coopMatLoadNV(b1, ftab, bbase + 16u * DP + k, DP, B_COLMAJOR);
        coopMatLoadNV(b2, ftab, bbase + 32u * DP + k, DP, B_COLMAJOR);
        coopMatLoadNV(b3, ftab, bbase + 48u * DP + k, DP, B_COLMAJOR);
        acc00 = coopMatMulAddNV(a0, b0, acc00);
        acc01 = coopMatMulAddNV(a0, b1, acc01);
        acc02 = coopMatMulAddNV(a0, b2, acc02);
        acc03 = coopMatMulAddNV(a0, b3, acc03);
        acc10 = coopMatMulAddNV(a1, b0, acc10);
        acc11 = coopMatMulAddNV(a1, b1, acc11);
        acc12 = coopMatMulAddNV(a1, b2, acc12);
        acc13 = coopMatMulAddNV(a1, b3, acc13);
    }
    const uint o = r0 * FBN + cb;
    coopMatStoreNV(acc00, scores, o, FBN, false);
    coopMatStoreNV(acc01, scores, o + 16u, FBN, false);
    coopMatStoreNV(acc02, scores, o + 32u, FBN, false);
    coopMatStoreNV(acc03, scores, o + 48u, FBN, false);
    coopMatStoreNV(acc10, scores, o + 16u * FBN, FBN, false);
    coopMatStoreNV(acc11, scores, o + 16u * FBN + 16u, FBN, false);
    coopMatStoreNV(acc12, scores, o + 16u * FBN + 32u, FBN, false);
    coopMatStoreNV(acc13, scores, o + 16u * FBN + 48u, FBN, false);
    WG_BARRIER();
}
#else
// The stand-in: invocation i scores candidates x0 + i, + FW, … against the block's FBM
// sequences with plain fp32 arithmetic on the same fp16 operands (each product exact in fp32).
void block_scores(uint s0, uint x0) {
    for (uint c = gl_LocalInvocationID.x; c < FBN; c += FW) {
        float acc[FBM];
        for (uint r = 0u; r < FBM; ++r) acc[r] = 0.0;
        const uint xb = (x0 + c) * DP;
        for (uint d = 0u; d < DP; ++d) {
            const float e = float(ftab[xb + d]);
            for (uint r = 0u; r < FBM; ++r) acc[r] += float(c16[(s0 + r) * DP + d]) * e;
        }
        for (uint r = 0u; r < FBM; ++r) scores[r * FBN + c] = acc[r];
    }
    WG_BARRIER();
}
#endif

// Filter block (bx, by) of a step over n candidates: scores, band lists, fallback.
void filter_block(uint bx, uint by, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    const uint s0 = by * FBM, x0 = bx * FBN;
    block_scores(s0, x0);
    const uint TPR = FW / FBM, CPT = FBN / TPR;  // invocations a sequence, candidates each
    const uint r = lid / TPR, c0 = (lid % TPR) * CPT;
    const uint s = s0 + r;
    const bool live = s < BATCH;
    float gs = 0.0, g = 0.0;
    if (live) {
        gs = fseq[s].gscale;
        g = fseq[s].gamma;
    }
    float m = INF;
    if (live) {
        for (uint j = 0u; j < CPT; ++j) {
            const uint x = x0 + c0 + j;
            if (x < n && !chosen(s, x)) {
                precise float f = (score_at(r * FBN + c0 + j) * gs) * finv[x];
                m = min(m, f);
            }
        }
    }
    part_min[lid] = m;
    if (lid < FBM) row_cnt[lid] = 0u;
    if (lid == 0u) ovf_n = 0u;
    WG_BARRIER();
    float bmin = INF;
    for (uint t = 0u; t < TPR; ++t) bmin = min(bmin, part_min[r * TPR + t]);
    const uint nb = (n + FBN - 1u) / FBN;
    const uint base = (s * nb + bx) * BAND_WORDS;
    if (live && bmin < INF) {
        const float limit = bmin + 2.0 * g;
        for (uint j = 0u; j < CPT; ++j) {
            const uint x = x0 + c0 + j;
            if (x < n && !chosen(s, x)) {
                precise float f = (score_at(r * FBN + c0 + j) * gs) * finv[x];
                if (f <= limit) {
                    const uint slot = atomicAdd(row_cnt[r], 1u);
                    if (slot < CAP) {
                        bands[base + 2u + 2u * slot] = floatBitsToUint(f);
                        bands[base + 3u + 2u * slot] = x;
                    }
                }
            }
        }
    }
    WG_BARRIER();
    if (live && lid % TPR == 0u) {
        const uint cnt = row_cnt[r];
        bands[base] = floatBitsToUint(bmin);
        if (cnt > CAP) {
            bands[base + 1u] = OVERFLOW;
            ovf_rows[atomicAdd(ovf_n, 1u)] = r;
        } else {
            bands[base + 1u] = cnt;
        }
    }
    WG_BARRIER();
    // Fallback: the block's exact winner for every sequence whose band did not fit.
    const uint novf = ovf_n;
    for (uint i = 0u; i < novf; ++i) {
        const uint ss = s0 + ovf_rows[i];
        float bk = INF;
        uint bi = NO_INDEX;
        for (uint c = lid; c < FBN; c += FW) {
            const uint x = x0 + c;
            if (x < n && !chosen(ss, x)) {
                const float key = exact_key(ss, x);
                if (less(key, x, bk, bi)) { bk = key; bi = x; }
            }
        }
        workgroup_argmin(bk, bi);
        if (lid == 0u) {
            const uint b2 = (ss * nb + bx) * BAND_WORDS;
            bands[b2 + 2u] = floatBitsToUint(red_pick_key);
            bands[b2 + 3u] = red_pick;
        }
    }
}
