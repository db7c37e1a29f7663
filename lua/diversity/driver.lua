--- The driver: the whole diversity-cache job from files, the way the user's pipeline
-- runs it — load, centre, cache the fp16 conversion, batch, probe, adaptive chunks under the
-- watchdog target, tile size from the device's L2, progress, streaming cache writers, checkpoints
-- and resume.
local diversity = require "diversity"

local M = {}

M.defaults = {
  precision = "fp16",
  mode = "auto",       -- "scan", "gram" or "auto" (gram when G fits the device's memory budget)
  batch = 3584,        -- sequences per batch in scan mode (the user's default); gram batches
                       -- default to as many as fit next to G
  target_s = 1.5,      -- watchdog target per submission, seconds
  safety = 0.6,        -- fraction of the target a chunk may use
  probe_steps = 10,
  l2_headroom = 0.85,  -- share of L2 a tile may fill
  host_memory = nil,   -- bytes of host memory a batch's results may take: nil = the smaller of
                       -- 2 GiB and a quarter of the machine's memory (M.default_host_memory)
}

--- Wall-clock seconds (monotonic), for the per-phase times.
M.clock = diversity.clock

--- Wall time per phase of a run, in the order the phases first came: `p:add(name, seconds)`,
-- `p:line()` ("open 0.31 s, load 0.12 s, ...").
local Phases = {}
Phases.__index = Phases
function M.phases()
  return setmetatable({ order = {}, s = {} }, Phases)
end
function Phases:add(name, seconds)
  if not self.s[name] then self.order[#self.order + 1] = name; self.s[name] = 0 end
  self.s[name] = self.s[name] + seconds
end
function Phases:line()
  local out = {}
  for _, k in ipairs(self.order) do out[#out + 1] = ("%s %.2f s"):format(k, self.s[k]) end
  return table.concat(out, ", ")
end

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

local function isatty(fd)
  local ok, ffi = pcall(require, "ffi")
  if not ok then return false end
  pcall(ffi.cdef, "int isatty(int fd);")
  local ok2, r = pcall(function() return ffi.C.isatty(fd) end)
  return ok2 and r == 1
end

local function fmt_time(s)
  if s ~= s or s == math.huge then return "?" end
  s = math.floor(s + 0.5)
  return ("%d:%02d:%02d"):format(math.floor(s / 3600), math.floor(s / 60) % 60, s % 60)
end

--- Progress: a bar with rate and ETA on a terminal, plain lines every few seconds when piped.
local Progress = {}
Progress.__index = Progress

function M.progress(total_steps, out, quiet)
  return setmetatable({ total = total_steps, done = 0, out = out or io.stderr, tty = isatty(2),
    last = -1e9, quiet = quiet, gpu_s = 0 }, Progress)
end

function Progress:update(steps, gpu_s, label)
  self.done = self.done + steps
  self.gpu_s = self.gpu_s + gpu_s
  if self.quiet then return end
  local now = os.time()
  local rate = self.done / math.max(self.gpu_s, 1e-9)
  local eta = (self.total - self.done) / rate
  if self.tty then
    local width = 30
    local filled = math.floor(width * self.done / math.max(self.total, 1))
    self.out:write(("\r[%s%s] %5.1f%% %s  %.1f steps/s  ETA %s  "):format(
      ("#"):rep(filled), ("."):rep(width - filled), 100 * self.done / math.max(self.total, 1),
      label or "", rate, fmt_time(eta)))
    self.out:flush()
  elseif now - self.last >= 2 or self.done == self.total then
    self.last = now
    self.out:write(("progress %d/%d steps (%.1f%%) %s %.1f steps/s ETA %s\n"):format(
      self.done, self.total, 100 * self.done / math.max(self.total, 1), label or "", rate, fmt_time(eta)))
    self.out:flush()
  end
end

--- Count steps taken from a checkpoint: they shorten the job but say nothing about the rate.
function Progress:skip(steps)
  self.total = self.total - steps
end

function Progress:finish()
  if self.tty and not self.quiet then self.out:write("\n") end
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

--- Refuse a directory option (`flag`, e.g. "--cache-dir") whose `path` is not a directory:
-- missing, or a regular file, FIFO, device or socket (symlinks followed), naming what it is.
-- Returns `path`. (Writing into a file named as a directory would fail later, silently for the
-- fp16 cache, which is best-effort.)
function M.check_directory(flag, path)
  if type(path) ~= "string" or path == "" then
    error(("diversity: %s must be a directory path, got %s %s"):format(flag, type(path), tostring(path)), 0)
  end
  local kind = diversity.file_kind(path)
  if kind == nil then
    error(("diversity: %s %s: no such directory"):format(flag, path), 0)
  elseif kind ~= "directory" then
    error(("diversity: %s %s is a %s, not a directory"):format(flag, path,
      kind == "file" and "regular file" or kind), 0)
  end
  return path
end

--- SOURCE_DATE_EPOCH (the time a reproducible run writes as `generated_at`) as whole seconds
-- since 1970, nil when unset or empty; anything else (a fraction, a sign, a date, text, past the
-- year 9999) is an error naming the variable, never the current time in its place.
function M.source_date_epoch()
  local v = os.getenv("SOURCE_DATE_EPOCH")
  if v == nil or v == "" then return nil end
  local digits = v:match("^%s*(%d+)%s*$")
  if not digits or #digits > 12 or tonumber(digits) > 253402300799 then
    error(("diversity: SOURCE_DATE_EPOCH=%q: expected whole seconds since 1970 (0 to 253402300799)")
      :format(v), 0)
  end
  return tonumber(digits)
end

--- Refuse an option of `opts` named in `keys` that is neither nil nor a boolean: Lua's
-- truthiness would take the string "false" (or 0) for on.
function M.check_switches(opts, keys)
  for _, k in ipairs(keys) do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("diversity: %s must be a boolean (true or false), got %s %s")
        :format(k, type(opts[k]), tostring(opts[k])), 0)
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

local function write_file(path, data)
  local f, e = io.open(path, "wb")
  if not f then error("diversity: checkpoint " .. path .. ": " .. tostring(e), 0) end
  local ok, we = f:write(data)
  local ok_c, ce = f:close()
  if not ok or not ok_c then
    error("diversity: checkpoint " .. path .. ": " .. tostring(we or ce), 0)
  end
end

--- Parse a `--shard` spec: "i/n" (1-based: shard i of n, contiguous), "i/n:strided" or
-- "i/n:contiguous"; a table {index =, count =, layout =} is checked the same way. Returns
-- {index, count, layout, spec = "i/n"}; a bad spec is an error naming it.
function M.parse_shard(spec)
  local function bad(why)
    local shown = type(spec) == "table" and (tostring(spec.index) .. "/" .. tostring(spec.count))
      or tostring(spec)
    error(("diversity: --shard %s: %s"):format(shown, why), 0)
  end
  local i, n, layout
  if type(spec) == "table" then
    i, n, layout = spec.index, spec.count, spec.layout or "contiguous"
  else
    local si, sn, rest = tostring(spec):match("^%s*(%d+)%s*/%s*(%d+)%s*(.-)%s*$")
    if not si then bad("expected i/n or i/n:strided (shard i of n, 1-based), e.g. 2/4") end
    i, n = tonumber(si), tonumber(sn)
    if rest == "" then layout = "contiguous"
    else
      layout = rest:match("^:%s*(%a+)$")
      if layout ~= "contiguous" and layout ~= "strided" then
        bad("unknown layout '" .. rest .. "': expected :strided or :contiguous (the default)")
      end
    end
  end
  -- Past 2^31 a count is no longer an exact integer everywhere it goes (it printed as
  -- "1/-9223372036854775808" once): refused, as no run has that many starts to share out.
  if type(n) ~= "number" or n ~= math.floor(n) or n < 1 or n > 2 ^ 31 then
    bad("the number of shards must be an integer from 1 to 2^31")
  end
  if type(i) ~= "number" or i ~= math.floor(i) or i < 1 or i > n then
    bad(("the shard must be between 1 and %d (1-based)"):format(n))
  end
  if layout ~= "contiguous" and layout ~= "strided" then
    bad("layout " .. tostring(layout) .. ": expected contiguous or strided")
  end
  return { index = i, count = n, layout = layout, spec = ("%d/%d"):format(i, n) }
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

M.MODES = { scan = true, gram = true, auto = true }
M.PLACEMENTS = { auto = true, registers = true, memory = true }
M.SHAPES = { untiled = true, tiled = true, ["per-tile"] = true }

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
-- (with `mode`, the engine used, and `mode_reason`, why).
function M.run(opts)
  local batch_given = opts.batch ~= nil
  for k, v in pairs(M.defaults) do
    if opts[k] == nil then opts[k] = v end
  end
  if not opts.embeddings then error("diversity: --embeddings FILE is required", 0) end
  if not opts.out then error("diversity: --out FILE is required", 0) end
  M.check_switches(opts, { "center", "validation", "resume", "quiet", "plain_sums", "judge" })
  -- Counts are finite integers (an infinite batch or top_k would pass the checks below).
  for _, k in ipairs({ "batch", "top_k" }) do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge) then
      error(("diversity: --%s must be a finite integer, got %s"):format(k:gsub("_", "-"),
        tostring(v)), 0)
    end
  end
  if not M.MODES[opts.mode] then
    error("diversity: --mode " .. tostring(opts.mode) .. ": expected scan, gram or auto", 0)
  end
  if opts.placement ~= nil and not M.PLACEMENTS[opts.placement] then
    error("diversity: --placement " .. tostring(opts.placement)
      .. ": expected auto, registers or memory", 0)
  end
  if opts.batch < 1 or opts.batch ~= math.floor(opts.batch) then
    error("diversity: --batch must be a positive integer, got " .. tostring(opts.batch), 0)
  end
  for _, k in ipairs({ "chunk", "tile" }) do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v < 1 or v ~= math.floor(v) or v == math.huge) then
      error("diversity: --" .. k .. " must be a positive integer, got " .. tostring(v), 0)
    end
  end
  if opts.shape ~= nil and not M.SHAPES[opts.shape] then
    error("diversity: --shape " .. tostring(opts.shape) .. ": expected untiled, tiled or per-tile", 0)
  end
  if opts.host_memory ~= nil and (type(opts.host_memory) ~= "number"
      or opts.host_memory ~= opts.host_memory or opts.host_memory < 1
      or opts.host_memory == math.huge) then
    error("diversity: --host-memory must be a positive number of bytes, got "
      .. tostring(opts.host_memory), 0)
  end
  -- The watchdog knobs: positive finite numbers (a NaN once passed here and failed only after
  -- the first probe had run on the device).
  for _, k in ipairs({ { "target_s", "--target-s" }, { "safety", "--safety" } }) do
    local v = opts[k[1]]
    if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
      error(("diversity: %s must be a positive number, got %s"):format(k[2], tostring(v)), 0)
    end
  end
  if opts.top_k and (opts.top_k < 0 or opts.top_k ~= math.floor(opts.top_k)) then
    error("diversity: --top-k must be a non-negative integer, got " .. tostring(opts.top_k), 0)
  end
  -- A shard (one part of the starts, for a cluster's array job): checked before any device or
  -- file work.
  local shard = opts.shard ~= nil and M.parse_shard(opts.shard) or nil
  if shard and opts.binary then
    error("diversity: --binary cannot be combined with --shard: the binary cache holds a row "
      .. "for every item and is not split into shards; leave --binary out of sharded runs", 0)
  end
  -- An empty job is an error, not an empty cache over an existing one.
  if opts.starts ~= nil and opts.starts ~= "all" then
    local none
    if type(opts.starts) == "table" then none = #opts.starts == 0
    else none = not tostring(opts.starts):find("[^,]") end
    if none then
      error(("diversity: --starts gave no starts (%q): name at least one, or leave --starts out "
        .. "for all"):format(type(opts.starts) == "table" and "{}" or tostring(opts.starts)), 0)
    end
  end
  -- Places and settings named by options or the environment: checked before any device, file or
  -- GPU work.
  if opts.cache_dir ~= nil then M.check_directory("--cache-dir", opts.cache_dir) end
  local epoch = M.source_date_epoch()
  -- An output is never an input: checked before any device, file or GPU work.
  local outputs = { { "--out", opts.out } }
  if opts.binary then outputs[#outputs + 1] = { "--binary", opts.binary } end
  outputs[#outputs + 1] = { "the checkpoint directory of --out", opts.out .. ".partial", "directory" }
  M.check_outputs(outputs, M.input_files(opts))
  local phases = M.phases()
  local t0 = M.clock()
  local devs = M.open_devices(opts.devices, opts.device, opts.validation)
  phases:add("open", M.clock() - t0)
  local ctx = devs[1]
  local caps = ctx:caps()
  local function close_devs()
    for _, c in ipairs(devs) do c:close() end
  end
  t0 = M.clock()
  local t, space, from_cache = M.load(opts)
  phases:add("load", M.clock() - t0)
  local n, dim = t:n(), t:dim()
  local starts = parse_starts(opts.starts, n)
  -- The one start check (the engines run it too), before any file or GPU work.
  local ok_s, e_s = pcall(diversity.check_starts, starts, n)
  if not ok_s then
    t:close(); close_devs()
    error("diversity: " .. diversity.message(e_s):gsub("^diversity%.check_starts: ", ""), 0)
  end
  if opts.binary and #starts ~= n then
    t:close(); close_devs()
    error("diversity: --binary " .. opts.binary .. " holds a row for every item; it needs --starts all", 0)
  end
  -- A shard computes its slice of the run's starts (the batch size, below, is the run's).
  local all_starts = starts
  if shard then starts = M.shard_starts(all_starts, shard) end
  local steps = math.min(opts.top_k or (n - 1), n - 1)
  local tile = opts.tile or M.tile_size(caps.l2_bytes, dim, opts.precision)
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
    t:close(); close_devs()
    error("diversity: --mode gram: " .. unfit .. " (--mode auto falls back to scan)", 0)
  end
  -- Batches fit each device's buffer, dispatch and memory limits (gram: next to G).
  local fit = diversity.max_batch(devs, n, dim, opts.precision, steps, mode)
  -- Batches fit every device and the host's budget (the results of a batch stay in host memory
  -- until written, so a whole cache of a large N goes in several batches rather than one of N²
  -- entries); gram's default is every sequence that fits, but a large whole cache in at least
  -- four batches, so that the host writes one batch while the device computes the next; several
  -- devices share about four batches each, so a faster device takes more of them. A shard sizes
  -- them to its own starts but records the whole run's batch size, the one-shot run's metadata.
  -- The arithmetic is Rust's (`diversity.batch_sizes`).
  local host_memory = opts.host_memory or M.default_host_memory()
  local host_fit = M.host_batch(host_memory, steps)
  local batch, device_batch, run_batch = diversity.batch_sizes {
    gram = mode == "gram", requested = batch_given and opts.batch or nil, default = opts.batch,
    fit = fit, host_fit = host_fit, devices = #devs, starts = #starts, all_starts = #all_starts,
  }
  if not opts.quiet then
    io.stderr:write(("batch %d sequences (the device fits %d; %d MiB of host memory fits %d)\n")
      :format(batch, fit, math.floor(host_memory / 2 ^ 20), host_fit))
    io.stderr:flush()
  end
  batch = device_batch
  -- generated_at: SOURCE_DATE_EPOCH when set (reproducible output), else now; a resumed run keeps
  -- the time of the run it continues, so its output is byte-identical to an uninterrupted one.
  local ckdir = opts.out .. ".partial"
  local generated_at = os.date("!%Y-%m-%dT%H:%M:%SZ", epoch)
  if opts.resume then generated_at = M.checkpoint_time(ckdir) or generated_at end
  local meta = {
    model = opts.model or "unknown", num_poems = n, algorithm = "diversity-sequence-v1",
    generated_at = generated_at, batch_size = run_batch, top_k = steps,
    space = space, precision = opts.precision, mode = mode, device = M.device_names(devs),
  }
  -- The gram arithmetic (key sums, G's entries, the judge): other values give other bits.
  -- (nil for the scan on a device; the host engine names its own for either mode.)
  meta.summation = ctx:summation(n, dim, mode, M.gram_arithmetic(opts))
  if shard then
    meta.shard, meta.shard_layout = shard.spec, shard.layout
    meta.shard_starts_total = #all_starts
    meta.shard_starts_fingerprint = M.starts_fingerprint(all_starts)
    -- The table's content as stored (after centring, with its ids): merge takes only shards
    -- of one table.
    meta.shard_table_checksum = diversity.table_checksum(t, opts.precision)
  end
  -- The output locations are checked (temporary files created) before any GPU work.
  local ok_w, writer = pcall(diversity.json_cache_writer, opts.out, meta, t:ids())
  if not ok_w then
    t:close(); close_devs()
    error(diversity.message(writer), 0)
  end
  local bin
  if opts.binary then
    local ok_b, b = pcall(diversity.binary_cache_writer, opts.binary, n, steps + 1)
    if not ok_b then
      writer:close(); t:close(); close_devs()
      error(diversity.message(b), 0)
    end
    bin = b
  end
  local run = { steps = steps, tile = tile, mode = mode, batch = batch, summation = meta.summation,
    phases = phases }
  local ok, result = pcall(M.compute, devs, t, starts, run, opts, writer, bin, ckdir, generated_at)
  if not ok then
    writer:close()
    if bin then bin:close() end
    t:close(); close_devs()
    error(diversity.message(result), 0)
  end
  t0 = M.clock()
  local ok_f, e_f = pcall(M.finish_outputs, writer, bin)
  phases:add("finish", M.clock() - t0)
  t:close(); close_devs()
  if not ok_f then
    if not M.checkpoint_is(ckdir, result.run_text) then
      error(("%s\n%s"):format(diversity.message(e_f), M.checkpoint_gone(ckdir)), 0)
    end
    error(("%s\nevery batch is checkpointed in %s: run again with --resume to write the "
      .. "output without computing them again"):format(diversity.message(e_f), ckdir), 0)
  end
  result.run_text = nil -- the driver's own, not part of the summary
  -- The outputs are in place: the checkpoint is no longer needed.
  M.remove_checkpoint(ckdir)
  result.from_cache = from_cache
  if opts.verbose then io.stderr:write("host phases: ", phases:line(), "\n") end
  result.tile = tile
  result.mode_reason = mode_reason
  if shard then result.shard, result.shard_layout = shard.spec, shard.layout end
  return result
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

--- The checkpoint format (`<out>.partial/`) is Rust's (`diversity.checkpoint_*`, the crate's
-- `checkpoint` module): run.txt's text, the batch files' names, every checksum, the .part block
-- header and the checks a resume makes. The driver decides when to write and read, and writes
-- the files itself (its error messages name the file as Lua's io does).

--- What binds a checkpoint file to its run and its place: the run (the text of its run.txt,
-- `M.run_text`), the batch's index and its starts, as one line that every checksum of the
-- batch's files covers. A file written by another run, or for another batch, fails its checksum.
function M.batch_binding(run_text, b, list)
  return diversity.checkpoint_binding(run_text, b, list)
end

--- The checksum of a finished batch file: its binding (`M.batch_binding`) and its bytes (a
-- string or a `diversity.rows()` buffer).
function M.batch_checksum(binding, bytes)
  return diversity.checkpoint_batch_checksum(binding, bytes)
end

--- Check rows the way the cache readers do: `bytes` holds #list rows of `len` uint32 entries
-- (row-major, little-endian); row i must start with its start list[i], hold no entry twice and
-- none at or past `n`. Returns nil, or a description of the first bad row.
function M.check_rows(bytes, list, len, n)
  return diversity.checkpoint_check_rows(bytes, list, len, n)
end

--- Append one chunk to a batch's in-progress checkpoint: entries from..from+count-1 of every
-- sequence, as a block [from, count, checksum (2 words), rows × count uint32], written and
-- closed at once. The checksum covers the block's place (`binding`, from, count) and its bytes.
function M.append_part(path, from, count, bytes, binding)
  local head = diversity.checkpoint_part_head(binding, from, count, bytes)
  if type(bytes) ~= "string" then
    local ok, e = pcall(bytes.append_to, bytes, path, head)
    if not ok then error("diversity: checkpoint " .. diversity.message(e), 0) end
    return
  end
  local f, e = io.open(path, "ab")
  if not f then error("diversity: checkpoint " .. path .. ": " .. tostring(e), 0) end
  local ok, we = f:write(head, bytes)
  local ok_c, ce = f:close()
  if not ok or not ok_c then
    error("diversity: checkpoint " .. path .. ": " .. tostring(we or ce), 0)
  end
end

--- The driver's files in the checkpoint directory `ckdir` (names only; none when it does not
-- exist), whatever run or batch count wrote them.
function M.checkpoint_files(ckdir)
  return diversity.checkpoint_files(ckdir)
end

--- Remove a checkpoint directory and what the driver put in it (any run's files: a fresh run
-- clears what an earlier one left before it writes its own).
function M.remove_checkpoint(ckdir)
  for _, name in ipairs(M.checkpoint_files(ckdir)) do os.remove(ckdir .. "/" .. name) end
  os.remove(ckdir)
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

--- The devices' names for the metadata: each distinct name once, joined by " + " (one device
-- opened twice reads as that device, so its output matches a one-device run byte for byte).
-- The gram job options that set the arithmetic: placement, whether the table is centred
-- (`center`), and compensated / judge only where `opts` names them (plain_sums, judge); unset,
-- the engine chooses (the judge at every N, with compensated sums, or plain sums on a GPU where
-- the compensated state would not fit its registers or the table is centred).
function M.gram_arithmetic(opts)
  local compensated
  if opts.plain_sums ~= nil then compensated = not opts.plain_sums end
  return { placement = opts.placement, centered = opts.center == true, compensated = compensated,
           judge = opts.judge }
end

function M.device_names(devs)
  local names, seen = {}, {}
  for _, ctx in ipairs(devs) do
    local n = ctx:caps().name
    if not seen[n] then seen[n] = true; names[#names + 1] = n end
  end
  return table.concat(names, " + ")
end

-- What a checkpoint belongs to, as "key=value" lines (run.txt without its generated_at line):
-- every input and option that changes the bytes of the output (`diversity.checkpoint_fingerprint`).
local function fingerprint(t, starts, run, opts)
  return diversity.checkpoint_fingerprint {
    input = opts.embeddings, center = opts.center or false, precision = opts.precision,
    mode = run.mode, summation = run.summation, steps = run.steps, batch = run.batch,
    starts = starts, n = t:n(), dim = t:dim(),
  }
end

--- Check that the checkpoint in `ckdir` belongs to the run whose fingerprint is `fp` and whose
-- run.txt reads `run_text`: a fingerprint that differs is refused naming what differs, a run.txt
-- edited otherwise as such; batch files without a run.txt are refused, as nothing says which
-- run wrote them.
function M.check_run_file(ckdir, fp, run_text)
  diversity.checkpoint_check_run(ckdir, fp, run_text)
end

--- The text of run.txt: what the run is (its fingerprint `fp`) and when it started (a last line
-- "generated_at=…", kept by a resume: `M.checkpoint_time`).
function M.run_text(fp, generated_at)
  return diversity.checkpoint_run_text(fp, generated_at)
end

--- Create the checkpoint directory `ckdir` and write its run.txt (`M.run_text`).
function M.write_run_file(ckdir, text)
  os.execute("mkdir -p '" .. ckdir:gsub("'", "'\\''") .. "'")
  write_file(ckdir .. "/run.txt", text)
end

--- When the run checkpointed in `ckdir` started (its run.txt's generated_at, a UTC time
-- "YYYY-MM-DDTHH:MM:SSZ"), or nil when there is none.
function M.checkpoint_time(ckdir)
  return diversity.checkpoint_time(ckdir)
end

--- Write a finished batch to the checkpoint file `path`: its checksum file (`M.batch_checksum`
-- over `binding` and `bytes`) first, then the bytes through a temporary file renamed onto
-- `path`, so a batch file is never torn (a failure leaves the batch's steps in its .part).
function M.write_batch(path, bytes, binding)
  -- Something that is not a regular file at the batch file's name (a directory, a FIFO) is
  -- named as such, before anything is written beside it.
  for _, p in ipairs({ path, path .. ".sum", path .. ".tmp" }) do
    local kind = diversity.file_kind(p)
    if kind and kind ~= "file" then
      error(("diversity: checkpoint %s is a %s, not a regular file: refusing to write over it")
        :format(p, kind), 0)
    end
  end
  write_file(path .. ".sum", M.batch_checksum(binding, bytes))
  if type(bytes) == "string" then
    local ok_w, e_w = pcall(write_file, path .. ".tmp", bytes)
    if not ok_w then os.remove(path .. ".tmp"); error(e_w, 0) end
  else
    local ok_w, e_w = pcall(bytes.write_to, bytes, path .. ".tmp")
    if not ok_w then
      os.remove(path .. ".tmp")
      error("diversity: checkpoint " .. diversity.message(e_w), 0)
    end
  end
  local ok, e = os.rename(path .. ".tmp", path)
  if not ok then
    -- os.rename's message names the temporary file: name the batch file, and leave no .tmp.
    os.remove(path .. ".tmp")
    local why = tostring(e):gsub("^" .. (path .. ".tmp"):gsub("%p", "%%%0") .. ": ", "")
    error(("diversity: checkpoint %s: %s"):format(path, why), 0)
  end
end

--- Whether `ckdir` still holds the checkpoint of the run whose run.txt reads `run_text` (another
-- run to the same output may have finished and removed it): what a failure may tell the user to
-- --resume.
function M.checkpoint_is(ckdir, run_text)
  local f = io.open(ckdir .. "/run.txt", "rb")
  if not f then return false end
  local text = f:read("*a")
  f:close()
  return text == run_text
end

--- The note a failure ends with when the checkpoint in `ckdir` is not this run's any more.
function M.checkpoint_gone(ckdir)
  return ("nothing is checkpointed: %s no longer holds this run's checkpoint (another run to the "
    .. "same output finished or removed it); run again without --resume"):format(ckdir)
end

--- A finished batch from the checkpoint (`path`, the rows of the starts `list`, `len` entries
-- each, of a table of `n` rows), or nil when there is none. Taken only when its checksum file
-- matches its bytes and `binding` (this run, this batch) and its rows pass `M.check_rows`.
function M.read_batch(path, binding, list, len, n)
  return diversity.checkpoint_read_batch(path, binding, list, len, n)
end

--- The steps so far of an unfinished batch (its .part's checksummed blocks), as {prefix =,
-- have =}, or nil when there are none; its rows must pass `M.check_rows` as well as their
-- checksums.
function M.read_part_rows(path, binding, list, n)
  local prefix, have = diversity.checkpoint_read_part(path, binding, list, n)
  if not prefix then return nil end
  return { prefix = prefix, have = have }
end

--- Compute every batch (`run`: steps, tile, mode — "scan" or "gram", already resolved — and
-- batch) on every device of `devs` (a list of opened contexts; each holds the whole table: the
-- batches are shared out as devices become free, so each device takes work in proportion to its
-- speed), checkpointing each chunk, and stream the rows to the writers in batch order. Jobs step
-- on threads of their own (`job:start`, `diversity.wait_any`), so one Lua thread keeps every
-- device busy. A sequence does not depend on its batch or device (the same bits
-- for any tile, chunk, batch, start order or device count), so the
-- output is the same bytes for any number of devices. The checkpoint in `ckdir` is left in
-- place: the caller removes it (`M.remove_checkpoint`) once its outputs are renamed into place.
function M.compute(devs, t, starts, run, opts, writer, bin, ckdir, generated_at)
  local steps, tile, batch = run.steps, run.tile, run.batch
  local ndev = #devs
  local dts = {}
  local function close_all()
    for _, dt in ipairs(dts) do dt:close() end
  end
  local t_up = M.clock()
  for d, ctx in ipairs(devs) do
    local ok, dt = pcall(ctx.upload, ctx, t, opts.precision)
    if not ok then
      close_all()
      error(("diversity: device %d of %d (%s): uploading the table failed: %s")
        :format(d, ndev, ctx:caps().name, diversity.message(dt)), 0)
    end
    dts[d] = dt
  end
  if run.phases then run.phases:add("upload", M.clock() - t_up) end
  local nbatches = math.ceil(#starts / batch)
  local fp = fingerprint(t, starts, run, opts)
  local run_text = M.run_text(fp, generated_at)
  local function ckfile(b) return diversity.checkpoint_batch_file(ckdir, b) end
  local function partfile(b) return diversity.checkpoint_part_file(ckdir, b) end
  local lists, bindings = {}, {}
  for b = 1, nbatches do
    local first = (b - 1) * batch + 1
    local list = {}
    for i = first, math.min(first + batch - 1, #starts) do list[#list + 1] = starts[i] end
    lists[b] = list
    bindings[b] = M.batch_binding(run_text, b, list)
  end
  -- The checkpoint, before any job runs: a resume takes only what this run wrote, checked
  -- (finished batches, and the steps so far of unfinished ones); a fresh run clears it.
  local saved, parts = {}, {}
  local ok_ck, e_ck = pcall(function()
    if opts.resume then
      M.check_run_file(ckdir, fp, run_text)
      for b = 1, nbatches do
        saved[b] = M.read_batch(ckfile(b), bindings[b], lists[b], steps + 1, t:n())
        if not saved[b] then
          parts[b] = M.read_part_rows(partfile(b), bindings[b], lists[b], t:n())
        end
      end
    else
      M.remove_checkpoint(ckdir)
    end
    M.write_run_file(ckdir, run_text)
  end)
  if not ok_ck then
    close_all()
    error(e_ck, 0)
  end
  local resumed = 0
  local progress = M.progress(steps * nbatches, io.stderr, opts.quiet)
  local total_gpu_ns = 0
  local device_ns = {}
  for d = 1, ndev do device_ns[d] = 0 end
  local phases = run.phases or M.phases()
  local clock = M.clock

  -- The host's work (checkpoint files, the binary and JSON writers) is a queue of tasks run
  -- while the devices compute the next chunks, so that the devices never wait on the host:
  -- FIFO, each task {phase, kind, fn}; a task may return tasks to run next (before the rest).
  local tasks = {}
  local function run_task()
    local task = table.remove(tasks, 1)
    if not task then return false end
    local t0 = clock()
    local more = task[3]()
    phases:add(task[1], clock() - t0)
    if more then
      for i = #more, 1, -1 do table.insert(tasks, 1, more[i]) end
    end
    return true
  end
  -- Rows go to the writers in slices of about 32 MiB, so that no task keeps the devices
  -- waiting long; the JSON rows in batch order, whichever device finishes first.
  local slice_rows = math.max(1, math.floor(M.SLICE_BYTES / (4 * (steps + 1))))
  -- Host buffers for downloads (`diversity.rows()`), reused: a task gives its buffer back.
  local pool = {}
  local function take() return table.remove(pool) or diversity.rows() end
  local function give(r) pool[#pool + 1] = r end
  -- Starts first .. last of a list, as a new list (not `unpack`: LuaJIT refuses to unpack
  -- more than a few thousand values, and a slice of short rows holds many more).
  local function sublist(list, first, last)
    local part = {}
    for i = first, last do part[#part + 1] = list[i] end
    return part
  end
  local function write_tasks(b, bytes)
    local list, len, out = lists[b], steps + 1, {}
    if type(bytes) ~= "string" then
      for first = 1, #list, slice_rows do
        local last = math.min(first + slice_rows - 1, #list)
        local part = sublist(list, first, last)
        if bin then
          out[#out + 1] = { "binary", "output", function() bin:write_rows(part, bytes, first - 1) end }
        end
        out[#out + 1] = { "json", "output", function() writer:write_rows(part, bytes, first - 1) end }
      end
      out[#out + 1] = { "json", "output", function() give(bytes) end }
      return out
    end
    for first = 1, #list, slice_rows do
      local last = math.min(first + slice_rows - 1, #list)
      -- The slice is cut when its first task runs, so one slice at a time is copied out.
      local part, piece = sublist(list, first, last), nil
      local function cut()
        piece = piece or ((first == 1 and last == #list) and bytes
          or bytes:sub((first - 1) * len * 4 + 1, last * len * 4))
        return piece
      end
      if bin then
        out[#out + 1] = { "binary", "output", function() bin:write_bytes(part, cut(), len) end }
      end
      out[#out + 1] = { "json", "output", function()
        writer:write_bytes(part, cut(), len)
        piece = nil
      end }
    end
    return out
  end
  -- Finished batches (bytes, or true for a checked one still in the checkpoint, read again when
  -- its turn comes so that a resume holds one batch at a time).
  local done_bytes, queue = {}, {}
  local completed = 0
  for b = 1, nbatches do
    if saved[b] then
      done_bytes[b] = true
      saved[b] = nil
      resumed = resumed + 1
      completed = completed + 1
      progress:skip(steps)
    else
      queue[#queue + 1] = b
    end
  end
  local next_write = 1
  local function flush()
    while done_bytes[next_write] do
      local b, bytes = next_write, done_bytes[next_write]
      done_bytes[b] = nil
      next_write = next_write + 1
      if bytes == true then
        tasks[#tasks + 1] = { "resume read", "output", function()
          return write_tasks(b, M.read_batch(ckfile(b), bindings[b], lists[b], steps + 1, t:n()))
        end }
      else
        for _, task in ipairs(write_tasks(b, bytes)) do tasks[#tasks + 1] = task end
      end
    end
  end
  flush()

  local slots = {} -- per device: the batch it is on
  local failure
  local function label()
    if ndev == 1 then
      local s = slots[1]
      return s and ("%s batch %d/%d"):format(run.mode, s.b, nbatches) or run.mode
    end
    local parts = { run.mode }
    for d = 1, ndev do
      local s = slots[d]
      parts[#parts + 1] = s and ("dev%d b%d %d%%"):format(d, s.b,
        math.floor(100 * math.max(s.have - 1, 0) / math.max(steps, 1))) or ("dev%d idle"):format(d)
    end
    return table.concat(parts, " | ")
  end
  -- After every chunk, its new entries go to the checkpoint (a lost device loses at most the
  -- chunk in flight): downloaded at once, written by a task while the next chunk runs.
  local function checkpoint(s)
    local now = s.job:sequence_len()
    if now > s.have then
      local t0 = clock()
      local from, cols, path, binding = s.have, take(), s.partfile, bindings[s.b]
      s.job:columns_into(cols, from, now)
      phases:add("download", clock() - t0)
      tasks[#tasks + 1] = { "checkpoint", "checkpoint", function()
        M.append_part(path, from, now - from, cols, binding)
        give(cols)
      end }
      s.have = now
    end
  end
  local function start_batch(d)
    local b = table.remove(queue, 1)
    local s = { b = b, list = lists[b], partfile = partfile(b), have = 0 }
    slots[d] = s
    -- The steps of this batch already in the checkpoint (resume), as rows of `have` entries.
    local prefix, have = nil, 0
    if parts[b] then prefix, have = parts[b].prefix, parts[b].have end
    parts[b] = nil
    if not prefix then os.remove(s.partfile); have = 0 end
    s.have = have
    -- Gram jobs share the device table's G, built by the first one.
    local jopts = M.gram_arithmetic(opts)
    jopts.mode, jopts.tile, jopts.chunk, jopts.steps, jopts.shape = run.mode, tile, 0, steps, opts.shape
    local t0 = clock()
    if prefix then
      s.job = dts[d]:resume_job(t, s.list, prefix, have, jopts)
      progress:skip(have - 1)
    else
      s.job = dts[d]:job(s.list, jopts)
    end
    phases:add("job setup (G)", clock() - t0)
    -- Probe, then chunks sized to the watchdog target, re-estimated as steps get cheaper.
    -- A fixed --chunk replaces both. (The host's tasks wait for the probe at most one task.)
    s.job:start(math.min(opts.chunk or opts.probe_steps, steps - s.job:progress()))
    s.t0 = os.clock()
    s.running = true
  end
  local function fill()
    for d = 1, ndev do
      if not failure and not slots[d] and #queue > 0 then
        local ok, e = pcall(start_batch, d)
        if not ok then
          failure = { d = d, s = slots[d], e = e }
          if slots[d] then slots[d].running = false end
        end
      end
    end
  end

  fill()
  while true do
    local jobs, at_dev = {}, {}
    for d = 1, ndev do
      local s = slots[d]
      if s and s.running then
        jobs[#jobs + 1] = s.job
        at_dev[#jobs] = d
      end
    end
    local function ready()
      for _, j in ipairs(jobs) do
        if j:ready() then return true end
      end
      return false
    end
    -- The host's work while the devices compute; with none computing, the rest of it.
    local ok_t, e_t = true, nil
    if #jobs == 0 then
      if failure or #tasks == 0 then break end
      ok_t, e_t = pcall(run_task)
    else
      while ok_t and #tasks > 0 and not failure and not ready() do ok_t, e_t = pcall(run_task) end
    end
    if not ok_t then
      failure = failure or { host = true, e = e_t }
    end
    if #jobs > 0 then
      local t0 = clock()
      local d = at_dev[diversity.wait_any(jobs)]
      phases:add("waiting for the device", clock() - t0)
      local s = slots[d]
      s.running = false
      local ok, done, ns = pcall(s.job.wait, s.job)
      if not ok then
        failure = failure or { d = d, s = s, e = done }
      else
        checkpoint(s)
        total_gpu_ns = total_gpu_ns + ns
        device_ns[d] = device_ns[d] + ns
        -- Devices run at once: the bar's rate is steps per second of one device's time.
        progress:update(done, ns / 1e9 / ndev, label())
        local per_step = ((ns > 0) and ns / 1e9 or (os.clock() - s.t0)) / math.max(done, 1)
        local chunk = opts.chunk or M.chunk_size(per_step, opts.target_s, opts.safety)
        s.chunk = s.chunk and math.max(s.chunk, chunk) or chunk
        if s.job:done() then
          local t0 = clock()
          local bytes = take()
          s.job:columns_into(bytes, 0, steps + 1)
          phases:add("download", clock() - t0)
          s.job:close()
          slots[d] = nil
          -- The next batch first, then this one's files while it runs.
          fill()
          local b, path, binding, partfile = s.b, ckfile(s.b), bindings[s.b], s.partfile
          tasks[#tasks + 1] = { "checkpoint", "checkpoint", function()
            M.write_batch(path, bytes, binding)
            -- Counted once its file is written: a batch whose file failed (a full disk) is not.
            completed = completed + 1
            os.remove(partfile)
          end }
          done_bytes[b] = bytes
          flush()
        elseif failure then
          -- Another device failed: stop here, this batch's steps so far are checkpointed.
          s.job:close()
        else
          ok, done = pcall(s.job.start, s.job, s.chunk)
          if ok then
            s.t0 = os.clock()
            s.running = true
          else
            failure = { d = d, s = s, e = done }
          end
        end
      end
    end
  end
  progress:finish()
  if failure then
    -- What was downloaded goes to the checkpoint before the failure is reported.
    for _, task in ipairs(tasks) do
      if task[2] == "checkpoint" then pcall(task[3]) end
    end
    tasks = {}
  end
  if failure then
    local f, partial = failure, {}
    -- The step the failed job had reached (0 when it was never created).
    local at = 0
    if f.s and f.s.job then
      local ok, p = pcall(f.s.job.progress, f.s.job)
      if ok then at = p end
    end
    for d = 1, ndev do
      local s = slots[d]
      if s then
        if s.job then s.job:close() end
        if s.have > 1 then partial[#partial + 1] = ("steps 1..%d of batch %d"):format(s.have - 1, s.b) end
      end
    end
    -- Unfinished batches read from the checkpoint but not started again are still there.
    for b = 1, nbatches do
      if parts[b] and parts[b].have > 1 then
        partial[#partial + 1] = ("steps 1..%d of batch %d"):format(parts[b].have - 1, b)
      end
    end
    close_all()
    local saved_note
    if not M.checkpoint_is(ckdir, run_text) then
      saved_note = M.checkpoint_gone(ckdir)
    elseif completed == 0 and #partial == 0 then
      M.remove_checkpoint(ckdir)
      saved_note = "nothing was complete, so nothing is checkpointed"
    else
      local what = ("%d completed batch(es)"):format(completed)
      if #partial > 0 then what = what .. " and " .. table.concat(partial, " and ") end
      saved_note = ("%s are checkpointed in %s; run again with --resume to continue")
        :format(what, ckdir)
    end
    if f.host then
      error(("diversity: writing the outputs failed: %s\n%s"):format(diversity.message(f.e),
        saved_note), 0)
    end
    local list = f.s and f.s.list or { 0 }
    error(("diversity: batch %d of %d (starts %d..%d) failed at step %d of %d on device %d of %d (%s): %s\n%s")
      :format(f.s and f.s.b or 0, nbatches, list[1], list[#list], at + 1, steps, f.d, ndev,
        devs[f.d]:caps().name, diversity.message(f.e), saved_note), 0)
  end
  close_all()
  -- Every batch is computed; the checkpoint stays until the caller's outputs are in place.
  return { n = t:n(), dim = t:dim(), sequences = #starts, steps = steps, batches = nbatches,
    batch = batch, gpu_ns = total_gpu_ns, device_gpu_ns = device_ns, resumed_batches = resumed,
    run_text = run_text,
    device = M.device_names(devs), devices = ndev, mode = run.mode, phases = phases,
    engine = devs[1]:engine() }
end

return M
