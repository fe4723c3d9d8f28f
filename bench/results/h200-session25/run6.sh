#!/bin/bash
# Session 25 run 6: graph_memory.py at 32 rows (the engine) and 1024 rows (session 24's long-prefill experiment).
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
for r in 32 1024; do
  timeout 120 python3 bench/results/h200-session25/graph_memory.py /tmp/ck .device-in/shared/images/coffee.png $r 2>&1 | grep -v -i "warn" | tee -a $OUT/graph-memory.txt
done
