# Sourced by the bench/h200-*.sh scripts on the GPU machine (repo root, .gl/ carried): installs
# the Vulkan loader from .gl/*.deb, points it at NVIDIA's driver, and unbuffers Python.
# `h200_pack NAME` packs whatever the script leaves under $OUT into NAME.tgz when it exits.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
h200_pack() {
  H200_PACK=$1
  trap '(cd "$OUT" && tar czf "$H200_PACK.tgz" --exclude="$H200_PACK.tgz" -- * && find . -type f ! -name "$H200_PACK.tgz" -delete)' EXIT
}
# `h200_seed_npy DIR`: the PyTorch peer's seed table (8,359 × 768 float32) as DIR/seed.npy.
h200_seed_npy() {
  timeout 60 python3 bench/peer/torch_diversity.py --dump "$1/seed.f32" >/dev/null
  python3 -c "import numpy as np; np.save('$1/seed.npy', np.fromfile('$1/seed.f32', dtype='<f4').reshape(-1, 768))"
}
# `h200_oracle TABLE N LABEL FLAGS...` (needs $B, $T, $OUT): 16 spread full sequences of TABLE
# (N rows) through the `sequences` example with FLAGS, checked by the float64 oracle on the GPU
# (bench/seq_oracle.py); appended to $OUT/oracle.log.
h200_oracle() {
  local tab=$1 n=$2 label=$3; shift 3
  local S; S=$(python3 -c "n=$n; print(','.join(str(i * (n - 1) // 15) for i in range(16)))")
  echo "-- $label: $*" | tee -a "$OUT/oracle.log"
  timeout 120 $B/sequences --table "$tab" --mode gram --starts "$S" "$@" --out "$T/o.json" 2>&1 | tail -1 | tee -a "$OUT/oracle.log"
  local cf=""; for f in "$@"; do case $f in --center) cf="$cf --center";; fp16|fp32) cf="$cf --precision $f";; esac; done
  timeout 300 python3 bench/seq_oracle.py "$tab" "$T/o.json" $cf --device cuda --batch 16 2>&1 | tee -a "$OUT/oracle.log"
}
# `h200_gram_tables DIR`: the gram issue's three tables in DIR: fortunes.npy (14,943 × 384 float32,
# from .gl/data), real31k.npy (bench/make-real31k.py's 31,102 × 384 fp16) and seed.npy (the
# peer's 8,359 × 768); FORT and R31 name the first two (call it unpiped: a pipeline's subshell
# would not keep them).
h200_gram_tables() {
  python3 -c "import numpy as np; np.save('$1/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
  FORT=$1/fortunes.npy
  R31=$1/real31k.npy
  python3 bench/make-real31k.py "$FORT" "$R31"
  h200_seed_npy "$1"
}
