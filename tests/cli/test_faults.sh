#!/usr/bin/env bash
# test_faults.sh: injected faults (docs/faults.md), reduced for `make test`:
# the allocation and write sweep of scripts/fault_sweep.sh over every
# seventh allocation call and write point, at most 6 per case and kind
# (attnlab_faults, built next to attnlab), every allocation of the
# tokenize case (a tokenizer's loading), each allocation of a study's plan,
# 5 kill -9 trials of scripts/kill_trials.sh, a run killed before
# its first checkpoint resuming from step 0, stale temp files removed on
# resume, and `bench --contend` leaving no busy process behind (normal end,
# SIGINT, SIGKILL).
#
# usage: bash tests/cli/test_faults.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"
ROOT=$(readlink -f "$(dirname "$0")/../..")
FBIN=$(dirname "$BIN")/attnlab_faults

DATA=$WORK/data.txt
make_text "$DATA" 300
TINY=(--precision f32 --data "$DATA" --layers 2 --hidden 32 --heads 4 --context 16 --batch 2 --steps 6 --eval-every 2
    --eval-tokens 128 --save-every 2 --threads 2 --quiet)

begin "fault sweep (every 7th allocation and write point, <= 6 each): one-line errors, no crash, checkpoints intact"
out=$(bash "$ROOT/scripts/fault_sweep.sh" --build "$(dirname "$BIN")" --stride 7 --max-runs 6 --work "$WORK/sweep" 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
[ "$rc" -eq 0 ] || note "the sweep failed ($(echo "$out" | tail -n 1))"
echo "$out" | grep -qE '^[0-9]+ runs, 0 failed$' || note "no summary line"
runs=$(echo "$out" | sed -n 's/^\([0-9]*\) runs, .*/\1/p')
[ "${runs:-0}" -ge 100 ] || note "only ${runs:-0} runs" # 21 cases: 21 x 6 allocation + 13 x 6 write runs, and each case's fault-free one
end

begin "every allocation of a tokenizer's loading fails in turn: an error, or the fault-free ids"
# the tokenize case's fixture makes the normalizers' strings and a normalized added token's each allocate
# (fault_sweep.sh); a failure there once loaded a tokenizer without them, exit 0 with other ids
out=$(bash "$ROOT/scripts/fault_sweep.sh" --build "$(dirname "$BIN")" --cases '^tokenize$' --only alloc \
    --work "$WORK/sweep-tok" 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
[ "$rc" -eq 0 ] || note "the sweep failed ($(echo "$out" | tail -n 1))"
runs=$(echo "$out" | sed -n 's/^\([0-9]*\) runs, 0 failed$/\1/p')
[ "${runs:-0}" -ge 300 ] || note "only ${runs:-0} runs, or some failed"
end

begin "study: out of memory while looking for Fashion-MNIST is an error, never a study planned without its ViTs"
# each allocation up to the study's plan fails in turn (the sweep's study case runs without the ViTs); until
# session 44 a failure in the images' check planned the study without them, exit 0
FM=/usr/share/datasets/fashion-mnist
if [ -e $FM/t10k-images-idx3-ubyte.gz ]; then
    make_text "$WORK/study.txt" 3000
    planned=
    for ((n = 1; n <= 200; n++)); do
        rm -rf "$WORK/st"
        ATTNLAB_FAULT_ALLOC=$n OMP_NUM_THREADS=1 timeout 120 "$FBIN" study --budget tiny --data "$WORK/study.txt" \
            --precision f32 --threads 1 --max-runs 1 --out "$WORK/st" >/dev/null 2>"$WORK/st.err" </dev/null
        rc=$?
        planned=$(grep '^study: budget' "$WORK/st.err")
        [ -z "$planned" ] || break
        if [ "$rc" -ne 1 ] || ! tail -n 1 "$WORK/st.err" | grep -q 'memory'; then
            note "allocation $n: exit $rc, $(tail -n 1 "$WORK/st.err")"
            break
        fi
    done
    echo "    planned once allocation $n failed: $planned"
    echo "$planned" | grep -q 'ViTs' || note "allocation $n: planned without the ViTs"
else
    echo "    skipped: no Fashion-MNIST"
fi
end

begin "5 kill -9 trials: every resumed run ends bit-equal to an uninterrupted one"
out=$(bash "$ROOT/scripts/kill_trials.sh" --bin "$BIN" --trials 5 --work "$WORK/kill" --seed 3 2>&1)
rc=$?
echo "$out" | tail -n 1 | sed 's/^/    /'
[ "$rc" -eq 0 ] || note "$(echo "$out" | grep FAIL | head -n 2 | tr '\n' ' ')"
echo "$out" | grep -q '^5 trials: 5 passed, 0 failed' || note "not 5 passed"
end

begin "a run stopped before its first checkpoint resumes from step 0, bit-equal"
run train "${TINY[@]}" --out "$WORK/ref"
check_ok
# the first write point of the first checkpoint fails (those before it: config.json, written at the start, and
# log lines): config.json and log.jsonl exist, no checkpoint
for ((n = 1; n <= 60; n++)); do
    rm -rf "$WORK/early"
    ATTNLAB_FAULT_WRITE=$n timeout 60 "$FBIN" train "${TINY[@]}" --out "$WORK/early" >"$OUTF" 2>"$ERRF" </dev/null
    RC=$?
    grep -q 'model.safetensors' "$ERRF" && break
done
check_error 1 "model.safetensors.*no space left"
check_exists "$WORK/early/config.json"
check_absent "$WORK/early/train_state.safetensors"
check_absent "$WORK/early/model.safetensors"
check_no_tmp "$WORK/early"
run train --resume --quiet --threads 2 --out "$WORK/early"
check_ok
check_stderr "resuming .* at step 0 of 6"
for f in model.safetensors train_state.safetensors config.json; do check_same_file "$WORK/early/$f" "$WORK/ref/$f"; done
end

begin "resume removes the temp files of a writer killed mid-save, keeps a live one's"
dead=$(sh -c 'echo $$') # a pid that has exited
printf x >"$WORK/ref/model.safetensors.tmp.$dead"
printf x >"$WORK/ref/train_state.safetensors.tmp.$dead"
printf x >"$WORK/ref/config.json.tmp.$$" # this shell: alive
run train --resume --steps 8 --quiet --threads 2 --out "$WORK/ref"
check_ok
check_absent "$WORK/ref/model.safetensors.tmp.$dead"
check_absent "$WORK/ref/train_state.safetensors.tmp.$dead"
check_exists "$WORK/ref/config.json.tmp.$$"
rm -f "$WORK/ref/config.json.tmp.$$"
end

# bench_session SIGNAL ITERS: runs a small contended bench of ITERS steps in its own session, sends SIGNAL (none:
# let it end) once its busy processes run, and checks that none of them outlives it.
BENCH=(bench train --layers 1 --hidden 32 --heads 4 --context 16 --batch 2 --sgemm-n 64 --triad-mb 1 --contend 2 --json)
bench_session() {
    local sig=$1 sid i=0 busy
    rm -f "$WORK/sid"
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$WORK/sid" timeout 120 "$BIN" "${BENCH[@]}" --iters "$2" \
        >"$OUTF" 2>"$ERRF" </dev/null &
    local launcher=$!
    while [ ! -s "$WORK/sid" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
    sid=$(cat "$WORK/sid")
    if [ "$sig" != none ]; then
        i=0
        while [ "$(pgrep -s "$sid" -x attnlab-busy | wc -l)" -lt 2 ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i + 1)); done
        [ $i -lt 1500 ] || note "the busy processes never started"
        kill -"$sig" "$(pgrep -P "$sid")" 2>/dev/null # timeout(1) is the session leader, attnlab its child
    fi
    wait "$launcher"
    RC=$?
    # PR_SET_PDEATHSIG is delivered asynchronously: give a loaded machine 10 s (zombies count as gone)
    i=0
    while busy=$(ps -s "$sid" -o pid=,stat= | awk '$2 !~ /^Z/ { printf "%s ", $1 }') && [ -n "$busy" ] && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    [ -z "$busy" ] || note "processes left after the bench ($sig): $busy"
    pkill -KILL -s "$sid" 2>/dev/null # never leave them running, whatever the test found
}

begin "bench --contend 2: reports its contention, stops its busy processes at the end"
bench_session none 20
check_ok
check_py "no \"contend\": 2 in the JSON" 'import json,sys; assert json.load(open(sys.argv[1]))["contend"] == 2' "$OUTF"
end
for sig in INT KILL; do
    begin "bench --contend 2: SIG$sig to the bench stops its busy processes too"
    bench_session "$sig" 100000
    check_status $((128 + $([ "$sig" = INT ] && echo 2 || echo 9)))
    end
done

finish
