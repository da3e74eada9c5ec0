/*
 * fuzz.h: what every libFuzzer harness of tests/fuzz shares.
 *
 * The parsers read files by path, so a harness writes the fuzzer's bytes into
 * files of one private temporary directory (made once per process under
 * $TMPDIR, /dev/shm when it exists, removed at exit) and calls the parser on
 * them. Inputs that stand for several files are split at FUZZ_SEP: the part
 * before the first separator is the first file, and so on; missing parts are
 * empty, so every byte string is a valid input.
 *
 * The same harness object links either with libFuzzer (-DAL_FUZZ=ON, clang)
 * or with tests/fuzz/replay.c (the normal build), which feeds it the committed
 * corpus under tests/fuzz/corpus/<name>/ as CTest test fuzz.<name>.
 */
#ifndef AL_FUZZ_H
#define AL_FUZZ_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SEP "\n@@FILE@@\n"
enum { FUZZ_MAX_PARTS = 4 };

typedef struct fuzz_part {
    const uint8_t *p;
    size_t n;
} fuzz_part;

/* Splits data at FUZZ_SEP into parts[0..n) (the last part keeps any further
 * separators); parts not present are empty. */
static inline void fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int n) {
    const size_t sl = sizeof FUZZ_SEP - 1;
    for (int i = 0; i < n; i++) parts[i] = (fuzz_part){(const uint8_t *)"", 0};
    for (int i = 0; i < n; i++) {
        const uint8_t *end = NULL;
        if (i + 1 < n)
            for (size_t j = 0; j + sl <= size; j++)
                if (!memcmp(data + j, FUZZ_SEP, sl)) {
                    end = data + j;
                    break;
                }
        parts[i] = (fuzz_part){data, end ? (size_t)(end - data) : size};
        if (!end) return;
        size -= (size_t)(end - data) + sl;
        data = end + sl;
    }
}

static char fuzz_dir_path[256];

/* Removes the files this process wrote and its directory (atexit). */
static void fuzz_dir_remove(void) {
    DIR *d = opendir(fuzz_dir_path);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", fuzz_dir_path, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(fuzz_dir_path);
}

/* The process's private directory, made on first use. Aborts when it cannot
 * be made: a harness without files would test nothing. */
static inline const char *fuzz_dir(void) {
    if (fuzz_dir_path[0]) return fuzz_dir_path;
    const char *base = getenv("TMPDIR");
    struct stat st;
    if (!base || !*base) base = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/attnlab-fuzz-XXXXXX", base);
    if (!mkdtemp(fuzz_dir_path)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

/* Writes bytes to <fuzz_dir>/<name> and returns that path (static buffer per
 * slot 0..3, so a harness can hold several paths at once). */
static inline const char *fuzz_file(int slot, const char *name, const void *bytes, size_t n) {
    static char paths[FUZZ_MAX_PARTS][512];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(paths[slot], "wb");
    if (!f || (n && fwrite(bytes, 1, n, f) != n) || fclose(f)) {
        perror("fuzz: writing an input file");
        abort();
    }
    return paths[slot];
}

/* Removes <fuzz_dir>/<name> (an input absent for this run). */
static inline void fuzz_unlink(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", fuzz_dir(), name);
    unlink(p);
}

#endif
