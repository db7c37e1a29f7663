-- README.md runs as written: every fenced code block is read from the file and executed or
-- checked, so a snippet that stops working fails the suite.
--
--   ```lua   runs under LuaJIT from the repository root (it may read data/, writes only to
--            temporary files); it must exit 0.
--   ```sh    runs under bash -e from the repository root, with HOME a fresh directory (a
--            `--local` rock goes there) and `diversity` on PATH (lua/diversity/cli.lua); three
--            blocks are not run, named in SKIPPED with the reason.
--   ```rust  the one complete program; scripts/dependent-crate.sh (in scripts/test.sh) builds it
--            as a crate depending on this one and runs it.
--   ```text  after "It prints:", the preceding block's exact output; starting "usage: NAME", the
--            exact `--help` of the command line (`diversity`) or of example NAME; under
--            "## Layout", a file tree whose every path must exist.
local H = require "helpers"

-- Blocks not run, each matched by a string it contains, and why.
local SKIPPED = {
  { "bash scripts/test.sh", "the test suite itself (and the demo, which it covers)" },
  { "your_pipeline.lua", "a template: the user's own pipeline" },
  { "contrib/slurm/submit.sh --shards 8", "needs a Slurm cluster: tests/slurm/live.sh runs the recipe on a live single-node Slurm" },
}

--- The fenced blocks of `text`: {lang, body, line, before (the last non-empty line above it),
-- heading (the last ## heading above it)}.
local function blocks(text)
  local out, cur, before, heading, n = {}, nil, "", "", 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if cur then
      if line == "```" then
        out[#out + 1] = cur
        cur = nil
      else
        cur.body = cur.body .. line .. "\n"
      end
    else
      local lang = line:match("^```(.*)$")
      if lang then
        cur = { lang = lang, body = "", line = n, before = before, heading = heading }
      elseif line:match("%S") then
        before = line
        if line:match("^## ") then heading = line end
      end
    end
  end
  assert(cur == nil, "README.md: a code block is not closed")
  return out
end

local README = H.read("README.md")
local REPO = assert(io.popen("pwd")):read("*l")

describe("README.md", function()
  local bin, home
  setup(function()
    bin, home = H.tmpdir(), H.tmpdir()
    -- `diversity`, as the rock installs it, run from this checkout.
    H.write(bin .. "/diversity", ("#!/bin/sh\nLUA_PATH=%s LUA_CPATH=%s exec luajit %s \"$@\"\n")
      :format(H.q(REPO .. "/lua/?.lua;" .. REPO .. "/lua/?/init.lua;;"),
        H.q(REPO .. "/target/lua/?.so;;"), H.q(REPO .. "/lua/diversity/cli.lua")))
    os.execute("chmod +x " .. H.q(bin .. "/diversity"))
  end)
  teardown(function() H.cleanup() end)

  local function env()
    local cargo_home = os.getenv("CARGO_HOME") or (os.getenv("HOME") .. "/.cargo")
    local rustup_home = os.getenv("RUSTUP_HOME") or (os.getenv("HOME") .. "/.rustup")
    return ("%s HOME=%s CARGO_HOME=%s RUSTUP_HOME=%s PATH=%s"):format(H.lua_env(), H.q(home),
      H.q(cargo_home), H.q(rustup_home), H.q(bin .. ":" .. os.getenv("PATH")))
  end

  local function run(b)
    local f = os.tmpname()
    H.write(f, b.body)
    local rc, out, err
    if b.lang == "lua" then
      rc, out, err = H.sh(H.lua_env() .. " luajit " .. H.q(f))
    else
      rc, out, err = H.sh(env() .. " bash -eo pipefail " .. H.q(f))
    end
    os.remove(f)
    assert.are.equal(0, rc, ("README.md line %d (%s) failed:\n%s%s"):format(b.line, b.lang, out, err))
    return out
  end

  local function help_of(name)
    local cmd = name == "diversity" and (env() .. " diversity --help")
      or H.q("target/release/examples/" .. name) .. " --help"
    local rc, out, err = H.sh(cmd)
    assert.are.equal(0, rc, name .. " --help: " .. err)
    return out
  end

  it("names no internal documents or issue numbers", function()
    assert.falsy(README:find("SPEC", 1, true), "README.md cites SPEC")
    assert.falsy(README:find("§", 1, true), "README.md cites a § section")
    assert.falsy(README:lower():find("issue %d"), "README.md cites an issue number")
  end)

  it("every code block runs or matches", function()
    local last_out, ran, skipped, rust = nil, 0, 0, 0
    for _, b in ipairs(blocks(README)) do
      local where = ("README.md line %d"):format(b.line)
      if b.lang == "lua" or b.lang == "sh" then
        local skip
        for _, s in ipairs(SKIPPED) do
          if b.body:find(s[1], 1, true) then skip = s end
        end
        if skip then
          skipped = skipped + 1
          last_out = nil
        else
          last_out = run(b)
          ran = ran + 1
        end
      elseif b.lang == "rust" then
        assert.truthy(b.body:find("\nfn main", 1, true), where .. ": the Rust example has no fn main")
        rust = rust + 1
      elseif b.lang == "text" and b.before == "It prints:" then
        assert.is_string(last_out, where .. ": no block runs before this output")
        assert.are.equal(b.body, last_out, where .. ": the output shown is not what the block prints")
      elseif b.lang == "text" and b.body:match("^usage: ") then
        local name = b.body:match("^usage: (%S+)")
        assert.are.equal(b.body, help_of(name), where .. ": not what `" .. name .. " --help` prints")
      elseif b.lang == "text" and b.heading == "## Layout" then
        for line in b.body:gmatch("[^\n]+") do
          local path = line:match("^(%S+)")
          if path then
            assert.is_true(H.exists(path), where .. ": the layout names " .. path .. ", which does not exist")
          end
        end
      else
        error(where .. ": a ```" .. b.lang .. " block that nothing runs or checks")
      end
    end
    assert.are.equal(#SKIPPED, skipped, "a SKIPPED entry matches no block")
    assert.are.equal(1, rust, "one complete Rust program")
    assert.is_true(ran >= 5, "ran only " .. ran .. " blocks")
  end)
end)
