/* cluster.h - several hosts through MPI: `mpirun -np H -H a,b gputrain ...` starts one gputrain
 * process per host, each with its own workers, store and devices; these calls are what the
 * processes say to each other (src/train.c decides when).
 *
 * The reductions and the broadcast are collectives: every process must make the same calls in
 * the same order. Only one thread of a process is in MPI at a time (MPI_THREAD_SERIALIZED; a lock
 * in cluster.c enforces it). A failed MPI call returns -1 with one line naming this host (rank and
 * host name) and the call; so does one that waited past the timeout.
 *
 * Without MPI at build time, or in a process that no MPI launcher started, the cluster is this one
 * process: rank 0 of 1, and every reduction succeeds and leaves its buffer as it is. */
#ifndef GT_CLUSTER_H
#define GT_CLUSTER_H

#include "gputrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Joins the other processes when an MPI launcher started this one (its environment says so);
 * otherwise, or called again, a no-op. Fails when a launcher asked for several processes and
 * gputrain was built without MPI, rather than running H unrelated copies. */
int gt_cluster_init(gt_err *e);

/* Seconds a collective may wait for the other hosts before it fails (0: forever). The default,
 * GT_CLUSTER_TIMEOUT, leaves room for another host's evaluation or checkpoint. */
#define GT_CLUSTER_TIMEOUT 300.0
void gt_cluster_set_timeout(double seconds);

/* Leaves cleanly (MPI_Finalize); a no-op for a single process. */
void gt_cluster_finalize(void);

/* Ends every process of the run with this exit code (MPI_Abort), so that a host that failed does
 * not leave the others waiting in a collective; returns only for a single process. For the top
 * level (src/main.c) alone. */
void gt_cluster_abort(int code);

int gt_cluster_rank(void);        /* this process, 0..size-1 */
int gt_cluster_size(void);        /* processes (hosts) in the run */
const char *gt_cluster_host(void); /* this machine's host name */

/* In-place sums over every process: buf[0..n) becomes the elementwise sum. what names the data
 * for messages ("the sync gradient"). */
int gt_cluster_sum_floats(float *buf, size_t n, const char *what, gt_err *e);
int gt_cluster_sum_doubles(double *buf, int n, const char *what, gt_err *e);

/* In-place elementwise maximum over every process (agreements: stop flags, signals). */
int gt_cluster_max_i64(int64_t *buf, int n, const char *what, gt_err *e);

/* The smallest and largest of v over every process (checks that all hosts agree). */
int gt_cluster_range_u64(uint64_t v, uint64_t *lo, uint64_t *hi, const char *what, gt_err *e);

/* Copies rank 0's bytes to every process (the NCCL unique id). */
int gt_cluster_bcast(void *buf, size_t bytes, const char *what, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
