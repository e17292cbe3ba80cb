/* exchange_bench.c - what the gradient exchange of --mode allreduce costs on the GPUs present: the
 * peer-to-peer all-reduce (cuda/p2p_allreduce.cu; its automatic choice, one-shot, two-shot, and
 * the automatic choice replayed from a CUDA graph) next to NCCL's all-reduce, at lenet5's and
 * cnn-wide's gradient sizes and a few between.
 * Usage: exchange_bench [GPUS] (default: every GPU, at most 8). Prints one table: per size, each
 * exchange's latency in microseconds (the median over REPS runs of CALLS back-to-back calls on
 * every GPU, timed with CUDA events per GPU, the slowest GPU's time divided by CALLS, after WARM
 * calls) and its bus bandwidth, algbw x 2(W-1)/W as nccl-tests reports it; and whether every
 * GPU's peer result equals the host's rank-order sum bit for bit. */
#include "gputrain/model.h"
#include "gt_cuda.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GT_HAVE_NCCL
#include <nccl.h>
#endif

enum { WARM = 10, CALLS = 20, REPS = 25, MAX_SIZES = 8 };
enum { X_AUTO, X_ONE, X_TWO, X_GRAPH, X_NCCL, X_COUNT };
static const char *const X_NAMES[X_COUNT] = {"p2p auto", "one-shot", "two-shot", "auto graph",
                                             "nccl"};

#define BENCH_CUDA(call)                                                                     \
    do {                                                                                     \
        cudaError_t st_ = (call);                                                            \
        if (st_ != cudaSuccess) {                                                            \
            fprintf(stderr, "exchange_bench: %s failed: %s (line %d)\n", #call,              \
                    cudaGetErrorString(st_), __LINE__);                                      \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

typedef struct bench {
    int w;
    int ord[GT_P2P_MAX_RANKS];
    cudaStream_t s[GT_P2P_MAX_RANKS];
    cudaEvent_t t0[GT_P2P_MAX_RANKS], t1[GT_P2P_MAX_RANKS];
    float *in[GT_P2P_MAX_RANKS], *out[GT_P2P_MAX_RANKS]; /* max_n each; out for NCCL */
    float *host_in[GT_P2P_MAX_RANKS];
    size_t max_n;
    gt_p2p *p2p;                                   /* the group of the size being timed */
    cudaGraphExec_t graph[GT_P2P_MAX_RANKS];       /* CALLS launches of the group, per rank */
    int graphs;                                    /* the graphs were captured */
    int nccl;                                      /* the communicators exist */
#ifdef GT_HAVE_NCCL
    ncclComm_t comm[GT_P2P_MAX_RANKS];
#endif
} bench;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const gt_err *e)
{
    fprintf(stderr, "exchange_bench: %s\n", e->msg);
    exit(1);
}

/* Queues one call of exchange x on every GPU. */
static void bench_call(bench *b, int x, size_t n)
{
    gt_err e = {""};
    if (x == X_NCCL) {
#ifdef GT_HAVE_NCCL
        ncclGroupStart();
        for (int r = 0; r < b->w; r++)
            ncclAllReduce(b->in[r], b->out[r], n, ncclFloat, ncclSum, b->comm[r], b->s[r]);
        if (ncclGroupEnd() != ncclSuccess) {
            fprintf(stderr, "exchange_bench: ncclAllReduce failed\n");
            exit(1);
        }
#endif
        return;
    }
    int algo = x == X_ONE ? GT_P2P_ONE_SHOT : x == X_TWO ? GT_P2P_TWO_SHOT : GT_P2P_AUTO;
    for (int r = 0; r < b->w; r++)
        if (gt_p2p_launch(b->p2p, r, algo, b->s[r], &e))
            die(&e);
}

/* CALLS calls, as launches or one graph replay per GPU. */
static void bench_calls(bench *b, int x, size_t n)
{
    if (x == X_GRAPH) {
        for (int r = 0; r < b->w; r++) {
            BENCH_CUDA(cudaSetDevice(b->ord[r]));
            BENCH_CUDA(cudaGraphLaunch(b->graph[r], b->s[r]));
        }
        return;
    }
    for (int k = 0; k < CALLS; k++)
        bench_call(b, x, n);
}

static void bench_sync(bench *b)
{
    for (int r = 0; r < b->w; r++) {
        BENCH_CUDA(cudaSetDevice(b->ord[r]));
        BENCH_CUDA(cudaStreamSynchronize(b->s[r]));
        if (b->p2p && gt_p2p_status(b->p2p, r) != GT_P2P_OK) {
            fprintf(stderr, "exchange_bench: the peer all-reduce gave up on gpu:%d\n", b->ord[r]);
            exit(1);
        }
    }
}

/* Median seconds per call of exchange x at n floats. */
static double bench_time(bench *b, int x, size_t n)
{
    double t[REPS];
    for (int k = 0; k < WARM; k++)
        bench_call(b, x == X_GRAPH ? X_AUTO : x, n);
    bench_sync(b);
    for (int rep = 0; rep < REPS; rep++) {
        for (int r = 0; r < b->w; r++) {
            BENCH_CUDA(cudaSetDevice(b->ord[r]));
            BENCH_CUDA(cudaEventRecord(b->t0[r], b->s[r]));
        }
        bench_calls(b, x, n);
        for (int r = 0; r < b->w; r++) {
            BENCH_CUDA(cudaSetDevice(b->ord[r]));
            BENCH_CUDA(cudaEventRecord(b->t1[r], b->s[r]));
        }
        bench_sync(b);
        float worst = 0;
        for (int r = 0; r < b->w; r++) {
            float ms = 0;
            BENCH_CUDA(cudaEventElapsedTime(&ms, b->t0[r], b->t1[r]));
            worst = ms > worst ? ms : worst;
        }
        t[rep] = 1e-3 * worst / CALLS;
    }
    qsort(t, REPS, sizeof *t, cmp_double);
    return t[REPS / 2];
}

/* Captures CALLS automatic launches per GPU into a graph; b->graphs says whether it worked. */
static void bench_capture(bench *b)
{
    b->graphs = 1;
    for (int r = 0; r < b->w && b->graphs; r++) {
        cudaGraph_t g = NULL;
        gt_err e = {""};
        int rc = 0;
        BENCH_CUDA(cudaSetDevice(b->ord[r]));
        BENCH_CUDA(cudaStreamBeginCapture(b->s[r], cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < CALLS && rc == 0; k++)
            rc = gt_p2p_launch(b->p2p, r, GT_P2P_AUTO, b->s[r], &e);
        cudaError_t st = cudaStreamEndCapture(b->s[r], &g);
        if (rc == 0 && st == cudaSuccess)
            st = cudaGraphInstantiate(&b->graph[r], g, 0);
        if (g)
            cudaGraphDestroy(g);
        if (rc || st != cudaSuccess) {
            fprintf(stderr, "exchange_bench: capture failed on gpu:%d: %s\n", b->ord[r],
                    rc ? e.msg : cudaGetErrorString(st));
            cudaGetLastError();
            b->graphs = 0;
        }
    }
}

/* 1 when every GPU's peer result equals the host's sum in rank order, bit for bit. */
static int bench_exact(bench *b, size_t n)
{
    float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    int same = ref && got;
    for (size_t i = 0; same && i < n; i++) {
        float acc = b->host_in[0][i];
        for (int r = 1; r < b->w; r++)
            acc += b->host_in[r][i];
        ref[i] = acc;
    }
    for (int r = 0; same && r < b->w; r++) {
        BENCH_CUDA(cudaSetDevice(b->ord[r]));
        BENCH_CUDA(cudaMemcpy(got, gt_p2p_result(b->p2p, r), n * sizeof *got,
                              cudaMemcpyDeviceToHost));
        same = memcmp(got, ref, n * sizeof *got) == 0;
    }
    free(ref);
    free(got);
    return same;
}

static void bench_open(bench *b, int w, size_t max_n)
{
    memset(b, 0, sizeof *b);
    b->w = w;
    b->max_n = max_n;
    uint32_t seed = 12345;
    for (int r = 0; r < w; r++) {
        b->ord[r] = r;
        BENCH_CUDA(cudaSetDevice(r));
        BENCH_CUDA(cudaStreamCreateWithFlags(&b->s[r], cudaStreamNonBlocking));
        BENCH_CUDA(cudaEventCreate(&b->t0[r]));
        BENCH_CUDA(cudaEventCreate(&b->t1[r]));
        BENCH_CUDA(cudaMalloc((void **)&b->in[r], max_n * sizeof(float)));
        BENCH_CUDA(cudaMalloc((void **)&b->out[r], max_n * sizeof(float)));
        b->host_in[r] = malloc(max_n * sizeof(float));
        if (!b->host_in[r]) {
            fprintf(stderr, "exchange_bench: out of host memory\n");
            exit(1);
        }
        for (size_t i = 0; i < max_n; i++) {
            seed = seed * 1664525u + 1013904223u;
            b->host_in[r][i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
        }
        BENCH_CUDA(cudaMemcpy(b->in[r], b->host_in[r], max_n * sizeof(float),
                              cudaMemcpyHostToDevice));
    }
#ifdef GT_HAVE_NCCL
    ncclResult_t st = ncclCommInitAll(b->comm, w, b->ord);
    b->nccl = st == ncclSuccess;
    if (!b->nccl)
        fprintf(stderr, "exchange_bench: ncclCommInitAll failed: %s\n", ncclGetErrorString(st));
#endif
}

/* One row of the table: every exchange at n floats. */
static void bench_size(bench *b, size_t n, const char *label)
{
    gt_err e = {""};
    double t[X_COUNT] = {0};
    if (gt_p2p_create(&b->p2p, b->w, b->ord, (const float *const *)b->in, n, 10.0, &e))
        die(&e);
    bench_capture(b);
    for (int x = 0; x < X_COUNT; x++)
        if ((x != X_NCCL || b->nccl) && (x != X_GRAPH || b->graphs))
            t[x] = bench_time(b, x, n);
    int exact = bench_exact(b, n);
    double bytes = (double)n * sizeof(float), f = 2.0 * (b->w - 1) / b->w;
    printf("| %-9s | %8.0f |", label, bytes / 1024);
    for (int x = 0; x < X_COUNT; x++) {
        if (t[x] > 0)
            printf(" %8.1f |", 1e6 * t[x]);
        else
            printf(" %8s |", "-");
    }
    printf(" %7.1f | %7.1f | %s |\n", bytes / t[X_AUTO] * f / 1e9,
           t[X_NCCL] > 0 ? bytes / t[X_NCCL] * f / 1e9 : 0.0, exact ? "yes" : "NO");
    for (int r = 0; r < b->w; r++) {
        BENCH_CUDA(cudaSetDevice(b->ord[r]));
        if (b->graph[r])
            BENCH_CUDA(cudaGraphExecDestroy(b->graph[r]));
        b->graph[r] = NULL;
    }
    gt_p2p_release(b->p2p);
    b->p2p = NULL;
}

static size_t model_params(const char *name)
{
    gt_model m;
    gt_err e = {""};
    if (gt_model_build(name, 1, 28, 28, 10, &m, &e))
        die(&e);
    return m.nparams;
}

int main(int argc, char **argv)
{
    int count = gt_cuda_device_count(), w = count < GT_P2P_MAX_RANKS ? count : GT_P2P_MAX_RANKS;
    if (argc > 2 || (argc == 2 && (atoi(argv[1]) < 2 || atoi(argv[1]) > w))) {
        fprintf(stderr, "usage: exchange_bench [GPUS] (2..%d here)\n", w);
        return 2;
    }
    if (w < 2) {
        printf("exchange_bench: %d GPU(s) visible, an exchange needs 2\n", count);
        return 77;
    }
    w = argc == 2 ? atoi(argv[1]) : w;
    size_t lenet = model_params("lenet5"), wide = model_params("cnn-wide");
    size_t sizes[MAX_SIZES] = {lenet, 1u << 16, 1u << 17, 1u << 18, 1u << 20, wide};
    const char *labels[MAX_SIZES] = {"lenet5", "", "", "", "", "cnn-wide"};
    int nsizes = 6;
    struct cudaDeviceProp prop;
    BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
    bench b;
    bench_open(&b, w, wide > (1u << 20) ? wide : (1u << 20));
    printf("exchange_bench: %d x %s; latency in us: median of %d runs of %d back-to-back calls "
           "(slowest GPU), after %d warm-up calls; busbw in GB/s = algbw x 2(W-1)/W; exact: "
           "every GPU's peer result equals the host's rank-order sum\n\n",
           w, prop.name, REPS, CALLS, WARM);
    printf("| size      |       KB |");
    for (int x = 0; x < X_COUNT; x++)
        printf(" %8s |", X_NAMES[x]);
    printf(" p2p bus | nccl bus | exact |\n|---|---:|");
    for (int x = 0; x < X_COUNT + 2; x++)
        printf("---:|");
    printf("---|\n");
    for (int i = 0; i < nsizes; i++)
        bench_size(&b, sizes[i], labels[i]);
    return 0;
}
