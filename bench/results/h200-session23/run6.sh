#!/bin/bash
# Session 23 H200 run 6: the committed trace (6d26e10) once more with the PNG photo, and bench/server.py.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --json $OUT/run6-trace-png.json > $OUT/run6-trace-png.txt 2>&1
grep -E "client's JSON|client -> server|body  |route|queue|to the wire|server -> client|^first turn:|^follow-up:" $OUT/run6-trace-png.txt | head -20
timeout 200 python3 bench/server.py --model /tmp/ck --runs 9 --detail high --client-encode dumps 2>&1 | grep -v -i warn | tail -6 | tee $OUT/run6-server-high.txt
