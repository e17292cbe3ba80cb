/* layers.c - the CPU reference: every layer's forward and backward in plain C (cpu_net.c runs a
 * whole model from them).
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

#include <math.h>
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

static int conv_out(int h, int k, int pad, int stride)
{
    return (h + 2 * pad - k) / stride + 1;
}

/* Workspace: conv_group column matrices, then one zero-padded input sample. */
size_t gt_conv2d_col_len_strided(int c, int h, int w, int k, int pad, int stride)
{
    size_t plane = (size_t)conv_out(h, k, pad, stride) * conv_out(w, k, pad, stride);
    return (size_t)conv_group(plane) * c * k * k * plane + (size_t)c * (h + 2 * pad) * (w + 2 * pad);
}

/* At stride 1 the padded input is (oh + k - 1) x (ow + k - 1) whatever the padding. */
size_t gt_conv2d_col_len(int c, int k, int oh, int ow)
{
    return gt_conv2d_col_len_strided(c, oh + k - 1, ow + k - 1, k, 0, 1);
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

/* col[(ci*k + ky)*k + kx][oy*ow + ox] = xp[ci][oy*s + ky][ox*s + kx] from the padded input, for
 * a stride s above 1: plain loops (the stride-1 path below is the one LeNet's speed rests on). */
static void conv_im2col_strided(const float *restrict xp, int c, int hp, int wp, int k, int s,
                                int oh, int ow, float *restrict col)
{
    for (int ci = 0; ci < c; ci++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++)
                for (int oy = 0; oy < oh; oy++) {
                    const float *src = xp + ((size_t)ci * hp + oy * s + ky) * wp + kx;
                    for (int ox = 0; ox < ow; ox++)
                        *col++ = src[ox * s];
                }
}

/* The same at stride 1. The k shifted copies of a source row are written together, which also
 * keeps the compiler from turning each short row into a memcpy call. */
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

/* The adjoint of conv_im2col_strided into the unpadded dx (overwritten). */
static void conv_col2im_strided(const float *restrict col, int c, int h, int w, int k, int pad,
                                int s, int oh, int ow, float *restrict dx)
{
    memset(dx, 0, (size_t)c * h * w * sizeof *dx);
    for (int ci = 0; ci < c; ci++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++)
                for (int oy = 0; oy < oh; oy++) {
                    int iy = oy * s + ky - pad;
                    for (int ox = 0; ox < ow; ox++, col++) {
                        int ix = ox * s + kx - pad;
                        if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                            dx[((size_t)ci * h + iy) * w + ix] += *col;
                    }
                }
}

/* One sample's column matrix from its unpadded input, at any stride. */
static void conv_columns(const float *x, int c, int h, int w, int k, int pad, int stride, int oh,
                         int ow, float *xpad, float *col)
{
    const float *xp = conv_pad_input(x, c, h, w, pad, xpad);
    if (stride == 1)
        conv_im2col(xp, c, h + 2 * pad, w + 2 * pad, k, oh, ow, col);
    else
        conv_im2col_strided(xp, c, h + 2 * pad, w + 2 * pad, k, stride, oh, ow, col);
}

void gt_conv2d_forward_strided(const float *x, int n, int c, int h, int w, const float *wt,
                               const float *b, int o, int k, int pad, int stride, float *y,
                               float *col)
{
    int oh = conv_out(h, k, pad, stride), ow = conv_out(w, k, pad, stride), r = c * k * k;
    size_t plane = (size_t)oh * ow, in_len = (size_t)c * h * w;
    float *xpad = col + (size_t)conv_group(plane) * r * plane;
    for (int i = 0; i < n; i++) {
        float *yi = y + (size_t)i * o * plane;
        conv_columns(x + i * in_len, c, h, w, k, pad, stride, oh, ow, xpad, col);
        fill_bias_rows(yi, o, plane, b);
        gemm_acc(o, (int)plane, r, wt, (size_t)r, 1, col, plane, yi, plane);
    }
}

void gt_conv2d_forward(const float *x, int n, int c, int h, int w, const float *wt, const float *b,
                       int o, int k, int pad, float *y, float *col)
{
    gt_conv2d_forward_strided(x, n, c, h, w, wt, b, o, k, pad, 1, y, col);
}

/* Samples go in groups of conv_group: their column matrices first give the weight gradient in one
 * pass, then each column matrix is overwritten by that sample's column gradient. */
void gt_conv2d_backward_strided(const float *x, const float *dy, int n, int c, int h, int w,
                                const float *wt, int o, int k, int pad, int stride, float *dx,
                                float *dw, float *db, float *col)
{
    int oh = conv_out(h, k, pad, stride), ow = conv_out(w, k, pad, stride), r = c * k * k;
    size_t plane = (size_t)oh * ow, in_len = (size_t)c * h * w, col_one = (size_t)r * plane;
    int group = conv_group(plane);
    float *xpad = col + group * col_one;
    for (int i0 = 0; i0 < n; i0 += group) {
        int g = n - i0 < group ? n - i0 : group;
        const float *dyg = dy + (size_t)i0 * o * plane;
        for (int s = 0; s < g; s++)
            conv_columns(x + (i0 + s) * in_len, c, h, w, k, pad, stride, oh, ow, xpad,
                         col + s * col_one);
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
            if (stride == 1)
                conv_col2im(cs, c, h, w, k, pad, oh, ow, dx + (i0 + s) * in_len);
            else
                conv_col2im_strided(cs, c, h, w, k, pad, stride, oh, ow, dx + (i0 + s) * in_len);
        }
    }
}

void gt_conv2d_backward(const float *x, const float *dy, int n, int c, int h, int w,
                        const float *wt, int o, int k, int pad, float *dx, float *dw, float *db,
                        float *col)
{
    gt_conv2d_backward_strided(x, dy, n, c, h, w, wt, o, k, pad, 1, dx, dw, db, col);
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

/* Global average pooling: each channel plane to its mean. */
void gt_gap_forward(const float *x, int n, int c, size_t plane, float *y)
{
    float inv = 1.0f / (float)plane;
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        y[pl] = row_sum(x + pl * plane, plane) * inv;
}

void gt_gap_backward(const float *dy, int n, int c, size_t plane, float *dx)
{
    float inv = 1.0f / (float)plane;
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        for (size_t j = 0; j < plane; j++)
            dx[pl * plane + j] = dy[pl] * inv;
}

/* ---- batch normalisation and the residual add --------------------------------------------------- */

/* Channel ch of sample i starts at x + (i * c + ch) * plane. Sums run in double, so a channel of a
 * whole batch (128 x 32 x 32 values) keeps float precision. */
static double bn_channel_sum(const float *x, int n, int c, size_t plane, int ch, double shift,
                             int square)
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        const float *p = x + ((size_t)i * c + ch) * plane;
        for (size_t j = 0; j < plane; j++) {
            double d = (double)p[j] - shift;
            s += square ? d * d : d;
        }
    }
    return s;
}

/* y = gamma * (x - mean) * invstd + beta over channel ch. */
static void bn_channel_apply(const float *x, int n, int c, size_t plane, int ch, float gamma,
                             float beta, float mean, float invstd, float *y)
{
    float scale = gamma * invstd; /* x - mean first: folding mean into beta would cancel badly */
    for (int i = 0; i < n; i++) {
        size_t at = ((size_t)i * c + ch) * plane;
        for (size_t j = 0; j < plane; j++)
            y[at + j] = (x[at + j] - mean) * scale + beta;
    }
}

void gt_batchnorm_forward_train(const float *x, int n, int c, size_t plane, const float *gamma,
                                const float *beta, double momentum, float *running_mean,
                                float *running_var, float *y, float *save)
{
    double m = (double)n * (double)plane;
    for (int ch = 0; ch < c; ch++) {
        double mean = bn_channel_sum(x, n, c, plane, ch, 0, 0) / m;
        double var = bn_channel_sum(x, n, c, plane, ch, mean, 1) / m;
        double unbiased = m > 1 ? var * m / (m - 1) : var;
        save[ch] = (float)mean;
        save[c + ch] = (float)(1.0 / sqrt(var + GT_BN_EPS));
        /* momentum 1 writes the batch's own statistics, whatever the array held before */
        running_mean[ch] = momentum == 1 ? (float)mean
                                         : (float)((1 - momentum) * running_mean[ch] + momentum * mean);
        running_var[ch] = momentum == 1
                              ? (float)unbiased
                              : (float)((1 - momentum) * running_var[ch] + momentum * unbiased);
        bn_channel_apply(x, n, c, plane, ch, gamma[ch], beta[ch], save[ch], save[c + ch], y);
    }
}

void gt_batchnorm_forward_eval(const float *x, int n, int c, size_t plane, const float *gamma,
                               const float *beta, const float *running_mean,
                               const float *running_var, float *y, float *save)
{
    for (int ch = 0; ch < c; ch++) {
        save[ch] = running_mean[ch];
        save[c + ch] = (float)(1.0 / sqrt((double)running_var[ch] + GT_BN_EPS));
        bn_channel_apply(x, n, c, plane, ch, gamma[ch], beta[ch], save[ch], save[c + ch], y);
    }
}

/* With batch statistics, mean and variance depend on every x of the channel:
 * dx = gamma * invstd / m * (m * dy - sum(dy) - xhat * sum(dy * xhat)). With running statistics
 * the layer is a per-channel affine map: dx = gamma * invstd * dy. */
void gt_batchnorm_backward(const float *x, const float *dy, int n, int c, size_t plane,
                           const float *gamma, const float *save, int batch_stats, float *dx,
                           float *dgamma, float *dbeta)
{
    double m = (double)n * (double)plane;
    for (int ch = 0; ch < c; ch++) {
        double mean = save[ch], invstd = save[c + ch], sum_dy = 0, sum_dy_xhat = 0;
        for (int i = 0; i < n; i++) {
            size_t at = ((size_t)i * c + ch) * plane;
            for (size_t j = 0; j < plane; j++) {
                sum_dy += dy[at + j];
                sum_dy_xhat += (double)dy[at + j] * (((double)x[at + j] - mean) * invstd);
            }
        }
        dgamma[ch] += (float)sum_dy_xhat;
        dbeta[ch] += (float)sum_dy;
        if (!dx)
            continue;
        double k = gamma[ch] * invstd;
        for (int i = 0; i < n; i++) {
            size_t at = ((size_t)i * c + ch) * plane;
            for (size_t j = 0; j < plane; j++) {
                double g = dy[at + j];
                if (batch_stats)
                    g -= (sum_dy + ((double)x[at + j] - mean) * invstd * sum_dy_xhat) / m;
                dx[at + j] = (float)(k * g);
            }
        }
    }
}

void gt_add(const float *a, const float *b, float *y, size_t len)
{
    for (size_t j = 0; j < len; j++)
        y[j] = a[j] + b[j];
}

/* ---- activations and dropout ------------------------------------------------------------------ */

int gt_act_forward(gt_layer_kind kind, const float *x, float *y, size_t len)
{
    switch (kind) {
    case GT_RELU:
        for (size_t j = 0; j < len; j++)
            y[j] = x[j] > 0.0f ? x[j] : 0.0f;
        return 0;
    case GT_SIGMOID:
        for (size_t j = 0; j < len; j++)
            y[j] = 1.0f / (1.0f + expf(-x[j]));
        return 0;
    case GT_TANH:
        for (size_t j = 0; j < len; j++)
            y[j] = tanhf(x[j]);
        return 0;
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_DROPOUT:
    case GT_BATCHNORM:
    case GT_GAP:
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
    case GT_RES_END:
        break;
    }
    return -1; /* not an activation, or not a kind at all */
}

int gt_act_backward(gt_layer_kind kind, const float *y, const float *dy, float *dx, size_t len)
{
    switch (kind) {
    case GT_RELU:
        for (size_t j = 0; j < len; j++)
            dx[j] = y[j] > 0.0f ? dy[j] : 0.0f;
        return 0;
    case GT_SIGMOID:
        for (size_t j = 0; j < len; j++)
            dx[j] = dy[j] * y[j] * (1.0f - y[j]);
        return 0;
    case GT_TANH:
        for (size_t j = 0; j < len; j++)
            dx[j] = dy[j] * (1.0f - y[j] * y[j]);
        return 0;
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_DROPOUT:
    case GT_BATCHNORM:
    case GT_GAP:
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
    case GT_RES_END:
        break;
    }
    return -1; /* not an activation, or not a kind at all */
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

int gt_argmax(const float *z, int k)
{
    int best = 0;
    for (int j = 1; j < k; j++)
        if (z[j] > z[best])
            best = j;
    return best;
}

/* Each row in double: log-sum-exp shifted by the row maximum, so large logits cannot overflow. */
double gt_softmax_xent(const float *logits, const uint16_t *labels, int n, int k, float scale,
                       float *dlogits, int *correct)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * k;
        int best = gt_argmax(z, k);
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
