/*
 * explore_maps.c: pooling, one-byte log quantisation and the text lines of
 * the explorer's display maps (explore_maps.h).
 */
#include "explore_maps.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* 7 decades below the head's largest |w| are kept; steps per sign */
static const double DECADES = 7.0;
enum { STEPS_U = 254, STEPS_S = 126 };

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t al_base64_encode(const unsigned char *in, size_t n, char *out) {
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
    return o;
}

void al_f32_to_le(const float *v, size_t n, unsigned char *out) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        out[4 * i] = (unsigned char)u;
        out[4 * i + 1] = (unsigned char)(u >> 8);
        out[4 * i + 2] = (unsigned char)(u >> 16);
        out[4 * i + 3] = (unsigned char)(u >> 24);
    }
}

int al_explore_display_side(int T, int f) { return (T + f - 1) / f; }

size_t al_explore_map_cells(int T, int f, int causal) {
    size_t D = (size_t)al_explore_display_side(T, f);
    return causal ? D * (D + 1) / 2 : D * D;
}

size_t al_explore_map_line_cap(int T, int f, int causal) {
    return 64 + (al_explore_map_cells(T, f, causal) + 2) / 3 * 4;
}

/* The step boundaries of a head of largest |w| scale: |w| >= thr[i] for i
 * steps passed, thr[i] = scale 10^((i + 0.5) 7 / steps - 7) (the midpoints
 * between decoded levels on the log scale), and the floor 1e-7 scale. */
typedef struct thresholds {
    double thr[STEPS_U];
    double floor;
    int steps;
} thresholds;

static void thresholds_of(float scale, int is_signed, thresholds *t) {
    t->steps = is_signed ? STEPS_S : STEPS_U;
    t->floor = 1e-7 * scale;
    for (int i = 0; i < t->steps; i++) t->thr[i] = scale * pow(10.0, (i + 0.5) * DECADES / t->steps - DECADES);
}

/* Steps passed by a = |w|: binary search of the boundaries. */
static int level(const thresholds *t, double a) {
    int lo = 0, hi = t->steps; /* thr[0..lo) <= a < thr[hi..) */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a >= t->thr[mid]) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The code of weight w (explore_maps.h). */
static unsigned char code_of(const thresholds *t, float w, int is_signed) {
    double a = fabs((double)w);
    if (!(a >= t->floor) || a == 0) return is_signed ? 128 : 0;
    if (!is_signed) return w < 0 ? 0 : (unsigned char)(1 + level(t, a));
    int l = level(t, a);
    return (unsigned char)(w > 0 ? 129 + l : 127 - l);
}

unsigned char al_explore_code_ref(float w, float scale, int is_signed) {
    const int steps = is_signed ? STEPS_S : STEPS_U;
    double a = fabs((double)w);
    if (!(a >= 1e-7 * scale) || a == 0 || (!is_signed && w < 0)) return is_signed ? 128 : 0;
    int l = 0; /* boundaries passed, counted one by one */
    for (int i = 0; i < steps; i++) l += a >= scale * pow(10.0, (i + 0.5) * DECADES / steps - DECADES);
    return (unsigned char)(!is_signed ? 1 + l : w > 0 ? 129 + l : 127 - l);
}

float al_explore_dequantise(unsigned char code, float scale, int is_signed) {
    if (!is_signed) return code ? (float)(scale * pow(10.0, (code - 1) * DECADES / STEPS_U - DECADES)) : 0.0f;
    if (code == 128) return 0.0f;
    int l = code > 128 ? code - 129 : 127 - code;
    float v = (float)(scale * pow(10.0, l * DECADES / STEPS_S - DECADES));
    return code > 128 ? v : -v;
}

void al_explore_quantise(const float *P, int T, int f, int causal, float *rowbuf, unsigned char *codes, float *scale,
                         int *is_signed) {
    const int D = al_explore_display_side(T, f);
    float m = 0;
    int neg = 0;
    for (size_t i = 0; i < (size_t)T * T; i++) {
        float a = fabsf(P[i]);
        m = a > m ? a : m;
        neg |= P[i] < 0;
    }
    *scale = m;
    *is_signed = neg;
    thresholds t;
    thresholds_of(m, neg, &t);
    size_t o = 0;
    for (int a = 0; a < D; a++) {
        const int cells = causal ? a + 1 : D;
        for (int b = 0; b < cells; b++) rowbuf[b] = 0;
        for (int q = a * f; q < (a + 1) * f && q < T; q++) {
            const float *row = P + (size_t)q * T;
            const int n = causal ? q + 1 : T;
            if (f == 1) {
                for (int k = 0; k < n; k++) rowbuf[k] = row[k];
                continue;
            }
            for (int k = 0; k < n; k++) /* the pair of largest magnitude in each block */
                if (fabsf(row[k]) > fabsf(rowbuf[k / f])) rowbuf[k / f] = row[k];
        }
        for (int b = 0; b < cells; b++) codes[o++] = code_of(&t, rowbuf[b], neg);
    }
}

size_t al_explore_map_line(const unsigned char *codes, size_t n, float scale, int is_signed, int f, char *out) {
    int h = snprintf(out, 64, "~%.9g,%c,%d:", (double)scale, is_signed ? 's' : 'u', f);
    return (size_t)h + al_base64_encode(codes, n, out + h);
}
