/*
 * cmd_heads.c: `attnlab heads`: head similarity across KV designs
 * (attention.md 4, figures.md Figure 1).
 *
 *   attnlab heads --model DIR [--model DIR ...] [--title T ...]
 *                 [--layer L | --layer mean] --out STEM
 *
 * For every model: the H x H similarity s_ij of the heads' bilinear forms per
 * layer (src/analysis/heads.c), their mean over layers, effective ranks
 * (uncentered and PCA-based, as % of H), the cumulative variance of the
 * centred spectrum and the mean off-diagonal similarity. Prints a table and
 * writes, all or nothing:
 *   STEM.json  every number: per model its dir, title, design, config
 *              summary, per-layer matrices and metrics, the mean matrix, the
 *              per-layer averages, and the selected (shown) matrix;
 *   STEM.csv   one row per model x layer;
 *   STEM.npy   float32 [n_models, H, H]: the matrices shown (the selected
 *              layer, or the mean over layers).
 * --out may also name the figure (STEM.png/.svg/.pdf); the stem is the name
 * without that extension; the figure is STEM.png unless --out names one.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "analysis/heads.h"
#include "cli.h"
#include "io/io.h"
#include "model/model.h"
#include "plot/figure.h"

enum { HEADS_MAX_MODELS = 64 };

/* One model's analysis, kept after its weights are freed. */
typedef struct heads_model {
    const char *dir;
    const char *title;       /* the --title given, or design_title */
    char design_title[160];  /* the design's own words (al_attn_ops.figure_title) */
    al_config cfg;
    size_t cache_values; /* KV cache per token per layer (attention.md 3.6) */
    al_head_sim sim;
} heads_model;

/* The whole run: models, the layer shown (-1: mean over layers), outputs. */
typedef struct heads_run {
    heads_model *m;
    int n;
    int layer;
    char *stem;   /* malloc'd, like figure */
    char *figure; /* --out if it names a .png/.svg/.pdf, else STEM.png */
} heads_run;

/* The matrix of model i that the figure and the NPY show: [H, H]. */
static const double *shown_matrix(const heads_run *r, int i) {
    const al_head_sim *s = &r->m[i].sim;
    return r->layer < 0 ? s->mean_sim : s->sim + (size_t)r->layer * s->H * s->H;
}

static const al_sim_metrics *shown_metrics(const heads_run *r, int i) {
    const al_head_sim *s = &r->m[i].sim;
    return r->layer < 0 ? &s->of_mean : &s->layer[r->layer];
}

/* The panel title from the config, as the paper's figure names the designs. */
static void default_title(const al_config *c, char *buf, size_t cap) { al_attn_figure_title(c, buf, cap); }

/* The length of STEM in --out: the name without a figure or data extension.
 * 0 when nothing names a file (empty, or a directory). */
static size_t out_stem_len(const char *out) {
    static const char *const exts[] = {".png", ".svg", ".pdf", ".json", ".csv", ".npy"};
    size_t n = strlen(out);
    if (n == 0) return 0;
    for (size_t e = 0; e < sizeof exts / sizeof exts[0]; e++) {
        size_t k = strlen(exts[e]);
        if (n > k && strcasecmp(out + n - k, exts[e]) == 0) {
            n -= k;
            break;
        }
    }
    if (out[n - 1] == '/' || (n >= 2 && !strncmp(out + n - 2, "/.", 2)) || (n == 1 && out[0] == '.') ||
        (n == 2 && !strncmp(out, "..", 2)))
        return 0;
    return n;
}

/* ---- JSON ---- */

static cJSON *matrix_json(const double *a, int H) {
    cJSON *rows = cJSON_CreateArray();
    for (int i = 0; i < H; i++) al_json_push(rows, cJSON_CreateDoubleArray(a + (size_t)i * H, H));
    return rows;
}

/* Adds the metric fields (percentages of H, as in the table and the CSV). */
static void add_metrics(cJSON *o, const al_sim_metrics *m, int H) {
    cJSON_AddNumberToObject(o, "erank_uncentered_pct", 100.0 * m->erank_uncentered);
    cJSON_AddNumberToObject(o, "erank_pca_pct", 100.0 * m->erank_pca);
    cJSON_AddNumberToObject(o, "mean_offdiag", m->mean_offdiag);
    al_json_add(o, "cumulative_variance", cJSON_CreateDoubleArray(m->cumvar, H));
}

/* The config (its JSON view) and what matters for heads and caches. */
static cJSON *config_json(const heads_model *hm) {
    cJSON *o = cJSON_CreateObject();
    if (!o || al_config_view(&hm->cfg, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddNumberToObject(o, "d_qk", hm->sim.d_qk);
    cJSON_AddNumberToObject(o, "kv_values_per_token_per_layer", (double)hm->cache_values);
    return o;
}

/* The whole report as JSON text (malloc'd), or NULL when out of memory. */
static char *report_json(const heads_run *r) {
    const unsigned long mark = al_json_mark();
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "analysis", "head similarity s_ij = <A_i, A_j>_F / (|A_i| |A_j|), A_h = Wq_h^T Wk_h");
    cJSON_AddStringToObject(root, "precision", al_precision_name(al_precision_now())); /* of the products */
    if (r->layer < 0)
        cJSON_AddStringToObject(root, "layer", "mean");
    else
        cJSON_AddNumberToObject(root, "layer", r->layer);
    cJSON_AddNumberToObject(root, "heads", r->m[0].sim.H);
    cJSON *models = cJSON_AddArrayToObject(root, "models");
    for (int i = 0; i < r->n; i++) {
        const heads_model *hm = &r->m[i];
        const al_head_sim *s = &hm->sim;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dir", hm->dir);
        cJSON_AddStringToObject(o, "title", hm->title);
        cJSON_AddStringToObject(o, "attention", al_attn_name(hm->cfg.attention));
        al_json_add(o, "config", config_json(hm));
        cJSON *layers = cJSON_AddArrayToObject(o, "layers");
        for (int l = 0; l < s->L; l++) {
            cJSON *lo = cJSON_CreateObject();
            cJSON_AddNumberToObject(lo, "layer", l);
            add_metrics(lo, &s->layer[l], s->H);
            al_json_add(lo, "similarity", matrix_json(s->sim + (size_t)l * s->H * s->H, s->H));
            al_json_push(layers, lo);
        }
        cJSON *mean = cJSON_AddObjectToObject(o, "mean_matrix"); /* the layer-averaged G and its metrics */
        add_metrics(mean, &s->of_mean, s->H);
        al_json_add(mean, "similarity", matrix_json(s->mean_sim, s->H));
        cJSON *avg = cJSON_AddObjectToObject(o, "layer_average"); /* per-layer metrics averaged */
        add_metrics(avg, &s->avg, s->H);
        cJSON *shown = cJSON_AddObjectToObject(o, "shown"); /* what the figure and the NPY show */
        if (r->layer < 0)
            cJSON_AddStringToObject(shown, "layer", "mean");
        else
            cJSON_AddNumberToObject(shown, "layer", r->layer);
        add_metrics(shown, shown_metrics(r, i), s->H);
        al_json_add(shown, "similarity", matrix_json(shown_matrix(r, i), s->H));
        al_json_push(models, o);
    }
    char *text = al_json_print(root, 1, mark);
    cJSON_Delete(root);
    return text;
}

/* ---- CSV ---- */

/* One row per model x layer; cumvar_k = variance share of the top k
 * components of the centred spectrum. NULL when out of memory. */
static char *report_csv(const heads_run *r, size_t *len) {
    al_text t = {0};
    const int H = r->m[0].sim.H;
    al_text_printf(&t, "model,title,attention,layer,erank_uncentered_pct,erank_pca_pct,mean_offdiag");
    for (int k = 1; k <= H; k++) al_text_printf(&t, ",cumvar_%d", k);
    al_text_printf(&t, "\n");
    for (int i = 0; i < r->n; i++) {
        const al_head_sim *s = &r->m[i].sim;
        for (int l = 0; l < s->L; l++) {
            const al_sim_metrics *m = &s->layer[l];
            al_text_csv_field(&t, r->m[i].dir);
            al_text_printf(&t, ",");
            al_text_csv_field(&t, r->m[i].title);
            al_text_printf(&t, ",%s,%d,%.10g,%.10g,%.10g", al_attn_name(r->m[i].cfg.attention), l,
                           100.0 * m->erank_uncentered, 100.0 * m->erank_pca, m->mean_offdiag);
            for (int k = 0; k < H; k++) al_text_printf(&t, ",%.10g", m->cumvar[k]);
            al_text_printf(&t, "\n");
        }
    }
    if (t.oom) {
        free(t.s);
        return NULL;
    }
    *len = t.len;
    return t.s;
}

/* ---- outputs ---- */

/* The figure (figures.md, Figure 1): one panel per model in a row, its shown
 * matrix on RdYlBu_r over -1..1 with ticks every 0.25, "Head Index" axes,
 * titled, with the effective rank (in heads, as the paper prints it) in a
 * subtitle. */
static int draw_heads_figure(const heads_run *r, al_err *err) {
    const int H = r->m[0].sim.H;
    al_heat_style st = {.cmap = "RdYlBu_r", .norm = al_norm_linear(-1, 1), .xlabel = "Head Index",
                        .ylabel = "Head Index", .cbar_step = 0.25};
    al_figure *f = al_figure_new(1, r->n, &st, err);
    float *buf = malloc(sizeof(float) * (size_t)H * H);
    int rc = f && buf ? 0 : -1;
    if (f && !buf) al_errf(err, "out of memory");
    for (int i = 0; i < r->n && !rc; i++) {
        const double *G = shown_matrix(r, i);
        for (int k = 0; k < H * H; k++) buf[k] = (float)G[k];
        char sub[96];
        snprintf(sub, sizeof sub, "effective rank %.1f", shown_metrics(r, i)->erank_uncentered * H);
        rc = al_figure_panel(f, i, r->m[i].title, buf, H, H, err) || al_figure_panel_subtitle(f, i, sub, err);
    }
    if (!rc) rc = al_figure_save(f, r->figure, err);
    free(buf);
    al_figure_free(f);
    return rc;
}

/* Writes STEM.json, STEM.csv and STEM.npy, all or nothing: the text files go
 * to temp files first, the NPY is written atomically, and the text files are
 * renamed into place only once it succeeded (any failure removes what this
 * call wrote). */
static int write_outputs(const heads_run *r, al_err *err) {
    char *path_json = al_sprintf("%s.json", r->stem), *path_csv = al_sprintf("%s.csv", r->stem),
         *path_npy = al_sprintf("%s.npy", r->stem);
    const int H = r->m[0].sim.H;
    size_t csv_len = 0;
    char *json = report_json(r), *csv = report_csv(r, &csv_len);
    float *npy = malloc(sizeof(float) * (size_t)r->n * H * H);
    int rc = -1;
    al_afile fj = {0}, fc = {0};
    int open_j = 0, open_c = 0;
    if (!json || !csv || !npy || !path_json || !path_csv || !path_npy) {
        al_errf(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < r->n; i++) {
        const double *G = shown_matrix(r, i);
        for (size_t e = 0; e < (size_t)H * H; e++) npy[(size_t)i * H * H + e] = (float)G[e];
    }
    if (al_afile_open(&fj, path_json, err)) goto done;
    open_j = 1;
    if (al_afile_write(&fj, json, strlen(json), err) || al_afile_write(&fj, "\n", 1, err)) goto done;
    if (al_afile_open(&fc, path_csv, err)) goto done;
    open_c = 1;
    if (al_afile_write(&fc, csv, csv_len, err)) goto done;
    const int64_t shape[3] = {r->n, H, H};
    if (al_npy_write_f32(path_npy, npy, 3, shape, err)) goto done;
    if (al_afile_commit(&fj, err)) {
        unlink(path_npy);
        goto done;
    }
    open_j = 0;
    if (al_afile_commit(&fc, err)) {
        unlink(path_npy);
        unlink(path_json);
        goto done;
    }
    open_c = 0;
    rc = 0;
done:
    if (open_j) al_afile_abort(&fj);
    if (open_c) al_afile_abort(&fc);
    free(json);
    free(csv);
    free(npy);
    free(path_json);
    free(path_csv);
    free(path_npy);
    return rc;
}

/* The table on stdout: per model its layers, then "avg" (the per-layer
 * numbers averaged) and "mean" (the numbers of the layer-averaged matrix). */
static void print_table(const heads_run *r) {
    int w = 5;
    for (int i = 0; i < r->n; i++) {
        int k = (int)strlen(r->m[i].title);
        if (k > w) w = k;
    }
    printf("%-*s  %5s  %12s  %12s  %13s\n", w, "model", "layer", "erank uncent", "erank PCA", "mean off-diag");
    for (int i = 0; i < r->n; i++) {
        const al_head_sim *s = &r->m[i].sim;
        for (int l = 0; l < s->L; l++)
            printf("%-*s  %5d  %11.2f%%  %11.2f%%  %13.4f\n", w, r->m[i].title, l, 100.0 * s->layer[l].erank_uncentered,
                   100.0 * s->layer[l].erank_pca, s->layer[l].mean_offdiag);
        printf("%-*s  %5s  %11.2f%%  %11.2f%%  %13.4f\n", w, r->m[i].title, "avg", 100.0 * s->avg.erank_uncentered,
               100.0 * s->avg.erank_pca, s->avg.mean_offdiag);
        printf("%-*s  %5s  %11.2f%%  %11.2f%%  %13.4f\n", w, r->m[i].title, "mean", 100.0 * s->of_mean.erank_uncentered,
               100.0 * s->of_mean.erank_pca, s->of_mean.mean_offdiag);
    }
    printf("erank as %% of the head count (PCA-based at most (H-1)/H); avg: per-layer values averaged; "
           "mean: of the layer-averaged matrix\n");
}

static void free_run(heads_run *r) {
    for (int i = 0; i < r->n; i++) al_head_sim_free(&r->m[i].sim);
    free(r->m);
    free(r->stem);
    free(r->figure);
}

int cmd_heads(int argc, char **argv) {
    const char *cmd = "heads";
    const char *model_help = NULL, *title_help = NULL, *layer = "mean", *out = NULL, *precision = NULL;
    al_precision prec;
    al_arg args[] = {
        {"model", ARG_STRING, &model_help, "model directory; repeat for each model (panels in this order)"},
        {"title", ARG_STRING, &title_help,
         "panel title, one per --model in the same order (default: Standard MHA, LRKV (r=R), GQA, MQA, MLA)"},
        {"layer", ARG_STRING, &layer, "layer index to show, or 'mean' over layers (default: mean)"},
        {"out", ARG_STRING, &out, "figure FILE.png/.svg/.pdf or a stem; also writes STEM.json, STEM.csv, STEM.npy"},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_F32},
    };
    const int n = (int)(sizeof args / sizeof args[0]);
    const char *synopsis = "--model DIR [--model DIR ...] [--title T ...] [--layer L|mean] --out STEM";
    /* --model and --title repeat, which the shared parser does not do: take
     * them out here and hand the rest to it */
    const char *dirs[HEADS_MAX_MODELS], *titles[HEADS_MAX_MODELS];
    int n_dirs = 0, n_titles = 0, rest_n = 1;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return cli_fail(cmd, "out of memory");
    rest[0] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value = NULL;
        int is_model = 0, is_title = 0;
        if (!strcmp(a, "--model") || !strcmp(a, "--title")) {
            is_model = a[2] == 'm';
            is_title = !is_model;
            if (i + 1 >= argc) {
                free(rest);
                return cli_usage(cmd, "flag '%s' needs a value", a);
            }
            value = argv[++i];
        } else if (!strncmp(a, "--model=", 8) || !strncmp(a, "--title=", 8)) {
            is_model = a[2] == 'm';
            is_title = !is_model;
            value = a + 8;
        }
        if (!is_model && !is_title) {
            rest[rest_n++] = argv[i];
            continue;
        }
        int *cnt = is_model ? &n_dirs : &n_titles;
        if (*cnt >= HEADS_MAX_MODELS) {
            free(rest);
            return cli_usage(cmd, "at most %d models", HEADS_MAX_MODELS);
        }
        (is_model ? dirs : titles)[(*cnt)++] = value;
    }
    int rc = cli_parse(cmd, synopsis, args, n, rest_n, rest);
    free(rest);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (n_dirs == 0) return cli_usage(cmd, "--model DIR is required (once per model)");
    if (n_titles && n_titles != n_dirs)
        return cli_usage(cmd, "%d --title for %d --model: give one title per model or none", n_titles, n_dirs);
    if (!out) return cli_usage(cmd, "--out STEM is required");
    if ((rc = cli_precision(cmd, precision, "f32", &prec))) return rc;
    rc = heads_write(cmd, dirs, n_titles ? titles : NULL, n_dirs, layer, out, NULL);
    if (!rc) cli_precision_note(precision, prec); /* after the work: errors stay one line */
    return rc;
}

/* A failure of heads_write: printed (exit code 1, or 2 for a usage error), or into to_caller when the caller
 * reports it (1). */
static int heads_failed(const char *cmd, al_err *to_caller, int usage, const char *msg) {
    if (to_caller) {
        al_errf(to_caller, "%s", msg);
        return 1;
    }
    return usage ? cli_usage(cmd, "%s", msg) : cli_fail(cmd, msg);
}

int heads_write(const char *cmd, const char *const *dirs, const char *const *titles, int n_dirs, const char *layer,
                const char *out, al_err *to_caller) {
    const int n_titles = titles ? n_dirs : 0;
    heads_run run = {0};
    al_err err;
    const size_t n_stem = out_stem_len(out);
    if (!n_stem) {
        al_errf(&err, "--out needs a file name, got '%s'", out);
        return heads_failed(cmd, to_caller, 1, err.msg);
    }
    run.layer = -1;
    if (strcmp(layer, "mean")) {
        long v;
        if (al_parse_int(layer, &v) || v < 0 || v > 1000000) {
            al_errf(&err, "--layer needs a layer index (0, 1, ...) or 'mean', got '%s'", layer);
            return heads_failed(cmd, to_caller, 1, err.msg);
        }
        run.layer = (int)v;
    }
    {
        size_t k = strlen(out);
        int is_fig = k > 4 && (!strcasecmp(out + k - 4, ".png") || !strcasecmp(out + k - 4, ".svg") ||
                               !strcasecmp(out + k - 4, ".pdf"));
        run.stem = strndup(out, n_stem);
        run.figure = !run.stem ? NULL : is_fig ? strdup(out) : al_sprintf("%s.png", run.stem);
    }

    /* one model in memory at a time: load, check, analyse, keep the numbers */
    run.m = calloc((size_t)n_dirs, sizeof *run.m);
    if (!run.m || !run.figure) {
        free_run(&run);
        return heads_failed(cmd, to_caller, 0, "out of memory");
    }
    for (int i = 0; i < n_dirs; i++) {
        heads_model *hm = &run.m[i];
        al_model m;
        if (al_model_load(&m, dirs[i], NULL, &err)) {
            free_run(&run);
            return heads_failed(cmd, to_caller, 0, err.msg);
        }
        hm->dir = dirs[i];
        hm->cfg = m.cfg;
        hm->cache_values = m.attn->cache_values_per_token(&m.cfg);
        if (!n_titles) default_title(&m.cfg, hm->design_title, sizeof hm->design_title);
        hm->title = n_titles ? titles[i] : hm->design_title;
        int bad = 0;
        if (i > 0 && m.cfg.num_heads != run.m[0].cfg.num_heads)
            bad = al_errf(&err, "models have different head counts (%s: %d, %s: %d); the matrices must share one shape",
                          dirs[0], run.m[0].cfg.num_heads, dirs[i], m.cfg.num_heads);
        else if (run.layer >= m.cfg.num_layers)
            bad = al_errf(&err, "layer %d does not exist in %s (layers 0..%d)", run.layer, dirs[i], m.cfg.num_layers - 1);
        else if (al_head_sim_compute(&m, &hm->sim, &err))
            bad = al_err_prefix(&err, "%s", dirs[i]);
        al_model_free(&m);
        if (bad) {
            run.n = i; /* hm->sim is empty on every failure path */
            free_run(&run);
            return heads_failed(cmd, to_caller, 0, err.msg);
        }
        run.n = i + 1;
    }

    if (write_outputs(&run, &err) || draw_heads_figure(&run, &err)) {
        free_run(&run);
        return heads_failed(cmd, to_caller, 0, err.msg);
    }
    print_table(&run);
    if (run.layer < 0)
        printf("wrote %s, %s.json, %s.csv, %s.npy (matrices: mean over layers)\n", run.figure, run.stem, run.stem,
               run.stem);
    else
        printf("wrote %s, %s.json, %s.csv, %s.npy (matrices: layer %d)\n", run.figure, run.stem, run.stem, run.stem,
               run.layer);
    free_run(&run);
    return 0;
}
