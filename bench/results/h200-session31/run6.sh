#!/bin/bash
# Session 31 H200 run 6: a warm process's load to ready by part, with a cProfile (4 processes; the
# first meets a cold Triton cache).
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
for i in 1 2 3 4; do
  echo "== process $i"
  timeout 100 python3 bench/results/h200-session31/load_profile.py /tmp/ck 2>&1 | grep -v -i warn > $OUT/run6-load-$i.txt
  head -1 $OUT/run6-load-$i.txt
done
sed -n 2,40p $OUT/run6-load-4.txt
