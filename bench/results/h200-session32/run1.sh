#!/bin/bash
# Session 32 H200 run 1: where a warm process's load to ready goes. A cold process first (fills Triton's
# cache), Triton's key timed alone, then warm processes alternating the real load and one whose Triton key
# comes from a file (a disk cache's effect), then one under py-spy (native stacks, idle included) and one
# under torch.profiler.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
S=bench/results/h200-session32/load_trace.py
nproc; python3 -c "import triton, torch; print(triton.__version__, torch.__version__)"
timeout 100 python3 $S /tmp/ck --tag cold 2>&1 | grep '^{' | tee -a $OUT/run1-load.jsonl
for i in 1 2; do timeout 60 python3 $S /tmp/ck --write-key /tmp/key 2>&1 | grep '^{' | tee -a $OUT/run1-key.jsonl; done
for i in 1 2 3 4; do
  timeout 60 python3 $S /tmp/ck --tag plain 2>&1 | grep '^{' | tee -a $OUT/run1-load.jsonl
  timeout 60 python3 $S /tmp/ck --tag keyfile --key-file /tmp/key 2>&1 | grep '^{' | tee -a $OUT/run1-load.jsonl
done
timeout 120 .device-in/bin/py-spy record --native --idle --threads -r 500 -f raw -o $OUT/run1-pyspy.txt -- python3 $S /tmp/ck --tag pyspy > $OUT/run1-pyspy-log.txt 2>&1
echo "py-spy rc=$?"; tail -3 $OUT/run1-pyspy-log.txt; ls -la $OUT/run1-pyspy.txt 2>/dev/null
timeout 120 python3 $S /tmp/ck --tag torchprof --profile $OUT/run1-trace.json.gz > $OUT/run1-torchprof.txt 2>&1
echo "torchprof rc=$?"; grep '^{' $OUT/run1-torchprof.txt; ls -la $OUT/
