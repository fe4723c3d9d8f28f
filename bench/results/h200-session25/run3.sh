#!/bin/bash
# Session 25 run 3: bench/server.py with the in-process side in the server's process (--reference server),
# the client's body prepared / json.dumps / httpx json=; the old reference once; server_trace before
# (88776e7, .device-in/base) and after (the digest beside the decode).
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1
mkdir -p $OUT
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$PWD python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD
B="timeout 200 python3 bench/server.py --model /tmp/ck --runs 15 --detail high"
for enc in prepared dumps prepared dumps httpx; do
  $B --client-encode $enc 2>&1 | grep -v -i warn | tail -6 | tee -a $OUT/server-same-process.txt
done
$B --client-encode dumps --reference bench 2>&1 | grep -v -i warn | tail -6 | tee -a $OUT/server-bench-process.txt
(cd .device-in/base && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps > $OUT/trace-before.txt 2>&1)
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps > $OUT/trace-after.txt 2>&1
for f in before after; do echo "== $f"; sed -n '/^first turn, new photo, through HTTP/,/TTFT (server/p' $OUT/trace-$f.txt | grep -E "to_turns|body|route|client|queue|wire"; sed -n '/^image work/,$p' $OUT/trace-$f.txt; done
