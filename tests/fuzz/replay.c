/*
 * replay.c: runs a fuzz harness over files, without libFuzzer.
 *
 *   fuzz_replay_<name> DIR_OR_FILE...
 *
 * Calls the harness's LLVMFuzzerTestOneInput once per file (directories are
 * read one level deep, in name order, so a failure repeats). The normal build
 * links each harness with this driver and registers it as CTest test
 * fuzz.<name> over tests/fuzz/corpus/<name>/: the committed corpus, including
 * the regression input of every finding, replays in seconds under gcc (and
 * under ASan + UBSan in the sanitizer build). A harness reports a defect by
 * crashing or aborting, so exit status 0 means every input passed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Feeds one file to the harness; returns 0, or -1 when it cannot be read. */
static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

/* Replays every regular file of dir; returns how many, or -1. */
static int replay_dir(const char *dir) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name), count = 0, failed = n < 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(path)) failed = 1;
            count++;
        }
        free(names[i]);
    }
    free(names);
    return failed ? -1 : count;
}

int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) {
            perror(argv[i]);
            return 1;
        }
        int n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) ? -1 : 1);
        if (n < 0) return 1;
        total += n;
    }
    if (total == 0) {
        fprintf(stderr, "fuzz replay: no inputs\n");
        return 1;
    }
    printf("replayed %d inputs\n", total);
    return 0;
}
