#!/usr/bin/python3
"""Independent float64 PyTorch reference test of attnlab's score functions.

What it checks, and why:

1. Forward and backward of the C model (via `al_testdump MODEL_DIR
   TOKENS.npy OUT.safetensors`) on tiny random Llama-style models (MHA and
   GQA, odd T) whose "attnlab" block selects a score function of
   attention.md 2, with s = q.k / sqrt(d_h) and masked pairs weighing 0:
     poly     c * s^p, p in {1, 2, 3}, c explicit or "auto" = 1/sqrt(N)
     relu     relu(s) / N
     sigmoid  sigmoid(s - log N)
   N is the config's score_n (absent: max_position_embeddings). Logits, mean
   cross-entropy loss and every parameter gradient are compared to float64
   autograd of the model below, written from the spec only.
2. `attnlab eval --logits` at a context other than score_n: the saved N,
   not the window length, defines the function.
3. `attnlab train --score ... --context T` writes score, poly_power,
   poly_scale and score_n = T into config.json, and the trained checkpoint
   still matches the reference (skipped if `attnlab train --help` fails).

Error metric: max|c - ref| / max|ref| per tensor, tolerance 1e-4.

`--self-test` validates the reference without any C binary: the softmax
path equals reflib's Llama forward, the weight functions equal a per-entry
loop, and autograd gradients equal central finite differences.

Exit status: 0 if every check passes, 1 if any fails, 2 on usage errors.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import reflib as R  # noqa: E402

SEED = 4321

# name, d, f, L, H, G, dh, tied, theta, T
SHAPES = {
    "mha": (24, 40, 2, 3, 3, 8, False, 10000.0, 13),
    "gqa": (32, 48, 2, 4, 2, 8, True, 500.0, 11),
}
# tag, score block ({} keys of "attnlab" beyond attention)
SCORES = [
    ("poly1_c", {"score": "poly", "poly_power": 1, "poly_scale": 0.35}),
    ("poly2_c", {"score": "poly", "poly_power": 2, "poly_scale": 0.2}),
    ("poly3_c", {"score": "poly", "poly_power": 3, "poly_scale": 1.0 / 14.0}),
    ("poly1_auto", {"score": "poly", "poly_power": 1, "poly_scale": "auto", "score_n": 9}),
    ("poly2_auto", {"score": "poly", "poly_power": 2, "poly_scale": "auto", "score_n": 30}),
    ("poly3_auto", {"score": "poly", "poly_power": 3, "poly_scale": "auto"}),  # N from max_position
    ("relu", {"score": "relu", "score_n": 7}),
    ("sigmoid", {"score": "sigmoid", "score_n": 20}),
]


# --------------------------------------------------------------------------
# Reference: the Llama model of reflib with the score function as a parameter

def score_params(cfg):
    """(kind, p, c, N) from a config's "attnlab" block, defaults as documented."""
    al = cfg.get("attnlab", {})
    kind = al.get("score", "softmax")
    n = al.get("score_n", cfg["max_position_embeddings"])
    p = al.get("poly_power", 3)
    c = al.get("poly_scale", "auto")
    c = 1.0 / math.sqrt(n) if c == "auto" else float(c)
    return kind, p, c, n


def attention_weights(s, visible, kind, p, c, n):
    """s: scaled scores [..., T, T]; visible: bool [T, T]. Masked pairs are 0."""
    if kind == "softmax":
        return torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)
    if kind == "poly":
        w = c * s ** p
    elif kind == "relu":
        w = torch.relu(s) / n
    elif kind == "sigmoid":
        w = torch.sigmoid(s - math.log(n))
    else:
        raise ValueError("unknown score " + kind)
    return torch.where(visible, w, torch.zeros_like(w))


def forward(cfg, prm, tokens):
    """Logits [B, T, 256] for integer tokens [B, T]; prm: {name: float64 tensor}."""
    d, dh = cfg["hidden_size"], cfg["head_dim"]
    H, G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    kind, p, c, n = score_params(cfg)
    Bn, T = tokens.shape
    cos, sin = R.rope_cos_sin(T, dh, theta)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = prm["model.embed_tokens.weight"][tokens]
    for li in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % li
        h = R.rms_norm(x, prm[pre + "input_layernorm.weight"], eps)
        q = (h @ prm[pre + "self_attn.q_proj.weight"].T).view(Bn, T, H, dh)
        k = (h @ prm[pre + "self_attn.k_proj.weight"].T).view(Bn, T, G, dh)
        v = (h @ prm[pre + "self_attn.v_proj.weight"].T).view(Bn, T, G, dh)
        q, k = R.apply_rope(q, cos, sin), R.apply_rope(k, cos, sin)
        k = k.repeat_interleave(H // G, dim=2)
        v = v.repeat_interleave(H // G, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, dh]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        a = attention_weights(s, causal, kind, p, c, n) @ v
        a = a.transpose(1, 2).reshape(Bn, T, H * dh)
        x = x + a @ prm[pre + "self_attn.o_proj.weight"].T
        h2 = R.rms_norm(x, prm[pre + "post_attention_layernorm.weight"], eps)
        g = h2 @ prm[pre + "mlp.gate_proj.weight"].T
        u = h2 @ prm[pre + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ prm[pre + "mlp.down_proj.weight"].T
    x = R.rms_norm(x, prm["model.norm.weight"], eps)
    head = prm["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else prm["lm_head.weight"]
    return x @ head.T


def reference(cfg, weights, tokens_np, need_grads=True):
    """(logits, loss, {name: grad}) as float64 numpy; tokens [B, T+1]."""
    return harness.reference(forward, cfg, weights, tokens_np, need_grads)


# --------------------------------------------------------------------------

def build_case(shape, block, rng):
    d, f, L, H, G, dh, tied, theta, T = shape
    cfg = R.make_config(d, f, L, H, G, dh, tied, theta)
    cfg["attnlab"].update(block)
    weights = R.random_weights(cfg, rng)
    return cfg, weights, harness.random_tokens(rng, T, edges=False)


def dump_and_compare(chk, exe, mdir, tag, tokens, ref):
    out = harness.dump(chk, exe, mdir, tag, tokens)
    if out is None:
        return
    expect = harness.expected_tensors(ref)
    missing = sorted(k for k in expect if k not in out)
    if missing:
        return chk.fail(tag, "missing from output: " + ", ".join(missing))
    # one line per model: the worst tensor, so a failure names it
    worst, worst_key = -1.0, None
    for key, want in expect.items():
        got = np.asarray(out[key], dtype=np.float64)
        if got.shape != want.shape or not np.all(np.isfinite(got)):
            return chk.fail(tag + "/" + key, "shape %s vs %s or non-finite" % (got.shape, want.shape))
        scale = np.max(np.abs(want))
        rel = np.max(np.abs(got - want)) / scale if scale > 0 else np.max(np.abs(got))
        if rel > worst:
            worst, worst_key = rel, key
    line = "%d tensors, worst %s max_rel_err=%.3e" % (len(expect), worst_key, worst)
    if worst <= harness.TOL:
        chk.ok(tag, line)
    else:
        chk.fail(tag, line + " > %.0e" % harness.TOL)


def check_train(chk, attnlab, exe, workdir, rng):
    """attnlab train --score: config.json carries the function and N = context."""
    if not harness.cli_available(attnlab, "train"):
        return
    text = os.path.join(workdir, "train.txt")
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    with open(text, "w") as fh:
        fh.write(" ".join(words[int(i)] for i in rng.integers(0, len(words), size=4000)))
    runs = [
        ("train_poly", ["--score", "poly", "--poly-power", "3", "--poly-scale", "auto"],
         {"score": "poly", "poly_power": 3, "poly_scale": "auto", "score_n": 24}),
        ("train_poly_c", ["--score", "poly", "--poly-power", "2", "--poly-scale", "0.125"],
         {"score": "poly", "poly_power": 2, "poly_scale": 0.125, "score_n": 24}),
        ("train_sigmoid", ["--score", "sigmoid"], {"score": "sigmoid", "score_n": 24}),
    ]
    for tag, flags, want in runs:
        out = os.path.join(workdir, tag)
        ok, msg = harness.run([attnlab, "train", "--data", text, "--out", out, "--layers", "1", "--hidden", "32",
                       "--heads", "4", "--kv-heads", "2", "--context", "24", "--batch", "2", "--steps", "3",
                       "--eval-every", "3", "--eval-tokens", "256", "--threads", "2", "--quiet"] + flags,
                      timeout=300)
        if not ok:
            chk.fail(tag, "attnlab train failed: " + msg)
            continue
        with open(os.path.join(out, "config.json")) as fh:
            cfg = json.load(fh)
        got = {k: cfg["attnlab"].get(k) for k in want}
        if got != want:
            chk.fail(tag + "/config", "attnlab block %s, expected %s" % (got, want))
            continue
        chk.ok(tag + "/config", json.dumps(got))
        weights = R.read_safetensors(os.path.join(out, "model.safetensors"))
        tokens = harness.random_tokens(rng, 17, edges=False)  # another length than the training context
        dump_and_compare(chk, exe, out, tag, tokens, reference(cfg, weights, tokens))


def main_checks(args):
    chk = harness.Checker(44)
    rng = np.random.default_rng(SEED)
    cases = {}
    for sname, shape in SHAPES.items():
        for tag, block in SCORES:
            name = "%s_%s" % (sname, tag)
            cfg, weights, tokens = build_case(shape, block, rng)
            cases[name] = (cfg, weights, tokens)
            mdir = os.path.join(args.workdir, name)
            R.write_model_dir(mdir, cfg, weights, "F32")
            dump_and_compare(chk, args.exe, mdir, name, tokens, reference(cfg, weights, tokens))
    # attnlab eval --logits at a window T != score_n vs the reference at T
    harness.eval_cases(chk, args, cases, (("gqa_poly2_auto", 19), ("mha_relu", 16), ("gqa_sigmoid", 5)), rng,
                       reference, data_len=lambda T: 2 * T + 5)
    check_train(chk, args.attnlab, args.exe, args.workdir, rng)
    harness.dump_bf16(chk, args, cases, reference)  # --precision bf16: every score function and shape
    return chk.summary()


# --------------------------------------------------------------------------
# Self-test of the reference

def self_test(_workdir):
    chk = harness.Checker(44)
    rng = np.random.default_rng(SEED)
    shape = (8, 12, 2, 4, 2, 4, False, 500.0, 5)
    # softmax through this file's forward == reflib's Llama forward
    cfg, weights, tokens = build_case(shape, {"score": "softmax"}, rng)
    mine = reference(cfg, weights, tokens, need_grads=False)[0]
    theirs = R.reference(cfg, weights, tokens, need_grads=False)[0]
    chk.compare("self/softmax_is_reflib", mine, theirs, tol=1e-12)
    # weights == a per-entry loop of the formulas
    s = torch.tensor(rng.standard_normal((3, 6, 6)) * 2)
    vis = torch.ones(6, 6, dtype=torch.bool).tril()
    for tag, block in SCORES:
        kind, p, c, n = score_params({"attnlab": block, "max_position_embeddings": 64})
        w = attention_weights(s, vis, kind, p, c, n).numpy()
        loop = np.zeros_like(w)
        for b in range(3):
            for i in range(6):
                for j in range(i + 1):
                    x = float(s[b, i, j])
                    loop[b, i, j] = (c * x ** p if kind == "poly" else max(x, 0.0) / n if kind == "relu"
                                     else 1.0 / (1.0 + math.exp(-(x - math.log(n)))))
        chk.compare("self/weights/" + tag, w, loop, tol=1e-12)
        if kind == "poly" and block.get("poly_scale") == "auto":
            want = 1.0 / math.sqrt(block.get("score_n", 64))
            chk.compare("self/auto_scale/" + tag, np.array(c), np.array(want), tol=1e-15)
    # autograd == central differences, per function (random direction per tensor)
    for tag, block in SCORES:
        cfg, weights, tokens = build_case(shape, block, rng)
        _, _, grads = reference(cfg, weights, tokens)
        slope = harness.loss_slope(forward, cfg, weights, tokens, eps=1e-6)
        fd, ad = [], []
        for k, g in grads.items():
            u = rng.standard_normal(g.shape)
            if k == "model.embed_tokens.weight":
                u *= np.isin(np.arange(256), tokens[:, :-1])[:, None]
            fd.append(slope(k, u))
            ad.append(float(np.sum(g * u)))
        chk.compare("self/fd/" + tag, np.array(fd), np.array(ad), tol=1e-6)
    return chk.summary()


if __name__ == "__main__":
    sys.exit(harness.main(__doc__, SEED, main_checks, self_test))
