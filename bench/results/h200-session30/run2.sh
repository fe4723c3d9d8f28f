set -x
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1 || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 2>&1 | tail -5
set +x
B="--model /tmp/ck --runs 150 --detail high --max-tokens 64 --client-encode socket"
NEW=$PWD; OLD=$PWD/.device-in/old30
for i in 1 2 3; do
  echo "### old $i"; date +%s; (cd $OLD && PYTHONPATH=/tmp/site:$OLD python3 bench/server.py $B --json $OUT/run2-old$i.json 2>&1 | grep -vE "^Smolchat|^Model ready")
  echo "### new $i"; date +%s; (cd $NEW && PYTHONPATH=/tmp/site:$NEW python3 bench/server.py $B --json $OUT/run2-new$i.json 2>&1 | grep -vE "^Smolchat|^Model ready")
done
date +%s
