#!/bin/bash
# Session 43 GPU run 2: issue 17's first answers (the app's path: ChatSession.load with its warm-up,
# a fresh process per run, no warm-up round) on the SmolVLM2-2.2B shape, bf16 and int8 weights
# ($SMOLCHAT_WEIGHTS), and the CUDA tests of the decode path on this tree.
cd "$(dirname "$0")/../../.."
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out /tmp/ck22 --dtype bfloat16 > /dev/null || exit 1
IMG=$PWD/.device-in/shared/images/astronaut.png
summ() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    a = run["answers"]
    print(sys.argv[2], "ready %.2f s (warm-up %.2f); TTFT ms %s; decode tok/s %s" % (
        run["load_to_ready_s"], run["warmup_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a]))
PY
}
for w in auto int8; do
  SMOLCHAT_WEIGHTS=$w timeout 200 python3 bench/first_answers.py --checkpoint /tmp/ck22 --image $IMG \
      --image2 $PWD/.device-in/shared/images/coffee.png --runs 2 --no-cli --out $OUT/first-2.2b-$w.json > $OUT/first-2.2b-$w.txt 2>&1
  summ $OUT/first-2.2b-$w.json $w
done
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/engine/test_static_decode.py tests/engine/test_warmup.py tests/engine/test_chat.py 2>&1 | tail -2
