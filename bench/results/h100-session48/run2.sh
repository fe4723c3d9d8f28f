#!/bin/bash
# Session 48 GPU run 2: the layer-by-layer load (each decoder layer fused, converted and quantized
# before the next) against the load before it (main at 12a2ba4, carried as .device-in/old/engine):
# bench/load_memory.py on the 256M and 2.2B shapes, bf16 and int8; then issue 17's first answers on
# the 2.2B with int8 (the app's path, its warm-up included) and the CUDA tests of the load and decode.
cd "$(dirname "$0")/../../.."
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
for m in SmolVLM-256M-Instruct SmolVLM2-2.2B-Instruct; do
  PYTHONPATH=$PWD python3 -m tools.make_checkpoint --config .device-in/shared/models/$m --out /tmp/ck/$m --dtype bfloat16 > /dev/null || exit 1
done
CKS="--checkpoint /tmp/ck/SmolVLM-256M-Instruct --checkpoint /tmp/ck/SmolVLM2-2.2B-Instruct"
for tree in old new; do
  if [ $tree = old ]; then P=$PWD/.device-in/old:$PWD; else P=$PWD; fi
  echo "== $tree"
  PYTHONPATH=$P timeout 200 python3 bench/load_memory.py $CKS --device cuda --weights auto,int8 --out $OUT/load-memory-$tree.json
done
export PYTHONPATH=$PWD
SMOLCHAT_WEIGHTS=int8 timeout 120 python3 bench/first_answers.py --checkpoint /tmp/ck/SmolVLM2-2.2B-Instruct \
    --image $PWD/.device-in/shared/images/astronaut.png --image2 $PWD/.device-in/shared/images/coffee.png \
    --runs 1 --no-cli --out $OUT/first-2.2b-int8.json > $OUT/first-2.2b-int8.txt 2>&1
echo "first int8 rc=$?"; tail -c 600 $OUT/first-2.2b-int8.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_quantize.py tests/engine/test_static_decode.py \
    tests/engine/test_triton_decode.py tests/engine/test_warmup.py 2>&1 | tail -4 | tee $OUT/pytest.txt
