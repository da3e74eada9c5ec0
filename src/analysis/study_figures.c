/*
 * study_figures.c: the figures of the study's report (see study_figures.h):
 * each writes STEM.json and STEM.npy first, then STEM.png, and names them
 * with a caption in an al_study_figure.
 */
#include "study_figures.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../plot/figure.h"
#include "../plot/lineplot.h"
#include "../train/vision.h"
#include "attnmap.h"

al_stat al_stat_of(const double *v, int n) {
    al_stat s = {NAN, NAN, NAN, NAN, n};
    if (n <= 0) return s;
    double sum = 0;
    s.min = s.max = v[0];
    for (int i = 0; i < n; i++) {
        sum += v[i];
        s.min = fmin(s.min, v[i]);
        s.max = fmax(s.max, v[i]);
    }
    s.mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (v[i] - s.mean) * (v[i] - s.mean);
    s.std = n > 1 ? sqrt(ss / (n - 1)) : 0;
    return s;
}

/* ---- data files beside figures ---- */

/* OUT/STEM.EXT (ext with its dot), malloc'd; NULL when out of memory (err). */
static char *fig_file(const char *out, const char *stem, const char *ext, al_err *err) {
    char *path = al_sprintf("%s/%s%s", out, stem, ext);
    if (!path) al_errf(err, "out of memory");
    return path;
}

/* STEM.json from a cJSON object built since mark (freed) and STEM.npy from
 * floats. */
static int write_data(const char *out, const char *stem, cJSON *j, unsigned long mark, const float *npy, int ndim,
                      const int64_t *shape, al_err *err) {
    char *text = al_json_print(j, 1, mark);
    cJSON_Delete(j);
    char *json_path = fig_file(out, stem, ".json", err), *npy_path = fig_file(out, stem, ".npy", err);
    int rc = !text                    ? al_errf(err, "out of memory")
             : !json_path || !npy_path ? -1
                                      : al_write_file_atomic(json_path, text, strlen(text), err);
    if (!rc) rc = al_npy_write_f32(npy_path, npy, ndim, shape, err);
    free(text);
    free(json_path);
    free(npy_path);
    return rc;
}

/* Saves a heat-map figure as OUT/STEM.png. */
static int save_figure(al_figure *f, const char *out, const char *stem, al_err *err) {
    char *png = fig_file(out, stem, ".png", err);
    int rc = png ? al_figure_save(f, png, err) : -1;
    free(png);
    return rc;
}

/* Names a written figure: STEM.png, STEM.json, STEM.npy and an optional third
 * data file, with its caption (short names and a caption of at most
 * sizeof f->caption; a longer one ends in "..."). */
static void name_figure(al_study_figure *f, const char *stem, const char *extra_data, const char *caption) {
    al_strfmt(f->file, sizeof f->file, "%s.png", stem);
    al_strfmt(f->data[0], sizeof f->data[0], "%s.json", stem);
    al_strfmt(f->data[1], sizeof f->data[1], "%s.npy", stem);
    al_strfmt(f->data[2], sizeof f->data[2], "%s", extra_data ? extra_data : "");
    al_strfmt(f->caption, sizeof f->caption, "%s", caption);
}

/* The end of a line-plot figure: unless rc already failed, STEM.json (j,
 * consumed either way) and STEM.npy, then STEM.png; the plot is freed and the
 * figure named in fig. Returns 0 or -1. */
static int finish_lineplot(const char *out, al_lineplot *p, cJSON *j, unsigned long mark, int rc, const char *stem,
                           const float *npy, int ndim, const int64_t *shape, const char *caption, al_study_figure *fig,
                           al_err *err) {
    if (!rc) {
        rc = write_data(out, stem, j, mark, npy, ndim, shape, err);
        j = NULL;
    }
    char *png = rc ? NULL : fig_file(out, stem, ".png", err);
    if (!rc) rc = png ? al_lineplot_save(p, png, err) : -1;
    free(png);
    cJSON_Delete(j);
    al_lineplot_free(p);
    if (rc) return -1;
    name_figure(fig, stem, NULL, caption);
    return 0;
}

/* ---- attnmaps.png ---- */

int al_fig_attnmaps(const char *out_dir, const char *model_dir, const char *title, uint64_t seed, const uint8_t *text,
                    size_t len, int max_tokens, al_study_figure *fig, al_err *err) {
    int T = (size_t)max_tokens < len ? max_tokens : (int)len;
    if (T < 2) return al_errf(err, "the validation split is too short for attention maps");
    char *input = fig_file(out_dir, "attnmap_input", ".txt", err);
    const int wrote = input && !al_write_file_atomic(input, text, (size_t)T, err);
    free(input);
    if (!wrote) return -1;
    int *tok = malloc(sizeof(int) * (size_t)T);
    if (!tok) return al_errf(err, "out of memory");
    for (int i = 0; i < T; i++) tok[i] = text[i];
    al_model m;
    al_acts a;
    int trained;
    int rc = al_attnmap_prepare(model_dir, tok, T, &m, &a, &trained, err);
    free(tok);
    if (rc) return -1;
    const int L = m.cfg.num_layers, H = m.cfg.num_heads;
    const int layers[2] = {0, L - 1}, heads[2] = {0, H - 1};
    float *Pm = malloc(sizeof(float) * 4 * (size_t)T * T), *t = malloc(sizeof(float) * (size_t)T * T);
    al_figure *f = NULL;
    const unsigned long mark = al_json_mark();
    cJSON *j = cJSON_CreateObject(), *pairs = cJSON_AddArrayToObject(j, "pairs");
    rc = Pm && t ? 0 : al_errf(err, "out of memory");
    for (int i = 0; i < 4 && !rc; i++) {
        float *Pi = Pm + (size_t)i * T * T;
        rc = al_attnmap_weights(&m, &a, layers[i / 2], heads[i % 2], Pi, err);
        if (rc) break;
        al_head_stats hs;
        if ((rc = al_head_stats_of(Pi, T, 10, 0, &hs, err))) break;
        cJSON *o = cJSON_CreateObject();
        char name[64];
        snprintf(name, sizeof name, "Layer %d Head %d", layers[i / 2], heads[i % 2]);
        cJSON_AddNumberToObject(o, "layer", layers[i / 2]);
        cJSON_AddNumberToObject(o, "head", heads[i % 2]);
        cJSON_AddStringToObject(o, "title", name);
        cJSON_AddNumberToObject(o, "sink_mass", hs.sink_mass);
        cJSON_AddNumberToObject(o, "entropy", hs.entropy);
        cJSON_AddNumberToObject(o, "mean_distance", hs.mean_distance);
        cJSON_AddNumberToObject(o, "topk_mass", hs.topk_mass);
        cJSON_AddNumberToObject(o, "topk", hs.topk);
        cJSON_AddNumberToObject(o, "row_sum", hs.row_sum);
        cJSON_AddNumberToObject(o, "min", hs.min_weight);
        cJSON_AddNumberToObject(o, "max", hs.max_weight);
        al_json_push(pairs, o);
    }
    if (!rc) {
        cJSON_AddStringToObject(j, "figure", "attnmaps.png");
        cJSON_AddStringToObject(j, "model", model_dir);
        cJSON_AddStringToObject(j, "text", "attnmap_input.txt");
        cJSON_AddNumberToObject(j, "tokens", T);
        cJSON_AddNumberToObject(j, "trained_context", trained);
        cJSON_AddStringToObject(j, "attention", al_attn_name(m.cfg.attention));
        cJSON_AddStringToObject(j, "score", al_score_name(m.cfg.score));
        cJSON_AddStringToObject(j, "scale", "log");
        cJSON_AddStringToObject(j, "npy_layout", "[pair, query, key]");
        const int64_t shape[3] = {4, T, T};
        rc = write_data(out_dir, "attnmaps", j, mark, Pm, 3, shape, err);
        j = NULL;
    }
    if (!rc) {
        al_heat_style st = {.cmap = "viridis",
                            .norm = al_norm_log(1e-6, 1.0),
                            .xlabel = "Output (query) position",
                            .ylabel = "Input (key) position"};
        f = al_figure_new(2, 2, &st, err);
        char heading[256];
        al_strfmt(heading, sizeof heading, "%s (seed %llu): %d tokens of the validation split (trained context %d)",
                  title, (unsigned long long)seed, T, trained);
        rc = f ? al_figure_set_title(f, heading, err) : -1;
        for (int i = 0; i < 4 && !rc; i++) {
            const float *Pi = Pm + (size_t)i * T * T;
            for (int q = 0; q < T; q++)
                for (int k = 0; k < T; k++) t[(size_t)k * T + q] = Pi[(size_t)q * T + k];
            char name[64];
            snprintf(name, sizeof name, "Layer %d Head %d", layers[i / 2], heads[i % 2]);
            rc = al_figure_panel(f, i, name, t, T, T, err);
        }
        if (!rc) rc = save_figure(f, out_dir, "attnmaps", err);
    }
    cJSON_Delete(j);
    al_figure_free(f);
    free(Pm);
    free(t);
    al_acts_free(&a);
    al_model_free(&m);
    if (rc) return -1;
    char cap[sizeof fig->caption];
    al_strfmt(cap, sizeof cap,
              "Attention weights of the %s model (first seed), layers 0 and %d x heads 0 and %d, over %d bytes of the "
              "validation split (the models trained at context %d), log colour scale 1e-6..1; x = query, y = key.",
              title, L - 1, H - 1, T, trained);
    name_figure(fig, "attnmaps", "attnmap_input.txt", cap);
    return 0;
}

/* ---- poly_vs_softmax.png ---- */

/* Fashion-MNIST's ten classes, by label. */
static const char *const fmnist_classes[10] = {"T-shirt/top", "trouser", "pullover", "dress", "coat",
                                               "sandal",      "shirt",   "sneaker",  "bag",   "ankle boot"};

/* The CLS token's attention weights in (layer, head) of a vision
 * transformer for image `index` of the set: row[1 + P] (row[0] is the CLS
 * token's weight on itself, row[1..P] the patches in raster order). */
static int cls_attention(const al_model *m, const al_image_set *s, int index, int layer, int head, float *row,
                         al_err *err) {
    if (m->cfg.task != AL_TASK_VISION) return al_errf(err, "not a vision model");
    if (index < 0 || index >= s->n) return al_errf(err, "image %d does not exist (the set has %d)", index, s->n);
    al_acts a;
    if (al_vit_acts_create(&a, m, 1, err)) return -1;
    const size_t per = (size_t)s->C * s->S * s->S;
    const int T = a.T;
    float *img = malloc(sizeof(float) * per), *P = malloc(sizeof(float) * (size_t)T * T);
    int label, rc = img && P ? 0 : al_errf(err, "out of memory");
    if (!rc) {
        al_image_batch(s, &index, 1, m->cfg.image_mean, m->cfg.image_std, img, &label);
        al_vit_forward(m, &a, img, NULL);
        rc = al_attnmap_weights(m, &a, layer, head, P, err);
    }
    if (!rc) memcpy(row, P, sizeof(float) * (size_t)T); /* query 0: the CLS token */
    free(img);
    free(P);
    al_acts_free(&a);
    return rc;
}

int al_fig_cls_attention(const char *out_dir, const char *const dirs[2], const char *const titles[2],
                         const char *images_dir, al_cls_figure *cls, al_study_figure *fig, al_err *err) {
    al_image_set set;
    cls->min[0] = cls->min[1] = cls->max[0] = cls->max[1] = NAN;
    if (al_fmnist_load(&set, images_dir, "t10k", 1, err)) return -1;
    const int image = 0;
    int side = 0, rc = 0, T = 0;
    float *grid = NULL, *row = NULL;
    const unsigned long mark = al_json_mark();
    cJSON *j = cJSON_CreateObject(), *panels = cJSON_AddArrayToObject(j, "panels");
    for (int k = 0; k < 2 && !rc; k++) {
        al_model m;
        if (al_model_load(&m, dirs[k], NULL, err)) {
            rc = -1;
            break;
        }
        const int P = al_config_num_patches(&m.cfg);
        side = (int)lround(sqrt((double)P));
        T = P + 1;
        if (!grid) grid = malloc(sizeof(float) * 2 * (size_t)P), row = malloc(sizeof(float) * (size_t)T);
        cls->layer = m.cfg.num_layers - 1;
        cls->head = 0;
        rc = grid && row ? cls_attention(&m, &set, image, cls->layer, 0, row, err)
                         : al_errf(err, "out of memory");
        if (!rc) {
            double lo = INFINITY, hi = -INFINITY, sum = 0;
            for (int p = 0; p < P; p++) {
                grid[(size_t)k * P + p] = row[1 + p];
                lo = fmin(lo, row[1 + p]), hi = fmax(hi, row[1 + p]);
            }
            for (int p = 0; p < T; p++) sum += row[p];
            cls->min[k] = lo, cls->max[k] = hi;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", dirs[k]);
            cJSON_AddStringToObject(o, "title", titles[k]);
            cJSON_AddStringToObject(o, "score", al_score_name(m.cfg.score));
            cJSON_AddNumberToObject(o, "layer", cls->layer);
            cJSON_AddNumberToObject(o, "head", 0);
            cJSON_AddNumberToObject(o, "cls_self_weight", row[0]);
            cJSON_AddNumberToObject(o, "row_sum", sum);
            cJSON_AddNumberToObject(o, "min", lo);
            cJSON_AddNumberToObject(o, "max", hi);
            al_json_add(o, "weights", cJSON_CreateFloatArray(row, T));
            al_json_push(panels, o);
        }
        al_model_free(&m);
    }
    const int P = side * side;
    cls->image = image;
    cls->label = set.n > 0 ? set.labels[0] : -1;
    if (!rc) {
        float pix[28 * 28];
        for (int i = 0; i < 28 * 28 && i < set.S * set.S; i++) pix[i] = set.pixels[i] / 255.0f;
        cJSON_AddStringToObject(j, "figure", "poly_vs_softmax.png");
        cJSON_AddStringToObject(j, "images", images_dir);
        cJSON_AddNumberToObject(j, "image", image);
        cJSON_AddNumberToObject(j, "label", cls->label);
        al_json_add(j, "pixels", cJSON_CreateFloatArray(pix, set.S * set.S));
        cJSON_AddStringToObject(j, "npy_layout", "[model (softmax, poly), patch row, patch column]: CLS weights");
        const int64_t shape[3] = {2, side, side};
        rc = write_data(out_dir, "poly_vs_softmax", j, mark, grid, 3, shape, err);
        j = NULL;
    }
    if (!rc) {
        al_heat_style base = {.cmap = "viridis", .xlabel = "Patch column", .ylabel = "Patch row"};
        al_figure *f = al_figure_new(1, 2, &base, err);
        rc = f ? 0 : -1;
        for (int k = 0; k < 2 && !rc; k++) {
            al_heat_style st = base;
            double lo = cls->min[k], hi = cls->max[k], mx = fmax(fabs(lo), fabs(hi));
            /* signed (poly): symmetric about 0; positive (softmax): min..max, as the paper's figure */
            if (lo < 0)
                st.cmap = "RdYlBu_r", st.norm = al_norm_symmetric(mx > 0 ? mx : 1);
            else
                st.norm = hi > lo ? al_norm_linear(lo, hi) : al_norm_linear(0, hi > 0 ? hi : 1);
            char sub[96];
            snprintf(sub, sizeof sub, "CLS token, layer %d, head 0", cls->layer);
            rc = al_figure_panel(f, k, titles[k], grid + (size_t)k * P, side, side, err) ||
                 al_figure_panel_style(f, k, &st, err) || al_figure_panel_subtitle(f, k, sub, err);
        }
        if (!rc) rc = save_figure(f, out_dir, "poly_vs_softmax", err);
        al_figure_free(f);
    }
    cJSON_Delete(j);
    free(grid);
    free(row);
    al_image_set_free(&set);
    if (rc) return -1;
    /* "Attention with (1/14)x^3" -> "(1/14)x^3" */
    const char *poly = strncmp(titles[1], "Attention with ", 15) ? titles[1] : titles[1] + 15;
    char cap[sizeof fig->caption];
    al_strfmt(cap, sizeof cap,
              "The CLS token's attention over the %d x %d patch grid of Fashion-MNIST test image %d (a %s), last "
              "layer, head 0: a ViT with softmax and one with %s (first seed), each panel with its own colour range "
              "(signed weights: symmetric about 0).",
              side, side, image, cls->label >= 0 && cls->label < 10 ? fmnist_classes[cls->label] : "?", poly);
    name_figure(fig, "poly_vs_softmax", NULL, cap);
    return 0;
}

/* ---- loss_curves.png ---- */

int al_fig_loss_curves(const char *out_dir, const al_fig_design *d, int n_designs, int n_seeds, double tokens_per_step,
                       double total_tokens, int eval_tokens, double unigram_loss, al_study_figure *fig, al_err *err) {
    const double unit = total_tokens >= 2e6 ? 1e6 : 1e3;
    char xlabel[64];
    snprintf(xlabel, sizeof xlabel, "training tokens (%s)", unit == 1e6 ? "millions" : "thousands");
    al_lineplot *p = al_lineplot_new("Validation loss during training", xlabel, "validation loss (nats/byte)", err);
    if (!p) return -1;
    int np = 0;
    for (int k = 0; k < n_designs; k++)
        for (int i = 0; i < d[k].n_runs; i++) np = d[k].runs[i].n > np ? d[k].runs[i].n : np;
    float *npy = calloc((size_t)n_designs * np * 4, sizeof(float));
    double *x = malloc(sizeof(double) * np * 4), *y = x + np, *lo = y + np, *hi = lo + np;
    const unsigned long mark = al_json_mark();
    cJSON *j = cJSON_CreateObject(), *series = cJSON_AddArrayToObject(j, "series");
    int rc = npy && x ? 0 : al_errf(err, "out of memory");
    for (int k = 0; k < n_designs && !rc; k++) {
        if (d[k].n_runs == 0) continue;
        const al_fig_run *first = &d[k].runs[0];
        cJSON *o = cJSON_CreateObject(), *runs = cJSON_CreateArray();
        for (int i = 0; i < d[k].n_runs; i++) {
            const al_fig_run *r = &d[k].runs[i];
            cJSON *ro = cJSON_CreateObject();
            cJSON_AddNumberToObject(ro, "seed", (double)r->seed);
            al_json_add(ro, "val_loss", cJSON_CreateDoubleArray(r->val_loss, r->n));
            al_json_push(runs, ro);
        }
        const int n = first->n;
        for (int e = 0; e < n; e++) {
            double sum = 0, mn = INFINITY, mx = -INFINITY;
            int c = 0;
            for (int i = 0; i < d[k].n_runs; i++) {
                const al_fig_run *r = &d[k].runs[i];
                if (e >= r->n || r->step[e] != first->step[e]) continue;
                sum += r->val_loss[e], mn = fmin(mn, r->val_loss[e]), mx = fmax(mx, r->val_loss[e]);
                c++;
            }
            x[e] = first->step[e] * tokens_per_step / unit;
            y[e] = sum / c, lo[e] = mn, hi[e] = mx;
            float *q = npy + ((size_t)k * np + e) * 4;
            q[0] = (float)(first->step[e] * tokens_per_step), q[1] = (float)y[e], q[2] = (float)mn, q[3] = (float)mx;
        }
        for (int e = n; e < np; e++)
            for (int c = 0; c < 4; c++) npy[((size_t)k * np + e) * 4 + c] = NAN;
        int li = al_lineplot_line(p, d[k].title, x, y, n, err);
        rc = li < 0 || (d[k].n_runs > 1 && al_lineplot_band(p, li, lo, hi, err));
        cJSON_AddStringToObject(o, "design", d[k].name);
        cJSON_AddStringToObject(o, "title", d[k].title);
        cJSON_AddNumberToObject(o, "seeds", d[k].n_runs);
        cJSON *tk = cJSON_AddArrayToObject(o, "tokens");
        for (int e = 0; e < n; e++) al_json_push(tk, cJSON_CreateNumber(first->step[e] * tokens_per_step));
        al_json_add(o, "val_loss_mean", cJSON_CreateDoubleArray(y, n));
        al_json_add(o, "val_loss_min", cJSON_CreateDoubleArray(lo, n));
        al_json_add(o, "val_loss_max", cJSON_CreateDoubleArray(hi, n));
        al_json_add(o, "runs", runs);
        al_json_push(series, o);
    }
    if (!rc) rc = al_lineplot_hline(p, "unigram baseline", unigram_loss, err);
    if (!rc) {
        char note[160];
        snprintf(note, sizeof note, "%d seed%s per design%s; validation loss on %d bytes per evaluation", n_seeds,
                 n_seeds == 1 ? "" : "s", n_seeds > 1 ? " (line: mean, band: min..max)" : "", eval_tokens);
        rc = al_lineplot_set_footnote(p, note, err);
    }
    if (!rc) {
        cJSON_AddStringToObject(j, "figure", "loss_curves.png");
        cJSON_AddStringToObject(j, "x", "training tokens");
        cJSON_AddStringToObject(j, "y", "validation loss, nats/byte");
        cJSON_AddNumberToObject(j, "unigram_baseline", unigram_loss);
        cJSON_AddStringToObject(j, "npy_layout",
                                "[design (mha gqa mqa mla lrkv), evaluation, (tokens, mean, min, max)]");
    }
    const int64_t shape[3] = {n_designs, np, 4};
    rc = finish_lineplot(out_dir, p, j, mark, rc, "loss_curves", npy, 3, shape,
                         "Validation loss against training tokens for the five designs, with the unigram baseline "
                         "(dashed).",
                         fig, err);
    free(npy);
    free(x);
    return rc;
}

/* ---- kv_vs_loss.png ---- */

/* The conversions of kv_vs_loss.png: for each design with n_conv, a diamond
 * (converted from MHA and uptrained) and a square (from scratch for the same
 * total steps) in the design's colour, their rows appended to npy at *n and
 * to j's "conversions"; a legend of the three markers when there are any. */
static int kv_conversion_points(al_lineplot *p, const al_fig_design *d, int n_designs, float *npy, int *n, cJSON *j,
                                al_err *err) {
    int any = 0, rc = 0;
    for (int k = 0; k < n_designs; k++) any |= d[k].n_conv > 0;
    if (!any) return 0;
    cJSON *conv = cJSON_AddArrayToObject(j, "conversions");
    static const char *const kind[2] = {"converted_uptrained", "scratch_same_steps"};
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int k = 0; k < n_designs && !rc; k++) {
            if (d[k].n_conv <= 0) continue;
            const al_stat st = al_stat_of(pass ? d[k].long_loss : d[k].conv_loss, d[k].n_conv);
            const int c = d[k].n_conv, idx = al_lineplot_point(p, NULL, d[k].conv_kv_pct_of_mha, st.mean,
                                                               c > 1 ? st.min : NAN, c > 1 ? st.max : NAN, err);
            rc = idx < 0 || al_lineplot_color(p, 1, idx, k, err) ||
                 al_lineplot_point_marker(p, idx, pass ? AL_MARKER_SQUARE : AL_MARKER_DIAMOND, err);
            float *q = npy + 4 * (*n)++;
            q[0] = (float)d[k].conv_kv_pct_of_mha, q[1] = (float)st.mean, q[2] = (float)st.min, q[3] = (float)st.max;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "design", d[k].name);
            cJSON_AddStringToObject(o, "kind", kind[pass]);
            cJSON_AddNumberToObject(o, "kv_pct_of_mha", d[k].conv_kv_pct_of_mha);
            cJSON_AddNumberToObject(o, "val_loss_mean", st.mean);
            cJSON_AddNumberToObject(o, "val_loss_min", st.min);
            cJSON_AddNumberToObject(o, "val_loss_max", st.max);
            cJSON_AddNumberToObject(o, "seeds", c);
            al_json_push(conv, o);
        }
    if (!rc) /* wider: the legend sits beside the axes when every corner holds points */
        rc = al_lineplot_marker_key(p, "from scratch", AL_MARKER_CIRCLE, err) ||
             al_lineplot_marker_key(p, "converted + uptrained", AL_MARKER_DIAMOND, err) ||
             al_lineplot_marker_key(p, "from scratch, same total", AL_MARKER_SQUARE, err) ||
             al_lineplot_set_size(p, 7.0, 3.8, 150, err);
    return rc ? -1 : 0;
}

int al_fig_kv_vs_loss(const char *out_dir, const al_fig_design *d, int n_designs, int n_seeds, al_study_figure *fig,
                      al_err *err) {
    al_lineplot *p = al_lineplot_new("KV cache vs validation loss", "KV cache per token (% of MHA)",
                                     "validation loss (nats/byte)", err);
    if (!p) return -1;
    float *npy = malloc(sizeof(float) * 4 * 3 * (size_t)(n_designs > 0 ? n_designs : 1)); /* designs, conversions */
    int n = 0, rc = npy ? 0 : al_errf(err, "out of memory");
    const unsigned long mark = al_json_mark();
    cJSON *j = cJSON_CreateObject(), *pts = cJSON_AddArrayToObject(j, "points");
    for (int k = 0; k < n_designs && !rc; k++) {
        const int c = d[k].n_runs;
        if (c == 0) continue;
        double *v = malloc(sizeof(double) * (size_t)c);
        if (!v) {
            rc = al_errf(err, "out of memory");
            break;
        }
        for (int i = 0; i < c; i++) v[i] = d[k].runs[i].final_val_loss;
        al_stat st = al_stat_of(v, c);
        free(v);
        rc = al_lineplot_point(p, d[k].title, d[k].kv_pct_of_mha, st.mean, c > 1 ? st.min : NAN, c > 1 ? st.max : NAN,
                               err) < 0;
        if (!rc) rc = al_lineplot_color(p, 1, n, k, err);
        float *q = npy + 4 * n;
        q[0] = (float)d[k].kv_pct_of_mha, q[1] = (float)st.mean, q[2] = (float)st.min, q[3] = (float)st.max;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "design", d[k].name);
        cJSON_AddStringToObject(o, "title", d[k].title);
        cJSON_AddNumberToObject(o, "kv_pct_of_mha", d[k].kv_pct_of_mha);
        cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)d[k].kv_bytes_per_token);
        cJSON_AddNumberToObject(o, "val_loss_mean", st.mean);
        cJSON_AddNumberToObject(o, "val_loss_min", st.min);
        cJSON_AddNumberToObject(o, "val_loss_max", st.max);
        cJSON_AddNumberToObject(o, "seeds", c);
        al_json_push(pts, o);
        n++;
    }
    const int n_plain = n;
    if (!rc) rc = kv_conversion_points(p, d, n_designs, npy, &n, j, err);
    if (!rc) {
        char note[160];
        snprintf(note, sizeof note, "%d seed%s per design%s", n_seeds, n_seeds == 1 ? "" : "s",
                 n_seeds > 1 ? " (point: mean, bar: min..max)" : "");
        rc = al_lineplot_set_footnote(p, note, err);
    }
    if (!rc) {
        cJSON_AddStringToObject(j, "figure", "kv_vs_loss.png");
        cJSON_AddStringToObject(j, "npy_layout",
                                n > n_plain ? "[design (mha gqa mqa mla lrkv), then converted and uptrained, then from "
                                              "scratch for the same total steps (designs with conversions), "
                                              "(kv_pct_of_mha, mean, min, max)]"
                                            : "[design (mha gqa mqa mla lrkv), (kv_pct_of_mha, mean, min, max)]");
    }
    const int64_t shape[2] = {n, 4};
    rc = finish_lineplot(out_dir, p, j, mark, rc, "kv_vs_loss", npy, 2, shape,
                         "KV-cache size per token (% of MHA) against final validation loss, one point per design.", fig,
                         err);
    free(npy);
    return rc;
}
