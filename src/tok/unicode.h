/*
 * unicode.h: the Unicode the tokenizers need, with no library: UTF-8 decoding
 * and encoding, general-category tests (letter, number, White_Space) and the
 * NFC normalization form.
 *
 * Data: generated tables in unicode_tables.c (tools/gen_unicode_tables.py,
 * from Python's unicodedata; al_uc_version names the Unicode version): sorted
 * [first, last] code point ranges searched by bisection, combining-class runs,
 * canonical decompositions sorted by code point and primary composites sorted
 * by (first, second). Hangul syllables are composed and decomposed
 * algorithmically (Unicode 3.12), not from the tables.
 */
#ifndef AL_TOK_UNICODE_H
#define AL_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct al_uc_ccc_range {
    uint32_t first, last;
    uint8_t ccc;
} al_uc_ccc_range;

typedef struct al_uc_decomp {
    uint32_t cp, a, b; /* cp -> a b (b == 0: a singleton decomposition) */
} al_uc_decomp;

typedef struct al_uc_compose {
    uint32_t a, b, cp; /* a b -> cp */
} al_uc_compose;

extern const char al_uc_version[];
extern const uint32_t al_uc_letter[][2];
extern const int al_uc_letter_n;
extern const uint32_t al_uc_number[][2];
extern const int al_uc_number_n;
extern const uint32_t al_uc_space[][2];
extern const int al_uc_space_n;
extern const al_uc_ccc_range al_uc_ccc[];
extern const int al_uc_ccc_n;
extern const al_uc_decomp al_uc_decomps[];
extern const int al_uc_decomps_n;
extern const al_uc_compose al_uc_composes[];
extern const int al_uc_composes_n;

/* Decodes one UTF-8 sequence at s[0..n): returns its length (1..4) and sets
 * *cp, or 0 if the bytes there are not well-formed UTF-8 (overlong forms,
 * surrogates and values above U+10FFFF are not well-formed). */
int al_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out (4 bytes of room); returns the length. */
int al_utf8_encode(uint32_t cp, unsigned char *out);
/* Offset of the first byte that is not well-formed UTF-8, or n if all is. */
size_t al_utf8_check(const unsigned char *s, size_t n);

int al_uc_is_letter(uint32_t cp);  /* \p{L} */
int al_uc_is_number(uint32_t cp);  /* \p{N} */
int al_uc_is_space(uint32_t cp);   /* White_Space, Oniguruma's \s */
int al_uc_ccc_of(uint32_t cp);     /* canonical combining class, 0 for starters */

/* NFC of the well-formed UTF-8 text s[0..n): a malloc'd, NUL-terminated
 * string in *out (length in *out_len). Returns 0, or -1 when out of memory.
 * Text that is already NFC comes back unchanged (as a copy). */
int al_uc_nfc(const char *s, size_t n, char **out, size_t *out_len);

#endif
