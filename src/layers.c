/* layers.c - the CPU reference: every layer's forward and backward in plain C, and gt_cpu_net,
 * which runs a whole gt_model over one minibatch on one thread.
 *
 * Convolution and linear layers reduce to two small matrix products: gemm_acc (C += A * B, whose
 * innermost loop is a contiguous axpy over a row of B, register-blocked 4 rows x 16 columns) and
 * gemm_acc_nt (C += A * B^T, blocked dot products of contiguous rows). Convolution goes through
 * im2col one sample at a time (from a zero-padded copy when pad > 0). Its weight gradient is a dot
 * product over output positions, which for a small plane (LeNet's 8 x 8) is too short to pay for
 * its horizontal add, so backward im2cols a few samples at once and runs the dots across them;
 * each of those column matrices is then overwritten by its sample's column gradient for dx. */
#include "gputrain/layers.h"

#include "gputrain/counter_rng.h"
#include "gputrain/layer_kinds.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* GCC/Clang vector extensions: eight floats, lowered to AVX under -march=native and to pairs of
 * SSE registers otherwise. Rows are reached through an unaligned, aliasing view of the same type,
 * so they need no alignment; no vector crosses a function boundary, which keeps the ABI out of it. */
typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_row __attribute__((vector_size(32), aligned(4), may_alias));
#define V8_LOAD(p) (*(const v8f_row *)(p))
#define V8_AT(p) (*(v8f_row *)(p))
enum { VW = 8, MR = 4, DOT_M = 2, DOT_N = 4 };

static inline float v8_sum(const v8f *v)
{
    return (((*v)[0] + (*v)[4]) + ((*v)[1] + (*v)[5])) + (((*v)[2] + (*v)[6]) + ((*v)[3] + (*v)[7]));
}

/* An mr x (nv * 8) tile of C += A * B with A(m, k) = a[m * ams + k * aks]; the tile of C stays in
 * registers for the whole k loop. Always inlined with constant mr and nv, so the loops unroll. */
static inline __attribute__((always_inline)) void
gemm_tile(int mr, int nv, int kdim, const float *restrict a, size_t ams, size_t aks,
          const float *restrict b, size_t ldb, float *restrict c, size_t ldc)
{
    v8f acc[MR][2];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            acc[r][v] = V8_LOAD(c + r * ldc + v * VW);
    for (int k = 0; k < kdim; k++) {
        const float *brow = b + (size_t)k * ldb;
        v8f bv[2];
        for (int v = 0; v < nv; v++)
            bv[v] = V8_LOAD(brow + v * VW);
        for (int r = 0; r < mr; r++) {
            float av = a[r * ams + k * aks];
            for (int v = 0; v < nv; v++)
                acc[r][v] += av * bv[v];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            V8_AT(c + r * ldc + v * VW) = acc[r][v];
}

/* Columns [n0, ndim) that do not fill a vector, as scalar axpys. */
static void gemm_tail(int mdim, int n0, int ndim, int kdim, const float *restrict a, size_t ams,
                      size_t aks, const float *restrict b, size_t ldb, float *restrict c,
                      size_t ldc)
{
    for (int m = 0; m < mdim; m++)
        for (int k = 0; k < kdim; k++) {
            float av = a[m * ams + k * aks];
            for (int j = n0; j < ndim; j++)
                c[(size_t)m * ldc + j] += av * b[(size_t)k * ldb + j];
        }
}

/* Columns [0, nv * 8) of C against every row of A. The B panel (kdim x nv * 8) stays in cache
 * while the row blocks pass over it. */
static inline __attribute__((always_inline)) void
gemm_cols(int nv, int mdim, int kdim, const float *restrict a, size_t ams, size_t aks,
          const float *restrict b, size_t ldb, float *restrict c, size_t ldc)
{
    int m = 0;
    for (; m + MR <= mdim; m += MR)
        gemm_tile(MR, nv, kdim, a + m * ams, ams, aks, b, ldb, c + m * ldc, ldc);
    switch (mdim - m) {
    case 3:
        gemm_tile(3, nv, kdim, a + m * ams, ams, aks, b, ldb, c + m * ldc, ldc);
        break;
    case 2:
        gemm_tile(2, nv, kdim, a + m * ams, ams, aks, b, ldb, c + m * ldc, ldc);
        break;
    case 1:
        gemm_tile(1, nv, kdim, a + m * ams, ams, aks, b, ldb, c + m * ldc, ldc);
        break;
    default:
        break;
    }
}

/* C (mdim x ndim, row stride ldc) += A (mdim x kdim) * B (kdim x ndim, row stride ldb), where
 * A(m, k) = a[m * ams + k * aks], so one routine serves both A and A^T: 16-wide column panels,
 * then one 8-wide panel, then scalar columns. */
static void gemm_acc(int mdim, int ndim, int kdim, const float *restrict a, size_t ams, size_t aks,
                     const float *restrict b, size_t ldb, float *restrict c, size_t ldc)
{
    int n = 0;
    for (; n + 2 * VW <= ndim; n += 2 * VW)
        gemm_cols(2, mdim, kdim, a, ams, aks, b + n, ldb, c + n, ldc);
    if (n + VW <= ndim) {
        gemm_cols(1, mdim, kdim, a, ams, aks, b + n, ldb, c + n, ldc);
        n += VW;
    }
    gemm_tail(mdim, n, ndim, kdim, a, ams, aks, b, ldb, c, ldc);
}

/* An mr x nr block of dot products of rows, each row being nseg segments of kdim floats (A's at
 * stride aseg, B's at bseg): the eight partial sums stay in registers across segments, so short
 * rows (a conv's 8 x 8 output plane) are summed over several samples before the horizontal add. */
static inline __attribute__((always_inline)) void
dot_tile(int mr, int nr, int nseg, int kdim, const float *restrict a, size_t lda, size_t aseg,
         const float *restrict b, size_t ldb, size_t bseg, float *restrict c, size_t ldc)
{
    v8f acc[DOT_M][DOT_N] = {{{0}}};
    float tail[DOT_M][DOT_N] = {{0}};
    for (int sg = 0; sg < nseg; sg++) {
        const float *as = a + sg * aseg, *bs = b + sg * bseg;
        int k = 0;
        for (; k + VW <= kdim; k += VW) {
            v8f av[DOT_M], bv[DOT_N];
            for (int i = 0; i < mr; i++)
                av[i] = V8_LOAD(as + i * lda + k);
            for (int j = 0; j < nr; j++)
                bv[j] = V8_LOAD(bs + j * ldb + k);
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++)
                    acc[i][j] += av[i] * bv[j];
        }
        for (; k < kdim; k++)
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++)
                    tail[i][j] += as[i * lda + k] * bs[j * ldb + k];
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[i * ldc + j] += v8_sum(&acc[i][j]) + tail[i][j];
}

/* Columns [n, n + nr) of C += A * B^T over every row: B's nr rows stay in cache while the row
 * blocks of A pass over them. */
static inline __attribute__((always_inline)) void
dot_cols(int nr, int mdim, int nseg, int kdim, const float *restrict a, size_t lda, size_t aseg,
         const float *restrict b, size_t ldb, size_t bseg, float *restrict c, size_t ldc)
{
    int m = 0;
    for (; m + DOT_M <= mdim; m += DOT_M)
        dot_tile(DOT_M, nr, nseg, kdim, a + m * lda, lda, aseg, b, ldb, bseg, c + m * ldc, ldc);
    if (m < mdim)
        dot_tile(1, nr, nseg, kdim, a + m * lda, lda, aseg, b, ldb, bseg, c + m * ldc, ldc);
}

/* C (mdim x ndim) += A * B^T, where row m of A and row n of B are nseg segments of kdim floats:
 * A's row m, segment s at a + s * aseg + m * lda, and likewise for B. */
static void gemm_acc_nt(int mdim, int ndim, int nseg, int kdim, const float *restrict a,
                        size_t lda, size_t aseg, const float *restrict b, size_t ldb, size_t bseg,
                        float *restrict c, size_t ldc)
{
    int n = 0;
    for (; n + DOT_N <= ndim; n += DOT_N)
        dot_cols(DOT_N, mdim, nseg, kdim, a, lda, aseg, b + n * ldb, ldb, bseg, c + n, ldc);
    for (; n < ndim; n++)
        dot_cols(1, mdim, nseg, kdim, a, lda, aseg, b + n * ldb, ldb, bseg, c + n, ldc);
}

static float row_sum(const float *restrict x, size_t len)
{
    v8f acc = {0};
    size_t j = 0;
    for (; j + VW <= len; j += VW)
        acc += V8_LOAD(x + j);
    float s = v8_sum(&acc);
    for (; j < len; j++)
        s += x[j];
    return s;
}

static void fill_bias_rows(float *y, int rows, size_t len, const float *b)
{
    for (int r = 0; r < rows; r++)
        for (size_t j = 0; j < len; j++)
            y[r * len + j] = b ? b[r] : 0.0f;
}

/* ---- convolution ------------------------------------------------------------------------------ */

/* Samples whose column matrices conv backward holds at once: enough that the weight-gradient
 * dot products run over at least 256 output positions, up to 16 samples. */
static int conv_group(size_t plane)
{
    size_t g = (256 + plane - 1) / plane;
    return g > 16 ? 16 : (int)g;
}

/* Workspace: conv_group column matrices, then one zero-padded input sample. The padded size is
 * (oh + k - 1) x (ow + k - 1) whatever the padding, as oh = h + 2 * pad - k + 1. */
size_t gt_conv2d_col_len(int c, int k, int oh, int ow)
{
    size_t plane = (size_t)oh * ow;
    return (size_t)conv_group(plane) * c * k * k * plane + (size_t)c * (oh + k - 1) * (ow + k - 1);
}

/* x itself when pad is 0, else a copy of x with pad zeros around each channel, in xp. */
static const float *conv_pad_input(const float *restrict x, int c, int h, int w, int pad,
                                   float *restrict xp)
{
    if (pad == 0)
        return x;
    int hp = h + 2 * pad, wp = w + 2 * pad;
    memset(xp, 0, (size_t)c * hp * wp * sizeof *xp);
    for (int ci = 0; ci < c; ci++)
        for (int iy = 0; iy < h; iy++)
            memcpy(xp + ((size_t)ci * hp + iy + pad) * wp + pad, x + ((size_t)ci * h + iy) * w,
                   (size_t)w * sizeof *xp);
    return xp;
}

/* col[(ci*k + ky)*k + kx][oy*ow + ox] = xp[ci][oy + ky][ox + kx] from the padded input. The k
 * shifted copies of a source row are written together, which also keeps the compiler from
 * turning each short row into a memcpy call. */
static void conv_im2col(const float *restrict xp, int c, int hp, int wp, int k, int oh, int ow,
                        float *restrict col)
{
    size_t plane = (size_t)oh * ow;
    for (int ci = 0; ci < c; ci++)
        for (int ky = 0; ky < k; ky++)
            for (int oy = 0; oy < oh; oy++) {
                const float *src = xp + ((size_t)ci * hp + oy + ky) * wp;
                float *dst = col + (size_t)(ci * k + ky) * k * plane + oy * ow;
                int j = 0;
                for (; j + VW <= ow; j += VW)
                    for (int kx = 0; kx < k; kx++)
                        V8_AT(dst + kx * plane + j) = V8_LOAD(src + j + kx);
                for (; j < ow; j++)
                    for (int kx = 0; kx < k; kx++)
                        dst[kx * plane + j] = src[j + kx];
            }
}

/* The valid output columns [*lo, *hi) for kernel column kx: those whose input column is inside. */
static void conv_valid_range(int kx, int pad, int w, int ow, int *lo, int *hi)
{
    int l = pad - kx, h = w + pad - kx;
    *lo = l < 0 ? 0 : l > ow ? ow : l;
    *hi = h < *lo ? *lo : h > ow ? ow : h;
}

/* The adjoint of im2col straight into the unpadded dx (overwritten): every column entry is added
 * to the input it came from; entries that came from the padding are dropped. */
static void conv_col2im(const float *restrict col, int c, int h, int w, int k, int pad, int oh,
                        int ow, float *restrict dx)
{
    memset(dx, 0, (size_t)c * h * w * sizeof *dx);
    for (int ci = 0; ci < c; ci++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                int lo, hi, ylo = pad - ky, yhi = h + pad - ky, shift = kx - pad;
                conv_valid_range(kx, pad, w, ow, &lo, &hi);
                for (int oy = ylo > 0 ? ylo : 0; oy < oh && oy < yhi; oy++) {
                    float *dst = dx + ((size_t)ci * h + oy + ky - pad) * w;
                    const float *src = col + oy * ow;
                    int j = lo;
                    for (; j + VW <= hi; j += VW)
                        V8_AT(dst + j + shift) = V8_LOAD(dst + j + shift) + V8_LOAD(src + j);
                    for (; j < hi; j++)
                        dst[j + shift] += src[j];
                }
                col += (size_t)oh * ow;
            }
}

void gt_conv2d_forward(const float *x, int n, int c, int h, int w, const float *wt, const float *b,
                       int o, int k, int pad, float *y, float *col)
{
    int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1, r = c * k * k;
    size_t plane = (size_t)oh * ow, in_len = (size_t)c * h * w;
    float *xpad = col + (size_t)conv_group(plane) * r * plane;
    for (int i = 0; i < n; i++) {
        float *yi = y + (size_t)i * o * plane;
        const float *xp = conv_pad_input(x + i * in_len, c, h, w, pad, xpad);
        conv_im2col(xp, c, h + 2 * pad, w + 2 * pad, k, oh, ow, col);
        fill_bias_rows(yi, o, plane, b);
        gemm_acc(o, (int)plane, r, wt, (size_t)r, 1, col, plane, yi, plane);
    }
}

/* Samples go in groups of conv_group: their column matrices first give the weight gradient in one
 * pass, then each column matrix is overwritten by that sample's column gradient. */
void gt_conv2d_backward(const float *x, const float *dy, int n, int c, int h, int w,
                        const float *wt, int o, int k, int pad, float *dx, float *dw, float *db,
                        float *col)
{
    int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1, r = c * k * k;
    size_t plane = (size_t)oh * ow, in_len = (size_t)c * h * w, col_one = (size_t)r * plane;
    int group = conv_group(plane);
    float *xpad = col + group * col_one;
    for (int i0 = 0; i0 < n; i0 += group) {
        int g = n - i0 < group ? n - i0 : group;
        const float *dyg = dy + (size_t)i0 * o * plane;
        for (int s = 0; s < g; s++) {
            const float *xp = conv_pad_input(x + (i0 + s) * in_len, c, h, w, pad, xpad);
            conv_im2col(xp, c, h + 2 * pad, w + 2 * pad, k, oh, ow, col + s * col_one);
        }
        gemm_acc_nt(o, r, g, (int)plane, dyg, plane, (size_t)o * plane, col, plane, col_one, dw,
                    (size_t)r);
        if (db)
            for (int s = 0; s < g; s++)
                for (int oc = 0; oc < o; oc++)
                    db[oc] += row_sum(dyg + ((size_t)s * o + oc) * plane, plane);
        if (!dx)
            continue;
        for (int s = 0; s < g; s++) {
            float *cs = col + s * col_one;
            memset(cs, 0, col_one * sizeof *cs);
            gemm_acc(r, (int)plane, o, wt, 1, (size_t)r, dyg + (size_t)s * o * plane, plane, cs,
                     plane);
            conv_col2im(cs, c, h, w, k, pad, oh, ow, dx + (i0 + s) * in_len);
        }
    }
}

/* ---- linear ----------------------------------------------------------------------------------- */

void gt_linear_forward(const float *x, int n, int in, const float *wt, const float *b, int out,
                       float *y)
{
    for (int j = 0; j < out; j++)
        y[j] = b ? b[j] : 0.0f;
    for (int i = 1; i < n; i++)
        memcpy(y + (size_t)i * out, y, (size_t)out * sizeof *y);
    gemm_acc_nt(n, out, 1, in, x, (size_t)in, 0, wt, (size_t)in, 0, y, (size_t)out);
}

void gt_linear_backward(const float *x, const float *dy, int n, int in, const float *wt, int out,
                        float *dx, float *dw, float *db)
{
    gemm_acc(out, in, n, dy, 1, (size_t)out, x, (size_t)in, dw, (size_t)in);
    if (db)
        for (int i = 0; i < n; i++)
            for (int oc = 0; oc < out; oc++)
                db[oc] += dy[(size_t)i * out + oc];
    if (dx) {
        memset(dx, 0, (size_t)n * in * sizeof *dx);
        gemm_acc(n, in, out, dy, (size_t)out, 1, wt, (size_t)in, dx, (size_t)in);
    }
}

/* ---- pooling ---------------------------------------------------------------------------------- */

/* One channel plane of average pooling. Always inlined, so the k = 2 call (LeNet) unrolls. */
static inline __attribute__((always_inline)) void
avgpool_plane(const float *restrict x, int h, int w, int k, float *restrict y)
{
    int oh = h / k, ow = w / k;
    float inv = 1.0f / (float)(k * k);
    for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
            float s = 0;
            for (int ky = 0; ky < k; ky++)
                for (int kx = 0; kx < k; kx++)
                    s += x[(oy * k + ky) * w + ox * k + kx];
            y[oy * ow + ox] = s * inv;
        }
}

/* The adjoint of avgpool_plane; the rows and columns left over by the floor get zero. */
static inline __attribute__((always_inline)) void
avgpool_plane_backward(const float *restrict dy, int h, int w, int k, float *restrict dx)
{
    int oh = h / k, ow = w / k;
    float inv = 1.0f / (float)(k * k);
    for (int oy = 0; oy < oh; oy++)
        for (int ky = 0; ky < k; ky++) {
            float *dxrow = dx + (oy * k + ky) * w;
            for (int ox = 0; ox < ow; ox++)
                for (int kx = 0; kx < k; kx++)
                    dxrow[ox * k + kx] = dy[oy * ow + ox] * inv;
            for (int ix = ow * k; ix < w; ix++)
                dxrow[ix] = 0.0f;
        }
    for (int iy = oh * k; iy < h; iy++)
        for (int ix = 0; ix < w; ix++)
            dx[iy * w + ix] = 0.0f;
}

/* Windows k x k at stride k; trailing rows and columns that do not fill a window are dropped
 * (PyTorch's floor mode). */
void gt_avgpool_forward(const float *x, int n, int c, int h, int w, int k, float *y)
{
    size_t in_plane = (size_t)h * w, out_plane = (size_t)(h / k) * (w / k);
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        if (k == 2)
            avgpool_plane(x + pl * in_plane, h, w, 2, y + pl * out_plane);
        else
            avgpool_plane(x + pl * in_plane, h, w, k, y + pl * out_plane);
    }
}

void gt_avgpool_backward(const float *dy, int n, int c, int h, int w, int k, float *dx)
{
    size_t in_plane = (size_t)h * w, out_plane = (size_t)(h / k) * (w / k);
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        if (k == 2)
            avgpool_plane_backward(dy + pl * out_plane, h, w, 2, dx + pl * in_plane);
        else
            avgpool_plane_backward(dy + pl * out_plane, h, w, k, dx + pl * in_plane);
    }
}

/* arg holds, per output, the index of the first maximum within its input channel plane (h x w). */
void gt_maxpool_forward(const float *x, int n, int c, int h, int w, int k, float *y, int32_t *arg)
{
    int oh = h / k, ow = w / k;
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        const float *xp = x + pl * h * w;
        float *yp = y + pl * oh * ow;
        int32_t *ap = arg + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                int best = oy * k * w + ox * k;
                for (int ky = 0; ky < k; ky++)
                    for (int kx = 0; kx < k; kx++) {
                        int at = (oy * k + ky) * w + ox * k + kx;
                        if (xp[at] > xp[best])
                            best = at;
                    }
                yp[oy * ow + ox] = xp[best];
                ap[oy * ow + ox] = best;
            }
    }
}

void gt_maxpool_backward(const float *dy, const int32_t *arg, int n, int c, int h, int w, int k,
                         float *dx)
{
    size_t plane_out = (size_t)(h / k) * (w / k);
    memset(dx, 0, (size_t)n * c * h * w * sizeof *dx);
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        for (size_t j = 0; j < plane_out; j++)
            dx[pl * h * w + arg[pl * plane_out + j]] += dy[pl * plane_out + j];
}

/* ---- activations and dropout ------------------------------------------------------------------ */

int gt_act_forward(gt_layer_kind kind, const float *x, float *y, size_t len)
{
    switch (kind) {
    case GT_RELU:
        for (size_t j = 0; j < len; j++)
            y[j] = x[j] > 0.0f ? x[j] : 0.0f;
        break;
    case GT_SIGMOID:
        for (size_t j = 0; j < len; j++)
            y[j] = 1.0f / (1.0f + expf(-x[j]));
        break;
    case GT_TANH:
        for (size_t j = 0; j < len; j++)
            y[j] = tanhf(x[j]);
        break;
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_DROPOUT:
    default:
        return -1;
    }
    return 0;
}

int gt_act_backward(gt_layer_kind kind, const float *y, const float *dy, float *dx, size_t len)
{
    switch (kind) {
    case GT_RELU:
        for (size_t j = 0; j < len; j++)
            dx[j] = y[j] > 0.0f ? dy[j] : 0.0f;
        break;
    case GT_SIGMOID:
        for (size_t j = 0; j < len; j++)
            dx[j] = dy[j] * y[j] * (1.0f - y[j]);
        break;
    case GT_TANH:
        for (size_t j = 0; j < len; j++)
            dx[j] = dy[j] * (1.0f - y[j] * y[j]);
        break;
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_DROPOUT:
    default:
        return -1;
    }
    return 0;
}

void gt_dropout_forward(const float *x, float *y, uint8_t *mask, int n, size_t len, float p,
                        uint64_t seed, uint32_t epoch, const uint32_t *sample_ids, uint32_t layer)
{
    float scale = 1.0f / (1.0f - p);
    for (int i = 0; i < n; i++) {
        uint64_t key = gt_dropout_key(seed, epoch, sample_ids[i], layer);
        size_t base = (size_t)i * len;
        for (size_t j = 0; j < len; j++) {
            uint8_t keep = gt_counter_uniform(key, (uint32_t)j) >= p;
            mask[base + j] = keep;
            y[base + j] = keep ? x[base + j] * scale : 0.0f;
        }
    }
}

void gt_dropout_backward(const float *dy, const uint8_t *mask, float *dx, size_t n_len, float p)
{
    float scale = 1.0f / (1.0f - p);
    for (size_t j = 0; j < n_len; j++)
        dx[j] = mask[j] ? dy[j] * scale : 0.0f;
}

/* ---- loss and input --------------------------------------------------------------------------- */

/* Each row in double: log-sum-exp shifted by the row maximum, so large logits cannot overflow. */
double gt_softmax_xent(const float *logits, const uint8_t *labels, int n, int k, float scale,
                       float *dlogits, int *correct)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * k;
        int best = 0;
        for (int j = 1; j < k; j++)
            if (z[j] > z[best])
                best = j;
        double zmax = z[best], sum = 0;
        for (int j = 0; j < k; j++)
            sum += exp((double)z[j] - zmax);
        total += log(sum) - ((double)z[labels[i]] - zmax);
        if (correct && best == labels[i])
            (*correct)++;
        if (!dlogits)
            continue;
        float *d = dlogits + (size_t)i * k;
        for (int j = 0; j < k; j++) {
            double prob = exp((double)z[j] - zmax) / sum;
            d[j] = (float)((prob - (j == labels[i])) * scale);
        }
    }
    return total;
}

void gt_input_normalize(const uint8_t *src, float *dst, size_t len)
{
    for (size_t j = 0; j < len; j++)
        dst[j] = (float)src[j] / 255.0f;
}

/* ---- a whole network -------------------------------------------------------------------------- */

/* count * per floats-or-bytes of elem size each, or NULL when the product overflows. */
static void *net_alloc(size_t count, size_t per, size_t elem)
{
    size_t items, bytes;
    if (__builtin_mul_overflow(count, per, &items) || __builtin_mul_overflow(items, elem, &bytes))
        return NULL;
    return gt_alloc(bytes);
}

/* Every shape, length and offset gt_cpu_net_step indexes by must agree with the chain of layers
 * and the parameter array, so that a hand-built or damaged model fails here, not in a buffer. */
static int net_check_model(const gt_model *m, gt_err *e)
{
    if (m->nlayers < 1 || m->nlayers > GT_MAX_LAYERS)
        return gt_fail(e, "model %s: %d layers (expected 1 to %d)", m->name, m->nlayers,
                       GT_MAX_LAYERS);
    int c = m->in_c, h = m->in_h, w = m->in_w;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        long long out[3];
        gt_err why;
        if (gt_layer_out_shape(L, out, &why))
            return gt_fail(e, "model %s: layer %d: %s", m->name, l, why.msg);
        long long oc = out[0], oh = out[1], ow = out[2];
        int ok = c >= 1 && h >= 1 && w >= 1 && oc >= 1 && oh >= 1 && ow >= 1 &&
                 oh <= INT_MAX && ow <= INT_MAX && L->in_c == c && L->in_h == h && L->in_w == w &&
                 L->out_c == oc && L->out_h == oh && L->out_w == ow &&
                 L->in_len == (size_t)c * h * w && L->out_len == (size_t)oc * oh * ow;
        size_t want_w = L->kind == GT_CONV     ? (size_t)oc * c * L->k * L->k
                        : L->kind == GT_LINEAR ? (size_t)oc * L->in_len
                                               : 0;
        ok = ok && L->w_len == want_w && (L->b_len == 0 || (want_w && L->b_len == (size_t)oc)) &&
             L->w_off <= m->nparams && L->w_len <= m->nparams - L->w_off &&
             L->b_off <= m->nparams && L->b_len <= m->nparams - L->b_off;
        if (!ok)
            return gt_fail(e, "model %s: layer %d (kind %d) does not fit its %d x %d x %d input",
                           m->name, l, (int)L->kind, c, h, w);
        c = (int)oc, h = (int)oh, w = (int)ow;
    }
    size_t outputs = m->layers[m->nlayers - 1].out_len;
    if (m->nclasses < 1 || outputs != (size_t)m->nclasses)
        return gt_fail(e, "model %s: last layer gives %zu outputs for %d classes", m->name,
                       outputs, m->nclasses);
    return 0;
}

int gt_cpu_net_create(gt_cpu_net *net, const gt_model *m, int max_batch, gt_err *e)
{
    memset(net, 0, sizeof *net);
    if (max_batch < 1)
        return gt_fail(e, "batch size %d: must be at least 1", max_batch);
    if (net_check_model(m, e))
        return -1;
    size_t in_len = m->layers[0].in_len, max_act = in_len, col_len = 0;
    net->m = m;
    net->max_batch = max_batch;
    size_t nb = (size_t)max_batch;
    int layer = 0; /* whose output was being allocated when one failed; 0: the input */
    int ok = (net->xbytes = net_alloc(nb, in_len, 1)) && (net->ybytes = net_alloc(nb, 1, 1)) &&
             (net->act[0] = net_alloc(nb, in_len, sizeof(float)));
    for (int l = 0; ok && l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        layer = l + 1;
        max_act = L->out_len > max_act ? L->out_len : max_act;
        ok = (net->act[l + 1] = net_alloc(nb, L->out_len, sizeof(float))) != NULL;
        if (ok && L->kind == GT_DROPOUT)
            ok = (net->mask[l] = net_alloc(nb, L->out_len, 1)) != NULL;
        if (ok && L->kind == GT_MAXPOOL)
            ok = (net->arg[l] = net_alloc(nb, L->out_len, sizeof(int32_t))) != NULL;
        if (L->kind == GT_CONV) {
            size_t len = gt_conv2d_col_len(L->in_c, L->k, L->out_h, L->out_w);
            col_len = len > col_len ? len : col_len;
        }
    }
    char what[96]; /* the buffer being allocated, for the message */
    if (ok)
        snprintf(what, sizeof what, "the gradients (%zu values a sample)", max_act);
    else if (layer)
        snprintf(what, sizeof what, "the output of layer %d (%zu values a sample)", layer,
                 m->layers[layer - 1].out_len);
    else
        snprintf(what, sizeof what, "the input (%zu values a sample)", in_len);
    ok = ok && (net->grad_act = net_alloc(nb, max_act, sizeof(float))) &&
         (net->grad_act2 = net_alloc(nb, max_act, sizeof(float)));
    if (ok && col_len) {
        snprintf(what, sizeof what, "the unfolded convolution input (%zu values)", col_len);
        ok = (net->col = net_alloc(col_len, 1, sizeof(float))) != NULL;
    }
    if (!ok) {
        gt_cpu_net_destroy(net);
        return gt_fail(e, "model %s: out of memory for the CPU buffers of %d samples at a time: "
                       "%s", m->name, max_batch, what);
    }
    return 0;
}

void gt_cpu_net_destroy(gt_cpu_net *net)
{
    gt_free(net->xbytes);
    gt_free(net->ybytes);
    for (int l = 0; l <= GT_MAX_LAYERS; l++)
        gt_free(net->act[l]);
    for (int l = 0; l < GT_MAX_LAYERS; l++) {
        gt_free(net->mask[l]);
        gt_free(net->arg[l]);
    }
    gt_free(net->grad_act);
    gt_free(net->grad_act2);
    gt_free(net->col);
    memset(net, 0, sizeof *net);
}

static void net_gather(gt_cpu_net *net, const gt_batch *b)
{
    size_t in_len = net->m->layers[0].in_len;
    for (int i = 0; i < b->n; i++) {
        memcpy(net->xbytes + i * in_len, b->ds->images + (size_t)b->idx[i] * in_len, in_len);
        net->ybytes[i] = b->ds->labels[b->idx[i]];
    }
    gt_input_normalize(net->xbytes, net->act[0], (size_t)b->n * in_len);
}

/* A batch larger than max_batch would overrun the buffers: it returns NaN and counts nothing. */
double gt_cpu_net_step(gt_cpu_net *net, const float *params, const gt_batch *b, int train,
                       float *grad, int *correct)
{
    const gt_model *m = net->m;
    int n = b->n, hits = 0;
    if (correct)
        *correct = 0;
    if (n < 1 || n > net->max_batch)
        return n == 0 ? 0.0 : NAN;
    const gt_layer_kind_row *rows[GT_MAX_LAYERS];
    for (int l = 0; l < m->nlayers; l++)
        if (!(rows[l] = gt_layer_kind_of(m->layers[l].kind)))
            return NAN; /* gt_cpu_net_create refuses such a model; this one changed since */
    net_gather(net, b);
    for (int l = 0; l < m->nlayers; l++)
        rows[l]->cpu_forward(net, l, params, b, train);
    float *dy = net->grad_act, *dx = net->grad_act2;
    double loss = gt_softmax_xent(net->act[m->nlayers], net->ybytes, n, m->nclasses,
                                  1.0f / (float)n, grad ? dy : NULL, &hits);
    if (correct)
        *correct = hits;
    if (!grad)
        return loss;
    memset(grad, 0, m->nparams * sizeof *grad);
    for (int l = m->nlayers - 1; l >= 0; l--) {
        if (l == 0 && !rows[l]->param_prefix)
            break; /* the input needs no gradient */
        rows[l]->cpu_backward(net, l, params, grad, n, train, dy, l ? dx : NULL);
        float *t = dy;
        dy = dx;
        dx = t;
    }
    return loss;
}
