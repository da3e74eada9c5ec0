/*
 * test_tok_rawjson.c: unit tests for src/tok/rawjson.c, which reads
 * model.vocab and model.merges of a tokenizer.json from the raw text: the
 * spans it finds (past strings holding braces and quotes, the first of
 * duplicate keys), the entries it hands over (escapes, surrogate pairs, both
 * merge forms), the forms it leaves to cJSON, and that a tokenizer loads to
 * the same encodings through the fast path and through cJSON alone (a file
 * that forces the fallback).
 */
#include "test.h"
#include "tok/tok_internal.h"
#include "tok/tokenizer.h"

#include <string.h>
#include <unistd.h>

typedef struct {
    char keys[16][16];
    long ids[16];
    int n;
} entries;

static int on_vocab(void *ctx, const char *token, size_t len, long id) {
    entries *e = ctx;
    if (e->n == 16 || len >= 16) return -1;
    memcpy(e->keys[e->n], token, len);
    e->keys[e->n][len] = 0;
    e->ids[e->n++] = id;
    return 0;
}

static int on_merge(void *ctx, const char *a, size_t alen, const char *b, size_t blen) {
    entries *e = ctx;
    if (e->n == 16 || alen + blen + 2 >= 16) return -1;
    snprintf(e->keys[e->n++], 16, "%.*s|%.*s", (int)alen, a, (int)blen, b ? b : "");
    return 0;
}

static void test_readers(void) {
    const char *text =
        "{\"added_tokens\": [{\"content\": \"}\\\"{\", \"id\": 9}], \"x\": {\"model\": 1},\n"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"\\u00e9\\n\": 1, \"\\ud83d\\ude00\": 2, \"q\\\"\\\\\": 3},\n"
        "   \"merges\": [\"a b\", [\"a\", \"\\u00e9\\n\"]], \"vocab\": {\"dup\": 5}},\n"
        " \"model\": {\"vocab\": {}, \"merges\": []}}";
    tok_raw_span v, m;
    CHECK(tok_raw_model_spans(text, strlen(text), &v, &m) == 0);
    entries e = {0};
    CHECK(tok_raw_vocab(v, on_vocab, &e) == 0 && e.n == 4);
    CHECK(!strcmp(e.keys[0], "a") && e.ids[0] == 0);
    CHECK(!strcmp(e.keys[1], "\xC3\xA9\n") && e.ids[1] == 1);
    CHECK(!strcmp(e.keys[2], "\xF0\x9F\x98\x80") && e.ids[2] == 2);
    CHECK(!strcmp(e.keys[3], "q\"\\") && e.ids[3] == 3);
    entries g = {0};
    CHECK(tok_raw_merges(m, on_merge, &g) == 0 && g.n == 2);
    CHECK(!strcmp(g.keys[0], "a b|") && !strcmp(g.keys[1], "a|\xC3\xA9\n"));
    CHECK(tok_raw_count(v) == 4 && tok_raw_count(m) >= 2 && tok_raw_count(m) <= 3); /* an estimate */

    /* forms left to cJSON */
    const char *fallback[] = {"{\"a\": 1.0}", "{\"a\": -1}", "{\"a\": 1e3}", "{\"\\u0000\": 1}", "{\"a\": 01}",
                              "{\"\\ud83d\": 1}", "{\"a\" 1}", "{\"a\": 99999999999}", "{\"a\": 1,}", "{\"a\":"};
    for (size_t i = 0; i < sizeof fallback / sizeof fallback[0]; i++) {
        entries x = {0};
        tok_raw_span s = {fallback[i], fallback[i] + strlen(fallback[i])};
        CHECK_MSG(tok_raw_vocab(s, on_vocab, &x) == TOK_RAW_FALLBACK, "vocab %s", fallback[i]);
    }
    const char *bad_merges[] = {"[1]", "[[\"a\"]]", "[[\"a\", \"b\", \"c\"]]", "[\"a b\",]", "[\"a b\""};
    for (size_t i = 0; i < sizeof bad_merges / sizeof bad_merges[0]; i++) {
        entries x = {0};
        tok_raw_span s = {bad_merges[i], bad_merges[i] + strlen(bad_merges[i])};
        CHECK_MSG(tok_raw_merges(s, on_merge, &x) == TOK_RAW_FALLBACK, "merges %s", bad_merges[i]);
    }
    /* no model, or a model without merges: no spans */
    const char *none[] = {"{\"model\": {\"vocab\": {}}}", "[1]", "{\"model\": 5}", "{\"a\": \"b\""};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        CHECK_MSG(tok_raw_model_spans(none[i], strlen(none[i]), &v, &m) == -1, "spans %s", none[i]);
}

/* A tokenizer from the tokenizer.json text `json` (through a temporary file). */
static al_tokenizer *load_json_text(const char *json, al_err *err) {
    char path[] = "/tmp/al_tok_raw_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) return NULL;
    fputs(json, f);
    fclose(f);
    al_tokenizer *t = al_tok_load_json(path, NULL, err);
    unlink(path);
    return t;
}

/* Encodes text with the tokenizer.json `json`: the number of ids, or -1. */
static int encode_with(const char *json, const char *text, int *ids, int cap) {
    al_err err = {{0}};
    al_tokenizer *t = load_json_text(json, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) return -1;
    int *v, n;
    int rc = al_tok_encode(t, text, strlen(text), 0, &v, &n, &err);
    for (int i = 0; !rc && i < n && i < cap; i++) ids[i] = v[i];
    if (!rc) free(v);
    al_tok_free(t);
    return rc ? -1 : n;
}

static void test_same_tokenizer(void) {
#define TOK_JSON "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u00e9\": 3, " \
                      "\"ab\\u00e9\": %s, \"\\\"\": 5, \"\\\"a\": 6}, \"merges\": [\"a b\", [\"ab\", \"\\u00e9\"], " \
                      "[\"\\\"\", \"a\"]]}}"
    char fast[512], slow[512];
    snprintf(fast, sizeof fast, TOK_JSON, "4");
    snprintf(slow, sizeof slow, TOK_JSON, "4.0"); /* 4.0: the raw reader leaves it to cJSON, which takes it as 4 */
    int a[16], b[16];
    int na = encode_with(fast, "ab\xC3\xA9\"ab", a, 16), nb = encode_with(slow, "ab\xC3\xA9\"ab", b, 16);
    CHECK(na == 3 && nb == 3 && !memcmp(a, b, sizeof(int) * 3));
    CHECK(na == 3 && a[0] == 4 && a[1] == 5 && a[2] == 2); /* abé " ab: the merge of a b comes before " a */
    /* an error inside the tables reads the same either way */
    const char *bad = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}";
    al_err err = {{0}};
    al_tokenizer *t = load_json_text(bad, &err);
    CHECK(!t && strstr(err.msg, "model.merges[0] makes 'ab', which is not in the vocabulary"));
}

int main(void) {
    test_readers();
    test_same_tokenizer();
    return TEST_EXIT();
}
