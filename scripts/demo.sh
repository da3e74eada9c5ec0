#!/bin/sh
# make demo: the quick study (docs/study.md): trains the five KV designs (MHA,
# GQA, MQA, MLA, LRKV) on the King James Bible and a softmax / (1/14)x^3 pair
# of vision transformers on Fashion-MNIST, measures them, and writes the
# report and figures into out/demo (about 6 minutes on two idle cores of a
# CPU with AMX; docs/study.md).
# Rerunning continues an interrupted study and skips finished runs.
#   OUT=dir BUDGET=standard make demo    another directory or budget
set -eu
OUT=${OUT:-out/demo}
BUDGET=${BUDGET:-quick}
A=${BUILD:-build}/attnlab
mkdir -p "$(dirname "$OUT")"
echo "== attnlab demo: attnlab study --out $OUT --budget $BUDGET"
"$A" study --out "$OUT" --budget "$BUDGET"
echo "== done: open $OUT/report.html (or read $OUT/report.md); every number is in $OUT/report.json"
