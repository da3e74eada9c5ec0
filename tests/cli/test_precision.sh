#!/usr/bin/env bash
# test_precision.sh: --precision f32|bf16|auto (issue 14) on every command
# that multiplies: one parser (other values: usage error, exit 2), the
# precision in every JSON output, config.json's train block and log.jsonl,
# the stderr line of a bf16 run and the hint of the f32-default commands
# (printed only where auto means bf16: AMX, or AMD's AVX512-BF16), bf16
# training as mixed precision (repeats bit for bit, --resume bit-exact, the
# checkpoint an ordinary fp32 one that eval reads in either precision, a
# resume in another precision allowed with a note), and bench/precision_seeds.py
# (the bf16-vs-fp32 quality table over seeds) on a 4-step scale.
#
# usage: bash tests/cli/test_precision.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 600
SMALL=(--sgemm-n 128 --triad-mb 8 --iters 1)
# what `auto` means on this CPU (al_precision_auto: bf16 where bf16 products
# outrun fp32's: AMX granted by Linux, or AVX512-BF16 on an AMD CPU)
AUTO=F32
if [ -z "${ATTNLAB_CPU:-}" ]; then
    if grep -qw amx_bf16 /proc/cpuinfo && ! "$BIN" train --help 2>&1 | grep -q "Linux refused"; then AUTO=BF16
    elif grep -qw avx512_bf16 /proc/cpuinfo && grep -q "^vendor_id.*AuthenticAMD" /proc/cpuinfo; then AUTO=BF16; fi
fi
echo "# auto means $AUTO on this CPU"

# ---------------------------------------------------------------- the flag

begin "--precision other than f32/bf16/auto: one-line usage error (exit 2) on every command, before any work"
M0=$WORK/no_model
for c in "train --out $WORK/t0" "eval --model $M0" "generate --model $M0 --prompt a" "heads --model $M0 --out $WORK/h0" \
    "attnmap --model $M0 --text $DATA --out $WORK/a0" "compare --model $M0 --text $DATA --out $WORK/c0" \
    "explore --model $M0 --text $DATA --out $WORK/e0.html" "study --out $WORK/s0" "bench train" "bench prefill" \
    "bench decode" "bench attention"; do
    # shellcheck disable=SC2086
    run $c --precision fp8
    check_error 2 "--precision must be f32, bf16 or auto, got 'fp8'"
done
check_absent "$WORK/t0"
check_absent "$WORK/s0"
end

begin "--help of every command lists --precision with its default"
for c in train study "bench train" "bench attention"; do
    # shellcheck disable=SC2086
    run $c --help
    check_stdout "--precision S +matrix products: auto \(default"
done
for c in eval generate heads attnmap compare explore; do
    run $c --help
    check_stdout "--precision S +matrix products: f32 \(default, exact\)"
done
end

# ---------------------------------------------------------------- training

TR=(--data "$DATA" --layers 2 --hidden 32 --heads 4 --context 16 --batch 2 --eval-every 4 --eval-tokens 128
    --threads 2 --quiet)

begin "train --precision bf16: config.json, log.jsonl and the stderr line say BF16"
run train "${TR[@]}" --steps 8 --precision bf16 --out "$WORK/b1"
check_ok
check_stderr "^attnlab: precision BF16 \(bf16 inputs, fp32 sums; engine: [a-z0-9-]+\)$"
check_py "precision not recorded" '
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["attnlab"]["train"]["precision"] == "BF16", c["attnlab"]["train"]
rows = [json.loads(l) for l in open(sys.argv[1] + "/log.jsonl")]
assert len(rows) == 8 and all(r["precision"] == "BF16" for r in rows), rows
' "$WORK/b1"
end

begin "train --precision bf16 repeats bit for bit; f32 gives other weights"
run train "${TR[@]}" --steps 8 --precision bf16 --out "$WORK/b2"
check_ok
check_same_file "$WORK/b1/model.safetensors" "$WORK/b2/model.safetensors"
run train "${TR[@]}" --steps 8 --precision f32 --out "$WORK/f1"
check_ok
check_stderr_empty
cmp -s "$WORK/b1/model.safetensors" "$WORK/f1/model.safetensors" && note "bf16 and f32 runs gave the same weights"
check_py "f32 run not recorded as F32" '
import json, sys
assert json.load(open(sys.argv[1]))["attnlab"]["train"]["precision"] == "F32"
' "$WORK/f1/config.json"
end

begin "train default (auto) is $AUTO here"
run train "${TR[@]}" --steps 2 --out "$WORK/auto"
check_ok
check_py "auto did not resolve to $AUTO" '
import json, sys
assert json.load(open(sys.argv[1]))["attnlab"]["train"]["precision"] == sys.argv[2]
' "$WORK/auto/config.json" "$AUTO"
end

begin "bf16 --resume: the BF16 copy is rebuilt, byte-identical to the uninterrupted run"
run train "${TR[@]}" --steps 4 --precision bf16 --out "$WORK/b3"
check_ok
run train --out "$WORK/b3" --resume --steps 8 --threads 2 --quiet
check_ok
check_same_file "$WORK/b1/model.safetensors" "$WORK/b3/model.safetensors"
check_same_file "$WORK/b1/train_state.safetensors" "$WORK/b3/train_state.safetensors"
check_py "resumed log differs" '
import json, sys
a, b = ([{k: v for k, v in json.loads(l).items() if k not in ("tokens_per_s", "mfu_flops_per_s", "elapsed_s")}
         for l in open(p + "/log.jsonl")] for p in sys.argv[1:3])
assert a == b, (a, b)
' "$WORK/b1" "$WORK/b3"
end

begin "resume in another precision: allowed with a note, recorded in config.json"
run train "${TR[@]}" --steps 4 --precision bf16 --out "$WORK/b4"
check_ok
run train --out "$WORK/b4" --resume --steps 6 --precision f32 --threads 2 --quiet
check_ok
check_stderr "note: .*b4 was trained in BF16; continuing in F32 \(not bit-exact"
check_py "switch not recorded" '
import json, sys
assert json.load(open(sys.argv[1] + "/config.json"))["attnlab"]["train"]["precision"] == "F32"
rows = [json.loads(l)["precision"] for l in open(sys.argv[1] + "/log.jsonl")]
assert rows == ["BF16"] * 4 + ["F32"] * 2, rows
' "$WORK/b4"
end

begin "a bf16-trained checkpoint is plain fp32; eval reads it in either precision"
check_py "model.safetensors is not F32" '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert {v["dtype"] for k, v in h.items() if k != "__metadata__"} == {"F32"}, h
' "$WORK/b1/model.safetensors"
run eval --model "$WORK/b1" --data "$DATA" --context 16 --max-tokens 400 --json
check_ok
cp "$OUTF" "$WORK/e_f32.json"
run eval --model "$WORK/b1" --data "$DATA" --context 16 --max-tokens 400 --json --precision bf16
check_ok
check_stderr "^attnlab: precision BF16"
check_py "eval precisions or losses wrong" '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["precision"] == "F32" and b["precision"] == "BF16", (a, b)
assert a["tokens"] == b["tokens"] == 400
assert a["loss"] != b["loss"] and abs(a["loss"] - b["loss"]) <= 0.01 * a["loss"], (a["loss"], b["loss"])
' "$WORK/e_f32.json" "$OUTF"
end

begin "--weights bf16 composes with --precision bf16"
run eval --model "$WORK/b1" --data "$DATA" --context 16 --max-tokens 400 --json --precision bf16 --weights bf16
check_ok
check_py "bf16 weights in bf16 precision: loss not within 1% of fp32" '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["precision"] == "BF16" and b["tokens"] == 400
assert abs(a["loss"] - b["loss"]) <= 0.01 * a["loss"], (a["loss"], b["loss"])
' "$WORK/e_f32.json" "$OUTF"
end

# ---------------------------------------------------------------- inference commands

begin "eval/generate default to f32; the hint appears only where bf16 is faster ($AUTO)"
run eval --model "$WORK/f1" --data "$DATA" --context 16 --max-tokens 100 --json
check_ok
check_py "eval JSON precision is not F32" 'import json, sys; assert json.load(open(sys.argv[1]))["precision"] == "F32"' "$OUTF"
if [ "$AUTO" = BF16 ]; then
    check_stderr "^attnlab: hint: --precision bf16 would be faster"
else
    check_stderr_empty
fi
run eval --model "$WORK/f1" --data "$DATA" --context 16 --max-tokens 100 --json --precision f32
check_ok
check_stderr_empty
run generate --ids --model "$WORK/f1" --prompt "the cat" -n 4 --temperature 0 --precision bf16
check_ok
check_stdout "^[0-9]+( [0-9]+){3}$"
check_stderr "^attnlab: precision BF16"
grep -q "hint:" "$ERRF" && note "hint printed with --precision given"
end

begin "heads, attnmap, compare: \"precision\" in their JSON"
run heads --model "$WORK/f1" --out "$WORK/h" --precision bf16
check_ok
run attnmap --model "$WORK/f1" --text "$DATA" --max-tokens 12 --out "$WORK/am" --precision bf16
check_ok
run compare --model "$WORK/f1" --model "$WORK/b1" --text "$DATA" --max-tokens 12 --out "$WORK/cmp"
check_ok
check_py "precision fields" '
import json, sys
d = sys.argv[1]
assert json.load(open(d + "/h.json"))["precision"] == "BF16"
assert json.load(open(d + "/am.json"))["precision"] == "BF16"
assert json.load(open(d + "/cmp.json"))["precision"] == "F32"
' "$WORK"
end

begin "explore --precision bf16 writes its page"
run explore --model "$WORK/f1" --text "$DATA" --max-tokens 12 --out "$WORK/x.html" --precision bf16
check_ok
check_exists "$WORK/x.html"
check_stderr "^attnlab: precision BF16"
end

# ---------------------------------------------------------------- bench

begin "bench train/prefill/attention: \"precision\" and the bf16 ceilings (null when unavailable)"
run bench train --preset tiny --json --precision bf16 "${SMALL[@]}"
check_ok
cp "$OUTF" "$WORK/bt.json"
run bench prefill --preset tiny --tokens 32 --json --precision f32 "${SMALL[@]}"
check_ok
check_stderr_empty
cp "$OUTF" "$WORK/bp.json"
run bench attention --context 32 --heads 2 --head-dim 8 --json "${SMALL[@]}"
check_ok
check_py "bench precision fields" "$PY_JSON_UNIQUE"'
import json, sys
t, p, a = (json.load(open(x), object_pairs_hook=unique) for x in sys.argv[1:4])
auto = sys.argv[4]
assert (t["precision"], p["precision"], a["precision"]) == ("BF16", "F32", auto), (t["precision"], p["precision"], a["precision"])
for j, ratios in ((t, ["mfu"]), (p, ["ratio"]), (a, ["fwd_ratio", "bwd_ratio"])):
    assert isinstance(j["bf16_engine"], str) and j["bf16_engine"]
    for c in ("bf16_onednn", "amx_tile"):
        ceil = j[c + "_gflops"] if c == "amx_tile" else j["bf16_onednn_gflops"]
        for r in ratios:
            v = j[r + "_" + c]
            if ceil is None:
                assert v is None, (r, c, v)
            else:
                assert ceil > 0 and abs(v - j[r] * j["sgemm_gflops"] / ceil) <= 1e-3 * v, (r, c, v)
' "$WORK/bt.json" "$WORK/bp.json" "$OUTF" "$AUTO"
run bench train --preset tiny --precision bf16 "${SMALL[@]}"
check_ok
check_stdout "precision BF16 \(bf16 engine: .*\); bf16 ceilings: oneDNN matmul .*, AMX tile peak"
check_stdout "MFU .* of sgemm; (oneDNN bf16 ceiling unavailable|[0-9.]+% of oneDNN bf16)"
end

begin "bench --vs-f32: the fp32 path timed in alternated pairs in the same run; a usage error outside bf16"
for c in "bench train --preset tiny" "bench prefill --preset tiny --tokens 32" \
    "bench attention --context 32 --heads 2 --head-dim 8"; do
    # shellcheck disable=SC2086
    run $c --precision f32 --vs-f32 "${SMALL[@]}"
    check_error 2 "--vs-f32 compares the bf16 path with fp32: it needs --precision bf16"
done
SMALL3=(--sgemm-n 128 --triad-mb 8 --iters 3)
run bench train --preset tiny --precision bf16 --vs-f32 --json "${SMALL3[@]}"
check_ok
cp "$OUTF" "$WORK/vt.json"
run bench prefill --preset tiny --tokens 32 --precision bf16 --vs-f32 --json "${SMALL3[@]}"
check_ok
cp "$OUTF" "$WORK/vp.json"
run bench attention --context 64 --heads 2 --head-dim 8 --precision bf16 --vs-f32 --json "${SMALL3[@]}"
check_ok
check_py "--vs-f32 fields" "$PY_JSON_UNIQUE"'
import json, sys
t, p, a = (json.load(open(x), object_pairs_hook=unique) for x in sys.argv[1:4])
for j, figs in ((t, [("step", "step_s_best", 1)]), (p, [("forward", "ms_best", 1e3)]),
                (a, [("fwd", "fwd_ms", 1e3), ("bwd", "bwd_ms", 1e3)])):
    assert j["precision"] == "BF16" and j["f32_pairs"] == 3, (j["precision"], j["f32_pairs"])
    for name, best, per_s in figs:
        bf16_s = j[best] / per_s
        f32_s = j[name + "_f32_s_best"]
        assert f32_s > 0 and abs(j[name + "_vs_f32_best"] - f32_s / bf16_s) <= 2e-3 * f32_s / bf16_s, (name, j)
        assert j[name + "_vs_f32"] > 0, (name, j)
' "$WORK/vt.json" "$WORK/vp.json" "$OUTF"
run bench attention --context 64 --heads 2 --head-dim 8 --precision bf16 --vs-f32 "${SMALL3[@]}"
check_ok
check_stdout "forward vs the fp32 path \(same run, 3 alternated pairs\): [0-9.]+x median"
check_stdout "backward vs the fp32 path"
end

# ---------------------------------------------------------------- bench/precision_seeds.py

SEEDS=$(dirname "$0")/../../bench/precision_seeds.py
PS=$WORK/ps
PSARGS=(--attnlab "$BIN" --out "$PS" --data "$DATA" --designs mha,mla --seeds 2 --yardstick --steps 4 --context 32
    --batch 2 --eval-tokens 256 --json)
begin "precision_seeds.py: f32, bf16 and the AVX2 yardstick per design and seed; gaps from the runs' own logs"
timeout 300 "$PY" "$SEEDS" "${PSARGS[@]}" >"$WORK/ps.json" 2>"$WORK/ps.err" ||
    note "precision_seeds.py failed: $(tail -n 1 "$WORK/ps.err")"
[ "$(find "$PS" -mindepth 1 -maxdepth 1 -type d | wc -l)" = 12 ] || note "not 12 runs in $PS: $(ls "$PS" | tr '\n' ' ')"
check_py "precision_seeds.py's report is wrong" '
import json, math, os, sys
j, ps = json.load(open(sys.argv[1])), sys.argv[2]
assert j["seeds"] == [1337, 1338] and sorted(j["designs"]) == ["mha", "mla"], j
def final(name):
    rec = json.loads(open(os.path.join(ps, name, "log.jsonl")).read().splitlines()[-1])
    conf = json.load(open(os.path.join(ps, name, "config.json")))
    return rec, conf["attnlab"]["train"]
for d, e in j["designs"].items():
    assert e["bound"] == 1.0 and e["unit"] == "% of the fp32 loss", e
    for kind, prec in (("bf16", "BF16"), ("avx2", "F32")):
        r = e[kind]
        for i, s in enumerate(j["seeds"]):
            ref, ref_train = final("%s-f32-%d" % (d, s))
            rec, train = final("%s-%s-%d" % (d, kind, s))
            assert ref_train["precision"] == "F32" and train["precision"] == prec and train["seed"] == s, train
            assert train["steps"] == 4 and rec["step"] == 4 and e["f32"][i] == ref["val_loss"], (rec, e)
            assert math.isclose(r["gaps"][i], 100 * (rec["val_loss"] - ref["val_loss"]) / ref["val_loss"]), r
        m = sum(r["gaps"]) / 2
        assert math.isclose(r["mean"], m) and math.isclose(r["se"], abs(r["gaps"][0] - r["gaps"][1]) / 2), r
        assert r["within"] == sum(abs(g) <= 1.0 for g in r["gaps"]), r
' "$WORK/ps.json" "$PS"
end

begin "precision_seeds.py: finished runs are kept, an unfinished one is trained again, the table names each seed"
head -n 1 "$PS/mla-bf16-1338/log.jsonl" >"$WORK/ps.cut" && mv "$WORK/ps.cut" "$PS/mla-bf16-1338/log.jsonl"
timeout 300 "$PY" "$SEEDS" "${PSARGS[@]::${#PSARGS[@]}-1}" >"$OUTF" 2>"$ERRF" ||
    note "precision_seeds.py failed: $(tail -n 1 "$ERRF")"
[ "$(grep -c '^precision_seeds: ' "$ERRF")" = 1 ] && grep -q "^precision_seeds: mla-bf16-1338$" "$ERRF" ||
    note "retrained other than mla-bf16-1338: $(tr '\n' ' ' <"$ERRF")"
check_py "the retrained run does not repeat its first training's bits" '
import json, sys
a, b = (json.load(open(x)) for x in sys.argv[1:3])
assert a["designs"]["mla"]["bf16"]["gaps"][1] == b["designs"]["mla"]["bf16"]["gaps"][1], (a, b)
' "$WORK/ps.json" <(timeout 60 "$PY" "$SEEDS" "${PSARGS[@]}")
check_stdout "^\| mla \| bf16 \| [-+][0-9.]+ \| [-+][0-9.]+ \| [-+][0-9.]+ % \([0-9.]+\) \| [0-2] of 2 within 1 % \|$"
check_stdout "^\| mha \| avx2 \| "
[ -z "$(find "$PS" -maxdepth 1 -name '*.tmp')" ] || note "unfinished runs left in $PS"
end

begin "precision_seeds.py: a gap past the bound either way is counted out (final losses edited to -1.5 and +1.5 %)"
check_py "editing the runs' logs failed" '
import json, sys
ps = sys.argv[1]
ref = json.loads(open(ps + "/mha-f32-1337/log.jsonl").read().splitlines()[-1])["val_loss"]
for name, f in (("mha-bf16-1337", 0.985), ("mha-avx2-1337", 1.015)):
    path = ps + "/" + name + "/log.jsonl"
    lines = open(path).read().splitlines()
    last = json.loads(lines[-1])
    last["val_loss"] = ref * f
    open(path, "w").write("\n".join(lines[:-1] + [json.dumps(last)]) + "\n")
' "$PS"
timeout 60 "$PY" "$SEEDS" "${PSARGS[@]}" >"$WORK/ps3.json" 2>"$ERRF" || note "precision_seeds.py failed: $(tail -n 1 "$ERRF")"
check_py "the edited gaps are not -1.5 and +1.5 or still counted within 1 %" '
import json, math, sys
e = json.load(open(sys.argv[1]))["designs"]["mha"]
for kind, want in (("bf16", -1.5), ("avx2", 1.5)):
    r = e[kind]
    assert math.isclose(r["gaps"][0], want, rel_tol=1e-9), r
    assert r["within"] == int(abs(r["gaps"][1]) <= 1.0), r
' "$WORK/ps3.json"
end

begin "precision_seeds.py: finished runs of other settings are refused, not mixed into the table"
timeout 60 "$PY" "$SEEDS" --attnlab "$BIN" --out "$PS" --data "$DATA" --designs mha --seeds 1 --steps 5 --context 32 \
    --batch 2 --eval-tokens 256 >"$OUTF" 2>"$ERRF"
RC=$?
check_status 1
[ "$(cat "$ERRF")" = "precision_seeds: $PS/mha-f32-1337: trained with steps 4, not 5; give another --out" ] ||
    note "unexpected error: $(head -c 300 "$ERRF")"
mv "$PS/mha-f32-1337" "$PS/keep" && cp -r "$PS/mla-f32-1337" "$PS/mha-f32-1337"
timeout 60 "$PY" "$SEEDS" "${PSARGS[@]}" >"$OUTF" 2>"$ERRF"
RC=$?
check_status 1
[ "$(cat "$ERRF")" = "precision_seeds: $PS/mha-f32-1337: holds a mla run, not mha; give another --out" ] ||
    note "unexpected error: $(head -c 300 "$ERRF")"
rm -r "$PS/mha-f32-1337" && mv "$PS/keep" "$PS/mha-f32-1337"
end

begin "precision_seeds.py: an unknown design or a failing run: one line, exit 1, no half-written run left"
timeout 60 "$PY" "$SEEDS" --attnlab "$BIN" --out "$WORK/ps2" --designs mha,xyz >"$OUTF" 2>"$ERRF"
RC=$?
check_status 1
[ "$(cat "$ERRF")" = "precision_seeds: --designs: unknown design 'xyz' (one of mha, gqa, mqa, mla, lrkv)" ] ||
    note "unexpected error: $(head -c 300 "$ERRF")"
timeout 60 "$PY" "$SEEDS" --attnlab "$BIN" --out "$WORK/ps2" --designs mha --steps 4 --data "$WORK/missing" \
    >"$OUTF" 2>"$ERRF"
RC=$?
check_status 1
grep -q Traceback "$ERRF" && note "a Python traceback"
tail -n 1 "$ERRF" | grep -qE "^precision_seeds: .*train --out .*/mha-f32-1337\.tmp .*: exit 1: attnlab: .*missing" ||
    note "last line: $(tail -n 1 "$ERRF")"
check_absent "$WORK/ps2/mha-f32-1337"
check_absent "$WORK/ps2/mha-f32-1337.tmp"
end

finish
