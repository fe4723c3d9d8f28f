set -x
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site:$PWD
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1
set +x
B="--model /tmp/ck --runs 200 --detail high --max-tokens 64 --client-encode socket"
echo "### new 1"; date +%s; python3 bench/server.py $B --json $OUT/run3-new1.json 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### new 2"; date +%s; python3 bench/server.py $B --json $OUT/run3-new2.json 2>&1 | grep -vE "^Smolchat|^Model ready"
date +%s
