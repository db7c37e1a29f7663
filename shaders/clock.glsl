// The subgroup clock for the profiling knobs (GF_PROFILE in gram_fixed.comp, FILTER_CLOCK in
// filter_block.glsl; included only under them, after GL_ARB_shader_clock is enabled).
// Ticks since the read t as a 64-bit count (low, high words); (0, 0) if the clock went back, as
// a CPU device's may across a barrier. t moves to now.
uvec2 clock_since(inout uvec2 t) {
    const uvec2 now = clock2x32ARB();
    const uint borrow = now.x < t.x ? 1u : 0u;
    const uint hi = now.y - t.y - borrow;
    const uvec2 d = int(hi) < 0 ? uvec2(0u) : uvec2(now.x - t.x, hi);
    t = now;
    return d;
}
