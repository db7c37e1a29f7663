-- The IVF-PQ index from Lua: with every list probed and k × k_factor covering every row, the
-- re-rank is the exact dtable:knn (ids); plain ADC search returns each row once with distances
-- near the exact ones; save/load byte for byte; bad input refused with its message and no file
-- written or changed.
local diversity = require "diversity"
local H = require "helpers"

describe("IVF-PQ from Lua", function()
  local ctx, dir
  H.context_for(setup, teardown, function(c, d) ctx, dir = c, d end)

  it("re-ranks to the exact search and round-trips its file", function()
    local t = diversity.table(H.random_rows(300, 8, 5))
    local q = t:head(10)
    local ix = diversity.ivfpq_index(ctx, 8, { nlist = 4, m = 4, metric = "l2", refine = true, iters = 4 })
    assert.is_false(ix:is_trained())
    assert.are.equal(4, #ix:train(t).objective)
    assert.is_true(ix:refine())
    assert.are.equal(0, ix:add(t:head(40)))
    assert.are.equal(40, ix:ntotal())
    assert.are.equal(4, ix:m())
    -- k × k_factor = 40 rows, every list probed: the exact search.
    local exact = ctx:upload(t:head(40), "fp32"):knn(q, { k = 5, metric = "l2" })
    local got, report = ix:search(q, { k = 5, nprobe = 4, k_factor = 8 })
    assert.are.equal(4, report.nprobe)
    assert.are.equal(400, report.rows_scanned)
    assert.are.same(exact:ids(), got:ids())
    -- Plain ADC: every row once (k = 40), each query's own row among its best.
    local adc = ix:search(q, { k = 40, nprobe = 4 })
    for i = 0, 9 do
      local ids, seen = adc:ids(i), {}
      for _, id in ipairs(ids) do seen[id] = true end
      for id = 0, 39 do assert.is_true(seen[id], "query " .. i .. " misses " .. id) end
      local rank
      for r, id in ipairs(ids) do if id == i then rank = r end end
      assert.is_true(rank <= 5, "query " .. i .. " ranks itself " .. rank)
    end
    H.index_round_trip(ctx, ix, diversity.load_ivfpq_index, dir .. "/a.ivfpq", q,
      { k = 40, nprobe = 4 }, adc:ids_bytes())
    ix:close()
    H.assert_no_validation(ctx)
  end)

  it("refuses bad input with its message and writes nothing", function()
    local t = diversity.table(H.random_rows(300, 8, 2))
    local before = H.snapshot(dir)
    H.assert_error("diversity.ivfpq_index: opts.m is required", diversity.ivfpq_index, ctx, 8, { nlist = 2 })
    H.assert_error("diversity.ivfpq_index: product quantizer: M = 3 sub-spaces do not divide D = 8 (D % M must be 0)",
      diversity.ivfpq_index, ctx, 8, { nlist = 2, m = 3 })
    H.assert_error("diversity.ivfpq_index: opts.refine must be a boolean, got a ",
      diversity.ivfpq_index, ctx, 8, { nlist = 2, m = 2, refine = 1 })
    local ix = diversity.ivfpq_index(ctx, 8, { nlist = 2, m = 2, metric = "l2", iters = 2 })
    H.assert_error("diversity.ivfpq:add: the IVF-PQ index is not trained (train it first)", ix.add, ix, t)
    H.assert_error("diversity.ivfpq:save: the IVF-PQ index is not trained: nothing to save",
      ix.save, ix, dir .. "/u.ivfpq")
    H.assert_error("diversity.ivfpq:train: IVF-PQ training needs at least 256 rows", ix.train, ix, t:head(100))
    ix:train(t)
    ix:add(t)
    H.assert_error("diversity.ivfpq:search: IVF-PQ re-rank (k_factor > 1) needs the rows",
      ix.search, ix, t:head(2), { k_factor = 2 })
    H.assert_error("diversity.ivfpq:search: IVF-PQ search keeps k × k_factor = 65 × 1 = 65 candidates",
      ix.search, ix, t:head(2), { k = 65 })
    H.assert_error("diversity.ivfpq:search: queries have dimension 3, the table 8",
      ix.search, ix, diversity.table(H.random_rows(2, 3, 1)))
    H.assert_error("diversity.ivfpq:save: ", ix.save, ix, dir .. "/no/such/x.ivfpq")
    assert.are.same(before, H.snapshot(dir))
    H.corrupt_index_files(ctx, ix, "load_ivfpq_index", dir, "ivfpq", "DIVP", "IVF-PQ")
  end)
end)
