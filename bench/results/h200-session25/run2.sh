#!/bin/bash
# Session 25 run 2: bench/server.py (9 runs) twice and server_trace.py (16 runs, PNG) on HEAD as it is.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
for r in 1 2; do
timeout 200 python3 bench/server.py --model /tmp/ck --runs 9 --detail high --client-encode dumps 2>&1 | grep -v -i warn | tail -6 | tee $OUT/server-high-$r.txt
done
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --json $OUT/trace-png.json > $OUT/trace-png.txt 2>&1
tail -32 $OUT/trace-png.txt
