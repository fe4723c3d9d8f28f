#!/bin/bash
# Session 23 H200 run 3: each 2.2B GEMV kind's launch parameters with the other kinds emptied.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
cp bench/results/h200-session23/step_sweep.py $OUT/
timeout 560 python3 bench/results/h200-session23/step_sweep.py /tmp/ck22 $OUT/run3-step-sweep-2.2b.json 2>&1 | grep -v -i warn | tee $OUT/run3-step-sweep-2.2b.txt
