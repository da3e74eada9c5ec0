/*
 * cmd_explore.c: `attnlab explore`: one self-contained HTML page to browse the
 * attention of every layer and head of a model over a text (docs/explore.md):
 * layer and head selectors, the weights as a heatmap with a log/linear
 * toggle and hover read-out, each head's statistics, and the layer's
 * head-similarity matrix, whose cells select heads.
 *
 *   attnlab explore --model DIR --text FILE --out FILE.html [--max-tokens N]
 *
 * One forward pass keeps O(T) activations per layer; heads are computed one
 * at a time (T x T each) and streamed into the page, which is written
 * atomically (src/analysis/explore_html.c). The page embeds every weight as
 * exact float32, so its size grows as L H T^2 / 2: the input is capped by
 * --max-tokens (default 256, at most 1024), and a page that would exceed
 * 256 MB is refused before any work, naming the --max-tokens that fits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "analysis/attnmap.h"
#include "analysis/explore_html.h"
#include "analysis/heads.h"
#include "cli.h"
#include "io/io.h"

enum { EXPLORE_MAX_TOKENS = 1024 };
/* Largest page written: browsers hold the weights as one string, and V8 caps
 * strings near 512 MB; pages far below that already load slowly. */
static const double EXPLORE_MAX_BYTES = 256e6;

/* 1 when the name ends in .html or .htm (any case). */
static int is_html_name(const char *s) {
    size_t n = strlen(s);
    const char *slash = strrchr(s, '/');
    const char *base = slash ? slash + 1 : s;
    return (n > 5 && strlen(base) > 5 && !strcasecmp(s + n - 5, ".html")) ||
           (n > 4 && strlen(base) > 4 && !strcasecmp(s + n - 4, ".htm"));
}

/* "12.3 MB", "456 kB" or "789 bytes" for the closing message. */
static void human_size(double bytes, char *buf, size_t cap) {
    if (bytes >= 1e6)
        snprintf(buf, cap, "%.1f MB", bytes / 1e6);
    else if (bytes >= 1e3)
        snprintf(buf, cap, "%.0f kB", bytes / 1e3);
    else
        snprintf(buf, cap, "%.0f bytes", bytes);
}

int cmd_explore(int argc, char **argv) {
    const char *cmd = "explore";
    const char *model_dir = NULL, *text = NULL, *out = NULL, *precision = NULL;
    al_precision prec;
    long max_tokens = 256, topk = 10, threads = 0;
    al_arg args[] = {
        {"model", ARG_STRING, &model_dir, "model directory"},
        {"text", ARG_STRING, &text, "input text file (encoded by the model's tokenizer; a byte model's tokens are bytes)"},
        {"out", ARG_STRING, &out, "the page to write, FILE.html"},
        {"max-tokens", ARG_INT, &max_tokens, "use at most the first N tokens of the text (2..1024; default 256)"},
        {"topk", ARG_INT, &topk, "k of the top-k mass statistic"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_F32},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "--model DIR --text FILE --out FILE.html [--max-tokens N]", args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir || !text || !out) return cli_usage(cmd, "--model, --text and --out are required");
    if (!is_html_name(out)) return cli_usage(cmd, "--out must name an .html file, got '%s'", out);
    if (max_tokens < 2 || max_tokens > EXPLORE_MAX_TOKENS)
        return cli_usage(cmd, "--max-tokens must be between 2 and %d (the page holds every weight)",
                         EXPLORE_MAX_TOKENS);
    if (topk < 1) return cli_usage(cmd, "--topk must be positive");
    if ((rc = cli_precision(cmd, precision, "f32", &prec))) return rc;
    if (threads > 0) al_set_threads((int)threads);

    al_err err;
    al_config cfg;
    if (al_config_load_dir(&cfg, model_dir, NULL, &err)) return cli_fail(cmd, err.msg);
    if (cfg.task != AL_TASK_LM)
        return cli_failf(cmd, "%s is a %s model; explore reads text, so it needs a language model", model_dir,
                         al_task_name(cfg.task));
    int T, trained, *tok = NULL;
    char **labels = NULL;
    al_tokenizer *tk = cli_tokenizer(model_dir, cfg.vocab_size, &err);
    if (!tk || read_tokens(tk, text, (int)max_tokens, &tok, &T, &err)) {
        al_tok_free(tk);
        return cli_fail(cmd, err.msg);
    }
    /* a tokenizer.json's tokens are labelled by their pieces; a byte model's page shows its bytes as before */
    if (!al_tok_is_bytes(tk) && !(labels = cli_token_labels(tk, tok, T))) {
        al_tok_free(tk);
        free(tok);
        return cli_fail(cmd, "out of memory");
    }
    al_tok_free(tk);
    {
        const int nh = cfg.num_layers * cfg.num_heads, bidir = cfg.bidirectional;
        double bytes = (double)nh * (double)al_explore_bytes_per_head(T, !bidir);
        if (bytes > EXPLORE_MAX_BYTES) {
            int fit = T;
            while (fit > 2 && (double)nh * (double)al_explore_bytes_per_head(fit, !bidir) > EXPLORE_MAX_BYTES) fit--;
            char size[32];
            human_size(bytes, size, sizeof size);
            free(tok);
            cli_free_labels(labels, T);
            return cli_failf(cmd, "%d layers x %d heads over %d tokens make a %s page, more than a browser loads; "
                             "use --max-tokens %d or less", cfg.num_layers, cfg.num_heads, T, size, fit);
        }
    }
    al_model m;
    al_acts a;
    if (al_attnmap_prepare(model_dir, tok, T, &m, &a, &trained, &err)) {
        free(tok);
        cli_free_labels(labels, T);
        return cli_fail(cmd, err.msg);
    }
    const int L = m.cfg.num_layers, H = m.cfg.num_heads, causal = !m.cfg.bidirectional;
    int failed = 0;
    al_head_sim sim = {0};
    al_explore_writer w = {0};
    float *P = malloc(sizeof(float) * (size_t)T * T);
    al_head_stats *st = calloc((size_t)L * H, sizeof *st);
    if (!P || !st) {
        failed = cli_fail(cmd, "out of memory for the attention maps");
        goto done;
    }
    if (al_head_sim_compute(&m, &sim, &err)) {
        failed = cli_failf(cmd, "%s: %s", model_dir, err.msg);
        goto done;
    }
    if (al_explore_open(&w, out, T, causal, &err)) {
        failed = cli_fail(cmd, err.msg);
        goto done;
    }
    for (int l = 0; l < L && !failed; l++)
        for (int h = 0; h < H && !failed; h++) {
            if (al_attnmap_weights(&m, &a, l, h, P, &err) || al_explore_add_head(&w, P, &err) ||
                al_head_stats_of(P, T, (int)topk, !causal, &st[l * H + h], &err)) {
                failed = cli_fail(cmd, err.msg);
                break;
            }
        }
    if (!failed) {
        char title[4400], score_title[128];
        const char *base = strrchr(model_dir, '/');
        base = base && base[1] ? base + 1 : model_dir;
        al_strfmt(title, sizeof title, "%s: %s attention, %s scores, %d tokens", base, al_attn_name(m.cfg.attention),
                  al_score_name(m.cfg.score), T);
        al_score_title(&m.cfg, score_title, sizeof score_title);
        al_explore_info info = {
            .title = title, .model = model_dir, .text = text, .attention = al_attn_name(m.cfg.attention),
            .score = al_score_name(m.cfg.score), .score_title = score_title, .layers = L, .heads = H, .tokens = T,
            .trained_context = trained, .causal = causal, .token_bytes = tok, .token_labels = (const char *const *)labels,
            .stats = st, .sim = &sim,
        };
        if (al_explore_finish(&w, &info, &err)) {
            failed = cli_fail(cmd, err.msg);
        } else {
            char size[32];
            human_size((double)L * H * (double)al_explore_bytes_per_head(T, causal), size, sizeof size);
            printf("%d tokens of %s%s\n", T, text,
                   T > trained ? " (longer than the context the model was trained at)" : "");
            printf("wrote %s: %d layers x %d heads, weights as float32 (%s of base64)\n", out, L, H, size);
        }
    }
done:
    al_explore_abort(&w);
    al_head_sim_free(&sim);
    free(st);
    free(P);
    free(tok);
    cli_free_labels(labels, T);
    al_acts_free(&a);
    al_model_free(&m);
    if (!failed) cli_precision_note(precision, prec); /* after the work: errors stay one line */
    return failed ? 1 : 0;
}
