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

#include "../io/io.h"

#ifdef AL_HAVE_MPI
#include <mpi.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>

static int dist_threads_ok; /* MPI_THREAD_MULTIPLE: the heartbeat and the overlap thread may call MPI */
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

/* Floats per bucket of the gradient arena: a sixteenth of it, within 1 MB
 * and 16 MB, so a small model still overlaps, a large one sends few
 * messages, the receive buffer stays small and MPI's int counts never
 * overflow. Depends on the arena size alone: the same on every rank. */
enum { BUCKET_FLOATS_MIN = 1 << 18, BUCKET_FLOATS_MAX = 1 << 22 };

/* Heartbeat: the default time after which a silent rank is taken as hung, and
 * the beats per that time. */
#define HEARTBEAT_DEFAULT_S 10.0
#define HEARTBEATS_PER_TIMEOUT 10

/* The size mpirun's environment announces (0: not started by mpirun). */
static int launcher_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

#ifdef AL_HAVE_MPI
/* The heartbeat (dist.h): its thread, its communicator and what it found. */
static struct {
    pthread_t thread;
    int running;
    atomic_int quit;
    double timeout_s;
    MPI_Comm comm;
    int n_peers;          /* rank 0: every other rank; the others: rank 0 */
    MPI_Request *sends, *recvs; /* [n_peers] */
    int *inbox;           /* [n_peers] */
    double *heard;        /* [n_peers] when each was last heard from */
    int *gone;            /* [n_peers] said goodbye: left the job, no longer watched */
} hb = {.comm = MPI_COMM_NULL};
static atomic_int dist_hung = -1;       /* the rank the heartbeat found silent (-1: none) */
static atomic_int dist_self_stalled = 0; /* this process was itself stopped longer than the timeout */

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
        if (atomic_load(&dist_self_stalled)) { /* the others have taken this rank for hung: they speak */
            dist_error_kind = AL_DIST_ERR_GONE;
            return al_errf(err, "rank %d was stopped for longer than the heartbeat allows (%.0f s) while in the %s",
                           dist_rank, hb.timeout_s, what);
        }
        const int hung = atomic_load(&dist_hung);
        if (hung >= 0) {
            /* rank 0 says it; when rank 0 is the silent one, rank 1 does */
            dist_error_kind = hung == 0 && dist_rank == 1 ? AL_DIST_ERR_LOCAL : AL_DIST_ERR_PEER;
            return al_errf(err, "rank %d has not been heard from for %.0f s: it hangs or was stopped (rank %d waited "
                                "for it in the %s; ATTNLAB_HEARTBEAT_S sets the limit)",
                           hung, hb.timeout_s, dist_rank, what);
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

/* Peer p of this rank's heartbeat: rank 0 watches ranks 1.., the others rank 0. */
static int hb_peer(int p) { return dist_rank == 0 ? p + 1 : 0; }

/* Sends every peer the goodbye beat (0) and leaves it a moment to go out:
 * a rank that leaves (an error, the end) is not then taken for hung. */
static void heartbeat_goodbye(void) {
    static const int bye = 0;
    for (int p = 0; p < hb.n_peers; p++) {
        if (hb.sends[p] != MPI_REQUEST_NULL) MPI_Request_free(&hb.sends[p]);
        MPI_Isend(&bye, 1, MPI_INT, hb_peer(p), 0, hb.comm, &hb.sends[p]);
    }
    const double start = al_now();
    for (int p = 0; p < hb.n_peers; p++) {
        int done = 0;
        while (!done && al_now() - start < 0.2 && MPI_Test(&hb.sends[p], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS)
            if (!done) sched_yield();
        if (!done) MPI_Request_free(&hb.sends[p]);
    }
}

/* The heartbeat thread: every timeout/10 s it sends one beat to each peer
 * whose previous beat has left, takes every beat that came, and stops at the
 * first peer silent for longer than the timeout (dist_hung). A stopped
 * process stops its heartbeat with it; a busy one keeps beating. A turn that
 * comes late (this process was itself stopped or starved) forgives the
 * peers' silence of that time, and one later than the timeout marks this
 * process as given up on by the others (dist_self_stalled). */
static void *heartbeat_main(void *unused) {
    (void)unused;
    static const int beat = 1;
    const long period_ns = (long)(hb.timeout_s / HEARTBEATS_PER_TIMEOUT * 1e9);
    double last_turn = al_now();
    for (int p = 0; p < hb.n_peers; p++) {
        hb.sends[p] = MPI_REQUEST_NULL;
        hb.heard[p] = last_turn;
        hb.gone[p] = 0;
        MPI_Irecv(&hb.inbox[p], 1, MPI_INT, hb_peer(p), 0, hb.comm, &hb.recvs[p]);
    }
    while (!atomic_load(&hb.quit)) {
        const double now = al_now();
        if (now - last_turn > hb.timeout_s / 2) { /* the silence was this process's own */
            if (now - last_turn > hb.timeout_s) atomic_store(&dist_self_stalled, 1);
            for (int p = 0; p < hb.n_peers; p++) hb.heard[p] = now;
        }
        last_turn = now;
        for (int p = 0; p < hb.n_peers; p++) {
            if (hb.gone[p]) continue;
            int done = 0;
            MPI_Test(&hb.sends[p], &done, MPI_STATUS_IGNORE);
            if (done) MPI_Isend(&beat, 1, MPI_INT, hb_peer(p), 0, hb.comm, &hb.sends[p]);
            for (done = 1; done && !hb.gone[p];) { /* every beat that came */
                MPI_Test(&hb.recvs[p], &done, MPI_STATUS_IGNORE);
                if (!done) break;
                hb.heard[p] = now;
                hb.gone[p] = hb.inbox[p] == 0;
                if (!hb.gone[p]) MPI_Irecv(&hb.inbox[p], 1, MPI_INT, hb_peer(p), 0, hb.comm, &hb.recvs[p]);
            }
            if (!hb.gone[p] && now - hb.heard[p] > hb.timeout_s) {
                atomic_store(&dist_hung, hb_peer(p));
                atomic_store(&hb.quit, 1);
            }
        }
        nanosleep(&(struct timespec){.tv_sec = period_ns / 1000000000L, .tv_nsec = period_ns % 1000000000L}, NULL);
    }
    heartbeat_goodbye();
    for (int p = 0; p < hb.n_peers; p++) { /* nothing may stay posted when MPI finishes */
        if (hb.recvs[p] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&hb.recvs[p]);
        MPI_Wait(&hb.recvs[p], MPI_STATUS_IGNORE);
    }
    return NULL;
}

/* Starts a helper thread with every signal blocked (the main thread keeps
 * handling them as before). */
static int start_thread(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    const int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* The timeout every rank uses: rank 0's ATTNLAB_HEARTBEAT_S (0: off). */
static int heartbeat_timeout(double *timeout_s, al_err *err) {
    const char *v = getenv("ATTNLAB_HEARTBEAT_S");
    double t = v && *v ? atof(v) : HEARTBEAT_DEFAULT_S;
    if (!(t >= 0)) t = 0;
    const int rc = MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    *timeout_s = t;
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "heartbeat setting broadcast", err);
}

/* Starts the heartbeat of a job of more than one rank (dist.h). */
static int heartbeat_start(al_err *err) {
    if (dist_size == 1 || !dist_threads_ok) return 0;
    if (heartbeat_timeout(&hb.timeout_s, err)) return -1;
    if (hb.timeout_s == 0) return 0;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &hb.comm);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "heartbeat communicator", err);
    hb.n_peers = dist_rank == 0 ? dist_size - 1 : 1;
    hb.sends = malloc(sizeof(MPI_Request) * (size_t)hb.n_peers);
    hb.recvs = malloc(sizeof(MPI_Request) * (size_t)hb.n_peers);
    hb.inbox = malloc(sizeof(int) * (size_t)hb.n_peers);
    hb.heard = malloc(sizeof(double) * (size_t)hb.n_peers);
    hb.gone = malloc(sizeof(int) * (size_t)hb.n_peers);
    if (!hb.sends || !hb.recvs || !hb.inbox || !hb.heard || !hb.gone)
        return al_errf(err, "out of memory for the heartbeat");
    atomic_store(&hb.quit, 0);
    if (start_thread(&hb.thread, heartbeat_main, NULL)) return al_errf(err, "could not start the heartbeat thread");
    hb.running = 1;
    return 0;
}
#endif

void al_dist_stop_heartbeat(void) {
#ifdef AL_HAVE_MPI
    if (!hb.running) return;
    atomic_store(&hb.quit, 1);
    pthread_join(hb.thread, NULL);
    hb.running = 0;
    free(hb.sends);
    free(hb.recvs);
    free(hb.inbox);
    free(hb.heard);
    free(hb.gone);
    hb.sends = hb.recvs = NULL;
    hb.inbox = hb.gone = NULL;
    hb.heard = NULL;
#endif
}

int al_dist_init(al_err *err) {
    const int announced = launcher_size();
    if (!announced || dist_joined) return 0;
#ifdef AL_HAVE_MPI
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return al_errf(err, "MPI could not start (started by mpirun with %d processes)", announced);
    /* failures come back as codes, turned into one-line errors */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &dist_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dist_size);
    dist_threads_ok = provided >= MPI_THREAD_MULTIPLE; /* the same library on every rank: the same answer */
    dist_joined = 1;
    return heartbeat_start(err);
#else
    return al_errf(err, "started by mpirun (%d processes), but this build has no MPI: rebuild with libopenmpi-dev "
                        "installed, or run it without mpirun",
                   announced);
#endif
}

void al_dist_finalize(void) {
#ifdef AL_HAVE_MPI
    if (dist_joined) {
        int everyone_here = 1;
        if (hb.running) { /* the last wait for every rank is still watched; then nobody beats any more */
            MPI_Request req;
            al_err ignored;
            everyone_here = !collective(MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "final barrier", &ignored);
            al_dist_stop_heartbeat();
        }
        if (hb.comm != MPI_COMM_NULL) MPI_Comm_free(&hb.comm);
        if (everyone_here) MPI_Finalize(); /* else it would wait for the hung rank: mpirun stops the job */
    }
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
    const unsigned long mark = al_json_mark();
    cJSON *view = cJSON_CreateObject();
    char *config = view && !al_config_view(&m->cfg, view) ? al_json_print(view, 0, mark) : NULL;
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

/* The rank's sum over its shards, on arena elements [lo, hi), once the last
 * shard's gradient is in m->g there: what push_shard of the last shard and
 * the right-to-left merge of the remaining subtrees do, restricted to the
 * range (each element gets the same additions of the same operands, so
 * finishing the arena range by range gives the same bits), left in m->g.
 * The stack's bookkeeping is untouched: every range replays it. */
static void finish_range(al_grad_shards *s, size_t lo, size_t hi) {
    if (s->count == 1 || hi <= lo) return; /* one shard: m->g is the sum */
    const size_t len = hi - lo;
    float *g = s->m->g + lo;
    const float *top = g; /* the newest subtree: the last shard, then what it merged into */
    int d = s->depth, size = 1;
    while (d > 0 && s->stack_n[d - 1] == size) {
        add_into(s->stack[d - 1] + lo, top, len);
        top = s->stack[d - 1] + lo;
        size *= 2;
        d--;
    }
    /* stack[0..d) and top: merged right to left into stack[0], or top alone */
    for (int i = d; i > 0; i--) {
        add_into(s->stack[i - 1] + lo, top, len);
        top = s->stack[i - 1] + lo;
    }
    if (top != g) memcpy(g, top, sizeof(float) * len);
}

#ifdef AL_HAVE_MPI
/* Bucket k of the arena, counted from its end: [*lo, *hi). */
static void bucket_range(const al_grad_shards *s, size_t k, size_t *lo, size_t *hi) {
    const size_t n = s->m->n_floats, end = k * s->bucket;
    *hi = n - end;
    *lo = n - end > s->bucket ? n - end - s->bucket : 0;
}

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

/* Bucket k of the ranks' partial sums in m->g -> its tree sum on every rank:
 * rank q receives slice q from every rank (in rank order), adds the slices in
 * the tree over ranks, and the summed slices are gathered back. */
static int reduce_bucket(al_grad_shards *s, size_t k) {
    const int N = dist_size, me = dist_rank;
    int *counts = s->slices, *displs = counts + N, *rcounts = displs + N, *rdispls = rcounts + N;
    float **parts = s->parts;
    size_t off, end;
    bucket_range(s, k, &off, &end);
    const size_t len = end - off;
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
    if (collective(MPI_Ialltoallv(g, counts, displs, MPI_FLOAT, s->recv, rcounts, rdispls, MPI_FLOAT, MPI_COMM_WORLD,
                                  &req),
                   &req, "gradient reduce-scatter", &s->err))
        return -1;
    tree_sum(parts, N, mine);
    memcpy(g + displs[me], parts[0], sizeof(float) * mine);
    return collective(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, g, counts, displs, MPI_FLOAT, MPI_COMM_WORLD, &req),
                      &req, "gradient allgather", &s->err);
}

/* The overlapped reduction (dist.h): a thread that reduces buckets 0.. in
 * order as the backward hands them over (ready), counting them (done). */
typedef struct al_dist_comm {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* ready grew, or quit */
    pthread_cond_t moved; /* done grew, or failed */
    size_t ready, done;   /* buckets handed over and reduced this step */
    double busy_s;        /* seconds spent reducing them */
    int quit, failed;
    al_grad_shards *s;
} al_dist_comm;

/* The communication thread: waits for handed-over buckets and reduces each
 * (its own additions single-threaded: the cores belong to the backward). */
static void *comm_main(void *arg) {
    al_dist_comm *c = arg;
    omp_set_num_threads(1);
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->quit && (c->failed || c->done == c->ready)) pthread_cond_wait(&c->wake, &c->lock);
        if (c->quit) break;
        const size_t k = c->done;
        pthread_mutex_unlock(&c->lock);
        const double t0 = al_now();
        const int rc = reduce_bucket(c->s, k);
        pthread_mutex_lock(&c->lock);
        c->busy_s += al_now() - t0;
        if (rc) c->failed = 1;
        else c->done++;
        pthread_cond_signal(&c->moved);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Hands buckets 0..k over to the communication thread. */
static void comm_hand_over(al_dist_comm *c, size_t k) {
    pthread_mutex_lock(&c->lock);
    if (k > c->ready) c->ready = k;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
}

/* Waits until every bucket is reduced; -1 when one failed (s->err says why). */
static int comm_wait(al_dist_comm *c) {
    pthread_mutex_lock(&c->lock);
    while (!c->failed && c->done < c->s->n_buckets) pthread_cond_wait(&c->moved, &c->lock);
    const int failed = c->failed;
    c->s->comm_busy_s = c->busy_s;
    c->ready = c->done = 0; /* the next step starts over */
    c->busy_s = 0;
    pthread_mutex_unlock(&c->lock);
    return failed ? -1 : 0;
}

/* Starts the communication thread of s (dist.h); 0 without one (-1: none
 * could be made: err). */
static int comm_start(al_grad_shards *s, al_err *err) {
    al_dist_comm *c = calloc(1, sizeof *c);
    if (!c) return al_errf(err, "out of memory");
    c->s = s;
    if (pthread_mutex_init(&c->lock, NULL)) {
        free(c);
        return al_errf(err, "could not make the communication thread's lock");
    }
    pthread_cond_init(&c->wake, NULL);
    pthread_cond_init(&c->moved, NULL);
    if (start_thread(&c->thread, comm_main, c)) {
        pthread_cond_destroy(&c->wake);
        pthread_cond_destroy(&c->moved);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return al_errf(err, "could not start the communication thread");
    }
    s->comm = c;
    return 0;
}

/* Stops and frees the communication thread of s. */
static void comm_stop(al_grad_shards *s) {
    al_dist_comm *c = s->comm;
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    c->quit = 1;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->wake);
    pthread_cond_destroy(&c->moved);
    pthread_mutex_destroy(&c->lock);
    free(c);
    s->comm = NULL;
}

/* The model's grads_final hook during the last shard's backward: the rank's
 * sum of [from, frontier) is finished and every bucket now wholly final goes
 * to the communication thread. */
static void on_grads_final(void *ctx, size_t from) {
    al_grad_shards *s = ctx;
    if (from >= s->frontier) return;
    finish_range(s, from, s->frontier);
    s->frontier = from;
    comm_hand_over(s->comm, from == 0 ? s->n_buckets : (s->m->n_floats - from) / s->bucket);
}

/* Whether the cross-rank sum overlaps the backward: ATTNLAB_OVERLAP not 0. */
static int overlap_wanted(void) {
    const char *v = getenv("ATTNLAB_OVERLAP");
    return !(v && !strcmp(v, "0"));
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

/* The rank's sum in m->g -> the sum over ranks: waits for the communication
 * thread, or reduces every bucket now (0 buckets on one rank). */
static int reduce_ranks(al_grad_shards *s) {
#ifdef AL_HAVE_MPI
    if (s->comm) return comm_wait(s->comm);
    if (dist_joined && dist_size > 1)
        for (size_t k = 0; k < s->n_buckets; k++)
            if (reduce_bucket(s, k)) return -1;
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
    const int last = s->first + s->count - 1;
    for (int j = s->first; j <= last; j++) {
        s->select(s->select_ctx, j, s->shards);
        if (j > s->first) al_model_zero_grads(m); /* al_train_step zeroed it for the first */
        s->losses[j] = s->inner.forward(s->inner.ctx, m);
        s->frontier = m->n_floats;
#ifdef AL_HAVE_MPI
        if (j == last && s->comm) { /* buckets go out as the backward finishes them, last layer first */
            m->grads_final = on_grads_final;
            m->grads_final_ctx = s;
        }
#endif
        s->inner.backward(s->inner.ctx, m);
        m->grads_final = NULL;
        m->grads_final_ctx = NULL;
        if (j < last) push_shard(s);
    }
#ifdef AL_HAVE_MPI
    s->early_buckets = s->comm && s->frontier < m->n_floats ? (m->n_floats - s->frontier) / s->bucket : 0;
    if (s->comm) on_grads_final(s, 0); /* the input side, and whatever a backward did not announce */
    else
#endif
        finish_range(s, 0, s->frontier);
    /* what the backward could not hide: waiting for the last buckets (and the slowest rank), the losses */
    const double t0 = al_now();
    if (reduce_ranks(s) || gather_losses(s)) {
        s->failed = 1;
        return NAN;
    }
    s->comm_s = al_now() - t0;
    if (!s->comm) s->comm_busy_s = s->comm_s;
    double sum = 0;
    for (int j = 0; j < s->shards; j++) sum += s->losses[j];
    const double loss = sum / s->shards;
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
    s->bucket = m->n_floats / 16;
    s->bucket = s->bucket < BUCKET_FLOATS_MIN ? BUCKET_FLOATS_MIN : s->bucket > BUCKET_FLOATS_MAX ? BUCKET_FLOATS_MAX : s->bucket;
    if (s->bucket > m->n_floats) s->bucket = m->n_floats;
    s->n_buckets = N > 1 && s->bucket ? (m->n_floats + s->bucket - 1) / s->bucket : 0;
    if (N > 1 && !(s->recv = al_alloc(sizeof(float) * (s->bucket / (size_t)N + 1) * (size_t)N))) goto oom;
#ifdef AL_HAVE_MPI
    if (N > 1 && dist_threads_ok && overlap_wanted() && comm_start(s, err)) {
        al_grad_shards_free(s);
        return -1;
    }
#endif
    return 0;
oom:
    al_grad_shards_free(s);
    return al_errf(err, "out of memory for the gradient shards (%d partial sums of %zu floats)", levels,
                   m->n_floats);
}

void al_grad_shards_free(al_grad_shards *s) {
#ifdef AL_HAVE_MPI
    comm_stop(s);
#endif
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
