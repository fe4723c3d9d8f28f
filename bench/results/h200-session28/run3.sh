set -x
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site:$PWD
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1
OLD=$PWD/.device-in/old
B="--model /tmp/ck --runs 100 --detail high --max-tokens 64 --client-encode socket"
echo "### old"; date +%s; (cd $OLD && PYTHONPATH=/tmp/site:$OLD python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready")
echo "### new untuned"; date +%s; BENCH_TUNE=0 python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### new tuned"; date +%s; python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### old 2"; date +%s; (cd $OLD && PYTHONPATH=/tmp/site:$OLD python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready")
echo "### new tuned 2"; date +%s; python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### trace new tuned"; date +%s; python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready"
date +%s
