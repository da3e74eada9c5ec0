/*
 * unicode.h: the Unicode the tokenizers need, with no library: UTF-8 decoding
 * and encoding, general-category tests (letter, number, White_Space) and the
 * NFC normalization form.
 *
 * Data: generated tables in unicode_tables.c (tools/gen_unicode_tables.py,
 * from the Unicode Character Database of Debian's unicode-data; al_uc_version
 * names the Unicode version): one property byte per code point in a two-stage
 * table (stage 1: which 256-byte block holds the 256 code points of cp >> 8;
 * stage 2: the distinct blocks), whose low 5 bits are the general category
 * (al_uc_gc, the order of AL_UC_CATEGORIES) and whose high bits are the binary
 * properties AL_UC_WHITE_SPACE, AL_UC_ALPHABETIC, AL_UC_JOIN_CONTROL; the
 * case-fold orbits (code point -> next code point with the same simple case
 * folding, sorted by code point); combining-class runs, canonical
 * decompositions sorted by code point and primary composites sorted by
 * (first, second). Hangul syllables are composed and decomposed
 * algorithmically (Unicode 3.12), not from the tables.
 */
#ifndef AL_TOK_UNICODE_H
#define AL_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* The general categories, in the order of the property byte's low 5 bits
 * (tools/gen_unicode_tables.py writes them in this order, as al_uc_gc_names). */
#define AL_UC_CATEGORIES(X) \
    X(Lu) X(Ll) X(Lt) X(Lm) X(Lo) X(Mn) X(Mc) X(Me) X(Nd) X(Nl) X(No) X(Pc) X(Pd) X(Ps) X(Pe) \
    X(Pi) X(Pf) X(Po) X(Sm) X(Sc) X(Sk) X(So) X(Zs) X(Zl) X(Zp) X(Cc) X(Cf) X(Cs) X(Co) X(Cn)

typedef enum {
#define AL_UC_GC_ENUM(name) AL_UC_##name,
    AL_UC_CATEGORIES(AL_UC_GC_ENUM)
#undef AL_UC_GC_ENUM
    AL_UC_GC_COUNT
} al_uc_category;

/* Category groups as masks over (1u << category). */
#define AL_UC_MASK(c) (1u << AL_UC_##c)
#define AL_UC_L_MASK (AL_UC_MASK(Lu) | AL_UC_MASK(Ll) | AL_UC_MASK(Lt) | AL_UC_MASK(Lm) | AL_UC_MASK(Lo))
#define AL_UC_M_MASK (AL_UC_MASK(Mn) | AL_UC_MASK(Mc) | AL_UC_MASK(Me))
#define AL_UC_N_MASK (AL_UC_MASK(Nd) | AL_UC_MASK(Nl) | AL_UC_MASK(No))

/* The property byte's high bits. */
enum { AL_UC_GC_BITS = 0x1F, AL_UC_WHITE_SPACE = 0x20, AL_UC_ALPHABETIC = 0x40, AL_UC_JOIN_CONTROL = 0x80 };

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
extern const char *const al_uc_gc_names[AL_UC_GC_COUNT];
extern const uint16_t al_uc_stage1[0x1100];
extern const uint8_t al_uc_stage2[][256];
extern const uint32_t al_uc_fold_orbit[][2];
extern const int al_uc_fold_orbit_n;
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

/* The property byte of cp (0 <= cp <= 0x10FFFF; larger values read as
 * unassigned): category in AL_UC_GC_BITS, binary properties above. */
static inline unsigned al_uc_props(uint32_t cp) {
    if (cp > 0x10FFFF) return AL_UC_Cn;
    return al_uc_stage2[al_uc_stage1[cp >> 8]][cp & 0xFF];
}
static inline al_uc_category al_uc_gc(uint32_t cp) { return (al_uc_category)(al_uc_props(cp) & AL_UC_GC_BITS); }
/* The next code point with the same simple case folding as cp (itself when
 * none: the orbit of cp is cp, al_uc_fold_next(cp), ... back to cp). */
uint32_t al_uc_fold_next(uint32_t cp);

int al_uc_is_letter(uint32_t cp);  /* \p{L} */
int al_uc_is_number(uint32_t cp);  /* \p{N} */
int al_uc_is_space(uint32_t cp);   /* White_Space, Oniguruma's \s */
int al_uc_ccc_of(uint32_t cp);     /* canonical combining class, 0 for starters */

/* NFC of the well-formed UTF-8 text s[0..n): a malloc'd, NUL-terminated
 * string in *out (length in *out_len). Returns 0, or -1 when out of memory.
 * Text that is already NFC comes back unchanged (as a copy). */
int al_uc_nfc(const char *s, size_t n, char **out, size_t *out_len);

#endif
