/*
 * decode.c: one new token's attention over a cache, shared by every design.
 *
 * Data structure: the cache of one layer is a run of rows, one per position,
 * `row` floats apart. Key group g of position j is the dk floats at
 * cache + j*row + k_off + g*k_group, its value the dv floats at
 * cache + j*row + v_off + g*v_group (al_decode_view). A design whose heads
 * also have a key/value part of their own (LRKV's rank-r latents) sets dk2/dv2:
 * head h's key then goes on with the dk2 floats at j*row + k2_off + h*dk2 and
 * its value with the dv2 floats at j*row + v2_off + h*dv2; its query row is
 * dk + dk2 floats and its output row dv + dv2. This covers
 *   MHA/GQA/MQA  row = [K heads (G x dh) | V heads (G x dh)]:
 *                k_off 0, k_group dh, v_off G dh, v_group dh;
 *   MLA absorbed row = [c~ (d_c) | k_pe (d_r)], one group whose latent c~
 *                is both key (with k_pe) and value: k_off 0, v_off 0, dk = d_c + d_r, dv = d_c;
 *   LRKV         row = [K_s (dh) | V_s (dh) | R_K (H r) | R_V (H r)], one
 *                group: k_off 0, v_off dh, k2_off 2 dh, v2_off 2 dh + H r,
 *                dk2 = dv2 = r (the query carries B_K[h]^T q_h, the caller
 *                applies B_V[h] to the latent output).
 *
 * The cache holds F32 or BF16 values (al_kv); a BF16 cache halves what a
 * token reads and is widened as it is loaded (queries, scores and sums stay
 * fp32).
 *
 * The work is cut into chunks of DKB positions x KV groups. A chunk scores
 * every query head of its group against its keys, so each key and value is
 * read from memory once per token however many heads share it (GQA, MQA,
 * MLA, LRKV's shared part), applies the score function and multiplies by its
 * values; softmax keeps each chunk's maximum and sum and the chunks are
 * merged afterwards in chunk order, so the result does not depend on the
 * thread count. Decode time is then set by reading the cache, which is what
 * the designs differ in. A chunk runs the AVX-512 or AVX2 kernel of
 * score_kern.h (dot products along the cached rows, no packing) or, on the
 * generic level (core/cpu.h), BLAS calls and plain loops.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "attn.h"
#include "kve.h"
#include "kvq_internal.h"
#include "score_internal.h"
#include "../core/cpu.h"

enum { DKB = 256 }; /* positions per chunk (a multiple of every vector width) */

static int chunks_of(int n) { return (n + DKB - 1) / DKB; }

void al_kv_store(al_kv c, size_t at, const float *src, size_t n) {
    if (c.e) { /* an evicting layer: position at / row goes to its slot */
        const size_t row = c.e->row;
        at = (size_t)al_kve_slot(c.e, (int)(at / row)) * row + at % row;
    }
    if (c.q) {
        al_kvq_store(c.q, at, src, n);
    } else if (c.dt == AL_DT_BF16) {
        uint16_t *d = (uint16_t *)c.data + at;
        for (size_t i = 0; i < n; i++) d[i] = al_f32_to_bf16(src[i]);
    } else {
        memcpy((float *)c.data + at, src, sizeof(float) * n);
    }
}

/* value i of a cache span p of dtype dt (the plain paths) */
static inline float kv_get(const void *p, al_dtype dt, size_t i) {
    return dt == AL_DT_BF16 ? al_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* p advanced by i values of dtype dt */
static inline const void *kv_at(const void *p, al_dtype dt, size_t i) {
    return dt == AL_DT_BF16 ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}

/* Chunks of n positions at most: DKB-position chunks, or with a quantised
 * cache chunks of whole blocks (al_kvq_chunk: up to DKB positions, at least
 * 128) then DKB-position chunks of the residual; bounded for both by
 * counting 128 positions a chunk, plus one. */
static int max_chunks(int n) { return (n + 127) / 128 + 1; }

size_t al_attn_decode_scratch(const al_attn_shape *s, int dv2, int max_n) {
    const size_t nch = (size_t)max_chunks(max_n);
    /* scores [nch, H, DKB] | partial outputs [nch, H, dv + dv2] | chunk max, sum [nch, H] each */
    return nch * s->H * DKB + nch * s->H * (size_t)(s->dv + dv2) + 2 * nch * s->H;
}

typedef void (*group_fn)(const al_attn_shape *s, int pg, const float *Q, int ldq, al_dtype dt, const void *K,
                         const void *K2, int dk2, const void *V, const void *V2, int dv2, size_t row, int n, float *S,
                         int lds, float *P, int ldp, float *cmax, float *csum);

/* Softmax weights of a score row in place (max subtracted; returns the max
 * and the sum through mx, sum), or the elementwise function's. */
static void weights_row(const al_attn_shape *s, float *r, int n, float *mx_out, float *sum_out) {
    if (s->score != AL_SCORE_SOFTMAX) {
        al_score_row(s, r, n); /* elementwise: chunks simply add */
        return;
    }
    /* eight running maxima and sums, so the loops vectorise and no chain
     * of dependent additions runs the length of the row */
    float m8[8], s8[8] = {0};
    for (int k = 0; k < 8; k++) m8[k] = r[0];
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) m8[k] = r[j + k] > m8[k] ? r[j + k] : m8[k];
    float mx = r[0], sum = 0.0f;
    for (; j < n; j++) mx = r[j] > mx ? r[j] : mx;
    for (int k = 0; k < 8; k++) mx = m8[k] > mx ? m8[k] : mx;
    for (j = 0; j < n; j++) r[j] -= mx;
    al_expf_inplace(r, n);
    for (j = 0; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) s8[k] += r[j + k];
    for (; j < n; j++) sum += r[j];
    for (int k = 0; k < 8; k++) sum += s8[k];
    *mx_out = mx;
    *sum_out = sum;
}

/* The generic level's work item, same contract as al_attn_decode_group_*
 * (score_kern.h). An F32 cache: the shared key/value parts through
 * single-threaded BLAS (one call for all pg heads), each head's own parts in
 * plain loops. A BF16 cache: plain loops throughout (BLAS has no BF16). */
static void group_generic(const al_attn_shape *s, int pg, const float *Q, int ldq, al_dtype dt, const void *K,
                          const void *K2, int dk2, const void *V, const void *V2, int dv2, size_t row, int n, float *S,
                          int lds, float *P, int ldp, float *cmax, float *csum) {
    const int dk = s->dk, dv = s->dv;
    if (dt == AL_DT_F32) {
        /* S[pg, n] = scale * Q[pg, dk] . K[n, dk]^T (K rows `row` apart) */
        if (pg == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n, dk, s->scale, K, (int)row, Q, 1, 0.0f, S, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, pg, n, dk, s->scale, Q, ldq, K, (int)row, 0.0f, S,
                        lds);
    } else {
        for (int i = 0; i < pg; i++)
            for (int j = 0; j < n; j++) {
                const float *q = Q + (size_t)i * ldq;
                float a = 0.0f;
                for (int e = 0; e < dk; e++) a += q[e] * kv_get(K, dt, (size_t)j * row + e);
                S[(size_t)i * lds + j] = s->scale * a;
            }
    }
    for (int i = 0; i < pg && dk2 > 0; i++)
        for (int j = 0; j < n; j++) {
            const float *q2 = Q + (size_t)i * ldq + dk;
            const size_t k2 = (size_t)j * row + (size_t)i * dk2;
            float a = 0.0f;
            for (int e = 0; e < dk2; e++) a += q2[e] * kv_get(K2, dt, k2 + e);
            S[(size_t)i * lds + j] += s->scale * a;
        }
    for (int i = 0; i < pg; i++) weights_row(s, S + (size_t)i * lds, n, cmax + i, csum + i);
    /* P[pg, dv] = S[pg, n] . V[n, dv] */
    if (dt == AL_DT_F32 && pg == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, n, dv, 1.0f, V, (int)row, S, 1, 0.0f, P, 1);
    else if (dt == AL_DT_F32)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, pg, dv, n, 1.0f, S, lds, V, (int)row, 0.0f, P, ldp);
    for (int i = 0; i < pg; i++) {
        float *p = P + (size_t)i * ldp;
        const int e0 = dt == AL_DT_F32 ? dv : 0; /* F32: the shared part came from BLAS */
        memset(p + e0, 0, sizeof(float) * (size_t)(dv + dv2 - e0));
        for (int j = 0; j < n; j++) {
            const float w = S[(size_t)i * lds + j];
            for (int e = e0; e < dv; e++) p[e] += w * kv_get(V, dt, (size_t)j * row + e);
            for (int e = 0; e < dv2; e++) p[dv + e] += w * kv_get(V2, dt, (size_t)j * row + (size_t)i * dv2 + e);
        }
    }
}

static int decode_ref_for_tests = 0;
void al_attn_test_decode_ref(int on) { decode_ref_for_tests = on; }

/* The quantised part's work item (kvq_kern.h): raw scores of the group's
 * heads, the score function on each head's row, then P = S V. */
static void group_quantised(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg,
                            const float *Q, int ldq, int j0, int n, float *S, int lds, float *P, int ldp, float *cmax,
                            float *csum, al_cpu_level level) {
    if (level >= AL_CPU_AVX512) al_kvq_scores_avx512(s, kq, v, g, pg, Q, ldq, j0, n, S, lds);
    else if (level >= AL_CPU_AVX2) al_kvq_scores_avx2(s, kq, v, g, pg, Q, ldq, j0, n, S, lds);
    else al_kvq_scores_generic(s, kq, v, g, pg, Q, ldq, j0, n, S, lds);
    for (int i = 0; i < pg; i++) weights_row(s, S + (size_t)i * lds, n, cmax + i, csum + i);
    if (level >= AL_CPU_AVX512) al_kvq_values_avx512(s, kq, v, g, pg, j0, n, S, lds, P, ldp);
    else if (level >= AL_CPU_AVX2) al_kvq_values_avx2(s, kq, v, g, pg, j0, n, S, lds, P, ldp);
    else al_kvq_values_generic(s, kq, v, g, pg, j0, n, S, lds, P, ldp);
}

/* An evicting layer after the step's chunks: each held slot's attention
 * mass of the step (the sum over heads of its weight p_j, |p_j| for the
 * elementwise score functions; softmax chunks rescaled by exp(cmax - m) / l
 * as the merge does) added to e->mass (zeroed first for a full cache
 * measuring recall), then the policy's evictions (kve.h). The chunk
 * weights are still in S: [nch][H][DKB]. */
static void evict_after(const al_attn_shape *s, al_kve *e, al_kv c, int n, int nch, int nqch, int qn, int qc,
                        const float *S, const float *cmax, const float *csum) {
    const int H = s->H;
    if (e->step_mass) memset(e->mass, 0, sizeof(float) * (size_t)n);
    if (al_kve_wants_mass(e)) {
        for (int h = 0; h < H; h++) {
            float m = -INFINITY, l = 0.0f;
            if (s->score == AL_SCORE_SOFTMAX) {
                for (int ch = 0; ch < nch; ch++) m = cmax[(size_t)ch * H + h] > m ? cmax[(size_t)ch * H + h] : m;
                for (int ch = 0; ch < nch; ch++) l += expf(cmax[(size_t)ch * H + h] - m) * csum[(size_t)ch * H + h];
            }
            for (int ch = 0; ch < nch; ch++) {
                const int j0 = ch < nqch ? ch * qc : qn + (ch - nqch) * DKB;
                const int kb = ch < nqch ? (qn - j0 < qc ? qn - j0 : qc) : (n - j0 < DKB ? n - j0 : DKB);
                const float *p = S + ((size_t)ch * H + h) * DKB;
                float *mass = e->mass + j0;
                if (s->score == AL_SCORE_SOFTMAX) {
                    const float w = expf(cmax[(size_t)ch * H + h] - m) / l;
                    for (int j = 0; j < kb; j++) mass[j] += w * p[j];
                } else {
                    for (int j = 0; j < kb; j++) mass[j] += fabsf(p[j]);
                }
            }
        }
    }
    al_kve_evict(e, &c);
}

/* q[H, dk + dk2] (head h's query at q + h*(dk + dk2)), keys/values of
 * positions [0, n) as described by v -> o[H, dv + dv2]. Only s's H, G, dk,
 * dv, scale and score fields are read. A quantised cache (v->cache.q) is
 * read in chunks of whole blocks from its codes up to its split, then in
 * DKB-position chunks from its residual rows; all chunks merge alike. */
static void decode_step(const al_attn_shape *s, const float *q, const al_decode_view *v, int n, float *o,
                        float *scratch) {
    al_kve *ev = v->cache.e;
    if (ev) n = ev->n; /* the held slots, whatever position decodes */
    if (decode_ref_for_tests) {
        al_attn_decode_ref(s, q, v, n, o);
        return;
    }
    const al_kvq *kq = v->cache.q;
    const int qn = kq ? (kq->qn < n ? kq->qn : n) : 0, qc = kq ? al_kvq_chunk(kq) : DKB;
    const int nqch = (qn + qc - 1) / qc;
    const int H = s->H, G = s->G, pg = s->H / s->G, nch = nqch + chunks_of(n - qn);
    const int dk2 = v->dk2, dv2 = v->dv2, ldq = s->dk + dk2, ldo = s->dv + dv2;
    const long items = (long)nch * G;
    const int softmax = s->score == AL_SCORE_SOFTMAX;
    float *S = scratch, *part = S + (size_t)nch * H * DKB, *cmax = part + (size_t)nch * H * ldo,
          *csum = cmax + (size_t)nch * H;
    const size_t row = v->row;
    const al_cpu_level level = al_cpu_level_now();
    const group_fn group = level >= AL_CPU_AVX512 ? al_attn_decode_group_avx512
                           : level >= AL_CPU_AVX2 ? al_attn_decode_group_avx2
                                                  : group_generic;
#pragma omp parallel for schedule(static) if (items > 1 && (long)n * H * (ldq + ldo) > 65536)
    for (long it = 0; it < items; it++) {
        const int ch = (int)(it / G), g = (int)(it % G);
        const size_t h0 = (size_t)ch * H + (size_t)g * pg; /* this item's first (chunk, head) slot */
        if (ch < nqch) {
            const int j0 = ch * qc, kb = qn - j0 < qc ? qn - j0 : qc;
            group_quantised(s, kq, v, g, pg, q + (size_t)g * pg * ldq, ldq, j0, kb, S + h0 * DKB, DKB, part + h0 * ldo,
                            ldo, cmax + h0, csum + h0, level);
            continue;
        }
        /* residual (or plain) rows: row 0 of v->cache.data is position qn */
        const int j0 = (ch - nqch) * DKB, kb = n - qn - j0 < DKB ? n - qn - j0 : DKB;
        const al_dtype dt = v->cache.dt;
        const void *base = kv_at(v->cache.data, dt, (size_t)j0 * row);
        group(s, pg, q + (size_t)g * pg * ldq, ldq, dt, kv_at(base, dt, v->k_off + (size_t)g * v->k_group),
              kv_at(base, dt, v->k2_off + (size_t)g * pg * dk2), dk2,
              kv_at(base, dt, v->v_off + (size_t)g * v->v_group), kv_at(base, dt, v->v2_off + (size_t)g * pg * dv2),
              dv2, row, kb, S + h0 * DKB, DKB, part + h0 * ldo, ldo, cmax + h0, csum + h0);
    }
    /* o_h = sum over chunks of w_ch * part_ch,h, in chunk order */
    for (int h = 0; h < H; h++) {
        float *oh = o + (size_t)h * ldo, m = -INFINITY, l = 0.0f;
        if (softmax) {
            for (int ch = 0; ch < nch; ch++) m = cmax[(size_t)ch * H + h] > m ? cmax[(size_t)ch * H + h] : m;
            for (int ch = 0; ch < nch; ch++) l += expf(cmax[(size_t)ch * H + h] - m) * csum[(size_t)ch * H + h];
        }
        memset(oh, 0, sizeof(float) * (size_t)ldo);
        for (int ch = 0; ch < nch; ch++) {
            const float w = softmax ? expf(cmax[(size_t)ch * H + h] - m) / l : 1.0f;
            const float *pc = part + ((size_t)ch * H + h) * ldo;
            for (int e = 0; e < ldo; e++) oh[e] += w * pc[e];
        }
    }
    if (ev) evict_after(s, ev, v->cache, n, nch, nqch, qn, qc, S, cmax, csum);
}

/* Value at column col of position j of the view's cache (quantised:
 * dequantised from its codes and scales). */
static inline float ref_get(const al_decode_view *v, int j, size_t col) {
    if (v->cache.q) return al_kvq_get(v->cache.q, j, col);
    return kv_get(v->cache.data, v->cache.dt, (size_t)j * v->row + col);
}

/* Score s_j of head h (query qh) against position j, as the reference
 * computes it: a double dot product over the key's shared and own parts,
 * scaled, rounded to float. */
static float ref_score(const al_attn_shape *s, const al_decode_view *v, const float *qh, int h, int j) {
    const int pg = s->H / s->G, dk = s->dk, dk2 = v->dk2;
    const size_t g = (size_t)(h / pg);
    const size_t k = v->k_off + g * v->k_group, k2 = v->k2_off + (size_t)h * dk2;
    double acc = 0;
    for (int e = 0; e < dk; e++) acc += (double)qh[e] * ref_get(v, j, k + e);
    for (int e = 0; e < dk2; e++) acc += (double)qh[dk + e] * ref_get(v, j, k2 + e);
    return (float)(acc * s->scale);
}

/* The plain version, with no memory of its own: each weight is recomputed
 * where it is used (softmax: the row's max and sum in double first), and
 * the output accumulates in double, OB values of a head at a time. */
void al_attn_decode_ref(const al_attn_shape *s, const float *q, const al_decode_view *v, int n, float *o) {
    enum { OB = 64 };
    const int H = s->H, pg = s->H / s->G, dk = s->dk, dv = s->dv, dk2 = v->dk2, dv2 = v->dv2;
    const int softmax = s->score == AL_SCORE_SOFTMAX;
    al_kve *ev = v->cache.e;
    if (ev) n = ev->n;
    const int want = ev && al_kve_wants_mass(ev);
    if (ev && ev->step_mass) memset(ev->mass, 0, sizeof(float) * (size_t)n);
    for (int h = 0; h < H; h++) {
        const size_t g = (size_t)(h / pg);
        const float *qh = q + (size_t)h * (dk + dk2);

        double mx = -INFINITY, sum = 0;
        for (int j = 0; softmax && j < n; j++) {
            const float w = ref_score(s, v, qh, h, j);
            mx = w > mx ? w : mx;
        }
        for (int j = 0; softmax && j < n; j++) sum += exp(ref_score(s, v, qh, h, j) - mx);
        for (int j = 0; want && j < n; j++) { /* this head's weight on slot j, added to its mass */
            float w = ref_score(s, v, qh, h, j);
            if (softmax) w = (float)(exp(w - mx) / sum);
            else al_score_row(s, &w, 1);
            ev->mass[j] += fabsf(w);
        }
        for (int e0 = 0; e0 < dv + dv2; e0 += OB) {
            const int ne = dv + dv2 - e0 < OB ? dv + dv2 - e0 : OB;
            double acc[OB] = {0};
            for (int j = 0; j < n; j++) {
                float w = ref_score(s, v, qh, h, j);
                if (softmax) w = (float)(exp(w - mx) / sum);
                else al_score_row(s, &w, 1); /* elementwise: one entry on its own */
                for (int i = 0; i < ne; i++) {
                    const int e = e0 + i;
                    acc[i] += (double)w * ref_get(v, j, e < dv ? v->v_off + g * v->v_group + e
                                                               : v->v2_off + (size_t)h * dv2 + (e - dv));
                }
            }
            for (int i = 0; i < ne; i++) o[(size_t)h * (dv + dv2) + e0 + i] = (float)acc[i];
        }
    }
    if (ev) al_kve_evict(ev, &v->cache);
}

static int decode_timing = 0;         /* al_attn_decode_timing */
static double decode_timed_s = 0.0;   /* wall seconds in al_attn_decode since timing began */

void al_attn_decode_timing(int on) {
    decode_timing = on != 0;
    decode_timed_s = 0.0;
}

double al_attn_decode_seconds(void) { return decode_timed_s; }

/* decode_step, timed when a benchmark asks (al_attn_decode_timing) */
void al_attn_decode(const al_attn_shape *s, const float *q, const al_decode_view *v, int n, float *o,
                    float *scratch) {
    if (!decode_timing) {
        decode_step(s, q, v, n, o, scratch);
        return;
    }
    const double t0 = al_now();
    decode_step(s, q, v, n, o, scratch);
    decode_timed_s += al_now() - t0;
}
