#version 450
// The gram engine on fixed-point keys: one workgroup advances one sequence of the batch through
// `count` steps, as gram.comp does, with every key an int32 count of units and every row of G an
// int32 (gram_matrix.comp with FIXED): Ĝ[p][x] = round(2^SCALE · (e_p · e_x) / |e_x|), each
// within g = 0.51 units of 2^-SCALE of the exact value (float64 dot product and norm; the host
// picks SCALE so that 2^SCALE · max|e| < 2^30, and D ≤ 65,536).
//
//   for every candidate x of this lane:  key[x] += (Ĝ[prev][x] + half) >> sh   (integer: exact)
//   pick = argmin key over unchosen x, lowest index on ties
//
// Integer sums do not round, so a key's error is only what its rows of Ĝ carried. Keys count
// units of 2^(sh − SCALE) (sh = 0 at the start), and every key v_x is within A units of
// K_x = c · e_x / |e_x| (c the exact running sum of the stored rows), where A grows each step by
// g·2^-sh (the entries' rounding) plus 1/2 when sh > 0 (the shift rounds to nearest), and a
// rescale by k bits (below) divides A by 2^k and adds 1 (those shifts floor). Nothing else: no
// float rounding of the sums, no largest key, no second float per key.
//
// The certificate: each step also finds the second best key; when the two are more than 2A
// apart, K_pick < K_y for every other live y (K_y ≥ v_y − A > v_pick + A ≥ K_pick): the pick is
// the exact best. Otherwise (an uncertain step) the live keys within 2A of the best — the only
// ones that can be the exact best — are re-scored as fresh keys in float64, F_x = c̃ · e_x / |e_x|,
// any number of them (in windows of BAND, rounds of WG / 32 candidates), and the pick is the
// least (F, index): within 2·E_F of the exact best, where c̃ is the float64 running sum (each
// invocation adds its dimensions of every picked row, loaded beside the Gram row) and
// E_F = 1.01·2⁻⁵³·(t·Cmax + (2D + 8)·C) after t rows, C ≥ |c| and Cmax ≥ every earlier |c|
// (each float64 add rounds by 2⁻⁵³ of its sum, |c̃ − c| ≤ t·2⁻⁵³·Cmax; the dot product, the
// norm and the division by (2D + 8)·2⁻⁵³ of |c̃|). That is ~1e-11 of |c| at N = 31,102, against
// the float sums' ~6u. No key is ever replaced: settling only reads the keys.
//
// Overflow: |v_x| ≤ (|c| + A) / unit, and |c| is tracked as an upper bound C² through each
// pick's exact key: |c + e_p|² = |c|² + 2·|e_p|·K_p + |e_p|², K_p ≤ its key + A (or F_p + E_F
// after a settle), |e_p| within (1 ± 8u) of 1/inv_norm; the sum's roundings are covered by
// 8·2⁻⁵³ of its magnitudes. At the end of each step, if the next step's keys could reach 2^30
// (|e_next| ≤ MAX_NORM), every key shifts right by k bits (sh += k). Centred tables keep |c|
// small and rarely shift; a table with a common component shifts a few times a sequence.
//
// State in registers, runs of four items a lane (IN_REGS = 1; see VW below), or in device memory
// (IN_REGS = 0): the same integer operations in the same order, and the float64 work the same in
// every invocation, so every placement, workgroup size, subgroup size, chunk and batch gives the
// same bits.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle_relative : require
// GF_PROFILE (a build-time knob, DIVERSITY_SHADER_DEFINES; the device needs VK_KHR_shader_clock,
// enabled by DIVERSITY_SHADER_CLOCK): invocation 0 adds the subgroup-clock ticks of each phase
// of a step into the state's unused words [N, N + 8) (four doubles: the update, the pick, the
// settling, the step's end), and writes PROFILE_MARK after them; GramJob::profile_ticks reads
// them. Timing only: the same bits.
#ifdef GF_PROFILE
#extension GL_ARB_shader_clock : require
#endif

// (GF_VEC: see VW below.)
#ifndef GF_VEC
#define GF_VEC 4
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint RPER = 1u;      // keys per lane in registers (1 in memory)
layout(constant_id = 2) const uint IN_REGS = 1u;   // 1: keys in registers, 0: in device memory
layout(constant_id = 3) const uint SUBGROUPS = 1u; // 1: subgroup reductions; 0: shared tree
layout(constant_id = 4) const uint SEQ_LEN = 1u;   // row stride of `seqs`: steps + 1
layout(constant_id = 5) const uint SLAB_ROWS = 1u; // rows of Ĝ per slab
layout(constant_id = 6) const uint DIM = 1u;       // D
layout(constant_id = 7) const uint LOADS = 1u;     // register path: row loads issued per group
layout(constant_id = 8) const uint BAND = 64u;     // candidates a window of the band
layout(constant_id = 9) const int SCALE = 0;       // Ĝ = round(2^SCALE · G)
// Timing only (never exact, a benchmark knob): bit 1 leaves uncertain steps unsettled (the
// settling code compiled out). 0 in every real run.
layout(constant_id = 10) const uint DIAG = 0u;
layout(constant_id = 11) const float MAX_NORM = 1.0; // ≥ every row's norm
// A dispatch starting at step 1 + k·REFRESH (k ≥ 1; the host cuts dispatches there) first
// recomputes every key from the float64 running sum when A has reached REFRESH_AT units: A
// restarts near 1/2, so fewer steps are uncertain later. 0: never.
layout(constant_id = 12) const uint REFRESH = 0u;
layout(constant_id = 13) const float REFRESH_AT = 1024.0;

#include "table.glsl"
#include "gram_rows.glsl"
layout(std430, set = 0, binding = 2) readonly buffer Starts { uint starts[]; };
// Per sequence (stride 2N + 3D + 16 floats, gram.comp's): keys[0..N) (int bits), then at 2N the
// float64 running sum c̃[0..D) (two words each), then at 2N + 3D the scalars (JS_*).
layout(std430, set = 0, binding = 3) buffer State { uint state[]; };
layout(std430, set = 0, binding = 5) buffer Seqs { uint seqs[]; };
layout(std430, set = 0, binding = 8) readonly buffer GSlab { int g[]; } G[8];
// G's rows as runs of GF_VEC values (GV_AT(v, c): value c of a run).
#if GF_VEC == 4
layout(std430, set = 0, binding = 8) readonly buffer GSlabV { ivec4 g[]; } GV[8];
#define IVECV ivec4
#define GV_AT(v, c) (v)[c]
#elif GF_VEC == 2
layout(std430, set = 0, binding = 8) readonly buffer GSlabV { ivec2 g[]; } GV[8];
#define IVECV ivec2
#define GV_AT(v, c) (v)[c]
#else
#define GV G
#define IVECV int
#define GV_AT(v, c) (v)
#endif

layout(push_constant) uniform Push {
    uint n;      // N
    uint first;  // first step of this dispatch (1 = the batch's first chunk: state starts at 0)
    uint count;  // steps in this dispatch
    uint replay; // 1: take each step's pick from `seqs` (rebuilding state for a resume)
} pc;

const uint NO_INDEX = 0xffffffffu;
const int SENT = 0x7fffffff; // a chosen candidate's key (never a live key: |v| < 2^30)
const uint WG = gl_WorkGroupSize.x;
const float U = 5.9604645e-8; // 2⁻²⁴
const double EPS = 1.1102230246251565e-16LF; // 2⁻⁵³
const double GROW = 1.0LF + 9.094947017729282e-13LF; // 1 + 2⁻⁴⁰
const double LIMIT = 1073741824.0LF; // 2^30
const double G_ERR = 0.51LF;
const uint CHAINS = 32u;
const uint RC = WG >= CHAINS ? WG / CHAINS : 1u; // candidates a round of fresh keys
const uint SLOTS = RC * CHAINS;                     // (candidate, chain) slots a round
const uint EV = (DIM + WG - 1u) / WG; // dimensions of the running sum a lane owns
const uint KD = (DIM + CHAINS - 1u) / CHAINS; // terms of a fresh key's longest chain
// Row values a chain loads at a time (at most its KD terms): 24, every value of a chain up to
// D = 768 in one go (on an H200 the 8,359 × 768 table's whole cache ran 5-7% faster than with 8;
// the same elsewhere: BENCHMARKS.md). GF_FRESH_LOADS (DIVERSITY_SHADER_DEFINES) sets it.
#ifndef GF_FRESH_LOADS
#define GF_FRESH_LOADS 24u
#endif
const uint FRESH_LOADS = GF_FRESH_LOADS < KD ? GF_FRESH_LOADS : KD;
#define DIAG_NO_SETTLE ((DIAG & 1u) != 0u)
// In registers a lane holds runs of VW = 4 adjacent items and loads each run's Gram-row values
// as one ivec4 (rows of G are padded to a multiple of 4 entries, so every run is 16-byte
// aligned): key r of lane lid is item x = VW·(lid + (r / VW)·WG) + r % VW, in increasing order
// of r. Measured on an H100 against single loads (lane-stride items; BENCHMARKS.md, 2026-12-06):
// whole caches 14% faster on the fortunes (14,943 × 384: the driver's registers fell from 254 to
// 128, two workgroups an SM), 6% on the peer's 8,359 × 768 table, 1.5% on real31k, the same bits
// (a pick is the least (key, index), whichever lane holds it). A benchmark knob
// (DIVERSITY_SHADER_DEFINES), the same bits for every value: GF_VEC = 1 or 2 (runs and loads of
// one or two values; 2 ran slower than both, 1.9x on real31k).
const uint VW = uint(GF_VEC);
// Keys a lane: the host rounds RPER up to a multiple of 4 (plan.rs, plan_fixed); 1 in memory.
const uint KPL = IN_REGS != 0u ? ((RPER + VW - 1u) / VW) * VW : 1u;

// Scalars after the vectors (float words unless doubles: two words, low first). 3, 5 and 6 are
// gram.comp's slots for the counters the host reads (refreshes, settles, largest E_F); 7 counts
// the settles of bands wider than BAND among them, 4 the candidates the settles re-scored.
const uint JS_SH = 0u, JS_REFRESH = 3u, JS_CANDS = 4u, JS_BANDS = 5u, JS_EF = 6u, JS_WIDE = 7u,
           JS_A = 8u, JS_C2 = 10u, JS_KB = 12u, JS_C2MAX = 14u;

shared int red_key[WG];
shared uint red_idx[WG];
shared int red_k2[WG];
shared double c_sum[DIM];
shared double part_dot[SLOTS];
shared double part_sq[SLOTS];
shared uint cand[BAND > RC ? BAND : RC];
shared uint lane_base[WG];
shared uint band_total;
shared double best_f;
shared uint best_i;

double load_d(uint at) { return packDouble2x32(uvec2(state[at], state[at + 1u])); }
void store_d(uint at, double v) {
    const uvec2 w = unpackDouble2x32(v);
    state[at] = w.x;
    state[at + 1u] = w.y;
}

int grow(uint prev, uint j) {
    uint slab = prev / SLAB_ROWS;
    return G[slab].g[(prev - slab * SLAB_ROWS) * gram_row_stride(pc.n) + j];
}

// Run q of row prev: its entries VW·q .. VW·q + VW − 1.
IVECV grow_v(uint prev, uint q) {
    uint slab = prev / SLAB_ROWS;
    return GV[slab].g[(prev - slab * SLAB_ROWS) * (gram_row_stride(pc.n) / VW) + q];
}

// The item of a lane's register key r.
uint kj(uint r) {
    return VW * (gl_LocalInvocationID.x + (r / VW) * WG) + r % VW;
}

// x rounded up by far more than the few float64 roundings that made it (bounds stay bounds).
double up(double x) { return x + abs(x) * 9.094947017729282e-13LF; }

bool less_i(int a, uint ai, int b, uint bi) { return a < b || (a == b && ai < bi); }

struct Pick {
    int key;
    uint idx;
    int second;
};

// Workgroup top-2 of (key, index): each lane offers its best (bk, bi) and second best key b2.
// `t` alternates halves of the shared slots so one barrier a step suffices on the subgroup path.
Pick workgroup_pick(int bk, uint bi, int b2, uint t) {
    const uint lid = gl_LocalInvocationID.x;
    Pick r;
    if (SUBGROUPS != 0u) {
        int m = subgroupMin(bk);
        uint mi = subgroupMin(bk == m ? bi : NO_INDEX);
        int s2 = subgroupMin((bk == m && bi == mi) ? b2 : bk);
        uint b = (t & 1u) * (WG / 2u);
        if (subgroupElect()) {
            red_key[b + gl_SubgroupID] = m;
            red_idx[b + gl_SubgroupID] = mi;
            red_k2[b + gl_SubgroupID] = s2;
        }
        barrier();
        int wk = SENT, w2 = SENT;
        uint wi = NO_INDEX;
        for (uint q = gl_SubgroupInvocationID; q < gl_NumSubgroups; q += gl_SubgroupSize) {
            int k = red_key[b + q], k2 = red_k2[b + q];
            uint i = red_idx[b + q];
            if (less_i(k, i, wk, wi)) {
                w2 = min(wk, k2);
                wk = k;
                wi = i;
            } else {
                w2 = min(w2, k);
            }
        }
        r.key = subgroupMin(wk);
        r.idx = subgroupMin(wk == r.key ? wi : NO_INDEX);
        r.second = subgroupMin((wk == r.key && wi == r.idx) ? w2 : wk);
        return r;
    }
    red_key[lid] = bk;
    red_idx[lid] = bi;
    red_k2[lid] = b2;
    barrier();
    for (uint stride = WG >> 1u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            int ak = red_key[lid], bk2 = red_key[lid + stride];
            uint ai = red_idx[lid], bi2 = red_idx[lid + stride];
            int a2 = red_k2[lid], b22 = red_k2[lid + stride];
            bool other = less_i(bk2, bi2, ak, ai);
            red_k2[lid] = other ? min(b22, ak) : min(a2, bk2);
            if (other) {
                red_key[lid] = bk2;
                red_idx[lid] = bi2;
            }
        }
        barrier();
    }
    r.key = red_key[0];
    r.idx = red_idx[0];
    r.second = red_k2[0];
    barrier();
    return r;
}

// A lane's candidates come in increasing index order: an equal key never displaces the best.
void offer(int x, uint j, inout int bk, inout uint bi, inout int b2) {
    const bool better = x < bk;
    b2 = better ? bk : min(b2, x);
    bi = better ? j : bi;
    bk = better ? x : bk;
}

// Fresh keys of cand[k0 .. k0 + cnt) (NO_INDEX skipped), cnt ≤ RC, offered to the running best
// (best_f, best_i) by invocation 0; every invocation calls it (barriers inside). Slot s:
// candidate s / 32, chain s % 32 over d ≡ chain (mod 32) ascending, then a fixed tree over the
// chains; lanes take slots lid, lid + WG, … (several each below 32 invocations), so the sums and
// their order are the same for every workgroup size.
void fresh_round(uint k0, uint cnt) {
    const uint lid = gl_LocalInvocationID.x;
    // With subgroups (of 32 lanes or a divisor or multiple of 32) filling a workgroup of 32 or
    // more, each invocation takes the one slot of its subgroup position (SLOTS = WG): a
    // candidate's 32 chains lie in whole subgroups, its tree levels w ≥ the subgroup size run
    // through shared memory and the rest on shuffles (lane q < w adds lane q + w's partial):
    // the very additions of the shared tree in the other branch (the same bits).
    const uint sgs = gl_SubgroupSize;
    const bool shuffled = SUBGROUPS != 0u && WG >= CHAINS && WG % sgs == 0u
        && (CHAINS % sgs == 0u || sgs % CHAINS == 0u);
    const uint me = shuffled ? gl_SubgroupID * sgs + gl_SubgroupInvocationID : lid;
    double dot = 0.0LF, sq = 0.0LF;
    for (uint sl = me; sl < SLOTS; sl += WG) {
        const uint k = sl / CHAINS, q = sl % CHAINS;
        dot = 0.0LF;
        sq = 0.0LF;
        const uint x = k < cnt ? cand[k0 + k] : NO_INDEX;
        if (x != NO_INDEX) {
            // The chain over d = q, q + 32, … ascending, its row values loaded FRESH_LOADS at a
            // time before their products (so their latencies overlap; the same operations in
            // the same order).
            for (uint i0 = 0u; i0 < KD; i0 += FRESH_LOADS) {
                float ev[FRESH_LOADS];
                for (uint u = 0u; u < FRESH_LOADS; ++u) {
                    ev[u] = float(table[x * DIM + min(q + (i0 + u) * CHAINS, DIM - 1u)]);
                }
                for (uint u = 0u; u < FRESH_LOADS; ++u) {
                    const uint d = q + (i0 + u) * CHAINS;
                    if (d < DIM) {
                        const double e = double(ev[u]);
                        dot = fma(c_sum[d], e, dot);
                        sq = fma(e, e, sq);
                    }
                }
            }
        }
        part_dot[sl] = dot;
        part_sq[sl] = sq;
    }
    if (shuffled) {
        const uint q = me % CHAINS;
        for (uint w = CHAINS / 2u; w > 0u; w >>= 1u) {
            if (w >= sgs) {
                // Level w reads slots of chains ≥ w, written only at the level before.
                barrier();
                if (q < w) {
                    dot += part_dot[me + w];
                    sq += part_sq[me + w];
                    part_dot[me] = dot;
                    part_sq[me] = sq;
                }
            } else {
                const double od = subgroupShuffleDown(dot, w), os = subgroupShuffleDown(sq, w);
                if (q < w) {
                    dot += od;
                    sq += os;
                }
            }
        }
        // (No level reads chain 0's slot: its rewrite needs no barrier before it.)
        if (q == 0u) {
            part_dot[me] = dot;
            part_sq[me] = sq;
        }
        barrier();
    } else {
        barrier();
        for (uint w = CHAINS / 2u; w > 0u; w >>= 1u) {
            // Slots with chain < w read chain + w, which this level does not write.
            for (uint sl = lid; sl < SLOTS; sl += WG) {
                if (sl % CHAINS < w) {
                    part_dot[sl] += part_dot[sl + w];
                    part_sq[sl] += part_sq[sl + w];
                }
            }
            barrier();
        }
    }
    if (lid == 0u) {
        for (uint kk = 0u; kk < cnt; ++kk) {
            const uint y = cand[k0 + kk];
            if (y == NO_INDEX) continue;
            const double nrm = sqrt(part_sq[kk * CHAINS]);
            const double f = nrm > 0.0LF ? part_dot[kk * CHAINS] / nrm : 0.0LF;
            if (f < best_f || (f == best_f && y < best_i)) {
                best_f = f;
                best_i = y;
            }
        }
    }
    barrier();
}

// The fresh key c̃ · e_x / |e_x| of x in float64, one chain over d ascending (0 for a zero row).
double fresh_full(uint x) {
    double dot = 0.0LF, sq = 0.0LF;
    for (uint d = 0u; d < DIM; ++d) {
        const double e = double(float(table[x * DIM + d]));
        dot = fma(c_sum[d], e, dot);
        sq = fma(e, e, sq);
    }
    return sq > 0.0LF ? dot / sqrt(sq) : 0.0LF;
}

// E_F, the fresh keys' bound (see the top) after `rows` rows were summed, from c2 ≥ |c|² and
// c2max ≥ every earlier |c|².
double fresh_bound(uint rows, double c2, double c2max) {
    const double cb = sqrt(c2) * GROW;
    return 1.01LF * EPS * (double(rows) * sqrt(c2max) + double(2u * DIM + 8u) * cb);
}

// What a shift of sh bits makes of a step: the unit of the keys, A's growth a step (the
// entries' rounding, and the rounded shift's half unit), and that shift's rounding half.
void for_shift(uint sh, out double unit, out double inc, out int half_) {
    unit = ldexp(1.0LF, int(sh) - SCALE);
    inc = (G_ERR * ldexp(1.0LF, -int(sh)) + (sh > 0u ? 0.5LF : 0.0LF)) * GROW;
    half_ = sh > 0u ? (1 << (sh - 1u)) : 0;
}

// Shift every key right by k bits (chosen keys stay chosen).
void rescale(inout int key[KPL], uint k, uint base, uint n) {
    if (IN_REGS != 0u) {
        for (uint r = 0u; r < KPL; ++r) key[r] = key[r] == SENT ? SENT : (key[r] >> k);
    } else {
        for (uint j = gl_LocalInvocationID.x; j < n; j += WG) {
            const int v = int(state[base + j]);
            state[base + j] = uint(v == SENT ? SENT : (v >> k));
        }
    }
}

#ifdef GF_PROFILE
const uint PROFILE_MARK = 0x50524f46u;
#include "clock.glsl"
// Subgroup-clock ticks since t, as a double; t moves to now.
double ticks(inout uvec2 t) {
    const uvec2 d = clock_since(t);
    return double(d.y) * 4294967296.0LF + double(d.x);
}
#define PROF(k) if (lid == 0u) prof[k] += ticks(tick);
#else
#define PROF(k)
#endif

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x;
    const uint n = pc.n;
    const uint stride = 2u * n + 3u * DIM + 16u;
    const uint base = s * stride;
    const uint cbase = base + 2u * n;
    const uint jbase = cbase + 3u * DIM;
    const uint out_row = s * SEQ_LEN;
    const bool fresh = pc.first == 1u;
    uint prev = fresh ? starts[s] : seqs[out_row + pc.first - 1u];
    if (fresh && lid == 0u && pc.replay == 0u) seqs[out_row] = prev;

    int key[KPL];
    if (IN_REGS != 0u) {
        for (uint r = 0u; r < KPL; ++r) {
            uint j = kj(r);
            key[r] = j >= n ? SENT : (fresh ? 0 : int(state[base + j]));
        }
    } else if (fresh) {
        for (uint j = lid; j < n; j += WG) state[base + j] = 0u;
    }
    for (uint d = lid; d < DIM; d += WG) c_sum[d] = fresh ? 0.0LF : load_d(cbase + 2u * d);
    // The scalars (every invocation holds the same values).
    uint sh = fresh ? 0u : state[jbase + JS_SH];
    float wide = fresh ? 0.0 : uintBitsToFloat(state[jbase + JS_WIDE]);
    float bands = fresh ? 0.0 : uintBitsToFloat(state[jbase + JS_BANDS]);
    float efmax = fresh ? 0.0 : uintBitsToFloat(state[jbase + JS_EF]);
    float cands = fresh ? 0.0 : uintBitsToFloat(state[jbase + JS_CANDS]);
    double au = fresh ? 0.0LF : load_d(jbase + JS_A);       // A, in units of 2^(sh − SCALE)
    double c2 = fresh ? 0.0LF : load_d(jbase + JS_C2);      // ≥ |c|² (key units²)
    double kb = fresh ? 0.0LF : load_d(jbase + JS_KB);      // ≥ the last pick's exact key
    double c2max = fresh ? 0.0LF : load_d(jbase + JS_C2MAX); // ≥ every |c|² so far
    // Derived from sh: the unit, A's growth a step, the rounding shift's half.
    double unit, inc;
    int half_;
    for_shift(sh, unit, inc, half_);
    const double m_up = double(MAX_NORM);
    float refreshes = fresh ? 0.0 : uintBitsToFloat(state[jbase + JS_REFRESH]);
#ifdef GF_PROFILE
    double prof[4];
    for (uint k = 0u; k < 4u; ++k) prof[k] = (fresh || n < 16u) ? 0.0LF : load_d(base + n + 2u * k);
    uvec2 tick = clock2x32ARB();
#endif
    barrier();
    if (REFRESH != 0u && !fresh && (pc.first - 1u) % REFRESH == 0u && au >= double(REFRESH_AT)) {
        // Every live key from c̃ (rows seqs[0 .. first − 1) so far, as the keys): F_x in one
        // float64 chain over d ascending (within E_F as at a settle), rounded to units of a
        // shift sh' chosen afresh: the smallest under which the next step's keys stay under 2^30
        // (its |c| bounded as at a step's end). A restarts at 1/2 + E_F (+ 1/2 for the float64
        // product's rounding, far more than it is).
        const double ef = fresh_bound(pc.first - 1u, c2, c2max);
        const double cnext = sqrt((c2 + m_up * m_up + 2.0LF * m_up * max(kb, 0.0LF)) * GROW) * GROW;
        uint sh2 = 0u;
        while (sh2 < 30u && ldexp(cnext + ef, SCALE - int(sh2)) + 12.0LF >= LIMIT) ++sh2;
        const double scale2 = ldexp(1.0LF, SCALE - int(sh2));
        if (IN_REGS != 0u) {
            for (uint r = 0u; r < KPL; ++r) {
                const uint x = kj(r);
                if (x < n && key[r] != SENT) key[r] = int(roundEven(fresh_full(x) * scale2));
            }
        } else {
            for (uint x = lid; x < n; x += WG) {
                if (int(state[base + x]) != SENT) {
                    state[base + x] = uint(int(roundEven(fresh_full(x) * scale2)));
                }
            }
        }
        sh = sh2;
        au = (1.0LF + ef * scale2) * GROW;
        for_shift(sh, unit, inc, half_);
        refreshes += 1.0;
    }

    for (uint t = pc.first; t < pc.first + pc.count; ++t) {
        // Loads first (|e_prev|, this lane's dimensions of e_prev, the Gram row); the scalar
        // bookkeeping below has no branch, so it can run while they are in flight.
        const float ep_inv = inv_norm[prev];
        float ev[EV];
        for (uint k = 0u; k < EV; ++k) {
            const uint d = lid + k * WG;
            ev[k] = d < DIM ? float(table[prev * DIM + d]) : 0.0;
        }
        int bk = SENT, b2 = SENT;
        uint bi = NO_INDEX;
        if (IN_REGS != 0u) {
            // Every key of the lane gains (g + half) >> sh (half = 0 and sh = 0 until the first
            // shift: g itself), LOADS values in flight (LOADS / VW vector loads); chosen keys
            // stay SENT, and so does prev's (slot rp of the lane that holds it; NO_INDEX in the
            // others). The lane's best is tracked by r, in increasing index order (j = kj(r)).
            // Measured on an H200 (BENCHMARKS.md, the bisect): the loads' addresses taken outside
            // grow() made the driver put the keys in local memory (2.2-2.8x slower); a second
            // copy of this loop for sh = 0 and prev marked in a branch before it were slower too
            // (+17%, +27%); a lane's top-2 in two chains merged after the loop, 1-15% slower
            // (H100, 2026-12-06).
            const uint pq = prev / VW;
            const uint rp = pq % WG == lid ? (pq / WG) * VW + prev % VW : NO_INDEX;
            const uint NQ = KPL / VW, LV = (LOADS + VW - 1u) / VW;
            for (uint q0 = 0u; q0 < NQ; q0 += LV) {
                IVECV g[LV];
                for (uint u = 0u; u < LV; ++u) {
                    const uint q = q0 + u;
                    if (q < NQ) {
                        g[u] = grow_v(prev, min(lid + q * WG, gram_row_stride(n) / VW - 1u));
                    }
                }
                for (uint u = 0u; u < LV; ++u) {
                    const uint q = q0 + u;
                    if (q >= NQ) break;
                    for (uint c = 0u; c < VW; ++c) {
                        const uint r = q * VW + c;
                        const int v = key[r] + ((GV_AT(g[u], c) + half_) >> sh);
                        key[r] = (key[r] == SENT || r == rp) ? SENT : v;
                        offer(key[r], r, bk, bi, b2);
                    }
                }
            }
            bi = bi == NO_INDEX ? NO_INDEX : kj(bi);
        } else {
            for (uint j0 = lid; j0 < n; j0 += 4u * WG) {
                int g[4], h[4];
                for (uint q = 0u; q < 4u; ++q) {
                    uint j = min(j0 + q * WG, n - 1u);
                    g[q] = grow(prev, j);
                    h[q] = int(state[base + j]);
                }
                for (uint q = 0u; q < 4u; ++q) {
                    uint j = j0 + q * WG;
                    if (j >= n || h[q] == SENT) continue;
                    const int v = j == prev ? SENT : h[q] + ((g[q] + half_) >> sh);
                    state[base + j] = uint(v);
                    offer(v, j, bk, bi, b2);
                }
            }
        }
        // c gains e_prev: |c + e|² ≤ c2 + 2·|e|·kb + |e|², |e| within 1 ± 8u of 1/inv_norm
        // (a float32 rounding of the float64 1/|e|, inverted in float32: ≤ 3.5 ulp in all).
        {
            const double ep = double(ep_inv > 0.0 ? 1.0 / ep_inv : 0.0);
            const double eh = ep * double(1.0 + 8.0 * U), el = ep * double(1.0 - 8.0 * U);
            const double tt = eh * eh + 2.0LF * kb * (kb >= 0.0LF ? eh : el);
            // The sum may cancel: its roundings are covered by 8·2⁻⁵³ of the magnitudes.
            c2 = max(0.0LF, c2 + tt + 8.0LF * EPS * (c2 + abs(tt)));
            c2max = max(c2max, c2);
        }
        au += inc;
        PROF(0)
        Pick w = workgroup_pick(bk, bi, b2, t);
        // c̃ += e_prev in float64, each invocation its dimensions (read after the next barrier).
        for (uint k = 0u; k < EV; ++k) {
            const uint d = lid + k * WG;
            if (d < DIM) c_sum[d] += double(ev[k]);
        }
        // The pick's exact key ≤ its key + A (replaced below when the pick is settled).
        kb = up((double(w.key) + au) * unit);
        PROF(1)
        if (!DIAG_NO_SETTLE && double(w.second) - double(w.key) <= 2.0LF * au) {
            // Uncertain. The band: live keys ≤ tau (within 2A of the best).
            const int tau = int(min(double(w.key) + floor(2.0LF * au), double(SENT - 1)));
            uint mine = 0u;
            if (IN_REGS != 0u) {
                for (uint r = 0u; r < KPL; ++r) mine += (key[r] != SENT && key[r] <= tau) ? 1u : 0u;
            } else {
                for (uint j = lid; j < n; j += WG) {
                    const int v = int(state[base + j]);
                    mine += (v != SENT && v <= tau) ? 1u : 0u;
                }
            }
            if (lid == 0u) {
                band_total = 0u;
                best_f = 1.0e300LF; // above every key (|key| ≤ |c| < 2^70)
                best_i = NO_INDEX;
            }
            barrier();
            // Slots by atomics (their order varies; the least (F, index) does not).
            const uint first_slot = mine > 0u ? atomicAdd(band_total, mine) : 0u;
            barrier();
            const uint band = band_total;
            cands += float(band);
            if (band <= BAND) {
                uint slot = first_slot;
                if (IN_REGS != 0u) {
                    for (uint r = 0u; r < KPL && slot < first_slot + mine; ++r) {
                        if (key[r] != SENT && key[r] <= tau) {
                            cand[slot] = kj(r);
                            slot += 1u;
                        }
                    }
                } else {
                    for (uint j = lid; j < n && slot < first_slot + mine; j += WG) {
                        const int v = int(state[base + j]);
                        if (v != SENT && v <= tau) {
                            cand[slot] = j;
                            slot += 1u;
                        }
                    }
                }
                barrier();
                for (uint k0 = 0u; k0 < band; k0 += RC) fresh_round(k0, min(RC, band - k0));
                bands += 1.0;
            } else {
                // A wide band: lane bases by a serial prefix (the same slots every window),
                // then windows of BAND slots, each lane writing its candidates inside.
                lane_base[lid] = mine;
                barrier();
                if (lid == 0u) {
                    uint acc = 0u;
                    for (uint q = 0u; q < WG; ++q) {
                        const uint c = lane_base[q];
                        lane_base[q] = acc;
                        acc += c;
                    }
                }
                barrier();
                const uint lane_first = lane_base[lid];
                for (uint w0 = 0u; w0 < band; w0 += BAND) {
                    uint slot = lane_first;
                    if (IN_REGS != 0u) {
                        for (uint r = 0u; r < KPL; ++r) {
                            if (key[r] != SENT && key[r] <= tau) {
                                if (slot >= w0 && slot < w0 + BAND) cand[slot - w0] = kj(r);
                                slot += 1u;
                            }
                        }
                    } else {
                        for (uint j = lid; j < n; j += WG) {
                            const int v = int(state[base + j]);
                            if (v != SENT && v <= tau) {
                                if (slot >= w0 && slot < w0 + BAND) cand[slot - w0] = j;
                                slot += 1u;
                            }
                        }
                    }
                    barrier();
                    const uint wn = min(BAND, band - w0);
                    for (uint k0 = 0u; k0 < wn; k0 += RC) fresh_round(k0, min(RC, wn - k0));
                }
                wide += 1.0;
                bands += 1.0;
            }
            const double ef = fresh_bound(t, c2, c2max);
            w.idx = best_i;
            kb = up(best_f + ef);
            efmax = max(efmax, float(ef) * (1.0 + 2.0 * U));
            barrier();
        }
        PROF(2)
        uint p;
        if (pc.replay != 0u) {
            p = seqs[out_row + t];
        } else {
            p = w.idx;
            if (lid == 0u) seqs[out_row + t] = p;
        }
        prev = p;
        // Keep |key| < 2^30 at the next step: after it |c|² ≤ c2 + |e|² + 2·|e|·max(kb, 0) with
        // |e| ≤ MAX_NORM, and A grows by inc; shift the keys by k bits where that could reach it.
        {
            const double cn2 = (c2 + m_up * m_up + 2.0LF * m_up * max(kb, 0.0LF)) * GROW;
            const double room = LIMIT - 2.0LF - (au + inc);
            if (room <= 0.0LF || cn2 >= (room * unit) * (room * unit)) {
                const double cu = ldexp(sqrt(cn2) * GROW, SCALE - int(sh));
                uint k = 1u;
                while (sh + k < 30u && ldexp(cu + au + inc, -int(k)) + 8.0LF >= LIMIT) ++k;
                rescale(key, k, base, n);
                sh += k;
                // The floors: < 1 new unit each; A's units grow 2^k-fold.
                au = (ldexp(au, -int(k)) + 1.0LF) * GROW;
                for_shift(sh, unit, inc, half_);
            }
        }
        PROF(3)
    }

    if (IN_REGS != 0u) {
        for (uint r = 0u; r < KPL; ++r) {
            uint j = kj(r);
            if (j < n) state[base + j] = uint(key[r]);
        }
    }
    for (uint d = lid; d < DIM; d += WG) store_d(cbase + 2u * d, c_sum[d]);
    if (lid == 0u) {
        state[jbase + JS_SH] = sh;
        state[jbase + JS_WIDE] = floatBitsToUint(wide);
        state[jbase + JS_REFRESH] = floatBitsToUint(refreshes);
        state[jbase + JS_BANDS] = floatBitsToUint(bands);
        state[jbase + JS_EF] = floatBitsToUint(efmax);
        state[jbase + JS_CANDS] = floatBitsToUint(cands);
#ifdef GF_PROFILE
        if (n >= 16u) {
            for (uint k = 0u; k < 4u; ++k) store_d(base + n + 2u * k, prof[k]);
            state[base + n + 8u] = PROFILE_MARK;
        }
#endif
        store_d(jbase + JS_A, au);
        store_d(jbase + JS_C2, c2);
        store_d(jbase + JS_KB, kb);
        store_d(jbase + JS_C2MAX, c2max);
    }
}
