-- Spreading one job over machines: `--shard i/n[:strided]` computes a slice of the
-- starts into a partial cache, `merge` puts the shards back together. Runs the command line on
-- the 300 bundled fortunes (ids as keys) in scan and gram mode and checks that the merged cache
-- is byte-identical to the one-shot run's; then every refusal: its message, and that nothing was
-- written.
local diversity = require "diversity"
local driver = require "diversity.driver"
local H = require "helpers"

local EPOCH = "SOURCE_DATE_EPOCH=1700000000"

-- Check a failed command: exit status 1, every word of `words` on stderr (no traceback), and no
-- `name` (nor its temporary file, nor a checkpoint) in `dir`.
local function assert_refused(rc, out, err, words, dir, name)
  -- 2: a usage error the command line's parser refuses; 1: any other failure.
  assert.are.equal(words.status or 1, rc, "exit status " .. tostring(rc) .. ": " .. out .. err)
  for _, w in ipairs(words) do
    assert.truthy(err:find(w, 1, true), ("stderr %q does not contain %q"):format(err, w))
  end
  assert.falsy(err:find("stack traceback", 1, true), err)
  assert.is_false(H.exists(dir .. "/" .. name), name .. " was written")
  assert.are.same({}, H.temp_files(dir, name), "a temporary file was left behind")
  assert.is_false(H.exists(dir .. "/" .. name .. ".partial"), "a checkpoint was left behind")
end

describe("--shard and merge", function()
  local dir

  setup(function()
    dir = H.fortunes_dir()
  end)

  teardown(function() H.cleanup() end)

  -- The command line on e.json with `extra` arguments, writing `name`.
  local function run(name, extra)
    local a = { "--embeddings", dir .. "/e.json", "--out", dir .. "/" .. name, "--top-k", "4",
      "--quiet" }
    for _, x in ipairs(extra or {}) do a[#a + 1] = x end
    return H.cli(a, EPOCH)
  end

  local function merge(out, parts)
    local a = { "merge", "--out", dir .. "/" .. out }
    for _, p in ipairs(parts) do a[#a + 1] = dir .. "/" .. p end
    return H.cli(a)
  end

  describe("the pieces", function()
    it("parse_shard: i/n contiguous by default, :strided", function()
      assert.are.same({ index = 2, count = 4, layout = "contiguous", spec = "2/4" },
        driver.parse_shard("2/4"))
      assert.are.same({ index = 1, count = 1, layout = "contiguous", spec = "1/1" },
        driver.parse_shard("1/1:contiguous"))
      assert.are.same({ index = 3, count = 3, layout = "strided", spec = "3/3" },
        driver.parse_shard("3/3:strided"))
      assert.are.same({ index = 2, count = 5, layout = "strided", spec = "2/5" },
        driver.parse_shard { index = 2, count = 5, layout = "strided" })
    end)

    it("parse_shard refuses 0/4, 5/4, 1/0 and junk", function()
      H.assert_error({ "--shard 0/4", "between 1 and 4" }, driver.parse_shard, "0/4")
      H.assert_error({ "--shard 5/4", "between 1 and 4" }, driver.parse_shard, "5/4")
      H.assert_error({ "--shard 1/0", "integer from 1" }, driver.parse_shard, "1/0")
      H.assert_error({ "--shard junk", "expected i/n" }, driver.parse_shard, "junk")
      H.assert_error({ "--shard 1/2:zigzag", ":strided" }, driver.parse_shard, "1/2:zigzag")
      H.assert_error({ "--shard -1/2", "expected i/n" }, driver.parse_shard, "-1/2")
      H.assert_error({ "--shard 1.5/2", "expected i/n" }, driver.parse_shard, "1.5/2")
      -- Once written as "1/-9223372036854775808": counts past 2^31 are refused.
      H.assert_error({ "--shard 1/99999999999999999999", "2^31" }, driver.parse_shard,
        "1/99999999999999999999")
      H.assert_error({ "2^31" }, driver.parse_shard, { index = 1, count = 2 ^ 40 })
    end)

    it("shard_starts: near-equal consecutive slices, or every n-th position", function()
      local s = { 10, 11, 12, 13, 14, 15, 16 }
      local function slice(spec) return driver.shard_starts(s, driver.parse_shard(spec)) end
      assert.are.same({ 10, 11, 12 }, slice("1/3"))
      assert.are.same({ 13, 14 }, slice("2/3"))
      assert.are.same({ 15, 16 }, slice("3/3"))
      assert.are.same({ 10, 13, 16 }, slice("1/3:strided"))
      assert.are.same({ 11, 14 }, slice("2/3:strided"))
      assert.are.same({ 12, 15 }, slice("3/3:strided"))
      assert.are.same(s, slice("1/1"))
      assert.are.same({}, driver.shard_starts({ 1, 2 }, driver.parse_shard("3/3")))
    end)

    it("starts_fingerprint is FNV-1a over the list's text", function()
      assert.are.equal("fnv1a32:811c9dc5", driver.starts_fingerprint({}))
      -- the same hash computed by Python
      local rc, out = H.python([[
h = 0x811c9dc5
for b in b"0,1,299":
    h = ((h ^ b) * 16777619) & 0xffffffff
print("fnv1a32:%08x" % h)
]])
      assert.are.equal(0, rc)
      assert.are.equal(out:match("%S+"), driver.starts_fingerprint({ 0, 1, 299 }))
      assert.are_not.equal(driver.starts_fingerprint({ 0, 1 }), driver.starts_fingerprint({ 1, 0 }))
    end)
  end)

  for _, MODE in ipairs { "scan", "gram" } do
    describe("--mode " .. MODE, function()
      -- scan: a batch larger than any shard (the metadata records the run's batch, not a shard's
      -- share); gram: its default batch (every sequence that fits next to G).
      local extra = MODE == "scan" and { "--mode", "scan", "--batch", "128" } or { "--mode", "gram" }
      local function args(more)
        local a = {}
        for _, x in ipairs(extra) do a[#a + 1] = x end
        for _, x in ipairs(more or {}) do a[#a + 1] = x end
        return a
      end
      local one

      setup(function()
        local rc, _, err = run(MODE .. "-one.json", args())
        assert(rc == 0, err)
        one = H.read(dir .. "/" .. MODE .. "-one.json")
      end)

      it("2 contiguous shards merge to the one-shot cache, byte for byte", function()
        for i = 1, 2 do
          local rc, out, err = run(("%s-c%d.json"):format(MODE, i), args { "--shard", i .. "/2" })
          assert.are.equal(0, rc, err)
          assert.truthy(out:find("150 sequences", 1, true), out)
          assert.truthy(out:find("shard " .. i .. "/2 contiguous", 1, true), out)
        end
        local j = H.json_file(dir .. "/" .. MODE .. "-c2.json")
        local m = j.metadata
        assert.are.equal("2/2", m.shard)
        assert.are.equal("contiguous", m.shard_layout)
        assert.are.equal(300, m.shard_starts_total)
        local all = {}
        for s = 0, 299 do all[#all + 1] = s end
        assert.are.equal(driver.starts_fingerprint(all), m.shard_starts_fingerprint)
        assert.are.equal(150, #j.sequences.__keys)
        assert.are.equal("fortune-150", j.sequences.__keys[1])
        local whole = H.json_file(dir .. "/" .. MODE .. "-one.json").metadata
        assert.are.equal(whole.batch_size, m.batch_size)
        if MODE == "scan" then assert.are.equal(128, m.batch_size) end
        -- shards in any order
        local rc, out, err = merge(MODE .. "-cm.json", { MODE .. "-c2.json", MODE .. "-c1.json" })
        assert.are.equal(0, rc, err)
        assert.truthy(out:find("merged 2 contiguous shard(s), 300 sequences", 1, true), out)
        assert.are.equal(one, H.read(dir .. "/" .. MODE .. "-cm.json"), "merged cache differs")
        assert.are.same({}, H.temp_files(dir, MODE .. "-cm.json"))
      end)

      it("3 strided shards merge to the one-shot cache, byte for byte", function()
        for i = 1, 3 do
          local rc, out, err = run(("%s-s%d.json"):format(MODE, i),
            args { "--shard", i .. "/3:strided" })
          assert.are.equal(0, rc, err)
          assert.truthy(out:find("100 sequences", 1, true), out)
        end
        local j = H.json_file(dir .. "/" .. MODE .. "-s2.json")
        assert.are.equal("strided", j.metadata.shard_layout)
        assert.are.same({ "fortune-1", "fortune-4", "fortune-7" },
          { j.sequences.__keys[1], j.sequences.__keys[2], j.sequences.__keys[3] })
        -- through the Lua API this time
        local r = diversity.merge_caches(dir .. "/" .. MODE .. "-sm.json",
          { dir .. "/" .. MODE .. "-s3.json", dir .. "/" .. MODE .. "-s1.json",
            dir .. "/" .. MODE .. "-s2.json" })
        assert.are.same({ shards = 3, layout = "strided", sequences = 300 }, r)
        assert.are.equal(one, H.read(dir .. "/" .. MODE .. "-sm.json"), "merged cache differs")
      end)
    end)
  end

  it("a --starts list is split in its own order (uneven: 3 + 2 + 2)", function()
    local starts = "17,3,250,8,99,0,42"
    local base = { "--mode", "scan", "--starts", starts }
    local rc, _, err = run("l-one.json", base)
    assert.are.equal(0, rc, err)
    local want = { { 17, 3, 250 }, { 8, 99 }, { 0, 42 } }
    for i = 1, 3 do
      local a = { "--mode", "scan", "--starts", starts, "--shard", i .. "/3" }
      rc, _, err = run("l" .. i .. ".json", a)
      assert.are.equal(0, rc, err)
      local keys = H.json_file(dir .. "/l" .. i .. ".json").sequences.__keys
      local expect = {}
      for k, s in ipairs(want[i]) do expect[k] = "fortune-" .. s end
      assert.are.same(expect, keys)
    end
    rc, _, err = merge("l-m.json", { "l3.json", "l1.json", "l2.json" })
    assert.are.equal(0, rc, err)
    assert.are.equal(H.read(dir .. "/l-one.json"), H.read(dir .. "/l-m.json"))
    -- more shards than starts: the last ones are empty, and still merge
    for i = 1, 3 do
      rc, _, err = run("e" .. i .. ".json", { "--mode", "scan", "--starts", "5,6",
        "--shard", i .. "/3:strided" })
      assert.are.equal(0, rc, err)
    end
    assert.are.equal(0, #H.json_file(dir .. "/e3.json").sequences.__keys)
    rc, _, err = run("e-one.json", { "--mode", "scan", "--starts", "5,6" })
    assert.are.equal(0, rc, err)
    rc, _, err = merge("e-m.json", { "e1.json", "e2.json", "e3.json" })
    assert.are.equal(0, rc, err)
    assert.are.equal(H.read(dir .. "/e-one.json"), H.read(dir .. "/e-m.json"))
  end)

  it("shards on several devices record the one-shot run's batch size", function()
    -- one device opened twice: batches default to about four a device, sized to the starts a run
    -- computes; a shard's metadata says the whole run's
    local a = { "--mode", "scan", "--devices", "0,0" }
    local rc, _, err = run("d-one.json", a)
    assert.are.equal(0, rc, err)
    assert.are.equal(38, H.json_file(dir .. "/d-one.json").metadata.batch_size) -- ceil(300 / 8)
    for i = 1, 2 do
      rc, _, err = run("d" .. i .. ".json", { "--mode", "scan", "--devices", "0,0",
        "--shard", i .. "/2" })
      assert.are.equal(0, rc, err)
    end
    assert.are.equal(38, H.json_file(dir .. "/d1.json").metadata.batch_size)
    rc, _, err = merge("d-m.json", { "d1.json", "d2.json" })
    assert.are.equal(0, rc, err)
    assert.are.equal(H.read(dir .. "/d-one.json"), H.read(dir .. "/d-m.json"))
  end)

  describe("refusals", function()
    -- A fresh copy of the input: a run refused before its work also leaves no fp16 cache.
    local fresh = H.fortunes_dir

    it("bad --shard specs, before any work or file", function()
      local d = fresh()
      for spec, words in pairs {
        ["0/4"] = { "--shard 0/4", "between 1 and 4" },
        ["5/4"] = { "--shard 5/4", "between 1 and 4" },
        ["1/0"] = { "--shard 1/0", "integer from 1" },
        ["junk"] = { "--shard junk", "expected i/n" },
        ["2/4:diagonal"] = { "--shard 2/4:diagonal", ":strided" },
      } do
        local rc, out, err = H.cli({ "--embeddings", d .. "/e.json", "--out", d .. "/o.json",
          "--shard", spec })
        words.status = 2
        assert_refused(rc, out, err, words, d, "o.json")
      end
      local rc, out, err = H.cli({ "--embeddings", d .. "/e.json", "--out", d .. "/o.json",
        "--shard" })
      assert_refused(rc, out, err, { "--shard needs a value", status = 2 }, d, "o.json")
      -- driver.run itself refuses it too (before opening a device)
      H.assert_error({ "--shard 3/2" }, driver.run,
        { embeddings = d .. "/e.json", out = d .. "/o.json", shard = "3/2", quiet = true })
      assert.are.same({ "e.json" }, H.ls(d), "a refused run wrote files")
    end)

    it("--binary with --shard", function()
      local d = fresh()
      local rc, out, err = H.cli({ "--embeddings", d .. "/e.json", "--out", d .. "/o.json",
        "--shard", "1/2", "--binary", d .. "/o.bin" })
      assert_refused(rc, out, err, { "--binary", "--shard" }, d, "o.json")
      assert.are.same({ "e.json" }, H.ls(d), "a refused run wrote files")
    end)

    it("merge: a missing shard", function()
      local rc, out, err = merge("x.json", { "scan-s1.json", "scan-s3.json" })
      assert_refused(rc, out, err, { "2/3", "missing" }, dir, "x.json")
    end)

    it("merge: a duplicated shard", function()
      H.write(dir .. "/dup.json", H.read(dir .. "/scan-s2.json"))
      local rc, out, err = merge("x.json", { "scan-s1.json", "scan-s2.json", "dup.json",
        "scan-s3.json" })
      assert_refused(rc, out, err, { "dup.json", "2/3", "twice" }, dir, "x.json")
    end)

    it("merge: parts of different runs", function()
      -- another top-k
      local rc, _, err = run("k5.json", { "--mode", "scan", "--batch", "128", "--top-k", "5",
        "--shard", "2/2" })
      assert.are.equal(0, rc, err)
      local out
      rc, out, err = merge("x.json", { "scan-c1.json", "k5.json" })
      assert_refused(rc, out, err, { "k5.json", "not a shard of the same run", "top_k" }, dir,
        "x.json")
      -- another mode
      rc, out, err = merge("x.json", { "scan-c1.json", "gram-c2.json" })
      assert_refused(rc, out, err, { "gram-c2.json", 'mode = "gram" here, "scan" there' }, dir,
        "x.json")
      -- another layout, another split
      rc, out, err = merge("x.json", { "scan-s1.json", "scan-c2.json" })
      assert_refused(rc, out, err, { "scan-c2.json" }, dir, "x.json")
      -- a whole cache is no shard
      rc, out, err = merge("x.json", { "scan-c1.json", "scan-one.json" })
      assert_refused(rc, out, err, { "scan-one.json", "not a shard" }, dir, "x.json")
    end)

    it("merge: a shard of another table, an edited shard, a shard without checksums", function()
      H.write(dir .. "/keep.json", "old")
      local function refused(parts, words)
        local rc, out, err = merge("keep.json", parts)
        assert.are.equal(1, rc, table.concat(parts, " ") .. ": " .. out .. err)
        for _, w in ipairs(words) do
          assert.truthy(err:find(w, 1, true), ("stderr %q does not contain %q"):format(err, w))
        end
        assert.are.equal("old", H.read(dir .. "/keep.json"), "the refused merge wrote")
        assert.are.same({}, H.temp_files(dir, "keep.json"))
      end
      -- the same options on a table whose first value differs: its metadata is the run's but
      -- for the table's checksum
      local text = H.read(H.DATA_JSON)
      local _, e0 = text:find('"embedding"%s*:%s*%[%s*%-?%d+%.')
      local d = e0 + 1 -- the first value's first decimal
      local c = text:sub(d, d) == "1" and "2" or "1"
      H.write(dir .. "/e2.json", text:sub(1, d - 1) .. c .. text:sub(d + 1))
      local rc, _, err = H.cli({ "--embeddings", dir .. "/e2.json", "--out", dir .. "/t2.json",
        "--top-k", "4", "--quiet", "--mode", "scan", "--batch", "128", "--shard", "2/2" }, EPOCH)
      assert.are.equal(0, rc, err)
      refused({ "scan-c1.json", "t2.json" }, { "t2.json", "computed from another table" })
      -- a byte of a row changed (a row that still passes every other check: two entries swapped)
      local s2 = H.read(dir .. "/scan-c2.json")
      local a, b = s2:match('%["fortune%-150","(fortune%-%d+)","(fortune%-%d+)"')
      assert.truthy(a and b, "the first row")
      local from = '"' .. a .. '","' .. b .. '"'
      local i = s2:find(from, 1, true)
      H.write(dir .. "/ed.json", s2:sub(1, i - 1) .. '"' .. b .. '","' .. a .. '"' .. s2:sub(i + #from))
      refused({ "scan-c1.json", "ed.json" }, { "ed.json", "do not match its checksum", "recompute" })
      -- a shard from before shards carried checksums
      H.write(dir .. "/old.json", (s2:gsub(',"checksum":"fnv1a64:%x+"', "", 1)))
      refused({ "scan-c1.json", "old.json" }, { "old.json", 'no "checksum"', "recompute shard 2/2" })
      -- the run's own shards still merge, through the driver too
      local r = driver.merge { out = dir .. "/ok.json", inputs = { dir .. "/scan-c2.json",
        dir .. "/scan-c1.json" } }
      assert.are.equal(300, r.sequences)
      H.assert_error({ "ed.json", "checksum" }, driver.merge,
        { out = dir .. "/keep.json", inputs = { dir .. "/scan-c1.json", dir .. "/ed.json" } })
      assert.are.equal("old", H.read(dir .. "/keep.json"))
    end)

    it("merge: a failed merge leaves an existing output untouched", function()
      H.write(dir .. "/keep.json", "old")
      local rc, _, err = merge("keep.json", { "scan-c1.json" })
      assert.are.equal(1, rc)
      assert.truthy(err:find("2/2", 1, true), err)
      assert.are.equal("old", H.read(dir .. "/keep.json"))
      assert.are.same({}, H.temp_files(dir, "keep.json"))
    end)

    it("merge: usage errors", function()
      local rc, out, err = H.cli({ "merge", dir .. "/scan-c1.json" })
      assert.are.equal(2, rc, out)
      assert.truthy(err:find("--out", 1, true), err)
      rc, out, err = merge("x.json", {})
      assert_refused(rc, out, err, { "no shard files" }, dir, "x.json")
      rc, out, err = H.cli({ "merge", "--out", dir .. "/x.json", "--bogus" })
      assert_refused(rc, out, err, { "unknown argument --bogus", status = 2 }, dir, "x.json")
      rc, out, err = merge("x.json", { "scan-c1.json", "nope.json" })
      assert_refused(rc, out, err, { "nope.json" }, dir, "x.json")
    end)
  end)

  it("merge --out naming one of its own inputs is refused; the input is untouched", function()
    local d = H.tmpdir()
    local shard = '{"metadata":{"shard":"1/2"},"sequences":{}}'
    H.write(d .. "/s1.json", shard)
    H.write(d .. "/s2.json", shard)
    os.execute("ln -s s2.json " .. H.q(d .. "/link.json"))
    for _, out in ipairs({ "s1.json", "./s2.json", "link.json" }) do
      local before = H.snapshot(d)
      local rc, o, err = H.cli({ "merge", "--out", d .. "/" .. out, d .. "/s1.json", d .. "/s2.json" })
      assert.are.equal(1, rc, o .. err)
      assert.truthy(err:find("diversity: merge: --out " .. d .. "/" .. out
        .. " is also an input (shard file): refusing to overwrite it", 1, true), err)
      assert.are.same(before, H.snapshot(d), "the refused merge changed the directory")
    end
    -- the Rust function refuses too (the API, without the driver)
    H.assert_error({ "also an input", "s1.json" }, diversity.merge_caches, d .. "/s1.json",
      { d .. "/s1.json", d .. "/s2.json" })
    assert.are.equal(shard, H.read(d .. "/s1.json"))
  end)
end)
