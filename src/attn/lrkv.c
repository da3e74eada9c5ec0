/*
 * lrkv.c: low-rank key-value attention (LRKV; O'Neill et al., arXiv
 * 2601.11471; attention.md 3.3 and 3.5). Every head's key and value maps are
 * one map shared by the layer's heads plus a rank-r correction of its own:
 *
 *   W_K[h] = W_Ks + B_K[h] U_K[h],   W_V[h] = W_Vs + B_V[h] U_V[h]
 *
 *   q_h    = RoPE^(dh)(W_q[h] x)                      W_q:  [H*dh, d]
 *   K_s    = W_Ks x,  V_s = W_Vs x                     W_Ks, W_Vs: [dh, d]
 *   R_K[h] = U_K[h] x,  R_V[h] = U_V[h] x              U_K, U_V: [H*r, d] (rows h*r.. are head h)
 *   k_h    = RoPE^(dh)(K_s) + B_K[h] RoPE^(r)(R_K[h])  B_K, B_V: [H*dh, r] (rows h*dh.. are head h)
 *   v_h    = V_s + B_V[h] R_V[h]
 *   o_h    = sum_j p(q_h . k_h,j / sqrt(dh)) v_h,j   (causal; p: the config's
 *            score function over the visible j, attention.md 2)
 *   y      = W_o concat_h(o_h)                         W_o:  [d, H*dh]
 *
 * RoPE is rotate-half in each space (the r-dim table is the layer's rope_aux),
 * applied to each component once, before the up-projection (3.5). That is what
 * makes the factored decode exact: B_K[h] never has to commute with a rotation.
 * r = 0 is exactly MQA (k = RoPE(K_s), v = V_s); r = dh can express MHA.
 *
 * Tensors (params() order; names relative to "model.layers.N.self_attn."):
 *   q_proj [H*dh, d], k_shared_proj [dh, d], v_shared_proj [dh, d],
 *   k_down_proj [H*r, d], v_down_proj [H*r, d], k_up_proj [H*dh, r],
 *   v_up_proj [H*dh, r], o_proj [d, H*dh].
 * The first five are read by the same x, so when the arena holds them back to
 * back (it does unless a tensor's size is not a multiple of 16 floats) they
 * are one [P, d] matrix, P = H*dh + 2*dh + 2*H*r, and one GEMM gives
 *   proj[N, P] = [ q (H*dh) | K_s (dh) | V_s (dh) | R_K (H*r) | R_V (H*r) ].
 *
 * KV cache per token per layer: 2 (dh + H r) values, laid out exactly as the
 * tail of a proj row:
 *   [ RoPE(K_s) (dh) | V_s (dh) | RoPE(R_K[0..H)) (H*r) | R_V[0..H) (H*r) ]
 * so appending a token is one memcpy. Decode never builds a past token's k_h
 * or v_h (3.3):
 *   s_h,j = (q_h . K_s,j + (B_K[h]^T q_h) . R_K[h],j) / sqrt(dh)
 *   o_h   = sum_j p_j V_s,j + B_V[h] (sum_j p_j R_V[h],j)
 *
 * Training materialises k_h, v_h ([N, H*dh] each; N*H*dh*r multiply-adds, small
 * beside the attention itself) and calls the shared score kernels with G = H;
 * a factored score would cost (dh + r) per query-key pair instead of dh. The
 * materialised K, V live in scratch and are rebuilt in backward, so a layer
 * saves only proj, o and lse: N (2 H dh + 2 dh + 2 H r) + B H T floats, against
 * MHA's N 4 H dh + B H T. With r = 0 the kernels read K_s, V_s straight from
 * proj with G = 1: the MQA computation, nothing materialised.
 * Gradients reaching the shared maps are summed over heads in head order and
 * every parallel loop owns its outputs, so results do not depend on the
 * thread count.
 *
 * Inference with BF16 weights (al_model_weights_bf16: a copy at the arena's
 * offsets, so the five input-side tensors stay one matrix) takes the same
 * steps through wmat.c's products (al_matmul / al_matvec / al_matvec_t);
 * fp32 weights make the same CBLAS calls and loops as before. Backward is
 * fp32 only.
 *
 * On configuration, num_key_value_heads must equal num_attention_heads: every
 * head has its own effective key/value map (which is what the head-similarity
 * analysis and any HF-side reader counting K/V maps sees), even though the
 * cache stores only the shared part plus rank-r latents.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "convert.h"

enum { W_Q, W_KS, W_VS, W_KD, W_VD, W_KU, W_VU, W_O, N_W };

/* Rows per work item when materialising k/v and reducing their gradients. */
enum { RB = 128 };

/* ---- shapes ---- */

typedef struct dims {
    int d, H, dh, r;
    int w;                       /* proj row width P */
    int o_ks, o_vs, o_rk, o_rv;  /* column offsets in a proj row */
    int hd;                      /* H*dh */
} dims;

static dims dims_of(const al_config *c) {
    dims m;
    m.d = c->hidden_size;
    m.H = c->num_heads;
    m.dh = c->head_dim;
    m.r = c->lrkv_rank;
    m.hd = m.H * m.dh;
    m.o_ks = m.hd;
    m.o_vs = m.o_ks + m.dh;
    m.o_rk = m.o_vs + m.dh;
    m.o_rv = m.o_rk + m.H * m.r;
    m.w = m.o_rv + m.H * m.r;
    return m;
}

static int lrkv_validate(const al_config *c, al_err *err) {
    const int dh = c->head_dim, r = c->lrkv_rank;
    if (dh <= 0) return al_errf(err, "invalid config: head_dim must be positive, got %d", dh);
    if (dh % 2) return al_errf(err, "invalid config: head_dim must be even for RoPE, got %d", dh);
    if (c->num_kv_heads != c->num_heads)
        return al_errf(err,
                       "invalid config: attention 'lrkv' needs num_key_value_heads == num_attention_heads (%d), got %d",
                       c->num_heads, c->num_kv_heads);
    if (r < 0) return al_errf(err, "invalid config: lrkv_rank must be non-negative, got %d", r);
    if (r % 2) return al_errf(err, "invalid config: lrkv_rank must be even, got %d", r);
    if (r > dh) return al_errf(err, "invalid config: lrkv_rank %d exceeds head_dim %d", r, dh);
    return 0;
}

/* Init: shared, query and output maps as every design. The residual B U
 * starts as a small perturbation of the shared map: with U ~ N(0, s_U^2),
 * B ~ N(0, s_B^2), E||B U||_F^2 = dh d r s_B^2 s_U^2 against
 * E||W_s||_F^2 = dh d s^2, so s_U = s and s_B = 0.1 / sqrt(r) give
 * ||B_K[h] U_K[h]||_F ~ 0.1 ||W_Ks||_F. U at the shared scale keeps the
 * latents R = U x on the scale of K_s; the smallness sits in B. */
static int lrkv_params(const al_config *c, al_param_spec *out) {
    const int64_t d = c->hidden_size, H = c->num_heads, dh = c->head_dim, r = c->lrkv_rank;
    const float std = 0.02f, std_out = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    const float std_up = r > 0 ? 0.1f / sqrtf((float)r) : 0.0f;
    /* written whole by the backward: the fused projection (proj_bwd) and o;
     * the up factors' gradients add up over the heads */
    const al_param_spec specs[N_W] = {
        {"q_proj.weight", 2, {H * dh, d}, AL_INIT_NORMAL, std, 1, 1},
        {"k_shared_proj.weight", 2, {dh, d}, AL_INIT_NORMAL, std, 1, 1},
        {"v_shared_proj.weight", 2, {dh, d}, AL_INIT_NORMAL, std, 1, 1},
        {"k_down_proj.weight", 2, {H * r, d}, AL_INIT_NORMAL, std, 1, 1},
        {"v_down_proj.weight", 2, {H * r, d}, AL_INIT_NORMAL, std, 1, 1},
        {"k_up_proj.weight", 2, {H * dh, r}, AL_INIT_NORMAL, std_up, 1, 0},
        {"v_up_proj.weight", 2, {H * dh, r}, AL_INIT_NORMAL, std_up, 1, 0},
        {"o_proj.weight", 2, {d, H * dh}, AL_INIT_NORMAL, std_out, 1, 1},
    };
    memcpy(out, specs, sizeof specs);
    return N_W;
}

static void lrkv_rope_dims(const al_config *c, int rd[2]) {
    rd[0] = c->head_dim;
    rd[1] = c->lrkv_rank; /* 0: no table, r = 0 has no latents */
}

static size_t lrkv_cache(const al_config *c) {
    return 2 * ((size_t)c->head_dim + (size_t)c->num_heads * c->lrkv_rank);
}

/* saved: proj[N, P] (q, K_s, R_K rotated) | o[N, H*dh] | lse[B, H, T] */
static size_t lrkv_saved(const al_config *c, int B, int T) {
    const dims m = dims_of(c);
    const size_t N = (size_t)B * T;
    return N * m.w + N * m.hd + (size_t)B * m.H * T;
}

/* Decode scratch: proj[P] | qx[H, dh + r] | u[H, dh + r] | o[H*dh] | al_attn_decode's workspace */
static size_t decode_scratch(const al_config *c) {
    const dims m = dims_of(c);
    al_attn_shape s = {0};
    s.H = s.G = m.H, s.dk = s.dv = m.dh;
    return (size_t)m.w + 2 * (size_t)m.H * (m.dh + m.r) + m.hd + al_attn_decode_scratch(&s, m.r, c->max_position);
}

/* forward: K, V [N, H*dh];  backward: K, V, dK, dV, dO [N, H*dh] | dproj [N, P].
 * r = 0 reads K_s / V_s straight from proj (MQA), so no K, V, dK, dV. */
static size_t lrkv_scratch(const al_config *c, int B, int T) {
    const dims m = dims_of(c);
    const size_t N = (size_t)B * T, kv = m.r > 0 ? 4 : 0;
    const size_t train = (kv + 1) * N * m.hd + N * m.w;
    const size_t dec = decode_scratch(c);
    return train > dec ? train : dec;
}

/* ---- the fused input projection ---- */

/* Output rows of the five input-side tensors, in params() order. */
static void in_rows(const dims *m, int rows[5]) {
    rows[0] = m->hd;
    rows[1] = rows[2] = m->dh;
    rows[3] = rows[4] = m->H * m->r;
}

/* The model lays tensors out back to back in params() order (no padding),
 * so W_q..U_V form one [P, d] matrix, and their gradients likewise; the BF16
 * copy of al_model_weights_bf16 keeps the offsets, so there too (dt: the
 * tensors' dtypes, NULL for fp32 gradients). */
static inline int contiguous(const dims *m, float *const *base, const al_dtype *dt) {
    int rows[5];
    in_rows(m, rows);
    for (int i = 0; i < 4; i++)
        if (!al_attn_adjacent(base, dt, W_Q + i, (size_t)rows[i] * m->d)) return 0;
    return 1;
}

/* The five projections multiply as one matrix: adjacent in the arena (fp32
 * or its BF16 copy), and for training their gradients too, in fp32. */
static int lrkv_validate_layer(const al_attn_layer *L, int training, al_err *err) {
    const dims m = dims_of(L->cfg);
    if (!contiguous(&m, L->w, L->wdt) || (training && (!contiguous(&m, L->g, NULL) || L->wdt[W_Q] != AL_DT_F32)))
        return al_errf(err, "lrkv needs W_q, W_Ks, W_Vs, U_K, U_V adjacent as one %smatrix (attnlab's arena)",
                       training ? "fp32 " : "");
    return 0;
}

/* proj[N, P] = x[N, d] [W_q; W_Ks; W_Vs; U_K; U_V]^T (fp32: one sgemm; BF16: wmat.c) */
static void proj_fwd(const al_attn_layer *L, const dims *m, al_wref x, float *proj, int N) {
    al_matmul_x(proj, m->w, x, m->d, al_attn_w(L, W_Q), N, m->d, m->w, 0);
}

/* dx[N, d] += dproj[N, P] Wfused[P, d];  dWfused[P, d] (+)= dproj^T x[N, d] */
static void proj_bwd(const al_attn_layer *L, const dims *m, al_wref x, const float *dproj, float *dx, int N) {
    al_linear_bwd_ref(dx, 1, L->g[W_Q], !L->grads_unset, al_wref_f32(dproj), x, L->w[W_Q], N, m->d, m->w);
}

/* RoPE on q and K_s (adjacent: H+1 vectors of dh) and on every R_K[h]. sign
 * -1 is the transpose, for gradients. */
static void rope_proj(const al_attn_layer *L, const dims *m, float *proj, int N, int T, int pos0, int sign) {
    al_rope_half(proj, N, T, pos0, m->H + 1, m->w, L->rope, sign);
    if (m->r > 0) al_rope_half(proj + m->o_rk, N, T, pos0, m->H, m->w, L->rope_aux, sign);
}

/* ---- materialised per-head keys and values (training) ----
 * K[N, H*dh]: K[n, h] = K_s[n] + B_K[h] R_K[n, h]  (R_K rotated in proj)
 * V[N, H*dh]: V[n, h] = V_s[n] + B_V[h] R_V[n, h]
 * Work items are (row block, head); each runs al_sgemm (single-threaded
 * inside the loop; in the product precision of nn.h like every GEMM). BF16
 * up-projections (al_model_weights_bf16, inference) take build_kv_wref. */
static void build_kv_wref(const al_attn_layer *L, const dims *m, const float *proj, float *K, float *V, int N);

static void build_kv(const al_attn_layer *L, const dims *m, const float *proj, float *K, float *V, int N) {
    const int nrb = (N + RB - 1) / RB, H = m->H, dh = m->dh, r = m->r, hd = m->hd, w = m->w;
    const long items = (long)nrb * H;
    if (L->wdt[W_KU] != AL_DT_F32 || L->wdt[W_VU] != AL_DT_F32) {
        build_kv_wref(L, m, proj, K, V, N);
        return;
    }
#pragma omp parallel for schedule(static) if ((long)N * hd * r > 65536)
    for (long it = 0; it < items; it++) {
        const int rb = (int)(it / H), h = (int)(it % H);
        const int n0 = rb * RB, rows = n0 + RB < N ? RB : N - n0;
        for (int n = n0; n < n0 + rows; n++) {
            memcpy(K + (size_t)n * hd + (size_t)h * dh, proj + (size_t)n * w + m->o_ks, sizeof(float) * dh);
            memcpy(V + (size_t)n * hd + (size_t)h * dh, proj + (size_t)n * w + m->o_vs, sizeof(float) * dh);
        }
        /* K_blk[rows, dh] += R_K,h[rows, r] B_K[h]^T ; same for V */
        al_sgemm(0, 1, rows, dh, r, 1.0f, proj + (size_t)n0 * w + m->o_rk + h * r, w, L->w[W_KU] + (size_t)h * dh * r, r,
                 1.0f, K + (size_t)n0 * hd + (size_t)h * dh, hd);
        al_sgemm(0, 1, rows, dh, r, 1.0f, proj + (size_t)n0 * w + m->o_rv + h * r, w, L->w[W_VU] + (size_t)h * dh * r, r,
                 1.0f, V + (size_t)n0 * hd + (size_t)h * dh, hd);
    }
}

/* build_kv for up-projections in another dtype: the shared rows copied in
 * parallel, then per head one product over all N rows through wmat.c (which
 * parallelises inside; the matrices are small, dh x r). */
static void build_kv_wref(const al_attn_layer *L, const dims *m, const float *proj, float *K, float *V, int N) {
    const int H = m->H, dh = m->dh, r = m->r, hd = m->hd, w = m->w;
#pragma omp parallel for schedule(static) if ((long)N * hd > 65536)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            memcpy(K + (size_t)n * hd + (size_t)h * dh, proj + (size_t)n * w + m->o_ks, sizeof(float) * dh);
            memcpy(V + (size_t)n * hd + (size_t)h * dh, proj + (size_t)n * w + m->o_vs, sizeof(float) * dh);
        }
    for (int h = 0; h < H; h++) {
        const size_t off = (size_t)h * dh * r;
        al_matmul(K + (size_t)h * dh, hd, proj + m->o_rk + h * r, w, al_wref_at(al_attn_w(L, W_KU), off), N, r, dh, 1);
        al_matmul(V + (size_t)h * dh, hd, proj + m->o_rv + h * r, w, al_wref_at(al_attn_w(L, W_VU), off), N, r, dh, 1);
    }
}

static al_attn_shape shape_of(const al_config *c, const dims *m, int B, int T) {
    /* r > 0: per-head K, V of their own buffers; r = 0: K_s, V_s in proj (G = 1) */
    const int ldkv = m->r > 0 ? m->hd : m->w;
    al_attn_shape s = {B, T, m->H, m->r > 0 ? m->H : 1, m->dh, m->dh, m->w, ldkv, ldkv, m->hd,
                       1.0f / sqrtf((float)m->dh)};
    al_attn_set_score(&s, c);
    return s;
}

/* The score kernels' shape for B x T tokens (al_attn_ops.score_shape). */
static al_attn_shape lrkv_score_shape(const al_config *c, int B, int T) {
    const dims m = dims_of(c);
    return shape_of(c, &m, B, T);
}

static void lrkv_forward(const al_attn_layer *L, al_wref x, float *y, float *saved, float *scratch, int B,
                         int T) {
    const dims m = dims_of(L->cfg);
    const int N = B * T;
    float *proj = saved, *o = proj + (size_t)N * m.w, *lse = o + (size_t)N * m.hd;
    proj_fwd(L, &m, x, proj, N);
    rope_proj(L, &m, proj, N, T, 0, +1);
    const al_attn_shape s = shape_of(L->cfg, &m, B, T);
    if (m.r > 0) {
        float *K = scratch, *V = K + (size_t)N * m.hd;
        build_kv(L, &m, proj, K, V, N);
        al_attn_fwd(&s, proj, K, V, o, lse);
    } else {
        al_attn_fwd(&s, proj, proj + m.o_ks, proj + m.o_vs, o, lse);
    }
    al_matmul(y, m.d, o, m.hd, al_attn_w(L, W_O), N, m.hd, m.d, 0); /* y[N, d] = o[N, H*dh] W_o^T */
}

/* Gradients of the materialisation, given dK, dV [N, H*dh]:
 *   dK_s[n] = sum_h dK[n, h]        (heads in order: deterministic)
 *   dR_K[n, h] = B_K[h]^T dK[n, h]  -> dproj[N, P] columns (rotated frame)
 *   dB_K[h] += sum_n dK[n, h] R_K[n, h]^T   [dh, r]
 * and the same for V. dproj's K_s/V_s/R columns are overwritten. */
static void build_kv_bwd(const al_attn_layer *L, const dims *m, const float *proj, const float *dK, const float *dV,
                         float *dproj, int N) {
    const int nrb = (N + RB - 1) / RB, H = m->H, dh = m->dh, r = m->r, hd = m->hd, w = m->w;
    const int par = (long)N * hd * r > 65536;
#pragma omp parallel for schedule(static) if (par)
    for (int rb = 0; rb < nrb; rb++) {
        const int n0 = rb * RB, rows = n0 + RB < N ? RB : N - n0;
        for (int n = n0; n < n0 + rows; n++) {
            float *dks = dproj + (size_t)n * w + m->o_ks, *dvs = dproj + (size_t)n * w + m->o_vs;
            const float *dk = dK + (size_t)n * hd, *dv = dV + (size_t)n * hd;
            for (int e = 0; e < dh; e++) dks[e] = dk[e], dvs[e] = dv[e];
            for (int h = 1; h < H; h++)
                for (int e = 0; e < dh; e++) dks[e] += dk[h * dh + e], dvs[e] += dv[h * dh + e];
        }
        /* dR_h[rows, r] = dK_h[rows, dh] B_K[h][dh, r] */
        for (int h = 0; h < H; h++) {
            al_sgemm(0, 0, rows, r, dh, 1.0f, dK + (size_t)n0 * hd + h * dh, hd, L->w[W_KU] + (size_t)h * dh * r, r,
                     0.0f, dproj + (size_t)n0 * w + m->o_rk + h * r, w);
            al_sgemm(0, 0, rows, r, dh, 1.0f, dV + (size_t)n0 * hd + h * dh, hd, L->w[W_VU] + (size_t)h * dh * r, r,
                     0.0f, dproj + (size_t)n0 * w + m->o_rv + h * r, w);
        }
    }
    /* dB[h][dh, r] += dK_h^T[dh, N] R_h[N, r]: one item per (head, K or V),
     * each a whole-N sum inside one single-threaded al_sgemm */
#pragma omp parallel for schedule(static) if (par)
    for (int it = 0; it < 2 * H; it++) {
        const int h = it >> 1, isv = it & 1;
        const float *dX = (isv ? dV : dK) + (size_t)h * dh;
        const float *R = proj + (isv ? m->o_rv : m->o_rk) + h * r;
        float *dB = L->g[isv ? W_VU : W_KU] + (size_t)h * dh * r;
        al_sgemm(1, 0, dh, r, N, 1.0f, dX, hd, R, w, 1.0f, dB, r);
    }
}

static void lrkv_backward(const al_attn_layer *L, al_wref x, const float *dy, float *dx, const float *saved,
                          float *scratch, int B, int T) {
    const dims m = dims_of(L->cfg);
    const int N = B * T;
    const size_t Nhd = (size_t)N * m.hd;
    const float *proj = saved, *o = proj + (size_t)N * m.w, *lse = o + Nhd;
    float *d_o = scratch, *dproj = d_o + Nhd;
    const al_attn_shape s = shape_of(L->cfg, &m, B, T);
    memset(dproj, 0, sizeof(float) * (size_t)N * m.w);
    al_linear_bwd_into(d_o, 0, L->g[W_O], !L->grads_unset, dy, o, L->w[W_O], N, m.hd, m.d);
    if (m.r > 0) {
        float *K = dproj + (size_t)N * m.w, *V = K + Nhd, *dK = V + Nhd, *dV = dK + Nhd;
        build_kv(L, &m, proj, K, V, N);
        memset(dK, 0, sizeof(float) * 2 * Nhd);
        al_attn_bwd(&s, proj, K, V, o, lse, d_o, dproj, dK, dV);
        build_kv_bwd(L, &m, proj, dK, dV, dproj, N);
    } else {
        al_attn_bwd(&s, proj, proj + m.o_ks, proj + m.o_vs, o, lse, d_o, dproj, dproj + m.o_ks, dproj + m.o_vs);
    }
    rope_proj(L, &m, dproj, N, T, 0, -1);
    proj_bwd(L, &m, x, dproj, dx, N);
}

/* The forward saved proj [T, P] with its RoPE applied; a cache row is the
 * [K_s | V_s | R_K | R_V] tail of a proj row, as lrkv_decode appends it. */
static void lrkv_cache_fill(const al_attn_layer *L, const float *saved, int T, al_kv cache) {
    const dims m = dims_of(L->cfg);
    const size_t vpt = lrkv_cache(L->cfg);
    for (int t = 0; t < T; t++) al_kv_store(cache, (size_t)t * vpt, saved + (size_t)t * m.w + m.o_ks, vpt);
}

/* ---- factored decode ---- */

/* qb[r] = B_K[h]^T q[dh], B_K[h] = B's [dh, r] row-major block at element
 * off (any dtype, through wmat.c). */
static void up_t(al_wref B, size_t off, int dh, int r, const float *q, float *qb) {
    if (r > 0) al_matvec_t(qb, q, al_wref_at(B, off), dh, r, 0);
}

/* o[dh] = u[:dh] + B_V[h] u[dh:], B_V[h] = B's [dh, r] block at element off. */
static void up_add(al_wref B, size_t off, int dh, int r, const float *u, float *o) {
    memcpy(o, u, sizeof(float) * dh);
    if (r > 0) al_matvec(o, u + dh, al_wref_at(B, off), dh, r, 1);
}

/*
 * The shared kernel of decode.c does the attention: one key/value group
 * (K_s, V_s, read once for all heads) plus each head's own rank-r part, with
 * head h's query extended by qB_h = B_K[h]^T q_h:
 *   s_h,j = ([q_h | qB_h] . [K_s,j | R_K[h],j]) / sqrt(dh)
 *   u_h   = sum_j p_j [V_s,j | R_V[h],j],   o_h = u_h[:dh] + B_V[h] u_h[dh:] */
static void lrkv_decode(const al_attn_layer *L, const float *x, float *y, al_kv cache, int pos, float *scratch) {
    const dims m = dims_of(L->cfg);
    const int H = m.H, dh = m.dh, r = m.r, qw = dh + r;
    const size_t vpt = lrkv_cache(L->cfg);
    al_attn_shape fn = shape_of(L->cfg, &m, 1, pos + 1); /* scale and score function */
    fn.G = 1;
    float *proj = scratch, *qx = proj + m.w, *u = qx + (size_t)H * qw, *o = u + (size_t)H * qw, *work = o + m.hd;
    /* proj[P] = Wfused[P, d] x[d] */
    al_matvec(proj, x, al_attn_w(L, W_Q), m.w, m.d, 0);
    rope_proj(L, &m, proj, 1, 1, pos, +1);
    al_kv_store(cache, (size_t)pos * vpt, proj + m.o_ks, vpt); /* [K_s|V_s|R_K|R_V] */
    /* qx_h = [q_h | B_K[h]^T q_h]: B_K[h] is [dh, r] row-major (k_up_proj rows h*dh..) */
    for (int h = 0; h < H; h++) {
        const float *qh = proj + (size_t)h * dh;
        float *qxh = qx + (size_t)h * qw;
        memcpy(qxh, qh, sizeof(float) * dh);
        up_t(al_attn_w(L, W_KU), (size_t)h * dh * r, dh, r, qh, qxh + dh);
    }
    const al_decode_view view = {cache, vpt, 0, 0, (size_t)dh, 0, 2 * (size_t)dh, 2 * (size_t)dh + (size_t)H * r, r,
                                 r};
    al_attn_decode(&fn, qx, &view, pos + 1, u, work);
    /* o_h = u_h[:dh] + B_V[h] u_h[dh:] */
    for (int h = 0; h < H; h++)
        up_add(al_attn_w(L, W_VU), (size_t)h * dh * r, dh, r, u + (size_t)h * qw, o + (size_t)h * dh);
    al_matvec(y, o, al_attn_w(L, W_O), m.d, m.hd, 0);
}

/* Head-similarity maps (attention.md 4): query rows W_q[h] [dh, d] and the
 * effective key map W_K[h] = W_Ks + B_K[h] U_K[h] [dh, d] (B_K[h]: [dh, r],
 * U_K[h]: [r, d]), summed in double. Both RoPEs are ignored (position 0). */
static int lrkv_head_maps(const al_attn_layer *L, int h, double *wq, double *wk) {
    const dims m = dims_of(L->cfg);
    if (!wq && !wk) return m.dh;
    const al_wref U = al_wref_at(al_attn_w(L, W_KD), (size_t)h * m.r * m.d);
    const al_wref Bk = al_wref_at(al_attn_w(L, W_KU), (size_t)h * m.dh * m.r);
    al_wread_f64(wq, al_attn_w(L, W_Q), (size_t)h * m.dh * m.d, (size_t)m.dh * m.d);
    al_wread_f64(wk, al_attn_w(L, W_KS), 0, (size_t)m.dh * m.d);
    for (int a = 0; a < m.dh; a++)
        for (int t = 0; t < m.r; t++) {
            const double b = al_wget(Bk, (size_t)a * m.r + t);
            double *row = wk + (size_t)a * m.d;
            for (int e = 0; e < m.d; e++) row[e] += b * al_wget(U, (size_t)t * m.d + e);
        }
    return m.dh;
}

/* q, k of head h from the saved projection rows: q_h as is, and
 * k_h = RoPE(K_s) + B_K[h] RoPE(R_K[h]) (attention.md 3.5) */
static int lrkv_head_qk(const al_attn_layer *L, const float *saved, int B, int T, int b, int h, float *q, float *k) {
    const dims m = dims_of(L->cfg);
    (void)B;
    for (int t = 0; q && t < T; t++) {
        const float *row = saved + ((size_t)b * T + t) * m.w;
        float *kt = k + (size_t)t * m.dh;
        memcpy(q + (size_t)t * m.dh, row + (size_t)h * m.dh, sizeof(float) * m.dh);
        memcpy(kt, row + m.o_ks, sizeof(float) * m.dh);
        if (m.r > 0) /* kt[dh] += B_K[h][dh, r] R_K[h][r] */
            al_matvec(kt, row + m.o_rk + h * m.r, al_wref_at(al_attn_w(L, W_KU), (size_t)h * m.dh * m.r), m.dh, m.r, 1);
    }
    return m.dh;
}

/* Quantised caches (kvq.h): K_s and each head's R_K as keys, V_s and each
 * head's R_V as values (r = 0: the shared parts only). */
static int lrkv_cache_segments(const al_config *c, int latent, al_kv_seg *out) {
    const int dh = c->head_dim, hr = c->num_heads * c->lrkv_rank;
    (void)latent;
    out[0] = (al_kv_seg){0, dh, dh, AL_KV_SEG_KEY, 0};
    out[1] = (al_kv_seg){dh, dh, dh, AL_KV_SEG_VALUE, 0};
    if (hr == 0) return 2;
    out[2] = (al_kv_seg){2 * dh, hr, c->lrkv_rank, AL_KV_SEG_KEY, 0};
    out[3] = (al_kv_seg){2 * dh + hr, hr, c->lrkv_rank, AL_KV_SEG_VALUE, 0};
    return 4;
}

/* ---- descriptor ---- */

static const al_config_field lrkv_fields[] = {
    AL_CONFIG_FIELD(lrkv_rank, AL_CF_INT, "lrkv_rank", "lrkv_rank", AL_CF_BLOCK, AL_CF_ALWAYS, AL_CF_FLAG,
                    "LRKV: per-head residual rank r, even (default head dim / 2)"),
};

/* r defaults to half the head dim (even); every head has its own latents */
static void lrkv_derive(al_config *c, const unsigned char *given) {
    if (!given[0]) c->lrkv_rank = (c->head_dim / 2) / 2 * 2;
    c->num_kv_heads = c->num_heads;
}

static void lrkv_widths(const al_config *c, int *dk, int *dv) { *dk = *dv = c->head_dim; }

static void lrkv_cache_formula(const al_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "2 x (d_h %d + %d heads x r %d) (shared K/V + per-head latents)", c->head_dim, c->num_heads,
             c->lrkv_rank);
}

static void lrkv_describe(const al_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "lrkv attention (%d heads, head dim %d, rank %d)", c->num_heads, c->head_dim, c->lrkv_rank);
}

static void lrkv_title(const al_config *c, char *buf, size_t cap) { snprintf(buf, cap, "LRKV (r=%d)", c->lrkv_rank); }

/* ---- conversion from MHA/GQA (convert.h, docs/convert.md) ---- */

/* The rank: --lrkv-rank, else the design's default (d_h / 2, even); the
 * source's head_dim is kept, so lrkv_validate refuses r > d_h and odd r. */
static int lrkv_convert_shape(const al_attn_source *layers, const al_config *src, al_config *dst,
                              const unsigned char *given, al_err *err) {
    (void)layers, (void)src, (void)err;
    if (!given[0]) dst->lrkv_rank = (dst->head_dim / 2) / 2 * 2;
    dst->num_kv_heads = dst->num_heads;
    return 0;
}

/* The d_h-space RoPE pair that r-space pair i feeds through B_K: the one of
 * the same frequency, j = i d_h / r (theta^(-2i/r) = theta^(-2j/d_h)); when
 * d_h / r is not an integer some i fall between two pairs and take the
 * nearest (then that pair's rotation is only approximate). */
static int pair_of(int i, int dh, int r) { return (int)lround((double)i * dh / r); }

/* W_Ks, W_Vs: the mean over heads of the source key / value maps (the
 * common component: the Frobenius-nearest shared map). Keys: B_K[h] is built
 * from 2 x 2 identity blocks that send r-space RoPE pair (i, i + r/2) to
 * d_h-space pair (j, j + d_h/2) of the same frequency, j = pair_of(i), so
 * B_K RoPE^(r)(R) = RoPE^(d_h)(B_K R) holds exactly and U_K[h] is head h's
 * residual W_K[h] - W_Ks on those pairs: exact at r = d_h (B_K = I), and
 * below it the residual of the other pairs is dropped (the heads share them).
 * Values: B_V[h] U_V[h] is the rank-r fit of W_V[h] - W_Vs weighted by the
 * calibration activations (al_cv_lowrank; exact at r = d_h). Query and
 * output maps are copied. */
static int lrkv_convert(const al_attn_source *s, const al_attn_layer *L, double *k_err, double *v_err, al_err *err) {
    const dims m = dims_of(L->cfg);
    const int H = m.H, dh = m.dh, r = m.r, d = m.d;
    const size_t map = (size_t)dh * d;
    double *shk = calloc(2 * map, sizeof(double)), *shv = shk ? shk + map : NULL;
    double *res = malloc(sizeof(double) * map), *eff = malloc(sizeof(double) * map);
    double *P = malloc(sizeof(double) * ((size_t)dh * (r > 0 ? r : 1))), *Q = malloc(sizeof(double) * ((size_t)(r > 0 ? r : 1) * d));
    int rc = -1;
    if (!shk || !res || !eff || !P || !Q) {
        al_errf(err, "out of memory");
        goto done;
    }
    memcpy(L->w[W_Q], s->wq, sizeof(float) * m.hd * d);
    memcpy(L->w[W_O], s->wo, sizeof(float) * m.hd * d);
    for (int h = 0; h < H; h++) {
        const float *k = al_cv_head_k(s, h), *v = al_cv_head_v(s, h);
        for (size_t i = 0; i < map; i++) shk[i] += (double)k[i] / H, shv[i] += (double)v[i] / H;
    }
    for (size_t i = 0; i < map; i++) L->w[W_KS][i] = (float)shk[i], L->w[W_VS][i] = (float)shv[i];
    for (int h = 0; h < H; h++) {
        const float *k = al_cv_head_k(s, h), *v = al_cv_head_v(s, h);
        float *UK = L->w[W_KD] + (size_t)h * r * d, *BK = L->w[W_KU] + (size_t)h * dh * r;
        float *UV = L->w[W_VD] + (size_t)h * r * d, *BV = L->w[W_VU] + (size_t)h * dh * r;
        /* keys: frequency-matched pairs */
        memcpy(eff, shk, sizeof(double) * map);
        memset(BK, 0, sizeof(float) * dh * r);
        for (int i = 0; i < r / 2; i++) {
            const int j = pair_of(i, dh, r);
            const int src_rows[2] = {j, j + dh / 2}, dst_rows[2] = {i, i + r / 2};
            for (int t = 0; t < 2; t++) {
                BK[(size_t)src_rows[t] * r + dst_rows[t]] = 1.0f;
                for (int e = 0; e < d; e++) {
                    const size_t at = (size_t)src_rows[t] * d + e;
                    UK[(size_t)dst_rows[t] * d + e] = (float)((double)k[at] - shk[at]);
                    eff[at] = (double)L->w[W_KS][at] + UK[(size_t)dst_rows[t] * d + e];
                }
            }
        }
        k_err[h] = al_cv_rel_err(k, eff, map);
        /* values: activation-weighted rank-r fit of the residual */
        for (size_t i = 0; i < map; i++) res[i] = (double)v[i] - (double)L->w[W_VS][i];
        if (al_cv_lowrank(res, dh, d, s->cov, r, P, Q, err)) goto done;
        for (size_t i = 0; i < (size_t)dh * r; i++) BV[i] = (float)P[i];
        for (size_t i = 0; i < (size_t)r * d; i++) UV[i] = (float)Q[i];
        for (int a = 0; a < dh; a++)
            for (int e = 0; e < d; e++) {
                double acc = L->w[W_VS][(size_t)a * d + e];
                for (int j = 0; j < r; j++) acc += (double)BV[(size_t)a * r + j] * UV[(size_t)j * d + e];
                eff[(size_t)a * d + e] = acc;
            }
        v_err[h] = al_cv_rel_err(v, eff, map);
    }
    rc = 0;
done:
    free(shk);
    free(res);
    free(eff);
    free(P);
    free(Q);
    return rc;
}

const al_attn_ops al_attn_lrkv_ops = {
    .name = "lrkv",
    .title = "LRKV",
    .hf_arch = "AttnlabForCausalLM",
    .hf_model_type = "attnlab",
    .fields = lrkv_fields,
    .n_fields = 1,
    .derive = lrkv_derive,
    .head_widths = lrkv_widths,
    .cache_formula = lrkv_cache_formula,
    .describe = lrkv_describe,
    .figure_title = lrkv_title,
    .validate = lrkv_validate,
    .validate_layer = lrkv_validate_layer,
    .params = lrkv_params,
    .rope_dims = lrkv_rope_dims,
    .cache_values_per_token = lrkv_cache,
    .saved_floats = lrkv_saved,
    .scratch_floats = lrkv_scratch,
    .forward = lrkv_forward,
    .backward = lrkv_backward,
    .decode = lrkv_decode,
    .cache_fill = lrkv_cache_fill,
    .head_maps = lrkv_head_maps,
    .head_qk = lrkv_head_qk,
    .convert_shape = lrkv_convert_shape,
    .convert = lrkv_convert,
    .cache_segments = lrkv_cache_segments,
    .score_shape = lrkv_score_shape,
};
