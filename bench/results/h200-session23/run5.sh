#!/bin/bash
# Session 23 H200 run 5: the wide decoder's launch parameters as the 2.2B's default (WIDE_CONFIG),
# against the old values; the Triton decode tests on CUDA.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
echo "== CUDA tests"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_triton_decode.py tests/engine/test_attention_mask.py 2>&1 | tail -3
echo "== 2.2B, WIDE_CONFIG (default) against the old values"
OLD='{"qkv_block_r": 4, "down_block_n": 4, "down_warps": 4}'
timeout 250 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 58 --out $OUT/run5-decode-step-2.2b.json --rounds 3 --variants "[{}, $OLD, {}, $OLD]" 2>&1 | grep -v -i warn | tail -6
timeout 120 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 900 --out $OUT/run5-decode-step-2.2b-900.json --rounds 3 --variants "[{}, $OLD, {}, $OLD]" 2>&1 | grep -v -i warn | tail -6
