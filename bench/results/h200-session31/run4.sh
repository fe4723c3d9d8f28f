#!/bin/bash
# Session 31 H200 run 4: the persistent step with twice the bytes in flight (64 KB tiles, spilling) and
# one 64-position tile an attention chunk.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
P='"persistent": true, "p_trace": 2'
Q='"persistent": true'
B='"p_gu_n": 8, "p_down_n": 4, "p_qkv_r": 8, "p_o_n": 16, "p_head_n": 16'
C="[{}, {$P}, {$P, $B}, {$P, \"p_block_t\": 64}, {$P, $B, \"p_block_t\": 64}, {$Q, $B, \"p_block_t\": 64}, {$Q}, {}]"
echo "== 2.2B"
timeout 300 python3 bench/results/h200-session31/persistent_probe.py /tmp/ck22 $OUT/run4-probe-2.2b.json "$C" 2>&1 | grep -v -i warn
