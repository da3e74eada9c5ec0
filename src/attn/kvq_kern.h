/*
 * kvq_kern.h: decode over the quantised part of a KV cache (kvq.h), one
 * work item = the heads of one KV group against a chunk of whole key
 * blocks. Compiled three times: kvq_avx512.c and kvq_avx2.c include it after
 * core/vec.h under their target pragma (AL_VW 16 / 8), kvq_generic.c without
 * vectors (plain loops). The includer defines KSFX(name).
 *
 * The codes are read where they lie and widened in registers: a cell's
 * plane bytes are loaded KW at a time, shifted and masked per plane and
 * converted to floats (kq_dot; kq_wsum sums a cell over a block's
 * positions in registers). The scales never multiply a code:
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

/* acc + the lanes of q[planes x L] (padded order) times the cell's codes
 * (their sum is q . codes) */
static inline __attribute__((always_inline)) vf kq_dotv_b(const int bits, const float *qp, const uint8_t *c, int L,
                                                          vf acc) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    for (int i = 0; i < L; i += AL_VW) {
        const kq_vi x = KQ_U8(c + i);
        const vmask mk = V_MASK(L - i);
#pragma GCC unroll 4
        for (int k = 0; k < per; k++) {
            const vf q = L - i >= AL_VW ? V_LOAD(qp + k * L + i) : V_LOADM(qp + k * L + i, mk);
            acc = V_FMA(q, KQ_FIELD(x, k * bits, m), acc);
        }
    }
    return acc;
}

static inline vf kq_dotv(int bits, const float *qp, const uint8_t *c, int L, vf acc) {
    return bits == 8 ? kq_dotv_b(8, qp, c, L, acc) : bits == 4 ? kq_dotv_b(4, qp, c, L, acc) : kq_dotv_b(2, qp, c, L, acc);
}

/* out[planes x L] += sum_j w[j] * codes of the cell at base + j stride,
 * j < n: KW bytes of every position at a time, the sums in registers */
static inline __attribute__((always_inline)) void kq_wsum_b(const int bits, const uint8_t *base, size_t stride, int L,
                                                            const float *w, int n, float *out) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    for (int i = 0; i < L; i += AL_VW) {
        vf acc[8] = {V_ZERO(), V_ZERO(), V_ZERO(), V_ZERO(), V_ZERO(), V_ZERO(), V_ZERO(), V_ZERO()};
        for (int j = 0; j < n; j++) {
            const kq_vi x = KQ_U8(base + (size_t)j * stride + i);
            const vf wj = V_SET1(w[j]);
#pragma GCC unroll 4
            for (int k = 0; k < per; k++) acc[k] = V_FMA(wj, KQ_FIELD(x, k * bits, m), acc[k]);
        }
        const vmask mk = V_MASK(L - i);
#pragma GCC unroll 4
        for (int k = 0; k < per; k++) {
            float *o = out + k * L + i;
            if (L - i >= AL_VW) V_STORE(o, V_ADD(V_LOAD(o), acc[k]));
            else V_STOREM(o, mk, V_ADD(V_LOADM(o, mk), acc[k]));
        }
    }
}
#else
static inline void kq_wsum_b(const int bits, const uint8_t *base, size_t stride, int L, const float *w, int n,
                             float *out) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < per; k++)
            for (int i = 0; i < L; i++) out[k * L + i] += w[j] * (float)((base[(size_t)j * stride + i] >> (k * bits)) & m);
}

static inline float kq_dot_b(const int bits, const float *qp, const uint8_t *c, int L) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    float acc = 0.0f;
    for (int k = 0; k < per; k++)
        for (int i = 0; i < L; i++) acc += qp[k * L + i] * (float)((c[i] >> (k * bits)) & m);
    return acc;
}
#endif

/* the bit width as a constant for each instance */
#ifndef AL_VW
static inline float kq_dot(int bits, const float *qp, const uint8_t *c, int L) {
    return bits == 8 ? kq_dot_b(8, qp, c, L) : bits == 4 ? kq_dot_b(4, qp, c, L) : kq_dot_b(2, qp, c, L);
}
#endif

static inline void kq_wsum(int bits, const uint8_t *base, size_t stride, int L, const float *w, int n, float *out) {
    if (bits == 8) kq_wsum_b(8, base, stride, L, w, n, out);
    else if (bits == 4) kq_wsum_b(4, base, stride, L, w, n, out);
    else kq_wsum_b(2, base, stride, L, w, n, out);
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
#ifdef AL_VW
            /* AL_VW positions at a time: each one's products as a vector of
             * lanes, the AL_VW lane sums folded into one vector (v_sum_lanes) */
            for (int j = jb; j < jb + N; j += AL_VW) {
                const int nb = jb + N - j < AL_VW ? jb + N - j : AL_VW;
                vf acc[AL_VW];
                float bj[AL_VW];
#pragma GCC unroll 16
                for (int jj = 0; jj < AL_VW; jj++) {
                    vf a = V_ZERO();
                    bj[jj] = bias;
                    if (jj < nb) {
                        const uint8_t *row = kq->codes + (size_t)(j + jj) * kq->code_row;
                        p = 0;
                        KQ_FOR_CELLS(kq, rg, r, ci) {
                            const al_kvq_cell *c = &kq->cells[ci];
                            if (c->kind == AL_KV_SEG_KEY) {
                                a = kq_dotv(bits, qs + p, row + c->byte, c->L, a);
                            } else {
                                const uint16_t *sz = kq->vscale + 2 * ((size_t)(j + jj) * kq->nvcell + c->sidx);
                                a = V_FMA(V_SET1(kq_f16(sz[0])), kq_dotv(bits, qpad + p, row + c->byte, c->L, V_ZERO()), a);
                                bj[jj] += kq_f16(sz[1]) * qsum[p];
                            }
                            p += c->pw;
                        }
                    }
                    acc[V_SUM_SLOT(jj)] = a;
                }
                const vf out = V_MUL(V_ADD(v_sum_lanes(acc), V_LOAD(bj)), V_SET1(s->scale));
                if (nb == AL_VW) V_STORE(Si + (j - j0), out);
                else V_STOREM(Si + (j - j0), V_MASK(nb), out);
            }
#else
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
#endif
        }
    }
}

/* P[i][0 .. dv + dv2) = sum_j S[i][j - j0] value_j of head i, the weights
 * S already applied by the score function. */
void KSFX(al_kvq_values)(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg, int j0,
                         int n, const float *S, int lds, float *P, int ldp) {
    float opad[AL_KVQ_MAX_CELL], kacc[AL_KVQ_MAX_CELL], zacc[AL_KVQ_MAX_CELL], ws[256];
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
        for (int jb = j0; jb < j0 + n; jb += N) {
            const size_t blk = (size_t)jb / N;
            const float *w = Si + (jb - j0);
            const uint8_t *rows = kq->codes + (size_t)jb * kq->code_row;
            float psum = 0.0f;
            for (int j = 0; j < N; j++) psum += w[j];
            p = 0;
            KQ_FOR_CELLS(kq, rg, r, ci) { /* each cell over the block's positions, sums in registers */
                const al_kvq_cell *c = &kq->cells[ci];
                if (c->kind == AL_KV_SEG_KEY) { /* read as a value: then this block's scales */
                    const uint16_t *sz = kq->kscale + 2 * (blk * kq->nkey + c->sidx);
                    for (int e = 0; e < c->pw; e++) kacc[e] = 0.0f;
                    kq_wsum(bits, rows + c->byte, kq->code_row, c->L, w, N, kacc);
                    for (int e = 0; e < c->w; e++)
                        opad[p + e] += kq_f16(sz[2 * e]) * kacc[e] + kq_f16(sz[2 * e + 1]) * psum;
                } else { /* per token: weights times the tokens' scales */
                    for (int j = 0; j < N; j++) {
                        const uint16_t *sz = kq->vscale + 2 * ((size_t)(jb + j) * kq->nvcell + c->sidx);
                        ws[j] = w[j] * kq_f16(sz[0]);
                        zacc[p] += w[j] * kq_f16(sz[1]);
                    }
                    kq_wsum(bits, rows + c->byte, kq->code_row, c->L, ws, N, opad + p);
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
