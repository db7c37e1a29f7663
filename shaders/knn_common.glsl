// Shared by the k-NN shaders (src/knn/): the descriptor bindings of the one k-NN set
// (src/knn/scratch.rs binds them) and the padding pair (+inf, NO_ID).
//   0–2   the table and its inverse norms (table.glsl) and the queries, for the shaders that
//         compute keys (define KNN_INPUTS before including);
//   3, 4  scratch A, keys and ids (knn_warp.comp only reads A's keys, read-only, and declares
//         them itself: define KNN_OWN_A);
//   5, 6  scratch B, keys and ids.
// A query's scratch row is a run of (key, id) pairs, ordered by key_order.glsl.
#ifdef KNN_INPUTS
#include "table.glsl"
layout(std430, set = 0, binding = 2) readonly buffer Queries { float queries[]; };
#endif
#ifndef KNN_OWN_A
layout(std430, set = 0, binding = 3) buffer KeysA { float keys_a[]; };
layout(std430, set = 0, binding = 4) buffer IdsA { uint ids_a[]; };
#endif
layout(std430, set = 0, binding = 5) buffer KeysB { float keys_b[]; };
layout(std430, set = 0, binding = 6) buffer IdsB { uint ids_b[]; };

const uint NO_ID = 0xffffffffu;  // the id of a padding pair
const float INF = 1.0 / 0.0;     // the key of a padding pair
