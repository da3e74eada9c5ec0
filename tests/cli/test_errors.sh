#!/usr/bin/env bash
# test_errors.sh: the error contract of every command. A failing command
# prints ONE stderr line "attnlab: <what failed>: <why>" and exits 1 (2 for
# usage errors: unknown command or flag, bad or missing flag value, missing
# required flag, impossible model settings); it never crashes, never hangs and
# never leaves a half-written (or temp) output file behind.
#
# usage: bash tests/cli/test_errors.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 600
TINY=(--data "$DATA" --layers 1 --hidden 32 --heads 2 --context 16 --batch 2 --steps 6 --eval-every 3
    --eval-tokens 256 --threads 2 --quiet)

# ---------------------------------------------------------------- usage errors

begin "no command: usage on stderr, exit 2"
run
check_no_crash
check_status 2
check_stdout_empty
check_stderr "usage"
end

begin "unknown command"
run frobnicate
check_error 2 "unknown command.*frobnicate"
check_stdout_empty
end

for c in train eval generate info "bench train"; do
    begin "unknown flag: $c"
    # shellcheck disable=SC2086
    run $c --no-such-flag 1
    check_error 2 "unknown flag.*no-such-flag"
    check_stdout_empty
    end
done

begin "unknown benchmark"
run bench frob
check_error 2 "unknown benchmark.*frob"
end

begin "bench without a benchmark"
run bench
check_error 2 "benchmark"
end

begin "unexpected positional argument"
run train --precision f32 stray --out "$WORK/x"
check_error 2 "unexpected argument.*stray"
end

begin "flag missing its value: train --out"
run train --precision f32 --out
check_error 2 "out.*needs a value"
end
begin "flag missing its value: eval --model"
run eval --model
check_error 2 "model.*needs a value"
end
begin "flag missing its value: generate --prompt"
run generate --model "$WORK/good" --prompt
check_error 2 "prompt.*needs a value"
end
begin "flag missing its value: info --context"
run info --model "$WORK/good" --context
check_error 2 "context.*needs a value"
end
begin "flag with empty value: train --layers="
run train --precision f32 --out "$WORK/x" --layers=
check_error 2 "layers.*integer"
end

begin "non-numeric integer: train --layers abc"
run train --precision f32 --out "$WORK/x" --layers abc
check_error 2 "layers.*integer.*abc"
end
begin "non-numeric integer: eval --context 12x"
run eval --model "$WORK/good" --context 12x
check_error 2 "context.*integer.*12x"
end
begin "non-numeric integer: generate -n five"
run generate --model "$WORK/good" --prompt a -n five
check_error 2 "\bn\b.*integer.*five"
end
begin "non-numeric integer: info --context 1.5"
run info --model "$WORK/good" --context 1.5
check_error 2 "context.*integer.*1\.5"
end
begin "unknown KV cache dtype: info --kv-dtype fp8"
run info --model "$WORK/good" --kv-dtype fp8
check_error 2 "kv-dtype.*fp8"
check_stdout_empty
end
begin "non-numeric number: train --lr fast"
run train --precision f32 --out "$WORK/x" --lr fast
check_error 2 "lr.*number.*fast"
end
begin "switch with a value: train --tied=maybe"
run train --precision f32 --out "$WORK/x" --tied=maybe
check_error 2 "tied.*maybe"
end
begin "integer beyond int is refused, not truncated: --layers 4294967297"
run train --precision f32 "${TINY[@]}" --out "$WORK/trunc" --layers 4294967297
check_error 2 "layers.*range"
check_absent "$WORK/trunc/model.safetensors"
end
begin "absurd thread count is refused: --threads 100000"
run eval --model "$WORK/nonexistent" --threads 100000
check_error 2 "threads"
end

begin "missing required flag: train without --out"
run train --precision f32 "${TINY[@]}"
check_error 2 "--out.*required"
end
begin "missing required flag: eval without --model"
run eval --data "$DATA"
check_error 2 "--model.*required"
end
begin "missing required flag: generate without --prompt"
run generate --model "$WORK/good"
check_error 2 "--prompt.*required"
end
begin "missing required flag: info without --model"
run info
check_error 2 "--model.*required"
end

# ---------------------------------------------------------------- --help

begin "attnlab --help"
run --help
check_ok
check_stdout "usage: attnlab <command>"
check_stdout "train"
check_stderr_empty
end
for c in train eval generate info bench "bench train"; do
    begin "--help: $c"
    # shellcheck disable=SC2086
    run $c --help
    check_ok
    check_stdout "^usage: attnlab $c"
    check_stderr_empty
    end
done
begin "-h: eval"
run eval -h
check_ok
check_stdout "^usage: attnlab eval"
end

# ---------------------------------------------------------------- impossible configs

BAD_N=0
# train_bad NAME STATUS REGEX ARGS...: `train` must refuse with the contract,
# before writing a checkpoint.
train_bad() {
    local name=$1 st=$2 re=$3 out
    BAD_N=$((BAD_N + 1))
    out=$WORK/bad_$BAD_N
    shift 3
    begin "$name"
    run train --precision f32 "${TINY[@]}" --out "$out" "$@"
    check_error "$st" "$re"
    check_absent "$out/model.safetensors"
    check_no_tmp "$out"
    end
}

train_bad "kv-heads 3 does not divide heads 4" 2 "num_key_value_heads 3.*divide|kv.heads.*divide" --heads 4 --kv-heads 3
train_bad "odd --head-dim" 2 "head_dim.*even" --head-dim 15
train_bad "--layers 0" 2 "layers.*positive" --layers 0
train_bad "--hidden -5" 2 "hidden.*positive" --hidden -5
train_bad "hidden not divisible by heads" 2 "not divisible" --hidden 30 --heads 4
train_bad "--attention mqa with --kv-heads 2" 2 "mqa.*1" --attention mqa --kv-heads 2
train_bad "unknown --attention" 2 "unknown attention.*sparse" --attention sparse
train_bad "unknown --preset" 2 "unknown preset.*huge" --preset huge

echo '{"layers": 1, "hidden_units": 64}' >"$WORK/unknown_key.json"
train_bad "--config with an unknown key" 2 "unknown setting.*hidden_units" --config "$WORK/unknown_key.json"
echo 'layers = 1' >"$WORK/not_json.json"
train_bad "--config that is not JSON" 1 "not_json.json.*JSON" --config "$WORK/not_json.json"
train_bad "--config that does not exist" 1 "nope.json" --config "$WORK/nope.json"

# ---------------------------------------------------------------- data

train_bad "missing --data file" 1 "missing.txt.*no such file" --data "$WORK/missing.txt"
: >"$WORK/empty.txt"
train_bad "empty data file" 1 "empty.txt.*empty" --data "$WORK/empty.txt"
head -c 30 "$DATA" >"$WORK/short.txt"
train_bad "data file too short for the context" 1 "short.txt.*too short" --data "$WORK/short.txt"

# ---------------------------------------------------------------- checkpoints

begin "setup: train the tiny model to damage"
run train --precision f32 "${TINY[@]}" --out "$WORK/good"
check_ok
check_exists "$WORK/good/model.safetensors"
check_exists "$WORK/good/config.json"
end
begin "setup: the good model loads (eval, info, generate)"
run eval --model "$WORK/good" --data "$DATA"
check_ok
run info --model "$WORK/good"
check_ok
run generate --model "$WORK/good" --prompt a -n 5 --temperature 0
check_ok
end

ST=$WORK/good/model.safetensors
ST_SIZE=$(stat -c %s "$ST")
HLEN=$("$PY" -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "$ST")

# damaged NAME: a fresh copy of the good model in $WORK/ck_NAME (echoes the path)
damaged() {
    local d=$WORK/ck_$1
    rm -rf "$d"
    cp -r "$WORK/good" "$d"
    rm -f "$d/train_state.safetensors" "$d/log.jsonl"
    echo "$d"
}

d=$(damaged trunc4) && truncate -s 4 "$d/model.safetensors"
d=$(damaged trunc_header) && truncate -s $((8 + HLEN / 2)) "$d/model.safetensors"
d=$(damaged trunc_data) && truncate -s $((ST_SIZE - 1000)) "$d/model.safetensors"
d=$(damaged hlen_lies) && st_edit "$ST" "$d/model.safetensors" hlen $((ST_SIZE * 2))
d=$(damaged header_garbled) && st_edit "$ST" "$d/model.safetensors" garble
d=$(damaged missing_tensor) && st_edit "$ST" "$d/model.safetensors" drop model.norm.weight
d=$(damaged wrong_shape) && st_edit "$ST" "$d/model.safetensors" shape model.layers.0.self_attn.q_proj.weight 16,64
d=$(damaged dtype_i8) && st_edit "$ST" "$d/model.safetensors" dtype model.norm.weight I8
d=$(damaged no_config) && rm "$d/config.json"
d=$(damaged config_not_json) && echo '{"hidden_size": 32,' >"$d/config.json"
d=$(damaged config_kv) && "$PY" - "$d/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_key_value_heads"] = 3
json.dump(c, open(sys.argv[1], "w"))
EOF

# what each damage must be reported as (file name, then the reason)
declare -A WHY_RE=(
    [trunc4]="model.safetensors.*(too short|truncat)"
    [trunc_header]="model.safetensors.*(exceeds|truncat)"
    [trunc_data]="model.safetensors.*(outside|truncat|exceeds)"
    [hlen_lies]="model.safetensors.*header length"
    [header_garbled]="model.safetensors.*json"
    [missing_tensor]="model.safetensors.*missing tensor.*model.norm.weight"
    [wrong_shape]="model.safetensors.*q_proj.*shape"
    [dtype_i8]="model.safetensors.*dtype.*I8"
    [no_config]="config.json.*no such file"
    [config_not_json]="config.json.*json"
    [config_kv]="config.json.*num_key_value_heads.*divide"
)
for v in trunc4 trunc_header trunc_data hlen_lies header_garbled missing_tensor wrong_shape dtype_i8 no_config \
    config_not_json config_kv; do
    d=$WORK/ck_$v
    for c in eval info generate; do
        case $c in
        eval) args=(eval --model "$d" --data "$DATA") ;;
        info) args=(info --model "$d") ;;
        generate) args=(generate --model "$d" --prompt a -n 5) ;;
        esac
        begin "checkpoint $v: $c"
        run "${args[@]}"
        check_error 1 "${WHY_RE[$v]}"
        check_stdout_empty
        check_no_tmp "$d"
        end
    done
done

begin "resume from a truncated training state"
d=$(damaged bad_state)
cp "$WORK/good/train_state.safetensors" "$d/"
truncate -s 100 "$d/train_state.safetensors"
run train --precision f32 --out "$d" --resume --steps 8 --quiet
check_error 1 "train_state.safetensors"
check_no_tmp "$d"
end

begin "resume in a directory that is not a run"
mkdir -p "$WORK/not_a_run"
run train --precision f32 --out "$WORK/not_a_run" --resume
check_error 1 "config.json"
check_no_tmp "$WORK/not_a_run"
end

# ---------------------------------------------------------------- output files

begin "eval --logits into a directory that does not exist"
run eval --model "$WORK/good" --data "$DATA" --logits "$WORK/no_such_dir/logits.npy"
check_error 1 "no_such_dir.*no such file"
check_absent "$WORK/no_such_dir"
check_stdout_empty
end

begin "eval --logits onto a directory"
mkdir -p "$WORK/logits_out/is_a_dir"
run eval --model "$WORK/good" --data "$DATA" --logits "$WORK/logits_out/is_a_dir"
check_error 1 "is_a_dir.*directory"
check_no_tmp "$WORK/logits_out"
[ -z "$(ls -A "$WORK/logits_out/is_a_dir")" ] || note "something was written into the directory"
end

begin "eval --logits with a damaged model writes nothing"
run eval --model "$WORK/ck_trunc_data" --data "$DATA" --logits "$WORK/logits_out/x.npy"
check_error 1 "model.safetensors"
check_absent "$WORK/logits_out/x.npy"
check_no_tmp "$WORK/logits_out"
end

begin "eval with a context beyond the model's"
run eval --model "$WORK/good" --data "$DATA" --context 17
check_error 1 "context 17"
end

begin "eval of a missing data file"
run eval --model "$WORK/good" --data "$WORK/missing.txt"
check_error 1 "missing.txt.*no such file"
end

begin "eval of an empty data file"
run eval --model "$WORK/good" --data "$WORK/empty.txt"
check_error 1 "empty.txt.*empty"
end

# ---------------------------------------------------------------- long paths
# Paths are never cut to a fixed buffer: a model directory 3,841 bytes deep
# (a relative path of 15 names of 255 bytes, NAME_MAX) works, outputs in it
# included, and a path beyond the OS limit of 4,096 bytes fails with one line
# that still says why (a long message loses the middle of its path).
LONG_NAME=$(printf '%0255d' 0)
LONG=.
for _ in $(seq 15); do LONG=$LONG/$LONG_NAME; done
cd "$WORK" || exit 1
mkdir -p "$LONG" && cp "$WORK/good/config.json" "$WORK/good/model.safetensors" "$LONG/"

begin "long paths: info and eval of a model 3,841 bytes deep"
run info --model "$LONG"
check_ok
run eval --model "$LONG" --data "$DATA" --logits "$LONG/logits.npy"
check_ok
check_exists "$LONG/logits.npy"
end

begin "long paths: a model path beyond the OS limit (info)"
run info --model "$LONG/$LONG_NAME/$LONG_NAME"
check_error 1 "config.json: file name too long"
end

begin "long paths: an output path beyond the OS limit (eval --logits)"
run eval --model "$LONG" --data "$DATA" --logits "$LONG/$LONG_NAME/logits.npy"
check_error 1 "logits.npy: file name too long"
check_no_tmp "$LONG"
end
cd - >/dev/null || exit 1

begin "no temp files anywhere in the work dir"
check_no_tmp "$WORK"
end

finish
