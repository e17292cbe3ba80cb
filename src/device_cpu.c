/* device_cpu.c - the CPU backend behind the device table: one gt_cpu_net per worker thread.
 *
 * It is the reference every GPU op is checked against, so it does nothing clever: load_params is
 * free (the worker pulls straight into d->params and d->buffers), train_step is gt_cpu_net_run:
 * with momentum 1 into d->stats (the batch's statistics for the store), or, with keep_grad, moving
 * d->buffers itself. */
#include "gputrain/bf16.h"
#include "gputrain/device.h"
#include "gputrain/layers.h"
#include "gputrain/ps.h" /* gt_all_finite */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GT_EVAL_CHUNK 1024
#define GT_EVAL_BYTES ((size_t)256 << 20) /* the activations an evaluation chunk may add */

/* Samples an evaluation pass takes at once: up to GT_EVAL_CHUNK where their activations fit in
 * GT_EVAL_BYTES (a LeNet), else the training batch (a residual network keeps ~2 MB of
 * activations a sample, which 1024 samples would turn into gigabytes a worker). */
static int cpu_eval_chunk(const gt_model *m, int max_batch)
{
    size_t per = m->max_act * ((size_t)m->nlayers + 3) * sizeof(float);
    size_t fit = per ? GT_EVAL_BYTES / per : GT_EVAL_CHUNK;
    int chunk = fit < GT_EVAL_CHUNK ? (int)fit : GT_EVAL_CHUNK;
    return chunk > max_batch ? chunk : max_batch;
}

typedef struct cpu_impl {
    gt_cpu_net net;
    int chunk;            /* samples an evaluation pass takes at once (cpu_eval_chunk) */
    uint32_t *eval_idx;
    gt_step_out queued[2]; /* step_queue's results, oldest first, for step_end */
    int nqueued;
    uint16_t *grad_half;  /* exchange's bf16 gradient (d->grad_bf16), made by its first */
} cpu_impl;

static int cpu_load_params(gt_device *d, gt_err *e) { return 0; }

static int cpu_train_step(gt_device *d, const gt_batch *b, gt_step_out *out, gt_err *e)
{
    cpu_impl *c = d->impl;
    if (b->n < 1 || b->n > d->max_batch)
        return gt_fail(e, "%s: batch of %d samples (buffers hold %d)", d->name, b->n, d->max_batch);
    float *bufs = d->keep_grad ? d->buffers : d->stats;
    c->net.bn_momentum = d->keep_grad ? GT_BN_MOMENTUM : 1.0;
    out->loss_sum = gt_cpu_net_run(&c->net, d->params, bufs, b, 1, d->grad, &out->correct);
    return 0;
}

/* step_queue computes the step at once (the CPU has nothing to overlap) and keeps its results
 * for step_end, so that a mode's queued steps run here as they do on a GPU. */
static int cpu_step_queue(gt_device *d, const gt_batch *b, gt_err *e)
{
    cpu_impl *c = d->impl;
    if (c->nqueued == 2)
        return gt_fail(e, "%s: a third step queued before the first ended", d->name);
    if (cpu_train_step(d, b, &c->queued[c->nqueued], e))
        return -1;
    c->nqueued++;
    return 0;
}

static int cpu_step_end(gt_device *d, gt_step_out *out, gt_err *e)
{
    cpu_impl *c = d->impl;
    if (c->nqueued == 0)
        return gt_fail(e, "%s: no queued step to end", d->name);
    *out = c->queued[0];
    c->queued[0] = c->queued[1];
    c->nqueued--;
    return 0;
}

/* Whether any of n bf16 values is an Inf or a NaN. */
static int cpu_bf16_nonfinite(const uint16_t *h, size_t n)
{
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= (h[i] & 0x7f80u) == 0x7f80u;
    return bad != 0;
}

/* device.h's exchange, one part after another: the gradient is in d->grad already (with
 * grad_bf16 each part is rounded into grad_half); each part is checked (its first Inf or NaN
 * stops the exchange, as a GPU's flag does), given to part() and copied from src (where given)
 * where the device computes on its own copy. */
static int cpu_exchange(gt_device *d, int nparts, const size_t *bounds, const int *order,
                        const float *src, void (*part)(void *arg, int k), void *arg, gt_err *e)
{
    cpu_impl *c = d->impl;
    if (nparts < 1 || nparts > GT_STORE_PARTS_MAX)
        return gt_fail(e, "%s: an exchange in %d parts (1..%d)", d->name, nparts,
                       GT_STORE_PARTS_MAX);
    if (d->grad_bf16 && !c->grad_half) {
        c->grad_half = gt_alloc(d->model->nparams * sizeof *c->grad_half);
        if (!c->grad_half)
            return gt_fail(e, "%s: out of memory for the bf16 gradient", d->name);
        d->grad_half = c->grad_half;
    }
    for (int i = 0; i < nparts; i++) {
        int k = order[i];
        size_t lo = bounds[k], len = bounds[k + 1] - lo;
        if (d->grad_bf16) {
            gt_bf16_round_n(d->grad + lo, c->grad_half + lo, len);
            if (cpu_bf16_nonfinite(c->grad_half + lo, len))
                return 1;
        } else if (!gt_all_finite(d->grad + lo, len)) {
            return 1;
        }
        part(arg, k);
        if (src && src != d->params)
            memcpy(d->params + lo, src + lo, len * sizeof(float));
    }
    return 0;
}

/* Each of n rows of k logits: the index of its first largest entry, into pred. */
static void cpu_argmax(const float *logits, int n, int k, int32_t *pred)
{
    for (int i = 0; i < n; i++)
        pred[i] = gt_argmax(logits + (size_t)i * k, k);
}

static int cpu_evaluate(gt_device *d, const gt_dataset *ds, uint32_t lo, uint32_t hi,
                        gt_step_out *out, gt_err *e)
{
    cpu_impl *c = d->impl;
    out->loss_sum = 0;
    out->correct = 0;
    if (d->eval_ema) /* the CPU keeps no device step's moving average */
        return gt_fail(e, "%s: evaluate: no moving average on the device", d->name);
    uint32_t chunk = (uint32_t)c->chunk;
    for (uint32_t s = lo; s < hi; s += chunk) {
        uint32_t n = hi - s < chunk ? hi - s : chunk;
        for (uint32_t i = 0; i < n; i++)
            c->eval_idx[i] = s + i;
        gt_batch b = {.ds = ds, .idx = c->eval_idx, .n = (int)n};
        int hits = 0;
        out->loss_sum += gt_cpu_net_run(&c->net, d->params, d->buffers, &b, 0, NULL, &hits);
        out->correct += hits;
        if (d->eval_pred) /* the logits' first maximum, as gt_softmax_xent counts a hit */
            cpu_argmax(c->net.act[d->model->nlayers], (int)n, d->model->nclasses,
                       d->eval_pred + s);
    }
    return 0;
}

static void cpu_close(gt_device *d)
{
    cpu_impl *c = d->impl;
    if (c) {
        gt_cpu_net_destroy(&c->net);
        gt_free(c->eval_idx);
        gt_free(c->grad_half);
        free(c);
    }
    gt_free(d->params);
    gt_free(d->grad);
    gt_free(d->buffers);
    gt_free(d->stats);
    free(d);
}

static const gt_device_ops cpu_ops = {
    .load_params = cpu_load_params,
    .load_buffers = cpu_load_params, /* it computes with d->buffers itself */
    .train_step = cpu_train_step,
    .evaluate = cpu_evaluate,
    .step_queue = cpu_step_queue,
    .step_end = cpu_step_end,
    .exchange = cpu_exchange,
    .close = cpu_close,
};

int gt_cpu_device_open(gt_device **out, const gt_model *m, int max_batch, int index, gt_err *e)
{
    *out = NULL;
    gt_device *d = calloc(1, sizeof *d);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!d || !c) {
        free(d);
        free(c);
        return gt_fail(e, "cpu:%d: out of memory", index);
    }
    d->ops = &cpu_ops;
    d->impl = c;
    d->ordinal = index;
    d->model = m;
    d->max_batch = max_batch;
    snprintf(d->name, sizeof d->name, "cpu:%d", index);
    int net_batch = cpu_eval_chunk(m, max_batch);
    c->chunk = net_batch;
    d->params = gt_alloc(m->nparams * sizeof(float));
    d->grad = gt_alloc(m->nparams * sizeof(float));
    c->eval_idx = gt_alloc((size_t)net_batch * sizeof(uint32_t));
    if (m->nbuffers) {
        d->buffers = gt_alloc(m->nbuffers * sizeof(float));
        d->stats = gt_alloc(m->nbuffers * sizeof(float));
    }
    if (!d->params || !d->grad || !c->eval_idx || (m->nbuffers && (!d->buffers || !d->stats))) {
        cpu_close(d);
        return gt_fail(e, "cpu:%d: out of memory for %zu parameters", index, m->nparams);
    }
    if (m->nbuffers) {
        gt_model_init_buffers(m, d->buffers);
        gt_model_init_buffers(m, d->stats);
    }
    gt_err why;
    if (gt_cpu_net_create(&c->net, m, net_batch, &why) != 0) {
        cpu_close(d);
        if (net_batch == max_batch)
            return gt_fail(e, "cpu:%d: %s", index, why.msg);
        return gt_fail(e, "cpu:%d: %s (evaluation's pass; the training batch is %d)", index,
                       why.msg, max_batch);
    }
    *out = d;
    return 0;
}

void gt_device_close(gt_device *d)
{
    if (d)
        d->ops->close(d);
}
