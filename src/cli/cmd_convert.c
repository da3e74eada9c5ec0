/*
 * cmd_convert.c: `attnlab convert --model SRC --to gqa|mqa|mla|lrkv --out DST`:
 * a trained MHA/GQA model (attnlab's own run or a Hugging Face Llama-family
 * checkpoint) converted into another KV design (docs/convert.md). Argument
 * handling, text and printing only: the designs fit their weights
 * (src/attn/, al_attn_ops.convert) and model/convert.c runs the conversion.
 *
 * Text: --calibration FILE, or the source run's training data; either is
 * split as training splits it (the last val_fraction held out): activations
 * are measured on the first part and the loss right after conversion on the
 * held-out part. DST is written to DST.tmp.<pid> and renamed at the end, so
 * a failure leaves nothing at DST: config.json + model.safetensors (an fp32
 * attnlab run directory whose "train" block names the text, so eval's default
 * split works), the source's tokenizer.json if it has one, and convert.json
 * (the report).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "io/io.h"
#include "model/convert.h"
#include "train/data.h"
#include "train/train.h"

enum { CONVERT_MAX_ARGS = 48 };

/* ids of text[0, len) cut to at most max + 1 tokens; only a prefix of the
 * text long enough for them is encoded (bytes: max + 1; tokenizers: 16
 * bytes a token) */
static int encode_prefix(const al_tokenizer *t, const uint8_t *text, size_t len, size_t max, int **ids, size_t *n,
                         al_err *err) {
    const size_t cap = al_tok_is_bytes(t) ? max + 1 : 16 * max + 64;
    int k;
    if (al_tok_encode(t, (const char *)text, len < cap ? len : cap, 1, ids, &k, err)) return -1;
    *n = (size_t)k < max + 1 ? (size_t)k : max + 1;
    return 0;
}

/* removes dir and the files convert writes into it (a failed write) */
static void remove_dir(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "convert.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *p = al_sprintf("%s/%s", dir, files[i]);
        if (p) unlink(p);
        free(p);
    }
    rmdir(dir);
}

/* copies SRC/tokenizer.json to DIR if it exists */
static int copy_tokenizer(const char *src, const char *dir, al_err *err) {
    char *from = al_sprintf("%s/tokenizer.json", src), *to = al_sprintf("%s/tokenizer.json", dir), *text = NULL;
    size_t len;
    struct stat st;
    int rc = from && to ? 0 : al_errf(err, "out of memory");
    if (!rc && !stat(from, &st)) rc = al_read_file(from, &text, &len, err) || al_write_file_atomic(to, text, len, err);
    free(from);
    free(to);
    free(text);
    return rc ? -1 : 0;
}

/* The run block of DST's config.json: the text settings (so eval's default
 * split is the held-out text) and where it came from. */
static char *run_block(const al_train_opts *o, const char *src, const char *from) {
    char *train = al_train_opts_to_json(o);
    char *block = train ? al_sprintf("{\"train\": %s, \"converted_from\": {\"model\": \"%s\", \"attention\": \"%s\"}}",
                                     train, src, from)
                        : NULL;
    free(train);
    return block;
}

/* the per-layer table and the summary */
static void print_report(const al_convert_report *r, const char *dst) {
    printf("layer  output err  key err mean / max  value err mean / max\n");
    for (int l = 0; l < r->layers; l++) {
        double km = 0, kx = 0, vm = 0, vx = 0;
        for (int h = 0; h < r->heads; h++) {
            const double k = r->k_err[(size_t)l * r->heads + h], v = r->v_err[(size_t)l * r->heads + h];
            km += k / r->heads, vm += v / r->heads;
            kx = k > kx ? k : kx, vx = v > vx ? v : vx;
        }
        printf("%5d  %10.4f  %8.4f / %-8.4f  %10.4f / %-8.4f\n", l, r->out_err[l], km, kx, vm, vx);
    }
    printf("held-out loss: source %.4f, converted %.4f (%+.4f) over %zu tokens; calibration %zu tokens\n",
           r->loss_source, r->loss_converted, r->loss_converted - r->loss_source, r->heldout_tokens, r->calib_tokens);
    printf("KV cache: %zu values per token per layer (source %zu), %.1f %% of MHA; wrote %s\n", r->kv_target,
           r->kv_source, r->kv_percent_of_mha, dst);
}

int cmd_convert(int argc, char **argv) {
    const char *cmd = "convert";
    const char *model_dir = NULL, *to = NULL, *out = NULL, *calibration = NULL;
    long kv_heads = 0, calib_tokens = 16384, heldout_tokens = 8192, context = 0, batch = 4, threads = 0;
    static al_config flags; /* the design fields given (ARG_CFG writes here) */
    char names[AL_CONFIG_MAX_FIELDS][32];
    int owner[CONVERT_MAX_ARGS];
    al_arg args[CONVERT_MAX_ARGS] = {
        {"model", ARG_STRING, &model_dir, "source: an attnlab MHA/GQA run or a Hugging Face Llama-family checkpoint"},
        {"to", ARG_STRING, &to, "target design: gqa, mqa, mla or lrkv"},
        {"out", ARG_STRING, &out, "new run directory (must not exist)"},
        {"kv-heads", ARG_INT, &kv_heads, "gqa: KV heads (default: half the source's)"},
        {"calibration", ARG_STRING, &calibration,
         "text for activations (its last val_fraction held out for the loss; default: the source run's data)"},
        {"calibration-tokens", ARG_INT, &calib_tokens, "tokens of calibration text used"},
        {"heldout-tokens", ARG_INT, &heldout_tokens, "held-out tokens scored"},
        {"context", ARG_INT, &context, "window length (default: the source's training context; HF: min(256, its context))"},
        {"batch", ARG_INT, &batch, "windows per forward pass"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
    };
    int n = 10;
    for (int i = 0; i < al_config_field_count() && n < CONVERT_MAX_ARGS; i++) {
        int design;
        const al_config_field *cf = al_config_field_at(i, &design);
        if (design < 0 || !(cf->flags & AL_CF_FLAG) || al_config_field_flag(cf, names[i], sizeof names[i])) continue;
        owner[n] = design;
        args[n++] = (al_arg){.name = names[i], .type = ARG_CFG, .ptr = &flags, .help = cf->help, .field = cf};
    }
    int rc = cli_parse(cmd, "--model SRC --to gqa|mqa|mla|lrkv --out DST [design flags] [--calibration FILE]", args, n,
                       argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir || !to || !out) return cli_usage(cmd, "--model SRC, --to DESIGN and --out DST are required");
    int k;
    char buf[128];
    if (al_attn_from_name(to, &k)) return cli_usage(cmd, "--to must be one of %s, got '%s'", al_attn_names(buf, sizeof buf), to);
    if (kv_heads < 0 || calib_tokens < 1 || heldout_tokens < 1 || context < 0 || batch < 1 || kv_heads > INT_MAX ||
        calib_tokens > INT_MAX || heldout_tokens > INT_MAX)
        return cli_usage(cmd, "--kv-heads, --context must not be negative; token counts and --batch positive");
    unsigned char given[AL_ATTN_MAX_FIELDS] = {0};
    const al_attn_ops *design = al_attn_design(k);
    for (int i = 10; i < n; i++) {
        if (!args[i].seen) continue;
        if (owner[i] != k) return cli_usage(cmd, "--%s applies only to --to %s", args[i].name, al_attn_name(owner[i]));
        for (int f = 0; f < design->n_fields && f < AL_ATTN_MAX_FIELDS; f++)
            if (args[i].field == &design->fields[f]) given[f] = 1;
    }
    if (threads > 0) al_set_threads((int)threads);
    struct stat st;
    if (!stat(out, &st)) return cli_failf(cmd, "%s exists (convert writes a new directory)", out);

    al_err err;
    al_model src;
    char *extra = NULL;
    if (al_model_load(&src, model_dir, &extra, &err)) return cli_fail(cmd, err.msg);
    al_config target;
    if (al_convert_target(&src.cfg, k, (int)kv_heads, &flags, given, &target, &err)) {
        al_model_free(&src);
        free(extra);
        return cli_usage(cmd, "%s: %s", model_dir, err.msg);
    }
    al_train_opts o;
    al_train_opts_default(&o);
    o.context = src.cfg.max_position < 256 ? src.cfg.max_position : 256;
    const int hf = src.cfg.hf != AL_HF_NONE;
    if (!hf && al_run_load_opts(model_dir, &o, &err) == -1) {
        al_model_free(&src);
        free(extra);
        return cli_fail(cmd, err.msg);
    }
    free(extra);
    if (hf && !calibration) {
        al_model_free(&src);
        return cli_usage(cmd, "a Hugging Face checkpoint has no training data: give --calibration FILE");
    }
    if (calibration) {
        char *abs = realpath(calibration, NULL);
        rc = al_train_opts_set_paths(&o, abs ? abs : calibration, NULL, NULL, &err);
        free(abs);
        if (rc) {
            al_model_free(&src);
            return cli_fail(cmd, err.msg);
        }
    }
    const int T = context ? (int)context : o.context;
    if (T > src.cfg.max_position) {
        const int max_position = src.cfg.max_position; /* al_model_free clears src */
        al_model_free(&src);
        return cli_usage(cmd, "--context %d exceeds the source's %d", T, max_position);
    }
    o.context = T;
    al_tokenizer *tk = cli_tokenizer(model_dir, src.cfg.vocab_size, &err);
    al_corpus corpus = {0};
    int *cal = NULL, *held = NULL, failed = 0;
    size_t n_cal = 0, n_held = 0;
    if (!tk || al_corpus_load(&corpus, o.data, o.val_fraction, 1, &err) ||
        encode_prefix(tk, corpus.bytes, corpus.n_train, (size_t)calib_tokens, &cal, &n_cal, &err) ||
        encode_prefix(tk, corpus.bytes + corpus.n_train, corpus.n - corpus.n_train, (size_t)heldout_tokens, &held,
                      &n_held, &err))
        failed = cli_fail(cmd, err.msg);
    al_model dst;
    al_convert_report rep;
    const al_convert_opts co = {cal, n_cal, held, n_held, T, (int)batch};
    if (!failed && al_model_convert(&src, &target, given, &co, &dst, &rep, &err)) failed = cli_fail(cmd, err.msg);
    al_corpus_free(&corpus);
    free(cal);
    free(held);
    if (tk) al_tok_free(tk);
    if (failed) {
        al_model_free(&src);
        return 1;
    }
    char *tmp = al_sprintf("%s.tmp.%ld", out, (long)getpid());
    char *block = run_block(&o, model_dir, al_attn_name(src.cfg.attention));
    char *json = al_convert_report_json(&rep, &src.cfg, &dst.cfg), *report = tmp ? al_sprintf("%s/convert.json", tmp) : NULL;
    if (!tmp || !block || !json || !report) failed = cli_fail(cmd, "out of memory");
    else if (al_model_save(&dst, tmp, block, &err) || copy_tokenizer(model_dir, tmp, &err) ||
             al_write_file_atomic(report, json, strlen(json), &err))
        failed = cli_fail(cmd, err.msg);
    else if (rename(tmp, out))
        failed = cli_failf(cmd, "%s: cannot rename %s to it: %s", out, tmp, strerror(errno));
    if (failed && tmp) remove_dir(tmp);
    if (!failed) print_report(&rep, out);
    free(tmp);
    free(block);
    free(json);
    free(report);
    al_convert_report_free(&rep);
    al_model_free(&dst);
    al_model_free(&src);
    return failed;
}
