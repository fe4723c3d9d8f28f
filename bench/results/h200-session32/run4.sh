#!/bin/bash
# Session 32 H200 run 4: the first fused kernel's launch and the first token step timed alone (synchronized) with
# Triton's key hashed in each process and no set-up on the key thread (old), with the key from disk only, and with
# the key from disk plus Triton's driver, backend hash and specialization imports on the key thread (new default),
# alternating fresh processes; then issue 17's first answers (2 processes) and the command line on the new default.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r4; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
IMG=$PWD/.device-in/shared/images/astronaut.png IMG2=$PWD/.device-in/shared/images/coffee.png
S=bench/results/h200-session32/load_trace.py
timeout 100 python3 $S /tmp/ck --tag cold 2>&1 | grep '^{' >> $R/run4-load.jsonl
for i in 1 2 3 4; do
  SMOLCHAT_TRITON_KEY_CACHE=0 timeout 60 python3 $S /tmp/ck --tag old --no-prewarm 2>&1 | grep '^{' >> $R/run4-load.jsonl
  timeout 60 python3 $S /tmp/ck --tag keycache --no-prewarm 2>&1 | grep '^{' >> $R/run4-load.jsonl
  timeout 60 python3 $S /tmp/ck --tag new 2>&1 | grep '^{' >> $R/run4-load.jsonl
done
python3 - $R/run4-load.jsonl <<'PY'
import json, sys, collections
g = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l); g[d["tag"]].append(d)
for tag, ds in g.items():
    print(tag, "ready+ctx", [round(d["load_to_ready_s"] + d["cuda_context_s"], 3) for d in ds])
    for ph in ds[0]["phases_s"]:
        print("   ", ph, [d["phases_s"][ph] for d in ds])
    print("    key thread end", [d["triton_key_thread_end_s"] for d in ds])
    for k in ds[0]["first_calls_s"]:
        print("   ", k, [d["first_calls_s"].get(k) for d in ds])
PY
timeout 400 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 2 --out $R/run4-first-256m.json > $R/run4-first-256m.txt 2>&1
python3 - $R/run4-first-256m.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print("ready %.2f s (warm-up %.2f); TTFT ms %s; decode tok/s %s; answer-1 peak %.1f MiB" % (
        run["load_to_ready_s"], run["warmup_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a],
        a[0]["peak_so_far_mib"]))
for c in d.get("cli", []):
    print("cli", {k: {kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in v.items() if kk in ("ttft_s", "decode_tokens_per_s", "process_wall_s", "prompt_tokens")} for k, v in c.items() if isinstance(v, dict)})
PY
tar czf $OUT/run4.tgz -C $R .
