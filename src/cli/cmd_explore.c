/*
 * cmd_explore.c: `attnlab explore`: one self-contained HTML page to browse the
 * attention of every layer and head of a model over a text (docs/explore.md):
 * layer and head selectors, the weights as a heatmap with a log/linear
 * toggle and hover read-out, each head's statistics, and the layer's
 * head-similarity matrix, whose cells select heads.
 *
 *   attnlab explore --model DIR --text FILE --out FILE.html [--max-tokens N]
 *
 *   attnlab explore --model DIR --text FILE --out FILE.html --layer L,.. --head H,..
 *   attnlab explore --model DIR --text FILE --serve [--port N]
 *
 * One forward pass keeps O(T) activations per layer; heads are computed one
 * at a time (T x T each) and streamed into the page, which is written
 * atomically (src/analysis/explore_html.c). Without --layer/--head the page
 * embeds every weight as exact float32, so its size grows as L H T^2 / 2,
 * and a page over 256 MB is refused before any work, naming the
 * --max-tokens that fits. With them, only the named heads are exact and
 * every head is a display map of one byte a cell (src/analysis/
 * explore_maps.h), reduced by a whole factor until the page fits in 150 MB.
 * With --serve nothing is written: a server on 127.0.0.1
 * (src/io/http_server.h, src/analysis/explore_serve.h) recomputes heads on
 * request from the forward's queries and keys until Ctrl-C.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "analysis/attnmap.h"
#include "analysis/explore_html.h"
#include "analysis/explore_maps.h"
#include "analysis/explore_serve.h"
#include "analysis/heads.h"
#include "cli.h"
#include "io/io.h"

/* Longest inputs: a page (quantised maps make long ones fit), the server
 * (one T x T head in memory at a time). */
enum { EXPLORE_MAX_TOKENS = 4096, EXPLORE_SERVE_MAX_TOKENS = 8192 };
/* The display maps: the server's at most 2048 cells a side, thumbnails 64. */
enum { SERVE_MAX_SIDE = 2048, THUMB_SIDE = 64 };
/* A page with quantised maps is made to fit in this many bytes. */
static const double EXPLORE_QUANT_TARGET = 150e6;
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

/* Set by SIGINT/SIGTERM: the server stops at its next poll. */
static volatile sig_atomic_t stop_serving;
static void on_stop_signal(int sig) {
    (void)sig;
    stop_serving = 1;
}

/* Resident memory of this process in MB (Linux /proc), -1 if unknown. */
static double resident_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages, rss;
    int ok = f && fscanf(f, "%ld %ld", &pages, &rss) == 2;
    if (f) fclose(f);
    return ok ? (double)rss * 4096.0 / 1e6 : -1;
}

/* Seconds on the monotonic clock. */
static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The smallest display factor that brings n_quant quantised maps plus
 * exact_bytes of exact heads under the target; 0 if even one cell a head
 * does not fit. */
static int quant_factor(int T, int causal, long n_quant, double exact_bytes) {
    for (int f = 1; f <= T; f++)
        if (exact_bytes + (double)n_quant * (double)(al_explore_map_line_cap(T, f, causal) + 1) + 1e6 <=
            EXPLORE_QUANT_TARGET)
            return f;
    return 0;
}

/* `explore --serve`: the page and the heads over HTTP until Ctrl-C, on the
 * server opened before the forward (the caller closes it). */
static int serve(const char *cmd, const al_model *m, const al_acts *a, al_explore_info *info, int topk,
                 al_http_server *hs_open, double forward_s) {
    al_err err;
    const int T = a->T;
    const int f = (T + SERVE_MAX_SIDE - 1) / SERVE_MAX_SIDE, ft = (T + THUMB_SIDE - 1) / THUMB_SIDE;
    info->serve = 1;
    info->display_factor = f;
    info->thumb_factor = ft;
    size_t page_len;
    char *page = al_explore_page_text(info, &page_len);
    al_explore_server es;
    al_http_server *hs = hs_open;
    if (!page) return cli_fail(cmd, "out of memory for the page");
    if (al_explore_server_init(&es, m, a, topk, f, ft, page, page_len, &err)) return cli_fail(cmd, err.msg);
    hs->ctx = &es;
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    printf("forward over %d tokens: %.2f s; server holds %.0f MB\n", T, forward_s, resident_mb());
    printf("serving %d layers x %d heads on http://%s/?token=%s (Ctrl-C stops)\n", info->layers, info->heads, hs->host,
           hs->token);
    fflush(stdout);
    int rc = al_http_serve(hs, &stop_serving, &err);
    printf("stopped: %ld requests answered, %ld refused; first map %.1f ms, last map %.1f ms, last layer %.1f ms; "
           "%.0f MB resident\n",
           hs->served, hs->refused, 1e3 * es.first_map_s, 1e3 * es.last_map_s, 1e3 * es.last_layer_s, resident_mb());
    al_explore_server_free(&es);
    return rc ? cli_fail(cmd, err.msg) : 0;
}

int cmd_explore(int argc, char **argv) {
    const char *cmd = "explore";
    const char *model_dir = NULL, *text = NULL, *out = NULL, *precision = NULL, *layers_s = NULL, *heads_s = NULL;
    al_precision prec;
    long max_tokens = 256, topk = 10, threads = 0, port = 0;
    int serve_flag = 0; /* a switch: ARG_FLAG writes an int */
    al_arg args[] = {
        {"model", ARG_STRING, &model_dir, "model directory"},
        {"text", ARG_STRING, &text, "input text file (encoded by the model's tokenizer; a byte model's tokens are bytes)"},
        {"out", ARG_STRING, &out, "the page to write, FILE.html"},
        {"max-tokens", ARG_INT, &max_tokens, "use at most the first N tokens of the text (2..4096, --serve 8192; default 256)"},
        {"topk", ARG_INT, &topk, "k of the top-k mass statistic"},
        {"threads", ARG_INT, &threads, "worker threads (default: all cores)"},
        {"precision", ARG_STRING, &precision, CLI_PRECISION_HELP_F32},
        {"layer", ARG_STRING, &layers_s, "page: layers whose heads keep exact weights (N,M,.., all or none); "
                                         "every head gets a 1-byte display map"},
        {"head", ARG_STRING, &heads_s, "page: heads of those layers kept exact (N,M,.. or all; default all)"},
        {"serve", ARG_FLAG, &serve_flag, "serve the explorer on 127.0.0.1 instead of writing a page (Ctrl-C stops)"},
        {"port", ARG_INT, &port, "--serve: the port (default: a free one, printed)"},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    int rc = cli_parse(cmd, "--model DIR --text FILE (--out FILE.html [--layer L,.. --head H,..] | --serve [--port N])",
                       args, n, argc, argv);
    if (rc == CLI_HELP) return 0;
    if (rc) return rc;
    if (!model_dir || !text || (!out && !serve_flag))
        return cli_usage(cmd, "--model, --text and --out (or --serve) are required");
    if (serve_flag && (out || layers_s || heads_s))
        return cli_usage(cmd, "--serve writes no page: --out, --layer and --head do not apply");
    if (!serve_flag && port) return cli_usage(cmd, "--port needs --serve");
    if (port < 0 || port > 65535) return cli_usage(cmd, "--port must be between 0 and 65535");
    if (out && !is_html_name(out)) return cli_usage(cmd, "--out must name an .html file, got '%s'", out);
    const int max_t = serve_flag ? EXPLORE_SERVE_MAX_TOKENS : EXPLORE_MAX_TOKENS;
    if (max_tokens < 2 || max_tokens > max_t)
        return cli_usage(cmd, "--max-tokens must be between 2 and %d", max_t);
    if (topk < 1) return cli_usage(cmd, "--topk must be positive");
    if ((rc = cli_precision(cmd, precision, "f32", &prec))) return rc;
    if (threads > 0) al_set_threads((int)threads);

    al_err err;
    al_config cfg;
    if (al_config_load_dir(&cfg, model_dir, NULL, &err)) return cli_fail(cmd, err.msg);
    if (cfg.task != AL_TASK_LM)
        return cli_failf(cmd, "%s is a %s model; explore reads text, so it needs a language model", model_dir,
                         al_task_name(cfg.task));
    /* which heads keep exact weights in the page: all unless --layer/--head name some */
    const int quantised = !serve_flag && (layers_s || heads_s);
    char *exact = calloc((size_t)cfg.num_layers * cfg.num_heads, 1);
    int n_exact = 0;
    if (!exact) return cli_fail(cmd, "out of memory");
    if (quantised) {
        int *ls = malloc(sizeof(int) * 4096), *hs = malloc(sizeof(int) * 4096);
        int nl = !ls || !hs ? -2 : layers_s && !strcmp(layers_s, "none") ? 0 : cli_index_list(layers_s ? layers_s : "all", cfg.num_layers, ls, 4096);
        int nh = nl < -1 ? -2 : cli_index_list(heads_s ? heads_s : "all", cfg.num_heads, hs, 4096);
        for (int i = 0; i < nl && nh > 0; i++)
            for (int j = 0; j < nh; j++)
                if (ls[i] < cfg.num_layers && hs[j] < cfg.num_heads && !exact[ls[i] * cfg.num_heads + hs[j]]) {
                    exact[ls[i] * cfg.num_heads + hs[j]] = 1;
                    n_exact++;
                }
        int bad = nl < 0 || nh < 0, range = 0;
        for (int i = 0; !bad && i < nl; i++) range |= ls[i] >= cfg.num_layers;
        for (int j = 0; !bad && j < nh; j++) range |= hs[j] >= cfg.num_heads;
        free(ls);
        free(hs);
        if (nl == -2 || nh == -2) {
            free(exact);
            return cli_fail(cmd, "out of memory");
        }
        if (bad || range) {
            free(exact);
            return cli_usage(cmd, "--layer takes N,M,.., all or none (0..%d) and --head N,M,.. or all (0..%d)",
                             cfg.num_layers - 1, cfg.num_heads - 1);
        }
    } else {
        memset(exact, 1, (size_t)cfg.num_layers * cfg.num_heads);
        n_exact = cfg.num_layers * cfg.num_heads;
    }
    int T, trained, *tok = NULL;
    char **labels = NULL;
    al_tokenizer *tk = cli_tokenizer(model_dir, cfg.vocab_size, &err);
    if (!tk || read_tokens(tk, text, (int)max_tokens, &tok, &T, &err)) {
        al_tok_free(tk);
        free(exact);
        return cli_fail(cmd, err.msg);
    }
    /* a tokenizer.json's tokens are labelled by their pieces; a byte model's page shows its bytes as before */
    if (!al_tok_is_bytes(tk) && !(labels = cli_token_labels(tk, tok, T))) {
        al_tok_free(tk);
        free(tok);
        free(exact);
        return cli_fail(cmd, "out of memory");
    }
    al_tok_free(tk);
    const int nh_all = cfg.num_layers * cfg.num_heads, bidir = cfg.bidirectional;
    int qf = 0;
    if (!serve_flag) {
        double exact_bytes = (double)n_exact * (double)al_explore_bytes_per_head(T, !bidir);
        if (!quantised && exact_bytes > EXPLORE_MAX_BYTES) {
            int fit = T;
            while (fit > 2 && (double)nh_all * (double)al_explore_bytes_per_head(fit, !bidir) > EXPLORE_MAX_BYTES) fit--;
            char size[32];
            human_size(exact_bytes, size, sizeof size);
            free(tok);
            free(exact);
            cli_free_labels(labels, T);
            return cli_failf(cmd, "%d layers x %d heads over %d tokens make a %s page, more than a browser loads; "
                             "use --max-tokens %d or less, or --layer/--head to keep only those heads exact "
                             "(every head then gets a 1-byte display map)", cfg.num_layers, cfg.num_heads, T, size, fit);
        }
        if (quantised && !(qf = quant_factor(T, !bidir, nh_all, exact_bytes))) {
            char size[32];
            human_size(exact_bytes, size, sizeof size);
            free(tok);
            free(exact);
            cli_free_labels(labels, T);
            return cli_failf(cmd, "the %d exact heads named by --layer/--head take %s, more than a browser loads; "
                             "name fewer", n_exact, size);
        }
    }
    /* the port first: a port in use fails now, not after a long forward */
    al_http_server hs = {.fd = -1};
    if (serve_flag && al_http_open(&hs, (int)port, al_explore_server_handle, NULL, &err)) {
        free(tok);
        free(exact);
        cli_free_labels(labels, T);
        return cli_fail(cmd, err.msg);
    }
    al_model m;
    al_acts a;
    double t0 = mono_s();
    if (al_attnmap_prepare(model_dir, tok, T, &m, &a, &trained, &err)) {
        al_http_close(&hs);
        free(tok);
        free(exact);
        cli_free_labels(labels, T);
        return cli_fail(cmd, err.msg);
    }
    const double forward_s = mono_s() - t0;
    const int L = m.cfg.num_layers, H = m.cfg.num_heads, causal = !m.cfg.bidirectional;
    int failed = 0;
    al_head_sim sim = {0};
    al_explore_writer w = {0};
    float *P = serve_flag ? NULL : malloc(sizeof(float) * (size_t)T * T);
    al_head_stats *st = serve_flag ? NULL : calloc((size_t)L * H, sizeof *st);
    if (!serve_flag && (!P || !st)) {
        failed = cli_fail(cmd, "out of memory for the attention maps");
        goto done;
    }
    if (al_head_sim_compute(&m, &sim, &err)) {
        failed = cli_failf(cmd, "%s: %s", model_dir, err.msg);
        goto done;
    }
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
        .stats = st, .sim = &sim, .display_factor = qf, .topk = (int)topk,
    };
    if (serve_flag) {
        printf("%d tokens of %s%s\n", T, text, T > trained ? " (longer than the context the model was trained at)" : "");
        failed = serve(cmd, &m, &a, &info, (int)topk, &hs, forward_s);
        goto done;
    }
    if (al_explore_open(&w, out, T, causal, &err)) {
        failed = cli_fail(cmd, err.msg);
        goto done;
    }
    for (int l = 0; l < L && !failed; l++)
        for (int h = 0; h < H && !failed; h++) {
            if (al_attnmap_weights(&m, &a, l, h, P, &err) ||
                (exact[l * H + h] ? al_explore_add_head(&w, P, &err) : al_explore_add_head_quantised(&w, P, qf, &err)) ||
                al_head_stats_of(P, T, (int)topk, !causal, &st[l * H + h], &err)) {
                failed = cli_fail(cmd, err.msg);
                break;
            }
        }
    if (!failed) {
        if (al_explore_finish(&w, &info, &err)) {
            failed = cli_fail(cmd, err.msg);
        } else {
            char size[32];
            double bytes = (double)n_exact * (double)al_explore_bytes_per_head(T, causal) +
                           (double)(L * H - n_exact) * (double)(qf ? al_explore_map_line_cap(T, qf, causal) : 0);
            human_size(bytes, size, sizeof size);
            printf("%d tokens of %s%s\n", T, text,
                   T > trained ? " (longer than the context the model was trained at)" : "");
            if (n_exact == L * H)
                printf("wrote %s: %d layers x %d heads, weights as float32 (%s of base64)\n", out, L, H, size);
            else
                printf("wrote %s: %d layers x %d heads, %d exact (float32), the others as %d x %d display maps of "
                       "1 byte a cell (%s of base64)\n", out, L, H, n_exact, al_explore_display_side(T, qf),
                       al_explore_display_side(T, qf), size);
        }
    }
done:
    al_http_close(&hs);
    al_explore_abort(&w);
    al_head_sim_free(&sim);
    free(st);
    free(P);
    free(tok);
    free(exact);
    cli_free_labels(labels, T);
    al_acts_free(&a);
    al_model_free(&m);
    if (!failed) cli_precision_note(precision, prec); /* after the work: errors stay one line */
    return failed ? 1 : 0;
}
