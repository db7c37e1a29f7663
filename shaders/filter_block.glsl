// One block of the filter (after filter_common.glsl): sequences [by·FBM, +FBM) × candidates
// [bx·FBN, +FBN). block_scores() puts the products ĉ·ê of the block into `scores` (tensor cores
// with COOPMAT, plain fp32 arithmetic in the stand-in); filter_block() turns them into filter keys
// F = (score · 2^-k) · finv, keeps each sequence's band (every unchosen candidate within 2γ of
// the block's best F, up to CAP) in `bands`, and re-scores exactly the blocks whose band does not
// fit (filter_common.glsl has the bound and the argument).

float score_at(uint i) { return scores[i]; }
shared uint ovf_rows[FBM];
// What the epilogue reads per row and candidate, fetched before the products so that its
// latency hides behind them: 2^-k and γ per row, finv per candidate, the rows' mask words.
shared float row_gs[FBM];
shared float row_g[FBM];
shared float cand_finv[FBN];
shared uint row_mask[FBM * (FBN / 32u)];
shared uint ovf_n4[4];  // ovf_n; 16 bytes like every shared variable here
#define ovf_n ovf_n4[0]

#ifdef COOPMAT
// Tensor cores: four subgroups, each 32 sequences × 64 candidates (2 × 4 tiles of 16 × 16,
// fp16 × fp16 → fp32; ĉ the left operand, row-major, ê rows the columns of the right). 16 dims
// at a time of the block's ĉ rows (64) and ê rows (128) go through shared memory, copied by the whole workgroup with 16-byte loads that are issued one stage ahead
// (registers), rows padded to 48 bytes so that tile loads hit distinct banks; each subgroup then
// loads its 2 + 4 tiles of 16 × 16 from there.
const uint SROW = 3u;  // uvec4s a staged row: 2 of data (16 fp16 values), 1 of padding
shared uvec4 As4[FBM * SROW];
shared uvec4 Bs4[FBN * SROW];

void block_scores(uint s0, uint x0) {
    // The copy duties below are for 128 invocations, 64 × 128 blocks.
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID;
    const uint r0 = (sg >> 1u) * 32u, cb = (sg & 1u) * 64u;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc00 = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc01 = acc00, acc02 = acc00, acc03 = acc00;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc10 = acc00, acc11 = acc00, acc12 = acc00, acc13 = acc00;
    // Copy duties: A has FBM × 2 uvec4s a stage (one an invocation), B FBN × 2 (two).
    const uint arow = lid >> 1u, ahalf = lid & 1u;
    const uint abase = (s0 + arow) * (DP / 8u) + ahalf;
    const uint bbase0 = (x0 + arow) * (DP / 8u) + ahalf;
    const uint bbase1 = (x0 + 64u + arow) * (DP / 8u) + ahalf;
    uvec4 ra = c16_v[abase], rb0 = ftab_v[bbase0], rb1 = ftab_v[bbase1];
    for (uint k = 0u; k < DP; k += 16u) {
        WG_BARRIER();
        As4[arow * SROW + ahalf] = ra;
        Bs4[arow * SROW + ahalf] = rb0;
        Bs4[(64u + arow) * SROW + ahalf] = rb1;
        WG_BARRIER();
        if (k + 16u < DP) {
            const uint q = (k + 16u) / 8u;
            ra = c16_v[abase + q];
            rb0 = ftab_v[bbase0 + q];
            rb1 = ftab_v[bbase1 + q];
        }
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a0, a1, b0, b1, b2, b3;
        coopMatLoadNV(a0, As4, r0 * SROW, SROW, false);
        coopMatLoadNV(a1, As4, (r0 + 16u) * SROW, SROW, false);
        coopMatLoadNV(b0, Bs4, cb * SROW, SROW, true);
        coopMatLoadNV(b1, Bs4, (cb + 16u) * SROW, SROW, true);
        coopMatLoadNV(b2, Bs4, (cb + 32u) * SROW, SROW, true);
        coopMatLoadNV(b3, Bs4, (cb + 48u) * SROW, SROW, true);
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

// Filter block (bx, by) of a step over n candidates: scores, band lists, fallback. One subgroup
// per sequence row at a time; lane l reads candidates l, l + SG, … (consecutive lanes,
// consecutive addresses: no shared-memory bank conflicts), the row's best F by subgroupMin, the
// band's slots by ballot.
void filter_block(uint bx, uint by, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    const uint s0 = by * FBM, x0 = bx * FBN;
    if (lid == 0u) ovf_n = 0u;
    const uint MW = FBN / 32u;  // mask words of a block's candidates (x0 is a multiple of 32)
    for (uint i = lid; i < FBM; i += FW) {
        const bool ok = s0 + i < BATCH;
        row_gs[i] = ok ? fseq[s0 + i].gscale : 0.0;
        row_g[i] = ok ? fseq[s0 + i].gamma : 0.0;
    }
    for (uint i = lid; i < FBN; i += FW) cand_finv[i] = x0 + i < n ? finv[x0 + i] : 0.0;
    for (uint i = lid; i < FBM * MW; i += FW) {
        const uint r = i / MW, w = x0 / 32u + i % MW;
        // Past the batch or the table: every candidate counts as chosen.
        row_mask[i] = (s0 + r < BATCH && w < MASK_WORDS) ? mask_g[(s0 + r) * MASK_WORDS + w] : 0xffffffffu;
    }
    block_scores(s0, x0);  // ends with a workgroup barrier
    const uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    const uint nb = (n + FBN - 1u) / FBN;
#ifdef FILTER_PROFILE_SCORES_ONLY
    if (lid < FBM && s0 + lid < BATCH) {
        bands[((s0 + lid) * nb + bx) * BAND_WORDS] = floatBitsToUint(score_at(lid));
        bands[((s0 + lid) * nb + bx) * BAND_WORDS + 1u] = 0u;
    }
    return;
#endif
    // RG rows a subgroup at a time: their loads and reductions are independent, so their
    // latencies overlap.
    const uint RG = 4u;
    for (uint rb = gl_SubgroupID * RG; rb < FBM; rb += gl_NumSubgroups * RG) {
        float bmin[RG];
        [[unroll]] for (uint q = 0u; q < RG; ++q) {
            const uint r = rb + q;
            float m = INF;
            if (s0 + r < BATCH) {
                const float gs = row_gs[r];
                for (uint c = lane; c < FBN; c += sgs) {
                    if (x0 + c < n && (row_mask[r * MW + (c >> 5u)] & (1u << (c & 31u))) == 0u) {
                        precise float f = (score_at(r * FBN + c) * gs) * cand_finv[c];
                        m = min(m, f);
                    }
                }
            }
            bmin[q] = subgroupMin(m);
        }
        [[unroll]] for (uint q = 0u; q < RG; ++q) {
            const uint r = rb + q, s = s0 + r;
            if (s >= BATCH) continue;  // the same in every lane
            const float gs = row_gs[r];
            const float limit = bmin[q] + 2.0 * row_g[r];
            const uint base = (s * nb + bx) * BAND_WORDS;
            uint cnt = 0u;
            for (uint c = lane; c < FBN; c += sgs) {
                const uint x = x0 + c;
                float f = INF;
                if (x < n && (row_mask[r * MW + (c >> 5u)] & (1u << (c & 31u))) == 0u) {
                    precise float v = (score_at(r * FBN + c) * gs) * cand_finv[c];
                    f = v;
                }
                const bool in_band = bmin[q] < INF && f <= limit;
                const uvec4 votes = subgroupBallot(in_band);
                const uint slot = cnt + subgroupBallotExclusiveBitCount(votes);
                if (in_band && slot < CAP) {
                    bands[base + 2u + 2u * slot] = floatBitsToUint(f);
                    bands[base + 3u + 2u * slot] = x;
                }
                cnt += subgroupBallotBitCount(votes);
            }
            if (lane == 0u) {
                bands[base] = floatBitsToUint(bmin[q]);
                if (cnt > CAP) {
                    bands[base + 1u] = OVERFLOW;
                    ovf_rows[atomicAdd(ovf_n, 1u)] = r;
                } else {
                    bands[base + 1u] = cnt;
                }
            }
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
