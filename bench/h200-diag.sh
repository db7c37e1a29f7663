# Quick same-bits check of the tensor-core scan against Block128 (1,024 sequences × 300 steps of
# the peer table), the scalar stand-in on the GPU, and wider bounds.
source "$(dirname "$0")/h200-env.sh"
T=$(mktemp -d)
python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" >/dev/null
B=.gl/bin/bench
A="--table $T/seed.f32 --dim 768 --starts 1024 --steps 300 --chunk 50 --shapes untiled --quick"
for b in ${BINS:-bench}; do echo $b; .gl/bin/$b $A --kernels block128,coopmat "$@" 2>&1 | grep -E "coopmat|block128|differs|phases|probe"; done
