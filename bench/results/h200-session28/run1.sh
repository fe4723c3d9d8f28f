set -x
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site:$PWD
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1
B="--model /tmp/ck --runs 30 --detail high --max-tokens 64 --client-encode socket"
MAL="MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456"
for round in 1 2; do
  for v in "default" "BENCH_SWITCH_INTERVAL_MS=1" "BENCH_SWITCH_INTERVAL_MS=0.2" "$MAL"; do
    echo "### $v round $round"; date +%s
    if [ "$v" = default ]; then python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
    else env $v python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"; fi
  done
done
date +%s
