// The layout of G's rows on the device, one definition for the gram shaders and the host
// (src/gram/plan.rs, row_stride): a row takes N entries rounded up to a multiple of 4, so every
// row starts 16-byte aligned (gram_fixed.comp loads four values at a time); the padding entries
// are 0 and belong to no item.
#ifndef GRAM_ROWS_GLSL
#define GRAM_ROWS_GLSL

uint gram_row_stride(uint n) {
    return (n + 3u) & ~3u;
}

#endif
