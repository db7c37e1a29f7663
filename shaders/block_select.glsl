// Block select: one workgroup keeps the k best (key, id) pairs of many candidates of one query
// (the IVF list scans, src/ivf/). Exact under key_order.glsl's total order, so the result does not
// depend on which invocation saw which candidate, on the workgroup size or on the order of the
// candidates.
//
// Each invocation keeps a sorted queue of BS_K pairs in registers (bs_push: one compare to reject,
// else an insertion by compare-exchanges with constant indices). bs_merge then takes the k best of
// the union: k rounds, each an argmin of the invocations' queue heads by a tree in shared memory,
// the winner dropping its head. A pair's id is unique among the candidates (the padding pair
// aside, which only ever wins once the real pairs are gone), so the winner is the one invocation
// whose head equals the minimum.
//
// Before including: the workgroup size as local_size_x_id = 0 (a power of two, at most
// BS_MAX_WG), `layout(constant_id = 1) const uint BS_K` (a power of two ≥ k, at most 64), and
// key_order.glsl's less(). Loop iterations an invocation runs here (lavapipe caps them; src/ivf/
// counts them): bs_push at most BS_K, bs_merge k × (log2(WG) + 2) + BS_K.
#ifndef BLOCK_SELECT_GLSL
#define BLOCK_SELECT_GLSL
#extension GL_EXT_control_flow_attributes : require

const uint BS_MAX_WG = 256u;
const uint BS_MAX_K = 64u;

float bs_key[BS_K];
uint bs_id[BS_K];

shared float bs_red_key[BS_MAX_WG];
shared uint bs_red_id[BS_MAX_WG];
// The k best after bs_merge, best first; entries past the real candidates are (+inf, NO_ID).
shared float bs_best_key[BS_MAX_K];
shared uint bs_best_id[BS_MAX_K];

void bs_init() {
    [[unroll]] for (uint i = 0u; i < BS_K; ++i) {
        bs_key[i] = 1.0 / 0.0;
        bs_id[i] = 0xffffffffu;
    }
}

void bs_push(float key, uint id) {
    if (!less(key, id, bs_key[BS_K - 1u], bs_id[BS_K - 1u])) return;
    bs_key[BS_K - 1u] = key;
    bs_id[BS_K - 1u] = id;
    [[unroll]] for (uint i = BS_K - 1u; i > 0u; --i) {
        if (less(bs_key[i], bs_id[i], bs_key[i - 1u], bs_id[i - 1u])) {
            const float tk = bs_key[i];
            const uint ti = bs_id[i];
            bs_key[i] = bs_key[i - 1u];
            bs_id[i] = bs_id[i - 1u];
            bs_key[i - 1u] = tk;
            bs_id[i - 1u] = ti;
        }
    }
}

void bs_merge(uint k) {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    for (uint r = 0u; r < k; ++r) {
        bs_red_key[lid] = bs_key[0];
        bs_red_id[lid] = bs_id[0];
        barrier();
        for (uint s = wg / 2u; s > 0u; s >>= 1u) {
            if (lid < s && less(bs_red_key[lid + s], bs_red_id[lid + s], bs_red_key[lid], bs_red_id[lid])) {
                bs_red_key[lid] = bs_red_key[lid + s];
                bs_red_id[lid] = bs_red_id[lid + s];
            }
            barrier();
        }
        const float wk = bs_red_key[0];
        const uint wi = bs_red_id[0];
        if (lid == 0u) {
            bs_best_key[r] = wk;
            bs_best_id[r] = wi;
        }
        // The winner drops its head (a padding minimum: nobody; every later round is padding).
        if (wi != 0xffffffffu && bs_id[0] == wi && bs_key[0] == wk) {
            [[unroll]] for (uint i = 0u; i + 1u < BS_K; ++i) {
                bs_key[i] = bs_key[i + 1u];
                bs_id[i] = bs_id[i + 1u];
            }
            bs_key[BS_K - 1u] = 1.0 / 0.0;
            bs_id[BS_K - 1u] = 0xffffffffu;
        }
        barrier();
    }
}

#endif
