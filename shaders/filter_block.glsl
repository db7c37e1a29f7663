// One block of the filter (after filter_common.glsl): sequences [by·FBM, +FBM) × candidates
// [bx·FBN, +FBN). block_scores() computes the products ĉ·ê of the block (tensor cores with
// COOPMAT, plain fp32 arithmetic in the stand-in) and puts them into `smem` SCORE_ROWS rows at a
// time; for each such stage the epilogue turns them into filter keys F = (score · 2^-k) · finv,
// keeps each sequence's band (every unchosen candidate within 2γ of the block's best F, up to
// CAP) in `bands`; then the blocks whose band does not fit are re-scored exactly
// (filter_common.glsl has the bound and the argument). With tensor cores the epilogue takes
// the same keys, minima and bands from the accumulator fragments instead (FILTER_ACC_EPI, the
// default; block_scores), and stages the products only where their layout is not the one it
// can use, in the probe, or with FILTER_STAGED_EPI defined at build time.

// Score i of the staged rows (row-major, FBN wide).
float score_at(uint i) { return uintBitsToFloat(smem[i >> 2u][i & 3u]); }
shared uint ovf_rows[FBM];
// What the epilogue reads per row and candidate, fetched before the products so that its
// latency hides behind them: 2^-k and γ per row, finv per candidate, the rows' mask words.
shared float row_gs[FBM];
shared float row_g[FBM];
shared float cand_finv[FBN];
shared uint row_mask[FBM * (FBN / 32u)];
shared uint ovf_n4[4];  // ovf_n; 16 bytes like every shared variable here
#define ovf_n ovf_n4[0]
#if defined(COOPMAT) && defined(FILTER_ACC_EPI)
// The epilogue on the accumulators (FILTER_ACC_EPI, the default; block_scores): a
// 16 × 16 fp32 matrix whose element (r, c) is r·16 + c (exact in fp32), from which each
// invocation learns the coordinates of the fragment elements it holds; per row of the block its
// best F as order-preserving bits (acc_key_bits) and its band's entries so far. 1 KiB + 2 × 4·FBM
// bytes, multiples of 16.
shared uvec4 acc_coords[64];
shared uint acc_min[FBM];
shared uint acc_cnt[FBM];
const uint ACC_INF_BITS = 0xff800000u;  // acc_key_bits(INF): the rows' initial best
#endif

// THE CLOCK PROFILE (FILTER_CLOCK, filter_common.glsl; nothing of it is compiled by default).
// Invocation 0 of the workgroup reads the subgroup clock at each phase boundary of a block and
// charges the ticks since its last read to the phase that ends there: FCLK_SETUP (block_setup's
// loads into row_gs … row_mask, up to block_scores), FCLK_STAGING (tensor cores: the k-stages'
// copies of the operands into smem with their two barriers and, with FILTER_PREFETCH, the
// next stage's prefetch and the first's), FCLK_PRODUCTS (the k-stages' fragment loads and
// coopMatMulAddNV; in the stand-in its whole fp32 product loop and the barrier after it),
// FCLK_EPILOGUE (keys, minima, bands: on the accumulators, or staged with scores_ready),
// FCLK_FALLBACK (the exact re-scoring of overflowing rows, and the flush). A clock read is no
// fence: a phase is charged with the stalls of what invocation 0's subgroup waits on there, so
// a load's latency lands where its value is first used (a prefetch's in the next stage's copy).
// At the end of the block, invocation 0 adds its sums and 1 (FCLK_BLOCKS) into 64-bit counters
// (atomicAdd of the low word, and a carry into the high word) in the unused words of FSeqEntry:
// counter k of block row by at sequence by·FBM + k, or at sequence k where that row has fewer
// than CLOCK_COUNTERS (10) sequences; none with a batch that small (ScanJob::filter_clock).
#ifdef FILTER_CLOCK
#define FCLK_SETUP 0
#define FCLK_STAGING 1
#define FCLK_PRODUCTS 2
#define FCLK_EPILOGUE 3
#define FCLK_FALLBACK 4
#define FCLK_BLOCKS 5
// The epilogue on the accumulators split (FCLK_EPILOGUE then gets the rest, ~0): the keys and
// per-element minima, their reduction to the rows' best (with its barrier), the band entries
// (with theirs), the headers (with theirs).
#define FCLK_EPI_KEYS 6
#define FCLK_EPI_REDUCE 7
#define FCLK_EPI_BAND 8
#define FCLK_EPI_HEAD 9
// (filter_common.glsl's clock: counter k of block row by at sequence by·FBM + k.)
#define FCLK_BEGIN() CLOCK_BEGIN()
#define FCLK(k) CLOCK_ADD(k)
#define FCLK_FLUSH(s0) clock_flush(s0, FCLK_BLOCKS);
#else
#define FCLK_BEGIN()
#define FCLK(k)
#define FCLK_FLUSH(s0)
#endif

// Rows of the staged products a subgroup takes at a time in the epilogue (epilogue_rows): 4 by
// default; another value at build time through DIVERSITY_SHADER_DEFINES (build.rs), e.g.
// FILTER_RG=8u for bench/h200-filter-rg8.sh. Each lane keeps RG four-key groups and RG minima.
#ifndef FILTER_RG
#define FILTER_RG 4u
#endif

// Set by scan_filter_probe.comp: the staged products are checked instead of filtered.
bool probe_products = false;

// Band slot `slot` of the record at `base`: filter key f of candidate x (kept if it fits).
void band_entry(uint base, uint slot, float f, uint x) {
    if (slot < CAP) {
        bands[base + 2u + 2u * slot] = floatBitsToUint(f);
        bands[base + 3u + 2u * slot] = x;
    }
}

// The record's header: the block's best filter key and the band's size, or OVERFLOW (row r of
// the block then goes to the exact fallback).
void band_header(uint base, float bmin, uint cnt, uint r) {
    bands[base] = floatBitsToUint(bmin);
    if (cnt > CAP) {
        bands[base + 1u] = OVERFLOW;
        ovf_rows[atomicAdd(ovf_n, 1u)] = r;
    } else {
        bands[base + 1u] = cnt;
    }
}

// The filter keys F = (score · 2^-k) · finv of row r's candidates 4cq … 4cq + 3 (INF for a
// chosen candidate or one past n), from one 16-byte read of the scores staged from row h0.
// `fv`: the four candidates' finv (read once a stage by the caller that keeps them).
vec4 filter_keys_fv(uint r, uint h0, uint cq, uint x0, uint n, vec4 fv) {
    const uint MW = FBN / 32u;
    const vec4 sc = uintBitsToFloat(smem[(r - h0) * (FBN / 4u) + cq]);
    const uint word = row_mask[r * MW + (cq >> 3u)] >> ((4u * cq) & 31u);
    const float gs = row_gs[r];
    vec4 f = vec4(INF);
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
        if (x0 + 4u * cq + j < n && (word & (1u << j)) == 0u) {
            precise float v = (sc[j] * gs) * fv[j];
            f[j] = v;
        }
    }
    return f;
}

vec4 filter_keys(uint r, uint h0, uint cq, uint x0, uint n) {
    const vec4 fv = vec4(cand_finv[4u * cq], cand_finv[4u * cq + 1u], cand_finv[4u * cq + 2u],
                         cand_finv[4u * cq + 3u]);
    return filter_keys_fv(r, h0, cq, x0, n, fv);
}

// The epilogue of rows [h0, h0 + SCORE_ROWS) of block (bx, s0 / FBM), their scores staged: one
// subgroup per sequence row at a time; lane l reads candidates l, l + SG, … (consecutive lanes,
// consecutive addresses: no shared-memory bank conflicts), the row's best F by subgroupMin, the
// band's slots by ballot.
void epilogue_rows(uint h0, uint s0, uint x0, uint bx, uint n) {
    const uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    const uint nb = (n + FBN - 1u) / FBN;
    const uint h1 = h0 + SCORE_ROWS;
#ifdef FILTER_PROFILE_SCORES_ONLY
    for (uint r = h0 + gl_LocalInvocationID.x; r < h1; r += FW) {
        if (s0 + r < BATCH) {
            bands[((s0 + r) * nb + bx) * BAND_WORDS] = floatBitsToUint(score_at((r - h0) * FBN));
            bands[((s0 + r) * nb + bx) * BAND_WORDS + 1u] = 0u;
        }
    }
    return;
#endif
    // RG rows a subgroup at a time (their loads and reductions are independent, so their
    // latencies overlap); lane l takes candidates 4l … 4l + 3, 4(l + SG) …: one 16-byte read.
    // Subgroup g of NS takes rows [h0 + RG·g, +RG), [h0 + RG·(g + NS), +RG), …: every row of
    // [h0, h1) once, as SCORE_ROWS is a multiple of RG: otherwise this array's size is 0, a
    // compile error (the preprocessor cannot check it: its #if takes no 64u).
    const uint RG = FILTER_RG;
    uint filter_rg_must_divide_score_rows[SCORE_ROWS % RG == 0u ? 1 : 0];
    if (FBN / 4u <= sgs) {
        // One 16-byte group of four candidates a lane: the keys stay in registers between the
        // block minimum and the band.
        const uint cq = lane;
        const bool has = cq < FBN / 4u;
        // The lane's four candidates' finv, read once for all its rows.
        const uint cf = min(cq, FBN / 4u - 1u);
        const vec4 fv = vec4(cand_finv[4u * cf], cand_finv[4u * cf + 1u], cand_finv[4u * cf + 2u],
                             cand_finv[4u * cf + 3u]);
        for (uint rb = h0 + gl_SubgroupID * RG; rb < h1; rb += gl_NumSubgroups * RG) {
            vec4 f[RG];
            float bmin[RG];
            [[unroll]] for (uint q = 0u; q < RG; ++q) {
                const uint r = rb + q;
                f[q] = (has && s0 + r < BATCH) ? filter_keys_fv(r, h0, cq, x0, n, fv) : vec4(INF);
                bmin[q] = subgroupMin(min(min(f[q].x, f[q].y), min(f[q].z, f[q].w)));
            }
            [[unroll]] for (uint q = 0u; q < RG; ++q) {
                const uint r = rb + q, s = s0 + r;
                if (s >= BATCH) continue;  // the same in every lane
                const float limit = bmin[q] + 2.0 * row_g[r];
                // A row with no candidate left (bmin = INF) has an empty band.
                const bvec4 in_band = bmin[q] < INF ? lessThanEqual(f[q], vec4(limit)) : bvec4(false);
                // The band's slots by one ballot per component (the entries' order within a
                // record is free: the judge takes the (key, index) least): component j's entries
                // after those of components < j, lane by lane within it.
                const uint base = (s * nb + bx) * BAND_WORDS;
                uint cnt = 0u;
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    const uvec4 bal = subgroupBallot(in_band[j]);
                    if (in_band[j]) {
                        band_entry(base, cnt + subgroupBallotExclusiveBitCount(bal), f[q][j],
                                   x0 + 4u * cq + j);
                    }
                    cnt += subgroupBallotBitCount(bal);
                }
                if (lane == 0u) band_header(base, bmin[q], cnt, r);
            }
        }
    } else
    for (uint rb = h0 + gl_SubgroupID * RG; rb < h1; rb += gl_NumSubgroups * RG) {
        float bmin[RG];
        [[unroll]] for (uint q = 0u; q < RG; ++q) {
            const uint r = rb + q;
            float m = INF;
            if (s0 + r < BATCH) {
                for (uint cq = lane; cq < FBN / 4u; cq += sgs) {
                    const vec4 f = filter_keys(r, h0, cq, x0, n);
                    m = min(m, min(min(f.x, f.y), min(f.z, f.w)));
                }
            }
            bmin[q] = subgroupMin(m);
        }
        [[unroll]] for (uint q = 0u; q < RG; ++q) {
            const uint r = rb + q, s = s0 + r;
            if (s >= BATCH) continue;  // the same in every lane
            const float limit = bmin[q] + 2.0 * row_g[r];
            const uint base = (s * nb + bx) * BAND_WORDS;
            // Count this lane's band entries, place them after the lower lanes' (few lanes
            // have any), then write them.
            uint mine = 0u;
            if (bmin[q] < INF) {
                for (uint cq = lane; cq < FBN / 4u; cq += sgs) {
                    const vec4 f = filter_keys(r, h0, cq, x0, n);
                    mine += uint(f.x <= limit) + uint(f.y <= limit) + uint(f.z <= limit) + uint(f.w <= limit);
                }
            }
            const uint cnt = subgroupAdd(mine);
            uint slot = subgroupExclusiveAdd(mine);
            if (mine > 0u) {
                for (uint cq = lane; cq < FBN / 4u; cq += sgs) {
                    const vec4 f = filter_keys(r, h0, cq, x0, n);
                    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                        if (f[j] <= limit) band_entry(base, slot++, f[j], x0 + 4u * cq + j);
                    }
                }
            }
            if (lane == 0u) band_header(base, bmin[q], cnt, r);
        }
    }
}

// The probe's check of staged rows [h0, h0 + SCORE_ROWS) of block (0, 0): each score and beside
// it the same product in plain fp32 arithmetic, as (score, reference) pairs in `bands`.
void probe_rows(uint h0) {
    for (uint i = gl_LocalInvocationID.x; i < SCORE_ROWS * FBN; i += FW) {
        const uint r = h0 + i / FBN, c = i % FBN;
        float acc = 0.0;
        for (uint d = 0u; d < DP; ++d) acc += float(c16[r * DP + d]) * float(ftab[c * DP + d]);
        bands[2u * (h0 * FBN + i)] = floatBitsToUint(score_at(i));
        bands[2u * (h0 * FBN + i) + 1u] = floatBitsToUint(acc);
    }
}

// Staged rows [h0, h0 + SCORE_ROWS) are in `smem` (after a workgroup barrier): filter them (or
// check them, in the probe); ends with a workgroup barrier, so the next stage may overwrite them.
void scores_ready(uint h0, uint s0, uint x0, uint bx, uint n) {
    if (probe_products) {
        probe_rows(h0);
    } else {
        epilogue_rows(h0, s0, x0, bx, n);
    }
    WG_BARRIER();
}

// The block's setup: what the epilogue reads per row and candidate into shared memory (2^-k
// and γ per row, finv per candidate, the rows' mask words; with the accumulator epilogue, its
// coordinate fragment and the rows' initial best and count), made visible by the first
// workgroup barrier of block_scores. (Issuing the tensor cores' first stage loads before these,
// so that both wait on memory together, measured no faster on an H200: BENCHMARKS.md.)
void block_setup(uint s0, uint x0, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    if (lid == 0u) ovf_n = 0u;
    const uint MW = FBN / 32u;  // mask words of a block's candidates (x0 is a multiple of 32)
    for (uint i = lid; i < FBM; i += FW) {
        const bool ok = s0 + i < BATCH;
        row_gs[i] = ok ? fseq[s0 + i].gscale : 0.0;
        row_g[i] = ok ? fseq[s0 + i].gamma : 0.0;
    }
    for (uint i = lid; i < FBN; i += FW) cand_finv[i] = x0 + i < n ? finv[x0 + i] : 0.0;
#if defined(COOPMAT) && defined(FILTER_ACC_EPI)
    for (uint i = lid; i < 64u; i += FW) {
        const uint v = 4u * i;  // the flat index r·16 + c of the uvec4's first float
        acc_coords[i] = uvec4(floatBitsToUint(float(v)), floatBitsToUint(float(v + 1u)),
                              floatBitsToUint(float(v + 2u)), floatBitsToUint(float(v + 3u)));
    }
    for (uint i = lid; i < FBM; i += FW) {
        acc_min[i] = ACC_INF_BITS;
        acc_cnt[i] = 0u;
    }
#endif
    for (uint i = lid; i < FBM * MW; i += FW) {
        const uint r = i / MW, w = x0 / 32u + i % MW;
        // Past the batch or the table: every candidate counts as chosen.
        row_mask[i] = (s0 + r < BATCH && w < MASK_WORDS) ? mask_g[(s0 + r) * MASK_WORDS + w] : 0xffffffffu;
    }
}

#ifdef COOPMAT
// Tensor cores: FW / 32 subgroups (four by default; FILTER_WG), each 16·TI sequences × 64
// candidates (TI × 4 tiles of 16 × 16, fp16 × fp16 → fp32; ĉ the left operand, row-major, ê rows
// the columns of the right): each A fragment loaded from shared memory serves four products,
// each B fragment TI. SK dims at a time of the block's ĉ rows (FBM) and ê rows (128) go through
// `smem`, copied by the whole workgroup with 16-byte loads straight through (FILTER_PREFETCH=1
// issues them one stage ahead into registers: 223 registers instead of 151, so two workgroups an
// SM instead of three, and 1.7% slower on an H200: BENCHMARKS.md); rows are padded by 16 bytes
// so that the tile loads of a subgroup hit distinct banks. After the last stage the same memory
// takes the products, SCORE_ROWS rows at a time (subgroup pair p holds rows [16·TI·p, +16·TI)).
// The register count decides the workgroups an SM: an epilogue that computed the layout's
// checks before the keys took 169 (two an SM) and ran 3-6% slower (BENCHMARKS.md).
const uint TI = FILTER_TI;
const uint SK = FILTER_SK;           // dims a stage (filter_common.glsl defines it)
const uint QR = SK / 8u;             // uvec4s of data a staged row
const uint SROW = QR + 1u;           // uvec4s a staged row: QR of data, 1 of padding
const uint A_OFF = 0u, B_OFF = FBM * SROW;
const uint A_DUTY = FBM * QR / FW;   // uvec4s each invocation copies a stage
const uint B_DUTY = FBN * QR / FW;
#ifndef FILTER_PREFETCH
#define FILTER_PREFETCH 0
#endif

#ifdef FILTER_ACC_EPI
// Elements of a 16 × 16 fp32 fragment an invocation holds when a subgroup of 32 holds each of
// the 256 once (block_scores checks the length; otherwise it takes the staged path).
const uint ACC_E = 8u;
// Order-preserving bits of a float (not NaN): a ≤ b as floats iff acc_key_bits(a) ≤ acc_key_bits(b)
// as uints, except that −0 orders below +0 (which compare equal: the band's limit and every
// comparison of the judge are the same with either; only a zero best's sign could differ from
// the staged path's subgroupMin, which may return either). So atomicMin on the bits is the
// exact minimum whatever the order of the atomics.
uint acc_key_bits(float f) {
    const uint b = floatBitsToUint(f);
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}
float acc_key_value(uint u) {
    return uintBitsToFloat((u & 0x80000000u) != 0u ? (u & 0x7fffffffu) : ~u);
}
#endif

void block_scores(uint s0, uint x0, uint bx, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID;
    const uint r0 = (sg >> 1u) * 16u * TI, cb = (sg & 1u) * 64u;
    const uint DQ = DP / 8u;  // uvec4s a row in device memory
    FCLK(FCLK_SETUP)
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[TI * 4u];
    [[unroll]] for (uint t = 0u; t < TI * 4u; ++t) acc[t] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
#define A_AT(K0, t) ((K0) / 8u + ((lid + FW * (t)) % QR) < DQ \
    ? c16_v[(s0 + (lid + FW * (t)) / QR) * DQ + (K0) / 8u + (lid + FW * (t)) % QR] : uvec4(0u))
#define B_AT(K0, t) ((K0) / 8u + ((lid + FW * (t)) % QR) < DQ \
    ? ftab_v[(x0 + (lid + FW * (t)) / QR) * DQ + (K0) / 8u + (lid + FW * (t)) % QR] : uvec4(0u))
#define A_SLOT(t) (A_OFF + ((lid + FW * (t)) / QR) * SROW + ((lid + FW * (t)) % QR))
#define B_SLOT(t) (B_OFF + ((lid + FW * (t)) / QR) * SROW + ((lid + FW * (t)) % QR))
    // The products of the stage staged at OFF (uvec4s into smem), dims [K0, K0 + SK).
    // FILTER_UNROLL (a build-time knob) unrolls the stage's k-steps.
#ifdef FILTER_UNROLL
#define KK_LOOP [[unroll]] for (uint kk = 0u; kk < SK; kk += 16u) if (K0_ + kk < DP)
#else
#define KK_LOOP for (uint kk = 0u; kk < SK && K0_ + kk < DP; kk += 16u)
#endif
#define STAGE_PRODUCTS(OFF, K0) { \
        const uint K0_ = (K0); \
        KK_LOOP { \
            const uint kq = kk / 8u; \
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b[4]; \
            [[unroll]] for (uint j = 0u; j < 4u; ++j) { \
                coopMatLoadNV(b[j], smem, (OFF) + B_OFF + (cb + 16u * j) * SROW + kq, SROW, true); \
            } \
            [[unroll]] for (uint i = 0u; i < TI; ++i) { \
                fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a; \
                coopMatLoadNV(a, smem, (OFF) + A_OFF + (r0 + 16u * i) * SROW + kq, SROW, false); \
                [[unroll]] for (uint j = 0u; j < 4u; ++j) { \
                    acc[4u * i + j] = coopMatMulAddNV(a, b[j], acc[4u * i + j]); \
                } \
            } \
        } \
    }
    // A stage's copy in registers (ra, rb): loaded from dims [K0, K0 + SK), stored at OFF.
#define REGS_LOAD(K0) { \
        [[unroll]] for (uint t = 0u; t < A_DUTY; ++t) ra[t] = A_AT(K0, t); \
        [[unroll]] for (uint t = 0u; t < B_DUTY; ++t) rb[t] = B_AT(K0, t); \
    }
#define REGS_STORE(OFF) { \
        [[unroll]] for (uint t = 0u; t < A_DUTY; ++t) smem[(OFF) + A_SLOT(t)] = ra[t]; \
        [[unroll]] for (uint t = 0u; t < B_DUTY; ++t) smem[(OFF) + B_SLOT(t)] = rb[t]; \
    }
#if FILTER_DBUF
    // Two stage buffers (FILTER_DBUF): stage q in buffer q % 2. After the barrier that opens
    // stage q, buffer q % 2 holds it (copied during stage q − 1, or before the loop) and every
    // subgroup is done with the other (stage q − 1's products): stage q + 1 is copied into it
    // from registers loaded during stage q − 1, stage q + 2's loads are issued, then stage q's
    // products run. One barrier a stage.
    const uint STAGE = (FBM + FBN) * SROW;  // uvec4s a buffer
    uvec4 ra[A_DUTY], rb[B_DUTY];
    REGS_LOAD(0u)
    REGS_STORE(0u)
    if (SK < DP) REGS_LOAD(SK)
    uint cur = 0u;  // the offset of stage q's buffer: 0 or STAGE
    for (uint k0 = 0u; k0 < DP; k0 += SK) {
        WG_BARRIER();
        const uint nxt = STAGE - cur;
        if (k0 + SK < DP) {
            REGS_STORE(nxt)
            if (k0 + 2u * SK < DP) REGS_LOAD(k0 + 2u * SK)
        }
        FCLK(FCLK_STAGING)
        STAGE_PRODUCTS(cur, k0)
        FCLK(FCLK_PRODUCTS)
        cur = nxt;
    }
#else
#if FILTER_PREFETCH
    uvec4 ra[A_DUTY], rb[B_DUTY];
    REGS_LOAD(0u)
#endif
    for (uint k0 = 0u; k0 < DP; k0 += SK) {
        WG_BARRIER();
#if FILTER_PREFETCH
        REGS_STORE(0u)
#else
        [[unroll]] for (uint t = 0u; t < A_DUTY; ++t) smem[A_SLOT(t)] = A_AT(k0, t);
        [[unroll]] for (uint t = 0u; t < B_DUTY; ++t) smem[B_SLOT(t)] = B_AT(k0, t);
#endif
        WG_BARRIER();
#if FILTER_PREFETCH
        if (k0 + SK < DP) REGS_LOAD(k0 + SK)
#endif
        FCLK(FCLK_STAGING)
        STAGE_PRODUCTS(0u, k0)
        FCLK(FCLK_PRODUCTS)
    }
#endif
#undef REGS_LOAD
#undef REGS_STORE
#undef KK_LOOP
#undef STAGE_PRODUCTS
#undef A_AT
#undef B_AT
#undef A_SLOT
#undef B_SLOT
#if defined(FILTER_ACC_EPI) && !defined(FILTER_PROFILE_SCORES_ONLY)
    // THE EPILOGUE ON THE ACCUMULATORS (the default): the filter keys, each row's best
    // and band straight from the fragments, only 2 × FBM words through shared memory instead of
    // the staged 32 KiB of products. GL_NV_cooperative_matrix does not say which (row, column)
    // element e of a fragment holds, and NVIDIA's mma layout is not the driver's (BENCHMARKS.md,
    // 2026-12-01): each invocation reads its elements' coordinates from `coord`, a fragment of
    // the same type as the accumulators (so the same mapping: element-wise arithmetic between
    // matrices of one type needs it) loaded from acc_coords, whose (r, c) holds r·16 + c. With 8
    // elements an invocation and 32 invocations each of the 256 is held once (a load must keep
    // every element); any other length takes the staged path below. The probe's product check
    // (probe_products) takes it too.
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> coord;
    coopMatLoadNV(coord, acc_coords, 0u, 4u, false);
    if (!probe_products && coord.length() == int(ACC_E) && gl_SubgroupSize == 32u) {
        const uint lane = gl_SubgroupInvocationID;
        const uint MW = FBN / 32u;
        const uint mw0 = cb / 32u;  // the first of the subgroup's two mask words of a row
        // Fragment 4i + j covers rows r0 + 16i + [0, 16) and columns cb + 16j + [0, 16); its
        // element e is (r0 + 16i + rr_e, cb + 16j + cc_e) with (rr_e, cc_e) from coord[e], the
        // same for every i and j. First each element's F in place of its product, as
        // filter_keys_fv computes it (the same expression on the same fp32 product: the staged
        // path stores and reloads it exactly; INF for a chosen candidate, one past n, or a row past
        // the batch, whose mask words are all ones), and pm[8i + e] = the minimum over j.
        float pm[TI * ACC_E];
        [[unroll]] for (uint e = 0u; e < ACC_E; ++e) {
            const uint rc = uint(coord[int(e)]);
            const uint rr = rc >> 4u, cc = rc & 15u;
            float fv[4];
            [[unroll]] for (uint j = 0u; j < 4u; ++j) fv[j] = cand_finv[cb + 16u * j + cc];
            [[unroll]] for (uint i = 0u; i < TI; ++i) {
                const uint r = r0 + 16u * i + rr;
                const float gs = row_gs[r];
                // Columns cb + 16j + cc: word mw0 + j / 2, bit 16·(j % 2) + cc.
                const uint w0 = row_mask[r * MW + mw0], w1 = row_mask[r * MW + mw0 + 1u];
                float m = INF;
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    const uint word = (j < 2u ? w0 : w1) >> (16u * (j & 1u) + cc);
                    float f = INF;
                    if (x0 + cb + 16u * j + cc < n && (word & 1u) == 0u) {
                        precise float v = (acc[4u * i + j][int(e)] * gs) * fv[j];
                        f = v;
                    }
                    acc[4u * i + j][int(e)] = f;
                    m = min(m, f);
                }
                pm[ACC_E * i + e] = m;
            }
        }
        // Then the minima of elements that share a row, combined where the coordinates prove it
        // (checked for every invocation and element, so whatever the layout): element indices
        // e and e ^ m of one invocation (emask), and element e of invocations l and l ^ m
        // (lmask, by shuffles). After them every member of a group {(l ^ a, e ^ b): a in
        // lmask's bits, b in emask's} holds the group's minimum, and its one member with those
        // bits clear (the leader) gives it to the row's atomicMin. Where nothing is proven each
        // element is its own group: more atomics, the same minimum.
        FCLK(FCLK_EPI_KEYS)
        uint emask = 0u, lmask = 0u;
        // (Macros, so that every index into pm is a constant.)
#define ACC_WITHIN(M) { \
            bool same = true; \
            [[unroll]] for (uint e = 0u; e < ACC_E; ++e) { \
                same = same && (uint(coord[int(e)]) >> 4u) == (uint(coord[int(e ^ (M))]) >> 4u); \
            } \
            if (subgroupAll(same)) { \
                emask |= (M); \
                [[unroll]] for (uint k = 0u; k < TI * ACC_E; ++k) pm[k] = min(pm[k], pm[k ^ (M)]); \
            } \
        }
#define ACC_ACROSS(M) { \
            bool same = true; \
            [[unroll]] for (uint e = 0u; e < ACC_E; ++e) { \
                const uint rr = uint(coord[int(e)]) >> 4u; \
                same = same && subgroupShuffleXor(rr, (M)) == rr; \
            } \
            if (subgroupAll(same)) { \
                lmask |= (M); \
                [[unroll]] for (uint k = 0u; k < TI * ACC_E; ++k) { \
                    pm[k] = min(pm[k], subgroupShuffleXor(pm[k], (M))); \
                } \
            } \
        }
        ACC_WITHIN(1u) ACC_WITHIN(2u) ACC_WITHIN(4u)
        ACC_ACROSS(1u) ACC_ACROSS(2u) ACC_ACROSS(4u) ACC_ACROSS(8u) ACC_ACROSS(16u)
#undef ACC_WITHIN
#undef ACC_ACROSS
        // The rows' best over both subgroups that hold them (an INF leaves the initial INF).
        [[unroll]] for (uint e = 0u; e < ACC_E; ++e) {
            const uint rr = uint(coord[int(e)]) >> 4u;
            [[unroll]] for (uint i = 0u; i < TI; ++i) {
                const float m = pm[ACC_E * i + e];
                if ((lane & lmask) == 0u && (e & emask) == 0u && m < INF) {
                    atomicMin(acc_min[r0 + 16u * i + rr], acc_key_bits(m));
                }
            }
        }
        WG_BARRIER();
        FCLK(FCLK_EPI_REDUCE)
        // The band: every F within the same limit as epilogue_rows' of its row's best, its slot
        // by the row's counter (the entries' order within a record is free: the judge takes the
        // (key, index) least); so the same entries, count and OVERFLOW as the staged path.
        // First which of each (element, row tile)'s four columns are in the band (four bits of
        // inb), then one atomicAdd an (element, row tile) with any for the first of their slots
        // (independent of each other: their latencies overlap, where one a candidate, each
        // needed by its store, ran one after the other: 55% of the epilogue on an H200), then
        // the entries.
        const uint nb = (n + FBN - 1u) / FBN;
        uint inb[TI];  // bits 4e + j: element e's column j in the band, row tile i
        [[unroll]] for (uint i = 0u; i < TI; ++i) inb[i] = 0u;
        [[unroll]] for (uint e = 0u; e < ACC_E; ++e) {
            const uint rr = uint(coord[int(e)]) >> 4u;
            [[unroll]] for (uint i = 0u; i < TI; ++i) {
                const uint r = r0 + 16u * i + rr;
                const float bmin = acc_key_value(acc_min[r]);
                const float limit = bmin + 2.0 * row_g[r];
                // A row with no candidate left (bmin = INF; every row past the batch) has an
                // empty band.
                const bool live = bmin < INF;
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    if (live && acc[4u * i + j][int(e)] <= limit) inb[i] |= 1u << (4u * e + j);
                }
            }
        }
        uint first[TI * ACC_E];
        [[unroll]] for (uint e = 0u; e < ACC_E; ++e) {
            const uint rr = uint(coord[int(e)]) >> 4u;
            [[unroll]] for (uint i = 0u; i < TI; ++i) {
                const uint m = (inb[i] >> (4u * e)) & 15u;
                first[ACC_E * i + e] = m != 0u ? atomicAdd(acc_cnt[r0 + 16u * i + rr], uint(bitCount(m))) : 0u;
            }
        }
        [[unroll]] for (uint e = 0u; e < ACC_E; ++e) {
            const uint rc = uint(coord[int(e)]);
            const uint rr = rc >> 4u, cc = rc & 15u;
            [[unroll]] for (uint i = 0u; i < TI; ++i) {
                const uint m = (inb[i] >> (4u * e)) & 15u;
                if (m == 0u) continue;
                const uint base = ((s0 + r0 + 16u * i + rr) * nb + bx) * BAND_WORDS;
                uint slot = first[ACC_E * i + e];
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    if ((m & (1u << j)) != 0u) {
                        band_entry(base, slot, acc[4u * i + j][int(e)], x0 + cb + 16u * j + cc);
                        slot += 1u;
                    }
                }
            }
        }
        WG_BARRIER();
        FCLK(FCLK_EPI_BAND)
        // The headers, one invocation a row; the fallback (filter_block) reads ovf_n after the
        // barrier, as after scores_ready's.
        for (uint r = lid; r < FBM; r += FW) {
            if (s0 + r < BATCH) {
                band_header(((s0 + r) * nb + bx) * BAND_WORDS, acc_key_value(acc_min[r]), acc_cnt[r], r);
            }
        }
        WG_BARRIER();
        FCLK(FCLK_EPI_HEAD)
        FCLK(FCLK_EPILOGUE)
        return;
    }
#endif
    // The products, row-major FBN wide in uvec4s (4 floats), SCORE_ROWS rows at a time: the
    // subgroups holding rows [h·SCORE_ROWS, +SCORE_ROWS) store them, then every subgroup filters.
    const uint st = FBN / 4u;
    [[unroll]] for (uint h = 0u; h < FBM / SCORE_ROWS; ++h) {
        WG_BARRIER();  // every subgroup is done with the staged operands (or the last rows)
        if (r0 / SCORE_ROWS == h) {
            [[unroll]] for (uint i = 0u; i < TI; ++i) {
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    coopMatStoreNV(acc[4u * i + j], smem,
                                   (r0 % SCORE_ROWS + 16u * i) * st + cb / 4u + 4u * j, st, false);
                }
            }
        }
        WG_BARRIER();
        scores_ready(h * SCORE_ROWS, s0, x0, bx, n);
    }
    FCLK(FCLK_EPILOGUE)
}
#else
// The stand-in: invocation i scores candidates x0 + i, + FW, … against the block's FBM
// sequences with plain fp32 arithmetic on the same fp16 operands (each product exact in fp32).
void block_scores(uint s0, uint x0, uint bx, uint n) {
    FCLK(FCLK_SETUP)
    for (uint c = gl_LocalInvocationID.x; c < FBN; c += FW) {
        float acc[FBM];
        for (uint r = 0u; r < FBM; ++r) acc[r] = 0.0;
        const uint xb = (x0 + c) * DP;
        for (uint d = 0u; d < DP; ++d) {
            const float e = float(ftab[xb + d]);
            for (uint r = 0u; r < FBM; ++r) acc[r] += float(c16[(s0 + r) * DP + d]) * e;
        }
        for (uint r = 0u; r < FBM; ++r) {
            const uint i = r * FBN + c;
            smem[i >> 2u][i & 3u] = floatBitsToUint(acc[r]);
        }
    }
    WG_BARRIER();
    FCLK(FCLK_PRODUCTS)
    scores_ready(0u, s0, x0, bx, n);
    FCLK(FCLK_EPILOGUE)
}
#endif

// Filter block (bx, by) of a step over n candidates: scores, band lists, fallback.
void filter_block(uint bx, uint by, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    const uint s0 = by * FBM, x0 = bx * FBN;
    FCLK_BEGIN()
    block_setup(s0, x0, n);
    block_scores(s0, x0, bx, n);  // the epilogue of every row; ends with a workgroup barrier
    const uint nb = (n + FBN - 1u) / FBN;
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
    FCLK(FCLK_FALLBACK)
    FCLK_FLUSH(s0)
}
