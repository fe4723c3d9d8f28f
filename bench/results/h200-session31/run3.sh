#!/bin/bash
# Session 31 H200 run 3: every program's barrier arrivals and passages (TRACE 2), and polls with back-off.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck22 ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
P='"persistent": true, "p_trace": 2'
Q='"persistent": true'
C="[{}, {$P}, {$P, \"p_sleep\": 200}, {$P, \"p_barrier\": 1, \"p_sleep\": 200}, {$Q}, {$Q, \"p_sleep\": 200}, {$Q, \"p_sleep\": 500}, {$Q, \"p_barrier\": 1, \"p_sleep\": 200}, {$P, \"p_prefetch\": false}]"
echo "== 2.2B"
timeout 220 python3 bench/results/h200-session31/persistent_probe.py /tmp/ck22 $OUT/run3-probe-2.2b.json "$C" 2>&1 | grep -v -i warn
echo "== 256M"
timeout 150 python3 bench/results/h200-session31/persistent_probe.py /tmp/ck $OUT/run3-probe-256m.json "$C" 2>&1 | grep -v -i warn
