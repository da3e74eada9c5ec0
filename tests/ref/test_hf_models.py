#!/usr/bin/python3
"""Reference test of attnlab on Hugging Face checkpoints (issue 8, models).

Tiny random checkpoints in Hugging Face layout (make_hf_checkpoint.py: no
"attnlab" block in config.json, HF tensor names, tensors in name order so
q/k/v are not adjacent) for every family attnlab reads, against a float64
PyTorch forward written from the HF modeling code of each family:

1. `al_testdump --infer` (what eval/generate run): the forward's logits and
   the KV-cache decoder's logits (one token at a time, with an F32 and with
   a BF16 cache) for
   - LlamaForCausalLM: GQA untied F32; MHA tied in 3 shards; MQA BF16;
     head_dim != hidden/heads in F16; llama3 rope_scaling with rope_theta
     500000 (all three frequency regimes) in BF16; a file whose tensors are
     all misaligned (copied, not used in place);
   - MistralForCausalLM: sliding_window null; sliding_window shorter than the
     positions, run at exactly the window;
   - Qwen2ForCausalLM: q/k/v biases, tied BF16 in 2 shards, and MQA F32;
   - DeepseekV2ForCausalLM (dense MLA): q_lora_rank null F32 untied, and set,
     tied, BF16 in 2 shards; YaRN rope_scaling with a cos/sin factor other
     than 1 (F32);
   - Qwen3ForCausalLM (modeling_qwen3.py: Qwen3Attention's q_norm / k_norm
     before apply_rotary_pos_emb): head_dim 12 != hidden/heads F32, MQA tied
     BF16 in 2 shards;
   - GemmaForCausalLM (modeling_gemma.py: GemmaRMSNorm's 1 + weight,
     GemmaModel's normalizer in the checkpoint dtype, GemmaMLP with
     gelu_pytorch_tanh, tied head): MQA with head_dim 16 BF16, GQA F16;
   - DeepseekV2ForCausalLM with experts (the releases' modeling_deepseek.py:
     DeepseekV2YarnRotaryEmbedding, yarn_find_correction_range,
     yarn_linear_ramp_mask, yarn_get_mscale, DeepseekV2Attention's
     softmax_scale, MoEGate, DeepseekV2MoE.moe_infer): Lite's routing and
     YaRN (greedy, routed_scaling_factor, 2 shared experts, first layer
     dense) BF16 in 2 shards, and group_limited_greedy with norm_topk_prob,
     no shared experts, every other layer MoE (F32);
   - again with the plain-C kernels and the fp32-panel path forced
     (ATTNLAB_CPU=generic, AL_WMAT_PANEL_ROWS=16) on BF16 and F16 cases,
     and with the AVX2 kernels (ATTNLAB_CPU=avx2).
   The reference runs on the same rounded (BF16/F16) weights, so the only
   error left is float32 arithmetic: tolerance 1e-4 (max|c - ref| / max|ref|)
   for every dtype. The dump's memory figures say the matrices were used in
   place from the mapping (bytes = the files' matrix bytes) and only the 1-D
   tensors were copied (as float32), except in the misaligned file.
2. `attnlab eval --logits` on byte data: the CLI's logits of the first window.
3. `attnlab generate --temperature 0` (token ids printed): the greedy tokens
   of the reference, as far as the reference's top two logits are clearly
   apart.
4. `attnlab info --json`: architecture, dtype, mapped and copied bytes.
5. `attnlab attnmap` on Qwen3, Gemma and DeepSeek-V2 (YaRN, MoE): the maps
   of layer 1 against the reference's softmax weights; `attnlab heads` runs.

--self-test checks the reference itself: llama3 frequencies against the
formula evaluated by hand, DeepseekV2's de-interleave + rotate-half against
the complex-number form on interleaved pairs, repeat_kv, a loop-based
attention against the vectorised one, and the checkpoint writer (index
covers every tensor once, misaligned header, bytes read back).
"""
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import make_hf_checkpoint as M  # noqa: E402
import reflib as R  # noqa: E402

SEED = 808
TOL = 1e-4
TOL_BF16_CACHE = 3e-2  # decode with a BF16 KV cache (measured below 1e-2)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
# DeepseekV2 YaRN: with qk_rope_head_dim 16 and 32 original positions the
# correction range is pairs [0, 2], so one pair keeps its frequency, one
# blends and six are interpolated; YARN_LITE has DeepSeek-V2-Lite's factor
# and mscales (cos/sin factor 1, softmax scale x 1.26^2), YARN_MSCALE a
# cos/sin factor other than 1
YARN_LITE = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 32, "beta_fast": 32,
             "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}
YARN_MSCALE = {"type": "yarn", "factor": 16, "original_max_position_embeddings": 32, "mscale": 1.0,
               "mscale_all_dim": 0.5}
# DeepseekV2MoE: Lite's routing (greedy, no renormalisation, a scaling
# factor, 2 shared experts, the first layer dense), and group-limited routing
# with renormalised weights, no shared experts, every other layer MoE
MOE_LITE = {"L": 3, "n_routed_experts": 8, "num_experts_per_tok": 3, "n_shared_experts": 2,
            "moe_intermediate_size": 10, "first_k_dense_replace": 1, "moe_layer_freq": 1, "topk_method": "greedy",
            "n_group": 1, "topk_group": 1, "norm_topk_prob": False, "routed_scaling_factor": 1.5,
            "scoring_func": "softmax", "qk_rope_head_dim": 16, "rope_scaling": YARN_LITE}
MOE_GROUP = {"L": 3, "n_routed_experts": 8, "num_experts_per_tok": 3, "n_shared_experts": None,
             "moe_intermediate_size": 12, "first_k_dense_replace": 0, "moe_layer_freq": 2,
             "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2, "norm_topk_prob": True}
FORCED = {"ATTNLAB_CPU": "generic", "AL_WMAT_PANEL_ROWS": "16"}
AVX2 = {"ATTNLAB_CPU": "avx2"}

# tag, family, config keywords, dtype, shards, misaligned, T, extra environment
CASES = [
    ("llama_gqa_f32", "llama", {"G": 2}, "F32", 1, False, 17, None),
    ("llama_mha_tied_f32_3shards", "llama", {"G": 4, "tied": True, "vocab": 260}, "F32", 3, False, 9, None),
    ("llama_mqa_bf16", "llama", {"G": 1, "vocab": 333}, "BF16", 1, False, 13, None),
    ("llama_headdim12_f16", "llama", {"G": 2, "head_dim": 12}, "F16", 1, False, 11, None),
    ("llama3_rope_bf16", "llama", {"G": 2, "head_dim": 16, "theta": 500000.0, "rope_scaling": LLAMA3},
     "BF16", 1, False, 40, None),
    ("llama_misaligned_bf16", "llama", {"G": 2}, "BF16", 1, True, 10, None),
    ("mistral_f32", "mistral", {"G": 2}, "F32", 1, False, 15, None),
    ("mistral_window_bf16", "mistral", {"G": 1, "sliding_window": 24}, "BF16", 1, False, 24, None),
    ("qwen2_bias_tied_bf16_2shards", "qwen2", {"G": 2, "tied": True}, "BF16", 2, False, 14, None),
    ("qwen2_bias_mqa_f32", "qwen2", {"G": 1, "H": 2, "d": 24}, "F32", 1, False, 10, None),
    ("deepseek_v2_f32", "deepseek_v2", {}, "F32", 1, False, 12, None),
    ("deepseek_v2_qlora_tied_bf16_2shards", "deepseek_v2", {"q_lora_rank": 12, "tied": True},
     "BF16", 2, False, 16, None),
    ("qwen3_headdim12_f32", "qwen3", {"G": 2, "head_dim": 12}, "F32", 1, False, 13, None),
    ("qwen3_mqa_tied_bf16_2shards", "qwen3", {"G": 1, "head_dim": 16, "tied": True}, "BF16", 2, False, 11, None),
    ("gemma_mqa_bf16", "gemma", {"G": 1, "head_dim": 16, "tied": True}, "BF16", 1, False, 14, None),
    ("gemma_gqa_f16", "gemma", {"G": 2, "d": 24, "tied": True}, "F16", 1, False, 10, None),
    ("deepseek_v2_yarn_mscale_f32", "deepseek_v2", {"qk_rope_head_dim": 16, "rope_scaling": YARN_MSCALE},
     "F32", 1, False, 20, None),
    ("deepseek_v2_lite_moe_yarn_bf16_2shards", "deepseek_v2", MOE_LITE, "BF16", 2, False, 16, None),
    ("deepseek_v2_moe_group_f32", "deepseek_v2", MOE_GROUP, "F32", 1, False, 12, None),
    ("llama_mqa_bf16_portable_panels", "llama", {"G": 1, "vocab": 333}, "BF16", 1, False, 13, FORCED),
    ("llama_headdim12_f16_portable_panels", "llama", {"G": 2, "head_dim": 12}, "F16", 1, False, 11, FORCED),
    ("qwen2_bias_tied_bf16_2shards_portable_panels", "qwen2", {"G": 2, "tied": True}, "BF16", 2, False, 14, FORCED),
    ("deepseek_v2_qlora_tied_bf16_2shards_portable_panels", "deepseek_v2", {"q_lora_rank": 12, "tied": True},
     "BF16", 2, False, 16, FORCED),
    ("llama_mqa_bf16_avx2", "llama", {"G": 1, "vocab": 333}, "BF16", 1, False, 13, AVX2),
    ("llama_headdim12_f16_avx2", "llama", {"G": 2, "head_dim": 12}, "F16", 1, False, 11, AVX2),
    ("deepseek_v2_qlora_tied_bf16_2shards_avx2", "deepseek_v2", {"q_lora_rank": 12, "tied": True},
     "BF16", 2, False, 16, AVX2),
    ("gemma_mqa_bf16_portable_panels", "gemma", {"G": 1, "head_dim": 16, "tied": True}, "BF16", 1, False, 14, FORCED),
    ("deepseek_v2_lite_moe_yarn_bf16_2shards_portable_panels", "deepseek_v2", MOE_LITE, "BF16", 2, False, 16, FORCED),
    ("qwen3_mqa_tied_bf16_2shards_avx2", "qwen3", {"G": 1, "head_dim": 16, "tied": True}, "BF16", 2, False, 11,
     AVX2),
]
EVALS = ["llama_gqa_f32", "llama3_rope_bf16", "qwen2_bias_tied_bf16_2shards", "deepseek_v2_qlora_tied_bf16_2shards",
         "qwen3_mqa_tied_bf16_2shards", "gemma_mqa_bf16", "deepseek_v2_lite_moe_yarn_bf16_2shards"]
GENERATES = ["mistral_f32", "deepseek_v2_f32", "qwen3_headdim12_f32", "gemma_gqa_f16", "deepseek_v2_moe_group_f32"]
# attention maps against the reference's weights, and `heads` runs
MAPS = ["qwen3_headdim12_f32", "gemma_mqa_bf16", "deepseek_v2_yarn_mscale_f32", "deepseek_v2_lite_moe_yarn_bf16_2shards"]


def build(spec, rng):
    tag, family, kw, dtype, shards, misalign, T, env = spec
    cfg = M.make_config(family, **kw)
    return cfg, M.random_weights(cfg, rng)


def run_env(cmd, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=e)
    except (OSError, subprocess.TimeoutExpired) as x:
        return False, str(x), ""
    return r.returncode == 0, r.stderr.decode("utf-8", "replace")[-2000:], r.stdout.decode("utf-8", "replace")


def expected_memory(cfg, weights, dtype, misalign):
    """(bytes of matrices used in place, bytes copied) as attnlab should count them."""
    width = {"F32": 4, "BF16": 2, "F16": 2}[dtype]
    mats = sum(v.size * width for v in weights.values() if v.ndim == 2)
    vecs = sum(v.size * 4 for v in weights.values() if v.ndim == 1)
    return (0, mats + vecs) if misalign else (mats, vecs)


def check_dump(chk, args, spec, cfg, weights, rng):
    tag, family, kw, dtype, shards, misalign, T, env = spec
    d = os.path.join(args.workdir, tag)
    M.write_checkpoint(d, cfg, weights, dtype, shards, misalign)
    tokens = rng.integers(0, cfg["vocab_size"], size=(2, T + 1))
    tokens[0, 0], tokens[1, 1] = 0, cfg["vocab_size"] - 1  # both ends of the vocabulary
    tok_path, out_path = os.path.join(d, "tokens.npy"), os.path.join(d, "out.safetensors")
    R.write_npy_f32(tok_path, tokens.astype(np.float32))
    if os.path.exists(out_path):
        os.remove(out_path)
    ok, err, _ = run_env([args.exe, "--infer", d, tok_path, out_path], env)
    if not ok:
        return chk.fail(tag, "al_testdump --infer failed: " + err.strip())
    out = R.read_safetensors(out_path)
    ref = M.reference_logits(cfg, weights, tokens[:, :-1], dtype)
    chk.compare(tag + "/logits", out["logits"], ref, tol=TOL)
    chk.compare(tag + "/decode_logits", out["decode_logits"], ref, tol=TOL)
    chk.compare(tag + "/decode_vs_forward", out["decode_logits"], out["logits"], tol=TOL)
    # a BF16 cache rounds every cached value once (about 2^-9 relative): a
    # wrong layout or widening would be off by O(1)
    chk.compare(tag + "/decode_bf16_cache", out["decode_bf16_cache_logits"], ref, tol=TOL_BF16_CACHE)
    mapped, copied, total, is_mapped = (int(x) for x in out["memory"])
    want = expected_memory(cfg, weights, dtype, misalign)
    if is_mapped == 1 and (mapped, copied) == want and total == mapped + copied:
        chk.ok(tag + "/memory", "mapped in place %d bytes, copied %d" % (mapped, copied))
    else:
        chk.fail(tag + "/memory", "mapped=%d in place %d copied %d total %d; expected in place %d copied %d"
                 % (is_mapped, mapped, copied, total, want[0], want[1]))


def check_eval(chk, args, tag, spec, cfg, weights, rng):
    d = os.path.join(args.workdir, tag)
    T = spec[6]
    data = rng.integers(32, 127, size=3 * T + 5).astype(np.uint8)  # ASCII: valid UTF-8, ids = bytes
    data_path, out_path = os.path.join(d, "data.bin"), os.path.join(d, "eval_logits.npy")
    data.tofile(data_path)
    ok, err, _ = run_env([args.attnlab, "eval", "--model", d, "--data", data_path, "--context", str(T),
                          "--logits", out_path])
    if not ok:
        return chk.fail("eval_" + tag, "attnlab eval failed: " + err.strip())
    ref = M.reference_logits(cfg, weights, data[None, :T].astype(np.int64), spec[3])
    chk.compare("eval_%s/logits" % tag, R.read_npy(out_path), ref[0], tol=TOL)


def check_generate(chk, args, tag, spec, cfg, weights):
    d = os.path.join(args.workdir, tag)
    prompt, n = "The cat", 12
    ok, err, out = run_env([args.attnlab, "generate", "--ids", "--model", d, "--prompt", prompt, "-n", str(n),
                            "--temperature", "0"])
    if not ok:
        return chk.fail("generate_" + tag, "attnlab generate failed: " + err.strip())
    try:
        got = [int(x) for x in out.split()]
    except ValueError:
        return chk.fail("generate_" + tag, "output is not token ids: %r" % out[:200])
    seq = [ord(ch) for ch in prompt]
    compared = 0
    for i in range(n):
        logits = M.reference_logits(cfg, weights, np.array([seq]), spec[3])[0, -1]
        top = np.sort(logits)[::-1]
        if top[0] - top[1] < 1e-3 * np.abs(logits).max():
            break  # a near tie: float32 may pick either; stop comparing here
        want = int(np.argmax(logits))
        if i >= len(got) or got[i] != want:
            return chk.fail("generate_" + tag, "token %d is %s, the reference's greedy choice is %d (ids %s)"
                            % (i, got[i] if i < len(got) else "missing", want, got))
        seq.append(want)
        compared += 1
    if len(got) != n or compared == 0:
        return chk.fail("generate_" + tag, "%d ids printed, %d compared" % (len(got), compared))
    chk.ok("generate_" + tag, "%d greedy tokens equal the reference's" % compared)


def check_info(chk, args, tag, spec, cfg, weights):
    d = os.path.join(args.workdir, tag)
    ok, err, out = run_env([args.attnlab, "info", "--model", d, "--json"])
    if not ok:
        return chk.fail("info_" + tag, "attnlab info failed: " + err.strip())
    j = json.loads(out)
    mapped, copied = expected_memory(cfg, weights, spec[3], spec[5])
    want = {"architecture": M.ARCH[spec[1]], "dtype": spec[3], "mapped": True, "vocab": cfg["vocab_size"],
            "mapped_bytes": mapped, "copied_bytes": copied, "weight_bytes": mapped + copied}
    bad = ["%s=%r (want %r)" % (k, j.get(k), v) for k, v in want.items() if j.get(k) != v]
    if bad:
        chk.fail("info_" + tag, ", ".join(bad))
    else:
        chk.ok("info_" + tag, "%s %s, %d bytes mapped in place" % (want["architecture"], spec[3], mapped))


def check_maps(chk, args, tag, spec, cfg, weights, rng):
    """`attnlab attnmap` (layer 1, heads 0 and last) against the reference's
    softmax weights on the same bytes; `attnlab heads` runs and writes its
    figure and table."""
    d = os.path.join(args.workdir, tag)
    T, H = spec[6], cfg["num_attention_heads"]
    data = rng.integers(32, 127, size=T).astype(np.uint8)
    text_path, stem = os.path.join(d, "map_text.txt"), os.path.join(d, "map")
    data.tofile(text_path)
    ok, err, _ = run_env([args.attnlab, "attnmap", "--model", d, "--text", text_path, "--layer", "1",
                          "--head", "0,%d" % (H - 1), "--max-tokens", str(T), "--out", stem + ".png"])
    if not ok:
        chk.fail("attnmap_" + tag, "attnlab attnmap failed: " + err.strip())
    else:
        ref = M.reference_attention(cfg, weights, data[None, :].astype(np.int64), spec[3])[1][0]
        chk.compare("attnmap_%s/weights" % tag, R.read_npy(stem + ".npy"), ref[[0, H - 1]], tol=TOL)
    out = os.path.join(d, "heads.png")
    ok, err, _ = run_env([args.attnlab, "heads", "--model", d, "--out", out])
    if ok and os.path.getsize(out) > 0:
        chk.ok("heads_" + tag, "attnlab heads wrote %s" % os.path.basename(out))
    else:
        chk.fail("heads_" + tag, "attnlab heads failed: " + err.strip())


def check_eval_bpe(chk, args, tag, spec, cfg, weights):
    """The tokenizer joined to a checkpoint: a byte-level BPE tokenizer.json
    with merges learned here (ids above 255 up to the model's vocabulary),
    `attnlab eval --text` on UTF-8 text; the logits must be the reference's
    on the ids of the independent Python encoder (tests/ref/tokref.py)."""
    import test_tokenizer as TT
    import tokref
    d = os.path.join(args.workdir, "bpe_" + tag)
    M.write_checkpoint(d, cfg, weights, spec[3], spec[4], tokenizer=False)
    merges = TT.learn(TT.byte_level_words(tokref.GPT2_REGEX), cfg["vocab_size"] - 256)
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tj = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl, "post_processor": bl,
          "decoder": bl, "model": {"type": "BPE", "vocab": TT.byte_level_vocab(merges),
                                   "merges": ["%s %s" % m for m in merges]}}
    with open(os.path.join(d, "tokenizer.json"), "w") as fh:
        json.dump(tj, fh)
    text = "The quick brown fox jumps over the lazy dog; café, 東京 and 🙂 — it's the dog's day."
    ids = tokref.Tokenizer(tj).encode(text)
    T = min(len(ids), spec[6])
    if max(ids) < 256 or T < 4:
        return chk.fail("eval_bpe_" + tag, "the tokenizer made no merged token (%d ids)" % len(ids))
    out_path = os.path.join(d, "eval_logits.npy")
    ok, err, _ = run_env([args.attnlab, "eval", "--model", d, "--text", text, "--context", str(T),
                          "--logits", out_path])
    if not ok:
        return chk.fail("eval_bpe_" + tag, "attnlab eval failed: " + err.strip())
    ref = M.reference_logits(cfg, weights, np.array([ids[:T]], dtype=np.int64), spec[3])
    chk.compare("eval_bpe_%s/logits (%d ids, max id %d)" % (tag, T, max(ids[:T])), R.read_npy(out_path), ref[0],
                tol=TOL)


def main_checks(args):
    chk = harness.Checker(63)
    rng = np.random.default_rng(SEED)
    torch.set_num_threads(2)
    built = {}
    for spec in CASES:
        if spec[7]:  # a forced-path variant repeats its base case's model
            cfg, weights = built[spec[0].replace("_portable_panels", "").replace("_avx2", "")]
        else:
            cfg, weights = build(spec, rng)
        built[spec[0]] = (cfg, weights)
        check_dump(chk, args, spec, cfg, weights, rng)
    specs = {s[0]: s for s in CASES}
    if harness.cli_available(args.attnlab, "eval"):
        for tag in EVALS:
            check_eval(chk, args, tag, specs[tag], *built[tag], rng)
        check_eval_bpe(chk, args, "llama_gqa_f32", specs["llama_gqa_f32"], *built["llama_gqa_f32"])
    if harness.cli_available(args.attnlab, "generate"):
        for tag in GENERATES:
            check_generate(chk, args, tag, specs[tag], *built[tag])
    if harness.cli_available(args.attnlab, "attnmap") and harness.cli_available(args.attnlab, "heads"):
        for tag in MAPS:
            check_maps(chk, args, tag, specs[tag], *built[tag], rng)
    if harness.cli_available(args.attnlab, "info"):
        check_info(chk, args, "qwen2_bias_tied_bf16_2shards", specs["qwen2_bias_tied_bf16_2shards"],
                   *built["qwen2_bias_tied_bf16_2shards"])
    return chk.summary()

# --------------------------------------------------------------------------
# Self-test of the reference


def naive_llama_attention(cfg, p, pre, h):
    """Loop form of the Llama attention: per token, head and key, pairwise
    rotations (i, i + dh/2) by t * f_i written out, explicit softmax."""
    B, T, _ = h.shape
    H, G, dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], M.head_dim_of(cfg)
    f = M.inv_freq(cfg, dh).numpy()
    h = h.numpy()
    W = {k: p[pre + k].numpy() for k in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")}
    bias = {k: p[pre + k].numpy() if pre + k in p else 0.0 for k in ("q_proj.bias", "k_proj.bias", "v_proj.bias")}

    def rot(v, t):
        out, half = v.copy(), dh // 2
        for i in range(half):
            c, s = math.cos(t * f[i]), math.sin(t * f[i])
            out[i], out[i + half] = v[i] * c - v[i + half] * s, v[i + half] * c + v[i] * s
        return out

    y = np.zeros((B, T, W["o_proj.weight"].shape[0]))
    for b in range(B):
        q = [W["q_proj.weight"] @ h[b, t] + bias["q_proj.bias"] for t in range(T)]
        k = [W["k_proj.weight"] @ h[b, t] + bias["k_proj.bias"] for t in range(T)]
        v = [W["v_proj.weight"] @ h[b, t] + bias["v_proj.bias"] for t in range(T)]
        for t in range(T):
            heads = []
            for hd in range(H):
                g = hd // (H // G)
                qh = rot(q[t][hd * dh:(hd + 1) * dh], t)
                sc = [qh @ rot(k[j][g * dh:(g + 1) * dh], j) / math.sqrt(dh) for j in range(t + 1)]
                e = np.exp(np.array(sc) - max(sc))
                heads.append(sum(e[j] / e.sum() * v[j][g * dh:(g + 1) * dh] for j in range(t + 1)))
            y[b, t] = W["o_proj.weight"] @ np.concatenate(heads)
    return y


def self_test(workdir):
    chk = harness.Checker(62)
    rng = np.random.default_rng(SEED)
    # llama3 frequencies: Llama 3.1's numbers, each regime by hand
    cfg = {"rope_theta": 500000.0, "rope_scaling": dict(LLAMA3, original_max_position_embeddings=8192)}
    f = M.inv_freq(cfg, 128).numpy()
    f0 = 500000.0 ** (-np.arange(0, 128, 2) / 128.0)
    want = []
    for x in f0:
        wl = 2 * math.pi / x
        if wl < 8192 / 4.0:
            want.append(x)
        elif wl > 8192 / 1.0:
            want.append(x / 8.0)
        else:
            s = (8192 / wl - 1.0) / (4.0 - 1.0)
            want.append((1 - s) * x / 8.0 + s * x)
    n_med = sum(1 for x in f0 if 8192 / 4.0 <= 2 * math.pi / x <= 8192)
    chk.compare("self/llama3_inv_freq", f, np.array(want), tol=1e-15)
    if n_med > 0 and f[0] == f0[0] and abs(f[-1] - f0[-1] / 8) < 1e-20:
        chk.ok("self/llama3_regimes", "%d medium frequencies, first kept, last divided by 8" % n_med)
    else:
        chk.fail("self/llama3_regimes", "unexpected regimes")
    # the tiny test config covers all three regimes
    tiny = M.make_config("llama", head_dim=16, theta=500000.0, rope_scaling=LLAMA3)
    ft, fb = M.inv_freq(tiny, 16).numpy(), 500000.0 ** (-np.arange(0, 16, 2) / 16.0)
    kinds = {"kept": int(np.sum(ft == fb)), "divided": int(np.sum(np.isclose(ft, fb / 8, rtol=1e-14, atol=0))),
             "medium": int(np.sum((ft != fb) & ~np.isclose(ft, fb / 8, rtol=1e-14, atol=0)))}
    if all(v > 0 for v in kinds.values()):
        chk.ok("self/llama3_tiny_regimes", str(kinds))
    else:
        chk.fail("self/llama3_tiny_regimes", str(kinds))
    # DeepseekV2 rope: de-interleave + rotate-half == complex rotation of the
    # interleaved pairs (transformers' native form), up to the permutation of
    # the rotated vector, so every q.k agrees
    T, dr = 7, 8
    ds = M.make_config("deepseek_v2", theta=1000.0)
    q, k = torch.randn(1, 2, T, dr, dtype=torch.float64), torch.randn(1, 1, T, dr, dtype=torch.float64)
    cos, sin = M.cos_sin(ds, T, dr)
    a = M.deepseek_rotary(q, cos, sin) @ M.deepseek_rotary(k, cos, sin).transpose(2, 3)
    fr = torch.outer(torch.arange(T, dtype=torch.float64), M.inv_freq(ds, dr))
    rotc = torch.polar(torch.ones_like(fr), fr)

    def complex_form(x):
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], dr // 2, 2).contiguous()) * rotc
        return torch.view_as_real(z).reshape(x.shape)
    b = complex_form(q) @ complex_form(k).transpose(2, 3)
    chk.compare("self/deepseek_rope_forms", a.numpy(), b.numpy(), tol=1e-12)
    # repeat_kv == repeat_interleave on the head axis
    x = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    chk.compare("self/repeat_kv", M.repeat_kv(x, 4).numpy(), x.repeat_interleave(4, dim=1).numpy(), tol=0)
    # loop attention vs the vectorised one (Qwen2 biases, GQA, llama3 rope)
    for fam, kw in (("qwen2", {"G": 2}), ("llama", {"G": 1, "head_dim": 16, "theta": 500000.0,
                                                      "rope_scaling": LLAMA3})):
        c = M.make_config(fam, d=16, f=24, L=1, H=4, vocab=40, **kw)
        w = M.random_weights(c, rng)
        p = {k2: torch.tensor(v) for k2, v in w.items()}
        h = torch.randn(2, 9, 16, dtype=torch.float64)
        pre = "model.layers.0.self_attn."
        chk.compare("self/naive_attention_" + fam, M.llama_attention(c, p, pre, h).numpy(),
                    naive_llama_attention(c, p, pre, h), tol=1e-12)
    # the writer: index covers every tensor once, odd header when misaligned, bytes read back
    c = M.make_config("qwen2", tied=True)
    w = M.random_weights(c, rng)
    d = os.path.join(workdir, "self_ckpt")
    files = M.write_checkpoint(d, c, w, "BF16", shards=3)
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    back = {}
    for fname in files:
        back.update(R.read_safetensors(os.path.join(d, fname)))
    okmap = sorted(idx["weight_map"]) == sorted(w) and all(
        k in R.read_safetensors(os.path.join(d, idx["weight_map"][k])) for k in w)
    same = all(np.array_equal(back[k], M.round_to(v, "BF16")) for k, v in w.items())
    if okmap and same and "lm_head.weight" not in back and len(files) == 3:
        chk.ok("self/sharded_writer", "%d tensors in %d shards" % (len(back), len(files)))
    else:
        chk.fail("self/sharded_writer", "index or bytes mismatch")
    M.write_checkpoint(d + "_odd", c, w, "F32", misalign=True)
    with open(os.path.join(d + "_odd", "model.safetensors"), "rb") as fh:
        hlen = struct.unpack("<Q", fh.read(8))[0]
    back = R.read_safetensors(os.path.join(d + "_odd", "model.safetensors"))
    if (8 + hlen) % 2 == 1 and all(np.array_equal(back[k], v) for k, v in w.items()):
        chk.ok("self/misaligned_writer", "data starts at odd offset %d" % (8 + hlen))
    else:
        chk.fail("self/misaligned_writer", "header length %d" % hlen)
    return chk.summary()


if __name__ == "__main__":
    sys.exit(harness.main(__doc__, SEED, main_checks, self_test))
