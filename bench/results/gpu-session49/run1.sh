#!/bin/bash
# Session 49 GPU run (issue 17 and the stoppable load): asked for as nvidia-h200. The CUDA tests of a
# load stopped in its warm-up (tests/engine/test_load_cancel.py) and of the warm-up / static decode
# paths; how soon a stopped 2.2B-shape load ends on the GPU; then, on an H200 only, the 2.2B shape's
# int8 decode (bench/family_gpu.py --only int8), never measured on an H200, and its first answers.
cd "$(dirname "$0")/../../.."
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p $OUT /tmp/fg
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
# (not the GGUF test: the device machine has no platformdirs, which finds its file)
timeout 240 python3 -m pytest -q -p no:cacheprovider -k "not gguf" tests/engine/test_load_cancel.py tests/engine/test_warmup.py \
    tests/engine/test_vision_graphs.py tests/engine/test_static_decode.py > $OUT/pytest.txt 2>&1
echo "pytest rc=$?"; tail -5 $OUT/pytest.txt
CK=/tmp/fg/SmolVLM2-2.2B-Instruct-real-bf16   # the family bench's checkpoint name (seed 0)
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM2-2.2B-Instruct --out $CK --dtype bfloat16 > /dev/null || exit 1
timeout 120 python3 bench/load_cancel.py --checkpoint $CK --device cuda --weights int8 --after 0.5,1.5,3 \
    --out $OUT/load-cancel-cuda.json 2>&1 | tail -8
if grep -q H200 $OUT/gpu.txt; then
  timeout 240 python3 bench/family_gpu.py --shared .device-in/shared --only int8 --models SmolVLM2-2.2B-Instruct \
      --work /tmp/fg --out $OUT/family-int8.json > $OUT/family-int8.txt 2>&1
  echo "family rc=$?"; tail -c 1500 $OUT/family-int8.txt
fi
