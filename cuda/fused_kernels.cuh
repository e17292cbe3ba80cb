/* fused_kernels.cuh - the three kernels of the fused LeNet step; fused_cuda.cu launches them and
 * fused_plan.cu sizes them. A training step of the layer-by-layer path is some forty library
 * calls, nearly all launch and scheduling for LeNet's tiny tensors; these do the same arithmetic
 * in three launches:
 *
 *   forward   a few samples per block (one while the batch leaves SMs free): input bytes ->
 *             the input step -> conv, bias, act, pool -> conv, bias, act, pool in shared memory,
 *             then the three linear layers (weights read from L2 once per block), softmax
 *             cross-entropy and backward to the fc input; keeps what backward and reduce need
 *             in global memory
 *   backward  per sample, one block per conv1 channel (back through conv2 into that channel,
 *             its pooling and activation, and its conv1 weight gradient) and one per group of
 *             conv2 output channels (their conv2 weight gradient): per-sample partials
 *   reduce    the batch sums, samples in order, so results do not depend on scheduling: a thread
 *             per entry of the partials and biases, shared-memory tiles of the linear layers'
 *             outer products
 *
 * Every expression mirrors src/layers.c (activations from their outputs, pooling as sum times
 * 1/k^2, the loss in double); only summation orders differ. The conv loops are unrolled for
 * GT_FUSED_K x GT_FUSED_K kernels and GT_FUSED_POOL windows, keeping a thread's input patch and
 * accumulators in registers; every other size is a run-time value. Loops stride by blockDim.x (a
 * multiple of 32) and a barrier separates every phase; how some sums are split across threads
 * (weight-gradient row chunks, input-gradient channel groups, the fc backward's ranges of k)
 * follows the block size, GT_FUSED_THREADS at every launch, so a step's bits are fixed. */
#include <limits.h>
#include <math.h>

enum {
    FUSED_FC_SAMPLES = GT_FUSED_FC_SAMPLES,
    FUSED_K = GT_FUSED_K,
    FUSED_Q = GT_FUSED_POOL,
    FUSED_THREADS = GT_FUSED_THREADS,
};

/* An activation of kind (gt_layer_kind; -1, or a kind that is not an activation: none). */
__device__ __forceinline__ static float fused_act(int kind, float x)
{
    if (kind < 0)
        return x;
    switch ((gt_layer_kind)kind) {
    case GT_RELU:
        return x > 0.0f ? x : 0.0f;
    case GT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case GT_TANH:
        return tanhf(x);
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_DROPOUT:
        break;
    }
    return x;
}

/* The gradient through an activation, from its output y, as gt_act_backward computes it. */
__device__ __forceinline__ static float fused_act_grad(int kind, float y, float dy)
{
    if (kind < 0)
        return dy;
    switch ((gt_layer_kind)kind) {
    case GT_RELU:
        return y > 0.0f ? dy : 0.0f;
    case GT_SIGMOID:
        return dy * y * (1.0f - y);
    case GT_TANH:
        return dy * (1.0f - y * y);
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_DROPOUT:
        break;
    }
    return dy;
}

__device__ __forceinline__ static float fused_warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ static double fused_warp_sum_double(double v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* The first maximum across a warp; a lane without elements holds arg INT_MAX. */
__device__ __forceinline__ static void fused_warp_argmax(float *m, int *arg)
{
    for (int off = 16; off > 0; off >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, *m, off);
        int oa = __shfl_xor_sync(0xffffffffu, *arg, off);
        if (oa != INT_MAX && (*arg == INT_MAX || om > *m || (om == *m && oa < *arg))) {
            *m = om;
            *arg = oa;
        }
    }
}


/* Loads in flight per thread in the loops that read global memory into shared memory. Warps issue
 * in order and a store waits for the load it stores, so a loop of load-store pairs has one L2
 * round trip at a time per thread; fused_staged issues a batch of loads before the first store.
 * Eight, as every batch costs registers: the forward and backward kernels share their SMs. */
enum { FUSED_BATCH = 8 };

/* put(t, get(t)) for t < len, strided by blockDim.x, a batch of B gets before its puts. get only
 * loads (work on the loaded value goes in put, or it would wait for the load); its index is
 * clamped to len - 1 so that no test of the bound separates the loads. */
template <int B = FUSED_BATCH, typename Get, typename Put>
__device__ __forceinline__ static void fused_staged(int len, Get get, Put put)
{
    int step = blockDim.x;
    for (int t0 = threadIdx.x; t0 < len; t0 += B * step) {
        decltype(get(0)) v[B];
#pragma unroll
        for (int u = 0; u < B; u++)
            v[u] = get(min(t0 + u * step, len - 1));
#pragma unroll
        for (int u = 0; u < B; u++)
            if (t0 + u * step < len)
                put(t0 + u * step, v[u]);
    }
}

/* c planes of h x w floats from src into dst with a zero border of pad. */
__device__ static void fused_load_padded(const float *src, int c, int h, int w, int pad, float *dst)
{
    int ph = h + 2 * pad, pw = w + 2 * pad;
    fused_staged(
        c * ph * pw,
        [=](int t) {
            int ix = t % pw - pad, iy = t / pw % ph - pad, ch = t / (pw * ph);
            return iy >= 0 && iy < h && ix >= 0 && ix < w ? src[(ch * h + iy) * w + ix] : 0.0f;
        },
        [=](int t, float v) { dst[t] = v; });
}

/* conv1's input: c planes of h x w bytes from src into dst with a zero border of pad, each byte
 * through the model's input step, read from its table (f.in_lut: (x / 255 - mean[ch]) / std[ch]
 * of every byte value, the layer path's and the CPU's floats; mean 0 and std 1 where the step is
 * off, x / 255 to the bit). A load where a division was: the backward kernel reads the input once
 * per conv1 channel. */
__device__ static void fused_load_input(const gt_fused_net &f, const uint8_t *src, int c, int h,
                                        int w, int pad, float *dst)
{
    int ph = h + 2 * pad, pw = w + 2 * pad;
    const float *__restrict__ lut = f.in_lut;
    fused_staged(
        c * ph * pw,
        [=](int t) {
            int ix = t % pw - pad, iy = t / pw % ph - pad, ch = t / (pw * ph);
            return iy >= 0 && iy < h && ix >= 0 && ix < w ? src[(ch * h + iy) * w + ix]
                                                          : (uint8_t)0;
        },
        [=](int t, uint8_t v) {
            int ix = t % pw - pad, iy = t / pw % ph - pad, ch = t / (pw * ph);
            dst[t] = iy >= 0 && iy < h && ix >= 0 && ix < w ? __ldg(lut + ch * 256 + v) : 0.0f;
        });
}

/* len floats from global into shared memory, as float4 where both ends are 16-byte aligned, B
 * loads in flight per thread. */
template <int B = FUSED_BATCH>
__device__ static void fused_copy(const float *src, float *dst, int len)
{
    int vec = 0;
    if ((((uintptr_t)src | (uintptr_t)dst) & 15) == 0) {
        const float4 *s4 = (const float4 *)src;
        float4 *d4 = (float4 *)dst;
        vec = len / 4;
        fused_staged<B>(vec, [=](int t) { return s4[t]; }, [=](int t, float4 v) { d4[t] = v; });
    }
    fused_staged<B>(
        len - 4 * vec, [=](int t) { return src[4 * vec + t]; },
        [=](int t, float v) { dst[4 * vec + t] = v; });
}

__device__ __forceinline__ static int fused_weight_len(const gt_fused_conv *cv)
{
    return cv->out_c * cv->in_c * FUSED_K * FUSED_K;
}

/* ---- forward --------------------------------------------------------------------------------- */

/* One sample through conv + bias, activation and pooling: in is the padded input in shared
 * memory, w and b the weights there (b NULL: no bias). A thread takes a pooled output: per input
 * channel it loads the (Q+K-1)^2 input patch under its pool window once into registers, then
 * accumulates the window's Q x Q conv outputs. Activation outputs go to a (NULL: not kept),
 * pooled ones to pooled and, when next is non-NULL, into next with a border of next_pad (zeroed
 * before). */
__device__ static void fused_conv_stage(const gt_fused_conv *cv, const float *in, const float *w,
                                        const float *b, float *a, float *pooled, float *next,
                                        int next_pad)
{
    const int P = FUSED_Q + FUSED_K - 1;
    int in_h = cv->in_h + 2 * cv->pad, in_w = cv->in_w + 2 * cv->pad;
    int plane = cv->pool_h * cv->pool_w, total = cv->out_c * plane;
    int next_h = cv->pool_h + 2 * next_pad, next_w = cv->pool_w + 2 * next_pad;
    float inv = 1.0f / (float)(FUSED_Q * FUSED_Q);
    for (int t = threadIdx.x; t < total; t += blockDim.x) {
        int o = t / plane, py = t % plane / cv->pool_w, px = t % cv->pool_w;
        float acc[FUSED_Q][FUSED_Q];
#pragma unroll
        for (int qy = 0; qy < FUSED_Q; qy++)
#pragma unroll
            for (int qx = 0; qx < FUSED_Q; qx++)
                acc[qy][qx] = b ? b[o] : 0.0f;
        for (int c = 0; c < cv->in_c; c++) {
            const float *ic = in + (c * in_h + py * FUSED_Q) * in_w + px * FUSED_Q;
            const float *wc = w + (o * cv->in_c + c) * FUSED_K * FUSED_K;
            float patch[P][P];
#pragma unroll
            for (int r = 0; r < P; r++)
#pragma unroll
                for (int q = 0; q < P; q++)
                    patch[r][q] = ic[r * in_w + q];
#pragma unroll
            for (int ky = 0; ky < FUSED_K; ky++)
#pragma unroll
                for (int kx = 0; kx < FUSED_K; kx++) {
                    float wv = wc[ky * FUSED_K + kx];
#pragma unroll
                    for (int qy = 0; qy < FUSED_Q; qy++)
#pragma unroll
                        for (int qx = 0; qx < FUSED_Q; qx++)
                            acc[qy][qx] += wv * patch[qy + ky][qx + kx];
                }
        }
        float s = 0.0f;
#pragma unroll
        for (int qy = 0; qy < FUSED_Q; qy++)
#pragma unroll
            for (int qx = 0; qx < FUSED_Q; qx++) {
                int y = py * FUSED_Q + qy, x = px * FUSED_Q + qx;
                float v = fused_act(cv->act, acc[qy][qx]);
                if (a)
                    a[(o * cv->out_h + y) * cv->out_w + x] = v;
                s += v;
            }
        float p = s * inv;
        pooled[t] = p;
        if (next)
            next[(o * next_h + py + next_pad) * next_w + px + next_pad] = p;
    }
}

/* ---- the linear layers and the loss ---------------------------------------------------------- */

/* Rows of a linear layer's weights a warp takes at once (twice as many with one sample a block,
 * whose accumulators leave the registers): the weights come straight from L2 (each is read once
 * per block), so a lane issues the loads of all its rows' columns before the first multiply. */
enum { FUSED_DENSE_ROWS = 4 };

/* W (1 or 4) consecutive floats from p: a float4 load when W is 4 (16-byte aligned). */
template <int W> struct fused_vec;
template <> struct fused_vec<1> {
    float v[1];
    __device__ __forceinline__ void load(const float *p) { v[0] = __ldg(p); }
};
template <> struct fused_vec<4> {
    float v[4];
    __device__ __forceinline__ void load(const float *p)
    {
        float4 q = __ldg((const float4 *)p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
};

/* Whether a linear layer's weight rows can be read as float4: every row starts 16-byte aligned. */
__device__ __forceinline__ static int fused_dense_vec(const gt_fused_fc *fc, const float *params)
{
    return fc->in % 4 == 0 && ((uintptr_t)(params + fc->w_off) & 15) == 0;
}

/* out[s][j] = act(b[j] + sum_i W[j][i] in[s][i]) for the block's S rows (in, out in shared
 * memory; W and b in params, global): a warp per R outputs, each lane W
 * consecutive columns at a time, so each weight is read once for all rows. */
template <int S, int W>
__device__ static void fused_dense_w(const gt_fused_fc *fc, const float *__restrict__ params,
                                     const float *in, float *out, int ns)
{
    const int lanes = 32, R = S == 1 ? 2 * FUSED_DENSE_ROWS : FUSED_DENSE_ROWS;
    int lane = threadIdx.x % lanes, warp = threadIdx.x / lanes, nwarps = blockDim.x / lanes;
    const float *w = params + fc->w_off;
    for (int j0 = warp * R; j0 < fc->out; j0 += nwarps * R) {
        int wr[R]; /* row offsets: 32-bit, the pointers would take twice the registers */
        float acc[R][S];
#pragma unroll
        for (int r = 0; r < R; r++) {
            wr[r] = min(j0 + r, fc->out - 1) * fc->in;
#pragma unroll
            for (int s = 0; s < S; s++)
                acc[r][s] = 0.0f;
        }
        float b[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            b[r] = fc->b_len ? __ldg(params + fc->b_off + min(j0 + r, fc->out - 1)) : 0.0f;
        for (int i0 = lane * W; i0 < fc->in; i0 += 2 * lanes * W) {
            /* Two column steps a batch, the second clamped (no exit test between the loads). */
            int i1 = min(i0 + lanes * W, fc->in - W);
            fused_vec<W> wv[2][R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                wv[0][r].load(w + wr[r] + i0);
                wv[1][r].load(w + wr[r] + i1);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int i = h ? i1 : i0;
                if (h && i0 + lanes * W >= fc->in)
                    break;
#pragma unroll
                for (int s = 0; s < S; s++)
#pragma unroll
                    for (int u = 0; u < W; u++) {
                        float xv = in[s * fc->in + i + u];
#pragma unroll
                        for (int r = 0; r < R; r++)
                            acc[r][s] += wv[h][r].v[u] * xv;
                    }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            int j = j0 + r;
#pragma unroll
            for (int s = 0; s < S; s++) {
                float v = fused_warp_sum(acc[r][s]);
                if (lane == 0 && s < ns && j < fc->out)
                    out[s * fc->out + j] = fused_act(fc->act, b[r] + v);
            }
        }
    }
}

template <int S>
__device__ static void fused_dense(const gt_fused_fc *fc, const float *__restrict__ params,
                                   const float *in, float *out, int ns)
{
    if (fused_dense_vec(fc, params))
        fused_dense_w<S, 4>(fc, params, in, out, ns);
    else
        fused_dense_w<S, 1>(fc, params, in, out, ns);
}

/* dx[s][i] = sum_k W[k][i] dy[s][k] (then through the activation whose output y is; y NULL:
 * none) for W columns a thread over one of kq ranges of k, consecutive threads on consecutive
 * weights, k in batches of FUSED_BATCH whose loads (index clamped, no exit test between them)
 * are in flight together. With kq > 1 the ranges'
 * partial sums go to scratch instead, and fused_dense_back adds them. */
template <int W>
__device__ static void fused_dense_back_w(const gt_fused_fc *fc, const float *__restrict__ w,
                                          const float *dy, const float *y, int act, float *dx,
                                          int len, int kq, float *scratch)
{
    int cols = len / W;
    for (int t = threadIdx.x; t < kq * cols; t += blockDim.x) {
        int q = t / cols, c = (t % cols) * W, s = c / fc->in, i = c % fc->in;
        int k0 = q * fc->out / kq, k1 = (q + 1) * fc->out / kq;
        const float *d = dy + s * fc->out;
        float acc[W];
#pragma unroll
        for (int u = 0; u < W; u++)
            acc[u] = 0.0f;
        for (int kb = k0; kb < k1; kb += FUSED_BATCH) {
            fused_vec<W> wv[FUSED_BATCH];
#pragma unroll
            for (int b = 0; b < FUSED_BATCH; b++)
                wv[b].load(w + (size_t)min(kb + b, k1 - 1) * fc->in + i);
#pragma unroll
            for (int b = 0; b < FUSED_BATCH; b++)
                if (kb + b < k1)
#pragma unroll
                    for (int u = 0; u < W; u++)
                        acc[u] += d[kb + b] * wv[b].v[u];
        }
#pragma unroll
        for (int u = 0; u < W; u++) {
            if (kq > 1)
                scratch[q * len + c + u] = acc[u];
            else
                dx[c + u] = y ? fused_act_grad(act, y[c + u], acc[u]) : acc[u];
        }
    }
}

/* dx[s][i] = sum_k W[k][i] dy[s][k], W in params (global), then through the activation whose
 * output y is (y NULL: none). A thread takes 4 columns (1 where the rows do not allow float4
 * loads) of one row over one of kq ranges of k, kq as large as the block allows so that every
 * thread has loads in flight; the ranges' partial sums meet in scratch (4 x blockDim floats)
 * and are added in range order. */
__device__ static void fused_dense_back(const gt_fused_fc *fc, const float *__restrict__ params,
                                        const float *dy, const float *y, int act, float *dx,
                                        int ns, float *scratch)
{
    const float *w = params + fc->w_off;
    int vec = fused_dense_vec(fc, params), len = ns * fc->in;
    int kq = (int)blockDim.x / (vec ? len / 4 : len);
    kq = kq < 1 ? 1 : kq > fc->out ? fc->out : kq;
    if (vec)
        fused_dense_back_w<4>(fc, w, dy, y, act, dx, len, kq, scratch);
    else
        fused_dense_back_w<1>(fc, w, dy, y, act, dx, len, kq, scratch);
    if (kq == 1)
        return;
    __syncthreads();
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        float acc = scratch[t];
        for (int q = 1; q < kq; q++)
            acc += scratch[q * len + t];
        dx[t] = y ? fused_act_grad(act, y[t], acc) : acc;
    }
}

/* Softmax cross-entropy of the block's rows of k logits, a warp per row, in double as on the CPU:
 * the row's loss and argmax hit to loss and hits, and (dz non-NULL) dz = (softmax - onehot) *
 * scale. */
__device__ static void fused_xent(const float *z, int k, const uint16_t *labels, int ns,
                                  float scale, double *loss, int *hits, float *dz)
{
    const int lanes = 32;
    int lane = threadIdx.x % lanes, warp = threadIdx.x / lanes, nwarps = blockDim.x / lanes;
    for (int s = warp; s < ns; s += nwarps) {
        const float *zr = z + s * k;
        float m = 0.0f;
        int arg = INT_MAX;
        for (int j = lane; j < k; j += lanes)
            if (arg == INT_MAX || zr[j] > m) {
                m = zr[j];
                arg = j;
            }
        fused_warp_argmax(&m, &arg);
        double zmax = m, sum = 0;
        for (int j = lane; j < k; j += lanes)
            sum += exp((double)zr[j] - zmax);
        sum = fused_warp_sum_double(sum);
        int label = labels[s];
        if (lane == 0) {
            loss[s] = log(sum) - ((double)zr[label] - zmax);
            hits[s] = arg == label;
        }
        if (dz)
            for (int j = lane; j < k; j += lanes) {
                double prob = exp((double)zr[j] - zmax) / sum;
                dz[s * k + j] = (float)((prob - (j == label)) * scale);
            }
    }
}

static __device__ void fused_store_rows(const float *src, float *dst, int ns, int len)
{
    for (int t = threadIdx.x; t < ns * len; t += blockDim.x)
        dst[t] = src[t];
}

/* The block's S rows (samples s0 .. s0 + ns - 1; rows past ns zero) through the three linear
 * layers, the loss and, when training, backward to the gradient at the first one's input (dp2),
 * keeping each layer's input and output gradient for the weight-gradient reduction. rows holds
 * S x [x, h1, h2, z, dz, dh2, dh1] and then fused_dense_back's scratch, x filled by the caller
 * before a barrier. */
template <int S>
__device__ static void fused_fc_rows(const gt_fused_net &f, const float *__restrict__ params,
                                     const uint16_t *labels, int s0, int ns, float scale,
                                     int train, float *rows)
{
    const gt_fused_fc *f1 = &f.fc[0], *f2 = &f.fc[1], *f3 = &f.fc[2];
    float *x = rows, *h1 = x + S * f1->in, *h2 = h1 + S * f1->out, *z = h2 + S * f2->out;
    float *dz = z + S * f3->out, *dh2 = dz + S * f3->out, *dh1 = dh2 + S * f2->out;
    float *scratch = dh1 + S * f1->out;
    fused_dense<S>(f1, params, x, h1, ns);
    __syncthreads();
    fused_dense<S>(f2, params, h1, h2, ns);
    __syncthreads();
    fused_dense<S>(f3, params, h2, z, ns);
    __syncthreads();
    fused_xent(z, f3->out, labels + s0, ns, scale, f.loss + s0, f.hits + s0, train ? dz : NULL);
    if (!train)
        return;
    __syncthreads();
    fused_dense_back(f3, params, dz, h2, f2->act, dh2, ns, scratch);
    __syncthreads();
    fused_dense_back(f2, params, dh2, h1, f1->act, dh1, ns, scratch);
    __syncthreads();
    fused_dense_back(f1, params, dh1, NULL, -1, f.dp2 + (size_t)s0 * f1->in, ns, scratch);
    fused_store_rows(h1, f.h1 + (size_t)s0 * f1->out, ns, f1->out);
    fused_store_rows(h2, f.h2 + (size_t)s0 * f2->out, ns, f2->out);
    fused_store_rows(dz, f.dz + (size_t)s0 * f3->out, ns, f3->out);
    fused_store_rows(dh2, f.dh2 + (size_t)s0 * f2->out, ns, f2->out);
    fused_store_rows(dh1, f.dh1 + (size_t)s0 * f1->out, ns, f1->out);
}

/* ---- backward through the convolution stages ------------------------------------------------- */

/* dr = the gradient at a stage's conv output (before its activation) for n_o channels, stored with
 * a zero border of pad: pooling backward spreads dpool * 1/k^2, zero where the floor dropped rows
 * and columns, then the activation's backward from its outputs a. a and dpool start at the first
 * of the channels. Outside the pooled area get gives a = dpool = 0, whose gradient is 0 through
 * every activation. */
__device__ static void fused_pool_act_back(const gt_fused_conv *cv, const float *a,
                                           const float *dpool, int n_o, float *dr, int pad)
{
    int ph = cv->out_h + 2 * pad, pw = cv->out_w + 2 * pad, act = cv->act;
    int pool_h = cv->pool_h, pool_w = cv->pool_w, out_h = cv->out_h, out_w = cv->out_w;
    float inv = 1.0f / (float)(FUSED_Q * FUSED_Q);
    fused_staged(
        n_o * ph * pw,
        [=](int t) {
            int o = t / (ph * pw), y = t % (ph * pw) / pw - pad, x = t % pw - pad;
            if (y < 0 || y >= pool_h * FUSED_Q || x < 0 || x >= pool_w * FUSED_Q)
                return make_float2(0.0f, 0.0f);
            return make_float2(a[(o * out_h + y) * out_w + x],
                               dpool[(o * pool_h + y / FUSED_Q) * pool_w + x / FUSED_Q]);
        },
        [=](int t, float2 v) { dr[t] = fused_act_grad(act, v.x, v.y * inv); });
}

/* The input gradient of a convolution for input channel c: with dyp the output gradient under a
 * zero border of K-1-pad, dx[iy][ix] = sum over o, ky, kx of dyp[o][iy + ky][ix + kx] times
 * w[o][K-1-ky][K-1-kx], where w holds channel c's K x K weights of every output channel. A thread
 * takes 2 x 2 outputs (the plan asks for an even input plane) over one group of output channels,
 * keeping the (K+1)^2 patch under them in registers (61 shared loads per 100 FMAs, not 200); the
 * groups' partial sums meet in scratch and are added in group order. */
__device__ static void fused_conv_dgrad(const gt_fused_conv *cv, const float *w, const float *dyp,
                                        float *scratch, float *dx)
{
    const int P = FUSED_K + 1, KK = FUSED_K * FUSED_K;
    int border = FUSED_K - 1 - cv->pad;
    int ph = cv->out_h + 2 * border, pw = cv->out_w + 2 * border, plane = cv->in_h * cv->in_w;
    int qw = cv->in_w / 2, quads = cv->in_h / 2 * qw;
    int groups = gt_fused_dgrad_groups(cv->in_h, cv->in_w, cv->out_c, FUSED_THREADS);
    for (int t = threadIdx.x; t < groups * quads; t += blockDim.x) {
        int g = t / quads, iy = t % quads / qw * 2, ix = t % qw * 2;
        int o0 = g * cv->out_c / groups, o1 = (g + 1) * cv->out_c / groups;
        float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        for (int o = o0; o < o1; o++) {
            const float *d = dyp + (o * ph + iy) * pw + ix, *wo = w + o * KK;
            float patch[P][P];
#pragma unroll
            for (int r = 0; r < P; r++)
#pragma unroll
                for (int q = 0; q < P; q++)
                    patch[r][q] = d[r * pw + q];
#pragma unroll
            for (int ky = 0; ky < FUSED_K; ky++)
#pragma unroll
                for (int kx = 0; kx < FUSED_K; kx++) {
                    float wv = wo[(FUSED_K - 1 - ky) * FUSED_K + (FUSED_K - 1 - kx)];
#pragma unroll
                    for (int qy = 0; qy < 2; qy++)
#pragma unroll
                        for (int qx = 0; qx < 2; qx++)
                            acc[qy][qx] += patch[qy + ky][qx + kx] * wv;
                }
        }
#pragma unroll
        for (int qy = 0; qy < 2; qy++)
#pragma unroll
            for (int qx = 0; qx < 2; qx++)
                scratch[g * plane + (iy + qy) * cv->in_w + ix + qx] = acc[qy][qx];
    }
    __syncthreads();
    for (int t = threadIdx.x; t < plane; t += blockDim.x) {
        float acc = 0.0f;
        for (int g = 0; g < groups; g++)
            acc += scratch[g * plane + t];
        dx[t] = acc;
    }
}

/* One sample's weight and bias gradient of n_o output channels of a convolution: gw[o][c][ky][kx]
 * = sum over the output plane of dy[o] times the padded input in[c] shifted by (ky, kx), gb[o] =
 * the sum of dy[o]. The output rows are cut into chunks so that every thread has work: a thread
 * takes one (o, c, ky) row of K weights (or one bias) over one chunk, the partial sums meet in
 * scratch and are added in chunk order. */
__device__ static void fused_conv_wgrad(const gt_fused_conv *cv, int n_o, const float *in,
                                        const float *dy, float *scratch, float *gw, float *gb)
{
    int in_h = cv->in_h + 2 * cv->pad, in_w = cv->in_w + 2 * cv->pad;
    int rows = n_o * cv->in_c * FUSED_K, items = rows + n_o, plane = cv->out_h * cv->out_w;
    int nchunk = (int)blockDim.x / items;
    nchunk = nchunk < 1 ? 1 : nchunk > cv->out_h ? cv->out_h : nchunk;
    float *bias_part = scratch + rows * nchunk * FUSED_K;
    for (int t = threadIdx.x; t < items * nchunk; t += blockDim.x) {
        int item = t / nchunk, ch = t % nchunk;
        int y0 = ch * cv->out_h / nchunk, y1 = (ch + 1) * cv->out_h / nchunk;
        if (item >= rows) {
            const float *d = dy + (item - rows) * plane;
            float acc = 0.0f;
            for (int i = y0 * cv->out_w; i < y1 * cv->out_w; i++)
                acc += d[i];
            bias_part[(item - rows) * nchunk + ch] = acc;
            continue;
        }
        int o = item / (cv->in_c * FUSED_K), c = item / FUSED_K % cv->in_c, ky = item % FUSED_K;
        float acc[FUSED_K];
#pragma unroll
        for (int kx = 0; kx < FUSED_K; kx++)
            acc[kx] = 0.0f;
        for (int y = y0; y < y1; y++) {
            const float *d = dy + o * plane + y * cv->out_w;
            const float *ir = in + (c * in_h + y + ky) * in_w;
            /* The K inputs under x slide along the row in registers: one new load per x. */
            float win[FUSED_K];
#pragma unroll
            for (int kx = 0; kx < FUSED_K; kx++)
                win[kx] = ir[kx];
            for (int x = 0; x < cv->out_w; x++) {
                float dv = d[x];
#pragma unroll
                for (int kx = 0; kx < FUSED_K; kx++)
                    acc[kx] += dv * win[kx];
#pragma unroll
                for (int kx = 0; kx < FUSED_K - 1; kx++)
                    win[kx] = win[kx + 1];
                win[FUSED_K - 1] = ir[min(x + FUSED_K, in_w - 1)];
            }
        }
#pragma unroll
        for (int kx = 0; kx < FUSED_K; kx++)
            scratch[(item * nchunk + ch) * FUSED_K + kx] = acc[kx];
    }
    __syncthreads();
    for (int t = threadIdx.x; t < rows * FUSED_K + n_o; t += blockDim.x) {
        float acc = 0.0f;
        if (t < rows * FUSED_K) {
            const float *p = scratch + (t / FUSED_K * nchunk) * FUSED_K + t % FUSED_K;
            for (int ch = 0; ch < nchunk; ch++)
                acc += p[ch * FUSED_K];
            gw[t] = acc;
        } else {
            const float *p = bias_part + (t - rows * FUSED_K) * nchunk;
            for (int ch = 0; ch < nchunk; ch++)
                acc += p[ch];
            gb[t - rows * FUSED_K] = acc;
        }
    }
}

/* ---- forward, the loss and backward to the fc input ------------------------------------------ */

/* S samples per block (1, 2 or FUSED_FC_SAMPLES: the launch takes the fewest that keep every
 * SM's L2 traffic small enough): both convolution stages of each sample in turn (train: keeping
 * the activation outputs for backward; the pooled outputs are always stored, p2 being the linear
 * layers' input), then fused_fc_rows on all S. The linear layers read their weights from L2
 * once per block, so a larger S reads them fewer times per step. Training, it also clears
 * res->nonfinite for the reduction kernel (one graph node fewer than a memset). */
template <int S>
__global__ static void __launch_bounds__(FUSED_THREADS, 2)
    fused_forward_kernel(const __grid_constant__ gt_fused_net f,
                         const float *__restrict__ params, const uint8_t *images,
                         const uint16_t *labels, int n, float scale, int train,
                         gt_cuda_result *res)
{
    extern __shared__ float fused_smem[];
    const gt_fused_conv *c1 = &f.conv[0], *c2 = &f.conv[1];
    const gt_fused_fc *fc = f.fc;
    if (train && blockIdx.x == 0 && threadIdx.x == 0)
        res->nonfinite = 0; /* the reduction, later on the stream, sets it */
    int s0 = blockIdx.x * S, ns = n - s0 < S ? n - s0 : S;
    int in1 = c1->in_c * (c1->in_h + 2 * c1->pad) * (c1->in_w + 2 * c1->pad);
    int in2 = c2->in_c * (c2->in_h + 2 * c2->pad) * (c2->in_w + 2 * c2->pad);
    int w1 = fused_weight_len(c1), w2 = fused_weight_len(c2);
    float *x = fused_smem, *p1 = x + in1, *wa = p1 + in2, *ba = wa + w1, *wb = ba + c1->out_c;
    float *rows = wb + w2 + c2->out_c;
    int len = S * (fc[0].in + 2 * fc[0].out + 2 * fc[1].out + 2 * fc[2].out);
    /* p1's border and the rows past ns stay zero: the dense loops run over all S rows. */
    for (int t = threadIdx.x; t < in2; t += blockDim.x)
        p1[t] = 0.0f;
    for (int t = ns * fc[0].in + threadIdx.x; t < len; t += blockDim.x)
        rows[t] = 0.0f;
    fused_copy(params + c1->w_off, wa, w1);
    fused_copy(params + c1->b_off, ba, (int)c1->b_len);
    fused_copy(params + c2->w_off, wb, w2);
    fused_copy(params + c2->b_off, wb + w2, (int)c2->b_len);
    for (int u = 0; u < ns; u++) {
        size_t s = (size_t)s0 + u;
        fused_load_input(f, images + s * f.in_len, c1->in_c, c1->in_h, c1->in_w, c1->pad, x);
        __syncthreads();
        fused_conv_stage(c1, x, wa, c1->b_len ? ba : NULL, train ? f.a1 + s * f.a1_len : NULL,
                         f.p1 + s * f.p1_len, p1, c2->pad);
        __syncthreads();
        fused_conv_stage(c2, p1, wb, c2->b_len ? wb + w2 : NULL,
                         train ? f.a2 + s * f.a2_len : NULL, f.p2 + s * f.p2_len,
                         rows + u * fc[0].in, 0);
        __syncthreads();
    }
    fused_fc_rows<S>(f, params, labels, s0, ns, scale, train, rows);
}

/* Sample blockIdx.x. Blocks y < conv1's channels take channel c = y: conv2's input gradient for
 * channel c (which needs the output gradient of every conv2 channel), back through c's pooling
 * and activation, and c's conv1 weight gradient. The blocks after take GT_FUSED_WGRAD_OUT conv2
 * output channels each and their conv2 weight gradient. The partials row holds [conv2 weights,
 * conv2 bias, conv1 weights, conv1 bias]. Five blocks an SM (48 registers a thread) run batch
 * 64's 640 blocks in one wave on 132 SMs; unbounded, the staging loops took it to 70. */
__global__ static void __launch_bounds__(FUSED_THREADS, 5)
    fused_backward_kernel(const __grid_constant__ gt_fused_net f, const float *params,
                          const uint8_t *images)
{
    extern __shared__ float fused_smem[];
    const gt_fused_conv *c1 = &f.conv[0], *c2 = &f.conv[1];
    const int KK = FUSED_K * FUSED_K;
    size_t s = blockIdx.x;
    int w2 = fused_weight_len(c2), w1 = fused_weight_len(c1), y = blockIdx.y;
    float *row = f.part + s * f.part_len, *a2 = f.a2 + s * f.a2_len, *dp2 = f.dp2 + s * f.p2_len;
    int plane2 = c2->out_h * c2->out_w, pool2 = c2->pool_h * c2->pool_w;
    if (y >= c1->out_c) {
        int o0 = (y - c1->out_c) * GT_FUSED_WGRAD_OUT, n_o = c2->out_c - o0;
        n_o = n_o < GT_FUSED_WGRAD_OUT ? n_o : GT_FUSED_WGRAD_OUT;
        float *dr2 = fused_smem, *in = dr2 + n_o * plane2;
        float *scratch = in + c2->in_c * (c2->in_h + 2 * c2->pad) * (c2->in_w + 2 * c2->pad);
        fused_pool_act_back(c2, a2 + o0 * plane2, dp2 + o0 * pool2, n_o, dr2, 0);
        fused_load_padded(f.p1 + s * f.p1_len, c2->in_c, c2->in_h, c2->in_w, c2->pad, in);
        __syncthreads();
        fused_conv_wgrad(c2, n_o, in, dr2, scratch, row + o0 * c2->in_c * KK, row + w2 + o0);
        return;
    }
    int c = y, border = FUSED_K - 1 - c2->pad;
    int dr2_len = c2->out_c * (c2->out_h + 2 * border) * (c2->out_w + 2 * border);
    int plane1 = c1->out_h * c1->out_w;
    float *dr2 = fused_smem, *w = dr2 + dr2_len, *dp1 = w + c2->out_c * KK;
    float *dr1 = dp1 + c2->in_h * c2->in_w, *x = dr1 + plane1;
    float *scratch = x + c1->in_c * (c1->in_h + 2 * c1->pad) * (c1->in_w + 2 * c1->pad);
    fused_pool_act_back(c2, a2, dp2, c2->out_c, dr2, border);
    const float *w2c = params + c2->w_off + c * KK;
    int o_stride = c2->in_c * KK;
    fused_staged(
        c2->out_c * KK, [=](int t) { return w2c[t / KK * o_stride + t % KK]; },
        [=](int t, float v) { w[t] = v; });
    fused_load_input(f, images + s * f.in_len, c1->in_c, c1->in_h, c1->in_w, c1->pad, x);
    __syncthreads();
    fused_conv_dgrad(c2, w, dr2, scratch, dp1);
    __syncthreads();
    fused_pool_act_back(c1, f.a1 + s * f.a1_len + c * plane1, dp1, 1, dr1, 0);
    __syncthreads();
    fused_conv_wgrad(c1, 1, x, dr1, scratch, row + w2 + c2->out_c + c * c1->in_c * KK,
                     row + w2 + c2->out_c + w1 + c);
}

/* ---- the batch sums -------------------------------------------------------------------------- */

/* grad[dst + e] = acc for one entry, flagging a non-finite one in res->nonfinite. */
__device__ __forceinline__ static void fused_put(float *grad, size_t e, float acc,
                                                 gt_cuda_result *res)
{
    grad[e] = acc;
    if (!isfinite(acc))
        atomicOr(&res->nonfinite, 1);
}

/* One tile of a linear layer's weight gradient, GT_FUSED_TILE_ROWS outputs j by
 * GT_FUSED_TILE_COLS inputs i: the block stages dy[s][j] and x[s][i] of FUSED_TILE_SAMPLES samples
 * at a time in shared memory (fused_staged: a thread's loads in flight together) and each thread
 * sums 8 of the tile's entries (one i, 8 j), samples in order, so that each row of dy and x is
 * read from L2 once per tile, not once per entry. */
enum { FUSED_TILE_SAMPLES = 64, FUSED_TILE_JT = 8 };

__device__ static void fused_reduce_outer(const gt_fused_seg *g, size_t tile, int n, float *grad,
                                          gt_cuda_result *res)
{
    const int TI = GT_FUSED_TILE_COLS, TJ = GT_FUSED_TILE_ROWS, SC = FUSED_TILE_SAMPLES;
    const int JT = FUSED_TILE_JT;
    __shared__ float xs[SC][TI], ds[SC][TJ];
    int ti = (g->x_len + TI - 1) / TI;
    int i0 = (int)(tile % ti) * TI, j0 = (int)(tile / ti) * TJ;
    int tx = threadIdx.x % TI, ty = threadIdx.x / TI;
    float acc[JT];
#pragma unroll
    for (int r = 0; r < JT; r++)
        acc[r] = 0.0f;
    for (int sb = 0; sb < n; sb += SC) {
        int sn = n - sb < SC ? n - sb : SC;
        __syncthreads();
        const float *x = g->x + (size_t)sb * g->x_len, *dy = g->dy + (size_t)sb * g->dy_len;
        int x_len = g->x_len, dy_len = g->dy_len;
        /* x's rows then dy's, one batch of loads per thread (SC x (TI + TJ) / blockDim). */
        fused_staged<SC * (TI + TJ) / FUSED_THREADS>(
            SC * (TI + TJ),
            [=](int e) {
                int xe = e < SC * TI, f = xe ? e : e - SC * TI, w = xe ? TI : TJ;
                int s = f / w, c = (xe ? i0 : j0) + f % w, len = xe ? x_len : dy_len;
                const float *src = xe ? x : dy;
                return s < sn && c < len ? src[(size_t)s * len + c] : 0.0f;
            },
            [&](int e, float v) {
                if (e < SC * TI)
                    xs[e / TI][e % TI] = v;
                else
                    ds[(e - SC * TI) / TJ][(e - SC * TI) % TJ] = v;
            });
        __syncthreads();
        if (ty * JT < TJ)
            for (int s = 0; s < sn; s++) {
                float xv = xs[s][tx];
#pragma unroll
                for (int r = 0; r < JT; r++)
                    acc[r] += ds[s][ty * JT + r] * xv;
            }
    }
    int i = i0 + tx;
#pragma unroll
    for (int r = 0; r < JT; r++) {
        int j = j0 + ty * JT + r;
        if (ty * JT < TJ && i < g->x_len && j < g->dy_len)
            fused_put(grad, g->dst + (size_t)j * g->x_len + i, acc[r], res);
    }
}

/* Entry t of a partials or bias segment: its batch sum, samples in order, the loop unrolled so
 * that many loads are in flight. */
__device__ static void fused_reduce_entry(const gt_fused_net &f, const gt_fused_seg *g, size_t t,
                                          int n, float *grad, gt_cuda_result *res)
{
    const float *p = g->kind == GT_FUSED_PART ? f.part + g->col + t : g->dy + t;
    size_t stride = g->kind == GT_FUSED_PART ? f.part_len : (size_t)g->dy_len;
    float acc = 0.0f;
#pragma unroll 32
    for (int s = 0; s < n; s++)
        acc += p[(size_t)s * stride];
    fused_put(grad, g->dst + t, acc, res);
}

/* The blocks of each segment in turn (gt_fused_seg_blocks: a tile each for the linear layers'
 * weights, a thread an entry for the rest), then one block whose thread 0 sums the per-sample
 * losses and hits into res (added to it when accumulate, else replacing it). Every entry is
 * summed over the samples in order, so results do not depend on scheduling; res->nonfinite
 * (zeroed by the forward kernel) is set when an entry is not finite. */
__global__ static void __launch_bounds__(FUSED_THREADS)
    fused_reduce_kernel(const __grid_constant__ gt_fused_net f, int nsegs, int n, float *grad,
                        gt_cuda_result *res, int accumulate)
{
    size_t b = blockIdx.x;
    int seg = 0;
    while (seg < nsegs && b >= gt_fused_seg_blocks(&f.seg[seg]))
        b -= gt_fused_seg_blocks(&f.seg[seg++]);
    if (seg < nsegs) {
        const gt_fused_seg *g = &f.seg[seg];
        size_t t = b * blockDim.x + threadIdx.x;
        if (g->kind == GT_FUSED_OUTER)
            fused_reduce_outer(g, b, n, grad, res);
        else if (t < g->len)
            fused_reduce_entry(f, g, t, n, grad, res);
        return;
    }
    if (threadIdx.x != 0)
        return;
    double loss = 0;
    int hits = 0;
#pragma unroll 32
    for (int s = 0; s < n; s++) {
        loss += f.loss[s];
        hits += f.hits[s];
    }
    res->loss_sum = accumulate ? res->loss_sum + loss : loss;
    res->correct = accumulate ? res->correct + hits : hits;
}
