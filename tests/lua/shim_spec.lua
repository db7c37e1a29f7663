-- The compat shim `require "vk_compute"`: the old wrapper's names and semantics,
-- a driver loop written the way the user's pipeline drives it, and its errors.
local ffi = require "ffi"
local diversity = require "diversity"
local vk = require "vk_compute"
local H = require "helpers"

describe("vk_compute shim", function()
  local ctx, dctx, dir

  setup(function() ctx = vk.init(true) end)
  H.context_for(setup, teardown, function(c, d) dctx, dir = c, d end)

  -- fp16 bits of a flat Lua array, as a uint16_t[?] cdata, converted with the shim.
  local function to_fp16(flat)
    local n = #flat
    local src = ffi.new("float[?]", n)
    for k = 1, n do src[k - 1] = flat[k] end
    local dst = ffi.new("uint16_t[?]", n)
    vk.fp32_to_fp16(src, dst, n)
    return dst
  end

  -- The idiomatic API's sequences of a table at `precision`, for `starts` (default all).
  local function reference(t, precision, starts)
    local dt = dctx:upload(t, precision)
    local s = H.sequences(dt, starts)
    dt:close()
    return s
  end

  it("init(true) gives a context that reports the device", function()
    assert.is_not_nil(ctx)
    assert.is_string(ctx:name())
    assert.is_true(ctx:l2_bytes() > 0)
  end)

  it("compute_diversity_sequence on a flat Lua array equals the idiomatic API", function()
    local N, dim = 60, 16
    local flat = H.flatten(H.random_rows(N, dim, 2024))
    local ref = reference(diversity.table(flat, { dim = dim }), "fp32")
    for _, start in ipairs { 0, 1, 33, 59 } do
      local seq = vk.compute_diversity_sequence(ctx, flat, N, dim, start)
      assert.are.equal(N, #seq)
      assert.are.equal(start, seq[1])
      assert.is_nil(H.diff_rows({ ref[start + 1] }, { seq }, "start " .. start))
    end
  end)

  it("compute_diversity_sequence errors name the call", function()
    local flat = H.flatten(H.random_rows(5, 3, 1))
    H.assert_error({ "vk_compute.compute_diversity_sequence", "start 5", "out of range" },
      vk.compute_diversity_sequence, ctx, flat, 5, 3, 5)
    H.assert_error({ "vk_compute.compute_diversity_sequence", "negative" },
      vk.compute_diversity_sequence, ctx, flat, 5, 3, -1)
    H.assert_error({ "vk_compute.compute_diversity_sequence", "expected N * dim" },
      vk.compute_diversity_sequence, ctx, flat, 6, 3, 0)
    flat[4] = 0 / 0
    H.assert_error({ "vk_compute.compute_diversity_sequence", "row 1" },
      vk.compute_diversity_sequence, ctx, flat, 5, 3, 0)
  end)

  -- Lua's convention: an error's position is the caller's line, not a line inside the library.
  -- The shim's own checks do this (error level 3 from `fail`), so every error should.
  it("errors point at the caller's line, never into vk_compute.lua", function()
    local flat = H.flatten(H.random_rows(5, 3, 1))
    local function caller_own_check()
      return vk.compute_diversity_sequence(ctx, flat, 5, 3, 9) -- the shim's own range check
    end
    local function caller_module_error()
      return vk.batch_init(ctx, to_fp16(flat), 5, 3, 1, { 7 }) -- refused by the module
    end
    local m1 = H.error_of(caller_own_check)
    local m2 = H.error_of(caller_module_error)
    assert.truthy(m1:find("vk_compute.compute_diversity_sequence: ", 1, true), m1)
    assert.truthy(m2:find("vk_compute.batch_init: ", 1, true), m2)
    assert.falsy(m1:find("vk_compute%.lua:%d+:"), m1)
    assert.falsy(m2:find("vk_compute%.lua:%d+:"), m2)
  end)

  it("fp32_to_fp16 and fp16_to_fp32 round trip, and agree with diversity.f32_to_f16", function()
    local vals = { 0, -0.0, 1, -1, 0.1, 1 / 3, 65504, 1e-8, -2.5e-5, 1 + 2 ^ -11, 1e6, -1e6 }
    local r = H.lcg(9)
    for _ = 1, 200 do vals[#vals + 1] = (2 * r() - 1) * 4 end
    local n = #vals
    local src = ffi.new("float[?]", n)
    for k = 1, n do src[k - 1] = vals[k] end
    local dst = ffi.new("uint16_t[?]", n)
    vk.fp32_to_fp16(src, dst, n)
    for k = 1, n do
      local bits = tonumber(dst[k - 1])
      assert.are.equal(diversity.f32_to_f16(vals[k]), bits, "value " .. vals[k])
      local back = vk.fp16_to_fp32(dst[k - 1]) -- a uint16 cdata element, as the old code passed
      assert.are.equal(diversity.f16_to_f32(bits), back)
      -- widening then narrowing again is the identity on halves
      assert.are.equal(bits, diversity.f32_to_f16(back))
      if math.abs(vals[k]) < 60000 and math.abs(vals[k]) > 1e-4 then
        assert.is_true(math.abs(back - vals[k]) <= math.abs(vals[k]) * 2 ^ -11)
      end
    end
    assert.are.equal(0x7C00, tonumber(dst[10])) -- 1e6 overflows to +Inf
    assert.is_true(vk.fp16_to_fp32(0x7C00) == math.huge)
  end)

  it("fp32_to_fp16 refuses buffers that are too small or of the wrong type", function()
    local src = ffi.new("float[?]", 4)
    local dst = ffi.new("uint16_t[?]", 3)
    H.assert_error({ "vk_compute.fp32_to_fp16", "do not fit" }, vk.fp32_to_fp16, src, dst, 4)
    H.assert_error({ "vk_compute.fp32_to_fp16", "negative" }, vk.fp32_to_fp16, src, dst, -1)
    H.assert_error("vk_compute.fp32_to_fp16", vk.fp32_to_fp16, ffi.new("double[4]"), dst, 3)
  end)

  -----------------------------------------------------------------------------------------------
  describe("a driver loop written against the old wrapper", function()
    local N, dim, batch_size = 50, 24, 20
    local flat, emb_fp16, ref

    setup(function()
      flat = H.flatten(H.random_rows(N, dim, 4711))
      emb_fp16 = to_fp16(flat)
      -- the idiomatic API on the same fp16 table
      local t = diversity.table(emb_fp16, { n = N, dim = dim })
      ref = reference(t, "fp16")
      t:close()
    end)

    -- The user's loop: probe 10 slots, then adaptive chunks under the watchdog target with the
    -- L2 tile formula, until slot N - 1; then download.
    local function drive(b, l2)
      local tile = math.floor(l2 * 0.85 / (dim * 2))
      local ns = vk.batch_compute_chunk(b, 1, 10, tile)
      assert.is_number(ns)
      local per_step = math.max(ns / 1e9, 1e-9) / 10
      local slot = 11
      local chunks = 1
      while slot <= N - 1 do
        local chunk = math.max(1, math.floor(1.5 * 0.6 / per_step))
        -- keep the loop honest on a fast device: several chunks, the last one short
        chunk = math.min(chunk, 13)
        local count = math.min(chunk, N - slot)
        ns = vk.batch_compute_chunk(b, slot, count, tile)
        per_step = math.max(ns / 1e9, 1e-9) / count
        slot = slot + count
        chunks = chunks + 1
      end
      return chunks
    end

    local function run_batch(starts_of, first)
      local b = vk.batch_init(ctx, emb_fp16, N, dim, batch_size, starts_of)
      local chunks = drive(b, ctx:l2_bytes())
      assert.is_true(chunks >= 3)
      local out = ffi.new("uint32_t[?]", batch_size * N)
      vk.batch_download_sequences(b, out)
      vk.batch_destroy(b)
      for i = 0, batch_size - 1 do
        local row = {}
        for k = 0, N - 1 do row[k + 1] = tonumber(out[i * N + k]) end
        local start = first + i
        assert.is_nil(H.diff_rows({ ref[start + 1] }, { row }, "start " .. start))
      end
    end

    it("starts as a uint32_t[?] cdata", function()
      local starts = ffi.new("uint32_t[?]", batch_size)
      for i = 0, batch_size - 1 do starts[i] = i end
      run_batch(starts, 0)
    end)

    it("starts as a Lua array (a later batch)", function()
      local starts = {}
      for i = 1, batch_size do starts[i] = 20 + i - 1 end
      run_batch(starts, 20)
    end)

    it("a tile of 0 (untiled) and the last partial batch", function()
      local starts = {}
      for i = 40, N - 1 do starts[#starts + 1] = i end
      local b = vk.batch_init(ctx, emb_fp16, N, dim, #starts, starts)
      vk.batch_compute_chunk(b, 1, 10, 0)
      vk.batch_compute_chunk(b, 11, 0, 0) -- an empty chunk is allowed
      vk.batch_compute_chunk(b, 11, N - 11, 0)
      local out = ffi.new("uint32_t[?]", #starts * N)
      vk.batch_download_sequences(b, out)
      vk.batch_destroy(b)
      vk.batch_destroy(b) -- twice is fine
      for i, s in ipairs(starts) do
        for k = 0, N - 1 do
          assert.are.equal(ref[s + 1][k + 1], tonumber(out[(i - 1) * N + k]))
        end
      end
    end)

    it("errors: slots past N, out of order, negative count, early download, small buffer",
      function()
        local starts = { 0, 1, 2 }
        local b = vk.batch_init(ctx, emb_fp16, N, dim, 3, starts)
        H.assert_error({ "vk_compute.batch_compute_chunk", "past" }, vk.batch_compute_chunk, b, 1,
          N, 0)
        H.assert_error({ "vk_compute.batch_compute_chunk", "in order" },
          vk.batch_compute_chunk, b, 5, 3, 0)
        H.assert_error({ "vk_compute.batch_compute_chunk", "negative" },
          vk.batch_compute_chunk, b, 1, -2, 0)
        H.assert_error({ "vk_compute.batch_compute_chunk", "negative" },
          vk.batch_compute_chunk, b, 1, 2, -5)
        vk.batch_compute_chunk(b, 1, 10, 0)
        H.assert_error({ "vk_compute.batch_compute_chunk", "in order" },
          vk.batch_compute_chunk, b, 1, 10, 0)
        local out = ffi.new("uint32_t[?]", 3 * N)
        H.assert_error({ "vk_compute.batch_download_sequences", "10 of " .. (N - 1) },
          vk.batch_download_sequences, b, out)
        H.assert_error({ "vk_compute.batch_compute_chunk", "past" }, vk.batch_compute_chunk, b,
          11, N - 10, 0)
        vk.batch_compute_chunk(b, 11, N - 11, 0)
        local small = ffi.new("uint32_t[?]", 3 * N - 1)
        H.assert_error({ "vk_compute.batch_download_sequences", "smaller" },
          vk.batch_download_sequences, b, small)
        H.assert_error("vk_compute.batch_download_sequences", vk.batch_download_sequences, b, {})
        vk.batch_download_sequences(b, out)
        assert.are.equal(0, tonumber(out[0]))
        vk.batch_destroy(b)
        H.assert_error({ "vk_compute.batch_compute_chunk", "destroyed" }, vk.batch_compute_chunk,
          b, N, 0, 0)
        H.assert_error({ "vk_compute.batch_download_sequences", "destroyed" },
          vk.batch_download_sequences, b, out)
      end)

    it("batch_init errors: bad starts, too few starts, a small table", function()
      H.assert_error({ "vk_compute.batch_init", "out of range" }, vk.batch_init, ctx, emb_fp16,
        N, dim, 2, { 0, N })
      H.assert_error({ "vk_compute.batch_init", "repeated" }, vk.batch_init, ctx, emb_fp16, N,
        dim, 2, { 3, 3 })
      H.assert_error({ "vk_compute.batch_init", "batch_size" }, vk.batch_init, ctx, emb_fp16, N,
        dim, 4, { 0, 1 })
      local few = ffi.new("uint32_t[?]", 2)
      H.assert_error({ "vk_compute.batch_init", "batch_size" }, vk.batch_init, ctx, emb_fp16, N,
        dim, 4, few)
      local small = ffi.new("uint16_t[?]", N * dim - 1)
      H.assert_error({ "vk_compute.batch_init", "smaller than N × D" }, vk.batch_init, ctx,
        small, N, dim, 1, { 0 })
      H.assert_error({ "vk_compute.batch_init", "negative" }, vk.batch_init, ctx, emb_fp16, N,
        dim, -1, { 0 })
    end)
  end)

  -----------------------------------------------------------------------------------------------
  describe("sequence files", function()
    it("write_sequences_to_file / load_sequences_from_file round trip", function()
      local N = 7
      local seqs = {}
      local r = H.lcg(55)
      for s = 0, N - 1 do
        local row = { s }
        for k = 0, N - 1 do if k ~= s then row[#row + 1] = k end end
        for k = #row, 3, -1 do -- shuffle all but the start
          local j = 2 + math.floor(r() * (k - 1))
          row[k], row[j] = row[j], row[k]
        end
        seqs[s] = row
      end
      local path = dir .. "/seqs.bin"
      vk.write_sequences_to_file(path, seqs, N)
      local bytes = H.read(path)
      assert.are.equal(4 + N * N * 4, #bytes)
      local u = H.u32s(bytes)
      assert.are.equal(N, u[1])
      assert.are.equal(seqs[3][4], u[1 + 3 * N + 4])
      local back, n = vk.load_sequences_from_file(path)
      assert.are.equal(N, n)
      for s = 0, N - 1 do assert.are.same(seqs[s], back[s]) end
      assert.is_nil(back[N])
    end)

    it("write_sequences_to_file(sequences, output_file): the old order, N from the keys", function()
      local N = 5
      local seqs = {}
      for s = 0, N - 1 do
        local row = { s }
        for k = N - 1, 0, -1 do if k ~= s then row[#row + 1] = k end end
        seqs[s] = row
      end
      local path = dir .. "/old_order.bin"
      vk.write_sequences_to_file(seqs, path)
      local back, n = vk.load_sequences_from_file(path)
      assert.are.equal(N, n)
      for s = 0, N - 1 do assert.are.same(seqs[s], back[s]) end
      H.assert_error({ "vk_compute.write_sequences_to_file", "start 0" },
        vk.write_sequences_to_file, { { 0 } }, dir .. "/one_based.bin")
      assert.is_false(H.exists(dir .. "/one_based.bin"))
    end)

    it("compute_all_diversity_sequences appends start by start and resumes from start_from", function()
      local N, dim = 40, 12
      local flat = H.flatten(H.random_rows(N, dim, 4242))
      local path = dir .. "/all.bin"
      local all = vk.compute_all_diversity_sequences(ctx, flat, N, dim, path)
      -- the same sequences as one at a time, and the file loads back as them
      for _, s in ipairs { 0, 17, 39 } do
        assert.are.same(vk.compute_diversity_sequence(ctx, flat, N, dim, s), all[s])
      end
      local back, n = vk.load_sequences_from_file(path)
      assert.are.equal(N, n)
      for s = 0, N - 1 do assert.are.same(all[s], back[s]) end
      -- stopped after 15 rows: resuming there gives the same file, and returns starts 15..39
      local full = H.read(path)
      H.write(path, full:sub(1, 4 + 15 * N * 4))
      local rest = vk.compute_all_diversity_sequences(ctx, flat, N, dim, path, 15)
      assert.are.equal(full, H.read(path))
      assert.is_nil(rest[14])
      assert.are.same(all[15], rest[15])
      -- a file that does not hold exactly the header and start_from rows is refused, untouched
      H.write(path, full:sub(1, 4 + 15 * N * 4 + 8))
      H.assert_error({ "vk_compute.compute_all_diversity_sequences", "all.bin", "15 whole rows" },
        vk.compute_all_diversity_sequences, ctx, flat, N, dim, path, 15)
      assert.are.equal(4 + 15 * N * 4 + 8, #H.read(path))
      H.assert_error({ "vk_compute.compute_all_diversity_sequences", "past N" },
        vk.compute_all_diversity_sequences, ctx, flat, N, dim, path, N + 1)
      -- a device (here /dev/full) is refused, naming it: never opened for writing nor renamed over
      H.assert_error({ "vk_compute.compute_all_diversity_sequences", "/dev/full",
        "is a character device" },
        vk.compute_all_diversity_sequences, ctx, flat, N, dim, "/dev/full")
      -- without a file: just the sequences
      local none = vk.compute_all_diversity_sequences(ctx, flat, N, dim, nil, 38)
      assert.are.same(all[38], none[38])
      assert.are.same(all[39], none[39])
    end)

    it("write_sequences_to_file with a missing row leaves no file", function()
      local path = dir .. "/missing.bin"
      H.assert_error({ "vk_compute.write_sequences_to_file", "start 1" },
        vk.write_sequences_to_file, path, { [0] = { 0, 1 } }, 2)
      assert.is_false(H.exists(path))
      assert.are.same({}, H.temp_files(dir, "missing.bin"))
    end)

    it("write_sequences_to_file refuses rows its reader would call corrupt, leaving no file",
      function()
      -- An entry twice, a row that does not start with its start: both were written, and the
      -- file then failed to load.
      for name, seqs in pairs({ twice = { [0] = { 0, 1, 1 }, { 1, 0, 2 }, { 2, 0, 1 } },
                               first = { [0] = { 1, 0, 2 }, { 1, 0, 2 }, { 2, 0, 1 } } }) do
        local path = dir .. "/" .. name .. ".bin"
        H.assert_error({ "vk_compute.write_sequences_to_file", "start 0",
          name == "twice" and "entry 1 twice" or "starts with 1" },
          vk.write_sequences_to_file, path, seqs, 3)
        assert.is_false(H.exists(path))
        assert.are.same({}, H.temp_files(dir, name .. ".bin"))
      end
    end)

    it("init takes a boolean: the string \"false\" is refused, not taken for true", function()
      H.assert_error({ "vk_compute.init", "enable_validation must be a boolean", "false" },
        vk.init, "false")
      H.assert_error({ "vk_compute.fp16_to_fp32", "bits must be an integer 0..65535" },
        vk.fp16_to_fp32, 15360.5)
    end)

    it("load_sequences_from_file of a missing or truncated file names it", function()
      H.assert_error({ "vk_compute.load_sequences_from_file", "nope.bin" },
        vk.load_sequences_from_file, dir .. "/nope.bin")
      H.write(dir .. "/trunc.bin", "\3\0\0\0" .. ("\0"):rep(10))
      H.assert_error({ "vk_compute.load_sequences_from_file", "trunc.bin" },
        vk.load_sequences_from_file, dir .. "/trunc.bin")
    end)

    it("compute_all_diversity_sequences_batched on N = 40", function()
      local N, dim = 40, 12
      local flat = H.flatten(H.random_rows(N, dim, 31337))
      local emb_fp16 = to_fp16(flat)
      local ref = reference(diversity.table(emb_fp16, { n = N, dim = dim }), "fp16")
      local path = dir .. "/all.bin"
      local result = vk.compute_all_diversity_sequences_batched(ctx, emb_fp16, N, dim, path, 16)
      -- keyed by 0-based start
      assert.is_nil(result[N])
      local rows = {}
      for s = 0, N - 1 do
        assert.is_table(result[s], "no sequence for start " .. s)
        rows[s + 1] = result[s]
      end
      assert.is_nil(H.diff_rows(ref, rows))
      local back, n = vk.load_sequences_from_file(path)
      assert.are.equal(N, n)
      local brows = {}
      for s = 0, N - 1 do brows[s + 1] = back[s] end
      assert.is_nil(H.diff_rows(ref, brows, "file"))
    end)
  end)

  it("generate_similarity_matrix_gpu_parallel refuses an output_file that is the input", function()
    local d = H.fortunes_dir()
    os.execute("ln -s e.json " .. H.q(d .. "/link.json"))
    local before = H.snapshot(d)
    for _, out in ipairs({ "e.json", "./e.json", "link.json" }) do
      H.assert_error({ "vk_compute.generate_similarity_matrix_gpu_parallel", "output_file",
        "is also an input (embeddings_file): refusing to overwrite it" },
        vk.generate_similarity_matrix_gpu_parallel, d .. "/e.json", "m", true, nil, 3, d .. "/" .. out)
      assert.are.same(before, H.snapshot(d), "the refused call changed the directory")
    end
  end)

  it("generate_similarity_matrix_gpu_parallel reuses a cache only when its content checks out",
    function()
      local d = H.fortunes_dir()
      local out = d .. "/r.json"
      local gen = vk.generate_similarity_matrix_gpu_parallel
      local p, n, reused = gen(d .. "/e.json", "m", false, 1, 3, out)
      assert.are.same({ out, 300, false }, { p, n, reused })
      local good = H.read(out)
      assert.truthy(good:find('"checksum":"fnv1a64:%x+"'), "the cache carries its checksum")
      assert.is_true(diversity.verify_cache_checksum(out))
      assert.are.same({ out, 300, true }, { gen(d .. "/e.json", "m", false, 1, 3, out) })
      -- edited after it was written: total_poems, a ranking's entry, the file cut short — the
      -- metadata still says the same source, model and top_k, but the cache is recomputed
      local function replace(text, from, to)
        local i = assert(text:find(from, 1, true), from)
        return text:sub(1, i - 1) .. to .. text:sub(i + #from)
      end
      local first = good:match('"rankings":{"[^"]+":%[("[^"]+")')
      for what, text in pairs {
        total = replace(good, '"total_poems":300', '"total_poems":1000000000000'),
        entry = replace(good, first, '"fortune-299"'),
        short = good:sub(1, #good - 40) .. "}}\n",
      } do
        H.write(out, text)
        H.assert_error({ "verify_cache_checksum", "r.json" }, diversity.verify_cache_checksum, out)
        local p2, n2, reused2 = gen(d .. "/e.json", "m", false, 1, 3, out)
        assert.are.same({ out, 300, false }, { p2, n2, reused2 }, what)
        assert.are.equal(good, H.read(out), what .. ": the recomputed cache differs")
      end
      -- a cache from before caches carried checksums is recomputed too
      H.write(out, (good:gsub(',"checksum":"fnv1a64:%x+"', "", 1)))
      assert.is_false(select(3, gen(d .. "/e.json", "m", false, 1, 3, out)))
      assert.are.equal(good, H.read(out))
    end)

  it("left no validation messages; shutdown closes the context", function()
    H.assert_no_validation(ctx)
    H.assert_no_validation(dctx)
    vk.shutdown(ctx)
    H.assert_error("used after close()", ctx.name, ctx)
    vk.shutdown(nil)
  end)
end)
