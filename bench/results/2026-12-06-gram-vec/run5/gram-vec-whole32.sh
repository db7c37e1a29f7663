#!/usr/bin/env bash
# Run 5: real31k's whole cache (31,102 × 384 centred fp16, every item's full sequence, the JSON
# cache written, 2 batches) as the `sequences` example runs it, with 32 row values a group at 512
# invocations (.gl/bin/sequences: this tree, the new default) against 16 (.gl/bin/sequences_a8:
# a896ab8), in the order new, a896ab8, new; each cache's bytes before its metadata (written last)
# hashed. GPU machine, repo root, .gl/ carried. $OUT/whole.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/whole.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
python3 bench/make-real31k.py "$T/fortunes.npy" "$T/real31k.npy"
R31=$T/real31k.npy
timeout 60 $B/bench_gram --table "$T/fortunes.npy" --starts 2048 --steps 400 --label warm-up > /dev/null 2>&1
w() { local v=$1 k=$2; echo "== $(date +%T) $v" >> "$L"; /usr/bin/time -v timeout 200 $B/$v --table "$R31" --mode gram --center --precision fp16 --out "$T/$k.json" 2>&1 | grep -E "GPU|Maximum resident|Elapsed" | sed "s/^/$v: /" | tee -a "$L"; python3 -c "
import hashlib,os
f=open('$T/$k.json','rb'); size=os.path.getsize('$T/$k.json')
f.seek(max(0,size-(1<<20))); tail=f.read()
end=size-len(tail)+tail.rindex(b',\\\"metadata\\\":')
f.seek(0); h=hashlib.sha256(); left=end
while left > 0:
    b=f.read(min(left,1<<24)); h.update(b); left-=len(b)
print('$v sequences (the bytes before the metadata): sha256', h.hexdigest(), end, 'bytes')" 2>&1 | tail -1 | tee -a "$L"; rm -f "$T/$k.json"; }
w sequences n1
w sequences_a8 a1
w sequences n2
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
