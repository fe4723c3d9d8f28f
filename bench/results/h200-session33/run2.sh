#!/bin/bash
# Session 33 H200 run 2: which start-up work holds the GIL (gil_probe.py: torch's CUDA init, the driver's init
# through ctypes first, that started before `import torch`, the tokenizer, Triton's key thread), then the load
# with and without gc.freeze() in ABBA order (load_parts.py).
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r2; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
D=bench/results/h200-session33
timeout 120 python3 $D/load_parts.py /tmp/ck --tag cold 2>$R/cold.err | grep '^{' >> $R/run2-parts.jsonl
for i in 1 2 3; do
  for v in torch ctypes early; do timeout 60 python3 $D/gil_probe.py $v 2>>$R/err.txt | grep '^{' >> $R/run2-gil.jsonl; done
done
for i in 1 2; do
  timeout 60 python3 $D/gil_probe.py tokenizer /tmp/ck 2>>$R/err.txt | grep '^{' >> $R/run2-gil.jsonl
  timeout 60 python3 $D/gil_probe.py triton 2>>$R/err.txt | grep '^{' >> $R/run2-gil.jsonl
done
cat $R/run2-gil.jsonl
for order in "base freeze" "freeze base" "base freeze" "freeze base"; do
  for g in $order; do timeout 60 python3 $D/load_parts.py /tmp/ck --tag $g --gc $g 2>>$R/err.txt | grep '^{' >> $R/run2-parts.jsonl; done
done
python3 $D/parts_summary.py $R/run2-parts.jsonl > $R/run2-summary.txt 2>&1
grep -A3 "^==" $R/run2-summary.txt
tar czf $OUT/run2.tgz -C $R .
