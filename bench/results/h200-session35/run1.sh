#!/bin/bash
# Session 35 H200 run 1: processes that exit while or right after a model loads on CUDA (exit_probe.py),
# and the device checks on a one-GPU machine.
cd "$(dirname "$0")/../../.."
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$ROOT PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r1; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "
import torch
from engine.device import choose_device
for p in ['auto', 'cuda', 'cuda:0', torch.device('cuda'), 'cuda:1', torch.device('cuda', 3), 'mps', 'gpu']:
    try: print(repr(p), '->', choose_device(p))
    except Exception as e: print(repr(p), '!!', type(e).__name__, e)
" > $R/devices.txt 2>&1
timeout 60 python3 -m engine generate --model /tmp/ck --device cuda:1 --prompt hi --max-new-tokens 2 > $R/cli-cuda1.txt 2>&1; echo "rc=$?" >> $R/cli-cuda1.txt
timeout 420 python3 bench/results/h200-session35/exit_probe.py /tmp/ck --repeats ${REPEATS:-3} > $R/exit.jsonl 2> $R/exit-err.txt
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
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_loading.py > $R/pytest.txt 2>&1; tail -2 $R/pytest.txt
cat $R/devices.txt $R/cli-cuda1.txt
tar czf $OUT/run1.tgz -C $R .
