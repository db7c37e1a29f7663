--- Progress and per-phase times of a run: the bar (a terminal) or plain lines (piped) with rate
-- and ETA, and the wall time of each phase (`--verbose`). Re-exported by `diversity.driver`
-- (`driver.progress`, `driver.phases`).
-- May touch: the stream it writes to; nothing else.
local M = {}

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

return M
