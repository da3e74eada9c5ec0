/*
 * bf16_tiles_pack_tile.h: the body of one tile of the amx engine's packer
 * (bf16_tiles_avx512.c includes it once per instruction set, with TILE_FN
 * the function's name and LINE_WORDS / PAIR_WORDS the set's conversions:
 * the same tiles, bit for bit, whichever). A tile is made as 16 vectors of
 * 16 32-bit words, one word per pair of neighbouring k: for line runs (cs 1)
 * vector q holds line q's 16 pairs, which is the rows form (A) as it is and
 * the pairs form (B) transposed; for runs of lines (rs 1) vector q holds
 * pair q of the 16 lines, which is the pairs form as it is and the rows
 * form transposed.
 */
void TILE_FN(uint16_t *tile, int pairs, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int l0, int lines,
             int K, int s) {
    const int line_runs = cs == 1;
    const int k0 = s * AL_TILE_K, kn = K - k0 < AL_TILE_K ? K - k0 : AL_TILE_K;
    __m512i v[16];
    for (int q = 0; q < 16; q++) {
        if (line_runs) { /* v[q]: line q's pairs */
            const size_t at = (size_t)(l0 + q) * rs + (size_t)k0;
            v[q] = q < lines ? LINE_WORDS(X ? X + at : NULL, Xbf ? Xbf + at : NULL, kn) : _mm512_setzero_si512();
        } else { /* v[q]: pair q of the lines */
            const int k = k0 + 2 * q;
            if (k >= K) {
                v[q] = _mm512_setzero_si512();
                continue;
            }
            const size_t a0 = (size_t)k * cs + (size_t)l0, a1 = a0 + cs;
            const int has1 = k + 1 < K;
            v[q] = PAIR_WORDS(X ? X + a0 : NULL, X && has1 ? X + a1 : NULL, Xbf ? Xbf + a0 : NULL,
                              Xbf && has1 ? Xbf + a1 : NULL, lines);
        }
    }
    /* line runs give the rows form; runs of lines give the pairs form */
    if (line_runs == pairs) transpose16(v);
    for (int q = 0; q < 16; q++) _mm512_storeu_si512((void *)(tile + q * 32), v[q]);
}

