/*
 * core.h: the small shared vocabulary of attnlab: errors, aligned memory, a
 * reproducible RNG, clocks and thread counts (and, through dtype.h, element
 * types and their conversions).
 *
 * Errors: every library function that can fail takes an `al_err *` and returns
 * 0 on success or -1 on failure, having written one line (no trailing newline)
 * into err->msg saying what failed and why. Only the CLI prints it and exits.
 */
#ifndef AL_CORE_H
#define AL_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtype.h"

#define AL_ERR_LEN 512
typedef struct al_err {
    char msg[AL_ERR_LEN];
} al_err;

/* Writes a printf-style message into err (if err is non-NULL); returns -1 so
 * callers can write `return al_errf(err, "...")`. A message longer than
 * AL_ERR_LEN - 1 bytes keeps its start and its end around "..." (a long
 * path loses its middle, the reason at the end stays). Control characters
 * (a newline quoted from a corrupt file) become '?', so it is one line. */
int al_errf(al_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes an existing message: "what: <old message>" (cut as al_errf
 * cuts). Returns -1. */
int al_err_prefix(al_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#ifdef __clang_analyzer__
/* Tells clang's static analyzer (make analyze, docs/static-analysis.md) what it cannot
 * see across files: both always return -1, so `if (al_errf(...))` is taken. */
#define al_errf(...) (al_errf(__VA_ARGS__), -1)
#define al_err_prefix(...) (al_err_prefix(__VA_ARGS__), -1)
#endif

/* Whether err says out of memory: every allocation failure is reported with
 * "out of memory" or strerror(ENOMEM) in its line (the fault sweep checks
 * each). For callers that take a failed read for a verdict on the file (a
 * study run to train again) and must not when memory ran short. */
int al_err_is_oom(const al_err *err);

/* Bounded text where a cut is acceptable (messages, labels): printf into
 * buf[cap]; a result that does not fit is cut after a whole UTF-8 character,
 * ends in "..." and returns 1 (0 when it fit, -1 on a format error).
 * al_vstrfmt is the same with a va_list. */
int al_strfmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int al_vstrfmt(char *buf, size_t cap, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* Text that must not be cut (paths): printf into a new malloc'd string;
 * NULL when out of memory. Free with free(). */
char *al_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A growing text buffer for the text files and reports attnlab builds in
 * memory before writing them whole (CSV, Markdown, HTML). Appends cannot
 * fail where they are written: the first allocation that fails sets oom and
 * every later append does nothing, so the writer checks oom once at the end.
 * Start from {0}; s is NUL-terminated once anything was appended; free s. */
typedef struct al_text {
    char *s;
    size_t len, cap;
    int oom;
} al_text;
void al_text_printf(al_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void al_text_vprintf(al_text *t, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Appends s as one CSV field (RFC 4180): quoted, with its quotes doubled,
 * when it holds a comma, a quote or a line break. */
void al_text_csv_field(al_text *t, const char *s);
/* The text so far ("" for none). */
const char *al_text_str(const al_text *t);

/* 64-byte aligned allocation (zeroed); NULL on failure. Free with al_free. */
void *al_alloc(size_t bytes);
void al_free(void *p);

/* xoshiro256** generator: small state that checkpoints can save and restore
 * so resumed runs draw exactly the same numbers. */
typedef struct al_rng {
    uint64_t s[4];
} al_rng;
void al_rng_seed(al_rng *r, uint64_t seed);
uint64_t al_rng_u64(al_rng *r);
double al_rng_uniform(al_rng *r);          /* [0, 1) */
float al_rng_normal(al_rng *r);            /* standard normal (Box-Muller) */

double al_now(void);                       /* monotonic seconds */
int al_threads(void);                      /* worker threads (default: cores) */
void al_set_threads(int n);

/* Safe string -> number parsing for flags and configs: whole string must parse. */
int al_parse_int(const char *s, long *out);
int al_parse_double(const char *s, double *out);

#endif
