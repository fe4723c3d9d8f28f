#!/bin/bash
# Session 31 H200 run 8: run 5 with Python's bytecode cache in a writable place (PYTHONPYCACHEPREFIX), as a user's
# installed app has it; the first process meets cold Triton and bytecode caches.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
( touch engine/.w 2>/dev/null && rm engine/.w && echo "tree writable" ) || echo "tree read-only"; ls engine/__pycache__ 2>/dev/null | head -2
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
IMG=$PWD/.device-in/shared/images/astronaut.png
summ() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print(sys.argv[2], "ready %.2f s (warm-up %.2f); TTFT ms %s; decode tok/s %s; answer-1 peak %.1f MiB, process peak %.1f" % (
        run["load_to_ready_s"], run["warmup_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a],
        a[0]["peak_so_far_mib"], run["peak_allocated_mib"]))
for c in d.get("cli", []):
    print(sys.argv[2], "cli", json.dumps(c)[:300])
PY
}
timeout 200 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $PWD/.device-in/shared/images/coffee.png --runs 4 --no-cli --out $OUT/run8-first-256m.json > $OUT/run8-first-256m.txt 2>&1
summ $OUT/run8-first-256m.json first
