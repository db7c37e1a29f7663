-- The compat shim runs the engine `auto` resolves to (gram where G fits), like the command line;
-- DIVERSITY_MODE pins the scan or the gram engine, and a bad value is refused naming it.
local ffi = require "ffi"
local diversity = require "diversity"
local vk = require "vk_compute"
local H = require "helpers"

describe("vk_compute's engine", function()
  local ctx = vk.init(false)
  local t = diversity.load(H.DATA_JSON):head(90)
  local N, dim = t:n(), t:dim()
  local flat = H.float_rows(t)
  local halves = ffi.new("uint16_t[?]", N * dim)
  vk.fp32_to_fp16(flat, halves, N * dim)

  -- The whole cache through batch_* in batches of 40; every row checked with the float64 oracle.
  -- Returns the engines that ran.
  local function whole_cache()
    local engines = {}
    for first = 0, N - 1, 40 do
      local starts = {}
      for s = first, math.min(first + 40, N) - 1 do starts[#starts + 1] = s end
      local b = vk.batch_init(ctx, halves, N, dim, #starts, starts)
      engines[vk.batch_engine(b)] = true
      local slot, chunk = 1, 10
      while slot <= N - 1 do
        local c = math.min(chunk, N - slot)
        vk.batch_compute_chunk(b, slot, c, 7)
        slot, chunk = slot + c, chunk * 2
      end
      local out = ffi.new("uint32_t[?]", #starts * N)
      vk.batch_download_sequences(b, out)
      vk.batch_destroy(b)
      for i, s in ipairs(starts) do
        local row = {}
        for k = 0, N - 1 do row[k + 1] = tonumber(out[(i - 1) * N + k]) end
        assert.is_true(t:check_sequence(s, row, 1e-5, "fp16") >= 0)
      end
    end
    return engines
  end

  local function with_mode(m, f)
    ffi.C.setenv("DIVERSITY_MODE", m, 1)
    local ok, r = pcall(f)
    ffi.C.unsetenv("DIVERSITY_MODE")
    if not ok then error(r, 0) end
    return r
  end

  it("auto: the gram engine, for batches and for single sequences", function()
    assert.are.same({ gram = true }, whole_cache())
    local seq = vk.compute_diversity_sequence(ctx, flat, N, dim, 5)
    assert.is_true(t:check_sequence(5, seq, 1e-5, "fp32") >= 0)
  end)

  it("DIVERSITY_MODE=scan keeps the scan path", function()
    assert.are.same({ scan = true }, with_mode("scan", whole_cache))
  end)

  it("a bad DIVERSITY_MODE is refused, naming it", function()
    with_mode("fastest", function()
      H.assert_error({ "vk_compute.batch_init", "DIVERSITY_MODE" }, vk.batch_init, ctx, halves,
        N, dim, 1, { 0 })
      H.assert_error({ "vk_compute.compute_diversity_sequence", "DIVERSITY_MODE" },
        vk.compute_diversity_sequence, ctx, flat, N, dim, 5)
    end)
  end)

  teardown(function() t:close(); vk.shutdown(ctx) end)
end)
