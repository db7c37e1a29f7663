#version 450
// Exact k-NN, step 1: keys of a query tile against a range of table rows, written as (key, id)
// pairs into a scratch row (src/knn.rs). The key orders best first, ascending:
//   metric 0 (inner product): key = -(q · e)
//   metric 1 (cosine):        key = -(q̂ · e) / |e|   (q̂ normalised on the host; 0 for zero rows)
//   metric 2 (L2):            key = Σ (q - e)²       (squared distance, no cancellation)
// Each key is one fused multiply-add chain over d in ascending order from the stored (for fp16
// tables: widened) row. Entries [cols, pad_to) of the row range get the padding (+inf, NO_ID).
#ifdef FP16
#extension GL_EXT_shader_16bit_storage : require
#define STORED float16_t
#else
#define STORED float
#endif

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Table { STORED table[]; };
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; };
layout(std430, set = 0, binding = 2) readonly buffer Queries { float queries[]; };
layout(std430, set = 0, binding = 3) buffer KeysA { float keys_a[]; };
layout(std430, set = 0, binding = 4) buffer IdsA { uint ids_a[]; };
layout(std430, set = 0, binding = 5) buffer KeysB { float keys_b[]; };
layout(std430, set = 0, binding = 6) buffer IdsB { uint ids_b[]; };

layout(push_constant) uniform Push {
    uint dim;     // D
    uint q0;      // first query of this tile
    uint t0;      // first table row of this range
    uint cols;    // table rows in this range
    uint off;     // where the range starts in the scratch row
    uint pad_to;  // entries [cols, pad_to) after off get the padding
    uint stride;  // scratch row stride (entries)
    uint dst;     // 0: write A, 1: write B
    uint metric;  // 0 inner product, 1 cosine, 2 L2
} pc;

const uint NO_ID = 0xffffffffu;
const float INF = 1.0 / 0.0;

void main() {
    const uint c = gl_GlobalInvocationID.x;
    const uint q = gl_WorkGroupID.y;
    if (c >= pc.pad_to) return;
    float key = INF;
    uint id = NO_ID;
    if (c < pc.cols) {
        const uint row = pc.t0 + c;
        const uint qb = (pc.q0 + q) * pc.dim;
        const uint eb = row * pc.dim;
        float acc = 0.0;
        if (pc.metric == 2u) {
            for (uint d = 0u; d < pc.dim; ++d) {
                precise float diff = queries[qb + d] - float(table[eb + d]);
                precise float r = fma(diff, diff, acc);
                acc = r;
            }
            key = acc;
        } else {
            for (uint d = 0u; d < pc.dim; ++d) {
                precise float r = fma(queries[qb + d], float(table[eb + d]), acc);
                acc = r;
            }
            if (pc.metric == 1u) {
                precise float s = acc * inv_norm[row];
                acc = s;
            }
            key = -acc;
        }
        id = row;
    }
    const uint at = q * pc.stride + pc.off + c;
    if (pc.dst == 0u) {
        keys_a[at] = key;
        ids_a[at] = id;
    } else {
        keys_b[at] = key;
        ids_b[at] = id;
    }
}
