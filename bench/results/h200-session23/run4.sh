#!/bin/bash
# Session 23 H200 run 4: qkv rows 2 / down rows 1 with 8 warps in the real token loop, 2.2B and 256M.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
V='[{}, {"qkv_block_r": 2, "down_block_n": 1, "down_warps": 8}, {"qkv_block_r": 2}, {"down_block_n": 1, "down_warps": 8}, {}, {"qkv_block_r": 2, "down_block_n": 1, "down_warps": 8}]'
echo "== 2.2B"
timeout 250 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 58 --out $OUT/run4-decode-step-2.2b.json --rounds 3 --variants "$V" 2>&1 | grep -v -i warn | tail -8
echo "== 256M"
timeout 250 python3 bench/decode_step.py --checkpoint /tmp/ck --prompt-tokens 58 --out $OUT/run4-decode-step-256m.json --rounds 3 --variants "$V" 2>&1 | grep -v -i warn | tail -8
