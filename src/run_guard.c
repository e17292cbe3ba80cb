/* run_guard.c - the divergence and stall guard of a run (guard.h) and what it acts on.
 *
 * Every step's loss reaches guard_observe_locked under r->mu (worker_account_step_locked; a
 * non-finite one from worker_check). A healthy window copies the store into r->guard.good; a trip
 * rolls the store back to it, stripe by stripe under the stripe locks, and lowers the step-size
 * factor r->guard.scale, which every gradient is scaled by from then on (for SGD, the step size).
 * How a trip is acted on is the mode's (gt_mode_ops.rollback): hogwild restores without pausing
 * (a push in flight lands on the restored store like any stale gradient); sync's workers read the
 * store in place while they compute, so sync saves and restores in the leader of the barrier
 * after each clock's apply, where none computes; in ssp an apply running meanwhile meets each stripe before
 * or after its restore; local replicas hold their own parameters, so there the rollback waits for
 * the next average, where every worker waits; allreduce's store is current only when worker 0
 * brings its replica there, so a good window asks worker 0 for a copy and a trip waits for the
 * mode's next barrier, where every replica reloads the restored store; any run across hosts
 * stops. */
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Between two copies of a good store: GUARD_SAVE_EVERY updates at least, and GUARD_SAVE_SPACING
 * times what the last copy cost, so that copies take at most 1/GUARD_SAVE_SPACING of the run's
 * time. resnet18 on 4 GPUs: a copy (parameters and momentum from GPU 0 into the store, then the
 * store's copy, 43 ms) every 100-odd updates of 2.7 ms held every GPU up 13% of the time; at 50
 * times its cost, 2%; with the store's copies plain copies under the stripe locks, 1% keeps a
 * rollback's reach about where it was. */
enum { GUARD_SAVE_EVERY = 100, GUARD_SAVE_SPACING = 100 };

/* Whether a trip may roll back (else it stops the run): --on-diverge recover and one host. */
static int guard_can_recover(const run *r)
{
    return r->cfg->on_diverge == GT_DIVERGE_RECOVER && r->H == 1;
}

/* Sets the guard up once the store holds the starting point, which is the first good one. */
int guard_init(run *r, gt_err *e)
{
    gt_guard_cfg gc;
    gt_guard_defaults(&gc, r->data->train.nclasses);
    /* Losses arrive per worker step: a stall is stall_steps steps of each worker, and the
     * warm-up's steps at chance are expected. */
    gc.grace_steps = (uint64_t)((double)r->cfg->optim.warmup_epochs * r->ntrain / r->batch);
    gc.stall_steps *= (uint64_t)r->W;
    gt_guard_init(&r->guard.g, &gc);
    atomic_init(&r->guard.scale, 1.0f);
    if (!guard_can_recover(r))
        return 0; /* it stops the run instead: no copy to keep */
    if (gt_ps_saved_alloc(&r->guard.good, &r->ps, e) != 0)
        return -1;
    guard_saved_locked(r, atomic_load(&r->ps.updates), 0);
    return 0;
}

void guard_free(run *r) { gt_ps_saved_free(&r->guard.good); }

/* The factor every gradient is scaled by: 1 until the guard lowers it. */
float guard_scale(run *r) { return atomic_load(&r->guard.scale); }

/* Puts the good store back and lowers the step size. Caller holds r->mu. */
static void guard_rollback_locked(run *r, gt_guard_verdict v)
{
    gt_ps_restore(&r->ps, &r->guard.good);
    r->guard.restores++; /* a worker or replica that keeps parameters between steps reloads */
    gt_guard_recovered(&r->guard.g, r->nlive * (r->cfg->overlap ? 2 : 1));
    atomic_store(&r->guard.scale, (float)r->guard.g.lr_scale);
    char action[128];
    snprintf(action, sizeof action, "rolled back to update %llu and lowered the step size (lr x%g)",
             (unsigned long long)r->guard.good_step, r->guard.g.lr_scale);
    report_guard(r, gt_guard_verdict_name(v), action, 1);
}

/* Ends the run with the verdict and why it could not roll back. Caller holds r->mu. */
static void guard_stop_locked(run *r, gt_guard_verdict v)
{
    const gt_guard *g = &r->guard.g;
    char msg[GT_ERRLEN], why[64];
    if (r->cfg->on_diverge == GT_DIVERGE_STOP)
        snprintf(why, sizeof why, "--on-diverge stop");
    else if (gt_guard_exhausted(g))
        snprintf(why, sizeof why, "%d rollbacks did not help", g->recoveries);
    else
        snprintf(why, sizeof why, "no rollback across hosts");
    int finite = isfinite(g->last_mean);
    snprintf(msg, sizeof msg, "%s at update %llu (%s%sloss %.4g, chance %.4g): stopped the run "
             "(%s); lower --lr or --momentum", gt_guard_verdict_name(v),
             (unsigned long long)atomic_load(&r->ps.updates), finite ? "" : r->guard.note,
             finite ? "" : "; ", g->last_mean, g->cfg.chance_loss, why);
    report_guard(r, gt_guard_verdict_name(v), "stopped the run", 0);
    if (!r->failed)
        r->failed_first = 1;
    run_fail_locked(r, msg);
}

/* A slow start (gt_guard_slow_start): say so, and let the run go on with more patience. */
static void guard_wait_locked(run *r)
{
    gt_guard_wait_longer(&r->guard.g);
    char action[160];
    snprintf(action, sizeof action, "near chance since the start but falling, nothing better to "
             "roll back to: waiting up to %llu more steps",
             (unsigned long long)r->guard.g.cfg.stall_steps);
    report_guard(r, gt_guard_verdict_name(GT_GUARD_STALLED), action, 1);
}

static void guard_trip_locked(run *r, gt_guard_verdict v)
{
    int recover = guard_can_recover(r) && !gt_guard_exhausted(&r->guard.g);
    if (recover && v == GT_GUARD_STALLED && gt_guard_slow_start(&r->guard.g))
        guard_wait_locked(r);
    else if (!recover)
        guard_stop_locked(r, v);
    else if (r->ops->rollback != ROLLBACK_NOW)
        r->guard.pending = (int)v;
    else
        guard_rollback_locked(r, v);
}

/* One step's mean loss. Caller holds r->mu. */
void guard_observe_locked(run *r, double loss)
{
    if (r->guard.pending || r->failed || (!isfinite(loss) && r->cfg->on_nan == GT_NAN_SKIP))
        return;
    gt_guard_verdict v = gt_guard_observe(&r->guard.g, loss);
    uint64_t now = atomic_load(&r->ps.updates);
    if (v == GT_GUARD_GOOD) {
        /* A copy of the store costs a pass over parameters and state under r->mu (26 MB for
         * cnn-wide), and allreduce's first brings GPU 0's into the store: keep one as often as
         * GUARD_SAVE_EVERY and GUARD_SAVE_SPACING allow, and none where no rollback can use it. */
        if (guard_can_recover(r) && now - r->guard.good_step >= GUARD_SAVE_EVERY &&
            gt_now() - r->guard.saved_at >= GUARD_SAVE_SPACING * r->guard.save_cost_s) {
            if (r->ops->rollback == ROLLBACK_AT_BARRIER)
                r->guard.save_wanted = 1;
            else
                guard_saved_locked(r, now, 0);
        }
    } else if (v != GT_GUARD_OK) {
        guard_trip_locked(r, v);
    }
}

/* A non-finite loss or gradient (msg says which): unless --on-nan was given, the guard takes it,
 * and the step's gradient is dropped. Returns 1 when the guard took it, 0 for --on-nan's action. */
int guard_nonfinite(run *r, const char *msg)
{
    if (r->cfg->on_nan != GT_NAN_STOP || (r->cfg->given & GT_GIVEN_ON_NAN))
        return 0;
    pthread_mutex_lock(&r->mu);
    snprintf(r->guard.note, sizeof r->guard.note, "%.200s", msg);
    guard_observe_locked(r, NAN);
    pthread_mutex_unlock(&r->mu);
    return 1;
}

/* ROLLBACK_AT_BARRIER: whether a good window asked for a copy of the store, which the mode brings
 * up to date first and then hands to guard_saved_locked. Caller holds r->mu. */
int guard_save_wanted_locked(run *r) { return r->guard.save_wanted; }

/* ROLLBACK_AT_AVERAGE and _AT_BARRIER: whether a trip left a rollback for the mode's barrier.
 * Caller holds r->mu. */
int guard_pending_locked(run *r) { return r->guard.pending; }

/* The store, current as of update `step`, becomes the last good point; since: gt_now() when the
 * mode began to bring the store up to date for it (0: it was). Caller holds r->mu. */
void guard_saved_locked(run *r, uint64_t step, double since)
{
    double t = gt_now();
    gt_ps_save(&r->ps, &r->guard.good);
    r->guard.saved_at = gt_now();
    r->guard.save_cost_s = r->guard.saved_at - (since > 0 ? since : t);
    r->guard.good_step = step;
    r->guard.save_wanted = 0;
}

/* ROLLBACK_AT_BARRIER (and, after its own step, ROLLBACK_AT_AVERAGE), in the leader of the mode's
 * barrier, where every replica waits: the rollback a trip left pending. The store holds the good
 * point's parameters and optimizer state afterwards, and r->guard.restores moves, which tells each
 * replica to reload it. Caller holds r->mu. */
void guard_at_barrier_locked(run *r)
{
    if (!r->guard.pending)
        return;
    guard_rollback_locked(r, (gt_guard_verdict)r->guard.pending);
    r->guard.pending = 0;
}

/* A run that ends at chance accuracy says so (and fails under --on-diverge stop). */
int guard_final(run *r, const gt_run_result *res, gt_err *e)
{
    if (r->host != 0 || res->npoints == 0 ||
        !gt_guard_acc_at_chance(res->final_test_acc, r->data->train.nclasses))
        return 0;
    char action[96];
    snprintf(action, sizeof action, "the run ended at chance accuracy %.4f", res->final_test_acc);
    const gt_guard_cfg *gc = &r->guard.g.cfg;
    if (r->guard.g.steps < gc->grace_steps + gc->stall_steps) {
        /* Too short for a verdict: the guard had not watched a stall's length of steps, and a
         * short run at chance says nothing about the step size. Said, not judged. */
        char note[256];
        snprintf(note, sizeof note, "%s after %llu steps, too few for the guard to judge (it "
                 "watches %llu)", action, (unsigned long long)r->guard.g.steps,
                 (unsigned long long)(gc->grace_steps + gc->stall_steps));
        report_note(r, note);
        return 0;
    }
    r->guard.g.last_mean = res->final_test_loss; /* what the line and the record report */
    if (r->cfg->on_diverge == GT_DIVERGE_STOP) {
        report_guard(r, gt_guard_verdict_name(GT_GUARD_STALLED), action, 0);
        return gt_fail(e, "stalled: %s: stopped the run (--on-diverge stop); lower --lr or --momentum, "
                       "or add --warmup", action);
    }
    report_guard(r, gt_guard_verdict_name(GT_GUARD_STALLED), action, 1);
    return 0;
}
