/*
 * idx.c (fuzz harness): the IDX reader, src/io/idx.c (MNIST's format, plain
 * or gzip-compressed through zlib).
 *
 * Input: a whole IDX file (gzip or not: zlib decides). An accepted file's
 * dimensions must multiply out to the bytes read, every one of them touched.
 */
#include "fuzz.h"

#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "in.idx", data, size);
    al_idx x;
    al_err err;
    if (al_idx_read(path, &x, &err)) {
        if (!err.msg[0] || strchr(err.msg, '\n')) abort(); /* a refusal is one line */
        return 0;
    }
    if (x.ndim < 1 || x.ndim > AL_IDX_MAX_DIMS) abort();
    size_t n = 1;
    for (int i = 0; i < x.ndim; i++) {
        if (x.dims[i] <= 0) abort();
        n *= (size_t)x.dims[i];
    }
    if (n != x.n) abort();
    unsigned sum = 0;
    for (size_t i = 0; i < x.n; i++) sum += x.data[i];
    al_idx_free(&x);
    return (int)(sum & 0);
}
