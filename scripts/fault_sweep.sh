#!/usr/bin/env bash
# fault_sweep.sh: injected allocation and write failures swept over every
# allocation call and every write point of attnlab's commands on tiny models
# (attnlab_faults: tests/tools/faults.c; docs/faults.md).
#
# For each case (a command line) the script runs it once fault-free with
# ATTNLAB_FAULT_COUNT to learn how many allocation calls A and write points W
# it makes, then runs it again for n = 1..A with ATTNLAB_FAULT_ALLOC=n and
# n = 1..W with ATTNLAB_FAULT_WRITE=n (ENOSPC and EIO alternating), every
# --stride-th n. Each faulted run must:
#   - not crash: no signal, no sanitizer report (AddressSanitizer,
#     LeakSanitizer, UBSan "runtime error"), no timeout;
#   - exit 0 (a fallback absorbed the failure: the kernels' scratch) or exit 1
#     with exactly one stderr line "attnlab: ..." naming the cause ("memory"
#     for an allocation; "No space left on device" / "Input/output error"
#     for a write); a write failure may never end in exit 0 (nothing may
#     swallow one);
#   - leave no "*.tmp.*" file, and leave every file it was to replace
#     byte-identical to before when it failed;
#   - a command whose output is text (the out cases: tokenize, info, generate)
#     and that succeeded: the fault-free run's standard output, byte for byte
#     (a failure absorbed must not change a result);
#   - a fresh training run (train case) that succeeded: the fault-free run's
#     model.safetensors, train_state.safetensors and config.json;
#   - training (the resume case): the run directory it failed in still
#     evaluates, and `train --resume` from it (no faults) ends bit-equal
#     (model.safetensors, train_state.safetensors, config.json) to the run
#     that never failed.
#
# usage: scripts/fault_sweep.sh [--build DIR] [--work DIR] [--stride K] [--max-runs M] [--only alloc|write]
#                               [--cases REGEX] [--threads N]
#   --build   the build directory holding attnlab and attnlab_faults (default build;
#             the sanitizer build, build-asan, is the one that finds leaks)
#   --stride  run every K-th n (default 1: all of them)
#   --max-runs at most M runs per case and sweep (the stride grows to fit; default 0: no limit);
#             tests/cli/test_faults.sh uses both
#   --cases   only the cases whose name matches REGEX (names: the first column of the summary)
# Prints one summary line per case and sweep, then "N runs, M failed"; exit 1 if any failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
WORK=
STRIDE=1
MAX_RUNS=0
ONLY=
CASES=.
THREADS=1
while [ $# -gt 0 ]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --stride) STRIDE=$2; shift 2 ;;
    --max-runs) MAX_RUNS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fault_sweep.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
BUILD=$(readlink -f "$BUILD")
BIN=$BUILD/attnlab
FBIN=$BUILD/attnlab_faults
for b in "$BIN" "$FBIN"; do
    [ -x "$b" ] || { echo "fault_sweep.sh: $b is missing (build it: cmake --build $BUILD)" >&2; exit 2; }
done
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/attnlab-faults.XXXXXX)
mkdir -p "$WORK" && WORK=$(readlink -f "$WORK")
export OMP_NUM_THREADS=$THREADS # one thread: the n-th allocation is the same call in every run
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# print_suppressions=0: the count of suppressed (fontconfig) leaks is not a report, and would add lines to stderr
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/tests/lsan.supp:print_suppressions=0}
PY=/usr/bin/python3
N_RUNS=0
N_FAILED=0
FAILS=$WORK/failures.txt
: >"$FAILS"
printf before >"$WORK/before"

# ---- fixtures: text, tiny models of three designs, a sharded Hugging Face checkpoint ----

FX=$WORK/fixtures
mkdir -p "$FX"
"$PY" - "$FX" <<'EOF'
import random, sys
random.seed(7)
words = "the cat a dog sees likes the river his house a tree the book long road every day".split()
lines = [" ".join(random.choice(words) for _ in range(9)) + "." for _ in range(400)]
open(sys.argv[1] + "/data.txt", "w").write("\n".join(lines) + "\n")
open(sys.argv[1] + "/short.txt", "w").write(" ".join(lines[:4]) + "\n")
EOF
TINY=(--precision f32 --data "$FX/data.txt" --layers 2 --hidden 32 --heads 4 --context 16 --batch 2 --eval-every 2
    --eval-tokens 128 --save-every 2 --threads "$THREADS" --quiet)
setup_fail() { echo "fault_sweep.sh: setup failed: $*" >&2; exit 2; }
for design in mha:"" mla:"--attention mla" lrkv:"--attention lrkv"; do
    name=${design%%:*}
    # shellcheck disable=SC2206
    extra=(${design#*:})
    "$BIN" train "${TINY[@]}" --steps 4 "${extra[@]}" --out "$FX/$name" 2>"$WORK/setup.err" ||
        setup_fail "train $name: $(cat "$WORK/setup.err")"
done
"$PY" - "$FX/img" <<'IMAGES' || setup_fail "images"
import gzip, os, struct, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(5)
for split, n in (("train", 64), ("t10k", 32)):
    for kind, a in (("images", rng.integers(0, 256, (n, 28, 28))), ("labels", rng.integers(0, 10, n))):
        a = a.astype(np.uint8)
        with gzip.open("%s/%s-%s-idx%d-ubyte.gz" % (d, split, kind, a.ndim), "wb") as f:
            f.write(struct.pack(">BBBB", 0, 0, 8, a.ndim) + b"".join(struct.pack(">I", s) for s in a.shape) + a.tobytes())
IMAGES
"$PY" "$ROOT/tests/ref/make_hf_checkpoint.py" "$FX/hf" --family llama --dtype BF16 --shards 2 >/dev/null 2>"$WORK/setup.err" ||
    setup_fail "Hugging Face checkpoint: $(cat "$WORK/setup.err")"
# A SentencePiece-style tokenizer (Prepend and Replace normalizers, a normalized added token, a Replace decoder)
# whose added token is over 1 MiB long: the loader interns strings into 1 MiB blocks, and a string that does
# not fit takes a block of its own, full, so the strings interned after each copy of it (the normalizers'; the
# token's normalized form) each start a new block, an allocation the sweep fails. With ordinary tokenizers
# those strings share the first block and no allocation of theirs is ever reached.
"$PY" - "$FX" <<'TOKENIZER' || setup_fail "tokenizer"
import json, os, sys
d = sys.argv[1]
os.makedirs(d + "/tok", exist_ok=True)
big = "z" * ((1 << 20) + 16)
vocab = {"<unk>": 0, "\u2581": 1}
vocab.update((c, 2 + i) for i, c in enumerate("abcdefghijklmnopqrstuvwxyz"))
merges = [("t", "h"), ("th", "e"), ("\u2581", "the")]
vocab.update((a + b, len(vocab) + i) for i, (a, b) in enumerate(merges))
tok = {"version": "1.0",
       "added_tokens": [{"id": len(vocab), "content": big, "single_word": False, "lstrip": False, "rstrip": False,
                         "normalized": True, "special": False}],
       "normalizer": {"type": "Sequence", "normalizers": [
           {"type": "Prepend", "prepend": "\u2581"},
           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
       "pre_tokenizer": None, "post_processor": None,
       "decoder": {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
       "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": False, "byte_fallback": False,
                 "vocab": vocab, "merges": ["%s %s" % m for m in merges]}}
json.dump(tok, open(d + "/tok/tokenizer.json", "w"), ensure_ascii=False)
open(d + "/tok.txt", "w").write("the " + big + " hat")
TOKENIZER

# ---- cases: NAME|KIND|ARGS[|STRIDE] (KIND: cmd = a command; out = a command whose standard output is its
# result; train = a fresh run; resume = resuming FX/mha;
# new = a command that makes the new directory NEW; study = a study into RUN) ----
# OUT in ARGS is the case's output path (pre-filled with known bytes before each run), with any extension.
# STRIDE: the case's smallest stride (the study makes about 4,000 allocation calls and 800 write points in
# about 3 s; every 25th keeps it to minutes). A resume case's reference is its own command run without faults
# (FX/ref-NAME); resume-lr also changes the schedule, which writes config.json and a log line before the first
# step.

CASE_LIST=(
    "load-info|out|info --model $FX/mha"
    "load-hf|out|info --model $FX/hf"
    "tokenize|out|tokenize --model $FX/tok --file $FX/tok.txt --ids-only"
    "train|train|train ${TINY[*]} --steps 4 --out RUN"
    "train-mla|train|train ${TINY[*]} --steps 2 --attention mla --out RUN"
    "resume|resume|train --resume --steps 8 --threads $THREADS --quiet --out RUN"
    "resume-lr|resume|train --resume --steps 8 --lr 0.002 --threads $THREADS --quiet --out RUN"
    "train-vit|train|train --precision f32 --task vision --images $FX/img --patch 7 --layers 1 --hidden 32 --heads 2 --batch 8 --steps 2 --eval-every 2 --eval-images 16 --save-every 2 --threads $THREADS --quiet --out RUN"
    "convert|new|convert --model $FX/mha --to mla --calibration $FX/data.txt --calibration-tokens 256 --heldout-tokens 64 --batch 2 --threads $THREADS --out NEW"
    "kvlab|cmd|kvlab --model $FX/mha --model $FX/mla --data $FX/short.txt --methods none,int4,h2o:0.5 --context 16 --max-tokens 48 --threads $THREADS --out OUT.png"
    "study|study|study --budget tiny --data $FX/data.txt --threads $THREADS --precision f32 --no-vision --out RUN|25"
    "eval|cmd|eval --model $FX/mha --data $FX/data.txt --context 16 --max-tokens 200 --logits OUT.npy"
    "generate|out|generate --model $FX/mha --prompt the -n 8 --temperature 0"
    "decode-mla|out|generate --model $FX/mla --prompt the -n 6 --temperature 0"
    "decode-lrkv|out|generate --model $FX/lrkv --prompt the -n 6 --temperature 0.8 --kv-dtype bf16"
    "decode-hf|out|generate --model $FX/hf --prompt the -n 4 --temperature 0"
    "decode-kvq|out|generate --model $FX/mha --prompt the -n 6 --temperature 0 --kv-quant int4 --kv-evict h2o --kv-budget 4"
    "attnmap|cmd|attnmap --model $FX/mha --text $FX/short.txt --layer all --head 0,1 --out OUT.png"
    "heads|cmd|heads --model $FX/mha --model $FX/mla --layer 0 --out OUT.png"
    "explore|cmd|explore --model $FX/mha --text $FX/short.txt --out OUT.html"
    "compare|cmd|compare --model $FX/mha --model $FX/lrkv --text $FX/short.txt --out OUT.png"
)
for entry in "${CASE_LIST[@]}"; do # the resume cases' references: step 4 -> 8 without faults
    IFS='|' read -r cs kind args _ <<<"$entry"
    [ "$kind" = resume ] && [[ $cs =~ $CASES ]] || continue
    cp -r "$FX/mha" "$FX/ref-$cs"
    # shellcheck disable=SC2086
    "$BIN" ${args//RUN/$FX/ref-$cs} 2>"$WORK/setup.err" || setup_fail "$cs: $(cat "$WORK/setup.err")"
done

# ---- one run ----

# same_output FILE REF: FILE is the complete new output REF: the same bytes, or for JSON and CSV the same
# data once the measured times are left out (kvlab's "seconds" differ from run to run).
same_output() {
    cmp -s "$1" "$2" && return 0
    case $1 in *.json | *.csv) ;; *) return 1 ;; esac
    "$PY" - "$1" "$2" <<'SAME'
import csv, json, sys
def data(path):
    text = open(path, encoding="utf-8").read()
    if path.endswith(".csv"):
        rows = list(csv.reader(text.splitlines()))
        drop = [i for i, name in enumerate(rows[0]) if name == "seconds"] if rows else []
        return [[v for i, v in enumerate(r) if i not in drop] for r in rows]
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "seconds"}
        return [strip(x) for x in v] if isinstance(v, list) else v
    return strip(json.loads(text))
try:
    sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)
except (ValueError, UnicodeDecodeError, IndexError):
    sys.exit(1)
SAME
}

# check_run CASE KIND N SWEEP DIR RC ARGS: the contract for a faulted run (ARGS: its command line); records
# failures.
fail() { N_FAILED=$((N_FAILED + 1)); echo "$1" >>"$FAILS"; }
check_run() {
    local cs=$1 kind=$2 n=$3 sweep=$4 dir=$5 rc=$6 args=$7 why= lines fired
    fired=$(awk '$1 == "fired" { print $2 }' "$dir/count" 2>/dev/null)
    if [ "$rc" -eq 124 ]; then why="timed out"
    elif [ "$rc" -gt 128 ]; then why="killed by signal $((rc - 128))"
    elif grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$dir/err"; then why="sanitizer report"
    elif [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then why="exit $rc"
    elif [ "$rc" -eq 1 ]; then
        # the error: one line, after the notes and progress lines a command may print first (resuming, the
        # precision used, kvlab's "kvlab [2/6] ...", the study's)
        grep -vE '^attnlab: (resuming |note: |precision )|^[a-z]+ \[[0-9]+/[0-9]+\] ' "$dir/err" >"$dir/err1"
        if [ "$kind" = study ]; then # the study's progress: "study: ...", "[run 1/5] ..."
            grep '^attnlab: ' "$dir/err1" >"$dir/err2"
            mv "$dir/err2" "$dir/err1"
        fi
        lines=$(awk 'END { print NR }' "$dir/err1")
        if [ "$lines" -ne 1 ] || ! head -n 1 "$dir/err1" | grep -q '^attnlab: '; then why="not one 'attnlab: ' line"
        elif [ "${fired:-0}" -ge 1 ] && [ "$sweep" = alloc ] && ! grep -qi 'memory' "$dir/err"; then
            why="error does not say memory"
        elif [ "${fired:-0}" -ge 1 ] && [ "$sweep" = write ] && ! grep -qiE 'no space left|input/output error' "$dir/err"; then
            why="error does not name the write failure"
        fi
    elif [ "$sweep" = write ] && [ "${fired:-0}" -ge 1 ]; then why="write failure ignored (exit 0)"
    fi
    if [ -z "$why" ]; then
        local left
        left=$(find "$dir" -name '*.tmp.*' | head -n 2 | tr '\n' ' ')
        [ -z "$left" ] || why="temp files left: $left"
    fi
    if [ -z "$why" ] && [ "$kind" = cmd ]; then # every output: the old bytes or the complete new ones
        local f
        for f in "$dir"/OUT.*; do
            [ -e "$f" ] || continue
            cmp -s "$f" "$WORK/before" || same_output "$f" "$WORK/ref/$(basename "$f")" ||
                why="$(basename "$f") is neither the old file nor the complete new one"
        done
    fi
    if [ -z "$why" ] && [ "$kind" = out ] && [ "$rc" -eq 0 ] && ! cmp -s "$dir/out" "$WORK/ref/out"; then
        why="exit 0 with another output than the fault-free run's"
    fi
    if [ -z "$why" ] && [ "$kind" = new ]; then # nothing at NEW after a failure, the whole of it after a success
        if [ "$rc" -ne 0 ]; then
            [ ! -e "$dir/NEW" ] || why="a failed run left NEW"
        else
            local f
            for f in model.safetensors config.json; do
                cmp -s "$dir/NEW/$f" "$WORK/ref/NEW/$f" || why="NEW/$f differs from the fault-free run's"
            done
        fi
    fi
    if [ -z "$why" ] && [ "$kind" = train ] && [ "$rc" -eq 0 ]; then # a run that succeeded: the fault-free run's files
        local f
        for f in model.safetensors train_state.safetensors config.json; do
            cmp -s "$dir/RUN/$f" "$WORK/ref/RUN/$f" || why="RUN/$f differs from the fault-free run's"
        done
    fi
    if [ -z "$why" ] && [ "$kind" = resume ]; then why=$(check_resumed "$cs" "$args" "$dir/RUN"); fi
    if [ -z "$why" ] && [ "$kind" = study ]; then why=$(check_study "$args" "$dir/RUN" "$rc"); fi
    if [ -n "$why" ]; then fail "$cs $sweep n=$n: $why | $(head -c 300 "$dir/err" | tr '\n' '|')"; return 1; fi
    return 0
}

# check_resumed CASE ARGS RUN: after a faulted resume, the run directory RUN
# still evaluates, and running the case's command ARGS (naming RUN) again
# without faults ends bit-equal to its reference (a schedule the failed run
# already recorded is the same schedule given again).
check_resumed() {
    local cs=$1 args=$2 run=$3 f
    if ! "$BIN" eval --model "$run" --data "$FX/short.txt" --context 16 >/dev/null 2>"$run.eval.err"; then
        echo "the run directory no longer evaluates: $(head -c 200 "$run.eval.err")"
        return
    fi
    # shellcheck disable=SC2086
    if ! "$BIN" $args >/dev/null 2>"$run.resume.err"; then
        echo "resume after the fault failed: $(head -c 200 "$run.resume.err")"
        return
    fi
    for f in model.safetensors train_state.safetensors config.json; do
        cmp -s "$run/$f" "$FX/ref-$cs/$f" || { echo "$f differs from the uninterrupted run after resuming"; return; }
    done
}

# check_study ARGS RUN RC: a study that failed (RC 1) completes when run again without faults, and the losses
# and accuracies of its report.json are those of the study that never failed.
check_study() {
    local args=$1 run=$2 rc=$3
    if [ "$rc" -ne 0 ]; then
        # shellcheck disable=SC2086
        if ! "$BIN" $args >/dev/null 2>"$run.again.err"; then
            echo "the study run again after the fault failed: $(tail -n 1 "$run.again.err" | head -c 200)"
            return
        fi
    fi
    "$PY" - "$run/report.json" "$WORK/ref/report.json" <<'LOSSES' || echo "report.json's losses differ from the study that never failed"
import json, sys
def losses(path):
    out = []
    def walk(v, key):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, key + "." + k)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, "%s[%d]" % (key, i))
        elif isinstance(v, (int, float)) and ("loss" in key or "accuracy" in key):
            out.append((key, v))
    walk(json.load(open(path)), "")
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
sys.exit(0 if a == b and len(a) > 0 else 1)
LOSSES
}

# run_case NAME KIND ARGS SWEEP N: one run of the faulted binary in a fresh directory; returns its rc.
run_case() {
    local cs=$1 kind=$2 args=$3 sweep=$4 n=$5 dir=$WORK/run
    rm -rf "$dir"
    mkdir -p "$dir"
    case $kind in
    resume) cp -r "$FX/mha" "$dir/RUN" ;;
    cmd) for ext in png npy html json csv; do cp "$WORK/before" "$dir/OUT.$ext"; done ;;
    esac
    args=${args//OUT/$dir/OUT}
    args=${args//RUN/$dir/RUN}
    args=${args//NEW/$dir/NEW}
    local env=(ATTNLAB_FAULT_COUNT="$dir/count")
    [ "$sweep" = alloc ] && env+=(ATTNLAB_FAULT_ALLOC="$n")
    [ "$sweep" = write ] && env+=(ATTNLAB_FAULT_WRITE="$n" ATTNLAB_FAULT_ERRNO="$([ $((n % 2)) -eq 0 ] && echo EIO || echo ENOSPC)")
    # shellcheck disable=SC2086
    env "${env[@]}" timeout 120 "$FBIN" $args >"$dir/out" 2>"$dir/err" </dev/null
    local rc=$?
    N_RUNS=$((N_RUNS + 1))
    if [ "$sweep" = none ]; then
        [ "$rc" -eq 0 ] || fail "$cs: fails without a fault (exit $rc): $(head -c 300 "$dir/err" | tr '\n' '|')"
        rm -rf "$WORK/ref" && mkdir -p "$WORK/ref" && cp "$dir"/OUT.* "$WORK/ref/" 2>/dev/null
        cp "$dir/out" "$WORK/ref/out"
        [ "$kind" != new ] || cp -r "$dir/NEW" "$WORK/ref/NEW"
        [ "$kind" != study ] || cp "$dir/RUN/report.json" "$WORK/ref/report.json"
        [ "$kind" != train ] || cp -r "$dir/RUN" "$WORK/ref/RUN"
        return "$rc"
    fi
    check_run "$cs" "$kind" "$n" "$sweep" "$dir" "$rc" "$args"
    LAST_RC=$rc
    return 0
}

# ---- the sweep ----

for entry in "${CASE_LIST[@]}"; do
    IFS='|' read -r cs kind args min_stride <<<"$entry"
    [[ $cs =~ $CASES ]] || continue
    run_case "$cs" "$kind" "$args" none 0 || continue
    allocs=$(awk '$1 == "allocs" { print $2 }' "$WORK/run/count")
    writes=$(awk '$1 == "writes" { print $2 }' "$WORK/run/count")
    for sweep in alloc write; do
        [ -z "$ONLY" ] || [ "$ONLY" = "$sweep" ] || continue
        total=$allocs
        [ "$sweep" = write ] && total=$writes
        runs=0 errors=0 absorbed=0 before=$N_FAILED step=$STRIDE
        [ "${min_stride:-1}" -le "$step" ] || step=$min_stride
        if [ "$MAX_RUNS" -gt 0 ] && [ $(((total + step - 1) / step)) -gt "$MAX_RUNS" ]; then
            step=$(((total + MAX_RUNS - 1) / MAX_RUNS))
        fi
        for ((n = 1; n <= total; n += step)); do
            run_case "$cs" "$kind" "$args" "$sweep" "$n"
            runs=$((runs + 1))
            if [ "$LAST_RC" -eq 0 ]; then absorbed=$((absorbed + 1)); else errors=$((errors + 1)); fi
        done
        printf '%-12s %-5s %5d points, %5d runs: %5d one-line errors, %4d absorbed (exit 0), %d failed\n' \
            "$cs" "$sweep" "$total" "$runs" "$errors" "$absorbed" "$((N_FAILED - before))"
    done
done
if [ -s "$FAILS" ]; then
    echo "failures (first 40):"
    head -n 40 "$FAILS" | sed 's/^/  /'
fi
echo "$N_RUNS runs, $N_FAILED failed"
[ "$N_FAILED" -eq 0 ]
