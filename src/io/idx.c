/*
 * idx.c: IDX files (the format of MNIST and Fashion-MNIST, io.h), read
 * through zlib's gz* functions so that the .gz files Debian ships and plain
 * files are read the same way (gzread passes non-gzip data through).
 *
 * Every way a file can be damaged ends in one line naming it: missing or
 * unreadable, corrupt gzip stream, truncated header or data, wrong magic,
 * unsupported type, zero or absurd dimensions, or bytes left over after the
 * data the dimensions announce.
 */
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Largest array accepted (bytes): far above Fashion-MNIST's 47 MB, far below
 * what would overflow size arithmetic. */
#define IDX_MAX_BYTES ((size_t)1 << 34)

/* Reads exactly n bytes; 1 = got them, 0 = the file ended first (*got says how
 * many came), -1 = zlib reported an error (err filled). */
static int read_exact(gzFile f, void *buf, size_t n, size_t *got, const char *path, al_err *err) {
    size_t done = 0;
    while (done < n) {
        size_t want = n - done > (1u << 30) ? (1u << 30) : n - done;
        int r = gzread(f, (char *)buf + done, (unsigned)want);
        if (r < 0) {
            int code;
            const char *msg = gzerror(f, &code);
            *got = done;
            return al_errf(err, "%s: not a readable IDX file (gzip: %s)", path, msg && *msg ? msg : "read error");
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    *got = done;
    if (done < n) {
        /* zlib flags a stream cut off mid-member as an error after the last data */
        int code;
        const char *msg = gzerror(f, &code);
        if (code != Z_OK && code != Z_BUF_ERROR)
            return al_errf(err, "%s: not a readable IDX file (gzip: %s)", path, msg ? msg : "read error");
        return 0;
    }
    return 1;
}

/* The n data bytes into x->data, in a buffer that grows (doubling from
 * 1 MiB) as they arrive, so that a short corrupt file whose header claims
 * gigabytes costs what it holds, not what it claims. 1, or -1 with err. */
static int read_data(gzFile f, al_idx *x, const char *path, al_err *err) {
    size_t have = 0, cap = 0, got = 0;
    for (;;) {
        const size_t want = cap == 0 ? (x->n < ((size_t)1 << 20) ? x->n : (size_t)1 << 20)
                                     : (cap > x->n / 2 ? x->n : 2 * cap);
        uint8_t *grown = realloc(x->data, want);
        if (!grown) return al_errf(err, "%s: out of memory for %zu bytes", path, want);
        x->data = grown, cap = want;
        const int rc = read_exact(f, x->data + have, cap - have, &got, path, err);
        have += got;
        if (rc < 0) return -1;
        if (rc == 0) return al_errf(err, "%s: truncated IDX file (%zu of %zu data bytes)", path, have, x->n);
        if (have == x->n) return 1;
    }
}

int al_idx_read(const char *path, al_idx *x, al_err *err) {
    memset(x, 0, sizeof *x);
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return al_errf(err, "%s: %s", path, errno ? strerror(errno) : "cannot open");
    gzbuffer(f, 1 << 17);
    uint8_t hdr[4 + 4 * AL_IDX_MAX_DIMS];
    size_t got = 0;
    int rc = read_exact(f, hdr, 4, &got, path, err);
    if (rc == 0) rc = al_errf(err, "%s: truncated IDX file (%zu of 4 header bytes)", path, got);
    if (rc < 0) goto fail;
    if (hdr[0] != 0 || hdr[1] != 0) {
        al_errf(err, "%s: not an IDX file (magic %02x %02x %02x %02x, expected 00 00 08 NN)", path, hdr[0], hdr[1],
                hdr[2], hdr[3]);
        goto fail;
    }
    if (hdr[2] != 0x08) {
        al_errf(err, "%s: IDX type 0x%02x is not supported (only 0x08, unsigned bytes)", path, hdr[2]);
        goto fail;
    }
    x->ndim = hdr[3];
    if (x->ndim < 1 || x->ndim > AL_IDX_MAX_DIMS) {
        al_errf(err, "%s: IDX file with %d dimensions (1..%d supported)", path, x->ndim, AL_IDX_MAX_DIMS);
        goto fail;
    }
    rc = read_exact(f, hdr + 4, 4 * (size_t)x->ndim, &got, path, err);
    if (rc == 0) rc = al_errf(err, "%s: truncated IDX file (header ends after %zu bytes)", path, 4 + got);
    if (rc < 0) goto fail;
    x->n = 1;
    for (int i = 0; i < x->ndim; i++) {
        const uint8_t *b = hdr + 4 + 4 * i;
        x->dims[i] = (int64_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]);
        if (x->dims[i] == 0 || (uint64_t)x->dims[i] > IDX_MAX_BYTES / x->n) {
            al_errf(err, "%s: IDX dimension %d is %lld (empty or too large)", path, i, (long long)x->dims[i]);
            goto fail;
        }
        x->n *= (size_t)x->dims[i];
    }
    rc = read_data(f, x, path, err);
    if (rc < 0) goto fail;
    uint8_t extra;
    rc = read_exact(f, &extra, 1, &got, path, err);
    if (rc < 0) goto fail;
    if (rc == 1) {
        al_errf(err, "%s: inconsistent IDX file (more than the %zu data bytes its dimensions say)", path, x->n);
        goto fail;
    }
    gzclose(f);
    return 0;
fail:
    gzclose(f);
    al_idx_free(x);
    return -1;
}

void al_idx_free(al_idx *x) {
    if (!x) return;
    free(x->data);
    memset(x, 0, sizeof *x);
}
