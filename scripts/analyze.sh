#!/usr/bin/env bash
# analyze.sh: clang-14's static analyzer (`clang --analyze`, the engine of
# scan-build) over every source file of the library and the CLI, with the
# path of each finding as text (docs/static-analysis.md says how to read
# them and what the last run found).
#
# It configures a build directory with clang-14 only to get the compile
# commands (compile_commands.json) and the generated explorer sources, then
# analyzes each file on its own with every instruction set the kernel files
# name in their `#pragma GCC target` (clang ignores the pragma), so the
# AVX-512 and AMX files are analyzed too. Nothing is built or linked.
#
# usage: scripts/analyze.sh [--build DIR] [--out DIR] [--jobs N]
#   --build  the directory to configure (default build-analyze)
#   --out    where each file's findings go, one text file per source file
#            with findings (default BUILD/findings)
# Prints one line per finding, then "N findings"; exit 0 either way (1 if
# the analysis itself could not run).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-analyze
OUT=
JOBS=$(nproc)
while [ $# -gt 0 ]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    *) echo "usage: scripts/analyze.sh [--build DIR] [--out DIR] [--jobs N]" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$BUILD/findings}
command -v clang-14 >/dev/null || { echo "analyze.sh: clang-14 is missing (make test-deps installs it)" >&2; exit 1; }
ISA="-mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mamx-tile -mamx-bf16 -mfma -mf16c"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=clang-14 -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_C_FLAGS="$ISA -Wno-unknown-pragmas" >"$BUILD.cmake.log" 2>&1 ||
    { echo "analyze.sh: cmake failed (see $BUILD.cmake.log)" >&2; exit 1; }
# the explorer's page, compiled into the library from generated sources
make -C "$BUILD" -f CMakeFiles/attnlab_lib.dir/build.make generated/explore_page.c generated/explore_serve_script.c \
    >/dev/null 2>&1 ||
    { echo "analyze.sh: generating the explorer's sources failed" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"
/usr/bin/python3 - "$BUILD/compile_commands.json" "$OUT" "$JOBS" <<'PY'
import concurrent.futures, json, os, shlex, subprocess, sys
commands, out, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
units = {}
for e in json.load(open(commands)):  # a CLI file is compiled for attnlab and attnlab_faults: once is enough
    if "/src/" in e["file"] and "/tests/" not in e["file"]:
        units.setdefault(e["file"], e)

def analyze(e):
    args, cmd, skip = shlex.split(e["command"]), [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c":
            cmd.append(a)
    cmd[1:1] = ["--analyze", "-Xclang", "-analyzer-output=text", "-o", "/dev/null"]
    r = subprocess.run(cmd, cwd=e["directory"], capture_output=True, text=True)
    return e["file"], r.returncode, r.stderr

total, broken = 0, 0
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    for path, rc, text in pool.map(analyze, sorted(units.values(), key=lambda e: e["file"])):
        found = [l for l in text.splitlines() if ": warning: " in l and l.rstrip().endswith("]")
                 and "[-W" not in l]
        if rc != 0:
            broken += 1
            print("analyze.sh: %s did not compile:\n%s" % (path, text[-2000:]), file=sys.stderr)
        if found:
            name = path.split("/src/", 1)[1].replace("/", "_") + ".txt"
            open(os.path.join(out, name), "w").write(text)
            for line in found:
                print(line.split("/src/", 1)[-1] if "/src/" in line else line)
            total += len(found)
print("%d findings in %d files (paths: %s)" % (total, len(units), out))
sys.exit(1 if broken else 0)
PY
