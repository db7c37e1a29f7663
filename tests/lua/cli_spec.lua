-- The command line: runs
-- `luajit lua/diversity/cli.lua` as a user would, on copies of the bundled data in temporary
-- directories; checks the output JSON, the fp16 cache beside the input, every bad input reachable
-- from the command line (message words, exit status, nothing left behind), and device loss +
-- --resume.
local diversity = require "diversity"
local H = require "helpers"

local EPOCH = "SOURCE_DATE_EPOCH=1700000000"

-- Check a failed run: non-zero exit, a clean message with every word of `words` on stderr (no
-- traceback), and neither the output nor its temporary file nor a checkpoint left in `dir`.
local function assert_failed_cleanly(rc, out, err, words, dir, name)
  name = name or "out.json"
  assert.are_not.equal(0, rc, "the run succeeded: " .. out .. err)
  -- 2: a usage error the command line's parser refuses; 1: any other failure.
  assert.are.equal(words.status or 1, rc, "exit status " .. tostring(rc) .. " (a crash?): " .. err)
  for _, w in ipairs(words) do
    assert.truthy(err:find(w, 1, true), ("stderr %q does not contain %q"):format(err, w))
  end
  assert.falsy(err:find("stack traceback", 1, true), err)
  assert.falsy(err:find("runtime error", 1, true), err)
  assert.is_false(H.exists(dir .. "/" .. name), "the output file was left behind")
  assert.are.same({}, H.temp_files(dir, name), "a temporary output file was left behind")
  assert.is_false(H.exists(dir .. "/" .. name .. ".partial"), "a checkpoint was left behind")
end

describe("command line", function()
  local ctx
  H.context_for(setup, teardown, function(c) ctx = c end)

  -- The idiomatic API's sequences for `starts` (0-based) with `steps` steps, mapped through ids.
  local function expected(path, starts, steps, o)
    o = o or {}
    local t = diversity.load(path)
    if o.center then t = t:centered() end
    local ids = t:ids()
    local dt = ctx:upload(t, o.precision or "fp16")
    local job = dt:job(starts, { steps = steps, mode = o.mode or "auto" })
    job:step(steps)
    local out = {}
    for i, row in ipairs(job:sequences()) do
      local mapped = {}
      for k, v in ipairs(row) do mapped[k] = ids[v + 1] end
      out[ids[starts[i] + 1]] = mapped
    end
    job:close(); dt:close()
    return out
  end

  local function check_sequences(j, want)
    for key, seq in pairs(want) do
      local got = j.sequences[key]
      assert.is_table(got, "no sequence for " .. key)
      assert.are.equal(#seq, got.n)
      for k = 1, #seq do assert.are.equal(seq[k], got[k], key .. " entry " .. k) end
    end
  end

  -----------------------------------------------------------------------------------------------
  describe("a normal run", function()
    it("--top-k 5 --batch 64 over all 300: valid JSON keyed by ids, full metadata", function()
      local dir = H.fortunes_dir()
      local rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/out.json",
        "--top-k", "5", "--batch", "64", "--model", "minilm" }, EPOCH)
      assert.are.equal(0, rc, err)
      assert.truthy(out:find("300 sequences", 1, true), out)
      -- piped: plain progress lines with a rate and an ETA
      assert.truthy(err:find("progress", 1, true), err)
      assert.truthy(err:find("ETA", 1, true), err)
      assert.falsy(err:find("\r", 1, true), "a terminal progress bar when piped")
      local j = H.json_file(dir .. "/out.json")
      local m = j.metadata
      for _, k in ipairs { "model", "num_poems", "algorithm", "generated_at", "batch_size",
        "top_k", "space", "precision", "mode", "device" } do
        assert.is_not_nil(m[k], "metadata." .. k .. " missing")
      end
      assert.are.equal("minilm", m.model)
      assert.are.equal(300, m.num_poems)
      assert.are.equal(64, m.batch_size)
      assert.are.equal(5, m.top_k)
      assert.are.equal("raw", m.space)
      assert.are.equal("fp16", m.precision)
      -- the default mode is auto: gram where G fits (lavapipe: it does), reported on stderr
      assert.are.equal(ctx:mode_for(300, 384, "fp16"), m.mode)
      assert.are.equal("gram", m.mode)
      assert.truthy(err:find("mode gram (auto: ", 1, true), err)
      assert.truthy(out:find("gram mode", 1, true), out)
      assert.are.equal(ctx:name(), m.device)
      assert.are.equal("2023-11-14T22:13:20Z", m.generated_at)
      assert.are.equal(300, #j.sequences.__keys)
      for i = 0, 299 do
        local key = "fortune-" .. i
        local seq = j.sequences[key]
        assert.is_table(seq, "no key " .. key)
        assert.are.equal(6, seq.n)
        assert.are.equal(key, seq[1])
        local seen = {}
        for k = 1, 6 do
          assert.truthy(seq[k]:match("^fortune%-%d+$"))
          assert.is_nil(seen[seq[k]])
          seen[seq[k]] = true
        end
      end
      check_sequences(j, expected(dir .. "/e.json", { 0, 1, 63, 64, 299 }, 5))
      -- the fp16 conversion is cached beside the input
      assert.is_true(H.exists(dir .. "/e.raw.fp16.bin"))
      assert.is_true(H.exists(dir .. "/e.raw.fp16.bin.json"))
      -- no temporary or checkpoint files remain
      assert.are.same({}, H.temp_files(dir, "out.json"))
      assert.is_false(H.exists(dir .. "/out.json.partial"))
    end)

    it("on a terminal, a progress bar with rate and ETA", function()
      local has_script = H.sh("command -v script")
      if has_script ~= 0 then
        pending("no `script` command to give the run a terminal")
        return
      end
      local dir = H.fortunes_dir()
      local cmd = ("%s luajit lua/diversity/cli.lua --embeddings %s --out %s --top-k 3 " ..
        "--starts 0,1"):format(H.lua_env(), H.q(dir .. "/e.json"), H.q(dir .. "/tty.json"))
      local rc, out, err = H.sh("script -qec " .. H.q(cmd) .. " /dev/null")
      assert.are.equal(0, rc, out .. err)
      assert.truthy(out:find("\r[", 1, true), out)
      assert.truthy(out:find("%] +100%.0%%"), out)
      assert.truthy(out:find("steps/s", 1, true), out)
      assert.truthy(out:find("ETA", 1, true), out)
      assert.falsy(out:find("\nprogress ", 1, true), "plain progress lines on a terminal")
      assert.is_true(H.exists(dir .. "/tty.json"))
    end)

    it("--center gives space mean-centered-v1 and the centered sequences", function()
      local dir = H.fortunes_dir()
      local rc, _, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/c.json",
        "--top-k", "5", "--batch", "64", "--starts", "0,1,2,150", "--center", "--quiet" }, EPOCH)
      assert.are.equal(0, rc, err)
      assert.falsy(err:find("progress", 1, true), "--quiet printed progress")
      local j = H.json_file(dir .. "/c.json")
      assert.are.equal("mean-centered-v1", j.metadata.space)
      assert.are.same({ "fortune-0", "fortune-1", "fortune-2", "fortune-150" }, j.sequences.__keys)
      check_sequences(j, expected(dir .. "/e.json", { 0, 1, 2, 150 }, 5, { center = true }))
      assert.is_true(H.exists(dir .. "/e.mean-centered-v1.fp16.bin"))
    end)

    it("--precision fp32 matches the fp32 API", function()
      local dir = H.fortunes_dir()
      local rc, _, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/p.json",
        "--top-k", "7", "--starts", "5,6", "--precision", "fp32" }, EPOCH)
      assert.are.equal(0, rc, err)
      local j = H.json_file(dir .. "/p.json")
      assert.are.equal("fp32", j.metadata.precision)
      assert.are.equal(7, j.metadata.top_k)
      check_sequences(j, expected(dir .. "/e.json", { 5, 6 }, 7, { precision = "fp32" }))
    end)

    it("--top-k 0 gives each start alone; a .npy input has index keys", function()
      local dir = H.fortunes_dir()
      local rc, _, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/k0.json",
        "--top-k", "0", "--starts", "3,4" }, EPOCH)
      assert.are.equal(0, rc, err)
      local j = H.json_file(dir .. "/k0.json")
      assert.are.equal(0, j.metadata.top_k)
      assert.are.equal(1, j.sequences["fortune-3"].n)
      assert.are.equal("fortune-3", j.sequences["fortune-3"][1])
      H.write(dir .. "/f.npy", H.read(H.DATA_NPY))
      rc, _, err = H.cli({ "--embeddings", dir .. "/f.npy", "--out", dir .. "/n.json",
        "--top-k", "3", "--starts", "0,2047" }, EPOCH)
      assert.are.equal(0, rc, err)
      j = H.json_file(dir .. "/n.json")
      assert.are.equal(2048, j.metadata.num_poems)
      assert.are.same({ "0", "2047" }, j.sequences.__keys)
      assert.are.equal(0, j.sequences["0"][1])
      assert.are.equal("number", type(j.sequences["2047"][2]))
    end)

    it("--mode scan and --mode gram: the metadata says which; gram agrees with gram across batches and chunks",
      function()
        local dir = H.fortunes_dir()
        local function run(name, extra)
          local a = { "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. name .. ".json",
            "--top-k", "40" }
          for _, x in ipairs(extra) do a[#a + 1] = x end
          local rc, out, err = H.cli(a, EPOCH)
          assert.are.equal(0, rc, err)
          return H.read(dir .. "/" .. name .. ".json"), out, err
        end
        local _, out, err = run("scan", { "--mode", "scan" })
        assert.truthy(err:find("mode scan (requested)", 1, true), err)
        assert.truthy(out:find("scan mode", 1, true), out)
        local js = H.json_file(dir .. "/scan.json")
        assert.are.equal("scan", js.metadata.mode)
        check_sequences(js, expected(dir .. "/e.json", { 0, 150, 299 }, 40, { mode = "scan" }))
        local gram = run("gram", { "--mode", "gram" })
        local jg = H.json_file(dir .. "/gram.json")
        assert.are.equal("gram", jg.metadata.mode)
        assert.are.equal(300, jg.metadata.batch_size) -- every sequence in one batch
        check_sequences(jg, expected(dir .. "/e.json", { 0, 150, 299 }, 40, { mode = "gram" }))
        -- the same bytes with other batches, tiny chunks and memory placement (but batch_size)
        local other = run("gram2", { "--mode", "gram", "--batch", "70", "--target-s", "0.000001",
          "--placement", "memory" })
        assert.are.equal(gram:gsub('"batch_size":%d+', ""), (other:gsub('"batch_size":%d+', "")))
        -- fixed-point keys, every step certified, by default where the device has float64
        -- (lavapipe has): said in the metadata
        assert.are.equal("fixed; G dot64", jg.metadata.summation)
        -- float sums named: said in the metadata (other bits at near-ties)
        run("nojudge", { "--mode", "gram", "--no-judge" })
        assert.are.equal("compensated; G dot2", H.json_file(dir .. "/nojudge.json").metadata.summation)
        local comp = run("comp", { "--mode", "gram", "--compensated-sums", "--judge" })
        assert.are.equal("compensated; G dot2; judge2 refresh 4096",
          H.json_file(dir .. "/comp.json").metadata.summation)
        check_sequences(H.json_file(dir .. "/comp.json"),
          expected(dir .. "/e.json", { 0, 150, 299 }, 40, { mode = "gram" }))
        -- the judge named alone: the default's bytes
        local named = run("named", { "--mode", "gram", "--judge" })
        assert.are.equal(gram, named)
        -- plain sums (with the judge, whose bound then goes through |c|): said in the metadata,
        -- the same bytes across batches
        local p1 = run("plain1", { "--mode", "gram", "--plain-sums" })
        local p2 = run("plain2", { "--mode", "gram", "--plain-sums", "--batch", "70" })
        assert.are.equal("plain; G dot2; judge3 refresh 4096",
          H.json_file(dir .. "/plain1.json").metadata.summation)
        assert.are.equal(p1:gsub('"batch_size":%d+', ""), (p2:gsub('"batch_size":%d+', "")))
        assert.is_nil(js.metadata.summation) -- scan has no gram sums
        for key, seq in pairs(jg.sequences) do
          if key ~= "__keys" then
            local seen = {}
            for k = 1, seq.n do
              assert.is_nil(seen[seq[k]], key)
              seen[seq[k]] = true
            end
          end
        end
      end)

    it("a second run reuses the fp16 cache and gives the same output; a changed input does not",
      function()
        local dir = H.fortunes_dir()
        local args = { "--embeddings", dir .. "/e.json", "--out", dir .. "/1.json", "--top-k",
          "5", "--starts", "0,10,20" }
        local rc, _, err = H.cli(args, EPOCH)
        assert.are.equal(0, rc, err)
        local cache = dir .. "/e.raw.fp16.bin"
        local st1 = H.stat(cache)
        local st1s = H.stat(cache .. ".json")
        assert.truthy(st1 ~= "", "no fp16 cache written")
        args[4] = dir .. "/2.json"
        rc, _, err = H.cli(args, EPOCH)
        assert.are.equal(0, rc, err)
        assert.are.equal(st1, H.stat(cache), "the fp16 cache was rewritten, not reused")
        assert.are.equal(st1s, H.stat(cache .. ".json"))
        assert.are.equal(H.read(dir .. "/1.json"), H.read(dir .. "/2.json"))
        -- the same data in a changed file: the cache is stale, so it is regenerated
        H.write(dir .. "/e.json", H.read(dir .. "/e.json") .. "\n")
        args[4] = dir .. "/3.json"
        rc, _, err = H.cli(args, EPOCH)
        assert.are.equal(0, rc, err)
        assert.are_not.equal(st1, H.stat(cache), "a stale fp16 cache was reused")
        assert.are.equal(H.read(dir .. "/1.json"), H.read(dir .. "/3.json"))
      end)

    it("a corrupt fp16 cache is not used", function()
      local dir = H.fortunes_dir()
      local args = { "--embeddings", dir .. "/e.json", "--out", dir .. "/1.json", "--top-k", "4",
        "--starts", "7,8" }
      local rc, _, err = H.cli(args, EPOCH)
      assert.are.equal(0, rc, err)
      -- truncate the cached .bin: its size no longer matches the sidecar
      local bin = H.read(dir .. "/e.raw.fp16.bin")
      H.write(dir .. "/e.raw.fp16.bin", bin:sub(1, #bin - 768))
      args[4] = dir .. "/2.json"
      rc, _, err = H.cli(args, EPOCH)
      assert.are.equal(0, rc, err)
      assert.are.equal(H.read(dir .. "/1.json"), H.read(dir .. "/2.json"))
      assert.are.equal(#bin, #H.read(dir .. "/e.raw.fp16.bin"), "the cache was not regenerated")
      -- edit it in place (same size): its own checksum in the sidecar no longer matches
      H.write(dir .. "/e.raw.fp16.bin", bin:sub(1, 100) .. "\0\64" .. bin:sub(103))
      args[4] = dir .. "/3.json"
      rc, _, err = H.cli(args, EPOCH)
      assert.are.equal(0, rc, err)
      assert.are.equal(H.read(dir .. "/1.json"), H.read(dir .. "/3.json"))
      assert.are.equal(bin, H.read(dir .. "/e.raw.fp16.bin"), "the cache was not regenerated")
    end)

    it("the fp16 cache's ids sidecar deleted, edited or stale: the cache is not used", function()
      local dir = H.fortunes_dir()
      local args = { "--embeddings", dir .. "/e.json", "--out", dir .. "/1.json", "--top-k", "4",
        "--starts", "7,8" }
      local rc, _, err = H.cli(args, EPOCH)
      assert.are.equal(0, rc, err)
      local ids = dir .. "/e.raw.fp16.bin.ids.json"
      local side = H.read(ids)
      assert.truthy(side and side:find('"format":"diversity-ids-v1"', 1, true), side)
      local n = 1
      local function again(what)
        n = n + 1
        args[4] = ("%s/%d.json"):format(dir, n)
        local rc2, _, err2 = H.cli(args, EPOCH)
        assert.are.equal(0, rc2, err2)
        -- the keys are the fortunes' ids, never indices or other rows' ids
        assert.are.equal(H.read(dir .. "/1.json"), H.read(args[4]), what)
        -- and the sidecar is whole again
        assert.are.equal(side, H.read(ids), what .. ": the sidecar was not rewritten")
      end
      os.remove(ids)
      again("deleted")
      -- two ids swapped (the checksum no longer matches)
      local first, second = side:match('"ids":%["([^"]*)","([^"]*)"')
      assert.truthy(first and second, side)
      H.write(ids, (side:gsub('"ids":%["[^"]*","[^"]*"', ('"ids":["%s","%s"'):format(second, first), 1)))
      again("swapped")
      -- an ids sidecar of another input
      H.write(ids, (side:gsub('"source_checksum":"[^"]*"', '"source_checksum":"fnv1a64:0000000000000000"', 1)))
      again("stale")
    end)

    it("an fp16 .bin input with --center is centered (or refused), never mislabelled", function()
      local dir = H.fortunes_dir()
      local rc, _, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/raw.json",
        "--top-k", "5", "--starts", "0,1" }, EPOCH)
      assert.are.equal(0, rc, err)
      -- the cached raw fp16 table (its sidecar says space "raw") is now an input of its own,
      -- run with --center
      local bin = dir .. "/e.raw.fp16.bin"
      rc, _, err = H.cli({ "--embeddings", bin, "--out", dir .. "/c.json", "--top-k", "5",
        "--starts", "0,1", "--center" }, EPOCH)
      if rc ~= 0 then -- refusing is fine
        assert.are.equal(1, rc, err)
        assert.is_false(H.exists(dir .. "/c.json"))
        return
      end
      -- the sequences of the .bin as it is, and centered
      local function seqs(center)
        local t = diversity.load_fp16_bin(bin)
        if center then t = t:centered() end
        local dt = ctx:upload(t, "fp16")
        local job = dt:job({ 0, 1 }, { steps = 5, mode = "auto" })
        job:step(5)
        local s = job:sequences()
        job:close(); dt:close()
        return s
      end
      local raw, centered = seqs(false), seqs(true)
      assert.is_not_nil(H.diff_rows(raw, centered), "the test cannot tell raw from centered")
      local j = H.json_file(dir .. "/c.json")
      local got = {}
      for i, key in ipairs { "0", "1" } do -- the .bin has no ids: keys are indices
        assert.is_table(j.sequences[key])
        got[i] = { unpack(j.sequences[key], 1, j.sequences[key].n) }
      end
      local space = j.metadata.space
      if space == "raw" then
        assert.is_nil(H.diff_rows(raw, got), "labelled raw but not the raw sequences")
      else
        assert.are.equal("mean-centered-v1", space)
        assert.is_nil(H.diff_rows(centered, got),
          "labelled mean-centered-v1, but these are not the centered sequences"
          .. (H.diff_rows(raw, got) == nil and " (they are the raw ones)" or ""))
      end
    end)
  end)

  -----------------------------------------------------------------------------------------------
  describe("bad input", function()
    -- A temp dir with an embeddings.json written from rows (strings are raw JSON numbers).
    local function input(rows)
      local dir = H.tmpdir()
      H.write_embeddings_json(dir .. "/e.json", rows)
      return dir
    end
    local good = { { 1, 0, 0.5 }, { 0, 1, 0.25 }, { 0.5, 0.5, 1 }, { -1, 0.2, 0 } }

    local function run(dir, extra, env, name)
      local args = { "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. (name or "out.json") }
      for _, a in ipairs(extra or {}) do args[#args + 1] = a end
      return H.cli(args, env)
    end

    it("the good input works (so the failures below are the inputs' fault)", function()
      local dir = input(good)
      local rc, _, err = run(dir, { "--starts", "0,1,2,3" })
      assert.are.equal(0, rc, err)
      local j = H.json_file(dir .. "/out.json")
      assert.are.same({ "r0", "r1", "r2", "r3" }, j.sequences.__keys)
      assert.are.equal(4, j.sequences.r0.n)
    end)

    it("a missing input file", function()
      local dir = H.tmpdir()
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "No such file" }, dir)
    end)

    it("malformed JSON", function()
      local dir = H.tmpdir()
      H.write(dir .. "/e.json", '{"embeddings": [{"embedding": [1, 2]}, ')
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "malformed JSON" }, dir)
    end)

    it("missing \"embeddings\"", function()
      local dir = H.tmpdir()
      H.write(dir .. "/e.json", '{"metadata": {}, "rows": []}')
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", 'missing "embeddings"' }, dir)
    end)

    it("an entry missing \"embedding\"", function()
      local dir = H.tmpdir()
      H.write(dir .. "/e.json", '{"embeddings": [{"id": "a", "embedding": [1, 2]}, ' ..
        '{"id": "b", "vector": [1, 2]}]}')
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "embeddings[1]", 'no "embedding"' }, dir)
    end)

    it("ragged rows", function()
      local dir = input({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8 } })
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "ragged", "embeddings[2]" }, dir)
    end)

    it("an empty embeddings list (N = 0)", function()
      local dir = H.tmpdir()
      H.write(dir .. "/e.json", '{"metadata": {}, "embeddings": []}')
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "N = 0" }, dir)
    end)

    it("an empty embedding (D = 0)", function()
      local dir = input({ {}, {} })
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "D = 0" }, dir)
    end)

    it("a number beyond float32 names the row", function()
      local dir = input({ { 1, 2 }, { 3, 4 }, { 5, "1e39" } })
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "embeddings[2]", "float32 range" }, dir)
    end)

    it("a NaN token (as Python's json.dump writes NaN) names the row", function()
      -- JSON has no NaN; Python writes the bare token NaN (allow_nan=True is its default), so
      -- this is how a NaN reaches an embeddings.json. A NaN or Inf is refused naming the row.
      local dir = input({ { 1, 2 }, { 3, "NaN" }, { 5, 6 } })
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json" }, dir)
      assert.truthy(err:find("embeddings[1]", 1, true) or err:find("row 1", 1, true),
        "the message does not name the row: " .. err)
    end)

    it("duplicate ids", function()
      local dir = H.tmpdir()
      H.write(dir .. "/e.json", '{"embeddings": [{"id": "a", "embedding": [1, 2]}, ' ..
        '{"id": "a", "embedding": [2, 1]}]}')
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", 'duplicate id "a"' }, dir)
    end)

    it("a .f32 input without --dim, and an unsupported file type", function()
      local dir = H.tmpdir()
      H.write(dir .. "/x.f32", ("\0"):rep(24))
      local rc, out, err = H.cli({ "--embeddings", dir .. "/x.f32", "--out", dir .. "/out.json" })
      assert_failed_cleanly(rc, out, err, { "x.f32", "--dim" }, dir)
      H.write(dir .. "/x.csv", "1,2\n3,4\n")
      rc, out, err = H.cli({ "--embeddings", dir .. "/x.csv", "--out", dir .. "/out.json",
        "--precision", "fp32" })
      assert_failed_cleanly(rc, out, err, { "x.csv", "unsupported file type" }, dir)
    end)

    it("a non-number value names the row", function()
      local dir = input({ { 1, 2 }, { '"x"', 4 } })
      local rc, out, err = run(dir)
      assert_failed_cleanly(rc, out, err, { "e.json", "embeddings[1]", "not a number" }, dir)
    end)

    it("a start out of range via --starts", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--starts", "0,4" })
      assert_failed_cleanly(rc, out, err, { "start 4", "out of range" }, dir)
    end)

    it("a negative start via --starts", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--starts", "1,-1" })
      assert_failed_cleanly(rc, out, err, { "start -1", "out of range" }, dir)
    end)

    it("a repeated start via --starts", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--starts", "2,1,2" })
      assert_failed_cleanly(rc, out, err, { "start 2", "repeated" }, dir)
    end)

    it("a start that is not an index", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--starts", "0,1.5" })
      assert_failed_cleanly(rc, out, err, { "--starts", "1.5" }, dir)
    end)

    it("a negative --top-k", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--top-k", "-3" })
      assert_failed_cleanly(rc, out, err, { "--top-k", "-3" }, dir)
    end)

    it("--batch 0", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--batch", "0" })
      assert_failed_cleanly(rc, out, err, { "--batch", "positive" }, dir)
    end)

    it("--target-s nan, --safety inf, --target-s 0 are refused before any device work", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--target-s", "nan" })
      assert_failed_cleanly(rc, out, err, { "--target-s nan", "finite", status = 2 }, dir)
      rc, out, err = run(dir, { "--safety", "inf" })
      assert_failed_cleanly(rc, out, err, { "--safety inf", "finite", status = 2 }, dir)
      rc, out, err = run(dir, { "--target-s", "0" })
      assert_failed_cleanly(rc, out, err, { "--target-s", "positive" }, dir)
    end)

    it("--mode bogus and --placement bogus are refused, nothing written", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--mode", "bogus" })
      assert_failed_cleanly(rc, out, err, { "--mode bogus", "scan, gram or auto", status = 2 }, dir)
      rc, out, err = run(dir, { "--placement", "bogus" })
      assert_failed_cleanly(rc, out, err, { "--placement bogus", "registers", status = 2 }, dir)
      rc, out, err = run(dir, { "--mode" })
      assert_failed_cleanly(rc, out, err, { "--mode needs a value", status = 2 }, dir)
    end)

    it("an unknown argument or precision, a missing value", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--frobnicate" })
      assert_failed_cleanly(rc, out, err, { "unknown argument --frobnicate", status = 2 }, dir)
      rc, out, err = run(dir, { "--precision", "fp8" })
      assert_failed_cleanly(rc, out, err, { "--precision fp8", status = 2 }, dir)
      rc, out, err = run(dir, { "--top-k" })
      assert_failed_cleanly(rc, out, err, { "--top-k needs a value", status = 2 }, dir)
    end)

    it("an output directory that does not exist", function()
      local dir = input(good)
      local rc, out, err = run(dir, {}, nil, "missing/out.json")
      assert_failed_cleanly(rc, out, err, { "missing", "does not exist" }, dir, "missing/out.json")
    end)

    it("a --binary output directory that does not exist leaves no JSON either", function()
      local dir = input(good)
      local rc, out, err = run(dir, { "--binary", dir .. "/missing/x.bin" })
      assert_failed_cleanly(rc, out, err, { "x.bin", "does not exist" }, dir)
    end)

    it("a read-only output directory", function()
      local dir = input(good)
      local ro = dir .. "/ro"
      os.execute("mkdir " .. H.q(ro) .. " && chmod 555 " .. H.q(ro))
      local env = nil
      local probe = io.open(ro .. "/probe", "w")
      if probe then
        -- Root ignores permissions: run the command line as `nobody` instead (setpriv, from
        -- util-linux), with the input readable by it.
        probe:close()
        os.remove(ro .. "/probe")
        assert.are.equal(0, select(1, H.sh("command -v setpriv")), "setpriv is needed as root")
        os.execute("chmod 755 " .. H.q(dir) .. " && chmod 644 " .. H.q(dir .. "/e.json"))
        env = "setpriv --reuid=65534 --regid=65534 --clear-groups"
      end
      local rc, out, err = run(dir, {}, env, "ro/out.json")
      assert_failed_cleanly(rc, out, err, { "ro/out.json", "ermission denied" }, dir,
        "ro/out.json")
    end)

    it("the output path is a directory", function()
      local dir = input(good)
      os.execute("mkdir " .. H.q(dir .. "/out.json"))
      local rc, _, err = run(dir)
      assert.are.equal(1, rc, err)
      assert.truthy(err:find("is a directory", 1, true), err)
      assert.are.same({}, H.temp_files(dir, "out.json"))
    end)

    it("a .bin whose size disagrees with its sidecar", function()
      local dir = H.tmpdir()
      local t = diversity.table(good)
      t:save_fp16_bin(dir .. "/t.bin", "raw", "fnv1a64:0123456789abcdef")
      H.write(dir .. "/t.bin", H.read(dir .. "/t.bin"):sub(1, -7)) -- one row short
      local rc, out, err = H.cli({ "--embeddings", dir .. "/t.bin", "--out", dir .. "/out.json" })
      assert_failed_cleanly(rc, out, err, { "t.bin", "disagrees with its sidecar" }, dir)
      -- a .bin of the right size whose bytes were edited after it was written
      t:save_fp16_bin(dir .. "/t.bin", "raw", "fnv1a64:0123456789abcdef")
      local b = H.read(dir .. "/t.bin")
      H.write(dir .. "/t.bin", "\0\64" .. b:sub(3))
      rc, out, err = H.cli({ "--embeddings", dir .. "/t.bin", "--out", dir .. "/out.json" })
      assert_failed_cleanly(rc, out, err, { "t.bin", "checksum", "disagrees with its sidecar" }, dir)
      -- and a .bin without its sidecar
      os.remove(dir .. "/t.bin.json")
      rc, out, err = H.cli({ "--embeddings", dir .. "/t.bin", "--out", dir .. "/out.json" })
      assert_failed_cleanly(rc, out, err, { "t.bin", "missing sidecar" }, dir)
    end)

    it("a panic in the Rust code (injected) is a clean failure, not an abort or a Lua traceback", function()
      local dir = input(good)
      local rc, out, err = H.cli({ "--embeddings", dir .. "/e.json", "--out", dir .. "/out.json" },
        "RUST_BACKTRACE=0 " .. diversity.ENV_INJECT_PANIC .. "=1")
      assert_failed_cleanly(rc, out, err,
        { "diversity: batch 1 of 1", "panicked (injected panic", "the job is lost" }, dir)
    end)

    it("--binary with a --starts subset fails without leaving the JSON output behind", function()
      -- the binary cache has one row per item, so a subset cannot fill it: refusing is fine,
      -- but a failed run must not leave its JSON output (and should fail before the GPU work)
      local dir = input(good)
      local rc, out, err = run(dir, { "--starts", "0,1", "--binary", dir .. "/x.bin" })
      if rc == 0 then
        local c = diversity.open_binary_cache(dir .. "/x.bin")
        assert.are.equal(4, c:n())
        c:close()
      else
        assert_failed_cleanly(rc, out, err, { "x.bin" }, dir)
        assert.is_false(H.exists(dir .. "/x.bin"))
      end
    end)
  end)

  -----------------------------------------------------------------------------------------------
  -- Both engines: auto (gram on lavapipe; the gram engine replays the prefix on the device) and
  -- scan (the running sums rebuilt on the host).
  for _, MODE in ipairs { "auto", "scan" } do
  describe("device loss and --resume, --mode " .. MODE, function()
    local N = 120
    local dir, starts

    setup(function()
      -- the first 120 fortunes, so that --starts 0..119 is every row and the binary cache fills
      dir = H.tmpdir()
      H.first_fortunes(dir .. "/e.json", N)
      starts = H.start_list(N)
    end)

    local function args(name, extra)
      local a = { "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. name .. ".json",
        "--top-k", "12", "--batch", "40", "--starts", starts, "--binary",
        dir .. "/" .. name .. ".bin", "--mode", MODE }
      return H.extend(a, extra)
    end

    it("an interrupted run resumes to byte-identical output", function()
      local rc, _, err = H.cli(args("full"), EPOCH)
      assert.are.equal(0, rc, err)
      local full_json, full_bin = H.read(dir .. "/full.json"), H.read(dir .. "/full.bin")
      assert.are.equal(4 + N * 13 * 4, #full_bin)
      local j = H.json_file(dir .. "/full.json")
      assert.are.equal(N, #j.sequences.__keys)
      assert.are.equal("2023-11-14T22:13:20Z", j.metadata.generated_at)
      assert.is_false(H.exists(dir .. "/full.json.partial"))

      -- the 4th submission reports device loss: batch 2 (probe done, the rest lost)
      local out
      rc, out, err = H.cli(args("cut"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=3")
      assert.are_not.equal(0, rc, "the injected device loss did not fail the run: " .. out)
      assert.are.equal(1, rc, err)
      assert.truthy(err:find("batch 2 of 3", 1, true), err)
      assert.truthy(err:find("step 11", 1, true), err)
      assert.truthy(err:find("device lost", 1, true), err)
      assert.truthy(err:find("--resume", 1, true), err)
      assert.falsy(err:find("stack traceback", 1, true), err)
      assert.is_true(H.exists(dir .. "/cut.json.partial"))
      assert.is_false(H.exists(dir .. "/cut.json"))
      assert.is_false(H.exists(dir .. "/cut.bin"))
      assert.are.same({}, H.temp_files(dir, "cut.json"))
      assert.are.same({}, H.temp_files(dir, "cut.bin"))

      -- resumed at another time: the output still carries the first run's generated_at
      rc, out, err = H.cli(args("cut", { "--resume" }), "SOURCE_DATE_EPOCH=1800000000")
      assert.are.equal(0, rc, err)
      assert.truthy(out:find("from the checkpoint", 1, true), out)
      assert.are.equal(full_json, H.read(dir .. "/cut.json"), "JSON differs after --resume")
      assert.are.equal(full_bin, H.read(dir .. "/cut.bin"), "binary differs after --resume")
      assert.is_false(H.exists(dir .. "/cut.json.partial"), "the checkpoint was not removed")
    end)

    it("a loss inside a batch resumes from its last chunk, byte-identical", function()
      -- One batch of all 120 sequences, one step per submission (a tiny watchdog target).
      local function one(name, extra)
        local a = args(name, { "--target-s", "0.000001" })
        a[8] = "120" -- --batch
        return H.extend(a, extra)
      end
      local rc, _, err = H.cli(one("whole"), EPOCH)
      assert.are.equal(0, rc, err)
      -- the probe (10 steps) is one submission, then one step each: the 2nd submission is lost
      rc, _, err = H.cli(one("mid"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=1")
      assert.are.equal(1, rc, err)
      assert.truthy(err:find("batch 1 of 1", 1, true), err)
      assert.truthy(err:find("steps 1..10 of batch 1", 1, true), err)
      assert.is_true(H.exists(dir .. "/mid.json.partial/batch-00001.part"))
      assert.is_false(H.exists(dir .. "/mid.json"))
      rc, _, err = H.cli(one("mid", { "--resume" }), EPOCH)
      assert.are.equal(0, rc, err)
      assert.are.equal(H.read(dir .. "/whole.json"), H.read(dir .. "/mid.json"))
      assert.are.equal(H.read(dir .. "/whole.bin"), H.read(dir .. "/mid.bin"))
      assert.is_false(H.exists(dir .. "/mid.json.partial"), "the checkpoint was not removed")
    end)

    it("--resume without a checkpoint is a fresh run", function()
      local rc, _, err = H.cli(args("fresh", { "--resume" }), EPOCH)
      assert.are.equal(0, rc, err)
      assert.are.equal(H.read(dir .. "/full.json"), H.read(dir .. "/fresh.json"))
      assert.are.equal(H.read(dir .. "/full.bin"), H.read(dir .. "/fresh.bin"))
      assert.is_false(H.exists(dir .. "/fresh.json.partial"))
    end)

    it("a device loss in the first batch leaves nothing behind", function()
      local rc, out, err = H.cli(args("first"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=0")
      assert_failed_cleanly(rc, out, err, { "batch 1 of 3", "device lost" }, dir, "first.json")
      assert.is_false(H.exists(dir .. "/first.bin"))
    end)

    it("--resume refuses a checkpoint of another run", function()
      local rc, _, err = H.cli(args("other"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=3")
      assert.are.equal(1, rc, err)
      assert.is_true(H.exists(dir .. "/other.json.partial"))
      -- the same output, another top-k
      local a = args("other", { "--resume" })
      a[6] = "11"
      rc, _, err = H.cli(a, EPOCH)
      assert.are.equal(1, rc, err)
      assert.truthy(err:find("belongs to another run", 1, true), err)
      assert.is_false(H.exists(dir .. "/other.json"))
      -- the same run in the other mode is another run too
      a = args("other", { "--resume" })
      a[#a] = nil
      a[#a] = MODE == "scan" and "gram" or "scan"
      a[#a + 1] = "--resume"
      rc, _, err = H.cli(a, EPOCH)
      assert.are.equal(1, rc, err)
      assert.truthy(err:find("belongs to another run", 1, true), err)
    end)

    it("--resume checks what it trusts: the input's content, every start, run.txt, each file",
      function()
      -- A run lost after its first batch: batch 1 complete (batch-00001.u32 + .sum), batch 2 in
      -- progress (a .part of checksummed blocks), run.txt.
      local d = H.tmpdir()
      H.first_fortunes(d .. "/e.json", N)
      local function a(extra)
        local x = { "--embeddings", d .. "/e.json", "--out", d .. "/r.json", "--top-k", "12",
          "--batch", "40", "--starts", starts, "--mode", MODE, "--target-s", "0.000001" }
        for _, v in ipairs(extra or {}) do x[#x + 1] = v end
        return x
      end
      local function lose()
        local rc, _, err = H.cli(a(), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=4")
        assert.are.equal(1, rc, err)
        assert.is_true(H.exists(d .. "/r.json.partial/batch-00001.u32"))
        assert.is_true(H.exists(d .. "/r.json.partial/batch-00001.u32.sum"))
        assert.is_true(H.exists(d .. "/r.json.partial/run.txt"))
      end
      local function refused(extra, words)
        local rc, out, err = H.cli(a(extra), EPOCH)
        assert.are.equal(1, rc, out .. err)
        for _, w in ipairs(words) do
          assert.truthy(err:find(w, 1, true), ("stderr %q lacks %q"):format(err, w))
        end
        assert.is_false(H.exists(d .. "/r.json"), "a refused resume wrote the output")
      end
      lose()
      -- The input edited in place (same path, same size): its checksum differs.
      local text = H.read(d .. "/e.json")
      local edited = text:gsub("0%.1", "0.2", 1)
      assert.are_not.equal(text, edited)
      H.write(d .. "/e.json", edited)
      refused({ "--resume" }, { "another run", "input_checksum" })
      H.write(d .. "/e.json", text)
      -- Other starts with the same count, first and last.
      local other = starts:gsub("^0,1,2,", "0,2,1,")
      refused({ "--resume", "--starts", other }, { "another run", "starts" })
      -- Another option that changes the bits.
      refused({ "--resume", "--center" }, { "another run", "center" })
      if MODE == "auto" then
        -- Other gram arithmetic (auto picks gram at this size) (named in the fingerprint as the engine resolves it).
        refused({ "--resume", "--plain-sums" }, { "another run", "summation" })
      end
      -- A finished batch edited (a value changed, the size kept), or its checksum removed.
      local ck = d .. "/r.json.partial/batch-00001.u32"
      local bytes = H.read(ck)
      H.write(ck, bytes:sub(1, 8) .. string.char((bytes:byte(9) + 1) % 256) .. bytes:sub(10))
      refused({ "--resume" }, { "batch-00001.u32", "changed", "checksum" })
      H.write(ck, bytes)
      local sum = H.read(ck .. ".sum")
      os.remove(ck .. ".sum")
      refused({ "--resume" }, { "batch-00001.u32", "checksum file is missing" })
      H.write(ck .. ".sum", sum)
      -- An in-progress batch's block edited.
      local part = d .. "/r.json.partial/batch-00002.part"
      if H.exists(part) then
        local p = H.read(part)
        H.write(part, p:sub(1, 20) .. string.char((p:byte(21) + 1) % 256) .. p:sub(22))
        refused({ "--resume" }, { "batch-00002.part", "checksum" })
        H.write(part, p)
      end
      -- No run.txt: nothing says whose checkpoint this is.
      local run = H.read(d .. "/r.json.partial/run.txt")
      os.remove(d .. "/r.json.partial/run.txt")
      refused({ "--resume" }, { "no run.txt" })
      H.write(d .. "/r.json.partial/run.txt", run)
      -- Put back as written, it resumes to the one-shot output.
      local rc, _, err = H.cli(a({ "--resume" }), EPOCH)
      assert.are.equal(0, rc, err)
      rc, _, err = H.cli({ "--embeddings", d .. "/e.json", "--out", d .. "/whole.json",
        "--top-k", "12", "--batch", "40", "--starts", starts, "--mode", MODE }, EPOCH)
      assert.are.equal(0, rc, err)
      assert.are.equal(H.read(d .. "/whole.json"), H.read(d .. "/r.json"))
    end)

    it("the output says the mode", function()
      local j = H.json_file(dir .. "/full.json")
      assert.are.equal(MODE == "scan" and "scan" or "gram", j.metadata.mode)
    end)
  end)
  end

  describe("an output is never an input; an empty job is an error", function()
    -- Run the command line in a fresh copy of the fortunes (e.json); it must be refused with
    -- every word of `words`, and the directory must be exactly as before: every input
    -- byte-identical, no output, temporary file, fp16 cache or checkpoint created.
    local function refused(args, words, prepare)
      local dir = H.fortunes_dir()
      if prepare then prepare(dir) end
      local before = H.snapshot(dir)
      local a = {}
      for _, x in ipairs(args) do a[#a + 1] = (x:gsub("^DIR", dir)) end
      local rc, out, err = H.cli(a, EPOCH)
      -- 2: a usage error the command line's parser refuses; 1: any other failure.
  assert.are.equal(words.status or 1, rc, "exit status " .. tostring(rc) .. ": " .. out .. err)
      for _, w in ipairs(words) do
        assert.truthy(err:find(w, 1, true), ("stderr %q does not contain %q"):format(err, w))
      end
      assert.falsy(err:find("stack traceback", 1, true), err)
      assert.are.same(before, H.snapshot(dir), "the refused run changed the directory")
    end

    it("--out naming the embeddings file, under its own name or another", function()
      refused({ "--embeddings", "DIR/e.json", "--out", "DIR/e.json" },
        { "--out", "e.json is also an input (--embeddings): refusing to overwrite it" })
      refused({ "--embeddings", "DIR/e.json", "--out", "DIR/./sub/../e.json" },
        { "is also an input (--embeddings)" }, function(dir) os.execute("mkdir " .. H.q(dir .. "/sub")) end)
      refused({ "--embeddings", "DIR/e.json", "--out", "DIR/link.json" },
        { "link.json is also an input (--embeddings)" },
        function(dir) os.execute("ln -s e.json " .. H.q(dir .. "/link.json")) end)
      refused({ "--embeddings", "DIR/e.json", "--out", "DIR/hard.json", "--precision", "fp32" },
        { "hard.json is also an input (--embeddings)" },
        function(dir) os.execute("ln " .. H.q(dir .. "/e.json") .. " " .. H.q(dir .. "/hard.json")) end)
    end)

    it("--binary naming the embeddings file", function()
      refused({ "--embeddings", "DIR/e.json", "--out", "DIR/out.json", "--binary", "DIR/e.json" },
        { "--binary", "is also an input (--embeddings): refusing to overwrite it" })
    end)

    it("--out naming the fp16 cache of the embeddings or its sidecars", function()
      refused({ "--embeddings", "DIR/e.json", "--out", "DIR/e.raw.fp16.bin" },
        { "is also an input (the fp16 cache of --embeddings)" })
      refused({ "--embeddings", "DIR/e.json", "--center", "--out", "DIR/e.mean-centered-v1.fp16.bin.json" },
        { "is also an input (the fp16 cache of --embeddings)" })
    end)

    it("--out whose checkpoint directory is the embeddings file", function()
      refused({ "--embeddings", "DIR/e.json.partial", "--out", "DIR/e.json" },
        { "the checkpoint directory of --out", "is also an input (--embeddings)" },
        function(dir) H.write(dir .. "/e.json.partial", H.read(dir .. "/e.json")) end)
    end)

    it("--out and --binary naming one file", function()
      refused({ "--embeddings", "DIR/e.json", "--out", "DIR/o.json", "--binary", "DIR/o.json" },
        { "--binary", "is also --out" })
    end)

    it("an empty --starts list leaves an existing cache alone", function()
      local keep = function(dir) H.write(dir .. "/out.json", '{"metadata":{},"sequences":{"fortune-0":[]}}') end
      for _, spec in ipairs({ "", ",,,", "," }) do
        refused({ "--embeddings", "DIR/e.json", "--out", "DIR/out.json", "--starts", spec },
          { "--starts gave no starts" }, keep)
      end
    end)
  end)

  H.it_left_no_validation(it, function() return ctx end)
end)
