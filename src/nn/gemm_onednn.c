/*
 * gemm_onednn.c: the onednn engine of precision.c: one block of a BF16
 * product, C[mb, nb] = alpha A B + beta C, as a oneDNN matmul primitive
 * (bf16 A and B, fp32 C; alpha as the output scale, beta as a sum post-op,
 * transposes as strides), created once per block shape and strides and kept.
 *
 * Data: one CPU engine for the process; a table of primitives keyed by
 * everything they were created for (shape, strides, alpha, beta, data type;
 * a key oneDNN refused is kept with no primitive, so it is not asked again),
 * filled under a mutex and never evicted (a block of a shape that finds the
 * table full creates a primitive for that call alone: slower, same bits);
 * per calling thread a stream, a scratchpad buffer (user scratchpad mode:
 * oneDNN allocates nothing per call; the buffer grows to the largest
 * primitive's need and is freed at thread exit) and a buffer for the dense
 * copies of strided blocks (al_onednn_block: oneDNN's AMX kernels want
 * dense memory). Each block is executed
 * single-threaded (precision.c calls it inside al_sgemm's parallel region,
 * where oneDNN's OpenMP runtime sees one thread), so the bits depend on the
 * shape only. Whether oneDNN has a bf16 matmul here is probed once with a
 * small primitive and cached: Debian's 2.6.3 on an AVX2-only CPU answers
 * dnnl_unimplemented, and precision.c then never calls in.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../core/cpu.h"
#include "precision_internal.h"

#ifdef AL_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>

typedef struct prim_key {
    int test_f32, mb, nb, kb;
    long ars, acs, brs, bcs, ldc;
    float alpha, beta;
} prim_key;

typedef struct prim_entry {
    prim_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a_md, b_md, c_md, scratch_md;
    size_t scratch_bytes;
} prim_entry;

enum { MAX_PRIMS = 256 };
static prim_entry g_prims[MAX_PRIMS];
static int g_nprims;
static pthread_mutex_t g_prims_lock = PTHREAD_MUTEX_INITIALIZER;

static dnnl_engine_t g_engine;
static pthread_once_t g_engine_once = PTHREAD_ONCE_INIT;
/* The CPU engine; first, oneDNN's instruction sets capped at core/cpu.h's
 * set in use (ATTNLAB_CPU=avx512-bf16 on an AMX machine: oneDNN without
 * AMX), which it reads once, before its first primitive. */
static void engine_make(void) {
    static const dnnl_cpu_isa_t cap[AL_CPU_COUNT] = {
        [AL_CPU_GENERIC] = dnnl_cpu_isa_sse41, [AL_CPU_AVX2] = dnnl_cpu_isa_avx2,
        [AL_CPU_AVX512] = dnnl_cpu_isa_avx512_core, [AL_CPU_AVX512_BF16] = dnnl_cpu_isa_avx512_core_bf16,
        [AL_CPU_AMX] = dnnl_cpu_isa_all};
    dnnl_set_max_cpu_isa(cap[al_cpu_level_now()]);
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) g_engine = NULL;
}

/* Per thread: a stream and the scratchpad buffer, destroyed at thread exit. */
typedef struct thread_res {
    dnnl_stream_t stream;
    void *scratch;
    size_t scratch_cap;
    void *dense; /* dense copies of a strided block's operands and C (al_onednn_block) */
    size_t dense_cap;
} thread_res;
static _Thread_local thread_res *my_res;
static pthread_key_t res_key;
static pthread_once_t res_once = PTHREAD_ONCE_INIT;
static int res_key_ok;

static void res_free(void *p) {
    thread_res *r = p;
    if (!r) return;
    if (r->stream) dnnl_stream_destroy(r->stream);
    free(r->scratch);
    free(r->dense);
    free(r);
}
static void res_key_make(void) { res_key_ok = pthread_key_create(&res_key, res_free) == 0; }

/* *buf grown to at least `bytes` (64-byte aligned; the old contents are
 * dropped), *cap its size: 0, or -1 when out of memory. */
static int buf_grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        *cap = *buf ? bytes : 0;
        if (!*buf) return -1;
    }
    return 0;
}

/* The calling thread's stream and a scratchpad of at least `bytes`; NULL
 * when out of memory. */
static thread_res *thread_res_get(size_t bytes) {
    pthread_once(&res_once, res_key_make);
    thread_res *r = my_res;
    if (!r) {
        if (!res_key_ok || !(r = calloc(1, sizeof *r))) return NULL;
        if (dnnl_stream_create(&r->stream, g_engine, dnnl_stream_default_flags) != dnnl_success) {
            free(r);
            return NULL;
        }
        my_res = r;
        pthread_setspecific(res_key, r);
    }
    return buf_grow(&r->scratch, &r->scratch_cap, bytes) == 0 ? r : NULL;
}

/* Creates the primitive of key k into e (0), or -1 (nothing to free). */
static int prim_create(const prim_key *k, prim_entry *e) {
    const dnnl_data_type_t in = k->test_f32 ? dnnl_f32 : dnnl_bf16;
    const dnnl_dims_t a_dims = {k->mb, k->kb}, a_str = {k->ars, k->acs};
    const dnnl_dims_t b_dims = {k->kb, k->nb}, b_str = {k->brs, k->bcs};
    const dnnl_dims_t c_dims = {k->mb, k->nb}, c_str = {k->ldc, 1};
    memset(e, 0, sizeof *e);
    e->key = *k;
    if (dnnl_memory_desc_init_by_strides(&e->a_md, 2, a_dims, in, a_str) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&e->b_md, 2, b_dims, in, b_str) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&e->c_md, 2, c_dims, dnnl_f32, c_str) != dnnl_success)
        return -1;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &e->a_md, &e->b_md, NULL, &e->c_md) != dnnl_success) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
             (k->alpha == 1.0f || dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success);
    if (ok && k->beta != 0.0f)
        ok = dnnl_post_ops_create(&ops) == dnnl_success && dnnl_post_ops_append_sum(ops, k->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL) == dnnl_success;
    if (ok) {
        const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (s) e->scratch_md = *s;
        e->scratch_bytes = s ? dnnl_memory_desc_get_size(s) : 0;
        ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok ? 0 : -1;
}

/* Executes entry e on the calling thread's stream. 0, or -1. */
static int prim_run(const prim_entry *e, const void *A, const void *B, float *C) {
    thread_res *r = thread_res_get(e->scratch_bytes);
    if (!r) return -1;
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    const dnnl_memory_desc_t *mds[4] = {&e->a_md, &e->b_md, &e->c_md, &e->scratch_md};
    void *ptrs[4] = {(void *)A, (void *)B, C, r->scratch};
    const int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    const int n = e->scratch_bytes ? 4 : 3;
    int ok = 1;
    dnnl_exec_arg_t exec[4];
    for (int i = 0; i < n && ok; i++) {
        ok = dnnl_memory_create(&m[i], mds[i], g_engine, ptrs[i]) == dnnl_success;
        exec[i] = (dnnl_exec_arg_t){args[i], m[i]};
    }
    ok = ok && dnnl_primitive_execute(e->prim, r->stream, n, exec) == dnnl_success &&
         dnnl_stream_wait(r->stream) == dnnl_success;
    for (int i = 0; i < n; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return ok ? 0 : -1;
}

/* Room for dense copies on the calling thread's resources (grown, never
 * shrunk); NULL when out of memory. */
static char *dense_room(thread_res *r, size_t bytes) {
    return buf_grow(&r->dense, &r->dense_cap, bytes) == 0 ? r->dense : NULL;
}

/* Whether a rows x cols view with strides (rs, cs) lies dense in memory:
 * one stride 1 and the other the extent along it (or a single line). */
static int view_dense(int rows, int cols, long rs, long cs) {
    return (cs == 1 && (rs == cols || rows == 1)) || (rs == 1 && (cs == rows || cols == 1));
}

/* Copies a view with one unit stride into dst, dense, in the same
 * orientation (lines are memcpy'd: no transposing), and sets its strides
 * to dst's. */
static void view_compact(char *dst, const char *src, int rows, int cols, long *rs, long *cs, size_t el) {
    if (*cs == 1) {
        for (int i = 0; i < rows; i++) memcpy(dst + (size_t)i * cols * el, src + (size_t)i * *rs * el, (size_t)cols * el);
        *rs = cols;
    } else {
        for (int j = 0; j < cols; j++) memcpy(dst + (size_t)j * rows * el, src + (size_t)j * *cs * el, (size_t)rows * el);
        *cs = rows;
    }
}

/* Bytes of a dense copy of n elements of el bytes, rounded up to 64 */
static size_t dense_bytes(size_t n, size_t el) { return (n * el + 63) & ~(size_t)63; }

static int key_equal(const prim_key *a, const prim_key *b) {
    return a->test_f32 == b->test_f32 && a->mb == b->mb && a->nb == b->nb && a->kb == b->kb && a->ars == b->ars &&
           a->acs == b->acs && a->brs == b->brs && a->bcs == b->bcs && a->ldc == b->ldc &&
           !memcmp(&a->alpha, &b->alpha, sizeof(float)) && !memcmp(&a->beta, &b->beta, sizeof(float));
}

static int block_run(int test_f32, int mb, int nb, int kb, float alpha, const void *A, long ars, long acs,
                     const void *B, long brs, long bcs, float beta, float *C, long ldc);

int al_onednn_block(int test_f32, int mb, int nb, int kb, float alpha, const void *A, long ars, long acs, const void *B,
                    long brs, long bcs, float beta, float *C, long ldc) {
    pthread_once(&g_engine_once, engine_make);
    if (!g_engine) return -1;
    /* oneDNN 2.6 runs its brgemm matmul (AMX, AVX512-BF16) only on dense
     * memory: a tile of a wider matrix (a leading stride past the tile's
     * extent) gets gemm:jit, without AMX (on AMX, a Llama-7B-shaped map took
     * 68.5 s with every tile there against 51.3 s dense, measured). So strided operands are copied dense first (line by line,
     * the same orientation), and a strided C is computed into a dense block
     * (read from C first when beta needs it) and copied back. The copies
     * change no value: the bits are those of the dense block. */
    const size_t el = test_f32 ? sizeof(float) : sizeof(uint16_t);
    /* a view with no unit stride cannot be copied by lines: it stays as it is */
    const int a_dense = view_dense(mb, kb, ars, acs) || (ars != 1 && acs != 1),
              b_dense = view_dense(kb, nb, brs, bcs) || (brs != 1 && bcs != 1), c_dense = view_dense(mb, nb, ldc, 1);
    const size_t a_bytes = a_dense ? 0 : dense_bytes((size_t)mb * kb, el),
                 b_bytes = b_dense ? 0 : dense_bytes((size_t)kb * nb, el),
                 c_bytes = c_dense ? 0 : dense_bytes((size_t)mb * nb, sizeof(float));
    float *Cd = C;
    long ldcd = ldc;
    if (a_bytes + b_bytes + c_bytes) {
        thread_res *r = thread_res_get(0);
        char *room = r ? dense_room(r, a_bytes + b_bytes + c_bytes) : NULL;
        if (!room) return -1;
        if (!a_dense) view_compact(room, A, mb, kb, &ars, &acs, el), A = room;
        if (!b_dense) view_compact(room + a_bytes, B, kb, nb, &brs, &bcs, el), B = room + a_bytes;
        if (!c_dense) {
            Cd = (float *)(room + a_bytes + b_bytes), ldcd = nb;
            if (beta != 0.0f)
                for (int i = 0; i < mb; i++) memcpy(Cd + (size_t)i * nb, C + (size_t)i * ldc, sizeof(float) * nb);
        }
    }
    const int rc = block_run(test_f32, mb, nb, kb, alpha, A, ars, acs, B, brs, bcs, beta, Cd, ldcd);
    if (rc == 0 && Cd != C)
        for (int i = 0; i < mb; i++) memcpy(C + (size_t)i * ldc, Cd + (size_t)i * nb, sizeof(float) * nb);
    return rc;
}

/* al_onednn_block on the views as given: the primitive of their key (made
 * and cached on first use) run on the calling thread. */
static int block_run(int test_f32, int mb, int nb, int kb, float alpha, const void *A, long ars, long acs,
                     const void *B, long brs, long bcs, float beta, float *C, long ldc) {
    const prim_key k = {test_f32, mb, nb, kb, ars, acs, brs, bcs, ldc, alpha, beta};
    const prim_entry *hit = NULL;
    prim_entry fresh;
    int fresh_made = 0, failed = 0;
    pthread_mutex_lock(&g_prims_lock);
    for (int i = 0; i < g_nprims && !hit; i++)
        if (key_equal(&g_prims[i].key, &k)) hit = &g_prims[i];
    if (!hit) {
        /* a failed creation is kept too (prim NULL): not tried again */
        failed = prim_create(&k, &fresh) != 0;
        if (failed) fresh.prim = NULL;
        if (g_nprims < MAX_PRIMS) {
            g_prims[g_nprims] = fresh;
            hit = &g_prims[g_nprims++];
        } else {
            fresh_made = 1;
        }
    }
    pthread_mutex_unlock(&g_prims_lock);
    if (failed || (hit && !hit->prim)) return -1; /* a block oneDNN has no matmul for */
    if (fresh_made) {
        const int rc = prim_run(&fresh, A, B, C);
        dnnl_primitive_destroy(fresh.prim);
        return rc;
    }
    return prim_run(hit, A, B, C);
}

/* Whether a block's bits are those of any taller block holding it, so that
 * al_sgemm may run neighbouring row blocks as one (fewer calls, each
 * packing op(B) once for more rows). Yes where oneDNN runs its AVX512-BF16
 * kernels (Zen 4; ATTNLAB_CPU=avx512-bf16 on an AMX CPU): they sum each C
 * element over k in order, whatever the rows, so a scan of 7,200 products
 * (M 64-4,096 in 1, 2, 4 and 8 row blocks, N 1-2,304, K 1-2,304, either
 * operand transposed, beta 0 and 1, rows cut anywhere) found every bit
 * the same. Not on AMX, where oneDNN's kernels differ with the rows (454
 * of 2,400 of the same comparisons), nor in the fp32 test mode (not
 * scanned). */
int al_onednn_rows_merge_exact(int test_f32) {
    if (test_f32) return 0;
    pthread_once(&g_engine_once, engine_make);
    return g_engine && dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_bf16;
}

/* Whether a small block of this kind can be created: probed once. */
static atomic_int g_avail[2] = {-1, -1};

int al_onednn_available(int test_f32) {
    const int t = test_f32 ? 1 : 0;
    int a = atomic_load(&g_avail[t]);
    if (a >= 0) return a;
    pthread_once(&g_engine_once, engine_make);
    prim_entry e;
    const prim_key k = {t, 32, 32, 32, 32, 1, 1, 32, 32, 1.0f, 0.0f};
    a = g_engine && prim_create(&k, &e) == 0;
    if (a) dnnl_primitive_destroy(e.prim);
    atomic_store(&g_avail[t], a);
    return a;
}

#else /* built without oneDNN: the engine never runs */

int al_onednn_available(int test_f32) { return 0; }

int al_onednn_rows_merge_exact(int test_f32) { return 0; }

int al_onednn_block(int test_f32, int mb, int nb, int kb, float alpha, const void *A, long ars, long acs, const void *B,
                    long brs, long bcs, float beta, float *C, long ldc) {
    return -1;
}

#endif
