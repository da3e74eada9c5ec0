/*
 * test_attn_bf16.c: the BF16 attention kernels (al_attn_fwd / al_attn_bwd
 * with the product precision at BF16: bf16-portable, avx512-bf16, amx)
 * against the BF16 reference (al_attn_fwd_ref / al_attn_bwd_ref in BF16
 * mode) and the fp32 one:
 *  - every BF16 set this CPU runs == the BF16 reference on random odd shapes
 *    (T across tile edges, d_h 24 / 64 / 80-ish and odd, 1, 2 or 4 heads per
 *    KV group, strides with padding), every score function, causal and
 *    bidirectional, forward and backward: the same rounded operands, so only
 *    the order of the fp32 sums (and a rare weight rounded the other way)
 *    differs: tight bounds;
 *  - the same outputs against the fp32 reference within the issue's
 *    quality bound (relative error <= 1e-2 forward, <= 3e-2 gradients), and
 *    measurably different from it (the operands are rounded);
 *  - the hardware sets == bf16-portable (where they run); the amx set's own
 *    code also runs on emulated tiles everywhere (its bmm's indexing);
 *  - same bits for 1 and 2 threads;
 *  - the backward with s->grads_overwrite writes what it otherwise adds
 *    into zeros, every element of the head columns and nothing past them;
 *  - the amx set's software-pipelined one-head items (real and emulated
 *    tiles) give the same bits as its plain loop;
 *  - each set's rounding of the inputs (vcvtneps2bf16 where it has one)
 *    gives al_f32_to_bf16's bits, denormals and NaNs included;
 *  - dispatch: al_attn_kernel_name names the BF16 set in BF16 mode and the
 *    fp32 set in F32 mode, and F32 mode computes the fp32 reference; BF16
 *    mode at ATTNLAB_CPU=generic or without a workspace computes fp32;
 *  - the softmax stress of test_kernels.c (scores of hundreds, the running
 *    max moving often) stays finite and close to the BF16 reference.
 * Prints the BF16 sets this CPU could not run.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/cpu.h"
#include "test.h"
#include "testutil.h"

/* ---- the amx set's own code, on emulated tiles ----
 * score_bf16_kern.h's AMX branch (its bmm: 16-row blocks, up to six heads'
 * accumulators against one loaded B tile, C tiles loaded for +=; one head:
 * four column tiles held over the K loop, A and B alternating between two
 * registers each; the pipelined products' column tiles cut at the keys a
 * block sees) compiled here a second time, at AVX2 width, over amx_emu.h's
 * model of the tile registers: so its indexing runs and is checked on a CPU
 * without AMX too. Exported as *_amxemu. */
#include "attn/score_internal.h"
#include "core/dtype.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define AL_VEC_WIDTH 8
#include "core/vec.h"
#include "amx_emu.h"
#define BF16_AMX
#define BSFX(name) name##_amxemu
#include "attn/score_bf16_kern.h"
#pragma GCC pop_options

void al_attn_set_pipelined_amxemu(int on);
void al_attn_set_own_units_amxemu(int on);
void al_attn_exp2_weights_amxemu(float *y, const float *x, int n);

/* the emulated amx set's forward + backward, on a workspace of its own */
static void run_amxemu(const al_attn_shape *s, const float *q, const float *k, const float *v, float *o, float *lse,
                       const float *dO, float *dq, float *dk, float *dv) {
    const int nthr = omp_get_max_threads();
    const size_t f = al_attn_fwd_floats_amxemu(s, nthr), b = al_attn_bwd_floats_amxemu(s, nthr);
    float *ws = aligned_alloc(64, ((f > b ? f : b) + 15) / 16 * 64);
    CHECK(ws != NULL);
    if (!ws) return;
    al_attn_fwd_amxemu(s, q, k, v, o, lse, ws, nthr);
    al_attn_bwd_amxemu(s, q, k, v, o, lse, dO, dq, dk, dv, ws, nthr);
    free(ws);
}

static const fn_case FNS[] = {
    {"softmax", AL_SCORE_SOFTMAX, 0, 0}, {"poly1", AL_SCORE_POLY, 1, 0.7f}, {"poly3", AL_SCORE_POLY, 3, 0.1f},
    {"poly4", AL_SCORE_POLY, 4, 0.05f},  {"relu", AL_SCORE_RELU, 0, 0},     {"sigmoid", AL_SCORE_SIGMOID, 0, 0},
};
enum { NFNS = sizeof FNS / sizeof FNS[0] };

/* The BF16 sets: the core/cpu.h set that selects each, and its name; last,
 * the amx set's code on emulated tiles (runs everywhere, level EMU). */
enum { EMU = 100 };
static const struct {
    int level;
    const char *name;
} SETS[] = {{AL_CPU_AVX2, "bf16-portable"},
            {AL_CPU_AVX512_BF16, "avx512-bf16"},
            {AL_CPU_AMX, "amx"},
            {EMU, "amx (emulated tiles)"}};
enum { NSETS = sizeof SETS / sizeof SETS[0] };

/* inputs of one case and the outputs of one run */
typedef struct io {
    al_attn_shape s;
    size_t nq, nk, nv, no, nl;
    float *q, *k, *v, *dO;     /* inputs */
    float *o, *lse, *dq, *dk, *dv; /* outputs */
} io;

static void io_make(io *x, const al_attn_shape *s, al_rng *r, float qscale) {
    memset(x, 0, sizeof *x);
    x->s = *s;
    const size_t N = (size_t)s->B * s->T;
    x->nq = N * s->ldq, x->nk = N * s->ldk, x->nv = N * s->ldv, x->no = N * s->ldo;
    x->nl = (size_t)s->B * s->H * s->T;
    x->q = malloc(x->nq * 4), x->k = malloc(x->nk * 4), x->v = malloc(x->nv * 4), x->dO = malloc(x->no * 4);
    CHECK(x->q && x->k && x->v && x->dO);
    tu_fill(x->q, x->nq, r, qscale);
    tu_fill(x->k, x->nk, r, 1.2f);
    tu_fill(x->v, x->nv, r, 1.0f);
    tu_fill(x->dO, x->no, r, 1.0f);
}

static void outs_free(io *x) {
    free(x->o), free(x->lse), free(x->dq), free(x->dk), free(x->dv);
    x->o = x->lse = x->dq = x->dk = x->dv = NULL;
}

static void io_free(io *x) {
    outs_free(x);
    free(x->q), free(x->k), free(x->v), free(x->dO);
}

/* Forward + backward of in's inputs into out (a copy of in's inputs) in
 * precision prec, by the reference (level < 0) or the kernels of a forced
 * CPU set; the run's o and lse feed its own backward. */
static void run(io *out, const io *in, al_precision prec, int level) {
    *out = *in;
    /* o on a 64-byte boundary: where its rows are whole aligned vectors (no padding, d_v a multiple of 16) the
     * forward writes them with streaming stores, elsewhere with plain ones; the shapes below take both */
    const size_t obytes = (in->no * 4 + 63) / 64 * 64;
    out->o = aligned_alloc(64, obytes), out->lse = calloc(in->nl, 4);
    if (out->o) memset(out->o, 0, obytes);
    out->dq = calloc(in->nq, 4), out->dk = calloc(in->nk, 4), out->dv = calloc(in->nv, 4);
    CHECK(out->o && out->lse && out->dq && out->dk && out->dv);
    const al_attn_shape *s = &in->s;
    al_precision_set(prec);
    if (level == EMU) {
        run_amxemu(s, in->q, in->k, in->v, out->o, out->lse, in->dO, out->dq, out->dk, out->dv);
    } else if (level < 0) {
        al_attn_fwd_ref(s, in->q, in->k, in->v, out->o, out->lse);
        al_attn_bwd_ref(s, in->q, in->k, in->v, out->o, out->lse, in->dO, out->dq, out->dk, out->dv);
    } else {
        al_cpu_force(level);
        al_attn_fwd(s, in->q, in->k, in->v, out->o, out->lse);
        al_attn_bwd(s, in->q, in->k, in->v, out->o, out->lse, in->dO, out->dq, out->dk, out->dv);
        al_cpu_force(-1);
    }
    al_precision_set(AL_PREC_F32);
}

/* relative errors of x against y: of o, of lse, and the worst of the
 * three gradients */
typedef struct errs {
    double o, lse, g;
} errs;

/* ||a - b|| / max(||b||, 1e-20), 2-norms over n entries (NaN: NaN): the
 * relative error of a tensor as a whole, which a rare weight rounded the
 * other way (or a relu score that changed sign) barely moves */
static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)a[i] - b[i];
        d += e * e, m += (double)b[i] * b[i];
    }
    return sqrt(d / (m > 1e-40 ? m : 1e-40));
}

static double worse(double a, double b) { return a > b || a != a ? a : b; }

/* rel_l2 of each output */
static errs compare(const io *x, const io *y) {
    errs e = {rel_l2(x->o, y->o, x->no), rel_l2(x->lse, y->lse, x->nl), rel_l2(x->dq, y->dq, x->nq)};
    e.g = worse(worse(e.g, rel_l2(x->dk, y->dk, x->nk)), rel_l2(x->dv, y->dv, x->nv));
    return e;
}

/* the largest floored elementwise error (tu_err_floor) of o and the gradients */
static double max_err(const io *x, const io *y) {
    double e = tu_err_floor(x->o, y->o, x->no);
    e = worse(e, tu_err_floor(x->dq, y->dq, x->nq));
    e = worse(e, tu_err_floor(x->dk, y->dk, x->nk));
    return worse(e, tu_err_floor(x->dv, y->dv, x->nv));
}

/* the emulated tiles are slow (plain C): they run on the cases that set this */
static int with_emu;

static int present(int i) { return SETS[i].level == EMU ? with_emu : SETS[i].level <= (int)al_cpu_detect(); }

/* worst errors seen, for the summary line */
static errs worst_ref, worst_f32, worst_port;
static double worst_ref_max, worst_ratio; /* largest elementwise error vs the bf16 reference; worst ref/f32 ratio */

static void keep_worst(errs *w, errs e) {
    w->o = worse(w->o, e.o), w->lse = worse(w->lse, e.lse), w->g = worse(w->g, e.g);
}

/* Tight bounds against the BF16 reference: the same rounded operands; the
 * fp32 sums in another order, and (rarely) a weight within an fp32 rounding
 * of a bf16 rounding boundary rounded the other way: relative 2-norm errors
 * of 5e-4 (measured: up to 2.8e-4 where weights flipped, most below 1e-5), one element at most 5e-3 (one flipped
 * weight: 2^-8 of itself; measured up to 9e-4). */
#define TIGHT_L2 5e-4
#define TIGHT_MAX 5e-3

/* The bounds on the error against fp32: the 1e-2 (o, lse) and
 * 3e-2 (gradients), except where the BF16 definition itself is further
 * from fp32 (the BF16 reference shows the same error, so no kernel could do
 * better); there the bound is the BF16 reference's own error plus 10 %:
 *   T = 1   one key, nothing averages: a single rounded product is the
 *           output, and softmax's exact dq, dk are 0, so what bf16 leaves
 *           of dS = P (dP - D) is rounding noise relative to nothing;
 *   relu    (gradients) f' steps at 0: a score within bf16 rounding of 0
 *           moves its whole dS (measured 3-15 % on these small cases). */
static void bounds(const fn_case *f, int T, const io *ref16, const io *ref32, double *bo, double *bg) {
    *bo = 1e-2, *bg = 3e-2;
    const errs e = compare(ref16, ref32);
    if (T == 1) *bo = worse(*bo, 1.1 * e.o);
    if (T == 1 || f->kind == AL_SCORE_RELU) *bg = worse(*bg, 1.1 * e.g);
}

/* One case: every BF16 set present vs the BF16 reference, vs the fp32
 * reference, vs bf16-portable. */
static void check_case(const fn_case *f, int bidir, int B, int T, int H, int G, int dk, int dv, int pad, al_rng *r) {
    al_attn_shape s = {B, T, H, G, dk, dv, H * dk + pad, G * dk + pad + 1, G * dv + 2 * pad, H * dv + pad,
                       1.0f / sqrtf((float)dk)};
    tu_set_score(&s, f, bidir, 29.0f);
    io in, ref16, ref32, port;
    io_make(&in, &s, r, 1.2f);
    run(&ref16, &in, AL_PREC_BF16, -1);
    run(&ref32, &in, AL_PREC_F32, -1);
    run(&port, &in, AL_PREC_BF16, AL_CPU_AVX2);
    for (int i = 0; i < NSETS; i++) {
        if (!present(i)) continue;
        io x;
        run(&x, &in, AL_PREC_BF16, SETS[i].level);
        const errs a = compare(&x, &ref16), b = compare(&x, &ref32);
        const double am = max_err(&x, &ref16);
        keep_worst(&worst_ref, a);
        if (T > 1) keep_worst(&worst_f32, b); /* T = 1: see bounds */
        worst_ref_max = worse(worst_ref_max, am);
        CHECK_MSG(a.o < TIGHT_L2 && a.lse < 1e-5 && a.g < TIGHT_L2 && am < TIGHT_MAX,
                  "%s vs bf16 reference, %s bidir=%d B=%d T=%d H=%d G=%d dk=%d dv=%d: o %g lse %g grads %g, "
                  "largest %g",
                  SETS[i].name, f->name, bidir, B, T, H, G, dk, dv, a.o, a.lse, a.g, am);
        double bo, bg; /* the quality bounds (see bounds) */
        bounds(f, T, &ref16, &ref32, &bo, &bg);
        CHECK_MSG(b.o <= bo && b.lse <= 1e-2 && b.g <= bg,
                  "%s vs fp32 reference, %s bidir=%d B=%d T=%d H=%d G=%d dk=%d dv=%d: o %g lse %g grads %g "
                  "(bounds %g, %g)",
                  SETS[i].name, f->name, bidir, B, T, H, G, dk, dv, b.o, b.lse, b.g, bo, bg);
        /* it computes the BF16 definition, not fp32: far closer to the BF16 reference than to fp32 */
        const double near = worse(a.o, a.g), far = worse(b.o, b.g);
        if (far > 0) worst_ratio = worse(worst_ratio, near / far);
        CHECK_MSG(near <= 0.1 * far || far < 1e-6, "%s %s T=%d: %g from the bf16 reference, %g from fp32", SETS[i].name,
                  f->name, T, near, far);
        if (i > 0) {
            const errs c = compare(&x, &port);
            keep_worst(&worst_port, c);
            CHECK_MSG(c.o < TIGHT_L2 && c.lse < 1e-5 && c.g < TIGHT_L2,
                      "%s vs bf16-portable, %s bidir=%d T=%d H=%d G=%d dk=%d dv=%d: o %g lse %g grads %g",
                      SETS[i].name, f->name, bidir, T, H, G, dk, dv, c.o, c.lse, c.g);
        }
        int untouched = 1; /* padding columns of o are never written */
        for (size_t row = 0; row < (size_t)B * T; row++)
            for (int c = H * dv; c < s.ldo; c++) untouched &= x.o[row * s.ldo + c] == 0.0f;
        CHECK_MSG(untouched, "%s %s: the kernel wrote into o's padding", SETS[i].name, f->name);
        outs_free(&x);
    }
    outs_free(&ref16), outs_free(&ref32), outs_free(&port);
    io_free(&in);
}

/* set i's hook al_attn_set_own_units_* (EMU: the emulated amx set's) */
static void set_own_units(int i, int on) {
    void (*const hook[NSETS])(int) = {al_attn_set_own_units_bf16, al_attn_set_own_units_avx512bf16,
                                      al_attn_set_own_units_amx, al_attn_set_own_units_amxemu};
    hook[i](on);
}

/* Each BF16 set with its units packed by the threads that run them (the
 * default where the shape allows: MHA and GQA with one chunk of heads per
 * group, units a multiple of the threads) and with every tile packed by all
 * threads first: the same bits, forward and backward, across tile edges
 * and paddings, at the tests' thread count and at 1 thread (where every
 * such shape is the threads' own). */
static void check_own_units(al_rng *r) {
    const int shapes[][6] = {{2, 150, 8, 2, 24, 20}, {1, 301, 2, 2, 64, 64}, {2, 77, 3, 3, 64, 64},
                             {4, 33, 4, 1, 81, 17},  {1, 129, 4, 4, 40, 96}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int *v = shapes[c], bidir = (int)c % 2;
        al_attn_shape s = {v[0], v[1], v[2], v[3], v[4], v[5], v[2] * v[4] + 1, v[3] * v[4], v[3] * v[5],
                           v[2] * v[5] + 2, 1.0f / sqrtf((float)v[4])};
        const fn_case *f = &FNS[c % NFNS];
        tu_set_score(&s, f, bidir, 31.0f);
        io in;
        io_make(&in, &s, r, 1.2f);
        for (int i = 0; i < NSETS; i++) {
            with_emu = c < 2; /* emulated tiles are slow: two shapes */
            if (!present(i)) continue;
            const int keep = omp_get_max_threads();
            for (int one = 0; one < 2; one++) {
                if (one) omp_set_num_threads(1);
                io x, y;
                run(&x, &in, AL_PREC_BF16, SETS[i].level);
                set_own_units(i, 0);
                run(&y, &in, AL_PREC_BF16, SETS[i].level);
                set_own_units(i, 1);
                CHECK_MSG(!memcmp(x.o, y.o, x.no * 4) && !memcmp(x.lse, y.lse, x.nl * 4) &&
                              !memcmp(x.dq, y.dq, x.nq * 4) && !memcmp(x.dk, y.dk, x.nk * 4) &&
                              !memcmp(x.dv, y.dv, x.nv * 4),
                          "%s %s bidir=%d B=%d T=%d H=%d G=%d threads=%d: own units and shared tiles differ",
                          SETS[i].name, f->name, bidir, v[0], v[1], v[2], v[3], one ? 1 : keep);
                outs_free(&x), outs_free(&y);
            }
            omp_set_num_threads(keep);
        }
        with_emu = 0;
        io_free(&in);
    }
}

/* Each BF16 set: 1 and 2 threads give the same bits (a shared KV group:
 * partial sums of dk, dv; several query blocks). */
static void check_threads(int i, const fn_case *f) {
    const int B = 2, T = 150, H = 8, G = 2, dk = 24, dv = 20;
    al_attn_shape s = {B, T, H, G, dk, dv, H * dk, G * dk, G * dv, H * dv, 1.0f / sqrtf((float)dk)};
    tu_set_score(&s, f, 0, 40.0f);
    al_rng r;
    al_rng_seed(&r, 5);
    io in, x, y;
    io_make(&in, &s, &r, 1.2f);
    const int keep = omp_get_max_threads();
    omp_set_num_threads(1);
    run(&x, &in, AL_PREC_BF16, SETS[i].level);
    omp_set_num_threads(2);
    run(&y, &in, AL_PREC_BF16, SETS[i].level);
    omp_set_num_threads(keep);
    CHECK_MSG(!memcmp(x.o, y.o, x.no * 4) && !memcmp(x.lse, y.lse, x.nl * 4) && !memcmp(x.dq, y.dq, x.nq * 4) &&
                  !memcmp(x.dk, y.dk, x.nk * 4) && !memcmp(x.dv, y.dv, x.nv * 4),
              "%s %s: 1 and 2 threads differ", SETS[i].name, f->name);
    outs_free(&x), outs_free(&y);
    io_free(&in);
}

/* Scores that grow along the sequence: each KV head's first key value
 * rises by 0.1 a position and each query head's first value is made
 * positive, so a row's max moves on later key tiles (with q x 30, by more
 * than the lazy threshold) */
static void rising_scores(io *in) {
    const al_attn_shape *s = &in->s;
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++) {
            const size_t row = (size_t)b * s->T + t;
            for (int g = 0; g < s->G; g++) in->k[row * s->ldk + (size_t)g * s->dk] += 0.1f * (float)t;
            for (int h = 0; h < s->H; h++)
                in->q[row * s->ldq + (size_t)h * s->dk] = fabsf(in->q[row * s->ldq + (size_t)h * s->dk]);
        }
}

/* The amx set (emu: on emulated tiles) run on `in` pipelined (x, the
 * default) and in the plain loop (y); 0 where the set cannot run here. */
static int run_pipelined_and_plain(const io *in, int emu, io *x, io *y) {
    if (!emu && AL_CPU_AMX > (int)al_cpu_detect()) return 0;
    const int level = emu ? EMU : AL_CPU_AMX;
    run(x, in, AL_PREC_BF16, level);
    emu ? al_attn_set_pipelined_amxemu(0) : al_attn_set_pipelined_amx(0);
    run(y, in, AL_PREC_BF16, level);
    emu ? al_attn_set_pipelined_amxemu(1) : al_attn_set_pipelined_amx(1);
    return 1;
}

/* The amx set (on tiles where the CPU has them, and emulated) with its
 * items software-pipelined and in the plain loop: the same bits, forward
 * and backward, across tile edges, every function, both masks: MHA shapes
 * and GQA/MQA ones whose items hold 2-4 heads of a group (pipelined head
 * by head). */
static void check_pipelined(al_rng *r) {
    /* {B, T, H, G, d_k, d_v}: d_v padded to 32, 64, 96 and 128 (the forward pipelines P V at 64 only); T past 256
     * (ORES_MIN_KEYS): items whose rows see more keys keep O in tiles at d_v padded to 32 and 64; the last five
     * have B G >= 8 units, so a backward item is a whole group of 2-4 heads (split_heads), and the forward
     * pipelines items of 4 heads, and of 2 where their rows see more than ORES_MIN_KEYS keys (T 301) */
    const int shapes[][6] = {{1, 1, 2, 2, 8, 8},     {1, 64, 2, 2, 24, 40},  {2, 77, 3, 3, 64, 64},
                             {1, 150, 2, 2, 81, 17}, {1, 129, 1, 1, 96, 33}, {1, 83, 2, 2, 16, 80},
                             {1, 70, 1, 1, 40, 128}, {1, 301, 1, 1, 64, 64}, {1, 290, 2, 2, 40, 24},
                             {4, 77, 4, 2, 32, 32},  {2, 150, 12, 4, 24, 40}, {8, 129, 4, 1, 64, 64},
                             {4, 70, 8, 2, 40, 96},  {4, 301, 4, 2, 32, 32}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int fi = 0; fi < NFNS; fi++) {
            const int *v = shapes[i], bidir = (fi + (int)i) % 2;
            al_attn_shape s = {v[0], v[1], v[2], v[3], v[4], v[5], v[2] * v[4] + 1, v[3] * v[4], v[3] * v[5],
                               v[2] * v[5] + 2, 1.0f / sqrtf((float)v[4])};
            tu_set_score(&s, &FNS[fi], bidir, 29.0f);
            io in;
            io_make(&in, &s, r, 1.2f);
            for (int emu = 0; emu < 2; emu++) {
                if (emu && fi % 3) continue; /* emulated tiles are slow: two functions */
                io x, y;
                if (!run_pipelined_and_plain(&in, emu, &x, &y)) continue;
                CHECK_MSG(!memcmp(x.o, y.o, x.no * 4) && !memcmp(x.lse, y.lse, x.nl * 4) &&
                              !memcmp(x.dq, y.dq, x.nq * 4) && !memcmp(x.dk, y.dk, x.nk * 4) &&
                              !memcmp(x.dv, y.dv, x.nv * 4),
                          "%s %s bidir=%d B=%d T=%d H=%d G=%d dk=%d dv=%d: pipelined and plain differ",
                          emu ? "amx (emulated tiles)" : "amx", FNS[fi].name, bidir, v[0], v[1], v[2], v[3], v[4],
                          v[5]);
                outs_free(&x), outs_free(&y);
            }
            io_free(&in);
        }
    /* softmax scores growing along the sequence (as check_softmax_stress), so a row's max moves by more than the
     * lazy threshold on later key tiles and O's rows are rescaled between the tiles' P V: with d_v padding to 64
     * the forward issues a step's P V beside the next step's rows, and in items of one 16-row block (the last
     * of T = 77, 141) those rows rescale the very O rows that P V adds to; d_v 20 and 96 (P V after the rows)
     * keep the other paddings under the same scores */
    const int moving[][5] = {{1, 77, 2, 64, 64}, {1, 141, 1, 40, 40}, {2, 93, 2, 32, 64}, {1, 99, 2, 32, 20},
                             {1, 75, 1, 32, 96}, {1, 301, 1, 64, 64}, {1, 290, 1, 32, 32}};
    for (size_t i = 0; i < sizeof moving / sizeof moving[0]; i++)
        for (int bidir = 0; bidir < 2; bidir++) {
            const int *v = moving[i];
            al_attn_shape s = {v[0], v[1], v[2], v[2], v[3], v[4], v[2] * v[3], v[2] * v[3], v[2] * v[4],
                               v[2] * v[4], 0.25f};
            tu_set_score(&s, &FNS[0], bidir, 29.0f);
            io in;
            io_make(&in, &s, r, 30.0f);
            rising_scores(&in);
            for (int emu = 0; emu < 2; emu++) {
                io x, y;
                if (!run_pipelined_and_plain(&in, emu, &x, &y)) continue;
                CHECK_MSG(!memcmp(x.o, y.o, x.no * 4) && !memcmp(x.lse, y.lse, x.nl * 4),
                          "%s moving max bidir=%d B=%d T=%d H=%d dk=%d dv=%d: pipelined and plain differ",
                          emu ? "amx (emulated tiles)" : "amx", bidir, v[0], v[1], v[2], v[3], v[4]);
                outs_free(&x), outs_free(&y);
            }
            io_free(&in);
        }
}

/* Large scores growing along the sequence (q x 30, keys with a rising
 * offset): the running max moves on many tiles; finite, and close to the
 * BF16 reference (scores of ~1e3 carry ~1e-4 of fp32 rounding, so the
 * bounds are test_kernels.c's stress bounds). */
static void check_softmax_stress(int bidir) {
    const int T = 300, H = 2, dk = 16;
    al_attn_shape s = {1, T, H, 1, dk, dk, H * dk, dk, dk, H * dk, 0.25f};
    s.bidirectional = bidir;
    al_rng r;
    al_rng_seed(&r, 77);
    io in, ref;
    io_make(&in, &s, &r, 30.0f);
    rising_scores(&in);
    run(&ref, &in, AL_PREC_BF16, -1);
    for (int i = 0; i < NSETS; i++) {
        if (!present(i)) continue;
        io x;
        run(&x, &in, AL_PREC_BF16, SETS[i].level);
        int finite = 1;
        for (size_t j = 0; j < x.no; j++) finite &= isfinite(x.o[j]);
        for (size_t j = 0; j < x.nq; j++) finite &= isfinite(x.dq[j]);
        for (size_t j = 0; j < x.nk; j++) finite &= isfinite(x.dk[j]) && isfinite(x.dv[j]);
        const errs e = compare(&x, &ref);
        CHECK_MSG(finite && e.o < 1e-3 && e.lse < 1e-5 && e.g < 1e-2, "%s softmax stress bidir=%d: o %g lse %g grads %g",
                  SETS[i].name, bidir, e.o, e.lse, e.g);
        outs_free(&x);
    }
    outs_free(&ref);
    io_free(&in);
}

/* The kernel names and the precision switch: BF16 mode names the BF16 set
 * of the CPU set in use, F32 mode the fp32 one, and F32 mode still computes
 * the fp32 reference (the BF16 reference differs from it). */
static void check_dispatch(al_rng *r) {
    for (int i = 0; i < NSETS; i++) {
        if (!present(i) || SETS[i].level == EMU) continue;
        al_cpu_force(SETS[i].level);
        al_precision_set(AL_PREC_BF16);
        CHECK_MSG(!strcmp(al_attn_kernel_name(), SETS[i].name), "BF16 at %s: kernels %s",
                  al_cpu_level_name((al_cpu_level)SETS[i].level), al_attn_kernel_name());
        al_precision_set(AL_PREC_F32);
        const char *want = SETS[i].level >= AL_CPU_AVX512 ? "avx512" : "avx2";
        CHECK_MSG(!strcmp(al_attn_kernel_name(), want), "F32 at %s: kernels %s, want %s",
                  al_cpu_level_name((al_cpu_level)SETS[i].level), al_attn_kernel_name(), want);
    }
    al_cpu_force(AL_CPU_GENERIC); /* no BF16 form of the BLAS set: BF16 mode computes fp32 there */
    al_precision_set(AL_PREC_BF16);
    CHECK(!strcmp(al_attn_kernel_name(), "generic"));
    al_precision_set(AL_PREC_F32);
    al_cpu_force(-1);

    al_attn_shape s = {1, 70, 4, 2, 24, 24, 96, 48, 48, 96, 1.0f / sqrtf(24.0f)};
    io in, ref32, ref16, f32, gen16, nows16;
    io_make(&in, &s, r, 1.2f);
    run(&ref32, &in, AL_PREC_F32, -1);
    run(&ref16, &in, AL_PREC_BF16, -1);
    run(&f32, &in, AL_PREC_F32, (int)al_cpu_detect());
    run(&gen16, &in, AL_PREC_BF16, AL_CPU_GENERIC);
    al_attn_test_no_workspace(1); /* memory ran out: the generic set, fp32 */
    run(&nows16, &in, AL_PREC_BF16, (int)al_cpu_detect());
    al_attn_test_no_workspace(0);
    const errs a = compare(&f32, &ref32), b = compare(&ref16, &ref32), c = compare(&gen16, &ref32);
    const errs d = compare(&nows16, &ref32);
    CHECK_MSG(a.o < 1e-5 && a.g < 1e-5, "F32 mode vs fp32 reference: o %g grads %g", a.o, a.g);
    CHECK_MSG(c.o < 1e-5 && c.g < 1e-5, "BF16 mode at generic vs fp32 reference: o %g grads %g", c.o, c.g);
    CHECK_MSG(d.o < 1e-5 && d.g < 1e-5, "BF16 mode without workspace vs fp32 reference: o %g grads %g", d.o, d.g);
    CHECK_MSG(b.o > 1e-4 && b.o < 1e-2 && b.g > 1e-4 && b.g < 3e-2,
              "the BF16 reference vs the fp32 one: o %g grads %g (rounded operands: expected 1e-4 .. 1e-2)", b.o, b.g);
    outs_free(&ref32), outs_free(&ref16), outs_free(&f32), outs_free(&gen16), outs_free(&nows16);
    io_free(&in);
}

/* Each present set's rounding of q, k, v, dO (vcvtneps2bf16 where the set
 * has it, integer rounding for vectors holding a denormal) against
 * al_f32_to_bf16, bit for bit: ties both ways, infinities, signalling and
 * quiet NaNs, the largest float, zeros, then denormals among them, over
 * lengths with a tail. */
static void check_round(al_rng *r) {
    enum { N = 1000 };
    void (*const round_fn[NSETS])(uint16_t *, const float *, int) = {al_attn_round_bf16, al_attn_round_avx512bf16,
                                                                      al_attn_round_amx, al_attn_round_amxemu};
    float x[N];
    uint16_t got[N];
    for (int denormals = 0; denormals < 2; denormals++) {
        const size_t ns = denormals ? TU_BF16_SPECIALS : TU_BF16_SPECIAL_NORMAL;
        for (int i = 0; i < N; i++) {
            const uint32_t bits = tu_bf16_special[al_rng_u64(r) % ns];
            memcpy(&x[i], &bits, sizeof bits);
            if (i % 3) x[i] = (float)((double)(al_rng_u64(r) % 2000001) / 1000000.0 - 1.0) * (i % 7 ? 1.0f : 1e-30f);
        }
        for (int si = 0; si < NSETS; si++) {
            if (SETS[si].level != EMU && SETS[si].level > (int)al_cpu_detect()) continue;
            const int n = N - 3 * si; /* a tail past the last whole vector for some sets */
            memset(got, 0xAB, sizeof got);
            round_fn[si](got, x, n);
            int bad = 0;
            for (int i = 0; i < n; i++) bad += got[i] != al_f32_to_bf16(x[i]);
            CHECK_MSG(!bad, "%s: %d of %d values rounded unlike al_f32_to_bf16 (%s)", SETS[si].name, bad, n,
                      denormals ? "with denormals" : "normal numbers");
        }
    }
}

/* Each present set's 2^x of the softmax weights against exp2 in double:
 * relative error at most 2e-7 down to 2^-125 (measured 1.4e-7: a degree-5
 * polynomial; bf16 rounding moves a weight by up to 2e-3), exact powers of
 * two at whole x (the polynomial's constant term is 1), nothing above
 * 2^-125 further out (0, or AVX2's clamp at 2^-126), NaN for NaN. */
static void check_exp2_weights(void) {
    enum { N = 4096 };
    al_rng rng, *r = &rng; /* its own draws: the cases after it keep theirs */
    al_rng_seed(r, 2);
    void (*const exp_fn[NSETS])(float *, const float *, int) = {al_attn_exp2_weights_bf16,
                                                                al_attn_exp2_weights_avx512bf16,
                                                                al_attn_exp2_weights_amx, al_attn_exp2_weights_amxemu};
    static float x[N], y[N];
    for (int i = 0; i < N; i++) {
        if (i < 160)
            x[i] = (float)(i - 150); /* whole numbers from -150 to 9 */
        else if (i < 200)
            x[i] = (float)(i - 180) * 0.5f + 1e-7f * (float)(i % 3); /* halves, just past them */
        else if (i < 3800)
            x[i] = (float)(al_rng_u64(r) % 12600001) * -1e-5f + 1.0f; /* (-125, 1] */
        else
            x[i] = -126.0f - (float)(al_rng_u64(r) % 1000) * 0.5f; /* underflow */
    }
    x[N - 1] = NAN; /* stays NaN */
    for (int si = 0; si < NSETS; si++) {
        if (SETS[si].level != EMU && SETS[si].level > (int)al_cpu_detect()) continue;
        exp_fn[si](y, x, N);
        double worst = 0;
        int bad_whole = 0, bad_under = 0;
        for (int i = 0; i < N; i++) {
            const double want = exp2((double)x[i]);
            if (x[i] >= -125.0f) worst = worse(worst, fabs((double)y[i] / want - 1.0));
            if (x[i] >= -125.0f && x[i] == floorf(x[i])) bad_whole += (double)y[i] != want;
            if (x[i] < -125.0f) bad_under += !(y[i] >= 0.0f && y[i] <= 0x1p-125f);
        }
        CHECK_MSG(isnan(y[N - 1]), "%s: 2^NaN of the weights gave %g", SETS[si].name, y[N - 1]);
        CHECK_MSG(worst <= 2e-7 && !bad_whole && !bad_under,
                  "%s: 2^x of the weights: worst relative error %.3g, %d whole x not exact, %d past the range",
                  SETS[si].name, worst, bad_whole, bad_under);
        fprintf(stderr, "%s: 2^x of the weights, worst relative error %.2e\n", SETS[si].name, worst);
    }
}

/* s->grads_overwrite (tu_grads_overwrite_ok) on the BF16 reference and
 * every BF16 set (the amx set's code on emulated tiles too): MHA with rows
 * that stream (no padding, d 64), GQA padded, MQA whose heads split into
 * chunks with partial sums. */
static int ow_set; /* the SETS entry ow_bwd runs; -1: the BF16 reference */
static void ow_bwd(const al_attn_shape *s, const float *q, const float *k, const float *v, const float *o,
                   const float *lse, const float *dO, float *dq, float *dk, float *dv) {
    al_precision_set(AL_PREC_BF16);
    if (ow_set < 0) {
        al_attn_bwd_ref(s, q, k, v, o, lse, dO, dq, dk, dv);
    } else if (SETS[ow_set].level == EMU) {
        const int nthr = omp_get_max_threads();
        float *ws = aligned_alloc(64, (al_attn_bwd_floats_amxemu(s, nthr) + 15) / 16 * 64);
        CHECK(ws != NULL);
        if (ws) al_attn_bwd_amxemu(s, q, k, v, o, lse, dO, dq, dk, dv, ws, nthr);
        free(ws);
    } else {
        al_cpu_force(SETS[ow_set].level);
        al_attn_bwd(s, q, k, v, o, lse, dO, dq, dk, dv);
        al_cpu_force(-1);
    }
    al_precision_set(AL_PREC_F32);
}

static void check_overwrite(al_rng *r) {
    /* the last: rows that stream with d_k 48 and d_v 16 under their padded 64 and 32, T 100 (a last tile of 36
     * keys: the key tiles' dK, dV rows go straight from the transposed sums, grads_stream_tr) */
    const int shapes[][7] = {
        {1, 130, 4, 4, 64, 64, 0}, {2, 77, 6, 2, 24, 40, 3}, {1, 90, 8, 1, 32, 32, 0}, {1, 100, 2, 2, 48, 16, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *v = shapes[i], pad = v[6];
        al_attn_shape s = {v[0], v[1], v[2], v[3], v[4], v[5], v[2] * v[4] + pad, v[3] * v[4] + pad,
                           v[3] * v[5] + pad, v[2] * v[5] + pad, 1.0f / sqrtf((float)v[4])};
        tu_set_score(&s, &FNS[i % NFNS], (int)i % 2, 29.0f);
        io in, x;
        io_make(&in, &s, r, 1.0f);
        run(&x, &in, AL_PREC_BF16, -1); /* o, lse of the BF16 reference */
        for (int si = -1; si < NSETS; si++) {
            if (si >= 0 && SETS[si].level != EMU && SETS[si].level > (int)al_cpu_detect()) continue;
            ow_set = si;
            CHECK_MSG(tu_grads_overwrite_ok(&s, ow_bwd, in.q, in.k, in.v, x.o, x.lse, in.dO),
                      "%s: the overwriting backward differs from adding into zeros (shape %zu)",
                      si < 0 ? "bf16 reference" : SETS[si].name, i);
        }
        outs_free(&x);
        io_free(&in);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    al_blas_fix_kernels(argv);
    al_attn_test_poison_workspace(1); /* a workspace part read before written fails */
    al_rng r;
    al_rng_seed(&r, 1414);
    check_dispatch(&r);
    check_round(&r);
    check_exp2_weights();
    /* fixed shapes: one token; one tile plus one; the bench's d_h with a ragged T; d_h 80 with 4 heads a group;
     * enough items that a work item takes all 8 heads of its KV group (more than the six AMX accumulates at once);
     * last query blocks of 5 and 3 rows against 1-4 vectors of keys or d (the AVX-512 vector engine's register
     * blocks of 5 and 3 rows, which the other shapes here reach only by chance) */
    const int fixed[][7] = {{1, 1, 1, 1, 8, 8, 0},    {1, 65, 2, 1, 24, 24, 0}, {1, 129, 2, 2, 64, 64, 0},
                            {2, 77, 4, 1, 80, 80, 1}, {1, 97, 8, 2, 24, 40, 2}, {2, 33, 4, 4, 81, 17, 1},
                            {2, 40, 64, 8, 24, 20, 1}, {1, 37, 2, 2, 40, 24, 0}, {1, 69, 2, 1, 64, 16, 1},
                            {1, 35, 2, 2, 24, 24, 2}, {1, 3, 2, 1, 24, 24, 0},   {1, 67, 2, 2, 24, 24, 1}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        for (int bidir = 0; bidir < 2; bidir++)
            for (int fi = 0; fi < NFNS; fi += 2) { /* every function meets every shape over the two masks */
                const int *v = fixed[i];
                with_emu = fi == 0;
                check_case(&FNS[(fi + bidir + (int)i) % NFNS], bidir, v[0], v[1], v[2], v[3], v[4], v[5], v[6], &r);
                with_emu = 0;
            }
    /* 1.3 MB of packed key tiles, over the forward's BY_UNIT_MIN_BYTES: where the units are not the threads'
     * own, its items go unit by unit (once each way: the shape is large for the emulated tiles and the
     * sanitizers) */
    check_case(&FNS[0], 0, 1, 80, 40, 40, 64, 64, 0, &r);
    for (int i = 0; i < NSETS; i++) set_own_units(i, 0);
    check_case(&FNS[0], 0, 1, 80, 40, 40, 64, 64, 0, &r);
    for (int i = 0; i < NSETS; i++) set_own_units(i, 1);
    /* random shapes: T up to 140, odd head dims, 1, 2 or 4 heads per KV group */
    for (int n = 0; n < 8; n++) {
        const int B = 1 + (int)(al_rng_u64(&r) % 2), T = 1 + (int)(al_rng_u64(&r) % 140);
        const int G = 1 + (int)(al_rng_u64(&r) % 2), pgs[] = {1, 2, 4}, H = G * pgs[al_rng_u64(&r) % 3];
        const int dk = 1 + (int)(al_rng_u64(&r) % 90), dv = 1 + (int)(al_rng_u64(&r) % 90);
        const int pad = (int)(al_rng_u64(&r) % 4), bidir = (int)(al_rng_u64(&r) % 2);
        check_case(&FNS[n % NFNS], bidir, B, T, H, G, dk, dv, pad, &r);
    }
    check_softmax_stress(0);
    check_softmax_stress(1);
    check_pipelined(&r);
    check_own_units(&r);
    check_overwrite(&r);
    for (int i = 0; i < NSETS; i++)
        for (int fi = 0; fi < NFNS; fi++) {
            with_emu = fi == 0;
            if (present(i)) check_threads(i, &FNS[fi]);
        }
    with_emu = 1; /* for the summary: it ran */
    fprintf(stderr,
            "worst relative (2-norm) errors: vs the bf16 reference o %.2e lse %.2e grads %.2e (largest element "
            "%.2e); vs fp32 o %.2e lse %.2e grads %.2e; bf16-ref/fp32 ratio %.3f; hardware sets vs bf16-portable "
            "o %.2e grads %.2e\n",
            worst_ref.o, worst_ref.lse, worst_ref.g, worst_ref_max, worst_f32.o, worst_f32.lse, worst_f32.g,
            worst_ratio, worst_port.o, worst_port.g);
    char sets[160];
    al_cpu_describe(sets, sizeof sets);
    fprintf(stderr, "bf16 kernel sets: this CPU %s; ran", sets);
    for (int i = 0; i < NSETS; i++)
        if (present(i)) fprintf(stderr, " %s", SETS[i].name);
    fprintf(stderr, "; NOT RUN (the CPU lacks them):");
    int none = 1;
    for (int i = 0; i < NSETS; i++)
        if (!present(i)) fprintf(stderr, " %s", SETS[i].name), none = 0;
    fprintf(stderr, "%s\n", none ? " none" : "");
    return TEST_EXIT();
}
