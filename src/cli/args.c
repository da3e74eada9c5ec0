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

int cli_fail(const char *cmd, const char *msg) {
    fprintf(stderr, "attnlab: %s: %s\n", cmd, msg);
    return 1;
}

int cli_usage(const char *cmd, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "attnlab: %s: %s (see 'attnlab %s --help')\n", cmd, buf, cmd);
    return CLI_USAGE;
}

int cli_kv_dtype(const char *cmd, const char *value, al_dtype *out) {
    if (!strcmp(value, "f32")) *out = AL_DT_F32;
    else if (!strcmp(value, "bf16")) *out = AL_DT_BF16;
    else return cli_usage(cmd, "--kv-dtype must be f32 or bf16, got '%s'", value);
    return 0;
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
    case ARG_FLAG:
        if (strcmp(value, "1") && strcmp(value, "true") && strcmp(value, "0") && strcmp(value, "false"))
            return cli_usage(cmd, "--%s is a switch (true/false), got '%s'", name, value);
        *(int *)a->ptr = !strcmp(value, "1") || !strcmp(value, "true");
        break;
    }
    if (mark_seen) a->seen = 1;
    return CLI_OK;
}

static void print_help(const char *cmd, const char *synopsis, const al_arg *args, int n) {
    printf("usage: attnlab %s %s\n\n%s\n", cmd, synopsis ? synopsis : "[flags]", "flags:");
    for (int i = 0; i < n; i++) {
        const char *t = args[i].type == ARG_INT      ? " N"
                        : args[i].type == ARG_DOUBLE ? " X"
                        : args[i].type == ARG_STRING ? " S"
                        : args[i].type == ARG_LIST   ? " S..."
                                                     : "";
        char left[64];
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
            snprintf(buf, sizeof buf, "%.*s", (int)(eq - name), name);
            name = buf;
            value = eq + 1;
        }
        al_arg *arg = cli_find(args, n, name);
        if (!arg) return cli_usage(cmd, "unknown flag '%s'", a);
        if (arg->type == ARG_FLAG && !value) {
            *(int *)arg->ptr = 1;
            arg->seen = 1;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) return cli_usage(cmd, "flag '--%s' needs a value", name);
            value = argv[++i];
        }
        int rc = cli_set(cmd, args, n, name, value, 1);
        if (rc) return rc;
    }
    return CLI_OK;
}
