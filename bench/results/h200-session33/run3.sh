#!/bin/bash
# Session 33 H200 run 3: the CUDA driver's start-up on a GIL-free thread (engine/cuda_driver.py), four arms in
# rotating order (load_parts.py): old (torch starts the driver; init thread as before), driver started in
# load_model, driver started before `import torch` (the app's engine thread), the latter with the old init
# thread; then issue 17's first answers + CLI on the new code, and the CUDA tests of the changed paths.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r3; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
D=bench/results/h200-session33; P="timeout 60 python3 $D/load_parts.py /tmp/ck"
timeout 120 python3 $D/load_parts.py /tmp/ck --tag cold 2>$R/cold.err | grep '^{' >> $R/run3-parts.jsonl
arm() {
  case $1 in
    old) SMOLCHAT_CUDA_DRIVER_INIT=0 $P --tag old --old-init ;;
    inload) $P --tag inload ;;
    early) $P --tag early --driver-early ;;
    early-oldinit) $P --tag early-oldinit --driver-early --old-init ;;
  esac 2>>$R/err.txt | grep '^{' >> $R/run3-parts.jsonl
}
for order in "old inload early early-oldinit" "early-oldinit early inload old" "inload old early-oldinit early" "early early-oldinit old inload"; do
  for a in $order; do arm $a; done
done
python3 $D/parts_summary.py $R/run3-parts.jsonl > $R/run3-summary.txt 2>&1
grep -A2 "^==" $R/run3-summary.txt
IMG=$PWD/.device-in/shared/images/astronaut.png IMG2=$PWD/.device-in/shared/images/coffee.png
timeout 300 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 2 --out $R/run3-first-256m.json > $R/run3-first-256m.txt 2>&1
python3 - $R/run3-first-256m.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print("ready %.2f s (warm-up %.2f, from process start %.2f); TTFT ms %s; decode tok/s %s; answer-1 peak %.1f MiB" % (
        run["load_to_ready_s"], run["warmup_s"], run["load_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a],
        a[0]["peak_so_far_mib"]))
for c in d.get("cli", []):
    print("cli", {k: {kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in v.items() if kk in ("ttft_s", "decode_tokens_per_s", "process_wall_s", "prompt_tokens")} for k, v in c.items() if isinstance(v, dict)})
PY
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_cuda_driver.py tests/engine/test_warmup.py > $R/run3-pytest.txt 2>&1; tail -3 $R/run3-pytest.txt
tar czf $OUT/run3.tgz -C $R .
