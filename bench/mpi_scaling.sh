#!/bin/bash
# mpi_scaling.sh: the gpt2 training step as 1 rank x 2 threads (a plain run) and
# as 2 ranks x 1 thread under mpirun, with the all-reduce overlapped with the
# backward (the default) and after it (ATTNLAB_OVERLAP=0), alternated `rounds`
# times in one session so the ratios survive a noisy machine
# (docs/distributed.md, "Measured here").
#   bench/mpi_scaling.sh [ATTNLAB] [ROUNDS] [PRESET] [SHARDS]
# SHARDS: --shards of the 2x1 runs (default: mpirun's, one per sequence; 2: one
# shard per rank, whose whole backward can hide the all-reduce).
set -eu
exe=${1:-build/attnlab}
rounds=${2:-2}
preset=${3:-gpt2}
shards=${4:+--shards $4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
show() { # label, then the JSON line of bench train
    /usr/bin/python3 -c 'import json, sys
d = json.loads(sys.stdin.readline())
print("%-9s step best %.3f s, mean %.3f s%s" % (sys.argv[1], d["step_s_best"], d["step_s"],
      ", waits %.3f s/step for comm after the backward (buckets took %.3f s), %d shards, %.1f MB all-reduced in %d buckets, %d during the backward"
      % (d["comm_s"], d["comm_busy_s"], d["shards"], d["allreduce_bytes_per_step"] / 1e6, d["buckets"],
         d["buckets_overlapped"]) if "comm_s" in d else ""))' "$1"
}
for _ in $(seq "$rounds"); do
    OMP_NUM_THREADS=2 "$exe" bench train --preset "$preset" --precision f32 --iters 4 --threads 2 --json 2>/dev/null | show 1x2
    for overlap in 1 0; do
        mpirun -q --oversubscribe -np 2 -x OMP_NUM_THREADS=1 -x ATTNLAB_OVERLAP=$overlap "$exe" bench train \
            --preset "$preset" --precision f32 --iters 4 --threads 1 $shards --json 2>/dev/null | show "2x1 ov=$overlap"
    done
done
