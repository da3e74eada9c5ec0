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
Llama's (reflib.py).

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
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reflib as R  # noqa: E402

TOL = 1e-4
SEED = 4321
B = 2

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


class Checker:
    """Collects and prints one line per check."""

    def __init__(self):
        self.failures = 0
        self.count = 0

    def fail(self, name, msg):
        self.count += 1
        self.failures += 1
        print("FAIL %-48s %s" % (name, msg), flush=True)

    def ok(self, name, msg):
        self.count += 1
        print("PASS %-48s %s" % (name, msg), flush=True)

    def compare(self, name, got, ref, tol=TOL):
        got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        if got.shape != ref.shape:
            return self.fail(name, "shape %s, expected %s" % (list(got.shape), list(ref.shape)))
        if not np.all(np.isfinite(got)):
            return self.fail(name, "non-finite values")
        if ref.size == 0:
            return self.ok(name, "empty tensor, shape %s" % list(ref.shape))
        scale = np.max(np.abs(ref))
        diff = np.max(np.abs(got - ref))
        rel = diff / scale if scale > 0 else diff
        line = "max_rel_err=%.3e" % rel
        if rel <= tol:
            self.ok(name, line)
        else:
            self.fail(name, line + " > %.0e" % tol)

    def summary(self):
        print("%d checks, %d failed" % (self.count, self.failures))
        return 0 if self.failures == 0 else 1

# --------------------------------------------------------------------------
# Config and weights


def make_config(d, f, L, H, dh, r, tied, theta, score=None, eps=1e-5):
    cfg = {
        "architectures": ["AttnlabForCausalLM"], "model_type": "attnlab",
        "hidden_size": d, "intermediate_size": f, "num_hidden_layers": L,
        # every head has its own effective key/value map W_Ks + B[h] U[h]
        "num_attention_heads": H, "num_key_value_heads": H, "head_dim": dh,
        "rms_norm_eps": eps, "rope_theta": theta,
        "max_position_embeddings": 128, "vocab_size": R.VOCAB,
        "tie_word_embeddings": bool(tied),
        "attnlab": {"attention": "lrkv", "score": "softmax", "lrkv_rank": r},
    }
    if score:
        cfg["attnlab"].update(score)
    return cfg


def param_shapes(cfg):
    d, f, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    H, r = cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    s = {"model.embed_tokens.weight": (R.VOCAB, d)}
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        s[p + "input_layernorm.weight"] = (d,)
        s[p + "self_attn.q_proj.weight"] = (H * dh, d)
        s[p + "self_attn.k_shared_proj.weight"] = (dh, d)
        s[p + "self_attn.v_shared_proj.weight"] = (dh, d)
        s[p + "self_attn.k_down_proj.weight"] = (H * r, d)
        s[p + "self_attn.v_down_proj.weight"] = (H * r, d)
        s[p + "self_attn.k_up_proj.weight"] = (H * dh, r)
        s[p + "self_attn.v_up_proj.weight"] = (H * dh, r)
        s[p + "self_attn.o_proj.weight"] = (d, H * dh)
        s[p + "post_attention_layernorm.weight"] = (d,)
        s[p + "mlp.gate_proj.weight"] = (f, d)
        s[p + "mlp.up_proj.weight"] = (f, d)
        s[p + "mlp.down_proj.weight"] = (d, f)
    s["model.norm.weight"] = (d,)
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = (R.VOCAB, d)
    return s


def random_weights(cfg, rng):
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif "embed_tokens" in name:
            w = 0.3 * rng.standard_normal(shape)
        elif "mlp" in name:
            w = 0.15 * rng.standard_normal(shape)
        else:
            w = 0.2 * rng.standard_normal(shape)
        out[name] = w.astype(np.float32).astype(np.float64)
    return out

# --------------------------------------------------------------------------
# Reference model (float64 autograd)


def rope(x, T, dim, theta):
    """Rotate-half RoPE over the last axis (size dim) of x [B, T, n, dim]."""
    if dim == 0:
        return x
    cos, sin = R.rope_cos_sin(T, dim, theta)
    return R.apply_rope(x, cos, sin)


def lrkv_attention(cfg, p, pre, h):
    """h [B, T, d] (normed) -> attention output [B, T, d]."""
    dh, H, r = cfg["head_dim"], cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    theta = cfg["rope_theta"]
    Bn, T, _ = h.shape
    a = pre + "self_attn."
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
    eps = cfg["rms_norm_eps"]
    x = p["model.embed_tokens.weight"][tokens]
    for n in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % n
        x = x + attention(cfg, p, pre, R.rms_norm(x, p[pre + "input_layernorm.weight"], eps))
        h2 = R.rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = h2 @ p[pre + "mlp.gate_proj.weight"].T
        u = h2 @ p[pre + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = R.rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.T


def reference(cfg, weights, tokens_np, need_grads=True):
    """(logits, loss, {name: grad}) as float64 numpy; tokens [B, T+1]."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=need_grads) for k, v in weights.items()}
    tok = torch.tensor(np.asarray(tokens_np), dtype=torch.long)
    logits = forward(cfg, p, tok[:, :-1])
    loss = R.loss_fn(logits, tok[:, 1:])
    grads = {}
    if need_grads:
        loss.backward()
        grads = {k: t.grad.numpy().copy() for k, t in p.items()}
    return logits.detach().numpy(), float(loss.detach()), grads

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


def factored_attention(cfg, p, pre, h):
    """Token by token with the cache of 3.3: [RoPE K_s | V_s | RoPE R_K[h] | R_V[h]]."""
    dh, H, r = cfg["head_dim"], cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    theta = cfg["rope_theta"]
    a = pre + "self_attn."
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


def materialised_attention(cfg, p, pre, h):
    """Per-head effective maps W_K[h] = W_Ks + B_K[h] U_K[h] of 3.3, with the
    RoPE of 3.5 applied to each component (so through the split, not on W_K[h] x)."""
    dh, H, r = cfg["head_dim"], cfg["num_attention_heads"], cfg["attnlab"]["lrkv_rank"]
    theta = cfg["rope_theta"]
    a = pre + "self_attn."
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


def run(cmd, timeout=120):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    tail = r.stdout.decode("utf-8", "replace")[-2000:]
    if r.returncode != 0:
        return False, "exit %d: %s" % (r.returncode, tail.strip())
    return True, tail


def build_case(spec, rng):
    name, d, f, L, H, dh, r, tied, theta, T = spec[:10]
    cfg = make_config(d, f, L, H, dh, r, tied, theta, spec[10] if len(spec) > 10 else None)
    weights = random_weights(cfg, rng)
    tokens = rng.integers(0, 256, size=(B, T + 1))
    tokens[0, 0], tokens[1, -1] = 0, 255
    return cfg, weights, tokens


def write_model_dir(path, cfg, weights, dtype):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    R.write_safetensors(os.path.join(path, "model.safetensors"), weights, dtype)


def run_dump(chk, exe, workdir, tag, cfg, weights, tokens, dtype, ref, grads):
    mdir = os.path.join(workdir, tag)
    write_model_dir(mdir, cfg, weights, dtype)
    tok_path = os.path.join(mdir, "tokens.npy")
    out_path = os.path.join(mdir, "out.safetensors")
    R.write_npy_f32(tok_path, tokens.astype(np.float32))
    if os.path.exists(out_path):
        os.remove(out_path)
    ok, msg = run([exe, mdir, tok_path, out_path])
    if not ok:
        return chk.fail(tag, "al_testdump failed: " + msg)
    try:
        out = R.read_safetensors(out_path)
    except (OSError, ValueError, KeyError) as e:
        return chk.fail(tag, "cannot read %s: %s" % (out_path, e))
    ref_logits, ref_loss, ref_grads = ref
    expect = {"logits": ref_logits, "loss": np.array([ref_loss])}
    if grads:
        expect.update(("grad." + k, v) for k, v in ref_grads.items())
        extra = sorted(k for k in out if k.startswith("grad.") and k not in expect)
        if extra:
            chk.fail(tag + "/unexpected", "unexpected tensors: " + ", ".join(extra))
    for key, want in expect.items():
        if key not in out:
            chk.fail(tag + "/" + key, "missing from " + out_path)
        else:
            chk.compare(tag + "/" + key, out[key], want)


def run_eval(chk, attnlab, workdir, tag, cfg, weights, T, rng):
    mdir = os.path.join(workdir, tag)
    write_model_dir(mdir, cfg, weights, "F32")
    data = rng.integers(0, 256, size=3 * T + 7).astype(np.uint8)
    data_path = os.path.join(mdir, "data.bin")
    out_path = os.path.join(mdir, "eval_logits.npy")
    data.tofile(data_path)
    if os.path.exists(out_path):
        os.remove(out_path)
    ok, msg = run([attnlab, "eval", "--model", mdir, "--data", data_path, "--context", str(T),
                   "--logits", out_path])
    if not ok:
        return chk.fail(tag, "attnlab eval failed: " + msg)
    try:
        got = R.read_npy(out_path)
    except (OSError, ValueError) as e:
        return chk.fail(tag, "cannot read %s: %s" % (out_path, e))
    ref_logits, _, _ = reference(cfg, weights, data[None, :T + 1].astype(np.int64), need_grads=False)
    chk.compare(tag + "/logits", got, ref_logits[0])


def main_checks(args):
    for path, what in ((args.exe, "--exe"), (args.attnlab, "--attnlab")):
        if not (path and os.path.isfile(path) and os.access(path, os.X_OK)):
            print("error: %s %r is not an executable file" % (what, path))
            return 2
    os.makedirs(args.workdir, exist_ok=True)
    chk = Checker()
    rng = np.random.default_rng(SEED)
    cases = {}
    for spec in CONFIGS + SCORE_CONFIGS:
        cfg, weights, tokens = build_case(spec, rng)
        cases[spec[0]] = (cfg, weights, tokens)
        ref = reference(cfg, weights, tokens)
        run_dump(chk, args.exe, args.workdir, spec[0], cfg, weights, tokens, "F32", ref, True)

    # the reference against its factored and materialised forms (short T: loops)
    for name in ("r2_tied", "rdh_untied", "r0_untied", "r2_sigmoid"):
        cfg, weights, tokens = cases[name]
        check_reference(chk, "self_" + name, cfg, weights, tokens)

    cfg, weights, tokens = cases[LOWP_CONFIG]
    rounded = {k: R.round_to_dtype(v, "BF16") for k, v in weights.items()}
    ref = reference(cfg, rounded, tokens, need_grads=False)
    run_dump(chk, args.exe, args.workdir, LOWP_CONFIG + "_bf16", cfg, weights, tokens, "BF16", ref, False)

    ok, msg = run([args.attnlab, "eval", "--help"], timeout=30)
    if not ok:
        first = msg.strip().splitlines()[0] if msg.strip() else "no output"
        print("SKIP eval: skipped, `attnlab eval --help` failed (%s)" % first)
    else:
        name, T = EVAL_CONFIG
        cfg, weights, _ = cases[name]
        run_eval(chk, args.attnlab, args.workdir, "eval_" + name, cfg, weights, T, rng)
    return chk.summary()


def self_test():
    """The reference's gradients against float64 central differences."""
    chk = Checker()
    rng = np.random.default_rng(SEED)
    for spec in [("fd_r2", 8, 12, 2, 2, 4, 2, False, 500.0, 5), ("fd_rdh", 8, 10, 2, 3, 4, 4, True, 10000.0, 4),
                 ("fd_poly", 8, 10, 1, 2, 4, 2, False, 500.0, 4,
                  {"score": "poly", "poly_power": 3, "poly_scale": 0.5, "score_n": 16})]:
        cfg, weights, tokens = build_case(spec, rng)
        check_reference(chk, spec[0], cfg, weights, tokens)
        _, _, grads = reference(cfg, weights, tokens)
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}
        tok = torch.tensor(tokens, dtype=torch.long)

        def loss_at(k, delta):
            q = dict(p)
            q[k] = p[k] + delta
            return float(R.loss_fn(forward(cfg, q, tok[:, :-1]), tok[:, 1:]))

        eps = 1e-5
        for k, g in grads.items():
            u = rng.standard_normal(g.shape)
            fd = (loss_at(k, torch.tensor(eps * u)) - loss_at(k, torch.tensor(-eps * u))) / (2 * eps)
            chk.compare("%s/fd/%s" % (spec[0], k), np.array([fd]), np.array([np.sum(g * u)]), tol=1e-6)
    return chk.summary()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", help="path to al_testdump")
    ap.add_argument("--attnlab", help="path to the attnlab CLI")
    ap.add_argument("--workdir", help="directory for temporary files")
    ap.add_argument("--self-test", action="store_true", help="validate the reference only (no C binaries needed)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    if args.self_test:
        return self_test()
    if not (args.exe and args.attnlab and args.workdir):
        ap.print_usage()
        print("error: --exe, --attnlab and --workdir are required (or use --self-test)")
        return 2
    return main_checks(args)


if __name__ == "__main__":
    sys.exit(main())
