/* kernels.cu - the small GPU ops cuDNN and cuBLAS do not cover: the uint8 input step, linear
 * bias add and bias gradient, a convolution's bias gradient (cuDNN's took 120 us for cnn-wide's
 * first layer at batch 128), dropout, and softmax cross-entropy with its gradient.
 *
 * Each mirrors its CPU twin in src/layers.c operation for operation where that is cheap (the
 * same float expressions for dropout and normalisation, so they match bit for bit; double
 * log-sum-exp for the loss), and each launcher checks the launch. */
#include "gt_cuda.h"

#include "gputrain/counter_rng.h"

#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The loss kernel's block, and the most classes for which a thread takes a whole row. */
enum { BLOCK = GT_CUDA_THREADS, XENT_THREADS = 1024, XENT_THREAD_ROW_MAX = 64 };

__global__ static void normalize_kernel(const uint8_t *src, float *dst, size_t len)
{
    GT_CUDA_GRID_STRIDE(i, len)
    dst[i] = (float)src[i] / 255.0f;
}

int gt_cuda_normalize(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len, gt_err *e)
{
    if (len == 0)
        return 0;
    normalize_kernel<<<gt_cuda_grid(len), BLOCK, 0, c->stream>>>(src, dst, len);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* The per-channel constants, passed by value (a graph keeps them with the launch). */
typedef struct input_norm_args {
    float mean[GT_NORM_MAX_C], std[GT_NORM_MAX_C];
    unsigned plane, channels; /* pixels in a channel plane; channels of a sample */
} input_norm_args;

__global__ static void input_norm_kernel(const uint8_t *src, float *dst, size_t len,
                                         input_norm_args a)
{
    GT_CUDA_GRID_STRIDE(i, len)
    {
        unsigned ch = (unsigned)(i / a.plane % a.channels);
        dst[i] = ((float)src[i] / 255.0f - a.mean[ch]) / a.std[ch];
    }
}

/* The input step of a batch cropped and flipped on the device: element i of sample s reads the
 * byte gt_data_copy_sample would have put there (0 in the padding), then normalises it as
 * input_norm_kernel (a.norm) or normalize_kernel does. Each element draws its sample's offsets
 * (three hashes: cheaper than a pass to share them). */
typedef struct input_aug_args {
    const gt_cuda_key *key;
    const uint32_t *ids;
    int h, w, pad, flip, norm;
} input_aug_args;

__global__ static void input_aug_kernel(const uint8_t *src, float *dst, size_t len,
                                        input_norm_args a, input_aug_args g)
{
    GT_CUDA_GRID_STRIDE(i, len)
    {
        size_t per = (size_t)a.plane * a.channels, s = i / per;
        unsigned r = (unsigned)(i - s * per), ch = r / a.plane, p = r % a.plane;
        int y = (int)(p / (unsigned)g.w), x = (int)(p % (unsigned)g.w), dy, dx, flip;
        gt_augment_offsets(gt_augment_key(g.key->seed, g.key->epoch, g.ids[s]), g.pad, g.flip, &dy,
                           &dx, &flip);
        int sy = y + dy - g.pad, sx = (flip ? g.w - 1 - x : x) + dx - g.pad;
        uint8_t v = sy >= 0 && sy < g.h && sx >= 0 && sx < g.w
                        ? src[s * per + (size_t)ch * a.plane + (size_t)sy * g.w + sx]
                        : 0;
        dst[i] = g.norm ? ((float)v / 255.0f - a.mean[ch]) / a.std[ch] : (float)v / 255.0f;
    }
}

int gt_cuda_input(gt_cuda_ctx *c, const gt_model *m, const uint8_t *src, float *dst, int n,
                  const gt_cuda_augment *aug, gt_err *e)
{
    size_t plane = (size_t)m->in_h * m->in_w, len = (size_t)n * m->in_c * plane;
    if (!m->norm.on && !aug)
        return gt_cuda_normalize(c, src, dst, len, e);
    if (m->in_c < 1 || m->in_c > GT_NORM_MAX_C || plane > UINT_MAX)
        return gt_fail(e, "%s: %d input channels of %zu pixels to normalise (at most %d)",
                       c->name, m->in_c, plane, GT_NORM_MAX_C);
    if (len == 0)
        return 0;
    input_norm_args a;
    memcpy(a.mean, m->norm.mean, sizeof a.mean);
    memcpy(a.std, m->norm.std, sizeof a.std);
    a.plane = (unsigned)plane;
    a.channels = (unsigned)m->in_c;
    if (aug) {
        input_aug_args g = {aug->key, aug->ids, m->in_h, m->in_w, aug->pad, aug->flip, m->norm.on};
        input_aug_kernel<<<gt_cuda_grid(len), BLOCK, 0, c->stream>>>(src, dst, len, a, g);
    } else {
        input_norm_kernel<<<gt_cuda_grid(len), BLOCK, 0, c->stream>>>(src, dst, len, a);
    }
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* Sets *flag when any of g[0..len) is Inf or NaN (exponent bits all ones, as gt_all_finite tests
 * on the host): one read of the gradient on the device instead of the host's scan of its copy. */
__global__ static void flag_nonfinite_kernel(const float *g, size_t len, int *flag)
{
    unsigned bad = 0;
    GT_CUDA_GRID_STRIDE(i, len)
    bad |= (__float_as_uint(g[i]) & 0x7f800000u) == 0x7f800000u;
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        atomicOr(flag, 1);
}

int gt_cuda_flag_nonfinite(gt_cuda_ctx *c, const float *g, size_t len, int *flag, gt_err *e)
{
    if (len == 0)
        return 0;
    flag_nonfinite_kernel<<<gt_cuda_grid(len), BLOCK, 0, c->stream>>>(g, len, flag);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void flag_to_bf16_kernel(const float *g, __nv_bfloat16 *h, size_t len, int *flag)
{
    unsigned bad = 0;
    GT_CUDA_GRID_STRIDE(i, len)
    {
        __nv_bfloat16 v = __float2bfloat16_rn(g[i]);
        h[i] = v;
        bad |= (__bfloat16_as_ushort(v) & 0x7f80u) == 0x7f80u;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        atomicOr(flag, 1);
}

int gt_cuda_flag_to_bf16(gt_cuda_ctx *c, const float *g, uint16_t *h, size_t len, int *flag,
                         gt_err *e)
{
    if (len == 0)
        return 0;
    flag_to_bf16_kernel<<<gt_cuda_grid(len), BLOCK, 0, c->stream>>>(g, (__nv_bfloat16 *)h, len,
                                                                    flag);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void bias_add_kernel(float *y, const float *b, size_t total, int len)
{
    GT_CUDA_GRID_STRIDE(i, total)
    y[i] += b[i % (size_t)len];
}

int gt_cuda_bias_add(gt_cuda_ctx *c, float *y, const float *b, int n, int len, gt_err *e)
{
    size_t total = (size_t)n * len;
    if (total == 0)
        return 0;
    bias_add_kernel<<<gt_cuda_grid(total), BLOCK, 0, c->stream>>>(y, b, total, len);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* One thread per column, rows in order: the same additions in the same order as the CPU. */
__global__ static void bias_grad_kernel(const float *dy, float *db, int n, int len)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= len)
        return;
    float acc = db[j];
    for (int r = 0; r < n; r++)
        acc += dy[(size_t)r * len + j];
    db[j] = acc;
}

int gt_cuda_bias_grad(gt_cuda_ctx *c, const float *dy, float *db, int n, int len, gt_err *e)
{
    if (n == 0 || len == 0)
        return 0;
    bias_grad_kernel<<<(len + BLOCK - 1) / BLOCK, BLOCK, 0, c->stream>>>(dy, db, n, len);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* ---- the bias gradient of a convolution: a deterministic two-stage sum ------------------------ */

/* Block (s, c) sums channel c over samples [s * per, (s + 1) * per) of dy (NCHW, hw positions a
 * plane) in a fixed pattern of threads and a fixed tree, writes its partial, and the block that
 * finishes a channel last adds the channel's partials in split order to db[c]: the same bits
 * whatever the blocks' order, and no scratch beyond part and done (GT_CUDA_BIAS_MAX_SPLITS
 * floats and one counter a channel, counters zero between calls). */
__device__ static float conv_bias_thread_sum(const float *__restrict__ dy, int ch, int hw, int c,
                                             int i0, int i1, int vec, unsigned t, unsigned nt)
{
    if (vec) {
        unsigned q = (unsigned)hw / 4, count = (unsigned)(i1 - i0) * q;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (unsigned v = t; v < count; v += nt) {
            size_t i = (size_t)i0 + v / q;
            float4 d = reinterpret_cast<const float4 *>(dy + (i * ch + c) * hw)[v % q];
            acc.x += d.x;
            acc.y += d.y;
            acc.z += d.z;
            acc.w += d.w;
        }
        return (acc.x + acc.y) + (acc.z + acc.w);
    }
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    float acc = 0.0f;
    for (unsigned v = t; v < count; v += nt) {
        size_t i = (size_t)i0 + v / (unsigned)hw;
        acc += dy[(i * ch + c) * hw + v % (unsigned)hw];
    }
    return acc;
}

/* The sum of v over the block in a fixed tree; valid in thread 0. blockDim.x is a multiple of 32,
 * at most 1024; every thread calls it. */
template <typename T> __device__ static T block_sum(T v)
{
    __shared__ T warp_part[32];
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    unsigned warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0)
        warp_part[warp] = v;
    __syncthreads();
    T sum = 0;
    if (threadIdx.x == 0)
        for (unsigned w = 0; w < nwarps; w++)
            sum += warp_part[w];
    __syncthreads(); /* warp_part is free again for the next call */
    return sum;
}

__global__ static void conv_bias_grad_kernel(const float *__restrict__ dy, float *db, float *part,
                                             unsigned *done, int n, int ch, int hw, int per,
                                             int vec)
{
    int s = blockIdx.x, c = blockIdx.y, splits = gridDim.x;
    int i0 = s * per, i1 = i0 + per < n ? i0 + per : n;
    float sum = block_sum(conv_bias_thread_sum(dy, ch, hw, c, i0, i1, vec, threadIdx.x,
                                               blockDim.x));
    if (threadIdx.x != 0)
        return;
    part[(size_t)c * GT_CUDA_BIAS_MAX_SPLITS + s] = sum;
    __threadfence();
    if (atomicAdd(done + c, 1u) != (unsigned)splits - 1)
        return;
    __threadfence();
    float total = 0.0f;
    for (int k = 0; k < splits; k++)
        total += __ldcg(part + (size_t)c * GT_CUDA_BIAS_MAX_SPLITS + k);
    db[c] += total;
    done[c] = 0;
}

/* Samples a split sums: about BIAS_CHUNK values each, so that cnn-wide's convolutions at batch
 * 128 run 450-700 blocks; a function of the shape only, so the bits are too. */
static int conv_bias_per_split(int n, int hw)
{
    enum { BIAS_CHUNK = 4096 };
    size_t want = ((size_t)n * hw + BIAS_CHUNK - 1) / BIAS_CHUNK;
    int splits = want < (size_t)GT_CUDA_BIAS_MAX_SPLITS ? (int)want : GT_CUDA_BIAS_MAX_SPLITS;
    splits = splits < 1 ? 1 : splits > n ? n : splits;
    return (n + splits - 1) / splits;
}

int gt_cuda_conv_bias_grad(gt_cuda_ctx *c, const float *dy, float *db, float *part,
                           unsigned *done, int n, int ch, int hw, gt_err *e)
{
    if (n <= 0 || ch <= 0 || hw <= 0)
        return 0;
    if (ch > 65535)
        return gt_fail(e, "%s: convolution bias gradient: %d channels (at most 65535)", c->name,
                       ch);
    int per = conv_bias_per_split(n, hw);
    dim3 grid((unsigned)((n + per - 1) / per), (unsigned)ch);
    int vec = hw % 4 == 0 && ((uintptr_t)dy & 15) == 0;
    conv_bias_grad_kernel<<<grid, BLOCK, 0, c->stream>>>(dy, db, part, done, n, ch, hw, per, vec);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void dropout_forward_kernel(const float *x, float *y, uint8_t *mask, size_t total,
                                              size_t len, float p, float scale, uint64_t seed,
                                              uint32_t epoch, const gt_cuda_key *batch_key,
                                              const uint32_t *ids, uint32_t layer)
{
    if (batch_key) {
        seed = batch_key->seed;
        epoch = batch_key->epoch;
    }
    GT_CUDA_GRID_STRIDE(i, total)
    {
        size_t sample = i / len, j = i % len;
        uint64_t key = gt_dropout_key(seed, epoch, ids[sample], layer);
        uint8_t keep = gt_counter_uniform(key, (uint32_t)j) >= p;
        mask[i] = keep;
        y[i] = keep ? x[i] * scale : 0.0f;
    }
}

int gt_cuda_dropout_forward(gt_cuda_ctx *c, const float *x, float *y, uint8_t *mask, int n,
                            size_t len, float p, uint64_t seed, uint32_t epoch,
                            const gt_cuda_key *key, const uint32_t *ids, uint32_t layer,
                            gt_err *e)
{
    size_t total = (size_t)n * len;
    if (total == 0)
        return 0;
    float scale = 1.0f / (1.0f - p); /* computed on the host exactly as the CPU does */
    dropout_forward_kernel<<<gt_cuda_grid(total), BLOCK, 0, c->stream>>>(x, y, mask, total, len, p,
                                                                     scale, seed, epoch, key,
                                                                     ids, layer);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void dropout_backward_kernel(const float *dy, const uint8_t *mask, float *dx,
                                               size_t total, float scale)
{
    GT_CUDA_GRID_STRIDE(i, total)
    dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

int gt_cuda_dropout_backward(gt_cuda_ctx *c, const float *dy, const uint8_t *mask, float *dx,
                             size_t n_len, float p, gt_err *e)
{
    if (n_len == 0)
        return 0;
    float scale = 1.0f / (1.0f - p);
    dropout_backward_kernel<<<gt_cuda_grid(n_len), BLOCK, 0, c->stream>>>(dy, mask, dx, n_len, scale);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* The first maximum of a row across a team of width lanes (a power of two up to 32, aligned in
 * its warp): each lane holds the first maximum of its strided elements (index k when it has none);
 * ties go to the smaller index, as in the CPU scan. */
__device__ static void team_argmax(float *m, int *arg, int width)
{
    for (int off = width / 2; off > 0; off >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, *m, off);
        int oa = __shfl_xor_sync(0xffffffffu, *arg, off);
        if (oa != INT_MAX && (*arg == INT_MAX || om > *m || (om == *m && oa < *arg))) {
            *m = om;
            *arg = oa;
        }
    }
}

__device__ static double team_sum(double v, int width)
{
    for (int off = width / 2; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* One row's loss term, with the argmax hit in *hit and the gradient written where d is
 * non-NULL; lane of width (team_argmax) takes elements lane, lane + width, ... A team of one
 * lane does the CPU's arithmetic in the CPU's order. */
__device__ static double xent_row(const float *z, int label, int k, float scale, float *d,
                                  int lane, int width, int *hit)
{
    float m = 0;
    int arg = INT_MAX;
    for (int j = lane; j < k; j += width)
        if (arg == INT_MAX || z[j] > m) {
            m = z[j];
            arg = j;
        }
    team_argmax(&m, &arg, width);
    double zmax = m, sum = 0;
    for (int j = lane; j < k; j += width)
        sum += exp((double)z[j] - zmax);
    sum = team_sum(sum, width);
    *hit = arg == label;
    for (int j = lane; d && j < k; j += width) {
        double prob = exp((double)z[j] - zmax) / sum;
        d[j] = (float)((prob - (j == label)) * scale);
    }
    return log(sum) - ((label < k ? (double)z[label] : (double)NAN) - zmax);
}

/* One block; a team of width lanes takes rows team, team + teams, ... (a thread a row for a
 * few classes, where a warp a row would leave most lanes idle and run the rows one after
 * another), and the block's sums go in a fixed tree, so the result does not depend on
 * scheduling. */
__global__ static void __launch_bounds__(XENT_THREADS)
    softmax_xent_kernel(const float *logits, const uint16_t *labels, int n, int k, float scale,
                        float *dlogits, int width, gt_cuda_result *res)
{
    int lane = threadIdx.x % width, teams = blockDim.x / width;
    double loss = 0;
    int hits = 0;
    for (int r = threadIdx.x / width; r < n; r += teams) {
        int hit;
        double term = xent_row(logits + (size_t)r * k, labels[r], k, scale,
                               dlogits ? dlogits + (size_t)r * k : NULL, lane, width, &hit);
        if (lane == 0) {
            loss += term;
            hits += hit;
        }
    }
    loss = block_sum(loss);
    hits = block_sum(hits);
    if (threadIdx.x == 0) {
        res->loss_sum += loss;
        res->correct += hits;
    }
}

int gt_cuda_softmax_xent(gt_cuda_ctx *c, const float *logits, const uint16_t *labels, int n,
                         int k, float scale, float *dlogits, gt_cuda_result *res, gt_err *e)
{
    if (n == 0 || k == 0)
        return 0;
    int width = k <= XENT_THREAD_ROW_MAX ? 1 : 32;
    softmax_xent_kernel<<<1, XENT_THREADS, 0, c->stream>>>(logits, labels, n, k, scale, dlogits,
                                                           width, res);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* ---- predictions (gt_device.eval_pred) ------------------------------------------------------- */

/* A thread a row: the index of the row's first largest logit, the CPU's scan (src/device_cpu.c
 * cpu_argmax) in its order, so a NaN compares as it does there. */
__global__ static void argmax_kernel(const float *logits, int n, int k, int32_t *pred)
{
    GT_CUDA_GRID_STRIDE(i, (size_t)n)
    {
        const float *z = logits + i * (size_t)k;
        int best = 0;
        for (int j = 1; j < k; j++)
            if (z[j] > z[best])
                best = j;
        pred[i] = best;
    }
}

int gt_cuda_argmax(gt_cuda_ctx *c, const float *logits, int n, int k, int32_t *pred, gt_err *e)
{
    if (n == 0 || k == 0)
        return 0;
    argmax_kernel<<<gt_cuda_grid((size_t)n), BLOCK, 0, c->stream>>>(logits, n, k, pred);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}
