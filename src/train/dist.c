/*
 * dist.c: data-parallel training over MPI (dist.h). Process-wide state: the
 * rank, the rank count and whether this process joined an MPI job. The step's
 * data structure (al_grad_shards) is a stack of whole-subtree partial sums of
 * shard gradients (sizes strictly decreasing from the bottom, like the bits of
 * a binary counter) plus one receive buffer for the bucketed reduce-scatter.
 */
#include "dist.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#ifdef AL_HAVE_MPI
#include <mpi.h>
#endif

static int dist_rank = 0, dist_size = 1, dist_joined = 0;
static al_dist_error dist_error_kind = AL_DIST_ERR_LOCAL;
static volatile sig_atomic_t *dist_interrupt; /* al_dist_watch's flag */

/* How long a collective may still wait after a signal: mpirun kills the ranks
 * of a job about one second after it sends them SIGTERM (when one rank dies). */
#define SIGNAL_GRACE_S 0.1
/* A collective polls; after waiting this long it yields the core between
 * polls, and later sleeps 0.2 ms between them. */
#define WAIT_YIELD_AFTER_S 0.001
#define WAIT_SLEEP_AFTER_S 0.05

/* Floats per bucket of the gradient arena: 16 MB, so the receive buffer
 * stays small and MPI's int counts never overflow. */
enum { BUCKET_FLOATS = 1 << 22 };

/* The size mpirun's environment announces (0: not started by mpirun). */
static int launcher_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

int al_dist_init(al_err *err) {
    const int announced = launcher_size();
    if (!announced || dist_joined) return 0;
#ifdef AL_HAVE_MPI
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return al_errf(err, "MPI could not start (started by mpirun with %d processes)", announced);
    /* failures come back as codes, turned into one-line errors */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &dist_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dist_size);
    dist_joined = 1;
    return 0;
#else
    return al_errf(err, "started by mpirun (%d processes), but this build has no MPI: rebuild with libopenmpi-dev "
                        "installed, or run it without mpirun",
                   announced);
#endif
}

void al_dist_finalize(void) {
#ifdef AL_HAVE_MPI
    if (dist_joined) MPI_Finalize();
#endif
    dist_joined = 0;
    dist_rank = 0;
    dist_size = 1;
}

int al_dist_rank(void) { return dist_rank; }
int al_dist_size(void) { return dist_size; }
int al_dist_active(void) { return dist_joined; }
al_dist_error al_dist_error_kind(void) { return dist_error_kind; }
void al_dist_watch(volatile sig_atomic_t *flag) { dist_interrupt = flag; }

uint64_t al_dist_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

#ifdef AL_HAVE_MPI
/* An MPI return code as a one-line error. */
static int mpi_fail(int rc, const char *what, al_err *err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return al_errf(err, "rank %d: MPI %s failed: %s (another rank may have stopped)", dist_rank, what, msg);
}

/* Waits for a started non-blocking collective (rc: what starting it
 * returned). Polls, so that a signal (al_dist_watch) while the others do not
 * come gives up after SIGNAL_GRACE_S: a rank that died makes mpirun signal
 * the rest, which then still say why they stop before it kills them. */
static int collective(int rc, MPI_Request *req, const char *what, al_err *err) {
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what, err);
    double signalled_at = 0;
    const double start = al_now();
    for (int done = 0, polls = 0; !done; polls++) {
        if ((rc = MPI_Test(req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return mpi_fail(rc, what, err);
        if (done) break;
        /* a long wait (rank 0 measuring, a slower rank) should not take a core from the ranks that work */
        if (polls % 64 == 63) {
            const double waited = al_now() - start;
            if (waited > WAIT_SLEEP_AFTER_S) nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
            else if (waited > WAIT_YIELD_AFTER_S) sched_yield();
        }
        if (!dist_interrupt || !*dist_interrupt) continue;
        if (!signalled_at) signalled_at = al_now();
        else if (al_now() - signalled_at > SIGNAL_GRACE_S) {
            dist_error_kind = AL_DIST_ERR_PEER;
            return al_errf(err, "another rank stopped or the job is being killed (signal %d while rank %d waited for "
                                "the others in the %s)",
                           (int)*dist_interrupt, dist_rank, what);
        }
    }
    return 0;
}
#endif

int al_dist_check_same(uint64_t hash, const char *what, al_err *err) {
#ifdef AL_HAVE_MPI
    if (!dist_joined || dist_size == 1) return 0;
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)dist_size);
    if (!all) return al_errf(err, "out of memory");
    MPI_Request req;
    if (collective(MPI_Iallgather(&hash, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD, &req), &req,
                   "hash allgather", err)) {
        free(all);
        return -1;
    }
    int differs = 0;
    for (int r = 1; r < dist_size && !differs; r++)
        if (all[r] != all[0]) differs = r;
    free(all);
    if (differs) dist_error_kind = AL_DIST_ERR_SHARED;
    if (differs)
        return al_errf(err, "rank %d was started with other %s than rank 0 (hashes differ): every rank must run "
                            "the same command on the same files",
                       differs, what);
#else
    (void)hash, (void)what, (void)err;
#endif
    return 0;
}

int al_dist_bcast(void *buf, size_t bytes, al_err *err) {
#ifdef AL_HAVE_MPI
    if (!dist_joined || dist_size == 1) return 0;
    for (size_t done = 0; done < bytes;) { /* MPI counts are ints */
        const size_t n = bytes - done < (size_t)INT_MAX ? bytes - done : (size_t)INT_MAX;
        MPI_Request req;
        if (collective(MPI_Ibcast((char *)buf + done, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &req), &req, "broadcast",
                       err))
            return -1;
        done += n;
    }
#else
    (void)buf, (void)bytes, (void)err;
#endif
    return 0;
}

int al_dist_max(int v, int *max, al_err *err) {
    *max = v;
#ifdef AL_HAVE_MPI
    if (!dist_joined || dist_size == 1) return 0;
    MPI_Request req;
    int in = v; /* a signal during the wait must not change what is sent */
    return collective(MPI_Iallreduce(&in, max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req), &req, "step-end allreduce",
                      err);
#else
    (void)err;
#endif
    return 0;
}

int al_dist_check_run(const al_train_opts *o, const al_model *m, uint64_t data_hash, al_err *err) {
    if (dist_size == 1) return 0;
    char *settings = al_train_opts_to_json(o);
    cJSON *view = cJSON_CreateObject();
    char *config = view && !al_config_view(&m->cfg, view) ? cJSON_PrintUnformatted(view) : NULL;
    cJSON_Delete(view);
    if (!settings || !config) {
        free(settings);
        free(config);
        return al_errf(err, "out of memory");
    }
    uint64_t h = al_dist_hash(AL_DIST_HASH0, settings, strlen(settings));
    h = al_dist_hash(h, config, strlen(config));
    free(settings);
    free(config);
    return al_dist_check_same(h, "training settings or model config", err) ||
                   al_dist_check_same(data_hash, "data", err)
               ? -1
               : 0;
}

int al_dist_share_state(int *failed, al_model *m, float *m1, float *m2, int *step, al_rng *rng, al_err *err) {
    al_err mine = *err;
    if (al_dist_bcast(failed, sizeof *failed, err)) return -1;
    if (*failed) {
        dist_error_kind = AL_DIST_ERR_SHARED;
        if (dist_rank == 0) *err = mine;
        else al_errf(err, "rank 0 could not read the training state");
        return -1;
    }
    const size_t bytes = sizeof(float) * m->n_floats;
    return al_dist_bcast(m->w, bytes, err) || al_dist_bcast(m1, bytes, err) || al_dist_bcast(m2, bytes, err) ||
                   al_dist_bcast(step, sizeof *step, err) || al_dist_bcast(rng, sizeof *rng, err)
               ? -1
               : 0;
}

int al_dist_shards(const al_train_opts *o) {
    if (o->shards > 0) return o->shards;
    return dist_joined ? o->batch : 1;
}

/* ---- the sharded step ---- */

/* dst[i] += src[i] over n floats (one rounding per element: the tree's one
 * addition of two subtrees). */
static void add_into(float *restrict dst, const float *restrict src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}


/* Pushes the shard gradient now in m->g onto the stack, merging equal-sized
 * subtrees (left + right) as a binary counter carries. */
static void push_shard(al_grad_shards *s) {
    const size_t n = s->m->n_floats;
    int size = 1;
    while (s->depth > 0 && s->stack_n[s->depth - 1] == size) {
        float *left = s->stack[s->depth - 1];
        add_into(left, size == 1 ? s->m->g : s->stack[s->depth], n);
        size *= 2;
        s->depth--;
    }
    if (size == 1) memcpy(s->stack[s->depth], s->m->g, sizeof(float) * n); /* else the merged sum is in place */
    s->stack_n[s->depth++] = size;
}

#ifdef AL_HAVE_MPI
/* Sums parts[0..n) (each len floats) into parts[0] in the left-complete
 * tree: the first half the largest power of two below n. */
static void tree_sum(float **parts, int n, size_t len) {
    if (n <= 1) return;
    int p = 1;
    while (p * 2 < n) p *= 2;
    tree_sum(parts, p, len);
    tree_sum(parts + p, n - p, len);
    add_into(parts[0], parts[p], len);
}

/* The ranks' partial sums in m->g -> their tree sum on every rank: per
 * bucket, rank q receives slice q from every rank (in rank order), adds the
 * slices in the tree over ranks, and the summed slices are gathered back. */
static int reduce_ranks(al_grad_shards *s) {
    const int N = dist_size, me = dist_rank;
    const size_t total = s->m->n_floats;
    int *counts = s->slices, *displs = counts + N, *rcounts = displs + N, *rdispls = rcounts + N;
    float **parts = s->parts;
    for (size_t off = 0; off < total; off += s->bucket) {
        const size_t len = total - off < s->bucket ? total - off : s->bucket;
        for (int q = 0; q < N; q++) {
            const size_t lo = len * (size_t)q / (size_t)N, hi = len * (size_t)(q + 1) / (size_t)N;
            counts[q] = (int)(hi - lo);
            displs[q] = (int)lo;
        }
        const size_t mine = (size_t)counts[me];
        for (int q = 0; q < N; q++) {
            rcounts[q] = (int)mine;
            rdispls[q] = (int)(mine * (size_t)q);
            parts[q] = s->recv + mine * (size_t)q;
        }
        float *g = s->m->g + off;
        MPI_Request req;
        if (collective(MPI_Ialltoallv(g, counts, displs, MPI_FLOAT, s->recv, rcounts, rdispls, MPI_FLOAT,
                                      MPI_COMM_WORLD, &req),
                       &req, "gradient reduce-scatter", &s->err))
            return -1;
        tree_sum(parts, N, mine);
        memcpy(g + displs[me], parts[0], sizeof(float) * mine);
        if (collective(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, g, counts, displs, MPI_FLOAT, MPI_COMM_WORLD, &req),
                       &req, "gradient allgather", &s->err))
            return -1;
    }
    return 0;
}
#endif

/* Every shard's mean loss on every rank (each rank fills its own). */
static int gather_losses(al_grad_shards *s) {
#ifdef AL_HAVE_MPI
    if (dist_joined && dist_size > 1) {
        MPI_Request req;
        if (collective(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DOUBLE, s->losses, s->count, MPI_DOUBLE, MPI_COMM_WORLD, &req),
                       &req, "loss allgather", &s->err))
            return -1;
    }
#else
    (void)s;
#endif
    return 0;
}

/* al_step_pass.forward of the sharded step: see dist.h. */
static double shards_forward(void *ctx, al_model *m) {
    al_grad_shards *s = ctx;
    s->depth = 0;
    s->comm_s = 0;
    for (int j = s->first; j < s->first + s->count; j++) {
        s->select(s->select_ctx, j, s->shards);
        if (j > s->first) al_model_zero_grads(m); /* al_train_step zeroed it for the first */
        s->losses[j] = s->inner.forward(s->inner.ctx, m);
        s->inner.backward(s->inner.ctx, m);
        if (s->count > 1) push_shard(s);
    }
    if (s->count > 1) { /* the remaining subtrees, right to left, then into m->g */
        for (int i = s->depth - 1; i > 0; i--) add_into(s->stack[i - 1], s->stack[i], m->n_floats);
        memcpy(m->g, s->stack[0], sizeof(float) * m->n_floats);
    }
    const double t0 = al_now();
    if (gather_losses(s)) {
        s->failed = 1;
        return NAN;
    }
    double sum = 0;
    for (int j = 0; j < s->shards; j++) sum += s->losses[j];
    const double loss = sum / s->shards;
#ifdef AL_HAVE_MPI
    /* a non-finite loss leaves the weights unchanged on every rank alike: no gradient needed */
    if (isfinite(loss) && dist_joined && dist_size > 1 && reduce_ranks(s)) {
        s->failed = 1;
        return NAN;
    }
#endif
    s->comm_s = al_now() - t0;
    if (s->shards > 1 && isfinite(loss)) {
        const float scale = (float)(1.0 / s->shards);
        float *g = m->g;
        const size_t n = m->n_floats;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) g[i] *= scale;
    }
    return loss;
}

/* al_step_pass.backward of the sharded step: the forward did it. */
static void shards_backward(void *ctx, al_model *m) { (void)ctx, (void)m; }

int al_grad_shards_init(al_grad_shards *s, al_model *m, const al_step_pass *inner, al_shard_select_fn select,
                        void *select_ctx, int shards, int batch, al_err *err) {
    memset(s, 0, sizeof *s);
    const int N = dist_size;
    dist_error_kind = AL_DIST_ERR_SHARED; /* the same numbers on every rank */
    if (shards <= 0 || batch % shards)
        return al_errf(err, "--shards %d must divide the batch of %d", shards, batch);
    if (shards % N)
        return al_errf(err, "%d shards of the batch cannot be split evenly over %d ranks (give --shards a multiple "
                            "of the rank count that divides --batch %d)",
                       shards, N, batch);
    dist_error_kind = AL_DIST_ERR_LOCAL;
    s->m = m;
    s->inner = *inner;
    s->select = select;
    s->select_ctx = select_ctx;
    s->shards = shards;
    s->count = shards / N;
    s->first = dist_rank * s->count;
    s->pass = (al_step_pass){.ctx = s, .forward = shards_forward, .backward = shards_backward};
    int levels = 0;
    while ((1 << levels) <= s->count) levels++; /* a binary counter of count needs this many digits */
    s->losses = calloc((size_t)shards, sizeof(double));
    s->stack = calloc((size_t)levels, sizeof(float *));
    s->stack_n = calloc((size_t)levels, sizeof(int));
    s->slices = malloc(sizeof(int) * 4 * (size_t)N);
    s->parts = malloc(sizeof(float *) * (size_t)N);
    if (!s->losses || !s->stack || !s->stack_n || !s->slices || !s->parts) goto oom;
    if (s->count > 1)
        for (int i = 0; i < levels; i++)
            if (!(s->stack[i] = al_alloc(sizeof(float) * m->n_floats))) goto oom;
    s->bucket = m->n_floats < BUCKET_FLOATS ? m->n_floats : BUCKET_FLOATS;
    if (N > 1 && !(s->recv = al_alloc(sizeof(float) * (s->bucket / (size_t)N + 1) * (size_t)N))) goto oom;
    return 0;
oom:
    al_grad_shards_free(s);
    return al_errf(err, "out of memory for the gradient shards (%d partial sums of %zu floats)", levels,
                   m->n_floats);
}

void al_grad_shards_free(al_grad_shards *s) {
    if (s->stack)
        for (int i = 0; (1 << i) <= s->count; i++) al_free(s->stack[i]);
    free(s->stack);
    free(s->stack_n);
    free(s->losses);
    free(s->slices);
    free(s->parts);
    al_free(s->recv);
    memset(s, 0, sizeof *s);
}
