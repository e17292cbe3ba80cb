/* store_parts.c - the store step in parts (hogwild, sync, ssp): the stripes cut into parts that a
 * device downloads as its backward finishes them (device.h's exchange), so that the store's work
 * on a part runs beside the rest of the backward. */
#include "run.h"

#include <stdio.h>

/* Whether every worker's device can exchange its step in parts (step_queue, exchange) and, with
 * `overlaps`, runs its steps beside the host too (step_begin: a GPU), where parts gain. */
static int devices_part(const run *r, int overlaps)
{
    for (int i = 0; i < r->W; i++) {
        const gt_device_ops *ops = r->workers[i].dev->ops;
        if (!ops->step_queue || !ops->exchange || (overlaps && !ops->step_begin))
            return 0;
    }
    return 1;
}

/* How many parts the store step takes (--store-parts; auto: GT_STORE_PARTS_AUTO where every
 * device runs beside the host, a GPU, and the model is large enough to gain, each part at least
 * part_min parameters), never more than the stripes; 0 where a step's store work stays whole:
 * --overlap, the lock-free store, across hosts (whose averaging rounds rebase the store under the
 * workers) and devices that cannot exchange in parts. */
static int parts_count(const run *r, size_t part_min)
{
    const gt_config *cfg = r->cfg;
    int parts = cfg->store_parts;
    if (parts < 0) {
        size_t most = r->n / part_min;
        parts = GT_STORE_PARTS_AUTO;
        if ((size_t)parts > most)
            parts = (int)most;
        if (r->n < GT_STORE_PARTS_MIN_PARAMS || !devices_part(r, 1))
            parts = 0;
    }
    if (cfg->overlap || r->ps.nstripes == 0 || r->H > 1 || !devices_part(r, 0))
        return 0;
    return parts < r->ps.nranges ? parts : r->ps.nranges;
}

/* The stripe from which the parameters without weight decay (the biases and batch norm's, which
 * model.h lays out after every weight) make the last part on their own: a backward finishes them
 * only at its end, with the first layer's. nranges where there is no such part. */
static int tail_stripe(const run *r, int parts)
{
    size_t lo, hi;
    if (r->m->ndecay >= r->n)
        return r->ps.nranges;
    for (int s = parts - 1; s < r->ps.nranges; s++) {
        gt_ps_stripes_span(&r->ps, s, s + 1, &lo, &hi);
        if (hi > r->m->ndecay)
            return s;
    }
    return r->ps.nranges;
}

/* The stripe where the first part ends, of `body` parts over stripes [0, tail): the first part
 * holds the first layers, whose gradient the backward finishes last, so its download and apply
 * sit between the backward's end and the next forward; it ends at the stripe that holds the end
 * of the last tensor within half an even part, where that stripe comes before the even cut
 * (cnn-wide: its two convolutions, 52 K of 3.3 M, instead of a third of its first linear layer
 * with them). -1 where no tensor ends early enough: the even cut. */
static int first_cut(const run *r, int tail, int body)
{
    size_t lo, hi;
    int even = (int)((int64_t)tail / body);
    gt_ps_stripes_span(&r->ps, 0, tail, &lo, &hi);
    size_t end = gt_model_tensors_end_within(r->m, (hi - lo) / (size_t)body / 2);
    for (int s = 1; end > 0 && s < even; s++) {
        gt_ps_stripes_span(&r->ps, s - 1, s, &lo, &hi);
        if (hi >= end)
            return s;
    }
    return -1;
}

/* Parts of whole stripes, the first one small where the first layers allow (first_cut), the
 * others as even as the stripes allow, the biases and batch norm's in a last part of their own,
 * auto's at least part_min parameters each; every device's steps then leave their gradient for
 * the exchange and mark the parts as their backward finishes them. r->store_parts stays 0
 * (whole) where parts_count gives fewer than 2. Returns r->store_parts. */
int store_parts_init(run *r, int grad_bf16, size_t part_min)
{
    int parts = parts_count(r, part_min);
    if (parts < 2)
        return 0;
    r->store_parts = parts;
    r->store_grad_bf16 = grad_bf16;
    run_parts *p = &r->parts;
    int tail = tail_stripe(r, parts), body = tail < r->ps.nranges ? parts - 1 : parts;
    int cut = body > 1 ? first_cut(r, tail, body) : -1;
    for (int k = 0; k <= body; k++) /* with a first cut, parts 1.. even over [cut, tail) */
        p->part_s[k] = cut < 0 ? (int)((int64_t)k * tail / body)
                       : k == 0 ? 0 : cut + (int)((int64_t)(k - 1) * (tail - cut) / (body - 1));
    p->part_s[parts] = r->ps.nranges;
    for (int k = 0; k < parts; k++) /* the last part's end is the last bound */
        gt_ps_stripes_span(&r->ps, p->part_s[k], p->part_s[k + 1], &p->bounds[k],
                           &p->bounds[k + 1]);
    for (int i = 0; i < r->W; i++) {
        gt_device *d = r->workers[i].dev;
        d->grad_later = 1;
        d->grad_bf16 = grad_bf16;
        d->part_bounds = p->bounds;
        d->part_count = parts;
    }
    return parts;
}

/* The parts in the order a worker takes them where its device does not mark them: from part
 * `first` on, round. */
void store_parts_order(const run *r, int first, int *order)
{
    for (int k = 0; k < r->store_parts; k++)
        order[k] = (first + k) % r->store_parts;
}

/* The parameters in the first part (the first layers'), 0 where the store step is whole: the
 * log's store_part_first. */
size_t store_parts_first(const run *r)
{
    return r->store_parts ? r->parts.bounds[1] : 0;
}

/* The devices' steps leave the exchange alone again (r->parts goes with the run). */
void store_parts_free(run *r)
{
    for (int i = 0; r->store_parts && r->workers && i < r->W; i++) {
        gt_device *d = r->workers[i].dev;
        if (!d)
            continue;
        d->grad_later = 0;
        d->grad_bf16 = 0;
        d->part_bounds = NULL;
        d->part_count = 0;
    }
}

/* A step with its store work in parts beside it: the step is queued on the parameters the device
 * holds, exchange(r, w, arg) runs the device's exchange (each part as the backward finishes it on
 * a GPU's layer path; else after the step), then the step's results are checked as
 * worker_compute checks them. 0, 1 (a non-finite step: no part from its first non-finite one on
 * was given to the store) or -1 with the worker's error set. */
int store_parts_step(run *r, worker *w, const gt_batch *b, gt_step_out *o, uint64_t step,
                     int (*exchange)(run *r, worker *w, void *arg), void *arg)
{
    gt_device *d = w->dev;
    gt_err e = {{0}};
    if (worker_injected(r, w, atomic_load(&w->steps)))
        return -1;
    if (d->ops->step_queue(d, b, &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    int x = exchange(r, w, arg);
    if (d->ops->step_end(d, o, &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    if (x < 0)
        return -1;
    /* the exchange checked every part, or stopped at a non-finite one */
    o->grad_status = x > 0 ? GT_GRAD_NONFINITE : GT_GRAD_FINITE;
    return worker_check(r, w, o, step);
}
