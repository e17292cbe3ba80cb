/* blocks_cuda.cu - the small GPU ops of the residual networks that cuDNN does not cover: global
 * average pooling and its gradient, the residual add and the ReLU's backward. Each mirrors its
 * CPU twin in src/layers.c (gt_gap_forward, gt_gap_backward, gt_add), and each launcher checks
 * the launch. Then the conversions of the bf16 precision (device.h's GT_PRECISION_BF16) between
 * fp32 arrays and channels-last bf16 copies, one of them fused with the ReLU whose output a
 * convolution reads; batch norm in training (gt_batchnorm_forward_train and
 * gt_batchnorm_backward, the count of batches src/layer_kinds.c keeps included); and the same
 * layers on bf16 channels-last activations (the channels-last path of device_cuda.cu). */
#include "gt_cuda.h"

#include "gputrain/layers.h" /* GT_BN_EPS */

#include <cuda_bf16.h>
#include <climits>
#include <stdint.h>

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

static int aligned_to(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }

/* Element-wise kernels move four values a load where the arrays allow (vec4: 16-byte aligned;
 * the tail past a multiple of 4 goes one by one). */
__global__ static void add_kernel(const float *a, const float *b, float *y, size_t len, int vec4)
{
    size_t n4 = vec4 ? len / 4 : 0;
    GT_CUDA_GRID_STRIDE(i, n4)
    {
        float4 u = ((const float4 *)a)[i], v = ((const float4 *)b)[i];
        ((float4 *)y)[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
    }
    GT_CUDA_GRID_STRIDE(j, len - 4 * n4)
    {
        size_t i = 4 * n4 + j;
        y[i] = a[i] + b[i];
    }
}

int gt_cuda_add(gt_cuda_ctx *c, const float *a, const float *b, float *y, size_t len, gt_err *e)
{
    if (len == 0)
        return 0;
    int vec4 = aligned_to(a, 16) && aligned_to(b, 16) && aligned_to(y, 16);
    add_kernel<<<gt_cuda_grid(vec4 ? len / 4 + 1 : len), GT_CUDA_THREADS, 0, c->stream>>>(
        a, b, y, len, vec4);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* dx = y > 0 ? dy : 0 (src/layers.c's ReLU backward: it reads the output and its gradient only,
 * where cuDNN's reads the input as well). */
__global__ static void relu_backward_kernel(const float *y, const float *dy, float *dx,
                                            size_t len, int vec4)
{
    size_t n4 = vec4 ? len / 4 : 0;
    GT_CUDA_GRID_STRIDE(i, n4)
    {
        float4 u = ((const float4 *)y)[i], g = ((const float4 *)dy)[i];
        ((float4 *)dx)[i] = make_float4(u.x > 0.0f ? g.x : 0.0f, u.y > 0.0f ? g.y : 0.0f,
                                        u.z > 0.0f ? g.z : 0.0f, u.w > 0.0f ? g.w : 0.0f);
    }
    GT_CUDA_GRID_STRIDE(j, len - 4 * n4)
    {
        size_t i = 4 * n4 + j;
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
}

int gt_cuda_relu_backward(gt_cuda_ctx *c, const float *y, const float *dy, float *dx, size_t len,
                          gt_err *e)
{
    if (len == 0)
        return 0;
    int vec4 = aligned_to(y, 16) && aligned_to(dy, 16) && aligned_to(dx, 16);
    relu_backward_kernel<<<gt_cuda_grid(vec4 ? len / 4 + 1 : len), GT_CUDA_THREADS, 0,
                           c->stream>>>(y, dy, dx, len, vec4);
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

/* ---- bf16 convolutions in channels-last (NHWC) ---------------------------------------------- */

/* Every 4-d array of the network stays NCHW in fp32; a bf16 convolution runs on NHWC copies
 * (cuDNN's Hopper tensor-core kernels take channels-last; on NCHW bf16 it took a kernel without
 * tensor cores). The copies are made and widened by one tiled transpose that also rounds,
 * widens or adds a bias, so the layout costs no pass of its own: out[b][q][p]
 * = f(in[b][p][q]) for b < B, p < P, q < Q. */
enum { T_TO_BF16, T_FROM_BF16, T_RELU_BF16 };
#define T_TILE 64 /* a block moves a 64 x 64 tile ... */
#define T_TX 32   /* ... with 32 x 8 threads, two neighbouring values each a row */
#define T_TY 8

template <int OP> struct t_types;
template <> struct t_types<T_TO_BF16> { typedef float In; typedef __nv_bfloat16 Out; };
template <> struct t_types<T_RELU_BF16> { typedef float In; typedef __nv_bfloat16 Out; };
template <> struct t_types<T_FROM_BF16> { typedef __nv_bfloat16 In; typedef float Out; };

__device__ static inline float t_load(const float *p) { return *p; }
__device__ static inline float t_load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ static inline void t_store(float *p, float v) { *p = v; }
__device__ static inline void t_store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
/* Two neighbours at once (pairs: the address is two values' aligned). */
__device__ static inline float2 t_load2(const float *p) { return *(const float2 *)p; }
__device__ static inline float2 t_load2(const __nv_bfloat16 *p)
{
    return __bfloat1622float2(*(const __nv_bfloat162 *)p);
}
__device__ static inline void t_store2(float *p, float2 v) { *(float2 *)p = v; }
__device__ static inline void t_store2(__nv_bfloat16 *p, float2 v)
{
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(v.x, v.y); /* each rounded as t_store */
}

/* T_FROM_BF16 adds bias[q] (NULL: none); T_RELU_BF16 also writes max(x, 0) in x's own layout into
 * same (NaN passed on, as cuDNN's ReLU). pairs: P and Q even and the
 * arrays aligned to two values, so that neighbours move as one access. */
template <int OP>
__global__ static void transpose_kernel(const typename t_types<OP>::In *in,
                                        typename t_types<OP>::Out *out, size_t B, int P, int Q,
                                        const float *bias, float *same, int pairs)
{
    __shared__ float tile[T_TILE][T_TILE + 1];
    int p0 = blockIdx.y * T_TILE, q0 = blockIdx.x * T_TILE, tx = threadIdx.x, ty = threadIdx.y;
    size_t plane = (size_t)P * Q;
    for (size_t b = blockIdx.z; b < B; b += gridDim.z) {
        const typename t_types<OP>::In *src = in + b * plane;
        for (int pl = ty; pl < T_TILE && p0 + pl < P; pl += T_TY) {
            int p = p0 + pl, ql = 2 * tx, q = q0 + ql;
            const typename t_types<OP>::In *row = src + (size_t)p * Q;
            bool h0 = q < Q, h1 = q + 1 < Q;
            float2 v = make_float2(0.0f, 0.0f);
            if (pairs && h1)
                v = t_load2(row + q);
            else {
                v.x = h0 ? t_load(row + q) : 0.0f;
                v.y = h1 ? t_load(row + q + 1) : 0.0f;
            }
            if constexpr (OP == T_RELU_BF16) {
                v.x = v.x > 0.0f || v.x != v.x ? v.x : 0.0f;
                v.y = v.y > 0.0f || v.y != v.y ? v.y : 0.0f;
                float *srow = same + b * plane + (size_t)p * Q;
                if (pairs && h1)
                    *(float2 *)(srow + q) = v;
                else {
                    if (h0)
                        srow[q] = v.x;
                    if (h1)
                        srow[q + 1] = v.y;
                }
            }
            tile[pl][ql] = v.x;
            tile[pl][ql + 1] = v.y;
        }
        __syncthreads();
        typename t_types<OP>::Out *dst = out + b * plane;
        for (int ql = ty; ql < T_TILE && q0 + ql < Q; ql += T_TY) {
            int q = q0 + ql, pl = 2 * tx, p = p0 + pl;
            typename t_types<OP>::Out *row = dst + (size_t)q * P;
            bool h0 = p < P, h1 = p + 1 < P;
            float2 v = make_float2(tile[pl][ql], tile[pl + 1][ql]);
            if constexpr (OP == T_FROM_BF16)
                if (bias) {
                    v.x += bias[q];
                    v.y += bias[q];
                }
            if (pairs && h1)
                t_store2(row + p, v);
            else {
                if (h0)
                    t_store(row + p, v.x);
                if (h1)
                    t_store(row + p + 1, v.y);
            }
        }
        __syncthreads();
    }
}

template <int OP>
static int transpose(gt_cuda_ctx *c, const void *in, void *out, size_t B, size_t P, size_t Q,
                     const float *bias, float *same, gt_err *e)
{
    typedef typename t_types<OP>::In In;
    typedef typename t_types<OP>::Out Out;
    if (B == 0 || P == 0 || Q == 0)
        return 0;
    if (P > (size_t)65535 * T_TILE || P > (size_t)INT_MAX || Q > (size_t)INT_MAX)
        return gt_fail(e, "%s: a channels-last copy of %zu x %zu values is too large", c->name, P,
                       Q);
    int pairs = P % 2 == 0 && Q % 2 == 0 && aligned_to(in, 2 * sizeof(In)) &&
                aligned_to(out, 2 * sizeof(Out)) && (!same || aligned_to(same, 2 * sizeof(float)));
    dim3 grid((unsigned)((Q + T_TILE - 1) / T_TILE), (unsigned)((P + T_TILE - 1) / T_TILE),
              (unsigned)(B < 65535 ? B : 65535));
    transpose_kernel<OP><<<grid, dim3(T_TX, T_TY), 0, c->stream>>>(
        (const In *)in, (Out *)out, B, (int)P, (int)Q, bias, same, pairs);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

int gt_cuda_to_nhwc_bf16(gt_cuda_ctx *c, const float *src, void *dst, size_t n, int ch,
                         size_t plane, gt_err *e)
{
    return transpose<T_TO_BF16>(c, src, dst, n, (size_t)ch, plane, NULL, NULL, e);
}

int gt_cuda_from_nhwc_bf16(gt_cuda_ctx *c, const void *src, float *dst, size_t n, int ch,
                           size_t plane, const float *bias, gt_err *e)
{
    return transpose<T_FROM_BF16>(c, src, dst, n, plane, (size_t)ch, bias, NULL, e);
}

int gt_cuda_relu_bf16(gt_cuda_ctx *c, const float *x, float *y, void *y_half, size_t n, int ch,
                      size_t plane, gt_err *e)
{
    return transpose<T_RELU_BF16>(c, x, y_half, n, (size_t)ch, plane, NULL, y, e);
}

/* Filters are small (resnet18's 20 hold 11 M values in all) and their r x s side is short (9),
 * which leaves most of a 64 x 64 tile idle: a thread a value instead, the fp32 side in order. */
/* ADD 0: dst (k, r s, c) bf16 = src (k, c, r s) fp32; 1: dst (k, c, r s) fp32 += src (k, r s, c)
 * bf16. */
template <int ADD>
__global__ static void filter_krsc_kernel(const void *src, void *dst, size_t len, unsigned ch,
                                          unsigned rs)
{
    GT_CUDA_GRID_STRIDE(i, len) /* i walks (k, c, r s), the fp32 side */
    {
        unsigned q = (unsigned)(i % rs), p = (unsigned)(i / rs % ch);
        size_t t = (i / ((size_t)rs * ch) * rs + q) * ch + p;
        if constexpr (ADD)
            ((float *)dst)[i] += __bfloat162float(((const __nv_bfloat16 *)src)[t]);
        else
            ((__nv_bfloat16 *)dst)[t] = __float2bfloat16_rn(((const float *)src)[i]);
    }
}

template <int ADD>
static int filter_krsc(gt_cuda_ctx *c, const void *src, void *dst, int k, int ch, int rs,
                       gt_err *e)
{
    size_t len = (size_t)k * ch * rs;
    if (len == 0)
        return 0;
    filter_krsc_kernel<ADD><<<gt_cuda_grid(len), GT_CUDA_THREADS, 0, c->stream>>>(
        src, dst, len, (unsigned)ch, (unsigned)rs);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

int gt_cuda_filter_to_krsc_bf16(gt_cuda_ctx *c, const float *w, void *dst, int k, int ch,
                                int rs, gt_err *e)
{
    return filter_krsc<0>(c, w, dst, k, ch, rs, e);
}

int gt_cuda_filter_add_krsc_bf16(gt_cuda_ctx *c, const void *src, float *dw, int k, int ch,
                                 int rs, gt_err *e)
{
    return filter_krsc<1>(c, src, dw, k, ch, rs, e);
}

/* Each element's index t in the copy: as it is, or its place in the (k, r, s, c) layout. */
__device__ static inline size_t half_task_dst(const gt_cuda_half_task &T, unsigned i)
{
    if (!T.krsc)
        return i;
    unsigned q = i % T.rs, p = i / T.rs % T.ch;
    return ((size_t)(i / (T.rs * T.ch)) * T.rs + q) * T.ch + p;
}

__global__ static void weights_bf16_kernel(const float *params, __nv_bfloat16 *half,
                                           const gt_cuda_half_task *tasks)
{
    const gt_cuda_half_task T = tasks[blockIdx.x];
    const float *src = params + T.off;
    __nv_bfloat16 *dst = half + T.off;
    for (unsigned i = T.lo + threadIdx.x; i < T.hi; i += blockDim.x)
        dst[half_task_dst(T, i)] = __float2bfloat16_rn(src[i]);
}

int gt_cuda_weights_to_bf16(gt_cuda_ctx *c, const float *params, void *half,
                            const gt_cuda_half_task *tasks, int ntasks, gt_err *e)
{
    if (ntasks == 0)
        return 0;
    weights_bf16_kernel<<<(unsigned)ntasks, GT_CUDA_THREADS, 0, c->stream>>>(
        params, (__nv_bfloat16 *)half, tasks);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* ---- batch normalisation in training (NCHW fp32) --------------------------------------------- */

/* cuDNN's NCHW kernels took about 3x (forward) and 5x (backward) the time their bytes need at
 * memory bandwidth on resnet18's largest layers (an H200, measured with ncu), so training runs
 * these: per channel, blocks of split samples write partial sums ([ch][split][2]), one
 * thread a channel adds them in double in a fixed order (deterministic, like the CPU's double
 * sums) and derives per-channel coefficients, then an element-wise pass applies them. Forward
 * reads x twice and writes y once; backward reads x and dy twice and writes dx once. Sums are
 * shifted by the channel's first value (sample 0, position 0), so that the squares do not
 * cancel where the mean is far from 0. */
#define BN_THREADS 256

__device__ static void bn_block_sum2(float &a, float &b)
{
    __shared__ float sa[BN_THREADS], sb[BN_THREADS];
    sa[threadIdx.x] = a;
    sb[threadIdx.x] = b;
    __syncthreads();
    for (int w = BN_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            sa[threadIdx.x] += sa[threadIdx.x + w];
            sb[threadIdx.x] += sb[threadIdx.x + w];
        }
        __syncthreads();
    }
    a = sa[0];
    b = sb[0];
}

/* Block (c, s): samples [n s / S, n (s + 1) / S) of channel c. Forward (dy NULL): sums of d and
 * d^2, d = x - x[channel start]. Backward: sums of dy and dy * (x - mean) * invstd. vec4: the
 * plane holds a multiple of 4 values and the arrays are 16-byte aligned (4 values a load). */
__device__ static inline void bn_acc(float xv, float g, int backward, float shift, float invstd,
                                     float &a, float &b)
{
    float d = xv - shift;
    if (backward) {
        a += g;
        b += g * d * invstd;
    } else {
        a += d;
        b += d * d;
    }
}

__global__ static void bn_partial_kernel(const float *x, const float *dy, const float *save,
                                         unsigned n, unsigned ch, unsigned plane, float *part,
                                         int vec4)
{
    unsigned c = blockIdx.x, s = blockIdx.y, S = gridDim.y;
    unsigned n0 = (unsigned)((unsigned long long)n * s / S);
    unsigned n1 = (unsigned)((unsigned long long)n * (s + 1) / S);
    unsigned cnt = (n1 - n0) * plane;
    int backward = dy != NULL;
    float shift = backward ? save[c] : x[(size_t)c * plane], invstd = backward ? save[ch + c] : 1.0f;
    float a = 0.0f, b = 0.0f;
    if (vec4) {
        for (unsigned j = 4 * threadIdx.x; j < cnt; j += 4 * BN_THREADS) {
            unsigned i = j / plane, k = j - i * plane;
            size_t at = ((size_t)(n0 + i) * ch + c) * plane + k;
            float4 xv = *(const float4 *)(x + at), g = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (backward)
                g = *(const float4 *)(dy + at);
            bn_acc(xv.x, g.x, backward, shift, invstd, a, b);
            bn_acc(xv.y, g.y, backward, shift, invstd, a, b);
            bn_acc(xv.z, g.z, backward, shift, invstd, a, b);
            bn_acc(xv.w, g.w, backward, shift, invstd, a, b);
        }
    } else {
        for (unsigned j = threadIdx.x; j < cnt; j += BN_THREADS) {
            unsigned i = j / plane, k = j - i * plane;
            size_t at = ((size_t)(n0 + i) * ch + c) * plane + k;
            bn_acc(x[at], backward ? dy[at] : 0.0f, backward, shift, invstd, a, b);
        }
    }
    bn_block_sum2(a, b);
    if (threadIdx.x == 0) {
        part[((size_t)c * S + s) * 2] = a;
        part[((size_t)c * S + s) * 2 + 1] = b;
    }
}

/* This warp's channel c (a warp a channel) and its two sums over its S blocks' partials in
 * double: lane j adds blocks j, j + 32, ... in order, then the lanes fold in a fixed tree
 * (deterministic); true in lane 0 of a warp of a channel. Launched with bn_finish_blocks(ch)
 * blocks of 128 threads. */
__device__ static bool bn_part_sums(const float *part, unsigned S, unsigned ch, unsigned &c,
                                    double &a, double &b)
{
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x, lane = t % 32;
    c = t / 32; /* the same in every lane of a warp */
    a = 0;
    b = 0;
    if (c < ch)
        for (unsigned s = lane; s < S; s += 32) {
            a += part[((size_t)c * S + s) * 2];
            b += part[((size_t)c * S + s) * 2 + 1];
        }
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    return c < ch && lane == 0;
}

static unsigned bn_finish_blocks(int ch) { return (unsigned)(((size_t)ch * 32 + 127) / 128); }

/* Forward: the batch's mean and inverse std into save (cuDNN's saveMean and saveInvVariance,
 * what backward reads), the running statistics moved by factor (1: replaced; the unbiased
 * variance, as cuDNN and PyTorch), and y's coefficients (mean, gamma * invstd) into coef. */
template <typename T>
__global__ static void bn_forward_finish_kernel(const T *x, size_t stride, const float *part,
                                                unsigned S, unsigned ch, double m,
                                                const float *gamma, double factor, float *rmean,
                                                float *rvar, float *count, float *save, float *coef)
{
    unsigned c;
    double s1, s2;
    if (!bn_part_sums(part, S, ch, c, s1, s2))
        return;
    if (c == 0 && count) /* the batches the running statistics hold: this one, or one more */
        *count = factor == 1 ? 1.0f : *count + 1.0f;
    double d = s1 / m, mean = (double)t_load(x + (size_t)c * stride) + d, var = s2 / m - d * d;
    var = var > 0 ? var : 0;
    double unbiased = m > 1 ? var * m / (m - 1) : var;
    double invstd = 1.0 / sqrt(var + GT_BN_EPS);
    save[c] = (float)mean;
    save[ch + c] = (float)invstd;
    rmean[c] = factor == 1 ? (float)mean : (float)((1 - factor) * rmean[c] + factor * mean);
    rvar[c] = factor == 1 ? (float)unbiased : (float)((1 - factor) * rvar[c] + factor * unbiased);
    coef[c] = (float)mean;
    coef[ch + c] = gamma[c] * (float)invstd;
}

/* y = (x - mean) * (gamma * invstd) + beta, the CPU's order; 4 values a thread with vec4 (they
 * share a channel: the plane holds a multiple of 4). */
__global__ static void bn_apply_kernel(const float *x, float *y, unsigned total, unsigned ch,
                                       unsigned plane, const float *coef, const float *beta,
                                       int vec4)
{
    unsigned step = blockDim.x * gridDim.x;
    if (vec4) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total / 4; i += step) {
            unsigned c = 4 * i / plane % ch;
            float m = coef[c], k = coef[ch + c], bb = beta[c];
            float4 v = ((const float4 *)x)[i];
            v.x = (v.x - m) * k + bb;
            v.y = (v.y - m) * k + bb;
            v.z = (v.z - m) * k + bb;
            v.w = (v.w - m) * k + bb;
            ((float4 *)y)[i] = v;
        }
        return;
    }
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        unsigned c = i / plane % ch;
        y[i] = (x[i] - coef[c]) * coef[ch + c] + beta[c];
    }
}

/* Backward: dgamma += sum(dy xhat), dbeta += sum(dy), and dx's coefficients:
 * dx = k dy - k invstd sum(dy xhat) / m (x - mean) - k sum(dy) / m, k = gamma invstd. */
__global__ static void bn_backward_finish_kernel(const float *part, unsigned S, unsigned ch,
                                                 double m, const float *gamma, const float *save,
                                                 float *dgamma, float *dbeta, float *coef)
{
    unsigned c;
    double sum_dy, sum_dy_xhat;
    if (!bn_part_sums(part, S, ch, c, sum_dy, sum_dy_xhat))
        return;
    dgamma[c] += (float)sum_dy_xhat;
    dbeta[c] += (float)sum_dy;
    double k = (double)gamma[c] * save[ch + c];
    coef[c] = (float)k;
    coef[ch + c] = (float)(k * save[ch + c] * sum_dy_xhat / m);
    coef[2 * ch + c] = (float)(k * sum_dy / m);
}

__global__ static void bn_backward_apply_kernel(const float *x, const float *dy, float *dx,
                                                unsigned total, unsigned ch, unsigned plane,
                                                const float *save, const float *coef, int vec4)
{
    unsigned step = blockDim.x * gridDim.x;
    if (vec4) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total / 4; i += step) {
            unsigned c = 4 * i / plane % ch;
            float a = coef[c], k = coef[ch + c], m = save[c], d = coef[2 * ch + c];
            float4 xv = ((const float4 *)x)[i], g = ((const float4 *)dy)[i], r;
            r.x = a * g.x - k * (xv.x - m) - d;
            r.y = a * g.y - k * (xv.y - m) - d;
            r.z = a * g.z - k * (xv.z - m) - d;
            r.w = a * g.w - k * (xv.w - m) - d;
            ((float4 *)dx)[i] = r;
        }
        return;
    }
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        unsigned c = i / plane % ch;
        dx[i] = coef[c] * dy[i] - coef[ch + c] * (x[i] - save[c]) - coef[2 * ch + c];
    }
}

/* Blocks a channel's sum is split over: about four blocks a multiprocessor in all. */
static int bn_splits_max(const gt_cuda_ctx *c, int ch)
{
    int want = (4 * (c->sms > 0 ? c->sms : 132) + ch - 1) / ch;
    return want < 1 ? 1 : want;
}

static int bn_splits(const gt_cuda_ctx *c, int n, int ch)
{
    int want = bn_splits_max(c, ch);
    return want > n ? n : want;
}

/* The channels-last kernels' splits of the rows (below). */
#define BN_NHWC_SPLITS_MAX 512

size_t gt_cuda_bn_scratch_len(const gt_cuda_ctx *c, int ch)
{
    size_t splits = (size_t)bn_splits_max(c, ch);
    splits = splits > BN_NHWC_SPLITS_MAX ? splits : BN_NHWC_SPLITS_MAX;
    return 3 * (size_t)ch + 2 * (size_t)ch * splits;
}

static int bn_shape_ok(gt_cuda_ctx *c, int n, int ch, size_t plane, gt_err *e)
{
    if (n < 1 || ch < 1 || plane < 1 ||
        (unsigned long long)n * (unsigned long long)ch * plane >= UINT_MAX)
        return gt_fail(e, "%s: batch norm over %d samples of %d channels of %zu values is out "
                          "of range",
                       c->name, n, ch, plane);
    return 0;
}

int gt_cuda_bn_forward_train(gt_cuda_ctx *c, const float *x, float *y, int n, int ch,
                             size_t plane, const float *gamma, const float *beta, double factor,
                             float *rmean, float *rvar, float *count, float *save, float *scratch,
                             gt_err *e)
{
    if (bn_shape_ok(c, n, ch, plane, e))
        return -1;
    int S = bn_splits(c, n, ch);
    float *coef = scratch, *part = scratch + 3 * (size_t)ch;
    int vec4 = plane % 4 == 0 && aligned_to(x, 16) && aligned_to(y, 16);
    bn_partial_kernel<<<dim3((unsigned)ch, (unsigned)S), BN_THREADS, 0, c->stream>>>(
        x, NULL, NULL, (unsigned)n, (unsigned)ch, (unsigned)plane, part, vec4);
    GT_CUDA_LAUNCHED(c->name, e);
    bn_forward_finish_kernel<float><<<bn_finish_blocks(ch), 128, 0, c->stream>>>(
        x, plane, part, (unsigned)S, (unsigned)ch, (double)n * (double)plane, gamma, factor,
        rmean, rvar, count, save, coef);
    GT_CUDA_LAUNCHED(c->name, e);
    unsigned total = (unsigned)((size_t)n * ch * plane);
    bn_apply_kernel<<<gt_cuda_grid(vec4 ? total / 4 : total), GT_CUDA_THREADS, 0, c->stream>>>(
        x, y, total, (unsigned)ch, (unsigned)plane, coef, beta, vec4);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

int gt_cuda_bn_backward(gt_cuda_ctx *c, const float *x, const float *dy, float *dx, int n,
                        int ch, size_t plane, const float *gamma, const float *save,
                        float *dgamma, float *dbeta, float *scratch, gt_err *e)
{
    if (bn_shape_ok(c, n, ch, plane, e))
        return -1;
    int S = bn_splits(c, n, ch);
    float *coef = scratch, *part = scratch + 3 * (size_t)ch;
    int vec4 = plane % 4 == 0 && aligned_to(x, 16) && aligned_to(dy, 16) && aligned_to(dx, 16);
    bn_partial_kernel<<<dim3((unsigned)ch, (unsigned)S), BN_THREADS, 0, c->stream>>>(
        x, dy, save, (unsigned)n, (unsigned)ch, (unsigned)plane, part, vec4);
    GT_CUDA_LAUNCHED(c->name, e);
    bn_backward_finish_kernel<<<bn_finish_blocks(ch), 128, 0, c->stream>>>(
        part, (unsigned)S, (unsigned)ch, (double)n * (double)plane, gamma, save, dgamma, dbeta,
        coef);
    GT_CUDA_LAUNCHED(c->name, e);
    unsigned total = (unsigned)((size_t)n * ch * plane);
    bn_backward_apply_kernel<<<gt_cuda_grid(vec4 ? total / 4 : total), GT_CUDA_THREADS, 0,
                               c->stream>>>(x, dy, dx, total, (unsigned)ch, (unsigned)plane, save,
                                            coef, vec4);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* ---- bf16 channels-last activations end to end ---------------------------------------------- */

/* Where a residual network's activations between its stem and its global average pool are bf16
 * NHWC arrays (device_cuda.cu's channels-last path), these run its layers on them: values are
 * widened to fp32 for the arithmetic and rounded to bf16 (nearest even) once on the way out;
 * statistics and sums stay fp32 or double as in the NCHW kernels above. Arrays are n x plane x
 * ch, ch the fastest; element-wise kernels move eight values (16 bytes) a load where the arrays
 * are 16-byte aligned. */
typedef __nv_bfloat16 bf16;

__device__ static inline void bf8_load(const bf16 *p, float v[8])
{
    uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 f = __bfloat1622float2(h[k]);
        v[2 * k] = f.x;
        v[2 * k + 1] = f.y;
    }
}

__device__ static inline void bf8_store(bf16 *p, const float v[8])
{
    uint4 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++)
        h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *(uint4 *)p = u;
}

enum { EW_RELU, EW_RELU_BACKWARD, EW_ADD };

/* EW_RELU: max(a, 0), NaN passed on (cuDNN's ReLU); EW_RELU_BACKWARD: a the output, b its
 * gradient; EW_ADD: a + b. */
template <int OP> __device__ static inline float ew_op(float a, float b)
{
    if constexpr (OP == EW_RELU)
        return a > 0.0f || a != a ? a : 0.0f;
    else if constexpr (OP == EW_RELU_BACKWARD)
        return a > 0.0f ? b : 0.0f;
    else
        return a + b;
}

template <int OP>
__global__ static void ew_bf16_kernel(const bf16 *a, const bf16 *b, bf16 *y, size_t len, int vec8)
{
    size_t n8 = vec8 ? len / 8 : 0;
    GT_CUDA_GRID_STRIDE(i, n8)
    {
        float u[8], v[8] = {0};
        bf8_load(a + 8 * i, u);
        if constexpr (OP != EW_RELU)
            bf8_load(b + 8 * i, v);
#pragma unroll
        for (int k = 0; k < 8; k++)
            u[k] = ew_op<OP>(u[k], v[k]);
        bf8_store(y + 8 * i, u);
    }
    GT_CUDA_GRID_STRIDE(j, len - 8 * n8)
    {
        size_t i = 8 * n8 + j;
        float v = OP != EW_RELU ? __bfloat162float(b[i]) : 0.0f;
        y[i] = __float2bfloat16_rn(ew_op<OP>(__bfloat162float(a[i]), v));
    }
}

template <int OP>
static int ew_bf16(gt_cuda_ctx *c, const void *a, const void *b, void *y, size_t len, gt_err *e)
{
    if (len == 0)
        return 0;
    int vec8 = aligned_to(a, 16) && aligned_to(y, 16) && (!b || aligned_to(b, 16));
    ew_bf16_kernel<OP><<<gt_cuda_grid(vec8 ? len / 8 + 1 : len), GT_CUDA_THREADS, 0, c->stream>>>(
        (const bf16 *)a, (const bf16 *)b, (bf16 *)y, len, vec8);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

int gt_cuda_relu_nhwc(gt_cuda_ctx *c, const void *x, void *y, size_t len, gt_err *e)
{
    return ew_bf16<EW_RELU>(c, x, NULL, y, len, e);
}

int gt_cuda_relu_backward_nhwc(gt_cuda_ctx *c, const void *y, const void *dy, void *dx,
                               size_t len, gt_err *e)
{
    return ew_bf16<EW_RELU_BACKWARD>(c, y, dy, dx, len, e);
}

int gt_cuda_add_nhwc(gt_cuda_ctx *c, const void *a, const void *b, void *y, size_t len, gt_err *e)
{
    return ew_bf16<EW_ADD>(c, a, b, y, len, e);
}

/* A thread a (sample, channel): its plane summed in order, as gap_forward_kernel's. */
__global__ static void gap_forward_nhwc_kernel(const bf16 *x, float *y, size_t rows, unsigned ch,
                                               size_t plane, float inv)
{
    GT_CUDA_GRID_STRIDE(i, rows)
    {
        const bf16 *p = x + (i / ch) * plane * ch + i % ch;
        float s = 0.0f;
        for (size_t j = 0; j < plane; j++)
            s += __bfloat162float(p[j * ch]);
        y[i] = s * inv;
    }
}

int gt_cuda_gap_forward_nhwc(gt_cuda_ctx *c, const void *x, float *y, size_t n, int ch,
                             size_t plane, gt_err *e)
{
    size_t rows = n * (size_t)ch;
    if (rows == 0 || plane == 0)
        return 0;
    gap_forward_nhwc_kernel<<<gt_cuda_grid(rows), GT_CUDA_THREADS, 0, c->stream>>>(
        (const bf16 *)x, y, rows, (unsigned)ch, plane, 1.0f / (float)plane);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void gap_backward_nhwc_kernel(const float *dy, bf16 *dx, size_t total,
                                                unsigned ch, size_t plane, float inv)
{
    GT_CUDA_GRID_STRIDE(i, total)
    dx[i] = __float2bfloat16_rn(dy[i / ((size_t)ch * plane) * ch + i % ch] * inv);
}

int gt_cuda_gap_backward_nhwc(gt_cuda_ctx *c, const float *dy, void *dx, size_t n, int ch,
                              size_t plane, gt_err *e)
{
    size_t total = n * (size_t)ch * plane;
    if (total == 0)
        return 0;
    gap_backward_nhwc_kernel<<<gt_cuda_grid(total), GT_CUDA_THREADS, 0, c->stream>>>(
        dy, (bf16 *)dx, total, (unsigned)ch, plane, 1.0f / (float)plane);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* Batch norm on channels-last bf16 (ch a multiple of 8, arrays 16-byte aligned): block (g, s)
 * sums rows [rows s / S, rows (s + 1) / S) of channel octets [g P, g P + P), P = min(ch / 8,
 * BN_THREADS): thread t takes octet t % P (eight channels, one 16-byte load a row) in every R-th
 * row from t / P, R = BN_THREADS / P, so that a warp reads contiguous bytes and every thread has
 * a wide load in flight. The R lanes of a channel are then added in order, and the partials go
 * where bn_partial_kernel's go ([ch][S][2]), for the same finish kernels: the same sums in
 * another order. */
__global__ static void bn_partial_nhwc_kernel(const bf16 *x, const bf16 *dy, const float *save,
                                              unsigned rows, unsigned ch, float *part)
{
    __shared__ float sm[16][BN_THREADS];
    unsigned octs = ch / 8, P = octs < BN_THREADS ? octs : BN_THREADS, R = BN_THREADS / P;
    unsigned t = threadIdx.x, lane = t % P, r0 = t / P, oct = blockIdx.x * P + lane;
    unsigned s = blockIdx.y, S = gridDim.y;
    unsigned row0 = (unsigned)((unsigned long long)rows * s / S);
    unsigned row1 = (unsigned)((unsigned long long)rows * (s + 1) / S);
    int backward = dy != NULL, on = r0 < R && oct < octs;
    unsigned c = 8 * oct;
    float a[8] = {0}, b[8] = {0};
    if (on) {
        float sh[8], is[8];
        if (backward)
            for (int k = 0; k < 8; k++) {
                sh[k] = save[c + k];
                is[k] = save[ch + c + k];
            }
        else {
            bf8_load(x + c, sh);
            for (int k = 0; k < 8; k++)
                is[k] = 1.0f;
        }
#pragma unroll 4
        for (unsigned r = row0 + r0; r < row1; r += R) {
            size_t at = (size_t)r * ch + c;
            float xv[8], g[8] = {0};
            bf8_load(x + at, xv);
            if (backward)
                bf8_load(dy + at, g);
#pragma unroll
            for (int k = 0; k < 8; k++)
                bn_acc(xv[k], g[k], backward, sh[k], is[k], a[k], b[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        sm[k][t] = a[k];
        sm[8 + k][t] = b[k];
    }
    __syncthreads();
    for (unsigned q = t; q < 8 * P; q += BN_THREADS) { /* channel 8 (g P + q / 8) + q % 8 */
        unsigned ql = q / 8, k = q % 8, qc = 8 * (blockIdx.x * P + ql) + k;
        if (qc >= ch)
            continue;
        float A = 0.0f, B = 0.0f;
        for (unsigned r = 0; r < R; r++) {
            A += sm[k][r * P + ql];
            B += sm[8 + k][r * P + ql];
        }
        part[((size_t)qc * S + s) * 2] = A;
        part[((size_t)qc * S + s) * 2 + 1] = B;
    }
}

/* Inference: coef = (running mean, gamma * invstd) as bn_forward_finish_kernel's, invstd from
 * the running variance (src/layers.c's gt_batchnorm_forward_eval). */
__global__ static void bn_infer_coef_kernel(unsigned ch, const float *gamma, const float *rmean,
                                            const float *rvar, float *coef)
{
    unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch)
        return;
    coef[c] = rmean[c];
    coef[ch + c] = gamma[c] * (float)(1.0 / sqrt((double)rvar[c] + GT_BN_EPS));
}

/* y = (x - mean) * k + beta a channel (bn_apply_kernel's order), then max(y, 0) with relu. vec8:
 * ch a multiple of 8 and the arrays 16-byte aligned (eight channels of one row a thread). */
__global__ static void bn_apply_nhwc_kernel(const bf16 *x, bf16 *y, size_t total, unsigned ch,
                                            const float *coef, const float *beta, int relu,
                                            int vec8)
{
    if (vec8) {
        GT_CUDA_GRID_STRIDE(i, total / 8)
        {
            unsigned c0 = (unsigned)(8 * i % ch);
            float v[8];
            bf8_load(x + 8 * i, v);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                v[k] = (v[k] - coef[c0 + k]) * coef[ch + c0 + k] + beta[c0 + k];
                v[k] = relu ? ew_op<EW_RELU>(v[k], 0.0f) : v[k];
            }
            bf8_store(y + 8 * i, v);
        }
        return;
    }
    GT_CUDA_GRID_STRIDE(i, total)
    {
        unsigned c = (unsigned)(i % ch);
        float v = (__bfloat162float(x[i]) - coef[c]) * coef[ch + c] + beta[c];
        y[i] = __float2bfloat16_rn(relu ? ew_op<EW_RELU>(v, 0.0f) : v);
    }
}

/* dx = a dy - k (x - mean) - d a channel, bn_backward_apply_kernel's coefficients. */
__global__ static void bn_backward_apply_nhwc_kernel(const bf16 *x, const bf16 *dy, bf16 *dx,
                                                     size_t total, unsigned ch,
                                                     const float *save, const float *coef,
                                                     int vec8)
{
    if (vec8) {
        GT_CUDA_GRID_STRIDE(i, total / 8)
        {
            unsigned c0 = (unsigned)(8 * i % ch);
            float xv[8], g[8];
            bf8_load(x + 8 * i, xv);
            bf8_load(dy + 8 * i, g);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                unsigned c = c0 + k;
                xv[k] = coef[c] * g[k] - coef[ch + c] * (xv[k] - save[c]) - coef[2 * ch + c];
            }
            bf8_store(dx + 8 * i, xv);
        }
        return;
    }
    GT_CUDA_GRID_STRIDE(i, total)
    {
        unsigned c = (unsigned)(i % ch);
        float v = coef[c] * __bfloat162float(dy[i]) -
                  coef[ch + c] * (__bfloat162float(x[i]) - save[c]) - coef[2 * ch + c];
        dx[i] = __float2bfloat16_rn(v);
    }
}

/* The channels-last partial kernel's grid: octet groups by splits of the rows, about eight
 * blocks a multiprocessor, each thread at least 8 rows (on the small layers fewer splits: the
 * partials' own traffic and the finish's work stay small beside the array's). */
#define BN_NHWC_ROWS_MIN 8
static dim3 bn_nhwc_grid(const gt_cuda_ctx *c, size_t rows, int ch)
{
    unsigned octs = (unsigned)ch / 8, P = octs < BN_THREADS ? octs : BN_THREADS;
    unsigned groups = (octs + P - 1) / P, R = BN_THREADS / P;
    size_t S = (size_t)(8 * (c->sms > 0 ? c->sms : 132)) / groups,
           most = rows / ((size_t)R * BN_NHWC_ROWS_MIN);
    S = S > BN_NHWC_SPLITS_MAX ? BN_NHWC_SPLITS_MAX : S;
    S = S > most ? most : S;
    return dim3(groups, (unsigned)(S < 1 ? 1 : S));
}

static int bn_nhwc_vec8(int ch, const void *a, const void *b, const void *y)
{
    return ch % 8 == 0 && aligned_to(a, 16) && (!b || aligned_to(b, 16)) && aligned_to(y, 16);
}

static int bn_nhwc_shape_ok(gt_cuda_ctx *c, int n, int ch, size_t plane, const void *x,
                            const void *dy, gt_err *e)
{
    if (bn_shape_ok(c, n, ch, plane, e))
        return -1;
    if (ch % 8 || !aligned_to(x, 16) || (dy && !aligned_to(dy, 16)))
        return gt_fail(e, "%s: channels-last batch norm over %d channels (a multiple of 8 only, "
                          "16-byte aligned)",
                       c->name, ch);
    return 0;
}

/* y from x by coef (mean, gamma * invstd) and beta, training's and inference's alike. */
static int bn_apply_nhwc(gt_cuda_ctx *c, const void *x, void *y, size_t total, int ch,
                         const float *coef, const float *beta, int relu, gt_err *e)
{
    int vec8 = bn_nhwc_vec8(ch, x, NULL, y);
    bn_apply_nhwc_kernel<<<gt_cuda_grid(vec8 ? total / 8 : total), GT_CUDA_THREADS, 0,
                           c->stream>>>((const bf16 *)x, (bf16 *)y, total, (unsigned)ch, coef,
                                        beta, relu, vec8);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

int gt_cuda_bn_forward_train_nhwc(gt_cuda_ctx *c, const void *x, void *y, int n, int ch,
                                  size_t plane, const float *gamma, const float *beta,
                                  double factor, float *rmean, float *rvar, float *count,
                                  float *save, float *scratch, int relu, gt_err *e)
{
    if (bn_nhwc_shape_ok(c, n, ch, plane, x, NULL, e))
        return -1;
    size_t rows = (size_t)n * plane, total = rows * (size_t)ch;
    dim3 grid = bn_nhwc_grid(c, rows, ch);
    float *coef = scratch, *part = scratch + 3 * (size_t)ch;
    bn_partial_nhwc_kernel<<<grid, BN_THREADS, 0, c->stream>>>((const bf16 *)x, NULL, NULL,
                                                              (unsigned)rows, (unsigned)ch, part);
    GT_CUDA_LAUNCHED(c->name, e);
    bn_forward_finish_kernel<bf16><<<bn_finish_blocks(ch), 128, 0, c->stream>>>(
        (const bf16 *)x, 1, part, grid.y, (unsigned)ch, (double)rows, gamma, factor, rmean, rvar,
        count, save, coef);
    GT_CUDA_LAUNCHED(c->name, e);
    return bn_apply_nhwc(c, x, y, total, ch, coef, beta, relu, e);
}

int gt_cuda_bn_forward_infer_nhwc(gt_cuda_ctx *c, const void *x, void *y, int n, int ch,
                                  size_t plane, const float *gamma, const float *beta,
                                  const float *rmean, const float *rvar, float *scratch, int relu,
                                  gt_err *e)
{
    if (bn_nhwc_shape_ok(c, n, ch, plane, x, NULL, e))
        return -1;
    size_t total = (size_t)n * plane * (size_t)ch;
    bn_infer_coef_kernel<<<(ch + 127) / 128, 128, 0, c->stream>>>((unsigned)ch, gamma, rmean,
                                                                  rvar, scratch);
    GT_CUDA_LAUNCHED(c->name, e);
    return bn_apply_nhwc(c, x, y, total, ch, scratch, beta, relu, e);
}

int gt_cuda_bn_backward_nhwc(gt_cuda_ctx *c, const void *x, const void *dy, void *dx, int n,
                             int ch, size_t plane, const float *gamma, const float *save,
                             float *dgamma, float *dbeta, float *scratch, gt_err *e)
{
    if (bn_nhwc_shape_ok(c, n, ch, plane, x, dy, e))
        return -1;
    size_t rows = (size_t)n * plane, total = rows * (size_t)ch;
    dim3 grid = bn_nhwc_grid(c, rows, ch);
    float *coef = scratch, *part = scratch + 3 * (size_t)ch;
    bn_partial_nhwc_kernel<<<grid, BN_THREADS, 0, c->stream>>>(
        (const bf16 *)x, (const bf16 *)dy, save, (unsigned)rows, (unsigned)ch, part);
    GT_CUDA_LAUNCHED(c->name, e);
    bn_backward_finish_kernel<<<bn_finish_blocks(ch), 128, 0, c->stream>>>(
        part, grid.y, (unsigned)ch, (double)rows, gamma, save, dgamma, dbeta, coef);
    GT_CUDA_LAUNCHED(c->name, e);
    int vec8 = bn_nhwc_vec8(ch, x, dy, dx);
    bn_backward_apply_nhwc_kernel<<<gt_cuda_grid(vec8 ? total / 8 : total), GT_CUDA_THREADS, 0,
                                    c->stream>>>((const bf16 *)x, (const bf16 *)dy, (bf16 *)dx,
                                                 total, (unsigned)ch, save, coef, vec8);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}
