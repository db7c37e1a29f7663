set -uo pipefail
source bench/h200-env.sh
B=.gl/bin T=$(mktemp -d)
python3 bench/make-real31k.py .gl/data/fortunes-minilm.f32 "$T/r31.npy" >/dev/null
timeout 200 $B/bench_grow --table "$T/r31.npy" --top-k 100 --label "GPU, 1% appended"
timeout 250 $B/bench_grow --table "$T/r31.npy" --top-k 100 --device host --label "host engine, 1% appended"
nvidia-smi --query-gpu=clocks.sm --format=csv,noheader
