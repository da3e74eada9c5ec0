#!/usr/bin/python3
"""Independent float64 PyTorch reference test for attnlab's LRKV attention.

LRKV (low-rank key-value attention, O'Neill et al., arXiv 2601.11471), as
attention.md 3.3 and 3.5 define it, written here from that text only:

    q_h    = RoPE_dh(W_q[h] x)
    k_h    = RoPE_dh(W_Ks x) + B_K[h] RoPE_r(U_K[h] x)
    v_h    = W_Vs x + B_V[h] U_V[h] x
    o_h    = causal softmax(q_h . k_h / sqrt(dh)) v_h;   out = W_o concat_h o_h

with rotate-half RoPE in both the dh-dim and the r-dim space, and tensors
q_proj [H*dh, d], k_shared_proj / v_shared_proj [dh, d], k_down_proj /
v_down_proj [H*r, d] (rows h*r.. = U[h]), k_up_proj / v_up_proj [H*dh, r]
(rows h*dh.. = B[h]), o_proj [d, H*dh]. Embedding, norms, MLP and head are
Llama's (the stack of harness.py).

What it checks:
1. `al_testdump MODEL_DIR TOKENS.npy OUT.safetensors` on tiny random configs
   (r = 2, 4, d_h and 0; tied and untied heads; odd T and a T beyond one
   64-row kernel block; H*d_h != d; 2-3 layers; a shape whose tensors are not
   multiples of 16 floats; softmax, and poly and sigmoid scores): logits,
   mean loss and every parameter gradient against float64 autograd, relative
   error max|c - ref| / max|ref| <= 1e-4.
2. A BF16 checkpoint: logits against the reference on the rounded weights.
3. `attnlab eval --logits` on one config (skipped if `attnlab eval --help`
   fails).
4. The reference itself, cheaply, every run: the vectorised model against a
   loop over tokens that uses the factored decode form of 3.3 (never forming
   k_h or v_h), and against the materialised per-head W_K[h], W_V[h] of the
   definition with RoPE applied per component. `--self-test` adds float64
   central finite differences of the gradients and needs no C binary.

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

SEED = 4321

# name, d, f, L, H, dh, r, tied, theta, T
CONFIGS = [
    ("r2_tied", 16, 40, 2, 2, 8, 2, True, 10000.0, 5),
    ("r4_untied", 24, 56, 2, 3, 8, 4, False, 500.0, 11),       # H*dh=24 = d
    ("rdh_untied", 20, 48, 2, 2, 6, 6, False, 10000.0, 9),     # r = dh; 6*20 floats: unfused path
    ("rdh_tied", 32, 64, 3, 4, 4, 4, True, 500.0, 17),         # r = dh; H*dh=16 != d
    ("r0_untied", 16, 32, 2, 4, 8, 0, False, 10000.0, 7),      # r = 0 (MQA), zero-size tensors
    ("r2_long", 32, 48, 2, 2, 8, 2, False, 10000.0, 70),       # T > one 64-row block
]
# other score functions through the LRKV design (the kernels have their own tests)
SCORE_CONFIGS = [
    ("r4_poly", 24, 40, 2, 2, 8, 4, False, 10000.0, 13,
     {"score": "poly", "poly_power": 3, "poly_scale": 0.5, "score_n": 16}),
    ("r2_sigmoid", 16, 40, 2, 3, 6, 2, True, 500.0, 10, {"score": "sigmoid", "score_n": 7}),
]
LOWP_CONFIG = "r4_untied"
EVAL_CONFIG = ("r2_long", 40)


# --------------------------------------------------------------------------
# Config and weights


def make_config(d, f, L, H, dh, r, tied, theta, score=None):
    # every head has its own effective key/value map W_Ks + B[h] U[h]: G = H
    cfg = harness.stack_config("AttnlabForCausalLM", "attnlab", d, f, L, H, H, tied, theta,
                               {"attention": "lrkv", "score": "softmax", "lrkv_rank": r}, head_dim=dh)
    if score:
        cfg["attnlab"].update(score)
    return cfg


def param_shapes(cfg):
    d, dh = cfg["hidden_size"], cfg["head_dim"]
    H, r = cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    return harness.stack_shapes(cfg, {
        "q_proj.weight": (H * dh, d),
        "k_shared_proj.weight": (dh, d), "v_shared_proj.weight": (dh, d),
        "k_down_proj.weight": (H * r, d), "v_down_proj.weight": (H * r, d),
        "k_up_proj.weight": (H * dh, r), "v_up_proj.weight": (H * dh, r),
        "o_proj.weight": (d, H * dh),
    })

# --------------------------------------------------------------------------
# Reference model (float64 autograd)


def rope(x, T, dim, theta):
    """Rotate-half RoPE over the last axis (size dim) of x [B, T, n, dim]."""
    if dim == 0:
        return x
    cos, sin = R.rope_cos_sin(T, dim, theta)
    return R.apply_rope(x, cos, sin)


def lrkv_attention(cfg, p, a, h):
    """h [B, T, d] (normed) -> attention output [B, T, d]; a: the tensor-name
    prefix "model.layers.N.self_attn."."""
    dh, H, r = cfg["head_dim"], cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    theta = cfg["rope_theta"]
    Bn, T, _ = h.shape
    q = rope((h @ p[a + "q_proj.weight"].T).view(Bn, T, H, dh), T, dh, theta)
    ks = rope((h @ p[a + "k_shared_proj.weight"].T).view(Bn, T, 1, dh), T, dh, theta)
    vs = (h @ p[a + "v_shared_proj.weight"].T).view(Bn, T, 1, dh)
    rk = rope((h @ p[a + "k_down_proj.weight"].T).view(Bn, T, H, r), T, r, theta)
    rv = (h @ p[a + "v_down_proj.weight"].T).view(Bn, T, H, r)
    bk = p[a + "k_up_proj.weight"].view(H, dh, r)
    bv = p[a + "v_up_proj.weight"].view(H, dh, r)
    k = ks + torch.einsum("bthr,hdr->bthd", rk, bk)
    v = vs + torch.einsum("bthr,hdr->bthd", rv, bv)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, dh]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    o = (weights_of(cfg, s, causal) @ v).transpose(1, 2).reshape(Bn, T, H * dh)
    return o @ p[a + "o_proj.weight"].T


def weights_of(cfg, s, causal):
    """Attention weights of scaled scores s [..., T, T] (attention.md 2)."""
    blk = cfg["attnlab"]
    kind = blk.get("score", "softmax")
    if kind == "softmax":
        return torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
    n = float(blk["score_n"])
    if kind == "poly":
        w = blk["poly_scale"] * s ** blk["poly_power"]
    elif kind == "relu":
        w = torch.relu(s) / n
    else:
        w = torch.sigmoid(s - math.log(n))
    return w.masked_fill(~causal, 0.0)


def forward(cfg, p, tokens, attention=lrkv_attention):
    """Logits [B, T, 256]: the Llama-style stack around `attention`."""
    return harness.stack_forward(cfg, p, tokens, attention)


def reference(cfg, weights, tokens_np, need_grads=True):
    """(logits, loss, {name: grad}) as float64 numpy; tokens [B, T+1]."""
    return harness.reference(forward, cfg, weights, tokens_np, need_grads)

# --------------------------------------------------------------------------
# Two further forms of the same attention, to validate the reference


def rope_vec(vec, pos, theta):
    """Rotate-half RoPE of one vector at position pos, pair by pair."""
    n = vec.shape[0]
    half = n // 2
    out = vec.clone()
    for i in range(half):
        ang = pos * theta ** (-2.0 * i / n)
        c, s = math.cos(ang), math.sin(ang)
        out[i] = vec[i] * c - vec[i + half] * s
        out[i + half] = vec[i + half] * c + vec[i] * s
    return out


def factored_attention(cfg, p, a, h):
    """Token by token with the cache of 3.3: [RoPE K_s | V_s | RoPE R_K[h] | R_V[h]]."""
    dh, H, r = cfg["head_dim"], cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    theta = cfg["rope_theta"]
    Wq, Wks, Wvs = p[a + "q_proj.weight"], p[a + "k_shared_proj.weight"], p[a + "v_shared_proj.weight"]
    Uk, Uv = p[a + "k_down_proj.weight"], p[a + "v_down_proj.weight"]
    Bk, Bv = p[a + "k_up_proj.weight"], p[a + "v_up_proj.weight"]
    Bn, T, _ = h.shape
    out = torch.zeros(Bn, T, cfg["hidden_size"], dtype=torch.float64)
    for b in range(Bn):
        cache = []
        for t in range(T):
            x = h[b, t]
            cache.append((rope_vec(Wks @ x, t, theta), Wvs @ x,
                          [rope_vec(Uk[i * r:(i + 1) * r] @ x, t, theta) for i in range(H)],
                          [Uv[i * r:(i + 1) * r] @ x for i in range(H)]))
            heads = []
            for i in range(H):
                qh = rope_vec(Wq[i * dh:(i + 1) * dh] @ x, t, theta)
                bk, bv = Bk[i * dh:(i + 1) * dh], Bv[i * dh:(i + 1) * dh]
                qb = bk.T @ qh
                sc = torch.stack([(qh @ c[0] + qb @ c[2][i]) / math.sqrt(dh) for c in cache])
                pr = weights_of(cfg, sc[None, :], torch.ones(1, t + 1, dtype=torch.bool))[0]
                vs = sum(pr[j] * cache[j][1] for j in range(t + 1))
                rv = sum(pr[j] * cache[j][3][i] for j in range(t + 1))
                heads.append(vs + bv @ rv)
            out[b, t] = p[a + "o_proj.weight"] @ torch.cat(heads)
    return out


def materialised_attention(cfg, p, a, h):
    """Per-head effective maps W_K[h] = W_Ks + B_K[h] U_K[h] of 3.3, with the
    RoPE of 3.5 applied to each component (so through the split, not on W_K[h] x)."""
    dh, H, r = cfg["head_dim"], cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    theta = cfg["rope_theta"]
    Bn, T, _ = h.shape
    pos = torch.arange(T, dtype=torch.float64)

    def rot_matrix(n, t):  # the RoPE_t^(n) map as an n x n matrix
        m = torch.zeros(n, n, dtype=torch.float64)
        for i in range(n // 2):
            ang = float(t) * theta ** (-2.0 * i / n)
            c, s = math.cos(ang), math.sin(ang)
            m[i, i], m[i, i + n // 2] = c, -s
            m[i + n // 2, i + n // 2], m[i + n // 2, i] = c, s
        return m

    heads = []
    for i in range(H):
        Wq = p[a + "q_proj.weight"][i * dh:(i + 1) * dh]
        Uk, Uv = p[a + "k_down_proj.weight"][i * r:(i + 1) * r], p[a + "v_down_proj.weight"][i * r:(i + 1) * r]
        Bk, Bv = p[a + "k_up_proj.weight"][i * dh:(i + 1) * dh], p[a + "v_up_proj.weight"][i * dh:(i + 1) * dh]
        Wv = p[a + "v_shared_proj.weight"] + Bv @ Uv
        # k_t = Rot_t^(dh) W_Ks x + B_K Rot_t^(r) U_K x: one [dh, d] map per position
        Wk_t = torch.stack([rot_matrix(dh, t) @ p[a + "k_shared_proj.weight"] + Bk @ rot_matrix(r, t) @ Uk
                            for t in range(T)])
        Wq_t = torch.stack([rot_matrix(dh, t) @ Wq for t in range(T)])
        q = torch.einsum("ted,btd->bte", Wq_t, h)
        k = torch.einsum("ted,btd->bte", Wk_t, h)
        v = h @ Wv.T
        s = q @ k.transpose(1, 2) / math.sqrt(dh)
        heads.append(weights_of(cfg, s, pos[:, None] >= pos[None, :]) @ v)
    return torch.cat(heads, -1) @ p[a + "o_proj.weight"].T


def check_reference(chk, tag, cfg, weights, tokens):
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}
    tok = torch.tensor(tokens[:, :-1], dtype=torch.long)
    with torch.no_grad():
        main = forward(cfg, p, tok).numpy()
        chk.compare(tag + "/factored_form", main, forward(cfg, p, tok, factored_attention).numpy(), tol=1e-12)
        chk.compare(tag + "/materialised_form", main, forward(cfg, p, tok, materialised_attention).numpy(),
                    tol=1e-12)

# --------------------------------------------------------------------------
# C side


def build_case(spec, rng):
    name, d, f, L, H, dh, r, tied, theta, T = spec[:10]
    cfg = make_config(d, f, L, H, dh, r, tied, theta, spec[10] if len(spec) > 10 else None)
    return cfg, harness.random_weights(param_shapes(cfg), rng), harness.random_tokens(rng, T)


def main_checks(args):
    chk = harness.Checker(48)
    rng = np.random.default_rng(SEED)
    cases = harness.dump_cases(chk, args, CONFIGS + SCORE_CONFIGS, build_case, reference, rng)

    # the reference against its factored and materialised forms (short T: loops)
    for name in ("r2_tied", "rdh_untied", "r0_untied", "r2_sigmoid"):
        cfg, weights, tokens = cases[name]
        check_reference(chk, "self_" + name, cfg, weights, tokens)

    harness.dump_low_precision(chk, args, LOWP_CONFIG, cases[LOWP_CONFIG], ("BF16",), reference)
    harness.eval_cases(chk, args, cases, [EVAL_CONFIG], rng, reference)
    harness.dump_bf16(chk, args, cases, reference)  # --precision bf16 on the same weights
    return chk.summary()


def self_test(_workdir):
    """The reference's gradients against float64 central differences."""
    chk = harness.Checker(48)
    rng = np.random.default_rng(SEED)
    for spec in [("fd_r2", 8, 12, 2, 2, 4, 2, False, 500.0, 5), ("fd_rdh", 8, 10, 2, 3, 4, 4, True, 10000.0, 4),
                 ("fd_poly", 8, 10, 1, 2, 4, 2, False, 500.0, 4,
                  {"score": "poly", "poly_power": 3, "poly_scale": 0.5, "score_n": 16})]:
        cfg, weights, tokens = build_case(spec, rng)
        check_reference(chk, spec[0], cfg, weights, tokens)
        _, _, grads = reference(cfg, weights, tokens)
        harness.check_fd(chk, spec[0], forward, cfg, weights, tokens, grads, rng)
    return chk.summary()


if __name__ == "__main__":
    sys.exit(harness.main(__doc__, SEED, main_checks, self_test))
