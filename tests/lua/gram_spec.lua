-- The gram engine and the mode choice through the idiomatic API:
-- `mode = "scan" | "gram" | "auto"` on dtable:job / dtable:resume_job, dtable:gram() and the gram
-- object, job:mode() / job:placement(), ctx:mode_for and ctx:max_batch(..., mode). Gram and scan
-- bits are not promised equal, so gram is compared with gram across chunk,
-- batch, placement, workgroup, reduction, start order and resume, with the Rust command line's
-- gram, and every sequence is checked to be a permutation and ε-argmax of the exact distance.
local ffi = require "ffi"
local diversity = require "diversity"
local H = require "helpers"

describe("gram mode", function()
  local ctx, t, dt, N

  setup(function()
    ctx = diversity.open { validation = true }
    t = diversity.load(H.DATA_NPY):head(96):centered()
    N = t:n()
    dt = ctx:upload(t, "fp16")
  end)

  teardown(function()
    if dt then dt:close() end
    if t then t:close() end
    if ctx then
      H.assert_no_validation(ctx)
      ctx:close()
    end
    H.cleanup()
  end)

  local function all_starts()
    local s = {}
    for i = 0, N - 1 do s[#s + 1] = i end
    return s
  end

  -- Every full sequence of `starts` through gram options `o`, in batches of `batch`.
  local function gram_rows(starts, o, batch)
    local out = {}
    batch = batch or #starts
    for first = 1, #starts, batch do
      local list = {}
      for i = first, math.min(first + batch - 1, #starts) do list[#list + 1] = starts[i] end
      local job = dt:job(list, o)
      assert.are.equal("gram", job:mode())
      while not job:done() do job:step(37) end
      for _, row in ipairs(job:sequences()) do out[#out + 1] = row end
      job:close()
    end
    return out
  end

  it("mode_for: auto picks gram when G fits (lavapipe), with the reason; scan when asked", function()
    -- (mode, reason in words, reason code, why G does not fit or nil)
    local m, why, code, unfit = ctx:mode_for(N, t:dim(), "fp16")
    assert.are.equal("gram", m)
    assert.truthy(why:find("auto", 1, true), why)
    assert.truthy(why:find("fits", 1, true), why)
    assert.are.equal("auto_fits", code)
    assert.is_nil(unfit)
    assert.are.same({ "scan", "requested", "requested" },
      { ctx:mode_for(N, t:dim(), "fp16", "scan") })
    assert.are.same({ "gram", "requested", "requested" },
      { ctx:mode_for(N, t:dim(), "fp16", "gram") })
    assert.are.same({ "gram", why, "auto_fits" }, { dt:mode_for() })
    H.assert_error({ "context:mode_for", "bogus", "scan, gram or auto" }, ctx.mode_for, ctx, N,
      t:dim(), "fp16", "bogus")
    -- G of a huge N does not fit: auto falls back to scan and says how much G needs
    m, why, code, unfit = ctx:mode_for(1000000, 768, "fp16")
    assert.are.equal("scan", m)
    assert.truthy(why:find("MiB", 1, true), why)
    assert.are.equal("auto_unfit", code)
    assert.are.equal("auto: " .. unfit, why)
    -- asked for gram where G does not fit: the mode stays gram, the code says it cannot run
    m, why, code, unfit = ctx:mode_for(1000000, 768, "fp16", "gram")
    assert.are.equal("gram", m)
    assert.are.equal("requested_unfit", code)
    assert.are.equal("requested, but " .. unfit, why)
    -- Rows of G are padded to a multiple of 4 entries.
    assert.are.equal(N * (math.ceil(N / 4) * 4) * 4, diversity.gram_bytes(N))
    assert.are.equal(5 * 8 * 4, diversity.gram_bytes(5))
    assert.are.equal(8 * 8 * 4, diversity.gram_bytes(8))
    -- 2^31 items once wrapped to 0 bytes; past 2^53 bytes the size is refused, not wrapped.
    assert.are.equal(4 * 2 ^ 50, diversity.gram_bytes(2 ^ 25))
    H.assert_error({ "gram_bytes", "2147483648" }, diversity.gram_bytes, 2 ^ 31)
  end)

  it("max_batch(..., 'gram') sizes gram batches (the whole table here)", function()
    assert.are.equal(N, ctx:max_batch(N, t:dim(), "fp16", N - 1, "gram"))
    assert.are.equal(N, ctx:max_batch(N, t:dim(), "fp16", N - 1, "auto"))
    assert.is_true(ctx:max_batch(N, t:dim(), "fp16", N - 1, "scan") >= 1)
  end)

  it("dtable:job's default mode is auto, as on every front end; scan runs the scan engine", function()
    local s = dt:job({ 0, 1 }, { steps = 3, mode = "scan" })
    assert.are.equal("scan", s:mode())
    assert.is_nil(s:placement())
    assert.is_nil(s:uses_subgroups())
    s:close()
    local default = dt:job({ 0, 1 }, { steps = 3 })
    assert.are.equal(dt:mode_for("auto"), default:mode())
    default:close()
    assert.are.equal(ctx:max_batch(N, t:dim(), "fp16", N - 1, "auto"),
      ctx:max_batch(N, t:dim(), "fp16", N - 1))
    for _, mode in ipairs { "gram", "auto" } do
      local j = dt:job({ 0, 1 }, { steps = 3, mode = mode })
      assert.are.equal("gram", j:mode())
      assert.truthy(j:placement() == "registers" or j:placement() == "memory", j:placement())
      assert.are.equal("boolean", type(j:uses_subgroups()))
      assert.is_true(j:workgroup_size() >= 1)
      j:close()
    end
    local j = dt:job({ 0 }, { steps = 3, mode = "gram", placement = "memory" })
    assert.are.equal("memory", j:placement())
    j:close()
  end)

  it("gram and scan jobs pass through the same API", function()
    local starts = { 7, 0, 95, 40 }
    local K = 12
    for _, mode in ipairs { "scan", "gram" } do
      local job = dt:job(starts, { mode = mode, steps = K, chunk = 5 })
      assert.are.equal(mode, job:mode())
      assert.are.same({ 0, K }, { job:progress() })
      assert.are.equal(1, job:sequence_len())
      assert.are.same(starts, H.u32s(job:columns(0, 1)))
      assert.are.same(starts, job:starts())
      assert.are.equal(4, job:batch_size())
      local steps, ns = job:step(4)
      assert.are.equal(4, steps)
      assert.is_true(ns >= 0)
      assert.is_false(job:done())
      assert.are.same({ 4, K }, { job:progress() })
      local early = job:columns(0, 5)
      steps = job:step(100, 16) -- a tile argument is the scan engine's; gram ignores it
      assert.are.equal(K - 4, steps)
      assert.is_true(job:done())
      assert.are.same({ K, K }, { job:progress() })
      assert.is_true(job:gpu_ns() >= 0)
      assert.are.equal(K + 1, job:sequence_len())
      local seqs = job:sequences()
      assert.are.equal(#starts, #seqs)
      for i, row in ipairs(seqs) do
        assert.are.equal(K + 1, #row)
        assert.are.equal(starts[i], row[1])
        local seen = {}
        for _, v in ipairs(row) do
          assert.is_true(v >= 0 and v < N)
          assert.is_nil(seen[v])
          seen[v] = true
        end
        -- ε-argmax of the exact distance along its own prefix
        assert.is_true(t:check_sequence(row[1], row, 1e-5, "fp16") <= 0)
      end
      local flat = H.u32s(job:sequences_bytes())
      assert.is_nil(H.diff_rows(seqs, H.rows_of(flat, K + 1), mode .. " bytes"))
      -- the columns fetched mid-run are the final rows' first entries
      local first5 = {}
      for i, row in ipairs(seqs) do first5[i] = { unpack(row, 1, 5) } end
      assert.is_nil(H.diff_rows(first5, H.rows_of(H.u32s(early), 5), mode .. " columns"))
      local buf = ffi.new("uint32_t[?]", #starts * (K + 1))
      assert.are.equal(#starts * (K + 1), job:download(buf))
      for i = 0, #flat - 1 do assert.are.equal(flat[i + 1], tonumber(buf[i])) end
      -- the writers take either job
      local dir = H.tmpdir()
      local w = diversity.json_cache_writer(dir .. "/c.json", { mode = mode })
      w:write_job(job)
      w:finish()
      local j = H.json_file(dir .. "/c.json")
      assert.are.equal(mode, j.metadata.mode)
      assert.are.equal(K + 1, j.sequences["95"].n)
      assert.are.equal(seqs[3][K + 1], j.sequences["95"][K + 1])
      job:close()
    end
  end)

  it("top_k 0 gives each start alone", function()
    local job = dt:job({ 3, 4 }, { mode = "gram", steps = 0 })
    assert.is_true(job:done())
    job:step(5)
    assert.are.same({ { 3 }, { 4 } }, job:sequences())
    job:close()
  end)

  it("full-length gram sequences are permutations, the same bits across chunk, batch, placement, workgroup, reduction and start order",
    function()
      local starts = all_starts()
      local base = gram_rows(starts, { mode = "gram" })
      for i, row in ipairs(base) do
        assert.is_true(H.is_permutation(row, N), "row " .. i .. " is not a permutation")
      end
      local variants = {
        { { mode = "gram", chunk = 1 }, 17 },
        { { mode = "auto", chunk = 0 }, 50 },
        { { mode = "gram", placement = "memory", chunk = 9 }, 96 },
        { { mode = "gram", placement = "registers", workgroup = 32 }, 31 },
        { { mode = "gram", subgroups = false, workgroup = 16 }, 96 },
      }
      for k, v in ipairs(variants) do
        assert.is_nil(H.diff_rows(base, gram_rows(starts, v[1], v[2]), "variant " .. k))
      end
      -- reversed start order: the same sequence for each start
      local rev = {}
      for i = N, 1, -1 do rev[#rev + 1] = starts[i] end
      local r = gram_rows(rev, { mode = "gram", chunk = 13 }, 40)
      for i = 1, N do
        assert.is_nil(H.diff_rows({ base[i] }, { r[N + 1 - i] }, "reversed start " .. (i - 1)))
      end
    end)

  it("plain sums (compensated = false): permutations, their own same bits across placement, chunk and workgroup",
    function()
      local starts = { 0, 17, 95 }
      local base = gram_rows(starts, { mode = "gram", compensated = false })
      for i, row in ipairs(base) do
        assert.is_true(H.is_permutation(row, N), "row " .. i .. " is not a permutation")
      end
      for k, o in ipairs({
        { mode = "gram", compensated = false, placement = "memory", chunk = 7 },
        { mode = "gram", compensated = false, workgroup = 16, chunk = 1 },
      }) do
        assert.is_nil(H.diff_rows(base, gram_rows(starts, o, 2), "plain variant " .. k))
      end
    end)

  it("resume continues bit-identically from any prefix (dtable:resume_job and gram:resume_job)",
    function()
      local starts = { 5, 50, 77, 0 }
      local K = 40
      local full = dt:job(starts, { mode = "gram", steps = K })
      full:step(K)
      local want = full:sequences_bytes()
      local g = dt:gram()
      for _, len in ipairs { 1, 2, 17, K + 1 } do
        local prefix = full:columns(0, len)
        -- the gram engine needs no host table
        local a = dt:resume_job(nil, starts, prefix, len, { mode = "gram", steps = K, chunk = 6 })
        assert.are.equal("gram", a:mode())
        assert.are.same({ len - 1, K }, { a:progress() })
        while not a:done() do a:step(7) end
        assert.are.equal(want, a:sequences_bytes(), "dtable:resume_job from " .. len)
        a:close()
        local b = g:resume_job(starts, prefix, len, { steps = K, placement = "memory" })
        b:step(K)
        assert.are.equal(want, b:sequences_bytes(), "gram:resume_job from " .. len)
        b:close()
      end
      -- auto with the host table resolves the same way
      local c = dt:resume_job(t, starts, full:columns(0, 9), 9, { mode = "auto", steps = K })
      assert.are.equal("gram", c:mode())
      c:step(K)
      assert.are.equal(want, c:sequences_bytes())
      c:close()
      -- the scan engine rebuilds its sums on the host: it needs the table
      H.assert_error({ "device_table:resume_job", "host table" }, dt.resume_job, dt, nil, starts,
        full:columns(0, 3), 3, { mode = "scan", steps = K })
      -- a prefix that does not begin with its start is refused
      H.assert_error({ "device_table:resume_job", "begins with" }, dt.resume_job, dt, nil,
        { 50, 5, 77, 0 }, full:columns(0, 3), 3, { mode = "gram", steps = K })
      full:close(); g:close()
    end)

  it("the gram object: G built once, reusable, reports its size", function()
    local g = dt:gram()
    assert.are.equal(N, g:n())
    assert.are.equal(N * N * 4, g:bytes())
    assert.are.equal(1, g:slabs())
    assert.is_true(g:build_gpu_ns() >= 0)
    -- the device table's cached G is the same one (same build)
    local g2 = dt:gram()
    assert.are.equal(g:build_gpu_ns(), g2:build_gpu_ns())
    -- Stored with scaled columns, G[i][j] = e_i·e_j / |e_j|: G[i][i] = |e_i| > 0, and
    -- G[0][5]·|e_5| = G[5][0]·|e_0| (= e_0·e_5) up to rounding
    local r0, r5 = g:row(0), g:row(5)
    assert.are.equal(N, #r0)
    assert.is_true(r0[1] > 0 and r5[6] > 0)
    local a_, b_ = r0[6] * r5[6], r5[1] * r0[1]
    assert.is_true(math.abs(a_ - b_) <= 1e-5 * (math.abs(a_) + math.abs(b_)) + 1e-12, a_ .. " vs " .. b_)
    H.assert_error({ "gram:row", "row 96" }, g.row, g, N)
    local a = g:job({ 1, 2 }, { steps = 9 })
    a:step(9)
    local b = dt:job({ 1, 2 }, { mode = "gram", steps = 9 })
    b:step(9)
    assert.are.equal(a:sequences_bytes(), b:sequences_bytes())
    a:close(); b:close(); g2:close(); g:close()
  end)

  it("dtable:gram(opts): the G its options need; a gram job refuses options its G cannot run",
    function()
      -- Fixed-point keys are the default where the device has float64 (lavapipe has).
      local fixed = ctx:gram_summation(N, t:dim()):find("^fixed") ~= nil
      local comp = { compensated = true, steps = 12 }
      local g = dt:gram()
      if fixed then
        H.assert_error({ "gram:job", "fixed-point", "compensated sums", "dtable:gram(opts)" },
          g.job, g, { 0 }, comp)
        H.assert_error({ "gram:job", "fixed-point", "no judge" }, g.job, g, { 0 },
          { judge = false })
      end
      -- a G for float sums runs them, the same bytes as the table's own job with those options
      local gf = dt:gram(comp)
      local a = gf:job({ 3, 40 }, comp)
      a:step(12)
      local b = dt:job({ 3, 40 }, { mode = "gram", compensated = true, steps = 12 })
      b:step(12)
      assert.are.equal(b:sequences_bytes(), a:sequences_bytes())
      -- and the default G again for the default options
      local g2 = dt:gram()
      local c = g2:job({ 3, 40 }, { steps = 12 })
      c:step(12)
      local d = dt:job({ 3, 40 }, { mode = "gram", steps = 12 })
      d:step(12)
      assert.are.equal(d:sequences_bytes(), c:sequences_bytes())
      H.assert_error({ "device_table:gram", "'sideways'" }, dt.gram, dt, { placement = "sideways" })
      a:close(); b:close(); c:close(); d:close(); g:close(); gf:close(); g2:close()
    end)

  it("use after close of the gram object; jobs and G outlive the handles that made them", function()
    local t2 = diversity.load(H.DATA_NPY):head(20)
    local dt2 = ctx:upload(t2, "fp32")
    local g = dt2:gram()
    local job = g:job({ 0, 19 }, { steps = 5 })
    g:close()
    for _, call in ipairs { "n", "bytes", "slabs", "build_gpu_ns" } do
      H.assert_error({ "gram:" .. call, "gram used after close()" }, g[call], g)
    end
    H.assert_error({ "gram:job", "gram used after close()" }, g.job, g, { 0 })
    H.assert_error({ "gram:resume_job", "gram used after close()" }, g.resume_job, g, { 0 }, "", 0)
    g:close() -- twice is fine
    -- the device table and the table go first: the job keeps G (and the table on the device)
    dt2:release_gram()
    dt2:close(); t2:close()
    H.assert_error({ "device_table:gram", "device table used after close()" }, dt2.gram, dt2)
    job:step(5)
    assert.is_true(job:done())
    assert.are.equal(2, #job:sequences())
    job:close()
    H.assert_error({ "job:mode", "job used after close()" }, job.mode, job)
    H.assert_error({ "job:placement", "job used after close()" }, job.placement, job)
    -- garbage collection in any order
    local t3 = diversity.load(H.DATA_NPY):head(12)
    local dt3 = ctx:upload(t3, "fp16")
    local g3 = dt3:gram()
    local j3 = dt3:job({ 0 }, { mode = "gram", steps = 2 })
    t3, dt3, g3 = nil, nil, nil
    collectgarbage("collect")
    j3:step(2)
    assert.are.equal(3, #j3:sequences()[1])
    j3 = nil
    collectgarbage("collect")
  end)

  it("bad gram options are errors naming the call and the cause", function()
    H.assert_error({ "device_table:job", "mode 'bogus'", "scan, gram or auto" }, dt.job, dt,
      { 0 }, { mode = "bogus" })
    H.assert_error({ "device_table:job", "'sideways'", "registers" }, dt.job, dt, { 0 },
      { mode = "gram", placement = "sideways" })
    H.assert_error({ "device_table:job", "workgroup size 48" }, dt.job, dt, { 0 },
      { mode = "gram", workgroup = 48 })
    H.assert_error({ "device_table:job", "start 96 is out of range" }, dt.job, dt, { 96 },
      { mode = "gram" })
    H.assert_error({ "device_table:job", "start 3 is repeated" }, dt.job, dt, { 3, 3 },
      { mode = "gram" })
    H.assert_error({ "device_table:job", "negative" }, dt.job, dt, { 0 },
      { mode = "gram", chunk = -1 })
    local g = dt:gram()
    H.assert_error({ "gram:job", "start 96" }, g.job, g, { 96 })
    g:close()
  end)

  it("gram via Lua equals gram via the Rust command line (examples/sequences --mode gram)",
    function()
      local exe = "target/release/examples/sequences"
      if not H.exists(exe) then
        pending("build the example first (cargo test --release builds it)")
        return
      end
      local dir = H.tmpdir()
      local starts = { 0, 17, 95 }
      local rc, out, err = H.sh(("%s --table %s --center --precision fp16 --mode gram --steps 30 "
        .. "--starts 0,17,95 --chunk 7 --out %s"):format(exe, H.q(H.DATA_NPY),
        H.q(dir .. "/r.json")))
      -- the example reads the whole 2,048-row file; compare on its own table
      assert.are.equal(0, rc, err)
      assert.truthy(err:find("mode gram", 1, true), err)
      local j = H.json_file(dir .. "/r.json")
      assert.are.equal("gram", j.metadata.mode)
      local full = diversity.load(H.DATA_NPY):centered()
      local fdt = ctx:upload(full, "fp16")
      local job = fdt:job(starts, { mode = "gram", steps = 30, chunk = 11 })
      job:step(30)
      for i, row in ipairs(job:sequences()) do
        local got = j.sequences[tostring(starts[i])]
        assert.are.equal(31, got.n)
        for k = 1, 31 do assert.are.equal(row[k], got[k], "start " .. starts[i] .. " entry " .. k) end
      end
      job:close(); fdt:close(); full:close()
      assert.truthy(out:find("gram", 1, true), out)
    end)
end)
