#!/bin/bash
# Session 23 H200 run 1: the first turn's HTTP share with the client's JSON encoding split out
# (bench/server_trace.py), PNG twice and JPEG; the 2.2B step's o_proj rows per program.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
IM=.device-in/shared/images
for t in png-1 jpeg-1 png-2; do
fmt=${t%-*}
echo "== trace, $t"
timeout 150 python3 bench/server_trace.py --model /tmp/ck --image $IM/coffee.png --runs 16 --client-encode dumps --photo-format $fmt --json $OUT/run1-trace-$t.json > $OUT/run1-trace-$t.txt 2>&1
grep -E "client's JSON|client -> server|body  |route|queue|to the wire|server -> client|^first turn:|^follow-up:" $OUT/run1-trace-$t.txt | head -20
done
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
echo "== 2.2B, o_proj rows"
timeout 200 python3 bench/decode_step.py --checkpoint /tmp/ck22 --prompt-tokens 58 --out $OUT/run1-decode-step-2.2b.json --rounds 3 --variants '[{}, {"o_block_n": 4}, {"o_block_n": 2}, {"o_block_n": 4, "o_warps": 2}, {"o_block_n": 16}, {}]' 2>&1 | grep -v -i warn | tail -12
