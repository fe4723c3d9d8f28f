#!/bin/bash
# Session 24 run 9: first answers (astronaut, 17 tiles) before (caa3b26, torch resampling) and after (Triton), alternating.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$PWD python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
IMG=$PWD/.device-in/shared/images/astronaut.png
summ() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print(sys.argv[2], "ready %.2f s; TTFT ms %s; answer-1 phases %s; peak %.1f" % (run["load_to_ready_s"], [round(x["ttft_s"] * 1e3, 1) for x in a],
        {k: round(v * 1e3, 1) for k, v in a[0]["phases"].items() if not k.endswith("calls")}, a[0]["peak_so_far_mib"]))
PY
}
for r in 1 2; do
  (cd .device-in/base2 && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --runs 1 --phases --no-cli --out $OUT/base-$r.json > /dev/null 2>&1); summ $OUT/base-$r.json "before-$r" | tee -a $OUT/ab.txt
  PYTHONPATH=/tmp/site:$PWD timeout 100 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --runs 1 --phases --no-cli --out $OUT/new-$r.json > /dev/null 2>&1; summ $OUT/new-$r.json "after-$r" | tee -a $OUT/ab.txt
done
