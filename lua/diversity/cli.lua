--- The `diversity` command: the diversity-cache job from files (see docs/cli.md).
-- Installed as `diversity` by the rock; from a clone, run
--   LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit lua/diversity/cli.lua --help
--
-- The flags are one table (FLAGS): the parser, the help text and its defaults all come from it.
-- Exit status: 0 done (and --help), 2 a usage error (unknown flag, missing or malformed value),
-- 1 any other failure. (A table rather than the argparse rock: the rock would be a dependency
-- that Debian packages outside LuaRocks' view, so `luarocks make` would fetch it from the network.)
local driver = require "diversity.driver"

local D = driver.defaults

local function choice(values)
  local set, list = {}, {}
  for _, v in ipairs(values) do set[v] = true end
  for i, v in ipairs(values) do list[i] = v end
  return function(flag, v)
    if not set[v] then
      error(("%s %s: expected %s"):format(flag, v,
        table.concat(list, ", ", 1, #list - 1) .. " or " .. list[#list]), 0)
    end
    return v
  end
end

local function number(flag, v)
  local x = tonumber(v)
  if not x then error(flag .. " " .. v .. ": not a number", 0) end
  -- LuaJIT reads "nan" and "inf" as numbers: no option takes them.
  if x ~= x or x == math.huge or x == -math.huge then
    error(flag .. " " .. v .. ": not a finite number", 0)
  end
  return x
end

local function size(flag, v)
  local num, unit = v:match("^(%d+%.?%d*)([KMGkmg]?)$")
  local scale = ({ [""] = 1, k = 2 ^ 10, m = 2 ^ 20, g = 2 ^ 30 })[(unit or ""):lower()]
  if not num or tonumber(num) <= 0 then
    error(flag .. " " .. v .. ": expected a size such as 2G, 512M or a byte count", 0)
  end
  return math.floor(tonumber(num) * scale)
end

local function shard(_, v)
  driver.parse_shard(v) -- a bad spec is refused here, before anything else
  return v
end

local function directory(flag, v)
  -- The driver's own check (a directory, not a file, FIFO or device), without its prefix.
  local ok, e = pcall(driver.check_directory, flag, v)
  if not ok then error((tostring(e):gsub("^diversity: ", "")), 0) end
  return v
end

-- { flag, key, value (nil: a switch; else the metavariable), convert, help, default shown,
--   the value a switch sets (nil: true) }
local FLAGS = {
  { "--embeddings", "embeddings", "FILE", nil, "embeddings.json, .npy, .f32 (with --dim) or an fp16 .bin (required)" },
  { "--out", "out", "FILE", nil, "the diversity cache to write (JSON; required)" },
  { "--center", "center", nil, nil, "subtract the column mean first" },
  { "--precision", "precision", "P", choice { "fp16", "fp32" }, "storage on the device", D.precision },
  { "--mode", "mode", "M", choice { "scan", "gram", "auto" }, "engine; auto: gram when G fits the device", D.mode },
  { "--placement", "placement", "P", choice { "auto", "registers", "memory" }, "where gram keeps its state", "auto" },
  { "--plain-sums", "plain_sums", nil, nil, "gram: plain float32 key sums (other bits)" },
  { "--compensated-sums", "plain_sums", nil, nil, "gram: compensated float32 key sums", nil, false },
  { "--judge", "judge", nil, nil, "gram: re-score uncertain picks (other bits)",
    "on; unnamed, fixed-point keys certify every step where the device has float64" },
  { "--no-judge", "judge", nil, nil, "gram: no judge", nil, false },
  { "--shape", "shape", "S", choice { "untiled", "tiled", "per-tile" }, "scan: how candidates are walked", "tiled" },
  { "--tile", "tile", "T", number, "scan: candidates per tile", "85% of the device's L2" },
  { "--chunk", "chunk", "C", number, "steps per submission, fixed", "sized to --target-s" },
  { "--top-k", "top_k", "K", number, "steps per sequence", "all: N - 1" },
  { "--batch", "batch", "B", number, "sequences per batch", D.batch .. " (scan), what fits in 4+ batches (gram)" },
  { "--starts", "starts", "LIST", nil, "all, or 0-based starts a,b,c", "all" },
  { "--binary", "binary", "FILE", nil, "also write the uint32 cache (needs every start)" },
  { "--dim", "dim", "D", number, "row length of a .f32 input" },
  { "--device", "device", "NAME", nil, "device index, GPU-… UUID or a name one device has", "the best device" },
  { "--devices", "devices", "LIST", nil, "all, or a comma list: batches shared out" },
  { "--validation", "validation", nil, nil, "Vulkan validation layers on" },
  { "--resume", "resume", nil, nil, "continue from <out>.partial/" },
  { "--target-s", "target_s", "S", number, "seconds a submission may take (watchdog)", D.target_s },
  { "--safety", "safety", "F", number, "fraction of --target-s a chunk may use", D.safety },
  { "--host-memory", "host_memory", "SIZE", size, "host memory a batch's results may take (K, M, G)",
    "min(2G, RAM / 4)" },
  { "--cache-dir", "cache_dir", "DIR", directory, "where the fp16 conversion is cached", "beside --embeddings" },
  { "--model", "model", "NAME", nil, "model name for the metadata" },
  { "--shard", "shard", "i/n[:strided]", shard, "compute shard i of n of the starts (not with --binary)" },
  { "--quiet", "quiet", nil, nil, "no progress bar" },
  { "--verbose", "verbose", nil, nil, "print the wall time of each phase (open, load, the device, writing)" },
  { "--help", "help", nil, nil, "this text" },
}

local function usage()
  local lines = {
    "usage: diversity --embeddings FILE --out FILE [options]",
    "       diversity merge --out FILE SHARD.json...   (the shards of one --shard run, any order)",
    "",
    "Computes a diversity sequence from every start and writes them as one JSON cache. With",
    "fp16 it caches the converted table as <name>.<space>.fp16.bin (+ .json, .ids.json) beside",
    "the input or in --cache-dir, and checkpoints into <out>.partial/ while it runs.",
    "",
  }
  for _, f in ipairs(FLAGS) do
    local left = "  " .. f[1] .. (f[3] and (" " .. f[3]) or "")
    local help = f[5] .. (f[6] ~= nil and (" [default: " .. tostring(f[6]) .. "]") or "")
    lines[#lines + 1] = left .. string.rep(" ", math.max(1, 26 - #left)) .. help
  end
  return table.concat(lines, "\n")
end

local BY_FLAG = {}
for _, f in ipairs(FLAGS) do BY_FLAG[f[1]] = f end

-- A usage error: the message, then exit status 2.
local function usage_error(msg)
  error({ usage = "diversity: " .. msg .. "\n(diversity --help lists the options)" }, 0)
end

-- A converter's message without the "diversity: " the driver's own checks start with.
local function driver_message(e)
  return (require("diversity").message(e):gsub("^diversity: ", ""))
end

local function parse(argv)
  local o, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    local name, inline = a:match("^(%-%-[^=]+)=(.*)$")
    local f = BY_FLAG[name or a]
    if a == "-h" then f = BY_FLAG["--help"] end
    if not f then usage_error("unknown argument " .. a) end
    if f[3] == nil then
      if inline then usage_error(f[1] .. " takes no value") end
      if f[7] == nil then o[f[2]] = true else o[f[2]] = f[7] end
    else
      local v = inline
      if v == nil then
        i = i + 1
        v = argv[i]
        if v == nil then usage_error(f[1] .. " needs a value") end
      end
      if f[4] then
        local ok, x = pcall(f[4], f[1], v)
        if not ok then usage_error(driver_message(x)) end
        v = x
      end
      o[f[2]] = v
    end
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
      if o.out == nil then usage_error("merge: --out needs a value") end
    elseif a == "--quiet" then o.quiet = true
    elseif a == "-h" or a == "--help" then o.help = true
    elseif a:sub(1, 2) == "--" then usage_error("merge: unknown argument " .. a)
    else o.inputs[#o.inputs + 1] = a end
    i = i + 1
  end
  return o
end

local ok, err = pcall(function()
  if arg[1] == "merge" then
    local opts = parse_merge(arg)
    if opts.help then io.stdout:write(usage(), "\n"); return end
    if not opts.out then usage_error("merge: --out FILE is required") end
    local r = driver.merge(opts)
    if not opts.quiet then
      io.stdout:write(("merged %d %s shard(s), %d sequences -> %s\n"):format(r.shards, r.layout,
        r.sequences, opts.out))
    end
    return
  end
  local opts = parse(arg)
  if opts.help then io.stdout:write(usage(), "\n"); return end
  if not opts.embeddings then usage_error("--embeddings FILE is required") end
  if not opts.out then usage_error("--out FILE is required") end
  local r = driver.run(opts)
  io.stdout:write(("%s%s: %s mode, %d sequences x %d steps of %d x %d in %d batch(es)%s%s, %s %.3f s -> %s\n"):format(
    r.device, r.devices > 1 and (" (" .. r.devices .. " devices)") or "", r.mode, r.sequences, r.steps, r.n, r.dim, r.batches,
    r.resumed_batches > 0 and (" (" .. r.resumed_batches .. " from the checkpoint)") or "",
    r.shard and (", shard " .. r.shard .. " " .. r.shard_layout) or "",
    r.engine == "host" and "CPU" or "GPU", r.gpu_ns / 1e9, opts.out))
end)
if not ok then
  if type(err) == "table" and err.usage then
    io.stderr:write(err.usage, "\n")
    os.exit(2)
  end
  io.stderr:write(require("diversity").message(err), "\n")
  os.exit(1)
end
