/*
 * testdump.c: al_testdump MODEL_DIR TOKENS.npy OUT.safetensors
 *             al_testdump VIT_DIR IMAGES.npy LABELS.npy OUT.safetensors
 *             al_testdump --infer MODEL_DIR TOKENS.npy OUT.safetensors
 * Runs one forward/backward of a checkpoint on a token batch and writes the
 * logits [B,T,V], the mean loss [1] and every parameter gradient
 * ("grad.<name>") so the independent PyTorch reference (tests/ref) can
 * compare them. A vision checkpoint (task "vision") takes float32 images
 * [B, C, S, S] (already standardised) and labels [B] (float32 holding
 * integers) instead, and writes logits [B, num_labels].
 * --infer runs what inference commands run, for any language model (a
 * memory-mapped Hugging Face checkpoint included): the forward over
 * inference activations ("logits" [B, T, V], "loss" [1]), the KV-cache
 * decoder fed the same tokens one at a time ("decode_logits" [B, T, V]; with a
 * BF16 cache: "decode_bf16_cache_logits"), and
 * "memory" [4]: weight bytes used in place from the mapping, bytes copied to
 * the heap, the model's weight bytes, and 1 if the model is mapped.
 *
 * A leading --precision f32|bf16 sets the precision of the matrix products
 * (nn/nn.h) for any form; with bf16 the forward/backward forms also attach
 * the weights' BF16 copy as training does (al_train_precision_begin), so the
 * dump is what one step of bf16 mixed-precision training computes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "io/io.h"
#include "model/model.h"
#include "train/train.h"

/* Writes logits, loss and "grad.<name>" of every parameter to path. */
static int write_dump(const al_model *m, const float *logits, int ndim, const int64_t *lshape, float loss,
                      const char *path) {
    al_err err = {{0}};
    al_st_out_tensor *out = calloc((size_t)m->n_params + 2, sizeof *out);
    char **names = calloc((size_t)m->n_params, sizeof *names);
    int n = 0;
    out[n] = (al_st_out_tensor){"logits", logits, ndim, {0}};
    for (int i = 0; i < ndim; i++) out[n].shape[i] = lshape[i];
    n++;
    out[n++] = (al_st_out_tensor){"loss", &loss, 1, {1}};
    for (int i = 0; i < m->n_params; i++) {
        names[i] = malloc(strlen(m->params[i].name) + 6);
        sprintf(names[i], "grad.%s", m->params[i].name);
        out[n++] = (al_st_out_tensor){names[i], m->g + m->params[i].offset, m->params[i].ndim,
                                      {m->params[i].shape[0], m->params[i].shape[1]}};
    }
    int rc = al_st_write_f32(path, out, n, NULL, 0, &err);
    if (rc) fprintf(stderr, "al_testdump: %s\n", err.msg);
    for (int i = 0; i < m->n_params; i++) free(names[i]);
    free(names);
    free(out);
    return rc;
}

/* The vision form: images [B, C, S, S] and labels [B] -> one step's dump. */
static int dump_vision(al_model *m, const char *images_path, const char *labels_path, const char *out_path) {
    al_err err = {{0}};
    const al_config *c = &m->cfg;
    float *img = NULL, *lab = NULL;
    int ni, nl;
    int64_t si[AL_ST_MAX_DIMS], sl[AL_ST_MAX_DIMS];
    if (al_npy_read_f32(images_path, &img, &ni, si, &err) || al_npy_read_f32(labels_path, &lab, &nl, sl, &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    if (ni != 4 || si[1] != c->num_channels || si[2] != c->image_size || si[3] != c->image_size || nl != 1 ||
        sl[0] != si[0]) {
        fprintf(stderr, "al_testdump: images must be [B, %d, %d, %d] and labels [B]\n", c->num_channels, c->image_size,
                c->image_size);
        return 1;
    }
    const int B = (int)si[0];
    int *labels = malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++) labels[b] = (int)lab[b];
    al_acts a;
    if (al_model_alloc_grads(m, &err) || al_vit_acts_create(&a, m, B, &err) ||
        al_train_precision_begin(m, al_precision_now(), &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    al_model_zero_grads(m);
    float loss = (float)al_vit_forward(m, &a, img, labels);
    al_vit_backward(m, &a);
    const int64_t lshape[2] = {B, c->num_labels};
    int rc = write_dump(m, a.logits, 2, lshape, loss, out_path);
    al_train_precision_end(m);
    free(labels);
    free(img);
    free(lab);
    al_acts_free(&a);
    al_model_free(m);
    return rc ? 1 : 0;
}

/* --infer: forward (inference activations) and decode of tokens [B, T+1]. */
static int dump_infer(const char *dir, const char *tok_path, const char *out_path) {
    al_err err = {{0}};
    al_model m;
    float *tok = NULL;
    int ndim;
    int64_t shape[AL_ST_MAX_DIMS];
    if (al_model_load(&m, dir, NULL, &err) || al_npy_read_f32(tok_path, &tok, &ndim, shape, &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    if (ndim != 2 || shape[1] < 2 || m.cfg.task != AL_TASK_LM) {
        fprintf(stderr, "al_testdump: --infer takes a language model and tokens [B, T+1]\n");
        return 1;
    }
    const int B = (int)shape[0], T = (int)shape[1] - 1, N = B * T, V = m.cfg.vocab_size;
    int *in = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
    float *dec_logits = malloc(sizeof(float) * (size_t)N * V), *dec16_logits = malloc(sizeof(float) * (size_t)N * V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = (int)tok[b * (T + 1) + t];
            tg[b * T + t] = (int)tok[b * (T + 1) + t + 1];
        }
    al_acts a;
    if (al_acts_create_infer(&a, &m, B, T, NULL, 0, &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    float loss = (float)al_model_forward(&m, &a, in, tg);
    int rc = 0;
    for (int kv = 0; kv < 2; kv++) /* an F32 cache, then a BF16 one */
        for (int b = 0; b < B && !rc; b++) {
            al_decoder dec;
            float *dl = kv ? dec16_logits : dec_logits;
            rc = al_decoder_create_kv(&dec, &m, T, kv ? AL_DT_BF16 : AL_DT_F32, &err);
            for (int t = 0; t < T && !rc; t++)
                rc = al_decoder_step(&dec, in[b * T + t], dl + ((size_t)b * T + t) * V, &err);
            if (dec.cache) al_decoder_free(&dec);
        }
    float memory[4] = {(float)m.mapped_bytes, (float)m.copied_bytes, (float)al_model_weight_bytes(&m), (float)m.mapped};
    al_st_out_tensor out[] = {
        {"logits", a.logits, 3, {B, T, V}},
        {"decode_logits", dec_logits, 3, {B, T, V}},
        {"decode_bf16_cache_logits", dec16_logits, 3, {B, T, V}},
        {"loss", &loss, 1, {1}},
        {"memory", memory, 1, {4}},
    };
    if (!rc) rc = al_st_write_f32(out_path, out, 5, NULL, 0, &err);
    if (rc) fprintf(stderr, "al_testdump: %s\n", err.msg);
    free(in);
    free(tg);
    free(dec_logits);
    free(dec16_logits);
    free(tok);
    al_acts_free(&a);
    al_model_free(&m);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    al_blas_fix_kernels(argv);
    if (argc >= 3 && strcmp(argv[1], "--precision") == 0) {
        al_precision p;
        if (al_precision_from_name(argv[2], &p)) {
            fprintf(stderr, "al_testdump: --precision must be f32, bf16 or auto, got '%s'\n", argv[2]);
            return 2;
        }
        al_precision_set(p);
        argv[2] = argv[0];
        argv += 2;
        argc -= 2;
    }
    if (argc == 5 && strcmp(argv[1], "--infer") == 0) return dump_infer(argv[2], argv[3], argv[4]);
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: al_testdump [--precision f32|bf16] MODEL_DIR TOKENS.npy OUT.safetensors\n"
                        "       al_testdump [--precision f32|bf16] VIT_DIR IMAGES.npy LABELS.npy OUT.safetensors\n"
                        "       al_testdump [--precision f32|bf16] --infer MODEL_DIR TOKENS.npy OUT.safetensors\n");
        return 2;
    }
    al_err err = {{0}};
    al_model m;
    float *tok = NULL;
    int ndim;
    int64_t shape[AL_ST_MAX_DIMS];
    if (al_model_load(&m, argv[1], NULL, &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    if ((m.cfg.task == AL_TASK_VISION) != (argc == 5)) {
        fprintf(stderr, "al_testdump: a %s model takes %s\n", m.cfg.task == AL_TASK_VISION ? "vision" : "language",
                m.cfg.task == AL_TASK_VISION ? "IMAGES.npy LABELS.npy" : "TOKENS.npy");
        return 2;
    }
    if (argc == 5) return dump_vision(&m, argv[2], argv[3], argv[4]);
    if (al_npy_read_f32(argv[2], &tok, &ndim, shape, &err)) {
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
    if (al_model_alloc_grads(&m, &err) || al_acts_create(&a, &m, B, T, &err) ||
        al_train_precision_begin(&m, al_precision_now(), &err)) {
        fprintf(stderr, "al_testdump: %s\n", err.msg);
        return 1;
    }
    al_model_zero_grads(&m);
    float loss = (float)al_model_forward(&m, &a, in, tg);
    al_model_backward(&m, &a);
    const int64_t lshape[3] = {B, T, V};
    int rc = write_dump(&m, a.logits, 3, lshape, loss, argv[3]);
    al_train_precision_end(&m);
    free(in);
    free(tg);
    free(tok);
    al_acts_free(&a);
    al_model_free(&m);
    return rc ? 1 : 0;
}
