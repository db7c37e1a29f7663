--- The scheduler of `driver.compute`: the batches of a run shared out over its devices as each
-- becomes free, and the host's work (checkpoint files, the binary and JSON writers) as a queue of
-- tasks run while the devices compute. One object, four moves:
--   fill        start a batch on every idle device (a probe, then chunks sized to the target);
--   ready       whether a running job has finished its chunk (the host's tasks stop for it);
--   checkpoint  after every chunk, its new entries downloaded and queued for the checkpoint;
--   flush       finished batches queued for the writers in batch order, whichever device ends first.
-- `Schedule:drive()` loops over them until every batch is written or one thing failed;
-- `Schedule:failure_message()` then says what failed and what the checkpoint holds.
-- The policy stays the driver's: every call to it (`chunk_size`, `write_batch`, `append_part`,
-- `read_batch`, `SLICE_BYTES`, `clock`, …) goes through the driver table `drv`, so a script that
-- replaces one of them changes the run.
-- May touch: the jobs it creates on the device tables it is given, the writers and the checkpoint
-- files (through `drv`); nothing else.
local diversity = require "diversity"

local M = {}

local Schedule = {}
Schedule.__index = Schedule

--- A scheduler over `c`: drv (the driver table), devs and dts (the opened devices and their
-- device tables), t (the table), run (steps, tile, mode, phases), opts, writer, bin (or nil),
-- lists and bindings (per batch: its starts and its checkpoint binding), ckfile(b) and
-- partfile(b) (the batch's checkpoint files), saved (per batch: true when its file in the
-- checkpoint is checked), parts (per batch: its steps so far in the checkpoint, {prefix, have})
-- and progress (`driver.progress`).
function M.new(c)
  local s = setmetatable(c, Schedule)
  s.ndev, s.nbatches, s.steps = #c.devs, #c.lists, c.run.steps
  s.phases, s.clock = c.run.phases or c.drv.phases(), c.drv.clock
  s.tasks = {}         -- the host's work: FIFO, each {phase, kind, fn}
  s.pool = {}          -- host buffers for downloads (`diversity.rows()`), reused
  s.slots = {}         -- per device: the batch it is on
  s.done_bytes = {}    -- finished batches not yet queued for the writers
  s.queue = {}         -- batches to start
  s.next_write = 1     -- the next batch the writers take
  s.completed, s.resumed = 0, 0
  s.total_gpu_ns, s.device_ns = 0, {}
  for d = 1, s.ndev do s.device_ns[d] = 0 end
  -- Rows go to the writers in slices of about 32 MiB, so that no task keeps the devices
  -- waiting long.
  s.slice_rows = math.max(1, math.floor(c.drv.SLICE_BYTES / (4 * (s.steps + 1))))
  -- Finished batches (bytes, or true for a checked one still in the checkpoint, read again when
  -- its turn comes so that a resume holds one batch at a time).
  for b = 1, s.nbatches do
    if c.saved[b] then
      s.done_bytes[b] = true
      c.saved[b] = nil
      s.resumed = s.resumed + 1
      s.completed = s.completed + 1
      c.progress:skip(s.steps)
    else
      s.queue[#s.queue + 1] = b
    end
  end
  return s
end

--- Run the first task of the host's queue (false when there is none); a task may return tasks
-- to run next, before the rest.
function Schedule:run_task()
  local task = table.remove(self.tasks, 1)
  if not task then return false end
  local t0 = self.clock()
  local more = task[3]()
  self.phases:add(task[1], self.clock() - t0)
  if more then
    for i = #more, 1, -1 do table.insert(self.tasks, 1, more[i]) end
  end
  return true
end

function Schedule:take() return table.remove(self.pool) or diversity.rows() end
function Schedule:give(r) self.pool[#self.pool + 1] = r end

-- Starts first .. last of a list, as a new list (not `unpack`: LuaJIT refuses to unpack
-- more than a few thousand values, and a slice of short rows holds many more).
local function sublist(list, first, last)
  local part = {}
  for i = first, last do part[#part + 1] = list[i] end
  return part
end

--- The writer tasks of batch `b`, whose rows are `bytes` (a `diversity.rows()` buffer, given
-- back to the pool once written, or a string read from the checkpoint).
function Schedule:write_tasks(b, bytes)
  local list, len, out = self.lists[b], self.steps + 1, {}
  local writer, bin, slice_rows = self.writer, self.bin, self.slice_rows
  if type(bytes) ~= "string" then
    for first = 1, #list, slice_rows do
      local last = math.min(first + slice_rows - 1, #list)
      local part = sublist(list, first, last)
      if bin then
        out[#out + 1] = { "binary", "output", function() bin:write_rows(part, bytes, first - 1) end }
      end
      out[#out + 1] = { "json", "output", function() writer:write_rows(part, bytes, first - 1) end }
    end
    out[#out + 1] = { "json", "output", function() self:give(bytes) end }
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

--- Queue the writer tasks of every finished batch whose turn has come (batch order).
function Schedule:flush()
  local drv = self.drv
  while self.done_bytes[self.next_write] do
    local b, bytes = self.next_write, self.done_bytes[self.next_write]
    self.done_bytes[b] = nil
    self.next_write = self.next_write + 1
    if bytes == true then
      self.tasks[#self.tasks + 1] = { "resume read", "output", function()
        return self:write_tasks(b, drv.read_batch(self.ckfile(b), self.bindings[b], self.lists[b],
          self.steps + 1, self.t:n()))
      end }
    else
      for _, task in ipairs(self:write_tasks(b, bytes)) do self.tasks[#self.tasks + 1] = task end
    end
  end
end

--- The progress bar's label: the batch each device is on.
function Schedule:label()
  local mode, slots, steps = self.run.mode, self.slots, self.steps
  if self.ndev == 1 then
    local s = slots[1]
    return s and ("%s batch %d/%d"):format(mode, s.b, self.nbatches) or mode
  end
  local parts = { mode }
  for d = 1, self.ndev do
    local s = slots[d]
    parts[#parts + 1] = s and ("dev%d b%d %d%%"):format(d, s.b,
      math.floor(100 * math.max(s.have - 1, 0) / math.max(steps, 1))) or ("dev%d idle"):format(d)
  end
  return table.concat(parts, " | ")
end

--- After every chunk, its new entries go to the checkpoint (a lost device loses at most the
-- chunk in flight): downloaded at once, written by a task while the next chunk runs.
function Schedule:checkpoint(s)
  local now = s.job:sequence_len()
  if now > s.have then
    local t0 = self.clock()
    local from, cols, path, binding = s.have, self:take(), s.partfile, self.bindings[s.b]
    s.job:columns_into(cols, from, now)
    self.phases:add("download", self.clock() - t0)
    local drv = self.drv
    self.tasks[#self.tasks + 1] = { "checkpoint", "checkpoint", function()
      drv.append_part(path, from, now - from, cols, binding)
      self:give(cols)
    end }
    s.have = now
  end
end

--- Start the next batch on device `d`: from its steps in the checkpoint when a resume has them.
function Schedule:start_batch(d)
  local b = table.remove(self.queue, 1)
  local s = { b = b, list = self.lists[b], partfile = self.partfile(b), have = 0 }
  self.slots[d] = s
  -- The steps of this batch already in the checkpoint (resume), as rows of `have` entries.
  local prefix, have = nil, 0
  local parts = self.parts
  if parts[b] then prefix, have = parts[b].prefix, parts[b].have end
  parts[b] = nil
  if not prefix then os.remove(s.partfile); have = 0 end
  s.have = have
  -- Gram jobs share the device table's G, built by the first one.
  local opts, run = self.opts, self.run
  local jopts = self.drv.gram_arithmetic(opts)
  jopts.mode, jopts.tile, jopts.chunk, jopts.steps, jopts.shape = run.mode, run.tile, 0, self.steps,
    opts.shape
  local t0 = self.clock()
  if prefix then
    s.job = self.dts[d]:resume_job(self.t, s.list, prefix, have, jopts)
    self.progress:skip(have - 1)
  else
    s.job = self.dts[d]:job(s.list, jopts)
  end
  self.phases:add("job setup (G)", self.clock() - t0)
  -- Probe, then chunks sized to the watchdog target, re-estimated as steps get cheaper.
  -- A fixed --chunk replaces both. (The host's tasks wait for the probe at most one task.)
  s.job:start(math.min(opts.chunk or opts.probe_steps, self.steps - s.job:progress()))
  s.t0 = os.clock()
  s.running = true
end

--- Start a batch on every idle device while batches are left and nothing has failed.
function Schedule:fill()
  for d = 1, self.ndev do
    if not self.failure and not self.slots[d] and #self.queue > 0 then
      local ok, e = pcall(self.start_batch, self, d)
      if not ok then
        self.failure = { d = d, s = self.slots[d], e = e }
        if self.slots[d] then self.slots[d].running = false end
      end
    end
  end
end

--- The running jobs, and for each its device.
function Schedule:running()
  local jobs, at_dev = {}, {}
  for d = 1, self.ndev do
    local s = self.slots[d]
    if s and s.running then
      jobs[#jobs + 1] = s.job
      at_dev[#jobs] = d
    end
  end
  return jobs, at_dev
end

--- Whether one of `jobs` has finished its chunk.
function Schedule.ready(jobs)
  for _, j in ipairs(jobs) do
    if j:ready() then return true end
  end
  return false
end

--- A batch is computed on device `d` (its slot `s`): downloaded, the next batch started, then its
-- checkpoint file and its rows queued.
function Schedule:batch_done(d, s)
  local t0 = self.clock()
  local bytes = self:take()
  s.job:columns_into(bytes, 0, self.steps + 1)
  self.phases:add("download", self.clock() - t0)
  s.job:close()
  self.slots[d] = nil
  -- The next batch first, then this one's files while it runs.
  self:fill()
  local b, path, binding, partfile = s.b, self.ckfile(s.b), self.bindings[s.b], s.partfile
  local drv = self.drv
  self.tasks[#self.tasks + 1] = { "checkpoint", "checkpoint", function()
    drv.write_batch(path, bytes, binding)
    -- Counted once its file is written: a batch whose file failed (a full disk) is not.
    self.completed = self.completed + 1
    os.remove(partfile)
  end }
  self.done_bytes[b] = bytes
  self:flush()
end

--- The job on device `d` finished a chunk: checkpoint it, size the next one (the user's policy,
-- `drv.chunk_size`) and start it, or finish the batch.
function Schedule:chunk_done(d)
  local s, opts = self.slots[d], self.opts
  s.running = false
  local ok, done, ns = pcall(s.job.wait, s.job)
  if not ok then
    self.failure = self.failure or { d = d, s = s, e = done }
    return
  end
  self:checkpoint(s)
  self.total_gpu_ns = self.total_gpu_ns + ns
  self.device_ns[d] = self.device_ns[d] + ns
  -- Devices run at once: the bar's rate is steps per second of one device's time.
  self.progress:update(done, ns / 1e9 / self.ndev, self:label())
  local per_step = ((ns > 0) and ns / 1e9 or (os.clock() - s.t0)) / math.max(done, 1)
  local chunk = opts.chunk or self.drv.chunk_size(per_step, opts.target_s, opts.safety)
  s.chunk = s.chunk and math.max(s.chunk, chunk) or chunk
  if s.job:done() then
    self:batch_done(d, s)
  elseif self.failure then
    -- Another device failed: stop here, this batch's steps so far are checkpointed.
    s.job:close()
  else
    ok, done = pcall(s.job.start, s.job, s.chunk)
    if ok then
      s.t0 = os.clock()
      s.running = true
    else
      self.failure = { d = d, s = s, e = done }
    end
  end
end

--- Every batch, until all are written or something failed (`self.failure`): the host's work
-- while the devices compute; with none computing, the rest of it.
function Schedule:drive()
  self:flush()
  self:fill()
  while true do
    local jobs, at_dev = self:running()
    local ok_t, e_t = true, nil
    if #jobs == 0 then
      if self.failure or #self.tasks == 0 then break end
      ok_t, e_t = pcall(self.run_task, self)
    else
      while ok_t and #self.tasks > 0 and not self.failure and not Schedule.ready(jobs) do
        ok_t, e_t = pcall(self.run_task, self)
      end
    end
    if not ok_t then
      self.failure = self.failure or { host = true, e = e_t }
    end
    if #jobs > 0 then
      local t0 = self.clock()
      local d = at_dev[diversity.wait_any(jobs)]
      self.phases:add("waiting for the device", self.clock() - t0)
      self:chunk_done(d)
    end
  end
  self.progress:finish()
  if self.failure then
    -- What was downloaded goes to the checkpoint before the failure is reported.
    for _, task in ipairs(self.tasks) do
      if task[2] == "checkpoint" then pcall(task[3]) end
    end
    self.tasks = {}
  end
  return not self.failure
end

--- After a failure: close the jobs still open and say what failed and what the checkpoint in
-- `ckdir` (of the run whose run.txt reads `run_text`) holds, removing it when it holds nothing.
function Schedule:failure_message(ckdir, run_text)
  local f, partial, drv = self.failure, {}, self.drv
  -- The step the failed job had reached (0 when it was never created).
  local at = 0
  if f.s and f.s.job then
    local ok, p = pcall(f.s.job.progress, f.s.job)
    if ok then at = p end
  end
  for d = 1, self.ndev do
    local s = self.slots[d]
    if s then
      if s.job then s.job:close() end
      if s.have > 1 then partial[#partial + 1] = ("steps 1..%d of batch %d"):format(s.have - 1, s.b) end
    end
  end
  -- Unfinished batches read from the checkpoint but not started again are still there.
  for b = 1, self.nbatches do
    local p = self.parts[b]
    if p and p.have > 1 then
      partial[#partial + 1] = ("steps 1..%d of batch %d"):format(p.have - 1, b)
    end
  end
  local saved_note
  if not drv.checkpoint_is(ckdir, run_text) then
    saved_note = drv.checkpoint_gone(ckdir)
  elseif self.completed == 0 and #partial == 0 then
    drv.remove_checkpoint(ckdir)
    saved_note = "nothing was complete, so nothing is checkpointed"
  else
    local what = ("%d completed batch(es)"):format(self.completed)
    if #partial > 0 then what = what .. " and " .. table.concat(partial, " and ") end
    saved_note = ("%s are checkpointed in %s; run again with --resume to continue")
      :format(what, ckdir)
  end
  if f.host then
    return ("diversity: writing the outputs failed: %s\n%s"):format(diversity.message(f.e), saved_note)
  end
  local list = f.s and f.s.list or { 0 }
  return ("diversity: batch %d of %d (starts %d..%d) failed at step %d of %d on device %d of %d (%s): %s\n%s")
    :format(f.s and f.s.b or 0, self.nbatches, list[1], list[#list], at + 1, self.steps, f.d,
      self.ndev, self.devs[f.d]:caps().name, diversity.message(f.e), saved_note)
end

return M
