--- The driver: the whole diversity-cache job from files, the way the user's pipeline
-- runs it — load, centre, cache the fp16 conversion, batch, probe, adaptive chunks under the
-- watchdog target, tile size from the device's L2, progress, streaming cache writers, checkpoints
-- and resume. `M.run` reads as its four steps: plan (the options and outputs checked, nothing
-- opened), open (devices, table, engine, batch size, writers: one list of things to close),
-- compute (`M.compute`, whose scheduler is lua/diversity/driver/schedule.lua) and finish.
-- Its pieces live beside it and are re-exported here, so `require "diversity.driver"` is the
-- whole surface: the option table shared with the command line (driver/options.lua), the
-- checkpoint helpers (driver/checkpoint.lua), the progress bar (driver/progress.lua). The user's
-- policy (the chunk sizing, the tile formula) stays in this file, and the scheduler calls it
-- through this table, so a script that replaces `driver.chunk_size` changes the run.
-- May touch: the run's input, outputs and checkpoint files, the devices it opens; nothing else.
local diversity = require "diversity"
local options = require "diversity.driver.options"
local checkpoint = require "diversity.driver.checkpoint"
local progress = require "diversity.driver.progress"
local schedule = require "diversity.driver.schedule"

local M = {}

--- The defaults `M.run` fills in (the option table's, diversity.driver.options).
M.defaults = options.defaults
--- The accepted names of --mode, --placement and --shape.
M.MODES, M.PLACEMENTS, M.SHAPES = options.MODES, options.PLACEMENTS, options.SHAPES
-- The option checks (docs in driver/options.lua).
for _, k in ipairs({ "check_switches", "check_directory", "source_date_epoch", "parse_shard" }) do
  M[k] = options[k]
end
-- The checkpoint helpers (docs in driver/checkpoint.lua).
for _, k in ipairs({ "batch_binding", "batch_checksum", "check_rows", "append_part",
  "checkpoint_files", "remove_checkpoint", "check_run_file", "run_text", "write_run_file",
  "checkpoint_time", "write_batch", "checkpoint_is", "checkpoint_gone", "read_batch",
  "read_part_rows" }) do
  M[k] = checkpoint[k]
end
--- The progress bar (`M.progress(total_steps, out, quiet)`) and the per-phase wall times.
M.progress, M.phases = progress.progress, progress.phases

--- Wall-clock seconds (monotonic), for the per-phase times.
M.clock = diversity.clock

--- Bytes of rows a writer task takes at a time (the host's work runs in tasks between the
-- devices' chunks; smaller tasks keep a device waiting less when it finishes mid-task).
M.SLICE_BYTES = 2 ^ 25

--- Host batch sizing is Rust's (`diversity.host_batch`, `diversity.default_host_memory`):
-- a batch holds about 24 bytes an entry at its peak; the default budget is the smaller of 2 GiB
-- and a quarter of the host's memory.
function M.default_host_memory()
  return diversity.default_host_memory()
end

--- The most sequences of `steps` steps a batch may hold within `bytes` of host memory (≥ 1).
function M.host_batch(bytes, steps)
  return diversity.host_batch(bytes, steps)
end

--- The user's tile formula: a tile of candidates fills 85% of L2.
-- `tile_size = floor(L2_BYTES * 0.85 / (dim * bytes_per_value))`; fp32 tables hold 4 bytes a
-- value (1,500 rows of 768 dims fit a 5.5 MB L2), fp16 tables 2 (twice the rows in the same L2).
-- L2_BYTES comes from the device (a table of known GPUs; DIVERSITY_L2_BYTES overrides it).
function M.tile_size(l2_bytes, dim, precision)
  local bytes_per_value = (precision == "fp16") and 2 or 4
  return math.max(1, math.floor(l2_bytes * M.defaults.l2_headroom / (dim * bytes_per_value)))
end

--- Steps per chunk from a measured time per step: as many as fit `target_s * safety`.
function M.chunk_size(per_step_s, target_s, safety)
  if per_step_s <= 0 then return 1 end
  return math.max(1, math.floor(target_s * safety / per_step_s))
end

-- Whether `path` is a regular file (a FIFO or device there is not read: opening a FIFO blocks).
local function file_exists(path)
  return diversity.file_kind(path) == "file"
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function basename(path)
  return path:match("([^/]*)$")
end

--- Where `M.load` caches the fp16 conversion of `path` in `space`: beside the input, or in
-- `dir` (the command line's `--cache-dir`) when given.
function M.fp16_cache_path(path, space, dir)
  return (dir or dirname(path)) .. "/" .. basename(path):gsub("%.[^.]*$", "") .. "." .. space .. ".fp16.bin"
end

--- The files a run reads: {label, path} for the embeddings, and for an fp16 `.bin` its sidecar,
-- else the fp16 cache beside it and the cache's sidecars (whether or not they exist yet: the run
-- may write them before it reads them back).
function M.input_files(opts)
  local path = opts.embeddings
  local list = { { "--embeddings", path } }
  if path:match("%.bin$") then
    list[#list + 1] = { "--embeddings' sidecar", path .. ".json" }
  elseif opts.fp16_cache ~= false and opts.precision == "fp16" and not path:match("%.f32$") then
    local c = M.fp16_cache_path(path, opts.center and "mean-centered-v1" or "raw", opts.cache_dir)
    for _, f in ipairs({ c, c .. ".json", c .. ".ids.json" }) do
      list[#list + 1] = { "the fp16 cache of --embeddings", f }
    end
  end
  return list
end

--- An output may never be an input: every {label, path} of `outputs` against every one of
-- `inputs` (and each output against the others), by `diversity.same_file` (the same file under
-- any name). Raises "diversity: <prefix>--out X is also an input (--embeddings): refusing to
-- overwrite it". An output that exists must be a regular file (a directory where the entry is
-- {label, path, "directory"}): a device such as /dev/null, a FIFO, a socket or a directory is
-- refused, "diversity: --out X is a FIFO, not a regular file: refusing to write over it"
-- (`diversity.file_kind`, symlinks followed). Call it before any file or GPU work.
function M.check_outputs(outputs, inputs, prefix)
  prefix = prefix or ""
  for k, o in ipairs(outputs) do
    for _, i in ipairs(inputs) do
      if diversity.same_file(o[2], i[2]) then
        error(("diversity: %s%s %s is also an input (%s): refusing to overwrite it")
          :format(prefix, o[1], o[2], i[1]), 0)
      end
    end
    for j = 1, k - 1 do
      if diversity.same_file(o[2], outputs[j][2]) then
        error(("diversity: %s%s %s is also %s: refusing to write one file twice")
          :format(prefix, o[1], o[2], outputs[j][1]), 0)
      end
    end
    local want = o[3] == "directory" and "directory" or "file"
    local kind = diversity.file_kind(o[2])
    if kind and kind ~= want then
      error(("diversity: %s%s %s is a %s, not a %s: refusing to write over it")
        :format(prefix, o[1], o[2], kind, want == "file" and "regular file" or want), 0)
    end
  end
end

--- Load the embeddings: `.json` (ids kept), `.npy`, `.f32` (needs dim), or an fp16 `.bin` with
-- its sidecar. With fp16 precision and a JSON/npy input, the centred fp16 conversion is cached
-- beside the input (`<name>.<space>.fp16.bin` + sidecar) and reused while the source is unchanged.
function M.load(opts)
  M.check_switches(opts, { "center" })
  if opts.cache_dir ~= nil then M.check_directory("--cache-dir", opts.cache_dir) end
  local path = opts.embeddings
  local space = opts.center and "mean-centered-v1" or "raw"
  if path:match("%.bin$") then
    -- The space travels with the file (its sidecar records it): a mean-centred .bin is
    -- labelled so with or without --center, and never centred twice.
    local t, stored_space = diversity.load_fp16_bin(path)
    stored_space = stored_space or "raw"
    if opts.center and stored_space ~= "mean-centered-v1" then
      t:close()
      error(("diversity: %s holds %s rows; centring must come before the fp16 conversion: "
        .. "pass the JSON or .npy source with --center"):format(path, stored_space), 0)
    end
    return t, stored_space, false
  end
  local cache = opts.fp16_cache ~= false and opts.precision == "fp16" and not path:match("%.f32$")
  local cache_path = M.fp16_cache_path(path, space, opts.cache_dir)
  local checksum
  if cache then
    checksum = diversity.file_checksum(path)
    if file_exists(cache_path) and file_exists(cache_path .. ".json") then
      local ok, t = pcall(diversity.load_fp16_bin, cache_path, space, checksum)
      if ok then
        -- ids are not in the .bin: the ids sidecar says whether the source had them, for this
        -- source and size. Missing, stale or edited, the cache is not used (its keys would
        -- silently become indices or other rows' ids): the source is read again below.
        local ok_ids, ids = pcall(diversity.load_ids, cache_path .. ".ids.json", t:n(), checksum)
        if ok_ids then
          if ids then t = t:with_ids(ids) end
          return t, space, true
        end
        t:close()
      end
    end
  end
  local t = diversity.load(path, { dim = opts.dim })
  if opts.center then
    local c = t:centered()
    t:close()
    t = c
  end
  if cache then
    -- A cache that cannot be written (read-only input directory) is not an error.
    -- The ids sidecar first: a cache whose sidecar could not be written is never used.
    if pcall(diversity.save_ids, cache_path .. ".ids.json", t, checksum) then
      pcall(t.save_fp16_bin, t, cache_path, space, checksum)
    end
  end
  return t, space, false
end

local function parse_starts(spec, n)
  if spec == nil or spec == "all" then
    local s = {}
    for i = 0, n - 1 do s[#s + 1] = i end
    return s
  end
  if type(spec) == "table" then return spec end
  local s = {}
  for v in tostring(spec):gmatch("[^,]+") do
    local x = tonumber(v)
    if not x or x ~= math.floor(x) then error("diversity: --starts: '" .. v .. "' is not an index", 0) end
    s[#s + 1] = x
  end
  return s
end

--- The starts of shard `shard` (from `M.parse_shard`) of the list `starts`, in order:
-- contiguous, the i-th of n near-equal runs of consecutive positions (the first #starts mod n
-- runs one longer); strided, the positions p (0-based) with p mod n = i - 1.
function M.shard_starts(starts, shard)
  local total, n, i = #starts, shard.count, shard.index
  local out = {}
  if shard.layout == "strided" then
    for p = i, total, n do out[#out + 1] = starts[p] end
  else
    local base, rem = math.floor(total / n), total % n
    local first = (i - 1) * base + math.min(i - 1, rem)
    local len = base + ((i <= rem) and 1 or 0)
    for p = first + 1, first + len do out[#out + 1] = starts[p] end
  end
  return out
end

--- A checksum of a starts list (FNV-1a, 32 bits, over "s1,s2,…"), "fnv1a32:xxxxxxxx": shards
-- record the whole run's, so that merge refuses parts cut from different lists (Rust's
-- `diversity.starts_fingerprint`).
function M.starts_fingerprint(starts)
  return diversity.starts_fingerprint(starts)
end

--- Merge the partial caches of a --shard run: `opts.out` and `opts.inputs` (a list of paths,
-- any order). Returns {shards, layout, sequences} (`diversity.merge_caches`).
function M.merge(opts)
  M.check_switches(opts, { "quiet" })
  if not opts.out then error("diversity: merge: --out FILE is required", 0) end
  if not opts.inputs or #opts.inputs == 0 then
    error("diversity: merge: no shard files given", 0)
  end
  local inputs = {}
  for _, f in ipairs(opts.inputs) do inputs[#inputs + 1] = { "shard file", f } end
  M.check_outputs({ { "--out", opts.out } }, inputs, "merge: ")
  local ok, r = pcall(diversity.merge_caches, opts.out, opts.inputs)
  if not ok then error("diversity: merge: " .. diversity.message(r):gsub("^diversity%.merge_caches: ", ""), 0) end
  return r
end

-- Things a run holds (devices, the table, the writers), closed in the reverse of the order they
-- came by `close()`, once, whichever way the run ends.
local function holder()
  local list = {}
  local h = {}
  function h.add(x) list[#list + 1] = x; return x end
  function h.close()
    for i = #list, 1, -1 do list[i]:close() end
    list = {}
  end
  return h
end

-- Plan: the options filled in and checked, the places and settings they name, and that no output
-- is an input, all before any device, file or GPU work.
local function plan(opts)
  local batch_given = opts.batch ~= nil
  for k, v in pairs(M.defaults) do
    if opts[k] == nil then opts[k] = v end
  end
  -- A shard (one part of the starts, for a cluster's array job) comes back parsed.
  local shard = options.check(opts)
  local epoch = M.source_date_epoch()
  local outputs = { { "--out", opts.out } }
  if opts.binary then outputs[#outputs + 1] = { "--binary", opts.binary } end
  outputs[#outputs + 1] = { "the checkpoint directory of --out", opts.out .. ".partial", "directory" }
  M.check_outputs(outputs, M.input_files(opts))
  return { opts = opts, batch_given = batch_given, shard = shard, epoch = epoch,
    ckdir = opts.out .. ".partial", phases = M.phases() }
end

-- Open the devices and load the table (into `held`); the starts checked and cut to the shard.
local function open_inputs(p, held)
  local opts, phases = p.opts, p.phases
  local t0 = M.clock()
  p.devs = M.open_devices(opts.devices, opts.device, opts.validation)
  for _, c in ipairs(p.devs) do held.add(c) end
  phases:add("open", M.clock() - t0)
  t0 = M.clock()
  local t, space, from_cache = M.load(opts)
  p.t, p.space, p.from_cache = held.add(t), space, from_cache
  phases:add("load", M.clock() - t0)
  local n = t:n()
  local starts = parse_starts(opts.starts, n)
  -- The one start check (the engines run it too), before any file or GPU work.
  local ok_s, e_s = pcall(diversity.check_starts, starts, n)
  if not ok_s then
    error("diversity: " .. diversity.message(e_s):gsub("^diversity%.check_starts: ", ""), 0)
  end
  if opts.binary and #starts ~= n then
    error("diversity: --binary " .. opts.binary .. " holds a row for every item; it needs --starts all", 0)
  end
  -- A shard computes its slice of the run's starts (the batch size, below, is the run's).
  p.all_starts, p.starts = starts, p.shard and M.shard_starts(starts, p.shard) or starts
  p.steps = math.min(opts.top_k or (n - 1), n - 1)
  p.tile = opts.tile or M.tile_size(p.devs[1]:caps().l2_bytes, t:dim(), opts.precision)
end

-- The engine and the batch size, each reported before any work.
local function choose_engine(p)
  local opts, devs, n, dim = p.opts, p.devs, p.t:n(), p.t:dim()
  -- The engine (auto = gram when G fits the device's memory budget, else scan),
  -- chosen by the Rust side (mode, reason in words, reason code, why G does not fit), reported
  -- before any work and written into the metadata.
  -- Several devices: gram only where G fits every one of them (the agreement is Rust's,
  -- `diversity.mode_for`; the reason names the device that decided).
  local mode, mode_reason, mode_code, unfit = diversity.mode_for(devs, n, dim, opts.precision,
    opts.mode)
  if not opts.quiet then
    io.stderr:write(("mode %s (%s)\n"):format(mode, mode_reason))
    io.stderr:flush()
  end
  if mode_code == "requested_unfit" then
    error("diversity: --mode gram: " .. unfit .. " (--mode auto falls back to scan)", 0)
  end
  p.mode, p.mode_reason = mode, mode_reason
  -- Batches fit each device's buffer, dispatch and memory limits (gram: next to G).
  local fit = diversity.max_batch(devs, n, dim, opts.precision, p.steps, mode)
  -- Batches fit every device and the host's budget (the results of a batch stay in host memory
  -- until written, so a whole cache of a large N goes in several batches rather than one of N²
  -- entries); gram's default is every sequence that fits, but a large whole cache in at least
  -- four batches, so that the host writes one batch while the device computes the next; several
  -- devices share about four batches each, so a faster device takes more of them. A shard sizes
  -- them to its own starts but records the whole run's batch size, the one-shot run's metadata.
  -- The arithmetic is Rust's (`diversity.batch_sizes`).
  local host_memory = opts.host_memory or M.default_host_memory()
  local host_fit = M.host_batch(host_memory, p.steps)
  local batch, device_batch, run_batch = diversity.batch_sizes {
    gram = mode == "gram", requested = p.batch_given and opts.batch or nil, default = opts.batch,
    fit = fit, host_fit = host_fit, devices = #devs, starts = #p.starts, all_starts = #p.all_starts,
  }
  if not opts.quiet then
    io.stderr:write(("batch %d sequences (the device fits %d; %d MiB of host memory fits %d)\n")
      :format(batch, fit, math.floor(host_memory / 2 ^ 20), host_fit))
    io.stderr:flush()
  end
  p.batch, p.run_batch = device_batch, run_batch
end

-- The metadata and the writers (into `held`): the output locations are checked (temporary files
-- created) before any GPU work.
local function open_outputs(p, held)
  local opts, t, shard = p.opts, p.t, p.shard
  -- generated_at: SOURCE_DATE_EPOCH when set (reproducible output), else now; a resumed run keeps
  -- the time of the run it continues, so its output is byte-identical to an uninterrupted one.
  p.generated_at = os.date("!%Y-%m-%dT%H:%M:%SZ", p.epoch)
  if opts.resume then p.generated_at = M.checkpoint_time(p.ckdir) or p.generated_at end
  local meta = {
    model = opts.model or "unknown", num_poems = t:n(), algorithm = "diversity-sequence-v1",
    generated_at = p.generated_at, batch_size = p.run_batch, top_k = p.steps,
    space = p.space, precision = opts.precision, mode = p.mode, device = M.device_names(p.devs),
  }
  -- The gram arithmetic (key sums, G's entries, the judge): other values give other bits.
  -- (nil for the scan on a device; the host engine names its own for either mode.)
  meta.summation = p.devs[1]:summation(t:n(), t:dim(), p.mode, M.gram_arithmetic(opts))
  if shard then
    meta.shard, meta.shard_layout = shard.spec, shard.layout
    meta.shard_starts_total = #p.all_starts
    meta.shard_starts_fingerprint = M.starts_fingerprint(p.all_starts)
    -- The table's content as stored (after centring, with its ids): merge takes only shards
    -- of one table.
    meta.shard_table_checksum = diversity.table_checksum(t, opts.precision)
  end
  -- The table as stored (values and ids), which `diversity update` checks a grown table against.
  meta.table_checksum = diversity.table_checksum(t, opts.precision)
  p.summation = meta.summation
  local ok_w, writer = pcall(diversity.json_cache_writer, opts.out, meta, t:ids())
  if not ok_w then error(diversity.message(writer), 0) end
  p.writer = held.add(writer)
  if opts.binary then
    local ok_b, b = pcall(diversity.binary_cache_writer, opts.binary, t:n(), p.steps + 1)
    if not ok_b then error(diversity.message(b), 0) end
    p.bin = held.add(b)
  end
end

-- Compute every batch (`M.compute`); the summary it returns.
local function compute(p)
  local run = { steps = p.steps, tile = p.tile, mode = p.mode, batch = p.batch,
    summation = p.summation, phases = p.phases }
  local ok, result = pcall(M.compute, p.devs, p.t, p.starts, run, p.opts, p.writer, p.bin, p.ckdir,
    p.generated_at)
  if not ok then error(diversity.message(result), 0) end
  return result
end

-- Finish: the outputs renamed into place, what the run held closed, the checkpoint removed; a
-- failure says whether the checkpoint still lets --resume write the outputs.
local function finish(p, result, held)
  local t0 = M.clock()
  local ok_f, e_f = pcall(M.finish_outputs, p.writer, p.bin)
  p.phases:add("finish", M.clock() - t0)
  held.close()
  if not ok_f then
    if not M.checkpoint_is(p.ckdir, result.run_text) then
      error(("%s\n%s"):format(diversity.message(e_f), M.checkpoint_gone(p.ckdir)), 0)
    end
    error(("%s\nevery batch is checkpointed in %s: run again with --resume to write the "
      .. "output without computing them again"):format(diversity.message(e_f), p.ckdir), 0)
  end
  result.run_text = nil -- the driver's own, not part of the summary
  -- The outputs are in place: the checkpoint is no longer needed.
  M.remove_checkpoint(p.ckdir)
  result.from_cache = p.from_cache
  if p.opts.verbose then io.stderr:write("host phases: ", p.phases:line(), "\n") end
  result.tile = p.tile
  result.mode_reason = p.mode_reason
  if p.shard then result.shard, result.shard_layout = p.shard.spec, p.shard.layout end
  return result
end

--- Run the whole job. `opts`: embeddings, out (diversity_cache.json), binary (optional uint32
-- cache), center, precision, mode ("scan", "gram" or "auto"), placement (gram: "auto",
-- "registers" or "memory"), plain_sums (gram: true for plain float32 sums, false for compensated; nil: the
-- engine's choice), judge (gram: re-score the keys from the running sum when the pick is uncertain; other
-- bits at near-ties; nil: the engine's choice), top_k, batch, starts ("all", "a,b,c" or a Lua array), device,
-- validation, resume, target_s, safety, quiet, model, dim, host_memory (bytes a batch's results
-- may take on the host; default M.default_host_memory()), shard ("i/n" or "i/n:strided": compute
-- only that slice of the starts and write a partial cache for `M.merge`), shape and tile (scan:
-- "untiled", "tiled" or "per-tile"; candidates per tile, default from the device's L2), chunk
-- (steps per submission instead of sizing them to target_s), cache_dir (where the fp16
-- conversion is cached instead of beside the input). Returns a summary table
-- (with `mode`, the engine used, and `mode_reason`, why). `how` (optional, for `diversity update`):
-- `how.check(p)` runs after the engine is chosen and before any output is opened, `how.compute(p)`
-- replaces the batches (p: opts, t, devs, mode, steps, starts, writer, bin, phases).
function M.run(opts, how)
  local p = plan(opts)
  local held = holder()
  local ok, r = pcall(function()
    open_inputs(p, held)
    choose_engine(p)
    if how and how.check then how.check(p) end
    open_outputs(p, held)
    return finish(p, (how and how.compute or compute)(p), held)
  end)
  held.close()
  if not ok then error(r, 0) end
  return r
end

--- Finish the JSON cache `writer` and the binary cache `bin` (or nil): each renamed into place.
-- When one fails, neither's temporary file is left behind, and the error is raised.
function M.finish_outputs(writer, bin)
  local ok, e = pcall(writer.finish, writer)
  if ok and bin then ok, e = pcall(bin.finish, bin) end
  if not ok then
    pcall(writer.close, writer)
    if bin then pcall(bin.close, bin) end
    error(e, 0)
  end
end

--- The devices of a run: `spec` is nil (the one device `device` names, or the best one), `all`
-- (every Vulkan device), or a comma list of indices into `diversity.devices()` or name
-- substrings — `0,0` opens one device twice (two logical devices: how the multi-device path is
-- tested on one GPU); parsed by `diversity.open_devices`. Returns the opened contexts.
function M.open_devices(spec, device, validation)
  if spec == nil then return { diversity.open { device = device, validation = validation } } end
  local ok, devs = pcall(diversity.open_devices, spec, { validation = validation })
  if not ok then
    error(("diversity: --devices %s: %s"):format(spec,
      diversity.message(devs):gsub("^diversity%.open_devices: ", "")), 0)
  end
  return devs
end

--- The gram job options that set the arithmetic: placement, whether the table is centred
-- (`center`), and compensated / judge only where `opts` names them (plain_sums, judge); unset,
-- the engine chooses (the judge at every N, with compensated sums, or plain sums on a GPU where
-- the compensated state would not fit its registers or the table is centred).
function M.gram_arithmetic(opts)
  local compensated
  if opts.plain_sums ~= nil then compensated = not opts.plain_sums end
  return { placement = opts.placement, centered = opts.center == true, compensated = compensated,
           judge = opts.judge }
end

--- The devices' names for the metadata: each distinct name once, joined by " + " (one device
-- opened twice reads as that device, so its output matches a one-device run byte for byte).
function M.device_names(devs)
  local names, seen = {}, {}
  for _, ctx in ipairs(devs) do
    local n = ctx:caps().name
    if not seen[n] then seen[n] = true; names[#names + 1] = n end
  end
  return table.concat(names, " + ")
end

-- Upload the table to every device; on a failure, what was uploaded is closed.
local function upload(devs, t, opts, phases)
  local dts = {}
  local t_up = M.clock()
  for d, ctx in ipairs(devs) do
    local ok, dt = pcall(ctx.upload, ctx, t, opts.precision)
    if not ok then
      for _, x in ipairs(dts) do x:close() end
      error(("diversity: device %d of %d (%s): uploading the table failed: %s")
        :format(d, #devs, ctx:caps().name, diversity.message(dt)), 0)
    end
    dts[d] = dt
  end
  if phases then phases:add("upload", M.clock() - t_up) end
  return dts
end

-- The checkpoint, before any job runs: a resume takes only what this run wrote, checked
-- (finished batches, and the steps so far of unfinished ones); a fresh run clears it. Returns
-- saved (per batch: true when its file is there and checked) and parts (its steps so far).
local function open_checkpoint(c, fp, n, steps, resume)
  local saved, parts = {}, {}
  if resume then
    M.check_run_file(c.ckdir, fp, c.run_text)
    for b = 1, #c.lists do
      saved[b] = M.read_batch(c.ckfile(b), c.bindings[b], c.lists[b], steps + 1, n)
      if not saved[b] then
        parts[b] = M.read_part_rows(c.partfile(b), c.bindings[b], c.lists[b], n)
      end
    end
  else
    M.remove_checkpoint(c.ckdir)
  end
  M.write_run_file(c.ckdir, c.run_text)
  return saved, parts
end

-- Every batch on the device tables `dts` (`M.compute` without the upload).
local function compute_batches(dts, devs, t, starts, run, opts, writer, bin, ckdir, generated_at)
  local steps, batch = run.steps, run.batch
  local nbatches = math.ceil(#starts / batch)
  local fp = checkpoint.fingerprint(t, starts, run, opts)
  local c = { drv = M, devs = devs, dts = dts, t = t, run = run, opts = opts, writer = writer,
    bin = bin, ckdir = ckdir, run_text = M.run_text(fp, generated_at), lists = {}, bindings = {},
    ckfile = function(b) return diversity.checkpoint_batch_file(ckdir, b) end,
    partfile = function(b) return diversity.checkpoint_part_file(ckdir, b) end }
  for b = 1, nbatches do
    local first = (b - 1) * batch + 1
    local list = {}
    for i = first, math.min(first + batch - 1, #starts) do list[#list + 1] = starts[i] end
    c.lists[b] = list
    c.bindings[b] = M.batch_binding(c.run_text, b, list)
  end
  c.saved, c.parts = open_checkpoint(c, fp, t:n(), steps, opts.resume)
  c.progress = M.progress(steps * nbatches, io.stderr, opts.quiet)
  local s = schedule.new(c)
  if not s:drive() then error(s:failure_message(ckdir, c.run_text), 0) end
  -- Every batch is computed; the checkpoint stays until the caller's outputs are in place.
  return { n = t:n(), dim = t:dim(), sequences = #starts, steps = steps, batches = nbatches,
    batch = batch, gpu_ns = s.total_gpu_ns, device_gpu_ns = s.device_ns, resumed_batches = s.resumed,
    run_text = c.run_text,
    device = M.device_names(devs), devices = #devs, mode = run.mode, phases = s.phases,
    engine = devs[1]:engine() }
end

--- Compute every batch (`run`: steps, tile, mode — "scan" or "gram", already resolved — and
-- batch) on every device of `devs` (a list of opened contexts; each holds the whole table: the
-- batches are shared out as devices become free, so each device takes work in proportion to its
-- speed), checkpointing each chunk, and stream the rows to the writers in batch order. Jobs step
-- on threads of their own (`job:start`, `diversity.wait_any`), so one Lua thread keeps every
-- device busy (the scheduler: lua/diversity/driver/schedule.lua). A sequence does not depend on
-- its batch or device (the same bits for any tile, chunk, batch, start order or device count), so
-- the output is the same bytes for any number of devices. The checkpoint in `ckdir` is left in
-- place: the caller removes it (`M.remove_checkpoint`) once its outputs are renamed into place.
function M.compute(devs, t, starts, run, opts, writer, bin, ckdir, generated_at)
  local dts = upload(devs, t, opts, run.phases)
  local ok, r = pcall(compute_batches, dts, devs, t, starts, run, opts, writer, bin, ckdir,
    generated_at)
  for _, dt in ipairs(dts) do dt:close() end
  if not ok then error(r, 0) end
  return r
end

return M
