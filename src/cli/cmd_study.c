/*
 * cmd_study.c: `attnlab study`: the end-to-end comparison (docs/study.md).
 *
 *   attnlab study --out DIR [--budget quick|standard|full] [--data FILE]
 *                 [--images DIR] [--seed N] [--seeds N] [--max-runs N]
 *
 * Trains the five study presets (mha gqa mqa mla lrkv) with one schedule and
 * seed(s), and a softmax / (1/14)x^3 pair of vision transformers on
 * Fashion-MNIST; measures each model (src/analysis/study.c); draws heads.png,
 * attnmaps.png, poly_vs_softmax.png, loss_curves.png and kv_vs_loss.png, each
 * with STEM.json and STEM.npy beside it; writes report.md, report.json and
 * report.html (study_report.c).
 *
 * Every run's options are built exactly as `attnlab train --preset NAME`
 * builds them (train_flags_table / train_flags_resolve), with the budget's
 * schedule as explicit flags. Runs live in DIR/runs/NAME-seedS; a rerun skips
 * the finished ones, resumes the interrupted ones and retrains the ones whose
 * settings differ. A monitor thread tails the current run's log.jsonl and
 * prints one progress line: which run, its step, and the ETA of the whole
 * study.
 */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "analysis/attnmap.h"
#include "analysis/study.h"
#include "attnlab.h"
#include "cli.h"
#include "core/blas.h"
#include "io/io.h"
#include "plot/figure.h"
#include "plot/lineplot.h"

static const char *const CMD = "study";

/* One planned training run. */
typedef struct plan_run {
    int vision, poly; /* vision: 0 language model, 1 ViT (poly: its score) */
    int design;       /* language models: index into al_study_design */
    uint64_t seed;
    char name[64]; /* "mha-seed1337", "vit-poly-seed1337" */
    al_train_opts o;
    al_run_state state;
    int step; /* saved step */
    char why[256];
} plan_run;

/* Everything the study knows while it runs. */
typedef struct study {
    const al_study_budget *b;
    char out[4000];
    const char *data, *images_src;
    char images[4200]; /* the directory the ViTs train from (a subset under out, or images_src) */
    int vision;
    uint64_t seeds[16];
    int n_seeds;
    plan_run *runs;
    int n_runs;
    al_corpus corpus;
} study;

/* ---- progress: a monitor thread tails the current run's log ---- */

typedef struct progress {
    pthread_mutex_t mu;
    pthread_t th;
    int started, stop, quiet, tty, line_open;
    int run_no, n_runs; /* 1-based run being worked on, of n_runs */
    char label[96];
    char log[4300];
    const char *phase; /* "training", "measuring", NULL: idle */
    int steps, start_step, vision;
    double phase_start;   /* al_now() when the phase started */
    double phase_nominal; /* nominal seconds of the current phase */
    double left_after;    /* nominal seconds of the work after the current phase */
    double done_actual, done_nominal;
    int printed_step, printed_eval, printed_decile;
    double printed_at;
} progress;

static progress prog = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Ctrl-C / SIGTERM outside training (training installs its own handler and
 * saves a checkpoint): the study stops at the next boundary between runs,
 * measurements and figures, so no file is left half written. */
static volatile sig_atomic_t study_signal = 0;
static void on_study_signal(int sig) {
    static const char note[] = "\nstudy: stopping after the current step; rerun the same command to continue\n";
    study_signal = sig;
    ssize_t w = write(STDERR_FILENO, note, sizeof note - 1);
    (void)w;
}
static int stop_status(void) { return study_signal == SIGTERM ? 143 : 130; }

static void fmt_dur(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e7)
        snprintf(buf, cap, "?");
    else if (s >= 3600)
        snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60)
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, cap, "%.0fs", s);
}

/* Seconds left in the study: nominal work left, scaled by how the work done
 * so far compared with its nominal time (lock held). `frac`: the fraction of
 * the current phase done. */
static double eta_locked(double frac) {
    double now = al_now(), cur_actual = prog.phase ? now - prog.phase_start : 0,
           cur_nom = prog.phase ? frac * prog.phase_nominal : 0;
    double nom = prog.done_nominal + cur_nom, act = prog.done_actual + cur_actual;
    double factor = nom > 3 ? act / nom : 1.0;
    if (factor < 0.2) factor = 0.2;
    if (factor > 20) factor = 20;
    return factor * ((prog.phase ? (1 - frac) * prog.phase_nominal : 0) + prog.left_after);
}

/* Prints a whole line, first ending any open progress line (lock held). */
static void say_locked(const char *fmt, va_list ap) {
    if (prog.line_open) fputs("\r\033[K", stderr);
    prog.line_open = 0;
    vfprintf(stderr, fmt, ap);
    fflush(stderr);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    if (prog.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&prog.mu);
    say_locked(fmt, ap);
    pthread_mutex_unlock(&prog.mu);
    va_end(ap);
}

/* The last complete line of a file, or "" (at most cap - 1 bytes of it). */
static void last_line(const char *path, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char buf[4096];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (n == 0 || buf[n - 1] != '\n') return;
    buf[n - 1] = 0;
    char *start = strrchr(buf, '\n');
    snprintf(out, cap, "%s", start ? start + 1 : buf);
}

/* One look at the log: a progress line (in place on a terminal; otherwise
 * every tenth of the run and at each evaluation). */
static void monitor_tick(void) {
    char line[4096], eta[32], rate[48], val[64] = "";
    pthread_mutex_lock(&prog.mu);
    if (!prog.phase || strcmp(prog.phase, "training")) {
        pthread_mutex_unlock(&prog.mu);
        return;
    }
    last_line(prog.log, line, sizeof line);
    cJSON *j = cJSON_Parse(line);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step"),
                *loss = cJSON_GetObjectItemCaseSensitive(j, "train_loss");
    const cJSON *tps = cJSON_GetObjectItemCaseSensitive(j, prog.vision ? "images_per_s" : "tokens_per_s");
    const cJSON *vl = cJSON_GetObjectItemCaseSensitive(j, "val_loss"),
                *va = cJSON_GetObjectItemCaseSensitive(j, "val_accuracy");
    int step = cJSON_IsNumber(st) ? st->valueint : prog.start_step;
    if (step < prog.start_step) step = prog.start_step;
    double frac = prog.steps > prog.start_step ? (double)(step - prog.start_step) / (prog.steps - prog.start_step) : 1;
    fmt_dur(eta, sizeof eta, eta_locked(frac));
    snprintf(rate, sizeof rate, "%.0f %s", cJSON_IsNumber(tps) ? tps->valuedouble : 0.0,
             prog.vision ? "img/s" : "tok/s");
    int is_eval = cJSON_IsNumber(vl) && step != prog.printed_eval;
    if (cJSON_IsNumber(va))
        snprintf(val, sizeof val, " | test acc %.1f%%", 100 * va->valuedouble);
    else if (cJSON_IsNumber(vl))
        snprintf(val, sizeof val, " | val %.4f", vl->valuedouble);
    int decile = (int)(10 * frac);
    if (prog.tty) {
        if (step != prog.printed_step || al_now() - prog.printed_at > 2) {
            fprintf(stderr, "\r\033[K[run %d/%d] %s | step %d/%d | loss %.4f%s | %s | study ETA %s", prog.run_no,
                    prog.n_runs, prog.label, step, prog.steps, cJSON_IsNumber(loss) ? loss->valuedouble : NAN, val,
                    rate, eta);
            prog.line_open = 1;
            prog.printed_at = al_now();
        }
    } else if (cJSON_IsNumber(st) && (is_eval || decile > prog.printed_decile)) {
        fprintf(stderr, "[run %d/%d] %s | step %d/%d | loss %.4f%s | %s | study ETA %s\n", prog.run_no, prog.n_runs,
                prog.label, step, prog.steps, cJSON_IsNumber(loss) ? loss->valuedouble : NAN, val, rate, eta);
    }
    fflush(stderr);
    if (is_eval) prog.printed_eval = step;
    if (decile > prog.printed_decile) prog.printed_decile = decile;
    prog.printed_step = step;
    cJSON_Delete(j);
    pthread_mutex_unlock(&prog.mu);
}

static void *monitor_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&prog.mu);
        int stop = prog.stop;
        pthread_mutex_unlock(&prog.mu);
        if (stop) break;
        monitor_tick();
        /* tv_nsec must stay below 1e9: nanosleep rejects {0, 1e9} at once,
         * which turned this loop into a busy wait that halved training speed */
        struct timespec ts = prog.tty ? (struct timespec){0, 400000000L} : (struct timespec){1, 0};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Starts a phase of the current run; `nominal` seconds expected. */
static void phase_begin(const char *phase, double nominal, double left_after) {
    pthread_mutex_lock(&prog.mu);
    prog.phase = phase;
    prog.phase_start = al_now();
    prog.phase_nominal = nominal;
    prog.left_after = left_after;
    prog.printed_step = -1;
    prog.printed_decile = 0;
    pthread_mutex_unlock(&prog.mu);
}

/* Ends the phase: its time and nominal time count toward the ETA factor. */
static void phase_end(void) {
    pthread_mutex_lock(&prog.mu);
    if (prog.phase) {
        prog.done_actual += al_now() - prog.phase_start;
        prog.done_nominal += prog.phase_nominal;
    }
    prog.phase = NULL;
    pthread_mutex_unlock(&prog.mu);
}

/* ---- planning ---- */

/* Flag value as text for cli_set. */
static int set_num(al_arg *args, int n, const char *name, double v) {
    char buf[64];
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, sizeof buf, "%.0f", v);
    else
        snprintf(buf, sizeof buf, "%.17g", v);
    return cli_set(CMD, args, n, name, buf, 1);
}

/* A language-model run's options, as `attnlab train --preset DESIGN` with the
 * budget's schedule given as flags. */
static int lm_opts(const study *s, int design, uint64_t seed, const char *dir, al_train_opts *o) {
    const al_study_budget *b = s->b;
    train_flags f;
    al_arg args[TRAIN_MAX_ARGS];
    int n = train_flags_table(&f, args), rc = 0;
    rc = rc ? rc : cli_set(CMD, args, n, "preset", al_study_design(design), 1);
    rc = rc ? rc : set_num(args, n, "context", b->lm_context);
    rc = rc ? rc : set_num(args, n, "batch", b->lm_batch);
    rc = rc ? rc : set_num(args, n, "steps", b->lm_steps);
    rc = rc ? rc : set_num(args, n, "warmup", b->lm_warmup);
    rc = rc ? rc : set_num(args, n, "lr", b->lm_lr);
    rc = rc ? rc : set_num(args, n, "eval-every", b->lm_eval_every);
    rc = rc ? rc : set_num(args, n, "eval-tokens", b->lm_eval_tokens);
    rc = rc ? rc : set_num(args, n, "save-every", b->lm_save_every);
    rc = rc ? rc : set_num(args, n, "seed", (double)seed);
    rc = rc ? rc : cli_set(CMD, args, n, "quiet", "true", 1);
    rc = rc ? rc : cli_set(CMD, args, n, "out", dir, 1);
    if (!rc && s->data) rc = cli_set(CMD, args, n, "data", s->data, 1);
    return rc ? rc : train_flags_resolve(CMD, &f, args, n, o);
}

/* A vision run's options: the model flags through the same table, then the
 * image settings of `attnlab train --task vision` (2 x 2 patches: 196
 * patches, so poly "auto" is 1/14). */
static int vit_opts(const study *s, int poly, uint64_t seed, const char *dir, al_train_opts *o) {
    const al_study_budget *b = s->b;
    train_flags f;
    al_arg args[TRAIN_MAX_ARGS];
    int n = train_flags_table(&f, args), rc = 0;
    rc = rc ? rc : set_num(args, n, "layers", b->vit_layers);
    rc = rc ? rc : set_num(args, n, "hidden", b->vit_hidden);
    rc = rc ? rc : set_num(args, n, "heads", b->vit_heads);
    rc = rc ? rc : set_num(args, n, "batch", b->vit_batch);
    rc = rc ? rc : set_num(args, n, "steps", b->vit_steps);
    rc = rc ? rc : set_num(args, n, "warmup", b->vit_warmup);
    rc = rc ? rc : set_num(args, n, "lr", b->vit_lr);
    rc = rc ? rc : set_num(args, n, "eval-every", b->vit_eval_every);
    rc = rc ? rc : set_num(args, n, "save-every", b->vit_save_every);
    rc = rc ? rc : set_num(args, n, "seed", (double)seed);
    rc = rc ? rc : cli_set(CMD, args, n, "score", poly ? "poly" : "softmax", 1);
    rc = rc ? rc : cli_set(CMD, args, n, "quiet", "true", 1);
    rc = rc ? rc : cli_set(CMD, args, n, "out", dir, 1);
    rc = rc ? rc : train_flags_resolve(CMD, &f, args, n, o);
    if (rc) return rc;
    al_config *c = &o->model;
    c->task = AL_TASK_VISION;
    c->image_size = 28;
    c->patch_size = 2;
    c->num_channels = 1;
    c->num_labels = 10;
    c->image_mean = 0.0; /* set from the training images when the run starts */
    c->image_std = 1.0;
    al_config_vision_derive(c, 1);
    al_err err;
    if (al_config_validate(c, &err)) return cli_fail(CMD, err.msg);
    o->context = c->max_position;
    o->train_subset = b->vit_train_images;
    o->eval_images = b->vit_eval_images;
    snprintf(o->images, sizeof o->images, "%s", s->images);
    return 0;
}

/* Seed-major: the five designs, then the two ViTs, for each seed. */
static int make_plan(study *s) {
    const int per_seed = AL_STUDY_DESIGNS + (s->vision ? 2 : 0);
    s->runs = calloc((size_t)s->n_seeds * per_seed, sizeof *s->runs);
    if (!s->runs) return cli_fail(CMD, "out of memory");
    for (int si = 0; si < s->n_seeds; si++)
        for (int k = 0; k < per_seed; k++) {
            plan_run *r = &s->runs[s->n_runs];
            char dir[4200];
            r->seed = s->seeds[si];
            r->vision = k >= AL_STUDY_DESIGNS;
            r->poly = k == AL_STUDY_DESIGNS + 1;
            r->design = r->vision ? -1 : k;
            if (r->vision)
                snprintf(r->name, sizeof r->name, "vit-%s-seed%llu", r->poly ? "poly" : "softmax",
                         (unsigned long long)r->seed);
            else
                snprintf(r->name, sizeof r->name, "%s-seed%llu", al_study_design(k), (unsigned long long)r->seed);
            snprintf(dir, sizeof dir, "%s/runs/%s", s->out, r->name);
            int rc = r->vision ? vit_opts(s, r->poly, r->seed, dir, &r->o) : lm_opts(s, k, r->seed, dir, &r->o);
            if (rc) return rc;
            r->state = al_study_run_state(&r->o, &r->step, r->why, sizeof r->why);
            s->n_runs++;
        }
    return 0;
}

/* Nominal seconds of the end of the study: the speed benchmark and the figures. */
static double final_nominal(const al_study_budget *b) {
    return b->speed_rounds * AL_STUDY_DESIGNS * ((b->speed_steps + 1) * b->lm_step_s + 0.5) + b->figures_s;
}

/* Nominal seconds of what is left of run i (training from its saved step,
 * and measuring unless a valid measure.json is there). */
static double nominal_left(const study *s, int i) {
    const plan_run *r = &s->runs[i];
    const al_study_budget *b = s->b;
    double step_s = r->vision ? b->vit_step_s : b->lm_step_s,
           measure_s = r->vision ? b->vit_measure_s : b->lm_measure_s;
    double t = 0;
    if (r->state != AL_RUN_COMPLETE) t += (r->o.steps - (r->state == AL_RUN_PARTIAL ? r->step : 0)) * step_s;
    if (r->state != AL_RUN_COMPLETE)
        t += measure_s;
    else {
        al_lm_measure lm;
        al_vit_measure vm;
        int have = r->vision ? !al_study_load_vit_measure(r->o.out, r->o.steps, &vm)
                             : !al_study_load_lm_measure(r->o.out, r->o.steps, &lm);
        if (!have) t += measure_s;
    }
    return t;
}

/* ---- running ---- */

/* Removes what a stale run left, so nothing of it can be mistaken for the new one. */
static void clear_run(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors", "train_state.safetensors", "log.jsonl",
                                        "measure.json"};
    char path[4300];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
}

/* The options of an interrupted run, from its own config.json (as `attnlab
 * train --resume` reads them: the vision standardisation is the run's). */
static int resume_opts(const plan_run *r, al_train_opts *o, al_err *err) {
    char path[4300], *extra = NULL;
    al_train_opts_default(o);
    snprintf(path, sizeof path, "%s/config.json", r->o.out);
    if (al_config_load(&o->model, path, &extra, err)) return -1;
    cJSON *al = extra ? cJSON_Parse(extra) : NULL;
    free(extra);
    char *tj = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(al, "train"));
    cJSON_Delete(al);
    int rc = tj ? al_train_opts_from_json(o, tj, err) : al_errf(err, "%s: no training settings", path);
    free(tj);
    if (rc) return -1;
    snprintf(o->out, sizeof o->out, "%s", r->o.out);
    o->progress = 0;
    o->resume = 1;
    return 0;
}

/* Measures run i unless its measure.json is valid. */
static int measure_run(study *s, int i, al_err *err) {
    plan_run *r = &s->runs[i];
    if (r->vision) {
        al_vit_measure m;
        if (!al_study_load_vit_measure(r->o.out, r->o.steps, &m)) return 0;
        return al_study_measure_vit(r->o.out, r->o.steps, &m, err) || al_study_save_vit_measure(r->o.out, &m, err);
    }
    al_lm_measure m;
    if (!al_study_load_lm_measure(r->o.out, r->o.steps, &m)) return 0;
    if (al_study_measure_lm(r->o.out, &s->corpus, s->b->lm_final_eval_tokens, &m, err))
        return -1;
    m.steps = r->o.steps;
    return al_study_save_lm_measure(r->o.out, &m, err);
}

/* Trains (or resumes) and measures every run in order. Returns 0, an exit
 * status (1 error, 130/143 interrupted), or -2 when --max-runs stopped it. */
static int run_all(study *s, long max_runs) {
    int trained = 0;
    for (int i = 0; i < s->n_runs; i++) {
        plan_run *r = &s->runs[i];
        if (study_signal) {
            say("study: interrupted before %s; rerun the same command to continue\n", r->name);
            return stop_status();
        }
        double after = final_nominal(s->b);
        for (int j = i + 1; j < s->n_runs; j++) after += nominal_left(s, j);
        pthread_mutex_lock(&prog.mu);
        prog.run_no = i + 1;
        snprintf(prog.label, sizeof prog.label, "%s", r->name);
        snprintf(prog.log, sizeof prog.log, "%s/log.jsonl", r->o.out);
        prog.steps = r->o.steps;
        prog.vision = r->vision;
        prog.start_step = r->state == AL_RUN_PARTIAL ? r->step : 0;
        prog.printed_eval = -1;
        pthread_mutex_unlock(&prog.mu);
        al_err err;
        if (r->state != AL_RUN_COMPLETE) {
            if (max_runs > 0 && trained >= max_runs) {
                say("study: stopped after %d run%s (--max-runs); rerun without it to continue\n", trained,
                    trained == 1 ? "" : "s");
                return -2;
            }
            const al_study_budget *b = s->b;
            const double step_s = r->vision ? b->vit_step_s : b->lm_step_s;
            const double measure_s = r->vision ? b->vit_measure_s : b->lm_measure_s;
            al_train_opts o;
            char eta[32];
            const double left = nominal_left(s, i) + after;
            pthread_mutex_lock(&prog.mu);
            fmt_dur(eta, sizeof eta, left * (prog.done_nominal > 3 ? prog.done_actual / prog.done_nominal : 1));
            pthread_mutex_unlock(&prog.mu);
            if (r->state == AL_RUN_PARTIAL) {
                say("[run %d/%d] %s: resuming at step %d of %d (study ETA %s)\n", i + 1, s->n_runs, r->name, r->step,
                    r->o.steps, eta);
                if (resume_opts(r, &o, &err)) return cli_fail(CMD, err.msg);
            } else {
                if (r->state == AL_RUN_STALE)
                    say("[run %d/%d] %s: %s: training it again\n", i + 1, s->n_runs, r->name, r->why);
                say("[run %d/%d] %s: training %d steps (study ETA %s)\n", i + 1, s->n_runs, r->name, r->o.steps, eta);
                clear_run(r->o.out);
                o = r->o;
            }
            char msr[4300];
            snprintf(msr, sizeof msr, "%s/measure.json", r->o.out);
            unlink(msr);
            const int from = r->state == AL_RUN_PARTIAL ? r->step : 0;
            phase_begin("training", (r->o.steps - from) * step_s, after + measure_s);
            int rc = al_train(&o, &err);
            phase_end();
            if (rc == AL_TRAIN_ERROR) {
                char msg[AL_ERR_LEN + 128];
                snprintf(msg, sizeof msg, "%s: %s", r->name, err.msg);
                return cli_fail(CMD, msg);
            }
            if (rc != AL_TRAIN_OK) {
                say("study: interrupted in %s (its checkpoint is saved); rerun the same command to continue\n",
                    r->name);
                return rc == AL_TRAIN_INTERRUPTED ? 130 : 143;
            }
            r->state = AL_RUN_COMPLETE;
            r->step = r->o.steps;
            trained++;
            phase_begin("measuring", measure_s, after);
            say("[run %d/%d] %s: trained; measuring\n", i + 1, s->n_runs, r->name);
        } else {
            say("[run %d/%d] %s: complete, skipped\n", i + 1, s->n_runs, r->name);
            phase_begin("measuring", nominal_left(s, i), after);
        }
        int rc = measure_run(s, i, &err);
        phase_end();
        if (rc) {
            char msg[AL_ERR_LEN + 128];
            snprintf(msg, sizeof msg, "measuring %s: %s", r->name, err.msg);
            return cli_fail(CMD, msg);
        }
    }
    return 0;
}

/* ---- data files beside figures ---- */

/* STEM.json from a cJSON object (freed) and STEM.npy from floats. */
static int write_data(const char *out, const char *stem, cJSON *j, const float *npy, int ndim, const int64_t *shape,
                      al_err *err) {
    char path[4300];
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return al_errf(err, "out of memory");
    snprintf(path, sizeof path, "%s/%s.json", out, stem);
    int rc = al_write_file_atomic(path, text, strlen(text), err);
    free(text);
    snprintf(path, sizeof path, "%s/%s.npy", out, stem);
    if (!rc) rc = al_npy_write_f32(path, npy, ndim, shape, err);
    return rc;
}

static void add_figure(al_study_results *res, const char *file, const char *d0, const char *d1, const char *d2,
                       const char *caption) {
    if (res->n_figures >= 8) return;
    al_study_figure *f = &res->figures[res->n_figures++];
    snprintf(f->file, sizeof f->file, "%s", file);
    snprintf(f->data[0], sizeof f->data[0], "%s", d0 ? d0 : "");
    snprintf(f->data[1], sizeof f->data[1], "%s", d1 ? d1 : "");
    snprintf(f->data[2], sizeof f->data[2], "%s", d2 ? d2 : "");
    snprintf(f->caption, sizeof f->caption, "%s", caption);
}

/* ---- figures ---- */

/* The end of a line-plot figure: unless rc already failed, STEM.json (j,
 * consumed either way) and STEM.npy, then STEM.png; the plot is freed and the
 * figure listed for the report. Returns 0 or -1. */
static int finish_lineplot(const study *s, al_study_results *res, al_lineplot *p, cJSON *j, int rc, const char *stem,
                           const float *npy, int ndim, const int64_t *shape, const char *caption, al_err *err) {
    char png[64], json[64], data[64], path[4300];
    snprintf(png, sizeof png, "%s.png", stem);
    snprintf(json, sizeof json, "%s.json", stem);
    snprintf(data, sizeof data, "%s.npy", stem);
    if (!rc) {
        rc = write_data(s->out, stem, j, npy, ndim, shape, err);
        j = NULL;
    }
    snprintf(path, sizeof path, "%s/%s", s->out, png);
    if (!rc) rc = al_lineplot_save(p, path, err);
    cJSON_Delete(j);
    al_lineplot_free(p);
    if (rc) return -1;
    add_figure(res, png, json, data, NULL, caption);
    return 0;
}

/* heads.png through `attnlab heads`' own code (cmd_heads.c): the first
 * seed's five models in the seed figure's order MHA, LRKV, GQA, MQA, MLA. */
static int fig_heads(const study *s, al_study_results *res) {
    static const int order[AL_STUDY_DESIGNS] = {0, 4, 1, 2, 3};
    const char *dirs[AL_STUDY_DESIGNS];
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) dirs[k] = res->lm[order[k]].dir;
    char out[4300];
    snprintf(out, sizeof out, "%s/heads.png", s->out);
    fflush(stdout);
    if (heads_write(CMD, dirs, NULL, AL_STUDY_DESIGNS, "mean", out)) return 1;
    add_figure(res, "heads.png", "heads.json", "heads.npy", "heads.csv",
               "Head similarity s_ij = <A_i, A_j>_F / (|A_i| |A_j|), A_h = Wq_h^T Wk_h, averaged over layers, for the "
               "five designs (first seed); subtitles give the effective rank in heads.");
    return 0;
}

/* attnmaps.png: the MHA model's layers {0, L-1} x heads {0, H-1} over the
 * first attnmap_tokens bytes of the validation split, log scale 1e-6..1, x
 * = query, y = key, as `attnlab attnmap` draws them; STEM.npy full size. */
static int fig_attnmaps(const study *s, al_study_results *res, al_err *err) {
    const al_study_lm_run *mha = &res->lm[0];
    const al_corpus *c = &s->corpus;
    size_t nv = c->n - c->n_train;
    int T = (size_t)s->b->attnmap_tokens < nv ? s->b->attnmap_tokens : (int)nv;
    char path[4300];
    snprintf(path, sizeof path, "%s/attnmap_input.txt", s->out);
    if (T < 2) return al_errf(err, "the validation split is too short for attention maps");
    if (al_write_file_atomic(path, c->bytes + c->n_train, (size_t)T, err)) return -1;
    int *tok = malloc(sizeof(int) * (size_t)T);
    if (!tok) return al_errf(err, "out of memory");
    for (int i = 0; i < T; i++) tok[i] = c->bytes[c->n_train + (size_t)i];
    al_model m;
    al_acts a;
    int trained;
    int rc = al_attnmap_prepare(mha->dir, tok, T, &m, &a, &trained, err);
    free(tok);
    if (rc) return -1;
    const int L = m.cfg.num_layers, H = m.cfg.num_heads;
    const int layers[2] = {0, L - 1}, heads[2] = {0, H - 1};
    float *Pm = malloc(sizeof(float) * 4 * (size_t)T * T), *t = malloc(sizeof(float) * (size_t)T * T);
    al_figure *f = NULL;
    cJSON *j = cJSON_CreateObject(), *pairs = cJSON_AddArrayToObject(j, "pairs");
    rc = Pm && t ? 0 : al_errf(err, "out of memory");
    for (int i = 0; i < 4 && !rc; i++) {
        float *Pi = Pm + (size_t)i * T * T;
        rc = al_attnmap_weights(&m, &a, layers[i / 2], heads[i % 2], Pi, err);
        if (rc) break;
        al_head_stats hs;
        rc = al_head_stats_of(Pi, T, 10, 0, &hs, err);
        if (rc) break;
        cJSON *o = cJSON_CreateObject();
        char title[64];
        snprintf(title, sizeof title, "Layer %d Head %d", layers[i / 2], heads[i % 2]);
        cJSON_AddNumberToObject(o, "layer", layers[i / 2]);
        cJSON_AddNumberToObject(o, "head", heads[i % 2]);
        cJSON_AddStringToObject(o, "title", title);
        cJSON_AddNumberToObject(o, "sink_mass", hs.sink_mass);
        cJSON_AddNumberToObject(o, "entropy", hs.entropy);
        cJSON_AddNumberToObject(o, "mean_distance", hs.mean_distance);
        cJSON_AddNumberToObject(o, "topk_mass", hs.topk_mass);
        cJSON_AddNumberToObject(o, "topk", hs.topk);
        cJSON_AddNumberToObject(o, "row_sum", hs.row_sum);
        cJSON_AddNumberToObject(o, "min", hs.min_weight);
        cJSON_AddNumberToObject(o, "max", hs.max_weight);
        cJSON_AddItemToArray(pairs, o);
    }
    if (!rc) {
        cJSON_AddStringToObject(j, "figure", "attnmaps.png");
        cJSON_AddStringToObject(j, "model", mha->dir);
        cJSON_AddStringToObject(j, "text", "attnmap_input.txt");
        cJSON_AddNumberToObject(j, "tokens", T);
        cJSON_AddNumberToObject(j, "trained_context", trained);
        cJSON_AddStringToObject(j, "attention", al_attn_name(m.cfg.attention));
        cJSON_AddStringToObject(j, "score", al_score_name(m.cfg.score));
        cJSON_AddStringToObject(j, "scale", "log");
        cJSON_AddStringToObject(j, "npy_layout", "[pair, query, key]");
        const int64_t shape[3] = {4, T, T};
        rc = write_data(s->out, "attnmaps", j, Pm, 3, shape, err);
        j = NULL;
    }
    if (!rc) {
        al_heat_style st = {.cmap = "viridis",
                            .norm = al_norm_log(1e-6, 1.0),
                            .xlabel = "Output (query) position",
                            .ylabel = "Input (key) position"};
        f = al_figure_new(2, 2, &st, err);
        char title[256];
        snprintf(title, sizeof title, "MHA (seed %llu): %d tokens of the validation split (trained context %d)",
                 (unsigned long long)mha->seed, T, trained);
        rc = f ? al_figure_set_title(f, title, err) : -1;
        for (int i = 0; i < 4 && !rc; i++) {
            const float *Pi = Pm + (size_t)i * T * T;
            for (int q = 0; q < T; q++)
                for (int k = 0; k < T; k++) t[(size_t)k * T + q] = Pi[(size_t)q * T + k];
            char name[64];
            snprintf(name, sizeof name, "Layer %d Head %d", layers[i / 2], heads[i % 2]);
            rc = al_figure_panel(f, i, name, t, T, T, err);
        }
        snprintf(path, sizeof path, "%s/attnmaps.png", s->out);
        if (!rc) rc = al_figure_save(f, path, err);
    }
    cJSON_Delete(j);
    al_figure_free(f);
    free(Pm);
    free(t);
    al_acts_free(&a);
    al_model_free(&m);
    if (rc) return -1;
    char cap[512];
    snprintf(cap, sizeof cap,
             "Attention weights of the MHA model (first seed), layers 0 and %d x heads 0 and %d, over %d bytes of the "
             "validation split (the models trained at context %d), log colour scale 1e-6..1; x = query, y = key.",
             L - 1, H - 1, T, trained);
    add_figure(res, "attnmaps.png", "attnmaps.json", "attnmaps.npy", "attnmap_input.txt", cap);
    return 0;
}

/* Fashion-MNIST's ten classes, by label. */
static const char *const fmnist_classes[10] = {"T-shirt/top", "trouser", "pullover", "dress", "coat",
                                               "sandal",      "shirt",   "sneaker",  "bag",   "ankle boot"};

/* poly_vs_softmax.png: the CLS token's attention over the 14 x 14 patch grid
 * of the two ViTs (first seed; last layer, head 0) for the first test image,
 * each panel with its own range (signed weights: symmetric, RdYlBu_r). */
static int fig_poly(const study *s, al_study_results *res, al_err *err) {
    const al_study_vit_run *v[2] = {NULL, NULL};
    for (int i = 0; i < res->n_vit; i++)
        if (!v[res->vit[i].poly]) v[res->vit[i].poly] = &res->vit[i];
    if (!v[0] || !v[1]) return 0;
    al_image_set set;
    if (al_fmnist_load(&set, s->images, "t10k", 1, err)) return -1;
    const int image = 0;
    int side = 0, rc = 0, T = 0;
    float *grid = NULL, *row = NULL;
    cJSON *j = cJSON_CreateObject(), *panels = cJSON_AddArrayToObject(j, "panels");
    for (int k = 0; k < 2 && !rc; k++) {
        al_model m;
        if (al_model_load(&m, v[k]->dir, NULL, err)) {
            rc = -1;
            break;
        }
        const int P = al_config_num_patches(&m.cfg);
        side = (int)lround(sqrt((double)P));
        T = P + 1;
        if (!grid) grid = malloc(sizeof(float) * 2 * (size_t)P), row = malloc(sizeof(float) * (size_t)T);
        res->cls_layer = m.cfg.num_layers - 1;
        res->cls_head = 0;
        rc = grid && row ? al_vit_cls_attention(&m, &set, image, res->cls_layer, 0, row, err)
                         : al_errf(err, "out of memory");
        if (!rc) {
            double lo = INFINITY, hi = -INFINITY, sum = 0;
            for (int p = 0; p < P; p++) {
                grid[(size_t)k * P + p] = row[1 + p];
                lo = fmin(lo, row[1 + p]), hi = fmax(hi, row[1 + p]);
            }
            for (int p = 0; p < T; p++) sum += row[p];
            res->cls_min[k] = lo, res->cls_max[k] = hi;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", v[k]->dir);
            cJSON_AddStringToObject(o, "title", v[k]->title);
            cJSON_AddStringToObject(o, "score", al_score_name(m.cfg.score));
            cJSON_AddNumberToObject(o, "layer", res->cls_layer);
            cJSON_AddNumberToObject(o, "head", 0);
            cJSON_AddNumberToObject(o, "cls_self_weight", row[0]);
            cJSON_AddNumberToObject(o, "row_sum", sum);
            cJSON_AddNumberToObject(o, "min", lo);
            cJSON_AddNumberToObject(o, "max", hi);
            cJSON_AddItemToObject(o, "weights", cJSON_CreateFloatArray(row, T));
            cJSON_AddItemToArray(panels, o);
        }
        al_model_free(&m);
    }
    const int P = side * side;
    res->cls_image = image;
    res->cls_label = set.n > 0 ? set.labels[0] : -1;
    if (!rc) {
        float pix[28 * 28];
        for (int i = 0; i < 28 * 28 && i < set.S * set.S; i++) pix[i] = set.pixels[i] / 255.0f;
        cJSON_AddStringToObject(j, "figure", "poly_vs_softmax.png");
        cJSON_AddStringToObject(j, "images", s->images);
        cJSON_AddNumberToObject(j, "image", image);
        cJSON_AddNumberToObject(j, "label", res->cls_label);
        cJSON_AddItemToObject(j, "pixels", cJSON_CreateFloatArray(pix, set.S * set.S));
        cJSON_AddStringToObject(j, "npy_layout", "[model (softmax, poly), patch row, patch column]: CLS weights");
        const int64_t shape[3] = {2, side, side};
        rc = write_data(s->out, "poly_vs_softmax", j, grid, 3, shape, err);
        j = NULL;
    }
    if (!rc) {
        al_heat_style base = {.cmap = "viridis", .xlabel = "Patch column", .ylabel = "Patch row"};
        al_figure *f = al_figure_new(1, 2, &base, err);
        rc = f ? 0 : -1;
        for (int k = 0; k < 2 && !rc; k++) {
            al_heat_style st = base;
            double lo = res->cls_min[k], hi = res->cls_max[k], mx = fmax(fabs(lo), fabs(hi));
            /* signed (poly): symmetric about 0; positive (softmax): min..max, as the paper's figure */
            if (lo < 0)
                st.cmap = "RdYlBu_r", st.norm = al_norm_symmetric(mx > 0 ? mx : 1);
            else
                st.norm = hi > lo ? al_norm_linear(lo, hi) : al_norm_linear(0, hi > 0 ? hi : 1);
            char sub[96];
            snprintf(sub, sizeof sub, "CLS token, layer %d, head 0", res->cls_layer);
            rc = al_figure_panel(f, k, v[k]->title, grid + (size_t)k * P, side, side, err) ||
                 al_figure_panel_style(f, k, &st, err) || al_figure_panel_subtitle(f, k, sub, err);
        }
        char path[4300];
        snprintf(path, sizeof path, "%s/poly_vs_softmax.png", s->out);
        if (!rc) rc = al_figure_save(f, path, err);
        al_figure_free(f);
    }
    cJSON_Delete(j);
    free(grid);
    free(row);
    al_image_set_free(&set);
    if (rc) return -1;
    char cap[512];
    snprintf(cap, sizeof cap,
             "The CLS token's attention over the %d x %d patch grid of Fashion-MNIST test image %d (a %s), last "
             "layer, head 0: a ViT with softmax and one with %s (first seed), each panel with its own colour range "
             "(signed weights: symmetric about 0).",
             side, side, image, res->cls_label >= 0 && res->cls_label < 10 ? fmnist_classes[res->cls_label] : "?",
             v[1]->title + 15);
    add_figure(res, "poly_vs_softmax.png", "poly_vs_softmax.json", "poly_vs_softmax.npy", NULL, cap);
    return 0;
}

/* loss_curves.png: validation loss against training tokens, one line per
 * design (mean over seeds, band min..max), and the unigram baseline. */
static int fig_loss(const study *s, al_study_results *res, al_err *err) {
    const double per_step = (double)res->lm_opts.batch * res->lm_opts.context;
    const double total = per_step * res->lm_opts.steps;
    const double unit = total >= 2e6 ? 1e6 : 1e3;
    char xlabel[64];
    snprintf(xlabel, sizeof xlabel, "training tokens (%s)", unit == 1e6 ? "millions" : "thousands");
    al_lineplot *p = al_lineplot_new("Validation loss during training", xlabel, "validation loss (nats/byte)", err);
    if (!p) return -1;
    int np = 0;
    for (int i = 0; i < res->n_lm; i++) np = res->lm[i].log.n > np ? res->lm[i].log.n : np;
    float *npy = calloc((size_t)AL_STUDY_DESIGNS * np * 4, sizeof(float));
    double *x = malloc(sizeof(double) * np * 4), *y = x + np, *lo = y + np, *hi = lo + np;
    cJSON *j = cJSON_CreateObject(), *series = cJSON_AddArrayToObject(j, "series");
    int rc = npy && x ? 0 : al_errf(err, "out of memory");
    for (int k = 0; k < AL_STUDY_DESIGNS && !rc; k++) {
        const al_study_lm_run *first = NULL;
        int n_seeds = 0;
        cJSON *o = cJSON_CreateObject(), *runs = cJSON_CreateArray();
        for (int i = 0; i < res->n_lm; i++)
            if (res->lm[i].design == k) {
                if (!first) first = &res->lm[i];
                n_seeds++;
                cJSON *ro = cJSON_CreateObject();
                cJSON_AddNumberToObject(ro, "seed", (double)res->lm[i].seed);
                cJSON_AddItemToObject(ro, "val_loss",
                                      cJSON_CreateDoubleArray(res->lm[i].log.val_loss, res->lm[i].log.n));
                cJSON_AddItemToArray(runs, ro);
            }
        if (!first) {
            cJSON_Delete(o);
            cJSON_Delete(runs);
            continue;
        }
        const int n = first->log.n;
        for (int e = 0; e < n; e++) {
            double sum = 0, mn = INFINITY, mx = -INFINITY;
            int c = 0;
            for (int i = 0; i < res->n_lm; i++) {
                const al_study_lm_run *r = &res->lm[i];
                if (r->design != k || e >= r->log.n || r->log.step[e] != first->log.step[e]) continue;
                sum += r->log.val_loss[e], mn = fmin(mn, r->log.val_loss[e]), mx = fmax(mx, r->log.val_loss[e]);
                c++;
            }
            x[e] = first->log.step[e] * per_step / unit;
            y[e] = sum / c, lo[e] = mn, hi[e] = mx;
            float *q = npy + ((size_t)k * np + e) * 4;
            q[0] = (float)(first->log.step[e] * per_step), q[1] = (float)y[e], q[2] = (float)mn, q[3] = (float)mx;
        }
        for (int e = n; e < np; e++)
            for (int c = 0; c < 4; c++) npy[((size_t)k * np + e) * 4 + c] = NAN;
        int li = al_lineplot_line(p, al_study_design_title(k), x, y, n, err);
        rc = li < 0 || (n_seeds > 1 && al_lineplot_band(p, li, lo, hi, err));
        cJSON_AddStringToObject(o, "design", al_study_design(k));
        cJSON_AddStringToObject(o, "title", al_study_design_title(k));
        cJSON_AddNumberToObject(o, "seeds", n_seeds);
        cJSON *tk = cJSON_AddArrayToObject(o, "tokens");
        for (int e = 0; e < n; e++) cJSON_AddItemToArray(tk, cJSON_CreateNumber(first->log.step[e] * per_step));
        cJSON_AddItemToObject(o, "val_loss_mean", cJSON_CreateDoubleArray(y, n));
        cJSON_AddItemToObject(o, "val_loss_min", cJSON_CreateDoubleArray(lo, n));
        cJSON_AddItemToObject(o, "val_loss_max", cJSON_CreateDoubleArray(hi, n));
        cJSON_AddItemToObject(o, "runs", runs);
        cJSON_AddItemToArray(series, o);
    }
    if (!rc) rc = al_lineplot_hline(p, "unigram baseline", res->unigram.val_cross_entropy, err);
    if (!rc) {
        char note[160];
        snprintf(note, sizeof note, "%d seed%s per design%s; validation loss on %d bytes per evaluation", res->n_seeds,
                 res->n_seeds == 1 ? "" : "s", res->n_seeds > 1 ? " (line: mean, band: min..max)" : "",
                 res->lm_opts.eval_tokens);
        rc = al_lineplot_set_footnote(p, note, err);
    }
    if (!rc) {
        cJSON_AddStringToObject(j, "figure", "loss_curves.png");
        cJSON_AddStringToObject(j, "x", "training tokens");
        cJSON_AddStringToObject(j, "y", "validation loss, nats/byte");
        cJSON_AddNumberToObject(j, "unigram_baseline", res->unigram.val_cross_entropy);
        cJSON_AddStringToObject(j, "npy_layout",
                                "[design (mha gqa mqa mla lrkv), evaluation, (tokens, mean, min, max)]");
    }
    const int64_t shape[3] = {AL_STUDY_DESIGNS, np, 4};
    rc = finish_lineplot(s, res, p, j, rc, "loss_curves", npy, 3, shape,
                         "Validation loss against training tokens for the five designs, with the unigram baseline "
                         "(dashed).",
                         err);
    free(npy);
    free(x);
    return rc;
}

/* kv_vs_loss.png: one labelled point per design, KV cache (% of MHA) against
 * validation loss (error bar: min..max over seeds). */
static int fig_kv(const study *s, al_study_results *res, al_err *err) {
    al_lineplot *p = al_lineplot_new("KV cache vs validation loss", "KV cache per token (% of MHA)",
                                     "validation loss (nats/byte)", err);
    if (!p) return -1;
    float npy[AL_STUDY_DESIGNS * 4];
    int n = 0, rc = 0;
    cJSON *j = cJSON_CreateObject(), *pts = cJSON_AddArrayToObject(j, "points");
    for (int k = 0; k < AL_STUDY_DESIGNS && !rc; k++) {
        double v[16];
        int c = 0;
        const al_study_lm_run *first = NULL;
        for (int i = 0; i < res->n_lm && c < 16; i++)
            if (res->lm[i].design == k) {
                if (!first) first = &res->lm[i];
                v[c++] = res->lm[i].m.val_loss;
            }
        if (!first) continue;
        al_stat st = al_stat_of(v, c);
        rc = al_lineplot_point(p, al_study_design_title(k), first->m.kv_pct_of_mha, st.mean, c > 1 ? st.min : NAN,
                               c > 1 ? st.max : NAN, err) < 0;
        if (!rc) rc = al_lineplot_color(p, 1, n, k, err);
        float *q = npy + 4 * n;
        q[0] = (float)first->m.kv_pct_of_mha, q[1] = (float)st.mean, q[2] = (float)st.min, q[3] = (float)st.max;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "design", al_study_design(k));
        cJSON_AddStringToObject(o, "title", al_study_design_title(k));
        cJSON_AddNumberToObject(o, "kv_pct_of_mha", first->m.kv_pct_of_mha);
        cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)first->m.kv_bytes_per_token);
        cJSON_AddNumberToObject(o, "val_loss_mean", st.mean);
        cJSON_AddNumberToObject(o, "val_loss_min", st.min);
        cJSON_AddNumberToObject(o, "val_loss_max", st.max);
        cJSON_AddNumberToObject(o, "seeds", c);
        cJSON_AddItemToArray(pts, o);
        n++;
    }
    if (!rc) {
        char note[160];
        snprintf(note, sizeof note, "%d seed%s per design%s", res->n_seeds, res->n_seeds == 1 ? "" : "s",
                 res->n_seeds > 1 ? " (point: mean, bar: min..max)" : "");
        rc = al_lineplot_set_footnote(p, note, err);
    }
    if (!rc) {
        cJSON_AddStringToObject(j, "figure", "kv_vs_loss.png");
        cJSON_AddStringToObject(j, "npy_layout", "[design (mha gqa mqa mla lrkv), (kv_pct_of_mha, mean, min, max)]");
    }
    const int64_t shape[2] = {n, 4};
    return finish_lineplot(s, res, p, j, rc, "kv_vs_loss", npy, 2, shape,
                           "KV-cache size per token (% of MHA) against final validation loss, one point per design.",
                           err);
}

/* ---- results ---- */

/* Reads every run's measurements and log into res. */
static int collect(const study *s, al_study_results *res, al_err *err) {
    res->lm = calloc((size_t)s->n_runs, sizeof *res->lm);
    res->vit = calloc((size_t)s->n_runs, sizeof *res->vit);
    if (!res->lm || !res->vit) return al_errf(err, "out of memory");
    for (int i = 0; i < s->n_runs; i++) {
        const plan_run *r = &s->runs[i];
        char path[4300];
        snprintf(path, sizeof path, "%s/config.json", r->o.out);
        if (r->vision) {
            al_study_vit_run *v = &res->vit[res->n_vit];
            v->poly = r->poly, v->seed = r->seed;
            snprintf(v->dir, sizeof v->dir, "%s", r->o.out);
            if (al_config_load(&v->cfg, path, NULL, err) || al_study_load_vit_measure(r->o.out, r->o.steps, &v->m) ||
                al_run_log_read(r->o.out, &v->log, err))
                return al_errf(err, "%s: measurements or log missing", r->o.out);
            al_score_title(&v->cfg, v->title, sizeof v->title);
            v->train_images_per_s = v->log.items_per_s;
            v->train_seconds = r->o.steps * r->o.batch / (v->log.items_per_s > 0 ? v->log.items_per_s : 1);
            if (res->n_vit++ == 0) res->vit_opts = r->o;
        } else {
            al_study_lm_run *l = &res->lm[res->n_lm];
            l->design = r->design, l->seed = r->seed;
            snprintf(l->dir, sizeof l->dir, "%s", r->o.out);
            if (al_config_load(&l->cfg, path, NULL, err) || al_study_load_lm_measure(r->o.out, r->o.steps, &l->m) ||
                al_run_log_read(r->o.out, &l->log, err))
                return al_errf(err, "%s: measurements or log missing", r->o.out);
            l->train_tokens_per_s = l->log.tokens_per_s;
            l->train_seconds =
                (double)r->o.steps * r->o.batch * r->o.context / (l->log.tokens_per_s > 0 ? l->log.tokens_per_s : 1);
            if (res->n_lm++ == 0) res->lm_opts = r->o;
        }
    }
    return 0;
}

static void free_results(al_study_results *res) {
    for (int i = 0; i < res->n_lm; i++) al_run_log_free(&res->lm[i].log);
    for (int i = 0; i < res->n_vit; i++) al_run_log_free(&res->vit[i].log);
    free(res->lm);
    free(res->vit);
}

/* The short table printed at the end. */
static void print_summary(const al_study_results *res) {
    printf("\n%-6s %5s %12s %10s %9s %12s %12s %10s\n", "design", "seed", "val loss", "bits/byte", "KV % MHA",
           "train tok/s", "decode tok/s", "erank %");
    for (int i = 0; i < res->n_lm; i++) {
        const al_study_lm_run *l = &res->lm[i];
        printf("%-6s %5llu %12.4f %10.4f %9.2f %12.0f %12.0f %10.1f\n", al_study_design_title(l->design),
               (unsigned long long)l->seed, l->m.val_loss, l->m.val_bpb, l->m.kv_pct_of_mha,
               res->speed[l->design].train_tokens_per_s, res->speed[l->design].decode_tokens_per_s,
               l->m.erank_uncentered_pct);
    }
    printf("unigram baseline: %.4f nats/byte (%.4f bits/byte) on the validation split\n",
           res->unigram.val_cross_entropy, res->unigram.val_cross_entropy / M_LN2);
    for (int i = 0; i < res->n_vit; i++)
        printf("%-26s seed %llu: test accuracy %.2f%% over %d images\n", res->vit[i].title,
               (unsigned long long)res->vit[i].seed, 100 * res->vit[i].m.accuracy, res->vit[i].m.test_images);
}

/* ---- the command ---- */

/* Benchmarks, figures and reports. 0, -1 (error in err) or -3: a signal
 * arrived (stop_status() gives the exit status); nothing is left half written. */
static int finish(study *s, double t0, al_err *err) {
    al_study_results *res = calloc(1, sizeof *res);
    if (!res) return al_errf(err, "out of memory");
    int rc = collect(s, res, err);
    res->budget = s->b;
    snprintf(res->out, sizeof res->out, "%s", s->out);
    res->threads = al_threads();
    res->blas_kernels = al_blas_kernels();
    snprintf(res->corpus_path, sizeof res->corpus_path, "%s", s->corpus.path);
    res->corpus_bytes = s->corpus.n, res->train_bytes = s->corpus.n_train,
    res->val_bytes = s->corpus.n - s->corpus.n_train;
    al_unigram_of(&s->corpus, &res->unigram);
    res->n_seeds = s->n_seeds;
    memcpy(res->seeds, s->seeds, sizeof res->seeds);
    res->cls_min[0] = res->cls_min[1] = res->cls_max[0] = res->cls_max[1] = NAN;
    snprintf(res->images_path, sizeof res->images_path, "%s", s->vision ? s->images : "");
    if (!s->vision)
        snprintf(res->vision_note, sizeof res->vision_note, "%s",
                 s->images_src && !strcmp(s->images_src, "-")
                     ? "skipped (--no-vision)."
                     : "skipped: the Fashion-MNIST files were not found "
                       "(install dataset-fashion-mnist or pass --images DIR).");
    if (!rc) {
        /* speeds side by side, the first seed's model of each design */
        const al_study_budget *b = s->b;
        const char *dirs[AL_STUDY_DESIGNS];
        for (int k = 0; k < AL_STUDY_DESIGNS; k++) dirs[k] = res->lm[k].dir;
        phase_begin("benchmarking", final_nominal(b) - b->figures_s, b->figures_s);
        say("study: speed benchmark (%d round%s: training steps of %d x %d, decoding at context %d)\n",
            b->speed_rounds, b->speed_rounds == 1 ? "" : "s", res->lm_opts.batch, res->lm_opts.context,
            b->decode_context);
        rc = al_study_speed(dirs, AL_STUDY_DESIGNS, res->lm_opts.batch, res->lm_opts.context, b->speed_steps,
                            b->decode_context, b->decode_tokens, b->speed_rounds, res->speed, err);
        phase_end();
    }
    if (!rc && study_signal) rc = -3;
    if (!rc) {
        phase_begin("figures", s->b->figures_s, 0);
        say("study: figures\n");
        rc = fig_heads(s, res) ? al_errf(err, "heads.png failed (see above)") : 0;
        if (!rc) rc = fig_attnmaps(s, res, err);
        if (!rc && res->n_vit) rc = fig_poly(s, res, err);
        if (!rc) rc = fig_loss(s, res, err);
        if (!rc) rc = fig_kv(s, res, err);
        phase_end();
    }
    if (!rc && study_signal) rc = -3;
    if (!rc) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(res->created, sizeof res->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
        res->wall_s = al_now() - t0;
        rc = al_study_write_reports(res, err);
    }
    if (!rc) {
        print_summary(res);
        printf("\nwrote %s/report.md, report.html, report.json and %d figures with their data (%.0f s)\n", s->out,
               res->n_figures, al_now() - t0);
    }
    free_results(res);
    free(res);
    return rc;
}

/* Whether the Fashion-MNIST files are readable in dir (NULL: Debian's). */
static int have_fmnist(const char *dir) {
    al_image_set t;
    al_err err;
    if (al_fmnist_load(&t, dir, "t10k", 1, &err)) return 0;
    al_image_set_free(&t);
    return 1;
}

int cmd_study(int argc, char **argv) {
    const double t0 = al_now();
    const char *out = NULL, *budget = "quick", *data = NULL, *images = NULL;
    long seed = 1337, seeds = 0, max_runs = 0, threads = 0;
    int no_vision = 0, quiet = 0;
    al_arg args[] = {
        {"out", ARG_STRING, &out, "study directory: runs/, figures, report.md/.json/.html"},
        {"budget", ARG_STRING, &budget, "quick (~10 min), standard (~1 h, 3 seeds) or full (hours): docs/study.md"},
        {"data", ARG_STRING, &data, "training text for the language models (default: the King James Bible)"},
        {"images", ARG_STRING, &images, "directory of the Fashion-MNIST IDX files (default " AL_FMNIST_DIR ")"},
        {"no-vision", ARG_FLAG, &no_vision, "skip the two vision transformers"},
        {"seed", ARG_INT, &seed, "first seed (the others follow: seed+1, ...)"},
        {"seeds", ARG_INT, &seeds, "seeds per design (default: the budget's, 1 or 3)"},
        {"max-runs", ARG_INT, &max_runs, "train at most N runs in this invocation, then stop (rerun to continue)"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"quiet", ARG_FLAG, &quiet, "no progress output"},
    };
    const int n = (int)(sizeof args / sizeof args[0]);
    int rc =
        cli_parse(CMD, "--out DIR [--budget quick|standard|full] [--data FILE] [--images DIR]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!out || !*out) return cli_usage(CMD, "--out DIR is required");
    study s = {0};
    s.b = al_study_budget_find(budget);
    if (!s.b) return cli_usage(CMD, "unknown budget '%s' (quick, standard, full)", budget);
    if (seeds < 0 || seeds > 16) return cli_usage(CMD, "--seeds must be 1..16");
    if (max_runs < 0) return cli_usage(CMD, "--max-runs must not be negative");
    if (seed < 0) return cli_usage(CMD, "--seed must not be negative");
    if (threads < 0 || threads > 1024) return cli_usage(CMD, "--threads must be 1..1024");
    if (threads > 0) al_set_threads((int)threads);
    snprintf(s.out, sizeof s.out, "%s", out);
    size_t ol = strlen(s.out);
    while (ol > 1 && s.out[ol - 1] == '/') s.out[--ol] = 0;
    s.data = data;
    s.n_seeds = seeds ? (int)seeds : s.b->seeds;
    for (int i = 0; i < s.n_seeds; i++) s.seeds[i] = (uint64_t)seed + (uint64_t)i;
    prog.quiet = quiet;
    prog.tty = isatty(2);

    al_err err;
    char path[4300];
    if (mkdir(s.out, 0777) && errno != EEXIST) {
        snprintf(err.msg, sizeof err.msg, "%s: cannot create the study directory: %s", s.out, strerror(errno));
        return cli_fail(CMD, err.msg);
    }
    snprintf(path, sizeof path, "%s/runs", s.out);
    if (mkdir(path, 0777) && errno != EEXIST) {
        snprintf(err.msg, sizeof err.msg, "%s: %s", path, strerror(errno));
        return cli_fail(CMD, err.msg);
    }
    if (al_corpus_load(&s.corpus, data, 0.05, s.b->lm_context, &err)) return cli_fail(CMD, err.msg);

    /* vision: a subset of the images on disk when the budget trains on part of them */
    s.vision = !no_vision && have_fmnist(images);
    s.images_src = no_vision ? "-" : images;
    if (s.vision && (s.b->vit_train_images || s.b->vit_test_images)) {
        snprintf(s.images, sizeof s.images, "%s/data", s.out);
        mkdir(s.images, 0777);
        snprintf(s.images, sizeof s.images, "%s/data/fashion-mnist-%d-%d", s.out, s.b->vit_train_images,
                 s.b->vit_test_images);
        if (al_fmnist_write_subset(images, s.images, s.b->vit_train_images, s.b->vit_test_images, &err)) {
            al_corpus_free(&s.corpus);
            return cli_fail(CMD, err.msg);
        }
    } else if (s.vision) {
        snprintf(s.images, sizeof s.images, "%s", images ? images : AL_FMNIST_DIR);
    } else if (!no_vision) {
        say("study: Fashion-MNIST not found in %s: the vision pair is skipped\n", images ? images : AL_FMNIST_DIR);
    }

    rc = make_plan(&s);
    if (rc) {
        free(s.runs);
        al_corpus_free(&s.corpus);
        return rc;
    }
    int n_done = 0, n_part = 0;
    double nominal = final_nominal(s.b);
    for (int i = 0; i < s.n_runs; i++) {
        n_done += s.runs[i].state == AL_RUN_COMPLETE;
        n_part += s.runs[i].state == AL_RUN_PARTIAL;
        nominal += nominal_left(&s, i);
    }
    char eta[32];
    fmt_dur(eta, sizeof eta, nominal);
    say("study: budget %s: %d runs (%d language models x %d seed%s%s) into %s; %d complete, %d to resume; "
        "about %s on an idle 2-core machine\n",
        s.b->name, s.n_runs, AL_STUDY_DESIGNS, s.n_seeds, s.n_seeds == 1 ? "" : "s", s.vision ? " + 2 ViTs each" : "",
        s.out, n_done, n_part, eta);
    prog.n_runs = s.n_runs;
    if (!quiet && pthread_create(&prog.th, NULL, monitor_main, NULL) == 0) prog.started = 1;

    struct sigaction sa = {0}, old_int, old_term;
    sa.sa_handler = on_study_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    rc = run_all(&s, max_runs);
    if (!rc) {
        int f = finish(&s, t0, &err);
        if (f == -3) {
            say("study: interrupted before the report; rerun the same command to finish it\n");
            rc = stop_status();
        } else if (f) {
            rc = cli_fail(CMD, err.msg);
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (prog.started) {
        pthread_mutex_lock(&prog.mu);
        prog.stop = 1;
        pthread_mutex_unlock(&prog.mu);
        pthread_join(prog.th, NULL);
        if (prog.line_open) fputs("\r\033[K", stderr);
    }
    free(s.runs);
    al_corpus_free(&s.corpus);
    return rc == -2 ? 0 : rc;
}
