#!/usr/bin/python3
"""Independent float64 PyTorch reference test for attnlab's MLA design.

MLA is DeepSeek-V2's multi-head latent attention (attention.md 3.2), stored
under Hugging Face DeepseekV2 names.  The reference model below is written
from that spec only (no attnlab C code read): a byte-level Llama-style stack
(embedding, RMSNorm, SwiGLU MLP, optional tied head; harness.py, shared with
the other reference tests) whose attention, written here, is

    q   = q_proj(x)  or  q_b_proj(rmsnorm(q_a_proj(x)))   per head [q_nope; q_pe]
    [c; k_pe] = kv_a_proj_with_mqa(x)                      one k_pe for all heads
    [k_nope_h; v_h] = kv_b_proj(rmsnorm(c))                per head
    q_pe, k_pe: interleaved RoPE (pairs 2i, 2i+1, angle t * theta^(-2i/dr))
    softmax(q_h . [k_nope_h; k_pe] / sqrt(dn + dr)) causal, o_proj(concat_h o_h)

What it checks:
1. `al_testdump MODEL_DIR TOKENS.npy OUT.safetensors` on tiny random configs
   (with and without query compression, tied and untied heads, odd T, a
   length past one 64-row query block, qk_nope_head_dim = 0, 2-3 layers):
   logits, mean loss and the gradient of every parameter against float64
   autograd, error max|c - ref| / max|ref| <= 1e-4.
2. A BF16 checkpoint: the C logits against the reference on the same rounded
   weights.
3. `attnlab eval --logits` on an MLA checkpoint (skipped if eval is absent).
4. The reference itself (also alone with --self-test, without binaries): the
   vectorised model equals a loop version that decodes token by token from
   the absorbed cache (c~, k_pe) only, and a version rotating as HF
   DeepseekV2 does (de-interleave, then rotate-half); with --self-test also
   autograd against central finite differences.

Exit status: 0 if every check passes, 1 if any fails, 2 on usage errors.
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (checks, CLI, Llama-style stack around the attention)
import reflib as R  # noqa: E402  (safetensors / NPY helpers, RMSNorm, loss)

SEED = 4321

# name, d, f, L, H, dn, dr, dv, dc, dq, tied, theta, T
CONFIGS = [
    ("nocomp_tied", 16, 40, 2, 2, 4, 4, 6, 8, 0, True, 10000.0, 5),
    ("qcomp_untied", 24, 48, 2, 3, 6, 4, 8, 10, 12, False, 500.0, 9),
    ("qcomp_tied", 20, 36, 3, 4, 2, 6, 4, 6, 8, True, 10000.0, 11),     # dr/2 odd
    ("nocomp_untied_long", 32, 48, 2, 4, 8, 8, 8, 16, 0, False, 500.0, 67),  # > one query block
    ("nope0_qcomp", 16, 32, 2, 2, 0, 4, 4, 6, 8, False, 10000.0, 7),   # keys = shared rope key only
]
LOWP_CONFIG = "qcomp_untied"
EVAL_CONFIGS = [("qcomp_tied", 13)]


def make_config(spec):
    name, d, f, L, H, dn, dr, dv, dc, dq, tied, theta, T = spec
    return harness.stack_config(
        "DeepseekV2ForCausalLM", "deepseek_v2", d, f, L, H, H, tied, theta,
        {"attention": "mla", "score": "softmax"},
        kv_lora_rank=dc, q_lora_rank=dq if dq > 0 else None,
        qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv)


def dims(cfg):
    return (cfg["hidden_size"], cfg["num_attention_heads"], cfg["qk_nope_head_dim"],
            cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"],
            cfg["q_lora_rank"] or 0)


def param_shapes(cfg):
    """Ordered {HF name: shape} of every tensor of the checkpoint."""
    d, H, dn, dr, dv, dc, dq = dims(cfg)
    if dq:
        s = {"q_a_proj.weight": (dq, d), "q_a_layernorm.weight": (dq,), "q_b_proj.weight": (H * (dn + dr), dq)}
    else:
        s = {"q_proj.weight": (H * (dn + dr), d)}
    s["kv_a_proj_with_mqa.weight"] = (dc + dr, d)
    s["kv_a_layernorm.weight"] = (dc,)
    s["kv_b_proj.weight"] = (H * (dn + dv), dc)
    s["o_proj.weight"] = (d, H * dv)
    return harness.stack_shapes(cfg, s)

# --------------------------------------------------------------------------
# Reference model (float64, torch autograd)


def rope_angles(T, dr, theta):
    inv = theta ** (-torch.arange(0, dr, 2, dtype=torch.float64) / dr)   # [dr/2]
    return torch.outer(torch.arange(T, dtype=torch.float64), inv)       # [T, dr/2]


def rope_interleaved(x, theta):
    """x: [B, T, n, dr]; rotates pairs (2i, 2i+1) of token t by t * theta^(-2i/dr)."""
    ang = rope_angles(x.shape[1], x.shape[-1], theta)
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(x.shape)


def rope_hf(x, theta):
    """HF DeepseekV2's form: de-interleave (evens then odds), then rotate-half."""
    Bn, T, n, dr = x.shape
    x = x.view(Bn, T, n, dr // 2, 2).transpose(-1, -2).reshape(Bn, T, n, dr)
    ang = rope_angles(T, dr, theta)
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    rot = torch.cat([-x[..., dr // 2:], x[..., :dr // 2]], dim=-1)
    return x * cos + rot * sin


def mla_attention(cfg, p, a, h, rope):
    """h: [B, T, d] (normed layer input) -> [B, T, d]; a: tensor-name prefix."""
    d, H, dn, dr, dv, dc, dq = dims(cfg)
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    Bn, T, _ = h.shape
    if dq:
        q = R.rms_norm(h @ p[a + "q_a_proj.weight"].T, p[a + "q_a_layernorm.weight"], eps)
        q = q @ p[a + "q_b_proj.weight"].T
    else:
        q = h @ p[a + "q_proj.weight"].T
    q = q.view(Bn, T, H, dn + dr)
    q_nope, q_pe = q[..., :dn], rope(q[..., dn:], theta)
    ckv = h @ p[a + "kv_a_proj_with_mqa.weight"].T
    c, k_pe = ckv[..., :dc], ckv[..., dc:]
    k_pe = rope(k_pe.reshape(Bn, T, 1, dr), theta)
    kv = (R.rms_norm(c, p[a + "kv_a_layernorm.weight"], eps) @ p[a + "kv_b_proj.weight"].T)
    kv = kv.view(Bn, T, H, dn + dv)
    k = torch.cat([kv[..., :dn], k_pe.expand(Bn, T, H, dr)], dim=-1)
    v = kv[..., dn:]
    qf = torch.cat([q_nope, q_pe], dim=-1)
    s = torch.einsum("bihe,bjhe->bhij", qf, k) / math.sqrt(dn + dr)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~causal, float("-inf"))
    o = torch.einsum("bhij,bjhe->bihe", torch.softmax(s, dim=-1), v).reshape(Bn, T, H * dv)
    return o @ p[a + "o_proj.weight"].T


def forward(cfg, p, tokens, rope=rope_interleaved):
    """Logits [B, T, 256] for integer tokens [B, T]; p: {name: float64 tensor}."""
    return harness.stack_forward(cfg, p, tokens, lambda c, q, a, h: mla_attention(c, q, a, h, rope))


def reference(cfg, weights, tokens_np, need_grads=True):
    """(logits, loss, {name: grad}) as float64 numpy; tokens [B, T+1]."""
    return harness.reference(forward, cfg, weights, tokens_np, need_grads)


def absorbed_logits(cfg, w, toks):
    """Loop version in numpy: token by token, each layer caching only
    [c~_t; rotated k_pe_t] and attending in the absorbed form
    score = (Wk_h^T q_nope_h) . c~_j + q_pe_h . k_pe_j, o_h = Wv_h sum_j p_j c~_j,
    rotating explicit (2i, 2i+1) pairs."""
    d, H, dn, dr, dv, dc, dq = dims(cfg)
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]

    def norm(v, g):
        return v / math.sqrt(float(np.mean(v * v)) + eps) * g

    def rot(vec, t):
        out = vec.copy()
        for i in range(dr // 2):
            ang = t * theta ** (-2.0 * i / dr)
            a, b = vec[2 * i], vec[2 * i + 1]
            out[2 * i], out[2 * i + 1] = a * math.cos(ang) - b * math.sin(ang), b * math.cos(ang) + a * math.sin(ang)
        return out

    Bn, T = toks.shape
    L = cfg["num_hidden_layers"]
    logits = np.zeros((Bn, T, R.VOCAB))
    for b in range(Bn):
        cache = [[] for _ in range(L)]
        for t in range(T):
            x = w["model.embed_tokens.weight"][toks[b, t]].copy()
            for n in range(L):
                p = "model.layers.%d." % n
                a = p + "self_attn."
                h = norm(x, w[p + "input_layernorm.weight"])
                if dq:
                    q = w[a + "q_b_proj.weight"] @ norm(w[a + "q_a_proj.weight"] @ h, w[a + "q_a_layernorm.weight"])
                else:
                    q = w[a + "q_proj.weight"] @ h
                ckv = w[a + "kv_a_proj_with_mqa.weight"] @ h
                cache[n].append((norm(ckv[:dc], w[a + "kv_a_layernorm.weight"]), rot(ckv[dc:], t)))
                kvb = w[a + "kv_b_proj.weight"]
                heads = []
                for hd in range(H):
                    qh = q[hd * (dn + dr):(hd + 1) * (dn + dr)]
                    Wk = kvb[hd * (dn + dv):hd * (dn + dv) + dn]
                    Wv = kvb[hd * (dn + dv) + dn:(hd + 1) * (dn + dv)]
                    q_lat, q_pe = Wk.T @ qh[:dn], rot(qh[dn:], t)
                    sc = np.array([q_lat @ cj + q_pe @ kj for cj, kj in cache[n]]) / math.sqrt(dn + dr)
                    e = np.exp(sc - sc.max())
                    pj = e / e.sum()
                    heads.append(Wv @ sum(pj[j] * cache[n][j][0] for j in range(t + 1)))
                x = x + w[a + "o_proj.weight"] @ np.concatenate(heads)
                h2 = norm(x, w[p + "post_attention_layernorm.weight"])
                g = w[p + "mlp.gate_proj.weight"] @ h2
                u = w[p + "mlp.up_proj.weight"] @ h2
                x = x + w[p + "mlp.down_proj.weight"] @ (g / (1 + np.exp(-g)) * u)
            head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
            logits[b, t] = head @ norm(x, w["model.norm.weight"])
    return logits

# --------------------------------------------------------------------------
# Checks


def build_case(spec, rng):
    cfg = make_config(spec)
    return cfg, harness.random_weights(param_shapes(cfg), rng), harness.random_tokens(rng, spec[-1])


def check_reference(chk, rng, with_fd):
    """The reference against two separately written forms of the same model."""
    for spec in (CONFIGS[1], CONFIGS[4]):
        cfg, weights, tokens = build_case(spec, rng)
        name = "self_" + spec[0]
        logits, loss, grads = reference(cfg, weights, tokens, need_grads=with_fd)
        chk.compare(name + "/absorbed_decode", logits, absorbed_logits(cfg, weights, tokens[:, :-1]), tol=1e-12)
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}
        hf = forward(cfg, p, torch.tensor(tokens[:, :-1], dtype=torch.long), rope=rope_hf).numpy()
        chk.compare(name + "/hf_rope_form", logits, hf, tol=1e-12)
        if with_fd:
            harness.check_fd(chk, name, forward, cfg, weights, tokens, grads, rng)


def main_checks(args):
    chk = harness.Checker(52)
    rng = np.random.default_rng(SEED)
    check_reference(chk, rng, with_fd=False)
    cases = harness.dump_cases(chk, args, CONFIGS, build_case, reference, rng)
    harness.dump_low_precision(chk, args, LOWP_CONFIG, cases[LOWP_CONFIG], ("BF16",), reference)
    harness.eval_cases(chk, args, cases, EVAL_CONFIGS, rng, reference)
    harness.dump_bf16(chk, args, cases, reference)  # --precision bf16 on the same weights
    return chk.summary()


def self_test(_workdir):
    chk = harness.Checker(52)
    check_reference(chk, np.random.default_rng(SEED), with_fd=True)
    return chk.summary()


if __name__ == "__main__":
    sys.exit(harness.main(__doc__, SEED, main_checks, self_test))
