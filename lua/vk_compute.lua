--- vk_compute: the compatibility shim for the user's old Lua wrapper.
--
-- The function names, arguments and return shapes of the C wrapper the user's pipeline called
-- through the FFI (`vk_compute.lua` over `libvkcompute.so`), implemented on `require "diversity"`.
-- A driver loop written against the old wrapper runs unchanged. Every error is a Lua error naming
-- the call and the cause. Index conventions are the old ones: item indices are 0-based; Lua arrays
-- of results are 1-based.
local ffi = require "ffi"
local diversity = require "diversity"

local M = { _VERSION = "vk_compute (" .. diversity._VERSION .. ")" }

local THIS = debug.getinfo(1, "S").source

-- Raise "vk_compute.<call>: <message>" pointing at the caller's line: the first stack frame
-- outside this file.
local function fail(call, message)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info or info.source ~= THIS then break end
    level = level + 1
  end
  error("vk_compute." .. call .. ": " .. tostring(message), level)
end

-- Run `f(...)`, re-raising any error with the call's name in front.
local function guarded(call, f, ...)
  local ok, a, b, c = pcall(f, ...)
  if not ok then fail(call, diversity.message(a)) end
  return a, b, c
end

local function check_int(call, name, v, min)
  if type(v) ~= "number" or v ~= math.floor(v) or v == math.huge or v == -math.huge then
    fail(call, name .. " must be an integer, got " .. tostring(v))
  end
  if min and v < min then
    fail(call, name .. " " .. v .. " is " .. (v < 0 and "negative" or "below " .. min))
  end
end

--- Open the device. `enable_validation` turns the Khronos validation layers on.
function M.init(enable_validation)
  -- A boolean or nothing: truthiness would read the string "false" (or 0) as on.
  if enable_validation ~= nil and type(enable_validation) ~= "boolean" then
    fail("init", ("enable_validation must be a boolean (true or false), got %s %s")
      :format(type(enable_validation), tostring(enable_validation)))
  end
  return guarded("init", diversity.open, { validation = enable_validation == true })
end

--- Close the device (and everything made from it once collected).
function M.shutdown(ctx)
  if ctx then ctx:close() end
end

-- A diversity table from the old inputs: a Lua array or a cdata of N*dim floats, or fp16 bits.
local function table_of(call, data, N, dim)
  check_int(call, "N", N, 1)
  check_int(call, "dim", dim, 1)
  if type(data) == "table" then
    if #data ~= N * dim then
      fail(call, ("embeddings array has %d values, expected N * dim = %d"):format(#data, N * dim))
    end
    return guarded(call, diversity.table, data, { dim = dim, n = N })
  end
  return guarded(call, diversity.table, data, { n = N, dim = dim })
end

-- Whether `path` may be written: nothing there, or a regular file. Otherwise false and "PATH is
-- a FIFO, not a regular file: refusing to write over it" (a device such as /dev/null, a FIFO, a
-- socket or a directory is never opened for writing nor renamed over).
local function check_output_kind(path)
  local kind = diversity.file_kind(path)
  if kind and kind ~= "file" then
    return false, ("%s is a %s, not a regular file: refusing to write over it"):format(path, kind)
  end
  return true
end

-- A temporary file's name beside `path` (`.<name>.tmp-shim-<unique>`), to be renamed onto it.
local function temp_path(path)
  local dir, name = path:match("^(.*/)([^/]*)$")
  local unique = tostring({}):match("0x(%x+)") or tostring(math.random(2 ^ 30))
  return (dir or "") .. "." .. (name or path) .. ".tmp-shim-" .. os.time() .. "-" .. unique
end

-- The engine the shim's jobs run: DIVERSITY_MODE (scan, gram or auto; unset or empty: auto),
-- read when a job starts. auto runs the gram engine where G fits the device, like the command line.
local MODES = { scan = true, gram = true, auto = true }
local function shim_mode(call)
  local m = os.getenv("DIVERSITY_MODE")
  if m == nil or m == "" then return "auto" end
  if not MODES[m] then
    fail(call, ("DIVERSITY_MODE=%q: expected scan, gram or auto"):format(m))
  end
  return m
end
M.mode = shim_mode

-- Every sequence from starts `from` .. N-1 of the device table `dt`, in jobs of `batch` starts
-- run to the end: a table keyed by 0-based start of 1-based arrays of 0-based indices.
-- `each(job, first, count)`, when given, sees each finished job (starts first .. first+count-1).
local function run_batches(call, dt, N, from, batch, each)
  local result = {}
  for first = from, N - 1, batch do
    local starts = {}
    for s = first, math.min(first + batch, N) - 1 do starts[#starts + 1] = s end
    local job = guarded(call, dt.job, dt, starts, { mode = shim_mode(call) })
    guarded(call, job.step, job, N)
    local seqs = guarded(call, job.sequences, job)
    for i, s in ipairs(starts) do result[s] = seqs[i] end
    if each then each(job, first, #starts) end
    job:close()
  end
  return result
end

-- Rows of a resumed output computed again to bind the file to the table (spread over the rows
-- written, the first and the last among them).
local RESUME_SAMPLE = 8

-- A resumed output (`path`: the header and `k` rows of N entries) checked before anything is
-- appended to it: every row as the reader checks it (row s starts with s and is a permutation of
-- 0..N-1), read a block at a time; then up to RESUME_SAMPLE rows computed again on `dt` with this
-- call's mode and compared byte for byte, so that rows written for another table, other options
-- or another DIVERSITY_MODE are refused rather than continued. Raises naming the file and the row.
local function check_resume(call, path, N, k, dt)
  local r, err = io.open(path, "rb")
  if not r then return nil, path .. ": " .. tostring(err) end
  local block = math.max(1, math.floor(2 ^ 24 / (N * 4)))
  for first = 0, k - 1, block do
    local count = math.min(block, k - first)
    r:seek("set", 4 + first * N * 4)
    local bytes = r:read(count * N * 4) or ""
    local list = {}
    for i = 1, count do list[i] = first + i - 1 end
    local bad = diversity.checkpoint_check_rows(bytes, list, N, N)
    if bad then
      r:close()
      return nil, ("%s: the rows already written (starts %d to %d) are not diversity sequences "
        .. "of N = %d: %s; nothing was appended (start again with start_from = 0)")
        :format(path, first, first + count - 1, N, bad)
    end
  end
  local sample, seen = {}, {}
  local m = math.min(RESUME_SAMPLE, k)
  for j = 0, m - 1 do
    local s = m == 1 and 0 or math.floor(j * (k - 1) / (m - 1) + 0.5)
    if not seen[s] then seen[s] = true; sample[#sample + 1] = s end
  end
  local ok, job = pcall(dt.job, dt, sample, { mode = shim_mode(call) })
  if not ok then r:close(); return nil, diversity.message(job) end
  local buf = ffi.new("uint32_t[?]", #sample * N)
  local ok_run, e = pcall(function() job:step(N); job:download(buf) end)
  job:close()
  if not ok_run then r:close(); return nil, diversity.message(e) end
  for i, s in ipairs(sample) do
    r:seek("set", 4 + s * N * 4)
    local row = r:read(N * 4)
    if row ~= ffi.string(buf + (i - 1) * N, N * 4) then
      r:close()
      return nil, ("%s: the row of start %d is not this table's sequence from start %d: the file "
        .. "was written for another table, other options or another DIVERSITY_MODE; nothing was "
        .. "appended (start again with start_from = 0)"):format(path, s, s)
    end
  end
  r:close()
  return true
end

--- One full diversity sequence from `start` (0-based) over a flat fp32 array of N*dim values.
-- Returns a 1-based Lua array of 0-based item indices.
function M.compute_diversity_sequence(ctx, flat, N, dim, start)
  local call = "compute_diversity_sequence"
  check_int(call, "start", start, 0)
  if start >= N then fail(call, ("start %d is out of range: N = %d"):format(start, N)) end
  local t = table_of(call, flat, N, dim)
  local dt = guarded(call, ctx.upload, ctx, t, "fp32")
  local job = guarded(call, dt.job, dt, { start }, { mode = shim_mode(call) })
  guarded(call, job.step, job, N)
  local seq = guarded(call, job.sequences, job)[1]
  job:close(); dt:close(); t:close()
  return seq
end

--- Every sequence of an fp32 table (`flat`: a Lua array or float cdata of N*dim values), start
-- by start from `start_from` (0-based, default 0), appended to `output_file` as they are done:
-- the file is uint32 N, then one row of N uint32 per start, so a run stopped after k rows resumes
-- with `start_from = k` (the file must then hold exactly the header and k rows, each row a
-- sequence of this N, and a sample of them must be what this table gives again: it is checked and
-- refused otherwise, before anything is appended). With start_from 0 the file is started anew: written beside the output and
-- renamed onto it once the first batch of rows is in it, so a failure before that (a closed
-- context, the upload, the first job) leaves an existing file as it was. An output that exists
-- and is not a regular file (a device, a FIFO, a directory) is refused before any device work.
-- Returns the sequences computed by this call, keyed by 0-based start (1-based arrays of 0-based
-- indices).
function M.compute_all_diversity_sequences(ctx, flat, N, dim, output_file, start_from)
  local call = "compute_all_diversity_sequences"
  start_from = start_from or 0
  check_int(call, "start_from", start_from, 0)
  local t = table_of(call, flat, N, dim)
  if start_from > N then
    t:close()
    fail(call, ("start_from %d is past N = %d"):format(start_from, N))
  end
  local tmp -- start_from 0: the new file beside the output, until it is renamed onto it
  if output_file ~= nil then
    if type(output_file) ~= "string" then
      t:close()
      fail(call, "output_file must be a path, got " .. type(output_file))
    end
    local ok, err = check_output_kind(output_file)
    if not ok then t:close(); fail(call, err) end
    if start_from == 0 then
      -- The location is checked now (the temporary file created and removed again); the file
      -- itself is opened when the first batch is done.
      tmp = temp_path(output_file)
      local probe = io.open(tmp, "wb")
      if not probe then t:close(); fail(call, "cannot write " .. output_file .. " (creating " .. tmp .. ")") end
      probe:close()
      os.remove(tmp)
    else
      local r = io.open(output_file, "rb")
      if not r then t:close(); fail(call, output_file .. ": missing (resuming at start " .. start_from .. ")") end
      local head = r:read(4)
      local size = r:seek("end")
      r:close()
      local want = 4 + start_from * N * 4
      local n = head and #head == 4 and ffi.cast("const uint32_t*", head)[0]
      if n ~= N or size ~= want then
        t:close()
        fail(call, ("%s holds %d bytes (N = %s); resuming at start %d of N = %d needs %d: the "
          .. "header and %d whole rows"):format(output_file, size, tostring(n), start_from, N,
          want, start_from))
      end
    end
  end
  local f
  -- Open the output for the first finished batch: the temporary file with its header, or the
  -- resumed file for appending; checked again first (the path may have changed since).
  local function open_output(job, dt)
    local ok, err = check_output_kind(output_file)
    if ok then
      f, err = io.open(tmp or output_file, tmp and "wb" or "ab")
      if f and tmp then
        ok, err = f:write(ffi.string(ffi.new("uint32_t[1]", N), 4))
        if not ok then f:close(); f = nil; os.remove(tmp) end
      end
    end
    if not f then
      job:close(); dt:close()
      fail(call, ("cannot write %s: %s"):format(output_file, tostring(err)))
    end
  end
  local dt = guarded(call, ctx.upload, ctx, t, "fp32")
  t:close()
  if output_file ~= nil and start_from > 0 then
    local ok, err = check_resume(call, output_file, N, start_from, dt)
    if not ok then dt:close(); fail(call, err) end
  end
  local result = run_batches(call, dt, N, start_from, 256, output_file and function(job, first, count)
    local buf = ffi.new("uint32_t[?]", count * N)
    guarded(call, job.download, job, buf)
    if not f then open_output(job, dt) end
    -- A full disk fails here, naming the file; the rows already flushed stay a valid prefix.
    local ok, err = f:write(ffi.string(buf, count * N * 4))
    if ok then ok, err = f:flush() end
    if ok and tmp then
      -- The first batch is in the new file: it replaces the output (checked again first).
      ok, err = check_output_kind(output_file)
      if ok then ok, err = os.rename(tmp, output_file) end
      if not ok then f:close(); os.remove(tmp) end
      tmp = nil
    end
    if not ok then
      if io.type(f) == "file" then f:close() end
      job:close(); dt:close()
      fail(call, ("%s: %s (the rows of starts before %d are complete)"):format(output_file,
        tostring(err), first))
    end
  end)
  if f then f:close() end
  dt:close()
  return result
end

--- Every sequence of an fp16 table (`emb_fp16` a uint16_t[?] cdata of N*dim halves), in batches
-- of `batch_size`. Writes `output_file` (uint32 N, then N*N uint32) when given, and returns a
-- table keyed by 0-based start of 1-based arrays of 0-based indices.
function M.compute_all_diversity_sequences_batched(ctx, emb_fp16, N, dim, output_file, batch_size)
  local call = "compute_all_diversity_sequences_batched"
  batch_size = batch_size or 3584
  check_int(call, "batch_size", batch_size, 1)
  local t = table_of(call, emb_fp16, N, dim)
  local writer = output_file and guarded(call, diversity.binary_cache_writer, output_file, N, N)
  local dt = guarded(call, ctx.upload, ctx, t, "fp16")
  local result = run_batches(call, dt, N, 0, batch_size, writer and function(job)
    guarded(call, writer.write_job, writer, job)
  end)
  if writer then guarded(call, writer.finish, writer) end
  dt:close(); t:close()
  return result
end

--- Convert `count` floats at `src` (float cdata) to IEEE halves at `dst` (uint16_t cdata),
-- round-to-nearest-even.
function M.fp32_to_fp16(src, dst, count)
  guarded("fp32_to_fp16", diversity.convert_f32_to_f16, src, dst, count)
end

--- The float value of half bits `bits`.
function M.fp16_to_fp32(bits)
  return guarded("fp16_to_fp32", diversity.f16_to_f32, tonumber(bits))
end

--- Write `sequences` (keyed by 0-based start 0 .. N-1, each a 1-based array of N 0-based
-- indices, as the functions here return them) to `output_file`: uint32 N, then N rows of N uint32
-- (row s = the sequence of start s), replaced atomically. The old wrapper's argument order; this
-- module's first order, `(output_file, sequences, N)`, is still accepted.
function M.write_sequences_to_file(a, b, c)
  local call = "write_sequences_to_file"
  local path, sequences, N
  if type(a) == "string" then
    path, sequences, N = a, b, c
    check_int(call, "N", N, 1)
  else
    sequences, path = a, b
    if type(sequences) ~= "table" then
      fail(call, "sequences must be a table keyed by 0-based start, got " .. type(sequences))
    end
    N = 0
    while sequences[N] ~= nil do N = N + 1 end
    if N == 0 then fail(call, "no sequence for start 0 (sequences are keyed by 0-based start)") end
  end
  if type(path) ~= "string" then fail(call, "output_file must be a path, got " .. type(path)) end
  if type(sequences) ~= "table" then fail(call, "sequences must be a table") end
  local w = guarded(call, diversity.binary_cache_writer, path, N, N)
  for s = 0, N - 1 do
    local seq = sequences[s]
    if not seq then w:close(); fail(call, "no sequence for start " .. s) end
    -- A refused row closes the writer at once: its temporary file goes with it.
    local ok, err = pcall(w.write, w, s, seq)
    if not ok then w:close(); fail(call, diversity.message(err)) end
  end
  guarded(call, w.finish, w)
end

--- Read a file written by `write_sequences_to_file`: returns the sequences keyed by 0-based start
-- and N.
function M.load_sequences_from_file(path)
  local call = "load_sequences_from_file"
  local c = guarded(call, diversity.open_binary_cache, path)
  local N, out = c:n(), {}
  for s = 0, N - 1 do out[s] = guarded(call, c.sequence, c, s) end
  c:close()
  return out, N
end

--- Start a batch: `emb_fp16` a uint16_t[?] cdata of N*dim halves; `starts` a uint32_t[?] cdata
-- or a Lua array of 0-based starts, of which the first `batch_size` are used.
function M.batch_init(ctx, emb_fp16, N, dim, batch_size, starts)
  local call = "batch_init"
  local mode = shim_mode(call)
  check_int(call, "batch_size", batch_size, 1)
  local list = {}
  if type(starts) == "table" then
    if #starts < batch_size then
      fail(call, ("starts has %d entries, batch_size is %d"):format(#starts, batch_size))
    end
    for i = 1, batch_size do list[i] = starts[i] end
  elseif type(starts) == "cdata" then
    local ok, size = pcall(ffi.sizeof, starts)
    if ok and size and size < batch_size * 4 then
      fail(call, ("starts holds %d uint32 but batch_size is %d"):format(size / 4, batch_size))
    end
    for i = 1, batch_size do list[i] = tonumber(starts[i - 1]) end
  else
    fail(call, "starts must be a uint32_t[?] cdata or a Lua array, got " .. type(starts))
  end
  local t = table_of(call, emb_fp16, N, dim)
  local dt = guarded(call, ctx.upload, ctx, t, "fp16")
  t:close()
  local job = guarded(call, dt.job, dt, list, { chunk = 0, mode = mode })
  return { job = job, dtable = dt, N = N, batch_size = batch_size, next_slot = 1 }
end

--- Advance the batch by steps (slots) start_slot .. start_slot + slot_count - 1; slots are steps
-- 1..N-1 and come in order; `tile_size` 0 = untiled. Returns the chunk's GPU time in ns.
function M.batch_compute_chunk(b, start_slot, slot_count, tile_size)
  local call = "batch_compute_chunk"
  if type(b) ~= "table" or not b.job then fail(call, "not a batch (or destroyed)") end
  check_int(call, "start_slot", start_slot, 1)
  check_int(call, "slot_count", slot_count, 0)
  check_int(call, "tile_size", tile_size or 0, 0)
  if start_slot ~= b.next_slot then
    fail(call, ("chunks come in order: expected start_slot %d, got %d"):format(b.next_slot, start_slot))
  end
  if start_slot + slot_count - 1 > b.N - 1 then
    fail(call, ("slots %d..%d run past N - 1 = %d"):format(start_slot, start_slot + slot_count - 1, b.N - 1))
  end
  local _, ns = guarded(call, b.job.step, b.job, slot_count, tile_size or 0)
  b.next_slot = start_slot + slot_count
  return ns
end

--- Fill `out`, a uint32_t[?] of at least batch_size*N, with the batch's sequences: row i is the
-- sequence of starts[i], 0-based item indices. The batch must have computed every slot.
function M.batch_download_sequences(b, out)
  local call = "batch_download_sequences"
  if type(b) ~= "table" or not b.job then fail(call, "not a batch (or destroyed)") end
  if not guarded(call, b.job.done, b.job) then
    local done, total = b.job:progress()
    fail(call, ("the batch has computed %d of %d slots"):format(done, total))
  end
  if type(out) ~= "cdata" then fail(call, "out must be a uint32_t[?] cdata") end
  if not ffi.sizeof(out) then fail(call, "out must be an array cdata (its size must be known)") end
  guarded(call, b.job.download, b.job, out)
end

--- The engine a batch runs: "gram" or "scan" on the device, "host gram" or "host scan" on the
-- native CPU engine (where no GPU is present).
function M.batch_engine(b)
  if type(b) ~= "table" or not b.job then fail("batch_engine", "not a batch (or destroyed)") end
  if b.job:engine() == "host" then return "host " .. b.job:mode() end
  return b.job:mode()
end

--- Free the batch.
function M.batch_destroy(b)
  if type(b) == "table" and b.job then
    b.job:close(); b.dtable:close()
    b.job, b.dtable = nil, nil
  end
end

-- The rankings cache's default place: beside the embeddings file, named after the model (every
-- character other than letters, digits, '.', '_' and '-' becomes '_').
local function rankings_path(embeddings_file, model_name)
  local dir = embeddings_file:match("^(.*)/[^/]*$") or "."
  return dir .. "/similarity_rankings_" .. model_name:gsub("[^%w%._%-]", "_") .. ".json"
end
M.rankings_path = rankings_path

-- The metadata of an existing rankings cache (the module's JSON reader), or nil when there is
-- no readable cache there.
local function cache_metadata(path)
  local ok, meta = pcall(diversity.cache_metadata, path)
  return ok and meta or nil
end

--- All-pairs cosine similarity rankings of the items of `embeddings_file` (an embeddings.json,
-- or any file `diversity.load` reads), computed on the GPU, written as the rankings cache
-- `{metadata:{total_poems, algorithm:"cosine-knn-v1", format:"pre_sorted_rankings", top_k, model,
-- source, source_checksum, metric, precision, dim, device}, rankings:{"<id>":[id, …]}}` (keys and
-- values are the file's ids when it has them, else 0-based indices; each list holds the other
-- items, most similar first, ties by the lowest index; `top_k` entries, or all N − 1 when top_k
-- is nil or 0).
--
-- The cache goes to `output_file` when given (a sixth argument the old wrapper did not have),
-- else beside the embeddings file as `similarity_rankings_<model>.json` (`M.rankings_path`); an
-- output that is the embeddings file itself (`diversity.same_file`), or that exists and is not a
-- regular file (a device, a FIFO, a directory), is refused. An
-- existing cache is reused (nothing computed) unless `force`, when its metadata records the same
-- source checksum (`diversity.file_checksum` of the embeddings file: its bytes, not its mtime),
-- the same model and the same top_k, and its bytes match the checksum it carries of itself
-- (`diversity.verify_cache_checksum`); otherwise it is recomputed and replaced (temp file +
-- rename, so a failure leaves the old one or none). `num_threads` is the JSON writer's thread
-- count (nil or 0: the machine's). Returns the cache's path, N and whether it was reused.
function M.generate_similarity_matrix_gpu_parallel(embeddings_file, model_name, force, num_threads,
                                                   top_k, output_file)
  local call = "generate_similarity_matrix_gpu_parallel"
  if type(embeddings_file) ~= "string" or embeddings_file == "" then
    fail(call, "embeddings_file must be a path, got " .. tostring(embeddings_file))
  end
  if type(model_name) ~= "string" or model_name == "" then
    fail(call, "model_name must be a non-empty string, got " .. tostring(model_name))
  end
  if num_threads ~= nil then check_int(call, "num_threads", num_threads, 0) end
  if top_k ~= nil then check_int(call, "top_k", top_k, 0) end
  if top_k == 0 then top_k = nil end
  if output_file ~= nil and type(output_file) ~= "string" then
    fail(call, "output_file must be a path or nil, got " .. type(output_file))
  end
  local out = output_file or rankings_path(embeddings_file, model_name)
  if diversity.same_file(out, embeddings_file) then
    fail(call, ("output_file %s is also an input (embeddings_file): refusing to overwrite it")
      :format(out))
  end
  local out_ok, out_err = check_output_kind(out)
  if not out_ok then fail(call, "output_file " .. out_err) end
  local checksum = guarded(call, diversity.file_checksum, embeddings_file)
  if not force then
    local meta = cache_metadata(out)
    if meta
      and meta.format == "pre_sorted_rankings"
      and meta.source_checksum == checksum
      and meta.model == model_name
      and meta.top_k == top_k -- nil: all N - 1 (null in the file)
      and type(meta.total_poems) == "number"
      -- The content too, not the metadata alone: the file's bytes must match the checksum it
      -- was written with (edited rows or total_poems, a truncated file: recomputed).
      and pcall(diversity.verify_cache_checksum, out)
    then
      return out, meta.total_poems, true
    end
  end
  local t = guarded(call, diversity.load, embeddings_file)
  local ok, ctx = pcall(diversity.open, {})
  if not ok then t:close(); fail(call, diversity.message(ctx)) end
  local n = t:n()
  local ok2, e = pcall(function()
    local dt = ctx:upload(t, "fp32")
    local src = embeddings_file:match("[^/]*$")
    dt:write_rankings_cache(t, out, {
      top_k = top_k, metric = "cosine", model = model_name, threads = num_threads,
      metadata = { source = src, source_checksum = checksum },
    })
    dt:close()
  end)
  t:close(); ctx:close()
  if not ok2 then fail(call, diversity.message(e)) end
  return out, n, false
end

return M
