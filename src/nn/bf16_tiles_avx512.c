/*
 * bf16_tiles_avx512.c: bf16_tiles.c's packer in AVX-512 (the amx engine
 * runs on CPUs that all have it), twice: rounding to nearest even in
 * integer arithmetic (NaN made quiet, denormals kept: what
 * al_bf16_round_bits does), and, where the CPU has AVX512-BF16, by its
 * vcvtne2ps2bf16 (below). The same tiles, bit for bit. The tile's body is
 * bf16_tiles_pack_tile.h, included once per set. Also al_bf16_round_run's
 * loops in both sets (a run of floats to bf16: the onednn engine's operands,
 * the weights' BF16 copies). Compiled for each set by the target pragmas;
 * called only where core/cpu.h's set in use has it.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
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

/* al_bf16_round_run by round16: 16 floats a step, the tail masked. */
void al_bf16_round_run_avx512(uint16_t *restrict dst, const float *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(round16(_mm512_loadu_ps(src + i)), 16)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, m,
                                          _mm512_srli_epi32(round16(_mm512_maskz_loadu_ps(m, src + i)), 16));
    }
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

#define TILE_FN al_bf16_tiles_pack_tile_avx512
#define LINE_WORDS line_words
#define PAIR_WORDS pair_words
#include "bf16_tiles_pack_tile.h"
#undef TILE_FN
#undef LINE_WORDS
#undef PAIR_WORDS

#pragma GCC pop_options

/* ---- with AVX512-BF16 ----
 * vcvtne2ps2bf16 rounds 32 floats to bf16 in one instruction, to nearest
 * even with NaN made quiet, as al_bf16_round_bits does, but it reads
 * denormal inputs as zero; a line or pair holding one (rare: activations and
 * gradients are normal numbers) is rounded as above instead. Measured on one
 * thread (1024 x 256 fp32 from L2, alternated runs): line runs packed
 * 1.28-1.35x as fast, runs of lines 1.05-1.08x (their two strided reads per
 * pair cost more than the rounding); docs/kernels.md. */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")

/* Lanes of u (fp32 bits) that are denormal: exponent zero, mantissa not. */
static inline __mmask16 denormal16(__m512i u) {
    return _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000)) &
           _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007FFFFF));
}

/* line_words by vcvtne2ps2bf16: bf16 k in the bottom half of word k/2 for
 * even k, the top half for odd k, which is the instruction's own order. */
static inline __m512i line_words_cvt(const float *x, const uint16_t *xb, int n) {
    if (xb) return line_words(NULL, xb, n);
    const __mmask16 m0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1),
                    m1 = n >= 32 ? (__mmask16)0xFFFF : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
    const __m512 lo = _mm512_maskz_loadu_ps(m0, x), hi = _mm512_maskz_loadu_ps(m1, x + 16);
    if (denormal16(_mm512_castps_si512(lo)) | denormal16(_mm512_castps_si512(hi))) return line_words(x, NULL, n);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* pair_words by vcvtne2ps2bf16: the two runs' 16 bf16 each, then
 * interleaved into words (run k in the bottom halves, k + 1 the top). */
static inline __m512i pair_words_cvt(const float *k0f, const float *k1f, const uint16_t *k0b, const uint16_t *k1b,
                                     int lines) {
    if (k0b) return pair_words(NULL, NULL, k0b, k1b, lines);
    const __mmask16 m = lines >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << lines) - 1);
    const __m512 e = _mm512_maskz_loadu_ps(m, k0f), o = k1f ? _mm512_maskz_loadu_ps(m, k1f) : _mm512_setzero_ps();
    if (denormal16(_mm512_castps_si512(e)) | denormal16(_mm512_castps_si512(o)))
        return pair_words(k0f, k1f, NULL, NULL, lines);
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(o, e); /* e's 16 bf16, then o's */
    /* 16-bit element 2c of the words: e's c; 2c + 1: o's c */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, both);
}

/* al_bf16_round_run by vcvtne2ps2bf16, 32 floats a step; a step holding
 * a denormal, and the tail, by round16. Against the loop gcc makes of the
 * plain one for x86-64-v3 (one thread, 256 K floats in L2): 2.2-2.5x as
 * fast; from memory the same speed (docs/kernels.md). */
void al_bf16_round_run_avx512bf16(uint16_t *restrict dst, const float *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        if (denormal16(_mm512_castps_si512(lo)) | denormal16(_mm512_castps_si512(hi)))
            al_bf16_round_run_avx512(dst + i, src + i, 32);
        else
            _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    al_bf16_round_run_avx512(dst + i, src + i, n - i);
}

/* al_bf16_round_run with the whole 64-byte lines of dst written by
 * streaming stores (past the caches: a destination far larger than they
 * are, read back only after other passes have evicted it, whose lines
 * would otherwise be read in before they are written). The head up to
 * dst's first 64-byte boundary and the tail by al_bf16_round_run_avx512bf16,
 * a line holding a denormal by the integer rounding; an sfence at the end, so the
 * values are visible to other threads once this returns. */
void al_bf16_round_stream_avx512bf16(uint16_t *restrict dst, const float *restrict src, size_t n) {
    size_t head = (size_t)(-(uintptr_t)dst & 63) / sizeof *dst; /* bf16 values before the first whole line */
    if (head > n) head = n;
    al_bf16_round_run_avx512bf16(dst, src, head);
    size_t i = head;
    for (; i + 32 <= n; i += 32) {
        const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        __m512i words = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        if (denormal16(_mm512_castps_si512(lo)) | denormal16(_mm512_castps_si512(hi))) {
            _Alignas(64) uint16_t line[32];
            al_bf16_round_run_avx512(line, src + i, 32);
            words = _mm512_load_si512(line);
        }
        _mm512_stream_si512((__m512i *)(dst + i), words);
    }
    al_bf16_round_run_avx512bf16(dst + i, src + i, n - i);
    _mm_sfence();
}

#define TILE_FN al_bf16_tiles_pack_tile_avx512bf16
#define LINE_WORDS line_words_cvt
#define PAIR_WORDS pair_words_cvt
#include "bf16_tiles_pack_tile.h"
#undef TILE_FN
#undef LINE_WORDS
#undef PAIR_WORDS

#pragma GCC pop_options
