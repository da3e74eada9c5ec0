#!/usr/bin/env bash
# test_bf16.sh: --weights bf16 on the inference commands, for attnlab's own
# models of the five designs (tiny, trained a few steps): generate (decode
# with BF16 weights) prints its tokens; eval (forward) scores within a
# percent of the fp32 loss and --verbose names the BF16 copy; bench decode
# --json reports "weights": "BF16" and about half the fp32 weight bytes per
# token, with bytes per token = weights + cache read; bench prefill --json
# reports the weights too. --weights f8 is a one-line usage error (exit 2)
# on every command, and --help lists the flag. (Hugging Face checkpoints:
# test_hf.sh.)
#
# usage: bash tests/cli/test_bf16.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 300
SMALL=(--sgemm-n 128 --triad-mb 8 --iters 1 --precision f32)
DESIGNS="mha gqa mqa mla lrkv lrkv0"

begin "setup: tiny models of every design"
train_tiny "$DATA" "mha:--attention mha" "gqa:--attention gqa --kv-heads 2" "mqa:--attention mqa --kv-heads 1" \
    "mla:--attention mla --kv-lora-rank 8 --qk-rope-dim 4 --q-lora-rank 8" "lrkv:--attention lrkv --lrkv-rank 4" \
    "lrkv0:--attention lrkv --lrkv-rank 0 --tied"
end

for m in $DESIGNS; do
    begin "$m: generate and eval with --weights bf16"
    run generate --ids --model "$WORK/$m" --prompt "the cat" -n 6 --temperature 0 --weights bf16
    check_ok
    check_stdout "^[0-9]+( [0-9]+){5}$"
    run eval --model "$WORK/$m" --data "$DATA" --context 16 --max-tokens 400 --json
    check_ok
    cp "$OUTF" "$WORK/$m.f32.json"
    run eval --model "$WORK/$m" --data "$DATA" --context 16 --max-tokens 400 --json --weights bf16 --precision f32
    check_ok
    check_stderr_empty
    check_py "bf16 loss is not within 1% of the fp32 loss" '
import json, math, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["tokens"] == b["tokens"] == 400, (a["tokens"], b["tokens"])
assert math.isfinite(b["loss"]) and abs(a["loss"] - b["loss"]) <= 0.01 * a["loss"], (a["loss"], b["loss"])
' "$WORK/$m.f32.json" "$OUTF"
    end
done

begin "eval --verbose: the weights are the BF16 copy"
run eval --model "$WORK/mha" --data "$DATA" --context 16 --max-tokens 100 --verbose
check_ok
check_stdout "memory: weights [0-9.]+ MB \\(fp32 arena\\)"
run eval --model "$WORK/mha" --data "$DATA" --context 16 --max-tokens 100 --verbose --weights bf16
check_ok
check_stdout "memory: weights [0-9.]+ MB \\(BF16 copy of the fp32 arena\\)"
end

begin "bench decode --json --weights bf16: BF16 bytes per token"
run bench decode --preset tiny --decode-context 64 --tokens 4 --json "${SMALL[@]}"
check_ok
cp "$OUTF" "$WORK/dec.f32.json"
run bench decode --preset tiny --decode-context 64 --tokens 4 --json --weights bf16 "${SMALL[@]}"
check_ok
check_stderr_empty
check_py "bad BF16 decode JSON" '
import json, sys
a = json.load(open(sys.argv[1]))
lines = open(sys.argv[2]).read().splitlines()
assert len(lines) == 1, lines
b = json.loads(lines[0])
assert a["weights"] == "F32" and b["weights"] == "BF16", (a["weights"], b["weights"])
# the tiny preset: 2 layers, hidden 64, untied 256-byte vocabulary; matrices at 2 bytes, norm gains at 4
d, L, V, f = 64, 2, 256, a["weight_bytes"]
assert 0.45 * f < b["weight_bytes"] < 0.55 * f, (f, b["weight_bytes"])
vec = (2 * L + 1) * d * 4
assert b["weight_bytes"] == (f - vec) // 2 + vec, (f, b["weight_bytes"])
assert b["kv_bytes_read_per_token"] == a["kv_bytes_read_per_token"]
assert abs(b["bytes_per_token"] - (b["weight_bytes"] + b["kv_bytes_read_per_token"])) <= 1e-5 * b["bytes_per_token"]
assert b["tokens_per_s"] > 0 and b["achieved_gb_per_s"] > 0
' "$WORK/dec.f32.json" "$OUTF"
end

begin "bench decode --model --weights bf16 (lrkv): text report names the weights"
run bench decode --model "$WORK/lrkv" --decode-context 32 --tokens 4 --weights bf16 "${SMALL[@]}"
check_ok
check_stdout "weights: BF16, converted from fp32"
check_stdout "tokens/s"
end

begin "bench prefill --json --weights bf16"
run bench prefill --preset tiny --tokens 40 --json --weights bf16 "${SMALL[@]}"
check_ok
check_py "prefill JSON lacks weights BF16" '
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["weights"] == "BF16" and j["tokens_per_s"] > 0, j
' "$OUTF"
end

begin "--weights f8: one-line usage error, exit 2, nothing on stdout"
for args in "generate --model $WORK/mha --prompt x" "eval --model $WORK/mha" "bench decode --preset tiny" \
    "bench prefill --preset tiny"; do
    # shellcheck disable=SC2086
    run $args --weights f8
    check_error 2 "--weights must be f32 or bf16, got 'f8'"
    check_stdout_empty
done
end

begin "--help lists --weights"
for cmd in generate eval "bench decode" "bench prefill"; do
    # shellcheck disable=SC2086
    run $cmd --help
    check_ok
    check_stdout "--weights S +f32 \\(default\\) or bf16"
done
end

finish
