/*
 * score_internal.h: what score.c shares with the SIMD kernel files
 * (score_avx512.c, score_avx2.c, both built from score_kern.h; the BF16
 * kernels score_bf16.c, score_avx512bf16.c, score_amx.c, built from
 * score_bf16_kern.h): the score
 * function with its constants resolved, and the kernel entry points that
 * al_attn_fwd / al_attn_bwd dispatch to (core/cpu.h picks the set), with
 * the workspace each needs.
 */
#ifndef AL_SCORE_INTERNAL_H
#define AL_SCORE_INTERNAL_H

#include <math.h>
#include <xmmintrin.h>

#include "attn.h"

/* The score function with its constants resolved once per call. */
typedef struct score_fn {
    al_score_kind kind;
    int p;          /* poly power */
    float c;        /* poly coefficient */
    float inv_n;    /* relu: 1/N */
    float log_n;    /* sigmoid: log N */
} score_fn;

static inline score_fn al_score_fn_of(const al_attn_shape *s) {
    /* N < 1 would make relu/sigmoid meaningless; only a zeroed shape (softmax) gets here with 0 */
    const float n = s->score_n >= 1.0f ? s->score_n : 1.0f;
    score_fn f = {s->score, s->poly_power >= 1 ? s->poly_power : 1, s->poly_coef, 1.0f / n, logf(n)};
    return f;
}

/* Flush-to-zero and denormals-are-zero for the calling thread, returning
 * the previous MXCSR for al_ftz_restore. Every kernel thread sets them for
 * the length of its parallel region: with sharp attention most weights
 * 2^(s - m) are below 2^-126, and subnormal results and operands cost
 * microcode assists of ~100 cycles each; measured, a forward with q scaled
 * 30x ran 13x slower (backward 23x, the BLAS-tile set alike). Flushed,
 * those weights are exactly 0, 2^-126 below the row's largest: invisible
 * next to it in float. */
static inline unsigned al_ftz_on(void) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return csr;
}

static inline void al_ftz_restore(unsigned csr) { _mm_setcsr(csr); }

/* dk, dv of every KV head += (s->grads_overwrite: =) the n partial dk | dv
 * blocks its work items wrote (part[B][G][n][T][dk + dv]), added in block
 * order, so the sums do not depend on the thread count. A work-shared loop
 * over the rows (omp for): call it inside a parallel region, after the
 * loop that wrote part. */
static inline void al_attn_add_partials(const al_attn_shape *s, const float *part, int n, float *dk, float *dv) {
    const int T = s->T, G = s->G, DK = s->dk;
    const size_t pw = (size_t)DK + s->dv, stride = (size_t)T * pw;
#pragma omp for schedule(static)
    for (long rt = 0; rt < (long)s->B * T * G; rt++) {
        const int g = (int)(rt % G), t = (int)((rt / G) % T), b = (int)(rt / ((long)G * T));
        float *dkr = dk + ((size_t)b * T + t) * s->ldk + (size_t)g * DK;
        float *dvr = dv + ((size_t)b * T + t) * s->ldv + (size_t)g * s->dv;
        const float *p0 = part + (((size_t)b * G + g) * n * T + t) * pw;
        for (size_t e = 0; e < pw; e++) {
            float acc = p0[e];
            for (int c = 1; c < n; c++) acc += p0[c * stride + e];
            float *dst = e < (size_t)DK ? dkr + e : dvr + (e - DK);
            *dst = s->grads_overwrite ? acc : *dst + acc;
        }
    }
}

/* The register-blocked sets' entry points (score_kern.h, built as _avx512
 * and _avx2; in BF16 mode score_bf16_kern.h, built as _bf16 (portable),
 * _avx512bf16 and _amx), same contracts as al_attn_fwd / al_attn_bwd (attn.h) plus
 * their workspace: ws holds al_attn_{fwd,bwd}_floats_*(s, nthr) floats
 * (64-byte aligned) and the call runs nthr threads. */
#define AL_ATTN_SET_DECL(sfx)                                                                                    \
    size_t al_attn_fwd_floats_##sfx(const al_attn_shape *s, int nthr);                                          \
    void al_attn_fwd_##sfx(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o,     \
                           float *lse, float *ws, int nthr);                                                     \
    size_t al_attn_bwd_floats_##sfx(const al_attn_shape *s, int nthr);                                          \
    void al_attn_bwd_##sfx(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o, \
                           const float *lse, const float *dout, float *dq, float *dk, float *dv, float *ws, int nthr);
AL_ATTN_SET_DECL(avx512)
AL_ATTN_SET_DECL(avx2)
AL_ATTN_SET_DECL(bf16)
AL_ATTN_SET_DECL(avx512bf16)
AL_ATTN_SET_DECL(amx)
#undef AL_ATTN_SET_DECL
/* the amx set's one-head items software-pipelined (1, the default) or in
 * the plain loop (0): a test hook (score_bf16_kern.h) */
void al_attn_set_pipelined_amx(int on);
/* each BF16 set's units packed by the threads that run them where the
 * shape allows (1, the default) or every tile by all threads first (0): a
 * test hook (score_bf16_kern.h, own_units) */
void al_attn_set_own_units_bf16(int on);
void al_attn_set_own_units_avx512bf16(int on);
void al_attn_set_own_units_amx(int on);
/* n floats rounded to bf16 as each BF16 set's packers round q, k, v, dO (a
 * test hook: the same bits as al_f32_to_bf16 for every value) */
void al_attn_round_bf16(uint16_t *dst, const float *src, int n);
void al_attn_round_avx512bf16(uint16_t *dst, const float *src, int n);
void al_attn_round_amx(uint16_t *dst, const float *src, int n);
/* y = 2^x as the BF16 sets compute the softmax weights (before rounding),
 * n a multiple of the set's vector width (16; bf16-portable 8) */
void al_attn_exp2_weights_bf16(float *y, const float *x, int n);
void al_attn_exp2_weights_avx512bf16(float *y, const float *x, int n);
void al_attn_exp2_weights_amx(float *y, const float *x, int n);

/* One decode work item (decode.c): the heads of one KV group against up to a
 * chunk of cached positions, the cache in F32 or BF16 (contract in
 * score_kern.h). */
void al_attn_decode_group_avx512(const al_attn_shape *s, int pg, const float *Q, int ldq, al_dtype dt, const void *K,
                                 const void *K2, int dk2, const void *V, const void *V2, int dv2, size_t row, int n,
                                 float *S, int lds, float *P, int ldp, float *cmax, float *csum);
void al_attn_decode_group_avx2(const al_attn_shape *s, int pg, const float *Q, int ldq, al_dtype dt, const void *K,
                               const void *K2, int dk2, const void *V, const void *V2, int dv2, size_t row, int n,
                               float *S, int lds, float *P, int ldp, float *cmax, float *csum);

#endif
