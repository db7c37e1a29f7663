-- The integrity classes, through every front end they reach (the Lua API, the command line, the
-- vk_compute shim, the C ABI): a reader applies its writer's checks (index files' row norms), a
-- resume takes nothing it cannot verify (the shim's start_from), a device selector names one
-- device or is refused, every environment setting parses strictly, and a directory option names
-- a directory. Each refusal is checked for its message and for leaving every file as it was.
local ffi = require "ffi"
local bit = require "bit"
local diversity = require "diversity"
local vk = require "vk_compute"
local H = require "helpers"

pcall(ffi.cdef, [[
typedef struct VkComputeContext VkComputeContext;
VkComputeContext* vkc_init(bool enable_validation);
void vkc_destroy(VkComputeContext* ctx);
const char* vkc_last_error(void);
]])

-- `f()` with the environment variable `name` set to `value` (nil: unset), restored after.
local function with_env(name, value, f)
  local old = os.getenv(name)
  if value == nil then ffi.C.unsetenv(name) else ffi.C.setenv(name, value, 1) end
  local ok, e = pcall(f)
  if old == nil then ffi.C.unsetenv(name) else ffi.C.setenv(name, old, 1) end
  if not ok then error(e, 0) end
end

-- FNV-1a 64 of `s`, as the index files end (little-endian, 8 bytes).
local function fnv64(s)
  local h = 0xcbf29ce484222325ULL
  for i = 1, #s do h = bit.bxor(h, s:byte(i)) * 0x100000001b3ULL end
  return ffi.string(ffi.new("uint64_t[1]", h), 8)
end

-- `bytes` (an index file) with the first row of its first non-empty list replaced by `d` copies
-- of `v`, and its checksum recomputed, as any writer of the documented format could: `first` is
-- the byte where the lists' sizes start, `per_row` the bytes a row takes before its values in a
-- list (ids and codes), `row_bytes` the bytes of a list's row block per row.
local function edit_first_row(bytes, nlist, first, d, v, id_and_code, m)
  local sizes, o = {}, first + nlist * 8
  for l = 0, nlist - 1 do
    sizes[l] = tonumber(ffi.cast("const uint64_t*", bytes:sub(first + 1 + l * 8, first + 8 + l * 8))[0])
  end
  for l = 0, nlist - 1 do
    local size = sizes[l]
    if size > 0 then
      local at = o + size * id_and_code -- ids (8 bytes) and codes (m bytes) of the list first
      local row = ffi.new("float[?]", d)
      for j = 0, d - 1 do row[j] = v end
      local out = bytes:sub(1, at) .. ffi.string(row, d * 4) .. bytes:sub(at + d * 4 + 1, #bytes - 8)
      return out .. fnv64(out)
    end
    o = o + size * (id_and_code + d * 4)
  end
  error("no list holds a row")
end

-- The bytes of index `ix` trained on and holding `t`, saved to `path` (`ix` is closed).
local function saved_bytes(ix, t, path)
  ix:train(t)
  ix:add(t)
  ix:save(path)
  ix:close()
  return H.read(path)
end

describe("integrity", function()
  local ctx, dir
  H.context_for(setup, teardown, function(c, d) ctx, dir = c, d end)

  describe("a reader applies its writer's row checks", function()
    it("an IVF-Flat file holding a row add() refuses is refused, at every metric and precision", function()
      local rows = H.random_rows(200, 6, 31)
      local t = diversity.table(rows)
      for _, case in ipairs {
        { "cosine", "fp32", 1e-41, "norm" }, { "cosine", "fp32", 2 ^ -45, "norm" },
        { "l2", "fp32", 2 ^ 45, "norm" }, { "ip", "fp16", 1e5, "outside the float16 range" },
        { "cosine", "fp16", 2 ^ 45, "outside the float16 range" },
      } do
        local metric, precision, v, why = case[1], case[2], case[3], case[4]
        local ix = diversity.ivf_index(ctx, 6, { nlist = 4, metric = metric, precision = precision, iters = 3 })
        local bytes = saved_bytes(ix, t, dir .. "/good.ivf")
        -- The writer's own check, for the record: add() refuses such a row.
        local ix2 = diversity.ivf_index(ctx, 6, { nlist = 4, metric = metric, precision = precision, iters = 3 })
        ix2:train(t)
        local bad_row = {}
        for j = 1, 6 do bad_row[j] = v end
        H.assert_error("diversity.ivf:add: row 0 ", ix2.add, ix2, diversity.table({ bad_row }))
        ix2:close()
        local bad = dir .. "/bad.ivf"
        local edited = edit_first_row(bytes, 4, 40 + 4 * 6 * 4, 6, v, 8)
        H.write(bad, edited)
        local before = H.snapshot(dir)
        H.assert_error({ "diversity.load_ivf_index: ", "bad.ivf", "list ", "row 0 ", why,
          "the file was edited or written by another program" }, diversity.load_ivf_index, ctx, bad)
        assert.are.same(before, H.snapshot(dir))
        -- The same file with an ordinary row loads (the edit itself is not what is refused).
        H.write(bad, edit_first_row(bytes, 4, 40 + 4 * 6 * 4, 6, 0.25, 8))
        diversity.load_ivf_index(ctx, bad):close()
      end
      H.assert_no_validation(ctx)
    end)

    it("an IVF-PQ file whose kept rows add() refuses is refused", function()
      local t = diversity.table(H.random_rows(300, 8, 32))
      local ix = diversity.ivfpq_index(ctx, 8, { nlist = 2, m = 2, metric = "l2", refine = true, iters = 2 })
      local bytes = saved_bytes(ix, t, dir .. "/good.ivfpq")
      local first = 48 + 2 * 8 * 4 + 256 * 8 * 4
      for _, v in ipairs { 1e-41, 2 ^ 45 } do
        local bad = dir .. "/bad.ivfpq"
        H.write(bad, edit_first_row(bytes, 2, first, 8, v, 8 + 2))
        local before = H.snapshot(dir)
        H.assert_error({ "diversity.load_ivfpq_index: ", "bad.ivfpq", "list ", "has norm" },
          diversity.load_ivfpq_index, ctx, bad)
        assert.are.same(before, H.snapshot(dir))
      end
      H.write(dir .. "/bad.ivfpq", edit_first_row(bytes, 2, first, 8, 0.5, 8 + 2))
      diversity.load_ivfpq_index(ctx, dir .. "/bad.ivfpq"):close()
      os.remove(dir .. "/bad.ivfpq")
      os.remove(dir .. "/good.ivfpq")
    end)
  end)

  describe("the shim's start_from resume trusts nothing it cannot verify", function()
    local N, dim = 30, 8
    local A = H.flatten(H.random_rows(N, dim, 41))
    local B = H.flatten(H.random_rows(N, dim, 42))
    local vctx

    setup(function() vctx = vk.init(true) end)
    teardown(function() vk.shutdown(vctx) end)

    it("refuses rows written for another table, rows that are no sequences, and appends nothing", function()
      local pa, pb = dir .. "/a.bin", dir .. "/b.bin"
      vk.compute_all_diversity_sequences(vctx, A, N, dim, pa)
      vk.compute_all_diversity_sequences(vctx, B, N, dim, pb)
      local fa, fb = H.read(pa), H.read(pb)
      assert.are_not.equal(fa, fb)
      local row = function(full, s) return full:sub(5 + s * N * 4, 4 + (s + 1) * N * 4) end
      local head = fa:sub(1, 4)
      local path = dir .. "/resume.bin"
      local function rows_of(list)
        local parts = { head }
        for s = 0, #list - 1 do parts[#parts + 1] = row(list[s + 1], s) end
        return table.concat(parts)
      end
      local cases = {
        -- rows 0-9 of table A, resumed on table B
        { rows_of { fa, fa, fa, fa, fa, fa, fa, fa, fa, fa }, "is not this table's sequence" },
        -- B's rows but for the last one, A's
        { rows_of { fb, fb, fb, fb, fb, fb, fb, fb, fb, fa }, "the row of start 9 is not this table's" },
        -- ten rows of zeros
        { head .. string.rep("\0", 10 * N * 4), "are not diversity sequences of N = 30" },
        -- B's rows 0 and 1 swapped
        { (function()
            local p = { head, row(fb, 1), row(fb, 0) }
            for s = 2, 9 do p[#p + 1] = row(fb, s) end
            return table.concat(p)
          end)(), "starts with 1, not its start 0" },
      }
      for i, case in ipairs(cases) do
        H.write(path, case[1])
        local before = H.snapshot(dir)
        H.assert_error({ "vk_compute.compute_all_diversity_sequences", "resume.bin", case[2],
          "nothing was appended" }, vk.compute_all_diversity_sequences, vctx, B, N, dim, path, 10)
        assert.are.same(before, H.snapshot(dir), "case " .. i)
      end
      -- B's own rows resume, and the file becomes B's whole file.
      H.write(path, fb:sub(1, 4 + 10 * N * 4))
      vk.compute_all_diversity_sequences(vctx, B, N, dim, path, 10)
      assert.are.equal(fb, H.read(path))
      -- every row present (start_from = N): checked too, nothing computed or appended
      H.write(path, fa)
      H.assert_error("is not this table's sequence", vk.compute_all_diversity_sequences, vctx, B, N, dim, path, N)
      assert.are.equal(fa, H.read(path))
      for _, p in ipairs { pa, pb, path } do os.remove(p) end
    end)
  end)

  describe("a device selector names one device or is refused", function()
    local count = #diversity.devices()
    local listing = "0: "

    it("the Lua API: an index past the last, a number that is no index", function()
      for _, sel in ipairs { tostring(count), tostring(count + 4), "99999999999999999999" } do
        H.assert_error({ "diversity.open: ", "index " .. sel .. " is out of range", listing },
          diversity.open, { device = sel })
      end
      for _, sel in ipairs { "-1", "1.0", "1e0", "+0" } do
        H.assert_error({ "diversity.open: ", "is a number but not a device index", listing },
          diversity.open, { device = sel })
      end
      H.assert_error({ "no device name contains 'no-such-gpu'", listing }, diversity.open,
        { device = "no-such-gpu" })
      -- and an index, a unique part of a name and a UUID choose the device
      local d0 = diversity.devices()[1]
      for _, sel in ipairs { "0", d0.uuid } do
        local c = diversity.open { device = sel }
        assert.are.equal(d0.name, c:caps().name)
        c:close()
      end
    end)

    it("DIVERSITY_DEVICE: the command line, the shim and the C ABI refuse it, writing nothing", function()
      local sel = tostring(count)
      local before = H.snapshot(dir)
      local rc, out, err = H.cli({ "--embeddings", "data/fortunes-300.embeddings.json",
        "--out", dir .. "/x.json", "--top-k", "3", "--quiet" }, "DIVERSITY_DEVICE=" .. sel)
      assert.are.equal(1, rc, out .. err)
      assert.truthy(err:find("index " .. sel .. " is out of range", 1, true), err)
      assert.falsy(err:find("stack traceback", 1, true), err)
      rc, out, err = H.cli({ "--embeddings", "data/fortunes-300.embeddings.json",
        "--out", dir .. "/x.json", "--top-k", "3", "--quiet", "--device", "1.0" })
      assert.are.equal(1, rc, out .. err)
      assert.truthy(err:find("is a number but not a device index", 1, true), err)
      assert.are.same(before, H.snapshot(dir))
      with_env("DIVERSITY_DEVICE", sel, function()
        H.assert_error({ "vk_compute.init", "out of range" }, vk.init, false)
        local lib = ffi.load(os.getenv("VK_COMPUTE_LIB") or "target/lua/diversity.so")
        local c = lib.vkc_init(false)
        assert.is_true(c == nil)
        assert.truthy(ffi.string(lib.vkc_last_error()):find("index " .. sel .. " is out of range", 1, true))
      end)
    end)
  end)

  describe("every environment setting parses strictly", function()
    local args = { "--embeddings", "data/fortunes-300.embeddings.json", "--top-k", "3", "--quiet",
      "--device", "host" }

    it("refuses what does not parse, naming the variable, before any file is written", function()
      for _, case in ipairs {
        { "DIVERSITY_HOST_MEMORY=1x", "DIVERSITY_HOST_MEMORY=\"1x\": expected a byte count or a size" },
        { "DIVERSITY_HOST_MEMORY=abc", "DIVERSITY_HOST_MEMORY=\"abc\"" },
        { "DIVERSITY_HOST_MEMORY=-1", "DIVERSITY_HOST_MEMORY=\"-1\"" },
        { "DIVERSITY_HOST_MEMORY=1e9", "DIVERSITY_HOST_MEMORY=\"1e9\"" },
        { "DIVERSITY_HOST_MEMORY=0x100000", "DIVERSITY_HOST_MEMORY=\"0x100000\"" },
        { "DIVERSITY_HOST_MEMORY=18446744073709551616", "too large" },
        { "RAYON_NUM_THREADS=100000", "RAYON_NUM_THREADS=\"100000\": expected a whole number of threads" },
        { "RAYON_NUM_THREADS=two", "RAYON_NUM_THREADS=\"two\"" },
        { "DIVERSITY_L2_BYTES=lots", "DIVERSITY_L2_BYTES=\"lots\"" },
        { "DIVERSITY_DISABLE=fp17", "'fp17' is not one of" },
        { "DIVERSITY_SCAN_KERNEL=block65", "DIVERSITY_SCAN_KERNEL=\"block65\": expected one of" },
        { "DIVERSITY_VALIDATION=yes", "DIVERSITY_VALIDATION=\"yes\": expected 1 (on) or 0 (off)" },
        { "DIVERSITY_IVF_QUEUE=6", "DIVERSITY_IVF_QUEUE=\"6\"" },
        { "DIVERSITY_PQ_TABLE_MAX_BYTES=2GB", "DIVERSITY_PQ_TABLE_MAX_BYTES=\"2GB\"" },
        { "SOURCE_DATE_EPOCH=yesterday", "SOURCE_DATE_EPOCH=\"yesterday\": expected whole seconds" },
        { "SOURCE_DATE_EPOCH=1.5", "SOURCE_DATE_EPOCH=\"1.5\"" },
      } do
        local before = H.snapshot(dir)
        local a = { unpack(args) }
        a[#a + 1] = "--out"; a[#a + 1] = dir .. "/env.json"
        local rc, out, err = H.cli(a, case[1])
        assert.are.equal(1, rc, case[1] .. ": " .. out .. err)
        assert.truthy(err:find(case[2], 1, true), case[1] .. ": " .. err)
        assert.falsy(err:find("stack traceback", 1, true), err)
        assert.are.same(before, H.snapshot(dir), case[1])
      end
    end)

    it("accepts the units the command line accepts", function()
      for _, env in ipairs { "DIVERSITY_HOST_MEMORY=1G", "DIVERSITY_HOST_MEMORY=1536m",
        "RAYON_NUM_THREADS=1", "DIVERSITY_HOST_MEMORY=1073741824 SOURCE_DATE_EPOCH=1700000000" } do
        local a = { unpack(args) }
        a[#a + 1] = "--out"; a[#a + 1] = dir .. "/env-ok.json"
        local rc, out, err = H.cli(a, env)
        assert.are.equal(0, rc, env .. ": " .. out .. err)
        os.remove(dir .. "/env-ok.json")
      end
    end)

    it("the Lua API and the C ABI refuse it too", function()
      with_env("DIVERSITY_HOST_MEMORY", "1x", function()
        H.assert_error({ "diversity.open: ", "DIVERSITY_HOST_MEMORY=\"1x\"" }, diversity.open, {})
        H.assert_error({ "diversity.open: ", "DIVERSITY_HOST_MEMORY=\"1x\"" }, diversity.open, { device = "host" })
        H.assert_error({ "vk_compute.init", "DIVERSITY_HOST_MEMORY" }, vk.init, false)
        local lib = ffi.load(os.getenv("VK_COMPUTE_LIB") or "target/lua/diversity.so")
        assert.is_true(lib.vkc_init(false) == nil)
        assert.truthy(ffi.string(lib.vkc_last_error()):find("DIVERSITY_HOST_MEMORY=\"1x\"", 1, true))
      end)
    end)
  end)

  describe("a directory option names a directory", function()
    it("--cache-dir naming a file, a FIFO, a device or nothing is refused, writing nothing", function()
      local file = dir .. "/plain-file"
      H.write(file, "keep me")
      -- The FIFO lives outside `dir`: H.snapshot opens every file it lists, and opening a FIFO
      -- waits for a writer.
      local elsewhere = H.tmpdir()
      assert.are.equal(0, (H.sh("mkfifo " .. H.q(elsewhere .. "/fifo"))))
      for _, case in ipairs {
        { file, "is a regular file, not a directory" },
        { elsewhere .. "/fifo", "is a FIFO, not a directory" },
        { "/dev/null", "is a character device, not a directory" },
        { dir .. "/missing", "no such directory" },
      } do
        local before = H.snapshot(dir)
        local rc, out, err = H.cli({ "--embeddings", "data/fortunes-300.embeddings.json",
          "--out", dir .. "/cd.json", "--top-k", "2", "--quiet", "--precision", "fp16",
          "--cache-dir", case[1] })
        assert.are.equal(2, rc, out .. err)
        assert.truthy(err:find("--cache-dir " .. case[1] .. " " .. case[2], 1, true)
          or err:find("--cache-dir " .. case[1] .. ": " .. case[2], 1, true), err)
        assert.are.same(before, H.snapshot(dir))
        -- the driver called from Lua refuses it the same way
        local driver = require "diversity.driver"
        H.assert_error({ "--cache-dir " .. case[1] }, driver.run, { embeddings =
          "data/fortunes-300.embeddings.json", out = dir .. "/cd.json", top_k = 2, quiet = true,
          precision = "fp16", cache_dir = case[1] })
        assert.are.same(before, H.snapshot(dir))
      end
      assert.are.equal("keep me", H.read(file))
      os.remove(file)
      os.remove(elsewhere .. "/fifo")
    end)
  end)

  describe("the messages a failed or refused run ends with", function()
    local EPOCH = "SOURCE_DATE_EPOCH=1700000000"
    local function args(name, extra)
      local a = { "--embeddings", "data/fortunes-300.embeddings.json", "--out", dir .. "/" .. name .. ".json",
        "--top-k", "12", "--batch", "100", "--chunk", "4", "--mode", "gram", "--quiet" }
      return H.extend(a, extra)
    end

    it("a run.txt with a key twice is named by its line, never \"another run ()\"", function()
      local rc, out, err = H.cli(args("dup"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=4")
      assert.are.equal(1, rc, out .. err)
      local run = dir .. "/dup.json.partial/run.txt"
      local text = H.read(run)
      local first = text:match("^[^\n]*\n")
      H.write(run, first .. text)
      local before = H.snapshot(dir .. "/dup.json.partial")
      rc, out, err = H.cli(args("dup", { "--resume" }), EPOCH)
      assert.are.equal(1, rc, out .. err)
      assert.falsy(err:find("()", 1, true), err)
      assert.truthy(err:find("line 2 of its run.txt reads '" .. first:sub(1, -2) .. "'", 1, true), err)
      assert.are.same(before, H.snapshot(dir .. "/dup.json.partial"))
      assert.is_false(H.exists(dir .. "/dup.json"))
    end)

    it("a checkpoint of other key sums names the flags that resume it, and they do", function()
      -- A Vulkan device's gram arithmetic (the host engine's does not depend on these flags):
      -- the device the suite names, else index 0, whose shaders run even where it is a CPU.
      local named = os.getenv("DIVERSITY_DEVICE")
      local device = (named and named ~= "" and named:lower() ~= "host") and named or "0"
      local function on_device(name, extra)
        local a = args(name, extra)
        a[#a + 1] = "--device"; a[#a + 1] = device
        return a
      end
      local rc, out, err = H.cli(on_device("sums"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=4")
      assert.are.equal(1, rc, out .. err)
      local saved = H.read(dir .. "/sums.json.partial/run.txt"):match("summation=([^\n]*)")
      rc, out, err = H.cli(on_device("sums", { "--resume", "--compensated-sums", "--no-judge" }), EPOCH)
      assert.are.equal(1, rc, out .. err)
      assert.truthy(err:find("belongs to another run", 1, true), err)
      local hint = err:match("in the checkpoint %(([^)]*)%)")
      assert.truthy(hint, err)
      -- The flags the hint names (none, for fixed-point keys) resume the run.
      local flags = {}
      if not hint:find("resume without", 1, true) then
        for f in hint:gmatch("%-%-[%w-]+") do flags[#flags + 1] = f end
      else
        assert.are.equal("fixed; G dot64", saved)
      end
      flags[#flags + 1] = "--resume"
      rc, out, err = H.cli(on_device("sums", flags), EPOCH)
      assert.are.equal(0, rc, saved .. " resumed with " .. table.concat(flags, " ") .. ": " .. out .. err)
      rc, out, err = H.cli(on_device("sums-fresh", flags), EPOCH)
      assert.are.equal(0, rc, out .. err)
      assert.are.equal(H.read(dir .. "/sums-fresh.json"), H.read(dir .. "/sums.json"))
    end)

    it("a directory planted at a batch file's name is named as itself and leaves no .tmp", function()
      local rc, out, err = H.cli(args("plant"), EPOCH .. " DIVERSITY_FAIL_AFTER_CHUNKS=1")
      assert.are.equal(1, rc, out .. err)
      local ck = dir .. "/plant.json.partial"
      assert.is_true(H.exists(ck .. "/batch-00001.part"))
      assert.are.equal(0, (H.sh("mkdir " .. H.q(ck .. "/batch-00001.u32"))))
      rc, out, err = H.cli(args("plant", { "--resume" }), EPOCH)
      assert.are.equal(1, rc, out .. err)
      assert.truthy(err:find("batch-00001.u32 is a directory, not a regular file", 1, true), err)
      assert.falsy(err:find("u32.tmp", 1, true), err)
      for _, n in ipairs(H.ls(ck)) do assert.falsy(n:find("%.tmp$"), n) end
      assert.is_false(H.exists(dir .. "/plant.json"))
    end)

    describe("through the driver, with a batch file's write failing", function()
      local driver = require "diversity.driver"
      local orig = driver.write_batch
      after_each(function() driver.write_batch = orig end)
      local function run(name)
        return H.error_of(driver.run, { embeddings = "data/fortunes-300.embeddings.json",
          out = dir .. "/" .. name .. ".json", top_k = 12, batch = 100, chunk = 4, mode = "gram",
          quiet = true })
      end

      it("a full disk: the batch whose file failed is not counted as checkpointed", function()
        local calls = 0
        driver.write_batch = function(path, bytes, binding)
          calls = calls + 1
          if calls == 2 then error("diversity: checkpoint " .. path .. ": No space left on device", 0) end
          return orig(path, bytes, binding)
        end
        local e = run("full")
        assert.truthy(e:find("No space left on device", 1, true), e)
        assert.truthy(e:find("1 completed batch(es)", 1, true), e)
        assert.truthy(e:find("run again with --resume", 1, true), e)
        assert.is_true(H.exists(dir .. "/full.json.partial/batch-00001.u32"))
        assert.is_false(H.exists(dir .. "/full.json.partial/batch-00002.u32"))
      end)

      it("a checkpoint another run removed is not offered to --resume", function()
        driver.write_batch = function(path)
          -- the winner of two runs to one --out finished and removed the checkpoint
          H.sh("rm -rf " .. H.q(dir .. "/lost.json.partial"))
          error("diversity: checkpoint " .. path .. ": No such file or directory", 0)
        end
        local e = run("lost")
        assert.truthy(e:find("no longer holds this run's checkpoint", 1, true), e)
        assert.truthy(e:find("run again without --resume", 1, true), e)
        assert.falsy(e:find("run again with --resume", 1, true), e)
      end)
    end)
  end)
end)
