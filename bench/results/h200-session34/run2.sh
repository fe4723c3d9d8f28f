#!/bin/bash
# Session 34 H200 run 2: the model built on the meta device while choose_device waits for the driver
# (new) against main's cf16513 (old: .device-in/old, git archive of engine/, tools/, bench/first_answers.py):
# load_parts.py in 6 ABBA pairs after one cold process, first_answers.py (no CLI) ABBA with 2
# processes an arm each time, then the CUDA tests of the load's paths on the new tree.
cd "$(dirname "$0")/../../.."
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r2; mkdir -p $R $OUT
[ -d /tmp/ck ] || PYTHONPATH=/tmp/site:$ROOT python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
L=$ROOT/bench/results/h200-session33/load_parts.py
P() { (cd $1 && timeout 60 python3 $L /tmp/ck --tag $2 2>>$R/err.txt | grep '^{' >> $R/run2-parts.jsonl); }
P $ROOT cold
for i in 1 2 3; do P .device-in/old old; P $ROOT new; P $ROOT new; P .device-in/old old; done
python3 bench/results/h200-session33/parts_summary.py $R/run2-parts.jsonl > $R/run2-summary.txt 2>&1
grep -A2 "^==" $R/run2-summary.txt; grep "load_model\|choose_device\|meta_build\|triton_key\|Module.to\[SmolVlmModel\]#1\|capture_all\|LlamaLM.warmup#\|_warm_photo" $R/run2-summary.txt
IMG=$ROOT/.device-in/shared/images/astronaut.png IMG2=$ROOT/.device-in/shared/images/coffee.png
F() { (cd $1 && timeout 200 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 2 --no-cli --out $R/run2-first-$2.json > /dev/null 2>>$R/err.txt); }
F .device-in/old old1; F $ROOT new1; F $ROOT new2; F .device-in/old old2
python3 bench/results/h200-session34/fa_summary.py $R/run2-first-old1.json $R/run2-first-new1.json $R/run2-first-new2.json $R/run2-first-old2.json | tee $R/run2-first-summary.txt
PYTHONPATH=/tmp/site:$ROOT timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_loading.py tests/engine/test_triton_key.py tests/engine/test_warmup.py tests/engine/test_tokenizer.py -k "not smollm2" > $R/run2-pytest.txt 2>&1; tail -3 $R/run2-pytest.txt
tail -5 $R/err.txt
tar czf $OUT/run2.tgz -C $R .
