/* blocks_cuda.cu - the small GPU ops of the residual networks that cuDNN does not cover: global
 * average pooling and its gradient, the residual add, and batch norm's count of batches. Each
 * mirrors its CPU twin in src/layers.c (gt_gap_forward, gt_gap_backward, gt_add) and
 * src/layer_kinds.c (the count), and each launcher checks the launch. Then the conversions of
 * the bf16 precision (device.h's GT_PRECISION_BF16) between fp32 arrays and bf16 copies, one of
 * them fused with the ReLU whose output a convolution reads. */
#include "gt_cuda.h"

#include <cuda_bf16.h>

/* One thread a plane, summed in order (the CPU's eight-lane sum differs by rounding only). */
__global__ static void gap_forward_kernel(const float *x, float *y, size_t planes, size_t plane,
                                          float inv)
{
    GT_CUDA_GRID_STRIDE(p, planes)
    {
        const float *row = x + p * plane;
        float s = 0.0f;
        for (size_t j = 0; j < plane; j++)
            s += row[j];
        y[p] = s * inv;
    }
}

int gt_cuda_gap_forward(gt_cuda_ctx *c, const float *x, float *y, size_t planes, size_t plane,
                        gt_err *e)
{
    if (planes == 0)
        return 0;
    gap_forward_kernel<<<gt_cuda_grid(planes), GT_CUDA_THREADS, 0, c->stream>>>(
        x, y, planes, plane, 1.0f / (float)plane);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void gap_backward_kernel(const float *dy, float *dx, size_t total, size_t plane,
                                           float inv)
{
    GT_CUDA_GRID_STRIDE(i, total)
    dx[i] = dy[i / plane] * inv;
}

int gt_cuda_gap_backward(gt_cuda_ctx *c, const float *dy, float *dx, size_t planes,
                         size_t plane, gt_err *e)
{
    size_t total = planes * plane;
    if (total == 0)
        return 0;
    gap_backward_kernel<<<gt_cuda_grid(total), GT_CUDA_THREADS, 0, c->stream>>>(
        dy, dx, total, plane, 1.0f / (float)plane);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void add_kernel(const float *a, const float *b, float *y, size_t len)
{
    GT_CUDA_GRID_STRIDE(i, len)
    y[i] = a[i] + b[i];
}

int gt_cuda_add(gt_cuda_ctx *c, const float *a, const float *b, float *y, size_t len, gt_err *e)
{
    if (len == 0)
        return 0;
    add_kernel<<<gt_cuda_grid(len), GT_CUDA_THREADS, 0, c->stream>>>(a, b, y, len);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void bn_count_kernel(float *count, int accumulate)
{
    *count = accumulate ? *count + 1.0f : 1.0f;
}

int gt_cuda_bn_count(gt_cuda_ctx *c, float *count, int accumulate, gt_err *e)
{
    bn_count_kernel<<<1, 1, 0, c->stream>>>(count, accumulate);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* ---- bf16 conversions ------------------------------------------------------------------------ */

__global__ static void to_bf16_kernel(const float *src, __nv_bfloat16 *dst, size_t n)
{
    GT_CUDA_GRID_STRIDE(i, n)
    dst[i] = __float2bfloat16_rn(src[i]);
}

int gt_cuda_to_bf16(gt_cuda_ctx *c, const float *src, void *dst, size_t n, gt_err *e)
{
    if (n == 0)
        return 0;
    to_bf16_kernel<<<gt_cuda_grid(n), GT_CUDA_THREADS, 0, c->stream>>>(src, (__nv_bfloat16 *)dst,
                                                                      n);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void from_bf16_kernel(const __nv_bfloat16 *src, float *dst, size_t n,
                                        const float *bias, int ch, size_t plane)
{
    GT_CUDA_GRID_STRIDE(i, n)
    {
        float v = __bfloat162float(src[i]);
        dst[i] = bias ? v + bias[i / plane % (size_t)ch] : v;
    }
}

int gt_cuda_from_bf16(gt_cuda_ctx *c, const void *src, float *dst, size_t n, const float *bias,
                      int ch, size_t plane, gt_err *e)
{
    if (n == 0)
        return 0;
    if (bias && (ch < 1 || plane < 1))
        return gt_fail(e, "%s: bf16 bias of %d channels of %zu values", c->name, ch, plane);
    from_bf16_kernel<<<gt_cuda_grid(n), GT_CUDA_THREADS, 0, c->stream>>>(
        (const __nv_bfloat16 *)src, dst, n, bias, ch, plane);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* y and its bf16 copy in one pass, where a ReLU and the next convolution's rounding of its
 * input were two (the copy is the same bits as gt_cuda_to_bf16's of y). */
__global__ static void relu_bf16_kernel(const float *x, float *y, __nv_bfloat16 *y_half, size_t n)
{
    GT_CUDA_GRID_STRIDE(i, n)
    {
        float v = x[i];
        v = v > 0.0f || v != v ? v : 0.0f;
        y[i] = v;
        y_half[i] = __float2bfloat16_rn(v);
    }
}

int gt_cuda_relu_bf16(gt_cuda_ctx *c, const float *x, float *y, void *y_half, size_t n,
                      gt_err *e)
{
    if (n == 0)
        return 0;
    relu_bf16_kernel<<<gt_cuda_grid(n), GT_CUDA_THREADS, 0, c->stream>>>(
        x, y, (__nv_bfloat16 *)y_half, n);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void add_bf16_kernel(const __nv_bfloat16 *src, float *dst, size_t n)
{
    GT_CUDA_GRID_STRIDE(i, n)
    dst[i] += __bfloat162float(src[i]);
}

int gt_cuda_add_bf16(gt_cuda_ctx *c, const void *src, float *dst, size_t n, gt_err *e)
{
    if (n == 0)
        return 0;
    add_bf16_kernel<<<gt_cuda_grid(n), GT_CUDA_THREADS, 0, c->stream>>>((const __nv_bfloat16 *)src,
                                                                       dst, n);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}
