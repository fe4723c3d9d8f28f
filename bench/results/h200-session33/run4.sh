#!/bin/bash
# Session 33 H200 run 4: the tokenizer without its whole-vocabulary byte table (token_bytes per id, kept), A/B in
# one machine start: load_parts.py with --old-table (session 32's table built on the tokenizer thread) against
# the new code, 6 alternating pairs; gil_probe.py's tokenizer both ways; then issue 17's first answers + CLI.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r4; mkdir -p $R $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
D=bench/results/h200-session33; P="timeout 60 python3 $D/load_parts.py /tmp/ck"
timeout 120 $P --tag cold 2>$R/cold.err | grep '^{' >> $R/run4-parts.jsonl
for i in 1 2 3; do
  $P --tag table --old-table 2>>$R/err.txt | grep '^{' >> $R/run4-parts.jsonl
  $P --tag new 2>>$R/err.txt | grep '^{' >> $R/run4-parts.jsonl
  $P --tag new 2>>$R/err.txt | grep '^{' >> $R/run4-parts.jsonl
  $P --tag table --old-table 2>>$R/err.txt | grep '^{' >> $R/run4-parts.jsonl
done
python3 $D/parts_summary.py $R/run4-parts.jsonl > $R/run4-summary.txt 2>&1
grep -A2 "^==" $R/run4-summary.txt; grep "tokenizer_thread\|meta_build\|mark smolchat-tok" $R/run4-summary.txt
for i in 1 2; do
  timeout 60 python3 $D/gil_probe.py tokenizer /tmp/ck --old-table 2>>$R/err.txt | grep '^{' >> $R/run4-gil.jsonl
  timeout 60 python3 $D/gil_probe.py tokenizer /tmp/ck 2>>$R/err.txt | grep '^{' >> $R/run4-gil.jsonl
done
cat $R/run4-gil.jsonl
IMG=$PWD/.device-in/shared/images/astronaut.png IMG2=$PWD/.device-in/shared/images/coffee.png
timeout 300 python3 bench/first_answers.py --checkpoint /tmp/ck --image $IMG --image2 $IMG2 --runs 2 --out $R/run4-first-256m.json > $R/run4-first-256m.txt 2>&1
python3 - $R/run4-first-256m.json <<'PY'
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
tar czf $OUT/run4.tgz -C $R .
