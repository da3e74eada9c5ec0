/*
 * pretok.c: the fixed data of the pre-tokenizers: GPT-2's split pattern
 * (what ByteLevel with use_regex runs, through regex.c) and GPT-2's byte <->
 * character map, the alphabet of byte-level BPE vocabularies.
 */
#include <stddef.h>

#include "tok_internal.h"

const char tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves; the other 68 bytes, in order, for
 * U+0100, U+0101, ... */
static int printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t tok_byte_to_cp(unsigned char b) {
    if (printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;               /* 33 control bytes and the space */
    if (b >= 0x7F && b <= 0xA0) return 0x121 + (b - 0x7F); /* DEL, C1 controls, NBSP: 34 */
    return 0x143;                                   /* 0xAD, the soft hyphen */
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return printable(cp) ? (int)cp : -1;
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(0x7F + cp - 0x121);
    return cp == 0x143 ? 0xAD : -1;
}
