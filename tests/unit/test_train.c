/*
 * test_train.c: the training API the CLI and the study share: al_train's
 * progress reports (al_train_opts.on_step) for a fresh, a resumed and a
 * finished run; the run-options loader (al_run_load_opts) and its two
 * failures; al_train_step's clipping with the run's grad_clip and its
 * refusal of a non-finite loss; the run's paths are copied whole or refused
 * (al_train_opts_set_paths, and the settings loader through it), never cut;
 * the corpus as token ids of a byte model is its bytes with the byte split,
 * and al_eval_ids scores them as al_eval_bytes does, bit for bit; init_from
 * survives the settings' JSON; al_config_contradicts names the first flag
 * that differs from a run's config or does not apply to it; al_grad_norm
 * against a long double sum, the same bits at 1 and 2 threads; BF16
 * training's stored activations in BF16 (al_acts.acts_bf16): the ops'
 * BF16 outputs are their fp32 outputs rounded, and a forward and backward
 * of every design give the bits of fp32 storage.
 */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blas.h"
#include "io/io.h"
#include "model/model.h"
#include "test.h"
#include "testutil.h"
#include "train/train.h"

/* What the progress callback saw. */
typedef struct seen {
    int started, start_step, stepped, evaluated, stopped, result, last_step, steps_in_order;
} seen;

static void record(const al_train_progress *p, void *ctx) {
    seen *s = ctx;
    if (p->event == AL_TRAIN_STARTED) {
        s->started++;
        s->start_step = s->last_step = p->step;
    } else if (p->event == AL_TRAIN_STEPPED) {
        s->steps_in_order &= p->step == s->last_step + 1 && isfinite(p->loss) && p->tokens_per_s > 0;
        s->last_step = p->step;
        s->stepped++;
        s->evaluated += p->evaluated && isfinite(p->val_loss);
    } else {
        s->stopped++;
        s->result = p->result;
        s->last_step = p->step;
    }
}

/* Trains (resume: continues) the tiny run in dir to `steps`; what on_step saw. */
static seen train_to(const char *dir, const char *data, int steps, int resume) {
    seen s = {.steps_in_order = 1};
    al_train_opts o;
    al_err err;
    if (resume) {
        CHECK_MSG(al_run_load_opts(dir, &o, &err) == 0, "%s", err.msg);
        o.resume = 1;
    } else {
        al_train_opts_default(&o);
        o.model = tu_config(32, 64, 1, 4, 4, 8, 16);
        o.batch = 2, o.context = 16, o.warmup = 1, o.eval_every = 3, o.save_every = 0, o.eval_tokens = 64;
        snprintf(o.data, sizeof o.data, "%s", data);
        snprintf(o.out, sizeof o.out, "%s", dir);
    }
    o.steps = steps;
    o.on_step = record;
    o.on_step_ctx = &s;
    CHECK_MSG(al_train(&o, &err) == AL_TRAIN_OK, "%s", err.msg);
    return s;
}

static void test_progress_and_loader(const char *dir) {
    char data[600], run[600];
    snprintf(data, sizeof data, "%s/text.txt", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    char text[4000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = "the quick brown fox jumps over the lazy dog. "[i % 45];
    al_err err;
    CHECK(al_write_file_atomic(data, text, sizeof text, &err) == 0);

    seen s = train_to(run, data, 6, 0);
    CHECK(s.started == 1 && s.start_step == 0 && s.stepped == 6 && s.steps_in_order);
    CHECK_MSG(s.evaluated == 2, "%d evaluations (steps 3 and 6)", s.evaluated);
    CHECK(s.stopped == 1 && s.result == AL_TRAIN_OK && s.last_step == 6);

    al_train_opts o;
    CHECK(al_run_load_opts(run, &o, &err) == 0);
    CHECK(o.steps == 6 && o.batch == 2 && o.eval_every == 3 && o.model.hidden_size == 32 && !strcmp(o.out, run));

    s = train_to(run, data, 8, 1); /* resume: two more steps */
    CHECK(s.started == 1 && s.start_step == 6 && s.stepped == 2 && s.steps_in_order && s.last_step == 8);
    s = train_to(run, data, 8, 1); /* finished: nothing to do */
    CHECK(s.started == 1 && s.start_step == 8 && s.stepped == 0 && s.stopped == 1 && s.result == AL_TRAIN_OK);

    char missing[700];
    snprintf(missing, sizeof missing, "%s/none", dir);
    CHECK(al_run_load_opts(missing, &o, &err) == -1);
    al_model m;
    al_config c = tu_config(32, 64, 1, 4, 4, 8, 16);
    CHECK(al_model_create(&m, &c, &err) == 0);
    CHECK(al_model_save(&m, dir, NULL, &err) == 0); /* a model directory, not a run */
    al_model_free(&m);
    CHECK(al_run_load_opts(dir, &o, &err) == -2 && strstr(err.msg, "no training settings"));
}

/* al_train_step clips to o->grad_clip: the same bits as the update by hand. */
static void test_step(void) {
    al_config c = tu_config(32, 64, 2, 4, 2, 8, 16);
    al_model m, ref;
    al_acts a;
    al_err err;
    CHECK(al_model_create(&m, &c, &err) == 0 && al_model_alloc_grads(&m, &err) == 0);
    CHECK(al_model_create(&ref, &c, &err) == 0 && al_model_alloc_grads(&ref, &err) == 0);
    CHECK(al_acts_create(&a, &m, 2, 16, &err) == 0);
    al_model_init_weights(&m, 3);
    al_model_init_weights(&ref, 3);
    int in[32], tg[32];
    for (int i = 0; i < 32; i++) in[i] = (i * 37) % 256, tg[i] = (i * 91 + 5) % 256;
    float *mom = calloc(4 * m.n_floats, sizeof(float));
    al_train_opts o;
    al_train_opts_default(&o);
    o.grad_clip = 0.25;
    al_lm_batch batch = {.acts = &a, .in = in, .tg = tg};
    const al_step_pass pass = al_lm_step_pass(&batch);
    double loss, gn;
    CHECK(al_train_step(&m, &pass, mom, mom + m.n_floats, &o, 1e-3, 1, &loss, &gn) == AL_STEP_OK);
    double ref_loss = tu_loss_and_grads(&ref, &a, in, tg), ref_gn = al_grad_norm(&ref);
    CHECK(loss == ref_loss && gn == ref_gn && gn > o.grad_clip);
    al_adamw_update(&ref, mom + 2 * m.n_floats, mom + 3 * m.n_floats, 1e-3, &o, 1, (float)(o.grad_clip / ref_gn));
    CHECK(memcmp(m.w, ref.w, sizeof(float) * m.n_floats) == 0);

    /* a non-finite loss leaves the weights alone */
    memcpy(ref.w, m.w, sizeof(float) * m.n_floats);
    m.w[tu_find_param(&m, "model.embed_tokens.weight")->offset + (size_t)in[0] * 32] = NAN;
    ref.w[tu_find_param(&ref, "model.embed_tokens.weight")->offset + (size_t)in[0] * 32] = NAN;
    CHECK(al_train_step(&m, &pass, mom, mom + m.n_floats, &o, 1e-3, 2, &loss, &gn) == AL_STEP_LOSS_NOT_FINITE);
    CHECK(!isfinite(loss) && isnan(gn) && memcmp(m.w, ref.w, sizeof(float) * m.n_floats) == 0);

    /* an absurd learning rate leaves weights inf/nan though the loss and the gradient were finite */
    al_model_init_weights(&m, 3);
    memset(mom, 0, 2 * sizeof(float) * m.n_floats);
    CHECK(al_train_step(&m, &pass, mom, mom + m.n_floats, &o, 1e-3, 1, &loss, &gn) == AL_STEP_OK);
    CHECK(al_train_step(&m, &pass, mom, mom + m.n_floats, &o, 1e300, 2, &loss, &gn) == AL_STEP_WEIGHTS_NOT_FINITE);
    size_t not_finite = 0;
    for (size_t i = 0; i < m.n_floats; i++) not_finite += !isfinite(m.w[i]);
    CHECK(isfinite(loss) && isfinite(gn) && not_finite > 0);
    free(mom);
    al_acts_free(&a);
    al_model_free(&m);
    al_model_free(&ref);
}

/* A path of n bytes of c (malloc'd). */
static char *path_of(size_t n, char c) {
    char *p = malloc(n + 1);
    if (p) memset(p, c, n), p[n] = 0;
    return p;
}

/* al_train_opts_set_paths: the longest path that fits is copied whole; one
 * byte more is refused in one line that says so, and nothing is set. */
static void test_paths(void) {
    al_train_opts o;
    al_err err;
    al_train_opts_default(&o);
    const size_t cap = sizeof o.out;
    char *longest = path_of(cap - 1, 'a'), *too_long = path_of(cap, 'b');
    char want[96], *json = too_long ? malloc(cap + 32) : NULL;
    CHECK(longest && too_long && json);
    if (!longest || !too_long || !json) return;
    CHECK(al_train_opts_set_paths(&o, "text.txt", NULL, longest, &err) == 0);
    CHECK(!strcmp(o.data, "text.txt") && !strcmp(o.out, longest) && o.images[0] == 0);
    CHECK(al_train_opts_set_paths(&o, "other.txt", too_long, NULL, &err) == -1);
    snprintf(want, sizeof want, "images path too long (%zu bytes, at most %zu)", cap, cap - 1);
    CHECK_MSG(strstr(err.msg, want) != NULL, "%s", err.msg);
    CHECK(!strcmp(o.data, "text.txt") && o.images[0] == 0 && !strcmp(o.out, longest));
    /* the "train" block of a config.json goes through it too */
    snprintf(json, cap + 32, "{\"steps\": 7, \"data\": \"%s\"}", too_long);
    CHECK(al_train_opts_from_json(&o, json, &err) == -1 && strstr(err.msg, "data path too long"));
    CHECK(!strcmp(o.data, "text.txt"));
    free(json);
    free(longest);
    free(too_long);
}

/* The byte model's token corpus and evaluation are the byte ones. */
static void test_token_data(const char *dir) {
    char *path = al_sprintf("%s/bytes.txt", dir);
    al_err err;
    al_rng rng;
    uint8_t text[3001];
    al_rng_seed(&rng, 7);
    for (size_t i = 0; i < sizeof text; i++) text[i] = (uint8_t)(al_rng_u64(&rng) % 256); /* any bytes */
    CHECK(path && al_write_file_atomic(path, text, sizeof text, &err) == 0);
    al_corpus c;
    al_token_data d;
    CHECK_MSG(al_corpus_load(&c, path, 0.1, 16, &err) == 0, "%s", err.msg);
    CHECK_MSG(al_token_data_load(&d, path, dir, dir, 1, 0.1, 16, 256, &err) == 0, "%s", err.msg);
    CHECK(d.source == AL_TOKENS_BYTES && al_tok_is_bytes(d.tok) && d.n == c.n && d.n_train == c.n_train);
    int same = d.n == sizeof text;
    for (size_t i = 0; same && i < d.n; i++) same = d.ids[i] == text[i];
    CHECK(same);
    /* no cache for bytes */
    char *cache = al_sprintf("%s/%s", dir, AL_TOKEN_CACHE);
    CHECK(cache && access(cache, F_OK) != 0);
    /* a model whose vocabulary misses a byte is refused in one line */
    al_token_data small;
    CHECK(al_token_data_load(&small, path, dir, dir, 1, 0.1, 16, 100, &err) == -1 && strstr(err.msg, "vocabulary"));
    /* al_eval_ids over the ids == al_eval_bytes over the bytes (an odd window count) */
    al_config cfg = tu_config(32, 64, 1, 4, 4, 8, 16);
    al_model m;
    al_acts a;
    CHECK_MSG(al_model_create(&m, &cfg, &err) == 0 && al_acts_create(&a, &m, 3, 16, &err) == 0, "%s", err.msg);
    al_model_init_weights(&m, 11);
    double l_bytes = NAN, l_ids = NAN;
    size_t n_bytes = 0, n_ids = 0;
    CHECK(al_eval_bytes(&m, &a, c.bytes + c.n_train, c.n - c.n_train, 250, &l_bytes, &n_bytes, &err) == 0);
    CHECK(al_eval_ids(&m, &a, d.ids + d.n_train, d.n - d.n_train, 250, &l_ids, &n_ids, &err) == 0);
    CHECK_MSG(l_bytes == l_ids && n_bytes == 250 && n_ids == 250 && isfinite(l_ids), "%.9g %.9g", l_bytes, l_ids);
    size_t covered = 0;
    CHECK(al_predicted_bytes(d.tok, d.ids, 250, &covered, &err) == 0 && covered == 250);
    al_acts_free(&a);
    al_model_free(&m);
    al_token_data_free(&d);
    al_corpus_free(&c);
    free(cache);
    free(path);
}

/* Integer settings in the settings' JSON: whole numbers in their type's
 * range are read, anything else refused in one line (a number past int's
 * range, converted, was undefined behaviour: fuzz finding). */
static void test_setting_ranges(void) {
    static const struct { const char *json, *names; } bad[] = {
        {"{\"context\": 1e79}", "'context' must be an integer"},
        {"{\"steps\": 2147483648}", "'steps' must be an integer"},
        {"{\"batch\": -2147483649}", "'batch' must be an integer"},
        {"{\"warmup\": 2.5}", "'warmup' must be an integer"},
        {"{\"shards\": 1e30}", "'shards' must be an integer"},
        {"{\"shards\": \"2\"}", "'shards' must be an integer"},
        {"{\"eval_images\": 3e9}", "'eval_images' must be an integer"},
        {"{\"seed\": -1}", "'seed' must be a whole number"},
        {"{\"seed\": 18446744073709551616}", "'seed' must be a whole number"},
        {"{\"lr\": \"fast\"}", "'lr' must be a number"},
    };
    al_train_opts o;
    al_err err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        al_train_opts_default(&o);
        CHECK_MSG(al_train_opts_from_json(&o, bad[i].json, &err) == -1 && strstr(err.msg, bad[i].names) &&
                      !strchr(err.msg, '\n'),
                  "%s: %s", bad[i].json, err.msg);
    }
    al_train_opts_default(&o);
    CHECK(al_train_opts_from_json(&o, "{\"context\": 2147483647, \"batch\": -2147483648, \"shards\": 4, "
                                      "\"seed\": 18446744073709549568, \"lr\": 0.5}",
                                  &err) == 0);
    CHECK(o.context == INT_MAX && o.batch == INT_MIN && o.shards == 4 && o.seed == 18446744073709549568ull &&
          o.lr == 0.5);
}

/* init_from in the settings' JSON; al_config_contradicts on given flags. */
static void test_init_from_settings(void) {
    al_train_opts o, back;
    al_err err;
    al_train_opts_default(&o);
    CHECK(al_train_opts_set_init_from(&o, "/runs/mha", &err) == 0);
    char *json = al_train_opts_to_json(&o);
    al_train_opts_default(&back);
    CHECK(json && al_train_opts_from_json(&back, json, &err) == 0 && !strcmp(back.init_from, "/runs/mha"));
    CHECK(al_train_opts_from_json(&back, "{\"init_from\": 3}", &err) == -1 && strstr(err.msg, "init_from"));
    free(json);
    al_config base = tu_config(32, 64, 2, 4, 4, 8, 16), flags = base;
    unsigned char given[AL_CONFIG_MAX_FIELDS] = {0};
    char why[256] = "";
    given[al_config_field_find("heads")] = 1;
    given[al_config_field_find("layers")] = 1;
    CHECK(al_config_contradicts(&flags, given, &base, why, sizeof why) == 0); /* its own values */
    flags.num_layers = 3;
    CHECK(al_config_contradicts(&flags, given, &base, why, sizeof why) == 1);
    CHECK_MSG(!strcmp(why, "--layers 3, but its config has 2"), "%s", why);
    flags = base;
    given[al_config_field_find("kv_lora_rank")] = 1;
    CHECK(al_config_contradicts(&flags, given, &base, why, sizeof why) == 1);
    CHECK_MSG(strstr(why, "--kv-lora-rank") && strstr(why, "does not apply") && strstr(why, "mha"), "%s", why);
}

/* al_grad_norm over arenas of one block, several and a ragged last one:
 * within 1e-12 of a long double sum, and the same bits at 1 and 2 threads. */
static void test_grad_norm(void) {
    static const size_t sizes[] = {0, 1, 7, 16385, 3000001};
    for (size_t t = 0; t < sizeof sizes / sizeof *sizes; t++) {
        const size_t n = sizes[t];
        float *g = malloc(sizeof(float) * (n ? n : 1));
        al_model m;
        memset(&m, 0, sizeof m);
        m.g = g, m.n_floats = n;
        long double sum = 0;
        for (size_t i = 0; i < n; i++) {
            g[i] = (float)((double)((i * 2654435761u) % 1000003) / 1000003.0 - 0.5) * (i % 5 ? 1.0f : 1e-3f);
            sum += (long double)g[i] * g[i];
        }
        const double want = sqrt((double)sum);
        const int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        const double one = al_grad_norm(&m);
        omp_set_num_threads(2);
        const double two = al_grad_norm(&m);
        omp_set_num_threads(saved);
        CHECK_MSG(fabs(one - want) <= 1e-12 * want || (n == 0 && one == 0),
                  "grad norm n=%zu: %.17g vs %.17g", n, one, want);
        CHECK_MSG(memcmp(&one, &two, sizeof one) == 0, "grad norm n=%zu: 1 and 2 threads differ", n);
        free(g);
    }
}

/* BF16 training: the optimizer rounds each new weight into the products'
 * BF16 copy of the weights in its own pass (no second pass after it): after
 * steps the copy is the rounding of the weights, bit for bit, as
 * al_bf16_shadow_refresh would write it; an embedding of 8192 weights spans
 * two of the update's chunks. A step whose loss is not finite changes
 * neither. */
static void test_bf16_copy(void) {
    al_config c = tu_config(32, 64, 2, 4, 2, 8, 16);
    al_model m;
    al_acts a;
    al_err err;
    CHECK(al_model_create(&m, &c, &err) == 0 && al_model_alloc_grads(&m, &err) == 0);
    CHECK(al_acts_create(&a, &m, 2, 16, &err) == 0);
    al_model_init_weights(&m, 5);
    int in[32], tg[32];
    for (int i = 0; i < 32; i++) in[i] = (i * 41) % 256, tg[i] = (i * 29 + 3) % 256;
    float *mom = calloc(2 * m.n_floats, sizeof(float));
    uint16_t *want = malloc(m.n_floats * sizeof *want), *before = malloc(m.n_floats * sizeof *before);
    al_train_opts o;
    al_train_opts_default(&o);
    al_lm_batch batch = {.acts = &a, .in = in, .tg = tg};
    const al_step_pass pass = al_lm_step_pass(&batch);
    CHECK(mom && want && before && al_train_precision_begin(&m, AL_PREC_BF16, &err) == 0);
    al_precision_set(AL_PREC_BF16);
    const uint16_t *copy = al_bf16_shadow_of(m.w);
    CHECK(copy != NULL);
    if (copy && mom && want && before) {
        memcpy(before, copy, m.n_floats * sizeof *before);
        double loss, gn;
        for (int t = 1; t <= 3; t++) CHECK(al_train_step(&m, &pass, mom, mom + m.n_floats, &o, 1e-3, t, &loss, &gn) == AL_STEP_OK);
        al_bf16_round_run(want, m.w, m.n_floats);
        CHECK(memcmp(copy, want, m.n_floats * sizeof *want) == 0);
        CHECK(memcmp(copy, before, m.n_floats * sizeof *before) != 0); /* the weights did move */
        memcpy(before, copy, m.n_floats * sizeof *before);
        m.w[tu_find_param(&m, "model.embed_tokens.weight")->offset + (size_t)in[0] * 32] = NAN;
        CHECK(al_train_step(&m, &pass, mom, mom + m.n_floats, &o, 1e-3, 4, &loss, &gn) == AL_STEP_LOSS_NOT_FINITE);
        CHECK(memcmp(copy, before, m.n_floats * sizeof *before) == 0);
    }
    al_precision_set(AL_PREC_F32);
    al_train_precision_end(&m);
    al_precision_release();
    free(mom);
    free(want);
    free(before);
    al_acts_free(&a);
    al_model_free(&m);
}

/* One model of config c: a BF16-mode forward and backward with the stored
 * activations in BF16 and in fp32 (the test hook) give the same loss and
 * gradients, bit for bit; B 4 x T 64. */
static void check_bf16_acts(const char *tag, al_config c, al_rng *r) {
    al_model m;
    al_acts a;
    al_err err;
    CHECK(tu_make_model(&m, &c, 3, TU_GAINS_ONE) == 0 && al_model_alloc_grads(&m, &err) == 0);
    CHECK(al_acts_create(&a, &m, 4, 64, &err) == 0);
    int in[256], tg[256];
    tu_random_tokens(in, 256, r);
    tu_random_tokens(tg, 256, r);
    float *grads = malloc(sizeof(float) * m.n_floats);
    CHECK(grads && al_train_precision_begin(&m, AL_PREC_BF16, &err) == 0);
    al_precision_set(AL_PREC_BF16);
    double loss[2];
    int stored_bf16[2];
    for (int f32 = 0; f32 < 2 && grads; f32++) { /* 0: BF16 storage, 1: fp32 (the hook) */
        al_model_test_acts_f32(f32);
        al_model_zero_grads(&m);
        loss[f32] = al_model_forward(&m, &a, in, tg);
        stored_bf16[f32] = a.acts_bf16;
        al_model_backward(&m, &a);
        if (!f32) memcpy(grads, m.g, sizeof(float) * m.n_floats);
    }
    al_model_test_acts_f32(0);
    if (grads) {
        CHECK_MSG(stored_bf16[0] == 1 && stored_bf16[1] == 0, "%s: BF16 storage used %d / %d", tag, stored_bf16[0],
                  stored_bf16[1]);
        CHECK_MSG(loss[0] == loss[1] && isfinite(loss[0]), "%s: loss %.9g with BF16 activations, %.9g without", tag,
                  loss[0], loss[1]);
        CHECK_MSG(!memcmp(grads, m.g, sizeof(float) * m.n_floats), "%s: BF16 activations change the gradients", tag);
    }
    al_precision_set(AL_PREC_F32);
    al_train_precision_end(&m);
    al_precision_release();
    free(grads);
    al_acts_free(&a);
    al_model_free(&m);
}

/* The BF16 outputs of the MLP ops and of the norms (odd lengths past the
 * parallel threshold, so blocks and chunks end short) are al_bf16_round_run
 * of their fp32 outputs; then BF16 storage gives the bits of fp32 storage
 * for GQA, MLA with and without query compression and LRKV (f 136 x N 256:
 * 34,816 values an MLP buffer, not a multiple of any block). */
static void test_bf16_acts_storage(void) {
    enum { N_OPS = 34817 };
    al_rng r;
    al_rng_seed(&r, 9);
    float *g = malloc(sizeof(float) * N_OPS * 5), *u = g + N_OPS, *dh = u + N_OPS, *f1 = dh + N_OPS, *f2 = f1 + N_OPS;
    uint16_t *b1 = malloc(sizeof(uint16_t) * N_OPS * 4), *b2 = b1 + N_OPS, *w1 = b2 + N_OPS, *w2 = w1 + N_OPS;
    CHECK(g && b1);
    if (g && b1) {
        for (int i = 0; i < N_OPS; i++) g[i] = 3.0f * al_rng_normal(&r), u[i] = al_rng_normal(&r), dh[i] = al_rng_normal(&r);
        for (int act = 0; act < 2; act++) {
            const al_mlp_act a = act ? AL_ACT_GELU_TANH : AL_ACT_SILU;
            al_glu_fwd(a, f1, g, u, N_OPS);
            al_bf16_round_run(w1, f1, N_OPS);
            al_glu_fwd_bf16(a, b1, g, u, N_OPS);
            CHECK_MSG(!memcmp(b1, w1, sizeof(uint16_t) * N_OPS), "al_glu_fwd_bf16 (act %d) is not al_glu_fwd rounded", act);
        }
        al_swiglu_bwd(f1, f2, dh, g, u, N_OPS);
        al_bf16_round_run(w1, f1, N_OPS);
        al_bf16_round_run(w2, f2, N_OPS);
        al_swiglu_bwd_bf16(b1, b2, dh, g, u, N_OPS);
        CHECK_MSG(!memcmp(b1, w1, sizeof(uint16_t) * N_OPS) && !memcmp(b2, w2, sizeof(uint16_t) * N_OPS),
                  "al_swiglu_bwd_bf16 is not al_swiglu_bwd rounded");
        /* rows of 1031 (two chunks and a tail), 33 rows: 34,023 values */
        enum { ROWS = 33, D = 1031 };
        float *s1 = f1, *s2 = f2, rstd1[ROWS], rstd2[ROWS];
        al_add_rmsnorm_fwd(s1, dh, rstd1, g, u, g + 2 * D, ROWS, D, 1e-5f);
        al_bf16_round_run(w1, dh, (size_t)ROWS * D);
        al_add_rmsnorm_fwd_bf16(s2, b1, rstd2, g, u, g + 2 * D, ROWS, D, 1e-5f);
        CHECK_MSG(!memcmp(b1, w1, sizeof(uint16_t) * ROWS * D) && !memcmp(s1, s2, sizeof(float) * ROWS * D) &&
                      !memcmp(rstd1, rstd2, sizeof rstd1),
                  "al_add_rmsnorm_fwd_bf16 is not al_add_rmsnorm_fwd rounded");
        al_rmsnorm_fwd(dh, rstd1, g, u, ROWS, D, 1e-5f);
        al_bf16_round_run(w1, dh, (size_t)ROWS * D);
        al_rmsnorm_fwd_bf16(b1, rstd2, g, u, ROWS, D, 1e-5f);
        CHECK_MSG(!memcmp(b1, w1, sizeof(uint16_t) * ROWS * D) && !memcmp(rstd1, rstd2, sizeof rstd1),
                  "al_rmsnorm_fwd_bf16 is not al_rmsnorm_fwd rounded");
    }
    free(g), free(b1);
    al_config gqa = tu_config(40, 136, 2, 4, 2, 10, 64), mla = tu_mla_config(16, 0), mla_q = tu_mla_config(0, 1),
              lrkv = tu_config(32, 136, 2, 4, 4, 8, 64);
    mla.intermediate_size = mla_q.intermediate_size = 136, mla.max_position = mla_q.max_position = 64;
    lrkv.attention = AL_ATTN_LRKV, lrkv.lrkv_rank = 6;
    check_bf16_acts("gqa", gqa, &r);
    check_bf16_acts("mla", mla, &r);
    check_bf16_acts("mla without query compression, tied", mla_q, &r);
    check_bf16_acts("lrkv", lrkv, &r);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv);
    test_grad_norm();
    char dir[] = "/tmp/al_test_train_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_progress_and_loader(dir);
    test_step();
    test_bf16_copy();
    test_bf16_acts_storage();
    test_paths();
    test_token_data(dir);
    test_init_from_settings();
    test_setting_ranges();
    if (tu_remove_dir(dir)) return 1;
    return TEST_EXIT();
}
