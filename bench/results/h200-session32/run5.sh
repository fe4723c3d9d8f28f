#!/bin/bash
# Session 32 H200 run 5: the vision graphs captured for chunks of 1 and 4 tiles only (2 and 3 run the 4-tile
# graph) against all four sizes: the load's phases alternating fresh processes, each size's replay and whole
# photos' tiles through both; then the CUDA tests of the changed paths.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r5; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
S=bench/results/h200-session32/load_trace.py
timeout 100 python3 $S /tmp/ck --tag cold 2>&1 | grep '^{' >> $R/run5-load.jsonl
for i in 1 2 3 4; do
  timeout 60 python3 $S /tmp/ck --tag sizes1234 --vision-sizes 1,2,3,4 2>&1 | grep '^{' >> $R/run5-load.jsonl
  timeout 60 python3 $S /tmp/ck --tag sizes14 2>&1 | grep '^{' >> $R/run5-load.jsonl
done
python3 - $R/run5-load.jsonl <<'PY'
import json, sys, collections
g = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l); g[d["tag"]].append(d)
for tag, ds in g.items():
    print(tag, "ready+ctx", [round(d["load_to_ready_s"] + d["cuda_context_s"], 3) for d in ds])
    for ph in ds[0]["phases_s"]:
        print("   ", ph, [d["phases_s"][ph] for d in ds])
PY
timeout 120 python3 bench/results/h200-session32/vision_replay.py /tmp/ck 2>&1 | grep '^{' | tee $R/run5-vision-replay.json
timeout 200 python3 -m pytest -q -x tests/engine/test_vision_graphs.py tests/engine/test_warmup.py tests/engine/test_triton_key.py -p no:cacheprovider 2>&1 | tail -5 | tee $R/run5-pytest.txt
tar czf $OUT/run5.tgz -C $R .
