/*
 * npy.c: NumPy .npy files of float32, the format attnlab uses to hand arrays
 * to and from the Python reference tests (np.load / np.save read them
 * directly).
 *
 * Only little-endian float32 in C order is supported, which is all attnlab
 * needs; anything else is rejected with a clear message rather than being
 * converted. Assumes a little-endian host (checked at compile time).
 */
#include "io.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

/* numpy pads the header so that the shape's first entry can grow in place to
 * this many digits; doing the same makes our headers byte-identical to
 * np.save's. */
#define NPY_GROWTH_DIGITS 21

/* Writes a v1.0 file: magic, version, u16 header length, the Python dict
 * literal padded with spaces and '\n' so the data starts 64-byte aligned. */
int al_npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape, al_err *err) {
    if (ndim < 0 || ndim > AL_ST_MAX_DIMS)
        return al_errf(err, "%s: %d dims, at most %d supported", path, ndim, AL_ST_MAX_DIMS);
    /* at most 51 + 22 x AL_ST_MAX_DIMS + 5 bytes of dict, NPY_GROWTH_DIGITS
     * spaces, 64 of padding and '\n': under 320 */
    char hdr[512];
    size_t count = 1;
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return al_errf(err, "%s: negative dimension %" PRId64, path, shape[i]);
        if (shape[i] && count > (SIZE_MAX / 4) / (uint64_t)shape[i]) return al_errf(err, "%s: array too large", path);
        count *= (size_t)shape[i];
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%" PRId64, i ? ", " : "", shape[i]);
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    if (count && !data) return al_errf(err, "%s: no data", path);
    if (ndim > 0) {
        int digits = snprintf(NULL, 0, "%" PRId64, shape[0]);
        for (int i = digits; i < NPY_GROWTH_DIGITS; i++) hdr[n++] = ' ';
    }
    int pad = 64 - (10 + n + 1) % 64;  /* 1..64, as numpy does */
    memset(hdr + n, ' ', (size_t)pad);
    n += pad;
    hdr[n++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xFF), (unsigned char)(n >> 8)};
    al_afile a;
    if (al_afile_open(&a, path, err) != 0) return -1;
    al_afile_write(&a, pre, sizeof pre, err);  /* failures latch; commit reports them */
    al_afile_write(&a, hdr, (size_t)n, err);
    al_afile_write(&a, data, 4 * count, err);
    int rc = al_afile_commit(&a, err);
    al_afile_abort(&a);
    return rc;
}

/* ---- reading: a tiny parser for the header's Python dict literal ---- */

typedef struct {
    const char *p, *end;
} cur;

static void skip_ws(cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* Consumes ch (after whitespace) if it is next. */
static int eat(cur *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string ('...' or "...", no escapes) into out. */
static int parse_str(cur *c, char *out, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= cap || *c->p == '\\') return -1;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return -1;
    c->p++;
    out[n] = '\0';
    return 0;
}

/* A Python tuple of non-negative ints: (), (n,), (a, b), (a, b,). */
static int parse_shape(cur *c, int *ndim, int64_t *shape) {
    if (!eat(c, '(')) return -1;
    *ndim = 0;
    while (!eat(c, ')')) {
        skip_ws(c);
        if (*ndim == AL_ST_MAX_DIMS || c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return -1;
            v = v * 10 + (*c->p++ - '0');
        }
        shape[(*ndim)++] = v;
        if (!eat(c, ',') && !(skip_ws(c), c->p < c->end && *c->p == ')')) return -1;
    }
    return 0;
}

int al_npy_read_f32(const char *path, float **data, int *ndim, int64_t *shape, al_err *err) {
    *data = NULL;
    char *buf;
    size_t len;
    if (al_read_file(path, &buf, &len, err) != 0) return -1;
    int rc = -1;
    size_t hstart, hlen = 0;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        al_errf(err, "%s: not an NPY file (bad magic)", path);
        goto done;
    }
    unsigned char major = (unsigned char)buf[6], minor = (unsigned char)buf[7];
    if (major == 1 && minor == 0) {
        hstart = 10;
        hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
    } else if (major == 2 && minor == 0 && len >= 12) {
        uint32_t h;
        memcpy(&h, buf + 8, 4);
        hstart = 12;
        hlen = h;
    } else {
        al_errf(err, "%s: unsupported NPY version %u.%u", path, major, minor);
        goto done;
    }
    if (hlen > len - hstart) {
        al_errf(err, "%s: NPY header length %zu exceeds the file (truncated?)", path, hlen);
        goto done;
    }

    cur c = {buf + hstart, buf + hstart + hlen};
    int have_descr = 0, have_order = 0, have_shape = 0, bad = !eat(&c, '{');
    char key[32], descr[32];
    while (!bad && !eat(&c, '}')) {
        if (parse_str(&c, key, sizeof key) != 0 || !eat(&c, ':')) {
            bad = 1;
            break;
        }
        if (strcmp(key, "descr") == 0) {
            bad = parse_str(&c, descr, sizeof descr) != 0;
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            skip_ws(&c);
            size_t left = (size_t)(c.end - c.p);
            if (left >= 5 && memcmp(c.p, "False", 5) == 0) {
                c.p += 5;
            } else if (left >= 4 && memcmp(c.p, "True", 4) == 0) {
                al_errf(err, "%s: Fortran-order NPY arrays are not supported", path);
                goto done;
            } else {
                bad = 1;
            }
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            bad = parse_shape(&c, ndim, shape) != 0;
            have_shape = 1;
        } else {
            bad = 1;
        }
        if (!bad && !eat(&c, ',') && !(skip_ws(&c), c.p < c.end && *c.p == '}')) bad = 1;
    }
    if (bad || !have_descr || !have_order || !have_shape) {
        al_errf(err, "%s: malformed NPY header", path);
        goto done;
    }
    if (strcmp(descr, "<f4") != 0) {
        al_errf(err, "%s: NPY dtype '%s' is not supported (need '<f4', float32)", path, descr);
        goto done;
    }
    size_t count = 1;
    for (int i = 0; i < *ndim; i++) {
        if (shape[i] && count > (SIZE_MAX / 4) / (uint64_t)shape[i]) {
            al_errf(err, "%s: NPY shape is too large", path);
            goto done;
        }
        count *= (size_t)shape[i];
    }
    size_t have = len - hstart - hlen;
    if (have != 4 * count) {
        al_errf(err, "%s: NPY data is %zu bytes, shape needs %zu (truncated?)", path, have, 4 * count);
        goto done;
    }
    *data = malloc(count ? 4 * count : 1);
    if (!*data) {
        al_errf(err, "%s: out of memory", path);
        goto done;
    }
    memcpy(*data, buf + hstart + hlen, 4 * count);
    rc = 0;
done:
    free(buf);
    return rc;
}
