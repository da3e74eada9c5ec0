/*
 * explore_html.c: writes the explorer page of explore_html.h: the page's
 * fixed text (src/analysis/explore/, compiled in as explore_page.h's pieces)
 * with one base64 line of float32 weights per head and a JSON data object in
 * the places its markers leave for them.
 *
 * Data that comes from outside (paths, titles) only ever enters the page
 * inside the JSON object, with '<', '>' and '&' escaped so that nothing in it
 * can close the script element it sits in.
 */
#include "explore_html.h"

#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnlab.h"
#include "../io/io.h"
#include "../plot/colormap.h"
#include "explore_maps.h"
#include "explore_page.h"

/* Values stored per head: the lower triangle with the diagonal for causal
 * models (the rest is masked and exactly 0), else everything. */
static size_t values_per_head(int T, int causal) {
    return causal ? (size_t)T * (size_t)(T + 1) / 2 : (size_t)T * (size_t)T;
}

size_t al_explore_bytes_per_head(int T, int causal) {
    return (values_per_head(T, causal) * 4 + 2) / 3 * 4 + 1;
}

static int write_str(al_afile *f, const char *s, al_err *err) { return al_afile_write(f, s, strlen(s), err); }

/* JSON text with '<', '>' and '&' as \u escapes (malloc'd; json is freed).
 * They can only occur inside JSON strings, where the escapes mean the same
 * characters, and the result can no longer end the surrounding <script>
 * element. NULL when json is NULL or memory runs out. */
static char *escape_for_script(char *json) {
    if (!json) return NULL;
    size_t n = 0;
    for (const char *p = json; *p; p++) n += *p == '<' || *p == '>' || *p == '&' ? 6 : 1;
    char *out = malloc(n + 1), *o = out;
    for (const char *p = json; out && *p; p++) {
        const char *esc = *p == '<' ? "\\u003c" : *p == '>' ? "\\u003e" : *p == '&' ? "\\u0026" : NULL;
        if (esc) {
            memcpy(o, esc, 6);
            o += 6;
        } else {
            *o++ = *p;
        }
    }
    if (out) *o = 0;
    free(json);
    return out;
}

void al_explore_abort(al_explore_writer *w) {
    if (w->open) al_afile_abort(&w->f);
    w->open = 0;
    free(w->raw);
    free(w->b64);
    free(w->codes);
    free(w->rowbuf);
    free(w->qline);
    w->raw = NULL;
    w->b64 = NULL;
    w->codes = NULL;
    w->rowbuf = NULL;
    w->qline = NULL;
}

int al_explore_open(al_explore_writer *w, const char *path, int T, int causal, al_err *err) {
    memset(w, 0, sizeof *w);
    if (T < 1) return al_errf(err, "explore: no tokens");
    w->T = T;
    w->causal = causal ? 1 : 0;
    w->values_per_head = values_per_head(T, w->causal);
    w->b64_len = al_explore_bytes_per_head(T, w->causal);
    w->raw = malloc(w->values_per_head * 4);
    w->b64 = malloc(w->b64_len);
    if (!w->raw || !w->b64) {
        al_explore_abort(w);
        return al_errf(err, "out of memory for a page of %d tokens", T);
    }
    if (al_afile_open(&w->f, path, err)) {
        al_explore_abort(w);
        return -1;
    }
    w->open = 1;
    if (write_str(&w->f, al_explore_page_head, err)) {
        al_explore_abort(w);
        return -1;
    }
    return 0;
}

int al_explore_add_head(al_explore_writer *w, const float *P, al_err *err) {
    if (!w->open) return al_errf(err, "explore: the page is not open");
    const int T = w->T;
    unsigned char *o = w->raw;
    /* little-endian float32 whatever the host's byte order */
    for (int q = 0; q < T; q++) {
        int n = w->causal ? q + 1 : T;
        al_f32_to_le(P + (size_t)q * T, (size_t)n, o);
        o += 4 * (size_t)n;
    }
    size_t n = al_base64_encode(w->raw, w->values_per_head * 4, w->b64);
    w->b64[n++] = '\n';
    if (al_afile_write(&w->f, w->b64, n, err)) {
        al_explore_abort(w);
        return -1;
    }
    w->heads_written++;
    return 0;
}

int al_explore_add_head_quantised(al_explore_writer *w, const float *P, int f, al_err *err) {
    if (!w->open) return al_errf(err, "explore: the page is not open");
    if (f < 1 || (w->qf && f != w->qf)) return al_errf(err, "explore: display factor %d (the page's is %d)", f, w->qf);
    const int T = w->T, D = al_explore_display_side(T, f);
    if (!w->qf) {
        w->codes = malloc(al_explore_map_cells(T, f, w->causal));
        w->rowbuf = malloc(sizeof(float) * (size_t)D);
        w->qline = malloc(al_explore_map_line_cap(T, f, w->causal) + 2);
        if (!w->codes || !w->rowbuf || !w->qline) {
            al_explore_abort(w);
            return al_errf(err, "out of memory for a page of %d tokens", T);
        }
        w->qf = f;
    }
    float scale;
    int is_signed;
    al_explore_quantise(P, T, f, w->causal, w->rowbuf, w->codes, &scale, &is_signed);
    size_t n = al_explore_map_line(w->codes, al_explore_map_cells(T, f, w->causal), scale, is_signed, f, w->qline);
    w->qline[n++] = '\n';
    if (al_afile_write(&w->f, w->qline, n, err)) {
        al_explore_abort(w);
        return -1;
    }
    w->heads_written++;
    return 0;
}

/* A colour map's 256 byte triples as 1536 hex digits (lut8, the bytes the
 * figures use). NULL when the map is unknown or memory runs out. */
static char *lut_hex(const char *name) {
    const al_cmap *c = al_cmap_get(name);
    char *s = c ? malloc(AL_CMAP_N * 6 + 1) : NULL;
    if (!s) return NULL;
    for (int i = 0; i < AL_CMAP_N; i++)
        snprintf(s + 6 * i, 7, "%02x%02x%02x", c->lut8[i][0], c->lut8[i][1], c->lut8[i][2]);
    return s;
}

/* One head's statistics as the JSON object the script reads. */
static cJSON *stats_object(const al_head_stats *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "sink_mass", s->sink_mass);
    cJSON_AddNumberToObject(o, "entropy", s->entropy);
    cJSON_AddNumberToObject(o, "mean_distance", s->mean_distance);
    cJSON_AddNumberToObject(o, "topk_mass", s->topk_mass);
    cJSON_AddNumberToObject(o, "row_sum", s->row_sum);
    cJSON_AddNumberToObject(o, "min", s->min_weight);
    cJSON_AddNumberToObject(o, "max", s->max_weight);
    cJSON_AddNumberToObject(o, "budget95", s->budget95);
    cJSON_AddNumberToObject(o, "budget95_frac", s->budget95_frac);
    return o;
}

char *al_explore_stats_json(const al_head_stats *stats, int heads) {
    const unsigned long mark = al_json_mark();
    cJSON *a = cJSON_CreateArray();
    for (int h = 0; a && h < heads; h++) al_json_push(a, stats_object(&stats[h]));
    char *text = al_json_print(a, 0, mark);
    cJSON_Delete(a);
    return text;
}

/* The data object the script reads, escaped for its script element (field names are its contract with the
 * script, src/analysis/explore/explore.js; docs/explore.md lists them). NULL
 * when out of memory. */
static char *info_json(const al_explore_info *in) {
    const unsigned long mark = al_json_mark();
    cJSON *root = cJSON_CreateObject();
    char *vir = lut_hex("viridis"), *rdy = lut_hex("RdYlBu_r"), *text = NULL;
    if (!root || !vir || !rdy) goto done;
    cJSON_AddNumberToObject(root, "format", 1);
    cJSON_AddStringToObject(root, "generator", "attnlab " AL_VERSION);
    cJSON_AddStringToObject(root, "title", in->title);
    cJSON_AddStringToObject(root, "model", in->model);
    cJSON_AddStringToObject(root, "text", in->text);
    cJSON_AddStringToObject(root, "attention", in->attention);
    cJSON_AddStringToObject(root, "score", in->score);
    cJSON_AddStringToObject(root, "score_title", in->score_title);
    cJSON_AddNumberToObject(root, "layers", in->layers);
    cJSON_AddNumberToObject(root, "heads", in->heads);
    cJSON_AddNumberToObject(root, "tokens", in->tokens);
    cJSON_AddNumberToObject(root, "trained_context", in->trained_context);
    cJSON_AddBoolToObject(root, "causal", in->causal);
    cJSON_AddNumberToObject(root, "topk", in->layers * in->heads > 0 && in->stats ? in->stats[0].topk : in->topk);
    cJSON_AddStringToObject(root, "weights", in->causal ? "float32le base64, one line per head (layer-major), "
                                                          "row q holds keys 0..q"
                                                        : "float32le base64, one line per head (layer-major), "
                                                          "row q holds keys 0..T-1");
    if (in->token_labels) { /* a tokenizer.json's tokens: their ids and printable pieces */
        al_json_add(root, "token_ids", cJSON_CreateIntArray(in->token_bytes, in->tokens));
        al_json_add(root, "pieces", cJSON_CreateStringArray(in->token_labels, in->tokens));
    } else {
        al_json_add(root, "bytes", cJSON_CreateIntArray(in->token_bytes, in->tokens));
    }
    if (in->stats) {
        cJSON *stats = cJSON_AddArrayToObject(root, "stats");
        for (int l = 0; l < in->layers; l++) {
            cJSON *layer = cJSON_CreateArray();
            for (int h = 0; h < in->heads; h++) al_json_push(layer, stats_object(&in->stats[l * in->heads + h]));
            al_json_push(stats, layer);
        }
    }
    cJSON_AddNumberToObject(root, "budget_share", AL_MASS_BUDGET_SHARE);
    cJSON_AddNumberToObject(root, "display_factor", in->display_factor);
    if (in->serve) {
        cJSON *sv = cJSON_AddObjectToObject(root, "serve");
        cJSON_AddNumberToObject(sv, "display_factor", in->display_factor);
        cJSON_AddNumberToObject(sv, "thumb_factor", in->thumb_factor);
    }
    cJSON *sim = cJSON_AddArrayToObject(root, "similarity");
    const int H = in->sim->H;
    for (int l = 0; l < in->sim->L; l++) {
        cJSON *o = cJSON_CreateObject(), *rows = cJSON_CreateArray();
        const double *G = in->sim->sim + (size_t)l * H * H;
        for (int i = 0; i < H; i++) al_json_push(rows, cJSON_CreateDoubleArray(G + (size_t)i * H, H));
        al_json_add(o, "matrix", rows);
        cJSON_AddNumberToObject(o, "erank_uncentered", in->sim->layer[l].erank_uncentered);
        cJSON_AddNumberToObject(o, "erank_pca", in->sim->layer[l].erank_pca);
        cJSON_AddNumberToObject(o, "mean_offdiag", in->sim->layer[l].mean_offdiag);
        al_json_push(sim, o);
    }
    cJSON *maps = cJSON_AddObjectToObject(root, "colormaps");
    cJSON_AddStringToObject(maps, "viridis", vir);
    cJSON_AddStringToObject(maps, "RdYlBu_r", rdy);
    text = escape_for_script(al_json_print(root, 0, mark));
done:
    cJSON_Delete(root);
    free(vir);
    free(rdy);
    return text;
}

int al_explore_finish(al_explore_writer *w, const al_explore_info *info, al_err *err) {
    if (!w->open) return al_errf(err, "explore: the page is not open");
    int rc = -1;
    char *json = NULL;
    if (info->layers * info->heads != w->heads_written || info->tokens != w->T || !info->sim ||
        info->sim->L != info->layers || info->sim->H != info->heads) {
        al_errf(err, "explore: %d heads of %d tokens written for %d layers x %d heads of %d tokens", w->heads_written,
                w->T, info->layers, info->heads, info->tokens);
        goto done;
    }
    json = info_json(info);
    if (!json) {
        al_errf(err, "out of memory");
        goto done;
    }
    if (write_str(&w->f, al_explore_page_after_weights, err) || write_str(&w->f, json, err) ||
        write_str(&w->f, "\n", err) || write_str(&w->f, al_explore_page_after_data, err) ||
        write_str(&w->f, al_explore_page_after_serve, err))
        goto done;
    if (al_afile_commit(&w->f, err)) goto done;
    w->open = 0;
    rc = 0;
done:
    free(json);
    al_explore_abort(w);
    return rc;
}

/* Appends text to the growing buffer (*buf, *len, *cap); -1 when out of memory. */
static int append(char **buf, size_t *len, size_t *cap, const char *text, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, text, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

char *al_explore_page_text(const al_explore_info *info, size_t *len) {
    char *json = info_json(info), *page = NULL;
    size_t cap = 0;
    *len = 0;
    if (!json) return NULL;
    int rc = append(&page, len, &cap, al_explore_page_head, strlen(al_explore_page_head)) ||
             append(&page, len, &cap, al_explore_page_after_weights, strlen(al_explore_page_after_weights));
    rc = rc || append(&page, len, &cap, json, strlen(json)) || append(&page, len, &cap, "\n", 1) ||
         append(&page, len, &cap, al_explore_page_after_data, strlen(al_explore_page_after_data)) ||
         append(&page, len, &cap, al_explore_serve_script_head, strlen(al_explore_serve_script_head)) ||
         append(&page, len, &cap, al_explore_page_after_serve, strlen(al_explore_page_after_serve));
    free(json);
    if (rc) {
        free(page);
        return NULL;
    }
    return page;
}
