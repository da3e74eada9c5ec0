#!/usr/bin/env bash
# test_kvlab.sh: `attnlab kvlab` (docs/kvlab.md): two tiny models swept over
# the default methods; the figure is a PNG, STEM.json and STEM.csv beside it
# parse and hold one row per model x method with the documented columns
# (quantised points: fewer bytes than the uncompressed one, % of MHA fp32 the
# closed form; eviction points measured), --json prints
# the same document, progress is one stderr line per point with an ETA; bad
# flags are one-line usage errors (exit 2) that write nothing.
#
# usage: bash tests/cli/test_kvlab.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

make_text "$WORK/text.txt" 60
begin "tiny models"
train_tiny "$WORK/text.txt" "mha:--attention mha" "mla:--attention mla"
end

KV="--data $WORK/text.txt --max-tokens 60 --kv-group 4 --kv-residual 2 --threads 2"
begin "kvlab: figure, JSON and CSV of two models x the default methods"
# shellcheck disable=SC2086
run kvlab --model "$WORK/mha" --model "$WORK/mla" $KV --out "$WORK/out/fr.png"
check_error 1 "out: .*/out: No such file or directory" # found before any point is measured
check_absent "$WORK/out/fr.json"
mkdir -p "$WORK/out"
# shellcheck disable=SC2086
run kvlab --model "$WORK/mha" --model "$WORK/mla" $KV --out "$WORK/out/fr.png"
check_ok
check_stdout "best loss x bytes trade: "
[ "$(grep -c '^kvlab \[[0-9]*/16\] .* | ETA ' "$ERRF")" = 16 ] || note "not one progress line per point"
check_no_tmp "$WORK/out"
check_py "bad kvlab outputs" '
import csv, json, sys
d = sys.argv[1]
assert open(d + "/fr.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
j = json.load(open(d + "/fr.json"))
rows = list(csv.DictReader(open(d + "/fr.csv")))
methods = "none,int8,int4,int2,h2o:0.5,h2o:0.25,window:0.5,h2o:0.5+int2".split(",")
assert j["methods"] == ",".join(methods) and j["kv_group"] == 4 and j["kv_residual"] == 2, j
assert len(j["points"]) == 16 and len(rows) == 16, (len(j["points"]), len(rows))
assert list(rows[0].keys()) == ["model", "design", "method", "quant", "evict", "budget", "bytes_per_token",
                                "pct_of_mha_fp32", "loss", "perplexity", "seconds", "status"], list(rows[0].keys())
mha_fp32 = 2 * 2 * 4 * 8 * 4  # layers x (K, V) x heads x head width x fp32
for k, (p, r) in enumerate(zip(j["points"], rows)):
    assert p["design"] == ("mha" if k < 8 else "mla") and p["method"] == methods[k % 8], p
    assert r["design"] == p["design"] and r["method"] == p["method"] and r["model"] == p["model"], (r, p)
    assert p["quant"] == {"int8": "int8", "int4": "int4", "int2": "int2", "h2o:0.5+int2": "int2"}.get(p["method"], "none")
    assert p["evict"] == p["method"].split(":")[0] if ":" in p["method"] else p["evict"] == "none", p
    assert p["status"] == "ok", p  # every method, eviction included, is measured
    if p["status"] == "ok":
        assert abs(p["pct_of_mha_fp32"] - 100 * p["bytes_per_token"] / mha_fp32) < 1e-9, p
        assert abs(float(r["loss"]) - p["loss"]) < 1e-6 * p["loss"] and p["loss"] > 0, (r, p)
        assert abs(p["perplexity"] - 2.718281828459045 ** p["loss"]) < 1e-6 * p["perplexity"], p
    else:
        assert ":" in p["method"] and p["why"] and p["loss"] is None and r["loss"] == "", p
for base in (0, 8):
    none, q = j["points"][base], j["points"][base + 1:base + 4]
    assert none["status"] == "ok" and none["bytes_per_token"] == none["fp32_bytes_per_token"], none
    assert none["bytes_per_token"] > q[0]["bytes_per_token"] > q[1]["bytes_per_token"] > q[2]["bytes_per_token"], q
assert j["points"][0]["pct_of_mha_fp32"] == 100 and j["points"][8]["pct_of_mha_fp32"] < 100
fr = j["frontier"]
assert fr["best_trade"] is not None and fr["best_under"][0]["max_pct_of_mha_fp32"] == 100, fr
best = j["points"][fr["best_under"][0]["point"]]
assert all(best["loss"] <= p["loss"] for p in j["points"] if p["status"] == "ok"), best
assert any(p["hull"] for p in j["points"]) and all(p["pareto"] for p in j["points"] if p["hull"])
' "$WORK/out"
end

begin "kvlab --json: the frontier document on stdout; a bare --out stem gets .png"
# shellcheck disable=SC2086
run kvlab --model "$WORK/mha" $KV --methods none,int4 --out "$WORK/out/two" --json
check_ok
check_exists "$WORK/out/two.png"
check_py "bad --json" '
import json, sys
j = json.load(open(sys.argv[1]))
f = json.load(open(sys.argv[2]))
assert j == f and [p["method"] for p in j["points"]] == ["none", "int4"], j
' "$OUTF" "$WORK/out/two.json"
end

for bad in "--methods int3#--methods: method 'int3'" "--methods h2o:1.5#budget '1.5'" "--methods int4,int4#listed twice" \
    "--kv-group 0#--kv-group must be in 1..256" "--kv-residual -1#--kv-residual must not be negative" \
    "--kv-group 3#--kv-group 3 does not divide" "--context 999#--context 999 exceeds" "--bogus 1#unknown flag"; do
    begin "kvlab ${bad%%#*}: usage error, nothing written"
    # shellcheck disable=SC2086
    run kvlab --model "$WORK/mha" --data "$WORK/text.txt" --out "$WORK/bad.png" ${bad%%#*}
    check_error 2 "${bad#*#}"
    check_absent "$WORK/bad.png"
    check_absent "$WORK/bad.json"
    end
done
begin "kvlab without --model / --data / --out: usage errors"
run kvlab --data "$WORK/text.txt" --out "$WORK/bad.png"
check_error 2 "--model"
run kvlab --model "$WORK/mha" --out "$WORK/bad.png"
check_error 2 "--data"
run kvlab --model "$WORK/mha" --data "$WORK/text.txt"
check_error 2 "--out"
end

finish
