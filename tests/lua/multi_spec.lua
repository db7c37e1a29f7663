-- Several devices: the driver replicates the table on every device of --devices and
-- shares the batches out as devices become free. Tested with one device opened twice (two
-- logical devices, the same lavapipe): the output must be the same bytes as a one-device run, a
-- device failing mid-run must be named and leave a checkpoint that --resume (on any number of
-- devices) completes byte for byte, and bad device lists are refused before anything is written.
local H = require "helpers"
local diversity = require "diversity"

local EPOCH = "SOURCE_DATE_EPOCH=1700000000"

-- Every context of `ctxs` has no validation messages; each is closed.
local function close_clean(ctxs)
  for _, ctx in ipairs(ctxs) do
    assert.are.same({}, ctx:validation_messages())
    ctx:close()
  end
end

describe("several devices", function()
  local dir, starts
  local N = 120

  setup(function()
    dir = H.tmpdir()
    H.first_fortunes(dir .. "/e.json", N)
    starts = H.start_list(N)
  end)

  teardown(function() H.cleanup() end)

  local function args(name, mode, extra)
    local a = { "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. name .. ".json",
      "--top-k", "12", "--batch", "20", "--starts", starts, "--binary",
      dir .. "/" .. name .. ".bin", "--mode", mode }
    return H.extend(a, extra)
  end

  for _, mode in ipairs { "scan", "gram" } do
    describe("--mode " .. mode, function()
      it("two logical devices write the same bytes as one", function()
        local rc, out, err = H.cli(args(mode .. "-one", mode), EPOCH)
        assert.are.equal(0, rc, err)
        rc, out, err = H.cli(args(mode .. "-two", mode, { "--devices", "0,0" }), EPOCH)
        assert.are.equal(0, rc, err)
        assert.truthy(out:find("(2 devices)", 1, true), out)
        assert.truthy(out:find(mode .. " mode", 1, true), out)
        assert.truthy(err:find("dev2", 1, true), "no per-device progress: " .. err)
        assert.are.equal(H.read(dir .. "/" .. mode .. "-one.json"), H.read(dir .. "/" .. mode .. "-two.json"))
        assert.are.equal(H.read(dir .. "/" .. mode .. "-one.bin"), H.read(dir .. "/" .. mode .. "-two.bin"))
        -- three logical devices, the default batch (shared out, about four a device): the same
        -- sequences; only the metadata's batch_size differs
        rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. mode .. "-three.json",
          "--top-k", "12", "--starts", starts, "--mode", mode, "--devices", "0,0,0" }, EPOCH)
        assert.are.equal(0, rc, err)
        local a = H.json_file(dir .. "/" .. mode .. "-one.json")
        local b = H.json_file(dir .. "/" .. mode .. "-three.json")
        assert.are.same(a.sequences, b.sequences)
        assert.are.equal(10, b.metadata.batch_size)
      end)

      it("a device failing mid-run is named and --resume completes it byte for byte", function()
        local rc, out, err = H.cli(args(mode .. "-ref", mode), EPOCH)
        assert.are.equal(0, rc, err)
        -- the 5th submission (of either device) reports device loss
        rc, out, err = H.cli(args(mode .. "-cut", mode, { "--devices", "0,0" }),
          EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=4")
        assert.are.equal(1, rc, "the injected loss did not fail the run: " .. out .. err)
        assert.truthy(err:find("device lost", 1, true), err)
        assert.truthy(err:match("on device [12] of 2 %("), err)
        assert.truthy(err:find("--resume", 1, true), err)
        assert.falsy(err:find("stack traceback", 1, true), err)
        assert.is_true(H.exists(dir .. "/" .. mode .. "-cut.json.partial"))
        assert.is_false(H.exists(dir .. "/" .. mode .. "-cut.json"))
        assert.are.same({}, H.temp_files(dir, mode .. "-cut.json"))
        -- resumed on one device (any device count continues a checkpoint)
        rc, out, err = H.cli(args(mode .. "-cut", mode, { "--resume" }), "SOURCE_DATE_EPOCH=1800000000")
        assert.are.equal(0, rc, err)
        assert.truthy(out:find("from the checkpoint", 1, true), out)
        assert.are.equal(H.read(dir .. "/" .. mode .. "-ref.json"), H.read(dir .. "/" .. mode .. "-cut.json"))
        assert.are.equal(H.read(dir .. "/" .. mode .. "-ref.bin"), H.read(dir .. "/" .. mode .. "-cut.bin"))
        assert.is_false(H.exists(dir .. "/" .. mode .. "-cut.json.partial"))
      end)
    end)
  end

  it("refuses a bad device list before writing anything", function()
    for _, case in ipairs {
      { "0,,0", "item 1 is empty" },
      { "99", "--devices 99: device list '99': index 99 is out of range" },
      { "no-such-device", "no device name contains 'no-such-device'" },
    } do
      local rc, out, err = H.cli(args("bad", "scan", { "--devices", case[1] }), EPOCH)
      assert.are.equal(1, rc, out .. err)
      assert.truthy(err:find(case[2], 1, true), err)
      assert.falsy(err:find("stack traceback", 1, true), err)
      assert.is_false(H.exists(dir .. "/bad.json"))
      assert.is_false(H.exists(dir .. "/bad.bin"))
      assert.are.same({}, H.temp_files(dir, "bad.json"))
      assert.is_false(H.exists(dir .. "/bad.json.partial"))
    end
  end)

  it("job:start steps on a thread; wait, ready and wait_any report it", function()
    local ctxs = { diversity.open { device = "0", validation = true },
      diversity.open { device = "0", validation = true } }
    local t = diversity.load(dir .. "/e.json")
    local jobs, want = {}, {}
    for i, ctx in ipairs(ctxs) do
      local dt = ctx:upload(t, "fp32")
      want[i] = dt:job({ i, i + 1 }, { steps = 6, mode = "scan" })
      want[i]:step(6)
      jobs[i] = dt:job({ i, i + 1 }, { steps = 6, mode = "scan" })
    end
    assert.is_nil(diversity.wait_any(jobs), "nothing started")
    assert.has_error(function() jobs[1]:wait() end)
    jobs[1]:start(3)
    jobs[2]:start(6)
    local ok, e = pcall(jobs[1].done, jobs[1])
    assert.is_false(ok)
    assert.truthy(diversity.message(e):find("job:wait() first", 1, true), diversity.message(e))
    local seen = {}
    for _ = 1, 2 do
      local i = diversity.wait_any(jobs)
      assert.truthy(i == 1 or i == 2)
      assert.is_true(jobs[i]:ready())
      local done = jobs[i]:wait()
      assert.are.equal(i == 1 and 3 or 6, done)
      seen[i] = true
    end
    assert.is_true(seen[1] and seen[2])
    jobs[1]:start(3)
    assert.are.equal(3, jobs[1]:wait())
    for i = 1, 2 do
      assert.is_true(jobs[i]:done())
      assert.are.equal(want[i]:sequences_bytes(), jobs[i]:sequences_bytes())
      jobs[i]:close(); want[i]:close()
    end
    -- close joins a job still stepping
    local dt = ctxs[1]:upload(t, "fp32")
    local j = dt:job({ 0 }, { steps = 6, mode = "scan" })
    j:start(6)
    j:close()
    close_clean(ctxs)
  end)

  it("k-NN shards and replicas on two logical devices give one device's bits", function()
    local ctxs = diversity.open_devices("0,0", { validation = true })
    assert.are.equal(2, #ctxs)
    -- duplicate rows on both sides of the shard boundary: ties must go to the lowest id
    local rows = H.random_rows(97, 13, 7)
    for i = 1, 10 do rows[#rows + 1] = rows[i] end
    local t = diversity.table(rows)
    local q = diversity.table(H.random_rows(9, 13, 8))
    local dt = ctxs[1]:upload(t, "fp32")
    for _, layout in ipairs { "shards", "replicas" } do
      local index = diversity.knn_index(ctxs, t, "fp32", { layout = layout, weights = { 1, 3 } })
      assert.are.equal(layout, index:layout())
      for _, metric in ipairs { "ip", "cosine", "l2" } do
        for _, k in ipairs { 1, 10, 200 } do
          local want = dt:knn(q, { k = k, metric = metric })
          local got, report = index:knn(q, { k = k, metric = metric })
          assert.are.equal(want:ids_bytes(), got:ids_bytes(), layout .. " " .. metric .. " k " .. k)
          assert.are.equal(want:distances_bytes(), got:distances_bytes())
          assert.are.equal(2, #report.per_device_ns)
          assert.are.equal(2, #report.ranges)
          want:close(); got:close()
        end
      end
      index:close()
    end
    local ok, e = pcall(diversity.knn_index, ctxs, t, "fp32", { layout = "rings" })
    assert.is_false(ok)
    assert.truthy(diversity.message(e):find("layout 'rings': expected shards or replicas", 1, true))
    dt:close()
    close_clean(ctxs)
  end)
end)
