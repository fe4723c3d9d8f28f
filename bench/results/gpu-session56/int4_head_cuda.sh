#!/bin/bash
# Session 56: int4 on CUDA with its 4-bit lm_head against an int8 one (int4_head_cuda.py). The GGUF
# (98 MB) travels in two halves: .gg-a in a first call (`cp .gg-a/part0 /tmp/part0`), .gg-b in this one
# (64 MiB a call).
cd "$(dirname "$0")/../../.."
cat /tmp/part0 .gg-b/part1 > /tmp/smollm2.gguf  # /tmp/part0: copied there by a first call
export PYTHONPATH=$PWD:$PWD/.gg-b/py PYTHONUNBUFFERED=1 SMOLCHAT_GGUF_CACHE=/tmp/gguf-cache
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
timeout 500 python3 bench/results/gpu-session56/int4_head_cuda${RUN:-}.py /tmp/smollm2.gguf .gg-b/apache-2.0.txt .gg-b/gpl-3.0.txt \
    > $OUT/int4-head-cuda${RUN:-}.json 2> $OUT/int4-head-cuda${RUN:-}.txt
echo "rc=$?"; tail -c 3000 $OUT/int4-head-cuda${RUN:-}.txt; cat $OUT/int4-head-cuda${RUN:-}.json
