/*
 * cmd_eval.c: `attnlab eval`: loss and bits per byte of a model over a file
 * or a string (default: the validation split of the data the model was
 * trained on), and optionally the logits of the first window as NPY. For a
 * vision model: test accuracy and loss over the 10,000 Fashion-MNIST test
 * images.
 *
 * The text becomes tokens through the model directory's tokenizer
 * (tokenizer.json, or bytes for attnlab's own models; the BOS it adds
 * included; the default validation split of a run trained on a tokenizer's
 * ids is those ids, from the run's cache, train/data.h). The loss is the mean
 * cross-entropy per predicted token, in
 * consecutive windows of T predictions; bits per byte are the total nats /
 * ln 2 / the UTF-8 bytes of text those predictions cover, so for a byte model
 * it is the loss / ln 2 as before.
 *
 * A Hugging Face checkpoint (memory-mapped, docs/hf-models.md) has no
 * training data: it needs --data or --text, and defaults to one window of
 * min(1024, its context) tokens per pass. --verbose adds a line on memory:
 * weight bytes mapped in place and copied, activations, resident set.
 * --weights bf16 scores an attnlab model with its matrices rounded to BF16
 * (weights.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/ceiling.h"
#include "infer/eval_kv.h"
#include "io/io.h"
#include "train/vision.h"

/* Vision models: accuracy and mean cross-entropy over the test images of
 * `images` (default: the directory the model was trained from). Takes
 * ownership of m. */
static int eval_vision(const char *cmd, const char *model_dir, al_model *m, const char *images, const char *train_json,
                       long batch, long max_images, int json) {
    al_err err;
    al_train_opts o;
    al_train_opts_default(&o);
    if (train_json) al_train_opts_from_json(&o, train_json, &err);
    const char *dir = images ? images : o.images[0] ? o.images : AL_FMNIST_DIR;
    al_image_set test;
    al_acts a;
    int failed = 0;
    if (al_fmnist_load(&test, dir, "t10k", (int)max_images, &err)) {
        al_model_free(m);
        return cli_fail(cmd, err.msg);
    }
    double loss = NAN, acc = NAN, t0 = al_now();
    size_t count = 0;
    if (al_image_set_check(&test, &m->cfg, dir, &err) || al_vit_acts_create(&a, m, (int)batch, &err)) {
        failed = cli_fail(cmd, err.msg);
    } else {
        if (al_vit_evaluate(m, &a, &test, 0, &loss, &acc, &count, &err)) failed = cli_fail(cmd, err.msg);
        al_acts_free(&a);
    }
    double dt = al_now() - t0;
    if (!failed) {
        const size_t correct = (size_t)llround(acc * (double)count);
        if (json)
            printf("{\"model\":\"%s\",\"task\":\"vision\",\"images\":\"%s\",\"split\":\"test\",\"count\":%zu,"
                   "\"correct\":%zu,\"accuracy\":%.6f,\"loss\":%.6f,\"seconds\":%.3f,\"precision\":\"%s\"}\n",
                   model_dir, dir, count, correct, acc, loss, dt, al_precision_name(al_precision_now()));
        else
            printf("%s: test accuracy %.2f%% (%zu of %zu images), loss %.4f nats (%s, %.0f images/s)\n", model_dir,
                   100.0 * acc, correct, count, loss, dir, count / dt);
    }
    al_image_set_free(&test);
    al_model_free(m);
    return failed ? 1 : 0;
}

int cmd_eval(int argc, char **argv) {
    const char *cmd = "eval";
    const char *model_dir = NULL, *data = NULL, *text_arg = NULL, *logits_path = NULL, *images = NULL;
    const char *weights = "f32", *precision = NULL;
    al_precision prec;
    long context = 0, batch = 4, max_tokens = 0, threads = 0, max_images = 0;
    int json = 0, verbose = 0;
    cli_kvq_flags kf;
    cli_kve_flags ef;
    al_arg args[14 + CLI_KVQ_ARGS + CLI_KVE_ARGS] = {
        {"model", ARG_STRING, &model_dir, "model directory (config.json + model.safetensors)"},
        {"data", ARG_STRING, &data, "text file to score, whole (default: the training data's validation split)"},
        {"text", ARG_STRING, &text_arg, "score this text instead of a file"},
        {"context", ARG_INT, &context, "window length T (default: the training context)"},
        {"batch", ARG_INT, &batch, "windows per forward pass"},
        {"max-tokens", ARG_INT, &max_tokens, "score at most N tokens (bytes for byte models; 0: all)"},
        {"logits", ARG_STRING, &logits_path, "write float32 logits [T, vocab] of the first window to this .npy"},
        {"images", ARG_STRING, &images, "vision: directory of the Fashion-MNIST IDX files (default: the training run's)"},
        {"max-images", ARG_INT, &max_images, "vision: evaluate the first N test images (0: all 10000)"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"weights", ARG_STRING, &weights, CLI_WEIGHTS_HELP},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_F32},
        {"json", ARG_FLAG, &json, "print one JSON object"},
        {"verbose", ARG_FLAG, &verbose, "also report memory: weights mapped / copied, activations, resident set"},
    };
    int n = 14;
    n += cli_kvq_args(&kf, args + n);
    n += cli_kve_args(&ef, args + n);
    int rc = cli_parse(cmd,
                       "--model DIR [--data FILE | --text STR] [--context T] [--logits OUT.npy] [--images DIR] "
                       "[--weights bf16] [--precision f32|bf16|auto] [--kv-quant none|int8|int4|int2] [--kv-group N] "
                       "[--kv-residual R] [--kv-evict none|window|h2o|snapkv] [--kv-budget X] [--kv-sinks N] [--kv-prompt N] "
                       "[--kv-layer-budget uniform|pyramid]",
                       args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir) return cli_usage(cmd, "--model DIR is required");
    if (data && text_arg) return cli_usage(cmd, "give --data FILE or --text STR, not both");
    if (batch <= 0 || context < 0 || max_tokens < 0 || max_images < 0 || max_images > 100000000)
        return cli_usage(cmd, "--batch must be positive, --context, --max-tokens and --max-images not negative");
    if ((rc = cli_weights_check(cmd, weights)) || (rc = cli_precision(cmd, precision, "f32", &prec))) return rc;
    if (threads > 0) al_set_threads((int)threads);

    al_err err;
    al_model m;
    char *extra = NULL;
    if (al_model_load(&m, model_dir, &extra, &err)) return cli_fail(cmd, err.msg);
    if ((rc = cli_weights_apply(cmd, weights, &m))) {
        al_model_free(&m);
        free(extra);
        return rc;
    }
    const int vit = m.cfg.task == AL_TASK_VISION;
    static const char *const text_only[] = {"data", "text", "context", "max-tokens", "logits"};
    static const char *const vision_only[] = {"images", "max-images"};
    for (int i = 0; i < 5 + 2; i++) {
        const char *flag = i < 5 ? text_only[i] : vision_only[i - 5];
        if (cli_find(args, n, flag)->seen && (i < 5) == vit) {
            al_model_free(&m);
            free(extra);
            return cli_usage(cmd, "--%s does not apply to %s model", flag, vit ? "a vision" : "a language");
        }
    }
    const int kv_path = cli_kvq_given(args, n) || cli_kve_given(args, n);
    al_kvq_opts kvq = {0};
    if (kv_path && vit) rc = cli_usage(cmd, "--kv-* flags do not apply to a vision model");
    else if (kv_path) rc = cli_kvq_resolve(cmd, &kf, &m, &kvq);
    if (rc) {
        al_model_free(&m);
        free(extra);
        return rc;
    }
    char *tj; /* the run's training settings (config.json's attnlab block), NULL where it has none */
    const int bad = al_json_member_text(extra, "train", &tj, &err);
    free(extra);
    if (bad) {
        al_model_free(&m);
        return cli_failf(cmd, "%s: %s", model_dir, err.msg);
    }
    if (vit) {
        rc = eval_vision(cmd, model_dir, &m, images, tj, cli_find(args, n, "batch")->seen ? batch : 100, max_images,
                         json);
        free(tj);
        if (!rc) cli_precision_note(precision, prec); /* after the work: errors stay one line */
        return rc;
    }
    al_train_opts o;
    al_train_opts_default(&o);
    o.context = m.cfg.max_position;
    if (m.cfg.hf != AL_HF_NONE) {
        if (!data && !text_arg) {
            al_model_free(&m);
            free(tj);
            return cli_usage(cmd, "a Hugging Face checkpoint has no training data to evaluate on: give --data FILE or --text STR");
        }
        const int mc = al_config_max_context(&m.cfg);
        o.context = mc < 1024 ? mc : 1024;
        if (!cli_find(args, n, "batch")->seen) batch = 1;
    }
    const unsigned long mark = al_json_mark();
    if (tj) al_train_opts_from_json(&o, tj, &err); /* settings it cannot read: the defaults above */
    free(tj);
    if (al_json_failed_since(mark)) { /* but not for want of memory */
        al_model_free(&m);
        return cli_fail(cmd, "out of memory");
    }
    int T = context ? (int)context : o.context;
    if (T > m.cfg.max_position || T > al_config_max_context(&m.cfg)) {
        const int window = m.cfg.sliding_window, max_position = m.cfg.max_position;
        al_model_free(&m);
        if (T <= max_position)
            return cli_failf(cmd, "context %d exceeds the sliding_window %d, which attnlab does not implement", T,
                             window);
        return cli_failf(cmd, "context %d exceeds the model's max_position_embeddings %d", T, max_position);
    }
    al_kve_opts kve = {0};
    if (kv_path && (rc = cli_kve_resolve(cmd, &ef, &kvq, T, &kve))) {
        al_model_free(&m);
        return rc;
    }

    al_tokenizer *tk = cli_tokenizer(model_dir, m.cfg.vocab_size, &err);
    if (!tk) {
        al_model_free(&m);
        return cli_fail(cmd, err.msg);
    }
    al_corpus corpus = {0};
    al_token_data tokens = {0}; /* a tokenized run's data, for its validation split */
    const uint8_t *bytes = NULL;
    size_t nbytes = 0;
    const char *what;
    int failed = 0;
    if (text_arg) {
        bytes = (const uint8_t *)text_arg;
        nbytes = strlen(text_arg);
        what = "--text";
        if (nbytes < 2) failed = cli_fail(cmd, "--text is empty (needs at least 2 bytes)");
    } else if (data) {
        char *text;
        if (al_read_file(data, &text, &nbytes, &err)) {
            failed = cli_fail(cmd, err.msg);
        } else {
            corpus.bytes = (uint8_t *)text;
            corpus.n = nbytes;
            if (nbytes < 2) failed = cli_failf(cmd, "%s: data file is empty (needs at least 2 bytes)", data);
        }
        bytes = corpus.bytes;
        what = data;
    } else if (!al_tok_is_bytes(tk)) { /* the validation ids the run trained with (its cache, or encoded again) */
        if (al_token_data_load(&tokens, o.data, model_dir, model_dir, 0, o.val_fraction, 1, m.cfg.vocab_size, &err))
            failed = cli_fail(cmd, err.msg);
        what = "validation split";
    } else {
        if (al_corpus_load(&corpus, o.data, o.val_fraction, 1, &err)) failed = cli_fail(cmd, err.msg);
        bytes = corpus.bytes + corpus.n_train;
        nbytes = corpus.n - corpus.n_train;
        what = "validation split";
    }

    int *ids = NULL, n_ids = 0;
    if (!failed && tokens.ids) { /* ids of the validation split, as training evaluates them */
        n_ids = (int)(tokens.n - tokens.n_train);
        if (!(ids = malloc(sizeof(int) * (size_t)n_ids))) failed = cli_fail(cmd, "out of memory");
        else memcpy(ids, tokens.ids + tokens.n_train, sizeof(int) * (size_t)n_ids);
    } else if (!failed && al_tok_encode(tk, (const char *)bytes, nbytes, 1, &ids, &n_ids, &err)) {
        al_err_prefix(&err, "%s", what);
        failed = cli_fail(cmd, err.msg);
    }
    if (!failed && n_ids < 2)
        failed = cli_failf(cmd, "%s: the text makes %d token%s (needs at least 2)", what, n_ids, n_ids == 1 ? "" : "s");
    al_acts a;
    double loss = NAN, kv_bytes = (double)m.attn->cache_values_per_token(&m.cfg) * sizeof(float) * m.cfg.num_layers;
    const double kv_fp32 = kv_bytes;
    size_t count = 0, text_bytes = 0, act_bytes = 0;
    double t0 = al_now();
    double *layer_err = NULL, *layer_recall = NULL;
    if (!failed && kv_path) {
        const al_kv_opts kvo = {kvq, kve};
        al_eval_kv_result r;
        if (verbose && (!(layer_err = calloc((size_t)m.cfg.num_layers, sizeof(double))) ||
                        !(layer_recall = calloc((size_t)m.cfg.num_layers, sizeof(double)))))
            failed = cli_fail(cmd, "out of memory");
        else if (al_eval_decode_recall(&m, ids, (size_t)n_ids, T, (size_t)max_tokens, &kvo, layer_err, layer_recall,
                                       &r, &err))
            failed = cli_fail(cmd, err.msg);
        else
            loss = r.loss, count = r.count, kv_bytes = r.kv_bytes_per_token;
    } else if (!failed) {
        if (al_acts_create_infer(&a, &m, (int)batch, T, NULL, 0, &err)) {
            failed = cli_fail(cmd, err.msg);
        } else {
            if (al_eval_ids(&m, &a, ids, (size_t)n_ids, (size_t)max_tokens, &loss, &count, &err))
                failed = cli_fail(cmd, err.msg); /* the activations are freed all the same */
            act_bytes = a.n_floats * sizeof(float);
            al_acts_free(&a);
        }
    }
    double dt = al_now() - t0;
    /* the bytes the predictions cover: those of tokens 1..count (the first token is never predicted) */
    if (!failed && al_predicted_bytes(tk, ids, count, &text_bytes, &err)) failed = cli_fail(cmd, err.msg);
    if (!failed && logits_path) {
        /* the first window: T tokens (or the whole text if shorter) */
        int W = n_ids < T ? n_ids : T;
        if (al_acts_create_infer(&a, &m, 1, W, NULL, 0, &err)) {
            failed = cli_fail(cmd, err.msg);
        } else {
            al_model_forward(&m, &a, ids, NULL);
            int64_t shape[2] = {W, m.cfg.vocab_size};
            if (al_npy_write_f32(logits_path, a.logits, 2, shape, &err)) failed = cli_fail(cmd, err.msg);
            al_acts_free(&a);
        }
    }
    if (!failed) {
        /* total nats / ln 2 / bytes; a byte model has count == bytes and gives loss / ln 2 exactly */
        const double bpb = text_bytes ? loss / M_LN2 * ((double)count / (double)text_bytes) : NAN;
        const int byte_model = al_tok_is_bytes(tk);
        char errs[2048] = "", recs[2048] = "", evict[256] = "";
        for (int l = 0; layer_err && l < m.cfg.num_layers && strlen(errs) + 32 < sizeof errs; l++)
            snprintf(errs + strlen(errs), sizeof errs - strlen(errs), json ? "%s%.6g" : "%s%.3g", l ? (json ? "," : " ") : "",
                     layer_err[l]);
        for (int l = 0; layer_recall && l < m.cfg.num_layers && strlen(recs) + 32 < sizeof recs; l++)
            snprintf(recs + strlen(recs), sizeof recs - strlen(recs), json ? "%s%.6g" : "%s%.4f", l ? (json ? "," : " ") : "",
                     layer_recall[l]);
        if (json && kve.method != AL_KVE_NONE)
            snprintf(evict, sizeof evict,
                     ",\"kv_budget\":%g,\"kv_sinks\":%d,\"kv_prompt\":%d,\"kv_layer_budget\":\"%s\"", kve.budget,
                     kve.sinks, kve.method == AL_KVE_SNAPKV && !kve.prompt ? T / 2 : kve.prompt,
                     kve.layer_budget == AL_KVE_PYRAMID ? "pyramid" : "uniform");
        else if (kve.method != AL_KVE_NONE)
            snprintf(evict, sizeof evict, ", evicted %s at budget %g with %d sinks%s", al_kve_name(kve.method),
                     kve.budget, kve.sinks, kve.layer_budget == AL_KVE_PYRAMID ? " (pyramid)" : "");
        if (json && kv_path)
            printf("{\"model\":\"%s\",\"data\":\"%s\",\"tokenizer\":\"%s\",\"context\":%d,\"tokens\":%zu,"
                   "\"bytes\":%zu,\"loss\":%.6f,\"perplexity\":%.6g,\"bits_per_byte\":%.6f,\"seconds\":%.3f,"
                   "\"precision\":\"%s\",\"path\":\"decode\",\"kv_quant\":\"%s\",\"kv_group\":%d,"
                   "\"kv_residual\":%d,\"kv_latent\":\"%s\",\"kv_evict\":\"%s\"%s,\"kv_bytes_per_token\":%.2f,"
                   "\"kv_pct_of_fp32\":%.3f%s%s%s%s%s%s}\n",
                   model_dir, what, al_tok_kind(tk), T, count, text_bytes, loss, exp(loss), bpb, dt,
                   al_precision_name(al_precision_now()), al_kvq_name(kvq.kind), kvq.group, kvq.residual,
                   kvq.latent == AL_KVQ_LATENT_TOKEN ? "token" : "channel", al_kve_name(kve.method), evict, kv_bytes,
                   100.0 * kv_bytes / kv_fp32, layer_err ? ",\"layer_output_error\":[" : "", errs, layer_err ? "]" : "",
                   layer_recall ? ",\"layer_mass_recall\":[" : "", recs, layer_recall ? "]" : "");
        else if (json)
            printf("{\"model\":\"%s\",\"data\":\"%s\",\"tokenizer\":\"%s\",\"context\":%d,\"tokens\":%zu,"
                   "\"bytes\":%zu,\"loss\":%.6f,\"perplexity\":%.6g,\"bits_per_byte\":%.6f,\"seconds\":%.3f,"
                   "\"precision\":\"%s\",\"kv_bytes_per_token\":%.0f}\n",
                   model_dir, what, al_tok_kind(tk), T, count, text_bytes, loss, exp(loss), bpb, dt,
                   al_precision_name(al_precision_now()), kv_bytes);
        else if (kv_path)
            printf("%s: loss %.4f nats/token (perplexity %.4g), %.4f bits/byte over %zu tokens, decoded token by token "
                   "(KV cache %s%s: %.1f bytes/token = %.2f%% of fp32; context %d, %.0f tokens/s)\n",
                   model_dir, loss, exp(loss), bpb, count, al_kvq_name(kvq.kind), evict, kv_bytes,
                   100.0 * kv_bytes / kv_fp32, T, count / dt);
        else if (byte_model)
            printf("%s: loss %.4f nats/byte, %.4f bits/byte over %zu bytes (%s, context %d, %.0f bytes/s)\n", model_dir,
                   loss, bpb, count, what, T, count / dt);
        else
            printf("%s: loss %.4f nats/token (perplexity %.4g), %.4f bits/byte over %zu tokens = %zu bytes (%s, "
                   "context %d, %.0f tokens/s)\n", model_dir, loss, exp(loss), bpb, count, text_bytes, what, T,
                   count / dt);
        if (layer_err && !json)
            printf("attention output vs the full cache, per layer (mean |y - y_full| / |y_full|): %s\n", errs);
        if (layer_recall && !json && kve.method != AL_KVE_NONE)
            printf("recall of attention mass by the kept keys, per layer (mass on them / the full cache's): %s\n", recs);
        if (verbose && !json) {
            long rss, anon, file;
            al_rss_now(&rss, &anon, &file);
            printf("memory: weights %.1f MB (%s), %.1f MB used in place from the mapped files, %.1f MB copied; "
                   "activations %.1f MB; resident %.1f MB (%.1f MB file pages, %.1f MB anonymous), peak %.1f MB\n",
                   al_model_weight_bytes(&m) / 1e6,
                   m.mapped ? "memory-mapped" : m.w16 ? "BF16 copy of the fp32 arena" : "fp32 arena",
                   m.mapped_bytes / 1e6, m.copied_bytes / 1e6, act_bytes / 1e6, rss / 1e6, file / 1e6, anon / 1e6, al_peak_rss_bytes() / 1e6);
        }
    }
    free(layer_err);
    free(layer_recall);
    free(ids);
    al_tok_free(tk);
    al_corpus_free(&corpus);
    if (tokens.tok) al_token_data_free(&tokens);
    al_model_free(&m);
    if (!failed) cli_precision_note(precision, prec); /* after the work: errors stay one line */
    return failed ? 1 : 0;
}
