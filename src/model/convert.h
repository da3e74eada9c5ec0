/*
 * convert.h (model): a trained MHA/GQA language model (attnlab's own fp32
 * run, or a Hugging Face Llama-family checkpoint, memory-mapped in BF16/F16/
 * F32) converted into another KV design (GQA, MQA, MLA, LRKV) as a new fp32
 * model (docs/convert.md). Each design fits its own attention weights
 * (al_attn_ops.convert_shape / convert, src/attn/convert.h); this module
 * widens the source to fp32, captures every layer's attention input on
 * calibration tokens, copies everything that is not attention, and measures
 * the result: per head the relative error of its key and value maps, per
 * layer the attention output's relative error on the calibration text, and
 * the loss on held-out tokens of source and result.
 *
 * Data: the report holds [layers x heads] map errors and [layers] output
 * errors, row-major, plus the scalars below.
 */
#ifndef AL_MODEL_CONVERT_H
#define AL_MODEL_CONVERT_H

#include "model.h"

typedef struct al_convert_opts {
    const int *calib;   /* calibration token ids (activations for the fits) */
    size_t n_calib;
    const int *heldout; /* held-out token ids (loss right after conversion) */
    size_t n_heldout;
    int context;        /* window length T over both (<= the source's max_position) */
    int batch;          /* windows per forward pass */
} al_convert_opts;

typedef struct al_convert_report {
    int layers, heads;
    double *k_err, *v_err;  /* [layers * heads]: ||W - W~||_F / ||W||_F of head h's key / value map */
    double *out_err;        /* [layers]: ||y - y~||_F / ||y||_F of the attention output on calibration text */
    size_t calib_tokens, heldout_tokens;
    double loss_source, loss_converted; /* mean nats per predicted held-out token */
    size_t kv_source, kv_target;        /* cache values per token per layer */
    double kv_percent_of_mha;           /* kv_target / (2 x heads x source head_dim) x 100 */
} al_convert_report;

/* The target config of converting a model of config src into design `to`
 * (registry index): src's shape with the design's own fields from
 * flags (given[i]: fields[i] of the design was set) and kv_heads (0: not
 * given), completed by the design's convert_shape. Refuses, in one line: a
 * source that is not an MHA/GQA language model of Llama's form (no biases,
 * q/k norms, sliding window, rope scaling, experts), a design that cannot be
 * a target, a target equal to the source, and shapes the design refuses.
 * Does no work beyond the shapes, so callers check before calibrating. */
int al_convert_target(const al_config *src, int to, int kv_heads, const al_config *flags, const unsigned char *given,
                      al_config *dst, al_err *err);
/* Converts src into *dst (created here: an fp32 attnlab model of `target`,
 * as al_convert_target made it) and fills *rep (al_convert_report_free).
 * src may be mapped or BF16: it is widened to fp32 first. */
int al_model_convert(const al_model *src, const al_config *target, const unsigned char *given,
                     const al_convert_opts *o, al_model *dst, al_convert_report *rep, al_err *err);
void al_convert_report_free(al_convert_report *r);
/* The report as one JSON object text (malloc'd; NULL when out of memory). */
char *al_convert_report_json(const al_convert_report *r, const al_config *src, const al_config *dst);

#endif
