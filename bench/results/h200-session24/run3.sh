#!/bin/bash
# Session 24 run 3: the trace with the image work split (decode in to_turns against in process), PNG twice.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
for r in 1 2; do
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --json $OUT/trace-png-$r.json > $OUT/trace-png-$r.txt 2>&1
sed -n '/^image work/,$p' $OUT/trace-png-$r.txt
grep -E "to_turns|to fit_context|  prefill|TTFT" $OUT/trace-png-$r.txt | head -8
done
