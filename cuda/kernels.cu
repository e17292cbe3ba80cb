/* kernels.cu - the small GPU ops cuDNN and cuBLAS do not cover: the uint8 input step, linear
 * bias add and bias gradient, a convolution's bias gradient (cuDNN's took 120 us for cnn-wide's
 * first layer at batch 128), dropout, and softmax cross-entropy with its gradient.
 *
 * Each mirrors its CPU twin in src/layers.c operation for operation where that is cheap (the
 * same float expressions for dropout and normalisation, so they match bit for bit; double
 * log-sum-exp for the loss), and each launcher checks the launch. */
#include "gt_cuda.h"

#include "gputrain/counter_rng.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>

/* The loss kernel's block, and the most classes for which a thread takes a whole row. */
enum { BLOCK = 256, MAX_BLOCKS = 4096, XENT_THREADS = 1024, XENT_THREAD_ROW_MAX = 64 };

static unsigned grid_for(size_t len)
{
    size_t blocks = (len + BLOCK - 1) / BLOCK;
    return (unsigned)(blocks < (size_t)MAX_BLOCKS ? blocks : (size_t)MAX_BLOCKS);
}

#define GRID_STRIDE(i, len)                                                                  \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (len);                \
         i += (size_t)gridDim.x * blockDim.x)

__global__ static void normalize_kernel(const uint8_t *src, float *dst, size_t len)
{
    GRID_STRIDE(i, len)
    dst[i] = (float)src[i] / 255.0f;
}

int gt_cuda_normalize(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len, gt_err *e)
{
    if (len == 0)
        return 0;
    normalize_kernel<<<grid_for(len), BLOCK, 0, c->stream>>>(src, dst, len);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* Sets *flag when any of g[0..len) is Inf or NaN (exponent bits all ones, as gt_all_finite tests
 * on the host): one read of the gradient on the device instead of the host's scan of its copy. */
__global__ static void flag_nonfinite_kernel(const float *g, size_t len, int *flag)
{
    unsigned bad = 0;
    GRID_STRIDE(i, len)
    bad |= (__float_as_uint(g[i]) & 0x7f800000u) == 0x7f800000u;
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        atomicOr(flag, 1);
}

int gt_cuda_flag_nonfinite(gt_cuda_ctx *c, const float *g, size_t len, int *flag, gt_err *e)
{
    if (len == 0)
        return 0;
    flag_nonfinite_kernel<<<grid_for(len), BLOCK, 0, c->stream>>>(g, len, flag);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void bias_add_kernel(float *y, const float *b, size_t total, int len)
{
    GRID_STRIDE(i, total)
    y[i] += b[i % (size_t)len];
}

int gt_cuda_bias_add(gt_cuda_ctx *c, float *y, const float *b, int n, int len, gt_err *e)
{
    size_t total = (size_t)n * len;
    if (total == 0)
        return 0;
    bias_add_kernel<<<grid_for(total), BLOCK, 0, c->stream>>>(y, b, total, len);
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

/* ---- a convolution's weight gradient for few taps: a deterministic two-stage sum ------------- */

/* Block (s, o) sums, for each of output channel o's C * K * K taps r, dy[i][o][pos] times the
 * input under tap r over samples [s * per, (s + 1) * per), each thread its positions in
 * registers, then warps in a fixed tree and order; the block that finishes channel o last adds
 * the splits' partials in split order to dw (conv_bias_grad_kernel's scheme). For a first layer
 * (one input channel) cuDNN's deterministic algorithm took 483 us at cnn-wide's batch 128. */
template <int C, int K>
__global__ static void __launch_bounds__(BLOCK)
    conv_wgrad_taps_kernel(const float *__restrict__ x, const float *__restrict__ dy, float *dw,
                           float *part, unsigned *done, int n, int h, int w, int out_c, int pad,
                           int oh, int ow, int per)
{
    enum { R = C * K * K };
    __shared__ float warp_part[BLOCK / 32][R];
    __shared__ int last;
    int s = blockIdx.x, o = blockIdx.y, splits = gridDim.x;
    int i0 = s * per, i1 = i0 + per < n ? i0 + per : n;
    unsigned plane = (unsigned)(oh * ow), count = (unsigned)(i1 - i0) * plane;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f;
    for (unsigned v = threadIdx.x; v < count; v += blockDim.x) {
        unsigned i = (unsigned)i0 + v / plane, pos = v % plane;
        int oy = (int)(pos / (unsigned)ow) - pad, ox = (int)(pos % (unsigned)ow) - pad;
        float g = dy[((size_t)i * out_c + o) * plane + pos];
        const float *xs = x + (size_t)i * C * h * w;
#pragma unroll
        for (int r = 0; r < R; r++) {
            int iy = oy + (r % (K * K)) / K, ix = ox + r % K;
            if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                acc[r] += g * xs[((size_t)(r / (K * K)) * h + iy) * w + ix];
        }
    }
    unsigned warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; r++) {
        float v = acc[r];
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, off);
        if ((threadIdx.x & 31) == 0)
            warp_part[warp][r] = v;
    }
    __syncthreads();
    float *mine = part + (size_t)o * R * GT_CUDA_BIAS_MAX_SPLITS;
    if (threadIdx.x < R) {
        float sum = 0.0f;
        for (unsigned wi = 0; wi < blockDim.x / 32; wi++)
            sum += warp_part[wi][threadIdx.x];
        mine[threadIdx.x * GT_CUDA_BIAS_MAX_SPLITS + s] = sum;
        __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(done + o, 1u) == (unsigned)splits - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (threadIdx.x < R) {
        float total = 0.0f;
        for (int k = 0; k < splits; k++)
            total += __ldcg(mine + threadIdx.x * GT_CUDA_BIAS_MAX_SPLITS + k);
        dw[(size_t)o * R + threadIdx.x] += total;
    }
    if (threadIdx.x == 0)
        done[o] = 0;
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

int gt_cuda_conv_wgrad_taps_fits(int in_c, int k)
{
    return in_c == 1 && (k == 3 || k == 5);
}

int gt_cuda_conv_wgrad_taps(gt_cuda_ctx *c, const float *x, const float *dy, float *dw,
                            float *part, unsigned *done, int n, int in_c, int h, int w,
                            int out_c, int k, int pad, gt_err *e)
{
    int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1;
    if (n <= 0 || out_c <= 0 || oh <= 0 || ow <= 0)
        return 0;
    if (!gt_cuda_conv_wgrad_taps_fits(in_c, k) || out_c > 65535)
        return gt_fail(e, "%s: weight-gradient taps kernel: %d input channels, %d x %d window, "
                          "%d outputs", c->name, in_c, k, k, out_c);
    int per = conv_bias_per_split(n, oh * ow);
    dim3 grid((unsigned)((n + per - 1) / per), (unsigned)out_c);
    if (k == 5)
        conv_wgrad_taps_kernel<1, 5><<<grid, BLOCK, 0, c->stream>>>(x, dy, dw, part, done, n, h,
                                                                    w, out_c, pad, oh, ow, per);
    else
        conv_wgrad_taps_kernel<1, 3><<<grid, BLOCK, 0, c->stream>>>(x, dy, dw, part, done, n, h,
                                                                    w, out_c, pad, oh, ow, per);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* ---- a convolution's weight gradient as one GEMM: the operands' layouts ---------------------- */

/* dst[k][i][j] = src[i][k][j]: samples x channels of planes to channels x samples. */
__global__ static void nchw_to_cnhw_kernel(const float *__restrict__ src, float *__restrict__ dst,
                                           unsigned total, unsigned n, unsigned ch,
                                           unsigned plane)
{
    GRID_STRIDE(o, total)
    {
        unsigned j = (unsigned)o % plane, rest = (unsigned)o / plane, i = rest % n, k = rest / n;
        dst[o] = src[((size_t)i * ch + k) * plane + j];
    }
}

int gt_cuda_nchw_to_cnhw(gt_cuda_ctx *c, const float *src, float *dst, int n, int ch, int plane,
                         gt_err *e)
{
    size_t total = (size_t)n * ch * plane;
    if (total == 0)
        return 0;
    if (total > 0xffffffffu)
        return gt_fail(e, "%s: transpose of %zu floats is too large", c->name, total);
    nchw_to_cnhw_kernel<<<grid_for(total), BLOCK, 0, c->stream>>>(
        src, dst, (unsigned)total, (unsigned)n, (unsigned)ch, (unsigned)plane);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* Thread row y of a block writes row m = (sample, oy, ox) of col, its threads x along the row's
 * ch * k * k entries (channel, ky, kx), zero where the window reaches into the padding:
 * consecutive threads write consecutive floats and read neighbouring inputs. K > 0 is the
 * window size at compile time (its divisions become multiplications), 0 takes k. */
template <int K>
__global__ static void im2col_rows_kernel(const float *__restrict__ x, float *__restrict__ col,
                                          unsigned rows, int ch, int h, int w, int k, int pad,
                                          int oh, int ow)
{
    unsigned m = blockIdx.x * blockDim.y + threadIdx.y;
    if (m >= rows)
        return;
    unsigned kw = K > 0 ? (unsigned)K : (unsigned)k, kk = kw * kw, row = (unsigned)ch * kk;
    unsigned i = m / (unsigned)(oh * ow), pos = m % (unsigned)(oh * ow);
    int y0 = (int)(pos / (unsigned)ow) - pad, x0 = (int)(pos % (unsigned)ow) - pad;
    const float *xs = x + (size_t)i * ch * h * w;
    float *dst = col + (size_t)m * row;
    for (unsigned r = threadIdx.x; r < row; r += blockDim.x) {
        unsigned ci = r / kk, rem = r % kk;
        int iy = y0 + (int)(rem / kw), ix = x0 + (int)(rem % kw);
        bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
        dst[r] = inside ? xs[((size_t)ci * h + iy) * w + ix] : 0.0f;
    }
}

int gt_cuda_im2col_rows(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w, int k,
                        int pad, float *col, gt_err *e)
{
    int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1;
    size_t rows = (size_t)n * oh * ow, row = (size_t)ch * k * k;
    if (rows == 0 || row == 0)
        return 0;
    if (rows > 0x7fffffffu || row > 0xffffffffu)
        return gt_fail(e, "%s: im2col: %zu rows of %zu is too large", c->name, rows, row);
    /* 256 threads: a row's width in warps (up to 8), the rest of the block more rows. */
    unsigned bx = row >= 256 ? 256u : (unsigned)((row + 31) / 32 * 32), by = 256u / bx;
    dim3 block(bx, by);
    unsigned grid = (unsigned)((rows + by - 1) / by);
    if (k == 5)
        im2col_rows_kernel<5><<<grid, block, 0, c->stream>>>(x, col, (unsigned)rows, ch, h, w, k,
                                                             pad, oh, ow);
    else
        im2col_rows_kernel<0><<<grid, block, 0, c->stream>>>(x, col, (unsigned)rows, ch, h, w, k,
                                                             pad, oh, ow);
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
    GRID_STRIDE(i, total)
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
    dropout_forward_kernel<<<grid_for(total), BLOCK, 0, c->stream>>>(x, y, mask, total, len, p,
                                                                     scale, seed, epoch, key,
                                                                     ids, layer);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

__global__ static void dropout_backward_kernel(const float *dy, const uint8_t *mask, float *dx,
                                               size_t total, float scale)
{
    GRID_STRIDE(i, total)
    dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

int gt_cuda_dropout_backward(gt_cuda_ctx *c, const float *dy, const uint8_t *mask, float *dx,
                             size_t n_len, float p, gt_err *e)
{
    if (n_len == 0)
        return 0;
    float scale = 1.0f / (1.0f - p);
    dropout_backward_kernel<<<grid_for(n_len), BLOCK, 0, c->stream>>>(dy, mask, dx, n_len, scale);
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
    softmax_xent_kernel(const float *logits, const uint8_t *labels, int n, int k, float scale,
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

int gt_cuda_softmax_xent(gt_cuda_ctx *c, const float *logits, const uint8_t *labels, int n,
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

/* ---- epilogues: bias, ReLU and a pooling or dropout after a convolution or linear layer ------ */

/* The layer's output plus its bias through a ReLU: the value the CPU's ReLU layer outputs. */
__device__ static inline float epi_relu(const float *z, const float *b, size_t i, size_t c)
{
    float v = z[i] + (b ? b[c] : 0.0f);
    return v > 0.0f ? v : 0.0f;
}

/* One thread per output: of a pooling window (the first maximum wins ties, sums in window order,
 * as gt_maxpool_forward and gt_avgpool_forward), or of the ReLU where pool is 0. */
__global__ static void conv_epilogue_forward_kernel(const float *__restrict__ z,
                                                    const float *__restrict__ b,
                                                    float *__restrict__ y, size_t total, int ch,
                                                    int h, int w, int pool, int k)
{
    GRID_STRIDE(i, total)
    {
        if (!pool) {
            y[i] = epi_relu(z, b, i, (i / ((size_t)h * w)) % (size_t)ch);
            continue;
        }
        int oh = h / k, ow = w / k;
        size_t plane = i / ((size_t)oh * ow), o = i % ((size_t)oh * ow);
        size_t base = plane * h * w + (o / ow) * k * w + (o % ow) * k, c = plane % (size_t)ch;
        float best = 0.0f, sum = 0.0f;
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                float v = epi_relu(z, b, base + (size_t)ky * w + kx, c);
                if ((ky == 0 && kx == 0) || v > best)
                    best = v;
                sum += v;
            }
        y[i] = pool == GT_MAXPOOL ? best : sum * (1.0f / (float)(k * k));
    }
}

/* Whether input element at (within its plane, window base and row width w) is the first maximum
 * of its k x k window: the one gt_maxpool_forward's arg names. */
__device__ static bool epi_is_argmax(const float *z, const float *b, size_t c, size_t base,
                                     size_t at, int w, int k)
{
    size_t best = base;
    float vbest = epi_relu(z, b, base, c);
    for (int ky = 0; ky < k; ky++)
        for (int kx = 0; kx < k; kx++) {
            size_t idx = base + (size_t)ky * w + kx;
            float v = epi_relu(z, b, idx, c);
            if (v > vbest) {
                vbest = v;
                best = idx;
            }
        }
    return best == at;
}

/* One thread per input element: the pooling's adjoint (gt_maxpool_backward, gt_avgpool_backward;
 * rows and columns no window covers get zero), then the ReLU's (gt_act_backward). */
__global__ static void conv_epilogue_backward_kernel(const float *__restrict__ z,
                                                     const float *__restrict__ b,
                                                     const float *__restrict__ dy,
                                                     float *__restrict__ dz, size_t total, int ch,
                                                     int h, int w, int pool, int k)
{
    GRID_STRIDE(i, total)
    {
        size_t plane = i / ((size_t)h * w), pos = i % ((size_t)h * w), c = plane % (size_t)ch;
        float v = epi_relu(z, b, i, c), g = 0.0f;
        if (!pool) {
            g = dy[i];
        } else {
            int oh = h / k, ow = w / k, oy = (int)(pos / w) / k, ox = (int)(pos % w) / k;
            if (oy < oh && ox < ow) {
                g = dy[(plane * oh + oy) * ow + ox];
                size_t base = plane * h * w + (size_t)oy * k * w + (size_t)ox * k;
                if (pool == GT_MAXPOOL)
                    g = epi_is_argmax(z, b, c, base, i, w, k) ? g : 0.0f;
                else
                    g = g * (1.0f / (float)(k * k));
            }
        }
        dz[i] = v > 0.0f ? g : 0.0f;
    }
}

static int conv_epilogue_check(const gt_cuda_ctx *c, int pool, int k, gt_err *e)
{
    if ((pool != 0 && pool != GT_MAXPOOL && pool != GT_AVGPOOL) || (pool && k < 1))
        return gt_fail(e, "%s: convolution epilogue: pooling kind %d window %d", c->name, pool,
                       k);
    return 0;
}

int gt_cuda_conv_epilogue_forward(gt_cuda_ctx *c, const float *z, const float *b, int n, int ch,
                                  int h, int w, int pool, int k, float *y, gt_err *e)
{
    if (conv_epilogue_check(c, pool, k, e))
        return -1;
    size_t total = (size_t)n * ch * (pool ? (size_t)(h / k) * (w / k) : (size_t)h * w);
    if (total == 0)
        return 0;
    conv_epilogue_forward_kernel<<<grid_for(total), BLOCK, 0, c->stream>>>(z, b, y, total, ch, h,
                                                                           w, pool, k);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

int gt_cuda_conv_epilogue_backward(gt_cuda_ctx *c, const float *z, const float *b,
                                   const float *dy, int n, int ch, int h, int w, int pool, int k,
                                   float *dz, gt_err *e)
{
    if (conv_epilogue_check(c, pool, k, e))
        return -1;
    size_t total = (size_t)n * ch * h * w;
    if (total == 0)
        return 0;
    conv_epilogue_backward_kernel<<<grid_for(total), BLOCK, 0, c->stream>>>(z, b, dy, dz, total,
                                                                            ch, h, w, pool, k);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* One thread per element: bias, ReLU, then where mask is non-NULL dropout with the arithmetic
 * of dropout_forward_kernel. */
__global__ static void linear_epilogue_forward_kernel(
    const float *__restrict__ z, const float *__restrict__ b, float *__restrict__ y,
    uint8_t *__restrict__ mask, size_t total, size_t len, float p, float scale, uint64_t seed,
    uint32_t epoch, const gt_cuda_key *batch_key, const uint32_t *ids, uint32_t layer)
{
    if (batch_key) {
        seed = batch_key->seed;
        epoch = batch_key->epoch;
    }
    GRID_STRIDE(i, total)
    {
        size_t j = i % len;
        float v = epi_relu(z, b, i, j);
        if (mask) {
            uint64_t key = gt_dropout_key(seed, epoch, ids[i / len], layer);
            uint8_t keep = gt_counter_uniform(key, (uint32_t)j) >= p;
            mask[i] = keep;
            v = keep ? v * scale : 0.0f;
        }
        y[i] = v;
    }
}

int gt_cuda_linear_epilogue_forward(gt_cuda_ctx *c, const float *z, const float *b, int n,
                                    size_t len, const gt_cuda_drop *drop, float *y, gt_err *e)
{
    size_t total = (size_t)n * len;
    if (total == 0)
        return 0;
    gt_cuda_drop none = {0.0f, NULL, 0, 0, NULL, NULL, 0};
    const gt_cuda_drop *d = drop ? drop : &none;
    float scale = drop ? 1.0f / (1.0f - d->p) : 1.0f; /* as the CPU computes it */
    linear_epilogue_forward_kernel<<<grid_for(total), BLOCK, 0, c->stream>>>(
        z, b, y, d->mask, total, len, d->p, scale, d->seed, d->epoch, d->key, d->ids, d->layer);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}

/* One thread per column, rows in order: the dropout's adjoint where mask is non-NULL, the
 * ReLU's, and the bias gradient summed in the CPU's order (bias_grad_kernel). */
__global__ static void linear_epilogue_backward_kernel(
    const float *__restrict__ z, const float *__restrict__ b, const float *__restrict__ dy,
    const uint8_t *__restrict__ mask, float scale, float *__restrict__ dz,
    float *__restrict__ db, int n, int len)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= len)
        return;
    float acc = db ? db[j] : 0.0f;
#pragma unroll 8
    for (int r = 0; r < n; r++) {
        size_t i = (size_t)r * len + j;
        float g = dy[i];
        if (mask)
            g = mask[i] ? g * scale : 0.0f;
        g = epi_relu(z, b, i, (size_t)j) > 0.0f ? g : 0.0f;
        dz[i] = g;
        acc += g;
    }
    if (db)
        db[j] = acc;
}

int gt_cuda_linear_epilogue_backward(gt_cuda_ctx *c, const float *z, const float *b,
                                     const float *dy, const uint8_t *mask, float p, int n,
                                     int len, float *dz, float *db, gt_err *e)
{
    if (n == 0 || len == 0)
        return 0;
    float scale = mask ? 1.0f / (1.0f - p) : 1.0f;
    enum { COLS = 128 }; /* more blocks than BLOCK-wide ones for a 1024-wide layer */
    linear_epilogue_backward_kernel<<<(len + COLS - 1) / COLS, COLS, 0, c->stream>>>(
        z, b, dy, mask, scale, dz, db, n, len);
    GT_CUDA_LAUNCHED(c->name, e);
    return 0;
}
