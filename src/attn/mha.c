/*
 * mha.c: multi-head (MHA), grouped-query (GQA) and multi-query (MQA)
 * attention, as Hugging Face Llama computes them. One implementation: they
 * differ only in the number G of KV heads.
 *
 *   q_h = RoPE(W_q[h] x)        h = 0..H-1, W_q: [H*d_h, d]
 *   k_g = RoPE(W_k[g] x)        g = 0..G-1, W_k: [G*d_h, d]
 *   v_g = W_v[g] x                          W_v: [G*d_h, d]
 *   o_h = sum_j p(q_h . k_{g(h),j} / sqrt(d_h)) v_{g(h),j},  g(h) = h / (H/G)
 *         (p: the config's score function over the visible j, attention.md 2)
 *   y   = W_o concat_h(o_h)                 W_o: [d, H*d_h]
 * RoPE is rotate-half (element i pairs with i + d_h/2).
 * KV cache per token per layer: 2 G d_h values, laid out [k_0..k_{G-1} | v_0..v_{G-1}].
 *
 * The three projections sit next to each other in the parameter arena (the
 * model lays tensors out in params() order), so [W_q; W_k; W_v] is one
 * [(H+2G) d_h, d] matrix and q, k, v come from one GEMM as column ranges of a
 * qkv[T, (H+2G) d_h] buffer. A memory-mapped Hugging Face checkpoint keeps
 * them where its file has them, in its dtype: three products then fill the
 * same column ranges (project_qkv).
 *
 * Qwen2 (config qkv_bias) adds biases b_q [H*d_h], b_k, b_v [G*d_h] to the
 * three projections before RoPE; they are params 4..6 (after W_o, so the
 * arena keeps W_q, W_k, W_v adjacent). Only inference reads them: models
 * with biases come from Hugging Face checkpoints, which attnlab does not
 * train, and head_maps ignores them (an offset, not a bilinear form).
 *
 * Qwen3 (config qk_norm) normalises each head's q and k with an RMSNorm
 * over d_h before RoPE, gains q_norm [d_h] and k_norm [d_h] shared by the
 * heads (Qwen3RMSNorm, eps rms_norm_eps): params after W_o and the biases.
 * Inference only, as the biases; head_maps scales W_q's and W_k's rows by
 * the gains (the norm's scalar per token does not change a head's map up
 * to scale).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "convert.h"

enum { W_Q, W_K, W_V, W_O, B_Q, B_K, B_V };

/* Head shapes shared by the three designs. */
static int heads_validate(const al_config *c, al_err *err) {
    if (c->head_dim <= 0) return al_errf(err, "invalid config: head_dim must be positive, got %d", c->head_dim);
    if (c->head_dim % 2) return al_errf(err, "invalid config: head_dim must be even for RoPE, got %d", c->head_dim);
    if (c->num_heads % c->num_kv_heads)
        return al_errf(err, "invalid config: num_key_value_heads %d does not divide num_attention_heads %d",
                       c->num_kv_heads, c->num_heads);
    return 0;
}

/* Each design's head counts: MHA G = H, MQA G = 1, GQA in between. */
static int mha_validate(const al_config *c, al_err *err) {
    if (heads_validate(c, err)) return -1;
    if (c->num_kv_heads != c->num_heads)
        return al_errf(err, "invalid config: attention 'mha' needs num_key_value_heads == num_attention_heads (%d), got %d",
                       c->num_heads, c->num_kv_heads);
    return 0;
}

static int mqa_validate(const al_config *c, al_err *err) {
    if (heads_validate(c, err)) return -1;
    if (c->num_kv_heads != 1)
        return al_errf(err, "invalid config: attention 'mqa' needs num_key_value_heads 1, got %d", c->num_kv_heads);
    return 0;
}

static int gqa_validate(const al_config *c, al_err *err) {
    if (heads_validate(c, err)) return -1;
    if (c->num_kv_heads <= 1 || c->num_kv_heads >= c->num_heads)
        return al_errf(err, "invalid config: attention 'gqa' needs 1 < num_key_value_heads < num_attention_heads, got %d of %d",
                       c->num_kv_heads, c->num_heads);
    return 0;
}

/* A Llama-family config without an attnlab block is the design its head counts say. */
static int mha_matches(const al_config *c) { return c->num_kv_heads == c->num_heads; }
static int mqa_matches(const al_config *c) { return c->num_kv_heads == 1 && c->num_heads != 1; }
static int gqa_matches(const al_config *c) { return c->num_kv_heads != c->num_heads && c->num_kv_heads != 1; }

static void heads_widths(const al_config *c, int *dk, int *dv) { *dk = *dv = c->head_dim; }

static void heads_cache_formula(const al_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "2 x %d KV heads x %d", c->num_kv_heads, c->head_dim);
}

static void heads_describe(const al_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s attention (%d query heads, %d KV heads, head dim %d)", al_attn_name(c->attention),
             c->num_heads, c->num_kv_heads, c->head_dim);
}

/* the panel titles of the LRKV paper's head-similarity figure */
static void mha_title(const al_config *c, char *buf, size_t cap) { snprintf(buf, cap, "Standard MHA"); }
static void gqa_title(const al_config *c, char *buf, size_t cap) { snprintf(buf, cap, "GQA"); }
static void mqa_title(const al_config *c, char *buf, size_t cap) { snprintf(buf, cap, "MQA"); }

static int gqa_params(const al_config *c, al_param_spec *out) {
    int64_t d = c->hidden_size, qd = (int64_t)c->num_heads * c->head_dim, kvd = (int64_t)c->num_kv_heads * c->head_dim;
    float std = 0.02f, std_out = 0.02f / sqrtf(2.0f * (float)c->num_layers); /* GPT-2 residual scaling */
    /* the backward writes q, k, v (one product: gqa_backward) and o whole */
    const al_param_spec specs[] = {
        {"q_proj.weight", 2, {qd, d}, AL_INIT_NORMAL, std, 1, 1},
        {"k_proj.weight", 2, {kvd, d}, AL_INIT_NORMAL, std, 1, 1},
        {"v_proj.weight", 2, {kvd, d}, AL_INIT_NORMAL, std, 1, 1},
        {"o_proj.weight", 2, {d, qd}, AL_INIT_NORMAL, std_out, 1, 1},
    };
    memcpy(out, specs, sizeof specs);
    if (!c->qkv_bias) return 4;
    out[B_Q] = (al_param_spec){"q_proj.bias", 1, {qd, 1}, AL_INIT_ZEROS, 0.0f, 0};
    out[B_K] = (al_param_spec){"k_proj.bias", 1, {kvd, 1}, AL_INIT_ZEROS, 0.0f, 0};
    out[B_V] = (al_param_spec){"v_proj.bias", 1, {kvd, 1}, AL_INIT_ZEROS, 0.0f, 0};
    return 7;
}

/* The index of q_norm (k_norm follows), after W_o and any biases. */
static int qk_norm_at(const al_config *c) { return c->qkv_bias ? 7 : 4; }

/* gqa_params without and with Qwen3's q/k norms. */
static int heads_params(const al_config *c, al_param_spec *out) {
    const int n = gqa_params(c, out);
    if (!c->qk_norm) return n;
    out[n] = (al_param_spec){"q_norm.weight", 1, {c->head_dim, 1}, AL_INIT_ONES, 0.0f, 0};
    out[n + 1] = (al_param_spec){"k_norm.weight", 1, {c->head_dim, 1}, AL_INIT_ONES, 0.0f, 0};
    return n + 2;
}

static void gqa_rope_dims(const al_config *c, int dims[2]) {
    dims[0] = c->head_dim;
    dims[1] = 0;
}

static size_t gqa_cache(const al_config *c) { return 2 * (size_t)c->num_kv_heads * c->head_dim; }

static size_t qkv_width(const al_config *c) { return (size_t)(c->num_heads + 2 * c->num_kv_heads) * c->head_dim; }

/* saved: qkv[N, (H+2G) d_h] (q, k rotated) | o[N, H d_h] | lse[B, H, T] */
static size_t gqa_saved(const al_config *c, int B, int T) {
    size_t N = (size_t)B * T;
    return N * qkv_width(c) + N * c->num_heads * c->head_dim + (size_t)B * c->num_heads * T;
}

/* backward: dqkv[N, (H+2G) d_h] | do[N, H d_h];  decode: qkv | o | scores[H, max_position] */
static al_attn_shape shape_of(const al_config *c, int B, int T);

static size_t gqa_scratch(const al_config *c, int B, int T) {
    size_t N = (size_t)B * T, hd = (size_t)c->num_heads * c->head_dim;
    size_t train = N * qkv_width(c) + N * hd;
    const al_attn_shape s = shape_of(c, 1, c->max_position);
    size_t decode = qkv_width(c) + hd + al_attn_decode_scratch(&s, 0, c->max_position);
    return train > decode ? train : decode;
}

static al_attn_shape shape_of(const al_config *c, int B, int T) {
    int hd = c->num_heads * c->head_dim, w = (int)qkv_width(c);
    al_attn_shape s = {B, T, c->num_heads, c->num_kv_heads, c->head_dim, c->head_dim, w, w, w, hd,
                       1.0f / sqrtf((float)c->head_dim)};
    al_attn_set_score(&s, c);
    return s;
}

/* Whether [W_q; W_k; W_v] is one matrix of one dtype (attnlab's arena
 * layout: fp32, or its BF16 copy at the same offsets). */
static int qkv_fused(const al_attn_layer *L) {
    const al_config *c = L->cfg;
    const size_t qn = (size_t)c->num_heads * c->head_dim * c->hidden_size;
    const size_t kn = (size_t)c->num_kv_heads * c->head_dim * c->hidden_size;
    return al_attn_adjacent(L->w, L->wdt, W_Q, qn) && al_attn_adjacent(L->w, L->wdt, W_K, kn);
}

/* Training needs the fused fp32 [W_q; W_k; W_v] (and its gradient) without
 * biases; inference takes any layout (project_qkv). */
static int heads_validate_layer(const al_attn_layer *L, int training, al_err *err) {
    if (!training) return 0;
    const al_config *c = L->cfg;
    const size_t qn = (size_t)c->num_heads * c->head_dim * c->hidden_size;
    const size_t kn = (size_t)c->num_kv_heads * c->head_dim * c->hidden_size;
    if (!qkv_fused(L) || L->wdt[W_Q] != AL_DT_F32 || c->qkv_bias || c->qk_norm || !al_attn_adjacent(L->g, NULL, W_Q, qn) ||
        !al_attn_adjacent(L->g, NULL, W_K, kn))
        return al_errf(err, "training needs W_q, W_k, W_v as one fp32 matrix without biases or q/k norms (attnlab's arena)");
    return 0;
}

/* Qwen3's q/k norms on the rows of qkv[N, w]: each of the H query heads
 * and G key heads normalised over its d_h values and scaled by its gain. */
static void norm_qk_heads(const al_attn_layer *L, float *qkv, int N) {
    const al_config *c = L->cfg;
    const int H = c->num_heads, G = c->num_kv_heads, dh = c->head_dim, w = (int)qkv_width(c);
    const float *gq = L->w[qk_norm_at(c)], *gk = L->w[qk_norm_at(c) + 1];
#pragma omp parallel for schedule(static) if ((long)N * w > 65536)
    for (int n = 0; n < N; n++) {
        float *row = qkv + (size_t)n * w;
        al_rmsnorm_fwd(row, NULL, row, gq, H, dh, c->rms_norm_eps);
        al_rmsnorm_fwd(row + (size_t)H * dh, NULL, row + (size_t)H * dh, gk, G, dh, c->rms_norm_eps);
    }
}

/* qkv[N, w] = x[N, d] [W_q; W_k; W_v]^T (+ biases, then q/k norms): one product over the
 * fused arena matrix (fp32: the sgemm / sgemv calls of wmat.c; BF16: its
 * kernels), else one product per projection into its column range; decode
 * (N = 1) takes the matrix-vector forms. */
static void project_qkv(const al_attn_layer *L, al_wref x, float *qkv, int N, int decode) {
    const al_config *c = L->cfg;
    const int d = c->hidden_size, qd = c->num_heads * c->head_dim, kvd = c->num_kv_heads * c->head_dim;
    const int w = (int)qkv_width(c);
    const float *xv = decode ? al_wref_f32_p(x) : NULL; /* decode: an fp32 token */
    if (qkv_fused(L)) {
        if (decode) al_matvec(qkv, xv, al_attn_w(L, W_Q), w, d, 0);
        else al_matmul_x(qkv, w, x, d, al_attn_w(L, W_Q), N, d, w, 0); /* qkv[N, w] = x[N, d] Wqkv^T */
    } else if (decode) {
        al_matvec(qkv, xv, al_attn_w(L, W_Q), qd, d, 0);
        al_matvec(qkv + qd, xv, al_attn_w(L, W_K), kvd, d, 0);
        al_matvec(qkv + qd + kvd, xv, al_attn_w(L, W_V), kvd, d, 0);
    } else {
        al_matmul_x(qkv, w, x, d, al_attn_w(L, W_Q), N, d, qd, 0);             /* columns [0, H dh) */
        al_matmul_x(qkv + qd, w, x, d, al_attn_w(L, W_K), N, d, kvd, 0);       /* [H dh, (H+G) dh) */
        al_matmul_x(qkv + qd + kvd, w, x, d, al_attn_w(L, W_V), N, d, kvd, 0); /* [(H+G) dh, w) */
    }
    if (c->qk_norm && !c->qkv_bias) norm_qk_heads(L, qkv, N);
    if (!c->qkv_bias) return;
    const float *bq = L->w[B_Q], *bk = L->w[B_K], *bv = L->w[B_V];
#pragma omp parallel for schedule(static) if ((long)N * w > 65536)
    for (int n = 0; n < N; n++) {
        float *row = qkv + (size_t)n * w;
        for (int j = 0; j < qd; j++) row[j] += bq[j];
        for (int j = 0; j < kvd; j++) row[qd + j] += bk[j];
        for (int j = 0; j < kvd; j++) row[qd + kvd + j] += bv[j];
    }
    if (c->qk_norm) norm_qk_heads(L, qkv, N);
}

static void gqa_forward(const al_attn_layer *L, al_wref x, float *y, float *saved, float *scratch, int B, int T) {
    const al_config *c = L->cfg;
    const int N = B * T, d = c->hidden_size, H = c->num_heads, G = c->num_kv_heads, dh = c->head_dim;
    const int w = (int)qkv_width(c);
    float *qkv = saved, *o = qkv + (size_t)N * w, *lse = o + (size_t)N * H * dh;
    project_qkv(L, x, qkv, N, 0);                                  /* qkv[N, w] */
    al_rope_half(qkv, N, T, 0, H, w, L->rope, +1);               /* q heads */
    al_rope_half(qkv + (size_t)H * dh, N, T, 0, G, w, L->rope, +1); /* k heads */
    al_attn_shape s = shape_of(c, B, T);
    al_attn_fwd(&s, qkv, qkv + (size_t)H * dh, qkv + (size_t)(H + G) * dh, o, lse);
    al_matmul(y, d, o, H * dh, al_attn_w(L, W_O), N, H * dh, d, 0); /* y[N, d] = o[N, H dh] Wo^T */
    (void)scratch;
}

static void gqa_backward(const al_attn_layer *L, al_wref x, const float *dy, float *dx, const float *saved,
                         float *scratch, int B, int T) {
    const al_config *c = L->cfg;
    const int N = B * T, d = c->hidden_size, H = c->num_heads, G = c->num_kv_heads, dh = c->head_dim;
    const int w = (int)qkv_width(c);
    const float *qkv = saved, *o = qkv + (size_t)N * w, *lse = o + (size_t)N * H * dh;
    float *dqkv = scratch, *d_o = dqkv + (size_t)N * w;
    /* training runs on attnlab's fp32 arena, where q, k, v are one matrix and
     * have no biases (heads_validate_layer) */
    al_linear_bwd_into(d_o, 0, L->g[W_O], !L->grads_unset, dy, o, L->w[W_O], N, H * dh, d);
    /* dq, dk, dv are dqkv's (H + 2 G) dh = w columns: written whole, not added to a cleared dqkv */
    al_attn_shape s = shape_of(c, B, T);
    s.grads_overwrite = 1;
    al_attn_bwd(&s, qkv, qkv + (size_t)H * dh, qkv + (size_t)(H + G) * dh, o, lse, d_o, dqkv, dqkv + (size_t)H * dh,
                dqkv + (size_t)(H + G) * dh);
    al_rope_half(dqkv, N, T, 0, H, w, L->rope, -1);
    al_rope_half(dqkv + (size_t)H * dh, N, T, 0, G, w, L->rope, -1);
    al_linear_bwd_ref(dx, 1, L->g[W_Q], !L->grads_unset, al_wref_f32(dqkv), x, L->w[W_Q], N, d, w);
}

static void gqa_decode(const al_attn_layer *L, const float *x, float *y, al_kv cache, int pos, float *scratch) {
    const al_config *c = L->cfg;
    const int d = c->hidden_size, H = c->num_heads, G = c->num_kv_heads, dh = c->head_dim;
    const int w = (int)qkv_width(c);
    const size_t vpt = gqa_cache(c);
    const al_attn_shape fn = shape_of(c, 1, pos + 1); /* scale and score function */
    float *qkv = scratch, *o = qkv + w, *work = o + (size_t)H * dh;
    project_qkv(L, al_wref_f32(x), qkv, 1, 1);
    al_rope_half(qkv, 1, 1, pos, H + G, w, L->rope, +1); /* q and k heads are adjacent */
    al_kv_store(cache, (size_t)pos * vpt, qkv + (size_t)H * dh, vpt);
    /* cache row = [K groups | V groups]; group g's heads share its key and value */
    const al_decode_view view = {cache, vpt, 0, (size_t)dh, (size_t)G * dh, (size_t)dh, 0, 0, 0, 0};
    al_attn_decode(&fn, qkv, &view, pos + 1, o, work);
    al_matvec(y, o, al_attn_w(L, W_O), d, H * dh, 0); /* y[d] = W_o[d, H dh] o */
}

/* The forward saved qkv [T, w] with q and k rotated; a cache row is its
 * [K groups | V groups] part, as gqa_decode appends it. */
static void gqa_cache_fill(const al_attn_layer *L, const float *saved, int T, al_kv cache) {
    const al_config *c = L->cfg;
    const size_t w = qkv_width(c), vpt = gqa_cache(c), off = (size_t)c->num_heads * c->head_dim;
    for (int t = 0; t < T; t++) al_kv_store(cache, (size_t)t * vpt, saved + (size_t)t * w + off, vpt);
}

/* Head-similarity maps (attention.md 4): query head h's rows of W_q and its
 * group's rows of W_k, both [d_h, d]; RoPE is ignored (relative position 0). */
static int gqa_head_maps(const al_attn_layer *L, int h, double *wq, double *wk) {
    const al_config *c = L->cfg;
    const int d = c->hidden_size, dh = c->head_dim, g = h / (c->num_heads / c->num_kv_heads);
    if (!wq || !wk) return dh; /* the size query (attn.h: both or neither) */
    al_wread_f64(wq, al_attn_w(L, W_Q), (size_t)h * dh * d, (size_t)dh * d);
    al_wread_f64(wk, al_attn_w(L, W_K), (size_t)g * dh * d, (size_t)dh * d);
    if (c->qk_norm) /* the gains of Qwen3's q/k norms scale each row */
        for (int i = 0; i < dh; i++)
            for (int j = 0; j < d; j++) {
                wq[(size_t)i * d + j] *= L->w[qk_norm_at(c)][i];
                wk[(size_t)i * d + j] *= L->w[qk_norm_at(c) + 1][i];
            }
    return dh;
}

/* q, k of head h: columns h*d_h (q) and (H + g) d_h (k) of the saved qkv rows */
static int gqa_head_qk(const al_attn_layer *L, const float *saved, int B, int T, int b, int h, float *q, float *k) {
    const al_config *c = L->cfg;
    const int dh = c->head_dim, H = c->num_heads, g = h / (H / c->num_kv_heads), w = (int)qkv_width(c);
    (void)B;
    for (int t = 0; q && t < T; t++) {
        const float *row = saved + ((size_t)b * T + t) * w;
        memcpy(q + (size_t)t * dh, row + (size_t)h * dh, sizeof(float) * dh);
        memcpy(k + (size_t)t * dh, row + (size_t)(H + g) * dh, sizeof(float) * dh);
    }
    return dh;
}

/* ---- conversion from MHA/GQA (convert.h, docs/convert.md) ---- */

/* GQA target: --kv-heads G' (default half the source's KV heads) must give
 * 1 < G' < H and divide H; MQA: G' = 1. Whether G' differs from the source
 * is the caller's check (a target equal to the source). */
static int heads_convert_shape(const al_attn_source *layers, const al_config *src, al_config *dst,
                               const unsigned char *given, al_err *err) {
    (void)layers, (void)given;
    if (dst->attention == AL_ATTN_MQA) {
        if (dst->num_kv_heads > 1) return al_errf(err, "--kv-heads applies only to --to gqa (mqa has 1)");
        dst->num_kv_heads = 1;
        return 0;
    }
    if (dst->num_kv_heads == 0) dst->num_kv_heads = src->num_kv_heads / 2;
    if (dst->num_kv_heads <= 1 || dst->num_kv_heads >= dst->num_heads || dst->num_heads % dst->num_kv_heads)
        return al_errf(err, "gqa needs --kv-heads G with 1 < G < %d dividing %d (got %d)", dst->num_heads,
                       dst->num_heads, dst->num_kv_heads);
    return 0;
}

/* Mean pooling (Ainslie et al. 2023): target KV head g' is the mean of the
 * source key (value) maps of the query heads it serves, so a source whose
 * heads are equal within each target group converts exactly. The query and
 * output maps are copied. Why the mean: it is the least-squares common map of
 * a group in weight space (the Frobenius-nearest single map to the group's
 * maps), needs no calibration, and is what the GQA paper found best among
 * its simple choices; an activation-weighted choice does not change it (the
 * mean also minimises E ||(W_h - W) x||^2 summed over the group for any x). */
static int heads_convert(const al_attn_source *s, const al_attn_layer *L, double *k_err, double *v_err, al_err *err) {
    const al_config *c = L->cfg;
    const int H = c->num_heads, G = c->num_kv_heads, dh = c->head_dim, d = c->hidden_size, per = H / G;
    const size_t map = (size_t)dh * d;
    double *acc = malloc(sizeof(double) * map * 2);
    if (!acc) return al_errf(err, "out of memory");
    memcpy(L->w[W_Q], s->wq, sizeof(float) * H * map);
    memcpy(L->w[W_O], s->wo, sizeof(float) * H * map);
    for (int g = 0; g < G; g++) {
        memset(acc, 0, sizeof(double) * map * 2);
        for (int h = g * per; h < (g + 1) * per; h++) {
            const float *k = al_cv_head_k(s, h), *v = al_cv_head_v(s, h);
            for (size_t i = 0; i < map; i++) acc[i] += k[i], acc[map + i] += v[i];
        }
        for (size_t i = 0; i < 2 * map; i++) acc[i] /= per;
        for (size_t i = 0; i < map; i++) {
            L->w[W_K][(size_t)g * map + i] = (float)acc[i];
            L->w[W_V][(size_t)g * map + i] = (float)acc[map + i];
        }
        for (int h = g * per; h < (g + 1) * per; h++) {
            k_err[h] = al_cv_rel_err(al_cv_head_k(s, h), acc, map);
            v_err[h] = al_cv_rel_err(al_cv_head_v(s, h), acc + map, map);
        }
    }
    free(acc);
    return 0;
}

/* Quantised caches (kvq.h): the K heads as keys (a unit per KV head), the
 * V heads as values. */
static int gqa_cache_segments(const al_config *c, int latent, al_kv_seg *out) {
    const int kv = c->num_kv_heads * c->head_dim;
    (void)latent;
    out[0] = (al_kv_seg){0, kv, c->head_dim, AL_KV_SEG_KEY, 0};
    out[1] = (al_kv_seg){kv, kv, c->head_dim, AL_KV_SEG_VALUE, 0};
    return 2;
}

/* One implementation, three descriptors. */
#define HEADS_DESIGN(ops, nm, ttl, check, matches, title_fn, cv_shape, cv)                                                            \
    const al_attn_ops ops = {                                                                                          \
        .name = nm,                                                                                                    \
        .title = ttl,                                                                                                  \
        .hf_arch = "LlamaForCausalLM",                                                                                 \
        .hf_model_type = "llama",                                                                                      \
        .hf_matches = matches,                                                                                         \
        .head_widths = heads_widths,                                                                                   \
        .cache_formula = heads_cache_formula,                                                                          \
        .describe = heads_describe,                                                                                    \
        .figure_title = title_fn,                                                                                      \
        .qkv_bias = 1,                                                                                                 \
        .validate = check,                                                                                             \
        .validate_layer = heads_validate_layer,                                                                        \
        .params = heads_params,                                                                                        \
        .rope_dims = gqa_rope_dims,                                                                                    \
        .cache_values_per_token = gqa_cache,                                                                           \
        .saved_floats = gqa_saved,                                                                                     \
        .scratch_floats = gqa_scratch,                                                                                 \
        .forward = gqa_forward,                                                                                        \
        .backward = gqa_backward,                                                                                      \
        .decode = gqa_decode,                                                                                          \
        .cache_fill = gqa_cache_fill,                                                                                  \
        .head_maps = gqa_head_maps,                                                                                    \
        .head_qk = gqa_head_qk,                                                                                        \
        .convert_shape = cv_shape,                                                                                     \
        .convert = cv,                                                                                                 \
        .cache_segments = gqa_cache_segments,                                                                          \
        .score_shape = shape_of,                                                                                       \
    }

HEADS_DESIGN(al_attn_mha_ops, "mha", "MHA", mha_validate, mha_matches, mha_title, NULL, NULL);
HEADS_DESIGN(al_attn_gqa_ops, "gqa", "GQA", gqa_validate, gqa_matches, gqa_title, heads_convert_shape, heads_convert);
HEADS_DESIGN(al_attn_mqa_ops, "mqa", "MQA", mqa_validate, mqa_matches, mqa_title, heads_convert_shape, heads_convert);
