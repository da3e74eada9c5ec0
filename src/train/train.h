/*
 * train.h: training a language model or a vision transformer (task in
 * opts.model.task): AdamW with warmup + cosine decay, gradient clipping,
 * periodic evaluation, JSONL logs, atomic checkpoints and exact resume. Both
 * tasks run one loop (train.c); a task supplies its batches and evaluation
 * (train_loop.h; the ViT's in train_vision.c).
 *
 * A run directory holds:
 *   config.json              model config + "attnlab": {"train": settings}
 *                            (an uptraining run's settings name its source:
 *                            "init_from")
 *   model.safetensors        the weights (HF names, F32)
 *   train_state.safetensors  weights + AdamW moments + step + data RNG: a
 *                            single file, so resume reads one consistent
 *                            snapshot even if a kill interrupted a save;
 *                            written last in a checkpoint (a cut-short save
 *                            leaves the previous one; none yet: resume
 *                            starts again from step 0)
 *   log.jsonl                one object per step (val_loss on eval steps;
 *                            vision adds val_accuracy, over the test images;
 *                            "precision" of the step's products; a run
 *                            started from another run's weights begins with
 *                            a step-0 line: its source and val_loss there)
 *   tokenizer.json           (optional) the model's tokenizer: the run trains
 *                            on the text's token ids, cached in
 *                            data_tokens.bin (data.h); without one, on bytes
 *
 * Precision (opts.precision, nn/nn.h): in BF16 the run is mixed precision:
 * the products take bf16 inputs and sum in fp32, the weights they read are
 * the BF16 copy of the fp32 arena (attached at start, rounded again after
 * every optimizer step in al_train_step); master weights, gradients, AdamW
 * moments, norms, softmax, the loss and the checkpoint stay fp32, so a run
 * trained in BF16 is an ordinary fp32 run directory.
 */
#ifndef AL_TRAIN_H
#define AL_TRAIN_H

#include "../model/model.h"
#include "data.h"

struct al_train_progress;
/* Receives al_train's progress (al_train_opts.on_step); ctx: on_step_ctx. */
typedef void (*al_train_progress_fn)(const struct al_train_progress *p, void *ctx);

typedef struct al_train_opts {
    al_config model;
    char data[4096];       /* "" = default corpus */
    char images[4096];     /* vision: directory of the Fashion-MNIST IDX files ("" = the Debian package's) */
    char out[4096];
    int batch, context, steps, warmup, eval_every, save_every, eval_tokens;
    int train_subset;      /* vision: train on the first N training images (0: all) */
    int eval_images;       /* vision: test images per periodic evaluation (0: all; the last step uses all) */
    int shards;            /* the batch's gradient as a fixed tree sum of this many shards (0: 1, or under mpirun
                            * one per item; dist.h); saved only when given */
    double lr, min_lr_ratio, weight_decay, beta1, beta2, adam_eps, grad_clip, val_fraction;
    uint64_t seed;
    al_precision precision; /* of the matrix products (F32 by default; config.json "precision") */
    int resume;
    /* Progress (the library prints nothing): called when the loop starts,
     * after every step and when it stops; NULL for none. Not saved. */
    al_train_progress_fn on_step;
    void *on_step_ctx;
    /* Uptraining: the run directory whose config and weights the run starts
     * from ("" none; `train --init-from`): weights copied at step 0, AdamW
     * moments zero, its tokenizer files copied into out. Saved as "init_from". */
    char init_from[4096];
    /* --resume with another --lr, --warmup or --min-lr-ratio: the loop logs the
     * new schedule in log.jsonl at the resumed step and rewrites config.json
     * with it at once. Not saved. */
    int schedule_changed;
} al_train_opts;

void al_train_opts_default(al_train_opts *o);
/* The one place that fills o->data, o->images and o->out: each non-NULL
 * value is copied whole, or, when one would not fit its field, nothing is
 * and err says so in one line ("data path too long (N bytes, at most M)"):
 * a path is never cut. */
int al_train_opts_set_paths(al_train_opts *o, const char *data, const char *images, const char *out, al_err *err);
/* Sets o->init_from the same way (never cut). */
int al_train_opts_set_init_from(al_train_opts *o, const char *dir, al_err *err);
/* Settings <-> JSON object text (the "train" block of config.json). */
char *al_train_opts_to_json(const al_train_opts *o);
int al_train_opts_from_json(al_train_opts *o, const char *json, al_err *err);

/* The settings of the run in dir: the model config and the "train" block of
 * its config.json, o->out = dir. Returns 0, -1 when config.json cannot be
 * read as a model config (or memory ran short), or -2 when it has no valid
 * training settings (not a run directory of al_train; o->model is loaded
 * then); err says which. */
int al_run_load_opts(const char *dir, al_train_opts *o, al_err *err);
/* What --resume reads from the run in dir: train_state.safetensors (the
 * weights w, both AdamW moments m1, m2, n floats each; the step and the data
 * RNG), then log.jsonl rewritten to the lines of steps <= that step. 0, or -1
 * with one line naming the file. */
int al_train_resume_read(float *w, float *m1, float *m2, size_t n, int *step, al_rng *rng, const char *dir,
                         al_err *err);

enum { AL_TRAIN_OK = 0, AL_TRAIN_ERROR = -1, AL_TRAIN_INTERRUPTED = 1, AL_TRAIN_TERMINATED = 2 };
/* Runs (or resumes) training into o->out. Returns AL_TRAIN_OK, AL_TRAIN_ERROR
 * (err filled), AL_TRAIN_INTERRUPTED (SIGINT) or AL_TRAIN_TERMINATED (SIGTERM);
 * after a signal the checkpoint of the current step has been saved. */
int al_train(al_train_opts *o, al_err *err);

/* What al_train tells o->on_step. */
typedef enum {
    AL_TRAIN_STARTED, /* before the first step of this session: step is where it starts */
    AL_TRAIN_STEPPED, /* after every step (evaluated: this step ran an evaluation) */
    AL_TRAIN_STOPPED  /* the loop ended: result as al_train returns it */
} al_train_event;

typedef struct al_train_progress {
    al_train_event event;
    const al_train_opts *opts; /* the run: out, steps, resume (1: continued from its checkpoint) */
    int vision;                /* images and accuracy (1) or tokens (0) */
    int step, start_step;      /* steps done; the step this session started at */
    /* STEPPED: the step's numbers */
    double loss, lr, grad_norm;
    double tokens_per_s, items_per_s; /* this step's throughput (items: images; tokens for a language model) */
    double eta_s;                     /* seconds left at the recent pace */
    int evaluated;
    double val_loss, val_accuracy; /* val_accuracy: NAN for a language model */
    size_t val_count;              /* bytes or images evaluated */
    /* STOPPED */
    int result;
    int signal_after_last; /* a signal came after the last step: the run is complete though result says stopped */
    /* a language model's evaluation in bits per byte of text (the loss / ln 2
     * for a byte model); tokenized: it trains on a tokenizer's ids (the loss is
     * per token) */
    double val_bpb;
    int tokenized;
    /* STARTED of a run from another run's weights (opts->init_from): the
     * evaluation at step 0 is in evaluated, val_loss, val_bpb, val_count */
} al_train_progress;

/* Learning rate at step s (0-based) of the schedule. */
double al_lr_at(const al_train_opts *o, int step);

/* Mean loss (nats/byte) of the model over bytes[0, n) in consecutive windows
 * of a->T (each byte after the first predicted once), at most max_tokens
 * predictions (0 = all). */
int al_eval_bytes(const al_model *m, al_acts *a, const uint8_t *bytes, size_t n, size_t max_tokens, double *loss,
                  size_t *count, al_err *err);
/* The same over token ids[0, n) (nats/token): windows of a->T predictions,
 * a->B windows per forward pass; *count predictions. */
int al_eval_ids(const al_model *m, al_acts *a, const int *ids, size_t n, size_t max_tokens, double *loss,
                size_t *count, al_err *err);
/* Fills in[B*T] (and tg[B*T] unless NULL) with B windows of T predictions
 * from token `start` of ids: prediction i < n_pred reads ids[i] and targets
 * ids[i + 1]; the rest are input 0, target -1. Returns the predictions filled. */
size_t al_eval_windows(const int *ids, size_t n_pred, size_t start, int B, int T, int *in, int *tg);

/* One batch's forward and backward passes, for al_train_step: forward runs
 * with targets and returns the mean loss; backward fills m->g. */
typedef struct al_step_pass {
    void *ctx;
    double (*forward)(void *ctx, al_model *m);
    void (*backward)(void *ctx, al_model *m);
} al_step_pass;

/* A language model's pass over one batch: tokens in[B*T] predicting tg[B*T]
 * (B x T: a's shape). */
typedef struct al_lm_batch {
    al_acts *acts;
    const int *in, *tg;
} al_lm_batch;
al_step_pass al_lm_step_pass(al_lm_batch *b);
/* A language model's batch drawn whole (in, tg: B x T tokens) and stepped
 * shard by shard (al_grad_shards, train/dist.h): al_lm_select_shard points
 * batch at shard j of n, its B/n sequences (batch->acts sized for them). */
typedef struct al_lm_shards {
    al_lm_batch *batch;
    const int *in, *tg;
    int B, T;
} al_lm_shards;
void al_lm_select_shard(void *ctx, int shard, int n);

enum { AL_STEP_OK = 0, AL_STEP_LOSS_NOT_FINITE = 1, AL_STEP_GRAD_NOT_FINITE = 2, AL_STEP_WEIGHTS_NOT_FINITE = 3 };
/* One training step, the same for training, `bench train` and the study's
 * speed benchmark: zero the gradients, forward, backward, the global gradient
 * norm, clip it to o->grad_clip (0: off), AdamW at lr (t: 1-based step; m1,
 * m2: the moments). *loss and *grad_norm are the step's (grad_norm NAN when
 * the loss was not finite). After the update the weights' BF16 copy, if
 * one is attached (al_train_precision_begin), is rounded again, once per
 * step. A non-finite loss or norm leaves the weights
 * unchanged and returns AL_STEP_LOSS_NOT_FINITE / AL_STEP_GRAD_NOT_FINITE;
 * an update that leaves a weight not finite (a learning rate far too large)
 * returns AL_STEP_WEIGHTS_NOT_FINITE: the weights are then lost, and the
 * caller must not save them. */
int al_train_step(al_model *m, const al_step_pass *pass, float *m1, float *m2, const al_train_opts *o, double lr,
                  int t, double *loss, double *grad_norm);

/* The BF16 copy of m's weight arena that BF16 products read
 * (al_bf16_shadow_attach of m->w): attached when p is BF16, nothing for F32.
 * al_train_step keeps an attached copy up to date; detach it with
 * al_train_precision_end before m is freed. 0, or -1 with err. */
int al_train_precision_begin(al_model *m, al_precision p, al_err *err);
void al_train_precision_end(al_model *m);

/* One AdamW update of every parameter from m->g scaled by gscale (t: 1-based
 * step for bias correction); m1, m2: moment arenas shaped like m->w. Where
 * m->w has a BF16 copy (BF16 training) each new weight is rounded into it in
 * the same pass (what al_bf16_shadow_refresh would write after). Returns
 * how many parameter tensors hold a weight that is not finite after it
 * (0: all finite), checked in the same pass. */
int al_adamw_update(al_model *m, float *m1, float *m2, double lr, const al_train_opts *o, int t, float gscale);
/* Global L2 norm of the gradient arena (fixed summation order). */
double al_grad_norm(const al_model *m);

#endif
