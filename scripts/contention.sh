#!/usr/bin/env bash
# contention.sh: the contention table of docs/bench.md: train, prefill and
# decode timed quiet and with N busy processes (`attnlab bench ... --contend
# N`), under attnlab's OpenMP wait defaults and, for comparison, libgomp's own
# (ATTNLAB_OMP_DEFAULTS=0) and OMP_WAIT_POLICY=PASSIVE.
#
# usage: scripts/contention.sh [--bin PATH/TO/attnlab] [--contend N] [--quick] [--iters K]
#   --contend  busy processes in the contended runs (default 1: one core taken)
#   --quick    small shapes (a few seconds per run) instead of the benches' defaults
#              (train: preset bench; prefill: gpt2, 512 tokens; decode: gpt2 at context 4096)
# Prints one row per bench and policy: best time quiet, best time contended, their ratio.
# Run it on an otherwise quiet machine: the quiet column is only quiet if nothing else runs.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/attnlab
CONTEND=1
QUICK=0
ITERS=5
while [ $# -gt 0 ]; do
    case $1 in
    --bin) BIN=$2; shift 2 ;;
    --contend) CONTEND=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --iters) ITERS=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "contention.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
COMMON=(--sgemm-n 512 --triad-mb 16 --json --iters "$ITERS")
if [ "$QUICK" -eq 1 ]; then
    TRAIN=(train --layers 2 --hidden 128 --heads 4 --context 128 --batch 4)
    PREFILL=(prefill --layers 4 --hidden 256 --heads 4 --tokens 256)
    DECODE=(decode --layers 4 --hidden 256 --heads 4 --decode-context 1024 --tokens 32)
else
    TRAIN=(train)
    PREFILL=(prefill)
    DECODE=(decode)
fi
# the field of each bench's JSON that holds its best time, in seconds (scale)
declare -A FIELD=([train]=step_s_best [prefill]=ms_best [decode]=ms_per_token)
declare -A SCALE=([train]=1 [prefill]=0.001 [decode]=0.001)

# best SECONDS of one bench run: bench_time POLICY CONTEND ARGS...
bench_time() {
    local policy=$1 contend=$2 what=$3
    shift 3
    local env=()
    case $policy in
    libgomp) env=(ATTNLAB_OMP_DEFAULTS=0) ;;
    passive) env=(OMP_WAIT_POLICY=PASSIVE) ;;
    esac
    env "${env[@]}" "$BIN" bench "$what" "$@" "${COMMON[@]}" --contend "$contend" 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.6f" % (j[sys.argv[1]] * float(sys.argv[2])))' \
            "${FIELD[$what]}" "${SCALE[$what]}" 2>/dev/null || echo nan
}

printf '%-8s %-9s %12s %14s %7s   (load average before: %s)\n' bench policy "quiet s" "contended s" ratio \
    "$(cut -d' ' -f1 /proc/loadavg)"
for spec in TRAIN PREFILL DECODE; do
    declare -n args=$spec
    for policy in attnlab libgomp passive; do
        q=$(bench_time "$policy" 0 "${args[@]}")
        c=$(bench_time "$policy" "$CONTEND" "${args[@]}")
        r=$(/usr/bin/python3 -c 'import sys; q, c = map(float, sys.argv[1:]); print("%.2fx" % (c / q))' "$q" "$c" 2>/dev/null)
        printf '%-8s %-9s %12s %14s %7s\n' "${args[0]}" "$policy" "$q" "$c" "$r"
    done
    unset -n args
done
echo "(contended: --contend $CONTEND busy processes; $(nproc) cores; attnlab = its defaults, libgomp = ATTNLAB_OMP_DEFAULTS=0, passive = OMP_WAIT_POLICY=PASSIVE)"
