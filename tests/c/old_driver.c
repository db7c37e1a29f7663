/* A driver written the old way, against include/vk_compute.h only: reads an f32 table, converts
 * it to fp16 with the library, runs the whole cache (every start, in batches of BATCH) in chunks
 * (a 10-slot probe, then chunks that double), downloads the sequences, computes one fp32
 * sequence 20 times around vkd_init/vkd_destroy as the old wrapper does, and checks that bad
 * calls, a lost device and a panic (both injected) are answered with codes and messages instead
 * of crashes. The chunks' tile_size cycles through the L2 formula's tile and the garbage a
 * wrapper declaring the function with three arguments leaves in the fourth register; the first
 * batch is run again untiled and must give the same bytes. Prints the engine the batches ran
 * ("engine: gram") and the first and the median later single-sequence cycle's seconds.
 *
 * usage: old_driver TABLE.f32 N D BATCH L2_BYTES OUT_ALL.u32 OUT_SINGLE.u32 SINGLE_START */
#define _POSIX_C_SOURCE 200112L /* setenv, clock_gettime */
#include "vk_compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(const char* what) {
    fprintf(stderr, "old_driver: %s: %s\n", what, vkc_last_error());
    return 1;
}

static int expect(int cond, const char* what) {
    if (!cond) fprintf(stderr, "old_driver: expectation failed: %s (last error: %s)\n", what, vkc_last_error());
    return cond ? 0 : 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

/* Every slot of batch `b` in chunks: a 10-slot probe, then chunks that double; chunk k's
 * tile_size is tiles[k % ntiles]. 0 on success. */
static int run_chunks(VkDiversityBatchContext* b, uint32_t n, const uint32_t* tiles, int ntiles) {
    uint32_t slot = 1, chunk = 10;
    int k = 0;
    while (slot <= n - 1) {
        uint32_t c = chunk < n - slot ? chunk : n - slot;
        VkComputeResult r = vkd_batch_compute_chunk(b, slot, c, tiles[k++ % ntiles]);
        if (r != VKC_SUCCESS) return fail(vkc_get_error_string(r));
        slot += c;
        chunk *= 2; /* adaptive: the probe was fast enough */
    }
    return 0;
}

/* With the fault-injection variable `var` set to `value`, a batch's first chunk fails with
 * VKC_ERROR_COMMAND_EXECUTION and a message containing `word`: failed expectations (0 to 2). */
static int injected(VkComputeContext* ctx, const uint16_t* f16, uint32_t n, uint32_t d,
                    uint32_t batch, const uint32_t* starts, const char* var, const char* value,
                    const char* word) {
    VkDiversityBatchContext* b = vkd_batch_init(ctx, f16, n, d, batch, starts);
    if (!b) return expect(0, "vkd_batch_init before an injected fault");
    setenv(var, value, 1);
    int bad = expect(vkd_batch_compute_chunk(b, 1, 5, 0) == VKC_ERROR_COMMAND_EXECUTION, var);
    bad += expect(strstr(vkc_last_error(), word) != NULL, word);
    unsetenv(var);
    vkd_batch_destroy(b);
    return bad;
}

int main(int argc, char** argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: old_driver TABLE.f32 N D BATCH L2_BYTES OUT_BATCH.u32 OUT_SINGLE.u32 START\n");
        return 2;
    }
    uint32_t n = (uint32_t)atol(argv[2]), d = (uint32_t)atol(argv[3]), batch = (uint32_t)atol(argv[4]);
    double l2 = atof(argv[5]);
    uint32_t single_start = (uint32_t)atol(argv[8]);
    size_t count = (size_t)n * d;
    float* f32 = malloc(count * sizeof(float));
    uint16_t* f16 = malloc(count * sizeof(uint16_t));
    uint32_t* starts = malloc(n * sizeof(uint32_t));
    uint32_t* out = malloc((size_t)n * n * sizeof(uint32_t));
    uint32_t* again = malloc((size_t)batch * n * sizeof(uint32_t));
    uint32_t* single = malloc(n * sizeof(uint32_t));
    FILE* f = fopen(argv[1], "rb");
    if (!f || fread(f32, sizeof(float), count, f) != count) return fail("reading the table");
    fclose(f);

    VkComputeContext* ctx = vkc_init(true);
    if (!ctx) return fail("vkc_init");
    printf("device: %s, %llu bytes\n", vkc_get_device_name(ctx),
           (unsigned long long)vkc_get_device_memory(ctx));
    vkc_fp32_to_fp16(f32, f16, (uint32_t)count);

    for (uint32_t i = 0; i < n; ++i) starts[i] = i;
    /* The user's tile formula: as many fp16 rows as fit 85% of L2; then what a three-argument
     * declaration leaves in the fourth register (values seen on x86-64). */
    uint32_t tile = (uint32_t)(l2 * 0.85 / (d * 2.0));
    const uint32_t tiles[] = {tile, 0, 1025, 0x80000001u, 12, 22, 87, 1, 0xffffffffu};
    const char* engine = "none";
    VkDiversityBatchContext* b = NULL;
    for (uint32_t first = 0; first < n; first += batch) {
        uint32_t size = n - first < batch ? n - first : batch;
        vkd_batch_destroy(b);
        b = vkd_batch_init(ctx, f16, n, d, size, starts + first);
        if (!b) return fail("vkd_batch_init");
        engine = vkd_batch_engine(b);
        if (run_chunks(b, n, tiles, (int)(sizeof tiles / sizeof tiles[0]))) return 1;
        if (vkd_batch_download_sequences(b, out + (size_t)first * n) != VKC_SUCCESS) return fail("download");
    }
    printf("engine: %s\n", engine);

    int bad = 0;
    /* The first batch again, untiled: the same bytes. */
    VkDiversityBatchContext* b0 = vkd_batch_init(ctx, f16, n, d, batch, starts);
    if (!b0) return fail("vkd_batch_init (again)");
    const uint32_t untiled[] = {0};
    if (run_chunks(b0, n, untiled, 1)) return 1;
    if (vkd_batch_download_sequences(b0, again) != VKC_SUCCESS) return fail("download (again)");
    bad += expect(memcmp(again, out, (size_t)batch * n * sizeof(uint32_t)) == 0,
                  "any tile_size gives the bytes of the untiled run");
    bad += expect(vkd_batch_engine(NULL) == NULL, "the engine of a NULL batch");
    vkd_batch_destroy(b0);
    setenv("DIVERSITY_MODE", "fastest", 1);
    bad += expect(vkd_batch_init(ctx, f16, n, d, batch, starts) == NULL, "DIVERSITY_MODE=fastest");
    bad += expect(strstr(vkc_last_error(), "DIVERSITY_MODE") != NULL, "the message names DIVERSITY_MODE");
    unsetenv("DIVERSITY_MODE");

    /* Misuse answered, not crashed. */
    bad += expect(vkd_batch_compute_chunk(b, 1, 1, 0) == VKC_ERROR_INVALID_ARGUMENT, "a chunk out of order");
    bad += expect(strstr(vkc_last_error(), "vkd_batch_compute_chunk") != NULL, "the message names the call");
    bad += expect(vkd_batch_compute_chunk(NULL, 1, 1, 0) == VKC_ERROR_INVALID_ARGUMENT, "a NULL batch");
    bad += expect(vkd_batch_download_sequences(b, NULL) == VKC_ERROR_INVALID_ARGUMENT, "a NULL output");
    bad += expect(vkd_batch_init(ctx, NULL, n, d, batch, starts) == NULL, "NULL embeddings");
    bad += expect(vkd_batch_init(ctx, f16, n, d, n + 1, starts) == NULL, "batch_size past N");
    bad += expect(vkd_batch_init(ctx, f16, 0, d, 1, starts) == NULL, "N = 0");
    bad += expect(vkd_init(NULL, f32, n, d) == NULL, "a NULL context");
    bad += expect(strcmp(vkc_get_error_string(VKC_ERROR_OUT_OF_MEMORY), "VKC_ERROR_OUT_OF_MEMORY") == 0, "code names");
    bad += expect(vkc_fp16_to_fp32(0x3c00) == 1.0f, "fp16 1.0");
    vkd_batch_destroy(b);
    vkd_batch_destroy(NULL);

    /* The old wrapper's single sequence: init, compute, destroy, with the same table each time. */
    double cycle[20];
    for (int k = 0; k < 20; ++k) {
        double t0 = now_s();
        VkDiversityContext* one = vkd_init(ctx, f32, n, d);
        if (!one) return fail("vkd_init");
        if (vkd_compute_sequence(one, single_start, single) != VKC_SUCCESS) return fail("vkd_compute_sequence");
        if (k == 0) {
            bad += expect(vkd_compute_sequence(one, n, single) == VKC_ERROR_INVALID_ARGUMENT, "a start past N");
            bad += expect(vkd_compute_sequence(one, 0, NULL) == VKC_ERROR_INVALID_ARGUMENT, "a NULL output");
            /* Prefixes: the whole sequence's first values, for k = 0, 1, 9 and past N - 1. */
            uint32_t ks[4] = {0, 1, 9, n + 5};
            uint32_t* pre = malloc(sizeof(uint32_t) * n);
            for (int i = 0; i < 4; ++i) {
                uint32_t len = (ks[i] < n - 1 ? ks[i] : n - 1) + 1;
                for (uint32_t j = 0; j < n; ++j) pre[j] = 0xdeadbeef;
                bad += expect(vkd_compute_prefix(one, single_start, ks[i], pre, len) == VKC_SUCCESS, "a prefix");
                bad += expect(memcmp(pre, single, sizeof(uint32_t) * len) == 0, "a prefix is the sequence's start");
                if (len < n) bad += expect(pre[len] == 0xdeadbeef, "a prefix writes only its values");
            }
            bad += expect(vkd_compute_prefix(one, single_start, 9, pre, 9) == VKC_ERROR_INVALID_ARGUMENT, "output_len short");
            bad += expect(strstr(vkc_last_error(), "output_len 9") != NULL, "output_len named");
            bad += expect(vkd_compute_prefix(one, n, 1, pre, n) == VKC_ERROR_INVALID_ARGUMENT, "a prefix's start past N");
            bad += expect(vkd_compute_prefix(NULL, 0, 1, pre, n) == VKC_ERROR_INVALID_ARGUMENT, "a NULL context");
            free(pre);
        }
        vkd_destroy(one);
        cycle[k] = now_s() - t0;
    }
    double first_cycle = cycle[0];
    qsort(cycle + 1, 19, sizeof(double), cmp_double);
    printf("single-sequence cycles: first %.4f s, median of the later 19 %.4f s\n", first_cycle, cycle[10]);

    /* A lost device (injected) and a panic (injected) are codes and messages; the process and the
     * context live on. */
    bad += injected(ctx, f16, n, d, batch, starts, "DIVERSITY_FAIL_AFTER_CHUNKS", "0", "lost");
    bad += injected(ctx, f16, n, d, batch, starts, "DIVERSITY_INJECT_PANIC", "1", "panic");
    vkc_destroy(ctx);

    FILE* o = fopen(argv[6], "wb");
    if (!o || fwrite(out, sizeof(uint32_t), (size_t)n * n, o) != (size_t)n * n) return 1;
    fclose(o);
    o = fopen(argv[7], "wb");
    if (!o || fwrite(single, sizeof(uint32_t), n, o) != n) return 1;
    fclose(o);
    printf("old_driver: %u sequences of %u in batches of %u, tile %u, %d failed expectations\n", n, n, batch, tile, bad);
    free(f32); free(f16); free(starts); free(out); free(again); free(single);
    return bad ? 1 : 0;
}
