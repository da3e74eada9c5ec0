/*
 * resume.c (fuzz harness): what `attnlab train --resume` and the study read
 * back from a run directory (src/train/train.c, src/study/runs.c):
 * train_state.safetensors (weights, AdamW moments, step and data RNG in its
 * metadata), log.jsonl (trimmed to the resumed step) and config.json (the
 * model and its training settings).
 *
 * Input: three parts split at FUZZ_SEP (fuzz.h): the training state, the log
 * and the config. The state is read for a model of RESUME_FLOATS weights. After
 * a resume every line left in log.jsonl ends in a newline and names a step no
 * later than the state's, and the study's own reading of the step agrees; the
 * study's log reader and al_run_load_opts (config.json's settings) run too.
 */
#include "fuzz.h"

#include "study/study.h"
#include "train/train.h"

enum { RESUME_FLOATS = 4 };

/* log.jsonl after the trim: whole lines of steps <= step. */
static void check_log(const char *path, int step) {
    FILE *f = fopen(path, "rb");
    if (!f) return; /* no log: nothing to keep */
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        const char *s = strstr(line, "\"step\":");
        if (!s || strtol(s + 7, NULL, 10) > step || line[len - 1] != '\n') abort();
    }
    free(line);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[3];
    fuzz_split(data, size, part, 3);
    const char *state = fuzz_file(0, "train_state.safetensors", part[0].p, part[0].n);
    const char *log = fuzz_file(1, "log.jsonl", part[1].p, part[1].n);
    fuzz_file(2, "config.json", part[2].p, part[2].n);
    const char *dir = fuzz_dir();

    float w[RESUME_FLOATS], m1[RESUME_FLOATS], m2[RESUME_FLOATS];
    int step = -1, study_step = -1;
    al_rng rng;
    al_err err;
    if (al_train_resume_read(w, m1, m2, RESUME_FLOATS, &step, &rng, dir, &err) == 0) {
        if (step < 0) abort();
        check_log(log, step);
        /* the study reads the step alone: it must find the same one (it refuses steps of 2^30 and more) */
        if (al_train_state_step(state, &study_step, &err) == 0 && study_step != step) abort();
    } else if (!err.msg[0] || strchr(err.msg, '\n')) {
        abort(); /* a refusal is one line */
    }
    al_run_log rl;
    if (al_run_log_read(dir, &rl, &err) == 0) { /* the study's reading of the (trimmed) log */
        if (rl.n < 0) abort();
        for (int i = 0; i < rl.n; i++) (void)(rl.step[i] + rl.val_loss[i] + rl.val_acc[i]);
        al_run_log_free(&rl);
    } else if (!err.msg[0] || strchr(err.msg, '\n')) {
        abort();
    }
    al_train_opts o;
    al_train_opts_default(&o);
    int rc = al_run_load_opts(dir, &o, &err);
    if (rc != 0 && rc != -1 && rc != -2) abort();
    if (rc && (!err.msg[0] || strchr(err.msg, '\n'))) abort();
    return 0;
}
