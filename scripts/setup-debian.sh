#!/usr/bin/env bash
# Installs what building and testing `diversity` needs on Debian 12, quietly and idempotently:
# Mesa's lavapipe (a Vulkan device on the CPU), the Vulkan loader and validation layers,
# shaderc/glslang/SPIRV-Tools to compile the shaders at build time, LuaJIT with busted for the
# Lua module and its tests, luarocks for the rock (python3 checks JSON in the Lua specs), and Slurm
# with munge for the live test of the Slurm recipe. Needs root for apt-get; does nothing when
# everything is already there. Rust itself comes from rustup (see README.md).
set -euo pipefail
PACKAGES=(
  mesa-vulkan-drivers libvulkan1 libvulkan-dev vulkan-tools vulkan-validationlayers
  libshaderc-dev glslang-dev spirv-tools g++ pkg-config  # g++ also brings cc and nm (tests/capi.rs)
  luajit libluajit-5.1-dev lua-busted luarocks python3 fonts-dejavu-core util-linux
  slurmctld slurmd slurm-client munge  # the live Slurm test (tests/slurm/live.sh)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  for c in "$HOME/.cargo/bin/cargo" /usr/local/cargo/bin/cargo; do
    [ -x "$c" ] && export PATH="$(dirname "$c"):$PATH" && break
  done
fi
command -v cargo >/dev/null 2>&1 || {
  echo "error: cargo not found. Install Rust (1.88 or newer) with rustup: https://rustup.rs" >&2
  exit 1
}
