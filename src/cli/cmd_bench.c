/*
 * cmd_bench.c: `attnlab bench attention|train|prefill|decode`: speed of the
 * attention kernels, a training step, a prompt forward (prefill) and a
 * decode step, each as a ratio to a ceiling measured in the same run:
 *   attention, train, prefill   achieved GFLOP/s / sgemm GFLOP/s
 *   decode                      achieved GB/s / triad GB/s
 * and every benchmark reports both ceilings, the peak RSS of its workload,
 * the thread count, the attention kernel set (core/cpu.h) and the load
 * average before and after (runnable threads: above the core count, other
 * programs shared the cores and absolute figures say little).
 *
 * Method, the same everywhere (docs/bench.md): build the workload, run it
 * once untimed (warm-up: pages, caches, thread pool), read the peak RSS
 * (before any ceiling buffer exists, so it is the workload's alone), then
 * `iters` rounds of one sgemm ceiling run (and before a BF16 run one oneDNN
 * bf16 run) followed by the timed workload, and report the best of each: on
 * a shared machine the bests come from the same quiet moments, where a
 * ceiling taken once before would not. The triad
 * ceiling (3 arrays of --triad-mb MB, beyond the last-level cache by
 * default) runs last.
 *
 * --precision (default auto: bf16 where its products are faster) sets the
 * precision of the products (nn/nn.h); besides the sgemm ratio every FLOP
 * benchmark reports its ratio to the two bf16 ceilings of the same run (the
 * oneDNN bf16 matmul at --sgemm-n^3 and the AMX tile peak), "unavailable"
 * (JSON null) where the CPU or the build has none.
 *
 * --vs-f32 (attention, train, prefill, in BF16) also times the fp32 path
 * in the same run, alternated with the bf16 one call for call (each after
 * its own sgemm probe run, the order swapped every round), and reports the
 * per-pair ratios' median beside best over best: on a shared machine a
 * neighbour slows whole stretches of a run, which the two calls of a pair
 * share, so the paired ratio moves much less than either time.
 *
 * --contend N starts N busy processes (each spins on one core) when the
 * timed rounds begin and stops them when they end, also on an error or
 * Ctrl-C (they die with this process: PR_SET_PDEATHSIG), to measure how the
 * workload holds up on a shared machine (docs/bench.md, "Contention").
 *
 * Output: a few lines of text, or with --json one JSON object (cJSON) whose
 * fields docs/bench.md documents. `bench wmat` (products over BF16/F16
 * weights, nn/wmat.c, against fp32 CBLAS) serves the Hugging Face path.
 */
#include <cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "core/blas.h"
#include "core/ceiling.h"
#include "core/cpu.h"
#include "io/io.h"
#include "model/model.h"
#include "train/dist.h"
#include "train/train.h"

/* What every benchmark measures besides its own figures. */
typedef struct bench_env {
    double load_start, load_end;
    long rss;            /* peak RSS after the warm-up, before the ceilings' buffers */
    al_sgemm_probe sg;   /* interleaved sgemm ceiling */
    long sgemm_n, triad_mb;
    double triad;        /* GB/s */
    double bf16_onednn, amx_tile; /* the bf16 ceilings, GFLOP/s (<= 0: unavailable) */
    al_bf16_probe bp;             /* interleaved oneDNN bf16 ceiling, before each BF16 run */
    int bp_on;                    /* bp is built (oneDNN has a bf16 matmul here) */
} bench_env;

/* --contend: how many busy processes to run beside the timed rounds, and
 * those running (one command per process: file scope is the simplest owner,
 * and the atexit clean-up needs it). */
enum { CONTEND_MAX = 256 };
static long contend_n;
static pid_t contend_pids[CONTEND_MAX];
static int contend_running;

/* Stops (SIGKILL) and reaps the busy processes; safe to call twice. */
static void contend_stop(void) {
    for (int i = 0; i < contend_running; i++) kill(contend_pids[i], SIGKILL);
    for (int i = 0; i < contend_running; i++) waitpid(contend_pids[i], NULL, 0);
    contend_running = 0;
}

/* Starts contend_n busy processes: each spins until killed, and dies with
 * this one (PR_SET_PDEATHSIG) however it ends; a normal exit, error paths
 * included, stops them through atexit. */
static int contend_start(const char *cmd) {
    static int registered;
    if (contend_n <= 0) return 0;
    if (!registered && atexit(contend_stop) != 0) return cli_fail(cmd, "--contend: cannot register the clean-up");
    registered = 1;
    const pid_t parent = getpid();
    fflush(NULL); /* nothing buffered is written twice */
    for (long i = 0; i < contend_n; i++) {
        const pid_t pid = fork();
        if (pid < 0) {
            contend_stop();
            return cli_fail(cmd, "--contend: cannot start a busy process");
        }
        if (pid == 0) { /* the busy process: no library calls but these */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            prctl(PR_SET_NAME, "attnlab-busy");
            if (getppid() != parent) _exit(0); /* the parent is already gone */
            for (volatile unsigned long spin = 0;; spin++) {
            }
        }
        contend_pids[contend_running++] = pid;
    }
    return 0;
}

/* The flags every benchmark shares; returns how many were appended. */
static int env_flags(al_arg *args, long *sgemm_n, long *triad_mb, int *json) {
    int n = 0;
    args[n++] = (al_arg){"sgemm-n", ARG_INT, sgemm_n, "size of the sgemm ceiling (n x n x n, run before each timed run)"};
    args[n++] = (al_arg){"triad-mb", ARG_INT, triad_mb, "MB per array of the triad bandwidth ceiling"};
    args[n++] = (al_arg){"json", ARG_FLAG, json, "print one JSON object (fields: docs/bench.md)"};
    args[n++] = (al_arg){"contend", ARG_INT, &contend_n,
                         "run N busy processes beside the timed rounds (a shared machine), stopped after"};
    return n;
}

/* The probes' buffers (safe on a zeroed or already freed env). */
static void env_free(bench_env *e) {
    al_sgemm_probe_free(&e->sg);
    al_bf16_probe_free(&e->bp);
}

/* After the warm-up: the workload's peak RSS, then the probes and a first
 * reading of the bf16 ceilings, then the --contend processes. */
static int env_start(const char *cmd, bench_env *e) {
    e->rss = al_peak_rss_bytes();
    if (contend_n < 0 || contend_n > CONTEND_MAX) return cli_usage(cmd, "--contend must be 0..%d", CONTEND_MAX);
    if (al_sgemm_probe_init(&e->sg, (int)e->sgemm_n)) return cli_fail(cmd, "sgemm ceiling: out of memory");
    /* the bf16 ceilings three times here, three after the rounds and
     * oneDNN's also before each BF16 run, the best kept: one burst of a
     * neighbour's work spoilt a lone reading (a ratio above 1 on Zen 4), and
     * on AMX hosts whose tile unit another guest shares at times, readings
     * only before and after the rounds came out below the model's own
     * products (ratios of 1.0-1.8 to that "ceiling", docs/bench.md) */
    e->bp_on = !al_bf16_probe_init(&e->bp, (int)e->sgemm_n);
    if (!e->bp_on && e->bp.oom) { /* not "unavailable": the ceiling is there, the memory is not */
        al_sgemm_probe_free(&e->sg);
        return cli_fail(cmd, "oneDNN bf16 ceiling: out of memory");
    }
    for (int r = 0; e->bp_on && r < 3; r++) al_bf16_probe_run(&e->bp);
    e->amx_tile = al_measure_amx_tile_gflops(3);
    if (contend_start(cmd)) {
        env_free(e);
        return 1;
    }
    return 0;
}

/* Before each timed run: one sgemm ceiling run, and before a run whose
 * products are in BF16 one oneDNN bf16 run too, so each ceiling's best
 * comes from the same quiet moments as the runs' best. */
static void env_probe(bench_env *e) {
    al_sgemm_probe_run(&e->sg);
    if (e->bp_on && al_precision_now() == AL_PREC_BF16) al_bf16_probe_run(&e->bp);
}

/* After the timed rounds: stop the busy processes, read the bf16 ceilings
 * again and free the probes, measure triad (quiet again), note the load.
 * 1 (error printed) when triad's arrays cannot be had: a benchmark without
 * its ceiling would print ratios to nothing. */
static int env_finish(const char *cmd, bench_env *e) {
    contend_stop();
    for (int r = 0; e->bp_on && r < 3; r++) al_bf16_probe_run(&e->bp);
    e->bf16_onednn = e->bp_on ? al_bf16_probe_gflops(&e->bp) : -(double)e->bp.refused;
    env_free(e);
    e->triad = al_measure_triad_gbs((int)e->triad_mb, 3);
    if (e->triad < 0) return cli_failf(cmd, "triad bandwidth: out of memory for 3 arrays of %ld MB", e->triad_mb);
    const double amx = al_measure_amx_tile_gflops(3);
    if (amx > e->amx_tile) e->amx_tile = amx;
    e->load_end = al_loadavg1();
    return 0;
}

/* A number field rounded to 6 significant digits (measurements are not
 * better than that; the full double only adds noise to the output). */
static void num(cJSON *o, const char *name, double v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", v);
    cJSON_AddNumberToObject(o, name, strtod(buf, NULL));
}

/* A number, or null when v <= 0 (a ceiling this machine does not have). */
static void num_or_null(cJSON *o, const char *name, double v) {
    if (v > 0) num(o, name, v);
    else cJSON_AddNullToObject(o, name);
}

/* Beside a ratio to sgemm (field `name`): the same GFLOP/s as ratios to the
 * bf16 ceilings, `name`_bf16_onednn and `name`_amx_tile (null: unavailable). */
static void bf16_ratios_json(cJSON *o, const char *name, double gflops, const bench_env *e) {
    char key[64];
    snprintf(key, sizeof key, "%s_bf16_onednn", name);
    num_or_null(o, key, e->bf16_onednn > 0 ? gflops / e->bf16_onednn : 0);
    snprintf(key, sizeof key, "%s_amx_tile", name);
    num_or_null(o, key, e->amx_tile > 0 ? gflops / e->amx_tile : 0);
}

/* The text of the same: "; 12.3% of oneDNN bf16, 4.5% of the AMX tile peak". */
static void bf16_ratios_text(double gflops, const bench_env *e) {
    if (e->bf16_onednn > 0) printf("; %.1f%% of oneDNN bf16", 100 * gflops / e->bf16_onednn);
    else printf("; oneDNN bf16 ceiling unavailable");
    if (e->amx_tile > 0) printf(", %.1f%% of the AMX tile peak", 100 * gflops / e->amx_tile);
    else printf(", AMX tile ceiling unavailable");
}

static void env_json(cJSON *o, const bench_env *e, int iters) {
    cJSON_AddStringToObject(o, "precision", al_precision_name(al_precision_now()));
    cJSON_AddStringToObject(o, "bf16_engine", al_precision_engine());
    num_or_null(o, "bf16_onednn_gflops", e->bf16_onednn);
    num_or_null(o, "amx_tile_gflops", e->amx_tile);
    num(o, "threads", al_threads());
    cJSON_AddStringToObject(o, "kernels", al_attn_kernel_name());
    cJSON_AddStringToObject(o, "blas_kernels", al_blas_kernels());
    num(o, "iters", iters);
    num(o, "sgemm_n", (double)e->sgemm_n);
    num(o, "sgemm_gflops", al_sgemm_probe_gflops(&e->sg));
    num(o, "noise", al_sgemm_probe_noise(&e->sg));
    num(o, "triad_mb", (double)e->triad_mb);
    num(o, "triad_gb_per_s", e->triad);
    num(o, "peak_rss_bytes", (double)e->rss);
    num(o, "contend", (double)contend_n);
    num(o, "loadavg_start", e->load_start);
    num(o, "loadavg_end", e->load_end);
}

static void env_text(const bench_env *e) {
    printf("  ceilings (same run): sgemm %.1f GFLOP/s (n=%ld, best of the runs interleaved with the timed ones; "
           "their mean %.0f%% slower: the machine's noise), triad %.1f GB/s (%ld MB arrays)\n",
           al_sgemm_probe_gflops(&e->sg), e->sgemm_n, 100 * al_sgemm_probe_noise(&e->sg), e->triad, e->triad_mb);
    char onednn[48] = "unavailable", amx[48] = "unavailable";
    if (e->bf16_onednn > 0) snprintf(onednn, sizeof onednn, "%.1f GFLOP/s (n=%ld)", e->bf16_onednn, e->sgemm_n);
    if (e->amx_tile > 0) snprintf(amx, sizeof amx, "%.1f GFLOP/s", e->amx_tile);
    printf("  precision %s (bf16 engine: %s); bf16 ceilings: oneDNN matmul %s, AMX tile peak %s\n",
           al_precision_name(al_precision_now()), al_precision_engine(), onednn, amx);
    printf("  peak RSS %.1f MB; kernels: attention %s, OpenBLAS %s; load average %.2f -> %.2f on %d threads\n",
           e->rss / 1048576.0, al_attn_kernel_name(), al_blas_kernels(), e->load_start, e->load_end,
           al_threads());
    if (contend_n > 0) printf("  contended: %ld busy processes ran beside the timed rounds\n", contend_n);
}

/* Prints o, built since mark, as one line and frees it; 0, or -1 when out
 * of memory (nothing printed). */
static int json_out(cJSON *o, unsigned long mark) {
    char *s = al_json_print(o, 0, mark);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
    return s ? 0 : -1;
}

/* ---- --vs-f32: the bf16 path against the fp32 one, timed in pairs ---- */

/* One timed figure of both paths: the best of each and every pair's ratio
 * (fp32 seconds / bf16 seconds, > 1 where bf16 is faster). */
typedef struct paired {
    double *ratio; /* [iters] */
    long n;
    double best_bf16, best_f32;
} paired;

/* 0, or -1 out of memory */
static int paired_init(paired *p, long iters) {
    *p = (paired){.ratio = malloc(sizeof(double) * (size_t)iters), .best_bf16 = INFINITY, .best_f32 = INFINITY};
    return p->ratio ? 0 : -1;
}

static void paired_add(paired *p, double bf16_s, double f32_s) {
    p->ratio[p->n++] = f32_s / bf16_s;
    if (bf16_s < p->best_bf16) p->best_bf16 = bf16_s;
    if (f32_s < p->best_f32) p->best_f32 = f32_s;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the pairs' ratios (sorts them). */
static double paired_median(paired *p) {
    qsort(p->ratio, (size_t)p->n, sizeof(double), cmp_double);
    return p->n % 2 ? p->ratio[p->n / 2] : 0.5 * (p->ratio[p->n / 2 - 1] + p->ratio[p->n / 2]);
}

/* JSON: <name>_f32_s_best, <name>_vs_f32 (the pairs' median ratio),
 * <name>_vs_f32_best (best over best); the caller adds f32_pairs once (attention
 * has two paired figures over the same pairs) */
static void paired_json(cJSON *o, const char *name, paired *p) {
    char key[64];
    snprintf(key, sizeof key, "%s_f32_s_best", name);
    num(o, key, p->best_f32);
    snprintf(key, sizeof key, "%s_vs_f32", name);
    num(o, key, paired_median(p));
    snprintf(key, sizeof key, "%s_vs_f32_best", name);
    num(o, key, p->best_f32 / p->best_bf16);
}

/* Text: "  forward vs the fp32 path (same run, 10 alternated pairs): 3.02x
 * median of the pairs (best over best 2.95x; fp32 best 12.3 ms)" */
static void paired_text(const char *what, paired *p) {
    printf("  %s vs the fp32 path (same run, %ld alternated pairs): %.2fx median of the pairs (best over best %.2fx; "
           "fp32 best %.1f ms)\n",
           what, p->n, paired_median(p), p->best_f32 / p->best_bf16, 1e3 * p->best_f32);
}

/* --vs-f32 is a comparison of a BF16 run with fp32: a usage error otherwise */
static int vs_f32_check(const char *cmd, int vs_f32, al_precision prec) {
    if (vs_f32 && prec != AL_PREC_BF16)
        return cli_usage(cmd, "--vs-f32 compares the bf16 path with fp32: it needs --precision bf16 (or auto on a "
                              "CPU with bf16 products)");
    return 0;
}

/* Which path the c-th call (0, 1) of round it times: 0 the run's
 * precision, 1 fp32; with --vs-f32 every other round runs fp32 first. */
static int pair_path(int vs_f32, long it, int c) { return vs_f32 && it % 2 ? 1 - c : c; }

#define VS_F32_HELP "also time the fp32 path, alternated with the bf16 one (ratios per pair, median)"

/* ---- train ---- */

/* One training step (forward, backward, clip, AdamW) on random tokens at the
 * flags' shape (default preset `bench`; `--preset gpt2` is 12 layers, hidden
 * 768, B=4 x T=256). MFU = model FLOP/s (6 x matmul params + causal
 * attention per token, the same count for every implementation) / sgemm.
 * Under mpirun the ranks step the global batch together (train/dist.h) and
 * rank 0 reports, with the communication time per step and the bytes of the
 * gradient arena all-reduced; the ranks meet before each timed step. */
static int bench_train(int argc, char **argv) {
    const char *cmd = "bench train";
    train_flags f;
    al_arg args[TRAIN_MAX_ARGS + 5];
    int n = train_flags_table(&f, args);
    if (n < 0) return cli_fail(cmd, TRAIN_FLAGS_TOO_MANY);
    long iters = 5, sgemm_n = 2048, triad_mb = 256;
    int json = 0, vs_f32 = 0;
    args[n++] = (al_arg){"iters", ARG_INT, &iters, "timed training steps (after 2 warm-up steps)"};
    args[n++] = (al_arg){"vs-f32", ARG_FLAG, &vs_f32, VS_F32_HELP};
    n += env_flags(args + n, &sgemm_n, &triad_mb, &json);
    int rc = cli_parse(cmd, "[--preset NAME] [model flags] [--iters N] [--json]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!f.preset && !cli_find(args, n, "layers")->seen) f.preset = "bench";
    al_train_opts o;
    if ((rc = train_flags_resolve(cmd, &f, args, n, &o))) return rc;
    if (iters <= 0 || sgemm_n < 64 || triad_mb < 1)
        return cli_usage(cmd, "--iters must be positive, --sgemm-n at least 64 and --triad-mb positive");
    if (o.model.task != AL_TASK_LM) return cli_usage(cmd, "language models only (--task vision is not benchmarked)");
    if ((rc = vs_f32_check(cmd, vs_f32, o.precision))) return rc;
    if (cli_dist_begin(cmd)) return 1;
    if (vs_f32 && al_dist_active()) {
        rc = al_dist_rank() == 0 ? cli_usage(cmd, "--vs-f32 runs in one process (not under mpirun)") : CLI_USAGE;
        al_dist_finalize();
        return rc;
    }
    const int lead = al_dist_rank() == 0, shards = al_dist_shards(&o);
    if (o.batch % al_dist_size() || o.batch % shards || shards % al_dist_size()) {
        rc = lead ? cli_usage(cmd, "--batch %d must split into --shards %d, and those over the %d ranks", o.batch,
                              shards, al_dist_size())
                  : CLI_USAGE;
        al_dist_finalize();
        return rc;
    }
    if (o.precision == AL_PREC_BF16) cli_precision_line(o.precision);
    bench_env e = {.load_start = al_loadavg1(), .sgemm_n = sgemm_n, .triad_mb = triad_mb};
    al_err err;
    al_model m;
    al_acts a;
    if (al_model_create(&m, &o.model, &err) || al_model_alloc_grads(&m, &err)) return cli_fail(cmd, err.msg);
    if (al_acts_create(&a, &m, o.batch / shards, o.context, &err)) {
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_model_init_weights(&m, o.seed);
    float *m1 = al_alloc(sizeof(float) * m.n_floats), *m2 = al_alloc(sizeof(float) * m.n_floats);
    const int N = o.batch * o.context;
    int *in = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
    /* as in training: the step reads (and refreshes) the weights' BF16 copy */
    if (!m1 || !m2 || !in || !tg || al_train_precision_begin(&m, o.precision, &err)) {
        al_free(m1), al_free(m2), free(in), free(tg), al_acts_free(&a), al_model_free(&m);
        return cli_fail(cmd, m1 && m2 && in && tg ? err.msg : "out of memory");
    }
    al_rng rng;
    al_rng_seed(&rng, 1);
    for (int i = 0; i < N; i++) {
        in[i] = (int)(al_rng_u64(&rng) % 256);
        tg[i] = (int)(al_rng_u64(&rng) % 256);
    }
    al_lm_batch batch = {.acts = &a, .in = in, .tg = tg};
    al_lm_shards select = {.batch = &batch, .in = in, .tg = tg, .B = o.batch, .T = o.context};
    const al_step_pass inner = al_lm_step_pass(&batch);
    al_grad_shards gs;
    paired ps = {0};
    if (al_grad_shards_init(&gs, &m, &inner, al_lm_select_shard, &select, shards, o.batch, &err)) rc = -1;
    else if (vs_f32 && paired_init(&ps, iters)) rc = -1, snprintf(err.msg, sizeof err.msg, "out of memory");
    double best = 1e30, total = 0, comm = 0, comm_busy = 0;
    for (long it = 0; !rc && it < iters + 2; it++) {
        if (it == 2 && (rc = env_start(cmd, &e))) break;
        double dt[2] = {0, 0}; /* [0] the run's precision, [1] the fp32 step of a --vs-f32 pair */
        for (int c = 0; !rc && c <= vs_f32; c++) {
            const int path = pair_path(vs_f32, it, c);
            if (path) { /* an fp32 run has no BF16 copy of the weights to refresh: detached for the step */
                al_train_precision_end(&m);
                al_precision_set(AL_PREC_F32);
            }
            if (it >= 2) env_probe(&e);
            int ignored;
            if (al_dist_max(0, &ignored, &err)) { /* the ranks start the step together */
                rc = -1;
                break;
            }
            double t0 = al_now(), loss, gn;
            al_train_step(&m, &gs.pass, m1, m2, &o, 1e-4, (int)it + 1, &loss, &gn); /* timed whatever the loss */
            dt[path] = al_now() - t0;
            if (path) {
                al_precision_set(o.precision);
                if (al_train_precision_begin(&m, o.precision, &err)) rc = -1;
            }
            if (gs.failed) {
                err = gs.err;
                rc = -1;
            }
        }
        if (!rc && it >= 2) {
            total += dt[0];
            comm += gs.comm_s;
            comm_busy += gs.comm_busy_s;
            if (dt[0] < best) best = dt[0];
            if (vs_f32) paired_add(&ps, dt[0], dt[1]);
        }
    }
    const size_t buckets = gs.n_buckets, buckets_overlapped = gs.early_buckets; /* the last step's */
    al_grad_shards_free(&gs);
    const double bytes_reduced = al_dist_active() ? sizeof(float) * (double)m.n_floats : 0;
    if (!rc) rc = env_finish(cmd, &e);
    else env_free(&e);
    if (!rc && lead) {
        const double mean = total / iters, flops = al_model_train_flops_per_token(&m, o.context) * N;
        const double sgemm = al_sgemm_probe_gflops(&e.sg), gflops = flops / best / 1e9;
        if (json) {
            const unsigned long mark = al_json_mark();
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "bench", "train");
            cJSON_AddStringToObject(j, "attention", al_attn_name(m.cfg.attention));
            num(j, "layers", m.cfg.num_layers);
            num(j, "hidden", m.cfg.hidden_size);
            num(j, "heads", m.cfg.num_heads);
            num(j, "kv_heads", m.cfg.num_kv_heads);
            num(j, "head_dim", m.cfg.head_dim);
            num(j, "batch", o.batch);
            num(j, "context", o.context);
            num(j, "step_s_best", best);
            num(j, "step_s", mean);
            num(j, "tokens_per_s", N / best);
            num(j, "model_gflops_per_step", flops / 1e9);
            num(j, "model_gflops_per_s", gflops);
            num(j, "mfu", gflops / sgemm);
            num(j, "mfu_mean", flops / mean / 1e9 / sgemm);
            if (al_dist_active()) { /* under mpirun only: a plain run's fields are those of bench/torch_peer.py */
                num(j, "ranks", al_dist_size());
                num(j, "shards", shards);
                num(j, "comm_s", comm / iters);
                num(j, "comm_busy_s", comm_busy / iters); /* the bucket reductions, during the backward or after it */
                num(j, "allreduce_bytes_per_step", bytes_reduced);
                num(j, "buckets", (double)buckets);
                num(j, "buckets_overlapped", (double)buckets_overlapped); /* sent before the backward ended */
            }
            bf16_ratios_json(j, "mfu", gflops, &e);
            if (vs_f32) paired_json(j, "step", &ps), num(j, "f32_pairs", (double)ps.n);
            env_json(j, &e, (int)iters);
            if (json_out(j, mark)) rc = cli_fail(cmd, "out of memory");
        } else {
            printf("train step: %d layers, hidden %d, %d heads (%d KV), %s attention, B=%d x T=%d\n",
                   m.cfg.num_layers, m.cfg.hidden_size, m.cfg.num_heads, m.cfg.num_kv_heads,
                   al_attn_name(m.cfg.attention), o.batch, o.context);
            printf("  %.1f ms/step best (mean %.1f), %.0f tokens/s, %.1f model GFLOP/s -> MFU %.1f%% of sgemm",
                   1e3 * best, 1e3 * mean, N / best, gflops, 100 * gflops / sgemm);
            bf16_ratios_text(gflops, &e);
            printf("\n");
            if (al_dist_active())
                printf("  %d ranks x %d threads, %d shards: %.1f ms/step waiting for communication after the "
                       "backward (mean; the bucket reductions took %.1f ms), %.1f MB all-reduced per step in %zu "
                       "buckets, %zu of them during the backward\n",
                       al_dist_size(), al_threads(), shards, 1e3 * comm / iters, 1e3 * comm_busy / iters,
                       bytes_reduced / 1e6, buckets, buckets_overlapped);
            if (vs_f32) paired_text("step", &ps);
            env_text(&e);
        }
    }
    free(ps.ratio);
    al_train_precision_end(&m);
    al_free(m1);
    al_free(m2);
    free(in);
    free(tg);
    al_acts_free(&a);
    al_model_free(&m);
    if (rc == -1) return cli_dist_fail(cmd, err.msg); /* a step's communication failed */
    al_dist_finalize();
    return rc;
}

/* ---- prefill ---- */

/* One forward over a prompt of --tokens tokens (B = 1) of a model with
 * random weights at the flags' shape (default preset gpt2: 12 layers, hidden
 * 768), logits for every position and no loss; tokens/s and model GFLOP/s
 * (2 x matmul params + causal attention per token) against sgemm. The
 * forward runs on inference activations (al_acts_create_infer: one layer's
 * buffers shared by all layers, nothing kept for a backward), so the reported
 * RSS is mostly the weights; no KV cache is written. */
static int bench_prefill(int argc, char **argv) {
    const char *cmd = "bench prefill";
    train_flags f;
    al_arg args[TRAIN_MAX_ARGS + 7];
    int n = train_flags_table(&f, args);
    if (n < 0) return cli_fail(cmd, TRAIN_FLAGS_TOO_MANY);
    long iters = 5, tokens = 512, sgemm_n = 2048, triad_mb = 256;
    int json = 0, vs_f32 = 0;
    const char *weights = "f32";
    args[n++] = (al_arg){"tokens", ARG_INT, &tokens, "prompt length (positions in one forward)"};
    args[n++] = (al_arg){"iters", ARG_INT, &iters, "timed forwards (after 1 warm-up)"};
    args[n++] = (al_arg){"weights", ARG_STRING, &weights, CLI_WEIGHTS_HELP};
    args[n++] = (al_arg){"vs-f32", ARG_FLAG, &vs_f32, VS_F32_HELP};
    n += env_flags(args + n, &sgemm_n, &triad_mb, &json);
    int rc = cli_parse(cmd, "[--preset NAME] [model flags] [--tokens N] [--iters N] [--weights bf16] [--json]", args, n,
                       argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc || (rc = cli_weights_check(cmd, weights))) return rc;
    if (!f.preset && !cli_find(args, n, "layers")->seen) f.preset = "gpt2";
    al_train_opts o;
    if ((rc = train_flags_resolve(cmd, &f, args, n, &o))) return rc;
    if (iters <= 0 || tokens < 1 || tokens > (1 << 20) || sgemm_n < 64 || triad_mb < 1)
        return cli_usage(cmd, "--iters and --tokens must be positive, --sgemm-n at least 64 and --triad-mb positive");
    if (o.model.task != AL_TASK_LM) return cli_usage(cmd, "language models only (--task vision is not benchmarked)");
    if ((rc = vs_f32_check(cmd, vs_f32, o.precision))) return rc;
    al_config cfg = o.model;
    if (cfg.max_position < tokens) cfg.max_position = (int)tokens; /* RoPE table length: fine for timing */
    bench_env e = {.load_start = al_loadavg1(), .sgemm_n = sgemm_n, .triad_mb = triad_mb};
    al_err err;
    al_model m;
    al_acts a;
    if (al_model_create(&m, &cfg, &err)) return cli_fail(cmd, err.msg);
    if (al_acts_create_infer(&a, &m, 1, (int)tokens, NULL, 0, &err)) {
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_model_init_weights(&m, o.seed);
    if ((rc = cli_weights_apply(cmd, weights, &m))) {
        al_acts_free(&a), al_model_free(&m);
        return rc;
    }
    if (o.precision == AL_PREC_BF16) cli_precision_line(o.precision);
    int *in = malloc(sizeof(int) * tokens);
    paired pp = {0};
    if (!in || (vs_f32 && paired_init(&pp, iters))) {
        free(in), free(pp.ratio), al_acts_free(&a), al_model_free(&m);
        return cli_fail(cmd, "out of memory");
    }
    /* fp32 weights in BF16: rounded once, as a serving engine would hold them */
    if (!m.w16 && al_train_precision_begin(&m, o.precision, &err)) {
        free(in), free(pp.ratio), al_acts_free(&a), al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_rng rng;
    al_rng_seed(&rng, 4);
    for (long i = 0; i < tokens; i++) in[i] = (int)(al_rng_u64(&rng) % 256);
    for (int w = 0; w <= vs_f32; w++) { /* warm-up (each path) */
        al_precision_set(w ? AL_PREC_F32 : o.precision);
        al_model_forward(&m, &a, in, NULL);
    }
    al_precision_set(o.precision);
    double best = 1e30, total = 0;
    if (!(rc = env_start(cmd, &e))) {
        for (long it = 0; it < iters; it++) {
            double dt[2]; /* [0] the run's precision, [1] fp32 (--vs-f32: the products in fp32, the BF16 copy unread) */
            for (int c = 0; c <= vs_f32; c++) {
                const int path = pair_path(vs_f32, it, c);
                al_precision_set(path ? AL_PREC_F32 : o.precision);
                env_probe(&e);
                const double t0 = al_now();
                al_model_forward(&m, &a, in, NULL);
                dt[path] = al_now() - t0;
            }
            al_precision_set(o.precision);
            total += dt[0];
            if (dt[0] < best) best = dt[0];
            if (vs_f32) paired_add(&pp, dt[0], dt[1]);
        }
    }
    if (!rc && !(rc = env_finish(cmd, &e))) {
        const double flops = al_model_fwd_flops_per_token(&m, (int)tokens) * tokens;
        const double sgemm = al_sgemm_probe_gflops(&e.sg), gflops = flops / best / 1e9;
        if (json) {
            const unsigned long mark = al_json_mark();
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "bench", "prefill");
            cJSON_AddStringToObject(j, "attention", al_attn_name(cfg.attention));
            num(j, "layers", cfg.num_layers);
            num(j, "hidden", cfg.hidden_size);
            num(j, "heads", cfg.num_heads);
            num(j, "kv_heads", cfg.num_kv_heads);
            num(j, "tokens", (double)tokens);
            num(j, "ms_best", 1e3 * best);
            num(j, "ms_mean", 1e3 * total / iters);
            num(j, "tokens_per_s", tokens / best);
            num(j, "model_gflops", flops / 1e9);
            num(j, "model_gflops_per_s", gflops);
            num(j, "ratio", gflops / sgemm);
            bf16_ratios_json(j, "ratio", gflops, &e);
            cJSON_AddStringToObject(j, "weights", al_dtype_name(m.embed_dt));
            if (vs_f32) paired_json(j, "forward", &pp), num(j, "f32_pairs", (double)pp.n);
            env_json(j, &e, (int)iters);
            if (json_out(j, mark)) rc = cli_fail(cmd, "out of memory");
        } else {
            printf("prefill: %d layers, hidden %d, %d heads (%d KV), %s attention, %ld tokens, %s weights\n",
                   cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, al_attn_name(cfg.attention), tokens,
                   al_dtype_name(m.embed_dt));
            printf("  %.1f ms best (mean %.1f), %.0f tokens/s, %.1f model GFLOP/s -> %.1f%% of sgemm", 1e3 * best,
                   1e3 * total / iters, tokens / best, gflops, 100 * gflops / sgemm);
            bf16_ratios_text(gflops, &e);
            printf("\n");
            if (vs_f32) paired_text("forward", &pp);
            env_text(&e);
        }
    }
    free(pp.ratio);
    al_train_precision_end(&m);
    free(in);
    al_acts_free(&a);
    al_model_free(&m);
    return rc;
}

/* ---- decode ---- */

/* Decode speed at a long context. The cache is filled with random values
 * instead of running `context` decode steps first: the time of a step does
 * not depend on what the cache holds, only on how much of it is read. Bytes
 * moved per token = every weight read once (the embedding: one row, unless
 * it is also the tied head) + the cache entries read. Each round decodes the
 * last --tokens positions before --decode-context again; the best round
 * counts. --weights bf16 converts an attnlab model's matrices to BF16 first
 * (al_model_weights_bf16), and the bytes per token count them at 2 bytes. */
static int bench_decode(int argc, char **argv) {
    const char *cmd = "bench decode";
    train_flags f;
    al_arg args[TRAIN_MAX_ARGS + 9 + CLI_KVQ_ARGS + CLI_KVE_ARGS];
    int n = train_flags_table(&f, args);
    if (n < 0) return cli_fail(cmd, TRAIN_FLAGS_TOO_MANY);
    cli_kvq_flags kf;
    n += cli_kvq_args(&kf, args + n);
    cli_kve_flags ef;
    n += cli_kve_args(&ef, args + n);
    const char *model_dir = NULL, *kv_dtype = "f32", *weights = "f32";
    long context = 4096, tokens = 32, triad_mb = 256, sgemm_n = 2048, iters = 3;
    int json = 0;
    args[n++] = (al_arg){"model", ARG_STRING, &model_dir, "model directory (default: a random model from the flags)"};
    args[n++] = (al_arg){"kv-dtype", ARG_STRING, &kv_dtype, "KV cache values: f32 or bf16 (half the bytes)"};
    args[n++] = (al_arg){"decode-context", ARG_INT, &context, "cache length at which decoding is timed"};
    args[n++] = (al_arg){"tokens", ARG_INT, &tokens, "decode steps per round (the last ones before the context is full)"};
    args[n++] = (al_arg){"iters", ARG_INT, &iters, "timed rounds (best counts)"};
    args[n++] = (al_arg){"weights", ARG_STRING, &weights, CLI_WEIGHTS_HELP};
    n += env_flags(args + n, &sgemm_n, &triad_mb, &json);
    int rc = cli_parse(cmd,
                       "[--model DIR | --preset NAME] [--decode-context T] [--tokens N] [--weights bf16] "
                       "[--kv-dtype bf16] [--kv-quant int8|int4|int2 [--kv-group N] [--kv-residual R]] "
                       "[--kv-evict window|h2o|snapkv [--kv-budget X] [--kv-sinks N] [--kv-prompt N]] [--json]",
                       args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc || (rc = cli_weights_check(cmd, weights))) return rc;
    if (context < 2 || tokens < 1 || tokens >= context || triad_mb < 1 || iters < 1 || sgemm_n < 64)
        return cli_usage(cmd, "need 0 < --tokens < --decode-context, positive --iters and --triad-mb, --sgemm-n >= 64");
    al_dtype kv_dt;
    al_precision prec;
    if ((rc = cli_kv_dtype(cmd, kv_dtype, &kv_dt)) || (rc = cli_precision(cmd, f.precision, "auto", &prec))) return rc;
    al_err err;
    al_config cfg;
    al_model m;
    if (f.threads > 0) al_set_threads((int)f.threads);
    bench_env e = {.load_start = al_loadavg1(), .sgemm_n = sgemm_n, .triad_mb = triad_mb};
    if (model_dir) {
        /* a longer RoPE table than the model trained with: fine for timing
         * (a Hugging Face checkpoint is memory-mapped in its dtype) */
        if (al_model_open(&m, model_dir, (int)context, NULL, &err)) return cli_fail(cmd, err.msg);
        cfg = m.cfg;
        if (cfg.task != AL_TASK_LM) {
            al_model_free(&m);
            return cli_usage(cmd, "language models only (a vision model does not decode)");
        }
    } else {
        if (!f.preset && !cli_find(args, n, "layers")->seen) f.preset = "bench";
        al_train_opts o;
        if ((rc = train_flags_resolve(cmd, &f, args, n, &o))) return rc;
        cfg = o.model;
        if (cfg.task != AL_TASK_LM) return cli_usage(cmd, "language models only (a vision model does not decode)");
        if (cfg.max_position < context) cfg.max_position = (int)context;
        if (al_model_create(&m, &cfg, &err)) return cli_fail(cmd, err.msg);
        al_model_init_weights(&m, 1);
    }
    if ((rc = cli_weights_apply(cmd, weights, &m))) {
        al_model_free(&m);
        return rc;
    }
    al_kvq_opts kvq;
    al_kve_opts kve;
    if ((rc = cli_kvq_resolve(cmd, &kf, &m, &kvq)) || (rc = cli_kve_resolve(cmd, &ef, &kvq, (int)context, &kve))) {
        al_model_free(&m);
        return rc;
    }
    if (kve.method == AL_KVE_SNAPKV && !kve.prompt) kve.prompt = (int)(context / 2);
    if (prec == AL_PREC_BF16) cli_precision_line(prec); /* after the usage checks: those stay one line */
    const al_kv_opts kvo = {kvq, kve};
    al_decoder dec;
    if (al_decoder_create_opts(&dec, &m, (int)context, kv_dt, &kvo, &err)) {
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_decoder_fill_random(&dec, 2);
    al_rng rng;
    al_rng_seed(&rng, 3);
    float *logits = malloc(sizeof(float) * (size_t)(cfg.vocab_size > 0 ? cfg.vocab_size : 1));
    if (!logits) {
        al_decoder_free(&dec);
        al_model_free(&m);
        return cli_fail(cmd, "out of memory");
    }
    const int span = cfg.vocab_size < 256 ? cfg.vocab_size : 256; /* byte tokens (any vocabulary has them) */
    al_decoder_seek(&dec, (int)(context - tokens - 1));
    al_decoder_step(&dec, 'a' % span, logits, &err); /* warm-up: caches, threads */
    double best = 1e30, best_attn = 0; /* the best round's seconds per token, and its attention's */
    if (!(rc = env_start(cmd, &e))) {
        for (long r = 0; r < iters && !rc; r++) {
            env_probe(&e);
            al_decoder_seek(&dec, (int)(context - tokens));
            int tok = 'a' % span;
            al_attn_decode_timing(1);
            const double t0 = al_now();
            for (long i = 0; i < tokens; i++) {
                if (al_decoder_step(&dec, tok, logits, &err)) {
                    rc = cli_fail(cmd, err.msg);
                    break;
                }
                tok = (int)(al_rng_u64(&rng) % (uint64_t)span);
            }
            const double dt = (al_now() - t0) / tokens;
            if (dt < best) best = dt, best_attn = al_attn_decode_seconds() / tokens;
            al_attn_decode_timing(0);
        }
    }
    if (!rc && !(rc = env_finish(cmd, &e))) {
        /* bytes read per token: every matrix once (in its dtype), of the embedding one row unless it is the head */
        size_t weight_bytes = al_model_weight_bytes(&m);
        const size_t esz = al_dtype_size(m.embed_dt);
        if (!cfg.tie_word_embeddings) weight_bytes -= m.params[0].numel * esz - cfg.hidden_size * esz;
        /* a mixture of experts reads the experts a token is routed to, not the others (gate, up, down each) */
        const size_t expert_bytes = (size_t)3 * cfg.hidden_size * cfg.moe_intermediate_size * esz;
        for (int l = 0; l < cfg.num_layers; l++)
            if (al_config_layer_moe(&cfg, l))
                weight_bytes -= (size_t)(cfg.n_routed_experts - cfg.num_experts_per_tok) * expert_bytes;
        /* the cache a step reads: what the decoder holds after appending its
         * token (quantised: codes and scales, the residual at its dtype) */
        double cache_read = 0;
        for (long i = 0; i < tokens; i++) {
            al_decoder_seek(&dec, (int)(context - tokens + i + 1));
            cache_read += al_decoder_kv_held_bytes(&dec) / (double)tokens;
        }
        const double kv_per_pos = al_decoder_kv_bytes_per_token(&dec);
        const double bytes = (double)weight_bytes + cache_read, gbs = bytes / best / 1e9;
        /* the attention alone: the cache it reads against its own time */
        const double kv_gbs = best_attn > 0 ? cache_read / best_attn / 1e9 : 0;
        if (json) {
            const unsigned long mark = al_json_mark();
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "bench", "decode");
            cJSON_AddStringToObject(j, "attention", al_attn_name(cfg.attention));
            num(j, "layers", cfg.num_layers);
            num(j, "hidden", cfg.hidden_size);
            num(j, "context", (double)context);
            num(j, "tokens", (double)tokens);
            num(j, "tokens_per_s", 1 / best);
            num(j, "ms_per_token", 1e3 * best);
            num(j, "weight_bytes", (double)weight_bytes);
            num(j, "kv_bytes_per_token_per_position", kv_per_pos);
            cJSON_AddStringToObject(j, "kv_dtype", al_dtype_name(kv_dt));
            cJSON_AddStringToObject(j, "kv_quant", al_kvq_name(kvq.kind));
            if (kvq.kind != AL_KVQ_NONE) {
                num(j, "kv_group", kvq.group);
                num(j, "kv_residual", kvq.residual);
            }
            cJSON_AddStringToObject(j, "kv_evict", al_kve_name(kve.method));
            if (kve.method != AL_KVE_NONE) num(j, "kv_budget", kve.budget);
            num(j, "kv_bytes_read_per_token", cache_read);
            num(j, "bytes_per_token", bytes);
            num(j, "achieved_gb_per_s", gbs);
            num(j, "bandwidth_ratio", gbs / e.triad);
            num(j, "attention_ms_per_token", 1e3 * best_attn);
            num(j, "kv_gb_per_s", kv_gbs);
            num(j, "kv_bandwidth_ratio", kv_gbs / e.triad);
            cJSON_AddStringToObject(j, "weights", al_dtype_name(m.embed_dt));
            cJSON_AddStringToObject(j, "wmat_kernel", al_wmat_kernel_name());
            env_json(j, &e, (int)iters);
            if (json_out(j, mark)) rc = cli_fail(cmd, "out of memory");
        } else {
            printf("decode at context %ld: %s attention, %d layers, hidden %d\n", context, al_attn_name(cfg.attention),
                   cfg.num_layers, cfg.hidden_size);
            if (m.mapped)
                printf("  weights: %s %s, memory-mapped (%s kernels)\n", al_config_architecture(&cfg),
                       al_dtype_name(m.embed_dt), al_wmat_kernel_name());
            else if (m.w16)
                printf("  weights: BF16, converted from fp32 (%s kernels)\n", al_wmat_kernel_name());
            printf("  %.1f tokens/s (%.3f ms/token, best of %ld rounds of %ld)\n", 1 / best, 1e3 * best, iters, tokens);
            if (kvq.kind != AL_KVQ_NONE)
                printf("  bytes per token: weights %.2f MB + KV cache read %.2f MB (%.1f bytes per quantised token, %s "
                       "group %d, residual %d in %s)\n",
                       weight_bytes / 1e6, cache_read / 1e6, kv_per_pos, al_kvq_name(kvq.kind), kvq.group,
                       kvq.residual, al_dtype_name(kv_dt));
            else
                printf("  bytes per token: weights %.2f MB + KV cache read %.2f MB (%.0f bytes per cached token, %s)\n",
                       weight_bytes / 1e6, cache_read / 1e6, kv_per_pos, al_dtype_name(kv_dt));
            if (kve.method != AL_KVE_NONE)
                printf("  KV cache evicted by %s at budget %g: the bytes read count the positions held\n",
                       al_kve_name(kve.method), kve.budget);
            printf("  %.2f GB/s achieved -> %.1f%% of triad bandwidth\n", gbs, 100 * gbs / e.triad);
            printf("  attention %.3f ms/token: the KV cache read at %.2f GB/s -> %.1f%% of triad\n", 1e3 * best_attn,
                   kv_gbs, 100 * kv_gbs / e.triad);
            env_text(&e);
        }
    }
    free(logits);
    al_decoder_free(&dec);
    al_model_free(&m);
    return rc;
}

/* ---- attention ---- */

/* The shared attention kernels alone (forward and backward), at one shape:
 * B=1, H=12, T=1024, d_h=64 by default. FLOPs: forward 4 T_eff d_h H per
 * query row (q.k and p.v; T_eff = (T+1)/2 causal, T bidirectional); backward
 * counted as 2.5x the forward (the score recompute plus dP, dQ, dK, dV
 * products). Memory kept for backward per head: o and lse, (d_v + 1) floats
 * per token, plus the kernels' workspace (packed K/V tiles and per-thread
 * tiles): both O(T). */
static int bench_attention(int argc, char **argv) {
    const char *cmd = "bench attention";
    const char *score = "softmax", *precision = NULL;
    al_precision prec;
    long B = 1, H = 12, G = 0, T = 1024, dh = 64, iters = 10, sgemm_n = 2048, threads = 0, power = 3;
    long triad_mb = 256;
    int json = 0, vs_f32 = 0, bidir = 0; /* switches are ints (ARG_FLAG) */
    al_arg args[17] = {
        {"score", ARG_STRING, &score, "softmax | poly | relu | sigmoid"},
        {"poly-power", ARG_INT, &power, "poly: p"},
        {"batch", ARG_INT, &B, "sequences"},
        {"heads", ARG_INT, &H, "query heads"},
        {"kv-heads", ARG_INT, &G, "KV heads (default: heads)"},
        {"context", ARG_INT, &T, "tokens per sequence"},
        {"head-dim", ARG_INT, &dh, "head dimension"},
        {"bidirectional", ARG_FLAG, &bidir, "no causal mask (vision)"},
        {"iters", ARG_INT, &iters, "timed repetitions (best is reported)"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_AUTO},
        {"vs-f32", ARG_FLAG, &vs_f32, VS_F32_HELP},
    };
    int n = 12;
    n += env_flags(args + n, &sgemm_n, &triad_mb, &json);
    int rc = cli_parse(cmd, "[--score S] [--context T] [--heads H] [--kv-heads G] [--head-dim D] [--json]", args, n,
                       argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!G) G = H;
    if (B < 1 || H < 1 || G < 1 || H % G || T < 1 || dh < 1 || iters < 1 || power < 1 || sgemm_n < 64 ||
        triad_mb < 1 || (long)B * T * H * dh > (1L << 28))
        return cli_usage(cmd, "sizes must be positive, --kv-heads must divide --heads, and the tensors fit in memory");
    if ((rc = cli_precision(cmd, precision, "auto", &prec)) || (rc = vs_f32_check(cmd, vs_f32, prec))) return rc;
    if (prec == AL_PREC_BF16) cli_precision_line(prec);
    if (threads > 0) al_set_threads((int)threads);
    bench_env e = {.load_start = al_loadavg1(), .sgemm_n = sgemm_n, .triad_mb = triad_mb};
    al_config cfg;
    al_config_default(&cfg);
    if (al_score_from_name(score, &cfg.score)) return cli_usage(cmd, "unknown score '%s'", score);
    cfg.poly_power = (int)power;
    cfg.score_n = (int)T;
    int ld_q = (int)(H * dh), ld_kv = (int)(G * dh);
    al_attn_shape s = {(int)B, (int)T, (int)H, (int)G, (int)dh, (int)dh, ld_q, ld_kv, ld_kv, ld_q,
                       1.0f / sqrtf((float)dh)};
    al_attn_set_score(&s, &cfg);
    s.bidirectional = bidir;
    s.grads_overwrite = 1; /* the backward writes dq, dk, dv, as the MHA/GQA/MQA layers run it */
    size_t nq = (size_t)B * T * ld_q, nkv = (size_t)B * T * ld_kv;
    float *q = al_alloc(nq * 4), *k = al_alloc(nkv * 4), *v = al_alloc(nkv * 4), *o = al_alloc(nq * 4);
    float *dO = al_alloc(nq * 4), *dq = al_alloc(nq * 4), *dk = al_alloc(nkv * 4), *dv = al_alloc(nkv * 4);
    float *lse = al_alloc((size_t)B * H * T * 4);
    paired pf = {0}, pb = {0};
    if (!q || !k || !v || !o || !dO || !dq || !dk || !dv || !lse ||
        (vs_f32 && (paired_init(&pf, iters) || paired_init(&pb, iters)))) {
        al_free(q), al_free(k), al_free(v), al_free(o), al_free(dO), al_free(dq), al_free(dk), al_free(dv), al_free(lse);
        free(pf.ratio), free(pb.ratio);
        return cli_fail(cmd, "out of memory");
    }
    al_rng rng;
    al_rng_seed(&rng, 3);
    for (size_t i = 0; i < nq; i++) q[i] = al_rng_normal(&rng), dO[i] = al_rng_normal(&rng);
    for (size_t i = 0; i < nkv; i++) k[i] = al_rng_normal(&rng), v[i] = al_rng_normal(&rng);
    for (int w = 0; w <= vs_f32; w++) { /* warm-up (each path) */
        al_precision_set(w ? AL_PREC_F32 : prec);
        al_attn_fwd(&s, q, k, v, o, lse);
        al_attn_bwd(&s, q, k, v, o, lse, dO, dq, dk, dv);
    }
    al_precision_set(prec);
    double best_f = 1e30, best_b = 1e30;
    if (!(rc = env_start(cmd, &e))) {
        for (long it = 0; it < iters; it++) {
            double tf[2] = {0}, tb[2] = {0}; /* [0] the run's precision, [1] fp32 (--vs-f32) */
            for (int c = 0; c <= vs_f32; c++) {
                const int path = pair_path(vs_f32, it, c);
                al_precision_set(path ? AL_PREC_F32 : prec);
                env_probe(&e);
                double t0 = al_now();
                al_attn_fwd(&s, q, k, v, o, lse);
                double t1 = al_now();
                al_attn_bwd(&s, q, k, v, o, lse, dO, dq, dk, dv);
                double t2 = al_now();
                tf[path] = t1 - t0, tb[path] = t2 - t1;
            }
            al_precision_set(prec);
            best_f = tf[0] < best_f ? tf[0] : best_f;
            best_b = tb[0] < best_b ? tb[0] : best_b;
            if (vs_f32) paired_add(&pf, tf[0], tf[1]), paired_add(&pb, tb[0], tb[1]);
        }
    }
    if (!rc && !(rc = env_finish(cmd, &e))) {
        const double t_eff = bidir ? (double)T : (T + 1) / 2.0;
        const double fwd_flops = 4.0 * B * H * (double)T * t_eff * dh, bwd_flops = 2.5 * fwd_flops;
        const double gf = fwd_flops / best_f / 1e9, gb = bwd_flops / best_b / 1e9, sgemm = al_sgemm_probe_gflops(&e.sg);
        const double saved = 4.0 * B * H * (double)T * (dh + 1), ws = (double)al_attn_workspace_bytes();
        if (json) {
            const unsigned long mark = al_json_mark();
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "bench", "attention");
            cJSON_AddStringToObject(j, "score", score);
            num(j, "batch", (double)B);
            num(j, "heads", (double)H);
            num(j, "kv_heads", (double)G);
            num(j, "context", (double)T);
            num(j, "head_dim", (double)dh);
            cJSON_AddBoolToObject(j, "causal", !bidir);
            num(j, "fwd_ms", 1e3 * best_f);
            num(j, "bwd_ms", 1e3 * best_b);
            num(j, "fwd_gflops", fwd_flops / 1e9);
            num(j, "bwd_gflops", bwd_flops / 1e9);
            num(j, "fwd_gflops_per_s", gf);
            num(j, "bwd_gflops_per_s", gb);
            num(j, "fwd_ratio", gf / sgemm);
            num(j, "bwd_ratio", gb / sgemm);
            bf16_ratios_json(j, "fwd_ratio", gf, &e);
            bf16_ratios_json(j, "bwd_ratio", gb, &e);
            num(j, "saved_bytes", saved);
            num(j, "workspace_bytes", ws);
            if (vs_f32) paired_json(j, "fwd", &pf), paired_json(j, "bwd", &pb), num(j, "f32_pairs", (double)pf.n);
            env_json(j, &e, (int)iters);
            if (json_out(j, mark)) rc = cli_fail(cmd, "out of memory");
        } else {
            printf("attention (%s, %s): B=%ld H=%ld G=%ld T=%ld d_h=%ld\n", score, bidir ? "bidirectional" : "causal", B,
                   H, G, T, dh);
            printf("  forward  %8.2f ms  %7.1f GFLOP/s  %5.1f%% of sgemm", 1e3 * best_f, gf, 100 * gf / sgemm);
            bf16_ratios_text(gf, &e);
            printf("\n  backward %8.2f ms  %7.1f GFLOP/s  %5.1f%% of sgemm", 1e3 * best_b, gb, 100 * gb / sgemm);
            bf16_ratios_text(gb, &e);
            printf("\n");
            printf("  kept for backward: o + lse %.2f MB; kernel workspace %.2f MB (both O(T))\n", saved / 1048576.0,
                   ws / 1048576.0);
            if (vs_f32) paired_text("forward", &pf), paired_text("backward", &pb);
            env_text(&e);
        }
    }
    al_free(q), al_free(k), al_free(v), al_free(o), al_free(dO), al_free(dq), al_free(dk), al_free(dv), al_free(lse);
    free(pf.ratio), free(pb.ratio);
    return rc;
}

/* Best-of-iters seconds of one call of f(ctx). */
static double best_time(void (*f)(void *), void *ctx, int iters) {
    double best = INFINITY;
    f(ctx); /* warm-up */
    for (int i = 0; i < iters; i++) {
        double t0 = al_now();
        f(ctx);
        double dt = al_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

typedef struct wmat_case {
    float *y;
    const float *x;
    al_wref W;
    int n, in, out;
} wmat_case;

static void run_matvec(void *p) {
    wmat_case *c = p;
    al_matvec(c->y, c->x, c->W, c->out, c->in, 0);
}

static void run_matmul(void *p) {
    wmat_case *c = p;
    al_matmul(c->y, c->out, c->x, c->in, c->W, c->n, c->in, c->out, 0);
}

/* Matrix-vector (decode) bandwidth and matrix-matrix (prefill) GFLOP/s over
 * W[rows, cols] stored as F32 (CBLAS), BF16 and F16 (wmat.c: the AVX-512
 * kernel where the CPU has it, and the plain-C fallback). */
static int bench_wmat(int argc, char **argv) {
    const char *cmd = "bench wmat";
    long rows = 4096, cols = 4096, N = 256, iters = 10, threads = 0;
    int json = 0;
    al_arg args[] = {
        {"rows", ARG_INT, &rows, "output rows of W (out)"},
        {"cols", ARG_INT, &cols, "columns of W (in)"},
        {"n", ARG_INT, &N, "rows of x for the matrix-matrix product (prefill)"},
        {"iters", ARG_INT, &iters, "timed repetitions (best is reported)"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"json", ARG_FLAG, &json, "print one JSON object"},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "[--rows R] [--cols C] [--n N] [--iters K] [--json]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (rows < 1 || cols < 1 || N < 1 || iters < 1 || rows > 65536 || cols > 65536 || N > 65536)
        return cli_usage(cmd, "--rows, --cols, --n (1..65536) and --iters must be positive");
    if (threads > 0) al_set_threads((int)threads);
    const size_t nw = (size_t)rows * cols;
    float *Wf = al_alloc(nw * 4), *x = al_alloc((size_t)N * cols * 4), *y = al_alloc((size_t)N * rows * 4);
    uint16_t *Wb = al_alloc(nw * 2), *Wh = al_alloc(nw * 2);
    if (!Wf || !x || !y || !Wb || !Wh) {
        al_free(Wf), al_free(x), al_free(y), al_free(Wb), al_free(Wh);
        return cli_fail(cmd, "out of memory");
    }
    al_rng r;
    al_rng_seed(&r, 4);
    for (size_t i = 0; i < nw; i++) {
        Wf[i] = 0.05f * al_rng_normal(&r);
        Wb[i] = al_f32_to_bf16(Wf[i]);
        Wh[i] = al_f32_to_f16(Wf[i]);
    }
    for (size_t i = 0; i < (size_t)N * cols; i++) x[i] = al_rng_normal(&r);
    struct {
        const char *name;
        al_wref W;
        int set; /* the core/cpu.h set forced (lowered to what the CPU has), -1: the one in use */
    } kinds[] = {{"F32", {Wf, AL_DT_F32}, -1},          {"BF16", {Wb, AL_DT_BF16}, -1},
                 {"F16", {Wh, AL_DT_F16}, -1},          {"BF16 AVX2", {Wb, AL_DT_BF16}, AL_CPU_AVX2},
                 {"F16 AVX2", {Wh, AL_DT_F16}, AL_CPU_AVX2},     {"BF16 plain C", {Wb, AL_DT_BF16}, AL_CPU_GENERIC},
                 {"F16 plain C", {Wh, AL_DT_F16}, AL_CPU_GENERIC}};
    enum { NK = sizeof kinds / sizeof kinds[0] };
    double gbs[NK], gfl[NK];
    const int avx = !strcmp(al_wmat_kernel_name(), "avx512");
    for (int k = 0; k < NK; k++) {
        al_cpu_force(kinds[k].set);
        wmat_case c = {y, x, kinds[k].W, (int)N, (int)cols, (int)rows};
        gbs[k] = (double)nw * al_dtype_size(kinds[k].W.dt) / best_time(run_matvec, &c, (int)iters) / 1e9;
        gfl[k] = 2.0 * N * (double)nw / best_time(run_matmul, &c, (int)iters) / 1e9;
    }
    al_cpu_force(-1);
    if (json) {
        printf("{\"bench\":\"wmat\",\"rows\":%ld,\"cols\":%ld,\"n\":%ld,\"threads\":%d,\"avx512\":%s", rows, cols, N,
               al_threads(), avx ? "true" : "false");
        const char *keys[NK] = {"f32", "bf16", "f16", "bf16_avx2", "f16_avx2", "bf16_portable", "f16_portable"};
        for (int k = 0; k < NK; k++)
            printf(",\"matvec_%s_gb_per_s\":%.3f,\"matmul_%s_gflops\":%.3f", keys[k], gbs[k], keys[k], gfl[k]);
        printf("}\n");
    } else {
        printf("W [%ld, %ld], %d threads, %s kernels (%s)\n", rows, cols, al_threads(), avx ? "AVX-512" : "AVX2",
               al_blas_kernels());
        printf("%-14s %16s %12s %22s\n", "weights", "matvec GB/s", "vs F32", "matmul GFLOP/s");
        for (int k = 0; k < NK; k++)
            printf("%-14s %16.2f %11.2fx %22.2f\n", kinds[k].name, gbs[k], (gbs[k] / al_dtype_size(kinds[k].W.dt)) /
                   (gbs[0] / 4), gfl[k]);
        printf("(\"vs F32\": weights per second against sgemv's; N = %ld for the matrix-matrix product)\n", N);
    }
    al_free(Wf), al_free(x), al_free(y), al_free(Wb), al_free(Wh);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "train")) return bench_train(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "prefill")) return bench_prefill(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "decode")) return bench_decode(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "attention")) return bench_attention(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "wmat")) return bench_wmat(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: attnlab bench <what> [flags]\n\n"
               "  attention  the shared attention kernels, forward and backward, vs sgemm\n"
               "  train      training step throughput and MFU vs sgemm\n"
               "  prefill    one forward over a prompt (default 12 layers x 768, 512 tokens) vs sgemm\n"
               "  decode     decode speed at a long context vs triad bandwidth\n"
               "  wmat       products over BF16/F16 weights (Hugging Face checkpoints) vs fp32 CBLAS\n\n"
               "Every benchmark measures its ceilings (sgemm GFLOP/s, triad GB/s) in the same run and reports\n"
               "peak RSS; --json prints one JSON object (docs/bench.md). 'attnlab bench <what> --help' lists flags.\n");
        return 0;
    }
    return cli_usage("bench",
                     argc >= 2 ? "unknown benchmark '%s'" : "which benchmark? (attention, train, prefill, decode, wmat)%s",
                     argc >= 2 ? argv[1] : "");
}
