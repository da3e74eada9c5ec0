#!/usr/bin/env bash
# test_kvevict.sh: evicted KV caches from the command line (docs/kveviction.md):
# `eval --kv-evict` scores through the real decode path; budget 1 gives the
# plain eval's loss and bytes for every policy and design; window, h2o and
# snapkv hold the closed form of bytes per token; --verbose reports the
# recall of attention mass per layer (1 at budget 1); `bench decode
# --kv-evict` reads fewer bytes; a Hugging Face checkpoint evicts too (budget
# 1 = plain eval); bad flags are one-line usage errors (exit 2).
#
# usage: bash tests/cli/test_kvevict.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

REF=$(readlink -f "$(dirname "$0")/../ref")
make_text "$WORK/text.txt" 60
train_tiny_designs "$WORK/text.txt"

# 200 predictions in windows of 16: 12 full windows and one of 8
EV="--data $WORK/text.txt --max-tokens 200 --threads 2 --json"
for d in mha gqa mqa mla lrkv; do
    begin "eval $d --kv-evict: budget 1 = plain; window/h2o/snapkv hold the closed form"
    run eval --model "$WORK/$d" $EV
    check_ok
    cp "$OUTF" "$WORK/$d.plain"
    for m in window h2o snapkv; do
        run eval --model "$WORK/$d" $EV --kv-evict $m --kv-budget 1
        check_ok
        cp "$OUTF" "$WORK/$d.$m.1"
    done
    run eval --model "$WORK/$d" $EV --kv-evict window --kv-budget 0.5
    check_ok
    cp "$OUTF" "$WORK/$d.window"
    run eval --model "$WORK/$d" $EV --kv-evict h2o --kv-budget 4 --kv-sinks 1
    check_ok
    cp "$OUTF" "$WORK/$d.h2o"
    run eval --model "$WORK/$d" $EV --kv-evict snapkv --kv-budget 0.5
    check_ok
    cp "$OUTF" "$WORK/$d.snapkv"
    check_py "bad eval JSON" '
import json, sys
w = sys.argv[1]
p = json.loads(open(w + ".plain").read())
fp32 = p["kv_bytes_per_token"]
for m in ("window", "h2o", "snapkv"):
    j = json.loads(open(w + "." + m + ".1").read())
    assert j["path"] == "decode" and j["kv_evict"] == m and j["kv_budget"] == 1, j
    assert abs(j["loss"] - p["loss"]) < 2e-5 and j["kv_bytes_per_token"] == fp32, (m, j, p)
win, h2o, snap = (json.loads(open(w + "." + k).read()) for k in ("window", "h2o", "snapkv"))
# held at each window end per layer: window 0.5 of 16 = 8 (of 8: 4); h2o count 4; snapkv half the 8-token prompt + 8 after
for j, held in ((win, 12 * 8 + 4), (h2o, 12 * 4 + 4), (snap, 12 * (4 + 8) + 4)):
    want = held / 200 * fp32
    assert abs(j["kv_bytes_per_token"] - want) < 0.01, (j, want)
    assert abs(j["kv_pct_of_fp32"] - 100 * want / fp32) < 1e-2, j
    assert j["tokens"] == 200 and j["loss"] > 0 and j["perplexity"] > 1, j
assert h2o["kv_sinks"] == 1 and win["kv_sinks"] == 4 and snap["kv_sinks"] == 0 and snap["kv_prompt"] == 8, (h2o, win, snap)
assert abs(win["loss"] - p["loss"]) > 1e-6, "window 0.5 changes nothing"
' "$WORK/$d"
    end
done

begin "eval --kv-evict --verbose: layer_mass_recall per layer (1 at budget 1, below 1 when evicting)"
run eval --model "$WORK/gqa" $EV --kv-evict h2o --kv-budget 1 --verbose
check_ok
cp "$OUTF" "$WORK/v.one"
run eval --model "$WORK/gqa" $EV --kv-evict h2o --kv-budget 0.25 --kv-layer-budget pyramid --verbose
check_ok
check_py "bad --verbose JSON" '
import json, sys
one, q = (json.loads(open(f).read()) for f in sys.argv[1:3])
assert one["layer_mass_recall"] == [1, 1] and one["layer_output_error"] == [0, 0], one
r = q["layer_mass_recall"]
assert len(r) == 2 and all(0.2 < x < 1 for x in r), r
assert q["kv_layer_budget"] == "pyramid", q
' "$WORK/v.one" "$OUTF"
run eval --model "$WORK/gqa" --data "$WORK/text.txt" --max-tokens 100 --kv-evict window --kv-budget 0.5 --verbose
check_ok
check_stdout "recall of attention mass by the kept keys, per layer .*: 0\.[0-9]+ 0\.[0-9]+$"
check_stdout "decoded token by token \(KV cache none, evicted window at budget 0.5 with 4 sinks"
end

begin "eval --kv-evict h2o --kv-quant int2 (MiniKV): fewer bytes than either alone, every design"
for d in mha gqa mqa mla lrkv; do
    run eval --model "$WORK/$d" $EV --kv-evict h2o --kv-budget 0.5 --kv-quant int2 --kv-group 4 --kv-residual 2
    check_ok
    cp "$OUTF" "$WORK/$d.minikv"
    run eval --model "$WORK/$d" $EV --kv-quant int2 --kv-group 4 --kv-residual 2
    check_ok
    check_py "bad h2o + int2 JSON ($d)" '
import json, sys
w = sys.argv[1]
p, h, mk, q = (json.loads(open(f).read()) for f in (w + ".plain", w + ".h2o", w + ".minikv", sys.argv[2]))
assert mk["kv_evict"] == "h2o" and mk["kv_quant"] == "int2", mk
assert 0 < mk["kv_bytes_per_token"] < q["kv_bytes_per_token"] and mk["kv_bytes_per_token"] < 0.5 * p["kv_bytes_per_token"], (mk, q)
assert abs(mk["loss"] - p["loss"]) < 0.25 * p["loss"], (mk, p)
' "$WORK/$d" "$OUTF"
done
end

begin "bench decode --kv-evict h2o: the bytes read count the positions held"
run bench decode --model "$WORK/mha" --decode-context 64 --tokens 4 --iters 1 --sgemm-n 128 --triad-mb 8 --json
check_ok
cp "$OUTF" "$WORK/b.none"
run bench decode --model "$WORK/mha" --decode-context 64 --tokens 4 --iters 1 --sgemm-n 128 --triad-mb 8 --json \
    --kv-evict h2o --kv-budget 16
check_ok
check_py "bad bench JSON" '
import json, sys
n, e = (json.loads(open(f).read()) for f in sys.argv[1:3])
assert e["kv_evict"] == "h2o" and e["kv_budget"] == 16 and n["kv_evict"] == "none", e
# 16 positions held per layer instead of 61..64
assert abs(e["kv_bytes_read_per_token"] - 16 / 62.5 * n["kv_bytes_read_per_token"]) < 1, (e, n)
' "$WORK/b.none" "$OUTF"
end

begin "generate --kv-evict: budget 1 = plain text; h2o holds its budget at the end; with int2 too"
G="--model $WORK/mha --prompt the_cat -n 8 --temperature 0 --threads 2" # 15 of the 16-token context
run generate $G
check_ok
cp "$OUTF" "$WORK/g.plain"
run generate $G --kv-evict snapkv --kv-budget 1
check_ok
cmp -s "$OUTF" "$WORK/g.plain" || note "snapkv at budget 1 generates other text"
run generate $G --kv-evict window --kv-budget 1
check_ok
cmp -s "$OUTF" "$WORK/g.plain" || note "window at budget 1 generates other text"
run generate $G --kv-evict h2o --kv-budget 8
check_ok
# mha: 2 layers x 8 positions x 64 values (4 KV heads of 8, keys and values) x 4 bytes
check_stderr "KV cache [0-9]+ bytes \(4096 held at the end\)"
run generate $G --kv-evict h2o --kv-budget 0.5 --kv-quant int2 --kv-group 4 --kv-residual 2
check_ok
run generate $G --kv-evict h2o --kv-budget 0
check_error 2 "--kv-budget must be"
end

begin "a Hugging Face checkpoint (tiny random Llama, BF16): budget 1 = plain eval; h2o and h2o + int4 hold fewer bytes"
"$PY" - "$REF" "$WORK/llama" <<'PYEOF' || note "make_hf_checkpoint"
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import make_hf_checkpoint as M
cfg = M.make_config("llama")
M.write_checkpoint(sys.argv[2], cfg, M.random_weights(cfg, np.random.default_rng(5)), "BF16", 1)
PYEOF
HV="--data $WORK/text.txt --context 32 --max-tokens 96 --threads 2 --json"
run eval --model "$WORK/llama" $HV
check_ok
cp "$OUTF" "$WORK/hf.plain"
for m in "h2o --kv-budget 1" "h2o --kv-budget 0.5" "h2o --kv-budget 0.5 --kv-quant int4 --kv-group 8 --kv-residual 4"; do
    # shellcheck disable=SC2086
    run eval --model "$WORK/llama" $HV --kv-evict $m
    check_ok
    cp "$OUTF" "$WORK/hf.$(echo $m | tr -cd 'a-z0-9.')"
done
check_py "bad HF eviction JSON" '
import json, sys, glob
w = sys.argv[1]
p = json.loads(open(w + "/hf.plain").read())
one, half, q = (json.loads(open(w + "/hf.h2o" + k).read()) for k in ("kvbudget1", "kvbudget0.5", "kvbudget0.5kvquantint4kvgroup8kvresidual4"))
assert abs(one["loss"] - p["loss"]) < 2e-5 and one["kv_bytes_per_token"] == p["kv_bytes_per_token"], (one, p)
assert half["kv_bytes_per_token"] < 0.6 * p["kv_bytes_per_token"] and q["kv_bytes_per_token"] < half["kv_bytes_per_token"], (half, q)
assert abs(half["loss"] - p["loss"]) < 0.5 and abs(q["loss"] - p["loss"]) < 0.5, (half, q, p)
' "$WORK"
end

for bad in "--kv-evict lru:--kv-evict must be none, window, h2o or snapkv" "--kv-evict h2o --kv-budget 0:--kv-budget must be" \
    "--kv-evict h2o --kv-budget 1.5:--kv-budget must be" "--kv-evict h2o --kv-budget -2:--kv-budget must be" \
    "--kv-evict window --kv-sinks -1:--kv-sinks must not be negative" \
    "--kv-evict snapkv --kv-prompt 17:--kv-prompt must be in 1..16" \
    "--kv-evict h2o --kv-layer-budget cone:--kv-layer-budget must be uniform or pyramid" \
    "--kv-evict h2o --kv-quant int2 --kv-group 3:--kv-group 3 does not divide"; do
    begin "eval ${bad%%:*}: usage error"
    # shellcheck disable=SC2086
    run eval --model "$WORK/mha" --data "$WORK/text.txt" ${bad%%:*}
    check_error 2 "${bad#*:}"
    end
done
begin "bench decode --kv-evict lru: usage error"
run bench decode --model "$WORK/mha" --decode-context 64 --tokens 4 --kv-evict lru
check_error 2 "--kv-evict must be none, window, h2o or snapkv"
end

finish
