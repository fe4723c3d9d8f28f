#!/bin/bash
# Session 22 H200 run 2: attention chunking for the 2.2B shape (32 KV heads: fewer, longer chunks?).
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
for P in 58 900; do
echo "== 2.2B, $P-token prompt"
timeout 250 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens $P --out $OUT/run2-decode-step-2.2b-$P.json --rounds 3 --variants '[{}, {"attn_min_chunk": 32}, {"attn_min_chunk": 64}, {"attn_max_splits": 8}, {"attn_min_chunk": 32, "attn_block_t": 32}, {"attn_max_splits": 4, "attn_block_t": 32}, {"attn_merge_kernel": false}, {}]' 2>&1 | grep -v -i warn
done
