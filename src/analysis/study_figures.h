/*
 * study_figures.h: the figures of the study's report (docs/study.md), each
 * drawn into a directory as STEM.png with STEM.json (every number shown) and
 * STEM.npy (float32) beside it:
 *   attnmaps.png         attention maps of one language model over text
 *   poly_vs_softmax.png  the CLS token's attention of a softmax and a poly ViT
 *   loss_curves.png      validation loss during training, one line per design
 *   kv_vs_loss.png       KV-cache size against final validation loss
 * The inputs are run directories and numbers, not the study's plan, so the
 * study (src/study/) sits above this file and nothing here knows about it.
 * Each function fills an al_study_figure (the file names and a caption for
 * the report) and prints nothing.
 */
#ifndef AL_STUDY_FIGURES_H
#define AL_STUDY_FIGURES_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"

/* One figure of the report and its data files. */
typedef struct al_study_figure {
    char file[64];
    char data[3][64]; /* "" when unused */
    char caption[512];
} al_study_figure;

/* Mean, extremes and sample standard deviation (0 for one value) of n
 * values: the figures and the report summarise seeds this way. */
typedef struct al_stat {
    double mean, min, max, std;
    int n;
} al_stat;
al_stat al_stat_of(const double *v, int n);

/* attnmaps.png: the language model in model_dir (titled `title`, "MHA", of
 * seed `seed`), layers {0, L-1} x heads {0, H-1}, over the first
 * min(max_tokens, len) bytes of text (also written to attnmap_input.txt),
 * log scale 1e-6..1, x = query, y = key; STEM.npy [pair, query, key]. */
int al_fig_attnmaps(const char *out_dir, const char *model_dir, const char *title, uint64_t seed, const uint8_t *text,
                    size_t len, int max_tokens, al_study_figure *fig, al_err *err);

/* What poly_vs_softmax.png shows: the CLS weights' range of each model,
 * where they come from, and the image's class. */
typedef struct al_cls_figure {
    double min[2], max[2]; /* softmax model, poly model */
    int layer, head, image, label;
} al_cls_figure;

/* poly_vs_softmax.png: the CLS token's attention over the patch grid of two
 * ViTs (dirs[0] softmax, dirs[1] poly, titled titles[]; last layer, head 0)
 * for the first test image of the Fashion-MNIST files in images_dir, each
 * panel with its own range (signed weights: symmetric, RdYlBu_r). */
int al_fig_cls_attention(const char *out_dir, const char *const dirs[2], const char *const titles[2],
                         const char *images_dir, al_cls_figure *cls, al_study_figure *fig, al_err *err);

/* One trained language model: its evaluations during training and its
 * final measured validation loss. */
typedef struct al_fig_run {
    uint64_t seed;
    int n;                  /* evaluations */
    const int *step;        /* [n] */
    const double *val_loss; /* [n] nats/byte */
    double final_val_loss;
} al_fig_run;

/* One design of the comparison and its runs (one per seed, in seed order). */
typedef struct al_fig_design {
    const char *name, *title; /* "mha", "MHA" */
    double kv_pct_of_mha;
    size_t kv_bytes_per_token;
    const al_fig_run *runs;
    int n_runs; /* 0: the design is left out */
    /* converted from MHA (kv_vs_loss.png, study --conversions): per seed the
     * loss after uptraining, and from scratch for the same total steps; the
     * cache of the converted model (n_conv 0: none) */
    const double *conv_loss, *long_loss;
    int n_conv;
    double conv_kv_pct_of_mha;
} al_fig_design;

/* loss_curves.png: validation loss against training tokens (steps x
 * tokens_per_step), one line per design (mean over its runs, band min..max
 * with several seeds) and the unigram baseline (dashed); STEM.npy [design,
 * evaluation, (tokens, mean, min, max)]. eval_tokens: validation bytes per
 * evaluation, for the footnote. */
int al_fig_loss_curves(const char *out_dir, const al_fig_design *d, int n_designs, int n_seeds, double tokens_per_step,
                       double total_tokens, int eval_tokens, double unigram_loss, al_study_figure *fig, al_err *err);

/* kv_vs_loss.png: one labelled point per design, KV cache (% of MHA) against
 * the final validation loss (mean; error bar min..max over seeds); STEM.npy
 * [design, (kv_pct_of_mha, mean, min, max)]. Designs with conversions
 * (n_conv > 0) add two unlabelled points in the design's colour, a diamond
 * (converted from MHA and uptrained) and a square (from scratch for the same
 * total steps), with a legend of the three markers; their rows follow the
 * designs' in STEM.npy, diamonds then squares, in design order. */
int al_fig_kv_vs_loss(const char *out_dir, const al_fig_design *d, int n_designs, int n_seeds, al_study_figure *fig,
                      al_err *err);

#endif
