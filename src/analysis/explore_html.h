/*
 * explore_html.h: the interactive attention explorer (`attnlab explore`) as
 * one self-contained HTML file: page, styles, script and data in a single
 * document that needs no network and works opened from disk.
 *
 * What the file holds (docs/explore.md):
 *   - the weights of every (layer, head) of one input, exact float32 (the
 *     values attnlab attnmap writes to its NPY), little-endian, base64, one
 *     text line per head in layer-major order; for causal models only the
 *     lower triangle (row q holds keys 0..q, so a head is T (T + 1) / 2
 *     values), for bidirectional ones the full T x T rows;
 *   - a JSON object: the model facts, the input bytes, the per-head
 *     statistics (al_head_stats), the per-layer head-similarity matrices and
 *     their metrics (al_head_sim), and the viridis and RdYlBu_r lookup tables
 *     taken from src/plot/colormap.h so the page shows the figures' colours.
 *
 * The writer streams: the caller computes one head at a time and hands it
 * over, so memory stays at one T x T matrix however many heads there are.
 * The file is written atomically (src/io/io.h al_afile).
 */
#ifndef AL_EXPLORE_HTML_H
#define AL_EXPLORE_HTML_H

#include "../io/io.h"
#include "attnmap.h"
#include "heads.h"

/* Everything the page shows besides the weights. Strings are copied into the
 * page (escaped); arrays must stay valid until al_explore_finish. */
typedef struct al_explore_info {
    const char *title;           /* page heading, e.g. "run1: mha attention, softmax scores, 256 tokens" */
    const char *model, *text;    /* the paths as given on the command line */
    const char *attention;       /* design name (al_attn_name) */
    const char *score;           /* score function name (al_score_name) */
    const char *score_title;     /* "Attention with softmax" (al_score_title) */
    int layers, heads, tokens;   /* L, H, T */
    int trained_context;         /* the context the model was trained at */
    int causal;                  /* 1: keys after the query are masked */
    const int *token_bytes;      /* [T]: the input's token ids (bytes for a byte model) */
    const char *const *token_labels; /* [T]: printable pieces of a tokenizer.json's tokens (al_tok_piece_label),
                                      * written as "token_ids" + "pieces"; NULL for a byte model ("bytes") */
    const al_head_stats *stats;  /* [L * H], layer-major */
    const al_head_sim *sim;      /* per-layer similarity matrices and metrics */
    int display_factor;          /* f of the quantised maps (explore_maps.h); 0: every head exact */
    int serve;                   /* 1: the page of `explore --serve`: no weights, no stats (stats may be NULL);
                                  * the script fetches them from the server */
    int thumb_factor;            /* serve: f of the head grid's thumbnails */
    int topk;                    /* k of the top-k statistic when stats is NULL (serve) */
} al_explore_info;

/* A page being written. */
typedef struct al_explore_writer {
    al_afile f;
    int T, causal;
    int heads_written;
    size_t values_per_head;      /* T (T + 1) / 2 when causal, else T * T */
    unsigned char *raw;          /* [values_per_head * 4]: one packed head */
    char *b64;                   /* its base64 text plus a newline */
    size_t b64_len;              /* characters of one head's line, newline included */
    int open;
    int qf;                      /* factor of the quantised heads, once one was added */
    unsigned char *codes;        /* [al_explore_map_cells]: one quantised head */
    float *rowbuf;               /* [D]: its pooling row */
    char *qline;                 /* its text line */
} al_explore_writer;

/* Starts the page at `path` (a temporary file until al_explore_finish) for
 * inputs of T tokens. Returns 0 or -1 (message in err). */
int al_explore_open(al_explore_writer *w, const char *path, int T, int causal, al_err *err);

/* Appends the weights P[T, T] (rows are queries) of the next head, in order
 * layer 0 head 0, layer 0 head 1, ... Masked entries are not stored. */
int al_explore_add_head(al_explore_writer *w, const float *P, al_err *err);

/* Appends the next head as a display map at factor f, quantised to one byte
 * a cell (explore_maps.h); every quantised head of a page has the same f. */
int al_explore_add_head_quantised(al_explore_writer *w, const float *P, int f, al_err *err);

/* Writes the data object and the script, checks that exactly L * H heads were
 * added, and renames the file into place. On failure nothing is left behind. */
int al_explore_finish(al_explore_writer *w, const al_explore_info *info, al_err *err);

/* Drops an unfinished page (removes the temporary file); safe to call after
 * al_explore_finish or a failed open. */
void al_explore_abort(al_explore_writer *w);

/* Characters of one head's base64 line (newline included) for T tokens: what
 * a page costs per head, for size estimates and messages. */
size_t al_explore_bytes_per_head(int T, int causal);

/* The page of `explore --serve` (info->serve set): the page's text with no
 * weights and the data object, as one malloc'd string of *len bytes; NULL
 * when out of memory. */
char *al_explore_page_text(const al_explore_info *info, size_t *len);

/* The statistics of the heads of one layer as a JSON array text (the
 * objects of the page's "stats"); malloc'd, NULL when out of memory. */
char *al_explore_stats_json(const al_head_stats *stats, int heads);

#endif
