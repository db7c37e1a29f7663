// Shared by the filter-and-judge scan (ScanKernel::Coopmat, and ScanKernel::Filter, its scalar
// stand-in): a cheap fp16 filter scores every (sequence, candidate) pair, and the judge re-scores
// with the exact fp32 chain of scan_gemm*.glsl only the candidates the filter cannot rule out,
// so the sequences are the same bits as the Block64 / Block128 kernels'.
//
// THE BOUND. Notation: c = the fp32 centroid (cen32), e = a stored row, inv = inv_norm[x] (so
// |e|·inv ≤ 1 + 2u, u = 2^-24). Today's key is K = fl(chain(c·e) · inv), chain = the fused
// multiply-add chain over d = 0 … D−1. The filter's key is F = fl(fl(tc(ĉ·ê) · 2^-k) · finv) with
// ĉ = fp16(c · 2^k) (k: a power of two per sequence so that max|c_d|·2^k ∈ [2^13, 2^14)),
// ê = fp16(e · 2^j) (j per row likewise in fp32 mode; j = 0 and ê = e·1 exactly in fp16 mode),
// finv = inv · 2^-j (exact), tc = the filter's fp32 accumulation of the exact fp16 × fp16
// products (tensor cores: any order, truncating). Write δc = ĉ − c·2^k and δe = ê − e·2^j,
// measured, not assumed (so the bound holds whatever rounding the fp16 conversion uses), and per
// row ρ = |δe| / (2^j |e|), σ = |ê| / (2^j |e|), with ρ_max and σ_max over the table. Then
//   |chain(c·e) − c·e|            ≤ γ_D |c||e|,   γ_D = D·u / (1 − D·u)            (FMA chain)
//   |c·e − 2^-(k+j) ĉ·ê|          ≤ 2^-k |δc| σ |e| + |c| ρ |e|                    (Cauchy–Schwarz)
//   |ĉ·ê − tc(ĉ·ê)|               ≤ 8·D·u · |ĉ||ê| ≤ 8·D·u (|c|2^k + |δc|) σ 2^j |e|
// (an fp32 accumulation that truncates instead of rounding loses up to 2^-23 of the running sum of
// magnitudes per addition, and as much again where it aligns a block of products to the largest
// before adding: 2^-22·D; NVIDIA does not document its tensor cores' accumulation, so the bound
// takes twice that. A scalar fp32 sum, the stand-in's, is within D·u), and the two final products
// each add u·|key|. Multiplying by inv (|e|·inv ≤ 1 + 2u):
//   |F − K| ≤ γ = 1.01 · [ (γ_D + 2u + 8·D·u·σ_max + ρ_max) |c| + (1 + 8·D·u) σ_max 2^-k |δc| ].
// The factor 1.01 covers the 1 + 2u's, the fp32 evaluation of |c|, |δc| and γ themselves (each
// norm is inflated by 1 + 4u(D + 8) first) and the rounding of the band threshold below, which is
// far below 0.01·γ. An absolute 2^-100 covers underflow in the scaling of tiny centroids.
//
// THE BAND. If |F_x − K_x| ≤ γ for every x, the exact winner w (smallest K, lowest index on
// ties) has F_w ≤ K_w + γ ≤ K_y + γ ≤ F_y + 2γ for the y with the smallest F: w lies within 2γ of
// the best filter key, and so does every candidate tied with it. The filter keeps, per sequence
// and block of FBN candidates, up to CAP candidates within 2γ of the block's best filter key (a
// superset of those within 2γ of the global best); a block with more re-scores all its
// candidates exactly in the filter itself (the fallback) and passes on its exact winner. The
// judge re-scores the band with the exact chain and takes the (key, index) minimum: today's pick.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
// FILTER_CLOCK (a build-time knob, DIVERSITY_SHADER_DEFINES; the device needs VK_KHR_shader_clock,
// enabled by DIVERSITY_SHADER_CLOCK): invocation 0 of each filter workgroup reads the subgroup
// clock at the phase boundaries of filter_block (filter_block.glsl) and adds the ticks into the
// unused words of FSeqEntry (pad0, pad1); ScanJob::filter_clock reads them. Timing only: the same
// bits. Absent by default, when none of it is compiled.
#if defined(FILTER_CLOCK) && defined(FILTER_BLOCK)
#extension GL_ARB_shader_clock : require
#endif
// JUDGE_CLOCK: the same for the judge's phases (scan_judge.comp), into the same words, so not
// with FILTER_CLOCK.
#if defined(JUDGE_CLOCK) && defined(FILTER_JUDGE)
#extension GL_ARB_shader_clock : require
#endif
#if defined(JUDGE_CLOCK) && defined(FILTER_CLOCK)
#error "JUDGE_CLOCK and FILTER_CLOCK count into the same words: build with one of them"
#endif
// Only the filter itself (FILTER_BLOCK) uses cooperative matrices and their memory model.
#if defined(COOPMAT) && defined(FILTER_BLOCK)
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// The filter's epilogue works on the accumulator fragments (filter_block.glsl) unless
// FILTER_STAGED_EPI is defined at build time (DIVERSITY_SHADER_DEFINES, build.rs): then every
// block's products go through shared memory, as the fallback path does.
#if !defined(FILTER_STAGED_EPI) && !defined(FILTER_ACC_EPI)
#define FILTER_ACC_EPI 1
#endif
#ifdef FILTER_ACC_EPI
// The epilogue on the accumulators.
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#endif
// Under the Vulkan memory model (which the cooperative-matrix instructions bring), barrier()
// orders only non-private accesses: plain shared-memory loads after it may see stale values.
// Every workgroup barrier of the filter makes shared memory available and visible. Only shared
// memory passes values between its invocations within a dispatch (the operands, ĉ, ê and the
// rows' scales, are read-only there, and nothing reads what it writes to `bands` before the
// judge's dispatch, behind a pipeline barrier), so the barriers carry no buffer semantics: on
// an H200 that ran 1-2% faster than with them, the same bits (BENCHMARKS.md, 2026-12-02).
// FILTER_BUFFER_BAR (a build-time knob) adds them back.
#ifdef FILTER_BUFFER_BAR
#define WG_BARRIER() controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, \
    gl_StorageSemanticsShared | gl_StorageSemanticsBuffer, \
    gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible)
#else
#define WG_BARRIER() controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, \
    gl_StorageSemanticsShared, \
    gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible)
#endif
#endif

#ifdef COOPMAT
// Row tiles (16 sequences each) a subgroup holds: 2 (blocks of 64 × 128, each subgroup 32 × 64)
// or 4 (128 × 128, each subgroup 64 × 64: every fragment loaded serves four products, but 255
// registers and spills on an H200, and 27% slower: BENCHMARKS.md).
#ifndef FILTER_TI
#define FILTER_TI 2u
#endif
// Invocations of a filter workgroup (FILTER_WG): 128, four subgroups of 32 (two row groups of
// 16·TI sequences × two column groups of 64 candidates), or 256, eight subgroups (four row
// groups): blocks of 64 × 128 or 128 × 128 at TI = 2, every staged operand row serving 64 or 128
// rows of the other operand. The host reads FILTER_WG, FILTER_TI and FILTER_SK (build.rs,
// src/scan/mod.rs).
#ifndef FILTER_WG
#define FILTER_WG 128u
#endif
#define FW FILTER_WG
#define FBM (16u * FILTER_TI * (FW / 64u))  // sequences per filter block
#define FBN 128u  // candidates per filter block
// The block's products go through shared memory 64 rows at a time (128 × 128 fp32 products
// would take 64 KiB; the H200 allows 48 KiB a workgroup).
#define SCORE_ROWS 64u
#else
// The stand-in: blocks of 32 candidates, so that a subgroup of 8 (lavapipe's) takes one group
// of four candidates a lane, as the tensor-core filter's 32 lanes do with 128, and a subgroup
// of 4 two groups (the epilogue's two paths).
#define FBM 16u
#define FBN 32u
#define FW 64u
#define SCORE_ROWS FBM
#endif
#define SCAN_BN FBN
#ifdef FILTER_BLOCK
// The products [sequence][candidate] of SCORE_ROWS rows of the block as float bits, 4 a uvec4
// (and, in the tensor-core filter, first the staged operands). NVIDIA's cooperative-matrix loads and stores in shared
// memory need 16-byte alignment (a float array behind 8 bytes of other variables came back
// shifted by one element), which a uvec4 array has; and since the driver packs shared
// variables in an order of its own, every shared variable of the filter is a multiple of 16
// bytes anyway (scan_common.glsl, filter_block.glsl; the workgroup sizes are multiples of 4).
// ScanJob::filter_probe checks the products on a device.
#ifdef COOPMAT
// With tensor cores the operands of a stage of FILTER_SK dims go through it first: (FBM + FBN)
// rows of FILTER_SK / 8 uvec4s and one of padding (filter_block.glsl). With 64 × 128 blocks 96
// measured best on an H200 since the copies go straight through (no register prefetch): 1-2%
// faster than 64 on every row, at 176 registers against 151 (two workgroups an SM against three),
// for a third fewer barriers (BENCHMARKS.md, 2026-12-02; 128 does not fit in 48 KiB).
#ifndef FILTER_SK
#define FILTER_SK (FILTER_TI == 2u ? 96u : 32u)
#endif
// FILTER_DBUF (a build-time knob, 0 or 1): two stage buffers, the next stage copied into one
// while the other feeds the products, one workgroup barrier a stage instead of two
// (filter_block.glsl; slower on an H200: BENCHMARKS.md).
#ifndef FILTER_DBUF
#define FILTER_DBUF 0
#endif
shared uvec4 smem[max(SCORE_ROWS * FBN / 4u, (1u + FILTER_DBUF) * (FBM + FBN) * (FILTER_SK / 8u + 1u))];
#else
shared uvec4 smem[SCORE_ROWS * FBN / 4u];
#endif
#endif
#include "scan_common.glsl"

layout(constant_id = 6) const uint DP = 16u;           // D rounded up to 16: the fp16 row stride
layout(constant_id = 7) const uint CAP = 8u;           // band entries per (sequence, block)
layout(constant_id = 8) const float GAMMA_SCALE = 1.0; // 1; other values only in tests
const uint BAND_WORDS = 2u + 2u * CAP;                 // [best F, count, CAP × (F, index)]
const uint OVERFLOW = 0xffffffffu;                     // count of a block that fell back

// The filter's copy of the table: ê rows (fp16, DP wide, rows padded with zeros to whole blocks).
layout(std430, set = 0, binding = 9) buffer FTable { float16_t ftab[]; };
// ρ_max and σ_max (float bits, raised with atomicMax: non-negative floats order as their bits),
// then finv = inv_norm · 2^-j per (padded) row.
layout(std430, set = 0, binding = 10) buffer FConst {
    uint rho_bits;
    uint sigma_bits;
    uint fconst_pad0;
    uint fconst_pad1;
    float finv[];
};
// ĉ per sequence (fp16, DP wide, the batch padded with zero rows to whole blocks of FBM).
layout(std430, set = 0, binding = 11) buffer C16 { float16_t c16[]; };
#if defined(COOPMAT) && defined(FILTER_BLOCK)
// The same two buffers seen 16 bytes (8 values) at a time, for the tensor-core filter's copies
// (DP is a multiple of 16, so rows start on 16-byte boundaries).
layout(std430, set = 0, binding = 9) readonly buffer FTableV { uvec4 ftab_v[]; };
layout(std430, set = 0, binding = 11) readonly buffer C16V { uvec4 c16_v[]; };
#endif
// Per sequence: the filter scale 2^-k, γ, and counters for the report.
struct FSeqEntry {
    float gscale;
    float gamma;
    uint rescored;      // candidates re-scored exactly by the judge, all steps
    uint rescored_max;  // the most in one step
    uint overflows;     // blocks that fell back to exact scoring, all steps
    uint steps;         // steps judged
    // Unused, but with FILTER_CLOCK or JUDGE_CLOCK: the profile's 64-bit counters (low, high
    // word), counter k (< CLOCK_COUNTERS) of a row of 16 or more sequences at its k-th (below).
    uint pad0;
    uint pad1;
};
layout(std430, set = 0, binding = 12) buffer FSeq { FSeqEntry fseq[]; };
// The clock profiles (FILTER_CLOCK in filter_block.glsl, JUDGE_CLOCK in scan_judge.comp):
// invocation 0 of a workgroup keeps CLOCK_COUNTERS sums of subgroup-clock ticks; CLOCK_ADD(k)
// charges the ticks since its last read (2^32 − 1 at most, each sum saturating) to sum k, and
// clock_flush adds the sums, with 1 as counter `count`, into 64-bit counters (atomicAdd of the
// low word, a carry into the high word) in the unused words of FSeqEntry: counter k at sequence
// row0 + k, or at k where fewer than CLOCK_COUNTERS sequences follow row0 (a multiple of 16);
// none with a batch that small (ScanJob::filter_clock and judge_clock sum them).
#if (defined(FILTER_CLOCK) && defined(FILTER_BLOCK)) || (defined(JUDGE_CLOCK) && defined(FILTER_JUDGE))
#include "clock.glsl"
#define CLOCK_COUNTERS 10u
uvec2 clk_last;                 // invocation 0's last clock read
uint clk_sum[CLOCK_COUNTERS];   // its ticks a counter (each far below 2^32)
#define CLOCK_BEGIN() if (gl_LocalInvocationIndex == 0u) { \
    [[unroll]] for (uint k = 0u; k < CLOCK_COUNTERS; ++k) clk_sum[k] = 0u; \
    clk_last = clock2x32ARB(); \
}
#define CLOCK_ADD(k) if (gl_LocalInvocationIndex == 0u) { \
    const uvec2 d_ = clock_since(clk_last); \
    const uint t_ = d_.y == 0u ? d_.x : 0xffffffffu; \
    clk_sum[k] = clk_sum[k] + min(t_, ~clk_sum[k]); \
}
void clock_flush(uint row0, uint count) {
    if (gl_LocalInvocationIndex != 0u || BATCH < CLOCK_COUNTERS) return;
    const uint base = BATCH - row0 >= CLOCK_COUNTERS ? row0 : 0u;
    [[unroll]] for (uint k = 0u; k < CLOCK_COUNTERS; ++k) {
        const uint v = k == count ? 1u : clk_sum[k];
        if (v != 0u) {
            const uint old = atomicAdd(fseq[base + k].pad0, v);
            if (old + v < old) atomicAdd(fseq[base + k].pad1, 1u);
        }
    }
}
#endif
// Per (sequence, block): BAND_WORDS words (see BAND_WORDS; a fallen-back block: count OVERFLOW
// and entry 0 = its exact winner's (key, index)).
// Under the Vulkan memory model (the tensor-core filter) the filter's writes must be
// non-private to be made available to the judge's dispatch: coherent there.
#if defined(COOPMAT) && defined(FILTER_BLOCK)
#define FILTER_OUT coherent
#else
#define FILTER_OUT
#endif
layout(std430, set = 0, binding = 13) FILTER_OUT buffer Bands { uint bands[]; };

bool chosen(uint s, uint x) {
    return (mask_g[s * MASK_WORDS + (x >> 5u)] & (1u << (x & 31u))) != 0u;
}

// Today's key of candidate x for sequence s, operation for operation as scan_gemm*.glsl computes
// it: one fused multiply-add chain over d = 0 … D−1 from 0.0, then · inv_norm[x].
float exact_key(uint s, uint x) {
    float acc = 0.0;
    for (uint d = 0u; d < DIM; ++d) {
        precise float v = fma(cen32[s * DIM + d], float(table[x * DIM + d]), acc);
        acc = v;
    }
    precise float key = acc * inv_norm[x];
    return key;
}

// Workgroup-wide max, min and sum (every invocation gets the result): within each subgroup by
// subgroup arithmetic, then across subgroups through scan_common's red_key.
#define WG_REDUCE(NAME, SG_OP, COMBINE) \
float NAME(float v) { \
    const uint lid = gl_LocalInvocationID.x; \
    v = SG_OP(v); \
    WG_BARRIER(); \
    if (gl_SubgroupInvocationID == 0u) red_key[gl_SubgroupID] = v; \
    WG_BARRIER(); \
    float r = red_key[0]; \
    for (uint i = 1u; i < gl_NumSubgroups; ++i) r = COMBINE(r, red_key[i]); \
    WG_BARRIER(); \
    return r; \
}
float add2(float a, float b) { return a + b; }
WG_REDUCE(wg_max, subgroupMax, max)
WG_REDUCE(wg_min, subgroupMin, min)
WG_REDUCE(wg_sum, subgroupAdd, add2)

// The power of two k with max·2^k ∈ [2^13, 2^14) (0 for max = 0), clamped so 2^±k stays normal.
int scale_exponent(float m) {
    if (m <= 0.0) return 0;
    int e;
    frexp(m, e);  // m = f · 2^e, f ∈ [0.5, 1)
    return clamp(14 - e, -120, 120);
}

// 1 + 4u(D + 8): the inflation of a norm computed in fp32 over D terms.
float norm_inflation() {
    return 1.0 + 2.384185791e-7 * float(DIM + 8u);
}

// The sum over the workgroup of each component (every invocation gets them): both at once.
vec2 wg_sum2(vec2 v) {
    v = subgroupAdd(v);
    WG_BARRIER();
    if (gl_SubgroupInvocationID == 0u) {
        red_key[gl_SubgroupID] = v.x;
        red_idx[gl_SubgroupID] = floatBitsToUint(v.y);
    }
    WG_BARRIER();
    vec2 r = vec2(red_key[0], uintBitsToFloat(red_idx[0]));
    for (uint i = 1u; i < gl_NumSubgroups; ++i) r += vec2(red_key[i], uintBitsToFloat(red_idx[i]));
    WG_BARRIER();
    return r;
}

// ĉ, 2^-k and γ of sequence s from its fp32 centroid (cen32), by the whole workgroup; m is the
// largest |cen32[s·DIM + d]| over this invocation's d = lid, lid + WG, … (the caller's: the
// judge has the values at hand, having just written them). Each invocation reads back only the
// cen32 words it wrote, so a caller needs no barrier between its writes and this.
void filter_prepare_max(uint s, float m) {
    const uint lid = gl_LocalInvocationID.x;
    const float rho = uintBitsToFloat(rho_bits), sigma = uintBitsToFloat(sigma_bits);
    m = wg_max(m);
    const int k = scale_exponent(m);
    vec2 sums = vec2(0.0);  // |c·2^k|², |δc|²
    for (uint d = lid; d < DP; d += gl_WorkGroupSize.x) {
        const float v = d < DIM ? ldexp(cen32[s * DIM + d], k) : 0.0;
        c16[s * DP + d] = float16_t(v);
        precise float dd = float(c16[s * DP + d]) - v;  // the stored value, read back
        sums += vec2(v * v, dd * dd);
    }
    sums = wg_sum2(sums);
    const float c2 = sums.x, dl2 = sums.y;
    if (lid == 0u) {
        const float u = 5.9604644775390625e-8;  // 2^-24
        const float dim = float(DIM);
        const float gd = dim * u / (1.0 - dim * u);
        const float cn = sqrt(c2) * norm_inflation();   // |c|·2^k
        const float dn = sqrt(dl2) * norm_inflation();  // |δc|
        const float g = (gd + 2.0 * u + 8.0 * dim * u * sigma + rho) * cn
                      + (1.0 + 8.0 * dim * u) * sigma * dn;
        fseq[s].gscale = ldexp(1.0, -k);
        fseq[s].gamma = GAMMA_SCALE * (1.01 * ldexp(g, -k) + ldexp(1.0, -100));
    }
}

// filter_prepare_max with the maximum read from cen32 (scan_prep: step 0, or a resume).
void filter_prepare(uint s) {
    float m = 0.0;
    for (uint d = gl_LocalInvocationID.x; d < DIM; d += gl_WorkGroupSize.x) {
        m = max(m, abs(cen32[s * DIM + d]));
    }
    filter_prepare_max(s, m);
}
