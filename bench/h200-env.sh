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
# `h200_scan_rows DIR FN`: the tensor-core scan issue's three workloads, each table made in DIR
# by the torch peer's generator and removed after: FN TABLE DIM STARTS STEPS CHUNK LABEL for the
# seed (8,359 × 768, 3,584 × 500), N = 65,536 × 768 (3,584 × 500) and N = 1,048,576 × 384
# (1,024 × 100), in that order. (The run records under bench/results/ before it each spell
# these out.)
h200_scan_rows() {
  local dir=$1 fn=$2
  timeout 60 python3 bench/peer/torch_diversity.py --dump "$dir/seed.f32" >/dev/null
  "$fn" "$dir/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
  timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$dir/n.f32" >/dev/null
  "$fn" "$dir/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
  rm -f "$dir/n.f32"
  timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$dir/big.f32" >/dev/null
  "$fn" "$dir/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
  rm -f "$dir/big.f32"
}
