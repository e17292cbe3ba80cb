/* test_layers.c - the CPU reference layers against hand-computed values, naive loops and central
 * finite differences: every layer's backward, the loss, dropout's counter-keyed mask, and a whole
 * small network through gt_cpu_net_step. Models are built by hand here, independent of model.c. */
#include "gputrain/counter_rng.h"
#include "gputrain/cpu_net.h"
#include "gputrain/layer_kinds.h"
#include "gputrain/layers.h"
#include "test_util.h"

#define FD_EPS 1e-3f
#define FD_PICKS 24

static gt_rng rng;

static float *fill_uniform(size_t len, float lo, float hi)
{
    float *p = gt_alloc(len * sizeof *p);
    for (size_t i = 0; i < len; i++)
        p[i] = lo + (hi - lo) * (float)gt_rng_uniform(&rng);
    return p;
}

static float *fill_const(size_t len, float v)
{
    float *p = gt_alloc(len * sizeof *p);
    for (size_t i = 0; i < len; i++)
        p[i] = v;
    return p;
}

/* ---- finite differences ------------------------------------------------------------------------ */

/* A scalar function of the buffers a test case owns, evaluated in double. */
typedef double (*loss_fn)(void *ctx);

static int grad_agrees(double ana, double num, double floor)
{
    return fabs(num - ana) <= 1e-2 * fmax(fabs(num), fabs(ana)) + floor;
}

/* Compares ana[j] with the central difference of f in v[j] for FD_PICKS random j (all j when
 * fewer). Tolerance: 1e-2 relative plus floor_frac of the tensor's largest gradient, which covers
 * the float rounding in f (a few 1e-8 of the loss, magnified 500 times by the step) and stays far
 * below what a wrong index, a missing term or a wrong scale produces. With kinks (relu, max
 * pooling inside f), a relu input or a pooling tie within the step of v[j] spoils the central
 * difference; one side of v[j] is then still smooth, so a one-sided difference may stand in. */
static void check_grad_with(const char *what, float *v, const float *ana, size_t len, loss_fn f,
                            void *ctx, double floor_frac, int kinks)
{
    double gmax = 0;
    for (size_t j = 0; j < len; j++)
        gmax = fmax(gmax, fabs(ana[j]));
    CHECK_MSG(gmax > 0, "%s: gradient is all zeros", what);
    size_t picks = len < FD_PICKS ? len : FD_PICKS;
    for (size_t t = 0; t < picks; t++) {
        size_t j = len <= FD_PICKS ? t : gt_rng_below(&rng, (uint32_t)len);
        float keep = v[j], hi = keep + FD_EPS, lo = keep - FD_EPS;
        v[j] = hi;
        double up = f(ctx);
        v[j] = lo;
        double down = f(ctx);
        v[j] = keep;
        double num = (up - down) / ((double)hi - lo), floor = floor_frac * gmax;
        int ok = grad_agrees(ana[j], num, floor);
        if (!ok && kinks) {
            double mid = f(ctx);
            ok = grad_agrees(ana[j], (up - mid) / ((double)hi - keep), 2 * floor) ||
                 grad_agrees(ana[j], (mid - down) / ((double)keep - lo), 2 * floor);
        }
        CHECK_MSG(ok, "%s[%zu]: analytic %.7g, numeric %.7g", what, j, ana[j], num);
    }
}

static void check_grad(const char *what, float *v, const float *ana, size_t len, loss_fn f,
                       void *ctx)
{
    check_grad_with(what, v, ana, len, f, ctx, 1e-3, 0);
}

static double dot_double(const float *a, const float *b, size_t len)
{
    double s = 0;
    for (size_t j = 0; j < len; j++)
        s += (double)a[j] * b[j];
    return s;
}

/* ---- convolution ------------------------------------------------------------------------------- */

typedef struct conv_case {
    int n, c, h, w, o, k, pad, stride, oh, ow;
    float *x, *wt, *b, *y, *g, *col;
} conv_case;

static double conv_loss(void *ctx)
{
    conv_case *t = ctx;
    gt_conv2d_forward_strided(t->x, t->n, t->c, t->h, t->w, t->wt, t->b, t->o, t->k, t->pad,
                              t->stride, t->y, t->col);
    return dot_double(t->y, t->g, (size_t)t->n * t->o * t->oh * t->ow);
}

/* The definition, in double: y[i][o][oy][ox] = b[o] + sum w[o][ci][ky][kx] x[i][ci][iy][ix]
 * with iy = oy * stride + ky - pad. */
static double conv_naive(const conv_case *t, int i, int oc, int oy, int ox)
{
    double s = t->b ? t->b[oc] : 0;
    for (int ci = 0; ci < t->c; ci++)
        for (int ky = 0; ky < t->k; ky++)
            for (int kx = 0; kx < t->k; kx++) {
                int iy = oy * t->stride + ky - t->pad, ix = ox * t->stride + kx - t->pad;
                if (iy < 0 || iy >= t->h || ix < 0 || ix >= t->w)
                    continue;
                s += (double)t->wt[((oc * t->c + ci) * t->k + ky) * t->k + kx] *
                     t->x[((i * t->c + ci) * t->h + iy) * t->w + ix];
            }
    return s;
}

/* A stride above 1 or no bias (bias 0) goes through the strided functions; the stride-1 calls
 * through gt_conv2d_forward and _backward, which must give the same bits. */
static void test_conv_case(int n, int c, int h, int w, int o, int k, int pad, int stride, int bias)
{
    conv_case t = {.n = n, .c = c, .h = h, .w = w, .o = o, .k = k, .pad = pad, .stride = stride,
                   .oh = (h + 2 * pad - k) / stride + 1, .ow = (w + 2 * pad - k) / stride + 1};
    size_t in_len = (size_t)n * c * h * w, out_len = (size_t)n * o * t.oh * t.ow;
    size_t w_len = (size_t)o * c * k * k;
    char what[80], name[64];
    snprintf(name, sizeof name, "conv %dx%dx%d k%d pad%d stride%d%s", c, h, w, k, pad, stride,
             bias ? "" : " nobias");
    t.x = fill_uniform(in_len, -1, 1);
    t.wt = fill_uniform(w_len, -0.5f, 0.5f);
    t.b = bias ? fill_uniform((size_t)o, -0.5f, 0.5f) : NULL;
    t.g = fill_uniform(out_len, -1, 1);
    t.y = fill_const(out_len, NAN);
    t.col = fill_const(gt_conv2d_col_len_strided(c, h, w, k, pad, stride), NAN);
    if (stride == 1)
        CHECK(gt_conv2d_col_len_strided(c, h, w, k, pad, 1) ==
              gt_conv2d_col_len(c, k, t.oh, t.ow));

    conv_loss(&t);
    double worst = 0;
    for (int i = 0; i < n; i++)
        for (int oc = 0; oc < o; oc++)
            for (int p = 0; p < t.oh * t.ow; p++) {
                double want = conv_naive(&t, i, oc, p / t.ow, p % t.ow);
                worst = fmax(worst, fabs(t.y[((size_t)i * o + oc) * t.oh * t.ow + p] - want));
            }
    CHECK_MSG(worst < 1e-5, "%s: forward off the definition by %g", name, worst);
    if (stride == 1 && bias) {
        float *y1 = fill_const(out_len, NAN);
        gt_conv2d_forward(t.x, n, c, h, w, t.wt, t.b, o, k, pad, y1, t.col);
        CHECK(memcmp(y1, t.y, out_len * sizeof *y1) == 0);
        gt_free(y1);
    }

    /* Parameter gradients accumulate onto what is there; dx is overwritten. */
    float *dw = fill_const(w_len, 0.25f), *db = bias ? fill_const((size_t)o, -0.5f) : NULL;
    float *dx = fill_const(in_len, NAN);
    float *dw_nodx = fill_const(w_len, 0), *db_nodx = bias ? fill_const((size_t)o, 0) : NULL;
    gt_conv2d_backward_strided(t.x, t.g, n, c, h, w, t.wt, o, k, pad, stride, dx, dw, db, t.col);
    gt_conv2d_backward_strided(t.x, t.g, n, c, h, w, t.wt, o, k, pad, stride, NULL, dw_nodx,
                               db_nodx, t.col);
    for (size_t j = 0; j < w_len; j++) {
        CHECK_CLOSE(dw[j] - 0.25f, dw_nodx[j], 1e-5);
        dw[j] -= 0.25f;
    }
    for (int j = 0; bias && j < o; j++) {
        CHECK_CLOSE(db[j] + 0.5f, db_nodx[j], 1e-5);
        db[j] += 0.5f;
    }
    if (stride == 1 && bias) {
        float *dx1 = fill_const(in_len, NAN), *dw1 = fill_const(w_len, 0);
        float *db1 = fill_const((size_t)o, 0);
        gt_conv2d_backward(t.x, t.g, n, c, h, w, t.wt, o, k, pad, dx1, dw1, db1, t.col);
        CHECK(memcmp(dx1, dx, in_len * sizeof *dx) == 0);
        CHECK(memcmp(dw1, dw_nodx, w_len * sizeof *dw) == 0);
        CHECK(memcmp(db1, db_nodx, (size_t)o * sizeof *db) == 0);
        gt_free(dx1), gt_free(dw1), gt_free(db1);
    }
    snprintf(what, sizeof what, "%s dw", name);
    check_grad(what, t.wt, dw, w_len, conv_loss, &t);
    if (bias) {
        snprintf(what, sizeof what, "%s db", name);
        check_grad(what, t.b, db, (size_t)o, conv_loss, &t);
    }
    snprintf(what, sizeof what, "%s dx", name);
    check_grad(what, t.x, dx, in_len, conv_loss, &t);

    gt_free(t.x), gt_free(t.wt), gt_free(t.b), gt_free(t.g), gt_free(t.y), gt_free(t.col);
    gt_free(dw), gt_free(db), gt_free(dx), gt_free(dw_nodx), gt_free(db_nodx);
}

/* Two hand-computed 3x3 examples: a 2x2 kernel without padding, and two 3x3 kernels with pad 1
 * over two input channels (an all-ones kernel sums each neighbourhood; centre taps mix channels). */
static void test_conv_known(void)
{
    float x[18], y[18];
    float *col = fill_const(gt_conv2d_col_len(2, 3, 3, 3) + gt_conv2d_col_len(1, 2, 2, 2), NAN);
    for (int j = 0; j < 9; j++) {
        x[j] = (float)(j + 1);
        x[9 + j] = (float)(9 - j);
    }
    const float w22[4] = {1, 2, 3, 4}, b22[1] = {0.5f};
    const float want22[4] = {37.5f, 47.5f, 67.5f, 77.5f};
    gt_conv2d_forward(x, 1, 1, 3, 3, w22, b22, 1, 2, 0, y, col);
    for (int j = 0; j < 4; j++)
        CHECK_CLOSE(y[j], want22[j], 1e-6);

    float w33[2 * 2 * 9] = {0};
    for (int j = 0; j < 9; j++)
        w33[j] = 1; /* out 0, in 0: all ones; out 0, in 1: zeros */
    w33[18 + 4] = 1;  /* out 1, in 0: centre tap 1 */
    w33[27 + 4] = -2; /* out 1, in 1: centre tap -2 */
    const float b33[2] = {0, 1};
    const float want[18] = {12, 21, 16, 27, 45, 33, 24, 39, 28,      /* neighbourhood sums */
                            -16, -13, -10, -7, -4, -1, 2, 5, 8};      /* x0 - 2 x1 + 1 */
    gt_conv2d_forward(x, 1, 2, 3, 3, w33, b33, 2, 3, 1, y, col);
    for (int j = 0; j < 18; j++)
        CHECK_CLOSE(y[j], want[j], 1e-6);
    gt_free(col);
}

/* ---- linear ------------------------------------------------------------------------------------ */

typedef struct linear_case {
    int n, in, out;
    float *x, *wt, *b, *y, *g;
} linear_case;

static double linear_loss(void *ctx)
{
    linear_case *t = ctx;
    gt_linear_forward(t->x, t->n, t->in, t->wt, t->b, t->out, t->y);
    return dot_double(t->y, t->g, (size_t)t->n * t->out);
}

static void test_linear_case(int n, int in, int out)
{
    linear_case t = {.n = n, .in = in, .out = out};
    size_t w_len = (size_t)in * out;
    t.x = fill_uniform((size_t)n * in, -1, 1);
    t.wt = fill_uniform(w_len, -0.5f, 0.5f);
    t.b = fill_uniform((size_t)out, -0.5f, 0.5f);
    t.g = fill_uniform((size_t)n * out, -1, 1);
    t.y = fill_const((size_t)n * out, NAN);
    linear_loss(&t);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double want = t.b[o];
            for (int j = 0; j < in; j++)
                want += (double)t.wt[o * in + j] * t.x[i * in + j];
            CHECK_CLOSE(t.y[i * out + o], want, 1e-5);
        }
    float *dw = fill_const(w_len, 0), *db = fill_const((size_t)out, 0);
    float *dx = fill_const((size_t)n * in, NAN);
    gt_linear_backward(t.x, t.g, n, in, t.wt, out, dx, dw, db);
    check_grad("linear dw", t.wt, dw, w_len, linear_loss, &t);
    check_grad("linear db", t.b, db, (size_t)out, linear_loss, &t);
    check_grad("linear dx", t.x, dx, (size_t)n * in, linear_loss, &t);
    gt_free(t.x), gt_free(t.wt), gt_free(t.b), gt_free(t.g), gt_free(t.y);
    gt_free(dw), gt_free(db), gt_free(dx);
}

/* ---- pooling and activations ------------------------------------------------------------------- */

typedef struct map_case {
    gt_layer_kind kind;
    int n, c, h, w, k;
    size_t in_len, out_len;
    float *x, *y, *g;
    int32_t *arg;
} map_case;

static double map_loss(void *ctx)
{
    map_case *t = ctx;
    if (t->kind == GT_AVGPOOL)
        gt_avgpool_forward(t->x, t->n, t->c, t->h, t->w, t->k, t->y);
    else if (t->kind == GT_MAXPOOL)
        gt_maxpool_forward(t->x, t->n, t->c, t->h, t->w, t->k, t->y, t->arg);
    else
        gt_act_forward(t->kind, t->x, t->y, t->in_len);
    return dot_double(t->y, t->g, t->out_len);
}

/* Pooled value of one window by the definition, floor mode. */
static double pool_naive(const map_case *t, size_t plane, int oy, int ox)
{
    const float *xp = t->x + plane * t->h * t->w;
    double sum = 0, best = -INFINITY;
    for (int ky = 0; ky < t->k; ky++)
        for (int kx = 0; kx < t->k; kx++) {
            double v = xp[(oy * t->k + ky) * t->w + ox * t->k + kx];
            sum += v;
            best = fmax(best, v);
        }
    return t->kind == GT_MAXPOOL ? best : sum / (t->k * t->k);
}

static void test_pool_case(gt_layer_kind kind, int n, int c, int h, int w, int k)
{
    int oh = h / k, ow = w / k;
    map_case t = {.kind = kind, .n = n, .c = c, .h = h, .w = w, .k = k,
                  .in_len = (size_t)n * c * h * w, .out_len = (size_t)n * c * oh * ow};
    /* Distinct values at least 0.01 apart, so no window has a near tie for the maximum. */
    t.x = fill_const(t.in_len, 0);
    for (size_t j = 0; j < t.in_len; j++) {
        size_t s = gt_rng_below(&rng, (uint32_t)(j + 1));
        t.x[j] = t.x[s];
        t.x[s] = 0.01f * (float)j - 1.0f;
    }
    t.y = fill_const(t.out_len, NAN);
    t.g = fill_uniform(t.out_len, -1, 1);
    t.arg = gt_alloc(t.out_len * sizeof *t.arg);
    map_loss(&t);
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        for (int p = 0; p < oh * ow; p++)
            CHECK_CLOSE(t.y[pl * oh * ow + p], pool_naive(&t, pl, p / ow, p % ow), 1e-6);
    float *dx = fill_const(t.in_len, NAN);
    if (kind == GT_AVGPOOL)
        gt_avgpool_backward(t.g, n, c, h, w, k, dx);
    else
        gt_maxpool_backward(t.g, t.arg, n, c, h, w, k, dx);
    /* Inputs left over by the floor get an exact zero. */
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        for (int iy = 0; iy < h; iy++)
            for (int ix = 0; ix < w; ix++)
                if (iy >= oh * k || ix >= ow * k)
                    CHECK(dx[(pl * h + iy) * w + ix] == 0.0f);
    char what[64];
    snprintf(what, sizeof what, "%s %dx%d k%d dx", kind == GT_AVGPOOL ? "avgpool" : "maxpool", h,
             w, k);
    check_grad(what, t.x, dx, t.in_len, map_loss, &t);
    gt_free(t.x), gt_free(t.y), gt_free(t.g), gt_free(t.arg), gt_free(dx);
}

/* Ties go to the first maximum in the window, as in PyTorch. */
static void test_maxpool_ties(void)
{
    const float x[8] = {2, 2, 7, 1, 2, 2, 7, 7}; /* 2 x 4: windows {2,2,2,2} and {7,1,7,7} */
    const float dy[2] = {1.5f, -3};
    float y[2], dx[8];
    int32_t arg[2];
    gt_maxpool_forward(x, 1, 1, 2, 4, 2, y, arg);
    CHECK(y[0] == 2 && y[1] == 7 && arg[0] == 0 && arg[1] == 2);
    gt_maxpool_backward(dy, arg, 1, 1, 2, 4, 2, dx);
    const float want[8] = {1.5f, 0, -3, 0, 0, 0, 0, 0};
    CHECK(memcmp(dx, want, sizeof want) == 0);
}

static void test_act_case(gt_layer_kind kind, const char *name)
{
    size_t len = 300;
    map_case t = {.kind = kind, .in_len = len, .out_len = len};
    t.x = fill_uniform(len, -3, 3);
    for (size_t j = 0; j < len; j++)
        if (fabsf(t.x[j]) < 0.01f) /* keep relu's kink out of the differences */
            t.x[j] = 0.5f;
    t.y = fill_const(len, NAN);
    t.g = fill_uniform(len, -1, 1);
    map_loss(&t);
    for (size_t j = 0; j < len; j++) {
        double x = t.x[j], want = kind == GT_RELU      ? fmax(x, 0)
                                  : kind == GT_SIGMOID ? 1 / (1 + exp(-x))
                                                       : tanh(x);
        CHECK_CLOSE(t.y[j], want, 1e-6);
    }
    float *dx = fill_const(len, NAN);
    gt_act_backward(kind, t.y, t.g, dx, len);
    check_grad(name, t.x, dx, len, map_loss, &t);
    gt_free(t.x), gt_free(t.y), gt_free(t.g), gt_free(dx);
}

/* ---- global average pooling, batch norm and the residual add ------------------------------------ */

typedef struct gap_case {
    int n, c;
    size_t plane;
    float *x, *y, *g;
} gap_case;

static double gap_loss(void *ctx)
{
    gap_case *t = ctx;
    gt_gap_forward(t->x, t->n, t->c, t->plane, t->y);
    return dot_double(t->y, t->g, (size_t)t->n * t->c);
}

static void test_gap(void)
{
    gap_case t = {.n = 3, .c = 4, .plane = 5 * 7};
    size_t in_len = (size_t)t.n * t.c * t.plane;
    t.x = fill_uniform(in_len, -1, 1);
    t.y = fill_const((size_t)t.n * t.c, NAN);
    t.g = fill_uniform((size_t)t.n * t.c, -1, 1);
    gap_loss(&t);
    for (int pl = 0; pl < t.n * t.c; pl++) {
        double sum = 0;
        for (size_t j = 0; j < t.plane; j++)
            sum += t.x[pl * t.plane + j];
        CHECK_CLOSE(t.y[pl], sum / (double)t.plane, 1e-6);
    }
    float *dx = fill_const(in_len, NAN);
    gt_gap_backward(t.g, t.n, t.c, t.plane, dx);
    check_grad("gap dx", t.x, dx, in_len, gap_loss, &t);
    gt_free(t.x), gt_free(t.y), gt_free(t.g), gt_free(dx);
}

/* Two samples of two channels of two values; channel 0 holds 1 2 | 3 6 (mean 3, biased variance
 * 3.5, unbiased 14/3), channel 1 holds 0 0 | 4 4 (mean 2, variance 4, unbiased 16/3). */
static void test_batchnorm_known(void)
{
    const float x[8] = {1, 2, 0, 0, 3, 6, 4, 4}, gamma[2] = {2, -1}, beta[2] = {0.5f, 0};
    float rmean[2] = {0, 0}, rvar[2] = {1, 1}, y[8], save[4];
    gt_batchnorm_forward_train(x, 2, 2, 2, gamma, beta, GT_BN_MOMENTUM, rmean, rvar, y, save);
    const double mean[2] = {3, 2}, var[2] = {3.5, 4};
    for (int i = 0; i < 2; i++)
        for (int ch = 0; ch < 2; ch++)
            for (int j = 0; j < 2; j++) {
                int at = (i * 2 + ch) * 2 + j;
                CHECK_CLOSE(y[at], gamma[ch] * (x[at] - mean[ch]) / sqrt(var[ch] + 1e-5) + beta[ch],
                            1e-6);
            }
    CHECK_CLOSE(y[0], 2 * -2 / sqrt(3.50001) + 0.5, 1e-6); /* -1.638071 */
    CHECK_CLOSE(y[3], -1 * -2 / sqrt(4.00001), 1e-6);      /* 0.999999 */
    CHECK_CLOSE(save[0], 3, 1e-7);
    CHECK_CLOSE(save[3], 1 / sqrt(4.00001), 1e-7);
    CHECK_CLOSE(rmean[0], 0.3, 1e-7);
    CHECK_CLOSE(rmean[1], 0.2, 1e-7);
    CHECK_CLOSE(rvar[0], 0.9 + 0.1 * 14.0 / 3.0, 1e-6);
    CHECK_CLOSE(rvar[1], 0.9 + 0.1 * 16.0 / 3.0, 1e-6);

    /* Evaluation normalises with the running statistics and leaves them alone. */
    float keep_mean[2] = {rmean[0], rmean[1]}, keep_var[2] = {rvar[0], rvar[1]};
    gt_batchnorm_forward_eval(x, 2, 2, 2, gamma, beta, rmean, rvar, y, save);
    for (int at = 0; at < 8; at++) {
        int ch = (at / 2) % 2;
        CHECK_CLOSE(y[at], gamma[ch] * (x[at] - keep_mean[ch]) / sqrt(keep_var[ch] + 1e-5) +
                               beta[ch], 1e-6);
    }
    CHECK(memcmp(rmean, keep_mean, sizeof rmean) == 0 && memcmp(rvar, keep_var, sizeof rvar) == 0);

    /* One value per channel: the running variance moves towards the biased variance, 0. */
    float one[2] = {5, -5}, y1[2], rm[2] = {0, 0}, rv[2] = {1, 1};
    gt_batchnorm_forward_train(one, 1, 2, 1, gamma, beta, GT_BN_MOMENTUM, rm, rv, y1, save);
    CHECK_CLOSE(y1[0], beta[0], 1e-6);
    CHECK_CLOSE(y1[1], beta[1], 1e-6);
    CHECK(rv[0] == 0.9f && rm[1] == -0.5f);

    /* momentum 1: the batch's own mean and unbiased variance, whatever the arrays held. */
    float bm[2] = {NAN, 7}, bv[2] = {INFINITY, -1};
    gt_batchnorm_forward_train(x, 2, 2, 2, gamma, beta, 1.0, bm, bv, y, save);
    CHECK(bm[0] == 3.0f && bm[1] == 2.0f);
    CHECK_CLOSE(bv[0], 14.0 / 3.0, 1e-6);
    CHECK_CLOSE(bv[1], 16.0 / 3.0, 1e-6);
}

typedef struct bn_case {
    int n, c, train;
    size_t plane;
    float *x, *gamma, *beta, *rmean, *rvar, *y, *g, *save;
} bn_case;

static double bn_loss(void *ctx)
{
    bn_case *t = ctx;
    if (t->train)
        gt_batchnorm_forward_train(t->x, t->n, t->c, t->plane, t->gamma, t->beta, GT_BN_MOMENTUM, t->rmean,
                                   t->rvar, t->y, t->save);
    else
        gt_batchnorm_forward_eval(t->x, t->n, t->c, t->plane, t->gamma, t->beta, t->rmean,
                                  t->rvar, t->y, t->save);
    return dot_double(t->y, t->g, (size_t)t->n * t->c * t->plane);
}

static void test_batchnorm_case(int train)
{
    bn_case t = {.n = 3, .c = 4, .plane = 6, .train = train};
    size_t len = (size_t)t.n * t.c * t.plane;
    t.x = fill_uniform(len, -1, 2);
    t.gamma = fill_uniform(4, 0.5f, 1.5f);
    t.beta = fill_uniform(4, -0.5f, 0.5f);
    t.rmean = fill_uniform(4, -0.2f, 0.2f);
    t.rvar = fill_uniform(4, 0.5f, 1.5f);
    t.y = fill_const(len, NAN);
    t.g = fill_uniform(len, -1, 1);
    t.save = fill_const(8, NAN);
    bn_loss(&t);
    float *dx = fill_const(len, NAN), *dgamma = fill_const(4, 0.5f), *dbeta = fill_const(4, 0);
    float *dgamma2 = fill_const(4, 0), *dbeta2 = fill_const(4, 0);
    gt_batchnorm_backward(t.x, t.g, t.n, t.c, t.plane, t.gamma, t.save, train, dx, dgamma, dbeta);
    gt_batchnorm_backward(t.x, t.g, t.n, t.c, t.plane, t.gamma, t.save, train, NULL, dgamma2,
                          dbeta2);
    for (int ch = 0; ch < 4; ch++) {
        CHECK_CLOSE(dgamma[ch] - 0.5f, dgamma2[ch], 1e-6); /* accumulates */
        dgamma[ch] -= 0.5f;
    }
    const char *mode = train ? "train" : "eval";
    char what[64];
    snprintf(what, sizeof what, "batchnorm %s dx", mode);
    check_grad(what, t.x, dx, len, bn_loss, &t);
    snprintf(what, sizeof what, "batchnorm %s dgamma", mode);
    check_grad(what, t.gamma, dgamma, 4, bn_loss, &t);
    snprintf(what, sizeof what, "batchnorm %s dbeta", mode);
    check_grad(what, t.beta, dbeta, 4, bn_loss, &t);
    if (train) { /* the batch's output per channel has mean beta and variance gamma^2 */
        bn_loss(&t); /* check_grad leaves y from a perturbed input */
        for (int ch = 0; ch < 4; ch++) {
            double sum = 0, sq = 0, m = (double)t.n * t.plane;
            for (int i = 0; i < t.n; i++)
                for (size_t j = 0; j < t.plane; j++) {
                    double v = t.y[((size_t)i * t.c + ch) * t.plane + j];
                    sum += v, sq += v * v;
                }
            CHECK_CLOSE(sum / m, t.beta[ch], 1e-5);
            CHECK_CLOSE(sq / m - (sum / m) * (sum / m), t.gamma[ch] * t.gamma[ch], 1e-4);
        }
    }
    gt_free(t.x), gt_free(t.gamma), gt_free(t.beta), gt_free(t.rmean), gt_free(t.rvar);
    gt_free(t.y), gt_free(t.g), gt_free(t.save), gt_free(dx), gt_free(dgamma), gt_free(dbeta);
    gt_free(dgamma2), gt_free(dbeta2);
}

static void test_add(void)
{
    float a[5] = {1, -2, 3.5f, 0, 1e-3f}, b[5] = {0.5f, 2, -1, 7, 1e-3f}, y[5];
    gt_add(a, b, y, 5);
    for (int j = 0; j < 5; j++)
        CHECK(y[j] == a[j] + b[j]);
    gt_add(a, b, a, 5); /* in place */
    CHECK(memcmp(a, y, sizeof y) == 0);
}

/* ---- dropout ----------------------------------------------------------------------------------- */

typedef struct dropout_case {
    int n;
    size_t len;
    float p;
    uint32_t ids[3];
    float *x, *y, *g;
    uint8_t *mask;
} dropout_case;

static double dropout_loss(void *ctx)
{
    dropout_case *t = ctx;
    gt_dropout_forward(t->x, t->y, t->mask, t->n, t->len, t->p, 42, 3, t->ids, 5);
    return dot_double(t->y, t->g, (size_t)t->n * t->len);
}

static void test_dropout(void)
{
    dropout_case t = {.n = 3, .len = 5000, .p = 0.3f, .ids = {7, 8, 7}};
    size_t all = (size_t)t.n * t.len;
    t.x = fill_uniform(all, 0.5f, 1.5f);
    t.y = fill_const(all, NAN);
    t.g = fill_uniform(all, -1, 1);
    t.mask = gt_alloc(all);
    uint8_t *again = gt_alloc(all);
    dropout_loss(&t);
    memcpy(again, t.mask, all);
    dropout_loss(&t);
    CHECK(memcmp(again, t.mask, all) == 0);

    size_t kept = 0, differ = 0;
    for (int i = 0; i < t.n; i++) {
        uint64_t key = gt_dropout_key(42, 3, t.ids[i], 5);
        for (size_t j = 0; j < t.len; j++) {
            size_t at = (size_t)i * t.len + j;
            int keep = gt_counter_uniform(key, (uint32_t)j) >= t.p;
            CHECK(t.mask[at] == keep);
            CHECK(t.y[at] == (keep ? t.x[at] * (1.0f / (1.0f - t.p)) : 0.0f));
            kept += keep;
        }
    }
    for (size_t j = 0; j < t.len; j++) {
        CHECK(t.mask[j] == t.mask[2 * t.len + j]); /* the same sample id, the same mask */
        differ += t.mask[j] != t.mask[t.len + j];
    }
    double frac = (double)kept / (double)all, want_differ = 2 * t.p * (1 - t.p) * (double)t.len;
    CHECK_MSG(fabs(frac - (1 - t.p)) < 0.02, "kept fraction %.4f, expected %.2f", frac, 1 - t.p);
    CHECK_MSG(fabs((double)differ - want_differ) < 0.1 * want_differ,
              "masks of samples 7 and 8 differ in %zu places, expected about %.0f", differ,
              want_differ);

    float *dx = fill_const(all, NAN);
    gt_dropout_backward(t.g, t.mask, dx, all, t.p);
    check_grad("dropout dx", t.x, dx, all, dropout_loss, &t);
    gt_free(t.x), gt_free(t.y), gt_free(t.g), gt_free(t.mask), gt_free(again), gt_free(dx);
}

/* ---- softmax cross-entropy and input ------------------------------------------------------------ */

typedef struct xent_case {
    int n, k;
    float *z;
    uint16_t labels[5];
} xent_case;

static double xent_mean(void *ctx)
{
    xent_case *t = ctx;
    return gt_softmax_xent(t->z, t->labels, t->n, t->k, 1, NULL, NULL) / t->n;
}

static void test_softmax_xent(void)
{
    /* Two classes, logits (0, ln 3): p = (1/4, 3/4). */
    float z[4] = {0, logf(3), 1, 1}, d[4];
    uint16_t lab1[2] = {1, 0}, lab0[2] = {0, 1};
    int correct = 10;
    double loss = gt_softmax_xent(z, lab1, 1, 2, 0.5f, d, &correct);
    CHECK_CLOSE(loss, log(4.0 / 3.0), 1e-7);
    CHECK_CLOSE(d[0], 0.125, 1e-7);
    CHECK_CLOSE(d[1], -0.125, 1e-7);
    CHECK(correct == 11);
    correct = 0;
    CHECK_CLOSE(gt_softmax_xent(z, lab0, 1, 2, 1, NULL, &correct), log(4.0), 1e-7);
    CHECK(correct == 0);
    /* Two rows sum their losses; the second row's tie goes to the first maximum, class 0. */
    correct = 0;
    CHECK_CLOSE(gt_softmax_xent(z, lab1, 2, 2, 1, NULL, &correct), log(4.0 / 3.0) + log(2.0),
                1e-7);
    CHECK(correct == 2);
    correct = 0;
    CHECK_CLOSE(gt_softmax_xent(z, lab0, 2, 2, 1, NULL, &correct), log(4.0) + log(2.0), 1e-7);
    CHECK(correct == 0);
    /* Huge logits stay finite. */
    float big[2] = {1000, 0};
    CHECK_CLOSE(gt_softmax_xent(big, lab1, 1, 2, 1, d, NULL), 1000.0, 1e-9);
    CHECK(d[0] == 1.0f && d[1] == -1.0f);

    xent_case t = {5, 10, fill_uniform(50, -3, 3), {0, 9, 3, 3, 7}};
    float *dz = fill_const(50, NAN);
    gt_softmax_xent(t.z, t.labels, t.n, t.k, 1.0f / t.n, dz, NULL);
    check_grad("softmax-xent dlogits", t.z, dz, 50, xent_mean, &t);
    gt_free(t.z), gt_free(dz);
}

static void test_input_normalize(void)
{
    uint8_t src[4] = {0, 51, 128, 255};
    float dst[4];
    gt_input_normalize(src, dst, 4);
    CHECK(dst[0] == 0.0f && dst[3] == 1.0f);
    CHECK_CLOSE(dst[1], 0.2, 1e-7);
    CHECK_CLOSE(dst[2], 128.0 / 255.0, 1e-7);
}

/* ---- a whole network ---------------------------------------------------------------------------- */

typedef struct layer_desc {
    gt_layer_kind kind;
    int out, k, pad;
    float p;
    int stride, no_bias, peer; /* stride 0 reads as 1; peer for block markers (model.h) */
} layer_desc;

/* Fills m as model.c would: shapes, offsets of weight then bias for each parameterised layer,
 * batch norm's buffers, tensors, nparams, nbuffers and max_act. */
static void model_make(gt_model *m, int c, int h, int w, const layer_desc *d, int nd)
{
    memset(m, 0, sizeof *m);
    strcpy(m->name, "test");
    m->in_c = c, m->in_h = h, m->in_w = w;
    m->nlayers = nd;
    m->max_act = (size_t)c * h * w;
    int nconv = 0, nfc = 0, nbn = 0;
    size_t off = 0;
    for (int l = 0; l < nd; l++) {
        gt_layer *L = &m->layers[l];
        L->kind = d[l].kind;
        L->in_c = c, L->in_h = h, L->in_w = w;
        L->k = d[l].k, L->pad = d[l].pad, L->p = d[l].p, L->peer = d[l].peer;
        L->stride = d[l].stride ? d[l].stride : 1, L->no_bias = d[l].no_bias;
        L->in_len = (size_t)c * h * w;
        size_t b_len = 0;
        if (L->kind == GT_CONV) {
            snprintf(L->name, sizeof L->name, "c%d", ++nconv % 100);
            c = d[l].out;
            h = (h + 2 * L->pad - L->k) / L->stride + 1, w = (w + 2 * L->pad - L->k) / L->stride + 1;
            L->w_len = (size_t)c * L->in_c * L->k * L->k;
            b_len = L->no_bias ? 0 : (size_t)c;
        } else if (L->kind == GT_LINEAR) {
            snprintf(L->name, sizeof L->name, "f%d", ++nfc % 100);
            c = d[l].out, h = 1, w = 1;
            L->w_len = (size_t)c * L->in_len;
            b_len = (size_t)c;
        } else if (L->kind == GT_BATCHNORM) {
            snprintf(L->name, sizeof L->name, "b%d", ++nbn % 100);
            L->w_len = b_len = (size_t)c;
            L->s_off = m->nbuffers, L->s_len = 2 * (size_t)c + 1;
            m->nbuffers += L->s_len;
        } else if (L->kind == GT_AVGPOOL || L->kind == GT_MAXPOOL) {
            h /= L->k, w /= L->k;
        } else if (L->kind == GT_GAP) {
            h = w = 1;
        } else if (L->kind == GT_RES_SPLIT) {
            const gt_layer *B = &m->layers[L->peer];
            c = B->in_c, h = B->in_h, w = B->in_w;
        }
        L->out_c = c, L->out_h = h, L->out_w = w;
        L->out_len = (size_t)c * h * w;
        m->max_act = L->out_len > m->max_act ? L->out_len : m->max_act;
        if (!L->w_len)
            continue;
        L->w_off = off, off += L->w_len;
        L->b_off = off, L->b_len = b_len, off += L->b_len;
        char layer_name[sizeof L->name];
        memcpy(layer_name, L->name, sizeof layer_name);
        gt_tensor_info *t = &m->tensors[m->ntensors++];
        snprintf(t->name, sizeof t->name, "%s.weight", layer_name);
        t->offset = L->w_off, t->len = L->w_len;
        if (!b_len)
            continue;
        t = &m->tensors[m->ntensors++];
        snprintf(t->name, sizeof t->name, "%s.bias", layer_name);
        t->offset = L->b_off, t->len = L->b_len;
    }
    m->nclasses = c;
    m->nparams = off;
}

typedef struct net_case {
    gt_cpu_net net;
    float *params, *buffers;
    gt_batch batch;
    int train;
} net_case;

static double net_mean_loss(void *ctx)
{
    net_case *t = ctx;
    int correct;
    return gt_cpu_net_run(&t->net, t->params, t->buffers, &t->batch, t->train, NULL, &correct) /
           t->batch.n;
}

static void test_network(void)
{
    static const layer_desc layers[] = {
        {GT_CONV, 4, 5, 2, 0, 0, 0, 0},   {GT_RELU, 0, 0, 0, 0, 0, 0, 0},    {GT_MAXPOOL, 0, 2, 0, 0, 0, 0, 0},
        {GT_CONV, 5, 3, 0, 0, 0, 0, 0},   {GT_SIGMOID, 0, 0, 0, 0, 0, 0, 0}, {GT_AVGPOOL, 0, 2, 0, 0, 0, 0, 0},
        {GT_LINEAR, 12, 0, 0, 0, 0, 0, 0}, {GT_TANH, 0, 0, 0, 0, 0, 0, 0},    {GT_DROPOUT, 0, 0, 0, 0.25f, 0, 0, 0},
        {GT_LINEAR, 6, 0, 0, 0, 0, 0, 0},
    };
    gt_model m;
    model_make(&m, 2, 12, 11, layers, (int)(sizeof layers / sizeof *layers));
    CHECK(m.layers[5].out_h == 2 && m.layers[5].out_w == 1); /* 4 x 3 pooled by 2, floor */

    gt_dataset ds = {.n = 40, .c = 2, .h = 12, .w = 11, .nclasses = 6};
    ds.images = gt_alloc((size_t)ds.n * 2 * 12 * 11);
    ds.labels = gt_alloc(ds.n * sizeof *ds.labels);
    for (size_t j = 0; j < (size_t)ds.n * 2 * 12 * 11; j++)
        ds.images[j] = (uint8_t)gt_rng_below(&rng, 256);
    for (uint32_t j = 0; j < ds.n; j++)
        ds.labels[j] = (uint16_t)gt_rng_below(&rng, 6);
    uint32_t idx[6] = {17, 3, 29, 8, 0, 39}, rev[6] = {39, 0, 8, 29, 3, 17};

    net_case t = {.batch = {&ds, idx, 6, 2, 1234}, .train = 1};
    gt_err e;
    CHECK(gt_cpu_net_create(&t.net, &m, 8, &e) == 0);
    t.params = fill_uniform(m.nparams, -0.4f, 0.4f);
    float *grad = fill_const(m.nparams, NAN);
    int correct = -1, correct2 = -1;
    double loss = gt_cpu_net_step(&t.net, t.params, &t.batch, 1, grad, &correct);
    CHECK(isfinite(loss) && loss > 0);
    CHECK(correct >= 0 && correct <= 6);
    CHECK(gt_cpu_net_step(&t.net, t.params, &t.batch, 1, NULL, &correct2) == loss);
    CHECK(correct2 == correct);
    /* Eight float layers deep, the loss carries more rounding noise than one layer's. */
    const gt_layer *drop = &m.layers[8];
    for (int i = 0; i < 6; i++) {
        uint64_t key = gt_dropout_key(t.batch.seed, t.batch.epoch, idx[i], 8);
        for (size_t j = 0; j < drop->out_len; j++)
            CHECK(t.net.mask[8][i * drop->out_len + j] ==
                  (gt_counter_uniform(key, (uint32_t)j) >= drop->p));
    }
    for (int i = 0; i < m.ntensors; i++) {
        const gt_tensor_info *ti = &m.tensors[i];
        check_grad_with(ti->name, t.params + ti->offset, grad + ti->offset, ti->len,
                        net_mean_loss, &t, 5e-3, 1);
    }

    /* Dropout masks follow the sample, not its batch position; evaluation applies none. */
    gt_batch reversed = t.batch, half = t.batch;
    reversed.idx = rev;
    CHECK_CLOSE(gt_cpu_net_step(&t.net, t.params, &reversed, 1, NULL, &correct2), loss, 1e-6);
    half.n = 3;
    double first = gt_cpu_net_step(&t.net, t.params, &half, 1, NULL, &correct2);
    half.idx = idx + 3;
    CHECK_CLOSE(first + gt_cpu_net_step(&t.net, t.params, &half, 1, NULL, &correct2), loss, 1e-6);
    t.train = 0;
    CHECK(fabs(net_mean_loss(&t) * 6 - loss) > 1e-4);
    gt_cpu_net_step(&t.net, t.params, &t.batch, 0, grad, &correct);
    for (int i = 0; i < m.ntensors; i += 3) {
        const gt_tensor_info *ti = &m.tensors[i];
        check_grad_with(ti->name, t.params + ti->offset, grad + ti->offset, ti->len,
                        net_mean_loss, &t, 5e-3, 1);
    }

    t.batch.n = 9; /* over max_batch */
    CHECK(isnan(gt_cpu_net_step(&t.net, t.params, &t.batch, 1, grad, &correct)));
    gt_cpu_net_destroy(&t.net);

    /* Models whose shapes or offsets disagree are refused before anything is sized from them. */
    gt_cpu_net bad;
    gt_model broken = m;
    CHECK(gt_cpu_net_create(&bad, &m, 0, &e) == -1 && strstr(e.msg, "batch size 0"));
    broken.layers[3].in_h = 5;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "layer 3"));
    broken = m;
    broken.layers[9].b_off = m.nparams - 1;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "layer 9"));
    broken = m;
    broken.nclasses = 7;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "7 classes"));
    broken = m;
    broken.nlayers = 0;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "0 layers"));
    gt_free(t.params), gt_free(grad), gt_free(ds.images), gt_free(ds.labels);
}

/* Batch norm, strides, no-bias convolutions, global average pooling and residual blocks through
 * gt_cpu_net_run: an identity block with a block nested in its body, then a projection block that
 * strides and widens. Every gradient against finite differences in training (batch statistics,
 * which mix the samples) and in evaluation (running statistics); the running statistics move as
 * BatchNorm2d's do, and only in training. */
static void test_residual_network(void)
{
    const gt_layer_kind C = GT_CONV, BN = GT_BATCHNORM, R = GT_TANH, B = GT_RES_BEGIN,
                        S = GT_RES_SPLIT, E = GT_RES_END;
    /* Every convolution feeds a batch norm, which cancels a bias: none has one. Smooth tanh
     * stands in for ReLU but at the end: a step of a batch norm's gamma moves a whole channel,
     * and too many of its values would cross ReLU's kink for a finite difference. */
    const layer_desc layers[] = {
        {C, 4, 3, 1, 0, 1, 1, 0},  {BN, 0, 0, 0, 0, 0, 0, 0},  {R, 0, 0, 0, 0, 0, 0, 0},
        {B, 0, 0, 0, 0, 0, 0, 12}, /* 3: identity block, ends at 12 */
        {C, 4, 3, 1, 0, 1, 1, 0},  {BN, 0, 0, 0, 0, 0, 0, 0},  {R, 0, 0, 0, 0, 0, 0, 0},
        {B, 0, 0, 0, 0, 0, 0, 10}, /* 7: nested identity block, ends at 10 */
        {C, 4, 1, 0, 0, 1, 1, 0},  {BN, 0, 0, 0, 0, 0, 0, 0},  {E, 0, 0, 0, 0, 0, 0, 7},
        {R, 0, 0, 0, 0, 0, 0, 0},  {E, 0, 0, 0, 0, 0, 0, 3},   {R, 0, 0, 0, 0, 0, 0, 0},
        {B, 0, 0, 0, 0, 0, 0, 23}, /* 14: projection block, split at 20, ends at 23 */
        {C, 6, 3, 1, 0, 2, 1, 0},  {BN, 0, 0, 0, 0, 0, 0, 0},  {R, 0, 0, 0, 0, 0, 0, 0},
        {C, 6, 3, 1, 0, 1, 1, 0},  {BN, 0, 0, 0, 0, 0, 0, 0},  {S, 0, 0, 0, 0, 0, 0, 14},
        {C, 6, 1, 0, 0, 2, 1, 0},  {BN, 0, 0, 0, 0, 0, 0, 0},  {E, 0, 0, 0, 0, 0, 0, 20},
        {GT_RELU, 0, 0, 0, 0, 0, 0, 0}, {GT_GAP, 0, 0, 0, 0, 0, 0, 0},
        {GT_LINEAR, 5, 0, 0, 0, 0, 0, 0},
    };
    const int nl = (int)(sizeof layers / sizeof *layers);
    gt_model m;
    model_make(&m, 3, 7, 6, layers, nl);
    CHECK(m.layers[20].out_c == 4 && m.layers[20].out_h == 7 && m.layers[22].out_h == 4 &&
          m.layers[22].out_w == 3 && m.layers[18].out_h == 4 && m.nclasses == 5);
    CHECK(m.nbuffers == 3 * (2 * 4 + 1) + 3 * (2 * 6 + 1) && m.ntensors == 6 + 6 * 2 + 2);

    gt_dataset ds = {.n = 12, .c = 3, .h = 7, .w = 6, .nclasses = 5};
    size_t img = (size_t)3 * 7 * 6;
    ds.images = gt_alloc(ds.n * img);
    ds.labels = gt_alloc(ds.n * sizeof *ds.labels);
    for (size_t j = 0; j < ds.n * img; j++)
        ds.images[j] = (uint8_t)gt_rng_below(&rng, 256);
    for (uint32_t j = 0; j < ds.n; j++)
        ds.labels[j] = (uint16_t)gt_rng_below(&rng, 5);
    uint32_t idx[4] = {5, 0, 11, 7};
    net_case t = {.batch = {&ds, idx, 4, 1, 99}, .train = 1};
    gt_err e;
    CHECK_MSG(gt_cpu_net_create(&t.net, &m, 4, &e) == 0, "%s", e.msg);
    t.params = fill_uniform(m.nparams, -0.5f, 0.5f);
    t.buffers = fill_const(m.nbuffers, NAN);
    gt_model_init_buffers(&m, t.buffers);
    float *grad = fill_const(m.nparams, NAN);
    int correct = -1;

    /* NULL buffers cannot run batch norm. */
    CHECK(isnan(gt_cpu_net_run(&t.net, t.params, NULL, &t.batch, 1, grad, &correct)));
    CHECK(isnan(gt_cpu_net_step(&t.net, t.params, &t.batch, 0, NULL, &correct)) && correct == 0);

    double loss = gt_cpu_net_run(&t.net, t.params, t.buffers, &t.batch, 1, grad, &correct);
    CHECK(isfinite(loss) && loss > 0 && correct >= 0 && correct <= 4);
    /* The first batch norm's running statistics moved from (0, 1) by 0.1 towards its input's. */
    const gt_layer *bn = &m.layers[1];
    size_t plane = (size_t)bn->in_h * bn->in_w, mcount = 4 * plane;
    for (int ch = 0; ch < bn->in_c; ch++) {
        double sum = 0, sq = 0;
        for (int i = 0; i < 4; i++)
            for (size_t j = 0; j < plane; j++) {
                double v = t.net.act[1][((size_t)i * bn->in_c + ch) * plane + j];
                sum += v, sq += v * v;
            }
        double mean = sum / mcount, var = (sq - sum * mean) / (mcount - 1);
        CHECK_CLOSE(t.buffers[bn->s_off + ch], 0.1 * mean, 1e-5);
        CHECK_CLOSE(t.buffers[bn->s_off + bn->in_c + ch], 0.9 + 0.1 * var, 1e-5);
    }
    CHECK(t.buffers[bn->s_off + 2 * bn->in_c] == 1.0f);
    /* The batch statistics, not the running ones, make the training loss. */
    CHECK(gt_cpu_net_run(&t.net, t.params, t.buffers, &t.batch, 1, NULL, NULL) == loss);
    CHECK(t.buffers[bn->s_off + 2 * bn->in_c] == 2.0f);

    for (int i = 0; i < m.ntensors; i++) {
        const gt_tensor_info *ti = &m.tensors[i];
        check_grad_with(ti->name, t.params + ti->offset, grad + ti->offset, ti->len,
                        net_mean_loss, &t, 5e-3, 1);
    }

    /* Evaluation reads the running statistics and leaves them alone. */
    float *keep = fill_const(m.nbuffers, 0);
    memcpy(keep, t.buffers, m.nbuffers * sizeof *keep);
    t.train = 0;
    double eval = gt_cpu_net_run(&t.net, t.params, t.buffers, &t.batch, 0, grad, &correct);
    CHECK(isfinite(eval) && fabs(eval - loss) > 1e-4);
    CHECK(memcmp(keep, t.buffers, m.nbuffers * sizeof *keep) == 0);
    for (int i = 0; i < m.ntensors; i += 2) {
        const gt_tensor_info *ti = &m.tensors[i];
        check_grad_with(ti->name, t.params + ti->offset, grad + ti->offset, ti->len,
                        net_mean_loss, &t, 5e-3, 1);
    }
    gt_cpu_net_destroy(&t.net);

    /* Block markers that do not pair up are refused. */
    gt_cpu_net bad;
    gt_model broken = m;
    broken.layers[12].peer = 7;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "layer 12"));
    broken = m;
    broken.layers[20].peer = 3;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "layer 20"));
    broken = m;
    broken.layers[14].peer = 40;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "layer 14"));
    broken = m;
    broken.layers[9].s_off = m.nbuffers - 4;
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "layer 9"));
    broken = m;
    broken.layers[15].stride = 1; /* the body no longer fits the shortcut */
    CHECK(gt_cpu_net_create(&bad, &broken, 4, &e) == -1 && strstr(e.msg, "layer 15"));
    gt_free(t.params), gt_free(t.buffers), gt_free(grad), gt_free(keep);
    gt_free(ds.images), gt_free(ds.labels);
}

/* A kind with no row in the layer-kind table is an error everywhere it is met: the shape rule,
 * the CPU network's checks and steps, and the activation functions. It is never run as an
 * identity layer. */
static void test_unknown_kind(void)
{
    static const layer_desc layers[] = {
        {GT_LINEAR, 5, 0, 0, 0, 0, 0, 0}, {GT_RELU, 0, 0, 0, 0, 0, 0, 0}, {GT_LINEAR, 3, 0, 0, 0, 0, 0, 0}};
    const gt_layer_kind unknown = (gt_layer_kind)(GT_RES_END + 1);
    gt_model m;
    model_make(&m, 1, 2, 3, layers, 3);
    gt_err e = {{0}};
    long long out[3];
    gt_layer L = m.layers[1];
    CHECK(gt_layer_out_shape(&L, out, &e) == 0 && out[0] == 5 && out[1] == 1 && out[2] == 1);
    L.kind = unknown;
    CHECK(gt_layer_out_shape(&L, out, &e) == -1 && strstr(e.msg, "not a known kind"));
    CHECK(gt_layer_kind_of(unknown) == NULL && gt_layer_kind_of((gt_layer_kind)-1) == NULL);

    gt_cpu_net net;
    gt_model broken = m;
    broken.layers[1].kind = unknown;
    CHECK(gt_cpu_net_create(&net, &broken, 4, &e) == -1 && strstr(e.msg, "layer 1") &&
          strstr(e.msg, "not a known kind"));

    /* A net made for a good model whose layer then changes kind refuses the step. */
    gt_dataset ds = {.n = 4, .c = 1, .h = 2, .w = 3, .nclasses = 3};
    ds.images = gt_alloc(4 * 6);
    ds.labels = gt_alloc(4 * sizeof *ds.labels);
    uint32_t idx[4] = {0, 1, 2, 3};
    gt_batch b = {&ds, idx, 4, 1, 7, NULL};
    float *params = fill_uniform(m.nparams, -0.5f, 0.5f);
    CHECK(gt_cpu_net_create(&net, &m, 4, &e) == 0);
    CHECK(isfinite(gt_cpu_net_step(&net, params, &b, 1, NULL, NULL)));
    m.layers[1].kind = unknown;
    CHECK(isnan(gt_cpu_net_step(&net, params, &b, 1, NULL, NULL)));
    gt_cpu_net_destroy(&net);

    /* The activation functions take only activations and leave the output alone otherwise. */
    float x[4] = {-1, 2, -3, 4}, y[4] = {9, 9, 9, 9};
    CHECK(gt_act_forward(GT_CONV, x, y, 4) == -1 && gt_act_forward(unknown, x, y, 4) == -1);
    CHECK(gt_act_backward(GT_DROPOUT, x, x, y, 4) == -1);
    CHECK(y[0] == 9 && y[1] == 9 && y[2] == 9 && y[3] == 9);
    CHECK(gt_act_forward(GT_RELU, x, y, 4) == 0 && y[0] == 0 && y[1] == 2);
    gt_free(params), gt_free(ds.images), gt_free(ds.labels);
}

int main(void)
{
    gt_rng_seed(&rng, 20240611);
    test_conv_known();
    test_conv_case(2, 3, 7, 9, 4, 3, 0, 1, 1);  /* odd sizes, 35-element plane: groups of 8 */
    test_conv_case(3, 2, 7, 9, 5, 3, 1, 1, 1);  /* padding, and a group cut short by n */
    test_conv_case(2, 1, 6, 5, 3, 5, 2, 1, 1);  /* pad 2 with a 5x5 kernel wider than some rows */
    test_conv_case(2, 2, 18, 18, 6, 3, 0, 1, 1); /* 256-element plane: one sample per group */
    test_conv_case(2, 3, 8, 8, 4, 3, 1, 1, 0);  /* no bias */
    test_conv_case(3, 2, 8, 8, 4, 3, 1, 2, 0);  /* ResNet's downsampling 3x3: 8x8 -> 4x4 */
    test_conv_case(2, 3, 7, 9, 5, 1, 0, 2, 0);  /* its 1x1 shortcut, odd sizes: 7x9 -> 4x5 */
    test_conv_case(2, 2, 9, 8, 3, 3, 1, 3, 1);  /* stride 3 with a bias, rows left over */
    test_conv_case(1, 2, 11, 10, 3, 5, 2, 2, 1); /* 5x5, pad 2, stride 2 */
    test_linear_case(3, 13, 7);
    test_linear_case(6, 37, 21);
    test_pool_case(GT_AVGPOOL, 2, 3, 8, 6, 2);
    test_pool_case(GT_AVGPOOL, 2, 2, 7, 9, 2);
    test_pool_case(GT_AVGPOOL, 1, 2, 7, 11, 3);
    test_pool_case(GT_MAXPOOL, 2, 3, 8, 6, 2);
    test_pool_case(GT_MAXPOOL, 2, 2, 7, 9, 2);
    test_pool_case(GT_MAXPOOL, 1, 2, 7, 11, 3);
    test_maxpool_ties();
    test_gap();
    test_batchnorm_known();
    test_batchnorm_case(1);
    test_batchnorm_case(0);
    test_add();
    test_act_case(GT_RELU, "relu dx");
    test_act_case(GT_SIGMOID, "sigmoid dx");
    test_act_case(GT_TANH, "tanh dx");
    test_dropout();
    test_softmax_xent();
    test_input_normalize();
    test_network();
    test_residual_network();
    test_unknown_kind();
    TEST_DONE();
}
