/*
 * kv_frontier.c: the KV-cache frontier (kv_frontier.h): parsing method
 * lists, the sweep through al_eval_decode, the frontier flags, the JSON/CSV
 * writers and reader, and the figure.
 */
#include "kv_frontier.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../attn/attn.h"
#include "../infer/eval_kv.h"
#include "../io/io.h"
#include "../plot/lineplot.h"

const double al_kvf_thresholds[AL_KVF_N_THRESHOLDS] = {100, 50, 25, 12.5, 6.25, 3.125};

/* ---- method lists ---- */

/* Reads an eviction budget: a fraction in (0, 1] or an integer count >= 2. */
static int parse_budget(const char *s, double *out) {
    char *end;
    const double b = strtod(s, &end);
    if (end == s || *end || !isfinite(b)) return -1;
    if ((b > 0 && b <= 1) || (b >= 2 && b == floor(b) && b <= 1e9)) {
        *out = b;
        return 0;
    }
    return -1;
}

/* One part of an item ("int2", "h2o:0.5") into kv; -1 (err) when unknown,
 * badly spelled or a second of its kind. */
static int parse_part(const char *part, const char *item, al_kv_opts *kv, al_err *err) {
    const char *colon = strchr(part, ':');
    if (!colon) {
        const int q = al_kvq_from_name(part);
        if (q <= AL_KVQ_NONE)
            return al_errf(err, "method '%s': '%s' is not int8, int4, int2 or EVICTION:BUDGET", item, part);
        if (kv->q.kind != AL_KVQ_NONE) return al_errf(err, "method '%s': more than one quantisation", item);
        kv->q.kind = (al_kvq_kind)q;
        return 0;
    }
    char name[AL_KVF_NAME];
    al_strfmt(name, sizeof name, "%.*s", (int)(colon - part), part);
    const int e = al_kve_from_name(name);
    if (e <= AL_KVE_NONE) return al_errf(err, "method '%s': '%s' is not window, h2o or snapkv", item, name);
    if (kv->e.method != AL_KVE_NONE) return al_errf(err, "method '%s': more than one eviction", item);
    if (parse_budget(colon + 1, &kv->e.budget))
        return al_errf(err, "method '%s': budget '%s' is not a fraction in (0, 1] or an integer >= 2", item, colon + 1);
    kv->e.method = (al_kve_method)e;
    return 0;
}

int al_kvf_parse_methods(const char *list, al_kvf_method *out, int cap, int *n, al_err *err) {
    *n = 0;
    if (!list || !*list) return al_errf(err, "empty method list");
    const char *s = list;
    for (;;) {
        const char *comma = strchr(s, ',');
        const size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (len == 0) return al_errf(err, "method list '%s' has an empty item", list);
        if (len >= AL_KVF_NAME) return al_errf(err, "method '%.*s...' is too long", 20, s);
        if (*n >= cap) return al_errf(err, "more than %d methods", cap);
        al_kvf_method *m = &out[*n];
        memset(m, 0, sizeof *m);
        memcpy(m->name, s, len);
        if (strcmp(m->name, "none")) {
            char part[AL_KVF_NAME];
            for (const char *p = m->name;;) {
                const char *plus = strchr(p, '+');
                const size_t pl = plus ? (size_t)(plus - p) : strlen(p);
                al_strfmt(part, sizeof part, "%.*s", (int)pl, p);
                if (!pl) return al_errf(err, "method '%s' has an empty part", m->name);
                if (parse_part(part, m->name, &m->kv, err)) return -1;
                if (!plus) break;
                p = plus + 1;
            }
        }
        for (int i = 0; i < *n; i++)
            if (!strcmp(out[i].name, m->name)) return al_errf(err, "method '%s' is listed twice", m->name);
        ++*n;
        if (!comma) return 0;
        s = comma + 1;
    }
}

al_kvf_opts al_kvf_opts_default(void) {
    return (al_kvf_opts){.group = 32, .residual = 32, .latent = AL_KVQ_LATENT_CHANNEL, .sinks = 4};
}

/* ---- points ---- */

void al_kvf_free(al_kvf *f) {
    for (int i = 0; i < f->n; i++) free(f->p[i].model);
    free(f->p);
    memset(f, 0, sizeof *f);
}

int al_kvf_add(al_kvf *f, const al_kvf_point *p, al_err *err) {
    if (f->n == f->cap) {
        const int cap = f->cap ? 2 * f->cap : 16;
        al_kvf_point *np = realloc(f->p, sizeof *np * (size_t)cap);
        if (!np) return al_errf(err, "out of memory");
        f->p = np, f->cap = cap;
    }
    char *model = strdup(p->model ? p->model : "");
    if (!model) return al_errf(err, "out of memory");
    f->p[f->n] = *p;
    f->p[f->n++].model = model;
    return 0;
}

double al_kvf_mha_fp32_bytes(const al_config *c) {
    int dk, dv;
    al_attn_head_widths(c, &dk, &dv);
    return 2.0 * c->num_heads * dv * sizeof(float) * c->num_layers;
}

/* The quantisation options of method k under o. */
static al_kv_opts method_opts(const al_kvf_method *k, const al_kvf_opts *o) {
    al_kv_opts kv = k->kv;
    kv.q.group = o->group, kv.q.residual = o->residual, kv.q.latent = o->latent;
    if (kv.e.method != AL_KVE_NONE) kv.e.sinks = o->sinks;
    return kv;
}

int al_kvf_check(const al_model *m, const al_kvf_method *meth, int n_meth, const al_kvf_opts *o, al_err *err) {
    for (int i = 0; i < n_meth; i++) {
        const al_kv_opts kv = method_opts(&meth[i], o);
        if (kv.q.kind == AL_KVQ_NONE) continue;
        if (!m->attn->cache_segments) return al_errf(err, "%s attention has no quantised KV cache", m->attn->name);
        al_kv_seg segs[AL_KV_MAX_SEGS];
        const int nseg = m->attn->cache_segments(&m->cfg, kv.q.latent, segs);
        if (al_kvq_check(&kv.q, segs, nseg, err)) return -1;
    }
    return 0;
}

int al_kvf_sweep(al_kvf *f, const al_model *m, const char *model, const char *label, const int *ids, size_t n_ids,
                 const al_kvf_method *meth, int n_meth, const al_kvf_opts *o, al_err *err) {
    const double mha = al_kvf_mha_fp32_bytes(&m->cfg);
    for (int i = 0; i < n_meth; i++) {
        al_kvf_point p = {.model = (char *)model, .kv = method_opts(&meth[i], o), .ok = 1,
                          .loss = NAN, .perplexity = NAN, .bytes_per_token = NAN, .pct_of_mha_fp32 = NAN};
        al_strfmt(p.label, sizeof p.label, "%s", label ? label : m->attn->title);
        al_strfmt(p.design, sizeof p.design, "%s", m->attn->name);
        al_strfmt(p.method, sizeof p.method, "%s", meth[i].name);
        p.fp32_bytes_per_token = (double)m->attn->cache_values_per_token(&m->cfg) * sizeof(float) * m->cfg.num_layers;
        al_eval_kv_result r;
        al_err e;
        /* an eviction its rules refuse at this window is a point, reported and not drawn; a failure of the
         * measurement itself (out of memory) stops the sweep, or the figure would silently lack the point */
        if (al_kve_check(&p.kv.e, o->context, &e)) {
            p.ok = 0;
            al_strfmt(p.why, sizeof p.why, "%s", e.msg);
        } else if (al_eval_decode(m, ids, n_ids, o->context, o->max_predictions, &p.kv, NULL, &r, &e)) {
            return al_errf(err, "%s: %s: %s", model, meth[i].name, e.msg);
        } else {
            p.predictions = r.count;
            p.bytes_per_token = r.kv_bytes_per_token;
            p.pct_of_mha_fp32 = 100.0 * r.kv_bytes_per_token / mha;
            p.loss = r.loss, p.perplexity = exp(r.loss), p.seconds = r.seconds;
        }
        if (al_kvf_add(f, &p, err)) return -1;
        if (o->on_point) o->on_point(o->ctx, &f->p[f->n - 1]);
    }
    return 0;
}

/* ---- the frontier ---- */

/* Whether point a comes before point b: fewer bytes, then lower loss. */
static int before(const al_kvf_point *a, const al_kvf_point *b) {
    return a->bytes_per_token < b->bytes_per_token || (a->bytes_per_token == b->bytes_per_token && a->loss < b->loss);
}

/* The measured points' indices ordered by bytes (then loss; insertion sort:
 * sweeps hold tens of points); *n of them; NULL when out of memory. */
static int *sorted_ok(const al_kvf_point *p, int np, int *n) {
    int *idx = malloc(sizeof(int) * (size_t)(np > 0 ? np : 1));
    *n = 0;
    if (!idx) return NULL;
    for (int i = 0; i < np; i++) {
        if (!p[i].ok) continue;
        int j = (*n)++;
        for (; j > 0 && before(&p[i], &p[idx[j - 1]]); j--) idx[j] = idx[j - 1];
        idx[j] = i;
    }
    return idx;
}

int al_kvf_select(al_kvf *f, al_err *err) {
    int n;
    for (int i = 0; i < f->n; i++) f->p[i].pareto = f->p[i].hull = 0;
    int *idx = sorted_ok(f->p, f->n, &n);
    if (!idx) return al_errf(err, "out of memory for the frontier of %d points", f->n);
    /* Pareto: lower loss than every point of fewer (or as many) bytes */
    int np = 0;
    double best = INFINITY;
    for (int i = 0; i < n; i++)
        if (f->p[idx[i]].loss < best) {
            best = f->p[idx[i]].loss;
            f->p[idx[i]].pareto = 1;
            idx[np++] = idx[i]; /* the Pareto points, by bytes */
        }
    /* lower convex hull of the Pareto points in (log bytes, loss): monotone chain, its stack h in idx's own
     * space (at point i the stack holds at most i entries, so it never overwrites a point not yet read) */
    int *h = idx, nh = 0;
    for (int i = 0; i < np; i++) {
        const int ci = idx[i];
        const al_kvf_point *c = &f->p[ci];
        while (nh >= 2) {
            const al_kvf_point *a = &f->p[h[nh - 2]], *b = &f->p[h[nh - 1]];
            const double ax = log(a->bytes_per_token), bx = log(b->bytes_per_token), cx = log(c->bytes_per_token);
            const double cross = (bx - ax) * (c->loss - a->loss) - (b->loss - a->loss) * (cx - ax);
            if (cross > 0) break; /* b is below the chord a-c */
            nh--;
        }
        h[nh++] = ci;
    }
    for (int i = 0; i < nh; i++) f->p[h[i]].hull = 1;
    free(idx);
    return 0;
}

int al_kvf_best_under(const al_kvf *f, double max_pct) {
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->p[i].ok && f->p[i].pct_of_mha_fp32 <= max_pct * (1 + 1e-12) && (best < 0 || f->p[i].loss < f->p[best].loss))
            best = i;
    return best;
}

int al_kvf_best_trade(const al_kvf *f) {
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->p[i].ok && (best < 0 || f->p[i].loss * f->p[i].bytes_per_token <
                                           f->p[best].loss * f->p[best].bytes_per_token))
            best = i;
    return best;
}

/* ---- writers ---- */

/* "int8" etc., or "none" */
static const char *quant_name(const al_kvf_point *p) { return al_kvq_name(p->kv.q.kind); }
static const char *evict_name(const al_kvf_point *p) { return al_kve_name(p->kv.e.method); }

/* X(field): the measured numbers of a point, as JSON keys (null: not measured) */
#define KVF_NUMBERS(X) X(bytes_per_token) X(pct_of_mha_fp32) X(fp32_bytes_per_token) X(loss) X(perplexity) X(seconds)

/* A finite number, or JSON null. */
static void add_num(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

/* The whole JSON document of f (short of members, or NULL, when out of
 * memory: al_json_print then refuses it). */
static cJSON *kvf_json(const al_kvf *f, const al_kvf_meta *meta) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", "attnlab.kvlab/1");
    if (meta->key) cJSON_AddStringToObject(j, "key", meta->key);
    cJSON_AddStringToObject(j, "methods", meta->methods ? meta->methods : "");
    cJSON_AddNumberToObject(j, "context", meta->context);
    cJSON_AddNumberToObject(j, "max_predictions", (double)meta->max_predictions);
    cJSON_AddNumberToObject(j, "kv_group", meta->group);
    cJSON_AddNumberToObject(j, "kv_residual", meta->residual);
    cJSON *pts = cJSON_AddArrayToObject(j, "points");
    for (int i = 0; i < f->n; i++) {
        const al_kvf_point *p = &f->p[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", p->model);
        cJSON_AddStringToObject(o, "label", p->label);
        cJSON_AddStringToObject(o, "design", p->design);
        cJSON_AddStringToObject(o, "method", p->method);
        cJSON_AddStringToObject(o, "quant", quant_name(p));
        cJSON_AddStringToObject(o, "evict", evict_name(p));
        cJSON_AddNumberToObject(o, "budget", p->kv.e.budget);
        cJSON_AddStringToObject(o, "status", p->ok ? "ok" : "refused");
        if (!p->ok) cJSON_AddStringToObject(o, "why", p->why);
#define KVF_ADD(f) add_num(o, #f, p->f);
        KVF_NUMBERS(KVF_ADD)
#undef KVF_ADD
        cJSON_AddNumberToObject(o, "predictions", (double)p->predictions);
        cJSON_AddBoolToObject(o, "pareto", p->pareto);
        cJSON_AddBoolToObject(o, "hull", p->hull);
        al_json_push(pts, o);
    }
    cJSON *fr = cJSON_AddObjectToObject(j, "frontier");
    cJSON *bu = cJSON_AddArrayToObject(fr, "best_under");
    for (int t = 0; t < AL_KVF_N_THRESHOLDS; t++) {
        const int b = al_kvf_best_under(f, al_kvf_thresholds[t]);
        if (b < 0) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "max_pct_of_mha_fp32", al_kvf_thresholds[t]);
        cJSON_AddNumberToObject(o, "point", b);
        al_json_push(bu, o);
    }
    const int bt = al_kvf_best_trade(f);
    if (bt >= 0) cJSON_AddNumberToObject(fr, "best_trade", bt);
    else cJSON_AddNullToObject(fr, "best_trade");
    return j;
}

char *al_kvf_json_text(const al_kvf *f, const al_kvf_meta *meta) {
    const unsigned long mark = al_json_mark();
    cJSON *j = kvf_json(f, meta);
    char *text = al_json_print(j, 1, mark);
    cJSON_Delete(j);
    return text;
}

int al_kvf_write_json(const al_kvf *f, const al_kvf_meta *meta, const char *path, al_err *err) {
    char *text = al_kvf_json_text(f, meta);
    int rc = text ? al_write_file_atomic(path, text, strlen(text), err) : al_errf(err, "out of memory");
    free(text);
    return rc;
}

/* A finite number with %.*g, or an empty field. */
static void csv_num(al_text *t, double v, int digits) {
    if (isfinite(v))
        al_text_printf(t, ",%.*g", digits, v);
    else
        al_text_printf(t, ",");
}

/* The CSV text of f (malloc'd into *text, *len); -1 when out of memory. */
static int kvf_csv(const al_kvf *f, char **text, size_t *len) {
    al_text t = {0};
    al_text_printf(&t, "model,design,method,quant,evict,budget,bytes_per_token,pct_of_mha_fp32,loss,perplexity,seconds,"
                       "status\n");
    for (int i = 0; i < f->n; i++) {
        const al_kvf_point *p = &f->p[i];
        al_text_csv_field(&t, p->model);
        al_text_printf(&t, ",%s,", p->design);
        al_text_csv_field(&t, p->method);
        al_text_printf(&t, ",%s,%s,%.6g", quant_name(p), evict_name(p), p->kv.e.budget);
        csv_num(&t, p->bytes_per_token, 10);
        csv_num(&t, p->pct_of_mha_fp32, 8);
        csv_num(&t, p->loss, 8);
        csv_num(&t, p->perplexity, 8);
        csv_num(&t, p->seconds, 4);
        al_text_printf(&t, ",%s\n", p->ok ? "ok" : "refused");
    }
    if (t.oom) {
        free(t.s);
        return -1;
    }
    *text = t.s;
    *len = t.len;
    return 0;
}

/* png with its extension replaced by ext (".json"), malloc'd. */
static char *beside(const char *png, const char *ext, al_err *err) {
    const char *dot = strrchr(png, '.'), *slash = strrchr(png, '/');
    const size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - png) : strlen(png);
    char *path = al_sprintf("%.*s%s", (int)stem, png, ext);
    if (!path) al_errf(err, "out of memory");
    return path;
}

int al_kvf_write_data(const al_kvf *f, const al_kvf_meta *meta, const char *png, al_err *err) {
    char *json = beside(png, ".json", err), *csv = json ? beside(png, ".csv", err) : NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = !csv ? -1 : al_kvf_write_json(f, meta, json, err);
    if (!rc) rc = kvf_csv(f, &text, &len) ? al_errf(err, "out of memory") : al_write_file_atomic(csv, text, len, err);
    free(text);
    free(json);
    free(csv);
    return rc;
}

/* ---- the figure ---- */

int al_kvf_draw(const al_kvf *f, const al_kvf_meta *meta, const char *title, const char *png, al_err *err) {
    al_lineplot *pl = al_lineplot_new(title ? title : "KV-cache quality per byte",
                                      "KV cache per token (bytes, log scale)", "loss (nats/token)", err);
    if (!pl) return -1;
    al_lineplot_set_scale(pl, AL_AXIS_LOG, AL_AXIS_LINEAR);
    double *x = malloc(sizeof(double) * (size_t)(f->n + 1)), *y = malloc(sizeof(double) * (size_t)(f->n + 1));
    int *idx = NULL, n_ok = 0, rc = x && y ? 0 : al_errf(err, "out of memory");
    if (!rc && !(idx = sorted_ok(f->p, f->n, &n_ok))) rc = al_errf(err, "out of memory");
    int n_models = 0, n_lines = 0, n_points = 0, refused = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        refused += !f->p[i].ok;
        int first = 1; /* the first point of its model (its label's first appearance) */
        for (int k = 0; k < i && first; k++) first = strcmp(f->p[k].label, f->p[i].label) != 0;
        if (!first) continue;
        const int color = n_models++;
        int m = 0, plain = -1;
        for (int k = 0; k < n_ok; k++) { /* this model's compressed points, by bytes */
            const al_kvf_point *p = &f->p[idx[k]];
            if (strcmp(p->label, f->p[i].label)) continue;
            if (p->kv.q.kind == AL_KVQ_NONE && p->kv.e.method == AL_KVE_NONE) plain = idx[k];
            else x[m] = p->bytes_per_token, y[m++] = p->loss;
        }
        if (m > 0) {
            rc = al_lineplot_line(pl, f->p[i].label, x, y, m, err) < 0 || al_lineplot_color(pl, 0, n_lines++, color, err);
        }
        if (!rc && plain >= 0) /* the uncompressed cache: a labelled point in the curve's colour */
            rc = al_lineplot_point(pl, f->p[i].label, f->p[plain].bytes_per_token, f->p[plain].loss, NAN, NAN, err) < 0 ||
                 al_lineplot_color(pl, 1, n_points++, color, err);
    }
    if (!rc && n_ok == 0) rc = al_errf(err, "no point was measured: nothing to draw");
    if (!rc) { /* whole decades, so the log axis has labelled ticks */
        const double lo = f->p[idx[0]].bytes_per_token, hi = f->p[idx[n_ok - 1]].bytes_per_token;
        double a = pow(10, floor(log10(lo))), b = pow(10, ceil(log10(hi)));
        if (b <= a) b = 10 * a;
        rc = al_lineplot_set_xlim(pl, a, b, err) || al_lineplot_set_size(pl, 6.4, 4.2, 150, err);
    }
    if (!rc) {
        char note[200];
        al_strfmt(note, sizeof note, "decode path, context %d, %zu predictions per point; int: group %d, residual %d%s",
                  meta->context, f->p[idx[0]].predictions, meta->group, meta->residual,
                  refused ? "; refused methods not drawn" : "");
        rc = al_lineplot_set_footnote(pl, note, err);
    }
    if (!rc) rc = al_lineplot_save(pl, png, err);
    al_lineplot_free(pl);
    free(idx);
    free(x);
    free(y);
    return rc ? -1 : 0;
}

/* ---- the cache reader ---- */

/* A string member into dst[cap]; -1 if missing. */
static int get_str(const cJSON *o, const char *k, char *dst, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v)) return -1;
    al_strfmt(dst, cap, "%s", v->valuestring);
    return 0;
}

/* A number member (null: NAN); -1 if missing or another type. */
static int get_num(const cJSON *o, const char *k, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsNull(v)) *out = NAN;
    else if (cJSON_IsNumber(v)) *out = v->valuedouble;
    else return -1;
    return 0;
}

/* One point of the JSON back into p (p->model malloc'd); -1 if malformed or
 * not one this module could have written: its method must parse to the
 * compression the point stores (a study reuses it under that name), a
 * measured point must have a positive, finite size and a finite loss (it is
 * drawn on a log axis), and the count of predictions must be a whole number
 * a size_t holds (converting a double beyond it is undefined behaviour).
 * -2 when out of memory. */
static int read_point(const cJSON *o, al_kvf_point *p) {
    char model[4096], quant[16], evict[16], status[16];
    memset(p, 0, sizeof *p);
    if (get_str(o, "model", model, sizeof model) || get_str(o, "label", p->label, sizeof p->label) ||
        get_str(o, "design", p->design, sizeof p->design) || get_str(o, "method", p->method, sizeof p->method) ||
        get_str(o, "quant", quant, sizeof quant) || get_str(o, "evict", evict, sizeof evict) ||
        get_str(o, "status", status, sizeof status) || get_num(o, "budget", &p->kv.e.budget))
        return -1;
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(o, "predictions");
    if (!al_json_whole_in(pred, 0, 9007199254740992.0)) return -1; /* 2^53: every whole double below is exact */
    p->predictions = (size_t)pred->valuedouble;
#define KVF_GET(f) || get_num(o, #f, &p->f)
    if (0 KVF_NUMBERS(KVF_GET)) return -1;
#undef KVF_GET
    const int q = al_kvq_from_name(quant), e = al_kve_from_name(evict);
    if (q < 0 || e < 0) return -1;
    p->kv.q.kind = (al_kvq_kind)q, p->kv.e.method = (al_kve_method)e;
    al_kvf_method m;
    int n;
    al_err ignored;
    if (al_kvf_parse_methods(p->method, &m, 1, &n, &ignored) || m.kv.q.kind != p->kv.q.kind ||
        m.kv.e.method != p->kv.e.method || m.kv.e.budget != p->kv.e.budget)
        return -1;
    p->ok = !strcmp(status, "ok");
    if (!p->ok && strcmp(status, "refused")) return -1;
    if (!p->ok) get_str(o, "why", p->why, sizeof p->why);
    if (p->ok && !(isfinite(p->loss) && isfinite(p->bytes_per_token) && p->bytes_per_token > 0)) return -1;
    p->model = strdup(model);
    return p->model ? 0 : -2;
}

int al_kvf_read_json(al_kvf *f, const char *path, const char *key, al_err *err) {
    char *text;
    size_t len;
    if (al_read_file(path, &text, &len, err)) return -1;
    int oom;
    cJSON *j = al_json_parse(text, len, &oom);
    free(text);
    if (oom) return al_errf(err, "%s: out of memory", path);
    char k[1024] = "";
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(j, "points");
    if (!j || get_str(j, "key", k, sizeof k) || strcmp(k, key ? key : "") || !cJSON_IsArray(pts)) {
        cJSON_Delete(j);
        return al_errf(err, "%s: not a cache of these settings", path);
    }
    const int n0 = f->n;
    int rc = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, pts) {
        al_kvf_point p;
        const int bad = read_point(o, &p);
        if (bad) {
            rc = al_errf(err, bad == -2 ? "%s: out of memory" : "%s: a malformed point", path);
            break;
        }
        rc = al_kvf_add(f, &p, err);
        free(p.model);
        if (rc) break;
    }
    cJSON_Delete(j);
    if (rc)
        while (f->n > n0) free(f->p[--f->n].model);
    return rc;
}
