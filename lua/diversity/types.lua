---@meta diversity
-- LuaLS annotations for `require "diversity"`: every module function, every handle method and
-- every option table. Editors read this file; nothing runs it. docs/lua.md says what each call
-- does; tests/lua/stubs_spec.lua holds these names to what the built module exports, both ways.
-- Item ids inside results are 0-based; the arrays holding them are 1-based Lua arrays.

local diversity = {}

---"diversity X.Y.Z", the crate's version.
diversity._VERSION = ""
---"X.Y.Z", the crate's version.
diversity.version = ""
---The name of the environment variable that injects a device loss (tests).
diversity.ENV_FAIL_AFTER_CHUNKS = "DIVERSITY_FAIL_AFTER_CHUNKS"
---The name of the environment variable that injects a panic (tests).
diversity.ENV_INJECT_PANIC = "DIVERSITY_INJECT_PANIC"

---@alias diversity.Precision "fp32"|"fp16"
---@alias diversity.Mode "auto"|"scan"|"gram"
---@alias diversity.Metric "cosine"|"ip"|"l2"
---@alias diversity.ModeCode "requested"|"requested_unfit"|"auto_fits"|"auto_unfit"

---------------------------------------------------------------------------------------------------
-- Option tables
---------------------------------------------------------------------------------------------------

---@class diversity.OpenOptions
---@field device? string|integer an index, a name substring, a "GPU-…" UUID, or "host"
---@field validation? boolean Vulkan validation layers on

---@class diversity.TableOptions
---@field dim? integer row length (a flat Lua array, a string, a cdata)
---@field n? integer rows (a cdata)
---@field dtype? "f32"|"f16" the element type of a binary string
---@field count? integer elements of a cdata to read (may only narrow ffi.sizeof)
---@field ids? any[] row ids (strings or numbers)

---@class diversity.LoadOptions
---@field dim? integer row length of a raw .f32 file

---@class diversity.JobOptions
---@field mode? diversity.Mode engine; "auto" (default): gram when G fits
---@field chunk? integer steps per submission inside one step call (0: one submission)
---@field steps? integer top_k: steps per sequence
---@field workgroup? integer workgroup size
---@field shape? "untiled"|"tiled"|"per-tile" scan: how candidates are walked
---@field tile? integer scan: candidates per tile
---@field pipelined? boolean scan: two command buffers in flight
---@field placement? "auto"|"registers"|"memory" gram: where each sequence's state lives
---@field compensated? boolean gram: float32 TwoSum key sums (true) or plain (false)
---@field judge? boolean gram: re-score uncertain picks with the float judge
---@field centered? boolean gram: the table's mean was subtracted
---@field subgroups? boolean false forces the shared-memory reduction

---@class diversity.SequencerOptions: diversity.JobOptions
---@field g? "auto"|"rows"|"whole" host engine: build G's rows as picks need them, whole once a quarter is built (auto), or whole at once

---@class diversity.GrowOptions: diversity.JobOptions
---@field checkpoint? string a directory that keeps each finished job
---@field resume? boolean take the jobs a killed run left in `checkpoint`

---@class diversity.KnnOptions
---@field k? integer neighbours per query (10)
---@field metric? diversity.Metric ("cosine")
---@field query_tile? integer queries per tile
---@field table_tile? integer table rows per tile
---@field subgroups? boolean false: no subgroup operations
---@field warp_select? boolean false: no WarpSelect
---@field full_ranking? boolean true: sort whole rows
---@field verify? integer queries cross-checked against a float64 brute force

---@class diversity.RankingsOptions
---@field top_k? integer entries per item (nil or 0: all N − 1)
---@field metric? diversity.Metric
---@field batch? integer items per k-NN batch
---@field items? integer[] the 0-based items to rank (default all)
---@field values? boolean return the scores too (true)
---@field each? fun(items: integer[], rows: integer[][], values: number[][]) called per batch
---@field subgroups? boolean
---@field full_ranking? boolean
---@field verify? integer items cross-checked against a float64 brute force

---@class diversity.RankingsCacheOptions
---@field top_k? integer
---@field metric? diversity.Metric
---@field batch? integer
---@field items? integer[]
---@field model? string model name for the metadata
---@field metadata? table extra metadata fields
---@field ids? any[] keys and values through these ids (default: the table's)
---@field threads? integer the JSON writer's threads (nil or 0: the machine's)
---@field subgroups? boolean
---@field full_ranking? boolean
---@field verify? integer

---@class diversity.KnnGraphOptions
---@field k? integer neighbours per item (10)
---@field metric? diversity.Metric
---@field batch? integer

---@class diversity.OpenDevicesOptions
---@field validation? boolean

---@class diversity.KnnIndexOptions
---@field layout? "shards"|"replicas" row slices (default) or whole copies
---@field weights? number[] each device's share

---@class diversity.KmeansOptions
---@field iters? integer (20)
---@field seed? integer (1234)
---@field max_points_per_centroid? integer (256; 0 = never subsample)
---@field init? diversity.Table the k initial centroids

---@class diversity.IvfOptions
---@field nlist integer lists (required)
---@field metric? diversity.Metric ("cosine")
---@field precision? diversity.Precision list storage ("fp32")
---@field iters? integer
---@field seed? integer
---@field max_points_per_centroid? integer

---@class diversity.IvfPqOptions
---@field nlist integer lists (required)
---@field m integer sub-spaces (bytes a row); must divide dim
---@field metric? diversity.Metric ("cosine")
---@field refine? boolean keep the rows for the exact re-rank
---@field iters? integer
---@field seed? integer
---@field max_points_per_centroid? integer

---@class diversity.IvfSearchOptions: diversity.KnnOptions
---@field nprobe? integer lists probed per query (1)
---@field k_factor? integer IVF-PQ with refine: re-rank k × k_factor candidates (1)

---@class diversity.BatchSizesRequest
---@field gram boolean
---@field requested? integer
---@field default integer
---@field fit integer
---@field host_fit integer
---@field devices integer
---@field starts integer
---@field all_starts integer

---@class diversity.CheckpointFingerprint
---@field input string
---@field center? boolean
---@field precision string
---@field mode string
---@field summation? string
---@field steps integer
---@field batch integer
---@field starts integer[]
---@field n integer
---@field dim integer

---------------------------------------------------------------------------------------------------
-- Module functions
---------------------------------------------------------------------------------------------------

---@param opts? diversity.OpenOptions
---@return diversity.Context
function diversity.open(opts) end

---@return {index: integer, name: string, type: string, uuid: string}[]
function diversity.devices() end

---@param spec string "all" or a comma list of indices, name substrings or UUIDs
---@param opts? diversity.OpenDevicesOptions
---@return diversity.Context[]
function diversity.open_devices(spec, opts) end

---@param src table|string|ffi.cdata*
---@param opts? diversity.TableOptions
---@return diversity.Table
function diversity.table(src, opts) end

---@param path string embeddings.json, .npy, .f32 or an fp16 .bin
---@param opts? diversity.LoadOptions
---@return diversity.Table
function diversity.load(path, opts) end

---@param path string
---@param space? string
---@param checksum? string
---@return diversity.Table table, string space
function diversity.load_fp16_bin(path, space, checksum) end

---@param path string
---@param t diversity.Table
---@param source_checksum string
function diversity.save_ids(path, t, source_checksum) end

---@param path string
---@param n integer
---@param source_checksum string
---@return any[]|false
function diversity.load_ids(path, n, source_checksum) end

---@param path string
---@return string
function diversity.file_checksum(path) end

---@param bytes string
---@return string
function diversity.checksum(bytes) end

---@param bytes string
---@return string
function diversity.words_checksum(bytes) end

---@param a string
---@param b string
---@return boolean
function diversity.same_file(a, b) end

---@param path string
---@return string|nil
function diversity.file_kind(path) end

---@param x number
---@return integer
function diversity.f32_to_f16(x) end

---@param bits integer
---@return number
function diversity.f16_to_f32(bits) end

---@param src ffi.cdata* float[?]
---@param dst ffi.cdata* uint16_t[?]
---@param count integer
function diversity.convert_f32_to_f16(src, dst, count) end

---@param n integer
---@return integer
function diversity.gram_bytes(n) end

---@param starts integer[]
---@param n integer
function diversity.check_starts(starts, n) end

---@param contexts diversity.Context[]
---@param n integer
---@param dim integer
---@param precision? diversity.Precision
---@param steps? integer
---@param mode? diversity.Mode
---@return integer
function diversity.max_batch(contexts, n, dim, precision, steps, mode) end

---@param contexts diversity.Context[]
---@param n integer
---@param dim integer
---@param precision? diversity.Precision
---@param mode? diversity.Mode
---@return "scan"|"gram" mode, string reason, diversity.ModeCode code, string|nil unfit
function diversity.mode_for(contexts, n, dim, precision, mode) end

---@param bytes number
---@param steps integer
---@return integer
function diversity.host_batch(bytes, steps) end

---@param request diversity.BatchSizesRequest
---@return integer
function diversity.batch_sizes(request) end

---@return integer
function diversity.default_host_memory() end

---@return integer|nil
function diversity.host_memory() end

---@param jobs diversity.Job[]
---@return integer|nil
function diversity.wait_any(jobs) end

---@param path string
---@param metadata? table
---@param ids? any[]
---@return diversity.JsonCacheWriter
function diversity.json_cache_writer(path, metadata, ids) end

---@param path string
---@param n integer
---@param len? integer
---@return diversity.BinaryCacheWriter
function diversity.binary_cache_writer(path, n, len) end

---@param path string
---@return diversity.BinaryCache
function diversity.open_binary_cache(path) end

---@param path string
---@return table
function diversity.cache_metadata(path) end

---@param out string
---@param inputs string[]
---@return {shards: integer, layout: string, sequences: integer}
function diversity.merge_caches(out, inputs) end

---@param t diversity.Table
---@param precision? diversity.Precision
---@return string
function diversity.table_checksum(t, precision) end

---@param path string
---@return true
function diversity.verify_cache_checksum(path) end

---@param path string
---@param t diversity.Table
---@param n integer
---@param len integer
---@return string
function diversity.read_cache_rows(path, t, n, len) end

---@param path string
---@return diversity.KnnGraph
function diversity.knn_graph(path) end

---@param contexts diversity.Context[]
---@param t diversity.Table
---@param precision? diversity.Precision
---@param opts? diversity.KnnIndexOptions
---@return diversity.KnnIndex
function diversity.knn_index(contexts, t, precision, opts) end

---@param ctx diversity.Context
---@param t diversity.Table
---@param k integer
---@param opts? diversity.KmeansOptions
---@return diversity.Table centroids, integer[] assignment, table report
function diversity.kmeans(ctx, t, k, opts) end

---@param ctx diversity.Context
---@param dim integer
---@param opts diversity.IvfOptions
---@return diversity.IvfIndex
function diversity.ivf_index(ctx, dim, opts) end

---@param ctx diversity.Context
---@param path string
---@return diversity.IvfIndex
function diversity.load_ivf_index(ctx, path) end

---@param ctx diversity.Context
---@param dim integer
---@param opts diversity.IvfPqOptions
---@return diversity.IvfPqIndex
function diversity.ivfpq_index(ctx, dim, opts) end

---@param ctx diversity.Context
---@param path string
---@return diversity.IvfPqIndex
function diversity.load_ivfpq_index(ctx, path) end

---@return diversity.Rows
function diversity.rows() end

---@return number seconds
function diversity.clock() end

---@param err any
---@return string
function diversity.message(err) end

---@param text string
---@return any
function diversity.json_decode(text) end

---@param value any
---@return string
function diversity.json_encode(value) end

---@param starts integer[]
---@return string
function diversity.starts_fingerprint(starts) end

---@param fp diversity.CheckpointFingerprint
---@return string
function diversity.checkpoint_fingerprint(fp) end

---@param fp string
---@param generated_at string
---@return string
function diversity.checkpoint_run_text(fp, generated_at) end

---@param dir string
---@param fp string
---@param run_text string
function diversity.checkpoint_check_run(dir, fp, run_text) end

---@param dir string
---@return string|nil
function diversity.checkpoint_time(dir) end

---@param dir string
---@return string[]
function diversity.checkpoint_files(dir) end

---@param dir string
---@param b integer
---@return string
function diversity.checkpoint_batch_file(dir, b) end

---@param dir string
---@param b integer
---@return string
function diversity.checkpoint_part_file(dir, b) end

---@param run_text string
---@param b integer
---@param starts integer[]
---@return string
function diversity.checkpoint_binding(run_text, b, starts) end

---@param binding string
---@param bytes string|diversity.Rows
---@return string
function diversity.checkpoint_batch_checksum(binding, bytes) end

---@param binding string
---@param from integer
---@param count integer
---@param bytes string|diversity.Rows
---@return string
function diversity.checkpoint_part_head(binding, from, count, bytes) end

---@param bytes string
---@param starts integer[]
---@param len integer
---@param n integer
---@return integer|nil
function diversity.checkpoint_check_rows(bytes, starts, len, n) end

---@param path string
---@param binding string
---@param starts integer[]
---@param len integer
---@param n integer
---@return string|nil
function diversity.checkpoint_read_batch(path, binding, starts, len, n) end

---@param path string
---@param binding string
---@param starts integer[]
---@param n integer
---@return string|nil bytes, integer|nil have
function diversity.checkpoint_read_part(path, binding, starts, n) end

---------------------------------------------------------------------------------------------------
-- Handles. Every handle has close(); a call after close() raises "… used after close()".
---------------------------------------------------------------------------------------------------

---@class diversity.Context
local Context = {}
---@return string
function Context:describe() end
---@return string
function Context:name() end
---@return "host"|"device"
function Context:engine() end
---@return integer
function Context:l2_bytes() end
---@return table
function Context:caps() end
---@param n integer
---@param dim integer
---@param precision? diversity.Precision
---@param steps? integer
---@param mode? diversity.Mode
---@return integer
function Context:max_batch(n, dim, precision, steps, mode) end
---@param n integer
---@param dim integer
---@param precision? diversity.Precision
---@param mode? diversity.Mode
---@return "scan"|"gram" mode, string reason, diversity.ModeCode code, string|nil unfit
function Context:mode_for(n, dim, precision, mode) end
---@param n integer
---@param dim integer
---@param opts? diversity.JobOptions
---@return string
function Context:gram_summation(n, dim, opts) end
---@param n integer
---@param dim integer
---@param mode? diversity.Mode
---@param opts? diversity.JobOptions
---@return string|nil
function Context:summation(n, dim, mode, opts) end
---@return string[]
function Context:validation_messages() end
---@param t diversity.Table
---@param precision? diversity.Precision
---@return diversity.DeviceTable
function Context:upload(t, precision) end
function Context:close() end

---@class diversity.Table
local Table = {}
---@return integer
function Table:n() end
---@return integer
function Table:dim() end
---@return any[]|nil
function Table:ids() end
---@param ids any[]
---@return diversity.Table
function Table:with_ids(ids) end
---@param start integer
---@param seq integer[]
---@param eps? number
---@param precision? diversity.Precision
---@return number worst_excess
function Table:check_sequence(start, seq, eps, precision) end
---@return diversity.Table
function Table:centered() end
---@param n integer
---@return diversity.Table
function Table:head(n) end
---@param i integer 0-based
---@return number[]
function Table:row(i) end
---@param path string
---@param space string
---@param checksum string
function Table:save_fp16_bin(path, space, checksum) end
function Table:close() end

---@class diversity.DeviceTable
local DeviceTable = {}
---@return integer
function DeviceTable:n() end
---@return integer
function DeviceTable:dim() end
---@return diversity.Precision
function DeviceTable:precision() end
---@param opts? diversity.JobOptions
---@return diversity.Gram
function DeviceTable:gram(opts) end
function DeviceTable:release_gram() end
---@param mode? diversity.Mode
---@return "scan"|"gram" mode, string reason, diversity.ModeCode code, string|nil unfit
function DeviceTable:mode_for(mode) end
---@param starts? integer[]
---@param opts? diversity.JobOptions
---@return diversity.Job
function DeviceTable:job(starts, opts) end
---@param t diversity.Table|nil
---@param starts integer[]
---@param prefixes integer[][]
---@param len integer
---@param opts? diversity.JobOptions
---@return diversity.Job
function DeviceTable:resume_job(t, starts, prefixes, len, opts) end
---@param opts? diversity.SequencerOptions
---@return diversity.Sequencer
function DeviceTable:sequencer(opts) end
---@param t diversity.Table
---@param n_old integer
---@param rows string
---@param len integer
---@param opts? diversity.GrowOptions
---@return string rows, table report
function DeviceTable:grow(t, n_old, rows, len, opts) end

---@param queries diversity.Table
---@param opts? diversity.KnnOptions
---@return diversity.KnnResult
function DeviceTable:knn(queries, opts) end
---@param t diversity.Table
---@param opts? diversity.RankingsOptions
---@return integer[][]|table rows, number[][]|nil values, table|nil report
function DeviceTable:rankings(t, opts) end
---@param t diversity.Table
---@param path string
---@param opts? diversity.RankingsCacheOptions
---@return table report
function DeviceTable:write_rankings_cache(t, path, opts) end
---@param t diversity.Table
---@param path string
---@param opts? diversity.KnnGraphOptions
---@return table report
function DeviceTable:write_knn_graph(t, path, opts) end
function DeviceTable:close() end

---@class diversity.Gram
local Gram = {}
---@return integer
function Gram:n() end
---@return integer
function Gram:bytes() end
---@return integer
function Gram:slabs() end
---@return integer
function Gram:build_gpu_ns() end
---@param i integer 0-based
---@return number[]
function Gram:row(i) end
---@param starts? integer[]
---@param opts? diversity.JobOptions
---@return diversity.Job
function Gram:job(starts, opts) end
---@param starts integer[]
---@param prefixes integer[][]
---@param len integer
---@param opts? diversity.JobOptions
---@return diversity.Job
function Gram:resume_job(starts, prefixes, len, opts) end
function Gram:close() end

---@class diversity.Job
local Job = {}
---@param n integer
---@param tile? integer
---@return integer steps, integer gpu_ns
function Job:step(n, tile) end
---@param n integer
function Job:start(n) end
---@return boolean
function Job:ready() end
---@return integer steps, integer gpu_ns
function Job:wait() end
---@param c integer
function Job:set_chunk(c) end
---@return boolean
function Job:done() end
---@return "scan"|"gram"
function Job:mode() end
---@return "host"|"device"
function Job:engine() end
---@return string|nil
function Job:placement() end
---@return integer
function Job:workgroup_size() end
---@return boolean|nil
function Job:uses_subgroups() end
---@return integer done, integer total
function Job:progress() end
---@return integer
function Job:gpu_ns() end
---@return integer
function Job:batch_size() end
---@return integer
function Job:sequence_len() end
---@return integer[]
function Job:starts() end
---@return integer[][]
function Job:sequences() end
---@param from integer
---@param to integer
---@return string
function Job:columns(from, to) end
---@param rows diversity.Rows
---@param from integer
---@param to integer
function Job:columns_into(rows, from, to) end
---@return string
function Job:sequences_bytes() end
---@param buf ffi.cdata* uint32_t[?]
---@return integer
function Job:download(buf) end
function Job:close() end

---@class diversity.KnnResult
local KnnResult = {}
---@return integer
function KnnResult:k() end
---@return integer
function KnnResult:queries() end
---@return integer
function KnnResult:gpu_ns() end
---@return integer
function KnnResult:verified() end
---@return "warp_select"|"select"|"full_ranking"
function KnnResult:path() end
---@return boolean
function KnnResult:subgroups() end
---@param q? integer 0-based query
---@return integer[]|integer[][]
function KnnResult:ids(q) end
---@param q? integer 0-based query
---@return number[]|number[][]
function KnnResult:distances(q) end
---@return string
function KnnResult:ids_bytes() end
---@return string
function KnnResult:distances_bytes() end
---@param ids? ffi.cdata* int32_t[?]
---@param dists? ffi.cdata* float[?]
function KnnResult:download(ids, dists) end
function KnnResult:close() end

---@class diversity.KnnGraph
local KnnGraph = {}
---@return integer
function KnnGraph:n() end
---@return integer
function KnnGraph:k() end
---@return diversity.Metric
function KnnGraph:metric() end
---@param i integer 0-based
---@return integer[] ids, number[] values
function KnnGraph:row(i) end
function KnnGraph:close() end

---@class diversity.JsonCacheWriter
local JsonCacheWriter = {}
---@param start integer
---@param seq integer[]
function JsonCacheWriter:write(start, seq) end
---@param job diversity.Job
function JsonCacheWriter:write_job(job) end
---@param starts integer[]
---@param bytes string
---@param len integer
function JsonCacheWriter:write_bytes(starts, bytes, len) end
---@param starts integer[]
---@param rows diversity.Rows
---@param first integer 0-based
function JsonCacheWriter:write_rows(starts, rows, first) end
function JsonCacheWriter:finish() end
function JsonCacheWriter:close() end

---@class diversity.BinaryCacheWriter
local BinaryCacheWriter = {}
---@param start integer
---@param seq integer[]
function BinaryCacheWriter:write(start, seq) end
---@param job diversity.Job
function BinaryCacheWriter:write_job(job) end
---@param starts integer[]
---@param bytes string
---@param len integer
function BinaryCacheWriter:write_bytes(starts, bytes, len) end
---@param starts integer[]
---@param rows diversity.Rows
---@param first integer 0-based
function BinaryCacheWriter:write_rows(starts, rows, first) end
function BinaryCacheWriter:finish() end
function BinaryCacheWriter:close() end

---@class diversity.BinaryCache
local BinaryCache = {}
---@return integer
function BinaryCache:n() end
---@return integer
function BinaryCache:len() end
---@param start integer
---@return integer[]
function BinaryCache:sequence(start) end
function BinaryCache:close() end

---@class diversity.KnnIndex
local KnnIndex = {}
---@param queries diversity.Table
---@param opts? diversity.KnnOptions
---@return diversity.KnnResult result, {per_device_ns: integer[], ranges: integer[][]} report
function KnnIndex:knn(queries, opts) end
---@return "shards"|"replicas"
function KnnIndex:layout() end
function KnnIndex:close() end

---@class diversity.IvfIndex
local IvfIndex = {}
---@param t diversity.Table
---@return table report
function IvfIndex:train(t) end
---@param t diversity.Table
---@return integer first
function IvfIndex:add(t) end
---@param queries diversity.Table
---@param opts? diversity.IvfSearchOptions
---@return diversity.KnnResult result, table report
function IvfIndex:search(queries, opts) end
---@param path string
function IvfIndex:save(path) end
---@return integer
function IvfIndex:ntotal() end
---@return integer
function IvfIndex:nlist() end
---@return integer
function IvfIndex:dim() end
---@return diversity.Metric
function IvfIndex:metric() end
---@return diversity.Precision
function IvfIndex:precision() end
---@return boolean
function IvfIndex:is_trained() end
---@return integer[]
function IvfIndex:list_sizes() end
---@return diversity.Table
function IvfIndex:centroids() end
function IvfIndex:close() end

---@class diversity.IvfPqIndex
local IvfPqIndex = {}
---@param t diversity.Table
---@return table report
function IvfPqIndex:train(t) end
---@param t diversity.Table
---@return integer first
function IvfPqIndex:add(t) end
---@param queries diversity.Table
---@param opts? diversity.IvfSearchOptions
---@return diversity.KnnResult result, table report
function IvfPqIndex:search(queries, opts) end
---@param path string
function IvfPqIndex:save(path) end
---@return integer
function IvfPqIndex:ntotal() end
---@return integer
function IvfPqIndex:nlist() end
---@return integer
function IvfPqIndex:m() end
---@return integer
function IvfPqIndex:dim() end
---@return diversity.Metric
function IvfPqIndex:metric() end
---@return boolean
function IvfPqIndex:refine() end
---@return boolean
function IvfPqIndex:is_trained() end
---@return integer[]
function IvfPqIndex:list_sizes() end
---@return diversity.Table
function IvfPqIndex:centroids() end
function IvfPqIndex:close() end

---@class diversity.SequencerReport
---@field engine "host"|"device"
---@field mode "gram"|"scan"
---@field g "none"|"rows"|"whole"
---@field rows_built integer
---@field n integer
---@field queries integer
---@field sequences integer
---@field query_ns integer
---@field g_ns integer

---@class diversity.Sequencer
local Sequencer = {}
---@param start integer
---@param k integer
---@return integer[]
function Sequencer:sequence(start, k) end
---@param starts integer[]
---@param k integer
---@return integer[][]
function Sequencer:sequences(starts, k) end
---@return diversity.SequencerReport
function Sequencer:report() end
function Sequencer:close() end

---@class diversity.Rows
local Rows = {}
---@return integer
function Rows:count() end
---@return integer
function Rows:len() end
---@return string
function Rows:bytes() end
---@return string
function Rows:checksum() end
---@return string
function Rows:words_checksum() end
---@param path string
---@param head? string
function Rows:append_to(path, head) end
---@param path string
function Rows:write_to(path) end

return diversity
