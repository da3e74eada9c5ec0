/*
 * runs.c: run-directory states, log reading and measurements of `attnlab
 * study` (see study.h).
 *
 * A run is only ever reused when its files prove it is the run the study
 * plans: config.json holds the same model and training settings,
 * train_state.safetensors the step, log.jsonl the line of that step (with
 * its evaluation, for a finished run). Anything else is trained again, so a
 * rerun with another budget or corpus never mixes results.
 */
#include "study.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/io.h"
#include "../analysis/attnmap.h"
#include "../analysis/heads.h"

/* ---- run directories ---- */

int al_train_state_step(const char *path, int *step, al_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return al_errf(err, "%s: %s", path, strerror(errno));
    unsigned char lenb[8];
    uint64_t hl = 0;
    int rc = -1;
    if (fread(lenb, 1, 8, f) == 8) {
        for (int i = 7; i >= 0; i--) hl = hl << 8 | lenb[i];
        if (hl > 0 && hl < (1u << 24)) {
            char *h = malloc(hl + 1);
            if (!h) {
                fclose(f);
                return al_errf(err, "%s: out of memory for its %llu-byte header", path, (unsigned long long)hl);
            }
            if (fread(h, 1, hl, f) == hl) {
                int oom;
                cJSON *j = al_json_parse(h, hl, &oom);
                if (oom) rc = -2;
                const cJSON *v =
                    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "__metadata__"), "step");
                long s;
                if (cJSON_IsString(v) && !al_parse_int(v->valuestring, &s) && s >= 0 && s < (1L << 30)) {
                    *step = (int)s;
                    rc = 0;
                }
                cJSON_Delete(j);
            }
            free(h);
        }
    }
    fclose(f);
    return rc == -2 ? al_errf(err, "%s: out of memory", path)
           : rc     ? al_errf(err, "%s: no readable step in the training state", path)
                    : 0;
}

/* Relative equality of two settings that went through JSON. */
static int same_d(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }


/* The training settings that decide the numbers. */
static int same_train(const al_train_opts *a, const al_train_opts *b, int vision, char *why, size_t cap) {
#define DIFF(f, same)                                                                                                  \
    do {                                                                                                               \
        if (!(same)) {                                                                                                 \
            al_strfmt(why, cap, "its %s differs (%g, planned %g)", #f, (double)a->f, (double)b->f);                    \
            return 0;                                                                                                  \
        }                                                                                                              \
    } while (0)
#define I(f) DIFF(f, a->f == b->f)
#define D(f) DIFF(f, same_d(a->f, b->f))
    I(batch);
    I(steps);
    I(warmup);
    I(eval_every);
    I(save_every);
    I(seed);
    D(lr);
    D(min_lr_ratio);
    D(weight_decay);
    D(grad_clip);
    if (a->precision != b->precision) {
        al_strfmt(why, cap, "it was trained in %s (planned %s)", al_precision_name(a->precision),
                  al_precision_name(b->precision));
        return 0;
    }
    if (vision) {
        I(train_subset);
        I(eval_images);
        if (strcmp(a->images, b->images)) {
            al_strfmt(why, cap, "it was trained on other images (%s)", a->images[0] ? a->images : "default");
            return 0;
        }
    } else {
        I(context);
        I(eval_tokens);
        D(val_fraction);
        if (strcmp(a->data, b->data)) {
            al_strfmt(why, cap, "it was trained on other data (%s)", a->data[0] ? a->data : "default");
            return 0;
        }
    }
#undef I
#undef D
#undef DIFF
    return 1;
}

/* 1 if the log at path has the line of `step` with an evaluation, 0 if
 * not (or it cannot be read), -1 with err when memory ran short. */
static int log_has_final(const char *path, int step, al_err *err) {
    char *text;
    size_t len;
    if (al_read_file(path, &text, &len, err)) return al_err_is_oom(err) ? -1 : 0;
    int found = 0, oom = 0;
    for (char *line = text; line && *line && !found && !oom;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *j = al_json_parse(line, strlen(line), &oom);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
        found =
            cJSON_IsNumber(s) && s->valueint == step && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "val_loss"));
        cJSON_Delete(j);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return oom ? al_errf(err, "%s: out of memory", path) : found;
}

/* The files of a run directory that decide its state. */
enum { RUN_CONFIG, RUN_STATE, RUN_MODEL, RUN_LOG, RUN_FILES };
static const char *const run_file_names[RUN_FILES] = {"config.json", "train_state.safetensors", "model.safetensors",
                                                      "log.jsonl"};

/* What the run's files say (al_study_run_state), their paths made; -1 with
 * err when memory ran short reading them (no verdict on the run then). */
static int run_state_of(const al_train_opts *plan, char *const *file, int *step, char *why, size_t cap, al_err *err) {
    al_train_opts saved;
    *step = 0;
    al_strfmt(why, cap, "not trained yet");
    if (access(file[RUN_CONFIG], F_OK) != 0) return AL_RUN_NEW;
    const int loaded = al_run_load_opts(plan->out, &saved, err);
    if (loaded && al_err_is_oom(err)) return -1;
    if (loaded == -1) {
        al_strfmt(why, cap, "its config.json is unreadable");
        return AL_RUN_STALE;
    }
    const int vision = plan->model.task == AL_TASK_VISION;
    if (!al_config_same(&saved.model, &plan->model, why, cap)) return AL_RUN_STALE;
    if (loaded) {
        al_strfmt(why, cap, "its config.json has no training settings");
        return AL_RUN_STALE;
    }
    if (!same_train(&saved, plan, vision, why, cap)) return AL_RUN_STALE;
    if (access(file[RUN_STATE], F_OK) != 0) {
        al_strfmt(why, cap, "no checkpoint yet");
        return AL_RUN_NEW;
    }
    int s;
    if (al_train_state_step(file[RUN_STATE], &s, err)) {
        if (al_err_is_oom(err)) return -1;
        al_strfmt(why, cap, "its training state is unreadable");
        return AL_RUN_STALE;
    }
    if (s > plan->steps) {
        al_strfmt(why, cap, "it was trained past the planned %d steps", plan->steps);
        return AL_RUN_STALE;
    }
    *step = s;
    if (s < plan->steps) {
        al_strfmt(why, cap, "stopped at step %d of %d", s, plan->steps);
        return s > 0 ? AL_RUN_PARTIAL : AL_RUN_NEW;
    }
    const int final = access(file[RUN_MODEL], F_OK) == 0 ? log_has_final(file[RUN_LOG], s, err) : 0;
    if (final < 0) return -1;
    if (!final) {
        al_strfmt(why, cap, "its checkpoint or log.jsonl lacks the final step");
        return AL_RUN_STALE;
    }
    al_strfmt(why, cap, "complete");
    return AL_RUN_COMPLETE;
}

int al_study_run_state(const al_train_opts *plan, al_run_state *state, int *step, char *why, size_t cap, al_err *err) {
    char *file[RUN_FILES];
    int rc = 0;
    for (int i = 0; i < RUN_FILES; i++)
        if (!(file[i] = al_study_join(plan->out, run_file_names[i], err))) rc = -1;
    const int st = rc ? -1 : run_state_of(plan, file, step, why, cap, err);
    if (st < 0) rc = -1;
    else *state = (al_run_state)st;
    for (int i = 0; i < RUN_FILES; i++) free(file[i]);
    return rc;
}

/* ---- logs ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorted in place); NAN for none. */
static double median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void al_run_log_free(al_run_log *l) {
    free(l->step);
    free(l->val_loss);
    free(l->val_acc);
    memset(l, 0, sizeof *l);
}

int al_run_log_read(const char *dir, al_run_log *out, al_err *err) {
    char *text;
    size_t len;
    memset(out, 0, sizeof *out);
    char *path = al_study_join(dir, "log.jsonl", err);
    if (!path) return -1;
    if (al_read_file(path, &text, &len, err)) {
        free(path);
        return -1;
    }
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    out->step = malloc(sizeof(int) * lines);
    out->val_loss = malloc(sizeof(double) * lines);
    out->val_acc = malloc(sizeof(double) * lines);
    double *tps = malloc(sizeof(double) * lines), *ips = malloc(sizeof(double) * lines);
    int nt = 0, ni = 0;
    if (!out->step || !out->val_loss || !out->val_acc || !tps || !ips) {
        free(text), free(tps), free(ips), free(path);
        al_run_log_free(out);
        return al_errf(err, "out of memory");
    }
    int oom = 0;
    for (char *line = text; line && *line && !oom;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *j = al_json_parse(line, strlen(line), &oom);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step"), *v;
        if (cJSON_IsNumber(s)) {
            out->last_step = s->valueint;
            if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "tokens_per_s")) && v->valuedouble > 0)
                tps[nt++] = v->valuedouble;
            if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "images_per_s")) && v->valuedouble > 0)
                ips[ni++] = v->valuedouble;
            if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "elapsed_s"))) out->elapsed_s = v->valuedouble;
            if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "val_loss"))) {
                out->step[out->n] = s->valueint;
                out->val_loss[out->n] = v->valuedouble;
                v = cJSON_GetObjectItemCaseSensitive(j, "val_accuracy");
                out->val_acc[out->n] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
                out->n++;
            }
        }
        cJSON_Delete(j);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    out->tokens_per_s = median(tps, nt);
    out->items_per_s = ni ? median(ips, ni) : out->tokens_per_s;
    free(tps);
    free(ips);
    const int rc = oom      ? al_errf(err, "%s: out of memory", path) /* a line not read */
                   : out->n ? 0
                            : al_errf(err, "%s: no evaluation lines", path);
    if (rc) al_run_log_free(out);
    free(path);
    return rc;
}

/* ---- measurements ---- */

void al_unigram_of(const al_corpus *c, al_unigram *u) {
    double cnt[256] = {0};
    for (size_t i = 0; i < c->n_train; i++) cnt[c->bytes[i]] += 1;
    double n = (double)c->n_train, h = 0;
    for (int b = 0; b < 256; b++)
        if (cnt[b] > 0) h -= cnt[b] / n * log(cnt[b] / n);
    u->train_entropy = h;
    /* add-one smoothing, so bytes unseen in training cost a finite amount */
    double ce = 0;
    size_t nv = c->n - c->n_train;
    for (size_t i = c->n_train; i < c->n; i++) ce -= log((cnt[c->bytes[i]] + 1) / (n + 256));
    u->val_cross_entropy = nv ? ce / (double)nv : NAN;
}

int al_decode_speed(const al_model *m, int context, int tokens, double *tokens_per_s, al_err *err) {
    if (context < 2 || tokens < 1 || tokens >= context)
        return al_errf(err, "decode benchmark: need 0 < tokens (%d) < context (%d)", tokens, context);
    if (m->cfg.max_position < context)
        return al_errf(err, "decode benchmark: context %d exceeds the model's %d positions", context,
                       m->cfg.max_position);
    al_decoder dec;
    if (al_decoder_create(&dec, m, context, err)) return -1;
    al_decoder_fill_random(&dec, 2);
    al_rng rng;
    al_rng_seed(&rng, 3);
    float *logits = malloc(sizeof(float) * (size_t)(m->cfg.vocab_size > 0 ? m->cfg.vocab_size : 1));
    int rc = logits ? 0 : al_errf(err, "out of memory");
    dec.pos = context - tokens - 1;
    if (!rc) rc = al_decoder_step(&dec, 'a', logits, err); /* warm-up: caches, threads */
    double t0 = al_now();
    for (int i = 0, tok = 'a'; i < tokens && !rc; i++) {
        rc = al_decoder_step(&dec, tok, logits, err);
        tok = (int)(al_rng_u64(&rng) % 256);
    }
    double dt = al_now() - t0;
    if (!rc) *tokens_per_s = tokens / (dt > 0 ? dt : 1e-9);
    free(logits);
    al_decoder_free(&dec);
    return rc;
}

/* Head-similarity summary of a loaded model: the layer-averaged matrix's
 * effective ranks (as heads.png shows them). */
static int head_ranks(const al_model *m, double *unc, double *pca, double *offdiag, al_err *err) {
    al_head_sim s;
    if (al_head_sim_compute(m, &s, err)) return -1;
    *unc = 100.0 * s.of_mean.erank_uncentered;
    *pca = 100.0 * s.of_mean.erank_pca;
    *offdiag = s.of_mean.mean_offdiag;
    al_head_sim_free(&s);
    return 0;
}

/* Loads the weights DIR/model.safetensors into m. */
static int load_run_weights(al_model *m, const char *dir, al_err *err) {
    char *path = al_study_join(dir, "model.safetensors", err);
    if (!path) return -1;
    int rc = al_model_load_weights(m, path, err);
    free(path);
    return rc;
}

int al_study_measure_lm(const char *dir, const al_corpus *corpus, long max_tokens, al_lm_measure *out, al_err *err) {
    al_config cfg;
    char *extra = NULL;
    memset(out, 0, sizeof *out);
    if (al_config_load_dir(&cfg, dir, &extra, err)) return -1;
    int oom = 0;
    cJSON *al = extra ? al_json_parse(extra, strlen(extra), &oom) : NULL;
    free(extra);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(al, "step");
    out->steps = cJSON_IsNumber(st) ? st->valueint : 0;
    cJSON_Delete(al);
    if (oom) return al_errf(err, "%s: out of memory", dir);
    const int T = cfg.max_position; /* the trained context */
    al_model m;
    if (al_model_create(&m, &cfg, err)) return al_err_prefix(err, "%s", dir);
    if (load_run_weights(&m, dir, err)) {
        al_model_free(&m);
        return -1;
    }
    for (int i = 0; i < m.n_params; i++) out->params += m.params[i].numel;
    out->kv_values = m.attn->cache_values_per_token(&m.cfg);
    out->kv_bytes_per_token = out->kv_values * sizeof(float) * (size_t)cfg.num_layers;
    /* the MHA of the same heads; MLA's head width is its value width (its key
     * width includes the extra RoPE part), as `attnlab info` counts it */
    int dk, mha_dh;
    al_attn_head_widths(&cfg, &dk, &mha_dh);
    out->kv_pct_of_mha = 100.0 * (double)out->kv_values / (2.0 * cfg.num_heads * mha_dh);
    al_acts a;
    int rc = al_acts_create(&a, &m, 4, T, err);
    if (!rc) {
        rc = al_eval_bytes(&m, &a, corpus->bytes + corpus->n_train, corpus->n - corpus->n_train, (size_t)max_tokens,
                           &out->val_loss, &out->val_tokens, err);
        al_acts_free(&a);
    }
    out->val_bpb = out->val_loss / M_LN2;
    if (!rc) rc = head_ranks(&m, &out->erank_uncentered_pct, &out->erank_pca_pct, &out->mean_offdiag, err);
    al_model_free(&m);
    return rc ? al_err_prefix(err, "%s", dir) : 0;
}

/* One model of the speed benchmark: its run's settings, weights, gradients,
 * moments, a batch. */
typedef struct speed_model {
    al_train_opts o;
    al_model m;
    al_acts a;
    float *m1, *m2;
    int *in, *tg;
    al_lm_batch batch;
} speed_model;

static void speed_model_free(speed_model *s) {
    al_free(s->m1);
    al_free(s->m2);
    free(s->in);
    free(s->tg);
    al_acts_free(&s->a);
    al_model_free(&s->m);
}

/* Loads dir's model with RoPE tables for max(context, decode_context) and
 * everything a training step needs (a fixed random batch). */
static int speed_model_open(speed_model *s, const char *dir, int batch, int context, int decode_context, al_err *err) {
    memset(s, 0, sizeof *s);
    if (al_run_load_opts(dir, &s->o, err)) return -1;
    al_config cfg = s->o.model;
    const int need = context > decode_context ? context : decode_context;
    if (cfg.max_position < need) cfg.max_position = need;
    if (al_model_create(&s->m, &cfg, err)) return al_err_prefix(err, "%s", dir);
    const size_t N = (size_t)batch * context;
    if (load_run_weights(&s->m, dir, err) || al_model_alloc_grads(&s->m, err) ||
        al_acts_create(&s->a, &s->m, batch, context, err))
        return -1;
    s->m1 = al_alloc(sizeof(float) * s->m.n_floats);
    s->m2 = al_alloc(sizeof(float) * s->m.n_floats);
    s->in = malloc(sizeof(int) * N);
    s->tg = malloc(sizeof(int) * N);
    if (!s->m1 || !s->m2 || !s->in || !s->tg) return al_errf(err, "out of memory");
    al_rng rng;
    al_rng_seed(&rng, 1);
    for (size_t i = 0; i < N; i++) {
        s->in[i] = (int)(al_rng_u64(&rng) % 256);
        s->tg[i] = (int)(al_rng_u64(&rng) % 256);
    }
    s->batch = (al_lm_batch){.acts = &s->a, .in = s->in, .tg = s->tg};
    return 0;
}

/* Seconds of the fastest of `steps` training steps (after one warm-up), the
 * step of `attnlab bench train` and of the run's own training (al_train_step
 * with its settings), at a tiny learning rate. */
static double speed_train_step(speed_model *s, int steps, al_err *err) {
    const al_step_pass pass = al_lm_step_pass(&s->batch);
    double best = INFINITY;
    /* in the run's precision, with its weights' BF16 copy as in training
     * (attached for this model's turn only: the copies of all five would
     * not fit the table of arenas) */
    const al_precision before = al_precision_now();
    al_precision_set(s->o.precision);
    if (al_train_precision_begin(&s->m, s->o.precision, err)) {
        al_precision_set(before);
        return -1;
    }
    for (int it = 0; it <= steps; it++) {
        double t0 = al_now(), loss, gn;
        al_train_step(&s->m, &pass, s->m1, s->m2, &s->o, 1e-6, it + 1, &loss, &gn); /* timed whatever the loss */
        double dt = al_now() - t0;
        if (it > 0 && dt < best) best = dt;
    }
    al_train_precision_end(&s->m);
    al_precision_set(before);
    return best;
}

int al_study_speed(const char *const *dirs, int n, int batch, int context, int steps, int decode_context,
                   int decode_tokens, int rounds, al_speed *out, al_err *err) {
    speed_model *sm = calloc((size_t)n, sizeof *sm);
    if (!sm) return al_errf(err, "out of memory");
    int rc = 0, opened = 0;
    while (opened < n && !rc) rc = speed_model_open(&sm[opened], dirs[opened], batch, context, decode_context, err), opened++;
    for (int i = 0; i < n; i++) out[i].train_tokens_per_s = out[i].decode_tokens_per_s = 0;
    const int threads = al_threads();
    for (int r = 0; r < rounds && !rc; r++)
        for (int i = 0; i < n && !rc; i++) {
            double dt = speed_train_step(&sm[i], steps > 0 ? steps : 1, err), tps = 0;
            if (dt < 0) {
                rc = al_err_prefix(err, "%s", dirs[i]);
                break;
            }
            out[i].train_tokens_per_s = fmax(out[i].train_tokens_per_s, (double)batch * context / dt);
            /* one thread: a decode step is many small kernels, whose barriers
             * make multi-threaded timings collapse whenever anything else runs */
            al_set_threads(1);
            rc = al_decode_speed(&sm[i].m, decode_context, decode_tokens, &tps, err);
            al_set_threads(threads);
            if (rc) al_err_prefix(err, "%s", dirs[i]);
            out[i].decode_tokens_per_s = fmax(out[i].decode_tokens_per_s, tps);
        }
    for (int i = 0; i < opened; i++) speed_model_free(&sm[i]);
    free(sm);
    return rc;
}

int al_study_measure_vit(const char *dir, int steps, al_vit_measure *out, al_err *err) {
    memset(out, 0, sizeof *out);
    al_model m;
    if (al_model_load(&m, dir, NULL, err)) return -1;
    for (int i = 0; i < m.n_params; i++) out->params += m.params[i].numel;
    int rc = head_ranks(&m, &out->erank_uncentered_pct, &out->erank_pca_pct, &out->mean_offdiag, err);
    al_model_free(&m);
    if (rc) return al_err_prefix(err, "%s", dir);
    /* the final evaluation (all test images of the run's set) is the log's last line */
    char *text;
    size_t len;
    char *path = al_study_join(dir, "log.jsonl", err);
    if (!path) return -1;
    if (al_read_file(path, &text, &len, err)) {
        free(path);
        return -1;
    }
    rc = -1;
    int oom = 0;
    for (char *line = text; line && *line && !oom;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *j = al_json_parse(line, strlen(line), &oom);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step"), *acc, *loss, *cnt;
        acc = cJSON_GetObjectItemCaseSensitive(j, "val_accuracy");
        loss = cJSON_GetObjectItemCaseSensitive(j, "val_loss");
        cnt = cJSON_GetObjectItemCaseSensitive(j, "val_images");
        if (cJSON_IsNumber(s) && s->valueint == steps && cJSON_IsNumber(acc) && cJSON_IsNumber(loss)) {
            out->accuracy = acc->valuedouble;
            out->test_loss = loss->valuedouble;
            out->test_images = cJSON_IsNumber(cnt) ? cnt->valueint : 0;
            rc = 0;
        }
        cJSON_Delete(j);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    out->steps = steps;
    if (oom) rc = al_errf(err, "%s: out of memory", path);
    else if (rc) al_errf(err, "%s: log.jsonl has no final evaluation at step %d", path, steps);
    free(path);
    return rc;
}

/* ---- cached measurements ---- */

/* clang-format off */
#define LM_FIELDS(X)                                                                                  \
    X(params) X(kv_values) X(kv_bytes_per_token) X(kv_pct_of_mha) X(val_loss) X(val_bpb) X(val_tokens) \
    X(erank_uncentered_pct) X(erank_pca_pct) X(mean_offdiag)
#define VIT_FIELDS(X) \
    X(params) X(accuracy) X(test_loss) X(test_images) X(erank_uncentered_pct) X(erank_pca_pct) X(mean_offdiag)
/* clang-format on */

/* Writes a cJSON object built since mark to DIR/measure.json atomically and
 * frees it. */
static int save_measure(const char *dir, cJSON *j, unsigned long mark, al_err *err) {
    char *text = al_json_print(j, 1, mark);
    cJSON_Delete(j);
    char *path = text ? al_study_join(dir, "measure.json", err) : NULL;
    int rc = !text ? al_errf(err, "out of memory") : !path ? -1 : al_write_file_atomic(path, text, strlen(text), err);
    free(text);
    free(path);
    return rc;
}

/* DIR/measure.json if it is of `kind` and `steps`; NULL otherwise (also
 * when out of memory: the run is measured again). */
/* DIR/measure.json as JSON when it is there and of this kind and step count
 * (*got 0); else NULL with *got 1 (no usable cache), or -1 with err when the
 * file is there but could not be read (out of memory, an I/O error). */
static cJSON *load_measure(const char *dir, const char *kind, int steps, int *got, al_err *err) {
    char *text;
    size_t len;
    char *path = al_study_join(dir, "measure.json", err);
    *got = -1;
    if (!path) return NULL;
    const int there = access(path, F_OK) == 0, unread = there && al_read_file(path, &text, &len, err);
    free(path);
    if (unread) return NULL;
    *got = 1;
    if (!there) return NULL;
    int oom;
    cJSON *j = al_json_parse(text, len, &oom);
    free(text);
    if (oom) {
        *got = -1;
        al_errf(err, "%s/measure.json: out of memory", dir);
        return NULL;
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind"), *s = cJSON_GetObjectItemCaseSensitive(j, "steps");
    if (!cJSON_IsString(k) || strcmp(k->valuestring, kind) || !cJSON_IsNumber(s) || s->valueint != steps) {
        cJSON_Delete(j);
        return NULL;
    }
    *got = 0;
    return j;
}

int al_study_measured(int got, const char *dir, al_err *err) {
    return got > 0 ? al_errf(err, "%s: measurements missing", dir) : got;
}

int al_study_save_lm_measure(const char *dir, const al_lm_measure *m, al_err *err) {
    const unsigned long mark = al_json_mark();
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "lm");
    cJSON_AddNumberToObject(j, "steps", m->steps);
#define ADD(f) cJSON_AddNumberToObject(j, #f, (double)m->f);
    LM_FIELDS(ADD)
#undef ADD
    return save_measure(dir, j, mark, err);
}

int al_study_load_lm_measure(const char *dir, int steps, al_lm_measure *m, al_err *err) {
    int got;
    cJSON *j = load_measure(dir, "lm", steps, &got, err);
    if (!j) return got;
    int ok = 1;
    memset(m, 0, sizeof *m);
    m->steps = steps;
/* A field is read where its value converts into the field's type: any finite
 * number for a floating one, a count (size_t, int) from 0 to its largest exact
 * value (converting past the type's range is undefined behaviour, and the
 * file may hold anything). Else the cache is not used. */
#define GET(f)                                                                                                         \
    {                                                                                                                  \
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, #f);                                                      \
        const int floating = (__typeof__(m->f))0.5 != 0;                                                               \
        const double most = sizeof m->f >= 8 ? 0x1p53 : (double)INT_MAX;                                               \
        if (cJSON_IsNumber(v) && isfinite(v->valuedouble) &&                                                           \
            (floating || (v->valuedouble >= 0 && v->valuedouble <= most)))                                             \
            m->f = (__typeof__(m->f))v->valuedouble;                                                                   \
        else                                                                                                           \
            ok = 0;                                                                                                    \
    }
    LM_FIELDS(GET)
    cJSON_Delete(j);
    return ok ? 0 : 1;
}

int al_study_save_vit_measure(const char *dir, const al_vit_measure *m, al_err *err) {
    const unsigned long mark = al_json_mark();
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "vision");
    cJSON_AddNumberToObject(j, "steps", m->steps);
#define ADD(f) cJSON_AddNumberToObject(j, #f, (double)m->f);
    VIT_FIELDS(ADD)
#undef ADD
    return save_measure(dir, j, mark, err);
}

int al_study_load_vit_measure(const char *dir, int steps, al_vit_measure *m, al_err *err) {
    int got;
    cJSON *j = load_measure(dir, "vision", steps, &got, err);
    if (!j) return got;
    int ok = 1;
    memset(m, 0, sizeof *m);
    m->steps = steps;
    VIT_FIELDS(GET)
#undef GET
    cJSON_Delete(j);
    return ok ? 0 : 1;
}

/* ---- Fashion-MNIST subset ---- */

/* Writes one IDX file of unsigned bytes: dims[0..nd) then the data. Kept if
 * a file of exactly that size is already there. */
static int write_idx(const char *path, const uint8_t *data, const int64_t *dims, int nd, al_err *err) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)dims[i];
    struct stat st;
    if (stat(path, &st) == 0 && (size_t)st.st_size == 4 + 4 * (size_t)nd + n) return 0;
    uint8_t *buf = malloc(4 + 4 * (size_t)nd + n);
    if (!buf) return al_errf(err, "out of memory");
    buf[0] = buf[1] = 0;
    buf[2] = 0x08;
    buf[3] = (uint8_t)nd;
    for (int i = 0; i < nd; i++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (uint8_t)((uint64_t)dims[i] >> (24 - 8 * b));
    memcpy(buf + 4 + 4 * nd, data, n);
    int rc = al_write_file_atomic(path, buf, 4 + 4 * (size_t)nd + n, err);
    free(buf);
    return rc;
}

int al_fmnist_write_subset(const char *src_dir, const char *dst_dir, int n_train, int n_test, al_err *err) {
    if (mkdir(dst_dir, 0777) && errno != EEXIST) return al_errf(err, "%s: %s", dst_dir, strerror(errno));
    static const char *const split[2] = {"train", "t10k"};
    const int limit[2] = {n_train, n_test};
    for (int k = 0; k < 2; k++) {
        al_image_set s;
        if (al_fmnist_load(&s, src_dir, split[k], limit[k], err)) return -1;
        /* one channel: [n, S, S] as the original files; else [n, C, S, S] */
        const int64_t grey[3] = {s.n, s.S, s.S}, colour[4] = {s.n, s.C, s.S, s.S}, labels[1] = {s.n};
        char *images = al_sprintf("%s/%s-images-idx3-ubyte", dst_dir, split[k]),
             *labels_path = al_sprintf("%s/%s-labels-idx1-ubyte", dst_dir, split[k]);
        int rc = images && labels_path ? 0 : al_errf(err, "out of memory");
        if (!rc) rc = s.C == 1 ? write_idx(images, s.pixels, grey, 3, err) : write_idx(images, s.pixels, colour, 4, err);
        if (!rc) rc = write_idx(labels_path, s.labels, labels, 1, err);
        free(images);
        free(labels_path);
        al_image_set_free(&s);
        if (rc) return -1;
    }
    return 0;
}
