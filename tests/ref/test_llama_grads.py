#!/usr/bin/python3
"""Independent float64 PyTorch reference test for attnlab's Llama model.

What it checks, and why:

1. Forward and backward of the C model (via `al_testdump MODEL_DIR
   TOKENS.npy OUT.safetensors`) on tiny random Llama configs covering MHA,
   GQA and MQA, each with tied and untied heads, several RoPE thetas, odd and
   even T, and head_dim * heads != hidden_size.  Logits, mean cross-entropy
   loss and the gradient of every parameter are compared to a float64
   autograd reference (reflib.py) written only from the mathematical spec.
   Weights are float32-representable, so the only expected error is float32
   arithmetic in C.
2. BF16 and F16 checkpoints: the C side must convert them to float32; its
   logits are compared to the reference evaluated on the same rounded weights.
3. `attnlab eval --logits`: the CLI's logits for the first window of a byte
   file are compared to the reference (skipped if `attnlab eval --help` fails).

Error metric: max|c - ref| / max|ref| per tensor, tolerance 1e-4.

`--self-test` validates the reference itself without any C binary:
autograd gradients vs central finite differences (float64), the vectorized
model vs a naive loop implementation (explicit per-head, per-position
attention and pairwise RoPE rotations), and safetensors/NPY round trips
(including bf16 round-to-nearest-even against torch's own conversion).

Exit status: 0 if every check passes, 1 if any fails, 2 on usage errors.
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import reflib as R  # noqa: E402

SEED = 1234

# name, d, f, L, H, G, dh, tied, theta, T
CONFIGS = [
    ("mha_tied", 16, 40, 2, 2, 2, 8, True, 10000.0, 5),
    ("mha_untied", 24, 64, 2, 6, 6, 4, False, 500.0, 8),
    ("gqa_tied", 32, 48, 2, 4, 2, 4, True, 500.0, 17),         # H*dh=16 != d
    ("gqa_untied", 24, 56, 3, 6, 3, 8, False, 10000.0, 11),    # H*dh=48 != d
    ("mqa_tied", 16, 32, 2, 4, 1, 8, True, 500.0, 9),          # H*dh=32 != d
    ("mqa_untied", 32, 64, 2, 2, 1, 8, False, 10000.0, 16),
    ("mha_odd", 18, 30, 2, 3, 3, 2, False, 10000.0, 7),        # tensor sizes not multiples of 16 floats
]
LOWP_CONFIG = "gqa_untied"          # used for the BF16 / F16 checkpoints
EVAL_CONFIGS = [("gqa_untied", 13), ("mqa_tied", 16)]  # (config, context)


def build_case(spec, rng):
    name, d, f, L, H, G, dh, tied, theta, T = spec
    cfg = R.make_config(d, f, L, H, G, dh, tied, theta)
    weights = R.random_weights(cfg, rng)
    return cfg, weights, harness.random_tokens(rng, T)


def main_checks(args):
    chk = harness.Checker(48)
    rng = np.random.default_rng(SEED)
    cases = harness.dump_cases(chk, args, CONFIGS, build_case, R.reference, rng)
    # 2. low-precision checkpoints: reference on the rounded weights
    harness.dump_low_precision(chk, args, LOWP_CONFIG, cases[LOWP_CONFIG], ("BF16", "F16"), R.reference)
    # 3. attnlab eval --logits
    harness.eval_cases(chk, args, cases, EVAL_CONFIGS, rng, R.reference)
    # 4. --precision bf16 (mixed precision) on the same weights, every design
    harness.dump_bf16(chk, args, cases, R.reference)
    return chk.summary()

# --------------------------------------------------------------------------
# Self-test of the reference


def naive_logits(cfg, w, toks):
    """Loop-based numpy forward written separately from reflib.forward."""
    d, dh = cfg["hidden_size"], cfg["head_dim"]
    H, G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    Bn, T = toks.shape
    half = dh // 2

    def norm(v, g):
        return v / math.sqrt(float(np.mean(v * v)) + eps) * g

    def rope(vec, pos):  # rotate pairs (i, i + dh/2) by pos * theta^(-2i/dh)
        out = vec.copy()
        for i in range(half):
            a = pos * theta ** (-2.0 * i / dh)
            x1, x2 = vec[i], vec[i + half]
            out[i] = x1 * math.cos(a) - x2 * math.sin(a)
            out[i + half] = x2 * math.cos(a) + x1 * math.sin(a)
        return out

    logits = np.zeros((Bn, T, R.VOCAB))
    for b in range(Bn):
        x = [w["model.embed_tokens.weight"][toks[b, t]].copy() for t in range(T)]
        for n in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % n
            hs = [norm(x[t], w[p + "input_layernorm.weight"]) for t in range(T)]
            q = [w[p + "self_attn.q_proj.weight"] @ h for h in hs]
            k = [w[p + "self_attn.k_proj.weight"] @ h for h in hs]
            v = [w[p + "self_attn.v_proj.weight"] @ h for h in hs]
            new_x = []
            for t in range(T):
                heads = []
                for hd in range(H):
                    g = hd // (H // G)
                    qv = rope(q[t][hd * dh:(hd + 1) * dh], t)
                    sc = [float(qv @ rope(k[s][g * dh:(g + 1) * dh], s)) / math.sqrt(dh)
                          for s in range(t + 1)]
                    m = max(sc)
                    e = [math.exp(c - m) for c in sc]
                    heads.append(sum(e[s] / sum(e) * v[s][g * dh:(g + 1) * dh]
                                     for s in range(t + 1)))
                xt = x[t] + w[p + "self_attn.o_proj.weight"] @ np.concatenate(heads)
                h2 = norm(xt, w[p + "post_attention_layernorm.weight"])
                gt = w[p + "mlp.gate_proj.weight"] @ h2
                ut = w[p + "mlp.up_proj.weight"] @ h2
                new_x.append(xt + w[p + "mlp.down_proj.weight"] @ (gt / (1 + np.exp(-gt)) * ut))
            x = new_x
        head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
        for t in range(T):
            logits[b, t] = head @ norm(x[t], w["model.norm.weight"])
    return logits


def self_test(workdir):
    chk = harness.Checker(48)
    rng = np.random.default_rng(SEED)
    tiny = [
        ("self_gqa_untied", 8, 12, 2, 4, 2, 4, False, 500.0, 5),
        ("self_mqa_tied", 8, 10, 2, 2, 1, 6, True, 10000.0, 6),  # dh/2 odd
    ]
    for spec in tiny:
        cfg, weights, tokens = build_case(spec, rng)
        name = spec[0]
        logits, loss, grads = R.reference(cfg, weights, tokens)
        naive = naive_logits(cfg, weights, tokens[:, :-1])
        chk.compare(name + "/naive_logits", logits, naive, tol=1e-12)
        # loss from logits, by hand
        lg = logits - logits.max(-1, keepdims=True)
        lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        tg = tokens[:, 1:]
        hand = -np.mean(np.take_along_axis(lp, tg[..., None], -1))
        chk.compare(name + "/loss_by_hand", np.array(loss), np.array(hand), tol=1e-12)

        # gradients vs central finite differences in float64
        slope = harness.loss_slope(R.forward, cfg, weights, tokens)
        for k, g in grads.items():
            probes = [rng.standard_normal(g.shape)]  # random direction
            rows = np.unique(tokens[:, :-1]) if k == "model.embed_tokens.weight" else None
            for _ in range(3):  # single entries (used embedding rows only)
                idx = tuple(int(rng.integers(s)) for s in g.shape)
                if rows is not None:
                    idx = (int(rng.choice(rows)),) + idx[1:]
                e = np.zeros(g.shape)
                e[idx] = 1.0
                probes.append(e)
            fd = [slope(k, u) for u in probes]
            ad = [float(np.sum(g * u)) for u in probes]
            chk.compare("%s/fd/%s" % (name, k), np.array(fd), np.array(ad), tol=1e-6)

    # safetensors round trip in every dtype
    w = {"a": rng.standard_normal((3, 5)).astype(np.float32),
         "b": np.array([1.0, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -2.5e-3, 65504.0, 0.0],
                       dtype=np.float32),
         "c": (1.0 + 0.1 * rng.standard_normal(7)).astype(np.float32)}
    for dtype in ("F32", "F16", "BF16"):
        path = os.path.join(workdir, "roundtrip_%s.safetensors" % dtype)
        R.write_safetensors(path, w, dtype)
        back = R.read_safetensors(path)
        with open(path, "rb") as fh:
            hlen = int.from_bytes(fh.read(8), "little")
        if hlen % 8 or set(back) != set(w):
            chk.fail("safetensors/%s/header" % dtype, "bad header or names")
        for k, v in w.items():
            if dtype == "BF16":  # independent rounding: torch's own conversion
                want = torch.tensor(v).to(torch.bfloat16).to(torch.float64).numpy()
            else:
                want = R.round_to_dtype(v, dtype)
            if back[k].shape == v.shape and np.array_equal(back[k], want):
                chk.ok("safetensors/%s/%s" % (dtype, k), "exact")
            else:
                chk.fail("safetensors/%s/%s" % (dtype, k), "round trip mismatch")
    # NPY v1.0 writer
    for shape in [(2, 9), (7,), (3, 4, 5)]:
        a = rng.standard_normal(shape).astype(np.float32)
        path = os.path.join(workdir, "roundtrip.npy")
        R.write_npy_f32(path, a)
        with open(path, "rb") as fh:
            head = fh.read(10)
        hlen = int.from_bytes(head[8:10], "little")
        b = R.read_npy(path)
        if head[:8] == b"\x93NUMPY\x01\x00" and (10 + hlen) % 64 == 0 \
                and b.dtype == np.float32 and np.array_equal(a, b):
            chk.ok("npy/%s" % "x".join(map(str, shape)), "exact")
        else:
            chk.fail("npy/%s" % "x".join(map(str, shape)), "round trip mismatch")
    return chk.summary()


if __name__ == "__main__":
    sys.exit(harness.main(__doc__, SEED, main_checks, self_test))
