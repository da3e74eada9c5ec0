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
#include "../plot/colormap.h"
#include "explore_page.h"

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard base64 (RFC 4648, with padding) of n bytes into out, which holds
 * 4 * ceil(n / 3) characters; returns that count. */
static size_t b64_encode(const unsigned char *in, size_t n, char *out) {
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
    return o;
}

/* Values stored per head: the lower triangle with the diagonal for causal
 * models (the rest is masked and exactly 0), else everything. */
static size_t values_per_head(int T, int causal) {
    return causal ? (size_t)T * (size_t)(T + 1) / 2 : (size_t)T * (size_t)T;
}

size_t al_explore_bytes_per_head(int T, int causal) {
    return (values_per_head(T, causal) * 4 + 2) / 3 * 4 + 1;
}

static int write_str(al_afile *f, const char *s, al_err *err) { return al_afile_write(f, s, strlen(s), err); }

/* Writes JSON text with '<', '>' and '&' as \u escapes. They can only occur
 * inside JSON strings, where the escapes mean the same characters, and the
 * result can no longer end the surrounding <script> element. */
static int write_json_escaped(al_afile *f, const char *json, al_err *err) {
    const char *run = json;
    for (const char *p = json; *p; p++) {
        const char *esc = *p == '<' ? "\\u003c" : *p == '>' ? "\\u003e" : *p == '&' ? "\\u0026" : NULL;
        if (!esc) continue;
        if (al_afile_write(f, run, (size_t)(p - run), err) || write_str(f, esc, err)) return -1;
        run = p + 1;
    }
    return write_str(f, run, err);
}

void al_explore_abort(al_explore_writer *w) {
    if (w->open) al_afile_abort(&w->f);
    w->open = 0;
    free(w->raw);
    free(w->b64);
    w->raw = NULL;
    w->b64 = NULL;
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
        const float *row = P + (size_t)q * T;
        int n = w->causal ? q + 1 : T;
        for (int k = 0; k < n; k++) {
            uint32_t u;
            memcpy(&u, &row[k], 4);
            o[0] = (unsigned char)u;
            o[1] = (unsigned char)(u >> 8);
            o[2] = (unsigned char)(u >> 16);
            o[3] = (unsigned char)(u >> 24);
            o += 4;
        }
    }
    size_t n = b64_encode(w->raw, w->values_per_head * 4, w->b64);
    w->b64[n++] = '\n';
    if (al_afile_write(&w->f, w->b64, n, err)) {
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

/* The data object the script reads (field names are its contract with the
 * script, src/analysis/explore/explore.js; docs/explore.md lists them). NULL
 * when out of memory. */
static char *info_json(const al_explore_info *in) {
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
    cJSON_AddNumberToObject(root, "topk", in->layers * in->heads > 0 ? in->stats[0].topk : 0);
    cJSON_AddStringToObject(root, "weights", in->causal ? "float32le base64, one line per head (layer-major), "
                                                          "row q holds keys 0..q"
                                                        : "float32le base64, one line per head (layer-major), "
                                                          "row q holds keys 0..T-1");
    if (in->token_labels) { /* a tokenizer.json's tokens: their ids and printable pieces */
        cJSON_AddItemToObject(root, "token_ids", cJSON_CreateIntArray(in->token_bytes, in->tokens));
        cJSON_AddItemToObject(root, "pieces", cJSON_CreateStringArray(in->token_labels, in->tokens));
    } else {
        cJSON_AddItemToObject(root, "bytes", cJSON_CreateIntArray(in->token_bytes, in->tokens));
    }
    cJSON *stats = cJSON_AddArrayToObject(root, "stats");
    for (int l = 0; l < in->layers; l++) {
        cJSON *layer = cJSON_CreateArray();
        for (int h = 0; h < in->heads; h++) {
            const al_head_stats *s = &in->stats[l * in->heads + h];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "sink_mass", s->sink_mass);
            cJSON_AddNumberToObject(o, "entropy", s->entropy);
            cJSON_AddNumberToObject(o, "mean_distance", s->mean_distance);
            cJSON_AddNumberToObject(o, "topk_mass", s->topk_mass);
            cJSON_AddNumberToObject(o, "row_sum", s->row_sum);
            cJSON_AddNumberToObject(o, "min", s->min_weight);
            cJSON_AddNumberToObject(o, "max", s->max_weight);
            cJSON_AddItemToArray(layer, o);
        }
        cJSON_AddItemToArray(stats, layer);
    }
    cJSON *sim = cJSON_AddArrayToObject(root, "similarity");
    const int H = in->sim->H;
    for (int l = 0; l < in->sim->L; l++) {
        cJSON *o = cJSON_CreateObject(), *rows = cJSON_CreateArray();
        const double *G = in->sim->sim + (size_t)l * H * H;
        for (int i = 0; i < H; i++) cJSON_AddItemToArray(rows, cJSON_CreateDoubleArray(G + (size_t)i * H, H));
        cJSON_AddItemToObject(o, "matrix", rows);
        cJSON_AddNumberToObject(o, "erank_uncentered", in->sim->layer[l].erank_uncentered);
        cJSON_AddNumberToObject(o, "erank_pca", in->sim->layer[l].erank_pca);
        cJSON_AddNumberToObject(o, "mean_offdiag", in->sim->layer[l].mean_offdiag);
        cJSON_AddItemToArray(sim, o);
    }
    cJSON *maps = cJSON_AddObjectToObject(root, "colormaps");
    cJSON_AddStringToObject(maps, "viridis", vir);
    cJSON_AddStringToObject(maps, "RdYlBu_r", rdy);
    text = cJSON_PrintUnformatted(root);
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
    if (write_str(&w->f, al_explore_page_after_weights, err) || write_json_escaped(&w->f, json, err) ||
        write_str(&w->f, "\n", err) || write_str(&w->f, al_explore_page_after_data, err))
        goto done;
    if (al_afile_commit(&w->f, err)) goto done;
    w->open = 0;
    rc = 0;
done:
    free(json);
    al_explore_abort(w);
    return rc;
}
