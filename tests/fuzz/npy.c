/*
 * npy.c (fuzz harness): the NPY reader, src/io/npy.c (float32 '<f4', C order).
 *
 * Input: a whole .npy file. An accepted file's shape must multiply out to
 * the elements read (every one of them is touched), and writing it back and
 * reading that must give the same bytes.
 */
#include "fuzz.h"

#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "in.npy", data, size);
    float *x = NULL, *y = NULL;
    int nd = 0, nd2 = 0;
    int64_t shape[AL_ST_MAX_DIMS], shape2[AL_ST_MAX_DIMS];
    al_err err;
    if (al_npy_read_f32(path, &x, &nd, shape, &err)) {
        if (!err.msg[0] || strchr(err.msg, '\n')) abort(); /* a refusal is one line */
        return 0;
    }
    if (nd < 0 || nd > AL_ST_MAX_DIMS) abort();
    size_t n = 1;
    for (int i = 0; i < nd; i++) {
        if (shape[i] < 0) abort();
        n *= (size_t)shape[i];
    }
    if (n * sizeof(float) > size) abort(); /* more elements than the file holds */
    const char *out = fuzz_file(1, "out.npy", "", 0);
    if (al_npy_write_f32(out, x, nd, shape, &err) || al_npy_read_f32(out, &y, &nd2, shape2, &err)) abort();
    if (nd2 != nd || memcmp(shape, shape2, sizeof *shape * (size_t)nd) || (n && memcmp(x, y, n * sizeof(float))))
        abort();
    free(x);
    free(y);
    return 0;
}
