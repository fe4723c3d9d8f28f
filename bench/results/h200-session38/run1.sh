#!/bin/bash
# Session 38 H200 run 1: int8 weights on CUDA (the Triton decode step reading int8 rows and per-row
# scales) against bf16, for the 256M, 500M and 2.2B shapes (bench/family_gpu.py --only int8), and the
# CLI's --weights int8 on CUDA.
cd "$(dirname "$0")/../../.."
export SMOLCHAT_SHARED=$PWD/.device-in/shared PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTHONPYCACHEPREFIX=/tmp/pyc
R=/tmp/r1; mkdir -p $R $OUT /tmp/fg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -m tools.make_checkpoint --config .device-in/shared/models/SmolVLM-256M-Instruct --out /tmp/ck --dtype bfloat16 > /dev/null
for w in auto int8; do
  timeout 120 python3 -m engine generate --model /tmp/ck --device cuda --weights $w --prompt "Describe a harbour at dawn." \
      --max-new-tokens 64 --ignore-eos --json > $R/cli-$w.json 2> $R/cli-$w.err; echo "rc=$?" >> $R/cli-$w.err
done
timeout ${FG_TIMEOUT:-480} python3 bench/family_gpu.py --shared .device-in/shared --only int8 \
    --models ${MODELS:-SmolVLM-256M-Instruct,SmolVLM-500M-Instruct,SmolVLM2-2.2B-Instruct} --work /tmp/fg \
    --out $R/family-int8.json > $R/family-int8.txt 2>&1
tail -c 3000 $R/family-int8.txt
for w in auto int8; do tail -c 400 $R/cli-$w.json; echo; tail -2 $R/cli-$w.err; done
cp $R/* $OUT/
