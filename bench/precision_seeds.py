#!/usr/bin/python3
"""precision_seeds.py: bf16 against fp32 training quality over several seeds.

Issue 14 asks that a quick-budget run of each study preset trained with BF16
products end within 1 % of the fp32 run's validation loss (the ViTs' test
accuracy within 2 points). One run per precision cannot answer that on its
own: two runs of one seed that differ only in rounding follow different
trajectories, and at the quick budget they end up about 1 % apart when
both are fp32 and up to 2 % for bf16 against fp32 (docs/study.md,
"Session 39" and "Session 40"). This script measures the gap the way that
noise allows: for each design and seed it trains
  f32   `attnlab train ... --precision f32`
  bf16  `attnlab train ... --precision bf16`
  avx2  with --yardstick: fp32 again with ATTNLAB_CPU=avx2 (the AVX2
        attention kernels, which sum in another order): the gap that
        rounding alone makes, with no bf16 anywhere
at the study's quick-budget settings (src/study/plan.c: 900 steps of 4 x 256
bytes, warmup 30, lr 2e-3, final evaluation on 32768 validation bytes; the
ViTs 600 steps of 32 images from the first 10,000, evaluated on the whole
test set), then prints per design each seed's gap in % of the fp32 loss
(points of accuracy for the ViTs), their mean with its standard error, and
how many seeds fall within the issue's bound.

Runs go to OUT/<design>-<f32|bf16|avx2>-<seed>, written under a temporary
name and renamed once finished, so an interrupted invocation resumes where
it stopped and never reads a half-trained run. The model flags of a run can
be scaled down for tests (--steps, --context, --batch, --eval-tokens, and
the ViTs' --vit-steps, --vit-batch, --vit-train-images).

  bench/precision_seeds.py --out DIR [--designs mha,gqa,mqa,mla,lrkv]
      [--vit] [--seed 1337] [--seeds 5] [--yardstick] [--json]
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

LM_DESIGNS = ("mha", "gqa", "mqa", "mla", "lrkv")
VIT_DESIGNS = ("vit-softmax", "vit-poly")
KINDS = ("f32", "bf16", "avx2")


def fail(msg):
    sys.exit("precision_seeds: " + msg)


def settings(design, seed, a):
    """The settings of one run that its config.json records in its train
    block, by that block's names: each is also the `attnlab train` flag of
    the same name (dashes for underscores), so the flags and the check of a
    finished run (check_settings) come from this one table."""
    if design.startswith("vit-"):
        return {"seed": seed, "steps": a.vit_steps, "batch": a.vit_batch, "train_subset": a.vit_train_images,
                "warmup": min(50, a.vit_steps // 2), "lr": 2e-3, "eval_every": a.vit_steps}
    return {"seed": seed, "steps": a.steps, "batch": a.batch, "context": a.context, "eval_tokens": a.eval_tokens,
            "warmup": min(30, a.steps // 2), "lr": 2e-3, "eval_every": a.steps}


def train_args(design, seed, a):
    """The `attnlab train` flags of one run at the quick budget's settings."""
    args = ["--quiet", "--save-every", "0"]
    for key, value in settings(design, seed, a).items():
        args += ["--" + key.replace("_", "-"), str(value)]
    if design.startswith("vit-"):
        return args + ["--task", "vision", "--score", design[4:], "--patch", "2", "--layers", "2", "--hidden", "64",
                       "--heads", "4", "--eval-images", "0"] + (["--images", a.images] if a.images else [])
    return args + ["--preset", design] + (["--data", a.data] if a.data else [])


def final_record(run_dir):
    """The last line of a finished run's log.jsonl (the final evaluation's), or None."""
    try:
        lines = open(os.path.join(run_dir, "log.jsonl")).read().splitlines()
        last = json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        return None
    return last if "val_loss" in last else None


def check_settings(run_dir, design, kind, seed, a):
    """Fails unless a finished run was trained with the settings asked for
    now, so that a table never mixes runs of other budgets."""
    try:
        conf = json.load(open(os.path.join(run_dir, "config.json")))
        train, model = conf["attnlab"]["train"], conf["attnlab"]
    except (OSError, ValueError, KeyError, TypeError):
        fail("%s: finished, but its config.json is unreadable; remove it or give another --out" % run_dir)
    want = dict(settings(design, seed, a), precision="BF16" if kind == "bf16" else "F32")
    got_design = "vit-" + str(model.get("score")) if design.startswith("vit-") else model.get("attention")
    if got_design != design:
        fail("%s: holds a %s run, not %s; give another --out" % (run_dir, got_design, design))
    for key, value in want.items():
        if train.get(key) != value:
            fail("%s: trained with %s %s, not %s; give another --out" % (run_dir, key, train.get(key), value))


def run_one(design, kind, seed, a):
    """Trains one run unless OUT holds it finished; returns its final record."""
    name = "%s-%s-%d" % (design, kind, seed)
    final = os.path.join(a.out, name)
    rec = final_record(final)
    if rec is not None:
        check_settings(final, design, kind, seed, a)
        return rec
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ)  # an ATTNLAB_CPU given holds for the f32 and bf16 runs
    if kind == "avx2":
        env["ATTNLAB_CPU"] = "avx2"
    cmd = [a.attnlab, "train", "--out", tmp, "--precision", "f32" if kind != "bf16" else "bf16"]
    cmd += train_args(design, seed, a)
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    print("precision_seeds: %s" % name, file=sys.stderr, flush=True)
    out = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = out.stderr.strip().splitlines()[-1:] or ["no message"]
        fail("%s: exit %d: %s" % (" ".join(cmd), out.returncode, tail[0]))
    rec = final_record(tmp)
    if rec is None:
        fail("%s: no final evaluation in its log.jsonl" % tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    return rec


def gap(design, rec, ref):
    """The run's distance from the fp32 run of its seed: loss in % for the
    language models (positive: worse), accuracy in points for the ViTs
    (positive: worse, so both read the same way)."""
    if design.startswith("vit-"):
        return 100.0 * (ref["val_accuracy"] - rec["val_accuracy"])
    return 100.0 * (rec["val_loss"] - ref["val_loss"]) / ref["val_loss"]


def stats(xs):
    """Mean and standard error of the mean (None with fewer than 2 values)."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, None
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return mean, math.sqrt(var / n)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory of the runs (reused: finished runs are not retrained)")
    p.add_argument("--attnlab", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                     "attnlab"))
    p.add_argument("--designs", default=",".join(LM_DESIGNS), help="comma list of " + ", ".join(LM_DESIGNS))
    p.add_argument("--vit", action="store_true", help="also the two ViTs (softmax, poly)")
    p.add_argument("--seed", type=int, default=1337, help="first seed")
    p.add_argument("--seeds", type=int, default=5, help="seeds per design")
    p.add_argument("--yardstick", action="store_true", help="also fp32 with ATTNLAB_CPU=avx2 (rounding alone)")
    p.add_argument("--threads", type=int, default=0, help="attnlab's --threads (default: all cores)")
    p.add_argument("--steps", type=int, default=900)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--eval-tokens", type=int, default=32768)
    p.add_argument("--vit-steps", type=int, default=600)
    p.add_argument("--vit-batch", type=int, default=32)
    p.add_argument("--vit-train-images", type=int, default=10000)
    p.add_argument("--data", default="", help="training text of the language models (default: attnlab's)")
    p.add_argument("--images", default="", help="Fashion-MNIST directory for the ViTs (default: attnlab's)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    a = p.parse_args()

    designs = [d for d in a.designs.split(",") if d]
    for d in designs:
        if d not in LM_DESIGNS:
            fail("--designs: unknown design '%s' (one of %s)" % (d, ", ".join(LM_DESIGNS)))
    if a.vit:
        designs += VIT_DESIGNS
    if not designs or a.seeds < 1 or a.steps < 2 or a.vit_steps < 2:
        fail("nothing to run: give designs, --seeds >= 1, --steps and --vit-steps >= 2")
    if not os.access(a.attnlab, os.X_OK):
        fail("%s: not an executable (build with make, or give --attnlab)" % a.attnlab)
    os.makedirs(a.out, exist_ok=True)
    kinds = KINDS if a.yardstick else KINDS[:2]

    # seed by seed, so an interrupted invocation leaves every design with
    # about as many seeds as the others
    seeds = list(range(a.seed, a.seed + a.seeds))
    recs = {}
    for seed in seeds:
        for d in designs:
            for k in kinds:
                recs[(d, k, seed)] = run_one(d, k, seed, a)

    report = {"seeds": seeds, "designs": {}}
    for d in designs:
        bound = 2.0 if d.startswith("vit-") else 1.0
        entry = {"unit": "accuracy points" if d.startswith("vit-") else "% of the fp32 loss", "bound": bound,
                 "f32": [recs[(d, "f32", s)]["val_accuracy" if d.startswith("vit-") else "val_loss"] for s in seeds]}
        for k in kinds[1:]:
            gaps = [gap(d, recs[(d, k, s)], recs[(d, "f32", s)]) for s in seeds]
            mean, se = stats(gaps)
            entry[k] = {"gaps": gaps, "mean": mean, "se": se, "within": sum(abs(g) <= bound for g in gaps)}
        report["designs"][d] = entry
    if a.json:
        print(json.dumps(report))
        return
    print("gap to the fp32 run of the same seed (positive: worse); seeds %d-%d" % (seeds[0], seeds[-1]))
    print("| design | run | %s | mean (s.e.) | within bound |" % " | ".join(str(s) for s in seeds))
    print("|---|---|%s---|---|" % ("---|" * len(seeds)))
    for d, e in report["designs"].items():
        for k in kinds[1:]:
            r = e[k]
            se = "(%.2f)" % r["se"] if r["se"] is not None else ""
            unit = " pt" if d.startswith("vit-") else " %"
            print("| %s | %s | %s | %+.2f%s %s | %d of %d within %g%s |" % (
                d, k, " | ".join("%+.2f" % g for g in r["gaps"]), r["mean"], unit, se, r["within"], len(seeds),
                e["bound"], unit))


if __name__ == "__main__":
    main()
