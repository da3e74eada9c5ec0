#!/usr/bin/env bash
# test_mpi.sh: data-parallel training under Open MPI's mpirun on localhost
# (docs/distributed.md): 1, 2 and 4 ranks (one thread each) give the same
# weights, moments and losses bit for bit as one process summing the same
# shards (--shards), in fp32 and in BF16 on each BF16 engine the CPU runs;
# resume works with another rank count; ranks started with other settings are
# refused; a global batch the ranks cannot split is a usage error; a rank
# killed with SIGKILL stops the others within seconds with one line, leaving a
# checkpoint that resumes; the vision task runs too; `bench train` reports the
# communication time. The all-reduce overlapped with the backward (default) and
# after it (ATTNLAB_OVERLAP=0) give the same bits, and buckets do go out during
# the backward; a rank stopped with SIGSTOP (hung, not dead) makes the others
# stop within seconds with one line (heartbeat). A build without MPI must
# refuse to run as mpirun's copies.
#
# usage: bash tests/cli/test_mpi.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

# CI runs as root; these VMs' shared-memory transport has no single-copy mechanism
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1

if ! command -v mpirun >/dev/null; then
    begin "mpirun is installed (openmpi-bin, scripts/install-deps.sh)"
    note "mpirun not found"
    end
    finish
fi

# mpi NP ARGS...: attnlab under mpirun -np NP (quiet: only the ranks' own output)
mpi() {
    local np=$1
    shift
    timeout 120 mpirun -q --oversubscribe --bind-to none -np "$np" "$BIN" "$@" >"$OUTF" 2>"$ERRF" </dev/null
    RC=$?
}

DATA=$WORK/data.txt
make_text "$DATA" 600
TINY=(--data "$DATA" --layers 2 --hidden 32 --heads 4 --kv-heads 2 --context 24 --batch 4 --steps 4 --warmup 1
    --lr 3e-3 --eval-every 2 --eval-tokens 512 --save-every 2 --threads 1 --quiet --precision f32)

# A build without MPI refuses mpirun's environment (and the rest cannot run).
mpi 2 train "${TINY[@]}" --out "$WORK/probe"
if grep -q "this build has no MPI" "$ERRF"; then
    begin "a build without MPI refuses to run as mpirun's copies, one line each"
    check_no_crash
    check_status 1
    [ "$(sort -u "$ERRF" | wc -l)" -eq 1 ] || note "the ranks' errors are not one line"
    end
    finish
fi

# same_run A B: the two run directories hold the same weights, training state and losses
same_run() {
    check_same_file "$1/model.safetensors" "$2/model.safetensors"
    check_same_file "$1/train_state.safetensors" "$2/train_state.safetensors"
    diff -q <(grep -o '"train_loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$1/log.jsonl") \
        <(grep -o '"train_loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$2/log.jsonl") >/dev/null ||
        note "$1 and $2 logged other losses"
}

# ---------------------------------------------------------------- N-independence

begin "one process summing 4 shards (--shards 4, 2 threads)"
run train "${TINY[@]}" --shards 4 --threads 2 --out "$WORK/ref"
check_ok
check_stderr_empty
end

for np in 1 2 4; do
    begin "mpirun -np $np: the same weights, state and losses bit for bit"
    mpi "$np" train "${TINY[@]}" --out "$WORK/np$np"
    check_ok
    check_stderr_empty
    same_run "$WORK/ref" "$WORK/np$np"
    check_py "log.jsonl lacks ranks = $np and comm_s" '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2, 3, 4], [r["step"] for r in rows]
for r in rows:
    assert r["ranks"] == int(sys.argv[2]) and r["comm_s"] >= 0, r
assert "val_loss" in rows[-1]
' "$WORK/np$np/log.jsonl" "$np"
    end
done

begin "the plain one-pass sum (--shards 1) differs from the shard sum by rounding only"
run train "${TINY[@]}" --out "$WORK/plain"
check_ok
check_py "plain and sharded weights are not within 1e-4" '
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k != "__metadata__":
            s, e = v["data_offsets"]
            out[k] = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
worst = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
assert 0 < worst < 1e-4, "max |difference| %g" % worst
' "$WORK/plain/model.safetensors" "$WORK/ref/model.safetensors"
end

begin "resume with another rank count: 2 steps on 2 ranks, then 4 ranks to step 4"
mpi 2 train "${TINY[@]}" --steps 2 --out "$WORK/resumed"
check_ok
mpi 4 train --resume --out "$WORK/resumed" --steps 4 --quiet
check_ok
check_stderr "resuming .* at step 2 of 4"
same_run "$WORK/ref" "$WORK/resumed"
end

# ---------------------------------------------------------------- BF16

# Mixed precision keeps the argument (docs/distributed.md): a shard's products are
# row-independent on every engine and the sums between shards and ranks are of
# fp32 gradients. Checked per BF16 engine, on a model whose products span several
# of the engines' tiles, one process on 2 threads against ranks of 1 thread.
BF=(--data "$DATA" --layers 2 --hidden 128 --heads 4 --kv-heads 2 --context 64 --batch 4 --steps 3 --warmup 1
    --lr 3e-3 --eval-every 3 --eval-tokens 512 --threads 1 --quiet --precision bf16)
begin "the fp32 run the BF16 runs must differ from"
run train "${BF[@]}" --precision f32 --shards 4 --out "$WORK/bf_f32"
check_ok
end
for engine in amx onednn avx512-bf16 emulated; do
    begin "--precision bf16 on the $engine engine: mpirun -np 2 and 4 give one process's bits"
    export ATTNLAB_BF16_ENGINE=$engine
    run train "${BF[@]}" --shards 4 --threads 2 --out "$WORK/bf_$engine"
    check_ok
    ran=$(grep -o "engine: [a-z0-9-]*" "$ERRF" | cut -d' ' -f2)
    if [ "$ran" != "$engine" ]; then
        echo "# the $engine engine cannot run on this CPU (it fell to ${ran:-?}): not tested here"
        unset ATTNLAB_BF16_ENGINE
        end
        continue
    fi
    cmp -s "$WORK/bf_f32/model.safetensors" "$WORK/bf_$engine/model.safetensors" &&
        note "the $engine run gave the f32 run's weights"
    for np in 2 4; do
        mpi "$np" train "${BF[@]}" --out "$WORK/bf_${engine}_np$np"
        check_ok
        check_stderr "engine: $engine\)"
        same_run "$WORK/bf_$engine" "$WORK/bf_${engine}_np$np"
    done
    unset ATTNLAB_BF16_ENGINE
    end
done

# ---------------------------------------------------------------- overlap

# a model of several all-reduce buckets (about 620k floats, buckets of 256k: edges inside tensors)
MID=(--data "$DATA" --layers 3 --hidden 128 --heads 4 --kv-heads 2 --context 16 --batch 4 --steps 3 --warmup 1
    --lr 3e-3 --eval-every 0 --threads 1 --quiet --precision f32)

begin "all-reduce overlapped with the backward or not (ATTNLAB_OVERLAP=0): the same bits as one process"
run train "${MID[@]}" --shards 4 --out "$WORK/mid_ref"
check_ok
mpi 2 train "${MID[@]}" --out "$WORK/mid_on"
check_ok
export ATTNLAB_OVERLAP=0
mpi 2 train "${MID[@]}" --out "$WORK/mid_off"
check_ok
unset ATTNLAB_OVERLAP
mpi 4 train "${MID[@]}" --out "$WORK/mid_on4"
check_ok
same_run "$WORK/mid_ref" "$WORK/mid_on"
same_run "$WORK/mid_ref" "$WORK/mid_off"
same_run "$WORK/mid_ref" "$WORK/mid_on4"
end

begin "overlap on and off with 3 shards per rank (no power of two): the same bits"
mpi 2 train "${MID[@]}" --batch 6 --out "$WORK/mid6_on"
check_ok
export ATTNLAB_OVERLAP=0
mpi 2 train "${MID[@]}" --batch 6 --out "$WORK/mid6_off"
check_ok
unset ATTNLAB_OVERLAP
same_run "$WORK/mid6_on" "$WORK/mid6_off"
end

# bench_buckets: bench train under mpirun -np 2 on the MID shape; prints "buckets buckets_overlapped"
bench_buckets() {
    mpi 2 bench train --layers 3 --hidden 128 --heads 4 --kv-heads 2 --context 16 --batch 4 --iters 1 --sgemm-n 64 \
        --triad-mb 1 --threads 1 --precision f32 --json
    /usr/bin/python3 -c 'import json, sys
j = json.loads(open(sys.argv[1]).read())
print(j["buckets"], j["buckets_overlapped"])' "$OUTF" 2>/dev/null
}

begin "bench train: buckets go out during the backward with overlap, none without"
read -r B_ALL B_EARLY <<<"$(bench_buckets)"
[ "${B_ALL:-0}" -ge 3 ] || note "expected at least 3 buckets, got '${B_ALL:-}'"
[ "${B_EARLY:-0}" -ge 1 ] && [ "${B_EARLY:-0}" -lt "${B_ALL:-0}" ] ||
    note "with overlap, expected 1..$((${B_ALL:-1} - 1)) buckets during the backward, got '${B_EARLY:-}'"
export ATTNLAB_OVERLAP=0
read -r B_ALL B_EARLY <<<"$(bench_buckets)"
unset ATTNLAB_OVERLAP
[ "${B_EARLY:-x}" = 0 ] || note "ATTNLAB_OVERLAP=0: expected no bucket during the backward, got '${B_EARLY:-}'"
end

# ---------------------------------------------------------------- refusals

begin "ranks started with other settings are refused at start, one line"
timeout 120 mpirun -q --oversubscribe --bind-to none -np 1 "$BIN" train "${TINY[@]}" --out "$WORK/differ" : \
    -np 1 "$BIN" train "${TINY[@]}" --lr 2e-3 --out "$WORK/differ" >"$OUTF" 2>"$ERRF" </dev/null
RC=$?
check_error 1 "rank 1 was started with other training settings"
check_absent "$WORK/differ/config.json"
end

begin "a global batch the ranks cannot split: usage error, one line"
mpi 3 train "${TINY[@]}" --out "$WORK/split"
check_error 2 "--batch 4 .*divisible by the 3 ranks"
end

begin "shards the ranks cannot split: one line"
mpi 2 train "${TINY[@]}" --shards 1 --out "$WORK/split1"
check_error 1 "1 shards .* over 2 ranks"
end

# ---------------------------------------------------------------- faults

# stop_rank SIGNAL VICTIM OUT: a 3-rank run (a checkpoint every 5 steps) whose rank VICTIM gets SIGNAL once a
# checkpoint exists. Sets RC (mpirun's status), SPOKE_S (seconds from the signal to the first line on stderr, empty:
# none) and ENDED_S (to the job's end); notes when the exit status or the one line on stderr is wrong.
stop_rank() {
    local out=$3 job ranks t0
    timeout 120 mpirun -q --oversubscribe --bind-to none -np 3 "$BIN" train "${TINY[@]}" --batch 6 --steps 100000 \
        --save-every 5 --eval-every 0 --out "$out" >"$OUTF" 2>"$ERRF" </dev/null &
    job=$! # timeout's process: mpirun is its child, the ranks mpirun's
    for _ in $(seq 100); do # until a checkpoint exists
        [ -e "$out/train_state.safetensors" ] && break
        sleep 0.1
    done
    read -r -a ranks <<<"$(pgrep -P "$(pgrep -P "$job" | head -n 1)" | tr '\n' ' ')"
    SPOKE_S="" ENDED_S=""
    if [ "${#ranks[@]}" -ne 3 ]; then
        note "expected 3 rank processes under mpirun, found ${#ranks[@]}"
        kill "$job" 2>/dev/null
        wait "$job"
        return 1
    fi
    kill "-$1" "${ranks[$2]}"
    t0=$(date +%s)
    while kill -0 "$job" 2>/dev/null; do
        [ -z "$SPOKE_S" ] && [ -s "$ERRF" ] && SPOKE_S=$(($(date +%s) - t0))
        sleep 0.1
    done
    wait "$job"
    RC=$?
    ENDED_S=$(($(date +%s) - t0))
    [ -z "$SPOKE_S" ] && [ -s "$ERRF" ] && SPOKE_S=$ENDED_S
    [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] || note "mpirun exit status $RC"
    [ "$(wc -l <"$ERRF")" -eq 1 ] || note "stderr is not one line: $(tr '\n' '|' <"$ERRF")"
}

# resumes_stopped OUT: the checkpoint a stopped job kept resumes on 2 ranks
resumes_stopped() {
    local step
    step=$(grep -oE '"step":[[:space:]]*[0-9]+' "$1/config.json" | grep -oE '[0-9]+$')
    mpi 2 train --resume --out "$1" --steps $((step + 2)) --quiet
    check_ok
    check_stderr "resuming .* at step $step of $((step + 2))"
}

begin "kill -9 of one rank: the others stop within seconds, one line; the checkpoint resumes"
K=$WORK/killed
# mpirun kills the other ranks 1 s after it signals them; on a loaded machine rank 0 may need longer to say why
export OMPI_MCA_odls_base_sigkill_timeout=5
if stop_rank KILL 2 "$K"; then
    [ "$ENDED_S" -le 10 ] || note "the other ranks took more than 10 s to stop"
    check_stderr "^attnlab: train: another rank stopped or the job is being killed .*the checkpoint of step [0-9]+ is kept"
    resumes_stopped "$K"
fi
end

begin "a rank stopped (SIGSTOP: hung, not dead): rank 0 says so within seconds, one line; the checkpoint resumes"
H=$WORK/hung
export ATTNLAB_HEARTBEAT_S=2
if stop_rank STOP 2 "$H"; then
    [ -n "$SPOKE_S" ] && [ "$SPOKE_S" -le 8 ] || note "the error came after ${SPOKE_S:-no} s (heartbeat 2 s)"
    [ "$ENDED_S" -le 30 ] || note "the job took more than 30 s to end"
    check_stderr "^attnlab: train: rank 2 has not been heard from for 2 s: it hangs or was stopped .*the checkpoint of step [0-9]+ is kept"
    resumes_stopped "$H"
fi
end

begin "rank 0 stopped: rank 1 says so within seconds, one line"
if stop_rank STOP 0 "$WORK/hung0"; then
    [ -n "$SPOKE_S" ] && [ "$SPOKE_S" -le 8 ] || note "the error came after ${SPOKE_S:-no} s (heartbeat 2 s)"
    check_stderr "^attnlab: train: rank 0 has not been heard from for 2 s: it hangs or was stopped \(rank 1 waited"
fi
unset ATTNLAB_HEARTBEAT_S
end

# ---------------------------------------------------------------- bench

begin "bench train under mpirun -np 2: rank 0 alone reports, with comm_s and the bytes all-reduced"
mpi 2 bench train --layers 1 --hidden 32 --heads 4 --context 16 --batch 4 --iters 2 --sgemm-n 64 --triad-mb 1 \
    --threads 1 --precision f32 --json
check_ok
check_py "bench train --json under mpirun is not one object with ranks, shards, comm_s, bytes" '
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l]
assert len(lines) == 1, "%d lines on stdout" % len(lines)
j = json.loads(lines[0])
assert j["ranks"] == 2 and j["shards"] == 4, j
assert j["comm_s"] > 0 and j["comm_s"] < j["step_s"], j
assert j["allreduce_bytes_per_step"] > 0 and j["allreduce_bytes_per_step"] % 4 == 0, j
' "$OUTF"
end

# ---------------------------------------------------------------- vision

begin "vision under mpirun -np 2: the same weights as one process with --shards 8"
VIS=(--task vision --layers 1 --hidden 32 --heads 2 --patch 7 --batch 8 --steps 3 --train-subset 64 --eval-images 32
    --eval-every 0 --warmup 1 --threads 1 --quiet --precision f32)
run train "${VIS[@]}" --shards 8 --out "$WORK/vis_ref"
check_ok
mpi 2 train "${VIS[@]}" --out "$WORK/vis2"
check_ok
check_same_file "$WORK/vis_ref/model.safetensors" "$WORK/vis2/model.safetensors"
end

# ---------------------------------------------------------------- study

begin "study under mpirun -np 2, stopped after 2 runs and continued: every run as in one uninterrupted job"
mpi 2 study --budget tiny --out "$WORK/study_whole" --threads 1 --precision f32
check_ok
mpi 2 study --budget tiny --out "$WORK/study_parts" --threads 1 --precision f32 --max-runs 2
check_ok
grep -q "stopped after 2 runs" "$ERRF" "$OUTF" || note "--max-runs 2 did not stop after 2 runs"
mpi 2 study --budget tiny --out "$WORK/study_parts" --threads 1 --precision f32
check_ok
for f in report.json report.md heads.npy attnmaps.npy; do
    [ -s "$WORK/study_parts/$f" ] || note "the continued study lacks $f"
done
for r in "$WORK"/study_whole/runs/*/; do
    check_same_file "$r/model.safetensors" "$WORK/study_parts/runs/$(basename "$r")/model.safetensors"
done
end

finish
