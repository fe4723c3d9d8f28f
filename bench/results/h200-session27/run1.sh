set -x
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site:$PWD
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1
P=.device-in/shared/images/coffee.png
OLD=$PWD/.device-in/old
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
for round in 1 2; do
  echo "### followup new round $round"; python3 .device-in/followup_phases.py /tmp/ck $P 40 2>&1 | grep -v Warn
  echo "### followup old round $round"; (cd $OLD && PYTHONPATH=/tmp/site:$OLD python3 ../followup_phases.py /tmp/ck ../../$P 40 2>&1 | grep -v Warn)
done
B="--model /tmp/ck --runs 40 --detail high --max-tokens 64 --client-encode socket"
for round in 1 2; do
  echo "### server new round $round"; python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
  echo "### server old round $round"; (cd $OLD && PYTHONPATH=/tmp/site:$OLD python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready")
done
echo "### trace new socket"; python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### trace old socket"; (cd $OLD && PYTHONPATH=/tmp/site:$OLD python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready" | tail -30)
