/* device_cuda.cu - one GPU behind the gt_device table: everything a worker's steps need is
 * allocated once at open, so a step only copies, launches and synchronises once.
 *
 * A training batch travels: the sample ids, labels and images are gathered on the host into a
 * pinned staging slot, copied on the copy stream into the slot's device twin, and the compute
 * stream waits on that copy's event. Two slots let prefetch() stage the next batch while the
 * current one computes. The step then normalises the bytes, runs the layers forward, the loss,
 * the layers backward into a zeroed gradient, and copies the gradient and the loss back into
 * pinned host memory before its one synchronisation. */
#include "gt_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_EVAL_CHUNK 1024

/* Where the parts of a batch of n samples sit in a staging slot, host and device alike. */
typedef struct slot_layout {
    size_t labels, images, total; /* byte offsets (ids at 0) and the bytes to copy */
} slot_layout;

typedef struct cuda_slot {
    uint8_t *host;            /* pinned */
    uint8_t *dev;
    cudaEvent_t uploaded;     /* recorded on the copy stream after the upload */
    cudaEvent_t consumed;     /* recorded on the compute stream after the step that read it */
    const gt_dataset *ds;     /* the batch it holds: its dataset, n and (at offset 0) ids */
    int n;                    /* 0: holds no batch */
    uint64_t staged;          /* staging order, to replace the older slot */
} cuda_slot;

typedef struct cuda_impl {
    gt_cuda_ctx *ctx;
    cudaStream_t copy;
    int cap;                           /* samples one forward pass holds: max(max_batch, chunk) */
    size_t in_len;
    int nclasses;
    gt_cuda_layer layer[GT_MAX_LAYERS];
    float *params, *grad;              /* nparams each */
    float *act[GT_MAX_LAYERS + 1];     /* act[0] the input, act[l + 1] layer l's output; cap rows */
    float *dact[2];                    /* gradient flowing backward (ping-pong), max_batch rows */
    uint8_t *mask[GT_MAX_LAYERS];      /* dropout keep flags, max_batch rows */
    cuda_slot slot[2];
    uint64_t nstaged;
    uint8_t *eval_x, *eval_y;          /* one evaluation chunk's images and labels */
    gt_cuda_result *result;
    gt_cuda_result *result_host;       /* pinned */
    gt_cuda_allreduce *allreduce;      /* NCCL communicator and optimizer state, allreduce mode */
} cuda_impl;

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

static slot_layout slot_layout_for(int n, size_t in_len)
{
    slot_layout l;
    l.labels = align16((size_t)n * sizeof(uint32_t));
    l.images = align16(l.labels + (size_t)n);
    l.total = l.images + (size_t)n * in_len;
    return l;
}

static size_t layer_in_len(const gt_model *m, int l)
{
    return l == 0 ? m->layers[0].in_len : m->layers[l - 1].out_len;
}

/* ---- buffers and close ----------------------------------------------------------------------- */

static void cuda_free_impl(cuda_impl *g)
{
    for (int l = 0; l < GT_MAX_LAYERS; l++) {
        gt_cuda_layer_destroy(&g->layer[l]);
        if (g->mask[l])
            cudaFree(g->mask[l]);
    }
    for (int l = 0; l <= GT_MAX_LAYERS; l++)
        if (g->act[l])
            cudaFree(g->act[l]);
    void *dev[] = {g->params, g->grad, g->dact[0], g->dact[1], g->slot[0].dev, g->slot[1].dev,
                   g->eval_x, g->eval_y, g->result};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i])
            cudaFree(dev[i]);
    void *host[] = {g->slot[0].host, g->slot[1].host, g->result_host};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        if (host[i])
            cudaFreeHost(host[i]);
    for (int s = 0; s < 2; s++) {
        if (g->slot[s].uploaded)
            cudaEventDestroy(g->slot[s].uploaded);
        if (g->slot[s].consumed)
            cudaEventDestroy(g->slot[s].consumed);
    }
    if (g->copy)
        cudaStreamDestroy(g->copy);
    cudaGetLastError();
}

static void cuda_close(gt_device *d)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    if (g) {
        if (g->ctx) {
            cudaSetDevice(g->ctx->ordinal);
            cudaStreamSynchronize(g->ctx->stream);
            if (g->copy)
                cudaStreamSynchronize(g->copy);
            gt_cuda_allreduce_free(g->allreduce);
            cuda_free_impl(g);
            gt_cuda_ctx_close(g->ctx);
        }
        free(g);
    }
    gt_host_free(d->params);
    gt_host_free(d->grad);
    free(d);
}

static int cuda_alloc_host(gt_cuda_ctx *c, void **p, size_t bytes, gt_err *e)
{
    cudaError_t st = cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (st != cudaSuccess) {
        *p = NULL;
        return gt_fail(e, "%s: cudaHostAlloc of %zu pinned bytes failed: %s", c->name, bytes,
                       cudaGetErrorString(st));
    }
    return 0;
}

static int cuda_alloc_buffers(gt_device *d, cuda_impl *g, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    const gt_model *m = d->model;
    size_t nb = (size_t)d->max_batch, cap = (size_t)g->cap, nparams = m->nparams;
    size_t slot_bytes = slot_layout_for(d->max_batch, g->in_len).total;
    if (gt_cuda_malloc(c, (void **)&g->params, nparams * sizeof(float), e) ||
        gt_cuda_malloc(c, (void **)&g->grad, nparams * sizeof(float), e))
        return -1;
    for (int l = 0; l <= m->nlayers; l++)
        if (gt_cuda_malloc(c, (void **)&g->act[l], cap * layer_in_len(m, l) * sizeof(float), e))
            return -1;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].kind == GT_DROPOUT &&
            gt_cuda_malloc(c, (void **)&g->mask[l], nb * m->layers[l].out_len, e))
            return -1;
    for (int i = 0; i < 2; i++)
        if (gt_cuda_malloc(c, (void **)&g->dact[i], nb * m->max_act * sizeof(float), e))
            return -1;
    for (int s = 0; s < 2; s++) {
        if (gt_cuda_malloc(c, (void **)&g->slot[s].dev, slot_bytes, e) ||
            cuda_alloc_host(c, (void **)&g->slot[s].host, slot_bytes, e))
            return -1;
        GT_CUDA_CHECK(c->name, e,
                      cudaEventCreateWithFlags(&g->slot[s].uploaded, cudaEventDisableTiming));
        GT_CUDA_CHECK(c->name, e,
                      cudaEventCreateWithFlags(&g->slot[s].consumed, cudaEventDisableTiming));
    }
    if (gt_cuda_malloc(c, (void **)&g->eval_x, cap * g->in_len, e) ||
        gt_cuda_malloc(c, (void **)&g->eval_y, cap, e) ||
        gt_cuda_malloc(c, (void **)&g->result, sizeof *g->result, e) ||
        cuda_alloc_host(c, (void **)&g->result_host, sizeof *g->result_host, e))
        return -1;
    /* Finite contents for timing the convolution algorithms. */
    GT_CUDA_CHECK(c->name, e, cudaMemset(g->params, 0, nparams * sizeof(float)));
    for (int l = 0; l <= m->nlayers; l++)
        GT_CUDA_CHECK(c->name, e,
                      cudaMemset(g->act[l], 0, cap * layer_in_len(m, l) * sizeof(float)));
    d->params = (float *)gt_host_alloc(nparams * sizeof(float));
    d->grad = (float *)gt_host_alloc(nparams * sizeof(float));
    if (!d->params || !d->grad)
        return gt_fail(e, "%s: out of host memory for %zu parameters", c->name, nparams);
    return 0;
}

/* Times each convolution's algorithms at the training batch size with a generous workspace,
 * then keeps only the workspace the chosen ones need. */
static int cuda_plan_layers(gt_device *d, cuda_impl *g, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    const gt_model *m = d->model;
    size_t free_bytes = 0, total_bytes = 0, need = 0;
    GT_CUDA_CHECK(c->name, e, cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t search = free_bytes / 4 < GT_CUDA_SEARCH_WS ? free_bytes / 4 : GT_CUDA_SEARCH_WS;
    if (gt_cuda_ctx_set_workspace(c, search, e))
        return -1;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        size_t layer_need = 0;
        if (gt_cuda_layer_init(c, &g->layer[l], L, (uint32_t)l, e))
            return -1;
        if (L->kind == GT_CONV &&
            gt_cuda_layer_choose_algos(c, &g->layer[l], d->max_batch, g->cap, g->act[l],
                                       g->params + L->w_off, g->act[l + 1],
                                       l ? g->dact[0] : NULL, g->grad + L->w_off, &layer_need,
                                       e))
            return -1;
        need = layer_need > need ? layer_need : need;
    }
    return gt_cuda_ctx_set_workspace(c, need, e);
}

/* ---- batches --------------------------------------------------------------------------------- */

static int cuda_check_dataset(const gt_device *d, const cuda_impl *g, const gt_dataset *ds,
                              gt_err *e)
{
    if ((size_t)ds->c * ds->h * ds->w != g->in_len)
        return gt_fail(e, "%s: dataset samples are %d x %d x %d, the model takes %zu inputs",
                       d->name, ds->c, ds->h, ds->w, g->in_len);
    return 0;
}

static int cuda_check_batch(const gt_device *d, const cuda_impl *g, const gt_batch *b, gt_err *e)
{
    if (b->n < 1 || b->n > d->max_batch)
        return gt_fail(e, "%s: batch of %d samples (buffers hold %d)", d->name, b->n,
                       d->max_batch);
    return cuda_check_dataset(d, g, b->ds, e);
}

static int slot_holds(const cuda_slot *s, const gt_batch *b)
{
    return s->n == b->n && s->ds == b->ds &&
           memcmp(s->host, b->idx, (size_t)b->n * sizeof(uint32_t)) == 0;
}

/* The slot holding b, or -1. */
static int slot_find(const cuda_impl *g, const gt_batch *b)
{
    for (int s = 0; s < 2; s++)
        if (slot_holds(&g->slot[s], b))
            return s;
    return -1;
}

/* An empty slot, else the one staged longer ago. */
static int slot_free(const cuda_impl *g)
{
    for (int s = 0; s < 2; s++)
        if (g->slot[s].n == 0)
            return s;
    return g->slot[0].staged < g->slot[1].staged ? 0 : 1;
}

/* Gathers b into the slot's pinned bytes and starts their upload on the copy stream. */
static int slot_stage(gt_device *d, cuda_impl *g, cuda_slot *s, const gt_batch *b, gt_err *e)
{
    const gt_dataset *ds = b->ds;
    slot_layout lay = slot_layout_for(b->n, g->in_len);
    /* The previous upload from this host buffer must be done before it is overwritten. */
    GT_CUDA_CHECK(d->name, e, cudaEventSynchronize(s->uploaded));
    s->n = 0;
    uint32_t *ids = (uint32_t *)s->host;
    uint8_t *labels = s->host + lay.labels, *images = s->host + lay.images;
    for (int i = 0; i < b->n; i++) {
        uint32_t id = b->idx[i];
        if (id >= ds->n)
            return gt_fail(e, "%s: batch sample %u is outside the dataset (%u samples)", d->name,
                           id, ds->n);
        if (ds->labels[id] >= g->nclasses)
            return gt_fail(e, "%s: sample %u has label %d, the model has %d classes", d->name, id,
                           ds->labels[id], g->nclasses);
        ids[i] = id;
        labels[i] = ds->labels[id];
        memcpy(images + (size_t)i * g->in_len, ds->images + (size_t)id * g->in_len, g->in_len);
    }
    /* And the device copy must not be overwritten before the step that read it is done. */
    GT_CUDA_CHECK(d->name, e, cudaStreamWaitEvent(g->copy, s->consumed, 0));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(s->dev, s->host, lay.total, cudaMemcpyHostToDevice, g->copy));
    GT_CUDA_CHECK(d->name, e, cudaEventRecord(s->uploaded, g->copy));
    s->ds = ds;
    s->n = b->n;
    s->staged = ++g->nstaged;
    return 0;
}

static int cuda_prefetch(gt_device *d, const gt_batch *next, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (cuda_check_batch(d, g, next, e))
        return -1;
    if (slot_find(g, next) >= 0)
        return 0;
    return slot_stage(d, g, &g->slot[slot_free(g)], next, e);
}

/* ---- passes ---------------------------------------------------------------------------------- */

/* Forward through every layer; without train, dropout is the identity and is skipped (the next
 * layer reads its input). *logits is the last layer's output. */
static int cuda_forward(cuda_impl *g, const gt_model *m, gt_cuda_pass pass, int train,
                        const float **logits, gt_err *e)
{
    const float *x = g->act[0];
    for (int l = 0; l < m->nlayers; l++) {
        if (!train && m->layers[l].kind == GT_DROPOUT)
            continue;
        pass.mask = g->mask[l];
        if (gt_cuda_layer_forward(g->ctx, &g->layer[l], &pass, x, g->act[l + 1], e))
            return -1;
        x = g->act[l + 1];
    }
    *logits = x;
    return 0;
}

/* Backward from dact[0] (the loss gradient); the first layer computes no input gradient. */
static int cuda_backward(cuda_impl *g, const gt_model *m, gt_cuda_pass pass, gt_err *e)
{
    float *dy = g->dact[0], *dx = g->dact[1];
    for (int l = m->nlayers - 1; l >= 0; l--) {
        gt_layer_kind kind = m->layers[l].kind;
        if (l == 0 && kind != GT_CONV && kind != GT_LINEAR)
            break;
        pass.mask = g->mask[l];
        if (gt_cuda_layer_backward(g->ctx, &g->layer[l], &pass, g->act[l], g->act[l + 1], dy,
                                   l ? dx : NULL, e))
            return -1;
        float *t = dy;
        dy = dx;
        dx = t;
    }
    return 0;
}

/* ---- the device operations ------------------------------------------------------------------- */

static int cuda_load_params(gt_device *d, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->params, d->params, d->model->nparams * sizeof(float),
                                  cudaMemcpyHostToDevice, g->ctx->stream));
    return 0;
}

static int cuda_train_step(gt_device *d, const gt_batch *b, gt_step_out *out, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    gt_cuda_ctx *c = g->ctx;
    const gt_model *m = d->model;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (cuda_check_batch(d, g, b, e))
        return -1;
    int s = slot_find(g, b);
    if (s < 0) {
        s = slot_free(g);
        if (slot_stage(d, g, &g->slot[s], b, e))
            return -1;
    }
    cuda_slot *slot = &g->slot[s];
    slot_layout lay = slot_layout_for(b->n, g->in_len);
    GT_CUDA_CHECK(d->name, e, cudaStreamWaitEvent(c->stream, slot->uploaded, 0));
    slot->n = 0;
    gt_cuda_pass pass = {b->n, g->params, g->grad, NULL, (const uint32_t *)slot->dev, b->seed,
                         b->epoch};
    const float *logits;
    if (gt_cuda_normalize(c, slot->dev + lay.images, g->act[0], (size_t)b->n * g->in_len, e) ||
        cuda_forward(g, m, pass, 1, &logits, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaMemsetAsync(g->result, 0, sizeof *g->result, c->stream));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemsetAsync(g->grad, 0, m->nparams * sizeof(float), c->stream));
    if (gt_cuda_softmax_xent(c, logits, slot->dev + lay.labels, b->n, g->nclasses,
                             1.0f / (float)b->n, g->dact[0], g->result, e) ||
        cuda_backward(g, m, pass, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaEventRecord(slot->consumed, c->stream));
    if (!d->keep_grad)
        GT_CUDA_CHECK(d->name, e,
                      cudaMemcpyAsync(d->grad, g->grad, m->nparams * sizeof(float),
                                      cudaMemcpyDeviceToHost, c->stream));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->result_host, g->result, sizeof *g->result,
                                  cudaMemcpyDeviceToHost, c->stream));
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(c->stream));
    out->loss_sum = g->result_host->loss_sum;
    out->correct = g->result_host->correct;
    return 0;
}

static int cuda_eval_chunk(gt_device *d, cuda_impl *g, const gt_dataset *ds, uint32_t lo, int n,
                           gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    for (int i = 0; i < n; i++)
        if (ds->labels[lo + i] >= g->nclasses)
            return gt_fail(e, "%s: sample %u has label %d, the model has %d classes", d->name,
                           lo + i, ds->labels[lo + i], g->nclasses);
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->eval_x, ds->images + (size_t)lo * g->in_len,
                                  (size_t)n * g->in_len, cudaMemcpyHostToDevice, c->stream));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->eval_y, ds->labels + lo, (size_t)n, cudaMemcpyHostToDevice,
                                  c->stream));
    gt_cuda_pass pass = {n, g->params, NULL, NULL, NULL, 0, 0};
    const float *logits;
    if (gt_cuda_normalize(c, g->eval_x, g->act[0], (size_t)n * g->in_len, e) ||
        cuda_forward(g, d->model, pass, 0, &logits, e))
        return -1;
    return gt_cuda_softmax_xent(c, logits, g->eval_y, n, g->nclasses, 1.0f / (float)n, NULL,
                                g->result, e);
}

static int cuda_evaluate(gt_device *d, const gt_dataset *ds, uint32_t lo, uint32_t hi,
                         gt_step_out *out, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    gt_cuda_ctx *c = g->ctx;
    out->loss_sum = 0;
    out->correct = 0;
    if (lo > hi || hi > ds->n)
        return gt_fail(e, "%s: evaluation range [%u, %u) outside the dataset (%u samples)",
                       d->name, lo, hi, ds->n);
    if (lo == hi)
        return 0;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (cuda_check_dataset(d, g, ds, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaMemsetAsync(g->result, 0, sizeof *g->result, c->stream));
    for (uint32_t s = lo; s < hi; s += (uint32_t)g->cap) {
        int n = hi - s < (uint32_t)g->cap ? (int)(hi - s) : g->cap;
        if (cuda_eval_chunk(d, g, ds, s, n, e))
            return -1;
    }
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->result_host, g->result, sizeof *g->result,
                                  cudaMemcpyDeviceToHost, c->stream));
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(c->stream));
    out->loss_sum = g->result_host->loss_sum;
    out->correct = g->result_host->correct;
    return 0;
}

/* The allreduce trio lives in allreduce_cuda.cu; without NCCL there is no reduce_update, and
 * train.c refuses that mode. */
static const gt_device_ops cuda_ops = {
    .load_params = cuda_load_params,
    .train_step = cuda_train_step,
    .evaluate = cuda_evaluate,
    .prefetch = cuda_prefetch,
    .local_update = NULL,
#ifdef GT_HAVE_NCCL
    .reduce_update = gt_cuda_reduce_update,
#else
    .reduce_update = NULL,
#endif
    .get_params = gt_cuda_get_params,
    .set_state = gt_cuda_set_state,
    .close = cuda_close,
};

int gt_cuda_device_parts_of(gt_device *d, gt_cuda_device_parts *out)
{
    if (!d || d->ops != &cuda_ops)
        return -1;
    cuda_impl *g = (cuda_impl *)d->impl;
    out->ctx = g->ctx;
    out->params = g->params;
    out->grad = g->grad;
    out->allreduce = &g->allreduce;
    return 0;
}

/* ---- open ------------------------------------------------------------------------------------ */

static int cuda_check_model(const gt_model *m, int max_batch, int ordinal, int cap, gt_err *e)
{
    if (max_batch < 1)
        return gt_fail(e, "gpu:%d: batch size %d: must be at least 1", ordinal, max_batch);
    if (m->nlayers < 1 || m->nlayers > GT_MAX_LAYERS)
        return gt_fail(e, "gpu:%d: model %s has %d layers (expected 1 to %d)", ordinal, m->name,
                       m->nlayers, GT_MAX_LAYERS);
    if (m->layers[m->nlayers - 1].kind != GT_LINEAR)
        return gt_fail(e, "gpu:%d: model %s does not end in a linear layer", ordinal, m->name);
    /* cuDNN describes a tensor with int dimensions and at most 2^31 - 1 elements. */
    if (m->max_act > (size_t)INT32_MAX / (size_t)cap)
        return gt_fail(e, "gpu:%d: model %s: %d samples of %zu activations exceed what cuDNN "
                       "addresses (2^31 elements)", ordinal, m->name, cap, m->max_act);
    return 0;
}

int gt_cuda_device_open(gt_device **out, const gt_model *m, int max_batch, int ordinal, int tf32,
                        gt_err *e)
{
    *out = NULL;
    int cap = max_batch > CUDA_EVAL_CHUNK ? max_batch : CUDA_EVAL_CHUNK;
    if (cuda_check_model(m, max_batch, ordinal, cap, e))
        return -1;
    gt_device *d = (gt_device *)calloc(1, sizeof *d);
    cuda_impl *g = (cuda_impl *)calloc(1, sizeof *g);
    if (!d || !g) {
        free(d);
        free(g);
        return gt_fail(e, "gpu:%d: out of host memory", ordinal);
    }
    d->ops = &cuda_ops;
    d->impl = g;
    d->ordinal = ordinal;
    d->model = m;
    d->max_batch = max_batch;
    g->cap = cap;
    g->in_len = m->layers[0].in_len;
    g->nclasses = (int)m->layers[m->nlayers - 1].out_len;
    if (gt_cuda_ctx_open(&g->ctx, ordinal, tf32, e)) {
        cuda_close(d);
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%s", g->ctx->name);
    cudaError_t st = cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking);
    if (st != cudaSuccess) {
        gt_cuda_fail(e, d->name, "cudaStreamCreateWithFlags", cudaGetErrorString(st), __FILE__,
                     __LINE__);
        cuda_close(d);
        return -1;
    }
    if (cuda_alloc_buffers(d, g, e) || cuda_plan_layers(d, g, e)) {
        cuda_close(d);
        return -1;
    }
    *out = d;
    return 0;
}
