#!/bin/bash
# Session 34 H200 run 5: run 4 again on the final tree (07aa29c: the device resolved before the tensors are read) against
# cf16513 (.device-in/old), 8 ABBA pairs after one cold process.
cd "$(dirname "$0")/../../.."
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r5; mkdir -p $R $OUT
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$ROOT python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
S=$ROOT/bench/results/h200-session34/ready.py
P() { (cd $1 && timeout 60 python3 $S /tmp/ck $2 2>>$R/err.txt | grep '^{' >> $R/run5-ready.jsonl); }
P $ROOT cold
for i in 1 2 3 4 5 6 7 8; do P .device-in/old old; P $ROOT new; P $ROOT new; P .device-in/old old; done
python3 - $R/run5-ready.jsonl <<'PY' | tee $R/run5-summary.txt
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for tag in ("old", "new"):
    r = [d for d in rows if d["tag"] == tag]
    for k in ("load_to_ready_s", "components_s", "warmup_s"):
        v = sorted(d[k] for d in r)
        print(tag, k, "n=%d min %.3f median %.3f max %.3f mean %.3f" % (len(v), v[0], statistics.median(v), v[-1], statistics.mean(v)))
PY
PYTHONPATH=/tmp/site:$ROOT timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_loading.py > $R/run5-pytest.txt 2>&1; tail -2 $R/run5-pytest.txt
tail -3 $R/err.txt
tar czf $OUT/run5.tgz -C $R .
