-- Outputs that are not regular files: a FIFO, a directory, a device such as /dev/null (through
-- a symlink too) is refused by every writer, the command line and the shim before any device
-- work, and is never renamed over nor opened for writing; and the shim's output is not truncated
-- before the work that fills it has started. The special files are made in a temporary
-- directory; /dev/null itself is only handed to calls that refuse before opening anything.
local diversity = require "diversity"
local vk = require "vk_compute"
local H = require "helpers"

-- Whether `path` is (still) a FIFO, a directory, a symlink, asked of the shell (never opened).
local function test_sh(flag, path)
  return (H.sh("test " .. flag .. " " .. H.q(path))) == 0
end

-- A directory with a FIFO `fifo`, a directory `sub` and a symlink `link` to a FIFO `target`.
local function specials()
  local dir = H.tmpdir()
  assert.are.equal(0, (H.sh(("cd %s && mkfifo fifo target && mkdir sub && ln -s target link")
    :format(H.q(dir)))))
  return dir
end

-- The specials are as they were, and nothing else is in `dir` but `extra` names.
local function assert_untouched(dir, extra)
  assert.is_true(test_sh("-p", dir .. "/fifo"), "fifo replaced")
  assert.is_true(test_sh("-d", dir .. "/sub"), "sub replaced")
  assert.is_true(test_sh("-L", dir .. "/link") and test_sh("-p", dir .. "/target"),
    "link replaced")
  local want = { "fifo", "link", "sub", "target" }
  for _, n in ipairs(extra or {}) do want[#want + 1] = n end
  table.sort(want)
  assert.are.same(want, H.ls(dir))
end

-- Run a LuaJIT script in a child process with a time limit (a FIFO opened for writing would
-- block for ever): rc, stdout, stderr.
local function child(script)
  return H.sh(("%s timeout 60 luajit -e %s"):format(H.lua_env(), H.q(script)))
end

describe("outputs that are not regular files", function()
  teardown(function() H.cleanup() end)

  it("diversity.file_kind names what a path is, without opening it", function()
    local dir = specials()
    H.write(dir .. "/plain", "x")
    assert.are.equal("file", diversity.file_kind(dir .. "/plain"))
    assert.are.equal("FIFO", diversity.file_kind(dir .. "/fifo"))
    assert.are.equal("FIFO", diversity.file_kind(dir .. "/link"))
    assert.are.equal("directory", diversity.file_kind(dir .. "/sub"))
    assert.are.equal("character device", diversity.file_kind("/dev/null"))
    assert.is_nil(diversity.file_kind(dir .. "/missing"))
  end)

  it("every writer of the module refuses them, naming the path", function()
    local dir = specials()
    local t = diversity.table({ { 1, 0 }, { 0, 1 }, { 0.5, 0.5 } })
    local sum = "fnv1a64:0123456789abcdef"
    local ctx = diversity.open {}
    local dt = ctx:upload(t, "fp32")
    local ix = diversity.ivf_index(ctx, 2, { nlist = 1, metric = "l2", iters = 2 })
    ix:train(t)
    ix:add(t)
    for _, name in ipairs { "fifo", "sub", "link" } do
      local p = dir .. "/" .. name
      local words = { p, name == "sub" and "is a directory" or "is a FIFO", "not a regular file" }
      H.assert_error(words, diversity.json_cache_writer, p, {})
      H.assert_error(words, diversity.binary_cache_writer, p, 3, 3)
      H.assert_error(words, t.save_fp16_bin, t, p, "raw", sum)
      H.assert_error(words, diversity.save_ids, p, t, sum)
      H.assert_error(words, dt.write_rankings_cache, dt, t, p, { top_k = 1 })
      H.assert_error(words, dt.write_knn_graph, dt, t, p, { k = 1 })
      H.assert_error(words, ix.save, ix, p)
      H.assert_error(words, vk.write_sequences_to_file, { [0] = { 0, 1, 2 }, { 1, 0, 2 },
        { 2, 0, 1 } }, p)
    end
    ix:close(); dt:close(); ctx:close(); t:close()
    assert_untouched(dir)
  end)

  it("the command line refuses --out, --binary and the checkpoint place before any work", function()
    local dir = specials()
    os.execute(("cp %s %s/e.json"):format(H.q(H.DATA_JSON), H.q(dir)))
    local function refused(args, words)
      local argv = { "--embeddings", dir .. "/e.json", "--precision", "fp32", "--top-k", "3" }
      local function at(s) return (s:gsub("DIR", function() return dir end)) end
      for _, a in ipairs(args) do argv[#argv + 1] = at(a) end
      local rc, _, err = H.cli(argv)
      assert.are.equal(1, rc, err)
      for _, w in ipairs(words) do
        assert.truthy(err:find(at(w), 1, true), err)
      end
      assert.falsy(err:find("^mode "), "device work started: " .. err)
    end
    refused({ "--out", "DIR/fifo" },
      { "diversity: --out DIR/fifo is a FIFO, not a regular file: refusing to write over it" })
    refused({ "--out", "DIR/link" }, { "--out DIR/link is a FIFO" })
    refused({ "--out", "DIR/sub" }, { "--out DIR/sub is a directory, not a regular file" })
    refused({ "--out", "DIR/o.json", "--binary", "DIR/fifo" }, { "--binary DIR/fifo is a FIFO" })
    -- the checkpoint directory is a directory when it exists: anything else there is refused
    H.write(dir .. "/c.json.partial", "not a directory")
    refused({ "--out", "DIR/c.json" },
      { "the checkpoint directory of --out DIR/c.json.partial is a file, not a directory" })
    os.remove(dir .. "/c.json.partial")
    -- merge's --out as well
    local rc, _, err = H.cli({ "merge", "--out", dir .. "/fifo", dir .. "/e.json" })
    assert.are.equal(1, rc, err)
    assert.truthy(err:find("--out " .. dir .. "/fifo is a FIFO", 1, true), err)
    assert_untouched(dir, { "e.json" })
    assert.are.equal(H.read(H.DATA_JSON), H.read(dir .. "/e.json"))
  end)

  it("the shim refuses them before any device work", function()
    local dir = specials()
    local flat = H.flatten(H.random_rows(6, 4, 7))
    local ctx = vk.init(false)
    for _, name in ipairs { "sub", "link" } do
      local p = dir .. "/" .. name
      local kind = name == "sub" and "is a directory" or "is a FIFO"
      H.assert_error({ "vk_compute.compute_all_diversity_sequences", p, kind },
        vk.compute_all_diversity_sequences, ctx, flat, 6, 4, p, 0)
      H.assert_error({ "vk_compute.compute_all_diversity_sequences", p, kind },
        vk.compute_all_diversity_sequences, ctx, flat, 6, 4, p, 2)
    end
    -- /dev/null is refused before it is opened
    H.assert_error({ "vk_compute.compute_all_diversity_sequences", "/dev/null",
      "is a character device" }, vk.compute_all_diversity_sequences, ctx, flat, 6, 4, "/dev/null")
    vk.shutdown(ctx)
    assert_untouched(dir)
    -- a FIFO, in a child process (opening it for writing would block)
    local script = ([[
      package.path = "tests/lua/?.lua;" .. package.path
      local vk = require "vk_compute"
      local H = require "helpers"
      local dir = %q
      local ctx = vk.init(false)
      local flat = H.flatten(H.random_rows(6, 4, 7))
      local ok, e = pcall(vk.compute_all_diversity_sequences, ctx, flat, 6, 4, dir .. "/fifo", 0)
      assert(not ok and e:find("is a FIFO", 1, true), tostring(e))
      H.write(dir .. "/e.json", H.read(H.DATA_JSON))
      ok, e = pcall(vk.generate_similarity_matrix_gpu_parallel, dir .. "/e.json", "m", false, 1,
        3, dir .. "/fifo")
      assert(not ok and e:find("output_file " .. dir .. "/fifo is a FIFO", 1, true), tostring(e))
      vk.shutdown(ctx)
      print("refused")
    ]]):format(dir)
    local rc, out, err = child(script)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("refused"), out .. err)
    os.remove(dir .. "/e.json")
    assert_untouched(dir)
  end)
end)

describe("the shim's sequence file", function()
  teardown(function() H.cleanup() end)

  it("is left as it was when the work fails before its first rows (a closed context)", function()
    local dir = H.tmpdir()
    local N, dim = 20, 6
    local flat = H.flatten(H.random_rows(N, dim, 99))
    local path = dir .. "/all.bin"
    local ctx = vk.init(false)
    vk.compute_all_diversity_sequences(ctx, flat, N, dim, path)
    local before = H.read(path)
    assert.are.equal(4 + N * N * 4, #before)
    vk.shutdown(ctx)
    local e = H.error_of(vk.compute_all_diversity_sequences, ctx, flat, N, dim, path, 0)
    assert.truthy(e:find("vk_compute.compute_all_diversity_sequences", 1, true), e)
    assert.are.equal(before, H.read(path))
    assert.are.same({ "all.bin" }, H.ls(dir))
    -- a missing directory is still refused up front, leaving nothing
    ctx = vk.init(false)
    H.assert_error({ "vk_compute.compute_all_diversity_sequences", "cannot write",
      dir .. "/no/x.bin" }, vk.compute_all_diversity_sequences, ctx, flat, N, dim,
      dir .. "/no/x.bin", 0)
    -- and a fresh run replaces the file whole, its sequences as before
    local again = vk.compute_all_diversity_sequences(ctx, flat, N, dim, path, 0)
    vk.shutdown(ctx)
    assert.are.equal(before, H.read(path))
    assert.are.same({ "all.bin" }, H.ls(dir))
    local back = vk.load_sequences_from_file(path)
    for s = 0, N - 1 do assert.are.same(again[s], back[s]) end
  end)
end)
