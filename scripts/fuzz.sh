#!/bin/sh
# Runs the libFuzzer harnesses of tests/fuzz one after the other (docs/fuzzing.md).
#   scripts/fuzz.sh BUILD_DIR SECONDS [NAME...]     (`make fuzz FUZZ_SECONDS=N [FUZZ_ONLY="a b"]`)
# BUILD_DIR was configured with -DAL_FUZZ=ON and clang. Each harness starts from its committed corpus
# tests/fuzz/corpus/<name>/ and writes what it finds new into BUILD_DIR/fuzz-corpus/<name>/ (the committed one is
# only read); a crash, leak, timeout or sanitizer report leaves its input in BUILD_DIR/fuzz-artifacts/<name>/ and
# fails the script. One line per harness: seconds, executions, executions per second, edges covered (cov:).
set -u
build=$1
seconds=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
names="$*"
if [ -z "$names" ]; then
    for f in "$root"/tests/fuzz/*.c; do
        n=$(basename "$f" .c)
        [ "$n" = replay ] || names="$names $n"
    done
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
failed=0
for n in $names; do
    exe="$build/fuzz_$n"
    [ -x "$exe" ] || { echo "fuzz: $exe is not built (configure with -DAL_FUZZ=ON)" >&2; exit 1; }
    mkdir -p "$build/fuzz-corpus/$n" "$build/fuzz-artifacts/$n"
    log="$build/fuzz-$n.log"
    dict=""
    [ -f "$root/tests/fuzz/$n.dict" ] && dict="-dict=$root/tests/fuzz/$n.dict"
    # shellcheck disable=SC2086
    "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$build/fuzz-artifacts/$n/" $dict "$build/fuzz-corpus/$n" "$root/tests/fuzz/corpus/$n" \
        >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    if [ "$rc" = 0 ]; then
        echo "fuzz $n: ${seconds} s, ${execs:-?} execs, ${rate:-?} exec/s, cov ${cov:-?} edges"
    else
        failed=1
        echo "fuzz $n: FAILED (exit $rc) after ${execs:-?} execs: see $log and $build/fuzz-artifacts/$n/" >&2
    fi
done
exit $failed
