python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site:$PWD
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1
rm -rf /tmp/old && mkdir /tmp/old && cp -r bench engine server tools tests /tmp/old/ && cp .device-in/media_old.py /tmp/old/server/media.py
for round in 1 2; do
echo "### trace new socket round $round"; python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### trace old socket round $round"; (cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready")
done
