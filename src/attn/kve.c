/*
 * kve.c: the names of the eviction policies (kve.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "attn.h"
#include "kve.h"

#define AL_KVE_NAME_(e, s) s,
static const char *const kve_names[AL_KVE_COUNT] = {AL_KVE_METHODS(AL_KVE_NAME_)};
#undef AL_KVE_NAME_

/* the method named s, or -1 */
int al_kve_from_name(const char *s) {
    for (int i = 0; s && i < AL_KVE_COUNT; i++)
        if (!strcmp(s, kve_names[i])) return i;
    return -1;
}

/* m's name ("?" for an unknown value) */
const char *al_kve_name(al_kve_method m) { return (unsigned)m < AL_KVE_COUNT ? kve_names[m] : "?"; }

int al_kve_check(const al_kve_opts *o, int T, al_err *err) {
    if ((unsigned)o->method >= AL_KVE_COUNT) return al_errf(err, "--kv-evict: unknown method %d", (int)o->method);
    if (o->method == AL_KVE_NONE) return 0;
    if (!(o->budget > 0) || (o->budget > 1 && o->budget != floor(o->budget)) || o->budget > 1e9 ||
        (o->budget > 1 && o->budget < 2))
        return al_errf(err, "--kv-budget must be a fraction in (0, 1] or a count >= 2, got %g", o->budget);
    if (o->sinks < 0) return al_errf(err, "--kv-sinks must not be negative, got %d", o->sinks);
    if (o->layer_budget != AL_KVE_UNIFORM && o->layer_budget != AL_KVE_PYRAMID)
        return al_errf(err, "--kv-layer-budget must be uniform or pyramid");
    if (o->method == AL_KVE_SNAPKV && o->prompt != 0 && (o->prompt < 1 || o->prompt > T))
        return al_errf(err, "--kv-prompt must be in 1..%d (inside the %d-token window), got %d", T, T, o->prompt);
    return 0;
}

/* ---- one layer's eviction state (kve.h's data structure) ---- */

double al_kve_layer_factor(int layer_budget, int l, int L) {
    if (layer_budget != AL_KVE_PYRAMID || L < 2) return 1.0;
    return 1.5 - (double)l / (double)(L - 1);
}

int al_kve_keep(double b, int t) {
    if (t <= 0) return 0;
    if (b <= 1.0) {
        const int k = (int)ceil(b * t - 1e-9);
        return k < 1 ? 1 : k > t ? t : k;
    }
    return (int)b < t ? (int)b : t;
}

int al_kve_snap_window(int prompt) {
    const int w = prompt / 2;
    return w < AL_KVE_SNAP_WINDOW ? (w < 1 ? 1 : w) : AL_KVE_SNAP_WINDOW;
}

int al_kve_create(al_kve *e, const al_kve_opts *o, int l, int L, int capacity, size_t row, al_err *err) {
    memset(e, 0, sizeof *e);
    e->o = *o;
    const double f = al_kve_layer_factor(o->layer_budget, l, L);
    if (o->budget <= 1.0) e->budget = o->budget * f > 1.0 ? 1.0 : o->budget * f;
    else e->budget = floor(o->budget * f + 0.5) < 2 ? 2 : floor(o->budget * f + 0.5);
    e->capacity = capacity;
    e->row = row;
    e->pos = malloc(sizeof(int) * (size_t)capacity);
    e->gone = malloc(sizeof(int) * (size_t)capacity);
    e->iwork = malloc(sizeof(int) * 2 * (size_t)capacity);
    e->mass = malloc(sizeof(float) * (size_t)capacity);
    e->work = malloc(sizeof(float) * (size_t)capacity);
    if (!e->pos || !e->gone || !e->iwork || !e->mass || !e->work) {
        al_kve_free(e);
        return al_errf(err, "out of memory for the eviction state of a %d-token KV cache", capacity);
    }
    al_kve_reset(e);
    return 0;
}

int al_kve_attach_quantised(al_kve *e, const al_kvq *q, al_err *err) {
    free(e->side);
    e->side = malloc(sizeof(float) * ((size_t)q->residual + q->group + 1) * e->row);
    return e->side ? 0 : al_errf(err, "out of memory for the eviction state of a quantised KV cache");
}

void al_kve_free(al_kve *e) {
    free(e->pos), free(e->gone), free(e->iwork), free(e->mass), free(e->work), free(e->side);
    memset(e, 0, sizeof *e);
}

void al_kve_reset(al_kve *e) {
    e->n = e->seen = e->n_gone = 0;
    e->cur_pos = e->cur_slot = -1;
}

/* Whether position p is protected after t positions were seen with keep k:
 * a sink or in the recent window of the policy (window: all of r; h2o:
 * ceil(r/2)). */
static int protected_pos(const al_kve *e, int p, int t, int k) {
    const int s = e->o.sinks < k - 1 ? e->o.sinks : k - 1, r = k - s;
    const int recent = e->o.method == AL_KVE_WINDOW ? r : r - r / 2;
    return p < s || p >= t - recent;
}

void al_kve_seek(al_kve *e, int n) {
    al_kve_reset(e);
    e->seen = n;
    int k = e->o.method == AL_KVE_NONE ? n : al_kve_keep(e->budget, n);
    if (e->o.method == AL_KVE_SNAPKV) /* keep(prompt) of the prompt and all after it */
        k = n < e->o.prompt ? n : al_kve_keep(e->budget, e->o.prompt) + n - e->o.prompt;
    const int s = e->o.sinks < k - 1 ? e->o.sinks : k - 1;
    for (int p = 0; p < n; p++) /* the sinks and the newest: what window keeps */
        if (p < s || p >= n - (k - s)) e->pos[e->n] = p, e->mass[e->n++] = 0.0f;
    e->cur_pos = n - 1, e->cur_slot = e->n - 1;
}

int al_kve_slot(al_kve *e, int p) {
    if (p == e->cur_pos) return e->cur_slot;
    e->cur_pos = p;
    e->cur_slot = e->n++;
    e->seen = p + 1;
    e->pos[e->cur_slot] = p;
    e->mass[e->cur_slot] = 0.0f;
    return e->cur_slot;
}

/* The slot holding the position last stored (-1: it went; the next store
 * then starts afresh), after slots moved. */
static void find_current(al_kve *e) {
    e->cur_slot = -1;
    for (int i = 0; i < e->n; i++)
        if (e->pos[i] == e->cur_pos) e->cur_slot = i;
    if (e->cur_slot < 0) e->cur_pos = -1;
}

/* Slot i's position and mass move to slot k. */
static void move_slot(al_kve *e, int i, int k) { e->pos[k] = e->pos[i], e->mass[k] = e->mass[i]; }

/* Removes the slots marked in victim[] (1) of a plain cache, recording
 * their positions in gone[]: the held slots stay [0, n) by moving the last
 * kept slot's row, position and mass into each victim's slot. */
static void remove_marked(al_kve *e, int *victim, char *data, size_t esz) {
    const size_t rb = e->row * esz;
    e->n_gone = 0;
    for (int i = 0; i < e->n; i++)
        if (victim[i]) e->gone[e->n_gone++] = e->pos[i];
    int lo = 0, hi = e->n - 1;
    for (;;) {
        while (lo <= hi && !victim[lo]) lo++;
        while (hi >= lo && victim[hi]) hi--;
        if (lo >= hi) break;
        memcpy(data + (size_t)lo * rb, data + (size_t)hi * rb, rb);
        move_slot(e, hi, lo);
        victim[lo] = 0, victim[hi] = 1;
    }
    e->n -= e->n_gone;
    find_current(e);
}

void al_kve_put_quantised(al_kvq *q, int j, const float *x) {
    const int b = q->bits, levels = (1 << b) - 1;
    const size_t blk = (size_t)(j / q->group);
    for (int ci = 0; ci < q->ncell; ci++) {
        const al_kvq_cell *c = &q->cells[ci];
        for (int i = 0; i < c->L; i++) q->codes[al_kvq_byte_off(q, j, c, i)] = 0;
        if (c->kind == AL_KV_SEG_KEY) {
            for (int e = 0; e < c->w; e++) {
                const uint16_t *sz = q->kscale + 2 * (blk * q->nkey + c->sidx + e);
                const float sc = al_f16_to_f32(sz[0]), z = al_f16_to_f32(sz[1]);
                long code = sc > 0 ? lrintf((x[c->col + e] - z) / sc) : 0;
                code = code < 0 ? 0 : code > levels ? levels : code;
                q->codes[al_kvq_byte_off(q, j, c, e % c->L)] |= (uint8_t)(code << ((e / c->L) * b));
            }
        } else {
            al_kvq_quantise(x + c->col, 1, c->w, b, q->u8, q->vscale + al_kvq_vsz_off(q, j, c->sidx));
            al_kvq_pack(q->u8, c->w, b, q->codes + al_kvq_byte_off(q, j, c, 0));
        }
    }
}

/* Quantises the kept slots of a quantised cache anew, in slot order, as if
 * stored one after the other (fresh blocks and scales; the quantised ones
 * dequantised first): the residual rows are copied aside (e->side) first,
 * as the new residual overwrites them; a block's old codes and scales are
 * read before a flush rewrites them (a flush writes slots below the one
 * being stored). The quantised victims of victim[] (< qn) go; the residual
 * has none left. */
static void requantise(al_kve *e, const int *victim, al_kvq *q) {
    const int qn = q->qn, n = e->n;
    const size_t row = e->row;
    float *x = e->side + (size_t)(n - qn) * row;
    for (int i = qn; i < n; i++)
        for (size_t c = 0; c < row; c++) e->side[(size_t)(i - qn) * row + c] = al_kvq_get(q, i, c);
    al_kvq_reset(q);
    int w = 0;
    for (int i = 0; i < n; i++) {
        if (victim[i] && i < qn) {
            e->gone[e->n_gone++] = e->pos[i];
            continue;
        }
        const float *src = x;
        if (i < qn) { /* old slot i's codes, still in place: read as the old split sees them */
            const int split = q->qn;
            q->qn = qn;
            for (size_t c = 0; c < row; c++) x[c] = al_kvq_get(q, i, c);
            q->qn = split;
        } else {
            src = e->side + (size_t)(i - qn) * row;
        }
        al_kvq_store(q, (size_t)w * row, src, row);
        move_slot(e, i, w++);
    }
    e->n = w;
}

/* Removes the slots marked in victim[] of a quantised cache (kve.h's
 * header: the residual keeps its order; one quantised victim takes the
 * oldest residual row once more than `residual` rows are there; else, or
 * for several, the kept slots are quantised anew). */
static void remove_marked_quantised(al_kve *e, int *victim, al_kvq *q) {
    const int qn = q->qn;
    const size_t esz = al_dtype_size(q->dt), rb = e->row * esz;
    char *res = q->res;
    e->n_gone = 0;
    int w = qn;
    for (int i = qn; i < e->n; i++) { /* residual victims: the younger rows move down, in order */
        if (victim[i]) {
            e->gone[e->n_gone++] = e->pos[i];
            continue;
        }
        if (w != i) memcpy(res + (size_t)(w - qn) * rb, res + (size_t)(i - qn) * rb, rb), move_slot(e, i, w);
        w++;
    }
    e->n = w;
    int nq = 0;
    for (int v = 0; v < qn; v++) nq += victim[v];
    if (nq > 1 || (nq == 1 && e->n - qn <= q->residual)) { /* no aged-out row for each: quantise the cache anew */
        requantise(e, victim, q);
        find_current(e);
        return;
    }
    for (int v = 0; v < qn; v++) {
        if (!victim[v]) continue;
        e->gone[e->n_gone++] = e->pos[v];
        for (size_t c = 0; c < e->row; c++) q->tmp[c] = al_kvq_get(q, qn, c);
        al_kve_put_quantised(q, v, q->tmp);
        move_slot(e, qn, v);
        memmove(res, res + rb, (size_t)(e->n - qn - 1) * rb);
        for (int i = qn + 1; i < e->n; i++) move_slot(e, i, i - 1);
        e->n--;
    }
    find_current(e);
}

/* Removes the marked victims of the layer's cache c, plain or quantised. */
static void remove_victims(al_kve *e, int *victim, const al_kv *c) {
    if (c->q) remove_marked_quantised(e, victim, c->q);
    else remove_marked(e, victim, c->data, al_dtype_size(c->dt));
}

/* qsort context: scores by slot (candidates sorted by score descending,
 * then position ascending); per thread, as decoders may run in several */
static _Thread_local const float *sort_score;
static _Thread_local const int *sort_pos;
static int by_score_desc(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    if (sort_score[i] != sort_score[j]) return sort_score[i] > sort_score[j] ? -1 : 1;
    return sort_pos[i] - sort_pos[j];
}

/* Keeps the `keep` best of the n_cand candidate slots cand[] by score[slot]
 * (highest first, ties: the older), marking the others in victim[]. */
static void keep_best(al_kve *e, int *cand, int n_cand, int keep, const float *score, int *victim) {
    if (n_cand - keep == 1) { /* one victim (the usual step): the lowest score, ties the newest, in one pass */
        int v = cand[0];
        for (int c = 1; c < n_cand; c++) {
            const int i = cand[c];
            if (score[i] < score[v] || (score[i] == score[v] && e->pos[i] > e->pos[v])) v = i;
        }
        victim[v] = 1;
        return;
    }
    sort_score = score, sort_pos = e->pos;
    qsort(cand, (size_t)n_cand, sizeof(int), by_score_desc);
    for (int c = keep; c < n_cand; c++) victim[cand[c]] = 1;
}

/* SnapKV at the prompt's end: pooled votes of the observation window
 * (mass), sinks and the window kept (kve.h). */
static void evict_snapkv(al_kve *e, const al_kv *c) {
    const int P = e->o.prompt, k = al_kve_keep(e->budget, P);
    if (e->seen != P || e->cur_pos != P - 1 || e->n <= k) return;
    const int s = e->o.sinks < k - 1 ? e->o.sinks : k - 1, w0 = al_kve_snap_window(P);
    const int w = w0 < k - s ? w0 : k - s, lim = P - w;
    int *victim = e->iwork, *slot_of = e->iwork + e->capacity, *cand = e->gone;
    float *pooled = e->work;
    for (int p = 0; p < P; p++) slot_of[p] = -1;
    for (int i = 0; i < e->n; i++) slot_of[e->pos[i]] = i;
    /* each candidate's vote: the largest of the votes within 3 positions of it (below lim) */
    for (int i = 0; i < e->n; i++) {
        float best = -INFINITY;
        for (int q = e->pos[i] - AL_KVE_SNAP_POOL / 2; q <= e->pos[i] + AL_KVE_SNAP_POOL / 2; q++)
            if (q >= 0 && q < lim && slot_of[q] >= 0 && e->mass[slot_of[q]] > best) best = e->mass[slot_of[q]];
        pooled[i] = best;
    }
    int nc = 0;
    for (int i = 0; i < e->n; i++) {
        victim[i] = 0;
        if (e->pos[i] >= s && e->pos[i] < lim) cand[nc++] = i;
    }
    keep_best(e, cand, nc, k - s - w, pooled, victim);
    remove_victims(e, victim, c);
}

void al_kve_evict(al_kve *e, const al_kv *c) {
    e->n_gone = 0;
    if (e->o.method == AL_KVE_NONE) return;
    if (e->o.method == AL_KVE_SNAPKV) {
        evict_snapkv(e, c);
        return;
    }
    const int t = e->seen, k = al_kve_keep(e->budget, t);
    if (e->n <= k) return;
    int *victim = e->iwork, *cand = e->iwork + e->capacity, nc = 0;
    for (int i = 0; i < e->n; i++) {
        victim[i] = 0;
        if (!protected_pos(e, e->pos[i], t, k)) cand[nc++] = i;
    }
    /* window: the score is the position (the oldest go); h2o: the accumulated mass */
    const float *score = e->mass;
    if (e->o.method == AL_KVE_WINDOW) {
        for (int i = 0; i < e->n; i++) e->work[i] = (float)e->pos[i];
        score = e->work;
    }
    keep_best(e, cand, nc, nc - (e->n - k), score, victim);
    remove_victims(e, victim, c);
}

/* ---- attention mass after a prefill: column sums of a head's weights ---- */

size_t al_kve_colsum_work(int T) { return (size_t)T; }

/* Row by row (one row of scores in work[T] at a time, never T x T): the
 * scores of query i against keys [0, i] by one matrix-vector product, the
 * score function on the row, |p_j| added to mass[j]. */
void al_kve_colsum(const al_attn_shape *s, const float *q, const float *k, int d, int T, int r0, float *mass,
                   float *work) {
    for (int i = r0 < 0 ? 0 : r0; i < T; i++) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, i + 1, d, s->scale, k, d, q + (size_t)i * d, 1, 0.0f, work, 1);
        al_score_row(s, work, i + 1);
        for (int j = 0; j <= i; j++) mass[j] += fabsf(work[j]);
    }
}

/* The plain reference: each weight in double from its definition. */
void al_kve_colsum_ref(const al_attn_shape *s, const float *q, const float *k, int d, int T, int r0, double *mass) {
    for (int i = r0 < 0 ? 0 : r0; i < T; i++) {
        double mx = -INFINITY, sum = 0;
        for (int pass = 0; pass < 3; pass++)
            for (int j = 0; j <= i; j++) {
                double a = 0;
                for (int e = 0; e < d; e++) a += (double)q[(size_t)i * d + e] * k[(size_t)j * d + e];
                float w = (float)(a * s->scale);
                if (s->score != AL_SCORE_SOFTMAX) {
                    if (pass == 2) al_score_row(s, &w, 1), mass[j] += fabs(w);
                } else if (pass == 0) {
                    mx = w > mx ? w : mx;
                } else if (pass == 1) {
                    sum += exp(w - mx);
                } else {
                    mass[j] += exp(w - mx) / sum;
                }
            }
    }
}
