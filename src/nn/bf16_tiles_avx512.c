/*
 * bf16_tiles_avx512.c: bf16_tiles.c's packer in AVX-512 (the amx engine
 * runs on CPUs that all have it): the same tiles, bit for bit (rounding to
 * nearest even in integer arithmetic, NaN made quiet, denormals kept: what
 * al_bf16_round_bits does, which vcvtneps2bf16 would not do for denormals).
 *
 * A tile is made as 16 vectors of 16 32-bit words, one word per pair of
 * neighbouring k: for line runs (cs 1) vector c holds line c's 16 pairs,
 * which is the rows form (A) as it is and the pairs form (B) transposed;
 * for runs of lines (rs 1) vector p holds pair p of the 16 lines, which is
 * the pairs form as it is and the rows form transposed. Compiled for
 * AVX-512 by the target pragma; called only where core/cpu.h's set in use
 * has it.
 */
#include <immintrin.h>
#include <string.h>

#include "precision_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw")

/* 16 floats rounded to bf16 (al_bf16_round_bits), each in the top half of
 * its 32-bit word, the bottom half zero. */
static inline __m512i round16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                  _mm512_set1_epi32(0x7F800000));
    const __m512i quiet = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
    return _mm512_and_si512(_mm512_mask_blend_epi32(nan, rounded, quiet), top);
}

/* The 16 words of one line's 32 k (n of them real, the rest zero), read
 * from x (fp32, rounded) or, when not NULL, xb (BF16). */
static inline __m512i line_words(const float *x, const uint16_t *xb, int n) {
    if (xb) return _mm512_maskz_loadu_epi16(n >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << n) - 1), xb);
    const __mmask16 m0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1),
                    m1 = n >= 32 ? (__mmask16)0xFFFF : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
    const __m512i lo = round16(_mm512_maskz_loadu_ps(m0, x)), hi = round16(_mm512_maskz_loadu_ps(m1, x + 16));
    /* k = 2q in the bottom half of word q, k = 2q + 1 in its top half */
    const __m512i idx_even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i idx_odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i even = _mm512_permutex2var_epi32(lo, idx_even, hi), odd = _mm512_permutex2var_epi32(lo, idx_odd, hi);
    return _mm512_or_si512(_mm512_srli_epi32(even, 16), odd);
}

/* The 16 words of pair (k, k + 1) over 16 lines (`lines` real) from two
 * runs of lines (k1: NULL when k + 1 is past K). */
static inline __m512i pair_words(const float *k0f, const float *k1f, const uint16_t *k0b, const uint16_t *k1b,
                                 int lines) {
    const __mmask16 m = lines >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << lines) - 1);
    if (k0b) {
        const __m512i e = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, k0b)));
        const __m512i o =
            k1b ? _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, k1b))) : _mm512_setzero_si512();
        return _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
    }
    const __m512i e = round16(_mm512_maskz_loadu_ps(m, k0f));
    const __m512i o = k1f ? round16(_mm512_maskz_loadu_ps(m, k1f)) : _mm512_setzero_si512();
    return _mm512_or_si512(_mm512_srli_epi32(e, 16), o);
}

/* r[0..15] transposed as a 16 x 16 matrix of 32-bit words. */
static void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) { /* 128-bit blocks: rows i, 4 + i, 8 + i, 12 + i */
        t[i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xDD);
        r[4 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0xDD);
    }
}

void al_bf16_tiles_pack_tile_avx512(uint16_t *tile, int pairs, const float *X, const uint16_t *Xbf, size_t rs,
                                    size_t cs, int l0, int lines, int K, int s) {
    const int line_runs = cs == 1;
    const int k0 = s * AL_TILE_K, kn = K - k0 < AL_TILE_K ? K - k0 : AL_TILE_K;
    __m512i v[16];
    for (int q = 0; q < 16; q++) {
        if (line_runs) { /* v[q]: line q's pairs */
            const size_t at = (size_t)(l0 + q) * rs + (size_t)k0;
            v[q] = q < lines ? line_words(X ? X + at : NULL, Xbf ? Xbf + at : NULL, kn) : _mm512_setzero_si512();
        } else { /* v[q]: pair q of the lines */
            const int k = k0 + 2 * q;
            if (k >= K) {
                v[q] = _mm512_setzero_si512();
                continue;
            }
            const size_t a0 = (size_t)k * cs + (size_t)l0, a1 = a0 + cs;
            const int has1 = k + 1 < K;
            v[q] = pair_words(X ? X + a0 : NULL, X && has1 ? X + a1 : NULL, Xbf ? Xbf + a0 : NULL,
                              Xbf && has1 ? Xbf + a1 : NULL, lines);
        }
    }
    /* line runs give the rows form; runs of lines give the pairs form */
    if (line_runs == pairs) transpose16(v);
    for (int q = 0; q < 16; q++) _mm512_storeu_si512((void *)(tile + q * 32), v[q]);
}

#pragma GCC pop_options
