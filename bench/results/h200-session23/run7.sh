#!/bin/bash
# Session 23 H200 run 7: is the server's slower vision + prefill phase thread oversubscription? The trace
# with the default threads twice and with OMP_NUM_THREADS=1 (both processes) between them.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl .device-in/whl2/*.whl 2>/dev/null || exit 1
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
for t in default-1 omp1 default-2; do
  if [ $t = omp1 ]; then export OMP_NUM_THREADS=1; else unset OMP_NUM_THREADS; fi
  timeout 150 python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode dumps --json $OUT/run7-trace-$t.json > $OUT/run7-trace-$t.txt 2>&1
  python3 - $OUT/run7-trace-$t.json $t <<'PY'
import json, statistics as st, sys
d = json.load(open(sys.argv[1])); H, L = d["http_first"], d["local_first"]
ph = lambda rows, a, b: [(r[b] - r[a]) * 1e3 for r in rows]
hp, lp = ph(H, "prefill_start", "prefill_end"), ph(L, "prefill_start", "prefill_end")
ht, lt = ph(H, "client_sent", "client_first"), ph(L, "sent", "first")
hf, lf = ph(H, "turns_start", "fit_start"), ph(L, "sent", "fit_start")
print(sys.argv[2], "prefill %.1f/%.1f paired %.2f | image prep %.1f/%.1f | TTFT %.1f/%.1f paired %.2f" % (
    st.median(hp), st.median(lp), st.median(a / b for a, b in zip(hp, lp)), st.median(hf), st.median(lf),
    st.median(ht), st.median(lt), st.median(a / b for a, b in zip(ht, lt))))
PY
  grep -E "^first turn:" $OUT/run7-trace-$t.txt
done
