#!/bin/bash
# Session 33 H200 run 1: the load's calls and the garbage collector's share of them (load_parts.py), one cold
# process then 5 x (collector as is, gc.freeze() before the load) alternating; py-spy off.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r1; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
S=bench/results/h200-session33/load_parts.py
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $R/gpu.txt 2>&1
python3 -c "import sys, torch, triton; print(sys.version, torch.__version__, triton.__version__)" >> $R/gpu.txt 2>&1
timeout 120 python3 $S /tmp/ck --tag cold 2>$R/cold.err | grep '^{' >> $R/run1-parts.jsonl
for i in 1 2 3 4 5; do
  timeout 60 python3 $S /tmp/ck --tag base --gc base 2>>$R/err.txt | grep '^{' >> $R/run1-parts.jsonl
  timeout 60 python3 $S /tmp/ck --tag freeze --gc freeze 2>>$R/err.txt | grep '^{' >> $R/run1-parts.jsonl
done
python3 bench/results/h200-session33/parts_summary.py $R/run1-parts.jsonl > $R/run1-summary.txt 2>&1
cat $R/run1-summary.txt
tar czf $OUT/run1.tgz -C $R .
