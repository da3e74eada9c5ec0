#!/usr/bin/env bash
# test_train.sh: `attnlab train` end to end on tiny models: the loss goes
# down, log.jsonl is well-formed, an interrupted (SIGINT/SIGTERM) and resumed
# run equals an uninterrupted one bit for bit, divergence is reported and
# leaves a loadable checkpoint, eval / generate / info work on the result,
# --config FILE sets flags, and without --data the run reads the KJV from its
# cache (extracted once).
#
# usage: bash tests/cli/test_train.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 1200 # ~50 KB of template sentences

# ---------------------------------------------------------------- learning

M=$WORK/learn
begin "training lowers validation loss by >= 0.5 nats"
run train --precision f32 --data "$DATA" --out "$M" --layers 1 --hidden 64 --heads 4 --context 32 --batch 8 --steps 60 \
    --lr 5e-3 --warmup 5 --eval-every 5 --eval-tokens 2048 --threads 2 --quiet
check_ok
check_stderr_empty
check_exists "$M/model.safetensors"
check_py "val_loss did not drop by 0.5 nats" '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
v = [r["val_loss"] for r in rows if "val_loss" in r]
assert len(v) >= 2, "fewer than two evaluations"
assert v[0] - v[-1] >= 0.5, "first val_loss %.4f, last %.4f" % (v[0], v[-1])
' "$M/log.jsonl"
end

begin "log.jsonl: one valid JSON object per step with step, train_loss, lr, tokens_per_s"
check_py "log.jsonl is malformed" '
import json, math, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "last line is not newline-terminated"
rows = [json.loads(l) for l in lines[:-1]]
assert [r["step"] for r in rows] == list(range(1, 61)), "steps are not 1..60"
for r in rows:
    for k in ("step", "train_loss", "lr", "tokens_per_s"):
        assert k in r, "step %s lacks %s" % (r.get("step"), k)
        assert isinstance(r[k], (int, float)) and math.isfinite(r[k]), "%s = %r" % (k, r[k])
    assert isinstance(r["step"], int)
    assert r["lr"] > 0 and r["tokens_per_s"] > 0 and r["train_loss"] > 0
assert [r["step"] for r in rows if "val_loss" in r] == list(range(5, 61, 5)), "val_loss not every 5 steps"
' "$M/log.jsonl"
end

# ---------------------------------------------------------------- resume

RFLAGS=(--precision f32 --data "$DATA" --layers 2 --hidden 128 --heads 4 --context 64 --batch 8 --steps 40 --eval-every 10
    --eval-tokens 512 --threads 2 --save-every 1000 --quiet)

begin "uninterrupted reference run (40 steps)"
run train --precision f32 "${RFLAGS[@]}" --out "$WORK/runA"
check_ok
check_exists "$WORK/runA/model.safetensors"
end

# interrupt SIG DIR: starts the run in the background, sends SIG once its
# log has >= 5 lines, waits; sets RC (stderr in ERRF).
interrupt() {
    local sig=$1 dir=$2 pid i=0
    timeout 60 "$BIN" train "${RFLAGS[@]}" --out "$dir" >"$OUTF" 2>"$ERRF" </dev/null &
    pid=$!
    while [ "$(wc -l 2>/dev/null <"$dir/log.jsonl" || echo 0)" -lt 5 ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.02
        i=$((i + 1))
        [ $i -lt 3000 ] || break
    done
    kill -"$sig" "$pid" 2>/dev/null # timeout(1) passes it on to attnlab
    wait "$pid"
    RC=$?
}

# log_same A B: train_loss (and lr, val_loss) of every step identical.
log_same() {
    check_py "$1 and $2 logs differ" '
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p)]
    steps = [r["step"] for r in rows]
    assert steps == list(range(1, len(rows) + 1)), "%s: steps not 1..N once each: %s" % (p, steps)
    return {r["step"]: (r["train_loss"], r["lr"], r.get("val_loss")) for r in rows}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(a) == 40 and len(b) == 40, "lengths %d, %d" % (len(a), len(b))
bad = [s for s in a if a[s] != b[s]]
assert not bad, "first differing step %d: %s vs %s" % (bad[0], a[bad[0]], b[bad[0]])
' "$1/log.jsonl" "$2/log.jsonl"
}

for sig in INT TERM; do
    D=$WORK/run_$sig
    want=130
    [ "$sig" = TERM ] && want=143
    begin "SIG$sig mid-run: exit $want with a training state"
    interrupt "$sig" "$D"
    check_no_crash
    check_status "$want"
    check_one_line_error "interrupted at step"
    check_exists "$D/train_state.safetensors"
    check_exists "$D/model.safetensors"
    check_no_tmp "$D"
    [ "$(wc -l <"$D/log.jsonl")" -lt 40 ] || note "the run finished before the signal"
    end

    begin "SIG$sig: --resume completes the run"
    run train --precision f32 --out "$D" --resume --threads 2 --quiet
    check_ok
    check_stderr "resuming"
    end

    begin "SIG$sig: resumed model is byte-identical to the uninterrupted one"
    check_same_file "$WORK/runA/model.safetensors" "$D/model.safetensors"
    end

    begin "SIG$sig: resumed log matches the uninterrupted one step by step"
    log_same "$WORK/runA" "$D"
    end
done

begin "--resume with another flag (--seed) is a usage error"
cp "$WORK/runA/model.safetensors" "$WORK/runA.model.before"
run train --precision f32 --out "$WORK/runA" --resume --seed 5
check_error 2 "--seed.*resume"
check_same_file "$WORK/runA.model.before" "$WORK/runA/model.safetensors"
end

begin "--resume of a finished run changes nothing"
run train --precision f32 --out "$WORK/runA" --resume --threads 2 --quiet
check_ok
check_stderr "already trained"
check_same_file "$WORK/runA.model.before" "$WORK/runA/model.safetensors"
check_py "log changed" 'import sys; assert sum(1 for _ in open(sys.argv[1])) == 40' "$WORK/runA/log.jsonl"
end

# ---------------------------------------------------------------- divergence

N=$WORK/nan
begin "divergence (--lr 1e30): exit 1, one-line error"
run train --precision f32 --data "$DATA" --out "$N" --layers 1 --hidden 32 --heads 2 --context 16 --batch 2 --steps 20 \
    --eval-every 3 --eval-tokens 256 --lr 1e30 --warmup 0 --save-every 1 --threads 2 --quiet
check_error 1 "diverged|nan|inf"
check_no_tmp "$N"
end

begin "divergence: the model directory still holds a loadable checkpoint"
run info --model "$N"
check_ok
end

# ---------------------------------------------------------------- eval / generate / info

begin "eval prints bits/byte"
run eval --model "$M" --data "$DATA" --threads 2
check_ok
check_stdout "[0-9.]+ bits/byte"
end

begin "eval --json is one JSON object"
run eval --model "$M" --data "$DATA" --max-tokens 4096 --json
check_ok
check_py "bad eval JSON" '
import json, math, sys
j = json.loads(open(sys.argv[1]).read())
assert j["bytes"] == 4096, j
assert math.isfinite(j["bits_per_byte"]) and 0 < j["bits_per_byte"] < 8, j
assert abs(j["bits_per_byte"] - j["loss"] / math.log(2)) < 1e-4, j
' "$OUTF"
end

begin "eval --logits OUT.npy --context 16 writes float32 [16, 256]"
run eval --model "$M" --data "$DATA" --logits "$WORK/logits.npy" --context 16
check_ok
check_py "bad NPY" '
import numpy as np, sys
a = np.load(sys.argv[1])
assert a.shape == (16, 256), a.shape
assert a.dtype == np.float32, a.dtype
assert np.isfinite(a).all(), "non-finite logits"
' "$WORK/logits.npy"
check_no_tmp "$WORK"
end

begin "generate --temperature 0 is deterministic and reports tokens/s"
run generate --model "$M" --prompt "the cat" -n 20 --temperature 0
check_ok
cp "$OUTF" "$WORK/gen1.txt"
check_stderr "tokens/s"
check_stdout "^the cat"
run generate --model "$M" --prompt "the cat" -n 20 --temperature 0
check_ok
check_same_file "$WORK/gen1.txt" "$OUTF"
[ "$(wc -c <"$OUTF")" -eq $((7 + 20 + 1)) ] || note "stdout is $(wc -c <"$OUTF") bytes, expected prompt + 20 + newline"
end

begin "generate with a seed is reproducible"
run generate --model "$M" --prompt "a dog" -n 20 --temperature 1 --top-k 10 --seed 7
check_ok
cp "$OUTF" "$WORK/gen2.txt"
run generate --model "$M" --prompt "a dog" -n 20 --temperature 1 --top-k 10 --seed 7
check_ok
check_same_file "$WORK/gen2.txt" "$OUTF"
end

begin "generate --kv-dtype bf16: half the KV cache bytes, same kind of output"
run generate --model "$M" --prompt "the cat" -n 20 --temperature 0
check_ok
f32_bytes=$(sed -n 's/.*KV cache \([0-9]*\) bytes.*/\1/p' "$ERRF")
run generate --model "$M" --prompt "the cat" -n 20 --temperature 0 --kv-dtype bf16
check_ok
check_stdout "^the cat"
bf16_bytes=$(sed -n 's/.*KV cache \([0-9]*\) bytes.*/\1/p' "$ERRF")
[ -n "$f32_bytes" ] && [ -n "$bf16_bytes" ] && [ $((bf16_bytes * 2)) -eq "$f32_bytes" ] ||
    note "KV cache bytes: f32 '$f32_bytes', bf16 '$bf16_bytes' (want half)"
[ "$(wc -c <"$OUTF")" -eq $((7 + 20 + 1)) ] || note "stdout is $(wc -c <"$OUTF") bytes, expected prompt + 20 + newline"
run generate --model "$M" --prompt "the cat" -n 5 --kv-dtype f8
check_error 2 "kv-dtype"
check_stdout_empty
end

# info_kv NAME ATTN KVH ARGS...: tiny model, then the KV numbers of info --json
info_kv() {
    local name=$1 attn=$2 kvh=$3 d=$WORK/info_$1
    shift 3
    begin "info --json KV cache: $name"
    run train --precision f32 --data "$DATA" --out "$d" --layers 2 --hidden 32 --heads 4 --context 16 --batch 2 --steps 1 \
        --eval-tokens 64 --threads 2 --quiet "$@"
    check_ok
    for ctx in "" 8 bf16; do
        if [ "$ctx" = bf16 ]; then
            run info --model "$d" --json --kv-dtype bf16
            ctx=
            vbytes=2
        else
            run info --model "$d" --json ${ctx:+--context $ctx}
            vbytes=4
        fi
        check_ok
        check_py "info --json $name ${ctx:+--context $ctx} ($vbytes-byte values)" '
import json, sys
j = json.loads(open(sys.argv[1]).read())
attn, kvh, ctx, vbytes = sys.argv[2], int(sys.argv[3]), int(sys.argv[4] or 16), int(sys.argv[5])
assert j["attention"] == attn, "attention %s" % j["attention"]
assert j["kv_heads"] == kvh and j["heads"] == 4 and j["head_dim"] == 8, j
assert j["context"] == ctx, "context %s" % j["context"]
assert j["kv_dtype"] == ("BF16" if vbytes == 2 else "F32"), j["kv_dtype"]
assert j["kv_values_per_token_per_layer"] == 2 * j["kv_heads"] * j["head_dim"], j
assert j["kv_bytes_per_token"] == vbytes * j["layers"] * j["kv_values_per_token_per_layer"], j
assert j["kv_bytes_formula"] == j["kv_bytes_per_token"] * ctx, j
assert j["kv_bytes_formula"] == j["kv_bytes_allocated"], "formula %d, allocated %d" % (
    j["kv_bytes_formula"], j["kv_bytes_allocated"])
assert abs(j["kv_ratio_to_mha"] - kvh / 4) < 1e-6, j
' "$OUTF" "$attn" "$kvh" "$ctx" "$vbytes"
    done
    end
}
info_kv mha mha 4
info_kv gqa gqa 2 --kv-heads 2
info_kv mqa mqa 1 --kv-heads 1

# ---------------------------------------------------------------- long paths
# Paths are never cut: a run 3,841 bytes deep (a relative path of 15 names of
# 255 bytes, NAME_MAX) trains and resumes; a path longer than the run's path
# fields (4,095 bytes) is refused in one line that says so, nothing written.
LONG_NAME=$(printf '%0255d' 0)
LONG=.
for _ in $(seq 15); do LONG=$LONG/$LONG_NAME; done
TOO_LONG=$LONG/$LONG_NAME/$LONG_NAME
TINY=(--layers 1 --hidden 32 --heads 2 --context 16 --batch 2 --eval-every 2 --eval-tokens 64 --threads 2 --quiet)
cd "$WORK" || exit 1
mkdir -p "$(dirname "$LONG")" || exit 1 # the commands make the last level themselves

begin "long paths: a run 3,841 bytes deep trains and resumes"
run train --precision f32 --data "$DATA" --out "$LONG" --steps 4 "${TINY[@]}"
check_ok
check_exists "$LONG/model.safetensors"
check_exists "$LONG/train_state.safetensors"
run train --precision f32 --out "$LONG" --resume --steps 6 --threads 2 --quiet
check_ok
check_py "log.jsonl does not reach step 6" 'import json, sys; assert json.loads(open(sys.argv[1]).readlines()[-1])["step"] == 6' \
    "$LONG/log.jsonl"
end

begin "long paths: --out or --data longer than a path field: one line, exit 1"
run train --precision f32 --data "$DATA" --out "$TOO_LONG" --steps 4 "${TINY[@]}"
check_error 1 "out path too long \(${#TOO_LONG} bytes, at most 4095\)"
run train --precision f32 --data "$TOO_LONG" --out "$WORK/never" --steps 4 "${TINY[@]}"
check_error 1 "data path too long \(${#TOO_LONG} bytes, at most 4095\)"
[ ! -e "$WORK/never" ] || note "$WORK/never was created"
end
cd - >/dev/null || exit 1

# ---------------------------------------------------------------- --config
begin "--config FILE: numbers, strings and switches set their flags; the command line's flags win"
cat >"$WORK/settings.json" <<'JSON'
{"layers": 2, "hidden": 48, "heads": 4, "kv-heads": 2, "attention": "gqa", "tied": true, "lr": 0.0025,
 "context": 16, "batch": 2, "steps": 2, "seed": 7, "eval-tokens": 256, "quiet": false, "precision": "f32"}
JSON
run train --config "$WORK/settings.json" --data "$DATA" --out "$WORK/cfgrun" --seed 11 --threads 2 --quiet
check_ok
check_stderr_empty
check_py "the settings file did not set its flags" '
import json, sys
c = json.load(open(sys.argv[1]))
t = c["attnlab"]["train"]
got = (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
       c["tie_word_embeddings"], t["lr"], t["context"], t["batch"], t["steps"], t["precision"])
assert got == (2, 48, 4, 2, True, 0.0025, 16, 2, 2, "F32"), got
assert t["seed"] == 11, t["seed"]  # given on the command line too: that value wins
' "$WORK/cfgrun/config.json"
end

begin "--config FILE: a value that is no string, number or switch is a usage error"
echo '{"layers": [1, 2]}' >"$WORK/array.json"
run train --config "$WORK/array.json" --data "$DATA" --out "$WORK/cfgbad"
check_error 2 "array.json: setting 'layers' must be a string, number or boolean"
echo '{"tied": 3}' >"$WORK/switch.json"
run train --config "$WORK/switch.json" --data "$DATA" --out "$WORK/cfgbad"
check_error 2 "tied.*switch"
check_absent "$WORK/cfgbad"
end

# ---------------------------------------------------------------- the default corpus
# Without --data a run reads Debian's King James Bible, extracted once by the
# `bible` program into the cache ($XDG_CACHE_HOME/attnlab, else
# $HOME/.cache/attnlab) and read from there afterwards.
TINYRUN=(--precision f32 --layers 1 --hidden 32 --heads 2 --context 16 --batch 2 --steps 1 --eval-tokens 256
    --threads 2 --quiet)
NOBIBLE=$WORK/nobible # a PATH without `bible` (with the `timeout` that run uses)
mkdir -p "$NOBIBLE"
ln -sf "$(command -v timeout)" "$NOBIBLE/timeout"
begin "the default corpus: extracted once into \$XDG_CACHE_HOME/attnlab, then read without \`bible\`"
rm -rf "$WORK/xdg"
XDG_CACHE_HOME=$WORK/xdg run train "${TINYRUN[@]}" --out "$WORK/kjv1"
check_ok
check_py "the cached corpus is not the KJV" '
import sys
t = open(sys.argv[1], "rb").read()
assert len(t) == int(sys.argv[2]), (len(t), sys.argv[2])
assert t.lstrip().startswith(b"Genesis 1") and b"In the beginning God created the heaven and the earth." in t[:200]
assert t.rstrip().endswith(b"Amen."), t[-40:]
' "$WORK/xdg/attnlab/kjv.txt" "$(bible gen1:1-rev22:21 | wc -c)"
PATH=$NOBIBLE XDG_CACHE_HOME=$WORK/xdg run train "${TINYRUN[@]}" --out "$WORK/kjv2"
check_ok
check_py "a run on the cached corpus trained on other data" '
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
assert a["train_loss"] == b["train_loss"], (a, b)
' "$WORK/kjv1/log.jsonl" "$WORK/kjv2/log.jsonl"
end

begin "the default corpus: \$HOME/.cache/attnlab without XDG_CACHE_HOME; no \`bible\` and no cache is one line"
rm -rf "$WORK/home"
mkdir -p "$WORK/home"
XDG_CACHE_HOME= HOME=$WORK/home run train "${TINYRUN[@]}" --out "$WORK/kjv3"
check_ok
check_exists "$WORK/home/.cache/attnlab/kjv.txt"
rm -rf "$WORK/xdg2"
PATH=$NOBIBLE XDG_CACHE_HOME=$WORK/xdg2 run train "${TINYRUN[@]}" --out "$WORK/kjv4"
check_error 1 "default corpus: .*install Debian's bible-kjv, or pass --data FILE"
check_absent "$WORK/xdg2/attnlab/kjv.txt"
end

begin "no temp files anywhere in the work dir"
check_no_tmp "$WORK"
end

finish
