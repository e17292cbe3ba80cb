/* optim_cuda.cu - the GPU twin of src/optim.c: SGD (plain, momentum, Nesterov) and Adam applied to
 * a device's parameters and optimizer state, for the allreduce mode, where every GPU updates its
 * own replica.
 *
 * Each element goes through the same float operations in the same order as the CPU loops, and
 * every one of them is an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, __fsqrt_rn,
 * __fdiv_rn), which nvcc never contracts into a fused multiply-add. The per-update constants are
 * derived on the host by the same expressions as optim.c. So a GPU update equals gt_optim_apply
 * bit for bit, and replicas that start equal stay equal. */
#include "gt_cuda.h"

#include <math.h>

static const size_t OPTIM_BLOCK = 256, OPTIM_MAX_BLOCKS = 4096;

/* Per-update constants, as optim.c's optim_consts_make derives them. */
typedef struct optim_consts {
    float lr, mom, wd;
    float b1, one_b1, b2, one_b2, eps;
    float step_size, bc2_sqrt;
} optim_consts;

static optim_consts optim_consts_make(const gt_optim_cfg *c, const gt_optim_step *st)
{
    optim_consts k;
    k.lr = st->lr;
    k.mom = c->momentum;
    k.wd = c->weight_decay;
    k.b1 = c->beta1;
    k.one_b1 = 1.0f - c->beta1;
    k.b2 = c->beta2;
    k.one_b2 = 1.0f - c->beta2;
    k.eps = c->eps;
    k.step_size = (float)((double)st->lr / (double)st->bc1);
    k.bc2_sqrt = (float)sqrt((double)st->bc2);
    return k;
}

#define OPTIM_GRID_STRIDE(i, n)                                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                  \
         i += (size_t)gridDim.x * blockDim.x)

__device__ static inline float optim_grad(float g, float gscale, float p, float wd)
{
    float gi = __fmul_rn(g, gscale);
    return wd != 0.0f ? __fadd_rn(gi, __fmul_rn(wd, p)) : gi;
}

__device__ static inline float optim_momentum(float buf, float g, float mom)
{
    return __fadd_rn(__fmul_rn(mom, buf), g);
}

__global__ static void optim_sgd_kernel(optim_consts k, float *p, const float *g, float gscale,
                                        size_t n)
{
    OPTIM_GRID_STRIDE(i, n)
    p[i] = __fsub_rn(p[i], __fmul_rn(k.lr, optim_grad(g[i], gscale, p[i], k.wd)));
}

__global__ static void optim_sgd_momentum_kernel(optim_consts k, float *p, const float *g,
                                                 float gscale, float *buf, size_t n)
{
    OPTIM_GRID_STRIDE(i, n)
    {
        float b = optim_momentum(buf[i], optim_grad(g[i], gscale, p[i], k.wd), k.mom);
        buf[i] = b;
        p[i] = __fsub_rn(p[i], __fmul_rn(k.lr, b));
    }
}

__global__ static void optim_sgd_nesterov_kernel(optim_consts k, float *p, const float *g,
                                                 float gscale, float *buf, size_t n)
{
    OPTIM_GRID_STRIDE(i, n)
    {
        float gi = optim_grad(g[i], gscale, p[i], k.wd);
        float b = optim_momentum(buf[i], gi, k.mom);
        buf[i] = b;
        p[i] = __fsub_rn(p[i], __fmul_rn(k.lr, __fadd_rn(gi, __fmul_rn(k.mom, b))));
    }
}

__global__ static void optim_adam_kernel(optim_consts k, float *p, const float *g, float gscale,
                                         float *m, float *v, size_t n)
{
    OPTIM_GRID_STRIDE(i, n)
    {
        float gi = optim_grad(g[i], gscale, p[i], k.wd);
        float mi = __fadd_rn(__fmul_rn(k.b1, m[i]), __fmul_rn(k.one_b1, gi));
        float vi = __fadd_rn(__fmul_rn(k.b2, v[i]), __fmul_rn(__fmul_rn(k.one_b2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
        p[i] = __fsub_rn(p[i], __fdiv_rn(__fmul_rn(k.step_size, mi), denom));
    }
}

int gt_cuda_optim_apply(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st,
                        float *p, const float *g, float gscale, float *s0, float *s1, size_t n,
                        gt_err *e)
{
    if (n == 0)
        return 0;
    optim_consts k = optim_consts_make(cfg, st);
    size_t blocks = (n + OPTIM_BLOCK - 1) / OPTIM_BLOCK;
    unsigned grid = (unsigned)(blocks < OPTIM_MAX_BLOCKS ? blocks : OPTIM_MAX_BLOCKS);
    if (cfg->kind == GT_OPT_ADAM)
        optim_adam_kernel<<<grid, OPTIM_BLOCK, 0, c->stream>>>(k, p, g, gscale, s0, s1, n);
    else if (cfg->momentum == 0.0f)
        optim_sgd_kernel<<<grid, OPTIM_BLOCK, 0, c->stream>>>(k, p, g, gscale, n);
    else if (cfg->nesterov)
        optim_sgd_nesterov_kernel<<<grid, OPTIM_BLOCK, 0, c->stream>>>(k, p, g, gscale, s0, n);
    else
        optim_sgd_momentum_kernel<<<grid, OPTIM_BLOCK, 0, c->stream>>>(k, p, g, gscale, s0, n);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* ---- host arrays, for tests/test_cuda_allreduce.c -------------------------------------------- */

/* Device copies of the host arrays p, g, s0, s1 (NULL where the host one is). */
typedef struct optim_bufs {
    float *dev[4];
} optim_bufs;

static void optim_bufs_free(optim_bufs *b)
{
    for (int i = 0; i < 4; i++)
        if (b->dev[i])
            cudaFree(b->dev[i]);
    cudaGetLastError();
}

static int optim_bufs_upload(gt_cuda_ctx *c, optim_bufs *b, const float *const host[4], size_t n,
                             gt_err *e)
{
    for (int i = 0; i < 4; i++) {
        if (!host[i])
            continue;
        if (gt_cuda_malloc(c, (void **)&b->dev[i], n * sizeof(float), e))
            return -1;
        /* On the kernel's stream: a plain cudaMemcpy from pageable memory may return before
         * its DMA lands, and the non-blocking stream would not wait for it. */
        GT_CUDA_CHECK(c->name, e,
                      cudaMemcpyAsync(b->dev[i], host[i], n * sizeof(float),
                                      cudaMemcpyHostToDevice, c->stream));
    }
    return 0;
}

static int optim_test_run(gt_cuda_ctx *c, optim_bufs *b, const gt_optim_cfg *cfg,
                          const gt_optim_step *st, float *p, const float *g, float gscale,
                          float *s0, float *s1, size_t n, gt_err *e)
{
    const float *const host[4] = {p, g, s0, s1};
    if (optim_bufs_upload(c, b, host, n, e) ||
        gt_cuda_optim_apply(c, cfg, st, b->dev[0], b->dev[1], gscale, b->dev[2], b->dev[3], n, e))
        return -1;
    float *const out[3] = {p, s0, s1};
    float *const from[3] = {b->dev[0], b->dev[2], b->dev[3]};
    for (int i = 0; i < 3; i++)
        if (out[i])
            GT_CUDA_CHECK(c->name, e,
                          cudaMemcpyAsync(out[i], from[i], n * sizeof(float),
                                          cudaMemcpyDeviceToHost, c->stream));
    GT_CUDA_CHECK(c->name, e, cudaStreamSynchronize(c->stream));
    return 0;
}

int gt_cuda_test_optim(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st, float *p,
                       const float *g, float gscale, float *s0, float *s1, size_t n, gt_err *e)
{
    optim_bufs b = {{NULL, NULL, NULL, NULL}};
    GT_CUDA_CHECK(c->name, e, cudaSetDevice(c->ordinal));
    int rc = optim_test_run(c, &b, cfg, st, p, g, gscale, s0, s1, n, e);
    optim_bufs_free(&b);
    return rc;
}
