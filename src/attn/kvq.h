/*
 * kvq.h: quantised KV caches (KIVI layout) for every design's own cache form.
 *
 * Data structure. A design's cache row (one position, `vpt` values) is cut
 * into segments (al_kv_seg, the design's cache_segments op): column ranges
 * that are either keys, quantised per channel across tokens (KIVI's keys;
 * MHA/GQA/MQA K, MLA k_pe, LRKV K_s and R_K, and MLA's latent c~ by
 * default), or values, quantised per token across channels (MHA/GQA/MQA V,
 * LRKV V_s and R_V, MLA's c~ with AL_KVQ_LATENT_TOKEN). A segment is made of
 * units (a KV head's key, a head's latent: the ranges a decode view reads);
 * a key unit is one cell, a value unit is cut into groups of
 * min(group, unit) channels, each a cell with its own scale and zero point.
 *
 * One layer's quantised cache (al_kvq) holds
 *   codes   capacity x code_row bytes in blocks of `group` positions,
 *           cell-major inside a block: cell c's bytes of the block's N
 *           positions lie together in one run of N x L bytes
 *           (al_kvq_run_off), so a head reads its cells of a block as one
 *           stream instead of a few bytes of every row (with rows of all
 *           heads, kilobytes apart, the reads waited on memory). Each cell
 *           is packed "planar": a cell of w channels at b bits has per = 8/b
 *           planes of L = ceil(w/per) bytes; channel c sits in byte c % L at
 *           bit (c / L) * b (unused channels of the last plane are 0).
 *           Inside its run a value cell is position-major (a position's L
 *           bytes together: the kernels widen them a vector at a time and
 *           add them, weighted, into the output channels) and a key cell is
 *           byte-major (byte i of the N positions together: the kernels
 *           widen a vector of positions at once and accumulate their scores
 *           in lanes, no horizontal sums), unless its segment is also read
 *           as values (al_kv_seg.dual: MLA's latent), which stays
 *           position-major; al_kvq_byte_off says where a byte lies.
 *   kscale  [ceil(capacity/group)][nkey][2] fp16 (scale, zero) of every key
 *           channel in each block of `group` tokens;
 *   vscale  [capacity / group][nvcell][group][2] fp16 (scale, zero) of each
 *           value cell at each position, block-major like the codes, so a
 *           cell's pairs over a block lie together (al_kvq_vsz_off);
 *   res     [residual + group][vpt] the newest positions [qn, n), unquantised
 *           (at most capacity rows)
 *           in the cache's dtype (F32 or BF16), row 0 = position qn.
 * Positions [0, qn) are quantised (qn a multiple of group); a token ages
 * out of the residual when more than `residual` tokens follow it, and the
 * aged-out tokens are quantised a block of `group` at a time (keys need the
 * block for their per-channel statistics; values are quantised at the same
 * moment so that one boundary splits the cache). So between residual and
 * residual + group - 1 of the newest tokens are exact, as in KIVI.
 *
 * A layer's al_kv carries its al_kvq: al_kv_store writes position j's
 * values to residual row j - qn and, when a row completes and a block has
 * aged out, quantises it; al_attn_decode reads [0, qn) from the codes and
 * [qn, n) from the residual. Designs need nothing but their segments.
 *
 * Bytes per token (al_kvq_bytes_per_token, exact for the allocation):
 *   sum over cells of ceil(w b / 8)  +  4 nvcell  +  4 nkey / group
 * and each layer holds capacity x that (key scales per started block) plus
 * the residual's min(residual + group, capacity) x vpt values.
 */
#ifndef AL_KVQ_H
#define AL_KVQ_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"
#include "../core/dtype.h"

/* X(ENUM, name, bits): the cache quantisations, as --kv-quant spells them */
#define AL_KVQ_KINDS(X)                                                                                                \
    X(NONE, "none", 0)                                                                                                 \
    X(INT8, "int8", 8)                                                                                                 \
    X(INT4, "int4", 4)                                                                                                 \
    X(INT2, "int2", 2)
#define AL_KVQ_ENUM_(e, s, b) AL_KVQ_##e,
typedef enum { AL_KVQ_KINDS(AL_KVQ_ENUM_) AL_KVQ_COUNT } al_kvq_kind;
#undef AL_KVQ_ENUM_
/* the kind named s (-1: none), its name and bits per value */
int al_kvq_from_name(const char *s);
const char *al_kvq_name(al_kvq_kind k);
int al_kvq_bits(al_kvq_kind k);

enum { AL_KV_SEG_KEY = 0, AL_KV_SEG_VALUE = 1, AL_KV_MAX_SEGS = 4, AL_KVQ_MAX_CELL = 4096 };
/* MLA's latent c~ (key and value at once): per channel (KIVI's keys, the
 * default) or per token (KIVI's values) */
enum { AL_KVQ_LATENT_CHANNEL = 0, AL_KVQ_LATENT_TOKEN = 1 };

/* Columns [off, off + width) of a cache row, made of units of `unit`
 * columns; kind AL_KV_SEG_KEY or AL_KV_SEG_VALUE; dual: a key segment the
 * decode also reads as values (MLA's latent c~ per channel), whose codes
 * then stay position-major like a value's (a byte-major run would make
 * every value read a reduction across lanes). */
typedef struct al_kv_seg {
    int off, width, unit, kind, dual;
} al_kv_seg;

/* What the user asks for (--kv-quant, --kv-group, --kv-residual, --kv-latent). */
typedef struct al_kvq_opts {
    al_kvq_kind kind;
    int group;    /* tokens per key block; channels per value group (at most a unit) */
    int residual; /* newest tokens kept unquantised */
    int latent;   /* AL_KVQ_LATENT_*: MLA's c~ */
} al_kvq_opts;

/* One cell as stored: columns [col, col + w) of a row, its planar bytes
 * at `byte` of a code row (L per plane, planes x L = pw padded channels),
 * kind AL_KV_SEG_*, and its scales: key, the index of channel col among the
 * nkey key channels (scale of channel col + c at sidx + c); value, its index
 * among the nvcell value cells. bm: its runs are byte-major (a key cell
 * that is only ever read as keys), else position-major. */
typedef struct al_kvq_cell {
    int col, w, L, pw, kind, sidx, bm;
    size_t byte;
} al_kvq_cell;

typedef struct al_kvq {
    int bits, group, residual, capacity;
    size_t vpt;
    al_dtype dt; /* residual rows: F32 or BF16 */
    int ncell;
    al_kvq_cell *cells; /* in column order */
    int *cell_of;       /* [vpt]: the cell of each column */
    size_t code_row;    /* bytes of a position's codes */
    int nkey, nvcell;
    uint8_t *codes;
    uint16_t *kscale, *vscale;
    void *res;
    float *tmp;   /* [group][vpt]: a block being quantised (workspace) */
    uint8_t *u8;  /* [max(group, vpt)] unpacked codes (workspace) */
    int qn;       /* positions quantised, a multiple of group */
    size_t bytes; /* allocated for the cache proper (codes, scales, residual) */
} al_kvq;

/* Byte offset in codes of the run of cell c in block blk: the block's
 * base, then the cells before c, N bytes for each of their bytes. */
static inline size_t al_kvq_run_off(const al_kvq *q, size_t blk, const al_kvq_cell *c) {
    return blk * (size_t)q->group * q->code_row + c->byte * (size_t)q->group;
}

/* Byte offset in codes of byte i (< c->L) of cell c at position j (j < qn:
 * whole blocks): in the cell's run of j's block, byte-major (i N + t) or
 * position-major (t L + i), t = j's place in its block. */
static inline size_t al_kvq_byte_off(const al_kvq *q, int j, const al_kvq_cell *c, int i) {
    const size_t N = (size_t)q->group, blk = (size_t)j / N, t = (size_t)j - blk * N;
    return al_kvq_run_off(q, blk, c) + (c->bm ? (size_t)i * N + t : t * (size_t)c->L + (size_t)i);
}

/* Index in vscale of the (scale, zero) pair of value cell sidx at position
 * j (j < qn: whole blocks). */
static inline size_t al_kvq_vsz_off(const al_kvq *q, int j, int sidx) {
    const size_t N = (size_t)q->group, blk = (size_t)j / N;
    return 2 * ((blk * (size_t)q->nvcell + (size_t)sidx) * N + ((size_t)j - blk * N));
}

/* Checks opts against the segments of a row (a group that does not divide
 * a value unit, int2/int4 cells beyond AL_KVQ_MAX_CELL, ...): 0 or -1 with
 * one line in err. */
int al_kvq_check(const al_kvq_opts *o, const al_kv_seg *segs, int nseg, al_err *err);
/* Allocates one layer's quantised cache for `capacity` positions of rows of
 * vpt values (residual in dt); 0 or -1 with one line in err. */
int al_kvq_create(al_kvq *q, const al_kvq_opts *o, const al_kv_seg *segs, int nseg, size_t vpt, int capacity,
                  al_dtype dt, al_err *err);
void al_kvq_free(al_kvq *q);
/* Empties it (qn = 0); al_kvq_seek makes it hold positions [0, n) as far as
 * the split goes (benchmarks: the contents stay whatever they were). */
void al_kvq_reset(al_kvq *q);
void al_kvq_seek(al_kvq *q, int n);
/* The closed form of the header: bytes per token (scales included) of the
 * quantised part. */
double al_kvq_bytes_per_token(const al_kvq *q);
/* Bytes a layer holding n positions uses for them: qn quantised ones at
 * the closed form, n - qn in the residual at the cache dtype. */
double al_kvq_held_bytes(const al_kvq *q, int n);
/* Fills codes, scales and residual with random values (benchmarks). */
void al_kvq_fill_random(al_kvq *q, uint64_t seed);

/* al_kv_store into a quantised layer (attn.h's al_kv_store calls this). */
void al_kvq_store(al_kvq *q, size_t at, const float *src, size_t n);
/* Value at column col of position j (quantised: dequantised; else the
 * residual's), for references and tests. */
float al_kvq_get(const al_kvq *q, int j, size_t col);
/* Positions per decode chunk of the quantised part: the largest multiple
 * of group up to 256 (the decode's chunk rows), at least 128 (group <=
 * 256). Long chunks spread each work item's fixed costs (the padded and
 * scaled query, the merge) over more positions. */
int al_kvq_chunk(const al_kvq *q);

/* Group-wise quantisation of x[n] (one cell's values, or one channel's
 * values across a block: stride apart) to b-bit codes with an fp16 scale
 * and zero point, min-max asymmetric: code = round((x - zero) / scale),
 * x ~ scale * code + zero. codes[n] (one per byte, unpacked); sz[2] = fp16
 * scale, zero. The plain reference is the same arithmetic in double. */
void al_kvq_quantise(const float *x, size_t stride, int n, int bits, uint8_t *codes, uint16_t *sz);
void al_kvq_quantise_ref(const float *x, size_t stride, int n, int bits, uint8_t *codes, uint16_t *sz);
/* planar packing of one cell (w codes -> cell bytes) and back */
void al_kvq_pack(const uint8_t *codes, int w, int bits, uint8_t *out);
void al_kvq_unpack(const uint8_t *packed, int w, int bits, uint8_t *codes);

#endif
