-- The driver's pieces: the user's tile formula from the device's L2 (with the
-- DIVERSITY_L2_BYTES override), the adaptive chunk size, and driver.run called from Lua.
local diversity = require "diversity"
local driver = require "diversity.driver"
local H = require "helpers"

describe("driver", function()
  teardown(function() H.cleanup() end)

  it("tile_size = floor(L2 × 0.85 / (dim × bytes per value))", function()
    local l2 = 5.5 * 1024 * 1024
    assert.are.equal(math.floor(l2 * 0.85 / (768 * 4)), driver.tile_size(l2, 768, "fp32"))
    assert.are.equal(math.floor(l2 * 0.85 / (768 * 2)), driver.tile_size(l2, 768, "fp16"))
    assert.are.equal(1595, driver.tile_size(l2, 768, "fp32"))
    assert.are.equal(3191, driver.tile_size(l2, 768, "fp16"))
    -- never 0 (that would mean untiled)
    assert.are.equal(1, driver.tile_size(100, 768, "fp32"))
  end)

  it("chunk = max(1, floor(target × safety / per-step time))", function()
    assert.are.equal(3, driver.chunk_size(0.25, 1.5, 0.6))
    assert.are.equal(115, driver.chunk_size(2 ^ -7, 1.5, 0.6))
    assert.are.equal(math.floor(1.5 * 0.6 / 0.01), driver.chunk_size(0.01, 1.5, 0.6))
    assert.are.equal(1, driver.chunk_size(2.0, 1.5, 0.6))
    assert.are.equal(1, driver.chunk_size(0, 1.5, 0.6))
  end)

  it("DIVERSITY_L2_BYTES overrides the device's L2", function()
    local rc, out, err = H.sh(H.lua_env() .. " DIVERSITY_L2_BYTES=123456 luajit -e " .. H.q(
      'local c = require("diversity").open{} print(c:l2_bytes(), c:caps().l2_source)'))
    assert.are.equal(0, rc, err)
    assert.are.equal("123456\tenv", out:match("^[^\n]*"))
  end)

  it("run() from Lua returns a summary and writes the cache", function()
    local dir = H.tmpdir()
    local t = diversity.table(H.random_rows(20, 8, 3))
    t:save_fp16_bin(dir .. "/t.bin", "raw", "fnv1a64:0000000000000000")
    t:close()
    local r = driver.run { embeddings = dir .. "/t.bin", out = dir .. "/o.json", batch = 6,
      top_k = 4, quiet = true, validation = true }
    assert.are.equal(20, r.n)
    assert.are.equal(8, r.dim)
    assert.are.equal(20, r.sequences)
    assert.are.equal(4, r.steps)
    assert.are.equal(4, r.batches)
    assert.are.equal(0, r.resumed_batches)
    assert.is_true(r.tile >= 1)
    local j = H.json_file(dir .. "/o.json")
    assert.are.equal(20, #j.sequences.__keys)
    assert.are.equal(6, j.metadata.batch_size)
    assert.are.equal(5, j.sequences["19"].n)
  end)

  it("the default mode is auto: gram where G fits, reported in the summary and the metadata",
    function()
      assert.are.equal("auto", driver.defaults.mode)
      local dir = H.tmpdir()
      local t = diversity.table(H.random_rows(30, 5, 4))
      t:save_fp16_bin(dir .. "/t.bin", "raw", "fnv1a64:0000000000000000")
      t:close()
      local ctx = diversity.open {}
      local want, why = ctx:mode_for(30, 5, "fp16")
      ctx:close()
      local r = driver.run { embeddings = dir .. "/t.bin", out = dir .. "/o.json", quiet = true }
      assert.are.equal(want, r.mode)
      assert.are.equal(why, r.mode_reason)
      assert.are.equal("gram", r.mode) -- lavapipe: G of 30 rows fits
      assert.are.equal(1, r.batches) -- a gram batch holds every sequence that fits
      local j = H.json_file(dir .. "/o.json")
      assert.are.equal("gram", j.metadata.mode)
      assert.are.equal(30, j.metadata.batch_size)
      assert.are.equal(30, j.sequences["7"].n)
      r = driver.run { embeddings = dir .. "/t.bin", out = dir .. "/s.json", quiet = true,
        mode = "scan" }
      assert.are.equal("scan", r.mode)
      assert.are.equal(3584, H.json_file(dir .. "/s.json").metadata.batch_size)
      assert.are.equal("scan", H.json_file(dir .. "/s.json").metadata.mode)
      -- a bad mode is refused before anything is written
      local ok, e = pcall(driver.run, { embeddings = dir .. "/t.bin", out = dir .. "/b.json",
        quiet = true, mode = "bogus" })
      assert.is_false(ok)
      assert.truthy(H.message(e):find("--mode bogus: expected scan, gram or auto", 1, true),
        H.message(e))
      assert.is_false(H.exists(dir .. "/b.json"))
      assert.are.same({}, H.temp_files(dir, "b.json"))
    end)

  it("run() errors are plain messages naming the cause", function()
    local dir = H.tmpdir()
    local ok, e = pcall(driver.run, { embeddings = dir .. "/none.npy", out = dir .. "/o.json",
      quiet = true })
    assert.is_false(ok)
    assert.truthy(H.message(e):find("none.npy", 1, true), H.message(e))
    ok, e = pcall(driver.run, { embeddings = dir .. "/none.npy" })
    assert.is_false(ok)
    assert.truthy(H.message(e):find("--out", 1, true), H.message(e))
    collectgarbage("collect")
    assert.are.same({}, H.ls(dir))
  end)

  it("run() takes switches as booleans and counts as finite numbers, refused up front", function()
    -- The string "false" was taken for true (Lua's truthiness); an infinite batch passed.
    local dir = H.tmpdir()
    for _, case in ipairs({
      { "center", "false", "center must be a boolean (true or false), got string false" },
      { "validation", "false", "validation must be a boolean" },
      { "quiet", 0, "quiet must be a boolean" },
      { "judge", "no", "judge must be a boolean" },
      { "batch", math.huge, "--batch must be a finite integer" },
      { "top_k", math.huge, "--top-k must be a finite integer" },
    }) do
      local opts = { embeddings = dir .. "/none.npy", out = dir .. "/o.json" }
      opts[case[1]] = case[2]
      local ok, e = pcall(driver.run, opts)
      assert.is_false(ok)
      assert.truthy(H.message(e):find(case[3], 1, true), H.message(e))
    end
    assert.are.same({}, H.ls(dir))
  end)
end)
