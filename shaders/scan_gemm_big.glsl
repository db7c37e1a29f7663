// The 128 × 128 variant of one block of the candidate scan (ScanKernel::Block128): sequences
// [by·128, +128) × candidates [bx·128, +128) per workgroup of 256 = 16 × 16 invocations, each
// with 8 × 8 pairs; D is staged BK_BIG = 8 dims at a time through double-buffered shared memory.
// Every size here is a compile-time constant (not a specialization constant) so the loops over
// the 64 accumulators unroll and the accumulators stay in registers.
//
// Invocation (tx, ty) owns sequences ty·4 + {0..3} and 64 + ty·4 + {0..3}, candidates
// tx·4 + {0..3} and 64 + tx·4 + {0..3} of the block: per dim it reads two vec4 of centroid
// values and two vec4 of row values from shared memory (16 invocations of a half-warp read 16
// consecutive vec4: no bank conflicts) for 64 FMAs.
//
// Exactness (the same bits as every other scan kernel): each pair's key is the same chain as in
// scan_gemm.glsl, acc = fma(a_d, b_d, acc) for d = 0, 1, …, D−1 from 0.0, `precise`, then
// acc · inv_norm[x].
// Dims past D (the last stage's padding) add fma(0, 0, acc) = acc (only the sign of a zero may
// change, and keys compare as floats, −0 == +0), so the keys equal the 64 × 64 kernel's.
// Requires BIG (scan_common.glsl's BN = 128u) and a workgroup of 256.
#extension GL_EXT_control_flow_attributes : require

const uint BIG_M = 128u;  // sequences per block
const uint BIG_K = 8u;    // dims per shared stage
#define GEMM_M BIG_M      // sequences a block (the entry points' workgroup numbering reads it)

shared vec4 As4[2u * BIG_K * BIG_M / 4u];  // [buffer][k][sequence / 4]
shared vec4 Bs4[2u * BIG_K * BN / 4u];     // [buffer][k][candidate / 4]
shared float red_k[BIG_M * 16u];           // [sequence][tx]
shared uint red_i[BIG_M * 16u];

// The best unchosen candidate of one sequence row among this invocation's eight: r is the row in
// the block, v its eight dot products (candidates as in gemm_block), into red_k/red_i[r][tx].
void row_winner(uint r, uint s0, uint x0, uint tx, uint n, float inv[8], float v[8]) {
    const uint s = s0 + r;
    float bk = INF;
    uint bi = NO_INDEX;
    if (s < BATCH) {
        [[unroll]] for (uint g = 0u; g < 2u; ++g) {
            const uint xg = x0 + g * 64u + tx * 4u;
            const uint word = xg < n ? mask_g[s * MASK_WORDS + (xg >> 5u)] : 0xffffffffu;
            [[unroll]] for (uint q = 0u; q < 4u; ++q) {
                const uint x = xg + q;
                if (x < n && (word & (1u << (x & 31u))) == 0u) {
                    precise float key = v[g * 4u + q] * inv[g * 4u + q];
                    if (less(key, x, bk, bi)) { bk = key; bi = x; }
                }
            }
        }
    }
    red_k[r * 16u + tx] = bk;
    red_i[r * 16u + tx] = bi;
}

void gemm_block(uint bx, uint by, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % 16u, ty = lid / 16u;
    const uint s0 = by * BIG_M, x0 = bx * BN;
    float acc[64];
    [[unroll]] for (uint i = 0u; i < 64u; ++i) acc[i] = 0.0;
    // Loader: row lr of the stage (sequence s0 + lr, candidate x0 + lr), dims lk .. lk+3; two
    // invocations per row read 8 consecutive values of it.
    const uint lr = lid / 2u, lk = (lid % 2u) * 4u;
    const uint ls = s0 + lr, lx = x0 + lr;
    const bool a_ok = ls < BATCH, b_ok = lx < n;
    const uint a_base = ls * DIM, b_base = lx * DIM;
    float ra[4], rb[4];
    const uint stages = (DIM + BIG_K - 1u) / BIG_K;
    // Stage 0 into buffer 0.
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        uint k = lk + q;
        ra[q] = (a_ok && k < DIM) ? cen32[a_base + k] : 0.0;
        rb[q] = (b_ok && k < DIM) ? float(table[b_base + k]) : 0.0;
    }
    // Scalar stores into the vec4 arrays: element (k, r) is As4[k·32 + r/4][r%4].
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        As4[(lk + q) * (BIG_M / 4u) + lr / 4u][lr % 4u] = ra[q];
        Bs4[(lk + q) * (BN / 4u) + lr / 4u][lr % 4u] = rb[q];
    }
    barrier();
    for (uint t = 0u; t < stages; ++t) {
        const uint cur = t & 1u;
        const bool more = t + 1u < stages;
        // Prefetch the next stage into registers while this one is computed.
        if (more) {
            const uint k0 = (t + 1u) * BIG_K;
            [[unroll]] for (uint q = 0u; q < 4u; ++q) {
                uint k = k0 + lk + q;
                ra[q] = (a_ok && k < DIM) ? cen32[a_base + k] : 0.0;
                rb[q] = (b_ok && k < DIM) ? float(table[b_base + k]) : 0.0;
            }
        }
        const uint abase = cur * BIG_K * (BIG_M / 4u), bbase = cur * BIG_K * (BN / 4u);
        [[unroll]] for (uint kk = 0u; kk < BIG_K; ++kk) {
            const vec4 a0 = As4[abase + kk * (BIG_M / 4u) + ty];
            const vec4 a1 = As4[abase + kk * (BIG_M / 4u) + 16u + ty];
            const vec4 b0 = Bs4[bbase + kk * (BN / 4u) + tx];
            const vec4 b1 = Bs4[bbase + kk * (BN / 4u) + 16u + tx];
            float a[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
            float b[8] = float[8](b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w);
            [[unroll]] for (uint i = 0u; i < 8u; ++i) {
                [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                    precise float v = fma(a[i], b[j], acc[i * 8u + j]);
                    acc[i * 8u + j] = v;
                }
            }
        }
        if (more) {
            const uint nxt = 1u - cur;
            [[unroll]] for (uint q = 0u; q < 4u; ++q) {
                As4[(nxt * BIG_K + lk + q) * (BIG_M / 4u) + lr / 4u][lr % 4u] = ra[q];
                Bs4[(nxt * BIG_K + lk + q) * (BN / 4u) + lr / 4u][lr % 4u] = rb[q];
            }
        }
        barrier();
    }
    // This invocation's candidates: j < 4 → x0 + tx·4 + j, j ≥ 4 → x0 + 64 + tx·4 + j − 4; each
    // group of 4 lies in one 32-bit mask word. The eight rows are written out (ROW) so that no
    // accumulator is ever indexed by a run-time value.
    float inv[8];
    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
        uint x = x0 + (j / 4u) * 64u + tx * 4u + j % 4u;
        inv[j] = x < n ? inv_norm[x] : 0.0;
    }
#define ROW(i) row_winner((i / 4u) * 64u + ty * 4u + i % 4u, s0, x0, tx, n, inv, \
        float[8](acc[i * 8u], acc[i * 8u + 1u], acc[i * 8u + 2u], acc[i * 8u + 3u], \
                 acc[i * 8u + 4u], acc[i * 8u + 5u], acc[i * 8u + 6u], acc[i * 8u + 7u]))
    ROW(0u); ROW(1u); ROW(2u); ROW(3u); ROW(4u); ROW(5u); ROW(6u); ROW(7u);
#undef ROW
    barrier();
    if (lid < BIG_M) {
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
