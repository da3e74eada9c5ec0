/*
 * cmd_tokenize.c: `attnlab tokenize`: a model directory's tokenizer on its
 * own (src/tok; docs/tokenizers.md), to see how a text becomes tokens and
 * back:
 *
 *   attnlab tokenize --model DIR --text "Hello world"     # one line per token: id, tab, piece
 *   attnlab tokenize --model DIR --file page.txt --ids-only
 *   attnlab tokenize --model DIR --decode 9906,1917       # the text of ids
 *
 * Pieces are printed escaped (al_tok_piece_label): "\n", "\t", "\xNN" for
 * control and partial-character bytes. --decode writes the decoded text and
 * a newline.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io/io.h"

/* "12,7 9" -> ids (commas and/or whitespace between ids). Returns the count,
 * or -1 if something is not a non-negative integer. */
static int parse_ids(const char *s, int **out) {
    size_t cap = 16, n = 0;
    int *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > 0x7FFFFFFF || (*end && *end != ',' && *end != ' ' && *end != '\t' &&
                                                             *end != '\n')) {
            free(v);
            return -1;
        }
        if (n == cap) {
            int *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv, cap *= 2;
        }
        v[n++] = (int)x;
        p = end;
    }
    *out = v;
    return (int)n;
}

/* A label as a JSON string body (labels are UTF-8; escape quotes, backslashes
 * were already doubled by the label). */
static void json_label(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') fputs("\\\"", stdout);
        else if (*s == '\\') fputs("\\\\", stdout);
        else putchar(*s);
    }
    putchar('"');
}

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize";
    const char *model_dir = NULL, *text = NULL, *file = NULL, *decode = NULL;
    int ids_only = 0, no_special = 0, json = 0;
    al_arg args[] = {
        {"model", ARG_STRING, &model_dir, "model directory (tokenizer.json; without one, the byte tokenizer)"},
        {"text", ARG_STRING, &text, "text to encode"},
        {"file", ARG_STRING, &file, "file whose text to encode"},
        {"decode", ARG_STRING, &decode, "decode these ids instead (ID,ID,...)"},
        {"ids-only", ARG_FLAG, &ids_only, "print only the ids, on one line separated by spaces"},
        {"json", ARG_FLAG, &json, "print {\"ids\": [...], \"pieces\": [...]} (pieces escaped as in the listing)"},
        {"no-special", ARG_FLAG, &no_special, "encoding: no BOS/EOS added; decoding: special tokens dropped"},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "--model DIR (--text STR | --file F | --decode ID,ID,...) [--ids-only | --json] "
                       "[--no-special]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir) return cli_usage(cmd, "--model DIR is required");
    if ((text != NULL) + (file != NULL) + (decode != NULL) != 1)
        return cli_usage(cmd, "give exactly one of --text STR, --file F or --decode ID,ID,...");
    if (ids_only && json) return cli_usage(cmd, "--ids-only and --json exclude each other");
    if (decode && (ids_only || json)) return cli_usage(cmd, "--ids-only and --json apply to encoding, not --decode");
    int *ids = NULL, count = 0;
    if (decode && (count = parse_ids(decode, &ids)) < 0)
        return cli_usage(cmd, "--decode takes non-negative integer ids separated by commas, got '%s'", decode);

    al_err err;
    al_tokenizer *t = cli_tokenizer(model_dir, 0, &err);
    if (!t) {
        free(ids);
        return cli_fail(cmd, err.msg);
    }
    int failed = 0;
    if (decode) {
        char *out;
        size_t len;
        if (al_tok_decode(t, ids, count, no_special, &out, &len, &err)) {
            failed = cli_fail(cmd, err.msg);
        } else {
            fwrite(out, 1, len, stdout);
            putchar('\n');
            free(out);
        }
    } else {
        char *buf = NULL;
        size_t len = text ? strlen(text) : 0;
        if (file && al_read_file(file, &buf, &len, &err)) {
            failed = cli_fail(cmd, err.msg);
        } else if (al_tok_encode(t, text ? text : buf, len, !no_special, &ids, &count, &err)) {
            if (file) al_err_prefix(&err, "%s", file);
            failed = cli_fail(cmd, err.msg);
        } else if (ids_only) {
            for (int i = 0; i < count; i++) printf("%s%d", i ? " " : "", ids[i]);
            putchar('\n');
        } else {
            char label[1024];
            if (json) printf("{\"tokenizer\":\"%s\",\"ids\":[", al_tok_kind(t));
            for (int i = 0; json && i < count; i++) printf("%s%d", i ? "," : "", ids[i]);
            if (json) printf("],\"pieces\":[");
            for (int i = 0; i < count; i++) {
                al_tok_piece_label(t, ids[i], label, sizeof label);
                if (json) {
                    if (i) putchar(',');
                    json_label(label);
                } else {
                    printf("%d\t%s\n", ids[i], label);
                }
            }
            if (json) printf("]}\n");
        }
        free(buf);
    }
    free(ids);
    al_tok_free(t);
    if (!failed && (fflush(stdout) || ferror(stdout))) failed = cli_fail(cmd, "cannot write to standard output");
    return failed ? 1 : 0;
}
