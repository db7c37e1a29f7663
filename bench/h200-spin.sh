source bench/h200-env.sh
h200_pack spin
F=.gl/data/fortunes-minilm.npy
for s in 0 2000; do
  echo "== DIVERSITY_SPIN_US=$s"
  DIVERSITY_SPIN_US=$s DIVERSITY_IVF_TIMES=1 timeout 60 .gl/bin/bench_ivf --table $F --dim 384 --queries tail:1000 --k 10 --metric cosine --nlist 118 --nprobe 1,32 --iters 2 --no-full 2>&1 | grep -E "^exact|^  (upload|coarse|s.run|s.down|end)|^nprobe" | tail -14
done
