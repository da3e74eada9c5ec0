/*
 * train_loop.h: the seam between the shared training loop (train.c) and a
 * task (the language model in train.c, the vision transformer in
 * train_vision.c). Private to src/train/.
 *
 * The loop owns everything a run shares: the optimizer moments, resume from
 * the training state, initialisation, the schedule, the training step
 * (al_train_step: gradient clipping, AdamW), log.jsonl, progress reports,
 * checkpoints and SIGINT/SIGTERM. A task owns its data: it draws the batch of
 * a step, runs forward and backward on its model, and evaluates.
 */
#ifndef AL_TRAIN_LOOP_H
#define AL_TRAIN_LOOP_H

#include "dist.h"
#include "train.h"

typedef struct al_task_hooks {
    void *ctx;
    int vision; /* log and progress wording: bytes/tokens (0) or images and accuracy (1) */
    /* Draws the batch of step `step` (0-based; from rng, which is part of the
     * training state, or from the step number) for pass. */
    void (*draw)(void *ctx, const al_model *m, al_rng *rng, int step);
    al_step_pass pass; /* forward and backward on the drawn batch (the shard select chose) */
    al_shard_select_fn select; /* points pass at shard j of n of the drawn batch (dist.h) */
    uint64_t data_hash;        /* of the task's data: ranks with other data are refused */
    /* Evaluation after `step` steps (final: the run's last step): mean loss,
     * accuracy (NAN when the task has none) and how many items it covered. */
    int (*evaluate)(void *ctx, const al_model *m, int step, int final, double *loss, double *acc, size_t *count,
                    al_err *err);
    double tokens_per_step; /* positions through the blocks per step */
    double items_per_step;  /* images per step (vision) */
    double flops_per_step;
    /* a language model's evaluation: text bytes per prediction, for bits per
     * byte (1 for bytes; 0: the task has none), and whether it trains on a
     * tokenizer's ids */
    double val_bytes_per_token;
    int tokenized;
} al_task_hooks;

/* Runs (or resumes) the loop for a created model with gradients allocated.
 * Returns AL_TRAIN_OK, AL_TRAIN_ERROR, AL_TRAIN_INTERRUPTED or
 * AL_TRAIN_TERMINATED as al_train. */
int al_train_loop(al_train_opts *o, al_model *m, const al_task_hooks *h, al_err *err);

/* The vision task's entry (train_vision.c), called by al_train. */
int al_train_vision(al_train_opts *o, al_err *err);

#endif
