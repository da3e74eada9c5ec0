/*
 * dist.h: data-parallel training over MPI (docs/distributed.md).
 *
 * A process started by mpirun is one rank of N; every rank holds the whole
 * model, draws the whole global batch (the same data RNG everywhere) and
 * computes the gradient of its share of it. The state is process-wide: the
 * rank, the rank count and the communicator, set once by al_dist_init.
 *
 * The gradient of a step is the sum over S shards of the global batch (B/S
 * items each, in batch order), computed shard by shard into m->g and summed
 * in one fixed order: the left-complete binary tree over the S shard
 * gradients (a range of n shards splits at the largest power of two below
 * n). A rank owns shards [r*S/N, (r+1)*S/N): it sums its own subtree with a
 * stack of partial sums, and the ranks' partial sums are combined by a
 * reduce-scatter + allgather over flat buckets of the gradient arena in which
 * each bucket slice's owner adds the N contributions in the same tree order.
 * When S/N is a power of two every rank's range is a subtree of the one tree,
 * so N = 1, 2, 4, ... ranks give the same gradient, weights and losses bit
 * for bit. S = 1 (one pass over the whole batch) is the plain run's step.
 *
 * The cross-rank sum runs over flat buckets of the arena taken from its end
 * (the head and last layer first). By default (ATTNLAB_OVERLAP unset or not
 * 0) a communication thread reduces each bucket as soon as the backward of
 * the rank's last shard has finished the layers it holds, while the backward
 * goes on; each element still gets the same additions in the same order, so
 * overlap on or off (even mixed across ranks) gives the same bits.
 *
 * Heartbeat: every rank beats to rank 0 and rank 0 to every rank on a
 * communicator of their own, from a thread of its own; a rank not heard from
 * for ATTNLAB_HEARTBEAT_S seconds (default 10, 0: off; rank 0's value holds)
 * is taken as hung, and the waits of this module's collectives give up.
 *
 * A build without MPI (AL_HAVE_MPI undefined) keeps the same API: one rank,
 * and al_dist_init refuses to run as one of mpirun's N copies.
 */
#ifndef AL_DIST_H
#define AL_DIST_H

#include <signal.h>

#include "train.h"

/* Joins the MPI job when mpirun started this process (its OMPI_* / PMIX_*
 * environment); otherwise a no-op, one rank. Errors: MPI fails to start, or a
 * build without MPI was started by mpirun. Call once, before any thread. */
int al_dist_init(al_err *err);
/* Leaves the MPI job (no-op when al_dist_init did not join one): waits for
 * every rank (the heartbeat still watching), then stops the heartbeat. */
void al_dist_finalize(void);
/* Stops the heartbeat thread without leaving the job: for a process that
 * exits on an error, the others then being stopped by mpirun. */
void al_dist_stop_heartbeat(void);
/* This process's rank (0 when not under mpirun) and the rank count (1). */
int al_dist_rank(void);
int al_dist_size(void);
/* Whether this process is one rank of an MPI job (also with -np 1). */
int al_dist_active(void);
/* What kind of failure the last error of this module's collective calls was:
 * LOCAL: this rank's own (it exits and mpirun stops the others); SHARED:
 * every rank reported it alike (ranks that differ, shards that do not fit the
 * ranks, resume failing on rank 0): rank 0 says it and all leave the job;
 * PEER: another rank stopped (a signal came while waiting for it) or hangs
 * (the heartbeat): rank 0 says it (rank 1 when rank 0 hangs: LOCAL there),
 * and nobody can leave the job cleanly; GONE: this rank was itself stopped
 * longer than the heartbeat allows, the others have said so: it says nothing. */
typedef enum { AL_DIST_ERR_LOCAL, AL_DIST_ERR_SHARED, AL_DIST_ERR_PEER, AL_DIST_ERR_GONE } al_dist_error;
al_dist_error al_dist_error_kind(void);
/* The flag a signal handler sets (NULL: none): a collective that waits on a
 * rank that does not come gives up shortly after it is set (mpirun signals
 * every rank when one dies, and kills them a second later). */
void al_dist_watch(volatile sig_atomic_t *flag);

/* FNV-1a, 64 bits, over n bytes continuing from h (start: AL_DIST_HASH0). */
#define AL_DIST_HASH0 0xcbf29ce484222325ULL
uint64_t al_dist_hash(uint64_t h, const void *p, size_t n);
/* Refuses ranks whose hash differs from rank 0's: every rank gets the same
 * one-line error naming the first differing rank and `what`. Collective. */
int al_dist_check_same(uint64_t hash, const char *what, al_err *err);
/* Rank 0's bytes to every rank. Collective. */
int al_dist_bcast(void *buf, size_t bytes, al_err *err);
/* The largest of every rank's v, on every rank. Collective. */
int al_dist_max(int v, int *max, al_err *err);
/* Refuses an MPI job whose ranks differ in training settings, model config
 * or data (data_hash: the task's). Collective; a no-op on one rank. */
int al_dist_check_run(const al_train_opts *o, const al_model *m, uint64_t data_hash, al_err *err);
/* Resume: rank 0 read the training state (*failed: it could not) and every
 * rank gets it: weights, both moments, step, data RNG. Collective; fails on
 * every rank when rank 0 failed (rank 0 keeps its own err). */
int al_dist_share_state(int *failed, al_model *m, float *m1, float *m2, int *step, al_rng *rng, al_err *err);

/* The sharded, data-parallel step. `pass` goes to al_train_step, whose own
 * zeroing of m->g it makes redundant: its forward runs this rank's shards
 * (select, forward, backward each), sums them and the ranks' sums as above,
 * scales the sum by 1/S and returns the global mean loss (the shards' means
 * summed in shard order / S); its backward does nothing. A failed
 * communication returns NAN with `failed` set and err filled. */
typedef void (*al_shard_select_fn)(void *ctx, int shard, int n_shards);
typedef struct al_grad_shards {
    al_step_pass pass;
    al_model *m;
    al_step_pass inner;            /* the task's pass over the selected shard */
    al_shard_select_fn select;     /* points inner at shard j of n (its acts sized B/S) */
    void *select_ctx;
    int shards, first, count;      /* S; this rank's first shard and how many */
    int depth;                     /* partial sums on the stack */
    float **stack;                 /* [log2(count)+1] partial sums of whole subtrees */
    int *stack_n;                  /* shards in each */
    double *losses;                /* [S] the shards' mean losses */
    float *recv;                   /* [N x bucket slice] contributions to this rank's slice */
    int *slices;                   /* [4N] the buckets' send and receive counts and offsets */
    float **parts;                 /* [N] the contributions in recv */
    size_t bucket;                 /* floats per bucket of the gradient arena */
    double comm_s;                 /* seconds the last step waited for communication after its backward */
    int failed;
    al_err err;
    size_t n_buckets;              /* buckets of the arena, counted from its end */
    size_t frontier;               /* the last shard's gradients from here on are this rank's final sum */
    struct al_dist_comm *comm;     /* the overlapped reduction's thread and queue (NULL: reduced after the backward) */
    size_t early_buckets;          /* of n_buckets, handed to that thread before the last step's backward ended */
    double comm_busy_s;            /* seconds the last step's bucket reductions took, during the backward or after */
} al_grad_shards;

/* Plans S shards of a batch of `batch` items on this rank (S must divide
 * batch and be a multiple of the rank count; each rank's share of S must be a
 * power of two for bit-identity across rank counts, else only the order of
 * the cross-rank additions differs). */
int al_grad_shards_init(al_grad_shards *s, al_model *m, const al_step_pass *inner, al_shard_select_fn select,
                        void *select_ctx, int shards, int batch, al_err *err);
void al_grad_shards_free(al_grad_shards *s);
/* The shard count a run uses: o->shards when given, else 1 for a plain
 * process and one shard per item under mpirun (any rank count dividing the
 * batch, and a resume with another one, gives the same numbers). */
int al_dist_shards(const al_train_opts *o);

#endif
