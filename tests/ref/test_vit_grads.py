#!/usr/bin/python3
"""Independent float64 PyTorch reference test of attnlab's vision transformer.

The model, as docs/vision.md and attention.md 2-3 define it, written here from
that text only (no attnlab C code read):

    patches  a Conv2d of kernel = stride = p over images [B, C, S, S] with
             weight vit.patch_embed.weight viewed as [d, C, p, p] and bias
             vit.patch_embed.bias; P = (S/p)^2 patches in raster order
    x0       [vit.cls_token; patch embeddings] + vit.pos_embed   [B, 1+P, d]
    blocks   L x [RMSNorm -> attention (no mask, no RoPE) -> + residual
                  -> RMSNorm -> SwiGLU MLP -> + residual]
    head     RMSNorm (model.norm) of the CLS row -> classifier.weight x + bias
    loss     mean cross-entropy over the images

Attention designs (HF Llama / DeepseekV2 / attnlab LRKV tensor names):
MHA/GQA/MQA (q/k/v/o_proj, head h reads KV head h // (H/G)); MLA (q_proj or
q_a_proj + q_a_layernorm + q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm,
kv_b_proj, o_proj; the rope key part is shared by all heads and, without
RoPE, not rotated); LRKV (k_h = W_Ks x + B_K[h] U_K[h] x, likewise v).
Score functions on s = q.k / sqrt(d_qk): softmax; poly c s^p with c =
poly_scale or "auto" = 1/sqrt(N); relu(s) / N; sigmoid(s - log N); N = the
config's score_n, absent = the number of patches P.

What it checks:
1. `al_testdump VIT_DIR IMAGES.npy LABELS.npy OUT.safetensors` on tiny random
   ViTs (one or two channels, several patch sizes, every score function, MHA,
   GQA, MQA, MLA with and without query compression, LRKV, and the
   Fashion-MNIST geometry 28 x 28 / p = 2 with poly x^3 "auto" = 1/14):
   logits, loss and every parameter gradient against float64 autograd,
   relative error max|c - ref| / max|ref| <= 1e-4.
2. `attnlab eval --model DIR --images DIR --json` on small IDX test files
   (gzip): loss and accuracy against the reference with the config's pixel
   standardisation (x / 255 - image_mean) / image_std.
3. The reference itself, every run: the conv2d patch embedding against a
   loop over patches and the vectorised attention against a per-query loop;
   `--self-test` adds central finite differences and needs no C binary.

Exit status: 0 if every check passes, 1 if any fails, 2 on usage errors.
"""
import argparse
import gzip
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reflib as R  # noqa: E402
import harness  # noqa: E402  (its bf16 bar: harness.bf16_tol)

TOL = 1e-4
SEED = 2024
EPS = 1e-5

# name, attention, d, f, L, H, G, dh, S, p, C, K, B, score block, extra
CASES = [
    ("mha_softmax", "mha", 16, 40, 2, 2, 2, 8, 8, 2, 1, 10, 3, {"score": "softmax"}, {}),
    ("mha_poly3_auto", "mha", 16, 40, 2, 2, 2, 8, 8, 2, 1, 10, 3,
     {"score": "poly", "poly_power": 3, "poly_scale": "auto"}, {}),
    ("mha_relu", "mha", 24, 48, 2, 3, 3, 8, 6, 3, 2, 5, 2, {"score": "relu"}, {}),
    ("mha_sigmoid", "mha", 16, 32, 2, 4, 4, 4, 8, 4, 1, 10, 3, {"score": "sigmoid", "score_n": 7}, {}),
    ("gqa_softmax", "gqa", 24, 40, 2, 4, 2, 8, 8, 2, 2, 10, 2, {"score": "softmax"}, {}),
    ("gqa_poly2_c", "gqa", 24, 40, 2, 4, 2, 8, 8, 2, 1, 10, 2,
     {"score": "poly", "poly_power": 2, "poly_scale": 0.3}, {}),
    ("mqa_sigmoid", "mqa", 16, 40, 2, 4, 1, 8, 6, 2, 1, 3, 3, {"score": "sigmoid"}, {}),
    ("mla_softmax", "mla", 24, 40, 2, 3, 3, 0, 8, 2, 1, 10, 2, {"score": "softmax"},
     {"kv_lora_rank": 8, "q_lora_rank": 0, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6}),
    ("mla_qlora_poly3_auto", "mla", 24, 40, 2, 2, 2, 0, 8, 2, 1, 10, 2,
     {"score": "poly", "poly_power": 3, "poly_scale": "auto"},
     {"kv_lora_rank": 6, "q_lora_rank": 10, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 8}),
    ("lrkv_softmax", "lrkv", 16, 40, 2, 2, 2, 8, 8, 2, 1, 10, 2, {"score": "softmax", "lrkv_rank": 2}, {}),
    ("lrkv_poly3_auto", "lrkv", 16, 40, 2, 2, 2, 8, 8, 4, 1, 10, 3,
     {"score": "poly", "poly_power": 3, "poly_scale": "auto", "lrkv_rank": 4}, {}),
    # Fashion-MNIST geometry: 196 patches, so poly "auto" is (1/14) x^3
    ("fmnist_poly3_auto", "mha", 16, 24, 1, 2, 2, 8, 28, 2, 1, 10, 2,
     {"score": "poly", "poly_power": 3, "poly_scale": "auto"}, {}),
    ("fmnist_softmax", "mha", 16, 24, 1, 2, 2, 8, 28, 2, 1, 10, 2, {"score": "softmax"}, {}),
]
EVAL_CASES = ["mha_softmax", "mla_qlora_poly3_auto"]

# --------------------------------------------------------------------------
# Checks


def Checker():
    """One PASS/FAIL line per check and a closing summary (harness's)."""
    return harness.Checker(44)


def run(cmd, timeout=300):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        return False, "exit %d: %s" % (r.returncode, out.strip()[-1500:])
    return True, out

# --------------------------------------------------------------------------
# Configuration and weights


def make_config(case):
    name, attn, d, f, L, H, G, dh, S, p, C, K, _, score, extra = case
    cfg = {
        "architectures": ["AttnlabViTForImageClassification"], "model_type": "attnlab_vit",
        "hidden_size": d, "intermediate_size": f, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": G,
        "image_size": S, "patch_size": p, "num_channels": C, "num_labels": K,
        "image_mean": 0.25, "image_std": 0.375, "rms_norm_eps": EPS,
        "attnlab": dict({"task": "vision", "attention": attn}, **score),
    }
    if attn == "mla":
        cfg.update(extra)
        if not extra["q_lora_rank"]:
            cfg["q_lora_rank"] = None
    else:
        cfg["head_dim"] = dh
    return cfg


def n_patches(cfg):
    return (cfg["image_size"] // cfg["patch_size"]) ** 2


def attn_shapes(cfg):
    """{name relative to self_attn.: shape} of the design."""
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    a = cfg["attnlab"]["attention"]
    if a == "mla":
        dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        dc, dq = cfg["kv_lora_rank"], cfg["q_lora_rank"] or 0
        s = {}
        if dq:
            s.update({"q_a_proj.weight": (dq, d), "q_a_layernorm.weight": (dq,),
                      "q_b_proj.weight": (H * (dn + dr), dq)})
        else:
            s["q_proj.weight"] = (H * (dn + dr), d)
        s.update({"kv_a_proj_with_mqa.weight": (dc + dr, d), "kv_a_layernorm.weight": (dc,),
                  "kv_b_proj.weight": (H * (dn + dv), dc), "o_proj.weight": (d, H * dv)})
        return s
    dh, G = cfg["head_dim"], cfg["num_key_value_heads"]
    if a == "lrkv":
        r = cfg["attnlab"]["lrkv_rank"]
        return {"q_proj.weight": (H * dh, d), "k_shared_proj.weight": (dh, d), "v_shared_proj.weight": (dh, d),
                "k_down_proj.weight": (H * r, d), "v_down_proj.weight": (H * r, d),
                "k_up_proj.weight": (H * dh, r), "v_up_proj.weight": (H * dh, r), "o_proj.weight": (d, H * dh)}
    return {"q_proj.weight": (H * dh, d), "k_proj.weight": (G * dh, d), "v_proj.weight": (G * dh, d),
            "o_proj.weight": (d, H * dh)}


def param_shapes(cfg):
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    C, p, K = cfg["num_channels"], cfg["patch_size"], cfg["num_labels"]
    s = {"vit.patch_embed.weight": (d, C * p * p), "vit.patch_embed.bias": (d,),
         "vit.cls_token": (d,), "vit.pos_embed": (1 + n_patches(cfg), d)}
    for n in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % n
        s[pre + "input_layernorm.weight"] = (d,)
        for k, v in attn_shapes(cfg).items():
            s[pre + "self_attn." + k] = v
        s[pre + "post_attention_layernorm.weight"] = (d,)
        s[pre + "mlp.gate_proj.weight"] = (f, d)
        s[pre + "mlp.up_proj.weight"] = (f, d)
        s[pre + "mlp.down_proj.weight"] = (d, f)
    s["model.norm.weight"] = (d,)
    s["classifier.weight"] = (K, d)
    s["classifier.bias"] = (K,)
    return s


def random_weights(cfg, rng):
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.startswith("vit.") or name.startswith("classifier."):
            w = 0.3 * rng.standard_normal(shape)
        elif "mlp" in name:
            w = 0.15 * rng.standard_normal(shape)
        else:
            w = 0.25 * rng.standard_normal(shape)
        out[name] = w.astype(np.float32).astype(np.float64)
    return out

# --------------------------------------------------------------------------
# Reference model (float64, autograd)


def rms_norm(x, w, eps=EPS):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def score_weights(cfg, s):
    """Attention weights of scaled scores s [..., T, T] (no mask)."""
    a = cfg["attnlab"]
    kind = a.get("score", "softmax")
    N = a.get("score_n", n_patches(cfg))
    if kind == "softmax":
        return torch.softmax(s, dim=-1)
    if kind == "poly":
        c = a.get("poly_scale", "auto")
        c = 1.0 / math.sqrt(N) if c == "auto" else c
        return c * s ** a.get("poly_power", 3)
    if kind == "relu":
        return torch.relu(s) / N
    if kind == "sigmoid":
        return torch.sigmoid(s - math.log(N))
    raise ValueError(kind)


def heads_qkv(cfg, p, a, h):
    """Per-head q [B,H,T,dk], k [B,H,T,dk], v [B,H,T,dv] of one layer's design."""
    Bn, T, _ = h.shape
    H = cfg["num_attention_heads"]
    kind = cfg["attnlab"]["attention"]
    if kind == "mla":
        dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        dc = cfg["kv_lora_rank"]
        if cfg["q_lora_rank"]:
            q = rms_norm(h @ p[a + "q_a_proj.weight"].T, p[a + "q_a_layernorm.weight"]) @ p[a + "q_b_proj.weight"].T
        else:
            q = h @ p[a + "q_proj.weight"].T
        q = q.view(Bn, T, H, dn + dr)
        ckv = h @ p[a + "kv_a_proj_with_mqa.weight"].T
        c, kpe = ckv[..., :dc], ckv[..., dc:]
        kv = (rms_norm(c, p[a + "kv_a_layernorm.weight"]) @ p[a + "kv_b_proj.weight"].T).view(Bn, T, H, dn + dv)
        k = torch.cat([kv[..., :dn], kpe[:, :, None, :].expand(Bn, T, H, dr)], dim=-1)
        v = kv[..., dn:]
    elif kind == "lrkv":
        dh, r = cfg["head_dim"], cfg["attnlab"]["lrkv_rank"]
        q = (h @ p[a + "q_proj.weight"].T).view(Bn, T, H, dh)
        ks, vs = h @ p[a + "k_shared_proj.weight"].T, h @ p[a + "v_shared_proj.weight"].T
        rk = (h @ p[a + "k_down_proj.weight"].T).view(Bn, T, H, r)
        rv = (h @ p[a + "v_down_proj.weight"].T).view(Bn, T, H, r)
        BK = p[a + "k_up_proj.weight"].view(H, dh, r)
        BV = p[a + "v_up_proj.weight"].view(H, dh, r)
        k = ks[:, :, None, :] + torch.einsum("hdr,bthr->bthd", BK, rk)
        v = vs[:, :, None, :] + torch.einsum("hdr,bthr->bthd", BV, rv)
    else:
        dh, G = cfg["head_dim"], cfg["num_key_value_heads"]
        q = (h @ p[a + "q_proj.weight"].T).view(Bn, T, H, dh)
        k = (h @ p[a + "k_proj.weight"].T).view(Bn, T, G, dh).repeat_interleave(H // G, dim=2)
        v = (h @ p[a + "v_proj.weight"].T).view(Bn, T, G, dh).repeat_interleave(H // G, dim=2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def attention(cfg, p, a, h):
    q, k, v = heads_qkv(cfg, p, a, h)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    o = score_weights(cfg, s) @ v  # [B, H, T, dv]
    Bn, _, T, _ = o.shape
    return o.transpose(1, 2).reshape(Bn, T, -1) @ p[a + "o_proj.weight"].T


def embed(cfg, p, images):
    d, C, ps = cfg["hidden_size"], cfg["num_channels"], cfg["patch_size"]
    w = p["vit.patch_embed.weight"].view(d, C, ps, ps)
    e = F.conv2d(images, w, p["vit.patch_embed.bias"], stride=ps)  # [B, d, g, g]
    e = e.flatten(2).transpose(1, 2)  # [B, P, d], raster order
    cls = p["vit.cls_token"].expand(images.shape[0], 1, d)
    return torch.cat([cls, e], dim=1) + p["vit.pos_embed"]


def embed_as_product(cfg, p, images):
    """embed() as attnlab computes it: the patches (channel, row, column
    order, raster order of patches) times the patch matrix, so that
    harness.bf16_products rounds its operands as attnlab's BF16 mode does."""
    d, ps = cfg["hidden_size"], cfg["patch_size"]
    patches = F.unfold(images, ps, stride=ps).transpose(1, 2)  # [B, P, C ps ps]
    e = patches @ p["vit.patch_embed.weight"].reshape(d, -1).T + p["vit.patch_embed.bias"]
    cls = p["vit.cls_token"].expand(images.shape[0], 1, d)
    return torch.cat([cls, e], dim=1) + p["vit.pos_embed"]


def bf16_emulated(cfg, w, images, labels, attention):
    """The reference under harness.bf16_products (attention products too
    when `attention`), the patch embedding as a product too: the float64
    emulation of --precision bf16."""
    global embed
    exact_embed, embed = embed, embed_as_product
    try:
        with harness.bf16_products(attention):
            return reference(cfg, w, images, labels)
    finally:
        embed = exact_embed


def forward(cfg, p, images, attn=attention):
    x = embed(cfg, p, images)
    for n in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % n
        x = x + attn(cfg, p, pre + "self_attn.", rms_norm(x, p[pre + "input_layernorm.weight"]))
        h2 = rms_norm(x, p[pre + "post_attention_layernorm.weight"])
        g, u = h2 @ p[pre + "mlp.gate_proj.weight"].T, h2 @ p[pre + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    return rms_norm(x[:, 0], p["model.norm.weight"]) @ p["classifier.weight"].T + p["classifier.bias"]


def reference(cfg, weights, images, labels, need_grads=True):
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=need_grads) for k, v in weights.items()}
    logits = forward(cfg, p, torch.tensor(images, dtype=torch.float64))
    loss = F.cross_entropy(logits, torch.tensor(labels, dtype=torch.long))
    grads = {}
    if need_grads:
        loss.backward()
        grads = {k: t.grad.numpy().copy() for k, t in p.items()}
    return logits.detach().numpy(), float(loss.detach()), grads

# --------------------------------------------------------------------------
# Loop forms of the reference, to check the vectorised one


def naive_embed(cfg, w, images):
    d, C, ps = cfg["hidden_size"], cfg["num_channels"], cfg["patch_size"]
    g = cfg["image_size"] // ps
    W = w["vit.patch_embed.weight"]
    out = np.zeros((images.shape[0], 1 + g * g, d))
    for b in range(images.shape[0]):
        out[b, 0] = w["vit.cls_token"]
        for gy in range(g):
            for gx in range(g):
                vec = [images[b, c, gy * ps + i, gx * ps + j] for c in range(C) for i in range(ps) for j in range(ps)]
                out[b, 1 + gy * g + gx] = W @ np.array(vec) + w["vit.patch_embed.bias"]
    return out + w["vit.pos_embed"]


def naive_attention(cfg, p, a, h):
    """Per image, head and query: sum_j weight(s_ij) v_j with every key visible."""
    q, k, v = heads_qkv(cfg, p, a, h)
    Bn, H, T, dk = q.shape
    o = torch.zeros(Bn, H, T, v.shape[-1], dtype=torch.float64)
    for b in range(Bn):
        for hh in range(H):
            for i in range(T):
                s = torch.stack([q[b, hh, i] @ k[b, hh, j] for j in range(T)]) / math.sqrt(dk)
                o[b, hh, i] = score_weights(cfg, s[None, :])[0] @ v[b, hh]
    return o.transpose(1, 2).reshape(Bn, T, -1) @ p[a + "o_proj.weight"].T


def check_reference(chk, rng, with_fd):
    for case in (CASES[0], CASES[2], CASES[8], CASES[10]):
        cfg, w, images, labels = build_case(case, rng)
        name = "self/" + case[0]
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in w.items()}
        x = torch.tensor(images, dtype=torch.float64)
        chk.compare(name + "/embed_vs_loop", embed(cfg, p, x).numpy(), naive_embed(cfg, w, images), tol=1e-12)
        chk.compare(name + "/attention_vs_loop", forward(cfg, p, x).numpy(),
                    forward(cfg, p, x, attn=naive_attention).numpy(), tol=1e-12)
        if not with_fd:
            continue
        _, _, grads = reference(cfg, w, images, labels)
        lab = torch.tensor(labels, dtype=torch.long)

        def loss_at(key, delta):
            q = dict(p)
            q[key] = p[key] + delta
            return float(F.cross_entropy(forward(cfg, q, x), lab))

        h = 1e-6
        for key, g in grads.items():
            u = rng.standard_normal(g.shape)
            fd = (loss_at(key, torch.tensor(h * u)) - loss_at(key, torch.tensor(-h * u))) / (2 * h)
            chk.compare("%s/fd/%s" % (name, key), np.array([fd]), np.array([np.sum(g * u)]), tol=1e-6)

# --------------------------------------------------------------------------
# Cases against the C side


def build_case(case, rng):
    cfg = make_config(case)
    w = random_weights(cfg, rng)
    B, C, S = case[12], cfg["num_channels"], cfg["image_size"]
    images = rng.standard_normal((B, C, S, S)).astype(np.float32).astype(np.float64)
    labels = rng.integers(0, cfg["num_labels"], size=B)
    return cfg, w, images, labels


def expected(ref):
    """al_testdump's names for a reference (logits, loss, grad.<name>)."""
    ref_logits, ref_loss, ref_grads = ref
    expect = {"logits": ref_logits, "loss": np.array([ref_loss])}
    expect.update(("grad." + k, v) for k, v in ref_grads.items())
    return expect


def run_dump(chk, exe, workdir, name, cfg, w, images, labels, precision=None, attention_bf16=False):
    """al_testdump on a ViT checkpoint (products in `precision`, default f32)
    against the reference: TOL, or in bf16 harness.check_bf16."""
    mdir = os.path.join(workdir, name)
    R.write_model_dir(mdir, cfg, w)
    ipath, lpath, opath = (os.path.join(mdir, f) for f in ("images.npy", "labels.npy", "out.safetensors"))
    R.write_npy_f32(ipath, images)
    R.write_npy_f32(lpath, labels.astype(np.float32))
    if os.path.exists(opath):
        os.remove(opath)
    ok, msg = run([exe] + (["--precision", precision] if precision else []) + [mdir, ipath, lpath, opath])
    if not ok:
        return chk.fail(name, "al_testdump failed: " + msg)
    out = R.read_safetensors(opath)
    expect = expected(reference(cfg, w, images, labels))
    if precision:
        emulated = expected(bf16_emulated(cfg, w, images, labels, attention_bf16))
        return harness.check_bf16(chk, name, out, expect, emulated, harness.emulation_tol(attention_bf16))
    extra = sorted(k for k in out if k not in expect)
    if extra:
        chk.fail(name + "/unexpected", "unexpected tensors: " + ", ".join(extra))
    for key, want in expect.items():
        if key not in out:
            chk.fail(name + "/" + key, "missing")
        else:
            chk.compare(name + "/" + key, out[key], want)


def write_idx_gz(path, arr):
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    head = struct.pack(">BBBB", 0, 0, 8, arr.ndim) + b"".join(struct.pack(">I", n) for n in arr.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(head + arr.tobytes())


def run_eval(chk, attnlab, workdir, name, cfg, w, rng):
    """attnlab eval on gzip IDX test files vs the reference on standardised pixels."""
    mdir = os.path.join(workdir, "eval_" + name)
    R.write_model_dir(mdir, cfg, w)
    idir = os.path.join(mdir, "images")
    os.makedirs(idir, exist_ok=True)
    n, C, S = 7, cfg["num_channels"], cfg["image_size"]
    pix = rng.integers(0, 256, size=(n, S, S) if C == 1 else (n, C, S, S))
    labels = rng.integers(0, cfg["num_labels"], size=n)
    write_idx_gz(os.path.join(idir, "t10k-images-idx3-ubyte.gz"), pix)
    write_idx_gz(os.path.join(idir, "t10k-labels-idx1-ubyte.gz"), labels)
    ok, out = run([attnlab, "eval", "--model", mdir, "--images", idir, "--batch", "3", "--json",
                   "--precision", "f32"])
    if not ok:
        return chk.fail("eval/" + name, "attnlab eval failed: " + out)
    try:
        j = json.loads(out)
    except ValueError:
        return chk.fail("eval/" + name, "not JSON: " + out[:200])
    x = (pix.reshape(n, C, S, S).astype(np.float64) / 255.0 - cfg["image_mean"]) / cfg["image_std"]
    logits, loss, _ = reference(cfg, w, x, labels, need_grads=False)
    acc = float(np.mean(np.argmax(logits, axis=1) == labels))
    chk.compare("eval/%s/loss" % name, np.array([j["loss"]]), np.array([loss]))
    correct = int(np.sum(np.argmax(logits, axis=1) == labels))
    if j.get("count") != n or j.get("correct") != correct or abs(j["accuracy"] - acc) > 1e-6:
        chk.fail("eval/%s/accuracy" % name, "got %s of %s images right, expected %d of %d"
                 % (j.get("correct"), j.get("count"), correct, n))
    else:
        chk.ok("eval/%s/accuracy" % name, "%.4f over %d images" % (acc, n))


def main_checks(args):
    for path, what in ((args.exe, "--exe"), (args.attnlab, "--attnlab")):
        if not (path and os.path.isfile(path) and os.access(path, os.X_OK)):
            print("error: %s %r is not an executable file" % (what, path))
            return 2
    os.makedirs(args.workdir, exist_ok=True)
    chk = Checker()
    rng = np.random.default_rng(SEED)
    check_reference(chk, rng, with_fd=False)
    built = {}
    for case in CASES:
        cfg, w, images, labels = build_case(case, rng)
        built[case[0]] = (cfg, w)
        run_dump(chk, args.exe, args.workdir, case[0], cfg, w, images, labels)
        run_dump(chk, args.exe, args.workdir, case[0] + "_bf16prec", cfg, w, images, labels, precision="bf16",
                 attention_bf16=harness.attention_in_bf16(args.attnlab))
    for name in EVAL_CASES:
        cfg, w = built[name]
        run_eval(chk, args.attnlab, args.workdir, name, cfg, w, rng)
    return chk.summary()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", help="path to al_testdump")
    ap.add_argument("--attnlab", help="path to the attnlab CLI")
    ap.add_argument("--workdir", help="directory for temporary files")
    ap.add_argument("--self-test", action="store_true", help="validate the reference only (no C binaries)")
    args = ap.parse_args()
    torch.set_num_threads(2)
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
