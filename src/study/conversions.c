/*
 * conversions.c: `attnlab study --conversions` (study.h, docs/study.md
 * "Conversions"): for each seed, every design but MHA converted from that
 * seed's trained MHA run (model/convert.h, in-process), uptrained for a tenth
 * of the MHA run's steps (al_train with init_from, as `train --init-from`),
 * and the same design trained from scratch for the same total steps (110 % of
 * the MHA run's).
 *
 * Data: the conversion runs are ordinary al_plan_runs appended to the plan
 * after the comparison's, per seed and per design (GQA, MQA, MLA, LRKV) an
 * uptraining run (conv_kind AL_CONV_UPTRAIN, conv_source: the MHA run,
 * conv_dir: runs/DESIGN-converted-seedS, the converted model) followed by its
 * long from-scratch run (AL_CONV_SCRATCH, runs/DESIGN-stepsN-seedS), so the
 * study's own machinery trains, resumes, skips and measures them. A
 * converted directory is complete when its convert.json is there (it is
 * written into a temporary directory renamed at the end); it is converted
 * again when its MHA source is trained again.
 */
#include "study.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/io.h"
#include "../model/convert.h"
#include "../train/dist.h"

/* Calibration and held-out tokens of a conversion (`attnlab convert`'s defaults). */
enum { CONV_CALIB_TOKENS = 16384, CONV_HELDOUT_TOKENS = 8192, CONV_BATCH = 4 };

/* ---- the target shape ---- */

/* Per design, the config fields of its study preset that set its cache and
 * are carried into the conversion's target (config.json keys; GQA's KV heads
 * go as kv_heads); every other dimension is the MHA source's (so a converted
 * model keeps MHA's SwiGLU width, where the preset adjusts it to match
 * parameters). MLA's nope width is the source's head_dim minus the RoPE part,
 * not the preset's: the conversion splits the source's key dims. */
#define CONV_SHAPES(X)                                                                                                 \
    X("gqa", 1, NULL, NULL)                                                                                            \
    X("mqa", 0, NULL, NULL)                                                                                            \
    X("mla", 0, "kv_lora_rank", "qk_rope_head_dim")                                                                    \
    X("lrkv", 0, "lrkv_rank", NULL)
typedef struct conv_shape {
    const char *design;
    int kv_heads;         /* carry num_kv_heads */
    const char *field[2]; /* design fields carried (NULL: none) */
} conv_shape;
#define CONV_SHAPE_ROW(d, kv, f0, f1) {d, kv, {f0, f1}},
static const conv_shape conv_shapes[] = {CONV_SHAPES(CONV_SHAPE_ROW)};
#undef CONV_SHAPE_ROW

/* The conversion target of design `design` (study index) from the MHA
 * config src, with the cache fields of shape (a config of that design: the
 * preset's, or a target made before); given[] marks the design fields set. */
static int conv_target(const al_config *src, int design, const al_config *shape, al_config *dst, unsigned char *given,
                       al_err *err) {
    const conv_shape *cs = NULL;
    for (size_t i = 0; i < sizeof conv_shapes / sizeof conv_shapes[0]; i++)
        if (!strcmp(conv_shapes[i].design, al_study_design(design))) cs = &conv_shapes[i];
    int to;
    if (!cs || al_attn_from_name(cs->design, &to)) return al_errf(err, "no conversion to %s", al_study_design(design));
    const al_attn_ops *d = al_attn_design(to);
    memset(given, 0, AL_ATTN_MAX_FIELDS);
    for (int f = 0; f < d->n_fields && f < AL_ATTN_MAX_FIELDS; f++)
        for (int j = 0; j < 2; j++)
            if (cs->field[j] && !strcmp(d->fields[f].key, cs->field[j])) given[f] = 1;
    return al_convert_target(src, to, cs->kv_heads ? shape->num_kv_heads : 0, shape, given, dst, err);
}

/* ---- the plan ---- */

/* The fewest uptraining steps: the first updates of a fresh AdamW are
 * sign-like at the full step size, which on the tiny budget's 4-step models
 * (and 64-token batches) is noise that one step cannot average out; from 100
 * source steps on (every budget but tiny) a tenth is more. */
enum { UPTRAIN_MIN_STEPS = 10 };

/* A schedule length scaled to the uptraining (a tenth, rounded; 0 stays 0). */
static int tenth(int v) { return v <= 0 ? 0 : v < 10 ? 1 : (v + 5) / 10; }

int al_study_uptrain_steps(int steps) { return tenth(steps) > UPTRAIN_MIN_STEPS ? tenth(steps) : UPTRAIN_MIN_STEPS; }

/* The comparison run of design k and seed (index), or -1. */
static int comparison_run(const al_study_plan *p, int design, uint64_t seed) {
    for (int i = 0; i < p->n_runs; i++)
        if (!p->runs[i].conv_kind && !p->runs[i].vision && p->runs[i].design == design && p->runs[i].seed == seed)
            return i;
    return -1;
}

/* The uptraining's peak learning rate as a fraction of the study's. Fresh
 * AdamW moments make the first updates sign-like at the full step size, which
 * the converted model, near a trained optimum, pays for; a conversion that
 * loses much (MLA) needs the larger steps. Measured at the quick budget of
 * before session 18 (300 steps, so 30 uptraining steps; validation loss):
 * MLA 2.094 / 2.096 / 2.169 and GQA 1.941 / 1.907 / 1.896 at 1, 1/2 and 1/4
 * of the peak: a half is within 0.011 of the best of both. */
#define UPTRAIN_LR_FRACTION 0.5

/* The uptraining run of design k from the MHA run src: the MHA run's
 * settings with the converted shape, a tenth of its schedule, half its peak
 * learning rate, starting from the converted model. Its data order is not
 * the MHA run's (seed + 2^32), so it sees other windows than the ones the
 * source began with. */
static int uptrain_run(const al_study_plan *p, int src, const al_plan_run *scratch, al_plan_run *r, al_err *err) {
    const al_plan_run *s = &p->runs[src];
    unsigned char given[AL_ATTN_MAX_FIELDS];
    r->opts = s->opts;
    if (conv_target(&s->opts.model, r->design, &scratch->opts.model, &r->opts.model, given, err)) return -1;
    r->opts.steps = al_study_uptrain_steps(s->opts.steps);
    r->opts.warmup = tenth(s->opts.warmup);
    r->opts.eval_every = tenth(s->opts.eval_every);
    r->opts.save_every = tenth(s->opts.save_every);
    r->opts.lr = s->opts.lr * UPTRAIN_LR_FRACTION;
    r->opts.seed = s->opts.seed + (1ULL << 32);
    r->conv_kind = AL_CONV_UPTRAIN;
    r->conv_source = src;
    snprintf(r->name, sizeof r->name, "%s-from-mha-seed%llu", al_study_design(r->design), (unsigned long long)r->seed);
    if (al_study_set_path(r->dir, sizeof r->dir, "run directory", err, "%s/runs/%s", p->out, r->name) ||
        al_study_set_path(r->conv_dir, sizeof r->conv_dir, "converted model", err, "%s/runs/%s-converted-seed%llu",
                          p->out, al_study_design(r->design), (unsigned long long)r->seed))
        return -1;
    return al_train_opts_set_paths(&r->opts, NULL, NULL, r->dir, err) ||
                   al_train_opts_set_init_from(&r->opts, r->conv_dir, err)
               ? -1
               : 0;
}

/* The long from-scratch run: the design's comparison run trained for the
 * MHA run's steps plus the uptraining's, its schedule stretched over them. */
static int long_run(const al_study_plan *p, int src, const al_plan_run *scratch, al_plan_run *r, al_err *err) {
    const int steps = p->runs[src].opts.steps + al_study_uptrain_steps(p->runs[src].opts.steps);
    r->opts = scratch->opts;
    r->opts.steps = steps;
    r->conv_kind = AL_CONV_SCRATCH;
    r->conv_source = src;
    snprintf(r->name, sizeof r->name, "%s-steps%d-seed%llu", al_study_design(r->design), steps,
             (unsigned long long)r->seed);
    return al_study_set_path(r->dir, sizeof r->dir, "run directory", err, "%s/runs/%s", p->out, r->name) ||
                   al_train_opts_set_paths(&r->opts, NULL, NULL, r->dir, err)
               ? -1
               : 0;
}

int al_study_plan_conversions(al_study_plan *p, al_err *err) {
    const int n = p->n_runs;
    for (int si = 0; si < p->n_seeds; si++) {
        const int src = comparison_run(p, 0, p->seeds[si]);
        if (src < 0) return al_errf(err, "conversions: no MHA run of seed %llu", (unsigned long long)p->seeds[si]);
        for (int k = 1; k < AL_STUDY_DESIGNS; k++) {
            const int scratch = comparison_run(p, k, p->seeds[si]);
            if (scratch < 0) return al_errf(err, "conversions: no %s run", al_study_design(k));
            for (int kind = AL_CONV_UPTRAIN; kind <= AL_CONV_SCRATCH; kind++) {
                al_plan_run *r = &p->runs[p->n_runs];
                memset(r, 0, sizeof *r);
                r->seed = p->seeds[si];
                r->design = k;
                if ((kind == AL_CONV_UPTRAIN ? uptrain_run : long_run)(p, src, &p->runs[scratch], r, err))
                    return al_err_prefix(err, "conversion to %s", al_study_design(k));
                p->n_runs++;
            }
        }
    }
    return p->n_runs - n == p->n_seeds * AL_STUDY_CONV_RUNS_PER_SEED ? 0 : al_errf(err, "conversions: wrong count");
}

/* ---- states ---- */

/* 1 if DIR/NAME exists, 0 if not; -1 with err when memory ran out (no
 * verdict: taken for "missing", a complete run would be trained again). */
static int has_file(const char *dir, const char *name, al_err *err) {
    char *path = al_study_join(dir, name, err);
    if (!path) return -1;
    const int ok = access(path, F_OK) == 0;
    free(path);
    return ok;
}

int al_study_conv_state(const al_study_plan *p, al_plan_run *r, al_err *err) {
    const int converted = r->conv_kind == AL_CONV_UPTRAIN ? has_file(r->conv_dir, "convert.json", err) : 0;
    if (converted < 0) return -1;
    if (converted) {
        al_config c; /* the converted model's own config (MLA's RoPE base comes from the source's weights) */
        if (!al_config_load_dir(&c, r->conv_dir, NULL, err)) r->opts.model = c;
        else if (al_err_is_oom(err)) return -1;
        else r->conv_redo = 1; /* unreadable: converted again */
    }
    if (al_study_run_state(&r->opts, &r->state, &r->step, r->why, sizeof r->why, err)) return -1;
    if (r->conv_kind == AL_CONV_UPTRAIN && r->state != AL_RUN_NEW && !converted) {
        r->state = AL_RUN_STALE; /* what it started from is gone: converted and trained again */
        r->step = 0;
        al_strfmt(r->why, sizeof r->why, "its converted model %s is missing", r->conv_dir);
    }
    const al_plan_run *src = &p->runs[r->conv_source];
    if (r->conv_kind == AL_CONV_UPTRAIN && src->state != AL_RUN_COMPLETE) {
        r->conv_redo = 1; /* converted from a source that is trained again */
        if (r->state != AL_RUN_NEW) {
            r->state = AL_RUN_STALE;
            r->step = 0;
            al_strfmt(r->why, sizeof r->why, "its source %s is trained again", src->name);
        }
    }
    return 0;
}

int al_study_conv_needed(const al_plan_run *r) {
    al_err err; /* out of memory: converted again, which fails the same way or writes the same files */
    return r->conv_kind == AL_CONV_UPTRAIN && (r->conv_redo || has_file(r->conv_dir, "convert.json", &err) != 1);
}

/* ---- converting ---- */

/* The files a converted directory holds. */
static const char *const conv_files[] = {"config.json", "model.safetensors", "convert.json", "measure.json"};

/* Removes a converted directory (or its temporary) and what it holds. */
static void remove_converted(const char *dir) {
    al_err err;
    for (size_t i = 0; i < sizeof conv_files / sizeof conv_files[0]; i++) {
        char *path = al_study_join(dir, conv_files[i], &err);
        if (path) unlink(path);
        free(path);
    }
    rmdir(dir);
}

/* The first min(len, max + 1) bytes of text as token ids (malloc'd). */
static int *byte_ids(const uint8_t *text, size_t len, size_t max, size_t *n, al_err *err) {
    *n = len < max + 1 ? len : max + 1;
    int *ids = malloc(sizeof(int) * (*n ? *n : 1));
    if (!ids) {
        al_errf(err, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < *n; i++) ids[i] = text[i];
    return ids;
}

/* The run block of a converted model's config.json: the source run's
 * training settings (so its text is the default of eval) and its origin. */
static char *converted_block(const al_plan_run *source, const al_model *src) {
    const unsigned long mark = al_json_mark();
    char *train = al_train_opts_to_json(&source->opts), *text = NULL;
    int oom;
    cJSON *j = cJSON_CreateObject(), *t = train ? al_json_parse(train, strlen(train), &oom) : NULL,
          *from = cJSON_CreateObject();
    if (j && t && from && cJSON_AddStringToObject(from, "model", source->dir) &&
        cJSON_AddStringToObject(from, "attention", al_attn_name(src->cfg.attention))) {
        al_json_add(j, "train", t);
        al_json_add(j, "converted_from", from);
        t = from = NULL;
        text = al_json_print(j, 0, mark);
    }
    cJSON_Delete(t);
    cJSON_Delete(from);
    cJSON_Delete(j);
    free(train);
    return text;
}

/* Writes the converted model dst (and its report) to dir through dir.tmp. */
static int save_converted(const al_model *dst, const al_model *src, const al_convert_report *rep,
                          const al_plan_run *source, const char *dir, al_err *err) {
    char *tmp = al_sprintf("%s.tmp", dir), *block = converted_block(source, src);
    char *json = al_convert_report_json(rep, &src->cfg, &dst->cfg), *report = tmp ? al_study_join(tmp, "convert.json", err) : NULL;
    int rc = tmp && block && json && report ? 0 : al_errf(err, "out of memory");
    if (!rc) {
        remove_converted(tmp); /* a conversion killed before its rename */
        rc = al_model_save(dst, tmp, block, err) || al_write_file_atomic(report, json, strlen(json), err);
    }
    if (!rc) {
        remove_converted(dir);
        if (rename(tmp, dir)) rc = al_errf(err, "%s: cannot rename %s to it: %s", dir, tmp, strerror(errno));
    }
    if (rc && tmp) remove_converted(tmp);
    free(tmp), free(block), free(json), free(report);
    return rc;
}

/* Converts r's MHA source into r->conv_dir: calibration on the start of the
 * corpus's training split, the report's held-out loss on its validation
 * split, the source's training context. */
static int convert_source(const al_study_plan *p, const al_plan_run *r, al_err *err) {
    const al_plan_run *s = &p->runs[r->conv_source];
    const al_corpus *c = &p->corpus;
    al_model src, dst;
    char *extra = NULL;
    if (al_model_load(&src, s->dir, &extra, err)) return -1;
    free(extra);
    al_config target;
    unsigned char given[AL_ATTN_MAX_FIELDS];
    size_t n_cal = 0, n_held = 0;
    int *cal = NULL, *held = NULL, rc = conv_target(&src.cfg, r->design, &r->opts.model, &target, given, err);
    if (!rc && (!(cal = byte_ids(c->bytes, c->n_train, CONV_CALIB_TOKENS, &n_cal, err)) ||
                !(held = byte_ids(c->bytes + c->n_train, c->n - c->n_train, CONV_HELDOUT_TOKENS, &n_held, err))))
        rc = -1;
    al_convert_report rep;
    const al_convert_opts co = {cal, n_cal, held, n_held, s->opts.context, CONV_BATCH};
    if (!rc && !(rc = al_model_convert(&src, &target, given, &co, &dst, &rep, err))) {
        rc = save_converted(&dst, &src, &rep, s, r->conv_dir, err);
        al_convert_report_free(&rep);
        al_model_free(&dst);
    }
    free(cal);
    free(held);
    al_model_free(&src);
    return rc ? al_err_prefix(err, "converting %s", s->name) : 0;
}

int al_study_conv_prepare(const al_study_plan *p, al_plan_run *r, al_err *err) {
    int rc = 0;
    if (al_dist_rank() == 0) { /* under mpirun rank 0 converts; the others take its config */
        if (al_study_conv_needed(r)) rc = convert_source(p, r, err);
        if (!rc) r->conv_redo = 0;
        al_lm_measure m;
        const int got = rc ? 0 : al_study_load_lm_measure(r->conv_dir, 0, &m, err);
        if (got < 0 || (got > 0 && (al_study_measure_lm(r->conv_dir, &p->corpus, p->budget->lm_final_eval_tokens, &m,
                                                        err) ||
                                    al_study_save_lm_measure(r->conv_dir, &m, err))))
            rc = -1;
        if (!rc) rc = al_config_load_dir(&r->opts.model, r->conv_dir, NULL, err);
    }
    if (al_dist_bcast(&rc, sizeof rc, err) || rc || al_dist_bcast(&r->opts.model, sizeof r->opts.model, err)) return -1;
    return 0;
}

/* ---- results ---- */

/* The validation loss of the measured run in dir trained `steps` steps. */
static int loss_of(const char *dir, int steps, double *loss, al_err *err) {
    al_lm_measure m;
    if (al_study_measured(al_study_load_lm_measure(dir, steps, &m, err), dir, err)) return -1;
    *loss = m.val_loss;
    return 0;
}

int al_study_conv_collect(const al_study_plan *p, al_study_results *res, al_err *err) {
    res->conv = calloc((size_t)p->n_seeds * (AL_STUDY_DESIGNS - 1), sizeof *res->conv);
    if (!res->conv) return al_errf(err, "out of memory");
    for (int i = 0; i + 1 < p->n_runs; i++) {
        const al_plan_run *up = &p->runs[i], *lng = &p->runs[i + 1];
        if (up->conv_kind != AL_CONV_UPTRAIN) continue;
        const al_plan_run *src = &p->runs[up->conv_source];
        const int scratch = comparison_run(p, up->design, up->seed);
        al_study_conversion *c = &res->conv[res->n_conv];
        al_lm_measure conv;
        c->design = up->design, c->seed = up->seed;
        if (scratch < 0 || lng->conv_kind != AL_CONV_SCRATCH) return al_errf(err, "conversions: the plan is out of order");
        if (al_study_measured(al_study_load_lm_measure(up->conv_dir, 0, &conv, err), up->conv_dir, err)) return -1;
        c->kv_pct_of_mha = conv.kv_pct_of_mha;
        c->loss_converted = conv.val_loss;
        if (loss_of(src->dir, src->opts.steps, &c->loss_source, err) ||
            loss_of(up->dir, up->opts.steps, &c->loss_uptrained, err) ||
            loss_of(p->runs[scratch].dir, p->runs[scratch].opts.steps, &c->loss_scratch, err) ||
            loss_of(lng->dir, lng->opts.steps, &c->loss_scratch_long, err) ||
            al_study_set_path(c->converted_dir, sizeof c->converted_dir, "converted model", err, "%s", up->conv_dir) ||
            al_study_set_path(c->uptrained_dir, sizeof c->uptrained_dir, "run directory", err, "%s", up->dir) ||
            al_study_set_path(c->scratch_long_dir, sizeof c->scratch_long_dir, "run directory", err, "%s", lng->dir))
            return -1;
        res->conv_source_steps = src->opts.steps;
        res->conv_uptrain_steps = up->opts.steps;
        res->conv_long_steps = lng->opts.steps;
        res->n_conv++;
    }
    return 0;
}
