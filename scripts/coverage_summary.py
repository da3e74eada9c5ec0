#!/usr/bin/env python3
"""coverage_summary.py: what of src/ a test run executed, from the gcov data
of a --coverage build (scripts/coverage.sh makes one and runs the suite).

Reads the .gcda files of the library's and the command line's objects with
`gcov --json-format --stdout` (GCC 9 or later) and merges them per source
line: a line counts as run when any object ran it (a header compiled into
several kernel sets is one file). Functions are merged by name the same way.

usage: coverage_summary.py BUILD                 per file: lines run / lines, functions never run; the total
       coverage_summary.py BUILD --functions     every function no test ran, as FILE: NAME
       coverage_summary.py BUILD --lines FILE    the lines of FILE (e.g. src/infer/sample.c) no test ran

Inlined functions have no out-of-line copy to count, so a small static
function can be listed as never run while its lines were (read --lines
before concluding). A process that replaces itself (execv) loses the counts
of its part before the exec.
"""
import collections
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
OBJECT_DIRS = ("attnlab_lib.dir", "attnlab.dir")


def usage():
    """The usage lines of the docstring, exit status 2."""
    print(__doc__[__doc__.index("usage:"):__doc__.index("\n\n", __doc__.index("usage:"))], file=sys.stderr)
    sys.exit(2)


def collect(build):
    """{file: {line: count}}, {file: {function: count}} over the objects."""
    lines = collections.defaultdict(dict)
    funcs = collections.defaultdict(dict)
    gcdas = []
    build = os.path.abspath(build)
    for d in OBJECT_DIRS:
        gcdas += glob.glob(os.path.join(build, "CMakeFiles", d, "**", "*.gcda"), recursive=True)
    if not gcdas:
        sys.exit("coverage_summary: no .gcda files under %s (build with --coverage and run the tests first)" % build)
    for g in gcdas:
        out = subprocess.run(["gcov", "--json-format", "--stdout", "-o", os.path.dirname(g), g],
                             capture_output=True, cwd=build)
        if out.returncode:
            sys.exit("coverage_summary: gcov failed on %s: %s" % (g, out.stderr.decode(errors="replace").strip()))
        for doc in out.stdout.decode().splitlines():
            if not doc.strip():
                continue
            for f in json.loads(doc)["files"]:
                path = os.path.realpath(os.path.join(build, f["file"]))
                if not path.startswith(ROOT + "src" + os.sep):
                    continue
                name = path[len(ROOT):]
                for ln in f["lines"]:
                    n = ln["line_number"]
                    lines[name][n] = max(lines[name].get(n, 0), ln["count"])
                for fn in f["functions"]:
                    k = fn["demangled_name"]
                    funcs[name][k] = max(funcs[name].get(k, 0), fn["execution_count"])
    return lines, funcs


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        usage()
    build, rest = args[0], args[1:]
    lines, funcs = collect(build)
    total = sum(len(v) for v in lines.values())
    run = sum(1 for v in lines.values() for c in v.values() if c > 0)
    if rest == ["--functions"]:
        for name in sorted(funcs):
            for k in sorted(f for f, c in funcs[name].items() if c == 0):
                print("%s: %s" % (name, k))
    elif len(rest) == 2 and rest[0] == "--lines":
        name = rest[1]
        if name not in lines:
            sys.exit("coverage_summary: no coverage data for %s" % name)
        text = open(ROOT + name, encoding="utf-8").read().split("\n")
        for n in sorted(lines[name]):
            if lines[name][n] == 0:
                print("%d: %s" % (n, text[n - 1]))
    elif not rest:
        rows = []
        for name, v in lines.items():
            hit = sum(1 for c in v.values() if c > 0)
            unrun = sum(1 for c in funcs[name].values() if c == 0)
            rows.append((hit / len(v) if v else 1.0, hit, len(v), unrun, name))
        for frac, hit, n, unrun, name in sorted(rows):
            print("%5.1f %%  %5d / %-5d  %2d unrun functions  %s" % (100 * frac, hit, n, unrun, name))
    else:
        usage()
    print("lines run: %d of %d (%.1f %%), %d source files" % (run, total, 100.0 * run / max(total, 1), len(lines)),
          file=sys.stderr)


if __name__ == "__main__":
    main()
