-- The old libvkcompute.so C ABI, driven the way the user's own vk_compute.lua drives it: its own
-- ffi.cdef of the declarations, ffi.load of VK_COMPUTE_LIB (default: the module built here),
-- a 10-slot probe, adaptive chunks, the L2 tile formula, download, destroy; every sequence
-- checked with the float64 oracle, and misuse answered with codes and messages.
local ffi = require "ffi"
local diversity = require "diversity"
local H = require "helpers"

pcall(ffi.cdef, [[
typedef struct VkComputeContext VkComputeContext;
typedef struct VkDiversityContext VkDiversityContext;
typedef struct VkDiversityBatchContext VkDiversityBatchContext;
VkComputeContext* vkc_init(bool enable_validation);
void vkc_destroy(VkComputeContext* ctx);
const char* vkc_get_error_string(int result);
const char* vkc_last_error(void);
const char* vkc_get_device_name(VkComputeContext* ctx);
uint64_t vkc_get_device_memory(VkComputeContext* ctx);
void vkc_fp32_to_fp16(const float* src, uint16_t* dst, uint32_t count);
float vkc_fp16_to_fp32(uint16_t bits);
VkDiversityContext* vkd_init(VkComputeContext* ctx, const float* embeddings, uint32_t num_poems,
                             uint32_t embedding_dim);
int vkd_compute_sequence(VkDiversityContext* ctx, uint32_t start_poem, uint32_t* output_sequence);
void vkd_destroy(VkDiversityContext* ctx);
VkDiversityBatchContext* vkd_batch_init(VkComputeContext* ctx, const uint16_t* embeddings_fp16,
                                        uint32_t num_poems, uint32_t embedding_dim,
                                        uint32_t batch_size, const uint32_t* start_indices);
int vkd_batch_compute_chunk(VkDiversityBatchContext* batch, uint32_t start_slot,
                            uint32_t slot_count, uint32_t tile_size);
int vkd_batch_download_sequences(VkDiversityBatchContext* batch, uint32_t* output_sequences);
void vkd_batch_destroy(VkDiversityBatchContext* batch);
]])

pcall(ffi.cdef, [[
const char* vkd_batch_engine(const VkDiversityBatchContext* batch);
]])

describe("the libvkcompute C ABI, driven the old way", function()
  local lib = ffi.load(os.getenv("VK_COMPUTE_LIB") or "target/lua/diversity.so")
  local t = diversity.load(H.DATA_JSON):head(120)
  local N, D = t:n(), t:dim()
  local flat = H.float_rows(t)
  -- The user's current wrapper declares the chunk call with three arguments: the fourth
  -- register then holds whatever the caller left there.
  local chunk3 = ffi.typeof("int(*)(VkDiversityBatchContext*, uint32_t, uint32_t)")

  -- The whole cache through vkd_batch_* in batches of B (probe, adaptive chunks; the tile
  -- formula, or the three-argument declaration), every row checked with the float64 oracle.
  -- Returns the engines the batches ran.
  local function whole_cache(ctx, B, three_args)
    local halves = ffi.new("uint16_t[?]", N * D)
    lib.vkc_fp32_to_fp16(flat, halves, N * D)
    local starts = ffi.new("uint32_t[?]", N)
    for i = 0, N - 1 do starts[i] = i end
    -- The user's tile formula with a 32 KiB L2: 35 rows a tile.
    local tile = math.floor(32768 * 0.85 / (D * 2))
    local engines = {}
    for first = 0, N - 1, B do
      local size = math.min(B, N - first)
      local b = lib.vkd_batch_init(ctx, halves, N, D, size, starts + first)
      assert.is_true(b ~= nil, ffi.string(lib.vkc_last_error()))
      engines[ffi.string(lib.vkd_batch_engine(b))] = true
      local slot, chunk = 1, 10
      while slot <= N - 1 do
        local c = math.min(chunk, N - slot)
        local r
        if three_args then r = ffi.cast(chunk3, lib.vkd_batch_compute_chunk)(b, slot, c)
        else r = lib.vkd_batch_compute_chunk(b, slot, c, tile) end
        assert.are.equal(0, r, ffi.string(lib.vkc_last_error()))
        slot, chunk = slot + c, chunk * 2
      end
      local out = ffi.new("uint32_t[?]", size * N)
      assert.are.equal(0, lib.vkd_batch_download_sequences(b, out))
      for i = 0, size - 1 do
        local row = {}
        for k = 0, N - 1 do row[k + 1] = out[i * N + k] end
        assert.are.equal(first + i, row[1])
        assert.is_true(t:check_sequence(first + i, row, 1e-5, "fp16") >= 0)
      end
      lib.vkd_batch_destroy(b)
    end
    return engines
  end

  it("the whole cache runs on the gram engine auto picks; misuse gets codes and messages", function()
    local ctx = lib.vkc_init(true)
    assert.is_not_nil(ctx ~= nil and ctx or nil, ffi.string(lib.vkc_last_error()))
    assert.is_true(#ffi.string(lib.vkc_get_device_name(ctx)) > 0)
    assert.is_true(tonumber(lib.vkc_get_device_memory(ctx)) > 0)
    assert.are.same({ gram = true }, whole_cache(ctx, 32, false))
    assert.are.same({ gram = true }, whole_cache(ctx, 50, true))
    -- Misuse: codes and messages, no crash.
    local halves = ffi.new("uint16_t[?]", N * D)
    local starts = ffi.new("uint32_t[?]", 4)
    local b = lib.vkd_batch_init(ctx, halves, N, D, 4, starts + 0)
    assert.is_true(b == nil)
    assert.matches("repeat", ffi.string(lib.vkc_last_error()))
    for i = 0, 3 do starts[i] = i end
    b = lib.vkd_batch_init(ctx, halves, N, D, 4, starts)
    assert.is_true(b ~= nil, ffi.string(lib.vkc_last_error()))
    assert.are.equal(-8, lib.vkd_batch_compute_chunk(b, 2, 1, 0))
    assert.matches("vkd_batch_compute_chunk: chunks come in order", ffi.string(lib.vkc_last_error()))
    assert.are.equal(-8, lib.vkd_batch_compute_chunk(nil, 1, 1, 0))
    assert.are.equal("VKC_ERROR_INVALID_ARGUMENT", ffi.string(lib.vkc_get_error_string(-8)))
    assert.is_true(lib.vkd_batch_init(ctx, halves, N, D, N + 1, starts) == nil)
    assert.matches("batch_size", ffi.string(lib.vkc_last_error()))
    lib.vkd_batch_destroy(b)
    ffi.C.setenv("DIVERSITY_MODE", "fastest", 1)
    assert.is_true(lib.vkd_batch_init(ctx, halves, N, D, 4, starts) == nil)
    ffi.C.unsetenv("DIVERSITY_MODE")
    assert.matches("DIVERSITY_MODE", ffi.string(lib.vkc_last_error()))
    local one = lib.vkd_init(ctx, flat, N, D)
    assert.is_true(one ~= nil, ffi.string(lib.vkc_last_error()))
    local seq = ffi.new("uint32_t[?]", N)
    assert.are.equal(0, lib.vkd_compute_sequence(one, 7, seq))
    local row = {}
    for k = 0, N - 1 do row[k + 1] = seq[k] end
    assert.is_true(t:check_sequence(7, row, 1e-5, "fp32") >= 0)
    assert.are.equal(-8, lib.vkd_compute_sequence(one, N, seq))
    lib.vkd_destroy(one)
    lib.vkc_destroy(ctx)
  end)

  it("DIVERSITY_MODE=scan keeps the old scan path, any tile_size giving correct rows", function()
    ffi.C.setenv("DIVERSITY_MODE", "scan", 1)
    local ctx = lib.vkc_init(false)
    local ok, engines = pcall(whole_cache, ctx, 60, true)
    ffi.C.unsetenv("DIVERSITY_MODE")
    lib.vkc_destroy(ctx)
    assert(ok, engines)
    assert.are.same({ scan = true }, engines)
  end)

  teardown(function() t:close() end)
end)
