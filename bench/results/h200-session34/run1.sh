#!/bin/bash
# Session 34 H200 run 1: the GIL's switch interval during the load (CPython's 5 ms against 0.5 ms, as
# the server sets): load_parts.py in 6 ABBA pairs after one cold process, then first_answers.py
# (no CLI) in ABBA order, 2 processes an arm each time.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r1; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
D=bench/results/h200-session34; L=bench/results/h200-session33/load_parts.py
P() { timeout 60 python3 $D/switch.py $1 $L /tmp/ck --tag $2 2>>$R/err.txt | grep '^{' >> $R/run1-parts.jsonl; }
P 0.005 cold
for i in 1 2 3; do P 0.005 s5ms; P 0.0005 s05ms; P 0.0005 s05ms; P 0.005 s5ms; done
python3 bench/results/h200-session33/parts_summary.py $R/run1-parts.jsonl > $R/run1-summary.txt 2>&1
grep -A2 "^==" $R/run1-summary.txt; grep "meta_build\|triton_key\|choose_device\|Module.to\[SmolVlmModel\]#1\|capture_all\|LlamaLM.warmup#\|_warm_photo" $R/run1-summary.txt
IMG=$PWD/.device-in/shared/images/astronaut.png IMG2=$PWD/.device-in/shared/images/coffee.png
F() { timeout 200 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 2 --no-cli --switch-interval $1 --out $R/run1-first-$2.json > /dev/null 2>>$R/err.txt; }
F 0.005 a1; F 0.0005 b1; F 0.0005 b2; F 0.005 a2
python3 $D/fa_summary.py $R/run1-first-a1.json $R/run1-first-b1.json $R/run1-first-b2.json $R/run1-first-a2.json | tee $R/run1-first-summary.txt
tail -5 $R/err.txt
tar czf $OUT/run1.tgz -C $R .
