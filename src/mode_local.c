/* mode_local.c - local SGD: each worker steps its own replica with its own optimizer state, and
 * the live replicas are averaged into the store every --sync-every clocks and at epoch ends
 * (across hosts, then averaged over the hosts). */
#include "run.h"

#include <string.h>

/* The run's (r->own) and a worker's (w->own). */
typedef struct local_run {
    uint64_t done;             /* clocks done when the averaging in progress began */
} local_run;

typedef struct local_worker {
    float *state[2];           /* the replica's optimizer state */
    uint64_t updates;          /* the replica's updates (Adam's t) */
} local_worker;

static local_run *lrun(const run *r) { return r->own; }
static local_worker *lw(const worker *w) { return w->own; }

/* ROLLBACK_AT_AVERAGE, in the averaging barrier's leader, where every replica waits: the rollback
 * a trip left pending, with the replicas' optimizer state cleared (they pull the restored store
 * next). Caller holds r->mu. */
static void local_rollback_locked(run *r)
{
    if (!guard_pending_locked(r))
        return;
    for (int i = 0; i < r->W; i++)
        for (int k = 0; k < r->ps.nstate; k++)
            memset(lw(&r->workers[i])->state[k], 0, r->n * sizeof(float));
    guard_at_barrier_locked(r);
}

static void local_free(run *r)
{
    for (int i = 0; r->workers && i < r->W; i++)
        if (lw(&r->workers[i])) {
            gt_free(lw(&r->workers[i])->state[0]);
            gt_free(lw(&r->workers[i])->state[1]);
        }
}

/* local mode: after the second averaging barrier the store holds the host's average; across
 * hosts it becomes the average of the hosts' (every host has as many replicas, so this is the
 * mean of all replicas) before anyone pulls it. */
static void local_average_leader(run *r)
{
    for (uint64_t c = r->clk.applied; c < lrun(r)->done; c++)
        r->clk.claimed[c % (uint64_t)r->clk.R] = r->clk.deposited[c % (uint64_t)r->clk.R] = 0;
    r->clk.applied = lrun(r)->done;
    atomic_store(&r->ps.updates, r->clk.updates0 + r->clk.applied);
    local_rollback_locked(r); /* every replica waits here */
    if (r->H > 1 && !r->failed) {
        gt_err e = {{0}};
        int sig = hosts_round(r, &e);
        hosts_agreed_locked(r, sig, &e);
    }
    jobs_post_due_locked(r, r->clk.applied);
    if (stop_asked(r))
        r->halt = 1;
}

unsigned local_span(const run *r, uint64_t c)
{
    uint64_t k = (uint64_t)r->cfg->sync_every, m = (c + 1) % k;
    return (unsigned)(m ? m : k);
}

/* worker_pull, timed as the worker's pull. */
static int local_pull(run *r, worker *w)
{
    double t0 = gt_now();
    int rc = worker_pull(r, w);
    w->pull_s += gt_now() - t0;
    return rc;
}

/* Averages the live replicas into the store, stripes split across the live workers, and pulls
 * the average back. First every share of the interval must be in: a share a failed worker left is
 * trained by a survivor. Optimizer state stays with each replica, as in Darknet. */
static int local_average(run *r, worker *w, uint64_t upto)
{
    int filled = clocked_fill(r, w, upto);
    if (filled <= 0)
        return filled;
    pthread_mutex_lock(&r->mu);
    lrun(r)->done = upto + 1;
    pthread_mutex_unlock(&r->mu);
    /* The worker's phases: the copies and its stripes' mean are its push, the barriers its wait
     * (run_barrier), the average's way back to the device its pull. */
    double t0 = gt_now();
    memcpy(clocked_slot(r, 0, w->index), w->dev->params, r->n * sizeof(float));
    w->push_s += gt_now() - t0;
    run_barrier(r, w, NULL);
    double t1 = gt_now();
    int s_lo, s_hi, nlive;
    size_t lo, hi;
    clocked_my_stripes(r, w, &s_lo, &s_hi, &nlive);
    gt_ps_stripes_span(&r->ps, s_lo, s_hi, &lo, &hi);
    float *dst = clocked_slot(r, 0, w->index);
    for (size_t i = lo; i < hi; i++) {
        double sum = 0;
        for (int s = 0; s < r->W; s++)
            if (atomic_load(&r->workers[s].alive))
                sum += clocked_slot(r, 0, s)[i];
        dst[i] = (float)(sum / nlive);
    }
    gt_ps_store_stripes(&r->ps, s_lo, s_hi, dst, local_span(r, upto));
    w->push_s += gt_now() - t1;
    run_barrier(r, w, local_average_leader);
    return local_pull(r, w);
}

/* One clock of local mode: a local step on the worker's own share of the clock, and on shares a
 * failed worker left in this averaging interval. */
static int local_clock(run *r, worker *w, uint64_t c)
{
    if (clocked_claim_and_compute(r, w, c) != 0)
        return -1;
    if ((c + 1) % (uint64_t)r->cfg->sync_every == 0 || c + 1 == r->clk.clocks)
        return local_average(r, w, c);
    return 0;
}

/* share_done of local mode: one step of the worker's own replica with its own optimizer state
 * (a dropped gradient, --on-nan skip, takes none). */
static int local_step(run *r, worker *w, uint64_t clock, int share, int rc)
{
    (void)clock;
    (void)share;
    if (rc != 0)
        return 0;
    gt_err e = {{0}};
    double t0 = gt_now(); /* the step is the worker's push, the upload its pull */
    run_lr lr = run_lr_now(r, ++lw(w)->updates, 1);
    gt_optim_apply_at(&r->cfg->optim, &lr.st, 0, w->dev->params, w->dev->grad, lr.gscale,
                      lw(w)->state[0], lw(w)->state[1], r->n, 0);
    /* The replicas share one set of running statistics, the store's (the parameters' average
     * would be theirs; the statistics of every replica's batches are). */
    gt_ps_push_stats(&r->ps, w->dev->stats);
    double t1 = gt_now();
    int bad = w->dev->ops->load_params(w->dev, &e);
    w->push_s += t1 - t0;
    w->pull_s += gt_now() - t1;
    if (bad) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    return 0;
}

/* Each epoch starts from the store, where the last averaging left the replicas' mean. */
static int local_begin(run *r, worker *w) { return local_pull(r, w); }

/* One averaging interval of clocks in flight, one slot ring to average the replicas in; each
 * replica has its own optimizer state, resumed at the store's update count. */
static int local_init(run *r, gt_device **devices, const gt_start *start, gt_err *e)
{
    (void)devices;
    int every = r->cfg->sync_every < (int)r->clk.clocks ? r->cfg->sync_every : (int)r->clk.clocks;
    if (clocked_init(r, every, 1, e) != 0)
        return -1;
    for (int i = 0; i < r->W; i++) {
        worker *w = &r->workers[i];
        for (int k = 0; k < r->ps.nstate; k++)
            if (!(lw(w)->state[k] = gt_alloc(r->n * sizeof(float))))
                return gt_fail(e, "out of memory for local optimizer state");
        if (start->resumed)
            lw(w)->updates = start->resumed->updates;
    }
    return 0;
}

const gt_mode_ops gt_mode_local = {
    .run_state = sizeof(local_run),
    .worker_state = sizeof(local_worker),
    .free = local_free,
    .rollback = ROLLBACK_AT_AVERAGE,
    .hosts_rounds = 1,
    .init = local_init,
    .clocked_begin = local_begin,
    .clock = local_clock,
    .share_done = local_step,
};
