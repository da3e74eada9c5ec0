/*
 * precision.c: the precision of the matrix products (nn.h says what each
 * mode computes), the BF16 copies of weight arenas, and the portable BF16
 * product that every CPU can run.
 *
 * Data: the mode (one value for the process), and a small table of weight
 * arenas with their BF16 copies, looked up by address range when a product
 * in BF16 mode reads an operand (a handful of arenas at most: the models a
 * command holds).
 *
 * The portable BF16 product (al_sgemm_tile_bf16_emulated) rounds blocks of
 * both operands into fp32 buffers on the stack and multiplies them with
 * single-threaded sgemm calls, summing the blocks of K into C in fp32: the
 * values of a bf16 x bf16 -> fp32 product, on any CPU. Its blocks are fixed
 * by the tile al_sgemm hands it (rows at multiples of 48 from the tile's
 * start, which al_sgemm keeps at multiples of 48), so its bits do not depend
 * on the thread count either.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/cpu.h"
#include "nn.h"
#include "precision_internal.h"

static al_precision g_mode = AL_PREC_F32;

const char *al_precision_name(al_precision p) { return p == AL_PREC_BF16 ? "BF16" : "F32"; }

int al_precision_from_name(const char *name, al_precision *out) {
    if (!strcasecmp(name, "f32")) *out = AL_PREC_F32;
    else if (!strcasecmp(name, "bf16")) *out = AL_PREC_BF16;
    else if (!strcasecmp(name, "auto")) *out = al_precision_auto();
    else return -1;
    return 0;
}

al_precision al_precision_auto(void) {
    return al_cpu_level_now() >= AL_CPU_AVX512_BF16 ? AL_PREC_BF16 : AL_PREC_F32;
}

void al_precision_set(al_precision p) { g_mode = p; }
al_precision al_precision_now(void) { return g_mode; }
const char *al_precision_engine(void) { return "emulated"; }

/* ---- BF16 copies of weight arenas ---- */

enum { MAX_SHADOWS = 8 };
typedef struct shadow {
    const float *w; /* the fp32 arena (NULL: free slot) */
    size_t n;
    uint16_t *bf; /* its BF16 copy, n elements */
} shadow;
static shadow g_shadows[MAX_SHADOWS];

static shadow *shadow_find(const float *w) {
    for (int i = 0; i < MAX_SHADOWS; i++)
        if (g_shadows[i].w == w && w) return &g_shadows[i];
    return NULL;
}

/* Rounds src[n] to BF16 into dst (in parallel: arenas are large). */
static void round_arena(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = al_f32_to_bf16(src[i]);
}

int al_bf16_shadow_attach(const float *w, size_t n, al_err *err) {
    shadow *s = shadow_find(w);
    if (s && s->n != n) {
        al_bf16_shadow_detach(w);
        s = NULL;
    }
    if (!s) {
        for (int i = 0; i < MAX_SHADOWS && !s; i++)
            if (!g_shadows[i].w) s = &g_shadows[i];
        if (!s) return al_errf(err, "bf16 weights: more than %d weight arenas at once", MAX_SHADOWS);
        uint16_t *bf = al_alloc(n * sizeof *bf);
        if (!bf) return al_errf(err, "bf16 weights: out of memory for %zu weights", n);
        *s = (shadow){w, n, bf};
    }
    round_arena(s->bf, w, n);
    return 0;
}

void al_bf16_shadow_refresh(const float *w) {
    shadow *s = shadow_find(w);
    if (s) round_arena(s->bf, s->w, s->n);
}

void al_bf16_shadow_detach(const float *w) {
    shadow *s = shadow_find(w);
    if (!s) return;
    al_free(s->bf);
    *s = (shadow){0};
}

const uint16_t *al_bf16_shadow_of(const float *p) {
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < MAX_SHADOWS; i++) {
        const shadow *s = &g_shadows[i];
        if (s->w && a >= (uintptr_t)s->w && a < (uintptr_t)(s->w + s->n)) return s->bf + (p - s->w);
    }
    return NULL;
}

/* ---- the portable BF16 product ---- */

/* Block sizes: rows a multiple of 48 (linear.c: OpenBLAS's bits for a row
 * repeat at that period), buffers small enough for any thread's stack. */
enum { MC = 96, KC = 128, NC = 128 };

static inline float round_bf16(float x) { return al_bf16_to_f32(al_f32_to_bf16(x)); }

/* Element (i, k) of op(X) rounded to BF16, from X's BF16 copy if it has one. */
static inline float op_elem(const float *X, const uint16_t *Xbf, int transposed, int ld, int i, int k) {
    const size_t at = transposed ? (size_t)k * ld + i : (size_t)i * ld + k;
    return Xbf ? al_bf16_to_f32(Xbf[at]) : round_bf16(X[at]);
}

void al_sgemm_tile_bf16_emulated(int a_transposed, int b_transposed, int r0, int r1, int c0, int c1, int K,
                                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                                 int ldc) {
    float a_blk[MC * KC], b_blk[KC * NC];
    const uint16_t *Abf = al_bf16_shadow_of(A), *Bbf = al_bf16_shadow_of(B);
    if (K <= 0) { /* C = beta C, as sgemm does */
        for (int i = r0; i < r1; i++)
            for (int j = c0; j < c1; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    for (int j0 = c0; j0 < c1; j0 += NC) {
        const int nb = c1 - j0 < NC ? c1 - j0 : NC;
        for (int k0 = 0; k0 < K; k0 += KC) {
            const int kb = K - k0 < KC ? K - k0 : KC;
            for (int k = 0; k < kb; k++) /* b_blk[k][j] = op(B)[k0 + k][j0 + j] */
                for (int j = 0; j < nb; j++) b_blk[k * nb + j] = op_elem(B, Bbf, b_transposed, ldb, k0 + k, j0 + j);
            for (int i0 = r0; i0 < r1; i0 += MC) {
                const int mb = r1 - i0 < MC ? r1 - i0 : MC;
                for (int i = 0; i < mb; i++) /* a_blk[i][k] = op(A)[i0 + i][k0 + k] */
                    for (int k = 0; k < kb; k++) a_blk[i * kb + k] = op_elem(A, Abf, a_transposed, lda, i0 + i, k0 + k);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mb, nb, kb, alpha, a_blk, kb, b_blk, nb,
                            k0 == 0 ? beta : 1.0f, C + (size_t)i0 * ldc + j0, ldc);
            }
        }
    }
}
