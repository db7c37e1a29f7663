-- Exact k-NN, similarity rankings and the k-NN graph from Lua: results
-- against a brute-force float64 computation, padding, the rankings cache and the compat entry
-- `vk_compute.generate_similarity_matrix_gpu_parallel`, the graph reader, bad input, lifetimes.
local ffi = require "ffi"
local diversity = require "diversity"
local vk = require "vk_compute"
local H = require "helpers"

local int_rows = H.int_rows

local function score(metric, a, b)
  local dot, na, nb, l2 = 0, 0, 0, 0
  for j = 1, #a do
    local x, y = H.f32(a[j]), H.f32(b[j])
    dot = dot + x * y
    na, nb = na + x * x, nb + y * y
    l2 = l2 + (x - y) * (x - y)
  end
  if metric == "ip" then return dot end
  if metric == "l2" then return l2 end
  if na == 0 or nb == 0 then return 0 end
  return dot / math.sqrt(na * nb)
end

-- The brute-force ranking of query `q` against `rows` (0-based ids, best first, ties by the
-- lowest id), with the scores.
local function brute(metric, rows, q, exclude)
  local order = {}
  for i = 1, #rows do
    if i - 1 ~= exclude then
      order[#order + 1] = { id = i - 1, s = score(metric, q, rows[i]) }
    end
  end
  table.sort(order, function(a, b)
    if a.s ~= b.s then
      if metric == "l2" then return a.s < b.s end
      return a.s > b.s
    end
    return a.id < b.id
  end)
  local ids, scores = {}, {}
  for i, o in ipairs(order) do ids[i], scores[i] = o.id, o.s end
  return ids, scores
end

describe("k-NN from Lua", function()
  local ctx, dir
  H.context_for(setup, teardown, function(c, d) ctx, dir = c, d end)

  it("self-search equals the float64 brute force exactly on integer rows (ties by lowest id)",
    function()
      local rows = int_rows(37, 5, 7)
      rows[20] = { unpack(rows[3]) } -- duplicates: real ties
      rows[31] = { unpack(rows[3]) }
      local t = diversity.table(rows)
      local dt = ctx:upload(t, "fp32")
      for _, metric in ipairs { "ip", "l2" } do
        for _, k in ipairs { 1, 6, 37 } do
          local r = dt:knn(t, { k = k, metric = metric })
          assert.are.equal(k, r:k())
          assert.are.equal(37, r:queries())
          local all = r:ids()
          for q = 0, 36 do
            local want = brute(metric, rows, rows[q + 1])
            local got = r:ids(q)
            assert.are.same(got, all[q + 1])
            for i = 1, k do
              assert.are.equal(want[i], got[i],
                ("%s k=%d query %d position %d"):format(metric, k, q, i))
            end
          end
          r:close()
        end
      end
      -- self included: an item with no duplicates comes first against itself (l2 distance 0)
      local r = dt:knn(t, { k = 3, metric = "l2" })
      assert.are.equal(0, r:ids(0)[1])
      assert.are.equal(0, r:distances(0)[1])
      -- the duplicates of row 2: each query among them gets 2, 19, 30 in that order
      for _, q in ipairs { 2, 19, 30 } do assert.are.same({ 2, 19, 30 }, r:ids(q)) end
      dt:close(); t:close()
    end)

  it("verify = Q cross-checks Q queries against the float64 brute force, on knn and rankings",
    function()
      local rows = H.random_rows(300, 24, 11)
      local t = diversity.table(rows)
      local dt = ctx:upload(t, "fp16")
      local r = dt:knn(t, { k = 11, verify = 5 })
      assert.are.equal(5, r:verified())
      r:close()
      local plain = dt:knn(t, { k = 11 })
      assert.are.equal(0, plain:verified())
      plain:close()
      local _, _, report = dt:rankings(t, { top_k = 10, verify = 7 })
      assert.are.equal(7, report.verified)
      local ok, err = pcall(dt.knn, dt, t, { k = 11, verify = -1 })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("verify", 1, true))
      dt:close(); t:close()
    end)

  it("cosine search agrees with the float64 reference within rounding (Faiss's oracle)", function()
    local rows = H.random_rows(50, 13, 3)
    local qrows = H.random_rows(9, 13, 4)
    local t, q = diversity.table(rows), diversity.table(qrows)
    local dt = ctx:upload(t, "fp32")
    local r = dt:knn(q, { k = 10 }) -- cosine by default
    local dists = r:distances()
    for qi = 0, 8 do
      local want_ids, want = brute("cosine", rows, qrows[qi + 1])
      local got = r:ids(qi)
      local seen = {}
      for i = 1, 10 do
        assert.is_true(math.abs(dists[qi + 1][i] - want[i]) < 1e-5)
        assert.is_nil(seen[got[i]]); seen[got[i]] = true
        if got[i] ~= want_ids[i] then
          assert.is_true(math.abs(score("cosine", qrows[qi + 1], rows[got[i] + 1]) - want[i]) < 1e-5)
        end
      end
    end
    r:close(); dt:close(); q:close(); t:close()
  end)

  it("pads with -1 and -inf (similarities) / +inf (l2) when k > N; FFI-friendly outputs", function()
    local rows = int_rows(4, 3, 11)
    local t = diversity.table(rows)
    local dt = ctx:upload(t, "fp32")
    local r = dt:knn(t, { k = 7, metric = "ip" })
    for q = 0, 3 do
      local ids, d = r:ids(q), r:distances(q)
      assert.are.equal(7, #ids)
      for i = 5, 7 do
        assert.are.equal(-1, ids[i])
        assert.are.equal(-math.huge, d[i])
      end
    end
    local bytes = r:ids_bytes()
    assert.are.equal(4 * 7 * 4, #bytes)
    local ids32 = ffi.new("int32_t[?]", 28)
    local dist = ffi.new("float[?]", 28)
    ffi.copy(ids32, bytes, #bytes)
    local fromstr = ffi.new("float[?]", 28)
    ffi.copy(fromstr, r:distances_bytes(), 28 * 4)
    assert.are.equal(28, r:download(ids32, dist))
    for q = 0, 3 do
      local ids, d = r:ids(q), r:distances(q)
      for i = 1, 7 do
        assert.are.equal(ids[i], ids32[q * 7 + i - 1])
        assert.are.equal(d[i], dist[q * 7 + i - 1])
        assert.are.equal(d[i], fromstr[q * 7 + i - 1])
      end
    end
    H.assert_error({ "knn:download", "smaller" }, r.download, r, ffi.new("int32_t[?]", 2))
    -- raw addresses and inflated byte counts are refused, nothing written
    local guard = ffi.new("int32_t[?]", 2, 77, 77)
    H.assert_error({ "knn:download", "must be a cdata array", "number" }, r.download, r,
      tonumber(ffi.cast("uintptr_t", guard)), 1e6)
    H.assert_error({ "knn:download", "pointer cdata" }, r.download, r,
      ffi.cast("int32_t *", guard))
    H.assert_error({ "knn:download", "float[?]" }, r.download, r, nil, ffi.new("int32_t[?]", 28))
    assert.are.same({ 77, 77 }, { guard[0], guard[1] })
    H.assert_error({ "knn:ids", "query 4 is out of range" }, r.ids, r, 4)
    local l2 = dt:knn(t, { k = 5, metric = "l2" })
    assert.are.same({ -1 }, { l2:ids(1)[5] })
    assert.are.equal(math.huge, l2:distances(1)[5])
    l2:close(); r:close(); dt:close(); t:close()
  end)

  it("rankings: self excluded, sorted, ties by lowest index, values beside; streamed by batch",
    function()
      local rows = int_rows(23, 4, 5)
      rows[9] = { unpack(rows[1]) }
      local t = diversity.table(rows)
      local dt = ctx:upload(t, "fp32")
      local got, values, report = dt:rankings(t, { top_k = 6, metric = "ip", batch = 5 })
      assert.are.equal(23, report.items)
      assert.are.equal(6, report.top_k)
      assert.are.equal(5, report.batches)
      -- 1-based arrays: got[i + 1] is item i's ranking (0-based ids).
      assert.are.equal(23, #got)
      assert.are.equal(23, #values)
      for i = 0, 22 do
        local want, scores = brute("ip", rows, rows[i + 1], i)
        assert.are.equal(6, #got[i + 1])
        for j = 1, 6 do
          assert.are.equal(want[j], got[i + 1][j], ("item %d position %d"):format(i, j))
          assert.are.equal(scores[j], values[i + 1][j])
        end
      end
      -- all N - 1 (top_k nil), chosen items, and the streaming form agree
      local all = dt:rankings(t, { metric = "ip", items = { 8, 0 }, values = false })
      -- in the order of `items`: all[1] is item 8's
      assert.are.equal(2, #all)
      assert.are.equal(22, #all[1])
      assert.are.same(brute("ip", rows, rows[9], 8), all[1]) -- its duplicate 0 ranked, not itself
      assert.are.same(brute("ip", rows, rows[1], 0), all[2])
      local streamed, calls = {}, 0
      local rep = dt:rankings(t, {
        top_k = 6, metric = "ip", batch = 7,
        each = function(items, ids, vals)
          calls = calls + 1
          assert.are.equal(#items, #ids)
          assert.are.equal(#items, #vals)
          for i, item in ipairs(items) do streamed[item + 1] = ids[i] end
        end,
      })
      assert.are.equal(4, calls)
      assert.are.equal(23, rep.items)
      assert.are.same(got, streamed)
      -- an error in the callback comes back as it was raised
      H.assert_error("stop here", dt.rankings, dt, t, { each = function() error("stop here") end })
      dt:close(); t:close()
    end)

  it("writes the rankings cache: ids mapped, self excluded, sorted; threads do not change bytes",
    function()
      local rows = H.random_rows(30, 8, 21)
      local src = dir .. "/emb.json"
      H.write_embeddings_json(src, rows)
      local t = diversity.load(src)
      local dt = ctx:upload(t, "fp32")
      local out1, out4 = dir .. "/r1.json", dir .. "/r4.json"
      local rep = dt:write_rankings_cache(t, out1, { top_k = 4, model = "m", threads = 1 })
      assert.are.equal(30, rep.items)
      dt:write_rankings_cache(t, out4, { top_k = 4, model = "m", threads = 4, batch = 7 })
      assert.are.equal(H.read(out1), H.read(out4))
      local c = H.json_file(out1)
      assert.are.equal(30, c.metadata.total_poems)
      assert.are.equal("pre_sorted_rankings", c.metadata.format)
      assert.are.equal(4, c.metadata.top_k)
      assert.are.equal("m", c.metadata.model)
      assert.are.equal("cosine-knn-v1", c.metadata.algorithm)
      local ranked = dt:rankings(t, { top_k = 4 })
      for i = 0, 29 do
        local list = c.rankings["r" .. i]
        assert.are.equal(4, #list)
        local want = brute("cosine", rows, rows[i + 1], i)
        for j = 1, 4 do
          assert.are_not.equal("r" .. i, list[j])
          assert.are.equal("r" .. ranked[i + 1][j], list[j])
          if list[j] ~= "r" .. want[j] then -- a float near-tie: the scores must agree
            local a = score("cosine", rows[i + 1], rows[tonumber(list[j]:sub(2)) + 1])
            local b = score("cosine", rows[i + 1], rows[want[j] + 1])
            assert.is_true(math.abs(a - b) < 1e-6)
          end
        end
      end
      dt:close(); t:close()
    end)

  it("writes and reads the k-NN graph (default k = 10, padding past N - 1)", function()
    local rows = int_rows(12, 3, 9)
    local t = diversity.table(rows)
    local dt = ctx:upload(t, "fp32")
    local path = dir .. "/g.knn"
    local rep = dt:write_knn_graph(t, path, { metric = "l2" })
    assert.are.equal(12, rep.items)
    local g = diversity.knn_graph(path)
    assert.are.equal(12, g:n())
    assert.are.equal(10, g:k())
    assert.are.equal("l2", g:metric())
    for i = 0, 11 do
      local ids, vals = g:row(i)
      local want, scores = brute("l2", rows, rows[i + 1], i)
      assert.are.equal(10, #ids)
      for j = 1, 10 do
        assert.are.equal(want[j], ids[j])
        assert.are.equal(scores[j], vals[j])
      end
    end
    H.assert_error({ "knn_graph:row", "out of range" }, g.row, g, 12)
    g:close()
    local p2 = dir .. "/g2.knn"
    dt:write_knn_graph(t, p2, { k = 12 })
    local g2 = diversity.knn_graph(p2)
    assert.are.equal("cosine", g2:metric())
    local ids, vals = g2:row(3)
    assert.are.equal(12, #ids)
    for j = 12, 12 do
      assert.are.equal(-1, ids[j])
      assert.are.equal(-math.huge, vals[j])
    end
    g2:close()
    H.assert_error({ "diversity.knn_graph", "not a k-NN graph" }, diversity.knn_graph, H.DATA_JSON)
    dt:close(); t:close()
  end)

  it("refuses bad input with named errors and leaves no file", function()
    local t = diversity.table(H.random_rows(6, 4, 1))
    local dt = ctx:upload(t, "fp32")
    H.assert_error({ "device_table:knn", "k ≥ 1" }, dt.knn, dt, t, { k = 0 })
    H.assert_error({ "device_table:knn", "metric 'hamming'" }, dt.knn, dt, t, { metric = "hamming" })
    H.assert_error({ "device_table:knn", "metric must be" }, dt.knn, dt, t, { metric = 3 })
    H.assert_error({ "device_table:knn", "negative" }, dt.knn, dt, t, { k = -1 })
    local q3 = diversity.table(H.random_rows(2, 3, 1))
    H.assert_error({ "device_table:knn", "dimension 3" }, dt.knn, dt, q3)
    H.assert_error({ "device_table:rankings", "item 6 is out of range" }, dt.rankings, dt, t,
      { items = { 6 } })
    H.assert_error({ "device_table:rankings", "host table" }, dt.rankings, dt, q3)
    H.assert_error({ "device_table:write_knn_graph", "k = 0" }, dt.write_knn_graph, dt, t,
      dir .. "/k0.knn", { k = 0 })
    -- sizes from user input are checked before allocating or creating anything
    local sub = H.tmpdir()
    H.assert_error({ "device_table:write_knn_graph", "k = 2147483647", "1..=N = 6" },
      dt.write_knn_graph, dt, t, sub .. "/big.knn", { k = 2 ^ 31 - 1 })
    H.assert_error({ "device_table:write_knn_graph", "k = 7" },
      dt.write_knn_graph, dt, t, sub .. "/seven.knn", { k = 7 })
    H.assert_error({ "device_table:knn", "host budget" }, dt.knn, dt, t, { k = 2 ^ 50 })
    H.assert_error({ "diversity.binary_cache_writer", "at most N entries" },
      diversity.binary_cache_writer, sub .. "/b.bin", 1, 2 ^ 38)
    assert.are.same({}, H.ls(sub))
    -- k = 2^31 on 6 rows: device work clamped to N, the result padded with -1
    local r = dt:knn(t, { k = 2 ^ 31 / 2 ^ 20 })
    assert.are.equal(2 ^ 11, r:k())
    assert.are.equal(-1, r:ids(0)[7])
    local missing = dir .. "/no/such/dir"
    H.assert_error({ "device_table:write_rankings_cache", missing },
      dt.write_rankings_cache, dt, t, missing .. "/r.json", { top_k = 2 })
    H.assert_error({ "device_table:write_knn_graph", missing },
      dt.write_knn_graph, dt, t, missing .. "/g.knn")
    H.assert_error({ "device_table:write_rankings_cache", "metric" },
      dt.write_rankings_cache, dt, t, dir .. "/bad.json", { metric = "nope" })
    assert.is_false(H.exists(dir .. "/no"))
    assert.is_false(H.exists(dir .. "/k0.knn"))
    assert.is_false(H.exists(dir .. "/bad.json"))
    assert.are.same({}, H.temp_files(dir))
    q3:close(); dt:close(); t:close()
  end)

  it("every new object errors after close(); close twice is fine; GC in any order", function()
    local t = diversity.table(H.random_rows(5, 3, 2))
    local dt = ctx:upload(t, "fp32")
    local r = dt:knn(t, { k = 2 })
    r:close(); r:close()
    for _, name in ipairs { "k", "queries", "ids", "distances", "ids_bytes", "distances_bytes",
      "path", "gpu_ns" } do
      H.assert_error({ "knn:" .. name, "knn result used after close()" }, r[name], r)
    end
    local path = dir .. "/lt.knn"
    dt:write_knn_graph(t, path, { k = 2 })
    local g = diversity.knn_graph(path)
    g:close(); g:close()
    for _, name in ipairs { "n", "k", "metric" } do
      H.assert_error({ "knn_graph:" .. name, "knn graph used after close()" }, g[name], g)
    end
    H.assert_error("knn graph used after close()", g.row, g, 0)
    local t2 = diversity.table(H.random_rows(5, 3, 2))
    local dt2 = ctx:upload(t2, "fp32")
    dt2:close()
    H.assert_error({ "device_table:knn", "used after close()" }, dt2.knn, dt2, t)
    H.assert_error({ "device_table:rankings", "used after close()" }, dt2.rankings, dt2, t)
    t2:close()
    H.assert_error({ "device_table:knn", "table used after close()" }, dt.knn, dt, t2)
    -- results outlive the device table, the table and a context; collected in any order
    local c2 = diversity.open {}
    local t3 = diversity.table(H.random_rows(9, 4, 6))
    local dt3 = c2:upload(t3, "fp16")
    local r3 = dt3:knn(t3, { k = 3 })
    local g3path = dir .. "/gc.knn"
    dt3:write_knn_graph(t3, g3path, { k = 3 })
    local g3 = diversity.knn_graph(g3path)
    c2:close(); dt3 = nil; t3 = nil
    collectgarbage(); collectgarbage()
    assert.are.equal(3, #r3:ids(8))
    assert.are.equal(3, #g3:row(8))
    r3 = nil; g3 = nil; c2 = nil
    collectgarbage(); collectgarbage()
    dt:close(); t:close()
  end)
end)

describe("vk_compute.generate_similarity_matrix_gpu_parallel", function()
  local dir, src

  setup(function()
    dir = H.tmpdir()
    src = dir .. "/fortunes.embeddings.json"
    H.write(src, H.read(H.DATA_JSON))
  end)

  teardown(function() H.cleanup() end)

  local MODEL = "sentence-transformers/all-MiniLM-L6-v2"
  local OUT = "similarity_rankings_sentence-transformers_all-MiniLM-L6-v2.json"

  it("writes the rankings cache beside the embeddings, reuses it, recomputes when forced or stale",
    function()
      local path, n, reused = vk.generate_similarity_matrix_gpu_parallel(src, MODEL, false, 2, 10)
      assert.are.equal(dir .. "/" .. OUT, path)
      assert.are.equal(vk.rankings_path(src, MODEL), path)
      assert.are.equal(300, n)
      assert.is_false(reused)
      local c = H.json_file(path)
      local m = c.metadata
      assert.are.equal(300, m.total_poems)
      assert.are.equal("pre_sorted_rankings", m.format)
      assert.are.equal("cosine-knn-v1", m.algorithm)
      assert.are.equal(10, m.top_k)
      assert.are.equal(MODEL, m.model)
      assert.are.equal(diversity.file_checksum(src), m.source_checksum)
      -- ids mapped, self excluded, most similar first (float64 check on a few items)
      local t = diversity.load(src)
      local ids = t:ids()
      local rows = {}
      for i = 0, 299 do rows[i + 1] = t:row(i) end
      local index = {}
      for i, id in ipairs(ids) do index[id] = i - 1 end
      local count = 0
      assert.are.equal(300, #c.rankings.__keys)
      for _, key in ipairs(c.rankings.__keys) do
        local list = c.rankings[key]
        count = count + 1
        assert.are.equal(10, #list)
        local item = index[key]
        local prev = math.huge
        for _, id in ipairs(list) do
          assert.are_not.equal(key, id)
          local s = score("cosine", rows[item + 1], rows[index[id] + 1])
          assert.is_true(s <= prev + 1e-6)
          prev = s
        end
      end
      assert.are.equal(300, count)
      for _, item in ipairs { 0, 17, 299 } do
        local want = brute("cosine", rows, rows[item + 1], item)
        assert.are.equal(ids[want[1] + 1], c.rankings[ids[item + 1]][1])
      end
      t:close()
      -- reuse: same bytes, same inode, nothing computed
      local before = H.stat(path)
      local p2, n2, reused2 = vk.generate_similarity_matrix_gpu_parallel(src, MODEL, false, 2, 10)
      assert.are.equal(path, p2)
      assert.are.equal(300, n2)
      assert.is_true(reused2)
      assert.are.equal(before, H.stat(path))
      -- force: rewritten (a new file), same content
      local bytes = H.read(path)
      local _, _, reused3 = vk.generate_similarity_matrix_gpu_parallel(src, MODEL, true, 1, 10)
      assert.is_false(reused3)
      assert.are_not.equal(before, H.stat(path))
      assert.are.equal(bytes, H.read(path))
      -- another top_k (all: nil or 0) is not the same cache
      local _, _, r4 = vk.generate_similarity_matrix_gpu_parallel(src, MODEL, false, nil, 0)
      assert.is_false(r4)
      local all = H.json_file(path)
      assert.is_truthy(H.read(path):sub(1, 300):find('"top_k":null,', 1, true))
      assert.are.equal(299, #all.rankings["fortune-5"])
      for i = 1, 10 do assert.are.equal(c.rankings["fortune-5"][i], all.rankings["fortune-5"][i]) end
      local _, _, r5 = vk.generate_similarity_matrix_gpu_parallel(src, MODEL)
      assert.is_true(r5)
      -- stale: the embeddings changed (one value), so the checksum differs
      local text = H.read(src):gsub("0.0020424023", "0.0020424024", 1)
      H.write(src, text)
      local _, _, r6 = vk.generate_similarity_matrix_gpu_parallel(src, MODEL)
      assert.is_false(r6)
      assert.are.equal(diversity.file_checksum(src), H.json_file(path).metadata.source_checksum)
      assert.are.same({}, H.temp_files(dir))
    end)

  it("reuses a cache whose model name has braces, quotes or non-ASCII (its metadata is parsed, not matched)",
    function()
      for _, model in ipairs({ "m{x", 'a"b}', "mod\u{e8}le\n", "{}" }) do
        local out = dir .. "/braces.json"
        os.remove(out)
        local p, n, reused = vk.generate_similarity_matrix_gpu_parallel(src, model, false, 1, 3, out)
        assert.are.equal(out, p)
        assert.is_false(reused)
        assert.are.equal(model, H.json_file(out).metadata.model)
        local before = H.stat(out)
        local _, n2, reused2 = vk.generate_similarity_matrix_gpu_parallel(src, model, false, 1, 3, out)
        assert.is_true(reused2, "the cache of model " .. model .. " was not reused")
        assert.are.equal(n, n2)
        assert.are.equal(before, H.stat(out))
        -- another model's cache at the same path is not reused
        local _, _, reused3 = vk.generate_similarity_matrix_gpu_parallel(src, model .. "2", false, 1, 3, out)
        assert.is_false(reused3)
      end
      -- diversity.cache_metadata: scalar fields; a file that is not a cache is an error
      local m = diversity.cache_metadata(dir .. "/braces.json")
      assert.are.equal(300, m.total_poems)
      assert.are.equal(3, m.top_k)
      H.assert_error({ "diversity.cache_metadata", "README.md", "not a JSON cache" },
        diversity.cache_metadata, "README.md")
      H.write(dir .. "/nometa.json", '{"rankings":{}}')
      H.assert_error({ "diversity.cache_metadata", "no \"metadata\"" },
        diversity.cache_metadata, dir .. "/nometa.json")
    end)

  it("takes an explicit output path; refuses bad arguments naming the call", function()
    local out = dir .. "/explicit.json"
    local p = vk.generate_similarity_matrix_gpu_parallel(src, "m", false, 0, 3, out)
    assert.are.equal(out, p)
    assert.are.equal(3, H.json_file(out).metadata.top_k)
    local call = "vk_compute.generate_similarity_matrix_gpu_parallel"
    H.assert_error({ call, "model_name" }, vk.generate_similarity_matrix_gpu_parallel, src, nil)
    H.assert_error({ call, "top_k" }, vk.generate_similarity_matrix_gpu_parallel, src, "m", false,
      1, -2)
    H.assert_error({ call, "num_threads" }, vk.generate_similarity_matrix_gpu_parallel, src, "m",
      false, 1.5)
    H.assert_error({ call, dir .. "/missing.json" }, vk.generate_similarity_matrix_gpu_parallel,
      dir .. "/missing.json", "m")
    local nodir = dir .. "/nope/out.json"
    H.assert_error({ call, dir .. "/nope" }, vk.generate_similarity_matrix_gpu_parallel, src, "m",
      true, 1, 3, nodir)
    assert.is_false(H.exists(dir .. "/nope"))
  end)
end)
