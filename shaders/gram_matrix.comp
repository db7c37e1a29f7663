#version 450
// G = E Eᵀ for the gram engine (the running keys c·e_x grow by a row of G per step): rows
// [row0, row0 + rows) of G written into slab `slab`, which holds the rows from slab_row0 on (G is
// split into slabs of whole rows: one binding sees at most maxStorageBufferRange bytes; a slab may
// take several submissions). A row takes N entries rounded up to a multiple of 4, the padding
// entries 0 (gram_rows.glsl).
// Column j is stored scaled by 1/|e_j|: the engine then sums keys c·e_j/|e_j| directly.
// Each entry is a compensated dot product (Ogita, Rump and Oishi's Dot2) over d in ascending
// order from 0: every product's rounding error comes exactly from fma(a, b, -a·b), every sum's
// from Knuth's TwoSum, and both are gathered in a second float `lo`; the entry is hi + lo, then
// scaled. Its error is |G|·u (the two final roundings, u = 2⁻²⁴) plus D²u²·Σ|a·b| — for
// D = 384, ~1e-9 of Σ|a·b| — instead of the plain chain's up to D·u·Σ|a·b| (~√D·u typically).
// A key sums t entries, so this is what keeps the gram engine's error small on long sequences
// (see gram.comp for the whole bound). G[i][j] and G[j][i] have the same bits (every operation
// is symmetric in a and b). The rows are the stored table: fp16 rows are widened, so G comes
// from the rounded values.
//
// With FIXED (the `gram_matrix_fixed` variant, for gram_fixed.comp): each entry is
// round(2^SCALE · (e_i · e_j) / |e_j|) as an int32, from a float64 dot product and a float64
// norm of row j computed here (products of stored values are exact in float64; the sums round
// by at most (D + 4)·2⁻⁵³ of their magnitudes), so an entry is within 0.5 + (D + 8)·2⁻²³ units
// of 2^-SCALE of the exact (e_i · e_j) / |e_j| when 2^SCALE·|e_i| ≤ 2^30 (the host picks SCALE
// so). A zero row j gives a zero column.
#extension GL_EXT_nonuniform_qualifier : enable

layout(local_size_x = 256) in;

#include "table.glsl"
#include "gram_rows.glsl"
#ifdef FIXED
layout(constant_id = 0) const int SCALE = 0;
layout(std430, set = 0, binding = 8) writeonly buffer GSlab { int g[]; } G[8];
#else
layout(std430, set = 0, binding = 8) writeonly buffer GSlab { float g[]; } G[8];
#endif

layout(push_constant) uniform Push {
    uint n;     // rows of the table (and of G)
    uint dim;   // D
    uint slab_row0; // first row of G held by this slab
    uint row0;  // first row of G this dispatch writes
    uint rows;  // rows in this slab
    uint slab;  // which slab
} pc;

const uint BT = 64u, BK = 16u;
shared float As[BK * BT]; // [k][row i]
shared float Bs[BK * BT]; // [k][row j]

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % 16u, ty = lid / 16u;
    const uint j0 = gl_WorkGroupID.x * BT;             // columns
    const uint i0 = pc.row0 + gl_WorkGroupID.y * BT;   // rows of G
    const uint iend = pc.row0 + pc.rows;
    const uint stride = gram_row_stride(pc.n);
#ifdef FIXED
    double acc[16], sq[4];
    for (uint q = 0u; q < 16u; ++q) acc[q] = 0.0LF;
    for (uint q = 0u; q < 4u; ++q) sq[q] = 0.0LF;
#else
    float acc[16], lo[16];
    for (uint q = 0u; q < 16u; ++q) {
        acc[q] = 0.0;
        lo[q] = 0.0;
    }
#endif
    const uint lr = lid / 4u, lk = (lid % 4u) * 4u;
    for (uint k0 = 0u; k0 < pc.dim; k0 += BK) {
        for (uint q = 0u; q < 4u; ++q) {
            uint k = k0 + lk + q;
            uint i = i0 + lr, j = j0 + lr;
            As[(lk + q) * BT + lr] = (i < iend && k < pc.dim) ? float(table[i * pc.dim + k]) : 0.0;
            Bs[(lk + q) * BT + lr] = (j < pc.n && k < pc.dim) ? float(table[j * pc.dim + k]) : 0.0;
        }
        barrier();
        // Dims past D contribute 0·0 with no error: the sums are the same as over D alone.
        for (uint kk = 0u; kk < BK; ++kk) {
            float a[4], b[4];
            for (uint q = 0u; q < 4u; ++q) a[q] = As[kk * BT + ty * 4u + q];
            for (uint q = 0u; q < 4u; ++q) b[q] = Bs[kk * BT + tx * 4u + q];
#ifdef FIXED
            for (uint v = 0u; v < 4u; ++v) sq[v] = fma(double(b[v]), double(b[v]), sq[v]);
            for (uint u = 0u; u < 4u; ++u) {
                for (uint v = 0u; v < 4u; ++v) {
                    acc[u * 4u + v] = fma(double(a[u]), double(b[v]), acc[u * 4u + v]);
                }
            }
#else
            for (uint u = 0u; u < 4u; ++u) {
                for (uint v = 0u; v < 4u; ++v) {
                    // TwoProduct and TwoSum: p + pe = a·b and s + se = acc + p exactly.
                    precise float p = a[u] * b[v];
                    precise float pe = fma(a[u], b[v], -p);
                    const float h = acc[u * 4u + v];
                    precise float s = h + p;
                    precise float bp = s - h;
                    precise float se = (h - (s - bp)) + (p - bp);
                    precise float l = lo[u * 4u + v] + (pe + se);
                    acc[u * 4u + v] = s;
                    lo[u * 4u + v] = l;
                }
            }
#endif
        }
        barrier();
    }
    for (uint u = 0u; u < 4u; ++u) {
        uint i = i0 + ty * 4u + u;
        if (i >= iend) continue;
        for (uint v = 0u; v < 4u; ++v) {
            uint j = j0 + tx * 4u + v;
            // Columns N .. stride (the row's padding to a multiple of 4) hold 0.
#ifdef FIXED
            if (j < stride) {
                // The products are exact in float64 (24-bit operands), so fma and multiply-add
                // round alike; 1/|e_j| in float64 from the same sums of squares.
                const double nrm = sqrt(sq[v]);
                const double x = nrm > 0.0LF ? ldexp(acc[u * 4u + v] / nrm, SCALE) : 0.0LF;
                G[pc.slab].g[(i - pc.slab_row0) * stride + j] = j < pc.n ? int(roundEven(x)) : 0;
            }
#else
            if (j < stride) {
                precise float dot = acc[u * 4u + v] + lo[u * 4u + v];
                precise float scaled = dot * inv_norm[min(j, pc.n - 1u)];
                G[pc.slab].g[(i - pc.slab_row0) * stride + j] = j < pc.n ? scaled : 0.0;
            }
#endif
        }
    }
}
