-- k-means and the IVF-Flat index from Lua: k-means assignments against a float64 brute force,
-- the objective never rising, the same centroids for the same seed; IVF-Flat with every list
-- probed equal to the exact dtable:knn (ids and distances, ties included); save/load byte for
-- byte; bad input refused with its message and no file written or changed.
local diversity = require "diversity"
local H = require "helpers"

local int_rows = H.int_rows

local function d2(a, b)
  local s = 0
  for j = 1, #a do s = s + (H.f32(a[j]) - H.f32(b[j])) ^ 2 end
  return s
end

describe("k-means and IVF-Flat from Lua", function()
  local ctx, dir
  H.context_for(setup, teardown, function(c, d) ctx, dir = c, d end)

  it("k-means assigns every row to its nearest centroid and the objective never rises", function()
    local rows = H.random_rows(300, 6, 17)
    local t = diversity.table(rows)
    local cent, assign, report = diversity.kmeans(ctx, t, 7, { iters = 6, seed = 3 })
    assert.are.equal(7, cent:n())
    assert.are.equal(6, cent:dim())
    assert.are.equal(300, #assign)
    assert.are.equal(6, #report.objective)
    assert.are.equal(300, report.trained_on)
    for i = 2, 6 do
      assert.is_true(report.objective[i] <= report.objective[i - 1] * (1 + 1e-6))
    end
    local c = {}
    for k = 0, 6 do c[k] = cent:row(k) end
    local seen = {}
    for i, a in ipairs(assign) do
      assert.is_true(a >= 0 and a < 7)
      seen[a] = true
      local best = math.huge
      for k = 0, 6 do best = math.min(best, d2(rows[i], c[k])) end
      assert.is_true(d2(rows[i], c[a]) <= best + 1e-5 * (best + 1), "row " .. i)
    end
    for k = 0, 6 do assert.is_true(seen[k], "cluster " .. k .. " empty") end
    local again = diversity.kmeans(ctx, t, 7, { iters = 6, seed = 3 })
    for k = 0, 6 do assert.are.same(c[k], again:row(k)) end
    H.assert_error("diversity.kmeans: k-means of 300 rows into k = 301 clusters: k must be between 1 and N = 300",
      diversity.kmeans, ctx, t, 301)
    H.assert_error("diversity.kmeans: k must be an integer", diversity.kmeans, ctx, t, 1.5)
    H.assert_no_validation(ctx)
  end)

  it("IVF-Flat with nprobe = nlist is the exact search; save/load round-trips byte for byte", function()
    local rows = int_rows(500, 5, 9)
    local t = diversity.table(rows)
    local q = t:head(25)
    for _, metric in ipairs { "l2", "ip", "cosine" } do
      local ix = diversity.ivf_index(ctx, 5, { nlist = 8, metric = metric, iters = 5 })
      assert.is_false(ix:is_trained())
      local rep = ix:train(t)
      assert.are.equal(5, #rep.objective)
      assert.is_true(ix:is_trained())
      assert.are.equal(0, ix:add(t:head(300)))
      local rest = {}
      for i = 301, 500 do rest[#rest + 1] = rows[i] end
      assert.are.equal(300, ix:add(diversity.table(rest)))
      assert.are.equal(500, ix:ntotal())
      local sizes, total = ix:list_sizes(), 0
      for _, s in ipairs(sizes) do total = total + s end
      assert.are.equal(8, #sizes)
      assert.are.equal(500, total)
      local exact = ctx:upload(t, "fp32"):knn(q, { k = 12, metric = metric })
      local got, report = ix:search(q, { k = 12, nprobe = 8 })
      assert.are.equal(8, report.nprobe)
      assert.are.same(exact:ids(), got:ids())
      assert.are.equal(exact:distances_bytes(), got:distances_bytes())
      local few = ix:search(q, { k = 12, nprobe = 2 })
      assert.are.equal(25, few:queries())
      local path = dir .. "/" .. metric .. ".ivf"
      assert.are.equal(metric, H.index_round_trip(ctx, ix, diversity.load_ivf_index, path, q,
        { k = 12, nprobe = 2 }, few:ids_bytes()))
      ix:close()
    end
    H.assert_no_validation(ctx)
  end)

  it("refuses bad input with its message and writes nothing", function()
    local t = diversity.table(H.random_rows(40, 4, 2))
    H.assert_error("diversity.ivf_index: opts.nlist is required", diversity.ivf_index, ctx, 4, {})
    local ix = diversity.ivf_index(ctx, 4, { nlist = 4, metric = "l2" })
    local before = H.snapshot(dir)
    H.assert_error("diversity.ivf:add: the IVF index is not trained (train it first)", ix.add, ix, t)
    H.assert_error("diversity.ivf:save: the IVF index is not trained: nothing to save",
      ix.save, ix, dir .. "/u.ivf")
    H.assert_error("diversity.ivf:train: training rows have dimension 3, the index 4",
      ix.train, ix, diversity.table(H.random_rows(10, 3, 1)))
    ix:train(t)
    ix:add(t)
    H.assert_error("diversity.ivf:add: added rows have dimension 3, the index 4",
      ix.add, ix, diversity.table(H.random_rows(10, 3, 1)))
    H.assert_error("diversity.ivf:search: queries have dimension 3, the table 4",
      ix.search, ix, diversity.table(H.random_rows(2, 3, 1)), { nprobe = 2 })
    H.assert_error("diversity.ivf:search: IVF search needs nprobe ≥ 1", ix.search, ix, t, { nprobe = 0 })
    H.assert_error("diversity.ivf:save: ", ix.save, ix, dir .. "/no/such/x.ivf")
    H.assert_error("diversity.ivf_index: IVF index needs nlist ≥ 1", diversity.ivf_index, ctx, 4, { nlist = 0 })
    local big = diversity.ivf_index(ctx, 4, { nlist = 41 })
    H.assert_error("k must be between 1 and N = 40", big.train, big, t)
    assert.are.same(before, H.snapshot(dir))
    -- Corrupt and foreign files: refused, left as they were.
    H.corrupt_index_files(ctx, ix, "load_ivf_index", dir, "ivf", "DIVF", "IVF")
  end)
end)
