--- The driver (SPEC §Driver): the whole diversity-cache job from files, the way the user's pipeline
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
}

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

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function basename(path)
  return path:match("([^/]*)$")
end

--- Load the embeddings: `.json` (ids kept), `.npy`, `.f32` (needs dim), or an fp16 `.bin` with
-- its sidecar. With fp16 precision and a JSON/npy input, the centred fp16 conversion is cached
-- beside the input (`<name>.<space>.fp16.bin` + sidecar) and reused while the source is unchanged.
function M.load(opts)
  local path = opts.embeddings
  local space = opts.center and "mean-centered-v1" or "raw"
  if path:match("%.bin$") then
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
  local cache_path = dirname(path) .. "/" .. basename(path):gsub("%.[^.]*$", "") .. "." .. space .. ".fp16.bin"
  local checksum
  if cache then
    checksum = diversity.file_checksum(path)
    if file_exists(cache_path) and file_exists(cache_path .. ".json") then
      local ok, t = pcall(diversity.load_fp16_bin, cache_path, space, checksum)
      if ok then
        -- ids are not in the .bin: take them from the ids sidecar when the source had them.
        local ok_ids, ids = pcall(diversity.load_ids, cache_path .. ".ids.json")
        if ok_ids then t = t:with_ids(ids) end
        return t, space, true
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
    local ok = pcall(t.save_fp16_bin, t, cache_path, space, checksum)
    if ok and t:ids() then pcall(diversity.save_ids, cache_path .. ".ids.json", t) end
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
  f:write(data)
  f:close()
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local d = f:read("*a")
  f:close()
  return d
end

M.MODES = { scan = true, gram = true, auto = true }
M.PLACEMENTS = { auto = true, registers = true, memory = true }

--- Run the whole job. `opts`: embeddings, out (diversity_cache.json), binary (optional uint32
-- cache), center, precision, mode ("scan", "gram" or "auto"), placement (gram: "auto",
-- "registers" or "memory"), plain_sums (gram: plain float32 sums instead of compensated), top_k, batch, starts ("all", "a,b,c" or a Lua array), device,
-- validation, resume, target_s, safety, quiet, model, dim. Returns a summary table (with `mode`,
-- the engine used, and `mode_reason`, why).
function M.run(opts)
  local batch_given = opts.batch ~= nil
  for k, v in pairs(M.defaults) do
    if opts[k] == nil then opts[k] = v end
  end
  if not opts.embeddings then error("diversity: --embeddings FILE is required", 0) end
  if not opts.out then error("diversity: --out FILE is required", 0) end
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
  if opts.top_k and (opts.top_k < 0 or opts.top_k ~= math.floor(opts.top_k)) then
    error("diversity: --top-k must be a non-negative integer, got " .. tostring(opts.top_k), 0)
  end
  local ctx = diversity.open { device = opts.device, validation = opts.validation }
  local caps = ctx:caps()
  local t, space, from_cache = M.load(opts)
  local n, dim = t:n(), t:dim()
  local starts = parse_starts(opts.starts, n)
  local seen = {}
  for i, s in ipairs(starts) do
    if s < 0 or s >= n then
      t:close(); ctx:close()
      error(("diversity: start %d (position %d) is out of range: the table has %d rows (0-based)")
        :format(s, i, n), 0)
    end
    if seen[s] then
      t:close(); ctx:close()
      error(("diversity: start %d is repeated (position %d)"):format(s, i), 0)
    end
    seen[s] = true
  end
  if opts.binary and #starts ~= n then
    t:close(); ctx:close()
    error("diversity: --binary " .. opts.binary .. " holds a row for every item; it needs --starts all", 0)
  end
  local steps = math.min(opts.top_k or (n - 1), n - 1)
  local tile = M.tile_size(caps.l2_bytes, dim, opts.precision)
  -- The engine (SPEC §Modes: auto = gram when G fits the device's memory budget, else scan),
  -- reported before any work and written into the metadata.
  local mode, mode_reason = ctx:mode_for(n, dim, opts.precision, opts.mode)
  if not opts.quiet then
    io.stderr:write(("mode %s (%s)\n"):format(mode, mode_reason))
    io.stderr:flush()
  end
  if opts.mode == "gram" and mode_reason:match("^requested, but ") then
    t:close(); ctx:close()
    error("diversity: --mode gram: " .. mode_reason:gsub("^requested, but ", "")
      .. " (--mode auto falls back to scan)", 0)
  end
  -- Batches fit the device's buffer, dispatch and memory limits (gram: next to G; by default
  -- every sequence that fits, the whole cache in one batch on a GPU).
  local fit = ctx:max_batch(n, dim, opts.precision, steps, mode)
  local batch = (mode == "gram" and not batch_given) and fit or math.max(1, math.min(opts.batch, fit))
  -- generated_at: SOURCE_DATE_EPOCH when set (reproducible output), else now; a resumed run keeps
  -- the time of the run it continues, so its output is byte-identical to an uninterrupted one.
  local ckdir = opts.out .. ".partial"
  local epoch = tonumber(os.getenv("SOURCE_DATE_EPOCH") or "")
  local generated_at = os.date("!%Y-%m-%dT%H:%M:%SZ", epoch)
  if opts.resume then generated_at = read_file(ckdir .. "/generated_at.txt") or generated_at end
  local meta = {
    model = opts.model or "unknown", num_poems = n, algorithm = "diversity-sequence-v1",
    generated_at = generated_at, batch_size = batch, top_k = steps,
    space = space, precision = opts.precision, mode = mode, device = caps.name,
  }
  -- Gram sums (SPEC §Modes): compensated by default; plain sums are faster and other bits.
  if mode == "gram" then meta.summation = opts.plain_sums and "plain" or "compensated" end
  -- The output locations are checked (temporary files created) before any GPU work.
  local ok_w, writer = pcall(diversity.json_cache_writer, opts.out, meta, t:ids())
  if not ok_w then
    t:close(); ctx:close()
    error(diversity.message(writer), 0)
  end
  local bin
  if opts.binary then
    local ok_b, b = pcall(diversity.binary_cache_writer, opts.binary, n, steps + 1)
    if not ok_b then
      writer:close(); t:close(); ctx:close()
      error(diversity.message(b), 0)
    end
    bin = b
  end
  local run = { steps = steps, tile = tile, mode = mode, batch = batch }
  local ok, result = pcall(M.compute, ctx, t, starts, run, opts, writer, bin, ckdir, generated_at)
  if not ok then
    writer:close()
    if bin then bin:close() end
    t:close(); ctx:close()
    error(diversity.message(result), 0)
  end
  writer:finish()
  if bin then bin:finish() end
  t:close(); ctx:close()
  result.from_cache = from_cache
  result.tile = tile
  result.mode_reason = mode_reason
  return result
end

local function u32le(n)
  return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 16777216) % 256)
end

local function read_u32(s, pos)
  local a, b, c, d = s:byte(pos, pos + 3)
  return a + b * 256 + c * 65536 + d * 16777216
end

--- Append one chunk to a batch's in-progress checkpoint: entries from..from+count-1 of every
-- sequence, as a block [from, count, rows × count uint32], written and closed at once.
function M.append_part(path, from, count, bytes)
  local f, e = io.open(path, "ab")
  if not f then error("diversity: checkpoint " .. path .. ": " .. tostring(e), 0) end
  f:write(u32le(from), u32le(count), bytes)
  f:close()
end

--- Read a batch's in-progress checkpoint back: the rows' first `len` entries, row-major, as a
-- binary string, and `len`; nil when there is none. A torn last block (a crash mid-write) and
-- anything after a gap are ignored.
function M.read_part(path, rows)
  local s = read_file(path)
  if not s then return nil end
  local blocks, pos, len = {}, 1, 0
  while pos + 8 <= #s + 1 do
    local from, count = read_u32(s, pos), read_u32(s, pos + 4)
    local size = rows * count * 4
    if from ~= len or count == 0 or pos + 8 + size > #s + 1 then break end
    blocks[#blocks + 1] = { pos = pos + 8, count = count }
    len = len + count
    pos = pos + 8 + size
  end
  if len == 0 then return nil end
  local out = {}
  for r = 0, rows - 1 do
    for _, blk in ipairs(blocks) do
      local at = blk.pos + r * blk.count * 4
      out[#out + 1] = s:sub(at, at + blk.count * 4 - 1)
    end
  end
  return table.concat(out), len
end

--- Remove a checkpoint directory and what the driver put in it.
function M.remove_checkpoint(ckdir, nbatches)
  for b = 1, nbatches do
    os.remove(("%s/batch-%05d.u32"):format(ckdir, b))
    os.remove(("%s/batch-%05d.part"):format(ckdir, b))
  end
  os.remove(ckdir .. "/run.txt")
  os.remove(ckdir .. "/generated_at.txt")
  os.remove(ckdir)
end

-- A fingerprint of what a checkpoint belongs to.
local function fingerprint(t, starts, run, opts)
  return table.concat({ "v2", opts.embeddings, tostring(opts.center), opts.precision, run.mode,
    tostring(opts.plain_sums or false),
    run.steps, run.batch, #starts, starts[1] or "", starts[#starts] or "", t:n(), t:dim() }, "|")
end

--- Compute every batch (`run`: steps, tile, mode — "scan" or "gram", already resolved — and
-- batch), checkpointing each chunk, and stream the rows to the writers.
function M.compute(ctx, t, starts, run, opts, writer, bin, ckdir, generated_at)
  local steps, tile, batch = run.steps, run.tile, run.batch
  local dt = ctx:upload(t, opts.precision)
  local caps = ctx:caps()
  local nbatches = math.ceil(#starts / batch)
  local fp = fingerprint(t, starts, run, opts)
  local resumed = 0
  if opts.resume then
    local saved = read_file(ckdir .. "/run.txt")
    if saved and saved ~= fp then
      error("diversity: --resume: the checkpoint in " .. ckdir .. " belongs to another run", 0)
    end
  end
  os.execute("mkdir -p '" .. ckdir:gsub("'", "'\\''") .. "'")
  write_file(ckdir .. "/run.txt", fp)
  write_file(ckdir .. "/generated_at.txt", generated_at)
  local progress = M.progress(steps * nbatches, io.stderr, opts.quiet)
  local total_gpu_ns = 0
  for b = 1, nbatches do
    local first = (b - 1) * batch + 1
    local list = {}
    for i = first, math.min(first + batch - 1, #starts) do list[#list + 1] = starts[i] end
    local ckfile = ("%s/batch-%05d.u32"):format(ckdir, b)
    local partfile = ("%s/batch-%05d.part"):format(ckdir, b)
    local saved = opts.resume and read_file(ckfile)
    if saved and #saved == #list * (steps + 1) * 4 then
      writer:write_bytes(list, saved, steps + 1)
      if bin then bin:write_bytes(list, saved, steps + 1) end
      resumed = resumed + 1
      progress:skip(steps)
    else
      local job
      local label = ("%s batch %d/%d"):format(run.mode, b, nbatches)
      -- The steps of this batch already in the checkpoint (resume), as rows of `have` entries.
      local prefix, have = nil, 0
      if opts.resume then prefix, have = M.read_part(partfile, #list) end
      if not prefix then os.remove(partfile); have = 0 end
      local ok, e = pcall(function()
        -- Gram jobs share the device table's G, built by the first one.
        local jopts = { mode = run.mode, tile = tile, chunk = 0, steps = steps,
          placement = opts.placement, compensated = not opts.plain_sums }
        if prefix then
          job = dt:resume_job(t, list, prefix, have, jopts)
          progress:skip(have - 1)
        else
          job = dt:job(list, jopts)
        end
        -- After every chunk, its new entries go to the checkpoint (a lost device loses at most
        -- the chunk in flight).
        local function checkpoint()
          local now = job:sequence_len()
          if now > have then
            M.append_part(partfile, have, now - have, job:columns(have, now))
            have = now
          end
        end
        -- Probe, then chunks sized to the watchdog target, re-estimated as steps get cheaper.
        local probe = math.min(opts.probe_steps, steps - job:progress())
        local t0 = os.clock()
        local done, ns = job:step(probe)
        checkpoint()
        local per_step = ((ns > 0) and ns / 1e9 or (os.clock() - t0)) / math.max(done, 1)
        total_gpu_ns = total_gpu_ns + ns
        progress:update(done, ns / 1e9, label)
        local chunk = M.chunk_size(per_step, opts.target_s, opts.safety)
        while not job:done() do
          t0 = os.clock()
          done, ns = job:step(chunk)
          checkpoint()
          total_gpu_ns = total_gpu_ns + ns
          progress:update(done, ns / 1e9, label)
          per_step = ((ns > 0) and ns / 1e9 or (os.clock() - t0)) / math.max(done, 1)
          chunk = math.max(chunk, M.chunk_size(per_step, opts.target_s, opts.safety))
        end
      end)
      if not ok then
        local at = job and job:progress() or 0
        if job then job:close() end
        dt:close()
        progress:finish()
        local saved_note
        if b == 1 and have <= 1 then
          M.remove_checkpoint(ckdir, nbatches)
          saved_note = "nothing was complete, so nothing is checkpointed"
        else
          saved_note = ("%d completed batch(es) and steps 1..%d of batch %d are checkpointed in %s; "
            .. "run again with --resume to continue"):format(b - 1, math.max(have - 1, 0), b, ckdir)
        end
        error(("diversity: batch %d of %d (starts %d..%d) failed at step %d of %d: %s\n%s")
          :format(b, nbatches, list[1], list[#list], at + 1, steps, diversity.message(e), saved_note), 0)
      end
      local bytes = job:sequences_bytes()
      write_file(ckfile, bytes)
      os.remove(partfile)
      writer:write_bytes(list, bytes, steps + 1)
      if bin then bin:write_job(job) end
      job:close()
    end
  end
  progress:finish()
  dt:close()
  -- The run is complete: the checkpoint is no longer needed.
  M.remove_checkpoint(ckdir, nbatches)
  return { n = t:n(), dim = t:dim(), sequences = #starts, steps = steps, batches = nbatches,
    batch = batch, gpu_ns = total_gpu_ns, resumed_batches = resumed, device = caps.name,
    mode = run.mode }
end

return M
