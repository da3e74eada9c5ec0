/*
 * http.c (fuzz harness): the explorer server's request handling,
 * al_http_answer in src/io/http_server.c and the routes of
 * src/analysis/explore_serve.c, without sockets.
 *
 * Input: the bytes a client sends. As the poll loop does, at most
 * AL_HTTP_MAX_REQUEST + 1 of them are kept, and they are answered only once
 * they hold the blank line that ends a request head. The routes serve a tiny
 * random model's forward over 24 tokens, made once per process.
 *
 * Asserts, whatever the bytes:
 *   - the status is one the server sends, and a body's length is its own;
 *   - the routes are reached only by a GET or HEAD whose bytes hold the
 *     server's Host and token (http_server.h's rules), and every reply to a
 *     HEAD request comes from one that starts "HEAD ";
 *   - what the routes answer with 200 has the shape its route promises: the
 *     page; a map line; a row of q + 1 float32 weights in base64 whose
 *     values are the head's (al_attnmap_weights, computed here again); a
 *     layer's JSON object.
 */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "analysis/attnmap.h"
#include "analysis/explore_serve.h"
#include "io/http_server.h"
#include "model/config.h"
#include "model/model.h"

enum { FUZZ_T = 24 };

static const char host[] = "127.0.0.1:8080", token[] = "0123456789abcdef0123456789abcdef";
static al_config cfg;
static al_model model;
static al_acts acts;
static al_explore_server routes;
static int reached; /* routes called for this input */
static char reached_path[AL_HTTP_MAX_REQUEST + 2];
static int reached_q = -1, reached_layer = -1, reached_head = -1;

/* A query value as the routes read it: digits only, else -1. */
static int digits(const char *v) {
    if (!v || !*v || strlen(v) > 9) return -1;
    int x = 0;
    for (; *v; v++) {
        if (*v < '0' || *v > '9') return -1;
        x = x * 10 + (*v - '0');
    }
    return x;
}

/* The al_http_handler the server gets: notes the call, then the routes answer. */
static int routes_noted(void *ctx, const al_http_request *req, al_http_reply *reply) {
    reached++;
    snprintf(reached_path, sizeof reached_path, "%s", req->path);
    reached_layer = digits(al_http_query(req, "layer"));
    reached_head = digits(al_http_query(req, "head"));
    reached_q = digits(al_http_query(req, "q"));
    return al_explore_server_handle(ctx, req, reply);
}

/* The model, its forward and the routes' server, once per process. */
static void setup(void) {
    static int done;
    if (done) return;
    done = 1;
    al_err err;
    al_config_default(&cfg);
    cfg.hidden_size = 16;
    cfg.intermediate_size = 24;
    cfg.num_layers = 2;
    cfg.num_heads = 2;
    cfg.num_kv_heads = 2;
    cfg.head_dim = 8;
    cfg.max_position = FUZZ_T;
    cfg.attention = AL_ATTN_MHA;
    if (al_model_create(&model, &cfg, &err) || al_acts_create(&acts, &model, 1, FUZZ_T, &err)) {
        fprintf(stderr, "fuzz http: %s\n", err.msg);
        abort();
    }
    al_model_init_weights(&model, 7);
    int tokens[FUZZ_T];
    for (int i = 0; i < FUZZ_T; i++) tokens[i] = (i * 37 + 11) % 256;
    al_model_forward(&model, &acts, tokens, NULL);
    static const char html[] = "<!doctype html><title>explore</title>";
    char *page = malloc(sizeof html);
    if (!page) abort();
    memcpy(page, html, sizeof html);
    if (al_explore_server_init(&routes, &model, &acts, 5, 2, 4, page, sizeof html - 1, &err)) {
        fprintf(stderr, "fuzz http: %s\n", err.msg);
        abort();
    }
}

/* Decodes standard base64 (with padding) into out; the bytes written, or -1. */
static long unbase64(const char *s, size_t n, unsigned char *out) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n % 4) return -1;
    long len = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            const char *p = s[i + j] == '=' ? NULL : strchr(abc, s[i + j]);
            if (!p && (s[i + j] != '=' || i + 4 != n || j < 2)) return -1;
            pad += !p;
            v = v << 6 | (p ? (unsigned)(p - abc) : 0);
        }
        out[len++] = (unsigned char)(v >> 16);
        if (pad < 2) out[len++] = (unsigned char)(v >> 8);
        if (pad < 1) out[len++] = (unsigned char)v;
    }
    return len;
}

/* A 200 from the routes: the shape its path promises. */
static void check_route(const al_http_reply *r) {
    if (!strcmp(reached_path, "/") || !strcmp(reached_path, "/index.html")) {
        if (r->len != routes.page_len || memcmp(r->body, routes.page, r->len)) abort();
    } else if (!strcmp(reached_path, "/api/row")) {
        if (reached_layer < 0 || reached_layer >= cfg.num_layers || reached_head < 0 || reached_head >= cfg.num_heads ||
            reached_q < 0 || reached_q >= FUZZ_T)
            abort(); /* a 200 for parameters out of range */
        unsigned char raw[4 * FUZZ_T + 3];
        if (r->len > sizeof raw / 3 * 4) abort(); /* longer than any row: and it would not fit raw */
        long n = unbase64(r->body, r->len, raw);
        if (n != 4 * (reached_q + 1)) abort(); /* causal: keys 0..q */
        static float P[FUZZ_T * FUZZ_T];
        al_err err;
        if (al_attnmap_weights(&model, &acts, reached_layer, reached_head, P, &err)) abort();
        float row[FUZZ_T];
        for (long i = 0; i < n / 4; i++) { /* little-endian float32 */
            uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                         (uint32_t)raw[4 * i + 3] << 24;
            memcpy(&row[i], &u, 4);
        }
        if (memcmp(row, P + (size_t)reached_q * FUZZ_T, (size_t)n)) abort();
    } else if (!strcmp(reached_path, "/api/map")) {
        if (r->len == 0 || reached_layer >= cfg.num_layers || reached_head >= cfg.num_heads) abort();
    } else if (!strcmp(reached_path, "/api/layer")) {
        cJSON *j = cJSON_ParseWithLength(r->body, r->len);
        const cJSON *layer = cJSON_GetObjectItemCaseSensitive(j, "layer");
        const cJSON *stats = cJSON_GetObjectItemCaseSensitive(j, "stats");
        if (!cJSON_IsNumber(layer) || layer->valueint != reached_layer || cJSON_GetArraySize(stats) != cfg.num_heads)
            abort();
        cJSON_Delete(j);
    } else {
        abort(); /* a 200 for a path that is no route */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    static char req[AL_HTTP_MAX_REQUEST + 2], sent[AL_HTTP_MAX_REQUEST + 2];
    size_t n = size < AL_HTTP_MAX_REQUEST + 1 ? size : AL_HTTP_MAX_REQUEST + 1;
    memcpy(req, data, n);
    req[n] = 0;
    if (!strstr(req, "\r\n\r\n")) return 0; /* the loop waits for more, then refuses (431) or drops it */
    memcpy(sent, req, n + 1);

    al_http_server s = {.handler = routes_noted, .ctx = &routes};
    snprintf(s.host, sizeof s.host, "%s", host);
    snprintf(s.token, sizeof s.token, "%s", token);
    al_http_reply r;
    int head_only = -1;
    reached = 0;
    if (al_http_answer(&s, req, &r, &head_only)) abort(); /* only out of memory, which a fuzzer does not cause */
    static const int statuses[] = {200, 204, 400, 403, 404, 405, 413, 500};
    int known = 0;
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++) known |= r.status == statuses[i];
    if (!known || (r.len && !r.body) || (head_only != 0 && head_only != 1)) abort();
    if (head_only && strncmp(sent, "HEAD ", 5)) abort();
    if (reached != (int)s.served || reached > 1) abort();
    if (reached) {
        if ((strncmp(sent, "GET ", 4) && strncmp(sent, "HEAD ", 5)) || !strstr(sent, host) || !strstr(sent, token))
            abort(); /* the routes reached without the method, Host or token they need */
        if (r.status == 200) check_route(&r);
    } else if (r.status == 200) {
        abort(); /* only the routes answer 200 */
    }
    free(r.body);
    return 0;
}
