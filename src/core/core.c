/*
 * core.c: errors, aligned memory, the xoshiro256** RNG, clocks, thread count
 * and strict number parsing. See core.h for the conventions.
 */
#include "core.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef __clang_analyzer__ /* core.h's analyzer-only wrappers; here are the functions */
#undef al_errf
#undef al_err_prefix
#endif

static int utf8_continuation(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

/* An error message into msg[cap]. One that does not fit keeps its start and
 * its end around "..." (a long path is cut in its middle, and the reason at
 * the end of the line stays); without memory for the whole text, its start. */
static void err_vformat(char *msg, size_t cap, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
static void err_vformat(char *msg, size_t cap, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *full = n >= 0 && (size_t)n >= cap && cap >= 8 ? malloc((size_t)n + 1) : NULL;
    if (!full) {
        al_vstrfmt(msg, cap, fmt, again);
        va_end(again);
        return;
    }
    vsnprintf(full, (size_t)n + 1, fmt, again);
    va_end(again);
    size_t head = (cap - 4) / 2, from = (size_t)n - (cap - 4 - head); /* whole characters only */
    while (head > 0 && utf8_continuation(full[head])) head--;
    while (from < (size_t)n && utf8_continuation(full[from])) from++;
    memcpy(msg, full, head);
    memcpy(msg + head, "...", 3);
    memcpy(msg + head + 3, full + from, (size_t)n - from + 1);
    free(full);
}

/* Keeps a message on one line: a control character (a newline or tab from a
 * file's own text that the message quotes) becomes '?'. */
static void err_one_line(char *msg) {
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?';
}

int al_errf(al_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err_vformat(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err_one_line(err->msg);
    }
    return -1;
}

int al_err_prefix(al_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[AL_ERR_LEN], old[AL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    err_vformat(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    al_errf(err, "%s: %s", prefix, old);
    return -1;
}

int al_err_is_oom(const al_err *err) {
    return err && (strstr(err->msg, "out of memory") || strstr(err->msg, "Cannot allocate memory"));
}

int al_vstrfmt(char *buf, size_t cap, const char *fmt, va_list ap) {
    int n = vsnprintf(buf, cap, fmt, ap);
    if (n < 0 || (size_t)n < cap) return n < 0 ? -1 : 0;
    if (cap < 4) return 1;
    /* say that it was cut, after a whole UTF-8 character */
    size_t k = cap - 4;
    while (k > 0 && utf8_continuation(buf[k])) k--;
    memcpy(buf + k, "...", 4);
    return 1;
}

int al_strfmt(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = al_vstrfmt(buf, cap, fmt, ap);
    va_end(ap);
    return rc;
}

char *al_sprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void al_text_vprintf(al_text *t, const char *fmt, va_list ap) {
    if (t->oom) return;
    for (;;) {
        va_list again;
        va_copy(again, ap);
        int k = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, again);
        va_end(again);
        if (k < 0) {
            t->oom = 1;
            return;
        }
        if (t->s && t->len + (size_t)k < t->cap) {
            t->len += (size_t)k;
            return;
        }
        /* grow by doubling (appends stay linear overall), then print again */
        size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)k;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

void al_text_printf(al_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    al_text_vprintf(t, fmt, ap);
    va_end(ap);
}

void al_text_csv_field(al_text *t, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        al_text_printf(t, "%s", s);
        return;
    }
    al_text_printf(t, "\"");
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            al_text_printf(t, "\"\"");
        else
            al_text_printf(t, "%c", *p);
    }
    al_text_printf(t, "\"");
}

const char *al_text_str(const al_text *t) { return t->s ? t->s : ""; }

void *al_alloc(size_t bytes) {
    /* round up: aligned_alloc wants a multiple of the alignment */
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, n);
    if (p) memset(p, 0, n);
    return p;
}

void al_free(void *p) { free(p); }

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void al_rng_seed(al_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t al_rng_u64(al_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double al_rng_uniform(al_rng *r) { return (double)(al_rng_u64(r) >> 11) * 0x1.0p-53; }

float al_rng_normal(al_rng *r) {
    double u1 = al_rng_uniform(r), u2 = al_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

double al_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int al_threads(void) { return omp_get_max_threads(); }
void al_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
}

int al_parse_int(const char *s, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int al_parse_double(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}
