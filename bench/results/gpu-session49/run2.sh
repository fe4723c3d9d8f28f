#!/bin/bash
# Session 49 GPU run 2: the CUDA tests after Int4Linear's row chunks (its nibbles now packed from bytes)
# and the shared capture stream; on an H200 only, the 2.2B shape's int8 decode (issue 17).
cd "$(dirname "$0")/../../.."
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p $OUT /tmp/fg
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider -k "not gguf" tests/engine/test_quantize.py tests/engine/test_load_cancel.py \
    tests/engine/test_warmup.py tests/engine/test_vision_graphs.py tests/engine/test_static_decode.py > $OUT/run2-pytest.txt 2>&1
echo "pytest rc=$?"; tail -4 $OUT/run2-pytest.txt
if grep -q H200 $OUT/gpu.txt; then
  timeout 250 python3 bench/family_gpu.py --shared .device-in/shared --only int8 --models SmolVLM2-2.2B-Instruct \
      --work /tmp/fg --out $OUT/run2-family-int8.json > $OUT/run2-family-int8.txt 2>&1
  echo "family rc=$?"; tail -c 1500 $OUT/run2-family-int8.txt
fi
