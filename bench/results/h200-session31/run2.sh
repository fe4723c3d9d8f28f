#!/bin/bash
# Session 31 H200 run 2: the persistent step's phases (program 0's barrier times), its barriers alone
# (no work), and the two barrier kinds; 2.2B and 256M shapes.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
P='"persistent": true, "p_trace": true'
C="[{}, {$P}, {$P, \"p_barrier\": 1}, {$P, \"p_work\": false}, {$P, \"p_work\": false, \"p_barrier\": 1}, {$P, \"p_warps\": 4, \"p_qkv_r\": 2, \"p_o_n\": 4, \"p_gu_n\": 2, \"p_down_n\": 1, \"p_head_n\": 4}, {}]"
echo "== 2.2B"
timeout 200 python3 bench/results/h200-session31/persistent_probe.py /tmp/ck22 $OUT/run2-probe-2.2b.json "$C" 2>&1 | grep -v -i warn
echo "== 256M"
timeout 150 python3 bench/results/h200-session31/persistent_probe.py /tmp/ck $OUT/run2-probe-256m.json "$C" 2>&1 | grep -v -i warn
