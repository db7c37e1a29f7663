-- The reference cannot drift from the module: lua/diversity/types.lua (the LuaLS ---@meta stubs)
-- names exactly the functions the built module exports and exactly the methods of each handle
-- type, both ways; docs/lua.md names every one of them and every option field of the stubs;
-- docs/cli.md names every function of `diversity.driver` and docs/compat.md every function of
-- `vk_compute`.
local H = require "helpers"
local diversity = require "diversity"

local STUBS = H.read("lua/diversity/types.lua")

--- The stubs' module fields (`function diversity.x(` and `diversity.x =`), handle classes and
-- their methods (`---@class diversity.C` then `function C:m(`), and option classes' fields.
local function parse_stubs(text)
  local fields, classes, options = {}, {}, {}
  local current_options
  for line in text:gmatch("[^\n]+") do
    local f = line:match("^function diversity%.([%w_]+)%(") or line:match("^diversity%.([%w_]+) *=")
    if f then fields[f] = true end
    local cls, m = line:match("^function (%w+):([%w_]+)%(")
    if cls then
      classes[cls] = classes[cls] or {}
      classes[cls][m] = true
    end
    local oc = line:match("^%-%-%-@class diversity%.(%w+)")
    current_options = oc and oc:match("Options$") and oc or (line:match("^%-%-%-@field") and current_options or nil)
    if oc and oc:match("Options$") then options[oc] = {} end
    local field = current_options and line:match("^%-%-%-@field ([%w_]+)")
    if field then options[current_options][field] = true end
  end
  return fields, classes, options
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

--- Names in `want` missing from `have`, as a sorted list.
local function missing(want, have)
  local out = {}
  for _, k in ipairs(sorted_keys(want)) do
    if not have[k] then out[#out + 1] = k end
  end
  return out
end

--- The methods of a handle (mlua keeps them in the metatable's __index table).
local function methods_of(h)
  local out = {}
  for k in pairs(debug.getmetatable(h).__index) do out[k] = true end
  return out
end

describe("lua/diversity/types.lua", function()
  local fields, classes, options = parse_stubs(STUBS)
  local tmp
  setup(function() tmp = H.tmpdir() end)
  teardown(function() H.cleanup() end)

  it("names every module field the module exports, and nothing else", function()
    local exported = {}
    for k in pairs(diversity) do exported[k] = true end
    assert.are.same({}, missing(exported, fields), "exported but not in the stubs")
    assert.are.same({}, missing(fields, exported), "in the stubs but not exported")
  end)

  it("names every method of every handle type, and nothing else", function()
    local ctx = diversity.open {}
    local t = diversity.load(H.DATA_JSON):head(40)
    local dt = ctx:upload(t, "fp32")
    local g = dt:gram()
    local job = dt:job({ 0 }, { steps = 2 })
    job:step(2)
    local graph_path, bin_path = tmp .. "/g.knn", tmp .. "/s.u32"
    dt:write_knn_graph(t, graph_path, { k = 2 })
    local bw = diversity.binary_cache_writer(bin_path, t:n(), 3)
    bw:write(0, job:sequences()[1])
    for s = 1, t:n() - 1 do bw:write(s, { s, (s + 1) % t:n(), (s + 2) % t:n() }) end
    bw:finish()
    local handles = {
      Context = ctx,
      Table = t,
      DeviceTable = dt,
      Gram = g,
      Job = job,
      KnnResult = dt:knn(t:head(2), { k = 2 }),
      KnnGraph = diversity.knn_graph(graph_path),
      JsonCacheWriter = diversity.json_cache_writer(tmp .. "/c.json", {}, nil),
      BinaryCacheWriter = diversity.binary_cache_writer(tmp .. "/w.u32", t:n(), 3),
      BinaryCache = diversity.open_binary_cache(bin_path),
      KnnIndex = diversity.knn_index({ ctx }, t, "fp32"),
      IvfIndex = diversity.ivf_index(ctx, t:dim(), { nlist = 2 }),
      IvfPqIndex = diversity.ivfpq_index(ctx, t:dim(), { nlist = 2, m = 16 }),
      Rows = diversity.rows(),
      Sequencer = dt:sequencer(),
    }
    assert.are.same(sorted_keys(classes), sorted_keys(handles), "the stubs' handle classes")
    for name, h in pairs(handles) do
      local have = methods_of(h)
      assert.are.same({}, missing(have, classes[name]), name .. ": methods missing from the stubs")
      assert.are.same({}, missing(classes[name], have), name .. ": stub methods the handle lacks")
    end
    for name, h in pairs(handles) do
      if name ~= "Context" and name ~= "Rows" then h:close() end
    end
    ctx:close()
  end)

  it("every name and option field is in docs/lua.md", function()
    local doc = H.read("docs/lua.md")
    local absent = {}
    for _, f in ipairs(sorted_keys(fields)) do
      if not doc:find("diversity." .. f, 1, true) then absent[#absent + 1] = "diversity." .. f end
    end
    for cls, ms in pairs(classes) do
      for _, m in ipairs(sorted_keys(ms)) do
        if not doc:find(":" .. m .. "(", 1, true) and not doc:find("`" .. m .. "(", 1, true) then
          absent[#absent + 1] = cls .. ":" .. m
        end
      end
    end
    for cls, fs in pairs(options) do
      for _, f in ipairs(sorted_keys(fs)) do
        if not doc:find("`" .. f .. "`", 1, true) and not doc:find(f .. " =", 1, true) then
          absent[#absent + 1] = cls .. "." .. f
        end
      end
    end
    table.sort(absent)
    assert.are.same({}, absent, "named in the stubs, not in docs/lua.md")
  end)

  it("docs/cli.md names every function of diversity.driver, docs/compat.md every one of vk_compute", function()
    local absent = {}
    local cli, compat = H.read("docs/cli.md"), H.read("docs/compat.md")
    for k, v in pairs(require "diversity.driver") do
      if not cli:find("driver." .. k, 1, true) then absent[#absent + 1] = "driver." .. k .. " (" .. type(v) .. ")" end
    end
    for k in pairs(require "vk_compute") do
      if not compat:find(k, 1, true) then absent[#absent + 1] = "vk_compute." .. k end
    end
    table.sort(absent)
    assert.are.same({}, absent)
  end)
end)
