python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONPATH=/tmp/site:$PWD
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null 2>&1
python3 -c "import platform; print(platform.libc_ver(), platform.python_version())"
M="MALLOC_MMAP_THRESHOLD_=16777216 MALLOC_TRIM_THRESHOLD_=67108864"
for round in 1 2; do
echo "### trace socket, malloc tuned, round $round"; env $M python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### trace socket, default malloc, round $round"; python3 bench/server_trace.py --model /tmp/ck --runs 16 --client-encode socket 2>&1 | grep -vE "^Smolchat|^Model ready"
done
B="--model /tmp/ck --runs 40 --detail high --max-tokens 64 --client-encode prepared"
echo "### server.py prepared, malloc tuned"; env $M python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
echo "### server.py prepared, default malloc"; python3 bench/server.py $B 2>&1 | grep -vE "^Smolchat|^Model ready"
