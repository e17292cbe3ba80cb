/* test_cuda_allreduce.c - the allreduce mode on W = min(GPUs, 4) GPUs: the GPU optimizer kernels
 * against gt_optim_apply (bit for bit), the peer-to-peer all-reduce (every GPU's result equals the
 * host's rank-order sum bit for bit, one-shot, two-shot and automatic, whole and in parts; a peer
 * that never arrives ends the wait within its budget, an abort or a peer that leaves ends it at
 * once), one whole allreduce step (a batch share per GPU) against the CPU step on the union batch
 * with the peer exchange and with NCCL, the step summing its gradient in parts beside its
 * backward against the whole reduce after it (bit for bit, eager and replayed), gt_train_run in
 * allreduce (both exchanges) against sync on the same GPUs and one GPU at W times the batch, and
 * the abort path. Then it prints (asserts nothing about) how long a step and an all-reduce take
 * with each exchange, for the README's scaling notes. Skipped (77) unless built with CUDA and NCCL
 * and run where at least 2 GPUs are visible. */
#include "gputrain/checkpoint.h"
#include "gputrain/device.h"
#include "gputrain/cpu_net.h"
#include "gputrain/model.h"
#include "gputrain/names.h"
#include "gputrain/train.h"
#include "test_util.h"

#if defined(GT_HAVE_CUDA) && defined(GT_HAVE_NCCL)
#include "../cuda/gt_cuda.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define MAX_W 4

static int g_w; /* GPUs used */
static gt_exchange g_exchange = GT_EXCHANGE_AUTO; /* the exchange the tests set up */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *rand_floats(gt_rng *r, size_t n, float lo, float hi)
{
    float *p = gt_alloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = lo + (hi - lo) * (float)gt_rng_uniform(r);
    return p;
}

static float *copy_floats(const float *src, size_t n)
{
    float *p = gt_alloc(n * sizeof *p);
    if (p && src)
        memcpy(p, src, n * sizeof *p);
    return p;
}

/* ||a - b|| / ||b|| */
static double rel_err(const float *a, const float *b, size_t n)
{
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        diff += d * d;
        ref += (double)b[i] * b[i];
    }
    return ref > 0 ? sqrt(diff / ref) : sqrt(diff);
}

/* Distance in units in the last place: floats mapped to integers that order like the values. */
static int64_t ulp_dist(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t la = ia < 0 ? (int64_t)INT32_MIN - ia : ia, lb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return la > lb ? la - lb : lb - la;
}

static int64_t max_ulp(const float *a, const float *b, size_t n)
{
    int64_t m = 0;
    for (size_t i = 0; a && b && i < n; i++) {
        int64_t d = ulp_dist(a[i], b[i]);
        m = d > m ? d : m;
    }
    return m;
}

/* ---- (1) the optimizer kernels --------------------------------------------------------------- */

static void optim_case(gt_cuda_ctx *c, gt_rng *r, const char *name, const gt_optim_cfg *cfg)
{
    /* More than one grid of the kernel, so the grid-stride loop wraps. */
    const size_t n = (1u << 20) + 7;
    gt_err e = {""};
    int nstate = gt_optim_nstate(cfg);
    float *p = rand_floats(r, n, -1, 1), *g = rand_floats(r, n, -3, 3);
    float *s0 = nstate > 0 ? rand_floats(r, n, -0.5f, 0.5f) : NULL;
    float *s1 = nstate > 1 ? rand_floats(r, n, 0, 0.01f) : NULL;
    float *p_gpu = copy_floats(p, n), *s0_gpu = s0 ? copy_floats(s0, n) : NULL;
    float *s1_gpu = s1 ? copy_floats(s1, n) : NULL;
    gt_optim_step st = gt_optim_prepare(cfg, 7, 0.3);
    const float gscale = 1.0f / 3.0f;
    gt_optim_apply(cfg, &st, p, g, gscale, s0, s1, n);
    int rc = gt_cuda_test_optim(c, cfg, &st, p_gpu, g, gscale, s0_gpu, s1_gpu, n, &e);
    CHECK_MSG(rc == 0, "%s: %s", name, e.msg);
    int64_t up = max_ulp(p_gpu, p, n), u0 = max_ulp(s0_gpu, s0, n), u1 = max_ulp(s1_gpu, s1, n);
    printf("optimizer %-16s max ulp: params %lld, state %lld %lld\n", name, (long long)up,
           (long long)u0, (long long)u1);
    CHECK_MSG(rc == 0 && up == 0 && u0 == 0 && u1 == 0,
              "%s: GPU update differs from gt_optim_apply", name);
    float *bufs[] = {p, g, s0, s1, p_gpu, s0_gpu, s1_gpu};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        gt_free(bufs[i]);
}

static void test_optim_kernels(gt_rng *r)
{
    gt_cuda_ctx *c = NULL;
    gt_err e = {""};
    int rc = gt_cuda_ctx_open(&c, 0, 0, &e);
    CHECK_MSG(rc == 0, "ctx: %s", e.msg);
    if (rc)
        return;
    gt_optim_cfg cfg;
    gt_optim_defaults(&cfg);
    cfg.momentum = 0.0f;
    cfg.weight_decay = 1e-2f;
    optim_case(c, r, "sgd", &cfg);
    cfg.momentum = 0.9f;
    cfg.weight_decay = 5e-4f;
    optim_case(c, r, "sgd momentum", &cfg);
    cfg.nesterov = 1;
    optim_case(c, r, "sgd nesterov", &cfg);
    gt_optim_defaults(&cfg);
    cfg.kind = GT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.weight_decay = 1e-2f;
    optim_case(c, r, "adam", &cfg);
    cfg.weight_decay = 0.0f;
    optim_case(c, r, "adam no decay", &cfg);
    gt_cuda_ctx_close(c);
}

/* ---- (2) the peer-to-peer all-reduce -------------------------------------------------------- */

typedef struct p2p_bufs {
    int ord[MAX_W];
    cudaStream_t s[MAX_W];
    float *in[MAX_W];       /* device */
    float *host[MAX_W];     /* what each rank's input holds */
} p2p_bufs;

static void p2p_bufs_open(p2p_bufs *b, size_t n)
{
    memset(b, 0, sizeof *b);
    for (int r = 0; r < g_w; r++) {
        b->ord[r] = r;
        CHECK(cudaSetDevice(r) == cudaSuccess);
        CHECK(cudaStreamCreateWithFlags(&b->s[r], cudaStreamNonBlocking) == cudaSuccess);
        CHECK(cudaMalloc((void **)&b->in[r], n * sizeof(float)) == cudaSuccess);
        b->host[r] = gt_alloc(n * sizeof(float));
    }
}

static void p2p_bufs_close(p2p_bufs *b)
{
    for (int r = 0; r < g_w; r++) {
        cudaSetDevice(r);
        cudaStreamSynchronize(b->s[r]);
        cudaStreamDestroy(b->s[r]);
        cudaFree(b->in[r]);
        gt_free(b->host[r]);
    }
}

/* New random inputs, of mixed magnitudes so that the order of the adds shows in the bits. */
static void p2p_fill(p2p_bufs *b, gt_rng *rng, size_t n)
{
    for (int r = 0; r < g_w; r++) {
        for (size_t i = 0; i < n; i++)
            b->host[r][i] = (float)((gt_rng_uniform(rng) - 0.5) * pow(10.0, (double)(i % 7) - 3));
        cudaSetDevice(r);
        CHECK(cudaMemcpy(b->in[r], b->host[r], n * sizeof(float), cudaMemcpyHostToDevice) ==
              cudaSuccess);
    }
}

/* Every rank's result equals the host's sum in rank order 0..W-1, bit for bit. */
static void p2p_check_exact(const p2p_bufs *b, gt_p2p *p, size_t n, const char *what)
{
    float *ref = gt_alloc(n * sizeof(float)), *got = gt_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float acc = b->host[0][i];
        for (int r = 1; r < g_w; r++)
            acc += b->host[r][i];
        ref[i] = acc;
    }
    for (int r = 0; r < g_w; r++) {
        CHECK_MSG(gt_p2p_status(p, r) == GT_P2P_OK, "%s: rank %d gave up", what, r);
        cudaSetDevice(r);
        CHECK(cudaMemcpy(got, gt_p2p_result(p, r), n * sizeof(float), cudaMemcpyDeviceToHost) ==
              cudaSuccess);
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                bad = i;
        CHECK_MSG(bad == n, "%s: rank %d element %zu is %.9g, the rank-order sum %.9g", what, r,
                  bad, bad < n ? got[bad] : 0.0, bad < n ? ref[bad] : 0.0);
    }
    gt_free(ref);
    gt_free(got);
}

/* Three calls per algorithm with new inputs each (the flags' sequence goes on), at a size with a
 * tail that is not a whole float4; one size under the two-shot threshold, one over. */
static void test_p2p_exact(gt_rng *rng)
{
    const size_t sizes[] = {44426 + 3, (1u << 20) + 1};
    const int algos[] = {GT_P2P_ONE_SHOT, GT_P2P_TWO_SHOT, GT_P2P_AUTO};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        p2p_bufs b;
        gt_p2p *p = NULL;
        gt_err e = {""};
        p2p_bufs_open(&b, n);
        int rc = gt_p2p_create(&p, g_w, b.ord, (const float *const *)b.in, n, 30.0, &e);
        CHECK_MSG(rc == 0, "p2p create: %s", e.msg);
        for (int a = 0; rc == 0 && a < 3; a++) {
            for (int call = 0; call < 3; call++) {
                char what[96];
                snprintf(what, sizeof what, "p2p %zu floats, algorithm %d, call %d", n, algos[a],
                         call + 1);
                p2p_fill(&b, rng, n);
                for (int r = 0; r < g_w && rc == 0; r++) {
                    rc = gt_p2p_launch(p, r, algos[a], b.s[r], &e);
                    CHECK_MSG(rc == 0, "%s: %s", what, e.msg);
                }
                for (int r = 0; r < g_w; r++) {
                    cudaSetDevice(r);
                    CHECK(cudaStreamSynchronize(b.s[r]) == cudaSuccess);
                }
                if (rc == 0)
                    p2p_check_exact(&b, p, n, what);
            }
        }
        printf("p2p all-reduce of %zu floats on %d GPUs: rank-order sum, bit for bit, one-shot, "
               "two-shot and auto (auto: %s)\n", n, g_w,
               p && gt_p2p_two_shot(p) ? "two-shot" : "one-shot");
        gt_p2p_release(p);
        p2p_bufs_close(&b);
    }
}

/* gt_p2p_launch_range: parts launched one after another, each at its own block cap, starting and
 * ending inside float4s, cover the array with the whole call's bits (the rank-order sum), and a
 * whole call after them still meets (every block's sequence in step); on 3 GPUs or more the larger
 * size's big parts are two-shot. Twice each, with new inputs. */
static void test_p2p_range(gt_rng *rng)
{
    const size_t sizes[] = {44426 + 3, (1u << 20) + 1};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        const size_t bounds[] = {0, 1, 7, 8, 4101, n / 3 + 2, n / 3 + 3, n - 2, n};
        const unsigned caps[] = {16, 1, 3, 128, 16, 2, 16, 5};
        const size_t nparts = sizeof caps / sizeof *caps;
        p2p_bufs b;
        gt_p2p *p = NULL;
        gt_err e = {""};
        p2p_bufs_open(&b, n);
        int rc = gt_p2p_create(&p, g_w, b.ord, (const float *const *)b.in, n, 30.0, &e);
        CHECK_MSG(rc == 0, "p2p create: %s", e.msg);
        /* parted calls by each algorithm (two-shot's chunks of a range on 2 GPUs too), a whole
         * call after each */
        const int algos[] = {GT_P2P_AUTO, GT_P2P_ONE_SHOT, GT_P2P_TWO_SHOT};
        const char *names[] = {"auto", "one-shot", "two-shot"};
        for (int call = 0; rc == 0 && call < 6; call++) {
            char what[96];
            int whole = call % 2, algo = algos[call / 2];
            snprintf(what, sizeof what, "p2p %zu floats, %s, call %d", n,
                     whole ? "whole" : names[call / 2], call + 1);
            p2p_fill(&b, rng, n);
            for (int r = 0; r < g_w && rc == 0; r++) {
                rc = whole ? gt_p2p_launch(p, r, GT_P2P_AUTO, b.s[r], &e) : 0;
                for (size_t i = 0; !whole && i < nparts && rc == 0; i++)
                    rc = gt_p2p_launch_range(p, r, bounds[i], bounds[i + 1] - bounds[i], caps[i],
                                             algo, b.s[r], &e);
                CHECK_MSG(rc == 0, "%s: %s", what, e.msg);
            }
            for (int r = 0; r < g_w; r++) {
                cudaSetDevice(r);
                CHECK(cudaStreamSynchronize(b.s[r]) == cudaSuccess);
            }
            if (rc == 0)
                p2p_check_exact(&b, p, n, what);
        }
        CHECK(!p || gt_p2p_launch_range(p, 0, n - 1, 2, 16, GT_P2P_AUTO, b.s[0], &e) == -1);
        printf("p2p all-reduce of %zu floats on %d GPUs in %zu parts, auto, one-shot and "
               "two-shot: the whole call's bits\n", n, g_w, nparts);
        gt_p2p_release(p);
        p2p_bufs_close(&b);
    }
}

/* gt_p2p_launch_update: every rank's parameters and state equal the host's update by the
 * rank-order sum (gt_optim_apply), bit for bit, for every rule; two calls each. */
static void p2p_update_case(gt_rng *rng, const char *name, const gt_optim_cfg *cfg)
{
    const size_t n = 44426 + 3;
    int nstate = gt_optim_nstate(cfg);
    p2p_bufs b;
    gt_p2p *p = NULL;
    gt_err e = {""};
    p2p_bufs_open(&b, n);
    float *dev[MAX_W][3] = {{NULL}};
    float *host[3] = {rand_floats(rng, n, -1, 1), nstate > 0 ? rand_floats(rng, n, -0.5f, 0.5f) : NULL,
                      nstate > 1 ? rand_floats(rng, n, 0, 0.01f) : NULL};
    float *sum = gt_alloc(n * sizeof(float)), *got = gt_alloc(n * sizeof(float));
    for (int r = 0; r < g_w; r++) {
        cudaSetDevice(r);
        for (int k = 0; k < 3; k++)
            if (host[k]) {
                CHECK(cudaMalloc((void **)&dev[r][k], n * sizeof(float)) == cudaSuccess);
                CHECK(cudaMemcpy(dev[r][k], host[k], n * sizeof(float), cudaMemcpyHostToDevice) ==
                      cudaSuccess);
            }
    }
    int rc = gt_p2p_create(&p, g_w, b.ord, (const float *const *)b.in, n, 30.0, &e);
    CHECK_MSG(rc == 0, "p2p create: %s", e.msg);
    int64_t worst = 0;
    for (int call = 1; rc == 0 && call <= 2; call++) {
        p2p_fill(&b, rng, n);
        gt_optim_step st = gt_optim_prepare(cfg, (uint64_t)call, 0.3);
        const float gscale = 1.0f / (float)g_w;
        for (int r = 0; r < g_w && rc == 0; r++) {
            rc = gt_p2p_launch_update(p, r, b.s[r], cfg, &st, dev[r][0], gscale, dev[r][1],
                                      dev[r][2], &e);
            CHECK_MSG(rc == 0, "%s: %s", name, e.msg);
        }
        for (size_t i = 0; i < n; i++) {
            float acc = b.host[0][i];
            for (int r = 1; r < g_w; r++)
                acc += b.host[r][i];
            sum[i] = acc;
        }
        gt_optim_apply(cfg, &st, host[0], sum, gscale, host[1], host[2], n);
        for (int r = 0; r < g_w; r++) {
            cudaSetDevice(r);
            CHECK(cudaStreamSynchronize(b.s[r]) == cudaSuccess);
            CHECK_MSG(gt_p2p_status(p, r) == GT_P2P_OK, "%s: rank %d gave up", name, r);
            for (int k = 0; k < 3; k++) {
                if (!host[k])
                    continue;
                CHECK(cudaMemcpy(got, dev[r][k], n * sizeof(float), cudaMemcpyDeviceToHost) ==
                      cudaSuccess);
                int64_t u = max_ulp(got, host[k], n);
                worst = u > worst ? u : worst;
            }
        }
    }
    printf("p2p sum and %-13s update on %d GPUs: max ulp against the host %lld\n", name, g_w,
           (long long)worst);
    CHECK_MSG(worst == 0, "%s: the fused update differs from gt_optim_apply on the rank-order sum",
              name);
    gt_p2p_release(p);
    for (int r = 0; r < g_w; r++) {
        cudaSetDevice(r);
        for (int k = 0; k < 3; k++)
            if (dev[r][k])
                cudaFree(dev[r][k]);
    }
    p2p_bufs_close(&b);
    for (int k = 0; k < 3; k++)
        gt_free(host[k]);
    gt_free(sum);
    gt_free(got);
}

static void test_p2p_update(gt_rng *rng)
{
    gt_optim_cfg cfg;
    gt_optim_defaults(&cfg);
    cfg.momentum = 0.0f;
    cfg.weight_decay = 1e-2f;
    p2p_update_case(rng, "sgd", &cfg);
    cfg.momentum = 0.9f;
    cfg.weight_decay = 5e-4f;
    p2p_update_case(rng, "sgd momentum", &cfg);
    cfg.nesterov = 1;
    p2p_update_case(rng, "sgd nesterov", &cfg);
    gt_optim_defaults(&cfg);
    cfg.kind = GT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.weight_decay = 1e-2f;
    p2p_update_case(rng, "adam", &cfg);
}

/* gt_p2p_launch_average: every rank's parameters become the host's mean of the ranks' inputs
 * (double sums in rank order, divided by the count), bit for bit; two calls. */
static void test_p2p_average(gt_rng *rng)
{
    const size_t n = 44426 + 3;
    p2p_bufs b;
    gt_p2p *p = NULL;
    gt_err e = {""};
    p2p_bufs_open(&b, n);
    float *dev[MAX_W] = {NULL};
    float *ref = gt_alloc(n * sizeof(float)), *got = gt_alloc(n * sizeof(float));
    for (int r = 0; r < g_w; r++) {
        cudaSetDevice(r);
        CHECK(cudaMalloc((void **)&dev[r], n * sizeof(float)) == cudaSuccess);
    }
    int rc = gt_p2p_create(&p, g_w, b.ord, (const float *const *)b.in, n, 30.0, &e);
    CHECK_MSG(rc == 0, "p2p create: %s", e.msg);
    size_t bad = n;
    for (int call = 1; rc == 0 && call <= 2; call++) {
        p2p_fill(&b, rng, n);
        for (int r = 0; r < g_w && rc == 0; r++) {
            rc = gt_p2p_launch_average(p, r, b.s[r], dev[r], &e);
            CHECK_MSG(rc == 0, "average: %s", e.msg);
        }
        for (size_t i = 0; i < n; i++) {
            double sum = 0;
            for (int r = 0; r < g_w; r++)
                sum += b.host[r][i];
            ref[i] = (float)(sum / g_w);
        }
        for (int r = 0; r < g_w; r++) {
            cudaSetDevice(r);
            CHECK(cudaStreamSynchronize(b.s[r]) == cudaSuccess);
            CHECK_MSG(gt_p2p_status(p, r) == GT_P2P_OK, "average: rank %d gave up", r);
            CHECK(cudaMemcpy(got, dev[r], n * sizeof(float), cudaMemcpyDeviceToHost) ==
                  cudaSuccess);
            for (size_t i = 0; i < n && bad == n; i++)
                if (memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                    bad = i;
        }
    }
    printf("p2p mean of %zu floats on %d GPUs: %s\n", n, g_w,
           bad == n ? "the host's double mean, bit for bit" : "DIFFERS");
    CHECK_MSG(bad == n, "average: element %zu is %.9g, the host's mean %.9g", bad,
              bad < n ? got[bad] : 0.0, bad < n ? ref[bad] : 0.0);
    gt_p2p_release(p);
    for (int r = 0; r < g_w; r++) {
        cudaSetDevice(r);
        cudaFree(dev[r]);
    }
    p2p_bufs_close(&b);
    gt_free(ref);
    gt_free(got);
}

/* Rank 0 alone calls: how its wait ends. how: 0 waits out the budget, 1 aborts every exchange,
 * 2 has rank 1 leave the group. Returns the seconds the stream took to drain. */
static double p2p_lonely(double budget_s, int how, int *status)
{
    p2p_bufs b;
    gt_p2p *p = NULL;
    gt_err e = {""};
    const size_t n = 1024;
    p2p_bufs_open(&b, n);
    int rc = gt_p2p_create(&p, g_w, b.ord, (const float *const *)b.in, n, budget_s, &e);
    CHECK_MSG(rc == 0, "p2p create: %s", e.msg);
    double t = -1;
    if (rc == 0) {
        gt_p2p_retain(p);
        double t0 = now_s();
        CHECK(gt_p2p_launch(p, 0, GT_P2P_AUTO, b.s[0], &e) == 0);
        usleep(200000);
        if (how == 1)
            gt_cuda_allreduce_abort();
        else if (how == 2)
            gt_p2p_release(p);
        cudaSetDevice(0);
        CHECK(cudaStreamSynchronize(b.s[0]) == cudaSuccess);
        t = now_s() - t0;
        *status = gt_p2p_status(p, 0);
        if (how != 2)
            gt_p2p_release(p);
        gt_p2p_release(p);
    }
    p2p_bufs_close(&b);
    return t;
}

static void test_p2p_hang_proof(void)
{
    int st = -1;
    double t = p2p_lonely(0.5, 0, &st);
    printf("p2p: a peer that never arrives: the wait gave up after %.2f s (budget 0.5 s)\n", t);
    CHECK_MSG(st == GT_P2P_TIMED_OUT, "status %d, not timed out", st);
    CHECK_MSG(t >= 0.45 && t < 2.5, "the wait took %.2f s with a budget of 0.5 s", t);
    t = p2p_lonely(60, 1, &st);
    printf("p2p: an abort ended the wait after %.2f s (budget 60 s)\n", t);
    CHECK_MSG(st == GT_P2P_ABORTED, "status %d, not aborted", st);
    CHECK_MSG(t < 2.5, "the aborted wait took %.2f s", t);
    t = p2p_lonely(60, 2, &st);
    printf("p2p: a peer that left ended the wait after %.2f s (budget 60 s)\n", t);
    CHECK_MSG(st == GT_P2P_ABORTED, "status %d, not aborted", st);
    CHECK_MSG(t < 2.5, "the wait for a peer that left took %.2f s", t);
}

/* ---- (3) one allreduce step against the CPU -------------------------------------------------- */

enum { STEP_B = 16, STEPS = 2 };

/* What every replica and the CPU start from, and where the CPU ends. */
typedef struct step_case {
    const char *name;
    gt_optim_cfg cfg;
    gt_optim_step st[STEPS];
    int nstate;
    float *params0, *state0[2];   /* start: the state is random, so set_state carries data */
    float *p_cpu, *s_cpu[2];      /* the CPU's result */
    double loss_cpu[STEPS];
} step_case;

typedef struct step_worker {
    gt_device *d;
    const step_case *k;
    const gt_batch *share[STEPS];  /* this worker's share of each step */
    float *state[2];               /* the device's optimizer state after the steps */
    double loss[STEPS];
    int rc;
    char err[GT_ERRLEN];
} step_worker;

static void *step_worker_main(void *arg)
{
    step_worker *w = arg;
    const step_case *k = w->k;
    gt_device *d = w->d;
    gt_err e = {""};
    size_t n = d->model->nparams;
    memcpy(d->params, k->params0, n * sizeof(float));
    d->keep_grad = 1;
    w->rc = d->ops->load_params(d, &e) || d->ops->set_state(d, k->state0[0], k->state0[1], &e);
    for (int s = 0; s < STEPS && w->rc == 0; s++) {
        gt_step_out out = {0};
        w->rc = d->ops->train_step(d, w->share[s], &out, &e) ||
                d->ops->reduce_update(d, &k->cfg, &k->st[s], 1.0f / (float)g_w, &e);
        w->loss[s] = out.loss_sum;
        /* The next step must run on the device's parameters, not on these host ones. */
        memset(d->params, 0, n * sizeof(float));
    }
    if (w->rc == 0)
        w->rc = d->ops->get_params(d, w->state[0], w->state[1], &e);
    snprintf(w->err, sizeof w->err, "%s", e.msg);
    return NULL;
}

/* The CPU reference: one worker on the union batch, the same optimizer. */
static void cpu_steps(const gt_model *m, step_case *k, const gt_batch *whole)
{
    gt_cpu_net net;
    gt_err e = {""};
    float *grad = gt_alloc(m->nparams * sizeof(float));
    CHECK(gt_cpu_net_create(&net, m, whole[0].n, &e) == 0);
    for (int s = 0; s < STEPS; s++) {
        int hits = 0;
        k->loss_cpu[s] = gt_cpu_net_step(&net, k->p_cpu, &whole[s], 1, grad, &hits);
        gt_optim_apply(&k->cfg, &k->st[s], k->p_cpu, grad, 1.0f, k->s_cpu[0], k->s_cpu[1],
                       m->nparams);
    }
    gt_cpu_net_destroy(&net);
    gt_free(grad);
}

static void check_replicas(const step_worker *w, const gt_model *m, const step_case *k)
{
    size_t n = m->nparams;
    for (int i = 1; i < g_w; i++) {
        CHECK_MSG(memcmp(w[i].d->params, w[0].d->params, n * sizeof(float)) == 0,
                  "%s: replica %d's parameters differ from replica 0's", k->name, i);
        for (int j = 0; j < k->nstate; j++)
            CHECK_MSG(memcmp(w[i].state[j], w[0].state[j], n * sizeof(float)) == 0,
                      "%s: replica %d's optimizer state %d differs from replica 0's", k->name,
                      i, j);
    }
    float *d_gpu = copy_floats(w[0].d->params, n), *d_cpu = copy_floats(k->p_cpu, n);
    for (size_t i = 0; i < n; i++) {
        d_gpu[i] -= k->params0[i];
        d_cpu[i] -= k->params0[i];
    }
    double ep = rel_err(w[0].d->params, k->p_cpu, n), ed = rel_err(d_gpu, d_cpu, n);
    printf("allreduce step %-8s vs CPU: params %.3g, update %.3g", k->name, ep, ed);
    CHECK_MSG(ep <= 1e-5, "%s: parameters: relative error %.3g", k->name, ep);
    CHECK_MSG(ed <= 1e-4, "%s: update: relative error %.3g", k->name, ed);
    for (int j = 0; j < k->nstate; j++) {
        double es = rel_err(w[0].state[j], k->s_cpu[j], n);
        printf(", state %d %.3g", j, es);
        CHECK_MSG(es <= 1e-4, "%s: optimizer state %d: relative error %.3g", k->name, j, es);
    }
    printf(" (relative)\n");
    for (int s = 0; s < STEPS; s++) {
        double sum = 0;
        for (int i = 0; i < g_w; i++)
            sum += w[i].loss[s];
        CHECK_MSG(fabs(sum - k->loss_cpu[s]) <= 1e-5 * fabs(k->loss_cpu[s]),
                  "%s step %d: loss %.9g on the GPUs, %.9g on the CPU", k->name, s, sum,
                  k->loss_cpu[s]);
    }
    gt_free(d_gpu);
    gt_free(d_cpu);
}

/* W replicas, one share each, in threads, as train.c runs them. */
static void run_replicas(gt_device **devs, const step_case *k,
                         const gt_batch share[STEPS][MAX_W], step_worker *w)
{
    pthread_t th[MAX_W];
    for (int i = 0; i < g_w; i++) {
        w[i] = (step_worker){.d = devs[i], .k = k};
        for (int j = 0; j < k->nstate; j++)
            w[i].state[j] = gt_alloc(devs[i]->model->nparams * sizeof(float));
        for (int s = 0; s < STEPS; s++)
            w[i].share[s] = &share[s][i];
        pthread_create(&th[i], NULL, step_worker_main, &w[i]);
    }
    for (int i = 0; i < g_w; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(w[i].rc == 0, "%s worker %d: %s", k->name, i, w[i].err);
    }
}

static void step_case_run(step_case *k, const gt_model *m, const gt_batch *whole,
                          const gt_batch share[STEPS][MAX_W], gt_rng *r)
{
    gt_device *devs[MAX_W] = {NULL};
    step_worker w[MAX_W];
    gt_err e = {""};
    size_t n = m->nparams;
    k->nstate = gt_optim_nstate(&k->cfg);
    k->params0 = gt_alloc(n * sizeof(float));
    gt_model_init_params(m, k->params0, 21);
    k->p_cpu = copy_floats(k->params0, n);
    for (int j = 0; j < k->nstate; j++) {
        k->state0[j] = rand_floats(r, n, j ? 0.0f : -1e-2f, j ? 1e-4f : 1e-2f);
        k->s_cpu[j] = copy_floats(k->state0[j], n);
    }
    cpu_steps(m, k, whole);
    int rc = 0;
    for (int i = 0; i < g_w && rc == 0; i++) {
        rc = gt_cuda_device_open(&devs[i], m, STEP_B, i, 0, &e);
        CHECK_MSG(rc == 0, "open gpu %d: %s", i, e.msg);
    }
    if (rc == 0) {
        rc = gt_cuda_allreduce_init(devs, g_w, &k->cfg, g_exchange, &e);
        CHECK_MSG(rc == 0, "allreduce init: %s", e.msg);
    }
    if (rc == 0) {
        run_replicas(devs, k, share, w);
        for (int i = 0; i < g_w; i++)
            rc |= w[i].rc;
        if (rc == 0)
            check_replicas(w, m, k);
        for (int i = 0; i < g_w; i++)
            for (int j = 0; j < k->nstate; j++)
                gt_free(w[i].state[j]);
    }
    for (int i = 0; i < g_w; i++)
        gt_device_close(devs[i]);
    gt_free(k->params0);
    gt_free(k->p_cpu);
    for (int j = 0; j < k->nstate; j++) {
        gt_free(k->state0[j]);
        gt_free(k->s_cpu[j]);
    }
}

static void test_allreduce_step(gt_rng *r)
{
    gt_model m;
    gt_dataset ds;
    gt_err e = {""};
    uint32_t idx[STEPS][MAX_W * STEP_B];
    gt_batch whole[STEPS], share[STEPS][MAX_W];
    CHECK(gt_model_build("lenet5", 1, 28, 28, 10, &m, &e) == 0);
    gt_test_random_dataset(&ds, r, 1000);
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < g_w * STEP_B; k++)
            idx[s][k] = gt_rng_below(r, ds.n);
        whole[s] = (gt_batch){&ds, idx[s], g_w * STEP_B, 1, 0x5eedull, NULL};
        for (int i = 0; i < g_w; i++)
            share[s][i] = (gt_batch){&ds, idx[s] + i * STEP_B, STEP_B, 1, 0x5eedull, NULL};
    }
    step_case cases[2] = {{.name = "momentum"}, {.name = "adam"}};
    gt_optim_defaults(&cases[0].cfg);
    cases[0].cfg.weight_decay = 1e-4f;
    gt_optim_defaults(&cases[1].cfg);
    cases[1].cfg.kind = GT_OPT_ADAM;
    cases[1].cfg.lr = 1e-3f;
    cases[1].cfg.weight_decay = 1e-4f;
    for (int c = 0; c < 2; c++) {
        /* Update numbers past the first, as after a resume. */
        for (int s = 0; s < STEPS; s++)
            cases[c].st[s] = gt_optim_prepare(&cases[c].cfg, (uint64_t)s + 5, 0.01 * s);
        step_case_run(&cases[c], &m, whole, (const gt_batch(*)[MAX_W])share, r);
    }
    gt_free(ds.images);
    gt_free(ds.labels);
}

/* ---- (3b) the step's sum in parts beside its backward ---------------------------------------- */

enum { SUMS_B = 16, SUMS_STEPS = 6, SUMS_EVAL_AT = 3, SUMS_EVAL_N = 200 };

typedef struct sums_worker {
    gt_device *d;
    const gt_batch *share;     /* this worker's batch of each step, SUMS_STEPS */
    const gt_optim_cfg *cfg;
    const gt_dataset *test;
    int w;                     /* the GPUs summing */
    float *state;              /* the optimizer state after the steps */
    double eval_loss;          /* the evaluation between the steps */
    int rc;
    char err[GT_ERRLEN];
} sums_worker;

/* The allreduce mode's order (mode_allreduce.c): step c queued, step c - 1 ended, update c queued,
 * and after step SUMS_EVAL_AT - 1's end, with step SUMS_EVAL_AT queued, an evaluation and a
 * get_params, where the mode evaluates on its replicas and publishes. */
static void *sums_worker_main(void *arg)
{
    sums_worker *w = arg;
    gt_device *d = w->d;
    gt_err e = {""};
    gt_step_out out, ev = {0};
    for (int c = 0; c < SUMS_STEPS && w->rc == 0; c++) {
        gt_optim_step st = gt_optim_prepare(w->cfg, (uint64_t)c + 1, 0.01 * c);
        w->rc = d->ops->step_queue(d, &w->share[c], &e) || (c && d->ops->step_end(d, &out, &e));
        if (w->rc == 0 && c == SUMS_EVAL_AT)
            w->rc = d->ops->evaluate(d, w->test, 0, SUMS_EVAL_N, &ev, &e) ||
                    d->ops->get_params(d, NULL, NULL, &e);
        w->rc = w->rc || d->ops->reduce_update(d, w->cfg, &st, 1.0f / (float)w->w, &e);
    }
    w->rc = w->rc || d->ops->step_end(d, &out, &e) || d->ops->get_params(d, w->state, NULL, &e);
    w->eval_loss = ev.loss_sum;
    snprintf(w->err, sizeof w->err, "%s", e.msg);
    return NULL;
}

/* What a run of SUMS_STEPS left: every replica's parameters and optimizer state, its evaluation,
 * how many graphs replica 0 captured (and why capture failed, if it did) and whether its last
 * step summed in parts. */
typedef struct sums_result {
    float *params[MAX_W], *state[MAX_W];
    double eval_loss[MAX_W];
    int ngraphs, sums, rc;
    char graph_error[GT_ERRLEN];
} sums_result;

static void sums_result_free(sums_result *o)
{
    for (int i = 0; i < MAX_W; i++) {
        gt_free(o->params[i]);
        gt_free(o->state[i]);
    }
}

/* SUMS_STEPS allreduce steps over w GPUs on the peer exchange from params0, on the layer path,
 * eager or with graphs, the sums in parts on (every model split) or off. */
static sums_result sums_run(const gt_model *m, int w, int graphs, int parts, const float *params0,
                            const gt_batch share[MAX_W][SUMS_STEPS], const gt_dataset *test)
{
    sums_result o = {.rc = 0};
    gt_device *devs[MAX_W] = {NULL};
    sums_worker sw[MAX_W];
    pthread_t th[MAX_W];
    gt_err e = {""};
    gt_optim_cfg cfg;
    gt_optim_defaults(&cfg);
    cfg.weight_decay = 1e-4f;
    size_t n = m->nparams;
    for (int i = 0; i < w && o.rc == 0; i++) {
        o.rc = gt_cuda_device_open(&devs[i], m, SUMS_B, i, 0, &e) ||
               gt_cuda_device_set_path(devs[i], 0, graphs, &e) ||
               gt_cuda_device_set_split(devs[i], parts ? 0 : SIZE_MAX, &e);
        if (o.rc == 0) {
            memcpy(devs[i]->params, params0, n * sizeof(float));
            devs[i]->keep_grad = 1;
            o.rc = devs[i]->ops->load_params(devs[i], &e) ||
                   devs[i]->ops->set_state(devs[i], NULL, NULL, &e);
        }
    }
    o.rc = o.rc || gt_cuda_allreduce_init(devs, w, &cfg, GT_EXCHANGE_P2P, &e);
    CHECK_MSG(o.rc == 0, "%s x%d: %s", m->name, w, e.msg);
    for (int i = 0; i < w && o.rc == 0; i++) {
        o.params[i] = gt_alloc(n * sizeof(float));
        o.state[i] = gt_alloc(n * sizeof(float));
        sw[i] = (sums_worker){.d = devs[i], .share = share[i], .cfg = &cfg, .test = test, .w = w,
                              .state = o.state[i]};
        pthread_create(&th[i], NULL, sums_worker_main, &sw[i]);
    }
    for (int i = 0; i < w && o.params[i]; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(sw[i].rc == 0, "%s x%d worker %d: %s", m->name, w, i, sw[i].err);
        o.rc |= sw[i].rc;
        memcpy(o.params[i], devs[i]->params, n * sizeof(float));
        o.eval_loss[i] = sw[i].eval_loss;
    }
    gt_cuda_path path = {0};
    if (o.rc == 0 && gt_cuda_device_get_path(devs[0], &path) == 0) {
        o.ngraphs = path.ngraphs;
        snprintf(o.graph_error, sizeof o.graph_error, "%s", path.graph_error);
        o.sums = gt_cuda_device_step_summed(devs[0]);
    }
    for (int i = 0; i < w; i++)
        gt_device_close(devs[i]);
    return o;
}

/* The allreduce step on the peer exchange summing its gradient in parts beside its backward (the
 * split forced on small models: lenet5 on the layer path, resnet20 with batch norm; cnn-wide's
 * 3.3 M parameters go in parts by default, and on 3 GPUs or more in two-shot parts) ends every
 * replica where the whole reduce after the step ends it, bit for bit (parameters, optimizer state
 * and an evaluation between the steps), eager and with graphs replayed, on 2 GPUs and on all. */
static void test_step_sums(gt_rng *r)
{
    const char *models[] = {"lenet5", "resnet20", "cnn-wide"};
    gt_dataset ds;
    gt_test_random_dataset(&ds, r, 1000);
    uint32_t idx[MAX_W][SUMS_STEPS][SUMS_B];
    gt_batch share[MAX_W][SUMS_STEPS];
    for (int i = 0; i < MAX_W; i++)
        for (int c = 0; c < SUMS_STEPS; c++) {
            for (int k = 0; k < SUMS_B; k++)
                idx[i][c][k] = gt_rng_below(r, ds.n);
            share[i][c] = (gt_batch){&ds, idx[i][c], SUMS_B, 1, 0x5eedull + (uint64_t)c, NULL};
        }
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        gt_model m;
        gt_err e = {""};
        CHECK(gt_model_build(models[k], 1, 28, 28, 10, &m, &e) == 0);
        float *params0 = gt_alloc(m.nparams * sizeof(float));
        gt_model_init_params(&m, params0, 5);
        size_t bytes = m.nparams * sizeof(float);
        for (int w = 2; w <= g_w; w = w < g_w ? g_w : g_w + 1) {
            for (int graphs = 0; graphs < 2; graphs++) {
                sums_result whole = sums_run(&m, w, graphs, 0, params0, share, &ds);
                CHECK_MSG(whole.rc || (!whole.sums && (whole.ngraphs > 0) == graphs),
                          "%s x%d whole: sums %d, %d graphs %s", models[k], w, whole.sums,
                          whole.ngraphs, whole.graph_error);
                if (whole.rc) {
                    sums_result_free(&whole);
                    continue;
                }
                sums_result o = sums_run(&m, w, graphs, 1, params0, share, &ds);
                const char *how = graphs ? "graphs" : "eager";
                /* with graphs: the whole run's shapes (the first step is whole here too) and the
                 * summing steps' */
                CHECK_MSG(o.rc || (o.sums && (graphs ? o.ngraphs > whole.ngraphs : !o.ngraphs)),
                          "%s x%d %s: sums %d, %d graphs (whole %d) %s", models[k], w, how,
                          o.sums, o.ngraphs, whole.ngraphs, o.graph_error);
                for (int i = 0; i < w && o.rc == 0; i++) {
                    size_t ndiff = 0, first = 0;
                    for (size_t j = m.nparams; j-- > 0;)
                        if (memcmp(&o.params[i][j], &whole.params[i][j], sizeof(float)) != 0) {
                            ndiff++;
                            first = j;
                        }
                    if (ndiff)
                        printf("%s x%d %s replica %d: %zu of %zu parameters differ, the first "
                               "%zu: %.9g against %.9g\n", models[k], w, how, i, ndiff,
                               m.nparams, first, o.params[i][first], whole.params[i][first]);
                    CHECK_MSG(memcmp(o.params[i], whole.params[i], bytes) == 0 &&
                                  memcmp(o.state[i], whole.state[i], bytes) == 0,
                              "%s x%d %s: replica %d differs from the whole reduce's", models[k],
                              w, how, i);
                    CHECK_MSG(memcmp(o.params[i], o.params[0], bytes) == 0 &&
                                  memcmp(o.state[i], o.state[0], bytes) == 0,
                              "%s x%d %s: replica %d differs from replica 0", models[k], w, how,
                              i);
                    CHECK_MSG(o.eval_loss[i] == whole.eval_loss[i],
                              "%s x%d %s: replica %d evaluated %.9g, whole %.9g", models[k], w,
                              how, i, o.eval_loss[i], whole.eval_loss[i]);
                }
                if (o.rc == 0)
                    printf("step sums in parts, %s x%d %s: %d steps, the whole reduce's bits\n",
                           models[k], w, how, SUMS_STEPS);
                sums_result_free(&o);
                sums_result_free(&whole);
            }
        }
        gt_free(params0);
    }
    gt_free(ds.images);
    gt_free(ds.labels);
}

/* ---- (4) and (5): whole runs ----------------------------------------------------------------- */

static gt_data g_data;

typedef struct outcome {
    int rc;
    char err[GT_ERRLEN];
    gt_run_result *res;
    double step_loss[64]; /* mean loss of each of the first clocks, from --log-steps */
    int nsteps;
    int rollbacks;        /* the guard's rollbacks, as the log records them */
    int device_step;      /* the config record says the steps took their update on the GPU */
    double wall_s;
} outcome;

static void run_config(gt_config *c, gt_mode mode, int gpus, int batch, int epochs)
{
    gt_config_defaults(c);
    c->exchange = g_exchange;
    snprintf(c->model, sizeof c->model, "lenet5");
    c->mode = mode;
    c->ngpus = gpus;
    c->gpus_all = 0;
    c->gpus_given = 1;
    for (int i = 0; i < gpus; i++)
        c->gpus[i] = i;
    c->batch = batch;
    c->epochs = epochs;
    c->optim.total_epochs = (float)epochs;
    c->quiet = 1;
    c->progress = 0;
    c->log_steps = 1;
}

static int open_run_devices(const gt_config *c, const gt_model *m, gt_device **devs,
                            gt_device **ev, gt_err *e)
{
    for (int i = 0; i < c->ngpus; i++)
        if (gt_cuda_device_open(&devs[i], m, c->batch, c->gpus[i], 0, e) != 0)
            return -1;
    return gt_cuda_device_open(ev, m, c->batch, c->gpus[0], 0, e);
}

/* How many lines of the log at `path` hold `what`. */
static int log_count(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

static outcome train(gt_config *c)
{
    outcome o = {0};
    gt_err e = {""};
    gt_model m;
    char log[] = "/tmp/gt_allreduce_XXXXXX";
    int fd = mkstemp(log);
    close(fd);
    snprintf(c->log_path, sizeof c->log_path, "%s", log);
    o.res = calloc(1, sizeof *o.res);
    CHECK(gt_model_build(c->model, 1, 28, 28, 10, &m, &e) == 0);
    float *params = gt_alloc(m.nparams * sizeof(float));
    gt_model_init_params(&m, params, c->seed);
    gt_device *devs[MAX_W] = {NULL}, *ev = NULL;
    o.rc = open_run_devices(c, &m, devs, &ev, &e);
    if (o.rc == 0) {
        gt_start start = {.params = params};
        double t0 = now_s();
        o.rc = gt_train_run(c, &m, &g_data, devs, c->ngpus, ev, &start, o.res, &e);
        o.wall_s = now_s() - t0;
    }
    snprintf(o.err, sizeof o.err, "%s", e.msg);
    for (int i = 0; i < c->ngpus; i++)
        gt_device_close(devs[i]);
    gt_device_close(ev);
    gt_free(params);
    o.nsteps = gt_test_step_losses(log, c->ngpus, o.step_loss, 64);
    o.rollbacks = log_count(log, "\"action\":\"rolled back");
    o.device_step = log_count(log, "\"step\":\"device\"") > 0;
    unlink(log);
    return o;
}

/* A run with the store in every step (--store-step): sync's reference path, which sync on GPUs
 * would otherwise leave for allreduce's step. */
static outcome train_store(gt_config *c)
{
    c->store_step = 1;
    outcome o = train(c);
    c->store_step = 0;
    return o;
}

/* hogwild's store step in parts on GPUs (the device's exchange: each part's download, the store's
 * update and the part's upload overlapping): one GPU computes what the whole push and pull
 * compute, bit for bit; every GPU in parts trains every sample the whole exchange does. (Not their
 * accuracies: this harness runs the recipe as given, momentum 0.9 without the worker-count
 * corrections, and hogwild over 2 GPUs ends at 0.10-0.25 on these 6,000 samples either way, as
 * `--literal` does on 2 CPU workers.) */
static void store_parts_one(const char *model)
{
    gt_config a, whole;
    run_config(&a, GT_MODE_HOGWILD, 1, 32, 1);
    run_config(&whole, GT_MODE_HOGWILD, 1, 32, 1);
    snprintf(a.model, sizeof a.model, "%s", model);
    snprintf(whole.model, sizeof whole.model, "%s", model);
    a.stripes = whole.stripes = 8;
    a.store_parts = 4;
    whole.store_parts = 0;
    outcome oa = train_store(&a), ow = train_store(&whole);
    CHECK_MSG(oa.rc == 0 && ow.rc == 0, "%s, one GPU in parts: %s %s", model, oa.err, ow.err);
    CHECK(oa.nsteps == ow.nsteps && oa.nsteps > 3);
    for (int k = 0; k < oa.nsteps && k < ow.nsteps; k++)
        CHECK_MSG(oa.step_loss[k] == ow.step_loss[k], "%s step %d: in parts %.9g, whole %.9g",
                  model, k, oa.step_loss[k], ow.step_loss[k]);
    CHECK(oa.rc || oa.res->final_test_acc == ow.res->final_test_acc);
    printf("%s, one GPU: %d steps alike in parts and whole\n", model, oa.nsteps);
    outcome *all[] = {&oa, &ow};
    for (int i = 0; i < 2; i++) {
        gt_run_result_free(all[i]->res);
        free(all[i]->res);
    }
}

/* lenet5 takes the fused step (its parts after the step), resnet20 the layer path (its parts
 * during the backward, as its marks fall). */
static void test_store_parts(void)
{
    store_parts_one("lenet5");
    store_parts_one("resnet20");
    gt_config c, cw;
    run_config(&c, GT_MODE_HOGWILD, g_w, 32, 1);
    run_config(&cw, GT_MODE_HOGWILD, g_w, 32, 1);
    c.stripes = cw.stripes = 8;
    c.store_parts = 4;
    cw.store_parts = 0;
    outcome oc = train(&c), ocw = train(&cw);
    CHECK_MSG(oc.rc == 0 && ocw.rc == 0, "%d GPUs in parts: %s %s", g_w, oc.err, ocw.err);
    if (oc.rc == 0 && ocw.rc == 0) {
        printf("hogwild x%d in parts: acc %.4f, %.0f samples/s; whole: acc %.4f, %.0f samples/s\n",
               g_w, oc.res->final_test_acc, oc.res->samples_per_s, ocw.res->final_test_acc,
               ocw.res->samples_per_s);
        CHECK(oc.res->samples == ocw.res->samples);
        CHECK(oc.res->store_parts == 4 && ocw.res->store_parts == 0);
    }
    outcome *all[] = {&oc, &ocw};
    for (int i = 0; i < 2; i++) {
        gt_run_result_free(all[i]->res);
        free(all[i]->res);
    }
}

/* auto's parts for hogwild (store_parts.c): a lone worker's at least 1 M parameters each, as
 * sync's (cnn-wide's 3.3 M in 3), several workers' at least 256 K (12), their parts being their
 * pulls too. */
static void test_store_parts_auto(void)
{
    const int workers[2] = {1, g_w};
    for (int i = 0; i < 2; i++) {
        int w = workers[i];
        gt_config c;
        run_config(&c, GT_MODE_HOGWILD, w, 128, 1);
        snprintf(c.model, sizeof c.model, "cnn-wide");
        outcome o = train_store(&c);
        int want = w == 1 ? 3 : 12;
        CHECK_MSG(o.rc == 0, "cnn-wide hogwild x%d: %s", w, o.err);
        if (o.rc == 0) {
            CHECK_MSG(o.res->store_parts == want, "cnn-wide hogwild x%d: %d parts, not %d", w,
                      o.res->store_parts, want);
            printf("cnn-wide hogwild x%d: %d parts, %.0f samples/s\n", w, o.res->store_parts,
                   o.res->samples_per_s);
        }
        gt_run_result_free(o.res);
        free(o.res);
    }
}

/* allreduce on W GPUs at batch b (with the exchange given) = sync on the same GPUs = one GPU at
 * W*b. */
static void test_modes_agree(gt_exchange exchange)
{
    const int b = 32, steps = 30;
    gt_config ca, cs, c1;
    run_config(&ca, GT_MODE_ALLREDUCE, g_w, b, 1);
    run_config(&cs, GT_MODE_SYNC, g_w, b, 1);
    run_config(&c1, GT_MODE_SYNC, 1, g_w * b, 1);
    ca.exchange = exchange;
    outcome oa = train(&ca), os = train_store(&cs), o1 = train_store(&c1);
    printf("exchange %s: ", gt_name(GT_NAMES_EXCHANGE, (int)exchange));
    CHECK_MSG(oa.rc == 0, "allreduce: %s", oa.err);
    CHECK_MSG(os.rc == 0, "sync: %s", os.err);
    CHECK_MSG(o1.rc == 0, "one GPU: %s", o1.err);
    CHECK_MSG(oa.nsteps >= steps && os.nsteps >= steps && o1.nsteps >= steps,
              "%d, %d and %d steps logged", oa.nsteps, os.nsteps, o1.nsteps);
    for (int i = 0; i < steps && i < oa.nsteps && i < os.nsteps && i < o1.nsteps; i++) {
        CHECK_MSG(fabs(oa.step_loss[i] - o1.step_loss[i]) <= 1e-4 * fabs(o1.step_loss[i]),
                  "step %d: allreduce loss %.9g, one GPU %.9g", i, oa.step_loss[i],
                  o1.step_loss[i]);
        CHECK_MSG(fabs(os.step_loss[i] - o1.step_loss[i]) <= 1e-4 * fabs(o1.step_loss[i]),
                  "step %d: sync loss %.9g, one GPU %.9g", i, os.step_loss[i], o1.step_loss[i]);
    }
    if (oa.rc == 0 && os.rc == 0 && o1.rc == 0) {
        printf("allreduce x%d: acc %.4f, %.0f samples/s; sync x%d: acc %.4f, %.0f samples/s; "
               "1 GPU at %d: acc %.4f, %.0f samples/s\n", g_w, oa.res->final_test_acc,
               oa.res->samples_per_s, g_w, os.res->final_test_acc, os.res->samples_per_s,
               g_w * b, o1.res->final_test_acc, o1.res->samples_per_s);
        CHECK(oa.res->samples == o1.res->samples && os.res->samples == o1.res->samples);
        CHECK(oa.res->npoints == 1);
        CHECK_CLOSE(oa.res->final_test_acc, o1.res->final_test_acc, 0.005);
        CHECK_CLOSE(os.res->final_test_acc, o1.res->final_test_acc, 0.005);
    }
    gt_run_result_free(oa.res);
    free(oa.res);
    gt_run_result_free(os.res);
    free(os.res);
    gt_run_result_free(o1.res);
    free(o1.res);
}

/* The device step: every mode with one worker (serial SGD), sync with every GPU (the sums) and
 * local with every GPU (replicas averaged on the GPUs) take each step's update on the GPUs (the
 * allreduce mode's step, no store in it) and agree step by step with the store's path
 * (--store-step), which the config record names; hogwild with several workers keeps the
 * store. */
static void test_device_step(void)
{
    const struct {
        gt_mode mode;
        int gpus, device;
    } runs[] = {{GT_MODE_HOGWILD, 1, 1}, {GT_MODE_SYNC, 1, 1},  {GT_MODE_SSP, 1, 1},
                {GT_MODE_LOCAL, 1, 1},   {GT_MODE_SYNC, g_w, 1}, {GT_MODE_LOCAL, g_w, 1},
                {GT_MODE_HOGWILD, g_w, 0}};
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        gt_config cd, cs;
        run_config(&cd, runs[k].mode, runs[k].gpus, 32, 1);
        cs = cd;
        outcome od = train(&cd), os = train_store(&cs);
        char name[64];
        snprintf(name, sizeof name, "%s x%d", gt_mode_name(runs[k].mode), runs[k].gpus);
        CHECK_MSG(od.rc == 0 && os.rc == 0, "%s: %s%s", name, od.err, os.err);
        CHECK_MSG(od.device_step == runs[k].device && os.device_step == 0,
                  "%s: the config records say step %d and %d", name, od.device_step,
                  os.device_step);
        CHECK_MSG(!runs[k].device || (od.nsteps >= 30 && od.nsteps == os.nsteps),
                  "%s: %d and %d steps", name, od.nsteps, os.nsteps);
        for (int i = 0; runs[k].device && i < od.nsteps && i < os.nsteps; i++)
            CHECK_MSG(fabs(od.step_loss[i] - os.step_loss[i]) <= 1e-4 * fabs(os.step_loss[i]),
                      "%s step %d: on the device %.9g, through the store %.9g", name, i,
                      od.step_loss[i], os.step_loss[i]);
        if (od.rc == 0 && os.rc == 0) {
            printf("%s: %s step acc %.4f, %.0f samples/s; store step acc %.4f, %.0f samples/s\n",
                   name, runs[k].device ? "device" : "default", od.res->final_test_acc,
                   od.res->samples_per_s, os.res->final_test_acc, os.res->samples_per_s);
            if (runs[k].device)
                CHECK_CLOSE(od.res->final_test_acc, os.res->final_test_acc, 0.005);
        }
        gt_run_result_free(od.res);
        free(od.res);
        gt_run_result_free(os.res);
        free(os.res);
    }
}

/* --ema on the device step: the replicas' moving average on their GPUs, which evaluations (on
 * the replicas from 2 GPUs, else on the evaluator) and the store then read, ends where the store's
 * own average ends on the store's path (--store-step):
 * one GPU, sync and local on every GPU, and allreduce against sync through the store. */
static void test_ema_device(void)
{
    const struct {
        gt_mode mode, ref;
        int gpus;
    } runs[] = {{GT_MODE_HOGWILD, GT_MODE_HOGWILD, 1},
                {GT_MODE_SYNC, GT_MODE_SYNC, g_w},
                {GT_MODE_LOCAL, GT_MODE_LOCAL, g_w},
                {GT_MODE_ALLREDUCE, GT_MODE_SYNC, g_w}};
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        gt_config cd, cs, cp;
        run_config(&cd, runs[k].mode, runs[k].gpus, 32, 1);
        run_config(&cs, runs[k].ref, runs[k].gpus, 32, 1);
        cp = cd;
        cd.ema = cs.ema = 0.99f;
        outcome od = train(&cd), os = train_store(&cs), op = train(&cp);
        char name[64];
        snprintf(name, sizeof name, "%s x%d --ema", gt_mode_name(runs[k].mode), runs[k].gpus);
        CHECK_MSG(od.rc == 0 && os.rc == 0 && op.rc == 0, "%s: %s%s%s", name, od.err, os.err,
                  op.err);
        CHECK_MSG(od.device_step && !os.device_step, "%s: the config records say step %d and %d",
                  name, od.device_step, os.device_step);
        if (od.rc == 0 && os.rc == 0 && op.rc == 0) {
            printf("%s: device step acc %.4f, store step %.4f, without the average %.4f\n", name,
                   od.res->final_test_acc, os.res->final_test_acc, op.res->final_test_acc);
            CHECK_CLOSE(od.res->final_test_acc, os.res->final_test_acc, 0.005);
            /* an average that never moved would be the initial parameters', near chance (0.1);
             * one epoch of 6000 samples ends at 0.37-0.70 on 4x H200 */
            CHECK(od.res->final_test_acc > 0.2);
        }
        gt_run_result_free(od.res);
        free(od.res);
        gt_run_result_free(os.res);
        free(os.res);
        gt_run_result_free(op.res);
        free(op.res);
    }
}

/* With a warm-up (the default recipe's from 2 GPUs up) every replica takes the same step size
 * at the same update whatever the timing: two runs give the same bits, and sync's steps. */
static void test_warmup_same(void)
{
    gt_config ca, cs;
    run_config(&ca, GT_MODE_ALLREDUCE, g_w, 32, 1);
    ca.optim.warmup_epochs = 0.1f;
    cs = ca;
    cs.mode = GT_MODE_SYNC;
    outcome o1 = train(&ca), o2 = train(&ca), os = train_store(&cs);
    CHECK_MSG(o1.rc == 0 && o2.rc == 0, "allreduce: %s%s", o1.err, o2.err);
    CHECK_MSG(os.rc == 0, "sync: %s", os.err);
    CHECK_MSG(o1.nsteps >= 30 && o1.nsteps == o2.nsteps && os.nsteps >= 30, "%d, %d and %d steps",
              o1.nsteps, o2.nsteps, os.nsteps);
    for (int i = 0; i < o1.nsteps && i < o2.nsteps && i < os.nsteps; i++) {
        CHECK_MSG(o1.step_loss[i] == o2.step_loss[i], "step %d: %.9g, then %.9g", i,
                  o1.step_loss[i], o2.step_loss[i]);
        CHECK_MSG(fabs(o1.step_loss[i] - os.step_loss[i]) <= 1e-4 * fabs(os.step_loss[i]),
                  "step %d: allreduce %.9g, sync %.9g", i, o1.step_loss[i], os.step_loss[i]);
    }
    if (o1.rc == 0 && o2.rc == 0 && os.rc == 0) {
        printf("warm-up: allreduce x%d acc %.4f and %.4f, sync %.4f\n", g_w,
               o1.res->final_test_acc, o2.res->final_test_acc, os.res->final_test_acc);
        CHECK(o1.res->final_test_acc == o2.res->final_test_acc);
        CHECK_CLOSE(o1.res->final_test_acc, os.res->final_test_acc, 0.005);
    }
    outcome *all[] = {&o1, &o2, &os};
    for (int i = 0; i < 3; i++) {
        gt_run_result_free(all[i]->res);
        free(all[i]->res);
    }
}

/* allreduce evaluates on its replicas, each GPU a share of the test set: mid-epoch (--eval-every)
 * and at the epoch's end its points fall at the same updates as sync's, which evaluates the store
 * on the evaluator, and agree with them (the same parameters; only the loss sums' order
 * differs). */
/* The parameters of the checkpoint at path (m's), or NULL with a failed check. */
static float *ckpt_params(const char *path, const gt_model *m)
{
    gt_err e = {""};
    gt_ckpt_meta meta;
    float *p = gt_alloc(m->nparams * sizeof(float));
    if (gt_ckpt_load(path, m, p, NULL, NULL, 0, &meta, 0, &e) != 0) {
        CHECK_MSG(0, "%s", e.msg);
        gt_free(p);
        return NULL;
    }
    return p;
}

/* Three epochs: the first's end evaluated on the replicas only (the store left as it was), the
 * second's with a checkpoint (--checkpoint-every 2), the last's; the final checkpoint holds what
 * sync's holds. With ema (--ema) each replica evaluates the moving average it keeps, and sync
 * the store's on the evaluator. */
static void test_replica_eval(float ema)
{
    gt_config ca, cs;
    run_config(&ca, GT_MODE_ALLREDUCE, g_w, 32, 3);
    run_config(&cs, GT_MODE_SYNC, g_w, 32, 3);
    ca.ema = cs.ema = ema;
    ca.eval_every = cs.eval_every = 20;
    ca.log_steps = cs.log_steps = 0;
    ca.checkpoint_every = cs.checkpoint_every = 2;
    snprintf(ca.checkpoint, sizeof ca.checkpoint, "/tmp/gt_replica_eval_%d_ar.st", (int)getpid());
    snprintf(cs.checkpoint, sizeof cs.checkpoint, "/tmp/gt_replica_eval_%d_sync.st", (int)getpid());
    outcome oa = train(&ca), os = train_store(&cs);
    CHECK_MSG(oa.rc == 0 && os.rc == 0, "allreduce: %s; sync: %s", oa.err, os.err);
    gt_model m;
    gt_err e = {""};
    if (oa.rc == 0 && os.rc == 0 && gt_model_build(ca.model, 1, 28, 28, 10, &m, &e) == 0) {
        float *pa = ckpt_params(ca.checkpoint, &m), *ps = ckpt_params(cs.checkpoint, &m);
        double dd = 0, ss = 0;
        for (size_t i = 0; pa && ps && i < m.nparams; i++) {
            dd += ((double)pa[i] - ps[i]) * ((double)pa[i] - ps[i]);
            ss += (double)ps[i] * ps[i];
        }
        CHECK_MSG(pa && ps && dd <= 1e-6 * ss, "the final checkpoints differ: |a - s|^2 %.3g, |s|^2 %.3g",
                  dd, ss);
        gt_free(pa);
        gt_free(ps);
    }
    unlink(ca.checkpoint);
    unlink(cs.checkpoint);
    if (oa.rc == 0 && os.rc == 0) {
        printf("replica evaluation%s: %d points (sync %d), final acc %.4f (sync %.4f)\n",
               ema > 0 ? " of the moving average" : "", oa.res->npoints, os.res->npoints,
               oa.res->final_test_acc, os.res->final_test_acc);
        CHECK(oa.res->npoints > 2 && oa.res->npoints == os.res->npoints);
        for (int i = 0; i < oa.res->npoints && i < os.res->npoints; i++) {
            const gt_eval_point *a = &oa.res->points[i], *y = &os.res->points[i];
            CHECK_MSG(a->step == y->step, "point %d: update %llu, sync %llu", i,
                      (unsigned long long)a->step, (unsigned long long)y->step);
            CHECK_MSG(fabs(a->test_acc - y->test_acc) <= 0.002 &&
                          fabs(a->test_loss - y->test_loss) <= 1e-3 * y->test_loss,
                      "point %d: acc %.4f loss %.6f, sync %.4f %.6f", i, a->test_acc,
                      a->test_loss, y->test_acc, y->test_loss);
        }
    }
    gt_run_result_free(oa.res);
    free(oa.res);
    gt_run_result_free(os.res);
    free(os.res);
}

/* A whole run whose steps sum in parts beside their backward (cnn-wide: 3.3 M parameters, in
 * parts by default), with evaluations on the replicas between the steps (--eval-every): step by
 * step the losses of sync through the store, and its evaluations. */
static void test_sums_run(void)
{
    gt_config ca, cs;
    run_config(&ca, GT_MODE_ALLREDUCE, g_w, 32, 1);
    snprintf(ca.model, sizeof ca.model, "cnn-wide");
    ca.eval_every = 20;
    cs = ca;
    cs.mode = GT_MODE_SYNC;
    outcome oa = train(&ca), os = train_store(&cs);
    CHECK_MSG(oa.rc == 0 && os.rc == 0, "allreduce: %s; sync: %s", oa.err, os.err);
    CHECK_MSG(oa.nsteps >= 30 && oa.nsteps == os.nsteps, "%d and %d steps", oa.nsteps,
              os.nsteps);
    for (int i = 0; i < oa.nsteps && i < os.nsteps; i++)
        CHECK_MSG(fabs(oa.step_loss[i] - os.step_loss[i]) <= 1e-4 * fabs(os.step_loss[i]),
                  "cnn-wide step %d: allreduce %.9g, sync %.9g", i, oa.step_loss[i],
                  os.step_loss[i]);
    if (oa.rc == 0 && os.rc == 0) {
        printf("cnn-wide x%d, the sums in parts: acc %.4f, %d points; sync %.4f, %d points\n",
               g_w, oa.res->final_test_acc, oa.res->npoints, os.res->final_test_acc,
               os.res->npoints);
        CHECK(oa.res->npoints > 2 && oa.res->npoints == os.res->npoints);
        CHECK_CLOSE(oa.res->final_test_acc, os.res->final_test_acc, 0.005);
    }
    gt_run_result_free(oa.res);
    free(oa.res);
    gt_run_result_free(os.res);
    free(os.res);
}

typedef struct abort_run {
    gt_config cfg;
    outcome o;
    volatile int done;
} abort_run;

static void *abort_run_main(void *arg)
{
    abort_run *a = arg;
    a->o = train(&a->cfg);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* gt_cuda_allreduce_abort from another thread ends a long run with an error instead of a hang.
 * The abort is repeated: one that comes before the communicators exist does not touch them. */
static void test_abort(void)
{
    const double give_up_s = 60;
    abort_run a;
    memset(&a, 0, sizeof a);
    run_config(&a.cfg, GT_MODE_ALLREDUCE, g_w, 32, 200);
    pthread_t th;
    pthread_create(&th, NULL, abort_run_main, &a);
    double t0 = now_s();
    while (!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE) && now_s() - t0 < give_up_s) {
        usleep(100000);
        gt_cuda_allreduce_abort();
    }
    int done = __atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
    CHECK_MSG(done, "the run did not end within %.0f s of the abort", give_up_s);
    if (!done) {
        fprintf(stderr, "abort: the run hangs; giving up\n");
        exit(1);
    }
    pthread_join(th, NULL);
    printf("abort: the run ended after %.2f s: %s\n", a.o.wall_s, a.o.err);
    CHECK(a.o.rc != 0);
    CHECK_MSG(strstr(a.o.err, "abort") && strstr(a.o.err, "gpu:"), "message: %s", a.o.err);
    gt_run_result_free(a.o.res);
    free(a.o.res);
}

/* The guard rolls an allreduce run, and local on the device step, back (the store restored at the
 * mode's barrier, every replica
 * reloading it) instead of stopping it: --lr 10 drives the loss non-finite within steps (lr 1.0,
 * as on the CPU in tests/cli_converge.sh, stalled at 4 GPUs but at 2 sat just above chance, out
 * of the guard's reach), and the run either learns at a lowered step size or, after 6 rollbacks,
 * ends with an error that says so. */
static void test_rollback(void)
{
    gt_config c;
    /* batch 8 a GPU: 6,000 samples make 187 clocks an epoch at 4 GPUs, enough for the guard's
     * 150-clock stall window and a barrier (every 64 clocks) after it. Six epochs: on 4 H100s the
     * run needed three rollbacks (at clocks 64, 251 and 438) and reached 0.47 by the end of a
     * third epoch at lr x1/64; the rest of the run is for learning after the last one. Ten
     * epochs: on 2 H100s the run rolled back four times (the last at clock 878, lr x1/128) and
     * six epochs left it at 0.34. */
    const gt_mode modes[] = {GT_MODE_ALLREDUCE, GT_MODE_LOCAL};
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
        /* local on the device step rolls back at its averages (every 5 clocks here, so its
         * barriers fall off allreduce's every 64th clock). */
        run_config(&c, modes[k], g_w, 8, 10);
        c.sync_every = 5;
        c.optim.lr = 10.0f;
        c.given |= GT_GIVEN_LR;
        c.log_steps = 0;
        outcome o = train(&c);
        double acc = o.res->npoints ? o.res->final_test_acc : 0;
        printf("rollback, %s x%d: exit %d after %d rollback(s), test acc %.4f%s%s\n",
               gt_mode_name(modes[k]), g_w, o.rc, o.rollbacks, acc, o.rc ? ": " : "", o.err);
        CHECK_MSG(o.device_step, "%s: not on the device step", gt_mode_name(modes[k]));
        CHECK_MSG(o.rollbacks >= 1, "%s: no rollback logged (exit %d: %s)",
                  gt_mode_name(modes[k]), o.rc, o.err);
        CHECK_MSG(o.rc == 0 ? acc >= 0.5 : strstr(o.err, "rollbacks did not help") != NULL,
                  "%s: exit %d, acc %.4f: %s", gt_mode_name(modes[k]), o.rc, acc, o.err);
        gt_run_result_free(o.res);
        free(o.res);
    }
}

/* ---- (6) timing, printed only ---------------------------------------------------------------- */

enum { TIME_WARM = 5, TIME_STEPS = 30 };

typedef struct time_worker {
    gt_device *d;
    const gt_batch *b;
    const gt_optim_cfg *cfg;
    double step_s, reduce_s; /* per step: train_step, then reduce_update */
    double reduce_only_s;    /* per call, reduce_update alone */
    int rc;
    char err[GT_ERRLEN];
} time_worker;

static void *time_worker_main(void *arg)
{
    time_worker *w = arg;
    gt_device *d = w->d;
    gt_err e = {""};
    gt_optim_step st = gt_optim_prepare(w->cfg, 1, 0);
    const float gscale = 1.0f / (float)g_w;
    d->keep_grad = 1;
    w->rc = d->ops->load_params(d, &e) || d->ops->set_state(d, NULL, NULL, &e);
    for (int i = 0; i < TIME_WARM + TIME_STEPS && w->rc == 0; i++) {
        gt_step_out out;
        double t0 = now_s();
        w->rc = d->ops->train_step(d, w->b, &out, &e);
        double t1 = now_s();
        w->rc = w->rc || d->ops->reduce_update(d, w->cfg, &st, gscale, &e);
        if (i >= TIME_WARM) {
            w->step_s += (t1 - t0) / TIME_STEPS;
            w->reduce_s += (now_s() - t1) / TIME_STEPS;
        }
    }
    double t0 = now_s();
    for (int i = 0; i < TIME_STEPS && w->rc == 0; i++)
        w->rc = d->ops->reduce_update(d, w->cfg, &st, gscale, &e);
    /* The peer exchange is only queued: wait for the last one. */
    w->rc = w->rc || d->ops->get_params(d, NULL, NULL, &e);
    w->reduce_only_s = (now_s() - t0) / TIME_STEPS;
    snprintf(w->err, sizeof w->err, "%s", e.msg);
    return NULL;
}

static void time_model(const char *name, int batch, gt_rng *r)
{
    gt_model m;
    gt_dataset ds;
    gt_err e = {""};
    gt_device *devs[MAX_W] = {NULL};
    time_worker w[MAX_W];
    uint32_t idx[256];
    CHECK(gt_model_build(name, 1, 28, 28, 10, &m, &e) == 0);
    gt_test_random_dataset(&ds, r, 512);
    for (int i = 0; i < batch; i++)
        idx[i] = gt_rng_below(r, ds.n);
    gt_batch b = {&ds, idx, batch, 1, 7, NULL};
    gt_optim_cfg cfg;
    gt_optim_defaults(&cfg);
    float *params = gt_alloc(m.nparams * sizeof(float));
    gt_model_init_params(&m, params, 3);
    int rc = 0;
    for (int i = 0; i < g_w && rc == 0; i++) {
        rc = gt_cuda_device_open(&devs[i], &m, batch, i, 0, &e);
        if (rc == 0)
            memcpy(devs[i]->params, params, m.nparams * sizeof(float));
    }
    rc = rc || gt_cuda_allreduce_init(devs, g_w, &cfg, g_exchange, &e);
    CHECK_MSG(rc == 0, "%s: %s", name, e.msg);
    if (rc == 0) {
        pthread_t th[MAX_W];
        for (int i = 0; i < g_w; i++) {
            w[i] = (time_worker){.d = devs[i], .b = &b, .cfg = &cfg};
            pthread_create(&th[i], NULL, time_worker_main, &w[i]);
        }
        for (int i = 0; i < g_w; i++) {
            pthread_join(th[i], NULL);
            CHECK_MSG(w[i].rc == 0, "%s worker %d: %s", name, i, w[i].err);
        }
        double bytes = (double)m.nparams * sizeof(float), t = w[0].reduce_only_s;
        double algbw = bytes / t / 1e9;
        printf("timing %-4s %-8s (%zu params, %.0f KB) x%d at batch %d: train_step %.3f ms, "
               "reduce_update %.3f ms in a step, %.3f ms alone; algbw %.2f GB/s, busbw %.2f "
               "GB/s\n", gt_name(GT_NAMES_EXCHANGE, (int)g_exchange), name, m.nparams,
               bytes / 1024, g_w, batch,
               1e3 * w[0].step_s, 1e3 * w[0].reduce_s, 1e3 * t, algbw,
               algbw * 2.0 * (g_w - 1) / g_w);
    }
    for (int i = 0; i < g_w; i++)
        gt_device_close(devs[i]);
    gt_free(params);
    gt_free(ds.images);
    gt_free(ds.labels);
}
#endif

int main(void)
{
#if !defined(GT_HAVE_CUDA) || !defined(GT_HAVE_NCCL)
    printf("skipped: built without CUDA and NCCL\n");
    return GT_SKIP;
#else
    int count = gt_cuda_device_count();
    if (count < 2) {
        printf("skipped: %d GPU(s) visible, the allreduce test needs 2\n", count);
        return GT_SKIP;
    }
    g_w = count < MAX_W ? count : MAX_W;
    gt_rng r;
    gt_rng_seed(&r, 20261127);
    test_optim_kernels(&r);
    test_p2p_exact(&r);
    test_p2p_range(&r);
    test_p2p_update(&r);
    test_p2p_average(&r);
    test_p2p_hang_proof();
    test_allreduce_step(&r);
    test_step_sums(&r);
    g_exchange = GT_EXCHANGE_NCCL;
    printf("the same steps with NCCL:\n");
    test_allreduce_step(&r);
    g_exchange = GT_EXCHANGE_AUTO;
    const char *dir = gt_test_fmnist_dir();
    gt_err e = {""};
    if (!dir) {
        printf("runs not tested: Fashion-MNIST not found (set GT_DATA)\n");
    } else if (gt_data_load(dir, 6000, &g_data, &e) != 0) {
        CHECK_MSG(0, "%s", e.msg);
    } else {
        test_modes_agree(GT_EXCHANGE_P2P);
        test_modes_agree(GT_EXCHANGE_NCCL);
        test_warmup_same();
        test_store_parts();
        test_store_parts_auto();
        test_device_step();
        test_ema_device();
        test_abort();
        test_rollback();
        test_replica_eval(0);
        test_replica_eval(0.99f);
        test_sums_run();
        gt_data_free(&g_data);
    }
    time_model("lenet5", 64, &r);
    time_model("cnn-wide", 128, &r);
    g_exchange = GT_EXCHANGE_NCCL;
    time_model("lenet5", 64, &r);
    time_model("cnn-wide", 128, &r);
    g_exchange = GT_EXCHANGE_AUTO;
    TEST_DONE();
#endif
}
