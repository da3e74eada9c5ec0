/*
 * generate.c: sampling loop over al_decoder (see generate.h): the prompt is
 * prefilled in one forward (al_decoder_prefill), then each sampled token is
 * fed back one decode step at a time.
 */
#include "generate.h"

#include <stdlib.h>

int al_generate_ids(const al_model *m, const int *prompt, int prompt_len, int n, const al_sampler *s, uint64_t seed,
                    int stop_id, al_dtype kv_dt, int *out, void (*on_token)(int, void *), void *ctx,
                    al_gen_stats *stats, al_err *err) {
    return al_generate_ids_kv(m, prompt, prompt_len, n, s, seed, stop_id, kv_dt, NULL, out, on_token, ctx, stats, err);
}

/* The decoder of kv's cache, then the loop of the header. */
int al_generate_ids_kv(const al_model *m, const int *prompt, int prompt_len, int n, const al_sampler *s, uint64_t seed,
                       int stop_id, al_dtype kv_dt, const al_kv_opts *kv, int *out, void (*on_token)(int, void *),
                       void *ctx, al_gen_stats *stats, al_err *err) {
    const int V = m->cfg.vocab_size, max_ctx = al_config_max_context(&m->cfg);
    if (prompt_len <= 0) return al_errf(err, "the prompt is empty (generation needs at least one token)");
    if (n < 0) return al_errf(err, "negative token count");
    if ((long)prompt_len + n > max_ctx)
        return al_errf(err, "prompt (%d tokens) + %d new tokens exceed the model's context of %d", prompt_len, n, max_ctx);
    for (int i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return al_errf(err, "prompt token %d is outside the model's vocabulary of %d", prompt[i], V);
    al_decoder dec;
    al_kv_opts o = {{0}, {0}};
    if (kv) o = *kv;
    if (o.e.method == AL_KVE_SNAPKV && !o.e.prompt) o.e.prompt = prompt_len;
    if (al_decoder_create_opts(&dec, m, prompt_len + n > 0 ? prompt_len + n : 1, kv_dt, &o, err)) return -1;
    float *logits = malloc(sizeof(float) * (size_t)V);
    uint64_t *keys = malloc(sizeof(uint64_t) * (size_t)V); /* al_sample's scratch */
    if (!logits || !keys) {
        free(logits);
        free(keys);
        al_decoder_free(&dec);
        return al_errf(err, "out of memory");
    }
    al_rng rng;
    al_rng_seed(&rng, seed);
    int rc = 0, made = 0;
    double t0 = al_now();
    /* the prompt in one batched forward; if its activations cannot be
     * allocated (a long prompt on a large model), one token at a time: the
     * same cache within rounding. Not with a compressed cache, where steps
     * attend through the compressed cache and evict as they go, and a
     * prefill attends exactly and evicts once: another experiment */
    const int compressed = o.q.kind != AL_KVQ_NONE || o.e.method != AL_KVE_NONE;
    if (al_decoder_prefill(&dec, prompt, prompt_len, logits, err)) {
        if (compressed) rc = -1;
        else
            for (int i = 0; i < prompt_len && !rc; i++) rc = al_decoder_step(&dec, prompt[i], logits, err);
    }
    double t1 = al_now();
    while (made < n && !rc) {
        int tok = al_sample(s, logits, keys, V, &rng);
        if (out) out[made] = tok;
        made++;
        if (on_token) on_token(tok, ctx);
        if (tok == stop_id) break;
        if (made < n) rc = al_decoder_step(&dec, tok, logits, err);
    }
    if (stats) {
        stats->prompt_tokens = prompt_len;
        stats->generated = made;
        stats->prefill_s = t1 - t0;
        stats->decode_s = al_now() - t1;
        stats->cache_bytes = dec.cache_bytes;
        stats->kv_held_bytes = al_decoder_kv_held_bytes(&dec);
    }
    free(logits);
    free(keys);
    al_decoder_free(&dec);
    return rc ? -1 : made;
}

int al_generate_bytes(const al_model *m, const uint8_t *prompt, int prompt_len, int n, const al_sampler *s,
                      uint64_t seed, uint8_t *out, void (*on_token)(int, void *), void *ctx, al_gen_stats *stats,
                      al_err *err) {
    if (prompt_len <= 0) return al_errf(err, "the prompt is empty (generation needs at least one byte)");
    if (n < 0) return al_errf(err, "negative token count");
    int *p = malloc(sizeof(int) * (size_t)prompt_len), *o = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!p || !o) {
        free(p);
        free(o);
        return al_errf(err, "out of memory");
    }
    for (int i = 0; i < prompt_len; i++) p[i] = prompt[i];
    int made = al_generate_ids(m, p, prompt_len, n, s, seed, -1, AL_DT_F32, o, on_token, ctx, stats, err);
    for (int i = 0; i < made; i++) out[i] = (uint8_t)o[i];
    free(p);
    free(o);
    return made;
}
