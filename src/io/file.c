/*
 * file.c: whole-file reads and crash-safe (atomic) writes; and the check
 * that a JSON number read from a file fits the integer it is stored in.
 *
 * Every file attnlab produces goes through al_afile so that a crash or kill
 * leaves either the previous file or the complete new one: data goes to
 * "<path>.tmp.<pid>", is fsync'd, renamed over <path>, and the parent
 * directory is fsync'd so the rename itself is durable.
 */
#include "io.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads the whole file; sized from fstat when possible, but grows as needed so
 * pipes and files that change size while read still work. */
int al_read_file(const char *path, char **data, size_t *len, al_err *err) {
    *data = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return al_errf(err, "%s: %s", path, strerror(errno));
    struct stat st;
    size_t cap = 1 << 16, n = 0;
    if (fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size < SIZE_MAX - 1)
        cap = (size_t)st.st_size + 1;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return al_errf(err, "%s: out of memory reading %zu bytes", path, cap);
    }
    for (;;) {
        if (n + 1 >= cap) {  /* keep room for the NUL */
            size_t ncap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
            char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) {
                free(buf);
                fclose(fp);
                return al_errf(err, "%s: out of memory reading file", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp)) {
                int e = errno;
                free(buf);
                fclose(fp);
                return al_errf(err, "%s: %s", path, strerror(e ? e : EIO));
            }
            break;
        }
    }
    fclose(fp);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

/* Releases everything an afile holds and deletes its temp file (if any). */
static void afile_cleanup(al_afile *a) {
    if (a->f) fclose(a->f);
    if (a->tmp_path) unlink(a->tmp_path);
    free(a->tmp_path);
    free(a->path);
    a->f = NULL;
    a->tmp_path = NULL;
    a->path = NULL;
}

/* Records a failure "<path>: <strerror>", then cleans up. After this, further
 * writes/commit return -1 without overwriting err, so callers may chain
 * several writes and check only the commit. */
static int afile_fail(al_afile *a, int errnum, al_err *err) {
    al_errf(err, "%s: %s", a->path ? a->path : "(atomic file)", strerror(errnum ? errnum : EIO));
    a->failed = 1;
    afile_cleanup(a);
    return -1;
}

int al_afile_open(al_afile *a, const char *path, al_err *err) {
    memset(a, 0, sizeof *a);
    size_t n = strlen(path) + 32;
    a->path = strdup(path);
    a->tmp_path = malloc(n);
    if (!a->path || !a->tmp_path) {
        free(a->path);
        free(a->tmp_path);
        a->path = a->tmp_path = NULL;
        a->failed = 1;
        return al_errf(err, "%s: out of memory", path);
    }
    snprintf(a->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp_path, "wb");
    if (!a->f) {
        int e = errno;
        free(a->tmp_path);  /* nothing was created: do not unlink */
        a->tmp_path = NULL;
        return afile_fail(a, e, err);
    }
    return 0;
}

int al_afile_write(al_afile *a, const void *data, size_t len, al_err *err) {
    if (a->failed) return -1;
    if (!a->f) return al_errf(err, "%s: write to an atomic file that is not open", a->path ? a->path : "?");
    if (len && fwrite(data, 1, len, a->f) != len) return afile_fail(a, errno, err);
    return 0;
}

/* fsync of the directory makes the rename durable. Filesystems that cannot
 * sync directories (EINVAL) are tolerated. The directory's name is written
 * into buf (the temp path's buffer, free once renamed, and longer than path),
 * so nothing after the rename can fail for want of memory. */
static int fsync_parent_dir(const char *path, char *buf, al_err *err) {
    const char *slash = strrchr(path, '/');
    const size_t n = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    memcpy(buf, slash ? path : ".", n);
    buf[n] = '\0';
    int fd = open(buf, O_RDONLY | O_DIRECTORY);
    int rc = 0;
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        rc = al_errf(err, "%s: syncing directory %s: %s", path, buf, strerror(errno));
    if (fd >= 0) close(fd);
    return rc;
}

int al_afile_commit(al_afile *a, al_err *err) {
    if (a->failed) return -1;
    if (!a->f) return al_errf(err, "%s: commit of an atomic file that is not open", a->path ? a->path : "?");
    FILE *f = a->f;
    a->f = NULL;
    int e = 0;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) e = errno;
    if (fclose(f) != 0 && !e) e = errno;
    if (e) return afile_fail(a, e, err);
    if (rename(a->tmp_path, a->path) != 0) return afile_fail(a, errno, err);
    char *buf = a->tmp_path; /* renamed away: nothing left to remove */
    a->tmp_path = NULL;
    int rc = fsync_parent_dir(a->path, buf, err);
    free(buf);
    afile_cleanup(a);
    return rc;
}

void al_afile_abort(al_afile *a) { afile_cleanup(a); }

int al_write_file_atomic(const char *path, const void *data, size_t len, al_err *err) {
    al_afile a;
    if (al_afile_open(&a, path, err) != 0) return -1;
    if (al_afile_write(&a, data, len, err) != 0 || al_afile_commit(&a, err) != 0) {
        al_afile_abort(&a);
        return -1;
    }
    return 0;
}

/* The pid of a temp file's name "NAME.tmp.PID" (0: not such a name). */
static long tmp_name_pid(const char *name) {
    const char *t = strstr(name, ".tmp."), *next;
    if (!t) return 0;
    while ((next = strstr(t + 1, ".tmp."))) t = next; /* the last one */
    long pid;
    return t > name && al_parse_int(t + 5, &pid) == 0 && pid > 0 ? pid : 0;
}

int al_afile_remove_stale(const char *dir, int *removed, al_err *err) {
    if (removed) *removed = 0;
    DIR *d = opendir(dir);
    if (!d) return al_errf(err, "%s: %s", dir, strerror(errno));
    int rc = 0;
    const struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        const long pid = tmp_name_pid(e->d_name);
        if (!pid || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
            rc = al_errf(err, "%s/%s: removing a stale temp file: %s", dir, e->d_name, strerror(errno));
        else if (removed)
            (*removed)++;
    }
    closedir(d);
    return rc;
}
