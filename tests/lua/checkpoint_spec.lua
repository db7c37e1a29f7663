-- The cache job's checkpoint (`<out>.partial/`) and --resume, through the command line: every
-- checkpoint file is bound to its run and its place (a fresh run clears what an earlier run
-- left; a resume refuses a file written for another run or batch, swapped, copied, planted or
-- rewritten with a recomputed checksum, naming it); the checkpoint outlives a failure to write
-- the outputs; and an fp16 `.bin` input keeps the space its sidecar records.
local diversity = require "diversity"
local driver = require "diversity.driver"
local H = require "helpers"

local EPOCH = "SOURCE_DATE_EPOCH=1700000000"
local N = 120

describe("checkpoint", function()
  local dir

  setup(function()
    dir = H.tmpdir()
    H.first_fortunes(dir .. "/e.json", N)
  end)

  teardown(function() H.cleanup() end)

  -- 3 batches of 40 starts, 12 steps; one step a submission after the 10-step probe, so a
  -- batch takes 3 submissions: DIVERSITY_FAIL_AFTER_CHUNKS=7 stops a run with batches 1 and 2
  -- finished and batch 3 in progress.
  local function args(name, extra)
    local a = { "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. name .. ".json",
      "--top-k", "12", "--batch", "40", "--starts", H.start_list(N), "--target-s", "0.000001",
      "--binary", dir .. "/" .. name .. ".bin" }
    return H.extend(a, extra)
  end

  -- Run `name` again with --resume: `from` batches come from the checkpoint, the output is the
  -- uninterrupted run's bytes, and no checkpoint is left.
  local function assert_resumes(name, from, want_json, want_bin)
    local rc, out, err = H.cli(args(name, { "--resume" }), EPOCH)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find(from .. " from the checkpoint", 1, true), out)
    assert.are.equal(want_json, H.read(dir .. "/" .. name .. ".json"), "JSON differs after --resume")
    assert.are.equal(want_bin, H.read(dir .. "/" .. name .. ".bin"), "binary differs after --resume")
    assert.is_false(H.exists(dir .. "/" .. name .. ".json.partial"))
  end

  local function ck(name, file) return dir .. "/" .. name .. ".json.partial/" .. file end

  -- A run of `name` lost after `chunks` submissions.
  local function lose(name, chunks, extra)
    local rc, out, err = H.cli(args(name, extra), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=" .. chunks)
    assert.are.equal(1, rc, out .. err)
    assert.truthy(err:find("--resume", 1, true), err)
  end

  -- The uninterrupted run's outputs, for comparisons.
  local function one_shot(name, extra)
    local rc, _, err = H.cli(args(name, extra), EPOCH)
    assert.are.equal(0, rc, err)
    return H.read(dir .. "/" .. name .. ".json"), H.read(dir .. "/" .. name .. ".bin")
  end

  it("a fresh run clears what an earlier run left, so a resume takes only its own batches",
    function()
      local want_json, want_bin = one_shot("whole")
      -- A --center run lost with batches 1 and 2 finished and batch 3 begun …
      lose("stale", 7, { "--center" })
      assert.is_true(H.exists(ck("stale", "batch-00002.u32")))
      assert.is_true(H.exists(ck("stale", "batch-00003.part")))
      -- … then a fresh run without --center, lost inside batch 2: the --center run's files go.
      lose("stale", 4)
      assert.is_true(H.exists(ck("stale", "batch-00001.u32")))
      assert.is_false(H.exists(ck("stale", "batch-00002.u32")), "a stale batch was kept")
      assert.is_false(H.exists(ck("stale", "batch-00002.u32.sum")), "a stale checksum was kept")
      assert.is_false(H.exists(ck("stale", "batch-00003.part")), "a stale part was kept")
      assert_resumes("stale", 1, want_json, want_bin)
    end)

  it("a resume refuses batch files swapped, copied, planted or rewritten, naming the file",
    function()
      local want_json, want_bin = one_shot("whole2")
      lose("r", 7)
      local names = { "batch-00001.u32", "batch-00001.u32.sum", "batch-00002.u32",
        "batch-00002.u32.sum", "batch-00003.part", "run.txt" }
      local orig = {}
      for _, f in ipairs(names) do
        assert.is_true(H.exists(ck("r", f)), f .. " missing")
        orig[f] = H.read(ck("r", f))
      end
      -- An earlier output at --out: a refused resume leaves it byte-identical.
      H.write(dir .. "/r.json", "an older cache")
      local function restore()
        for _, f in ipairs(names) do H.write(ck("r", f), orig[f]) end
        os.remove(ck("r", "batch-00003.u32"))
        os.remove(ck("r", "batch-00003.u32.sum"))
      end
      local function refused(file, words)
        local rc, out, err = H.cli(args("r", { "--resume" }), EPOCH)
        assert.are.equal(1, rc, out .. err)
        assert.truthy(err:find(ck("r", file), 1, true), ("stderr %q does not name %s"):format(err, file))
        for _, w in ipairs(words or {}) do
          assert.truthy(err:find(w, 1, true), ("stderr %q lacks %q"):format(err, w))
        end
        assert.falsy(err:find("stack traceback", 1, true), err)
        assert.are.equal("an older cache", H.read(dir .. "/r.json"), "the output was clobbered")
        assert.is_false(H.exists(dir .. "/r.bin"), "a refused resume wrote --binary")
        assert.are.same({}, H.temp_files(dir, "r.json"))
        assert.are.same({}, H.temp_files(dir, "r.bin"))
        restore()
      end
      local function put(file, bytes) H.write(ck("r", file), bytes) end
      local run_text = orig["run.txt"]
      local function list(b)
        local l = {}
        for i = (b - 1) * 40, b * 40 - 1 do l[#l + 1] = i end
        return l
      end

      -- Two finished batches swapped, each with its checksum file.
      put("batch-00001.u32", orig["batch-00002.u32"]); put("batch-00001.u32.sum", orig["batch-00002.u32.sum"])
      put("batch-00002.u32", orig["batch-00001.u32"]); put("batch-00002.u32.sum", orig["batch-00001.u32.sum"])
      refused("batch-00001.u32", { "checksum", "another run or batch" })
      -- One copied over another.
      put("batch-00002.u32", orig["batch-00001.u32"]); put("batch-00002.u32.sum", orig["batch-00001.u32.sum"])
      refused("batch-00002.u32", { "checksum" })
      -- A batch planted ahead of the run (the unfinished batch 3).
      put("batch-00003.u32", orig["batch-00001.u32"]); put("batch-00003.u32.sum", orig["batch-00001.u32.sum"])
      refused("batch-00003.u32", { "checksum" })
      -- Zeroed, with its checksum recomputed the way the driver computes it: the rows are
      -- checked as the readers check them.
      local zeros = ("\0"):rep(#orig["batch-00002.u32"])
      put("batch-00002.u32", zeros)
      put("batch-00002.u32.sum", driver.batch_checksum(driver.batch_binding(run_text, 2, list(2)), zeros))
      refused("batch-00002.u32", { "row 1 starts with 0, not its start 40" })
      -- A row that repeats an entry, and one past N, checksums recomputed.
      local b1 = orig["batch-00001.u32"]
      local bind1 = driver.batch_binding(run_text, 1, list(1))
      local twice = b1:sub(1, 4) .. b1:sub(1, 4) .. b1:sub(9)
      put("batch-00001.u32", twice); put("batch-00001.u32.sum", driver.batch_checksum(bind1, twice))
      refused("batch-00001.u32", { "row 1 (start 0) holds 0 twice" })
      local past = b1:sub(1, 4) .. "\255\0\0\0" .. b1:sub(9)
      put("batch-00001.u32", past); put("batch-00001.u32.sum", driver.batch_checksum(bind1, past))
      refused("batch-00001.u32", { "not below N = 120" })
      -- An unfinished batch's steps rewritten as zeros with a valid block checksum.
      local part = orig["batch-00003.part"]
      local have = (#part - 16) / (40 * 4)
      assert.are.equal(math.floor(have), have, "batch 3 holds one block")
      os.remove(ck("r", "batch-00003.part"))
      driver.append_part(ck("r", "batch-00003.part"), 0, have, ("\0"):rep(#part - 16),
        driver.batch_binding(run_text, 3, list(3)))
      refused("batch-00003.part", { "starts with 0, not its start 80" })
      -- The unfinished batch's steps from another run (a --center run lost at the same place).
      lose("c", 7, { "--center" })
      put("batch-00003.part", H.read(ck("c", "batch-00003.part")))
      refused("batch-00003.part", { "checksum" })
      -- run.txt's start time edited: the batch files are another run's; garbled, run.txt is.
      put("run.txt", (run_text:gsub("generated_at=%d%d%d%d", "generated_at=1999")))
      refused("batch-00001.u32", { "checksum" })
      put("run.txt", (run_text:gsub("generated_at=[^\n]*", "generated_at=soon")))
      refused("run.txt", { "changed" })

      -- A temporary batch file and a checksum file without its batch (a failure between the
      -- two writes) are not taken, and go with the rest of the checkpoint.
      put("batch-00003.u32.tmp", orig["batch-00001.u32"])
      put("batch-00003.u32.sum", orig["batch-00001.u32.sum"])

      -- Put back as written, it resumes to the uninterrupted run's bytes.
      assert_resumes("r", 2, want_json, want_bin)
    end)

  -- driver.run with the writer `which` ("json_cache_writer" or "binary_cache_writer") failing
  -- at its finish, as a full disk fails the final write.
  local function run_failing_finish(which, name)
    local real = diversity[which]
    diversity[which] = function(...)
      local w = real(...)
      return setmetatable({
        finish = function()
          w:close()
          error("diversity." .. which .. ": No space left on device (injected)", 0)
        end,
      }, { __index = function(_, k) return function(_, ...) return w[k](w, ...) end end })
    end
    local ok, e = pcall(driver.run, { embeddings = dir .. "/e.json", out = dir .. "/" .. name .. ".json",
      binary = dir .. "/" .. name .. ".bin", top_k = 12, batch = 40, quiet = true })
    diversity[which] = real
    assert.is_false(ok, "the injected failure did not fail the run")
    return diversity.message(e)
  end

  for _, which in ipairs { "json_cache_writer", "binary_cache_writer" } do
    it("a failure writing the outputs (" .. which .. ") keeps the checkpoint; --resume "
      .. "writes them without computing again", function()
      local name = "full-" .. which
      local e = run_failing_finish(which, name)
      assert.truthy(e:find("No space left on device", 1, true), e)
      assert.truthy(e:find("--resume", 1, true), e)
      for b = 1, 3 do
        assert.is_true(H.exists(ck(name, ("batch-%05d.u32"):format(b))), "batch " .. b .. " lost")
      end
      assert.is_false(H.exists(dir .. "/" .. name .. ".bin"))
      assert.are.same({}, H.temp_files(dir, name .. ".json"))
      assert.are.same({}, H.temp_files(dir, name .. ".bin"))
      -- Any submission now fails: the resume computes nothing.
      local a = { "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. name .. ".json",
        "--binary", dir .. "/" .. name .. ".bin", "--top-k", "12", "--batch", "40", "--resume" }
      local rc, out, err = H.cli(a, "DIVERSITY_FAIL_AFTER_CHUNKS=0")
      assert.are.equal(0, rc, err)
      assert.truthy(out:find("3 from the checkpoint", 1, true), out)
      assert.is_false(H.exists(dir .. "/" .. name .. ".json.partial"))
      -- The same sequences as an uninterrupted run (generated_at is the first run's).
      local want_json, want_bin = one_shot("whole3")
      local function body(s) return s:gsub('"generated_at":"[^"]*"', "") end
      assert.are.equal(body(want_json), body(H.read(dir .. "/" .. name .. ".json")))
      assert.are.equal(want_bin, H.read(dir .. "/" .. name .. ".bin"))
    end)
  end
end)

describe("an fp16 .bin input keeps the space its sidecar records", function()
  teardown(function() H.cleanup() end)

  it("a mean-centred .bin is labelled mean-centered-v1, with or without --center", function()
    local dir = H.tmpdir()
    H.first_fortunes(dir .. "/e.json", 60)
    local function run(name, embeddings, extra)
      local a = { "--embeddings", embeddings, "--out", dir .. "/" .. name .. ".json", "--top-k",
        "8", "--binary", dir .. "/" .. name .. ".bin" }
      for _, x in ipairs(extra or {}) do a[#a + 1] = x end
      local rc, _, err = H.cli(a, EPOCH)
      assert.are.equal(0, rc, err)
      return H.json_file(dir .. "/" .. name .. ".json"), H.read(dir .. "/" .. name .. ".bin")
    end
    -- The --center run caches the centred fp16 table beside its input.
    local j, want = run("src", dir .. "/e.json", { "--center" })
    assert.are.equal("mean-centered-v1", j.metadata.space)
    local bin = dir .. "/e.mean-centered-v1.fp16.bin"
    assert.is_true(H.exists(bin))
    -- The cached file as the input: its rows are already centred.
    local jb, got = run("plain", bin)
    assert.are.equal("mean-centered-v1", jb.metadata.space)
    assert.are.equal(want, got, "a centred .bin gave other sequences")
    -- --center on it: accepted, not centred twice.
    local jc, got_c = run("again", bin, { "--center" })
    assert.are.equal("mean-centered-v1", jc.metadata.space)
    assert.are.equal(want, got_c, "the centred .bin was centred again")
    -- A raw .bin stays raw, and --center on it is refused.
    run("raw", dir .. "/e.json")
    local jr = run("rawbin", dir .. "/e.raw.fp16.bin")
    assert.are.equal("raw", jr.metadata.space)
    local rc, _, err = H.cli({ "--embeddings", dir .. "/e.raw.fp16.bin", "--out",
      dir .. "/no.json", "--center" }, EPOCH)
    assert.are.equal(1, rc, err)
    assert.truthy(err:find("holds raw rows", 1, true), err)
    assert.is_false(H.exists(dir .. "/no.json"))
  end)
end)

-- tests/lua/fixtures/checkpoint-v7/ is a checkpoint the driver wrote while the format still
-- lived in driver.lua (a --mode scan run of the bundled 300 fortunes, --top-k 12, --batch 100,
-- SOURCE_DATE_EPOCH=1700000000, lost after 7 submissions: batches 1 and 2 finished, steps 1..10
-- of batch 3 in its .part). The format now written in Rust reads it, and writes the same bytes.
describe("a checkpoint written before the format moved to Rust", function()
  local FIXTURE = "tests/lua/fixtures/checkpoint-v7"
  local FILES = { "batch-00001.u32", "batch-00001.u32.sum", "batch-00002.u32",
    "batch-00002.u32.sum", "batch-00003.part", "run.txt" }
  local dir
  setup(function() dir = H.tmpdir() end)
  teardown(function() H.cleanup() end)

  local function args(name, extra)
    local a = { "--embeddings", "data/fortunes-300.embeddings.json", "--out",
      dir .. "/" .. name .. ".json", "--mode", "scan", "--top-k", "12", "--batch", "100",
      "--target-s", "0.000001", "--cache-dir", dir }
    return H.extend(a, extra)
  end

  it("resumes, giving the uninterrupted run's bytes", function()
    local rc, _, err = H.cli(args("whole"), EPOCH)
    assert.are.equal(0, rc, err)
    os.execute("mkdir -p " .. H.q(dir .. "/old.json.partial"))
    for _, f in ipairs(FILES) do
      H.write(dir .. "/old.json.partial/" .. f, H.read(FIXTURE .. "/" .. f))
    end
    -- Another clock: the output's generated_at must come from the fixture's run.txt.
    local out
    rc, out, err = H.cli(args("old", { "--resume" }), "SOURCE_DATE_EPOCH=1800000000")
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("2 from the checkpoint", 1, true), out)
    assert.are.equal(H.read(dir .. "/whole.json"), H.read(dir .. "/old.json"))
    assert.is_false(H.exists(dir .. "/old.json.partial"))
  end)

  it("is what the run writes today, byte for byte", function()
    local rc, out, err = H.cli(args("new"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=7")
    assert.are.equal(1, rc, out .. err)
    for _, f in ipairs(FILES) do
      assert.are.equal(H.read(FIXTURE .. "/" .. f), H.read(dir .. "/new.json.partial/" .. f), f)
    end
    assert.are.same(FILES, driver.checkpoint_files(dir .. "/new.json.partial"))
  end)
end)
