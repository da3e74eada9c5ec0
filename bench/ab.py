#!/usr/bin/python3
"""ab.py: two attnlab binaries on the same benchmark, alternated, compared pair by pair.

How a change's speed is judged here (docs/bench.md: the pool's machines are
shared and noisy, so absolute times from different minutes do not compare):
build the old and the new binary, then

  bench/ab.py OLD NEW [--pairs 6] [--field F ...] [--json] -- bench train --preset gpt2 --precision bf16 --iters 5

runs `OLD ARGS --json` and `NEW ARGS --json` one after the other, `--pairs`
times, the order swapped every other pair (OLD NEW, NEW OLD, ...) so that a
drift of the machine's speed falls on both alike, and prints per pair each
field of both runs and NEW / OLD, then per field the median ratio, its range
and in how many pairs NEW was lower. The fields: those given with --field,
else every timing the benchmark's JSON has (a word "ms" in the name, or
an ending _s or _s_best; not the rates *_per_s). --json prints one object instead (fields,
pairs, summary).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_table import cpu_line  # noqa: E402


def run_json(exe, args):
    """exe ARGS --json: the last JSON object it printed (exits on failure)."""
    cmd = [exe] + args + (["--json"] if "--json" not in args else [])
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["no message"]
        sys.exit("ab: %s: exit %d: %s" % (" ".join(cmd), out.returncode, tail[0]))
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit("ab: %s printed no JSON" % " ".join(cmd))
    return json.loads(lines[-1])


def timing_fields(obj):
    """The benchmark's timings: numeric fields with a word "ms" (fwd_ms, ms_best, ms_per_token) or ending in _s
    or _s_best (step_s), not the rates (*_per_s)."""
    def timing(k):
        return ("ms" in k.split("_") or k.endswith("_s") or k.endswith("_s_best")) and not k.endswith("_per_s")
    return sorted(k for k, v in obj.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and timing(k))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s OLD NEW [--pairs N] [--field F ...] [--json] -- ATTNLAB_ARGS ...")
    ap.add_argument("old", help="the baseline attnlab binary")
    ap.add_argument("new", help="the changed attnlab binary")
    ap.add_argument("--pairs", type=int, default=6, help="alternated pairs (default 6)")
    ap.add_argument("--field", action="append", default=[], help="a JSON field to compare (repeatable)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # after "--": attnlab's arguments
    a, args = ap.parse_args(argv[:cut]), argv[cut + 1:]
    if not args:
        ap.error("give the benchmark after --, e.g. -- bench train --preset gpt2")
    if a.pairs < 1:
        ap.error("--pairs must be at least 1")
    for exe in (a.old, a.new):
        if not os.access(exe, os.X_OK):
            ap.error("%s is not an executable" % exe)
    pairs, fields = [], a.field
    for p in range(a.pairs):
        order = ("old", "new") if p % 2 == 0 else ("new", "old")
        got = {side: run_json(a.old if side == "old" else a.new, args) for side in order}
        if not fields:
            fields = timing_fields(got["old"])
            if not fields:
                sys.exit("ab: the benchmark's JSON has no timing fields: name them with --field")
        for f in fields:
            for side in ("old", "new"):
                if not isinstance(got[side].get(f), (int, float)):
                    sys.exit("ab: field %s is missing or not a number in the %s binary's output" % (f, side))
        pairs.append({f: {"old": got["old"][f], "new": got["new"][f],
                          "ratio": got["new"][f] / got["old"][f] if got["old"][f] else float("nan")} for f in fields})
    summary = {}
    for f in fields:
        r = [p[f]["ratio"] for p in pairs]
        summary[f] = {"median_ratio": statistics.median(r), "min_ratio": min(r), "max_ratio": max(r),
                      "new_lower": sum(p[f]["new"] < p[f]["old"] for p in pairs), "pairs": len(pairs)}
    if a.json:
        print(json.dumps({"cpu": cpu_line(), "args": args, "old": a.old, "new": a.new, "fields": fields,
                          "pairs": pairs, "summary": summary}))
        return
    print("# " + cpu_line())
    print("# %s vs %s: %s" % (a.new, a.old, " ".join(args)))
    for i, p in enumerate(pairs):
        print("pair %d: " % (i + 1) + "; ".join("%s %.4g -> %.4g (%.3fx)" % (f, p[f]["old"], p[f]["new"], p[f]["ratio"])
                                                for f in fields))
    for f in fields:
        s = summary[f]
        print("%s: new/old median %.3f (%.3f-%.3f), new lower in %d of %d pairs" % (
            f, s["median_ratio"], s["min_ratio"], s["max_ratio"], s["new_lower"], s["pairs"]))


if __name__ == "__main__":
    main()
