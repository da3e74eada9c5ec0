/*
 * score.c: the shared attention kernels every KV design calls, for the four
 * score functions of attention.md 2 (softmax, poly, relu, sigmoid), causal
 * or bidirectional: the public entry points, which pick a kernel set at run
 * time, the "generic" kernel set, and the plain references.
 *
 * Dispatch (core/cpu.h): al_attn_fwd / al_attn_bwd run
 *   avx512   score_avx512.c  register-blocked micro-kernels, 16 lanes
 *   avx2     score_avx2.c    the same source (score_kern.h), 8 lanes
 *   generic  below           tiles of single-threaded cblas_sgemm calls
 * choosing the best the CPU has, or what ATTNLAB_CPU asks for (lower only).
 * All three compute the same thing to fp32 rounding (tests/unit/test_kernels.c
 * compares each with the references and with each other); docs/kernels.md
 * explains the fast ones. With the product precision at BF16 (nn.h,
 * al_precision_now) they run instead the BF16 sets of score_bf16_kern.h:
 *   amx            score_amx.c         products on AMX tiles (tdpbf16ps)
 *   avx512-bf16    score_avx512bf16.c  vdpbf16ps
 *   bf16-portable  score_bf16.c        AVX2 FMAs on widened bf16 pairs
 * which compute the BF16 definition of the references below to fp32
 * rounding (tests/unit/test_attn_bf16.c); the generic set has no BF16 form
 * (BF16 mode at ATTNLAB_CPU=generic, and without a workspace, computes fp32).
 *
 * Every set is streamed in both directions: a thread only ever holds one
 * tile of scores (and, in backward, one of score gradients), so memory is
 * O(T) per head for any T and the tiles stay in cache.
 *
 * The generic set: work is cut into tiles of QB query rows x KB keys; tile
 * products are single-threaded sgemm calls (OpenBLAS runs one thread inside
 * an OpenMP region, so threads never nest).
 *
 * Forward, per (sequence, head, query block), over its key tiles in order:
 *   softmax  online: each row keeps its running max m and sum l; a new tile
 *            rescales the row's output accumulator by exp(m_old - m_new)
 *            before adding P V, and lse = m + log l is kept for backward;
 *   others   each weight depends on its own score only, so P = f(S) of the
 *            tile is added into the output as it is: no max, no sum, nothing
 *            saved.
 * Backward recomputes each tile's scores (softmax: P = exp(S - lse); the
 * others: f(S) and f'(S) from S itself) and needs D_i = dO_i . O_i only for
 * softmax (the derivative of the normalisation).
 *
 * Parallelism and determinism: forward runs over (sequence, head, query
 * block); every output row belongs to one item. Backward runs over
 * (sequence, head): a head's dq rows and its whole pass over dk, dv of its
 * KV head stay within one item, in a fixed tile order. When several query
 * heads share a KV head (GQA, MQA), each head writes its dk, dv into its own
 * partial buffer and a second loop adds the partials in head order; so the
 * sums never race, are the same for any thread count, and MQA still has B*H
 * items to spread over threads rather than B.
 *
 * Score functions are dispatched outside the inner loops: each elementwise
 * map is its own tight loop per function (and per small power) so gcc
 * vectorises it.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "score_internal.h"
#include "../core/cpu.h"
#include "../core/thread_buf.h"
#include "../core/dtype.h"
#include "../nn/fastmath.h"

/* QB x KB tiles: 64 x 128 keeps a tile (32 KB) and the operands of its three
 * products within L2, and the products large enough that sgemm's call
 * overhead stays a few percent (measured at d_h = 64). */
enum { QB = 64, KB = 128 };

/* exp over a row, vectorised through al_expf (fastmath.h). */
void al_expf_inplace(float *restrict x, int n) {
    for (int i = 0; i < n; i++) x[i] = al_expf(x[i]);
}

/* Row reductions. simd: without it gcc keeps them scalar (a dependent chain
 * per element, as slow as the tile's sgemm); the vector order is fixed at
 * compile time, so results do not depend on the thread count. */
static float row_max(const float *x, int n, float init) {
    float mx = init;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* x <- exp(x - shift), returning the sum: one pass over the row */
static float exp_shift_sum(float *x, int n, float shift) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        const float e = al_expf(x[j] - shift);
        x[j] = e;
        sum += e;
    }
    return sum;
}

/* The config's score function and mask into a shape: every design builds its
 * shapes through here, so the config's `bidirectional` (1 for the vision
 * transformer) reaches the kernels without any design knowing about tasks. */
void al_attn_set_score(al_attn_shape *s, const al_config *c) {
    s->bidirectional = c->bidirectional;
    s->score = c->score;
    s->poly_power = c->poly_power;
    s->score_n = (float)c->score_n;
    s->poly_coef = c->poly_scale_auto ? (float)(1.0 / sqrt((double)c->score_n)) : (float)c->poly_scale;
}

/* x^p by squaring: a config may ask for any power, and this stays O(log p). */
static inline float powi(float x, int p) {
    float r = 1.0f;
    for (; p; p >>= 1, x *= x)
        if (p & 1) r *= x;
    return r;
}

/* x > 0 ? y : 0, on the bits (NaN x counts as positive): written with a
 * float compare or select gcc keeps a branch (a float compare may trap) and
 * does not vectorise the loop. */
static inline float if_positive(float x, float y) {
    int32_t b;
    uint32_t yb;
    memcpy(&b, &x, sizeof b);
    memcpy(&yb, &y, sizeof yb);
    yb &= (uint32_t)-(int32_t)(b > 0);
    memcpy(&y, &yb, sizeof y);
    return y;
}

/* x[0..n): scores -> weights for the elementwise functions (not softmax). */
static void map_fwd(const score_fn *f, float *restrict x, int n) {
    const float c = f->c, inv_n = f->inv_n, log_n = f->log_n;
    switch (f->kind) {
    case AL_SCORE_POLY:
        switch (f->p) {
        case 1:
            for (int j = 0; j < n; j++) x[j] = c * x[j];
            break;
        case 2:
            for (int j = 0; j < n; j++) x[j] = c * x[j] * x[j];
            break;
        case 3:
            for (int j = 0; j < n; j++) x[j] = c * x[j] * x[j] * x[j];
            break;
        default:
            for (int j = 0; j < n; j++) x[j] = c * powi(x[j], f->p);
        }
        break;
    case AL_SCORE_RELU:
        for (int j = 0; j < n; j++) x[j] = if_positive(x[j], x[j] * inv_n);
        break;
    case AL_SCORE_SIGMOID:
        for (int j = 0; j < n; j++) x[j] = 1.0f / (1.0f + al_expf(log_n - x[j]));
        break;
    default:
        break;
    }
}

/* x[0..n): scores -> weights f(s); g[0..n): dL/dp -> dL/ds = f'(s) dL/dp.
 * For the elementwise functions (not softmax). */
static void map_bwd(const score_fn *f, float *restrict x, float *restrict g, int n) {
    const float c = f->c, inv_n = f->inv_n, log_n = f->log_n;
    switch (f->kind) {
    case AL_SCORE_POLY: {
        const float cp = c * (float)f->p;
        switch (f->p) {
        case 1:
            for (int j = 0; j < n; j++) x[j] = c * x[j], g[j] = c * g[j];
            break;
        case 2:
            for (int j = 0; j < n; j++) {
                const float s = x[j];
                x[j] = c * s * s;
                g[j] = cp * s * g[j];
            }
            break;
        case 3:
            for (int j = 0; j < n; j++) {
                const float s = x[j], s2 = s * s;
                x[j] = c * s2 * s;
                g[j] = cp * s2 * g[j];
            }
            break;
        default:
            for (int j = 0; j < n; j++) {
                const float s = x[j], sp1 = powi(s, f->p - 1);
                x[j] = c * sp1 * s;
                g[j] = cp * sp1 * g[j];
            }
        }
        break;
    }
    case AL_SCORE_RELU:
        for (int j = 0; j < n; j++) {
            const float s = x[j];
            x[j] = if_positive(s, s * inv_n);
            g[j] = if_positive(s, g[j] * inv_n);
        }
        break;
    case AL_SCORE_SIGMOID:
        for (int j = 0; j < n; j++) {
            const float p = 1.0f / (1.0f + al_expf(log_n - x[j]));
            x[j] = p;
            g[j] = g[j] * p * (1.0f - p);
        }
        break;
    default:
        break;
    }
}

void al_score_row(const al_attn_shape *s, float *row, int n) {
    const score_fn f = al_score_fn_of(s);
    if (f.kind != AL_SCORE_SOFTMAX) {
        map_fwd(&f, row, n);
        return;
    }
    if (n <= 0) return;
    const float mx = row_max(row, n, row[0]);
    const float inv = 1.0f / exp_shift_sum(row, n, mx);
    for (int j = 0; j < n; j++) row[j] *= inv;
}

/* Keys of the tile [j0, j0 + kb) that query row i sees: a prefix of the tile. */
static inline int visible(const al_attn_shape *s, int i, int j0, int kb) {
    if (s->bidirectional) return kb;
    const int n = i - j0 + 1;
    return n < 0 ? 0 : n > kb ? kb : n;
}

/* generic set: q[B*T, ldq] k[B*T, ldk] v[B*T, ldv] -> o[B*T, ldo] (head columns only), lse[B, H, T] */
static void attn_fwd_generic(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse) {
    const int T = s->T, H = s->H, dv = s->dv, per_group = s->H / s->G, nqb = (T + QB - 1) / QB;
    const score_fn f = al_score_fn_of(s);
    const int softmax = f.kind == AL_SCORE_SOFTMAX;
    const long items = (long)s->B * H * nqb;
#pragma omp parallel
    {
        const unsigned csr = al_ftz_on();
        _Alignas(64) float S[QB * KB]; /* one tile of scores: 32 KB of the thread's stack */
        float mrow[QB], lrow[QB];
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < items; it++) {
            /* causal: latest (largest) query blocks first, for load balance */
            const int qb = nqb - 1 - (int)(it % nqb);
            const int h = (int)((it / nqb) % H), b = (int)(it / ((long)nqb * H)), g = h / per_group;
            const int i0 = qb * QB, i1 = i0 + QB < T ? i0 + QB : T, m = i1 - i0;
            const int kend = s->bidirectional ? T : i1;
            const float *q_p = q + (size_t)(b * T + i0) * s->ldq + (size_t)h * s->dk;
            const float *k_p = k + (size_t)b * T * s->ldk + (size_t)g * s->dk;
            const float *v_p = v + (size_t)b * T * s->ldv + (size_t)g * dv;
            float *o_p = o + (size_t)(b * T + i0) * s->ldo + (size_t)h * dv;
            for (int r = 0; r < m; r++) {
                memset(o_p + (size_t)r * s->ldo, 0, sizeof(float) * dv);
                mrow[r] = -INFINITY;
                lrow[r] = 0.0f;
            }
            for (int j0 = 0; j0 < kend; j0 += KB) {
                const int kb = j0 + KB < kend ? KB : kend - j0;
                /* S[m, kb] = scale * Q_blk[m, dk] . K_tile[kb, dk]^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kb, s->dk, s->scale, q_p, s->ldq,
                            k_p + (size_t)j0 * s->ldk, s->ldk, 0.0f, S, kb);
                for (int r = 0; r < m; r++) {
                    float *row = S + (size_t)r * kb;
                    const int nv = visible(s, i0 + r, j0, kb);
                    if (softmax && nv > 0) {
                        const float mx = row_max(row, nv, mrow[r]);
                        /* first tile: exp(-inf) = 0 scales the zeroed accumulator */
                        const float alpha = al_expf(mrow[r] - mx);
                        lrow[r] = lrow[r] * alpha + exp_shift_sum(row, nv, mx);
                        mrow[r] = mx;
                        if (alpha != 1.0f) {
                            float *orow = o_p + (size_t)r * s->ldo;
                            for (int c = 0; c < dv; c++) orow[c] *= alpha;
                        }
                    } else if (!softmax) {
                        map_fwd(&f, row, nv);
                    }
                    /* masked pairs: exactly 0, whatever their score was */
                    for (int j = nv; j < kb; j++) row[j] = 0.0f;
                }
                /* O_blk[m, dv] += P[m, kb] . V_tile[kb, dv] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, dv, kb, 1.0f, S, kb,
                            v_p + (size_t)j0 * s->ldv, s->ldv, 1.0f, o_p, s->ldo);
            }
            if (lse) {
                float *lse_p = lse + ((size_t)b * H + h) * T + i0;
                for (int r = 0; r < m; r++) lse_p[r] = softmax ? mrow[r] + logf(lrow[r]) : 0.0f;
            }
            if (softmax)
                for (int r = 0; r < m; r++) {
                    const float inv = 1.0f / lrow[r];
                    float *orow = o_p + (size_t)r * s->ldo;
                    for (int c = 0; c < dv; c++) orow[c] *= inv;
                }
        }
        al_ftz_restore(csr);
    }
}

/* generic set: q, k, v, o as forward, lse[B, H, T] (softmax only), dout[B*T, ldo]
 *   -> dq[B*T, ldq], dk[B*T, ldk], dv[B*T, ldv], accumulated.
 * part: NULL, or (heads sharing a KV head only) B*H*T*(dk + dv) floats for
 * each query head's own dk | dv, so that every head is an item of its own;
 * without it an item is a whole KV group, its heads in order (fewer items
 * for the threads, same sums within fp32 rounding, no memory). */
static void attn_bwd_generic(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                             const float *lse, const float *dout, float *dq, float *dk, float *dv, float *part) {
    const int B = s->B, T = s->T, H = s->H, G = s->G, per_group = H / G, nqb = (T + QB - 1) / QB;
    const int DK = s->dk, DV = s->dv;
    const score_fn f = al_score_fn_of(s);
    const int softmax = f.kind == AL_SCORE_SOFTMAX;
    /* items: (sequence, KV group, chunk of hpc heads); one head per chunk when partials are kept */
    const int shared = per_group > 1 && part, nch = shared ? per_group : 1, hpc = per_group / nch;
    const size_t pw = (size_t)DK + DV;
    const int items = B * G * nch;
#pragma omp parallel
    {
        const unsigned csr = al_ftz_on();
        _Alignas(64) float P[QB * KB], dS[QB * KB]; /* one tile of weights and of their gradients: 64 KB of stack */
        float Drow[QB];
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            const int b = it / (G * nch), g = (it / nch) % G, ch = it % nch;
            const float *k_p = k + (size_t)b * T * s->ldk + (size_t)g * DK;
            const float *v_p = v + (size_t)b * T * s->ldv + (size_t)g * DV;
            for (int hh = 0; hh < hpc; hh++) {
                const int h = g * per_group + ch * hpc + hh;
                float *dk_p, *dv_p;
                int lddk, lddv;
                if (shared) { /* this head's own partials, zeroed here (the products add into them) */
                    dk_p = part + ((size_t)b * H + h) * T * pw;
                    dv_p = dk_p + DK;
                    lddk = lddv = (int)pw;
                    memset(dk_p, 0, sizeof(float) * T * pw);
                } else {
                    dk_p = dk + (size_t)b * T * s->ldk + (size_t)g * DK;
                    dv_p = dv + (size_t)b * T * s->ldv + (size_t)g * DV;
                    lddk = s->ldk;
                    lddv = s->ldv;
                }
                for (int qb = 0; qb < nqb; qb++) {
                    const int i0 = qb * QB, i1 = i0 + QB < T ? i0 + QB : T, m = i1 - i0;
                    const int kend = s->bidirectional ? T : i1;
                    const size_t row0 = (size_t)(b * T + i0);
                    const float *q_p = q + row0 * s->ldq + (size_t)h * DK;
                    const float *do_p = dout + row0 * s->ldo + (size_t)h * DV;
                    float *dq_p = dq + row0 * s->ldq + (size_t)h * DK;
                    const float *lse_p = softmax ? lse + ((size_t)b * H + h) * T + i0 : NULL;
                    if (softmax) /* D_i = dO_i . O_i = sum_j p_ij dP_ij */
                        for (int r = 0; r < m; r++) {
                            const float *a = do_p + (size_t)r * s->ldo, *c = o + (row0 + r) * s->ldo + (size_t)h * DV;
                            float acc = 0.0f;
    #pragma omp simd reduction(+ : acc)
                            for (int e = 0; e < DV; e++) acc += a[e] * c[e];
                            Drow[r] = acc;
                        }
                    for (int j0 = 0; j0 < kend; j0 += KB) {
                        const int kb = j0 + KB < kend ? KB : kend - j0;
                        const float *kt = k_p + (size_t)j0 * s->ldk, *vt = v_p + (size_t)j0 * s->ldv;
                        /* S[m, kb] = scale Q_blk K_tile^T ;  dP[m, kb] = dO_blk[m, dv] . V_tile[kb, dv]^T */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kb, DK, s->scale, q_p, s->ldq, kt, s->ldk,
                                    0.0f, P, kb);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kb, DV, 1.0f, do_p, s->ldo, vt, s->ldv,
                                    0.0f, dS, kb);
                        /* P <- weights, dS <- dL/ds (gradient wrt the scaled score) */
                        for (int r = 0; r < m; r++) {
                            float *p = P + (size_t)r * kb, *ds = dS + (size_t)r * kb;
                            const int nv = visible(s, i0 + r, j0, kb);
                            if (softmax) {
                                const float l = lse_p[r], D = Drow[r];
                                for (int j = 0; j < nv; j++) {
                                    p[j] = al_expf(p[j] - l);
                                    ds[j] = p[j] * (ds[j] - D);
                                }
                            } else {
                                map_bwd(&f, p, ds, nv);
                            }
                            for (int j = nv; j < kb; j++) p[j] = ds[j] = 0.0f;
                        }
                        /* dQ_blk[m, dk] += scale dS . K_tile ; dK_tile[kb, dk] += scale dS^T . Q_blk ;
                         * dV_tile[kb, dv] += P^T . dO_blk */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, DK, kb, s->scale, dS, kb, kt, s->ldk,
                                    1.0f, dq_p, s->ldq);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kb, DK, m, s->scale, dS, kb, q_p, s->ldq,
                                    1.0f, dk_p + (size_t)j0 * lddk, lddk);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kb, DV, m, 1.0f, P, kb, do_p, s->ldo, 1.0f,
                                    dv_p + (size_t)j0 * lddv, lddv);
                    }
                }
            }
        }
        if (shared) al_attn_add_partials(s, part, per_group, dk, dv); /* in head order */
        al_ftz_restore(csr);
    }
}

/* ---- the kernels' workspace: one arena per calling thread ----
 * The register-blocked sets pack K/V tiles and keep per-thread tiles in a
 * workspace of O(T) per head (score_kern.h); the generic set needs one only
 * for the per-head partial sums of a shared KV head. Each thread that calls
 * the kernels owns one arena, grown to the largest call so far (with room
 * for a somewhat larger one) and kept, since allocating per call cost page
 * faults (~6 % of a forward). Its owner plans it up front with
 * al_attn_reserve (failure: one line in al_err) and frees it with
 * al_attn_release; a thread's arena is also freed when the thread exits. A
 * call the arena is too small for grows it; if memory runs out there, the
 * call takes the path that needs none (the generic set, whole KV groups per
 * item): slower, the same results within fp32 rounding. The kernels never
 * fail, print or exit. */

static _Thread_local al_thread_buf my_arena; /* core/thread_buf.h: freed when the thread exits */
static int test_no_workspace, test_poison_workspace;

/* The calling thread's arena, grown to at least `floats` floats (64-byte
 * aligned); NULL if memory ran out (the arena is then empty). */
static float *arena_get(size_t floats) {
    if (test_no_workspace) return NULL;
    if (floats > SIZE_MAX / sizeof(float) / 2) return NULL;
    /* some room for the next, larger call */
    float *ws = al_thread_buf_get(&my_arena, AL_THREAD_BUF_ATTENTION, floats * sizeof(float),
                                  ((floats + floats / 4 + 15) & ~(size_t)15) * sizeof(float));
    if (ws && test_poison_workspace) memset(ws, 0xff, floats * sizeof(float)); /* NaN: nothing may read it unset */
    return ws;
}

void al_attn_release(void) { al_thread_buf_release(&my_arena, AL_THREAD_BUF_ATTENTION); }

size_t al_attn_workspace_bytes(void) { return my_arena.cap; }

void al_attn_test_no_workspace(int on) { test_no_workspace = on; }
void al_attn_test_poison_workspace(int on) { test_poison_workspace = on; }

/* ---- the public entry points: the kernel set core/cpu.h selects ---- */

/* A register-blocked set (score_kern.h), the workspace of each call, and
 * the core/cpu.h set it needs (whose name it reports). */
typedef struct fast_set {
    size_t (*fwd_floats)(const al_attn_shape *s, int nthr);
    void (*fwd)(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse,
                float *ws, int nthr);
    size_t (*bwd_floats)(const al_attn_shape *s, int nthr);
    void (*bwd)(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                const float *lse, const float *dout, float *dq, float *dk, float *dv, float *ws, int nthr);
    al_cpu_level needs;
    const char *name; /* al_attn_kernel_name's */
} fast_set;

/* X(suffix, core/cpu.h set it needs, name): the fp32 sets, then the BF16
 * ones (each list best last) */
#define FP32_SETS(X) X(avx2, AL_CPU_AVX2, "avx2") X(avx512, AL_CPU_AVX512, "avx512")
#define BF16_SETS(X) \
    X(bf16, AL_CPU_AVX2, "bf16-portable") X(avx512bf16, AL_CPU_AVX512_BF16, "avx512-bf16") X(amx, AL_CPU_AMX, "amx")
#define FAST_SET(sfx, level, name) \
    {al_attn_fwd_floats_##sfx, al_attn_fwd_##sfx, al_attn_bwd_floats_##sfx, al_attn_bwd_##sfx, level, name},
static const fast_set fp32_sets[] = {FP32_SETS(FAST_SET)}, bf16_sets[] = {BF16_SETS(FAST_SET)};
#undef FAST_SET

/* The best set of list[n] that the CPU set in use runs; NULL: none. */
static const fast_set *best_of(const fast_set *list, int n, al_cpu_level l) {
    const fast_set *best = NULL;
    for (int i = 0; i < n; i++)
        if (l >= list[i].needs) best = &list[i];
    return best;
}

/* The kernel set of the CPU set in use and the product precision (nn.h):
 * F32 the register-blocked fp32 sets; BF16 amx > avx512-bf16 >
 * bf16-portable (AVX2, the build's baseline). NULL: the generic set, which
 * is fp32 only (BF16 mode at ATTNLAB_CPU=generic computes fp32). */
static const fast_set *fast_set_now(void) {
    const al_cpu_level l = al_cpu_level_now();
    if (al_precision_now() == AL_PREC_BF16) return best_of(bf16_sets, (int)(sizeof bf16_sets / sizeof *bf16_sets), l);
    return best_of(fp32_sets, (int)(sizeof fp32_sets / sizeof *fp32_sets), l);
}

const char *al_attn_kernel_name(void) {
    const fast_set *fs = fast_set_now();
    return fs ? fs->name : al_cpu_level_name(AL_CPU_GENERIC);
}

/* Floats of the generic backward's per-head partials (0: no KV head is shared). */
static size_t generic_part_floats(const al_attn_shape *s) {
    return s->H > s->G ? (size_t)s->B * s->H * s->T * ((size_t)s->dk + s->dv) : 0;
}

int al_attn_reserve(const al_attn_shape *s, al_err *err) {
    const fast_set *fs = fast_set_now();
    const int nthr = omp_get_max_threads();
    size_t need = generic_part_floats(s);
    if (fs) {
        const size_t f = fs->fwd_floats(s, nthr), b = fs->bwd_floats(s, nthr);
        need = f > b ? f : b;
    }
    if (need && !arena_get(need))
        return al_errf(err, "attention workspace: out of memory (%zu MB)", need * sizeof(float) >> 20);
    return 0;
}

void al_attn_fwd(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse) {
    const fast_set *fs = fast_set_now();
    const int nthr = omp_get_max_threads();
    float *ws = fs ? arena_get(fs->fwd_floats(s, nthr)) : NULL;
    if (ws) fs->fwd(s, q, k, v, o, lse, ws, nthr);
    else attn_fwd_generic(s, q, k, v, o, lse);
}

/* What an overwriting backward (s->grads_overwrite) computes, for the
 * backwards that only add: zeroes the head columns of dq, dk, dv and
 * returns the shape with grads_overwrite 0 to add into them */
static al_attn_shape grads_zeroed(const al_attn_shape *s, float *dq, float *dk, float *dv) {
    al_attn_shape a = *s;
    if (!a.grads_overwrite) return a;
    for (size_t r = 0; r < (size_t)s->B * s->T; r++) {
        memset(dq + r * s->ldq, 0, sizeof(float) * (size_t)s->H * s->dk);
        memset(dk + r * s->ldk, 0, sizeof(float) * (size_t)s->G * s->dk);
        memset(dv + r * s->ldv, 0, sizeof(float) * (size_t)s->G * s->dv);
    }
    a.grads_overwrite = 0;
    return a;
}

void al_attn_bwd(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                 const float *lse, const float *dout, float *dq, float *dk, float *dv) {
    const fast_set *fs = fast_set_now();
    const int nthr = omp_get_max_threads();
    float *ws = fs ? arena_get(fs->bwd_floats(s, nthr)) : NULL;
    if (ws) {
        fs->bwd(s, q, k, v, o, lse, dout, dq, dk, dv, ws, nthr);
        return;
    }
    const size_t np = generic_part_floats(s);
    const al_attn_shape a = grads_zeroed(s, dq, dk, dv);
    attn_bwd_generic(&a, q, k, v, o, lse, dout, dq, dk, dv, np ? arena_get(np) : NULL);
}

/* ---- plain references: one head at a time, full T x T weights, doubles ----
 * They compute what al_attn_fwd / al_attn_bwd compute in the precision of
 * the products in use (nn.h, al_precision_now):
 *   F32   the exact function (in double);
 *   BF16  the definition of the BF16 kernels: every operand of a product
 *         rounded to bfloat16 (nearest, ties to even) and the products
 *         summed exactly (double here, fp32 in the kernels):
 *           S = scale bf16(Q) bf16(K)^T      O = bf16(P) bf16(V) (/ l)
 *           dP = bf16(dO) bf16(V)^T          dV = bf16(P)^T bf16(dO)
 *           dQ = bf16(dS) bf16(K)            dK = bf16(dS)^T bf16(Q)
 *         where dS = scale dL/ds (the gradient of the unscaled q.k) and,
 *         for softmax, the P that is rounded for O is 2^(s log2 e - M) with
 *         M a whole number (the kernels' running max, row_softmax_fwd), so
 *         that its rounding is the kernels' whatever tile moved their max;
 *         its normaliser l = sum_j 2^(s_j log2 e - M), the statistics
 *         (max, l, lse, D_i = dO_i . O_i from the given O) and every
 *         elementwise map stay unrounded. In backward P is the normalised
 *         weight exp(s - lse), rounded for dV. */

static double ref_f(const al_attn_shape *s, double x) {
    const double n = s->score_n >= 1.0f ? s->score_n : 1.0;
    switch (s->score) {
    case AL_SCORE_POLY: return (double)s->poly_coef * pow(x, s->poly_power);
    case AL_SCORE_RELU: return x > 0 ? x / n : 0.0;
    case AL_SCORE_SIGMOID: return 1.0 / (1.0 + exp(-(x - log(n))));
    default: return exp(x);
    }
}

/* d f / d x for the elementwise functions */
static double ref_df(const al_attn_shape *s, double x) {
    const double n = s->score_n >= 1.0f ? s->score_n : 1.0;
    switch (s->score) {
    case AL_SCORE_POLY: return (double)s->poly_coef * s->poly_power * pow(x, s->poly_power - 1);
    case AL_SCORE_RELU: return x > 0 ? 1.0 / n : 0.0;
    case AL_SCORE_SIGMOID: {
        const double p = 1.0 / (1.0 + exp(-(x - log(n))));
        return p * (1 - p);
    }
    default: return 0.0;
    }
}

/* The references keep no T x T matrix, nor any memory of their own: a
 * query row's scores are recomputed where they are used (its softmax max
 * and normaliser first), in double, and outputs accumulate in double, OB
 * values at a time. */
enum { OB = 64 };

/* One (query row, key) pair of head h of sequence b: b, h, i, its KV head g
 * and the row's visible keys n; bf16: the BF16 definition (above). */
typedef struct ref_row {
    int b, h, g, i, n, bf16;
    double mx, sum; /* softmax: the row's largest scaled score and sum of exp(s - mx) */
    double M, sum2; /* softmax, bf16: whole-number max of s log2 e, sum of 2^(s log2 e - M) */
} ref_row;

/* x as a product operand of the row's precision: itself, or rounded to BF16 */
static inline double ref_op(const ref_row *r, float x) {
    return r->bf16 ? (double)al_bf16_to_f32(al_f32_to_bf16(x)) : (double)x;
}

/* scale q_i . k_j of the row's head, in double */
static double ref_score(const al_attn_shape *s, const float *q, const float *k, const ref_row *r, int j) {
    const size_t qi = (size_t)(r->b * s->T + r->i) * s->ldq + (size_t)r->h * s->dk;
    const size_t kj = (size_t)(r->b * s->T + j) * s->ldk + (size_t)r->g * s->dk;
    double acc = 0;
    for (int c = 0; c < s->dk; c++) acc += ref_op(r, q[qi + c]) * ref_op(r, k[kj + c]);
    return acc * s->scale;
}

/* Row i of head h of sequence b, with its softmax max and normalisers. */
static ref_row ref_row_of(const al_attn_shape *s, const float *q, const float *k, int b, int h, int i) {
    ref_row r = {b, h, h / (s->H / s->G), i, s->bidirectional ? s->T : i + 1, al_precision_now() == AL_PREC_BF16,
                 -INFINITY, 0, 0, 0};
    if (s->score != AL_SCORE_SOFTMAX) return r;
    for (int j = 0; j < r.n; j++) {
        const double x = ref_score(s, q, k, &r, j);
        r.mx = x > r.mx ? x : r.mx;
    }
    r.M = ceil(r.mx * M_LOG2E);
    for (int j = 0; j < r.n; j++) {
        const double x = ref_score(s, q, k, &r, j);
        r.sum += exp(x - r.mx);
        r.sum2 += exp2(x * M_LOG2E - r.M);
    }
    return r;
}

/* The weight of visible key j (j < r->n) for the row; *sc gets its score. */
static double ref_weight(const al_attn_shape *s, const float *q, const float *k, const ref_row *r, int j,
                         double *sc) {
    *sc = ref_score(s, q, k, r, j);
    return s->score == AL_SCORE_SOFTMAX ? exp(*sc - r->mx) / r->sum : ref_f(s, *sc);
}

/* The weight of visible key j as the forward's P V multiplies it: the
 * normalised weight in F32; in BF16 the rounded 2^(s log2 e - M) / l
 * (softmax) or the rounded f(s). */
static double ref_pv_weight(const al_attn_shape *s, const float *q, const float *k, const ref_row *r, int j) {
    double sc;
    if (!r->bf16) return ref_weight(s, q, k, r, j, &sc);
    sc = ref_score(s, q, k, r, j);
    if (s->score != AL_SCORE_SOFTMAX) return ref_op(r, (float)ref_f(s, sc));
    return ref_op(r, (float)exp2(sc * M_LOG2E - r->M)) / r->sum2;
}

void al_attn_fwd_ref(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse) {
    const int T = s->T;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int i = 0; i < T; i++) {
                const ref_row r = ref_row_of(s, q, k, b, h, i);
                if (lse) lse[((size_t)b * s->H + h) * T + i] = s->score == AL_SCORE_SOFTMAX ? (float)(r.mx + log(r.sum)) : 0.0f;
                for (int c0 = 0; c0 < s->dv; c0 += OB) {
                    const int nc = s->dv - c0 < OB ? s->dv - c0 : OB;
                    double acc[OB] = {0};
                    for (int j = 0; j < r.n; j++) {
                        const double w = ref_pv_weight(s, q, k, &r, j);
                        const float *vj = v + (size_t)(b * T + j) * s->ldv + (size_t)r.g * s->dv + c0;
                        for (int c = 0; c < nc; c++) acc[c] += w * ref_op(&r, vj[c]);
                    }
                    for (int c = 0; c < nc; c++) o[(size_t)(b * T + i) * s->ldo + (size_t)h * s->dv + c0 + c] = (float)acc[c];
                }
            }
}

void al_attn_bwd_ref(const al_attn_shape *s_in, const float *q, const float *k, const float *v, const float *o,
                     const float *lse, const float *dout, float *dq, float *dk, float *dv) {
    (void)lse;
    const al_attn_shape a = grads_zeroed(s_in, dq, dk, dv), *s = &a;
    const int T = s->T;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int i = 0; i < T; i++) {
                const ref_row r = ref_row_of(s, q, k, b, h, i);
                const float *dOi = dout + (size_t)(b * T + i) * s->ldo + (size_t)h * s->dv;
                const float *qi = q + (size_t)(b * T + i) * s->ldq + (size_t)h * s->dk;
                /* dw_j = dO_i . v_j ; ds_j = softmax: w_j (dw_j - sum_j w_j dw_j), others: f'(s_j) dw_j;
                 * BF16: sum_j w_j dw_j is D_i = dO_i . O_i of the given O, as the kernels take it */
                double dot = 0;
                if (r.bf16 && s->score == AL_SCORE_SOFTMAX)
                    for (int c = 0; c < s->dv; c++) dot += (double)dOi[c] * o[(size_t)(b * T + i) * s->ldo + (size_t)h * s->dv + c];
                for (int j = 0; j < r.n && s->score == AL_SCORE_SOFTMAX && !r.bf16; j++) {
                    double sc, dw = 0;
                    const double w = ref_weight(s, q, k, &r, j, &sc);
                    const float *vj = v + (size_t)(b * T + j) * s->ldv + (size_t)r.g * s->dv;
                    for (int c = 0; c < s->dv; c++) dw += (double)dOi[c] * vj[c];
                    dot += dw * w;
                }
                for (int j = 0; j < r.n; j++) {
                    double sc, dw = 0;
                    const double w = ref_weight(s, q, k, &r, j, &sc);
                    const float *vj = v + (size_t)(b * T + j) * s->ldv + (size_t)r.g * s->dv;
                    for (int c = 0; c < s->dv; c++) dw += ref_op(&r, dOi[c]) * ref_op(&r, vj[c]);
                    double ds = (s->score == AL_SCORE_SOFTMAX ? w * (dw - dot) : ref_df(s, sc) * dw) * s->scale;
                    const double wr = r.bf16 ? ref_op(&r, (float)w) : w;
                    ds = r.bf16 ? ref_op(&r, (float)ds) : ds;
                    const float *kj = k + (size_t)(b * T + j) * s->ldk + (size_t)r.g * s->dk;
                    float *dqi = dq + (size_t)(b * T + i) * s->ldq + (size_t)h * s->dk;
                    float *dkj = dk + (size_t)(b * T + j) * s->ldk + (size_t)r.g * s->dk;
                    float *dvj = dv + (size_t)(b * T + j) * s->ldv + (size_t)r.g * s->dv;
                    for (int c = 0; c < s->dk; c++) {
                        dqi[c] += (float)(ds * ref_op(&r, kj[c]));
                        dkj[c] += (float)(ds * ref_op(&r, qi[c]));
                    }
                    for (int c = 0; c < s->dv; c++) dvj[c] += (float)(wr * ref_op(&r, dOi[c]));
                }
            }
}
