"""test_tokenizer_regex.py: the Split regex engine (src/tok/regex.c, run by
`al_tokbatch --regex`) against Python's re, an independent backtracking
engine, on random patterns of the part of the dialect where the two agree with
Oniguruma: ASCII literals and classes, `.`, \\d, quantifiers greedy and lazy
including {m,n}, alternation, groups, lookahead, (?i:...) on ASCII letters,
line anchors (re.M) and \\b; texts over a small alphabet with newlines; a
search from every start position. Every search must give the same match.
Patterns the engine refuses (a repetition of what can match empty) and
patterns re rejects are skipped and counted.

Usage (CTest passes these): test_tokenizer_regex.py --exe PATH(al_testdump, beside al_tokbatch) [--attnlab P] [--workdir D]
"""
import argparse
import os
import random
import re
import subprocess
import sys

ATOMS = ["a", "b", "c", " ", "[ab]", "[^a ]", ".", "1", "\\d", "(?i:A)", "^", "$", "\\b", "x", "[a-c]", "\\n"]
QUANTS = ["*", "+", "?", "*?", "+?", "??", "{1,3}", "{2}", "{0,2}?", "{2,}"]
PIECES = ["a", "b", "c", " ", "1", "x", "\n", "A", "ab"]


def gen(rng, depth):
    """A random pattern of the shared dialect."""
    out = ""
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(10 if depth > 0 else 6)
        if k < 6:
            out += rng.choice(ATOMS)
        elif k < 9:
            alt = "|" + gen(rng, depth - 1) if rng.random() < 0.5 else ""
            out += rng.choice(["(", "(?:", "(?!", "(?="]) + gen(rng, depth - 1) + alt + ")"
        else:
            out += gen(rng, depth - 1) + "|"
        if out[-1] not in "|(:^$" and not out.endswith("\\b") and rng.random() < 0.5:
            out += rng.choice(QUANTS)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--attnlab")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    tool = os.path.join(os.path.dirname(os.path.abspath(args.exe)), "al_tokbatch")
    rng = random.Random(18)
    proc = subprocess.Popen([tool, "--regex"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    searches = patterns = refused = rejected = 0
    diffs = []
    for _ in range(1500):
        pat = gen(rng, 3)
        try:
            cre = re.compile(pat, re.M)
        except re.error:
            rejected += 1
            continue
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 20)))
        compiled = True
        for start in range(len(text) + 1):
            proc.stdin.write("%s\t%s\t%d\n" % (pat, text.replace("\n", "\x01"), start))
            proc.stdin.flush()
            got = proc.stdout.readline().strip()
            if got == "ERR":
                compiled = False
                break
            m = cre.search(text, start)
            want = "%d %d" % (m.start(), m.end()) if m else "-1"
            searches += 1
            if got != want:
                diffs.append((pat, text, start, got, want))
        patterns += compiled
        refused += not compiled
    proc.stdin.close()
    proc.wait()
    for pat, text, start, got, want in diffs[:10]:
        print("DIFF /%s/ on %r from %d: attnlab %s, re %s" % (pat, text, start, got, want))
    print("%d patterns (%d refused by the engine, %d rejected by re), %d searches, %d differences"
          % (patterns, refused, rejected, searches, len(diffs)))
    if diffs or searches < 5000 or proc.returncode:
        print("FAIL")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
