#!/usr/bin/env bash
# test_study_conversions.sh: `attnlab study --conversions` with the tiny budget
# on generated text (docs/study.md "Conversions"):
#   - the study converts the MHA run to GQA, MQA, MLA and LRKV, uptrains each
#     for a tenth of the MHA run's steps and trains each from scratch for the
#     same total steps (the uptraining: 10 steps, its floor, as the tiny
#     budget's MHA run has 4); report.json has a "conversions" block with the four
#     designs, finite losses, the designs' cache sizes, and a loss after
#     uptraining at or below the loss right after conversion; report.md has
#     the table and one sentence per design; kv_vs_loss.npy has the converted
#     and the same-steps points after the designs', with a legend in the
#     figure;
#   - a rerun trains and converts nothing again;
#   - a converted model that is removed is converted and uptrained again,
#     to the same numbers, and nothing else is;
#   - --conversions is in the help.
#
# usage: bash tests/cli/test_study_conversions.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 3000

# study ARGS...: a tiny study with conversions on the generated text, no ViTs.
study() {
    timeout 600 "$BIN" study --budget tiny --data "$DATA" --threads 1 --precision f32 --no-vision --conversions "$@" \
        >"$OUTF" 2>"$ERRF" </dev/null
    RC=$?
}

# mtimes DIR: "mtime path" of every file of every run, sorted.
mtimes() { find "$1/runs" -type f -printf '%T@ %p\n' | sort -k2; }

begin "--conversions is documented in the help"
run study --help
check_ok
check_stdout "--conversions"
end

S=$WORK/s
begin "tiny study with conversions: report.json, report.md, kv_vs_loss"
study --out "$S"
check_ok
for d in gqa mqa mla lrkv; do
    check_stderr "$d-from-mha-seed1337: converting mha-seed1337 to"
    for f in config.json model.safetensors convert.json measure.json; do check_exists "$S/runs/$d-converted-seed1337/$f"; done
    for f in config.json model.safetensors train_state.safetensors log.jsonl measure.json; do
        check_exists "$S/runs/$d-from-mha-seed1337/$f"
        check_exists "$S/runs/$d-steps14-seed1337/$f"
    done
done
check_exists "$S/kv_vs_loss.png"
check_no_tmp "$S"
check_absent "$S/runs/gqa-converted-seed1337.tmp"
check_py "the conversions block" '
import json, math, sys
r = json.load(open(sys.argv[1] + "/report.json"))
c = r["conversions"]
assert (c["source_steps"], c["uptrain_steps"], c["scratch_steps"]) == (4, 10, 14), c  # at least 10 steps
assert [d["design"] for d in c["designs"]] == ["gqa", "mqa", "mla", "lrkv"], c["designs"]
assert [d["kv_pct_of_mha"] for d in c["designs"]] == [50, 12.5, 12.5, 56.25], c["designs"]
assert len(c["runs"]) == 4, c["runs"]
keys = ["loss_source", "loss_converted", "loss_uptrained", "loss_scratch", "loss_scratch_same_steps"]
for x in c["runs"]:
    for k in keys:
        assert isinstance(x[k], float) and math.isfinite(x[k]) and 0 < x[k] < 10, (x["design"], k, x[k])
    assert x["loss_uptrained"] <= x["loss_converted"], (x["design"], x["loss_uptrained"], x["loss_converted"])
    assert x["seed"] == 1337 and x["converted_dir"].endswith(x["design"] + "-converted-seed1337"), x
for d in c["designs"]:
    for k in keys:
        assert d[k]["n"] == 1 and math.isfinite(d[k]["mean"]), (d["design"], k)
# the source loss is the MHA run of the comparison, the scratch loss its design run
lm = {x["design"]: x["val_loss"] for x in r["language_models"]["runs"]}
for x in c["runs"]:
    assert abs(x["loss_source"] - lm["mha"]) < 1e-9 and abs(x["loss_scratch"] - lm[x["design"]]) < 1e-9, x
' "$S"
check_py "report.md: table and one sentence per design" '
import sys
md = open(sys.argv[1] + "/report.md").read()
assert "## Converted from MHA vs trained from scratch" in md
i = md.index("## Converted from MHA")
sec = md[i:md.index("## Figures")]
assert "| design | KV % of MHA | after conversion | after uptraining (10 steps) |" in sec, sec[:600]
for t in ["GQA", "MQA", "MLA", "LRKV"]:
    assert sum(l.startswith("- " + t + " (") and "conversion changes the loss by" in l for l in sec.splitlines()) == 1, t
html = open(sys.argv[1] + "/report.html").read()
assert "Converted from MHA vs trained from scratch" in html
' "$S"
check_py "kv_vs_loss: the designs, then converted and same-steps points" '
import json, sys
import numpy as np
a = np.load(sys.argv[1] + "/kv_vs_loss.npy")
assert a.shape == (13, 4), a.shape
r = json.load(open(sys.argv[1] + "/report.json"))
runs = r["conversions"]["runs"]
assert np.allclose(a[5:9, 0], [50, 12.5, 12.5, 56.25]) and np.allclose(a[9:, 0], [50, 12.5, 12.5, 56.25])
assert np.allclose(a[5:9, 1], [x["loss_uptrained"] for x in runs], rtol=1e-5), a[5:9]
assert np.allclose(a[9:, 1], [x["loss_scratch_same_steps"] for x in runs], rtol=1e-5), a[9:]
j = json.load(open(sys.argv[1] + "/kv_vs_loss.json"))
assert [p["kind"] for p in j["conversions"]] == ["converted_uptrained"] * 4 + ["scratch_same_steps"] * 4
' "$S"
end

begin "rerun: nothing trained or converted again"
mtimes "$S" >"$WORK/before"
sleep 1
study --out "$S"
check_ok
n_skip=$(grep -c "complete, skipped" "$ERRF")
[ "$n_skip" -eq 13 ] || note "$n_skip runs skipped, expected 13"
grep -q "converting" "$ERRF" && note "something was converted again"
grep -q "steps (study ETA" "$ERRF" && note "something was trained again"
mtimes "$S" >"$WORK/after"
cmp -s "$WORK/before" "$WORK/after" || note "run files changed: $(diff "$WORK/before" "$WORK/after" | head -n 2 | tr '\n' ' ')"
end

begin "a removed converted model: converted and uptrained again, nothing else"
cp "$S/report.json" "$WORK/report1.json"
rm -rf "$S/runs/mla-converted-seed1337"
long_before=$(stat -c %Y "$S/runs/mla-steps14-seed1337/log.jsonl")
study --out "$S"
check_ok
check_stderr "mla-from-mha-seed1337: its converted model .* is missing: training it again"
check_stderr "mla-from-mha-seed1337: converting"
[ "$(grep -c converting "$ERRF")" -eq 1 ] || note "more than one conversion"
[ "$(grep -c "complete, skipped" "$ERRF")" -eq 12 ] || note "not every other run was skipped"
[ "$(stat -c %Y "$S/runs/mla-steps14-seed1337/log.jsonl")" = "$long_before" ] || note "the 110 % run was trained again"
check_py "the same losses (conversion and training are deterministic)" '
import json, sys
a, b = (json.load(open(p))["conversions"]["runs"] for p in sys.argv[1:3])
for k in ["loss_converted", "loss_uptrained", "loss_scratch_same_steps"]:
    assert [x[k] for x in a] == [x[k] for x in b], (k, a, b)
' "$WORK/report1.json" "$S/report.json"
end

finish
