#!/usr/bin/env bash
# Run 3: real31k's whole cache (31,102 × 384 centred fp16, every item's full sequence, the JSON
# cache written) as the `sequences` example runs it: .gl/bin/sequences_head (1606333, HEAD before
# the ivec4 row loads) and .gl/bin/sequences (this tree), in the order head, new, new, head; each
# cache's bytes before its metadata object (written last) hashed (the same sequences give the same bytes). Then
# the peer table at 512 invocations (new build).
# GPU machine, repo root, .gl/ carried. $OUT/whole.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/whole.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
h200_gram_tables "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 2048 --steps 400 --label warm-up > /dev/null 2>&1
w() { local v=$1 k=$2; echo "== $(date +%T) $v" >> "$L"; /usr/bin/time -v timeout 200 $B/$v --table "$R31" --mode gram --center --precision fp16 --out "$T/$k.json" 2>&1 | grep -E "GPU|Maximum resident|Elapsed" | sed "s/^/$v: /" | tee -a "$L"; python3 -c "
import hashlib,os
f=open('$T/$k.json','rb'); size=os.path.getsize('$T/$k.json')
f.seek(max(0,size-(1<<20))); tail=f.read()
end=size-len(tail)+tail.rindex(b',\\\"metadata\\\":')
f.seek(0); h=hashlib.sha256(); left=end
while left > 0:
    b=f.read(min(left,1<<24)); h.update(b); left-=len(b)
print('$v sequences (the bytes before the metadata): sha256', h.hexdigest(), end, 'bytes')" 2>&1 | tail -1 | tee -a "$L"; rm -f "$T/$k.json"; }
w sequences_head h1
w sequences n1
w sequences n2
w sequences_head h2
timeout 60 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --wg 256,512 --label "peer wg" 2>&1 | grep -E "GPU .* s " | tee -a "$L"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
