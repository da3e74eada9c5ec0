/*
 * testdump.c: al_testdump MODEL_DIR TOKENS.npy OUT.safetensors
 * Runs one forward/backward of a checkpoint on a token batch and writes the
 * logits [B,T,V], the mean loss [1] and every parameter gradient
 * ("grad.<name>") so the independent PyTorch reference (tests/ref) can
 * compare them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "io/io.h"
#include "model/model.h"

int main(int argc, char **argv) {
    al_blas_fix_kernels(argv);
    if (argc != 4) {
        fprintf(stderr, "usage: al_testdump MODEL_DIR TOKENS.npy OUT.safetensors\n");
        return 2;
    }
    al_err err = {{0}};
    al_model m;
    float *tok = NULL;
    int ndim;
    int64_t shape[AL_ST_MAX_DIMS];
    if (al_model_load(&m, argv[1], NULL, &err) || al_npy_read_f32(argv[2], &tok, &ndim, shape, &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    if (ndim != 2 || shape[1] < 2) {
        fprintf(stderr, "al_testdump: tokens must be [B, T+1]\n");
        return 1;
    }
    int B = (int)shape[0], T = (int)shape[1] - 1, N = B * T, V = m.cfg.vocab_size;
    int *in = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = (int)tok[b * (T + 1) + t];
            tg[b * T + t] = (int)tok[b * (T + 1) + t + 1];
        }
    al_acts a;
    if (al_model_alloc_grads(&m, &err) || al_acts_create(&a, &m, B, T, &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    al_model_zero_grads(&m);
    float loss = (float)al_model_forward(&m, &a, in, tg);
    al_model_backward(&m, &a);
    al_st_out_tensor *out = calloc((size_t)m.n_params + 2, sizeof *out);
    char **names = calloc((size_t)m.n_params, sizeof *names);
    int n = 0;
    out[n++] = (al_st_out_tensor){"logits", a.logits, 3, {B, T, V}};
    out[n++] = (al_st_out_tensor){"loss", &loss, 1, {1}};
    for (int i = 0; i < m.n_params; i++) {
        names[i] = malloc(strlen(m.params[i].name) + 6);
        sprintf(names[i], "grad.%s", m.params[i].name);
        out[n] = (al_st_out_tensor){names[i], m.g + m.params[i].offset, m.params[i].ndim,
                                    {m.params[i].shape[0], m.params[i].shape[1]}};
        n++;
    }
    int rc = al_st_write_f32(argv[3], out, n, NULL, 0, &err);
    if (rc) fprintf(stderr, "al_testdump: %s\n", err.msg);
    for (int i = 0; i < m.n_params; i++) free(names[i]);
    free(names);
    free(out);
    free(in);
    free(tg);
    free(tok);
    al_acts_free(&a);
    al_model_free(&m);
    return rc ? 1 : 0;
}
