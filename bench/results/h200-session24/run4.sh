#!/bin/bash
# Session 24 run 4: the vision + prefill phase on the main thread, a worker thread, beside an asyncio loop.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
timeout 200 python3 bench/results/h200-session24/thread_split.py /tmp/ck .device-in/shared/images/coffee.png 2>&1 | grep -v -i warn | tee $OUT/thread-split.txt
