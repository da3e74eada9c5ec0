#!/usr/bin/env bash
# test_tokenize.sh: `attnlab tokenize` and text through a model's tokenizer:
#   - --help, usage errors (exit 2), missing, malformed and unsupported
#     tokenizer.json files (exit 1, one line naming the problem);
#   - a byte model (no tokenizer.json): ids are the bytes, and back;
#   - end to end on a tiny trained byte model given a tokenizer.json:
#       * a byte-level tokenizer whose 256 ids are the bytes: eval, generate
#         and attnmap give exactly what the byte tokenizer gives;
#       * a SentencePiece-style tokenizer with merges (under 256 ids): eval
#         reports loss per token and bits per byte over the file's bytes,
#         generate, attnmap and explore label tokens by their pieces, compare
#         refuses models that tokenize the text differently.
# (Models with more than 256 ids come with Hugging Face checkpoints; their
# end-to-end test is the model loader's.)
. "$(dirname "$0")/lib.sh" "$@"

# ---------------------------------------------------------------- fixtures

mkdir -p "$WORK/bytes" "$WORK/empty" "$WORK/big"
echo '{"vocab_size": 256}' >"$WORK/bytes/config.json"
echo '{"vocab_size": 32000}' >"$WORK/big/config.json"

# write_bytelevel DIR: byte-level BPE whose 256 ids are the bytes (no merges),
# the tokenizer.json the Hugging Face test checkpoints carry
write_bytelevel() {
    mkdir -p "$1"
    PYTHONPATH="$(cd "$(dirname "$0")/../ref" && pwd)" "$PY" -c \
        'import sys, make_hf_checkpoint as M; M.write_byte_tokenizer(sys.argv[1])' "$1"
}

write_sp "$WORK/sp"

# ---------------------------------------------------------------- help and usage

begin "--help lists the flags"
run tokenize --help
check_ok
check_stdout "usage: attnlab tokenize"
for f in --model --text --file --decode --ids-only --no-special --json; do check_stdout "^  $f "; done
end

begin "attnlab --help lists tokenize"
run --help
check_ok
check_stdout "tokenize +text -> token ids"
end

usage_case() { # NAME REGEX ARGS...
    local name=$1 re=$2
    shift 2
    begin "usage: $name"
    run tokenize "$@"
    check_error 2 "$re"
    check_stdout_empty
    end
}
usage_case "no --model" "--model DIR is required" --text hi
usage_case "no input" "exactly one of" --model "$WORK/sp"
usage_case "--text and --file" "exactly one of" --model "$WORK/sp" --text hi --file "$WORK/x"
usage_case "--text and --decode" "exactly one of" --model "$WORK/sp" --text hi --decode 1
usage_case "--decode not ids" "--decode takes .*'1,x'" --model "$WORK/sp" --decode 1,x
usage_case "--decode negative" "--decode takes" --model "$WORK/sp" --decode=-3
usage_case "--ids-only with --json" "exclude each other" --model "$WORK/sp" --text hi --ids-only --json
usage_case "--ids-only with --decode" "apply to encoding" --model "$WORK/sp" --decode 1 --ids-only
usage_case "unknown flag" "unknown flag '--vocab'" --model "$WORK/sp" --vocab 3
usage_case "flag without its value" "--text.*needs a value" --model "$WORK/sp" --text

# ---------------------------------------------------------------- model directories

fail_case() { # NAME REGEX ARGS...
    local name=$1 re=$2
    shift 2
    begin "$name"
    run tokenize "$@"
    check_error 1 "$re"
    check_stdout_empty
    end
}
fail_case "missing directory" "nowhere.*no such file" --model "$WORK/nowhere" --text hi
fail_case "directory with neither tokenizer.json nor config.json" "neither tokenizer.json nor config.json" \
    --model "$WORK/empty" --text hi
fail_case "a 32000-id model without tokenizer.json" "no tokenizer.json.*32000" --model "$WORK/big" --text hi

begin "a byte model: ids are the bytes"
run tokenize --model "$WORK/bytes" --text "hé!" --ids-only
check_ok
[ "$(cat "$OUTF")" = "104 195 169 33" ] || note "ids: $(cat "$OUTF")"
run tokenize --model "$WORK/bytes" --text $'a\tb'
check_ok
[ "$(cat "$OUTF")" = $'97\ta\n9\t\\t\n98\tb' ] || note "listing: $(cat "$OUTF")"
run tokenize --model "$WORK/bytes" --decode "104,195,169 33"
check_ok
[ "$(cat "$OUTF")" = "hé!" ] || note "decoded: $(cat "$OUTF")"
end

# bad_json NAME REGEX CONTENT: tokenizer.json with CONTENT is refused in one line
bad_json() {
    local name=$1 re=$2 d=$WORK/bad_$RANDOM$RANDOM
    mkdir -p "$d"
    printf '%s' "$3" >"$d/tokenizer.json"
    fail_case "tokenizer.json: $name" "tokenizer.json: .*$re" --model "$d" --text "hello"
}
bad_json "empty file" "not valid JSON" ""
bad_json "not JSON" "not valid JSON" "{\"model\": {\"type\": "
bad_json "no model" "no \"model\"" '{"added_tokens": []}'
bad_json "Unigram" "unsupported model type 'Unigram'" '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}'
bad_json "WordPiece" "unsupported model type 'WordPiece'" '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}'
bad_json "merge of unknown tokens" "merges\[1\] names 'q'" \
    '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "q b"]}}'
bad_json "vocab id not an integer" "vocab\['b'\] must be an integer" \
    '{"model": {"type": "BPE", "vocab": {"a": 0, "b": "one"}, "merges": []}}'
bad_json "unsupported pre-tokenizer regex" "unsupported pre_tokenizer Split regex '\\[\\^a-z\\]\\+\\(\\?<=x\\)': lookbehind" \
    '{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[^a-z]+(?<=x)"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}'
bad_json "unknown normalizer" "unsupported normalizer 'BertNormalizer'" \
    '{"normalizer": {"type": "BertNormalizer"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}'

begin "tokenizer.json: a truncated copy of a good one"
mkdir -p "$WORK/trunc"
head -c 700 "$WORK/sp/tokenizer.json" >"$WORK/trunc/tokenizer.json"
run tokenize --model "$WORK/trunc" --text hi
check_error 1 "tokenizer.json: not valid JSON"
end

begin "tokenizer.json: binary garbage"
mkdir -p "$WORK/garbage"
head -c 4096 /dev/urandom >"$WORK/garbage/tokenizer.json"
run tokenize --model "$WORK/garbage" --text hi
check_error 1 "tokenizer.json"
end

begin "tokenizer.json that is a directory"
mkdir -p "$WORK/tjdir/tokenizer.json"
run tokenize --model "$WORK/tjdir" --text hi
check_error 1 "tokenizer.json"
end

begin "tokenizer_config.json naming a token the vocabulary lacks"
mkdir -p "$WORK/badcfg"
cp "$WORK/sp/tokenizer.json" "$WORK/badcfg/"
echo '{"bos_token": "<|begin|>", "add_bos_token": true}' >"$WORK/badcfg/tokenizer_config.json"
run tokenize --model "$WORK/badcfg" --text hi
check_error 1 "tokenizer_config.json: bos_token '<\|begin\|>' is not in"
end

begin "a tokenizer with more ids than the model"
mkdir -p "$WORK/small_model"
cp "$WORK/sp/tokenizer.json" "$WORK/small_model/"
echo '{"vocab_size": 20}' >"$WORK/small_model/config.json"
run tokenize --model "$WORK/small_model" --text hi
check_error 1 "tokenizer.json has [0-9]+ token ids but the model only 20"
end

# ---------------------------------------------------------------- a SentencePiece-style tokenizer

begin "SentencePiece: encode with BOS, merges, pieces"
run tokenize --model "$WORK/sp" --text "the cat" --json
check_ok
check_py "encode JSON" '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tokenizer"] == "SentencePiece BPE", j
assert j["pieces"] == ["<s>", " the", " cat"], j["pieces"]
assert j["ids"][0] == 1 and len(j["ids"]) == 3, j["ids"]
' "$OUTF"
run tokenize --model "$WORK/sp" --text "the cat" --ids-only --no-special
check_ok
[ "$(wc -w <"$OUTF")" -eq 2 ] || note "--no-special: $(cat "$OUTF")"
end

begin "SentencePiece: decode, with and without special tokens"
ids=$("$BIN" tokenize --model "$WORK/sp" --text "the cat sat." --ids-only | tr ' ' ',')
run tokenize --model "$WORK/sp" --decode "$ids"
check_ok
[ "$(cat "$OUTF")" = "<s> the cat sat." ] || note "decoded: $(cat "$OUTF")"
run tokenize --model "$WORK/sp" --decode "$ids" --no-special
check_ok
[ "$(cat "$OUTF")" = "the cat sat." ] || note "decoded --no-special: $(cat "$OUTF")"
end

begin "SentencePiece: unknown characters, an id outside the vocabulary, bad UTF-8"
run tokenize --model "$WORK/sp" --text "the CAT" --json --no-special
check_ok
check_py "unk" 'import json,sys; p = json.load(open(sys.argv[1]))["pieces"]; assert p == [" the", " ", "<unk>"], p' "$OUTF"
run tokenize --model "$WORK/sp" --decode 1,9999
check_error 1 "token id 9999 is outside the vocabulary"
printf 'ab\xffcd' >"$WORK/bad_utf8.txt"
run tokenize --model "$WORK/sp" --file "$WORK/bad_utf8.txt"
check_error 1 "bad_utf8.txt: the text is not valid UTF-8 \(byte 2: 0xFF\)"
run tokenize --model "$WORK/sp" --file "$WORK/missing.txt"
check_error 1 "missing.txt"
end

# ---------------------------------------------------------------- end to end on a trained byte model

make_text "$WORK/text.txt" 200
head -c 400 "$WORK/text.txt" >"$WORK/short.txt"

begin "train a tiny byte model"
run train --precision f32 --layers 2 --hidden 32 --heads 4 --context 32 --batch 4 --steps 20 --eval-tokens 256 \
    --data "$WORK/text.txt" --out "$WORK/m" --quiet
check_ok
end
for v in bl sp; do
    rm -rf "$WORK/m_$v"
    cp -r "$WORK/m" "$WORK/m_$v"
done
write_bytelevel "$WORK/m_bl"
write_sp "$WORK/m_sp"

begin "byte-level tokenizer of the bytes = the byte tokenizer: eval"
run eval --model "$WORK/m" --data "$WORK/text.txt" --json
check_ok
cp "$OUTF" "$WORK/eval_bytes.json"
run eval --model "$WORK/m_bl" --data "$WORK/text.txt" --json
check_ok
check_py "same numbers" '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["tokenizer"] == "bytes" and b["tokenizer"] == "byte-level BPE", (a, b)
for k in ("tokens", "bytes", "loss", "bits_per_byte"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["tokens"] == a["bytes"] == len(open(sys.argv[3], "rb").read()) - 1, a
' "$WORK/eval_bytes.json" "$OUTF" "$WORK/text.txt"
end

begin "byte-level tokenizer of the bytes = the byte tokenizer: generate and attnmap"
run generate --model "$WORK/m" --prompt "the cat" -n 20 --temperature 0
check_ok
cp "$OUTF" "$WORK/gen_bytes.txt"
run generate --model "$WORK/m_bl" --prompt "the cat" -n 20 --temperature 0
check_ok
check_same_file "$WORK/gen_bytes.txt" "$OUTF"
run attnmap --model "$WORK/m" --text "$WORK/short.txt" --out "$WORK/map_bytes.png"
check_ok
run attnmap --model "$WORK/m_bl" --text "$WORK/short.txt" --out "$WORK/map_bl.png"
check_ok
check_same_file "$WORK/map_bytes.npy" "$WORK/map_bl.npy"
check_py "pieces" '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert "pieces" not in a, "a byte model JSON gained fields"
assert b["pieces"][:4] == list(open(sys.argv[3]).read()[:4]), b["pieces"][:4]
assert b["token_ids"] == list(open(sys.argv[3], "rb").read()), "ids are not the bytes"
' "$WORK/map_bytes.json" "$WORK/map_bl.json" "$WORK/short.txt"
end

begin "SentencePiece tokenizer: eval per token, bits per byte over the file's bytes"
run eval --model "$WORK/m_sp" --data "$WORK/text.txt" --json
check_ok
check_py "eval JSON" '
import json, math, sys
j = json.load(open(sys.argv[1]))
n = len(open(sys.argv[2], "rb").read())
assert j["tokenizer"] == "SentencePiece BPE", j
assert j["bytes"] == n, (j["bytes"], n)            # BOS first: every byte of the file is predicted
assert n / 4 < j["tokens"] < 0.9 * n, j          # merges make fewer tokens than bytes
want = j["loss"] * j["tokens"] / math.log(2) / j["bytes"]
assert abs(j["bits_per_byte"] - want) < 1e-4 * want, (j["bits_per_byte"], want)
' "$OUTF" "$WORK/text.txt"
run eval --model "$WORK/m_sp" --text "the cat sees the dog."
check_ok
check_stdout "nats/token \\(perplexity [0-9.e+]+\\), [0-9.]+ bits/byte over [0-9]+ tokens = 21 bytes"
run eval --model "$WORK/m_sp" --text "the cat" --data "$WORK/text.txt"
check_error 2 "--data FILE or --text STR"
end

begin "SentencePiece tokenizer: generate writes pieces after the prompt"
run generate --model "$WORK/m_sp" --prompt "the cat" -n 12 --temperature 0
check_ok
check_stdout "^the cat"
check_stderr "[0-9]+ prompt tokens"
run generate --model "$WORK/m_sp" --prompt "the CAT" -n 3
check_ok
end

begin "SentencePiece tokenizer: attnmap and explore label tokens by their pieces"
run attnmap --model "$WORK/m_sp" --text "$WORK/short.txt" --out "$WORK/map_sp.png"
check_ok
check_py "attnmap JSON" '
import json, sys
import numpy as np
j = json.load(open(sys.argv[1] + ".json"))
T = j["tokens"]
assert np.load(sys.argv[1] + ".npy").shape == (1, T, T)
assert len(j["pieces"]) == len(j["token_ids"]) == T, j
assert j["pieces"][0] == "<s>" and j["token_ids"][0] == 1, j["pieces"][:3]
assert "\\n" in j["pieces"], "newlines are escaped"
' "$WORK/map_sp"
run explore --model "$WORK/m_sp" --text "$WORK/short.txt" --out "$WORK/sp.html"
check_ok
check_stdout "tokens of"
check_py "explore data" '
import json, re, sys
html = open(sys.argv[1], encoding="utf-8").read()
d = json.loads(re.search(r"<script type=\"application/json\" id=\"al-data\">(.*?)</script>", html, re.S).group(1))
assert "bytes" not in d and d["pieces"][0] == "<s>" and len(d["pieces"]) == d["tokens"], list(d)
' "$WORK/sp.html"
end

begin "SentencePiece tokenizer: the explorer's tooltips show the pieces (headless Chromium)"
CHROMIUM=${ATTNLAB_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
    note "$CHROMIUM not found (scripts/install-deps.sh --test installs Debian's chromium)"
elif ! timeout 120 "$PY" "$(dirname "$0")/../browser/explore_check.py" --chromium "$CHROMIUM" --page "$WORK/sp.html" \
    --layer 1 --head 2 --cell 5,2 --sim 0,1 >"$WORK/sp_check.json" 2>"$WORK/sp_check.err"; then
    note "explore_check.py failed: $(tail -n 1 "$WORK/sp_check.err")"
else
    check_py "tooltips" '
import json, re, sys
r = json.load(open(sys.argv[1]))
html = open(sys.argv[2], encoding="utf-8").read()
d = json.loads(re.search(r"<script type=\"application/json\" id=\"al-data\">(.*?)</script>", html, re.S).group(1))
assert not r["errors"] and not r["network_requests"], r["errors"]
assert r["tip"]["qc"] == "\x27" + d["pieces"][5] + "\x27", (r["tip"], d["pieces"][5])
assert r["tip"]["kc"] == "\x27" + d["pieces"][2] + "\x27", (r["tip"], d["pieces"][2])
assert r["tip_text"]["qc"] == r["tip"]["qc"]
' "$WORK/sp_check.json" "$WORK/sp.html"
fi
end

begin "compare refuses models that tokenize the text differently"
run compare --model "$WORK/m" --model "$WORK/m_sp" --text "$WORK/short.txt" --out "$WORK/cmp.png"
check_error 1 "tokenize .*differently"
check_absent "$WORK/cmp.png"
end

begin "a text of one token is refused"
echo -n "a" >"$WORK/one.txt"
run attnmap --model "$WORK/m" --text "$WORK/one.txt" --out "$WORK/one.png"
check_error 1 "one.txt: the text needs at least 2 bytes"
end

begin "no temp files anywhere"
check_no_tmp "$WORK"
end

finish
