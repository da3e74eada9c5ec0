#!/usr/bin/env bash
# kill_trials.sh: `kill -9` at random moments of training and of saving
# checkpoints, each run then continued with `train --resume` until it
# completes, and compared bit for bit with a run that was never interrupted.
#
# The run (a tiny model, --save-every 2 so that a good share of its time is
# spent writing checkpoints) is timed once uninterrupted; each trial starts
# it, kills it (SIGKILL: no clean-up, no signal handler) after a random delay
# within that time, and resumes it, killing the resumed run too with
# probability 1/2 (at most --kills times per trial) before letting it finish.
# A run killed before it wrote its config.json (while starting) left nothing
# to resume: it is started again with its flags, as a user would. A trial
# passes when
#   - every resume succeeds (a run killed before its first checkpoint starts
#     again from step 0);
#   - model.safetensors, train_state.safetensors and config.json are
#     byte-identical to the uninterrupted run's;
#   - log.jsonl has one line per step 1..N, with train_loss, lr and val_loss
#     identical to the uninterrupted run's;
#   - no "*.tmp.*" file is left in the run directory.
#
# usage: scripts/kill_trials.sh [--bin PATH/TO/attnlab] [--trials N] [--kills K] [--work DIR] [--seed S]
#   defaults: build/attnlab, 50 trials, 3 kills at most per trial, a temporary directory, seed 1
# Prints one line per trial and "N trials: M passed, F failed (K kills: ...)"; exit 1 if any failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/attnlab
TRIALS=50
KILLS=3
WORK=
SEED=1
while [ $# -gt 0 ]; do
    case $1 in
    --bin) BIN=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --kills) KILLS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "kill_trials.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
BIN=$(readlink -f "$BIN")
[ -x "$BIN" ] || { echo "kill_trials.sh: $BIN is not an executable" >&2; exit 2; }
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/attnlab-kill.XXXXXX)
mkdir -p "$WORK" && WORK=$(readlink -f "$WORK")
PY=/usr/bin/python3
RANDOM=$SEED

"$PY" - "$WORK/data.txt" <<'EOF'
import random, sys
random.seed(11)
words = "the cat a dog sees likes the river his house a tree the book long road every day".split()
open(sys.argv[1], "w").write("\n".join(" ".join(random.choice(words) for _ in range(9)) + "." for _ in range(600)) + "\n")
EOF
FLAGS=(--precision f32 --data "$WORK/data.txt" --layers 2 --hidden 64 --heads 4 --context 32 --batch 4 --steps 24
    --warmup 4 --eval-every 4 --eval-tokens 256 --save-every 2 --threads 2 --quiet)

# the uninterrupted run, and how long it takes (ms)
t0=$(date +%s%N)
"$BIN" train "${FLAGS[@]}" --out "$WORK/ref" 2>"$WORK/ref.err" || { echo "reference run failed: $(cat "$WORK/ref.err")"; exit 2; }
REF_MS=$((($(date +%s%N) - t0) / 1000000))
echo "uninterrupted run: ${REF_MS} ms"

# log_same A B: the same steps 1..N with the same train_loss, lr and val_loss.
log_same() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
def rows(p):
    text = open(p).read()
    assert text.endswith("\n"), "%s: last line unterminated" % p
    return [json.loads(l) for l in text.splitlines()]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert [r["step"] for r in b] == list(range(1, len(a) + 1)), "steps %s" % [r["step"] for r in b]
for ra, rb in zip(a, b):
    for k in ("train_loss", "lr", "val_loss"):
        assert ra.get(k) == rb.get(k), "step %d: %s %r != %r" % (ra["step"], k, ra.get(k), rb.get(k))
EOF
}

# killed_run DIR ARGS...: starts attnlab train ARGS in the background and
# SIGKILLs it after a random delay in [0, REF_MS] ms; sets KILLED=1 if it was
# still running (0: it had finished), RC to its exit status otherwise.
killed_run() {
    local dir=$1 pid delay
    shift
    "$BIN" train "$@" --out "$dir" >>"$dir.out" 2>>"$dir.err" </dev/null &
    pid=$!
    delay=$(((RANDOM * 32768 + RANDOM) % (REF_MS + 1)))
    sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
    KILLED=0
    if kill -9 "$pid" 2>/dev/null; then KILLED=1; fi
    wait "$pid" 2>/dev/null
    RC=$?
}

# continue_args DIR: --resume once the run has its config.json, else the run's own flags (nothing to resume).
continue_args() {
    if [ -e "$1/config.json" ]; then ARGS=(--resume --threads 2 --quiet); else ARGS=("${FLAGS[@]}"); fi
}

PASSED=0 FAILED=0 TOTAL_KILLS=0 EARLY=0
for ((t = 1; t <= TRIALS; t++)); do
    dir=$WORK/trial$t
    rm -rf "$dir" "$dir.out" "$dir.err"
    why= kills=0
    killed_run "$dir" "${FLAGS[@]}"
    kills=$((kills + KILLED))
    [ "$KILLED" -eq 1 ] || [ "$RC" -eq 0 ] || why="first run exit $RC"
    [ -e "$dir/train_state.safetensors" ] || EARLY=$((EARLY + 1)) # killed before its first checkpoint
    while [ -z "$why" ] && [ "$kills" -lt "$KILLS" ] && [ $((RANDOM % 2)) -eq 0 ]; do
        continue_args "$dir"
        killed_run "$dir" "${ARGS[@]}"
        kills=$((kills + KILLED))
        [ "$KILLED" -eq 1 ] || [ "$RC" -eq 0 ] || why="a resumed run failed (exit $RC)"
    done
    continue_args "$dir"
    if [ -z "$why" ] && ! "$BIN" train "${ARGS[@]}" --out "$dir" >>"$dir.out" 2>>"$dir.err" </dev/null; then
        why="the final resume failed: $(tail -n 1 "$dir.err")"
    fi
    if [ -z "$why" ]; then
        for f in model.safetensors train_state.safetensors config.json; do
            cmp -s "$dir/$f" "$WORK/ref/$f" || { why="$f differs from the uninterrupted run"; break; }
        done
    fi
    if [ -z "$why" ]; then why=$(log_same "$WORK/ref/log.jsonl" "$dir/log.jsonl" 2>&1 | tail -n 1); fi
    if [ -z "$why" ]; then
        left=$(find "$dir" -name '*.tmp.*' | head -n 2 | tr '\n' ' ')
        [ -z "$left" ] || why="temp files left: $left"
    fi
    TOTAL_KILLS=$((TOTAL_KILLS + kills))
    if [ -z "$why" ]; then
        PASSED=$((PASSED + 1))
        echo "trial $t: $kills kills, PASS"
        rm -rf "$dir" "$dir.out" "$dir.err"
    else
        FAILED=$((FAILED + 1))
        echo "trial $t: $kills kills, FAIL: $why"
    fi
done
echo "$TRIALS trials: $PASSED passed, $FAILED failed ($TOTAL_KILLS kills; $EARLY trials killed before their first checkpoint)"
[ "$FAILED" -eq 0 ]
