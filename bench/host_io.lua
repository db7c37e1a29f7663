-- Host-side costs of the cache job, each timed alone on one finished batch (for BENCHMARKS.md):
-- downloads (whole rows, columns, into cdata), the checksum, and the JSON and binary writers.
-- usage: luajit bench/host_io.lua TABLE.npy OUTDIR [STARTS]
local ffi = require "ffi"
local diversity = require "diversity"
local driver = require "diversity.driver"
local path, dir = arg[1], arg[2]
local ctx = diversity.open {}
local t = diversity.load(path)
local n = t:n()
local k = tonumber(arg[3] or n)
local starts = {}
for i = 0, k - 1 do starts[#starts + 1] = i end
local dt = ctx:upload(t, "fp16")
local job = dt:job(starts, { mode = "auto", chunk = 0 })
local c0 = driver.clock()
job:step(n)
print(("%s: %d sequences x %d, steps %.3f s wall"):format(job:mode(), k, n, driver.clock() - c0))
local function time(label, f, bytes)
  collectgarbage()
  local t0 = driver.clock()
  local r = f()
  local s = driver.clock() - t0
  print(("%-34s %7.3f s  %7.0f MB/s"):format(label, s, bytes / s / 1e6))
  return r
end
local B = k * n * 4
local bytes = time("sequences_bytes", function() return job:sequences_bytes() end, B)
time("sequences_bytes again", function() return job:sequences_bytes() end, B)
local half = math.floor(n / 2)
time("columns(0, n/2)", function() return job:columns(0, half) end, k * half * 4)
time("columns(n/2, n)", function() return job:columns(half, n) end, k * (n - half) * 4)
local rows = diversity.rows()
time("columns_into (fresh rows)", function() job:columns_into(rows, 0, n) end, B)
time("columns_into (reused rows)", function() job:columns_into(rows, 0, n) end, B)
time("rows:checksum", function() return rows:checksum() end, B)
time("rows:write_to", function() rows:write_to(dir .. "/io.u32") end, B)
local wr = diversity.json_cache_writer(dir .. "/io2.json", { model = "m" }, t:ids())
time("json write_rows", function() wr:write_rows(starts, rows, 0) end, B)
time("json finish (rows)", function() wr:finish() end, 1)
local br = diversity.binary_cache_writer(dir .. "/io2.bin", n, n)
time("binary write_rows", function() br:write_rows(starts, rows, 0) end, B)
time("binary finish (rows)", function() br:finish() end, 1)
local buf = ffi.new("uint32_t[?]", k * n)
time("download into cdata", function() return job:download(buf) end, B)
time("checksum (fnv1a64)", function() return diversity.checksum(bytes) end, B)
local w = diversity.json_cache_writer(dir .. "/io.json", { model = "m" }, t:ids())
local jb = 0
time("json write_bytes (rows in)", function() w:write_bytes(starts, bytes, n) end, B)
time("json finish", function() w:finish() end, 1)
local f = io.open(dir .. "/io.json", "rb"); jb = f:seek("end"); f:close()
print(("json text %.0f MB"):format(jb / 1e6))
local bw = diversity.binary_cache_writer(dir .. "/io.bin", n, n)
time("binary write_bytes", function() bw:write_bytes(starts, bytes, n) end, B)
time("binary finish", function() bw:finish() end, 1)
job:close(); dt:close(); t:close(); ctx:close()
