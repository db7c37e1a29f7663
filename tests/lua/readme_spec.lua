-- README.md and docs/*.md run as written: every fenced code block is read from the files and
-- executed or checked, so a snippet that stops working fails the suite. Also: no page cites the
-- project's internal documents, every relative link resolves, and docs/cli.md's flag table holds
-- exactly the flags (and metavariables and defaults) of `diversity --help`, which come from the
-- one FLAGS table in lua/diversity/cli.lua.
--
--   ```lua   runs under LuaJIT from the repository root (it may read data/, writes only to
--            temporary files); it must exit 0.
--   ```sh    runs under bash -e from the repository root, with HOME a fresh directory (a
--            `--local` rock goes there) and `diversity` on PATH (lua/diversity/cli.lua); three
--            blocks are not run, named in SKIPPED with the reason.
--   ```rust  a complete program (README.md holds exactly one); scripts/dependent-crate.sh (in
--            scripts/test.sh) builds each as a program of a crate depending on this one and runs
--            it.
--   ```text  after "It prints:", the preceding block's exact output; starting "usage: NAME", the
--            exact `--help` of the command line (`diversity`) or of example NAME; under
--            "## Layout" (docs/architecture.md), a file tree whose every path must exist.
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
  assert(cur == nil, "a code block is not closed")
  return out
end

local REPO = assert(io.popen("pwd")):read("*l")

--- README.md, then docs/*.md in name order: {name, text}.
local function pages()
  local out = { { name = "README.md", text = H.read("README.md") } }
  local ls = assert(io.popen("ls docs/*.md"))
  for path in ls:lines() do out[#out + 1] = { name = path, text = H.read(path) } end
  ls:close()
  assert(#out >= 8, "docs/*.md: expected the seven guides and the environment page")
  return out
end
local PAGES = pages()

describe("README.md and docs/*.md", function()
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
    assert.are.equal(0, rc, ("%s line %d (%s) failed:\n%s%s"):format(b.page, b.line, b.lang, out, err))
    return out
  end

  local function help_of(name)
    local cmd = name == "diversity" and (env() .. " diversity --help")
      or H.q("target/release/examples/" .. name) .. " --help"
    local rc, out, err = H.sh(cmd)
    assert.are.equal(0, rc, name .. " --help: " .. err)
    return out
  end

  it("name no internal documents or issue numbers", function()
    for _, p in ipairs(PAGES) do
      assert.falsy(p.text:find("SPEC", 1, true), p.name .. " cites SPEC")
      assert.falsy(p.text:find("§", 1, true), p.name .. " cites a § section")
      assert.falsy(p.text:lower():find("issue %d"), p.name .. " cites an issue number")
    end
  end)

  it("README.md stays short", function()
    local lines = select(2, PAGES[1].text:gsub("\n", ""))
    assert.is_true(lines <= 300, "README.md has " .. lines .. " lines (at most 300)")
  end)

  it("every relative link resolves", function()
    for _, p in ipairs(PAGES) do
      local dir = p.name:match("^(.*/)") or ""
      for target in p.text:gmatch("%]%(([^)%s]+)%)") do
        if not target:match("^%a+:") then
          local path = target:gsub("#.*$", "")
          if path ~= "" then
            assert.is_true(H.exists(dir .. path), p.name .. " links to " .. target .. ", which does not exist")
          end
        end
      end
    end
  end)

  it("docs/cli.md's flag table is `diversity --help`'s flags, each once", function()
    local help = help_of("diversity")
    local want = {}
    for line in help:gmatch("[^\n]+") do
      local flag, meta = line:match("^  (%-%-[%w-]+) ?(%S*)")
      if flag then
        local default = line:match("%[default: (.*)%]$")
        want[flag] = { meta = meta, default = default or "" }
      end
    end
    local have, rows = {}, 0
    for line in H.read("docs/cli.md"):gmatch("[^\n]+") do
      local flag, meta, default = line:match("^| `(%-%-[%w-]+) ?([^`]*)` |([^|]*)|")
      if flag then
        rows = rows + 1
        assert.is_nil(have[flag], "docs/cli.md: " .. flag .. " has two rows")
        have[flag] = { meta = meta, default = default:match("^%s*(.-)%s*$") }
      end
    end
    assert.is_true(rows > 20, "docs/cli.md: no flag table found")
    for flag, w in pairs(want) do
      assert.are.same(w, have[flag], "docs/cli.md's row for " .. flag .. " (metavariable, default)")
    end
    for flag in pairs(have) do
      assert.is_table(want[flag], "docs/cli.md documents " .. flag .. ", which `diversity --help` lacks")
    end
  end)

  it("every code block runs or matches", function()
    local ran, skipped, rust = 0, 0, 0
    for _, p in ipairs(PAGES) do
     local last_out, readme_rust = nil, 0
     for _, b in ipairs(blocks(p.text)) do
      local where = ("%s line %d"):format(p.name, b.line)
      b.page = p.name
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
        if p.name == "README.md" then readme_rust = readme_rust + 1 end
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
     if p.name == "README.md" then
       assert.are.equal(1, readme_rust, "README.md: one complete Rust program")
     end
    end
    assert.are.equal(#SKIPPED, skipped, "a SKIPPED entry matches no block")
    assert.is_true(rust >= 2, "the Rust programs: README.md's and docs/rust.md's")
    assert.is_true(ran >= 10, "ran only " .. ran .. " blocks")
  end)
end)
