#!/usr/bin/env bash
# test_bench.sh: `attnlab bench attention|train|prefill|decode|wmat` on tiny
# shapes: each runs, prints its text report, and with --json exactly one JSON
# object with the fields docs/bench.md documents (figures, both ceilings,
# ratios, peak RSS, kernels, load average), consistent with each other;
# ATTNLAB_CPU selects the attention kernel set the report names, an unknown
# value is ignored with one warning; bad flags are one-line usage errors;
# bench/ab.py alternates two binaries (here the same one) pair by pair and
# reports each timing's ratios, and fails in one line on bad input;
# bench/bf16_table.py judges a run by the targets of the bf16 engine it ran
# on (its rounds need PyTorch and minutes: only that choice is run here).
# Timings are not checked (shared, noisy machines): only that they are
# positive and the ratios are what the fields say.
#
# usage: bash tests/cli/test_bench.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

SMALL="--sgemm-n 128 --triad-mb 8 --precision f32"

# common fields and their consistency, for every benchmark's JSON
COMMON="$PY_JSON_UNIQUE"'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, "expected one line, got %d" % len(lines)
j = json.loads(lines[0], object_pairs_hook=unique)
assert j["bench"] == sys.argv[2], j["bench"]
for k in ("threads", "iters", "sgemm_n", "sgemm_gflops", "triad_mb", "triad_gb_per_s", "peak_rss_bytes"):
    assert isinstance(j[k], (int, float)) and j[k] > 0, (k, j.get(k))
assert j["kernels"] in ("avx512", "avx2", "generic"), j["kernels"]
assert isinstance(j["blas_kernels"], str)
for k in ("loadavg_start", "loadavg_end"):
    assert isinstance(j[k], (int, float)), k
assert isinstance(j["noise"], (int, float)) and j["noise"] >= 0, j.get("noise")
def close(a, b):
    assert abs(a - b) <= 1e-4 * max(abs(a), abs(b)) + 1e-9, (a, b)
'

begin "bench attention: text report"
run bench attention --context 96 --heads 4 --head-dim 16 --iters 2 $SMALL
check_ok
check_stdout "forward .* ms .* GFLOP/s .* of sgemm"
check_stdout "backward .* ms .* GFLOP/s .* of sgemm"
check_stdout "sgemm .* GFLOP/s.*triad .* GB/s"
check_stdout "peak RSS"
check_stderr_empty
end

begin "bench attention --json: one object, ratios = GFLOP/s / sgemm"
run bench attention --context 100 --heads 6 --kv-heads 2 --head-dim 24 --iters 2 --json $SMALL
check_ok
check_stderr_empty
check_py "bad attention JSON" "$COMMON"'
for k in ("fwd_ms", "bwd_ms", "fwd_gflops", "bwd_gflops", "fwd_gflops_per_s", "bwd_gflops_per_s", "fwd_ratio",
          "bwd_ratio", "saved_bytes", "workspace_bytes"):
    assert j[k] > 0, k
assert j["heads"] == 6 and j["kv_heads"] == 2 and j["context"] == 100 and j["head_dim"] == 24 and j["causal"] is True
close(j["fwd_ratio"], j["fwd_gflops_per_s"] / j["sgemm_gflops"])
close(j["bwd_ratio"], j["bwd_gflops_per_s"] / j["sgemm_gflops"])
close(j["fwd_gflops_per_s"], j["fwd_gflops"] / (j["fwd_ms"] / 1e3))
close(j["fwd_gflops"], 4 * 6 * 100 * 50.5 * 24 / 1e9)
close(j["bwd_gflops"], 2.5 * j["fwd_gflops"])
close(j["saved_bytes"], 4 * 6 * 100 * 25)
' "$OUTF" attention
end

for lv in avx2 generic; do
    begin "ATTNLAB_CPU=$lv: the report names the $lv kernels"
    ATTNLAB_CPU=$lv run bench attention --context 40 --heads 2 --head-dim 8 --iters 1 --json --score poly $SMALL
    check_ok
    check_stderr_empty
    check_py "kernels is not $lv" "$COMMON"'
assert j["kernels"] == sys.argv[3], j["kernels"]
assert j["score"] == "poly"
' "$OUTF" attention $lv
    end
done

begin "ATTNLAB_CPU=bogus: one warning line, then the detected kernels"
ATTNLAB_CPU=bogus run bench attention --context 40 --heads 2 --head-dim 8 --iters 1 --json $SMALL
check_ok
check_py "stderr is not one warning line" '
import sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1 and lines[0].startswith("attnlab: ATTNLAB_CPU=bogus: unknown kernel set"), lines
' "$ERRF"
check_py "bad JSON" "$COMMON" "$OUTF" attention
end

begin "bench train --json: MFU = model GFLOP/s / sgemm"
run bench train --preset tiny --iters 2 --json $SMALL
check_ok
check_stderr_empty
check_py "bad train JSON" "$COMMON"'
for k in ("step_s_best", "step_s", "tokens_per_s", "model_gflops_per_step", "model_gflops_per_s", "mfu", "mfu_mean"):
    assert j[k] > 0, k
assert j["layers"] == 2 and j["hidden"] == 64 and j["batch"] == 8 and j["context"] == 64, j
close(j["mfu"], j["model_gflops_per_s"] / j["sgemm_gflops"])
close(j["tokens_per_s"], 8 * 64 / j["step_s_best"])
' "$OUTF" train
end

begin "bench train: text report"
run bench train --preset tiny --iters 1 $SMALL
check_ok
check_stdout "ms/step.*tokens/s.*MFU"
check_stdout "peak RSS"
end

begin "bench prefill --json: tokens/s and ratio"
run bench prefill --preset tiny --tokens 80 --iters 2 --json $SMALL
check_ok
check_stderr_empty
check_py "bad prefill JSON" "$COMMON"'
for k in ("ms_best", "ms_mean", "tokens_per_s", "model_gflops", "model_gflops_per_s", "ratio"):
    assert j[k] > 0, k
assert j["tokens"] == 80 and j["layers"] == 2
close(j["ratio"], j["model_gflops_per_s"] / j["sgemm_gflops"])
close(j["tokens_per_s"], 80 / (j["ms_best"] / 1e3))
' "$OUTF" prefill
end

begin "bench prefill: text report (tokens beyond the preset context)"
run bench prefill --preset tiny --tokens 200 --iters 1 $SMALL
check_ok
check_stdout "200 tokens"
check_stdout "tokens/s.*of sgemm"
end

begin "bench decode --json: bandwidth ratio = achieved / triad"
run bench decode --preset tiny --decode-context 64 --tokens 8 --iters 2 --json $SMALL
check_ok
check_stderr_empty
check_py "bad decode JSON" "$COMMON"'
for k in ("tokens_per_s", "ms_per_token", "weight_bytes", "bytes_per_token", "achieved_gb_per_s", "bandwidth_ratio"):
    assert j[k] > 0, k
close(j["bandwidth_ratio"], j["achieved_gb_per_s"] / j["triad_gb_per_s"])
assert j["kv_dtype"] == "F32", j["kv_dtype"]
# the attention alone: part of the token, and the cache read against its time
assert 0 < j["attention_ms_per_token"] < j["ms_per_token"], j
close(j["kv_gb_per_s"], j["kv_bytes_read_per_token"] / j["attention_ms_per_token"] / 1e6)
close(j["kv_bandwidth_ratio"], j["kv_gb_per_s"] / j["triad_gb_per_s"])
' "$OUTF" decode
cp "$OUTF" "$WORK/decode_f32.json"
end

begin "bench decode (text): the attention's share of a token and the cache's read speed"
run bench decode --preset tiny --decode-context 64 --tokens 8 --iters 2 $SMALL
check_ok
check_stdout "attention [0-9.]* ms/token: the KV cache read at [0-9.]* GB/s"
end

begin "bench decode --kv-dtype bf16: half the cache bytes per position"
run bench decode --preset tiny --decode-context 64 --tokens 8 --iters 2 --json --kv-dtype bf16 $SMALL
check_ok
check_py "bad BF16 decode JSON" "$COMMON"'
f = json.load(open(sys.argv[3]))
assert j["kv_dtype"] == "BF16", j["kv_dtype"]
assert j["kv_bytes_per_token_per_position"] * 2 == f["kv_bytes_per_token_per_position"], (j, f)
close(j["bytes_per_token"], j["weight_bytes"] + j["kv_bytes_read_per_token"])
' "$OUTF" decode "$WORK/decode_f32.json"
run bench decode --preset tiny --decode-context 64 --tokens 8 --kv-dtype fp8 $SMALL
check_error 2 "kv-dtype"
end

# ---- bench/torch_peer.py: same fields as attnlab's, for side-by-side comparison ----
PEER=$(dirname "$0")/../../bench/torch_peer.py
if "$PY" -c "import torch" 2>/dev/null; then
    begin "torch_peer.py --json: one object per benchmark with attnlab's field names"
    out=$WORK/peer.json
    "$PY" "$PEER" --json --iters 1 --context 48 --tokens 16 --batch 1 --sgemm-n 128 >"$out" 2>"$WORK/peer.err" ||
        note "torch_peer.py failed: $(tail -n 1 "$WORK/peer.err")"
    run bench attention --context 48 --iters 1 --json $SMALL
    cp "$OUTF" "$WORK/al_attention.json"
    run bench prefill --preset gpt2 --tokens 16 --iters 1 --json $SMALL
    cp "$OUTF" "$WORK/al_prefill.json"
    run bench train --preset tiny --iters 1 --json $SMALL
    cp "$OUTF" "$WORK/al_train.json"
    check_py "peer fields differ from attnlab's" '
import json, sys
peer = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
assert [p["bench"] for p in peer] == ["attention", "prefill", "train"], [p["bench"] for p in peer]
only_attnlab = {"kernels", "triad_mb", "triad_gb_per_s", "saved_bytes", "workspace_bytes"}
for p, name in zip(peer, ("attention", "prefill", "train")):
    al = json.load(open(sys.argv[2] + "/al_" + name + ".json"))
    missing = set(al) - set(p) - only_attnlab
    assert not missing, (name, sorted(missing))
    for k in ("fwd_ratio", "bwd_ratio", "ratio", "mfu", "sgemm_gflops", "peak_rss_bytes"):
        if k in al:
            assert p[k] > 0, (name, k)
assert peer[0]["context"] == 48 and peer[1]["tokens"] == 16 and peer[2]["batch"] == 1
' "$out" "$WORK"
    end
fi

begin "bench --help lists the four benchmarks"
run bench --help
check_ok
check_stdout "attention"
check_stdout "prefill"
check_stdout "decode"
check_stdout "train"
end

for b in attention train prefill decode; do
    begin "bench $b --help"
    run bench $b --help
    check_ok
    check_stdout "^usage: attnlab bench $b"
    check_stdout "--json"
    end
done

begin "bench attention: bad sizes are a usage error"
run bench attention --heads 6 --kv-heads 4
check_error 2 "kv-heads must divide"
check_stdout_empty
end

begin "bench prefill: --tokens 0 is a usage error"
run bench prefill --tokens 0
check_error 2 "tokens must be positive"
end

begin "bench train: unknown flag"
run bench train --frob 1
check_error 2 "unknown flag.*frob"
end

# ---- bench wmat: the weight products by storage and kernel set ----
begin "bench wmat: text report and JSON, every storage and set"
run bench wmat --rows 67 --cols 45 --n 3 --iters 1
check_ok
check_stdout "^W \\[67, 45\\], [0-9]* threads"
for kind in "F32" "BF16" "F16" "BF16 AVX2" "F16 AVX2" "BF16 plain C" "F16 plain C"; do
    check_stdout "^$kind  *[0-9.]*  *[0-9.]*x  *[0-9.]*$"
done
check_stderr_empty
run bench wmat --rows 67 --cols 45 --n 3 --iters 1 --json
check_ok
check_stderr_empty
check_py "bad wmat JSON" "$PY_JSON_UNIQUE"'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0], object_pairs_hook=unique)
assert (j["bench"], j["rows"], j["cols"], j["n"]) == ("wmat", 67, 45, 3), j
assert isinstance(j["avx512"], bool) and j["threads"] > 0, j
for k in ("f32", "bf16", "f16", "bf16_avx2", "f16_avx2", "bf16_portable", "f16_portable"):
    for f in ("matvec_%s_gb_per_s" % k, "matmul_%s_gflops" % k):
        assert isinstance(j[f], (int, float)) and j[f] > 0, (f, j.get(f))
assert len(j) == 6 + 14, sorted(j)
' "$OUTF"
end

begin "bench wmat: bad sizes are usage errors"
run bench wmat --rows 0
check_error 2 "rows.*must be positive"
run bench wmat --n 70000
check_error 2 "1..65536"
end

# ---- bench/bf16_table.py: which of issue 14's targets judge a run ----
begin "bf16_table.py: the AMX table on amx, the 1.6x row on the no-AMX engines, none on emulated"
check_py "bf16_table.py judges a run by the wrong targets" '
import sys
sys.path.insert(0, sys.argv[1])
import bf16_table as t
heading, amx = t.targets_for({"amx"}, "/map")
assert [n for n, _ in amx] == [n for n, _ in t.TARGETS] + [t.MAP_TARGET[0]], heading
assert len(t.targets_for({"amx"}, None)[1]) == len(t.TARGETS)
for engines in ({"onednn"}, {"avx512-bf16"}, {"onednn", "avx512-bf16"}):
    heading, rows = t.targets_for(engines, "/map")
    assert [n for n, _ in rows] == [t.NO_AMX_TARGETS[0][0]] and "no AMX" in heading, (engines, heading)
    (name, ok), = rows
    assert "1.6x" in name and ok({}, {"train_vs_f32": 1.6}) and not ok({}, {"train_vs_f32": 1.59}), name
for engines in ({"emulated"}, {"amx", "onednn"}, set()):
    heading, rows = t.targets_for(engines, "/map")
    assert rows == [] and heading.startswith("no target"), (engines, heading)
assert t.shown(None, "%.1f") == "-" and t.shown(2072.9, "%.1f", 1e-3) == "2.1"
' "$(dirname "$0")/../../bench"
end

# ---- bench/ab.py: two binaries alternated pair by pair ----
AB=$(dirname "$0")/../../bench/ab.py
begin "ab.py --json: pairs in alternated order, every timing field, ratios new / old"
timeout 120 "$PY" "$AB" "$BIN" "$BIN" --pairs 3 --json -- bench attention --context 48 --iters 1 $SMALL \
    >"$WORK/ab.json" 2>"$WORK/ab.err" || note "ab.py failed: $(tail -n 1 "$WORK/ab.err")"
check_py "ab.py's JSON is wrong" '
import json, math, sys
j = json.loads(open(sys.argv[1]).read())
assert j["fields"] == ["bwd_ms", "fwd_ms"], j["fields"]
assert len(j["pairs"]) == 3 and j["args"][:2] == ["bench", "attention"], j
for p in j["pairs"]:
    for f in j["fields"]:
        assert p[f]["old"] > 0 and p[f]["new"] > 0, p
        assert math.isclose(p[f]["ratio"], p[f]["new"] / p[f]["old"]), p
for f in j["fields"]:
    s, r = j["summary"][f], sorted(p[f]["ratio"] for p in j["pairs"])
    assert s["median_ratio"] == r[1] and s["min_ratio"] == r[0] and s["max_ratio"] == r[2], s
    assert s["new_lower"] == sum(p[f]["new"] < p[f]["old"] for p in j["pairs"]) and s["pairs"] == 3, s
' "$WORK/ab.json"
end

begin "ab.py: the timings of prefill and decode found by their names"
for bb in "prefill --tokens 16:ms_best,ms_mean" "decode:attention_ms_per_token,ms_per_token"; do
    timeout 120 "$PY" "$AB" "$BIN" "$BIN" --pairs 1 --json -- bench ${bb%%:*} --preset tiny --iters 1 $SMALL \
        >"$WORK/ab2.json" 2>"$WORK/ab2.err" || note "ab.py failed: $(tail -n 1 "$WORK/ab2.err")"
    check_py "ab.py found other fields for ${bb%%:*}" '
import json, sys
assert json.load(open(sys.argv[1]))["fields"] == sys.argv[2].split(","), open(sys.argv[1]).read()[:300]
' "$WORK/ab2.json" "${bb##*:}"
done
end

begin "ab.py: a named field, the text report"
timeout 120 "$PY" "$AB" "$BIN" "$BIN" --pairs 1 --field step_s_best -- bench train --preset tiny --iters 1 $SMALL \
    >"$OUTF" 2>"$ERRF" || note "ab.py failed: $(tail -n 1 "$ERRF")"
check_stdout "^pair 1: step_s_best .* -> .* \\([0-9.]*x\\)$"
check_stdout "^step_s_best: new/old median [0-9.]* \\([0-9.]*-[0-9.]*\\), new lower in [01] of 1 pairs$"
end

begin "ab.py: no benchmark, a failing benchmark, a missing field"
"$PY" "$AB" "$BIN" "$BIN" >"$OUTF" 2>"$ERRF"
[ $? -eq 2 ] || note "no benchmark: expected exit 2"
grep -q "give the benchmark after --" "$ERRF" || note "no benchmark: message"
"$PY" "$AB" "$BIN" "$BIN" --pairs 1 -- bench frob >"$OUTF" 2>"$ERRF"
[ $? -eq 1 ] || note "failing benchmark: expected exit 1"
grep -q "^ab: .*unknown benchmark 'frob'" "$ERRF" || note "failing benchmark: message"
"$PY" "$AB" "$BIN" "$BIN" --pairs 1 --field no_such -- bench attention --context 48 --iters 1 $SMALL >"$OUTF" 2>"$ERRF"
[ $? -eq 1 ] || note "missing field: expected exit 1"
grep -q "^ab: field no_such is missing" "$ERRF" || note "missing field: message"
end

finish
