--- `diversity update`: a diversity cache brought up to date after rows are appended to its
-- table (docs/cli.md). The old cache and the new table are checked first: the new table's first
-- rows must be the cached table (its recorded checksum: values as stored, and ids), the cache
-- raw (not centred: appended rows move the column mean, so every centred row changes), and the
-- options the cache records (precision, top_k, engine) must be the run's. Then only what the
-- appended rows change is computed (`dtable:grow`) and the output is what the main command
-- writes on the new table, byte for byte.
local diversity = require "diversity"
local driver = require "diversity.driver"

local M = {}

local function refuse(fmt, ...)
  error("diversity: update: " .. fmt:format(...), 0)
end

-- The old cache's metadata, checked before anything is loaded.
local function old_metadata(opts)
  local ok, meta = pcall(diversity.cache_metadata, opts.cache)
  if not ok then refuse("--cache %s: %s", opts.cache, diversity.message(meta)) end
  if meta.algorithm ~= "diversity-sequence-v1" then
    refuse("--cache %s is not a diversity cache (algorithm %s)", opts.cache, tostring(meta.algorithm))
  end
  if meta.shard then refuse("--cache %s is one shard; merge the shards first", opts.cache) end
  if meta.space ~= "raw" or opts.center then
    refuse("--cache %s holds %s rows: appended rows move the column mean, so every centred " ..
      "sequence changes; run the main command on the new table", opts.cache,
      opts.center and "centred (--center)" or tostring(meta.space))
  end
  if type(meta.table_checksum) ~= "string" then
    refuse("--cache %s records no table checksum (written by an older version), so the new " ..
      "table cannot be checked against it; run the main command on the new table", opts.cache)
  end
  return meta
end

-- The old rows as a binary string of uint32 indices (every start in order) and their length,
-- streamed from the JSON cache by the Rust side (the ids matched to the new table's first rows).
local function old_rows(opts, meta, t)
  local len = meta.top_k + 1
  local ok, rows = pcall(diversity.read_cache_rows, opts.cache, t, meta.num_poems, len)
  if not ok then refuse("--cache %s: %s", opts.cache, diversity.message(rows)) end
  return rows, len
end

--- Bring `opts.cache` up to date for `opts.embeddings` (the old table with rows appended),
-- writing `opts.out` (and `opts.binary`) as the main command would. opts: the main command's,
-- plus cache. Returns the main command's summary with `update` (what grow recomputed).
function M.run(opts)
  local meta = old_metadata(opts)
  -- An update writes its outputs only (not the fp16 conversion cache the main command keeps
  -- beside its input), so a refusal after loading leaves nothing behind.
  opts.fp16_cache = false
  opts.precision = opts.precision or meta.precision
  if opts.precision ~= meta.precision then
    refuse("--precision %s: the cache was computed at %s", opts.precision, meta.precision)
  end
  if opts.top_k == nil and meta.top_k < meta.num_poems - 1 then opts.top_k = meta.top_k end
  if opts.starts ~= nil or opts.shard ~= nil then
    refuse("--starts and --shard do not apply: the cache holds every start")
  end
  local grown
  local how = {}
  function how.check(p)
    local n_old, n = meta.num_poems, p.t:n()
    if n <= n_old then
      refuse("%s has %d rows, the cache's table %d: no rows appended", opts.embeddings, n, n_old)
    end
    local head = p.t:head(n_old)
    local sum = diversity.table_checksum(head, opts.precision)
    head:close()
    if sum ~= meta.table_checksum then
      refuse("the first %d rows of %s are not the cache's table (checksum %s, the cache records " ..
        "%s): only a table with rows appended can update it", n_old, opts.embeddings, sum,
        meta.table_checksum)
    end
    if (meta.top_k < meta.num_poems - 1) ~= (p.steps < n - 1) or
        (meta.top_k < meta.num_poems - 1 and meta.top_k ~= p.steps) then
      refuse("--top-k: the cache has %d steps of %d rows; this run would compute %d of %d",
        meta.top_k, n_old, p.steps, n)
    end
    if p.mode ~= meta.mode then
      refuse("the cache was computed by the %s engine; on %d rows this run resolves to %s " ..
        "(--mode %s pins it, or run the main command)", meta.mode, n, p.mode, meta.mode)
    end
  end
  function how.compute(p)
    local n_old, n = meta.num_poems, p.t:n()
    local rows, len = old_rows(opts, meta, p.t)
    local dt = p.devs[1]:upload(p.t, opts.precision)
    local jopts = driver.gram_arithmetic(opts)
    jopts.mode, jopts.steps = p.mode, p.steps
    -- Each finished job is kept in <out>.partial/ until the outputs are in place.
    jopts.checkpoint, jopts.resume = p.ckdir, opts.resume == true
    local t0 = driver.clock()
    local ok, out, report = pcall(dt.grow, dt, p.t, n_old, rows, len, jopts)
    local wall = driver.clock() - t0
    dt:close()
    if not ok then
      error(("%s\nthe finished jobs are checkpointed in %s: run again with --resume to compute "
        .. "only the rest"):format(diversity.message(out), p.ckdir), 0)
    end
    local new_len = p.steps + 1
    local starts = {}
    for i = 0, n - 1 do starts[i + 1] = i end
    p.writer:write_bytes(starts, out, new_len)
    if p.bin then p.bin:write_bytes(starts, out, new_len) end
    grown = report
    return { n = n, dim = p.t:dim(), sequences = n, steps = p.steps, batches = report.jobs,
      batch = p.run_batch, gpu_ns = math.floor(wall * 1e9), resumed_batches = 0,
      device = driver.device_names(p.devs), devices = #p.devs, mode = p.mode,
      engine = p.devs[1]:engine() }
  end
  local r = driver.run(opts, how)
  r.update = grown
  return r
end

return M
