/* parity_cuda.cu - one layer at a time on host arrays, for tests/test_cuda_parity.c: copy the
 * inputs to the GPU, run the same gt_cuda_layer code a training step runs, copy the results back.
 *
 * Each helper builds the gt_layer its CPU twin's arguments describe, with the weights at offset
 * 0 of a small parameter array and the bias after them. Allocating per call is fine here: these
 * are test entry points, not the training loop. */
#include "gt_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PARITY_MAX_BUFS = 12 };

/* Device buffers of one helper call, freed together. */
typedef struct parity_bufs {
    void *p[PARITY_MAX_BUFS];
    int count;
} parity_bufs;

/* Host arrays of one layer call; NULL where unused. */
typedef struct parity_io {
    const float *x, *wt, *b, *dy;
    float *y, *dx, *dw, *db;
    uint8_t *mask;
    const uint32_t *ids;
    uint64_t seed;
    uint32_t epoch;
    float *buffers;           /* batch norm: its 2 C + 1 buffer values, read and written back */
    int train;                /* batch norm: batch statistics (moving buffers) or running ones */
} parity_io;

static void parity_free(parity_bufs *bufs)
{
    for (int i = 0; i < bufs->count; i++)
        cudaFree(bufs->p[i]);
    bufs->count = 0;
}

/* A device buffer of bytes, filled from host when host is non-NULL. */
static int parity_alloc(gt_cuda_ctx *c, parity_bufs *bufs, void **dev, const void *host,
                        size_t bytes, gt_err *e)
{
    if (bufs->count == PARITY_MAX_BUFS)
        return gt_fail(e, "%s: parity helper needs more than %d buffers", c->name,
                       PARITY_MAX_BUFS);
    if (gt_cuda_malloc(c, dev, bytes, e))
        return -1;
    bufs->p[bufs->count++] = *dev;
    if (host)
        GT_CUDA_CHECK(c->name, e,
                      cudaMemcpyAsync(*dev, host, bytes, cudaMemcpyHostToDevice, c->stream));
    return 0;
}

static int parity_upload(gt_cuda_ctx *c, float *dev, const float *host, size_t count, gt_err *e)
{
    GT_CUDA_CHECK(c->name, e,
                  cudaMemcpyAsync(dev, host, count * sizeof(float), cudaMemcpyHostToDevice,
                                  c->stream));
    return 0;
}

static int parity_download(gt_cuda_ctx *c, void *host, const void *dev, size_t bytes, gt_err *e)
{
    if (host)
        GT_CUDA_CHECK(c->name, e,
                      cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, c->stream));
    return 0;
}

static int parity_layer_run(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, const parity_io *io,
                            parity_bufs *bufs, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t xin = (size_t)n * L->in_len * sizeof(float);
    size_t yout = (size_t)n * L->out_len * sizeof(float);
    size_t nparams = L->w_len + L->b_len, bytes_params = (nparams ? nparams : 1) * sizeof(float);
    float *x, *y, *dy, *dx = NULL, *params, *grad, *buffers = NULL;
    uint8_t *mask;
    uint32_t *ids = NULL;
    if (parity_alloc(c, bufs, (void **)&x, io->x, xin, e) ||
        parity_alloc(c, bufs, (void **)&y, NULL, yout, e) ||
        parity_alloc(c, bufs, (void **)&dy, io->dy, yout, e) ||
        (io->dx && parity_alloc(c, bufs, (void **)&dx, NULL, xin, e)) ||
        parity_alloc(c, bufs, (void **)&params, NULL, bytes_params, e) ||
        parity_alloc(c, bufs, (void **)&grad, NULL, bytes_params, e) ||
        parity_alloc(c, bufs, (void **)&mask, NULL, (size_t)n * L->out_len, e) ||
        (io->ids && parity_alloc(c, bufs, (void **)&ids, io->ids, (size_t)n * sizeof *ids, e)) ||
        (io->buffers && parity_alloc(c, bufs, (void **)&buffers, io->buffers,
                                     L->s_len * sizeof(float), e)))
        return -1;
    float *w = params + L->w_off, *b = params + L->b_off;
    if ((io->wt && parity_upload(c, w, io->wt, L->w_len, e)) ||
        (io->b && L->b_len && parity_upload(c, b, io->b, L->b_len, e)))
        return -1;
    size_t ws_need = 0;
    if (L->kind == GT_CONV &&
        gt_cuda_layer_choose_algos(c, cl, n, n, 1, x, w, y, dx, grad + L->w_off, &ws_need, e))
        return -1;
    /* Timing the algorithms wrote into grad: the starting values go in after it. */
    if ((io->dw && parity_upload(c, grad + L->w_off, io->dw, L->w_len, e)) ||
        (io->db && L->b_len && parity_upload(c, grad + L->b_off, io->db, L->b_len, e)))
        return -1;
    /* Batch norm moves the buffers by momentum, as gt_batchnorm_forward_train does. */
    gt_cuda_pass pass = {n, params, grad, mask, ids, io->seed, io->epoch, NULL, io->train,
                         buffers, 1, NULL, NULL, NULL, 0, NULL, 0};
    if (gt_cuda_layer_forward(c, cl, &pass, x, y, e) ||
        (io->dy && gt_cuda_layer_backward(c, cl, &pass, x, y, dy, dx, e)))
        return -1;
    if (parity_download(c, io->y, y, yout, e) || parity_download(c, io->dx, dx, xin, e) ||
        parity_download(c, io->mask, mask, (size_t)n * L->out_len, e) ||
        parity_download(c, io->dw, grad + L->w_off, L->w_len * sizeof(float), e) ||
        (L->b_len && parity_download(c, io->db, grad + L->b_off, L->b_len * sizeof(float), e)) ||
        (buffers && parity_download(c, io->buffers, buffers, L->s_len * sizeof(float), e)))
        return -1;
    GT_CUDA_CHECK(c->name, e, cudaStreamSynchronize(c->stream));
    return 0;
}

static int parity_layer(gt_cuda_ctx *c, const gt_layer *L, uint32_t index, int n,
                        const parity_io *io, gt_err *e)
{
    gt_cuda_layer cl;
    parity_bufs bufs = {{NULL}, 0};
    GT_CUDA_CHECK(c->name, e, cudaSetDevice(c->ordinal));
    if (L->kind == GT_CONV && c->ws_bytes < GT_CUDA_SEARCH_WS &&
        gt_cuda_ctx_set_workspace(c, GT_CUDA_SEARCH_WS, e))
        return -1;
    int rc = gt_cuda_layer_init(c, &cl, L, index, e);
    if (rc == 0)
        rc = parity_layer_run(c, &cl, n, io, &bufs, e);
    cudaStreamSynchronize(c->stream);
    gt_cuda_layer_destroy(&cl);
    parity_free(&bufs);
    return rc;
}

static gt_layer parity_shape(gt_layer_kind kind, int ch, int h, int w, int oc, int oh, int ow)
{
    gt_layer L;
    memset(&L, 0, sizeof L);
    L.kind = kind;
    L.in_c = ch;
    L.in_h = h;
    L.in_w = w;
    L.out_c = oc;
    L.out_h = oh;
    L.out_w = ow;
    L.in_len = (size_t)ch * h * w;
    L.out_len = (size_t)oc * oh * ow;
    return L;
}

int gt_cuda_test_conv2d_strided(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                                const float *wt, const float *b, int o, int k, int pad,
                                int stride, const float *dy, float *y, float *dx, float *dw,
                                float *db, gt_err *e)
{
    if (stride < 1 || h + 2 * pad < k || w + 2 * pad < k)
        return gt_fail(e, "%s: convolution k%d pad%d stride %d does not fit %d x %d", c->name, k,
                       pad, stride, h, w);
    gt_layer L = parity_shape(GT_CONV, ch, h, w, o, (h + 2 * pad - k) / stride + 1,
                              (w + 2 * pad - k) / stride + 1);
    snprintf(L.name, sizeof L.name, "c1");
    L.k = k;
    L.pad = pad;
    L.stride = stride;
    L.no_bias = b == NULL;
    L.w_len = (size_t)o * ch * k * k;
    L.b_off = L.w_len;
    L.b_len = b ? (size_t)o : 0;
    parity_io io = {x, wt, b, dy, y, dx, dw, db, NULL, NULL, 0, 0, NULL, 1};
    return parity_layer(c, &L, 0, n, &io, e);
}

int gt_cuda_test_conv2d(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                        const float *wt, const float *b, int o, int k, int pad, const float *dy,
                        float *y, float *dx, float *dw, float *db, gt_err *e)
{
    return gt_cuda_test_conv2d_strided(c, x, n, ch, h, w, wt, b, o, k, pad, 1, dy, y, dx, dw, db,
                                       e);
}

int gt_cuda_test_batchnorm(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                           const float *gamma, const float *beta, float *running_mean,
                           float *running_var, int train, const float *dy, float *y, float *dx,
                           float *dgamma, float *dbeta, gt_err *e)
{
    if (!train && dy)
        return gt_fail(e, "%s: batch norm's backward is tested in training only", c->name);
    gt_layer L = parity_shape(GT_BATCHNORM, ch, h, w, ch, h, w);
    snprintf(L.name, sizeof L.name, "b1");
    size_t len = (size_t)ch;
    /* gamma then beta, as the model places them; the layer's own buffer layout, count last. */
    float *params = (float *)malloc(2 * len * sizeof(float));
    float *buffers = (float *)malloc((2 * len + 1) * sizeof(float));
    if (!params || !buffers) {
        free(params);
        free(buffers);
        return gt_fail(e, "%s: out of host memory", c->name);
    }
    memcpy(params, gamma, len * sizeof(float));
    memcpy(params + len, beta, len * sizeof(float));
    memcpy(buffers, running_mean, len * sizeof(float));
    memcpy(buffers + len, running_var, len * sizeof(float));
    buffers[2 * len] = 0.0f;
    L.w_len = len;
    L.b_off = len;
    L.b_len = len;
    L.s_len = 2 * len + 1;
    parity_io io = {x, params, params + len, dy, y, dx, dgamma, dbeta, NULL, NULL, 0, 0,
                    buffers, train};
    int rc = parity_layer(c, &L, 0, n, &io, e);
    if (rc == 0 && train) {
        memcpy(running_mean, buffers, len * sizeof(float));
        memcpy(running_var, buffers + len, len * sizeof(float));
        if (buffers[2 * len] != 1.0f)
            rc = gt_fail(e, "%s: batch norm counted %g batches, not 1", c->name,
                         (double)buffers[2 * len]);
    }
    free(params);
    free(buffers);
    return rc;
}

int gt_cuda_test_gap(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                     const float *dy, float *y, float *dx, gt_err *e)
{
    gt_layer L = parity_shape(GT_GAP, ch, h, w, ch, 1, 1);
    parity_io io = {x, NULL, NULL, dy, y, dx, NULL, NULL, NULL, NULL, 0, 0, NULL, 1};
    return parity_layer(c, &L, 0, n, &io, e);
}

int gt_cuda_test_linear(gt_cuda_ctx *c, const float *x, int n, int in, const float *wt,
                        const float *b, int out, const float *dy, float *y, float *dx, float *dw,
                        float *db, gt_err *e)
{
    gt_layer L = parity_shape(GT_LINEAR, in, 1, 1, out, 1, 1);
    snprintf(L.name, sizeof L.name, "f1");
    L.w_len = (size_t)out * in;
    L.b_off = L.w_len;
    L.b_len = b ? (size_t)out : 0;
    parity_io io = {x, wt, b, dy, y, dx, dw, db, NULL, NULL, 0, 0, NULL, 1};
    return parity_layer(c, &L, 0, n, &io, e);
}

int gt_cuda_test_pool(gt_cuda_ctx *c, gt_layer_kind kind, const float *x, int n, int ch, int h,
                      int w, int k, const float *dy, float *y, float *dx, gt_err *e)
{
    gt_layer L = parity_shape(kind, ch, h, w, ch, h / k, w / k);
    L.k = k;
    parity_io io = {x, NULL, NULL, dy, y, dx, NULL, NULL, NULL, NULL, 0, 0, NULL, 1};
    return parity_layer(c, &L, 0, n, &io, e);
}

int gt_cuda_test_act(gt_cuda_ctx *c, gt_layer_kind kind, const float *x, const float *dy,
                     size_t len, float *y, float *dx, gt_err *e)
{
    if (len > (size_t)INT32_MAX)
        return gt_fail(e, "%s: %zu activations exceed what cuDNN addresses", c->name, len);
    gt_layer L = parity_shape(kind, (int)len, 1, 1, (int)len, 1, 1);
    parity_io io = {x, NULL, NULL, dy, y, dx, NULL, NULL, NULL, NULL, 0, 0, NULL, 1};
    return parity_layer(c, &L, 0, 1, &io, e);
}

int gt_cuda_test_dropout(gt_cuda_ctx *c, const float *x, const float *dy, int n, size_t len,
                         float p, uint64_t seed, uint32_t epoch, const uint32_t *sample_ids,
                         uint32_t layer, float *y, uint8_t *mask, float *dx, gt_err *e)
{
    if (len > (size_t)INT32_MAX)
        return gt_fail(e, "%s: %zu activations per sample are too many", c->name, len);
    gt_layer L = parity_shape(GT_DROPOUT, (int)len, 1, 1, (int)len, 1, 1);
    L.p = p;
    parity_io io = {x, NULL, NULL, dy, y, dx, NULL, NULL, mask, sample_ids, seed, epoch, NULL, 1};
    return parity_layer(c, &L, layer, n, &io, e);
}

static int parity_xent_run(gt_cuda_ctx *c, const float *logits, const uint16_t *labels, int n,
                           int k, float scale, float *dlogits, gt_cuda_result *out,
                           parity_bufs *bufs, gt_err *e)
{
    size_t bytes = (size_t)n * k * sizeof(float);
    float *z, *dz = NULL;
    uint16_t *lab;
    gt_cuda_result *res;
    if (parity_alloc(c, bufs, (void **)&z, logits, bytes, e) ||
        parity_alloc(c, bufs, (void **)&lab, labels, (size_t)n * sizeof *lab, e) ||
        (dlogits && parity_alloc(c, bufs, (void **)&dz, NULL, bytes, e)) ||
        parity_alloc(c, bufs, (void **)&res, NULL, sizeof *res, e))
        return -1;
    GT_CUDA_CHECK(c->name, e, cudaMemsetAsync(res, 0, sizeof *res, c->stream));
    if (gt_cuda_softmax_xent(c, z, lab, n, k, scale, dz, res, e) ||
        parity_download(c, dlogits, dz, bytes, e) || parity_download(c, out, res, sizeof *res, e))
        return -1;
    GT_CUDA_CHECK(c->name, e, cudaStreamSynchronize(c->stream));
    return 0;
}

int gt_cuda_test_softmax_xent(gt_cuda_ctx *c, const float *logits, const uint16_t *labels, int n,
                              int k, float scale, float *dlogits, double *loss, int *correct,
                              gt_err *e)
{
    parity_bufs bufs = {{NULL}, 0};
    gt_cuda_result res = {0, 0, 0};
    GT_CUDA_CHECK(c->name, e, cudaSetDevice(c->ordinal));
    int rc = parity_xent_run(c, logits, labels, n, k, scale, dlogits, &res, &bufs, e);
    cudaStreamSynchronize(c->stream);
    parity_free(&bufs);
    *loss = res.loss_sum;
    *correct = res.correct;
    return rc;
}

static int parity_normalize_run(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len,
                                parity_bufs *bufs, gt_err *e)
{
    uint8_t *s;
    float *d;
    if (parity_alloc(c, bufs, (void **)&s, src, len, e) ||
        parity_alloc(c, bufs, (void **)&d, NULL, len * sizeof(float), e) ||
        gt_cuda_normalize(c, s, d, len, e) || parity_download(c, dst, d, len * sizeof(float), e))
        return -1;
    GT_CUDA_CHECK(c->name, e, cudaStreamSynchronize(c->stream));
    return 0;
}

int gt_cuda_test_normalize(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len, gt_err *e)
{
    parity_bufs bufs = {{NULL}, 0};
    GT_CUDA_CHECK(c->name, e, cudaSetDevice(c->ordinal));
    int rc = parity_normalize_run(c, src, dst, len, &bufs, e);
    cudaStreamSynchronize(c->stream);
    parity_free(&bufs);
    return rc;
}

/* gt_cuda_input on n samples of m's input as stored (raw), cropped and flipped on the device with
 * the key and ids the helper uploads as a staging slot holds them. */
int gt_cuda_test_input(gt_cuda_ctx *c, const gt_model *m, const uint8_t *raw, int n,
                       const uint32_t *ids, uint64_t seed, uint32_t epoch, const gt_augment *aug,
                       float *out, gt_err *e)
{
    parity_bufs bufs = {{NULL}, 0};
    size_t len = (size_t)n * m->in_c * m->in_h * m->in_w;
    gt_cuda_key key = {seed, epoch, 0};
    uint8_t *s;
    float *d;
    gt_cuda_key *k;
    uint32_t *id;
    GT_CUDA_CHECK(c->name, e, cudaSetDevice(c->ordinal));
    int rc = parity_alloc(c, &bufs, (void **)&s, raw, len, e) ||
             parity_alloc(c, &bufs, (void **)&d, NULL, len * sizeof(float), e) ||
             parity_alloc(c, &bufs, (void **)&k, &key, sizeof key, e) ||
             parity_alloc(c, &bufs, (void **)&id, ids, (size_t)n * sizeof *ids, e);
    if (rc == 0) {
        gt_cuda_augment a = {k, id, aug ? aug->pad : 0, aug ? aug->flip : 0};
        rc = gt_cuda_input(c, m, s, d, n, aug ? &a : NULL, e) ||
             parity_download(c, out, d, len * sizeof(float), e);
    }
    cudaStreamSynchronize(c->stream);
    parity_free(&bufs);
    return rc ? -1 : 0;
}
