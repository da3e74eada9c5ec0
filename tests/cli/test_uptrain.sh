#!/usr/bin/env bash
# test_uptrain.sh: `attnlab train --init-from DIR` (uptraining; docs/uptraining.md) and
# training on text through a model's tokenizer.json:
#   - a run started from a byte model evaluates at step 0 exactly as `eval` scores the
#     source, records its origin (config.json, the log's step-0 line), starts AdamW fresh
#     (after one step every moment pair is that of a first step) and moves the weights by
#     no more than the first step can;
#   - from a run with a tokenizer.json: the tokenizer comes along, the data are its ids
#     (cached beside the run, equal to `attnlab tokenize`), the loss is per token with
#     bits per byte beside it, `eval` of the run's split gives the log's numbers;
#   - the cache is reused on resume and encoded again when the text or the tokenizer
#     changes; a resumed uptraining run is bit-identical to an uninterrupted one;
#   - both precisions, and under mpirun the same weights as one process;
#   - bad input: missing or foreign DIR, flags that contradict it, --preset, --resume,
#     --out = DIR, a tokenizer with more ids than the model: one line, exit 1 or 2.
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
DATA2=$WORK/data2.txt
make_text "$DATA" 600
head -n 500 "$DATA" >"$DATA2"
FLAGS=(--data "$DATA" --batch 2 --eval-every 2 --eval-tokens 128 --threads 2 --quiet --precision f32)

# ids FILE: the ids of a token cache (data_tokens.bin: 40-byte header, int32 ids), one line
ids() { "$PY" -c 'import struct,sys; b=open(sys.argv[1],"rb").read()[40:]; print(*struct.unpack("<%di" % (len(b)//4), b))' "$1"; }
inode() { stat -c %i "$1" 2>/dev/null; }

begin "fixtures: a tiny byte run, and copies with a tokenizer.json (and one with too many ids)"
train_tiny "$DATA" "src:--steps 6 --eval-every 6"
cp -r "$WORK/src" "$WORK/src_sp" && write_sp "$WORK/src_sp"
cp -r "$WORK/src" "$WORK/src_big" && write_sp "$WORK/src_big" 300
end

# ---------------------------------------------------------------- from a byte run

begin "init from a byte run: step 0 scores what eval scores, origin recorded"
run train --init-from "$WORK/src" --out "$WORK/u1" "${FLAGS[@]}" --steps 4
check_ok
check_exists "$WORK/u1/model.safetensors"
check_absent "$WORK/u1/tokenizer.json"
check_absent "$WORK/u1/data_tokens.bin"
run eval --model "$WORK/src" --json --max-tokens 128
check_ok
check_py "step-0 line" '
import json, sys, os
first = json.loads(open(sys.argv[1] + "/log.jsonl").readline())
ev = json.loads(open(sys.argv[2]).read())
assert first["step"] == 0 and first["init_from"] == os.path.realpath(sys.argv[3]), first
assert abs(first["val_loss"] - ev["loss"]) <= 1e-6, (first, ev)
cfg = json.load(open(sys.argv[1] + "/config.json"))
assert cfg["attnlab"]["train"]["init_from"] == os.path.realpath(sys.argv[3]), cfg
src = json.load(open(sys.argv[3] + "/config.json"))
for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"):
    assert cfg[k] == src[k], k
' "$WORK/u1" "$OUTF" "$WORK/src"
end

begin "init from a byte run: fresh AdamW moments, weights moved by at most one step"
run train --init-from "$WORK/src" --out "$WORK/u_one" "${FLAGS[@]}" --steps 1 --warmup 0 --lr 1e-4 \
    --weight-decay 0 --grad-clip 0
check_ok
check_py "not a fresh optimizer" '
import json, struct, sys
import numpy as np
def st(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: np.frombuffer(d[v["data_offsets"][0]:v["data_offsets"][1]], "<f4") for k, v in h.items() if k != "__metadata__"}
s = st(sys.argv[1] + "/train_state.safetensors")
m, v = s["adam.m"].astype(np.float64), s["adam.v"].astype(np.float64)
g = v > 1e-30
# after the first AdamW step from zero moments m = 0.1 g and v = 0.05 g^2, so m^2 / v = 0.2 everywhere
r = m[g] ** 2 / v[g]
assert g.sum() > 1000 and np.allclose(r, 0.2, rtol=1e-3), (g.sum(), r.min(), r.max())
a, b = st(sys.argv[2] + "/model.safetensors"), st(sys.argv[1] + "/model.safetensors")
assert sorted(a) == sorted(b)
d = max(np.abs(a[k].astype(np.float64) - b[k]).max() for k in a)
assert 0 < d <= 1.05e-4, d
' "$WORK/u_one" "$WORK/src"
end

# ---------------------------------------------------------------- through a tokenizer

begin "init from a run with a tokenizer: token data cached, equal to attnlab tokenize"
run train --init-from "$WORK/src_sp" --out "$WORK/t1" "${FLAGS[@]}" --steps 4
check_ok
check_same_file "$WORK/src_sp/tokenizer.json" "$WORK/t1/tokenizer.json"
check_exists "$WORK/t1/data_tokens.bin"
run tokenize --model "$WORK/src_sp" --file "$DATA" --ids-only
check_ok
[ "$(ids "$WORK/t1/data_tokens.bin")" = "$(cat "$OUTF")" ] || note "cached ids differ from attnlab tokenize"
end

begin "tokenized run: loss per token, bits per byte over the text's bytes; eval agrees"
run eval --model "$WORK/t1" --json --max-tokens 128
check_ok
check_py "log vs eval" '
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/log.jsonl")]
ev = json.loads(open(sys.argv[2]).read())
last = rows[-1]
assert rows[0]["step"] == 0 and last["step"] == 4 and last["val_tokens"] == 128, last
assert abs(last["val_loss"] - ev["loss"]) <= 1e-6 and abs(last["val_bpb"] - ev["bits_per_byte"]) <= 1e-6, (last, ev)
# tokens of this tokenizer cover more than a byte each: bits per byte < loss / ln 2
assert ev["bytes"] > ev["tokens"] and last["val_bpb"] < last["val_loss"] / math.log(2) * 0.95, (last, ev)
' "$WORK/t1" "$OUTF"
end

begin "token cache: reused on resume, encoded again for new text or a new tokenizer"
before=$(inode "$WORK/t1/data_tokens.bin")
run train --out "$WORK/t1" --resume --steps 6 --threads 2 --quiet
check_ok
[ "$(inode "$WORK/t1/data_tokens.bin")" = "$before" ] || note "resume rewrote a valid cache"
# the run's tokenizer without its last merge: other ids
"$PY" -c 'import json,sys; p=sys.argv[1]; t=json.load(open(p)); t["model"]["merges"].pop(); json.dump(t, open(p, "w"))' \
    "$WORK/t1/tokenizer.json"
run train --out "$WORK/t1" --resume --steps 8 --threads 2 --quiet
check_ok
[ "$(inode "$WORK/t1/data_tokens.bin")" != "$before" ] || note "a changed tokenizer kept the cache"
run tokenize --model "$WORK/t1" --file "$DATA" --ids-only
[ "$(ids "$WORK/t1/data_tokens.bin")" = "$(cat "$OUTF")" ] || note "re-encoded ids differ from attnlab tokenize"
run train --init-from "$WORK/src_sp" --out "$WORK/t1" "${FLAGS[@]}" --steps 2 --data "$DATA2"
check_ok
run tokenize --model "$WORK/src_sp" --file "$DATA2" --ids-only
[ "$(ids "$WORK/t1/data_tokens.bin")" = "$(cat "$OUTF")" ] || note "the cache does not hold the new text's ids"
end

begin "token cache: a damaged one is encoded again; the run is a model directory every command reads"
head -c 100 "$WORK/t1/data_tokens.bin" >"$WORK/t1/cut" && mv "$WORK/t1/cut" "$WORK/t1/data_tokens.bin"
run train --out "$WORK/t1" --resume --steps 4 --threads 2 --quiet
check_ok
run tokenize --model "$WORK/t1" --file "$DATA2" --ids-only
[ "$(ids "$WORK/t1/data_tokens.bin")" = "$(cat "$OUTF")" ] || note "the damaged cache was not rewritten"
run generate --model "$WORK/t1" --prompt "the cat" -n 4 --temperature 0
check_ok
run info --model "$WORK/t1"
check_ok
end

# resume: constant lr (warmup 0, min-lr-ratio 1) so that 10 steps + 10 more are the 20 of one run
RES=("${FLAGS[@]}" --warmup 0 --min-lr-ratio 1 --lr 3e-3 --eval-every 5 --save-every 100)
begin "uptraining resumes bit for bit"
run train --init-from "$WORK/src_sp" --out "$WORK/ra" "${RES[@]}" --steps 20
check_ok
run train --init-from "$WORK/src_sp" --out "$WORK/rb" "${RES[@]}" --steps 10
check_ok
run train --out "$WORK/rb" --resume --steps 20 --threads 2 --quiet
check_ok
check_same_file "$WORK/ra/model.safetensors" "$WORK/rb/model.safetensors"
check_py "logs differ" '
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
key = lambda r: (r["step"], r.get("train_loss"), r.get("lr"), r.get("val_loss"))
assert [key(r) for r in a] == [key(r) for r in b], "differ"
assert len(a) == 21 and a[0]["step"] == 0
' "$WORK/ra/log.jsonl" "$WORK/rb/log.jsonl"
end

begin "uptraining in BF16: trains, and its log says so"
run train --init-from "$WORK/src_sp" --out "$WORK/bf" "${FLAGS[@]}" --steps 2 --precision bf16
check_ok
check_py "precision" 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert all(x["precision"]=="BF16" for x in r) and len(r)==3, r' \
    "$WORK/bf/log.jsonl"
end

if command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
    begin "uptraining under mpirun -np 2: the weights of one process with the same shards"
    run train --init-from "$WORK/src_sp" --out "$WORK/m1" "${FLAGS[@]}" --steps 4 --shards 2 --threads 1
    check_ok
    timeout 120 mpirun -q --oversubscribe --bind-to none -np 2 "$BIN" train --init-from "$WORK/src_sp" \
        --out "$WORK/m2" "${FLAGS[@]}" --steps 4 --shards 2 --threads 1 >"$OUTF" 2>"$ERRF" </dev/null
    RC=$?
    if grep -q "this build has no MPI" "$ERRF"; then
        echo "SKIP uptraining under mpirun: this build has no MPI"
    else
        check_ok
        check_same_file "$WORK/m1/model.safetensors" "$WORK/m2/model.safetensors"
        check_same_file "$WORK/m1/data_tokens.bin" "$WORK/m2/data_tokens.bin"
    fi
    end
else
    echo "SKIP uptraining under mpirun: mpirun not installed"
fi

# ---------------------------------------------------------------- bad input

bad() { # NAME STATUS REGEX ARGS...
    local name=$1 status=$2 re=$3
    shift 3
    begin "bad input: $name"
    run train "$@"
    check_error "$status" "$re"
    check_stdout_empty
    end
}
mkdir -p "$WORK/empty_dir"
bad "missing DIR" 1 "--init-from: .*nowhere" --init-from "$WORK/nowhere" --out "$WORK/x1" "${FLAGS[@]}"
mkdir -p "$WORK/nw" && cp "$WORK/src/config.json" "$WORK/nw/"
bad "DIR without weights" 1 "no model.safetensors" --init-from "$WORK/nw" --out "$WORK/x2" "${FLAGS[@]}"
bad "a flag that contradicts DIR" 2 "--init-from .*--heads 8, but its config has 4" --init-from "$WORK/src" \
    --out "$WORK/x3" "${FLAGS[@]}" --heads 8
bad "another design's flag" 2 "--kv-lora-rank 8 does not apply" --init-from "$WORK/src" --out "$WORK/x4" \
    "${FLAGS[@]}" --kv-lora-rank 8
bad "--preset" 2 "--preset cannot be given with --init-from" --init-from "$WORK/src" --out "$WORK/x5" --preset tiny
bad "--resume" 2 "--init-from starts a new run" --init-from "$WORK/src" --out "$WORK/u1" --resume
bad "--out = DIR" 2 "same directory" --init-from "$WORK/src" --out "$WORK/src/" "${FLAGS[@]}"
bad "vision flags for a language model" 2 "--patch does not apply" --init-from "$WORK/src" --out "$WORK/x6" --patch 4
bad "tokenizer ids beyond the vocabulary" 1 "tokenizer.json has 300 token ids but the model only 256" \
    --init-from "$WORK/src_big" --out "$WORK/x7" "${FLAGS[@]}"
echo "{\"init-from\": \"$WORK/src\"}" >"$WORK/init.json"
bad "--init-from in a --config file" 2 "'init-from' can only be given on the command line" --out "$WORK/x8" \
    --config "$WORK/init.json"
begin "bad input writes nothing"
for d in x1 x2 x3 x4 x5 x6 x7 x8; do check_absent "$WORK/$d"; done
end
begin "a repeated flag with DIR's own value is fine"
run train --init-from "$WORK/src" --out "$WORK/same" "${FLAGS[@]}" --steps 1 --heads 4 --layers 2 --attention mha
check_ok
end

finish
