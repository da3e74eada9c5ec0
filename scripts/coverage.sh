#!/usr/bin/env bash
# coverage.sh: which lines and functions of src/ the test suite runs. Builds
# attnlab with gcov's instrumentation (--coverage, the release flags) in its
# own directory, clears the counts, runs the tests there (ctest, one at a
# time: the counts of concurrent processes merge, but a quiet machine keeps
# the timeouts far), and prints scripts/coverage_summary.py's table, also
# kept in BUILD/coverage.txt with the never-run functions in
# BUILD/coverage-functions.txt (docs/coverage.md).
#
# Instrumented code is slower: a test with a time limit (ref.hf_tokenizers
# loads Gemma-3's tokenizer within 1 s of CPU time) can fail here and pass in
# the plain build; the counts are taken all the same.
#
# usage: scripts/coverage.sh [--build DIR] [--tests REGEX] [--jobs N]
#   --build  the instrumented build directory (default build-cov)
#   --tests  only the ctest tests matching REGEX (default: all)
#   --jobs   compile jobs (default: the cores)
set -u
cd "$(dirname "$0")/.."
BUILD=build-cov
TESTS=
JOBS=$(nproc)
while [ $# -gt 0 ]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --tests) TESTS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    *) echo "usage: scripts/coverage.sh [--build DIR] [--tests REGEX] [--jobs N]" >&2; exit 2 ;;
    esac
done
command -v gcov >/dev/null || { echo "coverage: gcov not found (it comes with gcc)" >&2; exit 1; }
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=--coverage \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage >/dev/null || exit 1
cmake --build "$BUILD" -j "$JOBS" >/dev/null || { echo "coverage: the instrumented build failed" >&2; exit 1; }
find "$BUILD" -name '*.gcda' -delete
(cd "$BUILD" && ctest ${TESTS:+-R "$TESTS"} >ctest.log 2>&1) ||
    echo "coverage: some tests failed in the instrumented build (see $BUILD/ctest.log); counting what ran" >&2
grep -E "tests passed|Failed|\*\*\*" "$BUILD/ctest.log" >&2
python3 scripts/coverage_summary.py "$BUILD" --functions >"$BUILD/coverage-functions.txt" 2>/dev/null
python3 scripts/coverage_summary.py "$BUILD" 2>&1 | tee "$BUILD/coverage.txt"
