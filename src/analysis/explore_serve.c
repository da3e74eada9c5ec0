/*
 * explore_serve.c: the explorer's server routes (explore_serve.h).
 */
#include "explore_serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "explore_html.h"
#include "explore_maps.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int al_explore_server_init(al_explore_server *s, const al_model *m, const al_acts *a, int topk, int factor,
                           int thumb_factor, char *page, size_t page_len, al_err *err) {
    memset(s, 0, sizeof *s);
    s->m = m;
    s->a = a;
    s->T = a->T;
    s->L = m->cfg.num_layers;
    s->H = m->cfg.num_heads;
    s->causal = !m->cfg.bidirectional;
    s->topk = topk;
    s->factor = factor;
    s->thumb_factor = thumb_factor;
    s->page = page;
    s->page_len = page_len;
    s->P_layer = s->P_head = -1;
    s->P = malloc(sizeof(float) * (size_t)s->T * s->T);
    s->rowbuf = malloc(sizeof(float) * (size_t)s->T);
    s->codes = malloc(al_explore_map_cells(s->T, 1, s->causal)); /* enough for any factor */
    s->layer_reply = calloc((size_t)s->L, sizeof *s->layer_reply);
    if (!s->P || !s->rowbuf || !s->codes || !s->layer_reply) {
        al_explore_server_free(s);
        return al_errf(err, "out of memory for the server's buffers (%d tokens)", s->T);
    }
    return 0;
}

void al_explore_server_free(al_explore_server *s) {
    free(s->page);
    free(s->P);
    free(s->rowbuf);
    free(s->codes);
    if (s->layer_reply)
        for (int l = 0; l < s->L; l++) free(s->layer_reply[l]);
    free(s->layer_reply);
    memset(s, 0, sizeof *s);
}

/* Query parameter `name` as an integer in [0, n), digits only; -1 if absent or bad. */
static int param(const al_http_request *req, const char *name, int n) {
    const char *v = al_http_query(req, name);
    if (!v || !*v || strlen(v) > 9) return -1;
    long x = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        x = x * 10 + (*p - '0');
    }
    return x < n ? (int)x : -1;
}

/* Makes s->P the weights of (layer, head); 0 or -1. */
static int compute_head(al_explore_server *s, int layer, int head) {
    if (s->P_layer == layer && s->P_head == head) return 0;
    al_err err;
    if (al_attnmap_weights(s->m, s->a, layer, head, s->P, &err)) return -1;
    s->P_layer = layer;
    s->P_head = head;
    return 0;
}

/* The map line of s->P at factor f, malloc'd (NULL when out of memory). */
static char *map_line(al_explore_server *s, int f, size_t *len) {
    float scale;
    int sig;
    size_t cells = al_explore_map_cells(s->T, f, s->causal);
    char *line = malloc(al_explore_map_line_cap(s->T, f, s->causal) + 1);
    if (!line) return NULL;
    al_explore_quantise(s->P, s->T, f, s->causal, s->rowbuf, s->codes, &scale, &sig);
    *len = al_explore_map_line(s->codes, cells, scale, sig, f, line);
    line[*len] = 0;
    return line;
}

/* The /api/layer reply of `layer`: every head's statistics and thumbnail. */
static char *layer_reply(al_explore_server *s, int layer) {
    const int H = s->H;
    al_head_stats *st = calloc((size_t)H, sizeof *st);
    char **thumbs = calloc((size_t)H, sizeof *thumbs), *stats = NULL, *out = NULL;
    size_t total = 256, len = 0;
    al_err err;
    for (int h = 0; st && thumbs && h < H; h++) {
        if (compute_head(s, layer, h) || al_head_stats_of(s->P, s->T, s->topk, !s->causal, &st[h], &err) ||
            !(thumbs[h] = map_line(s, s->thumb_factor, &len)))
            goto done;
        total += len + 4;
    }
    if (!st || !thumbs || !(stats = al_explore_stats_json(st, H))) goto done;
    total += strlen(stats);
    if (!(out = malloc(total))) goto done;
    size_t o = (size_t)snprintf(out, total, "{\"layer\":%d,\"stats\":%s,\"thumbs\":[", layer, stats);
    for (int h = 0; h < H; h++) o += (size_t)snprintf(out + o, total - o, "%s\"%s\"", h ? "," : "", thumbs[h]);
    snprintf(out + o, total - o, "]}");
done:
    if (thumbs)
        for (int h = 0; h < H; h++) free(thumbs[h]);
    free(thumbs);
    free(stats);
    free(st);
    return out;
}

/* Hands a malloc'd body over to the reply (NULL: out of memory, -1). */
static int give(al_http_reply *r, const char *type, char *body, size_t len) {
    if (!body) return -1;
    r->status = 200;
    r->type = type;
    r->body = body;
    r->len = len;
    return 0;
}

int al_explore_server_handle(void *ctx, const al_http_request *req, al_http_reply *r) {
    al_explore_server *s = ctx;
    const char *p = req->path;
    if (!strcmp(p, "/") || !strcmp(p, "/index.html")) {
        char *page = malloc(s->page_len);
        if (page) memcpy(page, s->page, s->page_len);
        return give(r, "text/html; charset=utf-8", page, s->page_len);
    }
    const int layer = param(req, "layer", s->L), head = param(req, "head", s->H);
    if (!strcmp(p, "/api/map")) {
        if (layer < 0 || head < 0) return al_http_text(r, 400, NULL, "map: layer and head out of range\n");
        double t0 = now_s();
        if (compute_head(s, layer, head)) return -1;
        size_t len = 0; /* map_line leaves it unset when it fails */
        char *line = map_line(s, s->factor, &len);
        s->last_map_s = now_s() - t0;
        if (s->first_map_s == 0) s->first_map_s = s->last_map_s;
        return give(r, "text/plain; charset=us-ascii", line, len);
    }
    if (!strcmp(p, "/api/row")) {
        const int q = param(req, "q", s->T);
        if (layer < 0 || head < 0 || q < 0) return al_http_text(r, 400, NULL, "row: layer, head or q out of range\n");
        if (compute_head(s, layer, head)) return -1;
        const int n = s->causal ? q + 1 : s->T;
        unsigned char *raw = malloc(4 * (size_t)n);
        char *b64 = malloc(((size_t)n * 4 + 2) / 3 * 4 + 1);
        if (!raw || !b64) {
            free(raw);
            free(b64);
            return -1;
        }
        al_f32_to_le(s->P + (size_t)q * s->T, (size_t)n, raw);
        size_t len = al_base64_encode(raw, 4 * (size_t)n, b64);
        free(raw);
        return give(r, "text/plain; charset=us-ascii", b64, len);
    }
    if (!strcmp(p, "/api/layer")) {
        if (layer < 0) return al_http_text(r, 400, NULL, "layer out of range\n");
        if (!s->layer_reply[layer]) {
            double t0 = now_s();
            if (!(s->layer_reply[layer] = layer_reply(s, layer))) return -1;
            s->last_layer_s = now_s() - t0;
        }
        size_t len = strlen(s->layer_reply[layer]);
        char *copy = malloc(len + 1);
        if (copy) memcpy(copy, s->layer_reply[layer], len + 1);
        return give(r, "application/json", copy, len);
    }
    return al_http_text(r, 404, NULL, "no such route\n");
}
