-- The old-ABI path as the user's wrapper drives it, for the end-to-end benchmark: LuaJIT's FFI
-- over the libvkcompute C ABI of LIB (our library), every sequence of an f32 table in batches
-- of BATCH through vkd_batch_* (a 10-slot probe, then chunks sized to 1.5 s x 0.6 from the
-- probe's time per slot, the L2 tile formula), then SINGLES single sequences the way the
-- wrapper's compute_diversity_sequence makes them (vkd_init, vkd_compute_sequence,
-- vkd_destroy around each, the same table every time). Prints the engine, the time spent in
-- the chunk calls (each submits and waits: the device's time plus a submission), and wall times.
--
-- usage: luajit bench/old_abi.lua LIB TABLE.f32 N D [BATCH=3584] [SINGLES=100]
local ffi = require "ffi"
ffi.cdef [[
typedef struct VkComputeContext VkComputeContext;
typedef struct VkDiversityContext VkDiversityContext;
typedef struct VkDiversityBatchContext VkDiversityBatchContext;
VkComputeContext* vkc_init(bool enable_validation);
void vkc_destroy(VkComputeContext* ctx);
const char* vkc_last_error(void);
const char* vkc_get_device_name(VkComputeContext* ctx);
uint64_t vkc_get_device_memory(VkComputeContext* ctx);
void vkc_fp32_to_fp16(const float* src, uint16_t* dst, uint32_t count);
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
typedef struct { long tv_sec; long tv_nsec; } ts_t;
int clock_gettime(int clock_id, ts_t* tp);
]]
pcall(ffi.cdef, "const char* vkd_batch_engine(const VkDiversityBatchContext* batch);")

local libpath, path = arg[1], arg[2]
local N, D = tonumber(arg[3]), tonumber(arg[4])
local BATCH, SINGLES = tonumber(arg[5] or 3584), tonumber(arg[6] or 100)
if not (libpath and path and N and D) then
  io.stderr:write("usage: luajit bench/old_abi.lua LIB TABLE.f32 N D [BATCH] [SINGLES]\n")
  os.exit(2)
end
local lib = ffi.load(libpath)
local ts = ffi.new("ts_t")
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end
local function check(ok, what)
  if not ok then error(what .. ": " .. ffi.string(lib.vkc_last_error()), 2) end
end

local f = assert(io.open(path, "rb"))
local raw = f:read("*a")
f:close()
assert(#raw == N * D * 4, ("%s: %d bytes, expected %d"):format(path, #raw, N * D * 4))
local flat = ffi.new("float[?]", N * D)
ffi.copy(flat, raw, #raw)
raw = nil

local t_all = now()
local ctx = lib.vkc_init(false)
check(ctx ~= nil, "vkc_init")
print(("device: %s, %.1f GiB"):format(ffi.string(lib.vkc_get_device_name(ctx)),
  tonumber(lib.vkc_get_device_memory(ctx)) / 2 ^ 30))
local halves = ffi.new("uint16_t[?]", N * D)
lib.vkc_fp32_to_fp16(flat, halves, N * D)
local out = ffi.new("uint32_t[?]", BATCH * N)
local starts = ffi.new("uint32_t[?]", BATCH)
local tile = math.floor(50 * 2 ^ 20 * 0.85 / (D * 2)) -- the H200's 50 MiB L2
local chunk_s, engine, batches = 0, "?", 0
local t_batched = now()
for first = 0, N - 1, BATCH do
  local size = math.min(BATCH, N - first)
  for i = 0, size - 1 do starts[i] = first + i end
  local b = lib.vkd_batch_init(ctx, halves, N, D, size, starts)
  check(b ~= nil, "vkd_batch_init")
  local ok, e = pcall(function() return ffi.string(lib.vkd_batch_engine(b)) end)
  engine = ok and e or "scan (the old library: no vkd_batch_engine)"
  local slot, count = 1, 10
  while slot <= N - 1 do
    count = math.min(count, N - slot)
    local t0 = now()
    check(lib.vkd_batch_compute_chunk(b, slot, count, tile) == 0, "vkd_batch_compute_chunk")
    local dt = now() - t0
    chunk_s = chunk_s + dt
    slot = slot + count
    count = math.max(1, math.floor(1.5 * 0.6 / math.max(dt / count, 1e-9)))
  end
  check(lib.vkd_batch_download_sequences(b, out) == 0, "vkd_batch_download_sequences")
  lib.vkd_batch_destroy(b)
  batches = batches + 1
end
local batched_wall = now() - t_batched
print(("old-ABI batched: engine %s, %d sequences in %d batch(es) of %d, chunk calls %.3f s, "
  .. "wall %.3f s"):format(engine, N, batches, BATCH, chunk_s, batched_wall))

local seq = ffi.new("uint32_t[?]", N)
local first_s, t_singles = nil, now()
for k = 0, SINGLES - 1 do
  local t0 = now()
  local one = lib.vkd_init(ctx, flat, N, D)
  check(one ~= nil, "vkd_init")
  check(lib.vkd_compute_sequence(one, k % N, seq) == 0, "vkd_compute_sequence")
  lib.vkd_destroy(one)
  first_s = first_s or (now() - t0)
end
local singles = now() - t_singles
print(("old-ABI singles: %d init + sequence + destroy cycles %.3f s (first %.3f s, the rest "
  .. "%.4f s each)"):format(SINGLES, singles, first_s,
  SINGLES > 1 and (singles - first_s) / (SINGLES - 1) or 0))
lib.vkc_destroy(ctx)
print(("old-ABI total wall %.3f s"):format(now() - t_all))
