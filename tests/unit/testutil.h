/*
 * testutil.h: helpers shared by the C unit tests, on top of test.h (not a
 * test itself: CMake builds tests/unit/test_*.c only).
 *  - random buffers and the floored relative error of kernel outputs;
 *  - the attention backward against central differences of the reference;
 *  - small configs and models with random (not default) weights, tokens;
 *  - decoding token by token with the cache against the full forward;
 *  - parameters by name, config error messages, checkpoints in temp dirs;
 *  - one training step, and its bits at 1 and at 2 threads.
 * The CHECKs made here report testutil.h lines; the callers' messages
 * name the case.
 */
#ifndef AL_TESTUTIL_H
#define AL_TESTUTIL_H

#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "model/model.h"
#include "test.h"

/* ---- buffers ---- */

/* A score function under test: kind, poly power p and coefficient c. */
typedef struct fn_case {
    const char *name;
    al_score_kind kind;
    int p;
    float c;
} fn_case;

/* Puts f's score function, the mask and N (relu/sigmoid/poly "auto") into s. */
static inline void tu_set_score(al_attn_shape *s, const fn_case *f, int bidir, float n) {
    s->bidirectional = bidir;
    s->score = f->kind;
    s->poly_power = f->p;
    s->poly_coef = f->c;
    s->score_n = n;
}

/* fp32 values that test a rounding to bf16 (the BF16 packers against
 * al_f32_to_bf16 or the plain packer): ties to even both ways, infinities,
 * signalling and quiet NaNs, the largest float, -0; then, last, denormals
 * (which vcvtneps2bf16 reads as zero: draw from the first
 * TU_BF16_SPECIAL_NORMAL for a round without them) */
static const uint32_t tu_bf16_special[] = {0x3F808000u, 0x3F818000u, 0x7F800000u, 0xFF800000u, 0x7F800001u,
                                           0xFFC00001u, 0x7F7FFFFFu, 0x80000000u, 0x00000001u, 0x807FFFFFu};
enum { TU_BF16_SPECIAL_NORMAL = 8, TU_BF16_SPECIALS = sizeof tu_bf16_special / sizeof tu_bf16_special[0] };

static inline void tu_fill(float *x, size_t n, al_rng *r, float s) {
    for (size_t i = 0; i < n; i++) x[i] = s * al_rng_normal(r);
}

/* max|a-b| / max(max|b|, 1e-2) over n entries: for values that can be tiny
 * against their rounding (T = 1 gradients, cancelling poly/relu weights) */
static inline double tu_err_floor(const float *a, const float *b, size_t n) {
    double md = 0, mb = 1e-2;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md || d != d ? d : md;
        mb = fabs((double)b[i]) > mb ? fabs((double)b[i]) : mb;
    }
    return md / mb;
}

/* L = sum(o * R), o from al_attn_fwd_ref(s, in[0], in[1], in[2]) (no entries;
 * lse a scratch): the worst |fd - grad| / (1 + |fd|) of central differences
 * (step 1e-2) against grad[which], over every stride-th entry i of in[which]
 * (n[which] entries); of k and v (which > 0) only columns i % ldk < kv_cols. */
static inline double tu_attn_fd_worst(const al_attn_shape *s, float *const in[3], float *const grad[3],
                                      const size_t n[3], const float *R, size_t no, float *lse, size_t stride,
                                      size_t kv_cols) {
    float *o = calloc(no, sizeof(float));
    double worst = 0;
    for (int which = 0; which < 3; which++)
        for (size_t i = 0; i < n[which]; i += stride) {
            if (which > 0 && (i % (size_t)s->ldk) >= kv_cols) continue;
            float keep = in[which][i];
            double Lp = 0, Lm = 0, h = 1e-2;
            in[which][i] = keep + (float)h;
            al_attn_fwd_ref(s, in[0], in[1], in[2], o, lse);
            for (size_t j = 0; j < no; j++) Lp += (double)o[j] * R[j];
            in[which][i] = keep - (float)h;
            al_attn_fwd_ref(s, in[0], in[1], in[2], o, lse);
            for (size_t j = 0; j < no; j++) Lm += (double)o[j] * R[j];
            in[which][i] = keep;
            double fd = (Lp - Lm) / (2 * h), err = fabs(fd - grad[which][i]) / (1 + fabs(fd));
            worst = err > worst ? err : worst;
        }
    free(o);
    return worst;
}

/* A backward under test: the kernels of a forced set (or a reference, or a
 * set's entry point with its own workspace) on s, o and lse given */
typedef void (*tu_attn_bwd_fn)(const al_attn_shape *s, const float *q, const float *k, const float *v,
                               const float *o, const float *lse, const float *dO, float *dq, float *dk, float *dv);

/* s->grads_overwrite: bwd writes dq, dk, dv where it otherwise adds. Runs
 * bwd adding into zeros and overwriting outputs whose head columns hold NaN
 * and whose padding columns (ld past the heads) hold 7 (on 64-byte
 * boundaries, so unpadded rows take the streaming stores): the head
 * columns must be equal (-0 == 0: an add into +0 gives +0 where a write
 * keeps -0) and the padding untouched. o, lse: of s's forward. 1 = pass. */
static inline int tu_grads_overwrite_ok(const al_attn_shape *s_in, tu_attn_bwd_fn bwd, const float *q, const float *k,
                                        const float *v, const float *o, const float *lse, const float *dO) {
    al_attn_shape s = *s_in;
    const size_t N = (size_t)s.B * s.T;
    const size_t n[3] = {N * s.ldq, N * s.ldk, N * s.ldv}, ld[3] = {(size_t)s.ldq, (size_t)s.ldk, (size_t)s.ldv};
    const size_t cols[3] = {(size_t)s.H * s.dk, (size_t)s.G * s.dk, (size_t)s.G * s.dv};
    float *add[3], *wr[3];
    int ok = 1;
    for (int a = 0; a < 3; a++) {
        const size_t bytes = (n[a] * sizeof(float) + 63) / 64 * 64;
        add[a] = aligned_alloc(64, bytes), wr[a] = aligned_alloc(64, bytes);
        if (!add[a] || !wr[a]) return 0; /* (leaks on this failure path only) */
        memset(add[a], 0, bytes);
        for (size_t i = 0; i < n[a]; i++) wr[a][i] = i % ld[a] < cols[a] ? NAN : 7.0f;
    }
    s.grads_overwrite = 0;
    bwd(&s, q, k, v, o, lse, dO, add[0], add[1], add[2]);
    s.grads_overwrite = 1;
    bwd(&s, q, k, v, o, lse, dO, wr[0], wr[1], wr[2]);
    for (int a = 0; a < 3; a++) {
        for (size_t i = 0; i < n[a]; i++)
            ok &= i % ld[a] < cols[a] ? wr[a][i] == add[a][i] : wr[a][i] == 7.0f;
        free(add[a]), free(wr[a]);
    }
    return ok;
}

/* ---- models ---- */

/* d hidden, f MLP, L layers, H heads of dh, G KV heads (MHA, GQA or MQA by
 * G), T positions; the rest al_config_default's. */
static inline al_config tu_config(int d, int f, int L, int H, int G, int dh, int T) {
    al_config c;
    al_config_default(&c);
    c.hidden_size = d;
    c.intermediate_size = f;
    c.num_layers = L;
    c.num_heads = H;
    c.num_kv_heads = G;
    c.head_dim = dh;
    c.max_position = T;
    c.attention = G == H ? AL_ATTN_MHA : G == 1 ? AL_ATTN_MQA : AL_ATTN_GQA;
    return c;
}

/* MLA on tu_config(48, 80, 2 layers, 4 heads, 32 positions): d_c 20, d_q dq
 * (0: no query compression), nope 8 + rope 4, v 10; tied head or not. */
static inline al_config tu_mla_config(int dq, int tied) {
    al_config c = tu_config(48, 80, 2, 4, 4, 12, 32);
    c.attention = AL_ATTN_MLA;
    c.kv_lora_rank = 20;
    c.q_lora_rank = dq;
    c.qk_nope_head_dim = 8;
    c.qk_rope_head_dim = 4;
    c.v_head_dim = 10;
    c.tie_word_embeddings = tied;
    return c;
}

enum {
    TU_FLAT = 0,     /* every float of m->w: 0.15 N(0,1) */
    TU_GAINS_ONE = 1 /* tensor by tensor; 1-D ones (norm gains) 1 + 0.15 N */
};

/* Random weights of std 0.15 (not the small init), so that every path matters. */
static inline void tu_random_weights(al_model *m, al_rng *r, int mode) {
    if (mode == TU_FLAT) {
        for (size_t i = 0; i < m->n_floats; i++) m->w[i] = 0.15f * al_rng_normal(r);
        return;
    }
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        for (size_t j = 0; j < p->numel; j++)
            m->w[p->offset + j] = (p->ndim == 1 ? 1.0f : 0.0f) + 0.15f * al_rng_normal(r);
    }
}

/* al_model_create + tu_random_weights from seed; -1 (reason on stderr) if refused. */
static inline int tu_make_model(al_model *m, const al_config *c, uint64_t seed, int mode) {
    al_err err;
    if (al_model_create(m, c, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    al_rng r;
    al_rng_seed(&r, seed);
    tu_random_weights(m, &r, mode);
    return 0;
}

static inline void tu_random_tokens(int *tok, int n, al_rng *r) {
    for (int i = 0; i < n; i++) tok[i] = (int)(al_rng_u64(r) % 256);
}

static inline const al_param *tu_find_param(const al_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

/* The forward logits of tok[B*T] (malloc'd; NULL after a failed CHECK):
 * al_acts_create's activations (inference ones for a mapped or BF16 model). */
static inline float *tu_logits(const al_model *m, const int *tok, int B, int T) {
    al_err err;
    al_acts a;
    if (al_acts_create(&a, m, B, T, &err)) {
        CHECK_MSG(0, "acts: %s", err.msg);
        return NULL;
    }
    al_model_forward(m, &a, tok, NULL);
    const size_t n = (size_t)B * T * m->cfg.vocab_size;
    float *out = malloc(sizeof(float) * n);
    memcpy(out, a.logits, sizeof(float) * n);
    al_acts_free(&a);
    return out;
}

/* ---- decode == forward ---- */

typedef struct tu_decode {
    double worst;                         /* max over positions of the logits' relative error */
    double worst_prefill;                 /* the same after prefilling the first half (CHECKed below 1e-4 here) */
    double worst_bf16;                    /* the same with a BF16 cache (CHECKed below 3e-2 here) */
    size_t values_per_token, cache_bytes; /* of the decoder's cache */
    int refuses_full;                     /* a step past T fails with "full" */
} tu_decode;

/* The full forward of tok[0..T) (one sequence) against decoding the same
 * tokens one at a time with a cache of T positions (each step CHECKed). */
static inline tu_decode tu_decode_vs_forward(al_model *m, const int *tok, int T) {
    tu_decode out = {0};
    al_err err;
    al_acts a;
    CHECK(al_acts_create(&a, m, 1, T, &err) == 0);
    al_model_forward(m, &a, tok, NULL);
    al_decoder dec;
    CHECK(al_decoder_create(&dec, m, T, &err) == 0);
    out.values_per_token = dec.values_per_token;
    out.cache_bytes = dec.cache_bytes;
    float logits[256];
    for (int t = 0; t < T; t++) {
        CHECK(al_decoder_step(&dec, tok[t], logits, &err) == 0);
        double e = test_rel_err(logits, a.logits + (size_t)t * 256, 256);
        out.worst = e > out.worst ? e : out.worst;
    }
    /* a full cache refuses another token instead of writing past its end */
    out.refuses_full = al_decoder_step(&dec, 1, logits, &err) == -1 && strstr(err.msg, "full") != NULL;
    al_decoder_free(&dec);
    /* a BF16 cache: half the bytes, each cached value rounded once (a layout
     * or widening mistake would be off by O(1), not by bf16 rounding) */
    CHECK(al_decoder_create_kv(&dec, m, T, AL_DT_BF16, &err) == 0);
    CHECK_MSG(dec.cache_bytes * 2 == out.cache_bytes, "BF16 cache %zu bytes, F32 %zu", dec.cache_bytes,
              out.cache_bytes);
    for (int t = 0; t < T; t++) {
        CHECK(al_decoder_step(&dec, tok[t], logits, &err) == 0);
        double e = test_rel_err(logits, a.logits + (size_t)t * 256, 256);
        out.worst_bf16 = e > out.worst_bf16 ? e : out.worst_bf16;
    }
    CHECK_MSG(out.worst_bf16 < 3e-2, "BF16 cache decode vs forward rel err %g", out.worst_bf16);
    al_decoder_free(&dec);
    /* the first half of the tokens in one prefill (its logits: the last
     * prompt token's), the rest decoded on top of the cache it filled; with
     * an F32 and a BF16 cache */
    const int half = T / 2 > 0 ? T / 2 : 1;
    for (int kv = 0; kv < 2; kv++) {
        const double bound = kv ? 3e-2 : 1e-4;
        double worst = 0;
        CHECK(al_decoder_create_kv(&dec, m, T, kv ? AL_DT_BF16 : AL_DT_F32, &err) == 0);
        CHECK(al_decoder_prefill(&dec, tok, half, logits, &err) == 0 && dec.pos == half);
        worst = test_rel_err(logits, a.logits + (size_t)(half - 1) * 256, 256);
        for (int t = half; t < T; t++) {
            CHECK(al_decoder_step(&dec, tok[t], logits, &err) == 0);
            double e = test_rel_err(logits, a.logits + (size_t)t * 256, 256);
            worst = e > worst ? e : worst;
        }
        /* a second prefill into a cache that is no longer empty is refused */
        CHECK(al_decoder_prefill(&dec, tok, 1, logits, &err) == -1 && strstr(err.msg, "empty") != NULL);
        CHECK_MSG(worst < bound, "%s cache: prefill %d + decode vs forward rel err %g", kv ? "BF16" : "F32", half,
                  worst);
        if (!kv) out.worst_prefill = worst;
        al_decoder_free(&dec);
    }
    al_acts_free(&a);
    return out;
}

/* tu_decode_vs_forward on a model of config c with tu_random_weights(seed,
 * mode) and T random tokens from tok_seed; -1 after a failed CHECK if the
 * model is refused. */
static inline int tu_decode_random_model(const al_config *c, uint64_t seed, int mode, uint64_t tok_seed, int T,
                                         tu_decode *out) {
    al_model m;
    if (tu_make_model(&m, c, seed, mode)) {
        CHECK(0);
        return -1;
    }
    int *tok = malloc(sizeof(int) * (size_t)T);
    al_rng r;
    al_rng_seed(&r, tok_seed);
    tu_random_tokens(tok, T, &r);
    *out = tu_decode_vs_forward(&m, tok, T);
    free(tok);
    al_model_free(&m);
    return 0;
}


/* ---- decode caches and small models of every design ---- */

/* The cache layouts of the decode kernels' tests: TU_LAYOUT_KV [K groups |
 * V groups]; TU_LAYOUT_MLA one group whose value is the first dv key
 * columns; TU_LAYOUT_LRKV one shared group [K_s (dk) | V_s (dv)] then
 * per-head parts [R_K (H r) | R_V (H r)]. */
enum { TU_LAYOUT_KV, TU_LAYOUT_MLA, TU_LAYOUT_LRKV };
static inline al_decode_view tu_decode_view(int layout, int H, int G, int dk, int dv, int r) {
    al_decode_view v = {0};
    if (layout == TU_LAYOUT_MLA) {
        v.row = (size_t)dk;
    } else if (layout == TU_LAYOUT_LRKV) {
        v.row = (size_t)(dk + dv + 2 * H * r);
        v.v_off = (size_t)dk, v.k2_off = (size_t)(dk + dv), v.v2_off = (size_t)(dk + dv + H * r);
        v.dk2 = v.dv2 = r;
    } else {
        v.row = (size_t)G * (dk + dv);
        v.k_group = (size_t)dk, v.v_off = (size_t)G * dk, v.v_group = (size_t)dv;
    }
    return v;
}

/* The attention shape of a decode kernel test: one query against n cached
 * positions, H heads in G groups, scale 1/sqrt(dk + r) (r: LRKV's rank),
 * poly cubic with c = 1/sqrt(n), relu/sigmoid over n. */
static inline al_attn_shape tu_decode_shape(int H, int G, int dk, int dv, int r, int n, al_score_kind score) {
    al_attn_shape s = {1, n, H, G, dk, dv, 0, 0, 0, 0, 1.0f / sqrtf((float)(dk + r))};
    s.score = score;
    s.poly_power = 3;
    s.poly_coef = 1.0f / sqrtf((float)n);
    s.score_n = (float)n;
    return s;
}

/* A small model config of each design (2 layers, hidden 64, 4 heads of 16),
 * with the given score function (poly: cubic; relu/sigmoid: N = 64). */
static inline al_config tu_design_config(int design, al_score_kind score) {
    al_config c = tu_config(64, 96, 2, 4, design == AL_ATTN_GQA ? 2 : design == AL_ATTN_MQA ? 1 : 4, 16, 64);
    c.attention = design;
    if (design == AL_ATTN_MLA) {
        c.kv_lora_rank = 24, c.q_lora_rank = 0, c.qk_nope_head_dim = 16, c.qk_rope_head_dim = 8, c.v_head_dim = 16;
        c.head_dim = 24;
    }
    if (design == AL_ATTN_LRKV) c.lrkv_rank = 6;
    c.score = score;
    c.poly_power = 3;
    c.score_n = 64;
    return c;
}

/* logits[T][V] of T tokens decoded one at a time through dec (emptied first) */
static inline int tu_decode_all(al_decoder *dec, const int *tok, int T, float *logits, al_err *err) {
    al_decoder_reset(dec);
    for (int t = 0; t < T; t++)
        if (al_decoder_step(dec, tok[t], logits + (size_t)t * dec->m->cfg.vocab_size, err)) return -1;
    return 0;
}

/* ---- configs and checkpoints ---- */

/* al_config_parse of the JSON text printf(fmt, ...) must fail with a one-line
 * message containing want (exact: equal to want). */
__attribute__((format(printf, 3, 4))) static inline void tu_expect_config_error(const char *want, int exact,
                                                                                const char *fmt, ...) {
    char json[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(json, sizeof json, fmt, ap);
    va_end(ap);
    al_config c;
    al_err err = {{0}};
    int rc = al_config_parse(&c, json, NULL, &err);
    int match = exact ? strcmp(err.msg, want) == 0 : strstr(err.msg, want) != NULL;
    CHECK_MSG(rc == -1 && match && !strchr(err.msg, '\n'), "config %s -> '%s' (want '%s')", json, err.msg, want);
}

/* Saves a (extra_json: al_model_save's extra) to dir and loads it into b
 * (extra: al_model_load's): both succeed and the weights are bit-identical.
 * Returns 0 if b was loaded (then the caller frees it). */
static inline int tu_save_load(const al_model *a, al_model *b, const char *dir, const char *extra_json,
                               char **extra) {
    al_err err = {{0}};
    CHECK_MSG(al_model_save(a, dir, extra_json, &err) == 0, "save to %s: %s", dir, err.msg);
    int rc = al_model_load(b, dir, extra, &err);
    CHECK_MSG(rc == 0, "load from %s: %s", dir, err.msg);
    if (rc == 0) CHECK(b->n_floats == a->n_floats && memcmp(a->w, b->w, a->n_floats * sizeof(float)) == 0);
    return rc;
}

/* dir/config.json as text (malloc'd; NULL after a failed CHECK). */
static inline char *tu_read_config(const char *dir) {
    char path[512], *text = NULL;
    size_t len;
    al_err err;
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(al_read_file(path, &text, &len, &err) == 0);
    return text;
}

/* rm -rf dir; 0 on success. */
static inline int tu_remove_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

/* ---- training ---- */

/* Zero the gradients, forward and backward on (in, tg): the loss. */
static inline double tu_loss_and_grads(al_model *m, al_acts *a, const int *in, const int *tg) {
    al_model_zero_grads(m);
    double loss = al_model_forward(m, a, in, tg);
    al_model_backward(m, a);
    return loss;
}

/* Forward + backward on (in, tg) at 1 and then at 2 OpenMP threads (the
 * count restored after): 1 if loss and gradients are the same bits. The
 * gradients of the 2-thread pass stay in m->g. */
static inline int tu_same_bits_1_2_threads(al_model *m, al_acts *a, const int *in, const int *tg) {
    float *g1 = malloc(sizeof(float) * m->n_floats);
    const int saved = omp_get_max_threads();
    double loss[2];
    for (int pass = 0; pass < 2; pass++) {
        omp_set_num_threads(pass + 1);
        loss[pass] = tu_loss_and_grads(m, a, in, tg);
        if (pass == 0) memcpy(g1, m->g, sizeof(float) * m->n_floats);
    }
    omp_set_num_threads(saved);
    int same = loss[0] == loss[1] && memcmp(g1, m->g, sizeof(float) * m->n_floats) == 0;
    free(g1);
    return same;
}

#endif
