--- Command line for the diversity-cache job (SPEC §Driver):
--
--   luajit lua/diversity/cli.lua --embeddings FILE --out diversity_cache.json [--center]
--       [--precision fp16|fp32] [--mode scan|gram|auto] [--placement auto|registers|memory] [--plain-sums|--compensated-sums] [--judge|--no-judge]
--       [--top-k K] [--batch B] [--starts all|a,b,c] [--binary FILE.bin]
--       [--dim D] [--device NAME] [--devices all|LIST] [--validation] [--resume] [--target-s S] [--safety F]
--       [--model NAME] [--quiet] [--shard i/n[:strided]] [--host-memory SIZE]
--   luajit lua/diversity/cli.lua merge --out diversity_cache.json SHARD.json…
--
-- `--shard i/n` computes the i-th of n slices of the starts (1-based; contiguous, or every n-th
-- start from the i-th with `:strided`) into a partial cache; `merge` checks that its inputs are
-- the n shards of one run and writes the cache the one-shot run would have written, byte for
-- byte.
--
-- Run from the repository root with
--   LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;'
-- (or install the module and the lua/ folder where LuaJIT looks).
local driver = require "diversity.driver"

local USAGE = [=[usage: cli.lua --embeddings FILE --out diversity_cache.json [--center]
    [--precision fp16|fp32] [--mode scan|gram|auto] [--placement auto|registers|memory] [--plain-sums|--compensated-sums] [--judge|--no-judge]
    [--top-k K] [--batch B] [--starts all|a,b,c] [--binary FILE.bin]
    [--dim D] [--device NAME] [--devices all|LIST] [--validation] [--resume] [--target-s S] [--safety F]
    [--model NAME] [--quiet] [--shard i/n[:strided]] [--host-memory SIZE]
       cli.lua merge --out diversity_cache.json SHARD.json...
  --plain-sums, --compensated-sums, --judge, --no-judge   the gram arithmetic; default: compensated
                    sums, or plain sums with the judge where compensated ones would not fit a GPU's registers
  --host-memory SIZE   host memory a batch's results may take (bytes, or with K, M or G):
                    the batch shrinks to fit; default the smaller of 2G and a quarter of RAM
  --shard i/n       compute shard i of n (1-based) of the starts: a partial cache (not with --binary)
  --shard i/n:strided   the same, every n-th start from the i-th instead of the i-th slice
  merge             merge the n shards of one run (any order) into the one-shot cache]=]

local function parse(argv)
  local o, i = {}, 1
  local function value(flag)
    i = i + 1
    local v = argv[i]
    if v == nil then error("diversity: " .. flag .. " needs a value\n" .. USAGE, 0) end
    return v
  end
  local function number(flag)
    local v = value(flag)
    local x = tonumber(v)
    if not x then error("diversity: " .. flag .. " " .. v .. ": not a number", 0) end
    -- LuaJIT reads "nan" and "inf" as numbers: no option takes them.
    if x ~= x or x == math.huge or x == -math.huge then
      error("diversity: " .. flag .. " " .. v .. ": not a finite number", 0)
    end
    return x
  end
  while i <= #argv do
    local a = argv[i]
    if a == "--embeddings" then o.embeddings = value(a)
    elseif a == "--out" then o.out = value(a)
    elseif a == "--binary" then o.binary = value(a)
    elseif a == "--center" then o.center = true
    elseif a == "--precision" then
      o.precision = value(a)
      if o.precision ~= "fp16" and o.precision ~= "fp32" then
        error("diversity: --precision " .. o.precision .. ": expected fp16 or fp32", 0)
      end
    elseif a == "--mode" then
      o.mode = value(a)
      if not driver.MODES[o.mode] then
        error("diversity: --mode " .. o.mode .. ": expected scan, gram or auto", 0)
      end
    elseif a == "--placement" then
      o.placement = value(a)
      if not driver.PLACEMENTS[o.placement] then
        error("diversity: --placement " .. o.placement .. ": expected auto, registers or memory", 0)
      end
    elseif a == "--plain-sums" then o.plain_sums = true
    elseif a == "--compensated-sums" then o.plain_sums = false
    elseif a == "--judge" then o.judge = true
    elseif a == "--no-judge" then o.judge = false
    elseif a == "--top-k" then o.top_k = number(a)
    elseif a == "--batch" then o.batch = number(a)
    elseif a == "--starts" then o.starts = value(a)
    elseif a == "--dim" then o.dim = number(a)
    elseif a == "--device" then o.device = value(a)
    elseif a == "--devices" then o.devices = value(a)
    elseif a == "--validation" then o.validation = true
    elseif a == "--resume" then o.resume = true
    elseif a == "--target-s" then o.target_s = number(a)
    elseif a == "--safety" then o.safety = number(a)
    elseif a == "--model" then o.model = value(a)
    elseif a == "--quiet" then o.quiet = true
    elseif a == "--host-memory" then
      local v = value(a)
      local num, unit = v:match("^(%d+%.?%d*)([KMGkmg]?)$")
      local scale = ({ [""] = 1, k = 2 ^ 10, m = 2 ^ 20, g = 2 ^ 30 })[(unit or ""):lower()]
      if not num or tonumber(num) <= 0 then
        error("diversity: --host-memory " .. v .. ": expected a size such as 2G, 512M or a byte count", 0)
      end
      o.host_memory = math.floor(tonumber(num) * scale)
    elseif a == "--shard" then
      o.shard = value(a)
      driver.parse_shard(o.shard) -- a bad spec is refused here, before anything else
    elseif a == "-h" or a == "--help" then io.stdout:write(USAGE, "\n"); os.exit(0)
    else error("diversity: unknown argument " .. a .. "\n" .. USAGE, 0) end
    i = i + 1
  end
  return o
end

-- `merge --out FILE SHARD.json…`
local function parse_merge(argv)
  local o, i = { inputs = {} }, 2
  while i <= #argv do
    local a = argv[i]
    if a == "--out" then
      i = i + 1
      o.out = argv[i]
      if o.out == nil then error("diversity: merge: --out needs a value\n" .. USAGE, 0) end
    elseif a == "--quiet" then o.quiet = true
    elseif a == "-h" or a == "--help" then io.stdout:write(USAGE, "\n"); os.exit(0)
    elseif a:sub(1, 2) == "--" then error("diversity: merge: unknown argument " .. a .. "\n" .. USAGE, 0)
    else o.inputs[#o.inputs + 1] = a end
    i = i + 1
  end
  return o
end

local ok, err = pcall(function()
  if arg[1] == "merge" then
    local opts = parse_merge(arg)
    local r = driver.merge(opts)
    if not opts.quiet then
      io.stdout:write(("merged %d %s shard(s), %d sequences -> %s\n"):format(r.shards, r.layout,
        r.sequences, opts.out))
    end
    return
  end
  local opts = parse(arg)
  local r = driver.run(opts)
  io.stdout:write(("%s%s: %s mode, %d sequences x %d steps of %d x %d in %d batch(es)%s%s, GPU %.3f s -> %s\n"):format(
    r.device, r.devices > 1 and (" (" .. r.devices .. " devices)") or "", r.mode, r.sequences, r.steps, r.n, r.dim, r.batches,
    r.resumed_batches > 0 and (" (" .. r.resumed_batches .. " from the checkpoint)") or "",
    r.shard and (", shard " .. r.shard .. " " .. r.shard_layout) or "",
    r.gpu_ns / 1e9, opts.out))
end)
if not ok then
  io.stderr:write(require("diversity").message(err), "\n")
  os.exit(1)
end
