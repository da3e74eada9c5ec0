/*
 * test_attn.c: the shared attention kernels and the MHA/GQA/MQA design.
 *  - blocked sgemm kernels (al_attn_fwd/bwd) == plain double references, on
 *    random shapes including lengths that are not multiples of the block;
 *  - the attention backward == central finite differences;
 *  - decoding token by token with the KV cache == the full forward;
 *  - the cache allocates exactly 2 G d_h values per token per layer.
 */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "core/blas.h"
#include "test.h"
#include "testutil.h"

static void check_kernels(int B, int T, int H, int G, int dk, int pad) {
    al_rng r;
    al_rng_seed(&r, (uint64_t)(B * 1000 + T * 10 + H + G));
    int ld = H * dk + pad; /* strided rows, as designs pass column ranges */
    al_attn_shape s = {B, T, H, G, dk, dk, ld, ld, ld, ld, 1.0f / sqrtf((float)dk)};
    size_t n = (size_t)B * T * ld;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *dO = malloc(n * 4);
    float *o1 = calloc(n, 4), *o2 = calloc(n, 4), *l1 = calloc((size_t)B * H * T, 4), *l2 = calloc((size_t)B * H * T, 4);
    float *dq1 = calloc(n, 4), *dk1 = calloc(n, 4), *dv1 = calloc(n, 4);
    float *dq2 = calloc(n, 4), *dk2 = calloc(n, 4), *dv2 = calloc(n, 4);
    tu_fill(q, n, &r, 1.5f);
    tu_fill(k, n, &r, 1.5f);
    tu_fill(v, n, &r, 1.0f);
    tu_fill(dO, n, &r, 1.0f);
    al_attn_fwd(&s, q, k, v, o1, l1);
    al_attn_fwd_ref(&s, q, k, v, o2, l2);
    /* compare only the columns heads own (padding is not written) */
    double e_o = 0, e_l = test_rel_err(l1, l2, (size_t)B * H * T);
    for (size_t row = 0; row < (size_t)B * T; row++) {
        double e = test_rel_err(o1 + row * ld, o2 + row * ld, (size_t)H * dk);
        e_o = e > e_o ? e : e_o;
    }
    al_attn_bwd(&s, q, k, v, o1, l1, dO, dq1, dk1, dv1);
    al_attn_bwd_ref(&s, q, k, v, o2, l2, dO, dq2, dk2, dv2);
    /* floor the scale: with T = 1 the exact dq, dk are 0 and only rounding remains */
    double e_dq = tu_err_floor(dq1, dq2, n), e_dk = tu_err_floor(dk1, dk2, n), e_dv = tu_err_floor(dv1, dv2, n);
    CHECK_MSG(e_o < 1e-5 && e_l < 1e-5, "B=%d T=%d H=%d G=%d: o err %g lse err %g", B, T, H, G, e_o, e_l);
    CHECK_MSG(e_dq < 1e-4 && e_dk < 1e-4 && e_dv < 1e-4, "B=%d T=%d H=%d G=%d: dq %g dk %g dv %g", B, T, H, G, e_dq,
              e_dk, e_dv);
    free(q), free(k), free(v), free(dO), free(o1), free(o2), free(l1), free(l2);
    free(dq1), free(dk1), free(dv1), free(dq2), free(dk2), free(dv2);
}

/* L = sum(o * R): the analytic dq/dk/dv of the fast kernels against central
 * differences of the double reference forward. */
static void check_fd(void) {
    const int B = 1, T = 9, H = 4, G = 2, dk = 6, ld = H * dk;
    al_attn_shape s = {B, T, H, G, dk, dk, ld, ld, ld, ld, 1.0f / sqrtf((float)dk)};
    size_t n = (size_t)B * T * ld;
    al_rng r;
    al_rng_seed(&r, 7);
    float *x[3], *grad[3], *R = malloc(n * 4), *o = calloc(n, 4), *lse = calloc((size_t)H * T, 4);
    for (int i = 0; i < 3; i++) {
        x[i] = malloc(n * 4);
        grad[i] = calloc(n, 4);
        tu_fill(x[i], n, &r, 1.0f);
    }
    tu_fill(R, n, &r, 1.0f);
    al_attn_fwd(&s, x[0], x[1], x[2], o, lse);
    al_attn_bwd(&s, x[0], x[1], x[2], o, lse, R, grad[0], grad[1], grad[2]);
    /* every 5th entry; k, v only use G heads */
    const size_t ns[3] = {n, n, n};
    double worst = tu_attn_fd_worst(&s, x, grad, ns, R, n, lse, 5, (size_t)G * dk);
    CHECK_MSG(worst < 2e-3, "attention backward vs finite differences: worst %g", worst);
    for (int i = 0; i < 3; i++) free(x[i]), free(grad[i]);
    free(R), free(o), free(lse);
}

static void check_decode(int H, int G, int tied) {
    const int T = 70; /* > one query block of the kernels */
    al_config c = tu_config(48, 80, 2, H, G, 8, T);
    c.tie_word_embeddings = tied;
    tu_decode d;
    if (tu_decode_random_model(&c, (uint64_t)(H * 31 + G * 7 + tied), TU_FLAT, 3, T, &d)) return;
    /* exact cache size: layers x tokens x 2 G d_h floats, nothing more */
    CHECK(d.values_per_token == 2 * (size_t)G * 8);
    CHECK(d.cache_bytes == (size_t)2 * T * 2 * G * 8 * sizeof(float));
    CHECK_MSG(d.worst < 1e-4, "H=%d G=%d tied=%d: decode vs forward rel err %g", H, G, tied, d.worst);
    CHECK(d.refuses_full);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv); /* test the kernels users get */
    const int shapes[][5] = {
        {1, 1, 1, 1, 8}, {1, 7, 2, 1, 4}, {2, 65, 4, 2, 8}, {1, 130, 6, 3, 16}, {3, 64, 4, 4, 8}, {1, 200, 8, 1, 32},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_kernels(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], 0);
        check_kernels(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], 5);
    }
    check_fd();
    check_decode(4, 4, 0);
    check_decode(4, 2, 1);
    check_decode(6, 1, 0);
    float e[5] = {0, 1, -1, -200, 80};
    al_expf_inplace(e, 5);
    CHECK_CLOSE(e[0], 1.0, 1e-6);
    CHECK_CLOSE(e[1], 2.718281828, 1e-6);
    CHECK_CLOSE(e[2], 0.3678794412, 1e-6);
    CHECK(e[3] == 0.0f);
    CHECK(fabs(e[4] / 5.540622384e34 - 1) < 1e-6);
    return TEST_EXIT();
}
