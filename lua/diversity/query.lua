--- Sequences on demand from files: what the `diversity query` command runs (docs/cli.md).
-- `M.open(opts)` loads the table as the batch command does (same flags: centring, precision,
-- the fp16 conversion cache), uploads it and keeps a sequencer; `server:answer(start, k)` gives
-- one sequence's ids (or texts); `M.serve(server, input, output)` answers JSON lines.
local diversity = require "diversity"
local driver = require "diversity.driver"

local M = {}

-- A texts file: JSON lines with a "text" field (as data/*.texts.jsonl), or plain lines; one per
-- row of the table, in row order.
local function load_texts(path, n)
  local f, err = io.open(path, "rb")
  if not f then error("diversity: --texts " .. path .. ": " .. tostring(err), 0) end
  local texts = {}
  for line in f:lines() do
    local text = line
    if line:sub(1, 1) == "{" then
      local ok, v = pcall(diversity.json_decode, line)
      if ok and type(v) == "table" and type(v.text) == "string" then text = v.text end
    end
    texts[#texts + 1] = text
  end
  f:close()
  if #texts ~= n then
    error(("diversity: --texts %s has %d lines; the table has %d rows"):format(path, #texts, n), 0)
  end
  return texts
end

local Server = {}
Server.__index = Server

--- Load, upload and keep a sequencer. opts: embeddings (required), dim, center, precision
-- (default fp16), mode, g, device, validation, cache_dir, texts.
function M.open(opts)
  opts.precision = opts.precision or "fp16"
  -- A query writes nothing: no fp16 conversion cache beside the input (the batch command's).
  opts.fp16_cache = false
  local s = setmetatable({ held = {} }, Server)
  local ok, err = pcall(function()
    s.ctx = diversity.open { device = opts.device, validation = opts.validation }
    s.held[#s.held + 1] = s.ctx
    s.t = driver.load(opts)
    s.held[#s.held + 1] = s.t
    s.n = s.t:n()
    s.dt = s.ctx:upload(s.t, opts.precision)
    s.held[#s.held + 1] = s.dt
    -- The batch command's job options (its arithmetic), so the answers are its prefixes.
    local jopts = driver.gram_arithmetic(opts)
    jopts.mode, jopts.g = opts.mode, opts.g
    s.seq = s.dt:sequencer(jopts)
    s.held[#s.held + 1] = s.seq
    s.ids = s.t:ids()
    if s.ids then
      s.index = {}
      for i, id in ipairs(s.ids) do s.index[id] = i - 1 end
    end
    if opts.texts then s.texts = load_texts(opts.texts, s.n) end
  end)
  if not ok then s:close(); error(err, 0) end
  return s
end

--- The row of `start`: an id of the table's (a JSON input's ids), else a 0-based row index.
function Server:row(start)
  if self.index then
    local i = self.index[start]
    if i == nil and type(start) == "string" then i = self.index[tonumber(start)] end
    if i == nil then error(("diversity: no item has the id %s"):format(tostring(start)), 0) end
    return i
  end
  local i = tonumber(start)
  if i == nil or i ~= math.floor(i) or i < 0 or i >= self.n then
    error(("diversity: start %s: expected a row index 0..%d (the table has no ids)")
      :format(tostring(start), self.n - 1), 0)
  end
  return i
end

--- The first k steps from `start`: the ids (the table's ids, else row indices) and, with
-- texts, the texts.
function Server:answer(start, k)
  if type(k) ~= "number" or k ~= math.floor(k) or k < 0 then
    error("diversity: k must be a whole number >= 0, got " .. tostring(k), 0)
  end
  local rows = self.seq:sequence(self:row(start), k)
  local ids, texts = {}, self.texts and {} or nil
  for i, r in ipairs(rows) do
    ids[i] = self.ids and self.ids[r + 1] or r
    if texts then texts[i] = self.texts[r + 1] end
  end
  return ids, texts
end

--- The sequencer's report (engine, mode, G held, rows built, queries…).
function Server:report() return self.seq:report() end

function Server:close()
  for i = #self.held, 1, -1 do self.held[i]:close() end
  self.held = {}
end

--- One JSON request a line from `input` ({"start": ID, "k": K}), one JSON answer a line to
-- `output` ({"start", "k", "ids"[, "texts"]}, or {"error": …} for a bad request, and the next
-- line is read). Returns the number of lines answered.
function M.serve(server, input, output, default_k)
  local answered = 0
  for line in input:lines() do
    if line:match("%S") then
      local ok, req = pcall(diversity.json_decode, line)
      local reply
      if not ok or type(req) ~= "table" or req.start == nil then
        reply = { error = "expected one JSON object a line with a \"start\": "
          .. (ok and line or diversity.message(req)) }
      else
        local k = req.k or default_k
        local ok2, ids, texts = pcall(server.answer, server, req.start, k)
        if ok2 then
          reply = { start = req.start, k = k, ids = ids, texts = texts }
        else
          reply = { start = req.start, error = diversity.message(ids):gsub("^diversity: ", "") }
        end
      end
      output:write(diversity.json_encode(reply), "\n")
      output:flush()
      answered = answered + 1
    end
  end
  return answered
end

return M
