/*
 * thread_buf.c: per-thread buffers that grow and are freed at thread exit
 * (thread_buf.h says what for).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "thread_buf.h"

static pthread_key_t keys[AL_THREAD_BUF_KINDS];
static int keys_ok[AL_THREAD_BUF_KINDS];
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void keys_make(void) {
    for (int k = 0; k < AL_THREAD_BUF_KINDS; k++) keys_ok[k] = pthread_key_create(&keys[k], free) == 0;
}

/* Points the thread's exit destructor of `kind` at b's current buffer. */
static void track(const al_thread_buf *b, al_thread_buf_kind kind) {
    pthread_once(&keys_once, keys_make);
    if (keys_ok[kind]) pthread_setspecific(keys[kind], b->buf);
}

void *al_thread_buf_get(al_thread_buf *b, al_thread_buf_kind kind, size_t need, size_t want) {
    if (b->buf && need <= b->cap) return b->buf;
    if (want < need) want = need;
    const size_t n = want <= SIZE_MAX - 63 ? (want + 63) & ~(size_t)63 : 0;
    free(b->buf); /* first: the old and new buffers never add up */
    b->buf = n ? aligned_alloc(64, n) : NULL;
    b->cap = b->buf ? n : 0;
    track(b, kind);
    return b->buf;
}

void al_thread_buf_release(al_thread_buf *b, al_thread_buf_kind kind) {
    free(b->buf);
    *b = (al_thread_buf){0};
    track(b, kind);
}
