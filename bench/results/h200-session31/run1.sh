#!/bin/bash
# Session 31 H200 run 1: the token step as one persistent kernel against the six kernels a layer,
# 2.2B and 256M shapes (bench/decode_step.py: token loop, graph replay, greedy agreement).
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
P='"persistent": true'
S='"p_warps": 16, "p_qkv_r": 2, "p_o_n": 4, "p_gu_n": 2, "p_down_n": 1, "p_head_n": 4'
V="[{}, {$P}, {$P, $S}, {$P, \"p_prefetch\": false}, {$P, \"p_min_chunk\": 16}, {}, {$P}]"
echo "== 2.2B, 58"
timeout 200 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 58 --out $OUT/run1-2.2b.json --rounds 3 --variants "$V" 2>&1 | grep -v -i warn | tail -9
echo "== 256M, 58"
timeout 120 python3 bench/decode_step.py --checkpoint /tmp/ck --prompt-tokens 58 --out $OUT/run1-256m.json --rounds 3 --variants "$V" 2>&1 | grep -v -i warn | tail -9
echo "== 2.2B, 900"
V="[{}, {$P}, {$P, \"p_min_chunk\": 128}, {$P, \"p_min_chunk\": 32}]"
timeout 150 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 900 --out $OUT/run1-2.2b-900.json --rounds 3 --variants "$V" 2>&1 | grep -v -i warn | tail -6
