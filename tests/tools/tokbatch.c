/*
 * tokbatch.c: al_tokbatch [--loads N] TOKENIZER.json TEXTS.json OUT.json
 *             al_tokbatch --regex < LINES
 * Loads one tokenizer.json (without tokenizer_config.json, as the Hugging Face
 * library's Tokenizer.fromFile does) once and runs it over many texts, for the
 * comparison with the real library (tests/ref/hf_tokenizers): TEXTS.json is
 * an array of strings; OUT.json is
 *   {"load_cpu_s": s, "load_wall_s": s, "vocab_size": V, "results": [
 *     {"ids": [...with the special tokens...], "ids_plain": [...without...],
 *      "decoded": decode(ids), "decoded_skip": decode(ids, skip specials)}
 *     or {"error": "..."} per text]}
 * The load times are the least of N loads (default 1), so that a busy machine
 * disturbs the measurement less. A tokenizer that does not load is
 * {"error": "..."} alone (exit status 0: the caller reports it; 1 only for
 * the tool's own failures).
 *
 * --regex: the Split regex engine alone, for tests/ref/test_tokenizer_regex.py:
 * each input line is PATTERN \t TEXT \t FROM (newlines in TEXT written as
 * \x01), and each output line the search's match "START END" in code points,
 * "-1" for none, or "ERR" if the pattern does not compile.
 */
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/io.h"
#include "tok/regex.h"
#include "tok/tokenizer.h"
#include "tok/unicode.h"

/* Seconds of process CPU time / of the monotonic clock. */
static double cpu_s(void) { return (double)clock() / CLOCKS_PER_SEC; }
static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cJSON *id_array(const int *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

/* Encodes and decodes one text into a result object. */
static cJSON *run_text(const al_tokenizer *t, const char *text, size_t len) {
    cJSON *r = cJSON_CreateObject();
    al_err err = {{0}};
    int *ids = NULL, *plain = NULL, n = 0, np = 0;
    char *dec = NULL, *dec_skip = NULL;
    size_t dl, dsl;
    if (al_tok_encode(t, text, len, 1, &ids, &n, &err) || al_tok_encode(t, text, len, 0, &plain, &np, &err) ||
        al_tok_decode(t, ids, n, 0, &dec, &dl, &err) || al_tok_decode(t, ids, n, 1, &dec_skip, &dsl, &err)) {
        cJSON_AddStringToObject(r, "error", err.msg);
    } else {
        cJSON_AddItemToObject(r, "ids", id_array(ids, n));
        cJSON_AddItemToObject(r, "ids_plain", id_array(plain, np));
        cJSON_AddStringToObject(r, "decoded", dec);
        cJSON_AddStringToObject(r, "decoded_skip", dec_skip);
    }
    free(ids);
    free(plain);
    free(dec);
    free(dec_skip);
    return r;
}

/* --regex: one search per input line. */
static int regex_lines(void) {
    static char line[1 << 16];
    static uint32_t cps[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        char *text = strchr(line, '\t'), *from_s = text ? strchr(text + 1, '\t') : NULL;
        if (!from_s) return 1;
        *text++ = 0, *from_s++ = 0;
        size_t n = 0, len = strlen(text), s, e;
        for (size_t i = 0; i < len && n < sizeof cps / sizeof cps[0];) {
            if (text[i] == 1) text[i] = '\n';
            int l = al_utf8_decode((const unsigned char *)text + i, len - i, &cps[n++]);
            i += (size_t)(l ? l : 1);
        }
        char why[200];
        tok_regex *re = tok_regex_compile(line, strlen(line), 0, why, sizeof why);
        tok_regex_ws *ws = re ? tok_regex_ws_new(re, SIZE_MAX) : NULL;
        if (!ws) printf("ERR\n");
        else if (tok_regex_find(re, ws, cps, n, (size_t)atol(from_s), &s, &e)) printf("%zu %zu\n", s, e);
        else printf("-1\n");
        fflush(stdout);
        tok_regex_ws_free(ws);
        tok_regex_free(re);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--regex")) return regex_lines();
    int loads = 1;
    if (argc == 6 && !strcmp(argv[1], "--loads")) {
        loads = atoi(argv[2]);
        argv += 2, argc -= 2;
    }
    if (argc != 4 || loads < 1) {
        fprintf(stderr, "usage: al_tokbatch [--loads N] TOKENIZER.json TEXTS.json OUT.json\n");
        return 2;
    }
    al_err err = {{0}};
    char *buf;
    size_t len;
    if (al_read_file(argv[2], &buf, &len, &err)) {
        fprintf(stderr, "al_tokbatch: %s\n", err.msg);
        return 1;
    }
    cJSON *texts = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!cJSON_IsArray(texts)) {
        fprintf(stderr, "al_tokbatch: %s: not a JSON array of strings\n", argv[2]);
        return 1;
    }
    cJSON *out = cJSON_CreateObject();
    al_tokenizer *t = NULL;
    double cpu_best = 1e30, wall_best = 1e30;
    for (int k = 0; k < loads; k++) {
        al_tok_free(t);
        double c0 = cpu_s(), w0 = wall_s();
        t = al_tok_load_json(argv[1], NULL, &err);
        double c1 = cpu_s(), w1 = wall_s();
        if (c1 - c0 < cpu_best) cpu_best = c1 - c0;
        if (w1 - w0 < wall_best) wall_best = w1 - w0;
        if (!t) break;
    }
    if (!t) {
        cJSON_AddStringToObject(out, "error", err.msg);
    } else {
        cJSON_AddNumberToObject(out, "load_cpu_s", cpu_best);
        cJSON_AddNumberToObject(out, "load_wall_s", wall_best);
        cJSON_AddNumberToObject(out, "vocab_size", al_tok_vocab_size(t));
        cJSON *results = cJSON_AddArrayToObject(out, "results");
        const cJSON *x;
        cJSON_ArrayForEach(x, texts) {
            const char *s = cJSON_IsString(x) ? x->valuestring : "";
            cJSON_AddItemToArray(results, run_text(t, s, strlen(s)));
        }
        al_tok_free(t);
    }
    char *json = cJSON_PrintUnformatted(out);
    FILE *f = fopen(argv[3], "w");
    int rc = !json || !f || fputs(json, f) < 0;
    if (f && fclose(f)) rc = 1;
    if (rc) fprintf(stderr, "al_tokbatch: cannot write %s\n", argv[3]);
    free(json);
    cJSON_Delete(out);
    cJSON_Delete(texts);
    return rc;
}
