#!/usr/bin/env bash
# test_attnmap.sh: `attnlab attnmap` on models of every design: the NPY holds
# full-resolution weights [pairs, T, T] that are causal (upper triangle 0),
# rows sum to 1 under softmax, the JSON carries the statistics of every
# pair; inputs longer than the trained context work; bad input is one line.
. "$(dirname "$0")/lib.sh" "$@"

make_text "$WORK/text.txt" 300
head -c 600 "$WORK/text.txt" >"$WORK/short.txt"

for design in mha gqa mqa mla lrkv; do
    begin "train a tiny $design model"
    extra=""
    [ "$design" = gqa ] && extra="--kv-heads 2"
    [ "$design" = mqa ] && extra="--kv-heads 1"
    run train --precision f32 --attention "$design" $extra --layers 2 --hidden 32 --heads 4 --context 32 --batch 2 --steps 3 \
        --eval-tokens 64 --data "$WORK/text.txt" --out "$WORK/$design" --quiet
    check_ok
    end

    begin "$design: attnmap over 600 tokens (beyond the trained 32)"
    run attnmap --model "$WORK/$design" --text "$WORK/short.txt" --layer 0,1 --head 0,3 --out "$WORK/$design-map.png"
    check_ok
    check_stdout "sink"
    check_py "figure" '
import sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
assert len(b) > 20000, "suspiciously small PNG"
' "$WORK/$design-map.png"
    check_py "weights" '
import json, sys
import numpy as np
stem = sys.argv[1]
P = np.load(stem + ".npy")
assert P.shape == (4, 600, 600), P.shape
assert np.all(np.triu(P, 1) == 0), "weights above the diagonal"
assert np.allclose(P.sum(-1), 1, atol=1e-4), "softmax rows must sum to 1"
assert np.all(P >= 0)
j = json.load(open(stem + ".json"))
assert [(p["layer"], p["head"]) for p in j["pairs"]] == [(0, 0), (0, 3), (1, 0), (1, 3)]
assert j["tokens"] == 600 and j["npy_shape"] == [4, 600, 600]
for p, M in zip(j["pairs"], P):
    assert abs(p["sink_mass"] - M[:, 0].mean()) < 1e-4, (p["sink_mass"], M[:, 0].mean())
    assert abs(p["row_sum"] - 1) < 1e-4
    # the fewest keys holding 95 % of each row mass, averaged over queries (and its share of the keys seen)
    s = -np.sort(-M.astype(np.float64), axis=1)
    need = [int(np.searchsorted(np.cumsum(r[:q + 1]), 0.95 * r[:q + 1].sum() * (1 - 1e-12)) + 1) for q, r in enumerate(s)]
    assert abs(p["budget95"] - np.mean(need)) < 0.05, (p["budget95"], np.mean(need))
    frac = np.mean([b / (q + 1) for q, b in enumerate(need)])
    assert abs(p["budget95_frac"] - frac) < 1e-3, (p["budget95_frac"], frac)
lb = {b["layer"]: b for b in j["layer_budgets"]}
assert j["budget_share"] == 0.95 and sorted(lb) == [0, 1]
for l in (0, 1):
    mine = [p["budget95"] for p in j["pairs"] if p["layer"] == l]
    assert abs(lb[l]["budget95"] - sum(mine) / 2) < 1e-3 * max(1, lb[l]["budget95"]), (lb[l], mine)
' "$WORK/$design-map"
    end
done

begin "SVG and PDF by extension, linear scale"
run attnmap --model "$WORK/mha" --text "$WORK/short.txt" --scale linear --out "$WORK/lin.svg"
check_ok
check_exists "$WORK/lin.svg"
run attnmap --model "$WORK/mha" --text "$WORK/short.txt" --out "$WORK/vec.pdf"
check_ok
check_py "pdf" 'import sys; assert open(sys.argv[1], "rb").read(5) == b"%PDF-"' "$WORK/vec.pdf"
end

begin "unknown layer: one-line error, no output"
run attnmap --model "$WORK/mha" --text "$WORK/short.txt" --layer 5 --head 0 --out "$WORK/bad1.png"
check_error 1 "layer 5"
check_absent "$WORK/bad1.npy"
end

begin "unknown head: one-line error"
run attnmap --model "$WORK/mha" --text "$WORK/short.txt" --layer 0 --head 4 --out "$WORK/bad2.png"
check_error 1 "head 4"
end

begin "unwritable output: one-line error"
run attnmap --model "$WORK/mha" --text "$WORK/short.txt" --out "$WORK/no/such/dir/x.png"
check_error 1 "no such file|directory"
end

begin "missing text file"
run attnmap --model "$WORK/mha" --text "$WORK/none.txt" --out "$WORK/x.png"
check_error 1 "none.txt"
end

begin "bad --layer list is a usage error"
run attnmap --model "$WORK/mha" --text "$WORK/short.txt" --layer a,b --out "$WORK/x.png"
check_error 2 "layer"
end

finish
