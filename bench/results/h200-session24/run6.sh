#!/bin/bash
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
IMG=.device-in/shared/images/coffee.png
for v in "eager" "256 torch" "512 torch" "1024 torch" "128 triton" "256 triton" "eager"; do
  timeout 100 python3 bench/results/h200-session24/prefill_rows.py /tmp/ck $IMG $v 2>&1 | grep -v -i "warn\|^ *warnings" | tail -3 | tee -a $OUT/prefill-rows.txt
done
