-- The native CPU engine as a user without a GPU meets it: chosen by default where the best
-- Vulkan device is a CPU (the other specs name lavapipe, DIVERSITY_DEVICE=llvmpipe, so that
-- every shader runs there), named in describe(), the summary line and the metadata; its
-- sequences checked against the float64 oracle; resume after a lost slice and shards merged
-- byte-identical to one shot; the same cache format as the device engine's; the shim and the
-- C ABI's batch path on it.
local diversity = require "diversity"
local H = require "helpers"

local EPOCH = "SOURCE_DATE_EPOCH=1700000000"
-- No device named: the default choice.
local DEFAULT = "DIVERSITY_DEVICE="

-- Whether the best device here is a CPU device (then the default is the host engine).
local function cpu_only()
  for _, d in ipairs(diversity.devices()) do
    if d.type:lower() ~= "cpu" then return false end
  end
  return true
end

describe("host engine", function()
  local dir, t
  H.fortunes_fixture(setup, teardown, 160, function(d, _, tt) dir, t = d, tt end)

  it("is named host or chosen by default on a CPU-only machine; lavapipe stays selectable", function()
    local h = diversity.open { device = "host" }
    assert.are.equal("host", h:engine())
    assert.truthy(h:name():find("(host engine)", 1, true), h:name())
    assert.truthy(h:describe():find("^sequences: +.*%(host engine%)"), h:describe())
    assert.are.equal("host", h:caps().engine)
    assert.truthy(h:caps().device_name ~= h:caps().name)
    h:close()
    local lp = diversity.open { device = "llvmpipe" }
    assert.are.equal("device", lp:engine())
    assert.falsy(lp:name():find("host engine", 1, true))
    lp:close()
    local rc, out, err = H.sh(("%s %s luajit -e %s"):format(H.lua_env(), DEFAULT,
      H.q('local c = require("diversity").open{}; io.write(c:engine(), "|", c:name())')))
    assert.are.equal(0, rc, err)
    if cpu_only() then
      assert.truthy(out:find("^host|.*%(host engine%)"), out)
    else
      assert.truthy(out:find("^device|"), out)
    end
  end)

  it("runs a job through the Lua API with the device engine's methods", function()
    local h = diversity.open { device = "host" }
    local dt = h:upload(t, "fp16")
    local job = dt:job({ 0, 5, 17 }, { chunk = 7 })
    assert.are.equal("host", job:engine())
    assert.are.equal("gram", job:mode())
    assert.is_nil(job:placement())
    job:step(160)
    assert.is_true(job:done())
    local rows = job:sequences()
    for i, s in ipairs({ 0, 5, 17 }) do
      assert.is_true(t:check_sequence(s, rows[i], 1e-5, "fp16") >= 0)
    end
    -- The scan on the host (named): the float64 definition, the same picks here.
    local sj = dt:job({ 0, 5, 17 }, { mode = "scan" })
    assert.are.equal("scan", sj:mode())
    sj:step(160)
    assert.are.same(rows, sj:sequences())
    job:close(); sj:close(); dt:close(); h:close()
  end)

  it("the command line names it and writes the device engine's format; sequences meet the oracle", function()
    local rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/h.json",
      "--binary", dir .. "/h.bin", "--center", "--precision", "fp16", "--quiet" },
      EPOCH .. " DIVERSITY_DEVICE=host")
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("(host engine): gram mode, 160 sequences", 1, true), out)
    assert.truthy(out:find(", CPU [%d.]+ s"), out)
    local meta = diversity.cache_metadata(dir .. "/h.json")
    assert.truthy(meta.device:find("(host engine)", 1, true), meta.device)
    assert.truthy(meta.summation:find("^host: "), meta.summation)
    assert.are.equal("gram", meta.mode)
    -- The same run on lavapipe: the same keys and format, metadata differing only where the
    -- engine is named; sequences the same but at ε-near-ties.
    rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/l.json",
      "--binary", dir .. "/l.bin", "--center", "--precision", "fp16", "--quiet" },
      EPOCH .. " DIVERSITY_DEVICE=llvmpipe")
    assert.are.equal(0, rc, err)
    local a, b = H.json_file(dir .. "/h.json"), H.json_file(dir .. "/l.json")
    assert.are.same(a.sequences.__keys, b.sequences.__keys)
    for _, k in ipairs(a.metadata.__keys) do
      if k ~= "device" and k ~= "summation" then
        assert.are.same(b.metadata[k], a.metadata[k], k)
      end
    end
    local ct = t:centered()
    local hb, lb = diversity.open_binary_cache(dir .. "/h.bin"), diversity.open_binary_cache(dir .. "/l.bin")
    local same = 0
    for s = 0, 159 do
      local hs, ls = hb:sequence(s), lb:sequence(s)
      local zero = {}
      for i = 1, #hs do zero[i] = hs[i] end
      assert.is_true(ct:check_sequence(s, zero, 1e-5, "fp16") >= 0)
      if table.concat(hs, ",") == table.concat(ls, ",") then same = same + 1 end
    end
    -- Where they differ, both are within ε (checked above for the host; the lavapipe engine's own
    -- specs check it); on this table most sequences agree whole.
    assert.is_true(same >= 100, ("only %d of 160 sequences agree"):format(same))
    hb:close(); lb:close(); ct:close()
  end)

  it("a lost slice and --resume give the one-shot bytes; shards merge to them too", function()
    local base = { "--embeddings", dir .. "/e.json", "--center", "--precision", "fp16", "--quiet",
      "--chunk", "20", "--batch", "64" }
    local function args(out, extra)
      local a = {}
      for _, x in ipairs(base) do a[#a + 1] = x end
      a[#a + 1] = "--out"; a[#a + 1] = dir .. "/" .. out
      return H.extend(a, extra)
    end
    local env = EPOCH .. " DIVERSITY_DEVICE=host"
    local rc, _, err = H.cli(args("one.json"), env)
    assert.are.equal(0, rc, err)
    local one = H.read(dir .. "/one.json")
    rc = H.cli(args("r.json"), env .. " " .. diversity.ENV_FAIL_AFTER_CHUNKS .. "=5")
    assert.are_not.equal(0, rc, "the injected loss did not fail the run")
    assert.is_true(H.exists(dir .. "/r.json.partial"))
    rc, _, err = H.cli(args("r.json", { "--resume" }), env)
    assert.are.equal(0, rc, err)
    assert.are.equal(one, H.read(dir .. "/r.json"), "resumed cache differs from one shot")
    for i = 1, 2 do
      rc, _, err = H.cli(args("s" .. i .. ".json", { "--shard", i .. "/2" }), env)
      assert.are.equal(0, rc, err)
    end
    rc, _, err = H.cli({ "merge", "--out", dir .. "/m.json", dir .. "/s2.json", dir .. "/s1.json" })
    assert.are.equal(0, rc, err)
    assert.are.equal(one, H.read(dir .. "/m.json"), "merged shards differ from one shot")
    -- A checkpoint of a device engine is not resumed by the host engine (other arithmetic).
    rc = H.cli(args("x.json"), EPOCH .. " DIVERSITY_DEVICE=llvmpipe " .. diversity.ENV_FAIL_AFTER_CHUNKS .. "=3")
    assert.are_not.equal(0, rc)
    local out2
    rc, out2, err = H.cli(args("x.json", { "--resume" }), env)
    assert.are_not.equal(0, rc, out2)
    assert.truthy(err:find("summation", 1, true), err)
  end)

  it("with no Vulkan device at all, the module loads and sequences run on the host engine", function()
    -- The loader finds only a driver that does not exist: no device on this machine.
    local icd = dir .. "/none.json"
    H.write(icd, '{"file_format_version": "1.0.0", "ICD": {"library_path": '
      .. '"/nonexistent/libnone.so", "api_version": "1.2.0"}}')
    local env = ("VK_ICD_FILENAMES=%s VK_DRIVER_FILES=%s DIVERSITY_DEVICE= "):format(H.q(icd), H.q(icd))
    local rc, out, err = H.sh(("%s %s luajit -e %s"):format(H.lua_env(), env, H.q([[
      local diversity = require "diversity"
      assert(#diversity.devices() == 0, "devices listed on a machine without Vulkan")
      local ctx = diversity.open {}
      io.write(ctx:engine(), "|", ctx:describe():match("device: +([^\n]*)"), "|")
      local t = diversity.load("data/fortunes-300.embeddings.json"):head(50)
      local dt = ctx:upload(t, "fp16")
      local job = dt:job({ 3 })
      job:step(49)
      io.write(job:engine(), " ", tostring(job:done()), "|")
      io.write(string.format("%.3g|", t:check_sequence(3, job:sequences()[1], 1e-5, "fp16")))
      local ok, e = pcall(dt.knn, dt, t, { k = 3 })
      io.write(tostring(ok), "|", tostring(e))
    ]])))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("^host|none %(no Vulkan loader, driver or device"), out)
    assert.truthy(out:find("|host true|", 1, true), out)
    assert.truthy(out:find("|false|.*no Vulkan device: none on this machine"), out)
    -- The command line, end to end, and a named device is still refused.
    rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/nv.json", "--quiet" },
      EPOCH .. " " .. env)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("(host engine): gram mode, 160 sequences", 1, true), out)
    rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/nv2.json",
      "--device", "llvmpipe", "--quiet" }, EPOCH .. " " .. env)
    assert.are_not.equal(0, rc, out)
    assert.truthy(err:find("no Vulkan device", 1, true), err)
    assert.is_false(H.exists(dir .. "/nv2.json"))
  end)

  it("the shim runs batches on it and says so", function()
    local rc, out, err = H.sh(("%s DIVERSITY_DEVICE=host luajit -e %s"):format(H.lua_env(), H.q([[
      local ffi = require "ffi"
      local vk = require "vk_compute"
      local diversity = require "diversity"
      local t = diversity.load(arg and arg[1] or "data/fortunes-300.embeddings.json"):head(120)
      local ctx = vk.init(false)
      local n, d = 120, t:dim()
      local emb = ffi.new("uint16_t[?]", n * d)
      local f = ffi.new("float[?]", n * d)
      for i = 0, n - 1 do
        local row = t:row(i)
        for j = 0, d - 1 do f[i * d + j] = row[j + 1] end
      end
      vk.fp32_to_fp16(f, emb, n * d)
      local starts = ffi.new("uint32_t[3]", { 0, 7, 99 })
      local b = vk.batch_init(ctx, emb, n, d, 3, starts)
      vk.batch_compute_chunk(b, 1, n - 1, 0)
      local out = ffi.new("uint32_t[?]", 3 * n)
      vk.batch_download_sequences(b, out)
      io.write(vk.batch_engine(b), "|")
      for k = 0, 2 do
        local seq = {}
        for i = 0, n - 1 do seq[#seq + 1] = out[k * n + i] end
        io.write(string.format("%.3g;", t:check_sequence(({0, 7, 99})[k + 1], seq, 1e-5, "fp16")))
      end
      vk.batch_destroy(b)
    ]])))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("^host gram|"), out)
  end)
end)
