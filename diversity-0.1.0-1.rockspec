-- `luarocks --lua-version=5.1 make` (from a clone) builds the LuaJIT module with cargo and installs
-- it, the Lua files and the `diversity` command. LuaJIT is the interpreter: with Lua 5.1 as the
-- version, Debian's luarocks picks `luajit` when no `lua5.1` is installed (`luarocks
-- --lua-version=5.1 config lua_interpreter` says which).
rockspec_format = "3.0"
package = "diversity"
-- The crate's version (Cargo.toml) and a rockspec revision; scripts/rock.sh checks they agree.
version = "0.1.0-1"
source = {
   url = "git+https://example.invalid/diversity.git",
}
description = {
   summary = "Diversity sequences, similarity rankings and exact k-NN on any Vulkan device, for LuaJIT",
   detailed = [[
A Rust module that LuaJIT loads with require "diversity": diversity sequences (scan and gram
engines), similarity rankings, exact k-NN, several devices, shard and merge, computed by Vulkan
compute shaders on a GPU or on Mesa's lavapipe. Also installs require "vk_compute" (the old C
wrapper's API), require "diversity.driver" and the `diversity` command line.]],
   license = "MIT OR Apache-2.0",
}
dependencies = {
   "lua == 5.1",
}
build = {
   type = "command",
   -- cargo build --release --features lua, then a copy named as require wants it
   -- (target/lua/diversity.so); a fixed target directory whatever the caller's CARGO_TARGET_DIR.
   build_command = "CARGO_TARGET_DIR=target bash scripts/build-lua.sh",
   install = {
      lib = { diversity = "target/lua/diversity.so" },
      lua = {
         ["diversity.driver"] = "lua/diversity/driver.lua",
         -- the driver's pieces, re-exported by diversity.driver
         ["diversity.driver.options"] = "lua/diversity/driver/options.lua",
         ["diversity.driver.checkpoint"] = "lua/diversity/driver/checkpoint.lua",
         ["diversity.driver.progress"] = "lua/diversity/driver/progress.lua",
         ["diversity.driver.schedule"] = "lua/diversity/driver/schedule.lua",
         ["diversity.cli"] = "lua/diversity/cli.lua",
         -- LuaLS ---@meta stubs of the module (docs/lua.md): read by editors, never run.
         ["diversity.types"] = "lua/diversity/types.lua",
         vk_compute = "lua/vk_compute.lua",
      },
      bin = { diversity = "lua/diversity/cli.lua" },
   },
}
