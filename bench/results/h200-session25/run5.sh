#!/bin/bash
# Session 25 run 5: bench/server.py as run 4 with each run's new photo sent as a quality-90 JPEG (a phone's
# photo, a sixth of the PNG's bytes); the trace of the same.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1
mkdir -p $OUT
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$PWD python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD
for enc in prepared dumps prepared dumps; do
  timeout 250 python3 bench/server.py --model /tmp/ck --runs 40 --detail high --photo-format jpeg --client-encode $enc 2>&1 | grep -v -i warn | tail -6 | tee -a $OUT/server-40-jpeg.txt
done
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --photo-format jpeg > $OUT/trace-jpeg.txt 2>&1
sed -n '/^first turn, new photo, through HTTP/,$p' $OUT/trace-jpeg.txt | grep -E "JSON|to_turns|body|route|client|queue|wire|TTFT|^first turn:|^follow-up:"
# The long prefill as 512/1024-row graph steps, the rows' attention on one SDPA backend (prefill_rows_sdpa.py).
for v in "eager" "1024 torch default" "1024 torch efficient" "1024 torch cudnn" "512 torch efficient" "eager"; do
  timeout 100 python3 bench/results/h200-session25/prefill_rows_sdpa.py /tmp/ck .device-in/shared/images/coffee.png $v 2>&1 | grep -v -i "warn\|^ *warnings" | tail -3 | tee -a $OUT/prefill-rows-sdpa.txt
done
