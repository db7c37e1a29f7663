--- The checkpoint helpers (`<out>.partial/`): when the driver writes and reads its files, over
-- Rust's format (`diversity.checkpoint_*`). Re-exported by `diversity.driver`
-- (`driver.write_batch`, `driver.read_batch`, …; docs/cli.md lists them).
-- May touch: the checkpoint directory's files (through Lua's io and the `diversity` module);
-- nothing else.
local diversity = require "diversity"

local M = {}

--- The checkpoint format (`<out>.partial/`) is Rust's (`diversity.checkpoint_*`, the crate's
-- `checkpoint` module): run.txt's text, the batch files' names, every checksum, the .part block
-- header and the checks a resume makes. The driver decides when to write and read, and writes
-- the files itself (its error messages name the file as Lua's io does).

--- What binds a checkpoint file to its run and its place: the run (the text of its run.txt,
-- `M.run_text`), the batch's index and its starts, as one line that every checksum of the
-- batch's files covers. A file written by another run, or for another batch, fails its checksum.
function M.batch_binding(run_text, b, list)
  return diversity.checkpoint_binding(run_text, b, list)
end

--- The checksum of a finished batch file: its binding (`M.batch_binding`) and its bytes (a
-- string or a `diversity.rows()` buffer).
function M.batch_checksum(binding, bytes)
  return diversity.checkpoint_batch_checksum(binding, bytes)
end

--- Check rows the way the cache readers do: `bytes` holds #list rows of `len` uint32 entries
-- (row-major, little-endian); row i must start with its start list[i], hold no entry twice and
-- none at or past `n`. Returns nil, or a description of the first bad row.
function M.check_rows(bytes, list, len, n)
  return diversity.checkpoint_check_rows(bytes, list, len, n)
end

--- Append one chunk to a batch's in-progress checkpoint: entries from..from+count-1 of every
-- sequence, as a block [from, count, checksum (2 words), rows × count uint32], written and
-- closed at once. The checksum covers the block's place (`binding`, from, count) and its bytes.
function M.append_part(path, from, count, bytes, binding)
  local head = diversity.checkpoint_part_head(binding, from, count, bytes)
  if type(bytes) ~= "string" then
    local ok, e = pcall(bytes.append_to, bytes, path, head)
    if not ok then error("diversity: checkpoint " .. diversity.message(e), 0) end
    return
  end
  local f, e = io.open(path, "ab")
  if not f then error("diversity: checkpoint " .. path .. ": " .. tostring(e), 0) end
  local ok, we = f:write(head, bytes)
  local ok_c, ce = f:close()
  if not ok or not ok_c then
    error("diversity: checkpoint " .. path .. ": " .. tostring(we or ce), 0)
  end
end

--- The driver's files in the checkpoint directory `ckdir` (names only; none when it does not
-- exist), whatever run or batch count wrote them.
function M.checkpoint_files(ckdir)
  return diversity.checkpoint_files(ckdir)
end

--- Remove a checkpoint directory and what the driver put in it (any run's files: a fresh run
-- clears what an earlier one left before it writes its own).
function M.remove_checkpoint(ckdir)
  for _, name in ipairs(M.checkpoint_files(ckdir)) do os.remove(ckdir .. "/" .. name) end
  os.remove(ckdir)
end

-- Write `data` to `path` at once; a failure is an error naming the file as a checkpoint's.
local function write_file(path, data)
  local f, e = io.open(path, "wb")
  if not f then error("diversity: checkpoint " .. path .. ": " .. tostring(e), 0) end
  local ok, we = f:write(data)
  local ok_c, ce = f:close()
  if not ok or not ok_c then
    error("diversity: checkpoint " .. path .. ": " .. tostring(we or ce), 0)
  end
end

--- What a checkpoint belongs to, as "key=value" lines (run.txt without its generated_at line):
-- every input and option that changes the bytes of the output (`diversity.checkpoint_fingerprint`).
function M.fingerprint(t, starts, run, opts)
  return diversity.checkpoint_fingerprint {
    input = opts.embeddings, center = opts.center or false, precision = opts.precision,
    mode = run.mode, summation = run.summation, steps = run.steps, batch = run.batch,
    starts = starts, n = t:n(), dim = t:dim(),
  }
end

--- Check that the checkpoint in `ckdir` belongs to the run whose fingerprint is `fp` and whose
-- run.txt reads `run_text`: a fingerprint that differs is refused naming what differs, a run.txt
-- edited otherwise as such; batch files without a run.txt are refused, as nothing says which
-- run wrote them.
function M.check_run_file(ckdir, fp, run_text)
  diversity.checkpoint_check_run(ckdir, fp, run_text)
end

--- The text of run.txt: what the run is (its fingerprint `fp`) and when it started (a last line
-- "generated_at=…", kept by a resume: `M.checkpoint_time`).
function M.run_text(fp, generated_at)
  return diversity.checkpoint_run_text(fp, generated_at)
end

--- Create the checkpoint directory `ckdir` and write its run.txt (`M.run_text`).
function M.write_run_file(ckdir, text)
  os.execute("mkdir -p '" .. ckdir:gsub("'", "'\\''") .. "'")
  write_file(ckdir .. "/run.txt", text)
end

--- When the run checkpointed in `ckdir` started (its run.txt's generated_at, a UTC time
-- "YYYY-MM-DDTHH:MM:SSZ"), or nil when there is none.
function M.checkpoint_time(ckdir)
  return diversity.checkpoint_time(ckdir)
end

--- Write a finished batch to the checkpoint file `path`: its checksum file (`M.batch_checksum`
-- over `binding` and `bytes`) first, then the bytes through a temporary file renamed onto
-- `path`, so a batch file is never torn (a failure leaves the batch's steps in its .part).
function M.write_batch(path, bytes, binding)
  -- Something that is not a regular file at the batch file's name (a directory, a FIFO) is
  -- named as such, before anything is written beside it.
  for _, p in ipairs({ path, path .. ".sum", path .. ".tmp" }) do
    local kind = diversity.file_kind(p)
    if kind and kind ~= "file" then
      error(("diversity: checkpoint %s is a %s, not a regular file: refusing to write over it")
        :format(p, kind), 0)
    end
  end
  write_file(path .. ".sum", M.batch_checksum(binding, bytes))
  if type(bytes) == "string" then
    local ok_w, e_w = pcall(write_file, path .. ".tmp", bytes)
    if not ok_w then os.remove(path .. ".tmp"); error(e_w, 0) end
  else
    local ok_w, e_w = pcall(bytes.write_to, bytes, path .. ".tmp")
    if not ok_w then
      os.remove(path .. ".tmp")
      error("diversity: checkpoint " .. diversity.message(e_w), 0)
    end
  end
  local ok, e = os.rename(path .. ".tmp", path)
  if not ok then
    -- os.rename's message names the temporary file: name the batch file, and leave no .tmp.
    os.remove(path .. ".tmp")
    local why = tostring(e):gsub("^" .. (path .. ".tmp"):gsub("%p", "%%%0") .. ": ", "")
    error(("diversity: checkpoint %s: %s"):format(path, why), 0)
  end
end

--- Whether `ckdir` still holds the checkpoint of the run whose run.txt reads `run_text` (another
-- run to the same output may have finished and removed it): what a failure may tell the user to
-- --resume.
function M.checkpoint_is(ckdir, run_text)
  local f = io.open(ckdir .. "/run.txt", "rb")
  if not f then return false end
  local text = f:read("*a")
  f:close()
  return text == run_text
end

--- The note a failure ends with when the checkpoint in `ckdir` is not this run's any more.
function M.checkpoint_gone(ckdir)
  return ("nothing is checkpointed: %s no longer holds this run's checkpoint (another run to the "
    .. "same output finished or removed it); run again without --resume"):format(ckdir)
end

--- A finished batch from the checkpoint (`path`, the rows of the starts `list`, `len` entries
-- each, of a table of `n` rows), or nil when there is none. Taken only when its checksum file
-- matches its bytes and `binding` (this run, this batch) and its rows pass `M.check_rows`.
function M.read_batch(path, binding, list, len, n)
  return diversity.checkpoint_read_batch(path, binding, list, len, n)
end

--- The steps so far of an unfinished batch (its .part's checksummed blocks), as {prefix =,
-- have =}, or nil when there are none; its rows must pass `M.check_rows` as well as their
-- checksums.
function M.read_part_rows(path, binding, list, n)
  local prefix, have = diversity.checkpoint_read_part(path, binding, list, n)
  if not prefix then return nil end
  return { prefix = prefix, have = have }
end

return M
