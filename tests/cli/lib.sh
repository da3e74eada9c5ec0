# shellcheck shell=bash
# lib.sh: shared helpers for the command-line tests (tests/cli/test_*.sh).
#
# Usage, at the top of a test script:
#     . "$(dirname "$0")/lib.sh" "$@"     # $1 = path to attnlab, $2 = work dir
#
# It sets BIN (absolute path to attnlab) and WORK (fresh, empty), and provides
#   run ARGS...            run attnlab under `timeout 60` with stdin from
#                          /dev/null; sets RC, and OUTF / ERRF (stdout/stderr)
#   begin NAME             start a case; checks made until `end` are recorded
#   check_* ...            assertions; a failing one appends to the case's reasons
#   end                    print "PASS NAME" or "FAIL NAME: reasons"
#   finish                 print "N passed, M failed" and exit 0 or 1
#   make_text FILE LINES   deterministic English-like text (seeded bash RNG)
#   train_tiny DATA NAME:FLAGS..  tiny models (4 steps on DATA) in $WORK/NAME
#   st_edit SRC DST OP ..  rewrite a safetensors file with one kind of damage
#   write_sp DIR [IDS]     a small SentencePiece-style tokenizer.json
set -u

if [ $# -lt 2 ]; then
    echo "usage: bash $0 PATH/TO/attnlab WORKDIR" >&2
    exit 2
fi
BIN=$(readlink -f "$1")
WORK=$2
PY=/usr/bin/python3
if [ ! -x "$BIN" ]; then
    echo "FAIL setup: $1 is not an executable"
    echo "0 passed, 1 failed"
    exit 1
fi
case "$WORK" in
/ | "") echo "refusing work dir '$WORK'" >&2; exit 2 ;;
esac
rm -rf "$WORK"
mkdir -p "$WORK" || exit 1
WORK=$(readlink -f "$WORK")
OUTF=$WORK/.stdout
ERRF=$WORK/.stderr
RC=0
N_PASS=0
N_FAIL=0
CASE=
WHY=

# ---- running ----

run() {
    timeout 60 "$BIN" "$@" >"$OUTF" 2>"$ERRF" </dev/null
    RC=$?
}

# ---- cases ----

begin() {
    CASE=$1
    WHY=
}

# note REASON: records a failure reason for the current case.
note() { WHY="${WHY:+$WHY; }$1"; }

end() {
    if [ -z "$WHY" ]; then
        echo "PASS $CASE"
        N_PASS=$((N_PASS + 1))
    else
        echo "FAIL $CASE: $WHY"
        if [ -s "$ERRF" ]; then
            echo "    last stderr: $(head -c 400 "$ERRF" | tr '\n' '|')"
        fi
        N_FAIL=$((N_FAIL + 1))
    fi
}

finish() {
    echo "$N_PASS passed, $N_FAIL failed"
    [ "$N_FAIL" -eq 0 ]
    exit $?
}

# ---- assertions (each on the last `run`) ----

# check_no_crash: no timeout, no death by signal, no sanitizer/crash report.
check_no_crash() {
    if [ "$RC" -eq 124 ]; then
        note "timed out (hang?)"
    elif [ "$RC" -gt 128 ] && [ "$RC" -ne 130 ] && [ "$RC" -ne 143 ]; then
        # 130/143: attnlab's own clean exit after SIGINT/SIGTERM (the message is checked separately)
        note "killed by signal $((RC - 128)) (exit $RC)"
    fi
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault|core dumped|Aborted|stack smashing' \
        "$ERRF" "$OUTF" 2>/dev/null; then
        note "crash report in output"
    fi
}

# check_status N: exit status is exactly N.
check_status() {
    if [ "$RC" -ne "$1" ]; then note "exit status $RC, expected $1"; fi
}

# check_one_line_error REGEX: stderr is exactly one line, "attnlab: ...", and
# matches REGEX (extended, case-insensitive).
check_one_line_error() {
    local lines first
    lines=$(awk 'END { print NR }' "$ERRF")
    first=$(head -n 1 "$ERRF")
    if [ "$lines" -ne 1 ] || [ "$(wc -l <"$ERRF")" -ne 1 ]; then
        note "stderr is not exactly one newline-terminated line ($lines lines)"
    fi
    case "$first" in
    "attnlab: "*) ;;
    *) note "stderr does not start with 'attnlab: '" ;;
    esac
    if ! grep -qiE -- "$1" "$ERRF"; then note "error does not mention /$1/"; fi
}

# check_error STATUS REGEX: the whole error contract in one call.
check_error() {
    check_no_crash
    check_status "$1"
    check_one_line_error "$2"
}

# check_ok: exit 0 and no crash.
check_ok() {
    check_no_crash
    check_status 0
}

# check_stdout REGEX / check_stderr REGEX
check_stdout() { grep -qiE -- "$1" "$OUTF" || note "stdout does not match /$1/"; }
check_stderr() { grep -qiE -- "$1" "$ERRF" || note "stderr does not match /$1/"; }
check_stdout_empty() { [ ! -s "$OUTF" ] || note "stdout is not empty"; }
check_stderr_empty() { [ ! -s "$ERRF" ] || note "stderr is not empty"; }

# check_no_tmp DIR...: no "*.tmp.*" leftovers of atomic writes.
check_no_tmp() {
    local d left
    for d in "$@"; do
        [ -d "$d" ] || continue
        left=$(find "$d" -name '*.tmp.*' 2>/dev/null | head -n 3)
        if [ -n "$left" ]; then note "temp files left: $(echo "$left" | tr '\n' ' ')"; fi
    done
}

check_exists() { [ -e "$1" ] || note "$1 does not exist"; }
check_absent() { [ ! -e "$1" ] || note "$1 exists but should not"; }
check_same_file() { cmp -s "$1" "$2" || note "$1 and $2 differ"; }

# PY_JSON_UNIQUE: Python that defines unique(pairs), an object_pairs_hook
# for json.load(s) that fails on a key written twice in one object (legal
# JSON that readers resolve differently: attnlab never writes one). Put it
# before a check_py script: check_py DESC "$PY_JSON_UNIQUE"'...'.
PY_JSON_UNIQUE='
def unique(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), "a key twice: %s" % sorted(k for k in set(keys) if keys.count(k) > 1)
    return dict(pairs)
'

# check_py DESCRIPTION PYTHON_CODE [ARGS...]: runs /usr/bin/python3 -c CODE
# ARGS; a non-zero exit records DESCRIPTION plus the script's last line.
check_py() {
    local desc=$1 code=$2 out
    shift 2
    if ! out=$("$PY" -c "$code" "$@" 2>&1); then note "$desc ($(echo "$out" | tail -n 1))"; fi
}

# browser_check OUT.json ARGS...: runs tests/browser/explore_check.py with
# ARGS in headless Chromium (ATTNLAB_CHROMIUM or Debian's); a failure to run
# it is recorded, its report is left in OUT.json for the checks that follow.
browser_check() {
    local out=$1 chromium=${ATTNLAB_CHROMIUM:-/usr/bin/chromium}
    local check
    check=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/../browser/explore_check.py")
    shift
    if [ ! -x "$chromium" ]; then
        note "$chromium not found (scripts/install-deps.sh --test installs Debian's chromium)"
        return 1
    fi
    if ! timeout 150 "$PY" "$check" --chromium "$chromium" "$@" >"$out" 2>"$out.err"; then
        note "explore_check.py failed: $(tail -n 1 "$out.err")"
        return 1
    fi
}

# ---- fixtures ----

# make_text FILE LINES: simple English sentences from a fixed template, chosen
# by bash's RNG with a fixed seed (same bytes on every run).
make_text() {
    local file=$1 n=$2 i
    local -a subj=("the cat" "a dog" "the old man" "my friend" "the king" "a small bird" "the farmer" "her sister"
        "the teacher" "a young girl")
    local -a verb=("sees" "likes" "eats" "follows" "finds" "helps" "carries" "watches" "calls" "remembers")
    local -a obj=("the ball" "a red apple" "the river" "his house" "the green tree" "a book" "the long road"
        "a warm bread" "the white horse" "an open door")
    local -a tail=("today" "in the morning" "after the rain" "near the hill" "every day" "with a smile" "again"
        "at night")
    RANDOM=4242
    {
        for ((i = 0; i < n; i++)); do
            printf '%s %s %s %s.\n' "${subj[RANDOM % 10]}" "${verb[RANDOM % 10]}" "${obj[RANDOM % 10]}" \
                "${tail[RANDOM % 8]}"
        done
    } >"$file"
}

# train_tiny DATA NAME:FLAGS...: for each spec, a tiny model (2 layers,
# hidden 32, 4 heads, context 16; 4 steps on DATA) with the extra train FLAGS
# in $WORK/NAME, checked (exit 0, model.safetensors written) in the current case.
train_tiny() {
    local data=$1 spec name
    shift
    for spec in "$@"; do
        name=${spec%%:*}
        # shellcheck disable=SC2206
        local extra=(${spec#*:})
        run train --precision f32 --data "$data" --layers 2 --hidden 32 --heads 4 --context 16 --batch 2 --steps 4 --eval-every 4 \
            --eval-tokens 128 --threads 2 --quiet "${extra[@]}" --out "$WORK/$name"
        check_ok
        check_exists "$WORK/$name/model.safetensors"
    done
}

# train_tiny_designs DATA: a tiny model of each KV design in $WORK/mha, gqa
# (2 KV heads), mqa, mla and lrkv, as one case.
train_tiny_designs() {
    begin "tiny models of every design"
    train_tiny "$1" "mha:--attention mha" "gqa:--attention gqa --kv-heads 2" "mqa:--attention mqa --kv-heads 1" \
        "mla:--attention mla" "lrkv:--attention lrkv"
    end
}

# st_edit SRC DST OP [ARG]: copies safetensors SRC to DST with one change:
#   drop NAME          remove tensor NAME (offsets of the rest recomputed)
#   shape NAME D0,D1   give tensor NAME another shape (same byte count)
#   dtype NAME DT      relabel tensor NAME's dtype (bytes unchanged)
#   hlen N             overwrite the header length field with N
#   garble             replace the header with non-JSON bytes of the same length
st_edit() {
    "$PY" - "$@" <<'EOF'
import json, struct, sys
src, dst, op = sys.argv[1:4]
arg = sys.argv[4:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
data = b[8 + n:]
if op == "hlen":
    open(dst, "wb").write(struct.pack("<Q", int(arg[0])) + b[8:])
    sys.exit(0)
if op == "garble":
    open(dst, "wb").write(b[:8] + (b"{not json" + b"!" * n)[:n] + data)
    sys.exit(0)
name = arg[0]
assert name in hdr, name
if op == "drop":
    out, buf, off = {}, bytearray(), 0
    for k, v in hdr.items():
        if k == name:
            continue
        if k == "__metadata__":
            out[k] = v
            continue
        s, e = v["data_offsets"]
        buf += data[s:e]
        out[k] = dict(v, data_offsets=[off, off + e - s])
        off += e - s
    hdr, data = out, bytes(buf)
elif op == "shape":
    hdr[name]["shape"] = [int(x) for x in arg[1].split(",")]
elif op == "dtype":
    hdr[name]["dtype"] = arg[1]
else:
    sys.exit("unknown op " + op)
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + data)
EOF
}

# write_sp DIR [IDS]: a small SentencePiece-style tokenizer.json (Prepend + Replace, merges, <s> template);
# with IDS, padded with unused pieces to IDS token ids
write_sp() {
    mkdir -p "$1"
    "$PY" - "$1/tokenizer.json" "${2:-0}" <<'EOF'
import json, sys
chars = list("\u2581abcdefghijklmnopqrstuvwxyz.,'\n")
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for c in chars:
    vocab[c] = len(vocab)
merges = [("\u2581", "t"), ("h", "e"), ("\u2581t", "he"), ("\u2581", "a"), ("i", "n"), ("e", "r"), ("\u2581", "s"),
          ("o", "r"), ("a", "n"), ("\u2581", "c"), ("\u2581c", "a"), ("\u2581ca", "t")]
for a, b in merges:
    vocab.setdefault(a + b, len(vocab))
tok = {"version": "1.0",
       "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                         "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])],
       "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
       "pre_tokenizer": None,
       "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                          {"Sequence": {"id": "A", "type_id": 0}}],
                          "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
       "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                   {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
       "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": False, "vocab": vocab,
                 "merges": [a + " " + b for a, b in merges]}}
while len(vocab) < int(sys.argv[2]):
    vocab["<pad%d>" % len(vocab)] = len(vocab)
assert len(vocab) <= max(256, int(sys.argv[2]))
json.dump(tok, open(sys.argv[1], "w"), indent=1)
EOF
}

# json_get FILE KEY: prints one top-level field of a JSON object file.
json_get() {
    "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}
