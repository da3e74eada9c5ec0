/*
 * api.c: the public API of include/attnlab.h over the internal model code.
 */
#include <stdlib.h>
#include <string.h>

#include "attnlab.h"
#include "generate.h"

struct al_handle {
    al_model m;
};

static void copy_err(const al_err *e, char *buf, size_t len) {
    if (buf && len) {
        strncpy(buf, e->msg, len - 1);
        buf[len - 1] = 0;
    }
}

al_handle *al_open(const char *dir, char *errbuf, size_t errlen) {
    al_handle *h = calloc(1, sizeof *h);
    al_err err = {{0}};
    if (!h) {
        al_errf(&err, "out of memory");
    } else if (al_model_load(&h->m, dir, NULL, &err) == 0) {
        if (h->m.cfg.task == AL_TASK_LM) return h;
        al_errf(&err, "%s is a vision model; this API serves language models", dir);
        al_model_free(&h->m);
    }
    copy_err(&err, errbuf, errlen);
    free(h);
    return NULL;
}

void al_close(al_handle *h) {
    if (!h) return;
    al_model_free(&h->m);
    free(h);
}

int al_vocab_size(const al_handle *h) { return h->m.cfg.vocab_size; }
int al_max_context(const al_handle *h) { return h->m.cfg.max_position; }

size_t al_param_count(const al_handle *h) {
    size_t n = 0;
    for (int i = 0; i < h->m.n_params; i++) n += h->m.params[i].numel;
    return n;
}

size_t al_kv_bytes_per_token(const al_handle *h) {
    return h->m.attn->cache_values_per_token(&h->m.cfg) * sizeof(float) * (size_t)h->m.cfg.num_layers;
}

int al_logits(al_handle *h, const uint8_t *bytes, int n, float *logits, char *errbuf, size_t errlen) {
    al_err err = {{0}};
    al_acts a;
    if (n <= 0) al_errf(&err, "no input bytes");
    if (n <= 0 || al_acts_create_infer(&a, &h->m, 1, n, NULL, 0, &err)) {
        copy_err(&err, errbuf, errlen);
        return -1;
    }
    int *tok = malloc(sizeof(int) * (size_t)n);
    if (!tok) {
        al_acts_free(&a);
        al_errf(&err, "out of memory");
        copy_err(&err, errbuf, errlen);
        return -1;
    }
    for (int i = 0; i < n; i++) tok[i] = bytes[i];
    for (int i = 0; i < n; i++)
        if (tok[i] >= h->m.cfg.vocab_size) {
            al_errf(&err, "byte %d is not a token of this model's %d-token vocabulary", tok[i], h->m.cfg.vocab_size);
            copy_err(&err, errbuf, errlen);
            free(tok);
            al_acts_free(&a);
            return -1;
        }
    al_model_forward(&h->m, &a, tok, NULL);
    memcpy(logits, a.logits, sizeof(float) * (size_t)n * h->m.cfg.vocab_size);
    free(tok);
    al_acts_free(&a);
    return 0;
}

int al_generate(al_handle *h, const uint8_t *prompt, int prompt_len, int n, float temperature, int top_k, float top_p,
                uint64_t seed, uint8_t *out, char *errbuf, size_t errlen) {
    al_sampler s = {temperature, top_k, top_p};
    al_err err = {{0}};
    if (h->m.cfg.vocab_size != 256) { /* sampled ids would not fit the byte buffer */
        al_errf(&err, "al_generate produces bytes; this model's vocabulary has %d tokens", h->m.cfg.vocab_size);
        copy_err(&err, errbuf, errlen);
        return -1;
    }
    int made = al_generate_bytes(&h->m, prompt, prompt_len, n, &s, seed, out, NULL, NULL, NULL, &err);
    if (made < 0) copy_err(&err, errbuf, errlen);
    return made;
}
