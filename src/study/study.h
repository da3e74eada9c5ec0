/*
 * study.h: `attnlab study` as a library module (docs/study.md): the budgets,
 * the typed plan (every run an al_train_opts plus what the study needs to
 * know about it), running it (train or resume each run, measure it, the
 * side-by-side speed benchmark, the figures of src/analysis/study_figures.h,
 * the reports), deciding whether a run directory is complete, partial or
 * stale (resume), reading a run's log.jsonl, the measurements made on a
 * trained model (validation loss, KV-cache size, decode speed at a long
 * context, head effective ranks; the unigram baseline of the corpus), and a
 * Fashion-MNIST subset on disk for short vision runs.
 *
 * Files: plan.c (budgets, the plan), study.c (running it), runs.c (run
 * directories, logs, measurements), report.c (report.json, report.md,
 * report.html).
 *
 * The caller makes the plan (al_study_plan_init), fills every run's
 * al_train_opts, and runs it (al_study_run_plan); progress, the heads figure
 * and stop requests go through al_study_hooks. Nothing here prints.
 */
#ifndef AL_STUDY_H
#define AL_STUDY_H

#include "../analysis/kv_frontier.h"
#include "../analysis/study_figures.h"
#include "../core/core.h"
#include "../core/cpu.h"
#include "../model/model.h"
#include "../train/data.h"
#include "../train/train.h"
#include "../train/vision.h"

/* ---- paths ---- */

/* Bytes of every path field below, its NUL included (Linux's PATH_MAX: no
 * longer path can be opened). */
enum { AL_STUDY_PATH_LEN = 4096 };

/* Formats a path into dst[cap]. The one way the path fields of the plan and
 * the results are filled: a path that would not fit is refused (dst = "",
 * one line in err: "WHAT path too long (N bytes, at most M)"), never cut. */
int al_study_set_path(char *dst, size_t cap, const char *what, al_err *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* DIR/NAME, malloc'd (free it); NULL when out of memory (err says so). The
 * files of a run or study directory are named through this. */
char *al_study_join(const char *dir, const char *name, al_err *err);

/* ---- budgets ---- */

/* One budget: how long every run trains and how much is measured. The
 * language models keep their presets' shapes (docs/presets.md); only the
 * schedule and the batch change with the budget. */
typedef struct al_study_budget {
    const char *name, *summary;
    int seeds; /* seeds per design (language models and ViTs) */
    /* language models */
    int lm_context, lm_batch, lm_steps, lm_warmup, lm_eval_every, lm_eval_tokens;
    int lm_save_every; /* checkpoints (0: only at the end) */
    double lm_lr;
    long lm_final_eval_tokens; /* validation bytes for the reported loss (0: the whole split) */
    int decode_context, decode_tokens;
    int speed_rounds, speed_steps; /* speed benchmark: interleaved rounds, timed training steps per round */
    int attnmap_tokens;            /* length of the long input of attnmaps.png */
    /* vision transformers (2 x 2 patches: 196 patches, poly scale 1/14) */
    int vit_layers, vit_hidden, vit_heads, vit_batch, vit_steps, vit_warmup, vit_eval_every, vit_eval_images;
    int vit_save_every;                    /* checkpoints (0: only at the end) */
    int vit_train_images, vit_test_images; /* first N of each split (0: all) */
    double vit_lr;
    /* nominal seconds on an idle 2-core machine, for the ETA before any run
     * has been timed */
    double lm_step_s, vit_step_s, lm_measure_s, vit_measure_s, figures_s;
    /* the KV frontier (kvfront.c): predictions per design and method (the
     * first of the validation split), the quantised caches' group and residual */
    int kv_tokens, kv_group, kv_residual;
} al_study_budget;

/* "tiny" (tests, seconds), "quick", "standard", "full"; NULL if unknown. */
const al_study_budget *al_study_budget_find(const char *name);
/* How many times the budgets' nominal step seconds (BF16 products on an idle
 * AMX Xeon) a language model's (vision 0) or ViT's training step takes in
 * this precision on this CPU set: measured factors, for the ETA before any
 * run has been timed (study.c). */
double al_study_pace(al_precision precision, al_cpu_level cpu, int vision);

/* The five KV designs of the study, in report order: their preset names
 * (mha gqa mqa mla lrkv) and display names. */
enum { AL_STUDY_DESIGNS = 5 };
const char *al_study_design(int i);
const char *al_study_design_title(int i);

/* ---- the plan ---- */

/* What a run's directory holds compared with its plan (al_study_run_state). */
typedef enum {
    AL_RUN_NEW = 0,  /* nothing usable: train from scratch */
    AL_RUN_PARTIAL,  /* same settings, stopped at *step < steps: resume */
    AL_RUN_COMPLETE, /* trained to the last step, final checkpoint and log line present */
    AL_RUN_STALE     /* different settings or inconsistent files: train again from scratch */
} al_run_state;

/* What a run is for, beyond the comparison of the designs (--conversions,
 * docs/study.md): a design converted from the MHA run and uptrained for a
 * tenth of its steps, or the design trained from scratch for the same total
 * (110 % of the MHA run's steps). */
typedef enum { AL_CONV_NONE = 0, AL_CONV_UPTRAIN, AL_CONV_SCRATCH } al_conv_kind;

/* One planned training run: what al_train gets, and what the study needs to
 * know about it. */
typedef struct al_plan_run {
    al_train_opts opts; /* model and training settings, filled by the caller; opts.out: dir */
    int vision;         /* 0: a language model, 1: a vision transformer */
    int design;         /* language models: index into al_study_design (-1 for ViTs) */
    int poly;           /* ViTs: 1 with the poly score, 0 with softmax */
    uint64_t seed;
    char name[64];      /* "mha-seed1337", "vit-poly-seed1337" */
    char dir[AL_STUDY_PATH_LEN]; /* OUT/runs/NAME */
    /* what the run directory holds (al_study_run_plan fills these) */
    al_run_state state;
    int step; /* the saved step */
    char why[256];
    /* --conversions (conversions.c): 0 for a run of the comparison, else
     * what the run is for; source: index of the MHA run it starts from;
     * conv_dir: the converted model (AL_CONV_UPTRAIN) */
    al_conv_kind conv_kind;
    int conv_source;
    int conv_redo; /* its source is trained again in this invocation: convert again */
    char conv_dir[AL_STUDY_PATH_LEN];
} al_plan_run;

enum { AL_STUDY_MAX_SEEDS = 16 };

/* What `attnlab study` asks for. */
typedef struct al_study_settings {
    const al_study_budget *budget;
    const char *out;    /* the study directory */
    const char *data;   /* the language models' text (NULL: the default corpus) */
    const char *images; /* the Fashion-MNIST files (NULL: the Debian package's) */
    int no_vision;      /* leave the vision transformers out */
    uint64_t first_seed;
    int n_seeds;  /* 1..AL_STUDY_MAX_SEEDS (0: the budget's) */
    int max_runs; /* train at most this many runs, then stop (0: all) */
    al_precision precision; /* of every run's matrix products (a run saved in another one is stale) */
    int kv_tokens;          /* predictions per point of the KV frontier (0: the budget's) */
    int conversions;        /* also convert the MHA run(s) to the other designs, uptrain, compare (conversions.c) */
} al_study_settings;

typedef struct al_study_plan {
    const al_study_budget *budget;
    char out[AL_STUDY_PATH_LEN];
    const char *data;  /* as given (NULL: the default corpus) */
    al_corpus corpus;  /* the language models' text: validation loss, unigram baseline, attention maps */
    int vision;        /* the vision pair is planned (its images were found) */
    int no_vision;     /* it was left out on request */
    char images[AL_STUDY_PATH_LEN]; /* the directory the ViTs train from (a subset under out, or the source) */
    uint64_t seeds[AL_STUDY_MAX_SEEDS];
    int n_seeds, max_runs;
    al_precision precision; /* every run's opts.precision */
    al_plan_run *runs; /* seed-major: the five designs, then the softmax and poly ViTs */
    int n_runs;
    double t0; /* al_now() when planned: the report's wall time */
    int kv_tokens; /* predictions per point of the KV frontier */
    int conversions; /* runs after the comparison's: per seed, per design but MHA, an uptraining and a 110 % run */
} al_study_plan;

/* Creates the study directory and its runs/, loads the corpus, writes the
 * Fashion-MNIST subset the budget trains on (vision is left out when the
 * files are missing) and lists the runs with their names, seeds and
 * directories. The caller then fills every run's opts (model and schedule;
 * opts.out = dir) before al_study_run_plan. */
int al_study_plan_init(al_study_plan *p, const al_study_settings *s, al_err *err);
void al_study_plan_free(al_study_plan *p);

/* ---- running ---- */

/* What the study tells its caller (al_study_hooks.on_progress). */
typedef enum {
    AL_STUDY_PLANNED,     /* every run's state is known; eta_s: the nominal time of the whole study */
    AL_STUDY_RUN_BEGIN,   /* run `run` is trained (state NEW, or STALE: why), resumed (PARTIAL) or skipped (COMPLETE) */
    AL_STUDY_RUN_STEP,    /* a training step of run `run`: train */
    AL_STUDY_RUN_MEASURE, /* run `run` is trained; measuring it */
    AL_STUDY_SPEED,       /* the side-by-side speed benchmark begins */
    AL_STUDY_FIGURES,     /* the figures begin */
    AL_STUDY_HALTED,      /* the study stops before its end: halt says why */
    AL_STUDY_CONVERT,     /* run `run` (an uptraining) first converts its source MHA run into conv_dir */
    AL_STUDY_KV_FRONTIER  /* the KV frontier of language model run `run` (the kv_done-th of kv_total) */
} al_study_event;

typedef enum {
    AL_STUDY_HALT_MAX_RUNS,     /* max_runs runs were trained (trained) */
    AL_STUDY_HALT_BEFORE_RUN,   /* a stop request before run `run` */
    AL_STUDY_HALT_IN_RUN,       /* a signal while run `run` trained: its checkpoint is saved */
    AL_STUDY_HALT_BEFORE_REPORT /* a stop request after the runs */
} al_study_halt;

typedef struct al_study_progress {
    al_study_event event;
    const al_study_plan *plan;
    int run;                        /* index into plan->runs, -1 for none */
    const al_train_progress *train; /* RUN_STEP: the training loop's report */
    double eta_s;                   /* seconds left in the whole study (see docs/study.md) */
    al_study_halt halt;             /* HALTED */
    int trained;                    /* runs trained so far in this invocation */
    int kv_done, kv_total;          /* KV_FRONTIER: runs whose points are in hand, of how many */
} al_study_progress;

typedef struct al_study_hooks {
    void *ctx;
    /* Progress; may be NULL. */
    void (*on_progress)(void *ctx, const al_study_progress *p);
    /* Draws heads.png (and heads.json/.npy/.csv beside it) for the n model
     * directories into path; returns 0 or -1 (err filled). NULL: no heads
     * figure. */
    int (*draw_heads)(void *ctx, const char *const *dirs, int n, const char *path, al_err *err);
    /* A pending stop request (SIGINT, SIGTERM) or 0, asked between runs,
     * measurements and figures; NULL: none. */
    int (*stop_requested)(void *ctx);
} al_study_hooks;

struct al_study_results;

enum { AL_STUDY_DONE = 0, AL_STUDY_ERROR = -1, AL_STUDY_INTERRUPTED = 1, AL_STUDY_TERMINATED = 2, AL_STUDY_PAUSED = 3 };
/* Runs the plan: each run is skipped when complete, resumed when partial,
 * else trained from scratch, then measured (measure.json caches it); then
 * the speed benchmark, the figures and the reports. Returns AL_STUDY_DONE
 * with *results (free with al_study_results_free), AL_STUDY_ERROR (err),
 * AL_STUDY_INTERRUPTED / AL_STUDY_TERMINATED (SIGINT / SIGTERM: a training
 * run was stopped with its checkpoint, or stop_requested said so) or
 * AL_STUDY_PAUSED (max_runs). Nothing is left half written. */
int al_study_run_plan(al_study_plan *p, const al_study_hooks *h, struct al_study_results **results, al_err *err);
void al_study_results_free(struct al_study_results *r);

/* ---- run directories ---- */

/* What plan->out holds compared with the run `plan` describes: the model
 * config and training settings in config.json, the step in
 * train_state.safetensors, the final line of log.jsonl and model.safetensors.
 * *state; *step: the saved step (0 when none); why: a short reason for
 * STALE/NEW. Returns 0, or -1 when out of memory (err; *state undecided). */
int al_study_run_state(const al_train_opts *plan, al_run_state *state, int *step, char *why, size_t cap, al_err *err);

/* The step saved in a training state file (its safetensors metadata), read
 * from the header alone. */
int al_train_state_step(const char *path, int *step, al_err *err);

/* A run's log.jsonl: the evaluation points and the throughput. */
typedef struct al_run_log {
    int n;            /* evaluation lines */
    int *step;        /* [n] */
    double *val_loss; /* [n] */
    double *val_acc;  /* [n] vision accuracy (NAN for language models) */
    int last_step;
    double tokens_per_s; /* median over the steps */
    double items_per_s;  /* median images/s (vision; else = tokens_per_s) */
    double elapsed_s;    /* of the last line (time of the last session) */
} al_run_log;
int al_run_log_read(const char *dir, al_run_log *out, al_err *err);
void al_run_log_free(al_run_log *l);

/* ---- measurements ---- */

/* Unigram baseline of a corpus: entropy of the training split's byte
 * frequencies, and their cross-entropy on the validation split (add-one
 * smoothed), both in nats per byte. */
typedef struct al_unigram {
    double train_entropy, val_cross_entropy;
} al_unigram;
void al_unigram_of(const al_corpus *c, al_unigram *u);

/* Decode speed of m at a cache of `context` tokens, as `attnlab bench
 * decode` measures it: the cache is filled with random values (a step's time
 * depends on how much cache it reads, not on what it holds) and the last
 * `tokens` steps before the context is full are timed. m->cfg.max_position
 * must be >= context. */
int al_decode_speed(const al_model *m, int context, int tokens, double *tokens_per_s, al_err *err);

/* What the study measures on a trained language model. */
typedef struct al_lm_measure {
    int steps; /* the run's steps (validity of a cached copy) */
    size_t params;
    size_t kv_values;          /* cache values per token per layer */
    size_t kv_bytes_per_token; /* float32, all layers */
    double kv_pct_of_mha;      /* vs 2 H d_h (MLA: d_h = its value width) */
    double val_loss, val_bpb;  /* nats/byte and bits/byte on the validation split */
    size_t val_tokens;
    double erank_uncentered_pct, erank_pca_pct, mean_offdiag; /* of the layer-averaged head similarity */
} al_lm_measure;

/* Measures the model in `dir` (config.json + model.safetensors): validation
 * loss over the first max_tokens bytes of the corpus's validation split
 * (windows of the trained context), cache sizes, head ranks. */
int al_study_measure_lm(const char *dir, const al_corpus *corpus, long max_tokens, al_lm_measure *out, al_err *err);

/* Speed of n models (language models, run directories) measured side by
 * side: `rounds` rounds, each timing every model in turn (one warm-up and
 * `steps` training steps of batch x context, as `attnlab bench train`; then
 * decode as al_decode_speed, on one thread), the best of the rounds kept. Interleaving and
 * best-of make the comparison fair on a machine whose load changes: each
 * model gets the same chances at a quiet moment. */
typedef struct al_speed {
    double train_tokens_per_s, decode_tokens_per_s;
} al_speed;
int al_study_speed(const char *const *dirs, int n, int batch, int context, int steps, int decode_context,
                   int decode_tokens, int rounds, al_speed *out, al_err *err);

/* What the study measures on a trained vision transformer (accuracy and
 * loss come from the final evaluation in its log: every test image of the
 * run's image set). */
typedef struct al_vit_measure {
    int steps;
    size_t params;
    double accuracy, test_loss;
    int test_images;
    double erank_uncentered_pct, erank_pca_pct, mean_offdiag;
} al_vit_measure;
int al_study_measure_vit(const char *dir, int steps, al_vit_measure *out, al_err *err);

/* measure.json in a run directory: cached measurements, so a resumed study
 * does not measure finished runs again. Load returns 0 with *m filled; 1
 * when there is no usable cache (no file, another kind or number of steps,
 * a value that does not fit its field); -1 with one line in err when the
 * file is there but could not be read (out of memory, an I/O error), which
 * must not pass for a missing cache. */
int al_study_save_lm_measure(const char *dir, const al_lm_measure *m, al_err *err);
int al_study_load_lm_measure(const char *dir, int steps, al_lm_measure *m, al_err *err);
int al_study_save_vit_measure(const char *dir, const al_vit_measure *m, al_err *err);
int al_study_load_vit_measure(const char *dir, int steps, al_vit_measure *m, al_err *err);
/* Where the measurements must be there: a load's result got as 0, or -1
 * with err (the load's reason, or that dir has none). */
int al_study_measured(int got, const char *dir, al_err *err);

/* Writes the first n_train training and n_test test images (and labels) of
 * the Fashion-MNIST files in src_dir (NULL: the Debian package's) as plain
 * IDX files into dst_dir (created), for short vision runs. Files already
 * there with the right sizes are kept. */
int al_fmnist_write_subset(const char *src_dir, const char *dst_dir, int n_train, int n_test, al_err *err);

/* ---- conversions (conversions.c, docs/study.md "Conversions") ---- */

/* One design converted from one seed's MHA run: the cache, and the
 * validation loss (nats/byte, as every run's) of the MHA source, right after
 * conversion, after uptraining, and of the same design trained from scratch
 * for the MHA run's steps and for the conversion's total (110 %). */
typedef struct al_study_conversion {
    int design;
    uint64_t seed;
    double kv_pct_of_mha;
    double loss_source, loss_converted, loss_uptrained, loss_scratch, loss_scratch_long;
    char converted_dir[AL_STUDY_PATH_LEN], uptrained_dir[AL_STUDY_PATH_LEN], scratch_long_dir[AL_STUDY_PATH_LEN];
} al_study_conversion;

/* Steps of the uptraining after a source run of `steps`: a tenth, at least 10. */
int al_study_uptrain_steps(int steps);
/* Appends the conversion runs to a plan whose comparison runs are filled
 * (p->runs has room for AL_STUDY_CONV_RUNS_PER_SEED more per seed). */
enum { AL_STUDY_CONV_RUNS_PER_SEED = 2 * (AL_STUDY_DESIGNS - 1) };
int al_study_plan_conversions(al_study_plan *p, al_err *err);
/* The state of conversion run r (in place of al_study_run_state): an
 * uptraining run's model is its converted model's config when that
 * conversion is there (MLA's RoPE base depends on the source's weights);
 * an uptraining whose MHA source is not complete is converted and trained
 * again. The source's state must be known. */
int al_study_conv_state(const al_study_plan *p, al_plan_run *r, al_err *err);
/* 1 when uptraining run r must convert its source first. */
int al_study_conv_needed(const al_plan_run *r);
/* Before uptraining run r: converts its source (when not done, or redo),
 * and measures the converted model (measure.json, steps 0). */
int al_study_conv_prepare(const al_study_plan *p, al_plan_run *r, al_err *err);

/* ---- results and reports (report.c) ---- */

typedef struct al_study_lm_run {
    int design; /* index into al_study_design */
    uint64_t seed;
    char dir[AL_STUDY_PATH_LEN];
    al_config cfg;
    al_lm_measure m;
    al_precision precision; /* of its training products */
    double train_tokens_per_s, train_seconds;
    al_run_log log;
} al_study_lm_run;

typedef struct al_study_vit_run {
    int poly; /* 0 softmax, 1 poly */
    uint64_t seed;
    char dir[AL_STUDY_PATH_LEN];
    char title[96]; /* "Attention with (1/14)x^3" */
    al_config cfg;
    al_vit_measure m;
    al_precision precision; /* of its training products */
    double train_images_per_s, train_seconds;
    al_run_log log;
} al_study_vit_run;

enum { AL_STUDY_MAX_FIGURES = 8 };

typedef struct al_study_results {
    const al_study_budget *budget;
    char out[AL_STUDY_PATH_LEN];
    char created[40]; /* UTC, ISO 8601 */
    double wall_s;    /* this invocation */
    int threads;
    const char *blas_kernels;
    char corpus_path[AL_STUDY_PATH_LEN];
    size_t corpus_bytes, train_bytes, val_bytes;
    al_unigram unigram;
    int n_seeds;
    uint64_t seeds[AL_STUDY_MAX_SEEDS];
    al_train_opts lm_opts; /* the settings of the first language-model run (shape of mha) */
    al_study_lm_run *lm;   /* [n_seeds * AL_STUDY_DESIGNS], seed-major */
    int n_lm;
    al_train_opts vit_opts; /* the settings of the first vision run */
    al_speed speed[AL_STUDY_DESIGNS]; /* per design, of the first seed's models (al_study_speed) */
    al_study_vit_run *vit;            /* [n_seeds * 2], seed-major, softmax then poly */
    int n_vit;
    char vision_note[512]; /* why vision is missing, or "" */
    char images_path[AL_STUDY_PATH_LEN];
    al_cls_figure cls; /* the poly-vs-softmax figure: CLS attention ranges of the two models shown */
    al_study_figure figures[AL_STUDY_MAX_FIGURES];
    int n_figures;
    /* the KV frontier (kvfront.c): the first seed's five models x AL_KVF_STUDY_METHODS */
    al_kvf kv;                 /* its points (n = 0: not measured) */
    al_study_figure kv_figure; /* kv_frontier.png, .json, .csv */
    int kv_context, kv_tokens, kv_group, kv_residual;
    /* --conversions: [n_seeds * 4], seed-major, gqa mqa mla lrkv; the steps of
     * the MHA runs, the uptrainings and the long from-scratch runs */
    al_study_conversion *conv;
    int n_conv, conv_source_steps, conv_uptrain_steps, conv_long_steps;
} al_study_results;

/* ---- the KV frontier (kvfront.c) ---- */

/* The first seed's five language models (res->lm[0..4]) over the first
 * plan->kv_tokens predictions of the validation split, each through
 * AL_KVF_STUDY_METHODS (docs/kvlab.md), into res->kv; kv_frontier.png,
 * .json and .csv into the study directory, named in res->kv_figure. Each
 * run's points are kept in RUN/kv_frontier.json, keyed by the run's model
 * file and the settings, so a rerun measures only what is new (and retries
 * methods the library refused before). */
int al_study_kv_frontier(const al_study_plan *plan, al_study_results *res, const al_study_hooks *h, al_err *err);

/* Reads the conversions' measurements into res (after the comparison's). */
int al_study_conv_collect(const al_study_plan *p, al_study_results *res, al_err *err);

/* Writes report.json, report.md and report.html into r->out (atomically). */
int al_study_write_reports(const al_study_results *r, al_err *err);

#endif
