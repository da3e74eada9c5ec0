#!/usr/bin/env bash
# test_study.sh: `attnlab study` end to end with the tiny budget (seconds) on
# generated text and the Fashion-MNIST files:
#   - usage errors are one line with exit status 2;
#   - a whole study writes every documented file: report.md/.json/.html, the
#     five figures with STEM.json + STEM.npy beside each, the checkpoints;
#     report.json validates against the schema in docs/study.md (keys and
#     types), every number in it is finite, the KV-cache percentages are the
#     designs' closed forms (100, 50, 12.5, 12.5, 56.25 % of MHA), the data
#     files have the documented shapes, the HTML references its figures
#     relatively;
#   - rerunning skips every finished run (checkpoint and log untouched);
#   - --max-runs 1 stops after the first run; the rerun does not retrain it;
#     with --seeds 2 the report gives the spread over seeds; --no-vision
#     records the vision pair as skipped;
#   - a run whose saved step is behind resumes from it; a run whose settings
#     differ (lr, precision, data), whose config.json cannot be read, whose
#     training state is past the plan or whose log lacks the final step is
#     trained again from scratch, with that reason;
#   - paths are never cut: a study 3,841 bytes deep completes, a longer
#     study directory is refused in one line;
#   - a real SIGINT after the first run: exit 130, no temp files, and the
#     rerun skips the finished run and completes the study;
#   - the KV frontier (docs/kvlab.md): kv_frontier.png/.json/.csv, report.json's
#     kv_frontier (five designs x none/int8/int4/int2 measured, the h2o methods
#     measured, bytes the closed forms, the picks consistent with
#     the points) and its report section; a rerun reuses each run's cached
#     points (kv_frontier.json untouched), a point missing from a cache is
#     measured again alone, a retrained run's points are measured again.
#
# usage: bash tests/cli/test_study.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

DATA=$WORK/data.txt
make_text "$DATA" 3000
FMNIST=/usr/share/datasets/fashion-mnist
VISION=1
[ -f "$FMNIST/t10k-images-idx3-ubyte.gz" ] || [ -f "$FMNIST/t10k-images-idx3-ubyte" ] || VISION=0

# study ARGS...: a study with the tiny budget on the generated text (longer
# timeout than `run`: a tiny study trains seven models). One thread: models
# this small are all synchronisation, which a busy machine makes very slow.
study() {
    timeout 600 "$BIN" study --budget tiny --data "$DATA" --threads 1 --precision f32 "$@" >"$OUTF" 2>"$ERRF" </dev/null
    RC=$?
}

# mtimes DIR: "mtime path" of every file of every run, sorted.
mtimes() { find "$1/runs" -type f -printf '%T@ %p\n' | sort -k2; }

# The report validator: $1 study dir, $2 expected seeds, $3 vision expected (1/0), $4 attnmap tokens.
cat >"$WORK/validate.py" <<'EOF'
import json, math, os, sys
import numpy as np

out, seeds, vision, T = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
r = json.load(open(os.path.join(out, "report.json")))

def check(cond, what):
    if not cond:
        raise SystemExit("report.json: " + what)

NUM = (int, float)
def typed(obj, spec, where):
    """spec: {key: type or (types) or nested dict}"""
    check(isinstance(obj, dict), where + " is not an object")
    for k, t in spec.items():
        check(k in obj, "%s lacks %s" % (where, k))
        if isinstance(t, dict):
            typed(obj[k], t, where + "." + k)
        else:
            check(isinstance(obj[k], t) and not isinstance(obj[k], bool) or (t is bool and isinstance(obj[k], bool)),
                  "%s.%s has type %s" % (where, k, type(obj[k]).__name__))

STAT = {"mean": NUM, "min": NUM, "max": NUM, "std": NUM, "n": int}
typed(r, {"schema": str, "attnlab_version": str, "created_utc": str, "wall_seconds": NUM,
          "budget": {"name": str, "summary": str, "seeds": int, "final_eval_tokens": NUM, "decode_context": int,
                     "decode_tokens": int, "speed_rounds": int, "speed_steps": int, "attnmap_tokens": int},
          "machine": {"threads": int, "blas_kernels": str}, "seeds": list,
          "corpus": {"path": str, "bytes": int, "train_bytes": int, "val_bytes": int, "unigram_entropy_nats": NUM,
                     "unigram_entropy_bits": NUM, "unigram_val_loss_nats": NUM, "unigram_val_bpb": NUM},
          "language_models": {"settings": {"batch": int, "context": int, "steps": int, "warmup": int, "lr": NUM,
                                           "min_lr_ratio": NUM, "weight_decay": NUM, "grad_clip": NUM,
                                           "eval_every": int, "eval_tokens": int, "val_fraction": NUM,
                                           "tokens_per_run": NUM},
                              "resolution": {"rule": str}, "designs": list, "runs": list},
          "vision": {"status": str, "note": str, "images": str, "models": list, "runs": list},
          "figures": list, "findings": list}, "report")
check(r["schema"] == "attnlab.study/1", "schema " + r["schema"])
check(r["budget"]["name"] == "tiny" and r["budget"]["seeds"] == seeds, "budget")
check(len(r["seeds"]) == seeds, "seeds")

# every number finite (threshold_pct may be null with several seeds)
def walk(x, where):
    if isinstance(x, dict):
        for k, v in x.items():
            if v is None:
                check(k == "threshold_pct" and seeds > 1, "null at %s.%s" % (where, k))
            else:
                walk(v, where + "." + k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            walk(v, "%s[%d]" % (where, i))
    elif isinstance(x, float):
        check(math.isfinite(x), "non-finite number at " + where)
walk(r, "report")

lm = r["language_models"]
PCT = {"mha": 100.0, "gqa": 50.0, "mqa": 12.5, "mla": 12.5, "lrkv": 56.25}
BYTES = {"mha": 8192, "gqa": 4096, "mqa": 1024, "mla": 1024, "lrkv": 4608}
check([d["design"] for d in lm["designs"]] == ["mha", "gqa", "mqa", "mla", "lrkv"], "design order")
mha_params = lm["designs"][0]["params"]
for d in lm["designs"]:
    typed(d, {"design": str, "title": str, "params": int, "kv_values_per_token_per_layer": int,
              "kv_bytes_per_token": int, "kv_pct_of_mha": NUM, "seeds": int, "val_loss": STAT, "val_bpb": STAT,
              "train_tokens_per_s": NUM, "decode_tokens_per_s": NUM, "train_tokens_per_s_runs": STAT,
              "erank_uncentered_pct": STAT,
              "erank_pca_pct": STAT, "delta_vs_mha_pct": NUM, "resolved_vs_mha": bool, "config": dict},
          "design " + d["design"])
    check(abs(d["kv_pct_of_mha"] - PCT[d["design"]]) < 1e-9, "%s cache %% %r" % (d["design"], d["kv_pct_of_mha"]))
    check(d["kv_bytes_per_token"] == BYTES[d["design"]], "%s cache bytes" % d["design"])
    check(abs(d["params"] - mha_params) <= 0.01 * mha_params, "%s params not within 1 %% of MHA" % d["design"])
    check(d["seeds"] == seeds and d["val_loss"]["n"] == seeds, "%s seeds" % d["design"])
    s = d["val_loss"]
    check(s["min"] <= s["mean"] <= s["max"] and s["std"] >= 0, "%s loss stat" % d["design"])
    check(abs(d["val_bpb"]["mean"] - s["mean"] / math.log(2)) < 1e-9, "bits per byte")
    check(0 < d["erank_uncentered_pct"]["mean"] <= 100 + 1e-6, "erank")
    check(d["train_tokens_per_s"] > 0 and d["decode_tokens_per_s"] > 0, "speeds")
check(lm["designs"][0]["delta_vs_mha_pct"] == 0 and not lm["designs"][0]["resolved_vs_mha"], "MHA vs itself")
check(len(lm["runs"]) == 5 * seeds, "runs")
for x in lm["runs"]:
    typed(x, {"design": str, "seed": int, "dir": str, "params": int, "kv_bytes_per_token": int, "kv_pct_of_mha": NUM,
              "val_loss": NUM, "val_bpb": NUM, "val_tokens": int, "train_tokens_per_s": NUM, "train_seconds": NUM,
              "erank_uncentered_pct": NUM, "erank_pca_pct": NUM,
              "mean_offdiag_similarity": NUM, "curve": {"step": list, "tokens": list, "val_loss": list}}, "run")
    check(os.path.isdir(x["dir"]), "run dir " + x["dir"])
    for f in ("config.json", "model.safetensors", "train_state.safetensors", "log.jsonl", "measure.json"):
        check(os.path.isfile(os.path.join(x["dir"], f)), "missing %s/%s" % (x["dir"], f))
    check(x["curve"]["step"][-1] == lm["settings"]["steps"], "curve ends at the last step")
    check(x["val_loss"] > 0 and x["train_tokens_per_s"] > 0, "positive measures")
check(r["corpus"]["unigram_entropy_nats"] > 0 and r["corpus"]["val_bytes"] > 0, "corpus")
if seeds > 1:
    check(lm["resolution"]["threshold_pct"] is None, "threshold with several seeds")
else:
    check(lm["resolution"]["threshold_pct"] == 2, "threshold with one seed")

v = r["vision"]
if vision:
    check(v["status"] == "done" and len(v["models"]) == 2 and len(v["runs"]) == 2 * seeds, "vision models")
    check([m["score"] for m in v["models"]] == ["softmax", "poly"], "vision order")
    check(v["models"][1]["title"] == "Attention with (1/14)x^3", "poly title " + v["models"][1]["title"])
    check(abs(v["models"][1]["config"]["poly_scale"] - 1 / 14) < 1e-12, "poly scale 1/14")
    check(v["models"][1]["config"]["patches"] == 196, "196 patches")
    for m in v["models"]:
        typed(m, {"score": str, "title": str, "params": int, "test_images": int, "accuracy": STAT,
                  "test_loss": STAT, "train_images_per_s": STAT, "erank_uncentered_pct": STAT, "erank_pca_pct": STAT,
                  "config": dict}, "vision model")
        check(0 <= m["accuracy"]["mean"] <= 1, "accuracy")
    typed(v["cls_attention"], {"layer": int, "head": int, "image": int, "label": int,
                               "softmax": {"min": NUM, "max": NUM}, "poly": {"min": NUM, "max": NUM}}, "cls")
else:
    check(v["status"] == "skipped" and v["note"] and not v["models"], "vision skipped")

figs = {f["file"]: f for f in r["figures"]}
want = ["heads.png", "attnmaps.png", "loss_curves.png", "kv_vs_loss.png"] + (["poly_vs_softmax.png"] if vision else [])
check(sorted(figs) == sorted(want), "figures %s" % sorted(figs))
for f in r["figures"]:
    typed(f, {"file": str, "data": list, "caption": str}, "figure")
    stem = f["file"][:-4]
    check(stem + ".json" in f["data"] and stem + ".npy" in f["data"], "data files of " + f["file"])
    for name in [f["file"]] + f["data"]:
        p = os.path.join(out, name)
        check(os.path.isfile(p) and os.path.getsize(p) > 0, "missing " + name)
    check(open(os.path.join(out, f["file"]), "rb").read(8) == b"\x89PNG\r\n\x1a\n", f["file"] + " is not a PNG")
    json.load(open(os.path.join(out, stem + ".json")))

def npy(name):
    a = np.load(os.path.join(out, name))
    check(a.dtype == np.float32, name + " dtype")
    return a
n_eval = len(lm["runs"][0]["curve"]["step"])
check(npy("heads.npy").shape == (5, 8, 8), "heads.npy shape")
a = npy("attnmaps.npy")
check(a.shape == (4, T, T) and np.isfinite(a).all(), "attnmaps.npy shape %s" % (a.shape,))
check(np.abs(a.sum(axis=2) - 1).max() < 1e-3, "softmax rows of attnmaps sum to 1")
a = npy("loss_curves.npy")
check(a.shape == (5, n_eval, 4) and np.isfinite(a).all(), "loss_curves.npy shape %s" % (a.shape,))
check(np.all(a[:, :, 2] <= a[:, :, 1] + 1e-6) and np.all(a[:, :, 1] <= a[:, :, 3] + 1e-6), "loss band")
a = npy("kv_vs_loss.npy")
check(a.shape == (5, 4), "kv_vs_loss.npy shape")
check(np.allclose(a[:, 0], [100, 50, 12.5, 12.5, 56.25]), "kv_vs_loss x")
check(np.allclose(a[:, 1], [d["val_loss"]["mean"] for d in lm["designs"]], rtol=1e-5), "kv_vs_loss y")
if vision:
    a = npy("poly_vs_softmax.npy")
    check(a.shape == (2, 14, 14) and np.isfinite(a).all(), "poly_vs_softmax.npy shape")
    check(a[0].min() > 0, "softmax weights positive")

html = open(os.path.join(out, "report.html")).read()
for f in want:
    check('src="%s"' % f in html, "report.html lacks " + f)
check("http://" not in html and "https://" not in html, "report.html links outside")
md = open(os.path.join(out, "report.md")).read()
check("What the numbers show" in md and "![heads.png](heads.png)" in md, "report.md")
check(("not resolved" in md) or ("Not resolved" in md) or ("Resolved" in md), "report.md resolution")
print("ok")
EOF

# ---------------------------------------------------------------- usage

begin "usage errors: one line, exit 2"
run study
check_error 2 "--out"
run study --out "$WORK/u" --budget huge
check_error 2 "unknown budget"
run study --out "$WORK/u" --seeds 17
check_error 2 "--seeds"
run study --out "$WORK/u" --bogus 1
check_error 2 "unknown flag"
run study --help
check_ok
check_stdout "--budget"
end

# ---------------------------------------------------------------- a whole study

S1=$WORK/s1
begin "tiny study: every output, report.json valid"
study --out "$S1"
check_ok
check_stderr "\[run 1/[0-9]+\] mha-seed1337"
check_stderr "study ETA"
check_stderr "study: KV frontier 1/5: mha-seed1337"
check_stderr "study: KV frontier 5/5: lrkv-seed1337"
check_stdout "wrote .*report.md"
for f in report.md report.json report.html heads.png heads.json heads.npy heads.csv attnmaps.png attnmaps.json \
    attnmaps.npy loss_curves.png loss_curves.json loss_curves.npy kv_vs_loss.png kv_vs_loss.json kv_vs_loss.npy; do
    check_exists "$S1/$f"
done
if [ "$VISION" = 1 ]; then
    check_exists "$S1/poly_vs_softmax.png"
    check_exists "$S1/poly_vs_softmax.npy"
    check_exists "$S1/runs/vit-poly-seed1337/model.safetensors"
fi
for d in mha gqa mqa mla lrkv; do
    for f in config.json model.safetensors train_state.safetensors log.jsonl measure.json; do
        check_exists "$S1/runs/$d-seed1337/$f"
    done
done
check_no_tmp "$S1"
check_py "report.json against the schema" "exec(open('$WORK/validate.py').read())" "$S1" 1 "$VISION" 64
end

begin "tiny study: the KV frontier, its data and its report section"
for f in kv_frontier.png kv_frontier.json kv_frontier.csv; do check_exists "$S1/$f"; done
for d in mha gqa mqa mla lrkv; do check_exists "$S1/runs/$d-seed1337/kv_frontier.json"; done
check_py "bad KV frontier" '
import csv, json, sys
out = sys.argv[1]
r = json.load(open(out + "/report.json"))
k = r["kv_frontier"]
assert k["status"] == "done" and k["figure"] == "kv_frontier.png" and k["data"] == ["kv_frontier.json", "kv_frontier.csv"], k
assert open(out + "/kv_frontier.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
assert k["methods"] == "none,int8,int4,int2,h2o:0.5,h2o:0.5+int2" and k["tokens"] == 64 and k["context"] == 32, k
assert k["kv_group"] == 16 and k["kv_residual"] == 4, k
pts = {(p["design"], p["method"]): p for p in k["points"]}
ref = {(p["design"], p["method"]) for p in k["refused"]}
# uncompressed fp32 bytes of the study presets (4 layers, 8 heads of 32): MHA 8192, GQA 4096, MQA 1024, MLA 1024, LRKV 4608
FP32 = {"mha": 8192, "gqa": 4096, "mqa": 1024, "mla": 1024, "lrkv": 4608}
for d in FP32:
    for m in ("none", "int8", "int4", "int2"):
        assert (d, m) in pts, (d, m)
    for m in ("h2o:0.5", "h2o:0.5+int2"):
        assert (d, m) in pts and (d, m) not in ref, (d, m)  # eviction is measured
    # (at this size the kept half never outgrows the residual plus one block, so int2 may quantise none of it)
    assert pts[(d, "h2o:0.5+int2")]["bytes_per_token"] <= pts[(d, "h2o:0.5")]["bytes_per_token"] < FP32[d], d
    n = pts[(d, "none")]
    assert n["bytes_per_token"] == FP32[d] and abs(n["pct_of_mha_fp32"] - FP32[d] / 81.92) < 1e-9, n
    q = [pts[(d, m)] for m in ("int8", "int4", "int2")]
    assert FP32[d] > q[0]["bytes_per_token"] > q[1]["bytes_per_token"] > q[2]["bytes_per_token"], q
    for p in q:
        assert abs(p["delta_vs_uncompressed_pct"] - 100 * (p["loss"] - n["loss"]) / n["loss"]) < 1e-9, p
        assert abs(p["pct_of_mha_fp32"] - p["bytes_per_token"] / 81.92) < 1e-9, p
ok = list(pts.values())
for b in k["best_under"]:
    cand = [p for p in ok if p["pct_of_mha_fp32"] <= b["max_pct_of_mha_fp32"] + 1e-9]
    assert b["loss"] == min(p["loss"] for p in cand), b
t = k["best_trade"]
assert t["loss"] * t["bytes_per_token"] == min(p["loss"] * p["bytes_per_token"] for p in ok), t
assert any(p["hull"] for p in ok) and all(p["pareto"] for p in ok if p["hull"])
for p in ok:  # Pareto: nothing cheaper (or as cheap) is better
    better = [o for o in ok if o["bytes_per_token"] <= p["bytes_per_token"] and o["loss"] < p["loss"]]
    assert p["pareto"] == (not better), p
rows = list(csv.DictReader(open(out + "/kv_frontier.csv")))
assert len(rows) == 30 and len(json.load(open(out + "/kv_frontier.json"))["points"]) == 30, len(rows)
md = open(out + "/report.md").read()
assert "## KV-cache compression: quality per byte" in md and "Lowest loss per byte at this scale" in md, "section"
assert k["conclusion"] in md and "![kv_frontier.png](kv_frontier.png)" in md, "conclusion / figure in report.md"
assert "src=\"kv_frontier.png\"" in open(out + "/report.html").read(), "figure in report.html"
' "$S1"
end

begin "the KV frontier's caches: a rerun reuses them, a missing point is measured again alone"
"$PY" - "$S1/runs/gqa-seed1337/kv_frontier.json" <<'EOF2'
import json, sys
j = json.load(open(sys.argv[1]))
j["points"] = [p for p in j["points"] if p["method"] != "int4"]
json.dump(j, open(sys.argv[1], "w"), indent=1)
EOF2
cp "$S1/runs/mha-seed1337/kv_frontier.json" "$WORK/mha.kv"
study --out "$S1"
check_ok
check_same_file "$S1/runs/mha-seed1337/kv_frontier.json" "$WORK/mha.kv"
check_py "gqa int4 measured again, the rest reused" '
import json, sys
r = json.load(open(sys.argv[1]))
g = [p["method"] for p in r["points"] if p["design"] == "gqa"]
assert g == "none,int8,int4,int2,h2o:0.5,h2o:0.5+int2".split(","), g
m = json.load(open(sys.argv[2]))
old = {p["method"]: p["seconds"] for p in m["points"]}
now = {p["method"]: p["seconds"] for p in r["points"] if p["design"] == "mha"}
assert old == now, (old, now)  # the same measurements, not new ones
' "$S1/kv_frontier.json" "$WORK/mha.kv"
run study --out "$WORK/u" --kv-tokens -1
check_error 2 "--kv-tokens"
end

begin "rerun: every finished run skipped, nothing retrained"
mtimes "$S1" | grep -v measure.json >"$WORK/before"
cp "$S1/report.json" "$WORK/report1.json"
sleep 1
study --out "$S1"
check_ok
n_skip=$(grep -c "complete, skipped" "$ERRF")
expect=$((5 + 2 * VISION))
[ "$n_skip" -eq "$expect" ] || note "$n_skip runs skipped, expected $expect"
grep -q "training" "$ERRF" && grep -q "steps (study ETA" "$ERRF" && note "something was trained again"
mtimes "$S1" | grep -v measure.json >"$WORK/after"
cmp -s "$WORK/before" "$WORK/after" || note "run files changed: $(diff "$WORK/before" "$WORK/after" | head -n 2 | tr '\n' ' ')"
check_py "same numbers as the first report" '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for x, y in zip(a["language_models"]["runs"], b["language_models"]["runs"]):
    assert x["val_loss"] == y["val_loss"], (x["val_loss"], y["val_loss"])
' "$WORK/report1.json" "$S1/report.json"
end

# set_step FILE N: a training state's saved step 4 rewritten as N (one digit: the header keeps its length)
set_step() {
    "$PY" - "$1" "$2" <<'EOF'
import sys
p, n = sys.argv[1], sys.argv[2].encode()
b = bytearray(open(p, "rb").read())
i = b.find(b'"step":"4"')
assert i > 0 and len(n) == 1, "no step 4 in the header"
b[i:i + 10] = b'"step":"' + n + b'"'
open(p, "wb").write(bytes(b))
EOF
}

begin "a run stopped partway resumes from its saved step"
# make mha's training state say step 2 of 4, as a run killed after its
# step-2 checkpoint would have left it
set_step "$S1/runs/mha-seed1337/train_state.safetensors" 2
gqa_before=$(stat -c %Y "$S1/runs/gqa-seed1337/log.jsonl")
study --out "$S1"
check_ok
check_stderr "mha-seed1337: resuming at step 2 of 4"
check_py "log.jsonl has steps 1..4 once each" '
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == [1, 2, 3, 4], steps
' "$S1/runs/mha-seed1337/log.jsonl"
[ "$(stat -c %Y "$S1/runs/gqa-seed1337/log.jsonl")" = "$gqa_before" ] || note "gqa was retrained"
cmp -s "$S1/runs/mha-seed1337/kv_frontier.json" "$WORK/mha.kv" && note "the resumed mha's KV frontier was not measured again"
check_py "report.json against the schema" "exec(open('$WORK/validate.py').read())" "$S1" 1 "$VISION" 64
end

begin "a run with other settings is trained again from scratch"
"$PY" - "$S1/runs/lrkv-seed1337/config.json" <<'EOF'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["attnlab"]["train"]["lr"] = 0.01
json.dump(c, open(p, "w"), indent=1)
EOF
study --out "$S1"
check_ok
check_stderr "lrkv-seed1337: its lr differs .*training it again"
check_py "lrkv retrained with the planned lr" '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["attnlab"]["train"]["lr"] == 0.002, c["attnlab"]["train"]["lr"]
' "$S1/runs/lrkv-seed1337/config.json"
end

begin "runs whose files disagree with the plan are trained again, each with its reason"
# one study over four damaged runs: the other reasons of al_study_run_state
"$PY" - "$S1/runs" <<'EOF'
import json, sys
runs = sys.argv[1]
open(runs + "/mha-seed1337/config.json", "w").write("{")  # unreadable
p = runs + "/gqa-seed1337/config.json"
c = json.load(open(p))
c["attnlab"]["train"]["data"] = "/elsewhere.txt"  # other data
json.dump(c, open(p, "w"), indent=1)
p = runs + "/mla-seed1337/log.jsonl"
lines = open(p).read().splitlines(True)
open(p, "w").write("".join(lines[:-1]))  # the final step's line gone
EOF
set_step "$S1/runs/mqa-seed1337/train_state.safetensors" 9 # past the plan's 4 steps
study --out "$S1"
check_ok
check_stderr "mha-seed1337: its config.json is unreadable: training it again"
check_stderr "gqa-seed1337: it was trained on other data \\(/elsewhere.txt\\): training it again"
check_stderr "mqa-seed1337: it was trained past the planned 4 steps: training it again"
check_stderr "mla-seed1337: its checkpoint or log.jsonl lacks the final step: training it again"
check_stderr "lrkv-seed1337: complete, skipped"
check_py "a retrained run is not whole again" '
import json, sys
for d in ("mha", "gqa", "mqa", "mla"):
    steps = [json.loads(l)["step"] for l in open("%s/%s-seed1337/log.jsonl" % (sys.argv[1], d))]
    assert steps == [1, 2, 3, 4], (d, steps)
    c = json.load(open("%s/%s-seed1337/config.json" % (sys.argv[1], d)))
    assert c["attnlab"]["train"]["data"] == sys.argv[2] and c["attnlab"]["step"] == 4, (d, c["attnlab"])
' "$S1/runs" "$DATA"
end

begin "the report records the precision of the study and of every run"
check_py "precision missing from report.json" '
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
assert r["precision"] == "F32", r.get("precision")
runs = r["language_models"]["runs"] + (r["vision"]["runs"] if r.get("vision") else [])
assert runs and all(x["precision"] == "F32" for x in runs), [x.get("precision") for x in runs]
' "$S1"
grep -q "matrix products in F32 (bf16 engine: " "$S1/report.md" || note "report.md does not name the precision"
end

begin "a run trained in another precision is trained again"
"$PY" - "$S1/runs/gqa-seed1337/config.json" <<'EOF'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["attnlab"]["train"]["precision"] = "BF16"
json.dump(c, open(p, "w"), indent=1)
EOF
study --out "$S1"
check_ok
check_stderr "gqa-seed1337: it was trained in BF16 \(planned F32\).*training it again"
check_py "gqa not retrained in F32" '
import json, sys
assert json.load(open(sys.argv[1]))["attnlab"]["train"]["precision"] == "F32"
' "$S1/runs/gqa-seed1337/config.json"
end

# ---------------------------------------------------------------- stop and resume, several seeds

S2=$WORK/s2
begin "--max-runs 1 stops after the first run; the rerun does not retrain it"
study --out "$S2" --seeds 2 --no-vision --max-runs 1
check_ok
check_stderr "stopped after 1 run"
check_exists "$S2/runs/mha-seed1337/model.safetensors"
check_absent "$S2/runs/gqa-seed1337/model.safetensors"
check_absent "$S2/report.json"
first=$(stat -c '%Y %s' "$S2/runs/mha-seed1337/log.jsonl" "$S2/runs/mha-seed1337/train_state.safetensors" \
    "$S2/runs/mha-seed1337/model.safetensors")
sleep 1
study --out "$S2" --seeds 2 --no-vision
check_ok
check_stderr "\[run 1/10\] mha-seed1337: complete, skipped"
check_stderr "\[run 6/10\] mha-seed1338: training"
again=$(stat -c '%Y %s' "$S2/runs/mha-seed1337/log.jsonl" "$S2/runs/mha-seed1337/train_state.safetensors" \
    "$S2/runs/mha-seed1337/model.safetensors")
[ "$first" = "$again" ] || note "the first run's files changed: $first -> $again"
check_absent "$S2/poly_vs_softmax.png"
check_py "report.json with two seeds, vision skipped" "exec(open('$WORK/validate.py').read())" "$S2" 2 0 64
check_py "spread over two seeds" '
import json, sys
r = json.load(open(sys.argv[1]))
for d in r["language_models"]["designs"]:
    s = d["val_loss"]
    assert s["n"] == 2 and s["min"] < s["max"] and s["std"] > 0, (d["design"], s)
' "$S2/report.json"
check_no_tmp "$S2"
end

# ---------------------------------------------------------------- long paths

# Paths are never cut: a study 3,841 bytes deep (a relative path of 15 names
# of 255 bytes, NAME_MAX) runs whole, its figures and reports included; a
# study directory longer than a path field (4,095 bytes) is refused in one
# line that says so, before anything is written.
LONG_NAME=$(printf '%0255d' 0)
LONG=.
for _ in $(seq 15); do LONG=$LONG/$LONG_NAME; done
cd "$WORK" || exit 1
mkdir -p "$(dirname "$LONG")" || exit 1 # the commands make the last level themselves
begin "long paths: a study 3,841 bytes deep"
study --out "$LONG"
check_ok
for f in report.md report.json report.html heads.png attnmaps.png loss_curves.npy kv_vs_loss.json; do
    check_exists "$LONG/$f"
done
check_exists "$LONG/runs/lrkv-seed1337/measure.json"
check_py "report.json names the runs' directories whole" '
import json, sys
r = json.load(open(sys.argv[1]))
dirs = [x["dir"] for x in r["language_models"]["runs"]]
assert dirs and all(d == sys.argv[2] + "/runs/" + x["design"] + "-seed1337" for d, x in zip(dirs, r["language_models"]["runs"])), dirs[0][-80:]
' "$LONG/report.json" "$LONG"
grep -qF -- "--out $LONG --budget tiny" "$LONG/report.md" || note "report.md does not name the study directory whole"
grep -qF -- "--out $LONG --budget tiny" "$LONG/report.html" || note "report.html does not name the study directory whole"
check_no_tmp "$LONG"
end

begin "long paths: a study directory longer than a path field: one line, exit 1, nothing written"
TOO_LONG=$LONG/$LONG_NAME/$LONG_NAME
study --out "$TOO_LONG"
check_error 1 "study directory path too long \(${#TOO_LONG} bytes, at most 4095\)"
check_absent "$LONG/$LONG_NAME"
end
cd - >/dev/null || exit 1

# ---------------------------------------------------------------- a real Ctrl-C

S3=$WORK/s3
begin "SIGINT during the study: exit 130, no temp files; the rerun skips the finished run and completes"
# job control on: a background job of a non-interactive shell would otherwise
# start with SIGINT ignored, unlike a command a user interrupts with Ctrl-C
set -m
"$BIN" study --budget tiny --data "$DATA" --threads 1 --precision f32 --no-vision --out "$S3" >"$OUTF" 2>"$ERRF" </dev/null &
pid=$!
set +m
# wait until the first run is complete (its checkpoint exists), then interrupt
for _ in $(seq 1 600); do
    [ -f "$S3/runs/mha-seed1337/model.safetensors" ] && break
    sleep 0.05
done
kill -INT "$pid" 2>/dev/null
wait "$pid"
RC=$?
[ "$RC" -eq 130 ] || note "exit status $RC after SIGINT, expected 130"
grep -q "rerun the same command" "$ERRF" || note "no line telling how to continue"
check_no_tmp "$S3"
check_absent "$S3/report.json"
first=$(stat -c '%Y %s' "$S3/runs/mha-seed1337/log.jsonl" "$S3/runs/mha-seed1337/model.safetensors")
sleep 1
study --out "$S3" --no-vision
check_ok
check_stderr "\[run 1/5\] mha-seed1337: complete, skipped"
again=$(stat -c '%Y %s' "$S3/runs/mha-seed1337/log.jsonl" "$S3/runs/mha-seed1337/model.safetensors")
[ "$first" = "$again" ] || note "the finished run was retrained: $first -> $again"
check_py "report.json against the schema" "exec(open('$WORK/validate.py').read())" "$S3" 1 0 64
check_no_tmp "$S3"
end

finish
