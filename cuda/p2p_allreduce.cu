/* p2p_allreduce.cu - an all-reduce (sum) between the GPUs of this process over peer access
 * (NVLink where there is one), synchronised on the devices themselves: no host round trip, no
 * communicator, one kernel per GPU per call.
 *
 * Every GPU (rank) owns a result buffer, a flag array (one slot per block and peer rank) and one
 * sequence counter per block, all in its own memory; peers reach them through peer access. Block
 * b of every rank works on the same part of the data and meets block b of every other rank at two
 * flag barriers: a rank writes the next value of block b's sequence into each peer's slot
 * [b][its rank] and waits until its own slots [b][peer] reach that value. The sequence only grows
 * (2 per call), so nothing is ever reset, and the kernel's arguments never change between calls:
 * the launch can be captured in a CUDA graph.
 *
 * one-shot (small arrays, and any on 2 GPUs): after the first barrier each rank reads the whole
 * input of every rank and sums it into its own result. two-shot (large arrays on 3 GPUs or more):
 * rank r sums only chunk r of every rank's input and writes that sum into chunk r of every rank's
 * result (a reduce-scatter whose all-gather is the push). Either way every element is summed in
 * rank order 0..W-1 with round-to-nearest adds, so every GPU gets the same bits, and the same bits
 * in both algorithms.
 * The second barrier says "done reading your input and writing your result": after it a rank's
 * next step may overwrite its gradient.
 * gt_p2p_launch_range sums one range [lo, lo + n) of the arrays the same way (one-shot or
 * two-shot by the same rule on n), so that a step can sum each part of its gradient as soon as
 * its backward has finished it: a part that starts or ends inside a float4 sums those elements
 * one by one, the same adds, so the parts give the bits of the whole. A call of fewer blocks
 * advances fewer blocks' sequences; every rank launching the same calls (ranges and block caps)
 * in the same order keeps each block's sequence in step across the ranks.
 * gt_p2p_launch_update (one-shot only) applies the optimizer's update to the rank's parameters
 * as it sums, element by element (optim_elem.cuh), instead of writing the result: what a launch
 * followed by gt_cuda_optim_apply on its result computes, the same bits, in one kernel. It pays
 * below P2P_TWO_SHOT_BYTES only (gt_p2p_fuses_update): 2x H200, lenet5's 174 KB, 2 GPUs 1.10 M
 * against 1.09 M samples/s; cnn-wide's 13 MB 296k against 300k, where the separate update kernel
 * runs on more threads than the all-reduce starts (docs/perf-notes.md, lever 12).
 *
 * A wait is bounded: every 256 polls it reads the wall clock (%globaltimer) and two words in
 * pinned host memory, the process-wide abort generation (gt_p2p_abort_all) and the group's
 * "a rank has left" word. When the budget runs out, or either word says so, the block writes why
 * into the rank's status word (pinned host memory, read by gt_p2p_status) and leaves: the stream
 * drains, the host sees the status and ends the run. A group with a nonzero status is spent. */
#include "gt_cuda.h"
#include "optim_elem.cuh"

#include <atomic>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P2P_THREADS 512
#define P2P_MAX_BLOCKS 128
/* float4 elements a thread of a block sums per pass at most, on average: how many blocks a call
 * starts (more blocks, more flags to write; fewer, less in flight over the link). */
#define P2P_PER_THREAD 1
/* Arrays of at least this many bytes use the two-shot algorithm under GT_P2P_AUTO, on 3 GPUs or
 * more: on 2, one-shot reads as much over the link as two-shot reads and writes, and measured
 * faster at every size up to 13 MB (docs/perf-notes.md, lever 7). */
#define P2P_TWO_SHOT_BYTES (512u << 10)

/* Host words, pinned and mapped: [0] the group has lost a rank, [1 + r] rank r's status. */
enum { P2P_DEAD = 0, P2P_STATUS = 1 };

struct p2p_args {
    const float *in[GT_P2P_MAX_RANKS];   /* every rank's input */
    float *out[GT_P2P_MAX_RANKS];        /* every rank's result */
    unsigned *flags[GT_P2P_MAX_RANKS];   /* every rank's [P2P_MAX_BLOCKS][GT_P2P_MAX_RANKS] */
    unsigned *seq;                       /* this rank's sequence, one per block */
    const volatile unsigned *abort_gen;  /* process-wide, host memory */
    const volatile unsigned *dead;       /* the group's, host memory */
    volatile unsigned *status;           /* this rank's, host memory */
    unsigned gen;                        /* *abort_gen when the group was made */
    unsigned long long budget_ns;
    size_t lo, hi;                       /* the elements summed: [lo, hi) */
    int rank;
    /* gt_p2p_launch_update: this rank's parameters and optimizer state, the update's constants */
    float *params, *s0, *s1;
    optim_consts k;
    float gscale;
};

struct gt_p2p {
    int nranks;
    int ordinal[GT_P2P_MAX_RANKS];
    size_t n;
    int nsm;                             /* the smallest multiprocessor count of the ranks */
    double budget_s;
    p2p_args args;                       /* rank-independent part; launch fills rank */
    unsigned *host;                      /* P2P_DEAD, P2P_STATUS + rank */
    std::atomic<int> refs;
};

static std::mutex g_abort_mu;
static unsigned *g_abort_word;           /* pinned, mapped; the abort generation */

/* ---- device side ----------------------------------------------------------------------------- */

__device__ static inline void p2p_store_release(unsigned *p, unsigned v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ static inline unsigned p2p_load_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ static inline unsigned long long p2p_clock_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Why a wait must end now (GT_P2P_*), polled between flag reads. A call of this rank that gave up
 * before spends the group: the calls queued behind it (a step's parts) leave at once instead of
 * each waiting out its own budget. */
__device__ static int p2p_why_stop(const p2p_args &a, unsigned long long deadline)
{
    unsigned spent = *a.status;
    if (spent != GT_P2P_OK)
        return (int)spent;
    if (*a.abort_gen != a.gen || *a.dead)
        return GT_P2P_ABORTED;
    return p2p_clock_ns() > deadline ? GT_P2P_TIMED_OUT : GT_P2P_OK;
}

/* Block b of every rank meets here at sequence value v. fence: the block's threads wrote to
 * peers' memory that the peers read after the barrier (the release store orders only its own
 * thread's writes). 0, or why the block must leave. */
template <int W>
__device__ static int p2p_barrier(const p2p_args &a, unsigned v, unsigned long long deadline,
                                  bool fence)
{
    __shared__ volatile int fail;
    if (fence)
        __threadfence_system();
    if (threadIdx.x == 0)
        fail = GT_P2P_OK;
    __syncthreads();
    int t = threadIdx.x;
    if (t < W) {
        p2p_store_release(a.flags[t] + blockIdx.x * GT_P2P_MAX_RANKS + a.rank, v);
        const unsigned *mine = a.flags[a.rank] + blockIdx.x * GT_P2P_MAX_RANKS + t;
        for (unsigned polls = 1; (int)(p2p_load_acquire(mine) - v) < 0; polls++) {
            int why = polls % 256 == 0 ? p2p_why_stop(a, deadline) : GT_P2P_OK;
            if (why != GT_P2P_OK) {
                fail = why;
                *a.status = (unsigned)why;
                break;
            }
        }
    }
    __syncthreads();
    return fail;
}

__device__ static inline float4 p2p_add4(float4 x, float4 y)
{
    return make_float4(__fadd_rn(x.x, y.x), __fadd_rn(x.y, y.y), __fadd_rn(x.z, y.z),
                       __fadd_rn(x.w, y.w));
}

/* Float4 element i summed over the ranks in rank order: the same bits on every GPU. */
template <int W>
__device__ static inline float4 p2p_sum4(const p2p_args &a, size_t i)
{
    float4 v[W];
#pragma unroll
    for (int r = 0; r < W; r++)
        v[r] = __ldcg((const float4 *)a.in[r] + i);
    float4 acc = v[0];
#pragma unroll
    for (int r = 1; r < W; r++)
        acc = p2p_add4(acc, v[r]);
    return acc;
}

/* P2P_AVERAGE: the mean of the ranks' inputs into the rank's params, each element summed in
 * double in rank order from 0 and divided by the rank count, then rounded to float, as
 * mode_local.c averages the replicas through the store. */
enum { P2P_AVERAGE = 16 };

template <int W>
__device__ static inline float p2p_mean(const float (&v)[W])
{
    double acc = 0.0;
#pragma unroll
    for (int r = 0; r < W; r++)
        acc = __dadd_rn(acc, (double)v[r]);
    return __double2float_rn(__ddiv_rn(acc, (double)W));
}

template <int W>
__device__ static inline void p2p_average4(const p2p_args &a, size_t i)
{
    float x[W], y[W], z[W], w[W];
#pragma unroll
    for (int r = 0; r < W; r++) {
        float4 v = __ldcg((const float4 *)a.in[r] + i);
        x[r] = v.x;
        y[r] = v.y;
        z[r] = v.z;
        w[r] = v.w;
    }
    a.params[4 * i] = p2p_mean<W>(x);
    a.params[4 * i + 1] = p2p_mean<W>(y);
    a.params[4 * i + 2] = p2p_mean<W>(z);
    a.params[4 * i + 3] = p2p_mean<W>(w);
}

/* The first float4 element of [lo, hi) that starts at or after lo, and the end of the whole
 * float4 elements from there (never before it). */
__device__ static inline size_t p2p_first4(const p2p_args &a) { return (a.lo + 3) / 4; }

__device__ static inline size_t p2p_end4(const p2p_args &a)
{
    return a.hi / 4 > p2p_first4(a) ? a.hi / 4 : p2p_first4(a);
}

/* Element i, outside the range's whole float4 elements, summed by each rank for itself: into its
 * result, or (RULE) its update applied. */
template <int W, int RULE>
__device__ static void p2p_elem(const p2p_args &a, size_t i)
{
    if (RULE == P2P_AVERAGE) {
        float v[W];
#pragma unroll
        for (int r = 0; r < W; r++)
            v[r] = __ldcg(a.in[r] + i);
        a.params[i] = p2p_mean<W>(v);
        return;
    }
    float acc = __ldcg(a.in[0] + i);
#pragma unroll
    for (int r = 1; r < W; r++)
        acc = __fadd_rn(acc, __ldcg(a.in[r] + i));
    if (RULE != 0)
        optim_elem<RULE>(a.k, a.params, acc, a.gscale, a.s0, a.s1, i);
    else
        a.out[a.rank][i] = acc;
}

/* The range's elements before its first whole float4 element (a part that starts inside one)
 * and after its last (the hi % 4 last), at most 3 each, by block 0's first threads. */
template <int W, int RULE>
__device__ static void p2p_ends(const p2p_args &a)
{
    size_t t = threadIdx.x;
    if (blockIdx.x != 0)
        return;
    if (t < 3 && a.lo + t < 4 * p2p_first4(a) && a.lo + t < a.hi)
        p2p_elem<W, RULE>(a, a.lo + t);
    else if (t >= 3 && t < 6 && 4 * p2p_end4(a) + t - 3 < a.hi)
        p2p_elem<W, RULE>(a, 4 * p2p_end4(a) + t - 3);
}

/* The sums of float4 element i applied as the update of parameters 4i..4i+3. */
template <int RULE>
__device__ static inline void p2p_update4(const p2p_args &a, size_t i, float4 acc)
{
    optim_elem<RULE>(a.k, a.params, acc.x, a.gscale, a.s0, a.s1, 4 * i);
    optim_elem<RULE>(a.k, a.params, acc.y, a.gscale, a.s0, a.s1, 4 * i + 1);
    optim_elem<RULE>(a.k, a.params, acc.z, a.gscale, a.s0, a.s1, 4 * i + 2);
    optim_elem<RULE>(a.k, a.params, acc.w, a.gscale, a.s0, a.s1, 4 * i + 3);
}

/* RULE 0: the sum into the results; else (one-shot only) the optimizer's update by it, or
 * (P2P_AVERAGE) the mean into the parameters. */
template <int W, bool TWO_SHOT, int RULE>
__global__ static void __launch_bounds__(P2P_THREADS) p2p_kernel(p2p_args a)
{
    unsigned long long deadline = p2p_clock_ns() + a.budget_ns;
    unsigned v = a.seq[blockIdx.x];
    if (p2p_barrier<W>(a, v + 1, deadline, false) != GT_P2P_OK)
        return;
    size_t lo = p2p_first4(a), hi = p2p_end4(a);
    if (TWO_SHOT) {
        size_t chunk = (hi - lo + W - 1) / W, end = hi;
        lo = lo + chunk * (size_t)a.rank < end ? lo + chunk * (size_t)a.rank : end;
        hi = lo + chunk < end ? lo + chunk : end;
    }
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += stride) {
        if (RULE == P2P_AVERAGE) {
            p2p_average4<W>(a, i);
            continue;
        }
        float4 acc = p2p_sum4<W>(a, i);
        if (TWO_SHOT) {
#pragma unroll
            for (int r = 0; r < W; r++)
                ((float4 *)a.out[(a.rank + r) % W])[i] = acc;
        } else if (RULE) {
            p2p_update4<RULE>(a, i, acc);
        } else {
            ((float4 *)a.out[a.rank])[i] = acc;
        }
    }
    p2p_ends<W, RULE>(a);
    if (p2p_barrier<W>(a, v + 2, deadline, TWO_SHOT) != GT_P2P_OK)
        return;
    if (threadIdx.x == 0)
        a.seq[blockIdx.x] = v + 2;
}

/* ---- host side ------------------------------------------------------------------------------- */

typedef void (*p2p_kernel_fn)(p2p_args);

/* The kernel for w ranks: two-shot, or one-shot with the update rule `rule` (0: none;
 * P2P_AVERAGE: the mean). */
static p2p_kernel_fn p2p_kernel_for(int w, int two_shot, int rule)
{
#define P2P_CASE(W)                                                                           \
    case W:                                                                                   \
        if (two_shot)                                                                         \
            return p2p_kernel<W, true, 0>;                                                    \
        switch (rule) {                                                                       \
        case OPTIM_SGD: return p2p_kernel<W, false, OPTIM_SGD>;                               \
        case OPTIM_MOMENTUM: return p2p_kernel<W, false, OPTIM_MOMENTUM>;                     \
        case OPTIM_NESTEROV: return p2p_kernel<W, false, OPTIM_NESTEROV>;                     \
        case OPTIM_ADAM: return p2p_kernel<W, false, OPTIM_ADAM>;                             \
        case P2P_AVERAGE: return p2p_kernel<W, false, P2P_AVERAGE>;                           \
        default: return p2p_kernel<W, false, 0>;                                              \
        }
    switch (w) {
        P2P_CASE(2)
        P2P_CASE(3)
        P2P_CASE(4)
        P2P_CASE(5)
        P2P_CASE(6)
        P2P_CASE(7)
        P2P_CASE(8)
    default: return NULL;
    }
#undef P2P_CASE
}

/* The pinned, mapped word every kernel compares with its group's generation. */
static int p2p_abort_word(unsigned **out, gt_err *e)
{
    std::lock_guard<std::mutex> lock(g_abort_mu);
    if (!g_abort_word) {
        void *p = NULL;
        cudaError_t st = cudaHostAlloc(&p, sizeof(unsigned),
                                       cudaHostAllocPortable | cudaHostAllocMapped);
        if (st != cudaSuccess)
            return gt_fail(e, "peer all-reduce: cudaHostAlloc of the abort word failed: %s",
                           cudaGetErrorString(st));
        *(volatile unsigned *)p = 0;
        g_abort_word = (unsigned *)p;
    }
    *out = g_abort_word;
    return 0;
}

void gt_p2p_abort_all(void)
{
    std::lock_guard<std::mutex> lock(g_abort_mu);
    if (g_abort_word)
        __atomic_add_fetch(g_abort_word, 1u, __ATOMIC_SEQ_CST);
}

/* Frees every rank's buffers; the streams that used them are idle. */
static void p2p_free(gt_p2p *p)
{
    for (int r = 0; r < p->nranks; r++) {
        cudaSetDevice(p->ordinal[r]);
        if (p->args.out[r])
            cudaFree(p->args.out[r]);
        if (p->args.flags[r])
            cudaFree(p->args.flags[r]);
    }
    if (p->host)
        cudaFreeHost(p->host);
    cudaGetLastError();
    delete p;
}

/* Rank r's result buffer, flags and sequence counters (after the flags), zeroed. */
static int p2p_alloc_rank(gt_p2p *p, int r, gt_err *e)
{
    char gpu[32];
    snprintf(gpu, sizeof gpu, "gpu:%d", p->ordinal[r]);
    size_t nflags = (size_t)P2P_MAX_BLOCKS * GT_P2P_MAX_RANKS + P2P_MAX_BLOCKS;
    GT_CUDA_CHECK(gpu, e, cudaSetDevice(p->ordinal[r]));
    GT_CUDA_CHECK(gpu, e, cudaMalloc((void **)&p->args.out[r], (p->n ? p->n : 1) * sizeof(float)));
    GT_CUDA_CHECK(gpu, e, cudaMalloc((void **)&p->args.flags[r], nflags * sizeof(unsigned)));
    GT_CUDA_CHECK(gpu, e, cudaMemset(p->args.flags[r], 0, nflags * sizeof(unsigned)));
    int nsm = 0;
    GT_CUDA_CHECK(gpu, e, cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount,
                                                 p->ordinal[r]));
    p->nsm = r == 0 || nsm < p->nsm ? nsm : p->nsm;
    GT_CUDA_CHECK(gpu, e, cudaDeviceSynchronize());
    return 0;
}

static int p2p_check_args(int nranks, const int *ordinals, const float *const *in, gt_err *e)
{
    if (nranks < 2 || nranks > GT_P2P_MAX_RANKS)
        return gt_fail(e, "peer all-reduce: %d GPUs (2..%d supported)", nranks,
                       GT_P2P_MAX_RANKS);
    for (int r = 0; r < nranks; r++) {
        if (((uintptr_t)in[r] & 15) != 0)
            return gt_fail(e, "peer all-reduce: gpu:%d's input is not 16-byte aligned",
                           ordinals[r]);
        for (int q = 0; q < r; q++)
            if (ordinals[q] == ordinals[r])
                return gt_fail(e, "peer all-reduce: GPU %d is listed twice", ordinals[r]);
    }
    return 0;
}

int gt_p2p_create(gt_p2p **out, int nranks, const int *ordinals, const float *const *in,
                  size_t n, double budget_s, gt_err *e)
{
    *out = NULL;
    unsigned *abort_word = NULL;
    if (p2p_check_args(nranks, ordinals, in, e) || gt_cuda_enable_peers(ordinals, nranks, e) ||
        p2p_abort_word(&abort_word, e))
        return -1;
    gt_p2p *p = new gt_p2p();
    p->nranks = nranks;
    p->n = n;
    p->budget_s = budget_s;
    p->refs = 1;
    memcpy(p->ordinal, ordinals, (size_t)nranks * sizeof *ordinals);
    cudaError_t st = cudaHostAlloc((void **)&p->host, (1 + GT_P2P_MAX_RANKS) * sizeof(unsigned),
                                   cudaHostAllocPortable | cudaHostAllocMapped);
    if (st != cudaSuccess) {
        p->host = NULL;
        p2p_free(p);
        return gt_fail(e, "peer all-reduce: cudaHostAlloc of the status words failed: %s",
                       cudaGetErrorString(st));
    }
    memset(p->host, 0, (1 + GT_P2P_MAX_RANKS) * sizeof(unsigned));
    for (int r = 0; r < nranks; r++) {
        p->args.in[r] = in[r];
        if (p2p_alloc_rank(p, r, e)) {
            p2p_free(p);
            return -1;
        }
    }
    p->args.abort_gen = abort_word;
    p->args.gen = __atomic_load_n(abort_word, __ATOMIC_SEQ_CST);
    p->args.dead = p->host + P2P_DEAD;
    p->args.budget_ns = (unsigned long long)(budget_s * 1e9);
    p->args.lo = 0;
    p->args.hi = n;
    *out = p;
    return 0;
}

/* GT_P2P_AUTO's choice for a call over n floats. */
static int p2p_two_shot_for(const gt_p2p *p, size_t n)
{
    return p->nranks > 2 && n * sizeof(float) >= P2P_TWO_SHOT_BYTES;
}

int gt_p2p_two_shot(const gt_p2p *p)
{
    return p2p_two_shot_for(p, p->n);
}

int gt_p2p_fuses_update(const gt_p2p *p)
{
    return p->n * sizeof(float) < P2P_TWO_SHOT_BYTES;
}

/* Blocks for a call over n floats: every rank starts the same number, at most one per
 * multiprocessor, so that all of a call's blocks are resident together, and at most max. */
static unsigned p2p_blocks(const gt_p2p *p, size_t n, int two_shot, unsigned max)
{
    size_t n4 = n / 4, work = two_shot ? (n4 + p->nranks - 1) / p->nranks : n4;
    size_t want = (work + (size_t)P2P_THREADS * P2P_PER_THREAD - 1) /
                  ((size_t)P2P_THREADS * P2P_PER_THREAD);
    size_t cap = p->nsm < P2P_MAX_BLOCKS ? (size_t)p->nsm : P2P_MAX_BLOCKS;
    cap = cap < max ? cap : max;
    want = want < 1 ? 1 : want;
    return (unsigned)(want < cap ? want : cap);
}

/* Queues rank's kernel over a's range in at most max_blocks blocks: the sum (rule 0), or one-shot
 * with a's update arguments set. */
static int p2p_launch(gt_p2p *p, int rank, int two_shot, int rule, p2p_args a,
                      unsigned max_blocks, void *stream, gt_err *e)
{
    char gpu[32];
    if (rank < 0 || rank >= p->nranks)
        return gt_fail(e, "peer all-reduce: rank %d of %d", rank, p->nranks);
    snprintf(gpu, sizeof gpu, "gpu:%d", p->ordinal[rank]);
    a.seq = p->args.flags[rank] + (size_t)P2P_MAX_BLOCKS * GT_P2P_MAX_RANKS;
    a.status = p->host + P2P_STATUS + rank;
    a.rank = rank;
    GT_CUDA_CHECK(gpu, e, cudaSetDevice(p->ordinal[rank]));
    unsigned blocks = p2p_blocks(p, a.hi - a.lo, two_shot, max_blocks);
    p2p_kernel_for(p->nranks, two_shot, rule)<<<blocks, P2P_THREADS, 0,
                                                 (cudaStream_t)stream>>>(a);
    GT_CUDA_LAUNCHED(gpu, e);
    return 0;
}

int gt_p2p_launch(gt_p2p *p, int rank, int algo, void *stream, gt_err *e)
{
    int two_shot = algo == GT_P2P_AUTO ? gt_p2p_two_shot(p) : algo == GT_P2P_TWO_SHOT;
    return p2p_launch(p, rank, two_shot, 0, p->args, P2P_MAX_BLOCKS, stream, e);
}

int gt_p2p_launch_range(gt_p2p *p, int rank, size_t lo, size_t n, unsigned max_blocks, int algo,
                        void *stream, gt_err *e)
{
    if (lo > p->n || n > p->n - lo || max_blocks < 1)
        return gt_fail(e, "peer all-reduce: range [%zu, +%zu) of %zu floats in %u blocks", lo, n,
                       p->n, max_blocks);
    if (n == 0) /* every rank skips it alike */
        return 0;
    p2p_args a = p->args;
    a.lo = lo;
    a.hi = lo + n;
    int two_shot = algo == GT_P2P_AUTO ? p2p_two_shot_for(p, n) : algo == GT_P2P_TWO_SHOT;
    return p2p_launch(p, rank, two_shot, 0, a, max_blocks, stream, e);
}

int gt_p2p_launch_update(gt_p2p *p, int rank, void *stream, const gt_optim_cfg *c,
                         const gt_optim_step *st, float *params, float gscale, float *s0,
                         float *s1, gt_err *e)
{
    p2p_args a = p->args;
    a.params = params;
    a.s0 = s0;
    a.s1 = s1;
    a.k = optim_consts_make(c, st);
    a.gscale = gscale;
    return p2p_launch(p, rank, 0, optim_rule(c), a, P2P_MAX_BLOCKS, stream, e);
}

int gt_p2p_launch_average(gt_p2p *p, int rank, void *stream, float *params, gt_err *e)
{
    p2p_args a = p->args;
    a.params = params;
    return p2p_launch(p, rank, 0, P2P_AVERAGE, a, P2P_MAX_BLOCKS, stream, e);
}

const float *gt_p2p_result(const gt_p2p *p, int rank)
{
    return p->args.out[rank];
}

int gt_p2p_status(const gt_p2p *p, int rank)
{
    return (int)*(volatile unsigned *)(p->host + P2P_STATUS + rank);
}

double gt_p2p_budget_s(const gt_p2p *p)
{
    return p->budget_s;
}

void gt_p2p_retain(gt_p2p *p)
{
    p->refs.fetch_add(1);
}

void gt_p2p_release(gt_p2p *p)
{
    if (!p)
        return;
    /* A rank that leaves never arrives again: its peers' waits end now. */
    *(volatile unsigned *)(p->host + P2P_DEAD) = 1;
    if (p->refs.fetch_sub(1) == 1)
        p2p_free(p);
}
