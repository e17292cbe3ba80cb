/* fused_cuda.cu - the fused training step of LeNet-shaped models (conv act avgpool, conv act
 * avgpool, fc act, fc act, fc: lenet5 and lenet5-classic): its buffers and the launches of the
 * three kernels of fused_kernels.cuh; fused_plan.cu says which models qualify.
 *
 * The layer-by-layer path stays the GPU reference and serves every other model; the parity test
 * holds both against the CPU. */
#include "gt_cuda.h"

#include "fused_kernels.cuh"

#include <string.h>

void gt_fused_free(gt_fused_net *f)
{
    void *bufs[] = {f->a1,  f->p1,  f->a2,   f->p2,   f->h1,   f->h2,    f->dz,
                    f->dh2, f->dh1, f->dp2, f->part, f->loss, f->hits, f->in_lut};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            cudaFree(bufs[i]);
    f->a1 = f->p1 = f->a2 = f->p2 = f->h1 = f->h2 = NULL;
    f->dz = f->dh2 = f->dh1 = f->dp2 = f->part = NULL;
    f->loss = NULL;
    f->hits = NULL;
    f->in_lut = NULL;
    f->in_lut_set = 0;
    f->cap = 0;
}

static int fused_malloc(gt_cuda_ctx *c, void **p, size_t rows, size_t len, size_t elem,
                        gt_err *e)
{
    return gt_cuda_malloc(c, p, rows * len * elem, e);
}

int gt_fused_alloc(gt_cuda_ctx *c, gt_fused_net *f, int cap, gt_err *e)
{
    const gt_fused_fc *fc = f->fc;
    size_t n = (size_t)cap, fl = sizeof(float);
    if (fused_malloc(c, (void **)&f->a1, n, f->a1_len, fl, e) ||
        fused_malloc(c, (void **)&f->p1, n, f->p1_len, fl, e) ||
        fused_malloc(c, (void **)&f->a2, n, f->a2_len, fl, e) ||
        fused_malloc(c, (void **)&f->p2, n, f->p2_len, fl, e) ||
        fused_malloc(c, (void **)&f->h1, n, (size_t)fc[0].out, fl, e) ||
        fused_malloc(c, (void **)&f->h2, n, (size_t)fc[1].out, fl, e) ||
        fused_malloc(c, (void **)&f->dz, n, (size_t)fc[2].out, fl, e) ||
        fused_malloc(c, (void **)&f->dh2, n, (size_t)fc[1].out, fl, e) ||
        fused_malloc(c, (void **)&f->dh1, n, (size_t)fc[0].out, fl, e) ||
        fused_malloc(c, (void **)&f->dp2, n, f->p2_len, fl, e) ||
        fused_malloc(c, (void **)&f->part, n, f->part_len, fl, e) ||
        fused_malloc(c, (void **)&f->loss, n, 1, sizeof(double), e) ||
        fused_malloc(c, (void **)&f->hits, n, 1, sizeof(int), e) ||
        fused_malloc(c, (void **)&f->in_lut, GT_NORM_MAX_C, 256, fl, e))
        return -1;
    f->in_lut_set = 0;
    f->cap = cap;
    gt_fused_plan_segs(f);
    const void *forward[] = {(const void *)fused_forward_kernel<1>,
                             (const void *)fused_forward_kernel<2>,
                             (const void *)fused_forward_kernel<FUSED_FC_SAMPLES>};
    for (int k = 0; k < 3; k++)
        GT_CUDA_CHECK(c->name, e,
                      cudaFuncSetAttribute(forward[k], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)f->smem_forward));
    GT_CUDA_CHECK(c->name, e,
                  cudaDeviceGetAttribute(&f->nsm, cudaDevAttrMultiProcessorCount, c->ordinal));
    GT_CUDA_CHECK(c->name, e,
                  cudaFuncSetAttribute(fused_backward_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)f->smem_backward));
    return 0;
}

int gt_fused_set_norm(gt_cuda_ctx *c, gt_fused_net *f, const gt_input_norm *norm, gt_err *e)
{
    int nc = f->conv[0].in_c, same = f->in_lut_set;
    if (nc < 1 || nc > GT_NORM_MAX_C)
        return gt_fail(e, "%s: %d input channels for the fused step's input table", c->name, nc);
    for (int ch = 0; ch < nc; ch++) {
        float mean = norm->on ? norm->mean[ch] : 0.0f, std = norm->on ? norm->std[ch] : 1.0f;
        same = same && !memcmp(&f->in_mean[ch], &mean, sizeof mean) &&
               !memcmp(&f->in_std[ch], &std, sizeof std);
        f->in_mean[ch] = mean;
        f->in_std[ch] = std;
    }
    if (same)
        return 0;
    float lut[GT_NORM_MAX_C * 256];
    for (int ch = 0; ch < nc; ch++)
        for (int v = 0; v < 256; v++) /* the layer path's formula: the same floats */
            lut[ch * 256 + v] = ((float)v / 255.0f - f->in_mean[ch]) / f->in_std[ch];
    GT_CUDA_CHECK(c->name, e,
                  cudaMemcpyAsync(f->in_lut, lut, (size_t)nc * 256 * sizeof *lut,
                                  cudaMemcpyHostToDevice, c->stream));
    GT_CUDA_CHECK(c->name, e, cudaStreamSynchronize(c->stream)); /* lut is on this stack */
    f->in_lut_set = 1;
    return 0;
}

static int fused_check_n(gt_cuda_ctx *c, const gt_fused_net *f, int n, gt_err *e)
{
    if (n < 1 || n > f->cap)
        return gt_fail(e, "%s: fused step of %d samples (buffers hold %d)", c->name, n, f->cap);
    return 0;
}

/* Both convolution stages, the linear layers and the loss (and, training, their backward) in
 * one kernel. Samples per block: one while the batch fits two
 * blocks an SM, then two, then FUSED_FC_SAMPLES, so that large batches read the linear layers'
 * weights fewer times. */
static int fused_forward(gt_cuda_ctx *c, gt_fused_net *f, const float *params,
                         const uint8_t *images, const uint16_t *labels, int n, int train,
                         gt_cuda_result *res, gt_err *e)
{
    float scale = 1.0f / (float)n;
    size_t smem = f->smem_forward;
    int per = n <= 2 * f->nsm ? 1 : n <= 4 * f->nsm ? 2 : FUSED_FC_SAMPLES;
    unsigned blocks = (unsigned)((n + per - 1) / per);
    if (per == 1)
        fused_forward_kernel<1><<<blocks, FUSED_THREADS, smem, c->stream>>>(
            *f, params, images, labels, n, scale, train, res);
    else if (per == 2)
        fused_forward_kernel<2><<<blocks, FUSED_THREADS, smem, c->stream>>>(
            *f, params, images, labels, n, scale, train, res);
    else
        fused_forward_kernel<FUSED_FC_SAMPLES><<<blocks, FUSED_THREADS, smem, c->stream>>>(
            *f, params, images, labels, n, scale, train, res);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* The first nsegs gradient segments (gt_fused_seg_blocks each) and the loss sum (one block). */
static int fused_reduce(gt_cuda_ctx *c, gt_fused_net *f, int nsegs, int n, float *grad,
                        gt_cuda_result *res, int accumulate, gt_err *e)
{
    size_t blocks = 1;
    for (int s = 0; s < nsegs; s++)
        blocks += gt_fused_seg_blocks(&f->seg[s]);
    fused_reduce_kernel<<<(unsigned)blocks, FUSED_THREADS, 0, c->stream>>>(*f, nsegs, n, grad,
                                                                           res, accumulate);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

int gt_fused_train(gt_cuda_ctx *c, gt_fused_net *f, const float *params, const uint8_t *images,
                   const uint16_t *labels, int n, float *grad, gt_cuda_result *res, gt_err *e)
{
    if (fused_check_n(c, f, n, e))
        return -1;
    if (fused_forward(c, f, params, images, labels, n, 1, res, e))
        return -1;
    fused_backward_kernel<<<dim3((unsigned)n, (unsigned)f->back_blocks), FUSED_THREADS,
                            f->smem_backward, c->stream>>>(*f, params, images);
    GT_CUDA_LAUNCHED(c->name, e);
    return fused_reduce(c, f, f->nsegs, n, grad, res, 0, e);
}

int gt_fused_eval(gt_cuda_ctx *c, gt_fused_net *f, const float *params, const uint8_t *images,
                  const uint16_t *labels, int n, gt_cuda_result *res, gt_err *e)
{
    if (fused_check_n(c, f, n, e) || fused_forward(c, f, params, images, labels, n, 0, res, e))
        return -1;
    return fused_reduce(c, f, 0, n, NULL, res, 1, e);
}
