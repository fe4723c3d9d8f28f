#!/bin/bash
# Session 33 H200 run 5: Triton's set-up started before choose_device (its imports beside the driver's start-up, not beside the
# model's construction): load_parts.py --late-triton (the thread started after choose_device, as before) against the new
# code, 6 ABBA pairs; then issue 17's first answers + CLI, and the CUDA tests of the changed paths.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r5; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
D=bench/results/h200-session33; P="timeout 60 python3 $D/load_parts.py /tmp/ck"
timeout 120 $P --tag cold 2>$R/cold.err | grep '^{' >> $R/run5-parts.jsonl
for i in 1 2 3; do
  $P --tag late --late-triton 2>>$R/err.txt | grep '^{' >> $R/run5-parts.jsonl
  $P --tag new 2>>$R/err.txt | grep '^{' >> $R/run5-parts.jsonl
  $P --tag new 2>>$R/err.txt | grep '^{' >> $R/run5-parts.jsonl
  $P --tag late --late-triton 2>>$R/err.txt | grep '^{' >> $R/run5-parts.jsonl
done
python3 $D/parts_summary.py $R/run5-parts.jsonl > $R/run5-summary.txt 2>&1
grep -A2 "^==" $R/run5-summary.txt; grep "meta_build\|triton_key\|choose_device\|mark smolchat-triton" $R/run5-summary.txt
IMG=$PWD/.device-in/shared/images/astronaut.png IMG2=$PWD/.device-in/shared/images/coffee.png
timeout 300 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 2 --out $R/run5-first-256m.json > $R/run5-first-256m.txt 2>&1
python3 - $R/run5-first-256m.json <<'PY'
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
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/engine/test_triton_key.py tests/engine/test_warmup.py tests/engine/test_tokenizer.py > $R/run5-pytest.txt 2>&1; tail -3 $R/run5-pytest.txt
tar czf $OUT/run5.tgz -C $R .
