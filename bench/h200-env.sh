# Sourced by the bench/h200-*.sh scripts on the GPU machine (repo root, .gl/ carried): installs
# the Vulkan loader from .gl/*.deb, points it at NVIDIA's driver, and unbuffers Python.
# `h200_pack NAME` packs whatever the script leaves under $OUT into NAME.tgz when it exits.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
h200_pack() {
  H200_PACK=$1
  trap '(cd "$OUT" && tar czf "$H200_PACK.tgz" --exclude="$H200_PACK.tgz" -- * && find . -type f ! -name "$H200_PACK.tgz" -delete)' EXIT
}
