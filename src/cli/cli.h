/*
 * cli.h: what the command files share: a table-driven flag parser and the
 * one-line error convention ("attnlab: <what failed>: <why>", exit 1; usage
 * errors exit 2).
 */
#ifndef AL_CLI_H
#define AL_CLI_H

#include "core/core.h"
#include "model/config.h"
#include "attn/kve.h"
#include "attn/kvq.h"
#include "nn/nn.h"
#include "tok/tokenizer.h"

/* ARG_CFG: a model config field (al_config_field, model/config.h) written
 * into the al_config that ptr points to, parsed as its row says. */
typedef enum { ARG_INT, ARG_DOUBLE, ARG_STRING, ARG_FLAG, ARG_LIST, ARG_CFG } al_arg_type;
struct al_config_field;

/* The destination of an ARG_LIST flag: every occurrence is appended. */
enum { AL_LIST_MAX = 32 };
typedef struct al_strlist {
    const char *items[AL_LIST_MAX];
    int n;
} al_strlist;

typedef struct al_arg {
    const char *name;   /* without the leading "--" */
    al_arg_type type;
    void *ptr;          /* long*, double*, char** (points into argv or a static), int*, al_strlist*, al_config* */
    const char *help;
    int seen;                            /* given on the command line */
    int set;                             /* given anywhere: command line, preset, --config file */
    const struct al_config_field *field; /* ARG_CFG: the field */
} al_arg;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_USAGE = 2 };

/* Parses argv[1..] ("--name value" or "--name=value"; "-n" aliases are given
 * as names like "n"). Prints help to stdout (CLI_HELP) or one usage error line
 * to stderr (CLI_USAGE). */
int cli_parse(const char *cmd, const char *synopsis, al_arg *args, int n, int argc, char **argv);
/* Sets one flag from text (used for presets and --config files). */
int cli_set(const char *cmd, al_arg *args, int n, const char *name, const char *value, int mark_seen);
al_arg *cli_find(al_arg *args, int n, const char *name);

/* Prints "attnlab: <cmd>: <msg>" to stderr and returns 1; cli_failf formats
 * the message (printf-style, any length). */
int cli_fail(const char *cmd, const char *msg);
int cli_failf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#ifdef __clang_analyzer__
/* What clang's static analyzer cannot see from another file (as core.h's
 * al_errf): the values these always return. */
#define cli_fail(...) (cli_fail(__VA_ARGS__), 1)
#define cli_failf(...) (cli_failf(__VA_ARGS__), 1)
#define cli_usage(...) (cli_usage(__VA_ARGS__), CLI_USAGE)
#endif
/* --kv-dtype: "f32" or "bf16" into *out; anything else is a usage error
 * (message printed, returns CLI_USAGE). */
int cli_kv_dtype(const char *cmd, const char *value, al_dtype *out);

/* --precision of every command that multiplies matrices (nn/nn.h's
 * al_precision): f32, bf16 or auto (al_precision_auto: bf16 where the CPU
 * has bf16 products). train, study and bench default to auto; eval,
 * generate and the analyses to f32, so their numbers stay exact unless asked.
 * cli_precision parses value (NULL: the command's default `fallback`) into
 * *out and makes it the process's mode (al_precision_set); anything else is a
 * usage error (message printed, returns CLI_USAGE). */
#define CLI_PRECISION_HELP_F32                                                                                         \
    "matrix products: f32 (default, exact), bf16 (bf16 inputs, fp32 sums) or auto (bf16 where it is faster: AMX, or "  \
    "AMD's AVX512-BF16)"
#define CLI_PRECISION_HELP_AUTO                                                                                        \
    "matrix products: auto (default: bf16 where it is faster, on AMX or AMD's AVX512-BF16, else f32), f32 or "         \
    "bf16 (bf16 inputs, fp32 sums)"
int cli_precision(const char *cmd, const char *value, const char *fallback, al_precision *out);
/* The one stderr line naming the precision a command runs in and the engine
 * of its bf16 products ("attnlab: precision BF16 (...)"). */
void cli_precision_line(al_precision p);
/* What a command with an f32 default says after its work succeeded: the
 * precision line when it runs in BF16, and when it runs in F32 by default
 * (given: the --precision value, NULL when not given) on a CPU where bf16 is
 * faster, a one-line hint; nothing otherwise (exact F32 is the quiet case). */
void cli_precision_note(const char *given, al_precision p);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_heads(int argc, char **argv);
int cmd_attnmap(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_explore(int argc, char **argv);
int cmd_study(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_kvlab(int argc, char **argv);
/* `attnlab heads` on given models (cmd_heads.c), also used by `study`; titles may be NULL. A failure is printed
 * as the command's one line and its exit code returned; with err (the study, which reports it itself), it is
 * written into err instead and 1 returned. */
int heads_write(const char *cmd, const char *const *dirs, const char *const *titles, int n_dirs, const char *layer,
                const char *out, al_err *err);

/* --weights S of the inference commands (weights.c): f32 (default) or bf16.
 * cli_weights_check refuses other values (usage error, before any loading);
 * cli_weights_apply converts a loaded attnlab model to BF16 weights
 * (al_model_weights_bf16), accepts a BF16 Hugging Face checkpoint as it is
 * and refuses other checkpoints and vision models. Both return CLI_OK, 1
 * (error printed) or CLI_USAGE; the caller still owns (and frees) m. */
#define CLI_WEIGHTS_HELP "f32 (default) or bf16: matrices as BF16 (a Hugging Face checkpoint: a BF16 one only)"
struct al_model;
int cli_weights_check(const char *cmd, const char *weights);
int cli_weights_apply(const char *cmd, const char *weights, struct al_model *m);

/* The quantised-cache flags of `eval` and `bench decode` (kv_flags.c):
 * --kv-quant none|int8|int4|int2, --kv-group N (default 32), --kv-residual R
 * (default 32), --kv-latent channel|token (MLA's c~). cli_kvq_args appends
 * their rows to args (returns 4); cli_kvq_given says whether any was given;
 * cli_kvq_resolve checks them against m's cache (unknown names, R < 0, a
 * group outside 1..256 or not dividing a value group's channels are usage
 * errors: printed, CLI_USAGE) into *out. */
typedef struct cli_kvq_flags {
    const char *quant, *latent;
    long group, residual;
} cli_kvq_flags;
enum { CLI_KVQ_ARGS = 4 };
int cli_kvq_args(cli_kvq_flags *f, al_arg *args);
int cli_kvq_given(al_arg *args, int n);
int cli_kvq_resolve(const char *cmd, const cli_kvq_flags *f, const struct al_model *m, al_kvq_opts *out);

/* The eviction flags of `eval` and `bench decode` (kv_flags.c, attn/kve.h):
 * --kv-evict none|window|h2o|snapkv, --kv-budget X (a fraction in (0, 1] or
 * a count >= 2; default 0.5), --kv-sinks N (default 4 for window and h2o,
 * 0 for snapkv), --kv-prompt N (SnapKV's prompt; default half the window),
 * --kv-layer-budget uniform|pyramid. cli_kve_args appends their rows
 * (returns CLI_KVE_ARGS); cli_kve_given: whether any was given;
 * cli_kve_resolve checks them for a window of T positions (al_kve_check's
 * rules, an unknown name) as usage errors (printed, CLI_USAGE); q (the
 * quantisation asked for, composing with eviction) is not checked here. */
typedef struct cli_kve_flags {
    const char *evict, *layer_budget;
    double budget;
    long sinks, prompt;
} cli_kve_flags;
enum { CLI_KVE_ARGS = 5 };
int cli_kve_args(cli_kve_flags *f, al_arg *args);
int cli_kve_given(al_arg *args, int n);
int cli_kve_resolve(const char *cmd, const cli_kve_flags *f, const al_kvq_opts *q, int T, al_kve_opts *out);

/* Text -> a model's tokens (text_input.c). */
/* The tokenizer of model_dir (al_tok_open_dir) checked against the model's
 * vocabulary: model_vocab ids, or 0 to read config.json's vocab_size. A
 * directory without tokenizer.json must hold a byte model (256 ids). */
al_tokenizer *cli_tokenizer(const char *model_dir, int model_vocab, al_err *err);
/* text[0..len) encoded with the tokenizer's BOS/EOS, cut to max_tokens (0:
 * all) into *T tokens (malloc'd); at least 2 tokens. */
int cli_encode(const al_tokenizer *t, const char *text, size_t len, int max_tokens, int **tokens, int *T,
               al_err *err);
/* The same for a text file (errors name it). */
int read_tokens(const al_tokenizer *t, const char *path, int max_tokens, int **tokens, int *T, al_err *err);
/* Printable labels of tokens[0..T) (al_tok_piece_label), malloc'd; NULL when
 * out of memory. Free with cli_free_labels. */
char **cli_token_labels(const al_tokenizer *t, const int *tokens, int T);
void cli_free_labels(char **labels, int T);
/* --out FILE.png -> stem FILE and figure FILE.png; a bare stem gets .png.
 * Both malloc'd (free them); -1 when out of memory. */
int stem_of(const char *out, char **stem, char **figure);
/* "0,3,7" -> out[] (at most cap entries); "all" -> 0..n_max-1. Returns the
 * count, or -1 for text that is not such a list. Range checks are the caller's. */
int cli_index_list(const char *s, int n_max, int *out, int cap);

#endif

/* ---- the model/training flags shared by `train` and `bench train` ---- */
#include "train/train.h"

typedef struct train_flags {
    const char *config, *preset, *data, *out;
    const char *precision; /* --precision as given (NULL: auto) */
    long context, batch, steps, warmup, seed, eval_every, save_every, eval_tokens, threads;
    long shards; /* the gradient's shards (0: chosen by how the run is started; train/dist.h) */
    double lr, weight_decay, val_fraction, min_lr_ratio, grad_clip;
    int resume, quiet;
    al_config model;                     /* the config fields' flags write here (ARG_CFG) */
    char names[AL_CONFIG_MAX_FIELDS][32]; /* their flag names */
} train_flags;

enum { TRAIN_MAX_ARGS = 64 };
/* Fills args[] (returns the count) pointing into f, with defaults: the
 * command's own flags, then one per config field with a flag (model/config.h's
 * table: shared fields, then every design's). Returns -1, filling nothing,
 * when they would not fit TRAIN_MAX_ARGS or a flag name train_flags.names
 * (a program error; the caller fails with TRAIN_FLAGS_TOO_MANY). */
int train_flags_table(train_flags *f, al_arg *args);
#define TRAIN_FLAGS_TOO_MANY "internal error: the model's flags do not fit the flag table (TRAIN_MAX_ARGS)"

/* Applies preset < --config file < explicit flags, derives the config
 * (al_config_resolve: head_dim = hidden/heads, kv_heads = heads, ffn ~ 8/3
 * hidden, the design's own defaults) and fills o; --precision (default auto)
 * becomes o->precision and the process's mode.
 * Returns CLI_OK, 1 (error printed) or CLI_USAGE. */
int train_flags_resolve(const char *cmd, train_flags *f, al_arg *args, int n, al_train_opts *o);
/* Joins mpirun's job when it started this process (train/dist.h); prints the
 * failure (a build without MPI, MPI not starting) and returns 1. */
int cli_dist_begin(const char *cmd);
/* Prints a failure of an MPI job's command once: rank 0 prints what every rank
 * found alike or a stopped rank (al_dist_error_kind), each rank what only it
 * found, nobody a rank's own stop past the heartbeat; returns 1. Leaves the
 * job (al_dist_finalize) when every rank failed alike, else stops the
 * heartbeat. */
int cli_dist_fail(const char *cmd, const char *msg);
/* A duration for progress lines: "42s", "3m05s", "2h10m" ("?" when unknown). */
void cli_duration(char *buf, size_t cap, double s);
