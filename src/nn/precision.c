/*
 * precision.c: the precision of the matrix products (nn.h says what each
 * mode computes), the BF16 copies of weight arenas, the engines BF16
 * products run on and how each tile of al_sgemm's product is fed to them.
 *
 * Data: the mode (one value for the process); a small table of weight
 * arenas with their BF16 copies, looked up by address range when a product
 * in BF16 mode reads an operand (a handful of arenas at most: the models a
 * command holds); the amx engine's packed weights, kept between products
 * until the copies change (below); the engine table (AL_BF16_ENGINES: what
 * each needs, its block sizes); and one workspace per calling thread.
 *
 * A tile (rows [r0, r1) x columns [c0, c1) of C, from linear.c) runs, for
 * the emulated and avx512-bf16 engines (onednn and amx: below), as blocks:
 * columns in steps of the engine's nch from c0, K in steps of kch from 0,
 * rows in steps of mch from r0. For each (column, K) block the B operand is
 * prepared once (rounded from fp32, or read from the arena's BF16 copy),
 * for each row block within it the A operand, then the engine multiplies
 * them into C (beta for the first K block, 1 after: the K blocks'
 * sums are added in fp32 in a fixed order). Every block boundary is a
 * function of the shape and the tile, and the tiles are cut by the shape
 * (linear.c), so a product's bits depend on the engine and the shape only,
 * never on the thread count: each tile runs single-threaded (oneDNN too: it
 * sees one OpenMP thread inside al_sgemm's region). Two engines let al_sgemm
 * merge neighbouring row blocks into one tile, where that gives the same
 * bits (merge_rows): emulated, whose row blocks start at multiples of 48
 * rows, where OpenBLAS's exact sets give the bits of one whole call
 * (linear.c), and onednn where oneDNN runs its AVX512-BF16 kernels
 * (gemm_onednn.c); our kernels' tiles and oneDNN's on AMX are never merged.
 *
 * Engines (nn.h): emulated rounds both operands into fp32 blocks and calls
 * single-threaded sgemm (a bf16 x bf16 product is exact in fp32, so this
 * computes what the matrix units compute, up to the order of the fp32 sums);
 * onednn rounds each operand once per product, whole and in its memory
 * order (an operand with a BF16 copy, the weights, is read in place; a
 * linear's dy, read by both of its backward products, comes rounded once,
 * al_bf16_round_shared), and runs each tile, K whole, as one cached bf16
 * matmul primitive over strided views of them (gemm_onednn.c; transposes
 * are strides, oneDNN packs what it needs itself: rounding or transposing
 * per block cost more than the products, measured on Zen 4; al_sgemm cuts
 * its tiles columns first).
 * oneDNN's brgemm (AMX, AVX512-BF16) kernels take only dense views, so an
 * operand whose tile views would be strided past the tile (its lines across
 * memory rows, C cut along them: dX's weights, dW's activations) is laid out
 * blocked by C's cut in the same pass (a weight's BF16 copy: copied once per
 * product), and what stays strided (C's tiles) is copied dense there. amx
 * packs both operands once per product, whole, into 1 KB tiles
 * (bf16_tiles.c, in parts on the product's threads, each tile alone) and
 * runs each tile of C, K whole, as one call of its AMX kernel over them
 * (gemm_amx.c; few large tiles: linear.c's amx_cut); avx512-bf16 packs blocks into the VNNI
 * layouts of precision_internal.h and runs its kernel (gemm_avx512bf16.c).
 */
#include <assert.h>
#include <cblas.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/blas.h"
#include "../core/cpu.h"
#include "../core/thread_buf.h"
#include "nn.h"
#include "precision_internal.h"

static al_precision g_mode = AL_PREC_F32;

const char *al_precision_name(al_precision p) { return p == AL_PREC_BF16 ? "BF16" : "F32"; }

int al_precision_from_name(const char *name, al_precision *out) {
    if (!strcasecmp(name, "f32")) *out = AL_PREC_F32;
    else if (!strcasecmp(name, "bf16")) *out = AL_PREC_BF16;
    else if (!strcasecmp(name, "auto")) *out = al_precision_auto();
    else return -1;
    return 0;
}

al_precision al_precision_auto(void) { return al_precision_auto_for(al_cpu_level_now(), al_cpu_bf16_dot_fast()); }

/* bf16 where its products run faster than fp32's: on AMX, or AVX512-BF16
 * where vdpbf16ps outruns the fp32 FMAs (cpu.h); else f32 */
al_precision al_precision_auto_for(int cpu_level, int bf16_dot_fast) {
    const int fast = cpu_level >= AL_CPU_AMX || (cpu_level >= AL_CPU_AVX512_BF16 && bf16_dot_fast);
    return fast ? AL_PREC_BF16 : AL_PREC_F32;
}

void al_precision_set(al_precision p) { g_mode = p; }
al_precision al_precision_now(void) { return g_mode; }

/* ---- the engines ---- */

/* The emulated engine's K blocks (also on the stack, below). */
enum { EMU_KCH = 256 };

/* What each engine needs of the CPU set in use, and its block sizes (rows,
 * K, columns of one block; emulated's rows a multiple of 48, the own
 * kernels' multiples of their padding). Workspace slot: an A block and a B
 * block of elem bytes each. */
static const struct {
    al_cpu_level needs;
    int mch, kch, nch;
} engines[AL_BF16_ENGINE_COUNT] = {
    [AL_BF16_EMULATED] = {AL_CPU_GENERIC, 768, EMU_KCH, 1024},
    [AL_BF16_ONEDNN] = {AL_CPU_AVX512_BF16, 0, 0, 0}, /* whole tiles over the plan's operands: no blocks */
    [AL_BF16_AVX512BF16] = {AL_CPU_AVX512_BF16, 256, 256, 256},
    [AL_BF16_AMX] = {AL_CPU_AMX, 0, 0, 0}, /* whole tiles over the plan's packed operands: no blocks */
};
/* The emulated engine without a workspace: blocks on the stack (its K blocks
 * as above, so only the fp32 rounding of row/column edges can differ). */
enum { STACK_MCH = 48, STACK_NCH = 64 };

#define ENGINE_NAME(id, name) name,
static const char *const engine_names[AL_BF16_ENGINE_COUNT] = {AL_BF16_ENGINES(ENGINE_NAME)};
#undef ENGINE_NAME

static atomic_int engine_forced = -1;
static int onednn_test_f32, own_test_ref;

const char *al_bf16_engine_name(al_bf16_engine e) {
    return (unsigned)e < AL_BF16_ENGINE_COUNT ? engine_names[e] : "?";
}

int al_bf16_engine_of_name(const char *name, al_bf16_engine *out) {
    if (!strcasecmp(name, "own")) {
        *out = al_bf16_engine_runs(AL_BF16_AMX) ? AL_BF16_AMX : AL_BF16_AVX512BF16;
        return 0;
    }
    for (int e = 0; e < AL_BF16_ENGINE_COUNT; e++)
        if (!strcasecmp(name, engine_names[e])) {
            *out = (al_bf16_engine)e;
            return 0;
        }
    return -1;
}

int al_bf16_engine_runs(al_bf16_engine e) {
    if ((unsigned)e >= AL_BF16_ENGINE_COUNT) return 0;
    if (e == AL_BF16_ONEDNN && onednn_test_f32) return al_onednn_available(1);
    if ((e == AL_BF16_AVX512BF16 || e == AL_BF16_AMX) && own_test_ref) return 1;
    if (al_cpu_level_now() < engines[e].needs) return 0;
    return e == AL_BF16_ONEDNN ? al_onednn_available(0) : 1;
}

/* What an engine that cannot run falls to (nn.h). */
static al_bf16_engine engine_below(al_bf16_engine e) {
    switch (e) {
    case AL_BF16_AMX: return AL_BF16_ONEDNN;
    case AL_BF16_ONEDNN: return AL_BF16_AVX512BF16;
    default: return AL_BF16_EMULATED;
    }
}

al_bf16_engine al_bf16_engine_now(void) {
    int want = atomic_load(&engine_forced);
    if (want < 0) {
        al_bf16_engine e = AL_BF16_DEFAULT;
        const char *env = getenv("ATTNLAB_BF16_ENGINE");
        if (env && *env && al_bf16_engine_of_name(env, &e)) e = AL_BF16_DEFAULT; /* unknown: the default */
        want = (int)e;
    }
    al_bf16_engine e = (al_bf16_engine)want;
    while (e != AL_BF16_EMULATED && !al_bf16_engine_runs(e)) e = engine_below(e);
    return e;
}

al_bf16_engine al_bf16_engine_force(int e) {
    atomic_store(&engine_forced, e >= 0 && e < AL_BF16_ENGINE_COUNT ? e : -1);
    return al_bf16_engine_now();
}

const char *al_precision_engine(void) { return al_bf16_engine_name(al_bf16_engine_now()); }

void al_bf16_onednn_test_f32(int on) { onednn_test_f32 = on; }
void al_bf16_own_test_ref(int on) { own_test_ref = on; }

static void packed_clear(void);

/* ---- BF16 copies of weight arenas ---- */

enum { MAX_SHADOWS = 8 };
typedef struct shadow {
    const float *w; /* the fp32 arena (NULL: free slot) */
    size_t n;
    uint16_t *bf; /* its BF16 copy, n elements */
} shadow;
static shadow g_shadows[MAX_SHADOWS];

static shadow *shadow_find(const float *w) {
    for (int i = 0; i < MAX_SHADOWS; i++)
        if (g_shadows[i].w == w && w) return &g_shadows[i];
    return NULL;
}

/* dst[n] = bf16 of src[n] (a loop gcc vectorises). */
void al_bf16_round_run_ref(uint16_t *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (uint16_t)(al_bf16_round_bits(src[i]) >> 16);
}

/* The same by the set's own loop: the onednn engine rounds every fp32
 * operand through here (5-8 % of a study model's bf16 step on Zen 4 with
 * the plain loop, perf). */
void al_bf16_round_run(uint16_t *restrict dst, const float *restrict src, size_t n) {
    const al_cpu_level level = al_cpu_level_now();
    if (level >= AL_CPU_AVX512_BF16)
        al_bf16_round_run_avx512bf16(dst, src, n);
    else if (level >= AL_CPU_AVX512)
        al_bf16_round_run_avx512(dst, src, n);
    else
        al_bf16_round_run_ref(dst, src, n);
}

/* The same bits, for a destination much larger than the caches that is read
 * back only after they have turned over (the weights' BF16 copy, written by
 * AdamW): on AVX512-BF16 its whole lines are stored past the caches, which
 * saves reading each line in before writing it (2 of AdamW's 32 bytes of
 * memory traffic a weight). Visible to other threads when it returns. */
void al_bf16_round_stream(uint16_t *restrict dst, const float *restrict src, size_t n) {
    if (al_cpu_level_now() >= AL_CPU_AVX512_BF16) al_bf16_round_stream_avx512bf16(dst, src, n);
    else al_bf16_round_run(dst, src, n);
}

/* dst[n] = src[n] rounded to bf16 values, kept as fp32. */
static void round_run_f32(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = al_bits_float(al_bf16_round_bits(src[i]));
}

/* dst[n] = the bf16 values src[n] widened to fp32. */
static void widen_run(float *restrict dst, const uint16_t *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = al_bits_float((uint32_t)src[i] << 16);
}

/* Rounds src[n] to BF16 into dst, in parallel (arenas are large; a linear's
 * dy, al_bf16_round_shared, is 0.8-2.4 M values in the gpt2 step). */
static void round_arena(uint16_t *dst, const float *src, size_t n) {
    enum { CHUNK = 1 << 16 };
    const long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        const size_t at = (size_t)c * CHUNK, len = n - at < CHUNK ? n - at : CHUNK;
        al_bf16_round_run(dst + at, src + at, len);
    }
}

int al_bf16_shadow_attach(const float *w, size_t n, al_err *err) {
    shadow *s = shadow_find(w);
    if (s && s->n != n) {
        al_bf16_shadow_detach(w);
        s = NULL;
    }
    if (!s) {
        for (int i = 0; i < MAX_SHADOWS && !s; i++)
            if (!g_shadows[i].w) s = &g_shadows[i];
        if (!s) return al_errf(err, "bf16 weights: more than %d weight arenas at once", MAX_SHADOWS);
        uint16_t *bf = al_alloc(n * sizeof *bf);
        if (!bf) return al_errf(err, "bf16 weights: out of memory for %zu weights", n);
        *s = (shadow){w, n, bf};
    }
    packed_clear();
    round_arena(s->bf, w, n);
    return 0;
}

void al_bf16_shadow_refresh(const float *w) {
    shadow *s = shadow_find(w);
    if (!s) return;
    packed_clear(); /* the weights packed from the old values */
    round_arena(s->bf, s->w, s->n);
}

uint16_t *al_bf16_shadow_write(const float *w) {
    shadow *s = shadow_find(w);
    if (!s) return NULL;
    packed_clear(); /* the weights packed from the old values */
    return s->bf;
}

void al_bf16_shadow_detach(const float *w) {
    shadow *s = shadow_find(w);
    if (!s) return;
    packed_clear();
    al_free(s->bf);
    *s = (shadow){0};
}

const uint16_t *al_bf16_shadow_of(const float *p) {
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < MAX_SHADOWS; i++) {
        const shadow *s = &g_shadows[i];
        if (s->w && a >= (uintptr_t)s->w && a < (uintptr_t)(s->w + s->n)) return s->bf + (p - s->w);
    }
    return NULL;
}

/* ---- the amx engine's packed weights ----
 * A product packs both operands into tiles (bf16_tiles.c) before its
 * kernel runs; in inference the same weights are packed again for every
 * forward (every prompt, evaluation batch, attention map), about 8 % of a
 * bf16 prefill (perf, `bench prefill`, 12 x 768, 512 tokens). So a B operand
 * read from a BF16 copy (an attached arena's: the weights) is remembered by
 * its view (first element, strides, lines, K): the first product with a
 * view only notes it, the second packs it into tiles kept here, and every
 * later one reads them instead of packing. Every attach, refresh or detach
 * of a copy empties the table, so tiles never outlive the values they were
 * packed from; a training step, which refreshes once and reads each view
 * once (the forward and the backward read a weight in two orientations),
 * only notes views and allocates nothing. Not kept: operands without a copy
 * (activations; a mapped checkpoint's BF16 weights, whose lifetime this
 * table cannot see), products planned inside a parallel region (the table,
 * like the copies' table, is one thread's: the thread that drives the
 * products), and tiles past twice the copies' size plus 8 MB in all (tiles
 * pad lines to 16 and K to 32). Same tiles, same bits. */
enum { PACKED_MAX = 512 };
typedef struct packed_b {
    const uint16_t *src; /* the view's first element; NULL: free slot */
    size_t rs, cs;
    int n, K;
    uint16_t *tiles; /* NULL: noted, not kept (yet) */
    size_t elems;
} packed_b;
static packed_b g_packed[PACKED_MAX];
static size_t g_packed_elems; /* kept tiles' elements */
static int packed_off;        /* test hook */

static void packed_clear(void) {
    for (int i = 0; i < PACKED_MAX; i++) {
        al_free(g_packed[i].tiles);
        g_packed[i] = (packed_b){0};
    }
    g_packed_elems = 0;
}

void al_bf16_packed_cache(int on) {
    packed_off = !on;
    packed_clear();
}

size_t al_bf16_packed_count(void) {
    size_t n = 0;
    for (int i = 0; i < PACKED_MAX; i++) n += g_packed[i].tiles != NULL;
    return n;
}

/* The entry of view (bf, rs, cs) with n lines of K, *seen 1 if it was
 * there before; else a new one noting it (*seen 0); NULL: the table is
 * full. */
static packed_b *packed_entry(const uint16_t *bf, size_t rs, size_t cs, int n, int K, int *seen) {
    packed_b *free_slot = NULL;
    *seen = 1;
    for (int i = 0; i < PACKED_MAX; i++) {
        packed_b *e = &g_packed[i];
        if (e->src == bf && e->rs == rs && e->cs == cs && e->n == n && e->K == K) return e;
        if (!e->src && !free_slot) free_slot = e;
    }
    *seen = 0;
    if (free_slot) *free_slot = (packed_b){bf, rs, cs, n, K, NULL, 0};
    return free_slot;
}

/* Room for entry e's tiles (elems bf16), which the caller packs, or NULL
 * (over the cap, out of memory: pack as usual). */
static uint16_t *packed_alloc(packed_b *e, size_t elems) {
    size_t cap = (size_t)1 << 22; /* 8 MB for small matrices, whose tiles pad most */
    for (int i = 0; i < MAX_SHADOWS; i++) cap += 2 * g_shadows[i].n;
    if (g_packed_elems + elems > cap) return NULL;
    uint16_t *t = al_alloc(elems * sizeof *t);
    if (!t) return NULL;
    e->tiles = t, e->elems = elems;
    g_packed_elems += elems;
    return t;
}

/* Entry e back to noted (its tiles allocated, never packed: the product
 * found no workspace). */
static void packed_unalloc(packed_b *e) {
    if (!e || !e->tiles) return;
    g_packed_elems -= e->elems;
    al_free(e->tiles);
    e->tiles = NULL, e->elems = 0;
}

/* ---- the workspace: one buffer per calling thread ----
 * Grown to the largest plan so far and kept (allocating per product would
 * page-fault every time); freed by al_precision_release or at thread exit.
 * A plan it cannot be grown for gets NULL: the stack blocks. */

static _Thread_local al_thread_buf my_ws; /* core/thread_buf.h: freed when the thread exits */

/* The calling thread's buffer, grown to at least `bytes` (64-byte aligned). */
static char *ws_get(size_t bytes) { return al_thread_buf_get(&my_ws, AL_THREAD_BUF_BF16, bytes, bytes); }

static _Thread_local al_thread_buf my_shared; /* al_bf16_round_shared's values */

static _Thread_local al_thread_buf my_split; /* compensated products' low parts (linear.c) */

void al_precision_release(void) {
    al_thread_buf_release(&my_ws, AL_THREAD_BUF_BF16);
    al_thread_buf_release(&my_shared, AL_THREAD_BUF_BF16_SHARED);
    al_thread_buf_release(&my_split, AL_THREAD_BUF_BF16_SPLIT);
}

uint16_t *al_bf16_split_room(size_t elems) {
    const size_t bytes = (elems ? elems : 1) * sizeof(uint16_t);
    return al_thread_buf_get(&my_split, AL_THREAD_BUF_BF16_SPLIT, bytes, bytes);
}

/* Bytes of one element of engine e's blocks (emulated: fp32; oneDNN's test
 * mode: fp32; else bf16), and of one thread's slot (each block sized up to
 * its padding, slots 64-byte aligned). */
static size_t elem_bytes(al_bf16_engine e) {
    return e == AL_BF16_EMULATED || (e == AL_BF16_ONEDNN && onednn_test_f32) ? sizeof(float) : sizeof(uint16_t);
}

static size_t slot_bytes_of(al_bf16_engine e) {
    const size_t elems = (size_t)engines[e].mch * engines[e].kch + (size_t)engines[e].kch * engines[e].nch;
    return (elems * elem_bytes(e) + 63) & ~(size_t)63;
}

/* OpenMP threads a product called here runs its tiles on. */
static int product_threads(void) { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

/* Rounding x once for two products pays only where a product would round
 * its fp32 operand whole into its plan as it is: the onednn engine (not its
 * fp32 test mode). The amx engine packs straight from fp32 into its tiles,
 * so a separate pass would move more bytes there; the others round per
 * block. */
const uint16_t *al_bf16_round_shared(const float *x, size_t n) {
    if (al_precision_now() != AL_PREC_BF16 || al_bf16_engine_now() != AL_BF16_ONEDNN || onednn_test_f32 || !n)
        return NULL;
    const size_t bytes = n * sizeof(uint16_t);
    uint16_t *dst = al_thread_buf_get(&my_shared, AL_THREAD_BUF_BF16_SHARED, bytes, bytes);
    if (!dst) return NULL; /* each product rounds x itself, as without this */
    round_arena(dst, x, n);
    return dst;
}

int al_precision_reserve(al_err *err) {
    const al_bf16_engine e = al_bf16_engine_now();
    const size_t need = slot_bytes_of(e) * (size_t)product_threads();
    if (need && !ws_get(need))
        return al_errf(err, "bf16 products: out of memory for their workspace (%zu MB)", need >> 20);
    return 0;
}

/* An operand: element (i, k) of op(X) at x[i rs + k cs]; bf: X's BF16 copy
 * (same offsets) or NULL (x NULL: BF16 values alone, at bf). For B, i is the
 * column index j. */
typedef struct operand {
    const float *x;
    const uint16_t *bf;
    size_t rs, cs;
} operand;

static operand operand_of(al_wref X, int transposed, int ld, int is_b) {
    /* op(A)(i, k) = A[i][k] or A[k][i]; op(B)(k, j) = B[k][j] or B[j][k] */
    const int rows_contiguous = is_b ? transposed : !transposed;
    const size_t rs = rows_contiguous ? (size_t)ld : 1, cs = rows_contiguous ? 1 : (size_t)ld;
    assert(X.dt == AL_DT_F32 || X.dt == AL_DT_BF16);
    /* BF16 itself (a memory-mapped checkpoint's weights, an activation BF16
     * training stored rounded): read as its own copy, no fp32 values behind it */
    if (X.dt == AL_DT_BF16) return (operand){NULL, X.p, rs, cs};
    return (operand){X.p, al_bf16_shadow_of(X.p), rs, cs};
}

/* Whether the onednn plan lays out an operand blocked by the cut along its
 * lines: where the lines lie across memory rows (i_is_row 0: line i at
 * column i of every memory row) and C is cut along them, each tile's view
 * would otherwise be strided, which al_onednn_block copies dense per tile
 * (a weight's block once per row block of C): 2.3 GB a step of the gpt2
 * preset's bf16 training (B 4, T 256), 10 % of the step on Zen 4 (perf). */
static int operand_blocked(int i_is_row, al_cut cut) { return !i_is_row && cut.blocks > 1; }

/* n elements src -> dst in the onednn plan's element type: rounded to bf16,
 * copied (a BF16 source), or in the test mode kept as fp32 bf16 values. */
static void plan_run(char *dst, const float *X, const uint16_t *Xbf, size_t from, size_t to, size_t n) {
    if (onednn_test_f32) {
        if (Xbf) widen_run((float *)dst + to, Xbf + from, n);
        else round_run_f32((float *)dst + to, X + from, n);
    } else if (Xbf) memcpy((uint16_t *)dst + to, Xbf + from, n * sizeof(uint16_t));
    else al_bf16_round_run((uint16_t *)dst + to, X + from, n);
}

/* One operand of the onednn engine's plan: op(X) with `n` lines (M rows of
 * A, N columns of B) of K, lying in memory as X (fp32) or Xbf (BF16), `ld`
 * apart, its lines along memory rows when i_is_row; cut: C's cut along the
 * lines. A BF16 source is viewed in place unless it is to be blocked;
 * anything else is rounded (test mode: to bf16 values kept as fp32) into
 * `room`, in its memory order or blocked (operand_blocked), on `threads`
 * threads. */
static al_bf16_view plan_operand(char *room, int threads, int i_is_row, int n, int K, const float *X,
                                 const uint16_t *Xbf, long ld, al_cut cut) {
    const int rows = i_is_row ? n : K, cols = i_is_row ? K : n, blocked = operand_blocked(i_is_row, cut);
    if (Xbf && !onednn_test_f32 && !blocked) return (al_bf16_view){Xbf, i_is_row ? ld : 1, i_is_row ? 1 : ld, 0, cut};
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int r = 0; r < rows; r++) {
        if (!blocked) {
            plan_run(room, X, Xbf, (size_t)r * ld, (size_t)r * cols, (size_t)cols);
            continue;
        }
        for (int b = 0; b < cut.blocks; b++) { /* memory row r = value k of every line: into each block */
            const int i0 = al_cut_start(cut, b), w = al_cut_start(cut, b + 1) - i0;
            plan_run(room, X, Xbf, (size_t)r * ld + i0, (size_t)i0 * K + (size_t)r * w, (size_t)w);
        }
    }
    return (al_bf16_view){room, i_is_row ? cols : 1, i_is_row ? 1 : cols, blocked, cut};
}

/* Bytes of room plan_operand needs for an operand of n x K (none for a BF16
 * source viewed in place), rounded up to 64. */
static size_t operand_bytes(int n, int K, int has_bf16, int blocked) {
    if (has_bf16 && !onednn_test_f32 && !blocked) return 0;
    return ((size_t)n * K * elem_bytes(AL_BF16_ONEDNN) + 63) & ~(size_t)63;
}

/* Whether [i0, i1) is one block of cut c. */
static inline int cut_has_block(al_cut c, int i0, int i1) {
    for (int b = 0; b < c.blocks; b++)
        if (al_cut_start(c, b) == i0 && al_cut_start(c, b + 1) == i1) return 1;
    return 0;
}

/* The view of lines [i0, i1) of an onednn plan's operand of K columns:
 * its first element and strides (*rs, *cs); a blocked operand's [i0, i1)
 * must be one block of its cut. */
static const char *view_lines(al_bf16_view v, int i0, int i1, int K, long *rs, long *cs) {
    const size_t el = elem_bytes(AL_BF16_ONEDNN);
    if (!v.blocked) {
        *rs = v.rs, *cs = v.cs;
        return (const char *)v.p + (size_t)i0 * v.rs * el;
    }
    assert(cut_has_block(v.cut, i0, i1)); /* a tile of the cut the operand was laid out by */
    *rs = 1, *cs = i1 - i0;
    return (const char *)v.p + (size_t)i0 * K * el;
}

void al_bf16_plan_engine(al_bf16_plan *p) {
    *p = (al_bf16_plan){.engine = al_bf16_engine_now()};
    p->merge_rows = (p->engine == AL_BF16_EMULATED && al_blas_row_cuts_exact()) ||
                    (p->engine == AL_BF16_ONEDNN && al_onednn_rows_merge_exact(onednn_test_f32));
    p->cols_first = p->engine == AL_BF16_ONEDNN;
}

void al_bf16_plan_product(al_bf16_plan *p, int slots, int a_transposed, int b_transposed, int M, int N, int K,
                          al_wref A, int lda, al_wref B, int ldb, al_cut rows, al_cut cols) {
    if (slots < 1) slots = 1;
    const operand oa = operand_of(A, a_transposed, lda, 0), ob = operand_of(B, b_transposed, ldb, 1);
    if (p->engine == AL_BF16_ONEDNN) {
        /* the operands once for the whole product: every tile reads them in
         * place (blocked where their lines cross memory rows), oneDNN
         * packing what it needs itself */
        const size_t a_bytes = operand_bytes(M, K, oa.bf != NULL, operand_blocked(!a_transposed, rows)),
                     b_bytes = operand_bytes(N, K, ob.bf != NULL, operand_blocked(b_transposed, cols));
        p->ws = ws_get(a_bytes + b_bytes > 0 ? a_bytes + b_bytes : 64);
        if (p->ws) {
            p->a = plan_operand(p->ws, slots, !a_transposed, M, K, oa.x, oa.bf, lda, rows);
            p->b = plan_operand(p->ws + a_bytes, slots, b_transposed, N, K, ob.x, ob.bf, ldb, cols);
        }
    } else if (p->engine == AL_BF16_AMX) {
        /* both operands packed whole into tiles (bf16_tiles.c), in parts on
         * `slots` threads; every tile of C reads them in place */
        const size_t a_elems = al_bf16_tiles_elems(M, K), b_elems = al_bf16_tiles_elems(N, K);
        /* B from a weight's BF16 copy: its tiles kept between products (see above) */
        int seen = 0;
        packed_b *entry = ob.x && ob.bf && !packed_off && !omp_in_parallel()
                              ? packed_entry(ob.bf, ob.rs, ob.cs, N, K, &seen) : NULL;
        const uint16_t *b_kept = entry ? entry->tiles : NULL;
        uint16_t *b_new = entry && seen && !b_kept ? packed_alloc(entry, b_elems) : NULL;
        p->ws = ws_get((a_elems + (b_kept || b_new ? 0 : b_elems)) * sizeof(uint16_t));
        if (p->ws) {
            uint16_t *at = (uint16_t *)p->ws, *bt = b_new ? b_new : at + a_elems;
            /* each operand in 4 parts per thread (slots that finish early take more); a kept B is not packed */
            const int parts = 4 * slots, b_parts = b_kept ? 0 : parts;
#pragma omp parallel for num_threads(slots) schedule(dynamic, 1) if (slots > 1)
            for (int q = 0; q < parts + b_parts; q++) {
                if (q < parts) al_bf16_tiles_pack(at, 0, oa.x, oa.bf, oa.rs, oa.cs, M, K, q, parts);
                else al_bf16_tiles_pack(bt, 1, ob.x, ob.bf, ob.rs, ob.cs, N, K, q - parts, parts);
            }
            if (b_kept) bt = (uint16_t *)b_kept;
            p->a = (al_bf16_view){.p = at}, p->b = (al_bf16_view){.p = bt};
            p->ksteps = al_bf16_tiles_ksteps(K);
        } else if (b_new) packed_unalloc(entry);
    } else {
        p->slot_bytes = slot_bytes_of(p->engine);
        p->ws = ws_get(p->slot_bytes * (size_t)slots);
    }
    if (!p->ws) { /* the stack blocks */
        p->engine = AL_BF16_EMULATED;
        p->merge_rows = al_blas_row_cuts_exact(), p->cols_first = 0;
    }
}

/* ---- packing blocks of the operands ---- */

/* The operand from element (i0, k0) on. */
static operand operand_at(operand o, int i0, int k0) {
    const size_t off = (size_t)i0 * o.rs + (size_t)k0 * o.cs;
    return (operand){o.x ? o.x + off : NULL, o.bf ? o.bf + off : NULL, o.rs, o.cs};
}

/* dst[i ld + k] = element (i, k) rounded to bf16, kept as fp32 (mb x kb). */
static void pack_f32(float *dst, int ld, operand o, int mb, int kb) {
    if (o.cs == 1) {
        for (int i = 0; i < mb; i++) {
            if (o.bf) widen_run(dst + (size_t)i * ld, o.bf + (size_t)i * o.rs, (size_t)kb);
            else round_run_f32(dst + (size_t)i * ld, o.x + (size_t)i * o.rs, (size_t)kb);
        }
        return;
    }
    for (int k = 0; k < kb; k++) /* rows strided: read along i, contiguous */
        for (int i = 0; i < mb; i++)
            dst[(size_t)i * ld + k] = o.bf ? al_bits_float((uint32_t)o.bf[(size_t)k * o.cs + i] << 16)
                                           : al_bits_float(al_bf16_round_bits(o.x[(size_t)k * o.cs + i]));
}

/* The same as bf16 (mb x kb, row i at dst + i ld); padding left alone. */
static void pack_bf16(uint16_t *dst, int ld, operand o, int mb, int kb) {
    if (o.cs == 1) {
        for (int i = 0; i < mb; i++) {
            if (o.bf) memcpy(dst + (size_t)i * ld, o.bf + (size_t)i * o.rs, sizeof(uint16_t) * (size_t)kb);
            else al_bf16_round_run(dst + (size_t)i * ld, o.x + (size_t)i * o.rs, (size_t)kb);
        }
        return;
    }
    for (int k = 0; k < kb; k++)
        for (int i = 0; i < mb; i++)
            dst[(size_t)i * ld + k] =
                o.bf ? o.bf[(size_t)k * o.cs + i] : (uint16_t)(al_bf16_round_bits(o.x[(size_t)k * o.cs + i]) >> 16);
}

void al_bf16_pack_rows(uint16_t *dst, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int mb, int kb) {
    const int mp = al_round_up(mb, AL_BF16_PAD_M), kp = al_round_up(kb, AL_BF16_PAD_K);
    pack_bf16(dst, kp, (operand){X, Xbf, rs, cs}, mb, kb);
    for (int i = 0; i < mp; i++) /* zeros: the K padding of real rows, then whole padding rows */
        memset(dst + (size_t)i * kp + (i < mb ? kb : 0), 0, sizeof(uint16_t) * (size_t)(i < mb ? kp - kb : kp));
}

void al_bf16_pack_vnni(uint16_t *dst, const float *X, const uint16_t *Xbf, size_t rs, size_t cs, int nb, int kb) {
    const int np = al_round_up(nb, AL_BF16_PAD_N), kp = al_round_up(kb, AL_BF16_PAD_K);
    memset(dst, 0, sizeof(uint16_t) * (size_t)kp * np);
    for (int k = 0; k < kb; k++) {
        uint16_t *row = dst + (size_t)(k / 2) * 2 * np + (k & 1);
        for (int j = 0; j < nb; j++) {
            const size_t at = (size_t)j * rs + (size_t)k * cs;
            row[2 * j] = Xbf ? Xbf[at] : (uint16_t)(al_bf16_round_bits(X[at]) >> 16);
        }
    }
}

/* The plain reference of the own kernels: pair by pair, fp32 sums. */
void al_bf16_kernel_ref(int mb, int nb, int kp, int np, float alpha, const uint16_t *Ap, const uint16_t *Bp,
                        float beta, float *C, int ldc) {
    for (int i = 0; i < mb; i++)
        for (int j = 0; j < nb; j++) {
            float acc = 0.0f;
            for (int k = 0; k < kp; k += 2) {
                const uint16_t *a = Ap + (size_t)i * kp + k, *b = Bp + (size_t)(k / 2) * 2 * np + 2 * j;
                acc += al_bits_float((uint32_t)a[0] << 16) * al_bits_float((uint32_t)b[0] << 16) +
                       al_bits_float((uint32_t)a[1] << 16) * al_bits_float((uint32_t)b[1] << 16);
            }
            float *c = C + (size_t)i * ldc + j;
            *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
        }
}

/* ---- one tile ---- */

/* The block product of one engine: C[mb, nb] (+)= alpha op(A) op(B) for the
 * operands from their block's corner on, beta_eff for C, with the prepared
 * B block (bblk: a buffer the engine filled). */
typedef struct block {
    operand a, b;      /* from (i0, k0) and (j0, k0) on */
    int mb, nb, kb;
    const void *bblk;  /* B as the engine reads it */
    void *ablk;        /* room for A */
} block;

/* Prepares the B block: rounds it (or copies it from the BF16 copy) into
 * `room`, in the engine's layout. */
static void prepare_b(al_bf16_engine e, block *b, void *room) {
    const int kb = b->kb, nb = b->nb;
    switch (e) {
    case AL_BF16_EMULATED: /* rows j of k values: sgemm reads it transposed */
        pack_f32(room, kb, b->b, nb, kb);
        b->bblk = room;
        break;
    default:
        al_bf16_pack_vnni(room, b->b.x, b->b.bf, b->b.rs, b->b.cs, nb, kb);
        b->bblk = room;
        break;
    }
}

/* Block b of the product on engine e (A packed into b->ablk first): the
 * emulated and avx512-bf16 engines (onednn and amx run whole tiles). */
static void block_multiply(al_bf16_engine e, const block *b, float alpha, float beta, float *C, int ldc) {
    switch (e) {
    case AL_BF16_EMULATED:
        pack_f32(b->ablk, b->kb, b->a, b->mb, b->kb);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b->mb, b->nb, b->kb, alpha, b->ablk, b->kb, b->bblk,
                    b->kb, beta, C, ldc);
        return;
    default: {
        const int kp = al_round_up(b->kb, AL_BF16_PAD_K), np = al_round_up(b->nb, AL_BF16_PAD_N);
        al_bf16_pack_rows(b->ablk, b->a.x, b->a.bf, b->a.rs, b->a.cs, b->mb, b->kb);
        if (own_test_ref) al_bf16_kernel_ref(b->mb, b->nb, kp, np, alpha, b->ablk, b->bblk, beta, C, ldc);
        else al_bf16_kernel_avx512bf16(b->mb, b->nb, kp, np, alpha, b->ablk, b->bblk, beta, C, ldc);
        return;
    }
    }
}

/* The emulated engine on stack blocks, for the sub-product from (i0, j0, k0)
 * of mb x nb x kb (no workspace, or a block oneDNN could not run). */
static void tile_on_stack(const block *b, float alpha, float beta, float *C, int ldc) {
    float room[STACK_MCH * EMU_KCH + EMU_KCH * STACK_NCH];
    block s = *b;
    s.ablk = room;
    float *b_room = room + STACK_MCH * EMU_KCH;
    for (int j0 = 0; j0 < b->nb; j0 += STACK_NCH)
        for (int k0 = 0; k0 < b->kb; k0 += EMU_KCH) {
            s.nb = b->nb - j0 < STACK_NCH ? b->nb - j0 : STACK_NCH;
            s.kb = b->kb - k0 < EMU_KCH ? b->kb - k0 : EMU_KCH;
            s.b = operand_at(b->b, j0, k0);
            prepare_b(AL_BF16_EMULATED, &s, b_room);
            for (int i0 = 0; i0 < b->mb; i0 += STACK_MCH) {
                s.mb = b->mb - i0 < STACK_MCH ? b->mb - i0 : STACK_MCH;
                s.a = operand_at(b->a, i0, k0);
                block_multiply(AL_BF16_EMULATED, &s, alpha, k0 == 0 ? beta : 1.0f, C + (size_t)i0 * ldc + j0, ldc);
            }
        }
}

void al_sgemm_tile_bf16(const al_bf16_plan *p, int slot, int a_transposed, int b_transposed, int r0, int r1, int c0,
                        int c1, int K, float alpha, al_wref A, int lda, al_wref B, int ldb, float beta, float *C,
                        int ldc) {
    if (K <= 0) { /* C = beta C, as sgemm does */
        for (int i = r0; i < r1; i++)
            for (int j = c0; j < c1; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    const al_bf16_engine e = p->engine;
    if (e == AL_BF16_AMX) { /* the tile over the plan's packed operands */
        if (own_test_ref)
            al_bf16_tiles_kernel_ref(p->a.p, p->b.p, p->ksteps, r0, r1, c0, c1, alpha, beta, C, (size_t)ldc);
        else al_bf16_tiles_kernel_amx(p->a.p, p->b.p, p->ksteps, r0, r1, c0, c1, alpha, beta, C, (size_t)ldc);
        return;
    }
    const operand oa = operand_of(A, a_transposed, lda, 0), ob = operand_of(B, b_transposed, ldb, 1);
    const block whole = {operand_at(oa, r0, 0), operand_at(ob, c0, 0), r1 - r0, c1 - c0, K, NULL, NULL};
    if (e == AL_BF16_ONEDNN) {
        /* the tile whole, K included, over the plan's operands (B's view
         * gives (k, j) strides (cs, rs)); a tile oneDNN cannot run goes to
         * the stack blocks */
        long ars, acs, brs, bcs;
        const char *a = view_lines(p->a, r0, r1, K, &ars, &acs), *b = view_lines(p->b, c0, c1, K, &brs, &bcs);
        if (al_onednn_block(onednn_test_f32, r1 - r0, c1 - c0, K, alpha, a, ars, acs, b, bcs, brs, beta,
                            C + (size_t)r0 * ldc + c0, ldc))
            tile_on_stack(&whole, alpha, beta, C + (size_t)r0 * ldc + c0, ldc);
        return;
    }
    if (!p->ws) {
        tile_on_stack(&whole, alpha, beta, C + (size_t)r0 * ldc + c0, ldc);
        return;
    }
    char *room = p->ws + (size_t)slot * p->slot_bytes;
    const int mch = engines[e].mch, kch = engines[e].kch, nch = engines[e].nch;
    void *a_room = room, *b_room = room + (size_t)mch * kch * elem_bytes(e);
    for (int j0 = c0; j0 < c1; j0 += nch)
        for (int k0 = 0; k0 < K; k0 += kch) {
            block b = {.b = operand_at(ob, j0, k0), .nb = c1 - j0 < nch ? c1 - j0 : nch, .kb = K - k0 < kch ? K - k0 : kch,
                       .ablk = a_room};
            prepare_b(e, &b, b_room);
            for (int i0 = r0; i0 < r1; i0 += mch) {
                b.mb = r1 - i0 < mch ? r1 - i0 : mch;
                b.a = operand_at(oa, i0, k0);
                float *Cb = C + (size_t)i0 * ldc + j0;
                const float beta_k = k0 == 0 ? beta : 1.0f;
                block_multiply(e, &b, alpha, beta_k, Cb, ldc);
            }
        }
}
