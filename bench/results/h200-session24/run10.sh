#!/bin/bash
# Session 24 run 10 (final): CUDA tests; first answers before (2820d28) and after (HEAD) alternating; traces; bench/server.py.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$PWD python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
PYTHONPATH=/tmp/site:$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_vision_graphs.py tests/engine/test_attention_mask.py tests/engine/test_static_decode.py tests/engine/test_warmup.py tests/engine/test_resample.py -k "not rocket" 2>&1 | tail -1 | tee $OUT/tests.txt
IMG=$PWD/.device-in/shared/images/astronaut.png
summ() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print(sys.argv[2], "ready %.2f s (warm-up %.2f); TTFT ms %s; decode tok/s %s; answer-1 phases %s; answer-1 peak %.1f MiB, process peak %.1f" % (
        run["load_to_ready_s"], run["warmup_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a],
        {k: round(v * 1e3, 1) for k, v in a[0]["phases"].items() if not k.endswith("calls")}, a[0]["peak_so_far_mib"], run["peak_allocated_mib"]))
PY
}
for r in 1 2; do
  (cd .device-in/base && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --runs 1 --phases --no-cli --out $OUT/first-before-$r.json > /dev/null 2>&1); summ $OUT/first-before-$r.json "before-$r" | tee -a $OUT/first-ab.txt
  PYTHONPATH=/tmp/site:$PWD timeout 100 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --runs 1 --phases --no-cli --out $OUT/first-after-$r.json > /dev/null 2>&1; summ $OUT/first-after-$r.json "after-$r" | tee -a $OUT/first-ab.txt
done
export PYTHONPATH=/tmp/site:$PWD
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --json $OUT/trace-png.json > $OUT/trace-png.txt 2>&1
sed -n '/^image work/,$p' $OUT/trace-png.txt; grep -E "TTFT|  prefill" $OUT/trace-png.txt | head -5
timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --photo-format jpeg --json $OUT/trace-jpeg.json > $OUT/trace-jpeg.txt 2>&1
grep -E "^first turn:|TTFT" $OUT/trace-jpeg.txt | head -4
timeout 200 python3 bench/server.py --model /tmp/ck --runs 9 --detail high --client-encode dumps 2>&1 | grep -v -i warn | tail -6 | tee $OUT/server-high.txt
