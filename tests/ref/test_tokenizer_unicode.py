"""test_tokenizer_unicode.py: src/tok/unicode_tables.c is what
tools/gen_unicode_tables.py makes of the installed Unicode Character Database
(Debian's unicode-data, /usr/share/unicode, which `make test` installs), so the
committed tables cannot drift from the data they claim to be; and a few
characters assigned in Unicode 15.0 have the categories the tables must give.

Without /usr/share/unicode the comparison cannot run: the test says so and
passes (the build itself needs only the committed tables).

Usage (CTest passes these; all are ignored): test_tokenizer_unicode.py [--attnlab P] [--exe P] [--workdir D]
"""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
UCD = "/usr/share/unicode/UnicodeData.txt"


def main():
    if not os.path.exists(UCD):
        print("SKIPPED: %s is missing (apt-get install unicode-data); the tables were not compared" % UCD)
        return 0
    with open(UCD, encoding="utf-8") as f:
        fields = {int(l.split(";")[0], 16): l.split(";") for l in f}
    # Unicode 15.0: Cyrillic Extended-D letters (Lm), Kawi digits (Nd)
    for cp, gc in [(0x1E030, "Lm"), (0x11F50, "Nd"), (0x11F59, "Nd"), (0x1E4D0, "Lo")]:
        if fields.get(cp, [None, None, None])[2] != gc:
            print("FAIL: %s says U+%04X is %s, not %s: not UCD 15" % (UCD, cp, fields.get(cp, ["", "", "?"])[2], gc))
            return 1
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_unicode_tables.py"), "--check"],
                       capture_output=True, text=True)
    print(r.stdout + r.stderr, end="")
    if r.returncode:
        print("FAIL: regenerate: /usr/bin/python3 tools/gen_unicode_tables.py > src/tok/unicode_tables.c")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
