/*
 * test_study_conversions.c: the plan of `attnlab study --conversions`
 * (src/study/conversions.c): the uptraining's length (a tenth of the source's
 * steps, at least 10); with conversions, per seed 8 runs after the 5
 * comparison runs, in order gqa mqa mla lrkv, each an uptraining (the
 * converted shape with the preset's cache: GQA 4 KV heads, MQA 1, MLA d_c 48
 * + d_r 16, LRKV r 14, MHA's other dimensions; a tenth of the schedule, half
 * the peak learning rate, another data order, init_from = its converted
 * directory) and a from-scratch run of the design's own model for the same
 * total steps; their states in an empty study directory (new, conversion
 * needed); without conversions the plan is unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "study/study.h"
#include "test.h"

static char tmpdir[512];

/* The uptraining's length. */
static void test_uptrain_steps(void) {
    CHECK(al_study_uptrain_steps(4) == 10);
    CHECK(al_study_uptrain_steps(99) == 10);
    CHECK(al_study_uptrain_steps(300) == 30);
    CHECK(al_study_uptrain_steps(360) == 36);
    CHECK(al_study_uptrain_steps(1500) == 150);
}

/* A plan of the tiny budget on a small text, with or without conversions. */
static int make_plan(al_study_plan *p, const char *out, int conversions, int seeds, al_err *err) {
    char data[600];
    snprintf(data, sizeof data, "%s/text.txt", tmpdir);
    const al_study_settings s = {.budget = al_study_budget_find("tiny"), .out = out, .data = data, .no_vision = 1,
                                 .first_seed = 7, .n_seeds = seeds, .conversions = conversions};
    return al_study_plan_init(p, &s, err);
}

static void test_plan(void) {
    char out[600];
    snprintf(out, sizeof out, "%s/study", tmpdir);
    al_err err;
    al_study_plan p;
    int rc = make_plan(&p, out, 1, 2, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(p.n_runs == 2 * 5 + 2 * AL_STUDY_CONV_RUNS_PER_SEED);
    static const char *const names[8] = {"gqa-from-mha-seed7", "gqa-steps14-seed7", "mqa-from-mha-seed7",
                                         "mqa-steps14-seed7",  "mla-from-mha-seed7", "mla-steps14-seed7",
                                         "lrkv-from-mha-seed7", "lrkv-steps14-seed7"};
    const al_plan_run *mha = &p.runs[0];
    CHECK(!strcmp(mha->name, "mha-seed7") && mha->conv_kind == AL_CONV_NONE);
    for (int i = 0; i < 10; i++) CHECK(p.runs[i].conv_kind == AL_CONV_NONE);
    for (int si = 0; si < 2; si++)
        for (int j = 0; j < 8; j++) {
            const al_plan_run *r = &p.runs[10 + 8 * si + j];
            const int design = 1 + j / 2, src = 5 * si;
            CHECK(r->design == design && r->seed == 7u + (unsigned)si && r->conv_source == src);
            CHECK(r->conv_kind == (j % 2 ? AL_CONV_SCRATCH : AL_CONV_UPTRAIN));
            char want[64];
            snprintf(want, sizeof want, "%.*s%d", (int)strlen(names[j]) - 1, names[j], 7 + si);
            CHECK_MSG(!strcmp(r->name, want), "%s, expected %s", r->name, want);
            CHECK(!strcmp(r->opts.out, r->dir) && strstr(r->dir, want));
            const al_plan_run *scratch = &p.runs[5 * si + design];
            CHECK(r->opts.batch == mha->opts.batch && r->opts.context == mha->opts.context);
            if (r->conv_kind == AL_CONV_SCRATCH) {
                char why[256] = "";
                CHECK_MSG(al_config_same(&r->opts.model, &scratch->opts.model, why, sizeof why), "%s", why);
                CHECK(r->opts.steps == 14 && r->opts.seed == scratch->opts.seed && r->opts.lr == scratch->opts.lr);
                CHECK(r->opts.init_from[0] == 0);
                continue;
            }
            const al_config *c = &r->opts.model;
            CHECK(r->opts.steps == 10 && r->opts.lr == 0.5 * mha->opts.lr && r->opts.warmup == 1);
            CHECK(r->opts.seed != p.runs[src].opts.seed);
            CHECK(!strcmp(r->opts.init_from, r->conv_dir) && strstr(r->conv_dir, "-converted-seed"));
            CHECK(c->attention == scratch->opts.model.attention);
            CHECK(c->num_layers == mha->opts.model.num_layers && c->hidden_size == mha->opts.model.hidden_size &&
                  c->num_heads == mha->opts.model.num_heads);
            CHECK(c->intermediate_size == mha->opts.model.intermediate_size); /* MHA's SwiGLU, not the preset's */
            if (design == 1) CHECK(c->num_kv_heads == 4);
            if (design == 2) CHECK(c->num_kv_heads == 1);
            if (design == 3) CHECK(c->kv_lora_rank == 48 && c->qk_rope_head_dim == 16 && c->qk_nope_head_dim == 16);
            if (design == 4) CHECK(c->lrkv_rank == 14);
            /* nothing is on disk: new, and its source must be converted first */
            al_plan_run copy = *r;
            for (int k = 0; k <= 5 * si; k++) p.runs[k].state = AL_RUN_COMPLETE; /* as if its source were done */
            CHECK(al_study_conv_state(&p, &copy, &err) == 0 && copy.state == AL_RUN_NEW);
            CHECK(al_study_conv_needed(&copy) == 1);
        }
    al_study_plan_free(&p);
    rc = make_plan(&p, out, 0, 1, &err); /* without conversions: the comparison alone */
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(p.n_runs == 5);
        for (int i = 0; i < p.n_runs; i++) CHECK(p.runs[i].conv_kind == AL_CONV_NONE);
        al_study_plan_free(&p);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/al_test_study_conversions.%d", (int)getpid());
    mkdir(tmpdir, 0777);
    char path[600];
    snprintf(path, sizeof path, "%s/text.txt", tmpdir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (int i = 0; f && i < 400; i++) fprintf(f, "line %d: the quick brown fox jumps over the lazy dog.\n", i);
    if (f) fclose(f);
    test_uptrain_steps();
    test_plan();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_EXIT();
}
