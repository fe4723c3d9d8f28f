#!/bin/bash
# Session 35 H200 run 3: run 2 again on the final tree (the lifespan records whether the engine
# thread stopped; the CLI exits at once on Ctrl-C).
cd "$(dirname "$0")/../../.."
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$ROOT PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r3; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
timeout 500 python3 bench/results/h200-session35/exit_probe.py /tmp/ck --repeats ${REPEATS:-3} --cases server,cli --cli-delays 4,6,8,10,12,14 > $R/exit.jsonl 2> $R/exit-err.txt
python3 - $R/exit.jsonl <<'PY' | tee $R/exit-summary.txt
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = collections.defaultdict(list)
for r in rows:
    by[(r["mode"], r["delay"])].append(r)
for (mode, delay), rs in by.items():
    print(f"{mode:11s} {delay:5.2f}  rc={[r['rc'] for r in rs]}  bad={sum(bool(r['bad']) for r in rs)}  wall={[r['wall_s'] for r in rs]}")
print("processes", len(rows), "aborted", sum(bool(r["bad"]) or r["rc"] not in (0, 130) for r in rows))
PY
tar czf $OUT/run3.tgz -C $R .
