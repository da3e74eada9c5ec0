/*
 * args.c: the flag parser every command uses. Flags are a table (name, type,
 * destination, help) so --help output, presets and JSON config files all go
 * through the same names and the same validation.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifdef __clang_analyzer__ /* cli.h's analyzer-only wrappers; here are the functions */
#undef cli_fail
#undef cli_failf
#undef cli_usage
#endif

int cli_fail(const char *cmd, const char *msg) { return cli_failf(cmd, "%s", msg); }

/* The messages are printed as they are formatted: no buffer, so no length
 * limit (paths of any length are named whole). */
int cli_failf(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attnlab: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attnlab: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'attnlab %s --help')\n", cmd);
    va_end(ap);
    return CLI_USAGE;
}

int cli_kv_dtype(const char *cmd, const char *value, al_dtype *out) {
    if (!strcmp(value, "f32")) *out = AL_DT_F32;
    else if (!strcmp(value, "bf16")) *out = AL_DT_BF16;
    else return cli_usage(cmd, "--kv-dtype must be f32 or bf16, got '%s'", value);
    return 0;
}

int cli_precision(const char *cmd, const char *value, const char *fallback, al_precision *out) {
    const char *v = value ? value : fallback;
    if (al_precision_from_name(v, out))
        return cli_usage(cmd, "--precision must be f32, bf16 or auto, got '%s'", v);
    al_precision_set(*out);
    return 0;
}

void cli_precision_line(al_precision p) {
    if (p == AL_PREC_BF16)
        fprintf(stderr, "attnlab: precision BF16 (bf16 inputs, fp32 sums; engine: %s)\n", al_precision_engine());
    else
        fprintf(stderr, "attnlab: precision F32 (fp32 products; bf16 engine here: %s)\n", al_precision_engine());
}

void cli_precision_note(const char *given, al_precision p) {
    if (p == AL_PREC_BF16) cli_precision_line(p);
    else if (!given && al_precision_auto() == AL_PREC_BF16)
        fprintf(stderr, "attnlab: hint: --precision bf16 would be faster on this CPU (engine: %s; bf16 inputs, "
                        "fp32 sums)\n", al_precision_engine());
}

/* A switch's text: 1/true or 0/false into *out; -1 for anything else. */
static int switch_value(const char *value, int *out) {
    if (strcmp(value, "1") && strcmp(value, "true") && strcmp(value, "0") && strcmp(value, "false")) return -1;
    *out = !strcmp(value, "1") || !strcmp(value, "true");
    return 0;
}

/* An ARG_CFG flag: value parsed as its field's type into the config at a->ptr. */
static int set_field(const char *cmd, al_arg *a, const char *value) {
    const al_config_field *f = a->field;
    al_config *c = a->ptr;
    void *p = al_config_field_ptr(f, c);
    long v;
    double x;
    char names[128];
    switch (f->type) {
    case AL_CF_INT:
        if (al_parse_int(value, &v)) return cli_usage(cmd, "--%s needs an integer, got '%s'", a->name, value);
        if (v > INT_MAX || v < -INT_MAX)
            return cli_usage(cmd, "--%s is out of range (at most %d), got '%s'", a->name, INT_MAX, value);
        *(int *)p = (int)v;
        return CLI_OK;
    case AL_CF_FLOAT:
    case AL_CF_DOUBLE:
        if (al_parse_double(value, &x)) return cli_usage(cmd, "--%s needs a number, got '%s'", a->name, value);
        if (f->type == AL_CF_FLOAT) *(float *)p = (float)x;
        else *(double *)p = x;
        return CLI_OK;
    case AL_CF_BOOL:
        if (switch_value(value, (int *)p)) return cli_usage(cmd, "--%s is a switch (true/false), got '%s'", a->name, value);
        return CLI_OK;
    case AL_CF_DESIGN:
        if (al_attn_from_name(value, &c->attention))
            return cli_usage(cmd, "unknown attention '%s' (%s)", value, al_attn_names(names, sizeof names));
        return CLI_OK;
    case AL_CF_SCORE:
        if (al_score_from_name(value, &c->score))
            return cli_usage(cmd, "unknown score '%s' (softmax, poly, relu, sigmoid)", value);
        return CLI_OK;
    case AL_CF_TASK:
        if (al_task_from_name(value, &c->task)) return cli_usage(cmd, "unknown task '%s' (lm, vision)", value);
        return CLI_OK;
    case AL_CF_POLY_SCALE:
        c->poly_scale_auto = !strcmp(value, "auto");
        if (!c->poly_scale_auto && al_parse_double(value, &c->poly_scale))
            return cli_usage(cmd, "--%s must be a positive number or auto, got '%s'", a->name, value);
        return CLI_OK;
    }
    return cli_usage(cmd, "--%s: unknown kind of setting", a->name);
}

al_arg *cli_find(al_arg *args, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(args[i].name, name) == 0) return &args[i];
    return NULL;
}

int cli_set(const char *cmd, al_arg *args, int n, const char *name, const char *value, int mark_seen) {
    al_arg *a = cli_find(args, n, name);
    if (!a) return cli_usage(cmd, "unknown flag '--%s'", name);
    switch (a->type) {
    case ARG_INT: {
        /* every integer flag but the seeds is used as an int, and thread counts
         * far beyond any machine crash the OpenMP runtime: refuse, don't truncate */
        long v, lim = !strcmp(name, "threads") ? 1024 : INT_MAX;
        if (al_parse_int(value, &v)) return cli_usage(cmd, "--%s needs an integer, got '%s'", name, value);
        if (strcmp(name, "seed") && (v > lim || v < -lim))
            return cli_usage(cmd, "--%s is out of range (at most %ld), got '%s'", name, lim, value);
        *(long *)a->ptr = v;
        break;
    }
    case ARG_DOUBLE:
        if (al_parse_double(value, (double *)a->ptr))
            return cli_usage(cmd, "--%s needs a number, got '%s'", name, value);
        break;
    case ARG_STRING: *(const char **)a->ptr = value; break;
    case ARG_LIST: {
        al_strlist *l = a->ptr;
        if (l->n == AL_LIST_MAX) return cli_usage(cmd, "--%s given more than %d times", name, AL_LIST_MAX);
        l->items[l->n++] = value;
        break;
    }
    case ARG_CFG: {
        int rc = set_field(cmd, a, value);
        if (rc) return rc;
        break;
    }
    case ARG_FLAG:
        if (switch_value(value, (int *)a->ptr))
            return cli_usage(cmd, "--%s is a switch (true/false), got '%s'", name, value);
        break;
    }
    if (mark_seen) a->seen = 1;
    a->set = 1;
    return CLI_OK;
}

static void print_help(const char *cmd, const char *synopsis, const al_arg *args, int n) {
    printf("usage: attnlab %s %s\n\n%s\n", cmd, synopsis ? synopsis : "[flags]", "flags:");
    for (int i = 0; i < n; i++) {
        const al_cf_type ft = args[i].type == ARG_CFG ? args[i].field->type : AL_CF_BOOL;
        const char *t = args[i].type == ARG_CFG ? (ft == AL_CF_INT ? " N" : ft == AL_CF_FLOAT || ft == AL_CF_DOUBLE ? " X"
                                                   : ft == AL_CF_BOOL ? "" : " S")
                        : args[i].type == ARG_INT    ? " N"
                        : args[i].type == ARG_DOUBLE ? " X"
                        : args[i].type == ARG_STRING ? " S"
                        : args[i].type == ARG_LIST   ? " S..."
                                                     : "";
        char left[64]; /* flag names are short constants (a config field's at most 31 bytes) */
        snprintf(left, sizeof left, "%s%s%s", strlen(args[i].name) == 1 ? "-" : "--", args[i].name, t);
        printf("  %-22s %s\n", left, args[i].help);
    }
    printf("  %-22s %s\n", "--help", "show this help");
}

int cli_parse(const char *cmd, const char *synopsis, al_arg *args, int n, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_help(cmd, synopsis, args, n);
            return CLI_HELP;
        }
        if (a[0] != '-' || a[1] == 0) return cli_usage(cmd, "unexpected argument '%s'", a);
        const char *name = a + (a[1] == '-' ? 2 : 1);
        char buf[128];
        const char *eq = strchr(name, '=');
        const char *value = NULL;
        if (eq) {
            const size_t k = (size_t)(eq - name);
            if (k >= sizeof buf) return cli_usage(cmd, "unknown flag '%s'", a); /* no flag's name is that long */
            memcpy(buf, name, k);
            buf[k] = 0;
            name = buf;
            value = eq + 1;
        }
        al_arg *arg = cli_find(args, n, name);
        if (!arg) return cli_usage(cmd, "unknown flag '%s'", a);
        const int is_switch = arg->type == ARG_FLAG || (arg->type == ARG_CFG && arg->field->type == AL_CF_BOOL);
        if (is_switch && !value) value = "true";
        if (!value) {
            if (i + 1 >= argc) return cli_usage(cmd, "flag '--%s' needs a value", name);
            value = argv[++i];
        }
        int rc = cli_set(cmd, args, n, name, value, 1);
        if (rc) return rc;
    }
    return CLI_OK;
}
