/*
 * faults.c: injected allocation and write failures for attnlab_faults, a
 * test-only build of the command-line program (CMakeLists.txt links it with
 * -Wl,--wrap=SYMBOL for every function below). --wrap redirects only the
 * calls made by the objects linked into that executable, i.e. attnlab's own
 * library and CLI: libc, OpenBLAS, cairo and libgomp keep calling the real
 * functions, so a failure lands exactly where attnlab would see it and no
 * source file carries a test hook. cJSON's allocations are counted too:
 * attnlab installs its own allocator as cJSON's hook (src/io/json.c), and
 * that allocator's malloc call is attnlab's, so it is wrapped.
 *
 * The state is three counters (allocations, write points, fired faults),
 * advanced atomically (an OpenMP worker may allocate), and what the
 * environment asked for:
 *   ATTNLAB_FAULT_ALLOC=N   the N-th allocation call (1-based) returns NULL
 *                           with errno ENOMEM; every other call succeeds
 *   ATTNLAB_FAULT_WRITE=N   the N-th write point fails with errno ...
 *   ATTNLAB_FAULT_ERRNO=E   ... ENOSPC (default) or EIO
 *   ATTNLAB_FAULT_COUNT=F   at exit, F receives "allocs A\nwrites W\nfired K\n",
 *                           which is how a sweep learns the range of N
 *   ATTNLAB_FAULT_TRACE=F   F receives the call stack of the failed call
 *                           (addresses; `addr2line -e attnlab_faults` names them)
 * Allocation calls: malloc, calloc, realloc (a size of 0 included),
 * aligned_alloc, posix_memalign, strdup, strndup. Write points: fwrite,
 * fputs, fputc, fprintf, vfprintf, fflush, fclose of a stream open for
 * writing, write, fsync, rename; standard input, output and error are
 * neither counted nor failed (they are the terminal's, not a file attnlab
 * keeps). A failed fclose still closes the stream, as a real one does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
size_t __real_fwrite(const void *p, size_t size, size_t n, FILE *f);
int __real_fputs(const char *s, FILE *f);
int __real_fputc(int c, FILE *f);
int __real_vfprintf(FILE *f, const char *fmt, va_list ap);
int __real_fflush(FILE *f);
int __real_fclose(FILE *f);
ssize_t __real_write(int fd, const void *p, size_t n);
int __real_fsync(int fd);
int __real_rename(const char *from, const char *to);

/* What the environment asked for (read once) and what happened so far. */
static struct {
    int ready;
    long fail_alloc, fail_write; /* 0: none */
    int write_errno;
    const char *count_path, *trace_path;
    long allocs, writes, fired;
} st;

/* Reads the environment the first time a wrapper runs. Two threads may both
 * do it; they write the same values. */
static void setup(void) {
    if (__atomic_load_n(&st.ready, __ATOMIC_ACQUIRE)) return;
    const char *a = getenv("ATTNLAB_FAULT_ALLOC"), *w = getenv("ATTNLAB_FAULT_WRITE");
    const char *e = getenv("ATTNLAB_FAULT_ERRNO");
    st.fail_alloc = a ? atol(a) : 0;
    st.fail_write = w ? atol(w) : 0;
    st.write_errno = e && !strcmp(e, "EIO") ? EIO : ENOSPC;
    st.count_path = getenv("ATTNLAB_FAULT_COUNT");
    st.trace_path = getenv("ATTNLAB_FAULT_TRACE");
    __atomic_store_n(&st.ready, 1, __ATOMIC_RELEASE);
}

/* Records that the fault fired and, when asked, where (the stack as
 * addresses). errno is the caller's to set afterwards. */
static void fired(void) {
    __atomic_add_fetch(&st.fired, 1, __ATOMIC_RELAXED);
    if (!st.trace_path) return;
    void *frames[48];
    int n = backtrace(frames, 48);
    int fd = open(st.trace_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    backtrace_symbols_fd(frames, n, fd);
    close(fd);
}

/* Counts one allocation call; 1 when it is the one to fail (errno set). */
static int alloc_fails(void) {
    setup();
    long n = __atomic_add_fetch(&st.allocs, 1, __ATOMIC_RELAXED);
    if (n != st.fail_alloc) return 0;
    fired();
    errno = ENOMEM;
    return 1;
}

/* Counts one write point on descriptor fd (standard streams excepted); 1
 * when it is the one to fail (errno set). */
static int write_fails(int fd) {
    setup();
    if (fd >= 0 && fd <= 2) return 0;
    long n = __atomic_add_fetch(&st.writes, 1, __ATOMIC_RELAXED);
    if (n != st.fail_write) return 0;
    fired();
    errno = st.write_errno;
    return 1;
}

/* The counts, for the sweep (ATTNLAB_FAULT_COUNT), written at exit with the
 * real write so that they do not count themselves. */
__attribute__((destructor)) static void write_counts(void) {
    setup();
    if (!st.count_path) return;
    int fd = open(st.count_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    char buf[128];
    int n = snprintf(buf, sizeof buf, "allocs %ld\nwrites %ld\nfired %ld\n", st.allocs, st.writes, st.fired);
    if (n > 0 && __real_write(fd, buf, (size_t)n) < 0) n = -1;
    close(fd);
}

/* ---- allocations ---- */

void *__wrap_malloc(size_t n) { return alloc_fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return alloc_fails() ? NULL : __real_calloc(k, n); }
/* A failed realloc leaves p allocated, as the real one does. */
void *__wrap_realloc(void *p, size_t n) { return alloc_fails() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return alloc_fails() ? NULL : __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return alloc_fails() ? ENOMEM : __real_posix_memalign(p, a, n); }
char *__wrap_strdup(const char *s) { return alloc_fails() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return alloc_fails() ? NULL : __real_strndup(s, n); }

/* ---- writes ---- */

size_t __wrap_fwrite(const void *p, size_t size, size_t n, FILE *f) {
    return write_fails(fileno(f)) ? 0 : __real_fwrite(p, size, n, f);
}
int __wrap_fputs(const char *s, FILE *f) { return write_fails(fileno(f)) ? EOF : __real_fputs(s, f); }
int __wrap_fputc(int c, FILE *f) { return write_fails(fileno(f)) ? EOF : __real_fputc(c, f); }
int __wrap_vfprintf(FILE *f, const char *fmt, va_list ap) {
    return write_fails(fileno(f)) ? -1 : __real_vfprintf(f, fmt, ap);
}
int __wrap_fprintf(FILE *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = __wrap_vfprintf(f, fmt, ap);
    va_end(ap);
    return rc;
}
int __wrap_fflush(FILE *f) { return f && write_fails(fileno(f)) ? EOF : __real_fflush(f); }
int __wrap_fclose(FILE *f) {
    if (!__fwritable(f) || !write_fails(fileno(f))) return __real_fclose(f);
    const int e = errno;
    __real_fclose(f); /* the stream is gone either way */
    errno = e;
    return EOF;
}
ssize_t __wrap_write(int fd, const void *p, size_t n) { return write_fails(fd) ? -1 : __real_write(fd, p, n); }
int __wrap_fsync(int fd) { return write_fails(fd) ? -1 : __real_fsync(fd); }
int __wrap_rename(const char *from, const char *to) { return write_fails(-1) ? -1 : __real_rename(from, to); }
