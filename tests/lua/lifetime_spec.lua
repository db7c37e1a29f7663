-- Object lifetimes: every object has close(); any method after
-- close() is a clean error "… used after close()"; close() twice is fine; garbage collection in
-- any order frees everything without a crash; objects work from inside coroutines.
local ffi = require "ffi"
local diversity = require "diversity"
local H = require "helpers"

describe("lifetimes", function()
  local ctx, dir
  H.context_for(setup, teardown, function(c, d) ctx, dir = c, d end)

  local function small_table()
    return diversity.table(H.random_rows(8, 5, 31))
  end

  local function finished_job()
    local t = small_table()
    local dt = ctx:upload(t, "fp32")
    local job = dt:job({ 0, 1 })
    job:step(10)
    return job, dt, t
  end

  -- Close `obj`, check every method call then fails with "used after close()", and that close()
  -- again is fine.
  local function check_closed(obj, calls)
    obj:close()
    for name, args in pairs(calls) do
      local m = obj[name]
      assert.is_function(m, "no method " .. name)
      local msg = H.error_of(m, obj, unpack(args))
      assert.truthy(msg:find("used after close()", 1, true),
        ("%s after close(): %q"):format(name, msg))
      assert.truthy(msg:find("^diversity%."), msg)
    end
    obj:close()
    obj:close()
  end

  it("context", function()
    local c = diversity.open { validation = true }
    local t = small_table()
    check_closed(c, {
      describe = {}, name = {}, l2_bytes = {}, caps = {}, validation_messages = {},
      upload = { t, "fp32" },
    })
  end)

  it("table", function()
    local t = small_table()
    check_closed(t, {
      n = {}, dim = {}, ids = {}, with_ids = { { 1, 2, 3, 4, 5, 6, 7, 8 } },
      check_sequence = { 0, { 0, 1, 2, 3, 4, 5, 6, 7 } }, centered = {}, head = { 2 },
      row = { 0 }, save_fp16_bin = { dir .. "/closed.bin", "raw", "x" },
    })
    assert.is_false(H.exists(dir .. "/closed.bin"))
    -- a closed table cannot be uploaded
    H.assert_error({ "context:upload", "table used after close()" }, ctx.upload, ctx, t, "fp32")
  end)

  it("device table", function()
    local t = small_table()
    local dt = ctx:upload(t, "fp16")
    check_closed(dt, { n = {}, dim = {}, precision = {}, job = { { 0 } } })
  end)

  it("job", function()
    local job = finished_job()
    local buf = ffi.new("uint32_t[?]", 16)
    check_closed(job, {
      step = { 1 }, set_chunk = { 1 }, done = {}, progress = {}, gpu_ns = {}, batch_size = {},
      sequence_len = {}, starts = {}, sequences = {}, sequences_bytes = {},
      download = { buf },
    })
  end)

  it("json cache writer (and a closed job handed to a writer)", function()
    local job = finished_job()
    local w = diversity.json_cache_writer(dir .. "/c.json", { model = "m" })
    check_closed(w, {
      write_job = { job }, write = { 0, { 0, 1 } },
      write_bytes = { { 0 }, ("\0"):rep(8), 2 }, finish = {},
    })
    assert.is_false(H.exists(dir .. "/c.json"))
    assert.are.same({}, H.temp_files(dir, "c.json"))
    local w2 = diversity.json_cache_writer(dir .. "/c2.json", {})
    job:close()
    H.assert_error({ "json_cache:write_job", "job used after close()" }, w2.write_job, w2, job)
    w2:close()
    assert.are.same({}, H.temp_files(dir, "c2.json"))
  end)

  it("binary cache writer", function()
    local job = finished_job()
    local w = diversity.binary_cache_writer(dir .. "/c.bin", 8, 8)
    check_closed(w, {
      write_job = { job }, write = { 0, { 0, 1, 2, 3, 4, 5, 6, 7 } },
      write_bytes = { { 0 }, ("\0"):rep(32), 8 }, finish = {},
    })
    assert.is_false(H.exists(dir .. "/c.bin"))
    assert.are.same({}, H.temp_files(dir, "c.bin"))
  end)

  it("finish() closes a writer", function()
    local w = diversity.binary_cache_writer(dir .. "/f.bin", 1, 1)
    w:write(0, { 0 })
    w:finish()
    H.assert_error("used after close()", w.write, w, 0, { 0 })
    H.assert_error("used after close()", w.finish, w)
    w:close()
    local j = diversity.json_cache_writer(dir .. "/f.json", {})
    j:finish()
    H.assert_error("used after close()", j.write, j, 0, { 0 })
    j:close()
  end)

  it("binary cache", function()
    local w = diversity.binary_cache_writer(dir .. "/r.bin", 2, 2)
    w:write(0, { 0, 1 })
    w:write(1, { 1, 0 })
    w:finish()
    local c = diversity.open_binary_cache(dir .. "/r.bin")
    assert.are.same({ 1, 0 }, c:sequence(1))
    check_closed(c, { n = {}, len = {}, sequence = { 0 } })
  end)

  it("objects outlive a closed parent: a table closed after upload, a context closed under a job",
    function()
      local c = diversity.open { validation = true }
      local t = small_table()
      local ref = H.sequences(ctx:upload(t, "fp32"), { 0, 3 })
      local dt = c:upload(t, "fp32")
      t:close()
      local job = dt:job({ 0, 3 })
      c:close()
      -- the job (and the device table) keep the device alive, or fail cleanly
      local ok, e = pcall(function()
        job:step(2)
        job:step(100)
        return job:sequences()
      end)
      if ok then
        assert.is_nil(H.diff_rows(ref, e))
      else
        assert.truthy(H.message(e):find("^diversity%.job:"), H.message(e))
      end
      local ok2, e2 = pcall(dt.job, dt, { 1 })
      if not ok2 then
        assert.truthy(H.message(e2):find("^diversity%.device_table:job"), H.message(e2))
      end
      job:close(); dt:close()
      collectgarbage("collect")
      collectgarbage("collect")
    end)

  -- Runs in a child LuaJIT so that a crash is a failed test, not a dead test run.
  it("garbage collection in every order frees everything without a crash", function()
    local script = dir .. "/gc_orders.lua"
    H.write(script, [[
local diversity = require "diversity"
local ffi = require "ffi"
local rows = {}
for i = 1, 12 do rows[i] = {} for j = 1, 6 do rows[i][j] = math.sin(i * 7 + j * 3) end end
local names = { "ctx", "t", "dt", "job", "w", "bw" }
local function perms(a, n, out)
  n = n or #a; out = out or {}
  if n <= 1 then out[#out + 1] = { unpack(a) } return out end
  for i = 1, n do
    a[i], a[n] = a[n], a[i]
    perms(a, n - 1, out)
    a[i], a[n] = a[n], a[i]
  end
  return out
end
local dir = arg[1]
local orders = perms({ 1, 2, 3, 4, 5, 6 })
local used = 0
for k = 1, #orders, 37 do  -- 20 of the 720 orders, spread out
  local order = orders[k]
  local o = {}
  o.ctx = diversity.open { validation = true }
  o.t = diversity.table(rows)
  o.dt = o.ctx:upload(o.t, (k % 2 == 0) and "fp16" or "fp32")
  o.job = o.dt:job({ 0, 5, 11 }, { chunk = 2 })
  o.job:step(3)
  o.w = diversity.json_cache_writer(dir .. "/gc-" .. k .. ".json", { k = k })
  o.bw = diversity.binary_cache_writer(dir .. "/gc-" .. k .. ".bin", 12, 12)
  for _, i in ipairs(order) do
    local name = names[i]
    if k % 3 == 0 then o[name]:close() end   -- close() then drop ...
    o[name] = nil                             -- ... or just drop
    collectgarbage("collect")
    -- whatever is still alive keeps working, or fails cleanly
    if o.job then
      local ok, e = pcall(o.job.step, o.job, 1)
      if not ok and not diversity.message(e):find("^diversity%.job:step") then
        error("unclean error: " .. tostring(e))
      end
      if ok then used = used + 1 end
    end
    if o.dt then
      local ok, e = pcall(o.dt.job, o.dt, { 1 })
      if not ok and not diversity.message(e):find("^diversity%.device_table:job") then
        error("unclean error: " .. tostring(e))
      end
    end
  end
  collectgarbage("collect")
  collectgarbage("collect")
end
-- closing the context first, then using everything made from it
for k = 1, 3 do
  local ctx = diversity.open { validation = true }
  local t = diversity.table(rows)
  local dt = ctx:upload(t, "fp32")
  local job = dt:job(nil, { chunk = 3 })
  job:step(2)
  ctx:close(); ctx = nil
  collectgarbage("collect")
  local ok, e = pcall(function()
    job:step(100)
    local s = job:sequences()
    assert(#s == 12 and #s[1] == 12, "wrong shape")
    local dt2 = dt:job({ 4 })
    dt2:step(100)
    return true
  end)
  if not ok and not tostring(diversity.message(e)):find("^diversity%.") then
    error("unclean error after ctx:close(): " .. tostring(e))
  end
  if k == 1 then t = nil elseif k == 2 then dt = nil else job = nil end
  collectgarbage("collect")
  t, dt, job = nil, nil, nil
  collectgarbage("collect")
end
print("ok " .. used)
]])
    local rc, out, err = H.sh(H.lua_env() .. " luajit " .. H.q(script) .. " " .. H.q(dir))
    assert.are.equal(0, rc, "child exited with " .. tostring(rc) .. ": " .. err)
    assert.truthy(out:find("^ok"), out .. err)
    -- unfinished writers that were collected left no files and no temporary files
    for _, name in ipairs(H.ls(dir)) do
      assert.falsy(name:find("^gc%-"), "left behind: " .. name)
      assert.falsy(name:find("^%.gc%-"), "left behind: " .. name)
    end
  end)

  it("a loop of context → table → upload → job → step, dropped in turns, in this process",
    function()
      local rows = H.random_rows(10, 6, 71)
      for k = 1, 6 do
        local c = diversity.open { validation = true }
        local t = diversity.table(rows)
        local dt = c:upload(t, "fp32")
        local job = dt:job({ 0, 9 })
        job:step(4)
        if k % 3 == 0 then c:close(); c = nil end
        if k % 3 == 1 then t = nil; job = nil end
        if k % 3 == 2 then dt = nil; c = nil end
        collectgarbage("collect")
        if job then
          local ok, e = pcall(job.step, job, 100)
          if ok then
            assert.is_true(job:done())
          else
            assert.truthy(H.message(e):find("^diversity%.job:step"), H.message(e))
          end
        end
        c, t, dt, job = nil, nil, nil, nil
        collectgarbage("collect")
        collectgarbage("collect")
      end
    end)

  it("works from inside a coroutine", function()
    local t = small_table()
    local ref = H.sequences(ctx:upload(t, "fp32"), { 2, 7 })
    local co = coroutine.wrap(function()
      local tt = diversity.table(H.random_rows(8, 5, 31)) -- the same rows
      local dt = ctx:upload(tt, "fp32")
      local job = dt:job({ 2, 7 }, { chunk = 1 })
      local steps = 0
      while not job:done() do
        steps = steps + job:step(2)
        coroutine.yield(steps)
      end
      local msg = H.error_of(job.step, job, -1)
      coroutine.yield(msg)
      return job:sequences()
    end)
    local last
    for _ = 1, 10 do
      last = co()
      if type(last) == "string" then break end
      collectgarbage("collect")
    end
    assert.truthy(last:find("negative", 1, true), last)
    assert.is_nil(H.diff_rows(ref, co()))
  end)

  it("a coroutine that opens its own context", function()
    local co = coroutine.create(function()
      local c = diversity.open { validation = true }
      coroutine.yield(c:name())
      local dt = c:upload(diversity.table({ { 1, 0 }, { 0, 1 }, { 1, 1 } }), "fp32")
      local job = dt:job()
      job:step(5)
      local s = job:sequences()
      local msgs = #c:validation_messages()
      c:close()
      return s, msgs
    end)
    local ok, name = coroutine.resume(co)
    assert.is_true(ok, tostring(name))
    assert.are.equal(ctx:name(), name)
    collectgarbage("collect")
    local ok2, s, msgs = coroutine.resume(co)
    assert.is_true(ok2, tostring(s))
    assert.are.same({ { 0, 1, 2 }, { 1, 0, 2 }, { 2, 0, 1 } }, s)
    assert.are.equal(0, msgs)
  end)

  H.it_left_no_validation(it, function() return ctx end)
end)
