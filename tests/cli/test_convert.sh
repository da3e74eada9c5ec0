#!/usr/bin/env bash
# test_convert.sh: `attnlab convert` (docs/convert.md) on a trained MHA run
# and on a tiny random Hugging Face Llama checkpoint (GQA, BF16):
#  - every target (gqa, mqa, mla, lrkv) converts; the result is an fp32 run
#    directory that eval, info, generate, attnmap, heads and explore load;
#    convert.json holds the per-layer errors and the held-out losses;
#  - LRKV at r = d_h keeps the source's held-out loss; the converted MLA's
#    loss is far below a randomly initialised MLA of the same shape;
#  - every converted model (from the MHA run and from the HF checkpoint) also
#    loads in compare and bench decode, and passes decode == forward (eval's
#    loss through the KV-cache decoder, --kv-quant none, equals its forward's);
#  - the key and value map errors in convert.json fall as LRKV's r and MLA's
#    d_c grow on the trained model, and over the whole range the output error
#    and the held-out loss too;
#  - the HF conversion carries tokenizer.json and needs --calibration;
#  - bad input (a source that is not MHA/GQA, ranks beyond the shapes, odd
#    RoPE dims or an odd LRKV rank, a target equal to the source, an existing
#    DST, an unknown design, another design's flag, a context beyond the
#    source's, named with the source's; MQA, LRKV and vision
#    sources from tests/fixtures/v1) is one stderr line, exit 1 or 2, and
#    nothing at DST.
#
# usage: bash tests/cli/test_convert.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"
REF=$(readlink -f "$(dirname "$0")/../ref")
FIX=$(readlink -f "$(dirname "$0")/../fixtures/v1")
SMALL="--sgemm-n 128 --triad-mb 8 --precision f32"

DATA=$WORK/data.txt
make_text "$DATA" 400

# json FILE EXPR: prints the Python expression EXPR of the JSON object j in FILE
json() { "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# more_commands DIR OTHER: DIR (a converted model) passes decode == forward on its validation split (eval's loss
# through the KV-cache decoder equals the forward's), is compared with OTHER, and runs bench decode
more_commands() {
    run eval --model "$1" --max-tokens 300 --json
    check_ok
    local forward
    forward=$(json "$OUTF" 'j["loss"]')
    run eval --model "$1" --max-tokens 300 --kv-quant none --json
    check_ok
    check_py "decode == forward" 'import json,sys
j=json.load(open(sys.argv[1]))
assert j["path"] == "decode" and abs(j["loss"] - float(sys.argv[2])) < 1e-4, (j["loss"], sys.argv[2])' \
        "$OUTF" "$forward"
    run compare --model "$2" --model "$1" --text "$DATA" --max-tokens 30 --out "$1-cmp.png"
    check_ok
    check_exists "$1-cmp.png"
    run bench decode --model "$1" --decode-context 48 --tokens 8 --iters 2 --json $SMALL
    check_ok
    check_py "bench decode" 'import json,sys
j=json.load(open(sys.argv[1])); assert j["tokens_per_s"] > 0 and j["bytes_per_token"] > 0, j' "$OUTF"
}

begin "setup: a trained MHA run"
timeout 300 "$BIN" train --preset tiny --data "$DATA" --steps 50 --precision f32 --quiet --out "$WORK/mha" \
    >"$OUTF" 2>"$ERRF" </dev/null || note "train failed: $(tail -n 1 "$ERRF")"
check_exists "$WORK/mha/model.safetensors"
end

for t in gqa mqa mla lrkv; do
    begin "convert to $t: report, convert.json, a run directory every command loads"
    run convert --model "$WORK/mha" --to "$t" --out "$WORK/$t" --calibration-tokens 2048 --heldout-tokens 2048
    check_ok
    check_stdout "held-out loss: source [0-9.]+, converted [0-9.]+"
    check_stdout "% of MHA"
    check_py "convert.json" 'import json,sys,math
j=json.load(open(sys.argv[1]))
assert j["target_attention"]==sys.argv[2] and len(j["layers"])==2, j.keys()
for l in j["layers"]:
    assert len(l["key_error"])==4 and len(l["value_error"])==4 and 0 < l["output_error"] < 2, l
assert math.isfinite(j["heldout_loss_converted"]) and j["heldout_tokens"] > 500' "$WORK/$t/convert.json" "$t"
    run info --model "$WORK/$t" --json
    check_ok
    check_stdout "\"attention\":\"$t\""
    run eval --model "$WORK/$t" --max-tokens 500
    check_ok
    check_stdout "validation split"
    run generate --model "$WORK/$t" --prompt "the" -n 8 --temperature 0
    check_ok
    run attnmap --model "$WORK/$t" --text "$DATA" --layer 1 --head 0 --max-tokens 40 --out "$WORK/$t-map.png"
    check_ok
    run explore --model "$WORK/$t" --text "$DATA" --max-tokens 24 --out "$WORK/$t-ex.html"
    check_ok
    more_commands "$WORK/$t" "$WORK/mha"
    check_no_tmp "$WORK"
    end
done

begin "heads across the converted models"
run heads --model "$WORK/mha" --model "$WORK/gqa" --model "$WORK/mla" --model "$WORK/lrkv" --out "$WORK/heads.png"
check_ok
check_exists "$WORK/heads.png"
end

begin "heads with the converted MQA"
run heads --model "$WORK/mha" --model "$WORK/mqa" --out "$WORK/heads-mqa.png"
check_ok
check_exists "$WORK/heads-mqa.png"
end

begin "lrkv at r = d_h keeps the source's held-out loss"
run convert --model "$WORK/mha" --to lrkv --lrkv-rank 16 --out "$WORK/lrkv16" --calibration-tokens 1024 --heldout-tokens 2048
check_ok
check_py "loss kept" 'import json,sys
j=json.load(open(sys.argv[1]))
assert abs(j["heldout_loss_converted"]-j["heldout_loss_source"]) < 1e-4, j
assert max(max(l["key_error"]+l["value_error"]) for l in j["layers"]) < 1e-5' "$WORK/lrkv16/convert.json"
end

begin "the errors fall as the rank grows: lrkv r 4, 8, 16 and mla d_c 8, 16, 32 (trained model)"
for r in 4 8; do
    run convert --model "$WORK/mha" --to lrkv --lrkv-rank $r --out "$WORK/lrkv$r" --calibration-tokens 1024 \
        --heldout-tokens 2048
    check_ok
done
for c in 8 16 32; do
    run convert --model "$WORK/mha" --to mla --kv-lora-rank $c --qk-rope-dim 8 --out "$WORK/mla_c$c" \
        --calibration-tokens 1024 --heldout-tokens 2048
    check_ok
done
check_py "errors fall with the rank" 'import json,sys
def means(path):
    j = json.load(open(path))
    m = lambda k: sum(sum(l[k]) / len(l[k]) for l in j["layers"]) / len(j["layers"])
    return m("key_error"), m("value_error"), sum(l["output_error"] for l in j["layers"]), j["heldout_loss_converted"]
for names in (sys.argv[1:4], sys.argv[4:7]):
    e = [means(p) for p in names]
    print("  " + "; ".join("key %.4f value %.4f output %.4f loss %.4f" % x for x in e), file=sys.stderr)
    for a, b in zip(e, e[1:]):
        assert b[0] <= a[0] and b[1] < a[1], (names, e)
    # the output error and the loss over the whole range only: MLA output errors were seen flat from d_c 16 to 32
    # (0.740, 0.742; the shared k_pe and the dropped rotation dominate there), though its map errors fall
    assert e[-1][2] < e[0][2] and e[-1][3] < e[0][3], (names, e)' \
    "$WORK/lrkv4/convert.json" "$WORK/lrkv8/convert.json" "$WORK/lrkv16/convert.json" \
    "$WORK/mla_c8/convert.json" "$WORK/mla_c16/convert.json" "$WORK/mla_c32/convert.json"
end

begin "mla right after conversion: far below a random MLA of its shape"
mla_theta=$(json "$WORK/mla/config.json" 'j["rope_theta"]')
timeout 120 "$BIN" train --preset tiny --data "$DATA" --attention mla --kv-lora-rank 16 --qk-rope-dim 8 \
    --qk-nope-dim 8 --v-head-dim 16 --rope-theta "$mla_theta" --steps 1 --warmup 0 --lr 1e-12 --precision f32 \
    --quiet --out "$WORK/mla_random" >"$OUTF" 2>"$ERRF" </dev/null || note "random mla: $(tail -n 1 "$ERRF")"
run eval --model "$WORK/mla_random" --max-tokens 2048 --json
check_ok
random=$(json "$OUTF" 'j["loss"]')
run eval --model "$WORK/mla" --max-tokens 2048 --json
check_ok
converted=$(json "$OUTF" 'j["loss"]')
source=$(json "$WORK/mla/convert.json" 'j["heldout_loss_source"]')
echo "  mla held-out loss: source $source, converted $converted, random init $random" >&2
check_py "mla far below random" 'import sys
s, c, r = map(float, sys.argv[1:4])
assert r - c > 1.0 and c < s + 0.5 * (r - s), (s, c, r)' "$source" "$converted" "$random"
end

begin "setup: a tiny random HF Llama checkpoint (GQA 4/2, BF16)"
"$PY" - "$REF" "$WORK/llama" <<'PYEOF' || note "make_hf_checkpoint"
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import make_hf_checkpoint as M
cfg = M.make_config("llama")
M.write_checkpoint(sys.argv[2], cfg, M.random_weights(cfg, np.random.default_rng(3)), "BF16", 1)
PYEOF
check_exists "$WORK/llama/tokenizer.json"
end

for t in mqa mla lrkv; do
    begin "HF llama to $t: carries tokenizer.json, loads everywhere"
    run convert --model "$WORK/llama" --to "$t" --out "$WORK/hf_$t" --calibration "$DATA" --context 32 \
        --calibration-tokens 1024 --heldout-tokens 512
    check_ok
    check_same_file "$WORK/llama/tokenizer.json" "$WORK/hf_$t/tokenizer.json"
    check_py "tokenizer vocab" 'import json,sys
j=json.load(open(sys.argv[1])); assert j["vocab_size"]==300 and j["attnlab"]["tokenizer_vocab"] is True, j' \
        "$WORK/hf_$t/config.json"
    run eval --model "$WORK/hf_$t" --max-tokens 200
    check_ok
    check_stdout "nats/token"
    run generate --ids --model "$WORK/hf_$t" --prompt "the" -n 4 --temperature 0
    check_ok
    run info --model "$WORK/hf_$t"
    check_ok
    run attnmap --model "$WORK/hf_$t" --text "$DATA" --layer 0 --head 1 --max-tokens 30 --out "$WORK/hf_$t.png"
    check_ok
    run heads --model "$WORK/hf_$t" --out "$WORK/hf_$t-heads.png"
    check_ok
    run explore --model "$WORK/hf_$t" --text "$DATA" --max-tokens 20 --out "$WORK/hf_$t.html"
    check_ok
    more_commands "$WORK/hf_$t" "$WORK/llama"
    end
done

begin "HF checkpoint without --calibration is a usage error"
run convert --model "$WORK/llama" --to mla --out "$WORK/nocal"
check_error 2 "give --calibration FILE"
check_absent "$WORK/nocal"
end

# bad NAME STATUS REGEX ARGS...: one line, the status, nothing at $WORK/bad
bad() {
    local name=$1 status=$2 regex=$3
    shift 3
    begin "bad input: $name"
    run convert --out "$WORK/bad" "$@"
    check_error "$status" "$regex"
    check_stdout_empty
    check_absent "$WORK/bad"
    check_no_tmp "$WORK"
    end
}
bad "source not MHA/GQA" 2 "starts from mha or gqa" --model "$WORK/mla" --to lrkv
bad "lrkv rank above head_dim" 2 "lrkv_rank 18 exceeds head_dim 16" --model "$WORK/mha" --to lrkv --lrkv-rank 18
bad "odd rope dims" 2 "qk-rope-dim must be even" --model "$WORK/mha" --to mla --qk-rope-dim 5
bad "latent rank above the shapes" 2 "kv-lora-rank must be in 1..64" --model "$WORK/mha" --to mla --kv-lora-rank 100
bad "target equal to the source" 2 "equals the source" --model "$WORK/llama" --to gqa --kv-heads 2 --calibration "$DATA"
bad "target equal to the source (mha)" 2 "cannot be a conversion's target" --model "$WORK/mha" --to mha
bad "unknown design" 2 "--to must be one of" --model "$WORK/mha" --to xyz
bad "another design's flag" 2 "--lrkv-rank applies only to --to lrkv" --model "$WORK/mha" --to mla --lrkv-rank 4
bad "odd lrkv rank" 2 "lrkv_rank must be even" --model "$WORK/mha" --to lrkv --lrkv-rank 5
bad "an MQA source" 2 "attention is mqa; conversion starts from mha or gqa" --model "$FIX/mqa" --to mla
bad "an MQA source to MQA" 2 "starts from mha or gqa" --model "$FIX/mqa" --to mqa
bad "an LRKV source" 2 "attention is lrkv; conversion starts from mha or gqa" --model "$FIX/lrkv" --to gqa
bad "a vision source" 2 "the source is a vision model" --model "$FIX/vit-relu" --to mqa
bad "mqa with --kv-heads" 2 "--kv-heads applies only to --to gqa" --model "$WORK/mha" --to mqa --kv-heads 2
bad "missing source" 1 "." --model "$WORK/nothing" --to gqa
bad "a context beyond the source's" 2 "--context 65 exceeds the source's 64" --model "$WORK/mha" --to mla --context 65
mkdir -p "$WORK/exists"
begin "an existing DST is refused and left alone"
run convert --model "$WORK/mha" --to gqa --out "$WORK/exists"
check_error 1 "exists"
[ -z "$(ls -A "$WORK/exists")" ] || note "DST was written into"
end

finish
