/*
 * test_study_measure.c: measure.json, the study's cache of a finished run's
 * measurements (al_study_save/load_lm_measure, _vit_measure, runs.c). What
 * was saved loads back the same; a file from another run kind or step count
 * is not used; and a file whose counts cannot be held by their fields
 * (negative, or past the largest value the type holds exactly) is not used
 * either, never converted (a double past an integer type's range converts
 * with undefined behaviour: UBSan in make test).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "study/study.h"
#include "test.h"

/* Writes text as dir/measure.json. */
static void write_measure(const char *dir, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/measure.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_round_trip(const char *dir) {
    al_err err;
    const al_lm_measure lm = {.steps = 40, .params = 123456, .kv_values = 64, .kv_bytes_per_token = 512,
                              .kv_pct_of_mha = 25.0, .val_loss = 1.5, .val_bpb = 2.1, .val_tokens = 4096,
                              .erank_uncentered_pct = 90.5, .erank_pca_pct = 80.25, .mean_offdiag = -0.125};
    al_lm_measure back;
    CHECK(al_study_save_lm_measure(dir, &lm, &err) == 0);
    CHECK(al_study_load_lm_measure(dir, 40, &back, &err) == 0);
    CHECK(back.steps == 40 && back.params == lm.params && back.kv_values == lm.kv_values &&
          back.kv_bytes_per_token == lm.kv_bytes_per_token && back.kv_pct_of_mha == lm.kv_pct_of_mha &&
          back.val_loss == lm.val_loss && back.val_bpb == lm.val_bpb && back.val_tokens == lm.val_tokens &&
          back.erank_uncentered_pct == lm.erank_uncentered_pct && back.erank_pca_pct == lm.erank_pca_pct &&
          back.mean_offdiag == lm.mean_offdiag); /* field by field: the structs have padding */
    CHECK(al_study_load_lm_measure(dir, 41, &back, &err) == 1); /* another step count: no usable cache */
    al_vit_measure vb;
    CHECK(al_study_load_vit_measure(dir, 40, &vb, &err) == 1); /* another kind */
    const al_vit_measure vit = {.steps = 7, .params = 999, .accuracy = 0.75, .test_loss = 0.5, .test_images = 2000,
                                .erank_uncentered_pct = 50, .erank_pca_pct = 40, .mean_offdiag = 0.25};
    CHECK(al_study_save_vit_measure(dir, &vit, &err) == 0);
    CHECK(al_study_load_vit_measure(dir, 7, &vb, &err) == 0);
    CHECK(vb.steps == 7 && vb.params == vit.params && vb.accuracy == vit.accuracy && vb.test_loss == vit.test_loss &&
          vb.test_images == vit.test_images && vb.erank_uncentered_pct == vit.erank_uncentered_pct &&
          vb.erank_pca_pct == vit.erank_pca_pct && vb.mean_offdiag == vit.mean_offdiag);
}

static void test_out_of_range(const char *dir) {
    static const char *const lm_rest = "\"kv_values\": 64, \"kv_bytes_per_token\": 512, \"kv_pct_of_mha\": 25, "
                                       "\"val_loss\": 1.5, \"val_bpb\": 2.1, \"val_tokens\": 4096, "
                                       "\"erank_uncentered_pct\": 90, \"erank_pca_pct\": 80, \"mean_offdiag\": 0.1}";
    static const struct { const char *params; int ok; } lm_cases[] = {
        {"1e300", 0}, {"-1", 0}, {"1.8e16", 0}, {"\"5\"", 0}, {"9007199254740992", 1}, {"0", 1},
    };
    char text[1024];
    al_lm_measure m;
    for (size_t i = 0; i < sizeof lm_cases / sizeof lm_cases[0]; i++) {
        snprintf(text, sizeof text, "{\"kind\": \"lm\", \"steps\": 3, \"params\": %s, %s", lm_cases[i].params, lm_rest);
        write_measure(dir, text);
        CHECK_MSG(al_study_load_lm_measure(dir, 3, &m, NULL) == (lm_cases[i].ok ? 0 : 1), "params %s", lm_cases[i].params);
    }
    static const struct { const char *images; int ok; } vit_cases[] = {
        {"3e9", 0}, {"-5", 0}, {"2147483648", 0}, {"2147483647", 1},
    };
    al_vit_measure v;
    for (size_t i = 0; i < sizeof vit_cases / sizeof vit_cases[0]; i++) {
        snprintf(text, sizeof text,
                 "{\"kind\": \"vision\", \"steps\": 3, \"params\": 10, \"accuracy\": 0.5, \"test_loss\": -1e300, "
                 "\"test_images\": %s, \"erank_uncentered_pct\": 1, \"erank_pca_pct\": 1, \"mean_offdiag\": -0.5}",
                 vit_cases[i].images);
        write_measure(dir, text);
        CHECK_MSG(al_study_load_vit_measure(dir, 3, &v, NULL) == (vit_cases[i].ok ? 0 : 1), "test_images %s",
                  vit_cases[i].images);
    }
    CHECK(v.test_images == 2147483647 && v.test_loss == -1e300); /* the last, accepted: floats as they are */
}

/* No file is no usable cache (1), which al_study_measured turns into an
 * error where measurements must be there; a measure.json that is there but
 * cannot be read (here a directory) is an error (-1) with its reason, not a
 * missing cache. */
static void test_missing_and_unreadable(const char *dir) {
    char path[256];
    al_err err;
    al_lm_measure m;
    snprintf(path, sizeof path, "%s/measure.json", dir);
    unlink(path);
    CHECK(al_study_load_lm_measure(dir, 3, &m, &err) == 1);
    CHECK(al_study_measured(1, dir, &err) == -1 && strstr(err.msg, "measurements missing"));
    CHECK(al_study_measured(0, dir, &err) == 0);
    CHECK(mkdir(path, 0700) == 0);
    err.msg[0] = 0;
    CHECK_MSG(al_study_load_lm_measure(dir, 3, &m, &err) == -1 && strstr(err.msg, "measure.json"), "%s", err.msg);
    CHECK(al_study_measured(-1, dir, &err) == -1 && !strstr(err.msg, "missing"));
    CHECK(rmdir(path) == 0);
}

int main(void) {
    char dir[] = "/tmp/attnlab_measure_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_round_trip(dir);
    test_out_of_range(dir);
    test_missing_and_unreadable(dir);
    char path[256];
    snprintf(path, sizeof path, "%s/measure.json", dir);
    unlink(path);
    rmdir(dir);
    return TEST_EXIT();
}
