-- Sequences on demand: `dtable:sequencer` answers the batch job's prefixes on the host engine and
-- on a Vulkan device (the scan and gram engines), says what it built, and refuses bad queries by
-- name; `diversity query` prints the batch command's cache rows for the same options, one start
-- or JSON lines on stdin, and writes nothing.
local diversity = require "diversity"
local H = require "helpers"

-- The device the other specs use (lavapipe in CI), and the host engine.
local DEVICES = { os.getenv("DIVERSITY_DEVICE") or "0", "host" }

describe("sequencer", function()
  local t
  H.fortunes_fixture(setup, teardown, 120, function(_, _, tt) t = tt end)

  for _, device in ipairs(DEVICES) do
    for _, mode in ipairs({ "gram", "scan" }) do
      it(("gives the batch job's prefixes on %s, %s"):format(device, mode), function()
        local ctx = diversity.open { device = device }
        for _, precision in ipairs({ "fp32", "fp16" }) do
          local dt = ctx:upload(t, precision)
          local starts = { 0, 33, 119, 7 }
          local want = H.sequences(dt, starts, { mode = mode, steps = 15 })
          local s = dt:sequencer { mode = mode }
          for _, k in ipairs({ 0, 1, 15 }) do
            for i, st in ipairs(starts) do
              local got = s:sequence(st, k)
              assert.are.equal(k + 1, #got)
              for j = 1, k + 1 do
                assert.are.equal(want[i][j], got[j], ("%s %s start %d k %d"):format(device, precision, st, k))
              end
            end
            local rows = s:sequences({ 119, 0 }, k)
            assert.are.same({ want[3][k + 1], want[1][k + 1] }, { rows[1][k + 1], rows[2][k + 1] })
          end
          local r = s:report()
          assert.are.equal(device == "host" and "host" or "device", r.engine)
          assert.are.equal(mode, r.mode)
          assert.are.equal(120, r.n)
          assert.are.equal(3 * 5, r.queries)
          assert.are.equal(3 * 6, r.sequences)
          if mode == "scan" then assert.are.equal("none", r.g) end
          s:close()
          dt:close()
        end
        ctx:close()
      end)
    end
  end

  it("on the host builds the rows picks read, then G whole", function()
    local ctx = diversity.open { device = "host" }
    local dt = ctx:upload(t, "fp32")
    local s = dt:sequencer { g = "auto" }
    s:sequence(5, 4)
    local r = s:report()
    assert.are.same({ "gram", "rows", 4 }, { r.mode, r.g, r.rows_built })
    s:sequence(5, 200)
    r = s:report()
    assert.are.same({ "whole", 120 }, { r.g, r.rows_built })
    local w = dt:sequencer { g = "whole" }
    assert.are.same({ "whole", 120 }, { w:report().g, w:report().rows_built })
    w:close()
    s:close()
    dt:close()
    ctx:close()
  end)

  it("refuses bad queries and options by name", function()
    local ctx = diversity.open { device = "host" }
    local dt = ctx:upload(t, "fp32")
    H.assert_error({ "device_table:sequencer", "g 'most'", "auto, rows or whole" },
      dt.sequencer, dt, { g = "most" })
    local s = dt:sequencer()
    H.assert_error({ "sequencer:sequence", "120" }, s.sequence, s, 120, 3)
    H.assert_error({ "sequencer:sequence", "k", "required" }, s.sequence, s, 1)
    H.assert_error({ "sequencer:sequence", "k" }, s.sequence, s, 1, -1)
    H.assert_error({ "sequencer:sequence", "k" }, s.sequence, s, 1, 2.5)
    H.assert_error({ "sequencer:sequences", "no starts" }, s.sequences, s, {}, 3)
    H.assert_error({ "sequencer:sequences", "start" }, s.sequences, s, { 1, "x" }, 3)
    assert.are.equal(0, s:report().queries)
    s:close()
    H.assert_error({ "sequencer:sequence", "after close" }, s.sequence, s, 1, 3)
    dt:close()
    ctx:close()
  end)
end)

describe("diversity query", function()
  local dir, emb
  H.fortunes_fixture(setup, teardown, 90, function(d, path) dir, emb = d, path end, false)

  it("writes nothing beside its input", function()
    local before = H.snapshot(dir)
    local rc, out, err = H.cli({ "query", "--embeddings", emb, "--start", "fortune-2", "--k", "3" })
    assert.are.equal(0, rc, err)
    assert.are.equal(4, select(2, out:gsub("\n", "")))
    assert.truthy(err:find("G rows (3 of 90 rows)", 1, true) or err:find("G whole", 1, true), err)
    assert.are.same(before, H.snapshot(dir))
  end)

  -- The batch command's cache rows (top_k 6) for the same options.
  local function cache_rows(extra)
    local out = dir .. "/cache.json"
    os.remove(out)
    local args = { "--embeddings", emb, "--out", out, "--top-k", "6", "--quiet" }
    for _, a in ipairs(extra) do args[#args + 1] = a end
    local rc, _, err = H.cli(args, "SOURCE_DATE_EPOCH=1700000000")
    assert.are.equal(0, rc, err)
    local c = diversity.json_decode(H.read(out))
    os.remove(out)
    return c.sequences
  end

  for _, extra in ipairs({ {}, { "--center", "--precision", "fp32" }, { "--device", "host" } }) do
    it("prints the batch command's rows, " .. table.concat(extra, " "), function()
      local want = cache_rows(extra)
      for _, id in ipairs({ "fortune-0", "fortune-41", "fortune-89" }) do
        local args = { "query", "--embeddings", emb, "--start", id, "--k", "6", "--quiet" }
        for _, a in ipairs(extra) do args[#args + 1] = a end
        local rc, out, err = H.cli(args)
        assert.are.equal(0, rc, err)
        local got = {}
        for line in out:gmatch("[^\n]+") do got[#got + 1] = line end
        assert.are.same(want[id], got)
      end
    end)
  end

  it("serves JSON lines, answering a bad line with an error and going on", function()
    local want = cache_rows({})
    local input = dir .. "/requests.jsonl"
    H.write(input, '{"start": "fortune-3", "k": 6}\nnot json\n{"start": "nobody"}\n\n'
      .. '{"start": "fortune-88", "k": 6}\n{"start": "fortune-1", "k": -2}\n')
    local before = H.snapshot(dir)
    local rc, out, err = H.sh(("%s luajit lua/diversity/cli.lua query --embeddings %s --stdin "
      .. "--quiet --texts %s < %s"):format(H.lua_env(), H.q(emb), H.q(dir .. "/texts.txt"),
      H.q(input)))
    -- No texts file yet: refused before any request is read.
    assert.are.equal(1, rc)
    assert.truthy(err:find("texts.txt", 1, true), err)
    local lines = {}
    for i = 0, 89 do lines[#lines + 1] = "text of row " .. i end
    H.write(dir .. "/texts.txt", table.concat(lines, "\n") .. "\n")
    before = H.snapshot(dir)
    rc, out, err = H.sh(("%s luajit lua/diversity/cli.lua query --embeddings %s --stdin "
      .. "--quiet --texts %s < %s"):format(H.lua_env(), H.q(emb), H.q(dir .. "/texts.txt"),
      H.q(input)))
    assert.are.equal(0, rc, err)
    local replies = {}
    for line in out:gmatch("[^\n]+") do replies[#replies + 1] = diversity.json_decode(line) end
    assert.are.equal(5, #replies)
    assert.are.same(want["fortune-3"], replies[1].ids)
    assert.are.equal("text of row 3", replies[1].texts[1])
    assert.truthy(replies[2].error:find("JSON", 1, true), replies[2].error)
    assert.truthy(replies[3].error:find("nobody", 1, true), replies[3].error)
    assert.are.same(want["fortune-88"], replies[4].ids)
    assert.truthy(replies[5].error:find("k must be", 1, true), replies[5].error)
    -- Nothing written beside the inputs (a query writes no fp16 conversion cache).
    assert.are.same(before, H.snapshot(dir))
  end)

  it("refuses bad command lines with status 2 and bad ids with status 1", function()
    local rc, _, err = H.cli({ "query", "--embeddings", emb })
    assert.are.equal(2, rc)
    assert.truthy(err:find("--start ID or --stdin", 1, true), err)
    rc, _, err = H.cli({ "query", "--embeddings", emb, "--start", "fortune-1", "--k", "x" })
    assert.are.equal(2, rc)
    assert.truthy(err:find("--k x", 1, true), err)
    rc, _, err = H.cli({ "query", "--embeddings", emb, "--start", "fortune-1", "--out", "x" })
    assert.are.equal(2, rc)
    assert.truthy(err:find("unknown argument --out", 1, true), err)
    rc, _, err = H.cli({ "query", "--embeddings", emb, "--start", "fortune-999" })
    assert.are.equal(1, rc)
    assert.truthy(err:find("no item has the id fortune-999", 1, true), err)
    rc, _, err = H.cli({ "query", "--help" })
    assert.are.equal(0, rc, err)
  end)
end)

describe("diversity update", function()
  local dir
  local EPOCH = "SOURCE_DATE_EPOCH=1700000000"

  setup(function()
    dir = H.tmpdir()
    H.first_fortunes(dir .. "/old.json", 140)
    H.first_fortunes(dir .. "/new.json", 143)
    H.first_fortunes(dir .. "/other.json", 145)
  end)

  local function run(args)
    return H.cli(args, EPOCH)
  end

  -- The old cache, a fresh run on the new table and the update, with `extra` flags: the update's
  -- JSON and binary caches are the fresh run's bytes.
  local function same_as_fresh(extra, new)
    new = new or dir .. "/new.json"
    local old, fresh, up = dir .. "/old-cache.json", dir .. "/fresh.json", dir .. "/up.json"
    local rc, _, err = run(H.extend({ "--embeddings", dir .. "/old.json", "--out", old, "--quiet" }, extra))
    assert.are.equal(0, rc, err)
    rc, _, err = run(H.extend({ "--embeddings", new, "--out", fresh, "--binary", fresh .. ".u32",
      "--quiet" }, extra))
    assert.are.equal(0, rc, err)
    local out
    rc, out, err = run(H.extend({ "update", "--cache", old, "--embeddings", new, "--out", up,
      "--binary", up .. ".u32", "--quiet" }, extra))
    assert.are.equal(0, rc, err)
    assert.are.equal(H.read(fresh), H.read(up), table.concat(extra, " "))
    assert.are.equal(H.read(fresh .. ".u32"), H.read(up .. ".u32"), table.concat(extra, " "))
    for _, f in ipairs({ fresh, fresh .. ".u32", up, up .. ".u32" }) do os.remove(f) end
    return out
  end

  for _, extra in ipairs({ { "--top-k", "7" }, { "--top-k", "7", "--precision", "fp32", "--mode", "scan" },
      {}, { "--device", "host", "--top-k", "20" }, { "--device", "host" } }) do
    it("writes a fresh run's bytes, " .. table.concat(extra, " "), function()
      local out = same_as_fresh(extra)
      assert.truthy(out:find("(3 appended)", 1, true), out)
      assert.truthy(out:find("3 new", 1, true), out)
    end)
  end

  it("killed after its first job, resumes to a fresh run's bytes", function()
    local old, fresh, up = dir .. "/old-cache.json", dir .. "/fresh.json", dir .. "/up.json"
    local base = { "--top-k", "9", "--device", "host", "--quiet" }
    local rc, _, err = run(H.extend({ "--embeddings", dir .. "/old.json", "--out", old }, base))
    assert.are.equal(0, rc, err)
    rc, _, err = run(H.extend({ "--embeddings", dir .. "/new.json", "--out", fresh }, base))
    assert.are.equal(0, rc, err)
    local args = H.extend({ "update", "--cache", old, "--embeddings", dir .. "/new.json", "--out", up }, base)
    rc, _, err = H.cli(args, EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=1")
    assert.are.equal(1, rc)
    assert.truthy(err:find("run again with --resume", 1, true), err)
    assert.is_nil(H.exists(up) and up or nil)
    local kept = H.ls(up .. ".partial")
    assert.are.same({ "grow-000.u32" }, kept)
    local out
    rc, out, err = run(H.extend(H.extend({}, args), { "--resume" }))
    assert.are.equal(0, rc, err)
    assert.are.equal(H.read(fresh), H.read(up))
    assert.is_nil(H.exists(up .. ".partial") and "left" or nil)
    os.remove(fresh); os.remove(up)
  end)

  it("refuses what it cannot update, naming why, and writes nothing", function()
    local old = dir .. "/old-cache.json"
    local rc, _, err = run({ "--embeddings", dir .. "/old.json", "--out", old, "--quiet", "--top-k", "5" })
    assert.are.equal(0, rc, err)
    local centred = dir .. "/centred-cache.json"
    rc, _, err = run({ "--embeddings", dir .. "/old.json", "--out", centred, "--quiet", "--top-k", "5", "--center" })
    assert.are.equal(0, rc, err)
    -- A table that is not the old one with rows appended: one value of an old row changed.
    local shuffled = dir .. "/shuffled.json"
    local e = diversity.json_decode(H.read(dir .. "/new.json"))
    e.embeddings[2].embedding[5] = e.embeddings[2].embedding[5] + 0.01
    H.write(shuffled, diversity.json_encode(e))
    -- A cache from before table checksums: the field removed.
    local legacy = dir .. "/legacy.json"
    H.write(legacy, (H.read(old):gsub('"table_checksum":"[^"]*",?', "")))
    -- A cache missing one start's sequence, and one holding an id the table does not have.
    local holey, alien = dir .. "/holey.json", dir .. "/alien.json"
    local c = diversity.json_decode(H.read(old))
    c.sequences["fortune-3"] = nil
    H.write(holey, diversity.json_encode(c))
    c = diversity.json_decode(H.read(old))
    c.sequences["fortune-4"][2] = "fortune-999"
    H.write(alien, diversity.json_encode(c))
    local before = H.snapshot(dir)
    local out = dir .. "/up.json"
    local cases = {
      { { "--cache", centred, "--embeddings", dir .. "/new.json" }, "move the column mean" },
      { { "--cache", old, "--embeddings", dir .. "/new.json", "--center" }, "move the column mean" },
      { { "--cache", old, "--embeddings", shuffled }, "are not the cache's table" },
      { { "--cache", old, "--embeddings", dir .. "/old.json" }, "no rows appended" },
      { { "--cache", old, "--embeddings", dir .. "/new.json", "--top-k", "9" }, "--top-k" },
      { { "--cache", old, "--embeddings", dir .. "/new.json", "--precision", "fp32" }, "computed at fp16" },
      { { "--cache", legacy, "--embeddings", dir .. "/new.json" }, "records no table checksum" },
      { { "--cache", holey, "--embeddings", dir .. "/new.json" }, "no sequence for row 3" },
      { { "--cache", alien, "--embeddings", dir .. "/new.json" }, "fortune-999" },
      { { "--cache", dir .. "/new.json", "--embeddings", dir .. "/new.json" }, "not a diversity cache" },
      { { "--cache", dir .. "/absent.json", "--embeddings", dir .. "/new.json" }, "absent.json" },
    }
    for _, c in ipairs(cases) do
      local args = H.extend({ "update", "--out", out, "--quiet" }, c[1])
      rc, _, err = run(args)
      assert.are.equal(1, rc, table.concat(args, " "))
      assert.truthy(err:find(c[2], 1, true), err)
    end
    rc, _, err = run({ "update", "--embeddings", dir .. "/new.json", "--out", out })
    assert.are.equal(2, rc)
    assert.truthy(err:find("--cache OLD.json is required", 1, true), err)
    -- Nothing written or changed (the fp16 conversion caches of the runs above were already there).
    assert.are.same(before, H.snapshot(dir))
  end)
end)
