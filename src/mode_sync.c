/* mode_sync.c - sync: every worker computes its share of a clock on the same parameters; the
 * summed gradient (summed over the hosts too) is applied once, split by stripe across the live
 * workers, between two barriers. Bit-reproducible whatever the thread timing. */
#include "run.h"
#include "gputrain/cluster.h"

/* Leader work after the apply: the clock is done; due jobs and signals are seen here. The guard
 * acts here too, where no worker computes: the workers read the store in place during a clock
 * (sync_clock), so a rollback restores it, or a good point copies it, only between clocks. */
static void sync_after_apply_leader(run *r)
{
    if (r->guard.pending)
        guard_at_barrier_locked(r);
    else if (guard_save_wanted_locked(r))
        guard_saved_locked(r, atomic_load(&r->ps.updates) + 1, 0);
    r->guard.save_wanted = 0;
    uint64_t c = r->clk.applied;
    clocked_apply_end_locked(r, c);
    clocked_fold_stats_locked(r, c);
    gt_ps_note_staleness(&r->ps, 0);
    r->clk.claimed[c % (uint64_t)r->clk.R] = 0;
    r->clk.deposited[c % (uint64_t)r->clk.R] = 0;
    r->clk.applied = c + 1;
    atomic_fetch_add(&r->ps.updates, 1);
    jobs_post_due_locked(r, r->clk.applied);
    if (stop_asked(r))
        r->halt = 1;
}

/* sync across hosts: the clock's gradient, summed over this host's shares, is summed over the
 * hosts, so every host applies the same update to its store; and the hosts agree on stopping. */
static void sync_hosts_leader(run *r)
{
    gt_err e = {{0}};
    if (r->failed)
        return;
    int sig = -1;
    if (gt_cluster_sum_floats(clocked_slot(r, r->clk.applied, 0), r->n, "the sync gradient", &e) == 0)
        sig = hosts_stop_signal(&e);
    hosts_agreed_locked(r, sig, &e);
}

/* sync in parts: the parts of the clock whose gradients are all in (clocked_apply.c). Caller
 * holds r->mu, released during each part. */
static void sync_apply_ready_locked(run *r, worker *w)
{
    while (clocked_apply_begin_locked(r) && clocked_apply_one_locked(r, w))
        ;
}

/* One clock of sync mode: everyone computes on the same parameters; the summed gradient is
 * applied, split by stripe across the live workers, between two barriers. A share whose worker
 * failed during the clock is taken by a survivor after the first barrier. In parts (the store
 * step in parts, one host) each part is applied as soon as every share's gradient of it has
 * landed, by a worker waiting at the first barrier or the one whose part completed it, beside the
 * backwards still running; the parts left are shared after the barrier. Every worker's upload
 * has ended before any part lands (a step's forward waits for all of it), so the workers still
 * compute on the clock's parameters.
 * The store stands still from the barrier after one apply until every share of the next clock
 * is in (the applies wait for them at a barrier), so the workers compute on it in place, with no
 * pull into their own buffers: a GPU uploads straight from the pinned store, the CPU reads it. A
 * lone worker computes on the copy the applies keep for it (clocked_copy_pull).
 * The worker's phases: the upload is its pull, the shares its device (and push: the slot), the
 * applies its push, the barriers its wait (run_barrier). */
static int sync_clock(run *r, worker *w, uint64_t c)
{
    gt_device *d = w->dev;
    gt_err e = {{0}};
    float *own = d->params;
    double t0 = gt_now();
    clocked_copy_pull(r, w);
    int bad = d->ops->load_params(d, &e);
    w->pull_s += gt_now() - t0;
    if (bad) {
        d->params = own;
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    int filled = clocked_fill(r, w, c);
    d->params = own;
    if (filled <= 0)
        return filled;
    if (r->store_parts) {
        pthread_mutex_lock(&r->mu);
        sync_apply_ready_locked(r, w);
        pthread_mutex_unlock(&r->mu);
        run_barrier(r, w, sync_after_apply_leader);
        return 0;
    }
    double t1 = gt_now();
    int s_lo, s_hi, nlive;
    clocked_my_stripes(r, w, &s_lo, &s_hi, &nlive);
    /* Stable until the barrier after the apply: every share of the clock is in. */
    uint64_t t = atomic_load(&r->ps.updates) + 1;
    /* The mean over every host's shares: all hosts apply the same sum. */
    run_lr lr = run_lr_now(r, 0, r->Wg);
    if (r->H == 1) {
        clocked_apply(r, c, s_lo, s_hi, lr.gscale, t, lr.epoch);
        w->push_s += gt_now() - t1;
    } else {
        /* Sum this host's shares, then the hosts' sums; apply what is then in slot 0 once. */
        clocked_reduce_slots(r, c, s_lo, s_hi);
        w->push_s += gt_now() - t1;
        run_barrier(r, w, sync_hosts_leader);
        double t2 = gt_now();
        gt_ps_apply_stripes(&r->ps, s_lo, s_hi, clocked_slot(r, c, 0), lr.gscale, t, lr.epoch);
        w->push_s += gt_now() - t2;
    }
    run_barrier(r, w, sync_after_apply_leader);
    return 0;
}

static int sync_init(run *r, gt_device **devices, const gt_start *start, gt_err *e)
{
    (void)devices;
    (void)start;
    if (clocked_init(r, 1, 1, e) != 0)
        return -1;
    if (clocked_parts_init(r, e) != 0)
        return -1;
    return clocked_start_store_threads(r, e);
}

const gt_mode_ops gt_mode_sync = {
    .free = clocked_parts_free,
    .rollback = ROLLBACK_AT_BARRIER,
    .init = sync_init,
    .clock = sync_clock,
    .slot_shares = 1,
    .share_done = clocked_slot_store,
    .share_compute = clocked_share_compute,
    .apply_ready_locked = sync_apply_ready_locked,
    .epoch_reset = clocked_parts_epoch_reset,
};
