#version 450
// The judge and commit of the filter-and-judge scan, one workgroup per sequence: the best filter
// key over all blocks, then every band entry within 2γ of it re-scored with today's exact fp32
// chain (fallen-back blocks bring their exact winner), the (key, index) minimum is the pick;
// record it, mark it chosen, add it to the running sum as scan_commit does, and prepare the
// next step's ĉ, 2^-k and γ (filter_common.glsl). Compiled twice (build.rs): `scan_judge`
// (the stand-in's blocks of 32 candidates) and, with COOPMAT, `scan_judge_tc` (blocks of 128).
#define FILTER_JUDGE 1
#include "filter_common.glsl"

layout(push_constant) uniform Push {
    uint num_items;
    uint dim;
    uint slot;
} pc;

shared uint cand[gl_WorkGroupSize.x * CAP];
shared uint cand_n;
shared uint ovf_seen;
shared float cen_s[DIM];  // this sequence's fp32 centroid
// Candidate rows staged JR at a time (the host sizes JR to the shared memory; 0: read in place
// with filter_common's exact_key, one chain an invocation).
layout(constant_id = 9) const uint JR = 4u;
shared float rows_s[(JR + (JR == 0u ? 1u : 0u)) * DIM];

// JUDGE_CLOCK (a build-time knob, DIVERSITY_SHADER_DEFINES; the device needs
// VK_KHR_shader_clock, enabled by DIVERSITY_SHADER_CLOCK): invocation 0 of each workgroup reads
// the subgroup clock at the phase boundaries below and charges the ticks since its last read to
// the phase that ends there: JCLK_HEADERS (the centroid into shared memory, the best filter key
// over the blocks' headers, up to its reduction), JCLK_GATHER (the band entries within the limit
// into `cand`, round by round), JCLK_RESCORE (the candidate rows staged and their exact chains),
// JCLK_PICK (the (key, index) minimum, the pick's record and the running sum's update, up to
// filter_prepare_max), JCLK_PREPARE (the next step's ĉ, 2^-k and γ). At the end it adds its sums
// and 1 (JCLK_SEQS) into the 64-bit counters of the filter's profile (FSeqEntry's pad0, pad1):
// counter k at sequence 16·⌊s / 16⌋ + k, or at k where fewer than 10 sequences follow that
// (ScanJob::judge_clock). Timing only: the same bits. Nothing of it is compiled by default.
#ifdef JUDGE_CLOCK
#define JCLK_HEADERS 0
#define JCLK_GATHER 1
#define JCLK_RESCORE 2
#define JCLK_PICK 3
#define JCLK_PREPARE 4
#define JCLK_SEQS 5
// (filter_common.glsl's clock: counter k of the group of 16 sequences from s & ~15.)
#define JCLK_BEGIN() CLOCK_BEGIN()
#define JCLK(k) CLOCK_ADD(k)
#define jclk_flush(s) clock_flush((s) & ~15u, JCLK_SEQS)
#else
#define JCLK_BEGIN()
#define JCLK(k)
#define jclk_flush(s)
#endif

// exact_key (filter_common.glsl) for the row staged at rows_s[j], both operands in shared memory
// and read eight values ahead of the chain: the same fused multiply-adds in the same order.
float staged_key(uint j, uint x) {
    float acc = 0.0;
    const uint base = j * DIM;
    uint d = 0u;
    for (; d + 8u <= DIM; d += 8u) {
        float e[8], c[8];
        [[unroll]] for (uint q = 0u; q < 8u; ++q) {
            e[q] = rows_s[base + d + q];
            c[q] = cen_s[d + q];
        }
        [[unroll]] for (uint q = 0u; q < 8u; ++q) {
            precise float v = fma(c[q], e[q], acc);
            acc = v;
        }
    }
    for (; d < DIM; ++d) {
        precise float v = fma(cen_s[d], rows_s[base + d], acc);
        acc = v;
    }
    precise float key = acc * inv_norm[x];
    return key;
}

// The (key, index) minimum over the workgroup, every invocation gets it: by subgroups, then
// across subgroups through scan_common's red_key / red_idx.
void judge_argmin(inout float k, inout uint i) {
    float mk = subgroupMin(k);
    uint mi = subgroupMin(k == mk ? i : NO_INDEX);
    barrier();
    if (gl_SubgroupInvocationID == 0u) {
        red_key[gl_SubgroupID] = mk;
        red_idx[gl_SubgroupID] = mi;
    }
    barrier();
    k = red_key[0];
    i = red_idx[0];
    for (uint t = 1u; t < gl_NumSubgroups; ++t) {
        if (less(red_key[t], red_idx[t], k, i)) { k = red_key[t]; i = red_idx[t]; }
    }
    barrier();
}

void main() {
    const uint s = sequence_slot();
    const uint lid = gl_LocalInvocationID.x;
    const uint n = pc.num_items;
    const uint nb = (n + FBN - 1u) / FBN;
    JCLK_BEGIN()
    for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) cen_s[d] = cen32[s * DIM + d];
    float m = INF;
    for (uint b = lid; b < nb; b += gl_WorkGroupSize.x) {
        m = min(m, uintBitsToFloat(bands[(s * nb + b) * BAND_WORDS]));
    }
    const float gamma = fseq[s].gamma;
    m = wg_min(m);
    const float limit = m + 2.0 * gamma;
    float bk = INF;
    uint bi = NO_INDEX;
    uint rescored = 0u;
    if (lid == 0u) {
        cand_n = 0u;
        ovf_seen = 0u;
    }
    barrier();
    JCLK(JCLK_HEADERS)
    // Rounds of one block header an invocation: at most CAP entries each, so `cand` never
    // overflows; the gathered candidates are then scored in parallel.
    for (uint b0 = 0u; b0 < nb; b0 += gl_WorkGroupSize.x) {
        const uint b = b0 + lid;
        if (b < nb) {
            const uint base = (s * nb + b) * BAND_WORDS;
            if (uintBitsToFloat(bands[base]) <= limit) {
                const uint cnt = bands[base + 1u];
                if (cnt == OVERFLOW) {
                    atomicAdd(ovf_seen, 1u);
                    const float k = uintBitsToFloat(bands[base + 2u]);
                    const uint x = bands[base + 3u];
                    if (less(k, x, bk, bi)) { bk = k; bi = x; }
                } else {
                    for (uint i = 0u; i < cnt; ++i) {
                        if (uintBitsToFloat(bands[base + 2u + 2u * i]) <= limit) {
                            cand[atomicAdd(cand_n, 1u)] = bands[base + 3u + 2u * i];
                        }
                    }
                }
            }
        }
        barrier();
        JCLK(JCLK_GATHER)
        const uint cn = cand_n;
        if (JR == 0u) {
            for (uint i = lid; i < cn; i += gl_WorkGroupSize.x) {
                const uint x = cand[i];
                const float k = exact_key(s, x);
                if (less(k, x, bk, bi)) { bk = k; bi = x; }
            }
        } else {
            // JR rows at a time: copied by the whole workgroup (coalesced), then one chain each.
            for (uint g0 = 0u; g0 < cn; g0 += JR) {
                const uint g = min(JR, cn - g0);
                // Eight loads an invocation in flight at a time.
                for (uint i0 = 0u; i0 < g * DIM; i0 += 8u * gl_WorkGroupSize.x) {
                    [[unroll]] for (uint t = 0u; t < 8u; ++t) {
                        const uint i = i0 + lid + t * gl_WorkGroupSize.x;
                        if (i < g * DIM) {
                            const uint j = i / DIM;
                            rows_s[i] = float(table[cand[g0 + j] * DIM + (i - j * DIM)]);
                        }
                    }
                }
                barrier();
                if (lid < g) {
                    const uint x = cand[g0 + lid];
                    const float k = staged_key(lid, x);
                    if (less(k, x, bk, bi)) { bk = k; bi = x; }
                }
                barrier();
            }
        }
        rescored += cn;
        barrier();
        if (lid == 0u) cand_n = 0u;
        barrier();
        JCLK(JCLK_RESCORE)
    }
    judge_argmin(bk, bi);
    const uint p = bi;
    // Some unchosen candidate always has a finite filter key (steps ≤ N − 1 and finite tables),
    // so the band is never empty; were it, nothing is written past the buffers.
    if (p >= n) {
        if (lid == 0u) seqs[s * SEQ_LEN + pc.slot] = NO_INDEX;
        jclk_flush(s);
        return;
    }
    if (lid == 0u) {
        // Atomics whose results go unused, not loads and stores: nothing waits for them (only
        // this workgroup writes these words in this dispatch, so the values are the same).
        atomicOr(mask_g[s * MASK_WORDS + (p >> 5u)], 1u << (p & 31u));
        seqs[s * SEQ_LEN + pc.slot] = p;
        const uint seen = rescored + ovf_seen;
        atomicAdd(fseq[s].rescored, seen);
        atomicMax(fseq[s].rescored_max, seen);
        atomicAdd(fseq[s].overflows, ovf_seen);
        atomicAdd(fseq[s].steps, 1u);
    }
    float cm = 0.0;  // the largest |centroid| of this invocation's dims
    for (uint d = lid; d < DIM; d += gl_WorkGroupSize.x) {
        const float v = centroid_add(s, d, float(table[p * DIM + d]));
        cen32[s * DIM + d] = v;
        cm = max(cm, abs(v));
    }
    JCLK(JCLK_PICK)
    filter_prepare_max(s, cm);
    JCLK(JCLK_PREPARE)
    jclk_flush(s);
}
