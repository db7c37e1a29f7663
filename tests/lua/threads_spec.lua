-- Job threads never outlive their job: a script that fails (an error, os.exit) while a job steps
-- on its own thread (`job:start`) exits with its own exit code, never a signal, however the
-- Lua state goes away (closed with its handles collected in any order, or not closed at all);
-- `close()` and garbage collection of a started job stop its step at the next submission.
local ffi = require "ffi"
local diversity = require "diversity"
local H = require "helpers"

ffi.cdef [[
  struct diversity_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clk, struct diversity_timespec *ts);
  int getpid(void);
]]
local ts = ffi.new("struct diversity_timespec")
--- Wall-clock seconds (CLOCK_MONOTONIC); os.clock would count the job thread's CPU time too.
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

--- How many of this process's threads are job threads ("diversity-job").
local function job_threads()
  local _, out = H.sh(("cat /proc/%d/task/*/comm"):format(ffi.C.getpid()))
  local _, n = out:gsub("diversity%-job", "")
  return n
end

--- job_threads(), once the count is `n` or after a second (a new thread names itself when it
-- starts).
local function job_threads_when(n)
  local t0, k = now(), job_threads()
  while k ~= n and now() - t0 < 1 do k = job_threads() end
  return k
end

-- A child script: a small table on a validated context (the layers' own threads and teardown
-- make the race likeliest), a job stepping on its thread one step a submission, then `ending`
-- while it steps. It prints "stepping" when the job had not finished by then.
local function script(ending, before)
  return ([[
    local d = require "diversity"
    local rows, x = {}, 7
    for i = 1, 200 do
      local r = {}
      for j = 1, 32 do x = (1103515245 * x + 12345) %% 2147483648; r[j] = x / 2147483648 - 0.5 end
      rows[i] = r
    end
    local ctx = d.open { validation = true }
    local dt = ctx:upload(d.table(rows), "fp32")
    local job = dt:job({ 0, 1, 2, 3 }, { chunk = 1, mode = "scan" })
    job:start(150)
    %s
    if not job:ready() then io.write("stepping\n") end
    %s
  ]]):format(before or "", ending)
end

-- Run `src` with `luajit -e` `times` times, two at once; returns a table exit code -> count (a
-- run killed by a signal exits 128 + the signal), and how many runs printed "stepping".
local function runs(src, times)
  local rc, out, err = H.sh(("seq %d | xargs -P 2 -n 1 sh -c %s run"):format(times,
    H.q(H.lua_env() .. " luajit -e " .. H.q(src) .. " 2>/dev/null </dev/null; echo rc=$?")))
  assert.are.equal(0, rc, err)
  local codes, n = {}, 0
  for c in out:gmatch("rc=(%d+)") do
    c = tonumber(c)
    codes[c] = (codes[c] or 0) + 1
    n = n + 1
  end
  assert.are.equal(times, n, out)
  local _, stepping = out:gsub("stepping", "")
  return codes, stepping
end

local function describe_codes(codes)
  local parts = {}
  for c, k in pairs(codes) do parts[#parts + 1] = ("exit %d: %d run(s)"):format(c, k) end
  table.sort(parts)
  return table.concat(parts, ", ")
end

describe("job threads", function()
  it("an error while a job steps on its thread exits 1, never by a signal (200 runs)", function()
    local codes, stepping = runs(script('error("the script fails here")'), 200)
    assert.are.same({ [1] = 200 }, codes, describe_codes(codes))
    -- The case is exercised: in most runs the job was still stepping when the error came.
    assert.truthy(stepping >= 100, ("only %d of 200 runs were stepping at the error"):format(stepping))
  end)

  it("os.exit, a closed context, a collected job: the script's own exit code every time", function()
    local cases = {
      -- os.exit does not close the Lua state: the exit hook stops the thread.
      { 'os.exit(3)', nil, 3 },
      -- the context closed first: the job keeps its device until its thread has stopped.
      { 'error("fails")', "ctx:close(); dt:close()", 1 },
      -- the job collected while stepping (no reference left), then the error.
      { 'job = nil; collectgarbage(); collectgarbage(); error("fails")', nil, 1 },
      -- closed while stepping, then an ordinary exit.
      { 'job:close(); os.exit(0)', nil, 0 },
    }
    for _, c in ipairs(cases) do
      local codes = runs(script(c[1], c[2]), 15)
      assert.are.same({ [c[3]] = 15 }, codes, c[1] .. ": " .. describe_codes(codes))
    end
  end)

  it("close() of a started job stops its step at the next submission", function()
    local ctx = diversity.open { validation = true }
    local t = diversity.load(H.DATA_NPY)
    local dt = ctx:upload(t, "fp32")
    local starts = {}
    for i = 0, 31 do starts[#starts + 1] = i end
    -- The whole step would take minutes on lavapipe; one submission is a step.
    local job = dt:job(starts, { chunk = 1, mode = "scan" })
    job:start(t:n() - 1)
    assert.are.equal(1, job_threads_when(1))
    local t0 = now()
    job:close()
    local took = now() - t0
    assert.truthy(took < 5, ("close() took %.1f s"):format(took))
    assert.are.equal(0, job_threads(), "the thread outlived close()")
    local msg = H.error_of(job.progress, job)
    assert.truthy(msg:find("used after close()", 1, true), msg)
    -- The device is fine afterwards: a job from the same table runs.
    local again = dt:job({ 0, 1 }, { steps = 3, mode = "scan" })
    assert.are.equal(3, again:step(3))
    again:close()
    dt:close()
    assert.are.same({}, ctx:validation_messages())
    ctx:close()
  end)

  it("a started job collected while stepping is stopped and joined", function()
    local ctx = diversity.open { validation = true }
    local t = diversity.load(H.DATA_NPY)
    local dt = ctx:upload(t, "fp32")
    local job = dt:job({ 0, 1, 2, 3, 4, 5, 6, 7 }, { chunk = 1, mode = "scan" })
    job:start(t:n() - 1)
    assert.are.equal(1, job_threads_when(1))
    job = nil
    local t0 = now()
    collectgarbage()
    collectgarbage()
    local took = now() - t0
    assert.truthy(took < 5, ("collecting took %.1f s"):format(took))
    assert.are.equal(0, job_threads(), "the thread outlived its job's collection")
    dt:close()
    assert.are.same({}, ctx:validation_messages())
    ctx:close()
  end)
end)
