/*
 * cmd_study.c: `attnlab study`: the end-to-end comparison (docs/study.md).
 *
 *   attnlab study --out DIR [--budget quick|standard|full] [--data FILE]
 *                 [--images DIR] [--seed N] [--seeds N] [--max-runs N] [--conversions]
 *
 * Argument handling around the library's study (src/study/): the plan, with
 * every run's typed options, is made there; this file runs it and prints its
 * progress (one line: which
 * run, its step, and the ETA of the whole study), the heads figure through
 * `attnlab heads`' own code, and the summary table.
 */
#include <assert.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attnlab.h"
#include "cli.h"
#include "study/study.h"
#include "train/dist.h"

static const char *const CMD = "study";

/* ---- progress ---- */

/* What the progress output knows between two reports. */
typedef struct view {
    int quiet, tty, line_open; /* line_open: a progress line is drawn in place */
    int printed_decile;        /* of the current run */
    double printed_at;
} view;

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
static int pending_signal(void *ctx) { return (void)ctx, study_signal; }

/* Prints a whole line, first ending any open progress line (not with --quiet). */
static void say(view *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(view *v, const char *fmt, ...) {
    if (v->quiet) return;
    if (v->line_open) fputs("\r\033[K", stderr);
    v->line_open = 0;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

/* The progress line of a training step: in place on a terminal (at most
 * every 0.4 s, and at evaluations), else every tenth of the run and at each
 * evaluation. */
static void step_line(view *v, const al_study_progress *p, const char *eta) {
    const al_train_progress *t = p->train;
    const int steps = t->opts->steps, todo = steps - t->start_step;
    const double frac = todo > 0 ? (double)(t->step - t->start_step) / todo : 1;
    const int decile = (int)(10 * frac);
    char val[64] = "", line[512]; /* a run name and numbers: a cut (only of absurd numbers) ends in "..." */
    if (t->evaluated && t->vision) al_strfmt(val, sizeof val, " | test acc %.1f%%", 100 * t->val_accuracy);
    else if (t->evaluated) al_strfmt(val, sizeof val, " | val %.4f", t->val_loss);
    al_strfmt(line, sizeof line, "[run %d/%d] %s | step %d/%d | loss %.4f%s | %.0f %s | study ETA %s", p->run + 1,
              p->plan->n_runs, p->plan->runs[p->run].name, t->step, steps, t->loss, val,
              t->vision ? t->items_per_s : t->tokens_per_s, t->vision ? "img/s" : "tok/s", eta);
    if (v->tty && (t->evaluated || t->step == steps || al_now() - v->printed_at >= 0.4)) {
        fprintf(stderr, "\r\033[K%s", line);
        v->line_open = 1;
        v->printed_at = al_now();
    } else if (!v->tty && (t->evaluated || decile > v->printed_decile)) {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
    if (decile > v->printed_decile) v->printed_decile = decile;
}

/* The study's progress (al_study_hooks.on_progress). */
static void show(void *ctx, const al_study_progress *p) {
    view *v = ctx;
    const al_study_plan *pl = p->plan;
    const al_plan_run *r = p->run >= 0 ? &pl->runs[p->run] : NULL;
    assert(r || (p->event != AL_STUDY_RUN_BEGIN && p->event != AL_STUDY_CONVERT && p->event != AL_STUDY_RUN_MEASURE &&
                 p->event != AL_STUDY_RUN_STEP)); /* a run's own events name it (study.c) */
    const int no = p->run + 1, nr = pl->n_runs;
    char eta[32];
    cli_duration(eta, sizeof eta, p->eta_s);
    if (p->event == AL_STUDY_RUN_STEP) {
        if (!v->quiet) step_line(v, p, eta);
    } else if (p->event == AL_STUDY_PLANNED) {
        int done = 0, part = 0;
        for (int i = 0; i < nr; i++) {
            done += pl->runs[i].state == AL_RUN_COMPLETE;
            part += pl->runs[i].state == AL_RUN_PARTIAL;
        }
        say(v, "study: budget %s: %d runs (%d language models x %d seed%s%s%s) into %s; %d complete, %d to resume; "
               "about %s on 2 idle cores of this CPU\n",
            pl->budget->name, nr, AL_STUDY_DESIGNS, pl->n_seeds, pl->n_seeds == 1 ? "" : "s",
            pl->vision ? " + 2 ViTs each" : "", pl->conversions ? " + 8 conversion runs each" : "", pl->out, done,
            part, eta);
    } else if (p->event == AL_STUDY_RUN_BEGIN) {
        v->printed_decile = 0, v->printed_at = 0;
        if (r->state == AL_RUN_COMPLETE) {
            say(v, "[run %d/%d] %s: complete, skipped\n", no, nr, r->name);
        } else if (r->state == AL_RUN_PARTIAL) {
            say(v, "[run %d/%d] %s: resuming at step %d of %d (study ETA %s)\n", no, nr, r->name, r->step,
                r->opts.steps, eta);
        } else {
            if (r->state == AL_RUN_STALE) say(v, "[run %d/%d] %s: %s: training it again\n", no, nr, r->name, r->why);
            say(v, "[run %d/%d] %s: training %d steps (study ETA %s)\n", no, nr, r->name, r->opts.steps, eta);
        }
    } else if (p->event == AL_STUDY_CONVERT) {
        say(v, "[run %d/%d] %s: converting %s to %s\n", no, nr, r->name, pl->runs[r->conv_source].name,
            al_study_design_title(r->design));
    } else if (p->event == AL_STUDY_RUN_MEASURE) {
        say(v, "[run %d/%d] %s: trained; measuring\n", no, nr, r->name);
    } else if (p->event == AL_STUDY_SPEED) {
        const al_study_budget *b = pl->budget;
        const al_train_opts *o = &pl->runs[0].opts; /* the first language model */
        say(v, "study: speed benchmark (%d round%s: training steps of %d x %d, decoding at context %d)\n",
            b->speed_rounds, b->speed_rounds == 1 ? "" : "s", o->batch, o->context, b->decode_context);
    } else if (p->event == AL_STUDY_FIGURES) {
        say(v, "study: figures\n");
    } else if (p->event == AL_STUDY_KV_FRONTIER) {
        say(v, "study: KV frontier %d/%d: %s through the study's compressed caches\n", p->kv_done + 1, p->kv_total,
            r ? r->name : "?");
    } else if (p->halt == AL_STUDY_HALT_MAX_RUNS) {
        say(v, "study: stopped after %d run%s (--max-runs); rerun without it to continue\n", p->trained,
            p->trained == 1 ? "" : "s");
    } else if (p->halt == AL_STUDY_HALT_BEFORE_RUN) {
        say(v, "study: interrupted before %s; rerun the same command to continue\n", r->name);
    } else if (p->halt == AL_STUDY_HALT_IN_RUN) {
        say(v, "study: interrupted in %s (its checkpoint is saved); rerun the same command to continue\n", r->name);
    } else {
        say(v, "study: interrupted before the report; rerun the same command to finish it\n");
    }
}

/* heads.png through `attnlab heads`' own code (cmd_heads.c), which prints its
 * table (al_study_hooks.draw_heads). */
static int draw_heads(void *ctx, const char *const *dirs, int n, const char *path, al_err *err) {
    (void)ctx;
    fflush(stdout);
    return heads_write(CMD, dirs, NULL, n, "mean", path, err) ? -1 : 0;
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
    if (res->n_conv)
        printf("\nconverted from MHA (%d steps), uptrained %d steps, vs from scratch for %d steps (val loss):\n"
               "%-6s %5s %9s %12s %12s %12s\n",
               res->conv_source_steps, res->conv_uptrain_steps, res->conv_long_steps, "design", "seed", "KV % MHA",
               "converted", "uptrained", "scratch");
    for (int i = 0; i < res->n_conv; i++) {
        const al_study_conversion *c = &res->conv[i];
        printf("%-6s %5llu %9.2f %12.4f %12.4f %12.4f\n", al_study_design_title(c->design),
               (unsigned long long)c->seed, c->kv_pct_of_mha, c->loss_converted, c->loss_uptrained,
               c->loss_scratch_long);
    }
    printf("unigram baseline: %.4f nats/byte (%.4f bits/byte) on the validation split\n",
           res->unigram.val_cross_entropy, res->unigram.val_cross_entropy / M_LN2);
    for (int i = 0; i < res->n_vit; i++)
        printf("%-26s seed %llu: test accuracy %.2f%% over %d images\n", res->vit[i].title,
               (unsigned long long)res->vit[i].seed, 100 * res->vit[i].m.accuracy, res->vit[i].m.test_images);
}

/* ---- the command ---- */

int cmd_study(int argc, char **argv) {
    const double t0 = al_now();
    const char *out = NULL, *budget = "quick", *data = NULL, *images = NULL, *precision = NULL;
    al_precision prec;
    long seed = 1337, seeds = 0, max_runs = 0, threads = 0, kv_tokens = 0;
    int no_vision = 0, quiet = 0, conversions = 0;
    al_arg args[] = {
        {"out", ARG_STRING, &out, "study directory: runs/, figures, report.md/.json/.html"},
        {"budget", ARG_STRING, &budget, "quick (~6 min with AMX), standard (~30 min with AMX, 3 seeds) or full (hours): docs/study.md"},
        {"data", ARG_STRING, &data, "training text for the language models (default: the King James Bible)"},
        {"images", ARG_STRING, &images, "directory of the Fashion-MNIST IDX files (default " AL_FMNIST_DIR ")"},
        {"no-vision", ARG_FLAG, &no_vision, "skip the two vision transformers"},
        {"seed", ARG_INT, &seed, "first seed (the others follow: seed+1, ...)"},
        {"seeds", ARG_INT, &seeds, "seeds per design (default: the budget's, 1 or 3)"},
        {"max-runs", ARG_INT, &max_runs, "train at most N runs in this invocation, then stop (rerun to continue)"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_AUTO},
        {"quiet", ARG_FLAG, &quiet, "no progress output"},
        {"kv-tokens", ARG_INT, &kv_tokens,
         "KV frontier: predictions per design and compression (default: the budget's; docs/kvlab.md)"},
        {"conversions", ARG_FLAG, &conversions,
         "also convert each MHA run to GQA, MQA, MLA, LRKV, uptrain 10 % of its steps, and train each from scratch "
         "for 110 %"},
    };
    const int n = (int)(sizeof args / sizeof args[0]);
    int rc =
        cli_parse(CMD, "--out DIR [--budget quick|standard|full] [--data FILE] [--images DIR]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!out || !*out) return cli_usage(CMD, "--out DIR is required");
    const al_study_budget *b = al_study_budget_find(budget);
    if (!b) return cli_usage(CMD, "unknown budget '%s' (quick, standard, full)", budget);
    if (seeds < 0 || seeds > AL_STUDY_MAX_SEEDS) return cli_usage(CMD, "--seeds must be 1..%d", AL_STUDY_MAX_SEEDS);
    if (max_runs < 0 || max_runs > 1000000) return cli_usage(CMD, "--max-runs must not be negative");
    if (seed < 0) return cli_usage(CMD, "--seed must not be negative");
    if (threads < 0 || threads > 1024) return cli_usage(CMD, "--threads must be 1..1024");
    if (kv_tokens < 0 || kv_tokens > 100000000) return cli_usage(CMD, "--kv-tokens must not be negative");
    if ((rc = cli_precision(CMD, precision, "auto", &prec))) return rc;
    if (threads > 0) al_set_threads((int)threads);
    view v = {.quiet = quiet, .tty = isatty(2)};
    const al_study_settings set = {.budget = b, .out = out, .data = data, .images = images, .no_vision = no_vision,
                                   .first_seed = (uint64_t)seed, .n_seeds = (int)seeds, .max_runs = (int)max_runs,
                                   .precision = prec, .kv_tokens = (int)kv_tokens, .conversions = conversions};
    al_study_plan plan;
    al_err err;
    if (cli_dist_begin(CMD)) return 1; /* under mpirun every run trains on all ranks (docs/distributed.md) */
    if (al_dist_rank() != 0) v.quiet = 1; /* rank 0 speaks for the job */
    if (al_study_plan_init(&plan, &set, &err)) return cli_fail(CMD, err.msg);
    if (!quiet || prec == AL_PREC_BF16) cli_precision_line(prec); /* once planned: errors before stay one line */
    if (!plan.vision && !no_vision)
        say(&v, "study: Fashion-MNIST not found in %s: the vision pair is skipped\n", images ? images : AL_FMNIST_DIR);

    struct sigaction sa = {0}, old_int, old_term;
    sa.sa_handler = on_study_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    const al_study_hooks hooks = {.ctx = &v, .on_progress = al_dist_rank() ? NULL : show, .draw_heads = draw_heads,
                                  .stop_requested = pending_signal};
    al_study_results *res = NULL;
    const int st = al_study_run_plan(&plan, &hooks, &res, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (v.line_open) fputs("\r\033[K", stderr);
    if (st == AL_STUDY_DONE && res) { /* res: NULL on the other ranks of an MPI job */
        print_summary(res);
        printf("\nwrote %s/report.md, report.html, report.json and %d figures with their data (%.0f s)\n", plan.out,
               res->n_figures, al_now() - t0);
    }
    al_study_results_free(res);
    al_study_plan_free(&plan);
    if (st == AL_STUDY_ERROR) return cli_dist_fail(CMD, err.msg);
    /* the other ranks wait for rank 0's report here, mostly asleep (al_dist_max polls gently), not in MPI_Finalize */
    int ignored;
    if (al_dist_max(0, &ignored, &err)) return cli_dist_fail(CMD, err.msg);
    al_dist_finalize();
    return st == AL_STUDY_INTERRUPTED ? 130 : st == AL_STUDY_TERMINATED ? 143 : 0;
}
