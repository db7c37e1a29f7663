--- The driver's options, one table for the command line and `driver.run`: each option's flag,
-- its key in `opts`, its type (what the command line converts a flag's text with, and what
-- `driver.run` checks a Lua value against), the default shown and the help line. The command
-- line (lua/diversity/cli.lua) parses and prints its help from `FLAGS`; `check` is the run's
-- validation, each rule written once here. Re-exported by `diversity.driver`.
-- May touch: the `diversity` module's file_kind (the directory check) and the environment
-- (SOURCE_DATE_EPOCH); nothing else.
local diversity = require "diversity"

local M = {}

--- The defaults `driver.run` fills in (`driver.defaults`).
M.defaults = {
  precision = "fp16",
  mode = "auto",       -- "scan", "gram" or "auto" (gram when G fits the device's memory budget)
  batch = 3584,        -- sequences per batch in scan mode (the user's default); gram batches
                       -- default to as many as fit next to G
  target_s = 1.5,      -- watchdog target per submission, seconds
  safety = 0.6,        -- fraction of the target a chunk may use
  probe_steps = 10,
  l2_headroom = 0.85,  -- share of L2 a tile may fill
  host_memory = nil,   -- bytes of host memory a batch's results may take: nil = the smaller of
                       -- 2 GiB and a quarter of the machine's memory (driver.default_host_memory)
}

local function finite(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge
end

--- Refuse an option of `opts` named in `keys` that is neither nil nor a boolean: Lua's
-- truthiness would take the string "false" (or 0) for on.
function M.check_switches(opts, keys)
  for _, k in ipairs(keys) do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("diversity: %s must be a boolean (true or false), got %s %s")
        :format(k, type(opts[k]), tostring(opts[k])), 0)
    end
  end
end

--- Refuse a directory option (`flag`, e.g. "--cache-dir") whose `path` is not a directory:
-- missing, or a regular file, FIFO, device or socket (symlinks followed), naming what it is.
-- Returns `path`. (Writing into a file named as a directory would fail later, silently for the
-- fp16 cache, which is best-effort.)
function M.check_directory(flag, path)
  if type(path) ~= "string" or path == "" then
    error(("diversity: %s must be a directory path, got %s %s"):format(flag, type(path), tostring(path)), 0)
  end
  local kind = diversity.file_kind(path)
  if kind == nil then
    error(("diversity: %s %s: no such directory"):format(flag, path), 0)
  elseif kind ~= "directory" then
    error(("diversity: %s %s is a %s, not a directory"):format(flag, path,
      kind == "file" and "regular file" or kind), 0)
  end
  return path
end

--- SOURCE_DATE_EPOCH (the time a reproducible run writes as `generated_at`) as whole seconds
-- since 1970, nil when unset or empty; anything else (a fraction, a sign, a date, text, past the
-- year 9999) is an error naming the variable, never the current time in its place.
function M.source_date_epoch()
  local v = os.getenv("SOURCE_DATE_EPOCH")
  if v == nil or v == "" then return nil end
  local digits = v:match("^%s*(%d+)%s*$")
  if not digits or #digits > 12 or tonumber(digits) > 253402300799 then
    error(("diversity: SOURCE_DATE_EPOCH=%q: expected whole seconds since 1970 (0 to 253402300799)")
      :format(v), 0)
  end
  return tonumber(digits)
end

--- Parse a `--shard` spec: "i/n" (1-based: shard i of n, contiguous), "i/n:strided" or
-- "i/n:contiguous"; a table {index =, count =, layout =} is checked the same way. Returns
-- {index, count, layout, spec = "i/n"}; a bad spec is an error naming it.
function M.parse_shard(spec)
  local function bad(why)
    local shown = type(spec) == "table" and (tostring(spec.index) .. "/" .. tostring(spec.count))
      or tostring(spec)
    error(("diversity: --shard %s: %s"):format(shown, why), 0)
  end
  local i, n, layout
  if type(spec) == "table" then
    i, n, layout = spec.index, spec.count, spec.layout or "contiguous"
  else
    local si, sn, rest = tostring(spec):match("^%s*(%d+)%s*/%s*(%d+)%s*(.-)%s*$")
    if not si then bad("expected i/n or i/n:strided (shard i of n, 1-based), e.g. 2/4") end
    i, n = tonumber(si), tonumber(sn)
    if rest == "" then layout = "contiguous"
    else
      layout = rest:match("^:%s*(%a+)$")
      if layout ~= "contiguous" and layout ~= "strided" then
        bad("unknown layout '" .. rest .. "': expected :strided or :contiguous (the default)")
      end
    end
  end
  -- Past 2^31 a count is no longer an exact integer everywhere it goes (it printed as
  -- "1/-9223372036854775808" once): refused, as no run has that many starts to share out.
  if type(n) ~= "number" or n ~= math.floor(n) or n < 1 or n > 2 ^ 31 then
    bad("the number of shards must be an integer from 1 to 2^31")
  end
  if type(i) ~= "number" or i ~= math.floor(i) or i < 1 or i > n then
    bad(("the shard must be between 1 and %d (1-based)"):format(n))
  end
  if layout ~= "contiguous" and layout ~= "strided" then
    bad("layout " .. tostring(layout) .. ": expected contiguous or strided")
  end
  return { index = i, count = n, layout = layout, spec = ("%d/%d"):format(i, n) }
end

-- The types. Each may have `parse(flag, text)`, the command line's conversion of a flag's text
-- (a failure is a usage error); `kind(flag, key, v)`, the run's first pass (is the value of the
-- right kind at all); and `check(flag, v)`, the run's second pass (is it in range). nil is
-- always accepted by `kind` and `check` (the option is unset).

--- A switch: true or false (the command line's flag sets it; `value` is what it sets).
local switch = {
  kind = function(_, key, v)
    M.check_switches({ [key] = v }, { key })
  end,
}

--- One of `values`, named in this order in the message.
local function choice(values)
  local set, list = {}, {}
  for _, v in ipairs(values) do set[v] = true end
  for i, v in ipairs(values) do list[i] = v end
  local words = table.concat(list, ", ", 1, #list - 1) .. " or " .. list[#list]
  local function check(flag, v)
    if v ~= nil and not set[v] then
      error(("diversity: %s %s: expected %s"):format(flag, tostring(v), words), 0)
    end
    return v
  end
  return { set = set, parse = check, check = check }
end

--- A number on the command line: finite (LuaJIT reads "nan" and "inf" as numbers: no option
-- takes them).
local function number(flag, v)
  local x = tonumber(v)
  if not x then error(flag .. " " .. v .. ": not a number", 0) end
  if x ~= x or x == math.huge or x == -math.huge then
    error(flag .. " " .. v .. ": not a finite number", 0)
  end
  return x
end

--- A count that must be a finite integer first (`kind`), then at least `least`.
local function count(least, words)
  return {
    parse = number,
    kind = function(flag, _, v)
      if v ~= nil and not finite(v) then
        error(("diversity: %s must be a finite integer, got %s"):format(flag, tostring(v)), 0)
      end
    end,
    check = function(flag, v)
      if v ~= nil and (v < least or v ~= math.floor(v)) then
        error(("diversity: %s must be a %s integer, got %s"):format(flag, words, tostring(v)), 0)
      end
    end,
  }
end

--- A positive integer (one check: the kind and the range together).
local positive_integer = {
  parse = number,
  check = function(flag, v)
    if v ~= nil and (type(v) ~= "number" or v < 1 or v ~= math.floor(v) or v == math.huge) then
      error("diversity: " .. flag .. " must be a positive integer, got " .. tostring(v), 0)
    end
  end,
}

--- A positive finite number, required (the watchdog knobs have defaults: a NaN once passed here
-- and failed only after the first probe had run on the device).
local positive = {
  parse = number,
  check = function(flag, v)
    if not finite(v) or v <= 0 then
      error(("diversity: %s must be a positive number, got %s"):format(flag, tostring(v)), 0)
    end
  end,
}

--- Bytes: "2G", "512M", "64k" or a byte count on the command line; a positive number in a run.
local bytes = {
  parse = function(flag, v)
    local num, unit = v:match("^(%d+%.?%d*)([KMGkmg]?)$")
    local scale = ({ [""] = 1, k = 2 ^ 10, m = 2 ^ 20, g = 2 ^ 30 })[(unit or ""):lower()]
    if not num or tonumber(num) <= 0 then
      error(flag .. " " .. v .. ": expected a size such as 2G, 512M or a byte count", 0)
    end
    return math.floor(tonumber(num) * scale)
  end,
  check = function(flag, v)
    if v ~= nil and (type(v) ~= "number" or v ~= v or v < 1 or v == math.huge) then
      error("diversity: " .. flag .. " must be a positive number of bytes, got " .. tostring(v), 0)
    end
  end,
}

--- A directory that exists.
local directory = {
  parse = M.check_directory,
  check = function(flag, v)
    if v ~= nil then M.check_directory(flag, v) end
  end,
}

--- A shard spec (`M.parse_shard`).
local shard = {
  parse = function(_, v)
    M.parse_shard(v)
    return v
  end,
  check = function(_, v)
    if v ~= nil then M.parse_shard(v) end
  end,
}

--- A start list: "all", "a,b,c" or a Lua array; never empty (an empty job is an error, not an
-- empty cache over an existing one).
local starts = {
  check = function(_, v)
    if v == nil or v == "all" then return end
    local none
    if type(v) == "table" then none = #v == 0
    else none = not tostring(v):find("[^,]") end
    if none then
      error(("diversity: --starts gave no starts (%q): name at least one, or leave --starts out "
        .. "for all"):format(type(v) == "table" and "{}" or tostring(v)), 0)
    end
  end,
}

--- A string, taken as it is.
local text = {}

local MODE = choice { "scan", "gram", "auto" }
local PLACEMENT = choice { "auto", "registers", "memory" }
local SHAPE = choice { "untiled", "tiled", "per-tile" }

--- The accepted names of --mode, --placement and --shape (`driver.MODES`, …).
M.MODES, M.PLACEMENTS, M.SHAPES = MODE.set, PLACEMENT.set, SHAPE.set

local D = M.defaults

--- The options, in the order `diversity --help` lists them: { flag =, key =, meta = (nil: a
-- switch; else the value's metavariable), type =, help =, shown = (the default --help shows),
-- value = (what a switch sets; nil: true), required = }.
M.FLAGS = {
  { flag = "--embeddings", key = "embeddings", meta = "FILE", type = text, required = true,
    help = "embeddings.json, .npy, .f32 (with --dim) or an fp16 .bin (required)" },
  { flag = "--out", key = "out", meta = "FILE", type = text, required = true,
    help = "the diversity cache to write (JSON; required)" },
  { flag = "--center", key = "center", type = switch, help = "subtract the column mean first" },
  { flag = "--precision", key = "precision", meta = "P", type = choice { "fp16", "fp32" },
    help = "storage on the device", shown = D.precision },
  { flag = "--mode", key = "mode", meta = "M", type = MODE,
    help = "engine; auto: gram when G fits the device", shown = D.mode },
  { flag = "--placement", key = "placement", meta = "P", type = PLACEMENT,
    help = "where gram keeps its state", shown = "auto" },
  { flag = "--plain-sums", key = "plain_sums", type = switch,
    help = "gram: plain float32 key sums (other bits)" },
  { flag = "--compensated-sums", key = "plain_sums", type = switch, value = false,
    help = "gram: compensated float32 key sums" },
  { flag = "--judge", key = "judge", type = switch, help = "gram: re-score uncertain picks (other bits)",
    shown = "on; unnamed, fixed-point keys certify every step where the device has float64" },
  { flag = "--no-judge", key = "judge", type = switch, value = false, help = "gram: no judge" },
  { flag = "--shape", key = "shape", meta = "S", type = SHAPE,
    help = "scan: how candidates are walked", shown = "tiled" },
  { flag = "--tile", key = "tile", meta = "T", type = positive_integer,
    help = "scan: candidates per tile", shown = "85% of the device's L2" },
  { flag = "--chunk", key = "chunk", meta = "C", type = positive_integer,
    help = "steps per submission, fixed", shown = "sized to --target-s" },
  { flag = "--top-k", key = "top_k", meta = "K", type = count(0, "non-negative"),
    help = "steps per sequence", shown = "all: N - 1" },
  { flag = "--batch", key = "batch", meta = "B", type = count(1, "positive"),
    help = "sequences per batch", shown = D.batch .. " (scan), what fits in 4+ batches (gram)" },
  { flag = "--starts", key = "starts", meta = "LIST", type = starts,
    help = "all, or 0-based starts a,b,c", shown = "all" },
  { flag = "--binary", key = "binary", meta = "FILE", type = text,
    help = "also write the uint32 cache (needs every start)" },
  { flag = "--dim", key = "dim", meta = "D", type = { parse = number }, help = "row length of a .f32 input" },
  { flag = "--device", key = "device", meta = "NAME", type = text,
    help = "device index, GPU-… UUID or a name one device has", shown = "the best device" },
  { flag = "--devices", key = "devices", meta = "LIST", type = text,
    help = "all, or a comma list: batches shared out" },
  { flag = "--validation", key = "validation", type = switch, help = "Vulkan validation layers on" },
  { flag = "--resume", key = "resume", type = switch, help = "continue from <out>.partial/" },
  { flag = "--target-s", key = "target_s", meta = "S", type = positive,
    help = "seconds a submission may take (watchdog)", shown = D.target_s },
  { flag = "--safety", key = "safety", meta = "F", type = positive,
    help = "fraction of --target-s a chunk may use", shown = D.safety },
  { flag = "--host-memory", key = "host_memory", meta = "SIZE", type = bytes,
    help = "host memory a batch's results may take (K, M, G)", shown = "min(2G, RAM / 4)" },
  { flag = "--cache-dir", key = "cache_dir", meta = "DIR", type = directory,
    help = "where the fp16 conversion is cached", shown = "beside --embeddings" },
  { flag = "--model", key = "model", meta = "NAME", type = text, help = "model name for the metadata" },
  { flag = "--shard", key = "shard", meta = "i/n[:strided]", type = shard,
    help = "compute shard i of n of the starts (not with --binary)" },
  { flag = "--quiet", key = "quiet", type = switch, help = "no progress bar" },
  { flag = "--verbose", key = "verbose", type = switch,
    help = "print the wall time of each phase (open, load, the device, writing)" },
  { flag = "--help", key = "help", type = switch, help = "this text" },
}

M.BY_FLAG, M.BY_KEY = {}, {}
for _, o in ipairs(M.FLAGS) do
  M.BY_FLAG[o.flag] = o
  M.BY_KEY[o.key] = M.BY_KEY[o.key] or o
end

--- The options `check` holds a run to, in the order it checks them (the order its messages
-- have always come in): first every one's kind, then every one's range.
local CHECKED = { "center", "validation", "resume", "quiet", "plain_sums", "judge", "mode",
  "placement", "batch", "chunk", "tile", "shape", "host_memory", "target_s", "safety", "top_k" }

--- The message for a required option `opts` lacks ("--embeddings FILE is required"), or nil.
function M.missing(opts)
  for _, o in ipairs(M.FLAGS) do
    if o.required and not opts[o.key] then
      return ("%s %s is required"):format(o.flag, o.meta)
    end
  end
end

--- Check `opts` (defaults filled in) the way `driver.run` does before any device or file work:
-- required options, each option's kind and range, then what options say together. Returns the
-- parsed shard (`M.parse_shard`) or nil.
function M.check(opts)
  local missing = M.missing(opts)
  if missing then error("diversity: " .. missing, 0) end
  for _, k in ipairs(CHECKED) do
    local o = M.BY_KEY[k]
    if o.type.kind then o.type.kind(o.flag, k, opts[k]) end
  end
  for _, k in ipairs(CHECKED) do
    local o = M.BY_KEY[k]
    if o.type.check then o.type.check(o.flag, opts[k]) end
  end
  local parsed = opts.shard ~= nil and M.parse_shard(opts.shard) or nil
  if parsed and opts.binary then
    error("diversity: --binary cannot be combined with --shard: the binary cache holds a row "
      .. "for every item and is not split into shards; leave --binary out of sharded runs", 0)
  end
  starts.check("--starts", opts.starts)
  -- Places named by options: checked before any device, file or GPU work.
  directory.check("--cache-dir", opts.cache_dir)
  return parsed
end

return M
