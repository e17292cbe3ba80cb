/* optim_cuda.cu - the GPU twin of src/optim.c: SGD (plain, momentum, Nesterov) and Adam applied to
 * a device's parameters and optimizer state, for the allreduce mode, where every GPU updates its
 * own replica. The arithmetic of an element, and why it equals the CPU's bit for bit, is in
 * optim_elem.cuh. */
#include "gt_cuda.h"
#include "optim_elem.cuh"

template <int RULE>
__global__ static void optim_kernel(optim_consts k, float *p, const float *g, float gscale,
                                    float *s0, float *s1, size_t n)
{
    GT_CUDA_GRID_STRIDE(i, n)
    optim_elem<RULE>(k, p, g[i], gscale, s0, s1, i);
}

int gt_cuda_optim_apply(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st,
                        float *p, const float *g, float gscale, float *s0, float *s1, size_t n,
                        gt_err *e)
{
    if (n == 0)
        return 0;
    optim_consts k = optim_consts_make(cfg, st);
    unsigned grid = gt_cuda_grid(n);
    switch (optim_rule(cfg)) {
    case OPTIM_SGD:
        optim_kernel<OPTIM_SGD><<<grid, GT_CUDA_THREADS, 0, c->stream>>>(k, p, g, gscale, s0, s1, n);
        break;
    case OPTIM_MOMENTUM:
        optim_kernel<OPTIM_MOMENTUM><<<grid, GT_CUDA_THREADS, 0, c->stream>>>(k, p, g, gscale, s0, s1, n);
        break;
    case OPTIM_NESTEROV:
        optim_kernel<OPTIM_NESTEROV><<<grid, GT_CUDA_THREADS, 0, c->stream>>>(k, p, g, gscale, s0, s1, n);
        break;
    case OPTIM_ADAM:
        optim_kernel<OPTIM_ADAM><<<grid, GT_CUDA_THREADS, 0, c->stream>>>(k, p, g, gscale, s0, s1, n);
        break;
    }
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void ema_kernel(float *ema, const float *p, float d, float c, size_t n)
{
    GT_CUDA_GRID_STRIDE(i, n)
    ema[i] = __fadd_rn(__fmul_rn(d, ema[i]), __fmul_rn(c, p[i]));
}

int gt_cuda_ema_apply(gt_cuda_ctx *c, float *ema, const float *p, float decay, size_t n,
                      gt_err *e)
{
    if (n == 0)
        return 0;
    ema_kernel<<<gt_cuda_grid(n), GT_CUDA_THREADS, 0, c->stream>>>(ema, p, decay, 1.0f - decay, n);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* --overlap's weight prediction: gt_optim_predict's arithmetic, non-finite gradients skipped,
 * from src (pinned host memory the device reads, or p itself) into p. */
__device__ static inline float optim_predict_one(const optim_consts &k, float p, float g,
                                                 float gscale, size_t i)
{
    return isfinite(g) ? optim_sgd_one(k, p, g, gscale, i) : p;
}

/* p, src and g point at element `at` of the parameter array. */
__global__ static void optim_predict_kernel(optim_consts k, float *p, const float *src,
                                            const float *g, float gscale, size_t n, size_t at)
{
    GT_CUDA_GRID_STRIDE(i, n)
    p[i] = optim_predict_one(k, src[i], g[i], gscale, at + i);
}

/* The same, four floats a thread where every pointer is 16-byte aligned: reads of host memory
 * over the bus want wide requests. */
__global__ static void optim_predict4_kernel(optim_consts k, float4 *p, const float4 *src,
                                             const float4 *g, float gscale, size_t n4)
{
    GT_CUDA_GRID_STRIDE(i, n4)
    {
        float4 s = src[i], d = g[i];
        size_t j = 4 * i;
        p[i] = make_float4(optim_predict_one(k, s.x, d.x, gscale, j),
                           optim_predict_one(k, s.y, d.y, gscale, j + 1),
                           optim_predict_one(k, s.z, d.z, gscale, j + 2),
                           optim_predict_one(k, s.w, d.w, gscale, j + 3));
    }
}

int gt_cuda_optim_predict_from(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st,
                               float *p, const float *src, const float *g, float gscale, size_t n,
                               gt_err *e)
{
    if (n == 0)
        return 0;
    optim_consts k = optim_consts_make(cfg, st);
    int wide = ((uintptr_t)p | (uintptr_t)src | (uintptr_t)g) % 16 == 0;
    size_t n4 = wide ? n / 4 : 0, done = n4 * 4;
    if (n4) {
        optim_predict4_kernel<<<gt_cuda_grid(n4), GT_CUDA_THREADS, 0, c->stream>>>(
            k, (float4 *)p, (const float4 *)src, (const float4 *)g, gscale, n4);
        GT_CUDA_LAUNCHED(c->name, e);
    }
    if (done < n) {
        optim_predict_kernel<<<gt_cuda_grid(n - done), GT_CUDA_THREADS, 0, c->stream>>>(
            k, p + done, src + done, g + done, gscale, n - done, done);
        GT_CUDA_LAUNCHED(c->name, e);
    }
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
