#!/usr/bin/env bash
# test_heads.sh: `attnlab heads` end to end. Trains tiny models of the five
# KV designs (MHA, LRKV, GQA, MQA, MLA) for a few steps on generated text,
# runs the head-similarity analysis on them and checks its outputs: STEM.npy
# is float32 [5, H, H] with a unit diagonal, symmetric, values in [-1, 1];
# STEM.json holds the five titles, every layer's matrix and the shown matrix
# (equal to the NPY); STEM.csv has one row per model x layer; --layer picks a
# layer; --out FILE.png gives the stem. Bad input (a layer that does not
# exist, models with different head counts, an unwritable output, a model
# directory that does not exist, usage mistakes) fails with one stderr line
# and a non-zero exit, leaving no files (and earlier outputs untouched).
#
# usage: bash tests/cli/test_heads.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 400
# ---------------------------------------------------------------- models

begin "train tiny models of the five designs"
train_tiny "$DATA" "mha:--attention mha" "lrkv:--attention lrkv --lrkv-rank 4" "gqa:--attention gqa --kv-heads 2" \
    "mqa:--attention mqa --kv-heads 1" "mla:--attention mla --kv-lora-rank 8 --qk-rope-dim 4 --q-lora-rank 8" \
    "h2:--attention mha --heads 2"
end
mkdir -p "$WORK/out" "$WORK/bad"
FIVE=(--model "$WORK/mha" --model "$WORK/lrkv" --model "$WORK/gqa" --model "$WORK/mqa" --model "$WORK/mla")

# Python checks of one output stem: $1 stem, $2 number of models, $3 layer ("mean" or index).
CHECK_OUTPUTS='
import csv, json, sys
import numpy as np
stem, n, layer = sys.argv[1], int(sys.argv[2]), sys.argv[3]
a = np.load(stem + ".npy")
assert a.dtype == np.float32 and a.shape == (n, 4, 4), (a.dtype, a.shape)
assert np.all(np.isfinite(a)), "non-finite"
assert np.abs(np.diagonal(a, axis1=1, axis2=2) - 1).max() < 1e-6, "diagonal is not 1"
assert a.min() >= -1 and a.max() <= 1, (a.min(), a.max())
assert np.abs(a - a.transpose(0, 2, 1)).max() == 0, "not symmetric"
j = json.load(open(stem + ".json"))
assert str(j["layer"]) == layer, j["layer"]
assert len(j["models"]) == n
for i, m in enumerate(j["models"]):
    L = m["config"]["layers"]
    assert len(m["layers"]) == L == 2
    for l, e in enumerate(m["layers"]):
        g = np.array(e["similarity"])
        assert g.shape == (4, 4) and e["layer"] == l
        assert 25 - 1e-9 <= e["erank_uncentered_pct"] <= 100 + 1e-9, e["erank_uncentered_pct"]
        assert 0 <= e["erank_pca_pct"] <= 75 + 1e-9, e["erank_pca_pct"]
        assert abs(e["cumulative_variance"][-1] - 1) < 1e-9
        off = (g.sum() - np.trace(g)) / 12
        assert abs(off - e["mean_offdiag"]) < 1e-9
    mean = np.mean([np.array(e["similarity"]) for e in m["layers"]], axis=0)
    assert np.abs(mean - np.array(m["mean_matrix"]["similarity"])).max() < 1e-12
    shown = np.array(m["shown"]["similarity"])
    want = mean if layer == "mean" else np.array(m["layers"][int(layer)]["similarity"])
    assert np.abs(shown - want).max() < 1e-12
    assert np.abs(shown - a[i]).max() < 1e-6, "npy differs from the json"
    for k in ("dir", "title", "attention", "config", "layer_average"):
        assert k in m, k
rows = list(csv.DictReader(open(stem + ".csv")))
assert len(rows) == 2 * n, len(rows)
for r in rows:
    for k in ("model", "title", "attention", "layer", "erank_uncentered_pct", "erank_pca_pct", "mean_offdiag",
              "cumvar_1", "cumvar_4"):
        assert k in r, k
    float(r["erank_uncentered_pct"]); float(r["cumvar_4"])
'

# ---------------------------------------------------------------- success

begin "five designs, mean over layers: json, csv, npy [5, H, H]"
run heads "${FIVE[@]}" --precision f32 --out "$WORK/out/five"
check_ok
check_exists "$WORK/out/five.json"
check_exists "$WORK/out/five.csv"
check_exists "$WORK/out/five.npy"
check_py "five.png is not a PNG of five panels" '
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n"
w, h = struct.unpack(">II", b[16:24])
assert w > 3 * h and h > 200, (w, h)
' "$WORK/out/five.png"
check_py "outputs do not check out" "$CHECK_OUTPUTS" "$WORK/out/five" 5 mean
check_py "json lacks the default titles" '
import json, sys
t = [m["title"] for m in json.load(open(sys.argv[1]))["models"]]
assert t == ["Standard MHA", "LRKV (r=4)", "GQA", "MQA", "MLA"], t
a = [m["attention"] for m in json.load(open(sys.argv[1]))["models"]]
assert a == ["mha", "lrkv", "gqa", "mqa", "mla"], a
' "$WORK/out/five.json"
check_stdout "Standard MHA"
check_stdout "LRKV \(r=4\)"
check_stdout "MLA +1 "
check_stdout "erank"
check_stderr_empty
check_no_tmp "$WORK/out"
end

begin "--layer 1, --out FILE.png gives the stem, custom titles"
run heads "${FIVE[@]}" --title A --title "B, with comma" --title C --title D --title E --layer 1 --out "$WORK/out/l1.png"
check_ok
check_exists "$WORK/out/l1.json"
check_exists "$WORK/out/l1.npy"
check_exists "$WORK/out/l1.csv"
check_exists "$WORK/out/l1.png"
check_py "outputs do not check out" "$CHECK_OUTPUTS" "$WORK/out/l1" 5 1
check_py "titles" '
import csv, json, sys
t = [m["title"] for m in json.load(open(sys.argv[1] + ".json"))["models"]]
assert t == ["A", "B, with comma", "C", "D", "E"], t
assert [r["title"] for r in csv.DictReader(open(sys.argv[1] + ".csv"))][2] == "B, with comma"
' "$WORK/out/l1"
check_stdout "B, with comma"
end

begin "--layer 0 on one model"
run heads --model "$WORK/mla" --layer 0 --out "$WORK/out/one"
check_ok
check_py "outputs do not check out" "$CHECK_OUTPUTS" "$WORK/out/one" 1 0
end

begin "--model=DIR and --title=T spellings; more than 64 models is a usage error"
run heads --model="$WORK/mla" --title="the MLA model" --model "$WORK/mha" --title=second --layer 0 --out "$WORK/out/eq"
check_ok
check_py "the = spellings were not read" '
import json, sys
m = json.load(open(sys.argv[1] + ".json"))["models"]
assert [x["title"] for x in m] == ["the MLA model", "second"], m
assert m[0]["dir"].endswith("/mla") and m[1]["dir"].endswith("/mha"), m
' "$WORK/out/eq"
many=()
for i in $(seq 65); do many+=(--model "$WORK/mha"); done
run heads "${many[@]}" --out "$WORK/out/many"
check_error 2 "at most 64 models"
check_absent "$WORK/out/many.json"
end

begin "help lists the flags"
run heads --help
check_ok
check_stdout "--model"
check_stdout "--layer"
check_stdout "--title"
end

# ---------------------------------------------------------------- bad input

# files written by an earlier run must survive a failing one unchanged
cp "$WORK/out/five.json" "$WORK/five.json.orig"
cp "$WORK/out/five.npy" "$WORK/five.npy.orig"

begin "a layer that does not exist: one line, exit 1, no files"
run heads "${FIVE[@]}" --layer 2 --out "$WORK/bad/layer"
check_error 1 "heads: .*layer 2"
check_absent "$WORK/bad/layer.json"
check_absent "$WORK/bad/layer.csv"
check_absent "$WORK/bad/layer.npy"
end

begin "a failing run leaves earlier outputs untouched"
run heads "${FIVE[@]}" --layer 7 --out "$WORK/out/five"
check_error 1 "layer 7"
check_same_file "$WORK/out/five.json" "$WORK/five.json.orig"
check_same_file "$WORK/out/five.npy" "$WORK/five.npy.orig"
check_no_tmp "$WORK/out"
end

begin "different head counts: one line, exit 1, no files"
run heads "${FIVE[@]}" --model "$WORK/h2" --out "$WORK/bad/heads"
check_error 1 "heads: .*head count"
check_absent "$WORK/bad/heads.json"
check_absent "$WORK/bad/heads.npy"
check_absent "$WORK/bad/heads.csv"
end

begin "unwritable output: one line, exit 1, no files"
: >"$WORK/plainfile"
run heads "${FIVE[@]}" --out "$WORK/plainfile/sub/x"
check_error 1 "heads: "
run heads "${FIVE[@]}" --out "$WORK/no/such/dir/x"
check_error 1 "heads: .*no/such/dir"
check_absent "$WORK/no"
mkdir -p "$WORK/ro"
chmod a-w "$WORK/ro"
if [ ! -w "$WORK/ro" ]; then # root writes anywhere: nothing to test then
    run heads "${FIVE[@]}" --out "$WORK/ro/x"
    check_error 1 "heads: "
    [ -z "$(ls -A "$WORK/ro")" ] || note "files left in the read-only dir"
fi
chmod u+w "$WORK/ro"
end

begin "a model dir that does not exist: one line, exit 1, no files"
run heads --model "$WORK/mha" --model "$WORK/nope" --out "$WORK/bad/nodir"
check_error 1 "heads: .*nope"
check_absent "$WORK/bad/nodir.json"
check_absent "$WORK/bad/nodir.npy"
end

begin "usage errors exit 2"
run heads --out "$WORK/bad/u"
check_error 2 "--model"
run heads --model "$WORK/mha"
check_error 2 "--out"
run heads --model "$WORK/mha" --model "$WORK/gqa" --title one --out "$WORK/bad/u"
check_error 2 "title"
run heads --model "$WORK/mha" --layer last --out "$WORK/bad/u"
check_error 2 "--layer"
run heads --model "$WORK/mha" --layer -1 --out "$WORK/bad/u"
check_error 2 "--layer"
run heads --model "$WORK/mha" --out "$WORK/bad/u" --title
check_error 2 "needs a value"
run heads --model "$WORK/mha" --out "$WORK/bad/"
check_error 2 "file name"
run heads --model "$WORK/mha" --out "$WORK/bad/u" --bogus 1
check_error 2 "bogus"
[ -z "$(ls -A "$WORK/bad")" ] || note "files left by failing runs: $(ls "$WORK/bad" | tr '\n' ' ')"
end

finish
