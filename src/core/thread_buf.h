/*
 * thread_buf.h: a buffer each thread owns, grown on demand and kept between
 * calls (allocating per call costs page faults), freed when the thread
 * exits: the workspaces of the attention kernels (attn/score.c) and of the
 * BF16 products (nn/precision.c).
 *
 * Data: the caller keeps one `static _Thread_local al_thread_buf` per kind
 * of buffer; this module keeps one pthread key per kind, whose destructor
 * frees a thread's buffer at its exit (the key's value always points at the
 * thread's current buffer).
 */
#ifndef AL_THREAD_BUF_H
#define AL_THREAD_BUF_H

#include <stddef.h>

/* The kinds of per-thread buffers (one exit destructor each). */
typedef enum {
    AL_THREAD_BUF_ATTENTION,
    AL_THREAD_BUF_BF16,        /* the BF16 products' workspace */
    AL_THREAD_BUF_BF16_SHARED, /* an operand rounded once for several products */
    AL_THREAD_BUF_BF16_SPLIT,  /* compensated BF16 products' low parts */
    AL_THREAD_BUF_KINDS
} al_thread_buf_kind;

typedef struct al_thread_buf {
    void *buf; /* 64-byte aligned */
    size_t cap; /* bytes */
} al_thread_buf;

/* b's buffer (the calling thread's own, of kind `kind`), grown when smaller
 * than `need` bytes to `want` bytes (want < need counts as need; rounded up
 * to 64); NULL if memory ran out (b is then empty). */
void *al_thread_buf_get(al_thread_buf *b, al_thread_buf_kind kind, size_t need, size_t want);
/* Frees b's buffer now. */
void al_thread_buf_release(al_thread_buf *b, al_thread_buf_kind kind);

#endif
