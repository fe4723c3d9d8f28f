set -x
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site:$PWD
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1
OLD=$PWD/.device-in/old
B="--model /tmp/ck --runs 40 --detail high --max-tokens 64 --client-encode socket"
for round in 1 2 3; do
  echo "### new round $round"; date +%s; python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
  echo "### old round $round"; (cd $OLD && PYTHONPATH=/tmp/site:$OLD python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready")
  echo "### new SI=1ms round $round"; BENCH_SWITCH_INTERVAL_MS=1 python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
  echo "### new SI=0.5ms round $round"; BENCH_SWITCH_INTERVAL_MS=0.5 python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
done
echo "### trace new"; date +%s; python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready"
date +%s
