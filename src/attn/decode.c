/*
 * decode.c: one new token's attention over a cache, shared by the designs
 * whose cache rows hold keys and values side by side.
 *
 * Data structure: the cache of one layer is a run of rows, one per position,
 * `row` floats apart. Key group g of position j is the dk floats at
 * cache + j*row + k_off + g*k_group, its value the dv floats at
 * cache + j*row + v_off + g*v_group (al_decode_view). This covers
 *   MHA/GQA/MQA  row = [K heads (G x dh) | V heads (G x dh)]:
 *                k_off 0, k_group dh, v_off G dh, v_group dh;
 *   MLA absorbed row = [c~ (d_c) | k_pe (d_r)], one group whose latent c~
 *                is both key (with k_pe) and value: k_off 0, v_off 0, dk = d_c + d_r, dv = d_c.
 *
 * The work is cut into chunks of DKB positions x KV groups. A chunk scores
 * every query head of its group against its keys with one BLAS call, so each
 * key and value is read from memory once per token however many heads share
 * it (GQA/MQA/MLA), applies the score function, and multiplies by its values
 * with a second call; softmax keeps each chunk's maximum and sum and the
 * chunks are merged afterwards in chunk order, so the result does not depend
 * on the thread count. Decode time is then set by reading the cache, which is
 * what the designs differ in.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "attn.h"

enum { DKB = 256 }; /* positions per chunk */

static int chunks_of(int n) { return (n + DKB - 1) / DKB; }

size_t al_attn_decode_scratch(const al_attn_shape *s, int max_n) {
    const size_t nch = (size_t)chunks_of(max_n);
    /* scores [nch, H, DKB] | partial outputs [nch, H, dv] | chunk max, sum [nch, H] each */
    return nch * s->H * DKB + nch * s->H * s->dv + 2 * nch * s->H;
}

/* q[H, dk] (head h's query at q + h*dk), keys/values of positions [0, n)
 * as described by v -> o[H, dv]. Only s's H, G, dk, dv, scale and score
 * fields are read. */
void al_attn_decode(const al_attn_shape *s, const float *q, const al_decode_view *v, int n, float *o,
                    float *scratch) {
    const int H = s->H, G = s->G, pg = s->H / s->G, dk = s->dk, dv = s->dv, nch = chunks_of(n);
    const long items = (long)nch * G;
    const int softmax = s->score == AL_SCORE_SOFTMAX;
    float *S = scratch, *part = S + (size_t)nch * H * DKB, *cmax = part + (size_t)nch * H * dv,
          *csum = cmax + (size_t)nch * H;
    const size_t row = v->row;
#pragma omp parallel for schedule(static) if (items > 1 && (long)n * H * (dk + dv) > 65536)
    for (long it = 0; it < items; it++) {
        const int ch = (int)(it / G), g = (int)(it % G), j0 = ch * DKB, kb = n - j0 < DKB ? n - j0 : DKB;
        const float *K = v->cache + (size_t)j0 * row + v->k_off + (size_t)g * v->k_group;
        const float *V = v->cache + (size_t)j0 * row + v->v_off + (size_t)g * v->v_group;
        const float *Qg = q + (size_t)g * pg * dk;
        const size_t h0 = (size_t)ch * H + (size_t)g * pg; /* this item's first (chunk, head) slot */
        float *Sg = S + h0 * DKB, *Pg = part + h0 * dv;
        /* Sg[pg, kb] = scale * Qg[pg, dk] . K[kb, dk]^T (K rows `row` apart) */
        if (pg == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, kb, dk, s->scale, K, (int)row, Qg, 1, 0.0f, Sg, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, pg, kb, dk, s->scale, Qg, dk, K, (int)row, 0.0f,
                        Sg, DKB);
        for (int i = 0; i < pg; i++) {
            float *r = Sg + (size_t)i * DKB;
            if (!softmax) {
                al_score_row(s, r, kb); /* elementwise: chunks simply add */
                continue;
            }
            float mx = r[0], sum = 0.0f;
            for (int j = 1; j < kb; j++) mx = r[j] > mx ? r[j] : mx;
            for (int j = 0; j < kb; j++) r[j] -= mx;
            al_expf_inplace(r, kb);
            for (int j = 0; j < kb; j++) sum += r[j];
            cmax[h0 + i] = mx;
            csum[h0 + i] = sum;
        }
        /* Pg[pg, dv] = Sg[pg, kb] . V[kb, dv] */
        if (pg == 1)
            cblas_sgemv(CblasRowMajor, CblasTrans, kb, dv, 1.0f, V, (int)row, Sg, 1, 0.0f, Pg, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, pg, dv, kb, 1.0f, Sg, DKB, V, (int)row, 0.0f, Pg,
                        dv);
    }
    /* o_h = sum over chunks of w_ch * part_ch,h, in chunk order */
    for (int h = 0; h < H; h++) {
        float *oh = o + (size_t)h * dv, m = -INFINITY, l = 0.0f;
        if (softmax) {
            for (int ch = 0; ch < nch; ch++) m = cmax[(size_t)ch * H + h] > m ? cmax[(size_t)ch * H + h] : m;
            for (int ch = 0; ch < nch; ch++) l += expf(cmax[(size_t)ch * H + h] - m) * csum[(size_t)ch * H + h];
        }
        memset(oh, 0, sizeof(float) * dv);
        for (int ch = 0; ch < nch; ch++) {
            const float w = softmax ? expf(cmax[(size_t)ch * H + h] - m) / l : 1.0f;
            const float *pc = part + ((size_t)ch * H + h) * dv;
            for (int e = 0; e < dv; e++) oh[e] += w * pc[e];
        }
    }
}

/* The plain version: each head's whole row of weights in double. */
void al_attn_decode_ref(const al_attn_shape *s, const float *q, const al_decode_view *v, int n, float *o) {
    const int H = s->H, pg = s->H / s->G, dk = s->dk, dv = s->dv;
    float *row = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!row) abort(); /* tests only */
    for (int h = 0; h < H; h++) {
        const int g = h / pg;
        for (int j = 0; j < n; j++) {
            const float *k = v->cache + (size_t)j * v->row + v->k_off + (size_t)g * v->k_group;
            double acc = 0;
            for (int e = 0; e < dk; e++) acc += (double)q[(size_t)h * dk + e] * k[e];
            row[j] = (float)(acc * s->scale);
        }
        if (s->score == AL_SCORE_SOFTMAX) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
            for (int j = 0; j < n; j++) sum += exp(row[j] - mx);
            for (int j = 0; j < n; j++) row[j] = (float)(exp(row[j] - mx) / sum);
        } else {
            al_score_row(s, row, n);
        }
        for (int e = 0; e < dv; e++) {
            double acc = 0;
            for (int j = 0; j < n; j++)
                acc += (double)row[j] * v->cache[(size_t)j * v->row + v->v_off + (size_t)g * v->v_group + e];
            o[(size_t)h * dv + e] = (float)acc;
        }
    }
    free(row);
}
