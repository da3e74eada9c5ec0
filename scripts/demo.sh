#!/bin/sh
# make demo: train a small byte-level Llama on the King James Bible for a few
# minutes, evaluate it on the held-out 5 %, and sample from it.
set -eu
OUT=${OUT:-out/demo}
STEPS=${STEPS:-600}
mkdir -p "$OUT"
A=build/attnlab
echo "== attnlab demo: training the 'small' preset (MHA, 4 layers, hidden 256) for $STEPS steps into $OUT/mha"
if [ -f "$OUT/mha/train_state.safetensors" ]; then
    $A train --out "$OUT/mha" --resume --steps "$STEPS"
else
    $A train --preset small --steps "$STEPS" --eval-every 200 --save-every 200 --out "$OUT/mha"
fi
echo "== model"
$A info --model "$OUT/mha"
echo "== validation split (last 5 % of the corpus)"
$A eval --model "$OUT/mha" --max-tokens 131072
echo "== sample (temperature 0.8)"
$A generate --model "$OUT/mha" --prompt "And God said, " -n 240 --temperature 0.8 --seed 1
echo "== done: checkpoint, training state and log.jsonl are in $OUT/mha"
