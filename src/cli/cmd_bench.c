/*
 * cmd_bench.c: `attnlab bench train`: training throughput and MFU. MFU here
 * is model FLOP/s (6 x matmul params + causal attention per token, the same
 * count for every implementation) divided by the sgemm GFLOP/s measured in
 * the same run, so the ratio survives noisy shared machines.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/blas.h"
#include "core/ceiling.h"
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

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "train")) return bench_train(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: attnlab bench <what> [flags]\n\n  train      training step throughput and MFU\n\n"
               "'attnlab bench <what> --help' lists its flags.\n");
        return 0;
    }
    return cli_usage("bench", argc >= 2 ? "unknown benchmark '%s'" : "which benchmark? (train)%s", argc >= 2 ? argv[1] : "");
}
