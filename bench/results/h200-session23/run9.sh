#!/bin/bash
# Session 23 H200 run 9: the JPEG trace again with photos that are new every run (fresh_photo fixed).
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --photo-format jpeg --json $OUT/run9-trace-jpeg.json > $OUT/run9-trace-jpeg.txt 2>&1
grep -E "to_turns|to fit_context|  prefill|TTFT|^first turn:|^follow-up:" $OUT/run9-trace-jpeg.txt | head -20
