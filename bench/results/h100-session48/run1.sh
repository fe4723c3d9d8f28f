#!/bin/bash
# Session 48 GPU run 1 (issue 17), asked for as nvidia-h200; an H100 came: int8 weights against bf16 (bench/family_gpu.py --only
# int8; the 2.2B shape's int8 decode had been measured on an H100 only, session 43), then issue 17's
# first answers (bench/first_answers.py: the app's path, ChatSession.load with its warm-up, a fresh
# process per run) on the SmolVLM2-2.2B shape with bf16 and int8 weights ($SMOLCHAT_WEIGHTS).
cd "$(dirname "$0")/../../.."
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p $OUT /tmp/fg
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
timeout ${FG_TIMEOUT:-330} python3 bench/family_gpu.py --shared .device-in/shared --only int8 \
    --models ${MODELS:-SmolVLM-256M-Instruct,SmolVLM-500M-Instruct,SmolVLM2-2.2B-Instruct} --work /tmp/fg \
    --out $OUT/family-int8.json > $OUT/family-int8.txt 2>&1
echo "family rc=$?"; tail -c 2500 $OUT/family-int8.txt
CK=/tmp/fg/SmolVLM2-2.2B-Instruct-real-bf16   # the family bench's checkpoint (seed 0), else built here
ls $CK/*.safetensors > /dev/null 2>&1 || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out $CK --dtype bfloat16 > /dev/null || exit 1
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
for w in int8 auto; do
  SMOLCHAT_WEIGHTS=$w timeout 150 python3 bench/first_answers.py --checkpoint $CK --image $IMG \
      --image2 $PWD/.device-in/shared/images/coffee.png --runs 2 --no-cli --out $OUT/first-2.2b-$w.json > $OUT/first-2.2b-$w.txt 2>&1
  echo "first $w rc=$?"; summ $OUT/first-2.2b-$w.json $w
done
