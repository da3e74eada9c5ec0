/*
 * kv_frontier.h: the KV-cache quality-per-byte frontier (issue 15, item 4;
 * docs/kvlab.md): models x compression methods (quantisation, eviction, both)
 * scored through the real decode path (infer/eval_kv.h: al_eval_decode),
 * each point the bytes per token the cache actually held against the loss;
 * the frontier (Pareto set, its lower convex hull in log bytes, the best
 * point under a bytes threshold, the best loss x bytes trade), the writers
 * (STEM.json, STEM.csv) and the figure (bytes per token on a log axis against
 * loss, one curve per model, the uncompressed caches as labelled points).
 * `attnlab kvlab` and the study's kv_frontier.png both come from here.
 *
 * Data structure. An al_kvf is a growing array of al_kvf_point, in the order
 * measured (model by model, methods in the order given). A point names its
 * model (directory as given, legend label, design), its method (as spelled,
 * and parsed into al_kv_opts), what was measured, and whether the library
 * refused the method (eviction not available: ok = 0, why says so; such a
 * point is reported but not drawn). al_kvf_select marks the frontier flags.
 *
 * Method spelling (al_kvf_parse_methods): a comma-separated list of items;
 * an item is "none" or parts joined by '+': at most one quantisation
 * (int8, int4, int2) and at most one eviction "METHOD:BUDGET" (window, h2o,
 * snapkv; BUDGET a fraction in (0, 1] or an integer count >= 2), e.g.
 * "h2o:0.5+int2" (MiniKV-style: heavy hitters kept, quantised to 2 bits).
 */
#ifndef AL_KV_FRONTIER_H
#define AL_KV_FRONTIER_H

#include <stddef.h>

#include "../attn/kve.h"
#include "../core/core.h"
#include "../model/model.h"

/* the sweeps of `kvlab` and of the study, as al_kvf_parse_methods reads them */
#define AL_KVF_DEFAULT_METHODS "none,int8,int4,int2,h2o:0.5,h2o:0.25,window:0.5,h2o:0.5+int2"
#define AL_KVF_STUDY_METHODS "none,int8,int4,int2,h2o:0.5,h2o:0.5+int2"

enum { AL_KVF_MAX_METHODS = 32, AL_KVF_NAME = 48 };

struct al_kvf_point;

/* One method of a sweep: as spelled, and what it asks of the cache (the
 * quantisation's group, residual and latent come from al_kvf_opts). */
typedef struct al_kvf_method {
    char name[AL_KVF_NAME];
    al_kv_opts kv;
} al_kvf_method;

/* Parses a method list into out[cap]; *n methods. 0, or -1 with one line
 * naming the bad item (unknown name, two quantisations, a bad budget, a
 * repeated item, more than cap). */
int al_kvf_parse_methods(const char *list, al_kvf_method *out, int cap, int *n, al_err *err);

/* How every point of a sweep is measured. */
typedef struct al_kvf_opts {
    int context;            /* window T of al_eval_decode */
    size_t max_predictions; /* per point (0: all of the text) */
    int group, residual;    /* quantisation: --kv-group, --kv-residual */
    int latent;             /* AL_KVQ_LATENT_* (MLA's c~) */
    int sinks;              /* eviction: first positions always kept */
    /* progress: called after each point (may be NULL) */
    void (*on_point)(void *ctx, const struct al_kvf_point *p);
    void *ctx;
} al_kvf_opts;

/* al_kvf_opts with the defaults of `kvlab`: group 32, residual 32, latent
 * per channel, 4 sinks; context and max_predictions 0 (the caller's). */
al_kvf_opts al_kvf_opts_default(void);

typedef struct al_kvf_point {
    char *model;           /* the model's directory as given (malloc'd) */
    char label[64];        /* legend: "MHA", or what the caller made unique */
    char design[16];       /* "mha" */
    char method[AL_KVF_NAME];
    al_kv_opts kv;
    int ok;                /* 0: the library refused the method (why) */
    char why[200];
    size_t predictions;
    double bytes_per_token;      /* what the cache held (al_eval_kv_result) */
    double fp32_bytes_per_token; /* the model's uncompressed fp32 cache */
    double pct_of_mha_fp32;      /* of an MHA fp32 cache of the same layers, heads and head width */
    double loss, perplexity, seconds;
    int pareto, hull;            /* al_kvf_select */
} al_kvf_point;

typedef struct al_kvf {
    al_kvf_point *p;
    int n, cap;
} al_kvf;

void al_kvf_free(al_kvf *f);
/* Appends a copy of *p (its model string copied). 0 or -1 (out of memory). */
int al_kvf_add(al_kvf *f, const al_kvf_point *p, al_err *err);

/* Bytes per token of an MHA fp32 cache with m's layers, query heads and
 * head width (al_attn_head_widths' value width): the study's "% of MHA". */
double al_kvf_mha_fp32_bytes(const al_config *c);

/* Whether m's cache accepts every quantising method of meth with o's group
 * and residual (al_kvq_check); 0, or -1 with one line. */
int al_kvf_check(const al_model *m, const al_kvf_method *meth, int n_meth, const al_kvf_opts *o, al_err *err);

/* Scores ids[0, n_ids) with model m through each method (al_eval_decode)
 * and appends one point per method to f. A method whose eviction the
 * library's rules refuse at o's window (al_kve_check) becomes a point with
 * ok = 0; any other failure, out of memory included, stops the sweep: -1
 * with one line naming the model and method. */
int al_kvf_sweep(al_kvf *f, const al_model *m, const char *model, const char *label, const int *ids, size_t n_ids,
                 const al_kvf_method *meth, int n_meth, const al_kvf_opts *o, al_err *err);

/* Marks the frontier over every measured point: pareto (no point holds
 * fewer or as many bytes with a lower loss), hull (the Pareto points on the
 * lower convex hull in (log bytes, loss)). 0, or -1 with one line when out
 * of memory (the flags are then all 0, not to be written). */
int al_kvf_select(al_kvf *f, al_err *err);
/* The measured point with the lowest loss among those at most max_pct % of
 * an MHA fp32 cache (-1: none). */
int al_kvf_best_under(const al_kvf *f, double max_pct);
/* The measured point with the lowest loss x bytes product (-1: none). */
int al_kvf_best_trade(const al_kvf *f);
/* The thresholds (% of an MHA fp32 cache) the writers and the study report
 * the best point under. */
enum { AL_KVF_N_THRESHOLDS = 6 };
extern const double al_kvf_thresholds[AL_KVF_N_THRESHOLDS];

/* The settings written beside the points (and compared by al_kvf_read_json). */
typedef struct al_kvf_meta {
    const char *methods; /* the list as given */
    const char *key;     /* a cache key (the study's), or NULL */
    int context, group, residual;
    size_t max_predictions;
} al_kvf_meta;

/* STEM.json and STEM.csv for the figure path `png` (STEM.png; the stem is
 * png without its extension), atomically each. */
int al_kvf_write_data(const al_kvf *f, const al_kvf_meta *meta, const char *png, al_err *err);
/* The figure itself at png (atomically); title may be NULL. */
int al_kvf_draw(const al_kvf *f, const al_kvf_meta *meta, const char *title, const char *png, al_err *err);
/* The JSON document of STEM.json as text (malloc'd; NULL when out of memory). */
char *al_kvf_json_text(const al_kvf *f, const al_kvf_meta *meta);
/* JSON of f alone at path (atomic), for caches. */
int al_kvf_write_json(const al_kvf *f, const al_kvf_meta *meta, const char *path, al_err *err);
/* Appends the points of a JSON file al_kvf_write_json wrote whose key equals
 * `key`; -1 when the file is missing, unreadable, of another key or
 * malformed (nothing appended; err may say why). */
int al_kvf_read_json(al_kvf *f, const char *path, const char *key, al_err *err);

#endif
