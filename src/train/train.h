/*
 * train.h: training a language model or a vision transformer (task in
 * opts.model.task): AdamW with warmup + cosine decay, gradient clipping,
 * periodic evaluation, JSONL logs, atomic checkpoints and exact resume. Both
 * tasks run one loop (train.c); a task supplies its batches and evaluation
 * (train_loop.h; the ViT's in train_vision.c).
 *
 * A run directory holds:
 *   config.json              model config + "attnlab": {"train": settings}
 *   model.safetensors        the weights (HF names, F32)
 *   train_state.safetensors  weights + AdamW moments + step + data RNG: a
 *                            single file, so resume reads one consistent
 *                            snapshot even if a kill interrupted a save
 *   log.jsonl                one object per step (val_loss on eval steps;
 *                            vision adds val_accuracy, over the test images)
 */
#ifndef AL_TRAIN_H
#define AL_TRAIN_H

#include "../model/model.h"
#include "data.h"

typedef struct al_train_opts {
    al_config model;
    char data[4096];       /* "" = default corpus */
    char images[4096];     /* vision: directory of the Fashion-MNIST IDX files ("" = the Debian package's) */
    char out[4096];
    int batch, context, steps, warmup, eval_every, save_every, eval_tokens;
    int train_subset;      /* vision: train on the first N training images (0: all) */
    int eval_images;       /* vision: test images per periodic evaluation (0: all; the last step uses all) */
    double lr, min_lr_ratio, weight_decay, beta1, beta2, adam_eps, grad_clip, val_fraction;
    uint64_t seed;
    int resume;
    int progress;          /* 1: progress line on stderr */
} al_train_opts;

void al_train_opts_default(al_train_opts *o);
/* Settings <-> JSON object text (the "train" block of config.json). */
char *al_train_opts_to_json(const al_train_opts *o);
int al_train_opts_from_json(al_train_opts *o, const char *json, al_err *err);

enum { AL_TRAIN_OK = 0, AL_TRAIN_ERROR = -1, AL_TRAIN_INTERRUPTED = 1, AL_TRAIN_TERMINATED = 2 };
/* Runs (or resumes) training into o->out. Returns AL_TRAIN_OK, AL_TRAIN_ERROR
 * (err filled), AL_TRAIN_INTERRUPTED (SIGINT) or AL_TRAIN_TERMINATED (SIGTERM);
 * after a signal the checkpoint of the current step has been saved. */
int al_train(al_train_opts *o, al_err *err);

/* Learning rate at step s (0-based) of the schedule. */
double al_lr_at(const al_train_opts *o, int step);

/* Mean loss (nats/byte) of the model over bytes[0, n) in consecutive windows
 * of a->T (each byte after the first predicted once), at most max_tokens
 * predictions (0 = all). */
int al_eval_bytes(const al_model *m, al_acts *a, const uint8_t *bytes, size_t n, size_t max_tokens, double *loss,
                  size_t *count, al_err *err);

/* One AdamW update of every parameter from m->g scaled by gscale (t: 1-based
 * step for bias correction); m1, m2: moment arenas shaped like m->w. */
void al_adamw_update(al_model *m, float *m1, float *m2, double lr, const al_train_opts *o, int t, float gscale);
/* Global L2 norm of the gradient arena (fixed summation order). */
double al_grad_norm(const al_model *m);

#endif
