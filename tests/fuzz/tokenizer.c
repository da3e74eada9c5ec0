/*
 * tokenizer.c (fuzz harness): Hugging Face tokenizers, src/tok/ (the
 * tokenizer.json loader with its normalizers, pre-tokenizers, Split patterns
 * compiled by the regex engine of src/tok/regex.c, decoders and
 * post-processor; tokenizer_config.json), and encoding and decoding.
 *
 * Input: three parts split at FUZZ_SEP (fuzz.h): tokenizer.json,
 * tokenizer_config.json (none when the part is empty) and a text. A tokenizer
 * that loads encodes the text with and without special tokens; every id must
 * lie in the vocabulary, and decoding, the byte count, pieces and labels of
 * those ids must succeed.
 */
#include "fuzz.h"

#include "tok/tokenizer.h"

/* Encodes text, checks the ids, decodes them back both ways. */
static void round_trip(const al_tokenizer *t, const char *text, size_t len, int add_special) {
    int *ids = NULL, n = 0;
    al_err err;
    if (al_tok_encode(t, text, len, add_special, &ids, &n, &err)) {
        if (!err.msg[0] || strchr(err.msg, '\n')) abort();
        return;
    }
    const int vocab = al_tok_vocab_size(t);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= vocab) abort();
        const char *p;
        size_t pl;
        char label[64];
        if (al_tok_piece(t, ids[i], &p, &pl) || al_tok_piece_label(t, ids[i], label, sizeof label) < 0) abort();
        if (strlen(label) >= sizeof label) abort();
    }
    for (int skip = 0; skip < 2; skip++) {
        char *back = NULL;
        size_t blen = 0;
        if (al_tok_decode(t, ids, n, skip, &back, &blen, &err)) {
            fprintf(stderr, "ids of an encoding do not decode: %s\n", err.msg);
            abort();
        }
        if (strlen(back) > blen) abort(); /* NUL-terminated at blen */
        free(back);
    }
    size_t bytes = 0;
    if (al_tok_text_bytes(t, ids, n, &bytes, &err)) abort();
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[3];
    fuzz_split(data, size, part, 3);
    const char *json = fuzz_file(0, "tokenizer.json", part[0].p, part[0].n);
    const char *cfg = part[1].n ? fuzz_file(1, "tokenizer_config.json", part[1].p, part[1].n) : NULL;
    al_err err;
    al_tokenizer *t = al_tok_load_json(json, cfg, &err);
    if (!t) {
        if (!err.msg[0] || strchr(err.msg, '\n')) abort(); /* a refusal is one line */
        return 0;
    }
    const int vocab = al_tok_vocab_size(t);
    if (vocab <= 0 || al_tok_bos(t) >= vocab || al_tok_eos(t) >= vocab) abort();
    round_trip(t, (const char *)part[2].p, part[2].n, 0);
    round_trip(t, (const char *)part[2].p, part[2].n, 1);
    const char *p;
    size_t pl;
    if (al_tok_piece(t, vocab, &p, &pl) != -1 || al_tok_piece(t, -1, &p, &pl) != -1) abort();
    al_tok_free(t);
    return 0;
}
