#!/bin/bash
# Session 24 H200/H100 run 1: CUDA tests of the vision graphs, GQA flash and the capture refactor; the
# vision + prefill phase before (2820d28, .device-in/base) and after, alternating; bench/server.py.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$PWD python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m pytest -q -p no:cacheprovider -x tests/engine/test_vision_graphs.py tests/engine/test_attention_mask.py tests/engine/test_static_decode.py tests/engine/test_warmup.py 2>&1 | tail -15 | tee $OUT/tests.txt
IMG=.device-in/shared/images/coffee.png
for round in 1 2; do
  (cd .device-in/base && PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../../bench/results/h200-session24/phase_split.py /tmp/ck ../../$IMG base-$round 2>&1 | grep -v -i warn) | tee -a $OUT/phase.txt
  PYTHONPATH=/tmp/site:$PWD timeout 120 python3 bench/results/h200-session24/phase_split.py /tmp/ck $IMG new-$round 2>&1 | grep -v -i warn | tee -a $OUT/phase.txt
done
PYTHONPATH=/tmp/site:$PWD timeout 200 python3 bench/server.py --model /tmp/ck --runs 9 --detail high --client-encode dumps 2>&1 | grep -v -i warn | tail -8 | tee $OUT/server-high.txt
