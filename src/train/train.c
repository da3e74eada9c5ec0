/*
 * train.c: the training loop shared by both tasks (see train.h for the run
 * directory layout) and the language-model task that plugs into it
 * (train_loop.h). One step: the task draws its batch and runs forward and
 * backward -> clip the global gradient norm -> AdamW. Everything that decides
 * the numbers (weights, moments, step, data RNG) is in the training state, so
 * a resumed run repeats an uninterrupted one bit for bit on the same machine
 * and thread count.
 */
#include "train.h"

#include <assert.h>
#include <cJSON.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/io.h"
#include "dist.h"
#include "train_loop.h"

void al_train_opts_default(al_train_opts *o) {
    memset(o, 0, sizeof *o);
    al_config_default(&o->model);
    o->model.intermediate_size = 688;
    o->batch = 8;
    o->context = 256;
    o->steps = 1000;
    o->warmup = 100;
    o->eval_every = 200;
    o->save_every = 500;
    o->eval_tokens = 65536;
    o->lr = 1e-3;
    o->min_lr_ratio = 0.1;
    o->weight_decay = 0.1;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->adam_eps = 1e-8;
    o->grad_clip = 1.0;
    o->val_fraction = 0.05;
    o->seed = 1337;
    o->eval_images = 2000;
}

/* A path field of al_train_opts: what it is called in messages, the value to
 * set (NULL: keep), the field and its size. */
typedef struct path_field {
    const char *what, *value;
    char *field;
    size_t cap;
} path_field;

/* Sets every path of paths[n] whose value is given, or none when one would
 * not fit its field (err names it): a path is never cut. */
static int set_path_fields(const path_field *paths, size_t n, al_err *err) {
    for (size_t i = 0; i < n; i++) /* all checked before any is set */
        if (paths[i].value && strlen(paths[i].value) >= paths[i].cap)
            return al_errf(err, "%s path too long (%zu bytes, at most %zu)", paths[i].what, strlen(paths[i].value),
                           paths[i].cap - 1);
    for (size_t i = 0; i < n; i++)
        if (paths[i].value) memcpy(paths[i].field, paths[i].value, strlen(paths[i].value) + 1);
    return 0;
}

int al_train_opts_set_paths(al_train_opts *o, const char *data, const char *images, const char *out, al_err *err) {
    const path_field paths[] = {{"data", data, o->data, sizeof o->data},
                                {"images", images, o->images, sizeof o->images},
                                {"out", out, o->out, sizeof o->out}};
    return set_path_fields(paths, sizeof paths / sizeof paths[0], err);
}

int al_train_opts_set_init_from(al_train_opts *o, const char *dir, al_err *err) {
    const path_field path = {"init-from", dir, o->init_from, sizeof o->init_from};
    return set_path_fields(&path, 1, err);
}

/* ---- settings as JSON ---- */

#define OPT_INTS(X) X(batch) X(context) X(steps) X(warmup) X(eval_every) X(save_every) X(eval_tokens)
#define OPT_DBLS(X) X(lr) X(min_lr_ratio) X(weight_decay) X(beta1) X(beta2) X(adam_eps) X(grad_clip) X(val_fraction)

char *al_train_opts_to_json(const al_train_opts *o) {
    const unsigned long mark = al_json_mark();
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "data", o->data[0] ? o->data : "default");
#define ADD(f) cJSON_AddNumberToObject(j, #f, (double)o->f);
    OPT_INTS(ADD) OPT_DBLS(ADD)
#undef ADD
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    if (o->shards) cJSON_AddNumberToObject(j, "shards", o->shards); /* absent: chosen by how the run is started */
    cJSON_AddStringToObject(j, "precision", al_precision_name(o->precision));
    if (o->init_from[0]) cJSON_AddStringToObject(j, "init_from", o->init_from); /* absent: trained from scratch */
    if (o->model.task == AL_TASK_VISION) {
        /* the text settings mean nothing to a ViT; its own take their place */
        static const char *const text_only[] = {"data", "context", "eval_tokens", "val_fraction"};
        for (size_t i = 0; i < sizeof text_only / sizeof text_only[0]; i++)
            cJSON_DeleteItemFromObjectCaseSensitive(j, text_only[i]);
        cJSON_AddStringToObject(j, "images", o->images[0] ? o->images : "default");
        cJSON_AddNumberToObject(j, "train_subset", o->train_subset);
        cJSON_AddNumberToObject(j, "eval_images", o->eval_images);
    }
    char *s = al_json_print(j, 0, mark);
    cJSON_Delete(j);
    return s;
}

int al_train_opts_from_json(al_train_opts *o, const char *json, al_err *err) {
    int oom;
    cJSON *j = al_json_parse(json, strlen(json), &oom);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return al_errf(err, oom ? "training settings: out of memory" : "training settings are not a JSON object");
    }
    const cJSON *v;
    int rc = 0;
#define GET_INT(f)                                                                     \
    if ((v = cJSON_GetObjectItemCaseSensitive(j, #f))) {                               \
        if (!al_json_whole_in(v, INT_MIN, INT_MAX))                                    \
            rc = al_errf(err, "training setting '%s' must be an integer", #f);         \
        else                                                                           \
            o->f = (int)v->valuedouble;                                                \
    }
#define GET_DBL(f)                                                                           \
    if ((v = cJSON_GetObjectItemCaseSensitive(j, #f))) {                                     \
        if (!cJSON_IsNumber(v)) rc = al_errf(err, "training setting '%s' must be a number", #f); \
        else o->f = v->valuedouble;                                                          \
    }
    OPT_INTS(GET_INT) OPT_DBLS(GET_DBL) GET_INT(shards) GET_INT(train_subset) GET_INT(eval_images) /* ViT's */
#undef GET_INT
#undef GET_DBL
    /* saved as a double: any seed below 2^64 that a double holds (18446744073709551616.0 is 2^64 itself) */
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "seed"))) {
        if (!al_json_whole_in(v, 0.0, 18446744073709549568.0))
            rc = al_errf(err, "training setting 'seed' must be a whole number in 0..2^64-1");
        else o->seed = (uint64_t)v->valuedouble;
    }
    /* absent: a run of before --precision, trained in F32 */
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "precision")) &&
        (!cJSON_IsString(v) || !strcmp(v->valuestring, "auto") || al_precision_from_name(v->valuestring, &o->precision)))
        rc = al_errf(err, "training setting 'precision' must be \"F32\" or \"BF16\"");
    /* the paths ("default": the built-in corpus or image directory) */
    const char *path[2] = {NULL, NULL};
    static const char *const path_keys[2] = {"data", "images"};
    for (int i = 0; i < 2; i++)
        if ((v = cJSON_GetObjectItemCaseSensitive(j, path_keys[i])) && cJSON_IsString(v))
            path[i] = strcmp(v->valuestring, "default") ? v->valuestring : "";
    if (al_train_opts_set_paths(o, path[0], path[1], NULL, err)) rc = -1;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "init_from")) &&
        (!cJSON_IsString(v) || al_train_opts_set_init_from(o, v->valuestring, err)))
        rc = cJSON_IsString(v) ? -1 : al_errf(err, "training setting 'init_from' must be a string");
    cJSON_Delete(j);
    return rc;
}

int al_run_load_opts(const char *dir, al_train_opts *o, al_err *err) {
    char *extra = NULL;
    al_train_opts_default(o);
    if (al_train_opts_set_paths(o, NULL, NULL, dir, err)) return -1;
    char *path = al_sprintf("%s/config.json", dir);
    if (!path) return al_errf(err, "out of memory");
    if (al_config_load(&o->model, path, &extra, err)) {
        free(path);
        return -1;
    }
    char *text;
    int rc = al_json_member_text(extra, "train", &text, err);
    free(extra);
    if (rc) al_err_prefix(err, "%s", path);
    else if (text) rc = al_train_opts_from_json(o, text, err);
    else rc = al_errf(err, "%s: no training settings (not a run directory of attnlab train)", path);
    free(text);
    free(path);
    return rc ? al_err_is_oom(err) ? -1 : -2 : 0;
}

double al_lr_at(const al_train_opts *o, int step) {
    if (step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
    int decay_steps = o->steps - o->warmup;
    double frac = decay_steps > 0 ? (double)(step - o->warmup) / (double)decay_steps : 1.0;
    if (frac > 1) frac = 1;
    double min_lr = o->lr * o->min_lr_ratio;
    return min_lr + 0.5 * (o->lr - min_lr) * (1.0 + cos(M_PI * frac));
}

/* ---- evaluation ---- */

/* B windows of T predictions starting at token `start`: prediction i (i <
 * n_pred) reads ids[i] and targets ids[i + 1]; past n_pred the inputs are 0
 * and the targets -1 (ignored). One definition of how eval and the
 * conversion's calibration cut a token stream into windows. */
size_t al_eval_windows(const int *ids, size_t n_pred, size_t start, int B, int T, int *in, int *tg) {
    size_t count = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t i = start + (size_t)b * T + (size_t)t; /* predicts token i+1 from tokens <= i in its window */
            const int ok = i < n_pred;
            in[b * T + t] = ok ? ids[i] : 0;
            if (tg) tg[b * T + t] = ok ? ids[i + 1] : -1;
            count += (size_t)ok;
        }
    return count;
}

int al_eval_ids(const al_model *m, al_acts *a, const int *ids, size_t n, size_t max_tokens, double *loss,
                size_t *count, al_err *err) {
    const int B = a->B, T = a->T;
    size_t n_pred = n > 0 ? n - 1 : 0;
    if (max_tokens && n_pred > max_tokens) n_pred = max_tokens;
    if (n_pred == 0) return al_errf(err, "nothing to evaluate (fewer than 2 tokens)");
    int *in = malloc(sizeof(int) * (size_t)B * T), *tg = malloc(sizeof(int) * (size_t)B * T);
    if (!in || !tg) {
        free(in);
        free(tg);
        return al_errf(err, "out of memory");
    }
    double sum = 0;
    for (size_t done = 0; done < n_pred; done += (size_t)B * T) {
        const size_t batch_count = al_eval_windows(ids, n_pred, done, B, T, in, tg);
        sum += al_model_forward(m, a, in, tg) * (double)batch_count;
    }
    free(in);
    free(tg);
    *count = n_pred;
    *loss = sum / (double)n_pred;
    return 0;
}

int al_eval_bytes(const al_model *m, al_acts *a, const uint8_t *bytes, size_t n, size_t max_tokens, double *loss,
                  size_t *count, al_err *err) {
    size_t n_pred = n > 0 ? n - 1 : 0;
    if (max_tokens && n_pred > max_tokens) n_pred = max_tokens;
    if (n_pred == 0) return al_errf(err, "nothing to evaluate (fewer than 2 bytes)");
    int *ids = malloc(sizeof(int) * (n_pred + 1)); /* the bytes the windows read, as token ids */
    if (!ids) return al_errf(err, "out of memory");
    int rc = 0;
    for (size_t i = 0; i <= n_pred && !rc; i++)
        if ((ids[i] = bytes[i]) >= m->cfg.vocab_size)
            rc = al_errf(err, "byte %d is not a token of this model's %d-token vocabulary", bytes[i], m->cfg.vocab_size);
    if (!rc) rc = al_eval_ids(m, a, ids, n_pred + 1, 0, loss, count, err);
    free(ids);
    return rc;
}

/* ---- checkpoints ---- */

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

static int save_state(const al_model *m, const float *mom1, const float *mom2, int step, const al_rng *rng,
                      const char *dir, al_err *err) {
    char meta_step[32], meta_rng[4][24]; /* an int; 16 hex digits */
    snprintf(meta_step, sizeof meta_step, "%d", step);
    for (int i = 0; i < 4; i++) snprintf(meta_rng[i], sizeof meta_rng[i], "%016" PRIx64, rng->s[i]);
    const char *meta[] = {"step", meta_step, "rng0", meta_rng[0], "rng1", meta_rng[1],
                          "rng2", meta_rng[2], "rng3", meta_rng[3]};
    al_st_out_tensor t[3] = {
        {"weights", m->w, 1, {(int64_t)m->n_floats}},
        {"adam.m", mom1, 1, {(int64_t)m->n_floats}},
        {"adam.v", mom2, 1, {(int64_t)m->n_floats}},
    };
    char *path = al_sprintf("%s/train_state.safetensors", dir);
    if (!path) return al_errf(err, "out of memory");
    int rc = al_st_write_f32(path, t, 3, meta, 5, err);
    free(path);
    return rc;
}

/* Finds "key": "value" in a safetensors file's __metadata__ (we wrote it);
 * a value that does not fit out[cap] is refused, not cut. */
static int state_meta(const char *path, const char *key, char *out, size_t cap, al_err *err) {
    char *blob;
    size_t len;
    if (al_read_file(path, &blob, &len, err)) return -1;
    uint64_t hl = 0;
    if (len >= 8) memcpy(&hl, blob, 8);
    int rc = -1;
    if (len < 8 || hl > len - 8) {
        al_errf(err, "%s: truncated training state", path);
    } else {
        int oom;
        cJSON *j = al_json_parse(blob + 8, (size_t)hl, &oom);
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "__metadata__");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, key);
        if (oom) {
            al_errf(err, "%s: out of memory", path);
        } else if (cJSON_IsString(v) && strlen(v->valuestring) < cap) {
            memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
            rc = 0;
        } else if (cJSON_IsString(v)) {
            al_errf(err, "%s: training state's '%s' is too long (%zu bytes)", path, key, strlen(v->valuestring));
        } else {
            al_errf(err, "%s: training state lacks '%s'", path, key);
        }
        cJSON_Delete(j);
    }
    free(blob);
    return rc;
}

/* The weights, moments, step and data RNG of a training state file (w, mom1,
 * mom2: n floats each). */
static int load_state_file(float *w, float *mom1, float *mom2, size_t n, int *step, al_rng *rng, const char *path,
                           al_err *err) {
    char buf[64];
    al_st_file f;
    if (al_st_open(&f, path, err)) return -1;
    int64_t shape[1] = {(int64_t)n};
    int rc = al_st_read_f32(&f, "weights", w, 1, shape, err) || al_st_read_f32(&f, "adam.m", mom1, 1, shape, err) ||
             al_st_read_f32(&f, "adam.v", mom2, 1, shape, err);
    al_st_close(&f);
    if (rc) return al_err_prefix(err, "%s", path);
    long v;
    if (state_meta(path, "step", buf, sizeof buf, err)) return -1;
    if (al_parse_int(buf, &v) || v < 0) return al_errf(err, "%s: bad step in training state", path);
    *step = (int)v;
    static const char *const rng_keys[4] = {"rng0", "rng1", "rng2", "rng3"};
    for (int i = 0; i < 4; i++) {
        if (state_meta(path, rng_keys[i], buf, sizeof buf, err)) return -1;
        rng->s[i] = strtoull(buf, NULL, 16);
    }
    return 0;
}

/* The "attnlab" block of a run's config.json: its training settings and
 * step (malloc'd; NULL and err filled when out of memory). */
static char *run_block(const al_train_opts *o, int step, al_err *err) {
    char *train_json = al_train_opts_to_json(o);
    char *block = train_json ? al_sprintf("{\"train\": %s, \"step\": %d}", train_json, step) : NULL;
    free(train_json);
    if (!block) al_errf(err, "out of memory");
    return block;
}

/* A checkpoint: model.safetensors and config.json, then the training state.
 * Each file is replaced atomically; the training state goes last because it
 * is what --resume continues from: a save that fails (a full disk) or is
 * killed part-way leaves the previous state, so the resumed run redoes the
 * steps since then and writes all three again. (State first, a failed model
 * write at the last step would leave a run that resume calls complete with
 * the previous step's model.) */
static int save_checkpoint(const al_model *m, const al_train_opts *o, const float *m1, const float *m2, int step,
                           const al_rng *rng, al_err *err) {
    char *extra = run_block(o, step, err);
    int rc = !extra || al_model_save(m, o->out, extra, err) || save_state(m, m1, m2, step, rng, o->out, err);
    free(extra);
    return rc ? -1 : 0;
}

/* Keeps the log lines of steps <= step (a resumed run rewrites the rest). */
static int trim_log(const char *path, int step, al_err *err) {
    char *text;
    size_t len;
    if (access(path, F_OK) != 0) return 0;
    if (al_read_file(path, &text, &len, err)) return -1;
    char *out = malloc(len + 1);
    if (!out) {
        free(text);
        return al_errf(err, "out of memory");
    }
    size_t n = 0;
    for (char *line = text; line < text + len;) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t ll = nl ? (size_t)(nl - line) + 1 : (size_t)(text + len - line);
        const char *s = strstr(line, "\"step\":");
        long st = s && s < line + ll ? strtol(s + 7, NULL, 10) : -1;
        if (st >= 0 && st <= step && nl) {
            memcpy(out + n, line, ll);
            n += ll;
        }
        line += ll;
    }
    int rc = al_write_file_atomic(path, out, n, err);
    free(out);
    free(text);
    return rc;
}

int al_train_resume_read(float *w, float *m1, float *m2, size_t n, int *step, al_rng *rng, const char *dir,
                         al_err *err) {
    char *state = al_sprintf("%s/train_state.safetensors", dir), *log = al_sprintf("%s/log.jsonl", dir);
    int rc = state && log ? 0 : al_errf(err, "out of memory");
    if (!rc) rc = load_state_file(w, m1, m2, n, step, rng, state, err) || trim_log(log, *step, err) ? -1 : 0;
    free(state);
    free(log);
    return rc;
}

/* ---- the loop ---- */

/* What a diverged run leaves behind, for its error message. */
static const char *kept_msg(char *buf, size_t cap, int last_saved) {
    if (last_saved < 0) snprintf(buf, cap, "no checkpoint was saved yet (lower --lr?)");
    else snprintf(buf, cap, "the last good checkpoint (step %d) is kept (continue it with --resume and a lower --lr)",
                  last_saved);
    return buf;
}

/* What a run that lost a rank leaves behind, for its error message. */
static const char *stopped_msg(char *buf, size_t cap, int last_saved) {
    if (last_saved < 0) snprintf(buf, cap, "no checkpoint was saved yet");
    else snprintf(buf, cap, "the checkpoint of step %d is kept (--resume continues it on any rank count)", last_saved);
    return buf;
}

int al_adamw_update(al_model *m, float *m1, float *m2, double lr, const al_train_opts *o, int t, float gscale) {
    enum { CHUNK = 4096 }; /* weights updated, then rounded to the BF16 copy while in L1 */
    const float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->adam_eps;
    const float bc1 = (float)(1.0 - pow(o->beta1, t)), bc2 = (float)(1.0 - pow(o->beta2, t));
    uint16_t *const copy = al_bf16_shadow_write(m->w); /* BF16 training: the products' copy of the weights */
    int bad_tensors = 0;
    for (int i = 0; i < m->n_params; i++) {
        const al_param *p = &m->params[i];
        float *w = m->w + p->offset, *g = m->g + p->offset, *a = m1 + p->offset, *b = m2 + p->offset;
        uint16_t *wb = copy ? copy + p->offset : NULL;
        const float wd = p->decay ? (float)o->weight_decay : 0.0f, flr = (float)lr;
        const size_t n = p->numel;
        const long chunks = (long)((n + CHUNK - 1) / CHUNK);
        int bad = 0; /* a weight left inf or nan: |w| <= FLT_MAX is false for both (vectorises, unlike isfinite) */
#pragma omp parallel for schedule(static) reduction(| : bad) if (n > 32768)
        for (long c = 0; c < chunks; c++) {
            const size_t j0 = (size_t)c * CHUNK, j1 = n - j0 < CHUNK ? n : j0 + CHUNK;
            for (size_t j = j0; j < j1; j++) {
                float gj = g[j] * gscale;
                a[j] = b1 * a[j] + (1.0f - b1) * gj;
                b[j] = b2 * b[j] + (1.0f - b2) * gj * gj;
                float mh = a[j] / bc1, vh = b[j] / bc2;
                w[j] -= flr * (mh / (sqrtf(vh) + eps) + wd * w[j]);
                bad |= !(fabsf(w[j]) <= FLT_MAX);
            }
            if (wb) al_bf16_round_stream(wb + j0, w + j0, j1 - j0); /* read back next step, from memory */
        }
        bad_tensors += bad;
    }
    return bad_tensors;
}

/* The gradient's 2-norm. The parameters tile the arena (model.c), so it is
 * summed whole: in blocks whose size follows from the arena's alone, each
 * in eight double lanes (a loop gcc vectorises, and no single chain of
 * additions, which made this a serial 4 cycles per weight: 2 % of a gpt2
 * step), the blocks' sums added in block order. Parallel, and the same
 * bits for any thread count. */
double al_grad_norm(const al_model *m) {
    enum { LANES = 8, MAX_BLOCKS = 1024, MIN_BLOCK = 1 << 14 };
    assert(!m->grads_unset); /* a backward ran after al_model_zero_grads */
    const size_t n = m->n_floats;
    size_t blk = (n + MAX_BLOCKS - 1) / MAX_BLOCKS;
    blk = blk < MIN_BLOCK ? MIN_BLOCK : (blk + LANES - 1) / LANES * LANES;
    const long blocks = (long)((n + blk - 1) / blk);
    double part[MAX_BLOCKS];
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (long b = 0; b < blocks; b++) {
        const float *g = m->g + (size_t)b * blk;
        const size_t len = n - (size_t)b * blk < blk ? n - (size_t)b * blk : blk;
        double lane[LANES] = {0};
        size_t j = 0;
        for (; j + LANES <= len; j += LANES)
            for (int l = 0; l < LANES; l++) lane[l] += (double)g[j + l] * g[j + l];
        for (; j < len; j++) lane[0] += (double)g[j] * g[j];
        double s = 0;
        for (int l = 0; l < LANES; l++) s += lane[l];
        part[b] = s;
    }
    double total = 0;
    for (long b = 0; b < blocks; b++) total += part[b];
    return sqrt(total);
}

int al_train_precision_begin(al_model *m, al_precision p, al_err *err) {
    return p == AL_PREC_BF16 ? al_bf16_shadow_attach(m->w, m->n_floats, err) : 0;
}

void al_train_precision_end(al_model *m) { al_bf16_shadow_detach(m->w); }

int al_train_step(al_model *m, const al_step_pass *pass, float *m1, float *m2, const al_train_opts *o, double lr,
                  int t, double *loss, double *grad_norm) {
    al_model_zero_grads(m);
    *grad_norm = NAN;
    *loss = pass->forward(pass->ctx, m);
    if (!isfinite(*loss)) return AL_STEP_LOSS_NOT_FINITE;
    pass->backward(pass->ctx, m);
    const double gn = *grad_norm = al_grad_norm(m);
    if (!isfinite(gn)) return AL_STEP_GRAD_NOT_FINITE;
    const float gscale = gn > o->grad_clip && o->grad_clip > 0 ? (float)(o->grad_clip / gn) : 1.0f;
    const int weights_bad = al_adamw_update(m, m1, m2, lr, o, t, gscale); /* and the weights' BF16 copy */
    return weights_bad ? AL_STEP_WEIGHTS_NOT_FINITE : AL_STEP_OK;
}

static double lm_batch_forward(void *ctx, al_model *m) {
    al_lm_batch *b = ctx;
    return al_model_forward(m, b->acts, b->in, b->tg);
}

static void lm_batch_backward(void *ctx, al_model *m) { al_model_backward(m, ((al_lm_batch *)ctx)->acts); }

al_step_pass al_lm_step_pass(al_lm_batch *b) {
    return (al_step_pass){.ctx = b, .forward = lm_batch_forward, .backward = lm_batch_backward};
}

void al_lm_select_shard(void *ctx, int shard, int n) {
    al_lm_shards *s = ctx;
    const size_t first = (size_t)shard * (size_t)(s->B / n) * (size_t)s->T;
    s->batch->in = s->in + first;
    s->batch->tg = s->tg + first;
}

/* The weights of the run in dir (its model.safetensors) into m: where an
 * uptraining run starts. */
static int load_init_weights(al_model *m, const char *dir, al_err *err) {
    char *path = al_sprintf("%s/model.safetensors", dir);
    if (!path) return al_errf(err, "out of memory");
    int rc = al_model_load_weights(m, path, err);
    free(path);
    return rc ? al_err_prefix(err, "initial weights") : 0;
}

/* The state a run starts from at step 0: moments zero, the data RNG from
 * the seed, the weights from the seed or, for --init-from, from that run. */
static int fresh_state(al_model *m, float *mom1, float *mom2, int *step, al_rng *rng, const al_train_opts *o,
                       al_err *err) {
    memset(mom1, 0, sizeof(float) * m->n_floats);
    memset(mom2, 0, sizeof(float) * m->n_floats);
    al_rng_seed(rng, o->seed ^ 0xda7aULL);
    *step = 0;
    if (o->init_from[0]) return load_init_weights(m, o->init_from, err);
    al_model_init_weights(m, o->seed);
    return 0;
}

/* The state to resume from. A run stopped (killed, or failed to write)
 * before its first training state was saved (save_checkpoint writes it
 * last, so model.safetensors may exist) starts again from step 0, its log
 * cut to what step 0 wrote: training is deterministic, so it repeats the
 * same steps to where it was. */
static int load_state(al_model *m, float *mom1, float *mom2, int *step, al_rng *rng, const al_train_opts *o,
                      const char *log_path, al_err *err) {
    char *path = al_sprintf("%s/train_state.safetensors", o->out);
    int rc = 0;
    if (!path) rc = al_errf(err, "out of memory");
    else if (access(path, F_OK) != 0 && errno == ENOENT)
        rc = fresh_state(m, mom1, mom2, step, rng, o, err) || trim_log(log_path, 0, err) ? -1 : 0;
    else rc = al_train_resume_read(m->w, mom1, mom2, m->n_floats, step, rng, o->out, err);
    free(path);
    return rc;
}

/* A language model's loss in bits per byte of text (NAN for vision). */
static double val_bpb(const al_task_hooks *h, double loss) {
    return h->val_bytes_per_token > 0 ? loss / M_LN2 / h->val_bytes_per_token : NAN;
}

/* An evaluation's fields of a log line (after its other fields); -1 when
 * a write failed (errno says why). */
static int log_eval(FILE *log, const al_task_hooks *h, double loss, double acc, size_t count) {
    if (h->vision) return fprintf(log, ",\"val_loss\":%.6f,\"val_accuracy\":%.6f,\"val_images\":%zu", loss, acc, count) < 0 ? -1 : 0;
    int ok = fprintf(log, ",\"val_loss\":%.6f,\"val_bpb\":%.6f", loss, val_bpb(h, loss)) >= 0;
    if (h->tokenized) ok &= fprintf(log, ",\"val_tokens\":%zu", count) >= 0;
    return ok ? 0 : -1;
}

/* The first log line of a run started from another run's weights: step 0,
 * the source and its evaluation on this run's data. */
static int log_init_line(FILE *log, const al_train_opts *o, const al_task_hooks *h, const al_train_progress *p,
                         al_err *err) {
    const unsigned long mark = al_json_mark();
    cJSON *src = cJSON_CreateString(o->init_from);
    char *quoted = al_json_print(src, 0, mark);
    cJSON_Delete(src);
    if (!quoted) return al_errf(err, "out of memory");
    int ok = fprintf(log, "{\"step\":0,\"init_from\":%s,\"precision\":\"%s\"", quoted, al_precision_name(o->precision)) >= 0;
    free(quoted);
    ok &= log_eval(log, h, p->val_loss, p->val_accuracy, p->val_count) == 0;
    ok &= fprintf(log, "}\n") >= 0;
    return ok && fflush(log) == 0 ? 0 : al_errf(err, "log.jsonl: %s", strerror(errno ? errno : EIO));
}

/* Hands p to the run's progress callback, if it has one. */
static void report(const al_train_opts *o, const al_train_progress *p) {
    if (o->on_step && al_dist_rank() == 0) o->on_step(p, o->on_step_ctx); /* rank 0 speaks for an MPI job */
}

int al_train_loop(al_train_opts *o, al_model *m, const al_task_hooks *h, al_err *err) {
    float *m1 = NULL, *m2 = NULL;
    FILE *log = NULL;
    int result = AL_TRAIN_ERROR, step = 0;
    al_rng rng;
    char *log_path = NULL, *config_path = NULL, *extra = NULL;
    struct sigaction sa = {0}, old_int, old_term;
    al_grad_shards shards = {0};
    const int lead = al_dist_rank() == 0; /* under mpirun rank 0 alone writes the run directory */
    const al_precision mode_before = al_precision_now();

    al_precision_set(o->precision);
    m1 = al_alloc(sizeof(float) * m->n_floats);
    m2 = al_alloc(sizeof(float) * m->n_floats);
    log_path = al_sprintf("%s/log.jsonl", o->out);
    config_path = al_sprintf("%s/config.json", o->out);
    if (!m1 || !m2 || !log_path || !config_path) {
        al_errf(err, "out of memory");
        goto done;
    }
    if (al_dist_check_run(o, m, h->data_hash, err) ||
        al_grad_shards_init(&shards, m, &h->pass, h->select, h->ctx, al_dist_shards(o), o->batch, err))
        goto done;
    /* what writers killed mid-checkpoint left (a kill -9 skips their clean-up) */
    if (lead && al_afile_remove_stale(o->out, NULL, err)) goto done;
    if (o->resume) {
        int failed = lead && load_state(m, m1, m2, &step, &rng, o, log_path, err);
        if (al_dist_share_state(&failed, m, m1, m2, &step, &rng, err)) goto done;
        /* a new schedule is the run's from here on: config.json says so at once (a kill before the next
         * checkpoint resumes with it too) */
        if (o->schedule_changed && lead &&
            (!(extra = run_block(o, step, err)) || al_config_save(&m->cfg, config_path, extra, err)))
            goto done;
    } else if (o->init_from[0]) { /* another run's weights, read by rank 0 and shared */
        int failed = lead && fresh_state(m, m1, m2, &step, &rng, o, err);
        if (al_dist_share_state(&failed, m, m1, m2, &step, &rng, err)) goto done;
    } else if (fresh_state(m, m1, m2, &step, &rng, o, err)) { /* from the seed: cannot fail */
        goto done;
    }
    if (!o->resume) {
        if (lead) unlink(log_path);
        /* config.json right away, so a run killed before its first checkpoint is still identifiable */
        if (!(extra = run_block(o, 0, err)) || (lead && al_config_save(&m->cfg, config_path, extra, err))) goto done;
    }
    /* after init or resume: the copy is rounded from the weights the next step starts from */
    if (al_train_precision_begin(m, o->precision, err)) goto done;
    log = fopen(lead ? log_path : "/dev/null", "a"); /* the other ranks' log lines go nowhere */
    if (!log) {
        al_errf(err, "%s: %s", log_path, strerror(errno));
        goto done;
    }
    if (o->resume && o->schedule_changed && /* the change of schedule, in the log at the step it applies from */
        fprintf(log, "{\"step\":%d,\"schedule\":{\"lr\":%.6g,\"warmup\":%d,\"min_lr_ratio\":%.6g,\"steps\":%d}}\n",
                step, o->lr, o->warmup, o->min_lr_ratio, o->steps) < 0) {
        al_errf(err, "%s: %s", log_path, strerror(errno ? errno : EIO));
        goto done;
    }

    al_train_progress init_eval = {.val_loss = NAN, .val_accuracy = NAN, .val_bpb = NAN};
    if (!o->resume && o->init_from[0]) { /* where the run starts: the source's loss on this run's data */
        init_eval.evaluated = 1;
        if (lead && (h->evaluate(h->ctx, m, 0, 0, &init_eval.val_loss, &init_eval.val_accuracy, &init_eval.val_count,
                                 err) ||
                     log_init_line(log, o, h, &init_eval, err)))
            goto done;
        init_eval.val_bpb = val_bpb(h, init_eval.val_loss);
    }

    stop_signal = 0;
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    al_dist_watch(&stop_signal); /* a rank that dies: mpirun signals the others, which then stop waiting */

    al_train_progress p = {.event = AL_TRAIN_STARTED, .opts = o, .vision = h->vision, .step = step,
                           .start_step = step, .result = AL_TRAIN_OK, .tokenized = h->tokenized};
    p.evaluated = init_eval.evaluated, p.val_count = init_eval.val_count;
    p.val_loss = init_eval.val_loss, p.val_accuracy = init_eval.val_accuracy, p.val_bpb = init_eval.val_bpb;
    report(o, &p);
    double t_start = al_now(), ema_dt = 0;
    int start_step = step, last_saved = o->resume ? step : -1;
    char kept[128];
    result = AL_TRAIN_OK;
    while (step < o->steps) {
        double t0 = al_now();
        double lr = al_lr_at(o, step), loss, gn;
        h->draw(h->ctx, m, &rng, step);
        int bad = al_train_step(m, &shards.pass, m1, m2, o, lr, step + 1, &loss, &gn);
        if (shards.failed) {
            result = AL_TRAIN_ERROR;
            al_errf(err, "%s; %s", shards.err.msg, stopped_msg(kept, sizeof kept, last_saved));
            break;
        }
        if (bad == AL_STEP_LOSS_NOT_FINITE) {
            result = AL_TRAIN_ERROR;
            al_errf(err, "training diverged: loss is %s at step %d; %s", isnan(loss) ? "nan" : "inf", step + 1,
                    kept_msg(kept, sizeof kept, last_saved));
            break;
        }
        if (bad == AL_STEP_GRAD_NOT_FINITE) {
            result = AL_TRAIN_ERROR;
            al_errf(err, "training diverged: gradient norm is not finite at step %d; %s", step + 1,
                    kept_msg(kept, sizeof kept, last_saved));
            break;
        }
        if (bad == AL_STEP_WEIGHTS_NOT_FINITE) { /* not saved: the checkpoint on disk stays the last good one */
            result = AL_TRAIN_ERROR;
            al_errf(err, "training diverged: weights are not finite after step %d (lr %.3g); %s", step + 1, lr,
                    kept_msg(kept, sizeof kept, last_saved));
            break;
        }
        step++;
        double dt = al_now() - t0;
        ema_dt = step == start_step + 1 ? dt : 0.9 * ema_dt + 0.1 * dt;
        double tps = h->tokens_per_step / dt, ips = h->items_per_step / dt;

        int do_eval = (o->eval_every > 0 && step % o->eval_every == 0) || step == o->steps;
        double val_loss = NAN, val_acc = NAN;
        size_t val_count = 0;
        if (do_eval && lead && h->evaluate(h->ctx, m, step, step == o->steps, &val_loss, &val_acc, &val_count, err)) {
            result = AL_TRAIN_ERROR;
            break;
        }
        /* every piece checked: a full disk must stop the run, not silently drop its log */
        int logged = fprintf(log, "{\"step\":%d,\"train_loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"tokens_per_s\":%.1f,",
                             step, loss, lr, gn, tps) >= 0;
        if (h->vision) logged &= fprintf(log, "\"images_per_s\":%.2f,", ips) >= 0;
        logged &= fprintf(log, "\"mfu_flops_per_s\":%.4g,\"elapsed_s\":%.3f,\"precision\":\"%s\"", h->flops_per_step / dt,
                          al_now() - t_start, al_precision_name(o->precision)) >= 0;
        if (al_dist_active()) logged &= fprintf(log, ",\"ranks\":%d,\"comm_s\":%.6f", al_dist_size(), shards.comm_s) >= 0;
        if (do_eval) logged &= log_eval(log, h, val_loss, val_acc, val_count) == 0;
        logged &= fprintf(log, "}\n") >= 0;
        if (!(logged && fflush(log) == 0)) {
            result = AL_TRAIN_ERROR;
            al_errf(err, "%s: %s; %s", log_path, strerror(errno ? errno : EIO), stopped_msg(kept, sizeof kept, last_saved));
            break;
        }

        p.event = AL_TRAIN_STEPPED;
        p.step = step;
        p.loss = loss, p.lr = lr, p.grad_norm = gn;
        p.tokens_per_s = tps, p.items_per_s = ips;
        p.eta_s = ema_dt * (o->steps - step);
        p.evaluated = do_eval;
        p.val_loss = val_loss, p.val_accuracy = val_acc, p.val_count = val_count;
        p.val_bpb = val_bpb(h, val_loss);
        report(o, &p);

        int signalled = stop_signal; /* read once: a signal between two reads must not skip the save */
        if (al_dist_max(signalled, &signalled, err)) { /* every rank stops at the same step */
            result = AL_TRAIN_ERROR;
            const al_err why = *err;
            al_errf(err, "%s after step %d; %s", why.msg, step, stopped_msg(kept, sizeof kept, last_saved));
            break;
        }
        int do_save = (o->save_every > 0 && step % o->save_every == 0) || step == o->steps || signalled;
        if (do_save) {
            if (lead && save_checkpoint(m, o, m1, m2, step, &rng, err)) {
                result = AL_TRAIN_ERROR;
                break;
            }
            last_saved = step;
        }
        if (signalled) {
            result = signalled == SIGTERM ? AL_TRAIN_TERMINATED : AL_TRAIN_INTERRUPTED;
            break;
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    al_dist_watch(NULL);
    /* A signal that arrived after the last step's check (e.g. during its
     * checkpoint write) must still stop the caller: the run itself is complete. */
    if (result == AL_TRAIN_OK && stop_signal) {
        p.signal_after_last = 1;
        result = stop_signal == SIGTERM ? AL_TRAIN_TERMINATED : AL_TRAIN_INTERRUPTED;
    }
    p.event = AL_TRAIN_STOPPED;
    p.step = step;
    p.result = result;
    report(o, &p);
done:
    al_train_precision_end(m);
    al_precision_set(mode_before);
    if (log && fclose(log) != 0 && result != AL_TRAIN_ERROR) { /* its last lines may not have been written */
        result = AL_TRAIN_ERROR;
        al_errf(err, "%s: %s", log_path, strerror(errno ? errno : EIO));
    }
    al_grad_shards_free(&shards);
    free(log_path);
    free(config_path);
    free(extra);
    al_free(m1);
    al_free(m2);
    return result;
}

/* ---- the language-model task ---- */

typedef struct lm_task {
    const al_train_opts *o;
    al_token_data data; /* the corpus as token ids */
    al_acts acts, eval_acts;
    int *batch_in, *batch_tg;
    al_lm_batch batch;   /* acts (sized for one shard), a shard of batch_in, batch_tg */
    al_lm_shards shards; /* batch over batch_in, batch_tg */
} lm_task;

/* The step's pass over shard `shard` of n (al_task_hooks.select). */
static void lm_select(void *ctx, int shard, int n) { al_lm_select_shard(&((lm_task *)ctx)->shards, shard, n); }

/* B random windows of the training split (rng: the training state's). */
static void lm_draw(void *ctx, const al_model *m, al_rng *rng, int step) {
    lm_task *t = ctx;
    (void)m, (void)step;
    al_sample_batch(t->data.ids, 0, t->data.n_train, t->o->batch, t->o->context, rng, t->batch_in, t->batch_tg);
}

/* Loss over (at most eval_tokens of) the validation split. */
static int lm_evaluate(void *ctx, const al_model *m, int step, int final, double *loss, double *acc, size_t *count,
                       al_err *err) {
    lm_task *t = ctx;
    (void)step, (void)final;
    *acc = NAN;
    return al_eval_ids(m, &t->eval_acts, t->data.ids + t->data.n_train, t->data.n - t->data.n_train,
                       (size_t)t->o->eval_tokens, loss, count, err);
}

/* Text bytes per prediction of every evaluation (it always covers the same
 * first eval_tokens predictions of the validation split): 1 for bytes. */
static int lm_val_bytes_per_token(const lm_task *t, double *ratio, al_err *err) {
    const size_t n_val = t->data.n - t->data.n_train, max = (size_t)t->o->eval_tokens;
    const size_t count = max && n_val - 1 > max ? max : n_val - 1;
    size_t bytes;
    if (al_predicted_bytes(t->data.tok, t->data.ids + t->data.n_train, count, &bytes, err)) return -1;
    *ratio = bytes ? (double)bytes / (double)count : NAN;
    return 0;
}

int al_train(al_train_opts *o, al_err *err) {
    if (o->model.task == AL_TASK_VISION) return al_train_vision(o, err);
    al_model m = {0};
    lm_task t = {.o = o};
    int result = AL_TRAIN_ERROR;
    const int lead = al_dist_rank() == 0;

    if (o->batch <= 0 || o->context <= 0 || o->steps <= 0 || o->warmup < 0 || o->eval_every < 0 || o->save_every < 0)
        return al_errf(err, "invalid training settings: batch, context and steps must be positive");
    if (!(o->lr > 0) || !isfinite(o->lr)) return al_errf(err, "invalid training settings: lr must be positive");
    if (o->context > o->model.max_position) o->model.max_position = o->context;
    if (mkdir(o->out, 0777) && errno != EEXIST)
        return al_errf(err, "%s: cannot create output directory: %s", o->out, strerror(errno));
    /* an uptraining run starts with its source's tokenizer (read from there, and copied: the run's own from then on) */
    const int fresh_init = o->init_from[0] && !o->resume;
    if (fresh_init && lead && al_tokenizer_copy(o->init_from, o->out, err)) return -1;
    if (al_token_data_load(&t.data, o->data, fresh_init ? o->init_from : o->out, o->out, lead, o->val_fraction,
                           o->context, o->model.vocab_size, err))
        return -1;
    double bytes_per_token;
    if (lm_val_bytes_per_token(&t, &bytes_per_token, err) || al_model_create(&m, &o->model, err) ||
        al_model_alloc_grads(&m, err))
        goto done;
    t.batch_in = malloc(sizeof(int) * (size_t)o->batch * o->context);
    t.batch_tg = malloc(sizeof(int) * (size_t)o->batch * o->context);
    if (!t.batch_in || !t.batch_tg) {
        al_errf(err, "out of memory for optimizer state");
        goto done;
    }
    const int shards = al_dist_shards(o);
    if (shards <= 0 || o->batch % shards) {
        al_errf(err, "--shards %d must divide --batch %d", shards, o->batch);
        goto done;
    }
    if (al_acts_create(&t.acts, &m, o->batch / shards, o->context, err) ||
        al_acts_create(&t.eval_acts, &m, o->batch, o->context, err))
        goto done;
    const double tokens_per_step = (double)o->batch * o->context;
    t.batch = (al_lm_batch){.acts = &t.acts, .in = t.batch_in, .tg = t.batch_tg};
    t.shards = (al_lm_shards){.batch = &t.batch, .in = t.batch_in, .tg = t.batch_tg, .B = o->batch, .T = o->context};
    const al_task_hooks h = {
        .ctx = &t,
        .draw = lm_draw,
        .pass = al_lm_step_pass(&t.batch),
        .select = lm_select,
        .data_hash = al_dist_size() > 1 ? al_dist_hash(AL_DIST_HASH0, t.data.ids, sizeof(int) * t.data.n) : 0,
        .evaluate = lm_evaluate,
        .tokens_per_step = tokens_per_step,
        .items_per_step = tokens_per_step,
        .flops_per_step = al_model_train_flops_per_token(&m, o->context) * tokens_per_step,
        .val_bytes_per_token = bytes_per_token,
        .tokenized = !al_tok_is_bytes(t.data.tok),
    };
    result = al_train_loop(o, &m, &h, err);
done:
    free(t.batch_in);
    free(t.batch_tg);
    al_acts_free(&t.acts);
    al_acts_free(&t.eval_acts);
    al_model_free(&m);
    al_token_data_free(&t.data);
    return result;
}
