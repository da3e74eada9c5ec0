/*
 * cmd_attnmap.c: `attnlab attnmap`: attention weights of chosen (layer, head)
 * pairs over a long input, their statistics, and the data files beside the
 * figure: STEM.npy (float32 [pairs, T, T], full resolution) and STEM.json.
 *
 * One forward pass over the input keeps O(T) activations per layer; only the
 * selected heads get a T x T matrix. Inputs longer than the context the model
 * was trained at are allowed (RoPE tables are extended), and said so.
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

int cli_index_list(const char *s, int n_max, int *out, int cap) {
    if (!strcmp(s, "all")) {
        for (int i = 0; i < n_max && i < cap; i++) out[i] = i;
        return n_max < cap ? n_max : cap;
    }
    int n = 0;
    const char *p = s;
    while (*p && n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1000000) return -1;
        out[n++] = (int)v;
        if (*end == ',') end++;
        else if (*end) return -1;
        p = end;
    }
    return n;
}

/* FILE.png -> stem FILE, figure FILE.png; a name without an extension is a
 * stem and gets a PNG */
int stem_of(const char *out, char **stem, char **figure) {
    const char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    const int ext = dot && (!slash || dot > slash);
    *stem = ext ? strndup(out, (size_t)(dot - out)) : strdup(out);
    *figure = ext ? strdup(out) : al_sprintf("%s.png", out);
    if (*stem && *figure) return 0;
    free(*stem);
    free(*figure);
    *stem = *figure = NULL;
    return -1;
}

/* Mean over the nh heads shown of layer row i of their 95 % mass budgets:
 * keys (*keys) and share of the keys a query sees (*frac). */
static void layer_budget(const al_head_stats *st, int i, int nh, double *keys, double *frac) {
    *keys = *frac = 0;
    for (int j = 0; j < nh; j++) {
        *keys += st[i * nh + j].budget95 / nh;
        *frac += st[i * nh + j].budget95_frac / nh;
    }
}

/* The figure's footnote on the 95 % mass budgets: each layer's for up to 4
 * layers, else the smallest and the largest layer's. */
static void budget_footnote(const al_head_stats *st, const int *layers, int nl, int nh, const char *stem, char *buf,
                            size_t cap) {
    size_t off = (size_t)snprintf(buf, cap, "Keys holding 95 %% of the mass (mean over queries and the heads shown):");
    int lo = 0, hi = 0;
    for (int i = 0; i < nl; i++) {
        double b, f, bl, fl, bh, fh;
        layer_budget(st, i, nh, &b, &f);
        layer_budget(st, lo, nh, &bl, &fl);
        layer_budget(st, hi, nh, &bh, &fh);
        lo = f < fl ? i : lo;
        hi = f > fh ? i : hi;
        if (nl <= 4 && off < cap)
            off += (size_t)snprintf(buf + off, cap - off, "%s layer %d %.1f (%.1f %%)", i ? "," : "", layers[i], b, 100 * f);
    }
    if (nl > 4 && off < cap) {
        double bl, fl, bh, fh;
        layer_budget(st, lo, nh, &bl, &fl);
        layer_budget(st, hi, nh, &bh, &fh);
        off += (size_t)snprintf(buf + off, cap - off, " %.1f %% (layer %d) to %.1f %% (layer %d); per layer in %s.json",
                                100 * fl, layers[lo], 100 * fh, layers[hi], stem);
    }
    if (off < cap) snprintf(buf + off, cap - off, ".");
}

/* The grid figure: rows = layers, columns = heads; x = query, y = key as in
 * the MiniKV figure, so each panel shows P^T. Log scale 1e-6..1 (non-positive
 * weights in the background colour) or linear, symmetric if any weight is
 * negative (softmax-free scores). */
static int draw_grid(const char *path, const float *P, int T, const int *layers, int nl, const int *heads, int nh,
                     int log_scale, const char *title, const char *footnote, const float *image, int image_side,
                     al_err *err) {
    float lo = 0, hi = 0;
    for (size_t i = 0; i < (size_t)nl * nh * T * T; i++) {
        lo = P[i] < lo ? P[i] : lo;
        hi = P[i] > hi ? P[i] : hi;
    }
    al_heat_style st = {.cmap = "viridis", .norm = al_norm_log(1e-6, 1.0), .xlabel = "Output (query) position",
                        .ylabel = "Input (key) position"};
    const int grid = image ? (int)lround(sqrt((double)(T - 1))) : 0; /* vision: the CLS row as a patch grid */
    if (image) {
        st.xlabel = "patch column";
        st.ylabel = "patch row";
    }
    if (!log_scale) {
        float m = fabsf(lo) > hi ? fabsf(lo) : hi;
        st.norm = lo < 0 ? al_norm_symmetric(m) : al_norm_linear(0, hi > 0 ? hi : 1);
        if (lo < 0) st.cmap = "RdYlBu_r";
    }
    al_figure *f = al_figure_new(nl, nh, &st, err);
    float *t = malloc(sizeof(float) * (size_t)T * T);
    int rc = f && t ? 0 : -1;
    if (f && !t) al_errf(err, "out of memory");
    if (!rc && title) rc = al_figure_set_title(f, title, err);
    if (!rc && footnote) rc = al_figure_set_footnote_lead(f, footnote, err);
    for (int i = 0; i < nl && !rc; i++)
        for (int j = 0; j < nh && !rc; j++) {
            const float *Pi = P + (size_t)(i * nh + j) * T * T;
            char name[64];
            snprintf(name, sizeof name, "Layer %d Head %d", layers[i], heads[j]);
            if (image) {
                rc = al_figure_panel(f, i * nh + j, name, Pi + 1, grid, grid, err) ||
                     al_figure_panel_background(f, i * nh + j, image, image_side, image_side, err);
                continue;
            }
            for (int q = 0; q < T; q++)
                for (int k = 0; k < T; k++) t[(size_t)k * T + q] = Pi[(size_t)q * T + k];
            rc = al_figure_panel(f, i * nh + j, name, t, T, T, err);
        }
    if (!rc) rc = al_figure_save(f, path, err);
    free(t);
    al_figure_free(f);
    return rc;
}

int cmd_attnmap(int argc, char **argv) {
    const char *cmd = "attnmap";
    const char *model_dir = NULL, *text = NULL, *layers_s = "0", *heads_s = "0", *out = NULL, *scale = "log";
    const char *images_dir = NULL, *precision = NULL;
    al_precision prec;
    long max_tokens = 4096, topk = 10, threads = 0, image = -1;
    al_arg args[] = {
        {"model", ARG_STRING, &model_dir, "model directory"},
        {"text", ARG_STRING, &text, "input text file (encoded by the model's tokenizer), for language models"},
        {"image", ARG_INT, &image, "vision models: test image N of Fashion-MNIST (maps: the CLS row over the patches)"},
        {"images", ARG_STRING, &images_dir, "vision: directory of the IDX files (default Debian's)"},
        {"layer", ARG_STRING, &layers_s, "layers: N, N,M,... or all (rows of the grid)"},
        {"head", ARG_STRING, &heads_s, "heads: N, N,M,... or all (columns of the grid)"},
        {"max-tokens", ARG_INT, &max_tokens, "use at most the first N tokens of the text (bytes for byte models)"},
        {"topk", ARG_INT, &topk, "k of the top-k mass statistic"},
        {"scale", ARG_STRING, &scale, "colour scale of the figure: log (1e-6..1) or linear"},
        {"out", ARG_STRING, &out, "output stem or FILE.png/.svg/.pdf; writes STEM.npy and STEM.json"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_F32},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "--model DIR --text FILE --layer L[,L..] --head H[,H..] --out FILE", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir || !out || (!text) == (image < 0))
        return cli_usage(cmd, "--model, --out and one of --text FILE or --image N are required");
    if (strcmp(scale, "log") && strcmp(scale, "linear")) return cli_usage(cmd, "--scale must be log or linear");
    if (max_tokens < 2 || topk < 1) return cli_usage(cmd, "--max-tokens must be at least 2 and --topk positive");
    if ((rc = cli_precision(cmd, precision, "f32", &prec))) return rc;
    if (threads > 0) al_set_threads((int)threads);

    al_err err;
    al_config cfg;
    char *path = NULL, *stem = NULL, *figure = NULL;
    if (al_config_load_dir(&cfg, model_dir, NULL, &err)) return cli_fail(cmd, err.msg);
    int layers[64], heads[64];
    int nl = cli_index_list(layers_s, cfg.num_layers, layers, 64), nh = cli_index_list(heads_s, cfg.num_heads, heads, 64);
    if (nl <= 0 || nh <= 0) return cli_usage(cmd, "--layer and --head take N, a comma list or 'all'");
    for (int i = 0; i < nl; i++)
        if (layers[i] >= cfg.num_layers)
            return cli_failf(cmd, "layer %d out of range (the model has layers 0..%d)", layers[i], cfg.num_layers - 1);
    for (int i = 0; i < nh; i++)
        if (heads[i] >= cfg.num_heads)
            return cli_failf(cmd, "head %d out of range (the model has heads 0..%d)", heads[i], cfg.num_heads - 1);
    int T, trained, *tok = NULL, *tok_ids = NULL, vision = cfg.task == AL_TASK_VISION, label = -1;
    al_tokenizer *tk = NULL;
    char **labels = NULL;
    float pixels[64 * 64];
    al_model m;
    al_acts a;
    int npairs = nl * nh, failed = 0;
    float *P = NULL;
    al_head_stats *st = NULL;
    if (vision != (image >= 0))
        return cli_failf(cmd, "%s is a %s model: give it %s", model_dir, vision ? "vision" : "language",
                         vision ? "--image N" : "--text FILE");
    if (vision && cfg.image_size * cfg.image_size > (int)(sizeof pixels / sizeof pixels[0]))
        return cli_fail(cmd, "images larger than 64 x 64 are not supported by attnmap");
    if (vision) {
        rc = al_attnmap_prepare_image(model_dir, images_dir, (int)image, &m, &a, pixels, &label, &err);
        T = a.T;
        trained = T;
    } else {
        tk = cli_tokenizer(model_dir, cfg.vocab_size, &err);
        if (!tk || read_tokens(tk, text, (int)max_tokens, &tok, &T, &err)) {
            al_tok_free(tk);
            return cli_fail(cmd, err.msg);
        }
        rc = al_attnmap_prepare_layers(model_dir, tok, T, layers, nl, &m, &a, &trained, &err);
        /* a tokenizer.json's tokens are named in STEM.json (a byte model's are its input bytes) */
        if (!rc && !al_tok_is_bytes(tk) && !(labels = cli_token_labels(tk, tok, T))) rc = al_errf(&err, "out of memory");
        if (!rc) tok_ids = tok;
        else free(tok);
        al_tok_free(tk);
    }
    if (rc) return cli_fail(cmd, err.msg);
    P = malloc(sizeof(float) * (size_t)npairs * T * T);
    st = calloc((size_t)npairs, sizeof *st);
    if (!P || !st) {
        failed = cli_fail(cmd, "out of memory for the attention maps");
        goto done;
    }

    if (vision)
        printf("test image %ld (class %d): CLS + %d patches\n", image, label, T - 1);
    else
        printf("%d tokens of %s%s\n", T, text, T > trained ? " (longer than the context the model was trained at)" : "");
    printf("%-6s %-5s %10s %9s %10s %9s %9s\n", "layer", "head", "sink", "entropy", "distance", "top-k", "row sum");
    for (int i = 0; i < nl && !failed; i++)
        for (int j = 0; j < nh && !failed; j++) {
            int idx = i * nh + j;
            float *Pi = P + (size_t)idx * T * T;
            if (al_attnmap_weights(&m, &a, layers[i], heads[j], Pi, &err) ||
                al_head_stats_of(Pi, T, (int)topk, vision, &st[idx], &err)) {
                failed = cli_fail(cmd, err.msg);
                break;
            }
            printf("%-6d %-5d %10.4f %9.3f %10.2f %9.4f %9.4f\n", layers[i], heads[j], st[idx].sink_mass,
                   st[idx].entropy, st[idx].mean_distance, st[idx].topk_mass, st[idx].row_sum);
        }
    if (!failed && (stem_of(out, &stem, &figure) || !(path = al_sprintf("%s.npy", stem))))
        failed = cli_fail(cmd, "out of memory");
    if (!failed) {
        int64_t shape[3] = {npairs, T, T};
        if (al_npy_write_f32(path, P, 3, shape, &err)) failed = cli_fail(cmd, err.msg);
    }
    if (!failed) {
        /* every number shown, with where it came from; a tokenizer.json's tokens too */
        char *tokens_json = NULL;
        if (labels) {
            const unsigned long mark = al_json_mark();
            cJSON *o = cJSON_CreateObject();
            al_json_add(o, "token_ids", cJSON_CreateIntArray(tok_ids, T));
            al_json_add(o, "pieces", cJSON_CreateStringArray((const char *const *)labels, T));
            tokens_json = al_json_print(o, 0, mark);
            cJSON_Delete(o);
            if (!tokens_json) {
                failed = cli_fail(cmd, "out of memory");
                goto done;
            }
        }
        /* room for every field: the fixed text, 512 bytes a pair, and the strings */
        size_t cap = 4096 + (size_t)npairs * 600 + (size_t)nl * 128 + (tokens_json ? strlen(tokens_json) : 0) + strlen(model_dir) +
                     (vision ? 0 : strlen(text)) + strlen(scale) + strlen(figure) + strlen(stem),
               off = 0;
        char *j = malloc(cap);
        if (!j) {
            free(tokens_json);
            failed = cli_fail(cmd, "out of memory");
            goto done;
        }
        off += (size_t)snprintf(j + off, cap - off,
                                "{\"command\":\"attnmap\",\"model\":\"%s\",\"text\":\"%s\",\"image\":%ld,\"tokens\":%d,"
                                "\"trained_context\":%d,\"attention\":\"%s\",\"score\":\"%s\",\"scale\":\"%s\","
                                "\"figure\":\"%s\",\"npy\":\"%s.npy\",\"npy_shape\":[%d,%d,%d],\"npy_layout\":\"[pair, query, key]\","
                                "\"topk\":%ld,\"precision\":\"%s\",\"pairs\":[",
                                model_dir, vision ? "" : text, image, T, trained, al_attn_name(cfg.attention),
                                al_score_name(cfg.score),
                                scale, figure, stem, npairs, T, T, topk, al_precision_name(prec));
        for (int i = 0; i < nl; i++)
            for (int jj = 0; jj < nh; jj++) {
                const al_head_stats *h = &st[i * nh + jj];
                off += (size_t)snprintf(j + off, cap - off,
                                        "%s{\"layer\":%d,\"head\":%d,\"title\":\"Layer %d Head %d\",\"sink_mass\":%.6g,"
                                        "\"entropy\":%.6g,\"mean_distance\":%.6g,\"topk_mass\":%.6g,\"row_sum\":%.6g,"
                                        "\"min\":%.6g,\"max\":%.6g,\"budget95\":%.6g,\"budget95_frac\":%.6g}",
                                        i + jj ? "," : "", layers[i], heads[jj], layers[i], heads[jj], h->sink_mass,
                                        h->entropy, h->mean_distance, h->topk_mass, h->row_sum, h->min_weight,
                                        h->max_weight, h->budget95, h->budget95_frac);
            }
        /* per layer: the heads' budgets averaged (the statistic behind pyramid KV budgets) */
        off += (size_t)snprintf(j + off, cap - off, "],\"budget_share\":%g,\"layer_budgets\":[", AL_MASS_BUDGET_SHARE);
        for (int i = 0; i < nl; i++) {
            double b, f;
            layer_budget(st, i, nh, &b, &f);
            off += (size_t)snprintf(j + off, cap - off, "%s{\"layer\":%d,\"budget95\":%.6g,\"budget95_frac\":%.6g}",
                                    i ? "," : "", layers[i], b, f);
        }
        if (tokens_json) /* {"token_ids":[...],"pieces":[...]} -> ,"token_ids":[...],"pieces":[...] */
            off += (size_t)snprintf(j + off, cap - off, "],%.*s}\n", (int)strlen(tokens_json) - 2, tokens_json + 1);
        else
            off += (size_t)snprintf(j + off, cap - off, "]}\n");
        free(path);
        if (!(path = al_sprintf("%s.json", stem))) failed = cli_fail(cmd, "out of memory");
        else if (al_write_file_atomic(path, j, off, &err)) failed = cli_fail(cmd, err.msg);
        free(j);
        free(tokens_json);
    }
    if (!failed) {
        char title[4400];
        const char *base = strrchr(model_dir, '/');
        base = base && base[1] ? base + 1 : model_dir;
        al_strfmt(title, sizeof title, "%s: %s attention, %s scores, %d tokens", base, al_attn_name(cfg.attention),
                  al_score_name(cfg.score), T);
        if (vision) al_strfmt(title, sizeof title, "%s: CLS attention over the patches, test image %ld", base, image);
        char foot[768];
        budget_footnote(st, layers, nl, nh, stem, foot, sizeof foot);
        if (draw_grid(figure, P, T, layers, nl, heads, nh, !strcmp(scale, "log"), title, foot, vision ? pixels : NULL,
                      cfg.image_size, &err))
            failed = cli_fail(cmd, err.msg);
        else
            printf("wrote %s, %s.npy, %s.json\n", figure, stem, stem);
    }
done:
    free(st);
    free(path);
    free(stem);
    free(figure);
    free(P);
    free(tok_ids);
    cli_free_labels(labels, T);
    al_acts_free(&a);
    al_model_free(&m);
    if (!failed) cli_precision_note(precision, prec); /* after the work: errors stay one line */
    return failed ? 1 : 0;
}
