/*
 * attnmap.c: single-head attention weights and their statistics.
 */
#include "attnmap.h"

#include "../train/vision.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

void al_head_weights(const al_attn_shape *s, int T, const float *q, int ldq, const float *k, int ldk, float *P) {
    /* P[T, T] = scale q[T, dk] k[T, dk]^T, then each row through the score function */
    al_sgemm(0, 1, T, T, s->dk, s->scale, q, ldq, k, ldk, 0.0f, P, T); /* same bits for any thread count */
#pragma omp parallel for schedule(dynamic, 16)
    for (int i = 0; i < T; i++) {
        float *row = P + (size_t)i * T;
        int n = s->bidirectional ? T : i + 1;
        al_score_row(s, row, n);
        for (int j = n; j < T; j++) row[j] = 0.0f;
    }
}

/* |p| of one row, largest `k` summed, by partial selection into a small buffer */
static double topk_sum(const float *row, int n, int k, float *buf) {
    int m = 0;
    for (int j = 0; j < n; j++) {
        float a = fabsf(row[j]);
        if (m < k) {
            buf[m++] = a;
        } else {
            int lo = 0; /* replace the smallest kept value if a is larger */
            for (int t = 1; t < k; t++) lo = buf[t] < buf[lo] ? t : lo;
            if (a > buf[lo]) buf[lo] = a;
        }
    }
    double s = 0;
    for (int t = 0; t < m; t++) s += buf[t];
    return s;
}

/* descending order of floats, for qsort */
static int desc_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

int al_mass_budget_ref(const float *row, int n, double share) {
    double total = 0;
    for (int j = 0; j < n; j++) total += fabs(row[j]);
    if (!(total > 0)) return 0;
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) return -1;
    for (int j = 0; j < n; j++) v[j] = fabsf(row[j]);
    qsort(v, (size_t)n, sizeof *v, desc_float);
    double acc = 0, target = share * total;
    int k = 0;
    while (k < n && acc < target) acc += v[k++];
    free(v);
    return k;
}

/* The fewest of the largest values of v[0..m) (reordered) whose sum
 * reaches rem > 0: a three-way quickselect that keeps only the side where
 * the sum is crossed, expected O(m). */
static int count_top(float *v, int m, double rem) {
    int k = 0;
    while (m > 0 && rem > 0) {
        float a = v[0], b = v[m / 2], c = v[m - 1]; /* median of three */
        float pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
        int gt = 0, i = 0, lt = m; /* [0, gt) > pivot, [gt, i) == pivot, [lt, m) < pivot */
        while (i < lt) {
            float x = v[i];
            if (x > pivot) {
                v[i++] = v[gt];
                v[gt++] = x;
            } else if (x < pivot) {
                v[i] = v[--lt];
                v[lt] = x;
            } else {
                i++;
            }
        }
        double above = 0;
        for (int t = 0; t < gt; t++) above += v[t];
        if (above >= rem) { /* crossed among the larger ones */
            m = gt;
            continue;
        }
        rem -= above;
        k += gt;
        for (int t = gt; t < lt && rem > 0; t++) { /* the values equal to the pivot, one by one */
            rem -= pivot;
            k++;
        }
        memmove(v, v + lt, sizeof(float) * (size_t)(m - lt)); /* then the smaller ones */
        m -= lt;
    }
    return k;
}

int al_mass_budget(const float *row, int n, double share, float *buf) {
    double total = 0;
    for (int j = 0; j < n; j++) {
        buf[j] = fabsf(row[j]);
        total += buf[j];
    }
    return total > 0 ? count_top(buf, n, share * total) : 0;
}

int al_head_stats_of(const float *P, int T, int topk, int bidirectional, al_head_stats *out, al_err *err) {
    memset(out, 0, sizeof *out);
    out->topk = topk;
    out->min_weight = INFINITY;
    out->max_weight = -INFINITY;
    float *buf = malloc(sizeof(float) * (size_t)(topk > 0 ? topk : 1));
    float *vals = malloc(sizeof(float) * (size_t)(T > 0 ? T : 1));
    if (!buf || !vals) {
        free(buf);
        free(vals);
        return al_errf(err, "head statistics: out of memory for the top-%d values", topk);
    }
    int rows = 0;
    for (int i = 0; i < T; i++) {
        const float *row = P + (size_t)i * T;
        int n = bidirectional ? T : i + 1;
        double abs_sum = 0, sum = 0, dist = 0;
        for (int j = 0; j < n; j++) {
            double a = fabs(row[j]);
            abs_sum += a;
            sum += row[j];
            dist += a * fabs((double)(i - j));
            out->min_weight = row[j] < out->min_weight ? row[j] : out->min_weight;
            out->max_weight = row[j] > out->max_weight ? row[j] : out->max_weight;
        }
        if (!(abs_sum > 0)) continue;
        double ent = 0;
        for (int j = 0; j < n; j++) {
            double p = fabs(row[j]) / abs_sum;
            if (p > 0) ent -= p * log(p);
        }
        rows++;
        out->sink_mass += row[0];
        out->entropy += ent;
        out->mean_distance += dist / abs_sum;
        out->topk_mass += topk > 0 ? topk_sum(row, n, topk, buf) / abs_sum : 0;
        out->row_sum += sum;
        int b = al_mass_budget(row, n, AL_MASS_BUDGET_SHARE, vals);
        out->budget95 += b;
        out->budget95_frac += (double)b / n;
    }
    free(buf);
    free(vals);
    if (rows) {
        out->sink_mass /= rows;
        out->entropy /= rows;
        out->mean_distance /= rows;
        out->topk_mass /= rows;
        out->row_sum /= rows;
        out->budget95 /= rows;
        out->budget95_frac /= rows;
    }
    return 0;
}

int al_attnmap_weights(const al_model *m, const al_acts *a, int layer, int head, float *P, al_err *err) {
    const al_config *c = &m->cfg;
    if (layer < 0 || layer >= c->num_layers)
        return al_errf(err, "layer %d out of range (the model has layers 0..%d)", layer, c->num_layers - 1);
    if (head < 0 || head >= c->num_heads)
        return al_errf(err, "head %d out of range (the model has heads 0..%d)", head, c->num_heads - 1);
    const al_attn_layer *L = &m->layers[layer].attn;
    const float *saved = al_acts_saved(a, layer);
    if (!saved) return al_errf(err, "layer %d's attention was not kept by the forward (prepare it with that layer)", layer);
    const int T = a->T, dk = m->attn->head_qk(L, saved, a->B, T, 0, head, NULL, NULL);
    float *q = malloc(sizeof(float) * (size_t)T * dk), *k = malloc(sizeof(float) * (size_t)T * dk);
    if (!q || !k) {
        free(q);
        free(k);
        return al_errf(err, "out of memory");
    }
    m->attn->head_qk(L, saved, a->B, T, 0, head, q, k);
    al_attn_shape s = {1, T, 1, 1, dk, dk, dk, dk, dk, dk, 1.0f / sqrtf((float)dk)};
    al_attn_set_score(&s, c);
    al_head_weights(&s, T, q, dk, k, dk, P);
    free(q);
    free(k);
    return 0;
}

int al_attnmap_prepare(const char *dir, const int *tokens, int T, al_model *m, al_acts *a, int *trained_ctx,
                       al_err *err) {
    return al_attnmap_prepare_layers(dir, tokens, T, NULL, -1, m, a, trained_ctx, err);
}

int al_attnmap_prepare_layers(const char *dir, const int *tokens, int T, const int *layers, int n_layers, al_model *m,
                              al_acts *a, int *trained_ctx, al_err *err) {
    al_config cfg;
    memset(a, 0, sizeof *a);
    memset(m, 0, sizeof *m);
    if (al_config_load_dir(&cfg, dir, NULL, err)) return -1;
    *trained_ctx = cfg.max_position;
    /* longer RoPE tables than the model was trained with; the weights do not change */
    if (al_model_open(m, dir, T, NULL, err)) return -1;
    for (int i = 0; i < T; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size) {
            al_model_free(m);
            return al_errf(err, "token %d is not in this model's %d-token vocabulary", tokens[i], m->cfg.vocab_size);
        }
    /* a mapped model keeps only the layers asked for (n_layers < 0: all) and
     * computes no logits; attnlab's own models run the training form */
    int rc = 0;
    if (!m->mapped) {
        rc = al_acts_create(a, m, 1, T, err);
    } else if (n_layers >= 0) {
        rc = al_acts_create_maps(a, m, T, layers, n_layers, err);
    } else {
        int *all = malloc(sizeof(int) * (size_t)m->cfg.num_layers);
        for (int l = 0; all && l < m->cfg.num_layers; l++) all[l] = l;
        rc = all ? al_acts_create_maps(a, m, T, all, m->cfg.num_layers, err) : al_errf(err, "out of memory");
        free(all);
    }
    if (rc) {
        al_model_free(m);
        return -1;
    }
    al_model_forward(m, a, tokens, NULL);
    return 0;
}

int al_attnmap_prepare_image(const char *dir, const char *images_dir, int index, al_model *m, al_acts *a,
                             float *pixels, int *label, al_err *err) {
    char *extra = NULL;
    memset(a, 0, sizeof *a);
    if (al_model_load(m, dir, &extra, err)) return -1;
    free(extra);
    const al_config *c = &m->cfg;
    if (c->task != AL_TASK_VISION) {
        al_model_free(m);
        return al_errf(err, "%s is a language model: give it --text, not --image", dir);
    }
    al_image_set set = {0};
    if (index < 0) al_errf(err, "image %d out of range", index);
    if (index < 0 || al_fmnist_load(&set, images_dir, "t10k", index + 1, err) ||
        al_image_set_check(&set, c, "test set", err) ||
        (index >= set.n && al_errf(err, "image %d out of range (the test set has images 0..%d)", index, set.n - 1))) {
        al_image_set_free(&set);
        al_model_free(m);
        return -1;
    }
    const int S = c->image_size, C = c->num_channels;
    float *img = malloc(sizeof(float) * (size_t)C * S * S);
    int lbl;
    if (!img || al_vit_acts_create(a, m, 1, err)) {
        free(img);
        al_image_set_free(&set);
        al_model_free(m);
        return img ? -1 : al_errf(err, "out of memory");
    }
    al_image_batch(&set, &index, 1, c->image_mean, c->image_std, img, &lbl);
    if (pixels)
        for (int i = 0; i < S * S; i++) pixels[i] = set.pixels[(size_t)index * C * S * S + i] / 255.0f;
    if (label) *label = lbl;
    al_vit_forward(m, a, img, NULL);
    free(img);
    al_image_set_free(&set);
    return 0;
}

void al_score_title(const al_config *c, char *buf, size_t cap) {
    switch (c->score) {
    case AL_SCORE_POLY: {
        double coef = c->poly_scale_auto ? 1.0 / sqrt((double)c->score_n) : c->poly_scale;
        double inv = 1.0 / coef;
        if (fabs(inv - floor(inv + 0.5)) < 1e-6)
            al_strfmt(buf, cap, "Attention with (1/%.0f)x^%d", inv, c->poly_power);
        else
            al_strfmt(buf, cap, "Attention with %.3gx^%d", coef, c->poly_power);
        break;
    }
    case AL_SCORE_RELU: al_strfmt(buf, cap, "Attention with ReLU(x)/%d", c->score_n); break;
    case AL_SCORE_SIGMOID: al_strfmt(buf, cap, "Attention with sigmoid(x - log %d)", c->score_n); break;
    default: al_strfmt(buf, cap, "Attention with softmax");
    }
}
