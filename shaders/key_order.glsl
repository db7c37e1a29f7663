// The (key, id) order every selection and argmin here rests on: the smaller key first, equal
// keys by the lower id (index). A total order on pairs, so any reduction tree, sorting network,
// tile, chunk, subgroup size or selection path picks the same pairs in the same order: the
// results are the same bits on every path. One definition for every shader.
#ifndef KEY_ORDER_GLSL
#define KEY_ORDER_GLSL

// (a, ai) precedes (b, bi).
bool less(float a, uint ai, float b, uint bi) {
    return a < b || (a == b && ai < bi);
}

#endif
