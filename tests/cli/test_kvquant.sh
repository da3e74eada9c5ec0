#!/usr/bin/env bash
# test_kvquant.sh: quantised KV caches from the command line (docs/kvquant.md):
# `eval --kv-*` scores through the real decode path; --kv-quant none there
# gives the plain eval's loss, int8 with a residual covering every window
# too, int4/int2 hold fewer bytes per token and stay close; JSON fields
# loss, perplexity, kv_bytes_per_token, kv_pct_of_fp32 (plain eval --json:
# kv_bytes_per_token); every design; `bench decode --kv-quant`; bad flags
# are one-line usage errors (exit 2).
#
# usage: bash tests/cli/test_kvquant.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

make_text "$WORK/text.txt" 60
train_tiny_designs "$WORK/text.txt"

EV="--data $WORK/text.txt --max-tokens 200 --threads 2 --json"
for d in mha gqa mqa mla lrkv; do
    begin "eval $d: decode path none = plain; int8 + full residual = plain; int4/int2 fewer bytes"
    run eval --model "$WORK/$d" $EV
    check_ok
    cp "$OUTF" "$WORK/$d.plain"
    run eval --model "$WORK/$d" $EV --kv-quant none
    check_ok
    cp "$OUTF" "$WORK/$d.none"
    run eval --model "$WORK/$d" $EV --kv-quant int8 --kv-residual 16
    check_ok
    cp "$OUTF" "$WORK/$d.int8"
    run eval --model "$WORK/$d" $EV --kv-quant int4 --kv-residual 2 --kv-group 4
    check_ok
    cp "$OUTF" "$WORK/$d.int4"
    run eval --model "$WORK/$d" $EV --kv-quant int2 --kv-residual 2 --kv-group 4
    check_ok
    cp "$OUTF" "$WORK/$d.int2"
    check_py "bad eval JSON" '
import json, sys
w = sys.argv[1]
p, n, i8, i4, i2 = (json.loads(open(w + "." + k).read()) for k in ("plain", "none", "int8", "int4", "int2"))
assert "path" not in p and p["kv_bytes_per_token"] > 0, p
fp32 = p["kv_bytes_per_token"]
for j in (n, i8, i4, i2):
    assert j["path"] == "decode" and j["tokens"] == p["tokens"], j
    for k in ("loss", "perplexity", "kv_bytes_per_token", "kv_pct_of_fp32"):
        assert isinstance(j[k], (int, float)) and j[k] > 0, (k, j)
    assert abs(j["kv_pct_of_fp32"] - 100 * j["kv_bytes_per_token"] / fp32) < 1e-2, j
assert abs(n["loss"] - p["loss"]) < 2e-5, (n["loss"], p["loss"])
assert n["kv_bytes_per_token"] == fp32 and n["kv_quant"] == "none"
assert abs(i8["loss"] - p["loss"]) < 2e-5 and i8["kv_bytes_per_token"] == fp32, i8  # context 16 < residual: nothing quantised
assert i4["kv_bytes_per_token"] < 0.6 * fp32 and i2["kv_bytes_per_token"] < i4["kv_bytes_per_token"], (i4, i2)
assert abs(i4["loss"] - p["loss"]) < 0.05 * p["loss"] and abs(i2["loss"] - p["loss"]) < 0.25 * p["loss"], (i4, i2)
' "$WORK/$d"
    end
done

begin "eval --kv-* --verbose: per-layer attention output error vs the full cache (0 for none)"
run eval --model "$WORK/gqa" $EV --kv-quant none --verbose
check_ok
cp "$OUTF" "$WORK/v.none"
run eval --model "$WORK/gqa" $EV --kv-quant int2 --kv-residual 2 --kv-group 4 --verbose
check_ok
check_py "bad --verbose JSON" '
import json, sys
n, q = (json.loads(open(f).read()) for f in sys.argv[1:3])
assert n["layer_output_error"] == [0, 0], n
e = q["layer_output_error"]
assert len(e) == 2 and all(0 < x < 2 for x in e), e
' "$WORK/v.none" "$OUTF"
run eval --model "$WORK/gqa" --data "$WORK/text.txt" --max-tokens 100 --kv-quant int4 --kv-group 4 --verbose
check_ok
check_stdout "attention output vs the full cache, per layer .*: [0-9.e-]+ [0-9.e-]+$"
end

begin "eval --kv-quant: text report names the cache"
run eval --model "$WORK/mha" --data "$WORK/text.txt" --max-tokens 100 --kv-quant int4 --kv-residual 2 --kv-group 4
check_ok
check_stdout "decoded token by token \(KV cache int4: .* bytes/token = .*% of fp32"
end

begin "bench decode --kv-quant int4: bytes per quantised token, JSON fields"
run bench decode --model "$WORK/mha" --decode-context 64 --tokens 4 --iters 1 --kv-quant int4 --kv-group 8 \
    --kv-residual 4 --kv-dtype bf16 --sgemm-n 128 --triad-mb 8 --json
check_ok
check_py "bad bench JSON" '
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["kv_quant"] == "int4" and j["kv_group"] == 8 and j["kv_residual"] == 4, j
# mha: 2 layers, 4 KV heads of 8: keys 4 cells of 4 bytes, values 4 cells of 4 bytes, 4 value scales x 4 bytes,
# 32 key channels x 4 bytes / 8 tokens, per layer
assert j["kv_bytes_per_token_per_position"] == 2 * (16 + 16 + 16 + 16), j
assert 0 < j["kv_bytes_read_per_token"] < 64 * 2 * 64 * 2, j
' "$OUTF"
end

for bad in "--kv-quant int3:--kv-quant must be none, int8, int4 or int2" "--kv-residual -1:--kv-residual must not be negative" \
    "--kv-group 0:--kv-group must be in 1..256" "--kv-quant int4 --kv-group 3:--kv-group 3 does not divide" \
    "--kv-latent row:--kv-latent must be channel or token"; do
    begin "eval ${bad%%:*}: usage error"
    # shellcheck disable=SC2086
    run eval --model "$WORK/mha" --data "$WORK/text.txt" ${bad%%:*}
    check_error 2 "${bad#*:}"
    end
    begin "bench decode ${bad%%:*}: usage error"
    # shellcheck disable=SC2086
    run bench decode --model "$WORK/mha" --decode-context 64 --tokens 4 ${bad%%:*}
    check_error 2 "${bad#*:}"
    end
done

finish
