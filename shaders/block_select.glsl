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
// With BS_SUBGROUPS (subgroup arithmetic) a round's argmin is a subgroup minimum, one workgroup
// barrier, and a subgroup minimum of the subgroups' results (each pair's key reported with its
// own bits, so -0.0 and +0.0 come out as the tree gives them): one barrier a round instead of
// log2(WG) + 1, the same pairs.
//
// Before including: the workgroup size as local_size_x_id = 0 (a power of two, at most
// BS_MAX_WG), `layout(constant_id = 1) const uint BS_K` (a power of two ≥ k, at most 64), a
// specialization constant `BS_SUBGROUPS` (1: subgroup arithmetic is there), and key_order.glsl's
// less(). Loop iterations an invocation runs here (lavapipe caps them; src/ivf/ counts them):
// bs_push at most BS_K, bs_merge k × (log2(WG) + 2) + BS_K.
#ifndef BLOCK_SELECT_GLSL
#define BLOCK_SELECT_GLSL
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

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

// The winner of a round drops its head (a padding minimum: nobody; every later round is
// padding).
void bs_drop(float wk, uint wi) {
    if (wi != 0xffffffffu && bs_id[0] == wi && bs_key[0] == wk) {
        [[unroll]] for (uint i = 0u; i + 1u < BS_K; ++i) {
            bs_key[i] = bs_key[i + 1u];
            bs_id[i] = bs_id[i + 1u];
        }
        bs_key[BS_K - 1u] = 1.0 / 0.0;
        bs_id[BS_K - 1u] = 0xffffffffu;
    }
}

// The (key, id)-least of the subgroup's pairs (every lane gets it): the least key, the least id
// among the pairs of that key, and that pair's own key bits (ids are unique but for padding,
// whose pairs are all (+inf, NO_ID)).
void bs_subgroup_least(float key, uint id, out float wk, out uint wi) {
    const float m = subgroupMin(key);
    wi = subgroupMin(key == m ? id : 0xffffffffu);
    wk = uintBitsToFloat(subgroupMin(id == wi ? floatBitsToUint(key) : 0xffffffffu));
}

void bs_merge(uint k) {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    if (BS_SUBGROUPS != 0u) {
        // Halves of bs_red_* by round parity (gl_NumSubgroups ≤ wg / 2): a round's slots are
        // rewritten two rounds later, after every reader passed the next round's barrier.
        for (uint r = 0u; r < k; ++r) {
            float sk;
            uint si;
            bs_subgroup_least(bs_key[0], bs_id[0], sk, si);
            const uint b = (r & 1u) * (wg / 2u);
            if (subgroupElect()) {
                bs_red_key[b + gl_SubgroupID] = sk;
                bs_red_id[b + gl_SubgroupID] = si;
            }
            barrier();
            float lk = 1.0 / 0.0;
            uint li = 0xffffffffu;
            for (uint q = gl_SubgroupInvocationID; q < gl_NumSubgroups; q += gl_SubgroupSize) {
                if (less(bs_red_key[b + q], bs_red_id[b + q], lk, li)) {
                    lk = bs_red_key[b + q];
                    li = bs_red_id[b + q];
                }
            }
            float wk;
            uint wi;
            bs_subgroup_least(lk, li, wk, wi);
            if (lid == 0u) {
                bs_best_key[r] = wk;
                bs_best_id[r] = wi;
            }
            bs_drop(wk, wi);
        }
        barrier();
        return;
    }
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
        bs_drop(wk, wi);
        barrier();
    }
}

#endif
