#!/bin/bash
# Session 24 run 7: tile keys from the file's digest; traces, bench/server.py, first answers (memory).
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_vision_graphs.py tests/engine/test_prefix_cache.py 2>&1 | tail -2
for r in 1 2; do
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --json $OUT/trace-png-$r.json > $OUT/trace-png-$r.txt 2>&1
sed -n '/^image work/,$p' $OUT/trace-png-$r.txt
grep -E "to_turns|to fit_context|  prefill|TTFT" $OUT/trace-png-$r.txt | head -8
timeout 200 python3 bench/server.py --model /tmp/ck --runs 9 --detail high --client-encode dumps 2>&1 | grep -v -i warn | tail -6 | tee $OUT/server-high-$r.txt
done
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --photo-format jpeg --json $OUT/trace-jpeg.json > $OUT/trace-jpeg.txt 2>&1
grep -E "^first turn:|TTFT" $OUT/trace-jpeg.txt | head -4
timeout 200 python3 bench/first_answers.py --checkpoint /tmp/ck --image .device-in/shared/images/astronaut.png --runs 2 --phases --no-cli --out $OUT/first-256m.json > $OUT/first-256m.txt 2>&1
python3 - $OUT/first-256m.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in (d if isinstance(d, list) else d.get("runs", [d])):
    a = run["answers"]
    print("load_to_ready %.2f s, warmup %.2f s; TTFT ms %s; decode tok/s %s; after load %.1f MiB, answer-1 peak %.1f, process peak %.1f" % (
        run["load_to_ready_s"], run["warmup_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a],
        run["after_load"]["allocated_mib"], a[0]["peak_so_far_mib"], run["peak_allocated_mib"]))
PY
