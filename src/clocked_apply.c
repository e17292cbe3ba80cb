/* clocked_apply.c - a clock's apply in parts of the stripes that any worker takes once every
 * share's gradient of the part is in (sync, ssp). With the store step in parts (store_parts.c) a
 * worker's own share lands in its slot part by part as its backward finishes it, so each part of
 * a clock is applied beside the backwards still computing the rest; else (ssp) the parts are one
 * per live worker, taken once every share is in. Each part sums the shares in share order, as
 * the whole clock's apply does: the same bits. */
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PART_OPEN, PART_TAKEN, PART_DONE };

/* A lone worker on one host is the store's only writer between its clocks, and computes on what
 * the last apply left. It used to read the store in place: a GPU uploaded straight from it. The
 * applies now also write each updated stripe into the worker's own buffer with streaming stores
 * (gt_ps_apply_stripes_out), and it computes on that: on an H200's host a copy engine read the
 * store's lines, which the apply leaves modified in the cores' caches, at ~29 GB/s, and the
 * streaming stores' copy at ~50 (cnn-wide through the store on one GPU: 13 MB a step). Whatever
 * else writes the store (a rollback, a resume) moves its stripes' versions, and the next clock's
 * pull copies those stripes (clocked_copy_pull). CPU workers take the same path, so that CI runs
 * it. */
static int clocked_copy_init(run *r, gt_err *e)
{
    if (r->W != 1 || r->H != 1)
        return 0;
    r->clk.copy_ver = malloc((size_t)r->ps.nranges * sizeof *r->clk.copy_ver);
    if (!r->clk.copy_ver)
        return gt_fail(e, "out of memory for the lone worker's copy");
    for (int s = 0; s < r->ps.nranges; s++)
        r->clk.copy_ver[s] = UINT64_MAX; /* nothing copied yet */
    r->clk.copy = r->workers[0].dev->params;
    return 0;
}

/* The lone worker's copy brought up to date before its clock's step (nothing where the applies
 * kept it); the device's parameters are the copy. Without a copy, the device computes on the
 * store in place. */
void clocked_copy_pull(run *r, worker *w)
{
    if (r->clk.copy)
        gt_ps_pull_stale(&r->ps, r->clk.copy, r->clk.copy_ver);
    else
        w->dev->params = r->ps.params;
}

/* The store's step for sync and ssp: in parts where store_parts.c chooses it (GPUs, large models,
 * one host; the slots sum fp32 gradients), and a lone worker's copy. */
int clocked_parts_init(run *r, gt_err *e)
{
    if (clocked_copy_init(r, e))
        return -1;
    int parts = store_parts_init(r, 0, STORE_PART_MIN_APPLY);
    if (!parts)
        return 0;
    store_parts_order(r, 0, r->clk.order);
    r->clk.landed = calloc((size_t)r->clk.R * (size_t)parts, sizeof *r->clk.landed);
    return r->clk.landed ? 0 : gt_fail(e, "out of memory for the parts' marks");
}

void clocked_parts_free(run *r)
{
    free(r->clk.copy_ver);
    r->clk.copy_ver = NULL;
    r->clk.copy = NULL;
    store_parts_free(r);
    free(r->clk.landed);
    r->clk.landed = NULL;
}

/* The epoch's end: the clocked core's positions, and no part landed. */
void clocked_parts_epoch_reset(run *r)
{
    clocked_epoch_reset(r);
    if (r->clk.landed)
        memset(r->clk.landed, 0, (size_t)r->clk.R * (size_t)r->store_parts * sizeof *r->clk.landed);
}

/* The shares of clock `applied` whose gradient of apply part p is in: every share deposited and,
 * in parts, those whose part has landed. Caller holds r->mu. */
static uint64_t part_in_locked(const run *r, int p)
{
    uint64_t k = r->clk.applied % (uint64_t)r->clk.R, in = r->clk.deposited[k];
    if (r->store_parts)
        in |= r->clk.landed[k * (uint64_t)r->store_parts + (uint64_t)p];
    return in;
}

/* Begins the apply of clock `applied` where its gradients are in: in parts, as soon as any part
 * has every share's; else once every share is in, one part of the stripes per live worker, so
 * that workers waiting for it share it. Returns whether an apply is in progress. Caller holds
 * r->mu. */
int clocked_apply_begin_locked(run *r)
{
    run_clocked *k = &r->clk;
    if (k->apply_parts > 0)
        return 1;
    uint64_t c = k->applied, full = clocked_full_mask(r);
    uint64_t deposited = k->deposited[c % (uint64_t)k->R];
    int parts = r->store_parts, ready = deposited == full;
    for (int p = 0; p < parts && !ready; p++)
        ready = part_in_locked(r, p) == full;
    if (!ready)
        return 0;
    if (!parts) {
        parts = r->nlive < r->ps.nranges ? r->nlive : r->ps.nranges;
        parts = parts > 1 ? parts : 1;
    }
    k->apply_parts = parts;
    k->apply_done = k->apply_finishing = 0;
    memset(k->part_state, PART_OPEN, sizeof k->part_state);
    /* The mean over this host's shares (one host in parts; ssp averages its stores across hosts:
     * a round every --sync-every clocks, the epoch's last left to its end). The progress is the
     * clock's own: the samples of its shares still computing count as done. */
    uint64_t missing = 0;
    for (uint64_t left = full & ~deposited; left; left &= left - 1)
        missing++;
    run_lr lr = run_lr_at(r, 0,
                          atomic_load(&r->stats.samples_total) +
                              missing * (uint64_t)r->batch * (uint64_t)r->H,
                          r->W);
    k->apply_t = atomic_load(&r->ps.updates) + 1;
    k->apply_epoch = lr.epoch;
    k->apply_scale = lr.gscale;
    k->apply_round = r->H > 1 && !r->halt && (c + 1) % (uint64_t)r->cfg->sync_every == 0 &&
                     c + 1 < k->clocks;
    if (parts > 1)
        pthread_cond_broadcast(&r->cv); /* waiters take parts */
    return 1;
}

/* Takes an open part of the apply in progress whose gradients are all in and applies it: 1, or 0
 * where none is ready. Caller holds r->mu, released during the part; the time is w's push. */
int clocked_apply_one_locked(run *r, worker *w)
{
    run_clocked *k = &r->clk;
    uint64_t full = clocked_full_mask(r);
    int p = 0;
    while (p < k->apply_parts && (k->part_state[p] != PART_OPEN || part_in_locked(r, p) != full))
        p++;
    if (p == k->apply_parts)
        return 0;
    k->part_state[p] = PART_TAKEN;
    int n = k->apply_parts;
    int lo = r->store_parts ? r->parts.part_s[p] : (int)((int64_t)r->ps.nranges * p / n);
    int hi = r->store_parts ? r->parts.part_s[p + 1] : (int)((int64_t)r->ps.nranges * (p + 1) / n);
    uint64_t c = k->applied, t = k->apply_t;
    double ep = k->apply_epoch;
    float gscale = k->apply_scale;
    pthread_mutex_unlock(&r->mu);
    double t0 = gt_now();
    clocked_apply(r, c, lo, hi, gscale, t, ep);
    pthread_mutex_lock(&r->mu);
    k->part_state[p] = PART_DONE;
    k->apply_done++;
    w->push_s += gt_now() - t0;
    return 1;
}

/* Clock c's apply is over: its parts' marks are cleared for the clock that takes its slot next.
 * Caller holds r->mu. */
void clocked_apply_end_locked(run *r, uint64_t c)
{
    if (r->clk.landed)
        memset(r->clk.landed + c % (uint64_t)r->clk.R * (uint64_t)r->store_parts, 0,
               (size_t)r->store_parts * sizeof *r->clk.landed);
    r->clk.apply_parts = 0;
    r->clk.apply_finishing = 0;
}

/* ---- a worker's own share, part by part -------------------------------------------------- */

/* The share in one worker's exchange. */
typedef struct share_xchg {
    run *r;
    worker *w;
    uint64_t clock;
    int share;
} share_xchg;

/* Part k of the share is in its slot: it counts for its clock's apply. The parts that now have
 * every share's gradient go to the workers waiting meanwhile where there are any (a worker whose
 * step is done), else the mode applies them here, beside the rest of this worker's backward: one
 * worker applying every part as it lands would hold its own later parts back while the others
 * wait. */
static void part_landed(void *arg, int k)
{
    share_xchg *x = arg;
    run *r = x->r;
    pthread_mutex_lock(&r->mu);
    uint64_t slot = x->clock % (uint64_t)r->clk.R;
    r->clk.landed[slot * (uint64_t)r->store_parts + (uint64_t)k] |= 1ull << x->share;
    if (r->clk.idle > 0)
        pthread_cond_broadcast(&r->cv);
    else
        r->ops->apply_ready_locked(r, x->w);
    pthread_mutex_unlock(&r->mu);
}

/* store_parts_step's exchange: the parts go down into the share's slot (the device's d->grad),
 * none back up (the next clock loads the store as it then is). */
static int share_exchange(run *r, worker *w, void *arg)
{
    gt_err e = {{0}};
    int rc = w->dev->ops->exchange(w->dev, r->store_parts, r->parts.bounds, r->clk.order, NULL,
                                   part_landed, arg, &e);
    if (rc < 0)
        snprintf(w->error, sizeof w->error, "%s", e.msg);
    return rc;
}

/* share_compute: in parts, a worker's own share goes through the exchange into its slot; a share
 * it took over from a failed worker is computed whole into its own buffer (an apply may be using
 * the parts that worker landed: clocked_parts_store copies the others). */
int clocked_share_compute(run *r, worker *w, uint64_t clock, int share, const gt_batch *b,
                          gt_step_out *o)
{
    gt_device *d = w->dev;
    if (r->store_parts && share == w->index) {
        share_xchg x = {.r = r, .w = w, .clock = clock, .share = share};
        return store_parts_step(r, w, b, o, clock, share_exchange, &x);
    }
    int later = d->grad_later;
    d->grad_later = 0; /* the step downloads its gradient itself */
    int rc = worker_compute(r, w, b, o, clock);
    d->grad_later = later;
    return rc;
}

/* A computed share's gradient into its slot in parts: only the parts no apply has taken are
 * written (zeros where the gradient is dropped, --on-nan skip: the parts already applied keep
 * what they were applied with, as hogwild's parts do). */
void clocked_parts_store(run *r, worker *w, uint64_t clock, int share, int rc)
{
    float *slot = clocked_slot(r, clock, share);
    const float *grad = w->dev->grad;
    pthread_mutex_lock(&r->mu);
    int in_apply = clock == r->clk.applied && r->clk.apply_parts > 0;
    for (int p = 0; p < r->store_parts; p++) {
        if (in_apply && r->clk.part_state[p] != PART_OPEN)
            continue;
        size_t lo = r->parts.bounds[p], len = r->parts.bounds[p + 1] - lo;
        if (rc != 0)
            memset(slot + lo, 0, len * sizeof(float));
        else if (grad != slot)
            memcpy(slot + lo, grad + lo, len * sizeof(float));
    }
    pthread_mutex_unlock(&r->mu);
}
