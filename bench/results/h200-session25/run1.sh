#!/bin/bash
# Session 25 run 1: machine topology; a new photo's TTFT per process unpinned / pinned to the GPU's NUMA
# node / pinned elsewhere (affinity_split.py), three processes each alternating; bench/server.py as is.
cd "$(dirname "$0")/../../.."
python3 -V; nproc
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-in/whl/*.whl 2>&1 | tail -2
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT
{
nvidia-smi --query-gpu=name,pci.bus_id --format=csv,noheader
lscpu | grep -iE "numa|model name|socket|thread|core|mhz"
grep Cpus_allowed_list /proc/self/status
cat /sys/fs/cgroup/cpuset.cpus.effective 2>/dev/null
nvidia-smi topo -m
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | sed 's/^0000//' | tr A-Z a-z)
echo "bus $BUS numa_node $(cat /sys/bus/pci/devices/$BUS/numa_node) local_cpulist $(cat /sys/bus/pci/devices/$BUS/local_cpulist)"
ls /sys/devices/system/node/ | grep node; for n in /sys/devices/system/node/node*; do echo "$n $(cat $n/cpulist)"; done
grep MHz /proc/cpuinfo | sort | uniq -c | head
} 2>&1 | tee $OUT/topology.txt
[ -d /tmp/ck ] || python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null || exit 1
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | sed 's/^0000//' | tr A-Z a-z)
LOCAL=$(cat /sys/bus/pci/devices/$BUS/local_cpulist)
ALLOWED=$(python3 -c "import os; print(','.join(map(str, sorted(os.sched_getaffinity(0)))))")
L=$(python3 -c "
import sys
def expand(s):
    out=set()
    for part in s.split(','):
        if '-' in part: a,b=part.split('-'); out|=set(range(int(a),int(b)+1))
        elif part: out.add(int(part))
    return out
loc=expand('$LOCAL'); al=expand('$ALLOWED')
inside=sorted(loc&al); outside=sorted(al-loc)
print(','.join(map(str,inside)) or '-', ','.join(map(str,outside)) or '-')")
IN=${L% *}; OUTSIDE=${L#* }
echo "allowed $ALLOWED; local & allowed: $IN; allowed outside: $OUTSIDE" | tee -a $OUT/topology.txt
IMG=$PWD/.device-in/shared/images/coffee.png
S=bench/results/h200-session25/affinity_split.py
for r in 1 2 3; do
  timeout 90 python3 $S /tmp/ck $IMG free 2>&1 | grep pid | tee -a $OUT/affinity.txt
  [ "$IN" != "-" ] && timeout 90 taskset -c $IN python3 $S /tmp/ck $IMG local 2>&1 | grep pid | tee -a $OUT/affinity.txt
  [ "$OUTSIDE" != "-" ] && timeout 90 taskset -c $OUTSIDE python3 $S /tmp/ck $IMG remote 2>&1 | grep pid | tee -a $OUT/affinity.txt
done
timeout 200 python3 bench/server.py --model /tmp/ck --runs 9 --detail high --client-encode dumps 2>&1 | grep -v -i warn | tail -6 | tee $OUT/server-high.txt
