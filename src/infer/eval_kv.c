/*
 * eval_kv.c: eval through the decode path (eval_kv.h).
 */
#include <math.h>
#include <stdlib.h>

#include "eval_kv.h"

/* Scores one decoded token: the cross-entropy of logits[V] at target. */
static double token_nats(const float *logits, int V, int target) {
    double mx = logits[0], z = 0;
    for (int v = 1; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < V; v++) z += exp(logits[v] - mx);
    return mx + log(z) - logits[target];
}

/* Without the recall of attention mass. */
int al_eval_decode(const al_model *m, const int *ids, size_t n, int T, size_t max_predictions, const al_kv_opts *o,
                   double *layer_err, al_eval_kv_result *r, al_err *err) {
    return al_eval_decode_recall(m, ids, n, T, max_predictions, o, layer_err, NULL, r, err);
}

/* Each window from an empty cache, token by token; the bytes held at each
 * window's end summed (held bytes over all predictions = per token). */
int al_eval_decode_recall(const al_model *m, const int *ids, size_t n, int T, size_t max_predictions,
                          const al_kv_opts *o, double *layer_err, double *layer_recall, al_eval_kv_result *r,
                          al_err *err) {
    static const al_kv_opts none = {{0}, {0}};
    if (!o) o = &none;
    al_kv_opts eo = *o;
    if (eo.e.method == AL_KVE_SNAPKV && eo.e.prompt == 0) eo.e.prompt = T / 2 > 0 ? T / 2 : 1;
    size_t n_pred = n > 0 ? n - 1 : 0;
    if (max_predictions && n_pred > max_predictions) n_pred = max_predictions;
    if (n_pred == 0) return al_errf(err, "nothing to evaluate (fewer than 2 tokens)");
    if (T < 1) return al_errf(err, "the window must hold at least one token, got %d", T);
    const int V = m->cfg.vocab_size;
    for (size_t i = 0; i <= n_pred; i++)
        if (ids[i] < 0 || ids[i] >= V) return al_errf(err, "token %d at %zu is outside the %d-token vocabulary", ids[i], i, V);
    float *logits = malloc(sizeof(float) * (size_t)V);
    if (!logits) return al_errf(err, "out of memory");
    al_decoder dec = {0};
    const double t0 = al_now();
    int rc = al_decoder_create_opts(&dec, m, T, AL_DT_F32, &eo, err);
    if (!rc && layer_err) rc = al_decoder_track_error(&dec, err);
    double sum = 0, held = 0;
    for (size_t w0 = 0; !rc && w0 < n_pred; w0 += (size_t)T) {
        const int len = n_pred - w0 < (size_t)T ? (int)(n_pred - w0) : T;
        al_decoder_reset(&dec);
        for (int t = 0; !rc && t < len; t++) {
            const size_t i = w0 + (size_t)t;
            if (!(rc = al_decoder_step(&dec, ids[i], logits, err))) sum += token_nats(logits, V, ids[i + 1]);
        }
        held += al_decoder_kv_held_bytes(&dec);
    }
    if (!rc) {
        if (layer_err) al_decoder_layer_errors(&dec, layer_err);
        if (layer_err && layer_recall) al_decoder_layer_recall(&dec, layer_recall);
        r->loss = sum / (double)n_pred;
        r->count = n_pred;
        r->kv_bytes_per_token = held / (double)n_pred;
        r->kv_fp32_per_token = (double)m->attn->cache_values_per_token(&m->cfg) * sizeof(float) * m->cfg.num_layers;
        r->seconds = al_now() - t0;
    }
    if (dec.m) al_decoder_free(&dec);
    free(logits);
    return rc;
}
