/*
 * safetensors.c: reading and writing the safetensors format (the format
 * attnlab checkpoints and Hugging Face weights use); dtypes and their
 * conversions come from core/dtype.h.
 *
 * The reader loads the whole file (al_st_open) or maps it read-only
 * (al_st_open_map, for Hugging Face checkpoints whose matrices are used in
 * place) and validates the header completely before anything is used, so a
 * corrupt or truncated file fails with one clear line instead of reading out
 * of bounds later. Tensor bytes may be unaligned inside the file, so
 * al_st_read_f32 always copies them out with memcpy; code that uses mapped
 * bytes in place checks their alignment first (src/model/hf.c).
 *
 * Byte order: the format is little-endian and this code assumes a
 * little-endian host (x86-64, aarch64), checked at compile time below.
 */
#include "io.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* Same limit as the reference implementation: a larger header means a
 * corrupt length field, not a real model. */
#define AL_ST_MAX_HEADER 100000000ULL

/* ---- reader ---- */

/* JSON numbers are doubles: accept only exact non-negative integers up to 2^53. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

/* Parses one tensor entry of the header into t (name already set). */
static int parse_entry(const char *path, const cJSON *e, al_st_tensor *t, al_err *err) {
    const char *nm = t->name;
    if (!cJSON_IsObject(e)) return al_errf(err, "%s: entry for tensor '%s' is not an object", path, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!dt) return al_errf(err, "%s: tensor '%s' is missing 'dtype'", path, nm);
    if (!sh) return al_errf(err, "%s: tensor '%s' is missing 'shape'", path, nm);
    if (!off) return al_errf(err, "%s: tensor '%s' is missing 'data_offsets'", path, nm);
    if (!cJSON_IsString(dt)) return al_errf(err, "%s: dtype of tensor '%s' is not a string", path, nm);
    if (al_dtype_from_name(dt->valuestring, &t->dtype))
        return al_errf(err, "%s: unsupported dtype '%.32s' for tensor '%s'", path, dt->valuestring, nm);

    if (!cJSON_IsArray(sh)) return al_errf(err, "%s: shape of tensor '%s' is not an array", path, nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > AL_ST_MAX_DIMS)
        return al_errf(err, "%s: tensor '%s' has %d dims, at most %d supported", path, nm, nd, AL_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t count = 1;
    int i = 0;
    for (const cJSON *d = sh->child; d; d = d->next, i++) {
        uint64_t v;
        if (cJSON_IsNumber(d) && d->valuedouble < 0)
            return al_errf(err, "%s: negative dimension %g in shape of tensor '%s'", path, d->valuedouble, nm);
        if (json_uint(d, &v) != 0)
            return al_errf(err, "%s: shape of tensor '%s' has a non-integer dimension", path, nm);
        if (v && count > UINT64_MAX / v)
            return al_errf(err, "%s: shape of tensor '%s' is too large", path, nm);
        count *= v;
        t->shape[i] = (int64_t)v;
    }

    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || json_uint(off->child, &b) != 0 ||
        json_uint(off->child->next, &en) != 0)
        return al_errf(err, "%s: data_offsets of tensor '%s' must be two non-negative integers", path, nm);
    if (en < b) return al_errf(err, "%s: data_offsets of tensor '%s' are out of order [%" PRIu64 ", %" PRIu64 "]",
                               path, nm, b, en);
    size_t esz = al_dtype_size(t->dtype);
    if (count > UINT64_MAX / esz || count * esz != en - b)
        return al_errf(err, "%s: tensor '%s' spans %" PRIu64 " bytes but its shape and dtype %s need %" PRIu64,
                       path, nm, en - b, al_dtype_name(t->dtype), count > UINT64_MAX / esz ? UINT64_MAX : count * esz);
    t->offset = (size_t)b;
    t->nbytes = (size_t)(en - b);
    return 0;
}

static int cmp_offset(const void *x, const void *y) {
    const al_st_tensor *a = *(al_st_tensor *const *)x, *b = *(al_st_tensor *const *)y;
    return a->offset < b->offset ? -1 : a->offset > b->offset ? 1 : (a->nbytes > b->nbytes) - (a->nbytes < b->nbytes);
}

static int cmp_name(const void *x, const void *y) {
    return strcmp((*(al_st_tensor *const *)x)->name, (*(al_st_tensor *const *)y)->name);
}

/* Checks across all tensors: inside the buffer, no overlaps, unique names. */
static int check_layout(const char *path, al_st_file *f, al_err *err) {
    int n = f->n_tensors;
    if (n == 0) return 0;
    al_st_tensor **p = malloc((size_t)n * sizeof *p);
    if (!p) return al_errf(err, "%s: out of memory", path);
    for (int i = 0; i < n; i++) p[i] = &f->tensors[i];
    int rc = 0;
    qsort(p, (size_t)n, sizeof *p, cmp_name);
    for (int i = 1; i < n && !rc; i++)
        if (strcmp(p[i - 1]->name, p[i]->name) == 0)
            rc = al_errf(err, "%s: duplicate tensor name '%s'", path, p[i]->name);
    qsort(p, (size_t)n, sizeof *p, cmp_offset);
    for (int i = 0; i < n && !rc; i++) {
        const al_st_tensor *t = p[i];
        if (t->offset > f->data_len || t->nbytes > f->data_len - t->offset)
            rc = al_errf(err, "%s: tensor '%s' bytes [%zu, %zu) lie outside the %zu-byte data buffer", path,
                         t->name, t->offset, t->offset + t->nbytes, f->data_len);
        else if (i > 0 && t->offset < p[i - 1]->offset + p[i - 1]->nbytes)
            rc = al_errf(err, "%s: tensors '%s' and '%s' overlap", path, p[i - 1]->name, t->name);
    }
    free(p);
    return rc;
}

/* Parses the JSON header (already located inside f->blob) into f->tensors. */
static int parse_header(const char *path, al_st_file *f, const char *hdr, size_t hlen, al_err *err) {
    const char *end = NULL;
    const unsigned long mark = al_json_mark();
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    if (!root)
        return al_errf(err, al_json_failed_since(mark) ? "%s: out of memory reading the header"
                                                         : "%s: header is not valid JSON", path);
    int rc = 0;
    for (const char *q = end; q && q < hdr + hlen; q++)  /* only padding may follow */
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            rc = al_errf(err, "%s: header has trailing bytes after the JSON object", path);
            break;
        }
    if (!rc && !cJSON_IsObject(root)) rc = al_errf(err, "%s: header is not a JSON object", path);
    int n = 0;
    if (!rc)
        for (const cJSON *e = root->child; e; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
    if (!rc && n > 0 && !(f->tensors = calloc((size_t)n, sizeof *f->tensors)))
        rc = al_errf(err, "%s: out of memory", path);
    for (const cJSON *e = rc ? NULL : root->child; e && !rc; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        al_st_tensor *t = &f->tensors[f->n_tensors];
        if (!(t->name = strdup(e->string))) {
            rc = al_errf(err, "%s: out of memory", path);
            break;
        }
        f->n_tensors++;
        rc = parse_entry(path, e, t, err);
    }
    cJSON_Delete(root);
    return rc ? rc : check_layout(path, f, err);
}

/* Validates the file in f->blob (f->blob_len bytes): header length, JSON,
 * every entry and the layout; sets data/data_len and the tensor table. */
static int st_parse(al_st_file *f, const char *path, al_err *err) {
    if (f->blob_len < 8)
        return al_errf(err, "%s: file is %zu bytes, too short for a safetensors header", path, f->blob_len);
    uint64_t hlen;
    memcpy(&hlen, f->blob, 8); /* little-endian u64 */
    if (hlen > AL_ST_MAX_HEADER)
        return al_errf(err, "%s: header length %" PRIu64 " is implausibly large (corrupt file?)", path, hlen);
    if (hlen > f->blob_len - 8)
        return al_errf(err, "%s: header length %" PRIu64 " exceeds the file size %zu (truncated file?)", path, hlen,
                       f->blob_len);
    f->data = f->blob + 8 + hlen;
    f->data_len = f->blob_len - 8 - (size_t)hlen;
    return parse_header(path, f, f->blob + 8, (size_t)hlen, err);
}

int al_st_open(al_st_file *f, const char *path, al_err *err) {
    memset(f, 0, sizeof *f);
    if (al_read_file(path, &f->blob, &f->blob_len, err) != 0) return -1;
    if (st_parse(f, path, err) == 0) return 0;
    al_st_close(f);
    return -1;
}

int al_st_open_map(al_st_file *f, const char *path, al_err *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return al_errf(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return al_errf(err, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return al_errf(err, "%s: not a regular file", path);
    }
    if (st.st_size < 8) {
        close(fd);
        return al_errf(err, "%s: file is %lld bytes, too short for a safetensors header", path, (long long)st.st_size);
    }
    if ((unsigned long long)st.st_size > SIZE_MAX) {
        close(fd);
        return al_errf(err, "%s: file too large to map", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (p == MAP_FAILED) return al_errf(err, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size, strerror(e));
    f->blob = p;
    f->blob_len = (size_t)st.st_size;
    f->mapped = 1;
    if (st_parse(f, path, err) == 0) return 0;
    al_st_close(f);
    return -1;
}

void al_st_close(al_st_file *f) {
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->mapped) {
        if (f->blob) munmap(f->blob, f->blob_len);
    } else {
        free(f->blob);
    }
    memset(f, 0, sizeof *f);
}

const al_st_tensor *al_st_find(const al_st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *al_st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    int cut = al_strfmt(buf, cap, "[");
    for (int i = 0; i < ndim && !cut; i++)
        cut = al_strfmt(buf + strlen(buf), cap - strlen(buf), "%s%" PRId64, i ? ", " : "", shape[i]);
    if (!cut) al_strfmt(buf + strlen(buf), cap - strlen(buf), "]");
    return buf;
}

int al_st_read_f32(const al_st_file *f, const char *name, float *dst, int ndim, const int64_t *shape,
                   al_err *err) {
    const al_st_tensor *t = al_st_find(f, name);
    if (!t) return al_errf(err, "missing tensor '%s'", name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char a[AL_ST_SHAPE_STR_LEN], b[AL_ST_SHAPE_STR_LEN];
        return al_errf(err, "tensor '%s' has shape %s, expected %s", name,
                       al_st_shape_str(a, sizeof a, t->ndim, t->shape), al_st_shape_str(b, sizeof b, ndim, shape));
    }
    const char *src = f->data + t->offset;
    size_t n = t->nbytes / al_dtype_size(t->dtype);
    switch (t->dtype) {
    case AL_DT_F32:
        if (t->nbytes) memcpy(dst, src, t->nbytes);
        break;
    case AL_DT_F16:
    case AL_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = t->dtype == AL_DT_F16 ? al_f16_to_f32(h) : al_bf16_to_f32(h);
        }
        break;
    case AL_DT_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        break;
    default:
        return al_errf(err, "tensor '%s' has dtype %s, expected a floating-point dtype", name, al_dtype_name(t->dtype));
    }
    return 0;
}

/* ---- writer ---- */

/* Appends a JSON integer exactly (cJSON's own number printing goes through
 * double and could switch to exponent notation). */
static int add_int(cJSON *arr, uint64_t v) {
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, v);
    cJSON *x = cJSON_CreateRaw(s);
    return al_json_push(arr, x) ? 0 : -1;
}

/* Builds the header JSON text (unpadded); caller frees with cJSON_free. */
static char *build_header(const char *path, const al_st_out_tensor *ts, int n, const char *const *meta_kv,
                          int n_meta, al_err *err) {
    const unsigned long mark = al_json_mark();
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    if (ok && n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        ok = m != NULL;
        for (int i = 0; ok && i < n_meta; i++)
            ok = cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]) != NULL;
    }
    uint64_t off = 0;
    for (int i = 0; ok && i < n; i++) {
        uint64_t count = 1;
        for (int d = 0; d < ts[i].ndim; d++) count *= (uint64_t)ts[i].shape[d];
        /* key order as in files written by the reference library */
        cJSON *e = cJSON_AddObjectToObject(root, ts[i].name);
        ok = e && cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *sh = ok ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *of = sh ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        ok = ok && sh && of;
        for (int d = 0; ok && d < ts[i].ndim; d++) ok = add_int(sh, (uint64_t)ts[i].shape[d]) == 0;
        ok = ok && add_int(of, off) == 0 && add_int(of, off + 4 * count) == 0;
        off += 4 * count;
    }
    char *s = ok ? al_json_print(root, 0, mark) : NULL;
    cJSON_Delete(root);
    if (!s) al_errf(err, "%s: out of memory building safetensors header", path);
    return s;
}

/* Checks what the format cannot represent before anything is written. */
static int check_out_tensors(const char *path, const al_st_out_tensor *ts, int n, al_err *err) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const al_st_out_tensor *t = &ts[i];
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0)
            return al_errf(err, "%s: tensor %d has an invalid name", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(ts[j].name, t->name) == 0) return al_errf(err, "%s: duplicate tensor name '%s'", path, t->name);
        if (t->ndim < 0 || t->ndim > AL_ST_MAX_DIMS)
            return al_errf(err, "%s: tensor '%s' has %d dims, at most %d supported", path, t->name, t->ndim,
                           AL_ST_MAX_DIMS);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) return al_errf(err, "%s: tensor '%s' has a negative dimension", path, t->name);
            if (t->shape[d] && count > (UINT64_MAX / 8) / (uint64_t)t->shape[d])
                return al_errf(err, "%s: tensor '%s' is too large", path, t->name);
            count *= (uint64_t)t->shape[d];
        }
        if (count && !t->data) return al_errf(err, "%s: tensor '%s' has no data", path, t->name);
        if (4 * count > SIZE_MAX - total) return al_errf(err, "%s: tensors are too large", path);
        total += 4 * count;
    }
    return 0;
}

int al_st_write_f32(const char *path, const al_st_out_tensor *tensors, int n, const char *const *meta_kv,
                    int n_meta, al_err *err) {
    if (n < 0 || (n > 0 && !tensors) || n_meta < 0 || (n_meta > 0 && !meta_kv))
        return al_errf(err, "%s: invalid arguments", path);
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i]) return al_errf(err, "%s: metadata entry %d is NULL", path, i / 2);
    if (check_out_tensors(path, tensors, n, err) != 0) return -1;
    char *hdr = build_header(path, tensors, n, meta_kv, n_meta, err);
    if (!hdr) return -1;
    size_t hl = strlen(hdr);
    size_t pad = (8 - hl % 8) % 8;  /* keeps the data buffer 8-byte aligned */
    uint64_t hlen = hl + pad;
    static const char spaces[8] = "        ";
    al_afile a;
    int rc = al_afile_open(&a, path, err);
    if (rc == 0) {
        al_afile_write(&a, &hlen, 8, err);  /* failures latch; commit reports them */
        al_afile_write(&a, hdr, hl, err);
        al_afile_write(&a, spaces, pad, err);
        for (int i = 0; i < n; i++) {
            size_t count = 1;
            for (int d = 0; d < tensors[i].ndim; d++) count *= (size_t)tensors[i].shape[d];
            al_afile_write(&a, tensors[i].data, 4 * count, err);
        }
        rc = al_afile_commit(&a, err);
        al_afile_abort(&a);
    }
    cJSON_free(hdr);
    return rc;
}
