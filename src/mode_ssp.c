/* mode_ssp.c - stale-synchronous parallel: a worker runs at most --staleness clocks ahead of the
 * oldest unapplied clock and computes on whatever the store holds. The bound is a limit, not a
 * target: a worker waits for the clock before its own where that clock is about to complete, so
 * balanced workers read fresh parameters and only a straggler makes the others run ahead. A
 * complete clock is applied at once, in clock order, shared by the workers at hand; with the
 * store step in parts (store_parts.c) each part of it as soon as every share's gradient of that
 * part has landed, beside the backwards still computing the rest. */
#include "run.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The most parts an apply is cut into: the store's parts, or one per live worker. */
#define SSP_PARTS_MAX GT_STORE_PARTS_MAX
_Static_assert(RUN_SHARE_BITS <= SSP_PARTS_MAX, "one apply part per worker");

/* A part of the apply in progress: not yet taken, being applied, applied. */
enum { SSP_PART_OPEN, SSP_PART_TAKEN, SSP_PART_DONE };

/* The run's (r->own): the apply of clock r->clk.applied in progress, cut into parts of the stripes
 * that any worker takes once their gradients are in (0 parts: none in progress); its update
 * number, epoch and gradient scale. */
typedef struct ssp_run {
    int apply_parts, apply_done;
    int apply_finishing;       /* its last steps (the round across hosts, the fold) are under way */
    unsigned char part_state[SSP_PARTS_MAX];
    uint64_t apply_t;
    double apply_epoch;
    float apply_scale;
    int apply_round;           /* the apply ends with a round across hosts */
    uint64_t *landed;          /* in parts: per ring slot and part, the shares whose gradient of
                                * the part is in the slot (R x r->store_parts) */
    int order[GT_STORE_PARTS_MAX]; /* in parts: the order a device that does not mark takes them */
    int idle;                  /* workers waiting on r->cv, which take the parts as they come */
} ssp_run;

/* A worker's (w->own), under r->mu. */
typedef struct ssp_worker {
    double clock_t0;           /* when it began computing its share of its clock */
    double share_s;            /* moving mean of its seconds a clock, read to compute */
} ssp_worker;

static ssp_run *ssp(const run *r) { return r->own; }
static ssp_worker *sw(const worker *w) { return w->own; }

/* gt_now, unless a test simulates the workers' pace (train.h). */
double (*gt_ssp_clock)(void) = gt_now;

/* The shares of clock `applied` whose gradient of apply part p is in: every share deposited and,
 * in parts, those whose part has landed. Caller holds r->mu. */
static uint64_t ssp_part_in_locked(const run *r, int p)
{
    uint64_t k = r->clk.applied % (uint64_t)r->clk.R, in = r->clk.deposited[k];
    if (r->store_parts)
        in |= ssp(r)->landed[k * (uint64_t)r->store_parts + (uint64_t)p];
    return in;
}

/* Begins the apply of clock `applied` where its gradients are in: in parts, as soon as any part
 * has every share's; else once every share is in, one part of the stripes per live worker, so
 * that workers waiting for it share it. Returns whether an apply is in progress. Caller holds
 * r->mu. */
static int ssp_apply_begin_locked(run *r)
{
    ssp_run *s = ssp(r);
    if (s->apply_parts > 0)
        return 1;
    uint64_t c = r->clk.applied, full = clocked_full_mask(r);
    uint64_t deposited = r->clk.deposited[c % (uint64_t)r->clk.R];
    int parts = r->store_parts, ready = deposited == full;
    for (int p = 0; p < parts && !ready; p++)
        ready = ssp_part_in_locked(r, p) == full;
    if (!ready)
        return 0;
    if (!parts) {
        parts = r->nlive < r->ps.nranges ? r->nlive : r->ps.nranges;
        parts = parts > 1 ? parts : 1;
    }
    s->apply_parts = parts;
    s->apply_done = s->apply_finishing = 0;
    memset(s->part_state, SSP_PART_OPEN, sizeof s->part_state);
    /* The mean over this host's shares: its store is averaged with the others'. Across hosts, a
     * round every --sync-every clocks; the epoch's last round is left to its end. The progress is
     * the clock's own: the samples of its shares still computing are counted as done. */
    uint64_t missing = 0;
    for (uint64_t left = full & ~deposited; left; left &= left - 1)
        missing++;
    run_lr lr = run_lr_at(r, 0,
                          atomic_load(&r->stats.samples_total) +
                              missing * (uint64_t)r->batch * (uint64_t)r->H,
                          r->W);
    s->apply_t = atomic_load(&r->ps.updates) + 1;
    s->apply_epoch = lr.epoch;
    s->apply_scale = lr.gscale;
    s->apply_round = r->H > 1 && !r->halt && (c + 1) % (uint64_t)r->cfg->sync_every == 0 &&
                     c + 1 < r->clk.clocks;
    if (parts > 1)
        pthread_cond_broadcast(&r->cv); /* waiters take parts */
    return 1;
}

/* Every part of clock `applied` is in the store and every share's results are in: the round
 * across hosts where one is due, then the clock is done. Caller holds r->mu, released during the
 * round. */
static void ssp_apply_finish_locked(run *r)
{
    uint64_t c = r->clk.applied, k = c % (uint64_t)r->clk.R;
    gt_err e = {{0}};
    int sig = 0;
    ssp(r)->apply_finishing = 1;
    if (ssp(r)->apply_round) {
        pthread_mutex_unlock(&r->mu);
        sig = hosts_round(r, &e);
        pthread_mutex_lock(&r->mu);
    }
    hosts_agreed_locked(r, sig, &e);
    atomic_store(&r->ps.updates, ssp(r)->apply_t);
    gt_ps_note_staleness(&r->ps, c - r->clk.slot_read_clock[k]);
    clocked_fold_stats_locked(r, c);
    r->clk.claimed[k] = r->clk.deposited[k] = 0;
    r->clk.slot_read_clock[k] = UINT64_MAX;
    if (r->store_parts)
        memset(ssp(r)->landed + k * (uint64_t)r->store_parts, 0,
               (size_t)r->store_parts * sizeof *ssp(r)->landed);
    r->clk.applied = c + 1;
    ssp(r)->apply_parts = 0;
    ssp(r)->apply_finishing = 0;
    jobs_post_due_locked(r, r->clk.applied);
    pthread_cond_broadcast(&r->cv);
}

/* An open part of the apply in progress whose gradients are all in, now taken; -1: none. Caller
 * holds r->mu. */
static int ssp_take_part_locked(run *r)
{
    ssp_run *s = ssp(r);
    uint64_t full = clocked_full_mask(r);
    for (int p = 0; p < s->apply_parts; p++)
        if (s->part_state[p] == SSP_PART_OPEN && ssp_part_in_locked(r, p) == full) {
            s->part_state[p] = SSP_PART_TAKEN;
            return p;
        }
    return -1;
}

/* ssp: clocks are applied in clock order as their gradients come in, each part by the worker
 * that completed it or any worker waiting meanwhile: worker w's push. Caller holds r->mu, which
 * is released during each part. */
static void ssp_apply_ready_locked(run *r, worker *w)
{
    ssp_run *s = ssp(r);
    while (ssp_apply_begin_locked(r) && !s->apply_finishing) {
        uint64_t c = r->clk.applied;
        if (s->apply_done == s->apply_parts) {
            if (r->clk.deposited[c % (uint64_t)r->clk.R] != clocked_full_mask(r))
                return; /* a share's results (its statistics, its step's count) still to come */
            ssp_apply_finish_locked(r);
            continue;
        }
        int p = ssp_take_part_locked(r);
        if (p < 0)
            return;
        int lo = r->store_parts ? r->parts.part_s[p]
                                : (int)((int64_t)r->ps.nranges * p / s->apply_parts);
        int hi = r->store_parts ? r->parts.part_s[p + 1]
                                : (int)((int64_t)r->ps.nranges * (p + 1) / s->apply_parts);
        uint64_t t = s->apply_t;
        double ep = s->apply_epoch;
        float gscale = s->apply_scale;
        pthread_mutex_unlock(&r->mu);
        double t0 = gt_now();
        clocked_apply(r, c, lo, hi, gscale, t, ep);
        pthread_mutex_lock(&r->mu);
        s->part_state[p] = SSP_PART_DONE;
        s->apply_done++;
        w->push_s += gt_now() - t0;
    }
}

/* The clock of the slowest live worker. Caller holds r->mu. */
static uint64_t slowest_clock_locked(run *r)
{
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < r->W; i++)
        if (atomic_load(&r->workers[i].alive) && r->workers[i].clock < m)
            m = r->workers[i].clock;
    return m;
}

/* A worker about to start a clock waits for the clocks before its own at most this many of its
 * own seconds a clock for each clock another worker has left before it, and only where that worker,
 * at its own pace, is done by then: balanced workers meet again after a hitch, a straggler is left
 * behind within the bound. */
#define SSP_FRESH_PACE 1.5

/* The weight of a clock's seconds in a worker's moving mean: about the last ten clocks, so that
 * one clock slowed by a busy host does not make a straggler. */
#define SSP_PACE_WEIGHT 0.1

/* Until when worker w, waiting since `since`, waits for clocks [applied, c): every share still
 * missing there is a live worker's that, at its own pace, computes the clocks it has left in the
 * time they grant (SSP_FRESH_PACE). 0: go on without them. Caller holds r->mu. */
static double ssp_fresh_until_locked(run *r, const worker *w, uint64_t c, double since,
                                     double now)
{
    double grant = SSP_FRESH_PACE * sw(w)->share_s, until = since + grant; /* the apply alone */
    for (uint64_t k = r->clk.applied; k < c; k++) {
        uint64_t missing = clocked_full_mask(r) & ~r->clk.deposited[k % (uint64_t)r->clk.R];
        for (int s = 0; s < r->W; s++) {
            const worker *o = &r->workers[s];
            if (!(missing & (1ull << s)))
                continue;
            if (!atomic_load(&o->alive) || o->clock > k || sw(o)->share_s <= 0)
                return 0;
            double left = (double)(c - o->clock), limit = since + left * grant;
            double t0 = sw(o)->clock_t0 > 0 ? sw(o)->clock_t0 : now; /* not yet begun: from now */
            if (t0 + left * sw(o)->share_s > limit)
                return 0;
            if (limit > until)
                until = limit;
        }
    }
    return now < until ? until : 0;
}

/* Beyond the bound: the worker trains any share that a failed worker left in the clocks in
 * flight (the survivors may all be waiting for the clock it left, and nobody else would), or
 * waits. Caller holds r->mu; -1 (r->mu released) when the worker failed. */
static int ssp_wait_bound_locked(run *r, worker *w, uint64_t c)
{
    uint64_t cc;
    int share = clocked_claim_share_locked(r, w, c - 1, &cc);
    if (share < 0) {
        ssp(r)->idle++;
        pthread_cond_wait(&r->cv, &r->mu);
        ssp(r)->idle--;
        return 0;
    }
    pthread_mutex_unlock(&r->mu);
    if (clocked_share(r, w, cc, share) != 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    return 0;
}

/* Before clock c: reads as fresh as the others allow. The worker waits while more than
 * --staleness clocks before c are unapplied (the bound); within it, it waits only where every
 * clock before c is in or soon will be (ssp_fresh_until_locked), helping to apply them. Balanced
 * workers so compute on every clock before theirs; a straggler still lets the others run ahead
 * up to the bound. Caller holds r->mu; -1 (r->mu released) when the worker failed. */
static int ssp_wait_locked(run *r, worker *w, uint64_t c)
{
    uint64_t s = (uint64_t)r->clk.R - 1; /* --staleness: the slots hold R = staleness + 1 clocks */
    double since = gt_ssp_clock();
    for (;;) {
        ssp_apply_ready_locked(r, w);
        if (r->halt || r->clk.applied >= c)
            return 0;
        if (r->clk.applied + s < c) {
            if (ssp_wait_bound_locked(r, w, c) != 0)
                return -1;
            continue;
        }
        double until = ssp_fresh_until_locked(r, w, c, since, gt_ssp_clock());
        if (until == 0)
            return 0;
        ssp(r)->idle++;
        run_wait_locked(r, until - gt_ssp_clock());
        ssp(r)->idle--;
    }
}

/* One clock of ssp: wait as ssp_wait_locked says, compute on what the store holds, deposit; the
 * clocks now complete are applied at once. */
static int ssp_clock(run *r, worker *w, uint64_t c)
{
    /* The wait is the worker's, less the applies and shares it did meanwhile (their phases). */
    double t = gt_now(), busy = worker_phases_s(w);
    pthread_mutex_lock(&r->mu);
    if (ssp_wait_locked(r, w, c) != 0)
        return -1;
    w->wait_s += gt_now() - t - (worker_phases_s(w) - busy);
    double t0 = gt_ssp_clock();
    if (r->halt) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    w->clock = c;
    sw(w)->clock_t0 = t0;
    uint64_t spread = c - slowest_clock_locked(r);
    if (spread > r->clk.spread_max)
        r->clk.spread_max = spread;
    uint64_t *read_at = &r->clk.slot_read_clock[c % (uint64_t)r->clk.R];
    if (r->clk.applied < *read_at)
        *read_at = r->clk.applied;
    pthread_mutex_unlock(&r->mu);
    /* A lone worker on one host is the store's only writer and applies its clock after computing
     * it, so the store stands still from one apply to the next: its device computes on the store
     * in place, as sync's do (a GPU uploads straight from it, without the copy into its buffer).
     * With several workers on one host a GPU uploads straight from the store too: its load reads
     * the parameters once, as the store holds them while the copy runs, which is what a clock
     * computes on in ssp (an apply of a clock in flight beside it is seen element by element,
     * where the pull's copy saw it stripe by stripe), and the copy under the stripe locks goes
     * (1.6 ms of a 10 ms resnet18 clock on 2 H200s). CPU workers, which compute on d->params
     * itself, pull their own copy. */
    gt_device *d = w->dev;
    float *own = d->params;
    int in_place = r->H == 1 && (r->W == 1 || d->loads_copy);
    double tp = gt_now();
    int pulled;
    if (in_place) {
        d->params = r->ps.params;
        gt_ps_pull_buffers(&r->ps, d->buffers);
        pulled = worker_load(w);
    } else {
        pulled = worker_pull(r, w);
    }
    w->pull_s += gt_now() - tp;
    int computed = pulled == 0 ? clocked_claim_and_compute(r, w, c) : -1;
    d->params = own;
    if (computed != 0)
        return -1;
    /* The applies now ready, and their hand-off to the workers they wake: the worker's push. */
    double ta = gt_now(), pushed = w->push_s;
    pthread_mutex_lock(&r->mu);
    double took = gt_ssp_clock() - t0;
    sw(w)->share_s = sw(w)->share_s > 0 ? sw(w)->share_s + SSP_PACE_WEIGHT * (took - sw(w)->share_s)
                                        : took;
    sw(w)->clock_t0 = 0;
    w->clock = c + 1;
    ssp_apply_ready_locked(r, w);
    if (stop_asked(r)) {
        r->halt = 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    w->push_s = pushed + (gt_now() - ta);
    return 0;
}

/* The epoch's end: help finish shares of clocks that are still open, then wait for all applies. */
static int ssp_drain(run *r, worker *w, uint64_t done)
{
    (void)done;
    double t = gt_now(), busy = worker_phases_s(w); /* as ssp_clock's wait */
    pthread_mutex_lock(&r->mu);
    for (;;) {
        uint64_t cc;
        int share = clocked_claim_share_locked(r, w, r->clk.clocks - 1, &cc);
        if (share >= 0) {
            pthread_mutex_unlock(&r->mu);
            if (clocked_share(r, w, cc, share) != 0)
                return -1;
            pthread_mutex_lock(&r->mu);
            continue;
        }
        ssp_apply_ready_locked(r, w);
        if (r->halt || r->clk.applied >= r->clk.clocks)
            break;
        ssp(r)->idle++;
        pthread_cond_wait(&r->cv, &r->mu);
        ssp(r)->idle--;
    }
    w->wait_s += gt_now() - t - (worker_phases_s(w) - busy);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* ---- the store step in parts: each part of a worker's own share as it lands -------------- */

/* The share in flight in one worker's exchange. */
typedef struct ssp_xchg {
    run *r;
    worker *w;
    uint64_t clock;
    int share;
} ssp_xchg;

/* Part k of the share is in its slot: it counts for its clock's apply. The parts that now have
 * every share's gradient are applied by the workers waiting meanwhile where there are any (a
 * worker whose step is done), else here, beside the rest of this worker's backward: one worker
 * applying every part as it lands would hold its own later parts back while the others wait. */
static void ssp_part(void *arg, int k)
{
    ssp_xchg *x = arg;
    run *r = x->r;
    pthread_mutex_lock(&r->mu);
    uint64_t slot = x->clock % (uint64_t)r->clk.R;
    ssp(r)->landed[slot * (uint64_t)r->store_parts + (uint64_t)k] |= 1ull << x->share;
    if (ssp(r)->idle > 0)
        pthread_cond_broadcast(&r->cv);
    else
        ssp_apply_ready_locked(r, x->w);
    pthread_mutex_unlock(&r->mu);
}

/* store_parts_step's exchange: the parts go down into the share's slot (the device's d->grad), none
 * back up (the next clock loads the store as it then is). */
static int ssp_exchange(run *r, worker *w, void *arg)
{
    gt_err e = {{0}};
    int rc = w->dev->ops->exchange(w->dev, r->store_parts, r->parts.bounds, ssp(r)->order, NULL,
                                   ssp_part, arg, &e);
    if (rc < 0)
        snprintf(w->error, sizeof w->error, "%s", e.msg);
    return rc;
}

/* share_compute: in parts, a worker's own share goes through the exchange into its slot; a share
 * it took over from a failed worker is computed whole into its own buffer (whose parts may be in
 * use by an apply already: ssp_share_done copies the others). */
static int ssp_share_compute(run *r, worker *w, uint64_t clock, int share, const gt_batch *b,
                             gt_step_out *o)
{
    gt_device *d = w->dev;
    if (r->store_parts && share == w->index) {
        ssp_xchg x = {.r = r, .w = w, .clock = clock, .share = share};
        return store_parts_step(r, w, b, o, clock, ssp_exchange, &x);
    }
    int later = d->grad_later;
    d->grad_later = 0; /* the step downloads its gradient itself */
    int rc = worker_compute(r, w, b, o, clock);
    d->grad_later = later;
    return rc;
}

/* share_done: whole, the slot as the clocked modes keep it; in parts, only the parts that no
 * apply has taken are written (zeros where the gradient is dropped, --on-nan skip: the parts
 * already applied keep what they were applied with, as hogwild's parts do). */
static int ssp_share_done(run *r, worker *w, uint64_t clock, int share, int rc)
{
    if (!r->store_parts)
        return clocked_slot_store(r, w, clock, share, rc);
    double t0 = gt_now();
    float *slot = clocked_slot(r, clock, share);
    const float *grad = w->dev->grad;
    pthread_mutex_lock(&r->mu);
    int in_apply = clock == r->clk.applied && ssp(r)->apply_parts > 0;
    for (int p = 0; p < r->store_parts; p++) {
        if (in_apply && ssp(r)->part_state[p] != SSP_PART_OPEN)
            continue;
        size_t lo = r->parts.bounds[p], len = r->parts.bounds[p + 1] - lo;
        if (rc != 0)
            memset(slot + lo, 0, len * sizeof(float));
        else if (grad != slot)
            memcpy(slot + lo, grad + lo, len * sizeof(float));
    }
    pthread_mutex_unlock(&r->mu);
    if (rc == 0)
        clocked_stats_store(r, w, clock, share);
    w->push_s += gt_now() - t0;
    return 0;
}

static int ssp_init(run *r, gt_device **devices, const gt_start *start, gt_err *e)
{
    (void)devices;
    (void)start;
    int s = r->cfg->staleness;
    if (s < 0 || s > GT_MAX_STALENESS) /* the command line refuses these; other callers too */
        return gt_fail(e, "--staleness: %d is out of range (0..%d)", s, GT_MAX_STALENESS);
    if (clocked_init(r, s + 1, s + 1, e) != 0)
        return -1;
    int parts = store_parts_init(r, 0); /* the slots sum fp32 gradients */
    if (parts) {
        r->clk.share_parts = 1;
        store_parts_order(r, 0, ssp(r)->order);
        ssp(r)->landed = calloc((size_t)(s + 1) * (size_t)parts, sizeof *ssp(r)->landed);
        if (!ssp(r)->landed)
            return gt_fail(e, "out of memory");
    }
    return clocked_start_store_threads(r, e);
}

static void ssp_free(run *r)
{
    store_parts_free(r);
    if (r->own)
        free(ssp(r)->landed);
}

/* The epoch's end: the clocked core's positions, and no part landed. */
static void ssp_epoch_reset(run *r)
{
    clocked_epoch_reset(r);
    if (r->store_parts)
        memset(ssp(r)->landed, 0,
               (size_t)r->clk.R * (size_t)r->store_parts * sizeof *ssp(r)->landed);
}

const gt_mode_ops gt_mode_ssp = {
    .run_state = sizeof(ssp_run),
    .worker_state = sizeof(ssp_worker),
    .free = ssp_free,
    .rollback = ROLLBACK_NOW,
    .hosts_rounds = 1,
    .hosts_average = 1,
    .init = ssp_init,
    .clock = ssp_clock,
    .clocked_end = ssp_drain,
    .slot_shares = 1,
    .share_done = ssp_share_done,
    .share_compute = ssp_share_compute,
    .epoch_reset = ssp_epoch_reset,
};
