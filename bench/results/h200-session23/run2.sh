#!/bin/bash
# Session 23 H200 run 2: where the 2.2B decode step's time goes (each kernel kind emptied, or all but one).
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
timeout 500 python3 bench/results/h200-session23/step_parts2.py /tmp/ck22 58 64 ",attn_kernel,rows_attn_merge_kernel,qkv_rope_kernel,gemv_residual_kernel,norm_gate_up_kernel,head_argmax_kernel,only:norm_gate_up_kernel,only:gemv_residual_kernel,only:qkv_rope_kernel,only:attn_kernel,only:none," 2>&1 | grep -v -i warn | tee $OUT/run2-step-parts-2.2b.txt
