source bench/h200-env.sh
gunzip -f .gl/bin/cm2_probe.gz; chmod +x .gl/bin/cm2_probe
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv
quiet() { grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties"; }
A="256:256:128:64:0 256:256:128:64:11 256:256:128:64:12 256:256:128:64:4 256:256:128:64:13 256:128:128:64:11 256:256:128:32:11"
timeout 100 $P $S 3584 8359 768 40 $A 2>&1 | quiet
CM2_STREAM=.gl/cm2_stream.spv timeout 100 $P $S 3584 8359 768 40 256:256:128:64:13 2>&1 | quiet
timeout 100 $P $S 1024 1048576 384 8 $A 2>&1 | quiet
CM2_STREAM=.gl/cm2_stream.spv timeout 100 $P $S 1024 1048576 384 8 256:256:128:64:13 2>&1 | quiet
