/* mode_ssp.c - stale-synchronous parallel: a worker runs at most --staleness clocks ahead of the
 * oldest unapplied clock and computes on whatever the store holds; whoever completes the oldest
 * clock applies it, in clock order. */
#include "run.h"

#include <stdint.h>

/* ssp: whoever finds the oldest clock complete applies it, in clock order. Caller holds r->mu,
 * which is released during each apply (the applying flag keeps it to one thread at a time). */
static void ssp_apply_ready_locked(run *r)
{
    while (!r->clk.applying && r->clk.deposited[r->clk.applied % (uint64_t)r->clk.R] == clocked_full_mask(r)) {
        uint64_t c = r->clk.applied, k = c % (uint64_t)r->clk.R;
        r->clk.applying = 1;
        uint64_t t = atomic_load(&r->ps.updates) + 1;
        double ep = run_progress_epochs(r, atomic_load(&r->stats.samples_total));
        /* The mean over this host's shares: its store is averaged with the others'. Across
         * hosts, a round every --sync-every clocks; the epoch's last round is left to its end. */
        int round = r->H > 1 && !r->halt && (c + 1) % (uint64_t)r->cfg->sync_every == 0 &&
                    c + 1 < r->clk.clocks;
        gt_err e = {{0}};
        int sig = 0;
        pthread_mutex_unlock(&r->mu);
        clocked_apply(r, c, 0, r->ps.nranges, guard_scale(r) / (float)r->W, t, ep);
        if (round)
            sig = hosts_round(r, &e);
        pthread_mutex_lock(&r->mu);
        hosts_agreed_locked(r, sig, &e);
        atomic_store(&r->ps.updates, t);
        gt_ps_note_staleness(&r->ps, c - r->clk.slot_read_clock[k]);
        r->clk.claimed[k] = r->clk.deposited[k] = 0;
        r->clk.slot_read_clock[k] = UINT64_MAX;
        r->clk.applied = c + 1;
        r->clk.applying = 0;
        jobs_post_due_locked(r, r->clk.applied, (uint64_t)r->epoch * r->clk.clocks + r->clk.applied);
        pthread_cond_broadcast(&r->cv);
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

/* Waits until at most --staleness clocks before c are unapplied. Meanwhile the worker trains any
 * share that a failed worker left in the clocks in flight: the survivors may all be waiting for
 * the clock it left, and nobody else would. Caller holds r->mu; -1 (r->mu released) when the
 * worker failed. */
static int ssp_wait_locked(run *r, worker *w, uint64_t c)
{
    uint64_t s = (uint64_t)r->clk.R - 1; /* --staleness: the slots hold R = staleness + 1 clocks */
    while (!r->halt && r->clk.applied + s < c) {
        uint64_t cc;
        int share = clocked_claim_share_locked(r, w, c - 1, &cc);
        if (share < 0) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        pthread_mutex_unlock(&r->mu);
        if (clocked_share(r, w, cc, share) != 0)
            return -1;
        pthread_mutex_lock(&r->mu);
        ssp_apply_ready_locked(r);
    }
    return 0;
}

/* One clock of ssp: wait until at most `staleness` clocks are unapplied, compute on whatever the
 * store holds, deposit; whoever completes the oldest clock applies it. */
static int ssp_clock(run *r, worker *w, uint64_t c)
{
    double t = gt_now();
    pthread_mutex_lock(&r->mu);
    if (ssp_wait_locked(r, w, c) != 0)
        return -1;
    w->wait_s += gt_now() - t;
    if (r->halt) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    w->clock = c;
    uint64_t spread = c - slowest_clock_locked(r);
    if (spread > r->clk.spread_max)
        r->clk.spread_max = spread;
    uint64_t *read_at = &r->clk.slot_read_clock[c % (uint64_t)r->clk.R];
    if (r->clk.applied < *read_at)
        *read_at = r->clk.applied;
    pthread_mutex_unlock(&r->mu);
    if (worker_pull(r, w) != 0 || clocked_claim_and_compute(r, w, c) != 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    w->clock = c + 1;
    ssp_apply_ready_locked(r);
    if (stop_asked(r)) {
        r->halt = 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* The epoch's end: help finish shares of clocks that are still open, then wait for all applies. */
static int ssp_drain(run *r, worker *w, uint64_t done)
{
    (void)done;
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
        ssp_apply_ready_locked(r);
        if (r->halt || r->clk.applied >= r->clk.clocks)
            break;
        pthread_cond_wait(&r->cv, &r->mu);
    }
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
    return clocked_start_store_threads(r, e);
}

const gt_mode_ops gt_mode_ssp = {
    .rollback = ROLLBACK_NOW,
    .hosts_rounds = 1,
    .hosts_average = 1,
    .init = ssp_init,
    .epoch = clocked_epoch,
    .clock = ssp_clock,
    .clocked_end = ssp_drain,
    .share_done = clocked_slot_store,
    .epoch_complete_locked = clocked_epoch_complete_locked,
    .epoch_steps = clocked_epoch_steps,
    .stop_step = clocked_stop_step,
    .epoch_reset = clocked_epoch_reset,
};
