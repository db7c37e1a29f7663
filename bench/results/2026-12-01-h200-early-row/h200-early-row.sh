set -uo pipefail
source bench/h200-env.sh
B=.gl/bin; T=$(mktemp -d)
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
python3 bench/make-real31k.py "$T/fortunes.npy" "$T/real31k.npy" > /dev/null
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$T/real31k.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
timeout 100 $B/bench_gram --table "$T/real31k.npy" --center --precisions fp16 --starts 2048 --compensated 0 --judge 1 --judge-variants c,late --label "real31k 2048 full" 2>&1 | tee -a $OUT/early.log
timeout 100 $B/bench_gram --table "$T/fortunes.npy" --center --precisions fp16 --compensated 1,0 --judge 1 --judge-variants c,late --label "fortunes whole" 2>&1 | tee -a $OUT/early.log
timeout 60 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1 --judge 1 --judge-variants c,late --label "peer whole" 2>&1 | tee -a $OUT/early.log
