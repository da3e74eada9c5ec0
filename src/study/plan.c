/*
 * plan.c: the budgets, the five designs and the plan of `attnlab study` (see
 * study.h): the study directory, the corpus, the Fashion-MNIST subset the
 * budget trains on, and the list of runs (seed-major: the five designs, then
 * the softmax and poly ViTs, for each seed), each with its typed training
 * options: a design's study preset (model/presets.c) or the ViT pair's
 * shape, with the budget's schedule, resolved as `attnlab train` resolves
 * flags (al_config_resolve).
 */
#include "study.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../io/io.h"
#include "../model/presets.h"

/* ---- budgets ----
 * Nominal step times were measured on the 2-core development machine
 * (quick and standard: BF16 products on AMX, the default there; full:
 * fp32); they only feed the ETA until the first run has been timed. Since
 * session 18 (issue 14) quick and standard train the language models on 3x
 * the tokens of before (900 and 1080 steps where they had 300 and 360):
 * in BF16 on an idle AMX Xeon that takes about the time the old budgets
 * took in fp32 (docs/study.md, "Budgets"). */
/* clang-format off */
static const al_study_budget budgets[] = {
    {.name = "tiny", .summary = "seconds: for the tests (models barely trained)", .seeds = 1,
     .lm_context = 32, .lm_batch = 2, .lm_steps = 4, .lm_warmup = 1, .lm_eval_every = 2, .lm_eval_tokens = 256,
     .lm_save_every = 0, .lm_lr = 2e-3, .lm_final_eval_tokens = 512,
     .decode_context = 64, .decode_tokens = 4, .speed_rounds = 1, .speed_steps = 1, .attnmap_tokens = 64,
     .vit_layers = 1, .vit_hidden = 16, .vit_heads = 2, .vit_batch = 8, .vit_steps = 4, .vit_warmup = 1,
     .vit_eval_every = 2, .vit_eval_images = 32, .vit_save_every = 0, .vit_train_images = 64,
     .vit_test_images = 64, .vit_lr = 2e-3,
     .lm_step_s = 0.05, .vit_step_s = 0.02, .lm_measure_s = 0.5, .vit_measure_s = 0.2, .figures_s = 2,
     .kv_tokens = 64, .kv_group = 16, .kv_residual = 4},
    {.name = "quick", .summary = "about 6 minutes on 2 idle cores with AMX, 922k training bytes per language model",
     .seeds = 1, .lm_context = 256, .lm_batch = 4, .lm_steps = 900, .lm_warmup = 30, .lm_eval_every = 100,
     .lm_eval_tokens = 8192, .lm_save_every = 300, .lm_lr = 2e-3, .lm_final_eval_tokens = 32768,
     .decode_context = 2048, .decode_tokens = 64, .speed_rounds = 2, .speed_steps = 2, .attnmap_tokens = 1024,
     .vit_layers = 2, .vit_hidden = 64, .vit_heads = 4, .vit_batch = 32, .vit_steps = 600, .vit_warmup = 50,
     .vit_eval_every = 150, .vit_eval_images = 500, .vit_save_every = 300, .vit_train_images = 10000,
     .vit_test_images = 2000, .vit_lr = 2e-3,
     .lm_step_s = 0.045, .vit_step_s = 0.04, .lm_measure_s = 8, .vit_measure_s = 1, .figures_s = 10,
     .kv_tokens = 512, .kv_group = 32, .kv_residual = 32},
    {.name = "standard", .summary = "about 30 minutes on 2 idle cores with AMX, 2.2M training bytes per language model",
     .seeds = 3, .lm_context = 256, .lm_batch = 8, .lm_steps = 1080, .lm_warmup = 30, .lm_eval_every = 120,
     .lm_eval_tokens = 16384, .lm_save_every = 360, .lm_lr = 2e-3, .lm_final_eval_tokens = 65536,
     .decode_context = 4096, .decode_tokens = 64, .speed_rounds = 3, .speed_steps = 2, .attnmap_tokens = 1024,
     .vit_layers = 2, .vit_hidden = 64, .vit_heads = 4, .vit_batch = 32, .vit_steps = 1000, .vit_warmup = 80,
     .vit_eval_every = 250, .vit_eval_images = 1000, .vit_save_every = 500, .vit_train_images = 0,
     .vit_test_images = 0, .vit_lr = 2e-3,
     .lm_step_s = 0.09, .vit_step_s = 0.04, .lm_measure_s = 15, .vit_measure_s = 22, .figures_s = 15,
     .kv_tokens = 2048, .kv_group = 32, .kv_residual = 32},
    {.name = "full", .summary = "the presets' own schedule, 3.1M training bytes per language model: many hours",
     .seeds = 3, .lm_context = 256, .lm_batch = 8, .lm_steps = 1500, .lm_warmup = 100, .lm_eval_every = 100,
     .lm_eval_tokens = 65536, .lm_save_every = 250, .lm_lr = 2e-3, .lm_final_eval_tokens = 0,
     .decode_context = 4096, .decode_tokens = 128, .speed_rounds = 3, .speed_steps = 3, .attnmap_tokens = 2048,
     .vit_layers = 4, .vit_hidden = 128, .vit_heads = 4, .vit_batch = 64, .vit_steps = 2000, .vit_warmup = 150,
     .vit_eval_every = 250, .vit_eval_images = 2000, .vit_save_every = 250, .vit_train_images = 0,
     .vit_test_images = 0, .vit_lr = 1e-3,
     .lm_step_s = 0.3, .vit_step_s = 1.0, .lm_measure_s = 40, .vit_measure_s = 90, .figures_s = 20,
     .kv_tokens = 4096, .kv_group = 32, .kv_residual = 32},
};
/* clang-format on */

const al_study_budget *al_study_budget_find(const char *name) {
    for (size_t i = 0; name && i < sizeof budgets / sizeof budgets[0]; i++)
        if (!strcmp(budgets[i].name, name)) return &budgets[i];
    return NULL;
}

static const char *const designs[AL_STUDY_DESIGNS] = {"mha", "gqa", "mqa", "mla", "lrkv"};
static const char *const design_titles[AL_STUDY_DESIGNS] = {"MHA", "GQA", "MQA", "MLA", "LRKV"};

const char *al_study_design(int i) { return i >= 0 && i < AL_STUDY_DESIGNS ? designs[i] : "?"; }
const char *al_study_design_title(int i) { return i >= 0 && i < AL_STUDY_DESIGNS ? design_titles[i] : "?"; }

/* ---- paths ---- */

int al_study_set_path(char *dst, size_t cap, const char *what, al_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < cap) return 0;
    if (cap) dst[0] = 0; /* nothing cut is left behind */
    return n < 0 ? al_errf(err, "%s path: cannot be formatted", what)
                 : al_errf(err, "%s path too long (%d bytes, at most %zu)", what, n, cap - 1);
}

char *al_study_join(const char *dir, const char *name, al_err *err) {
    char *path = al_sprintf("%s/%s", dir, name);
    if (!path) al_errf(err, "out of memory");
    return path;
}

/* ---- the plan ---- */

/* Whether the Fashion-MNIST files are readable in dir (NULL: Debian's): 1,
 * or 0 (the study goes on without its ViTs); -1 with err when memory ran
 * out, which says nothing about the files. */
static int have_fmnist(const char *dir, al_err *err) {
    al_image_set t;
    if (al_fmnist_load(&t, dir, "t10k", 1, err)) return al_err_is_oom(err) ? -1 : 0;
    al_image_set_free(&t);
    return 1;
}

/* mkdir that accepts an existing directory. */
static int make_dir(const char *path, const char *what, al_err *err) {
    if (mkdir(path, 0777) && errno != EEXIST) return al_errf(err, "%s: %s%s", path, what, strerror(errno));
    return 0;
}

/* DIR/NAME, made as make_dir makes it. */
static int make_subdir(const char *dir, const char *name, al_err *err) {
    char *path = al_study_join(dir, name, err);
    if (!path) return -1;
    int rc = make_dir(path, "", err);
    free(path);
    return rc;
}

/* A language-model run: its design's study preset with the budget's schedule,
 * into r->dir. */
static int lm_run_opts(const al_study_plan *p, al_plan_run *r, al_err *err) {
    const al_study_budget *b = p->budget;
    al_train_opts *o = &r->opts;
    unsigned char given[AL_CONFIG_MAX_FIELDS] = {0};
    const al_preset *preset = al_preset_find(al_study_design(r->design));
    if (!preset) return al_errf(err, "no study preset for design %s", al_study_design(r->design));
    al_preset_apply(preset, &o->model, given);
    o->context = b->lm_context;
    o->batch = b->lm_batch;
    o->steps = b->lm_steps;
    o->warmup = b->lm_warmup;
    o->lr = b->lm_lr;
    o->eval_every = b->lm_eval_every;
    o->eval_tokens = b->lm_eval_tokens;
    o->save_every = b->lm_save_every;
    o->seed = r->seed;
    o->model.max_position = o->context;
    return al_train_opts_set_paths(o, p->data, NULL, r->dir, err) || al_config_resolve(&o->model, given, err) ? -1 : 0;
}

/* A vision run: the budget's ViT shape and schedule, softmax or poly, on
 * 28 x 28 images in 2 x 2 patches (196 patches, so poly "auto" is 1/14),
 * into r->dir. */
static int vit_run_opts(const al_study_plan *p, al_plan_run *r, al_err *err) {
    const al_study_budget *b = p->budget;
    al_train_opts *o = &r->opts;
    al_config *c = &o->model;
    unsigned char given[AL_CONFIG_MAX_FIELDS] = {0};
    c->num_layers = b->vit_layers;
    c->hidden_size = b->vit_hidden;
    c->num_heads = b->vit_heads;
    c->score = r->poly ? AL_SCORE_POLY : AL_SCORE_SOFTMAX;
    static const char *const set[] = {"layers", "hidden", "heads", "score"};
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) given[al_config_field_find(set[i])] = 1;
    c->max_position = o->context; /* replaced by the patches below */
    if (al_config_resolve(c, given, err)) return -1;
    al_config_vision_fmnist(c, 2);
    if (al_config_validate(c, err)) return -1;
    o->batch = b->vit_batch;
    o->steps = b->vit_steps;
    o->warmup = b->vit_warmup;
    o->lr = b->vit_lr;
    o->eval_every = b->vit_eval_every;
    o->save_every = b->vit_save_every;
    o->seed = r->seed;
    o->context = c->max_position;
    o->train_subset = b->vit_train_images;
    o->eval_images = b->vit_eval_images;
    return al_train_opts_set_paths(o, NULL, p->images, r->dir, err);
}

int al_study_plan_init(al_study_plan *p, const al_study_settings *s, al_err *err) {
    memset(p, 0, sizeof *p);
    p->t0 = al_now();
    p->budget = s->budget;
    if (!p->budget) return al_errf(err, "no budget");
    if (s->n_seeds < 0 || s->n_seeds > AL_STUDY_MAX_SEEDS)
        return al_errf(err, "seeds must be 1..%d, got %d", AL_STUDY_MAX_SEEDS, s->n_seeds);
    if (!s->out || !s->out[0]) return al_errf(err, "no study directory");
    if (al_study_set_path(p->out, sizeof p->out, "study directory", err, "%s", s->out)) return -1;
    size_t ol = strlen(p->out);
    while (ol > 1 && p->out[ol - 1] == '/') p->out[--ol] = 0;
    p->data = s->data;
    p->no_vision = s->no_vision;
    p->max_runs = s->max_runs;
    p->precision = s->precision;
    p->conversions = s->conversions;
    p->n_seeds = s->n_seeds ? s->n_seeds : p->budget->seeds;
    if (s->kv_tokens < 0) return al_errf(err, "the KV frontier's tokens must not be negative, got %d", s->kv_tokens);
    p->kv_tokens = s->kv_tokens ? s->kv_tokens : p->budget->kv_tokens;
    for (int i = 0; i < p->n_seeds; i++) p->seeds[i] = s->first_seed + (uint64_t)i;
    const al_study_budget *b = p->budget;

    if (make_dir(p->out, "cannot create the study directory: ", err) || make_subdir(p->out, "runs", err) ||
        al_corpus_load(&p->corpus, s->data, 0.05, b->lm_context, err))
        return -1;

    /* vision: a subset of the images on disk when the budget trains on part of them */
    const int vision = s->no_vision ? 0 : have_fmnist(s->images, err);
    if (vision < 0) {
        al_study_plan_free(p);
        return -1;
    }
    p->vision = vision;
    if (p->vision && (b->vit_train_images || b->vit_test_images)) {
        if (make_subdir(p->out, "data", err) ||
            al_study_set_path(p->images, sizeof p->images, "image subset", err, "%s/data/fashion-mnist-%d-%d", p->out,
                              b->vit_train_images, b->vit_test_images) ||
            al_fmnist_write_subset(s->images, p->images, b->vit_train_images, b->vit_test_images, err)) {
            al_study_plan_free(p);
            return -1;
        }
    } else if (p->vision &&
               al_study_set_path(p->images, sizeof p->images, "images", err, "%s", s->images ? s->images : AL_FMNIST_DIR)) {
        al_study_plan_free(p);
        return -1;
    }

    const int per_seed = AL_STUDY_DESIGNS + (p->vision ? 2 : 0);
    const int conv_per_seed = p->conversions ? AL_STUDY_CONV_RUNS_PER_SEED : 0;
    p->runs = calloc((size_t)p->n_seeds * (per_seed + conv_per_seed), sizeof *p->runs);
    if (!p->runs) {
        al_study_plan_free(p);
        return al_errf(err, "out of memory");
    }
    for (int si = 0; si < p->n_seeds; si++)
        for (int k = 0; k < per_seed; k++) {
            al_plan_run *r = &p->runs[p->n_runs++];
            r->seed = p->seeds[si];
            r->vision = k >= AL_STUDY_DESIGNS;
            r->poly = k == AL_STUDY_DESIGNS + 1;
            r->design = r->vision ? -1 : k;
            if (r->vision)
                snprintf(r->name, sizeof r->name, "vit-%s-seed%llu", r->poly ? "poly" : "softmax",
                         (unsigned long long)r->seed);
            else
                snprintf(r->name, sizeof r->name, "%s-seed%llu", al_study_design(k), (unsigned long long)r->seed);
            al_train_opts_default(&r->opts);
            r->opts.precision = p->precision;
            if (al_study_set_path(r->dir, sizeof r->dir, "run directory", err, "%s/runs/%s", p->out, r->name) ||
                (r->vision ? vit_run_opts(p, r, err) : lm_run_opts(p, r, err))) {
                al_err_prefix(err, "%s", r->name);
                al_study_plan_free(p);
                return -1;
            }
        }
    if (p->conversions && al_study_plan_conversions(p, err)) { /* after the comparison's runs */
        al_study_plan_free(p);
        return -1;
    }
    return 0;
}

void al_study_plan_free(al_study_plan *p) {
    free(p->runs);
    al_corpus_free(&p->corpus);
    memset(p, 0, sizeof *p);
}
