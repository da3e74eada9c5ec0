/*
 * cmd_kvlab.c: `attnlab kvlab`: the KV-cache quality-per-byte frontier of
 * one or more models (docs/kvlab.md). Every model scores the same text
 * (--data, in its own tokenizer's ids) through the real decode path once per
 * compression method (analysis/kv_frontier.h); the figure (bytes per token
 * on a log axis against loss, one curve per model, the uncompressed caches
 * as labelled points) goes to --out, STEM.json and STEM.csv beside it.
 *
 * Everything the flags can get wrong (a method list, a group that does not
 * divide a model's value unit, a context beyond a model's) is found before
 * any point is measured: usage errors, exit 2. Progress: one stderr line per
 * point with an ETA.
 */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/kv_frontier.h"
#include "cli.h"
#include "io/io.h"
#include "model/model.h"

/* One model of the sweep: loaded, its label, its tokens and window. */
typedef struct kv_model {
    al_model m;
    int loaded;
    char label[64];
    int *ids, n_ids, T;
} kv_model;

/* Progress across every model: points done of total, since t0. */
typedef struct kv_progress {
    int done, total;
    double t0;
} kv_progress;

/* One stderr line per measured point (al_kvf_opts.on_point). */
static void on_point(void *ctx, const al_kvf_point *p) {
    kv_progress *g = ctx;
    g->done++;
    const double el = al_now() - g->t0;
    char eta[32];
    cli_duration(eta, sizeof eta, el / g->done * (g->total - g->done));
    if (p->ok)
        fprintf(stderr, "kvlab [%d/%d] %s %s: %.1f bytes/token (%.2f %% of MHA fp32), loss %.4f (%.1f s) | ETA %s\n",
                g->done, g->total, p->label, p->method, p->bytes_per_token, p->pct_of_mha_fp32, p->loss, p->seconds,
                eta);
    else
        fprintf(stderr, "kvlab [%d/%d] %s %s: refused (%s) | ETA %s\n", g->done, g->total, p->label, p->method, p->why,
                eta);
    fflush(stderr);
}

/* The window a model is scored in: --context, else the context it was
 * trained at (config.json's attnlab.train), else min(1024, its context);
 * -1 when out of memory reading the block. */
static int model_context(const al_model *m, const char *extra, long context) {
    if (context) return (int)context;
    const int mc = al_config_max_context(&m->cfg);
    int T = mc < 1024 ? mc : 1024, oom = 0;
    cJSON *al = extra ? al_json_parse(extra, strlen(extra), &oom) : NULL;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(al, "train"), "context");
    if (cJSON_IsNumber(c) && c->valueint > 0) T = c->valueint;
    cJSON_Delete(al);
    return oom ? -1 : T;
}

/* Loads model i, its label (its design's title, made unique with the
 * directory's name) and the text's ids in its tokenizer. CLI_OK, 1 or
 * CLI_USAGE (printed). */
static int load_model(const char *cmd, kv_model *km, int i, const char *dir, const kv_model *all, const char *text,
                      size_t len, long context) {
    al_err err;
    char *extra = NULL;
    if (al_model_load(&km->m, dir, &extra, &err)) return cli_fail(cmd, err.msg);
    km->loaded = 1;
    km->T = model_context(&km->m, extra, context);
    free(extra);
    if (km->T < 0) return cli_failf(cmd, "%s: out of memory", dir);
    if (km->m.cfg.task == AL_TASK_VISION) return cli_failf(cmd, "%s: a vision model has no KV cache to decode", dir);
    if (km->T > km->m.cfg.max_position || km->T > al_config_max_context(&km->m.cfg))
        return cli_usage(cmd, "--context %d exceeds %s's context %d", km->T, dir, al_config_max_context(&km->m.cfg));
    al_strfmt(km->label, sizeof km->label, "%s", km->m.attn->title);
    for (int k = 0; k < i; k++)
        if (!strcmp(all[k].label, km->label)) {
            const char *base = strrchr(dir, '/');
            al_strfmt(km->label, sizeof km->label, "%s (%s)", km->m.attn->title, base && base[1] ? base + 1 : dir);
            break;
        }
    for (int k = 0; k < i; k++)
        if (!strcmp(all[k].label, km->label)) al_strfmt(km->label, sizeof km->label, "%s #%d", km->m.attn->title, i + 1);
    al_tokenizer *tk = cli_tokenizer(dir, km->m.cfg.vocab_size, &err);
    if (!tk) return cli_fail(cmd, err.msg);
    int rc = al_tok_encode(tk, text, len, 1, &km->ids, &km->n_ids, &err);
    al_tok_free(tk);
    if (rc) return cli_failf(cmd, "%s: %s", dir, err.msg);
    if (km->n_ids < 2) return cli_failf(cmd, "%s: the text makes %d tokens (needs at least 2)", dir, km->n_ids);
    return CLI_OK;
}

/* The table on stdout: every point, then the frontier's picks. */
static void print_table(const al_kvf *f) {
    printf("%-14s %-16s %14s %10s %10s %8s\n", "model", "method", "bytes/token", "% MHA f32", "loss", "frontier");
    for (int i = 0; i < f->n; i++) {
        const al_kvf_point *p = &f->p[i];
        if (p->ok)
            printf("%-14s %-16s %14.1f %10.3f %10.4f %8s\n", p->label, p->method, p->bytes_per_token, p->pct_of_mha_fp32,
                   p->loss, p->hull ? "hull" : p->pareto ? "pareto" : "");
        else
            printf("%-14s %-16s %14s %10s %10s %8s  (%s)\n", p->label, p->method, "-", "-", "-", "", p->why);
    }
    for (int t = 0; t < AL_KVF_N_THRESHOLDS; t++) {
        const int b = al_kvf_best_under(f, al_kvf_thresholds[t]);
        if (b >= 0)
            printf("lowest loss at <= %g %% of MHA fp32: %s %s (loss %.4f, %.1f bytes/token)\n", al_kvf_thresholds[t],
                   f->p[b].label, f->p[b].method, f->p[b].loss, f->p[b].bytes_per_token);
    }
    const int bt = al_kvf_best_trade(f);
    if (bt >= 0)
        printf("best loss x bytes trade: %s %s (loss %.4f, %.1f bytes/token)\n", f->p[bt].label, f->p[bt].method,
               f->p[bt].loss, f->p[bt].bytes_per_token);
}

int cmd_kvlab(int argc, char **argv) {
    const char *cmd = "kvlab";
    al_strlist models = {0};
    const char *data = NULL, *out = NULL, *methods = AL_KVF_DEFAULT_METHODS, *latent = "channel";
    long context = 0, max_tokens = 2048, group = 32, residual = 32, sinks = 4, threads = 0;
    int json = 0;
    al_arg args[] = {
        {"model", ARG_LIST, &models, "a model directory (repeat for several)"},
        {"data", ARG_STRING, &data, "text file every model scores"},
        {"out", ARG_STRING, &out, "the figure (.png); STEM.json and STEM.csv are written beside it"},
        {"methods", ARG_STRING, &methods,
         "comma-separated: none, int8|int4|int2, EVICT:BUDGET (window|h2o|snapkv; BUDGET in (0, 1] or an integer "
         ">= 2), joined by + (default " AL_KVF_DEFAULT_METHODS ")"},
        {"context", ARG_INT, &context, "window length T (default: each model's training context)"},
        {"max-tokens", ARG_INT, &max_tokens, "predictions per point (default 2048; 0: the whole text)"},
        {"kv-group", ARG_INT, &group, "quantised caches: tokens per key block, channels per value group (default 32)"},
        {"kv-residual", ARG_INT, &residual, "quantised caches: newest tokens kept unquantised (default 32)"},
        {"kv-latent", ARG_STRING, &latent, "quantised MLA caches: c~ per channel (default) or per token"},
        {"kv-sinks", ARG_INT, &sinks, "evicting caches: first positions always kept (default 4)"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"json", ARG_FLAG, &json, "print the frontier as one JSON object (as STEM.json)"},
    };
    const int n_args = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd,
                       "--model A [--model B ...] --data F --out frontier.png [--methods LIST] [--context T] "
                       "[--max-tokens N] [--kv-group N] [--kv-residual R] [--json]",
                       args, n_args, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!models.n) return cli_usage(cmd, "--model DIR is required (repeat it for several models)");
    if (!data) return cli_usage(cmd, "--data FILE is required");
    if (!out) return cli_usage(cmd, "--out FILE.png is required");
    if (context < 0 || max_tokens < 0 || sinks < 0)
        return cli_usage(cmd, "--context, --max-tokens and --kv-sinks must not be negative");
    if (group < 1 || group > 256) return cli_usage(cmd, "--kv-group must be in 1..256, got %ld", group);
    if (residual < 0 || residual > 1000000000L) return cli_usage(cmd, "--kv-residual must not be negative, got %ld", residual);
    if (strcmp(latent, "channel") && strcmp(latent, "token"))
        return cli_usage(cmd, "--kv-latent must be channel or token, got '%s'", latent);
    al_err err;
    al_kvf_method meth[AL_KVF_MAX_METHODS];
    int n_meth;
    if (al_kvf_parse_methods(methods, meth, AL_KVF_MAX_METHODS, &n_meth, &err)) return cli_usage(cmd, "--methods: %s", err.msg);
    char *stem = NULL, *figure = NULL;
    if (stem_of(out, &stem, &figure)) return cli_fail(cmd, "out of memory");
    free(stem);
    char *slash = strrchr(figure, '/');
    char *outdir = slash ? strndup(figure, (size_t)(slash - figure)) : strdup(".");
    if (!outdir || access(*outdir ? outdir : "/", W_OK)) { /* before hours of sweeping, not after */
        rc = outdir ? cli_failf(cmd, "--out: %s: %s", outdir, strerror(errno)) : cli_fail(cmd, "out of memory");
        free(outdir);
        free(figure);
        return rc;
    }
    free(outdir);
    if (threads > 0) al_set_threads((int)threads);

    al_kvf_opts o = al_kvf_opts_default();
    o.max_predictions = (size_t)max_tokens, o.group = (int)group, o.residual = (int)residual, o.sinks = (int)sinks;
    o.latent = strcmp(latent, "token") ? AL_KVQ_LATENT_CHANNEL : AL_KVQ_LATENT_TOKEN;
    kv_progress g = {0, models.n * n_meth, 0};
    o.on_point = on_point, o.ctx = &g;

    char *text = NULL;
    size_t len = 0;
    kv_model *km = calloc((size_t)models.n, sizeof *km);
    if (!km) rc = cli_fail(cmd, "out of memory");
    else if (al_read_file(data, &text, &len, &err)) rc = cli_fail(cmd, err.msg);
    else if (len < 2) rc = cli_failf(cmd, "%s: data file is empty (needs at least 2 bytes)", data);
    /* every model loaded and checked before any point is measured */
    for (int i = 0; !rc && i < models.n; i++) {
        rc = load_model(cmd, &km[i], i, models.items[i], km, text, len, context);
        if (!rc && al_kvf_check(&km[i].m, meth, n_meth, &o, &err)) rc = cli_usage(cmd, "%s: %s", models.items[i], err.msg);
    }
    al_kvf f = {0};
    g.t0 = al_now();
    for (int i = 0; !rc && i < models.n; i++) {
        o.context = km[i].T;
        if (al_kvf_sweep(&f, &km[i].m, models.items[i], km[i].label, km[i].ids, (size_t)km[i].n_ids, meth, n_meth, &o,
                         &err))
            rc = cli_fail(cmd, err.msg);
    }
    /* the context and predictions of the first model stand for the sweep's (they differ only when the models' do) */
    const al_kvf_meta meta = {methods, NULL, km && models.n ? km[0].T : 0, (int)group, (int)residual, (size_t)max_tokens};
    if (!rc) {
        if (al_kvf_select(&f, &err) || al_kvf_write_data(&f, &meta, figure, &err) ||
            al_kvf_draw(&f, &meta, NULL, figure, &err))
            rc = cli_fail(cmd, err.msg);
    }
    if (!rc && json) {
        char *j = al_kvf_json_text(&f, &meta);
        if (!j) rc = cli_fail(cmd, "out of memory");
        else printf("%s\n", j);
        free(j);
    } else if (!rc) {
        print_table(&f);
        printf("wrote %s (and its .json, .csv)\n", figure);
    }
    al_kvf_free(&f);
    for (int i = 0; km && i < models.n; i++) {
        if (km[i].loaded) al_model_free(&km[i].m);
        free(km[i].ids);
    }
    free(km);
    free(text);
    free(figure);
    return rc;
}
