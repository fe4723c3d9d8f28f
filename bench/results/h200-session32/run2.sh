#!/bin/bash
# Session 32 H200 run 2: issue 17's first answers with Triton's key kept on disk (engine/models/llama/triton_key.py)
# against computed in each process (SMOLCHAT_TRITON_KEY_CACHE=0), alternating fresh processes after a cold
# one; the command line once; one load under py-spy (Python stacks, idle included), summarized here.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
IMG=$PWD/.device-in/shared/images/astronaut.png IMG2=$PWD/.device-in/shared/images/coffee.png
summ() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print(sys.argv[2], "ready %.2f s (warm-up %.2f); TTFT ms %s; decode tok/s %s; answer-1 peak %.1f MiB" % (
        run["load_to_ready_s"], run["warmup_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a],
        a[0]["peak_so_far_mib"]))
for c in d.get("cli", []):
    print(sys.argv[2], "cli", json.dumps(c)[:300])
PY
}
F="bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 1"
timeout 200 python3 $F --no-cli --out $OUT/run2-cold.json > $OUT/run2-cold.txt 2>&1; summ $OUT/run2-cold.json cold
ls ~/.cache/Smolchat/triton-key/ && cat ~/.cache/Smolchat/triton-key/*.json | cut -c1-120
for i in 1 2 3 4; do
  SMOLCHAT_TRITON_KEY_CACHE=0 timeout 200 python3 $F --no-cli --out $OUT/run2-hash-$i.json > $OUT/run2-hash-$i.txt 2>&1; summ $OUT/run2-hash-$i.json "hashed $i"
  timeout 200 python3 $F --no-cli --out $OUT/run2-keycache-$i.json > $OUT/run2-keycache-$i.txt 2>&1; summ $OUT/run2-keycache-$i.json "key cache $i"
done
timeout 300 python3 $F --out $OUT/run2-cli.json > $OUT/run2-cli.txt 2>&1; summ $OUT/run2-cli.json "with cli"
timeout 120 .device-in/bin/py-spy record --idle --threads -r 1000 -f raw -o /tmp/pyspy.txt -- python3 bench/results/h200-session32/load_trace.py /tmp/ck --tag pyspy > $OUT/run2-pyspy-log.txt 2>&1
grep '^{' $OUT/run2-pyspy-log.txt; python3 bench/results/h200-session32/pyspy_summary.py /tmp/pyspy.txt > $OUT/run2-pyspy-summary.txt; head -60 $OUT/run2-pyspy-summary.txt | cut -c1-160
