/*
 * test.h: a minimal assertion harness for the C unit tests. Each test file is
 * one executable; CHECK* record failures with file:line and keep going; main
 * returns TEST_EXIT() (non-zero if anything failed).
 */
#ifndef AL_TEST_H
#define AL_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures_ = 0;
static int test_checks_ = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        test_checks_++;                                                          \
        if (!(cond)) {                                                           \
            test_failures_++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        test_checks_++;                                                          \
        if (!(cond)) {                                                           \
            test_failures_++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_CLOSE(a, b, tol)                                                   \
    do {                                                                         \
        double a_ = (a), b_ = (b);                                               \
        double s_ = fabs(b_) > 1.0 ? fabs(b_) : 1.0;                             \
        CHECK_MSG(fabs(a_ - b_) <= (tol) * s_, "%s = %.9g, %s = %.9g", #a, a_, #b, b_); \
    } while (0)

#define TEST_EXIT()                                                              \
    (fprintf(stderr, "%d checks, %d failed\n", test_checks_, test_failures_),    \
     test_failures_ ? 1 : 0)

/* max |a-b| / max(max |b|, 1e-30): the relative error used across tests */
static inline double test_rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return md / (mb > 1e-30 ? mb : 1e-30);
}

#endif
