/*
 * kvq_kern.h: decode over the quantised part of a KV cache (kvq.h), one
 * work item = the heads of one KV group against a chunk of whole key
 * blocks. Compiled three times: kvq_avx512.c and kvq_avx2.c include it after
 * core/vec.h under their target pragma (AL_VW 16 / 8), kvq_generic.c without
 * vectors (plain loops). The includer defines KSFX(name).
 *
 * The codes are read where they lie and widened in registers: a cell's
 * plane bytes are loaded KW at a time, shifted and masked per plane and
 * converted to floats (kq_dot, kq_axpy). The scales never multiply a code:
 *   key cells (per channel, one scale s_c and zero z_c per block of group
 *   tokens): q . k_j = sum_c (q_c s_c) code_jc + sum_c q_c z_c, so per block
 *   the query is scaled once (qs) and the bias summed once, and a score is
 *   one dot product of qs with the codes;
 *   value cells (per token, s_j and z_j per cell): a score part is
 *   s_j (q . code_j) + z_j sum(q), an output part sum_j (p_j s_j) code_j plus
 *   (sum_j p_j z_j) on every channel;
 *   key cells read as values (MLA's latent): sum_j p_j code_j per block,
 *   then s_c times it plus z_c times the block's sum of p.
 * Work arrays live on the stack, in "padded" channel order (a cell's w
 * channels in order, then zeros up to planes x L), at most AL_KVQ_MAX_CELL
 * floats each (al_kvq_check).
 */
#ifndef KSFX
#error "kvq_kern.h is included by kvq_avx512.c, kvq_avx2.c and kvq_generic.c"
#endif

#ifdef AL_VW
/* KW bytes widened to 32-bit lanes; lanes shifted, masked, made floats */
#if AL_VW == 16
typedef __m512i kq_vi;
#define KQ_U8(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define KQ_FIELD(x, sh, m) \
    _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srl_epi32((x), _mm_cvtsi32_si128(sh)), _mm512_set1_epi32(m)))
#else
typedef __m256i kq_vi;
#define KQ_U8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define KQ_FIELD(x, sh, m) \
    _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32((x), _mm_cvtsi32_si128(sh)), _mm256_set1_epi32(m)))
#endif

/* q[planes x L] (padded order) . the cell's codes */
static inline __attribute__((always_inline)) float kq_dot_b(const int bits, const float *qp, const uint8_t *c, int L) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    vf acc = V_ZERO();
    for (int i = 0; i < L; i += AL_VW) {
        const kq_vi x = KQ_U8(c + i);
        const vmask mk = V_MASK(L - i);
#pragma GCC unroll 4
        for (int k = 0; k < per; k++) {
            const vf q = L - i >= AL_VW ? V_LOAD(qp + k * L + i) : V_LOADM(qp + k * L + i, mk);
            acc = V_FMA(q, KQ_FIELD(x, k * bits, m), acc);
        }
    }
    return V_HSUM(acc);
}

/* out[planes x L] (padded order) += a * the cell's codes */
static inline __attribute__((always_inline)) void kq_axpy_b(const int bits, float a, const uint8_t *c, int L,
                                                            float *out) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    const vf va = V_SET1(a);
    for (int i = 0; i < L; i += AL_VW) {
        const kq_vi x = KQ_U8(c + i);
        const vmask mk = V_MASK(L - i);
#pragma GCC unroll 4
        for (int k = 0; k < per; k++) {
            float *o = out + k * L + i;
            if (L - i >= AL_VW) V_STORE(o, V_FMA(va, KQ_FIELD(x, k * bits, m), V_LOAD(o)));
            else V_STOREM(o, mk, V_FMA(va, KQ_FIELD(x, k * bits, m), V_LOADM(o, mk)));
        }
    }
}
#else
static inline float kq_dot_b(const int bits, const float *qp, const uint8_t *c, int L) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    float acc = 0.0f;
    for (int k = 0; k < per; k++)
        for (int i = 0; i < L; i++) acc += qp[k * L + i] * (float)((c[i] >> (k * bits)) & m);
    return acc;
}

static inline void kq_axpy_b(const int bits, float a, const uint8_t *c, int L, float *out) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    for (int k = 0; k < per; k++)
        for (int i = 0; i < L; i++) out[k * L + i] += a * (float)((c[i] >> (k * bits)) & m);
}
#endif

/* the bit width as a constant for each instance */
static inline float kq_dot(int bits, const float *qp, const uint8_t *c, int L) {
    return bits == 8 ? kq_dot_b(8, qp, c, L) : bits == 4 ? kq_dot_b(4, qp, c, L) : kq_dot_b(2, qp, c, L);
}

static inline void kq_axpy(int bits, float a, const uint8_t *c, int L, float *out) {
    if (bits == 8) kq_axpy_b(8, a, c, L, out);
    else if (bits == 4) kq_axpy_b(4, a, c, L, out);
    else kq_axpy_b(2, a, c, L, out);
}

/* an fp16 scale or zero point (F16C under the vector targets) */
#ifdef AL_VW
static inline float kq_f16(uint16_t h) { return _cvtsh_ss(h); }
#else
static inline float kq_f16(uint16_t h) { return al_f16_to_f32(h); }
#endif

/* The cells of column ranges rg[0], rg[1] (start, width), in order: ci from
 * the cell of the range's first column while cells start inside it. */
#define KQ_FOR_CELLS(kq, rg, r, ci)                                                                                   \
    for (int r = 0; r < 2; r++)                                                                                       \
        for (int ci = rg[r][1] > 0 ? (kq)->cell_of[rg[r][0]] : (kq)->ncell;                                          \
             ci < (kq)->ncell && (kq)->cells[ci].col < rg[r][0] + rg[r][1]; ci++)

/* S[i][j - j0] = scale * (q_i . key_j) for heads i < pg of group g and
 * positions j0 <= j < j0 + n (whole blocks of the quantised part); raw
 * scores, the caller applies the score function. */
void KSFX(al_kvq_scores)(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg,
                         const float *Q, int ldq, int j0, int n, float *S, int lds) {
    float qpad[AL_KVQ_MAX_CELL], qs[AL_KVQ_MAX_CELL], qsum[AL_KVQ_MAX_CELL];
    const int N = kq->group, bits = kq->bits, dk = s->dk;
    for (int i = 0; i < pg; i++) {
        const int h = g * pg + i;
        const float *qh = Q + (size_t)i * ldq;
        const int rg[2][2] = {{(int)(v->k_off + (size_t)g * v->k_group), dk},
                              {(int)(v->k2_off + (size_t)h * v->dk2), v->dk2}};
        int p = 0;
        KQ_FOR_CELLS(kq, rg, r, ci) { /* the query in padded order; value cells' sums */
            const al_kvq_cell *c = &kq->cells[ci];
            const float *src = qh + (r ? dk : 0) + (c->col - rg[r][0]);
            float sum = 0.0f;
            for (int e = 0; e < c->pw; e++) {
                qpad[p + e] = e < c->w ? src[e] : 0.0f;
                qs[p + e] = 0.0f;
                sum += qpad[p + e];
            }
            qsum[p] = sum;
            p += c->pw;
        }
        float *Si = S + (size_t)i * lds;
        for (int jb = j0; jb < j0 + n; jb += N) {
            const size_t blk = (size_t)jb / N;
            float bias = 0.0f;
            p = 0;
            KQ_FOR_CELLS(kq, rg, r, ci) { /* this block's scaled query and bias */
                const al_kvq_cell *c = &kq->cells[ci];
                if (c->kind == AL_KV_SEG_KEY) {
                    const uint16_t *sz = kq->kscale + 2 * (blk * kq->nkey + c->sidx);
                    for (int e = 0; e < c->w; e++) {
                        qs[p + e] = qpad[p + e] * kq_f16(sz[2 * e]);
                        bias += qpad[p + e] * kq_f16(sz[2 * e + 1]);
                    }
                }
                p += c->pw;
            }
            for (int j = jb; j < jb + N; j++) {
                const uint8_t *row = kq->codes + (size_t)j * kq->code_row;
                float a = bias;
                p = 0;
                KQ_FOR_CELLS(kq, rg, r, ci) {
                    const al_kvq_cell *c = &kq->cells[ci];
                    if (c->kind == AL_KV_SEG_KEY) {
                        a += kq_dot(bits, qs + p, row + c->byte, c->L);
                    } else {
                        const uint16_t *sz = kq->vscale + 2 * ((size_t)j * kq->nvcell + c->sidx);
                        a += kq_f16(sz[0]) * kq_dot(bits, qpad + p, row + c->byte, c->L) + kq_f16(sz[1]) * qsum[p];
                    }
                    p += c->pw;
                }
                Si[j - j0] = s->scale * a;
            }
        }
    }
}

/* P[i][0 .. dv + dv2) = sum_j S[i][j - j0] value_j of head i, the weights
 * S already applied by the score function. */
void KSFX(al_kvq_values)(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg, int j0,
                         int n, const float *S, int lds, float *P, int ldp) {
    float opad[AL_KVQ_MAX_CELL], kacc[AL_KVQ_MAX_CELL], zacc[AL_KVQ_MAX_CELL];
    const int N = kq->group, bits = kq->bits, dv = s->dv;
    for (int i = 0; i < pg; i++) {
        const int h = g * pg + i;
        const float *Si = S + (size_t)i * lds;
        const int rg[2][2] = {{(int)(v->v_off + (size_t)g * v->v_group), dv},
                              {(int)(v->v2_off + (size_t)h * v->dv2), v->dv2}};
        int p = 0;
        KQ_FOR_CELLS(kq, rg, r, ci) {
            for (int e = 0; e < kq->cells[ci].pw; e++) opad[p + e] = 0.0f;
            zacc[p] = 0.0f;
            p += kq->cells[ci].pw;
        }
        const int np = p;
        for (int jb = j0; jb < j0 + n; jb += N) {
            const size_t blk = (size_t)jb / N;
            float psum = 0.0f;
            for (int e = 0; e < np; e++) kacc[e] = 0.0f;
            for (int j = jb; j < jb + N; j++) {
                const float w = Si[j - j0];
                if (w == 0.0f) continue;
                const uint8_t *row = kq->codes + (size_t)j * kq->code_row;
                psum += w;
                p = 0;
                KQ_FOR_CELLS(kq, rg, r, ci) {
                    const al_kvq_cell *c = &kq->cells[ci];
                    if (c->kind == AL_KV_SEG_KEY) {
                        kq_axpy(bits, w, row + c->byte, c->L, kacc + p);
                    } else {
                        const uint16_t *sz = kq->vscale + 2 * ((size_t)j * kq->nvcell + c->sidx);
                        kq_axpy(bits, w * kq_f16(sz[0]), row + c->byte, c->L, opad + p);
                        zacc[p] += w * kq_f16(sz[1]);
                    }
                    p += c->pw;
                }
            }
            p = 0;
            KQ_FOR_CELLS(kq, rg, r, ci) { /* key cells read as values: this block's scales */
                const al_kvq_cell *c = &kq->cells[ci];
                if (c->kind == AL_KV_SEG_KEY) {
                    const uint16_t *sz = kq->kscale + 2 * (blk * kq->nkey + c->sidx);
                    for (int e = 0; e < c->w; e++)
                        opad[p + e] += kq_f16(sz[2 * e]) * kacc[p + e] + kq_f16(sz[2 * e + 1]) * psum;
                }
                p += c->pw;
            }
        }
        float *Pi = P + (size_t)i * ldp;
        p = 0;
        KQ_FOR_CELLS(kq, rg, r, ci) {
            const al_kvq_cell *c = &kq->cells[ci];
            float *dst = Pi + (r ? dv : 0) + (c->col - rg[r][0]);
            for (int e = 0; e < c->w; e++) dst[e] = opad[p + e] + zacc[p];
            p += c->pw;
        }
    }
}
#undef KQ_FOR_CELLS
