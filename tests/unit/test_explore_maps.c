/*
 * test_explore_maps.c: the explorer's 1-byte display maps (explore_maps.h).
 * al_explore_quantise (block pooling, binary search of the step midpoints)
 * against a plain reference (every pair visited per display cell, the
 * midpoints counted one by one) on random odd shapes, causal and
 * bidirectional, non-negative and signed weights, factors 1 to 7; decoded
 * values within the stated bounds (3.3 % unsigned, 6.7 % signed); base64
 * against RFC 4648's test vectors; the text line's prefix.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/explore_maps.h"
#include "core/core.h"
#include "test.h"

/* Random weights: softmax-like rows (positive, a few large) or signed, masked pairs 0. */
static void random_head(float *P, int T, int causal, int is_signed, al_rng *r) {
    for (int q = 0; q < T; q++)
        for (int k = 0; k < T; k++) {
            float x = al_rng_normal(r) * 4.0f;
            float v = is_signed ? x * expf(al_rng_normal(r) * 3.0f) : expf(x) / (float)T;
            if (!is_signed && k % 5 == 3) v = 0.0f; /* exact zeros */
            P[(size_t)q * T + k] = causal && k > q ? 0.0f : v;
        }
}

/* The display cell (a, b) by visiting its pairs: the one of largest magnitude. */
static float pooled_ref(const float *P, int T, int f, int causal, int a, int b) {
    float best = 0;
    for (int q = a * f; q < (a + 1) * f && q < T; q++)
        for (int k = b * f; k < (b + 1) * f && k < T; k++)
            if (!(causal && k > q) && fabsf(P[(size_t)q * T + k]) > fabsf(best)) best = P[(size_t)q * T + k];
    return best;
}

static void check_shape(int T, int f, int causal, int is_signed, al_rng *r) {
    float *P = malloc(sizeof(float) * (size_t)T * T), *rowbuf = malloc(sizeof(float) * (size_t)T);
    unsigned char *codes = malloc(al_explore_map_cells(T, f, causal));
    CHECK(P && rowbuf && codes);
    if (!P || !rowbuf || !codes) return;
    random_head(P, T, causal, is_signed, r);
    float scale, m = 0;
    int sig, neg = 0;
    for (size_t i = 0; i < (size_t)T * T; i++) {
        m = fabsf(P[i]) > m ? fabsf(P[i]) : m;
        neg |= P[i] < 0;
    }
    al_explore_quantise(P, T, f, causal, rowbuf, codes, &scale, &sig);
    CHECK(scale == m && sig == neg);
    const int D = al_explore_display_side(T, f);
    CHECK(D == (T + f - 1) / f);
    size_t o = 0;
    int mismatches = 0, out_of_bound = 0;
    const double bound = sig ? 0.067 : 0.033;
    for (int a = 0; a < D; a++)
        for (int b = 0; b < (causal ? a + 1 : D); b++, o++) {
            float w = pooled_ref(P, T, f, causal, a, b);
            mismatches += codes[o] != al_explore_code_ref(w, scale, sig);
            float v = al_explore_dequantise(codes[o], scale, sig);
            if (fabsf(w) >= 1e-7f * scale) out_of_bound += fabs((double)v - w) > bound * fabs((double)w);
            else out_of_bound += v != 0.0f;
        }
    CHECK(o == al_explore_map_cells(T, f, causal));
    CHECK_MSG(mismatches == 0, "T %d f %d causal %d signed %d: %d codes differ from the reference", T, f, causal,
              is_signed, mismatches);
    CHECK_MSG(out_of_bound == 0, "T %d f %d causal %d signed %d: %d decoded values beyond %.1f %%", T, f, causal,
              is_signed, out_of_bound, 100 * bound);
    free(P);
    free(rowbuf);
    free(codes);
}

static void check_base64(void) {
    const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *want[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char out[16];
        size_t n = al_base64_encode((const unsigned char *)in[i], strlen(in[i]), out);
        out[n] = 0;
        CHECK_MSG(!strcmp(out, want[i]), "base64(%s) = %s, want %s", in[i], out, want[i]);
    }
    const float v = 1.0f;
    unsigned char le[4];
    al_f32_to_le(&v, 1, le);
    CHECK(le[0] == 0 && le[1] == 0 && le[2] == 0x80 && le[3] == 0x3f);
}

static void check_line(void) {
    unsigned char codes[3] = {0, 1, 255};
    char line[128];
    size_t n = al_explore_map_line(codes, 3, 0.5f, 0, 2, line);
    line[n] = 0;
    CHECK_MSG(!strcmp(line, "~0.5,u,2:AAH/"), "line %s", line);
    /* decoded ends of the scale: the largest code is the head's maximum, code 1 is 1e-7 of it */
    CHECK(al_explore_dequantise(255, 0.5f, 0) == 0.5f && al_explore_dequantise(0, 0.5f, 0) == 0.0f);
    CHECK(fabsf(al_explore_dequantise(1, 0.5f, 0) - 0.5e-7f) < 1e-12f);
    CHECK(al_explore_dequantise(255, 2.0f, 1) == 2.0f && al_explore_dequantise(1, 2.0f, 1) == -2.0f);
    CHECK(al_explore_dequantise(128, 2.0f, 1) == 0.0f);
}

int main(void) {
    al_rng r;
    al_rng_seed(&r, 20);
    const int Ts[] = {1, 7, 33, 100};
    const int fs[] = {1, 2, 3, 7};
    for (int ti = 0; ti < 4; ti++)
        for (int fi = 0; fi < 4; fi++)
            for (int causal = 0; causal < 2; causal++)
                for (int sig = 0; sig < 2; sig++) check_shape(Ts[ti], fs[fi], causal, sig, &r);
    check_base64();
    check_line();
    return TEST_EXIT();
}
