/*
 * mla.c: multi-head latent attention (MLA, DeepSeek-V2), with the tensor
 * names of Hugging Face DeepseekV2 (attention.md 3.2).
 *
 * d hidden, H heads, dn = qk_nope_head_dim, dr = qk_rope_head_dim,
 * dk = dn + dr, dv = v_head_dim, dc = kv_lora_rank, dq = q_lora_rank.
 *
 *   q = W_q x                          (dq = 0)  q_proj              [H*dk, d]
 *   q = W_qb RMSNorm_gq(W_qa x)        (dq > 0)  q_a_proj [dq, d], q_a_layernorm [dq], q_b_proj [H*dk, dq]
 *   q_h = [q_nope_h (dn); q_pe_h (dr)]           columns h*dk.. of q
 *   [c; k_pe] = W_kva x                          kv_a_proj_with_mqa  [dc+dr, d]
 *   c~ = RMSNorm_gkv(c)                          kv_a_layernorm      [dc]
 *   [k_nope_h; v_h] = [Wk_h; Wv_h] c~            kv_b_proj           [H*(dn+dv), dc]
 *                                                (head h: rows h*(dn+dv).. are Wk_h [dn, dc], then Wv_h [dv, dc])
 *   q_pe_h, k_pe <- interleaved RoPE at the token's position (pairs 2i, 2i+1)
 *   k_h = [k_nope_h; k_pe]                       one rope key shared by all heads
 *   o_h = sum_j p(q_h . k_h,j / sqrt(dk)) v_h,j   causal; p: the config's score
 *         function (attention.md 2), softmax by default
 *   y   = W_o concat_h(o_h)                      o_proj              [d, H*dv]
 * KV cache per token per layer: dc + dr values, [c~ | rotated k_pe].
 * YaRN rope scaling (DeepSeek-V2 releases; Hugging Face checkpoints only):
 * the rope table's frequencies are YaRN's and its cos/sin carry the factor
 * mscale(s, mscale) / mscale(s, mscale_all_dim) (nn/ops.c), so q_pe and
 * k_pe are scaled by it as transformers' DeepseekV2YarnRotaryEmbedding
 * does; the softmax scale is 1/sqrt(dk) x mscale(s, mscale_all_dim)^2
 * (softmax_scale), mscale(s, m) = 0.1 m ln s + 1.
 *
 * Training materialises every head's key and value (k [N, H*dk], v [N, H*dv])
 * and runs the shared kernels of score.c with G = H. The absorbed form would
 * share one key [c~; k_pe] and one value c~ across heads (MQA-like, G = 1),
 * but costs dc + dr + dc per (query, key, head) instead of dk + dv, plus
 * per-head products in and out of the latent space. Measured for one layer's
 * forward + backward at d=256, H=8, dn=32, dr=16, dv=32, dc=64, B=8, T=256
 * (16-core Xeon): materialised 70 / 18 / 11 ms at 1 / 4 / 16 threads,
 * absorbed 90 / 27 / 24 ms (1.3x / 1.5x / 2.1x slower).
 *
 * Precision. In BF16 mode the two up-projections out of a normalised latent
 * (kv = c~ W_kvb^T, q = qa~ W_qb^T, forward and backward) run as compensated
 * BF16 products (nn.h's al_bf16_split: three bf16 products on the matrix
 * units, about fp32's accuracy); every other product is plain BF16. Over
 * ten seeds of the quick study's MLA run, bf16 with these plain ended
 * +0.58 % above fp32 on average, compensated +0.16 % (lower than plain in 8
 * of 10 seeds; docs/study.md, session 39), for about 1.05-1.15x the bf16
 * step: the latent is rounded twice in a row (x W_kva, then c~ W_kvb)
 * where the other designs round once.
 *
 * The matrices are read through weight references (al_mla_wr): fp32 arena
 * tensors for attnlab's own models, memory-mapped BF16/F16/F32 ones for a
 * Hugging Face checkpoint (inference only); the two gains are always fp32.
 *
 * Decode is absorbed and reads only the cache (no past key or value is ever
 * rebuilt):
 *   q~_h = Wk_h^T q_nope_h (dc)
 *   s_j  = (q~_h . c~_j + q_pe_h . k_pe_j) / sqrt(dk),  p = softmax(s) over j <= pos
 *   o_h  = Wv_h (sum_j p_j c~_j)
 * Stacking [q~_h; q_pe_h] for all heads turns the scores into one product with
 * the cache rows [c~_j | k_pe_j] and the latent sums into a second one, per
 * chunk of keys. At context 4096 with 8 layers' caches (same shapes as above)
 * this takes 2.3 / 0.93 / 0.56 ms per token at 1 / 4 / 16 threads against
 * 7.8 / 1.9 / 0.84 ms for a decode over materialised per-head K/V (8x the
 * cache) written the same way.
 */
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "convert.h"

/* The shapes of one layer, from the config. */
typedef struct mla_dims {
    int d, H, dn, dr, dk, dv, dc, dq;
    int qw;  /* H*dk: width of q and of the materialised k */
    int kvw; /* H*(dn+dv): width of kv_b_proj's output */
    int ow;  /* H*dv: width of v and o */
    int vpt; /* dc+dr: cache values per token */
} mla_dims;

static mla_dims dims_of(const al_config *c) {
    mla_dims D;
    D.d = c->hidden_size;
    D.H = c->num_heads;
    D.dn = c->qk_nope_head_dim;
    D.dr = c->qk_rope_head_dim;
    D.dk = D.dn + D.dr;
    D.dv = c->v_head_dim;
    D.dc = c->kv_lora_rank;
    D.dq = c->q_lora_rank;
    D.qw = D.H * D.dk;
    D.kvw = D.H * (D.dn + D.dv);
    D.ow = D.H * D.dv;
    D.vpt = D.dc + D.dr;
    return D;
}

/* Named views of a layer's tensors (weights or gradients), in params() order. */
typedef struct mla_w {
    float *q, *qa, *qa_norm, *qb, *kva, *kv_norm, *kvb, *o;
} mla_w;

static mla_w views(const al_config *c, float *const p[]) {
    mla_w v = {0};
    int i = 0;
    if (c->q_lora_rank > 0) {
        v.qa = p[i++];
        v.qa_norm = p[i++];
        v.qb = p[i++];
    } else {
        v.q = p[i++];
    }
    v.kva = p[i++];
    v.kv_norm = p[i++];
    v.kvb = p[i++];
    v.o = p[i++];
    return v;
}

/* The matrices of a layer as weight references (products of nn/wmat.c), in
 * params() order as views(); .p is NULL for an absent one. */
typedef struct mla_wr {
    al_wref q, qa, qb, kva, kvb, o;
} mla_wr;

static mla_wr wrefs(const al_attn_layer *L) {
    mla_wr r = {{0}};
    int i = 0;
    if (L->cfg->q_lora_rank > 0) {
        r.qa = al_attn_w(L, i++);
        i++; /* q_a_layernorm: a gain */
        r.qb = al_attn_w(L, i++);
    } else {
        r.q = al_attn_w(L, i++);
    }
    r.kva = al_attn_w(L, i++);
    i++; /* kv_a_layernorm */
    r.kvb = al_attn_w(L, i++);
    r.o = al_attn_w(L, i++);
    return r;
}

static int mla_validate(const al_config *c, al_err *err) {
    if (c->kv_lora_rank <= 0)
        return al_errf(err, "invalid config: kv_lora_rank must be positive, got %d", c->kv_lora_rank);
    if (c->qk_rope_head_dim <= 0)
        return al_errf(err, "invalid config: qk_rope_head_dim must be positive, got %d", c->qk_rope_head_dim);
    if (c->qk_rope_head_dim % 2)
        return al_errf(err, "invalid config: qk_rope_head_dim must be even for RoPE, got %d", c->qk_rope_head_dim);
    /* dn = 0 is allowed: keys are then the shared rope key alone (HF accepts it too) */
    if (c->qk_nope_head_dim < 0)
        return al_errf(err, "invalid config: qk_nope_head_dim must be non-negative, got %d", c->qk_nope_head_dim);
    if (c->v_head_dim <= 0)
        return al_errf(err, "invalid config: v_head_dim must be positive, got %d", c->v_head_dim);
    if (c->q_lora_rank < 0)
        return al_errf(err, "invalid config: q_lora_rank must be non-negative (0: no query compression), got %d",
                       c->q_lora_rank);
    if (c->num_kv_heads != c->num_heads)
        return al_errf(err, "invalid config: attention 'mla' needs num_key_value_heads == num_attention_heads (%d), got %d",
                       c->num_heads, c->num_kv_heads);
    /* keep every width (and the int strides handed to BLAS) far from overflow */
    const int lim = 65536;
    if (c->kv_lora_rank > lim || c->q_lora_rank > lim || c->qk_nope_head_dim > lim || c->qk_rope_head_dim > lim ||
        c->v_head_dim > lim || (long)c->num_heads * (c->qk_nope_head_dim + c->qk_rope_head_dim + c->v_head_dim) > (1L << 20))
        return al_errf(err, "invalid config: MLA sizes are beyond what attnlab supports");
    return 0;
}

/* The matrices' gradients are written whole by mla_backward (one product
 * each; kv_a_proj's two, into its two row ranges). */
static int mla_params(const al_config *c, al_param_spec *out) {
    const mla_dims D = dims_of(c);
    const float std = 0.02f, std_out = 0.02f / sqrtf(2.0f * (float)c->num_layers); /* GPT-2 residual scaling */
    int n = 0;
    if (D.dq > 0) {
        out[n++] = (al_param_spec){"q_a_proj.weight", 2, {D.dq, D.d}, AL_INIT_NORMAL, std, 1, 1};
        out[n++] = (al_param_spec){"q_a_layernorm.weight", 1, {D.dq, 1}, AL_INIT_ONES, 0.0f, 0};
        out[n++] = (al_param_spec){"q_b_proj.weight", 2, {D.qw, D.dq}, AL_INIT_NORMAL, std, 1, 1};
    } else {
        out[n++] = (al_param_spec){"q_proj.weight", 2, {D.qw, D.d}, AL_INIT_NORMAL, std, 1, 1};
    }
    out[n++] = (al_param_spec){"kv_a_proj_with_mqa.weight", 2, {D.vpt, D.d}, AL_INIT_NORMAL, std, 1, 1};
    out[n++] = (al_param_spec){"kv_a_layernorm.weight", 1, {D.dc, 1}, AL_INIT_ONES, 0.0f, 0};
    out[n++] = (al_param_spec){"kv_b_proj.weight", 2, {D.kvw, D.dc}, AL_INIT_NORMAL, std, 1, 1};
    out[n++] = (al_param_spec){"o_proj.weight", 2, {D.d, D.ow}, AL_INIT_NORMAL, std_out, 1, 1};
    return n;
}

/* Only the rope parts rotate: one table of dimension dr. */
static void mla_rope_dims(const al_config *c, int dims[2]) {
    dims[0] = c->qk_rope_head_dim;
    dims[1] = 0;
}

static size_t mla_cache(const al_config *c) { return (size_t)c->kv_lora_rank + (size_t)c->qk_rope_head_dim; }

/* What backward needs, per layer, for N = B*T tokens:
 *   q [N, H*dk] (rotated) | k [N, H*dk] | v [N, H*dv] | o [N, H*dv] | lse [B, H, T]
 *   | c [N, dc] (before the norm) | c~ [N, dc] | rstd_c [N]
 *   | (dq > 0) qa [N, dq] | qa~ [N, dq] | rstd_q [N] */
typedef struct mla_saved {
    float *q, *k, *v, *o, *lse, *c, *cn, *rstd_c, *qa, *qan, *rstd_q;
} mla_saved;

/* Lays the saved block out from `base` (if non-NULL) and returns its size in
 * floats; offsets are computed before any pointer exists so sizing needs none. */
static size_t saved_layout(const mla_dims *D, int B, int T, float *base, mla_saved *S) {
    const size_t N = (size_t)B * T;
    const size_t sizes[] = {N * D->qw, N * D->qw, N * D->ow, N * D->ow, (size_t)B * D->H * T, N * D->dc, N * D->dc, N,
                            N * D->dq, N * D->dq, D->dq > 0 ? N : 0};
    float **ptrs[] = {&S->q, &S->k, &S->v, &S->o, &S->lse, &S->c, &S->cn, &S->rstd_c, &S->qa, &S->qan, &S->rstd_q};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (base) *ptrs[i] = base + off;
        off += sizes[i];
    }
    return off;
}

static size_t mla_saved_floats(const al_config *c, int B, int T) {
    const mla_dims D = dims_of(c);
    mla_saved S;
    return saved_layout(&D, B, T, NULL, &S);
}

/* The softmax scale: 1/sqrt(dn + dr), and with YaRN rope scaling times
 * mscale(factor, mscale_all_dim)^2 when mscale_all_dim is set, as
 * DeepseekV2Attention corrects its softmax_scale (the rope table's own
 * factor, al_rope_attention_factor, scales only the rope parts). */
static float softmax_scale(const al_config *c, const mla_dims *D) {
    const al_rope_scaling *r = &c->rope_scaling;
    if (r->type != AL_ROPE_YARN || r->mscale_all_dim == 0) return 1.0f / sqrtf((float)D->dk);
    const double m = al_rope_yarn_mscale(r->factor, r->mscale_all_dim);
    return (float)(m * m / sqrt((double)D->dk));
}

/* The absorbed decode as attention of H heads over one shared group: keys
 * are cache rows [c~; k_pe] (dc + dr), values their latent part c~ (dc);
 * scale 1/sqrt(dn + dr) as in training. */
static al_attn_shape decode_shape(const al_config *c, const mla_dims *D, int n) {
    al_attn_shape s = {1, n, D->H, 1, D->vpt, D->dc, 0, 0, 0, 0, softmax_scale(c, D)};
    al_attn_set_score(&s, c);
    return s;
}

/* forward:  kv [N, H*(dn+dv)] | k_pe [N, dr]
 * backward: do [N, H*dv] | dq [N, H*dk] | dk [N, H*dk] | dv [N, H*dv] | dkv [N, H*(dn+dv)] | dk_pe [N, dr]
 *           | dc~ [N, dc] | dc [N, dc] | dqa~ [N, dq] | dqa [N, dq]
 * decode:   q [H*dk] | qa [dq] | qabs [H, dc+dr] | u [H, dc] | o [H*dv] | entry [dc+dr]
 *           | al_attn_decode's workspace */
static size_t mla_scratch(const al_config *c, int B, int T) {
    const mla_dims D = dims_of(c);
    const size_t N = (size_t)B * T;
    size_t fwd = N * (D.kvw + D.dr);
    size_t bwd = N * ((size_t)2 * D.ow + 2 * (size_t)D.qw + D.kvw + D.dr + 2 * (size_t)D.dc + 2 * (size_t)D.dq);
    const al_attn_shape ds = decode_shape(c, &D, c->max_position);
    size_t dec = (size_t)D.qw + D.dq + (size_t)D.H * D.vpt + (size_t)D.H * D.dc + D.ow + D.vpt +
                 al_attn_decode_scratch(&ds, 0, c->max_position);
    size_t m = fwd > bwd ? fwd : bwd;
    return m > dec ? m : dec;
}

static al_attn_shape shape_of(const al_config *c, const mla_dims *D, int B, int T) {
    al_attn_shape s = {B, T, D->H, D->H, D->dk, D->dv, D->qw, D->qw, D->ow, D->ow, softmax_scale(c, D)};
    al_attn_set_score(&s, c);
    return s;
}

/* The score kernels' shape for B x T tokens (al_attn_ops.score_shape). */
static al_attn_shape mla_score_shape(const al_config *c, int B, int T) {
    const mla_dims D = dims_of(c);
    return shape_of(c, &D, B, T);
}

/* Rotates the rope part of every head's query (or of its gradient, sign -1).
 * q[N, H*dk]: head h's rope part is columns h*dk+dn .. h*dk+dk. */
static void rope_queries(const mla_dims *D, float *q, int N, int T, const al_rope_table *rope, int sign) {
    for (int h = 0; h < D->H; h++)
        al_rope_interleaved(q + (size_t)h * D->dk + D->dn, N, T, 0, 1, D->qw, rope, sign);
}

/* Builds the per-head keys and values from kv_b_proj's output and the shared
 * rotated rope key:
 *   kv[N, H*(dn+dv)], kpe[N, dr] -> k[N, H*dk] (k_h = [k_nope_h; k_pe]), v[N, H*dv] */
static void split_kv(const mla_dims *D, int N, const float *kv, const float *kpe, float *k, float *v) {
    const int H = D->H, dn = D->dn, dr = D->dr, dk = D->dk, dv = D->dv;
#pragma omp parallel for schedule(static) if ((long)N * (D->qw + D->ow) > 65536)
    for (int n = 0; n < N; n++) {
        const float *kvr = kv + (size_t)n * D->kvw, *pr = kpe + (size_t)n * dr;
        float *kr = k + (size_t)n * D->qw, *vr = v + (size_t)n * D->ow;
        for (int h = 0; h < H; h++) {
            memcpy(kr + (size_t)h * dk, kvr + (size_t)h * (dn + dv), sizeof(float) * dn);
            memcpy(kr + (size_t)h * dk + dn, pr, sizeof(float) * dr);
            memcpy(vr + (size_t)h * dv, kvr + (size_t)h * (dn + dv) + dn, sizeof(float) * dv);
        }
    }
}

/* The adjoint of split_kv: dk[N, H*dk], dv[N, H*dv] -> dkv[N, H*(dn+dv)]
 * (written) and dkpe[N, dr] (written) = sum over heads of their rope-key
 * gradients, heads added in order 0..H-1 so the bits do not depend on threads. */
static void merge_kv(const mla_dims *D, int N, const float *dk, const float *dv, float *dkv, float *dkpe) {
    const int H = D->H, dn = D->dn, dr = D->dr, dkw = D->dk, dvw = D->dv;
#pragma omp parallel for schedule(static) if ((long)N * (D->qw + D->ow) > 65536)
    for (int n = 0; n < N; n++) {
        const float *kr = dk + (size_t)n * D->qw, *vr = dv + (size_t)n * D->ow;
        float *kvr = dkv + (size_t)n * D->kvw, *pr = dkpe + (size_t)n * dr;
        for (int e = 0; e < dr; e++) pr[e] = 0.0f;
        for (int h = 0; h < H; h++) {
            const float *kh = kr + (size_t)h * dkw;
            memcpy(kvr + (size_t)h * (dn + dvw), kh, sizeof(float) * dn);
            memcpy(kvr + (size_t)h * (dn + dvw) + dn, vr + (size_t)h * dvw, sizeof(float) * dvw);
            for (int e = 0; e < dr; e++) pr[e] += kh[dn + e];
        }
    }
}

/* x[N, d] (normed layer input) -> y[N, d]; keeps in `saved` what backward
 * re-reads (see saved_layout) so it recomputes nothing but attention weights. */
static void mla_forward(const al_attn_layer *L, al_wref x, float *y, float *saved, float *scratch, int B, int T) {
    const al_config *c = L->cfg;
    const mla_dims D = dims_of(c);
    const int N = B * T, d = D.d;
    const mla_w W = views(c, L->w);
    const mla_wr R = wrefs(L);
    mla_saved S;
    saved_layout(&D, B, T, saved, &S);
    float *kv = scratch, *kpe = kv + (size_t)N * D.kvw;
    /* queries: q[N, H*dk] */
    if (D.dq > 0) {
        al_matmul_x(S.qa, D.dq, x, d, R.qa, N, d, D.dq, 0);              /* qa[N, dq] = x W_qa^T */
        al_rmsnorm_fwd(S.qan, S.rstd_q, S.qa, W.qa_norm, N, D.dq, c->rms_norm_eps);
        const int was = al_bf16_split(1); /* out of a normalised latent (header) */
        al_matmul(S.q, D.qw, S.qan, D.dq, R.qb, N, D.dq, D.qw, 0);       /* q[N, H*dk] = qa~ W_qb^T */
        al_bf16_split(was);
    } else {
        al_matmul_x(S.q, D.qw, x, d, R.q, N, d, D.qw, 0);                /* q[N, H*dk] = x W_q^T */
    }
    rope_queries(&D, S.q, N, T, L->rope, +1);
    /* rows [0, dc) and [dc, dc+dr) of W_kva are two contiguous matrices: two
     * products give c and k_pe as contiguous rows, as the norm and RoPE want */
    al_matmul_x(S.c, D.dc, x, d, R.kva, N, d, D.dc, 0);                   /* c[N, dc] */
    al_matmul_x(kpe, D.dr, x, d, al_wref_at(R.kva, (size_t)D.dc * d), N, d, D.dr, 0); /* k_pe[N, dr] */
    al_rmsnorm_fwd(S.cn, S.rstd_c, S.c, W.kv_norm, N, D.dc, c->rms_norm_eps);
    al_rope_interleaved(kpe, N, T, 0, 1, D.dr, L->rope, +1);
    int was = al_bf16_split(1); /* out of the normalised latent (header) */
    al_matmul(kv, D.kvw, S.cn, D.dc, R.kvb, N, D.dc, D.kvw, 0);         /* kv[N, H*(dn+dv)] = c~ W_kvb^T */
    al_bf16_split(was);
    split_kv(&D, N, kv, kpe, S.k, S.v);
    al_attn_shape s = shape_of(c, &D, B, T);
    al_attn_fwd(&s, S.q, S.k, S.v, S.o, S.lse);
    al_matmul(y, d, S.o, D.ow, R.o, N, D.ow, d, 0);                     /* y[N, d] = o W_o^T */
}

/* dy[N, d] -> dx[N, d] and L->g[], both accumulated; the rope key's gradient
 * is the sum over heads (merge_kv), as it is one tensor shared by all. */
static void mla_backward(const al_attn_layer *L, al_wref x, const float *dy, float *dx, const float *saved,
                         float *scratch, int B, int T) {
    const al_config *c = L->cfg;
    const mla_dims D = dims_of(c);
    const int N = B * T, d = D.d;
    const size_t Nz = (size_t)N;
    const mla_w W = views(c, L->w), G = views(c, L->g);
    mla_saved S;
    saved_layout(&D, B, T, (float *)saved, &S);
    float *d_o = scratch, *dq = d_o + Nz * D.ow, *dk = dq + Nz * D.qw, *dv = dk + Nz * D.qw;
    float *dkv = dv + Nz * D.ow, *dkpe = dkv + Nz * D.kvw, *dcn = dkpe + Nz * D.dr, *dc = dcn + Nz * D.dc;
    float *dqan = dc + Nz * D.dc, *dqa = dqan + Nz * D.dq;
    /* do, dq, dk, dv are contiguous: one clear for the buffers that accumulate */
    memset(d_o, 0, sizeof(float) * Nz * (2 * (size_t)D.ow + 2 * (size_t)D.qw));
    const int add_w = !L->grads_unset; /* the matrices' gradients: written after al_model_zero_grads */
    al_linear_bwd_into(d_o, 1, G.o, add_w, dy, S.o, W.o, N, D.ow, d);
    al_attn_shape s = shape_of(c, &D, B, T);
    al_attn_bwd(&s, S.q, S.k, S.v, S.o, S.lse, d_o, dq, dk, dv);
    rope_queries(&D, dq, N, T, L->rope, -1);
    merge_kv(&D, N, dk, dv, dkv, dkpe);
    al_rope_interleaved(dkpe, N, T, 0, 1, D.dr, L->rope, -1);
    /* latent path: dkv -> dc~ -> dc (through the norm) */
    memset(dcn, 0, sizeof(float) * Nz * 2 * D.dc);
    int was = al_bf16_split(1);
    al_linear_bwd_into(dcn, 1, G.kvb, add_w, dkv, S.cn, W.kvb, N, D.dc, D.kvw);
    al_bf16_split(was);
    al_rmsnorm_bwd(dc, G.kv_norm, dcn, S.c, W.kv_norm, S.rstd_c, N, D.dc);
    al_linear_bwd_ref(dx, 1, G.kva, add_w, al_wref_f32(dc), x, W.kva, N, d, D.dc);
    al_linear_bwd_ref(dx, 1, G.kva + (size_t)D.dc * d, add_w, al_wref_f32(dkpe), x, W.kva + (size_t)D.dc * d, N, d,
                      D.dr);
    /* query path */
    if (D.dq > 0) {
        memset(dqan, 0, sizeof(float) * Nz * 2 * D.dq);
        was = al_bf16_split(1);
        al_linear_bwd_into(dqan, 1, G.qb, add_w, dq, S.qan, W.qb, N, D.dq, D.qw);
        al_bf16_split(was);
        al_rmsnorm_bwd(dqa, G.qa_norm, dqan, S.qa, W.qa_norm, S.rstd_q, N, D.dq);
        al_linear_bwd_ref(dx, 1, G.qa, add_w, al_wref_f32(dqa), x, W.qa, N, d, D.dq);
    } else {
        al_linear_bwd_ref(dx, 1, G.q, add_w, al_wref_f32(dq), x, W.q, N, d, D.qw);
    }
}

/* One token, absorbed. x[d] -> y[d]; appends [c~ | k_pe] at cache + pos*(dc+dr)
 * and reads entries [0, pos]. The absorbed queries qabs_h = [W_UK,h^T q_nope_h;
 * q_pe_h] attend over the latent cache as H heads sharing one key/value group
 * (al_attn_decode, decode.c: every cache row is read once for all heads);
 * the latent outputs u_h are then lifted by W_UV,h. */
/* The forward saved c~ [T, dc] (normalised) and k [T, H*dk] whose rows end
 * in the rotated k_pe (the same dr values in every head): a cache row is
 * [c~ | k_pe], as mla_decode appends it. */
static void mla_cache_fill(const al_attn_layer *L, const float *saved, int T, al_kv cache) {
    const mla_dims D = dims_of(L->cfg);
    mla_saved S;
    saved_layout(&D, 1, T, (float *)saved, &S);
    for (int t = 0; t < T; t++) {
        al_kv_store(cache, (size_t)t * D.vpt, S.cn + (size_t)t * D.dc, (size_t)D.dc);
        al_kv_store(cache, (size_t)t * D.vpt + D.dc, S.k + (size_t)t * D.qw + D.dn, (size_t)D.dr);
    }
}

static void mla_decode(const al_attn_layer *L, const float *x, float *y, al_kv cache, int pos, float *scratch) {
    const al_config *c = L->cfg;
    const mla_dims D = dims_of(c);
    const int d = D.d, H = D.H, dn = D.dn, dr = D.dr, dk = D.dk, dv = D.dv, dc = D.dc, vpt = D.vpt;
    const al_attn_shape fn = decode_shape(c, &D, pos + 1);
    const mla_w W = views(c, L->w);
    const mla_wr R = wrefs(L);
    float *q = scratch, *qa = q + D.qw, *qabs = qa + D.dq, *u = qabs + (size_t)H * vpt, *o = u + (size_t)H * dc;
    float *entry = o + D.ow, *work = entry + vpt;
    /* queries: q[H*dk], rope parts rotated (rows = heads, all at position pos) */
    if (D.dq > 0) {
        al_matvec(qa, x, R.qa, D.dq, d, 0);
        al_rmsnorm_fwd(qa, NULL, qa, W.qa_norm, 1, D.dq, c->rms_norm_eps);
        al_matvec(q, qa, R.qb, D.qw, D.dq, 0);
    } else {
        al_matvec(q, x, R.q, D.qw, d, 0);
    }
    al_rope_interleaved(q + dn, H, 1, pos, 1, dk, L->rope, +1);
    /* the cache entry [c~; k_pe]: W_kva x with c normalised and k_pe rotated */
    al_matvec(entry, x, R.kva, vpt, d, 0);
    al_rmsnorm_fwd(entry, NULL, entry, W.kv_norm, 1, dc, c->rms_norm_eps);
    al_rope_interleaved(entry + dc, 1, 1, pos, 1, vpt, L->rope, +1);
    al_kv_store(cache, (size_t)pos * vpt, entry, (size_t)vpt);
    /* qabs[H, dc+dr]: row h = [Wk_h^T q_nope_h (dc); q_pe_h (dr)], laid out as a cache row */
    for (int h = 0; h < H; h++) {
        float *qh = qabs + (size_t)h * vpt;
        if (dn > 0) /* BLAS returns early on an empty product without clearing y */
            al_matvec_t(qh, q + (size_t)h * dk, al_wref_at(R.kvb, (size_t)h * (dn + dv) * dc), dn, dc, 0);
        else
            memset(qh, 0, sizeof(float) * dc);
        memcpy(qh + dc, q + (size_t)h * dk + dn, sizeof(float) * dr);
    }
    /* u[H, dc]: attention over the latent cache (keys [c~; k_pe], values c~) */
    const al_decode_view view = {cache, (size_t)vpt, 0, 0, 0, 0, 0, 0, 0, 0};
    al_attn_decode(&fn, qabs, &view, pos + 1, u, work);
    /* o_h[dv] = Wv_h[dv, dc] u_h */
    for (int h = 0; h < H; h++)
        al_matvec(o + (size_t)h * dv, u + (size_t)h * dc, al_wref_at(R.kvb, ((size_t)h * (dn + dv) + dn) * dc), dv, dc,
                  0);
    al_matvec(y, o, R.o, d, D.ow, 0);
}

/* out[rows, d] = A[rows, n] diag(g) B[n, d] in double (A's rows lda apart,
 * A and B weight references of any dtype): a map through a low-rank
 * bottleneck whose RMSNorm contributes its gain. */
static void gain_product(double *out, al_wref A, int lda, int rows, int n, const float *g, al_wref B, int d) {
    for (int a = 0; a < rows; a++) {
        double *o = out + (size_t)a * d;
        for (int e = 0; e < d; e++) o[e] = 0.0;
        for (int t = 0; t < n; t++) {
            const double c = (double)al_wget(A, (size_t)a * lda + t) * (double)g[t];
            for (int e = 0; e < d; e++) o[e] += c * (double)al_wget(B, (size_t)t * d + e);
        }
    }
}

/* Head-similarity maps (attention.md 4), d_qk = dn + dr, in double:
 *   key   rows [Wk_h diag(g_kv) W_dkv (dn); W_kr (dr)]    Wk_h: kv_b_proj rows h*(dn+dv).. [dn, dc];
 *         W_dkv, W_kr: kv_a_proj_with_mqa rows 0..dc and dc..dc+dr [., d]
 *   query q_proj rows h*dk.. [dk, d]                       (dq = 0)
 *         Wqb_h diag(g_q) W_qa  Wqb_h: q_b_proj rows h*dk.. [dk, dq], W_qa [dq, d]   (dq > 0)
 * The RMSNorms enter through their gains only (their 1/rms is a per-token
 * scalar), and the interleaved RoPE of the pe parts is ignored (position 0). */
static int mla_head_maps(const al_attn_layer *L, int h, double *wq, double *wk) {
    const mla_dims D = dims_of(L->cfg);
    if (!wq || !wk) return D.dk; /* the size query (attn.h: both or neither) */
    const mla_w w = views(L->cfg, L->w);
    const mla_wr R = wrefs(L);
    const size_t d = (size_t)D.d;
    if (D.dq > 0)
        gain_product(wq, al_wref_at(R.qb, (size_t)h * D.dk * D.dq), D.dq, D.dk, D.dq, w.qa_norm, R.qa, D.d);
    else
        al_wread_f64(wq, R.q, (size_t)h * D.dk * d, (size_t)D.dk * d);
    gain_product(wk, al_wref_at(R.kvb, (size_t)h * (D.dn + D.dv) * D.dc), D.dc, D.dn, D.dc, w.kv_norm, R.kva, D.d);
    al_wread_f64(wk + (size_t)D.dn * d, R.kva, (size_t)D.dc * d, (size_t)D.dr * d);
    return D.dk;
}

/* q, k of head h: the materialised, rotated [nope | rope] rows saved by the
 * forward; with YaRN's softmax correction q is scaled so that q.k / sqrt(dk)
 * (what attention maps compute) is the score the forward used */
static int mla_head_qk(const al_attn_layer *L, const float *saved, int B, int T, int b, int h, float *q, float *k) {
    const mla_dims D = dims_of(L->cfg);
    mla_saved S;
    saved_layout(&D, B, T, (float *)saved, &S);
    /* attention maps score q.k / sqrt(dk): with YaRN's softmax correction the
     * queries carry the rest of the scale (exactly 1 without it: not applied) */
    const float qs = softmax_scale(L->cfg, &D) * sqrtf((float)D.dk);
    const int corrected = L->cfg->rope_scaling.type == AL_ROPE_YARN && L->cfg->rope_scaling.mscale_all_dim != 0;
    for (int t = 0; q && t < T; t++) {
        const size_t row = ((size_t)b * T + t) * D.qw + (size_t)h * D.dk;
        memcpy(q + (size_t)t * D.dk, S.q + row, sizeof(float) * D.dk);
        memcpy(k + (size_t)t * D.dk, S.k + row, sizeof(float) * D.dk);
        for (int i = 0; corrected && i < D.dk; i++) q[(size_t)t * D.dk + i] *= qs;
    }
    return D.dk;
}

/* Quantised caches (kvq.h): k_pe is a key; the latent c~, key and value
 * at once, is quantised per channel like a key (default) or per token like
 * a value. */
static int mla_cache_segments(const al_config *c, int latent, al_kv_seg *out) {
    const int dc = c->kv_lora_rank, dr = c->qk_rope_head_dim;
    /* the latent is key and value at once: read as values too (dual) */
    out[0] = (al_kv_seg){0, dc, dc, latent == AL_KVQ_LATENT_TOKEN ? AL_KV_SEG_VALUE : AL_KV_SEG_KEY, 1};
    out[1] = (al_kv_seg){dc, dr, dr, AL_KV_SEG_KEY, 0};
    return 2;
}

/* ---- descriptor ---- */

/* DeepseekV2's keys; q_lora_rank 0 (no query compression) is saved as null as HF does */
static const al_config_field mla_fields[] = {
    AL_CONFIG_FIELD(kv_lora_rank, AL_CF_INT, "kv_lora_rank", "kv_lora_rank", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,
                    "MLA: latent rank d_c (default hidden/4)"),
    AL_CONFIG_FIELD(q_lora_rank, AL_CF_INT, "q_lora_rank", "q_lora_rank", AL_CF_TOP, AL_CF_ALWAYS,
                    AL_CF_FLAG | AL_CF_NULL_IF_ZERO, "MLA: query latent rank (default 0: no query compression)"),
    AL_CONFIG_FIELD(qk_nope_head_dim, AL_CF_INT, "qk_nope_dim", "qk_nope_head_dim", AL_CF_TOP, AL_CF_ALWAYS,
                    AL_CF_FLAG, "MLA: per-head key dims without RoPE (default head dim)"),
    AL_CONFIG_FIELD(qk_rope_head_dim, AL_CF_INT, "qk_rope_dim", "qk_rope_head_dim", AL_CF_TOP, AL_CF_ALWAYS,
                    AL_CF_FLAG, "MLA: shared RoPE key dims (default head dim / 2)"),
    AL_CONFIG_FIELD(v_head_dim, AL_CF_INT, "v_head_dim", "v_head_dim", AL_CF_TOP, AL_CF_ALWAYS, AL_CF_FLAG,
                    "MLA: per-head value dims (default head dim)"),
};
enum { F_KV_LORA, F_Q_LORA, F_NOPE, F_ROPE, F_V };

/* Defaults from the head dim d_h the shared shape gives (hidden / heads):
 * dn = dv = d_h, dr = d_h / 2 (even), d_c = hidden / 4, no query latent;
 * then the key width is dn + dr and every head has its own key and value. */
static void mla_derive(al_config *c, const unsigned char *given) {
    const int dh = c->head_dim;
    if (!given[F_NOPE]) c->qk_nope_head_dim = dh;
    if (!given[F_ROPE]) c->qk_rope_head_dim = (dh / 2 + 1) / 2 * 2;
    if (!given[F_V]) c->v_head_dim = dh;
    if (!given[F_KV_LORA]) c->kv_lora_rank = c->hidden_size / 4;
    if (!given[F_Q_LORA]) c->q_lora_rank = 0;
    c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
    c->num_kv_heads = c->num_heads; /* HF DeepseekV2 writes H */
}

static void mla_widths(const al_config *c, int *dk, int *dv) {
    *dk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    *dv = c->v_head_dim;
}

static void mla_cache_formula(const al_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "d_c %d + d_r %d (latent + shared RoPE key)", c->kv_lora_rank, c->qk_rope_head_dim);
}

static void mla_describe(const al_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "mla attention (%d heads; d_c %d, q rank %d, key dims %d + %d RoPE, value dims %d)", c->num_heads,
             c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim);
}

static void mla_title(const al_config *c, char *buf, size_t cap) { snprintf(buf, cap, "MLA"); }

/* ---- conversion from MHA/GQA (convert.h, docs/convert.md), after MHA2MLA ----
 * The source's head of d_h dims (rotate-half RoPE, pairs (j, j + d_h/2) at
 * frequency theta^(-2j/d_h)) becomes dn = d_h - dr dims without RoPE and dr
 * dims of RoPE, so the key width and the softmax scale stay 1/sqrt(d_h), and
 * dv = d_h. attnlab's MLA rotates its dr dims with its own table (interleaved
 * pairs (2i, 2i+1) at theta'^(-2i/dr)), so the dr/2 pairs kept rotated must
 * be evenly spaced from pair 0, j_i = s i: then theta' = theta^(s dr/d_h)
 * gives each exactly its source frequency. Of the strides s that fit
 * (s (dr/2 - 1) <= d_h/2 - 1), the one whose pairs carry most of q.k on the
 * calibration text is kept (MHA2MLA's 2-norm criterion: the mean over tokens
 * of ||q_h,j|| ||k_h,j||, summed over heads and layers; a pair's norm does
 * not depend on its rotation). */

/* the source pair of MLA RoPE pair i for stride s */
static int rope_pair(int i, int s) { return i * s; }

/* the largest stride whose dr/2 pairs fit in the source's d_h/2 */
static int max_stride(int dh, int dr) { return dr / 2 > 1 ? (dh / 2 - 1) / (dr / 2 - 1) : 1; }

/* crit[dh/2] += mean over tokens of ||q_h,j|| ||k_h,j|| of one source layer, summed over heads */
static int pair_criterion(const al_attn_source *s, double *crit, al_err *err) {
    const al_config *c = s->cfg;
    const int H = c->num_heads, G = c->num_kv_heads, dh = c->head_dim, d = c->hidden_size, half = dh / 2;
    const int n = s->n < 2048 ? (int)s->n : 2048;
    float *q = malloc(sizeof(float) * n * H * dh), *k = malloc(sizeof(float) * n * G * dh);
    if (!q || !k) {
        free(q);
        free(k);
        return al_errf(err, "out of memory");
    }
    al_sgemm(0, 1, n, H * dh, d, 1.0f, s->x, d, s->wq, d, 0.0f, q, H * dh);
    al_sgemm(0, 1, n, G * dh, d, 1.0f, s->x, d, s->wk, d, 0.0f, k, G * dh);
    for (int h = 0; h < H; h++) {
        const int g = h / (H / G);
        for (int j = 0; j < half; j++) {
            double sum = 0;
            for (int t = 0; t < n; t++) {
                const float *qh = q + (size_t)t * H * dh + (size_t)h * dh, *kg = k + (size_t)t * G * dh + (size_t)g * dh;
                sum += sqrt((double)qh[j] * qh[j] + (double)qh[j + half] * qh[j + half]) *
                       sqrt((double)kg[j] * kg[j] + (double)kg[j + half] * kg[j + half]);
            }
            crit[j] += n ? sum / n : 0;
        }
    }
    free(q);
    free(k);
    return 0;
}

/* The MLA shape of a converted MHA/GQA: dr (--qk-rope-dim, default the
 * design's d_h/2 rounded to even) even in 2..d_h, dn = d_h - dr and dv = d_h
 * (given values must agree), no query latent, d_c (--kv-lora-rank, default
 * hidden/4) at most min(hidden, H (dn + dv)) (a larger latent has nothing
 * more to hold). With the layers, rope_theta = theta^(s dr/d_h) for the
 * stride s chosen by pair_criterion. */
static int mla_convert_shape(const al_attn_source *layers, const al_config *src, al_config *dst,
                             const unsigned char *given, al_err *err) {
    const int dh = src->head_dim;
    if (!given[F_ROPE]) dst->qk_rope_head_dim = (dh / 2 + 1) / 2 * 2;
    const int dr = dst->qk_rope_head_dim;
    if (dr <= 0 || dr % 2 || dr > dh)
        return al_errf(err, "--qk-rope-dim must be even and in 2..%d (the source's head_dim), got %d", dh, dr);
    if (given[F_NOPE] && dst->qk_nope_head_dim != dh - dr)
        return al_errf(err, "--qk-nope-dim must be head_dim - qk_rope_dim = %d for a conversion, got %d", dh - dr,
                       dst->qk_nope_head_dim);
    if (given[F_V] && dst->v_head_dim != dh)
        return al_errf(err, "--v-head-dim must be the source's head_dim %d for a conversion, got %d", dh, dst->v_head_dim);
    if (given[F_Q_LORA] && dst->q_lora_rank != 0)
        return al_errf(err, "--q-lora-rank must be 0 for a conversion (the source's queries are kept), got %d",
                       dst->q_lora_rank);
    dst->qk_nope_head_dim = dh - dr;
    dst->v_head_dim = dh;
    dst->q_lora_rank = 0;
    if (!given[F_KV_LORA]) dst->kv_lora_rank = src->hidden_size / 4;
    const int cap_h = dst->num_heads * (dh - dr + dh), cap = cap_h < src->hidden_size ? cap_h : src->hidden_size;
    if (dst->kv_lora_rank <= 0 || dst->kv_lora_rank > cap)
        return al_errf(err, "--kv-lora-rank must be in 1..%d (min of hidden %d and heads x (nope + value dims) %d), got %d",
                       cap, src->hidden_size, cap_h, dst->kv_lora_rank);
    dst->head_dim = dh;
    dst->num_kv_heads = dst->num_heads;
    dst->rope_theta = src->rope_theta;
    if (!layers || dr / 2 <= 1) return 0;
    double *crit = calloc((size_t)dh / 2, sizeof(double));
    if (!crit) return al_errf(err, "out of memory");
    for (int l = 0; l < src->num_layers; l++)
        if (pair_criterion(&layers[l], crit, err)) {
            free(crit);
            return -1;
        }
    int best = 1;
    double best_sum = -1;
    for (int st = 1; st <= max_stride(dh, dr); st++) {
        double sum = 0;
        for (int i = 0; i < dr / 2; i++) sum += crit[rope_pair(i, st)];
        if (sum > best_sum) best_sum = sum, best = st;
    }
    free(crit);
    dst->rope_theta = pow(src->rope_theta, (double)best * dr / dh);
    return 0;
}

/* The stride a target config's rope_theta encodes (mla_convert_shape). */
static int stride_of(const al_config *src, const al_config *dst) {
    const int dh = src->head_dim, dr = dst->qk_rope_head_dim;
    if (dr / 2 <= 1) return 1;
    const long s = lround(log(dst->rope_theta) / log(src->rope_theta) * dh / dr);
    return s < 1 ? 1 : s > max_stride(dh, dr) ? max_stride(dh, dr) : (int)s;
}

/* Fills one MLA layer from a source layer:
 *   q_proj: head h's rows reordered [nope dims (the source dims of the pairs
 *     not kept, ascending); rope dims (pair j_i as elements 2i, 2i+1)];
 *   k_pe (rows dc.. of kv_a_proj_with_mqa): the mean over heads of their
 *     rope rows (one key shared by all heads: the Frobenius-nearest);
 *   latent: the stacked map M = [k_nope_h; v_h] over heads [H (dn + dv), d]
 *     fitted at rank dc weighted by the calibration activations
 *     (al_cv_lowrank: M ~ P Q): W_dkv = Q, kv_b_proj = P;
 *   kv_a_layernorm's gain g_i: least squares over the calibration tokens of
 *     g_i c_i / rms(c) ~ c_i (c = Q x), so the normed latent stays ~ Q x;
 *   o_proj copied. The per-token 1/rms(c) is what cannot be exact: the
 *   output error on calibration text measures it. Key and value errors are
 *   of the linear maps (P Q, the shared k_pe), RoPE at position 0. */
static int mla_convert(const al_attn_source *s, const al_attn_layer *L, double *k_err, double *v_err, al_err *err) {
    const al_config *c = L->cfg;
    const mla_dims D = dims_of(c);
    const int H = D.H, d = D.d, dh = s->cfg->head_dim, half = dh / 2, dn = D.dn, dr = D.dr, dc = D.dc, dv = D.dv;
    const int st = stride_of(s->cfg, c), m = H * (dn + dv);
    const mla_w W = views(c, L->w);
    int *order = malloc(sizeof(int) * dh); /* MLA key dim e <- source dim order[e] */
    double *M = malloc(sizeof(double) * m * d), *P = malloc(sizeof(double) * m * dc), *Q = malloc(sizeof(double) * dc * d);
    double *kpe = calloc((size_t)dr * d, sizeof(double)), *eff = malloc(sizeof(double) * (size_t)dh * d);
    float *lat = malloc(sizeof(float) * s->n * dc), *lat_rms = malloc(sizeof(float) * (s->n + 1));
    int rc = -1;
    if (!order || !M || !P || !Q || !kpe || !eff || !lat || !lat_rms) {
        al_errf(err, "out of memory");
        goto done;
    }
    /* the dim order: nope dims ascending, then the rope pairs interleaved */
    unsigned char *kept = (unsigned char *)eff; /* dh flags, before eff is used */
    memset(kept, 0, (size_t)dh);
    for (int i = 0; i < dr / 2; i++) {
        kept[rope_pair(i, st)] = kept[rope_pair(i, st) + half] = 1;
        order[dn + 2 * i] = rope_pair(i, st);
        order[dn + 2 * i + 1] = rope_pair(i, st) + half;
    }
    int n_nope = 0;
    for (int e = 0; e < dh; e++)
        if (!kept[e]) order[n_nope++] = e;
    assert(n_nope == dn); /* the dr rope dims are distinct: stride_of keeps the pairs apart */
    assert(W.q); /* the target has no query compression (mla_convert_shape) */
    for (int h = 0; h < H; h++) {
        const float *k = al_cv_head_k(s, h), *v = al_cv_head_v(s, h);
        for (int e = 0; e < dh; e++) {
            memcpy(W.q + ((size_t)h * dh + e) * d, s->wq + ((size_t)h * dh + order[e]) * d, sizeof(float) * d);
            for (int t = 0; t < d; t++) {
                const double kv = k[(size_t)order[e] * d + t];
                if (e < dn) M[((size_t)h * (dn + dv) + e) * d + t] = kv;
                else kpe[(size_t)(e - dn) * d + t] += kv / H;
            }
        }
        for (size_t i = 0; i < (size_t)dv * d; i++) M[((size_t)h * (dn + dv) + dn) * d + i] = v[i];
    }
    if (al_cv_lowrank(M, m, d, s->cov, dc, P, Q, err)) goto done;
    for (size_t i = 0; i < (size_t)dc * d; i++) W.kva[i] = (float)Q[i];
    for (size_t i = 0; i < (size_t)dr * d; i++) W.kva[(size_t)dc * d + i] = (float)kpe[i];
    for (size_t i = 0; i < (size_t)m * dc; i++) W.kvb[i] = (float)P[i];
    memcpy(W.o, s->wo, sizeof(float) * d * H * dv);
    /* the latent's gain on the calibration tokens */
    al_sgemm(0, 1, (int)s->n, dc, d, 1.0f, s->x, d, W.kva, d, 0.0f, lat, dc);
    for (size_t t = 0; t < s->n; t++) { /* each token's latent divided by its rms, in place */
        float *ct = lat + t * dc;
        double ms = 0;
        for (int e = 0; e < dc; e++) ms += (double)ct[e] * ct[e];
        const double inv = 1.0 / sqrt(ms / dc + c->rms_norm_eps);
        for (int e = 0; e < dc; e++) ct[e] = (float)(ct[e] * inv); /* a = c / rms(c) */
        lat_rms[t] = (float)(1.0 / inv);
    }
    for (int i = 0; i < dc; i++) {
        double num = 0, den = 0; /* least squares of g a ~ c = a rms */
        for (size_t t = 0; t < s->n; t++) {
            const double a = lat[t * dc + i];
            num += a * a * lat_rms[t];
            den += a * a;
        }
        W.kv_norm[i] = den > 0 ? (float)(num / den) : 1.0f;
    }
    /* errors of the linear maps in the MLA's dim order */
    for (int h = 0; h < H; h++) {
        const float *k = al_cv_head_k(s, h), *v = al_cv_head_v(s, h);
        double num = 0, den = 0;
        for (int e = 0; e < dh; e++)
            for (int t = 0; t < d; t++) {
                double fit = 0;
                if (e < dn)
                    for (int j = 0; j < dc; j++) fit += P[((size_t)h * (dn + dv) + e) * dc + j] * Q[(size_t)j * d + t];
                else
                    fit = kpe[(size_t)(e - dn) * d + t];
                const double ref = k[(size_t)order[e] * d + t];
                num += (ref - fit) * (ref - fit);
                den += ref * ref;
            }
        k_err[h] = den > 0 ? sqrt(num / den) : sqrt(num);
        for (int e = 0; e < dv; e++)
            for (int t = 0; t < d; t++) {
                double fit = 0;
                for (int j = 0; j < dc; j++) fit += P[((size_t)h * (dn + dv) + dn + e) * dc + j] * Q[(size_t)j * d + t];
                eff[(size_t)e * d + t] = fit;
            }
        v_err[h] = al_cv_rel_err(v, eff, (size_t)dv * d);
    }
    rc = 0;
done:
    free(order);
    free(M);
    free(P);
    free(Q);
    free(kpe);
    free(eff);
    free(lat);
    free(lat_rms);
    return rc;
}

const al_attn_ops al_attn_mla_ops = {
    .name = "mla",
    .title = "MLA",
    .hf_arch = "DeepseekV2ForCausalLM",
    .hf_model_type = "deepseek_v2",
    .fields = mla_fields,
    .n_fields = (int)(sizeof mla_fields / sizeof mla_fields[0]),
    .derive = mla_derive,
    .head_widths = mla_widths,
    .cache_formula = mla_cache_formula,
    .describe = mla_describe,
    .figure_title = mla_title,
    .validate = mla_validate,
    .params = mla_params,
    .rope_dims = mla_rope_dims,
    .cache_values_per_token = mla_cache,
    .saved_floats = mla_saved_floats,
    .scratch_floats = mla_scratch,
    .forward = mla_forward,
    .backward = mla_backward,
    .decode = mla_decode,
    .cache_fill = mla_cache_fill,
    .head_maps = mla_head_maps,
    .head_qk = mla_head_qk,
    .convert_shape = mla_convert_shape,
    .convert = mla_convert,
    .cache_segments = mla_cache_segments,
    .score_shape = mla_score_shape,
};
