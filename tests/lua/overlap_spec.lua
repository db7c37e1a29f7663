-- The driver's host work (checkpoint files, the binary and JSON writers) runs as tasks while the
-- device computes: the outputs are the bytes of a run that wrote each batch at once, whatever
-- the slice size; a writer failing mid-run stops the run with the checkpoint kept, and
-- --resume then finishes without computing again.
local diversity = require "diversity"
local driver = require "diversity.driver"
local H = require "helpers"

local function body(s) return (s:gsub('"generated_at":"[^"]*"', "")) end

describe("host work beside the device", function()
  local dir
  setup(function()
    dir = H.tmpdir()
    H.first_fortunes(dir .. "/e.json", 90)
  end)
  teardown(function() H.cleanup() end)

  local function run(name, extra)
    local o = { embeddings = dir .. "/e.json", out = dir .. "/" .. name .. ".json",
      binary = dir .. "/" .. name .. ".bin", top_k = 20, batch = 25, quiet = true,
      target_s = 0.000001, center = true }
    for k, v in pairs(extra or {}) do o[k] = v end
    return driver.run(o)
  end

  it("diversity.rows: what job:columns gives, reused; the writers take row ranges of it", function()
    local ctx = diversity.open {}
    local t = diversity.load(dir .. "/e.json")
    local dt = ctx:upload(t, "fp32")
    local job = dt:job({ 3, 1, 4, 15, 9 }, { mode = "gram", steps = 12 })
    job:step(12)
    local r = diversity.rows()
    job:columns_into(r, 0, 13)
    assert.are.equal(5, r:count()); assert.are.equal(13, r:len())
    local whole = job:columns(0, 13)
    assert.are.equal(whole, r:bytes())
    assert.are.equal(diversity.checksum(whole), r:checksum())
    assert.are.equal(diversity.words_checksum(whole), r:words_checksum())
    assert.are_not.equal(diversity.words_checksum(whole), diversity.words_checksum(whole .. "\0"))
    job:columns_into(r, 4, 9) -- reused, smaller
    assert.are.equal(job:columns(4, 9), r:bytes())
    H.assert_error({ "job:columns_into", "columns 9..14" }, job.columns_into, job, r, 9, 14)
    job:columns_into(r, 0, 13)
    local a = diversity.json_cache_writer(dir .. "/rows-a.json", { model = "m" }, t:ids())
    local b = diversity.json_cache_writer(dir .. "/rows-b.json", { model = "m" }, t:ids())
    a:write_bytes({ 3, 1, 4, 15, 9 }, whole, 13); a:finish()
    b:write_rows({ 3, 1 }, r, 0); b:write_rows({ 4, 15, 9 }, r, 2)
    H.assert_error({ "json_cache:write_rows", "rows 3..6 of a buffer of 5 rows" }, b.write_rows, b,
      { 4, 15, 9 }, r, 3)
    b:finish()
    assert.are.equal(H.read(dir .. "/rows-a.json"), H.read(dir .. "/rows-b.json"))
    job:close(); dt:close(); t:close(); ctx:close()
  end)

  it("slices of any size give the same bytes; --verbose phases are reported", function()
    local saved = driver.SLICE_BYTES
    local r = run("whole")
    assert.is_true(r.phases.s["json"] > 0 and r.phases.s["checkpoint"] > 0, r.phases:line())
    driver.SLICE_BYTES = 3 * 21 * 4 -- three rows a slice: 9 slices a batch of 25
    local ok, e = pcall(run, "sliced")
    driver.SLICE_BYTES = saved
    assert(ok, e)
    assert.are.equal(body(H.read(dir .. "/whole.json")), body(H.read(dir .. "/sliced.json")))
    assert.are.equal(H.read(dir .. "/whole.bin"), H.read(dir .. "/sliced.bin"))
  end)

  it("a batch of more rows than LuaJIT unpacks at once (8,200 short rows)", function()
    local ffi = require "ffi"
    local n, d = 8200, 4
    local v = ffi.new("float[?]", n * d)
    local x = 7
    for i = 0, n * d - 1 do
      x = (x * 1103515245 + 12345) % 2147483648
      v[i] = x / 2147483648 - 0.5
    end
    local path = dir .. "/short.f32"
    local f = assert(io.open(path, "wb"))
    f:write(ffi.string(v, n * d * 4)); f:close()
    local r = driver.run({ embeddings = path, dim = d, out = dir .. "/short.json",
      binary = dir .. "/short.bin", top_k = 2, batch = n, mode = "scan", quiet = true,
      precision = "fp32" })
    assert.are.equal(1, r.batches)
    local c = diversity.open_binary_cache(dir .. "/short.bin")
    assert.are.equal(n, c:n())
    assert.are.equal(8199, c:sequence(8199)[1])
    c:close()
  end)

  it("a writer failing mid-run keeps the checkpoint; --resume computes nothing again", function()
    local real = diversity.json_cache_writer
    local calls = 0
    diversity.json_cache_writer = function(...)
      local w = real(...)
      local function failing(name)
        return function(_, ...)
          calls = calls + 1
          if calls == 2 then error("diversity.json_cache_writer: No space left on device (injected)", 0) end
          return w[name](w, ...)
        end
      end
      return setmetatable({ write_bytes = failing("write_bytes"), write_rows = failing("write_rows") },
        { __index = function(_, k) return function(_, ...) return w[k](w, ...) end end })
    end
    local ok, e = pcall(run, "cut")
    diversity.json_cache_writer = real
    assert.is_false(ok)
    e = diversity.message(e)
    assert.truthy(e:find("writing the outputs failed", 1, true), e)
    assert.truthy(e:find("No space left on device", 1, true), e)
    assert.truthy(e:find("--resume", 1, true), e)
    assert.is_false(H.exists(dir .. "/cut.json"))
    assert.are.same({}, H.temp_files(dir, "cut.json"))
    -- Any submission now fails: what the device computed before the failure is checkpointed.
    local a = { "--embeddings", dir .. "/e.json", "--out", dir .. "/cut.json", "--binary",
      dir .. "/cut.bin", "--top-k", "20", "--batch", "25", "--center", "--resume" }
    local rc, out, err = H.cli(a, "DIVERSITY_FAIL_AFTER_CHUNKS=0")
    if rc ~= 0 then
      -- The failure stopped the device mid-batch: the rest is computed, from the checkpoint.
      rc, out, err = H.cli(a)
    end
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("from the checkpoint", 1, true), out)
    local want = run("again")
    assert.is_not_nil(want)
    assert.are.equal(body(H.read(dir .. "/again.json")), body(H.read(dir .. "/cut.json")))
    assert.are.equal(H.read(dir .. "/again.bin"), H.read(dir .. "/cut.bin"))
  end)
end)
