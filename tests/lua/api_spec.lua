-- The idiomatic module (`require "diversity"`): context, tables from every kind
-- of source, loading files, jobs and their results, exactness against the float64 oracle, same
-- bits across shapes, tiles, chunks and batches, and bad inputs.
local ffi = require "ffi"
local diversity = require "diversity"
local H = require "helpers"

describe("diversity (idiomatic API)", function()
  local ctx
  H.context_for(setup, teardown, function(c) ctx = c end)

  it("_VERSION names the module and the crate's version (and the shim's says whose it is)", function()
    assert.matches("^diversity %d+%.%d+%.%d+", diversity._VERSION)
    assert.are.equal("vk_compute (" .. diversity._VERSION .. ")", require("vk_compute")._VERSION)
  end)

  -------------------------------------------------------------------------------------------------
  describe("context", function()
    it("describe() names the device and its L2", function()
      local d = ctx:describe()
      assert.is_string(d)
      assert.truthy(d:find("device:", 1, true), d)
      assert.truthy(d:find("L2:", 1, true), d)
      assert.truthy(d:find(ctx:name(), 1, true), "describe() does not contain the device name")
    end)

    it("caps() reports name, subgroup size, L2, fp16 storage and limits", function()
      local c = ctx:caps()
      assert.is_string(c.name)
      assert.is_true(#c.name > 0)
      assert.is_number(c.subgroup_size)
      assert.is_true(c.subgroup_size > 0)
      assert.is_true(c.l2_bytes > 0)
      assert.is_boolean(c.fp16_storage)
      assert.is_boolean(c.timestamps)
      assert.is_true(c.max_buffer_range > 0)
      assert.is_true(c.max_workgroup_count > 0)
      assert.is_true(c.shared_memory_bytes > 0)
      assert.is_true(c.memory_budget_bytes > 0)
      assert.is_string(c.device_type)
      assert.is_string(c.driver)
      assert.is_string(c.api_version)
      assert.is_string(c.l2_source)
    end)

    it("l2_bytes() and name() agree with caps()", function()
      local c = ctx:caps()
      assert.are.equal(c.l2_bytes, ctx:l2_bytes())
      assert.are.equal(c.name, ctx:name())
    end)

    it("open{device = …} with no such device names the available ones", function()
      H.assert_error({ "diversity.open", "no-such-gpu", ctx:name() }, diversity.open,
        { device = "no-such-gpu" })
    end)

    it("devices() lists the device the context opened", function()
      local list = diversity.devices()
      assert.is_true(#list >= 1)
      local found = false
      for _, d in ipairs(list) do
        assert.is_string(d.name)
        if d.name == ctx:name() then found = true end
      end
      assert.is_true(found)
    end)
  end)

  -------------------------------------------------------------------------------------------------
  describe("tables from every source", function()
    -- Odd D on purpose: odd D must work.
    local N, D = 40, 23
    local rows = H.random_rows(N, D, 12345)
    local flat = H.flatten(rows)
    local ref32, ref16 -- sequences of the Lua-rows table at fp32 and at fp16

    local function seq_of(t, precision)
      local dt = ctx:upload(t, precision)
      local s = H.sequences(dt, nil, { mode = "scan" })
      dt:close()
      return s
    end

    local function check_values(t, value_of)
      assert.are.equal(N, t:n())
      assert.are.equal(D, t:dim())
      for i = 0, N - 1, 7 do
        local row = t:row(i)
        assert.are.equal(D, #row)
        for j = 1, D do
          assert.are.equal(value_of(i, j), row[j])
        end
      end
    end

    local function f32_value(i, j) return H.f32(rows[i + 1][j]) end
    local function f16_value(i, j)
      return diversity.f16_to_f32(diversity.f32_to_f16(rows[i + 1][j]))
    end

    setup(function()
      local t = diversity.table(rows)
      ref32 = seq_of(t, "fp32")
      ref16 = seq_of(t, "fp16")
      t:close()
    end)

    it("a Lua array of rows", function()
      local t = diversity.table(rows)
      check_values(t, f32_value)
      assert.are.equal(N, #ref32)
      for i = 1, N do
        assert.are.equal(i - 1, ref32[i][1])
        assert.is_true(H.is_permutation(ref32[i], N))
      end
    end)

    it("a Lua array with a hole (nil) is refused, not cut short at the hole", function()
      local holed = { { 1, 2 }, { 3, 4 }, { 5, 6 } }
      holed[2] = nil
      H.assert_error({ "rows", "hole" }, diversity.table, holed)
      local row_hole = { { 1, 2, 3 }, { 4, 5, 6 } }
      row_hole[1][2] = nil
      H.assert_error({ "row 0" }, diversity.table, row_hole)
      local flat_hole = { 1, 2, 3, 4, 5, 6 }
      flat_hole[3] = nil
      H.assert_error({ "values" }, diversity.table, flat_hole, { dim = 2 })
      local with_key = { { 1, 2 }, { 3, 4 } }
      with_key.extra = { 5, 6 }
      H.assert_error({ "not an array", "extra" }, diversity.table, with_key)
    end)

    it("a flat Lua array with {dim =}", function()
      local t = diversity.table(flat, { dim = D })
      check_values(t, f32_value)
      assert.is_nil(H.diff_rows(ref32, seq_of(t, "fp32")))
    end)

    -- The values in an FFI buffer of `ctype`, given to diversity.table by `make`.
    local function shaped(buf) return diversity.table(buf, { n = N, dim = D }) end
    for _, case in ipairs {
      { "a binary string of float32", "float[?]",
        function(buf) return diversity.table(ffi.string(buf, N * D * 4), { dim = D }) end },
      { "an FFI float[?] (with {n =, dim =})", "float[?]", shaped },
      { "an FFI double[?]", "double[?]", shaped },
    } do
      local name, ctype, make = case[1], case[2], case[3]
      it(name, function()
        local buf = ffi.new(ctype, N * D)
        for k = 1, N * D do buf[k - 1] = flat[k] end
        local t = make(buf)
        check_values(t, f32_value)
        assert.is_nil(H.diff_rows(ref32, seq_of(t, "fp32")))
      end)
    end

    it("a float* pointer is refused, with or without a {count =} (its size cannot be known)",
      function()
        local buf = ffi.new("float[?]", N * D)
        local ptr = ffi.cast("float *", buf)
        H.assert_error({ "diversity.table", "pointer cdata" }, diversity.table, ptr,
          { n = N, dim = D, count = N * D })
        -- a pointer whose count lies (10× the 1-element array): refused, nothing read
        local one = ffi.new("float[1]")
        H.assert_error({ "diversity.table", "size cannot be known" }, diversity.table,
          ffi.cast("float *", one), { n = N, dim = D, count = N * D })
        assert.are.equal(buf[0], buf[0]) -- keep buf alive past the calls
      end)

    it("an FFI uint16_t[?] of fp16 bits, and a binary string with {dtype = 'f16'}", function()
      local bits = ffi.new("uint16_t[?]", N * D)
      for k = 1, N * D do bits[k - 1] = diversity.f32_to_f16(flat[k]) end
      local tc = diversity.table(bits, { n = N, dim = D })
      check_values(tc, f16_value)
      local ts = diversity.table(ffi.string(bits, N * D * 2), { dtype = "f16", dim = D })
      check_values(ts, f16_value)
      -- The same fp16 table as the float rows stored at fp16: identical sequences.
      assert.is_nil(H.diff_rows(ref16, seq_of(tc, "fp16"), "uint16_t[?] vs rows at fp16"))
      assert.is_nil(H.diff_rows(ref16, seq_of(ts, "fp16"), "f16 string vs rows at fp16"))
    end)

    it("f32_to_f16 rounds to nearest even and f16_to_f32 widens exactly", function()
      assert.are.equal(0x3C00, diversity.f32_to_f16(1.0))
      assert.are.equal(0xC000, diversity.f32_to_f16(-2.0))
      assert.are.equal(0x7BFF, diversity.f32_to_f16(65504))
      assert.are.equal(0x7C00, diversity.f32_to_f16(1e6))
      -- 1 + 2^-11 is half-way between 1 and the next half: ties go to even (1.0)
      assert.are.equal(0x3C00, diversity.f32_to_f16(1 + 2 ^ -11))
      -- 1 + 3 * 2^-11 is half-way between 1+2^-10 (odd) and 1+2^-9 (even)
      assert.are.equal(0x3C02, diversity.f32_to_f16(1 + 3 * 2 ^ -11))
      assert.are.equal(1.0, diversity.f16_to_f32(0x3C00))
      assert.are.equal(65504, diversity.f16_to_f32(0x7BFF))
      assert.are.equal(2 ^ -24, diversity.f16_to_f32(0x0001))
    end)

    it("a cdata array smaller than N × D is an error, not a read overrun", function()
      local small = ffi.new("float[?]", N * D - 1)
      H.assert_error({ "diversity.table", "smaller than N × D" }, diversity.table, small,
        { n = N, dim = D })
      -- a count larger than the array does not make the array larger
      H.assert_error("smaller than N × D", diversity.table, small,
        { n = N, dim = D, count = 10 * N * D })
      local small16 = ffi.new("uint16_t[?]", 5)
      H.assert_error("smaller than N × D", diversity.table, small16, { n = N, dim = D })
      -- a count smaller than the array narrows it
      local buf = ffi.new("float[?]", N * D)
      H.assert_error("smaller than N × D", diversity.table, buf,
        { n = N, dim = D, count = N * D - 1 })
    end)

    it("a pointer without {count =} is an error", function()
      local buf = ffi.new("float[?]", N * D)
      H.assert_error({ "diversity.table", "pointer" }, diversity.table, ffi.cast("float *", buf),
        { n = N, dim = D })
    end)

    it("convert_f32_to_f16 checks count against both arrays and refuses pointers", function()
      local src, dst = ffi.new("float[?]", 4), ffi.new("uint16_t[?]", 4)
      for i = 0, 3 do src[i] = i + 0.5 end
      diversity.convert_f32_to_f16(src, dst, 4)
      assert.are.equal(diversity.f32_to_f16(3.5), dst[3])
      local big = ffi.new("uint16_t[?]", 1000)
      for i = 0, 999 do big[i] = 7 end
      H.assert_error({ "diversity.convert_f32_to_f16", "do not fit" },
        diversity.convert_f32_to_f16, src, big, 1000)
      for i = 0, 999 do assert.are.equal(7, big[i]) end
      H.assert_error({ "diversity.convert_f32_to_f16", "do not fit" },
        diversity.convert_f32_to_f16, ffi.new("float[?]", 1000), dst, 1000)
      H.assert_error({ "diversity.convert_f32_to_f16", "pointer cdata" },
        diversity.convert_f32_to_f16, ffi.cast("float *", src), dst, 4)
      H.assert_error({ "diversity.convert_f32_to_f16", "pointer cdata" },
        diversity.convert_f32_to_f16, src, ffi.cast("uint16_t *", big), 4)
    end)

    it("a cdata without {n =, dim =} or of another element type is an error", function()
      local buf = ffi.new("float[?]", N * D)
      H.assert_error("needs {n = N, dim = D}", diversity.table, buf, { dim = D })
      H.assert_error("needs {n = N, dim = D}", diversity.table, buf, { n = N })
      local ints = ffi.new("uint32_t[?]", N * D)
      H.assert_error("expected float, double or uint16_t", diversity.table, ints,
        { n = N, dim = D })
      H.assert_error("pointer cdata", diversity.table, ffi.cast("float *", nil),
        { n = N, dim = D, count = N * D })
    end)

    it("n given that disagrees with the data is an error", function()
      H.assert_error("n = 41", diversity.table, flat, { dim = D, n = 41 })
    end)
  end)

  -------------------------------------------------------------------------------------------------
  describe("files", function()
    it("load() reads embeddings.json with its ids", function()
      local t = diversity.load(H.DATA_JSON)
      assert.are.equal(300, t:n())
      assert.are.equal(384, t:dim())
      local ids = t:ids()
      assert.are.equal(300, #ids)
      assert.are.equal("fortune-0", ids[1])
      assert.are.equal("fortune-299", ids[300])
      t:close()
    end)

    it("load() reads the fp16 .npy; its rows are the JSON rows rounded to fp16", function()
      local npy = diversity.load(H.DATA_NPY)
      assert.are.equal(2048, npy:n())
      assert.are.equal(384, npy:dim())
      assert.is_nil(npy:ids())
      local js = diversity.load(H.DATA_JSON)
      for _, i in ipairs { 0, 1, 150, 299 } do
        local a, b = js:row(i), npy:row(i)
        for j = 1, 384 do
          assert.are.equal(diversity.f16_to_f32(diversity.f32_to_f16(a[j])), b[j])
        end
      end
      -- so at fp16 precision the two tables give the same sequences
      local a = H.sequences(ctx:upload(js:head(30), "fp16"), nil, { mode = "scan" })
      local b = H.sequences(ctx:upload(npy:head(30), "fp16"), nil, { mode = "scan" })
      assert.is_nil(H.diff_rows(a, b, "json vs npy at fp16"))
      npy:close(); js:close()
    end)

    it("load() of a missing file names it", function()
      H.assert_error({ "diversity.load", "no-such-file.json" }, diversity.load,
        "/nonexistent/no-such-file.json")
    end)

    it("load() of an unsupported extension says what is expected", function()
      local dir = H.tmpdir()
      H.write(dir .. "/x.txt", "hello")
      H.assert_error({ "diversity.load", "unsupported file type" }, diversity.load, dir .. "/x.txt")
    end)

    it("save_fp16_bin + load_fp16_bin round trip, and a stale sidecar is refused", function()
      local dir = H.tmpdir()
      local t = diversity.table(H.random_rows(12, 7, 99))
      t:save_fp16_bin(dir .. "/t.bin", "raw", "fnv1a64:0000000000000001")
      local back = diversity.load_fp16_bin(dir .. "/t.bin", "raw", "fnv1a64:0000000000000001")
      assert.are.equal(12, back:n())
      assert.are.equal(7, back:dim())
      for i = 0, 11 do
        local a, b = t:row(i), back:row(i)
        for j = 1, 7 do
          assert.are.equal(diversity.f16_to_f32(diversity.f32_to_f16(a[j])), b[j])
        end
      end
      H.assert_error("stale or foreign", diversity.load_fp16_bin, dir .. "/t.bin", "raw",
        "fnv1a64:0000000000000002")
      H.assert_error("stale or foreign", diversity.load_fp16_bin, dir .. "/t.bin",
        "mean-centered-v1", "fnv1a64:0000000000000001")
      -- a .bin whose size disagrees with its sidecar
      H.write(dir .. "/t.bin", H.read(dir .. "/t.bin") .. "\0\0")
      H.assert_error({ "diversity.load_fp16_bin", "disagrees with its sidecar" },
        diversity.load_fp16_bin, dir .. "/t.bin")
    end)
  end)

  -------------------------------------------------------------------------------------------------
  describe("jobs", function()
    local N, D = 30, 16
    local t, dt

    setup(function()
      t = diversity.table(H.random_rows(N, D, 777))
      dt = ctx:upload(t, "fp32")
    end)
    teardown(function()
      dt:close(); t:close()
    end)

    it("the device table reports n, dim and precision", function()
      assert.are.equal(N, dt:n())
      assert.are.equal(D, dt:dim())
      assert.are.equal("fp32", dt:precision())
      local d16 = ctx:upload(t, "fp16")
      assert.are.equal("fp16", d16:precision())
      d16:close()
    end)

    it("step(n) returns steps and GPU ns; progress, done, gpu_ns follow", function()
      local starts = { 3, 0, 17 }
      local job = dt:job(starts, { mode = "scan" })
      assert.are.equal(3, job:batch_size())
      assert.are.same(starts, job:starts())
      local done, total = job:progress()
      assert.are.equal(0, done)
      assert.are.equal(N - 1, total)
      assert.is_false(job:done())
      local steps, ns = job:step(5)
      assert.are.equal(5, steps)
      assert.is_number(ns)
      assert.is_true(ns >= 0)
      if ctx:caps().timestamps then assert.is_true(ns > 0) end
      local sum = ns
      done, total = job:progress()
      assert.are.equal(5, done)
      assert.is_false(job:done())
      assert.are.equal(6, job:sequence_len())
      local partial = job:sequences()
      assert.are.equal(3, #partial)
      assert.are.equal(6, #partial[1])
      -- more than what is left: it stops at N - 1
      steps, ns = job:step(1000)
      assert.are.equal(N - 1 - 5, steps)
      sum = sum + ns
      assert.is_true(job:done())
      done = job:progress()
      assert.are.equal(N - 1, done)
      assert.are.equal(sum, job:gpu_ns())
      -- nothing left
      steps = job:step(3)
      assert.are.equal(0, steps)
      local s = job:sequences()
      assert.are.equal(3, #s)
      for i, row in ipairs(s) do
        assert.are.equal(starts[i], row[1])
        assert.is_true(H.is_permutation(row, N))
        -- the partial sequences were the prefix of the finished ones
        for k = 1, 6 do assert.are.equal(partial[i][k], row[k]) end
      end
      job:close()
    end)

    it("before any step, each sequence is its start", function()
      local job = dt:job({ 4, 1 }, { mode = "scan" })
      assert.are.same({ { 4 }, { 1 } }, job:sequences())
      assert.are.equal(1, job:sequence_len())
      job:close()
    end)

    it("sequences_bytes() holds the rows as little-endian uint32", function()
      local job = dt:job({ 5, 6, 7, 8 }, { mode = "scan" })
      job:step(N)
      local s = job:sequences()
      local b = job:sequences_bytes()
      assert.are.equal(4 * N * 4, #b)
      assert.is_nil(H.diff_rows(s, H.rows_of(H.u32s(b), N)))
      job:close()
    end)

    it("download(out) fills a uint32_t[?]", function()
      local job = dt:job({ 9, 2 }, { mode = "scan" })
      job:step(N)
      local s = job:sequences()
      local buf = ffi.new("uint32_t[?]", 2 * N)
      local count = job:download(buf)
      assert.are.equal(2 * N, count)
      local flat = {}
      for k = 0, 2 * N - 1 do flat[k + 1] = tonumber(buf[k]) end
      assert.is_nil(H.diff_rows(s, H.rows_of(flat, N)))
      job:close()
    end)

    it("download into a too-small buffer is an error and writes nothing", function()
      local job = dt:job({ 9, 2 }, { mode = "scan" })
      job:step(N)
      local buf = ffi.new("uint32_t[?]", 2 * N - 1)
      for k = 0, 2 * N - 2 do buf[k] = 0xFFFFFFFF end
      H.assert_error({ "job:download", "smaller" }, job.download, job, buf)
      for k = 0, 2 * N - 2 do assert.are.equal(0xFFFFFFFF, tonumber(buf[k])) end
      job:close()
    end)

    it("download refuses integer addresses, pointers and other element types", function()
      local job = dt:job({ 9, 2 }, { mode = "scan" })
      job:step(N)
      local buf = ffi.new("uint32_t[?]", 2 * N)
      H.assert_error({ "job:download", "must be a cdata array", "number" }, job.download, job,
        tonumber(ffi.cast("uintptr_t", buf)), 1e9)
      H.assert_error({ "job:download", "pointer cdata" }, job.download, job,
        ffi.cast("uint32_t *", buf))
      H.assert_error({ "job:download", "uint32_t[?]" }, job.download, job,
        ffi.new("float[?]", 2 * N))
      job:close()
      -- Today's crash: an integer "address" given to download, in a child process.
      local cmd = [[luajit -e 'local d = require "diversity"; local t = d.table({{1,0},{0,1},{1,1}}); ]]
        .. [[local dt = d.open():upload(t, "fp32"); local j = dt:job({0}, {mode = "scan"}); j:step(3); ]]
        .. [[local ok, e = pcall(j.download, j, 4096, 36); ]]
        .. [[os.exit((not ok and tostring(e):find("job:download", 1, true)) and 0 or 3)' 2>/dev/null]]
      local ok, how, code = os.execute(cmd)
      assert.are.equal(0, type(ok) == "number" and ok or code,
        "download(4096, 36) must be refused, not crash or write to address 4096")
    end)

    it("{steps = K} computes the first K steps of the full sequences", function()
      local full = H.sequences(dt, { 1, 4 }, { mode = "scan" })
      local job = dt:job({ 1, 4 }, { steps = 5, mode = "scan" })
      local _, total = job:progress()
      assert.are.equal(5, total)
      job:step(100)
      assert.is_true(job:done())
      local s = job:sequences()
      assert.are.equal(6, #s[1])
      for i = 1, 2 do
        for k = 1, 6 do assert.are.equal(full[i][k], s[i][k]) end
      end
      job:close()
      -- K above N - 1 is clamped
      local j2 = dt:job({ 0 }, { steps = 10 * N, mode = "scan" })
      assert.are.same({ 0, N - 1 }, { j2:progress() })
      j2:close()
    end)

    it("set_chunk and step(n, tile) do not change the result", function()
      local ref = H.sequences(dt, { 0, 11, 29 }, { mode = "scan" })
      local job = dt:job({ 0, 11, 29 }, { mode = "scan" })
      job:set_chunk(1)
      job:step(3, 7)
      job:set_chunk(0)
      job:step(4, 0)
      job:set_chunk(5)
      job:step(11, 1)
      job:step(N, N + 3)
      assert.is_true(job:done())
      assert.is_nil(H.diff_rows(ref, job:sequences()))
      job:close()
    end)
  end)

  -------------------------------------------------------------------------------------------------
  describe("edge cases that must work", function()
    it("N = 1 and N = 2", function()
      local t1 = diversity.table({ { 0.5, -1, 2 } })
      local s1 = H.sequences(ctx:upload(t1, "fp32"), nil, { mode = "scan" })
      assert.are.same({ { 0 } }, s1)
      local t2 = diversity.table({ { 1, 0 }, { 0, 1 } })
      local s2 = H.sequences(ctx:upload(t2, "fp16"), nil, { mode = "scan" })
      assert.are.same({ { 0, 1 }, { 1, 0 } }, s2)
    end)

    it("duplicate rows: ties go to the lowest index", function()
      local t = diversity.table({ { 1, 0 }, { 0, 1 }, { 0, 1 }, { 0, 1 } })
      for _, p in ipairs { "fp32", "fp16" } do
        local s = H.sequences(ctx:upload(t, p), { 0, 3 }, { mode = "scan" })
        assert.are.same({ { 0, 1, 2, 3 }, { 3, 0, 1, 2 } }, s)
      end
    end)

    it("zero rows and a zero running sum count as distance 1", function()
      local t = diversity.table({ { 1, 0 }, { 0, 0 }, { -1, 0 } })
      local s = H.sequences(ctx:upload(t, "fp32"), nil, { mode = "scan" })
      assert.are.same({ { 0, 2, 1 }, { 1, 0, 2 }, { 2, 0, 1 } }, s)
      for i, row in ipairs(s) do t:check_sequence(i - 1, row, 1e-5, "fp32") end
    end)

    it("tile size ≥ N", function()
      local t = diversity.table(H.random_rows(9, 5, 4242))
      local dt = ctx:upload(t, "fp32")
      local ref = H.sequences(dt, nil, { mode = "scan" })
      assert.is_nil(H.diff_rows(ref, H.sequences(dt, nil, { tile = 9, mode = "scan" })))
      assert.is_nil(H.diff_rows(ref, H.sequences(dt, nil, { tile = 1000, mode = "scan" })))
      local per_tile = { shape = "per-tile", tile = 50, mode = "scan" }
      assert.is_nil(H.diff_rows(ref, H.sequences(dt, nil, per_tile)))
    end)
  end)

  -------------------------------------------------------------------------------------------------
  describe("exactness (float64 oracle, ε = 1e-5)", function()
    local fortunes
    setup(function()
      fortunes = diversity.load(H.DATA_JSON):head(100)
    end)

    it("the oracle refuses a sequence that is not the ε-argmax", function()
      local dt = ctx:upload(fortunes, "fp32")
      local s = H.sequences(dt, { 0 }, { mode = "scan" })[1]
      dt:close()
      assert.is_true(fortunes:check_sequence(0, s, 1e-5, "fp32") >= 0)
      -- swapping two early picks breaks the argmax property at step 1
      local bad = {}
      for k, v in ipairs(s) do bad[k] = v end
      bad[2], bad[50] = bad[50], bad[2]
      H.assert_error("table:check_sequence", fortunes.check_sequence, fortunes, 0, bad, 1e-5,
        "fp32")
    end)

    for _, centered in ipairs { false, true } do
      for _, precision in ipairs { "fp32", "fp16" } do
        it(("%s, %s: every sequence of the first 100 fortunes, full length"):format(precision,
          centered and "centered" or "raw"), function()
          local t = centered and fortunes:centered() or fortunes
          local dt = ctx:upload(t, precision)
          local s = H.sequences(dt, nil, { mode = "scan" })
          dt:close()
          assert.are.equal(100, #s)
          local worst = 0
          for i, row in ipairs(s) do
            assert.are.equal(i - 1, row[1])
            assert.is_true(H.is_permutation(row, 100))
            local w = t:check_sequence(i - 1, row, 1e-5, precision)
            assert.is_true(w >= 0)
            worst = math.max(worst, w)
          end
          assert.is_true(worst <= 1e-5)
        end)
      end
    end
  end)

  -------------------------------------------------------------------------------------------------
  describe("same bits across tiles, shapes, chunks and batches", function()
    local N = 48
    local tab, dt32, dt16, ref32, ref16

    setup(function()
      tab = diversity.load(H.DATA_JSON):head(N)
      dt32 = ctx:upload(tab, "fp32")
      dt16 = ctx:upload(tab, "fp16")
      ref32 = H.sequences(dt32, nil, { shape = "untiled", mode = "scan" })
      ref16 = H.sequences(dt16, nil, { shape = "untiled", mode = "scan" })
    end)

    local variants = {
      { tile = 0 }, { tile = 1 }, { tile = 37 }, { tile = N }, { tile = 3 * N },
      { shape = "tiled", tile = 37 }, { shape = "tiled", tile = 1 },
      { shape = "per-tile", tile = 1 }, { shape = "per-tile", tile = 37 },
      { shape = "per-tile", tile = N }, { shape = "per-tile", tile = 0 },
      { shape = "untiled", tile = 37 },
      { chunk = 1 }, { chunk = 7 }, { chunk = 0 },
      { chunk = 7, tile = 37, pipelined = true }, { chunk = 1, shape = "per-tile", tile = 37,
      pipelined = true },
    }
    for _, o in ipairs(variants) do
      local words = {}
      for k, v in pairs(o) do words[#words + 1] = k .. "=" .. tostring(v) end
      table.sort(words)
      local name = table.concat(words, ", ")
      o.mode = "scan"
      it("fp32 " .. name, function()
        assert.is_nil(H.diff_rows(ref32, H.sequences(dt32, nil, o)))
      end)
    end
    for _, o in ipairs { { tile = 1 }, { tile = 37 }, { shape = "per-tile", tile = 37 },
      { chunk = 7 } } do
      local words = {}
      for k, v in pairs(o) do words[#words + 1] = k .. "=" .. tostring(v) end
      table.sort(words)
      o.mode = "scan"
      it("fp16 " .. table.concat(words, ", "), function()
        assert.is_nil(H.diff_rows(ref16, H.sequences(dt16, nil, o)))
      end)
    end

    local function by_batches(dt, size, reverse)
      local out = {}
      local all = {}
      for s = 0, N - 1 do all[#all + 1] = reverse and (N - 1 - s) or s end
      for first = 1, N, size do
        local starts = {}
        for k = first, math.min(first + size - 1, N) do starts[#starts + 1] = all[k] end
        local rows = H.sequences(dt, starts, { chunk = 0, mode = "scan" })
        for i, s in ipairs(starts) do out[s + 1] = rows[i] end
      end
      return out
    end

    it("batches of 1 and of 3 give the rows of one batch of all", function()
      assert.is_nil(H.diff_rows(ref32, by_batches(dt32, 1), "batches of 1"))
      assert.is_nil(H.diff_rows(ref32, by_batches(dt32, 3), "batches of 3"))
      assert.is_nil(H.diff_rows(ref16, by_batches(dt16, 3), "fp16 batches of 3"))
    end)

    it("start order does not matter", function()
      assert.is_nil(H.diff_rows(ref32, by_batches(dt32, 5, true), "reversed batches of 5"))
      assert.is_nil(H.diff_rows(ref32, by_batches(dt32, N, true), "one reversed batch"))
    end)
  end)

  -------------------------------------------------------------------------------------------------
  describe("bad inputs", function()
    local t, dt
    setup(function()
      t = diversity.table(H.random_rows(10, 4, 5))
      dt = ctx:upload(t, "fp32")
    end)

    it("a start out of range", function()
      H.assert_error({ "device_table:job", "start 10", "out of range" }, dt.job, dt, { 0, 10 })
      H.assert_error({ "device_table:job", "start -1", "out of range" }, dt.job, dt, { -1 })
    end)

    it("a repeated start", function()
      H.assert_error({ "device_table:job", "start 2", "repeated" }, dt.job, dt, { 2, 5, 2 })
    end)

    it("no starts", function()
      H.assert_error({ "device_table:job", "no starts" }, dt.job, dt, {})
    end)

    it("negative tile, chunk, steps", function()
      H.assert_error({ "device_table:job", "tile -1", "negative" }, dt.job, dt, nil, { tile = -1 })
      H.assert_error({ "device_table:job", "chunk -3", "negative" }, dt.job, dt, nil,
        { chunk = -3 })
      H.assert_error({ "device_table:job", "steps -2", "negative" }, dt.job, dt, nil,
        { steps = -2 })
      local job = dt:job({ 0 }, { mode = "scan" })
      H.assert_error({ "job:step", "negative" }, job.step, job, -1)
      H.assert_error({ "job:step", "tile -4", "negative" }, job.step, job, 1, -4)
      H.assert_error({ "job:set_chunk", "negative" }, job.set_chunk, job, -2)
      -- the job is still usable after refused calls
      job:step(100)
      assert.is_true(job:done())
      job:close()
    end)

    it("an unknown shape", function()
      H.assert_error({ "device_table:job", "shape 'diagonal'" }, dt.job, dt, nil,
        { shape = "diagonal" })
    end)

    it("an unknown precision", function()
      H.assert_error({ "context:upload", "precision 'fp8'" }, ctx.upload, ctx, t, "fp8")
    end)

    it("D = 0", function()
      H.assert_error({ "diversity.table", "D = 0" }, diversity.table, { {}, {} })
      H.assert_error({ "diversity.table", "D = 0" }, diversity.table, { 1, 2 }, { dim = 0 })
      H.assert_error({ "diversity.table", "D = 0" }, diversity.table, { {} })
    end)

    it("N = 0 (empty tables)", function()
      H.assert_error({ "diversity.table", "N = 0" }, diversity.table, {}, { dim = 4 })
      H.assert_error({ "diversity.table", "N = 0" }, diversity.table, "", { dim = 4 })
      H.assert_error({ "diversity.table", "N = 0" }, diversity.table, ffi.new("float[4]"),
        { n = 0, dim = 4 })
    end)

    it("NaN or Inf in a Lua table names the row", function()
      local rows = H.random_rows(6, 3, 8)
      rows[4][2] = 0 / 0
      H.assert_error({ "diversity.table", "row 3", "non-finite" }, diversity.table, rows)
      rows = H.random_rows(6, 3, 8)
      rows[6][3] = 1 / 0
      H.assert_error({ "diversity.table", "row 5" }, diversity.table, rows)
      local flat = H.flatten(H.random_rows(6, 3, 8))
      flat[3 * 2 + 1] = 0 / 0
      H.assert_error({ "diversity.table", "row 2" }, diversity.table, flat, { dim = 3 })
      -- beyond float32's range
      rows = H.random_rows(6, 3, 8)
      rows[2][1] = 1e39
      H.assert_error({ "diversity.table", "row 1" }, diversity.table, rows)
    end)

    it("NaN in an FFI array names the row", function()
      local buf = ffi.new("float[?]", 12)
      buf[7] = 0 / 0
      H.assert_error({ "diversity.table", "row 1" }, diversity.table, buf, { n = 3, dim = 4 })
    end)

    it("ragged rows", function()
      H.assert_error({ "diversity.table", "ragged", "row 2" }, diversity.table,
        { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8 } })
      H.assert_error({ "diversity.table", "do not make rows" }, diversity.table,
        { 1, 2, 3, 4, 5 }, { dim = 2 })
    end)

    it("non-numbers in a Lua table", function()
      H.assert_error({ "diversity.table", "row 1" }, diversity.table, { { 1, 2 }, { 3, "x" } })
    end)

    it("a flat Lua table or string without dim", function()
      H.assert_error({ "diversity.table", "dim" }, diversity.table, { 1, 2, 3 })
      H.assert_error({ "diversity.table", "dim" }, diversity.table, "abcd")
    end)

    it("a value beyond the fp16 range is refused at fp16, naming the row", function()
      local rows = H.random_rows(5, 3, 77)
      rows[4][2] = 70000
      local big = diversity.table(rows)
      H.assert_error({ "context:upload", "row 3", "fp16 range" }, ctx.upload, ctx, big, "fp16")
      ctx:upload(big, "fp32"):close()
    end)

    it("a table wider than shared memory works (the scan stages D in chunks)", function()
      local caps = ctx:caps()
      local d = math.floor(caps.shared_memory_bytes / 4) + 8
      local buf = ffi.new("float[?]", 3 * d)
      buf[0], buf[d + 1], buf[2 * d + 2], buf[2 * d + 3] = 1, 1, -1, 0.5
      local wide = diversity.table(buf, { n = 3, dim = d })
      local wdt = ctx:upload(wide, "fp32")
      local job = wdt:job({ 0, 2 }, { mode = "scan" })
      job:step(2)
      local seqs = job:sequences()
      for i, start in ipairs({ 0, 2 }) do
        assert.are.equal(3, #seqs[i])
        assert.is_true(wide:check_sequence(start, seqs[i], 1e-5, "fp32") >= 0)
      end
      job:close(); wdt:close(); wide:close()
    end)

    it("arguments of the wrong type or range name the call", function()
      -- mlua's own conversion errors ("bad argument #2 to `Handle<Table>.row`") are not the
      -- documented "diversity.<call>: <cause>"
      local job = dt:job({ 0 }, { mode = "scan" })
      for _, case in ipairs {
        { "diversity.table:row", t.row, t, -1 },
        { "diversity.table:head", t.head, t, -1 },
        { "diversity.job:step", job.step, job, "many" },
        { "diversity.binary_cache_writer", diversity.binary_cache_writer, H.tmpdir() .. "/x.bin",
          -1 },
      } do
        local m = H.error_of(unpack(case, 2))
        assert.truthy(m:find(case[1], 1, true), ("%q does not name %s"):format(m, case[1]))
      end
      job:close()
    end)

    it("non-integer numbers are refused, not truncated (a start of 1.5, step(2.5))", function()
      local ok, job = pcall(dt.job, dt, { 1.5 })
      if ok then
        error("device_table:job({ 1.5 }) was accepted as start " .. job:starts()[1])
      end
      assert.truthy(H.message(job):find("^diversity%.device_table:job"), H.message(job))
      local j = dt:job({ 0 }, { mode = "scan" })
      local ok2, steps = pcall(j.step, j, 2.5)
      if ok2 then
        error("job:step(2.5) was accepted as " .. steps .. " steps")
      end
      j:close()
    end)

    it("switches are booleans and half bits integers 0..65535, never coerced", function()
      -- Lua's truthiness took the string "false" for true; mlua cut 15360.5 to 15360 (1.0).
      H.assert_error({ "diversity.open", "option validation must be a boolean", '"false"' },
        diversity.open, { validation = "false" })
      H.assert_error({ "device_table:job", "option subgroups must be a boolean" }, dt.job, dt,
        nil, { mode = "gram", subgroups = "false" })
      H.assert_error({ "device_table:job", "option pipelined must be a boolean" }, dt.job, dt,
        nil, { pipelined = 0 })
      H.assert_error({ "device_table:job", "option centered must be a boolean" }, dt.job, dt,
        nil, { mode = "gram", centered = "true" })
      H.assert_error({ "context:gram_summation", "option centered must be a boolean" },
        ctx.gram_summation, ctx, 100, 8, { centered = 1 })
      H.assert_error({ "device_table:knn", "option subgroups must be a boolean" }, dt.knn, dt,
        t, { k = 1, subgroups = "false" })
      for _, bits in ipairs({ 15360.5, 65536, -1, 0 / 0 }) do
        H.assert_error({ "diversity.f16_to_f32", "bits must be an integer 0..65535" },
          diversity.f16_to_f32, bits)
      end
      assert.are.equal(1.0, diversity.f16_to_f32(15360))
    end)

    it("a row outside fp32's norm range (2^-40 … 2^40) is refused at upload, naming it", function()
      local rows = H.random_rows(4, 4, 9)
      for j = 1, 4 do rows[3][j] = rows[3][j] * 1e-25 end
      local tiny = diversity.table(rows)
      H.assert_error({ "context:upload", "row 2 has norm", "(2^-40 … 2^40)",
        "scale the table or zero the row" }, ctx.upload, ctx, tiny, "fp32")
      H.assert_error({ "device_table:knn", "query 2 has norm" }, dt.knn, dt, tiny, { k = 1 })
      tiny:close()
    end)
  end)

  -------------------------------------------------------------------------------------------------
  describe("errors are plain strings", function()
    -- What pcall returns must be a string "diversity.<call>: <cause>": no userdata, no
    -- "runtime error: " prefix, no traceback, no Rust type names.
    local function assert_string_error(prefix, f, ...)
      local ok, e = pcall(f, ...)
      assert.is_false(ok, prefix .. ": the call succeeded")
      assert.are.equal("string", type(e), prefix .. ": the error is a " .. type(e))
      assert.are.equal(1, e:find(prefix, 1, true), ("%q does not start with %q"):format(e, prefix))
      for _, w in ipairs({ "runtime error", "stack traceback", "Handle<", "userdata of type" }) do
        assert.falsy(e:find(w, 1, true), ("%q contains %q"):format(e, w))
      end
    end

    it("from module functions and every kind of handle, argument errors included", function()
      local d = H.tmpdir()
      local t = diversity.table({ { 1, 0 }, { 0, 1 }, { 1, 1 } })
      local dt = ctx:upload(t, "fp32")
      local j = dt:job({ 0 }, { mode = "scan" })
      local r = dt:knn(t, { k = 1 })
      local g = dt:gram()
      local jw = diversity.json_cache_writer(d .. "/c.json", {})
      local bw = diversity.binary_cache_writer(d .. "/c.bin", 3, 1)
      local cases = {
        -- the crate's errors
        { "diversity.gram_bytes: n = 2147483648", diversity.gram_bytes, 2 ^ 31 },
        { "diversity.load: /no/such/file.json", diversity.load, "/no/such/file.json" },
        { "diversity.open_binary_cache: " .. d .. "/no.bin", diversity.open_binary_cache, d .. "/no.bin" },
        { "diversity.knn_graph: " .. d .. "/no.knn", diversity.knn_graph, d .. "/no.knn" },
        { "diversity.table:row: row 9 out of range", t.row, t, 9 },
        { "diversity.device_table:knn: k-NN needs k ≥ 1", dt.knn, dt, t, { k = 0 } },
        { "diversity.gram:row: row 99", g.row, g, 99 },
        { "diversity.job:step: step count -1 is negative", j.step, j, -1 },
        { "diversity.knn:ids: query 5 is out of range", r.ids, r, 5 },
        { "diversity.binary_cache:write: ", bw.write, bw, 9, { 9 } },
        { "diversity.json_cache:write: seq is not an array", jw.write, jw, 0, { x = 1 } },
        { "diversity.f16_to_f32: bits must be an integer 0..65535", diversity.f16_to_f32, 2 ^ 20 },
        -- argument conversions (mlua's own), counted after self for methods
        { "diversity.context:upload: bad argument #1: error converting Lua ",
          ctx.upload, ctx, 5 },
        { "diversity.device_table:job: bad argument #1: error converting Lua ",
          dt.job, dt, 5 },
        { "diversity.knn_index: bad argument #3", diversity.knn_index, { ctx }, t, { layout = {} } },
        { "diversity.table:row: bad self: error converting Lua ", t.row, 5, 0 },
      }
      for _, c in ipairs(cases) do assert_string_error(unpack(c)) end
      -- use after close, on each handle
      for _, h in ipairs({
        { "job:step", j, "step", 1 }, { "knn:ids", r, "ids", 0 }, { "gram:row", g, "row", 0 },
        { "device_table:n", dt, "n" }, { "table:n", t, "n" },
        { "json_cache:finish", jw, "finish" }, { "binary_cache:finish", bw, "finish" },
      }) do
        local obj = h[2]
        obj:close()
        assert_string_error("diversity." .. h[1] .. ": ", obj[h[3]], obj, h[4])
      end
    end)

    it("a panic in a Rust call is a Lua error, not an abort", function()
      -- In a child process: the panic is injected into every job step, on the calling thread
      -- (job:step) and on a job's own thread (job:start, then job:wait).
      local script = H.tmpdir() .. "/panic.lua"
      H.write(script, [[
        local ffi = require "ffi"
        ffi.cdef "int setenv(const char *, const char *, int);"
        local d = require "diversity"
        local dt = d.open():upload(d.table({ { 1, 0 }, { 0, 1 }, { 1, 1 } }), "fp32")
        local j, j2 = dt:job({ 0 }, { mode = "scan" }), dt:job({ 1 }, { mode = "scan" })
        ffi.C.setenv(d.ENV_INJECT_PANIC, "1", 1)
        local ok, e = pcall(j.step, j, 1)
        io.write(type(e), "|", tostring(e), "\n")
        j2:start(1)
        ok, e = pcall(j2.wait, j2)
        io.write(type(e), "|", tostring(e), "\n")
        io.write("alive\n")
      ]])
      local p = io.popen("luajit " .. H.q(script) .. " 2>/dev/null")
      local out = p:read("*a")
      p:close()
      assert.are.equal("string|diversity.job:step: injected panic (DIVERSITY_INJECT_PANIC)\n"
        .. "string|diversity.job:wait: the job's stepping thread panicked (injected panic "
        .. "(DIVERSITY_INJECT_PANIC)); the job is lost\n"
        .. "alive\n", out)
    end)
  end)

  H.it_left_no_validation(it, function() return ctx end)
end)
