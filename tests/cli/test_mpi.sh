#!/usr/bin/env bash
# test_mpi.sh: data-parallel training under Open MPI's mpirun on localhost
# (docs/distributed.md): 1, 2 and 4 ranks (one thread each) give the same
# weights, moments and losses bit for bit as one process summing the same
# shards (--shards); resume works with another rank count; ranks started with
# other settings are refused; a global batch the ranks cannot split is a usage
# error; a rank killed with SIGKILL stops the others within seconds with one
# line, leaving a checkpoint that resumes; the vision task runs too; `bench
# train` reports the communication time. A build without MPI must refuse to
# run as mpirun's copies.
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

begin "kill -9 of one rank: the others stop within seconds, one line; the checkpoint resumes"
K=$WORK/killed
# mpirun kills the other ranks 1 s after it signals them; on a loaded machine rank 0 may need longer to say why
export OMPI_MCA_odls_base_sigkill_timeout=5
timeout 120 mpirun -q --oversubscribe --bind-to none -np 3 "$BIN" train "${TINY[@]}" --batch 6 --steps 100000 \
    --save-every 5 --eval-every 0 --out "$K" >"$OUTF" 2>"$ERRF" </dev/null &
MPIRUN=$! # timeout's process: mpirun is its child, the ranks mpirun's
for _ in $(seq 100); do # until a checkpoint exists
    [ -e "$K/train_state.safetensors" ] && break
    sleep 0.1
done
read -r -a RANKS <<<"$(pgrep -P "$(pgrep -P "$MPIRUN" | head -n 1)" | tr '\n' ' ')"
if [ "${#RANKS[@]}" -ne 3 ]; then
    note "expected 3 rank processes under mpirun, found ${#RANKS[@]}"
    kill "$MPIRUN" 2>/dev/null
else
    kill -9 "${RANKS[2]}"
    T0=$(date +%s)
    wait "$MPIRUN"
    RC=$?
    [ $(($(date +%s) - T0)) -le 10 ] || note "the other ranks took more than 10 s to stop"
    [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] || note "mpirun exit status $RC"
    [ "$(wc -l <"$ERRF")" -eq 1 ] || note "stderr is not one line: $(tr '\n' '|' <"$ERRF")"
    check_stderr "^attnlab: train: another rank stopped or the job is being killed .*the checkpoint of step [0-9]+ is kept"
    STEP=$(grep -oE '"step":[[:space:]]*[0-9]+' "$K/config.json" | grep -oE '[0-9]+$')
    mpi 2 train --resume --out "$K" --steps $((STEP + 2)) --quiet
    check_ok
    check_stderr "resuming .* at step $STEP of $((STEP + 2))"
fi
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
