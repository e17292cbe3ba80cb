/* mode_ssp.c - stale-synchronous parallel: a worker runs at most --staleness clocks ahead of the
 * oldest unapplied clock and computes on whatever the store holds. The bound is a limit, not a
 * target: a worker waits for the clock before its own where that clock is about to complete, so
 * balanced workers read fresh parameters and only a straggler makes the others run ahead. A
 * complete clock is applied at once, in clock order, shared by the workers at hand; with the
 * store step in parts (store_parts.c) each part of it as soon as every share's gradient of that
 * part has landed, beside the backwards still computing the rest. */
#include "run.h"

#include <stdint.h>

/* A worker's (w->own), under r->mu. */
typedef struct ssp_worker {
    double clock_t0;           /* when it began computing its share of its clock */
    double share_s;            /* moving mean of its seconds a clock, read to compute */
} ssp_worker;

static ssp_worker *sw(const worker *w) { return w->own; }

/* gt_now, unless a test simulates the workers' pace (train.h). */
double (*gt_ssp_clock)(void) = gt_now;

/* Every part of clock `applied` is in the store and every share's results are in: the round
 * across hosts where one is due, then the clock is done. Caller holds r->mu, released during the
 * round. */
static void ssp_apply_finish_locked(run *r)
{
    uint64_t c = r->clk.applied, k = c % (uint64_t)r->clk.R;
    gt_err e = {{0}};
    int sig = 0;
    r->clk.apply_finishing = 1;
    if (r->clk.apply_round) {
        pthread_mutex_unlock(&r->mu);
        sig = hosts_round(r, &e);
        pthread_mutex_lock(&r->mu);
    }
    hosts_agreed_locked(r, sig, &e);
    atomic_store(&r->ps.updates, r->clk.apply_t);
    gt_ps_note_staleness(&r->ps, c - r->clk.slot_read_clock[k]);
    clocked_fold_stats_locked(r, c);
    r->clk.claimed[k] = r->clk.deposited[k] = 0;
    r->clk.slot_read_clock[k] = UINT64_MAX;
    clocked_apply_end_locked(r, c);
    r->clk.applied = c + 1;
    jobs_post_due_locked(r, r->clk.applied);
    pthread_cond_broadcast(&r->cv);
}

/* ssp: clocks are applied in clock order as their gradients come in, each part by the worker
 * that completed it or any worker waiting meanwhile (clocked_apply.c): worker w's push. Caller
 * holds r->mu, which is released during each part. */
static void ssp_apply_ready_locked(run *r, worker *w)
{
    while (clocked_apply_begin_locked(r) && !r->clk.apply_finishing) {
        if (r->clk.apply_done == r->clk.apply_parts) {
            if (r->clk.deposited[r->clk.applied % (uint64_t)r->clk.R] != clocked_full_mask(r))
                return; /* a share's results (its statistics, its step's count) still to come */
            ssp_apply_finish_locked(r);
            continue;
        }
        if (!clocked_apply_one_locked(r, w))
            return;
    }
}

/* Waits on r->cv (with `timed`, at most `seconds`) among the idle workers, which the parts of an
 * apply wake as they become ready (clocked_apply.c). Caller holds r->mu. */
static void ssp_idle_wait_locked(run *r, int timed, double seconds)
{
    r->clk.idle++;
    if (timed)
        run_wait_locked(r, seconds);
    else
        pthread_cond_wait(&r->cv, &r->mu);
    r->clk.idle--;
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
        ssp_idle_wait_locked(r, 0, 0);
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
        ssp_idle_wait_locked(r, 1, until - gt_ssp_clock());
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
     * it, so the store stands still from one apply to the next: its device computes on the copy
     * that the applies keep for it, as sync's lone worker does (clocked_copy_pull).
     * With several workers on one host a GPU uploads straight from the store: its load reads
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
        clocked_copy_pull(r, w);
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
        /* A halt leaves no clock half applied: in parts an apply may have begun before every
         * share was in, and the shares still computing land and finish it. */
        if (r->clk.applied >= r->clk.clocks ||
            (r->halt && (r->clk.apply_parts == 0 || r->failed)))
            break;
        ssp_idle_wait_locked(r, 0, 0);
    }
    w->wait_s += gt_now() - t - (worker_phases_s(w) - busy);
    pthread_mutex_unlock(&r->mu);
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
    if (clocked_parts_init(r, e) != 0)
        return -1;
    return clocked_start_store_threads(r, e);
}

const gt_mode_ops gt_mode_ssp = {
    .worker_state = sizeof(ssp_worker),
    .free = clocked_parts_free,
    .rollback = ROLLBACK_NOW,
    .hosts_rounds = 1,
    .hosts_average = 1,
    .init = ssp_init,
    .clock = ssp_clock,
    .clocked_end = ssp_drain,
    .slot_shares = 1,
    .share_done = clocked_slot_store,
    .share_compute = clocked_share_compute,
    .apply_ready_locked = ssp_apply_ready_locked,
    .epoch_reset = clocked_parts_epoch_reset,
};
