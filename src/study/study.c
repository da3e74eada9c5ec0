/*
 * study.c: running a study's plan (see study.h): every run in order is
 * skipped (complete), resumed (partial) or trained from scratch, then
 * measured; then the side-by-side speed benchmark of the first seed's
 * language models, the figures and the reports.
 *
 * Progress goes to the caller's hook: training steps come from al_train's
 * own report (al_train_opts.on_step), with the ETA of the whole study. The
 * ETA is nominal work left (the budget's step and measuring times), scaled
 * by how the work done so far compared with its nominal time.
 */
#include "study.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../analysis/attnmap.h"
#include "../core/blas.h"
#include "../train/dist.h"

/* A running study: its plan, hooks, and the pace of the work so far. */
typedef struct study {
    al_study_plan *p;
    const al_study_hooks *h;
    int run, trained; /* the run being worked on; runs trained so far */
    /* the current phase (training, measuring, benchmarking, figures) */
    int in_phase;
    double phase_start, phase_nominal, left_after; /* left_after: nominal seconds of what follows */
    double done_actual, done_nominal;
} study;

/* ---- progress ---- */

/* Seconds left in the study: nominal work left, scaled by how the work done
 * so far compared with its nominal time; frac: the fraction of the current
 * phase done. */
static double eta(const study *s, double frac) {
    double now = al_now(), cur_actual = s->in_phase ? now - s->phase_start : 0,
           cur_nom = s->in_phase ? frac * s->phase_nominal : 0;
    double nom = s->done_nominal + cur_nom, act = s->done_actual + cur_actual;
    double factor = nom > 3 ? act / nom : 1.0;
    if (factor < 0.2) factor = 0.2;
    if (factor > 20) factor = 20;
    return factor * ((s->in_phase ? (1 - frac) * s->phase_nominal : 0) + s->left_after);
}

/* Starts a phase expected to take `nominal` seconds, `left_after` more after it. */
static void phase_begin(study *s, double nominal, double left_after) {
    s->in_phase = 1;
    s->phase_start = al_now();
    s->phase_nominal = nominal;
    s->left_after = left_after;
}

/* Ends the phase: its time and nominal time count toward the ETA's scale. */
static void phase_end(study *s) {
    if (s->in_phase) {
        s->done_actual += al_now() - s->phase_start;
        s->done_nominal += s->phase_nominal;
    }
    s->in_phase = 0;
}

/* Tells the caller about an event of the current run (eta: of the study). */
static void tell(const study *s, al_study_event event, const al_train_progress *train, double eta_s) {
    if (!s->h->on_progress) return;
    const al_study_progress p = {
        .event = event, .plan = s->p, .run = s->run, .train = train, .eta_s = eta_s, .trained = s->trained};
    s->h->on_progress(s->h->ctx, &p);
}

/* Tells the caller the study stops before its end. */
static void tell_halt(const study *s, al_study_halt why) {
    if (!s->h->on_progress) return;
    const al_study_progress p = {
        .event = AL_STUDY_HALTED, .plan = s->p, .run = s->run, .halt = why, .trained = s->trained};
    s->h->on_progress(s->h->ctx, &p);
}

/* A training step of the current run (al_train_opts.on_step). */
static void on_train_step(const al_train_progress *tp, void *ctx) {
    study *s = ctx;
    if (tp->event != AL_TRAIN_STEPPED) return;
    const int todo = tp->opts->steps - tp->start_step;
    const double frac = todo > 0 ? (double)(tp->step - tp->start_step) / todo : 1;
    tell(s, AL_STUDY_RUN_STEP, tp, eta(s, frac));
}

/* The caller's pending stop request (a signal number) or 0. */
static int stop_requested(const study *s) { return s->h->stop_requested ? s->h->stop_requested(s->h->ctx) : 0; }

/* stop_requested between runs: under mpirun every rank stops alike (the
 * largest signal of any rank; its own when the ranks cannot agree). */
static int stop_agreed(const study *s) {
    int sig = stop_requested(s), any = sig;
    return al_dist_max(sig, &any, &(al_err){0}) ? sig : any;
}

static int stop_status(int sig) { return sig == SIGTERM ? AL_STUDY_TERMINATED : AL_STUDY_INTERRUPTED; }

/* ---- nominal times ---- */

/* How much longer than the budgets' nominal times (BF16 products on an idle
 * AMX Xeon) a training step takes with the study's precision on the CPU set
 * in use, so that the first ETA, before any run has been timed, is near on
 * other machines too (after the first run the ETA scales by the times
 * measured). From the quick budget on idle 2-core machines (docs/study.md,
 * "Budgets"); language models and ViTs apart, because the ViTs (hidden 64,
 * heads of 16) are bound by attention and gain less from bf16 products.
 * The first row whose precision matches and whose set the one in use
 * reaches holds. */
static const struct {
    al_precision precision;
    al_cpu_level from; /* the least CPU set the row is for */
    double lm, vit;
} paces[] = {
    /* Intel Xeon family 6 model 167, amx engine: the nominal times (session
     * 18: language models 36-45 s a 900-step run, ViTs 21-22 s a 600-step
     * one, against 40.5 and 24 s nominal) */
    {AL_PREC_BF16, AL_CPU_AMX, 1.0, 1.0},
    /* AMD Zen 4, onednn engine (session 19: 70-82 s and 28.5-29.2 s; the
     * ViTs 1.2x faster since, their d_h 16 no longer padded to 32 there) */
    {AL_PREC_BF16, AL_CPU_AVX512_BF16, 1.9, 1.0},
    /* no bf16 instructions, emulated products (Zen 4 with ATTNLAB_CPU=avx2,
     * paired: the language model's step 1.4x, the ViT's 1.6-1.8x fp32's) */
    {AL_PREC_BF16, AL_CPU_GENERIC, 4.4, 3.0},
    /* fp32 with AVX-512: Zen 4 (session 19: 122-136 s, ViTs about 34 s) and
     * the AMX host (session 18: 41-45 s a 300-step run, ViTs 37-38 s) */
    {AL_PREC_F32, AL_CPU_AVX512, 3.1, 1.5},
    /* fp32 with AVX2 alone (Zen 4 with ATTNLAB_CPU=avx2: the language
     * model's step as fast as with AVX-512, the ViT's 1.2x slower) */
    {AL_PREC_F32, AL_CPU_GENERIC, 3.1, 1.8},
};

double al_study_pace(al_precision precision, al_cpu_level cpu, int vision) {
    for (size_t i = 0; i < sizeof paces / sizeof paces[0]; i++)
        if (paces[i].precision == precision && cpu >= paces[i].from) return vision ? paces[i].vit : paces[i].lm;
    return 1.0;
}

/* Nominal seconds of one training step of a language model or ViT here. */
static double step_nominal(const al_study_plan *p, int vision) {
    const double budget_s = vision ? p->budget->vit_step_s : p->budget->lm_step_s;
    return budget_s * al_study_pace(p->precision, al_cpu_level_now(), vision);
}

/* Nominal seconds of the end of the study: the speed benchmark and the figures. */
static double final_nominal(const al_study_plan *p) {
    const al_study_budget *b = p->budget;
    return b->speed_rounds * AL_STUDY_DESIGNS * ((b->speed_steps + 1) * step_nominal(p, 0) + 0.5) + b->figures_s;
}

/* Nominal seconds of what is left of run i (training from its saved step,
 * and measuring unless a valid measure.json is there). */
static double nominal_left(const al_study_plan *p, int i) {
    const al_plan_run *r = &p->runs[i];
    const al_study_budget *b = p->budget;
    double step_s = step_nominal(p, r->vision), measure_s = r->vision ? b->vit_measure_s : b->lm_measure_s;
    double t = 0;
    if (r->state != AL_RUN_COMPLETE) t += (r->opts.steps - (r->state == AL_RUN_PARTIAL ? r->step : 0)) * step_s;
    if (r->state != AL_RUN_COMPLETE)
        t += measure_s;
    else {
        al_lm_measure lm;
        al_vit_measure vm;
        int have = r->vision ? !al_study_load_vit_measure(r->opts.out, r->opts.steps, &vm, NULL)
                             : !al_study_load_lm_measure(r->opts.out, r->opts.steps, &lm, NULL); /* an estimate only */
        if (!have) t += measure_s;
    }
    return t;
}

/* Nominal seconds of everything after run i. */
static double nominal_after(const al_study_plan *p, int i) {
    double t = final_nominal(p);
    for (int j = i + 1; j < p->n_runs; j++) t += nominal_left(p, j);
    return t;
}

/* ---- training and measuring ---- */

/* Removes DIR/NAME if it is there (a missing file is no error). */
static int remove_file(const char *dir, const char *name, al_err *err) {
    char *path = al_study_join(dir, name, err);
    if (!path) return -1;
    unlink(path);
    free(path);
    return 0;
}

/* Removes what a stale run left, so nothing of it can be mistaken for the new one. */
static int clear_run(const char *dir, al_err *err) {
    static const char *const files[] = {"config.json", "model.safetensors", "train_state.safetensors", "log.jsonl",
                                        "measure.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (remove_file(dir, files[i], err)) return -1;
    return 0;
}

/* Measures run r unless its measure.json is valid. */
static int measure_run(const al_study_plan *p, const al_plan_run *r, al_err *err) {
    const al_train_opts *o = &r->opts;
    if (r->vision) {
        al_vit_measure m;
        const int got = al_study_load_vit_measure(o->out, o->steps, &m, err);
        if (got <= 0) return got;
        return al_study_measure_vit(o->out, o->steps, &m, err) || al_study_save_vit_measure(o->out, &m, err);
    }
    al_lm_measure m;
    const int got = al_study_load_lm_measure(o->out, o->steps, &m, err);
    if (got <= 0) return got;
    if (al_study_measure_lm(o->out, &p->corpus, p->budget->lm_final_eval_tokens, &m, err)) return -1;
    m.steps = o->steps;
    return al_study_save_lm_measure(o->out, &m, err);
}

/* Before uptraining run i (--conversions): its source converted (when that
 * is not done yet) and the converted model measured. */
static int convert_for(study *s, int i, al_err *err) {
    al_plan_run *r = &s->p->runs[i];
    if (al_study_conv_needed(r)) tell(s, AL_STUDY_CONVERT, NULL, eta(s, 0));
    if (!al_study_conv_prepare(s->p, r, err)) return AL_STUDY_DONE;
    al_err_prefix(err, "%s", r->name);
    return AL_STUDY_ERROR;
}

/* Trains (or resumes) run i unless it is complete, then measures it. */
static int train_and_measure(study *s, int i, al_err *err) {
    al_study_plan *p = s->p;
    al_plan_run *r = &p->runs[i];
    const al_study_budget *b = p->budget;
    const double after = nominal_after(p, i);
    const double step_s = step_nominal(p, r->vision);
    const double measure_s = r->vision ? b->vit_measure_s : b->lm_measure_s;
    s->run = i;
    int rc;
    if (r->state == AL_RUN_COMPLETE) {
        if (r->conv_kind == AL_CONV_UPTRAIN && (rc = convert_for(s, i, err))) return rc;
        tell(s, AL_STUDY_RUN_BEGIN, NULL, eta(s, 0));
        phase_begin(s, nominal_left(p, i), after);
    } else {
        if (p->max_runs > 0 && s->trained >= p->max_runs) {
            tell_halt(s, AL_STUDY_HALT_MAX_RUNS);
            return AL_STUDY_PAUSED;
        }
        s->left_after = nominal_left(p, i) + after;
        if (r->conv_kind == AL_CONV_UPTRAIN && (rc = convert_for(s, i, err))) return rc;
        tell(s, AL_STUDY_RUN_BEGIN, NULL, eta(s, 0));
        al_train_opts o;
        const int lead = al_dist_rank() == 0; /* under mpirun rank 0 alone touches the run directories */
        if (r->state == AL_RUN_PARTIAL) {
            if (lead && al_run_load_opts(r->opts.out, &o, err)) return AL_STUDY_ERROR;
            if (al_dist_bcast(&o, sizeof o, err)) return AL_STUDY_ERROR; /* the other ranks' settings: rank 0's */
            o.resume = 1;
        } else {
            if (lead && clear_run(r->opts.out, err)) return AL_STUDY_ERROR;
            o = r->opts;
        }
        o.on_step = on_train_step;
        o.on_step_ctx = s;
        if (lead && remove_file(r->opts.out, "measure.json", err)) return AL_STUDY_ERROR;
        const int from = r->state == AL_RUN_PARTIAL ? r->step : 0;
        phase_begin(s, (r->opts.steps - from) * step_s, after + measure_s);
        rc = al_train(&o, err);
        phase_end(s);
        if (rc == AL_TRAIN_ERROR) {
            al_err_prefix(err, "%s", r->name);
            return AL_STUDY_ERROR;
        }
        if (rc != AL_TRAIN_OK) {
            tell_halt(s, AL_STUDY_HALT_IN_RUN);
            return rc == AL_TRAIN_INTERRUPTED ? AL_STUDY_INTERRUPTED : AL_STUDY_TERMINATED;
        }
        r->state = AL_RUN_COMPLETE;
        r->step = r->opts.steps;
        s->trained++;
        phase_begin(s, measure_s, after);
        tell(s, AL_STUDY_RUN_MEASURE, NULL, eta(s, 0));
    }
    rc = al_dist_rank() == 0 ? measure_run(p, r, err) : 0; /* rank 0 measures for an MPI job */
    phase_end(s);
    if (rc) {
        al_err_prefix(err, "measuring %s", r->name);
        return AL_STUDY_ERROR;
    }
    return AL_STUDY_DONE;
}

/* ---- results ---- */

/* Reads every run's measurements and log into res. */
static int collect(const al_study_plan *p, al_study_results *res, al_err *err) {
    res->lm = calloc((size_t)p->n_runs, sizeof *res->lm);
    res->vit = calloc((size_t)p->n_runs, sizeof *res->vit);
    if (!res->lm || !res->vit) return al_errf(err, "out of memory");
    for (int i = 0; i < p->n_runs; i++) {
        const al_plan_run *r = &p->runs[i];
        const al_train_opts *o = &r->opts;
        if (r->conv_kind) continue; /* --conversions: al_study_conv_collect */
        if (r->vision) {
            al_study_vit_run *v = &res->vit[res->n_vit];
            v->poly = r->poly, v->seed = r->seed, v->precision = o->precision;
            if (al_study_set_path(v->dir, sizeof v->dir, "run directory", err, "%s", o->out)) return -1;
            if (al_config_load_dir(&v->cfg, o->out, NULL, err) ||
                al_study_measured(al_study_load_vit_measure(o->out, o->steps, &v->m, err), o->out, err) ||
                al_run_log_read(o->out, &v->log, err))
                return -1;
            al_score_title(&v->cfg, v->title, sizeof v->title);
            v->train_images_per_s = v->log.items_per_s;
            v->train_seconds = o->steps * o->batch / (v->log.items_per_s > 0 ? v->log.items_per_s : 1);
            if (res->n_vit++ == 0) res->vit_opts = *o;
        } else {
            al_study_lm_run *l = &res->lm[res->n_lm];
            l->design = r->design, l->seed = r->seed, l->precision = o->precision;
            if (al_study_set_path(l->dir, sizeof l->dir, "run directory", err, "%s", o->out)) return -1;
            if (al_config_load_dir(&l->cfg, o->out, NULL, err) ||
                al_study_measured(al_study_load_lm_measure(o->out, o->steps, &l->m, err), o->out, err) ||
                al_run_log_read(o->out, &l->log, err))
                return -1;
            l->train_tokens_per_s = l->log.tokens_per_s;
            l->train_seconds =
                (double)o->steps * o->batch * o->context / (l->log.tokens_per_s > 0 ? l->log.tokens_per_s : 1);
            if (res->n_lm++ == 0) res->lm_opts = *o;
        }
    }
    return 0;
}

void al_study_results_free(al_study_results *res) {
    if (!res) return;
    for (int i = 0; i < res->n_lm; i++) al_run_log_free(&res->lm[i].log);
    for (int i = 0; i < res->n_vit; i++) al_run_log_free(&res->vit[i].log);
    free(res->lm);
    free(res->vit);
    al_kvf_free(&res->kv);
    free(res->conv);
    free(res);
}

/* ---- figures ---- */

/* The next free figure slot of the report, or NULL (err filled). */
static al_study_figure *next_figure(al_study_results *res, al_err *err) {
    if (res->n_figures < AL_STUDY_MAX_FIGURES) return &res->figures[res->n_figures];
    al_errf(err, "more than %d figures", AL_STUDY_MAX_FIGURES);
    return NULL;
}

/* heads.png through the caller's hook: the first seed's five models in the
 * seed figure's order MHA, LRKV, GQA, MQA, MLA. */
static int fig_heads(const study *s, al_study_results *res, al_err *err) {
    static const int order[AL_STUDY_DESIGNS] = {0, 4, 1, 2, 3};
    if (!s->h->draw_heads) return 0;
    const char *dirs[AL_STUDY_DESIGNS];
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) dirs[k] = res->lm[order[k]].dir;
    char *path = al_study_join(s->p->out, "heads.png", err);
    if (!path) return -1;
    al_study_figure *f = next_figure(res, err);
    const int rc = !f || s->h->draw_heads(s->h->ctx, dirs, AL_STUDY_DESIGNS, path, err);
    free(path);
    if (rc) return -1;
    *f = (al_study_figure){.file = "heads.png",
                           .data = {"heads.json", "heads.npy", "heads.csv"},
                           .caption = "Head similarity s_ij = <A_i, A_j>_F / (|A_i| |A_j|), A_h = Wq_h^T Wk_h, averaged "
                                      "over layers, for the five designs (first seed); subtitles give the effective "
                                      "rank in heads."};
    res->n_figures++;
    return 0;
}

/* attnmaps.png of the MHA model (first seed) over the validation split. */
static int fig_attnmaps(const study *s, al_study_results *res, al_err *err) {
    const al_study_lm_run *mha = &res->lm[0];
    const al_corpus *c = &s->p->corpus;
    al_study_figure *f = next_figure(res, err);
    if (!f || al_fig_attnmaps(s->p->out, mha->dir, al_study_design_title(mha->design), mha->seed,
                              c->bytes + c->n_train, c->n - c->n_train, s->p->budget->attnmap_tokens, f, err))
        return -1;
    res->n_figures++;
    return 0;
}

/* poly_vs_softmax.png of the first softmax and the first poly ViT. */
static int fig_poly(const study *s, al_study_results *res, al_err *err) {
    const al_study_vit_run *v[2] = {NULL, NULL};
    for (int i = 0; i < res->n_vit; i++)
        if (!v[res->vit[i].poly]) v[res->vit[i].poly] = &res->vit[i];
    if (!v[0] || !v[1]) return 0;
    const char *dirs[2] = {v[0]->dir, v[1]->dir}, *titles[2] = {v[0]->title, v[1]->title};
    al_study_figure *f = next_figure(res, err);
    if (!f || al_fig_cls_attention(s->p->out, dirs, titles, s->p->images, &res->cls, f, err)) return -1;
    res->n_figures++;
    return 0;
}

/* The conversions' losses for kv_vs_loss.png (--conversions): per design
 * its seeds' loss after uptraining and from scratch for the same total, in
 * the returned array (free it; NULL without conversions, or out of memory). */
static double *fig_conversions(const al_study_results *res, al_fig_design *d) {
    double *v = res->n_conv ? malloc(sizeof(double) * 2 * (size_t)res->n_conv) : NULL;
    if (!v) return NULL;
    int used = 0;
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        const int first = used;
        for (int i = 0; i < res->n_conv; i++)
            if (res->conv[i].design == k) {
                v[used++] = res->conv[i].loss_uptrained;
                d[k].conv_kv_pct_of_mha = res->conv[i].kv_pct_of_mha;
            }
        d[k].n_conv = used - first;
        d[k].conv_loss = v + first;
        d[k].long_loss = v + res->n_conv + first;
        for (int i = 0, j = first; i < res->n_conv; i++)
            if (res->conv[i].design == k) v[res->n_conv + j++] = res->conv[i].loss_scratch_long;
    }
    return v;
}

/* loss_curves.png and kv_vs_loss.png: the designs' runs, seed-major order
 * kept within each design. */
static int fig_designs(const study *s, al_study_results *res, al_err *err) {
    al_fig_design d[AL_STUDY_DESIGNS];
    al_fig_run *runs = calloc((size_t)(res->n_lm > 0 ? res->n_lm : 1), sizeof *runs);
    if (!runs) return al_errf(err, "out of memory");
    int used = 0;
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) {
        d[k] = (al_fig_design){.name = al_study_design(k), .title = al_study_design_title(k), .runs = runs + used};
        for (int i = 0; i < res->n_lm; i++) {
            const al_study_lm_run *l = &res->lm[i];
            if (l->design != k) continue;
            if (d[k].n_runs == 0) { /* the cache size is the design's: its first run's */
                d[k].kv_pct_of_mha = l->m.kv_pct_of_mha;
                d[k].kv_bytes_per_token = l->m.kv_bytes_per_token;
            }
            runs[used++] = (al_fig_run){.seed = l->seed, .n = l->log.n, .step = l->log.step,
                                        .val_loss = l->log.val_loss, .final_val_loss = l->m.val_loss};
            d[k].n_runs++;
        }
    }
    double *conv = fig_conversions(res, d);
    if (res->n_conv && !conv) {
        free(runs);
        return al_errf(err, "out of memory");
    }
    const al_train_opts *o = &res->lm_opts;
    const double per_step = (double)o->batch * o->context;
    al_study_figure *f = next_figure(res, err);
    int rc = !f || al_fig_loss_curves(s->p->out, d, AL_STUDY_DESIGNS, res->n_seeds, per_step, per_step * o->steps,
                                      o->eval_tokens, res->unigram.val_cross_entropy, f, err);
    if (!rc) {
        res->n_figures++;
        f = next_figure(res, err);
        rc = !f || al_fig_kv_vs_loss(s->p->out, d, AL_STUDY_DESIGNS, res->n_seeds, f, err);
    }
    if (!rc) res->n_figures++;
    free(runs);
    free(conv);
    return rc ? -1 : 0;
}

/* ---- the study ---- */

/* The numbers of the report that do not come from the runs. */
static int describe(const al_study_plan *p, al_study_results *res, al_err *err) {
    res->budget = p->budget;
    if (al_study_set_path(res->out, sizeof res->out, "study directory", err, "%s", p->out) ||
        al_study_set_path(res->corpus_path, sizeof res->corpus_path, "corpus", err, "%s", p->corpus.path) ||
        al_study_set_path(res->images_path, sizeof res->images_path, "images", err, "%s", p->vision ? p->images : ""))
        return -1;
    res->threads = al_threads();
    res->blas_kernels = al_blas_kernels();
    res->corpus_bytes = p->corpus.n, res->train_bytes = p->corpus.n_train,
    res->val_bytes = p->corpus.n - p->corpus.n_train;
    al_unigram_of(&p->corpus, &res->unigram);
    res->n_seeds = p->n_seeds;
    memcpy(res->seeds, p->seeds, sizeof res->seeds);
    res->cls.min[0] = res->cls.min[1] = res->cls.max[0] = res->cls.max[1] = NAN;
    if (!p->vision)
        al_strfmt(res->vision_note, sizeof res->vision_note, "%s",
                  p->no_vision ? "skipped (--no-vision)."
                               : "skipped: the Fashion-MNIST files were not found "
                                 "(install dataset-fashion-mnist or pass --images DIR).");
    return 0;
}

/* After the runs: benchmarks, figures and reports. */
static int finish(study *s, al_study_results *res, al_err *err) {
    const al_study_plan *p = s->p;
    const al_study_budget *b = p->budget;
    s->run = -1;
    if (describe(p, res, err) || collect(p, res, err) || (p->conversions && al_study_conv_collect(p, res, err)))
        return AL_STUDY_ERROR;
    /* speeds side by side, the first seed's model of each design */
    const char *dirs[AL_STUDY_DESIGNS];
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) dirs[k] = res->lm[k].dir;
    phase_begin(s, final_nominal(p) - b->figures_s, b->figures_s);
    tell(s, AL_STUDY_SPEED, NULL, eta(s, 0));
    int rc = al_study_speed(dirs, AL_STUDY_DESIGNS, res->lm_opts.batch, res->lm_opts.context, b->speed_steps,
                            b->decode_context, b->decode_tokens, b->speed_rounds, res->speed, err);
    phase_end(s);
    if (rc) return AL_STUDY_ERROR;
    int sig = stop_requested(s);
    if (sig) {
        tell_halt(s, AL_STUDY_HALT_BEFORE_REPORT);
        return stop_status(sig);
    }
    phase_begin(s, b->figures_s, 0);
    tell(s, AL_STUDY_FIGURES, NULL, eta(s, 0));
    rc = fig_heads(s, res, err) || fig_attnmaps(s, res, err) || (res->n_vit && fig_poly(s, res, err)) ||
         fig_designs(s, res, err) || al_study_kv_frontier(p, res, s->h, err);
    phase_end(s);
    if (rc) return AL_STUDY_ERROR;
    if ((sig = stop_requested(s))) {
        tell_halt(s, AL_STUDY_HALT_BEFORE_REPORT);
        return stop_status(sig);
    }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(res->created, sizeof res->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    res->wall_s = al_now() - p->t0;
    return al_study_write_reports(res, err) ? AL_STUDY_ERROR : AL_STUDY_DONE;
}

int al_study_run_plan(al_study_plan *p, const al_study_hooks *h, al_study_results **results, al_err *err) {
    static const al_study_hooks none = {0};
    study s = {.p = p, .h = h ? h : &none, .run = -1};
    *results = NULL;
    for (int i = 0; i < p->n_runs; i++) {
        al_plan_run *r = &p->runs[i];
        if (strcmp(r->opts.out, r->dir)) return al_errf(err, "%s: the run's out is %s", r->dir, r->opts.out);
        int failed = al_dist_rank() == 0 && /* under mpirun: rank 0's run directories decide */
                     (r->conv_kind ? al_study_conv_state(p, r, err)
                                   : al_study_run_state(&r->opts, &r->state, &r->step, r->why, sizeof r->why, err));
        if (al_dist_bcast(&failed, sizeof failed, err) || failed) return AL_STUDY_ERROR;
        if (al_dist_bcast(&r->state, sizeof r->state, err) || al_dist_bcast(&r->step, sizeof r->step, err) ||
            al_dist_bcast(r->why, sizeof r->why, err))
            return AL_STUDY_ERROR;
    }
    s.left_after = nominal_after(p, -1);
    tell(&s, AL_STUDY_PLANNED, NULL, s.left_after);
    for (int i = 0; i < p->n_runs; i++) {
        int sig = stop_agreed(&s);
        if (sig) {
            s.run = i;
            tell_halt(&s, AL_STUDY_HALT_BEFORE_RUN);
            return stop_status(sig);
        }
        int rc = train_and_measure(&s, i, err);
        if (rc != AL_STUDY_DONE) return rc;
    }
    if (al_dist_rank() != 0) return AL_STUDY_DONE; /* rank 0 benchmarks, draws and reports for an MPI job */
    al_study_results *res = calloc(1, sizeof *res);
    if (!res) return al_errf(err, "out of memory");
    int rc = finish(&s, res, err);
    if (rc == AL_STUDY_DONE) *results = res;
    else al_study_results_free(res);
    return rc;
}
