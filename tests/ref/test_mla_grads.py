#!/usr/bin/python3
"""Independent float64 PyTorch reference test for attnlab's MLA design.

MLA is DeepSeek-V2's multi-head latent attention (attention.md 3.2), stored
under Hugging Face DeepseekV2 names.  The reference model below is written
from that spec only (no attnlab C code read): a byte-level Llama-style stack
(embedding, RMSNorm, SwiGLU MLP, optional tied head) whose attention is

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
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reflib as R  # noqa: E402  (safetensors / NPY helpers only)

TOL = 1e-4
SEED = 4321
B = 2
VOCAB = 256

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


def make_config(spec, max_pos=128, eps=1e-5):
    name, d, f, L, H, dn, dr, dv, dc, dq, tied, theta, T = spec
    return {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "hidden_size": d, "intermediate_size": f, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": H,
        "kv_lora_rank": dc, "q_lora_rank": dq if dq > 0 else None,
        "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv,
        "rms_norm_eps": eps, "rope_theta": theta,
        "max_position_embeddings": max_pos, "vocab_size": VOCAB,
        "tie_word_embeddings": bool(tied),
        "attnlab": {"attention": "mla", "score": "softmax"},
    }


def dims(cfg):
    return (cfg["hidden_size"], cfg["num_attention_heads"], cfg["qk_nope_head_dim"],
            cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"],
            cfg["q_lora_rank"] or 0)


def param_shapes(cfg):
    """Ordered {HF name: shape} of every tensor of the checkpoint."""
    d, H, dn, dr, dv, dc, dq = dims(cfg)
    f = cfg["intermediate_size"]
    s = {"model.embed_tokens.weight": (VOCAB, d)}
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        a = p + "self_attn."
        s[p + "input_layernorm.weight"] = (d,)
        if dq:
            s[a + "q_a_proj.weight"] = (dq, d)
            s[a + "q_a_layernorm.weight"] = (dq,)
            s[a + "q_b_proj.weight"] = (H * (dn + dr), dq)
        else:
            s[a + "q_proj.weight"] = (H * (dn + dr), d)
        s[a + "kv_a_proj_with_mqa.weight"] = (dc + dr, d)
        s[a + "kv_a_layernorm.weight"] = (dc,)
        s[a + "kv_b_proj.weight"] = (H * (dn + dv), dc)
        s[a + "o_proj.weight"] = (d, H * dv)
        s[p + "post_attention_layernorm.weight"] = (d,)
        s[p + "mlp.gate_proj.weight"] = (f, d)
        s[p + "mlp.up_proj.weight"] = (f, d)
        s[p + "mlp.down_proj.weight"] = (d, f)
    s["model.norm.weight"] = (d,)
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = (VOCAB, d)
    return s


def random_weights(cfg, rng):
    """float32-representable random weights (float64 arrays): gains near 1."""
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
# Reference model (float64, torch autograd)


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


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
        q = rms_norm(h @ p[a + "q_a_proj.weight"].T, p[a + "q_a_layernorm.weight"], eps)
        q = q @ p[a + "q_b_proj.weight"].T
    else:
        q = h @ p[a + "q_proj.weight"].T
    q = q.view(Bn, T, H, dn + dr)
    q_nope, q_pe = q[..., :dn], rope(q[..., dn:], theta)
    ckv = h @ p[a + "kv_a_proj_with_mqa.weight"].T
    c, k_pe = ckv[..., :dc], ckv[..., dc:]
    k_pe = rope(k_pe.reshape(Bn, T, 1, dr), theta)
    kv = (rms_norm(c, p[a + "kv_a_layernorm.weight"], eps) @ p[a + "kv_b_proj.weight"].T)
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
    eps = cfg["rms_norm_eps"]
    x = p["model.embed_tokens.weight"][tokens]
    for n in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % n
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        x = x + mla_attention(cfg, p, pre + "self_attn.", h, rope)
        h2 = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = h2 @ p[pre + "mlp.gate_proj.weight"].T
        u = h2 @ p[pre + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.T


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def reference(cfg, weights, tokens_np, need_grads=True):
    """(logits, loss, {name: grad}) as float64 numpy; tokens [B, T+1]."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=need_grads) for k, v in weights.items()}
    tok = torch.tensor(np.asarray(tokens_np), dtype=torch.long)
    logits = forward(cfg, p, tok[:, :-1])
    loss = loss_fn(logits, tok[:, 1:])
    grads = {}
    if need_grads:
        loss.backward()
        grads = {k: t.grad.numpy().copy() for k, t in p.items()}
    return logits.detach().numpy(), float(loss.detach()), grads


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
    logits = np.zeros((Bn, T, VOCAB))
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


class Checker:
    def __init__(self):
        self.failures = 0
        self.count = 0

    def fail(self, name, msg):
        self.count += 1
        self.failures += 1
        print("FAIL %-52s %s" % (name, msg), flush=True)

    def ok(self, name, msg):
        self.count += 1
        print("PASS %-52s %s" % (name, msg), flush=True)

    def compare(self, name, got, ref, tol=TOL):
        got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        if got.shape != ref.shape:
            return self.fail(name, "shape %s, expected %s" % (list(got.shape), list(ref.shape)))
        if not np.all(np.isfinite(got)):
            return self.fail(name, "non-finite values")
        scale = np.max(np.abs(ref)) if ref.size else 0.0
        diff = np.max(np.abs(got - ref)) if ref.size else 0.0
        rel = diff / scale if scale > 0 else diff
        if rel <= tol:
            self.ok(name, "max_rel_err=%.3e" % rel)
        else:
            self.fail(name, "max_rel_err=%.3e > %.0e" % (rel, tol))

    def summary(self):
        print("%d checks, %d failed" % (self.count, self.failures))
        return 0 if self.failures == 0 else 1


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
    cfg = make_config(spec)
    weights = random_weights(cfg, rng)
    tokens = rng.integers(0, 256, size=(B, spec[-1] + 1))
    tokens[0, 0], tokens[1, -1] = 0, 255
    return cfg, weights, tokens


def write_model_dir(path, cfg, weights, dtype):
    import json
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    R.write_safetensors(os.path.join(path, "model.safetensors"), weights, dtype)


def run_dump(chk, exe, workdir, tag, cfg, weights, tokens, dtype, ref, grads):
    mdir = os.path.join(workdir, tag)
    write_model_dir(mdir, cfg, weights, dtype)
    tok_path, out_path = os.path.join(mdir, "tokens.npy"), os.path.join(mdir, "out.safetensors")
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
    data_path, out_path = os.path.join(mdir, "data.bin"), os.path.join(mdir, "eval_logits.npy")
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


def check_reference(chk, rng, with_fd):
    """The reference against two separately written forms of the same model."""
    for spec in (CONFIGS[1], CONFIGS[4]):
        cfg, weights, tokens = build_case(spec, rng)
        name = "self_" + spec[0]
        logits, loss, grads = reference(cfg, weights, tokens, need_grads=with_fd)
        chk.compare(name + "/absorbed_decode", logits, absorbed_logits(cfg, weights, tokens[:, :-1]), tol=1e-12)
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}
        tok = torch.tensor(tokens, dtype=torch.long)
        hf = forward(cfg, p, tok[:, :-1], rope=rope_hf).numpy()
        chk.compare(name + "/hf_rope_form", logits, hf, tol=1e-12)
        if not with_fd:
            continue

        def loss_at(k, delta):
            q = dict(p)
            q[k] = p[k] + delta
            return float(loss_fn(forward(cfg, q, tok[:, :-1]), tok[:, 1:]))

        eps = 1e-5
        for k, g in grads.items():
            u = rng.standard_normal(g.shape)
            fd = (loss_at(k, torch.tensor(eps * u)) - loss_at(k, torch.tensor(-eps * u))) / (2 * eps)
            chk.compare("%s/fd/%s" % (name, k), np.array([fd]), np.array([np.sum(g * u)]), tol=1e-6)


def main_checks(args):
    for path, what in ((args.exe, "--exe"), (args.attnlab, "--attnlab")):
        if not (path and os.path.isfile(path) and os.access(path, os.X_OK)):
            print("error: %s %r is not an executable file" % (what, path))
            return 2
    os.makedirs(args.workdir, exist_ok=True)
    chk = Checker()
    rng = np.random.default_rng(SEED)
    check_reference(chk, rng, with_fd=False)
    cases = {}
    for spec in CONFIGS:
        cfg, weights, tokens = build_case(spec, rng)
        cases[spec[0]] = (cfg, weights, tokens)
        run_dump(chk, args.exe, args.workdir, spec[0], cfg, weights, tokens, "F32",
                 reference(cfg, weights, tokens), True)
    cfg, weights, tokens = cases[LOWP_CONFIG]
    rounded = {k: R.round_to_dtype(v, "BF16") for k, v in weights.items()}
    run_dump(chk, args.exe, args.workdir, LOWP_CONFIG + "_bf16", cfg, weights, tokens, "BF16",
             reference(cfg, rounded, tokens, need_grads=False), False)
    ok, msg = run([args.attnlab, "eval", "--help"], timeout=30)
    if not ok:
        first = msg.strip().splitlines()[0] if msg.strip() else "no output"
        print("SKIP eval: `attnlab eval --help` failed (%s)" % first)
    else:
        for name, T in EVAL_CONFIGS:
            cfg, weights, _ = cases[name]
            run_eval(chk, args.attnlab, args.workdir, "eval_" + name, cfg, weights, T, rng)
    return chk.summary()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", help="path to al_testdump")
    ap.add_argument("--attnlab", help="path to the attnlab CLI")
    ap.add_argument("--workdir", help="directory for temporary files")
    ap.add_argument("--self-test", action="store_true",
                    help="validate the reference only (no C binaries needed)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    if args.self_test:
        chk = Checker()
        check_reference(chk, np.random.default_rng(SEED), with_fd=True)
        return chk.summary()
    if not (args.exe and args.attnlab and args.workdir):
        ap.print_usage()
        print("error: --exe, --attnlab and --workdir are required (or use --self-test)")
        return 2
    return main_checks(args)


if __name__ == "__main__":
    sys.exit(main())
