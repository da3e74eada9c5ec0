/*
 * cmd_compare.c: `attnlab compare`: the same head of several models on the
 * same input, side by side, each panel titled by its model's score function
 * ("Attention with (1/14)x^3", "Attention with softmax") with its own colour
 * bar and range (signed weights get a symmetric range): seed 004's figure.
 * Writes the figure, STEM.npy (float32 [models, T, T], rows = queries) and
 * STEM.json (every number shown, and where it came from).
 */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attnmap.h"
#include "cli.h"
#include "io/io.h"
#include "plot/figure.h"

/* The text's tokens for every model compared: each model's own tokenizer
 * must give the same tokens (the panels share one input). */
static int compare_tokens(const char *const *dirs, int n, const char *text, int max_tokens, int **tok, int *T,
                          al_err *err) {
    *tok = NULL;
    for (int i = 0; i < n; i++) {
        int *ids, len;
        al_tokenizer *tk = cli_tokenizer(dirs[i], 0, err);
        int rc = !tk || read_tokens(tk, text, max_tokens, &ids, &len, err);
        al_tok_free(tk);
        if (rc) {
            free(*tok);
            return -1;
        }
        if (i == 0) {
            *tok = ids, *T = len;
            continue;
        }
        int same = len == *T && !memcmp(ids, *tok, sizeof(int) * (size_t)len);
        free(ids);
        if (!same) {
            free(*tok);
            return al_errf(err, "%s and %s tokenize %s differently (the panels need the same tokens)", dirs[0],
                           dirs[i], text);
        }
    }
    return 0;
}

int cmd_compare(int argc, char **argv) {
    const char *cmd = "compare";
    al_strlist models = {0}, titles = {0};
    const char *text = NULL, *out = NULL, *images_dir = NULL, *precision = NULL;
    al_precision prec;
    long layer = -1, head = 0, max_tokens = 256, threads = 0, image = -1;
    int overlay = 0;
    al_arg args[] = {
        {"model", ARG_LIST, &models, "model directory; repeat for each model (panels in this order)"},
        {"title", ARG_LIST, &titles, "panel title per --model (default: from the score function)"},
        {"text", ARG_STRING, &text, "input text file (encoded by the models' tokenizer), for language models"},
        {"image", ARG_INT, &image, "vision models: test image N (panels: the CLS row over the 14 x 14 patches)"},
        {"images", ARG_STRING, &images_dir, "vision: directory of the IDX files (default Debian's)"},
        {"overlay", ARG_FLAG, &overlay, "vision: draw the maps over the input image"},
        {"layer", ARG_INT, &layer, "layer (default: the last)"},
        {"head", ARG_INT, &head, "head"},
        {"max-tokens", ARG_INT, &max_tokens, "use at most the first N tokens of the text (bytes for byte models)"},
        {"out", ARG_STRING, &out, "figure FILE.png/.svg/.pdf (or a stem); also writes STEM.npy ([models, T, T]) and STEM.json"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_F32},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "--model A --model B [...] --text FILE [--layer L --head H] --out FILE", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (models.n < 1 || !out || (!text) == (image < 0))
        return cli_usage(cmd, "--model (one or more), --out and one of --text FILE or --image N are required");
    if (titles.n && titles.n != models.n) return cli_usage(cmd, "give one --title per --model (or none)");
    if (models.n > 8) return cli_usage(cmd, "at most 8 models side by side");
    if (max_tokens < 2 || head < 0) return cli_usage(cmd, "--max-tokens must be at least 2 and --head not negative");
    if ((rc = cli_precision(cmd, precision, "f32", &prec))) return rc;
    if (threads > 0) al_set_threads((int)threads);

    al_err err;
    int T = 0, *tok = NULL, failed = 0, vision = image >= 0, side = 0, label = -1;
    float pixels[64 * 64];
    if (!vision && compare_tokens(models.items, models.n, text, (int)max_tokens, &tok, &T, &err))
        return cli_fail(cmd, err.msg);
    if (vision) { /* T = 1 + patches, the same for every model compared */
        al_config c;
        if (al_config_load_dir(&c, models.items[0], NULL, &err)) return cli_fail(cmd, err.msg);
        if (c.task != AL_TASK_VISION || c.image_size > 64)
            return cli_failf(cmd, "%s is not a vision model (--image needs one)", models.items[0]);
        side = c.image_size;
        T = 1 + (c.image_size / c.patch_size) * (c.image_size / c.patch_size);
    }
    const int nm = models.n;
    float *P = malloc(sizeof(float) * (size_t)nm * T * T);
    char (*names)[160] = calloc((size_t)nm, sizeof *names);
    int *layers = calloc((size_t)nm, sizeof *layers);
    al_head_stats *st = calloc((size_t)nm, sizeof *st);
    const unsigned long mark = al_json_mark();
    cJSON *root = cJSON_CreateObject(), *panels = cJSON_AddArrayToObject(root, "panels");
    if (!P || !names || !layers || !st) failed = cli_fail(cmd, "out of memory");
    for (int i = 0; i < nm && !failed; i++) {
        al_model m;
        al_acts a;
        int trained;
        int prc = 0, want = (int)layer;
        if (!vision && layer < 0) { /* the last layer: only it is kept by the forward */
            al_config c;
            prc = al_config_load_dir(&c, models.items[i], NULL, &err);
            want = prc ? 0 : c.num_layers - 1;
        }
        if (!prc)
            prc = vision ? al_attnmap_prepare_image(models.items[i], images_dir, (int)image, &m, &a, pixels, &label, &err)
                         : al_attnmap_prepare_layers(models.items[i], tok, T, &want, 1, &m, &a, &trained, &err);
        if (!prc && vision) trained = T;
        if (!prc && vision && a.T != T) {
            const int patches = a.T - 1; /* before al_acts_free clears a */
            al_acts_free(&a);
            al_model_free(&m);
            prc = al_errf(&err, "%s has %d patches, the first model %d", models.items[i], patches, T - 1);
        }
        if (prc) {
            failed = cli_fail(cmd, err.msg);
            break;
        }
        layers[i] = layer < 0 ? m.cfg.num_layers - 1 : (int)layer;
        if (al_attnmap_weights(&m, &a, layers[i], (int)head, P + (size_t)i * T * T, &err) ||
            al_head_stats_of(P + (size_t)i * T * T, T, 10, vision, &st[i], &err)) {
            failed = cli_failf(cmd, "%s: %s", models.items[i], err.msg);
        } else {
            if (titles.n) al_strfmt(names[i], sizeof names[i], "%s", titles.items[i]);
            else al_score_title(&m.cfg, names[i], sizeof names[i]);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", models.items[i]);
            cJSON_AddStringToObject(o, "title", names[i]);
            cJSON_AddStringToObject(o, "attention", al_attn_name(m.cfg.attention));
            cJSON_AddStringToObject(o, "score", al_score_name(m.cfg.score));
            cJSON_AddNumberToObject(o, "layer", layers[i]);
            cJSON_AddNumberToObject(o, "head", (double)head);
            cJSON_AddNumberToObject(o, "trained_context", trained);
            cJSON_AddNumberToObject(o, "min", st[i].min_weight);
            cJSON_AddNumberToObject(o, "max", st[i].max_weight);
            cJSON_AddNumberToObject(o, "row_sum", st[i].row_sum);
            cJSON_AddNumberToObject(o, "sink_mass", st[i].sink_mass);
            cJSON_AddNumberToObject(o, "entropy", st[i].entropy);
            cJSON_AddNumberToObject(o, "mean_distance", st[i].mean_distance);
            al_json_push(panels, o);
            printf("%-40s %-28s layer %d head %ld: weights %.4g..%.4g, row sum %.4f\n", models.items[i], names[i],
                   layers[i], head, st[i].min_weight, st[i].max_weight, st[i].row_sum);
        }
        al_acts_free(&a);
        al_model_free(&m);
    }
    char *stem = NULL, *figure = NULL, *npy = NULL, *json = NULL;
    if (!failed && (stem_of(out, &stem, &figure) || !(npy = al_sprintf("%s.npy", stem)) ||
                    !(json = al_sprintf("%s.json", stem))))
        failed = cli_fail(cmd, "out of memory");
    if (!failed) {
        int64_t shape[3] = {nm, T, T};
        if (al_npy_write_f32(npy, P, 3, shape, &err)) failed = cli_fail(cmd, err.msg);
    }
    if (!failed) {
        cJSON_AddStringToObject(root, "command", "compare");
        cJSON_AddStringToObject(root, "precision", al_precision_name(prec));
        if (vision) {
            cJSON_AddNumberToObject(root, "image", (double)image);
            cJSON_AddNumberToObject(root, "label", label);
        } else {
            cJSON_AddStringToObject(root, "text", text);
        }
        cJSON_AddNumberToObject(root, "tokens", T);
        cJSON_AddStringToObject(root, "figure", figure);
        cJSON_AddStringToObject(root, "npy", npy);
        cJSON_AddStringToObject(root, "npy_layout", "[model, query, key]");
        char *js = al_json_print(root, 1, mark);
        if (!js || al_write_file_atomic(json, js, strlen(js), &err)) failed = cli_fail(cmd, js ? err.msg : "out of memory");
        free(js);
    }
    if (!failed) {
        /* panels: x = query, y = key (P^T), each with its own range */
        al_heat_style base = {.cmap = "viridis", .xlabel = "Output (query) position", .ylabel = "Input (key) position"};
        al_figure *f = al_figure_new(1, nm, &base, &err);
        float *t = malloc(sizeof(float) * (size_t)T * T);
        int frc = f && t ? 0 : -1;
        if (f && !t) al_errf(&err, "out of memory");
        const int grid = vision ? (int)lround(sqrt((double)(T - 1))) : 0;
        for (int i = 0; i < nm && !frc; i++) {
            const float *Pi = P + (size_t)i * T * T;
            double lo = st[i].min_weight, hi = st[i].max_weight;
            if (vision) { /* the CLS row over the patch grid: its own range */
                lo = hi = Pi[1];
                for (int k = 1; k < T; k++) {
                    lo = Pi[k] < lo ? Pi[k] : lo;
                    hi = Pi[k] > hi ? Pi[k] : hi;
                }
                memcpy(t, Pi + 1, sizeof(float) * (size_t)(T - 1));
            } else {
                for (int q = 0; q < T; q++)
                    for (int k = 0; k < T; k++) t[(size_t)k * T + q] = Pi[(size_t)q * T + k];
            }
            al_heat_style s = base;
            if (vision) {
                s.xlabel = NULL;
                s.ylabel = NULL;
            }
            double m = fabs(lo) > hi ? fabs(lo) : hi;
            s.norm = lo < 0 ? al_norm_symmetric(m > 0 ? m : 1) : al_norm_linear(vision ? lo : 0, hi > lo ? hi : lo + 1);
            if (lo < 0) s.cmap = "RdYlBu_r";
            char sub[96];
            if (vision) snprintf(sub, sizeof sub, "CLS row, layer %d, head %ld", layers[i], head);
            else snprintf(sub, sizeof sub, "layer %d, head %ld", layers[i], head);
            int rows = vision ? grid : T;
            frc = al_figure_panel(f, i, names[i], t, rows, rows, &err) || al_figure_panel_style(f, i, &s, &err) ||
                  al_figure_panel_subtitle(f, i, sub, &err);
            if (!frc && vision && overlay) frc = al_figure_panel_background(f, i, pixels, side, side, &err);
        }
        if (!frc) frc = al_figure_save(f, figure, &err);
        if (frc) failed = cli_fail(cmd, err.msg);
        else printf("wrote %s, %s.npy, %s.json\n", figure, stem, stem);
        free(t);
        al_figure_free(f);
    }
    cJSON_Delete(root);
    free(stem);
    free(figure);
    free(npy);
    free(json);
    free(st);
    free(layers);
    free(names);
    free(P);
    free(tok);
    if (!failed) cli_precision_note(precision, prec); /* after the work: errors stay one line */
    return failed ? 1 : 0;
}
