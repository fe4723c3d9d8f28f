#!/bin/bash
# Session 31 H200 run 9: the 2.2B's attention in chunks and tiles of 32 positions against the shipped
# 16 (session 22 measured it 2-3% faster once), alternating, after 58 and 900 prompt tokens.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
B='{"attn_block_t": 32, "attn_min_chunk": 32}'
echo "== 58"
timeout 120 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 58 --out $OUT/run9-2.2b.json --rounds 3 --variants "[{}, $B, {}, $B, {}, $B]" 2>&1 | grep -v -i warn | tail -7
echo "== 900"
timeout 90 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 900 --out $OUT/run9-2.2b-900.json --rounds 3 --variants "[{}, $B, {}, $B]" 2>&1 | grep -v -i warn | tail -5
