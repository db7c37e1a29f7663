/* A driver written the old way, against include/vk_compute.h only: reads an f32 table, converts
 * it to fp16 with the library, runs a batch in chunks (a 10-slot probe, then chunks that double,
 * tiles from the L2 formula), downloads the sequences, computes one fp32 sequence, and checks
 * that bad calls, a lost device and a panic (both injected) are answered with codes and messages
 * instead of crashes.
 *
 * usage: old_driver TABLE.f32 N D BATCH L2_BYTES OUT_BATCH.u32 OUT_SINGLE.u32 SINGLE_START */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include "vk_compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char* what) {
    fprintf(stderr, "old_driver: %s: %s\n", what, vkc_last_error());
    return 1;
}

static int expect(int cond, const char* what) {
    if (!cond) fprintf(stderr, "old_driver: expectation failed: %s (last error: %s)\n", what, vkc_last_error());
    return cond ? 0 : 1;
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
    uint32_t* starts = malloc(batch * sizeof(uint32_t));
    uint32_t* out = malloc((size_t)batch * n * sizeof(uint32_t));
    uint32_t* single = malloc(n * sizeof(uint32_t));
    FILE* f = fopen(argv[1], "rb");
    if (!f || fread(f32, sizeof(float), count, f) != count) return fail("reading the table");
    fclose(f);

    VkComputeContext* ctx = vkc_init(true);
    if (!ctx) return fail("vkc_init");
    printf("device: %s, %llu bytes\n", vkc_get_device_name(ctx),
           (unsigned long long)vkc_get_device_memory(ctx));
    vkc_fp32_to_fp16(f32, f16, (uint32_t)count);

    for (uint32_t i = 0; i < batch; ++i) starts[i] = (uint32_t)((uint64_t)i * n / batch);
    VkDiversityBatchContext* b = vkd_batch_init(ctx, f16, n, d, batch, starts);
    if (!b) return fail("vkd_batch_init");
    /* The user's tile formula: as many fp16 rows as fit 85% of L2. */
    uint32_t tile = (uint32_t)(l2 * 0.85 / (d * 2.0));
    uint32_t slot = 1, chunk = 10;
    while (slot <= n - 1) {
        uint32_t c = chunk < n - slot ? chunk : n - slot;
        VkComputeResult r = vkd_batch_compute_chunk(b, slot, c, tile);
        if (r != VKC_SUCCESS) return fail(vkc_get_error_string(r));
        slot += c;
        chunk *= 2; /* adaptive: the probe was fast enough */
    }
    if (vkd_batch_download_sequences(b, out) != VKC_SUCCESS) return fail("download");

    int bad = 0;
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

    VkDiversityContext* one = vkd_init(ctx, f32, n, d);
    if (!one) return fail("vkd_init");
    if (vkd_compute_sequence(one, single_start, single) != VKC_SUCCESS) return fail("vkd_compute_sequence");
    bad += expect(vkd_compute_sequence(one, n, single) == VKC_ERROR_INVALID_ARGUMENT, "a start past N");
    bad += expect(vkd_compute_sequence(one, 0, NULL) == VKC_ERROR_INVALID_ARGUMENT, "a NULL output");
    vkd_destroy(one);

    /* A lost device (injected) and a panic (injected) are codes and messages; the process and the
     * context live on. */
    bad += injected(ctx, f16, n, d, batch, starts, "DIVERSITY_FAIL_AFTER_CHUNKS", "0", "lost");
    bad += injected(ctx, f16, n, d, batch, starts, "DIVERSITY_INJECT_PANIC", "1", "panic");
    vkc_destroy(ctx);

    FILE* o = fopen(argv[6], "wb");
    if (!o || fwrite(out, sizeof(uint32_t), (size_t)batch * n, o) != (size_t)batch * n) return 1;
    fclose(o);
    o = fopen(argv[7], "wb");
    if (!o || fwrite(single, sizeof(uint32_t), n, o) != n) return 1;
    fclose(o);
    printf("old_driver: %u sequences of %u, tile %u, %d failed expectations\n", batch, n, tile, bad);
    free(f32); free(f16); free(starts); free(out); free(single);
    return bad ? 1 : 0;
}
