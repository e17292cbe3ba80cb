/* allreduce_cuda.cu - the allreduce mode on GPUs: the device's whole gradient summed over the
 * GPUs, then one optimizer update of the device's own replica (optim_cuda.cu), so the parameters
 * never leave the GPUs during training.
 *
 * Two exchanges. On one host the default is the peer-to-peer all-reduce of p2p_allreduce.cu: one
 * kernel per GPU that meets its peers through flags in device memory, reads their gradients over
 * peer access and sums in rank order into a result buffer (every GPU the same bits), queued with
 * the update and not waited for: the next step's synchronisation covers it, and a call that gave
 * up (its wait ran past AR_TIMEOUT_S, or an abort) is reported by the next reduce_update or
 * get_params. The other is NCCL (across hosts always; on one host with --exchange nccl, or
 * where the GPUs have no peer access): one communicator per device, an in-place all-reduce.
 * --exchange p2p insists on the first. With one GPU there is nothing to exchange.
 *
 * On the peer exchange a step may sum its own gradient, in parts, beside its backward
 * (device_cuda.cu's cuda_split: each part as soon as the backward has finished it, on a stream
 * of its own); the reduce_update after it then only applies the sum. Only reduce_update's steps
 * do (the local mode's local_update sums nothing a step): the first reduce_update turns it on
 * for the steps after it (gt_cuda_allreduce_step_sums), and each step says whether it summed
 * (gt_cuda_allreduce_step_summed).
 *
 * The NCCL communicators are non-blocking (config.blocking = 0): no NCCL call waits for the other
 * GPUs. A worker waits for its step by polling its stream and the communicator's error state,
 * so an NCCL error, a timeout or gt_cuda_allreduce_abort() (a worker failed, the run is ending)
 * ends the wait with a message that names the GPU and the call; the communicator is then aborted,
 * which stops its kernel, so the GPU's stream drains and the device can close.
 *
 * An abort is a process-wide generation count: it ends every wait on communicators created
 * before it, and a later gt_cuda_allreduce_init starts a fresh set.
 *
 * Across hosts (one process per host under mpirun, cluster.h) one communicator spans every GPU of
 * every host: host 0 makes the NCCL unique id, MPI carries it to the others, and GPU i of host h
 * takes rank h * n + i, so the ranks follow the global share order of src/train.c. An abort here
 * ends only this host's waits; the other hosts' end with the timeout below or when the failed
 * host's process ends the run (gt_cluster_abort). */
#include "gt_cuda.h"

#include "gputrain/cluster.h"
#include "gputrain/config.h"

#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef GT_HAVE_NCCL
#include <nccl.h>
#endif

/* The exchange a set of devices uses. */
typedef enum { AR_LOCAL, AR_P2P, AR_NCCL } ar_path;

/* How long one all-reduce may wait for the other GPUs: worker 0 may be evaluating. */
#define AR_TIMEOUT_S 120
#define AR_ABORTED "aborted (a worker failed or the run ended)"
/* Blocks of a part's sum (gt_cuda_allreduce_sum_part): it runs beside the backward's kernels,
 * and its blocks spin while a peer has not reached the part, holding their multiprocessors; 16
 * of an H100's 132 leave the backward most of the GPU (a part of resnet18 is 5.6 MB: tens of
 * microseconds at 16 blocks of 512 threads, predicted, not measured). */
#define AR_PART_BLOCKS 16

static std::atomic<unsigned> g_abort_gen{0};
static std::atomic<unsigned> g_serial{0}; /* the last gt_cuda_allreduce made */

struct gt_cuda_allreduce {
    int ordinal;
    size_t n;                 /* parameters */
    int nstate;               /* optimizer state arrays: 0, 1 or 2 */
    float *state[2];          /* device, n each: momentum buffer, or Adam m and v */
    float *ema;               /* device, n: the moving average (--ema, ema_set), NULL if none */
    unsigned gen;             /* g_abort_gen when the communicator was made */
    ar_path path;
    gt_p2p *p2p;              /* AR_P2P: the group, one reference per device */
    int rank;                 /* AR_P2P: this device's rank in it */
    unsigned serial;          /* this state's number, unique in the process: a captured step
                               * that sums in parts holds its group's buffers */
    int step_sums;            /* AR_P2P, reduce_update has run: the steps sum in parts */
    int summed;               /* the step queued last summed its gradient into the group's
                               * result, which the reduce_update after it applies */
#ifdef GT_HAVE_NCCL
    ncclComm_t comm;          /* NULL once aborted */
#endif
};

void gt_cuda_allreduce_abort(void)
{
    g_abort_gen.fetch_add(1);
    gt_p2p_abort_all();
}

static int parts_of(gt_device *d, gt_cuda_device_parts *p, gt_err *e)
{
    if (gt_cuda_device_parts_of(d, p) != 0)
        return gt_fail(e, "--mode allreduce: %s is not a CUDA device", d->name);
    return gt_cuda_device_load_join(d, e); /* a pending load_params lands first */
}

void gt_cuda_allreduce_free(gt_cuda_allreduce *a)
{
    if (!a)
        return;
    cudaSetDevice(a->ordinal);
    gt_p2p_release(a->p2p);
#ifdef GT_HAVE_NCCL
    if (a->comm)
        ncclCommDestroy(a->comm);
#endif
    for (int i = 0; i < 2; i++)
        if (a->state[i])
            cudaFree(a->state[i]);
    if (a->ema)
        cudaFree(a->ema);
    cudaGetLastError();
    free(a);
}

/* How a peer all-reduce that gave up is reported. */
static int allreduce_p2p_check(gt_device *d, const gt_cuda_allreduce *a, gt_err *e)
{
    int st = a->p2p ? gt_p2p_status(a->p2p, a->rank) : GT_P2P_OK;
    if (st == GT_P2P_ABORTED)
        return gt_fail(e, "%s: peer all-reduce %s", d->name, AR_ABORTED);
    if (st != GT_P2P_OK)
        return gt_fail(e, "%s: peer all-reduce did not complete within %.0f s (a GPU stopped "
                          "answering?)", d->name, gt_p2p_budget_s(a->p2p));
    return 0;
}

/* ---- a step's sums in parts (device_cuda.cu) ------------------------------------------------ */

unsigned gt_cuda_allreduce_step_sums(const gt_cuda_allreduce *a)
{
    return a && a->p2p && a->step_sums ? a->serial : 0;
}

void gt_cuda_allreduce_step_summed(gt_cuda_allreduce *a, int summed)
{
    if (a)
        a->summed = summed;
}

int gt_cuda_allreduce_sum_part(gt_cuda_allreduce *a, size_t lo, size_t n, void *stream,
                               gt_err *e)
{
    return gt_p2p_launch_range(a->p2p, a->rank, lo, n, AR_PART_BLOCKS, GT_P2P_AUTO, stream,
                               e);
}

/* ---- get_params and set_state (no NCCL in them) ---------------------------------------------- */

/* Queues the running statistics' download into d->buffers, where the device keeps them. */
static int buffers_down(gt_device *d, const gt_cuda_device_parts *p, gt_err *e)
{
    if (p->buffers && d->buffers)
        GT_CUDA_CHECK(d->name, e,
                      cudaMemcpyAsync(d->buffers, p->buffers, d->model->nbuffers * sizeof(float),
                                      cudaMemcpyDeviceToHost, p->ctx->stream));
    return 0;
}

int gt_cuda_get_buffers(gt_device *d, gt_err *e)
{
    gt_cuda_device_parts p;
    if (parts_of(d, &p, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (buffers_down(d, &p, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(p.ctx->stream));
    return 0;
}

int gt_cuda_get_params(gt_device *d, float *s0, float *s1, gt_err *e)
{
    gt_cuda_device_parts p;
    if (parts_of(d, &p, e))
        return -1;
    gt_cuda_allreduce *a = *p.allreduce;
    float *host[2] = {s0, s1};
    size_t bytes = d->model->nparams * sizeof(float);
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(d->params, p.params, bytes, cudaMemcpyDeviceToHost,
                                  p.ctx->stream));
    if (buffers_down(d, &p, e))
        return -1;
    for (int i = 0; i < 2; i++) {
        if (!host[i])
            continue;
        if (!a || i >= a->nstate)
            return gt_fail(e, "%s: get_params: the device holds no optimizer state array %d",
                           d->name, i);
        GT_CUDA_CHECK(d->name, e,
                      cudaMemcpyAsync(host[i], a->state[i], bytes, cudaMemcpyDeviceToHost,
                                      p.ctx->stream));
    }
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(p.ctx->stream));
    return a ? allreduce_p2p_check(d, a, e) : 0;
}

int gt_cuda_set_state(gt_device *d, const float *s0, const float *s1, gt_err *e)
{
    gt_cuda_device_parts p;
    if (parts_of(d, &p, e))
        return -1;
    gt_cuda_allreduce *a = *p.allreduce;
    const float *host[2] = {s0, s1};
    if (!a) {
        if (s0 || s1)
            return gt_fail(e, "%s: set_state: the device holds no optimizer state "
                              "(gt_cuda_allreduce_init was not called)", d->name);
        return 0;
    }
    size_t bytes = a->n * sizeof(float);
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    for (int i = 0; i < a->nstate; i++) {
        if (host[i])
            GT_CUDA_CHECK(d->name, e,
                          cudaMemcpyAsync(a->state[i], host[i], bytes, cudaMemcpyHostToDevice,
                                          p.ctx->stream));
        else
            GT_CUDA_CHECK(d->name, e, cudaMemsetAsync(a->state[i], 0, bytes, p.ctx->stream));
    }
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(p.ctx->stream));
    return 0;
}

/* ---- the moving average (--ema) on the device step ------------------------------------------ */

/* The device's step state (gt_cuda_allreduce_init), its GPU made current, or NULL with a
 * message naming op. */
static gt_cuda_allreduce *step_state(gt_device *d, gt_cuda_device_parts *p, const char *op,
                                    gt_err *e)
{
    if (parts_of(d, p, e))
        return NULL;
    if (!*p->allreduce) {
        gt_fail(e, "%s: %s: gt_cuda_allreduce_init was not called", d->name, op);
        return NULL;
    }
    cudaError_t st = cudaSetDevice(d->ordinal);
    if (st != cudaSuccess) {
        gt_cuda_fail(e, d->name, "cudaSetDevice(d->ordinal)", cudaGetErrorString(st), __FILE__,
                     __LINE__);
        return NULL;
    }
    return *p->allreduce;
}

int gt_cuda_ema_set(gt_device *d, const float *src, gt_err *e)
{
    gt_cuda_device_parts p;
    gt_cuda_allreduce *a = step_state(d, &p, "ema_set", e);
    if (!a)
        return -1;
    size_t bytes = a->n * sizeof(float);
    if (!a->ema && gt_cuda_malloc(p.ctx, (void **)&a->ema, bytes, e))
        return -1;
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(a->ema, src, bytes, cudaMemcpyHostToDevice, p.ctx->stream));
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(p.ctx->stream));
    return 0;
}

int gt_cuda_ema_update(gt_device *d, float decay, gt_err *e)
{
    gt_cuda_device_parts p;
    gt_cuda_allreduce *a = step_state(d, &p, "ema_update", e);
    if (!a)
        return -1;
    if (!a->ema)
        return gt_fail(e, "%s: ema_update: no moving average (ema_set was not called)", d->name);
    return gt_cuda_ema_apply(p.ctx, a->ema, p.params, decay, a->n, e);
}

const float *gt_cuda_allreduce_ema(const gt_cuda_allreduce *a) { return a ? a->ema : NULL; }

int gt_cuda_ema_get(gt_device *d, float *dst, gt_err *e)
{
    gt_cuda_device_parts p;
    gt_cuda_allreduce *a = step_state(d, &p, "ema_get", e);
    if (!a)
        return -1;
    if (!a->ema)
        return gt_fail(e, "%s: ema_get: no moving average (ema_set was not called)", d->name);
    GT_CUDA_CHECK(d->name, e, cudaMemcpyAsync(dst, a->ema, a->n * sizeof(float),
                                              cudaMemcpyDeviceToHost, p.ctx->stream));
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(p.ctx->stream));
    return allreduce_p2p_check(d, a, e);
}

#ifdef GT_HAVE_NCCL

/* One exchange and update without NCCL: the peer all-reduce, or with one GPU none. Queued only. */
static int allreduce_p2p_update(gt_device *d, const gt_cuda_device_parts *p, gt_cuda_allreduce *a,
                                const gt_optim_cfg *c, const gt_optim_step *st, float gscale,
                                gt_err *e)
{
    if (g_abort_gen.load() != a->gen)
        return gt_fail(e, "%s: peer all-reduce %s", d->name, AR_ABORTED);
    if (allreduce_p2p_check(d, a, e))
        return -1;
    const float *sum = p->grad;
    int summed = a->summed;
    a->summed = 0;
    a->step_sums = a->p2p != NULL;
    if (summed) /* by the step, beside its backward; the step's end waited for the parts */
        return gt_cuda_optim_apply(p->ctx, c, st, p->params, gt_p2p_result(a->p2p, a->rank),
                                   gscale, a->state[0], a->state[1], a->n, e);
    if (a->p2p && !gt_p2p_two_shot(a->p2p) && gt_p2p_fuses_update(a->p2p)) /* one kernel */
        return gt_p2p_launch_update(a->p2p, a->rank, p->ctx->stream, c, st, p->params, gscale,
                                    a->state[0], a->state[1], e);
    if (a->p2p) {
        if (gt_p2p_launch(a->p2p, a->rank, GT_P2P_AUTO, p->ctx->stream, e))
            return -1;
        sum = gt_p2p_result(a->p2p, a->rank);
    }
    return gt_cuda_optim_apply(p->ctx, c, st, p->params, sum, gscale, a->state[0], a->state[1],
                               a->n, e);
}

/* The device's state arrays, zeroed; no communicator yet. */
static int allreduce_create(gt_device *d, const gt_cuda_device_parts *p, const gt_optim_cfg *c,
                            gt_cuda_allreduce **out, gt_err *e)
{
    gt_cuda_allreduce *a = (gt_cuda_allreduce *)calloc(1, sizeof *a);
    if (!a)
        return gt_fail(e, "%s: out of host memory", d->name);
    *out = a;
    a->ordinal = d->ordinal;
    a->serial = g_serial.fetch_add(1) + 1;
    a->n = d->model->nparams;
    a->nstate = gt_optim_nstate(c);
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    for (int i = 0; i < a->nstate; i++) {
        if (gt_cuda_malloc(p->ctx, (void **)&a->state[i], a->n * sizeof(float), e))
            return -1;
        GT_CUDA_CHECK(d->name, e, cudaMemsetAsync(a->state[i], 0, a->n * sizeof(float),
                                                  p->ctx->stream));
    }
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(p->ctx->stream));
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Spins for the first millisecond (a step's all-reduce takes tens of microseconds), then sleeps
 * a little, then more (another GPU may be evaluating). */
static void wait_backoff(double waited_s)
{
    if (waited_s < 1e-3)
        return;
    struct timespec ts = {0, waited_s < 20e-3 ? 20000L : 200000L};
    nanosleep(&ts, NULL);
}

/* Stops the communicator's kernels and work: after an error nothing else may use it. */
static void allreduce_abort_comm(gt_cuda_allreduce *a)
{
    if (a->comm) {
        ncclCommAbort(a->comm);
        a->comm = NULL;
    }
}

static int allreduce_fail(gt_device *d, gt_cuda_allreduce *a, const char *call, const char *why,
                          gt_err *e)
{
    allreduce_abort_comm(a);
    return gt_fail(e, "%s: %s %s", d->name, call, why);
}

static int allreduce_fail_nccl(gt_device *d, gt_cuda_allreduce *a, const char *call,
                               ncclResult_t r, gt_err *e)
{
    char why[GT_ERRLEN];
    const char *last = ncclGetLastError(a->comm);
    snprintf(why, sizeof why, "failed: %s%s%.300s%s", ncclGetErrorString(r),
             last && *last ? " (" : "", last ? last : "", last && *last ? ")" : "");
    return allreduce_fail(d, a, call, why, e);
}

/* Waits until NCCL has queued the call (stream = 0) or until the stream is idle (stream = 1),
 * and ends the wait on an NCCL or CUDA error, an abort or the timeout. */
static int allreduce_wait(gt_device *d, gt_cuda_allreduce *a, cudaStream_t s, int stream,
                          const char *call, gt_err *e)
{
    double start = now_s();
    for (;;) {
        if (stream) {
            cudaError_t st = cudaStreamQuery(s);
            if (st == cudaSuccess)
                return 0;
            if (st != cudaErrorNotReady) {
                allreduce_abort_comm(a);
                return gt_fail(e, "%s: cudaStreamQuery after %s failed: %s", d->name, call,
                               cudaGetErrorString(st));
            }
        }
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(a->comm, &state);
        if (r != ncclSuccess)
            return allreduce_fail_nccl(d, a, "ncclCommGetAsyncError", r, e);
        if (state != ncclSuccess && state != ncclInProgress)
            return allreduce_fail_nccl(d, a, call, state, e);
        if (!stream && state == ncclSuccess)
            return 0;
        if (g_abort_gen.load() != a->gen)
            return allreduce_fail(d, a, call, AR_ABORTED, e);
        double waited = now_s() - start;
        if (waited > AR_TIMEOUT_S) {
            char why[96];
            snprintf(why, sizeof why, "did not complete within %d s (a GPU stopped answering?)",
                     AR_TIMEOUT_S);
            return allreduce_fail(d, a, call, why, e);
        }
        wait_backoff(waited);
    }
}

/* The device's parts and exchange for an update with optimizer c (op names the caller), its
 * GPU current; NULL with e set where the device has no exchange or too few state arrays. */
static gt_cuda_allreduce *allreduce_for_update(gt_device *d, gt_cuda_device_parts *p,
                                               const gt_optim_cfg *c, const char *op, gt_err *e)
{
    gt_cuda_allreduce *a = step_state(d, p, op, e);
    if (a && gt_optim_nstate(c) > a->nstate) {
        gt_fail(e, "%s: %s: the optimizer needs %d state arrays, the device holds %d", d->name,
                op, gt_optim_nstate(c), a->nstate);
        return NULL;
    }
    return a;
}

int gt_cuda_reduce_update(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                          float gscale, gt_err *e)
{
    gt_cuda_device_parts p;
    gt_cuda_allreduce *a = allreduce_for_update(d, &p, c, "reduce_update", e);
    if (!a)
        return -1;
    if (a->path != AR_NCCL)
        return allreduce_p2p_update(d, &p, a, c, st, gscale, e);
    if (!a->comm)
        return gt_fail(e, "%s: reduce_update: no NCCL communicator (aborted after an earlier "
                          "error)", d->name);
    if (g_abort_gen.load() != a->gen)
        return allreduce_fail(d, a, "ncclAllReduce", AR_ABORTED, e);
    cudaStream_t s = p.ctx->stream;
    ncclResult_t r = ncclAllReduce(p.grad, p.grad, a->n, ncclFloat, ncclSum, a->comm, s);
    if (r != ncclSuccess && r != ncclInProgress)
        return allreduce_fail_nccl(d, a, "ncclAllReduce", r, e);
    /* A non-blocking call may still be queueing its kernel: the update must come after it. */
    if (r == ncclInProgress && allreduce_wait(d, a, s, 0, "ncclAllReduce", e))
        return -1;
    if (gt_cuda_optim_apply(p.ctx, c, st, p.params, p.grad, gscale, a->state[0], a->state[1],
                            a->n, e)) {
        allreduce_abort_comm(a);
        return -1;
    }
    return allreduce_wait(d, a, s, 1, "ncclAllReduce", e);
}

int gt_cuda_local_update(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                         float gscale, int average, gt_err *e)
{
    gt_cuda_device_parts p;
    gt_cuda_allreduce *a = allreduce_for_update(d, &p, c, "local_update", e);
    if (!a)
        return -1;
    if (average && a->path == AR_NCCL)
        return gt_fail(e, "%s: local_update: averaging the replicas needs the peer exchange",
                       d->name);
    if (g_abort_gen.load() != a->gen)
        return gt_fail(e, "%s: peer all-reduce %s", d->name, AR_ABORTED);
    if (allreduce_p2p_check(d, a, e) ||
        gt_cuda_optim_apply(p.ctx, c, st, p.params, p.grad, gscale, a->state[0], a->state[1],
                            a->n, e))
        return -1;
    if (!average || !a->p2p) /* one replica is its own mean */
        return 0;
    /* The group reads every rank's gradient buffer: the parameters go there first (the next
     * step overwrites it; the average's second barrier keeps it until every peer has read). */
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(p.grad, p.params, a->n * sizeof(float),
                                  cudaMemcpyDeviceToDevice, p.ctx->stream));
    return gt_p2p_launch_average(a->p2p, a->rank, p.ctx->stream, p.params, e);
}

int gt_cuda_allreduce_averages(gt_device *d)
{
    gt_cuda_device_parts p;
    if (gt_cuda_device_parts_of(d, &p) != 0 || !*p.allreduce)
        return 0;
    return (*p.allreduce)->path != AR_NCCL;
}

/* The communicator's unique id: made here on one host; across hosts made by host 0 and sent to
 * the others with its result, so that a failure there fails every host. */
static int allreduce_unique_id(ncclUniqueId *id, gt_err *e)
{
    struct {
        int32_t result;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (gt_cluster_rank() == 0)
        msg.result = ncclGetUniqueId(&msg.id);
    if (gt_cluster_bcast(&msg, sizeof msg, "the NCCL unique id", e))
        return -1;
    if (msg.result != ncclSuccess)
        return gt_fail(e, "--mode allreduce: NCCL init failed: ncclGetUniqueId on host 0: %s",
                       ncclGetErrorString((ncclResult_t)msg.result));
    *id = msg.id;
    return 0;
}

/* Creates the communicators together (one group, one rank per device; across hosts, this host's
 * ranks of one communicator over every host's devices) and waits until each is ready or failed. */
static int allreduce_init_comms(gt_device **devs, gt_cuda_allreduce **ars, int n, gt_err *e)
{
    ncclUniqueId id;
    if (allreduce_unique_id(&id, e))
        return -1;
    int nranks = n * gt_cluster_size(), rank0 = n * gt_cluster_rank();
    ncclResult_t r = ncclSuccess;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    int bad = -1;
    ncclResult_t bad_r = ncclSuccess;
    ncclGroupStart();
    for (int i = 0; i < n; i++) {
        cudaError_t cst = cudaSetDevice(devs[i]->ordinal);
        r = cst == cudaSuccess
                ? ncclCommInitRankConfig(&ars[i]->comm, nranks, id, rank0 + i, &config)
                : ncclUnhandledCudaError;
        if (r != ncclSuccess && r != ncclInProgress && bad < 0) {
            bad = i;
            bad_r = r;
        }
    }
    r = ncclGroupEnd();
    for (int i = 0; i < n && bad < 0; i++) {
        double start = now_s();
        ncclResult_t state = ncclInProgress;
        while (ars[i]->comm && state == ncclInProgress) {
            if (ncclCommGetAsyncError(ars[i]->comm, &state) != ncclSuccess)
                state = ncclInternalError;
            if (state == ncclInProgress && now_s() - start > AR_TIMEOUT_S)
                return gt_fail(e, "--mode allreduce: NCCL init failed on GPU %d: not ready "
                                  "within %d s", devs[i]->ordinal, AR_TIMEOUT_S);
            wait_backoff(now_s() - start);
        }
        if (!ars[i]->comm || state != ncclSuccess) {
            bad = i;
            bad_r = ars[i]->comm ? state : r;
        }
    }
    if (bad >= 0) {
        const char *last = ncclGetLastError(NULL);
        return gt_fail(e, "--mode allreduce: NCCL init failed on GPU %d: %s%s%.300s%s",
                       devs[bad]->ordinal, ncclGetErrorString(bad_r), last && *last ? " (" : "",
                       last ? last : "", last && *last ? ")" : "");
    }
    return 0;
}

/* One peer all-reduce group over the devices' gradients. */
static int allreduce_init_p2p(gt_device **devs, const gt_cuda_device_parts *parts,
                              gt_cuda_allreduce **ars, int n, gt_err *e)
{
    int ord[GT_P2P_MAX_RANKS];
    const float *in[GT_P2P_MAX_RANKS];
    gt_p2p *g;
    if (n > GT_P2P_MAX_RANKS)
        return gt_fail(e, "peer all-reduce: %d GPUs (at most %d)", n, GT_P2P_MAX_RANKS);
    for (int i = 0; i < n; i++) {
        ord[i] = devs[i]->ordinal;
        in[i] = parts[i].grad;
    }
    if (gt_p2p_create(&g, n, ord, in, ars[0]->n, AR_TIMEOUT_S, e))
        return -1;
    for (int i = 0; i < n; i++) {
        if (i)
            gt_p2p_retain(g);
        ars[i]->p2p = g;
        ars[i]->rank = i;
        ars[i]->path = AR_P2P;
    }
    return 0;
}

/* Chooses the exchange (--exchange: auto, p2p or nccl) and sets it up. */
static int allreduce_connect(gt_device **devs, const gt_cuda_device_parts *parts,
                             gt_cuda_allreduce **ars, int n, gt_exchange want, gt_err *e)
{
    int hosts = gt_cluster_size();
    if (hosts > 1 && want == GT_EXCHANGE_P2P)
        return gt_fail(e, "--exchange p2p: works within one host; this run spans %d", hosts);
    if (hosts == 1 && want != GT_EXCHANGE_NCCL) {
        gt_err pe = {{0}};
        if (n == 1) {
            ars[0]->path = AR_LOCAL;
            return 0;
        }
        if (allreduce_init_p2p(devs, parts, ars, n, &pe) == 0)
            return 0;
        if (want == GT_EXCHANGE_P2P)
            return gt_fail(e, "--exchange p2p: %s", pe.msg);
    }
    for (int i = 0; i < n; i++)
        ars[i]->path = AR_NCCL;
    return allreduce_init_comms(devs, ars, n, e);
}

/* The devices must be distinct CUDA GPUs of one model. */
static int allreduce_check_devices(gt_device **devs, int n, gt_cuda_device_parts *parts,
                                   gt_err *e)
{
    if (n < 1 || n > GT_MAX_WORKERS)
        return gt_fail(e, "--mode allreduce: %d GPUs (1..%d supported)", n, GT_MAX_WORKERS);
    for (int i = 0; i < n; i++) {
        if (parts_of(devs[i], &parts[i], e))
            return -1;
        if (devs[i]->model->nparams != devs[0]->model->nparams)
            return gt_fail(e, "--mode allreduce: %s holds %zu parameters, %s holds %zu",
                           devs[i]->name, devs[i]->model->nparams, devs[0]->name,
                           devs[0]->model->nparams);
        for (int j = 0; j < i; j++)
            if (devs[j]->ordinal == devs[i]->ordinal)
                return gt_fail(e, "--mode allreduce: GPU %d is listed twice (NCCL takes one "
                                  "rank per GPU)", devs[i]->ordinal);
    }
    return 0;
}

int gt_cuda_allreduce_init(gt_device **devs, int n, const gt_optim_cfg *c, gt_exchange x,
                           gt_err *e)
{
    gt_cuda_device_parts parts[GT_MAX_WORKERS];
    gt_cuda_allreduce *ars[GT_MAX_WORKERS] = {NULL};
    if (allreduce_check_devices(devs, n, parts, e))
        return -1;
    unsigned gen = g_abort_gen.load();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        gt_cuda_allreduce_free(*parts[i].allreduce);
        *parts[i].allreduce = NULL;
        rc = allreduce_create(devs[i], &parts[i], c, &ars[i], e);
        if (ars[i])
            ars[i]->gen = gen;
    }
    if (rc == 0)
        rc = allreduce_connect(devs, parts, ars, n, x, e);
    for (int i = 0; i < n; i++) {
        if (rc == 0) {
            *parts[i].allreduce = ars[i];
        } else if (ars[i]) {
            allreduce_abort_comm(ars[i]);
            gt_cuda_allreduce_free(ars[i]);
        }
    }
    return rc;
}

#else

int gt_cuda_reduce_update(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                          float gscale, gt_err *e)
{
    return gt_fail(e, "%s: --mode allreduce: this gputrain was built without NCCL", d->name);
}

int gt_cuda_local_update(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                         float gscale, int average, gt_err *e)
{
    return gt_fail(e, "%s: the local mode's device step: this gputrain was built without NCCL",
                   d->name);
}

int gt_cuda_allreduce_averages(gt_device *d) { return 0; }

int gt_cuda_allreduce_init(gt_device **devs, int n, const gt_optim_cfg *c, gt_exchange x,
                           gt_err *e)
{
    return gt_fail(e, "--mode allreduce: this gputrain was built without NCCL");
}

#endif
