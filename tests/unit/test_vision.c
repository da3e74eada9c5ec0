/*
 * test_vision.c: the vision transformer's pieces that the PyTorch reference
 * (tests/ref/test_vit_grads.py) does not reach:
 *  - the IDX reader on damaged input (truncated at every part of the file,
 *    plain and gzip; wrong magic; unknown type; zero dimensions; trailing
 *    bytes; gzip of garbage; a corrupt gzip stream; a missing file): -1 and
 *    one line naming the file;
 *  - Fashion-MNIST sets: counts that disagree, pixel statistics, standardised
 *    batches, labels beyond the model's classes;
 *  - patch extraction against a hand-computed example;
 *  - bidirectional attention: changing the last patch changes the CLS
 *    output (a causal model's CLS row would see only itself), and only its
 *    own image's, for every KV design;
 *  - gradients against central differences of the loss, per tensor, for
 *    every score function;
 *  - the config: round trip, derived fields, N = patches, refusals;
 *  - one training step repeats bit for bit, at 1 and at 2 threads.
 * Files go to a private mkdtemp directory that is removed at the end.
 */
#include <dirent.h>
#include <omp.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/blas.h"
#include "io/io.h"
#include "model/model.h"
#include "test.h"
#include "train/train.h"
#include "train/vision.h"

static char tmpdir[64];

/* tmpdir/name into buf[256] (the names are short: checked, never cut). */
static const char *tp(char *buf, const char *name) {
    int n = snprintf(buf, 256, "%s/%s", tmpdir, name);
    CHECK(n > 0 && n < 256);
    return buf;
}

static void write_plain(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, len, f) == len);
    fclose(f);
}

static void write_gz(const char *path, const void *data, size_t len) {
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(len == 0 || gzwrite(f, data, (unsigned)len) == (int)len);
    gzclose(f);
}

/* An IDX ubyte file of dims[0..nd) with data i % 251, into buf; returns its length. */
static size_t make_idx(uint8_t *buf, int nd, const uint32_t *dims) {
    size_t n = 4, count = 1;
    buf[0] = buf[1] = 0;
    buf[2] = 0x08;
    buf[3] = (uint8_t)nd;
    for (int i = 0; i < nd; i++) {
        buf[n++] = (uint8_t)(dims[i] >> 24), buf[n++] = (uint8_t)(dims[i] >> 16);
        buf[n++] = (uint8_t)(dims[i] >> 8), buf[n++] = (uint8_t)dims[i];
        count *= dims[i];
    }
    for (size_t i = 0; i < count; i++) buf[n++] = (uint8_t)(i % 251);
    return n;
}

/* Reading `path` fails with one line that names the file and contains `word`. */
static void expect_idx_error(const char *path, const char *word, const char *what) {
    al_idx x;
    al_err err = {{0}};
    int rc = al_idx_read(path, &x, &err);
    CHECK_MSG(rc == -1 && x.data == NULL, "%s: read succeeded", what);
    CHECK_MSG(strstr(err.msg, path) && !strchr(err.msg, '\n') && strstr(err.msg, word), "%s: '%s' (want '%s')", what,
              err.msg, word);
}

static void test_idx(void) {
    char p[256], q[256];
    uint8_t buf[4096];
    const uint32_t dims[3] = {3, 4, 5};
    size_t len = make_idx(buf, 3, dims); /* 4 + 12 header bytes, 60 data bytes */
    CHECK(len == 76);
    /* good files, plain and gzip */
    for (int gz = 0; gz < 2; gz++) {
        tp(p, gz ? "good.gz" : "good");
        (gz ? write_gz : write_plain)(p, buf, len);
        al_idx x;
        al_err err = {{0}};
        CHECK_MSG(al_idx_read(p, &x, &err) == 0, "%s", err.msg);
        CHECK(x.ndim == 3 && x.dims[0] == 3 && x.dims[1] == 4 && x.dims[2] == 5 && x.n == 60);
        CHECK(x.data && x.data[0] == 0 && x.data[59] == 59);
        al_idx_free(&x);
    }
    /* truncated: empty, inside the magic, after the magic, inside the dims,
     * after the header, inside the data, one byte short */
    const size_t cuts[] = {0, 1, 3, 4, 9, 16, 40, 75};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        for (int gz = 0; gz < 2; gz++) {
            snprintf(q, sizeof q, "cut%zu%s", cuts[i], gz ? ".gz" : "");
            tp(p, q);
            (gz ? write_gz : write_plain)(p, buf, cuts[i]);
            expect_idx_error(p, "truncated", q);
        }
    /* a gzip stream cut short (the compressed bytes themselves truncated) */
    tp(p, "good.gz");
    FILE *f = fopen(p, "rb");
    uint8_t gzb[4096];
    size_t gzn = f ? fread(gzb, 1, sizeof gzb, f) : 0;
    if (f) fclose(f);
    CHECK(gzn > 20);
    write_plain(tp(q, "gzcut.gz"), gzb, gzn - 12);
    expect_idx_error(q, "IDX", "gzip stream cut");
    /* wrong magic, unknown type, no dimensions, a zero dimension, trailing bytes */
    uint8_t bad[4096];
    memcpy(bad, buf, len);
    bad[1] = 0x01;
    write_plain(tp(p, "magic"), bad, len);
    expect_idx_error(p, "magic", "wrong magic");
    memcpy(bad, buf, len);
    bad[2] = 0x0D; /* float32 */
    write_gz(tp(p, "type.gz"), bad, len);
    expect_idx_error(p, "type 0x0d", "float type");
    memcpy(bad, buf, len);
    bad[3] = 0;
    write_plain(tp(p, "nodims"), bad, len);
    expect_idx_error(p, "dimensions", "zero dims");
    memcpy(bad, buf, len);
    bad[4 + 4 + 3] = 0; /* second dimension 0 */
    write_plain(tp(p, "zerodim"), bad, len);
    expect_idx_error(p, "dimension 1", "zero dimension");
    memcpy(bad, buf, len);
    bad[len] = 7;
    write_gz(tp(p, "trailing.gz"), bad, len + 1);
    expect_idx_error(p, "inconsistent", "trailing byte");
    /* gzip of garbage (decompresses fine, is not IDX) */
    for (size_t i = 0; i < sizeof bad; i++) bad[i] = (uint8_t)(i * 131 + 17);
    write_gz(tp(p, "garbage.gz"), bad, sizeof bad);
    expect_idx_error(p, "not an IDX file", "gzip of garbage");
    /* a corrupt gzip stream: a gzip header followed by garbage */
    memcpy(bad, gzb, 10);
    write_plain(tp(p, "corrupt.gz"), bad, 200);
    expect_idx_error(p, "gzip", "corrupt gzip");
    expect_idx_error(tp(p, "missing.gz"), "No such file", "missing file");
}

/* A set of n images of side S (IDX [n, S, S]) and m labels in dir/<split>-*. */
static void write_set(const char *dir, const char *split, uint32_t n, uint32_t S, uint32_t m, int label_max) {
    char path[512];
    uint8_t buf[8192];
    const uint32_t di[3] = {n, S, S}, dl[1] = {m};
    size_t len = make_idx(buf, 3, di);
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, split);
    write_gz(path, buf, len);
    len = make_idx(buf, 1, dl);
    for (uint32_t i = 0; i < m; i++) buf[8 + i] = (uint8_t)(i % (uint32_t)(label_max + 1));
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, split); /* plain: the .gz is optional */
    write_plain(path, buf, len);
}

static void test_image_sets(void) {
    al_image_set s;
    al_err err = {{0}};
    char dir[256];
    tp(dir, "");
    write_set(dir, "t10k", 5, 4, 4, 9);
    CHECK(al_fmnist_load(&s, dir, "t10k", 0, &err) == -1);
    CHECK_MSG(strstr(err.msg, "4 labels for 5 images") && !strchr(err.msg, '\n'), "'%s'", err.msg);
    CHECK(al_fmnist_load(&s, tmpdir, "nosuch", 0, &err) == -1 && strstr(err.msg, "nosuch-images"));
    CHECK(al_fmnist_load(&s, "/nonexistent/dir", "train", 0, &err) == -1 &&
          strstr(err.msg, "dataset-fashion-mnist") && !strchr(err.msg, '\n'));
    write_set(dir, "train", 6, 4, 6, 11);
    CHECK_MSG(al_fmnist_load(&s, dir, "train", 5, &err) == 0, "%s", err.msg);
    CHECK(s.n == 5 && s.C == 1 && s.S == 4);
    /* pixels are i % 251 for i < 80: mean and std of 0..79 over 255 */
    double mean, std;
    al_image_set_stats(&s, &mean, &std);
    CHECK_CLOSE(mean, 39.5 / 255.0, 1e-12);
    CHECK_CLOSE(std, sqrt((80.0 * 80.0 - 1.0) / 12.0) / 255.0, 1e-12);
    int idx[2] = {3, 1}, labels[2];
    float img[32];
    al_image_batch(&s, idx, 2, 0.5, 0.25, img, labels);
    CHECK(labels[0] == 3 && labels[1] == 1);
    CHECK_CLOSE(img[0], (48.0 / 255.0 - 0.5) / 0.25, 1e-6);  /* image 3 starts at byte 48 */
    CHECK_CLOSE(img[31], (31.0 / 255.0 - 0.5) / 0.25, 1e-6); /* image 1 ends at byte 31 */
    al_config c;
    al_config_vision_default(&c);
    CHECK(al_image_set_check(&s, &c, "x", &err) == -1 && strstr(err.msg, "28"));
    c.image_size = 4;
    c.patch_size = 2;
    c.num_labels = 3; /* labels go up to 4 */
    al_config_vision_derive(&c, 1);
    CHECK(al_image_set_check(&s, &c, "x", &err) == -1 && strstr(err.msg, "outside the model's 3 classes"));
    c.num_labels = 12;
    CHECK(al_image_set_check(&s, &c, "x", &err) == 0);
    al_image_set_free(&s);
}

static void test_patchify(void) {
    /* 2 images, 2 channels, 4 x 4, value b*1000 + c*100 + y*10 + x; p = 2 */
    float img[2 * 2 * 4 * 4], pat[2 * 4 * 8];
    for (int b = 0; b < 2; b++)
        for (int ch = 0; ch < 2; ch++)
            for (int y = 0; y < 4; y++)
                for (int x = 0; x < 4; x++) img[((b * 2 + ch) * 4 + y) * 4 + x] = (float)(b * 1000 + ch * 100 + y * 10 + x);
    al_vit_patchify(pat, img, 2, 2, 4, 2);
    /* image 1, patch (gy 1, gx 0) = row 1*4 + 2: channel 0 rows 2-3, cols 0-1, then channel 1 */
    const float want6[8] = {1020, 1021, 1030, 1031, 1120, 1121, 1130, 1131};
    CHECK(memcmp(pat + 6 * 8, want6, sizeof want6) == 0);
    /* image 0, patch (gy 0, gx 1) = row 1 */
    const float want1[8] = {2, 3, 12, 13, 102, 103, 112, 113};
    CHECK(memcmp(pat + 1 * 8, want1, sizeof want1) == 0);
    /* p = 1: a patch per pixel, channels together */
    float pat1[2 * 16 * 2];
    al_vit_patchify(pat1, img, 2, 2, 4, 1);
    CHECK(pat1[(16 + 4 * 3 + 2) * 2] == 1032 && pat1[(16 + 4 * 3 + 2) * 2 + 1] == 1132);
}

/* A tiny ViT: 8 x 8 images, p = 2 (16 patches), d 16, 2 layers. */
static al_config tiny_vit(al_attn_kind kind, al_score_kind score) {
    al_config c;
    al_config_vision_default(&c);
    c.image_size = 8;
    c.patch_size = 2;
    c.num_channels = 1;
    c.num_labels = 5;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_layers = 2;
    c.num_heads = kind == AL_ATTN_GQA ? 4 : 2;
    c.num_kv_heads = 2;
    c.head_dim = kind == AL_ATTN_GQA ? 4 : 8;
    c.attention = kind;
    c.score = score;
    if (kind == AL_ATTN_MLA) {
        c.kv_lora_rank = 6;
        c.q_lora_rank = 0;
        c.qk_nope_head_dim = 8;
        c.qk_rope_head_dim = 4;
        c.v_head_dim = 8;
        c.head_dim = 12;
    }
    if (kind == AL_ATTN_LRKV) c.lrkv_rank = 2;
    al_config_vision_derive(&c, 1);
    return c;
}

/* Model with random weights of a useful size (not the small init). */
static int make_vit(al_model *m, const al_config *c, uint64_t seed) {
    al_err err = {{0}};
    if (al_model_create(m, c, &err)) {
        fprintf(stderr, "make_vit: %s\n", err.msg);
        return -1;
    }
    al_rng r;
    al_rng_seed(&r, seed);
    for (int i = 0; i < m->n_params; i++) {
        float *w = m->w + m->params[i].offset;
        const int gain = m->params[i].init == AL_INIT_ONES;
        for (size_t j = 0; j < m->params[i].numel; j++)
            w[j] = gain ? 1.0f + 0.1f * al_rng_normal(&r) : 0.3f * al_rng_normal(&r);
    }
    return 0;
}

static void random_images(float *x, size_t n, uint64_t seed) {
    al_rng r;
    al_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = al_rng_normal(&r);
}

static void test_bidirectional(void) {
    const al_attn_kind kinds[] = {AL_ATTN_MHA, AL_ATTN_GQA, AL_ATTN_MLA, AL_ATTN_LRKV};
    for (int k = 0; k < 4; k++) {
        al_config c = tiny_vit(kinds[k], k == 1 ? AL_SCORE_POLY : AL_SCORE_SOFTMAX);
        CHECK(c.bidirectional == 1 && c.max_position == 17 && c.score_n == 16);
        al_model m;
        al_acts a;
        al_err err;
        if (make_vit(&m, &c, 3 + k)) continue;
        CHECK(al_vit_acts_create(&a, &m, 2, &err) == 0);
        float img[2 * 64], before[10];
        random_images(img, 128, 9);
        al_vit_forward(&m, &a, img, NULL);
        memcpy(before, a.logits, sizeof before);
        img[63] += 1.0f; /* image 0, bottom-right pixel: in the last patch (token 16) */
        al_vit_forward(&m, &a, img, NULL);
        double d0 = 0, d1 = 0;
        for (int j = 0; j < 5; j++) {
            d0 += fabs(a.logits[j] - before[j]);
            d1 += fabs(a.logits[5 + j] - before[5 + j]);
        }
        CHECK_MSG(d0 > 1e-4, "%s: the CLS output ignores the last patch (causal?)", al_attn_name(kinds[k]));
        CHECK_MSG(d1 == 0, "%s: image 1 changed with image 0", al_attn_name(kinds[k]));
        al_acts_free(&a);
        al_model_free(&m);
    }
}

/* Mean loss of the model on (img, lab), in double from the float logits. */
static double loss_at(al_model *m, al_acts *a, const float *img, const int *lab) {
    return al_vit_forward(m, a, img, lab);
}

static void test_fd_grads(void) {
    struct {
        al_attn_kind kind;
        al_score_kind score;
    } cases[] = {{AL_ATTN_MHA, AL_SCORE_SOFTMAX}, {AL_ATTN_MHA, AL_SCORE_POLY}, {AL_ATTN_GQA, AL_SCORE_RELU},
                 {AL_ATTN_MHA, AL_SCORE_SIGMOID}, {AL_ATTN_MLA, AL_SCORE_SOFTMAX}, {AL_ATTN_LRKV, AL_SCORE_POLY}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        al_config c = tiny_vit(cases[ci].kind, cases[ci].score);
        al_model m;
        al_acts a;
        al_err err;
        if (make_vit(&m, &c, 40 + ci)) continue;
        CHECK(al_model_alloc_grads(&m, &err) == 0 && al_vit_acts_create(&a, &m, 3, &err) == 0);
        float img[3 * 64];
        int lab[3] = {4, 0, 2};
        random_images(img, 192, 77 + ci);
        al_model_zero_grads(&m);
        al_vit_forward(&m, &a, img, lab);
        al_vit_backward(&m, &a);
        float *g = malloc(sizeof(float) * m.n_floats), *w0 = malloc(sizeof(float) * m.n_floats);
        memcpy(g, m.g, sizeof(float) * m.n_floats);
        memcpy(w0, m.w, sizeof(float) * m.n_floats);
        al_rng r;
        al_rng_seed(&r, 1000 + ci);
        double worst = 0;
        const char *worst_name = "";
        for (int i = 0; i < m.n_params; i++) {
            /* a random unit direction in tensor i: the loss's slope along it */
            const al_param *p = &m.params[i];
            float *u = malloc(sizeof(float) * p->numel);
            double norm = 0, ad = 0;
            for (size_t j = 0; j < p->numel; j++) {
                u[j] = al_rng_normal(&r);
                norm += (double)u[j] * u[j];
            }
            for (size_t j = 0; j < p->numel; j++) ad += (u[j] /= (float)sqrt(norm)) * (double)g[p->offset + j];
            /* central differences at h and 2h, Richardson-combined: O(h^4).
             * relu's kinks make the loss only piecewise smooth: a small
             * plain central difference crosses fewer of them. */
            const int kinks = cases[ci].score == AL_SCORE_RELU;
            const float h = kinks ? 5e-4f : 4e-3f;
            double l[4];
            for (int s = 0; s < 4; s++) {
                const float step = (s & 1 ? -h : h) * (s < 2 ? 1.0f : 2.0f);
                for (size_t j = 0; j < p->numel; j++) m.w[p->offset + j] = w0[p->offset + j] + step * u[j];
                l[s] = loss_at(&m, &a, img, lab);
            }
            memcpy(m.w + p->offset, w0 + p->offset, sizeof(float) * p->numel);
            const double d1 = (l[0] - l[1]) / (2.0 * h), d2 = (l[2] - l[3]) / (4.0 * h);
            /* float forward passes leave ~1e-4 of noise in fd: an absolute floor */
            const double fd = kinks ? d1 : (4.0 * d1 - d2) / 3.0, e = fabs(fd - ad) / (fabs(ad) + 2e-2);
            if (e > worst) worst = e, worst_name = p->name;
            free(u);
        }
        CHECK_MSG(worst < 2e-2, "%s/%s: directional derivative off by %.3g (relative) in %s",
                  al_attn_name(cases[ci].kind), al_score_name(cases[ci].score), worst, worst_name);
        free(g), free(w0);
        al_acts_free(&a);
        al_model_free(&m);
    }
}

static void test_config(void) {
    char dir[256];
    al_config c = tiny_vit(AL_ATTN_MLA, AL_SCORE_POLY), back;
    al_model m, m2;
    al_err err = {{0}};
    CHECK(al_model_create(&m, &c, &err) == 0);
    /* documented names and shapes, in order */
    CHECK(!strcmp(m.params[0].name, "vit.patch_embed.weight") && m.params[0].shape[0] == 16 && m.params[0].shape[1] == 4);
    CHECK(!strcmp(m.params[1].name, "vit.patch_embed.bias") && m.params[1].shape[0] == 16);
    CHECK(!strcmp(m.params[2].name, "vit.cls_token") && m.params[2].shape[0] == 16);
    CHECK(!strcmp(m.params[3].name, "vit.pos_embed") && m.params[3].shape[0] == 17 && m.params[3].shape[1] == 16);
    CHECK(!strcmp(m.params[4].name, "model.layers.0.input_layernorm.weight"));
    CHECK(!strcmp(m.params[m.n_params - 3].name, "model.norm.weight"));
    CHECK(!strcmp(m.params[m.n_params - 2].name, "classifier.weight") && m.params[m.n_params - 2].shape[0] == 5);
    CHECK(!strcmp(m.params[m.n_params - 1].name, "classifier.bias"));
    al_model_init_weights(&m, 5);
    m.cfg.image_mean = 0.286;
    m.cfg.image_std = 0.353;
    CHECK_MSG(al_model_save(&m, tp(dir, "vitck"), NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(al_model_load(&m2, dir, NULL, &err) == 0, "%s", err.msg);
    back = m2.cfg;
    CHECK(back.task == AL_TASK_VISION && back.attention == AL_ATTN_MLA && back.score == AL_SCORE_POLY);
    CHECK(back.image_size == 8 && back.patch_size == 2 && back.num_channels == 1 && back.num_labels == 5);
    CHECK(back.bidirectional == 1 && back.max_position == 17 && back.score_n == 16 && back.vocab_size == 0);
    CHECK(back.image_mean == 0.286 && back.image_std == 0.353 && back.kv_lora_rank == 6);
    CHECK(m2.n_floats == m.n_floats && memcmp(m.w, m2.w, sizeof(float) * m.n_floats) == 0);
    al_model_free(&m);
    al_model_free(&m2);
    /* Fashion-MNIST at p = 2: N = 196, so poly "auto" is 1/14 */
    al_config f;
    al_config_vision_default(&f);
    f.score = AL_SCORE_POLY;
    al_attn_shape s = {0};
    al_attn_set_score(&s, &f);
    CHECK(s.bidirectional == 1 && s.score_n == 196.0f);
    CHECK_CLOSE(s.poly_coef, 1.0 / 14.0, 1e-7);
    al_config lm;
    al_config_default(&lm);
    al_attn_set_score(&s, &lm);
    CHECK(s.bidirectional == 0);
    /* refusals, one line each */
    lm.intermediate_size = 64;
    lm.bidirectional = 1;
    CHECK(al_config_validate(&lm, &err) == -1 && strstr(err.msg, "causally"));
    f.intermediate_size = 64;
    f.patch_size = 3;
    al_config_vision_derive(&f, 1);
    CHECK(al_config_validate(&f, &err) == -1 && strstr(err.msg, "does not divide"));
    const char *bad[][2] = {
        {"{\"architectures\":[\"AttnlabViTForImageClassification\"],\"hidden_size\":16,\"intermediate_size\":24,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_labels\":1}",
         "num_labels"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":16,\"intermediate_size\":24,\"vocab_size\":256,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"attnlab\":{\"task\":\"vision\"}}",
         "goes with architecture"},
        {"{\"architectures\":[\"AttnlabViTForImageClassification\"],\"hidden_size\":16,\"intermediate_size\":24,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"attnlab\":{\"task\":\"speech\"}}",
         "unknown task"},
    };
    for (int i = 0; i < 3; i++) {
        al_config x;
        err.msg[0] = 0;
        CHECK_MSG(al_config_parse(&x, bad[i][0], NULL, &err) == -1 && strstr(err.msg, bad[i][1]) &&
                      !strchr(err.msg, '\n'),
                  "'%s' (want '%s')", err.msg, bad[i][1]);
    }
    /* acts: a vision batch is 1 + patches long; an LM is not a vision model */
    al_config v = tiny_vit(AL_ATTN_MHA, AL_SCORE_SOFTMAX);
    al_acts a;
    CHECK(al_model_create(&m, &v, &err) == 0);
    CHECK(al_acts_create(&a, &m, 2, 9, &err) == -1 && strstr(err.msg, "1 + 16 patches"));
    al_decoder dec;
    CHECK(al_decoder_create(&dec, &m, 4, &err) == -1 && strstr(err.msg, "does not decode"));
    al_model_free(&m);
}

/* One step (forward, backward) twice, and at another thread count: same bits. */
static void test_determinism(void) {
    al_config c = tiny_vit(AL_ATTN_MHA, AL_SCORE_SOFTMAX);
    al_model m;
    al_acts a;
    al_err err;
    if (make_vit(&m, &c, 99)) return;
    CHECK(al_model_alloc_grads(&m, &err) == 0 && al_vit_acts_create(&a, &m, 4, &err) == 0);
    float img[4 * 64];
    int lab[4] = {1, 2, 3, 4};
    random_images(img, 256, 5);
    float *g[3];
    double l[3];
    const int threads[3] = {2, 2, 1};
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(threads[k]);
        memset(m.g, 0xff, sizeof(float) * m.n_floats); /* NaN: al_model_zero_grads and the backward clear all of it */
        al_model_zero_grads(&m);
        l[k] = al_vit_forward(&m, &a, img, lab);
        al_vit_backward(&m, &a);
        g[k] = malloc(sizeof(float) * m.n_floats);
        memcpy(g[k], m.g, sizeof(float) * m.n_floats);
    }
    CHECK(l[0] == l[1] && memcmp(g[0], g[1], sizeof(float) * m.n_floats) == 0);
    CHECK_MSG(l[0] == l[2] && memcmp(g[0], g[2], sizeof(float) * m.n_floats) == 0, "1 thread differs from 2");
    omp_set_num_threads(2);
    for (int k = 0; k < 3; k++) free(g[k]);
    al_acts_free(&a);
    al_model_free(&m);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path)) remove_tree(path);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/al_test_vision_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_idx();
    test_image_sets();
    test_patchify();
    test_bidirectional();
    test_fd_grads();
    test_config();
    test_determinism();
    remove_tree(tmpdir);
    return TEST_EXIT();
}
