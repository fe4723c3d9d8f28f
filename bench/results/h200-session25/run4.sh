#!/bin/bash
# Session 25 run 4: bench/server.py, in-process side in the server's process, 40 runs a call: the
# client's body prepared, then json.dumps, twice each (30ab573 + cdff7cb).
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1
mkdir -p $OUT
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$PWD python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD
for enc in prepared dumps prepared dumps; do
  timeout 280 python3 bench/server.py --model /tmp/ck --runs 40 --detail high --client-encode $enc 2>&1 | grep -v -i warn | tail -6 | tee -a $OUT/server-40.txt
done
