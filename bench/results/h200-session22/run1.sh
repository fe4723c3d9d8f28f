#!/bin/bash
# Session 22 H200 run 1: the L2 prefetch of a later wave's weight rows (l2_ahead_*), 2.2B and 256M sweeps.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
echo "== CUDA test"; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_triton_cuda.py 2>&1 | tail -3
echo "== PTX with prefetch: $(grep -rl 'prefetch.global.L2' ~/.triton/cache 2>/dev/null | wc -l) files"
A='"l2_ahead_qkv": 4, "l2_ahead_gu": 4, "l2_ahead_down": 3, "l2_ahead_head": 3'
B='"l2_ahead_qkv": 8, "l2_ahead_gu": 8, "l2_ahead_down": 6, "l2_ahead_head": 6'
C='"l2_ahead_qkv": 2, "l2_ahead_gu": 2, "l2_ahead_down": 1.5, "l2_ahead_head": 1.5'
echo "== 2.2B"
timeout 330 python3 bench/decode_step.py --checkpoint /tmp/ck22 --out $OUT/run1-decode-step-2.2b.json --rounds 3 --variants "[{}, {\"l2_ahead_gu\": 4}, {\"l2_ahead_down\": 3}, {\"l2_ahead_qkv\": 4}, {\"l2_ahead_head\": 3}, {$A}, {$B}, {$C}, {}, {$A}]" 2>&1 | grep -v -i warn
echo "== 256M"
timeout 120 python3 bench/decode_step.py --checkpoint /tmp/ck --out $OUT/run1-decode-step-256m.json --rounds 3 --variants "[{}, {$A}, {$C}, {}]" 2>&1 | grep -v -i warn
