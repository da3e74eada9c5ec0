"""Helpers for the independent PyTorch reference tests of attnlab.

Everything here is written from the file-format and model specifications
only (no attnlab C code is read or imported):

* safetensors read/write (F32, F16, BF16) with plain struct + json;
* NPY v1.0 writer (float32, little endian); reading uses numpy.load;
* a float64 Llama-style byte-level language model (RMSNorm, rotate-half
  RoPE, causal softmax attention with MHA/GQA/MQA, SwiGLU MLP, optional
  tied head), differentiated with torch autograd.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

VOCAB = 256

# --------------------------------------------------------------------------
# Number formats

def f32_to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_dtype(a, dtype):
    """Round an array to a safetensors dtype and return it as float64."""
    a32 = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a32.astype(np.float64)
    if dtype == "F16":
        return a32.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(a32)).astype(np.float64)
    raise ValueError("unsupported dtype " + dtype)

# --------------------------------------------------------------------------
# safetensors

def write_safetensors(path, tensors, dtype="F32"):
    """Write {name: array} in `dtype` ("F32", "F16" or "BF16")."""
    header, blobs, pos = {}, [], 0
    for name, arr in tensors.items():
        a32 = np.asarray(arr, dtype=np.float32)
        if dtype == "F32":
            raw = a32.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = a32.astype("<f2").tobytes()
        elif dtype == "BF16":
            raw = f32_to_bf16_bits(a32).astype("<u2").tobytes()
        else:
            raise ValueError("unsupported dtype " + dtype)
        header[name] = {"dtype": dtype, "shape": list(a32.shape),
                        "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)  # customary 8-byte alignment of the data
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(hjson)))
        fh.write(hjson)
        for raw in blobs:
            fh.write(raw)


def read_safetensors(path):
    """Read a safetensors file into {name: float64 numpy array}."""
    with open(path, "rb") as fh:
        data = fh.read()
    if len(data) < 8:
        raise ValueError("%s: file too short for a safetensors header" % path)
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise ValueError("%s: header length %d exceeds file size" % (path, hlen))
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    buf = data[8 + hlen:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        n = int(np.prod(shape)) if shape else 1
        dt = info["dtype"]
        width = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}.get(dt)
        if width is None:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        if e - b != n * width or e > len(buf):
            raise ValueError("%s: tensor %s has inconsistent data_offsets" % (path, name))
        raw = buf[b:e]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif dt == "F64":
            a = np.frombuffer(raw, dtype="<f8")
        else:
            a = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
        out[name] = a.astype(np.float64).reshape(shape)
    return out

# --------------------------------------------------------------------------
# NPY

def write_npy_f32(path, arr):
    """Write a float32 NPY version 1.0 file (C order, little endian)."""
    a = np.ascontiguousarray(arr, dtype="<f4")
    shape = repr(tuple(int(s) for s in a.shape))  # "(2, 9)", "(5,)", "()"
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape
    hdr = hdr.encode("latin1")
    total = 10 + len(hdr) + 1
    hdr += b" " * (-total % 64) + b"\n"
    with open(path, "wb") as fh:
        fh.write(b"\x93NUMPY\x01\x00")
        fh.write(struct.pack("<H", len(hdr)))
        fh.write(hdr)
        fh.write(a.tobytes())


def read_npy(path):
    return np.load(path, allow_pickle=False)

# --------------------------------------------------------------------------
# Model configuration and weights

def attention_kind(H, G):
    return "mha" if G == H else ("mqa" if G == 1 else "gqa")


def make_config(d, f, L, H, G, dh, tied, theta=10000.0, eps=1e-5):
    assert H % G == 0 and dh % 2 == 0
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": d, "intermediate_size": f, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": G, "head_dim": dh,
        "rms_norm_eps": eps, "rope_theta": theta,
        "max_position_embeddings": 64, "vocab_size": VOCAB,
        "tie_word_embeddings": bool(tied),
        "attnlab": {"attention": attention_kind(H, G), "score": "softmax"},
    }


def param_shapes(cfg):
    """Ordered {HF name: shape} for every parameter of the checkpoint."""
    d, f, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    H, G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    s = {"model.embed_tokens.weight": (VOCAB, d)}
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        s[p + "input_layernorm.weight"] = (d,)
        s[p + "self_attn.q_proj.weight"] = (H * dh, d)
        s[p + "self_attn.k_proj.weight"] = (G * dh, d)
        s[p + "self_attn.v_proj.weight"] = (G * dh, d)
        s[p + "self_attn.o_proj.weight"] = (d, H * dh)
        s[p + "post_attention_layernorm.weight"] = (d,)
        s[p + "mlp.gate_proj.weight"] = (f, d)
        s[p + "mlp.up_proj.weight"] = (f, d)
        s[p + "mlp.down_proj.weight"] = (d, f)
    s["model.norm.weight"] = (d,)
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = (VOCAB, d)
    return s


def random_weights(cfg, rng):
    """Random float32-representable weights (as float64 numpy arrays)."""
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


def write_model_dir(path, cfg, weights, dtype="F32"):
    import os
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    write_safetensors(os.path.join(path, "model.safetensors"), weights, dtype)

# --------------------------------------------------------------------------
# Reference model (float64, torch autograd)

def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def rope_cos_sin(T, dh, theta):
    inv_freq = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, dh/2]
    ang = torch.cat([ang, ang], dim=-1)  # [T, dh]
    return ang.cos(), ang.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):
    """x: [B, T, heads, dh]; cos/sin: [T, dh]."""
    return x * cos[None, :, None, :] + rotate_half(x) * sin[None, :, None, :]


def forward(cfg, p, tokens):
    """Logits [B, T, 256] for integer tokens [B, T]; p: {name: float64 tensor}."""
    d, dh = cfg["hidden_size"], cfg["head_dim"]
    H, G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    B, T = tokens.shape
    cos, sin = rope_cos_sin(T, dh, theta)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["model.embed_tokens.weight"][tokens]  # [B, T, d]
    for n in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % n
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, H, dh)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, G, dh)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, G, dh)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # query head h reads KV head h // (H/G)
        k = k.repeat_interleave(H // G, dim=2)
        v = v.repeat_interleave(H // G, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, dh]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        s = s.masked_fill(~causal, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v  # [B, H, T, dh]
        a = a.transpose(1, 2).reshape(B, T, H * dh)
        x = x + a @ p[pre + "self_attn.o_proj.weight"].T
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
    """Return (logits, loss, {name: grad}) as float64 numpy arrays.

    tokens_np: integer array [B, T+1]; inputs are [:, :T], targets [:, 1:].
    """
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=need_grads)
         for k, v in weights.items()}
    tok = torch.tensor(np.asarray(tokens_np), dtype=torch.long)
    logits = forward(cfg, p, tok[:, :-1])
    loss = loss_fn(logits, tok[:, 1:])
    grads = {}
    if need_grads:
        loss.backward()
        grads = {k: t.grad.numpy().copy() for k, t in p.items()}
    return logits.detach().numpy(), float(loss.detach()), grads
