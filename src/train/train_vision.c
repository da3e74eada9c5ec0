/*
 * train_vision.c: the vision task: Fashion-MNIST image sets (vision.h), their
 * evaluation, and the hooks that plug ViT training into the shared loop
 * (train_loop.h).
 *
 * Data order: the training images (the first --train-subset of them) are
 * visited in epochs, each a Fisher-Yates shuffle drawn from a generator
 * seeded by (seed, epoch). Step s takes positions s*B .. s*B+B-1 of that
 * endless sequence, so a batch depends only on the seed and the step number:
 * resume needs no extra state and repeats an uninterrupted run bit for bit.
 * Periodic evaluations use the first --eval-images test images, the one after
 * the last step all of them.
 */
#include "vision.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/io.h"
#include "train_loop.h"

/* <dir>/<split>-<kind>.gz if it exists, else <dir>/<split>-<kind> (a plain
 * IDX file); malloc'd, NULL when out of memory. */
static char *idx_path(const char *dir, const char *split, const char *kind) {
    char *path = al_sprintf("%s/%s-%s.gz", dir, split, kind);
    if (path && access(path, F_OK) != 0) {
        free(path);
        path = al_sprintf("%s/%s-%s", dir, split, kind);
    }
    return path;
}

int al_fmnist_load(al_image_set *s, const char *dir, const char *split, int limit, al_err *err) {
    memset(s, 0, sizeof *s);
    if (!dir || !*dir) dir = AL_FMNIST_DIR;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return al_errf(err, "%s: %s (Fashion-MNIST: install Debian's dataset-fashion-mnist or pass --images DIR)", dir,
                       stat(dir, &st) != 0 ? strerror(errno) : "not a directory");
    char *ipath = idx_path(dir, split, "images-idx3-ubyte"), *lpath = idx_path(dir, split, "labels-idx1-ubyte");
    al_idx im = {0}, lb = {0};
    int rc = ipath && lpath ? 0 : al_errf(err, "out of memory");
    if (rc || al_idx_read(ipath, &im, err) || al_idx_read(lpath, &lb, err))
        rc = -1;
    else if (im.ndim != 3 && im.ndim != 4)
        rc = al_errf(err, "%s: images must be IDX [n, rows, cols] or [n, channels, rows, cols], got %d dimensions",
                     ipath, im.ndim);
    else if (im.dims[im.ndim - 1] != im.dims[im.ndim - 2] || im.dims[im.ndim - 1] > 4096 ||
             (im.ndim == 4 && im.dims[1] > 64))
        rc = al_errf(err, "%s: images must be square (at most 4096 pixels, 64 channels), got %lld x %lld", ipath,
                     (long long)im.dims[im.ndim - 2], (long long)im.dims[im.ndim - 1]);
    else if (lb.ndim != 1)
        rc = al_errf(err, "%s: labels must be IDX [n], got %d dimensions", lpath, lb.ndim);
    else if (lb.dims[0] != im.dims[0])
        rc = al_errf(err, "%s: %lld labels for %lld images in %s", lpath, (long long)lb.dims[0], (long long)im.dims[0],
                     ipath);
    else if (im.dims[0] > 100000000)
        rc = al_errf(err, "%s: too many images (%lld)", ipath, (long long)im.dims[0]);
    free(ipath);
    free(lpath);
    if (rc) {
        al_idx_free(&im);
        al_idx_free(&lb);
        return -1;
    }
    s->n = (int)im.dims[0];
    s->C = im.ndim == 4 ? (int)im.dims[1] : 1;
    s->S = (int)im.dims[im.ndim - 1];
    if (limit > 0 && limit < s->n) s->n = limit;
    s->pixels = im.data; /* only the first n images are used; the rest stays allocated */
    s->labels = lb.data;
    return 0;
}

void al_image_set_free(al_image_set *s) {
    free(s->pixels);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

void al_image_set_stats(const al_image_set *s, double *mean, double *std) {
    const size_t n = (size_t)s->n * s->C * s->S * s->S;
    uint64_t sum = 0, sq = 0; /* exact integer sums: the same on every machine */
    for (size_t i = 0; i < n; i++) {
        sum += s->pixels[i];
        sq += (uint64_t)s->pixels[i] * s->pixels[i];
    }
    double m = n ? (double)sum / (double)n / 255.0 : 0.0;
    double v = n ? (double)sq / (double)n / (255.0 * 255.0) - m * m : 0.0;
    *mean = m;
    *std = v > 1e-12 ? sqrt(v) : 1.0;
}

int al_image_set_check(const al_image_set *s, const al_config *c, const char *what, al_err *err) {
    if (s->S != c->image_size || s->C != c->num_channels)
        return al_errf(err, "%s: images are %d x %d x %d, the model expects %d x %d x %d", what, s->C, s->S, s->S,
                       c->num_channels, c->image_size, c->image_size);
    for (int i = 0; i < s->n; i++)
        if (s->labels[i] >= c->num_labels)
            return al_errf(err, "%s: label %d of image %d is outside the model's %d classes", what, s->labels[i], i,
                           c->num_labels);
    return 0;
}

void al_image_batch(const al_image_set *s, const int *idx, int B, double mean, double std, float *images, int *labels) {
    const size_t per = (size_t)s->C * s->S * s->S;
    const float scale = (float)(1.0 / (255.0 * std)), shift = (float)(mean / std);
    for (int b = 0; b < B; b++) {
        const uint8_t *src = s->pixels + (size_t)idx[b] * per;
        float *dst = images + (size_t)b * per;
        for (size_t i = 0; i < per; i++) dst[i] = (float)src[i] * scale - shift;
        labels[b] = s->labels[idx[b]];
    }
}

int al_vit_evaluate(const al_model *m, al_acts *a, const al_image_set *s, int max_images, double *loss, double *accuracy,
                    size_t *count, al_err *err) {
    const al_config *c = &m->cfg;
    const int B = a->B, K = c->num_labels, n = max_images > 0 && max_images < s->n ? max_images : s->n;
    const size_t per = (size_t)s->C * s->S * s->S;
    if (n <= 0) return al_errf(err, "no images to evaluate");
    float *images = malloc(sizeof(float) * per * B);
    int *idx = malloc(sizeof(int) * B), *labels = malloc(sizeof(int) * B);
    if (!images || !idx || !labels) {
        free(images), free(idx), free(labels);
        return al_errf(err, "out of memory");
    }
    double sum = 0;
    size_t correct = 0;
    for (int start = 0; start < n; start += B) {
        const int nb = n - start < B ? n - start : B;
        for (int b = 0; b < B; b++) idx[b] = b < nb ? start + b : start; /* padding rows repeat an image... */
        al_image_batch(s, idx, B, c->image_mean, c->image_std, images, labels);
        for (int b = nb; b < B; b++) labels[b] = -1; /* ...and are not counted */
        sum += al_vit_forward(m, a, images, labels) * nb;
        for (int b = 0; b < nb; b++) {
            const float *row = a->logits + (size_t)b * K;
            int best = 0;
            for (int k = 1; k < K; k++)
                if (row[k] > row[best]) best = k;
            correct += best == labels[b];
        }
    }
    free(images), free(idx), free(labels);
    *loss = sum / n;
    *accuracy = (double)correct / n;
    *count = (size_t)n;
    return 0;
}

/* ---- the training task ---- */

typedef struct vit_task {
    const al_train_opts *o;
    al_image_set train, test;
    al_acts acts;         /* shared by training steps and evaluation */
    float *images;        /* [B, C, S, S] */
    int *idx, *labels;    /* [B] */
    int *perm, perm_epoch; /* the current epoch's order of the training images */
    const float *shard_images; /* the step's shard of images, labels (vit_select) */
    const int *shard_labels;
} vit_task;

/* The shuffle of epoch e: a generator seeded from (seed, e) alone. */
static void make_perm(vit_task *t, int epoch) {
    al_rng r;
    al_rng_seed(&r, t->o->seed ^ (0x1ea9e5ULL + 0x9e3779b97f4a7c15ULL * (uint64_t)(epoch + 1)));
    for (int i = 0; i < t->train.n; i++) t->perm[i] = i;
    for (int i = t->train.n - 1; i > 0; i--) {
        int j = (int)(al_rng_u64(&r) % (uint64_t)(i + 1));
        int tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
    t->perm_epoch = epoch;
}

/* Step `step`'s images: positions step*B.. of the epoch sequence. */
static void vit_draw(void *ctx, const al_model *m, al_rng *rng, int step) {
    vit_task *t = ctx;
    const int B = t->o->batch, n = t->train.n;
    (void)rng;
    for (int b = 0; b < B; b++) {
        const int64_t k = (int64_t)step * B + b;
        const int epoch = (int)(k / n);
        if (epoch != t->perm_epoch) make_perm(t, epoch);
        t->idx[b] = t->perm[k % n];
    }
    al_image_batch(&t->train, t->idx, B, m->cfg.image_mean, m->cfg.image_std, t->images, t->labels);
}

/* Points the step's pass at shard `shard` of n: its B/n images. */
static void vit_select(void *ctx, int shard, int n) {
    vit_task *t = ctx;
    const int per_shard = t->o->batch / n;
    const size_t pixels = (size_t)t->train.C * t->train.S * t->train.S;
    t->shard_images = t->images + (size_t)shard * per_shard * pixels;
    t->shard_labels = t->labels + (size_t)shard * per_shard;
}

static double vit_forward(void *ctx, al_model *m) {
    vit_task *t = ctx;
    return al_vit_forward(m, &t->acts, t->shard_images, t->shard_labels);
}

static void vit_backward(void *ctx, al_model *m) { al_vit_backward(m, &((vit_task *)ctx)->acts); }

static int vit_evaluate(void *ctx, const al_model *m, int step, int final, double *loss, double *acc, size_t *count,
                        al_err *err) {
    vit_task *t = ctx;
    (void)step;
    return al_vit_evaluate(m, &t->acts, &t->test, final ? 0 : t->o->eval_images, loss, acc, count, err);
}

/* The hash of the training and test images and labels (ranks must agree). */
static uint64_t vit_data_hash(const vit_task *t) {
    uint64_t h = AL_DIST_HASH0;
    const al_image_set *sets[2] = {&t->train, &t->test};
    for (int i = 0; i < 2; i++) {
        const al_image_set *s = sets[i];
        h = al_dist_hash(h, s->pixels, (size_t)s->n * s->C * s->S * s->S);
        h = al_dist_hash(h, s->labels, (size_t)s->n);
    }
    return h;
}

int al_train_vision(al_train_opts *o, al_err *err) {
    al_model m = {0};
    vit_task t = {.o = o, .perm_epoch = -1};
    int result = AL_TRAIN_ERROR;
    al_config *c = &o->model;
    if (o->batch <= 0 || o->steps <= 0 || o->warmup < 0 || o->eval_every < 0 || o->save_every < 0)
        return al_errf(err, "invalid training settings: batch and steps must be positive");
    if (o->train_subset < 0 || o->eval_images < 0)
        return al_errf(err, "invalid training settings: train_subset and eval_images must not be negative");
    if (!(o->lr > 0) || !isfinite(o->lr)) return al_errf(err, "invalid training settings: lr must be positive");
    if (al_config_validate(c, err)) return -1;
    if (mkdir(o->out, 0777) && errno != EEXIST)
        return al_errf(err, "%s: cannot create output directory: %s", o->out, strerror(errno));
    if (al_fmnist_load(&t.train, o->images, "train", o->train_subset, err) ||
        al_fmnist_load(&t.test, o->images, "t10k", 0, err))
        goto done;
    /* a new run standardises with its training images' statistics; a resumed
     * one keeps its own, and one started from another run's weights keeps
     * that run's (the weights were learnt on inputs standardised so; other
     * statistics, e.g. of a --train-subset, would change what the source's
     * model sees and its step-0 score) */
    if (!o->resume && !o->init_from[0]) al_image_set_stats(&t.train, &c->image_mean, &c->image_std);
    if (al_image_set_check(&t.train, c, "training images", err) || al_image_set_check(&t.test, c, "test images", err))
        goto done;
    o->context = c->max_position;
    const int shards = al_dist_shards(o); /* the training batch runs shard by shard (dist.h) */
    if (shards <= 0 || o->batch % shards) {
        al_errf(err, "--shards %d must divide --batch %d", shards, o->batch);
        goto done;
    }
    if (al_model_create(&m, c, err) || al_model_alloc_grads(&m, err) ||
        al_vit_acts_create(&t.acts, &m, o->batch / shards, err))
        goto done;
    const size_t per = (size_t)c->num_channels * c->image_size * c->image_size;
    t.images = malloc(sizeof(float) * per * o->batch);
    t.idx = malloc(sizeof(int) * o->batch);
    t.labels = malloc(sizeof(int) * o->batch);
    t.perm = malloc(sizeof(int) * t.train.n);
    if (!t.images || !t.idx || !t.labels || !t.perm) {
        al_errf(err, "out of memory for image batches");
        goto done;
    }
    const al_task_hooks h = {
        .ctx = &t,
        .vision = 1,
        .draw = vit_draw,
        .pass = {.ctx = &t, .forward = vit_forward, .backward = vit_backward},
        .select = vit_select,
        .data_hash = al_dist_size() > 1 ? vit_data_hash(&t) : 0,
        .evaluate = vit_evaluate,
        .tokens_per_step = (double)o->batch * c->max_position,
        .items_per_step = o->batch,
        .flops_per_step = 3.0 * al_vit_fwd_flops_per_image(&m) * o->batch,
    };
    result = al_train_loop(o, &m, &h, err);
done:
    free(t.images);
    free(t.idx);
    free(t.labels);
    free(t.perm);
    al_acts_free(&t.acts);
    al_model_free(&m);
    al_image_set_free(&t.train);
    al_image_set_free(&t.test);
    return result;
}
