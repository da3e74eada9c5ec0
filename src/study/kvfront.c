/*
 * kvfront.c: the study's KV frontier (study.h: al_study_kv_frontier): the
 * first seed's five language models through AL_KVF_STUDY_METHODS on the
 * validation split, measured by analysis/kv_frontier.h.
 *
 * Resumability follows measure.json's: each run directory keeps its points
 * in kv_frontier.json under a key made of the run's steps, the size and
 * modification time of its model.safetensors (a retrained or resumed run
 * writes a new one) and the frontier's settings. A rerun reuses every
 * measured point of a matching file and measures the rest: methods missing
 * from it, and methods the library refused before (eviction may have
 * arrived since); the file is rewritten only when something new was
 * measured, so a finished study's run directories stay untouched.
 */
#include "study.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../io/io.h"

/* The cache key of run `dir` under these settings ("" when its model file
 * cannot be read: nothing cached matches). */
static void cache_key(const char *dir, int steps, const al_study_results *res, char *key, size_t cap) {
    struct stat st;
    char *model = al_sprintf("%s/model.safetensors", dir);
    const int have = model && !stat(model, &st);
    free(model);
    if (!have) {
        key[0] = 0;
        return;
    }
    al_strfmt(key, cap, "steps %d, model %lld bytes at %lld.%09ld, methods %s, context %d, tokens %d, group %d, residual %d",
              steps, (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, AL_KVF_STUDY_METHODS,
              res->kv_context, res->kv_tokens, res->kv_group, res->kv_residual);
}

/* The cached point of method `name` in c that was measured, or NULL. */
static const al_kvf_point *cached(const al_kvf *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (c->p[i].ok && !strcmp(c->p[i].method, name)) return &c->p[i];
    return NULL;
}

/* The index in plan->runs of the run trained into dir, or -1. */
static int run_index(const al_study_plan *plan, const char *dir) {
    for (int i = 0; i < plan->n_runs; i++)
        if (!strcmp(plan->runs[i].dir, dir)) return i;
    return -1;
}

/* One run's points (cached or measured now) appended to res->kv in method
 * order; its cache rewritten when anything was measured. */
static int run_points(const al_study_plan *plan, const al_study_lm_run *l, al_study_results *res,
                      const al_kvf_method *meth, int n_meth, al_err *err) {
    char key[1024];
    const int ri = run_index(plan, l->dir), steps = ri >= 0 ? plan->runs[ri].opts.steps : 0;
    cache_key(l->dir, steps, res, key, sizeof key);
    char *path = al_study_join(l->dir, "kv_frontier.json", err);
    if (!path) return -1;
    al_kvf c = {0}, mine = {0};
    al_err ignored;
    if (!key[0] || al_kvf_read_json(&c, path, key, &ignored)) al_kvf_free(&c); /* no usable cache */
    al_model m;
    int loaded = 0, rc = 0, fresh = 0;
    int *ids = NULL;
    const al_corpus *corpus = &plan->corpus;
    const size_t n_val = corpus->n - corpus->n_train, n_ids = n_val < (size_t)res->kv_tokens + 1 ? n_val : (size_t)res->kv_tokens + 1;
    al_kvf_opts o = al_kvf_opts_default();
    o.context = res->kv_context, o.group = res->kv_group, o.residual = res->kv_residual;
    o.max_predictions = (size_t)res->kv_tokens;
    for (int k = 0; k < n_meth && !rc; k++) {
        const al_kvf_point *p = cached(&c, meth[k].name);
        if (p) {
            rc = al_kvf_add(&mine, p, err);
            continue;
        }
        if (!loaded) { /* the model and the validation bytes as ids, once, when something is to be measured */
            if (al_model_load(&m, l->dir, NULL, err)) {
                rc = -1;
                break;
            }
            loaded = 1;
            if (!(ids = malloc(sizeof(int) * (n_ids ? n_ids : 1)))) rc = al_errf(err, "out of memory");
            for (size_t i = 0; !rc && i < n_ids; i++) ids[i] = corpus->bytes[corpus->n_train + i];
            if (!rc) rc = al_kvf_check(&m, meth, n_meth, &o, err);
            if (rc) break;
        }
        const int before = mine.n;
        rc = al_kvf_sweep(&mine, &m, l->dir, al_study_design_title(l->design), ids, n_ids, &meth[k], 1, &o, err);
        if (!rc) {
            const al_kvf_point *was = NULL; /* a refusal the cache already holds is nothing new */
            for (int i = 0; i < c.n && !was; i++)
                if (!strcmp(c.p[i].method, meth[k].name) && !c.p[i].ok) was = &c.p[i];
            fresh |= mine.p[before].ok || !was || strcmp(was->why, mine.p[before].why);
        }
    }
    if (!rc && (fresh || c.n != n_meth) && key[0]) {
        const al_kvf_meta meta = {AL_KVF_STUDY_METHODS, key, res->kv_context, res->kv_group, res->kv_residual,
                                  (size_t)res->kv_tokens};
        rc = al_kvf_write_json(&mine, &meta, path, err);
    }
    for (int i = 0; i < mine.n && !rc; i++) rc = al_kvf_add(&res->kv, &mine.p[i], err);
    if (rc) al_err_prefix(err, "KV frontier of %s", l->dir);
    if (loaded) al_model_free(&m);
    free(ids);
    free(path);
    al_kvf_free(&c);
    al_kvf_free(&mine);
    return rc;
}

/* Tells h's caller (if any) that run k of the first seed's designs is next. */
static void tell_run(const al_study_plan *plan, const al_study_results *res, const al_study_hooks *h, int k) {
    if (!h || !h->on_progress) return;
    const al_study_progress p = {.event = AL_STUDY_KV_FRONTIER,
                                 .plan = plan,
                                 .run = run_index(plan, res->lm[k].dir),
                                 .kv_done = k,
                                 .kv_total = AL_STUDY_DESIGNS};
    h->on_progress(h->ctx, &p);
}

int al_study_kv_frontier(const al_study_plan *plan, al_study_results *res, const al_study_hooks *h, al_err *err) {
    const al_study_budget *b = plan->budget;
    al_kvf_method meth[AL_KVF_MAX_METHODS];
    int n_meth;
    if (al_kvf_parse_methods(AL_KVF_STUDY_METHODS, meth, AL_KVF_MAX_METHODS, &n_meth, err)) return -1;
    res->kv_context = res->lm_opts.context, res->kv_tokens = plan->kv_tokens;
    res->kv_group = b->kv_group, res->kv_residual = b->kv_residual;
    if (plan->kv_tokens <= 0 || res->n_lm < AL_STUDY_DESIGNS) return 0; /* asked for none, or the designs are missing */
    if (plan->corpus.n - plan->corpus.n_train < 2) return al_errf(err, "KV frontier: the validation split is empty");
    for (int k = 0; k < AL_STUDY_DESIGNS; k++) { /* seed-major: the first seed's five */
        tell_run(plan, res, h, k);
        if (run_points(plan, &res->lm[k], res, meth, n_meth, err)) return -1;
    }
    if (al_kvf_select(&res->kv, err)) return -1;
    const al_kvf_meta meta = {AL_KVF_STUDY_METHODS, NULL, res->kv_context, res->kv_group, res->kv_residual,
                              (size_t)res->kv_tokens};
    char *png = al_study_join(plan->out, "kv_frontier.png", err);
    int rc = !png || al_kvf_write_data(&res->kv, &meta, png, err) ||
             al_kvf_draw(&res->kv, &meta, "KV cache per token against loss: designs x compressions", png, err);
    free(png);
    if (rc) return -1;
    al_study_figure *f = &res->kv_figure;
    al_strfmt(f->file, sizeof f->file, "kv_frontier.png");
    al_strfmt(f->data[0], sizeof f->data[0], "kv_frontier.json");
    al_strfmt(f->data[1], sizeof f->data[1], "kv_frontier.csv");
    f->data[2][0] = 0;
    al_strfmt(f->caption, sizeof f->caption,
              "KV cache per token actually held (bytes, log scale) against validation loss, decoded token by token "
              "through each compressed cache: one curve per design through its compressed caches, the uncompressed "
              "cache a labelled point.");
    return 0;
}
