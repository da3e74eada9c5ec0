/*
 * pretok.c: the pre-tokenizer regexes of the supported tokenizers as
 * hand-written matchers, and GPT-2's byte <-> character map.
 *
 * Each matcher answers "how long is the regex's match starting here" over an
 * array of code points, with the semantics of Oniguruma (what Hugging Face
 * tokenizers runs): alternatives are tried in order and the first that
 * matches wins (leftmost-first, not longest), quantifiers are greedy and
 * backtrack. \s is White_Space, \p{L} and \p{N} the general categories
 * (unicode.h). The three patterns, as tokenizer.json spells them:
 *
 *   GPT-2 (and ByteLevel's use_regex):
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama-3 (Qwen2: the same with \p{N} for \p{N}{1,3}):
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *      ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Backtracking worked out once: `\s+(?!\S)` over a whitespace run ending at k
 * matches the whole run when the run ends the text, else the run minus its
 * last character (which then starts the next piece), and fails on a run of one
 * followed by a non-space; `\s*[\r\n]+` matches up to and including the last
 * CR/LF of the whitespace run, and fails if the run has none. Every character
 * is matched by some alternative of each pattern, so splitting never leaves
 * unmatched text (the splitter handles it anyway).
 */
#include <stddef.h>

#include "tok_internal.h"
#include "unicode.h"

static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char *tok_pattern_regex(tok_pattern p) {
    switch (p) {
    case PAT_GPT2: return GPT2_RE;
    case PAT_LLAMA3: return LLAMA3_RE;
    case PAT_QWEN2: return QWEN2_RE;
    }
    return NULL;
}

#define L(c) al_uc_is_letter(c)
#define N(c) al_uc_is_number(c)
#define S(c) al_uc_is_space(c)
/* [^\s\p{L}\p{N}] */
static int other(uint32_t c) { return !S(c) && !L(c) && !N(c); }
static int crlf(uint32_t c) { return c == '\r' || c == '\n'; }

/* Case-insensitive letter test as Oniguruma folds: the long s (U+017F)
 * folds to 's'. */
static int ci(uint32_t c, char lower) {
    if (c == (uint32_t)lower || c == (uint32_t)(lower - 32)) return 1;
    return lower == 's' && c == 0x17F;
}

/* 's 't 're 've 'm 'll 'd at i (case-insensitively if fold): the length. */
static size_t contraction(const uint32_t *p, size_t n, size_t i, int fold) {
    if (p[i] != '\'' || i + 1 >= n) return 0;
    uint32_t a = p[i + 1], b = i + 2 < n ? p[i + 2] : 0;
#define EQ(c, l) (fold ? ci((c), (l)) : (c) == (uint32_t)(l))
    if (EQ(a, 's') || EQ(a, 't')) return 2;
    if (EQ(a, 'r') && EQ(b, 'e')) return 3;
    if (EQ(a, 'v') && EQ(b, 'e')) return 3;
    if (EQ(a, 'm')) return 2;
    if (EQ(a, 'l') && EQ(b, 'l')) return 3;
    if (EQ(a, 'd')) return 2;
#undef EQ
    return 0;
}

/* ` ?X+` where X is a class: optional U+0020, then one or more of the class. */
static size_t space_then_run(const uint32_t *p, size_t n, size_t i, int (*cls)(uint32_t)) {
    size_t j = i;
    if (p[j] == ' ' && j + 1 < n && cls(p[j + 1])) j++;
    if (!cls(p[j])) return 0;
    while (j < n && cls(p[j])) j++;
    return j - i;
}

static int letter(uint32_t c) { return L(c); }
static int number(uint32_t c) { return N(c); }

/* `\s+(?!\S)` then `\s+` (the last two alternatives of every pattern). */
static size_t trailing_space(const uint32_t *p, size_t n, size_t i) {
    if (!S(p[i])) return 0;
    size_t k = i;
    while (k < n && S(p[k])) k++;
    if (k == n || k - i >= 2) return k == n ? k - i : k - i - 1;
    return k - i; /* a single space before a non-space: `\s+` */
}

static size_t match_gpt2(const uint32_t *p, size_t n, size_t i) {
    size_t m;
    if ((m = contraction(p, n, i, 0))) return m;
    if ((m = space_then_run(p, n, i, letter))) return m;
    if ((m = space_then_run(p, n, i, number))) return m;
    if ((m = space_then_run(p, n, i, other))) return m;
    return trailing_space(p, n, i);
}

static size_t match_llama3(const uint32_t *p, size_t n, size_t i, int max_digits) {
    size_t m, j;
    if ((m = contraction(p, n, i, 1))) return m;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    j = i;
    if (!crlf(p[j]) && !L(p[j]) && !N(p[j]) && j + 1 < n && L(p[j + 1])) j++;
    if (L(p[j])) {
        while (j < n && L(p[j])) j++;
        return j - i;
    }
    /* \p{N}{1,3} or \p{N} */
    if (N(p[i])) {
        for (j = i; j < n && (int)(j - i) < max_digits && N(p[j]); j++) {}
        return j - i;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if ((m = space_then_run(p, n, i, other))) {
        j = i + m;
        while (j < n && crlf(p[j])) j++;
        return j - i;
    }
    /* \s*[\r\n]+ */
    if (S(p[i])) {
        size_t k = i, last = (size_t)-1;
        for (; k < n && S(p[k]); k++)
            if (crlf(p[k])) last = k;
        if (last != (size_t)-1) return last + 1 - i;
    }
    return trailing_space(p, n, i);
}

size_t tok_pattern_match(tok_pattern pattern, const uint32_t *cps, size_t n, size_t i) {
    if (i >= n) return 0;
    switch (pattern) {
    case PAT_GPT2: return match_gpt2(cps, n, i);
    case PAT_LLAMA3: return match_llama3(cps, n, i, 3);
    case PAT_QWEN2: return match_llama3(cps, n, i, 1);
    }
    return 0;
}

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
