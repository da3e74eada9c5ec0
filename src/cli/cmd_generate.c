/*
 * cmd_generate.c: `attnlab generate`: sample tokens after a prompt with the
 * model's KV cache, streaming their text to stdout; speed to stderr. The
 * prompt becomes tokens through the model directory's tokenizer (bytes for
 * attnlab's own models, with the BOS a tokenizer.json adds); each new token
 * is written as the bytes it stands for (al_tok_piece), special tokens are
 * not written, and sampling the tokenizer's EOS ends the text. --ids prints
 * the generated token ids instead, space-separated on one line.
 * --weights bf16 decodes with the model's matrices rounded to BF16 once
 * (weights.c): half the bytes read per token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "infer/generate.h"

/* Streams one generated id (ctx: int, 1 before the first). */
static void put_id(int id, void *ctx) {
    int *first = ctx;
    printf("%s%d", *first ? "" : " ", id);
    *first = 0;
    fflush(stdout);
}

/* Streams one generated token's bytes (ctx: the tokenizer). */
static void put_token(int id, void *ctx) {
    const al_tokenizer *t = ctx;
    const char *bytes;
    size_t len;
    if (al_tok_is_special(t, id) || al_tok_piece(t, id, &bytes, &len)) return;
    fwrite(bytes, 1, len, stdout);
    fflush(stdout);
}

int cmd_generate(int argc, char **argv) {
    const char *cmd = "generate";
    const char *model_dir = NULL, *prompt = NULL, *kv_dtype = "f32", *weights = "f32", *precision = NULL;
    al_precision prec;
    long count = 200, top_k = 0, seed = 0, threads = 0;
    double temperature = 0.8, top_p = 1.0;
    int print_ids = 0;
    cli_kvq_flags kf;
    cli_kve_flags ef;
    al_arg args[12 + CLI_KVQ_ARGS + CLI_KVE_ARGS] = {
        {"model", ARG_STRING, &model_dir, "model directory"},
        {"prompt", ARG_STRING, &prompt, "text to continue"},
        {"n", ARG_INT, &count, "tokens to generate (bytes for byte models)"},
        {"temperature", ARG_DOUBLE, &temperature, "sampling temperature (0: greedy)"},
        {"top-k", ARG_INT, &top_k, "keep the k most likely tokens (0: all)"},
        {"top-p", ARG_DOUBLE, &top_p, "keep the smallest set with this much probability (1: all)"},
        {"seed", ARG_INT, &seed, "sampling seed"},
        {"ids", ARG_FLAG, &print_ids, "print the generated token ids instead of their text"},
        {"kv-dtype", ARG_STRING, &kv_dtype, "KV cache values: f32 or bf16 (half the cache bytes)"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"weights", ARG_STRING, &weights, CLI_WEIGHTS_HELP},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_F32},
    };
    int n = 12;
    n += cli_kvq_args(&kf, args + n);
    n += cli_kve_args(&ef, args + n);
    int rc = cli_parse(cmd,
                       "--model DIR --prompt TEXT [-n N] [--temperature T] [--top-k K] [--top-p P] [--seed S] "
                       "[--weights bf16] [--kv-dtype bf16] [--kv-quant int8|int4|int2] [--kv-evict window|h2o|snapkv "
                       "[--kv-budget X] [--kv-sinks N] [--kv-prompt N]]",
                       args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir || !prompt) return cli_usage(cmd, "--model DIR and --prompt TEXT are required");
    if (count < 0 || top_k < 0 || temperature < 0 || !(top_p > 0 && top_p <= 1))
        return cli_usage(cmd, "-n, --top-k and --temperature must not be negative; --top-p must be in (0, 1]");
    al_dtype kv_dt;
    if ((rc = cli_kv_dtype(cmd, kv_dtype, &kv_dt))) return rc;
    if ((rc = cli_weights_check(cmd, weights)) || (rc = cli_precision(cmd, precision, "f32", &prec))) return rc;
    if (threads > 0) al_set_threads((int)threads);
    al_err err;
    al_model m;
    if (al_model_load(&m, model_dir, NULL, &err)) return cli_fail(cmd, err.msg);
    if (m.cfg.task != AL_TASK_LM) {
        al_model_free(&m);
        return cli_fail(cmd, "a vision model classifies images; it does not decode tokens");
    }
    if ((rc = cli_weights_apply(cmd, weights, &m))) {
        al_model_free(&m);
        return rc;
    }
    al_tokenizer *tk = cli_tokenizer(model_dir, m.cfg.vocab_size, &err);
    int *ids = NULL, n_ids = 0;
    if (!tk || al_tok_encode(tk, prompt, strlen(prompt), 1, &ids, &n_ids, &err)) {
        if (tk) al_err_prefix(&err, "the prompt");
        al_tok_free(tk);
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_sampler s = {(float)temperature, (int)top_k, (float)top_p};
    if (count > 1 << 20) count = 1 << 20;
    al_kv_opts kvo = {{0}, {0}};
    if ((rc = cli_kvq_resolve(cmd, &kf, &m, &kvo.q)) || (rc = cli_kve_resolve(cmd, &ef, &kvo.q, n_ids + (int)count, &kvo.e))) {
        free(ids);
        al_tok_free(tk);
        al_model_free(&m);
        return rc;
    }
    al_gen_stats st;
    int first = 1;
    if (!print_ids) fputs(prompt, stdout);
    int made = al_generate_ids_kv(&m, ids, n_ids, (int)count, &s, (uint64_t)seed, al_tok_eos(tk), kv_dt, &kvo, NULL,
                               print_ids ? put_id : put_token, print_ids ? (void *)&first : (void *)tk, &st, &err);
    if (made >= 0 || !print_ids) putchar('\n');
    free(ids);
    al_tok_free(tk);
    al_model_free(&m);
    if (made < 0) return cli_fail(cmd, err.msg);
    fprintf(stderr, "attnlab: %d prompt tokens in %.3f s, %d new tokens in %.3f s (%.1f tokens/s), KV cache %zu bytes "
            "(%.0f held at the end)\n", st.prompt_tokens, st.prefill_s, st.generated, st.decode_s,
            st.decode_s > 0 ? st.generated / st.decode_s : 0.0, st.cache_bytes, st.kv_held_bytes);
    cli_precision_note(precision, prec);
    return 0;
}
