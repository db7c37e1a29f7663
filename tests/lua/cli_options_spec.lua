-- The command line's flag table: --help (usage with defaults, exit 0), usage errors (exit 2,
-- nothing written), the scan knobs --shape / --tile / --chunk (the same sequences as the
-- idiomatic API), and --cache-dir (the fp16 conversion cached there, nothing beside the input).
local diversity = require "diversity"
local H = require "helpers"

local EPOCH = "SOURCE_DATE_EPOCH=1700000000"

describe("command line options", function()
  teardown(function() H.cleanup() end)

  it("--help prints every flag with its default and exits 0; -h too; nothing written", function()
    local dir = H.fortunes_dir()
    for _, flag in ipairs({ "--help", "-h" }) do
      local rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/o.json", flag })
      assert.are.equal(0, rc, err)
      for _, w in ipairs({ "usage: diversity", "--chunk C", "--tile T", "--shape S", "--cache-dir DIR",
        "[default: fp16]", "[default: auto]", "[default: 1.5]", "merge --out FILE" }) do
        assert.truthy(out:find(w, 1, true), ("--help lacks %q:\n%s"):format(w, out))
      end
      assert.are.equal("", err)
    end
    local rc, out = H.cli({ "merge", "--help" })
    assert.are.equal(0, rc)
    assert.truthy(out:find("usage: diversity", 1, true), out)
    assert.are.same({ "e.json" }, H.ls(dir))
  end)

  it("usage errors exit 2 naming the flag; nothing written", function()
    local dir = H.fortunes_dir()
    for _, case in ipairs({
      { { "--chunk", "x" }, "--chunk x: not a number" },
      { { "--shape", "diagonal" }, "--shape diagonal: expected untiled, tiled or per-tile" },
      { { "--tile" }, "--tile needs a value" },
      { { "--cache-dir", dir .. "/missing" }, "no such directory" },
      { { "--center=yes" }, "--center takes no value" },
      { {}, "--out FILE is required", true },
    }) do
      local args = { "--embeddings", dir .. "/e.json" }
      if not case[3] then args[#args + 1] = "--out"; args[#args + 1] = dir .. "/o.json" end
      for _, a in ipairs(case[1]) do args[#args + 1] = a end
      local rc, out, err = H.cli(args)
      assert.are.equal(2, rc, out .. err)
      assert.truthy(err:find(case[2], 1, true), ("stderr %q lacks %q"):format(err, case[2]))
      assert.truthy(err:find("diversity --help", 1, true), err)
    end
    -- Values the parser takes but the run refuses: exit 1, still nothing written.
    for _, case in ipairs({ { "--chunk", "0" }, { "--tile", "2.5" } }) do
      local rc, _, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/o.json",
        case[1], case[2] })
      assert.are.equal(1, rc, err)
      assert.truthy(err:find(case[1] .. " must be a positive integer", 1, true), err)
    end
    assert.are.same({ "e.json" }, H.ls(dir))
  end)

  it("--shape, --tile and --chunk give the idiomatic API's scan sequences", function()
    local dir = H.fortunes_dir()
    local starts, steps = { 0, 7, 299 }, 30
    local t = diversity.load(dir .. "/e.json")
    local ids = t:ids()
    local ctx = diversity.open {}
    local dt = ctx:upload(t, "fp16")
    local job = dt:job(starts, { steps = steps, mode = "scan" })
    job:step(steps)
    local want = job:sequences()
    job:close(); dt:close(); ctx:close(); t:close()
    for _, knobs in ipairs({
      { "--shape", "untiled", "--chunk", "7" },
      { "--shape", "tiled", "--tile", "64", "--chunk", "1" },
      { "--shape", "per-tile", "--tile", "100", "--chunk", "30" },
    }) do
      local args = { "--embeddings", dir .. "/e.json", "--out", dir .. "/o.json", "--mode", "scan",
        "--top-k", tostring(steps), "--starts", "0,7,299", "--quiet" }
      for _, k in ipairs(knobs) do args[#args + 1] = k end
      local rc, _, err = H.cli(args, EPOCH)
      assert.are.equal(0, rc, err)
      local j = H.json_file(dir .. "/o.json")
      for i, s in ipairs(starts) do
        local got = j.sequences[ids[s + 1]]
        assert.are.equal(steps + 1, got.n, table.concat(knobs, " "))
        for k = 1, steps + 1 do
          assert.are.equal(ids[want[i][k] + 1], got[k], table.concat(knobs, " ") .. " entry " .. k)
        end
      end
    end
  end)

  it("--cache-dir keeps the fp16 conversion there, none beside the input, and reuses it", function()
    local dir, cache = H.fortunes_dir(), H.tmpdir()
    local args = { "--embeddings", dir .. "/e.json", "--out", dir .. "/o.json", "--top-k", "3",
      "--starts", "0,1", "--center", "--cache-dir", cache, "--quiet" }
    local rc, _, err = H.cli(args, EPOCH)
    assert.are.equal(0, rc, err)
    assert.are.same({ "e.json", "o.json" }, H.ls(dir))
    assert.are.same({ "e.mean-centered-v1.fp16.bin", "e.mean-centered-v1.fp16.bin.ids.json",
      "e.mean-centered-v1.fp16.bin.json" }, H.ls(cache))
    local first = H.read(dir .. "/o.json")
    -- The second run reads the cached conversion: every write is a temp file renamed into place,
    -- so a rewritten .bin would have a new inode.
    local function inode()
      local _, out = H.sh("stat -c %i " .. H.q(cache .. "/e.mean-centered-v1.fp16.bin"))
      return out
    end
    local before = inode()
    rc, _, err = H.cli(args, EPOCH)
    assert.are.equal(0, rc, err)
    assert.are.equal(first, H.read(dir .. "/o.json"))
    assert.are.equal(before, inode(), "the cached conversion was rewritten, not reused")
    assert.are.same({ "e.json", "o.json" }, H.ls(dir))
  end)
end)
