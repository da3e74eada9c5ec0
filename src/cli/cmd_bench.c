/*
 * cmd_bench.c: `attnlab bench train`: training throughput and MFU. MFU here
 * is model FLOP/s (6 x matmul params + causal attention per token, the same
 * count for every implementation) divided by the sgemm GFLOP/s measured in
 * the same run, so the ratio survives noisy shared machines.
 * `bench decode` (a model's decode speed vs bandwidth), `bench attention`
 * (the score kernels vs sgemm) and `bench wmat` (products over BF16/F16
 * weights, nn/wmat.c, against fp32 CBLAS) complete it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/blas.h"
#include "core/ceiling.h"
#include "io/io.h"
#include "model/model.h"
#include "train/train.h"

static int bench_train(int argc, char **argv) {
    const char *cmd = "bench train";
    train_flags f;
    al_arg args[TRAIN_MAX_ARGS + 3];
    int n = train_flags_table(&f, args);
    long iters = 10, sgemm_n = 2048;
    int json = 0;
    args[n++] = (al_arg){"iters", ARG_INT, &iters, "timed training steps (after 2 warm-up steps)"};
    args[n++] = (al_arg){"sgemm-n", ARG_INT, &sgemm_n, "size of the sgemm ceiling measurement"};
    args[n++] = (al_arg){"json", ARG_FLAG, &json, "print one JSON object"};
    int rc = cli_parse(cmd, "[--preset NAME] [model flags] [--iters N] [--json]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!f.preset && !cli_find(args, n, "layers")->seen) f.preset = "bench";
    al_train_opts o;
    if ((rc = train_flags_resolve(cmd, &f, args, n, &o))) return rc;
    if (iters <= 0 || sgemm_n < 64) return cli_usage(cmd, "--iters must be positive and --sgemm-n at least 64");
    al_err err;
    al_model m;
    al_acts a;
    if (al_model_create(&m, &o.model, &err) || al_model_alloc_grads(&m, &err)) return cli_fail(cmd, err.msg);
    if (al_acts_create(&a, &m, o.batch, o.context, &err)) {
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_model_init_weights(&m, o.seed);
    float *m1 = al_alloc(sizeof(float) * m.n_floats), *m2 = al_alloc(sizeof(float) * m.n_floats);
    const int N = o.batch * o.context;
    int in[N], tg[N];
    al_rng rng;
    al_rng_seed(&rng, 1);
    for (int i = 0; i < N; i++) {
        in[i] = (int)(al_rng_u64(&rng) % 256);
        tg[i] = (int)(al_rng_u64(&rng) % 256);
    }
    double sgemm = al_measure_sgemm_gflops((int)sgemm_n, 5);
    double best = 1e30, total = 0;
    for (int it = 0; it < iters + 2; it++) {
        double t0 = al_now();
        al_model_zero_grads(&m);
        al_model_forward(&m, &a, in, tg);
        al_model_backward(&m, &a);
        double gn = al_grad_norm(&m);
        al_adamw_update(&m, m1, m2, 1e-4, &o, it + 1, gn > 1 ? (float)(1 / gn) : 1.0f);
        double dt = al_now() - t0;
        if (it >= 2) {
            total += dt;
            if (dt < best) best = dt;
        }
    }
    double mean = total / iters, flops = al_model_train_flops_per_token(&m, o.context) * N;
    double tps = N / mean, gflops = flops / mean / 1e9, mfu = gflops / sgemm;
    long rss = al_peak_rss_bytes();
    if (json) {
        printf("{\"bench\":\"train\",\"layers\":%d,\"hidden\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,"
               "\"batch\":%d,\"context\":%d,\"threads\":%d,\"step_s\":%.5f,\"step_s_best\":%.5f,\"tokens_per_s\":%.1f,"
               "\"model_gflops_per_step\":%.4f,\"model_gflops_per_s\":%.2f,\"sgemm_gflops\":%.2f,\"mfu\":%.4f,"
               "\"peak_rss_bytes\":%ld,\"blas_kernels\":\"%s\"}\n",
               m.cfg.num_layers, m.cfg.hidden_size, m.cfg.num_heads, m.cfg.num_kv_heads, m.cfg.head_dim, o.batch,
               o.context, al_threads(), mean, best, tps, flops / 1e9, gflops, sgemm, mfu, rss, al_blas_kernels());
    } else {
        printf("train step: %d layers, hidden %d, %d heads (%d KV), B=%d x T=%d, %d threads\n", m.cfg.num_layers,
               m.cfg.hidden_size, m.cfg.num_heads, m.cfg.num_kv_heads, o.batch, o.context, al_threads());
        printf("  %.1f ms/step (best %.1f), %.0f tokens/s, %.1f model GFLOP/s\n", 1e3 * mean, 1e3 * best, tps, gflops);
        printf("  sgemm ceiling %.1f GFLOP/s (n=%ld, same run, OpenBLAS %s kernels) -> MFU %.1f%%\n", sgemm, sgemm_n,
               al_blas_kernels(), 100 * mfu);
        printf("  peak RSS %.1f MB\n", rss / 1048576.0);
    }
    al_free(m1);
    al_free(m2);
    al_acts_free(&a);
    al_model_free(&m);
    return 0;
}

/* Decode speed at a long context. The cache is filled with random values
 * instead of running `context` decode steps first: the time of a step does
 * not depend on what the cache holds, only on how much of it is read. Bytes
 * moved per token = every weight read once (the embedding: one row, unless
 * it is also the tied head) + the cache entries read. */
static int bench_decode(int argc, char **argv) {
    const char *cmd = "bench decode";
    train_flags f;
    al_arg args[TRAIN_MAX_ARGS + 5];
    int n = train_flags_table(&f, args);
    const char *model_dir = NULL;
    long context = 4096, tokens = 32, triad_mb = 256;
    int json = 0;
    args[n++] = (al_arg){"model", ARG_STRING, &model_dir, "model directory (default: a random model from the flags)"};
    args[n++] = (al_arg){"decode-context", ARG_INT, &context, "cache length at which decoding is timed"};
    args[n++] = (al_arg){"tokens", ARG_INT, &tokens, "timed decode steps (the last ones before the context is full)"};
    args[n++] = (al_arg){"triad-mb", ARG_INT, &triad_mb, "MB per array of the bandwidth ceiling measurement"};
    args[n++] = (al_arg){"json", ARG_FLAG, &json, "print one JSON object"};
    int rc = cli_parse(cmd, "[--model DIR | --preset NAME] [--decode-context T] [--tokens N] [--json]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (context < 2 || tokens < 1 || tokens >= context || triad_mb < 1)
        return cli_usage(cmd, "need 0 < --tokens < --decode-context and a positive --triad-mb");
    al_err err;
    al_config cfg;
    al_model m;
    if (f.threads > 0) al_set_threads((int)f.threads);
    if (model_dir) {
        /* a longer RoPE table than the model trained with: fine for timing
         * (a Hugging Face checkpoint is memory-mapped in its dtype) */
        if (al_model_open(&m, model_dir, (int)context, NULL, &err)) return cli_fail(cmd, err.msg);
        cfg = m.cfg;
    } else {
        if (!f.preset && !cli_find(args, n, "layers")->seen) f.preset = "bench";
        al_train_opts o;
        if ((rc = train_flags_resolve(cmd, &f, args, n, &o))) return rc;
        cfg = o.model;
        if (cfg.max_position < context) cfg.max_position = (int)context;
        if (al_model_create(&m, &cfg, &err)) return cli_fail(cmd, err.msg);
        al_model_init_weights(&m, 1);
    }
    al_decoder dec;
    if (al_decoder_create(&dec, &m, (int)context, &err)) {
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_rng rng;
    al_rng_seed(&rng, 2);
    size_t cache_floats = dec.cache_bytes / sizeof(float);
    for (size_t i = 0; i < cache_floats; i++) dec.cache[i] = 0.5f * al_rng_normal(&rng);
    float *logits = malloc(sizeof(float) * (size_t)(cfg.vocab_size > 0 ? cfg.vocab_size : 1));
    if (!logits) {
        al_decoder_free(&dec);
        al_model_free(&m);
        return cli_fail(cmd, "out of memory");
    }
    dec.pos = (int)(context - tokens - 1);
    const int span = cfg.vocab_size < 256 ? cfg.vocab_size : 256; /* byte tokens (any vocabulary has them) */
    al_decoder_step(&dec, 'a' % span, logits, &err); /* warm-up: caches, threads */
    double t0 = al_now();
    int tok = 'a' % span;
    for (long i = 0; i < tokens; i++) {
        if (al_decoder_step(&dec, tok, logits, &err)) break;
        tok = (int)(al_rng_u64(&rng) % (uint64_t)span);
    }
    double dt = (al_now() - t0) / tokens;
    double triad = al_measure_triad_gbs((int)triad_mb, 5);
    /* bytes read per token: every matrix once (in its dtype), of the embedding one row unless it is the head */
    size_t weight_bytes = al_model_weight_bytes(&m);
    const size_t esz = al_dtype_size(m.embed_dt);
    if (!cfg.tie_word_embeddings) weight_bytes -= m.params[0].numel * esz - cfg.hidden_size * esz;
    double avg_pos = (double)context - tokens / 2.0;
    double cache_read = avg_pos * dec.values_per_token * sizeof(float) * cfg.num_layers;
    double bytes = (double)weight_bytes + cache_read, gbs = bytes / dt / 1e9;
    if (json) {
        printf("{\"bench\":\"decode\",\"attention\":\"%s\",\"context\":%ld,\"threads\":%d,\"tokens_per_s\":%.2f,"
               "\"ms_per_token\":%.4f,\"weight_bytes\":%zu,\"kv_bytes_per_token_per_position\":%zu,"
               "\"kv_bytes_read_per_token\":%.0f,\"bytes_per_token\":%.0f,\"achieved_gb_per_s\":%.3f,"
               "\"triad_gb_per_s\":%.3f,\"bandwidth_ratio\":%.4f,\"peak_rss_bytes\":%ld,\"weights\":\"%s\","
               "\"wmat_kernel\":\"%s\"}\n",
               al_attn_name(cfg.attention), context, al_threads(), 1 / dt, 1e3 * dt, weight_bytes,
               dec.values_per_token * sizeof(float) * cfg.num_layers, cache_read, bytes, gbs, triad, gbs / triad,
               al_peak_rss_bytes(), m.mapped ? al_dtype_name(m.embed_dt) : "F32", al_wmat_kernel_name());
    } else {
        printf("decode at context %ld: %s attention, %d layers, %d threads\n", context, al_attn_name(cfg.attention),
               cfg.num_layers, al_threads());
        if (m.mapped)
            printf("  weights: %s %s, memory-mapped (%s kernels)\n", al_config_architecture(&cfg),
                   al_dtype_name(m.embed_dt), al_wmat_kernel_name());
        printf("  %.1f tokens/s (%.3f ms/token)\n", 1 / dt, 1e3 * dt);
        printf("  bytes per token: weights %.2f MB + KV cache read %.2f MB (%zu bytes per cached token)\n",
               weight_bytes / 1e6, cache_read / 1e6, dec.values_per_token * sizeof(float) * cfg.num_layers);
        printf("  %.2f GB/s achieved; triad ceiling %.2f GB/s (same run) -> %.1f%% of bandwidth\n", gbs, triad,
               100 * gbs / triad);
    }
    free(logits);
    al_decoder_free(&dec);
    al_model_free(&m);
    return 0;
}

/* The shared attention kernels alone (forward and backward), at one shape:
 * B=1, H=12, T=1024, d_h=64 by default. FLOPs: forward 4 T_eff d_h H per
 * query row (q.k and p.v; T_eff = T/2 causal); backward counted as 2.5x the
 * forward (the score recompute plus dP, dQ, dK, dV products). */
static int bench_attention(int argc, char **argv) {
    const char *cmd = "bench attention";
    const char *score = "softmax";
    long B = 1, H = 12, G = 0, T = 1024, dh = 64, iters = 5, bidir = 0, sgemm_n = 2048, threads = 0, power = 3;
    int json = 0;
    al_arg args[] = {
        {"score", ARG_STRING, &score, "softmax | poly | relu | sigmoid"},
        {"poly-power", ARG_INT, &power, "poly: p"},
        {"batch", ARG_INT, &B, "sequences"},
        {"heads", ARG_INT, &H, "query heads"},
        {"kv-heads", ARG_INT, &G, "KV heads (default: heads)"},
        {"context", ARG_INT, &T, "tokens per sequence"},
        {"head-dim", ARG_INT, &dh, "head dimension"},
        {"bidirectional", ARG_FLAG, &bidir, "no causal mask (vision)"},
        {"iters", ARG_INT, &iters, "timed repetitions (best is reported)"},
        {"sgemm-n", ARG_INT, &sgemm_n, "size of the sgemm ceiling measurement"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"json", ARG_FLAG, &json, "print one JSON object"},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "[--score S] [--context T] [--heads H] [--head-dim D] [--json]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!G) G = H;
    if (B < 1 || H < 1 || G < 1 || H % G || T < 1 || dh < 1 || iters < 1 || power < 1 || (long)B * T * H * dh > (1L << 28))
        return cli_usage(cmd, "sizes must be positive, --kv-heads must divide --heads, and the tensors fit in memory");
    if (threads > 0) al_set_threads((int)threads);
    al_config cfg;
    al_config_default(&cfg);
    if (al_score_from_name(score, &cfg.score)) return cli_usage(cmd, "unknown score '%s'", score);
    cfg.poly_power = (int)power;
    cfg.score_n = (int)T;
    int ld_q = (int)(H * dh), ld_kv = (int)(G * dh);
    al_attn_shape s = {(int)B, (int)T, (int)H, (int)G, (int)dh, (int)dh, ld_q, ld_kv, ld_kv, ld_q,
                       1.0f / sqrtf((float)dh)};
    al_attn_set_score(&s, &cfg);
    s.bidirectional = (int)bidir;
    size_t nq = (size_t)B * T * ld_q, nkv = (size_t)B * T * ld_kv;
    float *q = al_alloc(nq * 4), *k = al_alloc(nkv * 4), *v = al_alloc(nkv * 4), *o = al_alloc(nq * 4);
    float *dO = al_alloc(nq * 4), *dq = al_alloc(nq * 4), *dk = al_alloc(nkv * 4), *dv = al_alloc(nkv * 4);
    float *lse = al_alloc((size_t)B * H * T * 4);
    if (!q || !k || !v || !o || !dO || !dq || !dk || !dv || !lse) {
        al_free(q), al_free(k), al_free(v), al_free(o), al_free(dO), al_free(dq), al_free(dk), al_free(dv), al_free(lse);
        return cli_fail(cmd, "out of memory");
    }
    al_rng rng;
    al_rng_seed(&rng, 3);
    for (size_t i = 0; i < nq; i++) q[i] = al_rng_normal(&rng), dO[i] = al_rng_normal(&rng);
    for (size_t i = 0; i < nkv; i++) k[i] = al_rng_normal(&rng), v[i] = al_rng_normal(&rng);
    double sgemm = al_measure_sgemm_gflops((int)sgemm_n, 5);
    double best_f = 1e30, best_b = 1e30;
    for (long it = 0; it <= iters; it++) { /* iteration 0 warms up */
        double t0 = al_now();
        al_attn_fwd(&s, q, k, v, o, lse);
        double t1 = al_now();
        al_attn_bwd(&s, q, k, v, o, lse, dO, dq, dk, dv);
        double t2 = al_now();
        if (it > 0) {
            best_f = t1 - t0 < best_f ? t1 - t0 : best_f;
            best_b = t2 - t1 < best_b ? t2 - t1 : best_b;
        }
    }
    double t_eff = bidir ? (double)T : (T + 1) / 2.0;
    double fwd_flops = 4.0 * B * H * (double)T * t_eff * dh, bwd_flops = 2.5 * fwd_flops;
    double gf = fwd_flops / best_f / 1e9, gb = bwd_flops / best_b / 1e9;
    if (json) {
        printf("{\"bench\":\"attention\",\"score\":\"%s\",\"batch\":%ld,\"heads\":%ld,\"kv_heads\":%ld,"
               "\"context\":%ld,\"head_dim\":%ld,\"causal\":%s,\"threads\":%d,\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,"
               "\"fwd_gflops\":%.4f,\"bwd_gflops\":%.4f,\"fwd_gflops_per_s\":%.2f,\"bwd_gflops_per_s\":%.2f,"
               "\"sgemm_gflops\":%.2f,\"fwd_ratio\":%.4f,\"bwd_ratio\":%.4f,\"peak_rss_bytes\":%ld,"
               "\"blas_kernels\":\"%s\"}\n",
               score, B, H, G, T, dh, bidir ? "false" : "true", al_threads(), 1e3 * best_f, 1e3 * best_b,
               fwd_flops / 1e9, bwd_flops / 1e9, gf, gb, sgemm, gf / sgemm, gb / sgemm, al_peak_rss_bytes(),
               al_blas_kernels());
    } else {
        printf("attention (%s, %s): B=%ld H=%ld G=%ld T=%ld d_h=%ld, %d threads\n", score,
               bidir ? "bidirectional" : "causal", B, H, G, T, dh, al_threads());
        printf("  forward  %8.2f ms  %7.1f GFLOP/s  %5.1f%% of sgemm\n", 1e3 * best_f, gf, 100 * gf / sgemm);
        printf("  backward %8.2f ms  %7.1f GFLOP/s  %5.1f%% of sgemm\n", 1e3 * best_b, gb, 100 * gb / sgemm);
        printf("  sgemm ceiling %.1f GFLOP/s (n=%ld, same run, OpenBLAS %s kernels); peak RSS %.1f MB\n", sgemm,
               sgemm_n, al_blas_kernels(), al_peak_rss_bytes() / 1048576.0);
    }
    al_free(q), al_free(k), al_free(v), al_free(o), al_free(dO), al_free(dq), al_free(dk), al_free(dv), al_free(lse);
    return 0;
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
        int portable;
    } kinds[] = {{"F32", {Wf, AL_DT_F32}, 0}, {"BF16", {Wb, AL_DT_BF16}, 0}, {"F16", {Wh, AL_DT_F16}, 0},
                 {"BF16 plain C", {Wb, AL_DT_BF16}, 1}, {"F16 plain C", {Wh, AL_DT_F16}, 1}};
    double gbs[5], gfl[5];
    const int avx = al_wmat_configure(0, 0);
    for (int k = 0; k < 5; k++) {
        al_wmat_configure(kinds[k].portable, 0);
        wmat_case c = {y, x, kinds[k].W, (int)N, (int)cols, (int)rows};
        gbs[k] = (double)nw * al_dtype_size(kinds[k].W.dt) / best_time(run_matvec, &c, (int)iters) / 1e9;
        gfl[k] = 2.0 * N * (double)nw / best_time(run_matmul, &c, (int)iters) / 1e9;
    }
    al_wmat_configure(0, 0);
    if (json) {
        printf("{\"bench\":\"wmat\",\"rows\":%ld,\"cols\":%ld,\"n\":%ld,\"threads\":%d,\"avx512\":%s", rows, cols, N,
               al_threads(), avx ? "true" : "false");
        const char *keys[] = {"f32", "bf16", "f16", "bf16_portable", "f16_portable"};
        for (int k = 0; k < 5; k++)
            printf(",\"matvec_%s_gb_per_s\":%.3f,\"matmul_%s_gflops\":%.3f", keys[k], gbs[k], keys[k], gfl[k]);
        printf("}\n");
    } else {
        printf("W [%ld, %ld], %d threads, %s kernels (%s)\n", rows, cols, al_threads(), avx ? "AVX-512" : "plain-C",
               al_blas_kernels());
        printf("%-14s %16s %12s %22s\n", "weights", "matvec GB/s", "vs F32", "matmul GFLOP/s");
        for (int k = 0; k < 5; k++)
            printf("%-14s %16.2f %11.2fx %22.2f\n", kinds[k].name, gbs[k], (gbs[k] / al_dtype_size(kinds[k].W.dt)) /
                   (gbs[0] / 4), gfl[k]);
        printf("(\"vs F32\": weights per second against sgemv's; N = %ld for the matrix-matrix product)\n", N);
    }
    al_free(Wf), al_free(x), al_free(y), al_free(Wb), al_free(Wh);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "train")) return bench_train(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "decode")) return bench_decode(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "attention")) return bench_attention(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "wmat")) return bench_wmat(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: attnlab bench <what> [flags]\n\n  train      training step throughput and MFU\n"
               "  decode     decode speed at a long context vs memory bandwidth\n"
               "  attention  the shared attention kernels, forward and backward, vs sgemm\n"
               "  wmat       products over BF16/F16 weights (Hugging Face checkpoints) vs fp32 CBLAS\n\n"
               "'attnlab bench <what> --help' lists its flags.\n");
        return 0;
    }
    return cli_usage("bench", argc >= 2 ? "unknown benchmark '%s'" : "which benchmark? (train, decode, attention, wmat)%s",
                     argc >= 2 ? argv[1] : "");
}
