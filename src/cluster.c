/* cluster.c - several hosts through MPI, behind the few collectives gputrain needs (cluster.h).
 *
 * MPI is joined only when a launcher started the process (mpirun sets OMPI_COMM_WORLD_SIZE, Hydra
 * PMI_SIZE, PMIx PMIX_RANK, Slurm's srun SLURM_PROCID and SLURM_NTASKS in a job step), so a plain
 * `gputrain` never pays MPI's start-up or depends on its runtime. The process works on its own duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so a
 * failed call becomes a message naming the host instead of MPI's default abort. Workers and the
 * calling thread may both reach a collective; MPI_THREAD_SERIALIZED plus one lock here keeps them
 * from calling MPI at the same time, and src/train.c keeps the order of the calls the same on
 * every host. Collectives are started non-blocking and waited for with a deadline
 * (gt_cluster_set_timeout): a host that hangs without dying would otherwise hold the others in
 * a blocking call forever, since MPI itself has no timeout. */
#include "gputrain/cluster.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef GT_HAVE_MPI
#include <mpi.h>
#endif

#define CLUSTER_CHUNK (1 << 30) /* elements per MPI call: counts are ints */

static struct {
    int joined;     /* MPI_Init_thread succeeded and MPI_Finalize has not run */
    int rank, size;
    double timeout; /* seconds a collective may wait; 0 = forever */
    char host[64];
    pthread_mutex_t mu;
#ifdef GT_HAVE_MPI
    MPI_Comm comm;
#endif
} g_cluster = {.size = 1, .timeout = GT_CLUSTER_TIMEOUT, .mu = PTHREAD_MUTEX_INITIALIZER};

void gt_cluster_set_timeout(double seconds) { g_cluster.timeout = seconds > 0 ? seconds : 0; }

/* The process count a launcher announced, 0 when none started this process. Slurm sets
 * SLURM_NTASKS in a batch script too, where no task was launched; only a job step that srun
 * started has SLURM_STEP_ID beside SLURM_PROCID. */
static int cluster_launcher_size(void)
{
    int srun = getenv("SLURM_PROCID") && getenv("SLURM_STEP_ID");
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", srun ? "SLURM_NTASKS" : NULL};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = vars[i] ? getenv(vars[i]) : NULL;
        if (v && *v)
            return atoi(v) > 0 ? atoi(v) : 1;
    }
    return getenv("PMIX_RANK") || srun ? 1 : 0;
}

static void cluster_set_host(void)
{
    if (gethostname(g_cluster.host, sizeof g_cluster.host) != 0 || !g_cluster.host[0])
        snprintf(g_cluster.host, sizeof g_cluster.host, "unknown");
    g_cluster.host[sizeof g_cluster.host - 1] = 0;
}

int gt_cluster_rank(void) { return g_cluster.rank; }
int gt_cluster_size(void) { return g_cluster.size; }

const char *gt_cluster_host(void)
{
    if (!g_cluster.host[0])
        cluster_set_host();
    return g_cluster.host;
}

#ifdef GT_HAVE_MPI

static int cluster_fail(int rc, const char *call, const char *what, gt_err *e)
{
    char why[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, why, &len);
    return gt_fail(e, "host %d of %d (%s): %s of %s failed: %s (another host stopped or lost its "
                      "network?)", g_cluster.rank, g_cluster.size, g_cluster.host, call, what, why);
}

int gt_cluster_init(gt_err *e)
{
    if (g_cluster.joined || cluster_launcher_size() == 0) {
        cluster_set_host();
        return 0;
    }
    int provided = 0;
    cluster_set_host();
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS)
        return gt_fail(e, "MPI_Init_thread failed on %s (error %d)", g_cluster.host, rc);
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return gt_fail(e, "MPI on %s offers thread level %d; gputrain needs MPI_THREAD_SERIALIZED (%d)",
                       g_cluster.host, provided, MPI_THREAD_SERIALIZED);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &g_cluster.comm);
    if (rc != MPI_SUCCESS) {
        MPI_Finalize();
        return cluster_fail(rc, "MPI_Comm_dup", "MPI_COMM_WORLD", e);
    }
    MPI_Comm_set_errhandler(g_cluster.comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g_cluster.comm, &g_cluster.rank);
    MPI_Comm_size(g_cluster.comm, &g_cluster.size);
    g_cluster.joined = 1;
    /* srun without an MPI plugin starts each task as its own one-process MPI world: each would
     * train alone and write the same files. */
    int announced = cluster_launcher_size();
    if (announced > 1 && g_cluster.size != announced) {
        gt_cluster_finalize();
        return gt_fail(e, "the launcher started %d processes but MPI joined only %d of them on %s "
                          "(under Slurm: srun --mpi=pmix, or mpirun inside the allocation)",
                       announced, g_cluster.size, g_cluster.host);
    }
    return 0;
}

void gt_cluster_finalize(void)
{
    if (!g_cluster.joined)
        return;
    MPI_Comm_free(&g_cluster.comm);
    MPI_Finalize();
    g_cluster.joined = 0;
}

void gt_cluster_abort(int code)
{
    if (g_cluster.joined && g_cluster.size > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
}

/* Waits for a started collective: polls (as a blocking call would), then, after the first
 * millisecond, sleeps 100 us between polls; gives up at the deadline with a line naming this
 * host. The request is left to MPI_Abort, which the failed run ends in (src/main.c). */
static int cluster_wait(MPI_Request *req, const char *call, const char *what, gt_err *e)
{
    double t0 = MPI_Wtime();
    for (unsigned long polls = 0;; polls++) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return cluster_fail(rc, call, what, e);
        if (done)
            return 0;
        double waited = MPI_Wtime() - t0;
        if (g_cluster.timeout > 0 && waited > g_cluster.timeout)
            return gt_fail(e, "host %d of %d (%s): %s of %s: the other hosts did not answer within "
                              "%g s (--host-timeout); one of them hung or lost its network",
                           g_cluster.rank, g_cluster.size, g_cluster.host, call, what,
                           g_cluster.timeout);
        if (waited > 1e-3) {
            struct timespec pause = {0, 100000};
            nanosleep(&pause, NULL);
        }
    }
}

/* One in-place all-reduce, in chunks that fit MPI's int counts. */
static int cluster_allreduce(void *buf, size_t n, size_t elem, MPI_Datatype type, MPI_Op op,
                             const char *what, gt_err *e)
{
    if (!g_cluster.joined || g_cluster.size == 1)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&g_cluster.mu);
    for (size_t at = 0; at < n && rc == 0; at += CLUSTER_CHUNK) {
        size_t count = n - at < CLUSTER_CHUNK ? n - at : CLUSTER_CHUNK;
        MPI_Request req;
        int st = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + at * elem, (int)count, type, op,
                                g_cluster.comm, &req);
        rc = st != MPI_SUCCESS ? cluster_fail(st, "MPI_Iallreduce", what, e)
                               : cluster_wait(&req, "MPI_Allreduce", what, e);
    }
    pthread_mutex_unlock(&g_cluster.mu);
    return rc;
}

int gt_cluster_sum_floats(float *buf, size_t n, const char *what, gt_err *e)
{
    return cluster_allreduce(buf, n, sizeof *buf, MPI_FLOAT, MPI_SUM, what, e);
}

int gt_cluster_sum_doubles(double *buf, int n, const char *what, gt_err *e)
{
    return cluster_allreduce(buf, (size_t)n, sizeof *buf, MPI_DOUBLE, MPI_SUM, what, e);
}

int gt_cluster_max_i64(int64_t *buf, int n, const char *what, gt_err *e)
{
    return cluster_allreduce(buf, (size_t)n, sizeof *buf, MPI_INT64_T, MPI_MAX, what, e);
}

int gt_cluster_bcast(void *buf, size_t bytes, const char *what, gt_err *e)
{
    if (!g_cluster.joined || g_cluster.size == 1)
        return 0;
    if (bytes > CLUSTER_CHUNK)
        return gt_fail(e, "host %d (%s): broadcast of %s: %zu bytes is more than one call takes",
                       g_cluster.rank, g_cluster.host, what, bytes);
    pthread_mutex_lock(&g_cluster.mu);
    MPI_Request req;
    int st = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, g_cluster.comm, &req);
    int rc = st != MPI_SUCCESS ? cluster_fail(st, "MPI_Ibcast", what, e)
                               : cluster_wait(&req, "MPI_Bcast", what, e);
    pthread_mutex_unlock(&g_cluster.mu);
    return rc;
}

#else /* no MPI: one process */

int gt_cluster_init(gt_err *e)
{
    cluster_set_host();
    int n = cluster_launcher_size();
    if (n > 1)
        return gt_fail(e, "started by an MPI launcher as one of %d processes, but this gputrain was "
                          "built without MPI (install Open MPI, e.g. libopenmpi-dev, and rebuild)", n);
    return 0;
}

void gt_cluster_finalize(void) {}
void gt_cluster_abort(int code) {}

int gt_cluster_sum_floats(float *buf, size_t n, const char *what, gt_err *e) { return 0; }
int gt_cluster_sum_doubles(double *buf, int n, const char *what, gt_err *e) { return 0; }
int gt_cluster_max_i64(int64_t *buf, int n, const char *what, gt_err *e) { return 0; }
int gt_cluster_bcast(void *buf, size_t bytes, const char *what, gt_err *e) { return 0; }

#endif

int gt_cluster_range_u64(uint64_t v, uint64_t *lo, uint64_t *hi, const char *what, gt_err *e)
{
    /* One maximum gives both ends: max(~v) is ~min(v). Stored as int64 bit patterns, so compare
     * through a bias that keeps unsigned order. */
    const uint64_t bias = 1ull << 63;
    int64_t both[2] = {(int64_t)(v ^ bias), (int64_t)(~v ^ bias)};
    if (gt_cluster_max_i64(both, 2, what, e) != 0)
        return -1;
    *hi = (uint64_t)both[0] ^ bias;
    *lo = ~((uint64_t)both[1] ^ bias);
    return 0;
}
