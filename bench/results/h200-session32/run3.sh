#!/bin/bash
# Session 32 H200 run 3: the load's phases with Triton's key hashed in each process (old), kept on disk, and kept
# on disk with Triton's driver and backend set up on the key thread (new default), alternating fresh processes;
# issue 17's first answers old against new; one new load under py-spy (200 Hz). Outputs in one tarball.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r3; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
IMG=$PWD/.device-in/shared/images/astronaut.png IMG2=$PWD/.device-in/shared/images/coffee.png
S=bench/results/h200-session32/load_trace.py
summ() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print(sys.argv[2], "ready %.2f s (warm-up %.2f); TTFT ms %s; decode tok/s %s; answer-1 peak %.1f MiB" % (
        run["load_to_ready_s"], run["warmup_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a],
        a[0]["peak_so_far_mib"]))
PY
}
timeout 100 python3 $S /tmp/ck --tag cold 2>&1 | grep '^{' | tee -a $R/run3-load.jsonl
for i in 1 2 3 4 5; do
  SMOLCHAT_TRITON_KEY_CACHE=0 timeout 60 python3 $S /tmp/ck --tag old --no-prewarm 2>&1 | grep '^{' >> $R/run3-load.jsonl
  timeout 60 python3 $S /tmp/ck --tag keycache --no-prewarm 2>&1 | grep '^{' >> $R/run3-load.jsonl
  timeout 60 python3 $S /tmp/ck --tag new 2>&1 | grep '^{' >> $R/run3-load.jsonl
done
python3 - $R/run3-load.jsonl <<'PY'
import json, sys, collections
g = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l); g[d["tag"]].append(d)
for tag, ds in g.items():
    print(tag, "ready", [d["load_to_ready_s"] for d in ds], "+ctx", [round(d["load_to_ready_s"] + d["cuda_context_s"], 3) for d in ds])
    for ph in ds[0]["phases_s"]:
        print("   ", ph, [d["phases_s"][ph] for d in ds])
    print("    key thread end", [d["triton_key_thread_end_s"] for d in ds])
PY
F="bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 1 --no-cli"
for i in 1 2 3; do
  SMOLCHAT_TRITON_KEY_CACHE=0 timeout 200 python3 $F --out $R/run3-first-old-$i.json > $R/run3-first-old-$i.txt 2>&1; summ $R/run3-first-old-$i.json "old $i"
  timeout 200 python3 $F --out $R/run3-first-new-$i.json > $R/run3-first-new-$i.txt 2>&1; summ $R/run3-first-new-$i.json "new $i"
done
timeout 120 .device-in/bin/py-spy record --idle --threads -r 200 -f raw -o /tmp/pyspy.txt -- python3 $S /tmp/ck --tag pyspy > $R/run3-pyspy-log.txt 2>&1
grep '^{' $R/run3-pyspy-log.txt; python3 bench/results/h200-session32/pyspy_summary.py /tmp/pyspy.txt > $R/run3-pyspy-summary.txt
sed -n '/under TritonStep/,$p' $R/run3-pyspy-summary.txt | cut -c1-250 | head -25
tar czf $OUT/run3.tgz -C $R .
