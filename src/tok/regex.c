/*
 * regex.c: a compiled regular-expression engine for the Split patterns of
 * Hugging Face tokenizers (regex.h), in Oniguruma's dialect and semantics
 * (Ruby syntax, UTF-8, what `tokenizers` compiles its patterns with).
 *
 * The dialect: literals; `.` (any character but \n; with (?m) any character);
 * classes `[...]` with ranges, negation `[^...]`, escapes and properties
 * inside; \d \D \w \W \s \S \h \H (Unicode: \d is Nd, \s White_Space, \w
 * Alphabetic, marks, Nd, Pc and Join_Control; \h hex digits); \p{..} \P{..}
 * \p{^..} with the general categories (short and long names, groups L LC M N
 * P S Z C) and Any, Alphabetic, White_Space, Word; escapes \t \n \r \f \v \a
 * \e \xHH \x{H..} \uHHHH and escaped punctuation; quantifiers * + ? {n}
 * {n,} {n,m} {,m}, each greedy or lazy (a trailing ?); alternation; groups
 * (...), (?:...), (?<name>...); lookahead (?=...) (?!...); options (?i) (?m)
 * (?-i) and (?i:...) (an isolated option applies to the rest of its group,
 * alternatives included, as Oniguruma reads it); anchors ^ $ (lines) \A \z \Z
 * and \b \B; comments (?#...). Case folding is Unicode's simple folding (every
 * character of a literal's orbit matches; a class gains the orbits of what it
 * holds before it is negated). Refused with a message: backreferences,
 * lookbehind, atomic groups, possessive quantifiers, nested classes, \G \K \R
 * \X and other escapes, unknown properties, and repeating (*, +, {n,m} with
 * m > 1) something that can match empty, whose iterations Oniguruma ends in
 * a way this engine does not model.
 *
 * Matching, and why: the patterns are tried where Oniguruma would, leftmost
 * first, and the alternatives in priority order, so a depth-first search
 * (backtracking) finds Oniguruma's match; plain backtracking is exponential on
 * patterns such as (a|a)*b, so it is memoised: a (branch, position) tried once
 * in a search is never tried again (its outcome depends on nothing else: the
 * dialect has no backreferences), which bounds a search by the program size
 * times the text it reads. First-character sets let it skip alternatives that
 * cannot start at the next character, which on real patterns is most of them.
 * The memo covers a window of positions (a bit per instruction each); a
 * search that runs past it is redone by a Pike VM, which runs all threads in
 * lock step, in priority order, and reports the same match in O(program size
 * x text) with memory for one step only. Lookahead bodies always run as an
 * anchored Pike VM. The parser builds a small tree first so that a counted
 * repetition can emit its body several times.
 */
#include "regex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

enum { MAX_INSTS = 1 << 16, MAX_REPEAT = 1000, MAX_DEPTH = 64, MAX_LOOK_DEPTH = 8 };

/* ---- the program ---- */

typedef enum { I_CHAR, I_CLASS, I_ANY, I_ANYNL, I_SPLIT, I_JMP, I_ASSERT, I_LOOK, I_MATCH } inst_op;
typedef enum { A_LINE_START, A_LINE_END, A_TEXT_START, A_TEXT_END, A_TEXT_END_NL, A_WORD_B, A_NOT_WORD_B } assert_kind;

typedef struct {
    uint8_t op, arg;  /* arg: ASSERT kind; LOOK: 1 for a negative lookahead */
    int32_t x, y;     /* SPLIT: preferred x, then y; JMP, LOOK: x is where to go on */
    uint32_t c;       /* CHAR: the code point; CLASS: the class index */
} inst;

/* One item of a class: matches when the character's category is in
 * gc_mask or it has one of the property bits, the answer flipped by negate. */
typedef struct {
    uint32_t gc_mask;
    uint8_t bits, negate;
} class_item;

typedef struct {
    uint32_t (*ranges)[2];  /* sorted, merged [lo, hi] */
    int n_ranges, cap_ranges;
    class_item items[8];
    int n_items, negate;
    uint32_t ascii[4];      /* the answer for code points below 128 (negation applied) */
} tok_class;

/* What can come first from an instruction: the ASCII characters a match
 * from there may start with, and flags: one may start with a character
 * above ASCII (FIRST_WIDE), or a match may start without consuming anything
 * or depend on the position (FIRST_ANY: an assertion, lookahead or MATCH is
 * reachable without consuming). */
enum { FIRST_WIDE = 1, FIRST_ANY = 2, FIRST_END = 4 /* jumps lead straight to MATCH */ };
typedef struct {
    uint32_t ascii[4];
    uint32_t flags;
} first_set;

struct tok_regex {
    inst *prog;
    first_set *first;       /* [n], for the backtracker to skip branches that cannot match here */
    int n, cap;
    tok_class *classes;
    int n_classes, cap_classes;
    int look_depth;         /* deepest nesting of lookaheads */
};

/* ---- the parse tree ---- */

typedef enum { N_EMPTY, N_CHAR, N_CLASS, N_ANY, N_CAT, N_ALT, N_REP, N_ASSERT, N_LOOK } node_kind;

/* Children form a list through `next`, starting at `kid`; indexes into the
 * parser's node array, -1 for none. */
typedef struct {
    node_kind kind;
    uint32_t c;            /* CHAR: code point; CLASS: class index; ANY: dotall; ASSERT: kind; LOOK: negative */
    int min, max, greedy;  /* REP (max -1: unbounded) */
    int kid, next, last;
} node;

typedef struct {
    tok_regex *re;
    const uint32_t *p;     /* the pattern as code points */
    size_t n, i;
    node *nodes;
    int n_nodes, cap_nodes;
    int ci, dotall, depth, look_depth;
    char *why;
    size_t why_cap;
    int failed;
} parser;

/* Records the first error (one line, with the pattern offset); returns -1. */
static int perr(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(parser *ps, const char *fmt, ...) {
    if (ps->failed) return -1;
    ps->failed = 1;
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->why, ps->why_cap, "%s at character %zu", msg, ps->i);
    return -1;
}

/* A new node of the kind; its index, or -1 (out of memory). */
static int new_node(parser *ps, node_kind kind) {
    if (ps->n_nodes == ps->cap_nodes) {
        int cap = ps->cap_nodes ? 2 * ps->cap_nodes : 64;
        node *v = realloc(ps->nodes, sizeof *v * (size_t)cap);
        if (!v) return perr(ps, "out of memory");
        ps->nodes = v, ps->cap_nodes = cap;
    }
    node *x = &ps->nodes[ps->n_nodes];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->kid = x->next = x->last = -1;
    return ps->n_nodes++;
}

static void add_kid(parser *ps, int parent, int kid) {
    node *p = &ps->nodes[parent];
    if (p->kid < 0) p->kid = kid;
    else ps->nodes[p->last].next = kid;
    p->last = kid;
}

/* ---- classes ---- */

static int new_class(parser *ps) {
    tok_regex *re = ps->re;
    if (re->n_classes == re->cap_classes) {
        int cap = re->cap_classes ? 2 * re->cap_classes : 8;
        tok_class *v = realloc(re->classes, sizeof *v * (size_t)cap);
        if (!v) return perr(ps, "out of memory");
        re->classes = v, re->cap_classes = cap;
    }
    memset(&re->classes[re->n_classes], 0, sizeof re->classes[0]);
    return re->n_classes++;
}

static int add_range(parser *ps, tok_class *k, uint32_t lo, uint32_t hi) {
    if (k->n_ranges == k->cap_ranges) {
        int cap = k->cap_ranges ? 2 * k->cap_ranges : 8;
        uint32_t(*v)[2] = realloc(k->ranges, sizeof *v * (size_t)cap);
        if (!v) return perr(ps, "out of memory");
        k->ranges = v, k->cap_ranges = cap;
    }
    k->ranges[k->n_ranges][0] = lo;
    k->ranges[k->n_ranges][1] = hi;
    k->n_ranges++;
    return 0;
}

static int add_item(parser *ps, tok_class *k, uint32_t gc_mask, unsigned bits, int negate) {
    if (k->n_items == (int)(sizeof k->items / sizeof k->items[0]))
        return perr(ps, "too many properties in one character class");
    k->items[k->n_items++] = (class_item){gc_mask, (uint8_t)bits, (uint8_t)negate};
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorts and merges the ranges of k. */
static void merge_ranges(tok_class *k) {
    if (!k->n_ranges) return;
    qsort(k->ranges, (size_t)k->n_ranges, sizeof k->ranges[0], cmp_range);
    int w = 0;
    for (int i = 1; i < k->n_ranges; i++) {
        if (k->ranges[i][0] <= k->ranges[w][1] + 1) {
            if (k->ranges[i][1] > k->ranges[w][1]) k->ranges[w][1] = k->ranges[i][1];
        } else {
            k->ranges[++w][0] = k->ranges[i][0];
            k->ranges[w][1] = k->ranges[i][1];
        }
    }
    k->n_ranges = w + 1;
}

/* Whether c (property byte props) is in k, before k's own negation. */
static int class_holds(const tok_class *k, uint32_t c, unsigned props) {
    int lo = 0, hi = k->n_ranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < k->ranges[mid][0]) hi = mid - 1;
        else if (c > k->ranges[mid][1]) lo = mid + 1;
        else return 1;
    }
    for (int i = 0; i < k->n_items; i++) {
        const class_item *it = &k->items[i];
        int in = ((it->gc_mask >> (props & AL_UC_GC_BITS)) & 1) || (props & it->bits);
        if (in != it->negate) return 1;
    }
    return 0;
}

/* Adds to k every character whose case-fold orbit meets k (for (?i)). The
 * tests see only the class as it was (its sorted ranges [0, n0)); the
 * additions are appended after them and merged at the end. */
static int close_under_folding(parser *ps, tok_class *k) {
    int n0 = k->n_ranges;
    for (int i = 0; i < al_uc_fold_orbit_n; i++) {
        uint32_t c = al_uc_fold_orbit[i][0];
        int n_all = k->n_ranges, add = 0;
        k->n_ranges = n0;
        if (!class_holds(k, c, al_uc_props(c)))
            for (uint32_t o = al_uc_fold_next(c); o != c && !add; o = al_uc_fold_next(o))
                add = class_holds(k, o, al_uc_props(o));
        k->n_ranges = n_all;
        if (add && add_range(ps, k, c, c)) return -1;
    }
    merge_ranges(k);
    return 0;
}

/* Finishes a class: ranges merged, folded under (?i), the ASCII bitmap. */
static int finish_class(parser *ps, tok_class *k, int ci) {
    merge_ranges(k);
    if (ci && close_under_folding(ps, k)) return -1;
    for (uint32_t c = 0; c < 128; c++)
        if (class_holds(k, c, al_uc_props(c)) != k->negate) k->ascii[c >> 5] |= 1u << (c & 31);
    return 0;
}

static int class_match(const tok_class *k, uint32_t c, unsigned props) {
    if (c < 128) return (k->ascii[c >> 5] >> (c & 31)) & 1;
    return class_holds(k, c, props) != k->negate;
}

/* ---- properties ---- */

#define WORD_GC (AL_UC_M_MASK | AL_UC_MASK(Nd) | AL_UC_MASK(Pc))
#define WORD_BITS (AL_UC_ALPHABETIC | AL_UC_JOIN_CONTROL)
#define LC_MASK (AL_UC_MASK(Lu) | AL_UC_MASK(Ll) | AL_UC_MASK(Lt))
#define P_MASK (AL_UC_MASK(Pc) | AL_UC_MASK(Pd) | AL_UC_MASK(Ps) | AL_UC_MASK(Pe) | AL_UC_MASK(Pi) | AL_UC_MASK(Pf) | \
                AL_UC_MASK(Po))
#define S_MASK (AL_UC_MASK(Sm) | AL_UC_MASK(Sc) | AL_UC_MASK(Sk) | AL_UC_MASK(So))
#define Z_MASK (AL_UC_MASK(Zs) | AL_UC_MASK(Zl) | AL_UC_MASK(Zp))
#define C_MASK (AL_UC_MASK(Cc) | AL_UC_MASK(Cf) | AL_UC_MASK(Cs) | AL_UC_MASK(Co) | AL_UC_MASK(Cn))
#define ALL_GC ((1u << AL_UC_GC_COUNT) - 1)

/* Property names as \p{..} takes them (compared lowercased, without spaces,
 * '_' or '-'): (name, categories, property bits). The general categories by
 * their short names are looked up in al_uc_gc_names. */
#define AL_RE_PROPERTIES(X)                                                                                        \
    X("l", AL_UC_L_MASK, 0) X("letter", AL_UC_L_MASK, 0) X("lc", LC_MASK, 0) X("l&", LC_MASK, 0)                   \
    X("casedletter", LC_MASK, 0) X("uppercaseletter", AL_UC_MASK(Lu), 0)                                          \
    X("lowercaseletter", AL_UC_MASK(Ll), 0) X("titlecaseletter", AL_UC_MASK(Lt), 0)                               \
    X("modifierletter", AL_UC_MASK(Lm), 0) X("otherletter", AL_UC_MASK(Lo), 0) X("m", AL_UC_M_MASK, 0)             \
    X("mark", AL_UC_M_MASK, 0) X("combiningmark", AL_UC_M_MASK, 0) X("nonspacingmark", AL_UC_MASK(Mn), 0)          \
    X("spacingmark", AL_UC_MASK(Mc), 0) X("enclosingmark", AL_UC_MASK(Me), 0) X("n", AL_UC_N_MASK, 0)              \
    X("number", AL_UC_N_MASK, 0) X("decimalnumber", AL_UC_MASK(Nd), 0) X("letternumber", AL_UC_MASK(Nl), 0)        \
    X("othernumber", AL_UC_MASK(No), 0) X("p", P_MASK, 0) X("punctuation", P_MASK, 0)                              \
    X("connectorpunctuation", AL_UC_MASK(Pc), 0) X("dashpunctuation", AL_UC_MASK(Pd), 0)                          \
    X("openpunctuation", AL_UC_MASK(Ps), 0) X("closepunctuation", AL_UC_MASK(Pe), 0)                              \
    X("initialpunctuation", AL_UC_MASK(Pi), 0) X("finalpunctuation", AL_UC_MASK(Pf), 0)                           \
    X("otherpunctuation", AL_UC_MASK(Po), 0) X("s", S_MASK, 0) X("symbol", S_MASK, 0)                              \
    X("mathsymbol", AL_UC_MASK(Sm), 0) X("currencysymbol", AL_UC_MASK(Sc), 0)                                     \
    X("modifiersymbol", AL_UC_MASK(Sk), 0) X("othersymbol", AL_UC_MASK(So), 0) X("z", Z_MASK, 0)                   \
    X("separator", Z_MASK, 0) X("spaceseparator", AL_UC_MASK(Zs), 0) X("lineseparator", AL_UC_MASK(Zl), 0)        \
    X("paragraphseparator", AL_UC_MASK(Zp), 0) X("c", C_MASK, 0) X("other", C_MASK, 0)                             \
    X("control", AL_UC_MASK(Cc), 0) X("format", AL_UC_MASK(Cf), 0) X("surrogate", AL_UC_MASK(Cs), 0)              \
    X("privateuse", AL_UC_MASK(Co), 0) X("unassigned", AL_UC_MASK(Cn), 0) X("any", ALL_GC, 0)                      \
    X("alphabetic", 0, AL_UC_ALPHABETIC) X("alpha", 0, AL_UC_ALPHABETIC) X("whitespace", 0, AL_UC_WHITE_SPACE)     \
    X("space", 0, AL_UC_WHITE_SPACE) X("wspace", 0, AL_UC_WHITE_SPACE) X("word", WORD_GC, WORD_BITS)

typedef struct {
    const char *name;
    uint32_t gc_mask;
    unsigned bits;
} property;

#define AL_RE_PROPERTY_ROW(n, m, b) {n, m, b},
static const property properties[] = {AL_RE_PROPERTIES(AL_RE_PROPERTY_ROW)};

/* Looks a property name up: its categories and bits; -1 if unknown. */
static int find_property(const char *name, uint32_t *gc_mask, unsigned *bits) {
    char key[48];
    size_t k = 0;
    for (const char *s = name; *s && k + 1 < sizeof key; s++)
        if (*s != ' ' && *s != '_' && *s != '-') key[k++] = (char)(*s >= 'A' && *s <= 'Z' ? *s + 32 : *s);
    key[k] = 0;
    for (int g = 0; g < AL_UC_GC_COUNT; g++) {
        const char *gn = al_uc_gc_names[g];
        if (k == 2 && key[0] == gn[0] + 32 && key[1] == gn[1]) {
            *gc_mask = 1u << g, *bits = 0;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof properties / sizeof properties[0]; i++)
        if (!strcmp(key, properties[i].name)) {
            *gc_mask = properties[i].gc_mask, *bits = properties[i].bits;
            return 0;
        }
    return -1;
}

/* ---- the parser ---- */

static int at_end(const parser *ps) { return ps->i >= ps->n; }
static uint32_t peek(const parser *ps) { return ps->i < ps->n ? ps->p[ps->i] : 0; }

static int hexval(uint32_t c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (int)((c | 0x20) - 'a' + 10);
    return -1;
}

/* Up to max hex digits (at least one); -1 if none. */
static long hex_digits(parser *ps, int max) {
    long v = 0;
    int k = 0;
    while (k < max && !at_end(ps) && hexval(peek(ps)) >= 0) {
        v = v * 16 + hexval(ps->p[ps->i++]);
        k++;
    }
    if (!k || v > 0x10FFFF) return perr(ps, "bad hexadecimal escape");
    return v;
}

/* The set an escape letter stands for, as an item of a class (\d \w \s \h
 * and their negations): 1 if c was one (added to k), 0 if not, -1 on error. */
static int class_escape(parser *ps, tok_class *k, uint32_t c) {
    int neg = c >= 'A' && c <= 'Z';
    switch (c | 0x20) {
    case 'd': return add_item(ps, k, AL_UC_MASK(Nd), 0, neg) ? -1 : 1;
    case 'w': return add_item(ps, k, WORD_GC, WORD_BITS, neg) ? -1 : 1;
    case 's': return add_item(ps, k, 0, AL_UC_WHITE_SPACE, neg) ? -1 : 1;
    case 'h':
        if (!neg) return add_range(ps, k, '0', '9') || add_range(ps, k, 'A', 'F') || add_range(ps, k, 'a', 'f') ? -1 : 1;
        return add_range(ps, k, 0, '0' - 1) || add_range(ps, k, '9' + 1, 'A' - 1) ||
                       add_range(ps, k, 'F' + 1, 'a' - 1) || add_range(ps, k, 'f' + 1, 0x10FFFF)
                   ? -1
                   : 1;
    case 'p': {
        /* \p{Name}, \p{^Name}, \P{Name}: the 'p' was read */
        if (peek(ps) != '{') return perr(ps, "\\%c needs {name}", (char)c);
        ps->i++;
        if (peek(ps) == '^') neg = !neg, ps->i++;
        char name[48];
        size_t l = 0;
        while (!at_end(ps) && peek(ps) != '}') {
            uint32_t x = ps->p[ps->i++];
            if (x >= 128 || l + 1 >= sizeof name) return perr(ps, "bad property name");
            name[l++] = (char)x;
        }
        name[l] = 0;
        if (at_end(ps)) return perr(ps, "\\%c{ without }", (char)c);
        ps->i++;
        uint32_t mask;
        unsigned bits;
        if (find_property(name, &mask, &bits)) return perr(ps, "unsupported property \\%c{%s}", (char)c, name);
        return add_item(ps, k, mask, bits, neg) ? -1 : 1;
    }
    }
    return 0;
}

/* A single-character escape (after the backslash, with c read): the code
 * point, or -1 with an error for what is not one. */
static long char_escape(parser *ps, uint32_t c) {
    switch (c) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return 0x0B;
    case 'a': return 0x07;
    case 'e': return 0x1B;
    case 'x':
        if (peek(ps) == '{') {
            ps->i++;
            long v = hex_digits(ps, 8);
            if (v < 0) return -1;
            if (peek(ps) != '}') return perr(ps, "\\x{ without }");
            ps->i++;
            return v;
        }
        return hex_digits(ps, 2);
    case 'u': return hex_digits(ps, 4);
    }
    if (c < 128 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
        return perr(ps, "unsupported escape \\%c", (char)c);
    if (c >= '0' && c <= '9') return perr(ps, "backreferences and octal escapes (\\%c) are not supported", (char)c);
    return c; /* escaped punctuation or any other character stands for itself */
}

/* A bracket class, the '[' read. */
static int parse_class(parser *ps) {
    int ci = new_class(ps);
    if (ci < 0) return -1;
    tok_class *k = &ps->re->classes[ci];
    if (peek(ps) == '^') k->negate = 1, ps->i++;
    int first = 1;
    for (;;) {
        if (at_end(ps)) return perr(ps, "[ without ]");
        k = &ps->re->classes[ci];
        uint32_t c = ps->p[ps->i++];
        if (c == ']' && !first) break;
        first = 0;
        long lo;
        if (c == '[') {
            if (peek(ps) == ':') return perr(ps, "POSIX bracket classes are not supported");
            return perr(ps, "nested character classes are not supported");
        }
        if (c == '&' && peek(ps) == '&') return perr(ps, "class intersection && is not supported");
        if (c == '\\') {
            if (at_end(ps)) return perr(ps, "trailing backslash");
            uint32_t e = ps->p[ps->i++];
            int r = class_escape(ps, k, e);
            if (r < 0) return -1;
            if (r) continue;
            if (e == 'b') lo = 0x08; /* a backspace inside a class */
            else if ((lo = char_escape(ps, e)) < 0) return -1;
        } else {
            lo = c;
        }
        long hi = lo;
        if (peek(ps) == '-' && ps->i + 1 < ps->n && ps->p[ps->i + 1] != ']') {
            ps->i++;
            uint32_t d = ps->p[ps->i++];
            if (d == '\\') {
                if (at_end(ps)) return perr(ps, "trailing backslash");
                uint32_t e = ps->p[ps->i++];
                if ((hi = char_escape(ps, e)) < 0) return -1;
            } else if (d == '[') {
                return perr(ps, "nested character classes are not supported");
            } else {
                hi = d;
            }
            if (hi < lo) return perr(ps, "empty range in a character class");
        }
        if (add_range(ps, k, (uint32_t)lo, (uint32_t)hi)) return -1;
    }
    int x = new_node(ps, N_CLASS);
    if (x < 0 || finish_class(ps, &ps->re->classes[ci], ps->ci)) return -1;
    ps->nodes[x].c = (uint32_t)ci;
    return x;
}

/* A class node of one escape (\d, \p{L}, ...) outside brackets. */
static int escape_class_node(parser *ps, uint32_t c) {
    int ci = new_class(ps);
    if (ci < 0) return -1;
    int r = class_escape(ps, &ps->re->classes[ci], c);
    if (r <= 0) return r < 0 ? -1 : perr(ps, "internal: not a class escape");
    int x = new_node(ps, N_CLASS);
    if (x < 0 || finish_class(ps, &ps->re->classes[ci], ps->ci)) return -1;
    ps->nodes[x].c = (uint32_t)ci;
    return x;
}

/* A literal character node: under (?i) a class of its case-fold orbit. */
static int char_node(parser *ps, uint32_t c) {
    if (ps->ci && al_uc_fold_next(c) != c) {
        int ci = new_class(ps);
        if (ci < 0) return -1;
        uint32_t o = c;
        do {
            if (add_range(ps, &ps->re->classes[ci], o, o)) return -1;
            o = al_uc_fold_next(o);
        } while (o != c);
        int x = new_node(ps, N_CLASS);
        if (x < 0 || finish_class(ps, &ps->re->classes[ci], 0)) return -1;
        ps->nodes[x].c = (uint32_t)ci;
        return x;
    }
    int x = new_node(ps, N_CHAR);
    if (x >= 0) ps->nodes[x].c = c;
    return x;
}

static int parse_alt(parser *ps);

/* Option letters of (?imx-imx) applied to ps; stops at ':' or ')'. */
static int parse_options(parser *ps) {
    int on = 1;
    while (!at_end(ps) && peek(ps) != ':' && peek(ps) != ')') {
        uint32_t c = ps->p[ps->i++];
        if (c == '-') on = 0;
        else if (c == 'i') ps->ci = on;
        else if (c == 'm') ps->dotall = on;
        else return perr(ps, "unsupported group option '%c'", c < 128 ? (char)c : '?');
    }
    if (at_end(ps)) return perr(ps, "( without )");
    return 0;
}

/* A group, the '(' read: the node, or -2 for an isolated option (?i) whose
 * effect the caller applies to the rest of its group. */
static int parse_group(parser *ps) {
    int save_ci = ps->ci, save_dotall = ps->dotall, x, look = -1;
    if (peek(ps) == '?') {
        ps->i++;
        uint32_t c = peek(ps);
        if (c == ':') {
            ps->i++;
        } else if (c == '=' || c == '!') {
            ps->i++;
            look = c == '!';
        } else if (c == '#') {
            while (!at_end(ps) && peek(ps) != ')') ps->i++;
            if (at_end(ps)) return perr(ps, "(?# without )");
            ps->i++;
            return new_node(ps, N_EMPTY);
        } else if (c == '<' && ps->i + 1 < ps->n && (ps->p[ps->i + 1] == '=' || ps->p[ps->i + 1] == '!')) {
            return perr(ps, "lookbehind is not supported");
        } else if (c == '<' || c == '\'') {
            uint32_t close = c == '<' ? '>' : '\'';
            ps->i++;
            while (!at_end(ps) && peek(ps) != close) ps->i++;
            if (at_end(ps)) return perr(ps, "unterminated group name");
            ps->i++;
        } else if (c == '>') {
            return perr(ps, "atomic groups (?>...) are not supported");
        } else {
            if (parse_options(ps)) return -1;
            if (ps->p[ps->i++] == ')') return -2; /* isolated: flags stay set for the caller */
        }
    }
    if (look >= 0 && ++ps->look_depth > MAX_LOOK_DEPTH) return perr(ps, "lookaheads nested too deep");
    if (look >= 0 && ps->look_depth > ps->re->look_depth) ps->re->look_depth = ps->look_depth;
    if ((x = parse_alt(ps)) < 0) return -1;
    if (peek(ps) != ')') return perr(ps, "( without )");
    ps->i++;
    ps->ci = save_ci, ps->dotall = save_dotall;
    if (look < 0) return x;
    ps->look_depth--;
    int l = new_node(ps, N_LOOK);
    if (l < 0) return -1;
    ps->nodes[l].c = (uint32_t)look;
    add_kid(ps, l, x);
    return l;
}

/* {n}, {n,}, {n,m}, {,m} at ps->i (the '{' not read): 1 and the bounds, or 0
 * (and nothing read) if the text is not an interval, which Oniguruma then
 * reads as a literal '{'. */
static int parse_interval(parser *ps, int *min, int *max) {
    size_t i = ps->i + 1;
    long a = -1, b = -1;
    while (i < ps->n && ps->p[i] >= '0' && ps->p[i] <= '9' && a < 100000) a = (a < 0 ? 0 : a * 10) + (ps->p[i++] - '0');
    int comma = i < ps->n && ps->p[i] == ',';
    if (comma) {
        i++;
        while (i < ps->n && ps->p[i] >= '0' && ps->p[i] <= '9' && b < 100000) b = (b < 0 ? 0 : b * 10) + (ps->p[i++] - '0');
    }
    if (i >= ps->n || ps->p[i] != '}' || (a < 0 && b < 0)) return 0;
    *min = a < 0 ? 0 : (int)a;
    *max = comma ? (b < 0 ? -1 : (int)b) : *min;
    ps->i = i + 1;
    return 1;
}

/* Whether node x can match without consuming a character. */
static int nullable(const parser *ps, int x) {
    const node *nd = &ps->nodes[x];
    switch (nd->kind) {
    case N_CHAR:
    case N_CLASS:
    case N_ANY: return 0;
    case N_CAT:
        for (int k = nd->kid; k >= 0; k = ps->nodes[k].next)
            if (!nullable(ps, k)) return 0;
        return 1;
    case N_ALT:
        for (int k = nd->kid; k >= 0; k = ps->nodes[k].next)
            if (nullable(ps, k)) return 1;
        return 0;
    case N_REP: return nd->min == 0 || nullable(ps, nd->kid);
    default: return 1; /* empty, assertions, lookahead */
    }
}

/* An atom and its quantifiers. A repetition (more than once) of something
 * that can match empty is refused: Oniguruma ends a loop whose iteration
 * matched empty and goes on after it, at that iteration's priority, which
 * this engine does not model (no real tokenizer pattern needs it). */
static int parse_repeat(parser *ps, int atom) {
    for (;;) {
        int min, max;
        uint32_t c = peek(ps);
        if (at_end(ps)) return atom;
        if (c == '*') min = 0, max = -1, ps->i++;
        else if (c == '+') min = 1, max = -1, ps->i++;
        else if (c == '?') min = 0, max = 1, ps->i++;
        else if (c == '{' && parse_interval(ps, &min, &max)) {
        } else return atom;
        if (max >= 0 && max < min) return perr(ps, "a repetition {n,m} with m < n");
        if (min > MAX_REPEAT || max > MAX_REPEAT) return perr(ps, "a repetition count above %d", MAX_REPEAT);
        int greedy = 1;
        if (peek(ps) == '?') greedy = 0, ps->i++;
        else if (peek(ps) == '+' && c != '{') return perr(ps, "possessive quantifiers are not supported");
        if ((max < 0 || max > 1) && nullable(ps, atom))
            return perr(ps, "a repetition of something that can match empty is not supported");
        int r = new_node(ps, N_REP);
        if (r < 0) return -1;
        ps->nodes[r].min = min, ps->nodes[r].max = max, ps->nodes[r].greedy = greedy;
        add_kid(ps, r, atom);
        atom = r;
    }
}

/* One atom (with its quantifiers): the node, 0 children for an isolated
 * option; -2 as parse_group. */
static int parse_atom(parser *ps) {
    uint32_t c = ps->p[ps->i++];
    int x;
    switch (c) {
    case '(': x = parse_group(ps); break;
    case '[': x = parse_class(ps); break;
    case '.':
        x = new_node(ps, N_ANY);
        if (x >= 0) ps->nodes[x].c = (uint32_t)ps->dotall;
        break;
    case '^':
    case '$':
        x = new_node(ps, N_ASSERT);
        if (x >= 0) ps->nodes[x].c = c == '^' ? A_LINE_START : A_LINE_END;
        return x;
    case '*':
    case '+':
    case '?': return perr(ps, "a quantifier with nothing to repeat");
    case '\\': {
        if (at_end(ps)) return perr(ps, "trailing backslash");
        uint32_t e = ps->p[ps->i++];
        const char *asserts = "bBAzZ";
        const char *a = e < 128 ? strchr(asserts, (int)e) : NULL;
        if (a && e) {
            static const assert_kind kinds[] = {A_WORD_B, A_NOT_WORD_B, A_TEXT_START, A_TEXT_END, A_TEXT_END_NL};
            x = new_node(ps, N_ASSERT);
            if (x >= 0) ps->nodes[x].c = kinds[a - asserts];
            return x;
        }
        if (strchr("dDwWsShHpP", e < 128 ? (int)e : 1) && e) {
            x = escape_class_node(ps, e);
            break;
        }
        long v = char_escape(ps, e);
        if (v < 0) return -1;
        x = char_node(ps, (uint32_t)v);
        break;
    }
    default: x = char_node(ps, c);
    }
    if (x < 0) return x;
    return parse_repeat(ps, x);
}

/* A sequence up to '|', ')' or the end. */
static int parse_cat(parser *ps) {
    int cat = new_node(ps, N_CAT);
    if (cat < 0) return -1;
    while (!at_end(ps) && peek(ps) != '|' && peek(ps) != ')') {
        int x = parse_atom(ps);
        if (x == -2) { /* (?i): the rest of the group, alternatives included, under the new options */
            int rest = parse_alt(ps);
            if (rest < 0) return -1;
            add_kid(ps, cat, rest);
            return cat;
        }
        if (x < 0) return -1;
        add_kid(ps, cat, x);
    }
    return cat;
}

static int parse_alt(parser *ps) {
    if (++ps->depth > MAX_DEPTH) return perr(ps, "groups nested too deep");
    int alt = new_node(ps, N_ALT), first = parse_cat(ps);
    if (alt < 0 || first < 0) return -1;
    add_kid(ps, alt, first);
    while (peek(ps) == '|' && !at_end(ps)) {
        ps->i++;
        int x = parse_cat(ps);
        if (x < 0) return -1;
        add_kid(ps, alt, x);
    }
    ps->depth--;
    return alt;
}

/* ---- code generation ---- */

static int emit(parser *ps, inst_op op, int32_t x, int32_t y, uint32_t c, int arg) {
    tok_regex *re = ps->re;
    if (re->n >= MAX_INSTS) return perr(ps, "the pattern compiles to more than %d instructions", MAX_INSTS);
    if (re->n == re->cap) {
        int cap = re->cap ? 2 * re->cap : 64;
        inst *v = realloc(re->prog, sizeof *v * (size_t)cap);
        if (!v) return perr(ps, "out of memory");
        re->prog = v, re->cap = cap;
    }
    re->prog[re->n] = (inst){(uint8_t)op, (uint8_t)arg, x, y, c};
    return re->n++;
}

static int gen(parser *ps, int x);

/* Body, then a loop back to `split` (x*, x*?). */
static int gen_star(parser *ps, int kid, int greedy) {
    int split = emit(ps, I_SPLIT, 0, 0, 0, 0);
    if (split < 0 || gen(ps, kid) || emit(ps, I_JMP, split, 0, 0, 0) < 0) return -1;
    int out = ps->re->n;
    ps->re->prog[split].x = greedy ? split + 1 : out;
    ps->re->prog[split].y = greedy ? out : split + 1;
    return 0;
}

static int gen(parser *ps, int x) {
    const node *nd = &ps->nodes[x];
    tok_regex *re = ps->re;
    switch (nd->kind) {
    case N_EMPTY: return 0;
    case N_CHAR: return emit(ps, I_CHAR, 0, 0, nd->c, 0) < 0 ? -1 : 0;
    case N_CLASS: return emit(ps, I_CLASS, 0, 0, nd->c, 0) < 0 ? -1 : 0;
    case N_ANY: return emit(ps, nd->c ? I_ANYNL : I_ANY, 0, 0, 0, 0) < 0 ? -1 : 0;
    case N_ASSERT: return emit(ps, I_ASSERT, 0, 0, 0, (int)nd->c) < 0 ? -1 : 0;
    case N_CAT:
        for (int k = nd->kid; k >= 0; k = ps->nodes[k].next)
            if (gen(ps, k)) return -1;
        return 0;
    case N_ALT: {
        /* SPLIT next_alt; alt; JMP end; next_alt: ... the JMPs chained through x until patched */
        int chain = -1;
        for (int k = nd->kid; k >= 0; k = ps->nodes[k].next) {
            int last = ps->nodes[k].next < 0, split = -1;
            if (!last && (split = emit(ps, I_SPLIT, 0, 0, 0, 0)) < 0) return -1;
            if (gen(ps, k)) return -1;
            if (!last) {
                int j = emit(ps, I_JMP, chain, 0, 0, 0);
                if (j < 0) return -1;
                chain = j;
                re->prog[split].x = split + 1;
                re->prog[split].y = re->n;
            }
        }
        while (chain >= 0) {
            int prev = re->prog[chain].x;
            re->prog[chain].x = re->n;
            chain = prev;
        }
        return 0;
    }
    case N_REP: {
        int kid = nd->kid, min = nd->min, max = nd->max, greedy = nd->greedy;
        for (int k = 0; k < min; k++)
            if (gen(ps, kid)) return -1;
        if (max < 0) return gen_star(ps, kid, greedy);
        /* max - min optional copies: SPLIT copy, end (greedy); the SPLITs chained through y until patched */
        int chain = -1;
        for (int k = min; k < max; k++) {
            int split = emit(ps, I_SPLIT, 0, chain, 0, 0);
            if (split < 0 || gen(ps, kid)) return -1;
            chain = split;
        }
        while (chain >= 0) {
            inst *sp = &re->prog[chain];
            int prev = sp->y;
            sp->x = greedy ? chain + 1 : re->n;
            sp->y = greedy ? re->n : chain + 1;
            chain = prev;
        }
        return 0;
    }
    case N_LOOK: {
        int look = emit(ps, I_LOOK, 0, 0, 0, (int)nd->c);
        if (look < 0 || gen(ps, nd->kid) || emit(ps, I_MATCH, 0, 0, 0, 0) < 0) return -1;
        re->prog[look].x = re->n;
        return 0;
    }
    }
    return 0;
}

/* The first sets of every instruction, by iterating to a fixed point (the
 * sets only grow; loops back through JMP settle within a few passes). */
static int compute_first(tok_regex *re) {
    re->first = calloc((size_t)re->n, sizeof *re->first);
    if (!re->first) return -1;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int pc = re->n - 1; pc >= 0; pc--) {
            const inst *in = &re->prog[pc];
            first_set f = {{0}, 0};
            switch (in->op) {
            case I_CHAR:
                if (in->c < 128) f.ascii[in->c >> 5] = 1u << (in->c & 31);
                else f.flags = FIRST_WIDE;
                break;
            case I_CLASS:
                memcpy(f.ascii, re->classes[in->c].ascii, sizeof f.ascii);
                f.flags = FIRST_WIDE;
                break;
            case I_ANY:
            case I_ANYNL:
                for (int w = 0; w < 4; w++) f.ascii[w] = ~0u;
                if (in->op == I_ANY) f.ascii['\n' >> 5] &= ~(1u << ('\n' & 31));
                f.flags = FIRST_WIDE;
                break;
            case I_SPLIT:
            case I_JMP: {
                const first_set *a = &re->first[in->x], *b = in->op == I_SPLIT ? &re->first[in->y] : a;
                for (int w = 0; w < 4; w++) f.ascii[w] = a->ascii[w] | b->ascii[w];
                f.flags = a->flags | b->flags;
                break;
            }
            default: f.flags = FIRST_ANY;
            }
            if (in->op == I_MATCH || (in->op == I_JMP && (re->first[in->x].flags & FIRST_END))) f.flags |= FIRST_END;
            first_set *o = &re->first[pc];
            if (memcmp(o, &f, sizeof f)) {
                *o = f;
                changed = 1;
            }
        }
    }
    return 0;
}

/* Whether a match from pc can start with the character at pos. */
static int may_start(const tok_regex *re, int pc, const uint32_t *cps, size_t n, size_t pos) {
    const first_set *f = &re->first[pc];
    if (f->flags & FIRST_ANY) return 1;
    if (pos >= n) return 0;
    uint32_t c = cps[pos];
    return c < 128 ? (f->ascii[c >> 5] >> (c & 31)) & 1 : f->flags & FIRST_WIDE;
}

void tok_regex_free(tok_regex *re) {
    if (!re) return;
    free(re->first);
    for (int i = 0; i < re->n_classes; i++) free(re->classes[i].ranges);
    free(re->classes);
    free(re->prog);
    free(re);
}

tok_regex *tok_regex_compile(const char *pattern, size_t len, int literal, char *why, size_t why_cap) {
    tok_regex *re = calloc(1, sizeof *re);
    uint32_t *cps = malloc(sizeof *cps * (len + 1));
    parser ps = {.re = re, .p = cps, .why = why, .why_cap = why_cap};
    if (!re || !cps) {
        snprintf(why, why_cap, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < len;) {
        int l = al_utf8_decode((const unsigned char *)pattern + i, len - i, &cps[ps.n]);
        if (!l) {
            snprintf(why, why_cap, "the pattern is not valid UTF-8 (byte %zu)", i);
            goto fail;
        }
        ps.n++;
        i += (size_t)l;
    }
    int root;
    if (literal) {
        root = new_node(&ps, N_CAT);
        for (size_t i = 0; root >= 0 && i < ps.n; i++) {
            int x = new_node(&ps, N_CHAR);
            if (x < 0) goto fail;
            ps.nodes[x].c = cps[i];
            add_kid(&ps, root, x);
        }
    } else {
        root = parse_alt(&ps);
        if (root >= 0 && !at_end(&ps)) root = perr(&ps, "unmatched )");
    }
    if (root < 0 || gen(&ps, root) || emit(&ps, I_MATCH, 0, 0, 0, 0) < 0) goto fail;
    if (compute_first(re)) {
        snprintf(why, why_cap, "out of memory");
        goto fail;
    }
    free(ps.nodes);
    free(cps);
    return re;
fail:
    free(ps.nodes);
    free(cps);
    tok_regex_free(re);
    return NULL;
}

/* ---- the VM ---- */

typedef struct {
    int pc;
    size_t start;
} thread;

/* The threads of one step, in priority order; mark[pc] == stamp when pc is in. */
typedef struct {
    thread *t;
    int n;
    uint32_t *mark, stamp;
} tlist;

/* One lookahead depth's lists and closure stack. */
typedef struct {
    tlist a, b;
    int *stack;
} level;

/* The backtracker's memory: a bit per (instruction, position) for positions
 * [from, from + rows) of one search, a row cleared when first touched in
 * a search (row_stamp), and the stack of branches still to try. */
enum { BT_MAX_ROWS = 1 << 14, BT_WORDS = 1 << 18, BT_STACK = 1 << 15 };
typedef struct {
    int pc;
    size_t pos;
} bt_frame;

struct tok_regex_ws {
    level *lv;
    int n_levels, n_insts;
    uint64_t *visited;      /* [rows][row_words] */
    uint32_t *row_stamp, stamp;
    int row_words;
    size_t rows;            /* BT_MAX_ROWS, fewer for long programs (BT_WORDS words in all) */
    bt_frame *stack;
};

tok_regex_ws *tok_regex_ws_new(const tok_regex *re, size_t max_len) {
    tok_regex_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return NULL;
    ws->n_levels = re->look_depth + 1;
    ws->n_insts = re->n;
    ws->lv = calloc((size_t)ws->n_levels, sizeof *ws->lv);
    if (!ws->lv) {
        free(ws);
        return NULL;
    }
    size_t n = (size_t)re->n;
    ws->row_words = (re->n + 63) / 64;
    ws->rows = BT_WORDS / (size_t)ws->row_words;
    if (ws->rows > BT_MAX_ROWS) ws->rows = BT_MAX_ROWS;
    if (max_len < ws->rows - 1) ws->rows = max_len + 1; /* positions 0..max_len */
    ws->visited = malloc(sizeof(uint64_t) * (size_t)ws->row_words * ws->rows);
    ws->row_stamp = calloc(ws->rows, sizeof(uint32_t));
    ws->stack = malloc(sizeof(bt_frame) * BT_STACK);
    if (!ws->visited || !ws->row_stamp || !ws->stack) {
        tok_regex_ws_free(ws);
        return NULL;
    }
    for (int d = 0; d < ws->n_levels; d++) {
        level *l = &ws->lv[d];
        l->a.t = malloc(sizeof(thread) * n);
        l->b.t = malloc(sizeof(thread) * n);
        l->a.mark = calloc(n, sizeof(uint32_t));
        l->b.mark = calloc(n, sizeof(uint32_t));
        l->stack = malloc(sizeof(int) * (2 * n + 2));
        if (!l->a.t || !l->b.t || !l->a.mark || !l->b.mark || !l->stack) {
            tok_regex_ws_free(ws);
            return NULL;
        }
    }
    return ws;
}

void tok_regex_ws_free(tok_regex_ws *ws) {
    if (!ws) return;
    for (int d = 0; d < ws->n_levels; d++) {
        free(ws->lv[d].a.t);
        free(ws->lv[d].b.t);
        free(ws->lv[d].a.mark);
        free(ws->lv[d].b.mark);
        free(ws->lv[d].stack);
    }
    free(ws->lv);
    free(ws->visited);
    free(ws->row_stamp);
    free(ws->stack);
    free(ws);
}

/* Empties a list: a new stamp (the marks are cleared when it wraps). */
static void tl_clear(tlist *l, int n_insts) {
    l->n = 0;
    if (++l->stamp == 0) {
        memset(l->mark, 0, sizeof(uint32_t) * (size_t)n_insts);
        l->stamp = 1;
    }
}

static int is_word(uint32_t c) {
    unsigned p = al_uc_props(c);
    return ((WORD_GC >> (p & AL_UC_GC_BITS)) & 1) || (p & WORD_BITS);
}

/* Whether an assertion holds at pos of cps[0..n). */
static int assert_holds(int kind, const uint32_t *cps, size_t n, size_t pos) {
    switch (kind) {
    case A_LINE_START: return pos == 0 || cps[pos - 1] == '\n';
    case A_LINE_END: return pos == n || cps[pos] == '\n';
    case A_TEXT_START: return pos == 0;
    case A_TEXT_END: return pos == n;
    case A_TEXT_END_NL: return pos == n || (pos + 1 == n && cps[pos] == '\n');
    case A_WORD_B:
    case A_NOT_WORD_B: {
        int b = (pos > 0 && is_word(cps[pos - 1])) != (pos < n && is_word(cps[pos]));
        return kind == A_WORD_B ? b : !b;
    }
    }
    return 0;
}

static int run(const tok_regex *re, tok_regex_ws *ws, int depth, int pc0, const uint32_t *cps, size_t n, size_t from,
               int anchored, size_t *ms, size_t *me);
static int consumes(const tok_regex *re, const inst *in, uint32_t c);

/* Adds pc's epsilon closure at pos to l, in priority order (depth-first,
 * preferred branch first), each instruction at most once per step. Returns 1
 * if the closure reaches MATCH, which in a lookahead (depth > 0) ends the run. */
static int add_thread(const tok_regex *re, tok_regex_ws *ws, int depth, tlist *l, int pc, size_t start,
                      const uint32_t *cps, size_t n, size_t pos) {
    int *stack = ws->lv[depth].stack, sp = 0, matched = 0;
    stack[sp++] = pc;
    while (sp) {
        pc = stack[--sp];
        if (l->mark[pc] == l->stamp) continue;
        l->mark[pc] = l->stamp;
        const inst *in = &re->prog[pc];
        switch (in->op) {
        case I_JMP: stack[sp++] = in->x; break;
        case I_SPLIT:
            stack[sp++] = in->y;
            stack[sp++] = in->x;
            break;
        case I_ASSERT:
            if (assert_holds(in->arg, cps, n, pos)) stack[sp++] = pc + 1;
            break;
        case I_LOOK: {
            size_t a, b;
            int found = run(re, ws, depth + 1, pc + 1, cps, n, pos, 1, &a, &b);
            if (found != in->arg) stack[sp++] = in->x;
            break;
        }
        case I_MATCH: /* kept as a thread too, for its priority */
            matched = 1;
            l->t[l->n++] = (thread){pc, start};
            break;
        default: l->t[l->n++] = (thread){pc, start};
        }
    }
    return matched;
}

/* Whether instruction in consumes c (property byte computed on demand). */
static int consumes(const tok_regex *re, const inst *in, uint32_t c) {
    switch (in->op) {
    case I_CHAR: return in->c == c;
    case I_CLASS: return class_match(&re->classes[in->c], c, c < 128 ? 0 : al_uc_props(c));
    case I_ANY: return c != '\n';
    case I_ANYNL: return 1;
    }
    return 0;
}

/* The Pike VM from pc0. At depth 0: the leftmost-first match starting at or
 * after `from` (anchored: at `from` only). At depth > 0 (lookahead bodies,
 * always anchored): whether any match exists. */
static int run(const tok_regex *re, tok_regex_ws *ws, int depth, int pc0, const uint32_t *cps, size_t n, size_t from,
               int anchored, size_t *ms, size_t *me) {
    level *lv = &ws->lv[depth];
    tlist *cur = &lv->a, *nxt = &lv->b;
    int found = 0;
    tl_clear(cur, ws->n_insts);
    for (size_t pos = from;; pos++) {
        if (!found && (pos == from || !anchored)) {
            if (add_thread(re, ws, depth, cur, pc0, pos, cps, n, pos) && depth > 0) return 1;
        }
        if (!cur->n && (found || anchored || pos >= n)) break; /* else: seed again at the next position */
        tl_clear(nxt, ws->n_insts);
        uint32_t c = pos < n ? cps[pos] : 0;
        for (int i = 0; i < cur->n; i++) {
            const thread *t = &cur->t[i];
            const inst *in = &re->prog[t->pc];
            if (in->op == I_MATCH) {
                if (depth > 0) return 1;
                found = 1;
                *ms = t->start, *me = pos;
                break; /* threads below this one have lower priority */
            }
            if (pos < n && consumes(re, in, c) &&
                add_thread(re, ws, depth, nxt, t->pc + 1, t->start, cps, n, pos + 1) && depth > 0)
                return 1;
        }
        if (pos >= n) break;
        tlist *tmp = cur;
        cur = nxt, nxt = tmp;
    }
    return found;
}

/* ---- the backtracker ---- */

enum { BT_FAIL, BT_FOUND, BT_GIVE_UP };

/* Tests and sets the visited bit of (pc, pos); 1 if it was set. */
static int bt_seen(tok_regex_ws *ws, size_t row, int pc) {
    uint64_t *bits = ws->visited + row * (size_t)ws->row_words;
    if (ws->row_stamp[row] != ws->stamp) {
        for (int w = 0; w < ws->row_words; w++) bits[w] = 0;
        ws->row_stamp[row] = ws->stamp;
    }
    uint64_t m = (uint64_t)1 << (pc & 63);
    if (bits[pc >> 6] & m) return 1;
    bits[pc >> 6] |= m;
    return 0;
}

/* Depth-first search from (0, start), preferred branches first, so the first
 * MATCH reached is the match Oniguruma reports. A branch state (SPLIT,
 * position) already visited in this search failed (no captures or
 * backreferences: its outcome depends on nothing else), so each is explored
 * once, and the straight paths between them are at most the program long:
 * O(program size^2 x text) at worst, linear on real patterns. BT_GIVE_UP when
 * a branch lies ws->rows positions or more past `from` or the stack is full. */
static int backtrack(const tok_regex *re, tok_regex_ws *ws, const uint32_t *cps, size_t n, size_t from, size_t start,
                     size_t *me) {
    bt_frame *stack = ws->stack;
    int sp = 0;
    stack[sp++] = (bt_frame){0, start};
    while (sp) {
        int pc = stack[--sp].pc;
        size_t pos = stack[sp].pos;
        for (;;) {
            const inst *in = &re->prog[pc];
            if (in->op <= I_ANYNL) { /* the four instructions that consume a character */
                if (pos >= n || !consumes(re, in, cps[pos])) break;
                pc++, pos++;
            } else if (in->op == I_SPLIT) {
                int x_ok = may_start(re, in->x, cps, n, pos), y_ok = may_start(re, in->y, cps, n, pos);
                if (!x_ok && !y_ok) break;
                /* memoised where the path branches (or may loop without consuming): between two such
                   points a path is straight */
                /* not where y is the end and x consumes: popping y ends the search, so nothing is revisited */
                uint32_t fx = re->first[in->x].flags, fy = re->first[in->y].flags;
                int straight = (fy & FIRST_END) && !(fx & FIRST_ANY);
                if (straight && x_ok && y_ok) {
                    if (sp == BT_STACK) return BT_GIVE_UP;
                    stack[sp++] = (bt_frame){in->y, pos};
                } else if ((x_ok && y_ok) || ((fx | fy) & FIRST_ANY)) {
                    if (pos - from >= ws->rows || sp == BT_STACK) return BT_GIVE_UP;
                    if (bt_seen(ws, pos - from, pc)) break;
                    if (x_ok && y_ok) stack[sp++] = (bt_frame){in->y, pos};
                }
                pc = x_ok ? in->x : in->y;
            } else if (in->op == I_JMP) {
                pc = in->x;
            } else if (in->op == I_ASSERT) {
                if (!assert_holds(in->arg, cps, n, pos)) break;
                pc++;
            } else if (in->op == I_LOOK) {
                size_t a, b;
                if (run(re, ws, 1, pc + 1, cps, n, pos, 1, &a, &b) == in->arg) break;
                pc = in->x;
            } else {
                *me = pos;
                return BT_FOUND;
            }
        }
    }
    return BT_FAIL;
}

int tok_regex_find(const tok_regex *re, tok_regex_ws *ws, const uint32_t *cps, size_t n, size_t from, size_t *start,
                   size_t *end) {
    if (from > n) return 0;
    if (++ws->stamp == 0) {
        memset(ws->row_stamp, 0, sizeof(uint32_t) * ws->rows);
        ws->stamp = 1;
    }
    size_t s;
    for (s = from; s <= n && s - from < ws->rows; s++) {
        if (!may_start(re, 0, cps, n, s)) continue;
        int r = backtrack(re, ws, cps, n, from, s, end);
        if (r == BT_FOUND) {
            *start = s;
            return 1;
        }
        if (r == BT_GIVE_UP) break;
    }
    if (s > n) return 0; /* every start tried */
    return run(re, ws, 0, 0, cps, n, from, 0, start, end);
}

int tok_regex_find_pike(const tok_regex *re, tok_regex_ws *ws, const uint32_t *cps, size_t n, size_t from,
                        size_t *start, size_t *end) {
    if (from > n) return 0;
    return run(re, ws, 0, 0, cps, n, from, 0, start, end);
}
