#!/bin/bash
# Session 24 run 2: with the vision graphs (b0cbbee) and GQA flash (c89ac11): does GQA flash engage; the
# server trace (PNG, JPEG); bench/server.py twice; bench/first_answers.py on the 256M.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
python3 -c "
import torch
from engine.layers.attention import _flash_ok
q = torch.zeros(1, 9, 900, 64, device='cuda', dtype=torch.bfloat16); k = torch.zeros(1, 3, 900, 64, device='cuda', dtype=torch.bfloat16)
print('GQA flash engages:', _flash_ok(q, k, k, gqa=True))" | tee $OUT/gqa.txt
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --json $OUT/trace-png.json > $OUT/trace-png.txt 2>&1
grep -E "client's JSON|client -> server|body  |route|to_turns|queue|to fit_context|  prefill|to the wire|server -> client|TTFT|^first turn:|^follow-up:" $OUT/trace-png.txt | head -24
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --photo-format jpeg --json $OUT/trace-jpeg.json > $OUT/trace-jpeg.txt 2>&1
grep -E "^first turn:|^follow-up:" $OUT/trace-jpeg.txt
for r in 1 2; do
timeout 200 python3 bench/server.py --model /tmp/ck --runs 9 --detail high --client-encode dumps 2>&1 | grep -v -i warn | tail -6 | tee $OUT/server-high-$r.txt
done
timeout 200 python3 bench/first_answers.py --checkpoint /tmp/ck --image .device-in/shared/images/coffee.png --runs 2 --phases --no-cli --out $OUT/first-256m.json 2>&1 | grep -v -i warn | tail -25 | tee $OUT/first-256m.txt
