/*
 * text_input.c: how the commands turn text into a model's tokens: the model
 * directory's tokenizer (src/tok: tokenizer.json, or the byte tokenizer of
 * attnlab's own models), checked against the model's vocabulary, and a text
 * file read, encoded (with the BOS the tokenizer adds) and cut to a number of
 * tokens. With the byte tokenizer a token is a byte, as before tokenizers.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "io/io.h"

/* config.json's vocab_size in dir, 0 when there is no config.json, -1 when it
 * has none that reads as a positive integer; -2 when out of memory. */
static int config_vocab(const char *dir) {
    char *path = al_sprintf("%s/config.json", dir), *text;
    size_t len;
    struct stat st;
    al_err err;
    if (!path) return -2;
    int rc = stat(path, &st) ? 0 : al_read_file(path, &text, &len, &err) ? (al_err_is_oom(&err) ? -2 : -1) : 1;
    free(path);
    if (rc < 1) return rc;
    int oom;
    cJSON *j = al_json_parse(text, len, &oom);
    free(text);
    if (oom) return -2;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vocab_size");
    int V = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble < 1e9 ? (int)v->valuedouble : -1;
    cJSON_Delete(j);
    return V;
}

al_tokenizer *cli_tokenizer(const char *model_dir, int model_vocab, al_err *err) {
    al_tokenizer *t = al_tok_open_dir(model_dir, err);
    if (!t) return NULL;
    int V = model_vocab > 0 ? model_vocab : config_vocab(model_dir);
    if (V == -2) {
        al_tok_free(t);
        al_errf(err, "out of memory");
        return NULL;
    }
    if (al_tok_is_bytes(t)) {
        if (V == 0) {
            al_errf(err, "%s has neither tokenizer.json nor config.json (not a model directory)", model_dir);
            return NULL;
        }
        if (V > 0 && V != 256) {
            al_errf(err, "%s has no tokenizer.json, and its model has %d token ids (only byte models, 256, work "
                    "without one)", model_dir, V);
            return NULL;
        }
        return t;
    }
    if (V > 0 && al_tok_vocab_size(t) > V) {
        al_errf(err, "%s: tokenizer.json has %d token ids but the model only %d", model_dir, al_tok_vocab_size(t), V);
        al_tok_free(t);
        return NULL;
    }
    return t;
}

int cli_encode(const al_tokenizer *t, const char *text, size_t len, int max_tokens, int **tokens, int *T,
               al_err *err) {
    int n;
    if (al_tok_encode(t, text, len, 1, tokens, &n, err)) return -1;
    if (n < 2) {
        free(*tokens);
        *tokens = NULL;
        return al_errf(err, "the text needs at least 2 %s (it has %d)", al_tok_is_bytes(t) ? "bytes" : "tokens", n);
    }
    *T = max_tokens > 0 && n > max_tokens ? max_tokens : n;
    return 0;
}

int read_tokens(const al_tokenizer *t, const char *path, int max_tokens, int **tokens, int *T, al_err *err) {
    char *text;
    size_t len;
    if (al_read_file(path, &text, &len, err)) return -1;
    /* the byte tokenizer needs no more than the bytes it keeps */
    size_t use = al_tok_is_bytes(t) && max_tokens > 0 && len > (size_t)max_tokens ? (size_t)max_tokens : len;
    int rc = cli_encode(t, text, use, max_tokens, tokens, T, err);
    free(text);
    return rc ? al_err_prefix(err, "%s", path) : 0; /* al_read_file names the path itself */
}

char **cli_token_labels(const al_tokenizer *t, const int *tokens, int T) {
    char **labels = calloc((size_t)T + 1, sizeof *labels);
    if (!labels) return NULL;
    for (int i = 0; i < T; i++) {
        char buf[256];
        al_tok_piece_label(t, tokens[i], buf, sizeof buf);
        if (!(labels[i] = strdup(buf))) {
            cli_free_labels(labels, T);
            return NULL;
        }
    }
    return labels;
}

void cli_free_labels(char **labels, int T) {
    if (!labels) return;
    for (int i = 0; i < T; i++) free(labels[i]);
    free(labels);
}
