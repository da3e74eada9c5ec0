#!/usr/bin/python3
"""Tiny random Hugging Face checkpoints and an independent reference forward.

Written from the Hugging Face conventions only (config.json keys, tensor
names and shapes of transformers' LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM and
DeepseekV2ForCausalLM, the safetensors format and the sharded index of
save_pretrained); no attnlab code is read or imported.

* make_case(...) -> (config, weights): a config.json dict without attnlab's
  block (so attnlab treats it as a foreign checkpoint) and float32-exact
  random weights as float64 arrays;
* write_checkpoint(dir, config, weights, dtype, shards, misalign): config.json
  and model.safetensors, or model-XXXXX-of-YYYYY.safetensors shards with
  model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}),
  in F32, BF16 or F16, written with struct + json; tensors sorted by name as
  the safetensors library does (so q_proj, k_proj, v_proj are not adjacent),
  optionally with a header padded to an odd length so that every tensor's
  bytes are misaligned;
* forward(config, params, tokens): logits in float64 following the HF
  modeling code of each family (RMSNorm, rotate-half RoPE with
  _compute_llama3_parameters frequencies, repeat_kv for GQA, Qwen2's q/k/v
  biases, DeepseekV2's MLA with its q/k rope parts de-interleaved before
  rotate-half, softmax scale 1/sqrt(qk_nope + qk_rope), SwiGLU MLP, tied or
  separate lm_head), and:
  - modeling_qwen3.py: Qwen3Attention's q_norm / k_norm (Qwen3RMSNorm over
    head_dim, per head) after the q/k projections and before
    apply_rotary_pos_emb; no biases;
  - modeling_gemma.py: GemmaRMSNorm (x * rsqrt(mean x^2 + eps) in float32,
    times 1 + weight), GemmaModel's embeddings times
    normalizer = tensor(hidden_size ** 0.5, dtype of the model), GemmaMLP
    down(gelu_pytorch_tanh(gate(x)) * up(x)), head_dim from the config,
    tied lm_head;
  - DeepSeek-V2's modeling_deepseek.py (the remote code of the releases):
    DeepseekV2YarnRotaryEmbedding (yarn_find_correction_range with
    beta_fast / beta_slow, yarn_linear_ramp_mask, inv_freq =
    freq_inter * (1 - mask) + freq_extra * mask, cos and sin times
    _mscale = yarn_get_mscale(factor, mscale) /
    yarn_get_mscale(factor, mscale_all_dim)), DeepseekV2Attention's
    softmax_scale *= yarn_get_mscale(factor, mscale_all_dim) ** 2, MoEGate
    (softmax scores in float32, topk_method greedy / group_limited_greedy
    with n_group and topk_group, norm_topk_prob with + 1e-20, else
    routed_scaling_factor), DeepseekV2MoE (routed experts of width
    moe_intermediate_size weighted and summed, plus shared_experts of width
    n_shared_experts * moe_intermediate_size) in the layers with
    l >= first_k_dense_replace and l % moe_layer_freq == 0.

Run as a script it writes one checkpoint: make_hf_checkpoint.py OUT_DIR
[--family llama|mistral|qwen2|qwen3|gemma|deepseek_v2] [--dtype F32|BF16|F16]
[--shards N] [--seed S], or with --deepseek-v2-lite-layers L a BF16
checkpoint of DeepSeek-V2-Lite's shapes with L layers (random weights
written tensor by tensor; 2 layers: 2.1 GB).
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------
# Configs and parameter shapes

ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
        "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "gemma": "GemmaForCausalLM",
        "deepseek_v2": "DeepseekV2ForCausalLM"}


def make_config(family, d=32, f=48, L=2, H=4, G=2, head_dim=None, vocab=300, tied=False,
                theta=10000.0, max_pos=64, eps=1e-6, rope_scaling=None, **extra):
    """config.json of a tiny model of `family` (HF keys only)."""
    cfg = {
        "architectures": [ARCH[family]], "model_type": family,
        "vocab_size": vocab, "hidden_size": d, "intermediate_size": f,
        "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": G,
        "hidden_act": "silu", "max_position_embeddings": max_pos,
        "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": rope_scaling,
        "tie_word_embeddings": bool(tied), "torch_dtype": "float32",
        "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
    }
    if family in ("llama", "mistral"):
        cfg["attention_bias"] = False
        cfg["mlp_bias"] = False
    if family == "llama":
        cfg["pretraining_tp"] = 1
    if family == "mistral":
        cfg["sliding_window"] = None
    if family in ("qwen2", "qwen3"):
        cfg["use_sliding_window"] = False
        cfg["sliding_window"] = max_pos
        cfg["max_window_layers"] = L
    if family == "qwen3":
        cfg["attention_bias"] = False
    if family == "gemma":
        cfg["hidden_act"] = "gelu"  # as Gemma-2B's config; GemmaMLP runs gelu_pytorch_tanh
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
        cfg["attention_bias"] = False
    if family == "deepseek_v2":
        cfg.update({"kv_lora_rank": 16, "q_lora_rank": None, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 4, "v_head_dim": 6, "n_routed_experts": None,
                    "n_shared_experts": None, "first_k_dense_replace": L, "moe_layer_freq": 1,
                    "attention_bias": False})
        cfg["num_key_value_heads"] = H
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    cfg.update(extra)
    return cfg


def head_dim_of(cfg):
    hd = cfg.get("head_dim")
    return hd if hd else cfg["hidden_size"] // cfg["num_attention_heads"]


def is_moe_layer(cfg, n):
    """DeepseekV2DecoderLayer's rule for a DeepseekV2MoE MLP."""
    return (cfg.get("n_routed_experts") is not None and n >= cfg.get("first_k_dense_replace", 0)
            and n % cfg.get("moe_layer_freq", 1) == 0)


def mlp_shapes(s, p, d, f):
    s[p + "gate_proj.weight"] = (f, d)
    s[p + "up_proj.weight"] = (f, d)
    s[p + "down_proj.weight"] = (d, f)


def param_shapes(cfg):
    """{HF tensor name: shape} of every tensor a checkpoint of cfg holds."""
    fam = cfg["model_type"]
    d, f, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    s = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,)}
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        s[p + "input_layernorm.weight"] = (d,)
        s[p + "post_attention_layernorm.weight"] = (d,)
        if fam == "deepseek_v2" and is_moe_layer(cfg, n):
            fe, E = cfg["moe_intermediate_size"], cfg["n_routed_experts"]
            s[p + "mlp.gate.weight"] = (E, d)
            for e in range(E):
                mlp_shapes(s, p + "mlp.experts.%d." % e, d, fe)
            if cfg.get("n_shared_experts"):
                mlp_shapes(s, p + "mlp.shared_experts.", d, fe * cfg["n_shared_experts"])
        else:
            mlp_shapes(s, p + "mlp.", d, f)
        a = p + "self_attn."
        if fam == "deepseek_v2":
            dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
            dc, dq = cfg["kv_lora_rank"], cfg["q_lora_rank"]
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
        else:
            dh = head_dim_of(cfg)
            s[a + "q_proj.weight"] = (H * dh, d)
            s[a + "k_proj.weight"] = (G * dh, d)
            s[a + "v_proj.weight"] = (G * dh, d)
            s[a + "o_proj.weight"] = (d, H * dh)
            if fam == "qwen2":
                s[a + "q_proj.bias"] = (H * dh,)
                s[a + "k_proj.bias"] = (G * dh,)
                s[a + "v_proj.bias"] = (G * dh,)
            if fam == "qwen3":
                s[a + "q_norm.weight"] = (dh,)
                s[a + "k_norm.weight"] = (dh,)
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = (V, d)
    return s


def random_weights(cfg, rng):
    """float32-exact random weights (float64 arrays): norm gains 1 + 0.1 N,
    biases 0.1 N, embedding 0.5 N, other matrices N / sqrt(fan_in)."""
    out = {}
    for name, shape in param_shapes(cfg).items():
        x = rng.standard_normal(shape)
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * x
        elif name.endswith(".bias"):
            w = 0.1 * x
        elif "embed_tokens" in name:
            w = 0.5 * x
        elif name.endswith("mlp.gate.weight"):
            w = 3.0 * x / math.sqrt(shape[1])  # routers: scores well apart, so float32 picks the same experts
        else:
            w = x / math.sqrt(shape[1])
        out[name] = w.astype(np.float32).astype(np.float64)
    return out

# --------------------------------------------------------------------------
# Number formats and safetensors


def bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def round_to(a, dtype):
    """The values a tensor has after storing it in `dtype`, as float64."""
    a32 = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a32.astype(np.float64)
    if dtype == "F16":
        return a32.astype(np.float16).astype(np.float64)
    return (bf16_bits(a32).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def tensor_bytes(arr, dtype):
    a32 = np.asarray(arr, dtype=np.float32)
    if dtype == "F32":
        return a32.astype("<f4").tobytes()
    if dtype == "F16":
        return a32.astype("<f2").tobytes()
    if dtype == "BF16":
        return bf16_bits(a32).astype("<u2").tobytes()
    raise ValueError(dtype)


def write_safetensors(path, tensors, dtype, misalign=False):
    """{name: array} -> one safetensors file, tensors in name order. With
    misalign the header is padded to an odd length (legal in the format),
    so no tensor's bytes are aligned to its element size."""
    header, blobs, pos = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        raw = tensor_bytes(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(np.shape(tensors[name])),
                        "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    if misalign:
        h += b" " * 7  # 8 + len(h) is now odd
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for raw in blobs:
            fh.write(raw)
    return pos


def write_byte_tokenizer(path):
    """tokenizer.json of a byte-level BPE without merges whose ids 0..255 are
    the bytes (GPT-2's byte-to-character map), so a text's token ids are its
    UTF-8 bytes and the checks below can feed the references those bytes."""
    keep = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    vocab, extra = {}, 0
    for b in range(256):
        if b in keep:
            vocab[chr(b)] = b
        else:
            vocab[chr(0x100 + extra)] = b
            extra += 1
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    with open(os.path.join(path, "tokenizer.json"), "w") as fh:
        json.dump({"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl,
                   "post_processor": bl, "decoder": bl, "model": {"type": "BPE", "vocab": vocab, "merges": []}}, fh)


def write_checkpoint(path, cfg, weights, dtype="F32", shards=1, misalign=False, tokenizer=True):
    """config.json + weights: one model.safetensors, or `shards` files with
    model.safetensors.index.json; with `tokenizer`, the byte tokenizer.json
    above. Returns the shard file names."""
    os.makedirs(path, exist_ok=True)
    if tokenizer:
        write_byte_tokenizer(path)
    c = dict(cfg)
    c["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(c, fh, indent=2)
    names = sorted(weights)
    if shards <= 1:
        write_safetensors(os.path.join(path, "model.safetensors"), weights, dtype, misalign)
        return ["model.safetensors"]
    files, weight_map, total = [], {}, 0
    per = (len(names) + shards - 1) // shards
    for k in range(shards):
        part = names[k * per:(k + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        total += write_safetensors(os.path.join(path, fname), {n: weights[n] for n in part}, dtype, misalign)
        files.append(fname)
        weight_map.update((n, fname) for n in part)
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=2)
    return files

# --------------------------------------------------------------------------
# Reference forward (float64), after transformers' modeling code


def rms_norm(x, w, eps, unit_offset=False):
    """LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w; GemmaRMSNorm (unit_offset)
    scales by 1 + w."""
    return (1.0 + w if unit_offset else w) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_params(rs):
    """DeepseekV2YarnRotaryEmbedding's arguments with their defaults."""
    return (rs["factor"], rs.get("original_max_position_embeddings", 4096), rs.get("beta_fast", 32),
            rs.get("beta_slow", 1), rs.get("mscale", 1), rs.get("mscale_all_dim", 0))


def yarn_inv_freq(base, dim, rs):
    """DeepseekV2YarnRotaryEmbedding._set_cos_sin_cache's inv_freq (float64)."""
    factor, old, beta_fast, beta_slow, _, _ = yarn_params(rs)

    def corr_dim(rot):  # yarn_find_correction_dim
        return (dim * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(base))
    low = max(math.floor(corr_dim(beta_fast)), 0)  # yarn_find_correction_range
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    mask = 1.0 - ramp  # inv_freq_mask
    pw = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freq_extra, freq_inter = 1.0 / pw, 1.0 / (factor * pw)
    return freq_inter * (1 - mask) + freq_extra * mask


def rope_type(cfg):
    rs = cfg.get("rope_scaling")
    return None if not rs else rs.get("rope_type", rs.get("type"))


def inv_freq(cfg, dim):
    """_compute_default_rope_parameters, then _compute_llama3_parameters when
    rope_scaling says llama3 (DeepseekV2's yarn: yarn_inv_freq)."""
    base = cfg.get("rope_theta", 10000.0)
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.get("rope_scaling")
    if not rs or rs.get("rope_type", rs.get("type")) in (None, "default"):
        return f
    if rope_type(cfg) == "yarn":
        return yarn_inv_freq(base, dim, rs)
    assert rs.get("rope_type", rs.get("type")) == "llama3"
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / f
    f_llama = torch.where(wavelen > low_wavelen, f / factor, f)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * f_llama / factor + smooth * f_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, f_llama)


def cos_sin(cfg, T, dim):
    """LlamaRotaryEmbedding: emb = cat(freqs, freqs); cos, sin [T, dim]."""
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq(cfg, dim))
    emb = torch.cat((freqs, freqs), dim=-1)
    if rope_type(cfg) == "yarn":  # DeepseekV2YarnRotaryEmbedding: cos, sin times _mscale
        factor, _, _, _, mscale, mscale_all_dim = yarn_params(cfg["rope_scaling"])
        m = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
        return emb.cos() * m, emb.sin() * m
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    """x [B, heads, T, dim]; cos, sin [T, dim]."""
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, n_rep):
    """[B, G, T, dh] -> [B, G * n_rep, T, dh], each KV head repeated n_rep times in place."""
    b, g, t, dh = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, g, n_rep, t, dh).reshape(b, g * n_rep, t, dh)


# When a list, causal_attention appends each layer's weights [B, H, T, T] to it.
RECORD = None


def causal_attention(q, k, v, scale):
    """softmax(q k^T * scale + causal mask) v; q, k, v [B, H, T, .]."""
    T = q.shape[2]
    s = (q @ k.transpose(2, 3)) * scale
    mask = torch.full((T, T), float("-inf"), dtype=s.dtype).triu(1)
    probs = torch.softmax(s + mask, dim=-1)
    if RECORD is not None:
        RECORD.append(probs)
    return probs @ v


def llama_attention(cfg, p, pre, h):
    """LlamaAttention / MistralAttention / Qwen2Attention (q/k/v biases) /
    Qwen3Attention (q/k norms) / GemmaAttention (scaling head_dim ** -0.5)."""
    B, T, _ = h.shape
    H, G, dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim_of(cfg)

    def proj(name):
        y = h @ p[pre + name + ".weight"].T
        if pre + name + ".bias" in p:
            y = y + p[pre + name + ".bias"]
        return y

    q = proj("q_proj").view(B, T, H, dh)
    k = proj("k_proj").view(B, T, G, dh)
    if cfg["model_type"] == "qwen3":  # Qwen3Attention: q_norm / k_norm per head, before RoPE
        q = rms_norm(q, p[pre + "q_norm.weight"], cfg["rms_norm_eps"])
        k = rms_norm(k, p[pre + "k_norm.weight"], cfg["rms_norm_eps"])
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = proj("v_proj").view(B, T, G, dh).transpose(1, 2)
    cos, sin = cos_sin(cfg, T, dh)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    k, v = repeat_kv(k, H // G), repeat_kv(v, H // G)
    o = causal_attention(q, k, v, dh ** -0.5)
    return o.transpose(1, 2).reshape(B, T, H * dh) @ p[pre + "o_proj.weight"].T


def deepseek_rotary(x, cos, sin):
    """DeepseekV2's apply_rotary_pos_emb: de-interleave the pairs (view
    [.., d/2, 2], transpose) then rotate-half."""
    b, h, s, d = x.shape
    x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return apply_rotary(x, cos, sin)


def deepseek_attention(cfg, p, pre, h):
    """DeepseekV2Attention (MLA) without rope scaling."""
    B, T, _ = h.shape
    H = cfg["num_attention_heads"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    dc, eps = cfg["kv_lora_rank"], cfg["rms_norm_eps"]
    if cfg.get("q_lora_rank"):
        q = rms_norm(h @ p[pre + "q_a_proj.weight"].T, p[pre + "q_a_layernorm.weight"], eps)
        q = q @ p[pre + "q_b_proj.weight"].T
    else:
        q = h @ p[pre + "q_proj.weight"].T
    q = q.view(B, T, H, dn + dr).transpose(1, 2)
    q_nope, q_pe = q[..., :dn], q[..., dn:]
    ckv = h @ p[pre + "kv_a_proj_with_mqa.weight"].T
    c, k_pe = ckv[..., :dc], ckv[..., dc:]
    k_pe = k_pe.view(B, T, 1, dr).transpose(1, 2)
    kv = (rms_norm(c, p[pre + "kv_a_layernorm.weight"], eps) @ p[pre + "kv_b_proj.weight"].T)
    kv = kv.view(B, T, H, dn + dv).transpose(1, 2)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    cos, sin = cos_sin(cfg, T, dr)
    q_pe, k_pe = deepseek_rotary(q_pe, cos, sin), deepseek_rotary(k_pe, cos, sin)
    qs = torch.cat([q_nope, q_pe], dim=-1)
    ks = torch.cat([k_nope, k_pe.expand(B, H, T, dr)], dim=-1)
    scale = (dn + dr) ** -0.5
    if rope_type(cfg) == "yarn" and yarn_params(cfg["rope_scaling"])[5]:  # DeepseekV2Attention's correction
        factor, mscale_all_dim = cfg["rope_scaling"]["factor"], cfg["rope_scaling"]["mscale_all_dim"]
        scale = scale * yarn_get_mscale(factor, mscale_all_dim) ** 2
    o = causal_attention(qs, ks, v, scale)
    return o.transpose(1, 2).reshape(B, T, H * dv) @ p[pre + "o_proj.weight"].T


def mlp(cfg, p, m, h):
    """LlamaMLP / DeepseekV2MLP: down(silu(gate(h)) * up(h)); GemmaMLP with
    gelu_pytorch_tanh."""
    g = h @ p[m + "gate_proj.weight"].T
    act = F.gelu(g, approximate="tanh") if cfg["model_type"] == "gemma" else F.silu(g)
    return (act * (h @ p[m + "up_proj.weight"].T)) @ p[m + "down_proj.weight"].T


def moe_gate(cfg, p, m, h):
    """MoEGate.forward: (topk_idx, topk_weight) [N, k] of rows h [N, d]."""
    k, E = cfg["num_experts_per_tok"], cfg["n_routed_experts"]
    scores = torch.softmax(h @ p[m + "gate.weight"].T, dim=-1)
    method = cfg.get("topk_method", "greedy")
    if method == "group_limited_greedy":
        G, tg = cfg["n_group"], cfg["topk_group"]
        group_scores = scores.view(h.shape[0], G, -1).max(dim=-1).values
        group_idx = torch.topk(group_scores, k=tg, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(h.shape[0], G, E // G).reshape(h.shape[0], -1)
        scores = scores.masked_fill(~score_mask.bool(), 0.0)
    else:
        assert method == "greedy"
    w, idx = torch.topk(scores, k=k, dim=-1, sorted=False)
    if k > 1 and cfg.get("norm_topk_prob"):
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    else:
        w = w * cfg.get("routed_scaling_factor", 1.0)
    return idx, w


def moe(cfg, p, m, h):
    """DeepseekV2MoE.forward (moe_infer): each token's experts weighted and
    summed, plus the shared experts."""
    B, T, d = h.shape
    rows = h.reshape(-1, d)
    idx, w = moe_gate(cfg, p, m, rows)
    y = torch.zeros_like(rows)
    for n in range(rows.shape[0]):
        for j in range(idx.shape[1]):
            e = int(idx[n, j])
            y[n] += w[n, j] * mlp(cfg, p, m + "experts.%d." % e, rows[n:n + 1])[0]
    if cfg.get("n_shared_experts"):
        y = y + mlp(cfg, p, m + "shared_experts.", rows)
    return y.view(B, T, d)


def forward(cfg, p, tokens, dtype="F32"):
    """Logits [B, T, V] (float64) of integer tokens [B, T]; p {name: tensor};
    dtype: the checkpoint's (Gemma's embedding normalizer is a number of it)."""
    eps, fam = cfg["rms_norm_eps"], cfg["model_type"]
    gemma = fam == "gemma"
    attention = deepseek_attention if fam == "deepseek_v2" else llama_attention
    x = p["model.embed_tokens.weight"][tokens]
    if gemma:  # GemmaModel: normalizer = torch.tensor(hidden_size ** 0.5, dtype=hidden_states.dtype)
        x = x * float(round_to(np.array([cfg["hidden_size"] ** 0.5]), dtype)[0])
    for n in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % n
        x = x + attention(cfg, p, pre + "self_attn.", rms_norm(x, p[pre + "input_layernorm.weight"], eps, gemma))
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps, gemma)
        if fam == "deepseek_v2" and is_moe_layer(cfg, n):
            x = x + moe(cfg, p, pre + "mlp.", h)
        else:
            x = x + mlp(cfg, p, pre + "mlp.", h)
    x = rms_norm(x, p["model.norm.weight"], eps, gemma)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.T


def reference_logits(cfg, weights, tokens, dtype="F32"):
    """Logits [B, T, V] as numpy float64, on the weights as stored in dtype."""
    p = {k: torch.tensor(round_to(v, dtype), dtype=torch.float64) for k, v in weights.items()}
    with torch.no_grad():
        return forward(cfg, p, torch.tensor(np.asarray(tokens), dtype=torch.long), dtype).numpy()


def reference_attention(cfg, weights, tokens, dtype="F32"):
    """Every layer's attention weights [B, H, T, T] (numpy float64) of the
    reference forward on tokens [B, T]."""
    global RECORD
    RECORD = []
    try:
        reference_logits(cfg, weights, tokens, dtype)
        return [x.numpy() for x in RECORD]
    finally:
        RECORD = None


def deepseek_v2_lite_config(layers):
    """DeepSeek-V2-Lite's published config.json with `layers` layers (layer
    0 dense, the others MoE with 64 experts)."""
    cfg = make_config("deepseek_v2", d=2048, f=10944, L=layers, H=16, vocab=102400, max_pos=163840, theta=10000.0,
                      kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64,
                      v_head_dim=128, n_routed_experts=64, num_experts_per_tok=6, n_shared_experts=2,
                      moe_intermediate_size=1408, first_k_dense_replace=1, moe_layer_freq=1,
                      topk_method="greedy", n_group=1, topk_group=1, norm_topk_prob=False,
                      routed_scaling_factor=1.0, scoring_func="softmax",
                      rope_scaling={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                    "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707})
    cfg["num_key_value_heads"] = 16
    return cfg


def write_random_bf16(path, cfg, seed):
    """A BF16 model.safetensors of random weights for cfg written tensor by
    tensor (a large model never sits in memory): gains 1 + 0.1 N, matrices
    N / sqrt(fan_in) (embedding 0.5 N). Returns the file's size."""
    rng = np.random.default_rng(seed)
    shapes = param_shapes(cfg)
    header, pos = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(shapes):
        n = int(np.prod(shapes[name])) * 2
        header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [pos, pos + n]}
        pos += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for name in sorted(shapes):
            shape = shapes[name]
            scale = 0.1 if len(shape) == 1 else 0.5 if "embed_tokens" in name else 1 / math.sqrt(shape[1])
            rows = max(1, (1 << 22) // (shape[1] if len(shape) > 1 else 1))
            for r0 in range(0, shape[0], rows):
                x = rng.standard_normal((min(rows, shape[0] - r0),) + tuple(shape[1:]), dtype=np.float32) * scale
                if len(shape) == 1:
                    x += 1.0
                fh.write(bf16_bits(x).astype("<u2").tobytes())
    return 8 + len(h) + pos


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--family", default="llama", choices=sorted(ARCH))
    ap.add_argument("--dtype", default="BF16", choices=["F32", "BF16", "F16"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deepseek-v2-lite-layers", type=int, default=0, metavar="L",
                    help="write a BF16 checkpoint of DeepSeek-V2-Lite's shapes with L layers instead")
    ap.add_argument("--llama2-7b", action="store_true",
                    help="write a BF16 checkpoint of Llama-2-7B's shapes instead (13.5 GB, a few minutes; "
                         "the byte tokenizer: issue 14's attention-map benchmark, bench/bf16_table.py)")
    a = ap.parse_args()
    if a.deepseek_v2_lite_layers or a.llama2_7b:
        if a.llama2_7b:
            cfg, what = make_config("llama", d=4096, f=11008, L=32, H=32, G=32, vocab=32000, max_pos=4096), "Llama-2-7B"
        else:
            cfg, what = deepseek_v2_lite_config(a.deepseek_v2_lite_layers), "DeepSeek-V2-Lite"
        os.makedirs(a.out, exist_ok=True)
        write_byte_tokenizer(a.out)
        with open(os.path.join(a.out, "config.json"), "w") as fh:
            json.dump(dict(cfg, torch_dtype="bfloat16"), fh, indent=2)
        n = write_random_bf16(os.path.join(a.out, "model.safetensors"), cfg, a.seed)
        print("wrote %s (%s shapes, %d layers, BF16, %d bytes)" % (a.out, what, cfg["num_hidden_layers"], n))
        return
    cfg = make_config(a.family)
    write_checkpoint(a.out, cfg, random_weights(cfg, np.random.default_rng(a.seed)), a.dtype, a.shards)
    print("wrote %s (%s, %s, %d shard(s))" % (a.out, ARCH[a.family], a.dtype, a.shards))


if __name__ == "__main__":
    main()
