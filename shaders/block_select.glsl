// Block select: one workgroup keeps the k best (key, id) pairs of many candidates of one query
// (the IVF list scans, src/ivf/). Exact under key_order.glsl's total order, so the result does not
// depend on which invocation saw which candidate, on the workgroup size or on the order of the
// candidates.
//
// Each invocation keeps a sorted queue of only BS_K pairs in registers (bs_push: one compare to
// reject, else an insertion by compare-exchanges with constant indices) — BS_K may be less than
// k — and, when BS_K < k, `lost`: the least pair it discarded (evicted from its full queue, or
// refused by it). bs_merge then takes the best of the union: rounds, each an argmin of the
// invocations' queue heads, the winner dropping its head. A pair's id is unique among the
// candidates (the padding pair aside, which only ever wins once the real pairs are gone), so the
// winner is the one invocation whose head equals the minimum.
//
// Why it stays exact with short queues: let L be the least `lost` of the workgroup. No pair less
// than L was ever discarded, so the merge's winners less than L are exactly the best pairs, in
// order (confirmed). The invocation that discarded L held BS_K pairs less than L when it did, and
// every one of them stays (evicting one would discard a pair less than L), so a pass confirms at
// least min(BS_K, the slots left) pairs. When the merge reaches a winner not less than L, the
// candidates are offered again (the caller's loop: bs_init, every candidate to bs_push, bs_merge
// until it returns true) and bs_push takes only pairs after the last confirmed one: at most
// ceil(k / BS_K) passes, the first the only one in the common case (no invocation holds more
// than BS_K of the k best), and always the only one when BS_K ≥ k.
//
// With BS_SUBGROUPS (subgroup arithmetic) a round's argmin is a subgroup minimum, one workgroup
// barrier, and a subgroup minimum of the subgroups' results (each pair's key reported with its
// own bits, so -0.0 and +0.0 come out as the tree gives them): one barrier a round instead of
// log2(WG) + 1 for the tree in shared memory, the same pairs.
//
// Before including: the workgroup size as local_size_x_id = 0 (a power of two, at most
// BS_MAX_WG), `layout(constant_id = 1) const uint BS_K` (the queue: a power of two, at most 64),
// a specialization constant `BS_SUBGROUPS` (1: subgroup arithmetic is there), and key_order.glsl's
// less(). Loop iterations an invocation runs here (lavapipe caps them; src/ivf/ counts them):
// per pass bs_init BS_K and bs_push at most BS_K a candidate; over all passes at most
// k + 2 · passes rounds of log2(WG) + 2 + BS_K.
#ifndef BLOCK_SELECT_GLSL
#define BLOCK_SELECT_GLSL
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

const uint BS_MAX_WG = 256u;
const uint BS_MAX_K = 64u;
const uint BS_NO_ID = 0xffffffffu;

float bs_key[BS_K];
uint bs_id[BS_K];
// The least pair this invocation discarded this pass ((+inf, NO_ID): none), kept when bs_track.
float bs_lost_key;
uint bs_lost_id;
// Uniform: whether queues may be short of k (BS_K < k), the confirmed pairs in bs_best_*, and
// the last of them (bs_push takes only pairs after it when bs_done > 0), the rounds run.
bool bs_track = false;
uint bs_done = 0u;
float bs_floor_key;
uint bs_floor_id;
uint bs_round = 0u;

shared float bs_red_key[BS_MAX_WG];
shared uint bs_red_id[BS_MAX_WG];
// The k best after bs_merge returned true, best first; entries past the real candidates are
// (+inf, NO_ID).
shared float bs_best_key[BS_MAX_K];
shared uint bs_best_id[BS_MAX_K];

// Before the first pass of a selection of k.
void bs_start(uint k) {
    bs_track = BS_K < k;
    bs_done = 0u;
}

// At the start of every pass.
void bs_init() {
    [[unroll]] for (uint i = 0u; i < BS_K; ++i) {
        bs_key[i] = 1.0 / 0.0;
        bs_id[i] = BS_NO_ID;
    }
    bs_lost_key = 1.0 / 0.0;
    bs_lost_id = BS_NO_ID;
}

void bs_push(float key, uint id) {
    // Confirmed by an earlier pass (or before it).
    if (bs_done > 0u && !less(bs_floor_key, bs_floor_id, key, id)) return;
    if (!less(key, id, bs_key[BS_K - 1u], bs_id[BS_K - 1u])) {
        if (bs_track && less(key, id, bs_lost_key, bs_lost_id)) {
            bs_lost_key = key;
            bs_lost_id = id;
        }
        return;
    }
    // The tail is evicted (a padding tail is never less than lost).
    if (bs_track && less(bs_key[BS_K - 1u], bs_id[BS_K - 1u], bs_lost_key, bs_lost_id)) {
        bs_lost_key = bs_key[BS_K - 1u];
        bs_lost_id = bs_id[BS_K - 1u];
    }
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
    if (wi != BS_NO_ID && bs_id[0] == wi && bs_key[0] == wk) {
        [[unroll]] for (uint i = 0u; i + 1u < BS_K; ++i) {
            bs_key[i] = bs_key[i + 1u];
            bs_id[i] = bs_id[i + 1u];
        }
        bs_key[BS_K - 1u] = 1.0 / 0.0;
        bs_id[BS_K - 1u] = BS_NO_ID;
    }
}

// The (key, id)-least of the subgroup's pairs (every lane gets it): the least key, the least id
// among the pairs of that key, and that pair's own key bits (ids are unique but for padding,
// whose pairs are all (+inf, NO_ID)).
void bs_subgroup_least(float key, uint id, out float wk, out uint wi) {
    const float m = subgroupMin(key);
    wi = subgroupMin(key == m ? id : BS_NO_ID);
    wk = uintBitsToFloat(subgroupMin(id == wi ? floatBitsToUint(key) : BS_NO_ID));
}

// One round: the (key, id)-least of the workgroup's pairs, every invocation gets it (all
// invocations, uniform control flow).
void bs_least(float key, uint id, out float wk, out uint wi) {
    const uint lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupSize.x;
    if (BS_SUBGROUPS != 0u) {
        // Halves of bs_red_* by round parity (gl_NumSubgroups ≤ wg / 2): a round's slots are
        // rewritten two rounds later, after every reader passed the next round's barrier.
        float sk;
        uint si;
        bs_subgroup_least(key, id, sk, si);
        const uint b = (bs_round & 1u) * (wg / 2u);
        if (subgroupElect()) {
            bs_red_key[b + gl_SubgroupID] = sk;
            bs_red_id[b + gl_SubgroupID] = si;
        }
        barrier();
        float lk = 1.0 / 0.0;
        uint li = BS_NO_ID;
        for (uint q = gl_SubgroupInvocationID; q < gl_NumSubgroups; q += gl_SubgroupSize) {
            if (less(bs_red_key[b + q], bs_red_id[b + q], lk, li)) {
                lk = bs_red_key[b + q];
                li = bs_red_id[b + q];
            }
        }
        bs_subgroup_least(lk, li, wk, wi);
    } else {
        bs_red_key[lid] = key;
        bs_red_id[lid] = id;
        barrier();
        for (uint s = wg / 2u; s > 0u; s >>= 1u) {
            if (lid < s && less(bs_red_key[lid + s], bs_red_id[lid + s], bs_red_key[lid], bs_red_id[lid])) {
                bs_red_key[lid] = bs_red_key[lid + s];
                bs_red_id[lid] = bs_red_id[lid + s];
            }
            barrier();
        }
        wk = bs_red_key[0];
        wi = bs_red_id[0];
        barrier();
    }
    ++bs_round;
}

// Ends a pass: merges the queues into the slots after the confirmed ones, as far as the winners
// are confirmed (less than the workgroup's least lost pair). True when all k slots hold the
// k best (then bs_best_* are complete and visible to every invocation); false when the
// candidates must be offered again.
bool bs_merge(uint k) {
    float lk = 1.0 / 0.0;
    uint li = BS_NO_ID;
    if (bs_track) bs_least(bs_lost_key, bs_lost_id, lk, li);
    const bool none_lost = li == BS_NO_ID;
    for (uint r = bs_done; r < k; ++r) {
        float wk;
        uint wi;
        bs_least(bs_key[0], bs_id[0], wk, wi);
        if (!none_lost && !less(wk, wi, lk, li)) break;
        if (gl_LocalInvocationID.x == 0u) {
            bs_best_key[r] = wk;
            bs_best_id[r] = wi;
        }
        bs_drop(wk, wi);
        bs_done = r + 1u;
        bs_floor_key = wk;
        bs_floor_id = wi;
    }
    barrier();
    return bs_done >= k;
}

#endif
