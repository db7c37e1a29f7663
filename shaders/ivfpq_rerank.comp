#version 450
// IVF-PQ search, the exact re-rank (src/ivf/ivfpq.rs), recorded after the list scan in the same
// submission: one workgroup a query, one invocation a candidate of the scan (k · k_factor a
// query, at most 64). Each candidate's exact distance to its kept row in float64 with the host
// re-rank's arithmetic — every product (L2: every difference and its square) and every running
// sum rounded once (precise: nothing fused), the terms added in column order from −0.0, as
// Rust's `Iterator::sum` — so the same bits as the host's. Then its rank among the query's
// candidates under (distance — similarity descending for inner product and cosine, L2
// ascending; −0 before +0 as Rust's total_cmp orders them — then the lower id): a candidate of
// rank r < k writes its float64 distance (two words) and its id to result r. Fewer than k
// candidates: the remaining ids are NO_ID.

layout(local_size_x = 64) in;

// The kept rows by id, D floats each (unit rows for cosine).
layout(std430, set = 0, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, set = 0, binding = 2) readonly buffer Queries { float queries[]; };
// The scan's candidates (their ids from word pc.cand_ids, kk a query) and the results (from
// word pc.res_keys: float64 distances, two words each; from word pc.res_ids: ids; k a query).
layout(std430, set = 0, binding = 6) buffer Out { uint out_w[]; };

layout(push_constant) uniform Push {
    uint dim;       // D
    uint q0;        // first query of this dispatch
    uint kk;        // candidates a query
    uint k;         // results a query
    uint ip;        // 1: similarity (inner product; cosine on unit rows), 0: L2
    uint cand_ids;  // the candidates' ids' first word
    uint res_keys;  // the results' distances' first word
    uint res_ids;   // the results' ids' first word
} pc;

const uint NO_ID = 0xffffffffu;

shared double skey[64];
shared uint sid[64];

// Whether (a, ia) ranks before (b, ib).
bool ranks_before(double a, uint ia, double b, uint ib, bool ip) {
    if (a != b) return ip ? a > b : a < b;
    if (a == 0.0lf) {
        const uint sa = unpackDouble2x32(a).y >> 31u;
        const uint sb = unpackDouble2x32(b).y >> 31u;
        if (sa != sb) return ip ? sa < sb : sa > sb;
    }
    return ia < ib;
}

void main() {
    const uint i = gl_LocalInvocationID.x;
    const uint q = pc.q0 + gl_WorkGroupID.x;
    const uint dim = pc.dim;
    const bool ip = pc.ip == 1u;
    uint id = NO_ID;
    if (i < pc.kk) id = out_w[pc.cand_ids + q * pc.kk + i];
    double v = 0.0lf;
    if (id != NO_ID) {
        precise double s = packDouble2x32(uvec2(0u, 0x80000000u));  // −0.0
        const uint qa = q * dim;
        const uint ra = id * dim;
        if (ip) {
            for (uint j = 0u; j < dim; ++j) {
                precise double p = double(queries[qa + j]) * double(rows[ra + j]);
                s = s + p;
            }
        } else {
            for (uint j = 0u; j < dim; ++j) {
                precise double df = double(queries[qa + j]) - double(rows[ra + j]);
                precise double p = df * df;
                s = s + p;
            }
        }
        v = s;
    }
    skey[i] = v;
    sid[i] = id;
    barrier();
    uint valid = 0u;
    uint rank = 0u;
    for (uint j = 0u; j < pc.kk; ++j) {
        const uint o = sid[j];
        if (o == NO_ID) continue;
        valid += 1u;
        if (id != NO_ID && j != i && ranks_before(skey[j], o, v, id, ip)) rank += 1u;
    }
    if (id != NO_ID && rank < pc.k) {
        const uvec2 w = unpackDouble2x32(v);
        const uint at = q * pc.k + rank;
        out_w[pc.res_keys + 2u * at] = w.x;
        out_w[pc.res_keys + 2u * at + 1u] = w.y;
        out_w[pc.res_ids + at] = id;
    }
    if (i >= valid && i < pc.k) out_w[pc.res_ids + q * pc.k + i] = NO_ID;
}
