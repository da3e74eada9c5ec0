/*
 * test_tok_regex.c: unit tests for the Split patterns' regex engine
 * (src/tok/regex.c) and the Unicode 15 property tables under it: the dialect
 * case by case (matches worked out by hand from Oniguruma's rules), the
 * patterns it refuses and their messages, the memoised backtracker against
 * the Pike VM on random patterns and texts (every search start, texts long
 * enough for the backtracker to hand over to the VM), and patterns that are
 * exponential for a plain backtracker, timed on long texts. The comparison
 * with an independent engine, Python's re, is tests/ref/test_tokenizer_regex.py.
 */
#include "test.h"
#include "tok/regex.h"
#include "tok/unicode.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

/* UTF-8 -> code points (at most cap), with byte offsets (offs[n] = len). */
static size_t to_cps(const char *s, uint32_t *cps, size_t *offs, size_t cap) {
    size_t n = 0, len = strlen(s);
    for (size_t i = 0; i < len && n < cap;) {
        int l = al_utf8_decode((const unsigned char *)s + i, len - i, &cps[n]);
        offs[n++] = i;
        i += (size_t)(l ? l : 1);
    }
    offs[n] = len;
    return n;
}

/* Every match of pattern in text as Hugging Face's Split finds them
 * (Oniguruma's find_iter: an empty match where the previous match ended is
 * skipped), joined by '|'; "ERR: why" if it does not compile. */
static void matches(const char *pattern, const char *text, char *out, size_t cap) {
    static uint32_t cps[4096];
    static size_t offs[4097];
    size_t n = to_cps(text, cps, offs, 4096), w = 0;
    char why[200];
    tok_regex *re = tok_regex_compile(pattern, strlen(pattern), 0, why, sizeof why);
    if (!re) {
        snprintf(out, cap, "ERR: %s", why);
        return;
    }
    tok_regex_ws *ws = tok_regex_ws_new(re, SIZE_MAX);
    CHECK(ws != NULL);
    out[0] = 0;
    size_t last_end = 0, prev = 0, s, e;
    int have = 0, k = 0;
    while (ws && last_end <= n && tok_regex_find(re, ws, cps, n, last_end, &s, &e)) {
        if (s == e && have && prev == e) {
            last_end++;
            continue;
        }
        w += (size_t)snprintf(out + w, cap - w, "%s%.*s", k++ ? "|" : "", (int)(offs[e] - offs[s]), text + offs[s]);
        last_end = prev = e;
        have = 1;
    }
    tok_regex_ws_free(ws);
    tok_regex_free(re);
}

static void test_dialect(void) {
    struct {
        const char *re, *text, *want;
    } cases[] = {
        {"a+", "caaab aa", "aaa|aa"},
        {"a+?", "aaa", "a|a|a"},
        {"a{2,3}", "aaaaaaa", "aaa|aaa"},
        {"a{2}", "aaaaa", "aa|aa"},
        {"a{,2}b", "aaab", "aab"},
        {"x{2,}", "xxxxx x", "xxxxx"},
        {"a{1,3}?", "aaaa", "a|a|a|a"},
        {"{", "a{b", "{"},
        {"a{x}", "a{x}", "a{x}"}, /* not an interval: literal braces */
        {"cat|category", "category", "cat"}, /* the first alternative that matches, not the longest */
        {"category|cat", "category cat", "category|cat"},
        {"(?i:abc)", "ABC aBc abc", "ABC|aBc|abc"},
        {"(?i)k", "kK\xE2\x84\xAA", "k|K|\xE2\x84\xAA"}, /* U+212A KELVIN SIGN folds to k */
        {"(?i)'s", "'S '\xC5\xBF", "'S|'\xC5\xBF"},       /* U+017F LONG S folds to s */
        {"a(?i)b|c", "aB C ac", "aB|ac"},                  /* an isolated option: a(?i:b|c) */
        {"\\s+(?!\\S)|\\s+", "a   b", "  | "},
        {"\\p{L}+", "h\xC3\xA9llo w\xC3\xB6rld \xE6\x9D\xB1\xE4\xBA\xAC", "h\xC3\xA9llo|w\xC3\xB6rld|\xE6\x9D\xB1\xE4\xBA\xAC"},
        {"\\p{Lu}\\p{Ll}+", "Hello World", "Hello|World"},
        {"\\p{Uppercase_Letter}\\p{lowercase letter}+", "Hello", "Hello"},
        {"[^\\s\\p{L}]+", "ab 12!? c", "12!?"},
        {"\\P{L}+", "ab 1c", " 1"},
        {"\\p{^N}+", "a1b", "a|b"},
        {"[a-c\\d]+", "abcd123e", "abc|123"},
        {"[\\-\\]\\\\]+", "a-]\\b", "-]\\"},
        {"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+", "x.foo [bar ^baz", ".foo|[bar|^baz"},
        {"\\x41\\x{1F600}\\u00e9", "A\xF0\x9F\x98\x80\xC3\xA9", "A\xF0\x9F\x98\x80\xC3\xA9"},
        {"^a|b$", "a\nab\nb", "a|a|b|b"},
        {"\\Aa|a\\z", "aaa", "a|a"},
        {"\\bfoo\\b", "foo foobar barfoo foo", "foo|foo"},
        {".+", "ab\ncd", "ab|cd"},
        {"(?m:.+)", "ab\ncd", "ab\ncd"},
        {"(?=a)", "bab", ""},
        {"a*", "baa", "|aa"},
        {"(a|ab)(c|bcd)(d*)", "abcd", "abcd"},
        {"(?<x>a)b(?#note)c", "abc", "abc"},
        {"\\d+", "12\xD9\xA3\xD9\xA4 \xEF\xBC\x95", "12\xD9\xA3\xD9\xA4|\xEF\xBC\x95"}, /* Nd of any script */
        {"\\w+", "a_b1 \xC3\xA9!", "a_b1|\xC3\xA9"},
        {"\\h+", "0xFFz", "0|FF"},
        {"(?i)[a-c]+", "ABCabcD", "ABCabc"},
        {"(?i)[^a]+", "AaBb", "Bb"}, /* the class gains A before it is negated */
        {"(?!ab)a", "abac", "a"},
        {"x*?y", "xxy", "xxy"},
        {"[\\p{L}\\p{M}]+", "na\xC3\xAFve e\xCC\x81t\xC3\xA9", "na\xC3\xAFve|e\xCC\x81t\xC3\xA9"},
        /* Unicode 15.0: Kawi digits are \p{N}, Cyrillic Extended-D modifier letters \p{L} */
        {"\\p{N}+", "x\xF0\x91\xBD\x90\xF0\x91\xBD\x99y", "\xF0\x91\xBD\x90\xF0\x91\xBD\x99"},
        {"\\p{L}+", "1\xF0\x9E\x80\xB0\xF0\x9E\x81\xAD.", "\xF0\x9E\x80\xB0\xF0\x9E\x81\xAD"},
        {"\\p{N}{1,3}", "1234567", "123|456|7"},
        {"", "ab", "||"},
    };
    char out[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        matches(cases[i].re, cases[i].text, out, sizeof out);
        CHECK_MSG(!strcmp(out, cases[i].want), "case %zu /%s/ on '%s': got '%s', want '%s'", i, cases[i].re,
                  cases[i].text, out, cases[i].want);
    }
}

static void test_refusals(void) {
    struct {
        const char *re, *why;
    } cases[] = {
        {"(a", "( without )"},
        {"a)", "unmatched )"},
        {"[ab", "[ without ]"},
        {"*a", "nothing to repeat"},
        {"(?<=a)b", "lookbehind"},
        {"(?<!a)b", "lookbehind"},
        {"(?>a)", "atomic"},
        {"a++", "possessive"},
        {"(a)\\1", "backreferences"},
        {"\\p{Foo}", "unsupported property \\p{Foo}"},
        {"\\p{L", "without }"},
        {"[[:alpha:]]", "POSIX"},
        {"[a[b]]", "nested"},
        {"[a&&b]", "intersection"},
        {"a{3,2}", "m < n"},
        {"a{1001}", "above 1000"},
        {"\\G", "unsupported escape \\G"},
        {"\\k<x>", "unsupported escape \\k"},
        {"(?x)a", "unsupported group option 'x'"},
        {"[z-a]", "empty range"},
        {"\\x{110000}", "hexadecimal"},
        {"(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
         "nested too deep"},
        {"(?:a{1000}){1000}", "instructions"},
        {"(a*)*b", "can match empty"},
        {"(?:a|(?=b))+", "can match empty"},
        {"(a?){2}", "can match empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[200] = "";
        tok_regex *re = tok_regex_compile(cases[i].re, strlen(cases[i].re), 0, why, sizeof why);
        CHECK_MSG(!re && strstr(why, cases[i].why), "/%s/: got '%s', want '%s'", cases[i].re, re ? "compiled" : why,
                  cases[i].why);
        tok_regex_free(re);
    }
    /* a literal (Split on a String) takes the text as it is */
    char why[200];
    tok_regex *re = tok_regex_compile("a+(", 3, 1, why, sizeof why);
    tok_regex_ws *ws = re ? tok_regex_ws_new(re, SIZE_MAX) : NULL;
    uint32_t cps[8];
    size_t offs[9], n = to_cps("aa+(a+(", cps, offs, 8), s = 0, e = 0;
    CHECK(ws && tok_regex_find(re, ws, cps, n, 0, &s, &e) && s == 1 && e == 4);
    CHECK(ws && tok_regex_find(re, ws, cps, n, 4, &s, &e) && s == 4 && e == 7);
    tok_regex_ws_free(ws);
    tok_regex_free(re);
}

/* ---- random patterns: the backtracker against the Pike VM ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static const char *const atoms[] = {"a", "b", " ", "\\s", "\\S", "\\p{L}", "\\p{N}", "[ab]", "[^a\\s]", ".", "1",
                                    "\xC3\xA9", "\\n", "(?i:A)", "^", "$", "\\b"};

/* Appends a random pattern of the dialect (depth-limited) to buf. */
static void gen_pattern(char *buf, size_t cap, int depth) {
    int parts = 1 + (int)rnd(3);
    for (int p = 0; p < parts; p++) {
        size_t w = strlen(buf);
        if (w + 40 >= cap) return;
        unsigned k = rnd(depth > 0 ? 10 : 7);
        if (k < 6) {
            strcat(buf, atoms[rnd(sizeof atoms / sizeof atoms[0])]);
        } else if (k < 9) {
            static const char *const open[] = {"(", "(?:", "(?!", "(?="};
            strcat(buf, open[rnd(k == 8 ? 4 : 2)]);
            gen_pattern(buf, cap, depth - 1);
            if (rnd(2)) {
                strcat(buf, "|");
                gen_pattern(buf, cap, depth - 1);
            }
            strcat(buf, ")");
        } else {
            gen_pattern(buf, cap, depth - 1);
            strcat(buf, "|");
        }
        static const char *const quant[] = {"", "", "*", "+", "?", "*?", "+?", "??", "{1,3}", "{2}", "{0,2}?"};
        const char *q = quant[rnd(sizeof quant / sizeof quant[0])];
        size_t l = strlen(buf);
        char last = l ? buf[l - 1] : 0;
        if (*q && last != '|' && last != '(' && last != ':' && last != '^' && last != '$' && last != 'b')
            strcat(buf, q);
    }
}

static void test_random(void) {
    static const char *const alphabet[] = {"a", "b", " ", "  ", "1", "\xC3\xA9", "\n", "A", "!", "\xE6\x9D\xB1"};
    static uint32_t cps[40000];
    static size_t offs[40001];
    static char text[160000];
    int compiled = 0, compared = 0;
    for (int iter = 0; iter < 400; iter++) {
        char pat[512] = "";
        gen_pattern(pat, sizeof pat, 3);
        char why[200];
        tok_regex *re = tok_regex_compile(pat, strlen(pat), 0, why, sizeof why);
        if (!re) continue; /* e.g. a quantifier after an anchor */
        compiled++;
        /* every third pattern: a workspace for 4 positions, so most searches end in the Pike VM */
        tok_regex_ws *ws = tok_regex_ws_new(re, iter % 3 == 1 ? 4 : SIZE_MAX);
        CHECK(ws != NULL);
        /* mostly short texts; some longer than the backtracker's window (16384 positions) */
        size_t want = iter % 50 == 0 ? 20000 : 1 + rnd(30);
        size_t tl = 0;
        text[0] = 0;
        while (tl < want * 2) {
            const char *a = alphabet[rnd(sizeof alphabet / sizeof alphabet[0])];
            size_t al = strlen(a);
            memcpy(text + tl, a, al + 1);
            tl += al;
        }
        size_t n = to_cps(text, cps, offs, 40000);
        size_t step = n > 1000 ? 997 : 1;
        for (size_t from = 0; ws && from <= n; from += step) {
            size_t s1 = 0, e1 = 0, s2 = 0, e2 = 0;
            int f1 = tok_regex_find(re, ws, cps, n, from, &s1, &e1);
            int f2 = tok_regex_find_pike(re, ws, cps, n, from, &s2, &e2);
            compared++;
            CHECK_MSG(f1 == f2 && (!f1 || (s1 == s2 && e1 == e2)),
                      "/%s/ from %zu of %zu: backtracker %d [%zu,%zu), Pike VM %d [%zu,%zu)", pat, from, n, f1, s1,
                      e1, f2, s2, e2);
        }
        tok_regex_ws_free(ws);
        tok_regex_free(re);
    }
    fprintf(stderr, "random: %d patterns compiled, %d searches compared\n", compiled, compared);
    CHECK(compiled > 200 && compared > 3000);
}

/* Patterns exponential for a plain backtracker finish in linear time. */
static void test_pathological(void) {
    static uint32_t cps[20001];
    const char *pats[] = {"(a|a)*b", "(a+)+b", "(a|aa)+c", "(?:a+)+(?!a)b", "(\\p{L}|a)*\\d", "((a|aa){1,10}){1,10}b"};
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        char why[200];
        tok_regex *re = tok_regex_compile(pats[i], strlen(pats[i]), 0, why, sizeof why);
        CHECK_MSG(re != NULL, "/%s/: %s", pats[i], why);
        if (!re) continue;
        tok_regex_ws *ws = tok_regex_ws_new(re, SIZE_MAX);
        size_t n = 20000;
        for (size_t k = 0; k < n; k++) cps[k] = 'a';
        clock_t t0 = clock();
        size_t s, e;
        int found = ws && tok_regex_find(re, ws, cps, n, 0, &s, &e);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        CHECK_MSG(!found && secs < 5.0, "/%s/ on 20000 a's: found %d in %.2f s", pats[i], found, secs);
        tok_regex_ws_free(ws);
        tok_regex_free(re);
    }
}

/* Searches that reach past the backtracker's window (16384 positions) are
 * finished by the Pike VM: long matches, a match far from the start. */
static void test_long_searches(void) {
    static uint32_t cps[40001];
    struct {
        const char *re;
        size_t n_a, want_s, want_e; /* text: n_a a's, then "  b" */
    } cases[] = {
        {"a+", 30000, 0, 30000},
        {"b", 30000, 30002, 30003},
        {"a*?b|a+ ", 30000, 0, 30001},
        {"\\s+(?!\\S)|\\s+|a{1,3}", 30000, 0, 3},
        {"(?:a|a)+\\s(?=\\s)", 30000, 0, 30001},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = cases[i].n_a + 3;
        for (size_t k = 0; k < cases[i].n_a; k++) cps[k] = 'a';
        cps[n - 3] = ' ', cps[n - 2] = ' ', cps[n - 1] = 'b';
        char why[200];
        tok_regex *re = tok_regex_compile(cases[i].re, strlen(cases[i].re), 0, why, sizeof why);
        tok_regex_ws *ws = re ? tok_regex_ws_new(re, SIZE_MAX) : NULL;
        size_t s = 0, e = 0, s2 = 0, e2 = 0;
        int f = ws && tok_regex_find(re, ws, cps, n, 0, &s, &e);
        int f2 = ws && tok_regex_find_pike(re, ws, cps, n, 0, &s2, &e2);
        CHECK_MSG(f && f2 && s == cases[i].want_s && e == cases[i].want_e && s2 == s && e2 == e,
                  "/%s/: [%zu,%zu) and the VM's [%zu,%zu), want [%zu,%zu)", cases[i].re, s, e, s2, e2,
                  cases[i].want_s, cases[i].want_e);
        tok_regex_ws_free(ws);
        tok_regex_free(re);
    }
}

static void test_unicode15(void) {
    /* the tables' category order is unicode.h's */
    static const char *const names[] = {
#define NAME(c) #c,
        AL_UC_CATEGORIES(NAME)
#undef NAME
    };
    for (int g = 0; g < AL_UC_GC_COUNT; g++) CHECK_MSG(!strcmp(al_uc_gc_names[g], names[g]), "category %d", g);
    CHECK(!strcmp(al_uc_version, "15.0.0"));
    CHECK(al_uc_gc('A') == AL_UC_Lu && al_uc_gc('a') == AL_UC_Ll && al_uc_gc(0x01C5) == AL_UC_Lt);
    CHECK(al_uc_gc(0x0301) == AL_UC_Mn && al_uc_gc(0x20AC) == AL_UC_Sc && al_uc_gc(0x0378) == AL_UC_Cn);
    CHECK(al_uc_gc(0x1E030) == AL_UC_Lm && al_uc_gc(0x11F50) == AL_UC_Nd && al_uc_gc(0x1E4D0) == AL_UC_Lo);
    CHECK(al_uc_gc(0x31350) == AL_UC_Lo); /* CJK Extension H */
    CHECK(al_uc_gc(0x110000) == AL_UC_Cn && al_uc_gc(0xE000) == AL_UC_Co && al_uc_gc(0xD800) == AL_UC_Cs);
    CHECK((al_uc_props(0x3000) & AL_UC_WHITE_SPACE) && !(al_uc_props(0x200B) & AL_UC_WHITE_SPACE));
    CHECK((al_uc_props(0x0345) & AL_UC_ALPHABETIC) && (al_uc_props(0x200D) & AL_UC_JOIN_CONTROL));
    /* case-fold orbits: k K KELVIN SIGN; s S LONG S; a character alone */
    uint32_t o = 'k';
    int len = 0;
    do {
        o = al_uc_fold_next(o);
        len++;
    } while (o != 'k' && len < 10);
    CHECK(len == 3);
    CHECK(al_uc_fold_next(0x017F) != 0x017F && al_uc_fold_next('1') == '1');
}

int main(void) {
    test_unicode15();
    test_dialect();
    test_refusals();
    test_random();
    test_long_searches();
    test_pathological();
    return TEST_EXIT();
}
