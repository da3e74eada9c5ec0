/*
 * kvq_kern.h: decode over the quantised part of a KV cache (kvq.h), one
 * work item = the heads of one KV group against a chunk of whole key
 * blocks. Compiled three times: kvq_avx512.c and kvq_avx2.c include it after
 * core/vec.h under their target pragma (AL_VW 16 / 8), kvq_generic.c without
 * vectors (plain loops). The includer defines KSFX(name).
 *
 * The codes are read where they lie and widened in registers, a vector of
 * bytes at a time, shifted and masked per plane and converted to floats.
 * A key cell that is only read as keys lies byte-major (kvq.h), so its
 * scores build up in lanes, a vector of positions per load
 * (kq_key_scores); a position-major cell (values, MLA's latent) is read a
 * position at a time: its dot products (kq_dot_tile) end in horizontal
 * sums, its weighted sums (kq_wsum_tile) keep a block's channel sums in
 * registers. The vector kernels take a tile of up to KQ_TILE heads of a
 * group at once (the plain loops: one head). The scales never multiply a
 * code:
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

/* an fp16 scale or zero point (F16C under the vector targets) */
#ifdef AL_VW
static inline float kq_f16(uint16_t h) { return _cvtsh_ss(h); }
#else
static inline float kq_f16(uint16_t h) { return al_f16_to_f32(h); }
#endif

/* The cells of column range [start, start + width), in order: ci from the
 * cell of the range's first column while cells start inside it. */
#define KQ_FOR_RANGE(kq, start, width, ci)                                                                            \
    for (int ci = (width) > 0 ? (kq)->cell_of[start] : (kq)->ncell;                                                  \
         ci < (kq)->ncell && (kq)->cells[ci].col < (start) + (width); ci++)

/* The cells of column ranges rg[0], rg[1] (start, width), in order. */
#define KQ_FOR_CELLS(kq, rg, r, ci)                                                                                   \
    for (int r = 0; r < 2; r++) KQ_FOR_RANGE(kq, rg[r][0], rg[r][1], ci)

/* A head's query qh (key ranges rg, the shared one dk wide) in padded
 * channel order: qpad (zeros past each cell's w), qs zeroed, qsum at each
 * cell's first padded channel its channels' sum (for value cells). */
static void kq_pad_query(const al_kvq *kq, const int rg[2][2], const float *qh, int dk, float *qpad, float *qs,
                         float *qsum) {
    int p = 0;
    KQ_FOR_CELLS(kq, rg, r, ci) {
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
}

/* A head's output row Pi (value ranges rg, the shared one dv wide) from
 * its padded sums opad plus each cell's zero-point sum zacc (at the cell's
 * first padded channel) */
static void kq_write_out(const al_kvq *kq, const int rg[2][2], int dv, const float *opad, const float *zacc,
                         float *Pi) {
    int p = 0;
    KQ_FOR_CELLS(kq, rg, r, ci) {
        const al_kvq_cell *c = &kq->cells[ci];
        float *dst = Pi + (r ? dv : 0) + (c->col - rg[r][0]);
        for (int e = 0; e < c->w; e++) dst[e] = opad[p + e] + zacc[p];
        p += c->pw;
    }
}

#ifdef AL_VW
/* ---- the vector kernels ----
 * A head tile: up to KQ_TILE heads of a group share the group's key and value
 * cells, so each vector of codes is widened once and multiplied into every
 * tile head's accumulators (MQA, MLA's latent, LRKV's K_s/V_s read the shared
 * codes once per tile, not once per head). A head's own cells (LRKV's R_K[h],
 * R_V[h]) go through the same code with a tile of one. The work arrays hold
 * tile head t's padded channels at t P (P: the padded channels of one head's
 * key or value ranges), so a tile of NT heads needs NT P <= AL_KVQ_MAX_CELL
 * floats (kq_tile_max). */
enum { KQ_TILE = 4 };

/* AL_VW bytes widened to 32-bit lanes (KQ_U8) */
#if AL_VW == 16
typedef __m512i kq_vi;
#define KQ_U8(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define KQ_SRL(x, n) _mm512_srli_epi32((x), (n))
#define KQ_AND(x, m) _mm512_and_si512((x), _mm512_set1_epi32(m))
#define KQ_CVT(x) _mm512_cvtepi32_ps(x)
#else
typedef __m256i kq_vi;
#define KQ_U8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define KQ_SRL(x, n) _mm256_srli_epi32((x), (n))
#define KQ_AND(x, m) _mm256_and_si256((x), _mm256_set1_epi32(m))
#define KQ_CVT(x) _mm256_cvtepi32_ps(x)
#endif

/* plane k of widened bytes x (bits each) as floats: the lowest plane needs
 * no shift, the highest no mask */
static inline __attribute__((always_inline)) vf kq_field(kq_vi x, const int k, const int bits) {
    const int per = 8 / bits;
    if (per == 1) return KQ_CVT(x);
    if (k == 0) return KQ_CVT(KQ_AND(x, (1 << bits) - 1));
    if (k == per - 1) return KQ_CVT(KQ_SRL(x, k * bits));
    return KQ_CVT(KQ_AND(KQ_SRL(x, k * bits), (1 << bits) - 1));
}

/* AL_VW (scale, zero) fp16 pairs at sz as two vectors of floats */
static inline __attribute__((always_inline)) void kq_sz(const uint16_t *sz, vf *sc, vf *ze) {
#if AL_VW == 16
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sz));
    const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sz + 16)));
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *sc = _mm512_permutex2var_ps(a, ev, b);
    *ze = _mm512_permutex2var_ps(a, _mm512_add_epi32(ev, _mm512_set1_epi32(1)), b);
#else
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sz));       /* s0 z0 .. s3 z3 */
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sz + 8))); /* s4 z4 .. s7 z7 */
    /* s0 s1 s4 s5 | s2 s3 s6 s7, then the 64-bit pairs in order */
    *sc = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *ze = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
#endif
}

/* The (scale, zero) pairs of value cell sidx at positions j .. j + nb - 1
 * of one block (nb <= AL_VW; the pairs lie together, al_kvq_vsz_off) as
 * two vectors of floats, lanes past nb 0. */
static inline __attribute__((always_inline)) void kq_vsz(const al_kvq *kq, int sidx, int j, int nb, vf *sc, vf *ze) {
    const uint16_t *sz = kq->vscale + al_kvq_vsz_off(kq, j, sidx);
    if (nb == AL_VW) {
        kq_sz(sz, sc, ze);
        return;
    }
    float a[AL_VW] = {0}, b[AL_VW] = {0};
    for (int u = 0; u < nb; u++) a[u] = kq_f16(sz[2 * u]), b[u] = kq_f16(sz[2 * u + 1]);
    *sc = V_LOAD(a), *ze = V_LOAD(b);
}

/* o[0 .. n) += the first n lanes of d (n >= AL_VW: the whole vector; a
 * shorter tail through the mask mk = V_MASK(n), nothing past it touched) */
static inline __attribute__((always_inline)) void kq_add_out(float *o, vf d, int n, vmask mk) {
    if (n >= AL_VW) V_STORE(o, V_ADD(V_LOAD(o), d));
    else V_STOREM(o, mk, V_ADD(V_LOADM(o, mk), d));
}

/* One vector step of a cell's dot products: bytes c[i, i + AL_VW) widened
 * once; plane k's field times lanes [k L + i, ...) of each tile head's
 * padded query (qp + t ldq), into a[t][(k + u) & 1] (two chains per head).
 * masked: the cell ends inside this vector (query lanes past L not read). */
static inline __attribute__((always_inline)) void kq_dot_step(const int bits, const int NT, const float *qp, int ldq,
                                                              const uint8_t *c, int L, int i, const int u,
                                                              const int masked, vf a[][2]) {
    const int per = 8 / bits;
    const kq_vi x = KQ_U8(c + i);
    const vmask mk = V_MASK(masked ? L - i : AL_VW);
#pragma GCC unroll 4
    for (int k = 0; k < per; k++) {
        const vf f = kq_field(x, k, bits);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const float *q = qp + (size_t)t * ldq + k * L + i;
            a[t][(k + u) & 1] = V_FMA(masked ? V_LOADM(q, mk) : V_LOAD(q), f, a[t][(k + u) & 1]);
        }
    }
}

/* a[t] += the lanes of head t's padded query times a cell's codes (their
 * sum is its dot product with the codes): two vectors a step while they
 * fit, then one, then the masked tail */
static inline __attribute__((always_inline)) void kq_dot_tile(const int bits, const int NT, const float *qp, int ldq,
                                                              const uint8_t *c, int L, vf a[][2]) {
    int i = 0;
    for (; i + 2 * AL_VW <= L; i += 2 * AL_VW) {
        kq_dot_step(bits, NT, qp, ldq, c, L, i, 0, 0, a);
        kq_dot_step(bits, NT, qp, ldq, c, L, i + AL_VW, 1, 0, a);
    }
    if (i + AL_VW <= L) kq_dot_step(bits, NT, qp, ldq, c, L, i, 0, 0, a), i += AL_VW;
    if (i < L) kq_dot_step(bits, NT, qp, ldq, c, L, i, 1, 1, a);
}

/* out[t][planes x L] (head t at out + t ldo) += sum_j w[t][j] * codes of the
 * position-major cell at base + j stride, j < n (w[t] at w + t ldw): NC
 * vectors of bytes of JP positions at a time, the JP x NC x NT x planes
 * sums in registers (at most 8 of them; each gets one product per JP
 * positions, so with JP = 2 a short cell keeps twice the chains in flight) */
static inline __attribute__((always_inline)) void kq_wsum_run(const int bits, const int NT, const int JP,
                                                              const uint8_t *base, size_t stride, int L,
                                                              const float *w, int ldw, int n, float *out, int ldo) {
    const int per = 8 / bits, NA = NT * per, NI = NA >= 8 ? 1 : 8 / NA > 4 ? 4 : 8 / NA, NC = NI / JP;
    for (int i = 0; i < L; i += NC * AL_VW) {
        vf acc[8];
#pragma GCC unroll 8
        for (int a = 0; a < 8; a++) acc[a] = V_ZERO();
        for (int j = 0; j < n; j += JP) {
#pragma GCC unroll 2
            for (int jp = 0; jp < JP; jp++) {
                if (jp > 0 && j + jp >= n) break;
                const uint8_t *c = base + (size_t)(j + jp) * stride + i;
                vf wt[KQ_TILE];
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) wt[t] = V_SET1(w[(size_t)t * ldw + j + jp]);
#pragma GCC unroll 4
                for (int u = 0; u < NC; u++) {
                    if (u > 0 && i + u * AL_VW >= L) break;
                    const kq_vi x = KQ_U8(c + u * AL_VW);
#pragma GCC unroll 4
                    for (int k = 0; k < per; k++) {
                        const vf f = kq_field(x, k, bits);
                        const int a0 = ((jp * NC + u) * NT) * per + k;
#pragma GCC unroll 4
                        for (int t = 0; t < NT; t++) acc[a0 + t * per] = V_FMA(wt[t], f, acc[a0 + t * per]);
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < NC; u++) {
            const int at = i + u * AL_VW;
            if (at >= L) break;
            const vmask mk = V_MASK(L - at);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
                for (int k = 0; k < per; k++) {
                    float *o = out + (size_t)t * ldo + k * L + at;
                    vf s = acc[(u * NT + t) * per + k];
                    if (JP == 2) s = V_ADD(s, acc[((NC + u) * NT + t) * per + k]);
                    kq_add_out(o, s, L - at, mk);
                }
        }
    }
}

/* kq_wsum_run, two positions at a time where the cell's bytes need at most
 * half the vectors of bytes the sums' registers allow */
static inline __attribute__((always_inline)) void kq_wsum_tile(const int bits, const int NT, const uint8_t *base,
                                                               size_t stride, int L, const float *w, int ldw, int n,
                                                               float *out, int ldo) {
    const int NA = NT * (8 / bits), NI = NA >= 8 ? 1 : 8 / NA > 4 ? 4 : 8 / NA;
    if (NI >= 2 && L <= NI / 2 * AL_VW) kq_wsum_run(bits, NT, 2, base, stride, L, w, ldw, n, out, ldo);
    else kq_wsum_run(bits, NT, 1, base, stride, L, w, ldw, n, out, ldo);
}

/* The vectors of positions kq_key_scores handles at once for a tile of NT
 * heads at `per` planes a byte, and the chains of sums per head and vector:
 * at most 8 sums in registers, and enough chains in flight; with 3 or 4
 * heads at int4 the 4 x 2 broadcast query values leave room for one vector
 * of positions only (measured, AVX2: two vectors spilled and ran 10 %
 * slower) */
#define KQ_KEY_UV(NT, per) ((NT) <= 2 ? 4 : (per) == 1 ? 2 : 1)
#define KQ_KEY_SL(NT, per) ((NT) == 1 || ((NT) >= 3 && (per) > 1) ? 2 : 1)

/* S[t][j] += sum over bytes i < L and planes k of qp[t][k L + i] times
 * plane k of byte i of position j, for positions j < n of a key cell's
 * byte-major run R (byte i of position j at R[i N + j]) and tile heads t
 * (query at qp + t ldq, scores at S + t lds): each load widens a vector of
 * positions, whose scores build up in lanes (with KQ_KEY_SL two chains per
 * head and vector: the planes alternate, at int8 the bytes), so no
 * horizontal sums are needed. A vector of positions that
 * runs past n reads bytes of the next byte (or of the run after, or of
 * the 64 spare bytes past the codes) into lanes that are never stored. */
static inline __attribute__((always_inline)) void kq_key_scores(const int bits, const int NT, const uint8_t *R, int N,
                                                                int n, int L, const float *qp, int ldq, float *S,
                                                                int lds) {
    const int per = 8 / bits, UV = KQ_KEY_UV(NT, per), SL = KQ_KEY_SL(NT, per);
    for (int j0 = 0; j0 < n; j0 += UV * AL_VW) {
        vf acc[KQ_TILE * 4][2];
#pragma GCC unroll 16
        for (int a = 0; a < NT * UV; a++) acc[a][0] = acc[a][1] = V_ZERO();
        /* int8 with two chains: two bytes a step, so a chain's index is a
         * constant (otherwise one byte: more heads have chains enough, and
         * the wider step spilled: GQA int8 1.4x slower) */
        const int IU = SL == 2 && per == 1 ? 2 : 1;
        for (int i0 = 0; i0 < L; i0 += IU) {
#pragma GCC unroll 2
            for (int ii = 0; ii < IU; ii++) {
                const int i = i0 + ii;
                if (ii > 0 && i >= L) break;
                vf bq[KQ_TILE][4];
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
                    for (int k = 0; k < per; k++) bq[t][k] = V_SET1(qp[(size_t)t * ldq + k * L + i]);
#pragma GCC unroll 4
                for (int u = 0; u < UV; u++) {
                    if (u > 0 && j0 + u * AL_VW >= n) break;
                    const kq_vi x = KQ_U8(R + (size_t)i * N + j0 + u * AL_VW);
#pragma GCC unroll 4
                    for (int k = 0; k < per; k++) {
                        const vf f = kq_field(x, k, bits);
                        const int sl = SL == 1 ? 0 : per == 1 ? ii : k & 1;
#pragma GCC unroll 4
                        for (int t = 0; t < NT; t++) acc[t * UV + u][sl] = V_FMA(bq[t][k], f, acc[t * UV + u][sl]);
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < UV; u++) {
            const int at = j0 + u * AL_VW;
            if (at >= n) break;
            const vmask mk = V_MASK(n - at);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                float *o = S + (size_t)t * lds + at;
                const vf d = SL == 1 ? acc[t * UV + u][0] : V_ADD(acc[t * UV + u][0], acc[t * UV + u][1]);
                kq_add_out(o, d, n - at, mk);
            }
        }
    }
}

/* out[t][k L + i] += sum_j w[t][j] times plane k of byte i of position j,
 * j < n, for a key cell's byte-major run R read as values (MLA's latent):
 * per byte a vector of positions at a time against the weights (lanes past
 * n weigh 0), the NT x planes sums reduced at the end of the byte. */
static inline __attribute__((always_inline)) void kq_key_wsum(const int bits, const int NT, const uint8_t *R, int N,
                                                              int n, int L, const float *w, int ldw, float *out,
                                                              int ldo) {
    const int per = 8 / bits;
    for (int i = 0; i < L; i++) {
        vf acc[KQ_TILE][4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
            for (int k = 0; k < per; k++) acc[t][k] = V_ZERO();
        for (int j = 0; j < n; j += AL_VW) {
            const kq_vi x = KQ_U8(R + (size_t)i * N + j);
            vf wt[KQ_TILE];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) wt[t] = v_loadn(w + (size_t)t * ldw + j, n - j);
#pragma GCC unroll 4
            for (int k = 0; k < per; k++) {
                const vf f = kq_field(x, k, bits);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) acc[t][k] = V_FMA(wt[t], f, acc[t][k]);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
            for (int k = 0; k < per; k++) out[(size_t)t * ldo + k * L + i] += V_HSUM(acc[t][k]);
    }
}
#else
/* out[k L + i] += sum_j w[j] plane k of byte i of position j (j < n):
 * byte i of position j at base[j ps + i bs] (a value cell: ps = L, bs = 1;
 * a key cell's byte-major run: ps = 1, bs = N) */
static inline void kq_wsum_b(const int bits, const uint8_t *base, size_t ps, size_t bs, int L, const float *w, int n,
                             float *out) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < per; k++)
            for (int i = 0; i < L; i++) out[k * L + i] += w[j] * (float)((base[j * ps + i * bs] >> (k * bits)) & m);
}

/* sum over bytes i and planes k of qp[k L + i] times plane k of byte
 * c[i bs] */
static inline float kq_dot_b(const int bits, const float *qp, const uint8_t *c, size_t bs, int L) {
    const int per = 8 / bits, m = (1 << bits) - 1;
    float acc = 0.0f;
    for (int k = 0; k < per; k++)
        for (int i = 0; i < L; i++) acc += qp[k * L + i] * (float)((c[i * bs] >> (k * bits)) & m);
    return acc;
}

static inline float kq_dot(int bits, const float *qp, const uint8_t *c, size_t bs, int L) {
    return bits == 8 ? kq_dot_b(8, qp, c, bs, L) : bits == 4 ? kq_dot_b(4, qp, c, bs, L) : kq_dot_b(2, qp, c, bs, L);
}

static inline void kq_wsum(int bits, const uint8_t *base, size_t ps, size_t bs, int L, const float *w, int n,
                           float *out) {
    if (bits == 8) kq_wsum_b(8, base, ps, bs, L, w, n, out);
    else if (bits == 4) kq_wsum_b(4, base, ps, bs, L, w, n, out);
    else kq_wsum_b(2, base, ps, bs, L, w, n, out);
}
#endif

#ifdef AL_VW
/* padded channels of the cells of column range rg (start, width) */
static int kq_padded(const al_kvq *kq, int start, int width) {
    int p = 0;
    KQ_FOR_RANGE(kq, start, width, ci) p += kq->cells[ci].pw;
    return p;
}

/* Per block, for the key cells of range [start, start + width) at padded
 * offset p0 of each tile head (qpad + t P): qs = qpad times the block's
 * channel scales, bias[t] += qpad . zero points (AL_VW channels a step). */
static inline __attribute__((always_inline)) void kq_scale_query(const int NT, const al_kvq *kq, size_t blk, int start,
                                                                 int width, const float *qpad, float *qs, int P, int p0,
                                                                 float *bias) {
    int p = p0;
    KQ_FOR_RANGE(kq, start, width, ci) {
        const al_kvq_cell *c = &kq->cells[ci];
        if (c->kind == AL_KV_SEG_KEY) {
            const uint16_t *sz = kq->kscale + 2 * (blk * kq->nkey + c->sidx);
            vf bv[KQ_TILE];
            for (int t = 0; t < NT; t++) bv[t] = V_ZERO();
            int e = 0;
            for (; e + AL_VW <= c->w; e += AL_VW) {
                vf sc, ze;
                kq_sz(sz + 2 * e, &sc, &ze);
                for (int t = 0; t < NT; t++) {
                    const vf q = V_LOAD(qpad + (size_t)t * P + p + e);
                    V_STORE(qs + (size_t)t * P + p + e, V_MUL(q, sc));
                    bv[t] = V_FMA(q, ze, bv[t]);
                }
            }
            for (int t = 0; t < NT; t++) {
                const float *q = qpad + (size_t)t * P + p;
                float b = V_HSUM(bv[t]);
                for (int f = e; f < c->w; f++) {
                    qs[(size_t)t * P + p + f] = q[f] * kq_f16(sz[2 * f]);
                    b += q[f] * kq_f16(sz[2 * f + 1]);
                }
                bias[t] += b;
            }
        }
        p += c->pw;
    }
}

/* S[t][j] += the score parts of the cells of range [start, start + width)
 * for tile head t (padded arrays at offset p0 of t P, S rows lds apart) and
 * positions jb <= j < jb + n of the block, cell by cell: AL_VW positions'
 * dot products as vectors of lanes, folded into one vector of AL_VW scores
 * (v_sum_lanes). Key cells: qs . codes; value cells: s_j (qpad . codes) +
 * z_j sum(q) with the positions' scales gathered as vectors. */
static inline __attribute__((always_inline)) void kq_score_range(const int bits, const int NT, const al_kvq *kq,
                                                                 int start, int width, int jb, int n,
                                                                 const float *qpad, const float *qs,
                                                                 const float *qsum, int P, int p0, float *S,
                                                                 int lds) {
    int p = p0;
    KQ_FOR_RANGE(kq, start, width, ci) {
        const al_kvq_cell *c = &kq->cells[ci];
        const int key = c->kind == AL_KV_SEG_KEY, L = c->L;
        const float *qp = (key ? qs : qpad) + p;
        const uint8_t *codes = kq->codes + al_kvq_run_off(kq, (size_t)jb / kq->group, c); /* the block's run */
        if (c->bm) {
            kq_key_scores(bits, NT, codes, kq->group, n, L, qp, P, S, lds);
            p += c->pw;
            continue;
        }
        for (int j = 0; j < n; j += AL_VW) {
            const int nb = n - j < AL_VW ? n - j : AL_VW;
            vf acc[KQ_TILE][AL_VW];
            for (int jj = 0; jj < AL_VW; jj++) {
                vf a[KQ_TILE][2];
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) a[t][0] = a[t][1] = V_ZERO();
                if (jj < nb) kq_dot_tile(bits, NT, qp, P, codes + (size_t)(j + jj) * L, L, a);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) acc[t][V_SUM_SLOT(jj)] = V_ADD(a[t][0], a[t][1]);
            }
            vf sc = V_ZERO(), ze = V_ZERO();
            if (!key) kq_vsz(kq, c->sidx, jb + j, nb, &sc, &ze);
            const vmask mk = V_MASK(nb);
            for (int t = 0; t < NT; t++) {
                float *o = S + (size_t)t * lds + j;
                vf d = v_sum_lanes(acc[t]);
                if (!key) d = V_FMA(d, sc, V_MUL(ze, V_SET1(qsum[(size_t)t * P + p])));
                kq_add_out(o, d, nb, mk);
            }
        }
        p += c->pw;
    }
}

/* Asks for the runs of block blk of the cells of column range [start,
 * start + width) to be brought into L1 (integer addresses: nothing is
 * formed past the codes; the caller names blocks that exist). */
static inline void kq_prefetch_runs(const al_kvq *kq, size_t blk, int start, int width) {
    KQ_FOR_RANGE(kq, start, width, ci) {
        const al_kvq_cell *c = &kq->cells[ci];
        const uintptr_t r = (uintptr_t)kq->codes + al_kvq_run_off(kq, blk, c);
        const size_t len = (size_t)kq->group * (size_t)c->L;
        for (size_t o = 0; o < len; o += 64) _mm_prefetch((const char *)(r + o), _MM_HINT_T0);
    }
}

/* The scores of tile heads hi0 .. hi0 + NT - 1 of group g (S rows hi0 ..):
 * the group's shared key range once per tile, each head's own range
 * (dk2) with a tile of one; per block the bias, then the cells, then the
 * scale. */
static inline __attribute__((always_inline)) void kq_scores_tile(const int bits, const int NT,
                                                                 const al_attn_shape *s, const al_kvq *kq,
                                                                 const al_decode_view *v, int g, int pg, int hi0,
                                                                 const float *Q, int ldq, int j0, int n, float *S,
                                                                 int lds, float *qpad, float *qs, float *qsum, int P) {
    const int N = kq->group, dk = s->dk, dk2 = v->dk2;
    const int ks = (int)(v->k_off + (size_t)g * v->k_group), P0 = kq_padded(kq, ks, dk);
    for (int t = 0; t < NT; t++) { /* each head's query in padded order; value cells' sums */
        const int h = g * pg + hi0 + t;
        const float *qh = Q + (size_t)(hi0 + t) * ldq;
        const int rg[2][2] = {{ks, dk}, {(int)(v->k2_off + (size_t)h * dk2), dk2}};
        kq_pad_query(kq, rg, qh, dk, qpad + (size_t)t * P, qs + (size_t)t * P, qsum + (size_t)t * P);
    }
    const int vs = (int)(v->v_off + (size_t)g * v->v_group), dv2 = v->dv2;
    for (int jb = j0; jb < j0 + n; jb += N) {
        const size_t blk = (size_t)jb / N;
        float bias[KQ_TILE] = {0};
        float *Sb = S + (size_t)hi0 * lds + (jb - j0);
        /* Each head's cells of a block are short runs a cache row apart, a
         * pattern the hardware prefetchers follow late: ask for the keys
         * two blocks ahead, and for this block's values, which the values
         * pass reads next (measured: int4 MHA 12 x 64 at 4096 positions,
         * two threads, 1.1-1.25x faster in alternated runs). */
        if (jb + 2 * N < j0 + n) {
            kq_prefetch_runs(kq, blk + 2, ks, dk);
            for (int t = 0; t < NT && dk2 > 0; t++)
                kq_prefetch_runs(kq, blk + 2, (int)(v->k2_off + (size_t)(g * pg + hi0 + t) * dk2), dk2);
        }
        kq_prefetch_runs(kq, blk, vs, s->dv);
        for (int t = 0; t < NT && dv2 > 0; t++)
            kq_prefetch_runs(kq, blk, (int)(v->v2_off + (size_t)(g * pg + hi0 + t) * dv2), dv2);
        kq_scale_query(NT, kq, blk, ks, dk, qpad, qs, P, 0, bias);
        for (int t = 0; t < NT && dk2 > 0; t++)
            kq_scale_query(1, kq, blk, (int)(v->k2_off + (size_t)(g * pg + hi0 + t) * dk2), dk2, qpad + (size_t)t * P,
                           qs + (size_t)t * P, P, P0, bias + t);
        for (int t = 0; t < NT; t++)
            for (int j = 0; j < N; j++) Sb[(size_t)t * lds + j] = bias[t];
        kq_score_range(bits, NT, kq, ks, dk, jb, N, qpad, qs, qsum, P, 0, Sb, lds);
        for (int t = 0; t < NT && dk2 > 0; t++)
            kq_score_range(bits, 1, kq, (int)(v->k2_off + (size_t)(g * pg + hi0 + t) * dk2), dk2, jb, N,
                           qpad + (size_t)t * P, qs + (size_t)t * P, qsum + (size_t)t * P, P, P0,
                           Sb + (size_t)t * lds, lds);
        for (int t = 0; t < NT; t++)
            for (int j = 0; j < N; j++) Sb[(size_t)t * lds + j] *= s->scale;
    }
}

/* the largest head tile for this bit width (at most 8 sums in registers in
 * kq_wsum_tile) whose padded arrays fit AL_KVQ_MAX_CELL */
static int kq_tile_max(int bits, int P) {
    int nt = bits == 2 ? 2 : KQ_TILE;
    while (nt > 1 && nt * P > AL_KVQ_MAX_CELL) nt--;
    return nt;
}

/* calls F(bits, nt, ...) with bits and nt as constants (nt <= KQ_TILE) */
#define KQ_DISPATCH(F, bits, nt, ...)                                                                                  \
    do {                                                                                                               \
        if (bits == 8) {                                                                                               \
            if (nt == 4) F(8, 4, __VA_ARGS__);                                                                         \
            else if (nt == 3) F(8, 3, __VA_ARGS__);                                                                    \
            else if (nt == 2) F(8, 2, __VA_ARGS__);                                                                    \
            else F(8, 1, __VA_ARGS__);                                                                                 \
        } else if (bits == 4) {                                                                                        \
            if (nt == 4) F(4, 4, __VA_ARGS__);                                                                         \
            else if (nt == 3) F(4, 3, __VA_ARGS__);                                                                    \
            else if (nt == 2) F(4, 2, __VA_ARGS__);                                                                    \
            else F(4, 1, __VA_ARGS__);                                                                                 \
        } else {                                                                                                       \
            if (nt == 2) F(2, 2, __VA_ARGS__);                                                                         \
            else F(2, 1, __VA_ARGS__);                                                                                 \
        }                                                                                                              \
    } while (0)

/* S[i][j - j0] = scale * (q_i . key_j) for heads i < pg of group g and
 * positions j0 <= j < j0 + n (whole blocks of the quantised part); raw
 * scores, the caller applies the score function. Heads in tiles. */
void KSFX(al_kvq_scores)(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg,
                         const float *Q, int ldq, int j0, int n, float *S, int lds) {
    float qpad[AL_KVQ_MAX_CELL], qs[AL_KVQ_MAX_CELL], qsum[AL_KVQ_MAX_CELL];
    const int P = kq_padded(kq, (int)(v->k_off + (size_t)g * v->k_group), s->dk) + kq_padded(kq, (int)v->k2_off, v->dk2);
    const int tmax = kq_tile_max(kq->bits, P);
    for (int i0 = 0; i0 < pg; i0 += tmax) {
        const int nt = pg - i0 < tmax ? pg - i0 : tmax;
        KQ_DISPATCH(kq_scores_tile, kq->bits, nt, s, kq, v, g, pg, i0, Q, ldq, j0, n, S, lds, qpad, qs, qsum, P);
    }
}

/* One block's value parts of range [start, start + width) for tile heads
 * (weights w[t] at w + t ldw, psum[t] their sums), into opad (head t at
 * opad + t P, from padded offset p0) and zacc (value cells' zero-point
 * sums at each cell's first padded channel): value cells through the
 * weights times the tokens' scales (ws), key cells (per channel, MLA's
 * latent) summed raw into kacc, then scaled per channel. */
static inline __attribute__((always_inline)) void kq_value_cells(const int bits, const int NT, const al_kvq *kq,
                                                                 int start, int width, int jb, const float *w,
                                                                 int ldw, const float *psum, float *opad,
                                                                 float *zacc, float *kacc, int P, int p0) {
    const int N = kq->group;
    float ws[KQ_TILE][256];
    int p = p0;
    KQ_FOR_RANGE(kq, start, width, ci) {
        const al_kvq_cell *c = &kq->cells[ci];
        if (c->kind == AL_KV_SEG_KEY) { /* read as a value: then this block's scales */
            const uint16_t *sz = kq->kscale + 2 * (((size_t)jb / N) * kq->nkey + c->sidx);
            for (int t = 0; t < NT; t++) memset(kacc + (size_t)t * P, 0, sizeof(float) * (size_t)c->pw);
            const uint8_t *run = kq->codes + al_kvq_run_off(kq, (size_t)jb / N, c);
            if (c->bm) kq_key_wsum(bits, NT, run, N, N, c->L, w, ldw, kacc, P);
            else kq_wsum_tile(bits, NT, run, c->L, c->L, w, ldw, N, kacc, P);
            int e = 0;
            for (; e + AL_VW <= c->w; e += AL_VW) {
                vf sc, ze;
                kq_sz(sz + 2 * e, &sc, &ze);
                for (int t = 0; t < NT; t++) {
                    float *o = opad + (size_t)t * P + p + e;
                    V_STORE(o, V_FMA(sc, V_LOAD(kacc + (size_t)t * P + e), V_FMA(ze, V_SET1(psum[t]), V_LOAD(o))));
                }
            }
            for (int t = 0; t < NT; t++)
                for (int f = e; f < c->w; f++)
                    opad[(size_t)t * P + p + f] +=
                        kq_f16(sz[2 * f]) * kacc[(size_t)t * P + f] + kq_f16(sz[2 * f + 1]) * psum[t];
        } else { /* per token: weights times the tokens' scales */
            vf zs[KQ_TILE];
            for (int t = 0; t < NT; t++) zs[t] = V_ZERO();
            for (int j = 0; j < N; j += AL_VW) { /* AL_VW tokens' scales at a time (N <= 256: ws holds them) */
                const int nb = N - j < AL_VW ? N - j : AL_VW;
                vf sc, ze;
                kq_vsz(kq, c->sidx, jb + j, nb, &sc, &ze);
                for (int t = 0; t < NT; t++) {
                    const vf wv = v_loadn(w + (size_t)t * ldw + j, nb);
                    V_STORE(ws[t] + j, V_MUL(wv, sc));
                    zs[t] = V_FMA(wv, ze, zs[t]);
                }
            }
            for (int t = 0; t < NT; t++) zacc[(size_t)t * P + p] += V_HSUM(zs[t]);
            kq_wsum_tile(bits, NT, kq->codes + al_kvq_run_off(kq, (size_t)jb / N, c), c->L, c->L, ws[0], 256, N,
                         opad + p, P);
        }
        p += c->pw;
    }
}

/* P[i][0 .. dv + dv2) for tile heads hi0 .. hi0 + NT - 1 of group g: the
 * shared value range once per tile, each head's own range (dv2) with a
 * tile of one. */
static inline __attribute__((always_inline)) void kq_values_tile(const int bits, const int NT,
                                                                 const al_attn_shape *s, const al_kvq *kq,
                                                                 const al_decode_view *v, int g, int pg, int hi0,
                                                                 int j0, int n, const float *S, int lds, float *Pout,
                                                                 int ldp, float *opad, float *kacc, float *zacc,
                                                                 int P) {
    const int N = kq->group, dv = s->dv, dv2 = v->dv2;
    const int vs = (int)(v->v_off + (size_t)g * v->v_group), P0 = kq_padded(kq, vs, dv);
    memset(opad, 0, sizeof(float) * (size_t)NT * P);
    memset(zacc, 0, sizeof(float) * (size_t)NT * P);
    for (int jb = j0; jb < j0 + n; jb += N) {
        const float *w = S + (size_t)hi0 * lds + (jb - j0);
        float psum[KQ_TILE];
        for (int t = 0; t < NT; t++) {
            vf a = V_ZERO();
            for (int j = 0; j < N; j += AL_VW) a = V_ADD(a, v_loadn(w + (size_t)t * lds + j, N - j));
            psum[t] = V_HSUM(a);
        }
        kq_value_cells(bits, NT, kq, vs, dv, jb, w, lds, psum, opad, zacc, kacc, P, 0);
        for (int t = 0; t < NT && dv2 > 0; t++)
            kq_value_cells(bits, 1, kq, (int)(v->v2_off + (size_t)(g * pg + hi0 + t) * dv2), dv2, jb,
                           w + (size_t)t * lds, lds, psum + t, opad + (size_t)t * P, zacc + (size_t)t * P,
                           kacc + (size_t)t * P, P, P0);
    }
    for (int t = 0; t < NT; t++) {
        const int h = g * pg + hi0 + t;
        const int rg[2][2] = {{vs, dv}, {(int)(v->v2_off + (size_t)h * dv2), dv2}};
        kq_write_out(kq, rg, dv, opad + (size_t)t * P, zacc + (size_t)t * P, Pout + (size_t)(hi0 + t) * ldp);
    }
}

/* P[i][0 .. dv + dv2) = sum_j S[i][j - j0] value_j of head i, the weights
 * S already applied by the score function. Heads in tiles. */
void KSFX(al_kvq_values)(const al_attn_shape *s, const al_kvq *kq, const al_decode_view *v, int g, int pg, int j0,
                         int n, const float *S, int lds, float *P, int ldp) {
    float opad[AL_KVQ_MAX_CELL], kacc[AL_KVQ_MAX_CELL], zacc[AL_KVQ_MAX_CELL];
    const int PP = kq_padded(kq, (int)(v->v_off + (size_t)g * v->v_group), s->dv) + kq_padded(kq, (int)v->v2_off, v->dv2);
    const int tmax = kq_tile_max(kq->bits, PP);
    for (int i0 = 0; i0 < pg; i0 += tmax) {
        const int nt = pg - i0 < tmax ? pg - i0 : tmax;
        KQ_DISPATCH(kq_values_tile, kq->bits, nt, s, kq, v, g, pg, i0, j0, n, S, lds, P, ldp, opad, kacc, zacc, PP);
    }
}
#else

/* ---- the plain kernels (generic level) ---- */

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
        int p;
        kq_pad_query(kq, rg, qh, dk, qpad, qs, qsum);
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
                float a = bias;
                p = 0;
                KQ_FOR_CELLS(kq, rg, r, ci) {
                    const al_kvq_cell *c = &kq->cells[ci];
                    if (c->kind == AL_KV_SEG_KEY) {
                        a += kq_dot(bits, qs + p, kq->codes + al_kvq_byte_off(kq, j, c, 0), c->bm ? (size_t)N : 1, c->L);
                    } else {
                        const uint16_t *sz = kq->vscale + al_kvq_vsz_off(kq, j, c->sidx);
                        a += kq_f16(sz[0]) * kq_dot(bits, qpad + p, kq->codes + al_kvq_byte_off(kq, j, c, 0), 1, c->L) +
                             kq_f16(sz[1]) * qsum[p];
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
            float psum = 0.0f;
            for (int j = 0; j < N; j++) psum += w[j];
            p = 0;
            KQ_FOR_CELLS(kq, rg, r, ci) { /* each cell over the block's positions, sums in registers */
                const al_kvq_cell *c = &kq->cells[ci];
                if (c->kind == AL_KV_SEG_KEY) { /* read as a value: then this block's scales */
                    const uint16_t *sz = kq->kscale + 2 * (blk * kq->nkey + c->sidx);
                    for (int e = 0; e < c->pw; e++) kacc[e] = 0.0f;
                    kq_wsum(bits, kq->codes + al_kvq_run_off(kq, blk, c), c->bm ? 1 : (size_t)c->L,
                            c->bm ? (size_t)N : 1, c->L, w, N, kacc);
                    for (int e = 0; e < c->w; e++)
                        opad[p + e] += kq_f16(sz[2 * e]) * kacc[e] + kq_f16(sz[2 * e + 1]) * psum;
                } else { /* per token: weights times the tokens' scales */
                    for (int j = 0; j < N; j++) {
                        const uint16_t *sz = kq->vscale + al_kvq_vsz_off(kq, jb + j, c->sidx);
                        ws[j] = w[j] * kq_f16(sz[0]);
                        zacc[p] += w[j] * kq_f16(sz[1]);
                    }
                    kq_wsum(bits, kq->codes + al_kvq_run_off(kq, blk, c), (size_t)c->L, 1, c->L, ws, N, opad + p);
                }
                p += c->pw;
            }
        }
        kq_write_out(kq, rg, dv, opad, zacc, P + (size_t)i * ldp);
    }
}
#endif
#undef KQ_FOR_CELLS
#undef KQ_FOR_RANGE
#undef KQ_DISPATCH
