#!/usr/bin/env bash
# test_fixtures.sh: run directories written before config.json had a field
# table and a format version (tests/fixtures/v1, attnlab 2f286f4) still load,
# compute the same numbers, resume, and are rewritten in today's format
# without changing what they mean.
. "$(dirname "$0")/lib.sh" "$@"

FX=$(readlink -f "$(dirname "$0")/../fixtures/v1")
cp -r "$FX" "$WORK/v1"
cd "$WORK/v1" || exit 1

begin "every version-1 model evaluates to the same loss"
for d in mha gqa mqa mla lrkv poly; do
    run eval --model "$d" --data text.txt --threads 1 --json
    check_ok
    check_py "$d: same loss and tokens as when written" '
import json, sys
got = json.load(open(sys.argv[1]))
want = [j for j in map(json.loads, open(sys.argv[2])) if j["model"] == sys.argv[3]][0]
assert "%.6f" % got["loss"] == "%.6f" % want["loss"] and got["tokens"] == want["tokens"], (got, want)
' "$OUTF" expected-eval.jsonl "$d"
done
end

begin "the version-1 ViT evaluates to the same accuracy and loss"
if [ -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
    run eval --model vit-relu --max-images 16 --threads 1 --json
    check_ok
    check_py "same accuracy and loss" '
import json, sys
got = json.load(open(sys.argv[1]))
want = [j for j in map(json.loads, open(sys.argv[2])) if j["model"] == "vit-relu"][0]
assert got["correct"] == want["correct"] and "%.6f" % got["loss"] == "%.6f" % want["loss"], (got, want)
' "$OUTF" expected-eval.jsonl
fi
end

begin "info reads each design's fields from a version-1 config"
for spec in mha:32:11568 gqa:16:11312 mqa:8:11184 mla:12:11640 lrkv:24:11504; do
    IFS=: read -r d kv params <<<"$spec"
    run info --model "$d" --json
    check_ok
    check_py "$d: cache values and parameters" '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["attention"] == sys.argv[2] and j["kv_values_per_token_per_layer"] == int(sys.argv[3]), j
assert j["params"] == int(sys.argv[4]), j
if sys.argv[2] == "mla": assert (j["kv_lora_rank"], j["qk_rope_dim"], j["qk_nope_dim"]) == (8, 4, 8), j
if sys.argv[2] == "lrkv": assert j["lrkv_rank"] == 2, j
' "$OUTF" "$d" "$kv" "$params"
done
end

begin "a version-1 run resumes and is rewritten as version 2 with the same meaning"
cp -r mha resumed
cp text.txt resumed/
run train --precision f32 --resume --out resumed --steps 3 --quiet --threads 1
check_ok
check_py "format_version 2, same model keys, same block settings" '
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
assert new["attnlab"]["format_version"] == 2, new["attnlab"]
for k, v in old.items():
    if k != "attnlab": assert new.get(k) == v, (k, v, new.get(k))
for k in ("attention", "score"): assert new["attnlab"][k] == old["attnlab"][k]
assert new["attnlab"]["step"] == 3 and new["attnlab"]["train"]["steps"] == 3
' mha/config.json resumed/config.json
end

begin "a config from a newer format is refused in one line"
mkdir -p newer
cp mha/model.safetensors newer/
sed 's/"attention":/"format_version": 99, "attention":/' mha/config.json >newer/config.json
run info --model newer
check_error 1 "format_version 99 is newer"
end

finish
