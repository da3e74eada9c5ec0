#!/usr/bin/env bash
# test_presets.sh: the five study presets (docs/presets.md): same depth, width
# and heads; parameter counts within 10 % of MHA's (the issue's bound; the
# presets aim for 1 %); KV cache per token exactly the closed forms of
# attention.md 3.6, at the documented ratios to MHA; each trains and decodes.
. "$(dirname "$0")/lib.sh" "$@"

make_text "$WORK/text.txt" 400

# preset  values/token/layer  % of MHA
expect="mha 512 100
gqa 256 50
mqa 64 12.5
mla 64 12.5
lrkv 288 56.25"

while read -r p vpt pct; do
    begin "preset $p trains one step"
    run train --precision f32 --preset "$p" --data "$WORK/text.txt" --out "$WORK/$p" --steps 1 --batch 2 --context 32 \
        --eval-tokens 64 --quiet
    check_ok
    end

    begin "preset $p: info matches the closed form"
    run info --model "$WORK/$p" --context 32 --json
    check_ok
    cp "$OUTF" "$WORK/$p.json"
    check_py "cache formula" '
import json, sys
j = json.load(open(sys.argv[1]))
vpt, pct = int(sys.argv[2]), float(sys.argv[3])
assert j["attention"] == sys.argv[4], j["attention"]
assert (j["layers"], j["hidden"], j["heads"]) == (4, 256, 8), (j["layers"], j["hidden"], j["heads"])
assert j["kv_values_per_token_per_layer"] == vpt, j["kv_values_per_token_per_layer"]
assert j["kv_bytes_per_token"] == vpt * 4 * 4, j["kv_bytes_per_token"]
assert abs(100 * j["kv_ratio_to_mha"] - pct) < 1e-9, j["kv_ratio_to_mha"]
assert j["kv_bytes_allocated"] == j["kv_bytes_formula"] == vpt * 4 * 4 * 32
' "$WORK/$p.json" "$vpt" "$pct" "$p"
    end

    begin "preset $p generates"
    run generate --model "$WORK/$p" --prompt "the cat" -n 8 --temperature 0
    check_ok
    check_stderr "tokens/s"
    end
done <<<"$expect"

begin "study presets: parameter counts within 10 % of MHA"
check_py "parameter counts" '
import json, sys
base = json.load(open(sys.argv[1] + "/mha.json"))["params"]
for p in ("gqa", "mqa", "mla", "lrkv"):
    n = json.load(open(sys.argv[1] + "/" + p + ".json"))["params"]
    assert abs(n - base) <= 0.10 * base, (p, n, base)
    assert abs(n - base) <= 0.01 * base, ("documented as within 1 %", p, n, base)
' "$WORK"
end

finish
