/*
 * kvq.c: quantised KV caches (kvq.h has the layout): the group-wise
 * quantiser and its reference, planar packing, a layer's cache (cells,
 * residual, block flush), the closed form of its bytes, and element access
 * for the reference decode. The decode kernels over the codes are
 * kvq_kern.h (AVX-512, AVX2) and the plain ones below (generic level).
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "kvq.h"

#define AL_KVQ_NAME_(e, s, b) s,
#define AL_KVQ_BITS_(e, s, b) b,
static const char *const kvq_names[] = {AL_KVQ_KINDS(AL_KVQ_NAME_)};
static const int kvq_bits[] = {AL_KVQ_KINDS(AL_KVQ_BITS_)};
#undef AL_KVQ_NAME_
#undef AL_KVQ_BITS_

int al_kvq_from_name(const char *s) {
    for (int k = 0; s && k < AL_KVQ_COUNT; k++)
        if (!strcmp(s, kvq_names[k])) return k;
    return -1;
}

const char *al_kvq_name(al_kvq_kind k) { return k >= 0 && k < AL_KVQ_COUNT ? kvq_names[k] : "?"; }
int al_kvq_bits(al_kvq_kind k) { return k >= 0 && k < AL_KVQ_COUNT ? kvq_bits[k] : 0; }

/* ---- quantiser ---- */

static float f16_clamp(double x) { return (float)(x > 65504.0 ? 65504.0 : x < -65504.0 ? -65504.0 : x); }

/* x[i * stride], i < n -> codes and fp16 (scale, zero): min-max over the
 * values, scale = (max - min) / (2^b - 1) and zero = min rounded to fp16,
 * then each code from the rounded pair so that dequantising reproduces it. */
void al_kvq_quantise(const float *x, size_t stride, int n, int bits, uint8_t *codes, uint16_t *sz) {
    const int levels = (1 << bits) - 1;
    float mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) {
        const float v = x[(size_t)i * stride];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    sz[0] = al_f32_to_f16(f16_clamp(((double)mx - mn) / levels));
    sz[1] = al_f32_to_f16(f16_clamp(mn));
    const float s = al_f16_to_f32(sz[0]), z = al_f16_to_f32(sz[1]), inv = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < n; i++) {
        const float c = nearbyintf((x[(size_t)i * stride] - z) * inv);
        codes[i] = (uint8_t)(c < 0 ? 0 : c > levels ? levels : c);
    }
}

/* The same in double throughout, with a division instead of the reciprocal. */
void al_kvq_quantise_ref(const float *x, size_t stride, int n, int bits, uint8_t *codes, uint16_t *sz) {
    const int levels = (1 << bits) - 1;
    double mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) {
        const double v = x[(size_t)i * stride];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    sz[0] = al_f32_to_f16(f16_clamp((mx - mn) / levels));
    sz[1] = al_f32_to_f16(f16_clamp(mn));
    const double s = al_f16_to_f32(sz[0]), z = al_f16_to_f32(sz[1]);
    for (int i = 0; i < n; i++) {
        const double c = s > 0 ? nearbyint((x[(size_t)i * stride] - z) / s) : 0;
        codes[i] = (uint8_t)(c < 0 ? 0 : c > levels ? levels : c);
    }
}

/* planes of a cell: per = 8 / bits values per byte, L = ceil(w / per) bytes each */
static int cell_L(int w, int bits) { return (w + 8 / bits - 1) / (8 / bits); }

void al_kvq_pack(const uint8_t *codes, int w, int bits, uint8_t *out) {
    const int L = cell_L(w, bits);
    memset(out, 0, (size_t)L);
    for (int c = 0; c < w; c++) out[c % L] |= (uint8_t)(codes[c] << ((c / L) * bits));
}

void al_kvq_unpack(const uint8_t *packed, int w, int bits, uint8_t *codes) {
    const int L = cell_L(w, bits), m = (1 << bits) - 1;
    for (int c = 0; c < w; c++) codes[c] = (uint8_t)((packed[c % L] >> ((c / L) * bits)) & m);
}

/* ---- a layer's cache ---- */

/* rows the residual needs: residual + group, or the whole capacity if less
 * (a residual covering every position never flushes) */
static size_t res_rows(const al_kvq *q) {
    const size_t r = (size_t)q->residual + q->group;
    return r < (size_t)q->capacity ? r : (size_t)q->capacity;
}

/* channels per cell of a segment: a key unit whole, a value unit in groups */
static int cell_width(const al_kvq_opts *o, const al_kv_seg *s) {
    return s->kind == AL_KV_SEG_KEY ? s->unit : (o->group < s->unit ? o->group : s->unit);
}

int al_kvq_check(const al_kvq_opts *o, const al_kv_seg *segs, int nseg, al_err *err) {
    const int bits = al_kvq_bits(o->kind);
    if (bits <= 0) return al_errf(err, "--kv-quant %s: not a quantisation", al_kvq_name(o->kind));
    if (o->group < 1 || o->group > 256) return al_errf(err, "--kv-group %d: must be in 1..256", o->group);
    if (o->residual < 0) return al_errf(err, "--kv-residual %d: must not be negative", o->residual);
    int padded = 0;
    for (int i = 0; i < nseg; i++) {
        const al_kv_seg *s = &segs[i];
        const int cw = cell_width(o, s);
        if (s->kind == AL_KV_SEG_VALUE && s->unit % cw)
            return al_errf(err, "--kv-group %d does not divide the %d channels a value group spans in this design's cache "
                           "(columns %d..%d)", o->group, s->unit, s->off, s->off + s->width - 1);
        padded += s->unit / cw * cell_L(cw, bits) * (8 / bits);
    }
    if (padded > AL_KVQ_MAX_CELL)
        return al_errf(err, "a cache row's key/value units span %d channels: more than the %d quantised decode supports",
                       padded, AL_KVQ_MAX_CELL);
    return 0;
}

int al_kvq_create(al_kvq *q, const al_kvq_opts *o, const al_kv_seg *segs, int nseg, size_t vpt, int capacity,
                  al_dtype dt, al_err *err) {
    memset(q, 0, sizeof *q);
    if (al_kvq_check(o, segs, nseg, err)) return -1;
    q->bits = al_kvq_bits(o->kind), q->group = o->group, q->residual = o->residual, q->capacity = capacity;
    assert(q->bits > 0); /* al_kvq_check refused every other kind */
    q->vpt = vpt, q->dt = dt;
    int ncell = 0;
    for (int i = 0; i < nseg; i++) ncell += segs[i].width / cell_width(o, &segs[i]);
    q->cells = malloc(sizeof(al_kvq_cell) * (size_t)ncell);
    q->cell_of = malloc(sizeof(int) * vpt);
    if (!q->cells || !q->cell_of) {
        al_kvq_free(q);
        return al_errf(err, "out of memory for a quantised KV cache");
    }
    for (size_t c = 0; c < vpt; c++) q->cell_of[c] = -1;
    for (int i = 0; i < nseg; i++) {
        const al_kv_seg *s = &segs[i];
        const int cw = cell_width(o, s);
        for (int c0 = 0; c0 < s->width; c0 += cw) {
            al_kvq_cell *c = &q->cells[q->ncell];
            c->col = s->off + c0, c->w = cw, c->L = cell_L(cw, q->bits), c->pw = c->L * (8 / q->bits);
            c->kind = s->kind, c->byte = q->code_row, c->bm = s->kind == AL_KV_SEG_KEY && !s->dual;
            c->sidx = s->kind == AL_KV_SEG_KEY ? q->nkey : q->nvcell;
            if (s->kind == AL_KV_SEG_KEY) q->nkey += cw;
            else q->nvcell++;
            q->code_row += (size_t)c->L;
            for (int e = 0; e < cw; e++) q->cell_of[c->col + e] = q->ncell;
            q->ncell++;
        }
    }
    const size_t nblk = ((size_t)capacity + q->group - 1) / q->group, rows = res_rows(q);
    const size_t codes = (size_t)capacity * q->code_row, ks = nblk * q->nkey * 2, vs = (size_t)capacity * q->nvcell * 2;
    q->codes = al_alloc(codes + 64); /* 64: the kernels' whole-vector loads past a row's last cell */
    q->kscale = al_alloc(sizeof(uint16_t) * (ks ? ks : 1));
    q->vscale = al_alloc(sizeof(uint16_t) * (vs ? vs : 1));
    q->res = al_alloc(rows * vpt * al_dtype_size(dt));
    q->tmp = al_alloc(sizeof(float) * (size_t)q->group * vpt);
    q->u8 = malloc((size_t)q->group > vpt ? (size_t)q->group : vpt);
    if (!q->codes || !q->kscale || !q->vscale || !q->res || !q->tmp || !q->u8) {
        al_kvq_free(q);
        return al_errf(err, "out of memory for a %d-token quantised KV cache", capacity);
    }
    memset(q->codes, 0, codes + 64);
    q->bytes = codes + sizeof(uint16_t) * (ks + vs) + rows * vpt * al_dtype_size(dt);
    return 0;
}

void al_kvq_free(al_kvq *q) {
    free(q->cells);
    free(q->cell_of);
    al_free(q->codes);
    al_free(q->kscale);
    al_free(q->vscale);
    al_free(q->res);
    al_free(q->tmp);
    free(q->u8);
    memset(q, 0, sizeof *q);
}

void al_kvq_reset(al_kvq *q) { q->qn = 0; }

/* The split a cache filled token by token has after n tokens: a block is
 * flushed when the residual reaches residual + group rows, so it holds at
 * most residual + group - 1 of them. */
void al_kvq_seek(al_kvq *q, int n) {
    const int over = n - (q->residual + q->group - 1);
    q->qn = over > 0 ? (over + q->group - 1) / q->group * q->group : 0;
}

double al_kvq_bytes_per_token(const al_kvq *q) {
    return (double)q->code_row + 4.0 * q->nvcell + 4.0 * q->nkey / q->group;
}

double al_kvq_held_bytes(const al_kvq *q, int n) {
    const int qn = q->qn < n ? q->qn : n;
    return qn * al_kvq_bytes_per_token(q) + (double)(n - qn) * q->vpt * al_dtype_size(q->dt);
}

void al_kvq_fill_random(al_kvq *q, uint64_t seed) {
    al_rng rng;
    al_rng_seed(&rng, seed);
    const size_t nblk = ((size_t)q->capacity + q->group - 1) / q->group;
    for (size_t i = 0; i < (size_t)q->capacity * q->code_row; i++) q->codes[i] = (uint8_t)al_rng_u64(&rng);
    for (size_t i = 0; i < nblk * q->nkey; i++) {
        q->kscale[2 * i] = al_f32_to_f16(0.05f), q->kscale[2 * i + 1] = al_f32_to_f16(-0.5f);
    }
    for (size_t i = 0; i < (size_t)q->capacity * q->nvcell; i++) {
        q->vscale[2 * i] = al_f32_to_f16(0.05f), q->vscale[2 * i + 1] = al_f32_to_f16(-0.5f);
    }
    const al_kv kv = {q->res, q->dt};
    float buf[64];
    const size_t nres = res_rows(q) * q->vpt;
    for (size_t i = 0; i < nres; i += 64) {
        const size_t k = nres - i < 64 ? nres - i : 64;
        for (size_t j = 0; j < k; j++) buf[j] = 0.5f * al_rng_normal(&rng);
        al_kv_store(kv, i, buf, k);
    }
}

/* Quantises positions [qn, qn + group), residual rows 0..group-1, into the
 * codes and scales, drops them from the residual and advances qn. */
static void flush_block(al_kvq *q) {
    const int N = q->group, b = q->bits;
    const size_t vpt = q->vpt, blk = (size_t)q->qn / N;
    for (size_t i = 0; i < (size_t)N * vpt; i++)
        q->tmp[i] = q->dt == AL_DT_BF16 ? al_bf16_to_f32(((const uint16_t *)q->res)[i]) : ((const float *)q->res)[i];
    memset(q->codes + (size_t)q->qn * q->code_row, 0, (size_t)N * q->code_row); /* the block's codes */
    for (int ci = 0; ci < q->ncell; ci++) {
        const al_kvq_cell *c = &q->cells[ci];
        if (c->kind == AL_KV_SEG_KEY) { /* per channel across the block's tokens */
            for (int e = 0; e < c->w; e++) {
                uint16_t *sz = q->kscale + 2 * (blk * q->nkey + c->sidx + e);
                al_kvq_quantise(q->tmp + c->col + e, vpt, N, b, q->u8, sz);
                for (int t = 0; t < N; t++)
                    q->codes[al_kvq_byte_off(q, q->qn + t, c, e % c->L)] |= (uint8_t)(q->u8[t] << ((e / c->L) * b));
            }
        } else { /* per token across the cell's channels */
            for (int t = 0; t < N; t++) {
                uint16_t *sz = q->vscale + al_kvq_vsz_off(q, q->qn + t, c->sidx);
                al_kvq_quantise(q->tmp + (size_t)t * vpt + c->col, 1, c->w, b, q->u8, sz);
                al_kvq_pack(q->u8, c->w, b, q->codes + al_kvq_byte_off(q, q->qn + t, c, 0));
            }
        }
    }
    const size_t esz = al_dtype_size(q->dt), keep = (size_t)q->residual * vpt * esz;
    memmove(q->res, (char *)q->res + (size_t)N * vpt * esz, keep);
    q->qn += N;
}

void al_kvq_store(al_kvq *q, size_t at, const float *src, size_t n) {
    const size_t row = at / q->vpt;
    if (row < (size_t)q->qn || row - q->qn >= res_rows(q)) return; /* not a residual row: a caller bug */
    al_kv_store((al_kv){q->res, q->dt}, at - (size_t)q->qn * q->vpt, src, n);
    if ((at + n) % q->vpt == 0 && row + 1 - q->qn >= (size_t)q->residual + q->group) flush_block(q);
}

float al_kvq_get(const al_kvq *q, int j, size_t col) {
    if (j >= q->qn) {
        const size_t i = (size_t)(j - q->qn) * q->vpt + col;
        return q->dt == AL_DT_BF16 ? al_bf16_to_f32(((const uint16_t *)q->res)[i]) : ((const float *)q->res)[i];
    }
    const al_kvq_cell *c = &q->cells[q->cell_of[col]];
    const int e = (int)(col - c->col);
    const int code = (q->codes[al_kvq_byte_off(q, j, c, e % c->L)] >> ((e / c->L) * q->bits)) & ((1 << q->bits) - 1);
    const uint16_t *sz = c->kind == AL_KV_SEG_KEY ? q->kscale + 2 * ((size_t)(j / q->group) * q->nkey + c->sidx + e)
                                                  : q->vscale + al_kvq_vsz_off(q, j, c->sidx);
    return (float)((double)al_f16_to_f32(sz[0]) * code + al_f16_to_f32(sz[1]));
}

int al_kvq_chunk(const al_kvq *q) { return q->group * (256 / q->group); }
