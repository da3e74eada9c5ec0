/*
 * safetensors.c (fuzz harness): the safetensors reader, src/io/safetensors.c.
 *
 * Input: a whole .safetensors file. Opens it both ways (read into memory and
 * memory-mapped), asserts that both readers accept or refuse it alike and
 * agree on every tensor, and converts every floating-point tensor to fp32
 * (al_st_read_f32), which reads every byte the header claims.
 */
#include "fuzz.h"

#include "io/io.h"

/* Both readers saw the same file: same verdict, same table. */
static void check_same(const al_st_file *a, const al_st_file *b) {
    if (a->n_tensors != b->n_tensors || a->data_len != b->data_len) abort();
    for (int i = 0; i < a->n_tensors; i++) {
        const al_st_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim || x->offset != y->offset ||
            x->nbytes != y->nbytes || memcmp(x->shape, y->shape, sizeof x->shape))
            abort();
    }
}

/* Reads every tensor of a floating-point dtype as fp32 with its own shape. */
static void read_all(const al_st_file *f) {
    for (int i = 0; i < f->n_tensors; i++) {
        const al_st_tensor *t = &f->tensors[i];
        char shape[AL_ST_SHAPE_STR_LEN];
        al_st_shape_str(shape, sizeof shape, t->ndim, t->shape);
        if (t->offset + t->nbytes > f->data_len) abort(); /* the reader promised the layout */
        size_t n = t->nbytes / al_dtype_size(t->dtype);
        float *dst = malloc(n ? n * sizeof(float) : 1);
        if (!dst) abort();
        al_err err;
        int floating = t->dtype == AL_DT_F32 || t->dtype == AL_DT_F16 || t->dtype == AL_DT_BF16 ||
                       t->dtype == AL_DT_F64;
        if (al_st_read_f32(f, t->name, dst, t->ndim, t->shape, &err) != (floating ? 0 : -1)) abort();
        free(dst);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "model.safetensors", data, size);
    al_st_file a, b;
    al_err ea, eb;
    int ra = al_st_open(&a, path, &ea), rb = al_st_open_map(&b, path, &eb);
    if (ra != rb) abort();
    if (ra == 0) {
        check_same(&a, &b);
        read_all(&a);
        read_all(&b);
        al_st_close(&a);
        al_st_close(&b);
    } else if (!ea.msg[0] || strchr(ea.msg, '\n')) {
        abort(); /* a refusal is one line */
    }
    return 0;
}
