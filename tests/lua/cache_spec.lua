-- The cache writers and the binary cache reader: diversity_cache.json keyed and
-- valued through the row ids, written to a temporary file and renamed on finish (an unfinished
-- writer leaves nothing behind); the uint32 binary cache and its one-row reader.
local ffi = require "ffi"
local diversity = require "diversity"
local H = require "helpers"

describe("cache writers", function()
  local ctx, dir
  local N, D = 12, 6
  local rows

  H.context_for(setup, teardown, function(c, d)
    ctx, dir = c, d
    rows = H.random_rows(N, D, 4242)
  end)

  -- A finished job over a table with `ids` for `starts`, and the idiomatic rows for checking.
  local function job_for(ids, starts, o)
    local t = diversity.table(rows, ids and { ids = ids } or nil)
    local dt = ctx:upload(t, "fp32")
    local job = dt:job(starts, o)
    job:step(N)
    return job, job:sequences()
  end

  local function letters()
    local ids = {}
    for i = 1, N do ids[i] = "item-" .. string.char(96 + i) end
    return ids
  end

  -- Every sequence written, by start: a job's rows, then map them through `ids`.
  local function all_rows(o)
    local _, s = job_for(nil, nil, o)
    return s
  end

  -----------------------------------------------------------------------------------------------
  describe("json_cache_writer", function()
    it("write_job / write / write_bytes then finish: keys and values mapped through string ids",
      function()
        local ids = letters()
        local seqs = all_rows()
        local path = dir .. "/cache.json"
        local meta = {
          model = "test-model", num_poems = N, algorithm = "diversity-sequence-v1",
          generated_at = "2023-11-14T22:13:20Z", batch_size = 4, top_k = N - 1, space = "raw",
          precision = "fp32", mode = "scan", device = ctx:name(), safety = 0.6, flag = true,
        }
        local w = diversity.json_cache_writer(path, meta, ids)
        -- the temporary file exists while writing, the destination not yet
        assert.are.equal(1, #H.temp_files(dir, "cache.json"))
        assert.is_false(H.exists(path))
        local job = job_for(ids, { 0, 2 })
        w:write_job(job)
        w:write(1, seqs[2])
        local bytes_job = job_for(nil, { 3, 4, 5 })
        w:write_bytes({ 3, 4, 5 }, bytes_job:sequences_bytes(), N)
        for s = 6, N - 1 do w:write(s, seqs[s + 1]) end
        w:finish()
        assert.is_true(H.exists(path))
        assert.are.same({}, H.temp_files(dir, "cache.json"))

        local j = H.json_file(path)
        assert.are.same({ "metadata", "sequences" }, j.__keys)
        for k, v in pairs(meta) do
          assert.are.equal(v, j.metadata[k], "metadata." .. k)
        end
        -- integers are written as integers
        local text = H.read(path)
        assert.truthy(text:find('"num_poems":12[,}]'), "num_poems not an integer")
        assert.truthy(text:find('"batch_size":4[,}]'), "batch_size not an integer")
        -- keys in write order, mapped through ids
        local order = { 0, 2, 1, 3, 4, 5 }
        for s = 6, N - 1 do order[#order + 1] = s end
        assert.are.equal(N, #j.sequences.__keys)
        for k, s in ipairs(order) do
          assert.are.equal(ids[s + 1], j.sequences.__keys[k])
          local got = j.sequences[ids[s + 1]]
          assert.are.equal(N, got.n)
          for p = 1, N do
            assert.are.equal(ids[seqs[s + 1][p] + 1], got[p])
          end
        end
      end)

    it("number ids: keys are their digits, values numbers", function()
      local ids = {}
      for i = 1, N do ids[i] = 1000 + 7 * i end
      local seqs = all_rows()
      local path = dir .. "/num.json"
      local w = diversity.json_cache_writer(path, { model = "m" }, ids)
      local job = job_for(ids)
      w:write_job(job)
      w:finish()
      local j = H.json_file(path)
      for s = 0, N - 1 do
        local got = j.sequences[tostring(ids[s + 1])]
        assert.is_table(got)
        for p = 1, N do
          assert.are.equal("number", type(got[p]))
          assert.are.equal(ids[seqs[s + 1][p] + 1], got[p])
        end
      end
      assert.truthy(H.read(path):find('"1007":%[1007,'))
    end)

    it("no ids: keys are 0-based starts, values 0-based indices", function()
      local seqs = all_rows()
      local path = dir .. "/plain.json"
      local w = diversity.json_cache_writer(path, {})
      w:write_job((job_for(nil, { 4, 0 })))
      w:finish()
      local j = H.json_file(path)
      assert.are.same({ "4", "0" }, j.sequences.__keys)
      for _, s in ipairs { 4, 0 } do
        local got = j.sequences[tostring(s)]
        for p = 1, N do assert.are.equal(seqs[s + 1][p], got[p]) end
      end
      assert.are.same({}, j.metadata.__keys)
    end)

    it("top-k rows", function()
      local ids = letters()
      local path = dir .. "/topk.json"
      local w = diversity.json_cache_writer(path, { top_k = 3 }, ids)
      local job = job_for(ids, { 1, 7 }, { steps = 3 })
      w:write_job(job)
      w:finish()
      local j = H.json_file(path)
      assert.are.equal(4, j.sequences[ids[2]].n)
      assert.are.equal(ids[2], j.sequences[ids[2]][1])
      assert.are.equal(ids[8], j.sequences[ids[8]][1])
    end)

    it("ids that need escaping stay valid JSON and read back equal", function()
      local ids = letters()
      ids[1] = 'quote " and \\ backslash'
      ids[2] = "new\nline\ttab"
      ids[3] = "unicode é ☃ 🎉"
      ids[4] = "</script>"
      local seqs = all_rows()
      local path = dir .. "/esc.json"
      local w = diversity.json_cache_writer(path, { model = 'a "quoted" model' }, ids)
      w:write_job((job_for(ids)))
      w:finish()
      local j = H.json_file(path)
      assert.are.equal('a "quoted" model', j.metadata.model)
      for s = 0, N - 1 do
        local got = j.sequences[ids[s + 1]]
        assert.is_table(got, "missing key " .. ids[s + 1])
        for p = 1, N do assert.are.equal(ids[seqs[s + 1][p] + 1], got[p]) end
      end
    end)

    it("refuses a repeated start, an index without an id, a wrong byte count — and goes on",
      function()
        local ids = letters()
        local seqs = all_rows()
        local path = dir .. "/refuse.json"
        local w = diversity.json_cache_writer(path, {}, ids)
        w:write(0, seqs[1])
        H.assert_error({ "json_cache:write", "start 0", "repeated" }, w.write, w, 0, seqs[1])
        local bad = {}
        for p = 1, N do bad[p] = seqs[2][p] end
        bad[5] = N
        H.assert_error({ "json_cache:write", "index " .. N }, w.write, w, 1, bad)
        H.assert_error({ "json_cache:write", "start " .. N, "out of range" }, w.write, w, N,
          seqs[1])
        H.assert_error({ "json_cache:write_bytes", "bytes" }, w.write_bytes, w, { 1 },
          ("\0"):rep(4 * N - 1), N)
        -- a refused batch claims nothing: starts 1 and 2 can still be written
        H.assert_error("repeated", w.write_bytes, w, { 1, 0 }, ("\0"):rep(8 * N), N)
        w:write(1, seqs[2])
        for s = 2, N - 1 do w:write(s, seqs[s + 1]) end
        w:finish()
        local j = H.json_file(path)
        assert.are.equal(N, #j.sequences.__keys)
        assert.are.equal(ids[1], j.sequences.__keys[1])
        assert.are.equal(ids[2], j.sequences.__keys[2])
      end)

    it("refuses duplicate ids, non-object metadata and a missing directory, leaving nothing",
      function()
        local ids = letters()
        ids[5] = ids[2]
        H.assert_error({ "json_cache_writer", "same id" }, diversity.json_cache_writer,
          dir .. "/dup.json", {}, ids)
        H.assert_error({ "json_cache_writer", "must be a JSON object" },
          diversity.json_cache_writer, dir .. "/meta.json", "metadata")
        H.assert_error({ "json_cache_writer", "does not exist" }, diversity.json_cache_writer,
          dir .. "/no/such/dir/x.json", {})
        H.assert_error({ "json_cache_writer", "directory" }, diversity.json_cache_writer, dir, {})
        -- metadata that contains itself, or nests past 64 tables: refused, not a stack overflow
        local loop = { model = "m" }
        loop.self = loop
        H.assert_error({ "json_cache_writer", "nested more than 64 deep", "contain itself" },
          diversity.json_cache_writer, dir .. "/loop.json", loop)
        local deep = {}
        for _ = 1, 100000 do deep = { deep } end
        H.assert_error({ "json_cache_writer", "nested more than 64 deep" },
          diversity.json_cache_writer, dir .. "/deep.json", { x = deep })
        local ok_deep = {}
        for _ = 1, 60 do ok_deep = { ok_deep } end
        diversity.json_cache_writer(dir .. "/ok.json", { x = ok_deep }):close()
        assert.is_false(H.exists(dir .. "/dup.json"))
        assert.is_false(H.exists(dir .. "/meta.json"))
        assert.is_false(H.exists(dir .. "/loop.json"))
        assert.is_false(H.exists(dir .. "/deep.json"))
        assert.are.same({}, H.temp_files(dir, "dup.json"))
        assert.are.same({}, H.temp_files(dir, "meta.json"))
        assert.are.same({}, H.temp_files(dir, "loop.json"))
        assert.are.same({}, H.temp_files(dir, "deep.json"))
      end)

    it("an unfinished writer (close or GC) leaves no file and no temporary file", function()
      local seqs = all_rows()
      local sub = dir .. "/unfinished"
      os.execute("mkdir " .. H.q(sub))
      local w = diversity.json_cache_writer(sub .. "/closed.json", { model = "m" })
      w:write(0, seqs[1])
      w:close()
      do
        local g = diversity.json_cache_writer(sub .. "/collected.json", { model = "m" })
        g:write(0, seqs[1])
        g:write(1, seqs[2])
      end
      collectgarbage("collect")
      collectgarbage("collect")
      assert.are.same({}, H.ls(sub))
    end)

    it("an unfinished writer leaves an existing destination untouched; finish replaces it whole",
      function()
        local seqs = all_rows()
        local path = dir .. "/existing.json"
        H.write(path, "OLD")
        local w = diversity.json_cache_writer(path, {})
        w:write(0, seqs[1])
        assert.are.equal("OLD", H.read(path))
        w:close()
        assert.are.equal("OLD", H.read(path))
        local w2 = diversity.json_cache_writer(path, {})
        w2:write(0, seqs[1])
        w2:finish()
        local j = H.json_file(path)
        assert.are.equal(N, j.sequences["0"].n)
        assert.are.same({}, H.temp_files(dir, "existing.json"))
      end)
  end)

  -----------------------------------------------------------------------------------------------
  describe("binary cache", function()
    it("binary_cache_writer + open_binary_cache round trip; sequence(s) reads one row", function()
      local seqs = all_rows()
      local path = dir .. "/seqs.bin"
      local w = diversity.binary_cache_writer(path, N) -- len defaults to N
      -- rows in any order, through every write call
      w:write_job((job_for(nil, { 7, 3 })))
      w:write_bytes({ 0, 11 }, (job_for(nil, { 0, 11 })):sequences_bytes(), N)
      for _, s in ipairs { 10, 9, 8, 6, 5, 4, 2, 1 } do w:write(s, seqs[s + 1]) end
      assert.is_false(H.exists(path))
      w:finish()
      assert.are.same({}, H.temp_files(dir, "seqs.bin"))
      local bytes = H.read(path)
      assert.are.equal(4 + N * N * 4, #bytes)
      local u = H.u32s(bytes)
      assert.are.equal(N, u[1])
      local c = diversity.open_binary_cache(path)
      assert.are.equal(N, c:n())
      assert.are.equal(N, c:len())
      for s = N - 1, 0, -1 do
        assert.are.same(seqs[s + 1], c:sequence(s))
        for p = 1, N do assert.are.equal(seqs[s + 1][p], u[1 + s * N + p]) end
      end
      H.assert_error({ "binary_cache:sequence", "out of range" }, c.sequence, c, N)
      H.assert_error({ "binary_cache:sequence", "out of range" }, c.sequence, c, -1)
      c:close()
    end)

    it("top-k rows: the reader infers the row length", function()
      local path = dir .. "/topk.bin"
      local job = job_for(nil, nil, { steps = 4 })
      local w = diversity.binary_cache_writer(path, N, 5)
      w:write_job(job)
      w:finish()
      assert.are.equal(4 + N * 5 * 4, #H.read(path))
      local c = diversity.open_binary_cache(path)
      assert.are.equal(5, c:len())
      assert.are.same(job:sequences()[4], c:sequence(3))
      c:close()
    end)

    it("missing rows are refused at finish, leaving no file", function()
      local seqs = all_rows()
      local path = dir .. "/partial.bin"
      local w = diversity.binary_cache_writer(path, N, N)
      for s = 0, N - 1 do if s ~= 4 and s ~= 9 then w:write(s, seqs[s + 1]) end end
      H.assert_error({ "binary_cache:finish", "2 of " .. N .. " rows are missing", "start 4" },
        w.finish, w)
      assert.is_false(H.exists(path))
      assert.are.same({}, H.temp_files(dir, "partial.bin"))
    end)

    it("refuses repeated rows, indices not below N, wrong lengths; GC leaves no file", function()
      local seqs = all_rows()
      local path = dir .. "/bad.bin"
      local w = diversity.binary_cache_writer(path, N, N)
      w:write(0, seqs[1])
      H.assert_error({ "binary_cache:write", "repeated" }, w.write, w, 0, seqs[1])
      local bad = {}
      for p = 1, N do bad[p] = seqs[2][p] end
      bad[3] = N
      H.assert_error({ "binary_cache:write", "index " .. N }, w.write, w, 1, bad)
      H.assert_error({ "binary_cache:write", "entries" }, w.write, w, 1, { 1, 0 })
      H.assert_error({ "binary_cache:write", "out of range" }, w.write, w, N, seqs[1])
      H.assert_error({ "binary_cache:write_bytes", "bytes" }, w.write_bytes, w, { 1 }, "abc", N)
      H.assert_error({ "binary_cache_writer", "N = 0" }, diversity.binary_cache_writer,
        dir .. "/zero.bin", 0)
      w = nil
      collectgarbage("collect")
      collectgarbage("collect")
      assert.is_false(H.exists(path))
      assert.are.same({}, H.temp_files(dir, "bad.bin"))
    end)

    it("open_binary_cache refuses a file whose size or entries are wrong", function()
      H.write(dir .. "/short.bin", "\5\0\0\0" .. ("\0"):rep(4 * 5 * 5 - 4))
      H.assert_error({ "open_binary_cache", "short.bin", "does not fit" },
        diversity.open_binary_cache, dir .. "/short.bin")
      H.write(dir .. "/zero-n.bin", "\0\0\0\0")
      H.assert_error({ "open_binary_cache", "N = 0" }, diversity.open_binary_cache,
        dir .. "/zero-n.bin")
      H.assert_error({ "open_binary_cache", "missing.bin" }, diversity.open_binary_cache,
        dir .. "/missing.bin")
      -- 2 rows of 2 where row 1 holds 7
      H.write(dir .. "/corrupt.bin", "\2\0\0\0" .. "\0\0\0\0\1\0\0\0" .. "\1\0\0\0\7\0\0\0")
      local c = diversity.open_binary_cache(dir .. "/corrupt.bin")
      assert.are.same({ 0, 1 }, c:sequence(0))
      H.assert_error({ "binary_cache:sequence", "corrupt" }, c.sequence, c, 1)
      c:close()
    end)
  end)

  H.it_left_no_validation(it, function() return ctx end)
end)
