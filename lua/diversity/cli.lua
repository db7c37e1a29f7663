--- The `diversity` command: the diversity-cache job from files (see docs/cli.md).
-- Installed as `diversity` by the rock; from a clone, run
--   LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit lua/diversity/cli.lua --help
--
-- The flags are one table (diversity.driver.options' FLAGS, which the driver checks a run by too):
-- the parser, the help text and its defaults all come from it.
-- Exit status: 0 done (and --help), 2 a usage error (unknown flag, missing or malformed value),
-- 1 any other failure. (A table rather than the argparse rock: the rock would be a dependency
-- that Debian packages outside LuaRocks' view, so `luarocks make` would fetch it from the network.)
local driver = require "diversity.driver"
local options = require "diversity.driver.options"

-- The flags: { flag, key, meta (nil: a switch; else the metavariable), type (its `parse`
-- converts the text), help, shown (the default --help shows), value (what a switch sets; nil:
-- true) }, shared with the driver's own checks (lua/diversity/driver/options.lua).
local FLAGS = options.FLAGS

local function usage()
  local lines = {
    "usage: diversity --embeddings FILE --out FILE [options]",
    "       diversity merge --out FILE SHARD.json...   (the shards of one --shard run, any order)",
    "       diversity query --embeddings FILE --start ID [--k K]   (see diversity query --help)",
    "       diversity update --cache OLD.json --embeddings NEW --out FILE   (rows appended to OLD's table)",
    "",
    "Computes a diversity sequence from every start and writes them as one JSON cache. With",
    "fp16 it caches the converted table as <name>.<space>.fp16.bin (+ .json, .ids.json) beside",
    "the input or in --cache-dir, and checkpoints into <out>.partial/ while it runs.",
    "",
  }
  for _, f in ipairs(FLAGS) do
    local left = "  " .. f.flag .. (f.meta and (" " .. f.meta) or "")
    local help = f.help .. (f.shown ~= nil and (" [default: " .. tostring(f.shown) .. "]") or "")
    lines[#lines + 1] = left .. string.rep(" ", math.max(1, 26 - #left)) .. help
  end
  return table.concat(lines, "\n")
end

local BY_FLAG = options.BY_FLAG

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
    if f.meta == nil then
      if inline then usage_error(f.flag .. " takes no value") end
      if f.value == nil then o[f.key] = true else o[f.key] = f.value end
    else
      local v = inline
      if v == nil then
        i = i + 1
        v = argv[i]
        if v == nil then usage_error(f.flag .. " needs a value") end
      end
      if f.type.parse then
        local ok, x = pcall(f.type.parse, f.flag, v)
        if not ok then usage_error(driver_message(x)) end
        v = x
      end
      o[f.key] = v
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

-- `query --embeddings FILE (--start ID [--k K] | --stdin) [table flags]`: the flags this
-- subcommand takes (the batch command's own table and device flags, and its own).
local QUERY_FLAGS = {
  ["--start"] = "start", ["--k"] = "k", ["--texts"] = "texts", ["--stdin"] = true, ["--g"] = "g",
}
local QUERY_SHARED = { "--embeddings", "--center", "--precision", "--mode", "--placement",
  "--plain-sums", "--compensated-sums", "--judge", "--no-judge", "--dim", "--device",
  "--validation", "--cache-dir", "--quiet", "--help" }

local function query_usage()
  return table.concat({
    "usage: diversity query --embeddings FILE --start ID [--k K] [--texts FILE] [options]",
    "       diversity query --embeddings FILE --stdin [--k K] [--texts FILE] [options]",
    "",
    "Prints the first K steps of the diversity sequence from one start, computed on demand",
    "(the same ids as the batch command's cache with the same options). --stdin reads one JSON",
    "request a line ({\"start\": ID, \"k\": K}) and writes one JSON answer a line, the table",
    "kept loaded. ID is an id of a JSON input's items, else a 0-based row index.",
    "",
    "  --start ID              the sequence's first item",
    "  --k K                   steps after the start [default: 10]",
    "  --texts FILE            print texts: JSON lines with a \"text\" field, or plain lines, one per row",
    "  --stdin                 serve JSON lines",
    "  --g auto|rows|whole     host engine: build G's rows as picks need them, or whole [default: auto]",
    "  (and the batch command's --embeddings --center --precision --mode --placement --plain-sums",
    "   --compensated-sums --judge --no-judge --dim --device --validation --cache-dir --quiet)",
  }, "\n")
end

local function parse_query(argv)
  local shared = {}
  for _, f in ipairs(QUERY_SHARED) do shared[f] = true end
  local own, rest, i = { k = 10 }, {}, 2
  while i <= #argv do
    local a = argv[i]
    local name, inline = a:match("^(%-%-[^=]+)=(.*)$")
    local key = QUERY_FLAGS[name or a]
    if key == true then
      own.stdin = true
    elseif key then
      local v = inline
      if v == nil then i = i + 1; v = argv[i] end
      if v == nil then usage_error("query: " .. a .. " needs a value") end
      if key == "k" then
        local k = tonumber(v)
        if not k or k ~= math.floor(k) or k < 0 then
          usage_error("query: --k " .. v .. ": expected a whole number >= 0")
        end
        v = k
      elseif key == "g" and v ~= "auto" and v ~= "rows" and v ~= "whole" then
        usage_error("query: --g " .. v .. ": expected auto, rows or whole")
      end
      own[key] = v
    elseif shared[name or a] or a == "-h" then
      rest[#rest + 1] = a
      if not inline and BY_FLAG[a] and BY_FLAG[a].meta then
        i = i + 1
        if argv[i] == nil then usage_error("query: " .. a .. " needs a value") end
        rest[#rest + 1] = argv[i]
      end
    else
      usage_error("query: unknown argument " .. a)
    end
    i = i + 1
  end
  local o = parse(rest)
  for k, v in pairs(own) do o[k] = v end
  return o
end

local function run_query(opts)
  if not opts.embeddings then usage_error("query: --embeddings FILE is required") end
  if (opts.start == nil) == (not opts.stdin) then
    usage_error("query: give --start ID or --stdin (one of them)")
  end
  local query = require "diversity.query"
  local server = query.open(opts)
  local ok, err = pcall(function()
    if opts.stdin then
      query.serve(server, io.stdin, io.stdout, opts.k)
    else
      local ids, texts = server:answer(opts.start, opts.k)
      for i, id in ipairs(ids) do
        if texts then
          io.stdout:write(tostring(id), "\t", (texts[i]:gsub("\\", "\\\\"):gsub("\n", "\\n")
            :gsub("\t", "\\t")), "\n")
        else
          io.stdout:write(tostring(id), "\n")
        end
      end
    end
    if not opts.quiet then
      local r = server:report()
      io.stderr:write(("%s engine, %s mode, G %s (%d of %d rows), %d queries in %.3f s\n")
        :format(r.engine, r.mode, r.g, r.rows_built, r.n, r.queries, r.query_ns / 1e9))
    end
  end)
  server:close()
  if not ok then error(err, 0) end
end

-- `update --cache OLD [the main command's flags]`: the main flags, and --cache.
local function parse_update(argv)
  local rest, cache, i = {}, nil, 2
  while i <= #argv do
    local a = argv[i]
    local inline = a:match("^%-%-cache=(.*)$")
    if inline then cache = inline
    elseif a == "--cache" then
      i = i + 1
      cache = argv[i]
      if cache == nil then usage_error("update: --cache needs a value") end
    else rest[#rest + 1] = a end
    i = i + 1
  end
  local o = parse(rest)
  o.cache = cache
  return o
end

local function update_usage()
  return table.concat({
    "usage: diversity update --cache OLD.json --embeddings NEW --out FILE [options]",
    "",
    "Writes the cache the main command writes for NEW, where NEW is the table of OLD.json with",
    "rows appended (checked against the table checksum OLD.json records): the new starts'",
    "sequences, and each old sequence recomputed only from the first step at which an appended",
    "row could be picked. A centred cache is refused (appended rows move the mean). The options",
    "are the main command's (see diversity --help); precision and --top-k default to the cache's.",
  }, "\n")
end

local ok, err = pcall(function()
  if arg[1] == "update" then
    local opts = parse_update(arg)
    if opts.help then io.stdout:write(update_usage(), "\n"); return end
    if not opts.cache then usage_error("update: --cache OLD.json is required") end
    local missing = options.missing(opts)
    if missing then usage_error(missing) end
    local r = require("diversity.update").run(opts)
    local u = r.update
    io.stdout:write(("%s: %s mode, %d rows (%d appended): %d old sequences kept, %d recomputed, " ..
      "%d new; %d of %d steps computed (%.1f%%) in %.3f s -> %s\n"):format(r.device, r.mode,
      u.new_n, u.new_n - u.old_n, u.kept, u.recomputed, u.new_starts, u.steps_computed,
      u.steps_total, 100 * u.steps_computed / math.max(1, u.steps_total), r.gpu_ns / 1e9, opts.out))
    return
  end
  if arg[1] == "query" then
    local opts = parse_query(arg)
    if opts.help then io.stdout:write(query_usage(), "\n"); return end
    return run_query(opts)
  end
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
  local missing = options.missing(opts)
  if missing then usage_error(missing) end
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
