#!/usr/bin/python3
"""Independent float64 reference for `attnlab convert` (docs/convert.md).

A tiny random attnlab MHA model (and a GQA one) is written here as
safetensors; `attnlab convert` turns it into GQA, MQA, LRKV and MLA; this
test recomputes every conversion in float64 from the source's weights,
following docs/convert.md only (no attnlab C code read), and compares:

* the calibration activations: the source runs in float64 over the same
  windows of the same text (the first 1 - val_fraction of the file, windows
  of T consecutive tokens), giving each layer's normed input x and its second
  moment C = E[x x^T];
* weights where the conversion makes them unique: GQA/MQA's mean-pooled key
  and value heads; LRKV's shared maps, its key blocks B_K (2 x 2 identity
  blocks onto the same-frequency pairs) and U_K; MLA's reordered q_proj, its
  shared k_pe (the mean of the heads' rope rows), o_proj; every tensor
  outside attention copied;
* products where an eigen-decomposition leaves signs or rotations free:
  LRKV's B_V[h] U_V[h] and MLA's kv_b_proj W_dkv against the activation-
  weighted rank-r fit P P^T M (P: top r eigenvectors of M C M^T); MLA's
  latent rows Q = P^T M up to sign; orthonormal B_V, kv_b_proj columns;
* the calibration-dependent choices by their defining property: MLA's RoPE
  stride is the one whose pairs carry the largest sum of mean ||q_h,j||
  ||k_h,j|| over the first 2048 calibration tokens (recomputed here), and
  rope_theta = theta^(s d_r / d_h); the latent's norm gain is the least-
  squares g_i of g_i c_i / rms(c) ~ c_i on the calibration latents, both of
  the written W_dkv and of the reference Q (sign-free);
* convert.json: each head's relative Frobenius key and value map errors,
  each layer's attention output error on the calibration inputs, the held-
  out losses of source and converted model (float64 forwards over the
  held-out windows), the KV cache figures;
* the converted model's logits (al_testdump) against a float64 forward of
  its written weights (the MLA and LRKV reference attentions of
  test_mla_grads.py and test_lrkv_grads.py, a GQA one here).

--self-test checks the reference's own claims without binaries: the
weighted fit is exact at full rank and never worse than the plain SVD on the
activations; LRKV's key blocks commute with RoPE (B_K RoPE_r = RoPE_dh B_K);
MLA's stride table reproduces the source frequencies.

Exit status: 0 if every check passes, 1 if any fails, 2 on usage errors.
"""
import json
import math
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (checks, CLI, the Llama-style stack)
import reflib as R  # noqa: E402  (safetensors, RoPE, RMSNorm)
import test_lrkv_grads as LRKV  # noqa: E402  (reference LRKV attention)
import test_mla_grads as MLA  # noqa: E402  (reference MLA attention)

SEED = 1616
VAL_FRACTION = 0.05     # training's default split (docs/convert.md: the text is split as training splits it)
CRIT_TOKENS = 2048      # the stride criterion reads the first 2048 calibration tokens
T = 16
CALIB_TOKENS, HELDOUT_TOKENS = 1024, 256
# product / fit tolerance: the C side's activations are float32, so its C = E[x x^T] and the eigenvectors
# differ from float64 by ~1e-7 / (relative eigengap)
FIT_TOL = 1e-4
ERR_TOL = 1e-4          # |got - ref| <= ERR_TOL (|ref| + 1e-2) for convert.json's errors and losses

# source: name, d, f, L, H, G, dh, theta
SOURCES = [("mha", 48, 64, 2, 4, 4, 12, 10000.0), ("gqa", 40, 56, 2, 4, 2, 10, 500.0)]
# (source, target, flags)
CONVERSIONS = [
    ("mha", "gqa", ["--kv-heads", "2"]),
    ("mha", "mqa", []),
    ("mha", "lrkv", ["--lrkv-rank", "12"]),                       # r = d_h: exact
    ("mha", "lrkv", ["--lrkv-rank", "6"]),                        # d_h / r = 2: pairs 0, 2, 4
    ("mha", "lrkv", ["--lrkv-rank", "8"]),                        # d_h / r = 1.5: nearest pairs
    ("mha", "mla", ["--qk-rope-dim", "4", "--kv-lora-rank", "20"]),
    ("mha", "mla", ["--qk-rope-dim", "6", "--kv-lora-rank", "48"]),  # d_c = hidden: the cap
    ("gqa", "mqa", []),
    ("gqa", "lrkv", ["--lrkv-rank", "4"]),
    ("gqa", "mla", ["--qk-rope-dim", "4", "--kv-lora-rank", "16"]),
]

# --------------------------------------------------------------------------
# The source models and their float64 forwards


def head_dim(cfg):
    """d_h of a config (head_dim, else hidden / heads)."""
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def gqa_attention(cfg, p, a, h):
    """Llama attention (MHA/GQA/MQA): rotate-half RoPE over d_h, query head
    i reads KV head i // (H/G), causal softmax, o_proj."""
    H, G, dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    Bn, Tn, _ = h.shape
    cos, sin = R.rope_cos_sin(Tn, dh, cfg["rope_theta"])
    q = R.apply_rope((h @ p[a + "q_proj.weight"].T).view(Bn, Tn, H, dh), cos, sin)
    k = R.apply_rope((h @ p[a + "k_proj.weight"].T).view(Bn, Tn, G, dh), cos, sin)
    v = (h @ p[a + "v_proj.weight"].T).view(Bn, Tn, G, dh)
    k, v = k.repeat_interleave(H // G, dim=2), v.repeat_interleave(H // G, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
    s = s.masked_fill(~torch.ones(Tn, Tn, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(Bn, Tn, H * dh) @ p[a + "o_proj.weight"].T


def attention_of(cfg):
    """The reference attention of a config's design."""
    kind = cfg["attnlab"]["attention"]
    if kind == "mla":
        return lambda c, p, a, h: MLA.mla_attention(c, p, a, h, MLA.rope_interleaved)
    if kind == "lrkv":
        return LRKV.lrkv_attention
    return gqa_attention


def tensors(weights):
    """{name: float64 numpy} -> {name: float64 torch}"""
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}


def forward(cfg, weights, tokens, record=None):
    """Logits [B, T, V] of integer tokens [B, T]; with `record` (a list), each
    layer's normed attention input is appended to it."""
    attn = attention_of(cfg)

    def recorded(c, p, a, h):
        if record is not None:
            record.append(h.detach().numpy().copy())
        return attn(c, p, a, h)
    with torch.no_grad():
        return harness.stack_forward(cfg, tensors(weights), torch.as_tensor(tokens, dtype=torch.long), recorded)


def make_source(spec, rng, workdir):
    """A random attnlab MHA/GQA model directory (F32): (path, config, weights)."""
    name, d, f, L, H, G, dh, theta = spec
    kind = R.attention_kind(H, G)
    cfg = harness.stack_config("LlamaForCausalLM", "llama", d, f, L, H, G, False, theta,
                               {"attention": kind, "score": "softmax"}, head_dim=dh)
    shapes = harness.stack_shapes(cfg, {"q_proj.weight": (H * dh, d), "k_proj.weight": (G * dh, d),
                                        "v_proj.weight": (G * dh, d), "o_proj.weight": (d, H * dh)})
    weights = harness.random_weights(shapes, rng)
    path = os.path.join(workdir, "src_" + name)
    R.write_model_dir(path, cfg, weights, "F32")
    return path, cfg, weights


def windows(ids, n_pred):
    """Predictions 0..n_pred-1 of ids in consecutive windows of T (the last
    one shorter): [(inputs, targets)]."""
    return [(ids[s:min(s + T, n_pred)], ids[s + 1:min(s + T, n_pred) + 1]) for s in range(0, n_pred, T)]


def mean_loss(cfg, weights, ids):
    """Mean next-token loss over ids in consecutive windows of T."""
    total, count = 0.0, 0
    for inp, tgt in windows(ids, len(ids) - 1):
        logits = forward(cfg, weights, inp[None, :])[0]
        total += float(torch.nn.functional.cross_entropy(logits, torch.as_tensor(tgt, dtype=torch.long),
                                                         reduction="sum"))
        count += len(tgt)
    return total / count


class Calibration:
    """The text's split and the source's activations on its calibration part."""

    def __init__(self, data, cfg, weights):
        n_train = len(data) - int(len(data) * VAL_FRACTION)
        calib = data[:min(n_train, CALIB_TOKENS + 1)].astype(np.int64)
        self.heldout = data[n_train:n_train + HELDOUT_TOKENS + 1].astype(np.int64)
        n_win = (len(calib) - 1) // T
        self.x = []   # per layer [n, d]: the normed attention input of every calibration token
        rec = []
        forward(cfg, weights, calib[:n_win * T].reshape(n_win, T), rec)
        d = cfg["hidden_size"]
        self.x = [r.reshape(-1, d) for r in rec]
        self.cov = [x.T @ x / len(x) for x in self.x]
        self.shape = (n_win, T, d)

# --------------------------------------------------------------------------
# The conversions, recomputed from docs/convert.md


def lowrank(M, C, r):
    """Activation-weighted rank-r fit of M [m, d]: P = top r eigenvectors of
    M C M^T (C None: identity), Q = P^T M."""
    S = M @ (M.T if C is None else C @ M.T)
    w, V = np.linalg.eigh((S + S.T) / 2)
    P = V[:, ::-1][:, :r]
    return P, P.T @ M, w[::-1]


def check_fit(chk, name, M, C, r, got):
    """The C side's rank-r product `got` against the reference fit of M on C:
    equal within the float32 activations' effect on the eigenvectors
    (max(FIT_TOL, 1e-5 / relative eigengap at r)), and as good on the
    activations (E ||(M - A) x||^2 = tr((M - A) C (M - A)^T) within 1e-6 of the
    reference's, which is the least). Returns the reference (P, Q, eigenvalues)."""
    P, Q, ev = lowrank(M, C, r)
    gap = (ev[r - 1] - ev[r]) / ev[0] if 0 < r < len(ev) else 1.0
    chk.compare("%s (gap %.1e)" % (name, gap), got, P @ Q, tol=max(FIT_TOL, 1e-5 / max(gap, 1e-30)))
    obj = [float(np.trace((M - A) @ C @ (M - A).T)) for A in (got, P @ Q)]
    scale = float(np.trace(M @ C @ M.T))
    check_fact(chk, name + ": least on the activations", obj[0] <= obj[1] * (1 + 1e-6) + 1e-9 * scale,
               "E||(M - A) x||^2: %.6e, reference %.6e (of %.4e)" % (obj[0], obj[1], scale))
    return P, Q, ev


def row_tolerance(ev, r):
    """Per latent row j: max(FIT_TOL, 1e-5 / its relative eigengap), as a column."""
    g = [min(ev[j - 1] - ev[j] if j else np.inf, ev[j] - ev[j + 1] if j + 1 < len(ev) else np.inf) / ev[0]
         for j in range(r)]
    return np.maximum(FIT_TOL, 1e-5 / np.maximum(g, 1e-30))[:, None]


def check_rows(chk, name, got, ref, tol):
    """Rows of got against ref, row j within tol[j] of max|ref|."""
    err = np.max(np.abs(got - ref), axis=1, keepdims=True) / np.max(np.abs(ref))
    worst = float(np.max(err / tol))
    check_fact(chk, name, worst <= 1, "worst err / its row's tolerance %.2f (max err %.2e, tolerances %.0e..%.0e)"
               % (worst, float(np.max(err)), float(np.min(tol)), float(np.max(tol))))


def rel(a, b):
    """||a - b||_F / ||a||_F"""
    n = np.linalg.norm(a)
    return np.linalg.norm(a - b) / n if n > 0 else np.linalg.norm(a - b)


def src_heads(cfg, W, l):
    """Query head i's (K, V) maps [dh, d] of source layer l."""
    H, G, dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    a = "model.layers.%d.self_attn." % l
    K, V = W[a + "k_proj.weight"], W[a + "v_proj.weight"]
    g = [i // (H // G) for i in range(H)]
    return [K[x * dh:(x + 1) * dh] for x in g], [V[x * dh:(x + 1) * dh] for x in g]


def lrkv_pair(i, dh, r):
    """d_h-space pair fed by r-space pair i: same frequency, j = i d_h / r,
    rounded half away from zero when not an integer."""
    return int(math.floor(i * dh / r + 0.5))


def mla_max_stride(dh, dr):
    """The largest stride s whose d_r/2 pairs s i fit in the source's d_h/2."""
    return (dh // 2 - 1) // (dr // 2 - 1) if dr // 2 > 1 else 1


def mla_pair_criterion(cfg, W, cal):
    """crit[j]: the sum over layers and heads of the mean over the first 2048
    calibration tokens of ||q_h,j|| ||k_h,j|| (pair j = dims j, j + d_h/2)."""
    H, dh = cfg["num_attention_heads"], head_dim(cfg)
    half = dh // 2
    crit = np.zeros(half)
    for l in range(cfg["num_hidden_layers"]):
        x = cal.x[l][:CRIT_TOKENS]
        a = "model.layers.%d.self_attn." % l
        q = (x @ W[a + "q_proj.weight"].T).reshape(len(x), H, dh)
        Ks, _ = src_heads(cfg, W, l)
        k = np.stack([x @ K.T for K in Ks], axis=1)   # [n, H, dh]
        qn = np.hypot(q[..., :half], q[..., half:])
        kn = np.hypot(k[..., :half], k[..., half:])
        crit += (qn * kn).mean(axis=0).sum(axis=0)
    return crit


def mla_stride(cfg, W, cal, dr):
    """(stride, per-stride sums): the stride whose d_r/2 pairs carry most."""
    dh = head_dim(cfg)
    if dr // 2 <= 1:
        return 1, {1: 0.0}
    crit = mla_pair_criterion(cfg, W, cal)
    sums = {s: float(sum(crit[i * s] for i in range(dr // 2))) for s in range(1, mla_max_stride(dh, dr) + 1)}
    return max(sums, key=lambda s: (sums[s], -s)), sums


def mla_order(dh, dr, s):
    """MLA key dim e <- source dim order[e]: the unrotated dims ascending,
    then rope pair i as (s i, s i + d_h/2)."""
    kept = [x for i in range(dr // 2) for x in (s * i, s * i + dh // 2)]
    return [e for e in range(dh) if e not in kept] + kept


def rms_gain(Q, x, eps):
    """Least-squares g_i of g_i a_i ~ c_i, a = c / rms(c), c = Q x."""
    c = x @ Q.T
    rms = np.sqrt((c * c).mean(axis=1, keepdims=True) + eps)
    a = c / rms
    return (a * a * rms).sum(axis=0) / (a * a).sum(axis=0)

# --------------------------------------------------------------------------
# Checks


def close(chk, name, got, ref, tol=ERR_TOL):
    """Scalars or arrays: |got - ref| <= tol (|ref| + 1e-2), elementwise."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return chk.fail(name, "shape %s, expected %s" % (list(got.shape), list(ref.shape)))
    worst = float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-2))) if ref.size else 0.0
    line = "worst |got-ref|/(|ref|+0.01)=%.2e (ref %s)" % (worst, np.array2string(ref.ravel()[:4], precision=4))
    (chk.ok if worst <= tol else chk.fail)(name, line if worst <= tol else line + " > %.0e" % tol)


def check_fact(chk, name, ok, msg):
    """One PASS/FAIL line for a condition, with msg either way."""
    (chk.ok if ok else chk.fail)(name, msg)


def check_gqa(chk, tag, scfg, W, dcfg, D, rep, _cal):
    """GQA/MQA: mean-pooled K/V heads, copied q/o, the map errors. Returns
    the cache values per token (2 G d_h)."""
    H, dh = scfg["num_attention_heads"], head_dim(scfg)
    G2 = dcfg["num_key_value_heads"]
    per = H // G2
    for l in range(scfg["num_hidden_layers"]):
        a = "model.layers.%d.self_attn." % l
        Ks, Vs = src_heads(scfg, W, l)
        K2 = np.concatenate([np.mean(Ks[g * per:(g + 1) * per], axis=0) for g in range(G2)])
        V2 = np.concatenate([np.mean(Vs[g * per:(g + 1) * per], axis=0) for g in range(G2)])
        chk.compare("%s/L%d/k_proj mean-pooled" % (tag, l), D[a + "k_proj.weight"], K2, tol=1e-6)
        chk.compare("%s/L%d/v_proj mean-pooled" % (tag, l), D[a + "v_proj.weight"], V2, tol=1e-6)
        for n in ("q_proj", "o_proj"):
            chk.compare("%s/L%d/%s copied" % (tag, l, n), D[a + n + ".weight"], W[a + n + ".weight"], tol=0)
        ke = [rel(Ks[i], K2[(i // per) * dh:(i // per + 1) * dh]) for i in range(H)]
        ve = [rel(Vs[i], V2[(i // per) * dh:(i // per + 1) * dh]) for i in range(H)]
        close(chk, "%s/L%d/key_error" % (tag, l), rep["layers"][l]["key_error"], ke)
        close(chk, "%s/L%d/value_error" % (tag, l), rep["layers"][l]["value_error"], ve)
    return 2 * G2 * dh


def check_lrkv(chk, tag, scfg, W, dcfg, D, rep, cal):
    """LRKV: shared means, the key pair blocks and residuals, the weighted
    value fit, copied q/o, the map errors. Returns the cache values per token
    (2 (d_h + H r))."""
    H, dh, d = scfg["num_attention_heads"], head_dim(scfg), scfg["hidden_size"]
    r = dcfg["attnlab"]["lrkv_rank"]
    for l in range(scfg["num_hidden_layers"]):
        a = "model.layers.%d.self_attn." % l
        Ks, Vs = src_heads(scfg, W, l)
        Kbar, Vbar = np.mean(Ks, axis=0), np.mean(Vs, axis=0)
        chk.compare("%s/L%d/k_shared = mean" % (tag, l), D[a + "k_shared_proj.weight"], Kbar, tol=1e-6)
        chk.compare("%s/L%d/v_shared = mean" % (tag, l), D[a + "v_shared_proj.weight"], Vbar, tol=1e-6)
        BK, UK = np.zeros((H, dh, r)), np.zeros((H, r, d))
        ke, ve = [], []
        for h in range(H):
            for i in range(r // 2):
                j = lrkv_pair(i, dh, r)
                for sj, si in ((j, i), (j + dh // 2, i + r // 2)):
                    BK[h, sj, si] = 1.0
                    UK[h, si] = Ks[h][sj] - Kbar[sj]
            ke.append(rel(Ks[h], Kbar + BK[h] @ UK[h]))
            bv = D[a + "v_up_proj.weight"][h * dh:(h + 1) * dh]
            P, Q, _ = check_fit(chk, "%s/L%d/h%d/B_V U_V = weighted fit" % (tag, l, h), Vs[h] - Vbar, cal.cov[l], r,
                                bv @ D[a + "v_down_proj.weight"][h * r:(h + 1) * r])
            ve.append(rel(Vs[h], Vbar + P @ Q))
            if r:
                chk.compare("%s/L%d/h%d/B_V orthonormal" % (tag, l, h), bv.T @ bv, np.eye(r), tol=1e-5)
        chk.compare("%s/L%d/k_up = pair blocks" % (tag, l), D[a + "k_up_proj.weight"], BK.reshape(H * dh, r), tol=0)
        chk.compare("%s/L%d/k_down = residual on pairs" % (tag, l), D[a + "k_down_proj.weight"], UK.reshape(H * r, d),
                    tol=1e-6)
        for n in ("q_proj", "o_proj"):
            chk.compare("%s/L%d/%s copied" % (tag, l, n), D[a + n + ".weight"], W[a + n + ".weight"], tol=0)
        close(chk, "%s/L%d/key_error" % (tag, l), rep["layers"][l]["key_error"], ke)
        close(chk, "%s/L%d/value_error" % (tag, l), rep["layers"][l]["value_error"], ve)
    return 2 * (dh + H * r)


def check_mla(chk, tag, scfg, W, dcfg, D, rep, cal):
    """MLA: the shape, the RoPE stride by its criterion, reordered q_proj,
    shared k_pe, the joint weighted fit, the norm gain, the map errors.
    Returns the cache values per token (d_c + d_r)."""
    H, dh = scfg["num_attention_heads"], head_dim(scfg)
    dr, dc = dcfg["qk_rope_head_dim"], dcfg["kv_lora_rank"]
    dn, dv = dh - dr, dh
    check_fact(chk, tag + "/shape", (dcfg["qk_nope_head_dim"], dcfg["v_head_dim"], dcfg.get("q_lora_rank") or 0)
               == (dn, dv, 0), "nope %d, v %d, q_lora %s" % (dcfg["qk_nope_head_dim"], dcfg["v_head_dim"],
                                                          dcfg.get("q_lora_rank")))
    s, sums = mla_stride(scfg, W, cal, dr)
    ranked = sorted(sums.values(), reverse=True)
    margin = (ranked[0] - ranked[1]) / ranked[0] if len(ranked) > 1 else 1.0
    theta = scfg["rope_theta"] ** (s * dr / dh) if dr // 2 > 1 else scfg["rope_theta"]
    check_fact(chk, tag + "/rope stride = largest q.k norm", abs(dcfg["rope_theta"] / theta - 1) < 1e-9,
               "stride %d (sums %s, margin %.1f %%), rope_theta %.6g (expected %.6g)"
               % (s, {k: round(v, 3) for k, v in sums.items()}, 100 * margin, dcfg["rope_theta"], theta))
    order = mla_order(dh, dr, s)
    for l in range(scfg["num_hidden_layers"]):
        a = "model.layers.%d.self_attn." % l
        Ks, Vs = src_heads(scfg, W, l)
        Wq = W[a + "q_proj.weight"]
        q_ref = np.concatenate([Wq[h * dh:(h + 1) * dh][order] for h in range(H)])
        chk.compare("%s/L%d/q_proj reordered" % (tag, l), D[a + "q_proj.weight"], q_ref, tol=0)
        chk.compare("%s/L%d/o_proj copied" % (tag, l), D[a + "o_proj.weight"], W[a + "o_proj.weight"], tol=0)
        kpe = np.mean([K[order[dn:]] for K in Ks], axis=0)
        kva = D[a + "kv_a_proj_with_mqa.weight"]
        chk.compare("%s/L%d/k_pe = mean rope rows" % (tag, l), kva[dc:], kpe, tol=1e-6)
        M = np.concatenate([np.concatenate([K[order[:dn]], V]) for K, V in zip(Ks, Vs)])
        kvb = D[a + "kv_b_proj.weight"]
        P, Q, ev = check_fit(chk, "%s/L%d/kv_b W_dkv = weighted fit" % (tag, l), M, cal.cov[l], dc, kvb @ kva[:dc])
        chk.compare("%s/L%d/kv_b orthonormal" % (tag, l), kvb.T @ kvb, np.eye(dc), tol=1e-5)
        tol = row_tolerance(ev, dc)
        signs = np.sign(np.sum(kva[:dc] * Q, axis=1))
        check_rows(chk, "%s/L%d/W_dkv rows = P^T M up to sign" % (tag, l), kva[:dc] * signs[:, None], Q, tol)
        eps = dcfg["rms_norm_eps"]
        gain = D[a + "kv_a_layernorm.weight"]
        chk.compare("%s/L%d/norm gain: least squares on its W_dkv" % (tag, l), gain, rms_gain(kva[:dc], cal.x[l], eps),
                    tol=1e-5)
        check_rows(chk, "%s/L%d/norm gain: least squares on reference Q" % (tag, l), gain[:, None],
                   rms_gain(Q, cal.x[l], eps)[:, None], tol)
        ke, ve = [], []
        for h, (K, V) in enumerate(zip(Ks, Vs)):
            fit = P[h * (dn + dv):(h + 1) * (dn + dv)] @ Q
            ke.append(rel(K[order], np.concatenate([fit[:dn], kpe])))
            ve.append(rel(V, fit[dn:]))
        close(chk, "%s/L%d/key_error" % (tag, l), rep["layers"][l]["key_error"], ke)
        close(chk, "%s/L%d/value_error" % (tag, l), rep["layers"][l]["value_error"], ve)
    return dc + dr


def check_common(chk, tag, scfg, W, dcfg, D, rep, cal, kv_target, rng, exe):
    """What every conversion shares: tensors outside attention, output errors,
    losses, KV figures and the written model's logits."""
    H, dh = scfg["num_attention_heads"], head_dim(scfg)
    outside = [k for k in W if ".self_attn." not in k]
    worst = max(float(np.max(np.abs(D[k] - W[k]))) for k in outside)
    check_fact(chk, tag + "/tensors outside attention copied", worst == 0 and all(k in D for k in outside),
               "%d tensors, max |diff| %g" % (len(outside), worst))
    n_win, Tn, d = cal.shape
    for l in range(scfg["num_hidden_layers"]):
        a = "model.layers.%d.self_attn." % l
        x = torch.tensor(cal.x[l].reshape(n_win, Tn, d))
        with torch.no_grad():
            ys = attention_of(scfg)(scfg, tensors(W), a, x)
            yt = attention_of(dcfg)(dcfg, tensors(D), a, x)
        close(chk, "%s/L%d/output_error" % (tag, l), rep["layers"][l]["output_error"],
              float(torch.linalg.norm(yt - ys) / torch.linalg.norm(ys)))
    close(chk, tag + "/heldout_loss_source", rep["heldout_loss_source"], mean_loss(scfg, W, cal.heldout))
    close(chk, tag + "/heldout_loss_converted", rep["heldout_loss_converted"], mean_loss(dcfg, D, cal.heldout))
    check_fact(chk, tag + "/kv figures", (rep["kv_values_per_token_target"] == kv_target and
                                          abs(rep["kv_percent_of_mha"] - 100.0 * kv_target / (2 * H * dh)) < 1e-9 and
                                          rep["calibration_tokens"] == n_win * Tn),
               "%d values/token, %.2f %% of MHA, %d calibration tokens" % (rep["kv_values_per_token_target"],
                                                                          rep["kv_percent_of_mha"],
                                                                          rep["calibration_tokens"]))
    tokens = harness.random_tokens(rng, 13)
    out = harness.dump(chk, exe, rep["_dir"], tag + "/al_testdump", tokens) if exe else None
    if out is not None:
        chk.compare(tag + "/logits vs float64 forward", out["logits"], forward(dcfg, D, tokens[:, :-1]).numpy())


def convert(chk, attnlab, src, dst, target, flags, data_path):
    """`attnlab convert` src -> dst: (config, {name: weights}, convert.json with
    "_dir"), or None after a FAIL line."""
    cmd = [attnlab, "convert", "--model", src, "--to", target, "--out", dst, "--calibration", data_path,
           "--context", str(T), "--calibration-tokens", str(CALIB_TOKENS), "--heldout-tokens", str(HELDOUT_TOKENS)]
    if os.path.exists(dst):
        shutil.rmtree(dst)
    ok, msg = harness.run(cmd + flags, timeout=300)
    if not ok:
        chk.fail(os.path.basename(dst), "attnlab convert failed: " + msg)
        return None
    with open(os.path.join(dst, "config.json")) as fh:
        dcfg = json.load(fh)
    with open(os.path.join(dst, "convert.json")) as fh:
        rep = json.load(fh)
    rep["_dir"] = dst
    return dcfg, R.read_safetensors(os.path.join(dst, "model.safetensors")), rep


def make_text(rng, n):
    """Byte text with structure a model's activations can show: words of a
    small vocabulary separated by spaces, over the 95 printable bytes (more
    distinct tokens than hidden dims, so every layer's E[x x^T] has full rank
    and each fit is unique)."""
    words = [bytes(rng.integers(33, 127, size=rng.integers(2, 7))) for _ in range(60)]
    out = bytearray()
    while len(out) < n:
        out += words[int(rng.integers(len(words)))] + b" "
    return np.frombuffer(bytes(out[:n]), dtype=np.uint8)


def main_checks(args):
    """Every conversion of CONVERSIONS against the reference."""
    chk = harness.Checker(60)
    rng = np.random.default_rng(SEED)
    if not harness.cli_available(args.attnlab, "convert"):
        chk.fail("convert", "the CLI has no convert command")
        return chk.summary()
    data = make_text(rng, 3000)
    data_path = os.path.join(args.workdir, "text.txt")
    data.tofile(data_path)
    sources = {}
    for spec in SOURCES:
        path, cfg, W = make_source(spec, rng, args.workdir)
        sources[spec[0]] = (path, cfg, W, Calibration(data, cfg, W))
    checkers = {"gqa": check_gqa, "mqa": check_gqa, "lrkv": check_lrkv, "mla": check_mla}
    for src, target, flags in CONVERSIONS:
        path, scfg, W, cal = sources[src]
        tag = "%s_to_%s%s" % (src, target, "".join(f for f in flags if not f.startswith("--")))
        got = convert(chk, args.attnlab, path, os.path.join(args.workdir, tag), target, flags, data_path)
        if got is None:
            continue
        dcfg, D, rep = got
        split = dcfg["attnlab"]["train"]["val_fraction"]
        check_fact(chk, tag + "/design and split", dcfg["attnlab"]["attention"] == target and
                   rep["target_attention"] == target and split == VAL_FRACTION,
                   "config %s, report %s, val_fraction %g" % (dcfg["attnlab"]["attention"], rep["target_attention"],
                                                              split))
        kv = checkers[target](chk, tag, scfg, W, dcfg, D, rep, cal)
        check_common(chk, tag, scfg, W, dcfg, D, rep, cal, kv, rng, args.exe)
    return chk.summary()

# --------------------------------------------------------------------------
# Self-test: the reference's own claims


def self_test(_workdir):
    """The reference's own claims, without binaries."""
    chk = harness.Checker(60)
    rng = np.random.default_rng(SEED)
    m, d, n = 10, 14, 200
    M = rng.standard_normal((m, d))
    X = rng.standard_normal((n, d)) @ rng.standard_normal((d, d))
    C = X.T @ X / n
    P, Q, _ = lowrank(M, C, m)
    chk.compare("lowrank: exact at full rank", P @ Q, M, tol=1e-12)
    for r in (2, 5):
        P, Q, _ = lowrank(M, C, r)
        Ps, Qs, _ = lowrank(M, None, r)
        e_w = np.linalg.norm(X @ (M - P @ Q).T) ** 2
        e_s = np.linalg.norm(X @ (M - Ps @ Qs).T) ** 2
        check_fact(chk, "lowrank r=%d: weighted <= plain SVD on the activations" % r, e_w <= e_s * (1 + 1e-12),
                   "%.4g vs %.4g" % (e_w, e_s))
    # LRKV key blocks: B_K RoPE_r(R) = RoPE_dh(B_K R) where d_h / r is an integer
    for dh, r, theta in ((12, 6, 10000.0), (16, 8, 500.0), (8, 8, 10000.0)):
        BK = np.zeros((dh, r))
        for i in range(r // 2):
            j = lrkv_pair(i, dh, r)
            BK[j, i] = BK[j + dh // 2, i + r // 2] = 1.0
        Rr = torch.tensor(rng.standard_normal((1, 9, 1, r)))
        lhs = torch.einsum("dr,btnr->btnd", torch.tensor(BK), LRKV.rope(Rr, 9, r, theta))
        rhs = LRKV.rope(torch.einsum("dr,btnr->btnd", torch.tensor(BK), Rr), 9, dh, theta)
        chk.compare("lrkv B_K commutes with RoPE (dh %d, r %d)" % (dh, r), lhs.numpy(), rhs.numpy(), tol=1e-12)
    # MLA: rope_theta^(s dr/dh) gives pair i the source frequency of pair s i
    for dh, dr, theta in ((12, 4, 10000.0), (16, 6, 500.0)):
        for s in range(1, mla_max_stride(dh, dr) + 1):
            th = theta ** (s * dr / dh)
            src = [theta ** (-2 * (s * i) / dh) for i in range(dr // 2)]
            dst = [th ** (-2 * i / dr) for i in range(dr // 2)]
            check_fact(chk, "mla stride %d frequencies (dh %d, dr %d)" % (s, dh, dr), np.allclose(src, dst, rtol=1e-12),
                       "max pair %d of %d" % (s * (dr // 2 - 1), dh // 2 - 1))
    return chk.summary()


if __name__ == "__main__":
    sys.exit(harness.main(__doc__, SEED, main_checks, self_test))
