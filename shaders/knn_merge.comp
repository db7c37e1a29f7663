#version 450
// Exact k-NN, full-ranking path: one merge round of every scratch row (src/knn/). The row
// (`len` entries, a multiple of the chunk size) holds sorted runs of `width` entries (the last
// one possibly shorter); runs 2m and 2m + 1 are merged into one sorted run of the destination
// row. Each invocation places one entry: its position is its rank in its own run plus the number
// of entries of the partner run that precede it — strictly smaller for an entry of the left run,
// smaller or equal for one of the right run (so equal pairs, only the (+inf, NO_ID) padding, keep
// their order) — found by a binary search of the partner run. The order is the total order on
// (key, id), so the result is the unique sorted row, the same as any other sort.
#include "knn_common.glsl"
#include "key_order.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint stride; // scratch row stride (entries)
    uint len;    // entries of each row
    uint width;  // sorted run length
    uint from_b; // 1: B → A, 0: A → B
} pc;

float key_at(uint at) { return pc.from_b != 0u ? keys_b[at] : keys_a[at]; }
uint id_at(uint at) { return pc.from_b != 0u ? ids_b[at] : ids_a[at]; }

void main() {
    const uint i = gl_GlobalInvocationID.x;
    const uint row = gl_WorkGroupID.y * pc.stride;
    if (i >= pc.len) return;
    const uint w = pc.width;
    const uint r = i / w;
    const uint own = i - r * w;
    const uint p0 = (r ^ 1u) * w;  // the partner run's start
    const float k = key_at(row + i);
    const uint id = id_at(row + i);
    uint before = 0u;
    if (p0 < pc.len) {
        const uint plen = min(w, pc.len - p0);
        const bool left = (r & 1u) == 0u;
        // Count the partner entries that precede (k, id): the first position where the
        // predicate fails, the predicate being monotone over the sorted run.
        uint lo = 0u, hi = plen;
        while (lo < hi) {
            const uint mid = (lo + hi) >> 1u;
            const float mk = key_at(row + p0 + mid);
            const uint mi = id_at(row + p0 + mid);
            const bool precedes = left ? less(mk, mi, k, id) : !less(k, id, mk, mi);
            if (precedes) lo = mid + 1u; else hi = mid;
        }
        before = lo;
    }
    const uint at = row + (r & ~1u) * w + own + before;
    if (pc.from_b != 0u) {
        keys_a[at] = k;
        ids_a[at] = id;
    } else {
        keys_b[at] = k;
        ids_b[at] = id;
    }
}
