--- Shared helpers for the busted specs under tests/lua (run from the repository root, under
-- LuaJIT: `luajit /usr/bin/busted tests/lua`). Fixed-seed random data, error capture, temporary
-- directories, running the command line, and a small JSON decoder.
local ffi = require "ffi"
local diversity = require "diversity"

-- setenv and unsetenv, for the specs that set a variable the module reads (ffi.C.setenv).
pcall(ffi.cdef, [[
int setenv(const char* name, const char* value, int overwrite);
int unsetenv(const char* name);
]])

local H = {}

H.DATA_JSON = "data/fortunes-300.embeddings.json"
H.DATA_NPY = "data/fortunes-2k.npy"

---------------------------------------------------------------------------------------------------
-- Random data
---------------------------------------------------------------------------------------------------

--- A 32-bit linear congruential generator (Numerical Recipes constants); returns a function giving
-- uniform numbers in [0, 1). Exact in doubles (the products stay below 2^53).
function H.lcg(seed)
  local state = seed % 4294967296
  return function()
    state = (1664525 * state + 1013904223) % 4294967296
    return state / 4294967296
  end
end

--- `n` rows of `d` values in [-1, 1), from a fixed seed.
function H.random_rows(n, d, seed)
  local r = H.lcg(seed)
  local rows = {}
  for i = 1, n do
    local row = {}
    for j = 1, d do row[j] = 2 * r() - 1 end
    rows[i] = row
  end
  return rows
end

--- The rows of an array of rows, one after the other.
function H.flatten(rows)
  local flat = {}
  for _, row in ipairs(rows) do
    for _, v in ipairs(row) do flat[#flat + 1] = v end
  end
  return flat
end

--- `x` rounded to float32.
local f32box = ffi.new("float[1]")
--- `n` rows of `d` small integers (-2..2) from `seed`: every product and sum is exact in float32 and
-- float64, so inner products and L2 distances are exact on both sides and ties are real ties.
function H.int_rows(n, d, seed)
  local r = H.lcg(seed)
  local rows = {}
  for i = 1, n do
    local row = {}
    for j = 1, d do row[j] = math.floor(r() * 5) - 2 end
    rows[i] = row
  end
  return rows
end

function H.f32(x)
  f32box[0] = x
  return tonumber(f32box[0])
end

---------------------------------------------------------------------------------------------------
-- Errors
---------------------------------------------------------------------------------------------------

--- The clean message of an error: a string as is (the shim's), else `diversity.message`.
function H.message(e)
  if type(e) == "string" then return e end
  return diversity.message(e)
end

--- Call `f(...)`, which must fail; returns the clean message.
function H.error_of(f, ...)
  local ok, e = pcall(f, ...)
  assert(not ok, "expected an error, but the call succeeded")
  return H.message(e)
end

--- Call `f(...)`, which must fail with a message containing every string of `words` (plain
-- substring matches, case-sensitive). Returns the message.
function H.assert_error(words, f, ...)
  local m = H.error_of(f, ...)
  if type(words) == "string" then words = { words } end
  for _, w in ipairs(words) do
    if not m:find(w, 1, true) then
      error(("error message %q does not contain %q"):format(m, w), 2)
    end
  end
  return m
end

---------------------------------------------------------------------------------------------------
-- Comparing sequences
---------------------------------------------------------------------------------------------------

--- nil when the arrays of rows `a` and `b` are equal, else a description of the first difference.
function H.diff_rows(a, b, what)
  what = what or "rows"
  if #a ~= #b then return ("%s: %d rows vs %d"):format(what, #a, #b) end
  for i = 1, #a do
    local x, y = a[i], b[i]
    if type(x) ~= "table" or type(y) ~= "table" then
      return ("%s: row %d missing (%s vs %s)"):format(what, i, type(x), type(y))
    end
    if #x ~= #y then return ("%s: row %d has length %d vs %d"):format(what, i, #x, #y) end
    for k = 1, #x do
      if x[k] ~= y[k] then
        return ("%s: row %d differs at entry %d: %s vs %s"):format(what, i, k, tostring(x[k]),
          tostring(y[k]))
      end
    end
  end
  return nil
end

--- Whether `seq` (1-based array of 0-based indices) is a permutation of 0..n-1.
function H.is_permutation(seq, n)
  if #seq ~= n then return false end
  local seen = {}
  for _, v in ipairs(seq) do
    if type(v) ~= "number" or v < 0 or v >= n or v ~= math.floor(v) or seen[v] then return false end
    seen[v] = true
  end
  return true
end

--- Little-endian uint32 values of a binary string, as a Lua array.
function H.u32s(bytes)
  assert(#bytes % 4 == 0, "not a whole number of uint32")
  local n = #bytes / 4
  local buf = ffi.new("uint32_t[?]", math.max(n, 1))
  ffi.copy(buf, bytes, #bytes)
  local out = {}
  for i = 0, n - 1 do out[i + 1] = tonumber(buf[i]) end
  return out
end

--- Split a flat array into rows of `len`.
function H.rows_of(flat, len)
  local rows = {}
  for i = 0, #flat / len - 1 do
    local row = {}
    for k = 1, len do row[k] = flat[i * len + k] end
    rows[i + 1] = row
  end
  return rows
end

--- Run a whole job on a device table: every start (or `starts`), options `o`; returns the rows.
function H.sequences(dt, starts, o)
  local job = dt:job(starts, o)
  job:step(dt:n())
  assert(job:done(), "job not done after stepping N steps")
  local s = job:sequences()
  job:close()
  return s
end

--- Assert that a context reported no validation messages.
function H.assert_no_validation(ctx)
  local msgs = ctx:validation_messages()
  if #msgs > 0 then
    error(("%d validation message(s), the first: %s"):format(#msgs, tostring(msgs[1])), 2)
  end
end

---------------------------------------------------------------------------------------------------
-- Files and directories
---------------------------------------------------------------------------------------------------

function H.q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local made_dirs = {}

--- A fresh empty directory (from os.tmpname). Removed by `H.cleanup()`.
function H.tmpdir()
  local name = os.tmpname()
  os.remove(name)
  os.execute("mkdir -m 700 " .. H.q(name))
  local f = io.open(name .. "/.probe", "w")
  assert(f, "could not create temporary directory " .. name)
  f:close()
  os.remove(name .. "/.probe")
  made_dirs[#made_dirs + 1] = name
  return name
end

--- Remove every directory `H.tmpdir` made.
function H.cleanup()
  for _, d in ipairs(made_dirs) do
    os.execute("chmod -R u+w " .. H.q(d) .. " 2>/dev/null; rm -rf " .. H.q(d))
  end
  made_dirs = {}
end

--- A context with validation layers and a temporary directory for the tests of one describe
--- block: opened before them (`set(ctx, dir)` hands both to the spec) and closed, with every
--- directory `H.tmpdir` made, after them. Busted's `setup` and `teardown` are passed in: they
--- live in the spec's environment, not in this module's.
function H.context_for(setup, teardown, set)
  local ctx
  setup(function()
    ctx = diversity.open { validation = true }
    set(ctx, H.tmpdir())
  end)
  teardown(function()
    if ctx then ctx:close() end
    H.cleanup()
  end)
end

--- Starts 0..n-1 as a --starts list.
function H.start_list(n)
  local s = {}
  for i = 0, n - 1 do s[#s + 1] = tostring(i) end
  return table.concat(s, ",")
end

--- The last test of a describe block: the validation layers of its context (`get()`) said
--- nothing. Busted's `it` is passed in, as for `H.context_for`.
function H.it_left_no_validation(it, get)
  it("left no validation messages", function()
    H.assert_no_validation(get())
  end)
end

--- The rows of table `t` as one row-major float[?] cdata of N × D values.
function H.float_rows(t)
  local n, d = t:n(), t:dim()
  local flat = ffi.new("float[?]", n * d)
  for i = 0, n - 1 do
    local row = t:row(i)
    for k = 1, d do flat[i * d + k - 1] = row[k] end
  end
  return flat
end

--- A new temporary directory holding a copy of the 300 bundled fortunes as e.json.
function H.fortunes_dir()
  local dir = H.tmpdir()
  H.write(dir .. "/e.json", H.read(H.DATA_JSON))
  return dir
end

--- In a describe block: before its tests, the first `n` bundled fortunes written to a fresh
-- directory's `e.json` and, unless `load` is false, loaded; `set(dir, path, t)` receives them.
-- The table is closed after the block.
function H.fortunes_fixture(setup, teardown, n, set, load)
  local t
  setup(function()
    local dir = H.tmpdir()
    H.first_fortunes(dir .. "/e.json", n)
    if load ~= false then t = diversity.load(dir .. "/e.json") end
    set(dir, dir .. "/e.json", t)
  end)
  teardown(function()
    if t then t:close() end
  end)
end

--- `a` with the values of `extra` (may be nil) appended: a command line and its extra flags.
function H.extend(a, extra)
  for _, x in ipairs(extra or {}) do a[#a + 1] = x end
  return a
end

function H.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  -- directories cannot always be opened for reading portably; ask the shell
  local p = io.popen("test -e " .. H.q(path) .. " && echo yes")
  local r = p:read("*a")
  p:close()
  return r:match("yes") ~= nil
end

function H.read(path)
  local f = assert(io.open(path, "rb"))
  local d = f:read("*a")
  f:close()
  return d
end

function H.write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

--- The names in a directory (hidden ones included), sorted.
function H.ls(dir)
  local p = io.popen("ls -A " .. H.q(dir) .. " 2>/dev/null")
  local names = {}
  for line in p:lines() do names[#names + 1] = line end
  p:close()
  table.sort(names)
  return names
end

-- An index handle saved to `path`, loaded by `load` (diversity.load_ivf_index or
-- load_ivfpq_index) and saved again gives the same bytes, and the loaded index the ids `want`
-- for search(q, o); the loaded handle is closed (and refuses use after). Returns its metric.
function H.index_round_trip(ctx, ix, load, path, q, o, want)
  local assert = require "luassert"
  ix:save(path)
  local back = load(ctx, path)
  back:save(path .. "2")
  assert.are.equal(H.read(path), H.read(path .. "2"))
  assert.are.equal(want, back:search(q, o):ids_bytes())
  local metric = back:metric()
  back:close()
  H.assert_error("used after close()", back.ntotal, back)
  return metric
end

-- Corrupt and foreign index files (a byte changed, another file, a truncated one) are refused by
-- diversity[loader] naming the file, and no file is changed; `ext` names the files, `magic` and
-- `kind` ("IVF", "IVF-PQ") are the format's. Then `ix` is closed and `ctx` must have no
-- validation messages (the end of an index spec's round-trip test).
function H.corrupt_index_files(ctx, ix, loader, dir, ext, magic, kind)
  local assert = require "luassert"
  local load = diversity[loader]
  local good = dir .. "/good." .. ext
  ix:save(good)
  local bytes = H.read(good)
  local bad = dir .. "/bad." .. ext
  H.write(bad, bytes:sub(1, 60) .. string.char((bytes:byte(61) + 1) % 256) .. bytes:sub(62))
  H.assert_error({ "diversity." .. loader .. ": ", "bad." .. ext, "checksum mismatch" }, load, ctx, bad)
  H.write(bad, "not an index")
  H.assert_error("no " .. magic .. " magic", load, ctx, bad)
  assert.are.equal("not an index", H.read(bad))
  H.write(bad, bytes:sub(1, #bytes - 4))
  H.assert_error("truncated or not an " .. kind .. " index", load, ctx, bad)
  assert.are.equal(bytes, H.read(good))
  ix:close()
  H.assert_no_validation(ctx)
end

--- Names in `dir` that look like a writer's temporary file for `name` (`.<name>.tmp-*`).
function H.temp_files(dir, name)
  local out = {}
  local prefix = "." .. (name or "")
  for _, n in ipairs(H.ls(dir)) do
    if n:sub(1, #prefix) == prefix and n:find(".tmp-", 1, true) then out[#out + 1] = n end
  end
  return out
end

--- Every name in `dir` (hidden ones included) with its bytes ("<dir>" for a directory): compare
-- two snapshots to check that a refused run created, removed and changed nothing.
function H.snapshot(dir)
  local snap = {}
  for _, n in ipairs(H.ls(dir)) do
    local f = io.open(dir .. "/" .. n, "rb")
    local ok, d = pcall(f and f.read or function() end, f, "*a")
    if f then f:close() end
    snap[n] = (ok and d) or "<dir>"
  end
  return snap
end

--- `stat` of a file: inode and modification time with nanoseconds, as one string.
function H.stat(path)
  local p = io.popen("stat -c '%i %y' " .. H.q(path) .. " 2>/dev/null")
  local s = p:read("*a")
  p:close()
  return s
end

--- Run a shell command; returns its exit status, stdout and stderr.
function H.sh(cmd)
  local errf = os.tmpname()
  local p = io.popen("( " .. cmd .. " ) 2>" .. H.q(errf) .. "; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  out = out:gsub("__rc=%d+%s*$", "")
  local err = H.read(errf)
  os.remove(errf)
  return rc, out, err
end

--- LUA_CPATH / LUA_PATH for a child LuaJIT: this process's, else the repository's defaults.
function H.lua_env()
  local cpath = os.getenv("LUA_CPATH") or "target/lua/?.so;;"
  local path = os.getenv("LUA_PATH") or "lua/?.lua;lua/?/init.lua;;"
  return "LUA_CPATH=" .. H.q(cpath) .. " LUA_PATH=" .. H.q(path)
end

--- Run the command line with `args` (a list, each shell-quoted) and extra environment `env`
-- (a string of NAME=value words, may be nil). Returns rc, stdout, stderr.
function H.cli(args, env)
  local words = {}
  for _, a in ipairs(args) do words[#words + 1] = H.q(a) end
  return H.sh(("%s %s luajit lua/diversity/cli.lua %s"):format(H.lua_env(), env or "",
    table.concat(words, " ")))
end

--- Run python3 with a script (`-c`) and arguments; returns rc, stdout, stderr.
function H.python(script, ...)
  local words = {}
  for _, a in ipairs({ ... }) do words[#words + 1] = H.q(a) end
  return H.sh("python3 -c " .. H.q(script) .. " " .. table.concat(words, " "))
end

--- Write the first `n` of the bundled fortunes (H.DATA_JSON) to `path` as an embeddings.json.
function H.first_fortunes(path, n)
  local rc, _, err = H.python([[
import json, sys
d = json.load(open(sys.argv[1]))
n = int(sys.argv[3])
d["embeddings"] = d["embeddings"][:n]
d["metadata"]["count"] = n
json.dump(d, open(sys.argv[2], "w"))
]], H.DATA_JSON, path, tostring(n))
  assert(rc == 0, err)
end

---------------------------------------------------------------------------------------------------
-- A small JSON decoder (objects → Lua tables with a `__keys` list in file order, arrays → Lua
-- arrays with an `n` field for their length, null → H.null).
---------------------------------------------------------------------------------------------------

H.null = setmetatable({}, { __tostring = function() return "null" end })

function H.json_decode(s)
  local pos = 1
  local function ws()
    pos = s:find("[^ \t\r\n]", pos) or #s + 1
  end
  local function fail(what)
    error(("JSON: %s at byte %d"):format(what, pos), 0)
  end
  -- After an object's or array's item: true at its `close`, past a ',' otherwise.
  local function closes(close)
    ws()
    local d = s:sub(pos, pos)
    pos = pos + 1
    if d == close then return true end
    if d ~= "," then fail("expected ',' or '" .. close .. "'") end
    return false
  end
  local value
  local escapes = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n",
    r = "\r", t = "\t" }
  local function str()
    pos = pos + 1
    local out = {}
    while true do
      local c = s:sub(pos, pos)
      if c == "" then fail("unterminated string") end
      if c == '"' then pos = pos + 1 break end
      if c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        if e == "u" then
          local hex = s:sub(pos + 2, pos + 5)
          local cp = tonumber(hex, 16) or fail("bad \\u escape")
          if cp >= 0xD800 and cp < 0xDC00 and s:sub(pos + 6, pos + 7) == "\\u" then
            local lo = tonumber(s:sub(pos + 8, pos + 11), 16)
            cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
            pos = pos + 6
          end
          if cp < 0x80 then out[#out + 1] = string.char(cp)
          elseif cp < 0x800 then
            out[#out + 1] = string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)
          elseif cp < 0x10000 then
            out[#out + 1] = string.char(0xE0 + math.floor(cp / 4096),
              0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
          else
            out[#out + 1] = string.char(0xF0 + math.floor(cp / 262144),
              0x80 + math.floor(cp / 4096) % 64, 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
          end
          pos = pos + 6
        else
          out[#out + 1] = escapes[e] or fail("bad escape")
          pos = pos + 2
        end
      else
        local j = s:find('["\\]', pos) or #s + 1
        out[#out + 1] = s:sub(pos, j - 1)
        pos = j
      end
    end
    return table.concat(out)
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      pos = pos + 1
      local obj = { __keys = {} }
      ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1 return obj end
      while true do
        ws()
        if s:sub(pos, pos) ~= '"' then fail("expected a key") end
        local k = str()
        ws()
        if s:sub(pos, pos) ~= ":" then fail("expected ':'") end
        pos = pos + 1
        if obj[k] ~= nil then fail("duplicate key " .. k) end
        obj[k] = value()
        obj.__keys[#obj.__keys + 1] = k
        if closes("}") then return obj end
      end
    elseif c == "[" then
      pos = pos + 1
      local arr = { n = 0 }
      ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1 return arr end
      while true do
        arr.n = arr.n + 1
        arr[arr.n] = value()
        if closes("]") then return arr end
      end
    elseif c == '"' then
      return str()
    elseif s:sub(pos, pos + 3) == "true" then pos = pos + 4 return true
    elseif s:sub(pos, pos + 4) == "false" then pos = pos + 5 return false
    elseif s:sub(pos, pos + 3) == "null" then pos = pos + 4 return H.null
    else
      local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
      if not num or num == "" then fail("unexpected character") end
      pos = pos + #num
      return tonumber(num) or fail("bad number " .. num)
    end
  end
  local v = value()
  ws()
  if pos <= #s then fail("trailing characters") end
  return v
end

--- Decode a JSON file after checking it with python3's json module (strict: no NaN, no
-- duplicate keys). Returns the decoded value.
function H.json_file(path)
  local rc, _, err = H.python([[
import json, sys
def no_dupes(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate keys")
    return dict(pairs)
def no_const(c):
    raise ValueError("non-standard constant " + c)
with open(sys.argv[1], "rb") as f:
    json.load(f, object_pairs_hook=no_dupes, parse_constant=no_const)
]], path)
  assert(rc == 0, "python3 json.load refused " .. path .. ": " .. err)
  return H.json_decode(H.read(path))
end

--- Write an embeddings.json from rows (each a Lua array; entries given as raw JSON text when
-- they are strings), ids "r<i>".
function H.write_embeddings_json(path, rows)
  local parts = {}
  for i, row in ipairs(rows) do
    local vals = {}
    for j, v in ipairs(row) do
      vals[j] = type(v) == "string" and v or ("%.9g"):format(v)
    end
    parts[i] = ('{"poem_index": %d, "id": "r%d", "embedding": [%s]}'):format(i - 1, i - 1,
      table.concat(vals, ", "))
  end
  H.write(path, '{"metadata": {"model": "test"}, "embeddings": [\n' .. table.concat(parts, ",\n")
    .. "\n]}\n")
end

return H
