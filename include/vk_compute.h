/* The C ABI of libvkcompute.so, exported by diversity's library (target/lua/diversity.so or
 * libdiversity.so): point an existing driver's VK_COMPUTE_LIB at it. Definitions in
 * src/capi.rs; tests/capi.rs compiles tests/c/old_driver.c against this header and runs it.
 *
 * Layouts: embeddings row-major, num_poems rows of embedding_dim values (fp16: IEEE half bits);
 * sequences are 0-based item indices, the start first; a batch's output row i is the sequence
 * of start_indices[i] (batch_size x num_poems values). Batch slots are steps 1 .. N-1, computed
 * in order; tile_size 0 (or >= N) is untiled. Every failure sets a message for vkc_last_error()
 * (per thread); NULL, zero or oversized arguments give VKC_ERROR_INVALID_ARGUMENT (or NULL)
 * instead of a crash; nothing is printed. */
#ifndef VK_COMPUTE_H
#define VK_COMPUTE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    VKC_SUCCESS = 0,
    VKC_ERROR_INIT_FAILED = -1,
    VKC_ERROR_NO_SUITABLE_DEVICE = -2,
    VKC_ERROR_BUFFER_CREATION = -3,
    VKC_ERROR_SHADER_LOAD = -4,
    VKC_ERROR_PIPELINE_CREATION = -5,
    VKC_ERROR_COMMAND_EXECUTION = -6, /* a lost device lands here */
    VKC_ERROR_OUT_OF_MEMORY = -7,
    VKC_ERROR_INVALID_ARGUMENT = -8 /* not in the original library */
} VkComputeResult;

typedef struct VkComputeContext VkComputeContext;
typedef struct VkDiversityContext VkDiversityContext;
typedef struct VkDiversityBatchContext VkDiversityBatchContext;

VkComputeContext* vkc_init(bool enable_validation);
void vkc_destroy(VkComputeContext* ctx);
const char* vkc_get_error_string(VkComputeResult result);
const char* vkc_last_error(void); /* not in the original library */
const char* vkc_get_device_name(VkComputeContext* ctx);
uint64_t vkc_get_device_memory(VkComputeContext* ctx);
void vkc_fp32_to_fp16(const float* src, uint16_t* dst, uint32_t count);
float vkc_fp16_to_fp32(uint16_t bits);

VkDiversityContext* vkd_init(VkComputeContext* ctx, const float* embeddings, uint32_t num_poems,
                             uint32_t embedding_dim);
VkComputeResult vkd_compute_sequence(VkDiversityContext* ctx, uint32_t start_poem,
                                     uint32_t* output_sequence);
/* The first k steps from start_poem: min(k, num_poems - 1) + 1 values, the start first, the
 * same as the first values of vkd_compute_sequence's; output_len is the room at
 * output_sequence (too little: -8). Not in the old library. */
VkComputeResult vkd_compute_prefix(VkDiversityContext* ctx, uint32_t start_poem, uint32_t k,
                                   uint32_t* output_sequence, uint32_t output_len);
void vkd_destroy(VkDiversityContext* ctx);

VkDiversityBatchContext* vkd_batch_init(VkComputeContext* ctx, const uint16_t* embeddings_fp16,
                                        uint32_t num_poems, uint32_t embedding_dim,
                                        uint32_t batch_size, const uint32_t* start_indices);
VkComputeResult vkd_batch_compute_chunk(VkDiversityBatchContext* batch, uint32_t start_slot,
                                        uint32_t slot_count, uint32_t tile_size);
VkComputeResult vkd_batch_download_sequences(VkDiversityBatchContext* batch,
                                             uint32_t* output_sequences);
/* The engine a batch runs: "gram" or "scan" on the device, "host gram" or "host scan" on the
 * native CPU engine (where no GPU is present; static); NULL for a NULL batch. Not in the old
 * library. DIVERSITY_MODE=scan|gram|auto (read by vkd_init and vkd_batch_init) pins it. */
const char* vkd_batch_engine(const VkDiversityBatchContext* batch);
void vkd_batch_destroy(VkDiversityBatchContext* batch);

#ifdef __cplusplus
}
#endif
#endif
